/*
 * bench/gpu/gpu_train.c: the measurement of ampc's whole training step on a
 * device (step time and loss curves against the CPU), one JSON object per (model, preset) on
 * stdout:
 *
 *   gpu_train [--device cuda|cpu-split] [--steps N] [--warmup N]
 *             [--models vit-ref,mm-tiny,mm-base,mm-large] [--batch B] [--curve N]
 *             [--precision 32-true|16-mixed|bf16-mixed] [--profile] [--keep] [--typed]
 *             [--attention-cast] [--tune]
 *
 * --precision: that preset alone (default: the three).
 * --keep: the models keep the attention probabilities and x1 for the
 * backward pass (ampc train --recompute off) instead of recomputing them.
 * --typed: the layers' typed kernels (ampc_cuda_set_typed_kernels; the
 * generic kernels' bits, tests/test_cuda_nn.c test_typed, except the bias
 * gradient's sums, in an order of their own).
 * --tune: GEMM tuning (ampc_cuda_set_gemm_tuning: each GEMM shape's
 * algorithm chosen by timing cuBLASLt's candidates at its first call, in
 * the warm-up steps).
 * --attention-cast: the attention products take 16-bit operands (ampc train
 * --attention-cast on: other numerics, all six products on Tensor Cores).
 * --profile: the first timed step alone recorded by a profiler started with
 * --profile-from-start off (cudaProfilerStart / Stop around it).
 *
 * --curve N: instead, the loss-curve check (curves(), below) on the first
 * model of --models (batch 32 unless --batch).
 *
 * A step is what `ampc train --device cuda` does per iteration: zero_grad,
 * the forward pass (loss on the device, losses and accuracies read back),
 * the backward pass seeded with the loss scale, the trainer's step (unscale,
 * non-finite check, clip, AdamW on the FP32 master weights, the 16-bit copy
 * re-rounded, the scaler update), then a synchronize. The batch is random
 * with the bundled emoji data's shapes (32x32x3 images, 24-token captions of
 * vocab 3840, 9 groups; vit-ref 10 classes), as tests/reference/torch_step.py's.
 * Reported: ms per step (median of the timed steps, and all of them),
 * samples/s, the GEMM FLOPs of one step (counted by the CUDA context) and
 * their rate against the H200's dense peak (FP16/BF16 989 TFLOP/s; FP32
 * without Tensor Cores 67), the parameter table's and the activation
 * arena's bytes, the memory account's prediction (ampc memory --device
 * cuda: every role, device_scratch's allowance included) and the device
 * memory the run took
 * (cudaMemGetInfo after the timed steps minus before the run's own CUDA
 * context, made per run, existed: its cuBLASLt workspace and layer scratch
 * included, the CUDA runtime's own share not), and per timed step the
 * cuBLASLt calls and the host's waits for the stream with their
 * milliseconds (a step that hardly waits is bound by the host issuing its
 * kernels, not by the GPU: ampc_cuda_counters_get).
 * --device cpu-split runs the same code on the CPU (for checking this
 * driver where there is no GPU: no FLOP count or device memory there).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampc/ampc.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_nn.h"
#include "ampc/engine.h"
#include "ampc/report.h"

enum { VOCAB = 3840, SEQ = 24, GROUPS = 9 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --profile: the first timed step bracketed for a profiler started with
 * --profile-from-start off (bench/gpu/check.sh's Nsight Compute part) */
static int g_profile;

/* g_probe: a context held for the whole program (the device stays
 * initialised, cudaMemGetInfo works before a run's own context exists);
 * g_ctx: the context of one run, made and destroyed by run_one, so each
 * run's device memory (its cuBLASLt workspace and layer scratch, which a
 * context keeps until destroyed) is measured alone */
static ampc_cuda_ctx *g_probe, *g_ctx;

/* the run's context, after everything made on it is freed */
static void drop_ctx(void) {
  if (g_ctx) {
    ampc_cuda_bind(g_probe);
    ampc_cuda_destroy(g_ctx);
    g_ctx = NULL;
  }
}

/* --keep: the model keeps the attention probabilities and x1 (ampc train
 * --recompute off) */
