/*
 * src/cuda/cuda_nn.cu: the layers of ampc/nn.h that are not GEMMs, on the
 * GPU (ampc/cuda_nn.h says what matches the CPU bit for bit and what does
 * not): residual add, GELU, layer norm, softmax with the key-padding mask,
 * token + position embeddings (the backward pass sums each id's rows in row
 * order after a stable counting sort), the ViT tokens, the gradient add,
 * masked mean pooling and L2 normalisation.
 *
 * Shapes: element-wise kernels are grid-stride loops of 256-thread blocks;
 * row kernels give each row one warp (8 rows a block), the lanes striding
 * over the row and a butterfly (__shfl_xor_sync) combining their sums, so a
 * row's result does not depend on the grid. Built with --fmad=false.
 */
#include <atomic>
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

__device__ __forceinline__ float exp32(float x) {
  return (float)ampc_exp_nonpos((double)x, c_exp_taylor);
}

/* ---- element-wise -------------------------------------------------------- */

/* Generic: I int64_t, AT = BT = YT = -1; typed: the dtypes as constants and
 * 32-bit indices where every index fits (cuda_common.cuh) */
template <typename I, int AT, int BT, int YT>
__global__ void add_k(I n, const void *a, int adt_, const void *b, int bdt_, void *y, int ydt_,
                      dev_stats *ds) {
  const int adt = TDT(AT, adt_), bdt = TDT(BT, bdt_), ydt = TDT(YT, ydt_);
  lstats ls(ds);
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const float v = ld(a, adt, i) + ld(b, bdt, i);
    const uint32_t o = st(y, ydt, i, v);
    if (ds)
      ls.add(v, ydt, o);
  }
  ls.flush(ds);
}

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

__global__ void grad_add_k(int64_t n, const float *v, void *g, int gdt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    cst(g, gdt, i, ld(g, gdt, i) + v[i], ls, ds);
  ls.flush(ds);
}

/* ---- layer norm ----------------------------------------------------------- */

__global__ void ln_fwd_k(int64_t m, int64_t d, const void *x, int xdt, const void *gamma,
                         const void *beta, int wdt, float eps, void *y, int ydt, float *mean,
                         float *rstd, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) { /* whole warps agree: no lane leaves before the shuffles */
    const int64_t base = i * d;
    double s = 0.0;
    for (int64_t j = lane; j < d; j += 32)
      s += (double)ld(x, xdt, base + j);
    const double mu = warp_sum(s) / (double)d;
    double q = 0.0;
    for (int64_t j = lane; j < d; j += 32) {
      const double c = (double)ld(x, xdt, base + j) - mu;
      q += c * c;
    }
    const double v = warp_sum(q);
    const double r = 1.0 / sqrt(v / (double)d + (double)eps);
    if (lane == 0)
      mean[i] = (float)mu, rstd[i] = (float)r;
    const float muf = (float)mu, rf = (float)r;
    for (int64_t j = lane; j < d; j += 32) {
      const float xhat = (ld(x, xdt, base + j) - muf) * rf;
      const float o = xhat * ld(gamma, wdt, j) + ld(beta, wdt, j);
      const uint32_t ob = st(y, ydt, base + j, o);
      if (ds)
        ls.add(o, ydt, ob);
    }
  }
  ls.flush(ds);
}

/* dx per row (a warp a row); dy may be dx (each lane reads an element before
 * it writes it) */
__global__ void ln_bwd_dx_k(int64_t m, int64_t d, const void *dy, int gdt, const void *x, int xdt,
                            const void *gamma, int wdt, const float *mean, const float *rstd,
                            void *dx, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) { /* whole warps agree: no lane leaves before the shuffles */
    const int64_t base = i * d;
    const float mi = mean[i], ri = rstd[i];
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = lane; j < d; j += 32) {
      const float xhat = (ld(x, xdt, base + j) - mi) * ri;
      const float gg = ld(dy, gdt, base + j) * ld(gamma, wdt, j);
      sg += (double)gg;
      sgx += (double)gg * (double)xhat;
    }
    const float mg = (float)(warp_sum(sg) / (double)d), mgx = (float)(warp_sum(sgx) / (double)d);
    for (int64_t j = lane; j < d; j += 32) {
      const float xhat = (ld(x, xdt, base + j) - mi) * ri;
      const float g = ld(dy, gdt, base + j);
      cst(dx, gdt, base + j, ri * (g * ld(gamma, wdt, j) - mg - xhat * mgx), ls, ds);
    }
  }
  ls.flush(ds);
}

/* ln_fwd_k with the row in registers (d <= 32 C) and the dtypes as
 * template constants (the typed path, cuda_common.cuh): the row's loads
 * issued together, once, where ln_fwd_k walks the row three times; the same
 * operations in the same order (lane, lane + 32, ...), so ln_fwd_k's bits.
 * Without the constants (commit b491cb5) this measured no faster than
 * ln_fwd_k on an H200 (18.8 against 17.5 us at 4160 x 512), a floor of ~15
 * us a call whatever the rows (1536 rows: 16 us), which the loads do not
 * explain; its code, unrolled over three dtypes per load, was 7,700
 * instructions. */
