/*
 * tests/test_qat.c: INT8 fake quantization in the linear layers' seam
 * (ampc_linear_fp8 with fake_q8, include/ampc/nn.h): fq(x) per tensor and
 * fq(W) per output channel against the same quantization written out here
 * (nearbyintf: round half to even); the forward pass y = fq(x) fq(W)^T + b,
 * the backward pass (straight-through estimator) dx = dy fq(W),
 * dW += dy^T fq(x), db = column sums of dy, and the input-gradient product
 * dy fq(W): bit for bit against ampc_linear_forward / _backward / ampc_gemm
 * on the reference operands, and against a double-precision reference
 * within the FP32 summation bound; an all-zero weight row; ties; NaN and
 * inf passing through; the workspace given or not; and the model's switch
 * (ampc_mmodel_set_fake_quant) refused where it does not apply.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ampc/ampc.h"
#include "mm_fixture.h"

enum { M = 9, K = 70, N = 13, ZERO_ROW = 4, BIG_ROW = 7 };

static uint64_t g_rng = 0x853C49E6748FEA9Bull;
static float rndf(void) { /* a sum of uniforms, roughly normal */
  float s = 0.0f;
  for (int i = 0; i < 4; i++) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    s += (float)(g_rng >> 40) * 0x1p-24f - 0.5f;
  }
  return s;
}

/* fq of v [rows, cols]: one scale per row (per_row) or one for all, max|v|
 * over the finite values / 127 (1 when that is 0); q = nearbyint(v / s)
 * clamped to [-127, 127]; NaN and inf kept. scale: the scales used. */
static void ref_fq(const float *v, int rows, int cols, bool per_row, float *out, float *scale) {
  const int groups = per_row ? rows : 1, len = per_row ? cols : rows * cols;
  for (int g = 0; g < groups; g++) {
    float amax = 0.0f;
    for (int i = 0; i < len; i++)
      if (isfinite(v[g * len + i]) && fabsf(v[g * len + i]) > amax)
        amax = fabsf(v[g * len + i]);
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    if (scale)
      scale[g] = s;
    for (int i = 0; i < len; i++) {
      const float x = v[g * len + i];
      float q = nearbyintf(x / s);
      q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
      out[g * len + i] = isfinite(x) ? q * s : x;
    }
  }
}

static float g_x[M * K], g_w[N * K], g_b[N], g_dy[M * N];

static void fill(void) {
  for (int i = 0; i < M * K; i++)
    g_x[i] = rndf() * 3.0f;
  for (int j = 0; j < N; j++)
    for (int p = 0; p < K; p++)
      g_w[j * K + p] = j == ZERO_ROW ? 0.0f : rndf() * 0.1f * (float)(1 + j % 3);
  g_w[BIG_ROW * K + 11] = 2.0f; /* one outlier: that row's scale alone is large */
  for (int j = 0; j < N; j++)
    g_b[j] = rndf();
  for (int i = 0; i < M * N; i++)
    g_dy[i] = rndf();
}

/* |computed - exact| for an FP32 sum of n terms whose absolute values sum
 * to abs_sum, each product rounded once, in any order (fused or not):
 * gamma_{n+1} * abs_sum (Higham, Accuracy and Stability, 2nd ed., 3.1) */
static double sum_bound(int n, double abs_sum) {
  const double u = 0x1p-24, nu = (double)(n + 1) * u;
  return nu / (1.0 - nu) * abs_sum;
}

static void make_f(ampc_linear_fp8 *f, ampc_scratch *ws) {
  ampc_linear_fp8_init(f, ws);
  f->fake_q8 = true;
}

/* the fake-quantized operands: per-channel scales, half a step, zero row */
static void test_fq_values(void **state) {
  (void)state;
  fill();
  float fw[N * K], sw[N];
  ref_fq(g_w, N, K, true, fw, sw);
  for (int j = 0; j < N; j++) {
    float amax = 0.0f;
    for (int p = 0; p < K; p++)
      amax = fmaxf(amax, fabsf(g_w[j * K + p]));
    assert_true(sw[j] == (j == ZERO_ROW ? 1.0f : amax / 127.0f));
    for (int p = 0; p < K; p++) {
      assert_true(fabsf(fw[j * K + p] - g_w[j * K + p]) <= 0.5f * sw[j] * (1.0f + 0x1p-20f));
      if (j == ZERO_ROW)
        assert_true(fw[j * K + p] == 0.0f);
    }
  }
  /* per channel: the outlier row's step is its own */
  assert_true(sw[BIG_ROW] == 2.0f / 127.0f);
  assert_true(sw[BIG_ROW] > 4.0f * sw[0]);
}

