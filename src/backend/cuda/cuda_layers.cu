/*
 * src/backend/cuda/cuda_layers.cu: the GEMM-type layers of ampc/nn.h on the GPU:
 * the strided batched GEMM in ampc_gemm's row-major convention with any mix
 * of F32 / F16 / BF16 operands (ampc_cuda_gemm_strided_batched), the linear
 * layer (forward, backward with the bias column sums) and the attention core
 * (S = q k^T / sqrt(dh) per head, the masked softmax, P v; and back).
 *
 * cuBLASLt multiplies A and B of one dtype only (cuda.h). The CPU's
 * GEMM widens any operand to FP32 while packing, so a mixed product (an FP32
 * dS against 16-bit keys in the attention backward pass) is, exactly, the
 * FP32 product of the widened operands: here the 16-bit operand is widened
 * into device scratch (exact) and the FP32 GEMM runs (no TF32: PEDANTIC), and
 * a 16-bit C of an FP32 product goes through an FP32 copy rounded once.
 * Products of two 16-bit operands run on Tensor Cores with FP32 sums
 * (COMPUTE_32F). The FP16-accumulation ablation (AMPC_ACC_F16): F16 A and
 * B on cuBLASLt's COMPUTE_16F (the Tensor Cores' FP16 sums; an F32 or BF16
 * C through F16 scratch and the CPU's FP32 epilogue), other operands on a
 * kernel that sums in binary16 in order as the CPU does (gemm.c), every
 * product there with AMPC_CUDA_ACC16=exact. Built with --fmad=false.
 */
#include <assert.h>
#include <atomic>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

using namespace ampc_cu;

namespace {

/* scratch slots (cuda_impl.h): 4, 5, 6 the GEMM's widened A, B, C; 7 the
 * layers' FP32 buffers (the linear layer's FP32 product with stats or with a
 * bias into a 16-bit y; attention's FP32 out copy and widened v, its dP, dS,
 * dq, dk, dv copies and widened q, k, dout); 11 the FP8 layers' quantized
 * operands; 12 the bias gradient's ones vector; 16 the attention forward's
 * 16-bit probabilities (the products' operand); 17 the typed bias
 * gradient's counts and partial sums */
enum { SLOT_A = 4, SLOT_B = 5, SLOT_C = 6, SLOT_L = 7, SLOT_F8 = 11 };
enum { SLOT_ONES = 12, SLOT_PM = 16, SLOT_BG = 17 };
static_assert(SLOT_BG < AMPC_CUDA_SCRATCH_SLOTS, "the bias gradient's slot is a context slot");
static_assert(SLOT_PM < AMPC_CUDA_SCRATCH_SLOTS,
              "the 16-bit probabilities' slot is a context slot");
static_assert(SLOT_ONES < AMPC_CUDA_SCRATCH_SLOTS, "the ones slot is a context slot");

__global__ void widen_k(int64_t n, const void *src, int dt, float *dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = ld(src, dt, i);
}

/* dst [rows, cols] (FP32, packed) = src [rows, cols] (dt, row stride ld),
 * exactly: a view's rows widened without the gaps between them */
__global__ void widen_rows_k(int64_t rows, int64_t cols, const void *src, int dt, int64_t lds,
                             float *dst) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * cols;
       e += (int64_t)gridDim.x * blockDim.x)
    dst[e] = ld(src, dt, (e / cols) * lds + e % cols);
}

enum { HEADS_ILP = 4 }; /* rows a thread moves at once in heads_k / unheads_k */

/* The heads of rows [b * t, h * dh] (row stride ld) laid out head-major,
 * [b, h, t, dh] (each sample's head a packed t x dh matrix), so that one
 * strided batched GEMM over b * h forms every head's product. A block per
 * HEADS_ILP rows (grid-stride), its threads over the rows' h * dh columns,
 * the rows' loads issued together; the row arithmetic once per row and
 * 32-bit within it (64-bit divisions per element, then a load at a time,
 * made these copies 3 to 5 times slower than their memory traffic on an
 * H200).
 * heads_rows: dst (ddt) = src (sdt): exact (ddt F32 or sdt). */
__device__ __forceinline__ void heads_rows(int64_t rows, int t, int h, int dh, const void *src,
                                           int sdt, int64_t lds, void *dst, int ddt) {
  const int dm = h * dh;
  const int64_t hstride = (int64_t)t * dh; /* one head's matrix */
  for (int64_t r0 = blockIdx.x; r0 < rows; r0 += HEADS_ILP * (int64_t)gridDim.x) {
    int64_t so[HEADS_ILP], dob[HEADS_ILP]; /* each row's source and head-major offsets */
#pragma unroll
    for (int u = 0; u < HEADS_ILP; u++) {
      const int64_t r = r0 + u * (int64_t)gridDim.x, bi = r / t, ti = r - bi * t;
      so[u] = r < rows ? r * lds : -1;
      dob[u] = (bi * h * t + ti) * dh;
    }
    for (int c = threadIdx.x; c < dm; c += blockDim.x) {
      const int hh = c / dh, j = c - hh * dh;
      float v[HEADS_ILP]; /* the rows' loads issued together */
#pragma unroll
      for (int u = 0; u < HEADS_ILP; u++)
        v[u] = so[u] >= 0 ? ld(src, sdt, so[u] + c) : 0.0f;
#pragma unroll
      for (int u = 0; u < HEADS_ILP; u++)
        if (so[u] >= 0)
          st(dst, ddt, dob[u] + hh * hstride + j, v[u]);
    }
  }
}

/* unheads_rows: dst [b * t, ldd] (dt) = round(src [b, h, t, dh], FP32),
 * once, counting into ls */
__device__ __forceinline__ void unheads_rows(int64_t rows, int t, int h, int dh, const float *src,
                                             void *dst, int dt, int64_t ldd, dev_stats *ds,
                                             lstats &ls) {
  const int dm = h * dh;
  const int64_t hstride = (int64_t)t * dh;
  for (int64_t r0 = blockIdx.x; r0 < rows; r0 += HEADS_ILP * (int64_t)gridDim.x) {
    int64_t dof[HEADS_ILP], sob[HEADS_ILP];
#pragma unroll
    for (int u = 0; u < HEADS_ILP; u++) {
      const int64_t r = r0 + u * (int64_t)gridDim.x, bi = r / t, ti = r - bi * t;
      dof[u] = r < rows ? r * ldd : -1;
      sob[u] = (bi * h * t + ti) * dh;
    }
    for (int c = threadIdx.x; c < dm; c += blockDim.x) {
      const int hh = c / dh, j = c - hh * dh;
      float v[HEADS_ILP];
#pragma unroll
      for (int u = 0; u < HEADS_ILP; u++)
        v[u] = dof[u] >= 0 ? src[sob[u] + hh * hstride + j] : 0.0f;
#pragma unroll
      for (int u = 0; u < HEADS_ILP; u++)
        if (dof[u] >= 0) {
          const uint32_t o = st(dst, dt, dof[u] + c, v[u]);
          if (ds)
            ls.add(v[u], dt, o);
        }
    }
  }
}

template <int ST, int DT>
__global__ void heads_k(int64_t rows, int t, int h, int dh, const void *src, int sdt_, int64_t lds,
                        void *dst, int ddt_) {
  heads_rows(rows, t, h, dh, src, TDT(ST, sdt_), lds, dst, TDT(DT, ddt_));
}

template <int DT>
__global__ void unheads_k(int64_t rows, int t, int h, int dh, const float *src, void *dst, int dt_,
                          int64_t ldd, dev_stats *ds) {
  lstats ls(ds);
  unheads_rows(rows, t, h, dh, src, dst, TDT(DT, dt_), ldd, ds, ls);
  ls.flush(ds);
}

/* Up to three head copies of one attention call in one launch (typed set):
 * job blockIdx.y, each the copy heads_k / unheads_k makes (the same
 * operations, so the same bits and counts). An attention layer's q, k (and
 * in the backward pass v, dout) are copied in two launches, not five; its
 * dq, dk, dv rounded in one, not three. */
