/*
 * src/backend/cuda/cuda_optim.cu: the gradient pass and the optimizer step on the
 * GPU (cuda_nn.h): the unscale + non-finite count + sum of squares for
 * clipping (ampc_grad_unscale_check), and AdamW / SGD with momentum on FP32
 * master weights or on the working weights, with the re-rounding of the
 * 16-bit copy (ampc_optim_step_from).
 *
 * The update of each element is the CPU's step_tensor (src/optim/optim.c)
 * operation for operation, from the same FP32 constants
 * (ampc_optim_consts, src/optim/optim_impl.h); with --fmad=false and CUDA's
 * IEEE sqrtf and division (the defaults: -prec-sqrt, -prec-div) every
 * element gets the CPU's bits, NaN payloads aside. One launch for all the
 * tensors (optim_multi_k: a block per piece of a tensor, each piece naming
 * its tensor and its constants, which depend on the decay flag and the
 * branch group).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "optim/optim_impl.h"

using namespace ampc_cu;

namespace {

enum { CHUNK = 4096 }; /* the CPU's chunks of the sum of squares (src/amp/unscale.c) */

/* part[c] = sum over chunk c of (g * inv)^2 for the finite ones, in double;
 * bad[c] = the non-finite count. One block per chunk: thread k takes
 * elements k, k + 256, ..., then a fixed tree over the block. */
__global__ void sumsq_k(const void *g, int gdt, int64_t n, float inv, double *part,
                        long long *bad) {
  __shared__ double sq[WARPS];
  __shared__ long long nb[WARPS];
  const int64_t lo = blockIdx.x * (int64_t)CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
  double q = 0.0;
  long long k = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) {
    const float v = ld(g, gdt, i) * inv;
    const bool ok = isfinite(v);
    q += ok ? (double)v * (double)v : 0.0;
    k += !ok;
  }
  q = warp_sum(q);
  for (int o = 16; o > 0; o >>= 1)
    k += __shfl_xor_sync(0xFFFFFFFFu, k, o);
  if ((threadIdx.x & 31) == 0)
    sq[threadIdx.x >> 5] = q, nb[threadIdx.x >> 5] = k;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    long long b = 0;
    for (int w = 0; w < WARPS; w++)
      s += sq[w], b += nb[w];
    part[blockIdx.x] = s;
    bad[blockIdx.x] = b;
  }
}

/* out[0] = the chunks' sum (thread k adds a contiguous run of chunks in
 * order, then the runs in order), out_bad[0] = the count */
__global__ void sumsq_final_k(int64_t nchunks, const double *part, const long long *bad,
                              double *out, long long *out_bad) {
  __shared__ double s[THREADS];
  __shared__ long long b[THREADS];
  const int64_t per = (nchunks + THREADS - 1) / THREADS;
  const int64_t c0 = threadIdx.x * per, c1 = c0 + per < nchunks ? c0 + per : nchunks;
  double q = 0.0;
  long long k = 0;
  for (int64_t c = c0; c < c1; c++)
    q += part[c], k += bad[c];
  s[threadIdx.x] = q, b[threadIdx.x] = k;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    long long kb = 0;
    for (int i = 0; i < THREADS; i++)
      t += s[i], kb += b[i];
    out[0] = t, out_bad[0] = kb;
  }
}

/* one tensor's step constants (step_consts plus what the kernel reads from
 * the config and the table), by value */
struct okc {
  int adamw, wdt, sdt, gdt, has_master, decay, sr, kh, momentum_on, nesterov, first;
  float gm, clip, lr, one_m_b1, b2, one_m_b2, step_size, bc2_sqrt, eps, decay_factor, lr_wd;
  float weight_decay, momentum, dampening;
  unsigned long long round_seed;
  long long t;
};

/* ampc_bf16_round_stochastic (src/optim/optim.c); the bits are
 * ampc_sr_hash, the CPU's own function */
__device__ __forceinline__ float bf16_stochastic(float x, uint32_t r) {
  const uint32_t b = __float_as_uint(x);
  if ((b & 0x7F800000u) == 0x7F800000u)
    return __bfloat162float(__float2bfloat16_rn(x));
  return __uint_as_float(((b + (r & 0xFFFFu)) >> 16) << 16);
}

/* what one element's step reads, loaded before any of it is computed (so
 * that a thread can have several elements' loads in flight) */
