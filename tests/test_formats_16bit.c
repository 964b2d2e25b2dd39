/*
 * tests/test_formats_16bit.c: every one of the 2^16 binary16 and bfloat16
 * patterns decodes to the right FP32 (independent formula, and VCVTPH2PS where
 * the CPU has F16C) and round-trips through FP32 (NaNs come back quieted).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <immintrin.h>
#include <math.h>

#include "ampc/ampc.h"
#include "numeric/convert_impl.h"
#include "test_util.h"

__attribute__((target("avx,f16c"))) static uint32_t hw_f16_to_f32(uint16_t h) {
  return t_bits(_cvtsh_ss(h));
}

static void test_f16_decode_all(void **state) {
  (void)state;
  const int hw = ampc_cpu_has_avx2_f16c();
  if (!hw)
    print_message("no F16C on this CPU: hardware comparison skipped\n");
  for (uint32_t h = 0; h < 65536; h++) {
    const uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const uint32_t got = t_bits(ampc_f16_to_f32((ampc_f16){(uint16_t)h}));
    if (e == 31 && m) { /* NaN: sign, quiet bit, payload << 13 */
      assert_int_equal(got, (s << 31) | 0x7FC00000u | (m << 13));
    } else if (e == 31) {
      assert_int_equal(got, (s << 31) | 0x7F800000u);
    } else {
      double want = t_decode_finite(e, m, 10, 15);
      assert_true((double)t_f32(got) == (s ? -want : want));
      assert_int_equal(got >> 31, s);
    }
    if (hw && got != hw_f16_to_f32((uint16_t)h))
      fail_msg("f16 0x%04x: ampc 0x%08x, VCVTPH2PS 0x%08x", h, got, hw_f16_to_f32((uint16_t)h));
    /* round trip */
    const uint16_t back = ampc_f32_to_f16(t_f32(got)).bits;
    const uint16_t want_back = (uint16_t)((e == 31 && m) ? (h | 0x0200u) : h);
    if (back != want_back)
      fail_msg("f16 0x%04x round trip gave 0x%04x", h, back);
  }
}

static void test_bf16_decode_all(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    const uint32_t s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    const uint32_t got = t_bits(ampc_bf16_to_f32((ampc_bf16){(uint16_t)h}));
    assert_int_equal(got, h << 16); /* exact, payloads kept */
    if (e != 255) {
      double want = t_decode_finite(e, m, 7, 127);
      assert_true((double)t_f32(got) == (s ? -want : want));
    }
    const uint16_t back = ampc_f32_to_bf16(t_f32(got)).bits;
    const uint16_t want_back = (uint16_t)((e == 255 && m) ? (h | 0x0040u) : h);
    if (back != want_back)
      fail_msg("bf16 0x%04x round trip gave 0x%04x", h, back);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16_decode_all),
      cmocka_unit_test(test_bf16_decode_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
