/*
 * src/backend/backend.h: the backend layer's one op table. A backend is a
 * table of function pointers with the signatures of the CPU layers (ampc/nn.h,
 * ampc_gemm, ampc_store_f32, ampc_convert) and of the trainer's unscale check
 * and optimizer step, written here once, plus the memory operations a model
 * and its trainer need and the device operations (open, close, memory info;
 * supports(op) is in the device's desc, ampc/backend.h). The CPU table (src/backend/cpu/) holds the
 * CPU functions themselves, so a model run through it gives the bits it gave before the table
 * existed; another backend's table (src/backend/cuda/) holds functions with the same arguments on
 * its own buffers. src/backend/registry.c maps a device (ampc/backend.h) to its table. Not
 * installed.
 *
 * Adding an op: its CPU function in ampc/nn.h and src/nn/, one line here,
 * its entry in each backend's table (one function per backend).
 *
 * A model holds two kinds of buffers: tensors (activations, gradients,
 * parameters, ids and masks the layers read), allocated by the backend, and
 * the few things the host computes or reads (masks from token ids, hard
 * negatives, accuracies), in host memory. On the CPU both are the same
 * buffer (`device` false, copies between them are skipped); on a device
 * every host read and write goes through to_host / to_device.
 *
 * Errors: every function returns an ampc_status (a failed device call:
 * AMPC_ERR_DEVICE with the driver's message; an op a backend does not offer
 * for the arguments: AMPC_ERR_UNSUPPORTED).
 */
#ifndef AMPC_BACKEND_BACKEND_H
#define AMPC_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/gemm.h"
#include "ampc/backend.h"
#include "ampc/nn.h"
#include "ampc/optim.h"
#include "ampc/amp.h"
#include "ampc/params.h"
#include "ampc/status.h"

/* A backend switch (ampc_device_setting): its name, getter (NULL: not
 * readable), setter, and whether the run log records it. */
typedef struct ampc_backend_setting {
  const char *name;
  bool (*get)(void);
  void (*set)(bool on);
  bool logged;
} ampc_backend_setting;

