/*
 * src/numeric/convert_avx2.c: AVX2 + F16C array conversions between FP32 and
 * binary16 / bfloat16. Compiled with -mavx2 -mfma -mf16c; only called after
 * ampc_cpu_has_avx2_f16c() said yes.
 *
 * Bit-identical to the portable kernels (tests check every FP32 pattern):
 *  - FP32 -> F16 is VCVTPS2PH with imm8 = 0 (round to nearest even, ignore MXCSR).
 *  - FP32 -> BF16 adds 0x7FFF + lsb on the integer bits and keeps the upper
 *    half; NaN lanes are instead quieted (| 0x00400000) so they cannot round to inf.
 * Tails (n mod 16) use the scalar inline conversions from numeric.h.
 * Destinations of >= AMPC_NT_BYTES bytes are written with non-temporal stores
 * (the data will not be read back from cache soon; this avoids the
 * read-for-ownership that would otherwise double the write traffic).
 */
#include "internal.h"

#include <immintrin.h>

#include "numeric/convert_impl.h"
#include "numeric/numeric.h"

#define AMPC_NT_BYTES ((size_t)4 << 20)

/* Number of leading elements (each `esz` bytes) to handle before dst is 32-byte
 * aligned; n when dst can never become aligned. */
static size_t head_to_align(const void *dst, size_t esz, size_t n) {
  uintptr_t mis = (uintptr_t)dst & 31u;
  if (mis == 0)
    return 0;
  if (mis % esz)
    return n;
  size_t h = (32u - mis) / esz;
  return h < n ? h : n;
}

static inline __m256i cvt16_f32_f16(const float *s) {
  __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(s), 0);
  __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(s + 8), 0);
  return _mm256_set_m128i(b, a);
}

static void a_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  if (n * 2 >= AMPC_NT_BYTES) {
    size_t h = head_to_align(dst, 2, n);
    for (; i < h; i++)
      dst[i] = ampc_f32bits_to_f16bits(ampc_f32_bits(src[i]));
    for (; i + 16 <= n; i += 16)
      _mm256_stream_si256((__m256i *)(dst + i), cvt16_f32_f16(src + i));
    _mm_sfence();
  } else {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256((__m256i *)(dst + i), cvt16_f32_f16(src + i));
  }
  for (; i < n; i++)
    dst[i] = ampc_f32bits_to_f16bits(ampc_f32_bits(src[i]));
}

static void a_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  if (n * 4 >= AMPC_NT_BYTES) {
    size_t h = head_to_align(dst, 4, n);
    for (; i < h; i++)
      dst[i] = ampc_bits_f32(ampc_f16bits_to_f32bits(src[i]));
    for (; i + 16 <= n; i += 16) {
      __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
      __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
      _mm256_stream_ps(dst + i, a);
      _mm256_stream_ps(dst + i + 8, b);
    }
    _mm_sfence();
  } else {
    for (; i + 16 <= n; i += 16) {
      __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
      __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
      _mm256_storeu_ps(dst + i, a);
      _mm256_storeu_ps(dst + i + 8, b);
    }
  }
  for (; i < n; i++)
    dst[i] = ampc_bits_f32(ampc_f16bits_to_f32bits(src[i]));
}

/* 8 FP32 lanes -> 8 bf16 values in the low 16 bits of each 32-bit lane. */
static inline __m256i bf16_round8(__m256i x) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, bias), lsb);
  __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absmask), inf);
  r = _mm256_blendv_epi8(r, _mm256_or_si256(x, quiet), isnan);
  return _mm256_srli_epi32(r, 16);
}

static inline __m256i cvt16_f32_bf16(const float *s) {
  __m256i a = bf16_round8(_mm256_loadu_si256((const __m256i *)s));
  __m256i b = bf16_round8(_mm256_loadu_si256((const __m256i *)(s + 8)));
  /* packus works per 128-bit lane: a0 b0 a1 b1 -> reorder to a0 a1 b0 b1 */
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
}

static void a_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  if (n * 2 >= AMPC_NT_BYTES) {
    size_t h = head_to_align(dst, 2, n);
    for (; i < h; i++)
      dst[i] = ampc_f32bits_to_bf16bits(ampc_f32_bits(src[i]));
    for (; i + 16 <= n; i += 16)
      _mm256_stream_si256((__m256i *)(dst + i), cvt16_f32_bf16(src + i));
    _mm_sfence();
  } else {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256((__m256i *)(dst + i), cvt16_f32_bf16(src + i));
  }
  for (; i < n; i++)
    dst[i] = ampc_f32bits_to_bf16bits(ampc_f32_bits(src[i]));
}