static bool g_keep;
/* --attention-cast: ampc_mmodel_config.attn_cast */
static bool g_cast;

static int fail(const char *what) {
  fprintf(stderr, "gpu_train: %s: %s\n", what, ampc_last_error());
  return 1;
}

/* one run's timing object (one JSON line on stdout) */
static void print_run(const char *model, ampc_precision p, ampc_device dev, int64_t B,
                      const ampc_trainer *T, const ampc_mmodel *M, const ampc_mem_account *acct,
                      size_t pbytes, double med, const double *ms, int steps, uint64_t flops_step,
                      long long used, long long queries, long long skipped, float loss,
                      const ampc_cuda_counters *cn) {
  const double peak = p == AMPC_PRECISION_32_TRUE ? 67e12 : 989e12;
  const double tflops = med > 0 ? (double)flops_step / (med * 1e-3) / 1e12 : 0.0;
  printf("{\"model\":\"%s\",\"precision\":\"%s\",\"recompute\":%s,\"typed_kernels\":%s,"
         "\"attention_cast\":%s,\"gemm_tuning\":%s,"
         "\"device\":\"%s\","
         "\"batch\":%lld,"
         "\"parameters\":%lld,\"ms_per_step_median\":%.4f,\"samples_per_s\":%.2f,"
         "\"gemm_flop_per_step\":%llu,\"tflops\":%.3f,\"peak_tflops\":%.0f,\"mfu\":%.4f,"
         "\"param_bytes\":%zu,\"activation_bytes\":%zu,\"predicted_bytes\":%zu,"
         "\"predicted_device_scratch\":%zu,"
         "\"device_bytes_used\":%lld,\"gemm_plan_queries_timed\":%lld,\"skipped\":%lld,"
         "\"final_loss\":%.6g,\"matmuls_per_step\":%.1f,\"host_waits_per_step\":%.1f,"
         "\"host_wait_ms_per_step\":%.4f,\"gemm_plans_tuned\":%lld,\"ms_steps\":[",
         model, ampc_precision_name(p), g_keep ? "false" : "true",
         ampc_cuda_typed_kernels() ? "true" : "false", g_cast ? "true" : "false",
         ampc_cuda_gemm_tuning() ? "true" : "false", dev == AMPC_DEVICE_CUDA ? "cuda" : "cpu-split",
         (long long)B, (long long)T->params.numel, med, med > 0 ? (double)B / (med * 1e-3) : 0.0,
         (unsigned long long)flops_step, tflops, peak / 1e12, tflops * 1e12 / peak, pbytes,
         ampc_mmodel_activation_bytes(M), acct->total, acct->bytes[AMPC_MEM_DEVICE_SCRATCH], used,
         queries, skipped, (double)loss, (double)cn->matmuls / steps, (double)cn->waits / steps,
         cn->wait_s * 1e3 / steps, (long long)cn->tuned);
  for (int s = 0; s < steps; s++)
    printf("%s%.4f", s ? "," : "", ms[s]);
  printf("]}\n");
  fflush(stdout);
}

/* warmup + steps training steps of model under p on dev from init seed
 * `seed`; curve (NULL: print the timing object instead) receives each timed
 * step's loss (total, FP32) */
