/*
 * tests/test_gemm.c: ampc_gemm against the double-precision reference.
 *
 * Bound (FP32 accumulation), derived from the error analysis of a sum of K
 * products in any order (Higham, "Accuracy and Stability of Numerical
 * Algorithms", 2nd ed., section 3.1) plus the epilogue's roundings:
 *   |fp32_result - exact| <= (K + 3) * 2^-24 * (|alpha| sum_p |a b| + |beta| |c|)
 * and the final rounding to C's dtype adds at most u_out * |fp32_result| plus
 * half the smallest subnormal of the output (u_out = 2^-24, 2^-11, 2^-8 for
 * f32, f16, bf16). The reference's own error, K * 2^-53 * sum |a b|, is added.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "kernels/gemm_impl.h"
#include "numeric/convert_impl.h"
#include "numeric/numeric.h"

static uint64_t g_rng = 0x243F6A8885A308D3u;
static double urand(void) { /* [0, 1) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 0x2545F4914F6CDD1Du) >> 11) * 0x1p-53;
}

static void put(void *p, ampc_dtype dt, int64_t i, float v) {
  switch (dt) {
  case AMPC_F16: ((ampc_f16 *)p)[i] = ampc_f32_to_f16(v); break;
  case AMPC_BF16: ((ampc_bf16 *)p)[i] = ampc_f32_to_bf16(v); break;
  default: ((float *)p)[i] = v; break;
  }
}
static double get(const void *p, ampc_dtype dt, int64_t i) {
  switch (dt) {
  case AMPC_F16: return (double)ampc_f16_to_f32(((const ampc_f16 *)p)[i]);
  case AMPC_BF16: return (double)ampc_bf16_to_f32(((const ampc_bf16 *)p)[i]);
  default: return (double)((const float *)p)[i];
  }
}

/* rows x cols matrix with leading dimension ld, random in [-1, 1) (padding
 * holds NaN so that a read outside the matrix shows up) */
static void *rand_matrix(ampc_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t total = rows > 0 ? (rows - 1) * ld + cols : 0;
  void *p = malloc((size_t)(total + 1) * ampc_dtype_size(dt));
  assert_non_null(p);
  for (int64_t i = 0; i <= total; i++)
    put(p, dt, i, NAN);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      put(p, dt, r * ld + c, (float)(2.0 * urand() - 1.0));
  return p;
}

static double unit_roundoff(ampc_dtype dt) {
  return dt == AMPC_F16 ? 0x1p-11 : dt == AMPC_BF16 ? 0x1p-8 : 0x1p-24;
}
static double half_min_sub(ampc_dtype dt) {
  return dt == AMPC_F16 ? 0x1p-25 : dt == AMPC_BF16 ? 0x1p-134 : 0x1p-150;
}

typedef struct {
  ampc_op opa, opb;
  int64_t m, n, k, pad;
  ampc_dtype adt, bdt, cdt;
  float alpha, beta;
  int64_t batch;
} gcase;

static int64_t g_checked;

/* Run one (batched) case and check every element against the reference. */
static void check_case(const gcase *t) {
  const int64_t ar = t->opa == AMPC_OP_N ? t->m : t->k, ac = t->opa == AMPC_OP_N ? t->k : t->m;
  const int64_t br = t->opb == AMPC_OP_N ? t->k : t->n, bc = t->opb == AMPC_OP_N ? t->n : t->k;
  const int64_t lda = ac + t->pad, ldb = bc + t->pad, ldc = t->n + t->pad;
  const int64_t batch = t->batch > 0 ? t->batch : 1;
  /* batch matrices laid out one after another with gaps */
  void *a = rand_matrix(t->adt, batch * ar, ac, lda); /* rows cover the strides */
  void *b = rand_matrix(t->bdt, batch * br, bc, ldb);
  void *c = rand_matrix(t->cdt, batch * t->m, t->n, ldc);
  const int64_t stra = ar * lda, strb = br * ldb, strc = t->m * ldc;
  if (t->beta == 0.0f) /* garbage that must not propagate */
    for (int64_t i = 0; i < (batch * t->m - 1) * ldc + t->n; i++)
      put(c, t->cdt, i, NAN);
  const size_t mn = (size_t)(t->m * t->n);
  double *ref = malloc((mn + 1) * sizeof *ref * (size_t)batch);
  double *abs_ = malloc((mn + 1) * sizeof *abs_ * (size_t)batch);
  assert_non_null(ref);
  assert_non_null(abs_);
  const size_t cbytes = (size_t)((batch * t->m - 1) * ldc + t->n + 1) * ampc_dtype_size(t->cdt);
  void *c0 = malloc(cbytes);
  assert_non_null(c0);
  memcpy(c0, c, cbytes);
  for (int64_t q = 0; q < batch; q++) {
    const size_t es_a = ampc_dtype_size(t->adt), es_b = ampc_dtype_size(t->bdt),
                 es_c = ampc_dtype_size(t->cdt);
    assert_int_equal(ampc_gemm_reference(t->opa, t->opb, t->m, t->n, t->k, (double)t->alpha,
                                         (char *)a + (size_t)(q * stra) * es_a, t->adt, lda,
                                         (char *)b + (size_t)(q * strb) * es_b, t->bdt, ldb,
                                         (double)t->beta, (char *)c0 + (size_t)(q * strc) * es_c,
                                         t->cdt, ldc, ref + q * (int64_t)mn,
                                         abs_ + q * (int64_t)mn),
                     AMPC_OK);
  }
  ampc_status st;
  if (t->batch > 0)
    st = ampc_gemm_strided_batched(t->opa, t->opb, t->m, t->n, t->k, t->alpha, a, t->adt, lda, stra,
                                   b, t->bdt, ldb, strb, t->beta, c, t->cdt, ldc, strc, batch,
                                   AMPC_ACC_F32);
  else
    st = ampc_gemm(t->opa, t->opb, t->m, t->n, t->k, t->alpha, a, t->adt, lda, b, t->bdt, ldb,
                   t->beta, c, t->cdt, ldc, AMPC_ACC_F32);
  assert_int_equal(st, AMPC_OK);
  const double u = unit_roundoff(t->cdt);
  for (int64_t q = 0; q < batch; q++) {
    for (int64_t i = 0; i < t->m; i++) {
      for (int64_t j = 0; j < t->n; j++) {
        const int64_t ci = q * strc + i * ldc + j;
        const double got = get(c, t->cdt, ci), r = ref[q * (int64_t)mn + i * t->n + j];
        const double cold = t->beta != 0.0f ? fabs(get(c0, t->cdt, ci)) : 0.0;
        const double s = abs_[q * (int64_t)mn + i * t->n + j];
        const double e32 = (double)(t->k + 3) * 0x1p-24 *
                               (fabs((double)t->alpha) * s + fabs((double)t->beta) * cold) +
                           (double)t->k * 0x1p-52 * s;
        const double bound = e32 + u * (fabs(r) + e32) + half_min_sub(t->cdt);
        if (!(fabs(got - r) <= bound))
          fail_msg("op=%d%d m=%lld n=%lld k=%lld dt=%s,%s->%s alpha=%g beta=%g batch=%lld "
                   "[%lld][%lld][%lld]: got %.9g ref %.9g |err| %.3g > bound %.3g",
                   t->opa, t->opb, (long long)t->m, (long long)t->n, (long long)t->k,
                   ampc_dtype_name(t->adt), ampc_dtype_name(t->bdt), ampc_dtype_name(t->cdt),
                   (double)t->alpha, (double)t->beta, (long long)t->batch, (long long)q,
                   (long long)i, (long long)j, got, r, fabs(got - r), bound);
      }
    }
  }
  /* nothing outside the C matrices changed (padding, gaps) */
  for (int64_t q = 0; q < batch; q++)
    for (int64_t i = 0; i < t->m; i++)
      for (int64_t j = t->n; j < (i + 1 < t->m || q + 1 < batch ? ldc : t->n); j++) {
        const int64_t ci = q * strc + i * ldc + j;
        if (memcmp((char *)c + ci * (int64_t)ampc_dtype_size(t->cdt),
                   (char *)c0 + ci * (int64_t)ampc_dtype_size(t->cdt),
                   ampc_dtype_size(t->cdt)) != 0)
          fail_msg("element outside C changed at offset %lld", (long long)ci);
      }
  g_checked += batch * t->m * t->n;
  free(a);
  free(b);
  free(c);
  free(c0);
  free(ref);
  free(abs_);
}

