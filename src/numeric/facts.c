/*
 * src/numeric/facts.c: classification of stored values and format facts.
 *
 * The facts (max, min normal, thresholds, ...) are found by running ampc's own
 * conversions: scanning bit patterns and bisecting over FP32 (or, for F32,
 * double) inputs. If a conversion were wrong, the facts would show it.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

#include "numeric/numeric.h"

ampc_fpclass ampc_classify(ampc_dtype dt, uint32_t bits) {
  uint32_t e, m, emax;
  switch (dt) {
  case AMPC_F32: e = (bits >> 23) & 0xFFu, m = bits & 0x7FFFFFu, emax = 0xFFu; break;
  case AMPC_F16: e = (bits >> 10) & 0x1Fu, m = bits & 0x3FFu, emax = 0x1Fu; break;
  case AMPC_BF16: e = (bits >> 7) & 0xFFu, m = bits & 0x7Fu, emax = 0xFFu; break;
  case AMPC_F8_E5M2: e = (bits >> 2) & 0x1Fu, m = bits & 0x3u, emax = 0x1Fu; break;
  case AMPC_F8_E4M3:
    if ((bits & 0x7Fu) == 0x7Fu)
      return AMPC_CLASS_NAN;
    e = (bits >> 3) & 0xFu, m = bits & 0x7u, emax = 0x100u; /* no inf/NaN exponent */
    break;
  default: return AMPC_CLASS_NAN;
  }
  if (e == emax)
    return m ? AMPC_CLASS_NAN : AMPC_CLASS_INF;
  if (e == 0)
    return m ? AMPC_CLASS_SUBNORMAL : AMPC_CLASS_ZERO;
  return AMPC_CLASS_NORMAL;
}

const char *ampc_fpclass_name(ampc_fpclass c) {
  static const char *const names[] = {[AMPC_CLASS_ZERO] = "zero",
                                      [AMPC_CLASS_SUBNORMAL] = "subnormal",
                                      [AMPC_CLASS_NORMAL] = "normal",
                                      [AMPC_CLASS_INF] = "inf",
                                      [AMPC_CLASS_NAN] = "nan"};
  return (unsigned)c <= AMPC_CLASS_NAN ? names[c] : "?";
}

/* Decode a stored pattern of dt to double (exact). */
static double decode(ampc_dtype dt, uint32_t p) {
  switch (dt) {
  case AMPC_F32: return (double)ampc_bits_f32(p);
  case AMPC_F16: return (double)ampc_bits_f32(ampc_f16bits_to_f32bits((uint16_t)p));
  case AMPC_BF16: return (double)ampc_bits_f32(ampc_bf16bits_to_f32bits((uint16_t)p));
  case AMPC_F8_E4M3: return (double)ampc_bits_f32(ampc_e4m3bits_to_f32bits((uint8_t)p));
  case AMPC_F8_E5M2: return (double)ampc_bits_f32(ampc_e5m2bits_to_f32bits((uint8_t)p));
  default: return NAN;
  }
}

/* Round an FP32 pattern into dt (non-saturating); returns the stored pattern. */
static uint32_t encode_f32(ampc_dtype dt, uint32_t x) {
  switch (dt) {
  case AMPC_F16: return ampc_f32bits_to_f16bits(x);
  case AMPC_BF16: return ampc_f32bits_to_bf16bits(x);
  case AMPC_F8_E4M3: return ampc_f32bits_to_e4m3bits(x, 0);
  case AMPC_F8_E5M2: return ampc_f32bits_to_e5m2bits(x, 0);
  default: return x;
  }
}

/* Round an FP32 pattern into dt (non-saturating) and decode the result. */
static double round_f32(ampc_dtype dt, uint32_t x) { return decode(dt, encode_f32(dt, x)); }

/* Round a positive double into dt: for F32 with the C conversion (RNE in the
 * default rounding mode), for the narrow formats via its FP32 value (exact for
 * every double the callers pass). */
static double round_any(ampc_dtype dt, double x) {
  float f = (float)x;
  return dt == AMPC_F32 ? (double)f : round_f32(dt, ampc_f32_bits(f));
}

