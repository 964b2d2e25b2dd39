/*
 * src/kernels/gemm_s8_avx512.c: rows i0 .. i1-1 of the INT8 GEMM
 * (src/kernels/gemm_s8.c) on AVX512-VNNI. VPDPBUSD multiplies unsigned by
 * signed bytes and adds each group of four products to an int32 lane without
 * saturation, so A is offset to unsigned, a + 128 (a XOR 0x80), and the
 * offset is taken back exactly: sum (a + 128) b = sum a b + 128 sum b, with
 * sum b (bsum, B's row sums) computed once per call. Every partial sum stays
 * within int32 for k <= 65536 (|(a + 128) b| <= 255 * 128). Tails of k are
 * masked loads: a masked byte of A reads 0 (128 after the offset) and of B
 * reads 0, so it adds 0. Four rows of B per row of A.
 */
#include <immintrin.h>

#include "kernels/gemm_impl.h"

void ampc_gemm_s8_rows_avx512vnni(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                                  int64_t lda, const int8_t *b, int64_t ldb, const int32_t *bsum,
                                  int32_t *c, int64_t ldc) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  for (int64_t i = i0; i < i1; i++) {
    const int8_t *ai = a + i * lda;
    int64_t j = 0;
    for (; j < n; j += 4) {
      const int64_t nj = n - j < 4 ? n - j : 4;
      const int8_t *bj[4];
      for (int64_t q = 0; q < 4; q++)
        bj[q] = b + (j + (q < nj ? q : 0)) * ldb; /* past n: row j again, not stored */
      __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t p = 0; p < k; p += 64) {
        const __mmask64 mk = k - p >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (k - p)) - 1);
        const __m512i x = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, ai + p), flip);
        s0 = _mm512_dpbusd_epi32(s0, x, _mm512_maskz_loadu_epi8(mk, bj[0] + p));
        s1 = _mm512_dpbusd_epi32(s1, x, _mm512_maskz_loadu_epi8(mk, bj[1] + p));
        s2 = _mm512_dpbusd_epi32(s2, x, _mm512_maskz_loadu_epi8(mk, bj[2] + p));
        s3 = _mm512_dpbusd_epi32(s3, x, _mm512_maskz_loadu_epi8(mk, bj[3] + p));
      }
      const int32_t r[4] = {_mm512_reduce_add_epi32(s0), _mm512_reduce_add_epi32(s1),
                            _mm512_reduce_add_epi32(s2), _mm512_reduce_add_epi32(s3)};
      for (int64_t q = 0; q < nj; q++)
        c[i * ldc + j + q] = r[q] - 128 * bsum[j + q];
    }
  }
}