static const ampc_dtype k_dts[3] = {AMPC_F32, AMPC_F16, AMPC_BF16};

static void test_all_combinations_small(void **state) {
  (void)state;
  const int64_t sizes[][3] = {{1, 1, 1},  {5, 17, 3},   {7, 33, 67}, {67, 45, 31}, {13, 1, 64},
                              {1, 67, 9}, {64, 64, 64}, {6, 16, 8},  {23, 29, 41}};
  const float ab[][2] = {{1.0f, 0.0f}, {0.75f, -1.25f}};
  g_checked = 0;
  for (int opa = 0; opa < 2; opa++)
    for (int opb = 0; opb < 2; opb++)
      for (int x = 0; x < 3; x++)
        for (int y = 0; y < 3; y++)
          for (int z = 0; z < 3; z++)
            for (int s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++)
              for (int q = 0; q < 2; q++) {
                gcase t = {(ampc_op)opa, (ampc_op)opb, sizes[s][0],
                           sizes[s][1],  sizes[s][2],  (s % 3 == 0) ? 0 : 3,
                           k_dts[x],     k_dts[y],     k_dts[z],
                           ab[q][0],     ab[q][1],     0};
                check_case(&t);
              }
  print_message("small combinations: %lld elements checked\n", (long long)g_checked);
}

static void test_larger(void **state) {
  (void)state;
  const int64_t sizes[][3] = {{300, 257, 299}, {129, 200, 4096}, {97, 300, 513}};
  const ampc_dtype combos[][3] = {{AMPC_F16, AMPC_F16, AMPC_F32},
                                  {AMPC_BF16, AMPC_BF16, AMPC_BF16},
                                  {AMPC_F32, AMPC_F16, AMPC_F16},
                                  {AMPC_F32, AMPC_F32, AMPC_F32}};
  for (int opa = 0; opa < 2; opa++)
    for (int opb = 0; opb < 2; opb++)
      for (int s = 0; s < 3; s++)
        for (int c = 0; c < 4; c++) {
          gcase t = {
              (ampc_op)opa, (ampc_op)opb, sizes[s][0],  sizes[s][1], sizes[s][2],          s,
              combos[c][0], combos[c][1], combos[c][2], 1.0f,        s == 1 ? 0.5f : 0.0f, 0};
          check_case(&t);
        }
}

static void test_batched(void **state) {
  (void)state;
  for (int opa = 0; opa < 2; opa++)
    for (int opb = 0; opb < 2; opb++)
      for (int x = 0; x < 3; x++) {
        gcase t = {(ampc_op)opa,
                   (ampc_op)opb,
                   17,
                   24,
                   32,
                   2,
                   k_dts[x],
                   AMPC_F16,
                   k_dts[(x + 1) % 3],
                   0.125f,
                   x == 1 ? 1.0f : 0.0f,
                   5};
        check_case(&t);
        gcase u = {(ampc_op)opa, (ampc_op)opb, 64,       64,   16,   0,
                   AMPC_F16,     AMPC_F16,     AMPC_F32, 1.0f, 0.0f, 3};
        check_case(&u);
      }
}

static void test_broadcast_stride_zero(void **state) {
  (void)state;
  /* the same B for every batch matrix (stride_b = 0) */
  const int64_t m = 9, n = 20, k = 11, batch = 4;
  void *a = rand_matrix(AMPC_F16, batch * m, k, k);
  void *b = rand_matrix(AMPC_F16, k, n, n);
  float *c = calloc((size_t)(batch * m * n), sizeof *c);
  double *ref = malloc((size_t)(m * n) * sizeof *ref);
  assert_int_equal(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, m, n, k, 1.0f, a, AMPC_F16, k,
                                             m * k, b, AMPC_F16, n, 0, 0.0f, c, AMPC_F32, n, m * n,
                                             batch, AMPC_ACC_F32),
                   AMPC_OK);
  for (int64_t q = 0; q < batch; q++) {
    assert_int_equal(ampc_gemm_reference(AMPC_OP_N, AMPC_OP_N, m, n, k, 1.0,
                                         (ampc_f16 *)a + q * m * k, AMPC_F16, k, b, AMPC_F16, n,
                                         0.0, NULL, AMPC_F32, n, ref, NULL),
                     AMPC_OK);
    for (int64_t i = 0; i < m * n; i++)
      assert_true(fabs((double)c[q * m * n + i] - ref[i]) <= (double)(k + 3) * 0x1p-24 * (double)k);
  }
  free(a);
  free(b);
  free(c);
  free(ref);
}

static void test_special_alpha_beta(void **state) {
  (void)state;
  /* alpha = 0: A and B (full of NaN) are not read; C = beta * C */
  ampc_f16 a[4], b[4];
  for (int i = 0; i < 4; i++)
    a[i] = b[i] = ampc_f32_to_f16(NAN);
  float c[4] = {1, 2, 3, 4};
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 0.0f, a, AMPC_F16, 2, b, AMPC_F16, 2,
                             2.0f, c, AMPC_F32, 2, AMPC_ACC_F32),
                   AMPC_OK);
  assert_true(c[0] == 2.0f && c[1] == 4.0f && c[2] == 6.0f && c[3] == 8.0f);
  /* K = 0 with beta = 0: zeros, even over NaN garbage */
  for (int i = 0; i < 4; i++)
    c[i] = NAN;
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 0, 1.0f, NULL, AMPC_F16, 1, NULL, AMPC_F16,
                             2, 0.0f, c, AMPC_F32, 2, AMPC_ACC_F32),
                   AMPC_OK);
  for (int i = 0; i < 4; i++)
    assert_true(c[i] == 0.0f);
  /* inf in A propagates */
  ampc_f16 one = ampc_f32_to_f16(1.0f), a2[2] = {ampc_f32_to_f16(INFINITY), one},
           b2[2] = {one, one};
  float c1 = 0;
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 1, 1, 2, 1.0f, a2, AMPC_F16, 2, b2, AMPC_F16, 1,
                             0.0f, &c1, AMPC_F32, 1, AMPC_ACC_F32),
                   AMPC_OK);
  assert_true(isinf(c1) && c1 > 0);
  /* FP16 output overflows to inf as binary16 rounding says: 256 * 256 = 65536 */
  ampc_f16 big = ampc_f32_to_f16(256.0f), ch;
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 1, 1, 1, 1.0f, &big, AMPC_F16, 1, &big, AMPC_F16,
                             1, 0.0f, &ch, AMPC_F16, 1, AMPC_ACC_F32),
                   AMPC_OK);
  assert_int_equal(ch.bits, 0x7C00);
}

/* Degenerate leading dimensions (lda or ldb = 1 with a transposed operand: a
 * row stored as a column, an outer product) on every dtype path, including
 * the OpenBLAS one, against the reference. */
