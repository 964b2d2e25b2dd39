/*
 * src/backend/cuda/cuda_linear.cu: the linear layer of ampc/nn.h on the GPU
 * (src/nn/linear.c's twin): forward (ampc_cuda_linear_forward, the bias
 * added in the FP32 epilogue and rounded once), backward with the bias
 * column sums (ampc_cuda_linear_backward; the typed set's one-launch bias
 * gradient, bias_grad_k), and the FP8 linear layers (fp8-mixed):
 * ampc_cuda_fp8_cast_bf16 and ampc_cuda_linear_forward_fp8 / _dgrad_fp8 /
 * _backward_fp8, the operands cast on the device and multiplied by
 * ampc_cuda_gemm_strided_batched (cuda_gemm_batched.cu). Built with
 * --fmad=false.
 */
#include <assert.h>
#include <atomic>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_layers_impl.cuh"

using namespace ampc_cu;

namespace {

/* y [rows, cols] (dt) = round(src + bias rounded to rdt), counting: a
 * linear layer's FP32 product (beta = 0) and its bias added in FP32 as the
 * GEMM's epilogue would add them with beta = 1 and alpha = 1 (one FP32
 * rounding, the same), then rounded once into y; one pass where laying the
 * bias into the FP32 copy first took two */
/* Generic: I int64_t, BT = YT = -1. Typed (cuda_common.cuh): the dtypes
 * as constants (rdt is dt there) and 32-bit indices where every index fits
 * (a 64-bit e % cols an element took about half of this kernel's 11 us a
 * call at mm-base's 4160 x 512 on an H200, by its instruction count). */
template <typename I, int BT, int YT>
__global__ void round_bias_k(I rows, I cols, const float *src, const void *b, int bdt_, int rdt_,
                             void *y, int dt_, dev_stats *ds) {
  const int bdt = TDT(BT, bdt_), rdt = TDT(YT, rdt_), dt = TDT(YT, dt_);
  lstats ls(ds);
  for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < rows * cols;
       e += (I)gridDim.x * blockDim.x) {
    const float v = src[e] + rnd(ld(b, bdt, e % cols), rdt);
    const uint32_t o = st(y, dt, e, v);
    if (ds)
      ls.add(v, dt, o);
  }
  ls.flush(ds);
}

/* every row of c [m, n] (dt) = bias (bdt) rounded to rdt, then stored in
 * dt (rdt == dt, or dt F32: exact): the CPU's way of adding the bias in the
 * GEMM's FP32 epilogue (beta = 1) */
__global__ void bias_rows_k(int64_t m, int64_t n, const void *b, int bdt, int rdt, void *c,
                            int dt) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * n;
       e += (int64_t)gridDim.x * blockDim.x)
    st(c, dt, e, rnd(ld(b, bdt, e % n), rdt));
}

/* p [n] (dt) = 1: the ones vector of the bias gradient's product */
__global__ void ones_k(int64_t n, void *p, int dt) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    st(p, dt, i, 1.0f);
}

/* The bias gradient of the typed set: db [n] (dt) = round(db + the column
 * sums of dy [m, n] (dt)), FP32 sums, one rounding, counted (n values) as
 * the GEMM path counts its C. One launch over (column tiles of 32, row
 * splits): lane x of warp y sums column x over the rows y, y + 8, ... of its
 * split (BG_ILP rows' loads issued before their adds), the 8 warps' sums
 * are added in warp order, the block writes its split's sums, and the last
 * block of a tile to finish (an atomic count, reset by that block) adds the
 * splits in split order, then db. A fixed order whatever the blocks'
 * timing, so the same bits every run: not those of cuBLASLt's product
 * ones . dy (the generic path), both within the GEMM bound (m + 3) u sum
 * |dy|. The deterministic last-block reduction is CUDA's threadFenceReduction
 * sample's scheme. On an H200 the generic path took ~12 us a call (a
 * 64 x 8 tile GEMM, often split-K with its reduce, and the rounding into
 * db) for 4,160 x 512 FP16, a 4 MB read. */
enum { BG_COLS = 32, BG_WARPS = 8, BG_ILP = 8 };
/* db[c] (dt) = round(db[c] + t), counted; every lane of the warp calls it
 * (the counts' flush), lanes past n store nothing */
