/* tests/test_rows.c: the row operations of ampc/nn.h (ViT input, gather,
 * scatter, scatter-add, gradient sums, argmax) against hand-computed values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "ampc/ampc.h"

static float f16(ampc_f16 h) { return ampc_f16_to_f32(h); }

/* y[i,0] = cls + pos[0], y[i,t] = patch[i,t-1] + pos[t]; one rounding */
static void test_vit_tokens_forward(void **state) {
  (void)state;
  enum { B = 2, NP = 2, D = 2 };
  const float patches[B * NP * D] = {1, 2, 3, 4, 5, 6, 7, 8};
  const float cls[D] = {10, 20};
  const float pos[(NP + 1) * D] = {0.5f, 0.25f, 100, 200, -1, -2};
  float y[B * (NP + 1) * D];
  assert_int_equal(
      ampc_vit_tokens_forward(B, NP, D, patches, AMPC_F32, cls, pos, AMPC_F32, y, AMPC_F32),
      AMPC_OK);
  const float want[B * (NP + 1) * D] = {10.5f, 20.25f, 101, 202, 2, 2,
                                        10.5f, 20.25f, 105, 206, 6, 6};
  for (int i = 0; i < B * (NP + 1) * D; i++)
    assert_true(y[i] == want[i]);
  /* binary16 output: 1 + 2^-11 is a tie and rounds to even (1); 1 + 3*2^-11
   * rounds up to 1 + 2^-9: the sum is formed in FP32 and rounded once */
  const float p1[1 * 1 * 1] = {1.0f}, c1[1] = {1.0f};
  const float q1[2] = {0x1p-11f, 0x3p-11f};
  ampc_f16 h[2];
  assert_int_equal(ampc_vit_tokens_forward(1, 1, 1, p1, AMPC_F32, c1, q1, AMPC_F32, h, AMPC_F16),
                   AMPC_OK);
  assert_true(f16(h[0]) == 1.0f);
  assert_true(f16(h[1]) == 1.0f + 0x1p-9f);
  /* errors */
  assert_int_equal(
      ampc_vit_tokens_forward(0, NP, D, patches, AMPC_F32, cls, pos, AMPC_F32, y, AMPC_F32),
      AMPC_ERR_INVALID_ARG);
  assert_int_equal(
      ampc_vit_tokens_forward(B, NP, D, NULL, AMPC_F32, cls, pos, AMPC_F32, y, AMPC_F32),
      AMPC_ERR_INVALID_ARG);
}

/* dpatches = dy[:, 1:]; dpos += batch sums (FP32), dcls += their row 0 */
static void test_vit_tokens_backward(void **state) {
  (void)state;
  enum { B = 3, NP = 1, D = 2 };
  /* binary16 gradients: three 2^-11 summed in FP32 = 3*2^-11, then added to
   * 1.0 with one rounding: 1 + 3*2^-11 -> 1 + 2^-9 (one binary16 ulp above
   * 1 is 2^-10); three separate binary16 additions would leave 1.0 */
  ampc_f16 dy[B * (NP + 1) * D];
  for (int i = 0; i < B * (NP + 1) * D; i++)
    dy[i] = ampc_f32_to_f16(i % 4 < 2 ? 0x1p-11f : (float)i);
  ampc_f16 dpos[(NP + 1) * D], dcls[D], dpatch[B * NP * D];
  for (int i = 0; i < (NP + 1) * D; i++)
    dpos[i] = ampc_f32_to_f16(1.0f);
  for (int i = 0; i < D; i++)
    dcls[i] = ampc_f32_to_f16(1.0f);
  assert_int_equal(ampc_vit_tokens_backward(B, NP, D, dy, AMPC_F16, dpatch, dcls, dpos), AMPC_OK);
  assert_true(f16(dpos[0]) == 1.0f + 0x1p-9f);
  assert_true(f16(dpos[1]) == 1.0f + 0x1p-9f);
  assert_true(f16(dcls[0]) == 1.0f + 0x1p-9f);
  assert_true(f16(dcls[1]) == 1.0f + 0x1p-9f);
  /* position 1: 1 + (2 + 6 + 10) = 19 and 1 + (3 + 7 + 11) = 22 */
  assert_true(f16(dpos[2]) == 19.0f);
  assert_true(f16(dpos[3]) == 22.0f);
  for (int bi = 0; bi < B; bi++)
    for (int j = 0; j < D; j++)
      assert_memory_equal(&dpatch[bi * D + j], &dy[(bi * 2 + 1) * D + j], sizeof(ampc_f16));
  /* every output optional */
  assert_int_equal(ampc_vit_tokens_backward(B, NP, D, dy, AMPC_F16, NULL, NULL, NULL), AMPC_OK);
}

