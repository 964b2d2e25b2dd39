/*
 * tests/test_store_stats.c: ampc_store_f32 counts exactly what rounding into
 * storage did, on hand-made arrays with known answers, and the AVX2 and
 * portable paths agree bit for bit (stores and counts) on every tail length.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "ampc/ampc.h"
#include "numeric/convert_impl.h"
#include "test_util.h"

static void test_known_counts_f16(void **state) {
  (void)state;
  const float x[] = {0.0f,     -0.0f, 1e-8f, -1e-8f,   1e-6f,    70000.0f, -65520.0f,
                     INFINITY, NAN,   -3.0f, 65519.0f, 0x1p-14f, 0x1p-25f, 0x1.8p-25f};
  enum { N = sizeof x / sizeof x[0] };
  ampc_f16 h[N];
  ampc_round_stats s;
  memset(&s, 0, sizeof s);
  assert_int_equal(ampc_store_f32(h, AMPC_F16, x, N, &s), AMPC_OK);
  assert_int_equal(s.count, N);
  assert_int_equal(s.underflow, 3); /* 1e-8, -1e-8, 2^-25 (tie to 0) */
  assert_int_equal(s.subnormal, 2); /* 1e-6, 1.5 * 2^-25 -> 2^-24 */
  assert_int_equal(s.overflow, 2);  /* 70000, -65520 */
  assert_int_equal(s.inf, 3);       /* the two overflows and the inf input */
  assert_int_equal(s.nan, 1);
  assert_true(s.max_abs == 70000.0f);
  /* the stores are ampc_convert's */
  ampc_f16 ref[N];
  assert_int_equal(ampc_convert(ref, AMPC_F16, x, AMPC_F32, N), AMPC_OK);
  assert_memory_equal(h, ref, sizeof h);
  /* counts accumulate across calls */
  assert_int_equal(ampc_store_f32(h, AMPC_F16, x, N, &s), AMPC_OK);
  assert_int_equal(s.count, 2 * N);
  assert_int_equal(s.underflow, 6);
}

static void test_known_counts_bf16_fp8_f32(void **state) {
  (void)state;
  const float x[] = {1e-39f, 3.4e38f, 1e-45f, 1.0f, -0.0f};
  ampc_bf16 b[5];
  ampc_round_stats s = {0};
  assert_int_equal(ampc_store_f32(b, AMPC_BF16, x, 5, &s), AMPC_OK);
  assert_int_equal(s.subnormal, 1); /* 1e-39 */
  assert_int_equal(s.overflow, 1);  /* 3.4e38 > bf16 max + half ulp */
  assert_int_equal(s.underflow, 1); /* 1e-45 = 2^-149 < 2^-134 */
  const float y[] = {500.0f, 0x1p-11f, 0x1p-8f, 1.0f};
  uint8_t q[4];
  ampc_round_stats t = {0};
  assert_int_equal(ampc_store_f32(q, AMPC_F8_E4M3, y, 4, &t), AMPC_OK);
  assert_int_equal(t.overflow, 1); /* 500 -> NaN in E4M3 */
  assert_int_equal(t.nan, 1);
  assert_int_equal(t.underflow, 1);
  assert_int_equal(t.subnormal, 1);
  float f[4];
  ampc_round_stats u = {0};
  const float z[] = {1e-40f, NAN, 2.0f, -5.0f};
  assert_int_equal(ampc_store_f32(f, AMPC_F32, z, 4, &u), AMPC_OK);
  assert_int_equal(u.subnormal, 1);
  assert_int_equal(u.nan, 1);
  assert_int_equal(u.underflow + u.overflow, 0);
  assert_true(u.max_abs == 5.0f);
  assert_int_equal(ampc_store_f32(f, (ampc_dtype)9, z, 4, &u), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_store_f32(NULL, AMPC_F16, z, 4, &u), AMPC_ERR_INVALID_ARG);
}

static uint64_t g_rng = 88172645463325252u;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)g_rng;
}

static void test_avx2_matches_portable(void **state) {
  (void)state;
  if (!ampc_cpu_has_avx2_f16c())
    skip();
  enum { MAXN = 4099 };
  static float x[MAXN];
  static uint16_t a[MAXN], b[MAXN];
  for (int dt = AMPC_F16; dt <= AMPC_BF16; dt++) {
    for (size_t n = 0; n < MAXN; n = n < 67 ? n + 1 : n * 2 + 1) {
      for (size_t i = 0; i < n; i++) {
        /* a mix: random patterns, and small/large magnitudes near each threshold */
        uint32_t r = rnd();
        x[i] = (r & 3) == 0 ? t_f32(rnd())
                            : ldexpf((float)(r >> 8) * 0x1p-24f, (int)(rnd() % 300) - 150);
      }
      ampc_round_stats sa = {0}, sb = {0};
      ampc_store_stats_avx2(a, (ampc_dtype)dt, x, n, &sa);
      ampc_store_stats_portable(b, (ampc_dtype)dt, x, n, &sb);
      assert_memory_equal(a, b, n * sizeof a[0] + (n == 0));
      assert_int_equal(sa.count, sb.count);
      assert_int_equal(sa.underflow, sb.underflow);
      assert_int_equal(sa.subnormal, sb.subnormal);
      assert_int_equal(sa.overflow, sb.overflow);
      assert_int_equal(sa.inf, sb.inf);
      assert_int_equal(sa.nan, sb.nan);
      assert_true(sa.max_abs == sb.max_abs);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_counts_f16),
      cmocka_unit_test(test_known_counts_bf16_fp8_f32),
      cmocka_unit_test(test_avx2_matches_portable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
