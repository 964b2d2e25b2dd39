/*
 * tests/test_scaler.c: the loss scaler (GradScaler semantics, hysteresis,
 * floor, ceiling), unscale + non-finite check + clipping, the LR schedule, the
 * presets and overrides, and the configuration lint. The expected values come
 * from PyTorch's and DeepSpeed's own tests and from the arithmetic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "ampc/ampc.h"

static ampc_scaler_config dyn(float init, float growth, float backoff, int interval) {
  ampc_amp_config c;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &c), AMPC_OK);
  c.scaler.init_scale = init;
  c.scaler.growth_factor = growth;
  c.scaler.backoff_factor = backoff;
  c.scaler.growth_interval = interval;
  c.scaler.min_scale = 1e-30f;
  return c.scaler;
}

/* torch test_grad_scaling_update_scale: growth 2, backoff 0.25, interval 2 */
static void test_gradscaler_update_values(void **state) {
  (void)state;
  ampc_scaler_config c = dyn(4.0f, 2.0f, 0.25f, 2);
  ampc_scaler s;
  ampc_scaler_init(&s, &c);
  assert_false(ampc_scaler_update(&s, false));
  assert_int_equal(s.growth_tracker, 1);
  assert_true(s.scale == 4.0f);
  assert_false(ampc_scaler_update(&s, false));
  assert_int_equal(s.growth_tracker, 0);
  assert_true(s.scale == 8.0f);
  assert_true(ampc_scaler_update(&s, true));
  assert_int_equal(s.growth_tracker, 0);
  assert_true(s.scale == 2.0f);
  assert_int_equal(s.skip_count, 1);
  assert_int_equal(s.overflow_count, 1);
}

/* growth only to a finite value */
static void test_growth_stays_finite(void **state) {
  (void)state;
  ampc_scaler_config c = dyn(1e38f, 16.0f, 0.5f, 1);
  ampc_scaler s;
  ampc_scaler_init(&s, &c);
  assert_false(ampc_scaler_update(&s, false));
  assert_true(s.scale == 1e38f);
  assert_int_equal(s.growth_tracker, 0);
  /* a ceiling caps growth */
  c = dyn(4.0f, 2.0f, 0.5f, 1);
  c.max_scale = 6.0f;
  ampc_scaler_init(&s, &c);
  ampc_scaler_update(&s, false);
  assert_true(s.scale == 6.0f);
  ampc_scaler_update(&s, false);
  assert_true(s.scale == 6.0f);
}

/* init 128, interval 1, overflow at step 2 of 4: scales 128, 256, 128, 256, final 512 */
static void test_scale_sequence(void **state) {
  (void)state;
  ampc_scaler_config c = dyn(128.0f, 2.0f, 0.5f, 1);
  ampc_scaler s;
  ampc_scaler_init(&s, &c);
  const float want[4] = {128, 256, 128, 256};
  for (int it = 0; it < 4; it++) {
    assert_true(s.scale == want[it]);
    const bool skipped = ampc_scaler_update(&s, it == 1);
    assert_int_equal(skipped, it == 1);
  }
  assert_true(s.scale == 512.0f); /* 128 * 2^3 * 0.5 */
}