__device__ __forceinline__ void bias_grad_finish(uint32_t c, uint32_t n, float t, void *db, int dt,
                                                 dev_stats *ds) {
  lstats ls(ds);
  if (c < n) {
    const float v = ld(db, dt, c) + t;
    const uint32_t o = st(db, dt, c, v);
    if (ds)
      ls.add(v, dt, o);
  }
  ls.flush(ds);
}
template <int DT>
__global__ void __launch_bounds__(BG_COLS *BG_WARPS)
    bias_grad_k(uint32_t m, uint32_t n, uint32_t chunk, const void *dy, int dt_, void *db,
                float *part, unsigned *count, dev_stats *ds) {
  const int dt = TDT(DT, dt_);
  const uint32_t lane = threadIdx.x % BG_COLS, wy = threadIdx.x / BG_COLS;
  const uint32_t c = blockIdx.x * BG_COLS + lane;
  const uint32_t r0 = blockIdx.y * chunk, r1 = min(m, r0 + chunk);
  __shared__ float sums[BG_WARPS][BG_COLS];
  __shared__ bool last;
  float s = 0.0f;
  if (c < n) {
    uint32_t r = r0 + wy;
    for (; r + (BG_ILP - 1) * BG_WARPS < r1; r += BG_ILP * BG_WARPS) {
      uint32_t v[BG_ILP];
#pragma unroll
      for (int u = 0; u < BG_ILP; u++)
        v[u] = raw_bits(dy, dt, (int64_t)(r + u * BG_WARPS) * n + c);
#pragma unroll
      for (int u = 0; u < BG_ILP; u++)
        s += widen(v[u], dt);
    }
    for (; r < r1; r += BG_WARPS)
      s += ld(dy, dt, (int64_t)r * n + c);
  }
  sums[wy][lane] = s;
  __syncthreads();
  float t = 0.0f;
  if (wy == 0) {
    t = sums[0][lane];
#pragma unroll
    for (int u = 1; u < BG_WARPS; u++)
      t += sums[u][lane];
  }
  if (gridDim.y == 1) { /* one split: the block's sums are the columns' */
    if (wy == 0)
      bias_grad_finish(c, n, t, db, dt, ds);
    return;
  }
  if (wy == 0) {
    if (c < n)
      part[(int64_t)blockIdx.y * n + c] = t;
    __threadfence(); /* the split's sums visible before the count says so */
  }
  __syncthreads();
  if (threadIdx.x == 0)
    last = atomicAdd(&count[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last || wy != 0)
    return;
  __threadfence();
  if (c < n) {
    t = __ldcg(&part[c]);
    uint32_t y = 1;
    for (; y + BG_ILP <= gridDim.y; y += BG_ILP) { /* the loads first, then the adds */
      float v[BG_ILP];
#pragma unroll
      for (int u = 0; u < BG_ILP; u++)
        v[u] = __ldcg(&part[(int64_t)(y + u) * n + c]);
#pragma unroll
      for (int u = 0; u < BG_ILP; u++)
        t += v[u];
    }
    for (; y < gridDim.y; y++)
      t += __ldcg(&part[(int64_t)y * n + c]);
  }
  bias_grad_finish(c, n, t, db, dt, ds);
  if (lane == 0)
    count[blockIdx.x] = 0; /* for the next call on the stream */
}

/* ---- FP8 casts (fp8-mixed): linear.c's ampc_fp8_cast_bf16 on the device ---- */

/* what one cast reports back: max |x| (FP32 bits; NaN ignored) and the
 * saturated and flushed counts */
struct f8_report {
  unsigned int amax_bits, pad;
  unsigned long long saturated, flushed;
};
enum { F8_REPORTS = 3, F8_HEAD = 256 }; /* dy / x / w casts of one call; bytes before the copies */

/* dst [rows * cols] (bfloat16 bits of the FP8 values) = the cast of src
 * (rows x cols, row stride ld) with scale: linear.c's scalar loop, op for
 * op (one FP32 product; |v| clamped to the largest value; one RNE to the
 * format's grid, below 2^emin by adding and subtracting 1.5 2^(23 + log2
 * grid), above it on the bits; the sign put back); inf and NaN inputs kept
 * non-finite as the non-saturating FP8 conversion and back gives them
 * (E4M3: the NaN 0x7FFF; E5M2: inf keeps its sign, NaN 0x7FFF), not counted */
__global__ void fp8_cast_k(int64_t rows, int64_t cols, int64_t ldx, const void *src, int sdt,
                           float scale, int e4, uint16_t *dst, f8_report *rep) {
  const float fmax = e4 ? 448.0f : 57344.0f, tiny = e4 ? 0x1p-6f : 0x1p-14f;
  const float magic = e4 ? 0x1.8p14f : 0x1.8p7f;
  const unsigned drop = e4 ? 20u : 21u;
  const uint32_t low = (1u << drop) - 1u, half = (1u << (drop - 1u)) - 1u;
  float am = 0.0f;
  uint32_t ns = 0, nfl = 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * cols;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / cols, j = e % cols;
    const float r = ld(src, sdt, i * ldx + j);
    const float ar = fabsf(r);
    am = ar > am ? ar : am; /* NaN: ignored */
    const float v = __fmul_rn(r, scale);
    if (!(ar <= 3.402823466e38f)) { /* inf or NaN */
      dst[e] =
          (uint16_t)(isnan(v) || e4 ? 0x7FFFu : 0x7F80u | ((__float_as_uint(v) >> 16) & 0x8000u));
      continue;
    }
    const float av = fabsf(v);
    ns += !(av <= fmax);
    const float a = av < fmax ? av : fmax;
    const float sub = __fsub_rn(__fadd_rn(a, magic), magic);
    uint32_t b = __float_as_uint(a);
    b = (b + half + ((b >> drop) & 1u)) & ~low;
    const float mq = a < tiny ? sub : __uint_as_float(b);
    const uint32_t qb = __float_as_uint(mq) | (__float_as_uint(v) & 0x80000000u);
    dst[e] = (uint16_t)(qb >> 16);
    nfl += (ar != 0.0f) & (mq == 0.0f);
  }
  am = warp_maxf(am);
  for (int o = 16; o > 0; o >>= 1) {
    ns += __shfl_xor_sync(0xFFFFFFFFu, ns, o);
    nfl += __shfl_xor_sync(0xFFFFFFFFu, nfl, o);
  }
  if ((threadIdx.x & 31) == 0) {
    if (am > 0.0f)
      atomicMax(&rep->amax_bits, __float_as_uint(am)); /* non-negative: bits order as values */
    if (ns)
      atomicAdd(&rep->saturated, (unsigned long long)ns);
    if (nfl)
      atomicAdd(&rep->flushed, (unsigned long long)nfl);
  }
}

