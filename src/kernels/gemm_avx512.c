/*
 * src/kernels/gemm_avx512.c: the 12 x 32 FP32 micro-kernel on AVX-512F, for the
 * blocked GEMM of gemm_frame.c (which blocks, threads and loops, with the
 * packing and output kernels of gemm_pack_avx2.c; only this inner kernel
 * uses the 512-bit registers), registered as ampc_gemm_uk_avx512. Compiled with -mavx512f
 * -mavx512bw -mavx512vl and only called after the run-time CPU check
 * (ampc_cpu_has_avx512f: F, BW and VL).
 *
 * 24 zmm accumulators (12 rows x 2 vectors of 16 columns), 2 zmm for the B
 * row, the A value broadcast from memory into each FMA: 24 independent FMA
 * chains, enough to cover the FMA latency on two 512-bit FMA ports. Each
 * element is summed in p order from +0 by FMA and then added to C, the same
 * operations as the 6 x 16 AVX2 kernel, so the results are the same bits.
 *
 * The fused variant runs on the last K slice: instead of leaving the FP32 sums
 * in the task's C block for the output kernel (gemm_pack_avx2.c), it forms alpha*sum +
 * beta*C (two products and a sum, no FMA, as the epilogue does) and rounds
 * straight into C's dtype, masking the rows and columns past an edge: the
 * same values, one pass over memory less.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_avx512_store.h"
#include "kernels/gemm_impl.h"

enum { MR = 12, NR = 32 };

/* One row r of the tile: the A value broadcast into two FMAs. */
#define ROW_FMA(r)                                                                                 \
  do {                                                                                             \
    const __m512 av = _mm512_set1_ps(a[r]);                                                        \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                    \
    c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                                    \
  } while (0)
/* Store row r (after adding C when accumulating). */
#define ROW_STORE(r)                                                                               \
  do {                                                                                             \
    float *cr = c + (r)*ldc;                                                                       \
    if (accumulate) {                                                                              \
      c##r##0 = _mm512_add_ps(c##r##0, _mm512_loadu_ps(cr));                                       \
      c##r##1 = _mm512_add_ps(c##r##1, _mm512_loadu_ps(cr + 16));                                  \
    }                                                                                              \
    _mm512_storeu_ps(cr, c##r##0);                                                                 \
    _mm512_storeu_ps(cr + 16, c##r##1);                                                            \
  } while (0)

/* The accumulators are named variables (not an array) so that they stay in
 * registers from the zeroing to the stores. */
#define KERNEL_LOOP()                                                                              \
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;         \
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;                         \
  __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00, c81 = c00;                         \
  __m512 c90 = c00, c91 = c00, c100 = c00, c101 = c00, c110 = c00, c111 = c00;                     \
  _Pragma("GCC unroll 2") for (int64_t p = 0; p < kc; p++) {                                       \
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);                              \
    ROW_FMA(0);                                                                                    \
    ROW_FMA(1);                                                                                    \
    ROW_FMA(2);                                                                                    \
    ROW_FMA(3);                                                                                    \
    ROW_FMA(4);                                                                                    \
    ROW_FMA(5);                                                                                    \
    ROW_FMA(6);                                                                                    \
    ROW_FMA(7);                                                                                    \
    ROW_FMA(8);                                                                                    \
    ROW_FMA(9);                                                                                    \
    ROW_FMA(10);                                                                                   \
    ROW_FMA(11);                                                                                   \
    a += MR;                                                                                       \
    b += NR;                                                                                       \
  }

/* The tile's 12 rows into the FP32 block (STORE_TILE) or, in the fused
 * variants, straight into C with the rows and columns past an edge masked
 * (OUT_TILE); both kernels (FMA and VDPBF16PS) end with one of these. */
#define STORE_TILE()                                                                               \
  ROW_STORE(0);                                                                                    \
  ROW_STORE(1);                                                                                    \
  ROW_STORE(2);                                                                                    \
  ROW_STORE(3);                                                                                    \
  ROW_STORE(4);                                                                                    \
  ROW_STORE(5);                                                                                    \
  ROW_STORE(6);                                                                                    \
  ROW_STORE(7);                                                                                    \
  ROW_STORE(8);                                                                                    \
  ROW_STORE(9);                                                                                    \
  ROW_STORE(10);                                                                                   \
  ROW_STORE(11)
#define OUT_TILE()                                                                                 \
  const int64_t es = o->dt == AMPC_F32 ? 4 : 2;                                                    \
  const int cols = o->cols;                                                                        \
  const __mmask16 m0 = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1u);            \
  const __mmask16 m1 = cols >= 32  ? (__mmask16)0xFFFF                                             \
                       : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1u)                         \
                                   : (__mmask16)0;                                                 \
  const __m512 bias0 = o->bias ? _mm512_maskz_loadu_ps(m0, o->bias) : _mm512_setzero_ps();         \
  const __m512 bias1 = o->bias ? _mm512_maskz_loadu_ps(m1, o->bias + 16) : _mm512_setzero_ps();    \
  const float alpha = o->bias ? 1.0f : o->alpha;                                                   \
  ROW_OUT(0);                                                                                      \
  ROW_OUT(1);                                                                                      \
  ROW_OUT(2);                                                                                      \
  ROW_OUT(3);                                                                                      \
  ROW_OUT(4);                                                                                      \
  ROW_OUT(5);                                                                                      \
  ROW_OUT(6);                                                                                      \
  ROW_OUT(7);                                                                                      \
  ROW_OUT(8);                                                                                      \
  ROW_OUT(9);                                                                                      \
  ROW_OUT(10);                                                                                     \
  ROW_OUT(11)

