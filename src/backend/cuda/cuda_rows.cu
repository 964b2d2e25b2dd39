/*
 * src/backend/cuda/cuda_rows.cu: the row ops of src/nn/rows.c on the GPU
 * (gather, scatter and scatter-add of rows, the row argmax, the ViT tokens
 * both ways, the gradient add), and what a model does between its layers:
 * the rounding
 * store from FP32 (ampc_store_f32) and the dtype conversion (ampc_convert),
 * an FP32 scale, and the memory operations of the model's backend (zero, 2D
 * copy) on the bound context's stream. Each matches its CPU twin bit for bit:
 * the same per-element operations, the scatter-add's sums in the CPU's row
 * order (one thread per output element walks the rows in order), the argmax
 * one thread per row in the CPU's column order.
 *
 * Indices (idx) are device memory and are not range-checked here: the CPU
 * twin checks them, and the model builds them itself.
 */
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

using namespace ampc_cu;

namespace {

__global__ void gather_k(int64_t n, int64_t d, const int32_t *idx, const void *x, int xdt, void *y,
                         int ydt) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / d, j = e - r * d;
    st(y, ydt, e, ld(x, xdt, (int64_t)idx[r] * d + j));
  }
}

/* es-byte elements copied as bits (a later row wins a repeated index: rows
 * are walked in order by the thread of each column) */
template <typename T>
__global__ void scatter_k(int64_t n, int64_t d, const int32_t *idx, const T *x, T *y) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < d;
       j += (int64_t)gridDim.x * blockDim.x)
    for (int64_t r = 0; r < n; r++)
      y[(int64_t)idx[r] * d + j] = x[r * d + j];
}

/* idx NULL: row r to row r, one thread per element */
__global__ void scatter_add_direct_k(int64_t n, int64_t d, const void *x, int xdt, const void *x2,
                                     int x2dt, float *y, int64_t ldy) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / d, j = e - r * d;
    const float a = ld(x, xdt, e);
    y[r * ldy + j] += x2 ? a + ld(x2, x2dt, e) : a;
  }
}

/* with idx: one thread per (target row t, column j) adds the rows r with
 * idx[r] == t in increasing r, the CPU's order */
__global__ void scatter_add_idx_k(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                  const void *x, int xdt, const void *x2, int x2dt, float *y,
                                  int64_t ldy) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / d, j = e - t * d;
    float acc = y[t * ldy + j];
    for (int64_t r = 0; r < n; r++)
      if (idx[r] == t) {
        const float a = ld(x, xdt, r * d + j);
        acc += x2 ? a + ld(x2, x2dt, r * d + j) : a;
      }
    y[t * ldy + j] = acc;
  }
}

/* scatter_add_idx_k with the rows grouped by target (ampc_cu_group_rows:
 * start, sorted), the typed instantiations: a thread adds only its
 * target's rows, in increasing r, as there (the same sums), instead of
 * testing all n rows */
template <int X>
__global__ void scatter_add_run_k(int64_t rows, int64_t d, const int32_t *start,
                                  const int32_t *sorted, const void *x, int xdt_, const void *x2,
                                  int x2dt, float *y, int64_t ldy) {
  const int xdt = TDT(X, xdt_);
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * d;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / d, j = e - t * d;
    float acc = y[t * ldy + j];
    const int32_t end = start[t + 1];
    for (int32_t q = start[t]; q < end; q++) {
      const int64_t r = sorted[q];
      const float a = ld(x, xdt, r * d + j);
      acc += x2 ? a + ld(x2, x2dt, r * d + j) : a;
    }
    y[t * ldy + j] = acc;
  }
}

__global__ void argmax_k(int64_t m, int64_t n, const void *x, int xdt, bool skip_diag,
                         int32_t *idx) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t k = 0; k < n; k++) {
      if (skip_diag && k == i)
        continue;
      const float v = ld(x, xdt, i * n + k);
      if (isnan(v)) {
        best = -1;
        break;
      }
      if (best < 0 || v > bv)
        best = k, bv = v;
    }
    idx[i] = (int32_t)best;
  }
}

__global__ void store_k(int64_t n, const float *src, void *dst, int dt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = src[i];
    const uint32_t o = st(dst, dt, i, v);
    if (ds)
      ls.add(v, dt, o);
  }
  ls.flush(ds);
}

