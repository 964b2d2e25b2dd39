/*
 * src/backend/cuda/cuda_nn.h: the layers of ampc/nn.h and the gradient pass
 * and optimizer step of ampc/amp.h and ampc/optim.h on an NVIDIA GPU, private
 * to the CUDA backend: its table (cuda_backend.c) is how the model and the
 * trainer reach them (src/backend/backend.h).
 *
 * Every function here takes exactly the arguments of its CPU twin (named
 * without the `cuda_`: ampc_cuda_layernorm_forward is ampc_layernorm_forward
 * on the device), so the table holds either set. tests/test_cuda_nn.c checks
 * them against their twins on a GPU (bench/gpu/check.sh runs it there). The
 * differences:
 *  - Tensor buffers (x, y, weights, gradients, mean/rstd, ids, masks, the
 *    parameter table's role buffers) are device pointers (ampc_cuda_malloc).
 *    `stats` (ampc_round_stats) stays a host pointer: when it is given, the
 *    device counts what the store did (warp-reduced counters) and the call
 *    waits for the stream to add the counts into *stats. Scalars returned
 *    through pointers in ampc/amp.h (nonfinite, norm) are host pointers too
 *    (the call waits).
 *  - They run on the stream of the context bound to the calling thread
 *    (ampc_cuda_bind), asynchronously unless stated. `ws` (ampc_scratch) is
 *    ignored: device scratch comes from the context.
 *  - The rounding telemetry's tally (ampc/tally.h): while one is bound to
 *    the calling thread, every store the CPU twin of a layer counts is
 *    counted on the device too (the same values: an FP32 scratch the CPU
 *    counts is counted here, a copy it does not count is not) with the
 *    histogram of the FP32 values (warp-aggregated atomics), and each call
 *    waits for its counts and adds them into the tally (ampc_tally_add):
 *    slow, for the sampled steps only. The results do not change: a GEMM
 *    whose 16-bit C cuBLASLt rounds itself runs once more into FP32 and that
 *    twin's rounding is counted (sums within the same bound, not cuBLASLt's
 *    exact ones). Not counted: the optimizer step (the telemetry ends before
 *    it; its CPU twin counts its stores), and the FP16-accumulation ablation
 *    counts its F16 sums as they are (no flush or overflow to see).
 *  - Not yet on the GPU (AMPC_ERR_UNSUPPORTED): FP8 projections (fp8-mixed),
 *    and the FP16-accumulation ablation (AMPC_ACC_F16) wherever a layer's
 *    GEMM has an F32 or BF16 operand or output (cuBLASLt's COMPUTE_16F
 *    takes F16 only): the attention backward pass (FP32 dP, dS), a linear
 *    layer with stats, an attention forward pass with FP32 probabilities.
 *    A mixed-dtype GEMM with K = 0 is refused too (the CPU gives beta C).
 *  - Outputs must not overlap inputs except where the CPU twin says a
 *    layer works in place (dx may be dy); the ViT tokens' dpatches must not
 *    overlap dy (the CPU's memmove allows it; the GPU's copy does not).
 *
 * Numerics (DESIGN.md 2): the same as the CPU's. Each kernel widens its
 * inputs to FP32, computes in FP32 (and in double where the CPU uses
 * double: layer-norm statistics, L2 norms, loss sums), and rounds each stored value once,
 * round-to-nearest-even, with CUDA's conversion intrinsics (__float2half_rn, __float2bfloat16_rn).
 * The CUDA files are compiled with --fmad=false, so a multiply and an add stay two roundings, as in
 * the C code. What follows:
 *  - element-wise ops (residual add, GELU and its derivative, the ViT token
 *    add, the gradient add, masked mean pooling, the optimizer update and the
 *    re-rounding of the working weights) give the CPU's bits: the same
 *    operations in the same order (GELU: src/nn/gelu_math.h is compiled for
 *    both; AdamW/SGD: the per-element code of src/optim/optim.c; the batch
 *    and row sums of the ViT tokens, embeddings and pooling in the CPU's
 *    order);
 *  - row reductions (layer norm statistics in double, softmax sums in FP32,
 *    the L2 norm, the gradient norm) run as trees across a warp or block, in
 *    an order fixed by the launch shape (the same bits run to run), not the
 *    CPU's sequential order: in double the difference almost never reaches
 *    the FP32 result; softmax's FP32 row sums differ by a few ulps
 *    (|error| <= n * 2^-24 relative either way).
 * tests/test_cuda_nn.c checks each function against its CPU twin with these
 * bounds (bit-equal where stated) on a GPU, and skips where there is none.
 *
 * Errors: those of the CPU twin for bad arguments (checked on the host before
 * any launch; nothing is written), AMPC_ERR_INVALID_ARG when no context is
 * bound, AMPC_ERR_DEVICE with CUDA's message when a launch fails,
 * AMPC_ERR_UNSUPPORTED in a build without CUDA.
 */
