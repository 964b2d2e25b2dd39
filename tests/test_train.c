/*
 * tests/test_train.c: the training run of include/ampc/train.h. The sampler
 * (each epoch a permutation, a function of (seed, epoch) only); a run on an
 * image-only dataset without tokens (the CLI once copied from its NULL token
 * array); a run split by --stop-at and resumed equals the uninterrupted one
 * bit for bit, and the library's step equals the run's; ampc_train_step's
 * micro-batch averaging; the errors of ampc_run_create and of the passes.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/ampc.h"

/* ---- the sampler -------------------------------------------------------------------- */

static void test_sampler_permutations(void **state) {
  (void)state;
  enum { N = 37 };
  ampc_sampler a, b;
  assert_int_equal(ampc_sampler_init(&a, N, 5), AMPC_OK);
  assert_int_equal(ampc_sampler_init(&b, N, 5), AMPC_OK);
  int64_t first[N];
  for (int e = 0; e < 4; e++) {
    int seen[N] = {0};
    int same_as_first = 1;
    for (int64_t j = 0; j < N; j++) {
      const int64_t i = ampc_sampler_index(&a, e * N + j);
      assert_true(i >= 0 && i < N);
      seen[i]++;
      if (e == 0)
        first[j] = i;
      else
        same_as_first = same_as_first && first[j] == i;
    }
    for (int i = 0; i < N; i++)
      assert_int_equal(seen[i], 1); /* a permutation */
    if (e > 0)
      assert_false(same_as_first); /* each epoch its own */
  }
  /* random access: the same index whatever was drawn before (resume) */
  for (int64_t j = 3 * N + 5; j >= 0; j -= 7)
    assert_int_equal(ampc_sampler_index(&b, j), ampc_sampler_index(&a, j));
  ampc_sampler c;
  assert_int_equal(ampc_sampler_init(&c, N, 6), AMPC_OK);
  int differ = 0;
  for (int64_t j = 0; j < N; j++)
    differ += ampc_sampler_index(&c, j) != ampc_sampler_index(&a, j);
  assert_true(differ > 0);
  ampc_sampler_free(&a), ampc_sampler_free(&b), ampc_sampler_free(&c);
  assert_int_equal(ampc_sampler_init(&a, 0, 1), AMPC_ERR_INVALID_ARG);
}

/* ---- runs --------------------------------------------------------------------------- */

/* an image-only dataset in memory: 28x28x1 images, 10 classes, no tokens */
typedef struct {
  ampc_dataset d;
  uint8_t images[40 * 28 * 28];
  int32_t label[40], concept[40];
  uint8_t split[40], style[40];
} fm_data;

static void make_fm(fm_data *f) {
  memset(f, 0, sizeof *f);
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof f->images; i++) {
    x = x * 1103515245u + 12345u;
    f->images[i] = (uint8_t)(x >> 24);
  }
  for (int i = 0; i < 40; i++) {
    f->label[i] = i % 10, f->concept[i] = i;
    f->split[i] = i < 32 ? AMPC_SPLIT_TRAIN : AMPC_SPLIT_TEST;
  }
  f->d = (ampc_dataset){.n = 40,
                        .height = 28,
                        .width = 28,
                        .channels = 1,
                        .n_classes = 10,
                        .images = f->images,
                        .tokens = NULL,
                        .label = f->label,
                        .concept = f->concept,
                        .split = f->split,
                        .style = f->style};
}

static ampc_run_config small_run(int64_t steps, int64_t batch) {
  ampc_run_config rc = ampc_run_config_defaults();
  rc.steps = steps, rc.batch = batch, rc.eval_every = 0, rc.telemetry_every = 2;
  return rc;
}

static ampc_optim_config adamw(int64_t steps) {
  ampc_optim_config o = ampc_optim_adamw_defaults();
  o.warmup_steps = 1, o.total_steps = steps;
  return o;
}

/* the image-only dataset and vit-fm's description for it (free the data) */
static fm_data *new_fm(ampc_model_desc *md) {
  fm_data *f = malloc(sizeof *f);
  assert_non_null(f);
  make_fm(f);
  assert_int_equal(ampc_model_desc_get("vit-fm", &f->d, md), AMPC_OK);
  return f;
}

