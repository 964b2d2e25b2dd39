/*
 * src/kernels/gemm_acc16_avx512.c: the FP16-accumulation ablation (gemm_portable.c:
 * s <- fp16(a*b + s) after every product, in p order from +0) on AVX-512F,
 * for CPUs without AVX512-FP16 (AMD Zen 4 and Zen 5, Intel Skylake-SP to Ice
 * Lake). Bit-identical to the scalar path and to VFMADDPH.
 *
 * The running sums are binary16 values held in FP32 lanes. For binary16 a
 * and b the product a*b has at most 22 significant bits and lies in
 * [2^-48, 2^32] (or is 0, inf or NaN), so the FP32 product is exact. The sum
 * s + a*b is then rounded to binary16 in two steps: first to FP32 with
 * round-to-odd, then to binary16 with round-to-nearest-even (VCVTPS2PH).
 * Rounding to odd in a format with at least p + 2 significant bits and then
 * to nearest in p bits gives the correctly rounded result (Boldo and
 * Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
 * using rounding to odd", IEEE Trans. Computers 57(4), 2008, Theorem 1):
 * here 24 >= 11 + 2, and the binary16 subnormal range lies deep inside FP32's
 * normal range, so the theorem applies to every finite sum.
 *
 * Round-to-odd comes from AVX-512's per-instruction rounding (EVEX embedded
 * rounding, Intel SDM vol. 1, 15.6.4): lo = RD(s + a*b), hi = RU(s + a*b).
 * If the sum is exact, lo == hi; otherwise they are neighbouring FP32
 * numbers and exactly one of them has an odd significand, which is the
 * round-to-odd result. So the result is lo when lo's last bit is 1, else hi:
 * two adds, a bit test and a blend. Signed zeros come out as
 * round-to-nearest gives them (x + (-x): RD gives -0, RU +0, and +0 is
 * chosen; (-0) + (-0) is -0 in every mode). A non-zero inexact sum is never
 * near FP32's underflow (every sum is a multiple of 2^-48), inf + finite is
 * inf in every mode, and NaNs propagate as in the other paths.
 *
 * Blocking as in gemm_acc16_fp16.c, at FP32 width: 8 rows x 32 columns (2
 * zmm per row), 16 independent chains, A packed in 8-row panels (p-major)
 * and B in 32-column panels, widened to FP32 while packing; K in slices of
 * 256, each element's binary16 sum carried over between slices (exact: it
 * is a binary16 value in FP32), so every sum runs in p order 0 .. K-1.
 *
 * Only for binary16 A and B (other products are not exact in FP32); other
 * dtypes keep the AVX2 or scalar path. Compiled with -mavx512f -mavx512bw
 * -mavx512vl -mf16c and called only after the run-time check
 * (ampc_use_avx512). The MXCSR is the default one.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"
#include "kernels/gemm_avx512_store.h"
#include "kernels/gemm_impl.h"

enum { RB = 8, CB = 32, KC = 256 };

static int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

static inline float load_f16(const void *p, int64_t i) {
  uint16_t v;
  memcpy(&v, (const char *)p + 2 * i, 2);
  return _cvtsh_ss(v);
}

/* s <- binary16(s + prod), s a binary16 value and prod exact, both in FP32
 * lanes: round to odd in FP32 (the odd one of RD and RU), then to nearest
 * binary16 and back. */