#ifndef AMPC_CUDA_NN_H
#define AMPC_CUDA_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/amp.h"
#include "backend/cuda/cuda.h"
#include "ampc/nn.h"
#include "ampc/optim.h"
#include "ampc/params.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bind ctx (NULL: none) to the calling thread for the functions below, as
 * the CUDA runtime's current device; returns the context bound before. */
ampc_cuda_ctx *ampc_cuda_bind(ampc_cuda_ctx *ctx);
/* The context bound to the calling thread, or NULL. */
ampc_cuda_ctx *ampc_cuda_current(void);

/* ---- layers (ampc/nn.h; shapes, dtypes and semantics as there) ----------- */

ampc_status ampc_cuda_add_forward(int64_t n, const void *a, ampc_dtype adt, const void *b,
                                  ampc_dtype bdt, void *y, ampc_dtype ydt, ampc_round_stats *stats);
ampc_status ampc_cuda_gelu_forward(int64_t n, const void *x, ampc_dtype xdt, void *y,
                                   ampc_dtype ydt, ampc_round_stats *stats);
ampc_status ampc_cuda_gelu_backward(int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                                    ampc_dtype xdt, void *dx);
/* mean, rstd: device FP32 [m]. */
ampc_status ampc_cuda_layernorm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt,
                                        const void *gamma, const void *beta, ampc_dtype wdt,
                                        float eps, void *y, ampc_dtype ydt, float *mean,
                                        float *rstd, ampc_round_stats *stats);
/* dgamma and dbeta: summed over rows in double, in blocks of 32 rows then
 * block by block (the CPU's blocks; within a block a fixed order). */
ampc_status ampc_cuda_layernorm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                         const void *x, ampc_dtype xdt, const void *gamma,
                                         ampc_dtype wdt, const float *mean, const float *rstd,
                                         void *dx, void *dgamma, void *dbeta, ampc_scratch *ws);
/* key_mask: device uint8 [m / rows_per_mask, n], or NULL. */
ampc_status ampc_cuda_softmax_forward(int64_t m, int64_t n, const void *x, ampc_dtype xdt,
                                      float scale, const uint8_t *key_mask, int64_t rows_per_mask,
                                      void *y, ampc_dtype ydt, ampc_round_stats *stats);
ampc_status ampc_cuda_softmax_backward(int64_t m, int64_t n, const void *dy, ampc_dtype gdt,
                                       const void *y, ampc_dtype ydt, float scale, void *dx);
/* ids: device int32 [b, t]. An id outside [0, vocab) is not checked on the
 * device (it would cost a copy back): the caller's data loader checks ids. */
ampc_status ampc_cuda_embedding_forward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                        int64_t vocab, const void *tok, const void *pos,
                                        ampc_dtype wdt, void *y, ampc_dtype ydt,
                                        ampc_round_stats *stats);
/* Each id's rows summed in FP32 in row order (a stable counting sort on the
 * device), then added to dtok with one rounding: the CPU's bits. */
ampc_status ampc_cuda_embedding_backward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                         int64_t vocab, const void *dy, ampc_dtype gdt, void *dtok,
                                         void *dpos, ampc_round_stats *stats, ampc_scratch *ws);
ampc_status ampc_cuda_vit_tokens_forward(int64_t b, int64_t np, int64_t d, const void *patches,
                                         ampc_dtype pdt, const void *cls, const void *pos,
                                         ampc_dtype wdt, void *y, ampc_dtype ydt);
ampc_status ampc_cuda_vit_tokens_backward(int64_t b, int64_t np, int64_t d, const void *dy,
                                          ampc_dtype gdt, void *dpatches, void *dcls, void *dpos);
