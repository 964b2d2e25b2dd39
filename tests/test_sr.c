/*
 * tests/test_sr.c: stochastic rounding of BF16 weight updates (pure BF16
 * training that does not swallow small updates): the rounding primitive
 * (representable values unchanged, NaN/inf kept, negative values symmetric,
 * 1.001 rounds up in 12.8 % of 10^5 trials, the mean within 3 sigma of
 * 1.001), the counter-based bits (deterministic per seed), and the optimizer:
 * w = 1 plus 100 updates of 1e-3 stays 1 with nearest rounding and ends near
 * 1.1 with stochastic rounding (mean over trials), identically for any
 * thread count; the configuration's rules. Kahan-compensated updates: the
 * same w ends near 1.1 in bfloat16 (and 1 + 100 x 1e-4 near 1.01 in
 * binary16), with the error bound of the compensation's roundings, and a
 * weight decay below half an ulp is kept; the memory account counts the
 * compensation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "ampc/ampc.h"

static float bf(uint16_t b) {
  const uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static void test_representable_and_specials(void **state) {
  (void)state;
  /* every finite bfloat16 value comes back unchanged for any random bits */
  for (uint32_t b = 0; b < 65536; b++) {
    const float x = bf((uint16_t)b);
    if (!isfinite(x))
      continue;
    for (uint32_t r = 0; r < 65536; r += 4099)
      assert_int_equal(ampc_bf16_round_stochastic(x, r), b);
    assert_int_equal(ampc_bf16_round_stochastic(x, 0xFFFF), b);
  }
  assert_int_equal(ampc_bf16_round_stochastic(INFINITY, 0xFFFF), 0x7F80);
  assert_int_equal(ampc_bf16_round_stochastic(-INFINITY, 0xFFFF), 0xFF80);
  assert_true(isnan(bf(ampc_bf16_round_stochastic(NAN, 0x1234))));
  /* symmetric: -x rounds to -(the rounding of x) with the same bits */
  for (uint32_t r = 0; r < 65536; r += 257) {
    const float x = 1.001f + (float)r * 1e-7f;
    assert_int_equal(ampc_bf16_round_stochastic(-x, r), ampc_bf16_round_stochastic(x, r) | 0x8000u);
  }
  /* the two neighbours only: 1.001 lies between 1 and 1 + 2^-7 */
  for (uint32_t r = 0; r < 65536; r++) {
    const uint16_t q = ampc_bf16_round_stochastic(1.001f, r);
    assert_true(q == 0x3F80 || q == 0x3F81);
  }
}

/* 1.001 = 1 + 0.128 * 2^-7: up with probability p = 0.128 (exactly the lost
 * bits / 2^16 of the FP32 value 1.001f) */
static void test_unbiased(void **state) {
  (void)state;
  const float x = 1.001f;
  uint32_t xb;
  memcpy(&xb, &x, 4);
  const double p = (double)(xb & 0xFFFF) / 65536.0;
  assert_true(fabs(p - 0.128) < 1e-3);
  enum { N = 100000 };
  int up = 0;
  double sum = 0;
  for (int i = 0; i < N; i++) {
    const uint16_t q = ampc_bf16_round_stochastic(x, ampc_sr_bits(42, 1, i));
    up += q == 0x3F81;
    sum += (double)bf(q);
  }
  const double sigma = sqrt(N * p * (1 - p)); /* about 106 */
  print_message("1.001: up %d of %d (expected %.0f +- %.0f)\n", up, N, N * p, sigma);
  assert_true(fabs(up - N * p) <= 3 * sigma);
  const double mean = sum / N, sd_mean = 0x1p-7 * sqrt(p * (1 - p) / N);
  assert_true(fabs(mean - (double)x) <= 3 * sd_mean);
}

static void test_bits_deterministic(void **state) {
  (void)state;
  assert_int_equal(ampc_sr_bits(1, 2, 3), ampc_sr_bits(1, 2, 3));
  int differ_seed = 0, differ_step = 0, differ_index = 0;
  for (int i = 0; i < 1000; i++) {
    differ_seed += ampc_sr_bits(1, 5, i) != ampc_sr_bits(2, 5, i);
    differ_step += ampc_sr_bits(1, 5, i) != ampc_sr_bits(1, 6, i);
    differ_index += ampc_sr_bits(1, 5, i) != ampc_sr_bits(1, 5, i + 1000);
    assert_true(ampc_sr_bits(7, 9, i) < 65536);
  }
  /* 16-bit values: two independent draws agree 1 time in 65536 */
  assert_true(differ_seed >= 990 && differ_step >= 990 && differ_index >= 990);
}