typedef struct ampc_backend {
  const char *name;             /* the device's name ("cpu", "cuda", "cpu-split") */
  bool device;                  /* tensors are not host memory: host reads and writes copy */
  const ampc_device_desc *desc; /* the device's facts (ampc/backend.h) */
  /* ---- the device (NULL on the CPU tables: nothing to open) ---- */
  int (*device_count)(void);               /* units on this machine (0: none) */
  const char *(*unavailable_reason)(void); /* why 0 units; "" else */
  /* make a context on unit and bind it to the calling thread; close: bind
   * the context bound before open again, and free ctx */
  ampc_status (*open)(int unit, void **ctx);
  void (*close)(void *ctx);
  ampc_status (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);
  const ampc_backend_setting *settings;
  int n_settings;
  ampc_status (*bench_gemm)(int reps, bool quick, bool json, ampc_emit_fn emit, void *user);
  /* ---- memory (bytes; 64-byte aligned, zeroed) ---- */
  ampc_status (*alloc)(void **p, size_t bytes);
  void (*release)(void *p);                                           /* NULL is fine */
  ampc_status (*to_device)(void *dst, const void *src, size_t bytes); /* host -> tensor */
  ampc_status (*to_host)(void *dst, const void *src, size_t bytes);   /* tensor -> host */
  ampc_status (*zero)(void *p, size_t bytes);
  /* rows rows of width bytes from src (pitch spitch) to dst (pitch dpitch), tensor to tensor */
  ampc_status (*copy2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t rows);
  /* x [n] FP32 *= s, in place (one rounding per element) */
  ampc_status (*scale_f32)(int64_t n, float *x, float s);
  /* the trainer's FP32 gradient staging (micro-batches summed in FP32,
   * per-loss scaling): stage [n] FP32 = (first ? 0 : stage) + widen(g) * inv,
   * g [n] in gdt; inv == 1: no product (the widened value exactly), else one
   * FP32 product and one FP32 sum per element */
  ampc_status (*stage_f32)(int64_t n, const void *g, ampc_dtype gdt, float inv, bool first,
                           float *stage);
  /* ---- the layers (ampc/nn.h) ---- */
  ampc_status (*layernorm_forward)(int64_t m, int64_t d, const void *x, ampc_dtype xdt,
                                   const void *gamma, const void *beta, ampc_dtype wdt, float eps,
                                   void *y, ampc_dtype ydt, float *mean, float *rstd,
                                   ampc_round_stats *stats);
  ampc_status (*layernorm_backward)(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                    const void *x, ampc_dtype xdt, const void *gamma,
                                    ampc_dtype wdt, const float *mean, const float *rstd, void *dx,
                                    void *dgamma, void *dbeta, ampc_scratch *ws);
  ampc_status (*mha_forward)(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                             const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                             const void *bq, const void *wk, const void *bk, const void *wv,
                             const void *bv, const void *wo, const void *bo, ampc_dtype wdt,
                             const uint8_t *key_mask, const ampc_mha_cache *cache, ampc_dtype pdt,
                             void *y, ampc_acc acc, ampc_linear_fp8 *const *fp8,
                             ampc_round_stats *stats);
  ampc_status (*mha_backward_ex)(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                 const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                                 const void *wk, const void *wv, const void *wo, ampc_dtype wdt,
                                 const ampc_mha_cache *cache, ampc_dtype pdt, const void *dy,
                                 ampc_dtype gdt, void *dxq, void *dxkv, float dxkv_scale, void *dwq,
                                 void *dbq, void *dwk, void *dbk, void *dwv, void *dbv, void *dwo,
                                 void *dbo, ampc_acc acc, ampc_linear_fp8 *const *fp8,
                                 ampc_scratch *ws);
  ampc_status (*add_forward)(int64_t n, const void *a, ampc_dtype adt, const void *b,
                             ampc_dtype bdt, void *y, ampc_dtype ydt, ampc_round_stats *stats);
  ampc_status (*linear_forward)(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                const void *w, ampc_dtype wdt, const void *b, void *y,
                                ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats);
  ampc_status (*linear_backward)(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                                 const void *x, ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                 void *dx, void *dw, void *db, ampc_acc acc, ampc_scratch *ws);
  ampc_status (*linear_forward_fp8)(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                    const void *w, ampc_dtype wdt, const void *b, void *y,
                                    ampc_dtype ydt, ampc_acc acc, ampc_linear_fp8 *f,
                                    ampc_round_stats *stats);
  ampc_status (*linear_backward_fp8)(int64_t m, int64_t k, int64_t n, const void *dy,
                                     ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                     ampc_dtype wdt, void *dx, void *dw, void *db, ampc_acc acc,
                                     ampc_linear_fp8 *f, ampc_scratch *ws);
  /* the fused layers (ampc/nn.h): a linear layer and the elementwise step
   * after it, the bits of the two ops in sequence on the CPU */
  ampc_status (*linear_gelu_forward)(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                     const void *w, ampc_dtype wdt, const void *b, void *h,
                                     ampc_dtype hdt, void *y, ampc_dtype ydt, ampc_acc acc,
                                     ampc_linear_fp8 *f, ampc_round_stats *stats);
  ampc_status (*linear_residual_forward)(int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const void *b, void *t, ampc_dtype tdt, const void *r,
                                         ampc_dtype rdt, void *y, ampc_dtype ydt, ampc_acc acc,
                                         ampc_linear_fp8 *f, ampc_round_stats *stats);
  ampc_status (*linear_backward_gelu)(int64_t m, int64_t k, int64_t n, const void *dy,
                                      ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                      ampc_dtype wdt, const void *h, ampc_dtype hdt, void *dx,
                                      void *dh, void *dw, void *db, ampc_acc acc,
                                      ampc_linear_fp8 *f, ampc_scratch *ws);
  ampc_status (*add_layernorm_forward)(int64_t m, int64_t d, const void *a, ampc_dtype adt,
                                       const void *b, ampc_dtype bdt, void *s, ampc_dtype sdt,
                                       const void *gamma, const void *beta, ampc_dtype wdt,
                                       float eps, void *y, ampc_dtype ydt, float *mean, float *rstd,
                                       ampc_round_stats *stats);
  ampc_status (*layernorm_backward_add)(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                        const void *x, ampc_dtype xdt, const void *gamma,
                                        ampc_dtype wdt, const float *mean, const float *rstd,
                                        void *dx, void *dgamma, void *dbeta, void *dres,
                                        ampc_scratch *ws);
  ampc_status (*gelu_forward)(int64_t n, const void *x, ampc_dtype xdt, void *y, ampc_dtype ydt,
                              ampc_round_stats *stats);
  ampc_status (*gelu_backward)(int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                               ampc_dtype xdt, void *dx);
  ampc_status (*patch_embed_forward)(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                     int64_t d, const uint8_t *images, float px_scale,
                                     float px_shift, const void *w, ampc_dtype wdt,
                                     const void *bias, void *y, ampc_dtype ydt, ampc_acc acc,
                                     ampc_round_stats *stats, ampc_scratch *ws);
  ampc_status (*patch_embed_backward)(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                      int64_t d, const uint8_t *images, float px_scale,
                                      float px_shift, ampc_dtype wdt, const void *dy,
                                      ampc_dtype gdt, void *dw, void *dbias, ampc_acc acc,
                                      ampc_scratch *ws);
  ampc_status (*vit_tokens_forward)(int64_t b, int64_t np, int64_t d, const void *patches,
                                    ampc_dtype pdt, const void *cls, const void *pos,
                                    ampc_dtype wdt, void *y, ampc_dtype ydt);
  ampc_status (*vit_tokens_backward)(int64_t b, int64_t np, int64_t d, const void *dy,
                                     ampc_dtype gdt, void *dpatches, void *dcls, void *dpos);
  ampc_status (*l2norm_forward)(int64_t m, int64_t d, const void *x, ampc_dtype xdt, float eps,
                                void *y, ampc_dtype ydt, ampc_round_stats *stats);
  ampc_status (*l2norm_backward)(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                 const void *x, ampc_dtype xdt, float eps, void *dx);
  ampc_status (*embedding_forward)(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                   int64_t vocab, const void *tok, const void *pos, ampc_dtype wdt,
                                   void *y, ampc_dtype ydt, ampc_round_stats *stats);
  ampc_status (*embedding_backward)(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                    int64_t vocab, const void *dy, ampc_dtype gdt, void *dtok,
                                    void *dpos, ampc_round_stats *stats, ampc_scratch *ws);
  ampc_status (*mean_pool_forward)(int64_t b, int64_t t, int64_t d, const void *x, ampc_dtype xdt,
                                   const uint8_t *mask, void *y, ampc_dtype ydt,
                                   ampc_round_stats *stats);
  ampc_status (*mean_pool_backward)(int64_t b, int64_t t, int64_t d, const void *dy, ampc_dtype gdt,
                                    const uint8_t *mask, void *dx);
  /* the losses: their scalars (loss, dlog_temp) are host pointers */
  ampc_status (*infonce_forward)(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                 float *loss);
  ampc_status (*infonce_backward)(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                  float loss_scale, void *dsim, ampc_dtype gdt, float *dlog_temp,
                                  ampc_scratch *ws);
  ampc_status (*bce_logits_forward)(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                    float *loss);
  ampc_status (*bce_logits_backward)(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                     float loss_scale, void *dx, ampc_dtype gdt);
  ampc_status (*cross_entropy_forward)(int64_t m, int64_t c, const void *logits, ampc_dtype xdt,
                                       const int32_t *target, float *loss);
  ampc_status (*cross_entropy_backward)(int64_t m, int64_t c, const void *logits, ampc_dtype xdt,
                                        const int32_t *target, float loss_scale, void *dlogits,
                                        ampc_dtype gdt);
  /* ---- rows, GEMM, stores ---- */
  ampc_status (*argmax_rows)(int64_t m, int64_t n, const void *x, ampc_dtype xdt, bool skip_diag,
                             int32_t *idx);
  ampc_status (*gather_rows)(int64_t n, int64_t d, const int32_t *idx, int64_t rows, const void *x,
                             ampc_dtype xdt, void *y, ampc_dtype ydt);
  ampc_status (*scatter_rows)(int64_t n, int64_t d, const int32_t *idx, int64_t rows, const void *x,
                              ampc_dtype dt, void *y);
  ampc_status (*scatter_add_rows)(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                  const void *x, ampc_dtype xdt, const void *x2, ampc_dtype x2dt,
                                  float *y, int64_t ldy);
  ampc_status (*grad_add_f32)(int64_t n, const float *v, void *g, ampc_dtype gdt);
  ampc_status (*gemm)(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k, float alpha,
                      const void *a, ampc_dtype a_dt, int64_t lda, const void *b, ampc_dtype b_dt,
                      int64_t ldb, float beta, void *c, ampc_dtype c_dt, int64_t ldc, ampc_acc acc);
  ampc_status (*store_f32)(void *dst, ampc_dtype dt, const float *src, size_t n,
                           ampc_round_stats *stats);
  ampc_status (*convert)(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                         size_t n);
  /* ---- the trainer's step (ampc/amp.h, ampc/optim.h): P's role buffers and
   * the gradients are tensors; nonfinite, norm and sw are host memory ---- */
  ampc_status (*grad_unscale_check)(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                    int64_t *nonfinite, double *norm, ampc_scratch *ws);
  ampc_status (*optim_step_from)(ampc_params *P, const ampc_optim_config *c, int64_t t, float lr,
                                 const float grad_mult[AMPC_BRANCH_COUNT], float clip_coef,
                                 ampc_swallow_stats *sw, const void *grad, ampc_dtype gdt);
} ampc_backend;