__global__ void convert_k(int64_t n, const void *src, int sdt, void *dst, int ddt) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    st(dst, ddt, i, ld(src, sdt, i));
}

__global__ void stage_k(int64_t n, const void *g, int gdt, float inv, int first, float *stage) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float w = ld(g, gdt, i), v = inv == 1.0f ? w : w * inv;
    stage[i] = first ? v : stage[i] + v;
  }
}

__global__ void scale_k(int64_t n, float *x, float s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

/* ---- the ViT tokens, the gradient add -------------------------------------- */

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

__global__ void grad_add_k(int64_t n, const float *v, void *g, int gdt, dev_stats *ds) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    cst(g, gdt, i, ld(g, gdt, i) + v[i], ls, ds);
  ls.flush(ds);
}

} // namespace

extern "C" {

ampc_status ampc_cuda_gather_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                  const void *x, ampc_dtype xdt, void *y, ampc_dtype ydt) {
  const char *fn = "ampc_cuda_gather_rows";
  if (n < 0 || d < 1 || rows < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad shape (n %lld, d %lld, rows %lld)", fn,
                     (long long)n, (long long)d, (long long)rows);
  CU_CHECK_PTR(fn, idx);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, ydt);
  if (n == 0)
    return AMPC_OK;
  CU_BEGIN(fn);
  (void)ctx;
  gather_k<<<grid_for(n * d), THREADS, 0, strm>>>(n, d, idx, x, xdt, y, ydt);
  return ampc_cu_launched(fn);
}

ampc_status ampc_cuda_scatter_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                   const void *x, ampc_dtype dt, void *y) {
  const char *fn = "ampc_cuda_scatter_rows";
  if (n < 0 || d < 1 || rows < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad shape (n %lld, d %lld, rows %lld)", fn,
                     (long long)n, (long long)d, (long long)rows);
  if (n == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, idx);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, dt);
  CU_BEGIN(fn);
  (void)ctx;
  if (dt == AMPC_F32)
    scatter_k<uint32_t><<<grid_for(d), THREADS, 0, strm>>>(
        n, d, idx, static_cast<const uint32_t *>(x), static_cast<uint32_t *>(y));
  else
    scatter_k<uint16_t><<<grid_for(d), THREADS, 0, strm>>>(
        n, d, idx, static_cast<const uint16_t *>(x), static_cast<uint16_t *>(y));
  return ampc_cu_launched(fn);
}

ampc_status ampc_cuda_scatter_add_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                       const void *x, ampc_dtype xdt, const void *x2,
                                       ampc_dtype x2dt, float *y, int64_t ldy) {
  const char *fn = "ampc_cuda_scatter_add_rows";
  if (n < 0 || d < 1 || rows < 1 || ldy < d)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad shape (n %lld, d %lld, rows %lld, ldy %lld)",
                     fn, (long long)n, (long long)d, (long long)rows, (long long)ldy);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  if (x2)
    CU_CHECK_DT(fn, x2dt);
  if (!idx && n > rows)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: row %lld goes to %lld, outside [0, %lld)", fn,
                     (long long)rows, (long long)rows, (long long)rows);
  if (n == 0)
    return AMPC_OK;
  CU_BEGIN(fn);
  (void)ctx;
  /* typed: the rows grouped by target first (four small launches), where
   * testing every row per element costs more; slot 1 (cuda_impl.h) */
  if (idx && ampc_cu_typed() && n >= 16 && n <= INT32_MAX && rows < INT32_MAX) {
    void *sp = NULL; /* start [rows + 1], rank [n], sorted [n] */
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 1, (size_t)(rows + 1 + 2 * n) * sizeof(int32_t), &sp));
    int32_t *start = static_cast<int32_t *>(sp), *rank = start + rows + 1, *sorted = rank + n;
    AMPC_TRY(ampc_cu_group_rows(fn, strm, n, idx, rows, start, rank, sorted));
    const int xd = (int)xdt, x2d = x2 ? (int)x2dt : 0;
    if (typed_pick(
            xd, 0, 0,
            [&](auto L) {
              scatter_add_run_k<decltype(L)::a><<<grid_for(rows * d), THREADS, 0, strm>>>(
                  rows, d, start, sorted, x, xd, x2, x2d, y, ldy);
            },
            dts<DT_F32, 0, 0>{}, dts<DT_F16, 0, 0>{}, dts<DT_BF16, 0, 0>{}))
      return ampc_cu_launched(fn);
  }
  if (idx)
    scatter_add_idx_k<<<grid_for(rows * d), THREADS, 0, strm>>>(n, d, idx, rows, x, xdt, x2, x2dt,
                                                                y, ldy);
  else
    scatter_add_direct_k<<<grid_for(n * d), THREADS, 0, strm>>>(n, d, x, xdt, x2, x2dt, y, ldy);
  return ampc_cu_launched(fn);
}