static void a_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  const int nt = n * 4 >= AMPC_NT_BYTES;
  if (nt) {
    size_t h = head_to_align(dst, 4, n);
    for (; i < h; i++)
      dst[i] = ampc_bits_f32(ampc_bf16bits_to_f32bits(src[i]));
  }
  for (; i + 16 <= n; i += 16) {
    __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
    __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i + 8)));
    a = _mm256_slli_epi32(a, 16);
    b = _mm256_slli_epi32(b, 16);
    if (nt) {
      _mm256_stream_si256((__m256i *)(dst + i), a);
      _mm256_stream_si256((__m256i *)(dst + i + 8), b);
    } else {
      _mm256_storeu_si256((__m256i *)(dst + i), a);
      _mm256_storeu_si256((__m256i *)(dst + i + 8), b);
    }
  }
  if (nt)
    _mm_sfence();
  for (; i < n; i++)
    dst[i] = ampc_bits_f32(ampc_bf16bits_to_f32bits(src[i]));
}

const ampc_convert_kernels ampc_convert_avx2 = {
    .isa = "avx2+f16c",
    .f32_to_f16 = a_f32_to_f16,
    .f16_to_f32 = a_f16_to_f32,
    .f32_to_bf16 = a_f32_to_bf16,
    .bf16_to_f32 = a_bf16_to_f32,
};

/* ---- rounding with statistics (ampc_store_f32) ---------------------------- */

static inline uint64_t popcnt8(__m256i mask) {
  return (uint64_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(mask)));
}

void ampc_store_stats_avx2(void *dst, ampc_dtype dt, const float *src, size_t n,
                           ampc_round_stats *s) {
  const int bf = dt == AMPC_BF16;
  /* stored exponent-all-ones and smallest-normal patterns, in 32-bit lanes */
  const __m256i out_inf = _mm256_set1_epi32(bf ? 0x7F80 : 0x7C00);
  const __m256i out_minnorm = _mm256_set1_epi32(bf ? 0x0080 : 0x0400);
  const __m256i out_abs = _mm256_set1_epi32(0x7FFF);
  const __m256i in_abs = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i in_inf = _mm256_set1_epi32(0x7F800000);
  const __m256i zero = _mm256_setzero_si256();
  __m256i vmax = zero;
  uint64_t under = 0, sub = 0, over = 0, inf = 0, nan = 0;
  uint16_t *d = dst;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
    __m128i h;
    if (bf) {
      __m256i r = bf16_round8(x);
      h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    } else {
      h = _mm256_cvtps_ph(_mm256_castsi256_ps(x), 0);
    }
    _mm_storeu_si128((__m128i *)(d + i), h);
    const __m256i ax = _mm256_and_si256(x, in_abs);
    const __m256i ao = _mm256_and_si256(_mm256_cvtepu16_epi32(h), out_abs);
    const __m256i finite_in = _mm256_cmpgt_epi32(in_inf, ax);
    const __m256i out_zero = _mm256_cmpeq_epi32(ao, zero);
    const __m256i out_isinf = _mm256_cmpeq_epi32(ao, out_inf);
    const __m256i out_isnan = _mm256_cmpgt_epi32(ao, out_inf);
    under += popcnt8(
        _mm256_andnot_si256(_mm256_cmpeq_epi32(ax, zero), _mm256_and_si256(finite_in, out_zero)));
    sub += popcnt8(_mm256_andnot_si256(out_zero, _mm256_cmpgt_epi32(out_minnorm, ao)));
    over += popcnt8(_mm256_and_si256(finite_in, _mm256_or_si256(out_isinf, out_isnan)));
    inf += popcnt8(out_isinf);
    nan += popcnt8(out_isnan);
    /* |x| of finite lanes compared as integers (monotonic for positive floats) */
    vmax = _mm256_max_epi32(vmax, _mm256_and_si256(ax, finite_in));
  }
  uint32_t lanes[8];
  _mm256_storeu_si256((__m256i *)lanes, vmax);
  uint32_t m = 0;
  for (int j = 0; j < 8; j++)
    m = lanes[j] > m ? lanes[j] : m;
  ampc_round_stats tail = {0};
  tail.max_abs = ampc_bits_f32(m);
  tail.underflow = under, tail.subnormal = sub, tail.overflow = over, tail.inf = inf;
  tail.nan = nan, tail.count = i;
  ampc_store_stats_portable(d + i, dt, src + i, n - i, &tail);
  ampc_round_stats_merge(s, &tail);
}
