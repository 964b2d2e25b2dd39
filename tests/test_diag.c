/*
 * tests/test_diag.c: the telemetry collector (exact rounding counts of known
 * values through each store path, attribution by marks, the FP64 shadow
 * accumulation check) and the verdicts on constructed runs, plus the metrics
 * log round trip of ampc diagnose.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/ampc.h"

static ampc_telemetry *new_tm(void) {
  ampc_telemetry *t = calloc(1, sizeof *t);
  assert_non_null(t);
  return t;
}

/* seven values with a known fate in binary16 */
static void test_store_counts(void **state) {
  (void)state;
  ampc_telemetry *t = new_tm();
  uint16_t out[7];
  /* stores before begin are not counted */
  const float junk[2] = {1e-9f, 1e9f};
  assert_int_equal(ampc_store_f32(out, AMPC_F16, junk, 2, NULL), AMPC_OK);
  assert_int_equal(ampc_telemetry_begin(t), AMPC_OK);
  /* 1e-8 < 2^-25 (half the smallest subnormal): flushed; 1e-6 and -3e-8
   * (just above 2^-25): subnormal; 70000 > 65504: overflow; NaN; 0 */
  const float v[7] = {1.0f, 1e-8f, 1e-6f, 70000.0f, NAN, 0.0f, -3e-8f};
  assert_int_equal(ampc_store_f32(out, AMPC_F16, v, 7, NULL), AMPC_OK);
  ampc_telemetry_mark(t, AMPC_BRANCH_VISION, AMPC_TM_GRAD, "vision.x");
  const ampc_tm_stats *s = &t->s[AMPC_TM_GRAD][AMPC_BRANCH_VISION];
  assert_int_equal(s->r.count, 7);
  assert_int_equal(s->r.underflow, 1);
  assert_int_equal(s->r.subnormal, 2);
  assert_int_equal(s->r.overflow, 1);
  assert_int_equal(s->r.inf, 1);
  assert_int_equal(s->r.nan, 1);
  assert_int_equal(s->zeros, 1);
  assert_true(s->r.max_abs == 70000.0f);
  /* histogram: FP32 exponents of 1, 1e-8, 1e-6, 70000, 3e-8 */
  assert_int_equal(s->hist[127], 1);      /* 2^0 */
  assert_int_equal(s->hist[127 - 27], 1); /* 1e-8 in [2^-27, 2^-26) */
  assert_int_equal(s->hist[127 - 20], 1); /* 1e-6 in [2^-20, 2^-19) */
  assert_int_equal(s->hist[127 + 16], 1); /* 70000 in [2^16, 2^17) */
  assert_int_equal(s->hist[127 - 25], 1); /* 3e-8 in [2^-25, 2^-24) */
  assert_string_equal(t->first_nonfinite, "vision.x");
  assert_int_equal(t->first_nonfinite_branch, AMPC_BRANCH_VISION);
  assert_int_equal(t->first_nonfinite_phase, AMPC_TM_GRAD);
  /* a later non-finite tensor does not replace the first */
  assert_int_equal(ampc_store_f32(out, AMPC_F16, v, 7, NULL), AMPC_OK);
  ampc_telemetry_mark(t, AMPC_BRANCH_TEXT, AMPC_TM_ACT, "text.y");
  assert_string_equal(t->first_nonfinite, "vision.x");
  assert_int_equal(t->s[AMPC_TM_ACT][AMPC_BRANCH_TEXT].r.count, 7);
  /* bfloat16: 70000 is finite, 1e-8 normal; the same NaN */
  assert_int_equal(ampc_store_f32(out, AMPC_BF16, v, 7, NULL), AMPC_OK);
  ampc_telemetry_mark(t, AMPC_BRANCH_FUSION, AMPC_TM_GRAD, "fusion.z");
  const ampc_tm_stats *b = &t->s[AMPC_TM_GRAD][AMPC_BRANCH_FUSION];
  assert_int_equal(b->r.underflow, 0);
  assert_int_equal(b->r.overflow, 0);
  assert_int_equal(b->r.nan, 1);
  ampc_telemetry_end(t);
  /* after end, nothing is counted */
  assert_int_equal(ampc_store_f32(out, AMPC_F16, v, 7, NULL), AMPC_OK);
  assert_false(t->on);
  free(t);
}

/* the first non-finite tensor's dtype, FP32 magnitude and samples */
static void test_first_nonfinite_samples(void **state) {
  (void)state;
  ampc_telemetry *t = new_tm();
  t->sample_offset = 99; /* begin keeps the caller's offset */
  assert_int_equal(ampc_telemetry_begin(t), AMPC_OK);
  assert_true(t->sample_offset == 99);
  assert_int_equal(t->first_nonfinite_dt, AMPC_DTYPE_COUNT);
  uint16_t out[4];
  const float ok[4] = {1.0f, -2.0f, 3.0f, 65504.0f};
  assert_int_equal(ampc_store_f32(out, AMPC_F16, ok, 4, NULL), AMPC_OK);
  assert_false(ampc_telemetry_mark_dt(t, AMPC_BRANCH_VISION, AMPC_TM_ACT, "a", AMPC_F16));
  ampc_telemetry_samples(t, (const uint8_t[]){1, 1}, 2); /* no non-finite tensor yet: ignored */
  assert_int_equal(t->nf_samples_of, 0);
  /* 70000 overflows binary16 (65520 and up round to inf); -1e5 too */
  const float bad[4] = {1.0f, 70000.0f, -1e5f, 2.0f};
  assert_int_equal(ampc_store_f32(out, AMPC_F16, bad, 4, NULL), AMPC_OK);
  assert_true(ampc_telemetry_mark_dt(t, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, "text.b", AMPC_F16));
  assert_string_equal(t->first_nonfinite, "text.b");
  assert_true(t->first_nonfinite_max_abs == 1e5f); /* the FP32 value before rounding */
  assert_int_equal(t->first_nonfinite_dt, AMPC_F16);
  /* the samples: positions offset + r, the first AMPC_TM_SAMPLES kept */
  uint8_t flags[20] = {0};
  for (int r = 1; r < 20; r += 2)
    flags[r] = 1; /* 10 samples */
  t->sample_offset = 40;
  ampc_telemetry_samples(t, flags, 20);
  assert_int_equal(t->nf_samples_total, 10);
  assert_int_equal(t->nf_samples_of, 20);
  assert_int_equal(t->n_nf_samples, AMPC_TM_SAMPLES);
  for (int i = 0; i < AMPC_TM_SAMPLES; i++)
    assert_int_equal(t->nf_samples[i], 40 + 1 + 2 * i);
  /* a later report (another micro-batch) does not add to the first */
  ampc_telemetry_samples(t, flags, 20);
  assert_int_equal(t->nf_samples_total, 10);
  /* nor does a later non-finite mark replace it */
  assert_int_equal(ampc_store_f32(out, AMPC_F16, bad, 4, NULL), AMPC_OK);
  assert_false(ampc_telemetry_mark_dt(t, AMPC_BRANCH_FUSION, AMPC_TM_ACT, "c", AMPC_BF16));
  assert_int_equal(t->first_nonfinite_dt, AMPC_F16);
  ampc_telemetry_end(t);
  free(t);
}