template <int C, int XT, int WT, int YT>
__global__ void ln_fwd_c_k(int64_t m, int64_t d, const void *x, const void *gamma, const void *beta,
                           float eps, void *y, float *mean, float *rstd, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) { /* whole warps agree: no lane leaves before the shuffles */
    const int64_t base = i * d;
    float xv[C];
#pragma unroll
    for (int u = 0; u < C; u++)
      xv[u] = lane + 32 * u < d ? ld(x, XT, base + lane + 32 * u) : 0.0f;
    double s = 0.0;
#pragma unroll
    for (int u = 0; u < C; u++)
      if (lane + 32 * u < d)
        s += (double)xv[u];
    const double mu = warp_sum(s) / (double)d;
    double q = 0.0;
#pragma unroll
    for (int u = 0; u < C; u++)
      if (lane + 32 * u < d) {
        const double c = (double)xv[u] - mu;
        q += c * c;
      }
    const double v = warp_sum(q);
    const double r = 1.0 / sqrt(v / (double)d + (double)eps);
    if (lane == 0)
      mean[i] = (float)mu, rstd[i] = (float)r;
    const float muf = (float)mu, rf = (float)r;
#pragma unroll
    for (int u = 0; u < C; u++) {
      const int64_t j = lane + 32 * u;
      if (j < d) {
        const float xhat = (xv[u] - muf) * rf;
        const float o = xhat * ld(gamma, WT, j) + ld(beta, WT, j);
        const uint32_t ob = st(y, YT, base + j, o);
        if (ds)
          ls.add(o, YT, ob);
      }
    }
  }
  ls.flush(ds);
}

/* ln_bwd_dx_k with the row's x and dy in registers (d <= 32 C) and the
 * dtypes as template constants, as ln_fwd_c_k: ln_bwd_dx_k's operations in
 * its order, so its bits; dy may be dx (each lane reads its elements
 * before it writes them) */
template <int C, int GT, int XT, int WT>
__global__ void ln_bwd_dx_c_k(int64_t m, int64_t d, const void *dy, const void *x,
                              const void *gamma, const float *mean, const float *rstd, void *dx,
                              dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) { /* whole warps agree: no lane leaves before the shuffles */
    const int64_t base = i * d;
    const float mi = mean[i], ri = rstd[i];
    float xv[C], gv[C];
#pragma unroll
    for (int u = 0; u < C; u++) {
      const int64_t j = lane + 32 * u;
      xv[u] = j < d ? ld(x, XT, base + j) : 0.0f;
      gv[u] = j < d ? ld(dy, GT, base + j) : 0.0f;
    }
    double sg = 0.0, sgx = 0.0;
#pragma unroll
    for (int u = 0; u < C; u++) {
      const int64_t j = lane + 32 * u;
      if (j < d) {
        const float xhat = (xv[u] - mi) * ri;
        const float gg = gv[u] * ld(gamma, WT, j);
        sg += (double)gg;
        sgx += (double)gg * (double)xhat;
      }
    }
    const float mg = (float)(warp_sum(sg) / (double)d), mgx = (float)(warp_sum(sgx) / (double)d);
#pragma unroll
    for (int u = 0; u < C; u++) {
      const int64_t j = lane + 32 * u;
      if (j < d) {
        const float xhat = (xv[u] - mi) * ri;
        cst(dx, GT, base + j, ri * (gv[u] * ld(gamma, WT, j) - mg - xhat * mgx), ls, ds);
      }
    }
  }
  ls.flush(ds);
}

enum { LN_RB = 32 };    /* rows per block of the parameter-gradient sums (the CPU's) */
enum { LN_UNROLL = 8 }; /* row blocks' partials loaded at once by ln_bwd_final_k */

/* part[rb][0..d) = sum over block rb's rows of dy * xhat, part[rb][d..2d) =
 * of dy, in double in row order; reads dy before ln_bwd_dx_k overwrites it */
__global__ void ln_bwd_part_k(int64_t m, int64_t d, int64_t nrb, const void *dy, int gdt,
                              const void *x, int xdt, const float *mean, const float *rstd,
                              double *part) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < nrb * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t rb = e / d, j = e % d;
    const int64_t i1 = (rb + 1) * LN_RB < m ? (rb + 1) * LN_RB : m;
    double pg = 0.0, pb = 0.0;
    for (int64_t i = rb * LN_RB; i < i1; i++) {
      const float xhat = (ld(x, xdt, i * d + j) - mean[i]) * rstd[i];
      const float g = ld(dy, gdt, i * d + j);
      pg += (double)g * (double)xhat;
      pb += (double)g;
    }
    part[rb * 2 * d + j] = pg;
    part[rb * 2 * d + d + j] = pb;
  }
}

/* ln_bwd_part_k with the dtypes as template constants and the rows' loads
 * issued LN_PILP rows at a time before their sums (still in row order:
 * ln_bwd_part_k's bits). ln_bwd_part_k's chain of 32 dependent loads took
 * ~11 us a call at every size mm-base has (96 to 260 blocks) on an H200:
 * the latency of the chain, not the traffic. */
enum { LN_PILP = 8 };
static_assert(LN_RB % LN_PILP == 0, "whole load groups per row block");
template <int GT, int XT>
__global__ void ln_bwd_part_b_k(int64_t m, int64_t d, int64_t nrb, const void *dy, const void *x,
                                const float *mean, const float *rstd, double *part) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < nrb * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t rb = e / d, j = e % d, i1 = (rb + 1) * LN_RB < m ? (rb + 1) * LN_RB : m;
    double pg = 0.0, pb = 0.0;
    for (int64_t i0 = rb * LN_RB; i0 < i1; i0 += LN_PILP) {
      float xv[LN_PILP], gv[LN_PILP], mv[LN_PILP], rv[LN_PILP];
#pragma unroll
      for (int u = 0; u < LN_PILP; u++) {
        const int64_t i = i0 + u;
        const bool in = i < i1;
        xv[u] = in ? ld(x, XT, i * d + j) : 0.0f;
        gv[u] = in ? ld(dy, GT, i * d + j) : 0.0f;
        mv[u] = in ? mean[i] : 0.0f;
        rv[u] = in ? rstd[i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < LN_PILP; u++)
        if (i0 + u < i1) {
          const float xhat = (xv[u] - mv[u]) * rv[u];
          pg += (double)gv[u] * (double)xhat;
          pb += (double)gv[u];
        }
    }
    part[rb * 2 * d + j] = pg;
    part[rb * 2 * d + d + j] = pb;
  }
}

