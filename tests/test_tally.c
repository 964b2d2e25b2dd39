/*
 * tests/test_tally.c: the rounding tally's counting paths give the same
 * counts: each vector path (tally_avx2.c where the CPU has AVX2,
 * tally_avx512.c where it has AVX-512; a path the CPU or AMPC_ISA rules out
 * is skipped, with the reason printed) against the portable loops on random
 * values with every class mixed in (zeros, FP32 subnormals, values that
 * flush, turn subnormal or overflow in the 16-bit formats, inf, NaN), every
 * length and offset around the 64-value blocks, blocks spanning all
 * exponents, and every binary16 and bfloat16 bit pattern through a round
 * trip (whose counts are also known exactly). Then the two shortcuts of the
 * telemetry: the GEMM epilogue counting the FP32 sums of C = 1 * A B in
 * place, and the shadow GEMM's FP64 reference, against
 * ampc_gemm_reference's bits.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ampc/ampc.h"
#include "numeric/numeric.h"
#include "numeric/tally_impl.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_rng >> 32);
}

/* a random FP32 value of one of the classes that matter to the counts */
static float random_value(void) {
  const uint32_t sign = (rnd32() & 1u) << 31, man = rnd32() & 0x7FFFFFu;
  uint32_t e;
  switch (rnd32() % 12) {
  case 0: return sign ? -0.0f : 0.0f;
  case 1: e = 0; break;                       /* FP32 subnormal */
  case 2: e = 255; break;                     /* inf or NaN */
  case 3: e = 127 - 26 + rnd32() % 3; break;  /* near binary16's flush edge */
  case 4: e = 127 - 24 + rnd32() % 10; break; /* binary16 subnormals */
  case 5: e = 127 + 15 + rnd32() % 2; break;  /* near binary16's overflow */
  case 6: e = 1 + rnd32() % 254; break;       /* any exponent */
  case 7: e = 254 - rnd32() % 2; break;       /* near bfloat16's overflow */
  default: e = 127 - 8 + rnd32() % 12; break; /* the usual binades */
  }
  if (e == 255 && rnd32() % 2)
    return ampc_bits_f32(sign | 0x7F800000u); /* inf as often as NaN */
  return ampc_bits_f32(sign | (e << 23) | man);
}

static void assert_same_stats(const ampc_tm_stats *a, const ampc_tm_stats *b) {
  assert_int_equal(a->r.count, b->r.count);
  assert_int_equal(a->r.underflow, b->r.underflow);
  assert_int_equal(a->r.subnormal, b->r.subnormal);
  assert_int_equal(a->r.overflow, b->r.overflow);
  assert_int_equal(a->r.inf, b->r.inf);
  assert_int_equal(a->r.nan, b->r.nan);
  assert_int_equal(ampc_f32_bits(a->r.max_abs), ampc_f32_bits(b->r.max_abs));
  assert_int_equal(a->zeros, b->zeros);
  for (int i = 0; i < AMPC_TM_BINS; i++)
    assert_int_equal(a->hist[i], b->hist[i]);
}

/* the vector paths compared with the portable one */
static const int g_vpaths[2] = {AMPC_TALLY_AVX2, AMPC_TALLY_AVX512};

/* a tally per path for both_paths, kept for the whole run (drained after
 * each use) */
static ampc_tally *g_tal[3];

/* counts of src[0..n) stored as dst (dtype dt) on the portable and each
 * vector path this CPU has, compared */
static void both_paths(const float *src, const void *dst, ampc_dtype dt, size_t n,
                       ampc_tm_stats *out) {
  for (int p = 0; p < 3; p++) {
    if (!g_tal[p])
      g_tal[p] = ampc_tally_create();
    assert_non_null(g_tal[p]);
  }
  ampc_tm_stats sp, sv;
  assert_int_equal(ampc_tally_count_path(g_tal[0], src, dst, dt, n, AMPC_TALLY_PORTABLE),
                   AMPC_TALLY_PORTABLE);
  ampc_tally_drain(g_tal[0], &sp);
  for (int k = 0; k < 2; k++) {
    ampc_tally *t = g_tal[1 + k];
    if (ampc_tally_count_path(t, src, dst, dt, n, g_vpaths[k]) != g_vpaths[k]) {
      ampc_tally_drain(t, &sv);
      continue; /* not on this CPU (reported by main) */
    }
    ampc_tally_drain(t, &sv);
    assert_same_stats(&sp, &sv);
  }
  if (out)
    *out = sp;
}

