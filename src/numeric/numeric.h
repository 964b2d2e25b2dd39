/*
 * src/numeric/numeric.h: bit-level scalar conversions, inline, for the library's
 * own kernels (GEMM packing, layer epilogues) and for the public wrappers in
 * scalar.c. Semantics are documented in include/ampc/dtype.h.
 *
 * All functions work on raw bit patterns (uint32_t for FP32) so that no
 * floating-point operation can change a NaN payload or raise a trap on the way.
 */
#ifndef AMPC_NUMERIC_H
#define AMPC_NUMERIC_H

#include <stdint.h>
#include <string.h>

#include "ampc/dtype.h"
#include "ampc/tally.h"

static inline uint32_t ampc_f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float ampc_bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Round the low `shift` bits of m away, to nearest, ties to even.
 * 1 <= shift <= 31. The result may carry into bit (width - shift). */
static inline uint32_t ampc_rne_shift(uint32_t m, unsigned shift) {
  uint32_t q = m >> shift;
  uint32_t rem = m & ((UINT32_C(1) << shift) - 1u);
  uint32_t half = UINT32_C(1) << (shift - 1u);
  return q + (uint32_t)(rem > half || (rem == half && (q & 1u)));
}

/* ---- binary16 ---- */

static inline uint16_t ampc_f32bits_to_f16bits(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) /* NaN: quiet it, keep the top 9 payload bits */
    return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x03FFu));
  if (ax >= 0x477FF000u) /* >= 65520 = 65504 + half an ulp: inf (ties to even) */
    return (uint16_t)(sign | 0x7C00u);
  if (ax >= 0x38800000u) { /* >= 2^-14: normal; the rounding carry may bump the exponent */
    uint32_t r = ax + 0x0FFFu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
  }
  if (ax <= 0x33000000u) /* <= 2^-25 = half the smallest subnormal: zero */
    return (uint16_t)sign;
  /* subnormal result: value = m * 2^(e - 150), unit 2^-24 -> q = m >> (126 - e) */
  const uint32_t e = ax >> 23; /* 102..112 here (smaller exponents returned above) */
  const uint32_t m = (ax & 0x007FFFFFu) | 0x00800000u;
  return (uint16_t)(sign | ampc_rne_shift(m, 126u - e));
}

static inline uint32_t ampc_f16bits_to_f32bits(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x03FFu;
  if (e == 0x1Fu) /* inf, or NaN (quieted, as VCVTPH2PS does) */
    return sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u);
  if (e != 0)
    return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0)
    return sign;
  /* subnormal: normalise m * 2^-24 */
  unsigned lz = 0;
  uint32_t mm = m;
  while (!(mm & 0x0400u)) {
    mm <<= 1;
    lz++;
  }
  return sign | ((113u - lz) << 23) | ((mm & 0x03FFu) << 13);
}

/* ---- bfloat16 ---- */

static inline uint16_t ampc_f32bits_to_bf16bits(uint32_t x) {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: never let rounding reach inf */
    return (uint16_t)((x >> 16) | 0x0040u);
  return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

static inline uint32_t ampc_bf16bits_to_f32bits(uint16_t h) { return (uint32_t)h << 16; }

/* ---- FP8 (semantics of CUDA cuda_fp8.h, host path) ---- */

/* Generic FP32 -> FP8 for E4M3 (man = 3, bias = 7) and E5M2 (man = 2, bias = 15).
 * ovf_bits: the largest FP32 magnitude (as bits) that still rounds to a finite
 * value; above it the result is the overflow code. */
static inline uint8_t ampc_f32bits_to_f8bits(uint32_t x, unsigned man, unsigned bias,
                                             uint32_t ovf_bits, uint8_t maxnorm, uint8_t ovf_code) {
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) /* NaN: CUDA canonicalises it, sign dropped */
    return 0x7Fu;
  if (ax > ovf_bits) /* includes inf */
    return (uint8_t)(sign | (ovf_code ? ovf_code : maxnorm));
  const int32_t e = (int32_t)(ax >> 23) - 127; /* unbiased (FP32 subnormals: tiny, see below) */
  const int32_t emin = 1 - (int32_t)bias;
  const uint32_t m = (ax & 0x007FFFFFu) | (ax >= 0x00800000u ? 0x00800000u : 0u);
  if (e >= emin) { /* normal: keep `man` fraction bits; carries bump the exponent */
    uint32_t r = ampc_rne_shift(ax, 23u - man); /* rounds exponent+fraction as one integer */
    return (uint8_t)(sign | (r - ((uint32_t)(127 - (int32_t)bias) << man)));
  }
  /* subnormal or zero: unit 2^(emin - man); value = m * 2^(e - 23) */
  const int32_t shift = (23 - (int32_t)man) + (emin - e);
  if (shift > 25) /* below half the smallest subnormal (and all FP32 subnormals) */
    return (uint8_t)sign;
  return (uint8_t)(sign | ampc_rne_shift(m, (unsigned)shift));
}