__global__ void ln_bwd_final_k(int64_t d, int64_t nrb, const double *part, void *dgamma,
                               void *dbeta, int gdt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < d;
       j += (int64_t)gridDim.x * blockDim.x) {
    /* in row-block order (the CPU's); LN_UNROLL blocks' partials loaded
     * before they are added, so the loads overlap: one load and add at a
     * time made this a chain of memory latencies (~70 us a call at
     * mm-base's 4160 x 512, a thread per column) */
    double sgm = 0.0, sbt = 0.0;
    int64_t rb = 0;
    for (; rb + LN_UNROLL <= nrb; rb += LN_UNROLL) {
      double pg[LN_UNROLL], pb[LN_UNROLL];
#pragma unroll
      for (int u = 0; u < LN_UNROLL; u++) {
        pg[u] = part[(rb + u) * 2 * d + j];
        pb[u] = part[(rb + u) * 2 * d + d + j];
      }
#pragma unroll
      for (int u = 0; u < LN_UNROLL; u++)
        sgm += pg[u], sbt += pb[u];
    }
    for (; rb < nrb; rb++) {
      sgm += part[rb * 2 * d + j];
      sbt += part[rb * 2 * d + d + j];
    }
    cst(dgamma, gdt, j, ld(dgamma, gdt, j) + (float)sgm, ls, ds);
    cst(dbeta, gdt, j, ld(dbeta, gdt, j) + (float)sbt, ls, ds);
  }
  ls.flush(ds);
}

/* ln_bwd_final_k with a warp per column: the lanes load 32 row blocks'
 * partials at once and the sums take them lane by lane (shuffles), in
 * row-block order as ln_bwd_final_k, so the same bits; 16 times the
 * threads (a thread per column left all but two SMs idle: 21 us a call at
 * mm-base's 4160 x 512 on an H200) */
__global__ void ln_bwd_final_w_k(int64_t d, int64_t nrb, const double *part, void *dgamma,
                                 void *dbeta, int gdt, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t j = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (j < d) { /* whole warps agree */
    double sgm = 0.0, sbt = 0.0;
    for (int64_t rb = 0; rb < nrb; rb += 32) {
      const bool in = rb + lane < nrb;
      const double pg = in ? part[(rb + lane) * 2 * d + j] : 0.0;
      const double pb = in ? part[(rb + lane) * 2 * d + d + j] : 0.0;
      const int n = nrb - rb < 32 ? (int)(nrb - rb) : 32;
      for (int u = 0; u < n; u++) {
        sgm += __shfl_sync(0xFFFFFFFFu, pg, u);
        sbt += __shfl_sync(0xFFFFFFFFu, pb, u);
      }
    }
    if (lane == 0) {
      cst(dgamma, gdt, j, ld(dgamma, gdt, j) + (float)sgm, ls, ds);
      cst(dbeta, gdt, j, ld(dbeta, gdt, j) + (float)sbt, ls, ds);
    }
  }
  ls.flush(ds);
}

/* ---- softmax --------------------------------------------------------------- */

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

/* ---- embeddings, ViT tokens ------------------------------------------------ */

__global__ void emb_fwd_k(int64_t rows, int64_t t, int64_t d, const int32_t *ids, const void *tok,
                          const void *pos, int wdt, void *y, int ydt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / d, j = e % d;
    const float v = ld(tok, wdt, (int64_t)ids[r] * d + j) + ld(pos, wdt, (r % t) * d + j);
    const uint32_t o = st(y, ydt, e, v);
    if (ds)
      ls.add(v, ydt, o);
  }
  ls.flush(ds);
}

/* rank[r] = how many earlier rows have row r's id; count[id] += 1 (an id
 * outside [0, nid): rank -1, in no group) */
__global__ void emb_rank_k(int64_t rows, const int32_t *ids, int64_t nid, int32_t *rank,
                           int32_t *count) {
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
       r += (int64_t)gridDim.x * blockDim.x) {
    const int32_t id = ids[r];
    if (id < 0 || id >= nid) {
      rank[r] = -1;
      continue;
    }
    int32_t k = 0;
    for (int64_t q = 0; q < r; q++)
      k += ids[q] == id;
    rank[r] = k;
    atomicAdd(&count[id], 1);
  }
}

/* count -> exclusive prefix sums, in place (one block of THREADS; vocab is
 * small): a Hillis-Steele scan per tile of THREADS ids, carried across tiles */
__global__ void emb_scan_k(int64_t vocab, int32_t *count) {
  __shared__ int32_t buf[THREADS];
  __shared__ int32_t carry;
  const int tid = (int)threadIdx.x;
  if (tid == 0)
    carry = 0;
  __syncthreads();
  for (int64_t c0 = 0; c0 < vocab; c0 += THREADS) {
    const int64_t v = c0 + tid;
    const int32_t mine = v < vocab ? count[v] : 0;
    buf[tid] = mine;
    __syncthreads();
    for (int o = 1; o < THREADS; o <<= 1) {
      const int32_t add = tid >= o ? buf[tid - o] : 0;
      __syncthreads();
      buf[tid] += add;
      __syncthreads();
    }
    const int32_t base = carry;
    if (v < vocab)
      count[v] = base + buf[tid] - mine; /* exclusive */
    __syncthreads();
    if (tid == THREADS - 1)
      carry = base + buf[THREADS - 1];
    __syncthreads();
  }
}

/* sorted[start[id] + rank[r]] = r: rows grouped by id, in row order */
__global__ void emb_place_k(int64_t rows, const int32_t *ids, const int32_t *rank,
                            const int32_t *start, int32_t *sorted) {
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
       r += (int64_t)gridDim.x * blockDim.x)
    if (rank[r] >= 0)
      sorted[start[ids[r]] + rank[r]] = (int32_t)r;
}

/* for each group start s (the first row of its id in sorted order) and
 * column j: dtok[id][j] = round(dtok[id][j] + sum of the id's rows, in row
 * order) */