enum { HEADS_JOBS = 3 };
struct heads_job {
  const void *src;
  void *dst;
  int64_t rows, ld; /* rows b * t; the row-major side's row stride */
  int t;
};
struct heads_jobs {
  heads_job j[HEADS_JOBS];
};
/* job blockIdx.y, chosen by value (an index into the kernel's parameters
 * would copy them all to the stack first) */
__device__ __forceinline__ heads_job pick_job(const heads_jobs &js) {
  static_assert(HEADS_JOBS == 3, "pick_job chooses among three");
  return blockIdx.y == 0 ? js.j[0] : blockIdx.y == 1 ? js.j[1] : js.j[2];
}
template <int ST, int DT>
__global__ void heads_multi_k(heads_jobs jobs, int h, int dh, int sdt_, int ddt_) {
  const heads_job jb = pick_job(jobs);
  heads_rows(jb.rows, jb.t, h, dh, jb.src, TDT(ST, sdt_), jb.ld, jb.dst, TDT(DT, ddt_));
}
template <int DT>
__global__ void unheads_multi_k(heads_jobs jobs, int h, int dh, int dt_, dev_stats *ds) {
  const heads_job jb = pick_job(jobs);
  lstats ls(ds);
  unheads_rows(jb.rows, jb.t, h, dh, static_cast<const float *>(jb.src), jb.dst, TDT(DT, dt_),
               jb.ld, ds, ls);
  ls.flush(ds);
}

/* the launch shape of heads_k / unheads_k: a block per HEADS_ILP rows, up
 * to 2^20 blocks */
unsigned heads_grid(int64_t rows) {
  const int64_t g = (rows + HEADS_ILP - 1) / HEADS_ILP;
  return (unsigned)(g < (1 << 20) ? (g > 0 ? g : 1) : (1 << 20));
}

/* heads_k / unheads_k on strm: the typed instantiations (cuda_common.cuh)
 * for the copies the attention layers make (16-bit or FP32 into their own
 * dtype, 16-bit widened into FP32), else the generic kernels */
void launch_heads(cudaStream_t strm, int64_t rows, int t, int h, int dh, const void *src, int sdt,
                  int64_t lds, void *dst, int ddt) {
  if (!(ampc_cu_typed() &&
        typed_pick(
            sdt, ddt, 0,
            [&](auto k) {
              using T = decltype(k);
              heads_k<T::a, T::b>
                  <<<heads_grid(rows), THREADS, 0, strm>>>(rows, t, h, dh, src, sdt, lds, dst, ddt);
            },
            dts<0, 0, 0>{}, dts<1, 1, 0>{}, dts<2, 2, 0>{}, dts<1, 0, 0>{}, dts<2, 0, 0>{})))
    heads_k<-1, -1>
        <<<heads_grid(rows), THREADS, 0, strm>>>(rows, t, h, dh, src, sdt, lds, dst, ddt);
}
void launch_unheads(cudaStream_t strm, int64_t rows, int t, int h, int dh, const float *src,
                    void *dst, int dt, int64_t ldd, dev_stats *ds) {
  if (!(ampc_cu_typed() && typed_pick(
                               dt, 0, 0,
                               [&](auto k) {
                                 using T = decltype(k);
                                 unheads_k<T::a><<<heads_grid(rows), THREADS, 0, strm>>>(
                                     rows, t, h, dh, src, dst, dt, ldd, ds);
                               },
                               dts<0, 0, 0>{}, dts<1, 0, 0>{}, dts<2, 0, 0>{})))
    unheads_k<-1><<<heads_grid(rows), THREADS, 0, strm>>>(rows, t, h, dh, src, dst, dt, ldd, ds);
}

/* the n jobs (1 to HEADS_JOBS) as one launch's argument, and its grid: a
 * row of blocks for the longest job, one row per job */
dim3 pack_jobs(const heads_job *jobs, int n, heads_jobs *js) {
  assert(n >= 1 && n <= HEADS_JOBS);
  *js = heads_jobs{};
  int64_t most = 0;
  for (int i = 0; i < n; i++) {
    js->j[i] = jobs[i];
    most = jobs[i].rows > most ? jobs[i].rows : most;
  }
  return dim3(heads_grid(most), (unsigned)n);
}

/* n (1 to HEADS_JOBS) head copies of one dtype pair: one heads_multi_k
 * launch in the typed set, else launch_heads for each */
void launch_heads_n(cudaStream_t strm, const heads_job *jobs, int n, int h, int dh, int sdt,
                    int ddt) {
  heads_jobs js;
  const dim3 grid = pack_jobs(jobs, n, &js);
  if (n > 1 && ampc_cu_typed() &&
      typed_pick(
          sdt, ddt, 0,
          [&](auto k) {
            using T = decltype(k);
            heads_multi_k<T::a, T::b><<<grid, THREADS, 0, strm>>>(js, h, dh, sdt, ddt);
          },
          dts<0, 0, 0>{}, dts<1, 1, 0>{}, dts<2, 2, 0>{}, dts<1, 0, 0>{}, dts<2, 0, 0>{}))
    return;
  for (int i = 0; i < n; i++)
    launch_heads(strm, jobs[i].rows, jobs[i].t, h, dh, jobs[i].src, sdt, jobs[i].ld, jobs[i].dst,
                 ddt);
}
/* the same for unheads: jobs' src FP32 [b, h, t, dh], dst rows in dt */
void launch_unheads_n(cudaStream_t strm, const heads_job *jobs, int n, int h, int dh, int dt,
                      dev_stats *ds) {
  heads_jobs js;
  const dim3 grid = pack_jobs(jobs, n, &js);
  if (n > 1 && ampc_cu_typed() &&
      typed_pick(
          dt, 0, 0,
          [&](auto k) {
            using T = decltype(k);
            unheads_multi_k<T::a><<<grid, THREADS, 0, strm>>>(js, h, dh, dt, ds);
          },
          dts<0, 0, 0>{}, dts<1, 0, 0>{}, dts<2, 0, 0>{}))
    return;
  for (int i = 0; i < n; i++)
    launch_unheads(strm, jobs[i].rows, jobs[i].t, h, dh, static_cast<const float *>(jobs[i].src),
                   jobs[i].dst, dt, jobs[i].ld, ds);
}

/* dst (dt) = round(src) over a batch of rows x cols matrices (leading
 * dimensions lds, ldd; batch strides ss, sd), counting; dst NULL: the
 * rounding only counted, not stored (the counting twin of a product cuBLASLt
 * rounds into C itself) */
__global__ void round_k(int64_t batch, int64_t rows, int64_t cols, const float *src, int64_t lds,
                        int64_t ss, void *dst, int dt, int64_t ldd, int64_t sd, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = rows * cols;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / per, i = (e % per) / cols, j = e % cols;
    const float v = src[bi * ss + i * lds + j];
    const uint32_t o = dst ? st(dst, dt, bi * sd + i * ldd + j, v) : rbits(v, dt);
    if (ds)
      ls.add(v, dt, o);
  }
  ls.flush(ds);
}

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

/* c (dt) = round(c + src) over a batch of rows x cols matrices (src in c's
 * layout): alpha A B + C with alpha = beta = 1 as the FP32 epilogue forms it
 * (one FP32 addition of the product to C widened), rounded once; in place
 * of widening C into the FP32 copy before the GEMM and rounding it after
 * (a pass over C and a launch fewer: the weight gradients that the
 * backward pass adds into 16-bit gradients) */
template <typename I> /* int64_t, or uint32_t where every index fits (faster division) */
__global__ void add_round_k(I batch, I rows, I cols, const float *src, void *c, int dt, I ldc,
                            I sc) {
  const I per = rows * cols;
  for (I e = blockIdx.x * blockDim.x + threadIdx.x; e < batch * per; e += gridDim.x * blockDim.x) {
    const I bi = e / per, r = e - bi * per, i = r / cols, j = r - i * cols;
    const I at = bi * sc + i * ldc + j;
    st(c, dt, at, ld(c, dt, at) + src[at]);
  }
}

