/*
 * tests/test_fp8_scaling.c: FP8 delayed scaling (ampc/amp.h), the
 * cases of Transformer Engine's recipe: history lengths 1 and 31, "max" vs
 * "most_recent", margin 2, amax zero / tiny / normal / inf / NaN, the roll;
 * quantize / dequantize against the exact conversions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "ampc/amp.h"
#include "ampc/dtype.h"

static float upd(ampc_fp8_meta *m, ampc_dtype dt, float margin, ampc_amax_algo algo) {
  float used = -1;
  assert_int_equal(ampc_fp8_update(m, dt, margin, algo, &used), AMPC_OK);
  return used;
}

/* history length 1: the scale follows the last step's amax */
static void test_len1(void **state) {
  (void)state;
  ampc_fp8_meta m;
  assert_int_equal(ampc_fp8_meta_init(&m, 1), AMPC_OK);
  assert_true(m.scale == 1.0f && m.scale_inv == 1.0f && m.history[0] == 0.0f);
  ampc_fp8_record_amax(&m, 2.0f);
  ampc_fp8_record_amax(&m, 1.5f); /* the step's largest stays */
  assert_true(upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MAX) == 2.0f);
  assert_true(m.scale == 448.0f / 2.0f && m.scale_inv == 1.0f / (448.0f / 2.0f));
  assert_true(m.history[0] == 0.0f); /* rolled */
  ampc_fp8_record_amax(&m, 8.0f);
  assert_true(upd(&m, AMPC_F8_E5M2, 0, AMPC_AMAX_MOST_RECENT) == 8.0f);
  assert_true(m.scale == 57344.0f / 8.0f);
  ampc_fp8_meta_free(&m);
}

/* history length 31: an amax of 5 at step 1, then 1: "max" keeps 448/5 for
 * 31 updates (the window), "most_recent" drops to 448 at once */
static void test_len31_max_vs_most_recent(void **state) {
  (void)state;
  for (int a = 0; a < 2; a++) {
    const ampc_amax_algo algo = a ? AMPC_AMAX_MOST_RECENT : AMPC_AMAX_MAX;
    ampc_fp8_meta m;
    assert_int_equal(ampc_fp8_meta_init(&m, 31), AMPC_OK);
    for (int step = 1; step <= 40; step++) {
      ampc_fp8_record_amax(&m, step == 1 ? 5.0f : 1.0f);
      const float used = upd(&m, AMPC_F8_E4M3, 0, algo);
      const float want = (algo == AMPC_AMAX_MAX ? step <= 31 : step == 1) ? 5.0f : 1.0f;
      assert_true(used == want);
      assert_true(m.scale == 448.0f / want);
      if (step == 1) /* the roll: the step's amax at the end, a fresh history[0] */
        assert_true(m.history[30] == 5.0f && m.history[0] == 0.0f && m.history[29] == 0.0f);
    }
    ampc_fp8_meta_free(&m);
  }
}

/* margin 2: a quarter of the range is left as headroom */
static void test_margin(void **state) {
  (void)state;
  ampc_fp8_meta m;
  assert_int_equal(ampc_fp8_meta_init(&m, 4), AMPC_OK);
  ampc_fp8_record_amax(&m, 7.0f);
  upd(&m, AMPC_F8_E4M3, 2, AMPC_AMAX_MAX);
  assert_true(m.scale == (448.0f * 0.25f) / 7.0f);
  ampc_fp8_meta_free(&m);
}

/* amax zero, tiny, normal, inf, NaN */
static void test_amax_cases(void **state) {
  (void)state;
  ampc_fp8_meta m;
  assert_int_equal(ampc_fp8_meta_init(&m, 1), AMPC_OK);
  /* zero: nothing seen, the scale is kept (1 at the start) */
  assert_true(upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MAX) == 0.0f);
  assert_true(m.scale == 1.0f);
  /* normal */
  ampc_fp8_record_amax(&m, 3.5f);
  upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MAX);
  const float normal = 448.0f / 3.5f;
  assert_true(m.scale == normal);
  /* zero again: kept */
  upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MAX);
  assert_true(m.scale == normal);
  /* inf: kept (for both algorithms) */
  for (int a = 0; a < 2; a++) {
    m.history[0] = INFINITY;
    upd(&m, AMPC_F8_E4M3, 0, a ? AMPC_AMAX_MOST_RECENT : AMPC_AMAX_MAX);
    assert_true(m.scale == normal);
  }
  /* NaN: most_recent keeps the scale; max passes over it (fmaxf) */
  m.history[0] = NAN;
  assert_true(isnan(upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MOST_RECENT)));
  assert_true(m.scale == normal);
  m.history[0] = NAN;
  assert_true(upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MAX) == 0.0f);
  assert_true(m.scale == normal);
  ampc_fp8_record_amax(&m, NAN); /* recording a NaN amax leaves history[0] as it was */
  assert_true(m.history[0] == 0.0f);
  /* tiny: 1e-30 gives a finite 4.48e32; 1e-39 would overflow FP32: FLT_MAX */
  ampc_fp8_record_amax(&m, 1e-30f);
  upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MAX);
  assert_true(m.scale == 448.0f / 1e-30f && isfinite(m.scale));
  ampc_fp8_record_amax(&m, 1e-39f);
  upd(&m, AMPC_F8_E4M3, 0, AMPC_AMAX_MAX);
  assert_true(m.scale == FLT_MAX && m.scale_inv == 1.0f / FLT_MAX);
  ampc_fp8_meta_free(&m);
}