/* v: device FP32 [n]. */
ampc_status ampc_cuda_grad_add_f32(int64_t n, const float *v, void *g, ampc_dtype gdt);
/* mask: device uint8 [b, t], or NULL. */
ampc_status ampc_cuda_mean_pool_forward(int64_t b, int64_t t, int64_t d, const void *x,
                                        ampc_dtype xdt, const uint8_t *mask, void *y,
                                        ampc_dtype ydt, ampc_round_stats *stats);
ampc_status ampc_cuda_mean_pool_backward(int64_t b, int64_t t, int64_t d, const void *dy,
                                         ampc_dtype gdt, const uint8_t *mask, void *dx);
ampc_status ampc_cuda_l2norm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt, float eps,
                                     void *y, ampc_dtype ydt, ampc_round_stats *stats);
ampc_status ampc_cuda_l2norm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                      const void *x, ampc_dtype xdt, float eps, void *dx);

/* ---- GEMM-type layers (cuda_gemm_batched.cu, cuda_linear.cu, cuda_attention.cu) ---- */

/* ampc_gemm_strided_batched (ampc/gemm.h) on device buffers, any mix of F32,
 * F16 and BF16 operands: two 16-bit operands of one dtype run on Tensor
 * Cores with FP32 sums (cuBLASLt COMPUTE_32F); FP32 operands as FP32 SGEMM
 * without TF32 (COMPUTE_32F_PEDANTIC); a mixed pair is widened to FP32 in
 * device scratch (exact: the CPU widens while packing) and multiplied in
 * FP32, and a 16-bit C of an FP32 product passes through an FP32 copy (one
 * rounding). Bound as the CPU's: |err| <= (K + 3) 2^-24 sum |ab| plus the
 * output rounding.
 * AMPC_ACC_F16 (the FP16-accumulation ablation, the 16-true preset): F16 A
 * and B on cuBLASLt's COMPUTE_16F, the Tensor Cores' FP16 sums (an F16 C
 * straight, alpha and beta in binary16; an F32 or BF16 C through F16
 * scratch and the CPU's FP32 epilogue alpha s + beta C, one rounding):
 * within (K + 3) 2^-11 sum |ab| of the exact product plus the output
 * rounding. Other operands (an FP32 dS in the attention's backward pass,
 * BF16), or every product after ampc_cuda_set_acc16_exact(true): a kernel
 * computing the CPU's definition (ampc/gemm.h AMPC_ACC_F16: s <- fp16(a b +
 * s) in K order), the CPU's bits (NaN payloads aside: a NaN here is CUDA's
 * canonical one); one thread per element, slow. */
ampc_status ampc_cuda_gemm_strided_batched(ampc_op opa, ampc_op opb, int64_t m, int64_t n,
                                           int64_t k, float alpha, const void *a, ampc_dtype a_dt,
                                           int64_t lda, int64_t stride_a, const void *b,
                                           ampc_dtype b_dt, int64_t ldb, int64_t stride_b,
                                           float beta, void *c, ampc_dtype c_dt, int64_t ldc,
                                           int64_t stride_c, int64_t batch, ampc_acc acc);
/* Process-wide: exact = true puts every FP16-accumulated product of
 * ampc_cuda_gemm_strided_batched on the kernel with the CPU's bits (parity
 * checks), false (the default) lets F16 x F16 products run on COMPUTE_16F.
 * The environment variable AMPC_CUDA_ACC16=exact sets it at the first GEMM. */
void ampc_cuda_set_acc16_exact(bool exact);
/* Process-wide: on = true lets the layers launch their typed kernels where
 * they have one for the dtypes at hand (the presets' combinations): the
 * same kernel source with the dtypes as template constants instead of
 * arguments, or (layer norm) the row held in registers, the same
 * operations in the same order, so the generic kernels' bits; kernels that
 * batch several of the generic kernels' launches into one (the attention's
 * head copies), also the same bits; and one with sums of its own: the bias
 * gradient's column sums in a fixed order of row splits (the same bits run
 * to run, not cuBLASLt's ones . dy; both within the GEMM bound). False (the
 * default until they are measured on a device, docs/BENCHMARKS.md) keeps the
 * generic kernels. The environment variable AMPC_CUDA_TYPED=1 sets it at the
 * first use. ampc_cuda_typed_kernels says which is in force (false in a build
 * without CUDA). */
void ampc_cuda_set_typed_kernels(bool on);
bool ampc_cuda_typed_kernels(void);
/* How many typed kernels this process has launched (0 without CUDA): the
 * tests' check that a typed path ran rather than falling back. */