/* the casts' reports (slot SLOT_F8, zeroed on the stream) and `bytes` of
 * device memory for the quantized copies: the layer's workspace when it is
 * device memory and large enough (the model's, in its device arena), else
 * after the reports in the slot */
ampc_status f8_scratch(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm,
                       const ampc_scratch *ws, size_t bytes, f8_report **rep, uint16_t **q) {
  bool own = ws && ws->base && ws->bytes >= bytes;
  if (own) { /* device memory only (a host workspace, e.g. of the CPU's layers, is not) */
    cudaPointerAttributes at;
    own = cudaPointerGetAttributes(&at, ws->base) == cudaSuccess &&
          (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged);
    (void)cudaGetLastError();
  }
  void *p = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_F8, F8_HEAD + (own ? 0 : bytes), &p));
  *rep = static_cast<f8_report *>(p);
  *q = own ? static_cast<uint16_t *>(ws->base)
           : reinterpret_cast<uint16_t *>(static_cast<char *>(p) + F8_HEAD);
  if (cudaMemsetAsync(p, 0, F8_REPORTS * sizeof(f8_report), strm) != cudaSuccess)
    return ampc_cu_launched(fn);
  return AMPC_OK;
}

ampc_status f8_cast(const char *fn, cudaStream_t strm, const ampc_fp8_q *q, const void *src,
                    ampc_dtype sdt, int64_t rows, int64_t cols, uint16_t *dst, f8_report *rep) {
  if (q->fmt != AMPC_F8_E4M3 && q->fmt != AMPC_F8_E5M2)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: the quantizer's format is not E4M3 or E5M2", fn);
  fp8_cast_k<<<grid_for(rows * cols), THREADS, 0, strm>>>(rows, cols, cols, src, sdt, q->scale,
                                                          q->fmt == AMPC_F8_E4M3, dst, rep);
  return ampc_cu_launched(fn);
}

/* read the reports back (waits for the stream) into the quantizers, as the
 * CPU's cast updates its owner: amax folded in with max (a NaN amax
 * replaced), the counters when counted */
