/*
 * src/backend/cuda/cuda_loss.cu: the losses of ampc/nn.h (src/nn/loss.c) on
 * the GPU (cuda_nn.h).
 *
 * Losses (cross-entropy, BCE with logits, symmetric InfoNCE), as the CPU:
 * FP32 values, log-sum-exps max-shifted with the exponentials summed in
 * double, backward seeded with the loss scale. The exponentials and
 * logarithms are CUDA's (expf within 2 ulps, log and log1p within 1 ulp of
 * double, against glibc's), so results agree with the CPU's to a few ulps,
 * not bit for bit. Per-row terms are summed on one thread in row order (the
 * CPU's order; the rows are few: a batch). Class ids and targets are device
 * buffers; the loss and dlog_temp are host pointers (the call waits), and
 * an id outside [0, c) is found on the device and reported as on the CPU
 * (the backward pass waits for that check too). Built with --fmad=false.
 */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"

using namespace ampc_cu;

namespace {

enum { SLOT_LOSS = 10 }; /* cuda_impl.h */

/* log-sum-exp of row `base` (n values, stride step) scaled, in the CPU's
 * order: the max in FP32, then sum of (double)expf(v - max) */
__device__ double row_lse(const void *x, int dt, int64_t base, int64_t n, int64_t step,
                          float scale) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    const float v = ld(x, dt, base + j * step) * scale;
    mx = v > mx ? v : mx;
  }
  double s = 0.0;
  for (int64_t j = 0; j < n; j++)
    s += (double)expf(ld(x, dt, base + j * step) * scale - mx);
  return (double)mx + log(s);
}

/* term[i] = lse(row i) - x[i][t[i]]; bad[0] += ids outside [0, c) */
__global__ void ce_fwd_k(int64_t m, int64_t c, const void *x, int dt, const int32_t *t,
                         double *term, int *bad) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int32_t ti = t[i];
    if (ti < 0 || ti >= c) {
      atomicAdd(bad, 1);
      term[i] = 0.0;
      continue;
    }
    term[i] = row_lse(x, dt, i * c, c, 1, 1.0f) - (double)ld(x, dt, i * c + ti);
  }
}

/* out[0] = sum of v[0..n) in order (one thread) */
__global__ void ordered_sum_k(int64_t n, const double *v, double *out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
      s += v[i];
    out[0] = s;
  }
}

__global__ void ce_bwd_k(int64_t m, int64_t c, const void *x, int dt, const int32_t *t, float g,
                         void *dx, int gdt, int *bad, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int32_t ti = t[i];
    if (ti < 0 || ti >= c) {
      atomicAdd(bad, 1);
      continue;
    }
    const float lse = (float)row_lse(x, dt, i * c, c, 1, 1.0f);
    for (int64_t j = 0; j < c; j++) {
      const float p = expf(ld(x, dt, i * c + j) - lse);
      cst(dx, gdt, i * c + j, g * (p - (j == ti ? 1.0f : 0.0f)), ls, ds);
    }
  }
  ls.flush(ds);
}

__global__ void bce_fwd_k(int64_t m, const void *x, int dt, const float *t, double *term) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = ld(x, dt, i);
    term[i] = (double)(fmaxf(v, 0.0f) - v * t[i]) + log1p(exp(-fabs((double)v)));
  }
}

__global__ void bce_bwd_k(int64_t m, const void *x, int dt, const float *t, float g, void *dx,
                          int gdt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = ld(x, dt, i);
    const float e = expf(-fabsf(v));
    const float sig = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    cst(dx, gdt, i, g * (sig - t[i]), ls, ds);
  }
  ls.flush(ds);
}

/* lse[i] = row i's, lse[b + i] = column i's (scaled) */
__global__ void infonce_lse_k(int64_t b, const void *sim, int dt, float scale, float *lse,
                              double *term) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < b;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double r = row_lse(sim, dt, i * b, b, 1, scale), c = row_lse(sim, dt, i, b, b, scale);
    lse[i] = (float)r, lse[b + i] = (float)c;
    if (term) {
      const double diag = (double)(ld(sim, dt, i * b + i) * scale);
      term[i] = (r - diag) + (c - diag);
    }
  }
}