struct oin {
  float g, w16_old, w_old, m, v, comp;
  uint32_t w16_before;
};

__device__ __forceinline__ void optim_load(int64_t e, const okc &k, const void *grad,
                                           const void *wp, const float *master, const void *mp,
                                           const void *vp, const void *comp, oin &in) {
  in.g = ld(grad, k.gdt, e);
  in.w16_before = raw_bits(wp, k.wdt, e);
  in.w16_old = ld(wp, k.wdt, e);
  in.w_old = k.has_master ? master[e] : in.w16_old;
  in.m = k.adamw || (k.momentum_on && !k.first) ? ld(mp, k.sdt, e) : 0.0f;
  in.v = k.adamw ? ld(vp, k.sdt, e) : 0.0f;
  in.comp = k.kh ? ld(comp, k.wdt, e) : 0.0f;
}

/* one element's step from its loaded inputs; sw: updated, swallowed,
 * would_swallow, nonfinite (or NULL) */
__device__ __forceinline__ void optim_apply(int64_t e, const okc &k, const oin &in, void *wp,
                                            float *master, void *mp, void *vp, void *comp,
                                            unsigned long long *sw) {
  {
    float g = in.g * k.gm;
    if (k.clip != 1.0f)
      g = g * k.clip;
    const int pdt = k.has_master ? DT_F32 : k.wdt;
    const uint32_t w16_before = in.w16_before;
    const float w16_old = in.w16_old;
    const float w_old = in.w_old;
    float w = w_old, change = 0.0f;
    bool nonzero = false;
    if (k.adamw) {
      if (k.decay && k.kh) {
        change = -(k.lr_wd * w_old);
        nonzero = nonzero || (w_old != 0.0f);
      } else if (k.decay) {
        w = k.sr ? w * k.decay_factor : rnd(w * k.decay_factor, pdt);
        nonzero = nonzero || (w_old != 0.0f);
      }
      float m = in.m, v = in.v;
      m = rnd(m + k.one_m_b1 * (g - m), k.sdt);
      v = rnd(v * k.b2, k.sdt);
      v = rnd(v + k.one_m_b2 * g * g, k.sdt);
      float denom = rnd(sqrtf(v), k.sdt);
      denom = rnd(denom / k.bc2_sqrt, k.sdt);
      denom = rnd(denom + k.eps, k.sdt);
      const float upd = -k.step_size * (m / denom);
      if (k.kh)
        change = change + upd;
      else
        w = k.sr ? w + upd : rnd(w + upd, pdt);
      nonzero = nonzero || upd != 0.0f;
      st(mp, k.sdt, e, m);
      st(vp, k.sdt, e, v);
    } else {
      float d = g;
      if (k.decay)
        d = rnd(d + k.weight_decay * w_old, k.sdt);
      if (k.momentum_on) {
        float buf;
        if (k.first) {
          buf = rnd(d, k.sdt);
        } else {
          buf = rnd(in.m * k.momentum, k.sdt);
          buf = rnd(buf + (1.0f - k.dampening) * d, k.sdt);
        }
        st(mp, k.sdt, e, buf);
        d = k.nesterov ? rnd(d + k.momentum * buf, k.sdt) : buf;
      }
      const float upd = -k.lr * d;
      if (k.kh)
        change = upd;
      else
        w = k.sr ? w + upd : rnd(w + upd, pdt);
      nonzero = upd != 0.0f;
    }
    if (k.kh) {
      const float y = change + in.comp;
      w = rnd(w_old + y, k.wdt);
      st(comp, k.wdt, e, isfinite(w) ? y - (w - w_old) : 0.0f);
    }
    if (k.sr)
      w = bf16_stochastic(w, ampc_sr_hash(k.round_seed, k.t, e));
    if (k.has_master)
      master[e] = w;
    /* the bits stored: what a read of wp[e] now gives (its swallow check) */
    const uint32_t w16_after = st(wp, k.wdt, e, w);
    if (sw) {
      const float w_stored = rnd(w, k.wdt);
      if (!isfinite(w) || !isfinite(w_stored))
        atomicAdd(&sw[3], 1ull);
      if (nonzero && isfinite(w) && isfinite(w16_old) && isfinite(w_old)) {
        atomicAdd(&sw[0], 1ull);
        if (w16_after == w16_before)
          atomicAdd(&sw[1], 1ull);
        if (k.has_master) {
          const float direct = rnd(w16_old + (w - w_old), k.wdt);
          if (__float_as_uint(direct) == __float_as_uint(w16_old))
            atomicAdd(&sw[2], 1ull);
        }
      }
    }
  }
}

