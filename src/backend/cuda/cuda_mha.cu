/*
 * src/backend/cuda/cuda_mha.cu: the multi-head attention layer on the GPU: the CPU's
 * composition (src/nn/mha_impl.h: projections, attention core, FP32 sums of
 * the input gradients, in the same order) over the GPU's layers
 * (cuda_nn.h), FP8 projections (fp8-mixed) through the GPU's FP8
 * linear layers. Built with --fmad=false.
 */
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#include "nn/mha_impl.h"

using namespace ampc_cu;

namespace {

enum { SLOT_MHA = 8 }; /* the backward pass's gradient buffers (cuda_impl.h) */

/* dst (dt) = round(scale * src) */
__global__ void store_scaled_k(int64_t n, const float *src, float scale, void *dst, int dt,
                               dev_stats *ds) {
  lstats ls(ds);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    cst(dst, dt, i, scale == 1.0f ? src[i] : src[i] * scale, ls, ds);
  ls.flush(ds);
}

ampc_status lin_fwd(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt, const void *w,
                    ampc_dtype wdt, const void *b, void *y, ampc_dtype ydt, ampc_acc acc,
                    ampc_linear_fp8 *f, ampc_round_stats *stats) {
  return ampc_cuda_linear_forward_fp8(m, k, n, x, xdt, w, wdt, b, y, ydt, acc, f, stats);
}

ampc_status lin_bwd(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                    ampc_dtype xdt, const void *w, ampc_dtype wdt, void *dx, void *dw, void *db,
                    ampc_acc acc, ampc_linear_fp8 *f, ampc_scratch *ws) {
  return ampc_cuda_linear_backward_fp8(m, k, n, dy, gdt, x, xdt, w, wdt, dx, dw, db, acc, f, ws);
}

/* c [m, k] (cdt) = dy [m, n] . W [n, k] + beta c */
ampc_status lin_dgrad(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                      const void *w, ampc_dtype wdt, float beta, void *c, ampc_dtype cdt,
                      ampc_acc acc, ampc_linear_fp8 *f, bool count_dy) {
  return ampc_cuda_linear_dgrad_fp8(m, k, n, dy, gdt, w, wdt, beta, c, cdt, acc, f, count_dy);
}

ampc_status store_scaled(void *dst, ampc_dtype dt, float *src, int64_t n, float scale) {
  const char *fn = "ampc_cuda_mha_backward";
  CU_BEGIN(fn);
  if (n < 1)
    return AMPC_OK;
  ampc_cu::dev_stats *ds = NULL; /* counted as the CPU's store (a bound tally only) */
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, NULL, &ds));
  store_scaled_k<<<grid_for(n), THREADS, 0, strm>>>(n, src, scale, dst, dt, ds);
  AMPC_TRY(ampc_cu_launched(fn));
  return ampc_cu_stats_end(strm, ds, NULL);
}

void *take(ampc_scratch *ws, size_t *off, size_t bytes, ampc_mha_buf *own) {
  (void)ws, (void)off;
  own->p = NULL, own->heap = 0;
  void *p = NULL;
  ampc_cuda_ctx *ctx = ampc_cuda_current();
  if (!ctx || ampc_cuda_ctx_scratch(ctx, SLOT_MHA, bytes, &p) != AMPC_OK)
    return NULL;
  return p;
}

void give(ampc_mha_buf *own) { (void)own; }

ampc_scratch rest(const ampc_scratch *ws, size_t off) {
  (void)ws, (void)off;
  ampc_scratch none = {NULL, 0};
  return none;
}

ampc_mha_ops cuda_mha_ops() {
  ampc_mha_ops o;
  o.linear_fwd = lin_fwd;
  o.linear_bwd = lin_bwd;
  o.linear_dgrad = lin_dgrad;
  o.attn_fwd = ampc_cuda_attention_forward_ex;
  o.attn_probs = ampc_cuda_attention_probs;
  o.attn_bwd = ampc_cuda_attention_backward_ex;
  o.store_scaled = store_scaled;
  o.take = take;
  o.give = give;
  o.rest = rest;
  return o;
}

} // namespace

extern "C" {

ampc_status ampc_cuda_mha_forward(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                  const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                                  const void *bq, const void *wk, const void *bk, const void *wv,
                                  const void *bv, const void *wo, const void *bo, ampc_dtype wdt,
                                  const uint8_t *key_mask, const ampc_mha_cache *cache,
                                  ampc_dtype pdt, void *y, ampc_acc acc,
                                  ampc_linear_fp8 *const *fp8, ampc_round_stats *stats) {
  const ampc_mha_ops o = cuda_mha_ops();
  return ampc_mha_forward_with(&o, b, tq, tk, dm, h, xq, xkv, adt, wq, bq, wk, bk, wv, bv, wo, bo,
                               wdt, key_mask, cache, pdt, y, acc, fp8, stats);
}

ampc_status ampc_cuda_mha_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                      const void *xq, const void *xkv, ampc_dtype adt,
                                      const void *wq, const void *wk, const void *wv,
                                      const void *wo, ampc_dtype wdt, const ampc_mha_cache *cache,
                                      ampc_dtype pdt, const void *dy, ampc_dtype gdt, void *dxq,
                                      void *dxkv, float dxkv_scale, void *dwq, void *dbq, void *dwk,
                                      void *dbk, void *dwv, void *dbv, void *dwo, void *dbo,
                                      ampc_acc acc, ampc_linear_fp8 *const *fp8, ampc_scratch *ws) {
  const ampc_mha_ops o = cuda_mha_ops();
  return ampc_mha_backward_with(&o, b, tq, tk, dm, h, xq, xkv, adt, wq, wk, wv, wo, wdt, cache, pdt,
                                dy, gdt, dxq, dxkv, dxkv_scale, dwq, dbq, dwk, dbk, dwv, dbv, dwo,
                                dbo, acc, fp8, ws);
}

} /* extern "C" */