/* the GEMM epilogue (vector and scalar tails) and the element stores */
static void test_gemm_and_elem_counts(void **state) {
  (void)state;
  ampc_telemetry *t = new_tm();
  enum { N = 21 }; /* 16 through the 8-wide epilogue, 5 through the scalar tail */
  float a = 1.0f, b[N];
  uint16_t c[N];
  for (int j = 0; j < N; j++)
    b[j] = j % 3 == 0 ? 1e-9f : (j % 3 == 1 ? 1e5f : 0.5f); /* flushed, overflow, normal */
  assert_int_equal(ampc_telemetry_begin(t), AMPC_OK);
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 1, N, 1, 1.0f, &a, AMPC_F32, 1, b, AMPC_F32, N,
                             0.0f, c, AMPC_F16, N, AMPC_ACC_F32),
                   AMPC_OK);
  ampc_telemetry_mark(t, AMPC_BRANCH_HEADS, AMPC_TM_ACT, "gemm");
  const ampc_tm_stats *s = &t->s[AMPC_TM_ACT][AMPC_BRANCH_HEADS];
  assert_int_equal(s->r.count, N);
  assert_int_equal(s->r.underflow, 7);
  assert_int_equal(s->r.overflow, 7);
  assert_int_equal(s->r.inf, 7);
  /* layers store through nn writers: GELU of 1e-9 flushes, of 70000 overflows */
  const float x[3] = {1e-9f, 70000.0f, 1.0f};
  float y32[3];
  uint16_t y16[3];
  assert_int_equal(ampc_gelu_forward(3, x, AMPC_F32, y16, AMPC_F16, NULL), AMPC_OK);
  assert_int_equal(ampc_gelu_forward(3, x, AMPC_F32, y32, AMPC_F32, NULL), AMPC_OK);
  ampc_telemetry_mark(t, AMPC_BRANCH_TEXT, AMPC_TM_ACT, "gelu");
  const ampc_tm_stats *g = &t->s[AMPC_TM_ACT][AMPC_BRANCH_TEXT];
  assert_int_equal(g->r.count, 6);
  assert_int_equal(g->r.underflow, 1); /* F32 stores never flush */
  assert_int_equal(g->r.overflow, 1);
  ampc_telemetry_end(t);
  free(t);
}

/* FP32 accumulation stays within K 2^-24; FP16 accumulation of K = 512
 * positive products does not (each partial sum near 128 is rounded to 2^-4) */
static void test_shadow_gemm(void **state) {
  (void)state;
  enum { M = 40, K = 512, N = 24 };
  ampc_f16 *x = malloc(M * K * sizeof *x), *w = malloc(N * K * sizeof *w);
  assert_non_null(x);
  assert_non_null(w);
  uint64_t r = 12345;
  for (int i = 0; i < M * K; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = ampc_f32_to_f16((float)(r >> 40) / 16777216.0f);
  }
  for (int i = 0; i < N * K; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    w[i] = ampc_f32_to_f16((float)(r >> 40) / 16777216.0f);
  }
  ampc_telemetry *t = new_tm();
  assert_int_equal(ampc_telemetry_begin(t), AMPC_OK);
  assert_int_equal(ampc_telemetry_shadow_linear(t, AMPC_BRANCH_VISION, "v.fc", M, K, N, x, AMPC_F16,
                                                w, AMPC_F16, AMPC_ACC_F32),
                   AMPC_OK);
  assert_int_equal(ampc_telemetry_shadow_linear(t, AMPC_BRANCH_FUSION, "f.fc", M, K, N, x, AMPC_F16,
                                                w, AMPC_F16, AMPC_ACC_F16),
                   AMPC_OK);
  /* the shadow's own stores are not counted */
  ampc_telemetry_mark(t, AMPC_BRANCH_HEADS, AMPC_TM_ACT, "none");
  assert_int_equal(t->s[AMPC_TM_ACT][AMPC_BRANCH_HEADS].r.count, 0);
  ampc_telemetry_end(t);
  assert_true(t->acc_err[AMPC_BRANCH_VISION] >= 0.0);
  assert_true(t->acc_err[AMPC_BRANCH_VISION] < K * 5.9604644775390625e-8);
  assert_true(t->acc_err[AMPC_BRANCH_FUSION] > 4.8828125e-4);
  assert_int_equal(t->acc_k[AMPC_BRANCH_FUSION], K);
  assert_string_equal(t->acc_tensor[AMPC_BRANCH_FUSION], "f.fc");
  assert_true(t->acc_err[AMPC_BRANCH_TEXT] < 0.0); /* not sampled */
  /* a product measured elsewhere (a device's): the same sampled rows, their
   * FP16-accumulated product handed in, give the same error */
  const double e16 = t->acc_err[AMPC_BRANCH_FUSION];
  const int64_t rows = ampc_probe_shadow_rows(M), step = M / rows;
  assert_int_equal(rows, 16);
  ampc_f16 *xs = malloc((size_t)(rows * K) * sizeof *xs);
  float *y = malloc((size_t)(rows * N) * sizeof *y);
  assert_non_null(xs);
  assert_non_null(y);
  for (int64_t i = 0; i < rows; i++)
    memcpy(xs + i * K, x + i * step * K, K * sizeof *xs);
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_T, rows, N, K, 1.0f, xs, AMPC_F16, K, w, AMPC_F16,
                             K, 0.0f, y, AMPC_F32, N, AMPC_ACC_F16),
                   AMPC_OK);
  assert_int_equal(ampc_telemetry_begin(t), AMPC_OK);
  assert_int_equal(ampc_telemetry_shadow_result(t, AMPC_BRANCH_TEXT, "t.fc", rows, K, N, xs,
                                                AMPC_F16, w, AMPC_F16, y),
                   AMPC_OK);
  assert_int_equal(ampc_telemetry_shadow_result(t, AMPC_BRANCH_TEXT, "t.fc", rows, K, N, NULL,
                                                AMPC_F16, w, AMPC_F16, y),
                   AMPC_ERR_INVALID_ARG);
  ampc_telemetry_end(t);
  assert_true(t->acc_err[AMPC_BRANCH_TEXT] == e16);
  assert_int_equal(t->acc_k[AMPC_BRANCH_TEXT], K);
  free(xs), free(y);
  free(t), free(x), free(w);
}

