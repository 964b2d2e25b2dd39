/*
 * tests/test_nn2.c: embeddings, patch embedding, pooling, L2 normalisation.
 * Gradients of these layers are linear maps of dy (or exact in closed form),
 * so they are checked against direct double-precision evaluations; the forward
 * passes against independent loops in double.
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

static uint64_t g_rng = 0x9E3779B97F4A7C15u;
static float frand(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (float)((double)((g_rng * 0x2545F4914F6CDD1Du) >> 11) * 0x1p-52 - 1.0);
}

static void test_embedding(void **state) {
  (void)state;
  enum { B = 2, T = 3, D = 4, V = 5 };
  const int32_t ids[B * T] = {1, 4, 1, 0, 1, 2};
  float tok[V * D], pos[T * D], y[B * T * D], dy[B * T * D];
  for (int i = 0; i < V * D; i++)
    tok[i] = frand();
  for (int i = 0; i < T * D; i++)
    pos[i] = frand();
  for (int i = 0; i < B * T * D; i++)
    dy[i] = frand();
  assert_int_equal(ampc_embedding_forward(B, T, D, ids, V, tok, pos, AMPC_F32, y, AMPC_F32, NULL),
                   AMPC_OK);
  for (int r = 0; r < B * T; r++)
    for (int j = 0; j < D; j++)
      assert_true(y[r * D + j] == tok[ids[r] * D + j] + pos[(r % T) * D + j]);
  float dtok[V * D], dpos[T * D];
  for (int i = 0; i < V * D; i++)
    dtok[i] = 1.0f;
  memset(dpos, 0, sizeof dpos);
  assert_int_equal(ampc_embedding_backward(B, T, D, ids, V, dy, AMPC_F32, dtok, dpos, NULL, NULL),
                   AMPC_OK);
  for (int v = 0; v < V; v++)
    for (int j = 0; j < D; j++) {
      double s = 1.0;
      for (int r = 0; r < B * T; r++)
        if (ids[r] == v)
          s += (double)dy[r * D + j];
      assert_true(fabs((double)dtok[v * D + j] - s) <= 4 * 0x1p-24 * (fabs(s) + 4));
    }
  for (int tp = 0; tp < T; tp++)
    for (int j = 0; j < D; j++)
      assert_true(fabs((double)dpos[tp * D + j] -
                       ((double)dy[tp * D + j] + (double)dy[(T + tp) * D + j])) <= 4 * 0x1p-24);
  const int32_t bad[B * T] = {0, 0, 5, 0, 0, 0};
  assert_int_equal(ampc_embedding_forward(B, T, D, bad, V, tok, pos, AMPC_F32, y, AMPC_F32, NULL),
                   AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "ids[2]"));
}

static void test_embedding_duplicate_ids_fp16(void **state) {
  (void)state;
  /* two occurrences of id 3, each with gradient 40000: the FP32 sum 80000
   * reaches the binary16 gradient once, as inf, and is counted as overflow */
  const int32_t ids[2] = {3, 3};
  ampc_f16 dy[2], dtok[4] = {{0}}, dpos[2] = {{0}};
  dy[0] = dy[1] = ampc_f32_to_f16(40000.0f);
  ampc_round_stats st = {0};
  assert_int_equal(ampc_embedding_backward(1, 2, 1, ids, 4, dy, AMPC_F16, dtok, dpos, &st, NULL),
                   AMPC_OK);
  assert_int_equal(dtok[3].bits, 0x7C00);
  assert_int_equal(st.overflow, 1);
  assert_int_equal(dtok[0].bits, 0);
}