/* the step's constants of each (branch, decay) pair: [branch * 2 + decay],
 * branch AMPC_BRANCH_COUNT for a tensor outside the branches; by value */
enum { NVARIANTS = 2 * (AMPC_BRANCH_COUNT + 1) };
struct okc_set {
  okc v[NVARIANTS];
};
static_assert(sizeof(okc_set) <= 4000, "the constants are a kernel parameter (4 KB at most)");

/* a piece of one tensor: elements [off, off + len) of the flat buffers,
 * of tensor `param` (its swallow counters), with constants v[variant] */
struct oseg {
  int64_t off, len;
  int32_t param, variant;
};
enum { SEG_ELEMS = 16384 }; /* elements a block steps */

/* every tensor's step in one launch (the multi-tensor apply of apex and
 * PyTorch's fused optimizers): a block per piece, the pieces listing the
 * tensors in order; each element's operations as the one-tensor path */
__global__ void optim_multi_k(const oseg *segs, okc_set ks, const void *grad, void *wp,
                              float *master, void *mp, void *vp, void *comp,
                              unsigned long long *sw) {
  const oseg sg = segs[blockIdx.x];
  const okc k = ks.v[sg.variant];
  unsigned long long *const s = sw ? sw + 4 * (int64_t)sg.param : NULL;
  for (int64_t e = sg.off + threadIdx.x; e < sg.off + sg.len; e += blockDim.x) {
    oin in;
    optim_load(e, k, grad, wp, master, mp, vp, comp, in);
    optim_apply(e, k, in, wp, master, mp, vp, comp, s);
  }
}

/* optim_multi_k typed (cuda_common.cuh): the gradient's, weights' and
 * moments' dtypes as constants (GT, WT, ST), and OPTIM_ILP elements a
 * thread, their loads issued before the first is computed: each element's
 * operations as optim_multi_k's, so its bits. One element at a time, the
 * kernel took 0.88 ms for mm-base's 59 M parameters on an H200 (about 2
 * TB/s of its traffic), a chain of loads, the step and the stores per
 * element (the next element's loads cannot pass the stores before them). */
enum { OPTIM_ILP = 4 };
template <int GT, int WT, int ST>
__global__ void optim_multi_typed_k(const oseg *segs, okc_set ks, const void *grad, void *wp,
                                    float *master, void *mp, void *vp, void *comp,
                                    unsigned long long *sw) {
  const oseg sg = segs[blockIdx.x];
  okc k = ks.v[sg.variant];
  k.gdt = GT, k.wdt = WT, k.sdt = ST;
  unsigned long long *const s = sw ? sw + 4 * (int64_t)sg.param : NULL;
  const int64_t end = sg.off + sg.len, step = blockDim.x;
  for (int64_t e0 = sg.off + threadIdx.x; e0 < end; e0 += OPTIM_ILP * step) {
    oin in[OPTIM_ILP];
#pragma unroll
    for (int u = 0; u < OPTIM_ILP; u++)
      if (e0 + u * step < end)
        optim_load(e0 + u * step, k, grad, wp, master, mp, vp, comp, in[u]);
#pragma unroll
    for (int u = 0; u < OPTIM_ILP; u++)
      if (e0 + u * step < end)
        optim_apply(e0 + u * step, k, in[u], wp, master, mp, vp, comp, s);
  }
}

} // namespace