/* dsim and the row sums of g * logit (for dlog_temp) */
__global__ void infonce_bwd_k(int64_t b, const void *sim, int dt, float scale, const float *lse,
                              float loss_scale, void *dsim, int gdt, double *rowdt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < b;
       i += (int64_t)gridDim.x * blockDim.x) {
    double d = 0.0;
    for (int64_t j = 0; j < b; j++) {
      const float logit = ld(sim, dt, i * b + j) * scale;
      const float g = (expf(logit - lse[i]) + expf(logit - lse[b + j]) - (i == j ? 2.0f : 0.0f)) /
                      (2.0f * (float)b);
      d += (double)g * (double)logit;
      cst(dsim, gdt, i * b + j, loss_scale * scale * g, ls, ds);
    }
    rowdt[i] = d;
  }
  ls.flush(ds);
}

ampc_status fetch(const char *fn, cudaStream_t s, void *host, const void *dev, size_t bytes) {
  cudaError_t e = cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess)
    e = (cudaError_t)ampc_cuda_wait(s);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: copy back: %s", fn, cudaGetErrorString(e));
  return AMPC_OK;
}

/* scratch for n doubles, a result double and a counter (zeroed) */
ampc_status loss_scratch(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t s, int64_t n, double **v,
                         double **out, int **bad) {
  void *p = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_LOSS, (size_t)(n + 2) * sizeof(double), &p));
  *v = static_cast<double *>(p), *out = *v + n, *bad = reinterpret_cast<int *>(*out + 1);
  const cudaError_t e = cudaMemsetAsync(*bad, 0, sizeof(int), s);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaMemsetAsync: %s", fn, cudaGetErrorString(e));
  return AMPC_OK;
}

ampc_status bad_targets(const char *fn, int nbad, int64_t c) {
  return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %d target(s) outside [0, %lld)", fn, nbad,
                   (long long)c);
}

} // namespace

extern "C" {

ampc_status ampc_cuda_cross_entropy_forward(int64_t m, int64_t c, const void *logits,
                                            ampc_dtype xdt, const int32_t *target, float *loss) {
  const char *fn = "ampc_cuda_cross_entropy_forward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, c);
  CU_CHECK_PTR(fn, logits);
  CU_CHECK_PTR(fn, target);
  CU_CHECK_PTR(fn, loss);
  CU_CHECK_DT(fn, xdt);
  CU_BEGIN(fn);
  double *term, *out;
  int *bad;
  AMPC_TRY(loss_scratch(fn, ctx, strm, m, &term, &out, &bad));
  ce_fwd_k<<<grid_for(m), THREADS, 0, strm>>>(m, c, logits, xdt, target, term, bad);
  ordered_sum_k<<<1, 32, 0, strm>>>(m, term, out);
  AMPC_TRY(ampc_cu_launched(fn));
  struct {
    double s;
    int bad;
  } h;
  AMPC_TRY(fetch(fn, strm, &h.s, out, sizeof(double)));
  AMPC_TRY(fetch(fn, strm, &h.bad, bad, sizeof(int)));
  if (h.bad)
    return bad_targets(fn, h.bad, c);
  *loss = (float)(h.s / (double)m);
  return AMPC_OK;
}

ampc_status ampc_cuda_cross_entropy_backward(int64_t m, int64_t c, const void *logits,
                                             ampc_dtype xdt, const int32_t *target,
                                             float loss_scale, void *dlogits, ampc_dtype gdt) {
  const char *fn = "ampc_cuda_cross_entropy_backward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, c);
  CU_CHECK_PTR(fn, logits);
  CU_CHECK_PTR(fn, target);
  CU_CHECK_PTR(fn, dlogits);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  double *term, *out;
  int *bad;
  AMPC_TRY(loss_scratch(fn, ctx, strm, 0, &term, &out, &bad));
  STATS_BEGIN(NULL);
  ce_bwd_k<<<grid_for(m), THREADS, 0, strm>>>(m, c, logits, xdt, target, loss_scale / (float)m,
                                              dlogits, gdt, bad, dst);
  AMPC_TRY(ampc_cu_launched(fn));
  int nbad = 0;
  AMPC_TRY(fetch(fn, strm, &nbad, bad, sizeof nbad));
  if (nbad) /* nothing counted, as on the CPU (which checks the targets first) */
    return bad_targets(fn, nbad, c);
  return ampc_cu_stats_end(strm, dst, NULL);
}

ampc_status ampc_cuda_bce_logits_forward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                         float *loss) {
  const char *fn = "ampc_cuda_bce_logits_forward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, t);
  CU_CHECK_PTR(fn, loss);
  CU_CHECK_DT(fn, xdt);
  CU_BEGIN(fn);
  double *term, *out;
  int *bad;
  AMPC_TRY(loss_scratch(fn, ctx, strm, m, &term, &out, &bad));
  bce_fwd_k<<<grid_for(m), THREADS, 0, strm>>>(m, x, xdt, t, term);
  ordered_sum_k<<<1, 32, 0, strm>>>(m, term, out);
  AMPC_TRY(ampc_cu_launched(fn));
  double s = 0.0;
  AMPC_TRY(fetch(fn, strm, &s, out, sizeof s));
  *loss = (float)(s / (double)m);
  return AMPC_OK;
}

