/*
 * tests/test_memory.c: the memory account (include/ampc/report.h). The
 * predicted bytes per role equal, exactly, what a real trainer and model
 * allocate (mm-micro and vit-micro, 32-true and 16-mixed, several batches);
 * the literature's per-parameter table (16 B with Adam in 32-true and
 * 16-mixed); mm-tiny's 16-mixed activations are well below 32-true's; the
 * planner's batch is the largest that fits; byte counts parse with their
 * suffixes and garbage is refused; the peak RSS is positive and grows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "ampc/report.h"

static ampc_amp_config preset(ampc_precision p) {
  ampc_amp_config a;
  assert_int_equal(ampc_amp_config_preset(p, &a), AMPC_OK);
  return a;
}

/* predicted == allocated for one model, preset, optimizer and batch */
static void check_exact(const char *name, ampc_precision p, bool sgd, int64_t batch) {
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get(name, 11, 5, 3, &c), AMPC_OK);
  const ampc_amp_config amp = preset(p);
  const ampc_optim_config opt = sgd ? ampc_optim_sgd_defaults() : ampc_optim_adamw_defaults();
  ampc_mem_account m;
  assert_int_equal(ampc_mem_account_mm(&c, batch, &amp, ampc_optim_moments(&opt), &m), AMPC_OK);
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_mmodel_specs_make(&c, &sp), AMPC_OK);
  ampc_trainer T;
  assert_int_equal(ampc_trainer_init(&T, &amp, &opt, sp.specs, sp.n, 1), AMPC_OK);
  ampc_mmodel *M = NULL;
  assert_int_equal(ampc_mmodel_create(&M, &c, &T.params, &T.amp, batch), AMPC_OK);
  const ampc_params *P = &T.params;
  assert_int_equal(m.params, P->numel);
  assert_int_equal(m.elements, P->total);
  assert_int_equal(m.bytes[AMPC_MEM_WEIGHTS], P->bytes[AMPC_ROLE_WEIGHTS]);
  assert_int_equal(m.bytes[AMPC_MEM_MASTER], P->bytes[AMPC_ROLE_MASTER]);
  assert_int_equal(m.bytes[AMPC_MEM_GRADS], P->bytes[AMPC_ROLE_GRADS]);
  assert_int_equal(m.bytes[AMPC_MEM_MOMENTS],
                   P->bytes[AMPC_ROLE_MOMENT1] + P->bytes[AMPC_ROLE_MOMENT2]);
  assert_int_equal(m.bytes[AMPC_MEM_ACTIVATIONS] + m.bytes[AMPC_MEM_WORKSPACE],
                   ampc_mmodel_activation_bytes(M));
  assert_true(m.bytes[AMPC_MEM_ACTIVATIONS] > 0 && m.bytes[AMPC_MEM_WORKSPACE] > 0);
  size_t sum = 0;
  for (int r = 0; r < AMPC_MEM_ROLE_COUNT; r++)
    sum += m.bytes[r];
  assert_int_equal(m.total, sum);
  ampc_mmodel_free(M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

static void test_prediction_is_exact(void **state) {
  (void)state;
  const char *models[] = {"mm-micro", "vit-micro"};
  const ampc_precision ps[] = {AMPC_PRECISION_32_TRUE, AMPC_PRECISION_16_MIXED};
  const int64_t batches[] = {2, 7, 32};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++)
        check_exact(models[i], ps[j], false, batches[k]);
  /* the other presets and SGD's single buffer too */
  check_exact("mm-micro", AMPC_PRECISION_16_TRUE, false, 4);
  check_exact("mm-micro", AMPC_PRECISION_BF16_MIXED, true, 4);
  check_exact("vit-micro", AMPC_PRECISION_BF16_TRUE, true, 4);
}

/* Micikevicius et al. 2018 / ZeRO's table: 16 bytes per parameter with Adam
 * in both 32-true and 16-mixed; 1.2e9 parameters -> 19.2 GB either way. */