extern "C" {

ampc_status ampc_cuda_grad_unscale_check(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                         int64_t *nonfinite, double *norm, ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_grad_unscale_check";
  if ((!g && n > 0) || n < 0 || !nonfinite || !norm || !ampc_cu_dt_ok(gdt))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad arguments", fn);
  CU_BEGIN(fn);
  if (n == 0) {
    *nonfinite = 0, *norm = 0.0;
    return AMPC_OK;
  }
  const int64_t nchunks = (n + CHUNK - 1) / CHUNK;
  if (nchunks > INT32_MAX)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %lld elements are too many", fn, (long long)n);
  void *sp = NULL; /* part [nchunks] double, bad [nchunks], the two results */
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 2, (size_t)(nchunks + 1) * 16, &sp));
  double *part = static_cast<double *>(sp), *out = part + nchunks;
  long long *bad = reinterpret_cast<long long *>(out + 1), *out_bad = bad + nchunks;
  sumsq_k<<<(unsigned)nchunks, THREADS, 0, strm>>>(g, gdt, n, inv_scale, part, bad);
  sumsq_final_k<<<1, THREADS, 0, strm>>>(nchunks, part, bad, out, out_bad);
  AMPC_TRY(ampc_cu_launched(fn));
  double s = 0.0;
  long long nb = 0;
  cudaError_t e = cudaMemcpyAsync(&s, out, sizeof s, cudaMemcpyDeviceToHost, strm);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(&nb, out_bad, sizeof nb, cudaMemcpyDeviceToHost, strm);
  if (e == cudaSuccess)
    e = (cudaError_t)ampc_cuda_wait(strm);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: copy back: %s", fn, cudaGetErrorString(e));
  *nonfinite = (int64_t)nb;
  *norm = sqrt(s);
  return AMPC_OK;
}

