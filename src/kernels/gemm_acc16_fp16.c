/*
 * src/kernels/gemm_acc16_fp16.c: the FP16-accumulation ablation (gemm_portable.c:
 * s <- fp16(a*b + s) after every product, in p order from +0) at hardware
 * speed on CPUs with AVX512-FP16 (Intel Sapphire Rapids and later).
 * VFMADDPH (_mm512_fmadd_ph) computes a*b + s on binary16 operands exactly
 * and rounds once to binary16 (IEEE 754-2008 fusedMultiplyAdd; Intel SDM vol.
 * 2, VFMADDPH), which is the ablation's definition. The scalar path rounds
 * the double FMA of the same operands to binary16. That double is exact
 * unless a*b (22 significant bits) is far below half a binary16 step of s,
 * and then it cannot land on a binary16 tie the exact value is not on (the
 * exact value is at least 2^-33 of a step away from one, a double's step is
 * 2^-42 of it), so both give the same binary16; tests/test_gemm.c checks them
 * bit for bit (tails, transposes, K past the 2048 stall, subnormals,
 * overflow, tiny products on large sums, inf and NaN inputs). A matrix with
 * a NaN operand runs on the AVX2 path instead, whose NaN is the scalar
 * path's (a's, else b's, else the sum's) whatever the compiler's VFMADD
 * operand order.
 *
 * Only for binary16 A and B (VFMADDPH has no other operand type); other
 * dtypes keep the AVX2 or scalar path. Compiled with -mavx512fp16 and called
 * only after the run-time check (ampc_use_avx512fp16). The MXCSR is the
 * default one (round to nearest even, no flush to zero), as for every path.
 *
 * Blocking: 8 rows x 64 columns (2 zmm of 32 halves per row): 16 independent
 * FMA chains, the A value broadcast from memory; A packed in 8-row panels
 * (p-major: one p's 8 values in 16 bytes), B in 64-column panels (a p's row
 * is two aligned loads); K in slices of 256 with each element's binary16 sum
 * carried from slice to slice (exact: it is a binary16 value), so the order
 * of every sum stays p = 0 .. K-1.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"
#include "kernels/gemm_avx512_store.h"
#include "kernels/gemm_impl.h"

enum { RB = 8, CB = 64, KC = 256 };

static int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

static inline uint16_t load_bits(const void *p, int64_t i) {
  uint16_t v;
  memcpy(&v, (const char *)p + 2 * i, 2);
  return v;
}

/* Row r of the block: the A value broadcast into two FMAs. */
#define ROW(r)                                                                                     \
  do {                                                                                             \
    const __m512h av = _mm512_castsi512_ph(_mm512_set1_epi16((short)ap[p * RB + (r)]));            \
    s##r##0 = _mm512_fmadd_ph(av, b0, s##r##0);                                                    \
    s##r##1 = _mm512_fmadd_ph(av, b1, s##r##1);                                                    \
  } while (0)
#define LOAD(r)                                                                                    \
  __m512h s##r##0 = _mm512_load_ph(st + (r)*CB), s##r##1 = _mm512_load_ph(st + (r)*CB + 32)