ampc_status ampc_cuda_argmax_rows(int64_t m, int64_t n, const void *x, ampc_dtype xdt,
                                  bool skip_diag, int32_t *idx) {
  const char *fn = "ampc_cuda_argmax_rows";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, idx);
  CU_CHECK_DT(fn, xdt);
  if (skip_diag && n < 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: skipping the diagonal needs n >= 2 (got %lld)", fn,
                     (long long)n);
  CU_BEGIN(fn);
  (void)ctx;
  argmax_k<<<grid_for(m), THREADS, 0, strm>>>(m, n, x, xdt, skip_diag, idx);
  return ampc_cu_launched(fn);
}

ampc_status ampc_cuda_store_f32(void *y, ampc_dtype dt, const float *src, size_t n,
                                ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_store_f32";
  if (n == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, y);
  CU_CHECK_PTR(fn, src);
  CU_CHECK_DT(fn, dt);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  store_k<<<grid_for((int64_t)n), THREADS, 0, strm>>>((int64_t)n, src, y, dt, dst);
  FINISH(fn, stats);
}

ampc_status ampc_cuda_convert(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                              size_t n) {
  const char *fn = "ampc_cuda_convert";
  if (n == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, dst);
  CU_CHECK_PTR(fn, src);
  CU_CHECK_DT(fn, dst_dt);
  CU_CHECK_DT(fn, src_dt);
  CU_BEGIN(fn);
  (void)ctx;
  convert_k<<<grid_for((int64_t)n), THREADS, 0, strm>>>((int64_t)n, src, src_dt, dst, dst_dt);
  return ampc_cu_launched(fn);
}

ampc_status ampc_cuda_scale_f32(int64_t n, float *x, float s) {
  const char *fn = "ampc_cuda_scale_f32";
  if (n < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: n must not be negative (got %lld)", fn,
                     (long long)n);
  if (n == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, x);
  CU_BEGIN(fn);
  (void)ctx;
  scale_k<<<grid_for(n), THREADS, 0, strm>>>(n, x, s);
  return ampc_cu_launched(fn);
}

ampc_status ampc_cuda_stage_f32(int64_t n, const void *g, ampc_dtype gdt, float inv, bool first,
                                float *stage) {
  const char *fn = "ampc_cuda_stage_f32";
  if (n < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: n must not be negative (got %lld)", fn,
                     (long long)n);
  if (n == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, g);
  CU_CHECK_PTR(fn, stage);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  (void)ctx;
  stage_k<<<grid_for(n), THREADS, 0, strm>>>(n, g, gdt, inv, first ? 1 : 0, stage);
  return ampc_cu_launched(fn);
}

ampc_status ampc_cuda_zero(void *p, size_t bytes) {
  const char *fn = "ampc_cuda_zero";
  if (bytes == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, p);
  CU_BEGIN(fn);
  (void)ctx;
  const cudaError_t e = cudaMemsetAsync(p, 0, bytes, strm);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaMemsetAsync: %s", fn, cudaGetErrorString(e));
  return AMPC_OK;
}

ampc_status ampc_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t rows) {
  const char *fn = "ampc_cuda_copy2d";
  if (width == 0 || rows == 0)
    return AMPC_OK;
  CU_CHECK_PTR(fn, dst);
  CU_CHECK_PTR(fn, src);
  if (dpitch < width || spitch < width)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: a pitch (%zu, %zu) is below the width %zu", fn,
                     dpitch, spitch, width);
  CU_BEGIN(fn);
  (void)ctx;
  const cudaError_t e =
      cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, strm);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaMemcpy2DAsync: %s", fn, cudaGetErrorString(e));
  return AMPC_OK;
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

} /* extern "C" */
