/*
 * src/backend/cuda/cuda_attention.cu: the attention core of ampc/nn.h on the
 * GPU (src/nn/attention.c's core; the multi-head layer around it is
 * cuda_mha.cu): S = q k^T / sqrt(dh) per head, the masked softmax, P v, and
 * back (ampc_cuda_attention_forward / _forward_ex / _probs / _backward /
 * _backward_ex), with the head-major copies of q, k, v and their gradients
 * (heads_k / unheads_k and their multi-job variants). FP32 sums run on the
 * head-major path's batched products, FP16 sums per head
 * (ampc_cuda_gemm_strided_batched, cuda_gemm_batched.cu). Built with
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

/* n FP32 elements rounded up to 256 bytes: the next buffer carved after
 * them in one scratch slot starts aligned for cuBLASLt's vector loads */
int64_t pad_f32(int64_t n) { return (n + 63) & ~(int64_t)63; }

} // namespace

extern "C" {

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
