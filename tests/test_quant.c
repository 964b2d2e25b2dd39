/*
 * tests/test_quant.c: INT8 weight quantization (include/ampc/quant.h):
 * every weight within half a step of its dequantized value, scales exactly
 * max|w| / 127 (per row and per tensor), an all-zero row exact with scale 1,
 * values in [-127, 127] only, ties rounded to even; zero or non-finite
 * scales and NaN weights refused; SQNR against values known in closed form;
 * which checkpoint names are linear layers. Calibration (ampc_quant_calibrate)
 * on mm-micro: each site's largest |x| and SQNR equal to an independent
 * observer's, max scales amax / 127 with nothing clipped, the 100th
 * percentile equal to the max and the 99th clipping at most 1 %, the MSE
 * threshold within the range, q, k, v of a self-attention seeing the same
 * input, a non-finite activation refused, bad arguments refused.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ampc/ampc.h"

static uint64_t g_rng = 0x853C49E6748FEA9Bull;
static float rndf(void) { /* roughly N(0, 1)-ish: a sum of uniforms */
  float s = 0.0f;
  for (int i = 0; i < 4; i++) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    s += (float)(g_rng >> 40) * 0x1p-24f - 0.5f;
  }
  return s;
}

static void test_round_trip(void **state) {
  (void)state;
  enum { R = 37, C = 53 };
  float w[R * C], out[R * C], sc[R];
  int8_t q[R * C];
  for (int i = 0; i < R * C; i++)
    w[i] = rndf() * (float)(1 + i / C); /* rows of different ranges */
  for (int c = 0; c < C; c++)
    w[5 * C + c] = 0.0f; /* an all-zero row */
  for (int g = 0; g < 2; g++) {
    assert_int_equal(ampc_quant_weight_s8(w, R, C, (ampc_quant_granularity)g, q, sc), AMPC_OK);
    float all = 0.0f;
    for (int i = 0; i < R * C; i++)
      all = fabsf(w[i]) > all ? fabsf(w[i]) : all;
    for (int r = 0; r < R; r++) {
      float m = 0.0f;
      for (int c = 0; c < C; c++)
        m = fabsf(w[r * C + c]) > m ? fabsf(w[r * C + c]) : m;
      const float want = g == 0 ? (m > 0.0f ? m / 127.0f : 1.0f) : all / 127.0f;
      assert_true(sc[g == 0 ? r : 0] == want);
    }
    assert_int_equal(ampc_dequant_s8(q, R, C, sc, g == 0, out), AMPC_OK);
    for (int i = 0; i < R * C; i++) {
      const float s = sc[g == 0 ? i / C : 0];
      assert_true(q[i] >= -127 && q[i] <= 127);
      /* half a step, and the FP32 rounding of w / s and of q * s (2 ulps) */
      assert_true(fabsf(w[i] - out[i]) <= 0.5f * s + 2.0f * 0x1p-23f * fabsf(w[i]));
    }
    for (int c = 0; c < C; c++)
      assert_true(out[5 * C + c] == 0.0f);
  }
  /* the row's largest magnitudes are exactly +-127 steps */
  const float row[4] = {-2.54f, 1.27f, 0.01f, 2.54f};
  assert_int_equal(ampc_quant_weight_s8(row, 1, 4, AMPC_QUANT_CHANNEL, q, sc), AMPC_OK);
  assert_int_equal(q[0], -127);
  assert_int_equal(q[3], 127);
  /* a tie is rounded to even: 2.5 steps -> 2, 3.5 -> 4 (scale 1: amax 127) */
  const float ties[3] = {127.0f, 2.5f, 3.5f};
  assert_int_equal(ampc_quant_weight_s8(ties, 1, 3, AMPC_QUANT_TENSOR, q, sc), AMPC_OK);
  assert_true(sc[0] == 1.0f);
  assert_int_equal(q[1], 2);
  assert_int_equal(q[2], 4);
}

