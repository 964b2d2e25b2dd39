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

static void kernel_12x32(int64_t kc, const float *restrict a, const float *restrict b,
                         float *restrict c, int64_t ldc, int accumulate) {
  __m512 c0[MR], c1[MR];
  for (int r = 0; r < MR; r++)
    c0[r] = c1[r] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; p++) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
      const __m512 av = _mm512_set1_ps(a[r]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
    a += MR;
    b += NR;
  }
  for (int r = 0; r < MR; r++) {
    float *cr = c + r * ldc;
    if (accumulate) {
      c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(cr));
      c1[r] = _mm512_add_ps(c1[r], _mm512_loadu_ps(cr + 16));
    }
    _mm512_storeu_ps(cr, c0[r]);
    _mm512_storeu_ps(cr + 16, c1[r]);
  }
}

const ampc_gemm_ukernel ampc_gemm_uk_avx512 = {MR, NR, kernel_12x32, "avx512f+avx2+fma+f16c"};