/* SGD (no momentum) on BF16 weights without a master: each step adds lr * 1
 * (the gradient is -1). lr = 1e-3 is below half a bfloat16 step at 1
 * (2^-8): nearest rounding swallows every update; stochastic rounding ends,
 * on average over the elements (each its own trial), near 1.1. */
static void run_updates(bool sr, int threads, uint64_t seed, float *mean, uint16_t *first) {
  enum { N = 70000 }; /* > 65536: the optimizer's parallel path */
  const ampc_param_spec spec = {.name = "w", .ndim = 1, .shape = {N}, .init = AMPC_INIT_ONES};
  ampc_params P;
  ampc_rng rng;
  ampc_rng_seed(&rng, 1);
  assert_int_equal(ampc_params_create(&P, &spec, 1, AMPC_BF16, false, AMPC_BF16, 0, &rng), AMPC_OK);
  ampc_optim_config c = ampc_optim_sgd_defaults();
  c.lr = 1e-3f, c.momentum = 0.0f;
  c.stochastic_round = sr, c.round_seed = seed;
  ampc_set_num_threads(threads);
  uint16_t *g = P.grad, *w = P.w;
  for (int64_t i = 0; i < N; i++)
    g[i] = 0xBF80; /* -1 */
  for (int t = 1; t <= 100; t++)
    assert_int_equal(ampc_optim_step(&P, &c, t, c.lr, 1.0f, 1.0f, NULL), AMPC_OK);
  double s = 0;
  for (int64_t i = 0; i < N; i++)
    s += (double)bf(w[i]);
  *mean = (float)(s / N);
  memcpy(first, w, 64 * sizeof *first);
  ampc_set_num_threads(0);
  ampc_params_free(&P);
}

static void test_optimizer(void **state) {
  (void)state;
  float m_near, m_sr, m_sr2, m_sr1, m_other;
  uint16_t a[64], b[64], c1[64], d[64], e[64];
  run_updates(false, 2, 5, &m_near, a);
  assert_true(m_near == 1.0f); /* every update swallowed */
  run_updates(true, 2, 5, &m_sr, b);
  print_message("w = 1 + 100 x 1e-3: nearest %.6f, stochastic %.6f (mean of 70000)\n",
                (double)m_near, (double)m_sr);
  /* the exact sum is 1.1 (in FP32 steps 1e-3f); per element the SR error
   * has a standard deviation below 2^-7 * sqrt(100) / 2 = 0.039, so the mean
   * of 70000 elements is within 3 * 0.039 / sqrt(70000) = 4.5e-4 */
  assert_true(fabsf(m_sr - 1.1f) < 5e-4f);
  /* the same bits for any thread count, and per seed */
  run_updates(true, 1, 5, &m_sr1, c1);
  run_updates(true, 2, 5, &m_sr2, d);
  assert_true(m_sr1 == m_sr && m_sr2 == m_sr);
  assert_memory_equal(b, c1, sizeof b);
  assert_memory_equal(b, d, sizeof b);
  run_updates(true, 2, 6, &m_other, e);
  assert_true(memcmp(b, e, sizeof b) != 0);
  (void)a;
}

/* SGD without momentum, gradient -1: n steps of lr on 16-bit weights w = 1
 * with Kahan updates (or nearest). Returns w and w + c of element 0 in
 * double; every element must be the same (the update is deterministic). */
