/*
 * src/kernels/gemm_avx512_store.h: the 16-lane output stage shared by the
 * AVX-512 GEMM files (gemm_avx512.c, gemm_acc16_avx512.c,
 * gemm_acc16_fp16.c): widen 16 elements of C's dtype to FP32, round 16 FP32
 * lanes to bfloat16, and C = alpha * acc + beta * C formed as the scalar
 * epilogue does (two products and a sum in FP32, no FMA, one rounding to C's
 * dtype). Include only from files compiled with -mavx512f -mavx512bw
 * -mavx512vl (and -mf16c); static inline, so each file gets its own copy.
 */
#ifndef AMPC_GEMM_AVX512_STORE_H
#define AMPC_GEMM_AVX512_STORE_H

#include <immintrin.h>

#include "ampc/dtype.h"

/* 16 FP32 lanes rounded to bfloat16 as ampc_f32bits_to_bf16bits does (RNE;
 * a NaN quieted, its sign and top payload kept). */
static inline __m256i ampc_avx512_bf16_round16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(x, _mm512_set1_epi32(0x00400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* 16 (masked) elements of dtype dt (F32, F16 or BF16) at p widened to FP32;
 * masked-off lanes are 0 and not read. */
static inline __m512 ampc_avx512_load16(const void *p, ampc_dtype dt, __mmask16 m) {
  switch (dt) {
  case AMPC_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  case AMPC_BF16:
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  default: return _mm512_maskz_loadu_ps(m, p);
  }
}

/* C[0:16] at cp (masked; dtype dt: F32, F16 or BF16) = round(alpha * v +
 * beta * C), C read only when beta != 0. Returns the FP32 value before the
 * rounding (what the rounding tally counts). */
static inline __m512 ampc_avx512_out16(__m512 v, void *cp, ampc_dtype dt, float alpha, float beta,
                                       __mmask16 m) {
  v = _mm512_mul_ps(_mm512_set1_ps(alpha), v);
  if (beta != 0.0f)
    v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(beta), ampc_avx512_load16(cp, dt, m)));
  switch (dt) {
  case AMPC_F16:
    _mm256_mask_storeu_epi16(cp, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    break;
  case AMPC_BF16: _mm256_mask_storeu_epi16(cp, m, ampc_avx512_bf16_round16(v)); break;
  default: _mm512_mask_storeu_ps(cp, m, v); break;
  }
  return v;
}

#endif