static void test_image_only_data_without_tokens(void **state) {
  (void)state;
  ampc_model_desc md;
  fm_data *f = new_fm(&md);
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_BF16_MIXED, &amp);
  const ampc_run_config rc = small_run(3, 8);
  const ampc_optim_config opt = adamw(3);
  const ampc_run_data rd = {.dataset = &f->d, .name = "fm"};
  ampc_run *R = NULL;
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_OK);
  assert_int_equal(ampc_run_trainer(R)->iteration, 3);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_ERR_INVALID_ARG); /* once per run */
  char *s = ampc_run_summary_json(R);
  assert_non_null(s);
  assert_non_null(strstr(s, "\"test_samples\":8")); /* the 8 test images, evaluated at the end */
  free(s);
  ampc_run_free(R);
  /* the multimodal model refuses data without captions */
  assert_int_equal(ampc_model_desc_get("mm-micro", &f->d, &md), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "model mm-micro needs image-text pairs"));
  /* naming the image-only models its images fit */
  assert_non_null(strstr(ampc_last_error(), "(models for its 28x28x1 images: vit-fm)"));
  /* and so does the run, given a description made elsewhere */
  ampc_dataset shaped = f->d;
  shaped.vocab = 16, shaped.seq_len = 4, shaped.tokens = f->label; /* any non-NULL */
  shaped.height = shaped.width = 8, shaped.channels = 3;
  assert_int_equal(ampc_model_desc_get("mm-micro", &shaped, &md), AMPC_OK);
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "fm' has no captions"));
  assert_non_null(strstr(ampc_last_error(), "(models for its 28x28x1 images: vit-fm)"));
  free(f);
}

/* ---- several styles per concept --------------------------------------------------- */

/* mm-micro's data: 12 concepts in 3 styles, 8x8x3 images, 4 tokens of 16 */
enum { MS_C = 12, MS_S = 3, MS_N = MS_C * MS_S };
typedef struct {
  ampc_dataset d;
  uint8_t images[MS_N * 8 * 8 * 3];
  int32_t tokens[MS_N * 4], label[MS_N], concept[MS_N];
  uint8_t split[MS_N], style[MS_N];
  char *words[16], *style_names[MS_S];
} ms_data;

static void make_ms(ms_data *m) {
  memset(m, 0, sizeof *m);
  static char wbuf[16][4];
  for (int i = 0; i < 16; i++) {
    snprintf(wbuf[i], sizeof wbuf[i], "w%d", i);
    m->words[i] = wbuf[i];
  }
  static const char *sn[MS_S] = {"google", "openmoji", "twitter"};
  for (int k = 0; k < MS_S; k++)
    m->style_names[k] = (char *)sn[k];
  uint32_t x = 777;
  for (size_t i = 0; i < sizeof m->images; i++) {
    x = x * 1103515245u + 12345u;
    m->images[i] = (uint8_t)(x >> 24);
  }
  for (int i = 0; i < MS_N; i++) { /* style-major, as ampc data emoji writes */
    const int c = i % MS_C, st = i / MS_C;
    m->concept[i] = c, m->style[i] = (uint8_t)st, m->label[i] = c % 3;
    m->split[i] = st == 2 ? AMPC_SPLIT_NEW_STYLE : AMPC_SPLIT_TRAIN;
    for (int t = 0; t < 4; t++)
      m->tokens[i * 4 + t] = 2 + (c + 3 * t) % 14;
  }
  m->d = (ampc_dataset){.n = MS_N,
                        .height = 8,
                        .width = 8,
                        .channels = 3,
                        .seq_len = 4,
                        .vocab = 16,
                        .n_classes = 3,
                        .images = m->images,
                        .tokens = m->tokens,
                        .label = m->label,
                        .concept = m->concept,
                        .split = m->split,
                        .style = m->style,
                        .words = m->words,
                        .n_styles = MS_S,
                        .style_names = m->style_names};
}

