/*
 * tests/test_sr.c: stochastic rounding of BF16 weight updates (issue 19,
 * "pure BF16 that does not swallow its updates"): the rounding primitive
 * (representable values unchanged, NaN/inf kept, negative values symmetric,
 * 1.001 rounds up in 12.8 % of 10^5 trials, the mean within 3 sigma of
 * 1.001), the counter-based bits (deterministic per seed), and the optimizer:
 * w = 1 plus 100 updates of 1e-3 stays 1 with nearest rounding and ends near
 * 1.1 with stochastic rounding (mean over trials), identically for any
 * thread count; the configuration's rules.
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

static void test_config(void **state) {
  (void)state;
  ampc_amp_config c;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_BF16_TRUE, &c), AMPC_OK);
  assert_int_equal(c.weight_update, AMPC_UPDATE_NEAREST);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "stochastic"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&c), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&c, "weight-update", "kahan?"), AMPC_ERR_INVALID_ARG);
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