long long ampc_cuda_typed_launches(void);
/* The FP8 linear layers of fp8-mixed (ampc/nn.h, "FP8 linear layers"):
 * the same casts (bit for bit: the quantized operands are exact FP8 values
 * in bfloat16 containers), the same delayed-scaling bookkeeping (each
 * quantizer's amax and counters, host structs, updated when the call
 * returns: it waits for the stream), the products on the bfloat16 Tensor
 * Cores with FP32 sums and the dequantization in alpha (within the GEMM
 * bound of the CPU's; not yet cuBLASLt's FP8 GEMM, so no FP8 speed). The
 * quantized copies go to f->ws when it is device memory large enough
 * (ampc_linear_fp8_ws_bytes; the model's is in its device arena; checked
 * with cudaPointerGetAttributes), else to device scratch of the context.
 * ampc_cuda_fp8_cast_bf16: src and dst device buffers, q a host struct. */
ampc_status ampc_cuda_fp8_cast_bf16(ampc_fp8_q *q, const void *src, ampc_dtype sdt, int64_t rows,
                                    int64_t cols, int64_t ld, uint16_t *dst, bool count);
ampc_status ampc_cuda_linear_forward_fp8(int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const void *b, void *y, ampc_dtype ydt, ampc_acc acc,
                                         ampc_linear_fp8 *f, ampc_round_stats *stats);
ampc_status ampc_cuda_linear_backward_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                          ampc_dtype gdt, const void *x, ampc_dtype xdt,
                                          const void *w, ampc_dtype wdt, void *dx, void *dw,
                                          void *db, ampc_acc acc, ampc_linear_fp8 *f,
                                          ampc_scratch *ws);
ampc_status ampc_cuda_linear_dgrad_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                       ampc_dtype gdt, const void *w, ampc_dtype wdt, float beta,
                                       void *c, ampc_dtype cdt, ampc_acc acc, ampc_linear_fp8 *f,
                                       bool count_dy);
/* The bias is laid into y rounded to y's dtype and added by the GEMM in FP32
 * (beta = 1), as the CPU does; with stats through an FP32 copy. */
ampc_status ampc_cuda_linear_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                     const void *w, ampc_dtype wdt, const void *b, void *y,
                                     ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats);
/* db += the column sums of dy, as the product ones [1, m] . dy on cuBLASLt:
 * FP32 sums (in cuBLASLt's order, within (m + 3) 2^-24 sum |dy| of the
 * CPU's row-order sums) rounded once into db. (A thread per column in row
 * order gave the CPU's bits but took 70 % of a 16-mixed mm-base step on an
 * H200.) dW += likewise with FP32 sums and one rounding, through FP32
 * scratch for a 16-bit dW (cuBLASLt's own epilogue would round twice). */
ampc_status ampc_cuda_linear_backward(int64_t m, int64_t k, int64_t n, const void *dy,
                                      ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                      ampc_dtype wdt, void *dx, void *dw, void *db, ampc_acc acc,
                                      ampc_scratch *ws);
/* FP32 sums: q, k, v copied head-major and one strided batched GEMM over
 * the b * h heads per product; FP16 accumulation (and sizes over 2^31):
 * one GEMM launch per head, batched over the samples; key_mask device. */
ampc_status ampc_cuda_attention_forward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                        const void *q, int64_t ldq, const void *k, int64_t ldk,
                                        const void *v, int64_t ldv, ampc_dtype xdt,
                                        const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                        void *probs, ampc_dtype pdt, void *out, int64_t ldo,
                                        ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats);
/* ampc_attention_probs on the GPU: the scores and probabilities of
 * ampc_cuda_attention_forward again, through the same kernels (the same
 * bits), counting nothing. */
ampc_status ampc_cuda_attention_probs(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                      const void *q, int64_t ldq, const void *k, int64_t ldk,
                                      ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                                      ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_acc acc);
/* dP and dS in FP32 as on the CPU; dq and dk formed in FP32 and rounded once. */
ampc_status ampc_cuda_attention_backward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                         const void *q, int64_t ldq, const void *k, int64_t ldk,
                                         const void *v, int64_t ldv, ampc_dtype xdt,
                                         const void *probs, ampc_dtype pdt, const void *dout,
                                         int64_t lddo, ampc_dtype gdt, void *dq, int64_t lddq,
                                         void *dk, int64_t lddk, void *dv, int64_t lddv,
                                         ampc_acc acc, ampc_scratch *ws);
