/*
 * tests/test_inspect.c: `ampc inspect`'s counting (ampc/diag.h "inspect")
 * and its pieces: one rounding from double (ampc_round_f64) against
 * ampc's FP32 conversions; the class counts of constructed tensors holding
 * the values at every band edge of each format, at scale 1 and at powers of
 * two, from F32 and F64 data; relative errors of known roundings; the auto
 * scale range on known cases; the safetensors reader's AMPC_ST_ANY_DTYPE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/diag.h"
#include "ampc/io.h"

static const ampc_dtype k_fmts[] = {AMPC_F16, AMPC_BF16, AMPC_F8_E4M3, AMPC_F8_E5M2};
enum { NFMT = 4 };

static float f32_of_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* the double value ampc_convert gives for the FP32 x in dt */
static double via_convert(ampc_dtype dt, float x) {
  unsigned char buf[4];
  float back;
  assert_int_equal(ampc_convert(buf, dt, &x, AMPC_F32, 1), AMPC_OK);
  assert_int_equal(ampc_convert(&back, AMPC_F32, buf, dt, 1), AMPC_OK);
  return (double)back;
}

static int same_value(double a, double b) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

/* On FP32 inputs, one rounding from double is ampc_convert: every 251st bit
 * pattern (17 million, both signs, all classes) and every band edge. */
static void test_round_f64_matches_convert(void **state) {
  (void)state;
  for (int f = 0; f < NFMT; f++) {
    const ampc_dtype dt = k_fmts[f];
    uint64_t bad = 0;
    for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += 251) {
      const float x = f32_of_bits((uint32_t)b);
      unsigned char buf[4];
      float back;
      ampc_convert(buf, dt, &x, AMPC_F32, 1);
      ampc_convert(&back, AMPC_F32, buf, dt, 1);
      if (!same_value(ampc_round_f64(dt, (double)x), (double)back) && bad++ < 5)
        print_error("%s: 0x%08x: %a vs %a\n", ampc_dtype_name(dt), (unsigned)b,
                    ampc_round_f64(dt, (double)x), (double)back);
    }
    assert_int_equal(bad, 0);
    ampc_format_info fi;
    assert_int_equal(ampc_format_info_get(dt, &fi), AMPC_OK);
    const double edges[] = {
        fi.min_subnormal,      fi.min_subnormal / 2,   fi.min_normal,        fi.max,
        fi.overflow_threshold, fi.underflow_threshold, 1.0 + fi.epsilon / 2, 1.0 + fi.epsilon};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
      for (int s = -1; s <= 1; s += 2)
        for (int d = -1; d <= 1; d++) {
          const float x = nextafterf((float)(s * edges[i]), d * INFINITY);
          assert_true(same_value(ampc_round_f64(dt, (double)x), via_convert(dt, x)));
        }
  }
  assert_int_equal(ampc_inspect_facts_agree(), 1);
  /* F32 itself: a double cast */
  assert_true(ampc_round_f64(AMPC_F32, 0x1.000001p0) == 1.0);
  assert_true(isinf(ampc_round_f64(AMPC_F32, 0x1.ffffffp127)));
  assert_true(isnan(ampc_round_f64((ampc_dtype)99, 1.0)));
}

/* Doubles that are not FP32 values round once: going through FP32 would give
 * another result (double rounding) at each of these. */
