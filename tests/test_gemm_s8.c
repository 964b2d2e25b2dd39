/*
 * tests/test_gemm_s8.c: the INT8 GEMM (ampc_gemm_s8, include/ampc/gemm.h)
 * gives the exact integer sums on every path the CPU has (portable, AVX2
 * VPMADDWD, AVX512-VNNI VPDPBUSD; paths the CPU lacks are skipped with a
 * printed reason): against an int64 reference on random operands of odd
 * sizes around the vector widths (16 and 64 bytes) and the 4-row tiles,
 * with leading dimensions past the width; at the extremes (-128 * -128 and
 * 127 * -128 over k = 65536, the largest k: |sum| = 2^30, which a
 * saturating or wrapping path would get wrong); k = 0; bad arguments; the
 * prepared B with the fused FP32 dequantization, bit for bit; the
 * activation quantizer on every path, bit for bit.
 */
#include <float.h>
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

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static int8_t rnd8(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (int8_t)(uint8_t)(g_rng >> 56);
}

static const ampc_gemm_s8_path k_paths[] = {AMPC_GEMM_S8_PORTABLE, AMPC_GEMM_S8_AVX2,
                                            AMPC_GEMM_S8_AVX512VNNI, AMPC_GEMM_S8_AUTO};

/* path p available here (else say so once) */
static bool have(ampc_gemm_s8_path p) {
  int8_t a = 1, b = 1;
  int32_t c = 0;
  const ampc_status st = ampc_gemm_s8_with(p, 1, 1, 1, &a, 1, &b, 1, &c, 1);
  if (st != AMPC_ERR_UNSUPPORTED) {
    assert_int_equal(st, AMPC_OK);
    return true;
  }
  static bool said[8];
  if (!said[p])
    printf("skipped: this CPU has no %s path\n", ampc_gemm_s8_path_name(p)), said[p] = true;
  return false;
}

static void check(int64_t m, int64_t n, int64_t k, int64_t pad) {
  const int64_t lda = k + pad, ldb = k + 2 * pad, ldc = n + pad;
  int8_t *a = malloc((size_t)(m * lda + 1)), *b = malloc((size_t)(n * ldb + 1));
  int32_t *c = malloc((size_t)(m * ldc + 1) * sizeof *c);
  int64_t *ref = malloc((size_t)(m * n + 1) * sizeof *ref);
  assert_true(a && b && c && ref);
  for (int64_t i = 0; i < m * lda; i++)
    a[i] = rnd8();
  for (int64_t i = 0; i < n * ldb; i++)
    b[i] = rnd8();
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t s = 0;
      for (int64_t p = 0; p < k; p++)
        s += (int64_t)a[i * lda + p] * b[j * ldb + p];
      ref[i * n + j] = s;
    }
  for (size_t q = 0; q < sizeof k_paths / sizeof k_paths[0]; q++) {
    if (!have(k_paths[q]))
      continue;
    for (int64_t i = 0; i < m * ldc; i++)
      c[i] = 0x5A5A5A5A; /* the padding must stay */
    assert_int_equal(ampc_gemm_s8_with(k_paths[q], m, n, k, a, lda, b, ldb, c, ldc), AMPC_OK);
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++)
        if (c[i * ldc + j] != ref[i * n + j])
          fail_msg("%s: m=%lld n=%lld k=%lld: C[%lld,%lld] = %d, exact %lld",
                   ampc_gemm_s8_path_name(k_paths[q]), (long long)m, (long long)n, (long long)k,
                   (long long)i, (long long)j, c[i * ldc + j], (long long)ref[i * n + j]);
      for (int64_t j = n; j < ldc; j++)
        assert_int_equal(c[i * ldc + j], 0x5A5A5A5A);
    }
  }
  free(a), free(b), free(c), free(ref);
}

static void test_random_shapes(void **state) {
  (void)state;
  static const int64_t ks[] = {1, 3, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 200, 513};
  static const int64_t ns[] = {1, 3, 4, 5, 9};
  for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
    for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++)
      check(ik % 3 + 1, ns[in], ks[ik], (int64_t)(ik % 2) * 5);
  check(37, 67, 300, 3); /* several row blocks, threads */
  check(130, 33, 1024, 0);
}