/* The tables (src/backend/cpu/cpu.c; each built backend's folder). */
extern const ampc_backend ampc_backend_cpu_table;
extern const ampc_backend ampc_backend_cpu_split_table;
/* The backend of a device: NULL for an unknown value or a backend not built
 * into this library (src/backend/registry.c). */
const ampc_backend *ampc_device_backend(ampc_device dev);
/* The same, or AMPC_ERR_UNSUPPORTED ("not built") / AMPC_ERR_INVALID_ARG. */
ampc_status ampc_device_backend_get(ampc_device dev, const ampc_backend **out);
/* Whether be runs op with these arguments (its desc's supports(); none:
 * every op). */
static inline bool ampc_backend_supports(const ampc_backend *be, const ampc_op_query *op) {
  return !be->desc->supports || be->desc->supports(op);
}

/* Copy host -> tensor (to_device) unless both are the same buffer (the CPU
 * backend's host mirrors alias its tensors). */
static inline ampc_status ampc_backend_put(const ampc_backend *be, void *dev, const void *host,
                                           size_t bytes) {
  return dev == host || bytes == 0 ? AMPC_OK : be->to_device(dev, host, bytes);
}
/* Copy tensor -> host unless both are the same buffer. */
static inline ampc_status ampc_backend_get(const ampc_backend *be, void *host, const void *dev,
                                           size_t bytes) {
  return dev == host || bytes == 0 ? AMPC_OK : be->to_host(host, dev, bytes);
}

#endif
