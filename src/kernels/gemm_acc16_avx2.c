/*
 * src/kernels/gemm_acc16_avx2.c: the FP16-accumulation ablation (s <-
 * fp16(a*b + s) after every product, in p order from +0; the portable
 * definition is gemm_portable.c's) on AVX2 + FMA + F16C, bit-identical to the
 * portable path:
 * - any operand dtypes: operands widened to double, 4 x 8 chains of double
 *   FMAs each rounded to binary16 (ampc_gemm_acc16_avx2); it is also the
 *   path every binary16 vector path hands a matrix with a NaN operand to
 *   (ampc_acc16_nan_fallback), since its NaN is the portable path's;
 * - binary16 A and B: 6 x 16 blocks of FP32 lanes with round-to-odd sums
 *   from TwoSum (ampc_gemm_acc16_avx2_f16).
 * Compiled with -mavx2 -mfma -mf16c and only called after the run-time CPU
 * check.
 */
#include "internal.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>

#include "kernels/gemm_impl.h"

static int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

/* ---- the FP16-accumulation ablation, 4 x 8 chains at a time ---------------- */

/* binary16 rounding of 4 doubles (RNE, subnormals kept, overflow to inf, inf
 * and NaN unchanged): the vector form of round_f16_f64 in gemm_portable.c, same steps. */
static inline __m256d round_f16_pd(__m256d x) {
  const __m256i xb = _mm256_castpd_si256(x);
  const __m256i sign = _mm256_and_si256(xb, _mm256_set1_epi64x((long long)0x8000000000000000ull));
  const __m256i ax = _mm256_andnot_si256(_mm256_set1_epi64x((long long)0x8000000000000000ull), xb);
  __m256i e = _mm256_sub_epi64(_mm256_srli_epi64(ax, 52), _mm256_set1_epi64x(1023));
  const __m256i lo = _mm256_set1_epi64x(-14), hi = _mm256_set1_epi64x(17);
  e = _mm256_blendv_epi8(e, lo, _mm256_cmpgt_epi64(lo, e));
  e = _mm256_blendv_epi8(e, hi, _mm256_cmpgt_epi64(e, hi));
  const __m256d up = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_sub_epi64(_mm256_set1_epi64x(1023 + 10), e), 52));
  const __m256d down = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_add_epi64(_mm256_set1_epi64x(1023 - 10), e), 52));
  const __m256d magic = _mm256_set1_pd(0x1.8p52);
  const __m256d q = _mm256_mul_pd(x, up);
  const __m256d r = _mm256_sub_pd(_mm256_add_pd(q, magic), magic);
  __m256d v = _mm256_or_pd(_mm256_mul_pd(r, down), _mm256_castsi256_pd(sign));
  const __m256d absv = _mm256_andnot_pd(
      _mm256_castsi256_pd(_mm256_set1_epi64x((long long)0x8000000000000000ull)), v);
  const __m256d over = _mm256_cmp_pd(absv, _mm256_set1_pd(65504.0), _CMP_GT_OQ);
  const __m256d inf = _mm256_or_pd(_mm256_set1_pd((double)INFINITY), _mm256_castsi256_pd(sign));
  v = _mm256_blendv_pd(v, inf, over);
  const __m256i special = _mm256_cmpgt_epi64(ax, _mm256_set1_epi64x(0x7FEFFFFFFFFFFFFFll));
  return _mm256_blendv_pd(v, x, _mm256_castsi256_pd(special));
}

/* a*b + s by FMA with the NaN the scalar path's fma(a, b, s) gives (glibc:
 * a's if a is NaN, else b's, else s's, else the default NaN of an invalid
 * operation), whichever operand order the compiler picks for VFMADD (the
 * hardware returns its first source operand's NaN). */