static void test_unit_leading_dims(void **state) {
  (void)state;
  for (int x = 0; x < 3; x++) {
    const ampc_dtype dt = k_dts[x];
    /* op(A) = A^T with A stored K x 1 (lda = 1): a single row */
    void *a = rand_matrix(dt, 4, 1, 1), *b = rand_matrix(dt, 4, 3, 3);
    float c[3] = {-7, -7, -7};
    double ref[3];
    assert_int_equal(ampc_gemm(AMPC_OP_T, AMPC_OP_N, 1, 3, 4, 1.0f, a, dt, 1, b, dt, 3, 0.0f, c,
                               AMPC_F32, 3, AMPC_ACC_F32),
                     AMPC_OK);
    assert_int_equal(ampc_gemm_reference(AMPC_OP_T, AMPC_OP_N, 1, 3, 4, 1.0, a, dt, 1, b, dt, 3,
                                         0.0, NULL, AMPC_F32, 3, ref, NULL),
                     AMPC_OK);
    for (int j = 0; j < 3; j++)
      assert_true(fabs((double)c[j] - ref[j]) <= 7 * 0x1p-24 * 4 + 1e-30);
    free(a);
    free(b);
    /* outer product: K = 1, op(B) = B^T with B stored N x 1 (ldb = 1) */
    void *u = rand_matrix(dt, 3, 1, 1), *v = rand_matrix(dt, 4, 1, 1);
    float o[12];
    double oref[12];
    assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_T, 3, 4, 1, 1.0f, u, dt, 1, v, dt, 1, 0.0f, o,
                               AMPC_F32, 4, AMPC_ACC_F32),
                     AMPC_OK);
    assert_int_equal(ampc_gemm_reference(AMPC_OP_N, AMPC_OP_T, 3, 4, 1, 1.0, u, dt, 1, v, dt, 1,
                                         0.0, NULL, AMPC_F32, 4, oref, NULL),
                     AMPC_OK);
    for (int j = 0; j < 12; j++) /* one product: exact for 16-bit operands, 1 rounding for f32 */
      assert_true(fabs((double)o[j] - oref[j]) <= (dt == AMPC_F32 ? 0x1p-24 * fabs(oref[j]) : 0.0));
    free(u);
    free(v);
  }
}

static void test_errors(void **state) {
  (void)state;
  ampc_f16 a[16] = {{0}}, b[16] = {{0}};
  float c[16];
  for (int i = 0; i < 16; i++)
    c[i] = 42.0f;
  const ampc_acc acc = AMPC_ACC_F32;
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, -1, 2, 2, 1, a, AMPC_F16, 2, b, AMPC_F16, 2, 0,
                             c, AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "negative"));
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 3, 1, a, AMPC_F16, 2, b, AMPC_F16, 2, 0, c,
                             AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG); /* lda < K */
  assert_non_null(strstr(ampc_last_error(), "lda"));
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_T, 2, 3, 2, 1, a, AMPC_F16, 2, b, AMPC_F16, 1, 0, c,
                             AMPC_F32, 3, acc),
                   AMPC_ERR_INVALID_ARG); /* ldb < K for B^T */
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 3, 2, 1, a, AMPC_F16, 2, b, AMPC_F16, 3, 0, c,
                             AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG); /* ldc < N */
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, NULL, AMPC_F16, 2, b, AMPC_F16, 2, 0,
                             c, AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, a, AMPC_F16, 2, b, AMPC_F16, 2, 0,
                             NULL, AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, a, AMPC_F8_E4M3, 2, b, AMPC_F16, 2,
                             0, c, AMPC_F32, 2, acc),
                   AMPC_ERR_UNSUPPORTED);
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, a, (ampc_dtype)42, 2, b, AMPC_F16, 2,
                             0, c, AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm((ampc_op)5, AMPC_OP_N, 2, 2, 2, 1, a, AMPC_F16, 2, b, AMPC_F16, 2, 0,
                             c, AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, a, AMPC_F16, 2, b, AMPC_F16, 2, 0, c,
                             AMPC_F32, 2, (ampc_acc)7),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, a, AMPC_F16, 2, 4, b,
                                             AMPC_F16, 2, 4, 0, c, AMPC_F32, 2, 3, 2, acc),
                   AMPC_ERR_INVALID_ARG); /* C matrices overlap */
  assert_non_null(strstr(ampc_last_error(), "overlap"));
  for (int i = 0; i < 16; i++)
    assert_true(c[i] == 42.0f); /* nothing written on error */
  /* sizes whose element offsets overflow int64 are refused before any access */
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, INT64_C(1) << 40, INT64_C(1) << 40,
                             INT64_C(1) << 40, 1, a, AMPC_F16, INT64_C(1) << 40, b, AMPC_F16,
                             INT64_C(1) << 40, 0, c, AMPC_F32, INT64_C(1) << 40, acc),
                   AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "too large"));
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, a, AMPC_F16, INT64_MAX, b, AMPC_F16,
                             2, 0, c, AMPC_F32, 2, acc),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1, a, AMPC_F16, 2, 0, b,
                                             AMPC_F16, 2, 0, 0, c, AMPC_F32, 2, INT64_MAX / 2, 3,
                                             acc),
                   AMPC_ERR_INVALID_ARG);
  /* the reference follows the same NULL rule: alpha = 0 reads neither A nor B */
  double r4[4];
  assert_int_equal(ampc_gemm_reference(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 0.0, NULL, AMPC_F16, 2, NULL,
                                       AMPC_F16, 2, 0.0, NULL, AMPC_F32, 2, r4, NULL),
                   AMPC_OK);
  assert_true(r4[0] == 0.0 && r4[3] == 0.0);
  /* empty problems are fine */
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 0, 2, 2, 1, NULL, AMPC_F16, 2, NULL, AMPC_F16, 2,
                             0, NULL, AMPC_F32, 2, acc),
                   AMPC_OK);
  ampc_gemm_config bad = {7, 256, 512};
  assert_int_equal(ampc_gemm_set_config(&bad), AMPC_ERR_INVALID_ARG);
}

/* sum of n ones as a 1 x n by n x 1 product */
static float sum_ones(ampc_dtype dt, int64_t n, ampc_acc acc, ampc_dtype cdt) {
  void *a = malloc((size_t)n * ampc_dtype_size(dt));
  assert_non_null(a);
  for (int64_t i = 0; i < n; i++)
    put(a, dt, i, 1.0f);
  uint32_t cbuf = 0;
  assert_int_equal(
      ampc_gemm(AMPC_OP_N, AMPC_OP_N, 1, 1, n, 1.0f, a, dt, n, a, dt, 1, 0.0f, &cbuf, cdt, 1, acc),
      AMPC_OK);
  free(a);
  return (float)get(&cbuf, cdt, 0);
}

static void test_accumulation_ablation_exact(void **state) {
  (void)state;
  assert_true(sum_ones(AMPC_F16, 4096, AMPC_ACC_F32, AMPC_F32) == 4096.0f);
  assert_true(sum_ones(AMPC_F16, 4096, AMPC_ACC_F32, AMPC_F16) == 4096.0f);
  assert_true(sum_ones(AMPC_F16, 4096, AMPC_ACC_F16, AMPC_F32) == 2048.0f);
  assert_true(sum_ones(AMPC_F16, 8192, AMPC_ACC_F16, AMPC_F32) == 2048.0f);
  assert_true(sum_ones(AMPC_F16, 2048, AMPC_ACC_F16, AMPC_F32) == 2048.0f);
  assert_true(sum_ones(AMPC_BF16, 4096, AMPC_ACC_F32, AMPC_F32) == 4096.0f);
  assert_true(sum_ones(AMPC_BF16, 8192, AMPC_ACC_F32, AMPC_F32) == 8192.0f);
  assert_true(sum_ones(AMPC_F32, 8192, AMPC_ACC_F16, AMPC_F32) == 2048.0f);
}

/* binary16 rounding of a double, written with frexp/ldexp (independent of
 * the library's bit-level version) */