ampc_status ampc_cuda_optim_step_from(ampc_params *P, const ampc_optim_config *c, int64_t t,
                                      float lr, const float grad_mult[AMPC_BRANCH_COUNT],
                                      float clip_coef, ampc_swallow_stats *sw, const void *grad,
                                      ampc_dtype gdt) {
  const char *fn = "ampc_cuda_optim_step";
  if (!grad_mult || !grad || !ampc_cu_dt_ok(gdt))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad gradients or multipliers", fn);
  if (!P || !c || t < 1 || !(lr >= 0.0f))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad arguments (t = %lld)", fn, (long long)t);
  if ((c->kind == AMPC_OPTIM_ADAMW && (!P->m || !P->v)) ||
      (c->kind == AMPC_OPTIM_SGD && c->momentum != 0.0f && !P->m))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: the table has no moment buffers", fn);
  if (c->kahan && (!P->comp || P->master || P->wdt == AMPC_F32))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: Kahan updates need 16-bit weights without a master and the "
                     "compensation buffer",
                     fn);
  CU_BEGIN(fn);
  step_consts kb[AMPC_BRANCH_COUNT], k0;
  ampc_optim_consts(c, t, lr, grad_mult, clip_coef, grad, gdt, kb, &k0);
  unsigned long long *dsw = NULL;
  if (sw && P->count > 0) {
    void *p = NULL;
    const size_t bytes = (size_t)P->count * 4 * sizeof(unsigned long long);
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 3, bytes, &p));
    const cudaError_t e = cudaMemsetAsync(p, 0, bytes, strm);
    if (e != cudaSuccess)
      return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaMemsetAsync: %s", fn, cudaGetErrorString(e));
    dsw = static_cast<unsigned long long *>(p);
  }
  const bool has_master = P->master != NULL;
  okc_set ks;
  memset(&ks, 0, sizeof ks);
  for (int v = 0; v < NVARIANTS; v++) {
    const int br = v / 2;
    const step_consts *ki = br < AMPC_BRANCH_COUNT ? &kb[br] : &k0;
    okc &k = ks.v[v];
    k.adamw = c->kind == AMPC_OPTIM_ADAMW;
    k.wdt = (int)P->wdt, k.sdt = (int)P->sdt, k.gdt = (int)gdt;
    k.has_master = has_master;
    k.decay = (v % 2) && c->weight_decay != 0.0f;
    k.sr = c->stochastic_round && !has_master && P->wdt == AMPC_BF16;
    k.kh = c->kahan && P->comp && !has_master && P->wdt != AMPC_F32;
    k.momentum_on = c->momentum != 0.0f;
    k.nesterov = c->nesterov, k.first = ki->first;
    k.gm = ki->gm, k.clip = ki->clip, k.lr = ki->lr;
    k.one_m_b1 = ki->one_m_b1, k.b2 = ki->b2, k.one_m_b2 = ki->one_m_b2;
    k.step_size = ki->step_size, k.bc2_sqrt = ki->bc2_sqrt, k.eps = ki->eps;
    k.decay_factor = ki->decay_factor, k.lr_wd = ki->lr_wd;
    k.weight_decay = c->weight_decay, k.momentum = c->momentum, k.dampening = c->dampening;
    k.round_seed = c->round_seed, k.t = (long long)t;
  }
  /* the pieces: listed on the host and copied to the device when the
   * tensors differ from those the device's list was made for (scratch slot
   * 15; its tag: an FNV-1a hash of every tensor's offset, size, branch and
   * decay flag), so a step of the same table hashes a few hundred entries */
  int64_t nseg = 0;
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < P->count; i++) {
    const ampc_param *p = &P->p[i];
    nseg += (p->numel + SEG_ELEMS - 1) / SEG_ELEMS;
    const int64_t key[4] = {p->offset, p->numel, (int64_t)p->branch, p->decay ? 1 : 0};
    const unsigned char *b = (const unsigned char *)key;
    for (size_t j = 0; j < sizeof key; j++)
      h = (h ^ b[j]) * 1099511628211ull;
  }
  h = h ? h : 1; /* 0: the slot's "nothing there" */
  if (nseg > INT32_MAX)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %lld pieces are too many", fn, (long long)nseg);
  void *dsegs = NULL;
  const size_t seg_bytes = (size_t)nseg * sizeof(oseg);
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 15, seg_bytes > 0 ? seg_bytes : 1, &dsegs));
  uint64_t *const tag = ampc_cuda_ctx_scratch_tag(ctx, 15);
  if (*tag != h && nseg > 0) {
    oseg *hs = (oseg *)malloc(seg_bytes);
    if (!hs)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: out of host memory", fn);
    int64_t ns = 0;
    for (int i = 0; i < P->count; i++) {
      const ampc_param *p = &P->p[i];
      const int br = (unsigned)p->branch < AMPC_BRANCH_COUNT ? (int)p->branch : AMPC_BRANCH_COUNT;
      for (int64_t o = 0; o < p->numel; o += SEG_ELEMS) {
        oseg *g = &hs[ns++];
        g->off = p->offset + o;
        g->len = p->numel - o < (int64_t)SEG_ELEMS ? p->numel - o : (int64_t)SEG_ELEMS;
        g->param = i, g->variant = br * 2 + (p->decay ? 1 : 0);
      }
    }
    /* pageable memory: the copy is staged before it returns, hs may go */
    const cudaError_t e = cudaMemcpyAsync(dsegs, hs, seg_bytes, cudaMemcpyHostToDevice, strm);
    free(hs);
    if (e != cudaSuccess)
      return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaMemcpyAsync: %s", fn, cudaGetErrorString(e));
    *tag = h;
  }
  const oseg *const segs = static_cast<const oseg *>(dsegs);
  /* (gradient, weights, moments): 32-true; 16-mixed; bf16-mixed and
   * fp8-mixed; 16-true; bf16-true */
  if (nseg > 0 &&
      !(ampc_cu_typed() &&
        typed_pick((int)gdt, (int)P->wdt, (int)P->sdt,
                   [&](auto tk) {
                     using T = decltype(tk);
                     optim_multi_typed_k<T::a, T::b, T::c><<<(unsigned)nseg, THREADS, 0, strm>>>(
                         segs, ks, grad, P->w, P->master, P->m, P->v, P->comp, dsw);
                   },
                   dts<0, 0, 0>{}, dts<1, 1, 0>{}, dts<2, 2, 0>{}, dts<1, 1, 1>{}, dts<2, 2, 2>{})))
    optim_multi_k<<<(unsigned)nseg, THREADS, 0, strm>>>(segs, ks, grad, P->w, P->master, P->m, P->v,
                                                        P->comp, dsw);
  AMPC_TRY(ampc_cu_launched(fn));
  if (dsw) {
    unsigned long long *h = (unsigned long long *)malloc((size_t)P->count * 4 * sizeof *h);
    if (!h)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: out of host memory", fn);
    cudaError_t e =
        cudaMemcpyAsync(h, dsw, (size_t)P->count * 4 * sizeof *h, cudaMemcpyDeviceToHost, strm);
    if (e == cudaSuccess)
      e = (cudaError_t)ampc_cuda_wait(strm);
    if (e != cudaSuccess) {
      free(h);
      return ampc_fail(AMPC_ERR_DEVICE, "%s: copy back: %s", fn, cudaGetErrorString(e));
    }
    for (int i = 0; i < P->count; i++) {
      sw[i].updated = (int64_t)h[4 * i];
      sw[i].swallowed = (int64_t)h[4 * i + 1];
      sw[i].would_swallow = (int64_t)h[4 * i + 2];
      sw[i].nonfinite = (int64_t)h[4 * i + 3];
    }
    free(h);
  }
  return AMPC_OK;
}

} /* extern "C" */
