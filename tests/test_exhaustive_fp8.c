/*
 * tests/test_exhaustive_fp8.c: all 2^32 FP32 patterns -> E4M3 and E5M2, in the
 * non-saturating and saturating modes, against an independent value-domain
 * oracle (test_util.h) plus the documented CUDA rules: NaN -> 0x7F; E4M3
 * results above 448 are NaN (or 448 saturated), E5M2 results above 57344 are
 * inf (or 57344 saturated); infinities follow the same rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ampc/ampc.h"
#include "exhaustive.h"
#include "test_util.h"

/* Expected (value, or a NaN marker) for one format and mode. */
static int fp8_ok(uint32_t x, uint8_t got, double decoded, int man, int emin, double max, int e4m3,
                  int sat) {
  const uint32_t ax = x & 0x7FFFFFFFu, sign = x >> 31;
  if (ax > 0x7F800000u)
    return got == 0x7F;
  double v = ax == 0x7F800000u ? (double)INFINITY : t_oracle_round(x, man, emin);
  if (v > max) {
    if (sat)
      v = max;
    else if (e4m3)
      return got == (uint8_t)((sign << 7) | 0x7Fu); /* NaN with the input's sign */
    else
      v = INFINITY;
  }
  return decoded == (sign ? -v : v) && (uint32_t)(got >> 7) == sign;
}

static uint64_t check_fp8(uint64_t start, uint32_t n, uint32_t *first) {
  uint64_t bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t x = (uint32_t)(start + i);
    const float f = t_f32(x);
    int ok = 1;
    for (int sat = 0; sat < 2; sat++) {
      const uint8_t a = ampc_f32_to_e4m3(f, sat).bits;
      const uint8_t b = ampc_f32_to_e5m2(f, sat).bits;
      ok &= fp8_ok(x, a, (double)ampc_e4m3_to_f32((ampc_f8_e4m3){a}), 3, -6, 448.0, 1, sat);
      ok &= fp8_ok(x, b, (double)ampc_e5m2_to_f32((ampc_f8_e5m2){b}), 2, -14, 57344.0, 0, sat);
    }
    if (!ok) {
      if (!bad)
        *first = x;
      bad++;
    }
  }
  return bad;
}

static void test_vs_oracle(void **state) {
  (void)state;
  assert_int_equal(t_run_all_f32("f32->e4m3/e5m2 (both modes) vs oracle", check_fp8), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_vs_oracle)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