static void test_paths_random(void **state) {
  (void)state;
  enum { N = 4096 };
  float *x = malloc(N * sizeof *x);
  uint16_t *h = malloc(N * sizeof *h), *b = malloc(N * sizeof *b);
  assert_non_null(x);
  assert_non_null(h);
  assert_non_null(b);
  for (int rep = 0; rep < 4; rep++) {
    for (int i = 0; i < N; i++)
      x[i] = random_value();
    if (rep == 1) /* the usual data: one class in long runs, few binades */
      for (int i = 0; i < N; i++)
        x[i] = i % 97 == 0 ? random_value()
                           : ampc_bits_f32((119u + rnd32() % 10u) << 23 | (rnd32() & 0x7FFFFFu));
    assert_int_equal(ampc_convert(h, AMPC_F16, x, AMPC_F32, N), AMPC_OK);
    assert_int_equal(ampc_convert(b, AMPC_BF16, x, AMPC_F32, N), AMPC_OK);
    /* every length up to three blocks and past, at several offsets */
    for (size_t off = 0; off < 5; off++)
      for (size_t n = 0; n <= 200; n++) {
        both_paths(x + off, h + off, AMPC_F16, n, NULL);
        both_paths(x + off, b + off, AMPC_BF16, n, NULL);
        both_paths(x + off, x + off, AMPC_F32, n, NULL);
      }
    ampc_tm_stats s;
    both_paths(x, h, AMPC_F16, N, &s);
    assert_int_equal(s.r.count, N);
    if (rep != 1) /* every class occurs */
      assert_true(s.r.underflow && s.r.subnormal && s.r.overflow && s.r.inf && s.r.nan && s.zeros);
    both_paths(x, b, AMPC_BF16, N, NULL);
    both_paths(x, x, AMPC_F32, N, NULL);
    /* a tally that counts in many calls keeps max |x| and the histogram */
    for (int k = 0; k < 2; k++) {
      ampc_tally *p = ampc_tally_create(), *v = ampc_tally_create();
      for (size_t o = 0; o < N; o += 77) {
        const size_t n = N - o < 77 ? N - o : 77;
        ampc_tally_count_path(p, x + o, h + o, AMPC_F16, n, AMPC_TALLY_PORTABLE);
        ampc_tally_count_path(v, x + o, h + o, AMPC_F16, n, g_vpaths[k]);
      }
      ampc_tm_stats sp, sv;
      ampc_tally_drain(p, &sp);
      ampc_tally_drain(v, &sv);
      assert_same_stats(&sp, &sv);
      assert_same_stats(&sp, &s);
      ampc_tally_free(p);
      ampc_tally_free(v);
    }
  }
  free(x), free(h), free(b);
}

/* blocks of 64 (two AVX2 blocks) whose exponents span every binade (the
 * vector paths' value by value fallback) and blocks with one exponent, or
 * none counted */
static void test_paths_wide_and_narrow(void **state) {
  (void)state;
  enum { N = 64 * 7 };
  float x[N];
  uint16_t h[N];
  for (int i = 0; i < N; i++) {
    const uint32_t man = rnd32() & 0x7FFFFFu;
    switch (i / 64) {
    case 0: x[i] = ampc_bits_f32((uint32_t)(i * 4) << 23 | man); break; /* 0 .. 252 */
    case 1: x[i] = ampc_bits_f32((uint32_t)(254 - i % 64) << 23 | man); break;
    case 2: x[i] = ampc_bits_f32(120u << 23 | man); break;
    case 3: x[i] = i % 2 ? 0.0f : INFINITY; break;
    case 4: x[i] = i % 3 ? NAN : -0.0f; break;
    case 5: /* exponents 1 .. 14 and inf: the largest is below the sweep's 16 bins */
      x[i] = i % 5 ? ampc_bits_f32((uint32_t)(i % 15) << 23 | man) : INFINITY;
      break;
    default: x[i] = ampc_bits_f32((i % 2 ? 1u : 254u) << 23 | man); break;
    }
  }
  assert_int_equal(ampc_convert(h, AMPC_F16, x, AMPC_F32, N), AMPC_OK);
  ampc_tm_stats s;
  both_paths(x, h, AMPC_F16, N, &s);
  assert_int_equal(s.hist[255], 0);
  assert_int_equal(s.hist[120], 64 + 1); /* block 2, and 120 = 4 * 30 in block 0 */
  assert_int_equal(s.hist[254], 1 + 32);
  assert_int_equal(s.hist[14], 4); /* block 5: i = 329, 344, 359, 374 */
  both_paths(x, x, AMPC_F32, N, NULL);
}

/* every 16-bit pattern, widened to FP32 and stored back: nothing rounds,
 * so the counts are the format's classes */
