/*
 * src/backend/cuda/cuda_layernorm.cu: layer norm forward and backward (src/nn/layernorm.c) on
 * the GPU: statistics in double, the parameters' gradients in row blocks
 * summed in a fixed order.
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

using namespace ampc_cu;

namespace {

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

/* blocks for the row kernels: one warp a row, WARPS rows a block */
unsigned rows_grid(int64_t m) { return (unsigned)((m + WARPS - 1) / WARPS); }

} // namespace

extern "C" {

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

} /* extern "C" */
