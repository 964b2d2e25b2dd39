/*
 * src/kernels/gemm_s8_avx2.c: rows i0 .. i1-1 of the INT8 GEMM
 * (src/kernels/gemm_s8.c) on AVX2. Each 16 int8 of A and of a row of B are
 * sign-extended to int16 (VPMOVSXBW) and multiplied pairwise into int32 with
 * VPMADDWD: a pair sum is at most 2 * 128 * 128 = 2^15 in magnitude, exact,
 * unlike VPMADDUBSW's saturating int16 sums. Four rows of B per row of A.
 */
#include <immintrin.h>

#include "kernels/gemm_impl.h"

static inline int32_t hsum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

static inline __m256i widen16(const int8_t *p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
}

void ampc_gemm_s8_rows_avx2(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                            int64_t lda, const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc) {
  const int64_t kv = k & ~(int64_t)15;
  for (int64_t i = i0; i < i1; i++) {
    const int8_t *ai = a + i * lda;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const int8_t *b0 = b + j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
      __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t p = 0; p < kv; p += 16) {
        const __m256i x = widen16(ai + p);
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(x, widen16(b0 + p)));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(x, widen16(b1 + p)));
        s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(x, widen16(b2 + p)));
        s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(x, widen16(b3 + p)));
      }
      int32_t r0 = hsum8(s0), r1 = hsum8(s1), r2 = hsum8(s2), r3 = hsum8(s3);
      for (int64_t p = kv; p < k; p++) {
        const int32_t x = ai[p];
        r0 += x * b0[p], r1 += x * b1[p], r2 += x * b2[p], r3 += x * b3[p];
      }
      c[i * ldc + j] = r0, c[i * ldc + j + 1] = r1, c[i * ldc + j + 2] = r2;
      c[i * ldc + j + 3] = r3;
    }
    for (; j < n; j++) {
      const int8_t *bj = b + j * ldb;
      __m256i s = _mm256_setzero_si256();
      for (int64_t p = 0; p < kv; p += 16)
        s = _mm256_add_epi32(s, _mm256_madd_epi16(widen16(ai + p), widen16(bj + p)));
      int32_t r = hsum8(s);
      for (int64_t p = kv; p < k; p++)
        r += (int32_t)ai[p] * bj[p];
      c[i * ldc + j] = r;
    }
  }
}

void ampc_s8_quantize_avx2(const float *x, int64_t n, float scale, int8_t *q) {
  const __m256 s = _mm256_set1_ps(scale), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  /* VPACKSSDW and VPACKSSWB interleave the 128-bit lanes: put them back */
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i r[4];
    for (int u = 0; u < 4; u++) {
      const __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * u), s);
      const __m256 num = _mm256_cmp_ps(v, v, _CMP_ORD_Q); /* NaN: 0 */
      const __m256 c = _mm256_and_ps(_mm256_min_ps(_mm256_max_ps(v, lo), hi), num);
      r[u] = _mm256_cvtps_epi32(_mm256_round_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    _mm256_storeu_si256((__m256i *)(void *)(q + i), _mm256_permutevar8x32_epi32(p, order));
  }
  ampc_s8_quantize_portable(x + i, n - i, scale, q + i);
}