static void test_per_parameter_table(void **state) {
  (void)state;
  const int64_t n = 1200000000;
  ampc_mem_account a, b;
  ampc_amp_config f32 = preset(AMPC_PRECISION_32_TRUE), mixed = preset(AMPC_PRECISION_16_MIXED);
  assert_int_equal(ampc_mem_account_params(n, &f32, 2, &a), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(n, &mixed, 2, &b), AMPC_OK);
  assert_true(a.bytes_per_param == 16.0 && b.bytes_per_param == 16.0);
  assert_int_equal(a.total, 19200000000u);
  assert_int_equal(b.total, 19200000000u);
  assert_int_equal(a.bytes[AMPC_MEM_WEIGHTS], 4 * n);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 0);
  assert_int_equal(b.bytes[AMPC_MEM_WEIGHTS], 2 * n);
  assert_int_equal(b.bytes[AMPC_MEM_MASTER], 4 * n);
  assert_int_equal(b.bytes[AMPC_MEM_GRADS], 2 * n);
  assert_int_equal(b.bytes[AMPC_MEM_MOMENTS], 8 * n);
  /* 16-true: no master, binary16 moments: 2 + 2 + 4 = 8 */
  ampc_amp_config t16 = preset(AMPC_PRECISION_16_TRUE);
  assert_int_equal(ampc_mem_account_params(n, &t16, 2, &a), AMPC_OK);
  assert_true(a.bytes_per_param == 8.0);
  /* 16-mixed without master, SGD momentum: 2 + 2 + 4 = 8; no optimizer: 4 */
  assert_int_equal(ampc_amp_config_set(&mixed, "master-weights", "off"), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(n, &mixed, 1, &a), AMPC_OK);
  assert_true(a.bytes_per_param == 8.0);
  assert_int_equal(ampc_mem_account_params(n, &mixed, 0, &a), AMPC_OK);
  assert_true(a.bytes_per_param == 4.0);
  /* master on is ignored for FP32 weights, as the trainer does */
  assert_int_equal(ampc_amp_config_set(&f32, "master-weights", "on"), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(n, &f32, 2, &a), AMPC_OK);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 0);
  int mo = -1;
  assert_int_equal(ampc_mem_optimizer_moments("adamw", &mo), AMPC_OK);
  assert_int_equal(mo, 2);
  assert_int_equal(ampc_mem_optimizer_moments("sgd", &mo), AMPC_OK);
  assert_int_equal(mo, 1);
  assert_int_equal(ampc_mem_optimizer_moments("none", &mo), AMPC_OK);
  assert_int_equal(mo, 0);
  assert_int_equal(ampc_mem_optimizer_moments("lamb", &mo), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mem_account_params(0, &f32, 2, &a), AMPC_ERR_INVALID_ARG);
}

/* 16-bit activations for GEMM outputs, FP32 residual stream and softmax:
 * 16-mixed's arena is well below 32-true's but above a quarter of it. */
static void test_activation_ratio(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-tiny", 3840, 24, 9, &c), AMPC_OK);
  size_t a32 = 0, w32 = 0, a16 = 0, w16 = 0, abf = 0;
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 64, AMPC_PRECISION_32_TRUE, &a32, &w32), AMPC_OK);
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 64, AMPC_PRECISION_16_MIXED, &a16, &w16), AMPC_OK);
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 64, AMPC_PRECISION_BF16_MIXED, &abf, NULL), AMPC_OK);
  const double r = (double)a16 / (double)a32;
  printf("mm-tiny batch 64 activations: 32-true %zu, 16-mixed %zu (ratio %.4f); workspace %zu "
         "vs %zu\n",
         a32, a16, r, w32, w16);
  assert_true(r > 0.4 && r < 0.75);
  assert_int_equal(abf, a16);
  assert_true(w16 < w32);
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 1, AMPC_PRECISION_32_TRUE, &a32, &w32),
                   AMPC_ERR_INVALID_ARG);
}

/* --attention-cast's 16-bit P on a GPU (ampc_mmodel_attn_cast_bytes): the
 * largest attention call's b*h*tq*tk values, 2 bytes each, in the device
 * account's device_scratch only. mm-micro (8x8 images in 4x4 patches: 5
 * tokens with CLS; 5 text tokens; 2 heads; no MLM, so 2 fusion pairs a
 * sample) at batch 4: vision and text 4*2*5*5 = 200 values, the fusion's
 * cross-attention 8*2*5*5 = 400, so 800 bytes. mm-base at batch 64 with 16
 * text tokens: the vision tower's 64*8*65*65 = 2,163,200 values (the
 * fusion's 128*8*16*65 is less), 4,326,400 bytes. The device account adds
 * the slot the context allocates for it (the device's scratch_slot_bytes). */
