/*
 * tests/test_formats_edge.c: known right values for every format, the format
 * facts, classification, dtype names and the error paths of ampc_convert.
 * Edge values come from public reports of conversion bugs.
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
#include "test_util.h"

static uint16_t f16(float x) { return ampc_f32_to_f16(x).bits; }
static uint16_t f16b(uint32_t b) { return ampc_f32_to_f16(t_f32(b)).bits; }
static uint16_t bf16b(uint32_t b) { return ampc_f32_to_bf16(t_f32(b)).bits; }
static uint8_t e4(float x, bool s) { return ampc_f32_to_e4m3(x, s).bits; }
static uint8_t e5(float x, bool s) { return ampc_f32_to_e5m2(x, s).bits; }

static void test_f16_edges(void **state) {
  (void)state;
  assert_int_equal(f16(65504.0f), 0x7BFF);
  assert_int_equal(f16(65505.0f), 0x7BFF);
  assert_int_equal(f16(65519.99f), 0x7BFF);
  assert_int_equal(f16(65520.0f), 0x7C00);
  assert_int_equal(f16(-65520.0f), 0xFC00);
  assert_int_equal(f16(0x1p-25f), 0x0000);        /* tie to even: 0 */
  assert_int_equal(f16b(0x33000001u), 0x0001);    /* low bits count */
  assert_int_equal(f16(0x1.8p-25f), 0x0001);      /* 1.5 * 2^-25 */
  assert_int_equal(f16(1.0f + 0x1p-11f), 0x3C00); /* tie to even */
  assert_int_equal(f16(1.0f + 0x1p-11f + 0x1p-16f), 0x3C01);
  assert_int_equal(f16(2049.0f), 0x6800); /* 2048 */
  assert_int_equal(f16(1e-8f), 0x0000);   /* Adam's eps is 0 in FP16 */
  assert_int_equal(f16(-0.0f), 0x8000);
  assert_int_equal(f16(0x1p-24f), 0x0001);     /* smallest subnormal */
  assert_int_equal(f16(0x1p-14f), 0x0400);     /* smallest normal */
  assert_int_equal(f16(0x1.ff8p-15f), 0x03FF); /* max subnormal */
  assert_int_equal(f16(0x1.ffcp-15f), 0x0400); /* + half an ulp: tie, up to even normal */
  assert_int_equal(f16(INFINITY), 0x7C00);
  assert_int_equal(f16(-INFINITY), 0xFC00);
  /* NaN: sign kept, quieted, top payload bits kept (VCVTPS2PH) */
  assert_int_equal(f16b(0x7F800001u), 0x7E00);
  assert_int_equal(f16b(0xFF800001u), 0xFE00);
  assert_int_equal(f16b(0x7FC00000u), 0x7E00);
  assert_int_equal(f16b(0x7FBFE000u), 0x7FFF);
  assert_int_equal(f16b(0x7F802000u), 0x7E01);
  /* decode */
  assert_true(ampc_f16_to_f32((ampc_f16){0x7BFF}) == 65504.0f);
  assert_true(ampc_f16_to_f32((ampc_f16){0x0001}) == 0x1p-24f);
  assert_true(ampc_f16_to_f32((ampc_f16){0x03FF}) == 0x1.ff8p-15f);
  assert_int_equal(t_bits(ampc_f16_to_f32((ampc_f16){0x7C01})), 0x7FC02000u);
  assert_int_equal(t_bits(ampc_f16_to_f32((ampc_f16){0xFE00})), 0xFFC00000u);
}

static void test_bf16_edges(void **state) {
  (void)state;
  assert_int_equal(bf16b(0x7F7F8000u), 0x7F80); /* rounds up to inf */
  assert_int_equal(bf16b(0x7F7F7FFFu), 0x7F7F);
  assert_int_equal(bf16b(0xFF7F8000u), 0xFF80);
  assert_int_equal(ampc_f32_to_bf16(1.0f + 0x1p-8f).bits, 0x3F80);
  assert_int_equal(ampc_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f).bits, 0x3F81);
  assert_int_equal(bf16b(0x3F818000u), 0x3F82); /* odd + tie rounds to even */
  /* NaN stays NaN, never inf, never a sign flip */
  assert_int_equal(bf16b(0x7F800001u), 0x7FC0);
  assert_int_equal(bf16b(0xFF800001u), 0xFFC0);
  assert_int_equal(bf16b(0x7FFFFFFFu), 0x7FFF);
  assert_int_equal(bf16b(0xFFFFFFFFu), 0xFFFF);
  assert_int_equal(bf16b(0x00000001u), 0x0000); /* 2^-149 */
  assert_int_equal(bf16b(0x00008000u), 0x0000); /* tie to even */
  assert_int_equal(bf16b(0x00018000u), 0x0002);
  assert_int_equal(t_bits(ampc_bf16_to_f32((ampc_bf16){0x7F81})), 0x7F810000u);
}