static void test_styles_sampler(void **state) {
  (void)state;
  ms_data *m = malloc(sizeof *m);
  assert_non_null(m);
  make_ms(m);
  ampc_model_desc md;
  assert_int_equal(ampc_model_desc_get("mm-micro", &m->d, &md), AMPC_OK);
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &amp);
  ampc_run_config rc = small_run(4, MS_C);
  rc.eval = false;
  const ampc_optim_config opt = adamw(4);
  const ampc_run_data rd = {.dataset = &m->d, .name = "ms"};
  ampc_run *R = NULL, *R2 = NULL;
  /* a batch of 13 > 12 concepts would repeat one: refused */
  rc.batch = MS_C + 1;
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "training concepts (12)"));
  rc.batch = MS_C;
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_create(&R2, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  int per_style[MS_S] = {0, 0, 0};
  for (int64_t it = 0; it < 40; it++) {
    int64_t idx[MS_C], idx2[MS_C];
    int seen[MS_C] = {0};
    assert_int_equal(ampc_run_batch_samples(R, it, idx), AMPC_OK);
    assert_int_equal(ampc_run_batch_samples(R2, 39 - it, idx2), AMPC_OK); /* random access */
    for (int r = 0; r < MS_C; r++) {
      assert_true(idx[r] >= 0 && idx[r] < MS_N);
      assert_int_equal(m->split[idx[r]], AMPC_SPLIT_TRAIN); /* never the held-out style */
      seen[m->concept[idx[r]]]++;
      per_style[m->style[idx[r]]]++;
    }
    for (int c = 0; c < MS_C; c++)
      assert_int_equal(seen[c], 1); /* one image per concept: an epoch per batch here */
  }
  for (int64_t it = 0; it < 40; it++) { /* the same sequence, whatever the order asked */
    int64_t a[MS_C], b[MS_C];
    assert_int_equal(ampc_run_batch_samples(R, it, a), AMPC_OK);
    assert_int_equal(ampc_run_batch_samples(R2, it, b), AMPC_OK);
    assert_memory_equal(a, b, sizeof a);
  }
  /* both training styles are drawn, about equally (480 draws, p = 1/2: the
   * count is within 6 standard deviations, 65.7, of 240) */
  assert_int_equal(per_style[2], 0);
  assert_true(per_style[0] > 240 - 66 && per_style[0] < 240 + 66);
  assert_int_equal(per_style[0] + per_style[1], 40 * MS_C);
  ampc_run_free(R), ampc_run_free(R2);
  /* holding out another style moves the sampler to the other two */
  assert_int_equal(ampc_dataset_hold_out_style(&m->d, 0), AMPC_OK);
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  for (int64_t it = 0; it < 5; it++) {
    int64_t idx[MS_C];
    assert_int_equal(ampc_run_batch_samples(R, it, idx), AMPC_OK);
    for (int r = 0; r < MS_C; r++)
      assert_int_not_equal(m->style[idx[r]], 0);
  }
  ampc_run_free(R);
  /* training with shifts and sampled negatives: finite, and deterministic */
  rc.augment_shift = 2, rc.itm_sample_negatives = true;
  char *sum[2];
  for (int k = 0; k < 2; k++) {
    assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
    assert_int_equal(ampc_run_train(R, NULL), AMPC_OK);
    assert_int_equal(ampc_run_trainer(R)->iteration, 4);
    sum[k] = ampc_run_summary_json(R);
    assert_non_null(sum[k]);
    char *q = strstr(sum[k], "\"wall_s\""); /* cut the timings off */
    if (q)
      *q = '\0';
    q = strstr(sum[k], "\"ms_per_step_mean\"");
    if (q)
      *q = '\0';
    ampc_run_free(R);
  }
  assert_string_equal(sum[0], sum[1]);
  assert_null(strstr(sum[0], "nan"));
  free(sum[0]), free(sum[1]);
  free(m);
}

static int read_file(const char *path, char **out, long *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return 0;
  fseek(fp, 0, SEEK_END);
  *n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  *out = malloc((size_t)*n + 1);
  const int ok = *out && fread(*out, 1, (size_t)*n, fp) == (size_t)*n;
  fclose(fp);
  return ok;
}