/* counts made elsewhere (a GPU's store kernels) join the thread's own */
static void test_tally_add(void **state) {
  (void)state;
  ampc_tally *t = ampc_tally_create();
  assert_non_null(t);
  const float src[4] = {0.0f, 1e-9f, 3.0f, 70000.0f};
  uint16_t dst[4];
  ampc_tally *was = ampc_tally_bind(t);
  assert_int_equal(ampc_store_f32(dst, AMPC_F16, src, 4, NULL), AMPC_OK);
  (void)ampc_tally_bind(was);
  ampc_tm_stats one, two;
  ampc_tally_drain(t, &one);
  assert_int_equal(one.r.count, 4);
  ampc_tally_add(t, &one);
  ampc_tally_add(t, &one);
  ampc_tally_add(t, NULL);
  ampc_tally_add(NULL, &one);
  ampc_tally_drain(t, &two);
  assert_int_equal(two.r.count, 8);
  assert_int_equal(two.r.underflow, 2 * one.r.underflow);
  assert_int_equal(two.r.overflow, 2);
  assert_int_equal(two.zeros, 2);
  assert_true(two.r.max_abs == 70000.0f);
  for (int b = 0; b < AMPC_TM_BINS; b++)
    assert_int_equal(two.hist[b], 2 * one.hist[b]);
  ampc_tally_free(t);
}

/* The tally is handed to the kernels' workers: with two threads every store
 * of a GEMM and a layer is counted once, as with one thread; a second
 * collector's workers count into its own tally, not the first one's (freed at
 * its end: ASan would see a stale one). */
enum { TW_M = 96, TW_N = 80, TW_K = 8, TW_GELU = 1 << 17 };
static void tw_run(ampc_telemetry *t, float *a, float *b, uint16_t *c, float *x, uint16_t *y) {
  assert_int_equal(ampc_telemetry_begin(t), AMPC_OK);
  /* the layer first: its workers still hold what the previous GEMM handed them */
  assert_int_equal(ampc_gelu_forward(TW_GELU, x, AMPC_F32, y, AMPC_F16, NULL), AMPC_OK);
  ampc_telemetry_mark(t, AMPC_BRANCH_TEXT, AMPC_TM_ACT, "gelu");
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, TW_M, TW_N, TW_K, 1.0f, a, AMPC_F32, TW_K, b,
                             AMPC_F32, TW_N, 0.0f, c, AMPC_F16, TW_N, AMPC_ACC_F32),
                   AMPC_OK);
  ampc_telemetry_mark(t, AMPC_BRANCH_VISION, AMPC_TM_ACT, "gemm");
}
static void test_workers_counted(void **state) {
  (void)state;
  float *a = malloc(TW_M * TW_K * sizeof *a), *b = malloc(TW_K * TW_N * sizeof *b);
  float *x = malloc(TW_GELU * sizeof *x);
  uint16_t *c = malloc(TW_M * TW_N * sizeof *c), *y = malloc(TW_GELU * sizeof *y);
  assert_true(a && b && x && c && y);
  for (int i = 0; i < TW_M * TW_K; i++)
    a[i] = i % TW_K == 0 ? 1.0f : 0.0f; /* C = the first row of B, on every row */
  for (int i = 0; i < TW_K * TW_N; i++)
    b[i] = i % 4 == 0 ? 1e-9f : 0.25f; /* a quarter of the first row flushes */
  for (int i = 0; i < TW_GELU; i++)
    x[i] = i % 8 == 0 ? 1e5f : 1.0f; /* GELU(1e5) = 1e5 overflows binary16 */
  const int was = ampc_get_num_threads();
  for (int nt = 1; nt <= 2; nt++) {
    ampc_set_num_threads(nt);
    ampc_telemetry *t1 = new_tm(), *t2 = new_tm();
    tw_run(t1, a, b, c, x, y);
    ampc_telemetry_end(t1);
    tw_run(t2, a, b, c, x, y);
    for (int r = 0; r < 2; r++) {
      const ampc_telemetry *t = r ? t2 : t1;
      const ampc_tm_stats *g = &t->s[AMPC_TM_ACT][AMPC_BRANCH_VISION];
      assert_int_equal(g->r.count, TW_M * TW_N);
      assert_int_equal(g->r.underflow, TW_M * TW_N / 4);
      const ampc_tm_stats *e = &t->s[AMPC_TM_ACT][AMPC_BRANCH_TEXT];
      assert_int_equal(e->r.count, TW_GELU);
      assert_int_equal(e->r.overflow, TW_GELU / 8);
    }
    ampc_telemetry_end(t2);
    free(t1), free(t2);
  }
  ampc_set_num_threads(was);
  free(a), free(b), free(x), free(c), free(y);
}

/* More threads than a tally has slots, over the process's life and at once:
 * a process makes new threads as it goes (each thread that starts OpenMP
 * work gets its own team), so thread numbers pass any fixed count. 70
 * threads come and go first; then 72 count into one tally at the same time
 * (64 own slots, 8 share the spill slot): not one count is lost. */
enum { TM_ADDS = 4000 };
typedef struct {
  ampc_tally *t;
  pthread_barrier_t *bar;
} tm_many_job;
static void *tm_many_thread(void *arg) {
  tm_many_job *j = arg;
  ampc_tm_stats one;
  memset(&one, 0, sizeof one);
  one.r.count = 1, one.r.underflow = 1, one.hist[100] = 1;
  if (j->bar)
    pthread_barrier_wait(j->bar);
  for (int i = 0; i < (j->bar ? TM_ADDS : 1); i++)
    ampc_tally_add(j->t, &one);
  return NULL;
}
static void test_tally_many_threads(void **state) {
  (void)state;
  ampc_tally *old = ampc_tally_create();
  assert_non_null(old);
  for (int i = 0; i < 70; i++) { /* threads that count once and end */
    tm_many_job j = {old, NULL};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, tm_many_thread, &j), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
  }
  ampc_tm_stats out;
  ampc_tally_drain(old, &out);
  assert_int_equal(out.r.count, 70);
  ampc_tally_free(old);
  enum { NT = 72 };
  ampc_tally *t = ampc_tally_create();
  assert_non_null(t);
  pthread_barrier_t bar;
  assert_int_equal(pthread_barrier_init(&bar, NULL, NT), 0);
  tm_many_job j = {t, &bar};
  pthread_t th[NT];
  for (int i = 0; i < NT; i++)
    assert_int_equal(pthread_create(&th[i], NULL, tm_many_thread, &j), 0);
  for (int i = 0; i < NT; i++)
    assert_int_equal(pthread_join(th[i], NULL), 0);
  pthread_barrier_destroy(&bar);
  ampc_tally_drain(t, &out);
  assert_int_equal(out.r.count, (uint64_t)NT * TM_ADDS);
  assert_int_equal(out.r.underflow, (uint64_t)NT * TM_ADDS);
  assert_int_equal(out.hist[100], (uint64_t)NT * TM_ADDS);
  ampc_tally_drain(t, &out); /* drained: nothing left */
  assert_int_equal(out.r.count, 0);
  ampc_tally_free(t);
}