static void test_refused(void **state) {
  (void)state;
  float w[4] = {1.0f, NAN, 2.0f, 3.0f}, out[4], sc[2] = {1.0f, 0.0f};
  int8_t q[4] = {1, 2, 3, 4};
  assert_int_equal(ampc_quant_weight_s8(w, 2, 2, AMPC_QUANT_CHANNEL, q, sc), AMPC_ERR_NUMERIC);
  w[1] = INFINITY;
  assert_int_equal(ampc_quant_weight_s8(w, 2, 2, AMPC_QUANT_TENSOR, q, sc), AMPC_ERR_NUMERIC);
  assert_int_equal(ampc_quant_weight_s8(w, 0, 2, AMPC_QUANT_TENSOR, q, sc), AMPC_ERR_INVALID_ARG);
  /* zero, negative and non-finite scales */
  assert_int_equal(ampc_dequant_s8(q, 2, 2, sc, true, out), AMPC_ERR_INVALID_ARG);
  sc[1] = -1.0f;
  assert_int_equal(ampc_dequant_s8(q, 2, 2, sc, true, out), AMPC_ERR_INVALID_ARG);
  sc[1] = NAN;
  assert_int_equal(ampc_dequant_s8(q, 2, 2, sc, true, out), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_dequant_s8(q, 2, 2, sc, false, out), AMPC_OK); /* scale[0] only */
}

static void test_sqnr(void **state) {
  (void)state;
  const float x[2] = {1.0f, 1.0f}, a[2] = {1.0f, 0.0f}, z[2] = {0.0f, 0.0f};
  assert_true(fabs(ampc_sqnr_db(x, a, 2) - 10.0 * log10(2.0)) < 1e-12);
  assert_true(isinf(ampc_sqnr_db(x, x, 2)) && ampc_sqnr_db(x, x, 2) > 0.0);
  assert_true(isinf(ampc_sqnr_db(z, x, 2)) && ampc_sqnr_db(z, x, 2) < 0.0);
  /* a uniform b-bit quantizer's error on a full-scale uniform signal: about
   * 6.02 b dB; INT8 on [-1, 1] (b = 8: 48.2 dB) within 1 dB */
  enum { N = 20000 };
  float *u = malloc(N * sizeof *u), *d = malloc(N * sizeof *d), s;
  int8_t *q = malloc(N);
  assert_true(u && d && q);
  for (int i = 0; i < N; i++)
    u[i] = -1.0f + 2.0f * (float)i / (float)(N - 1);
  assert_int_equal(ampc_quant_weight_s8(u, 1, N, AMPC_QUANT_TENSOR, q, &s), AMPC_OK);
  assert_int_equal(ampc_dequant_s8(q, 1, N, &s, false, d), AMPC_OK);
  const double db = ampc_sqnr_db(u, d, N), want = 10.0 * log10(127.0 * 127.0 * 4.0);
  assert_true(fabs(db - want) < 1.0);
  free(u), free(d), free(q);
}

static void test_linear_names(void **state) {
  (void)state;
  assert_true(ampc_quant_is_linear("vision.blocks.0.mlp.fc1.weight", 2));
  assert_true(ampc_quant_is_linear("text.blocks.2.attn.in_proj_weight", 2));
  assert_true(ampc_quant_is_linear("vision.patch_embed.weight", 2));
  assert_true(ampc_quant_is_linear("heads.itm.weight", 2));
  assert_false(ampc_quant_is_linear("vision.blocks.0.mlp.fc1.bias", 1));
  assert_false(ampc_quant_is_linear("vision.blocks.0.norm1.weight", 1));
  assert_false(ampc_quant_is_linear("text.token_embed.weight", 2));
  assert_false(ampc_quant_is_linear("text.pos_embed.weight", 2));
  assert_false(ampc_quant_is_linear("optimizer.exp_avg.heads.itm.weight", 2));
}

/* the INT8 linear layer against the same arithmetic written out: x / xs
 * rounded to nearest even and clamped, the exact integer sums, then
 * acc * (xs * ws) + b in FP32: the same bits */
