/*
 * src/model/backend.c: the two backends of src/model/backend.h. The CPU's
 * entries are the functions of ampc/nn.h, ampc_gemm, ampc_store_f32 and
 * ampc_convert themselves; its memory is 64-byte aligned host memory. The
 * CUDA's are their ampc/cuda_nn.h twins on the context bound to the calling
 * thread (ampc_cuda_bind); in a build without CUDA every entry fails with
 * AMPC_ERR_UNSUPPORTED (the stubs).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "ampc/cuda_nn.h"
#include "model/backend.h"

/* ---- CPU ------------------------------------------------------------------------ */

static ampc_status cpu_alloc(void **p, size_t bytes) {
  *p = NULL;
  const size_t n = (bytes + 63) / 64 * 64;
  void *q = aligned_alloc(64, n ? n : 64);
  if (!q)
    return ampc_fail(AMPC_ERR_NOMEM, "cannot allocate %zu bytes", bytes);
  memset(q, 0, n ? n : 64);
  *p = q;
  return AMPC_OK;
}
static void cpu_release(void *p) { free(p); }
static ampc_status cpu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes)
    memcpy(dst, src, bytes);
  return AMPC_OK;
}
static ampc_status cpu_zero(void *p, size_t bytes) {
  if (bytes)
    memset(p, 0, bytes);
  return AMPC_OK;
}
static ampc_status cpu_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t rows) {
  for (size_t r = 0; r < rows; r++)
    memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
  return AMPC_OK;
}
static ampc_status cpu_scale_f32(int64_t n, float *x, float s) {
  for (int64_t i = 0; i < n; i++)
    x[i] *= s;
  return AMPC_OK;
}

static ampc_status cpu_stage_f32(int64_t n, const void *g, ampc_dtype gdt, float inv, bool first,
                                 float *stage) {
  enum { CH = 1024 };
  float buf[CH];
  const size_t es = ampc_dtype_size(gdt);
  for (int64_t i0 = 0; i0 < n; i0 += CH) {
    const int64_t len = n - i0 < CH ? n - i0 : CH;
    AMPC_TRY(ampc_convert(buf, AMPC_F32, (const char *)g + (size_t)i0 * es, gdt, (size_t)len));
    for (int64_t i = 0; i < len; i++) {
      const float v = inv == 1.0f ? buf[i] : buf[i] * inv;
      stage[i0 + i] = first ? v : stage[i0 + i] + v;
    }
  }
  return AMPC_OK;
}

/* the CPU table, named nm, with `device` dev */
// clang-format off
#define CPU_TABLE(nm, dev) {                                                                       \
  .name = nm,                                                                                      \
  .device = dev,                                                                                   \
  .alloc = cpu_alloc,                                                                              \
  .release = cpu_release,                                                                          \
  .to_device = cpu_copy,                                                                           \
  .to_host = cpu_copy,                                                                             \
  .zero = cpu_zero,                                                                                \
  .copy2d = cpu_copy2d,                                                                            \
  .scale_f32 = cpu_scale_f32,                                                                      \
  .stage_f32 = cpu_stage_f32,                                                                      \
  .layernorm_forward = ampc_layernorm_forward,                                                     \
  .layernorm_backward = ampc_layernorm_backward,                                                   \
  .mha_forward = ampc_mha_forward,                                                                 \
  .mha_backward_ex = ampc_mha_backward_ex,                                                         \
  .add_forward = ampc_add_forward,                                                                 \
  .linear_forward = ampc_linear_forward,                                                           \
  .linear_backward = ampc_linear_backward,                                                         \
  .linear_forward_fp8 = ampc_linear_forward_fp8,                                                   \
  .linear_backward_fp8 = ampc_linear_backward_fp8,                                                 \
  .gelu_forward = ampc_gelu_forward,                                                               \
  .gelu_backward = ampc_gelu_backward,                                                             \
  .patch_embed_forward = ampc_patch_embed_forward,                                                 \
  .patch_embed_backward = ampc_patch_embed_backward,                                               \
  .vit_tokens_forward = ampc_vit_tokens_forward,                                                   \
  .vit_tokens_backward = ampc_vit_tokens_backward,                                                 \
  .l2norm_forward = ampc_l2norm_forward,                                                           \
  .l2norm_backward = ampc_l2norm_backward,                                                         \
  .embedding_forward = ampc_embedding_forward,                                                     \
  .embedding_backward = ampc_embedding_backward,                                                   \
  .mean_pool_forward = ampc_mean_pool_forward,                                                     \
  .mean_pool_backward = ampc_mean_pool_backward,                                                   \
  .infonce_forward = ampc_infonce_forward,                                                         \
  .infonce_backward = ampc_infonce_backward,                                                       \
  .bce_logits_forward = ampc_bce_logits_forward,                                                   \
  .bce_logits_backward = ampc_bce_logits_backward,                                                 \
  .cross_entropy_forward = ampc_cross_entropy_forward,                                             \
  .cross_entropy_backward = ampc_cross_entropy_backward,                                           \
  .argmax_rows = ampc_argmax_rows,                                                                 \
  .gather_rows = ampc_gather_rows,                                                                 \
  .scatter_rows = ampc_scatter_rows,                                                               \
  .scatter_add_rows = ampc_scatter_add_rows,                                                       \
  .grad_add_f32 = ampc_grad_add_f32,                                                               \
  .gemm = ampc_gemm,                                                                               \
  .store_f32 = ampc_store_f32,                                                                     \
  .convert = ampc_convert,                                                                         \
  .grad_unscale_check = ampc_grad_unscale_check,                                                   \
  .optim_step_from = ampc_optim_step_from,                                                         \
}
// clang-format on

static const ampc_backend k_cpu = CPU_TABLE("cpu", false);
static const ampc_backend k_cpu_split = CPU_TABLE("cpu-split", true);
#undef CPU_TABLE

const ampc_backend *ampc_backend_cpu(void) { return &k_cpu; }

const ampc_backend *ampc_backend_cpu_split(void) { return &k_cpu_split; }

/* ---- CUDA ----------------------------------------------------------------------- */

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
static const ampc_backend k_cuda = {
    .name = "cuda",
    .device = true,
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

const ampc_backend *ampc_backend_cuda(void) { return &k_cuda; }