/* Two threads, each driving its own collector at the same time: each counts
 * exactly its own stores (the tally has no process-wide owner). */
typedef struct {
  int n; /* values this thread stores */
  pthread_barrier_t *bar;
  uint64_t count, underflow;
  int ok;
} tw_job;
static void *tw_thread(void *arg) {
  tw_job *j = arg;
  ampc_telemetry *t = calloc(1, sizeof *t);
  float *v = malloc((size_t)j->n * sizeof *v);
  uint16_t *o = malloc((size_t)j->n * sizeof *o);
  if (!t || !v || !o)
    return NULL;
  for (int i = 0; i < j->n; i++)
    v[i] = i % 2 ? 1e-9f : 2.0f;
  j->ok = ampc_telemetry_begin(t) == AMPC_OK;
  pthread_barrier_wait(j->bar); /* both collectors are on now */
  for (int rep = 0; rep < 50; rep++)
    j->ok &= ampc_store_f32(o, AMPC_F16, v, (size_t)j->n, NULL) == AMPC_OK;
  pthread_barrier_wait(j->bar);
  ampc_telemetry_mark(t, AMPC_BRANCH_FUSION, AMPC_TM_GRAD, "x");
  j->count = t->s[AMPC_TM_GRAD][AMPC_BRANCH_FUSION].r.count;
  j->underflow = t->s[AMPC_TM_GRAD][AMPC_BRANCH_FUSION].r.underflow;
  ampc_telemetry_end(t);
  free(t), free(v), free(o);
  return NULL;
}
static void test_collectors_per_thread(void **state) {
  (void)state;
  pthread_barrier_t bar;
  assert_int_equal(pthread_barrier_init(&bar, NULL, 2), 0);
  tw_job j[2] = {{1000, &bar, 0, 0, 0}, {3000, &bar, 0, 0, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, tw_thread, &j[i]), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_join(th[i], NULL), 0);
  pthread_barrier_destroy(&bar);
  for (int i = 0; i < 2; i++) {
    assert_true(j[i].ok);
    assert_int_equal(j[i].count, 50 * j[i].n);
    assert_int_equal(j[i].underflow, 50 * j[i].n / 2);
  }
}

static void test_one_collector(void **state) {
  (void)state;
  ampc_telemetry *a = new_tm(), *b = new_tm();
  assert_int_equal(ampc_telemetry_begin(a), AMPC_OK);
  assert_int_equal(ampc_telemetry_begin(b), AMPC_ERR_INVALID_ARG);
  ampc_telemetry_end(a);
  assert_int_equal(ampc_telemetry_begin(b), AMPC_OK);
  ampc_telemetry_end(b);
  free(a), free(b);
}

/* ---- verdicts on constructed runs ---- */

static ampc_diag_config cfg(int mode, bool master, ampc_dtype lowp) {
  ampc_diag_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.precision, sizeof c.precision, "test");
  c.lowp = lowp, c.master_weights = master, c.loss_scale_mode = mode, c.min_scale = 1.0;
  return c;
}

static ampc_diag_step step(int64_t i, double loss, double scale) {
  ampc_diag_step s;
  memset(&s, 0, sizeof s);
  s.step = i, s.loss = loss, s.loss_scale = scale;
  s.first_nonfinite_branch = s.first_nonfinite_phase = -1;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    s.br[b].acc_err = -1.0;
    s.br[b].parameters = 1000;
  }
  return s;
}

/* a sampled step: every branch stored 10000 gradient values, `flushed` of them flushed */
static void sample(ampc_diag_step *s, const int flushed[AMPC_BRANCH_COUNT]) {
  s->telemetry = true;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    s->br[b].grad.r.count = 10000, s->br[b].grad.r.underflow = (uint64_t)flushed[b];
    s->br[b].grad.hist[100]++;
    s->br[b].act.r.count = 10000;
    s->br[b].acc_err = 1e-7, s->br[b].acc_k = 512;
  }
}

static int verdicts(const ampc_diag *d, ampc_verdict *v) {
  return ampc_diag_verdicts(d, v, AMPC_VERDICT_COUNT);
}

static void test_verdict_healthy_and_dynamic_skips(void **state) {
  (void)state;
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_DYNAMIC, true, AMPC_F16);
  ampc_diag *d = ampc_diag_create(&c);
  static const int none[4] = {0, 1, 0, 0};
  for (int i = 1; i <= 50; i++) {
    ampc_diag_step s = step(i, 5.0 - 0.05 * i, i <= 2 ? 65536.0 / (1 << i) : 16384.0);
    s.overflow = s.skipped = i <= 2; /* the usual first backoffs */
    if (i % 10 == 0)
      sample(&s, none);
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  ampc_verdict v[AMPC_VERDICT_COUNT];
  assert_int_equal(verdicts(d, v), 1);
  assert_int_equal(v[0].kind, AMPC_VERDICT_HEALTHY);
  ampc_diag_free(d);
  /* a short run that is mostly the scaler's leading backoffs: still healthy;
   * skips after the first applied step, 5 of 10: overflow */
  for (int late = 0; late < 2; late++) {
    d = ampc_diag_create(&c);
    for (int i = 1; i <= 12; i++) {
      ampc_diag_step s = step(i, 5.0, 1024.0);
      s.overflow = s.skipped = late ? (i > 2 && i % 2 == 0) || i == 1 : i <= 6;
      assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
    }
    assert_int_equal(verdicts(d, v), 1);
    assert_int_equal(v[0].kind, late ? AMPC_VERDICT_OVERFLOW : AMPC_VERDICT_HEALTHY);
    ampc_diag_free(d);
  }
}