static void test_linear_s8(void **state) {
  (void)state;
  enum { M = 9, K = 70, N = 13 };
  float x[M * K], b[N], y[M * N], wsc[N];
  uint16_t xh[M * K];
  int8_t w[N * K];
  for (int i = 0; i < M * K; i++)
    x[i] = rndf() * 3.0f;
  for (int i = 0; i < N * K; i++)
    w[i] = (int8_t)(int)(rndf() * 200.0f);
  for (int j = 0; j < N; j++)
    b[j] = rndf(), wsc[j] = 0.01f + 0.001f * (float)j;
  for (int pass = 0; pass < 4; pass++) {
    /* 0: dynamic, per channel; 1: static scale with saturation, per tensor;
     * 2: f16 input; 3: no bias */
    const ampc_linear_s8 s = {
        .w = w, .scale = wsc, .per_channel = pass != 1, .x_scale = pass == 1 ? 0.01f : 0.0f};
    const void *xin = x;
    ampc_dtype xdt = AMPC_F32;
    float xv[M * K];
    memcpy(xv, x, sizeof xv);
    if (pass == 2) {
      assert_int_equal(ampc_convert(xh, AMPC_F16, x, AMPC_F32, M * K), AMPC_OK);
      assert_int_equal(ampc_convert(xv, AMPC_F32, xh, AMPC_F16, M * K), AMPC_OK);
      xin = xh, xdt = AMPC_F16;
    }
    assert_int_equal(ampc_linear_forward_s8(M, K, N, xin, xdt, &s, pass == 3 ? NULL : b, AMPC_F32,
                                            y, AMPC_F32, NULL),
                     AMPC_OK);
    float xs = s.x_scale;
    if (xs == 0.0f) {
      float amax = 0.0f;
      for (int i = 0; i < M * K; i++)
        amax = fabsf(xv[i]) > amax ? fabsf(xv[i]) : amax;
      xs = amax / 127.0f;
    }
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        int64_t acc = 0;
        for (int p = 0; p < K; p++) {
          float q = nearbyintf(xv[i * K + p] / xs);
          q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
          acc += (int64_t)q * w[j * K + p];
        }
        const float want =
            (float)acc * (xs * wsc[s.per_channel ? j : 0]) + (pass == 3 ? 0.0f : b[j]);
        if (y[i * N + j] != want)
          fail_msg("pass %d: y[%d,%d] = %.9g, want %.9g", pass, i, j, (double)y[i * N + j],
                   (double)want);
      }
  }
  /* a NaN activation: refused under dynamic scaling, 0 under a static one */
  x[5] = NAN;
  const ampc_linear_s8 dyn = {.w = w, .scale = wsc, .per_channel = true, .x_scale = 0.0f},
                       sta = {.w = w, .scale = wsc, .per_channel = true, .x_scale = 0.5f};
  assert_int_equal(
      ampc_linear_forward_s8(M, K, N, x, AMPC_F32, &dyn, b, AMPC_F32, y, AMPC_F32, NULL),
      AMPC_ERR_NUMERIC);
  assert_int_equal(
      ampc_linear_forward_s8(M, K, N, x, AMPC_F32, &sta, b, AMPC_F32, y, AMPC_F32, NULL), AMPC_OK);
  /* zero or non-finite scales are refused */
  wsc[3] = 0.0f;
  assert_int_equal(
      ampc_linear_forward_s8(M, K, N, x, AMPC_F32, &sta, b, AMPC_F32, y, AMPC_F32, NULL),
      AMPC_ERR_INVALID_ARG);
  const ampc_linear_s8 neg = {.w = w, .scale = wsc, .per_channel = false, .x_scale = -1.0f};
  wsc[0] = 1.0f;
  assert_int_equal(
      ampc_linear_forward_s8(M, K, N, x, AMPC_F32, &neg, b, AMPC_F32, y, AMPC_F32, NULL),
      AMPC_ERR_INVALID_ARG);
}

/* ---- calibration on mm-micro ----------------------------------------------------------- */