/* the largest sums: every product 2^14 (or -127 * 128) over k = 65536 */
static void test_extremes(void **state) {
  (void)state;
  const int64_t k = AMPC_GEMM_S8_MAX_K, n = 5;
  int8_t *a = malloc((size_t)(2 * k)), *b = malloc((size_t)(n * k));
  int32_t c[2 * 5];
  assert_true(a && b);
  memset(a, 0x80, (size_t)k);               /* row 0: -128 */
  memset(a + k, 127, (size_t)k);            /* row 1: 127 */
  memset(b, 0x80, (size_t)k);               /* -128 */
  memset(b + k, 127, (size_t)k);            /* 127 */
  memset(b + 2 * k, 0x80, (size_t)(3 * k)); /* -128 */
  for (int64_t p = 0; p < k; p += 2)        /* row 3: -128, 127 alternating */
    b[3 * k + p + 1] = 127;
  memset(b + 4 * k, 0, (size_t)k); /* zeros */
  const int64_t exact[2][5] = {{(int64_t)k * 16384, -(int64_t)k * 16256, (int64_t)k * 16384,
                                (int64_t)k / 2 * (16384 - 16256), 0},
                               {-(int64_t)k * 16256, (int64_t)k * 16129, -(int64_t)k * 16256,
                                (int64_t)k / 2 * (16129 - 16256), 0}};
  for (size_t q = 0; q < sizeof k_paths / sizeof k_paths[0]; q++) {
    if (!have(k_paths[q]))
      continue;
    assert_int_equal(ampc_gemm_s8_with(k_paths[q], 2, n, k, a, k, b, k, c, n), AMPC_OK);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < n; j++)
        if (c[i * n + j] != exact[i][j])
          fail_msg("%s: extreme C[%d,%d] = %d, exact %lld", ampc_gemm_s8_path_name(k_paths[q]), i,
                   j, c[i * n + j], (long long)exact[i][j]);
  }
  free(a), free(b);
}

static void test_bad_args(void **state) {
  (void)state;
  int8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1};
  int32_t c[4] = {7, 7, 7, 7};
  assert_int_equal(ampc_gemm_s8(1, 1, AMPC_GEMM_S8_MAX_K + 1, a, AMPC_GEMM_S8_MAX_K + 1, b,
                                AMPC_GEMM_S8_MAX_K + 1, c, 1),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8(-1, 1, 1, a, 1, b, 1, c, 1), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8(1, 1, 4, NULL, 4, b, 4, c, 1), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8(1, 1, 4, a, 3, b, 4, c, 1), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8(2, 2, 2, a, 2, b, 2, c, 1), AMPC_ERR_INVALID_ARG);
  /* k = 0: C is zero; m or n = 0: nothing written */
  assert_int_equal(ampc_gemm_s8(2, 2, 0, a, 0, b, 0, c, 2), AMPC_OK);
  for (int i = 0; i < 4; i++)
    assert_int_equal(c[i], 0);
  c[0] = 7;
  assert_int_equal(ampc_gemm_s8(0, 2, 2, a, 2, b, 2, c, 2), AMPC_OK);
  assert_int_equal(c[0], 7);
}

/* the fused dequantization (ampc_gemm_s8_dequant on a prepared B): on every
 * path the bits of (float)acc * (alpha * col_scale[j]) then + bias[j], each
 * rounded once (volatile keeps the reference from being contracted into a
 * fused multiply-add); with and without per-column scales and bias, ldy past
 * n (the padding untouched), odd sizes around the 4 x 64 tile */