static void test_round_f64_single_rounding(void **state) {
  (void)state;
  /* just under binary16's overflow tie 65520: 65504, not inf */
  assert_true(ampc_round_f64(AMPC_F16, 65520.0 - 0x1p-30) == 65504.0);
  assert_true(isinf((double)ampc_f16_to_f32(ampc_f32_to_f16((float)(65520.0 - 0x1p-30)))));
  /* just over the tie between 1 and 1 + 2^-10: up */
  assert_true(ampc_round_f64(AMPC_F16, 1.0 + 0x1p-11 + 0x1p-40) == 1.0 + 0x1p-10);
  assert_true(ampc_round_f64(AMPC_F16, 1.0 + 0x1p-11) == 1.0); /* the tie: even */
  /* just above half the smallest subnormal: not flushed */
  assert_true(ampc_round_f64(AMPC_F16, 0x1p-25 + 0x1p-60) == 0x1p-24);
  assert_true(ampc_round_f64(AMPC_F16, 0x1p-25) == 0.0);
  assert_true(signbit(ampc_round_f64(AMPC_F16, -0x1p-26)));
  /* E4M3: 464 is the tie 448/480 (480 is NaN): even, 448; above it NaN */
  assert_true(ampc_round_f64(AMPC_F8_E4M3, 464.0) == 448.0);
  assert_true(isnan(ampc_round_f64(AMPC_F8_E4M3, 464.0 + 0x1p-40)));
  assert_true(isnan(ampc_round_f64(AMPC_F8_E4M3, INFINITY)));
  assert_true(ampc_round_f64(AMPC_F8_E5M2, -INFINITY) == -(double)INFINITY);
  /* bfloat16's largest finite value and its overflow tie */
  assert_true(ampc_round_f64(AMPC_BF16, 0x1.fep127) == 0x1.fep127);
  assert_true(isinf(ampc_round_f64(AMPC_BF16, 0x1.ffp127)));
  assert_true(ampc_round_f64(AMPC_BF16, 0x1.ffp127 - 0x1p90) == 0x1.fep127);
  /* doubles far outside every range */
  assert_true(isinf(ampc_round_f64(AMPC_F16, 1e300)));
  assert_true(ampc_round_f64(AMPC_F16, 1e-300) == 0.0);
  assert_true(ampc_round_f64(AMPC_F16, 0x1p-1074) == 0.0);
}

/* one constructed value and its class in the format at scale 1 */
typedef struct edge_case {
  double x;
  int cls; /* 0 zero, 1 nonfinite, 2 flushed, 3 subnormal, 4 normal, 5 overflow */
} edge_case;

static int build_edges(ampc_dtype dt, edge_case *e) {
  ampc_format_info fi;
  assert_int_equal(ampc_format_info_get(dt, &fi), AMPC_OK);
  const double half_sub = fi.min_subnormal / 2; /* the tie: rounds to 0 */
  int n = 0;
  /* the largest magnitude that does not overflow: E4M3's tie 464 rounds down
   * to 448; every other format's tie (max + half an ulp) overflows */
  const double ulp_max = ldexp(fi.epsilon, ilogb(fi.max)); /* the spacing at max */
  const double top_ok = nextafter(fi.max + ulp_max / 2, 0);
  const double tie = fi.max + ulp_max / 2;
  e[n++] = (edge_case){0.0, 0};
  e[n++] = (edge_case){-0.0, 0};
  e[n++] = (edge_case){INFINITY, 1};
  e[n++] = (edge_case){-INFINITY, 1};
  e[n++] = (edge_case){NAN, 1};
  e[n++] = (edge_case){half_sub / 4, 2};
  e[n++] = (edge_case){half_sub, 2};
  e[n++] = (edge_case){-half_sub, 2};
  e[n++] = (edge_case){nextafter(half_sub, 1), 3};
  e[n++] = (edge_case){fi.min_subnormal, 3};
  e[n++] = (edge_case){-fi.min_subnormal, 3};
  e[n++] = (edge_case){fi.min_normal - fi.min_subnormal, 3};
  /* just under min_normal but within half a subnormal step: rounds up to normal */
  e[n++] = (edge_case){fi.min_normal - fi.min_subnormal / 4, 4};
  e[n++] = (edge_case){fi.min_normal, 4};
  e[n++] = (edge_case){1.0, 4};
  e[n++] = (edge_case){fi.max, 4};
  e[n++] = (edge_case){-fi.max, 4};
  e[n++] = (edge_case){top_ok, 4};
  e[n++] = (edge_case){tie, dt == AMPC_F8_E4M3 ? 4 : 5};
  e[n++] = (edge_case){nextafter(tie, INFINITY), 5};
  e[n++] = (edge_case){-2 * fi.max, 5};
  return n;
}

static void check_counts(const ampc_inspect_stats *s, const uint64_t want[6]) {
  assert_int_equal(s->zeros, want[0]);
  assert_int_equal(s->nonfinite, want[1]);
  assert_int_equal(s->flushed, want[2]);
  assert_int_equal(s->subnormal, want[3]);
  assert_int_equal(s->normal, want[4]);
  assert_int_equal(s->overflow, want[5]);
  assert_int_equal(s->count, want[0] + want[1] + want[2] + want[3] + want[4] + want[5]);
  assert_int_equal(s->err_n, want[2] + want[3] + want[4]);
}

static ampc_inspect_stats g_st;

