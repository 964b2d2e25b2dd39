/*
 * tests/test_exhaustive_bf16.c: all 2^32 FP32 patterns -> bfloat16.
 *   1. the scalar reference equals an independent value-domain oracle
 *      (test_util.h); NaNs must stay NaN (quiet bit set, sign and top payload
 *      kept) and never become inf;
 *   2. the array kernels (AVX2 and portable) equal the scalar reference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ampc/ampc.h"
#include "exhaustive.h"
#include "numeric/convert_impl.h"
#include "test_util.h"

enum { BLOCK = 1 << 16 };

static uint64_t check_oracle(uint64_t start, uint32_t n, uint32_t *first) {
  const double bf16_max = (double)t_f32(0x7F7F0000u);
  uint64_t bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t x = (uint32_t)(start + i);
    const uint32_t ax = x & 0x7FFFFFFFu, sign = x >> 31;
    const uint16_t h = ampc_f32_to_bf16(t_f32(x)).bits;
    int ok;
    if (ax > 0x7F800000u) {
      ok = h == (uint16_t)((x >> 16) | 0x0040u) && (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu);
    } else {
      double v = ax == 0x7F800000u ? (double)INFINITY : t_oracle_round(x, 7, -126);
      if (v > bf16_max)
        v = INFINITY;
      const double got = (double)ampc_bf16_to_f32((ampc_bf16){h});
      ok = got == (sign ? -v : v) && (uint32_t)(h >> 15) == sign;
    }
    if (!ok) {
      if (!bad)
        *first = x;
      bad++;
    }
  }
  return bad;
}

static uint64_t check_kernel(const ampc_convert_kernels *k, uint64_t start, uint32_t n,
                             uint32_t *first) {
  static _Thread_local float src[BLOCK];
  static _Thread_local uint16_t dst[BLOCK];
  for (uint32_t i = 0; i < n; i++)
    src[i] = t_f32((uint32_t)(start + i));
  k->f32_to_bf16(dst, src, n);
  uint64_t bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (dst[i] != ampc_f32_to_bf16(src[i]).bits) {
      if (!bad)
        *first = (uint32_t)(start + i);
      bad++;
    }
  }
  return bad;
}
static uint64_t check_avx2(uint64_t s, uint32_t n, uint32_t *f) {
  return check_kernel(&ampc_convert_avx2, s, n, f);
}
static uint64_t check_portable(uint64_t s, uint32_t n, uint32_t *f) {
  return check_kernel(&ampc_convert_portable, s, n, f);
}

static void test_vs_oracle(void **state) {
  (void)state;
  assert_int_equal(t_run_all_f32("f32->bf16 scalar vs oracle", check_oracle), 0);
}

static void test_kernels(void **state) {
  (void)state;
  assert_int_equal(t_run_all_f32("f32->bf16 portable kernel vs scalar", check_portable), 0);
  if (ampc_cpu_has_avx2_f16c())
    assert_int_equal(t_run_all_f32("f32->bf16 avx2 kernel vs scalar", check_avx2), 0);
  else
    print_message("no AVX2 on this CPU: vector kernel comparison skipped\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vs_oracle),
      cmocka_unit_test(test_kernels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