__global__ void emb_sum_k(int64_t rows, int64_t d, const int32_t *ids, const int32_t *sorted,
                          const void *dy, int gdt, void *dtok, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t s = e / d, j = e % d;
    const int32_t id = ids[sorted[s]];
    if (s > 0 && ids[sorted[s - 1]] == id)
      continue;
    /* the id's rows in sorted order, 8 at a time: their loads issued
     * together (a frequent id, the padding token's, has thousands of rows:
     * one chain of three dependent loads a row took 340 us on an H200),
     * the adds in the same order as one at a time */
    float sum = 0.0f;
    for (int64_t q = s; q < rows; q += 8) {
      int32_t r[8];
      float v[8];
      int n = 0;
#pragma unroll
      for (int u = 0; u < 8; u++)
        r[u] = q + u < rows ? sorted[q + u] : -1;
      int32_t iu[8];
#pragma unroll
      for (int u = 0; u < 8; u++)
        iu[u] = r[u] >= 0 ? ids[r[u]] : 0;
#pragma unroll
      for (int u = 0; u < 8; u++)
        if (n == u && r[u] >= 0 && iu[u] == id)
          n = u + 1;
#pragma unroll
      for (int u = 0; u < 8; u++)
        v[u] = u < n ? ld(dy, gdt, (int64_t)r[u] * d + j) : 0.0f;
#pragma unroll
      for (int u = 0; u < 8; u++) /* unrolled: the arrays stay in registers */
        if (u < n)
          sum += v[u];
      if (n < 8)
        break;
    }
    sum += ld(dtok, gdt, (int64_t)id * d + j);
    const uint32_t o = st(dtok, gdt, (int64_t)id * d + j, sum);
    if (ds)
      ls.add(sum, gdt, o);
  }
  ls.flush(ds);
}

/* emb_sum_k with the groups' ends known (start[id + 1]), the typed
 * instantiations: one warp per (id, 32 columns). Per 32 rows of the id's
 * group, the lanes load the rows' indices at once and pass them round
 * (__shfl_sync); then each lane loads its column of those rows, all
 * independent loads, and adds them one at a time in row order: the same
 * sums in the same order, with one dependent index load per 32 rows (the
 * padding token's group, most of a batch's rows, is one chain per column;
 * the generic kernel waits for three dependent loads per 8 rows) */
template <int G>
__global__ void emb_sum_run_k(int64_t vocab, int64_t d, const int32_t *start, const int32_t *sorted,
                              const void *dy, int gdt_, void *dtok, dev_stats *ds) {
  const int gdt = TDT(G, gdt_);
  lstats ls(ds);
  const int lane = (int)(threadIdx.x & 31);
  const int64_t cb = (d + 31) / 32, nw = vocab * cb; /* warps: ids x column blocks */
  /* w is the same for the 32 lanes of a warp (THREADS is a multiple of 32) */
  for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; w < nw;
       w += (int64_t)gridDim.x * blockDim.x / 32) {
    const int64_t id = w / cb, j = (w - id * cb) * 32 + lane;
    const int64_t s = start[id], end = start[id + 1];
    if (s == end) /* no row has this id (the whole warp) */
      continue;
    float sum = 0.0f;
    for (int64_t q = s; q < end; q += 32) {
      const int n = end - q < 32 ? (int)(end - q) : 32;
      const int32_t mine = lane < n ? sorted[q + lane] : 0;
      uint32_t v[32]; /* the bits: widened after all 32 loads are issued */
#pragma unroll
      for (int u = 0; u < 32; u++) {
        const int32_t r = __shfl_sync(0xFFFFFFFFu, mine, u);
        v[u] = u < n && j < d ? raw_bits(dy, gdt, (int64_t)r * d + j) : 0u;
      }
#pragma unroll
      for (int u = 0; u < 32; u++) /* unrolled: v stays in registers */
        if (u < n)
          sum += widen(v[u], gdt);
    }
    if (j < d) {
      sum += ld(dtok, gdt, id * d + j);
      const uint32_t o = st(dtok, gdt, id * d + j, sum);
      if (ds)
        ls.add(sum, gdt, o);
    }
  }
  ls.flush(ds);
}

/* dpos[tp][j] = round(dpos[tp][j] + the batch's sum, batch order) */
__global__ void emb_pos_k(int64_t b, int64_t t, int64_t d, const void *dy, int gdt, void *dpos,
                          dev_stats *ds) {
  lstats ls(ds);
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < t * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t tp = e / d, j = e % d;
    const float acc = ld(dpos, gdt, e);
    float bsum = 0.0f;
    for (int64_t bi = 0; bi < b; bi++)
      bsum += ld(dy, gdt, (bi * t + tp) * d + j);
    cst(dpos, gdt, e, acc + bsum, ls, ds);
  }
  ls.flush(ds);
}

__global__ void vit_fwd_k(int64_t b, int64_t np, int64_t d, const void *patches, int pdt,
                          const void *cls, const void *pos, int wdt, void *y, int ydt,
                          dev_stats *ds) {
  lstats ls(ds);
  const int64_t nt = np + 1;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < b * nt * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / (nt * d), tj = e % (nt * d), t = tj / d, j = tj % d;
    const float s = t == 0 ? ld(cls, wdt, j) : ld(patches, pdt, (bi * np + t - 1) * d + j);
    cst(y, ydt, e, s + ld(pos, wdt, tj), ls, ds);
  }
  ls.flush(ds);
}

/* the batch sum of position k of every sample (batch order) into dpos and,
 * for k < d, dcls */
__global__ void vit_bwd_sum_k(int64_t b, int64_t row, int64_t d, const void *dy, int gdt,
                              void *dcls, void *dpos, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < row;
       k += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int64_t bi = 0; bi < b; bi++)
      s += ld(dy, gdt, bi * row + k);
    if (dpos)
      cst(dpos, gdt, k, ld(dpos, gdt, k) + s, ls, ds);
    if (dcls && k < d)
      cst(dcls, gdt, k, ld(dcls, gdt, k) + s, ls, ds);
  }
  ls.flush(ds);
}