static void dequant_case(ampc_gemm_s8_path path, int64_t m, int64_t n, int64_t k, bool cs,
                         bool bias) {
  const int64_t lda = k + 3, ldb = k + 1, ldy = n + 2;
  int8_t *a = malloc((size_t)(m * lda)), *b = malloc((size_t)(n * ldb));
  float *y = malloc((size_t)(m * ldy) * sizeof *y), *scl = malloc((size_t)n * sizeof *scl),
        *bv = malloc((size_t)n * sizeof *bv);
  assert_true(a && b && y && scl && bv);
  for (int64_t i = 0; i < m * lda; i++)
    a[i] = rnd8();
  for (int64_t i = 0; i < n * ldb; i++)
    b[i] = rnd8();
  for (int64_t j = 0; j < n; j++)
    scl[j] = 1e-3f * (float)(1 + (rnd8() & 63)), bv[j] = 0.25f * (float)rnd8() + 0.1f;
  const float alpha = 0.0123f;
  ampc_gemm_s8_b pb;
  assert_int_equal(ampc_gemm_s8_prepare(&pb, path, n, k, b, ldb), AMPC_OK);
  for (int64_t i = 0; i < m * ldy; i++)
    y[i] = -7.5f;
  assert_int_equal(
      ampc_gemm_s8_dequant(&pb, m, a, lda, alpha, cs ? scl : NULL, bias ? bv : NULL, y, ldy),
      AMPC_OK);
  for (int64_t i = 0; i < m; i++) {
    for (int64_t j = 0; j < n; j++) {
      int64_t acc = 0;
      for (int64_t p = 0; p < k; p++)
        acc += (int64_t)a[i * lda + p] * b[j * ldb + p];
      volatile float s = alpha * (cs ? scl[j] : 1.0f);
      volatile float prod = (float)acc * s;
      const float want = bias ? prod + bv[j] : prod;
      if (y[i * ldy + j] != want)
        fail_msg("%s dequant m=%lld n=%lld k=%lld cs=%d bias=%d: y[%lld,%lld] = %.9g, want %.9g",
                 ampc_gemm_s8_path_name(path), (long long)m, (long long)n, (long long)k, cs, bias,
                 (long long)i, (long long)j, (double)y[i * ldy + j], (double)want);
    }
    for (int64_t j = n; j < ldy; j++)
      assert_true(y[i * ldy + j] == -7.5f);
  }
  ampc_gemm_s8_b_free(&pb);
  free(a), free(b), free(y), free(scl), free(bv);
}

static void test_dequant(void **state) {
  (void)state;
  static const int64_t ms[] = {1, 3, 4, 5, 9};
  static const int64_t ns[] = {1, 15, 16, 63, 64, 65, 130};
  static const int64_t ks[] = {1, 4, 17, 64, 131};
  for (size_t q = 0; q < sizeof k_paths / sizeof k_paths[0]; q++) {
    if (!have(k_paths[q]))
      continue;
    for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++)
      for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++)
        for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
          dequant_case(k_paths[q], ms[im], ns[in], ks[ik], (im + in) % 2 == 0, (in + ik) % 3 != 0);
    dequant_case(k_paths[q], 70, 200, 300, true, true); /* row blocks across threads */
  }
}

static void test_dequant_bad_args(void **state) {
  (void)state;
  int8_t a[8] = {0}, b[8] = {0};
  float y[8];
  ampc_gemm_s8_b pb;
  assert_int_equal(ampc_gemm_s8_prepare(NULL, AMPC_GEMM_S8_AUTO, 2, 4, b, 4), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_prepare(&pb, AMPC_GEMM_S8_AUTO, 2, 4, NULL, 4),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_prepare(&pb, AMPC_GEMM_S8_AUTO, 0, 4, b, 4), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_prepare(&pb, AMPC_GEMM_S8_AUTO, 2, 4, b, 3), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_prepare(&pb, AMPC_GEMM_S8_AUTO, 2, AMPC_GEMM_S8_MAX_K + 1, b,
                                        AMPC_GEMM_S8_MAX_K + 1),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_prepare(&pb, AMPC_GEMM_S8_AUTO, 2, 4, b, 4), AMPC_OK);
  assert_int_equal(ampc_gemm_s8_dequant(&pb, -1, a, 4, 1.0f, NULL, NULL, y, 2),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_dequant(&pb, 2, NULL, 4, 1.0f, NULL, NULL, y, 2),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_dequant(&pb, 2, a, 3, 1.0f, NULL, NULL, y, 2),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_dequant(&pb, 2, a, 4, 1.0f, NULL, NULL, y, 1),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_dequant(NULL, 2, a, 4, 1.0f, NULL, NULL, y, 2),
                   AMPC_ERR_INVALID_ARG);
  y[0] = 3.0f;
  assert_int_equal(ampc_gemm_s8_dequant(&pb, 0, a, 4, 1.0f, NULL, NULL, y, 2), AMPC_OK);
  assert_true(y[0] == 3.0f);
  ampc_gemm_s8_b_free(&pb);
  ampc_gemm_s8_b_free(&pb); /* twice: harmless */
}