static void test_patch_embed(void **state) {
  (void)state;
  enum { B = 2, H = 4, W = 6, C = 3, P = 2, D = 5, K = C * P * P, NP = (H / P) * (W / P) };
  uint8_t img[B * H * W * C];
  for (int i = 0; i < B * H * W * C; i++)
    img[i] = (uint8_t)((i * 37 + 11) % 256);
  float w[D * K], bias[D], y[B * NP * D];
  for (int i = 0; i < D * K; i++)
    w[i] = frand();
  for (int i = 0; i < D; i++)
    bias[i] = frand();
  const float sc = 1.0f / 255.0f, sh = -0.5f;
  assert_int_equal(ampc_patch_embed_forward(B, H, W, C, P, D, img, sc, sh, w, AMPC_F32, bias, y,
                                            AMPC_F32, AMPC_ACC_F32, NULL, NULL),
                   AMPC_OK);
  /* the convolution with stride = kernel, written out directly (weight [D, C, P, P]) */
  for (int bi = 0; bi < B; bi++)
    for (int py = 0; py < H / P; py++)
      for (int px = 0; px < W / P; px++)
        for (int o = 0; o < D; o++) {
          double s = (double)bias[o], sa = fabs((double)bias[o]);
          for (int ch = 0; ch < C; ch++)
            for (int dy = 0; dy < P; dy++)
              for (int dx = 0; dx < P; dx++) {
                const float v =
                    (float)img[((bi * H + py * P + dy) * W + px * P + dx) * C + ch] * sc + sh;
                const double prod = (double)v * (double)w[o * K + (ch * P + dy) * P + dx];
                s += prod;
                sa += fabs(prod);
              }
          const int r = (bi * (H / P) + py) * (W / P) + px;
          assert_true(fabs((double)y[r * D + o] - s) <= (K + 3) * 0x1p-24 * sa);
        }
  /* dW = dy^T patches: compare with the direct sum */
  float dyv[B * NP * D], dw[D * K] = {0}, db[D] = {0};
  for (int i = 0; i < B * NP * D; i++)
    dyv[i] = frand();
  assert_int_equal(ampc_patch_embed_backward(B, H, W, C, P, D, img, sc, sh, AMPC_F32, dyv, AMPC_F32,
                                             dw, db, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  for (int o = 0; o < D; o++) {
    double sb = 0;
    for (int r = 0; r < B * NP; r++)
      sb += (double)dyv[r * D + o];
    assert_true(fabs((double)db[o] - sb) <= (B * NP + 1) * 0x1p-24 * B * NP);
  }
  assert_int_equal(ampc_patch_embed_forward(B, 5, W, C, P, D, img, sc, sh, w, AMPC_F32, bias, y,
                                            AMPC_F32, AMPC_ACC_F32, NULL, NULL),
                   AMPC_ERR_INVALID_ARG);
}

static void test_pool_and_l2norm(void **state) {
  (void)state;
  enum { B = 2, T = 4, D = 3 };
  float x[B * T * D], y[B * D], dy[B * D], dx[B * T * D];
  for (int i = 0; i < B * T * D; i++)
    x[i] = frand();
  for (int i = 0; i < B * D; i++)
    dy[i] = frand();
  const uint8_t mask[B * T] = {1, 1, 0, 1, 0, 0, 0, 0}; /* second sequence fully masked */
  assert_int_equal(ampc_mean_pool_forward(B, T, D, x, AMPC_F32, mask, y, AMPC_F32, NULL), AMPC_OK);
  for (int j = 0; j < D; j++) {
    const double want = ((double)x[j] + (double)x[D + j] + (double)x[3 * D + j]) / 3.0;
    assert_true(fabs((double)y[j] - want) <= 4 * 0x1p-24 * 3);
    assert_true(y[D + j] == 0.0f);
  }
  assert_int_equal(ampc_mean_pool_backward(B, T, D, dy, AMPC_F32, mask, dx), AMPC_OK);
  for (int j = 0; j < D; j++) {
    assert_true(dx[j] == dy[j] / 3.0f && dx[2 * D + j] == 0.0f && dx[(T + 1) * D + j] == 0.0f);
  }
  /* L2 normalisation: unit rows; backward = (I - y y^T) dy / ||x|| */
  float n[2 * D], dn[2 * D];
  assert_int_equal(ampc_l2norm_forward(2, D, x, AMPC_F32, 1e-12f, n, AMPC_F32, NULL), AMPC_OK);
  for (int i = 0; i < 2; i++) {
    double s = 0, nx = 0;
    for (int j = 0; j < D; j++)
      s += (double)n[i * D + j] * (double)n[i * D + j],
          nx += (double)x[i * D + j] * (double)x[i * D + j];
    assert_true(fabs(s - 1.0) <= 8 * 0x1p-24);
    nx = sqrt(nx);
    assert_int_equal(ampc_l2norm_backward(2, D, dy, AMPC_F32, x, AMPC_F32, 1e-12f, dn), AMPC_OK);
    double ydy = 0;
    for (int j = 0; j < D; j++)
      ydy += (double)x[i * D + j] / nx * (double)dy[i * D + j];
    for (int j = 0; j < D; j++) {
      const double want = ((double)dy[i * D + j] - (double)x[i * D + j] / nx * ydy) / nx;
      assert_true(fabs((double)dn[i * D + j] - want) <= 16 * 0x1p-24 * (1 + fabs(want)) / nx);
    }
  }
  /* a zero row: y = 0, no NaN */
  const float z[D] = {0, 0, 0};
  float yz[D];
  assert_int_equal(ampc_l2norm_forward(1, D, z, AMPC_F32, 1e-12f, yz, AMPC_F32, NULL), AMPC_OK);
  assert_true(yz[0] == 0.0f && yz[1] == 0.0f && yz[2] == 0.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embedding),
      cmocka_unit_test(test_embedding_duplicate_ids_fp16),
      cmocka_unit_test(test_patch_embed),
      cmocka_unit_test(test_pool_and_l2norm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