ampc_status f8_collect(const char *fn, ampc_cuda_ctx *ctx, const f8_report *rep, int n,
                       ampc_fp8_q *const *q, const int64_t *values, const bool *count) {
  f8_report h[F8_REPORTS];
  (void)fn;
  AMPC_TRY(ampc_cuda_to_host(ctx, h, rep, (size_t)n * sizeof *h));
  for (int i = 0; i < n; i++) {
    float am;
    memcpy(&am, &h[i].amax_bits, sizeof am);
    if (am > q[i]->amax || isnan(q[i]->amax))
      q[i]->amax = am;
    if (count[i]) {
      q[i]->values += (uint64_t)values[i];
      q[i]->saturated += h[i].saturated;
      q[i]->flushed += h[i].flushed;
    }
  }
  return AMPC_OK;
}

size_t pad64(size_t b) { return (b + 63) & ~(size_t)63; } /* as ampc_linear_fp8_ws_bytes */

/* y = alpha x W^T + b (bias in bdt): ampc_cuda_linear_forward with the
 * dequantization factor of an FP8 product in alpha */
ampc_status lin_fwd(const char *fn, int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                    const void *w, ampc_dtype wdt, const void *b, ampc_dtype bdt, float alpha,
                    void *y, ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats) {
  CU_BEGIN(fn);
  /* as the CPU: the bias laid into the destination, rounded to its dtype,
   * and added by the GEMM (beta = 1) in FP32; with stats, an FP32 product
   * rounded once (and counted). A 16-bit y with a bias (and FP32 sums) also
   * goes through the FP32 copy: the GEMM would otherwise widen the laid
   * bias from y into FP32 itself (cuBLASLt's 16-bit epilogue rounds twice),
   * a pass and a 16-bit store more for the same values; the copy is then
   * not the model's store, and is counted when rounded into y. Not where
   * the FP32 C would move the product to other kernels: x and w of one
   * 16-bit dtype and y of the other run widened on FP32 GEMMs (the mixed
   * path), and would run on Tensor Cores into an FP32 C */
  const bool via32 = stats || (b && ydt != AMPC_F32 && acc == AMPC_ACC_F32 &&
                               (direct_ok(xdt, wdt, ydt) || xdt != wdt));
  const ampc_dtype cdt = via32 ? AMPC_F32 : ydt;
  void *c = y;
  if (via32)
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)(m * n) * sizeof(float), &c));
  /* through the FP32 copy with alpha = 1 and no stats, the bias is added
   * when the copy is rounded (round_bias_k: the same FP32 sum), not laid in
   * first (with stats, a bound tally counts the GEMM's C, which then holds
   * the bias too, as on the CPU) */
  const bool late_bias = b && via32 && alpha == 1.0f && !stats;
  const int rdt = stats ? AMPC_F32 : ydt;
  if (b && !late_bias) {
    bias_rows_k<<<grid_for(m * n), THREADS, 0, strm>>>(m, n, b, bdt, rdt, c, cdt);
    AMPC_TRY(ampc_cu_launched(fn));
  }
  ampc_tally *const was = via32 && !stats ? ampc_tally_bind(NULL) : NULL;
  const ampc_status st =
      ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, m, n, k, alpha, x, xdt, k, 0, w, wdt, k,
                                     0, b && !late_bias ? 1.0f : 0.0f, c, cdt, n, 0, 1, acc);
  if (via32 && !stats)
    (void)ampc_tally_bind(was);
  AMPC_TRY(st);
  if (!via32)
    return AMPC_OK;
  dev_stats *dst = NULL;
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, stats, &dst));
  if (late_bias) {
    const float *c32 = static_cast<const float *>(c);
    if (!(ampc_cu_typed() && m * n < ((int64_t)1 << 31) && rdt == (int)ydt &&
          typed_pick(
              bdt, ydt, 0,
              [&](auto t) {
                using T = decltype(t);
                round_bias_k<uint32_t, T::a, T::b><<<grid_for(m * n), THREADS, 0, strm>>>(
                    (uint32_t)m, (uint32_t)n, c32, b, bdt, rdt, y, ydt, dst);
              },
              dts<1, 1, 0>{}, dts<2, 2, 0>{}))) /* y is 16-bit here (via32 without stats) */
      round_bias_k<int64_t, -1, -1>
          <<<grid_for(m * n), THREADS, 0, strm>>>(m, n, c32, b, bdt, rdt, y, ydt, dst);
  } else
    round_k<<<grid_for(m * n), THREADS, 0, strm>>>(1, m, n, static_cast<const float *>(c), n, 0, y,
                                                   ydt, n, 0, dst);
  AMPC_TRY(ampc_cu_launched(fn));
  return ampc_cu_stats_end(strm, dst, stats);
}