/* count what a batch of rows x cols matrices in dt holds, as stored from
 * itself (an FP32 result is its own source; the rounding tally's view of a
 * product cuBLASLt wrote) */
__global__ void count_k(int64_t batch, int64_t rows, int64_t cols, const void *c, int dt,
                        int64_t ldc, int64_t sc, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = rows * cols;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / per, i = (e % per) / cols, j = e % cols, at = bi * sc + i * ldc + j;
    const uint32_t o =
        dt == DT_F32 ? static_cast<const uint32_t *>(c)[at] : static_cast<const uint16_t *>(c)[at];
    ls.add(ld(c, dt, at), dt, o);
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

/* binary16 rounding of a double (RNE, subnormals kept, overflow to inf) as
 * a double: gemm_portable.c's round_f16_f64, the same operations (scale the
 * binary16 ulp to 1, round with the 1.5 2^52 trick, scale back) */
__device__ __forceinline__ double round_f16_d(double x) {
  const unsigned long long u = (unsigned long long)__double_as_longlong(x);
  const unsigned long long ax = u & ~(1ull << 63);
  if (ax >= 0x7FF0000000000000ull) /* inf or NaN */
    return x;
  int e = (int)(ax >> 52) - 1023;
  if (e < -14)
    e = -14;
  if (e > 16)
    return x > 0 ? __longlong_as_double(0x7FF0000000000000ll)
                 : __longlong_as_double((long long)0xFFF0000000000000ull);
  const double s_up = __longlong_as_double((long long)(1023 + 10 - e) << 52);
  const double s_down = __longlong_as_double((long long)(1023 - 10 + e) << 52);
  const double q = x * s_up; /* |q| < 2^11: exact */
  const double r = __dsub_rn(__dadd_rn(q, 0x1.8p52), 0x1.8p52);
  const double v = copysign(r * s_down, x);
  if (fabs(v) > 65504.0)
    return x > 0 ? __longlong_as_double(0x7FF0000000000000ll)
                 : __longlong_as_double((long long)0xFFF0000000000000ull);
  return v;
}

/* The FP16-accumulation ablation as the CPU defines it (gemm.c's
 * gemm_acc16): per element of C, s <- fp16(fma(a, b, s)) for p = 0..k-1 in
 * order from +0 (operands widened exactly to double), then the FP32
 * epilogue alpha s + beta C rounded once into C, counted. op(A)[i][p] =
 * a[i rsa + p csa], op(B)[p][j] = b[p rsb + j csb]. One thread per element:
 * slow, for the ablation's operand mixes that COMPUTE_16F cannot take, and
 * for all of them with AMPC_CUDA_ACC16=exact. */
__global__ void acc16_k(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                        int adt, int64_t rsa, int64_t csa, int64_t sa, const void *b, int bdt,
                        int64_t rsb, int64_t csb, int64_t sb, float beta, void *c, int cdt,
                        int64_t ldc, int64_t sc, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = m * n;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / per, i = (e % per) / n, j = e % n;
    const int64_t a0 = t * sa + i * rsa, b0 = t * sb + j * csb;
    double s = 0.0;
    for (int64_t p = 0; p < k; p++)
      s = round_f16_d(fma((double)ld(a, adt, a0 + p * csa), (double)ld(b, bdt, b0 + p * rsb), s));
    const int64_t at = t * sc + i * ldc + j;
    float v = alpha * (float)s;
    if (beta != 0.0f)
      v += beta * ld(c, cdt, at);
    cst(c, cdt, at, v, ls, ds);
  }
  ls.flush(ds);
}

/* C (cdt, counted) = alpha s + beta C in FP32, one rounding: the epilogue
 * of an FP16-accumulated product s (F16, ldc n, batch stride m n) */
__global__ void acc16_epi_k(int64_t batch, int64_t m, int64_t n, const __half *s, float alpha,
                            float beta, void *c, int cdt, int64_t ldc, int64_t sc, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = m * n;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / per, i = (e % per) / n, j = e % n, at = t * sc + i * ldc + j;
    float v = alpha * __half2float(s[e]);
    if (beta != 0.0f)
      v += beta * ld(c, cdt, at);
    cst(c, cdt, at, v, ls, ds);
  }
  ls.flush(ds);
}

/* 1: every FP16-accumulated product on acc16_k (the CPU's bits); 0: F16 x
 * F16 products on cuBLASLt's COMPUTE_16F; -1: not yet set, AMPC_CUDA_ACC16
 * ("exact") decides at the first use */
std::atomic<int> g_acc16_exact{-1};
bool acc16_exact(void) {
  int v = g_acc16_exact.load(std::memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("AMPC_CUDA_ACC16");
    v = e && strcmp(e, "exact") == 0;
    int unset = -1; /* a setter's value wins */
    if (!g_acc16_exact.compare_exchange_strong(unset, v))
      v = g_acc16_exact.load(std::memory_order_relaxed);
  }
  return v != 0;
}

/* elements spanned by a strided batch of rows x cols matrices */
int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* n FP32 elements rounded up to 256 bytes: the next buffer carved after
 * them in one scratch slot starts aligned for cuBLASLt's vector loads */
int64_t pad_f32(int64_t n) { return (n + 63) & ~(int64_t)63; }

/* count C (a batch of m x n matrices, ldc, stride sc) as it is stored: an
 * FP32 product is its own source (the tally's view of cuBLASLt's output) */
ampc_status count_c(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, int64_t batch, int64_t m,
                    int64_t n, const void *c, ampc_dtype dt, int64_t ldc, int64_t sc) {
  STATS_BEGIN(NULL);
  count_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, c, dt, ldc, sc, dst);
  FINISH(fn, NULL);
}

/* FP32 scratch over the span of a 16-bit C (slot SLOT_C), holding C widened
 * when beta reads it */
ampc_status widen_c(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, int64_t batch, int64_t m,
                    int64_t n, const void *c, ampc_dtype dt, int64_t ldc, int64_t sc, float beta,
                    float **w) {
  const int64_t sp = span(m, n, ldc, sc, batch);
  void *p = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_C, (size_t)sp * sizeof(float), &p));
  *w = static_cast<float *>(p);
  if (beta != 0.0f)
    widen_k<<<grid_for(sp), THREADS, 0, strm>>>(sp, c, dt, *w);
  return ampc_cu_launched(fn);
}