static void kernel_12x32(int64_t kc, const float *restrict a, const float *restrict b,
                         float *restrict c, int64_t ldc, int accumulate) {
  KERNEL_LOOP()
  STORE_TILE();
}

/* Row r of the fused variant: add the earlier slices' sums, then the output stage. */
#define ROW_OUT(r)                                                                                 \
  do {                                                                                             \
    if ((r) < o->rows) {                                                                           \
      if (accumulate) {                                                                            \
        c##r##0 = _mm512_add_ps(c##r##0, _mm512_loadu_ps(cs + (r)*ldcs));                          \
        c##r##1 = _mm512_add_ps(c##r##1, _mm512_loadu_ps(cs + (r)*ldcs + 16));                     \
      }                                                                                            \
      char *crow = (char *)o->c + (r)*o->ldc * es;                                                 \
      if (o->bias) { /* alpha * sum + bias, then stored as 1 * v (exact) */                        \
        c##r##0 = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(o->alpha), c##r##0), bias0);          \
        c##r##1 = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(o->alpha), c##r##1), bias1);          \
      }                                                                                            \
      ampc_avx512_out16(c##r##0, crow, o->dt, alpha, o->beta, m0);                                 \
      ampc_avx512_out16(c##r##1, crow + 16 * es, o->dt, alpha, o->beta, m1);                       \
    }                                                                                              \
  } while (0)

static void kernel_12x32_out(int64_t kc, const float *restrict a, const float *restrict b,
                             const float *cs, int64_t ldcs, int accumulate,
                             const ampc_gemm_out *o) {
  KERNEL_LOOP()
  OUT_TILE();
}

/* ---- bfloat16 operands on VDPBF16PS (AVX512-BF16) ------------------------- */

/* One row r of the tile: the A pair broadcast into two VDPBF16PS. */
#define ROW_DP(r)                                                                                  \
  do {                                                                                             \
    const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r]);                                    \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                                   \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                                                   \
  } while (0)

/* The same tile over kc products in ceil(kc / 2) packed pairs: each 32-bit
 * word holds op(A)[i][p] (high half) and op(A)[i][p+1] (low half), and the
 * same for B, with a zero low half when p + 1 == kc. VDPBF16PS adds the
 * high halves' product first, then the low halves' (each product of two
 * bfloat16 is exact in FP32 and each addition rounds to nearest), which is
 * the FMA chain's p order; its DAZ/FTZ never acts on the operands
 * ampc_gemm_bf16dot_accepts admits (gemm_pack_avx2.c). */