static void test_hysteresis_floor_static_none(void **state) {
  (void)state;
  ampc_scaler_config c = dyn(1024.0f, 2.0f, 0.5f, 100);
  c.hysteresis = 2;
  ampc_scaler s;
  ampc_scaler_init(&s, &c);
  assert_true(ampc_scaler_update(&s, true)); /* first overflow: skipped, scale kept */
  assert_true(s.scale == 1024.0f);
  assert_true(ampc_scaler_update(&s, true)); /* second consecutive: halved */
  assert_true(s.scale == 512.0f);
  assert_true(ampc_scaler_update(&s, true)); /* still consecutive: halved again */
  assert_true(s.scale == 256.0f);
  assert_false(ampc_scaler_update(&s, false)); /* a clean step restores the credit */
  assert_true(ampc_scaler_update(&s, true));
  assert_true(s.scale == 256.0f);
  /* floor: never below min_scale, never 0, 1/S finite */
  c = dyn(8.0f, 2.0f, 0.5f, 100);
  c.min_scale = 1.0f;
  ampc_scaler_init(&s, &c);
  for (int i = 0; i < 200; i++)
    assert_true(ampc_scaler_update(&s, true));
  assert_true(s.scale == 1.0f);
  assert_true(ampc_scaler_inv_scale(&s) == 1.0f);
  /* static: skip on overflow, scale fixed */
  c.mode = AMPC_LOSS_SCALE_STATIC;
  c.init_scale = 1024.0f;
  ampc_scaler_init(&s, &c);
  assert_true(ampc_scaler_update(&s, true));
  assert_false(ampc_scaler_update(&s, false));
  assert_true(s.scale == 1024.0f);
  assert_int_equal(s.skip_count, 1);
  /* none: S = 1 and nothing is skipped (a plain PyTorch loop) */
  c.mode = AMPC_LOSS_SCALE_NONE;
  ampc_scaler_init(&s, &c);
  assert_true(s.scale == 1.0f);
  assert_false(ampc_scaler_update(&s, true));
  assert_int_equal(s.overflow_count, 1);
  assert_int_equal(s.skip_count, 0);
}

static void test_inv_scale_double_then_float(void **state) {
  (void)state;
  ampc_scaler_config c = dyn(3.0f, 2.0f, 0.5f, 1);
  ampc_scaler s;
  ampc_scaler_init(&s, &c);
  assert_true(ampc_scaler_inv_scale(&s) == (float)(1.0 / 3.0));
}

/* a gradient of 2^-26 stored scaled by 2^16 in binary16 (2^-10) unscales to
 * 2^-26 in FP32; in binary16 it would have been 0 */
static void test_unscale_small_gradient(void **state) {
  (void)state;
  ampc_f16 g[3];
  float src[3] = {0x1p-10f, -0x1p-10f, 0.0f};
  assert_int_equal(ampc_convert(g, AMPC_F16, src, AMPC_F32, 3), AMPC_OK);
  int64_t bad = -1;
  double norm = -1;
  assert_int_equal(ampc_grad_unscale_check(g, AMPC_F16, 3, 0x1p-16f, &bad, &norm, NULL), AMPC_OK);
  assert_int_equal(bad, 0);
  assert_true(norm == sqrt(2.0) * 0x1p-26);
  float back = 1.0f;
  ampc_f16 h;
  float v = 0x1p-26f;
  ampc_convert(&h, AMPC_F16, &v, AMPC_F32, 1);
  ampc_convert(&back, AMPC_F32, &h, AMPC_F16, 1);
  assert_true(back == 0.0f); /* what an unscaled FP16 gradient would hold */
  /* non-finite values are counted wherever they are, and left out of the norm */
  float f[5] = {3.0f, INFINITY, 4.0f, NAN, -INFINITY};
  assert_int_equal(ampc_grad_unscale_check(f, AMPC_F32, 5, 1.0f, &bad, &norm, NULL), AMPC_OK);
  assert_int_equal(bad, 3);
  assert_true(norm == 5.0);
  /* a finite FP16 value times a huge 1/S overflows FP32: caught after unscaling */
  ampc_f16 big;
  float b = 60000.0f;
  ampc_convert(&big, AMPC_F16, &b, AMPC_F32, 1);
  assert_int_equal(ampc_grad_unscale_check(&big, AMPC_F16, 1, 0x1p127f, &bad, &norm, NULL),
                   AMPC_OK);
  assert_int_equal(bad, 1);
}

static void test_norm_is_thread_independent(void **state) {
  (void)state;
  enum { N = 300001 };
  static float g[N];
  for (int i = 0; i < N; i++)
    g[i] = (float)sin(i * 0.37) * 1e-3f;
  int64_t bad;
  double n1, n2;
  ampc_set_num_threads(1);
  ampc_grad_unscale_check(g, AMPC_F32, N, 0.5f, &bad, &n1, NULL);
  ampc_set_num_threads(2);
  ampc_grad_unscale_check(g, AMPC_F32, N, 0.5f, &bad, &n2, NULL);
  assert_memory_equal(&n1, &n2, sizeof n1);
  double ref = 0;
  for (int i = 0; i < N; i++)
    ref += (double)(g[i] * 0.5f) * (double)(g[i] * 0.5f);
  assert_true(fabs(n1 - sqrt(ref)) <= 1e-12 * sqrt(ref));
}