bool direct_ok(ampc_dtype a, ampc_dtype b, ampc_dtype c) {
  if (a != b)
    return false;
  if (a == AMPC_F32)
    return c == AMPC_F32;
  return c == a || c == AMPC_F32; /* F16 -> F16/F32, BF16 -> BF16/F32 */
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

void ampc_cuda_set_acc16_exact(bool exact) { g_acc16_exact.store(exact ? 1 : 0); }

ampc_status ampc_cuda_gemm_strided_batched(ampc_op opa, ampc_op opb, int64_t m, int64_t n,
                                           int64_t k, float alpha, const void *a, ampc_dtype a_dt,
                                           int64_t lda, int64_t stride_a, const void *b,
                                           ampc_dtype b_dt, int64_t ldb, int64_t stride_b,
                                           float beta, void *c, ampc_dtype c_dt, int64_t ldc,
                                           int64_t stride_c, int64_t batch, ampc_acc acc) {
  const char *fn = "ampc_cuda_gemm_strided_batched";
  CU_CHECK_DT(fn, a_dt);
  CU_CHECK_DT(fn, b_dt);
  CU_CHECK_DT(fn, c_dt);
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: negative size", fn);
  CU_BEGIN(fn);
  if (m == 0 || n == 0 || batch == 0)
    return AMPC_OK;
  ampc_cuda_gemm_args g = ampc_cuda_gemm_args_default();
  g.opa = opa, g.opb = opb, g.m = m, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
  g.a = a, g.a_dt = a_dt, g.lda = lda, g.stride_a = stride_a;
  g.b = b, g.b_dt = b_dt, g.ldb = ldb, g.stride_b = stride_b;
  g.c = c, g.c_dt = c_dt, g.ldc = ldc, g.stride_c = stride_c, g.batch = batch;
  /* With a rounding tally bound, C is counted as the CPU's GEMM epilogue
   * counts it (m n per matrix), and the product is the one an unsampled step
   * makes (the telemetry does not change the run): an FP32 C is counted after
   * the product; a 16-bit C that cuBLASLt rounds itself is counted from a
   * second, FP32 product of the same operands (its rounding computed, not
   * stored: the counts describe sums within the GEMM bound of cuBLASLt's) */
  const bool counting = ampc_cu_tally_on();
  if (acc == AMPC_ACC_F16) {
    const bool none = alpha == 0.0f || k == 0; /* as the CPU: A B not read */
    if (!none && !acc16_exact() && a_dt == AMPC_F16 && b_dt == AMPC_F16) {
      g.compute = AMPC_CUDA_COMPUTE_16F;
      if (c_dt == AMPC_F16) { /* straight into C: alpha and beta in binary16 */
        AMPC_TRY(ampc_cuda_gemm(ctx, &g));
        /* the FP16 sums are the stored values: counted as they are */
        return counting ? count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c) : AMPC_OK;
      }
      /* an F32 or BF16 C: the FP16 sums into F16 scratch, then the CPU's
       * FP32 epilogue (alpha s + beta C, one rounding) */
      void *s16 = NULL;
      AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_C, (size_t)(batch * m * n) * 2, &s16));
      g.alpha = 1.0f, g.beta = 0.0f;
      g.c = s16, g.c_dt = AMPC_F16, g.ldc = n, g.stride_c = m * n;
      AMPC_TRY(ampc_cuda_gemm(ctx, &g));
      STATS_BEGIN(NULL);
      acc16_epi_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(
          batch, m, n, static_cast<const __half *>(s16), alpha, beta, c, c_dt, ldc, stride_c, dst);
      FINISH(fn, NULL);
    }
    /* any other operands (an FP32 dS, BF16), or AMPC_CUDA_ACC16=exact: the
     * CPU's definition, element by element */
    STATS_BEGIN(NULL);
    acc16_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(
        batch, m, n, none ? 0 : k, none ? 0.0f : alpha, a, a_dt, opa == AMPC_OP_N ? lda : 1,
        opa == AMPC_OP_N ? 1 : lda, stride_a, b, b_dt, opb == AMPC_OP_N ? ldb : 1,
        opb == AMPC_OP_N ? 1 : ldb, stride_b, beta, c, c_dt, ldc, stride_c, dst);
    FINISH(fn, NULL);
  }
  const bool direct = direct_ok(a_dt, b_dt, c_dt);
  if (direct) {
    g.compute = a_dt == AMPC_F32 ? AMPC_CUDA_COMPUTE_32F_PEDANTIC : AMPC_CUDA_COMPUTE_32F;
    /* A 16-bit C that beta reads: cuBLASLt's epilogue rounds alpha A B to
     * C's dtype before it adds beta C (seen on an H200, cuBLASLt 13.1: two
     * roundings, up to 1.5 ulps), so the sum is formed in FP32 scratch and
     * rounded once, as the CPU's epilogue does */
    const bool wide = c_dt != AMPC_F32 && beta != 0.0f;
    if (!counting && !wide)
      return ampc_cuda_gemm(ctx, &g);
    if (c_dt == AMPC_F32) {
      AMPC_TRY(ampc_cuda_gemm(ctx, &g));
      return count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c);
    }
    if (!counting && alpha == 1.0f && beta == 1.0f) { /* C += A B, uncounted */
      float *w = NULL;
      AMPC_TRY(widen_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c, 0.0f, &w));
      ampc_cuda_gemm_args t = g;
      t.c = w, t.c_dt = AMPC_F32, t.beta = 0.0f;
      AMPC_TRY(ampc_cuda_gemm(ctx, &t));
      const int64_t last = (batch - 1) * stride_c + (m - 1) * ldc + n; /* C's span */
      if (batch * m * n < ((int64_t)1 << 31) && last < ((int64_t)1 << 31))
        add_round_k<uint32_t><<<grid_for(batch * m * n), THREADS, 0, strm>>>(
            (uint32_t)batch, (uint32_t)m, (uint32_t)n, w, c, c_dt, (uint32_t)ldc,
            (uint32_t)stride_c);
      else
        add_round_k<int64_t>
            <<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, w, c, c_dt, ldc, stride_c);
      return ampc_cu_launched(fn);
    }
    /* the FP32 product first (with beta it reads C before anything writes
     * it); without beta, cuBLASLt's own 16-bit C beside it (one rounding
     * too) and the FP32 one only counted */
    float *w = NULL;
    AMPC_TRY(widen_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c, beta, &w));
    ampc_cuda_gemm_args t = g;
    t.c = w, t.c_dt = AMPC_F32;
    AMPC_TRY(ampc_cuda_gemm(ctx, &t));
    if (!wide)
      AMPC_TRY(ampc_cuda_gemm(ctx, &g));
    STATS_BEGIN(NULL);
    round_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, w, ldc, stride_c,
                                                           wide ? c : NULL, c_dt, wide ? ldc : 0,
                                                           wide ? stride_c : 0, dst);
    FINISH(fn, NULL);
  }
  /* mixed: widen to FP32 (exact), FP32 GEMM, one rounding into C */
  const int64_t ar = opa == AMPC_OP_N ? m : k, ac = opa == AMPC_OP_N ? k : m;
  const int64_t br = opb == AMPC_OP_N ? k : n, bc = opb == AMPC_OP_N ? n : k;
  if (k > 0 && a_dt != AMPC_F32) {
    const int64_t sp = span(ar, ac, lda, stride_a, batch);
    void *w = NULL;
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_A, (size_t)sp * sizeof(float), &w));
    widen_k<<<grid_for(sp), THREADS, 0, strm>>>(sp, a, a_dt, static_cast<float *>(w));
    g.a = w, g.a_dt = AMPC_F32;
  }
  if (k > 0 && b_dt != AMPC_F32) {
    const int64_t sp = span(br, bc, ldb, stride_b, batch);
    void *w = NULL;
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_B, (size_t)sp * sizeof(float), &w));
    widen_k<<<grid_for(sp), THREADS, 0, strm>>>(sp, b, b_dt, static_cast<float *>(w));
    g.b = w, g.b_dt = AMPC_F32;
  }
  g.compute = AMPC_CUDA_COMPUTE_32F_PEDANTIC;
  if (c_dt == AMPC_F32) {
    AMPC_TRY(ampc_cu_launched(fn));
    AMPC_TRY(ampc_cuda_gemm(ctx, &g));
    return counting ? count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c) : AMPC_OK;
  }
  /* a 16-bit C: its span widened when beta reads it, the FP32 result
   * rounded back into the matrices (elements between them are not touched) */
  float *w = NULL;
  AMPC_TRY(widen_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c, beta, &w));
  g.c = w, g.c_dt = AMPC_F32;
  AMPC_TRY(ampc_cuda_gemm(ctx, &g));
  STATS_BEGIN(NULL);
  round_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, w, ldc, stride_c, c, c_dt,
                                                         ldc, stride_c, dst);
  FINISH(fn, NULL);
}

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

/* The head-major scratch of S = scale q k^T (attn_fwd_hm and
 * ampc_cuda_attention_probs, so that a recomputation's operands sit at the
 * forward's offsets: the same cuBLASLt alignment class, the same plan), in
 * floats from the slot's base: qh at 0, kh at *o_k (xdt), the end at *end */