static inline __m512 acc16_add(__m512 s, __m512 prod) {
  const __m512 lo = _mm512_add_round_ps(s, prod, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 hi = _mm512_add_round_ps(s, prod, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  const __mmask16 odd = _mm512_test_epi32_mask(_mm512_castps_si512(lo), _mm512_set1_epi32(1));
  const __m512 ro = _mm512_mask_blend_ps(odd, hi, lo);
  return _mm512_cvtph_ps(_mm512_cvtps_ph(ro, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* Row r of the block: the A value broadcast, two products, two sums. */
#define ROW(r)                                                                                     \
  do {                                                                                             \
    const __m512 av = _mm512_set1_ps(ap[p * RB + (r)]);                                            \
    s##r##0 = acc16_add(s##r##0, _mm512_mul_ps(av, b0));                                           \
    s##r##1 = acc16_add(s##r##1, _mm512_mul_ps(av, b1));                                           \
  } while (0)
#define LOAD(r)                                                                                    \
  __m512 s##r##0 = _mm512_load_ps(st + (r)*CB), s##r##1 = _mm512_load_ps(st + (r)*CB + 16)
#define KEEP(r)                                                                                    \
  do {                                                                                             \
    _mm512_store_ps(st + (r)*CB, s##r##0);                                                         \
    _mm512_store_ps(st + (r)*CB + 16, s##r##1);                                                    \
  } while (0)

/* One 8 x 32 block over kc steps of K: the running sums st (8 x 32, +0
 * before the first slice) go on from where the previous slice left them. ap:
 * kc x 8 (p-major), bp: kc x 32, both FP32 (widened binary16). */
static void block(int64_t kc, const float *restrict ap, const float *restrict bp,
                  float *restrict st) {
  LOAD(0);
  LOAD(1);
  LOAD(2);
  LOAD(3);
  LOAD(4);
  LOAD(5);
  LOAD(6);
  LOAD(7);
  for (int64_t p = 0; p < kc; p++) {
    const __m512 b0 = _mm512_load_ps(bp + p * CB), b1 = _mm512_load_ps(bp + p * CB + 16);
    ROW(0);
    ROW(1);
    ROW(2);
    ROW(3);
    ROW(4);
    ROW(5);
    ROW(6);
    ROW(7);
  }
  KEEP(0);
  KEEP(1);
  KEEP(2);
  KEEP(3);
  KEEP(4);
  KEEP(5);
  KEEP(6);
  KEEP(7);
}
#undef ROW
#undef LOAD
#undef KEEP

/* The block's 8 x 32 sums into C (alpha, beta, C's dtype), 16 columns at a
 * time with the columns past n masked off; counted by the rounding tally. */
static void epilogue(const ampc_gemm_args *g, void *c, int64_t i0, int64_t j0, const float *st) {
  const ampc_dtype dt = g->cdt;
  const int64_t es = (int64_t)ampc_dtype_size(dt);
  ampc_tally *const tm = ampc_tally_tls;
  const int64_t cols = g->n - j0 < CB ? g->n - j0 : CB;
  for (int r = 0; r < RB && i0 + r < g->m; r++) {
    char *crow = (char *)c + ((i0 + r) * g->ldc + j0) * es;
    _Alignas(64) float tb[CB];
    for (int64_t jj = 0; jj < cols; jj += 16) {
      const int64_t w = cols - jj < 16 ? cols - jj : 16;
      const __mmask16 msk = (__mmask16)(w == 16 ? 0xFFFFu : (1u << w) - 1u);
      _mm512_store_ps(tb + jj, ampc_avx512_out16(_mm512_load_ps(st + r * CB + jj), crow + jj * es,
                                                 dt, g->alpha, g->beta, msk));
    }
    if (tm)
      ampc_tally_count(tm, tb, crow, dt, (size_t)cols);
  }
}

ampc_status ampc_gemm_acc16_avx512(const ampc_gemm_args *g, int nthreads) {
  const int64_t m = g->m, n = g->n, k = g->k;
  const int64_t m8 = round_up(m, RB), n32 = round_up(n, CB);
  const int64_t nbi = m8 / RB, nbj = n32 / CB, nblk = nbi * nbj;
  /* floats: A packed (m8 x k, per 8-row panel p-major), B packed (per
   * 32-column panel, k x 32), the running sums (m8 x n32) */
  for (int64_t t = 0; t < g->batch; t++) {
    ampc_acc16_ws ws;
    AMPC_TRY(ampc_acc16_workspace(m8, n32, k, sizeof(float), &ws));
    float *ad = ws.a, *bd = ws.b, *sd = ws.s;
    const void *a = (const char *)g->a + 2 * t * g->stride_a;
    const void *b = (const char *)g->b + 2 * t * g->stride_b;
    void *c = (char *)g->c + t * g->stride_c * (int64_t)ampc_dtype_size(g->cdt);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
    int nan_in = 0; /* a NaN among the operands: this matrix takes the fallback */
#pragma omp parallel num_threads(nthreads)
    {
      ampc_tally_adopt(tally);
      /* element (i, p) of op(A) at panel i/8, p * 8 + i%8; read along
       * whichever index is contiguous in memory */
      if (g->rs_a == 1 && g->cs_a != 1) {
#pragma omp for schedule(static) reduction(| : nan_in)
        for (int64_t p = 0; p < k; p++)
          for (int64_t i = 0; i < m8; i++) {
            const float v = i < m ? load_f16(a, i + p * g->cs_a) : 0.0f;
            nan_in |= v != v;
            ad[(i / RB) * RB * k + p * RB + i % RB] = v;
          }
      } else {
#pragma omp for schedule(static) reduction(| : nan_in)
        for (int64_t i = 0; i < m8; i++) {
          float *dst = ad + (i / RB) * RB * k + i % RB;
          for (int64_t p = 0; p < k; p++) {
            const float v = i < m ? load_f16(a, i * g->rs_a + p * g->cs_a) : 0.0f;
            nan_in |= v != v;
            dst[p * RB] = v;
          }
        }
      }
      /* element (p, j) of op(B) at panel j/32, p * 32 + j%32 */
      if (g->cs_b == 1) {
#pragma omp for schedule(static) reduction(| : nan_in)
        for (int64_t p = 0; p < k; p++) {
          const char *row = (const char *)b + 2 * p * g->rs_b;
          for (int64_t jb = 0; jb < nbj; jb++)
            for (int h = 0; h < CB; h += 16) {
              const int64_t j = jb * CB + h, w = n - j < 0 ? 0 : n - j < 16 ? n - j : 16;
              const __mmask16 msk = (__mmask16)(w == 16 ? 0xFFFFu : (1u << w) - 1u);
              const __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(msk, row + 2 * j));
              nan_in |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0;
              _mm512_store_ps(bd + jb * CB * k + p * CB + h, v);
            }
        }
      } else {
#pragma omp for schedule(static) reduction(| : nan_in)
        for (int64_t j = 0; j < n32; j++) {
          float *dst = bd + (j / CB) * CB * k + j % CB;
          for (int64_t p = 0; p < k; p++) {
            const float v = j < n ? load_f16(b, p * g->rs_b + j * g->cs_b) : 0.0f;
            nan_in |= v != v;
            dst[p * CB] = v;
          }
        }
      }
      /* (the reductions end in a barrier: every thread sees the same nan_in) */
      if (!nan_in) {
        const int64_t nsum = m8 * n32;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nsum; i++)
          sd[i] = 0.0f; /* +0 */
        /* K in slices (each block's sums carried over in sd); within a slice
         * the blocks of one 32-column panel run on one thread, B's slice
         * staying in L1 while A's panels stream past */
        for (int64_t p0 = 0; p0 < k; p0 += KC) {
          const int64_t kc = k - p0 < KC ? k - p0 : KC;
#pragma omp for schedule(dynamic, 1)
          for (int64_t blk = 0; blk < nblk; blk++) {
            const int64_t jb = blk / nbi, ib = blk % nbi;
            block(kc, ad + ib * RB * k + p0 * RB, bd + jb * CB * k + p0 * CB,
                  sd + (ib * nbj + jb) * RB * CB);
          }
        }
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblk; blk++)
          epilogue(g, c, (blk / nbj) * RB, (blk % nbj) * CB, sd + blk * RB * CB);
      }
    }
    if (nan_in) /* which NaN a sum ends with follows the FMA's operand order */
      AMPC_TRY(ampc_acc16_nan_fallback(g, a, b, c, nthreads));
  }
  return AMPC_OK;
}