/* ampc_attention_forward_ex / ampc_attention_backward_ex (ampc/nn.h): the
 * products' P and dS rounded to mdt. A 16-bit mdt needs FP32 sums (the
 * head-major path): with AMPC_ACC_F16, AMPC_ERR_UNSUPPORTED. The forward
 * rounds the whole batch's P at once into the context's scratch (b*h*tq*tk
 * mdt values: ampc_mmodel_attn_cast_bytes, in a slot of
 * ampc_cuda_scratch_slot_bytes of that, in the memory account). */
ampc_status ampc_cuda_attention_forward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                           const void *q, int64_t ldq, const void *k, int64_t ldk,
                                           const void *v, int64_t ldv, ampc_dtype xdt,
                                           const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                           void *probs, ampc_dtype pdt, ampc_dtype mdt, void *out,
                                           int64_t ldo, ampc_dtype odt, ampc_acc acc,
                                           ampc_round_stats *stats);
ampc_status ampc_cuda_attention_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h,
                                            int64_t dh, const void *q, int64_t ldq, const void *k,
                                            int64_t ldk, const void *v, int64_t ldv, ampc_dtype xdt,
                                            const void *probs, ampc_dtype pdt, ampc_dtype mdt,
                                            const void *dout, int64_t lddo, ampc_dtype gdt,
                                            void *dq, int64_t lddq, void *dk, int64_t lddk,
                                            void *dv, int64_t lddv, ampc_acc acc, ampc_scratch *ws);

/* ampc_mha_forward / ampc_mha_backward_ex: the CPU's composition
 * (src/nn/mha_impl.h) over the layers above; the cache's buffers are device
 * buffers; fp8 (the projections' quantizers, host structs) through the FP8
 * linear layers above. */
ampc_status ampc_cuda_mha_forward(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                  const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                                  const void *bq, const void *wk, const void *bk, const void *wv,
                                  const void *bv, const void *wo, const void *bo, ampc_dtype wdt,
                                  const uint8_t *key_mask, const ampc_mha_cache *cache,
                                  ampc_dtype pdt, void *y, ampc_acc acc,
                                  ampc_linear_fp8 *const *fp8, ampc_round_stats *stats);
ampc_status ampc_cuda_mha_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                      const void *xq, const void *xkv, ampc_dtype adt,
                                      const void *wq, const void *wk, const void *wv,
                                      const void *wo, ampc_dtype wdt, const ampc_mha_cache *cache,
                                      ampc_dtype pdt, const void *dy, ampc_dtype gdt, void *dxq,
                                      void *dxkv, float dxkv_scale, void *dwq, void *dbq, void *dwk,
                                      void *dbk, void *dwv, void *dbv, void *dwo, void *dbo,
                                      ampc_acc acc, ampc_linear_fp8 *const *fp8, ampc_scratch *ws);

/* ---- patch embedding and losses (cuda_loss.cu) ------------------- */

/* images: device uint8 [b, hh, ww, c]; the unfold gives the CPU's bits, the
 * product is the linear layer's. */
ampc_status ampc_cuda_patch_embed_forward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                          int64_t d, const uint8_t *images, float px_scale,
                                          float px_shift, const void *w, ampc_dtype wdt,
                                          const void *bias, void *y, ampc_dtype ydt, ampc_acc acc,
                                          ampc_round_stats *stats, ampc_scratch *ws);
ampc_status ampc_cuda_patch_embed_backward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                           int64_t d, const uint8_t *images, float px_scale,
                                           float px_shift, ampc_dtype wdt, const void *dy,
                                           ampc_dtype gdt, void *dw, void *dbias, ampc_acc acc,
                                           ampc_scratch *ws);
/* target: device int32 [m]; *loss: host (the call waits). CUDA's expf and
 * log: within a few ulps of the CPU's, not bit-equal. */
ampc_status ampc_cuda_cross_entropy_forward(int64_t m, int64_t c, const void *logits,
                                            ampc_dtype xdt, const int32_t *target, float *loss);
/* Waits for the device's check of the targets. */
ampc_status ampc_cuda_cross_entropy_backward(int64_t m, int64_t c, const void *logits,
                                             ampc_dtype xdt, const int32_t *target,
                                             float loss_scale, void *dlogits, ampc_dtype gdt);