static double model_round_f16(double x) {
  if (x == 0.0 || !isfinite(x))
    return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  int k = e - 1 < -14 ? -14 : e - 1;
  double r = nearbyint(ldexp(x, 10 - k));
  double v = ldexp(r, k - 10);
  return fabs(v) > 65504.0 ? copysign((double)INFINITY, x) : v;
}

static void test_acc16_semantics(void **state) {
  (void)state;
  /* positive F16 inputs in [1/16, 2): every a*b + s is exact in double, so the
   * model s = round16(a*b + s) is exact; ampc must match it bit for bit */
  const int64_t m = 5, n = 7, k = 300;
  ampc_f16 *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
  float *c = malloc((size_t)(m * n) * sizeof *c);
  assert_true(a && b && c);
  for (int64_t i = 0; i < m * k; i++)
    a[i] = ampc_f32_to_f16((float)(0.0625 + 1.9375 * urand()));
  for (int64_t i = 0; i < k * n; i++)
    b[i] = ampc_f32_to_f16((float)(0.0625 + 1.9375 * urand()));
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, n, k, 1.0f, a, AMPC_F16, k, b, AMPC_F16, n,
                             0.0f, c, AMPC_F32, n, AMPC_ACC_F16),
                   AMPC_OK);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0.0;
      for (int64_t p = 0; p < k; p++)
        s = model_round_f16(
            (double)ampc_f16_to_f32(a[i * k + p]) * (double)ampc_f16_to_f32(b[p * n + j]) + s);
      assert_true((double)c[i * n + j] == s);
    }
  free(a);
  free(b);
  free(c);
}

/* one binary16 operand of a kind: 0 signed in [-2, 2], 1 any exponent
 * -24 .. 15 (subnormals, overflowing products), 2 mostly 1 with tiny or large
 * values (tiny products on large sums, the 2048 stall), 3 as 1 with inf and
 * NaN sprinkled in, 4 as 1 with inf but no NaN (NaN sums from inf - inf and
 * inf * 0 only), 5 as 1 with NaNs of many payloads and both signs (which
 * one a sum keeps: a's, else b's, else the sum's, as the scalar fma) */
static uint16_t f16_of_kind(int kind) {
  const double u = urand();
  double v;
  if (kind == 0)
    v = 4.0 * u - 2.0;
  else if (kind == 2)
    v = u < 0.8 ? 1.0 : u < 0.9 ? ldexp(1.0 + urand(), -24 + (int)(8 * urand())) : 256.0;
  else
    v = ldexp((urand() < 0.5 ? -1.0 : 1.0) * (1.0 + urand()), -24 + (int)(40 * u));
  uint16_t h = ampc_f32_to_f16((float)v).bits;
  if (kind == 3 && urand() < 0.02)
    h = urand() < 0.5 ? 0x7C00 : urand() < 0.5 ? 0xFC00 : 0x7E01;
  if (kind == 4 && urand() < 0.02) /* infinities without NaN operands */
    h = urand() < 0.5 ? 0x7C00 : 0xFC00;
  if (kind == 5 && urand() < 0.03) /* NaNs of either sign and many payloads, and inf */
    h = urand() < 0.2 ? 0x7C00
                      : (uint16_t)((urand() < 0.5 ? 0x7E00 : 0xFE00) | (int)(urand() * 511));
  return h;
}

/* The FP16-accumulation paths this CPU runs, the scalar reference first;
 * returns how many (at most 5). verbose: say which are not checked here. */
static int acc16_paths(ampc_acc16_path paths[5], int verbose) {
  int np = 0;
  paths[np++] = AMPC_ACC16_SCALAR;
  if (ampc_use_avx2())
    paths[np++] = AMPC_ACC16_AVX2, paths[np++] = AMPC_ACC16_AVX2_F16;
  if (ampc_use_avx512())
    paths[np++] = AMPC_ACC16_AVX512;
  else if (verbose)
    print_message("(no AVX-512 on this CPU: the round-to-odd path is not checked here)\n");
  if (ampc_use_avx512fp16())
    paths[np++] = AMPC_ACC16_FP16;
  else if (verbose)
    print_message("(no AVX512-FP16 on this CPU: the VFMADDPH path is not checked here)\n");
  return np;
}

/* The FP16-accumulation paths give the same bits: the scalar reference, the
 * AVX2 one and, on CPUs with AVX512-FP16, VFMADDPH: every tail of the 8 x 64
 * block, both transposes, K from 1 to past the 2048 stall, alpha/beta and
 * every C dtype, a batch. */
static void test_acc16_paths_bit_identical(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{1, 1, 1},    {3, 5, 7},      {8, 64, 16},
                                      {9, 65, 33},  {7, 63, 2},     {16, 128, 5},
                                      {2, 3, 4099}, {17, 130, 300}, {1, 200, 65}};
  ampc_acc16_path paths[5];
  const int np = acc16_paths(paths, 1);
  int64_t cases = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int kind = 0; kind < 6; kind++)
      for (int ops = 0; ops < 4; ops++) {
        const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2], batch = 2;
        const ampc_op opa = (ops & 1) ? AMPC_OP_T : AMPC_OP_N,
                      opb = (ops & 2) ? AMPC_OP_T : AMPC_OP_N;
        const int64_t lda = opa == AMPC_OP_N ? k + 1 : m + 3, ldb = opb == AMPC_OP_N ? n + 2 : k;
        const int64_t sa = (opa == AMPC_OP_N ? m : k) * lda + 5;
        const int64_t sb = (opb == AMPC_OP_N ? k : n) * ldb + 1, ldc = n + 1, sc = m * ldc + 3;
        uint16_t *a = malloc((size_t)(batch * sa) * 2), *b = malloc((size_t)(batch * sb) * 2);
        assert_true(a && b);
        for (int64_t i = 0; i < batch * sa; i++)
          a[i] = f16_of_kind(kind);
        for (int64_t i = 0; i < batch * sb; i++)
          b[i] = f16_of_kind(kind);
        const ampc_dtype cdt = (ampc_dtype)(kind % 3); /* F32, F16, BF16 */
        const float alpha = kind == 1 ? 0.5f : 1.0f, beta = kind == 2 ? 0.25f : 0.0f;
        const size_t cb = (size_t)(batch * sc) * ampc_dtype_size(cdt);
        unsigned char *c0 = malloc(cb), *c1 = malloc(cb);
        assert_true(c0 && c1);
        for (size_t i = 0; i < cb; i++)
          c0[i] = (unsigned char)(i * 7);
        for (int pi = 0; pi < np; pi++) {
          unsigned char *c = pi == 0 ? c0 : c1;
          if (pi > 0)
            for (size_t i = 0; i < cb; i++)
              c[i] = (unsigned char)(i * 7);
          ampc_gemm_force_acc16(paths[pi]);
          assert_int_equal(ampc_gemm_strided_batched(opa, opb, m, n, k, alpha, a, AMPC_F16, lda, sa,
                                                     b, AMPC_F16, ldb, sb, beta, c, cdt, ldc, sc,
                                                     batch, AMPC_ACC_F16),
                           AMPC_OK);
          if (pi > 0 && memcmp(c0, c1, cb) != 0) {
            for (size_t i = 0; i < cb; i++)
              if (c0[i] != c1[i]) {
                print_error("path %d differs from scalar: m %lld n %lld k %lld kind %d ops %d at "
                            "byte %zu\n",
                            (int)paths[pi], (long long)m, (long long)n, (long long)k, kind, ops, i);
                break;
              }
            fail();
          }
          cases++;
        }
        free(a), free(b), free(c0), free(c1);
      }
  ampc_gemm_force_acc16(AMPC_ACC16_AUTO);
  print_message("%lld path runs compared bit for bit\n", (long long)cases);
}

