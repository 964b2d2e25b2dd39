/*
 * src/nn/mha_impl.h: the multi-head attention layer as a composition over
 * the layers it calls (its projections, the attention core, the FP32 sums of
 * the input gradients), so that the CPU (src/nn/attention.c) and the GPU
 * (src/backend/cuda/cuda_mha.cu) run one definition of the layer: the same calls in
 * the same order, each on its own device. ampc_mha_forward and
 * ampc_mha_backward_ex (ampc/nn.h) are these with the CPU's table.
 */
#ifndef AMPC_MHA_IMPL_H
#define AMPC_MHA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* what take hands to give (a buffer it allocated, or none) */
typedef struct ampc_mha_buf {
  void *p;
  int heap;
} ampc_mha_buf;

typedef struct ampc_mha_ops {
  /* ampc_linear_forward_fp8, ampc_linear_backward_fp8, ampc_linear_dgrad_fp8,
   * ampc_attention_forward_ex, ampc_attention_backward_ex (ampc/nn.h) */
  ampc_status (*linear_fwd)(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                            const void *w, ampc_dtype wdt, const void *b, void *y, ampc_dtype ydt,
                            ampc_acc acc, ampc_linear_fp8 *f, ampc_round_stats *stats);
  ampc_status (*linear_bwd)(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                            const void *x, ampc_dtype xdt, const void *w, ampc_dtype wdt, void *dx,
                            void *dw, void *db, ampc_acc acc, ampc_linear_fp8 *f, ampc_scratch *ws);
  ampc_status (*linear_dgrad)(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                              const void *w, ampc_dtype wdt, float beta, void *c, ampc_dtype cdt,
                              ampc_acc acc, ampc_linear_fp8 *f, bool count_dy);
  ampc_status (*attn_fwd)(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh, const void *q,
                          int64_t ldq, const void *k, int64_t ldk, const void *v, int64_t ldv,
                          ampc_dtype xdt, const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                          void *probs, ampc_dtype pdt, ampc_dtype mdt, void *out, int64_t ldo,
                          ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats);
  /* ampc_attention_probs: the forward's scores and probabilities again */
  ampc_status (*attn_probs)(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh, const void *q,
                            int64_t ldq, const void *k, int64_t ldk, ampc_dtype xdt,
                            const uint8_t *key_mask, void *scores, ampc_dtype sdt, void *probs,
                            ampc_dtype pdt, ampc_acc acc);
  ampc_status (*attn_bwd)(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh, const void *q,
                          int64_t ldq, const void *k, int64_t ldk, const void *v, int64_t ldv,
                          ampc_dtype xdt, const void *probs, ampc_dtype pdt, ampc_dtype mdt,
                          const void *dout, int64_t lddo, ampc_dtype gdt, void *dq, int64_t lddq,
                          void *dk, int64_t lddk, void *dv, int64_t lddv, ampc_acc acc,
                          ampc_scratch *ws);
  /* dst (dt) = round(scale * src), n values (scale 1: a plain rounding) */
  ampc_status (*store_scaled)(void *dst, ampc_dtype dt, float *src, int64_t n, float scale);
  /* the backward pass's own buffers, `bytes` long: from ws at *off (CPU) or
   * the device's scratch; give releases what take allocated */
  void *(*take)(ampc_scratch *ws, size_t *off, size_t bytes, ampc_mha_buf *own);
  void (*give)(ampc_mha_buf *own);
  /* what the layers called after take may use of ws (CPU: the rest) */
  ampc_scratch (*rest)(const ampc_scratch *ws, size_t off);
} ampc_mha_ops;

/* ampc_mha_forward and ampc_mha_backward_ex (ampc/nn.h), on o's layers. */
ampc_status ampc_mha_forward_with(const ampc_mha_ops *o, int64_t b, int64_t tq, int64_t tk,
                                  int64_t dm, int64_t h, const void *xq, const void *xkv,
                                  ampc_dtype adt, const void *wq, const void *bq, const void *wk,
                                  const void *bk, const void *wv, const void *bv, const void *wo,
                                  const void *bo, ampc_dtype wdt, const uint8_t *key_mask,
                                  const ampc_mha_cache *cache, ampc_dtype pdt, void *y,
                                  ampc_acc acc, ampc_linear_fp8 *const *fp8,
                                  ampc_round_stats *stats);
ampc_status ampc_mha_backward_with(const ampc_mha_ops *o, int64_t b, int64_t tq, int64_t tk,
                                   int64_t dm, int64_t h, const void *xq, const void *xkv,
                                   ampc_dtype adt, const void *wq, const void *wk, const void *wv,
                                   const void *wo, ampc_dtype wdt, const ampc_mha_cache *cache,
                                   ampc_dtype pdt, const void *dy, ampc_dtype gdt, void *dxq,
                                   void *dxkv, float dxkv_scale, void *dwq, void *dbq, void *dwk,
                                   void *dbk, void *dwv, void *dbv, void *dwo, void *dbo,
                                   ampc_acc acc, ampc_linear_fp8 *const *fp8, ampc_scratch *ws);

#ifdef __cplusplus
}
#endif
#endif
