/*
 * src/backend/cuda/cuda_softmax.cu: softmax with the key-padding mask and its backward pass
 * (src/nn/softmax.c) on the GPU: FP32 row sums in a warp tree, exp from
 * src/nn/gelu_math.h's method (the CPU's).
 *
 * Shapes: element-wise kernels are grid-stride loops of 256-thread blocks;
 * row kernels give each row one warp (8 rows a block), the lanes striding
 * over the row and a butterfly (__shfl_xor_sync) combining their sums, so a
 * row's result does not depend on the grid. Built with --fmad=false.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "nn/gelu_math.h"

using namespace ampc_cu;

namespace {

__constant__ double c_exp_taylor[14] = {AMPC_EXP_TAYLOR};

__device__ __forceinline__ float exp32(float x) {
  return (float)ampc_exp_nonpos((double)x, c_exp_taylor);
}

__global__ void softmax_k(int64_t m, int64_t n, const void *x, int xdt, float scale,
                          const uint8_t *mask, int64_t rpm, void *y, int ydt, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) {
    const int64_t base = i * n;
    const uint8_t *mk = mask ? mask + (i / rpm) * n : NULL;
    float mx = -INFINITY;
    for (int64_t j = lane; j < n; j += 32)
      if (!mk || mk[j]) {
        const float v = ld(x, xdt, base + j) * scale;
        mx = v > mx ? v : mx;
      }
    mx = warp_maxf(mx);
    if (mx == -INFINITY) { /* every key masked: zeros, not NaN */
      for (int64_t j = lane; j < n; j += 32) {
        const uint32_t ob = st(y, ydt, base + j, 0.0f);
        if (ds)
          ls.add(0.0f, ydt, ob);
      }
    } else {
      float s = 0.0f;
      for (int64_t j = lane; j < n; j += 32)
        if (!mk || mk[j])
          s += exp32(ld(x, xdt, base + j) * scale - mx);
      const float inv = 1.0f / warp_sumf(s);
      for (int64_t j = lane; j < n; j += 32) {
        const float e = (!mk || mk[j]) ? exp32(ld(x, xdt, base + j) * scale - mx) : 0.0f;
        const float o = e * inv;
        const uint32_t ob = st(y, ydt, base + j, o);
        if (ds)
          ls.add(o, ydt, ob);
      }
    }
  }
  ls.flush(ds);
}

/* softmax_k with the row in registers (n <= 32 C): the scaled inputs and
 * the mask loaded once, each exponential computed once and kept for the
 * output (softmax_k computes it twice and walks the row three times); the
 * same operations in the same order, so the same bits */
template <int C>
__global__ void softmax_c_k(int64_t m, int64_t n, const void *x, int xdt, float scale,
                            const uint8_t *mask, int64_t rpm, void *y, int ydt, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) {
    const int64_t base = i * n;
    const uint8_t *mk = mask ? mask + (i / rpm) * n : NULL;
    float v[C];
    bool on[C];
#pragma unroll
    for (int u = 0; u < C; u++) {
      const int64_t j = lane + 32 * u;
      on[u] = j < n && (!mk || mk[j]);
      v[u] = on[u] ? ld(x, xdt, base + j) * scale : 0.0f;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < C; u++)
      if (on[u])
        mx = v[u] > mx ? v[u] : mx;
    mx = warp_maxf(mx);
    if (mx == -INFINITY) { /* every key masked: zeros, not NaN */
#pragma unroll
      for (int u = 0; u < C; u++)
        if (lane + 32 * u < n) {
          const uint32_t ob = st(y, ydt, base + lane + 32 * u, 0.0f);
          if (ds)
            ls.add(0.0f, ydt, ob);
        }
    } else {
      float s = 0.0f;
#pragma unroll
      for (int u = 0; u < C; u++)
        if (on[u]) {
          v[u] = exp32(v[u] - mx);
          s += v[u];
        }
      const float inv = 1.0f / warp_sumf(s);
#pragma unroll
      for (int u = 0; u < C; u++)
        if (lane + 32 * u < n) {
          const float o = (on[u] ? v[u] : 0.0f) * inv;
          const uint32_t ob = st(y, ydt, base + lane + 32 * u, o);
          if (ds)
            ls.add(o, ydt, ob);
        }
    }
  }
  ls.flush(ds);
}