/* Every band edge of each format, as F64 data, at scale 1 and shifted by
 * 2^k (the values divided by 2^k, counted at scale 2^k: the same classes). */
static void test_band_edges(void **state) {
  (void)state;
  for (int f = 0; f < NFMT; f++) {
    const ampc_dtype dt = k_fmts[f];
    edge_case e[32];
    const int n = build_edges(dt, e);
    for (int k = -20; k <= 20; k += 5) {
      double x[32];
      uint64_t want[6] = {0};
      for (int i = 0; i < n; i++) {
        x[i] = ldexp(e[i].x, -k);
        want[e[i].cls]++;
      }
      memset(&g_st, 0, sizeof g_st);
      assert_int_equal(ampc_inspect_values(&g_st, x, "F64", (size_t)n, dt, ldexp(1.0, k)), AMPC_OK);
      check_counts(&g_st, want);
    }
    /* the same edges stored as F32 where FP32 holds them exactly (all do, but
     * the nextafter neighbours of the ties, which FP32 rounds) */
    float xf[32];
    uint64_t want[6] = {0};
    int m = 0;
    for (int i = 0; i < n; i++)
      if (isnan(e[i].x) || (double)(float)e[i].x == e[i].x) {
        xf[m++] = (float)e[i].x;
        want[e[i].cls]++;
      }
    memset(&g_st, 0, sizeof g_st);
    assert_int_equal(ampc_inspect_values(&g_st, xf, "F32", (size_t)m, dt, 1.0), AMPC_OK);
    check_counts(&g_st, want);
  }
}

/* F16, BF16 and FP8 data: every bit pattern of the source format, counted in
 * the same format at scale 1, classes as ampc_classify says (no flush, no
 * overflow); in F16 the count of subnormals is 2 x 1023. */
static void test_narrow_sources(void **state) {
  (void)state;
  static const struct {
    const char *st;
    ampc_dtype dt;
    int bytes;
  } src[] = {{"F16", AMPC_F16, 2},
             {"BF16", AMPC_BF16, 2},
             {"F8_E4M3", AMPC_F8_E4M3, 1},
             {"F8_E5M2", AMPC_F8_E5M2, 1}};
  static unsigned char buf[2 * 65536];
  for (int s = 0; s < 4; s++) {
    const uint32_t n = 1u << (8 * src[s].bytes);
    uint64_t want[6] = {0};
    for (uint32_t b = 0; b < n; b++) {
      buf[src[s].bytes * b] = (unsigned char)b;
      if (src[s].bytes == 2)
        buf[2 * b + 1] = (unsigned char)(b >> 8);
      const ampc_fpclass c = ampc_classify(src[s].dt, b);
      want[c == AMPC_CLASS_ZERO        ? 0
           : c == AMPC_CLASS_SUBNORMAL ? 3
           : c == AMPC_CLASS_NORMAL    ? 4
                                       : 1]++;
    }
    memset(&g_st, 0, sizeof g_st);
    assert_int_equal(ampc_inspect_values(&g_st, buf, src[s].st, n, src[s].dt, 1.0), AMPC_OK);
    check_counts(&g_st, want);
    assert_true(g_st.err_sum == 0.0 && g_st.err_max == 0.0);
    if (src[s].dt == AMPC_F16)
      assert_int_equal(g_st.subnormal, 2 * 1023);
  }
}