static void test_grad_add(void **state) {
  (void)state;
  ampc_bf16 g[2] = {ampc_f32_to_bf16(1.0f), ampc_f32_to_bf16(1.0f)};
  const float v[2] = {0x1p-9f, 0x3p-9f}; /* bfloat16 ulp at 1 is 2^-7 */
  assert_int_equal(ampc_grad_add_f32(2, v, g, AMPC_BF16), AMPC_OK);
  assert_true(ampc_bf16_to_f32(g[0]) == 1.0f);           /* 1/4 ulp: rounds away */
  assert_true(ampc_bf16_to_f32(g[1]) == 1.0f + 0x1p-7f); /* 3/4 ulp: up */
  assert_int_equal(ampc_grad_add_f32(-1, v, g, AMPC_BF16), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_grad_add_f32(0, NULL, NULL, AMPC_BF16), AMPC_OK);
}

static void test_gather_scatter(void **state) {
  (void)state;
  enum { ROWS = 3, D = 2, N = 4 };
  const float x[ROWS * D] = {1, 2, 3, 4, 5, 6};
  const int32_t idx[N] = {2, 0, 2, 1};
  ampc_f16 y[N * D];
  assert_int_equal(ampc_gather_rows(N, D, idx, ROWS, x, AMPC_F32, y, AMPC_F16), AMPC_OK);
  const float want[N * D] = {5, 6, 1, 2, 5, 6, 3, 4};
  for (int i = 0; i < N * D; i++)
    assert_true(f16(y[i]) == want[i]);
  const int32_t bad[1] = {3};
  assert_int_equal(ampc_gather_rows(1, D, bad, ROWS, x, AMPC_F32, y, AMPC_F16),
                   AMPC_ERR_INVALID_ARG);
  /* scatter-add is the gather's backward: row 2 gets rows 0 and 2 */
  float acc[ROWS * 4]; /* ldy 4: two padding floats per row stay untouched */
  for (int i = 0; i < ROWS * 4; i++)
    acc[i] = 100.0f;
  assert_int_equal(ampc_scatter_add_rows(N, D, idx, ROWS, y, AMPC_F16, NULL, AMPC_F16, acc, 4),
                   AMPC_OK);
  const float wacc[ROWS * 4] = {101, 102, 100, 100, 103, 104, 100, 100, 110, 112, 100, 100};
  for (int i = 0; i < ROWS * 4; i++)
    assert_true(acc[i] == wacc[i]);
  /* two sources summed first, then added: 1 + (2^-24 + 2^-24) = 1 + 2^-23,
   * where adding them one at a time would round each 2^-24 away (ties to even) */
  float one[1] = {1.0f};
  const float s1[1] = {0x1p-24f}, s2[1] = {0x1p-24f};
  assert_int_equal(ampc_scatter_add_rows(1, 1, NULL, 1, s1, AMPC_F32, s2, AMPC_F32, one, 1),
                   AMPC_OK);
  assert_true(one[0] == 1.0f + 0x1p-23f);
  assert_int_equal(ampc_scatter_add_rows(1, D, bad, ROWS, x, AMPC_F32, NULL, AMPC_F32, acc, 4),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_scatter_add_rows(1, D, NULL, 1, x, AMPC_F32, NULL, AMPC_F32, acc, 1),
                   AMPC_ERR_INVALID_ARG); /* ldy < d */
}

/* scatter copies bits (a NaN payload too); the later row wins a repeat */
static void test_scatter_rows(void **state) {
  (void)state;
  enum { ROWS = 4, D = 2, N = 3 };
  const uint16_t x[N * D] = {0x3C00, 0x7E01, 0x4000, 0x4200, 0x4400, 0x4500};
  uint16_t y[ROWS * D] = {0};
  const int32_t idx[N] = {3, 1, 3};
  assert_int_equal(ampc_scatter_rows(N, D, idx, ROWS, x, AMPC_F16, y), AMPC_OK);
  const uint16_t want[ROWS * D] = {0, 0, 0x4000, 0x4200, 0, 0, 0x4400, 0x4500};
  assert_memory_equal(y, want, sizeof want);
  const int32_t first[1] = {0};
  assert_int_equal(ampc_scatter_rows(1, D, first, ROWS, x, AMPC_F16, y), AMPC_OK);
  assert_true(y[0] == 0x3C00 && y[1] == 0x7E01); /* the NaN's payload kept */
  const int32_t bad[1] = {4};
  assert_int_equal(ampc_scatter_rows(1, D, bad, ROWS, x, AMPC_F16, y), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_scatter_rows(0, D, NULL, ROWS, NULL, AMPC_F16, NULL), AMPC_OK);
  assert_int_equal(ampc_scatter_rows(1, 0, idx, ROWS, x, AMPC_F16, y), AMPC_ERR_INVALID_ARG);
}