#define KERNEL_LOOP_DP()                                                                           \
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;         \
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;                         \
  __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00, c81 = c00;                         \
  __m512 c90 = c00, c91 = c00, c100 = c00, c101 = c00, c110 = c00, c111 = c00;                     \
  const uint32_t *a = (const uint32_t *)a_;                                                        \
  const uint32_t *b = (const uint32_t *)b_;                                                        \
  const int64_t kp = (kc + 1) / 2;                                                                 \
  _Pragma("GCC unroll 2") for (int64_t p = 0; p < kp; p++) {                                       \
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);  \
    ROW_DP(0);                                                                                     \
    ROW_DP(1);                                                                                     \
    ROW_DP(2);                                                                                     \
    ROW_DP(3);                                                                                     \
    ROW_DP(4);                                                                                     \
    ROW_DP(5);                                                                                     \
    ROW_DP(6);                                                                                     \
    ROW_DP(7);                                                                                     \
    ROW_DP(8);                                                                                     \
    ROW_DP(9);                                                                                     \
    ROW_DP(10);                                                                                    \
    ROW_DP(11);                                                                                    \
    a += MR;                                                                                       \
    b += NR;                                                                                       \
  }

static void kernel_12x32_dp(int64_t kc, const float *restrict a_, const float *restrict b_,
                            float *restrict c, int64_t ldc, int accumulate) {
  KERNEL_LOOP_DP()
  STORE_TILE();
}

static void kernel_12x32_dp_out(int64_t kc, const float *restrict a_, const float *restrict b_,
                                const float *cs, int64_t ldcs, int accumulate,
                                const ampc_gemm_out *o) {
  KERNEL_LOOP_DP()
  OUT_TILE();
}
#undef KERNEL_LOOP_DP
#undef STORE_TILE
#undef OUT_TILE
#undef ROW_DP
#undef ROW_OUT
#undef KERNEL_LOOP
#undef ROW_FMA
#undef ROW_STORE

const ampc_gemm_ukernel ampc_gemm_uk_avx512 = {.mr = MR,
                                               .nr = NR,
                                               .fn = kernel_12x32,
                                               .fn_out = kernel_12x32_out,
                                               .pack = &ampc_gemm_pack_avx2,
                                               .isa = "avx512f+avx2+fma+f16c"};

const ampc_gemm_ukernel ampc_gemm_uk_avx512bf16 = {.mr = MR,
                                                   .nr = NR,
                                                   .fn = kernel_12x32_dp,
                                                   .fn_out = kernel_12x32_dp_out,
                                                   .pack = &ampc_gemm_pack_avx2,
                                                   .isa = "avx512bf16+avx512f+avx2+fma+f16c",
                                                   .bf16_pairs = 1,
                                                   .fallback = &ampc_gemm_uk_avx512};

/* VDPBF16PS against the model the kernel relies on: acc + hi product (rounded
 * to nearest), then + lo product, FMA by FMA; a tie that the two orders (and
 * an exact two-product sum) round differently first, then random in-range
 * lanes. 1 when every lane matches (cached by the caller). */