static void kahan_run(ampc_dtype dt, bool kahan, float lr, int n, double *w_out, double *sum_out) {
  enum { N = 1000 };
  const ampc_param_spec spec = {.name = "w", .ndim = 1, .shape = {N}, .init = AMPC_INIT_ONES};
  ampc_params P;
  ampc_rng rng;
  ampc_rng_seed(&rng, 1);
  assert_int_equal(ampc_params_create(&P, &spec, 1, dt, false, dt, 0, &rng), AMPC_OK);
  ampc_optim_config c = ampc_optim_sgd_defaults();
  c.lr = lr, c.momentum = 0.0f, c.kahan = kahan;
  if (kahan) {
    assert_int_equal(ampc_optim_step(&P, &c, 1, lr, 1.0f, 1.0f, NULL), AMPC_ERR_INVALID_ARG);
    assert_int_equal(ampc_params_add_compensation(&P), AMPC_OK);
    assert_int_equal(P.bytes[AMPC_ROLE_COMPENSATION], P.bytes[AMPC_ROLE_WEIGHTS]);
  }
  uint16_t *g = P.grad, *w = P.w, *cp = P.comp;
  const uint16_t minus_one = dt == AMPC_BF16 ? 0xBF80 : 0xBC00;
  for (int64_t i = 0; i < N; i++)
    g[i] = minus_one;
  for (int t = 1; t <= n; t++)
    assert_int_equal(ampc_optim_step(&P, &c, t, lr, 1.0f, 1.0f, NULL), AMPC_OK);
  for (int64_t i = 1; i < N; i++) {
    assert_int_equal(w[i], w[0]);
    if (cp)
      assert_int_equal(cp[i], cp[0]);
  }
  float wf, cf = 0.0f;
  ampc_convert(&wf, AMPC_F32, w, dt, 1);
  if (cp)
    ampc_convert(&cf, AMPC_F32, cp, dt, 1);
  *w_out = wf;
  *sum_out = (double)wf + (double)cf;
  ampc_params_free(&P);
}

static void test_kahan(void **state) {
  (void)state;
  double w, s;
  kahan_run(AMPC_BF16, false, 1e-3f, 100, &w, &s);
  assert_true(w == 1.0); /* nearest: every update swallowed */
  kahan_run(AMPC_BF16, true, 1e-3f, 100, &w, &s);
  print_message("bf16 w = 1 + 100 x 1e-3 with Kahan: w %.7f, w + c %.7f\n", w, s);
  /* the target: 1 + 100 u with u = 1e-3f, the FP32 update. Each step rounds
   * y = u + c in FP32 (|y| < 2^-7: error < 2^-31) and the new compensation
   * to bfloat16 (|c| <= half an ulp of w in [1, 2) = 2^-8, so error <=
   * 2^-8 * 2^-9 = 2^-17); w + c drifts from the target by at most
   * 100 (2^-17 + 2^-31), and w is within 2^-8 of w + c */
  const double target = 1.0 + 100.0 * (double)1e-3f;
  const double drift = 100.0 * (ldexp(1, -17) + ldexp(1, -31));
  assert_true(fabs(s - target) <= drift);
  assert_true(fabs(w - target) <= ldexp(1, -8) + drift);
  /* binary16: 1e-4 is below half an ulp at 1 (2^-11); ulp 2^-10, so the
   * compensation's error is <= 2^-11 * 2^-11 = 2^-22 per step */
  kahan_run(AMPC_F16, false, 1e-4f, 100, &w, &s);
  assert_true(w == 1.0);
  kahan_run(AMPC_F16, true, 1e-4f, 100, &w, &s);
  print_message("f16 w = 1 + 100 x 1e-4 with Kahan: w %.7f, w + c %.7f\n", w, s);
  const double t16 = 1.0 + 100.0 * (double)1e-4f, d16 = 100.0 * (ldexp(1, -22) + ldexp(1, -31));
  assert_true(fabs(s - t16) <= d16);
  assert_true(fabs(w - t16) <= ldexp(1, -11) + d16);
}

/* AdamW's decoupled decay alone (zero gradient: Adam's step is 0/eps = 0):
 * lr * wd = 1e-5 per step is far below half a bfloat16 ulp at 1, so nearest
 * never moves w = 1; with Kahan, w + c follows (1 - 1e-5)^t. Bound: per step
 * the change -lr_wd * w is one FP32 product and the compensation one
 * bfloat16 rounding of a value <= 2^-9 (half an ulp in [0.5, 1)), 2^-18. */