/* Relative errors of known roundings, and the log2 histogram. */
static void test_rel_error_and_hist(void **state) {
  (void)state;
  /* 1 + 2^-11 (the tie: to 1), 1 + 3 2^-12 (to 1 + 2^-10), 3 (exact), 2^-26 (flushed) */
  const double x[] = {1.0 + 0x1p-11, 1.0 + 3 * 0x1p-12, 3.0, 0x1p-26};
  memset(&g_st, 0, sizeof g_st);
  assert_int_equal(ampc_inspect_values(&g_st, x, "F64", 4, AMPC_F16, 1.0), AMPC_OK);
  const double e0 = 0x1p-11 / (1.0 + 0x1p-11), e1 = 0x1p-12 / (1.0 + 3 * 0x1p-12);
  assert_true(g_st.err_max == 1.0);
  assert_true(fabs(g_st.err_sum - (e0 + e1 + 0.0 + 1.0)) <= 4 * 0x1p-52);
  assert_int_equal(g_st.err_n, 4);
  assert_true(g_st.max_abs == 3.0 && g_st.min_abs == 0x1p-26);
  /* floor(log2): 0, 0, 1, -26; the power of two 2^-26 counted in pow2 */
  assert_int_equal(g_st.hist[0 - AMPC_INSPECT_LOG2_MIN], 2);
  assert_int_equal(g_st.hist[1 - AMPC_INSPECT_LOG2_MIN], 1);
  assert_int_equal(g_st.hist[-26 - AMPC_INSPECT_LOG2_MIN], 1);
  assert_int_equal(g_st.pow2[-26 - AMPC_INSPECT_LOG2_MIN], 1);
  assert_int_equal(g_st.pow2[0 - AMPC_INSPECT_LOG2_MIN], 0);
  /* the extremes of double */
  const double ext[] = {0x1p-1074, 0x1.fffffffffffffp1023};
  memset(&g_st, 0, sizeof g_st);
  assert_int_equal(ampc_inspect_values(&g_st, ext, "F64", 2, AMPC_BF16, 1.0), AMPC_OK);
  assert_int_equal(g_st.hist[0], 1);
  assert_int_equal(g_st.hist[AMPC_INSPECT_BINS - 1], 1);
  assert_int_equal(g_st.flushed, 1);
  assert_int_equal(g_st.overflow, 1);
  assert_int_equal(ampc_inspect_count_le_pow2(&g_st, -1074), 1);
  assert_int_equal(ampc_inspect_count_le_pow2(&g_st, -1075), 0);
  assert_int_equal(ampc_inspect_count_le_pow2(&g_st, 1024), 2);
}

/* The flushed count at 2^k equals count(|x| <= 2^(u - k)) for random data
 * over 60 binades, every k; merging two halves gives the whole. */
static void test_flush_formula(void **state) {
  (void)state;
  enum { N = 20000 };
  static float x[N];
  uint64_t r = 12345;
  for (int i = 0; i < N; i++) {
    r = r * 6364136223846793005u + 1442695040888963407u;
    const double m = 1.0 + (double)(r >> 40) / 0x1p24;
    x[i] = (float)ldexp((r & 1) ? -m : m, (int)((r >> 8) % 60) - 50);
    if (i % 100 == 0)
      x[i] = (float)ldexp(1.0, (int)((r >> 8) % 60) - 50); /* exact powers of two */
  }
  for (int f = 0; f < NFMT; f++) {
    const ampc_dtype dt = k_fmts[f];
    ampc_format_info fi;
    ampc_format_info_get(dt, &fi);
    const int u = (int)lrint(log2(fi.min_subnormal)) - 1;
    for (int k = -10; k <= 60; k++) {
      ampc_inspect_stats a, b;
      memset(&a, 0, sizeof a);
      memset(&b, 0, sizeof b);
      assert_int_equal(ampc_inspect_values(&a, x, "F32", N / 2, dt, ldexp(1.0, k)), AMPC_OK);
      assert_int_equal(ampc_inspect_values(&b, x + N / 2, "F32", N / 2, dt, ldexp(1.0, k)),
                       AMPC_OK);
      ampc_inspect_merge(&a, &b);
      memset(&g_st, 0, sizeof g_st);
      assert_int_equal(ampc_inspect_values(&g_st, x, "F32", N, dt, ldexp(1.0, k)), AMPC_OK);
      assert_int_equal(a.flushed, g_st.flushed);
      assert_int_equal(a.overflow, g_st.overflow);
      assert_int_equal(a.subnormal, g_st.subnormal);
      assert_true(memcmp(a.hist, g_st.hist, sizeof a.hist) == 0);
      assert_int_equal(g_st.flushed, ampc_inspect_count_le_pow2(&g_st, u - k));
    }
  }
}

static ampc_inspect_range range_of(const double *x, size_t n, ampc_dtype dt, double max_flush,
                                   int *lo, int *hi) {
  memset(&g_st, 0, sizeof g_st);
  assert_int_equal(ampc_inspect_values(&g_st, x, "F64", n, dt, 1.0), AMPC_OK);
  return ampc_inspect_scale_range(&g_st, dt, max_flush, lo, hi);
}

/* The auto scale range on known cases, and that its ends hold: at 2^k_hi no
 * overflow and at 2^(k_hi + 1) one; at 2^k_lo within the allowance, at
 * 2^(k_lo - 1) over it. */