static void test_clip_coef(void **state) {
  (void)state;
  assert_true(ampc_clip_coef(0.5, 1.0f) == 1.0f);
  assert_true(ampc_clip_coef(4.0, 1.0f) == 0.25f);
  assert_true(ampc_clip_coef(4.0, 0.0f) == 1.0f); /* off */
  assert_true(ampc_clip_coef(1.0, 1.0f) == 1.0f);
  assert_true(ampc_clip_coef(3.0, 1.0f) == (float)(1.0 / 3.0));
}

static void test_lr_schedule(void **state) {
  (void)state;
  ampc_optim_config o = ampc_optim_adamw_defaults();
  o.lr = 1.0f;
  o.min_lr = 0.1f;
  o.warmup_steps = 10;
  o.total_steps = 110;
  assert_true(ampc_lr_at(&o, 1) == 0.1f);
  assert_true(ampc_lr_at(&o, 5) == 0.5f);
  assert_true(ampc_lr_at(&o, 10) == 1.0f);
  assert_true(ampc_lr_at(&o, 11) == 1.0f);  /* the first cosine step runs at lr */
  assert_true(ampc_lr_at(&o, 61) == 0.55f); /* half way: (1 + 0.1) / 2 */
  assert_true(ampc_lr_at(&o, 110) > 0.1f);  /* the last step still moves */
  assert_true(ampc_lr_at(&o, 110) ==
              (float)(0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * 0.99))));
  assert_true(ampc_lr_at(&o, 111) == 0.1f);
  assert_true(ampc_lr_at(&o, 500) == 0.1f);
  assert_true(ampc_lr_at(&o, 36) ==
              (float)(0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * 0.25))));
  o.warmup_steps = 0;
  o.total_steps = 0;
  assert_true(ampc_lr_at(&o, 12345) == 1.0f);
}