/* A sum that lands just past a binary16 tie, where rounding first to FP32
 * to nearest would land on the tie and round the wrong way: 2050 + (-(1 +
 * 2^-10)) * (1 - 2^-10) = 2049 + 2^-20, whose FP32 rounding is 2049 (the tie
 * between 2048 and 2050) but whose binary16 rounding is 2050. Every path,
 * both signs, and the exact tie (2049: to even, 2048). */
static void test_acc16_near_tie(void **state) {
  (void)state;
  ampc_acc16_path paths[5];
  const int np = acc16_paths(paths, 0);
  /* row i of A (1 x 2) times column i of B: 4 cases on the diagonal */
  const float a[4][2] = {{2050.0f, -(1.0f + 0x1p-10f)},
                         {-2050.0f, (1.0f + 0x1p-10f)},
                         {2050.0f, -1.0f},
                         {2048.0f, (1.0f + 0x1p-10f)}};
  const float b[4][2] = {
      {1.0f, 1.0f - 0x1p-10f}, {1.0f, 1.0f - 0x1p-10f}, {1.0f, 1.0f}, {1.0f, 1.0f - 0x1p-10f}};
  /* 2049 + 2^-20 -> 2050; its negation; 2049 (tie) -> 2048; 2049 - 2^-20 -> 2048 */
  const float want[4] = {2050.0f, -2050.0f, 2048.0f, 2048.0f};
  ampc_f16 ah[4 * 2], bh[2 * 4];
  for (int i = 0; i < 4; i++)
    for (int p = 0; p < 2; p++) {
      ah[i * 2 + p] = ampc_f32_to_f16(a[i][p]);
      bh[p * 4 + i] = ampc_f32_to_f16(b[i][p]);
      assert_true(ampc_f16_to_f32(ah[i * 2 + p]) == a[i][p]);
      assert_true(ampc_f16_to_f32(bh[p * 4 + i]) == b[i][p]);
    }
  for (int pi = 0; pi < np; pi++) {
    float c[16];
    ampc_gemm_force_acc16(paths[pi]);
    assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, 4, 4, 2, 1.0f, ah, AMPC_F16, 2, bh, AMPC_F16,
                               4, 0.0f, c, AMPC_F32, 4, AMPC_ACC_F16),
                     AMPC_OK);
    for (int i = 0; i < 4; i++)
      if (c[i * 4 + i] != want[i]) {
        print_error("path %d case %d: %.9g, want %.9g\n", (int)paths[pi], i, (double)c[i * 4 + i],
                    (double)want[i]);
        fail();
      }
  }
  ampc_gemm_force_acc16(AMPC_ACC16_AUTO);
}

/* F32 x F32 -> F32 runs on ampc's kernel (unless AMPC_GEMM_F32=openblas):
 * on values binary16 holds exactly it gives the bits of the F16 x F16 -> F32
 * product (same kernel, packing to FP32, summation order), for both
 * transposes, several thread counts and every micro-kernel. */
static void test_f32_same_kernel_as_f16(void **state) {
  (void)state;
  if (strcmp(ampc_gemm_f32_path(), "openblas") == 0) {
    print_message("(F32 products run on OpenBLAS here: %s)\n",
                  ampc_gemm_active_ukernel() ? "AMPC_GEMM_F32=openblas" : "no vector kernel");
    return;
  }
  const int64_t m = 37, n = 70, k = 300;
  float *a32 = malloc((size_t)(m * k) * 4), *b32 = malloc((size_t)(k * n) * 4);
  ampc_f16 *a16 = malloc((size_t)(m * k) * 2), *b16 = malloc((size_t)(k * n) * 2);
  float *c32 = malloc((size_t)(m * n) * 4), *c16 = malloc((size_t)(m * n) * 4);
  assert_true(a32 && b32 && a16 && b16 && c32 && c16);
  for (int64_t i = 0; i < m * k; i++)
    a16[i] = ampc_f32_to_f16((float)(2.0 * urand() - 1.0)), a32[i] = ampc_f16_to_f32(a16[i]);
  for (int64_t i = 0; i < k * n; i++)
    b16[i] = ampc_f32_to_f16((float)(2.0 * urand() - 1.0)), b32[i] = ampc_f16_to_f32(b16[i]);
  const ampc_gemm_ukernel *uks[2] = {&ampc_gemm_uk_avx2, &ampc_gemm_uk_avx512};
  const int nuk = ampc_cpu_has_avx512f() ? 2 : 1;
  for (int u = 0; u < nuk; u++)
    for (int ops = 0; ops < 4; ops++) {
      const ampc_op opa = (ops & 1) ? AMPC_OP_T : AMPC_OP_N;
      const ampc_op opb = (ops & 2) ? AMPC_OP_T : AMPC_OP_N;
      const int64_t lda = opa == AMPC_OP_N ? k : m, ldb = opb == AMPC_OP_N ? n : k;
      ampc_gemm_force_ukernel(uks[u]);
      for (int t = 1; t <= 3; t++) {
        ampc_set_num_threads(t);
        assert_int_equal(ampc_gemm(opa, opb, m, n, k, 1.0f, a32, AMPC_F32, lda, b32, AMPC_F32, ldb,
                                   0.0f, c32, AMPC_F32, n, AMPC_ACC_F32),
                         AMPC_OK);
        assert_int_equal(ampc_gemm(opa, opb, m, n, k, 1.0f, a16, AMPC_F16, lda, b16, AMPC_F16, ldb,
                                   0.0f, c16, AMPC_F32, n, AMPC_ACC_F32),
                         AMPC_OK);
        assert_memory_equal(c32, c16, (size_t)(m * n) * 4);
      }
    }
  ampc_gemm_force_ukernel(NULL);
  ampc_set_num_threads(0);
  free(a32), free(b32), free(a16), free(b16), free(c32), free(c16);
}

/* The FMA peak measurement runs and names the paths this CPU has (its
 * speed is a measurement, never checked here). */
static void test_fma_peak_runs(void **state) {
  (void)state;
  ampc_fma_peak p;
  assert_int_equal(ampc_gemm_fma_peak(1, 0.0, &p), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gemm_fma_peak(2, 0.01, &p), AMPC_OK);
  assert_int_equal(p.threads, 2);
  assert_string_equal(p.f32_isa, ampc_use_avx512() ? "avx512f"
                                 : ampc_use_avx2() ? "avx2+fma"
                                                   : "none");
  assert_true(ampc_use_avx2() ? p.f32_gflops > 0 : p.f32_gflops == 0);
  assert_string_equal(p.f16_isa, ampc_use_avx512fp16() ? "avx512fp16" : "none");
  assert_true(ampc_use_avx512fp16() ? p.f16_gflops > 0 : p.f16_gflops == 0);
  assert_string_equal(p.bf16_isa, ampc_gemm_bf16dot_available() ? "avx512bf16" : "none");
  assert_true(ampc_gemm_bf16dot_available() ? p.bf16_gflops > 0 : p.bf16_gflops == 0);
}