static void test_scale_range(void **state) {
  (void)state;
  int lo, hi;
  const double one = 1.0;
  assert_int_equal(range_of(&one, 1, AMPC_F16, 0, &lo, &hi), AMPC_INSPECT_RANGE_OK);
  assert_int_equal(hi, 15);  /* 2^15 < 65520 <= 2^16 */
  assert_int_equal(lo, -24); /* 2^-24 rounds to itself; 2^-25 to 0 */
  assert_int_equal(range_of(&one, 1, AMPC_BF16, 0, &lo, &hi), AMPC_INSPECT_RANGE_OK);
  assert_int_equal(hi, 127);
  assert_int_equal(lo, -133);
  assert_int_equal(range_of(&one, 1, AMPC_F8_E4M3, 0, &lo, &hi), AMPC_INSPECT_RANGE_OK);
  assert_int_equal(hi, 8); /* 256 <= 448 < 512 */
  assert_int_equal(lo, -9);
  assert_int_equal(range_of(&one, 1, AMPC_F8_E5M2, 0, &lo, &hi), AMPC_INSPECT_RANGE_OK);
  assert_int_equal(hi, 15);
  assert_int_equal(lo, -16);
  const double f16max = 65504.0, f16tie = 65520.0, e4tie = 464.0, e4over = 465.0;
  range_of(&f16max, 1, AMPC_F16, 0, &lo, &hi);
  assert_int_equal(hi, 0);
  range_of(&f16tie, 1, AMPC_F16, 0, &lo, &hi);
  assert_int_equal(hi, -1);
  range_of(&e4tie, 1, AMPC_F8_E4M3, 0, &lo, &hi);
  assert_int_equal(hi, 0);
  range_of(&e4over, 1, AMPC_F8_E4M3, 0, &lo, &hi);
  assert_int_equal(hi, -1);
  /* 2^-25 is the tie that flushes: it needs 2^1 */
  const double tiny = 0x1p-25, tiny_up = 0x1p-25 + 0x1p-60;
  range_of(&tiny, 1, AMPC_F16, 0, &lo, &hi);
  assert_int_equal(lo, 1);
  range_of(&tiny_up, 1, AMPC_F16, 0, &lo, &hi);
  assert_int_equal(lo, 0);
  /* an allowance: 1000 values near 1 and one at 2^-40 */
  static double x[1001];
  for (int i = 0; i < 1000; i++)
    x[i] = 1.0 + i / 1024.0;
  x[1000] = 0x1p-40;
  range_of(x, 1001, AMPC_F16, 0, &lo, &hi);
  assert_int_equal(lo, 16); /* 2^-40 2^k > 2^-25 */
  assert_int_equal(hi, 15); /* max 1.9756: 64736 at 2^15, overflow at 2^16 */
  assert_int_equal(range_of(x, 1001, AMPC_F16, 0, &lo, &hi), AMPC_INSPECT_RANGE_EMPTY);
  assert_int_equal(range_of(x, 1001, AMPC_F16, 1e-3, &lo, &hi), AMPC_INSPECT_RANGE_OK);
  assert_int_equal(lo, -24); /* one value of 1001 may flush: the rest start at 1 */
  assert_int_equal(hi, 15);
  /* nothing finite and non-zero: any scale */
  const double z[] = {0.0, NAN, -INFINITY};
  assert_int_equal(range_of(z, 3, AMPC_F16, 0, &lo, &hi), AMPC_INSPECT_RANGE_ANY);
  /* the ends hold on random data for every format */
  for (int f = 0; f < NFMT; f++) {
    const ampc_dtype dt = k_fmts[f];
    static double y[5000];
    uint64_t r = 99 + (uint64_t)f;
    for (int i = 0; i < 5000; i++) {
      r = r * 6364136223846793005u + 1442695040888963407u;
      y[i] = ldexp(1.0 + (double)(r >> 40) / 0x1p24, (int)((r >> 8) % 12) - 20);
    }
    for (int t = 0; t < 3; t++) {
      const double mf = t == 0 ? 0 : t == 1 ? 1e-3 : 0.05;
      range_of(y, 5000, dt, mf, &lo, &hi);
      const uint64_t allow = (uint64_t)floor(mf * 5000);
      ampc_inspect_stats s;
      memset(&s, 0, sizeof s);
      ampc_inspect_values(&s, y, "F64", 5000, dt, ldexp(1.0, hi));
      assert_int_equal(s.overflow, 0);
      memset(&s, 0, sizeof s);
      ampc_inspect_values(&s, y, "F64", 5000, dt, ldexp(1.0, hi + 1));
      assert_true(s.overflow > 0);
      memset(&s, 0, sizeof s);
      ampc_inspect_values(&s, y, "F64", 5000, dt, ldexp(1.0, lo));
      assert_true(s.flushed <= allow);
      memset(&s, 0, sizeof s);
      ampc_inspect_values(&s, y, "F64", 5000, dt, ldexp(1.0, lo - 1));
      assert_true(s.flushed > allow);
    }
  }
}