static void test_paths_all_patterns(void **state) {
  (void)state;
  enum { N = 65536 };
  float *x = malloc(N * sizeof *x);
  uint16_t *h = malloc(N * sizeof *h), *in = malloc(N * sizeof *in);
  assert_non_null(x);
  assert_non_null(h);
  assert_non_null(in);
  for (int f = 0; f < 2; f++) {
    const ampc_dtype dt = f ? AMPC_BF16 : AMPC_F16;
    for (int i = 0; i < N; i++)
      in[i] = (uint16_t)i;
    assert_int_equal(ampc_convert(x, AMPC_F32, in, dt, N), AMPC_OK);
    assert_int_equal(ampc_convert(h, dt, x, AMPC_F32, N), AMPC_OK);
    ampc_tm_stats s;
    both_paths(x, h, dt, N, &s);
    const uint64_t man = f ? 127 : 1023; /* non-zero mantissas */
    assert_int_equal(s.r.count, N);
    assert_int_equal(s.r.underflow, 0);
    assert_int_equal(s.r.overflow, 0);
    assert_int_equal(s.r.subnormal, 2 * man);
    assert_int_equal(s.r.inf, 2);
    assert_int_equal(s.r.nan, 2 * man);
    assert_int_equal(s.zeros, 2);
    uint64_t counted = 0;
    for (int b = 0; b < AMPC_TM_BINS; b++)
      counted += s.hist[b];
    assert_int_equal(counted, N - 2 - 2 - 2 * man); /* the finite non-zero values */
    /* the same values nudged by one FP32 ulp either way: now they round */
    for (int i = 0; i < N; i++)
      x[i] = ampc_bits_f32(ampc_f32_bits(x[i]) + (i % 2 ? 1u : (uint32_t)-1));
    assert_int_equal(ampc_convert(h, dt, x, AMPC_F32, N), AMPC_OK);
    both_paths(x, h, dt, N, NULL);
  }
  free(x), free(h), free(in);
}

/* C = 1 * A B into binary16 with the tally on: what it counts is the FP32
 * product (the same GEMM into FP32) and its rounding, counted directly;
 * C = 2 * A B + C goes through the epilogue's buffer */
static void test_gemm_counts(void **state) {
  (void)state;
  enum { M = 37, K = 19, N = 301 };
  float *af = malloc(M * K * sizeof *af), *bf = malloc(K * N * sizeof *bf);
  float *y = malloc(M * N * sizeof *y);
  uint16_t *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
  uint16_t *c = malloc(M * N * sizeof *c), *c2 = malloc(M * N * sizeof *c2);
  assert_true(af && bf && a && b && y && c && c2);
  /* rows 0..9 of A small, 10..19 large, the rest in between; B's columns
   * span 2^-17 .. 2^2: some sums flush, some turn subnormal, some overflow;
   * binary16 operands (an FP32 GEMM may go to BLAS) */
  for (int i = 0; i < M * K; i++) {
    const int row = i / K;
    const uint32_t e = row < 10   ? 113u + rnd32() % 2u
                       : row < 20 ? 140u + rnd32() % 2u
                                  : 118u + rnd32() % 16u;
    af[i] = ampc_bits_f32((rnd32() & 0x80000000u) | e << 23 | (rnd32() & 0x7FE000u));
  }
  for (int i = 0; i < K * N; i++)
    bf[i] = i % 11 == 0
                ? 0.0f
                : ampc_bits_f32((rnd32() & 0x80000000u) | (110u + (uint32_t)(i % N) % 20u) << 23 |
                                (rnd32() & 0x7FE000u));
  assert_int_equal(ampc_convert(a, AMPC_F16, af, AMPC_F32, M * K), AMPC_OK);
  assert_int_equal(ampc_convert(b, AMPC_F16, bf, AMPC_F32, K * N), AMPC_OK);
  /* all N columns (C's rows follow each other), then N - 5 of them with
   * ldc = N (each row apart) */
  for (int run = 0; run < 4; run++) {
    const int alpha2 = run % 2, nu = run < 2 ? N : N - 5;
    const float alpha = alpha2 ? 2.0f : 1.0f, beta = alpha2 ? 1.0f : 0.0f;
    for (int i = 0; i < M * N; i++)
      c[i] = c2[i] = ampc_f32_to_f16(alpha2 ? 0.25f : 0.0f).bits;
    ampc_tally *t = ampc_tally_create();
    ampc_tally *was = ampc_tally_bind(t);
    assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, M, nu, K, alpha, a, AMPC_F16, K, b, AMPC_F16,
                               N, beta, c, AMPC_F16, N, AMPC_ACC_F32),
                     AMPC_OK);
    (void)ampc_tally_bind(was);
    ampc_tm_stats got, want;
    ampc_tally_drain(t, &got);
    /* the FP32 values that were rounded: the same GEMM into FP32 */
    assert_int_equal(ampc_convert(y, AMPC_F32, c2, AMPC_F16, M * N), AMPC_OK);
    assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, M, nu, K, alpha, a, AMPC_F16, K, b, AMPC_F16,
                               N, beta, y, AMPC_F32, N, AMPC_ACC_F32),
                     AMPC_OK);
    assert_int_equal(ampc_convert(c2, AMPC_F16, y, AMPC_F32, M * N), AMPC_OK);
    assert_memory_equal(c, c2, M * N * sizeof *c);
    for (int r = 0; r < M; r++)
      ampc_tally_count_path(t, y + r * N, c2 + r * N, AMPC_F16, (size_t)nu, AMPC_TALLY_PORTABLE);
    ampc_tally_drain(t, &want);
    assert_same_stats(&got, &want);
    assert_true(got.r.overflow > 0);
    if (!alpha2) /* (+ 0.25 is never small) */
      assert_true(got.r.underflow > 0 && got.r.subnormal > 0);
    ampc_tally_free(t);
  }
  free(af), free(bf), free(a), free(b), free(y), free(c), free(c2);
}

