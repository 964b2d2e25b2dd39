/*
 * src/backend/cuda/cuda_backend.c: the CUDA backend's table of
 * src/backend/backend.h. Its layer entries are the functions of cuda_nn.h
 * (each with exactly the arguments of its ampc/nn.h twin) on the context
 * bound to the calling thread (ampc_cuda_bind); its device entries make,
 * bind and free that context. Built only with CUDA; src/backend/registry.c
 * registers it.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_nn.h"

extern const ampc_device_desc ampc_cuda_desc; /* cuda_desc.c */

static ampc_status cuda_alloc(void **p, size_t bytes) {
  *p = NULL;
  const size_t n = (bytes + 63) / 64 * 64;
  void *q = NULL;
  AMPC_TRY(ampc_cuda_malloc(ampc_cuda_current(), n ? n : 64, &q));
  const ampc_status st = ampc_cuda_zero(q, n ? n : 64);
  if (st != AMPC_OK) {
    ampc_cuda_free(ampc_cuda_current(), q);
    return st;
  }
  *p = q;
  return AMPC_OK;
}
static void cuda_release(void *p) { ampc_cuda_free(ampc_cuda_current(), p); }
static ampc_status cuda_to_device(void *dst, const void *src, size_t bytes) {
  return ampc_cuda_to_device(ampc_cuda_current(), dst, src, bytes);
}
static ampc_status cuda_to_host(void *dst, const void *src, size_t bytes) {
  return ampc_cuda_to_host(ampc_cuda_current(), dst, src, bytes);
}
static ampc_status cuda_gemm(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k, float alpha,
                             const void *a, ampc_dtype a_dt, int64_t lda, const void *b,
                             ampc_dtype b_dt, int64_t ldb, float beta, void *c, ampc_dtype c_dt,
                             int64_t ldc, ampc_acc acc) {
  return ampc_cuda_gemm_strided_batched(opa, opb, m, n, k, alpha, a, a_dt, lda, 0, b, b_dt, ldb, 0,
                                        beta, c, c_dt, ldc, 0, 1, acc);
}

/* ---- the device ---------------------------------------------------------------- */

/* an open context and the one bound before it */
typedef struct cuda_open {
  ampc_cuda_ctx *ctx, *prev;
} cuda_open;

static ampc_status cuda_open_unit(int unit, void **out) {
  *out = NULL;
  cuda_open *o = calloc(1, sizeof *o);
  if (!o)
    return ampc_fail(AMPC_ERR_NOMEM, "cuda: out of memory");
  const ampc_status st = ampc_cuda_create(unit, 0, &o->ctx);
  if (st != AMPC_OK) {
    free(o);
    return st;
  }
  o->prev = ampc_cuda_bind(o->ctx);
  *out = o;
  return AMPC_OK;
}
static void cuda_close(void *p) {
  cuda_open *o = p;
  if (!o)
    return;
  ampc_cuda_bind(o->prev);
  ampc_cuda_destroy(o->ctx);
  free(o);
}
static ampc_status cuda_mem(void *p, size_t *free_bytes, size_t *total_bytes) {
  return ampc_cuda_mem_info(p ? ((cuda_open *)p)->ctx : NULL, free_bytes, total_bytes);
}
/* the switches beyond the preset that decide the device's bits: the typed
 * kernels; tuned GEMMs, which pick their algorithms by timing (not
 * bit-reproducible); exact FP16 sums (a test aid, not logged) */
/* The fused layers (backend.h) on the device: the two ops in sequence, each
 * on the device's own kernels (the values the model got from those two calls
 * before; cuBLASLt's fused epilogues are not used yet). */
static ampc_status cuda_linear_gelu_forward(int64_t m, int64_t k, int64_t n, const void *x,
                                            ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                            const void *b, void *h, ampc_dtype hdt, void *y,
                                            ampc_dtype ydt, ampc_acc acc, ampc_linear_fp8 *f,
                                            ampc_round_stats *stats) {
  AMPC_TRY(ampc_cuda_linear_forward_fp8(m, k, n, x, xdt, w, wdt, b, h, hdt, acc, f, stats));
  return ampc_cuda_gelu_forward(m * n, h, hdt, y, ydt, stats);
}
static ampc_status cuda_linear_residual_forward(int64_t m, int64_t k, int64_t n, const void *x,
                                                ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                                const void *b, void *t, ampc_dtype tdt,
                                                const void *r, ampc_dtype rdt, void *y,
                                                ampc_dtype ydt, ampc_acc acc, ampc_linear_fp8 *f,
                                                ampc_round_stats *stats) {
  AMPC_TRY(ampc_cuda_linear_forward_fp8(m, k, n, x, xdt, w, wdt, b, t, tdt, acc, f, stats));
  return ampc_cuda_add_forward(m * n, r, rdt, t, tdt, y, ydt, stats);
}
static ampc_status cuda_linear_backward_gelu(int64_t m, int64_t k, int64_t n, const void *dy,
                                             ampc_dtype gdt, const void *x, ampc_dtype xdt,
                                             const void *w, ampc_dtype wdt, const void *h,
                                             ampc_dtype hdt, void *dx, void *dh, void *dw, void *db,
                                             ampc_acc acc, ampc_linear_fp8 *f, ampc_scratch *ws) {
  AMPC_TRY(ampc_cuda_linear_backward_fp8(m, k, n, dy, gdt, x, xdt, w, wdt, dx, dw, db, acc, f, ws));
  return ampc_cuda_gelu_backward(m * k, dx, gdt, h, hdt, dh);
}
static ampc_status cuda_add_layernorm_forward(int64_t m, int64_t d, const void *a, ampc_dtype adt,
                                              const void *b, ampc_dtype bdt, void *s,
                                              ampc_dtype sdt, const void *gamma, const void *beta,
                                              ampc_dtype wdt, float eps, void *y, ampc_dtype ydt,
                                              float *mean, float *rstd, ampc_round_stats *stats) {
  AMPC_TRY(ampc_cuda_add_forward(m * d, a, adt, b, bdt, s, sdt, stats));
  return ampc_cuda_layernorm_forward(m, d, s, sdt, gamma, beta, wdt, eps, y, ydt, mean, rstd,
                                     stats);
}

