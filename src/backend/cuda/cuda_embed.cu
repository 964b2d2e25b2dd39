/*
 * src/backend/cuda/cuda_embed.cu: token + position embeddings (the backward pass sums
 * each id's rows in row order after a stable counting sort), masked mean
 * pooling, L2 normalisation and the patch embedding (src/nn/embed.c) on the
 * GPU. Patch embedding: the images' pixels unfolded into patch rows in the
 * CPU's order ((channel, dy, dx) columns; v * px_scale + px_shift in FP32,
 * rounded once to the weights' dtype: the CPU's bits), then the GPU's linear
 * layer.
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

/* blocks for the row kernels: one warp a row, WARPS rows a block */
unsigned rows_grid(int64_t m) { return (unsigned)((m + WARPS - 1) / WARPS); }

/* ---- the patch embedding ---------------------------------------------------- */

enum { SLOT_PATCH = 9 }; /* cuda_impl.h */

__global__ void unfold_k(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                         const uint8_t *images, float sc, float sh, void *out, int wdt,
                         dev_stats *ds) {
  lstats ls(ds);
  const int64_t gw = ww / p, np = (hh / p) * gw, k = c * p * p;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < b * np * k;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / k, col = e % k;
    const int64_t bi = r / np, pr = r % np, py = pr / gw, px = pr % gw;
    const int64_t ch = col / (p * p), dy = (col / p) % p, dx = col % p;
    const int64_t yy = py * p + dy, xx = px * p + dx;
    cst(out, wdt, e, (float)images[((bi * hh + yy) * ww + xx) * c + ch] * sc + sh, ls, ds);
  }
  ls.flush(ds);
}

/* the images unfolded into patch rows [b * np, c * p * p] (wdt) in device
 * scratch, after the tiling check (as the CPU's patch_check) */
ampc_status unfold(const char *fn, int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                   const uint8_t *images, float sc, float sh, ampc_dtype wdt, void **pt) {
  if (hh < p || ww < p || hh % p || ww % p)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: %lldx%lld images do not tile into %lld-pixel patches", fn, (long long)hh,
                     (long long)ww, (long long)p);
  ampc_cuda_ctx *ctx = NULL;
  cudaStream_t strm = NULL;
  AMPC_TRY(ampc_cu_begin(fn, &ctx, &strm));
  const int64_t n = b * (hh / p) * (ww / p) * c * p * p;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_PATCH, (size_t)n * ampc_dtype_size(wdt), pt));
  STATS_BEGIN(NULL); /* the CPU's unfold stores are counted: so are these */
  unfold_k<<<grid_for(n), THREADS, 0, strm>>>(b, hh, ww, c, p, images, sc, sh, *pt, wdt, dst);
  FINISH(fn, NULL);
}

} // namespace

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

ampc_status ampc_cuda_patch_embed_forward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                          int64_t d, const uint8_t *images, float px_scale,
                                          float px_shift, const void *w, ampc_dtype wdt,
                                          const void *bias, void *y, ampc_dtype ydt, ampc_acc acc,
                                          ampc_round_stats *stats, ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_patch_embed_forward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, p);
  CU_CHECK_POS(fn, c);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, images);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, ydt);
  const int64_t np = (hh / p) * (ww / p), k = c * p * p;
  void *pt = NULL;
  AMPC_TRY(unfold(fn, b, hh, ww, c, p, images, px_scale, px_shift, wdt, &pt));
  return ampc_cuda_linear_forward(b * np, k, d, pt, wdt, w, wdt, bias, y, ydt, acc, stats);
}

ampc_status ampc_cuda_patch_embed_backward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                           int64_t d, const uint8_t *images, float px_scale,
                                           float px_shift, ampc_dtype wdt, const void *dy,
                                           ampc_dtype gdt, void *dw, void *dbias, ampc_acc acc,
                                           ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_patch_embed_backward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, p);
  CU_CHECK_POS(fn, c);
  CU_CHECK_POS(fn, d);
  CU_CHECK_PTR(fn, images);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, dw);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, gdt);
  const int64_t np = (hh / p) * (ww / p), k = c * p * p;
  void *pt = NULL;
  AMPC_TRY(unfold(fn, b, hh, ww, c, p, images, px_scale, px_shift, wdt, &pt));
  /* W is not read without an input gradient: the patches stand in */
  return ampc_cuda_linear_backward(b * np, k, d, dy, gdt, pt, wdt, pt, wdt, NULL, dw, dbias, acc,
                                   NULL);
}

} /* extern "C" */