static inline __m256d fma_nan_ordered(__m256d a, __m256d b, __m256d s) {
  __m256d r = _mm256_fmadd_pd(a, b, s);
  const __m256d nan = _mm256_cmp_pd(r, r, _CMP_UNORD_Q);
  if (__builtin_expect(!_mm256_testz_pd(nan, nan), 0)) {
    r = _mm256_blendv_pd(r, s, _mm256_cmp_pd(s, s, _CMP_UNORD_Q));
    r = _mm256_blendv_pd(r, b, _mm256_cmp_pd(b, b, _CMP_UNORD_Q));
    r = _mm256_blendv_pd(r, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  return r;
}

ampc_status ampc_gemm_acc16_avx2(const ampc_gemm_args *g, int nthreads) {
  enum { RB = 4, CB = 8 };
  const int64_t m = g->m, n = g->n, k = g->k;
  const int64_t m4 = round_up(m, RB), n8 = round_up(n, CB);
  size_t bytes;
  if (__builtin_mul_overflow((size_t)(m4 + n8), (size_t)k * sizeof(double), &bytes))
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): workspace size overflows");
  double *ad = ampc_gemm_workspace(bytes);
  if (!ad)
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): cannot allocate %zu bytes", bytes);
  double *bd = ad + m4 * k; /* K x n8, row p contiguous over j */
  const int64_t nblk = (m4 / RB) * (n8 / CB);
  for (int64_t t = 0; t < g->batch; t++) {
    const void *a = ampc_gemm_at(g->a, g->adt, t * g->stride_a);
    const void *b = ampc_gemm_at(g->b, g->bdt, t * g->stride_b);
    void *c = (char *)g->c + t * g->stride_c * (int64_t)ampc_gemm_esz(g->cdt);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel num_threads(nthreads)
    {
      ampc_tally_adopt(tally);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < m4; i++)
        for (int64_t p = 0; p < k; p++)
          ad[i * k + p] =
              i < m ? (double)ampc_gemm_load(a, g->adt, i * g->rs_a + p * g->cs_a) : 0.0;
#pragma omp for schedule(static)
      for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n8; j++)
          bd[p * n8 + j] =
              j < n ? (double)ampc_gemm_load(b, g->bdt, p * g->rs_b + j * g->cs_b) : 0.0;
#pragma omp for schedule(dynamic, 4)
      for (int64_t blk = 0; blk < nblk; blk++) {
        const int64_t i0 = (blk / (n8 / CB)) * RB, j0 = (blk % (n8 / CB)) * CB;
        __m256d s[RB][2];
        for (int r = 0; r < RB; r++)
          s[r][0] = s[r][1] = _mm256_setzero_pd();
        for (int64_t p = 0; p < k; p++) {
          const __m256d b0 = _mm256_load_pd(bd + p * n8 + j0);
          const __m256d b1 = _mm256_load_pd(bd + p * n8 + j0 + 4);
          for (int r = 0; r < RB; r++) {
            const __m256d av = _mm256_broadcast_sd(ad + (i0 + r) * k + p);
            s[r][0] = round_f16_pd(fma_nan_ordered(av, b0, s[r][0]));
            s[r][1] = round_f16_pd(fma_nan_ordered(av, b1, s[r][1]));
          }
        }
        for (int r = 0; r < RB && i0 + r < m; r++) {
          double out[CB];
          _mm256_storeu_pd(out, s[r][0]);
          _mm256_storeu_pd(out + 4, s[r][1]);
          for (int jj = 0; jj < CB && j0 + jj < n; jj++)
            ampc_gemm_epilogue1(c, g->cdt, (i0 + r) * g->ldc + j0 + jj, g->alpha, g->beta,
                                (float)out[jj]);
        }
      }
    }
  }
  return AMPC_OK;
}

/* ---- the ablation for binary16 operands, round-to-odd in FP32 lanes --------- */

/* s <- binary16(s + prod) for 8 lanes, s a binary16 value and prod exact in
 * FP32 (a product of two binary16): the sum rounded to nearest in FP32 with
 * its exact error (Knuth's TwoSum: no overflow at these magnitudes), turned
 * into the round-to-odd sum (if inexact and the significand is even, one
 * step toward the exact value: an integer +-1 on the bits), then rounded to
 * nearest binary16 (VCVTPS2PH). Round-to-odd with 24 >= 11 + 2 bits and then
 * to nearest is the correctly rounded sum (Boldo and Melquiond 2008), as in
 * gemm_acc16_avx512.c. inf + finite keeps inf (its error is NaN: no step). */
static inline __m256 acc16_add8(__m256 s, __m256 prod) {
  const __m256 t = _mm256_add_ps(s, prod);
  const __m256 bp = _mm256_sub_ps(t, s), ap = _mm256_sub_ps(t, bp);
  const __m256 e = _mm256_add_ps(_mm256_sub_ps(s, ap), _mm256_sub_ps(prod, bp));
  const __m256i tb = _mm256_castps_si256(t);
  const __m256i even =
      _mm256_cmpeq_epi32(_mm256_and_si256(tb, _mm256_set1_epi32(1)), _mm256_setzero_si256());
  const __m256i inexact = _mm256_castps_si256(_mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_NEQ_OQ));
  /* +1 (away from 0) when e has t's sign, else -1 */
  const __m256i step = _mm256_or_si256(
      _mm256_srai_epi32(_mm256_xor_si256(_mm256_castps_si256(e), tb), 31), _mm256_set1_epi32(1));
  const __m256i ro = _mm256_add_epi32(tb, _mm256_and_si256(step, _mm256_and_si256(even, inexact)));
  return _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_castsi256_ps(ro), _MM_FROUND_TO_NEAREST_INT));
}

enum { A16_RB = 6, A16_CB = 16, A16_KC = 256 };

/* One 6 x 16 block over kc steps (12 chains); st: the running sums (6 x 16),
 * carried from slice to slice. ap: kc x 6 (p-major), bp: kc x 16, FP32. */