/* db [n] += the column sums of dy [m, n] (gdt): the product ones [1, m] .
 * dy on cuBLASLt, FP32 sums rounded once into db (beta = 1), as the CPU's
 * FP32 column sums added to db with one rounding; the sums' order is
 * cuBLASLt's (within the GEMM bound), not the CPU's row order. A column
 * per thread in row order (bit-equal) took 270 us a call on an H200 at
 * mm-base's shapes, 70 % of a 16-mixed step: too few threads, one long
 * dependent chain each. Counted as the GEMM's C: n values. */
ampc_status bias_grad(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, int64_t m, int64_t n,
                      const void *dy, ampc_dtype gdt, void *db) {
  if (ampc_cu_typed() && m * n < ((int64_t)1 << 31)) { /* bias_grad_k */
    const int64_t tiles = (n + BG_COLS - 1) / BG_COLS;
    /* about 512 blocks (all resident at once on an H100 or H200), at most
     * 32 splits of about 64 rows or more */
    int64_t splits = (512 + tiles - 1) / tiles, most = (m + 63) / 64;
    splits = splits < 32 ? splits : 32;
    splits = splits < most ? splits : most;
    const int64_t chunk = (m + splits - 1) / splits;
    splits = (m + chunk - 1) / chunk; /* none empty */
    if (tiles <= INT32_MAX) {
      /* slot SLOT_BG: the tiles' counts, then the splits' sums. The tag
       * holds how many counts the buffer keeps (zeroed, then reset by each
       * kernel; 0 after a reallocation); the sums start after all of them,
       * so a call with fewer tiles cannot overwrite counts a later call
       * with more will read */
      uint64_t *tag = ampc_cuda_ctx_scratch_tag(ctx, SLOT_BG);
      const uint64_t cap = *tag > (uint64_t)tiles ? *tag : (uint64_t)tiles;
      const size_t cb = pad64((size_t)cap * sizeof(unsigned));
      void *p = NULL;
      AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_BG, cb + (size_t)(splits * n) * sizeof(float), &p));
      tag = ampc_cuda_ctx_scratch_tag(ctx, SLOT_BG);
      if (*tag < cap) { /* a new buffer, or more counts than it kept */
        const cudaError_t e = cudaMemsetAsync(p, 0, cb, strm);
        if (e != cudaSuccess)
          return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaMemsetAsync: %s", fn, cudaGetErrorString(e));
        *tag = cap;
      }
      unsigned *const cnt = static_cast<unsigned *>(p);
      float *const part = reinterpret_cast<float *>(static_cast<char *>(p) + cb);
      STATS_BEGIN(NULL);
      const dim3 grid((unsigned)tiles, (unsigned)splits);
      if (typed_pick(
              gdt, 0, 0,
              [&](auto t) {
                using T = decltype(t);
                bias_grad_k<T::a><<<grid, BG_COLS * BG_WARPS, 0, strm>>>(
                    (uint32_t)m, (uint32_t)n, (uint32_t)chunk, dy, gdt, db, part, cnt, dst);
              },
              dts<0, 0, 0>{}, dts<1, 0, 0>{}, dts<2, 0, 0>{})) {
        FINISH(fn, NULL);
      }
    }
  }
  void *ones = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_ONES, (size_t)m * ampc_dtype_size(gdt), &ones));
  /* filled once per (dtype, length) that outgrows it: the tag holds the
   * filled length times 16 plus the dtype, 0 after a reallocation */
  uint64_t *const tag = ampc_cuda_ctx_scratch_tag(ctx, SLOT_ONES);
  if (!(*tag % 16 == (uint64_t)gdt && *tag / 16 >= (uint64_t)m)) {
    ones_k<<<grid_for(m), THREADS, 0, strm>>>(m, ones, (int)gdt);
    AMPC_TRY(ampc_cu_launched(fn));
    *tag = (uint64_t)m * 16 + (uint64_t)gdt;
  }
  return ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, 1, n, m, 1.0f, ones, gdt, m, 0, dy,
                                        gdt, n, 0, 1.0f, db, gdt, n, 0, 1, AMPC_ACC_F32);
}

} // namespace