static void test_verdict_static_overflow(void **state) {
  (void)state;
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_STATIC, true, AMPC_F16);
  ampc_diag *d = ampc_diag_create(&c);
  for (int i = 1; i <= 10; i++) {
    ampc_diag_step s = step(i, 6.0, 1048576.0);
    s.overflow = s.skipped = true, s.nonfinite_grads = 100;
    if (i == 5) {
      static const int none[4] = {0};
      sample(&s, none);
      snprintf(s.first_nonfinite, sizeof s.first_nonfinite, "head");
      s.first_nonfinite_branch = AMPC_BRANCH_HEADS, s.first_nonfinite_phase = AMPC_TM_GRAD;
    }
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  ampc_verdict v[AMPC_VERDICT_COUNT];
  assert_int_equal(verdicts(d, v), 1);
  assert_int_equal(v[0].kind, AMPC_VERDICT_OVERFLOW);
  assert_int_equal(v[0].step, 1);
  assert_int_equal(v[0].branch, AMPC_BRANCH_HEADS);
  assert_string_equal(v[0].tensor, "head");
  assert_non_null(strstr(v[0].safeguard, "dynamic"));
  ampc_diag_free(d);
}

static void test_verdict_floor_and_weights(void **state) {
  (void)state;
  /* overflow with S at its floor for 3 consecutive steps */
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_DYNAMIC, true, AMPC_F16);
  ampc_diag *d = ampc_diag_create(&c);
  for (int i = 1; i <= 6; i++) {
    ampc_diag_step s = step(i, 6.0, i <= 2 ? 4.0 / (1 << i) : 1.0);
    s.overflow = s.skipped = i >= 2;
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  ampc_verdict v[AMPC_VERDICT_COUNT];
  assert_int_equal(verdicts(d, v), 1);
  assert_int_equal(v[0].kind, AMPC_VERDICT_NONFINITE_INDEPENDENT);
  assert_int_equal(v[0].step, 2); /* S reaches the floor 1 at step 2 */
  ampc_diag_free(d);
  /* pure FP16 AdamW: the update writes NaN weights at step 1, then the loss is NaN */
  c = cfg(AMPC_LOSS_SCALE_NONE, false, AMPC_F16);
  d = ampc_diag_create(&c);
  for (int i = 1; i <= 4; i++) {
    ampc_diag_step s = step(i, i == 1 ? 6.0 : (double)NAN, 1.0);
    s.nonfinite_weights = i == 1 ? 4096 : 0;
    s.overflow = i >= 2;
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  assert_true(verdicts(d, v) >= 1);
  assert_int_equal(v[0].kind, AMPC_VERDICT_NONFINITE_INDEPENDENT);
  assert_int_equal(v[0].step, 1);
  assert_non_null(strstr(v[0].safeguard, "master"));
  ampc_diag_free(d);
}

static void test_verdict_forward_overflow(void **state) {
  (void)state;
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_DYNAMIC, true, AMPC_F16);
  ampc_diag *d = ampc_diag_create(&c);
  for (int i = 1; i <= 5; i++) {
    ampc_diag_step s = step(i, i < 3 ? 6.0 : (double)INFINITY, 65536.0);
    s.overflow = s.skipped = i >= 3;
    if (i == 3) {
      static const int none[4] = {0};
      sample(&s, none);
      s.br[AMPC_BRANCH_TEXT].act.r.overflow = s.br[AMPC_BRANCH_TEXT].act.r.inf = 3;
      snprintf(s.first_nonfinite, sizeof s.first_nonfinite, "text.blocks.1");
      s.first_nonfinite_branch = AMPC_BRANCH_TEXT, s.first_nonfinite_phase = AMPC_TM_ACT;
    }
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  ampc_verdict v[AMPC_VERDICT_COUNT];
  assert_int_equal(verdicts(d, v), 1);
  assert_int_equal(v[0].kind, AMPC_VERDICT_NONFINITE_INDEPENDENT);
  assert_int_equal(v[0].step, 3);
  assert_int_equal(v[0].branch, AMPC_BRANCH_TEXT);
  assert_string_equal(v[0].tensor, "text.blocks.1");
  ampc_diag_free(d);
}

static void test_verdict_underflow(void **state) {
  (void)state;
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_NONE, true, AMPC_F16);
  ampc_diag *d = ampc_diag_create(&c);
  /* text crosses 1 % at step 10, vision at step 20; the loss drops then stays flat */
  for (int i = 1; i <= 40; i++) {
    ampc_diag_step s = step(i, i < 8 ? 6.0 - 0.2 * i : 4.6, 1.0);
    if (i % 10 == 0) {
      const int fl[4] = {i >= 20 ? 800 : 50, i >= 10 ? 150 : 0, 0, 0};
      sample(&s, fl);
    }
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  ampc_verdict v[AMPC_VERDICT_COUNT];
  assert_int_equal(verdicts(d, v), 1);
  assert_int_equal(v[0].kind, AMPC_VERDICT_UNDERFLOW);
  assert_int_equal(v[0].branch, AMPC_BRANCH_TEXT); /* the first to underflow */
  assert_int_equal(v[0].step, 10);
  assert_non_null(strstr(v[0].safeguard, "loss scaling"));
  /* vision: (50 + 800 * 3) / 40000 flushed */
  assert_non_null(strstr(v[0].evidence[0], "vision: 6.12 %"));
  ampc_diag_free(d);
  /* 2 % flushed and a loss still falling: not underflow; 2 % on a plateau: underflow */
  for (int flat = 0; flat < 2; flat++) {
    d = ampc_diag_create(&c);
    for (int i = 1; i <= 40; i++) {
      ampc_diag_step s = step(i, flat && i > 8 ? 4.4 : 6.0 - 0.05 * i, 1.0);
      if (i % 10 == 0) {
        const int fl[4] = {200, 0, 0, 0};
        sample(&s, fl);
      }
      assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
    }
    assert_int_equal(verdicts(d, v), 1);
    assert_int_equal(v[0].kind, flat ? AMPC_VERDICT_UNDERFLOW : AMPC_VERDICT_HEALTHY);
    ampc_diag_free(d);
  }
}

static void test_verdict_swallowed_and_accumulation(void **state) {
  (void)state;
  /* master 0: in place; 1: an FP32 master; 2: in place with stochastic
   * rounding (an unchanged weight was rounded down: no verdict) */
  for (int master = 0; master < 3; master++) {
    ampc_diag_config c = cfg(AMPC_LOSS_SCALE_DYNAMIC, master == 1, AMPC_F16);
    c.stochastic_update = master == 2;
    ampc_diag *d = ampc_diag_create(&c);
    for (int i = 1; i <= 20; i++) {
      ampc_diag_step s = step(i, 5.0 - 0.01 * i, 65536.0);
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
        s.br[b].updated = 1000;
        s.br[b].swallowed = b == AMPC_BRANCH_FUSION ? 900 : 100; /* 30 % overall */
        s.br[b].would_swallow = s.br[b].swallowed;
      }
      if (i == 10) {
        static const int none[4] = {0};
        sample(&s, none);
        s.br[AMPC_BRANCH_VISION].acc_err = 3e-3;
        snprintf(s.br[AMPC_BRANCH_VISION].acc_tensor, 64, "vision.blocks.0.mlp.fc2");
      }
      assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
    }
    ampc_verdict v[AMPC_VERDICT_COUNT];
    const int n = verdicts(d, v);
    if (!master) {
      assert_int_equal(n, 2);
      assert_int_equal(v[0].kind, AMPC_VERDICT_SWALLOWED);
      assert_int_equal(v[0].branch, AMPC_BRANCH_FUSION);
      assert_non_null(strstr(v[0].safeguard, "master"));
    } else {
      assert_int_equal(n, 1); /* with a master (or SR), unchanged 16-bit weights are expected */
    }
    assert_int_equal(v[n - 1].kind, AMPC_VERDICT_ACCUMULATION);
    assert_int_equal(v[n - 1].branch, AMPC_BRANCH_VISION);
    assert_int_equal(v[n - 1].step, 10);
    assert_string_equal(v[n - 1].tensor, "vision.blocks.0.mlp.fc2");
    ampc_diag_free(d);
  }
}