int ampc_gemm_bf16dot_probe(void) {
  uint32_t pa[16], pb[16];
  float acc[16], want[16], got[16];
  uint32_t x = 12345u;
  for (int i = 0; i < 16; i++) {
    uint16_t v[4];
    for (int j = 0; j < 4; j++) { /* bf16 in [2^-8, 2^8), either sign */
      x = x * 1664525u + 1013904223u;
      v[j] = (uint16_t)(((x >> 31) << 15) | ((119u + (x >> 8) % 16u) << 7) | ((x >> 16) & 0x7Fu));
    }
    pa[i] = (uint32_t)v[0] << 16 | v[1];
    pb[i] = (uint32_t)v[2] << 16 | v[3];
    x = x * 1664525u + 1013904223u;
    acc[i] = (float)(int32_t)(x >> 8) * 0x1p-8f;
  }
  pa[0] = 0xCB803F80u, pb[0] = 0x3F803F80u, acc[0] = 0x1p24f; /* (-2^24, 1): 2^24 - 2^24 + 1 */
  pa[1] = 0x3F80CB80u, pb[1] = 0x3F803F80u, acc[1] = 0x1p24f; /* (1, -2^24): 2^24 + 1 - 2^24 */
  for (int i = 0; i < 16; i++) {
    float f[4];
    const uint32_t w[4] = {pa[i] & 0xFFFF0000u, pa[i] << 16, pb[i] & 0xFFFF0000u, pb[i] << 16};
    memcpy(f, w, sizeof f);
    want[i] = fmaf(f[1], f[3], fmaf(f[0], f[2], acc[i]));
  }
  _mm512_storeu_ps(got, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(pa),
                                         (__m512bh)_mm512_loadu_si512(pb)));
  return memcmp(got, want, sizeof got) == 0 && got[0] == 1.0f && got[1] == 0.0f;
}

/* ---- the FMA peak (bench: ampc_gemm_fma_peak) ------------------------------ */

/* iters x 12 independent 512-bit FP32 FMA chains (c = c * 0.5 + 0.5: every
 * value stays normal); returns the FLOPs done (2 per lane per FMA). */
double ampc_peak_f32_avx512(int64_t iters) {
  const __m512 x = _mm512_set1_ps(0.5f), y = _mm512_set1_ps(0.5f);
  __m512 c0 = _mm512_set1_ps(1.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m512 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t i = 0; i < iters; i++) {
    c0 = _mm512_fmadd_ps(c0, x, y), c1 = _mm512_fmadd_ps(c1, x, y);
    c2 = _mm512_fmadd_ps(c2, x, y), c3 = _mm512_fmadd_ps(c3, x, y);
    c4 = _mm512_fmadd_ps(c4, x, y), c5 = _mm512_fmadd_ps(c5, x, y);
    c6 = _mm512_fmadd_ps(c6, x, y), c7 = _mm512_fmadd_ps(c7, x, y);
    c8 = _mm512_fmadd_ps(c8, x, y), c9 = _mm512_fmadd_ps(c9, x, y);
    c10 = _mm512_fmadd_ps(c10, x, y), c11 = _mm512_fmadd_ps(c11, x, y);
    __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5));
    __asm__ volatile("" : "+v"(c6), "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
  }
  volatile float sink = _mm512_reduce_add_ps(
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)),
                                  _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)))));
  (void)sink;
  return (double)iters * 12 * 16 * 2;
}

/* iters x 12 independent VDPBF16PS chains (c = c + 0.5 * 0.5 + 0.5 * 0.5 per
 * lane: two products and two sums, 4 FLOPs per lane; the values grow by 0.5
 * a step and stay normal); returns the FLOPs done. */
double ampc_peak_bf16_avx512bf16(int64_t iters) {
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F003F00); /* (0.5, 0.5) */
  __m512 c0 = _mm512_set1_ps(1.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m512 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t i = 0; i < iters; i++) {
    c0 = _mm512_dpbf16_ps(c0, x, x), c1 = _mm512_dpbf16_ps(c1, x, x);
    c2 = _mm512_dpbf16_ps(c2, x, x), c3 = _mm512_dpbf16_ps(c3, x, x);
    c4 = _mm512_dpbf16_ps(c4, x, x), c5 = _mm512_dpbf16_ps(c5, x, x);
    c6 = _mm512_dpbf16_ps(c6, x, x), c7 = _mm512_dpbf16_ps(c7, x, x);
    c8 = _mm512_dpbf16_ps(c8, x, x), c9 = _mm512_dpbf16_ps(c9, x, x);
    c10 = _mm512_dpbf16_ps(c10, x, x), c11 = _mm512_dpbf16_ps(c11, x, x);
    __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5));
    __asm__ volatile("" : "+v"(c6), "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
  }
  volatile float sink = _mm512_reduce_add_ps(
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)),
                                  _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)))));
  (void)sink;
  return (double)iters * 12 * 16 * 4;
}