static void qk_scratch(int64_t nq, int64_t nk, ampc_dtype xdt, int64_t *o_k, int64_t *end) {
  const int64_t xs = (int64_t)ampc_dtype_size(xdt);
  *o_k = pad_f32((xs * nq + 3) / 4);
  *end = *o_k + pad_f32((xs * nk + 3) / 4);
}

/* S = scale q k^T and P = softmax(S) on the head-major path: q and k
 * copied head-major into qh, kh (xdt, scratch the caller owns), one strided
 * batched GEMM over the b * h heads, the softmax. attn_fwd_hm and
 * ampc_cuda_attention_probs both run it, so a recomputation has the
 * forward's bits (the same kernels on the same operands). */
static ampc_status scores_probs_hm(const char *fn, cudaStream_t strm, int64_t b, int64_t tq,
                                   int64_t tk, int64_t h, int64_t dh, const void *q, int64_t ldq,
                                   const void *k, int64_t ldk, ampc_dtype xdt,
                                   const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                   void *probs, ampc_dtype pdt, ampc_acc acc, void *qh, void *kh) {
  const float scale = (float)(1.0 / sqrt((double)dh));
  const heads_job jq[2] = {{q, qh, b * tq, ldq, (int)tq}, {k, kh, b * tk, ldk, (int)tk}};
  launch_heads_n(strm, jq, 2, (int)h, (int)dh, xdt, xdt);
  AMPC_TRY(ampc_cu_launched(fn));
  AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, scale, qh, xdt, dh,
                                          tq * dh, kh, xdt, dh, tk * dh, 0.0f, scores, sdt, tk,
                                          tq * tk, b * h, acc));
  return ampc_cuda_softmax_forward(b * h * tq, tk, scores, sdt, 1.0f, key_mask, h * tq, probs, pdt,
                                   NULL);
}

/* the same on the per-head path (FP16 accumulation, sizes over 2^31): one
 * strided batched GEMM per head, batched over the samples */
static ampc_status scores_probs_heads(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                      const void *q, int64_t ldq, const void *k, int64_t ldk,
                                      ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                                      ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_acc acc) {
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk;
  const size_t xs = ampc_dtype_size(xdt), es = ampc_dtype_size(sdt);
  for (int64_t hi = 0; hi < h; hi++)
    AMPC_TRY(ampc_cuda_gemm_strided_batched(
        AMPC_OP_N, AMPC_OP_T, tq, tk, dh, scale, (const char *)q + hi * dh * xs, xdt, ldq, tq * ldq,
        (const char *)k + hi * dh * xs, xdt, ldk, tk * ldk, 0.0f, (char *)scores + hi * ss * es,
        sdt, tk, h * ss, b, acc));
  return ampc_cuda_softmax_forward(b * h * tq, tk, scores, sdt, 1.0f, key_mask, h * tq, probs, pdt,
                                   NULL);
}

static bool head_major(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh, ampc_acc acc) {
  return acc != AMPC_ACC_F16 && tq <= INT32_MAX && tk <= INT32_MAX && h * dh <= INT32_MAX &&
         b * h <= INT32_MAX;
}

/* The attention core with FP32 sums (everything but the FP16-accumulation
 * ablation): q, k, v (and dout) copied head-major (heads_k) into scratch,
 * so that each product is one strided batched GEMM over the b * h heads
 * (the scores' and probabilities' [b, h, tq, tk] layout is head-major
 * already), not one call per head: on an H200 a 16-mixed mm-base step made
 * 1,316 GEMM calls, most of them these small per-head products, and spent
 * more time in them than in the model's large GEMMs. Each product's values
 * are those of the per-head calls: the same operands (copied exactly,
 * 16-bit ones against FP32 widened exactly), FP32 sums, and one rounding
 * of an FP32 result into out, dq, dk, dv (unheads_k, counted there). */
static ampc_status attn_fwd_hm(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, int64_t b,
                               int64_t tq, int64_t tk, int64_t h, int64_t dh, const void *q,
                               int64_t ldq, const void *k, int64_t ldk, const void *v, int64_t ldv,
                               ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                               ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_dtype mdt,
                               void *out, int64_t ldo, ampc_dtype odt, ampc_acc acc,
                               ampc_round_stats *stats) {
  const int64_t ss = tq * tk, dm = h * dh, nq = b * tq * dm, nk = b * tk * dm;
  /* the P of the product: an FP32 P rounded to mdt (16-bit) into slot
   * SLOT_PM when mdt asks, else probs as stored */
  const bool cast = mdt != AMPC_F32 && pdt == AMPC_F32;
  const ampc_dtype ppdt = cast ? mdt : pdt;
  /* P v: FP32 probabilities against v widened to FP32 (exact), 16-bit ones
   * against v as it is */
  const ampc_dtype vdt = ppdt == AMPC_F32 ? AMPC_F32 : xdt;
  const size_t vs = ampc_dtype_size(vdt);
  /* in floats from the slot's base: qh, kh (xdt) as qk_scratch lays them
   * out; vh (vdt); o32 [b, h, tq, dh] */
  int64_t o_k = 0, o_v = 0;
  qk_scratch(nq, nk, xdt, &o_k, &o_v);
  const int64_t o_o = o_v + pad_f32(((int64_t)vs * nk + 3) / 4), nf = o_o + nq;
  void *sp = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)nf * sizeof(float), &sp));
  float *const base = static_cast<float *>(sp), *const o32 = base + o_o;
  void *const qh = base, *const kh = base + o_k, *const vh = base + o_v;
  AMPC_TRY(scores_probs_hm(fn, strm, b, tq, tk, h, dh, q, ldq, k, ldk, xdt, key_mask, scores, sdt,
                           probs, pdt, acc, qh, kh));
  launch_heads(strm, b * tk, (int)tk, (int)h, (int)dh, v, xdt, ldv, vh, vdt);
  AMPC_TRY(ampc_cu_launched(fn));
  const void *pp = probs;
  if (cast) { /* a counted store, as the CPU's */
    void *pm = NULL;
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_PM, (size_t)(b * h * ss) * ampc_dtype_size(mdt), &pm));
    AMPC_TRY(ampc_cuda_store_f32(pm, mdt, static_cast<const float *>(probs), (size_t)(b * h * ss),
                                 NULL));
    pp = pm;
  }
  /* the FP32 product is the model's store with stats only (the CPU's
   * telemetry path forms it in an FP32 buffer too, and a bound tally counts
   * it there); without, it is counted when rounded into out */
  ampc_tally *const was = stats ? NULL : ampc_tally_bind(NULL);
  const ampc_status st = ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, tq, dh, tk, 1.0f, pp,
                                                        ppdt, tk, ss, vh, vdt, dh, tk * dh, 0.0f,
                                                        o32, AMPC_F32, dh, tq * dh, b * h, acc);
  if (!stats)
    (void)ampc_tally_bind(was);
  AMPC_TRY(st);
  dev_stats *dstats = NULL;
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, stats, &dstats));
  launch_unheads(strm, b * tq, (int)tq, (int)h, (int)dh, o32, out, odt, ldo, dstats);
  AMPC_TRY(ampc_cu_launched(fn));
  return ampc_cu_stats_end(strm, dstats, stats);
}