ampc_status ampc_cuda_bce_logits_backward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                          float loss_scale, void *dx, ampc_dtype gdt) {
  const char *fn = "ampc_cuda_bce_logits_backward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, t);
  CU_CHECK_PTR(fn, dx);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  STATS_BEGIN(NULL);
  bce_bwd_k<<<grid_for(m), THREADS, 0, strm>>>(m, x, xdt, t, loss_scale / (float)m, dx, gdt, dst);
  FINISH(fn, NULL);
}

ampc_status ampc_cuda_infonce_forward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                      float *loss) {
  const char *fn = "ampc_cuda_infonce_forward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_PTR(fn, sim);
  CU_CHECK_PTR(fn, loss);
  CU_CHECK_DT(fn, xdt);
  CU_BEGIN(fn);
  double *term, *out;
  int *bad;
  /* b row terms, then 2b floats of log-sum-exps */
  AMPC_TRY(loss_scratch(fn, ctx, strm, 2 * b, &term, &out, &bad));
  float *lse = reinterpret_cast<float *>(term + b);
  infonce_lse_k<<<grid_for(b), THREADS, 0, strm>>>(b, sim, xdt, expf(log_temp), lse, term);
  ordered_sum_k<<<1, 32, 0, strm>>>(b, term, out);
  AMPC_TRY(ampc_cu_launched(fn));
  double s = 0.0;
  AMPC_TRY(fetch(fn, strm, &s, out, sizeof s));
  *loss = (float)(s / (2.0 * (double)b));
  return AMPC_OK;
}

ampc_status ampc_cuda_infonce_backward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                       float loss_scale, void *dsim, ampc_dtype gdt,
                                       float *dlog_temp, ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_infonce_backward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_PTR(fn, sim);
  CU_CHECK_PTR(fn, dsim);
  CU_CHECK_PTR(fn, dlog_temp);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  double *rowdt, *out;
  int *bad;
  AMPC_TRY(loss_scratch(fn, ctx, strm, 2 * b, &rowdt, &out, &bad));
  float *lse = reinterpret_cast<float *>(rowdt + b);
  const float scale = expf(log_temp); /* the host's expf, as the CPU's */
  infonce_lse_k<<<grid_for(b), THREADS, 0, strm>>>(b, sim, xdt, scale, lse, NULL);
  STATS_BEGIN(NULL);
  infonce_bwd_k<<<grid_for(b), THREADS, 0, strm>>>(b, sim, xdt, scale, lse, loss_scale, dsim, gdt,
                                                   rowdt, dst);
  ordered_sum_k<<<1, 32, 0, strm>>>(b, rowdt, out);
  AMPC_TRY(ampc_cu_launched(fn));
  AMPC_TRY(ampc_cu_stats_end(strm, dst, NULL));
  double dt = 0.0;
  AMPC_TRY(fetch(fn, strm, &dt, out, sizeof dt));
  *dlog_temp += (float)((double)loss_scale * dt);
  return AMPC_OK;
}

} /* extern "C" */