static int run_one(const char *model, ampc_precision p, int64_t B, int warmup, int steps,
                   ampc_device dev, uint64_t seed, float *curve) {
  ampc_mmodel_config c;
  const int64_t classes = strcmp(model, "vit-ref") == 0 ? 10 : GROUPS;
  if (ampc_mmodel_config_get(model, VOCAB, SEQ, classes, &c) != AMPC_OK)
    return fail("config");
  c.no_recompute = g_keep;
  c.attn_cast = g_cast;
  ampc_mmodel_specs sp;
  if (ampc_mmodel_specs_make(&c, &sp) != AMPC_OK)
    return fail("specs");
  ampc_amp_config amp;
  ampc_amp_config_preset(p, &amp);
  const ampc_optim_config opt = ampc_optim_adamw_defaults();
  size_t free0 = 0, free1 = 0, total = 0;
  if (dev == AMPC_DEVICE_CUDA) {
    if (ampc_cuda_mem_info(g_probe, &free0, &total) != AMPC_OK)
      return fail("cudaMemGetInfo");
    if (ampc_cuda_create(0, 0, &g_ctx) != AMPC_OK)
      return fail("context");
    ampc_cuda_bind(g_ctx);
  }
  ampc_trainer T;
  if (ampc_trainer_init(&T, &amp, &opt, sp.specs, sp.n, seed) != AMPC_OK)
    return fail("trainer");
  T.telemetry = false; /* the swallowed-update counts would make the step wait */
  ampc_mmodel *M = NULL;
  if (ampc_trainer_to_device(&T, dev) != AMPC_OK ||
      ampc_mmodel_create_on(&M, &c, ampc_trainer_params(&T), &amp, B, dev) != AMPC_OK)
    return fail("trainer or model on the device");
  const int64_t npix = B * c.img * c.img * c.channels;
  uint8_t *images = malloc((size_t)npix);
  int32_t *tokens = malloc((size_t)(B * SEQ) * sizeof *tokens);
  int32_t *labels = malloc((size_t)B * sizeof *labels);
  double *ms = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *ms);
  if (!images || !tokens || !labels || !ms)
    return fail("out of memory");
  ampc_rng r;
  ampc_rng_seed(&r, 7);
  for (int64_t i = 0; i < npix; i++)
    images[i] = (uint8_t)(ampc_rng_next(&r) % 256);
  for (int64_t b = 0; b < B; b++) {
    const int64_t len = 1 + (int64_t)(ampc_rng_next(&r) % SEQ);
    for (int64_t t = 0; t < SEQ; t++)
      tokens[b * SEQ + t] = t < len ? 1 + (int32_t)(ampc_rng_next(&r) % (VOCAB - 1)) : 0;
    labels[b] = (int32_t)(ampc_rng_next(&r) % (uint64_t)classes);
  }
  const ampc_mmodel_batch bt = {
      .b = B, .images = images, .tokens = c.image_only ? NULL : tokens, .labels = labels};
  ampc_mmodel_losses L = {0};
  int64_t skipped = 0, queries0 = 0;
  uint64_t flops0 = 0, flops_step = 0;
  ampc_cuda_counters cn0 = {0}, cn1 = {0};
  for (int s = -warmup; s < steps; s++) {
    if (s == 0 && dev == AMPC_DEVICE_CUDA) {
      ampc_cuda_gemm_cache_stats(g_ctx, &queries0, NULL);
      ampc_cuda_counters_get(g_ctx, &cn0);
      if (g_profile && ampc_cuda_profile_range(g_ctx, true) != AMPC_OK)
        return fail("cudaProfilerStart");
    }
    const double t0 = now_s();
    if (dev == AMPC_DEVICE_CUDA)
      flops0 = ampc_cuda_gemm_flops(g_ctx);
    ampc_trainer_zero_grad(&T);
    ampc_step_info info;
    if (ampc_mmodel_forward(M, &bt, &L) != AMPC_OK ||
        ampc_mmodel_backward(M, ampc_trainer_loss_scale(&T)) != AMPC_OK ||
        ampc_trainer_step(&T, &info) != AMPC_OK)
      return fail("step");
    if (dev == AMPC_DEVICE_CUDA && ampc_cuda_synchronize(g_ctx) != AMPC_OK)
      return fail("synchronize");
    const double t1 = now_s();
    if (s == 0 && g_profile && dev == AMPC_DEVICE_CUDA &&
        ampc_cuda_profile_range(g_ctx, false) != AMPC_OK)
      return fail("cudaProfilerStop");
    if (dev == AMPC_DEVICE_CUDA)
      flops_step = ampc_cuda_gemm_flops(g_ctx) - flops0;
    if (s >= 0) {
      ms[s] = (t1 - t0) * 1e3;
      skipped += info.skipped;
      if (curve)
        curve[s] = L.total;
    }
  }
  int64_t queries1 = 0;
  if (dev == AMPC_DEVICE_CUDA) {
    ampc_cuda_gemm_cache_stats(g_ctx, &queries1, NULL);
    ampc_cuda_counters_get(g_ctx, &cn1);
    if (ampc_cuda_mem_info(g_probe, &free1, &total) != AMPC_OK)
      return fail("cudaMemGetInfo");
  }
  double *sorted = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *sorted);
  memcpy(sorted, ms, (size_t)steps * sizeof *ms);
  qsort(sorted, (size_t)steps, sizeof *sorted, cmp_d);
  const double med = steps > 0 ? (steps % 2 ? sorted[steps / 2]
                                            : 0.5 * (sorted[steps / 2 - 1] + sorted[steps / 2]))
                               : 0.0;
  free(sorted);
  size_t pbytes = 0;
  for (int role = 0; role < AMPC_ROLE_COUNT; role++)
    pbytes += T.params.bytes[role];
  ampc_mem_account acct; /* ampc memory --device cuda's account of this run */
  if (ampc_mem_account_mm_on(&c, B, &amp, 2, dev, &acct) != AMPC_OK)
    return fail("memory account");
  /* the timed steps' counts (the last step's own synchronize included) */
  const ampc_cuda_counters cn = {.matmuls = cn1.matmuls - cn0.matmuls,
                                 .waits = cn1.waits - cn0.waits,
                                 .wait_s = cn1.wait_s - cn0.wait_s,
                                 .tuned = cn1.tuned}; /* over the run: the warm-up tunes */
  if (!curve)                                         /* with a curve the caller prints */
    print_run(model, p, dev, B, &T, M, &acct, pbytes, med, ms, steps, flops_step,
              dev == AMPC_DEVICE_CUDA ? (long long)(free0 - free1) : -1LL,
              (long long)(queries1 - queries0), (long long)skipped, L.total, &cn);
  ampc_mmodel_free(M);
  ampc_trainer_free(&T);
  drop_ctx();
  ampc_mmodel_specs_free(&sp);
  free(images), free(tokens), free(labels), free(ms);
  return 0;
}