static void test_acc16_error_grows_with_k(void **state) {
  (void)state;
  const int64_t ks[3] = {64, 1024, 16384}, m = 4, n = 4;
  double err16[3], err32[3], bound32[3];
  for (int q = 0; q < 3; q++) {
    const int64_t k = ks[q];
    ampc_f16 *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
    float c16[16], c32[16];
    double ref[16], abs_[16];
    for (int64_t i = 0; i < m * k; i++)
      a[i] = ampc_f32_to_f16((float)urand());
    for (int64_t i = 0; i < k * n; i++)
      b[i] = ampc_f32_to_f16((float)urand());
    assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, n, k, 1.0f, a, AMPC_F16, k, b, AMPC_F16, n,
                               0.0f, c16, AMPC_F32, n, AMPC_ACC_F16),
                     AMPC_OK);
    assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, n, k, 1.0f, a, AMPC_F16, k, b, AMPC_F16, n,
                               0.0f, c32, AMPC_F32, n, AMPC_ACC_F32),
                     AMPC_OK);
    assert_int_equal(ampc_gemm_reference(AMPC_OP_N, AMPC_OP_N, m, n, k, 1.0, a, AMPC_F16, k, b,
                                         AMPC_F16, n, 0.0, NULL, AMPC_F32, n, ref, abs_),
                     AMPC_OK);
    err16[q] = err32[q] = bound32[q] = 0;
    for (int i = 0; i < 16; i++) {
      err16[q] = fmax(err16[q], fabs((double)c16[i] - ref[i]) / ref[i]);
      err32[q] = fmax(err32[q], fabs((double)c32[i] - ref[i]) / ref[i]);
      bound32[q] = fmax(bound32[q], (double)(k + 3) * 0x1p-24 * abs_[i] / ref[i]);
    }
    print_message("K=%5lld  max rel err: fp16 accumulation %.3e, fp32 accumulation %.3e "
                  "(bound %.3e)\n",
                  (long long)k, err16[q], err32[q], bound32[q]);
    assert_true(err32[q] <= bound32[q]);
    free(a);
    free(b);
  }
  assert_true(err16[0] < err16[1] && err16[1] < err16[2]);
  assert_true(err16[2] > 0.5); /* at K = 16384 most of the sum is swallowed */
  assert_true(err32[2] < 1e-4);
}

/* The blocked GEMM gives the same bits whatever its micro-kernel (AVX2 6x16,
 * AVX-512 12x32), thread count and MC/NC blocking: each element is summed in
 * p order within each KC slice, and KC is the configured one for all of them
 * (gemm_impl.h). Checked on edge shapes, K across several KC slices, both
 * transposes, every dtype, batched and with beta. */
static void run_blocked(const gcase *t, const void *a, const void *b, void *c, int64_t lda,
                        int64_t ldb, int64_t ldc) {
  const int64_t batch = t->batch > 0 ? t->batch : 1;
  const int64_t ar = t->opa == AMPC_OP_N ? t->m : t->k, br = t->opb == AMPC_OP_N ? t->k : t->n;
  assert_int_equal(ampc_gemm_strided_batched(t->opa, t->opb, t->m, t->n, t->k, t->alpha, a, t->adt,
                                             lda, ar * lda, b, t->bdt, ldb, br * ldb, t->beta, c,
                                             t->cdt, ldc, t->m * ldc, batch, AMPC_ACC_F32),
                   AMPC_OK);
}

/* bf16 x bf16 on VDPBF16PS (AVX512-BF16) gives the FMA kernel's bits on the
 * operands it accepts: magnitudes spread over its whole range [2^-56, 2^63)
 * (the boundary values included), odd and even K (a zero-padded last pair),
 * K past several slices, both transposes, padded leading dimensions, C in
 * F32/F16/BF16 with alpha/beta, a batch, 1 and 2 threads; and with one
 * operand outside the range (in the last K slice of the second matrix) the
 * slices that hold such an operand run on the FMA kernel, still the same
 * bits. */
static uint16_t bf16_in_range(void) {
  const double u = urand();
  int e = -56 + (int)(119 * urand());             /* -56 .. 62 */
  double mant = 1.0 + floor(128 * urand()) / 128; /* a bfloat16 significand: no rounding */
  if (u < 0.05)
    e = -56, mant = 1.0; /* the smallest accepted magnitude */
  else if (u < 0.1)
    e = 62, mant = 1.9921875; /* the largest: (2 - 2^-7) 2^62 */
  else if (u < 0.15)
    return urand() < 0.5 ? 0x0000 : 0x8000;
  else if (u < 0.6)
    e = -4 + (int)(8 * urand()); /* most values near 1: sums that cancel and round */
  const float v = (float)ldexp((urand() < 0.5 ? -1.0 : 1.0) * mant, e);
  return ampc_f32_to_bf16(v).bits;
}

static void test_bf16dot_bit_identical(void **state) {
  (void)state;
  if (!ampc_gemm_bf16dot_available()) {
    print_message("%s: the VDPBF16PS kernel is not checked here\n",
                  ampc_use_avx512bf16() ? "this CPU's VDPBF16PS fails the probe (not used)"
                                        : "no AVX512-BF16 on this CPU (or AMPC_GEMM_BF16DOT=0)");
    skip();
  }
  static const int64_t shapes[][3] = {{1, 1, 1},     {12, 32, 2},    {13, 33, 3},  {25, 70, 257},
                                      {37, 65, 513}, {150, 97, 300}, {8, 100, 31}, {3, 200, 1024}};
  int64_t compared = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int ops = 0; ops < 4; ops++)
      for (int cd = 0; cd < 3; cd++) {
        const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2], batch = 2;
        const ampc_op opa = (ampc_op)(ops & 1), opb = (ampc_op)(ops >> 1);
        const int64_t ar = opa == AMPC_OP_N ? m : k, ac = opa == AMPC_OP_N ? k : m;
        const int64_t br = opb == AMPC_OP_N ? k : n, bc = opb == AMPC_OP_N ? n : k;
        const int64_t lda = ac + (int64_t)(si % 3), ldb = bc + (int64_t)(ops % 2), ldc = n + 1;
        const int64_t sa = ar * lda, sb = br * ldb, sc = m * ldc;
        uint16_t *a = malloc((size_t)(batch * sa) * 2), *b = malloc((size_t)(batch * sb) * 2);
        assert_true(a && b);
        for (int64_t i = 0; i < batch * sa; i++)
          a[i] = (i % lda) < ac ? bf16_in_range() : 0x7FC0; /* padding: NaN, never read */
        for (int64_t i = 0; i < batch * sb; i++)
          b[i] = (i % ldb) < bc ? bf16_in_range() : 0x7FC0;
        const ampc_dtype cdt = k_dts[cd];
        const size_t cb = (size_t)(batch * sc) * ampc_dtype_size(cdt);
        unsigned char *c0 = malloc(cb), *c1 = malloc(cb);
        assert_true(c0 && c1);
        ampc_gemm_args g = {.opa = opa,
                            .opb = opb,
                            .lda = lda,
                            .ldb = ldb,
                            .m = m,
                            .n = n,
                            .k = k,
                            .batch = batch,
                            .a = a,
                            .adt = AMPC_BF16,
                            .rs_a = opa == AMPC_OP_N ? lda : 1,
                            .cs_a = opa == AMPC_OP_N ? 1 : lda,
                            .stride_a = sa,
                            .b = b,
                            .bdt = AMPC_BF16,
                            .rs_b = opb == AMPC_OP_N ? ldb : 1,
                            .cs_b = opb == AMPC_OP_N ? 1 : ldb,
                            .stride_b = sb};
        assert_true(ampc_gemm_bf16dot_accepts(&g));
        const float alpha = si % 2 ? 0.5f : 1.0f, beta = cd == 1 ? 0.25f : 0.0f;
        for (int th = 1; th <= 2; th++)
          for (int u = 0; u < 2; u++) {
            unsigned char *c = u == 0 ? c0 : c1;
            for (size_t i = 0; i < cb; i++)
              c[i] = (unsigned char)(i * 13 % 251 % 64); /* finite C for beta */
            ampc_gemm_force_ukernel(u == 0 ? &ampc_gemm_uk_avx512 : &ampc_gemm_uk_avx512bf16);
            ampc_set_num_threads(th);
            assert_int_equal(ampc_gemm_strided_batched(opa, opb, m, n, k, alpha, a, AMPC_BF16, lda,
                                                       sa, b, AMPC_BF16, ldb, sb, beta, c, cdt, ldc,
                                                       sc, batch, AMPC_ACC_F32),
                             AMPC_OK);
          }
        ampc_gemm_force_ukernel(NULL);
        ampc_set_num_threads(0);
        if (memcmp(c0, c1, cb) != 0)
          fail_msg("VDPBF16PS differs from FMA: op=%d%d m=%lld n=%lld k=%lld C %s", opa, opb,
                   (long long)m, (long long)n, (long long)k, ampc_dtype_name(cdt));
        compared++;
        /* one operand out of range (2^-57, 2^63, inf, NaN or a subnormal):
         * declined */
        static const uint16_t outside[5] = {0x2300, 0x5F00, 0x7F80, 0x7FC0, 0x0001};
        const uint16_t keep = b[sb + (k - 1) * (opb == AMPC_OP_N ? ldb : 1)];
        b[sb + (k - 1) * (opb == AMPC_OP_N ? ldb : 1)] = outside[si % 5];
        assert_false(ampc_gemm_bf16dot_accepts(&g));
        /* and the kernel still gives the FMA bits: the slices before the
         * one holding it on VDPBF16PS, that slice on the FMA kernel */
        for (int u = 0; u < 2; u++) {
          unsigned char *c = u == 0 ? c0 : c1;
          memset(c, 0, cb);
          ampc_gemm_force_ukernel(u == 0 ? &ampc_gemm_uk_avx512 : &ampc_gemm_uk_avx512bf16);
          assert_int_equal(ampc_gemm_strided_batched(opa, opb, m, n, k, alpha, a, AMPC_BF16, lda,
                                                     sa, b, AMPC_BF16, ldb, sb, 0.0f, c, cdt, ldc,
                                                     sc, batch, AMPC_ACC_F32),
                           AMPC_OK);
        }
        ampc_gemm_force_ukernel(NULL);
        if (memcmp(c0, c1, cb) != 0)
          fail_msg("VDPBF16PS with an operand out of its range differs from FMA: op=%d%d m=%lld "
                   "n=%lld k=%lld",
                   opa, opb, (long long)m, (long long)n, (long long)k);
        b[sb + (k - 1) * (opb == AMPC_OP_N ? ldb : 1)] = keep;
        free(a), free(b), free(c0), free(c1);
      }
  print_message("%lld bf16 GEMMs: VDPBF16PS and FMA bit for bit\n", (long long)compared);
}

