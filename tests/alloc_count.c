/*
 * tests/alloc_count.c: how many heap allocations ampc's own code makes
 * during training steps (the rule: no layer allocates during a step; the
 * layers take their scratch from the model's arena, the GEMM keeps its
 * workspace, the trainer its unscale sums).
 * Linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,
 * --wrap=aligned_alloc, so every such call from libampc.a's objects (not from
 * the shared libraries it uses: OpenBLAS, libgomp, cJSON) goes through the
 * counters below. Runs W warm-up steps of MODEL in PRESET on the bundled
 * emoji data through ampc_train_step, then counts N steps, and prints the
 * total and each call site (its offset in the executable: `addr2line -f -i -e
 * alloc_count OFFSET` names the function and line; bench/alloc/run.sh does).
 * As a test (CTest alloc_*), `--expect N` makes it exit 1 unless exactly N
 * allocations were counted. (Steps that sample the rounding telemetry are not
 * covered: the FP64 shadow GEMM and the counted FP32 staging still allocate.)
 *
 * Usage: alloc_count [MODEL (mm-tiny)] [PRESET (16-mixed)] [BATCH (16)] [W (2)] [N (3)]
 *                    [--expect COUNT]
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

enum { SITES = 256 };
static int g_on;
static struct {
  void *at;
  long calls;
  size_t bytes;
} g_site[SITES];
static long g_calls;
static size_t g_bytes;

static void note(void *at, size_t bytes) {
  if (!g_on)
    return;
  g_calls++, g_bytes += bytes;
  for (int i = 0; i < SITES; i++)
    if (g_site[i].at == at || !g_site[i].at) {
      g_site[i].at = at, g_site[i].calls++, g_site[i].bytes += bytes;
      return;
    }
}

void *__wrap_malloc(size_t n) {
  note(__builtin_return_address(0), n);
  return __real_malloc(n);
}
void *__wrap_calloc(size_t k, size_t n) {
  note(__builtin_return_address(0), k * n);
  return __real_calloc(k, n);
}
void *__wrap_realloc(void *p, size_t n) {
  note(__builtin_return_address(0), n);
  return __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
  note(__builtin_return_address(0), n);
  return __real_aligned_alloc(a, n);
}

typedef struct {
  ampc_batch b;
} fixed;
static ampc_status next(void *u, int64_t k, ampc_batch *out) {
  (void)k;
  *out = ((fixed *)u)->b;
  return AMPC_OK;
}

int main(int argc, char **argv) {
  long expect = -1;
  if (argc >= 3 && strcmp(argv[argc - 2], "--expect") == 0) {
    expect = atol(argv[argc - 1]);
    argc -= 2;
  }
  const char *model = argc > 1 ? argv[1] : "mm-tiny", *preset = argc > 2 ? argv[2] : "16-mixed";
  const int64_t B = argc > 3 ? atoll(argv[3]) : 16;
  const int W = argc > 4 ? atoi(argv[4]) : 2, N = argc > 5 ? atoi(argv[5]) : 3;
  ampc_dataset D;
  ampc_model_desc md;
  ampc_precision p;
  if (ampc_dataset_load_default(&D) != AMPC_OK || ampc_model_desc_get(model, &D, &md) != AMPC_OK ||
      ampc_precision_parse(preset, &p) != AMPC_OK) {
    fprintf(stderr, "alloc_count: %s\n", ampc_last_error());
    return 1;
  }
  ampc_amp_config amp;
  ampc_amp_config_preset(p, &amp);
  const ampc_optim_config opt = ampc_optim_adamw_defaults();
  ampc_mmodel_specs sp;
  ampc_trainer T;
  ampc_model M;
  if (ampc_model_specs(&md, &sp) != AMPC_OK ||
      ampc_trainer_init(&T, &amp, &opt, sp.specs, sp.n, 1) != AMPC_OK ||
      ampc_model_create(&M, &md, &T.params, &amp, B) != AMPC_OK) {
    fprintf(stderr, "alloc_count: %s\n", ampc_last_error());
    return 1;
  }
  const int64_t img = (int64_t)D.height * D.width * D.channels;
  uint8_t *im = malloc((size_t)(B * img));
  int32_t *tok = calloc((size_t)(B * (D.seq_len > 0 ? D.seq_len : 1)), sizeof *tok);
  int32_t *lab = malloc((size_t)B * sizeof *lab);
  for (int64_t r = 0, i = 0; r < B; i++)
    if (D.split[i] == AMPC_SPLIT_TRAIN) {
      memcpy(im + r * img, D.images + i * img, (size_t)img);
      memcpy(tok + r * D.seq_len, D.tokens + i * D.seq_len, (size_t)D.seq_len * sizeof *tok);
      lab[r++] = D.label[i];
    }
  fixed f = {{.b = B, .images = im, .tokens = tok, .labels = lab}};
  for (int s = 0; s < W + N; s++) {
    g_on = s >= W;
    ampc_losses L;
    ampc_step_info info;
    if (ampc_train_step(&T, &M, 1, next, &f, &L, &info) != AMPC_OK) {
      fprintf(stderr, "alloc_count: step %d: %s\n", s + 1, ampc_last_error());
      return 1;
    }
  }
  g_on = 0;
  printf("%s %s batch %lld, %d threads: %ld allocations (%zu bytes) in %d steps after %d warm-up\n",
         model, preset, (long long)B, ampc_get_num_threads(), g_calls, g_bytes, N, W);
  for (int i = 0; i < SITES && g_site[i].at; i++) {
    Dl_info di;
    const uintptr_t base = dladdr(g_site[i].at, &di) ? (uintptr_t)di.dli_fbase : 0;
    printf("  0x%lx  %ld calls  %zu bytes\n", (unsigned long)((uintptr_t)g_site[i].at - base - 1),
           g_site[i].calls, g_site[i].bytes);
  }
  ampc_model_free(&M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
  ampc_dataset_free(&D);
  free(im), free(tok), free(lab);
  if (expect >= 0 && g_calls != expect) {
    fprintf(stderr, "FAIL: %ld allocations during the steps, expected %ld\n", g_calls, expect);
    return 1;
  }
  return 0;
}