static void test_kahan_decay(void **state) {
  (void)state;
  enum { N = 64, T = 2000 };
  const ampc_param_spec spec = {.name = "w", .ndim = 1, .shape = {N}, .init = AMPC_INIT_ONES};
  for (int kahan = 0; kahan < 2; kahan++) {
    ampc_params P;
    ampc_rng rng;
    ampc_rng_seed(&rng, 1);
    assert_int_equal(ampc_params_create(&P, &spec, 1, AMPC_BF16, false, AMPC_F32, 2, &rng),
                     AMPC_OK);
    if (kahan)
      assert_int_equal(ampc_params_add_compensation(&P), AMPC_OK);
    ampc_optim_config c = ampc_optim_adamw_defaults();
    c.weight_decay = 1e-2f, c.kahan = kahan;
    for (int t = 1; t <= T; t++)
      assert_int_equal(ampc_optim_step(&P, &c, t, c.lr, 1.0f, 1.0f, NULL), AMPC_OK);
    float w, cc = 0.0f;
    ampc_convert(&w, AMPC_F32, P.w, AMPC_BF16, 1);
    if (kahan)
      ampc_convert(&cc, AMPC_F32, P.comp, AMPC_BF16, 1);
    const double target = pow(1.0 - 1e-5, T); /* 0.98020 */
    if (!kahan) {
      assert_true(w == 1.0f);
    } else {
      print_message("AdamW decay 1e-5 x %d with Kahan: w %.6f, w + c %.6f, exact %.6f\n", T,
                    (double)w, (double)w + (double)cc, target);
      assert_true(fabs((double)w + (double)cc - target) <= T * ldexp(1, -18) + 1e-6);
      assert_true(w < 0.99f);
    }
    ampc_params_free(&P);
  }
}

static void test_kahan_config_and_memory(void **state) {
  (void)state;
  ampc_amp_config c;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_BF16_TRUE, &c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "kahan"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_OK);
  assert_string_equal(ampc_weight_update_name(c.weight_update), "kahan");
  /* bf16-true with AdamW (BF16 moments): 2 + 2 + 2 * 2 = 8 bytes per
   * parameter, plus 2 of compensation; bf16-mixed holds 2 + 4 + 2 + 8 = 16 */
  ampc_mem_account m;
  assert_int_equal(ampc_mem_account_params(1000, &c, 2, &m), AMPC_OK);
  assert_int_equal(m.bytes[AMPC_MEM_COMPENSATION], 2000);
  assert_true(m.bytes_per_param == 10.0);
  assert_string_equal(ampc_mem_role_name(AMPC_MEM_COMPENSATION), "compensation");
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "nearest"), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(1000, &c, 2, &m), AMPC_OK);
  assert_int_equal(m.bytes[AMPC_MEM_COMPENSATION], 0);
  assert_true(m.bytes_per_param == 8.0);
  /* 16-true: allowed; with a master or FP32 weights: refused */
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_16_TRUE, &c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "kahan"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_OK);
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "kahan"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "kahan"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_ERR_INVALID_ARG);
  /* no compensation for FP32 weights or with a master */
  const ampc_param_spec spec = {.name = "w", .ndim = 1, .shape = {8}, .init = AMPC_INIT_ONES};
  ampc_params P;
  ampc_rng rng;
  ampc_rng_seed(&rng, 1);
  assert_int_equal(ampc_params_create(&P, &spec, 1, AMPC_BF16, true, AMPC_F32, 2, &rng), AMPC_OK);
  assert_int_equal(ampc_params_add_compensation(&P), AMPC_ERR_INVALID_ARG);
  ampc_params_free(&P);
}

static void test_config(void **state) {
  (void)state;
  ampc_amp_config c;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_BF16_TRUE, &c), AMPC_OK);
  assert_int_equal(c.weight_update, AMPC_UPDATE_NEAREST);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "stochastic"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "kahn"), AMPC_ERR_INVALID_ARG);
  /* with an FP32 master, or FP16/FP32 weights: refused */
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_BF16_MIXED, &c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "stochastic"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_amp_config_set(&c, "master-weights", "off"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_OK);
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_16_TRUE, &c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "stochastic"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "stochastic"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_representable_and_specials),
      cmocka_unit_test(test_unbiased),
      cmocka_unit_test(test_bits_deterministic),
      cmocka_unit_test(test_optimizer),
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_kahan),
      cmocka_unit_test(test_kahan_decay),
      cmocka_unit_test(test_kahan_config_and_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