extern "C" {

ampc_status ampc_cuda_linear_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                     const void *w, ampc_dtype wdt, const void *b, void *y,
                                     ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_linear_forward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, k);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, ydt);
  return lin_fwd(fn, m, k, n, x, xdt, w, wdt, b, wdt, 1.0f, y, ydt, acc, stats);
}

ampc_status ampc_cuda_linear_backward(int64_t m, int64_t k, int64_t n, const void *dy,
                                      ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                      ampc_dtype wdt, void *dx, void *dw, void *db, ampc_acc acc,
                                      ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_linear_backward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, k);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, dw);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_BEGIN(fn);
  if (dx) /* dx [m, k] = dy [m, n] . W [n, k] */
    AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, 0, w,
                                            wdt, k, 0, 0.0f, dx, gdt, k, 0, 1, acc));
  /* dW [n, k] += dy^T [n, m] . x [m, k] */
  AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, n, k, m, 1.0f, dy, gdt, n, 0, x,
                                          xdt, k, 0, 1.0f, dw, gdt, k, 0, 1, acc));
  return db ? bias_grad(fn, ctx, strm, m, n, dy, gdt, db) : AMPC_OK;
}

ampc_status ampc_cuda_fp8_cast_bf16(ampc_fp8_q *q, const void *src, ampc_dtype sdt, int64_t rows,
                                    int64_t cols, int64_t ld, uint16_t *dst, bool count) {
  const char *fn = "ampc_cuda_fp8_cast_bf16";
  CU_CHECK_PTR(fn, q);
  CU_CHECK_PTR(fn, src);
  CU_CHECK_PTR(fn, dst);
  CU_CHECK_DT(fn, sdt);
  if (rows < 0 || cols < 0 || ld < cols || (q->fmt != AMPC_F8_E4M3 && q->fmt != AMPC_F8_E5M2))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad sizes (%lld x %lld, ld %lld) or format", fn,
                     (long long)rows, (long long)cols, (long long)ld);
  CU_BEGIN(fn);
  f8_report *rep = NULL;
  uint16_t *unused = NULL;
  AMPC_TRY(f8_scratch(fn, ctx, strm, NULL, 0, &rep, &unused));
  if (rows * cols > 0) {
    fp8_cast_k<<<grid_for(rows * cols), THREADS, 0, strm>>>(rows, cols, ld, src, sdt, q->scale,
                                                            q->fmt == AMPC_F8_E4M3, dst, rep);
    AMPC_TRY(ampc_cu_launched(fn));
  }
  ampc_fp8_q *qs[1] = {q};
  const int64_t vals[1] = {rows * cols};
  const bool cnt[1] = {count};
  return f8_collect(fn, ctx, rep, 1, qs, vals, cnt);
}

ampc_status ampc_cuda_linear_forward_fp8(int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const void *b, void *y, ampc_dtype ydt, ampc_acc acc,
                                         ampc_linear_fp8 *f, ampc_round_stats *stats) {
  if (!f)
    return ampc_cuda_linear_forward(m, k, n, x, xdt, w, wdt, b, y, ydt, acc, stats);
  const char *fn = "ampc_cuda_linear_forward_fp8";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, k);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  const size_t bx = pad64((size_t)(m * k) * 2), bw = pad64((size_t)(n * k) * 2);
  f8_report *rep = NULL;
  uint16_t *xq = NULL;
  AMPC_TRY(f8_scratch(fn, ctx, strm, f->ws, bx + bw, &rep, &xq));
  uint16_t *wq = xq + bx / 2;
  AMPC_TRY(f8_cast(fn, strm, &f->x, x, xdt, m, k, xq, &rep[0]));
  AMPC_TRY(f8_cast(fn, strm, &f->w, w, wdt, n, k, wq, &rep[1]));
  AMPC_TRY(lin_fwd(fn, m, k, n, xq, AMPC_BF16, wq, AMPC_BF16, b, wdt,
                   f->x.scale_inv * f->w.scale_inv, y, ydt, acc, stats));
  ampc_fp8_q *qs[2] = {&f->x, &f->w};
  const int64_t vals[2] = {m * k, n * k};
  const bool cnt[2] = {true, true};
  return f8_collect(fn, ctx, rep, 2, qs, vals, cnt);
}

