/*
 * tests/test_fp8_linear.c: fp8-mixed's linear layers (ampc/nn.h, "FP8
 * linear layers"; ampc/model.h, "FP8 sites"): the casts against
 * the exact FP8 conversions (saturation, flush, inf and NaN kept
 * non-finite, amax ignoring NaN, the counters); the forward and backward
 * GEMMs against the double reference of the quantized inputs, within
 * K * 2^-24 * sum |a b| plus the roundings of alpha and the output; the bias
 * gradient from the unquantized dy; f = NULL gives ampc_linear_*'s bits; the
 * sites' end-of-step update takes TE's scales from the recorded amax; the
 * preset and its recipe overrides.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"

static float bf(uint16_t b) {
  const uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* one cast of x with scale s, the exact way: fp32(x * s), then the
 * saturating conversion (finite inputs) */
static float exact_cast(float x, float s, ampc_dtype fmt) {
  const float v = x * s;
  if (fmt == AMPC_F8_E4M3)
    return ampc_e4m3_to_f32(ampc_f32_to_e4m3(v, isfinite(x)));
  return ampc_e5m2_to_f32(ampc_f32_to_e5m2(v, isfinite(x)));
}

static void test_cast(void **state) {
  (void)state;
  const float xs[] = {0.0f,     -0.0f, 1.0f,     -1.0f,     0.3f,   448.0f,  449.0f,
                      1000.0f,  -1e6f, 1e-3f,    1e-9f,     -1e-9f, 3.3e38f, 57344.0f,
                      60000.0f, 1e-5f, INFINITY, -INFINITY, NAN};
  const int n = (int)(sizeof xs / sizeof xs[0]);
  const float scales[] = {1.0f, 0.5f, 16.0f, 1e30f};
  for (int f = 0; f < 2; f++) {
    const ampc_dtype fmt = f ? AMPC_F8_E5M2 : AMPC_F8_E4M3;
    const float fmax = f ? 57344.0f : 448.0f;
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
      ampc_fp8_q q = {.fmt = fmt, .scale = scales[si], .scale_inv = 1.0f / scales[si]};
      uint16_t out[48];
      assert_int_equal(ampc_fp8_cast_bf16(&q, xs, AMPC_F32, 1, n, n, out, true), AMPC_OK);
      uint64_t sat = 0, fl = 0;
      for (int i = 0; i < n; i++) {
        const float got = bf(out[i]);
        if (isnan(xs[i])) {
          assert_true(isnan(got));
        } else if (isinf(xs[i])) { /* kept non-finite: E5M2 inf, E4M3 NaN */
          assert_true(f ? got == xs[i] : isnan(got));
        } else {
          const float want = exact_cast(xs[i], scales[si], fmt);
          assert_true(isfinite(got) && fabsf(got) <= fmax);
          assert_memory_equal(&got, &want, 4); /* bit for bit, the sign of zero too */
          sat += !(fabsf(xs[i] * scales[si]) <= fmax);
          fl += xs[i] != 0.0f && got == 0.0f;
        }
      }
      assert_true(q.amax == INFINITY); /* inf counts, NaN is ignored */
      assert_int_equal(q.values, n);
      assert_int_equal(q.saturated, sat);
      assert_int_equal(q.flushed, fl);
      if (si == 0)
        assert_true(sat >= 3 && fl >= 2);
    }
  }
  /* NaN alone: amax 0; a strided 16-bit source; count = false */
  ampc_fp8_q q = {.fmt = AMPC_F8_E4M3, .scale = 2.0f, .scale_inv = 0.5f};
  const float nan1 = NAN;
  uint16_t o1;
  assert_int_equal(ampc_fp8_cast_bf16(&q, &nan1, AMPC_F32, 1, 1, 1, &o1, false), AMPC_OK);
  assert_true(q.amax == 0.0f && q.values == 0);
  const uint16_t src[2][3] = {{0x3F80, 0x4000, 0x7777}, {0xBF00, 0x3E00, 0x7777}}; /* bf16 */
  uint16_t o[4];
  assert_int_equal(ampc_fp8_cast_bf16(&q, src, AMPC_BF16, 2, 2, 3, o, true), AMPC_OK);
  assert_true(bf(o[0]) == 2.0f && bf(o[1]) == 4.0f && bf(o[2]) == -1.0f && bf(o[3]) == 0.25f);
  assert_true(q.amax == 2.0f && q.values == 4);
  /* errors */
  assert_int_equal(ampc_fp8_cast_bf16(&q, src, AMPC_BF16, 2, 3, 2, o, true), AMPC_ERR_INVALID_ARG);
  q.fmt = AMPC_BF16;
  assert_int_equal(ampc_fp8_cast_bf16(&q, src, AMPC_BF16, 1, 1, 1, o, true), AMPC_ERR_INVALID_ARG);
}