static void test_presets_and_overrides(void **state) {
  (void)state;
  struct {
    ampc_precision p;
    ampc_dtype lowp;
    bool master;
    ampc_dtype state;
    ampc_loss_scale_mode ls;
    ampc_acc acc;
  } rows[] = {
      {AMPC_PRECISION_32_TRUE, AMPC_F32, false, AMPC_F32, AMPC_LOSS_SCALE_NONE, AMPC_ACC_F32},
      {AMPC_PRECISION_16_MIXED, AMPC_F16, true, AMPC_F32, AMPC_LOSS_SCALE_DYNAMIC, AMPC_ACC_F32},
      {AMPC_PRECISION_BF16_MIXED, AMPC_BF16, true, AMPC_F32, AMPC_LOSS_SCALE_NONE, AMPC_ACC_F32},
      {AMPC_PRECISION_16_TRUE, AMPC_F16, false, AMPC_F16, AMPC_LOSS_SCALE_NONE, AMPC_ACC_F16},
      {AMPC_PRECISION_BF16_TRUE, AMPC_BF16, false, AMPC_BF16, AMPC_LOSS_SCALE_NONE, AMPC_ACC_F32},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    ampc_amp_config c;
    assert_int_equal(ampc_amp_config_preset(rows[i].p, &c), AMPC_OK);
    assert_int_equal(c.lowp, rows[i].lowp);
    assert_int_equal(c.master_weights, rows[i].master);
    assert_int_equal(c.state_dtype, rows[i].state);
    assert_int_equal(c.scaler.mode, rows[i].ls);
    assert_int_equal(c.accumulate, rows[i].acc);
    assert_true(c.scaler.init_scale == 65536.0f && c.scaler.growth_factor == 2.0f &&
                c.scaler.backoff_factor == 0.5f && c.scaler.growth_interval == 2000 &&
                c.scaler.hysteresis == 1);
    assert_int_equal(ampc_amp_config_check(&c), AMPC_OK);
  }
  ampc_amp_config c;
  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &c);
  assert_int_equal(ampc_amp_config_set(&c, "loss-scale", "none"), AMPC_OK);
  assert_int_equal(c.scaler.mode, AMPC_LOSS_SCALE_NONE);
  assert_int_equal(ampc_amp_config_set(&c, "loss-scale", "1024"), AMPC_OK);
  assert_int_equal(c.scaler.mode, AMPC_LOSS_SCALE_STATIC);
  assert_true(c.scaler.init_scale == 1024.0f);
  assert_int_equal(ampc_amp_config_set(&c, "master-weights", "off"), AMPC_OK);
  assert_false(c.master_weights);
  assert_int_equal(ampc_amp_config_set(&c, "accumulate", "fp16"), AMPC_OK);
  assert_int_equal(c.accumulate, AMPC_ACC_F16);
  assert_int_equal(ampc_amp_config_set(&c, "hysteresis", "3"), AMPC_OK);
  assert_int_equal(c.scaler.hysteresis, 3);
  const char *bad[][2] = {
      {"loss-scale", "-3"},     {"loss-scale", "0"},     {"loss-scale", "inf"},
      {"loss-scale", "nan"},    {"loss-scale", "12abc"}, {"master-weights", "yes"},
      {"accumulate", "fp8"},    {"growth-factor", "1"},  {"backoff-factor", "1.5"},
      {"growth-interval", "0"}, {"hysteresis", "-1"},    {"min-scale", "0"},
      {"init-scale", "1e39"},   {"no-such-option", "1"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ampc_amp_config before = c;
    assert_int_equal(ampc_amp_config_set(&c, bad[i][0], bad[i][1]), AMPC_ERR_INVALID_ARG);
    assert_memory_equal(&before, &c, sizeof c); /* unchanged */
    assert_non_null(strstr(ampc_last_error(), bad[i][0]));
  }
  /* combination checks */
  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &c);
  ampc_amp_config_set(&c, "min-scale", "4096");
  ampc_amp_config_set(&c, "max-scale", "1024");
  assert_int_equal(ampc_amp_config_check(&c), AMPC_ERR_INVALID_ARG);
  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &c);
  ampc_amp_config_set(&c, "min-scale", "1e-39"); /* 1/S not finite in FP32 */
  assert_int_equal(ampc_amp_config_check(&c), AMPC_ERR_INVALID_ARG);
  /* FP32 weights are their own master */
  ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &c);
  assert_int_equal(ampc_amp_config_set(&c, "master-weights", "on"), AMPC_OK);
  assert_false(c.master_weights);
}

static int lint(ampc_precision p, const char *k, const char *v, ampc_optim_config o, char *first) {
  ampc_amp_config c;
  ampc_amp_config_preset(p, &c);
  if (k)
    assert_int_equal(ampc_amp_config_set(&c, k, v), AMPC_OK);
  char msgs[8][256];
  const int n = ampc_config_lint(&c, &o, msgs, 8);
  if (n > 0 && first)
    strcpy(first, msgs[0]);
  return n;
}

