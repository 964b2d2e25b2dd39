/*
 * src/diag/inspect.c: what a format would do to stored tensors, counted
 * exactly (semantics in include/ampc/diag.h, "inspect").
 */
#include "internal.h"

#include <math.h>
#include <string.h>

#include "ampc/diag.h"
#include "numeric/numeric.h"

enum { SRC_F64, SRC_F32, SRC_F16, SRC_BF16, SRC_E4M3, SRC_E5M2 };

static int src_kind(const char *name) {
  static const char *const k[] = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"};
  for (int i = 0; i < (int)(sizeof k / sizeof k[0]); i++)
    if (strcmp(name, k[i]) == 0)
      return i;
  return -1;
}

static double load(int kind, const unsigned char *p, size_t i) {
  switch (kind) {
  case SRC_F64: {
    double d;
    memcpy(&d, p + 8 * i, 8);
    return d;
  }
  case SRC_F32: {
    uint32_t b;
    memcpy(&b, p + 4 * i, 4);
    return (double)ampc_bits_f32(b);
  }
  case SRC_F16:
  case SRC_BF16: {
    const uint16_t b = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    return (double)ampc_bits_f32(kind == SRC_F16 ? ampc_f16bits_to_f32bits(b)
                                                 : ampc_bf16bits_to_f32bits(b));
  }
  case SRC_E4M3: return (double)ampc_bits_f32(ampc_e4m3bits_to_f32bits(p[i]));
  default: return (double)ampc_bits_f32(ampc_e5m2bits_to_f32bits(p[i]));
  }
}

/* smallest normal and subnormal, largest finite value of each format (the
 * values ampc_format_info_get computes from the conversions; test_inspect
 * checks that they agree) */
typedef struct fmt_facts {
  double min_normal, min_subnormal, max;
} fmt_facts;

static int facts_of(ampc_dtype dt, fmt_facts *f) {
  switch (dt) {
  case AMPC_F32: *f = (fmt_facts){0x1p-126, 0x1p-149, 0x1.fffffep127}; return 0;
  case AMPC_F16: *f = (fmt_facts){0x1p-14, 0x1p-24, 65504.0}; return 0;
  case AMPC_BF16: *f = (fmt_facts){0x1p-126, 0x1p-133, 0x1.fep127}; return 0;
  case AMPC_F8_E4M3: *f = (fmt_facts){0x1p-6, 0x1p-9, 448.0}; return 0;
  case AMPC_F8_E5M2: *f = (fmt_facts){0x1p-14, 0x1p-16, 57344.0}; return 0;
  default: return -1;
  }
}

int ampc_inspect_facts_agree(void) {
  for (int d = 0; d < AMPC_DTYPE_COUNT; d++) {
    fmt_facts f;
    ampc_format_info fi;
    if (facts_of((ampc_dtype)d, &f) != 0 || ampc_format_info_get((ampc_dtype)d, &fi) != AMPC_OK ||
        f.min_normal != fi.min_normal || f.min_subnormal != fi.min_subnormal || f.max != fi.max)
      return 0;
  }
  return 1;
}

ampc_status ampc_inspect_values(ampc_inspect_stats *st, const void *data, const char *src_dtype,
                                size_t n, ampc_dtype fmt, double scale) {
  if (!st || !src_dtype || (!data && n > 0))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_inspect_values: NULL argument");
  if ((unsigned)fmt >= AMPC_DTYPE_COUNT)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_inspect_values: invalid format %d", (int)fmt);
  if (!(scale > 0) || !isfinite(scale))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_inspect_values: the scale must be positive and finite (got %g)", scale);
  const int kind = src_kind(src_dtype);
  if (kind < 0)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "dtype %s is not floating point (F64, F32, F16, BF16, F8_E4M3 and F8_E5M2 "
                     "are)",
                     src_dtype);
  fmt_facts fi;
  facts_of(fmt, &fi);
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    const double x = load(kind, p, i);
    st->count++;
    if (!isfinite(x)) {
      st->nonfinite++;
      continue;
    }
    if (x == 0.0) {
      st->zeros++;
      continue;
    }
    const double a = fabs(x);
    if (a > st->max_abs)
      st->max_abs = a;
    if (st->min_abs == 0.0 || a < st->min_abs)
      st->min_abs = a;
    int e;
    const double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    const int bin = e - 1 - AMPC_INSPECT_LOG2_MIN;
    st->hist[bin]++;
    if (m == 0.5)
      st->pow2[bin]++;
    const double v = a * scale; /* exact for a power-of-two scale in range */
    const double r = ampc_round_f64(fmt, v);
    if (!isfinite(r)) {
      st->overflow++;
      continue;
    }
    double err;
    if (r == 0.0) {
      st->flushed++;
      err = 1.0;
    } else {
      if (r < fi.min_normal)
        st->subnormal++;
      else
        st->normal++;
      err = fabs(r - v) / v;
    }
    st->err_n++;
    st->err_sum += err;
    if (err > st->err_max)
      st->err_max = err;
  }
  return AMPC_OK;
}