/* t: device FP32 [m]; *loss: host. */
ampc_status ampc_cuda_bce_logits_forward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                         float *loss);
ampc_status ampc_cuda_bce_logits_backward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                          float loss_scale, void *dx, ampc_dtype gdt);
/* sim: device [b, b]; *loss and *dlog_temp: host. */
ampc_status ampc_cuda_infonce_forward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                      float *loss);
ampc_status ampc_cuda_infonce_backward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                       float loss_scale, void *dsim, ampc_dtype gdt,
                                       float *dlog_temp, ampc_scratch *ws);

/* ---- the gradient pass and the optimizer (ampc/amp.h, ampc/optim.h) ------ */

/* ---- rows, stores and memory (cuda_rows.cu) ------------------------
 * The CPU twins' bits: the scatter-add sums each output element's rows in
 * the CPU's row order, the argmax walks each row in the CPU's column order
 * (first on ties, -1 for a row holding a NaN). Indices are device memory and
 * are not range-checked on the device (the caller's, as in the model, which
 * builds them). Stores and conversions take F32, F16 and BF16 only (FP8:
 * AMPC_ERR_INVALID_ARG); a NaN converted to 16 bits becomes the canonical
 * quiet NaN, also in a same-dtype gather or convert (the CPU copies its
 * payload and sign): NaN payloads are the one exception to "bit-equal". */
ampc_status ampc_cuda_gather_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                  const void *x, ampc_dtype xdt, void *y, ampc_dtype ydt);
ampc_status ampc_cuda_scatter_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                   const void *x, ampc_dtype dt, void *y);
ampc_status ampc_cuda_scatter_add_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                       const void *x, ampc_dtype xdt, const void *x2,
                                       ampc_dtype x2dt, float *y, int64_t ldy);
ampc_status ampc_cuda_argmax_rows(int64_t m, int64_t n, const void *x, ampc_dtype xdt,
                                  bool skip_diag, int32_t *idx);
/* ampc_store_f32 and ampc_convert (ampc/dtype.h) on device buffers */
ampc_status ampc_cuda_store_f32(void *y, ampc_dtype dt, const float *src, size_t n,
                                ampc_round_stats *stats);
ampc_status ampc_cuda_convert(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                              size_t n);
/* x [n] FP32 *= s in place */
ampc_status ampc_cuda_scale_f32(int64_t n, float *x, float s);
/* The trainer's FP32 gradient staging on the device (micro-batches summed in
 * FP32, per-loss scaling): stage [n] FP32 = (first ? 0 : stage) + widen(g) *
 * inv for g [n] (gdt F32, F16 or BF16); inv == 1 skips the product. The
 * CPU's bits (src/backend/cpu/cpu.c: cpu_stage_f32: one product and one sum,
 * no fma). Errors: n < 0, NULL buffers, a bad dtype (AMPC_ERR_INVALID_ARG). */
ampc_status ampc_cuda_stage_f32(int64_t n, const void *g, ampc_dtype gdt, float inv, bool first,
                                float *stage);
/* bytes of zeros at p; rows rows of width bytes, device to device, between
 * pitched buffers (cudaMemsetAsync, cudaMemcpy2DAsync on the bound stream) */
ampc_status ampc_cuda_zero(void *p, size_t bytes);
ampc_status ampc_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t rows);

/* ampc_grad_unscale_check on device gradients g [n]: *nonfinite and *norm
 * are host pointers (the call waits). The sum of squares is in double over
 * the CPU's 4096-element chunks, each chunk a fixed tree, the chunks added in
 * order: the same bits every run; against the CPU, |difference| <= 2^-50
 * relative. */
ampc_status ampc_cuda_grad_unscale_check(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                         int64_t *nonfinite, double *norm, ampc_scratch *ws);

/* ampc_optim_step_from on a parameter table whose role buffers (w, master,
 * grad, m, v, comp) and `grad` are device buffers (the table's metadata,
 * P->p, stays on the host). Every element's update is the CPU's arithmetic
 * (AdamW and SGD, FP32 or 16-bit state, master or not, stochastic rounding,
 * Kahan): the same bits. sw (host; NULL or P->count entries) makes the call
 * wait. */
ampc_status ampc_cuda_optim_step_from(ampc_params *P, const ampc_optim_config *c, int64_t t,
                                      float lr, const float grad_mult[AMPC_BRANCH_COUNT],
                                      float clip_coef, ampc_swallow_stats *sw, const void *grad,
                                      ampc_dtype gdt);

#ifdef __cplusplus
}
#endif
#endif
