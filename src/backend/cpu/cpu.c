/*
 * src/backend/cpu/cpu.c: the CPU's two tables of src/backend/backend.h. Their
 * entries are the functions of ampc/nn.h, ampc_gemm, ampc_store_f32 and
 * ampc_convert themselves; their memory is 64-byte aligned host memory.
 * "cpu" treats that memory as the host's (copies skipped); "cpu-split" as a
 * device's (`device` set), so that the device path's copies run on the CPU
 * and a model run on it tests them with the CPU's bits.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

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
#define CPU_TABLE(nm, dev, ds) {                                                                   \
  .name = nm,                                                                                      \
  .device = dev,                                                                                   \
  .desc = ds,                                                                                      \
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
  .linear_gelu_forward = ampc_linear_gelu_forward,                                                 \
  .linear_residual_forward = ampc_linear_residual_forward,                                         \
  .linear_backward_gelu = ampc_linear_backward_gelu,                                               \
  .add_layernorm_forward = ampc_add_layernorm_forward,                                             \
  .layernorm_backward_add = ampc_layernorm_backward_add,                                           \
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

/* the CPU devices' facts (ampc/backend.h) */
static const ampc_device_desc k_cpu_desc = {.name = "cpu", .label = "CPU"};
static const ampc_device_desc k_cpu_split_desc = {
    .name = "cpu-split", .label = "CPU (split)", .test_only = true};

const ampc_backend ampc_backend_cpu_table = CPU_TABLE("cpu", false, &k_cpu_desc);
const ampc_backend ampc_backend_cpu_split_table = CPU_TABLE("cpu-split", true, &k_cpu_split_desc);
#undef CPU_TABLE