static void test_bad_arguments(void **state) {
  (void)state;
  const int64_t i64 = 7;
  const double one = 1.0;
  memset(&g_st, 0, sizeof g_st);
  assert_int_equal(ampc_inspect_values(&g_st, &i64, "I64", 1, AMPC_F16, 1.0), AMPC_ERR_UNSUPPORTED);
  assert_non_null(strstr(ampc_last_error(), "I64"));
  assert_int_equal(ampc_inspect_values(&g_st, &one, "F64", 1, AMPC_F16, 0.0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_inspect_values(&g_st, &one, "F64", 1, AMPC_F16, INFINITY),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_inspect_values(&g_st, &one, "F64", 1, (ampc_dtype)7, 1.0),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_inspect_values(&g_st, NULL, "F64", 1, AMPC_F16, 1.0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(g_st.count, 0);
}

/* A file with F64, I64 and F16 tensors (written by hand: ampc writes only its
 * own dtypes): refused by the plain reader, read with AMPC_ST_ANY_DTYPE. */
static void test_reader_any_dtype(void **state) {
  (void)state;
  const char *hdr = "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                    "\"n\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]},"
                    "\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[24,26]}}";
  unsigned char img[512];
  const uint64_t hl = strlen(hdr);
  for (int i = 0; i < 8; i++)
    img[i] = (unsigned char)(hl >> (8 * i));
  memcpy(img + 8, hdr, hl);
  const double a[2] = {0.5, -3e-30};
  const int64_t nn = 42;
  const uint16_t h = 0x3C00;
  memcpy(img + 8 + hl, a, 16);
  memcpy(img + 8 + hl + 16, &nn, 8);
  memcpy(img + 8 + hl + 24, &h, 2);
  const size_t size = 8 + hl + 26;
  ampc_safetensors *f = NULL;
  assert_int_equal(ampc_safetensors_read_mem(img, size, "t.safetensors", &f), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "'F64' is not supported"));
  assert_int_equal(ampc_safetensors_read_mem_ex(img, size, "t.safetensors", AMPC_ST_ANY_DTYPE, &f),
                   AMPC_OK);
  assert_int_equal(ampc_safetensors_count(f), 3);
  const ampc_st_tensor *t = ampc_safetensors_find(f, "a");
  assert_true(t->dtype == AMPC_ST_OTHER && strcmp(t->dtype_name, "F64") == 0);
  assert_int_equal(t->elem_size, 8);
  memset(&g_st, 0, sizeof g_st);
  assert_int_equal(ampc_inspect_values(&g_st, t->data, t->dtype_name, 2, AMPC_F16, 1.0), AMPC_OK);
  assert_int_equal(g_st.normal, 1);
  assert_int_equal(g_st.flushed, 1);
  t = ampc_safetensors_find(f, "n");
  assert_true(t->dtype == AMPC_ST_OTHER && strcmp(t->dtype_name, "I64") == 0);
  t = ampc_safetensors_find(f, "h");
  assert_true(t->dtype == AMPC_F16 && strcmp(t->dtype_name, "F16") == 0 && t->elem_size == 2);
  ampc_safetensors_free(f);
  /* a dtype the format does not have is refused either way */
  char bad[512];
  snprintf(bad, sizeof bad, "%s", hdr);
  memcpy(strstr(bad, "I64"), "Q64", 3);
  memcpy(img + 8, bad, hl);
  assert_int_equal(ampc_safetensors_read_mem_ex(img, size, "t.safetensors", AMPC_ST_ANY_DTYPE, &f),
                   AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "'Q64' is not a safetensors dtype"));
  /* the newer ones ampc does not compute in are read as other dtypes */
  memcpy(strstr(bad, "Q64"), "C64", 3);
  memcpy(img + 8, bad, hl);
  assert_int_equal(ampc_safetensors_read_mem_ex(img, size, "t.safetensors", AMPC_ST_ANY_DTYPE, &f),
                   AMPC_OK);
  assert_true(strcmp(ampc_safetensors_find(f, "n")->dtype_name, "C64") == 0);
  ampc_safetensors_free(f);
}

/* ---- --write-files DIR: inputs of tests/check_inspect.sh ----------------------- */

/* a safetensors image by hand (ampc writes only its own dtypes): n tensors of
 * dtype names dt, one dimension each, data concatenated */
static int write_raw(const char *dir, const char *file, int n, const char *const *names,
                     const char *const *dt, const size_t *esize, const size_t *count,
                     const void *const *data, const char *meta) {
  char hdr[4096], path[4096];
  size_t hl = 0, off = 0;
  hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "{");
  if (meta)
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "\"__metadata__\":%s%s", meta, n ? "," : "");
  for (int i = 0; i < n; i++) {
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl,
                           "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                           i ? "," : "", names[i], dt[i], count[i], off, off + esize[i] * count[i]);
    off += esize[i] * count[i];
  }
  hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}");
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "wb");
  if (!f)
    return 1;
  unsigned char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  fwrite(len, 1, 8, f);
  fwrite(hdr, 1, hl, f);
  for (int i = 0; i < n; i++)
    fwrite(data[i], esize[i], count[i], f);
  return fclose(f) != 0;
}