/* dpatches[bi] = dy[bi, 1:], element copies of gdt (2 or 4 bytes) */
__global__ void vit_bwd_copy_k(int64_t b, int64_t np, int64_t d, const void *dy, int esz,
                               void *dp) {
  const int64_t row = (np + 1) * d;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < b * np * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / (np * d), k = e % (np * d), src = bi * row + d + k;
    if (esz == 4)
      static_cast<uint32_t *>(dp)[e] = static_cast<const uint32_t *>(dy)[src];
    else
      static_cast<uint16_t *>(dp)[e] = static_cast<const uint16_t *>(dy)[src];
  }
}

/* ---- pooling, L2 normalisation -------------------------------------------- */

__device__ __forceinline__ int64_t mask_count(const uint8_t *mask, int64_t bi, int64_t t) {
  int64_t cnt = 0;
  for (int64_t ti = 0; ti < t; ti++)
    cnt += !mask || mask[bi * t + ti];
  return cnt;
}

__global__ void pool_fwd_k(int64_t b, int64_t t, int64_t d, const void *x, int xdt,
                           const uint8_t *mask, void *y, int ydt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < b * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / d, j = e % d;
    const int64_t cnt = mask_count(mask, bi, t);
    float s = 0.0f;
    for (int64_t ti = 0; ti < t; ti++)
      if (!mask || mask[bi * t + ti])
        s += ld(x, xdt, (bi * t + ti) * d + j);
    const float v = cnt ? s / (float)cnt : 0.0f;
    const uint32_t o = st(y, ydt, e, v);
    if (ds)
      ls.add(v, ydt, o);
  }
  ls.flush(ds);
}

__global__ void pool_bwd_k(int64_t b, int64_t t, int64_t d, const void *dy, int gdt,
                           const uint8_t *mask, void *dx, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < b * t * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / (t * d), ti = (e / d) % t, j = e % d;
    const int64_t cnt = mask_count(mask, bi, t);
    const int on = !mask || mask[bi * t + ti];
    cst(dx, gdt, e, on && cnt ? ld(dy, gdt, bi * d + j) / (float)cnt : 0.0f, ls, ds);
  }
  ls.flush(ds);
}

__device__ __forceinline__ double row_norm(const void *x, int xdt, int64_t base, int64_t d,
                                           int lane) {
  double s = 0.0;
  for (int64_t j = lane; j < d; j += 32) {
    const double v = (double)ld(x, xdt, base + j);
    s += v * v;
  }
  return sqrt(warp_sum(s));
}

__global__ void l2_fwd_k(int64_t m, int64_t d, const void *x, int xdt, float eps, void *y, int ydt,
                         dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  if (i < m) {
    const double nrm = fmax(row_norm(x, xdt, i * d, d, lane), (double)eps);
    const float inv = (float)(1.0 / nrm);
    for (int64_t j = lane; j < d; j += 32) {
      const float v = ld(x, xdt, i * d + j) * inv;
      const uint32_t o = st(y, ydt, i * d + j, v);
      if (ds)
        ls.add(v, ydt, o);
    }
  }
  ls.flush(ds);
}

__global__ void l2_bwd_k(int64_t m, int64_t d, const void *dy, int gdt, const void *x, int xdt,
                         float eps, void *dx, dev_stats *ds) {
  lstats ls(ds);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * (int64_t)WARPS + (threadIdx.x >> 5);
  const int64_t base = i * d;
  /* whole warps agree on i < m and on the branch (nrm is warp-reduced) */
  const double nrm = i < m ? row_norm(x, xdt, base, d, lane) : 0.0;
  if (i >= m) {
  } else if (nrm <= (double)eps) { /* y = x / eps: a plain scaling */
    for (int64_t j = lane; j < d; j += 32)
      cst(dx, gdt, base + j, ld(dy, gdt, base + j) / eps, ls, ds);
  } else {
    double ydy = 0.0;
    for (int64_t j = lane; j < d; j += 32)
      ydy += (double)ld(x, xdt, base + j) / nrm * (double)ld(dy, gdt, base + j);
    ydy = warp_sum(ydy);
    const float inv = (float)(1.0 / nrm), c = (float)ydy;
    for (int64_t j = lane; j < d; j += 32) {
      const float yj = ld(x, xdt, base + j) * inv;
      cst(dx, gdt, base + j, (ld(dy, gdt, base + j) - yj * c) * inv, ls, ds);
    }
  }
  ls.flush(ds);
}

unsigned rows_grid(int64_t m) { return (unsigned)((m + WARPS - 1) / WARPS); }

} // namespace

/* the typed launches so far (ampc_cuda_typed_launches: the tests' proof
 * that a typed path ran) */
static std::atomic<long long> g_typed_launches{0};
void ampc_cu::typed_launched(void) { g_typed_launches.fetch_add(1, std::memory_order_relaxed); }

/* 1: the typed instantiations (cuda_common.cuh); 0: the generic kernels
 * only; -1: not yet set, AMPC_CUDA_TYPED decides at the first use */
static std::atomic<int> g_typed{-1};
bool ampc_cu_typed(void) {
  int v = g_typed.load(std::memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("AMPC_CUDA_TYPED");
    v = e && (strcmp(e, "1") == 0 || strcmp(e, "on") == 0);
    int unset = -1; /* a setter's value wins */
    if (!g_typed.compare_exchange_strong(unset, v))
      v = g_typed.load(std::memory_order_relaxed);
  }
  return v != 0;
}

/* ---- host side: checks, launches ------------------------------------------ */