static void test_ukernels_bit_identical(void **state) {
  (void)state;
  const ampc_gemm_ukernel *uks[2] = {&ampc_gemm_uk_avx2, &ampc_gemm_uk_avx512};
  const int nuk = !ampc_cpu_has_avx2_f16c() ? 0 : ampc_cpu_has_avx512f() ? 2 : 1;
  if (nuk < 2)
    print_message("this CPU has %s: only thread counts and blockings compared\n",
                  nuk ? "no AVX-512F" : "neither AVX2 nor AVX-512F");
  if (nuk == 0)
    skip();
  const int64_t sizes[][3] = {{1, 1, 1},      {11, 31, 5},    {13, 33, 300}, {37, 70, 513},
                              {150, 97, 257}, {24, 64, 1024}, {6, 16, 256},  {12, 32, 8}};
  const ampc_gemm_config def = ampc_gemm_get_config(), small = {.mc = 6, .kc = 256, .nc = 16},
                         odd = {.mc = 18, .kc = 256, .nc = 48};
  const ampc_gemm_config cfgs[3] = {def, small, odd};
  int64_t compared = 0;
  for (int s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++)
    for (int o = 0; o < 4; o++)
      for (int x = 0; x < 3; x++) {
        gcase t = {(ampc_op)(o & 1),
                   (ampc_op)(o >> 1),
                   sizes[s][0],
                   sizes[s][1],
                   sizes[s][2],
                   s % 3,
                   k_dts[x],
                   k_dts[(x + s) % 3],
                   k_dts[(x + o) % 3],
                   0.5f,
                   s % 2 ? 0.25f : 0.0f,
                   s % 4 == 3 ? 3 : 0};
        if (t.adt == AMPC_F32 && t.bdt == AMPC_F32 && t.cdt == AMPC_F32)
          t.bdt = AMPC_F16; /* all-F32 runs on OpenBLAS, not the blocked kernel */
        const int64_t batch = t.batch > 0 ? t.batch : 1;
        const int64_t ar = t.opa == AMPC_OP_N ? t.m : t.k, ac = t.opa == AMPC_OP_N ? t.k : t.m;
        const int64_t br = t.opb == AMPC_OP_N ? t.k : t.n, bc = t.opb == AMPC_OP_N ? t.n : t.k;
        const int64_t lda = ac + t.pad, ldb = bc + t.pad, ldc = t.n + t.pad;
        void *a = rand_matrix(t.adt, batch * ar, ac, lda);
        void *b = rand_matrix(t.bdt, batch * br, bc, ldb);
        void *c0 = rand_matrix(t.cdt, batch * t.m, t.n, ldc);
        const size_t cbytes = (size_t)((batch * t.m - 1) * ldc + t.n + 1) * ampc_dtype_size(t.cdt);
        void *first = malloc(cbytes), *c = malloc(cbytes);
        assert_non_null(first);
        assert_non_null(c);
        int have_first = 0;
        for (int u = 0; u < nuk; u++)
          for (int th = 1; th <= 2; th++)
            for (int cf = 0; cf < 3; cf++) {
              ampc_gemm_force_ukernel(uks[u]);
              ampc_set_num_threads(th);
              assert_int_equal(ampc_gemm_set_config(&cfgs[cf]), AMPC_OK);
              memcpy(c, c0, cbytes);
              run_blocked(&t, a, b, c, lda, ldb, ldc);
              if (!have_first) {
                memcpy(first, c, cbytes);
                have_first = 1;
              } else if (memcmp(first, c, cbytes) != 0) {
                fail_msg("%s, %d thread(s), mc=%d nc=%d differs from the first run: op=%d%d "
                         "m=%lld n=%lld k=%lld %s,%s->%s",
                         uks[u]->isa, th, cfgs[cf].mc, cfgs[cf].nc, t.opa, t.opb, (long long)t.m,
                         (long long)t.n, (long long)t.k, ampc_dtype_name(t.adt),
                         ampc_dtype_name(t.bdt), ampc_dtype_name(t.cdt));
              }
              compared++;
            }
        free(a);
        free(b);
        free(c0);
        free(first);
        free(c);
      }
  ampc_gemm_force_ukernel(NULL);
  ampc_set_num_threads(0);
  assert_int_equal(ampc_gemm_set_config(&def), AMPC_OK);
  print_message("%lld blocked GEMMs compared bit for bit (%d micro-kernel(s))\n",
                (long long)compared, nuk);
}

/* ---- ampc_gemm_ex's epilogue (bias, post, colsum) ------------------------- */

typedef struct {
  const void *want; /* the unfused C, every element final when post sees it */
  ampc_dtype dt;
  int64_t n, ldc;
  const void *c;
  int *seen; /* [m * n]: how many times post covered each element */
  int bad;
} epi_probe;

static void epi_post(void *user, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
  epi_probe *pr = user;
  const size_t es = ampc_dtype_size(pr->dt);
  for (int64_t i = i0; i < i0 + rows; i++)
    for (int64_t j = j0; j < j0 + cols; j++) {
      pr->seen[i * pr->n + j]++;
      if (memcmp((const char *)pr->c + (size_t)(i * pr->ldc + j) * es,
                 (const char *)pr->want + (size_t)(i * pr->ldc + j) * es, es) != 0)
        pr->bad = 1; /* post ran before the element was final */
    }
}

/* One case: the fused epilogue against the unfused sequence (the bias laid
 * into C, rounded to its dtype, with beta = 1; the column sums of op(A) in p
 * order; post over the whole matrix): the same bits, post once per element
 * and only on final values. */