static ampc_status attn_bwd_hm(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, int64_t b,
                               int64_t tq, int64_t tk, int64_t h, int64_t dh, const void *q,
                               int64_t ldq, const void *k, int64_t ldk, const void *v, int64_t ldv,
                               ampc_dtype xdt, const void *probs, ampc_dtype pdt, ampc_dtype mdt,
                               const void *dout, int64_t lddo, ampc_dtype gdt, void *dq,
                               int64_t lddq, void *dk, int64_t lddk, void *dv, int64_t lddv,
                               ampc_acc acc) {
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk, dm = h * dh, nq = b * tq * dm, nk = b * tk * dm, nsc = b * h * ss;
  /* mdt 16-bit: dS rounded to mdt (counted) against 16-bit q and k, and an
   * FP32 P rounded to mdt again (the forward counted it) for dv; both in
   * dP's place once the softmax backward pass has read dP */
  const bool cast_ds = mdt != AMPC_F32, cast_p = cast_ds && pdt == AMPC_F32;
  const ampc_dtype ppdt = cast_p ? mdt : pdt, qkdt = cast_ds ? xdt : AMPC_F32;
  /* dv = P^T dout: an FP32 P against dout widened to FP32, a 16-bit P
   * against dout as it is */
  const ampc_dtype dodt = ppdt == AMPC_F32 ? AMPC_F32 : gdt;
  const size_t xs = ampc_dtype_size(xdt), gs = ampc_dtype_size(gdt);
  /* FP32 slots: dP, dS [b, h, tq, tk]; dq32, q32 [b, h, tq, dh]; dk32,
   * dv32, k32 [b, h, tk, dh]; doh (gdt) [b, h, tq, dh]; vh (xdt) [b, h, tk,
   * dh]; do32 [b, h, tq, dh] when dodt differs from gdt. q32 and k32 hold
   * the head copies of q and k in qkdt (FP32, or xdt against a 16-bit dS) */
  const int64_t o_ds = pad_f32(nsc), o_dq = o_ds + pad_f32(nsc), o_dk = o_dq + pad_f32(nq),
                o_dv = o_dk + pad_f32(nk), o_q = o_dv + pad_f32(nk), o_k = o_q + pad_f32(nq),
                o_do = o_k + pad_f32(nk), o_vh = o_do + pad_f32(((int64_t)gs * nq + 3) / 4),
                o_d32 = o_vh + pad_f32(((int64_t)xs * nk + 3) / 4),
                nf = o_d32 + (dodt != gdt ? nq : 0);
  void *sp = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)nf * sizeof(float), &sp));
  float *const f = static_cast<float *>(sp);
  float *const dp = f, *const dsm = f + o_ds, *const dq32 = f + o_dq, *const dk32 = f + o_dk,
               *const dv32 = f + o_dv, *const q32 = f + o_q, *const k32 = f + o_k;
  void *const doh = f + o_do, *const vh = f + o_vh;
  const void *dop = dodt != gdt ? static_cast<const void *>(f + o_d32) : doh;
  const heads_job jd[2] = {{dout, doh, b * tq, lddo, (int)tq}, {v, vh, b * tk, ldv, (int)tk}};
  if (gdt == xdt) { /* one launch */
    launch_heads_n(strm, jd, 2, (int)h, (int)dh, gdt, gdt);
  } else {
    launch_heads_n(strm, jd, 1, (int)h, (int)dh, gdt, gdt);
    launch_heads_n(strm, jd + 1, 1, (int)h, (int)dh, xdt, xdt);
  }
  AMPC_TRY(ampc_cu_launched(fn));
  /* dP = dout v^T (FP32) */
  AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, 1.0f, doh, gdt, dh,
                                          tq * dh, vh, xdt, dh, tk * dh, 0.0f, dp, AMPC_F32, tk, ss,
                                          b * h, acc));
  /* dS = softmax backward, FP32 */
  AMPC_TRY(ampc_cuda_softmax_backward(b * h * tq, tk, dp, AMPC_F32, probs, pdt, 1.0f, dsm));
  const void *dsp = dsm, *pp = probs;
  const ampc_dtype dsdt = cast_ds ? mdt : AMPC_F32;
  if (cast_ds) {
    AMPC_TRY(ampc_cuda_store_f32(dp, mdt, dsm, (size_t)nsc, NULL));
    dsp = dp;
  }
  if (cast_p) {
    void *p16 = reinterpret_cast<char *>(dp) + (size_t)nsc * ampc_dtype_size(mdt);
    AMPC_TRY(ampc_cuda_convert(p16, mdt, probs, AMPC_F32, (size_t)nsc));
    pp = p16;
  }
  /* dS against q and k widened to FP32 (exact), or a 16-bit dS against
   * them as they are */
  {
    const heads_job jk[3] = {{q, q32, b * tq, ldq, (int)tq},
                             {k, k32, b * tk, ldk, (int)tk},
                             {dout, f + o_d32, b * tq, lddo, (int)tq}};
    /* dout widened to FP32 (dodt != gdt) with them where the dtypes agree
     * (16-mixed and bf16-mixed without the cast: all three widened) */
    const bool wd = dodt != gdt, with = wd && gdt == xdt && qkdt == AMPC_F32;
    launch_heads_n(strm, jk, with ? 3 : 2, (int)h, (int)dh, xdt, qkdt);
    if (wd && !with)
      launch_heads_n(strm, jk + 2, 1, (int)h, (int)dh, gdt, AMPC_F32);
  }
  AMPC_TRY(ampc_cu_launched(fn));
  /* dq = scale dS k; dk = scale dS^T q; dv = P^T dout: FP32, then one
   * rounding each (counted there) */
  ampc_tally *const was = ampc_tally_bind(NULL);
  ampc_status st = ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, tq, dh, tk, scale, dsp,
                                                  dsdt, tk, ss, k32, qkdt, dh, tk * dh, 0.0f, dq32,
                                                  AMPC_F32, dh, tq * dh, b * h, acc);
  if (st == AMPC_OK)
    st = ampc_cuda_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, scale, dsp, dsdt, tk, ss,
                                        q32, qkdt, dh, tq * dh, 0.0f, dk32, AMPC_F32, dh, tk * dh,
                                        b * h, acc);
  if (st == AMPC_OK)
    st = ampc_cuda_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, 1.0f, pp, ppdt, tk, ss,
                                        dop, dodt, dh, tq * dh, 0.0f, dv32, AMPC_F32, dh, tk * dh,
                                        b * h, acc);
  (void)ampc_tally_bind(was);
  AMPC_TRY(st);
  STATS_BEGIN(NULL);
  const heads_job ju[3] = {{dq32, dq, b * tq, lddq, (int)tq},
                           {dk32, dk, b * tk, lddk, (int)tk},
                           {dv32, dv, b * tk, lddv, (int)tk}};
  launch_unheads_n(strm, ju, 3, (int)h, (int)dh, gdt, dst);
  FINISH(fn, NULL);
}

/* The attention core. FP32 sums: attn_fwd_hm / attn_bwd_hm above. FP16
 * accumulation (the ablation, whose kernels differ by operand mix): one
 * strided batched GEMM per head, batched over the samples (a head's q block
 * of sample i is q + i tq ldq + head dh; its scores are at (i h + head) tq
 * tk); the mixed-operand branches below are those of FP32 sums before the
 * head-major path, kept for sizes over 2^31 (never in practice). */
ampc_status ampc_cuda_attention_forward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                        const void *q, int64_t ldq, const void *k, int64_t ldk,
                                        const void *v, int64_t ldv, ampc_dtype xdt,
                                        const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                        void *probs, ampc_dtype pdt, void *out, int64_t ldo,
                                        ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats) {
  return ampc_cuda_attention_forward_ex(b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, key_mask,
                                        scores, sdt, probs, pdt, AMPC_F32, out, ldo, odt, acc,
                                        stats);
}

/* mdt F32, F16 or BF16; a rounding to it (used) is not on the per-head
 * path (FP16 sums) */
static ampc_status mdt_check(const char *fn, ampc_dtype mdt, bool used, bool hm) {
  if (mdt != AMPC_F32 && mdt != AMPC_F16 && mdt != AMPC_BF16)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: mdt must be F32, F16 or BF16 (got %d)", fn,
                     (int)mdt);
  if (used && mdt != AMPC_F32 && !hm)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "%s: 16-bit attention products (mdt) need FP32 sums on the GPU (not "
                     "16-true or --accumulate fp16)",
                     fn);
  return AMPC_OK;
}

