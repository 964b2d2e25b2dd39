/*
 * tests/test_util.h: oracles and helpers shared by the format tests.
 *
 * The oracles are written differently from the library on purpose: they work
 * in the value domain with double arithmetic (scale by a power of two, round to
 * an integer with the 2^52 trick, which is round-to-nearest-even in the default
 * rounding mode, scale back), never on the bit layout of the target format.
 */
#ifndef AMPC_TEST_UTIL_H
#define AMPC_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static inline float t_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t t_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* 2^k as a double, built from its bits (valid for -1022 <= k <= 1023). */
static inline double t_pow2(int k) {
  uint64_t u = (uint64_t)(k + 1023) << 52;
  double d;
  memcpy(&d, &u, 8);
  return d;
}

/* Round the magnitude of a finite FP32 value (given as bits, sign ignored) to a
 * format with `man` fraction bits and minimum normal exponent `emin`, with an
 * unbounded exponent range above: the value an ideal RNE conversion gives
 * before overflow is considered. */
static inline double t_oracle_round(uint32_t xbits, int man, int emin) {
  uint32_t ax = xbits & 0x7FFFFFFFu;
  if (ax == 0)
    return 0.0;
  double v = (double)t_f32(ax);
  /* exponent k of v: v in [2^k, 2^(k+1)) */
  int k = (int)(ax >> 23) - 127;
  if ((ax >> 23) == 0) /* FP32 subnormal */
    k = -127;          /* any k < emin works: clamped below */
  if (k < emin)
    k = emin;
  const double ulp = t_pow2(k - man);
  const double q = v * t_pow2(man - k);   /* exact: scaling by a power of two */
  const double r = (q + 0x1p52) - 0x1p52; /* nearest integer, ties to even */
  return r * ulp;
}

/* Decode (sign-less) with an independent formula: m*2^(1-bias-man) for
 * subnormals, (1 + m/2^man)*2^(e-bias) for normals. */
static inline double t_decode_finite(uint32_t e, uint32_t m, int man, int bias) {
  if (e == 0)
    return ldexp((double)m, 1 - bias - man);
  return ldexp(1.0 + ldexp((double)m, -man), (int)e - bias);
}

#endif