/* the activation quantizer: every path the bits of the scalar definition
 * (written out here again), on random values at several magnitudes, the
 * ties (k + 1/2 steps), +-127.5 steps, +-inf, NaN, -0 and the largest
 * floats, at lengths around the vector widths and past a thread's block */
static void test_quantize(void **state) {
  (void)state;
  const int64_t n = 70001;
  float *x = malloc((size_t)n * sizeof *x);
  int8_t *q = malloc((size_t)n), *want = malloc((size_t)n);
  assert_true(x && q && want);
  const float scale = 0.037f;
  for (int64_t i = 0; i < n; i++) {
    const int kind = (int)(i % 7);
    const float r = (float)rnd8() + (float)(uint8_t)rnd8() / 256.0f;
    x[i] = kind == 0   ? r * scale
           : kind == 1 ? ((float)rnd8() + 0.5f) * scale /* ties, mostly */
           : kind == 2 ? r * scale * 3.0f               /* saturates */
           : kind == 3 ? r * 1e-3f * scale
                       : r * scale * 0.6f;
  }
  const float special[] = {INFINITY,       -INFINITY,      NAN,
                           -0.0f,          0.0f,           FLT_MAX,
                           -FLT_MAX,       127.5f * scale, -127.5f * scale,
                           126.5f * scale, 0.5f * scale,   -0.5f * scale,
                           1.5f * scale,   -2.5f * scale,  FLT_TRUE_MIN};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
    x[3 * i + 1] = special[i], x[n - 1 - 5 * (int64_t)i] = special[i];
  for (int64_t i = 0; i < n; i++) {
    volatile float v = x[i] / scale;
    float c = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    c = c == c ? c : 0.0f;
    want[i] = (int8_t)nearbyintf(c);
  }
  static const int64_t lens[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 16385, 70001};
  for (size_t p = 0; p < sizeof k_paths / sizeof k_paths[0]; p++) {
    if (!have(k_paths[p]))
      continue;
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      memset(q, 0x55, (size_t)n);
      assert_int_equal(ampc_gemm_s8_quantize(k_paths[p], x, lens[l], scale, q), AMPC_OK);
      for (int64_t i = 0; i < lens[l]; i++)
        if (q[i] != want[i])
          fail_msg("%s quantize n=%lld: q[%lld] = %d for x = %.9g, want %d",
                   ampc_gemm_s8_path_name(k_paths[p]), (long long)lens[l], (long long)i, q[i],
                   (double)x[i], want[i]);
      if (lens[l] < n)
        assert_int_equal(q[lens[l]], 0x55);
    }
  }
  assert_int_equal(ampc_gemm_s8_quantize(AMPC_GEMM_S8_AUTO, x, 4, 0.0f, q), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_quantize(AMPC_GEMM_S8_AUTO, x, 4, NAN, q), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_quantize(AMPC_GEMM_S8_AUTO, x, 4, INFINITY, q),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_quantize(AMPC_GEMM_S8_AUTO, x, -1, 1.0f, q), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_s8_quantize(AMPC_GEMM_S8_AUTO, NULL, 4, 1.0f, q),
                   AMPC_ERR_INVALID_ARG);
  free(x), free(q), free(want);
}

int main(void) {
  printf("INT8 GEMM path here: %s\n", ampc_gemm_s8_path_name(ampc_gemm_s8_best()));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_shapes),    cmocka_unit_test(test_extremes),
      cmocka_unit_test(test_bad_args),         cmocka_unit_test(test_dequant),
      cmocka_unit_test(test_dequant_bad_args), cmocka_unit_test(test_quantize),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