/* the vector cast against the exact conversion on a sweep of FP32 bit
 * patterns (every exponent, 2^20 patterns in all, both signs, specials) */
static void test_cast_sweep(void **state) {
  (void)state;
  enum { N = 1 << 20 };
  float *x = malloc(N * sizeof *x);
  uint16_t *o = malloc(N * sizeof *o);
  assert_non_null(x);
  assert_non_null(o);
  for (uint32_t i = 0; i < N; i++) {
    const uint32_t b = i * 4099u; /* odd step: covers 2^32 / 4099 ~ every 4099th pattern */
    memcpy(&x[i], &b, 4);
  }
  for (int f = 0; f < 2; f++) {
    const ampc_dtype fmt = f ? AMPC_F8_E5M2 : AMPC_F8_E4M3;
    const float scales[] = {1.0f, 0.75f};
    for (int si = 0; si < 2; si++) {
      ampc_fp8_q q = {.fmt = fmt, .scale = scales[si], .scale_inv = 1.0f / scales[si]};
      assert_int_equal(ampc_fp8_cast_bf16(&q, x, AMPC_F32, 1, N, N, o, true), AMPC_OK);
      uint64_t sat = 0, fl = 0;
      for (uint32_t i = 0; i < N; i++) {
        const float got = bf(o[i]);
        if (!isfinite(x[i])) {
          assert_true(isnan(x[i]) || f == 0 ? isnan(got) : got == x[i]);
          continue;
        }
        const float want = exact_cast(x[i], scales[si], fmt);
        if (memcmp(&got, &want, 4) != 0)
          fail_msg("%s: x = %a (0x%08x) scale %g: got %a, want %a", f ? "e5m2" : "e4m3",
                   (double)x[i], i * 4099u, (double)scales[si], (double)got, (double)want);
        sat += !(fabsf(x[i] * scales[si]) <= (f ? 57344.0f : 448.0f));
        fl += x[i] != 0.0f && got == 0.0f;
      }
      assert_int_equal(q.saturated, sat);
      assert_int_equal(q.flushed, fl);
    }
  }
  free(x);
  free(o);
}

/* deterministic values of a wide range */
static float val(uint64_t *s, float amp) {
  *s = *s * 6364136223846793005u + 1442695040888963407u;
  const double u = (double)(*s >> 11) / 9007199254740992.0;
  return (float)((2.0 * u - 1.0) * (double)amp);
}

/* dequantized reference of C = alpha * sum_p a_p b_p over the quantized
 * operands (as dense BF16 arrays): out, and sum |a b| in *abs */
static double dot(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, int64_t k,
                  double *abs) {
  double s = 0, t = 0;
  for (int64_t p = 0; p < k; p++) {
    const double x = (double)bf(a[p * sa]) * (double)bf(b[p * sb]);
    s += x, t += fabs(x);
  }
  *abs = t;
  return s;
}

