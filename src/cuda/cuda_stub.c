/*
 * src/cuda/cuda_stub.c: ampc/cuda.h and ampc/cuda_nn.h in a build without CUDA (AMPC_CUDA=OFF,
 * or no nvcc): no devices, and every call says so.
 */
#include <string.h>

#include "ampc/cuda_nn.h"
#include "cuda/cuda_impl.h"
#include "internal.h"

static const char k_reason[] = "ampc was built without CUDA (AMPC_CUDA=OFF or no nvcc found)";

static ampc_status no_cuda(const char *fn) {
  return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: %s", fn, k_reason);
}

int ampc_cuda_built(void) { return 0; }
int ampc_cuda_device_count(void) { return 0; }
const char *ampc_cuda_unavailable_reason(void) { return k_reason; }

ampc_status ampc_cuda_device_info_get(int device, ampc_cuda_device_info *out) {
  (void)device, (void)out;
  return no_cuda("ampc_cuda_device_info_get");
}
ampc_status ampc_cuda_create(int device, size_t workspace_bytes, ampc_cuda_ctx **out) {
  (void)device, (void)workspace_bytes;
  if (out)
    *out = NULL;
  return no_cuda("ampc_cuda_create");
}
void ampc_cuda_destroy(ampc_cuda_ctx *ctx) { (void)ctx; }
ampc_status ampc_cuda_malloc(ampc_cuda_ctx *ctx, size_t bytes, void **dptr) {
  (void)ctx, (void)bytes;
  if (dptr)
    *dptr = NULL;
  return no_cuda("ampc_cuda_malloc");
}
void ampc_cuda_free(ampc_cuda_ctx *ctx, void *dptr) { (void)ctx, (void)dptr; }
ampc_status ampc_cuda_to_device(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx, (void)dst, (void)src, (void)bytes;
  return no_cuda("ampc_cuda_to_device");
}
ampc_status ampc_cuda_to_host(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx, (void)dst, (void)src, (void)bytes;
  return no_cuda("ampc_cuda_to_host");
}
ampc_status ampc_cuda_synchronize(ampc_cuda_ctx *ctx) {
  (void)ctx;
  return no_cuda("ampc_cuda_synchronize");
}
ampc_status ampc_cuda_fill_uniform(ampc_cuda_ctx *ctx, void *dst, ampc_dtype dt, int64_t count,
                                   float lo, float hi, uint64_t seed) {
  (void)ctx, (void)dst, (void)dt, (void)count, (void)lo, (void)hi, (void)seed;
  return no_cuda("ampc_cuda_fill_uniform");
}
ampc_status ampc_cuda_gemm(ampc_cuda_ctx *ctx, const ampc_cuda_gemm_args *args) {
  (void)ctx, (void)args;
  return no_cuda("ampc_cuda_gemm");
}
ampc_status ampc_cuda_mem_info(ampc_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
  (void)ctx, (void)free_bytes, (void)total_bytes;
  return no_cuda("ampc_cuda_mem_info");
}
uint64_t ampc_cuda_gemm_flops(const ampc_cuda_ctx *ctx) {
  (void)ctx;
  return 0;
}
void ampc_cuda_set_gemm_tuning(bool on) { (void)on; }
bool ampc_cuda_gemm_tuning(void) { return false; }

void ampc_cuda_gemm_cache_stats(const ampc_cuda_ctx *ctx, int64_t *queries, int *entries) {
  (void)ctx;
  if (queries)
    *queries = 0;
  if (entries)
    *entries = 0;
}
void ampc_cuda_counters_get(const ampc_cuda_ctx *ctx, ampc_cuda_counters *out) {
  (void)ctx;
  if (out)
    memset(out, 0, sizeof *out);
}
ampc_status ampc_cuda_profile_range(ampc_cuda_ctx *ctx, bool on) {
  (void)ctx, (void)on;
  return no_cuda("ampc_cuda_profile_range");
}
ampc_status ampc_cuda_timer_start(ampc_cuda_ctx *ctx) {
  (void)ctx;
  return no_cuda("ampc_cuda_timer_start");
}
ampc_status ampc_cuda_timer_stop(ampc_cuda_ctx *ctx, float *ms) {
  (void)ctx, (void)ms;
  return no_cuda("ampc_cuda_timer_stop");
}
ampc_status ampc_cuda_load_cublaslt(size_t *version) {
  if (version)
    *version = 0;
  return no_cuda("ampc_cuda_load_cublaslt");
}