/* y = fq(x) fq(W)^T + b: the same bits as the FP32 linear layer on the
 * reference operands, and within the summation bound of the exact value */
static void test_forward(void **state) {
  (void)state;
  fill();
  float fx[M * K], fw[N * K], y[M * N], want[M * N];
  ref_fq(g_x, M, K, false, fx, NULL);
  ref_fq(g_w, N, K, true, fw, NULL);
  const size_t wsb = ampc_linear_fq8_ws_bytes(M, K, N);
  assert_true(wsb >= (size_t)(M * K + N * K) * sizeof(float));
  void *mem = malloc(wsb);
  assert_non_null(mem);
  for (int pass = 0; pass < 2; pass++) { /* 0: the workspace given, 1: none (allocated) */
    ampc_scratch ws = {mem, wsb};
    ampc_linear_fp8 f;
    make_f(&f, pass == 0 ? &ws : NULL);
    memset(y, 0xFF, sizeof y);
    assert_int_equal(ampc_linear_forward_fp8(M, K, N, g_x, AMPC_F32, g_w, AMPC_F32, g_b, y,
                                             AMPC_F32, AMPC_ACC_F32, &f, NULL),
                     AMPC_OK);
    assert_int_equal(ampc_linear_forward(M, K, N, fx, AMPC_F32, fw, AMPC_F32, g_b, want, AMPC_F32,
                                         AMPC_ACC_F32, NULL),
                     AMPC_OK);
    assert_memory_equal(y, want, sizeof y);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double exact = (double)g_b[j], abs_sum = fabs((double)g_b[j]);
        for (int p = 0; p < K; p++) {
          exact += (double)fx[i * K + p] * (double)fw[j * K + p];
          abs_sum += fabs((double)fx[i * K + p] * (double)fw[j * K + p]);
        }
        const double err = fabs((double)y[i * N + j] - exact);
        if (err > sum_bound(K + 1, abs_sum))
          fail_msg("y[%d,%d] = %.9g, exact %.17g", i, j, (double)y[i * N + j], exact);
        if (j == ZERO_ROW) /* fq of a zero row is 0: the bias alone */
          assert_true(y[i * N + j] == g_b[j]);
      }
  }
  /* 16-bit input and output: fq from the binary16 values, the product in
   * FP32, one rounding to binary16: the linear layer's on the references */
  uint16_t xh[M * K], wh[N * K], bh[N], yh[M * N], wanth[M * N];
  float xv[M * K], wv[N * K];
  assert_int_equal(ampc_convert(xh, AMPC_F16, g_x, AMPC_F32, M * K), AMPC_OK);
  assert_int_equal(ampc_convert(wh, AMPC_F16, g_w, AMPC_F32, N * K), AMPC_OK);
  assert_int_equal(ampc_convert(bh, AMPC_F16, g_b, AMPC_F32, N), AMPC_OK);
  assert_int_equal(ampc_convert(xv, AMPC_F32, xh, AMPC_F16, M * K), AMPC_OK);
  assert_int_equal(ampc_convert(wv, AMPC_F32, wh, AMPC_F16, N * K), AMPC_OK);
  ref_fq(xv, M, K, false, fx, NULL);
  ref_fq(wv, N, K, true, fw, NULL);
  ampc_linear_fp8 f;
  make_f(&f, NULL);
  assert_int_equal(ampc_linear_forward_fp8(M, K, N, xh, AMPC_F16, wh, AMPC_F16, bh, yh, AMPC_F16,
                                           AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  /* the bias in the weights' dtype, as the seam passes it */
  float bv[N];
  assert_int_equal(ampc_convert(bv, AMPC_F32, bh, AMPC_F16, N), AMPC_OK);
  assert_int_equal(ampc_linear_forward(M, K, N, fx, AMPC_F32, fw, AMPC_F32, bv, wanth, AMPC_F16,
                                       AMPC_ACC_F32, NULL),
                   AMPC_OK);
  assert_memory_equal(yh, wanth, sizeof yh);
  free(mem);
}

/* ties go to even, values at the scale's ends exact */
static void test_ties(void **state) {
  (void)state;
  /* x: max 127, so s = 1: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.5 -> 0 */
  const float x[5] = {127.0f, 2.5f, 3.5f, -2.5f, 0.5f};
  float w[5 * 5] = {0}, y[5];
  for (int j = 0; j < 5; j++)
    w[j * 5 + j] = 127.0f; /* row j: e_j * 127, its scale 1, fq exact */
  ampc_linear_fp8 f;
  make_f(&f, NULL);
  assert_int_equal(ampc_linear_forward_fp8(1, 5, 5, x, AMPC_F32, w, AMPC_F32, NULL, y, AMPC_F32,
                                           AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  const float want[5] = {127.0f * 127.0f, 2.0f * 127.0f, 4.0f * 127.0f, -2.0f * 127.0f, 0.0f};
  for (int j = 0; j < 5; j++)
    if (y[j] != want[j])
      fail_msg("y[%d] = %g, want %g", j, (double)y[j], (double)want[j]);
}

/* the straight-through estimator: dx = dy fq(W), dW += dy^T fq(x), db from dy */
static void test_backward(void **state) {
  (void)state;
  fill();
  float fx[M * K], fw[N * K];
  ref_fq(g_x, M, K, false, fx, NULL);
  ref_fq(g_w, N, K, true, fw, NULL);
  float dx[M * K], dw[N * K], db[N], wdx[M * K], wdw[N * K], wdb[N], dw0[N * K];
  for (int i = 0; i < N * K; i++)
    dw0[i] = rndf(); /* dW accumulates */
  for (int j = 0; j < N; j++)
    db[j] = wdb[j] = 0.25f;
  memcpy(dw, dw0, sizeof dw);
  memcpy(wdw, dw0, sizeof wdw);
  ampc_linear_fp8 f;
  make_f(&f, NULL);
  assert_int_equal(ampc_linear_backward_fp8(M, K, N, g_dy, AMPC_F32, g_x, AMPC_F32, g_w, AMPC_F32,
                                            dx, dw, db, AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  assert_int_equal(ampc_linear_backward(M, K, N, g_dy, AMPC_F32, fx, AMPC_F32, fw, AMPC_F32, wdx,
                                        wdw, wdb, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  assert_memory_equal(dx, wdx, sizeof dx);
  assert_memory_equal(dw, wdw, sizeof dw);
  assert_memory_equal(db, wdb, sizeof db);
  /* against the exact products */
  for (int i = 0; i < M; i++)
    for (int p = 0; p < K; p++) {
      double e = 0.0, a = 0.0;
      for (int j = 0; j < N; j++)
        e += (double)g_dy[i * N + j] * (double)fw[j * K + p],
            a += fabs((double)g_dy[i * N + j] * (double)fw[j * K + p]);
      if (fabs((double)dx[i * K + p] - e) > sum_bound(N, a))
        fail_msg("dx[%d,%d] = %.9g, exact %.17g", i, p, (double)dx[i * K + p], e);
    }
  for (int j = 0; j < N; j++)
    for (int p = 0; p < K; p++) {
      double e = (double)dw0[j * K + p], a = fabs((double)dw0[j * K + p]);
      for (int i = 0; i < M; i++)
        e += (double)g_dy[i * N + j] * (double)fx[i * K + p],
            a += fabs((double)g_dy[i * N + j] * (double)fx[i * K + p]);
      if (fabs((double)dw[j * K + p] - e) > sum_bound(M + 1, a))
        fail_msg("dW[%d,%d] = %.9g, exact %.17g", j, p, (double)dw[j * K + p], e);
    }
  for (int j = 0; j < N; j++) {
    double e = 0.25, a = 0.25;
    for (int i = 0; i < M; i++)
      e += (double)g_dy[i * N + j], a += fabs((double)g_dy[i * N + j]);
    assert_true(fabs((double)db[j] - e) <= sum_bound(M + 1, a));
  }
  /* the zero weight row passes no gradient to x: dx is dy times the other rows */
  /* no dx: dW and db alone, the same bits */
  memcpy(dw, dw0, sizeof dw);
  assert_int_equal(ampc_linear_backward_fp8(M, K, N, g_dy, AMPC_F32, g_x, AMPC_F32, g_w, AMPC_F32,
                                            NULL, dw, NULL, AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  assert_memory_equal(dw, wdw, sizeof dw);
  /* the input-gradient product alone, with beta = 1: c + dy fq(W) */
  float c[M * K], wc[M * K];
  for (int i = 0; i < M * K; i++)
    c[i] = wc[i] = rndf();
  assert_int_equal(ampc_linear_dgrad_fp8(M, K, N, g_dy, AMPC_F32, g_w, AMPC_F32, 1.0f, c, AMPC_F32,
                                         AMPC_ACC_F32, &f, false),
                   AMPC_OK);
  assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_N, M, K, N, 1.0f, g_dy, AMPC_F32, N, fw, AMPC_F32,
                             K, 1.0f, wc, AMPC_F32, K, AMPC_ACC_F32),
                   AMPC_OK);
  assert_memory_equal(c, wc, sizeof c);
}

/* NaN and inf are not quantized: they reach y (the loss and the step's
 * check see them); the scale comes from the finite values */
static void test_nonfinite(void **state) {
  (void)state;
  fill();
  float x[M * K], fx[M * K], fw[N * K], y[M * N], want[M * N];
  memcpy(x, g_x, sizeof x);
  x[5] = NAN;           /* row 0 */
  x[K + 3] = INFINITY;  /* row 1 */
  x[2 * K + 9] = 1e30f; /* row 2: finite, so it sets the scale */
  ref_fq(x, M, K, false, fx, NULL);
  ref_fq(g_w, N, K, true, fw, NULL);
  ampc_linear_fp8 f;
  make_f(&f, NULL);
  assert_int_equal(ampc_linear_forward_fp8(M, K, N, x, AMPC_F32, g_w, AMPC_F32, g_b, y, AMPC_F32,
                                           AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  for (int j = 0; j < N; j++) {
    assert_true(isnan(y[j]));         /* NaN times anything */
    assert_false(isfinite(y[N + j])); /* inf: +-inf, or NaN where fq(w) is 0 */
  }
  assert_true(isnan(y[N + ZERO_ROW])); /* inf * 0 */
  for (int i = 2; i < M; i++)
    for (int j = 0; j < N; j++)
      assert_true(isfinite(y[i * N + j]));
  /* with a scale of 1e30 / 127 every other value rounds to 0: row 3's y is b */
  for (int j = 0; j < N; j++)
    assert_true(y[3 * N + j] == g_b[j]);
  /* and the same bits as the FP32 layer on the reference operands (NaN
   * payloads aside: compare finite values and classes) */
  assert_int_equal(ampc_linear_forward(M, K, N, fx, AMPC_F32, fw, AMPC_F32, g_b, want, AMPC_F32,
                                       AMPC_ACC_F32, NULL),
                   AMPC_OK);
  for (int i = 0; i < M * N; i++)
    assert_true(isfinite(y[i]) ? y[i] == want[i] : !isfinite(want[i]));
  /* a NaN weight stays NaN: its output column is NaN */
  float w[N * K];
  memcpy(w, g_w, sizeof w);
  w[2 * K + 1] = NAN;
  assert_int_equal(ampc_linear_forward_fp8(M, K, N, g_x, AMPC_F32, w, AMPC_F32, g_b, y, AMPC_F32,
                                           AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  for (int i = 0; i < M; i++) {
    assert_true(isnan(y[i * N + 2]));
    assert_true(isfinite(y[i * N + 3]));
  }
}

/* the model's switch: mm-micro's blocks fake-quantized change its loss,
 * train (finite gradients), and switched off give the unquantized bits
 * again; fp8-mixed refused */
typedef struct {
  ampc_mmodel_config c;
  ampc_mmodel_specs sp;
  ampc_trainer T;
  ampc_mmodel *M;
} model;

static void make_model(model *m, ampc_precision p) {
  memset(m, 0, sizeof *m);
  assert_int_equal(ampc_mmodel_config_get("mm-micro", MMF_VOCAB, MMF_TT, MMF_CLASSES, &m->c),
                   AMPC_OK);
  assert_int_equal(ampc_mmodel_specs_make(&m->c, &m->sp), AMPC_OK);
  ampc_amp_config a;
  ampc_amp_config_preset(p, &a);
  const ampc_optim_config o = ampc_optim_adamw_defaults();
  assert_int_equal(ampc_trainer_init(&m->T, &a, &o, m->sp.specs, m->sp.n, k_mmf_init_seed),
                   AMPC_OK);
  assert_int_equal(mmf_perturb(&m->T), AMPC_OK);
  assert_int_equal(ampc_mmodel_create(&m->M, &m->c, &m->T.params, &m->T.amp, MMF_B), AMPC_OK);
}

static void free_model(model *m) {
  ampc_mmodel_free(m->M);
  ampc_trainer_free(&m->T);
  ampc_mmodel_specs_free(&m->sp);
}

static void test_model_switch(void **state) {
  (void)state;
  enum { IMGB = MMF_B * 8 * 8 * 3 };
  uint8_t images[IMGB];
  int32_t tokens[MMF_B * MMF_TT], labels[MMF_B];
  mmf_batch(images, IMGB, tokens, labels);
  const ampc_mmodel_batch bt = {.b = MMF_B, .images = images, .tokens = tokens, .labels = labels};
  model m;
  make_model(&m, AMPC_PRECISION_32_TRUE);
  ampc_mmodel_losses plain, fq, again;
  assert_int_equal(ampc_mmodel_forward(m.M, &bt, &plain), AMPC_OK);
  assert_int_equal(ampc_mmodel_backward(m.M, 1.0f), AMPC_OK);
  assert_false(ampc_mmodel_fake_quant(m.M));
  assert_int_equal(ampc_mmodel_set_fake_quant(m.M, true), AMPC_OK);
  assert_true(ampc_mmodel_fake_quant(m.M));
  const ampc_params *P = &m.T.params;
  memset(P->grad, 0, (size_t)P->total * ampc_dtype_size(P->wdt));
  assert_int_equal(ampc_mmodel_forward(m.M, &bt, &fq), AMPC_OK);
  assert_true(isfinite(fq.total));
  assert_true(fq.total != plain.total); /* INT8 rounding of the blocks' operands */
  /* about INT8's relative error (2^-8 of the largest values), not more */
  assert_true(fabsf(fq.total - plain.total) < 0.05f * fabsf(plain.total));
  assert_int_equal(ampc_mmodel_backward(m.M, 1.0f), AMPC_OK);
  const float *g = (const float *)P->grad;
  double gsum = 0.0;
  for (int64_t i = 0; i < P->total; i++) {
    assert_true(isfinite(g[i]));
    gsum += fabs(g[i]);
  }
  assert_true(gsum > 0.0);
  /* INT8 weights on a fake-quantized model are refused */
  const int8_t w8[1] = {1};
  const float sc[1] = {1.0f};
  assert_int_equal(
      ampc_mmodel_set_int8(m.M, "vision.blocks.0.mlp.fc1.weight", w8, 1, 1, sc, true, NULL),
      AMPC_ERR_UNSUPPORTED);
  assert_int_equal(ampc_mmodel_set_fake_quant(m.M, false), AMPC_OK);
  assert_int_equal(ampc_mmodel_forward(m.M, &bt, &again), AMPC_OK);
  assert_true(again.total == plain.total);
  free_model(&m);
  make_model(&m, AMPC_PRECISION_FP8_MIXED);
  assert_int_equal(ampc_mmodel_set_fake_quant(m.M, true), AMPC_ERR_UNSUPPORTED);
  assert_false(ampc_mmodel_fake_quant(m.M));
  free_model(&m);
  assert_int_equal(ampc_mmodel_set_fake_quant(NULL, true), AMPC_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fq_values), cmocka_unit_test(test_forward),
      cmocka_unit_test(test_ties),      cmocka_unit_test(test_backward),
      cmocka_unit_test(test_nonfinite), cmocka_unit_test(test_model_switch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