static void test_argmax(void **state) {
  (void)state;
  enum { M = 4, N = 3 };
  const float x[M * N] = {
      1, 3,   3,     /* a tie: the first */
      5, -1,  2,     /* the first */
      2, 9,   9,     /* a tie again */
      0, NAN, 1e30f, /* a NaN: no largest value */
  };
  int32_t idx[M];
  assert_int_equal(ampc_argmax_rows(M, N, x, AMPC_F32, false, idx), AMPC_OK);
  assert_int_equal(idx[0], 1);
  assert_int_equal(idx[1], 0);
  assert_int_equal(idx[2], 1);
  assert_int_equal(idx[3], -1);
  /* the hardest negative of a 3 x 3 similarity matrix: the diagonal skipped */
  const float sim[9] = {9, 1, 2, 3, 9, 1, 5, 4, 9};
  assert_int_equal(ampc_argmax_rows(3, 3, sim, AMPC_F32, true, idx), AMPC_OK);
  assert_int_equal(idx[0], 2);
  assert_int_equal(idx[1], 0);
  assert_int_equal(idx[2], 0);
  ampc_f16 h[2] = {ampc_f32_to_f16(-2.0f), ampc_f32_to_f16(-1.0f)};
  assert_int_equal(ampc_argmax_rows(1, 2, h, AMPC_F16, false, idx), AMPC_OK);
  assert_int_equal(idx[0], 1);
  assert_int_equal(ampc_argmax_rows(1, 1, h, AMPC_F16, true, idx), AMPC_ERR_INVALID_ARG);
}

/* The two row halves of InfoNCE on a square matrix (queries = all keys,
 * label0 0) are the square loss: forward sum / (2b) = ampc_infonce_forward
 * (double sums in another order, then FP32: 1 ulp), and the row gradients of
 * sim and of sim^T add up to ampc_infonce_backward's dsim (FP32 sums of the
 * same terms in another order: a few ulps of the largest term). A slice with
 * label0 > 0 scores its rows against their own diagonal offset. */
static void test_infonce_rows(void **state) {
  (void)state;
  enum { B = 5 };
  float sim[B * B], simt[B * B];
  for (int i = 0; i < B; i++)
    for (int j = 0; j < B; j++)
      sim[i * B + j] = (float)((i * 7 + j * 3) % 11) / 11.0f - 0.4f + (i == j ? 0.3f : 0.0f);
  for (int i = 0; i < B; i++)
    for (int j = 0; j < B; j++)
      simt[j * B + i] = sim[i * B + j];
  const float lt = 1.5f, S = 8.0f;
  float sq = 0.0f;
  assert_int_equal(ampc_infonce_forward(B, sim, AMPC_F32, lt, &sq), AMPC_OK);
  double s1 = 0.0, s2 = 0.0;
  assert_int_equal(ampc_infonce_rows_forward(B, B, sim, AMPC_F32, lt, 0, &s1), AMPC_OK);
  assert_int_equal(ampc_infonce_rows_forward(B, B, simt, AMPC_F32, lt, 0, &s2), AMPC_OK);
  const float rows = (float)((s1 + s2) / (2.0 * B));
  assert_true(fabsf(rows - sq) <= 0x1p-23f * fabsf(sq));
  float dsq[B * B], da[B * B], dc[B * B], dlt_sq = 0.0f, dlt_rows = 0.0f;
  assert_int_equal(ampc_infonce_backward(B, sim, AMPC_F32, lt, S, dsq, AMPC_F32, &dlt_sq, NULL),
                   AMPC_OK);
  const float coef = S / (2.0f * B);
  assert_int_equal(
      ampc_infonce_rows_backward(B, B, sim, AMPC_F32, lt, 0, coef, da, AMPC_F32, &dlt_rows, NULL),
      AMPC_OK);
  assert_int_equal(
      ampc_infonce_rows_backward(B, B, simt, AMPC_F32, lt, 0, coef, dc, AMPC_F32, &dlt_rows, NULL),
      AMPC_OK);
  float big = 0.0f;
  for (int i = 0; i < B * B; i++)
    big = fmaxf(big, fabsf(dsq[i]));
  for (int i = 0; i < B; i++)
    for (int j = 0; j < B; j++)
      assert_true(fabsf(da[i * B + j] + dc[j * B + i] - dsq[i * B + j]) <= 8 * 0x1p-24f * big);
  assert_true(fabsf(dlt_rows - dlt_sq) <= 1e-5f * fabsf(dlt_sq) + 1e-6f);
  /* a slice: 2 queries whose positives are keys 3 and 4 */
  double sl = 0.0, full = 0.0;
  assert_int_equal(ampc_infonce_rows_forward(2, B, sim + 3 * B, AMPC_F32, lt, 3, &sl), AMPC_OK);
  double one = 0.0;
  for (int i = 3; i < 5; i++) {
    assert_int_equal(ampc_infonce_rows_forward(1, B, sim + i * B, AMPC_F32, lt, i, &one), AMPC_OK);
    full += one;
  }
  assert_true(sl == full);
  assert_int_equal(ampc_infonce_rows_forward(2, B, sim, AMPC_F32, lt, 4, &sl),
                   AMPC_ERR_INVALID_ARG); /* label 5 of 5 columns */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vit_tokens_forward), cmocka_unit_test(test_vit_tokens_backward),
      cmocka_unit_test(test_grad_add),           cmocka_unit_test(test_gather_scatter),
      cmocka_unit_test(test_scatter_rows),       cmocka_unit_test(test_argmax),
      cmocka_unit_test(test_infonce_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