static uint64_t dbl_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
static double bits_dbl(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* Input magnitude of the source format (FP32, or double for dt == F32) at
 * pattern p; positive magnitudes are monotonic in their bit patterns. */
static double src_at(ampc_dtype dt, uint64_t p) {
  return dt == AMPC_F32 ? bits_dbl(p) : (double)ampc_bits_f32((uint32_t)p);
}

ampc_status ampc_format_info_get(ampc_dtype dt, ampc_format_info *out) {
  static const struct {
    const char *name;
    int bits, eb, mb, bias, inf;
  } layout[AMPC_DTYPE_COUNT] = {
      [AMPC_F32] = {"fp32", 32, 8, 23, 127, 1},  [AMPC_F16] = {"fp16", 16, 5, 10, 15, 1},
      [AMPC_BF16] = {"bf16", 16, 8, 7, 127, 1},  [AMPC_F8_E4M3] = {"e4m3", 8, 4, 3, 7, 0},
      [AMPC_F8_E5M2] = {"e5m2", 8, 5, 2, 15, 1},
  };
  if ((unsigned)dt >= AMPC_DTYPE_COUNT)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_format_info_get: invalid dtype %d", (int)dt);
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_format_info_get: out is NULL");
  memset(out, 0, sizeof *out);
  out->dtype = dt;
  out->name = layout[dt].name;
  out->bits = layout[dt].bits;
  out->exponent_bits = layout[dt].eb;
  out->mantissa_bits = layout[dt].mb;
  out->bias = layout[dt].bias;
  out->has_inf = layout[dt].inf != 0;

  /* positive patterns run 1 .. top (sign bit clear) */
  const uint32_t top = dt == AMPC_F32 ? 0x7FFFFFFFu : (1u << (layout[dt].bits - 1)) - 1u;
  uint32_t p = top;
  while (p > 0 && ampc_classify(dt, p) >= AMPC_CLASS_INF)
    p--;
  out->max = decode(dt, p);
  for (p = 1; p <= top && ampc_classify(dt, p) != AMPC_CLASS_NORMAL; p++) {
  }
  out->min_normal = decode(dt, p);
  out->min_subnormal = decode(dt, 1);

  /* the pattern of 1.0 and its successor */
  const uint32_t one = encode_f32(dt, ampc_f32_bits(1.0f));
  out->epsilon = decode(dt, one + 1) - 1.0;

  /* bisect the source patterns for the first overflow and the last zero */
  const uint64_t src_inf = dt == AMPC_F32 ? dbl_bits(INFINITY) : 0x7F800000u;
  uint64_t lo = 0, hi = src_inf; /* round(lo) finite, round(hi) not */
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (isfinite(round_any(dt, src_at(dt, mid))))
      lo = mid;
    else
      hi = mid;
  }
  out->overflow_threshold = src_at(dt, hi);
  lo = 0, hi = src_inf; /* round(lo) == 0, round(hi) != 0 */
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (round_any(dt, src_at(dt, mid)) == 0.0)
      lo = mid;
    else
      hi = mid;
  }
  out->underflow_threshold = src_at(dt, lo);

  for (int k = 1; k < 64; k++) {
    double r = ldexp(1.0, -k);
    if (round_any(dt, 1.0 + r) == 1.0) {
      out->swallow_ratio = r;
      break;
    }
  }
  return AMPC_OK;
}

/* ---- one rounding from double (ampc inspect of F64 tensors) ---------------- */

double ampc_round_f64(ampc_dtype dt, double x) {
  /* p: stored fraction bits, emin: exponent of the smallest normal, max:
   * largest finite value (IEEE 754-2008 section 3.6 for binary16; the bfloat16
   * and OCP FP8 (OFP8, 2023) definitions for the others) */
  int p, emin;
  double max;
  bool has_inf = true;
  switch (dt) {
  case AMPC_F32: return isfinite(x) ? (double)(float)x : x; /* C11 F.6: nearest even */
  case AMPC_F16: p = 10, emin = -14, max = 65504.0; break;
  case AMPC_BF16: p = 7, emin = -126, max = ldexp(255.0, 120); break;
  case AMPC_F8_E4M3: p = 3, emin = -6, max = 448.0, has_inf = false; break;
  case AMPC_F8_E5M2: p = 2, emin = -14, max = 57344.0; break;
  default: return (double)NAN;
  }
  if (isnan(x))
    return x;
  const double a = fabs(x);
  if (isinf(a))
    return has_inf ? x : (double)NAN;
  if (a == 0.0)
    return x;
  int e;
  (void)frexp(a, &e); /* a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 */
  e -= 1;
  if (e > 1024 - 2)
    e = 1024 - 2; /* far past every format's range: overflows below */
  if (e < emin)
    e = emin; /* the subnormals' spacing */
  /* a / q scales by a power of two (exact); rint rounds to nearest even in
   * the default rounding mode; the carry to the next binade falls out */
  const double q = ldexp(1.0, e - p);
  const double r = rint(a / q) * q;
  if (r > max)
    return has_inf ? copysign((double)INFINITY, x) : (double)NAN;
  return copysign(r, x);
}