/* ---- the log round trip ---- */

/* fp8-mixed: saturation in one branch after step 1 names it (step 1, which
 * casts with scale 1, does not count); below 1e-3 of the casts: healthy; the
 * counts survive the log round trip */
static void test_verdict_fp8_saturation(void **state) {
  (void)state;
  for (int bad = 0; bad < 3; bad++) {
    ampc_diag_config c = cfg(AMPC_LOSS_SCALE_NONE, true, AMPC_BF16);
    ampc_diag *d = ampc_diag_create(&c);
    for (int i = 1; i <= 20; i++) {
      ampc_diag_step s = step(i, 5.0 - 0.1 * i, 1.0);
      for (int b = 0; b < 3; b++) {
        s.br[b].fp8_values = 100000;
        s.br[b].fp8_saturated =
            i == 1 ? 50000 : (b == AMPC_BRANCH_TEXT && bad == 1 && i >= 8 ? 500 : 10);
        /* bad 2: the vision branch flushes 20 % of its casts */
        s.br[b].fp8_flushed = i == 1 ? 90000 : (b == AMPC_BRANCH_VISION && bad == 2 ? 20000 : 7);
      }
      assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
      if (i == 8) { /* the JSON of a step carries the counts, and reads back */
        char *txt = ampc_diag_step_json(&s);
        assert_non_null(strstr(txt, "\"fp8_saturated\":"));
        free(txt);
      }
    }
    ampc_verdict v[AMPC_VERDICT_COUNT];
    const int n = verdicts(d, v);
    assert_int_equal(n, 1);
    if (!bad) {
      assert_int_equal(v[0].kind, AMPC_VERDICT_HEALTHY);
    } else if (bad == 2) {
      assert_int_equal(v[0].kind, AMPC_VERDICT_FP8_UNDERFLOW);
      assert_int_equal(v[0].branch, AMPC_BRANCH_VISION);
      assert_string_equal(ampc_verdict_name(v[0].kind), "fp8-underflow");
      assert_non_null(strstr(v[0].evidence[0], "20 %"));
    } else {
      assert_int_equal(v[0].kind, AMPC_VERDICT_FP8_SATURATION);
      assert_int_equal(v[0].branch, AMPC_BRANCH_TEXT);
      assert_int_equal(v[0].step, 8);
      assert_string_equal(ampc_verdict_name(v[0].kind), "fp8-saturation");
      assert_non_null(strstr(v[0].safeguard, "--fp8-margin"));
    }
    ampc_diag_free(d);
  }
}

/* a run against its FP32 twin: per-step differences over the last tenth of
 * the steps; each cause from the run's own counts */
static ampc_diag *twin(double offset, int kind, bool master, ampc_dtype lowp) {
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_NONE, master, lowp);
  if (lowp == AMPC_F32)
    snprintf(c.precision, sizeof c.precision, "32-true");
  ampc_diag *d = ampc_diag_create(&c);
  for (int i = 1; i <= 100; i++) {
    /* a noisy curve the twins share, plus the run's offset */
    const double noise = 0.3 * sin(1.7 * i);
    ampc_diag_step s = step(i, 5.0 - 0.02 * i + noise + offset, 1.0);
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      s.br[b].updated = 1000, s.br[b].swallowed = kind == 3 ? 600 : 0;
    if (i % 10 == 0) {
      const int none[4] = {0, 0, 0, 0}, many[4] = {300, 0, 0, 0}; /* 3 % of vision flushed */
      sample(&s, kind == 2 ? many : none);
      if (kind == 1)
        for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
          s.br[b].acc_err = 3e-3;
    }
    if (kind == 4 && i == 50)
      s.overflow = true, s.nonfinite_grads = 7;
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  return d;
}

/* a composite loss whose weighted term fails while the total does not move:
 * loss_itm 10 % above the baseline's, the total identical (the term is
 * weighted 2^-28 in the run the docs show); the term with the largest real
 * gap is named, and a dynamic run's underflow points to per-branch scales */
static ampc_diag *twin_parts(double itm_offset, double itc_offset, int mode) {
  ampc_diag_config c = cfg(mode, mode != AMPC_LOSS_SCALE_NONE, mode ? AMPC_F16 : AMPC_F32);
  if (!mode)
    snprintf(c.precision, sizeof c.precision, "32-true");
  ampc_diag *d = ampc_diag_create(&c);
  for (int i = 1; i <= 100; i++) {
    const double noise = 0.3 * sin(1.7 * i);
    ampc_diag_step s = step(i, 5.0 - 0.02 * i + noise, 1.0);
    s.n_parts = 3;
    snprintf(s.part_name[0], sizeof s.part_name[0], "loss_itc");
    snprintf(s.part_name[1], sizeof s.part_name[1], "loss_itm");
    snprintf(s.part_name[2], sizeof s.part_name[2], "loss_cls");
    s.part[0] = 2.5 + 0.1 * noise + itc_offset;
    s.part[1] = 0.62 + 0.01 * cos(0.3 * i) + itm_offset;
    s.part[2] = s.loss;
    if (i % 10 == 0) {
      const int many[4] = {0, 300, 0, 0}; /* 3 % of the text gradients flushed */
      const int none[4] = {0, 0, 0, 0};
      sample(&s, mode ? many : none);
    }
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
  }
  return d;
}