/* the shadow's FP64 reference has ampc_gemm_reference's bits: the error it
 * keeps for a product handed in equals the one computed here from
 * ampc_gemm_reference the way the collector computes it */
static void test_shadow_reference_bits(void **state) {
  (void)state;
  enum { K = 83, N = 37, ROWS = 16 };
  const ampc_dtype dts[3] = {AMPC_F32, AMPC_F16, AMPC_BF16};
  float xf[ROWS * K], wf[N * K], y[ROWS * N];
  uint16_t x16[ROWS * K], w16[N * K];
  double ref[ROWS * N];
  for (int i = 0; i < ROWS * K; i++)
    xf[i] = (float)(rnd32() >> 8) / 16777216.0f - 0.5f;
  for (int i = 0; i < N * K; i++)
    wf[i] = (float)(rnd32() >> 8) / 8388608.0f - 1.0f;
  for (int xi = 0; xi < 3; xi++)
    for (int wi = 0; wi < 3; wi++) {
      const void *x = xf, *w = wf;
      if (dts[xi] != AMPC_F32)
        assert_int_equal(ampc_convert(x16, dts[xi], xf, AMPC_F32, ROWS * K), AMPC_OK), x = x16;
      if (dts[wi] != AMPC_F32)
        assert_int_equal(ampc_convert(w16, dts[wi], wf, AMPC_F32, N * K), AMPC_OK), w = w16;
      assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_T, ROWS, N, K, 1.0f, x, dts[xi], K, w, dts[wi],
                                 K, 0.0f, y, AMPC_F32, N, AMPC_ACC_F16),
                       AMPC_OK);
      ampc_telemetry *t = calloc(1, sizeof *t);
      assert_non_null(t);
      assert_int_equal(ampc_telemetry_begin(t), AMPC_OK);
      assert_int_equal(ampc_telemetry_shadow_result(t, AMPC_BRANCH_TEXT, "t.fc", ROWS, K, N, x,
                                                    dts[xi], w, dts[wi], y),
                       AMPC_OK);
      ampc_telemetry_end(t);
      assert_int_equal(ampc_gemm_reference(AMPC_OP_N, AMPC_OP_T, ROWS, N, K, 1.0, x, dts[xi], K, w,
                                           dts[wi], K, 0.0, NULL, AMPC_F32, N, ref, NULL),
                       AMPC_OK);
      double num = 0.0, den = 0.0;
      for (int i = 0; i < ROWS * N; i++) {
        const double d = (double)y[i] - ref[i];
        num += d * d, den += ref[i] * ref[i];
      }
      const double rel = sqrt(num / den);
      assert_true(rel > 0.0);
      assert_true(t->acc_err[AMPC_BRANCH_TEXT] == rel);
      free(t);
    }
}

int main(void) {
  /* the vector paths the comparisons skip here, and why */
  static const float one[1] = {1.0f};
  for (int k = 0; k < 2; k++) {
    ampc_tally *t = ampc_tally_create();
    if (t && ampc_tally_count_path(t, one, one, AMPC_F32, 1, g_vpaths[k]) != g_vpaths[k])
      printf("test_tally: the %s counting loops are not compared: this CPU lacks %s, or "
             "AMPC_ISA rules them out\n",
             k ? "AVX-512" : "AVX2", k ? "AVX-512 F/BW/VL" : "AVX2/FMA/F16C");
    ampc_tally_free(t);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_paths_random),          cmocka_unit_test(test_paths_wide_and_narrow),
      cmocka_unit_test(test_paths_all_patterns),    cmocka_unit_test(test_gemm_counts),
      cmocka_unit_test(test_shadow_reference_bits),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  for (int p = 0; p < 3; p++)
    ampc_tally_free(g_tal[p]);
  return failed;
}