/* The loss-curve check: n steps of model at batch B on dev (seed 1) and on
 * the CPU (seeds 1 and 2), one JSON object per preset with the three curves,
 * the largest |dev - cpu| over the steps, the seed-to-seed spread (the
 * largest |cpu seed 1 - cpu seed 2|) and whether the first is within the
 * second (the device passes when its curve is within the seed-to-seed
 * spread). */
static int curves(const char *model, int64_t B, int n, ampc_device dev) {
  static const ampc_precision presets[] = {AMPC_PRECISION_32_TRUE, AMPC_PRECISION_16_MIXED,
                                           AMPC_PRECISION_BF16_MIXED};
  float *g = malloc((size_t)n * 3 * sizeof *g);
  if (!g)
    return fail("out of memory");
  float *c1 = g + n, *c2 = g + 2 * n;
  int rc = 0;
  for (size_t k = 0; k < sizeof presets / sizeof *presets && !rc; k++) {
    rc = run_one(model, presets[k], B, 0, n, dev, 1, g);
    if (!rc)
      rc = run_one(model, presets[k], B, 0, n, AMPC_DEVICE_CPU, 1, c1);
    if (!rc)
      rc = run_one(model, presets[k], B, 0, n, AMPC_DEVICE_CPU, 2, c2);
    if (rc)
      break;
    double dmax = 0.0, spread = 0.0;
    for (int s = 0; s < n; s++) {
      const double d = fabs((double)g[s] - (double)c1[s]);
      dmax = d > dmax || d != d ? d : dmax; /* a NaN wins */
      const double e = fabs((double)c1[s] - (double)c2[s]);
      spread = e > spread ? e : spread;
    }
    printf("{\"curve\":\"%s\",\"precision\":\"%s\",\"device\":\"%s\",\"batch\":%lld,"
           "\"steps\":%d,\"max_abs_diff_vs_cpu\":%.6g,\"seed_spread_cpu\":%.6g,"
           "\"within_spread\":%s,\"loss_device\":[",
           model, ampc_precision_name(presets[k]), dev == AMPC_DEVICE_CUDA ? "cuda" : "cpu-split",
           (long long)B, n, dmax, spread, dmax <= spread ? "true" : "false");
    for (int s = 0; s < n; s++)
      printf("%s%.6g", s ? "," : "", (double)g[s]);
    printf("],\"loss_cpu\":[");
    for (int s = 0; s < n; s++)
      printf("%s%.6g", s ? "," : "", (double)c1[s]);
    printf("],\"loss_cpu_seed2\":[");
    for (int s = 0; s < n; s++)
      printf("%s%.6g", s ? "," : "", (double)c2[s]);
    printf("]}\n");
    fflush(stdout);
  }
  free(g);
  return rc;
}