static void test_compare_loss_terms(void **state) {
  (void)state;
  ampc_diag *base = twin_parts(0.0, 0.0, AMPC_LOSS_SCALE_NONE);
  ampc_diag_gap g;
  ampc_verdict v;
  int n = -1;
  ampc_diag *same = twin_parts(0.0, 0.0, AMPC_LOSS_SCALE_DYNAMIC);
  assert_int_equal(ampc_diag_compare(same, base, 0.01, &g, &v, &n), AMPC_OK);
  assert_int_equal(n, 0);
  assert_string_equal(g.quantity, "loss");
  /* loss_itm +0.062 (10 %), loss_itc +0.05 (2 %): the larger relative gap */
  ampc_diag *r = twin_parts(0.062, 0.05, AMPC_LOSS_SCALE_DYNAMIC);
  assert_int_equal(ampc_diag_compare(r, base, 0.01, &g, &v, &n), AMPC_OK);
  assert_int_equal(n, 1);
  assert_string_equal(g.quantity, "loss_itm");
  assert_true(g.significant && fabs(g.diff - 0.062) < 1e-9 && fabs(g.rel - 0.1) < 2e-3);
  assert_int_equal(v.kind, AMPC_VERDICT_UNDERFLOW);
  assert_int_equal(v.branch, AMPC_BRANCH_TEXT);
  assert_non_null(strstr(v.evidence[0], "loss term loss_itm"));
  assert_non_null(strstr(v.evidence[1], "total loss is within the margin"));
  assert_non_null(strstr(v.safeguard, "--loss-scale per-branch"));
  /* a term absent from the baseline is not compared */
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_NONE, false, AMPC_F32);
  snprintf(c.precision, sizeof c.precision, "32-true");
  ampc_diag *plain = ampc_diag_create(&c);
  for (int i = 1; i <= 100; i++) {
    ampc_diag_step s = step(i, 5.0 - 0.02 * i + 0.3 * sin(1.7 * i), 1.0);
    assert_int_equal(ampc_diag_add(plain, &s), AMPC_OK);
  }
  assert_int_equal(ampc_diag_compare(r, plain, 0.01, &g, &v, &n), AMPC_OK);
  assert_int_equal(n, 0);
  assert_string_equal(g.quantity, "loss");
  ampc_diag_free(plain);
  ampc_diag_free(r);
  ampc_diag_free(same);
  ampc_diag_free(base);
}

static void test_compare_with_baseline(void **state) {
  (void)state;
  ampc_diag *base = twin(0.0, 0, false, AMPC_F32);
  ampc_diag_gap g;
  ampc_verdict v;
  int n = -1;
  /* the same curve: no gap (difference exactly 0) */
  ampc_diag *same = twin(0.0, 0, true, AMPC_F16);
  assert_int_equal(ampc_diag_compare(same, base, 0.01, &g, &v, &n), AMPC_OK);
  assert_int_equal(n, 0);
  assert_true(g.window == 10 && g.first_step == 91 && g.last_step == 100);
  assert_true(g.diff == 0.0 && !g.significant && g.finite);
  /* +0.02 on a loss near 3.1: 0.6 %, below the 1 % margin; at margin 0.1 % a gap */
  ampc_diag *small = twin(0.02, 0, true, AMPC_F16);
  assert_int_equal(ampc_diag_compare(small, base, 0.01, &g, &v, &n), AMPC_OK);
  assert_int_equal(n, 0);
  assert_true(fabs(g.diff - 0.02) < 1e-12 && g.diff_se < 1e-12);
  assert_int_equal(ampc_diag_compare(small, base, 0.001, &g, &v, &n), AMPC_OK);
  assert_int_equal(n, 1);
  assert_int_equal(v.kind, AMPC_VERDICT_PRECISION_GAP);
  /* +0.2 (about 6 %): the cause from the run's counts */
  static const ampc_verdict_kind want[4] = {AMPC_VERDICT_PRECISION_GAP, AMPC_VERDICT_ACCUMULATION,
                                            AMPC_VERDICT_UNDERFLOW, AMPC_VERDICT_SWALLOWED};
  for (int k = 0; k < 4; k++) {
    ampc_diag *r = twin(0.2, k, k != 3, AMPC_F16);
    assert_int_equal(ampc_diag_compare(r, base, 0.01, &g, &v, &n), AMPC_OK);
    assert_int_equal(n, 1);
    assert_true(g.significant && g.finite);
    assert_int_equal(v.kind, want[k]);
    assert_non_null(strstr(v.evidence[0], "against the FP32 baseline"));
    if (k == 2)
      assert_int_equal(v.branch, AMPC_BRANCH_VISION);
    ampc_diag_free(r);
  }
  /* an overflow the scaler skipped does not end the comparison */
  {
    ampc_diag_config c5 = cfg(AMPC_LOSS_SCALE_DYNAMIC, true, AMPC_F16);
    ampc_diag *sk = ampc_diag_create(&c5);
    for (int i = 1; i <= 100; i++) {
      ampc_diag_step s = step(i, 5.0 - 0.02 * i + 0.3 * sin(1.7 * i) + 0.2, 1.0);
      if (i <= 2)
        s.overflow = true, s.skipped = true, s.nonfinite_grads = 9;
      assert_int_equal(ampc_diag_add(sk, &s), AMPC_OK);
    }
    assert_int_equal(ampc_diag_compare(sk, base, 0.01, &g, &v, &n), AMPC_OK);
    assert_true(g.finite && g.significant && n == 1);
    ampc_diag_free(sk);
  }
  /* a non-finite step: no cross-run verdict (the run's own verdicts say why) */
  ampc_diag *nf = twin(0.2, 4, true, AMPC_F16);
  assert_int_equal(ampc_diag_compare(nf, base, 0.01, &g, &v, &n), AMPC_OK);
  assert_true(n == 0 && !g.finite);
  /* the baseline must be a 32-true run */
  assert_int_equal(ampc_diag_compare(base, same, 0.01, &g, &v, &n), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "32-true twin"));
  /* errors: margin, too few common steps */
  assert_int_equal(ampc_diag_compare(nf, base, 0.0, &g, &v, &n), AMPC_ERR_INVALID_ARG);
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_NONE, true, AMPC_F16);
  ampc_diag *shortrun = ampc_diag_create(&c);
  for (int i = 1; i <= 4; i++) {
    ampc_diag_step s = step(i, 5.0, 1.0);
    assert_int_equal(ampc_diag_add(shortrun, &s), AMPC_OK);
  }
  assert_int_equal(ampc_diag_compare(shortrun, base, 0.01, &g, &v, &n), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "4 step(s) in common"));
  ampc_diag_free(shortrun);
  ampc_diag_free(nf);
  ampc_diag_free(small);
  ampc_diag_free(same);
  ampc_diag_free(base);
}

