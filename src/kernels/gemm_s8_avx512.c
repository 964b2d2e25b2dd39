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
 * horizontal sums. A tile of 4 rows x 64 columns keeps 16 accumulators:
 * each load of B serves four rows, each broadcast of A four groups. With y
 * given, the tile is dequantized in registers and stored as FP32.
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

/* four bytes of row a at 4 q, offset to unsigned, broadcast to every lane */
static inline __m512i bcast4(const int8_t *a, int64_t q, int64_t k, int64_t kf) {
  int32_t w;
  if (q < kf) {
    memcpy(&w, a + 4 * q, 4);
    w ^= (int32_t)0x80808080u;
  } else {
    w = a4(a, q, k);
  }
  return _mm512_set1_epi32(w);
}

/* One tile: rows i .. i+3 (rows past nr repeat row i and are not stored)
 * and G groups of 16 columns from j. 16 accumulators, G loads of B and four
 * broadcasts of A per four k. Then C = S - 128 bsum as int32 (y NULL), or
 * y = (float)C * mult + bias in FP32 (a product, then a sum: no FMA). */
static inline __attribute__((always_inline)) void
tile(const int G, int64_t i, int nr, int64_t j, int64_t n, int64_t k, const int8_t *a, int64_t lda,
     const int8_t *bp, const int32_t *bsum, const float *mult, float alpha, const float *bias,
     float *y, int64_t ldy, int32_t *c, int64_t ldc) {
  const int64_t k4 = (k + 3) / 4, n16 = (n + 15) / 16 * 16, kf = k / 4;
  const int8_t *ar[4];
  for (int r = 0; r < 4; r++)
    ar[r] = a + (i + (r < nr ? r : 0)) * lda;
  __m512i s[4][4];
  for (int r = 0; r < 4; r++)
    for (int g = 0; g < 4; g++)
      s[r][g] = _mm512_setzero_si512();
  for (int64_t q = 0; q < k4; q++) {
    __m512i bv[4];
    for (int g = 0; g < G; g++)
      bv[g] = _mm512_loadu_si512((const void *)(bp + (q * n16 + j + 16 * g) * 4));
    for (int r = 0; r < 4; r++) {
      const __m512i av = bcast4(ar[r], q, k, kf);
      for (int g = 0; g < G; g++)
        s[r][g] = _mm512_dpbusd_epi32(s[r][g], av, bv[g]);
    }
  }
  for (int g = 0; g < G; g++) {
    const int64_t jj = j + 16 * g, nj = n - jj < 16 ? n - jj : 16;
    if (nj <= 0)
      break;
    const __mmask16 mk = (__mmask16)((1u << nj) - 1u);
    const __m512i corr =
        _mm512_slli_epi32(_mm512_maskz_loadu_epi32(mk, (const void *)(bsum + jj)), 7);
    if (!y) {
      for (int r = 0; r < nr; r++)
        _mm512_mask_storeu_epi32((void *)(c + (i + r) * ldc + jj), mk,
                                 _mm512_sub_epi32(s[r][g], corr));
      continue;
    }
    const __m512 al = _mm512_set1_ps(alpha);
    const __m512 mv = mult ? _mm512_mul_ps(al, _mm512_maskz_loadu_ps(mk, mult + jj)) : al;
    const __m512 bb = bias ? _mm512_maskz_loadu_ps(mk, bias + jj) : _mm512_setzero_ps();
    for (int r = 0; r < nr; r++) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][g], corr));
      _mm512_mask_storeu_ps(y + (i + r) * ldy + jj, mk, _mm512_add_ps(_mm512_mul_ps(f, mv), bb));
    }
  }
}

void ampc_gemm_s8_rows_avx512vnni(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                                  int64_t lda, const int8_t *bp, const int32_t *bsum, int32_t *c,
                                  int64_t ldc, float alpha, const float *mult, const float *bias,
                                  float *y, int64_t ldy) {
  const int64_t n16 = (n + 15) / 16 * 16;
  for (int64_t i = i0; i < i1; i += 4) {
    const int nr = i1 - i < 4 ? (int)(i1 - i) : 4;
    for (int64_t j = 0; j < n16; j += 64) {
      switch ((n16 - j) / 16) {
      case 1: tile(1, i, nr, j, n, k, a, lda, bp, bsum, mult, alpha, bias, y, ldy, c, ldc); break;
      case 2: tile(2, i, nr, j, n, k, a, lda, bp, bsum, mult, alpha, bias, y, ldy, c, ldc); break;
      case 3: tile(3, i, nr, j, n, k, a, lda, bp, bsum, mult, alpha, bias, y, ldy, c, ldc); break;
      default: tile(4, i, nr, j, n, k, a, lda, bp, bsum, mult, alpha, bias, y, ldy, c, ldc); break;
      }
    }
  }
}

void ampc_s8_quantize_avx512(const float *x, int64_t n, float scale, int8_t *q) {
  const __m512 s = _mm512_set1_ps(scale), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), s);
    const __mmask16 num = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q); /* NaN: 0 */
    const __m512 c = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m512i r =
        _mm512_maskz_cvt_roundps_epi32(num, c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)(void *)(q + i), _mm512_cvtepi32_epi8(r));
  }
  ampc_s8_quantize_portable(x + i, n - i, scale, q + i);
}