static void test_lint(void **state) {
  (void)state;
  char m[256];
  const ampc_optim_config adam = ampc_optim_adamw_defaults();
  assert_int_equal(lint(AMPC_PRECISION_16_MIXED, NULL, NULL, adam, m), 0);
  assert_int_equal(lint(AMPC_PRECISION_32_TRUE, NULL, NULL, adam, m), 0);
  assert_int_equal(lint(AMPC_PRECISION_BF16_MIXED, NULL, NULL, adam, m), 0);
  /* Adam eps 1e-8 in FP16 state is 0 */
  assert_int_equal(lint(AMPC_PRECISION_16_TRUE, NULL, NULL, adam, m), 2);
  assert_non_null(strstr(m, "eps = 1e-08"));
  assert_non_null(strstr(m, "f16"));
  /* bf16 keeps 1e-8 (FP32's exponent range); its decay lr*wd = 1e-5 is swallowed */
  assert_int_equal(lint(AMPC_PRECISION_BF16_TRUE, NULL, NULL, adam, m), 1);
  assert_non_null(strstr(m, "weight decay"));
  ampc_optim_config o = adam;
  o.weight_decay = 0.0f;
  o.eps = 1e-4f;
  assert_int_equal(lint(AMPC_PRECISION_16_TRUE, NULL, NULL, o, m), 0);
  /* AdamW steps of ~lr below half an ulp of a 2^-10 weight: 2^-21 in f16
   * (no master), 2^-34 in f32 */
  o.lr = 4e-7f;
  assert_int_equal(lint(AMPC_PRECISION_16_TRUE, NULL, NULL, o, m), 1);
  assert_non_null(strstr(m, "swallowed updates"));
  assert_int_equal(lint(AMPC_PRECISION_16_MIXED, NULL, NULL, o, m), 0); /* FP32 master */
  assert_int_equal(lint(AMPC_PRECISION_16_TRUE, "weight-update", "stochastic", o, m), 0);
  o.lr = 5e-7f;
  assert_int_equal(lint(AMPC_PRECISION_16_TRUE, NULL, NULL, o, m), 0);
  o.lr = 5e-11f;
  assert_int_equal(lint(AMPC_PRECISION_32_TRUE, NULL, NULL, o, m), 1);
  o.lr = 6e-11f;
  assert_int_equal(lint(AMPC_PRECISION_32_TRUE, NULL, NULL, o, m), 0);
  o.lr = adam.lr;
  /* a static scale that is not a power of two */
  assert_int_equal(lint(AMPC_PRECISION_16_MIXED, "loss-scale", "1000", adam, m), 1);
  assert_non_null(strstr(m, "1000"));
  assert_non_null(strstr(m, "1024"));
  assert_int_equal(lint(AMPC_PRECISION_16_MIXED, "loss-scale", "1024", adam, m), 0);
  /* scaling bf16 gradients is pointless */
  assert_int_equal(lint(AMPC_PRECISION_BF16_MIXED, "loss-scale", "dynamic", adam, m), 1);
  /* master weights off: decay lr*wd = 1e-5 below half an ulp of 1.0 in f16 (2^-12) */
  assert_int_equal(lint(AMPC_PRECISION_16_MIXED, "master-weights", "off", adam, m), 1);
  assert_non_null(strstr(m, "1e-05"));
}

/* --loss-scale per-branch: each branch its own dynamic state, one global
 * skip, and the histogram pick to S_b 2^(12 - floor(log2 amax)) */