static void test_fp8_edges(void **state) {
  (void)state;
  /* E4M3: max 448; 464 ties to 448; above is NaN (or 448 saturated) */
  assert_int_equal(e4(448.0f, false), 0x7E);
  assert_int_equal(e4(464.0f, false), 0x7E);
  assert_int_equal(e4(t_f32(0x43E80001u), false), 0x7F);
  assert_int_equal(e4(t_f32(0x43E80001u), true), 0x7E);
  assert_int_equal(e4(480.0f, false), 0x7F);
  assert_int_equal(e4(-480.0f, false), 0xFF);
  assert_int_equal(e4(-480.0f, true), 0xFE);
  assert_int_equal(e4(INFINITY, false), 0x7F);
  assert_int_equal(e4(INFINITY, true), 0x7E);
  assert_int_equal(e4(-INFINITY, true), 0xFE);
  assert_int_equal(e4(NAN, false), 0x7F);
  assert_int_equal(e4(-NAN, true), 0x7F); /* CUDA drops the NaN's sign */
  assert_int_equal(e4(1.0f, false), 0x38);
  assert_int_equal(e4(0x1p-9f, false), 0x01);
  assert_int_equal(e4(0x1p-10f, false), 0x00); /* half the min subnormal: tie to 0 */
  assert_int_equal(e4(0x1.8p-10f, false), 0x01);
  assert_int_equal(e4(-0x1p-10f, false), 0x80);
  assert_int_equal(e4(0x1.ep-7f, false), 0x08); /* max subnormal + half rounds to min normal */
  /* E5M2: max 57344, >= 61440 -> inf (or 57344 saturated) */
  assert_int_equal(e5(57344.0f, false), 0x7B);
  assert_int_equal(e5(t_f32(0x476FFFFFu), false), 0x7B);
  assert_int_equal(e5(61440.0f, false), 0x7C);
  assert_int_equal(e5(61440.0f, true), 0x7B);
  assert_int_equal(e5(-61440.0f, false), 0xFC);
  assert_int_equal(e5(INFINITY, true), 0x7B);
  assert_int_equal(e5(-INFINITY, false), 0xFC);
  assert_int_equal(e5(NAN, false), 0x7F);
  assert_int_equal(e5(1.0f, false), 0x3C);
  assert_int_equal(e5(0x1p-16f, false), 0x01);
  assert_int_equal(e5(0x1p-17f, false), 0x00);
  /* decode */
  assert_true(ampc_e4m3_to_f32((ampc_f8_e4m3){0x7E}) == 448.0f);
  assert_true(ampc_e4m3_to_f32((ampc_f8_e4m3){0x01}) == 0x1p-9f);
  assert_true(ampc_e4m3_to_f32((ampc_f8_e4m3){0x87}) == -0x1.cp-7f);
  assert_int_equal(t_bits(ampc_e4m3_to_f32((ampc_f8_e4m3){0xFF})), 0x7FFFE000u);
  assert_true(ampc_e5m2_to_f32((ampc_f8_e5m2){0x7B}) == 57344.0f);
  assert_true(isinf(ampc_e5m2_to_f32((ampc_f8_e5m2){0xFC})));
  assert_int_equal(t_bits(ampc_e5m2_to_f32((ampc_f8_e5m2){0x7D})), 0x7FFFE000u);
}