static void acc16_block8(int64_t kc, const float *restrict ap, const float *restrict bp,
                         float *restrict st) {
  __m256 s[A16_RB][2];
  for (int r = 0; r < A16_RB; r++)
    s[r][0] = _mm256_load_ps(st + r * A16_CB), s[r][1] = _mm256_load_ps(st + r * A16_CB + 8);
  for (int64_t p = 0; p < kc; p++) {
    const __m256 b0 = _mm256_load_ps(bp + p * A16_CB), b1 = _mm256_load_ps(bp + p * A16_CB + 8);
    for (int r = 0; r < A16_RB; r++) {
      const __m256 av = _mm256_broadcast_ss(ap + p * A16_RB + r);
      s[r][0] = acc16_add8(s[r][0], _mm256_mul_ps(av, b0));
      s[r][1] = acc16_add8(s[r][1], _mm256_mul_ps(av, b1));
    }
  }
  for (int r = 0; r < A16_RB; r++) {
    _mm256_store_ps(st + r * A16_CB, s[r][0]);
    _mm256_store_ps(st + r * A16_CB + 8, s[r][1]);
  }
}

ampc_status ampc_gemm_acc16_avx2_f16(const ampc_gemm_args *g, int nthreads) {
  const int64_t m = g->m, n = g->n, k = g->k;
  const int64_t mb = round_up(m, A16_RB), nb16 = round_up(n, A16_CB);
  const int64_t nbi = mb / A16_RB, nbj = nb16 / A16_CB, nblk = nbi * nbj;
  for (int64_t t = 0; t < g->batch; t++) {
    ampc_acc16_ws w;
    AMPC_TRY(ampc_acc16_workspace(mb, nb16, k, sizeof(float), &w));
    float *ad = w.a, *bd = w.b, *sd = w.s;
    const void *a = ampc_gemm_at(g->a, AMPC_F16, t * g->stride_a);
    const void *b = ampc_gemm_at(g->b, AMPC_F16, t * g->stride_b);
    void *c = (char *)g->c + t * g->stride_c * (int64_t)ampc_gemm_esz(g->cdt);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
    int nan_in = 0; /* a NaN among the operands: this matrix takes the double path */
#pragma omp parallel num_threads(nthreads)
    {
      ampc_tally_adopt(tally);
#pragma omp for schedule(static) reduction(| : nan_in)
      for (int64_t i = 0; i < mb; i++) {
        float *dst = ad + (i / A16_RB) * A16_RB * k + i % A16_RB;
        for (int64_t p = 0; p < k; p++) {
          const float v = i < m ? ampc_gemm_load(a, AMPC_F16, i * g->rs_a + p * g->cs_a) : 0.0f;
          nan_in |= v != v;
          dst[p * A16_RB] = v;
        }
      }
#pragma omp for schedule(static) reduction(| : nan_in)
      for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < nb16; j++) {
          const float v = j < n ? ampc_gemm_load(b, AMPC_F16, p * g->rs_b + j * g->cs_b) : 0.0f;
          nan_in |= v != v;
          bd[(j / A16_CB) * A16_CB * k + p * A16_CB + j % A16_CB] = v;
        }
      /* (the reductions end in a barrier: every thread sees the same nan_in) */
      if (!nan_in) {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < mb * nb16; i++)
          sd[i] = 0.0f; /* +0 */
        for (int64_t p0 = 0; p0 < k; p0 += A16_KC) {
          const int64_t kc = k - p0 < A16_KC ? k - p0 : A16_KC;
#pragma omp for schedule(dynamic, 1)
          for (int64_t blk = 0; blk < nblk; blk++) {
            const int64_t jb = blk / nbi, ib = blk % nbi;
            acc16_block8(kc, ad + ib * A16_RB * k + p0 * A16_RB, bd + jb * A16_CB * k + p0 * A16_CB,
                         sd + (ib * nbj + jb) * A16_RB * A16_CB);
          }
        }
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblk; blk++) {
          const int64_t i0 = (blk / nbj) * A16_RB, j0 = (blk % nbj) * A16_CB;
          const float *st = sd + blk * A16_RB * A16_CB;
          for (int r = 0; r < A16_RB && i0 + r < m; r++)
            for (int jj = 0; jj < A16_CB && j0 + jj < n; jj++)
              ampc_gemm_epilogue1(c, g->cdt, (i0 + r) * g->ldc + j0 + jj, g->alpha, g->beta,
                                  st[r * A16_CB + jj]);
        }
      }
    }
    if (nan_in) /* the NaN a sum ends with follows the FMA's operand order */
      AMPC_TRY(ampc_acc16_nan_fallback(g, a, b, c, nthreads));
  }
  return AMPC_OK;
}

ampc_status ampc_acc16_nan_fallback(const ampc_gemm_args *g, const void *a, const void *b, void *c,
                                    int nthreads) {
  ampc_gemm_args one = *g;
  one.a = a, one.b = b, one.c = c, one.batch = 1;
  return ampc_gemm_acc16_avx2(&one, nthreads);
}
