/*
 * src/kernels/gemm_avx2.c: the 6 x 16 FP32 micro-kernel on AVX2 + FMA for the
 * blocked GEMM (gemm_frame.c blocks, threads and loops; gemm_pack_avx2.c
 * packs and rounds into C), registered as ampc_gemm_uk_avx2, and the 256-bit
 * FMA peak loop. Compiled with -mavx2 -mfma -mf16c and only called after the
 * run-time CPU check.
 *
 * 12 ymm accumulators (6 rows x 2 vectors of 8 columns), 2 ymm for the B row,
 * the A value broadcast: 12 independent FMA chains.
 */
#include "internal.h"

#include <immintrin.h>

#include "kernels/gemm_impl.h"

/* C tile (6 x 16, FP32, row stride ldc) = (or +=) A panel * B panel over kc:
 * each element's products summed in p order by FMA from +0, then (accumulate)
 * added to C; the same operations as every other micro-kernel. */
static void kernel_6x16(int64_t kc, const float *restrict a, const float *restrict b,
                        float *restrict c, int64_t ldc, int accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; p++) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 av;
    av = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
    a += 6;
    b += 16;
  }
  __m256 acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (int r = 0; r < 6; r++) {
    float *cr = c + r * ldc;
    if (accumulate) {
      acc[2 * r] = _mm256_add_ps(acc[2 * r], _mm256_load_ps(cr));
      acc[2 * r + 1] = _mm256_add_ps(acc[2 * r + 1], _mm256_load_ps(cr + 8));
    }
    _mm256_store_ps(cr, acc[2 * r]);
    _mm256_store_ps(cr + 8, acc[2 * r + 1]);
  }
}

const ampc_gemm_ukernel ampc_gemm_uk_avx2 = {.mr = 6,
                                             .nr = 16,
                                             .fn = kernel_6x16,
                                             .fn_out = NULL,
                                             .pack = &ampc_gemm_pack_avx2,
                                             .isa = "avx2+fma+f16c"};

/* ---- the FMA peak (bench: ampc_gemm_fma_peak) ------------------------------ */

/* iters x 12 independent 256-bit FP32 FMA chains (c = c * 0.5 + 0.5);
 * returns the FLOPs done. */
double ampc_peak_f32_avx2(int64_t iters) {
  const __m256 x = _mm256_set1_ps(0.5f), y = _mm256_set1_ps(0.5f);
  __m256 c0 = _mm256_set1_ps(1.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m256 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t i = 0; i < iters; i++) {
    c0 = _mm256_fmadd_ps(c0, x, y), c1 = _mm256_fmadd_ps(c1, x, y);
    c2 = _mm256_fmadd_ps(c2, x, y), c3 = _mm256_fmadd_ps(c3, x, y);
    c4 = _mm256_fmadd_ps(c4, x, y), c5 = _mm256_fmadd_ps(c5, x, y);
    c6 = _mm256_fmadd_ps(c6, x, y), c7 = _mm256_fmadd_ps(c7, x, y);
    c8 = _mm256_fmadd_ps(c8, x, y), c9 = _mm256_fmadd_ps(c9, x, y);
    c10 = _mm256_fmadd_ps(c10, x, y), c11 = _mm256_fmadd_ps(c11, x, y);
    __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5));
    __asm__ volatile("" : "+x"(c6), "+x"(c7), "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c10, c11)));
  volatile float sink = out[0];
  (void)sink;
  (void)c2, (void)c3, (void)c4, (void)c5, (void)c6, (void)c7, (void)c8, (void)c9;
  return (double)iters * 12 * 8 * 2;
}
