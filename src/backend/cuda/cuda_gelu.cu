/*
 * src/backend/cuda/cuda_gelu.cu: GELU and its derivative (src/nn/gelu.c,
 * src/nn/elementwise.c) on the GPU: src/nn/gelu_math.h's double method,
 * or a table of its 2^16 results for a 16-bit input (the same bits).
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

__constant__ double c_erfcx_cheb[AMPC_ERFCX_N] = {AMPC_ERFCX_CHEB};
__constant__ double c_exp_taylor[14] = {AMPC_EXP_TAYLOR};

/* GELU or its derivative of x as a float: the double method of
 * gelu_math.h rounded once, or, for a 16-bit x with a table (tab: the 2^16
 * results of gelu_table_k, the forward's then the derivative's), the
 * table's entry for x's bits: the same function of the same 65,536 inputs,
 * so the same bits, read from L2 instead of some fifty double operations an
 * element (the double method took 57 us a call on an H200 at mm-base's MLP
 * width, 4 % of a 16-mixed step) */
__device__ __forceinline__ float gelu_of(const void *x, int xdt, int64_t i, int deriv,
                                         const float *tab) {
  if (tab)
    return tab[(deriv ? 65536 : 0) + static_cast<const uint16_t *>(x)[i]];
  return (float)ampc_gelu1((double)ld(x, xdt, i), deriv, c_exp_taylor, c_erfcx_cheb);
}

/* tab [2][65536] = GELU and GELU' of every 16-bit value of dt, as gelu_of
 * computes them without a table */
__global__ void gelu_table_k(int dt, float *tab) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 65536; i += gridDim.x * blockDim.x) {
    const uint16_t bits = (uint16_t)i;
    for (int d = 0; d < 2; d++)
      tab[d * 65536 + i] = gelu_of(&bits, dt, 0, d, NULL);
  }
}

__global__ void gelu_k(int64_t n, const void *x, int xdt, void *y, int ydt, dev_stats *ds,
                       const float *tab) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = gelu_of(x, xdt, i, 0, tab);
    const uint32_t o = st(y, ydt, i, v);
    if (ds)
      ls.add(v, ydt, o);
  }
  ls.flush(ds);
}

__global__ void gelu_bwd_k(int64_t n, const void *dy, int gdt, const void *x, int xdt, void *dx,
                           dev_stats *ds, const float *tab) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float f = gelu_of(x, xdt, i, 1, tab);
    cst(dx, gdt, i, ld(dy, gdt, i) * f, ls, ds);
  }
  ls.flush(ds);
}

/* The tables' entries for |x| < 8 (bits & 0x7FFF below the window: 0x4800
 * for F16, 0x4100 for BF16) copied into shared memory at the start of a
 * block, the rest read from the table in L2: a million or more gathers
 * from L2 (a 32-byte sector each) took three times their streaming
 * traffic; the MLP's pre-activations lie inside the window. tab: the
 * function's table (forward or derivative), win: the window. */
__device__ __forceinline__ void gelu_win_load(float *t, const float *tab, int win) {
  for (int i = threadIdx.x; i < win; i += blockDim.x)
    t[i] = tab[i], t[win + i] = tab[0x8000 + i];
  __syncthreads();
}
__device__ __forceinline__ float gelu_win(const float *t, const float *tab, int win, uint16_t b) {
  const int a = b & 0x7FFF;
  return a < win ? t[(b >> 15) * win + a] : tab[b];
}

/* a block per SM (the window takes most of its shared memory), so each
 * thread takes GELU_ILP elements at a time, their loads issued together:
 * one at a time, a thread's chain of dependent loads (x, then the table)
 * bounded these kernels by latency */
enum { GELU_ILP = 4 };

/* YT / GT: the output's dtype as a template constant (typed), or -1 */
template <int YT>
__global__ void __launch_bounds__(1024) gelu_win_k(int64_t n, const uint16_t *x, void *y, int ydt_,
                                                   dev_stats *ds, const float *tab, int win) {
  const int ydt = TDT(YT, ydt_);
  extern __shared__ float t[];
  gelu_win_load(t, tab, win);
  lstats ls(ds);
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < n;
       i0 += GELU_ILP * stride) {
    uint16_t xb[GELU_ILP];
#pragma unroll
    for (int u = 0; u < GELU_ILP; u++)
      xb[u] = i0 + u * stride < n ? x[i0 + u * stride] : 0;
#pragma unroll
    for (int u = 0; u < GELU_ILP; u++) {
      const int64_t i = i0 + u * stride;
      if (i < n) {
        const float v = gelu_win(t, tab, win, xb[u]);
        const uint32_t o = st(y, ydt, i, v);
        if (ds)
          ls.add(v, ydt, o);
      }
    }
  }
  ls.flush(ds);
}

template <int GT>
__global__ void __launch_bounds__(1024)
    gelu_bwd_win_k(int64_t n, const void *dy, int gdt_, const uint16_t *x, void *dx, dev_stats *ds,
                   const float *tab, int win) {
  const int gdt = TDT(GT, gdt_);
  extern __shared__ float t[];
  gelu_win_load(t, tab, win);
  lstats ls(ds);
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < n;
       i0 += GELU_ILP * stride) {
    uint16_t xb[GELU_ILP];
    float g[GELU_ILP];
#pragma unroll
    for (int u = 0; u < GELU_ILP; u++) {
      const int64_t i = i0 + u * stride;
      xb[u] = i < n ? x[i] : 0;
      g[u] = i < n ? ld(dy, gdt, i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < GELU_ILP; u++) {
      const int64_t i = i0 + u * stride;
      if (i < n)
        cst(dx, gdt, i, g[u] * gelu_win(t, tab, win, xb[u]), ls, ds);
    }
  }
  ls.flush(ds);
}

} // namespace