ampc_status ampc_cu_begin(const char *fn, ampc_cuda_ctx **ctx, cudaStream_t *stream) {
  *ctx = ampc_cuda_current();
  if (!*ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: no CUDA context is bound (ampc_cuda_bind)", fn);
  *stream = (cudaStream_t)ampc_cuda_ctx_stream(*ctx);
  /* the context's device current for the launches (as ampc_cuda_gemm does) */
  const cudaError_t e = cudaSetDevice(ampc_cuda_ctx_device(*ctx));
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaSetDevice: %s", fn, cudaGetErrorString(e));
  return AMPC_OK;
}

ampc_status ampc_cu_launched(const char *fn) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess)
    return AMPC_OK;
  return ampc_fail(AMPC_ERR_DEVICE, "%s: kernel launch: CUDA error %d (%s): %s", fn, (int)e,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

/* the counter block a begin takes next (8 rotate: see cuda_common.cuh) */
static thread_local unsigned g_stats_turn;
enum { STATS_BLOCKS = 8 };

ampc_status ampc_cu_stats_begin(ampc_cuda_ctx *ctx, cudaStream_t s, ampc_round_stats *stats,
                                dev_stats **out) {
  *out = NULL;
  const bool tally = ampc_cu_tally_on();
  if (!stats && !tally)
    return AMPC_OK;
  void *p = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 0, STATS_BLOCKS * sizeof(dev_stats), &p));
  dev_stats *d = static_cast<dev_stats *>(p) + (g_stats_turn++ % STATS_BLOCKS);
  /* without a tally the histogram stays off and is neither cleared nor read */
  const size_t head = offsetof(dev_stats, hist);
  cudaError_t e = cudaMemsetAsync(d, 0, tally ? sizeof(dev_stats) : head, s);
  if (e == cudaSuccess && tally)
    e = cudaMemsetAsync(&d->hist_on, 1, 1, s); /* hist_on = 1 (little-endian int) */
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "round stats: cudaMemsetAsync: %s", cudaGetErrorString(e));
  *out = d;
  return AMPC_OK;
}

ampc_status ampc_cu_stats_end(cudaStream_t s, const dev_stats *d, ampc_round_stats *stats) {
  if (!d)
    return AMPC_OK;
  ampc_tally *const t = ampc_tally_current();
  static thread_local dev_stats h;
  const size_t bytes = t ? sizeof h : offsetof(dev_stats, hist);
  cudaError_t e = cudaMemcpyAsync(&h, d, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess)
    e = (cudaError_t)ampc_cuda_wait(s);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "round stats: copy back: %s", cudaGetErrorString(e));
  ampc_round_stats r;
  r.count = h.count, r.underflow = h.underflow, r.subnormal = h.subnormal;
  r.overflow = h.overflow, r.inf = h.inf, r.nan = h.nan;
  memcpy(&r.max_abs, &h.max_abs_bits, sizeof r.max_abs);
  if (stats)
    ampc_round_stats_merge(stats, &r);
  if (t && h.hist_on && h.count) { /* a tally bound at begin and still at end */
    static thread_local ampc_tm_stats tm;
    tm.r = r;
    tm.zeros = h.zeros;
    for (int i = 0; i < AMPC_TM_BINS; i++)
      tm.hist[i] = h.hist[i];
    ampc_tally_add(t, &tm);
  }
  return AMPC_OK;
}

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

/* C++ linkage: the other CUDA files' host code (cuda_common.cuh) */
ampc_status ampc_cu_group_rows(const char *fn, cudaStream_t strm, int64_t n, const int32_t *ids,
                               int64_t nid, int32_t *start, int32_t *rank, int32_t *sorted) {
  const cudaError_t e = cudaMemsetAsync(start, 0, (size_t)(nid + 1) * sizeof(int32_t), strm);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaMemsetAsync: %s", fn, cudaGetErrorString(e));
  emb_rank_k<<<grid_for(n), THREADS, 0, strm>>>(n, ids, nid, rank, start);
  emb_scan_k<<<1, THREADS, 0, strm>>>(nid + 1, start);
  emb_place_k<<<grid_for(n), THREADS, 0, strm>>>(n, ids, rank, start, sorted);
  return ampc_cu_launched(fn);
}

extern "C" {

void ampc_cuda_set_typed_kernels(bool on) { g_typed.store(on ? 1 : 0); }
bool ampc_cuda_typed_kernels(void) { return ampc_cu_typed(); }
long long ampc_cuda_typed_launches(void) { return g_typed_launches.load(); }

ampc_status ampc_cuda_add_forward(int64_t n, const void *a, ampc_dtype adt, const void *b,
                                  ampc_dtype bdt, void *y, ampc_dtype ydt,
                                  ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_add_forward";
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, a);
  CU_CHECK_PTR(fn, b);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, adt);
  CU_CHECK_DT(fn, bdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  /* the residual stream plus an activation (forward), gradients (backward) */
  if (!(ampc_cu_typed() && n < ((int64_t)1 << 31) &&
        typed_pick(
            adt, bdt, ydt,
            [&](auto t) {
              using T = decltype(t);
              add_k<uint32_t, T::a, T::b, T::c>
                  <<<grid_for(n), THREADS, 0, strm>>>((uint32_t)n, a, adt, b, bdt, y, ydt, dst);
            },
            dts<0, 0, 0>{}, dts<0, 1, 0>{}, dts<0, 2, 0>{}, dts<1, 1, 1>{}, dts<2, 2, 2>{})))
    add_k<int64_t, -1, -1, -1><<<grid_for(n), THREADS, 0, strm>>>(n, a, adt, b, bdt, y, ydt, dst);
  FINISH(fn, stats);
}

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

ampc_status ampc_cuda_grad_add_f32(int64_t n, const float *v, void *g, ampc_dtype gdt) {
  const char *fn = "ampc_cuda_grad_add_f32";
  if (n < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: n must not be negative (got %lld)", fn,
                     (long long)n);
  if (n == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, v);
  CU_CHECK_PTR(fn, g);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  STATS_BEGIN(NULL);
  grad_add_k<<<grid_for(n), THREADS, 0, strm>>>(n, v, g, gdt, dst);
  FINISH(fn, NULL);
}

