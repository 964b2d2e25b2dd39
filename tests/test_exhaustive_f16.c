/*
 * tests/test_exhaustive_f16.c: all 2^32 FP32 patterns -> binary16.
 *   1. the scalar reference equals the x86 F16C instruction VCVTPS2PH (imm 0)
 *      bit for bit (skipped, with a message, on CPUs without F16C);
 *   2. the scalar reference equals an independent value-domain oracle
 *      (test_util.h), with NaNs checked against the documented bit rule;
 *   3. the array kernels (AVX2 and portable) equal the scalar reference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <immintrin.h>
#include <stdlib.h>

#include "ampc/ampc.h"
#include "exhaustive.h"
#include "numeric/convert_impl.h"
#include "test_util.h"

enum { BLOCK = 1 << 16 };

__attribute__((target("avx,f16c"))) static uint64_t check_hw(uint64_t start, uint32_t n,
                                                             uint32_t *first) {
  uint64_t bad = 0;
  for (uint32_t i = 0; i < n; i += 8) {
    uint32_t xs[8];
    for (int j = 0; j < 8; j++)
      xs[j] = (uint32_t)(start + i + (uint32_t)j);
    __m128i hw = _mm256_cvtps_ph(_mm256_loadu_ps((const float *)(const void *)xs), 0);
    uint16_t hv[8];
    _mm_storeu_si128((__m128i *)hv, hw);
    for (int j = 0; j < 8; j++) {
      if (ampc_f32_to_f16(t_f32(xs[j])).bits != hv[j]) {
        if (!bad)
          *first = xs[j];
        bad++;
      }
    }
  }
  return bad;
}

static uint64_t check_oracle(uint64_t start, uint32_t n, uint32_t *first) {
  uint64_t bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t x = (uint32_t)(start + i);
    const uint32_t ax = x & 0x7FFFFFFFu, sign = x >> 31;
    const uint16_t h = ampc_f32_to_f16(t_f32(x)).bits;
    int ok;
    if (ax > 0x7F800000u) {
      ok = h == (uint16_t)((sign << 15) | 0x7E00u | ((ax >> 13) & 0x3FFu));
    } else {
      double v = ax == 0x7F800000u ? (double)INFINITY : t_oracle_round(x, 10, -14);
      if (v > 65504.0)
        v = INFINITY;
      const double got = (double)ampc_f16_to_f32((ampc_f16){h});
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
  k->f32_to_f16(dst, src, n);
  uint64_t bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (dst[i] != ampc_f32_to_f16(src[i]).bits) {
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

static void test_vs_f16c(void **state) {
  (void)state;
  if (!ampc_cpu_has_avx2_f16c()) {
    print_message("no F16C on this CPU: VCVTPS2PH comparison skipped\n");
    skip();
  }
  assert_int_equal(t_run_all_f32("f32->f16 scalar vs VCVTPS2PH", check_hw), 0);
}

static void test_vs_oracle(void **state) {
  (void)state;
  assert_int_equal(t_run_all_f32("f32->f16 scalar vs oracle", check_oracle), 0);
}

static void test_kernels(void **state) {
  (void)state;
  assert_int_equal(t_run_all_f32("f32->f16 portable kernel vs scalar", check_portable), 0);
  if (ampc_cpu_has_avx2_f16c())
    assert_int_equal(t_run_all_f32("f32->f16 avx2 kernel vs scalar", check_avx2), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vs_f16c),
      cmocka_unit_test(test_vs_oracle),
      cmocka_unit_test(test_kernels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