static void test_linear_fp8_vs_reference(void **state) {
  (void)state;
  enum { M = 37, K = 53, N = 29 };
  uint64_t seed = 7;
  float x[M * K], w[N * K], bias[N], dy[M * N];
  for (int i = 0; i < M * K; i++)
    x[i] = val(&seed, 3.0f);
  for (int i = 0; i < N * K; i++)
    w[i] = val(&seed, 0.2f);
  for (int i = 0; i < N; i++)
    bias[i] = val(&seed, 1.0f);
  for (int i = 0; i < M * N; i++)
    dy[i] = val(&seed, 1e-4f);
  x[5] = 900.0f; /* saturates at scale 1 */
  ampc_linear_fp8 f;
  ampc_linear_fp8_init(&f, NULL);
  assert_true(f.x.fmt == AMPC_F8_E4M3 && f.w.fmt == AMPC_F8_E4M3 && f.dy.fmt == AMPC_F8_E5M2);
  f.x.scale = 64.0f, f.x.scale_inv = 1.0f / 64.0f;
  f.w.scale = 1000.0f, f.w.scale_inv = 1.0f / 1000.0f; /* not a power of two */
  f.dy.scale = 3e8f, f.dy.scale_inv = 1.0f / 3e8f;
  /* the quantized operands, by the cast itself (tested above) */
  ampc_fp8_q qx = f.x, qw = f.w, qd = f.dy;
  uint16_t xq[M * K], wq[N * K], dq[M * N];
  assert_int_equal(ampc_fp8_cast_bf16(&qx, x, AMPC_F32, M, K, K, xq, false), AMPC_OK);
  assert_int_equal(ampc_fp8_cast_bf16(&qw, w, AMPC_F32, N, K, K, wq, false), AMPC_OK);
  assert_int_equal(ampc_fp8_cast_bf16(&qd, dy, AMPC_F32, M, N, N, dq, false), AMPC_OK);
  /* forward, FP32 output */
  float y[M * N];
  assert_int_equal(ampc_linear_forward_fp8(M, K, N, x, AMPC_F32, w, AMPC_F32, bias, y, AMPC_F32,
                                           AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  const float alpha = f.x.scale_inv * f.w.scale_inv; /* one FP32 product, as the layer */
  const double u = ldexp(1.0, -24);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ab;
      const double s = dot(xq + i * K, 1, wq + j * K, 1, K, &ab);
      const double ref = (double)alpha * s + (double)bias[j];
      /* the FP32 sum (K u sum|ab|), alpha * sum rounded, + bias rounded */
      const double tol = (double)alpha * (K + 1) * u * ab + 2 * u * (fabs(ref) + fabs(bias[j]));
      const double e = fabs((double)y[i * N + j] - ref);
      assert_true(e <= tol);
      worst = fmax(worst, tol > 0 ? e / tol : 0);
    }
  print_message("forward: worst error / bound %.3f\n", worst);
  assert_true(f.x.amax == 900.0f && f.x.values == M * K && f.x.saturated >= 1);
  assert_true(f.w.values == N * K);
  /* backward: dx (F32), dW += (from zero), db += from the unquantized dy */
  float dx[M * K], dW[N * K], db[N];
  memset(dW, 0, sizeof dW);
  memset(db, 0, sizeof db);
  assert_int_equal(ampc_linear_backward_fp8(M, K, N, dy, AMPC_F32, x, AMPC_F32, w, AMPC_F32, dx, dW,
                                            db, AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  const float adx = f.dy.scale_inv * f.w.scale_inv, adw = f.dy.scale_inv * f.x.scale_inv;
  for (int i = 0; i < M; i++)
    for (int p = 0; p < K; p++) {
      double ab;
      const double ref = (double)adx * dot(dq + i * N, 1, wq + p, K, N, &ab);
      assert_true(fabs((double)dx[i * K + p] - ref) <=
                  (double)adx * (N + 1) * u * ab + u * fabs(ref));
    }
  for (int j = 0; j < N; j++)
    for (int p = 0; p < K; p++) {
      double ab;
      const double ref = (double)adw * dot(dq + j, N, xq + p, K, M, &ab);
      /* + the beta = 1 add to the zero dW */
      assert_true(fabs((double)dW[j * K + p] - ref) <=
                  (double)adw * (M + 1) * u * ab + 2 * u * fabs(ref));
    }
  /* db: exactly what the plain layer gives (FP32 sums of dy in row order) */
  float dx0[M * K], dW0[N * K], db0[N];
  memset(dW0, 0, sizeof dW0);
  memset(db0, 0, sizeof db0);
  assert_int_equal(ampc_linear_backward(M, K, N, dy, AMPC_F32, x, AMPC_F32, w, AMPC_F32, dx0, dW0,
                                        db0, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  assert_memory_equal(db, db0, sizeof db);
  assert_true(f.dy.values == M * N && f.x.values == M * K); /* the backward re-casts uncounted */
  /* the input-gradient product alone, with beta */
  float c[M * K];
  memcpy(c, dx, sizeof c);
  assert_int_equal(ampc_linear_dgrad_fp8(M, K, N, dy, AMPC_F32, w, AMPC_F32, 1.0f, c, AMPC_F32,
                                         AMPC_ACC_F32, &f, false),
                   AMPC_OK);
  for (int i = 0; i < M * K; i++)
    assert_true(fabsf(c[i] - 2.0f * dx[i]) <= 2.0f * (float)u * fabsf(2.0f * dx[i]) + 1e-30f);
  /* f = NULL: the plain layers' bits */
  float y1[M * N], y0[M * N];
  assert_int_equal(ampc_linear_forward_fp8(M, K, N, x, AMPC_F32, w, AMPC_F32, bias, y1, AMPC_F32,
                                           AMPC_ACC_F32, NULL, NULL),
                   AMPC_OK);
  assert_int_equal(ampc_linear_forward(M, K, N, x, AMPC_F32, w, AMPC_F32, bias, y0, AMPC_F32,
                                       AMPC_ACC_F32, NULL),
                   AMPC_OK);
  assert_memory_equal(y1, y0, sizeof y0);
  /* a non-finite input stays non-finite through the layer */
  x[0] = INFINITY;
  assert_int_equal(ampc_linear_forward_fp8(M, K, N, x, AMPC_F32, w, AMPC_F32, bias, y, AMPC_F32,
                                           AMPC_ACC_F32, &f, NULL),
                   AMPC_OK);
  assert_true(!isfinite(y[0]));
}

static void test_sites_update_and_preset(void **state) {
  (void)state;
  ampc_amp_config a;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_FP8_MIXED, &a), AMPC_OK);
  assert_string_equal(ampc_precision_name(AMPC_PRECISION_FP8_MIXED), "fp8-mixed");
  ampc_precision p;
  assert_int_equal(ampc_precision_parse("fp8-mixed", &p), AMPC_OK);
  assert_true(p == AMPC_PRECISION_FP8_MIXED && ampc_precision_is_fp8(p));
  /* bf16-mixed's settings: BF16 weights and activations, FP32 master and state, no scaling */
  assert_true(a.lowp == AMPC_BF16 && a.master_weights && a.state_dtype == AMPC_F32);
  assert_true(a.scaler.mode == AMPC_LOSS_SCALE_NONE && a.accumulate == AMPC_ACC_F32);
  assert_true(a.fp8_amax_history == 1024 && a.fp8_amax_algo == AMPC_AMAX_MAX && a.fp8_margin == 0);
  assert_int_equal(ampc_amp_config_set(&a, "fp8-amax-history", "4"), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&a, "fp8-amax-compute", "most_recent"), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&a, "fp8-margin", "1"), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&a, "fp8-amax-history", "0"), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_amp_config_set(&a, "fp8-amax-history", "2000000"), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_amp_config_set(&a, "fp8-amax-compute", "mean"), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_amp_config_set(&a, "fp8-margin", "-1"), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_amp_config_check(&a), AMPC_OK);
  ampc_fp8_sites S;
  assert_int_equal(ampc_fp8_sites_init(&S, 2, &a, 0), AMPC_OK);
  ampc_fp8_sites_name(&S, 1, AMPC_BRANCH_TEXT, "text.blocks.0.fc1");
  assert_string_equal(S.name[1], "text.blocks.0.fc1");
  /* step 1: amax 2 (x), 0.5 (w), 0 (dy: the scale is kept) */
  S.lin[1].x.amax = 2.0f, S.lin[1].w.amax = 0.5f, S.lin[1].dy.amax = 0.0f;
  S.lin[1].x.values = 10, S.lin[1].x.saturated = 3, S.lin[1].dy.flushed = 2;
  assert_int_equal(ampc_fp8_sites_update(&S), AMPC_OK);
  /* most_recent, margin 1: 448 / 2 / 2 */
  assert_true(S.lin[1].x.scale == 448.0f * 0.5f / 2.0f);
  assert_true(S.lin[1].x.scale_inv == 1.0f / S.lin[1].x.scale);
  assert_true(S.lin[1].w.scale == 448.0f * 0.5f / 0.5f);
  assert_true(S.lin[1].dy.scale == 1.0f && S.lin[1].x.amax == 0.0f);
  assert_true(S.lin[0].x.scale == 1.0f); /* never saw a value */
  uint64_t v[AMPC_BRANCH_COUNT], s[AMPC_BRANCH_COUNT], fl[AMPC_BRANCH_COUNT];
  ampc_fp8_sites_take_counts(&S, v, s, fl);
  assert_true(v[AMPC_BRANCH_TEXT] == 10 && s[AMPC_BRANCH_TEXT] == 3 && fl[AMPC_BRANCH_TEXT] == 2);
  ampc_fp8_sites_take_counts(&S, v, s, fl);
  assert_true(v[AMPC_BRANCH_TEXT] == 0);
  ampc_fp8_sites_free(&S);
  /* the memory account: fp8-mixed holds bf16-mixed's parameter roles */
  ampc_mem_account m8, m16;
  ampc_amp_config b;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_BF16_MIXED, &b), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(1000, &a, 2, &m8), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(1000, &b, 2, &m16), AMPC_OK);
  assert_true(m8.bytes_per_param == 16.0 && m8.total == m16.total);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cast),
      cmocka_unit_test(test_cast_sweep),
      cmocka_unit_test(test_linear_fp8_vs_reference),
      cmocka_unit_test(test_sites_update_and_preset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