ampc_status ampc_cuda_layernorm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt,
                                        const void *gamma, const void *beta, ampc_dtype wdt,
                                        float eps, void *y, ampc_dtype ydt, float *mean,
                                        float *rstd, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_layernorm_forward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, gamma);
  CU_CHECK_PTR(fn, beta);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_PTR(fn, mean);
  CU_CHECK_PTR(fn, rstd);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, ydt);
  if (!(eps >= 0.0f))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: eps must be >= 0 (got %g)", fn, (double)eps);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  const bool typed = ampc_cu_typed() && d <= 32 * 32 &&
                     typed_pick(
                         xdt, wdt, ydt,
                         [&](auto t) {
                           using T = decltype(t);
                           if (d <= 32 * 16)
                             ln_fwd_c_k<16, T::a, T::b, T::c><<<rows_grid(m), THREADS, 0, strm>>>(
                                 m, d, x, gamma, beta, eps, y, mean, rstd, dst);
                           else
                             ln_fwd_c_k<32, T::a, T::b, T::c><<<rows_grid(m), THREADS, 0, strm>>>(
                                 m, d, x, gamma, beta, eps, y, mean, rstd, dst);
                         },
                         DTS_PRESETS);
  if (!typed)
    ln_fwd_k<<<rows_grid(m), THREADS, 0, strm>>>(m, d, x, xdt, gamma, beta, wdt, eps, y, ydt, mean,
                                                 rstd, dst);
  FINISH(fn, stats);
}

ampc_status ampc_cuda_layernorm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                         const void *x, ampc_dtype xdt, const void *gamma,
                                         ampc_dtype wdt, const float *mean, const float *rstd,
                                         void *dx, void *dgamma, void *dbeta, ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_layernorm_backward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, gamma);
  CU_CHECK_PTR(fn, mean);
  CU_CHECK_PTR(fn, rstd);
  CU_CHECK_PTR(fn, dx);
  CU_CHECK_PTR(fn, dgamma);
  CU_CHECK_PTR(fn, dbeta);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_BEGIN(fn);
  const int64_t nrb = (m + LN_RB - 1) / LN_RB;
  void *part = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 1, (size_t)(nrb * 2 * d) * sizeof(double), &part));
  /* the parameter sums first: dx may overwrite dy */
  /* (grad, stream, parameter) dtypes of the presets, as DTS_PRESETS */
#define DTS_LN_BWD                                                                                 \
  dts<0, 0, 0>{}, dts<1, 0, 1>{}, dts<2, 0, 2>{}, dts<1, 1, 1>{}, dts<2, 2, 2> {}
  const bool typed = ampc_cu_typed();
  if (!(typed &&
        typed_pick(
            gdt, xdt, 0,
            [&](auto t) {
              using T = decltype(t);
              ln_bwd_part_b_k<T::a, T::b><<<grid_for(nrb * d), THREADS, 0, strm>>>(
                  m, d, nrb, dy, x, mean, rstd, static_cast<double *>(part));
            },
            dts<0, 0, 0>{}, dts<1, 0, 0>{}, dts<2, 0, 0>{}, dts<1, 1, 0>{}, dts<2, 2, 0>{})))
    ln_bwd_part_k<<<grid_for(nrb * d), THREADS, 0, strm>>>(m, d, nrb, dy, gdt, x, xdt, mean, rstd,
                                                           static_cast<double *>(part));
  STATS_BEGIN(NULL);
  if (nrb > 2 * LN_UNROLL) /* a warp per column where there are row blocks to gather */
    ln_bwd_final_w_k<<<rows_grid(d), THREADS, 0, strm>>>(d, nrb, static_cast<const double *>(part),
                                                         dgamma, dbeta, gdt, dst);
  else
    ln_bwd_final_k<<<grid_for(d), THREADS, 0, strm>>>(d, nrb, static_cast<const double *>(part),
                                                      dgamma, dbeta, gdt, dst);
  if (!(typed && d <= 32 * 32 &&
        typed_pick(
            gdt, xdt, wdt,
            [&](auto t) {
              using T = decltype(t);
              if (d <= 32 * 16)
                ln_bwd_dx_c_k<16, T::a, T::b, T::c>
                    <<<rows_grid(m), THREADS, 0, strm>>>(m, d, dy, x, gamma, mean, rstd, dx, dst);
              else
                ln_bwd_dx_c_k<32, T::a, T::b, T::c>
                    <<<rows_grid(m), THREADS, 0, strm>>>(m, d, dy, x, gamma, mean, rstd, dx, dst);
            },
            DTS_LN_BWD)))
    ln_bwd_dx_k<<<rows_grid(m), THREADS, 0, strm>>>(m, d, dy, gdt, x, xdt, gamma, wdt, mean, rstd,
                                                    dx, dst);
#undef DTS_LN_BWD
  FINISH(fn, NULL);
}

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

ampc_status ampc_cuda_embedding_forward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                        int64_t vocab, const void *tok, const void *pos,
                                        ampc_dtype wdt, void *y, ampc_dtype ydt,
                                        ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_embedding_forward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, t);
  CU_CHECK_POS(fn, d);
  CU_CHECK_POS(fn, vocab);
  CU_CHECK_PTR(fn, ids);
  CU_CHECK_PTR(fn, tok);
  CU_CHECK_PTR(fn, pos);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  emb_fwd_k<<<grid_for(b * t * d), THREADS, 0, strm>>>(b * t, t, d, ids, tok, pos, wdt, y, ydt,
                                                       dst);
  FINISH(fn, stats);
}