int main(int argc, char **argv) {
  ampc_device dev = AMPC_DEVICE_CUDA;
  int steps = 10, warmup = 3, curve = 0;
  int64_t batch = 0;
  const char *only = NULL; /* --precision */
  const char *models = "vit-ref,mm-tiny,mm-base";
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(argv[i], "--device") && i + 1 < argc &&
        (!strcmp(v, "cuda") || !strcmp(v, "cpu-split")))
      dev = !strcmp(v, "cpu-split") ? AMPC_DEVICE_CPU_SPLIT : AMPC_DEVICE_CUDA, i++;
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(v), i++;
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
      warmup = atoi(v), i++;
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoll(v), i++;
    else if (!strcmp(argv[i], "--models") && i + 1 < argc)
      models = v, i++;
    else if (!strcmp(argv[i], "--profile"))
      g_profile = 1;
    else if (!strcmp(argv[i], "--keep"))
      g_keep = true;
    else if (!strcmp(argv[i], "--typed"))
      ampc_cuda_set_typed_kernels(true);
    else if (!strcmp(argv[i], "--attention-cast"))
      g_cast = true;
    else if (!strcmp(argv[i], "--tune"))
      ampc_cuda_set_gemm_tuning(true);
    else if (!strcmp(argv[i], "--curve") && i + 1 < argc)
      curve = atoi(v), i++;
    else if (!strcmp(argv[i], "--precision") && i + 1 < argc &&
             (!strcmp(v, "32-true") || !strcmp(v, "16-mixed") || !strcmp(v, "bf16-mixed")))
      only = v, i++;
    else {
      fprintf(stderr, "usage: gpu_train [--device cuda|cpu-split] [--steps N] [--warmup N] "
                      "[--models a,b] [--batch B] [--curve N] "
                      "[--precision 32-true|16-mixed|bf16-mixed] [--profile] [--keep] "
                      "[--typed] [--attention-cast] [--tune]\n");
      return 2;
    }
  }
  if (steps < 1 || warmup < 0) {
    fprintf(stderr, "gpu_train: --steps must be >= 1 and --warmup >= 0\n");
    return 2;
  }
  if (dev == AMPC_DEVICE_CUDA) {
    if (ampc_cuda_device_count() == 0) {
      fprintf(stderr, "gpu_train: no CUDA device: %s\n", ampc_cuda_unavailable_reason());
      return 1;
    }
    if (ampc_cuda_create(0, 0, &g_probe) != AMPC_OK)
      return fail("context");
    ampc_cuda_bind(g_probe);
  }
  static const ampc_precision presets[] = {AMPC_PRECISION_32_TRUE, AMPC_PRECISION_16_MIXED,
                                           AMPC_PRECISION_BF16_MIXED};
  char list[256];
  snprintf(list, sizeof list, "%s", models);
  int rc = 0;
  for (char *m = strtok(list, ","); m && !rc; m = strtok(NULL, ","))
    for (size_t k = 0; k < sizeof presets / sizeof *presets && !rc && !curve; k++) {
      if (only && strcmp(only, ampc_precision_name(presets[k])) != 0)
        continue;
      const int64_t B = batch > 0                                                 ? batch
                        : strcmp(m, "mm-base") == 0 || strcmp(m, "mm-large") == 0 ? 64
                                                                                  : 128;
      rc = run_one(m, presets[k], B, warmup, steps, dev, 1, NULL);
    }
  if (curve > 0 && !rc) { /* the first model of --models */
    snprintf(list, sizeof list, "%s", models);
    const char *m = strtok(list, ",");
    rc = m ? curves(m, batch > 0 ? batch : 32, curve, dev) : 2;
  }
  if (g_probe) {
    ampc_cuda_bind(NULL);
    ampc_cuda_destroy(g_probe);
  }
  return rc;
}