static void test_per_branch_state_machine(void **state) {
  (void)state;
  ampc_amp_config a;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &a), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&a, "loss-scale", "per-branch"), AMPC_OK);
  assert_int_equal(a.scaler.mode, AMPC_LOSS_SCALE_PER_BRANCH);
  assert_string_equal(ampc_loss_scale_mode_name(a.scaler.mode), "per-branch");
  a.scaler.growth_interval = 2;
  a.scaler.hysteresis = 2;
  a.scaler.min_scale = 4.0f;
  a.scaler.max_scale = 1048576.0f; /* 2^20 */
  assert_int_equal(ampc_amp_config_check(&a), AMPC_OK);
  ampc_scaler s;
  ampc_scaler_init(&s, &a.scaler);
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    assert_true(ampc_scaler_branch_scale(&s, (ampc_branch)b) == 65536.0f);
  const bool none[4] = {false, false, false, false};
  bool nf[4] = {false, false, true, false}; /* the fusion overflows */
  /* hysteresis 2: the first overflow uses the fusion's credit, all skip */
  assert_true(ampc_scaler_update_branches(&s, nf, NULL));
  assert_true(s.branch_scale[AMPC_BRANCH_FUSION] == 65536.0f);
  assert_int_equal(s.branch_hysteresis[AMPC_BRANCH_FUSION], 1);
  assert_int_equal(s.branch_hysteresis[AMPC_BRANCH_VISION], 2);
  assert_true(ampc_scaler_update_branches(&s, nf, NULL));
  assert_true(s.branch_scale[AMPC_BRANCH_FUSION] == 32768.0f); /* backs off */
  assert_true(s.branch_scale[AMPC_BRANCH_VISION] == 65536.0f); /* the others keep theirs */
  assert_int_equal(s.skip_count, 2);
  assert_int_equal(s.overflow_count, 2);
  /* two clean steps: every branch grows once (interval 2), credit restored */
  assert_false(ampc_scaler_update_branches(&s, none, NULL));
  assert_int_equal(s.branch_tracker[AMPC_BRANCH_TEXT], 1);
  assert_false(ampc_scaler_update_branches(&s, none, NULL));
  assert_true(s.branch_scale[AMPC_BRANCH_VISION] == 131072.0f);
  assert_true(s.branch_scale[AMPC_BRANCH_FUSION] == 65536.0f);
  assert_int_equal(s.branch_hysteresis[AMPC_BRANCH_FUSION], 2);
  assert_true(s.scale == s.branch_scale[AMPC_BRANCH_HEADS]);
  /* the pick: amax 3.0 at 2^17 has floor(log2) 1, so S = 2^17 2^(12-1) =
   * 2^28, clamped to 2^20; amax 2^20 (12 - 20 = -8) gives 2^17 / 2^8 = 2^9;
   * unknown (-1) and 0 keep their scale */
  float amax[4] = {3.0f, 1048576.0f, -1.0f, 0.0f};
  const float t_before = s.branch_scale[AMPC_BRANCH_TEXT];
  assert_true(t_before == 131072.0f);
  assert_false(ampc_scaler_update_branches(&s, none, amax));
  assert_true(s.branch_scale[AMPC_BRANCH_VISION] == 1048576.0f);
  assert_true(s.branch_scale[AMPC_BRANCH_TEXT] == 512.0f);
  assert_true(s.branch_scale[AMPC_BRANCH_FUSION] == 65536.0f); /* tracker 1 of 2 */
  assert_true(s.branch_scale[AMPC_BRANCH_HEADS] == 131072.0f);
  assert_int_equal(s.branch_tracker[AMPC_BRANCH_VISION], 0);
  assert_int_equal(s.branch_tracker[AMPC_BRANCH_FUSION], 1);
  assert_int_equal(s.branch_picks, 2);
  /* 512 2^(12 - 12) stays: a pick that does not move the scale is not counted */
  float amax2[4] = {-1.0f, 4096.0f, -1.0f, -1.0f};
  assert_false(ampc_scaler_update_branches(&s, none, amax2));
  assert_true(s.branch_scale[AMPC_BRANCH_TEXT] == 512.0f);
  assert_int_equal(s.branch_picks, 2);
  /* the floor: an amax of 2^30 at 512 wants 2^-9, clamped to min 4 */
  float amax3[4] = {-1.0f, 1073741824.0f, -1.0f, -1.0f};
  assert_false(ampc_scaler_update_branches(&s, none, amax3));
  assert_true(s.branch_scale[AMPC_BRANCH_TEXT] == 4.0f);
  /* an overflow step picks nothing, even with an amax */
  nf[AMPC_BRANCH_FUSION] = false, nf[AMPC_BRANCH_TEXT] = true;
  assert_true(ampc_scaler_update_branches(&s, nf, amax));
  assert_true(s.branch_scale[AMPC_BRANCH_VISION] == 1048576.0f);
  assert_true(s.branch_scale[AMPC_BRANCH_TEXT] == 4.0f); /* credit first */
  /* other modes: the branches are one scale, any overflow is the overflow */
  ampc_scaler d;
  ampc_scaler_config dc = dyn(1024.0f, 2.0f, 0.5f, 100);
  ampc_scaler_init(&d, &dc);
  assert_true(ampc_scaler_update_branches(&d, nf, NULL));
  assert_true(d.scale == 512.0f);
  assert_true(ampc_scaler_branch_scale(&d, AMPC_BRANCH_VISION) == 512.0f);
  /* per-branch needs powers of two: the boundary ratios must be exact */
  ampc_amp_config b2 = a;
  b2.scaler.init_scale = 1000.0f;
  assert_int_equal(ampc_amp_config_check(&b2), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "--init-scale is 1000"));
  b2 = a;
  b2.scaler.backoff_factor = 0.75f;
  assert_int_equal(ampc_amp_config_check(&b2), AMPC_ERR_INVALID_ARG);
  b2 = a;
  b2.scaler.max_scale = 1e6f;
  assert_int_equal(ampc_amp_config_check(&b2), AMPC_ERR_INVALID_ARG);
  b2 = a;
  b2.scaler.max_scale = FLT_MAX; /* no ceiling: the scales stop at 2^127 */
  assert_int_equal(ampc_amp_config_check(&b2), AMPC_OK);
  ampc_scaler big;
  ampc_scaler_init(&big, &b2.scaler);
  float tiny[4] = {1e-30f, -1.0f, -1.0f, -1.0f};
  assert_false(ampc_scaler_update_branches(&big, none, tiny));
  assert_true(big.branch_scale[AMPC_BRANCH_VISION] == ldexpf(1.0f, 127));
}