ampc_status ampc_cuda_attention_forward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                           const void *q, int64_t ldq, const void *k, int64_t ldk,
                                           const void *v, int64_t ldv, ampc_dtype xdt,
                                           const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                           void *probs, ampc_dtype pdt, ampc_dtype mdt, void *out,
                                           int64_t ldo, ampc_dtype odt, ampc_acc acc,
                                           ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_attention_forward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, tq);
  CU_CHECK_POS(fn, tk);
  CU_CHECK_POS(fn, h);
  CU_CHECK_POS(fn, dh);
  if (ldq < h * dh || ldk < h * dh || ldv < h * dh || ldo < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldq/ldk/ldv/ldo must be >= h*dh = %lld", fn,
                     (long long)(h * dh));
  CU_CHECK_PTR(fn, q);
  CU_CHECK_PTR(fn, k);
  CU_CHECK_PTR(fn, v);
  CU_CHECK_PTR(fn, scores);
  CU_CHECK_PTR(fn, probs);
  CU_CHECK_PTR(fn, out);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, sdt);
  CU_CHECK_DT(fn, pdt);
  CU_CHECK_DT(fn, odt);
  AMPC_TRY(mdt_check(fn, mdt, pdt == AMPC_F32, head_major(b, tq, tk, h, dh, acc)));
  CU_BEGIN(fn);
  if (head_major(b, tq, tk, h, dh, acc))
    return attn_fwd_hm(fn, ctx, strm, b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, key_mask,
                       scores, sdt, probs, pdt, mdt, out, ldo, odt, acc, stats);
  const int64_t ss = tq * tk;
  const size_t ps = ampc_dtype_size(pdt);
  AMPC_TRY(scores_probs_heads(b, tq, tk, h, dh, q, ldq, k, ldk, xdt, key_mask, scores, sdt, probs,
                              pdt, acc));
  /* out = P v, heads side by side. FP32 probabilities against 16-bit
   * values with FP32 sums (a mixed product: the values widened, exactly,
   * for FP32 GEMMs): v widened once for all heads (the per-head GEMM call
   * would widen its span once per head), and a 16-bit out written through
   * an FP32 copy rounded once (counted there, as the CPU's GEMM counts its
   * stores); with stats always through an FP32 copy. FP16 accumulation:
   * the per-head calls as they are. */
  const int64_t dm = h * dh;
  const bool pv_mixed = pdt == AMPC_F32 && xdt != AMPC_F32 && acc == AMPC_ACC_F32;
  const bool via32 = stats || (pv_mixed && odt != AMPC_F32);
  const int64_t n_out = via32 ? pad_f32(b * tq * dm) : 0, n_v = pv_mixed ? b * tk * dm : 0;
  float *f32 = NULL;
  if (via32 || pv_mixed) {
    void *p = NULL;
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)(n_out + n_v) * sizeof(float), &p));
    f32 = static_cast<float *>(p);
  }
  const void *vop = v;
  ampc_dtype vdt = xdt;
  int64_t ldvo = ldv;
  if (pv_mixed) { /* v32 [b*tk, dm] */
    widen_rows_k<<<grid_for(n_v), THREADS, 0, strm>>>(b * tk, dm, v, xdt, ldv, f32 + n_out);
    AMPC_TRY(ampc_cu_launched(fn));
    vop = f32 + n_out, vdt = AMPC_F32, ldvo = dm;
  }
  void *dst = via32 ? static_cast<void *>(f32) : out;
  const ampc_dtype ddt = via32 ? AMPC_F32 : odt;
  const int64_t ldd = via32 ? dm : ldo;
  const size_t ds = ampc_dtype_size(ddt), vs = ampc_dtype_size(vdt);
  /* without stats the FP32 copy is not the model's store: counted when rounded */
  ampc_tally *const was = via32 && !stats ? ampc_tally_bind(NULL) : NULL;
  ampc_status st = AMPC_OK;
  for (int64_t hi = 0; hi < h && st == AMPC_OK; hi++)
    st = ampc_cuda_gemm_strided_batched(
        AMPC_OP_N, AMPC_OP_N, tq, dh, tk, 1.0f, (const char *)probs + hi * ss * ps, pdt, tk, h * ss,
        (const char *)vop + hi * dh * vs, vdt, ldvo, tk * ldvo, 0.0f, (char *)dst + hi * dh * ds,
        ddt, ldd, tq * ldd, b, acc);
  if (via32 && !stats)
    (void)ampc_tally_bind(was);
  AMPC_TRY(st);
  if (!via32)
    return AMPC_OK;
  dev_stats *dstats = NULL;
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, stats, &dstats));
  round_k<<<grid_for(b * tq * dm), THREADS, 0, strm>>>(
      1, b * tq, dm, static_cast<const float *>(dst), ldd, 0, out, odt, ldo, 0, dstats);
  AMPC_TRY(ampc_cu_launched(fn));
  return ampc_cu_stats_end(strm, dstats, stats);
}

ampc_status ampc_cuda_attention_probs(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                      const void *q, int64_t ldq, const void *k, int64_t ldk,
                                      ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                                      ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_acc acc) {
  const char *fn = "ampc_cuda_attention_probs";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, tq);
  CU_CHECK_POS(fn, tk);
  CU_CHECK_POS(fn, h);
  CU_CHECK_POS(fn, dh);
  if (ldq < h * dh || ldk < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldq/ldk must be >= h*dh = %lld", fn,
                     (long long)(h * dh));
  CU_CHECK_PTR(fn, q);
  CU_CHECK_PTR(fn, k);
  CU_CHECK_PTR(fn, scores);
  CU_CHECK_PTR(fn, probs);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, sdt);
  CU_CHECK_DT(fn, pdt);
  CU_BEGIN(fn);
  ampc_tally *const was = ampc_tally_bind(NULL); /* counted once, by the forward pass */
  ampc_status st = AMPC_OK;
  if (head_major(b, tq, tk, h, dh, acc)) { /* qh, kh as attn_fwd_hm lays them out */
    const int64_t dm = h * dh, nq = b * tq * dm, nk = b * tk * dm;
    int64_t o_k = 0, nf = 0;
    qk_scratch(nq, nk, xdt, &o_k, &nf);
    void *sp = NULL;
    st = ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)nf * sizeof(float), &sp);
    if (st == AMPC_OK)
      st = scores_probs_hm(fn, strm, b, tq, tk, h, dh, q, ldq, k, ldk, xdt, key_mask, scores, sdt,
                           probs, pdt, acc, sp, static_cast<float *>(sp) + o_k);
  } else { /* FP16 sums: the forward's kernels as long as ampc_cuda_set_acc16_exact is not
            * switched between the forward and backward passes (the model never does) */
    st = scores_probs_heads(b, tq, tk, h, dh, q, ldq, k, ldk, xdt, key_mask, scores, sdt, probs,
                            pdt, acc);
  }
  (void)ampc_tally_bind(was);
  return st;
}

ampc_status ampc_cuda_attention_backward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                         const void *q, int64_t ldq, const void *k, int64_t ldk,
                                         const void *v, int64_t ldv, ampc_dtype xdt,
                                         const void *probs, ampc_dtype pdt, const void *dout,
                                         int64_t lddo, ampc_dtype gdt, void *dq, int64_t lddq,
                                         void *dk, int64_t lddk, void *dv, int64_t lddv,
                                         ampc_acc acc, ampc_scratch *ws) {
  return ampc_cuda_attention_backward_ex(b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, probs, pdt,
                                         AMPC_F32, dout, lddo, gdt, dq, lddq, dk, lddk, dv, lddv,
                                         acc, ws);
}