__global__ void softmax_bwd_k(int64_t m, int64_t n, const void *dy, int gdt, const void *y, int ydt,
                              float scale, void *dx, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) { /* whole warps agree */
    const int64_t base = i * n;
    float dot = 0.0f;
    for (int64_t j = lane; j < n; j += 32)
      dot += ld(dy, gdt, base + j) * ld(y, ydt, base + j);
    dot = warp_sumf(dot);
    for (int64_t j = lane; j < n; j += 32) {
      const float yj = ld(y, ydt, base + j);
      cst(dx, gdt, base + j, scale * yj * (ld(dy, gdt, base + j) - dot), ls, ds);
    }
  }
  ls.flush(ds);
}

/* softmax_bwd_k with the row's dy and y in registers (n <= 32 C): the same
 * operations in the same order */
template <int C>
__global__ void softmax_bwd_c_k(int64_t m, int64_t n, const void *dy, int gdt, const void *y,
                                int ydt, float scale, void *dx, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) { /* whole warps agree */
    const int64_t base = i * n;
    float g[C], yv[C];
#pragma unroll
    for (int u = 0; u < C; u++) {
      const int64_t j = lane + 32 * u;
      g[u] = j < n ? ld(dy, gdt, base + j) : 0.0f;
      yv[u] = j < n ? ld(y, ydt, base + j) : 0.0f;
    }
    float dot = 0.0f;
#pragma unroll
    for (int u = 0; u < C; u++)
      if (lane + 32 * u < n)
        dot += g[u] * yv[u];
    dot = warp_sumf(dot);
#pragma unroll
    for (int u = 0; u < C; u++)
      if (lane + 32 * u < n)
        cst(dx, gdt, base + lane + 32 * u, scale * yv[u] * (g[u] - dot), ls, ds);
  }
  ls.flush(ds);
}

/* blocks for the row kernels: one warp a row, WARPS rows a block */
unsigned rows_grid(int64_t m) { return (unsigned)((m + WARPS - 1) / WARPS); }

} // namespace

extern "C" {

ampc_status ampc_cuda_softmax_forward(int64_t m, int64_t n, const void *x, ampc_dtype xdt,
                                      float scale, const uint8_t *key_mask, int64_t rows_per_mask,
                                      void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_softmax_forward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, ydt);
  if (key_mask)
    CU_CHECK_POS(fn, rows_per_mask);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  if (n <= 32 * 4)
    softmax_c_k<4><<<rows_grid(m), THREADS, 0, strm>>>(m, n, x, xdt, scale, key_mask,
                                                       key_mask ? rows_per_mask : 1, y, ydt, dst);
  else
    softmax_k<<<rows_grid(m), THREADS, 0, strm>>>(m, n, x, xdt, scale, key_mask,
                                                  key_mask ? rows_per_mask : 1, y, ydt, dst);
  FINISH(fn, stats);
}

ampc_status ampc_cuda_softmax_backward(int64_t m, int64_t n, const void *dy, ampc_dtype gdt,
                                       const void *y, ampc_dtype ydt, float scale, void *dx) {
  const char *fn = "ampc_cuda_softmax_backward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_PTR(fn, dx);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  STATS_BEGIN(NULL);
  if (n <= 32 * 4)
    softmax_bwd_c_k<4><<<rows_grid(m), THREADS, 0, strm>>>(m, n, dy, gdt, y, ydt, scale, dx, dst);
  else
    softmax_bwd_k<<<rows_grid(m), THREADS, 0, strm>>>(m, n, dy, gdt, y, ydt, scale, dx, dst);
  FINISH(fn, NULL);
}

} /* extern "C" */