/* ---- ampc/cuda_nn.h ------------------------------------------------------ */

static _Thread_local ampc_cuda_ctx *g_bound; /* always NULL: no context can exist */
ampc_cuda_ctx *ampc_cuda_bind(ampc_cuda_ctx *ctx) {
  ampc_cuda_ctx *const before = g_bound;
  g_bound = ctx;
  return before;
}
ampc_cuda_ctx *ampc_cuda_current(void) { return g_bound; }
ampc_status ampc_cuda_add_forward(int64_t n, const void *a, ampc_dtype adt, const void *b,
                                  ampc_dtype bdt, void *y, ampc_dtype ydt,
                                  ampc_round_stats *stats) {
  (void)n, (void)a, (void)adt, (void)b, (void)bdt, (void)y, (void)ydt, (void)stats;
  return no_cuda("ampc_cuda_add_forward");
}
ampc_status ampc_cuda_gelu_forward(int64_t n, const void *x, ampc_dtype xdt, void *y,
                                   ampc_dtype ydt, ampc_round_stats *stats) {
  (void)n, (void)x, (void)xdt, (void)y, (void)ydt, (void)stats;
  return no_cuda("ampc_cuda_gelu_forward");
}
ampc_status ampc_cuda_gelu_backward(int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                                    ampc_dtype xdt, void *dx) {
  (void)n, (void)dy, (void)gdt, (void)x, (void)xdt, (void)dx;
  return no_cuda("ampc_cuda_gelu_backward");
}
ampc_status ampc_cuda_layernorm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt,
                                        const void *gamma, const void *beta, ampc_dtype wdt,
                                        float eps, void *y, ampc_dtype ydt, float *mean,
                                        float *rstd, ampc_round_stats *stats) {
  (void)m, (void)d, (void)x, (void)xdt, (void)gamma, (void)beta, (void)wdt, (void)eps, (void)y,
      (void)ydt, (void)mean, (void)rstd, (void)stats;
  return no_cuda("ampc_cuda_layernorm_forward");
}
ampc_status ampc_cuda_layernorm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                         const void *x, ampc_dtype xdt, const void *gamma,
                                         ampc_dtype wdt, const float *mean, const float *rstd,
                                         void *dx, void *dgamma, void *dbeta, ampc_scratch *ws) {
  (void)m, (void)d, (void)dy, (void)gdt, (void)x, (void)xdt, (void)gamma, (void)wdt, (void)mean,
      (void)rstd, (void)dx, (void)dgamma, (void)dbeta, (void)ws;
  return no_cuda("ampc_cuda_layernorm_backward");
}
ampc_status ampc_cuda_softmax_forward(int64_t m, int64_t n, const void *x, ampc_dtype xdt,
                                      float scale, const uint8_t *key_mask, int64_t rows_per_mask,
                                      void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  (void)m, (void)n, (void)x, (void)xdt, (void)scale, (void)key_mask, (void)rows_per_mask, (void)y,
      (void)ydt, (void)stats;
  return no_cuda("ampc_cuda_softmax_forward");
}
ampc_status ampc_cuda_softmax_backward(int64_t m, int64_t n, const void *dy, ampc_dtype gdt,
                                       const void *y, ampc_dtype ydt, float scale, void *dx) {
  (void)m, (void)n, (void)dy, (void)gdt, (void)y, (void)ydt, (void)scale, (void)dx;
  return no_cuda("ampc_cuda_softmax_backward");
}
ampc_status ampc_cuda_embedding_forward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                        int64_t vocab, const void *tok, const void *pos,
                                        ampc_dtype wdt, void *y, ampc_dtype ydt,
                                        ampc_round_stats *stats) {
  (void)b, (void)t, (void)d, (void)ids, (void)vocab, (void)tok, (void)pos, (void)wdt, (void)y,
      (void)ydt, (void)stats;
  return no_cuda("ampc_cuda_embedding_forward");
}
ampc_status ampc_cuda_embedding_backward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                         int64_t vocab, const void *dy, ampc_dtype gdt, void *dtok,
                                         void *dpos, ampc_round_stats *stats, ampc_scratch *ws) {
  (void)b, (void)t, (void)d, (void)ids, (void)vocab, (void)dy, (void)gdt, (void)dtok, (void)dpos,
      (void)stats, (void)ws;
  return no_cuda("ampc_cuda_embedding_backward");
}
ampc_status ampc_cuda_vit_tokens_forward(int64_t b, int64_t np, int64_t d, const void *patches,
                                         ampc_dtype pdt, const void *cls, const void *pos,
                                         ampc_dtype wdt, void *y, ampc_dtype ydt) {
  (void)b, (void)np, (void)d, (void)patches, (void)pdt, (void)cls, (void)pos, (void)wdt, (void)y,
      (void)ydt;
  return no_cuda("ampc_cuda_vit_tokens_forward");
}
ampc_status ampc_cuda_vit_tokens_backward(int64_t b, int64_t np, int64_t d, const void *dy,
                                          ampc_dtype gdt, void *dpatches, void *dcls, void *dpos) {
  (void)b, (void)np, (void)d, (void)dy, (void)gdt, (void)dpatches, (void)dcls, (void)dpos;
  return no_cuda("ampc_cuda_vit_tokens_backward");
}
ampc_status ampc_cuda_grad_add_f32(int64_t n, const float *v, void *g, ampc_dtype gdt) {
  (void)n, (void)v, (void)g, (void)gdt;
  return no_cuda("ampc_cuda_grad_add_f32");
}
ampc_status ampc_cuda_mean_pool_forward(int64_t b, int64_t t, int64_t d, const void *x,
                                        ampc_dtype xdt, const uint8_t *mask, void *y,
                                        ampc_dtype ydt, ampc_round_stats *stats) {
  (void)b, (void)t, (void)d, (void)x, (void)xdt, (void)mask, (void)y, (void)ydt, (void)stats;
  return no_cuda("ampc_cuda_mean_pool_forward");
}
ampc_status ampc_cuda_mean_pool_backward(int64_t b, int64_t t, int64_t d, const void *dy,
                                         ampc_dtype gdt, const uint8_t *mask, void *dx) {
  (void)b, (void)t, (void)d, (void)dy, (void)gdt, (void)mask, (void)dx;
  return no_cuda("ampc_cuda_mean_pool_backward");
}
ampc_status ampc_cuda_l2norm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt, float eps,
                                     void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  (void)m, (void)d, (void)x, (void)xdt, (void)eps, (void)y, (void)ydt, (void)stats;
  return no_cuda("ampc_cuda_l2norm_forward");
}
ampc_status ampc_cuda_l2norm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                      const void *x, ampc_dtype xdt, float eps, void *dx) {
  (void)m, (void)d, (void)dy, (void)gdt, (void)x, (void)xdt, (void)eps, (void)dx;
  return no_cuda("ampc_cuda_l2norm_backward");
}
ampc_status ampc_cuda_gemm_strided_batched(ampc_op opa, ampc_op opb, int64_t m, int64_t n,
                                           int64_t k, float alpha, const void *a, ampc_dtype a_dt,
                                           int64_t lda, int64_t stride_a, const void *b,
                                           ampc_dtype b_dt, int64_t ldb, int64_t stride_b,
                                           float beta, void *c, ampc_dtype c_dt, int64_t ldc,
                                           int64_t stride_c, int64_t batch, ampc_acc acc) {
  (void)opa, (void)opb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)a_dt, (void)lda,
      (void)stride_a, (void)b, (void)b_dt, (void)ldb, (void)stride_b, (void)beta, (void)c,
      (void)c_dt, (void)ldc, (void)stride_c, (void)batch, (void)acc;
  return no_cuda("ampc_cuda_gemm_strided_batched");
}
void ampc_cuda_set_acc16_exact(bool exact) { (void)exact; }
void ampc_cuda_set_typed_kernels(bool on) { (void)on; }
bool ampc_cuda_typed_kernels(void) { return false; }
long long ampc_cuda_typed_launches(void) { return 0; }
ampc_status ampc_cuda_fp8_cast_bf16(ampc_fp8_q *q, const void *src, ampc_dtype sdt, int64_t rows,
                                    int64_t cols, int64_t ld, uint16_t *dst, bool count) {
  (void)q, (void)src, (void)sdt, (void)rows, (void)cols, (void)ld, (void)dst, (void)count;
  return no_cuda("ampc_cuda_fp8_cast_bf16");
}
ampc_status ampc_cuda_linear_forward_fp8(int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const void *b, void *y, ampc_dtype ydt, ampc_acc acc,
                                         ampc_linear_fp8 *f, ampc_round_stats *stats) {
  (void)m, (void)k, (void)n, (void)x, (void)xdt, (void)w, (void)wdt, (void)b, (void)y, (void)ydt,
      (void)acc, (void)f, (void)stats;
  return no_cuda("ampc_cuda_linear_forward_fp8");
}
ampc_status ampc_cuda_linear_backward_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                          ampc_dtype gdt, const void *x, ampc_dtype xdt,
                                          const void *w, ampc_dtype wdt, void *dx, void *dw,
                                          void *db, ampc_acc acc, ampc_linear_fp8 *f,
                                          ampc_scratch *ws) {
  (void)m, (void)k, (void)n, (void)dy, (void)gdt, (void)x, (void)xdt, (void)w, (void)wdt, (void)dx,
      (void)dw, (void)db, (void)acc, (void)f, (void)ws;
  return no_cuda("ampc_cuda_linear_backward_fp8");
}
ampc_status ampc_cuda_linear_dgrad_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                       ampc_dtype gdt, const void *w, ampc_dtype wdt, float beta,
                                       void *c, ampc_dtype cdt, ampc_acc acc, ampc_linear_fp8 *f,
                                       bool count_dy) {
  (void)m, (void)k, (void)n, (void)dy, (void)gdt, (void)w, (void)wdt, (void)beta, (void)c,
      (void)cdt, (void)acc, (void)f, (void)count_dy;
  return no_cuda("ampc_cuda_linear_dgrad_fp8");
}
ampc_status ampc_cuda_linear_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                     const void *w, ampc_dtype wdt, const void *b, void *y,
                                     ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats) {
  (void)m, (void)k, (void)n, (void)x, (void)xdt, (void)w, (void)wdt, (void)b, (void)y, (void)ydt,
      (void)acc, (void)stats;
  return no_cuda("ampc_cuda_linear_forward");
}
ampc_status ampc_cuda_linear_backward(int64_t m, int64_t k, int64_t n, const void *dy,
                                      ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                      ampc_dtype wdt, void *dx, void *dw, void *db, ampc_acc acc,
                                      ampc_scratch *ws) {
  (void)m, (void)k, (void)n, (void)dy, (void)gdt, (void)x, (void)xdt, (void)w, (void)wdt, (void)dx,
      (void)dw, (void)db, (void)acc, (void)ws;
  return no_cuda("ampc_cuda_linear_backward");
}
ampc_status ampc_cuda_attention_forward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                        const void *q, int64_t ldq, const void *k, int64_t ldk,
                                        const void *v, int64_t ldv, ampc_dtype xdt,
                                        const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                        void *probs, ampc_dtype pdt, void *out, int64_t ldo,
                                        ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats) {
  (void)b, (void)tq, (void)tk, (void)h, (void)dh, (void)q, (void)ldq, (void)k, (void)ldk, (void)v,
      (void)ldv, (void)xdt, (void)key_mask, (void)scores, (void)sdt, (void)probs, (void)pdt,
      (void)out, (void)ldo, (void)odt, (void)acc, (void)stats;
  return no_cuda("ampc_cuda_attention_forward");
}
ampc_status ampc_cuda_attention_probs(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                      const void *q, int64_t ldq, const void *k, int64_t ldk,
                                      ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                                      ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_acc acc) {
  (void)b, (void)tq, (void)tk, (void)h, (void)dh, (void)q, (void)ldq, (void)k, (void)ldk, (void)xdt,
      (void)key_mask, (void)scores, (void)sdt, (void)probs, (void)pdt, (void)acc;
  return no_cuda("ampc_cuda_attention_probs");
}
ampc_status ampc_cuda_attention_backward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                         const void *q, int64_t ldq, const void *k, int64_t ldk,
                                         const void *v, int64_t ldv, ampc_dtype xdt,
                                         const void *probs, ampc_dtype pdt, const void *dout,
                                         int64_t lddo, ampc_dtype gdt, void *dq, int64_t lddq,
                                         void *dk, int64_t lddk, void *dv, int64_t lddv,
                                         ampc_acc acc, ampc_scratch *ws) {
  (void)b, (void)tq, (void)tk, (void)h, (void)dh, (void)q, (void)ldq, (void)k, (void)ldk, (void)v,
      (void)ldv, (void)xdt, (void)probs, (void)pdt, (void)dout, (void)lddo, (void)gdt, (void)dq,
      (void)lddq, (void)dk, (void)lddk, (void)dv, (void)lddv, (void)acc, (void)ws;
  return no_cuda("ampc_cuda_attention_backward");
}
ampc_status ampc_cuda_attention_forward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                           const void *q, int64_t ldq, const void *k, int64_t ldk,
                                           const void *v, int64_t ldv, ampc_dtype xdt,
                                           const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                           void *probs, ampc_dtype pdt, ampc_dtype mdt, void *out,
                                           int64_t ldo, ampc_dtype odt, ampc_acc acc,
                                           ampc_round_stats *stats) {
  (void)mdt;
  return ampc_cuda_attention_forward(b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, key_mask,
                                     scores, sdt, probs, pdt, out, ldo, odt, acc, stats);
}
ampc_status ampc_cuda_attention_backward_ex(
    int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh, const void *q, int64_t ldq,
    const void *k, int64_t ldk, const void *v, int64_t ldv, ampc_dtype xdt, const void *probs,
    ampc_dtype pdt, ampc_dtype mdt, const void *dout, int64_t lddo, ampc_dtype gdt, void *dq,
    int64_t lddq, void *dk, int64_t lddk, void *dv, int64_t lddv, ampc_acc acc, ampc_scratch *ws) {
  (void)mdt;
  return ampc_cuda_attention_backward(b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, probs, pdt,
                                      dout, lddo, gdt, dq, lddq, dk, lddk, dv, lddv, acc, ws);
}
ampc_status ampc_cuda_mha_forward(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                  const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                                  const void *bq, const void *wk, const void *bk, const void *wv,
                                  const void *bv, const void *wo, const void *bo, ampc_dtype wdt,
                                  const uint8_t *key_mask, const ampc_mha_cache *cache,
                                  ampc_dtype pdt, void *y, ampc_acc acc,
                                  ampc_linear_fp8 *const *fp8, ampc_round_stats *stats) {
  (void)b, (void)tq, (void)tk, (void)dm, (void)h, (void)xq, (void)xkv, (void)adt, (void)wq,
      (void)bq, (void)wk, (void)bk, (void)wv, (void)bv, (void)wo, (void)bo, (void)wdt,
      (void)key_mask, (void)cache, (void)pdt, (void)y, (void)acc, (void)fp8, (void)stats;
  return no_cuda("ampc_cuda_mha_forward");
}
ampc_status ampc_cuda_mha_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                      const void *xq, const void *xkv, ampc_dtype adt,
                                      const void *wq, const void *wk, const void *wv,
                                      const void *wo, ampc_dtype wdt, const ampc_mha_cache *cache,
                                      ampc_dtype pdt, const void *dy, ampc_dtype gdt, void *dxq,
                                      void *dxkv, float dxkv_scale, void *dwq, void *dbq, void *dwk,
                                      void *dbk, void *dwv, void *dbv, void *dwo, void *dbo,
                                      ampc_acc acc, ampc_linear_fp8 *const *fp8, ampc_scratch *ws) {
  (void)b, (void)tq, (void)tk, (void)dm, (void)h, (void)xq, (void)xkv, (void)adt, (void)wq,
      (void)wk, (void)wv, (void)wo, (void)wdt, (void)cache, (void)pdt, (void)dy, (void)gdt,
      (void)dxq, (void)dxkv, (void)dxkv_scale, (void)dwq, (void)dbq, (void)dwk, (void)dbk,
      (void)dwv, (void)dbv, (void)dwo, (void)dbo, (void)acc, (void)fp8, (void)ws;
  return no_cuda("ampc_cuda_mha_backward_ex");
}
ampc_status ampc_cuda_patch_embed_forward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                          int64_t d, const uint8_t *images, float px_scale,
                                          float px_shift, const void *w, ampc_dtype wdt,
                                          const void *bias, void *y, ampc_dtype ydt, ampc_acc acc,
                                          ampc_round_stats *stats, ampc_scratch *ws) {
  (void)b, (void)hh, (void)ww, (void)c, (void)p, (void)d, (void)images, (void)px_scale,
      (void)px_shift, (void)w, (void)wdt, (void)bias, (void)y, (void)ydt, (void)acc, (void)stats,
      (void)ws;
  return no_cuda("ampc_cuda_patch_embed_forward");
}
ampc_status ampc_cuda_patch_embed_backward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                           int64_t d, const uint8_t *images, float px_scale,
                                           float px_shift, ampc_dtype wdt, const void *dy,
                                           ampc_dtype gdt, void *dw, void *dbias, ampc_acc acc,
                                           ampc_scratch *ws) {
  (void)b, (void)hh, (void)ww, (void)c, (void)p, (void)d, (void)images, (void)px_scale,
      (void)px_shift, (void)wdt, (void)dy, (void)gdt, (void)dw, (void)dbias, (void)acc, (void)ws;
  return no_cuda("ampc_cuda_patch_embed_backward");
}
ampc_status ampc_cuda_cross_entropy_forward(int64_t m, int64_t c, const void *logits,
                                            ampc_dtype xdt, const int32_t *target, float *loss) {
  (void)m, (void)c, (void)logits, (void)xdt, (void)target, (void)loss;
  return no_cuda("ampc_cuda_cross_entropy_forward");
}
ampc_status ampc_cuda_cross_entropy_backward(int64_t m, int64_t c, const void *logits,
                                             ampc_dtype xdt, const int32_t *target,
                                             float loss_scale, void *dlogits, ampc_dtype gdt) {
  (void)m, (void)c, (void)logits, (void)xdt, (void)target, (void)loss_scale, (void)dlogits,
      (void)gdt;
  return no_cuda("ampc_cuda_cross_entropy_backward");
}
ampc_status ampc_cuda_bce_logits_forward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                         float *loss) {
  (void)m, (void)x, (void)xdt, (void)t, (void)loss;
  return no_cuda("ampc_cuda_bce_logits_forward");
}
ampc_status ampc_cuda_bce_logits_backward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                          float loss_scale, void *dx, ampc_dtype gdt) {
  (void)m, (void)x, (void)xdt, (void)t, (void)loss_scale, (void)dx, (void)gdt;
  return no_cuda("ampc_cuda_bce_logits_backward");
}
ampc_status ampc_cuda_infonce_forward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                      float *loss) {
  (void)b, (void)sim, (void)xdt, (void)log_temp, (void)loss;
  return no_cuda("ampc_cuda_infonce_forward");
}
ampc_status ampc_cuda_infonce_backward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                       float loss_scale, void *dsim, ampc_dtype gdt,
                                       float *dlog_temp, ampc_scratch *ws) {
  (void)b, (void)sim, (void)xdt, (void)log_temp, (void)loss_scale, (void)dsim, (void)gdt,
      (void)dlog_temp, (void)ws;
  return no_cuda("ampc_cuda_infonce_backward");
}
ampc_status ampc_cuda_gather_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                  const void *x, ampc_dtype xdt, void *y, ampc_dtype ydt) {
  (void)n, (void)d, (void)idx, (void)rows, (void)x, (void)xdt, (void)y, (void)ydt;
  return no_cuda("ampc_cuda_gather_rows");
}
ampc_status ampc_cuda_scatter_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                   const void *x, ampc_dtype dt, void *y) {
  (void)n, (void)d, (void)idx, (void)rows, (void)x, (void)dt, (void)y;
  return no_cuda("ampc_cuda_scatter_rows");
}
ampc_status ampc_cuda_scatter_add_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                       const void *x, ampc_dtype xdt, const void *x2,
                                       ampc_dtype x2dt, float *y, int64_t ldy) {
  (void)n, (void)d, (void)idx, (void)rows, (void)x, (void)xdt, (void)x2, (void)x2dt, (void)y,
      (void)ldy;
  return no_cuda("ampc_cuda_scatter_add_rows");
}
ampc_status ampc_cuda_argmax_rows(int64_t m, int64_t n, const void *x, ampc_dtype xdt,
                                  bool skip_diag, int32_t *idx) {
  (void)m, (void)n, (void)x, (void)xdt, (void)skip_diag, (void)idx;
  return no_cuda("ampc_cuda_argmax_rows");
}
ampc_status ampc_cuda_store_f32(void *y, ampc_dtype dt, const float *src, size_t n,
                                ampc_round_stats *stats) {
  (void)y, (void)dt, (void)src, (void)n, (void)stats;
  return no_cuda("ampc_cuda_store_f32");
}
ampc_status ampc_cuda_convert(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                              size_t n) {
  (void)dst, (void)dst_dt, (void)src, (void)src_dt, (void)n;
  return no_cuda("ampc_cuda_convert");
}
ampc_status ampc_cuda_stage_f32(int64_t n, const void *g, ampc_dtype gdt, float inv, bool first,
                                float *stage) {
  (void)n, (void)g, (void)gdt, (void)inv, (void)first, (void)stage;
  return no_cuda("ampc_cuda_stage_f32");
}
ampc_status ampc_cuda_scale_f32(int64_t n, float *x, float s) {
  (void)n, (void)x, (void)s;
  return no_cuda("ampc_cuda_scale_f32");
}
ampc_status ampc_cuda_zero(void *p, size_t bytes) {
  (void)p, (void)bytes;
  return no_cuda("ampc_cuda_zero");
}
ampc_status ampc_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t rows) {
  (void)dst, (void)dpitch, (void)src, (void)spitch, (void)width, (void)rows;
  return no_cuda("ampc_cuda_copy2d");
}
ampc_status ampc_cuda_grad_unscale_check(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                         int64_t *nonfinite, double *norm, ampc_scratch *ws) {
  (void)g, (void)gdt, (void)n, (void)inv_scale, (void)nonfinite, (void)norm, (void)ws;
  return no_cuda("ampc_cuda_grad_unscale_check");
}
ampc_status ampc_cuda_optim_step_from(ampc_params *P, const ampc_optim_config *c, int64_t t,
                                      float lr, const float grad_mult[AMPC_BRANCH_COUNT],
                                      float clip_coef, ampc_swallow_stats *sw, const void *grad,
                                      ampc_dtype gdt) {
  (void)P, (void)c, (void)t, (void)lr, (void)grad_mult, (void)clip_coef, (void)sw, (void)grad,
      (void)gdt;
  return no_cuda("ampc_cuda_optim_step_from");
}