static void test_log_round_trip(void **state) {
  (void)state;
  char path[] = "/tmp/ampc_test_diag_XXXXXX";
  const int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  fputs("{\"event\":\"config\",\"precision\":\"16-mixed\",\"grads_dtype\":\"f16\","
        "\"master_weights\":\"on\",\"accumulate\":\"fp32\",\"loss_scale\":{\"mode\":\"none\","
        "\"min_scale\":1}}\n",
        f);
  ampc_diag_config c = cfg(AMPC_LOSS_SCALE_NONE, true, AMPC_F16);
  ampc_diag *d = ampc_diag_create(&c);
  for (int i = 1; i <= 30; i++) {
    ampc_diag_step s = step(i, i < 5 ? 6.0 - 0.3 * i : 4.8, 1.0);
    s.br[AMPC_BRANCH_FUSION].fp8_values = 1000 + i; /* fp8-mixed counts round-trip */
    s.br[AMPC_BRANCH_FUSION].fp8_saturated = i;
    s.br[AMPC_BRANCH_FUSION].fp8_flushed = 2 * i;
    if (i % 5 == 0) {
      const int fl[4] = {700, 20, 0, 0};
      sample(&s, fl);
      s.br[AMPC_BRANCH_VISION].grad.hist[90] = 12345;
    }
    assert_int_equal(ampc_diag_add(d, &s), AMPC_OK);
    char *txt = ampc_diag_step_json(&s);
    assert_non_null(txt);
    /* a step line: the engine's fields, then the diagnosis fields */
    fprintf(f, "{\"event\":\"step\",\"step\":%d,\"loss\":%.17g,\"loss_scale\":1,%s\n", i, s.loss,
            txt + 1);
    free(txt);
  }
  fputs("{\"event\":\"summary\"}\n", f);
  assert_int_equal(fclose(f), 0);
  ampc_diag *r = NULL;
  assert_int_equal(ampc_diag_read_log(path, &r), AMPC_OK);
  assert_int_equal(ampc_diag_steps(r), 30);
  ampc_verdict a[AMPC_VERDICT_COUNT], b[AMPC_VERDICT_COUNT];
  const int na = verdicts(d, a), nb = verdicts(r, b);
  assert_int_equal(na, nb);
  for (int i = 0; i < na; i++) {
    assert_int_equal(a[i].kind, b[i].kind);
    assert_int_equal(a[i].branch, b[i].branch);
    assert_int_equal(a[i].step, b[i].step);
    for (int k = 0; k < a[i].n_evidence; k++)
      assert_string_equal(a[i].evidence[k], b[i].evidence[k]);
  }
  assert_int_equal(a[0].kind, AMPC_VERDICT_UNDERFLOW);
  assert_memory_equal(ampc_diag_grad_stats(d, 0), ampc_diag_grad_stats(r, 0),
                      sizeof(ampc_tm_stats));
  ampc_diag_free(r);
  ampc_diag_free(d);
  /* malformed logs */
  f = fopen(path, "w");
  fputs("{\"event\":\"config\",\"loss_scale\":{\"mode\":\"dynamic\"}}\nnot json\n", f);
  fclose(f);
  assert_int_equal(ampc_diag_read_log(path, &r), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), ":2:"));
  /* fields of the wrong type or range name themselves */
  static const char *const bad[] = {
      "\"branches\":[1,2]",
      "\"loss_scale\":\"x\"",
      "\"nonfinite_weights\":1e30",
      "\"branches\":{\"vision\":{\"grad\":{\"count\":-5}}}",
      "\"branches\":{\"vision\":{\"grad\":{\"log2_hist\":{\"lo\":1e308,\"counts\":[1]}}}}",
      "\"branches\":{\"text\":{\"accumulation_k\":\"k\"}}",
      "\"overflow\":1"};
  static const char *const field[] = {"branches", "loss_scale",     "nonfinite_weights", "count",
                                      "lo",       "accumulation_k", "overflow"};
  for (int i = 0; i < 7; i++) {
    f = fopen(path, "w");
    fprintf(f,
            "{\"event\":\"config\",\"loss_scale\":{\"mode\":\"dynamic\"}}\n"
            "{\"event\":\"step\",\"step\":1,%s}\n",
            bad[i]);
    fclose(f);
    assert_int_equal(ampc_diag_read_log(path, &r), AMPC_ERR_FORMAT);
    assert_non_null(strstr(ampc_last_error(), ":2:"));
    if (!strstr(ampc_last_error(), field[i]))
      fail_msg("case %d: '%s' does not name %s", i, ampc_last_error(), field[i]);
  }
  /* a partial last line (a killed writer) is left out; the lines before count */
  f = fopen(path, "w");
  fputs("{\"event\":\"config\",\"loss_scale\":{\"mode\":\"dynamic\"}}\n"
        "{\"event\":\"step\",\"step\":1,\"loss\":2}\n{\"event\":\"step\",\"st",
        f);
  fclose(f);
  assert_int_equal(ampc_diag_read_log(path, &r), AMPC_OK);
  assert_int_equal(ampc_diag_steps(r), 1);
  ampc_diag_free(r);
  f = fopen(path, "w");
  fputs("{\"event\":\"step\",\"step\":1}\n", f);
  fclose(f);
  assert_int_equal(ampc_diag_read_log(path, &r), AMPC_ERR_FORMAT);
  f = fopen(path, "w");
  fclose(f);
  assert_int_equal(ampc_diag_read_log(path, &r), AMPC_ERR_FORMAT); /* empty: no config */
  unlink(path);
  assert_int_equal(ampc_diag_read_log(path, &r), AMPC_ERR_IO);
  assert_null(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_counts),
      cmocka_unit_test(test_first_nonfinite_samples),
      cmocka_unit_test(test_gemm_and_elem_counts),
      cmocka_unit_test(test_shadow_gemm),
      cmocka_unit_test(test_tally_add),
      cmocka_unit_test(test_one_collector),
      cmocka_unit_test(test_workers_counted),
      cmocka_unit_test(test_collectors_per_thread),
      cmocka_unit_test(test_tally_many_threads),
      cmocka_unit_test(test_verdict_healthy_and_dynamic_skips),
      cmocka_unit_test(test_verdict_static_overflow),
      cmocka_unit_test(test_verdict_floor_and_weights),
      cmocka_unit_test(test_verdict_forward_overflow),
      cmocka_unit_test(test_verdict_underflow),
      cmocka_unit_test(test_verdict_swallowed_and_accumulation),
      cmocka_unit_test(test_verdict_fp8_saturation),
      cmocka_unit_test(test_compare_with_baseline),
      cmocka_unit_test(test_compare_loss_terms),
      cmocka_unit_test(test_log_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