ampc_status ampc_cuda_attention_backward_ex(
    int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh, const void *q, int64_t ldq,
    const void *k, int64_t ldk, const void *v, int64_t ldv, ampc_dtype xdt, const void *probs,
    ampc_dtype pdt, ampc_dtype mdt, const void *dout, int64_t lddo, ampc_dtype gdt, void *dq,
    int64_t lddq, void *dk, int64_t lddk, void *dv, int64_t lddv, ampc_acc acc, ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_attention_backward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, tq);
  CU_CHECK_POS(fn, tk);
  CU_CHECK_POS(fn, h);
  CU_CHECK_POS(fn, dh);
  if (ldq < h * dh || ldk < h * dh || ldv < h * dh || lddo < h * dh || lddq < h * dh ||
      lddk < h * dh || lddv < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: leading dimensions must be >= h*dh = %lld", fn,
                     (long long)(h * dh));
  CU_CHECK_PTR(fn, q);
  CU_CHECK_PTR(fn, k);
  CU_CHECK_PTR(fn, v);
  CU_CHECK_PTR(fn, probs);
  CU_CHECK_PTR(fn, dout);
  CU_CHECK_PTR(fn, dq);
  CU_CHECK_PTR(fn, dk);
  CU_CHECK_PTR(fn, dv);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, pdt);
  CU_CHECK_DT(fn, gdt);
  AMPC_TRY(mdt_check(fn, mdt, true, head_major(b, tq, tk, h, dh, acc)));
  CU_BEGIN(fn);
  if (head_major(b, tq, tk, h, dh, acc))
    return attn_bwd_hm(fn, ctx, strm, b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, probs, pdt,
                       mdt, dout, lddo, gdt, dq, lddq, dk, lddk, dv, lddv, acc);
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk, dm = h * dh;
  /* The mixed products with FP32 sums (FP32 dS against 16-bit q and k;
   * FP32 P against a 16-bit dout) take their 16-bit operand widened,
   * exactly, into FP32: each widened once here for all heads, packed (the
   * per-head GEMM call would widen its whole span once per head). A dv of
   * such a product is summed per head into an FP32 copy and rounded once at
   * the end, as dq and dk always are (counted there; the CPU's GEMM writes
   * them straight into dq, dk, dv). FP16 accumulation: per head as before.
   * FP32 buffers in slot SLOT_L: dP, dS [b, h, tq, tk]; dq32 [b*tq, dm];
   * dk32 [b*tk, dm]; then, when used, dv32 [b*tk, dm] and the widened q32
   * [b*tq, dm], k32 [b*tk, dm], do32 [b*tq, dm]. */
  const bool f32acc = acc == AMPC_ACC_F32;
  const bool qk_mixed = f32acc && xdt != AMPC_F32;
  const bool dv_mixed = f32acc && pdt == AMPC_F32 && gdt != AMPC_F32;
  const int64_t n_old = 2 * b * h * ss + b * tq * dm + b * tk * dm;
  const int64_t n_dv = dv_mixed ? b * tk * dm : 0, n_q = qk_mixed ? b * tq * dm : 0;
  const int64_t n_k = qk_mixed ? b * tk * dm : 0, n_do = dv_mixed ? b * tq * dm : 0;
  const int64_t o_dv = pad_f32(n_old), o_q = o_dv + pad_f32(n_dv), o_k = o_q + pad_f32(n_q),
                o_do = o_k + pad_f32(n_k);
  const int64_t nf = n_dv + n_q + n_k + n_do ? o_do + n_do : n_old;
  void *sp = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)nf * sizeof(float), &sp));
  float *dp = static_cast<float *>(sp), *dsm = dp + b * h * ss, *dq32 = dsm + b * h * ss,
        *dk32 = dq32 + b * tq * dm;
  float *dv32 = dp + o_dv, *q32 = dp + o_q, *k32 = dp + o_k, *do32 = dp + o_do;
  const void *qop = q, *kop = k, *doop = dout;
  ampc_dtype qkdt = xdt, dodt = gdt;
  int64_t ldqo = ldq, ldko = ldk, lddoo = lddo;
  if (qk_mixed) {
    widen_rows_k<<<grid_for(n_q), THREADS, 0, strm>>>(b * tq, dm, q, xdt, ldq, q32);
    widen_rows_k<<<grid_for(n_k), THREADS, 0, strm>>>(b * tk, dm, k, xdt, ldk, k32);
    qop = q32, kop = k32, qkdt = AMPC_F32, ldqo = dm, ldko = dm;
  }
  if (dv_mixed) {
    widen_rows_k<<<grid_for(n_do), THREADS, 0, strm>>>(b * tq, dm, dout, gdt, lddo, do32);
    doop = do32, dodt = AMPC_F32, lddoo = dm;
  }
  AMPC_TRY(ampc_cu_launched(fn));
  const size_t xs = ampc_dtype_size(xdt), gs = ampc_dtype_size(gdt), ps = ampc_dtype_size(pdt);
  const size_t qks = ampc_dtype_size(qkdt), dos = ampc_dtype_size(dodt);
  for (int64_t hi = 0; hi < h; hi++) /* dP = dout v^T */
    AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, 1.0f,
                                            (const char *)dout + hi * dh * gs, gdt, lddo, tq * lddo,
                                            (const char *)v + hi * dh * xs, xdt, ldv, tk * ldv,
                                            0.0f, dp + hi * ss, AMPC_F32, tk, h * ss, b, acc));
  /* dS = softmax backward, FP32 */
  AMPC_TRY(ampc_cuda_softmax_backward(b * h * tq, tk, dp, AMPC_F32, probs, pdt, 1.0f, dsm));
  for (int64_t hi = 0; hi < h; hi++) {
    /* dq = scale dS k ; dk = scale dS^T q (FP32, then one rounding each) */
    ampc_tally *const was = ampc_tally_bind(NULL);
    ampc_status st = ampc_cuda_gemm_strided_batched(
        AMPC_OP_N, AMPC_OP_N, tq, dh, tk, scale, dsm + hi * ss, AMPC_F32, tk, h * ss,
        (const char *)kop + hi * dh * qks, qkdt, ldko, tk * ldko, 0.0f, dq32 + hi * dh, AMPC_F32,
        dm, tq * dm, b, acc);
    if (st == AMPC_OK)
      st = ampc_cuda_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, scale, dsm + hi * ss,
                                          AMPC_F32, tk, h * ss, (const char *)qop + hi * dh * qks,
                                          qkdt, ldqo, tq * ldqo, 0.0f, dk32 + hi * dh, AMPC_F32, dm,
                                          tk * dm, b, acc);
    /* dv = P^T dout: into dv32 when mixed (rounded below), else into dv */
    if (st == AMPC_OK && dv_mixed)
      st = ampc_cuda_gemm_strided_batched(
          AMPC_OP_T, AMPC_OP_N, tk, dh, tq, 1.0f, (const char *)probs + hi * ss * ps, pdt, tk,
          h * ss, (const char *)doop + hi * dh * dos, dodt, lddoo, tq * lddoo, 0.0f, dv32 + hi * dh,
          AMPC_F32, dm, tk * dm, b, acc);
    (void)ampc_tally_bind(was);
    AMPC_TRY(st);
    if (!dv_mixed)
      AMPC_TRY(ampc_cuda_gemm_strided_batched(
          AMPC_OP_T, AMPC_OP_N, tk, dh, tq, 1.0f, (const char *)probs + hi * ss * ps, pdt, tk,
          h * ss, (const char *)dout + hi * dh * gs, gdt, lddo, tq * lddo, 0.0f,
          (char *)dv + hi * dh * gs, gdt, lddv, tk * lddv, b, acc));
  }
  STATS_BEGIN(NULL);
  round_k<<<grid_for(b * tq * dm), THREADS, 0, strm>>>(1, b * tq, dm, dq32, dm, 0, dq, gdt, lddq, 0,
                                                       dst);
  round_k<<<grid_for(b * tk * dm), THREADS, 0, strm>>>(1, b * tk, dm, dk32, dm, 0, dk, gdt, lddk, 0,
                                                       dst);
  if (dv_mixed)
    round_k<<<grid_for(b * tk * dm), THREADS, 0, strm>>>(1, b * tk, dm, dv32, dm, 0, dv, gdt, lddv,
                                                         0, dst);
  FINISH(fn, NULL);
}

} /* extern "C" */