enum { CB = 6, CTT = 5, CVOCAB = 11, CCLASSES = 3, CIMG = 8 };

typedef struct calib_fixture {
  ampc_mmodel *M;
  uint8_t images[2][CB * CIMG * CIMG * 3];
  int32_t tokens[2][CB * CTT], labels[2][CB];
  float poison; /* != 0: batch 1's image 0 scaled by it (extreme_factor) */
} calib_fixture;

static ampc_status calib_run(void *user, int i) {
  calib_fixture *f = user;
  const ampc_mmodel_batch bt = {.b = CB,
                                .images = f->images[i],
                                .tokens = f->tokens[i],
                                .labels = f->labels[i],
                                .extreme_row = 0,
                                .extreme_factor = i == 1 ? f->poison : 0.0f};
  ampc_mmodel_losses L;
  return ampc_mmodel_forward(f->M, &bt, &L);
}

/* an independent observer: the largest |x|, the count, and the squared
 * error of quantizing with a given scale (as ampc_linear_forward_s8 does) */
typedef struct ref_obs {
  float amax, scale;
  uint64_t n;
  double ss, es;
} ref_obs;

static void ref_observe(void *user, const float *x, int64_t n) {
  ref_obs *o = user;
  for (int64_t i = 0; i < n; i++) {
    o->amax = fabsf(x[i]) > o->amax ? fabsf(x[i]) : o->amax;
    if (o->scale > 0.0f) {
      float v = x[i] / o->scale;
      v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
      const double d = (double)x[i] - (double)(nearbyintf(v) * o->scale);
      o->ss += (double)x[i] * (double)x[i], o->es += d * d;
    }
  }
  o->n += (uint64_t)n;
}