void ampc_inspect_merge(ampc_inspect_stats *into, const ampc_inspect_stats *from) {
  into->count += from->count;
  into->zeros += from->zeros;
  into->nonfinite += from->nonfinite;
  into->flushed += from->flushed;
  into->subnormal += from->subnormal;
  into->normal += from->normal;
  into->overflow += from->overflow;
  into->err_n += from->err_n;
  into->err_sum += from->err_sum;
  into->err_max = fmax(into->err_max, from->err_max);
  into->max_abs = fmax(into->max_abs, from->max_abs);
  if (from->min_abs > 0 && (into->min_abs == 0 || from->min_abs < into->min_abs))
    into->min_abs = from->min_abs;
  for (int i = 0; i < AMPC_INSPECT_BINS; i++) {
    into->hist[i] += from->hist[i];
    into->pow2[i] += from->pow2[i];
  }
}

uint64_t ampc_inspect_count_le_pow2(const ampc_inspect_stats *st, int m) {
  /* |x| <= 2^m: every bin below m, and the exact powers of two of bin m */
  uint64_t c = 0;
  const int top = m - AMPC_INSPECT_LOG2_MIN; /* bin of 2^m */
  for (int i = 0; i < AMPC_INSPECT_BINS && i < top; i++)
    c += st->hist[i];
  if (top >= 0 && top < AMPC_INSPECT_BINS)
    c += st->pow2[top];
  return c;
}

enum { K_LIMIT = 2200 };

ampc_inspect_range ampc_inspect_scale_range(const ampc_inspect_stats *st, ampc_dtype fmt,
                                            double max_flush, int *k_lo, int *k_hi) {
  *k_lo = -K_LIMIT, *k_hi = K_LIMIT;
  const uint64_t nz = st->count - st->zeros - st->nonfinite;
  fmt_facts fi;
  if (nz == 0 || st->max_abs == 0 || facts_of(fmt, &fi) != 0)
    return AMPC_INSPECT_RANGE_ANY;
  /* k_hi: from just above the format's top binade down to the first scale at
   * which max_abs still rounds to a finite value */
  int emax_f, emax_x;
  (void)frexp(fi.max, &emax_f);
  (void)frexp(st->max_abs, &emax_x);
  int k = emax_f - emax_x + 2;
  while (k > -K_LIMIT && !isfinite(ampc_round_f64(fmt, ldexp(st->max_abs, k))))
    k--;
  *k_hi = k > K_LIMIT ? K_LIMIT : k;
  /* k_lo: the values flushed at 2^k are those with |x| <= 2^(u - k), u =
   * log2 of half the smallest subnormal; the smallest k whose count is within
   * the allowance has the largest such m = u - k */
  int u;
  (void)frexp(fi.min_subnormal, &u); /* min_subnormal = 2^(u - 1) */
  u -= 2;
  const double f = max_flush < 0 ? 0 : max_flush > 1 ? 1 : max_flush;
  const uint64_t allow = (uint64_t)floor(f * (double)nz);
  int best = AMPC_INSPECT_LOG2_MIN - 1; /* |x| <= 2^(MIN-1): none */
  uint64_t c = 0;
  for (int i = 0; i < AMPC_INSPECT_BINS; i++) {
    const int m = AMPC_INSPECT_LOG2_MIN + i;
    if (c + st->pow2[i] <= allow)
      best = m;       /* count(|x| <= 2^m) = c + pow2[i] */
    c += st->hist[i]; /* count(|x| < 2^(m+1)): a lower bound for every larger m */
    if (c > allow)
      break;
  }
  if (c <= allow) /* every value may flush */
    *k_lo = -K_LIMIT;
  else {
    const int kl = u - best;
    *k_lo = kl < -K_LIMIT ? -K_LIMIT : kl > K_LIMIT ? K_LIMIT : kl;
  }
  return *k_lo <= *k_hi ? AMPC_INSPECT_RANGE_OK : AMPC_INSPECT_RANGE_EMPTY;
}