/* runs of the MLP on blobs: interrupted at 3 and resumed equals 6 straight */
static void test_resume_is_exact(void **state) {
  (void)state;
  enum { IN = 8, NTR = 64, NTE = 16 };
  static float x[(NTR + NTE) * IN];
  static int32_t y[NTR + NTE];
  ampc_synth_blobs(NTR + NTE, IN, 3, 1.0f, 7, x, y);
  ampc_model_desc md;
  assert_int_equal(ampc_model_desc_get("mlp", NULL, &md), AMPC_OK);
  md.mlp = (ampc_mlp_config){.in = IN, .hidden = 16, .classes = 3};
  const ampc_run_data rd = {.n_train = NTR,
                            .n_test = NTE,
                            .dim = IN,
                            .x_train = x,
                            .x_test = x + NTR * IN,
                            .y_train = y,
                            .y_test = y + NTR};
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp);
  const ampc_optim_config opt = adamw(6);
  char dir[] = "/tmp/ampc_test_train.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char full[64], part[64];
  snprintf(full, sizeof full, "%s/full.st", dir);
  snprintf(part, sizeof part, "%s/part.st", dir);
  ampc_run_config rc = small_run(6, 16);
  rc.micro_batches = 2;
  rc.save_path = full;
  ampc_run *R = NULL;
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_OK);
  ampc_run_free(R);
  rc.save_path = part, rc.stop_at = 3;
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_OK);
  assert_int_equal(ampc_run_trainer(R)->iteration, 3);
  ampc_run_free(R);
  rc.stop_at = 0, rc.resume_path = part;
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_trainer(R)->iteration, 3);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_OK);
  ampc_run_free(R);
  char *a = NULL, *b = NULL;
  long na = 0, nb = 0;
  assert_true(read_file(full, &a, &na));
  assert_true(read_file(part, &b, &nb));
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, (size_t)na);
  free(a), free(b);
  /* a resumed checkpoint beyond --steps is refused */
  rc.steps = 2;
  ampc_optim_config o2 = adamw(2);
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &o2, &md, &rd), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "beyond steps = 2"));
  unlink(full), unlink(part), rmdir(dir);
}

/* ampc_train_accumulate with 2 micro-batches: the mean of the two losses,
 * each weighted 1/2 in FP32, bit for bit, and the gradient of the mean. In
 * 32-true that equals one pass over the whole batch up to the order in which
 * the 8 rows' terms are summed in FP32 (at most about 8 * 2^-24 of the sum of
 * their magnitudes, which are O(1) here): within 1e-5 (1 + |g|). */
typedef struct {
  ampc_batch b[2];
} two;
static ampc_status next_two(void *u, int64_t k, ampc_batch *out) {
  *out = ((two *)u)->b[k];
  return AMPC_OK;
}

static void test_micro_batches(void **state) {
  (void)state;
  enum { IN = 4, B = 8 };
  float x[B * IN];
  int32_t y[B];
  ampc_synth_blobs(B, IN, 2, 1.0f, 3, x, y);
  ampc_model_desc md;
  assert_int_equal(ampc_model_desc_get("mlp", NULL, &md), AMPC_OK);
  md.mlp = (ampc_mlp_config){.in = IN, .hidden = 8, .classes = 2};
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &amp);
  ampc_optim_config opt = ampc_optim_sgd_defaults();
  /* gradients only (ampc_train_accumulate): no step, the weights stay where they are */
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_model_specs(&md, &sp), AMPC_OK);
  ampc_trainer T;
  assert_int_equal(ampc_trainer_init(&T, &amp, &opt, sp.specs, sp.n, 1), AMPC_OK);
  ampc_model m;
  assert_int_equal(ampc_model_create(&m, &md, &T.params, &amp, B), AMPC_OK);
  /* backward before any forward is refused */
  assert_int_equal(m.ops->backward(&m, 1.0f), AMPC_ERR_INVALID_ARG);
  two t = {{{.b = B / 2, .features = x, .labels = y},
            {.b = B / 2, .features = x + (B / 2) * IN, .labels = y + B / 2}}};
  ampc_losses mean, one[2];
  assert_int_equal(ampc_train_accumulate(&T, &m, 2, next_two, &t, &mean), AMPC_OK);
  float *g2 = malloc((size_t)T.params.total * sizeof *g2);
  memcpy(g2, T.params.grad, (size_t)T.params.total * sizeof *g2);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(m.ops->forward(&m, &t.b[k], &one[k]), AMPC_OK);
    assert_int_equal(m.ops->backward(&m, 1.0f), AMPC_OK);
    assert_int_equal(m.ops->backward(&m, 1.0f), AMPC_ERR_INVALID_ARG); /* once per forward */
  }
  assert_true(mean.total == 0.5f * one[0].total + 0.5f * one[1].total);
  two whole = {{{.b = B, .features = x, .labels = y}}};
  ampc_losses L;
  assert_int_equal(ampc_train_accumulate(&T, &m, 1, next_two, &whole, &L), AMPC_OK);
  const float *g1 = T.params.grad;
  for (int64_t i = 0; i < T.params.total; i++)
    assert_true(fabs((double)g2[i] - (double)g1[i]) <= 1e-5 * (1.0 + fabs((double)g1[i])));
  assert_true(fabs((double)L.total - (double)mean.total) <= 1e-6);
  free(g2);
  ampc_model_free(&m);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

