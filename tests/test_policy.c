/*
 * tests/test_policy.c: the autocast policy table and the preset names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "ampc/ampc.h"

static ampc_op_policy pol(ampc_precision p, ampc_op_id op) {
  ampc_op_policy r;
  assert_int_equal(ampc_policy_get(p, op, &r), AMPC_OK);
  return r;
}

static void test_every_op_has_a_row(void **state) {
  (void)state;
  for (int p = 0; p < AMPC_PRECISION_COUNT; p++)
    for (int op = 0; op < AMPC_OPID_COUNT; op++) {
      ampc_op_policy r = pol((ampc_precision)p, (ampc_op_id)op);
      assert_true(r.cls >= AMPC_OPCLASS_LOWP && r.cls <= AMPC_OPCLASS_PROMOTE);
      assert_int_equal(r.compute, AMPC_F32);
      assert_string_not_equal(ampc_op_name((ampc_op_id)op), "?");
      if (p == AMPC_PRECISION_32_TRUE) {
        assert_int_equal(r.input, AMPC_F32);
        assert_int_equal(r.output, AMPC_F32);
      }
    }
}

static void test_autocast_rules(void **state) {
  (void)state;
  const ampc_precision m16 = AMPC_PRECISION_16_MIXED, mbf = AMPC_PRECISION_BF16_MIXED,
                       t16 = AMPC_PRECISION_16_TRUE;
  /* GEMM-type ops read and write 16-bit */
  assert_int_equal(pol(m16, AMPC_OPID_LINEAR).input, AMPC_F16);
  assert_int_equal(pol(m16, AMPC_OPID_LINEAR).output, AMPC_F16);
  assert_int_equal(pol(mbf, AMPC_OPID_ATTN_SCORES).input, AMPC_BF16);
  assert_int_equal(pol(m16, AMPC_OPID_PATCH_EMBED).output, AMPC_F16);
  /* FP32-list ops write FP32 in mixed presets, the preset dtype in -true ones */
  assert_int_equal(pol(m16, AMPC_OPID_LAYER_NORM).output, AMPC_F32);
  assert_int_equal(pol(mbf, AMPC_OPID_SOFTMAX).output, AMPC_F32);
  assert_int_equal(pol(t16, AMPC_OPID_LAYER_NORM).output, AMPC_F16);
  assert_int_equal(pol(t16, AMPC_OPID_SOFTMAX).output, AMPC_F16);
  /* losses: an FP32 scalar always */
  for (int p = 0; p < AMPC_PRECISION_COUNT; p++) {
    assert_int_equal(pol((ampc_precision)p, AMPC_OPID_CROSS_ENTROPY).output, AMPC_F32);
    assert_int_equal(pol((ampc_precision)p, AMPC_OPID_INFONCE).output, AMPC_F32);
    assert_int_equal(pol((ampc_precision)p, AMPC_OPID_BCE_LOGITS).output, AMPC_F32);
  }
  /* elementwise: GELU follows its 16-bit input; the residual stream is FP32 in mixed */
  assert_int_equal(pol(m16, AMPC_OPID_GELU).output, AMPC_F16);
  assert_int_equal(pol(m16, AMPC_OPID_RESIDUAL_ADD).output, AMPC_F32);
  assert_int_equal(pol(t16, AMPC_OPID_RESIDUAL_ADD).output, AMPC_F16);
}

static void test_names(void **state) {
  (void)state;
  const char *names[] = {"32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"};
  for (int p = 0; p < 5; p++) {
    ampc_precision q;
    assert_int_equal(ampc_precision_parse(names[p], &q), AMPC_OK);
    assert_int_equal(q, p);
    assert_string_equal(ampc_precision_name(q), names[p]);
  }
  ampc_precision q;
  assert_int_equal(ampc_precision_parse("8-mixed", &q), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "8-mixed"));
  /* the aliases of Lightning and Accelerate, and a suggestion within 2 edits */
  const char *alias[6] = {"32", "fp32", "16", "fp16", "bf16", "fp8"};
  const ampc_precision want[6] = {AMPC_PRECISION_32_TRUE,    AMPC_PRECISION_32_TRUE,
                                  AMPC_PRECISION_16_MIXED,   AMPC_PRECISION_16_MIXED,
                                  AMPC_PRECISION_BF16_MIXED, AMPC_PRECISION_FP8_MIXED};
  for (int k = 0; k < 6; k++) {
    assert_int_equal(ampc_precision_parse(alias[k], &q), AMPC_OK);
    assert_int_equal(q, want[k]);
  }
  assert_int_equal(ampc_precision_parse("16-mixd", &q), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "did you mean 16-mixed?"));
  assert_int_equal(ampc_precision_parse("float16-automatic", &q), AMPC_ERR_INVALID_ARG);
  assert_null(strstr(ampc_last_error(), "did you mean"));
  assert_int_equal(ampc_precision_lowp(AMPC_PRECISION_BF16_TRUE), AMPC_BF16);
  assert_true(ampc_precision_is_mixed(AMPC_PRECISION_16_MIXED));
  assert_false(ampc_precision_is_mixed(AMPC_PRECISION_16_TRUE));
  ampc_op_policy r;
  assert_int_equal(ampc_policy_get((ampc_precision)7, AMPC_OPID_LINEAR, &r), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_policy_get(AMPC_PRECISION_16_MIXED, AMPC_OPID_COUNT, &r),
                   AMPC_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op_has_a_row),
      cmocka_unit_test(test_autocast_rules),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