/* E4M3: 448 + 16 = 464 still rounds (ties to even) to 448; anything above is NaN. */
static inline uint8_t ampc_f32bits_to_e4m3bits(uint32_t x, int saturate) {
  return ampc_f32bits_to_f8bits(x, 3u, 7u, 0x43E80000u /* 464 */, 0x7Eu, saturate ? 0u : 0x7Fu);
}

/* E5M2: 61440 = 57344 + half an ulp ties to the even neighbour 65536: overflow. */
static inline uint8_t ampc_f32bits_to_e5m2bits(uint32_t x, int saturate) {
  return ampc_f32bits_to_f8bits(x, 2u, 15u, 0x476FFFFFu /* just below 61440 */, 0x7Bu,
                                saturate ? 0u : 0x7Cu);
}

#define AMPC_F8_NAN_F32BITS 0x7FFFE000u

static inline uint32_t ampc_e4m3bits_to_f32bits(uint8_t v) {
  const uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  const uint32_t e = (v >> 3) & 0x0Fu;
  uint32_t m = v & 0x07u;
  if ((v & 0x7Fu) == 0x7Fu)
    return AMPC_F8_NAN_F32BITS;
  if (e != 0)
    return sign | ((e + 120u) << 23) | (m << 20);
  if (m == 0)
    return sign;
  unsigned lz = 0;
  while (!(m & 0x08u)) {
    m <<= 1;
    lz++;
  }
  return sign | ((121u - lz) << 23) | ((m & 0x07u) << 20);
}

static inline uint32_t ampc_e5m2bits_to_f32bits(uint8_t v) {
  if ((v & 0x7Fu) > 0x7Cu)
    return AMPC_F8_NAN_F32BITS;
  /* E5M2 is the upper byte of a binary16 */
  return ampc_f16bits_to_f32bits((uint16_t)((uint16_t)v << 8));
}

/* ---- single elements of F32 / F16 / BF16 / FP8 buffers (scalar paths) ---- */

/* Element i of a buffer of dtype dt, widened to FP32 (exact). */
static inline float ampc_elem_load(const void *p, ampc_dtype dt, int64_t i) {
  switch (dt) {
  case AMPC_F16: return ampc_bits_f32(ampc_f16bits_to_f32bits(((const uint16_t *)p)[i]));
  case AMPC_BF16: return ampc_bits_f32(ampc_bf16bits_to_f32bits(((const uint16_t *)p)[i]));
  case AMPC_F8_E4M3: return ampc_bits_f32(ampc_e4m3bits_to_f32bits(((const uint8_t *)p)[i]));
  case AMPC_F8_E5M2: return ampc_bits_f32(ampc_e5m2bits_to_f32bits(((const uint8_t *)p)[i]));
  default: return ((const float *)p)[i];
  }
}

/* The rounding tally (src/numeric/tally.c, ampc/tally.h). ampc_tally_tls is
 * the tally bound to this thread (NULL: nothing counts). ampc_tally_count
 * counts the rounding of FP32 values src[0..n) into the stored dst[0..n)
 * (dtype dt) in the calling thread's slot of t (t not NULL).
 * A kernel with a parallel region reads ampc_tally_tls before the region and
 * calls ampc_tally_adopt with it first thing in each worker (in every loop
 * iteration of a `parallel for`), so its workers count into the caller's
 * tally, not into one a previous region left them. */
#ifdef __cplusplus /* the CUDA oracle test includes this header */
extern thread_local ampc_tally *ampc_tally_tls;
#else
extern _Thread_local ampc_tally *ampc_tally_tls;
#endif
void ampc_tally_count(ampc_tally *t, const float *src, const void *dst, ampc_dtype dt, size_t n);
static inline void ampc_tally_adopt(ampc_tally *t) { ampc_tally_tls = t; }

/* ampc_elem_store without the telemetry: for values that are not results
 * (e.g. a bias broadcast into C before a GEMM with beta = 1 rounds the sum). */
static inline void ampc_elem_store_uncounted(void *p, ampc_dtype dt, int64_t i, float v) {
  const uint32_t x = ampc_f32_bits(v);
  switch (dt) {
  case AMPC_F16: ((uint16_t *)p)[i] = ampc_f32bits_to_f16bits(x); break;
  case AMPC_BF16: ((uint16_t *)p)[i] = ampc_f32bits_to_bf16bits(x); break;
  case AMPC_F8_E4M3: ((uint8_t *)p)[i] = ampc_f32bits_to_e4m3bits(x, 0); break;
  case AMPC_F8_E5M2: ((uint8_t *)p)[i] = ampc_f32bits_to_e5m2bits(x, 0); break;
  default: ((float *)p)[i] = v; break;
  }
}

/* Round v once (RNE, non-saturating) to dt and store it as element i. */
static inline void ampc_elem_store(void *p, ampc_dtype dt, int64_t i, float v) {
  ampc_elem_store_uncounted(p, dt, i, v);
  ampc_tally *const t = ampc_tally_tls;
  if (__builtin_expect(t != NULL, 0))
    ampc_tally_count(t, &v, (char *)p + i * (int64_t)ampc_dtype_size(dt), dt, 1);
}

#endif