static void test_fp8_decode_all(void **state) {
  (void)state;
  for (uint32_t v = 0; v < 256; v++) {
    const uint32_t s = v >> 7, e4e = (v >> 3) & 15, e4m = v & 7, e5e = (v >> 2) & 31, e5m = v & 3;
    float a = ampc_e4m3_to_f32((ampc_f8_e4m3){(uint8_t)v});
    if ((v & 0x7F) == 0x7F) {
      assert_int_equal(t_bits(a), 0x7FFFE000u);
    } else {
      double want = t_decode_finite(e4e, e4m, 3, 7);
      assert_true((double)a == (s ? -want : want));
      assert_int_equal(t_bits(a) >> 31, s);
      /* round trip in both modes */
      assert_int_equal(ampc_f32_to_e4m3(a, false).bits, v);
      assert_int_equal(ampc_f32_to_e4m3(a, true).bits, v);
    }
    float b = ampc_e5m2_to_f32((ampc_f8_e5m2){(uint8_t)v});
    if (e5e == 31 && e5m) {
      assert_int_equal(t_bits(b), 0x7FFFE000u);
    } else if (e5e == 31) {
      assert_true(isinf(b) && (t_bits(b) >> 31) == s);
      assert_int_equal(ampc_f32_to_e5m2(b, false).bits, v);
    } else {
      double want = t_decode_finite(e5e, e5m, 2, 15);
      assert_true((double)b == (s ? -want : want));
      assert_int_equal(t_bits(b) >> 31, s);
      assert_int_equal(ampc_f32_to_e5m2(b, false).bits, v);
    }
  }
}

static void test_format_facts(void **state) {
  (void)state;
  ampc_format_info f;
  assert_int_equal(ampc_format_info_get(AMPC_F16, &f), AMPC_OK);
  assert_string_equal(f.name, "fp16");
  assert_true(f.max == 65504.0 && f.min_normal == 0x1p-14 && f.min_subnormal == 0x1p-24);
  assert_true(f.epsilon == 0x1p-10 && f.overflow_threshold == 65520.0);
  assert_true(f.underflow_threshold == 0x1p-25 && f.swallow_ratio == 0x1p-11);
  assert_int_equal(f.bits, 16);
  assert_int_equal(f.exponent_bits, 5);
  assert_int_equal(f.mantissa_bits, 10);
  assert_int_equal(f.bias, 15);

  assert_int_equal(ampc_format_info_get(AMPC_BF16, &f), AMPC_OK);
  assert_true(f.max == (double)t_f32(0x7F7F0000u) && f.min_normal == 0x1p-126);
  assert_true(f.min_subnormal == 0x1p-133 && f.epsilon == 0x1p-7);
  assert_true(f.overflow_threshold == (double)t_f32(0x7F7F8000u));
  assert_true(f.underflow_threshold == 0x1p-134 && f.swallow_ratio == 0x1p-8);

  assert_int_equal(ampc_format_info_get(AMPC_F8_E4M3, &f), AMPC_OK);
  assert_false(f.has_inf);
  assert_true(f.max == 448.0 && f.min_normal == 0x1p-6 && f.min_subnormal == 0x1p-9);
  assert_true(f.epsilon == 0.125 && f.overflow_threshold == (double)t_f32(0x43E80001u));
  assert_true(f.underflow_threshold == 0x1p-10 && f.swallow_ratio == 0x1p-4);

  assert_int_equal(ampc_format_info_get(AMPC_F8_E5M2, &f), AMPC_OK);
  assert_true(f.max == 57344.0 && f.min_normal == 0x1p-14 && f.min_subnormal == 0x1p-16);
  assert_true(f.epsilon == 0.25 && f.overflow_threshold == 61440.0);
  assert_true(f.underflow_threshold == 0x1p-17 && f.swallow_ratio == 0x1p-3);

  assert_int_equal(ampc_format_info_get(AMPC_F32, &f), AMPC_OK);
  assert_true(f.max == (double)FLT_MAX && f.min_normal == (double)FLT_MIN);
  assert_true(f.min_subnormal == 0x1p-149 && f.epsilon == (double)FLT_EPSILON);
  assert_true(f.overflow_threshold == 0x1p128 - 0x1p103);
  assert_true(f.underflow_threshold == 0x1p-150 && f.swallow_ratio == 0x1p-24);

  assert_int_equal(ampc_format_info_get((ampc_dtype)99, &f), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_format_info_get(AMPC_F16, NULL), AMPC_ERR_INVALID_ARG);
}