static void check_epi(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k, ampc_dtype adt,
                      ampc_dtype bdt, ampc_dtype cdt, float alpha, int tally) {
  const int64_t lda = opa == AMPC_OP_N ? k : m, ldb = opb == AMPC_OP_N ? n : k, ldc = n + 3;
  const int64_t arows = opa == AMPC_OP_N ? m : k, brows = opb == AMPC_OP_N ? k : n;
  void *a = rand_matrix(adt, arows, lda, lda), *b = rand_matrix(bdt, brows, ldb, ldb);
  const size_t es = ampc_dtype_size(cdt), cbytes = (size_t)(m * ldc) * es;
  char *c_ref = malloc(cbytes), *c = malloc(cbytes);
  float *bias = malloc((size_t)n * sizeof *bias), *cs_ref = malloc((size_t)m * sizeof *cs_ref);
  float *cs = malloc((size_t)m * sizeof *cs);
  int *seen = calloc((size_t)(m * n), sizeof *seen);
  assert_true(a && b && c_ref && c && bias && cs_ref && cs && seen);
  for (int64_t j = 0; j < n; j++) { /* a value of C's dtype */
    put(c, cdt, 0, (float)(4.0 * urand() - 2.0));
    bias[j] = (float)get(c, cdt, 0);
  }
  for (int64_t i = 0; i < m * ldc; i++) /* the gaps between rows stay as they were */
    put(c_ref, cdt, i, (float)i);
  memcpy(c, c_ref, cbytes);
  for (int64_t i = 0; i < m; i++) {
    cs_ref[i] = cs[i] = (float)(urand() - 0.5);
    for (int64_t j = 0; j < n; j++)
      put(c_ref, cdt, i * ldc + j, bias[j]);
    for (int64_t p = 0; p < k; p++)
      cs_ref[i] += (float)get(a, adt, opa == AMPC_OP_N ? i * lda + p : p * lda + i);
  }
  assert_int_equal(ampc_gemm(opa, opb, m, n, k, alpha, a, adt, lda, b, bdt, ldb, 1.0f, c_ref, cdt,
                             ldc, AMPC_ACC_F32),
                   AMPC_OK);
  epi_probe pr = {c_ref, cdt, n, ldc, c, seen, 0};
  const ampc_gemm_epi epi = {bias, epi_post, &pr, cs};
  ampc_tally *tl = tally ? ampc_tally_create() : NULL, *was = ampc_tally_bind(tl);
  assert_int_equal(ampc_gemm_ex(opa, opb, m, n, k, alpha, a, adt, lda, b, bdt, ldb, 0.0f, c, cdt,
                                ldc, AMPC_ACC_F32, &epi),
                   AMPC_OK);
  (void)ampc_tally_bind(was);
  ampc_tally_free(tl);
  if (memcmp(c, c_ref, cbytes) != 0 || memcmp(cs, cs_ref, (size_t)m * sizeof *cs) != 0 || pr.bad) {
    print_error("epilogue %dx%dx%d ops %d%d dts %d %d %d: C %s, colsum %s, post %s\n", (int)m,
                (int)n, (int)k, (int)opa, (int)opb, (int)adt, (int)bdt, (int)cdt,
                memcmp(c, c_ref, cbytes) ? "differs" : "same",
                memcmp(cs, cs_ref, (size_t)m * sizeof *cs) ? "differs" : "same",
                pr.bad ? "saw a value before it was final" : "ok");
    fail();
  }
  for (int64_t i = 0; i < m * n; i++)
    assert_int_equal(seen[i], 1);
  free(a), free(b), free(c_ref), free(c), free(bias), free(cs_ref), free(cs), free(seen);
}

static void test_gemm_epilogue(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{1, 1, 1},      {13, 33, 7},    {37, 70, 300},
                                      {150, 96, 513}, {600, 130, 64}, {25, 1100, 40}};
  const int nuk = ampc_gemm_active_ukernel() ? (ampc_cpu_has_avx512f() ? 2 : 1) : 0;
  const ampc_gemm_ukernel *uks[2] = {&ampc_gemm_uk_avx2, &ampc_gemm_uk_avx512};
  for (int u = -1; u < nuk; u++) { /* -1: the automatic choice (VDPBF16PS for bf16) */
    ampc_gemm_force_ukernel(u < 0 ? NULL : uks[u]);
    for (int t = 1; t <= 2; t++) {
      ampc_set_num_threads(t);
      for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int d = 0; d < 3; d++)
          for (int ops = 0; ops < 3; ops++) {
            const ampc_op opa = ops == 1 ? AMPC_OP_T : AMPC_OP_N;
            const ampc_op opb = ops == 2 ? AMPC_OP_T : AMPC_OP_N;
            check_epi(opa, opb, shapes[sh][0], shapes[sh][1], shapes[sh][2], k_dts[d], k_dts[d],
                      k_dts[(d + sh) % 3], sh == 2 ? 0.5f : 1.0f, (int)(sh % 2));
          }
      check_epi(AMPC_OP_T, AMPC_OP_N, 40, 50, 0, AMPC_F16, AMPC_F16, AMPC_F16, 1.0f, 0); /* K = 0 */
      check_epi(AMPC_OP_N, AMPC_OP_N, 40, 50, 9, AMPC_F16, AMPC_BF16, AMPC_F32, 0.0f, 0);
    }
  }
  ampc_gemm_force_ukernel(NULL);
  ampc_set_num_threads(0);
  /* the refusals */
  float bias[2] = {0.1f, 1.0f}, x[4] = {1, 2, 3, 4}, y[4];
  ampc_gemm_epi epi = {.bias = bias};
  assert_int_equal(ampc_gemm_ex(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1.0f, x, AMPC_F32, 2, x, AMPC_F32, 2,
                                0.0f, y, AMPC_F16, 2, AMPC_ACC_F32, &epi),
                   AMPC_ERR_INVALID_ARG); /* 0.1 is not a binary16 value */
  bias[0] = 0.5f;
  assert_int_equal(ampc_gemm_ex(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1.0f, x, AMPC_F32, 2, x, AMPC_F32, 2,
                                1.0f, y, AMPC_F16, 2, AMPC_ACC_F32, &epi),
                   AMPC_ERR_INVALID_ARG); /* beta with a bias */
  assert_int_equal(ampc_gemm_ex(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1.0f, x, AMPC_F32, 2, x, AMPC_F32, 2,
                                0.0f, y, AMPC_F16, 2, AMPC_ACC_F16, &epi),
                   AMPC_ERR_INVALID_ARG); /* the ablation has no epilogue */
  assert_int_equal(ampc_gemm_ex(AMPC_OP_N, AMPC_OP_N, 2, 2, 2, 1.0f, x, AMPC_F32, 2, x, AMPC_F32, 2,
                                0.0f, y, AMPC_F16, 2, AMPC_ACC_F32, &epi),
                   AMPC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_combinations_small),
      cmocka_unit_test(test_larger),
      cmocka_unit_test(test_batched),
      cmocka_unit_test(test_broadcast_stride_zero),
      cmocka_unit_test(test_special_alpha_beta),
      cmocka_unit_test(test_unit_leading_dims),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_accumulation_ablation_exact),
      cmocka_unit_test(test_acc16_semantics),
      cmocka_unit_test(test_acc16_paths_bit_identical),
      cmocka_unit_test(test_acc16_near_tie),
      cmocka_unit_test(test_f32_same_kernel_as_f16),
      cmocka_unit_test(test_fma_peak_runs),
      cmocka_unit_test(test_acc16_error_grows_with_k),
      cmocka_unit_test(test_ukernels_bit_identical),
      cmocka_unit_test(test_bf16dot_bit_identical),
      cmocka_unit_test(test_gemm_epilogue),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