static void test_calibrate(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-micro", CVOCAB, CTT, CCLASSES, &c), AMPC_OK);
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_mmodel_specs_make(&c, &sp), AMPC_OK);
  ampc_amp_config a;
  ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &a);
  ampc_params P;
  memset(&P, 0, sizeof P);
  ampc_rng r;
  ampc_rng_seed(&r, 7);
  assert_int_equal(
      ampc_params_create(&P, sp.specs, sp.n, a.lowp, a.master_weights, a.state_dtype, 0, &r),
      AMPC_OK);
  static calib_fixture f;
  memset(&f, 0, sizeof f);
  assert_int_equal(ampc_mmodel_create(&f.M, &c, &P, &a, CB), AMPC_OK);
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < sizeof f.images[k]; i++)
      f.images[k][i] = (uint8_t)(ampc_rng_next(&r) % 256);
    for (int b = 0; b < CB; b++) {
      for (int t = 0; t < CTT; t++)
        f.tokens[k][b * CTT + t] = t <= b % CTT ? 1 + (int32_t)(ampc_rng_next(&r) % 10) : 0;
      f.labels[k][b] = b % CCLASSES;
    }
  }
  ampc_calib cal;
  assert_int_equal(ampc_quant_calibrate(f.M, &P, 2, AMPC_CALIB_MSE, 99.0, calib_run, &f, &cal),
                   AMPC_OK);
  assert_true(cal.n > 0);
  assert_int_equal(cal.batches, 2);
  assert_int_equal(cal.method, AMPC_CALIB_MSE);
  int self_attn = 0, cross = 0;
  for (int i = 0; i < cal.n; i++) {
    const ampc_calib_site *s = &cal.sites[i];
    assert_true(s->amax > 0.0f && s->values > 0);
    assert_true(s->scale[AMPC_CALIB_MAX] == s->amax / 127.0f);
    assert_true(s->clipped[AMPC_CALIB_MAX] == 0.0);
    assert_true(s->clipped[AMPC_CALIB_PERCENTILE] <= 0.01 + 1.0 / (double)s->values);
    assert_true(s->scale[AMPC_CALIB_MSE] <= s->scale[AMPC_CALIB_MAX]);
    assert_true(s->scale[AMPC_CALIB_PERCENTILE] <= s->scale[AMPC_CALIB_MAX]);
    /* an in-projection: q, k, v of a self-attention read the same input */
    if (s->part == 2) {
      const ampc_calib_site *q = ampc_calib_find(&cal, s->name, 0),
                            *k = ampc_calib_find(&cal, s->name, 1);
      assert_non_null(q);
      assert_non_null(k);
      assert_true(k->amax == s->amax && k->values == s->values);
      if (strstr(s->name, "cross_attn")) {
        cross++;
      } else {
        assert_true(q->amax == s->amax && q->values == s->values);
        self_attn++;
      }
    }
  }
  assert_true(self_attn > 0);
  assert_true(cross > 0);
  /* one site against an independent observer over the same batches (the
   * calibration left the model without observers: only this one runs) */
  const ampc_calib_site *s = ampc_calib_find(&cal, "vision.blocks.0.mlp.fc2.weight", 0);
  assert_non_null(s);
  ref_obs ro = {.scale = s->scale[AMPC_CALIB_MAX]};
  assert_int_equal(ampc_mmodel_observe(f.M, "vision.blocks.0.mlp.fc2.weight", 0, ref_observe, &ro),
                   AMPC_OK);
  assert_int_equal(calib_run(&f, 0), AMPC_OK);
  assert_int_equal(calib_run(&f, 1), AMPC_OK);
  assert_int_equal(ampc_mmodel_observe(f.M, "vision.blocks.0.mlp.fc2.weight", 0, NULL, NULL),
                   AMPC_OK);
  assert_true(ro.amax == s->amax);
  assert_true(ro.n == s->values);
  /* the same sums in another order: equal to a few FP64 ulps per term */
  const double want = 10.0 * log10(ro.ss / ro.es);
  assert_true(fabs(s->sqnr_db[AMPC_CALIB_MAX] - want) < 1e-9 * fabs(want));
  ampc_calib_free(&cal);
  /* the 100th percentile is the max */
  assert_int_equal(
      ampc_quant_calibrate(f.M, &P, 2, AMPC_CALIB_PERCENTILE, 100.0, calib_run, &f, &cal), AMPC_OK);
  for (int i = 0; i < cal.n; i++)
    assert_true(cal.sites[i].scale[AMPC_CALIB_PERCENTILE] == cal.sites[i].scale[AMPC_CALIB_MAX]);
  ampc_calib_free(&cal);
  /* bad arguments; a non-finite activation (an image scaled by inf) */
  assert_int_equal(ampc_quant_calibrate(f.M, &P, 0, AMPC_CALIB_MAX, 99.0, calib_run, &f, &cal),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_quant_calibrate(f.M, &P, 2, AMPC_CALIB_MAX, 0.0, calib_run, &f, &cal),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_quant_calibrate(f.M, &P, 2, AMPC_CALIB_MAX, 100.5, calib_run, &f, &cal),
                   AMPC_ERR_INVALID_ARG);
  f.poison = INFINITY;
  assert_int_equal(ampc_quant_calibrate(f.M, &P, 2, AMPC_CALIB_MAX, 99.0, calib_run, &f, &cal),
                   AMPC_ERR_NUMERIC);
  assert_non_null(strstr(ampc_last_error(), "non-finite activations enter"));
  assert_int_equal(cal.n, 0);
  f.poison = 0.0f; /* and the model runs on, observers gone */
  assert_int_equal(calib_run(&f, 1), AMPC_OK);
  ampc_calib_method m;
  assert_int_equal(ampc_calib_method_parse("percentile", &m), 0);
  assert_int_equal(m, AMPC_CALIB_PERCENTILE);
  assert_int_equal(ampc_calib_method_parse("entropy", &m), -1);
  ampc_mmodel_free(f.M);
  ampc_params_free(&P);
  ampc_mmodel_specs_free(&sp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip), cmocka_unit_test(test_refused),
      cmocka_unit_test(test_sqnr),       cmocka_unit_test(test_linear_names),
      cmocka_unit_test(test_linear_s8),  cmocka_unit_test(test_calibrate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