static ampc_status cuda_layernorm_backward_add(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                               const void *x, ampc_dtype xdt, const void *gamma,
                                               ampc_dtype wdt, const float *mean, const float *rstd,
                                               void *dx, void *dgamma, void *dbeta, void *dres,
                                               ampc_scratch *ws) {
  AMPC_TRY(ampc_cuda_layernorm_backward(m, d, dy, gdt, x, xdt, gamma, wdt, mean, rstd, dx, dgamma,
                                        dbeta, ws));
  return ampc_cuda_add_forward(m * d, dres, gdt, dx, gdt, dres, gdt, NULL);
}

static const ampc_backend_setting k_cuda_settings[] = {
    {"typed_kernels", ampc_cuda_typed_kernels, ampc_cuda_set_typed_kernels, true},
    {"gemm_tuning", ampc_cuda_gemm_tuning, ampc_cuda_set_gemm_tuning, true},
    {"acc16_exact", NULL, ampc_cuda_set_acc16_exact, false},
};

ampc_status ampc_cuda_bench_gemm(int reps, bool quick, bool json, ampc_emit_fn emit, void *user);

const ampc_backend ampc_backend_cuda_table = {
    .name = "cuda",
    .device = true,
    .desc = &ampc_cuda_desc,
    .device_count = ampc_cuda_device_count,
    .unavailable_reason = ampc_cuda_unavailable_reason,
    .open = cuda_open_unit,
    .close = cuda_close,
    .mem_info = cuda_mem,
    .settings = k_cuda_settings,
    .n_settings = (int)(sizeof k_cuda_settings / sizeof k_cuda_settings[0]),
    .bench_gemm = ampc_cuda_bench_gemm,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .to_device = cuda_to_device,
    .to_host = cuda_to_host,
    .zero = ampc_cuda_zero,
    .copy2d = ampc_cuda_copy2d,
    .scale_f32 = ampc_cuda_scale_f32,
    .stage_f32 = ampc_cuda_stage_f32,
    .layernorm_forward = ampc_cuda_layernorm_forward,
    .layernorm_backward = ampc_cuda_layernorm_backward,
    .mha_forward = ampc_cuda_mha_forward,
    .mha_backward_ex = ampc_cuda_mha_backward_ex,
    .add_forward = ampc_cuda_add_forward,
    .linear_forward = ampc_cuda_linear_forward,
    .linear_backward = ampc_cuda_linear_backward,
    .linear_forward_fp8 = ampc_cuda_linear_forward_fp8,
    .linear_backward_fp8 = ampc_cuda_linear_backward_fp8,
    .linear_gelu_forward = cuda_linear_gelu_forward,
    .linear_residual_forward = cuda_linear_residual_forward,
    .linear_backward_gelu = cuda_linear_backward_gelu,
    .add_layernorm_forward = cuda_add_layernorm_forward,
    .layernorm_backward_add = cuda_layernorm_backward_add,
    .gelu_forward = ampc_cuda_gelu_forward,
    .gelu_backward = ampc_cuda_gelu_backward,
    .patch_embed_forward = ampc_cuda_patch_embed_forward,
    .patch_embed_backward = ampc_cuda_patch_embed_backward,
    .vit_tokens_forward = ampc_cuda_vit_tokens_forward,
    .vit_tokens_backward = ampc_cuda_vit_tokens_backward,
    .l2norm_forward = ampc_cuda_l2norm_forward,
    .l2norm_backward = ampc_cuda_l2norm_backward,
    .embedding_forward = ampc_cuda_embedding_forward,
    .embedding_backward = ampc_cuda_embedding_backward,
    .mean_pool_forward = ampc_cuda_mean_pool_forward,
    .mean_pool_backward = ampc_cuda_mean_pool_backward,
    .infonce_forward = ampc_cuda_infonce_forward,
    .infonce_backward = ampc_cuda_infonce_backward,
    .bce_logits_forward = ampc_cuda_bce_logits_forward,
    .bce_logits_backward = ampc_cuda_bce_logits_backward,
    .cross_entropy_forward = ampc_cuda_cross_entropy_forward,
    .cross_entropy_backward = ampc_cuda_cross_entropy_backward,
    .argmax_rows = ampc_cuda_argmax_rows,
    .gather_rows = ampc_cuda_gather_rows,
    .scatter_rows = ampc_cuda_scatter_rows,
    .scatter_add_rows = ampc_cuda_scatter_add_rows,
    .grad_add_f32 = ampc_cuda_grad_add_f32,
    .gemm = cuda_gemm,
    .store_f32 = ampc_cuda_store_f32,
    .convert = ampc_cuda_convert,
    .grad_unscale_check = ampc_cuda_grad_unscale_check,
    .optim_step_from = ampc_cuda_optim_step_from,
};