/* the GELU table of a 16-bit dtype (context scratch slot 13 for F16, 14
 * for BF16, built once: the slot's tag says so); NULL for F32 (no table) */
static ampc_status gelu_table(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, ampc_dtype dt,
                              const float **out) {
  *out = NULL;
  if (dt != AMPC_F16 && dt != AMPC_BF16)
    return AMPC_OK;
  const int slot = dt == AMPC_F16 ? 13 : 14;
  void *p = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, slot, 2 * 65536 * sizeof(float), &p));
  uint64_t *const tag = ampc_cuda_ctx_scratch_tag(ctx, slot);
  if (*tag != 1) {
    gelu_table_k<<<256, THREADS, 0, strm>>>((int)dt, static_cast<float *>(p));
    AMPC_TRY(ampc_cu_launched(fn));
    *tag = 1;
  }
  *out = static_cast<const float *>(p);
  return AMPC_OK;
}

/* the shared-memory launch of the GELU kernels for a 16-bit x of n elements:
 * its window (0 when the plain kernels are better: a small n, whose blocks
 * would spend more on loading the window than on their elements, or a
 * device without the shared memory), the grid (a block per SM: the window
 * takes most of an SM's shared memory) and the bytes */
struct gelu_launch {
  int win, grid;
  size_t smem;
};
static ampc_status gelu_win_setup(const char *fn, ampc_dtype dt, int64_t n, gelu_launch *L) {
  L->win = 0, L->grid = 0, L->smem = 0;
  if ((dt != AMPC_F16 && dt != AMPC_BF16) || n < (1 << 20))
    return AMPC_OK;
  static thread_local int dev_seen = -1, sms = 0, optin = 0, attr_set = 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaGetDevice failed", fn);
  const int win = dt == AMPC_F16 ? 0x4800 : 0x4100;
  const size_t bytes = 2 * (size_t)win * sizeof(float);
  if (dev != dev_seen) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaDeviceGetAttribute failed", fn);
    attr_set = 0;
    if ((size_t)optin >= 2 * (size_t)0x4800 * sizeof(float)) {
      const int big = 2 * 0x4800 * (int)sizeof(float);
      /* every instantiation, generic and typed */
      const void *const ks[] = {
          (const void *)gelu_win_k<-1>,         (const void *)gelu_win_k<DT_F16>,
          (const void *)gelu_win_k<DT_BF16>,    (const void *)gelu_bwd_win_k<-1>,
          (const void *)gelu_bwd_win_k<DT_F16>, (const void *)gelu_bwd_win_k<DT_BF16>};
      bool ok = true;
      for (const void *k : ks)
        ok = ok && cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, big) ==
                       cudaSuccess;
      if (!ok)
        (void)cudaGetLastError();
      else
        attr_set = 1;
    }
    dev_seen = dev;
  }
  if (!attr_set)
    return AMPC_OK;
  L->win = win, L->grid = sms > 0 ? sms : 1, L->smem = bytes;
  return AMPC_OK;
}

extern "C" {

ampc_status ampc_cuda_gelu_forward(int64_t n, const void *x, ampc_dtype xdt, void *y,
                                   ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_gelu_forward";
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  const float *tab = NULL;
  AMPC_TRY(gelu_table(fn, ctx, strm, xdt, &tab));
  gelu_launch L;
  AMPC_TRY(gelu_win_setup(fn, xdt, n, &L));
  STATS_BEGIN(stats);
  if (L.win) {
    const uint16_t *const xb = static_cast<const uint16_t *>(x);
    if (!(ampc_cu_typed() && typed_pick(
                                 ydt, 0, 0,
                                 [&](auto t) {
                                   using T = decltype(t);
                                   gelu_win_k<T::a><<<L.grid, 1024, L.smem, strm>>>(
                                       n, xb, y, ydt, dst, tab, L.win);
                                 },
                                 dts<1, 0, 0>{}, dts<2, 0, 0>{})))
      gelu_win_k<-1><<<L.grid, 1024, L.smem, strm>>>(n, xb, y, ydt, dst, tab, L.win);
  } else
    gelu_k<<<grid_for(n), THREADS, 0, strm>>>(n, x, xdt, y, ydt, dst, tab);
  FINISH(fn, stats);
}

ampc_status ampc_cuda_gelu_backward(int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                                    ampc_dtype xdt, void *dx) {
  const char *fn = "ampc_cuda_gelu_backward";
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, dx);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, xdt);
  CU_BEGIN(fn);
  const float *tab = NULL;
  AMPC_TRY(gelu_table(fn, ctx, strm, xdt, &tab));
  gelu_launch L;
  AMPC_TRY(gelu_win_setup(fn, xdt, n, &L));
  STATS_BEGIN(NULL); /* counted only for a bound rounding tally */
  if (L.win) {
    const uint16_t *const xb = static_cast<const uint16_t *>(x);
    if (!(ampc_cu_typed() && typed_pick(
                                 gdt, 0, 0,
                                 [&](auto t) {
                                   using T = decltype(t);
                                   gelu_bwd_win_k<T::a><<<L.grid, 1024, L.smem, strm>>>(
                                       n, dy, gdt, xb, dx, dst, tab + 65536, L.win);
                                 },
                                 dts<1, 0, 0>{}, dts<2, 0, 0>{})))
      gelu_bwd_win_k<-1>
          <<<L.grid, 1024, L.smem, strm>>>(n, dy, gdt, xb, dx, dst, tab + 65536, L.win);
  } else
    gelu_bwd_k<<<grid_for(n), THREADS, 0, strm>>>(n, dy, gdt, x, xdt, dx, dst, tab);
  FINISH(fn, NULL);
}

} /* extern "C" */
