/*
 * src/kernels/gemm_s8_avx512.c: rows i0 .. i1-1 of the INT8 GEMM
 * (src/kernels/gemm_s8.c) on AVX512-VNNI. VPDPBUSD multiplies unsigned by
 * signed bytes and adds each group of four products to an int32 lane without
 * saturation, so A is offset to unsigned, a + 128 (a XOR 0x80), and the
 * offset is taken back exactly: sum (a + 128) b = sum a b + 128 sum b, with
 * sum b (bsum, B's row sums) computed once per call. Every partial sum stays
 * within int32 for k <= 65536 (|(a + 128) b| <= 255 * 128).
 *
 * B is packed once per call (ampc_gemm_s8_pack_vnni) as [k4][n16][4]: the
 * four bytes k = 4p .. 4p+3 of column j side by side, columns in groups of
 * 16, zeros past k and n. Then each lane of an accumulator is one output
 * column: four bytes of A broadcast, one VPDPBUSD per 16 columns, no
 * horizontal sums. Four rows of A share each load of B.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm_impl.h"

void ampc_gemm_s8_pack_vnni(int64_t n, int64_t k, const int8_t *b, int64_t ldb, int8_t *bp) {
  const int64_t k4 = (k + 3) / 4, n16 = (n + 15) / 16 * 16;
  memset(bp, 0, (size_t)(k4 * n16 * 4));
  for (int64_t j = 0; j < n; j++)
    for (int64_t p = 0; p < k; p++)
      bp[((p / 4) * n16 + j) * 4 + p % 4] = b[j * ldb + p];
}

/* four bytes of row a at 4 q (zeros past k: they meet B's zeros), offset */
static inline int32_t a4(const int8_t *a, int64_t q, int64_t k) {
  uint8_t v[4] = {0x80, 0x80, 0x80, 0x80}; /* 0 + 128 */
  for (int t = 0; t < 4 && 4 * q + t < k; t++)
    v[t] = (uint8_t)a[4 * q + t] ^ 0x80u;
  int32_t r;
  memcpy(&r, v, 4);
  return r;
}

void ampc_gemm_s8_rows_avx512vnni(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                                  int64_t lda, const int8_t *bp, const int32_t *bsum, int32_t *c,
                                  int64_t ldc) {
  const int64_t k4 = (k + 3) / 4, n16 = (n + 15) / 16 * 16, kf = k / 4;
  for (int64_t i = i0; i < i1; i += 4) {
    const int64_t nr = i1 - i < 4 ? i1 - i : 4;
    const int8_t *ar[4];
    for (int r = 0; r < 4; r++)
      ar[r] = a + (i + (r < nr ? r : 0)) * lda; /* past i1: row i again, not stored */
    for (int64_t j = 0; j < n16; j += 16) {
      __m512i s[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                      _mm512_setzero_si512()};
      for (int64_t q = 0; q < k4; q++) {
        const __m512i bv = _mm512_loadu_si512((const void *)(bp + (q * n16 + j) * 4));
        for (int r = 0; r < 4; r++) {
          int32_t w;
          if (q < kf) {
            memcpy(&w, ar[r] + 4 * q, 4);
            w ^= (int32_t)0x80808080u;
          } else {
            w = a4(ar[r], q, k);
          }
          s[r] = _mm512_dpbusd_epi32(s[r], _mm512_set1_epi32(w), bv);
        }
      }
      const int64_t nj = n - j < 16 ? n - j : 16;
      const __mmask16 mk = (__mmask16)((1u << nj) - 1u);
      const __m512i corr =
          _mm512_slli_epi32(_mm512_maskz_loadu_epi32(mk, (const void *)(bsum + j)), 7);
      for (int r = 0; r < nr; r++)
        _mm512_mask_storeu_epi32((void *)(c + (i + r) * ldc + j), mk, _mm512_sub_epi32(s[r], corr));
    }
  }
}