#define KEEP(r)                                                                                    \
  do {                                                                                             \
    _mm512_store_ph(st + (r)*CB, s##r##0);                                                         \
    _mm512_store_ph(st + (r)*CB + 32, s##r##1);                                                    \
  } while (0)

/* One 8 x 64 block over kc steps of K: the running binary16 sums st (8 x 64,
 * +0 before the first slice) go on from where the previous slice left them,
 * so slicing K keeps every element's sum in p order. ap: kc x 8 (p-major), bp:
 * kc x 64. */
static void block(int64_t kc, const uint16_t *restrict ap, const uint16_t *restrict bp,
                  uint16_t *restrict st) {
  LOAD(0);
  LOAD(1);
  LOAD(2);
  LOAD(3);
  LOAD(4);
  LOAD(5);
  LOAD(6);
  LOAD(7);
  for (int64_t p = 0; p < kc; p++) {
    const __m512h b0 = _mm512_load_ph(bp + p * CB), b1 = _mm512_load_ph(bp + p * CB + 32);
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

/* The block's 8 x 64 sums into C: full 16-column runs in vectors (counted by
 * the tally 64 at a time), the columns past n and any other dtype one by one */
static void epilogue(const ampc_gemm_args *g, void *c, int64_t i0, int64_t j0, const uint16_t *st) {
  const ampc_dtype dt = g->cdt;
  const size_t es = ampc_dtype_size(dt);
  const int vec = dt == AMPC_F32 || dt == AMPC_F16 || dt == AMPC_BF16;
  ampc_tally *const tm = ampc_tally_tls;
  for (int r = 0; r < RB && i0 + r < g->m; r++) {
    const int64_t base = (i0 + r) * g->ldc + j0;
    int jj = 0;
    if (vec) {
      _Alignas(64) float tb[CB];
      for (; jj + 16 <= CB && j0 + jj + 16 <= g->n; jj += 16) {
        const __m256i acc = _mm256_load_si256((const __m256i *)(st + r * CB + jj));
        _mm512_store_ps(tb + jj, ampc_avx512_out16(_mm512_cvtph_ps(acc),
                                                   (char *)c + (base + jj) * (int64_t)es, dt,
                                                   g->alpha, g->beta, (__mmask16)0xFFFF));
      }
      if (tm && jj > 0)
        ampc_tally_count(tm, tb, (char *)c + base * (int64_t)es, dt, (size_t)jj);
    }
    for (; jj < CB && j0 + jj < g->n; jj++)
      ampc_gemm_epilogue1(c, dt, base + jj, g->alpha, g->beta,
                          ampc_bits_f32(ampc_f16bits_to_f32bits(st[r * CB + jj])));
  }
}

ampc_status ampc_gemm_acc16_fp16(const ampc_gemm_args *g, int nthreads) {
  const int64_t m = g->m, n = g->n, k = g->k;
  const int64_t m8 = round_up(m, RB), n64 = round_up(n, CB);
  const int64_t nbi = m8 / RB, nbj = n64 / CB, nblk = nbi * nbj;
  /* halves: A packed (m8 x k, per 8-row panel p-major), B packed (per 64-
   * column panel, k x 64), the running sums (m8 x n64) */
  for (int64_t t = 0; t < g->batch; t++) {
    ampc_acc16_ws w;
    AMPC_TRY(ampc_acc16_workspace(m8, n64, k, sizeof(uint16_t), &w));
    uint16_t *ad = w.a, *bd = w.b, *sd = w.s;
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
            const uint16_t h = i < m ? load_bits(a, i + p * g->cs_a) : 0;
            nan_in |= (h & 0x7FFF) > 0x7C00;
            ad[(i / RB) * RB * k + p * RB + i % RB] = h;
          }
      } else {
#pragma omp for schedule(static) reduction(| : nan_in)
        for (int64_t i = 0; i < m8; i++) {
          uint16_t *dst = ad + (i / RB) * RB * k + i % RB;
          for (int64_t p = 0; p < k; p++) {
            const uint16_t h = i < m ? load_bits(a, i * g->rs_a + p * g->cs_a) : 0;
            nan_in |= (h & 0x7FFF) > 0x7C00;
            dst[p * RB] = h;
          }
        }
      }
#pragma omp for schedule(static) reduction(| : nan_in)
      for (int64_t p = 0; p < k; p++)
        for (int64_t jb = 0; jb < nbj; jb++) {
          uint16_t *dst = bd + jb * CB * k + p * CB;
          for (int jj = 0; jj < CB; jj++) {
            const int64_t j = jb * CB + jj;
            const uint16_t h = j < n ? load_bits(b, p * g->rs_b + j * g->cs_b) : 0;
            nan_in |= (h & 0x7FFF) > 0x7C00;
            dst[jj] = h;
          }
        }
      /* (the reductions end in a barrier: every thread sees the same nan_in) */
      if (!nan_in) {
        const int64_t nsum = m8 * n64;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nsum; i++)
          sd[i] = 0; /* +0 */
        /* K in slices (each block's sums carried over in sd); within a slice
         * the blocks of one 64-column panel run on one thread, B's slice
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
    if (nan_in) /* which NaN a sum ends with: the scalar fma's order */
      AMPC_TRY(ampc_acc16_nan_fallback(g, a, b, c, nthreads));
  }
  return AMPC_OK;
}

/* iters x 12 independent VFMADDPH chains of 32 halves (c = c * 0.5 + 0.5);
 * returns the FLOPs done (bench: ampc_gemm_fma_peak). */
double ampc_peak_f16_avx512fp16(int64_t iters) {
  const __m512h x = _mm512_castsi512_ph(_mm512_set1_epi16(0x3800)), y = x; /* 0.5 */
  __m512h c0 = _mm512_castsi512_ph(_mm512_set1_epi16(0x3C00)), c1 = c0, c2 = c0, c3 = c0, c4 = c0,
          c5 = c0;
  __m512h c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t i = 0; i < iters; i++) {
    c0 = _mm512_fmadd_ph(c0, x, y), c1 = _mm512_fmadd_ph(c1, x, y);
    c2 = _mm512_fmadd_ph(c2, x, y), c3 = _mm512_fmadd_ph(c3, x, y);
    c4 = _mm512_fmadd_ph(c4, x, y), c5 = _mm512_fmadd_ph(c5, x, y);
    c6 = _mm512_fmadd_ph(c6, x, y), c7 = _mm512_fmadd_ph(c7, x, y);
    c8 = _mm512_fmadd_ph(c8, x, y), c9 = _mm512_fmadd_ph(c9, x, y);
    c10 = _mm512_fmadd_ph(c10, x, y), c11 = _mm512_fmadd_ph(c11, x, y);
    __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5));
    __asm__ volatile("" : "+v"(c6), "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
  }
  uint16_t out[32];
  _mm512_storeu_ph(out, _mm512_add_ph(_mm512_add_ph(c0, c1), _mm512_add_ph(c10, c11)));
  volatile uint16_t sink = out[0];
  (void)sink;
  (void)c2, (void)c3, (void)c4, (void)c5, (void)c6, (void)c7, (void)c8, (void)c9;
  return (double)iters * 12 * 32 * 2;
}