ampc_status ampc_cuda_linear_dgrad_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                       ampc_dtype gdt, const void *w, ampc_dtype wdt, float beta,
                                       void *c, ampc_dtype cdt, ampc_acc acc, ampc_linear_fp8 *f,
                                       bool count_dy) {
  if (!f)
    return ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, 0, w,
                                          wdt, k, 0, beta, c, cdt, k, 0, 1, acc);
  const char *fn = "ampc_cuda_linear_dgrad_fp8";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, k);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, c);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, cdt);
  CU_BEGIN(fn);
  const size_t bdy = pad64((size_t)(m * n) * 2), bw = pad64((size_t)(n * k) * 2);
  f8_report *rep = NULL;
  uint16_t *dyq = NULL;
  AMPC_TRY(f8_scratch(fn, ctx, strm, f->ws, bdy + bw, &rep, &dyq));
  uint16_t *wq = dyq + bdy / 2;
  AMPC_TRY(f8_cast(fn, strm, &f->dy, dy, gdt, m, n, dyq, &rep[0]));
  AMPC_TRY(f8_cast(fn, strm, &f->w, w, wdt, n, k, wq, &rep[1]));
  AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, m, k, n,
                                          f->dy.scale_inv * f->w.scale_inv, dyq, AMPC_BF16, n, 0,
                                          wq, AMPC_BF16, k, 0, beta, c, cdt, k, 0, 1, acc));
  ampc_fp8_q *qs[2] = {&f->dy, &f->w};
  const int64_t vals[2] = {m * n, n * k};
  const bool cnt[2] = {count_dy, false};
  return f8_collect(fn, ctx, rep, 2, qs, vals, cnt);
}

ampc_status ampc_cuda_linear_backward_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                          ampc_dtype gdt, const void *x, ampc_dtype xdt,
                                          const void *w, ampc_dtype wdt, void *dx, void *dw,
                                          void *db, ampc_acc acc, ampc_linear_fp8 *f,
                                          ampc_scratch *ws) {
  if (!f)
    return ampc_cuda_linear_backward(m, k, n, dy, gdt, x, xdt, w, wdt, dx, dw, db, acc, ws);
  const char *fn = "ampc_cuda_linear_backward_fp8";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, k);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, dw);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_BEGIN(fn);
  const size_t bdy = pad64((size_t)(m * n) * 2), bw = pad64((size_t)(n * k) * 2);
  const size_t bx = pad64((size_t)(m * k) * 2);
  f8_report *rep = NULL;
  uint16_t *dyq = NULL;
  AMPC_TRY(f8_scratch(fn, ctx, strm, f->ws, bdy + bw + bx, &rep, &dyq));
  uint16_t *wq = dyq + bdy / 2, *xq = wq + bw / 2;
  /* the casts' reports in the order they run: dy, (w,) x */
  ampc_fp8_q *qs[3] = {&f->dy, &f->w, &f->x};
  int64_t vals[3] = {m * n, n * k, m * k};
  const bool cnt[3] = {true, false, false};
  AMPC_TRY(f8_cast(fn, strm, &f->dy, dy, gdt, m, n, dyq, &rep[0]));
  if (dx) { /* dx [m, k] = dyq [m, n] . Wq [n, k] */
    AMPC_TRY(f8_cast(fn, strm, &f->w, w, wdt, n, k, wq, &rep[1]));
    AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, m, k, n,
                                            f->dy.scale_inv * f->w.scale_inv, dyq, AMPC_BF16, n, 0,
                                            wq, AMPC_BF16, k, 0, 0.0f, dx, gdt, k, 0, 1, acc));
  }
  /* dW [n, k] += dyq^T [n, m] . xq [m, k] */
  if (!dx) /* no w cast: x reports second */
    qs[1] = &f->x, vals[1] = m * k;
  AMPC_TRY(f8_cast(fn, strm, &f->x, x, xdt, m, k, xq, &rep[dx ? 2 : 1]));
  AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, n, k, m,
                                          f->dy.scale_inv * f->x.scale_inv, dyq, AMPC_BF16, n, 0,
                                          xq, AMPC_BF16, k, 0, 1.0f, dw, gdt, k, 0, 1, acc));
  AMPC_TRY(f8_collect(fn, ctx, rep, dx ? 3 : 2, qs, vals, cnt));
  /* db from the unquantized dy, as the CPU (TE's fused cast + dbias) */
  return db ? bias_grad(fn, ctx, strm, m, n, dy, gdt, db) : AMPC_OK;
}

} /* extern "C" */