/* --loss-scale per-loss: one GradScaler per loss term, one global skip, no
 * histogram pick even when an amax is passed */
static void test_per_loss_state_machine(void **state) {
  (void)state;
  ampc_amp_config a;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &a), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&a, "loss-scale", "per-loss"), AMPC_OK);
  assert_string_equal(ampc_loss_scale_mode_name(a.scaler.mode), "per-loss");
  a.scaler.init_scale = 1000.0f; /* no power of two needed: no ratios */
  a.scaler.growth_interval = 2;
  assert_int_equal(ampc_amp_config_check(&a), AMPC_OK);
  ampc_scaler s;
  ampc_scaler_init(&s, &a.scaler);
  const bool none[4] = {false, false, false, false}, itm[4] = {false, true, false, false};
  const float amax[4] = {3.0f, 3.0f, 3.0f, 3.0f};
  assert_true(ampc_scaler_update_branches(&s, itm, amax));
  assert_true(ampc_scaler_term_scale(&s, 0) == 1000.0f);
  assert_true(ampc_scaler_term_scale(&s, 1) == 500.0f);
  assert_false(ampc_scaler_update_branches(&s, none, amax));
  assert_false(ampc_scaler_update_branches(&s, none, amax));
  assert_true(ampc_scaler_term_scale(&s, 0) == 2000.0f); /* growth, not a pick */
  assert_true(ampc_scaler_term_scale(&s, 1) == 1000.0f);
  assert_int_equal(s.branch_picks, 0);
  assert_int_equal(s.skip_count, 1);
  assert_true(s.scale == ampc_scaler_term_scale(&s, 0));
  /* the ceiling is max_scale itself (no power-of-two rounding here) */
  ampc_amp_config cap = a;
  cap.scaler.max_scale = 1500.0f;
  cap.scaler.growth_interval = 1;
  ampc_scaler c2;
  ampc_scaler_init(&c2, &cap.scaler);
  assert_false(ampc_scaler_update_branches(&c2, none, NULL));
  assert_true(ampc_scaler_term_scale(&c2, 0) == 1500.0f);
  assert_false(ampc_scaler_update_branches(&c2, none, NULL));
  assert_true(ampc_scaler_term_scale(&c2, 0) == 1500.0f);
  /* fp8-mixed refuses it */
  ampc_amp_config f;
  assert_int_equal(ampc_amp_config_preset(AMPC_PRECISION_FP8_MIXED, &f), AMPC_OK);
  assert_int_equal(ampc_amp_config_set(&f, "loss-scale", "per-loss"), AMPC_OK);
  assert_int_equal(ampc_amp_config_check(&f), AMPC_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradscaler_update_values),
      cmocka_unit_test(test_growth_stays_finite),
      cmocka_unit_test(test_scale_sequence),
      cmocka_unit_test(test_hysteresis_floor_static_none),
      cmocka_unit_test(test_inv_scale_double_then_float),
      cmocka_unit_test(test_unscale_small_gradient),
      cmocka_unit_test(test_norm_is_thread_independent),
      cmocka_unit_test(test_clip_coef),
      cmocka_unit_test(test_lr_schedule),
      cmocka_unit_test(test_presets_and_overrides),
      cmocka_unit_test(test_lint),
      cmocka_unit_test(test_per_branch_state_machine),
      cmocka_unit_test(test_per_loss_state_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