static void test_attn_cast_bytes(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-micro", 11, 5, 3, &c), AMPC_OK);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_16_MIXED), 0); /* off */
  c.attn_cast = true;
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_16_MIXED), 800);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_BF16_MIXED), 800);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_32_TRUE), 0); /* no cast */
  assert_int_equal(ampc_mmodel_attn_cast_bytes(NULL, 4, AMPC_PRECISION_16_MIXED), 0);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 0, AMPC_PRECISION_16_MIXED), 0);
  /* in the GPU's account, not the CPU's (the CPU rounds a sample at a time) */
  const ampc_amp_config amp = preset(AMPC_PRECISION_16_MIXED);
  ampc_mem_account on, off, cpu_on, cpu_off;
  assert_int_equal(ampc_mem_account_mm_on(&c, 4, &amp, 2, AMPC_DEVICE_CUDA, &on), AMPC_OK);
  assert_int_equal(ampc_mem_account_mm(&c, 4, &amp, 2, &cpu_on), AMPC_OK);
  c.attn_cast = false;
  assert_int_equal(ampc_mem_account_mm_on(&c, 4, &amp, 2, AMPC_DEVICE_CUDA, &off), AMPC_OK);
  assert_int_equal(ampc_mem_account_mm(&c, 4, &amp, 2, &cpu_off), AMPC_OK);
  /* the slot the context allocates: at least 4 KiB, else a quarter more */
  assert_int_equal(on.bytes[AMPC_MEM_DEVICE_SCRATCH], off.bytes[AMPC_MEM_DEVICE_SCRATCH] + 4096);
  assert_int_equal(on.total, off.total + 4096);
  size_t (*slot)(size_t) = ampc_device_desc_get(AMPC_DEVICE_CUDA)->scratch_slot_bytes;
  assert_non_null(slot);
  assert_int_equal(slot(0), 0);
  assert_int_equal(slot(800), 4096);
  assert_int_equal(slot(4326400), 5408000);
  assert_int_equal(cpu_on.total, cpu_off.total);
  assert_int_equal(cpu_on.bytes[AMPC_MEM_DEVICE_SCRATCH], 0);
  assert_int_equal(ampc_mmodel_config_get("mm-base", 3840, 16, 9, &c), AMPC_OK);
  c.attn_cast = true;
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 64, AMPC_PRECISION_16_MIXED), 4326400);
}

/* the planned batch fits; one more does not */
static void test_plan(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("vit-ref", 0, 0, 9, &c), AMPC_OK);
  const ampc_amp_config amp = preset(AMPC_PRECISION_16_MIXED);
  const size_t budget = 200000000, overhead = 30000000;
  int64_t b = 0;
  ampc_mem_account at, next;
  assert_int_equal(ampc_mem_plan_mm(&c, &amp, 2, budget, overhead, 100000, &b, &at), AMPC_OK);
  assert_true(b >= 2);
  assert_true(at.total + overhead <= budget);
  assert_int_equal(at.batch, b);
  assert_int_equal(ampc_mem_account_mm(&c, b + 1, &amp, 2, &next), AMPC_OK);
  assert_true(next.total + overhead > budget);
  /* capped by max_batch */
  assert_int_equal(ampc_mem_plan_mm(&c, &amp, 2, budget, overhead, 10, &b, NULL), AMPC_OK);
  assert_int_equal(b, 10);
  /* nothing fits */
  assert_int_equal(ampc_mem_plan_mm(&c, &amp, 2, 1000, 0, 100, &b, &at), AMPC_OK);
  assert_int_equal(b, 0);
}

static void test_parse_bytes(void **state) {
  (void)state;
  uint64_t v = 0;
  const struct {
    const char *s;
    uint64_t v;
  } ok[] = {
      {"8G", 8000000000u}, {"512M", 512000000u}, {"1.5GiB", 1610612736u}, {"1000", 1000},
      {"2k", 2000},        {"3MiB", 3145728},    {"4 gb", 4000000000u},   {"0", 0},
      {"10B", 10},         {"1.5e3", 1500},      {"7Ki", 7168},           {"1T", 1000000000000u}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    assert_int_equal(ampc_parse_bytes(ok[i].s, &v), AMPC_OK);
    assert_int_equal(v, ok[i].v);
  }
  const char *bad[] = {"", "G", "abc", "-5M", "8X", "8GG", "nan", "inf", "1e30", "5 M B"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(ampc_parse_bytes(bad[i], &v), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "5 M B"));
}

static void test_peak_rss(void **state) {
  (void)state;
  const int64_t before = ampc_peak_rss_bytes();
  assert_true(before > 0);
  const size_t n = 64u << 20;
  char *p = malloc(n);
  assert_non_null(p);
  for (size_t i = 0; i < n; i += 4096)
    p[i] = (char)i;
  const int64_t after = ampc_peak_rss_bytes();
  /* touched 64 MiB: the peak grew by at least most of it */
  assert_true(after >= before + (int64_t)(n / 2));
  free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prediction_is_exact),
      cmocka_unit_test(test_per_parameter_table),
      cmocka_unit_test(test_activation_ratio),
      cmocka_unit_test(test_attn_cast_bytes),
      cmocka_unit_test(test_plan),
      cmocka_unit_test(test_parse_bytes),
      cmocka_unit_test(test_peak_rss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