static void test_create_errors(void **state) {
  (void)state;
  ampc_model_desc md;
  fm_data *f = new_fm(&md);
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp);
  const ampc_optim_config opt = adamw(3);
  const ampc_run_data rd = {.dataset = &f->d, .name = "fm"};
  ampc_run *R = (ampc_run *)&R;
  ampc_run_config rc = small_run(3, 64);
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_ERR_INVALID_ARG);
  assert_null(R);
  assert_non_null(
      strstr(ampc_last_error(), "batch 64 is larger than the training split (32 samples)"));
  rc = small_run(3, 9);
  rc.micro_batches = 2;
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "not a multiple of micro_batches 2"));
  rc = small_run(0, 8);
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_ERR_INVALID_ARG);
  rc = small_run(3, 8);
  rc.resume_path = "/nonexistent/ck.st";
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "cannot resume: /nonexistent/ck.st"));
  assert_int_equal(ampc_run_create(NULL, &rc, &amp, &opt, &md, &rd), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, NULL), AMPC_ERR_INVALID_ARG);
  /* the log's directory does not exist: the run says so at its start */
  rc = small_run(3, 8);
  rc.log_path = "/nonexistent/dir/log.jsonl";
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "cannot open log file /nonexistent/dir/log.jsonl"));
  ampc_run_free(R);
  assert_int_equal(ampc_run_train(NULL, NULL), AMPC_ERR_INVALID_ARG);
  /* a checkpoint directory that does not exist: refused before any step */
  rc = small_run(3, 8);
  rc.save_path = "/nonexistent/dir/ck.st";
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "directory /nonexistent/dir does not exist"));
  /* an unknown model kind, a NULL run */
  ampc_model_desc bad = md;
  bad.kind = (ampc_model_kind)7;
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_model_specs(&bad, &sp), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "unknown model kind 7"));
  assert_int_equal(ampc_run_warnings(NULL, NULL, 0), 0);
  ampc_sampler smp;
  assert_int_equal(ampc_sampler_init(&smp, 4, 1), AMPC_OK);
  assert_int_equal(ampc_sampler_index(&smp, -1), -1);
  ampc_sampler_free(&smp);
  free(f);
}

/* the test hooks' fault plan, set by a program (the CLI reads it from the
 * environment only when built with AMPC_TEST_HOOKS): rank 0 fails in its
 * second iteration, or its gradient turns NaN there (that step is skipped) */
static void test_fault_plan(void **state) {
  (void)state;
  ampc_fault_at f;
  assert_int_equal(ampc_fault_at_parse("0:2", &f), AMPC_OK);
  assert_int_equal(f.rank, 0);
  assert_int_equal(f.iteration, 2);
  assert_int_equal(ampc_fault_at_parse(NULL, &f), AMPC_OK);
  assert_int_equal(f.iteration, 0);
  assert_int_equal(ampc_fault_at_parse("two", &f), AMPC_ERR_INVALID_ARG);
  assert_int_equal(f.iteration, 0);
  ampc_model_desc md;
  fm_data *fm = new_fm(&md);
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp);
  ampc_run_config rc = small_run(3, 8);
  rc.eval = false;
  const ampc_optim_config opt = adamw(3);
  const ampc_run_data rd = {.dataset = &fm->d, .name = "fm"};
  ampc_run *R = NULL;
  rc.faults.fail = (ampc_fault_at){0, 2};
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "step 2: rank 0: injected failure"));
  assert_int_equal(ampc_run_trainer(R)->iteration, 1);
  ampc_run_free(R);
  rc.faults.fail = (ampc_fault_at){0, 0};
  rc.faults.nan_grad = (ampc_fault_at){0, 2};
  assert_int_equal(ampc_run_create(&R, &rc, &amp, &opt, &md, &rd), AMPC_OK);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_OK);
  assert_int_equal(ampc_run_trainer(R)->iteration, 3);
  assert_int_equal(ampc_run_trainer(R)->scaler.skip_count, 1);
  ampc_run_free(R);
  free(fm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sampler_permutations),
      cmocka_unit_test(test_image_only_data_without_tokens),
      cmocka_unit_test(test_styles_sampler),
      cmocka_unit_test(test_resume_is_exact),
      cmocka_unit_test(test_micro_batches),
      cmocka_unit_test(test_create_errors),
      cmocka_unit_test(test_fault_plan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