static int write_files(const char *dir) {
  /* grad/vision.w (F64): nonzero finite 1, 2^-25, 2^-30, 3, -2, 0.5; safe
   * binary16 scales 2^6 (2^-30 2^5 is the tie 2^-25) .. 2^14 (3 2^15 overflows).
   * grad/text.w (F32): 1000, 1e-3: 2^-15 .. 2^6. act/vision.x (BF16) 1, 2;
   * act/text.h (F16) 65504, 2^-24. The file's safe range: exactly 2^6. */
  const double gv[8] = {1.0, 0x1p-25, 0x1p-30, 0.0, (double)NAN, 3.0, -2.0, 0.5};
  const float gt[2] = {1000.0f, 1e-3f};
  const uint16_t av[2] = {0x3F80, 0x4000}, ah[2] = {0x7BFF, 0x0001};
  const char *const names[4] = {"grad/vision.w", "grad/text.w", "act/vision.x", "act/text.h"};
  const char *const dts[4] = {"F64", "F32", "BF16", "F16"};
  const size_t es[4] = {8, 4, 2, 2}, cn[4] = {8, 2, 2, 2};
  const void *const dp[4] = {gv, gt, av, ah};
  int bad = write_raw(dir, "mixed.safetensors", 4, names, dts, es, cn, dp, NULL);
  /* the two gradients again, as a dump under a GradScaler of 2^16 records it */
  bad |= write_raw(dir, "scaled.safetensors", 2, names, dts, es, cn, dp,
                   "{\"loss_scale\":\"65536.0\"}");
  /* the two gradients named PyTorch-style (NAME.grad), and the same values
   * named as weights: only the names tell gradients from weights */
  const char *const n3[2] = {"vision.w.grad", "text.w.grad"}, *const n4[2] = {"vision.w", "text.w"};
  bad |= write_raw(dir, "dotgrad.safetensors", 2, n3, dts, es, cn, dp, NULL);
  bad |= write_raw(dir, "weights.safetensors", 2, n4, dts, es, cn, dp, NULL);
  /* an integer tensor among floats */
  const int64_t step = 7;
  const char *const n2[2] = {"grad/vision.w", "step"};
  const char *const d2[2] = {"F64", "I64"};
  const size_t e2[2] = {8, 8}, c2[2] = {8, 1};
  const void *const p2[2] = {gv, &step};
  bad |= write_raw(dir, "ints.safetensors", 2, n2, d2, e2, c2, p2, NULL);
  bad |= write_raw(dir, "none.safetensors", 0, NULL, NULL, NULL, NULL, NULL, NULL);
  if (bad)
    fprintf(stderr, "test_inspect --write-files: cannot write into %s\n", dir);
  return bad;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-files") == 0)
    return write_files(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_f64_matches_convert),
      cmocka_unit_test(test_round_f64_single_rounding),
      cmocka_unit_test(test_band_edges),
      cmocka_unit_test(test_narrow_sources),
      cmocka_unit_test(test_rel_error_and_hist),
      cmocka_unit_test(test_flush_formula),
      cmocka_unit_test(test_scale_range),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_reader_any_dtype),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
