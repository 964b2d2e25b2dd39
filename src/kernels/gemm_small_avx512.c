/*
 * src/kernels/gemm_small_avx512.c: FP32-accumulation GEMMs of small matrices
 * (the per-head products of attention: 17 x 17 x 32 at vit-ref's shapes) on
 * AVX-512F, without the blocked framework's task grid, panels and padding
 * to 12 x 32 tiles, which cost several times the arithmetic at these sizes.
 *
 * For each matrix of the batch: op(A) widened into an FP32 block and op(B)
 * into FP32 rows of up to 64 lanes, then each row of C formed as 16-lane FMA
 * chains over p in order from +0 (the broadcast A element times the B lanes,
 * the operand order of the 12 x 32 micro-kernel), and C = alpha * sum +
 * beta * C rounded once by the blocked kernel's own output stage
 * (ampc_avx512_out16). With K in one KC slice those are the blocked kernel's
 * operations (it sums each element in p order from +0 per slice), so the
 * results are its bits. Compiled with -mavx512f -mavx512bw -mavx512vl
 * -mf16c; called only where ampc_use_avx512().
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/gemm_avx512_store.h"
#include "kernels/gemm_impl.h"

enum { SMALL_N = 64, SMALL_K = 256, SMALL_FLOATS = 4096 };

int ampc_gemm_small_fits(const ampc_gemm_args *g, int64_t kc) {
  const int64_t npad = (g->n + 15) / 16 * 16;
  return g->k <= kc && g->k <= SMALL_K && g->n <= SMALL_N && g->m * g->k <= SMALL_FLOATS &&
         g->k * npad <= SMALL_FLOATS;
}

/* n elements of dtype dt at p (stride 1) widened into dst */
static void widen(float *dst, const void *p, ampc_dtype dt, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, m, ampc_avx512_load16(ampc_gemm_at(p, dt, i), dt, m));
  }
}

/* the rows of one C: NV vectors of 16 lanes */
static inline __attribute__((always_inline)) void rows_nv(const int NV, const ampc_gemm_args *g,
                                                          const float *aw, int64_t ai, int64_t ap,
                                                          const float *bw, int64_t npad, void *c) {
  const int64_t es = (int64_t)ampc_gemm_esz(g->cdt);
  for (int64_t i = 0; i < g->m; i++) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    const float *ar = aw + i * ai;
    for (int64_t p = 0; p < g->k; p++) {
      const __m512 av = _mm512_set1_ps(ar[p * ap]);
      const float *br = bw + p * npad;
      for (int v = 0; v < NV; v++)
        acc[v] = _mm512_fmadd_ps(av, _mm512_loadu_ps(br + 16 * v), acc[v]);
    }
    char *cr = (char *)c + i * g->ldc * es;
    for (int v = 0; v < NV; v++) {
      const int64_t left = g->n - 16 * v;
      const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
      ampc_avx512_out16(acc[v], cr + 16 * v * es, g->cdt, g->alpha, g->beta, m);
    }
  }
}

void ampc_gemm_small_avx512(const ampc_gemm_args *g) {
  _Alignas(64) float aw[SMALL_FLOATS], bw[SMALL_FLOATS], col[SMALL_K];
  const int64_t npad = (g->n + 15) / 16 * 16, nv = npad / 16;
  for (int64_t t = 0; t < g->batch; t++) {
    const void *a = ampc_gemm_at(g->a, g->adt, t * g->stride_a);
    const void *b = ampc_gemm_at(g->b, g->bdt, t * g->stride_b);
    void *c = (char *)g->c + t * g->stride_c * (int64_t)ampc_gemm_esz(g->cdt);
    /* op(A): row i contiguous (row-major block) or column p contiguous
     * (p-major block); (ai, ap) address element (i, p) */
    int64_t ai, ap;
    if (g->cs_a == 1) {
      ai = g->k, ap = 1;
      for (int64_t i = 0; i < g->m; i++)
        widen(aw + i * g->k, ampc_gemm_at(a, g->adt, i * g->rs_a), g->adt, g->k);
    } else {
      ai = 1, ap = g->m;
      for (int64_t p = 0; p < g->k; p++)
        widen(aw + p * g->m, ampc_gemm_at(a, g->adt, p * g->cs_a), g->adt, g->m);
    }
    /* op(B) as k rows of npad lanes, the lanes past n zero */
    if (g->cs_b == 1) {
      for (int64_t p = 0; p < g->k; p++) {
        widen(bw + p * npad, ampc_gemm_at(b, g->bdt, p * g->rs_b), g->bdt, g->n);
        for (int64_t j = g->n; j < npad; j++)
          bw[p * npad + j] = 0.0f;
      }
    } else { /* column j of op(B) contiguous: widened, then laid across the rows */
      for (int64_t j = 0; j < npad; j++) {
        if (j < g->n)
          widen(col, ampc_gemm_at(b, g->bdt, j * g->cs_b), g->bdt, g->k);
        for (int64_t p = 0; p < g->k; p++)
          bw[p * npad + j] = j < g->n ? col[p] : 0.0f;
      }
    }
    switch (nv) {
    case 1: rows_nv(1, g, aw, ai, ap, bw, npad, c); break;
    case 2: rows_nv(2, g, aw, ai, ap, bw, npad, c); break;
    case 3: rows_nv(3, g, aw, ai, ap, bw, npad, c); break;
    default: rows_nv(4, g, aw, ai, ap, bw, npad, c); break;
    }
  }
}