static void test_classify(void **state) {
  (void)state;
  assert_int_equal(ampc_classify(AMPC_F16, 0x8000), AMPC_CLASS_ZERO);
  assert_int_equal(ampc_classify(AMPC_F16, 0x03FF), AMPC_CLASS_SUBNORMAL);
  assert_int_equal(ampc_classify(AMPC_F16, 0x0400), AMPC_CLASS_NORMAL);
  assert_int_equal(ampc_classify(AMPC_F16, 0xFC00), AMPC_CLASS_INF);
  assert_int_equal(ampc_classify(AMPC_F16, 0x7C01), AMPC_CLASS_NAN);
  assert_int_equal(ampc_classify(AMPC_BF16, 0x0001), AMPC_CLASS_SUBNORMAL);
  assert_int_equal(ampc_classify(AMPC_BF16, 0x7F80), AMPC_CLASS_INF);
  assert_int_equal(ampc_classify(AMPC_F32, 0x7FC00000u), AMPC_CLASS_NAN);
  assert_int_equal(ampc_classify(AMPC_F32, 0x00000001u), AMPC_CLASS_SUBNORMAL);
  assert_int_equal(ampc_classify(AMPC_F8_E4M3, 0x7F), AMPC_CLASS_NAN);
  assert_int_equal(ampc_classify(AMPC_F8_E4M3, 0x78), AMPC_CLASS_NORMAL); /* 256 */
  assert_int_equal(ampc_classify(AMPC_F8_E4M3, 0x07), AMPC_CLASS_SUBNORMAL);
  assert_int_equal(ampc_classify(AMPC_F8_E5M2, 0x7C), AMPC_CLASS_INF);
  assert_int_equal(ampc_classify(AMPC_F8_E5M2, 0x7D), AMPC_CLASS_NAN);
  assert_string_equal(ampc_fpclass_name(AMPC_CLASS_SUBNORMAL), "subnormal");
}

static void test_dtype_names(void **state) {
  (void)state;
  ampc_dtype d;
  assert_int_equal(ampc_dtype_parse("fp16", &d), AMPC_OK);
  assert_int_equal(d, AMPC_F16);
  assert_int_equal(ampc_dtype_parse("BFloat16", &d), AMPC_OK);
  assert_int_equal(d, AMPC_BF16);
  assert_int_equal(ampc_dtype_parse("e5m2", &d), AMPC_OK);
  assert_int_equal(d, AMPC_F8_E5M2);
  assert_int_equal(ampc_dtype_parse("f12", &d), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "f12"));
  assert_int_equal(ampc_dtype_size(AMPC_F32), 4);
  assert_int_equal(ampc_dtype_size(AMPC_BF16), 2);
  assert_int_equal(ampc_dtype_size(AMPC_F8_E4M3), 1);
  assert_int_equal(ampc_dtype_size((ampc_dtype)7), 0);
  assert_string_equal(ampc_dtype_name(AMPC_F8_E4M3), "e4m3");
  /* values go into files: they must never change */
  assert_int_equal(AMPC_F32, 0);
  assert_int_equal(AMPC_F16, 1);
  assert_int_equal(AMPC_BF16, 2);
  assert_int_equal(AMPC_F8_E4M3, 3);
  assert_int_equal(AMPC_F8_E5M2, 4);
}

static void test_convert_errors(void **state) {
  (void)state;
  float x = 1.0f;
  uint16_t h = 0;
  assert_int_equal(ampc_convert(&h, (ampc_dtype)9, &x, AMPC_F32, 1), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "invalid dtype"));
  assert_int_equal(ampc_convert(NULL, AMPC_F16, &x, AMPC_F32, 1), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_convert(NULL, AMPC_F16, NULL, AMPC_F32, 0), AMPC_OK);
  assert_int_equal(ampc_convert_ex(&h, AMPC_F16, &x, AMPC_F32, 1, 0x80u), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_convert(&h, AMPC_F16, &x, AMPC_F32, 1), AMPC_OK);
  assert_int_equal(h, 0x3C00);
  uint8_t q = 0;
  float big = 1000.0f;
  assert_int_equal(ampc_convert_ex(&q, AMPC_F8_E4M3, &big, AMPC_F32, 1, AMPC_CONVERT_SATURATE),
                   AMPC_OK);
  assert_int_equal(q, 0x7E);
  assert_int_equal(ampc_convert(&q, AMPC_F8_E4M3, &big, AMPC_F32, 1), AMPC_OK);
  assert_int_equal(q, 0x7F);
  assert_string_equal(ampc_status_name(AMPC_ERR_IO), "i/o error");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16_edges),    cmocka_unit_test(test_bf16_edges),
      cmocka_unit_test(test_fp8_edges),    cmocka_unit_test(test_fp8_decode_all),
      cmocka_unit_test(test_format_facts), cmocka_unit_test(test_classify),
      cmocka_unit_test(test_dtype_names),  cmocka_unit_test(test_convert_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
