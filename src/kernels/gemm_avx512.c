/*
 * src/kernels/gemm_avx512.c: the 12 x 32 FP32 micro-kernel on AVX-512F, for the
 * blocked GEMM of gemm_avx2.c (which packs, blocks, threads and rounds; only
 * this inner kernel uses the 512-bit registers). Compiled with -mavx512f and
 * only called after the run-time CPU check (ampc_cpu_has_avx512f).
 *
 * 24 zmm accumulators (12 rows x 2 vectors of 16 columns), 2 zmm for the B
 * row, the A value broadcast from memory into each FMA: 24 independent FMA
 * chains, enough to cover the FMA latency on two 512-bit FMA ports. Each
 * element is summed in p order from +0 by FMA and then added to C, the same
 * operations as the 6 x 16 AVX2 kernel, so the results are the same bits.
 */
#include <immintrin.h>
#include <stdint.h>

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
static void kernel_12x32(int64_t kc, const float *restrict a, const float *restrict b,
                         float *restrict c, int64_t ldc, int accumulate) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00, c81 = c00;
  __m512 c90 = c00, c91 = c00, c100 = c00, c101 = c00, c110 = c00, c111 = c00;
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; p++) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    ROW_FMA(0);
    ROW_FMA(1);
    ROW_FMA(2);
    ROW_FMA(3);
    ROW_FMA(4);
    ROW_FMA(5);
    ROW_FMA(6);
    ROW_FMA(7);
    ROW_FMA(8);
    ROW_FMA(9);
    ROW_FMA(10);
    ROW_FMA(11);
    a += MR;
    b += NR;
  }
  ROW_STORE(0);
  ROW_STORE(1);
  ROW_STORE(2);
  ROW_STORE(3);
  ROW_STORE(4);
  ROW_STORE(5);
  ROW_STORE(6);
  ROW_STORE(7);
  ROW_STORE(8);
  ROW_STORE(9);
  ROW_STORE(10);
  ROW_STORE(11);
}
#undef ROW_FMA
#undef ROW_STORE

const ampc_gemm_ukernel ampc_gemm_uk_avx512 = {MR, NR, kernel_12x32, "avx512f+avx2+fma+f16c"};