ampc_status ampc_cuda_embedding_backward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                         int64_t vocab, const void *dy, ampc_dtype gdt, void *dtok,
                                         void *dpos, ampc_round_stats *stats, ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_embedding_backward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, t);
  CU_CHECK_POS(fn, d);
  CU_CHECK_POS(fn, vocab);
  CU_CHECK_PTR(fn, ids);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, dtok);
  CU_CHECK_DT(fn, gdt);
  if (b * t > INT32_MAX || vocab > INT32_MAX)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %lld rows or vocab %lld past int32", fn,
                     (long long)(b * t), (long long)vocab);
  CU_BEGIN(fn);
  const int64_t rows = b * t;
  void *sp = NULL; /* start [vocab + 1], rank [rows], sorted [rows] */
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 1, (size_t)(vocab + 1 + 2 * rows) * sizeof(int32_t), &sp));
  int32_t *start = static_cast<int32_t *>(sp), *rank = start + vocab + 1, *sorted = rank + rows;
  AMPC_TRY(ampc_cu_group_rows(fn, strm, rows, ids, vocab, start, rank, sorted));
  STATS_BEGIN(stats);
  const int g = (int)gdt;
  if (!(ampc_cu_typed() && typed_pick(
                               g, 0, 0,
                               [&](auto L) {
                                 emb_sum_run_k<decltype(L)::a>
                                     <<<grid_for(vocab * ((d + 31) / 32) * 32), THREADS, 0, strm>>>(
                                         vocab, d, start, sorted, dy, g, dtok, dst);
                               },
                               dts<DT_F32, 0, 0>{}, dts<DT_F16, 0, 0>{}, dts<DT_BF16, 0, 0>{})))
    emb_sum_k<<<grid_for(rows * d), THREADS, 0, strm>>>(rows, d, ids, sorted, dy, gdt, dtok, dst);
  AMPC_TRY(ampc_cu_launched(fn));
  AMPC_TRY(ampc_cu_stats_end(strm, dst, stats));
  if (!dpos)
    return AMPC_OK;
  /* dpos: counted by a bound tally only (the CPU's stats count dtok) */
  dev_stats *dsp = NULL;
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, NULL, &dsp));
  emb_pos_k<<<grid_for(t * d), THREADS, 0, strm>>>(b, t, d, dy, gdt, dpos, dsp);
  AMPC_TRY(ampc_cu_launched(fn));
  return ampc_cu_stats_end(strm, dsp, NULL);
}

ampc_status ampc_cuda_vit_tokens_forward(int64_t b, int64_t np, int64_t d, const void *patches,
                                         ampc_dtype pdt, const void *cls, const void *pos,
                                         ampc_dtype wdt, void *y, ampc_dtype ydt) {
  const char *fn = "ampc_cuda_vit_tokens_forward";
  if (np < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: np must not be negative (got %lld)", fn,
                     (long long)np);
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, d);
  if (np > 0)
    CU_CHECK_PTR(fn, patches);
  CU_CHECK_PTR(fn, cls);
  CU_CHECK_PTR(fn, pos);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, pdt);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  STATS_BEGIN(NULL);
  vit_fwd_k<<<grid_for(b * (np + 1) * d), THREADS, 0, strm>>>(b, np, d, patches, pdt, cls, pos, wdt,
                                                              y, ydt, dst);
  FINISH(fn, NULL);
}

ampc_status ampc_cuda_vit_tokens_backward(int64_t b, int64_t np, int64_t d, const void *dy,
                                          ampc_dtype gdt, void *dpatches, void *dcls, void *dpos) {
  const char *fn = "ampc_cuda_vit_tokens_backward";
  if (np < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: np must not be negative (got %lld)", fn,
                     (long long)np);
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  const int64_t row = (np + 1) * d;
  STATS_BEGIN(NULL); /* the sums counted; the patch gradients are a copy */
  if (dpos || dcls)
    vit_bwd_sum_k<<<grid_for(row), THREADS, 0, strm>>>(b, row, d, dy, gdt, dcls, dpos, dst);
  if (dpatches && np > 0)
    vit_bwd_copy_k<<<grid_for(b * np * d), THREADS, 0, strm>>>(b, np, d, dy,
                                                               gdt == AMPC_F32 ? 4 : 2, dpatches);
  FINISH(fn, NULL);
}

ampc_status ampc_cuda_mean_pool_forward(int64_t b, int64_t t, int64_t d, const void *x,
                                        ampc_dtype xdt, const uint8_t *mask, void *y,
                                        ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_mean_pool_forward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, t);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  pool_fwd_k<<<grid_for(b * d), THREADS, 0, strm>>>(b, t, d, x, xdt, mask, y, ydt, dst);
  FINISH(fn, stats);
}

ampc_status ampc_cuda_mean_pool_backward(int64_t b, int64_t t, int64_t d, const void *dy,
                                         ampc_dtype gdt, const uint8_t *mask, void *dx) {
  const char *fn = "ampc_cuda_mean_pool_backward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, t);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, dx);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  STATS_BEGIN(NULL);
  pool_bwd_k<<<grid_for(b * t * d), THREADS, 0, strm>>>(b, t, d, dy, gdt, mask, dx, dst);
  FINISH(fn, NULL);
}

ampc_status ampc_cuda_l2norm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt, float eps,
                                     void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_l2norm_forward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  l2_fwd_k<<<rows_grid(m), THREADS, 0, strm>>>(m, d, x, xdt, eps, y, ydt, dst);
  FINISH(fn, stats);
}

ampc_status ampc_cuda_l2norm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                      const void *x, ampc_dtype xdt, float eps, void *dx) {
  const char *fn = "ampc_cuda_l2norm_backward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, dx);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, xdt);
  CU_BEGIN(fn);
  STATS_BEGIN(NULL);
  l2_bwd_k<<<rows_grid(m), THREADS, 0, strm>>>(m, d, dy, gdt, x, xdt, eps, dx, dst);
  FINISH(fn, NULL);
}

} /* extern "C" */