/* quantize = the saturating conversion of x * scale, amax recorded;
 * dequantize = the exact widening times scale_inv */
static void test_quantize_dequantize(void **state) {
  (void)state;
  enum { N = 4096 };
  static float x[N], y[N], xs[N];
  static uint8_t q[N], want[N];
  uint64_t r = 7;
  float amax = 0;
  for (int i = 0; i < N; i++) {
    r = r * 6364136223846793005u + 1442695040888963407u;
    x[i] = ldexpf((float)(r >> 40) / 16777216.0f - 0.5f, (int)((r >> 8) % 40) - 20);
    amax = fmaxf(amax, fabsf(x[i]));
  }
  x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = 1e6f, x[4] = -0.0f;
  for (int f = 0; f < 2; f++) {
    const ampc_dtype dt = f ? AMPC_F8_E5M2 : AMPC_F8_E4M3;
    ampc_fp8_meta m;
    assert_int_equal(ampc_fp8_meta_init(&m, 8), AMPC_OK);
    m.scale = 3.0f, m.scale_inv = 1.0f / 3.0f;
    assert_int_equal(ampc_fp8_quantize(q, dt, x, N, &m), AMPC_OK);
    for (int i = 0; i < N; i++)
      xs[i] = x[i] * m.scale;
    assert_int_equal(ampc_convert_ex(want, dt, xs, AMPC_F32, N, AMPC_CONVERT_SATURATE), AMPC_OK);
    assert_memory_equal(q, want, N);
    assert_true(m.history[0] == INFINITY); /* the infinities count, the NaN does not */
    /* saturation: 1e6 * 3 and +-inf become +-max; NaN stays NaN */
    float back[5];
    assert_int_equal(ampc_fp8_dequantize(back, q, dt, 5, &m), AMPC_OK);
    const float mx = f ? 57344.0f : 448.0f;
    assert_true(back[0] == mx * m.scale_inv && back[1] == -mx * m.scale_inv);
    assert_true(isnan(back[2]) && back[3] == mx * m.scale_inv);
    assert_true(back[4] == 0.0f && signbit(back[4]));
    assert_int_equal(ampc_fp8_dequantize(y, q, dt, N, &m), AMPC_OK);
    for (int i = 5; i < N; i++) {
      float w;
      assert_int_equal(ampc_convert(&w, AMPC_F32, &q[i], dt, 1), AMPC_OK);
      assert_true(y[i] == w * m.scale_inv);
    }
    ampc_fp8_meta_free(&m);
    ampc_fp8_meta_free(&m); /* twice is fine */
  }
  (void)amax;
}

static void test_bad_arguments(void **state) {
  (void)state;
  ampc_fp8_meta m;
  assert_int_equal(ampc_fp8_meta_init(&m, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_fp8_meta_init(NULL, 4), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_fp8_meta_init(&m, 4), AMPC_OK);
  assert_int_equal(ampc_fp8_update(&m, AMPC_F16, 0, AMPC_AMAX_MAX, NULL), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_fp8_update(&m, AMPC_F8_E4M3, -1, AMPC_AMAX_MAX, NULL),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_fp8_update(&m, AMPC_F8_E4M3, 0, (ampc_amax_algo)5, NULL),
                   AMPC_ERR_INVALID_ARG);
  float x = 1;
  uint8_t q;
  assert_int_equal(ampc_fp8_quantize(&q, AMPC_BF16, &x, 1, &m), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_fp8_quantize(NULL, AMPC_F8_E4M3, &x, 1, &m), AMPC_ERR_INVALID_ARG);
  ampc_fp8_meta_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_len1),
      cmocka_unit_test(test_len31_max_vs_most_recent),
      cmocka_unit_test(test_margin),
      cmocka_unit_test(test_amax_cases),
      cmocka_unit_test(test_quantize_dequantize),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
