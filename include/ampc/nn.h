/*
 * ampc/nn.h: layers as forward/backward pairs on raw buffers (DESIGN.md 1, 2, 5).
 *
 * Conventions for every function here:
 *  - Tensors are row-major buffers with an explicit dtype (F32, F16 or BF16);
 *    shapes are given per argument as [rows, cols].
 *  - A kernel reads its inputs, widens them to FP32 in registers, computes in
 *    FP32 (reductions that decide numerical stability, such as the layer-norm
 *    mean and variance, in double), and rounds each stored result once
 *    (round-to-nearest-even) to the output's dtype.
 *  - Backward functions ACCUMULATE parameter gradients (dW += ...), each
 *    element formed in FP32 and added to the stored gradient with one rounding;
 *    input gradients (dx) are overwritten unless stated otherwise.
 *  - `stats` (may be NULL) receives the exact rounding telemetry of the main
 *    output (ampc_round_stats: underflow, subnormal, overflow, NaN, max |x|).
 *  - Errors: AMPC_ERR_INVALID_ARG for a NULL buffer, a non-positive size or an
 *    unsupported dtype (message names the argument); AMPC_ERR_NOMEM. Nothing is
 *    written on an argument error.
 */
#ifndef AMPC_NN_H
#define AMPC_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/gemm.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scratch memory -------------------------------------------------------------- */

/* Scratch memory for one layer call, carved by the caller from its arena
 * (DESIGN.md 1: layers take a workspace; the model's layout counts it, so no
 * layer allocates during a training step). base is 64-byte aligned and bytes
 * long; its contents are undefined before and after the call. The layers that
 * need scratch take it as their last argument and say how much in a
 * *_scratch_bytes function; given NULL, or less than that, a layer allocates
 * the rest itself (and frees it before it returns). */
typedef struct ampc_scratch {
  void *base;
  size_t bytes;
} ampc_scratch;

/* ---- linear: y = x W^T + b (torch.nn.Linear layout: W is [out, in]) ------ */

/* x [m, k] (xdt), w [n, k] (wdt), b [n] (wdt, or NULL), y [m, n] (ydt).
 * The product runs on ampc_gemm with accumulation `acc`; the bias is added in
 * FP32 before the single rounding into y. */
ampc_status ampc_linear_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                const void *w, ampc_dtype wdt, const void *b, void *y,
                                ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats);
/* dy [m, n] (gdt); x [m, k] (xdt); w [n, k] (wdt).
 * dx [m, k] (gdt) = dy W (overwritten; skipped if dx is NULL);
 * dw [n, k] (gdt) += dy^T x; db [n] (gdt, or NULL) += column sums of dy. */
ampc_status ampc_linear_backward(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                                 const void *x, ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                 void *dx, void *dw, void *db, ampc_acc acc, ampc_scratch *ws);
/* Scratch of ampc_linear_backward with n outputs: the FP32 bias column sums. */
size_t ampc_linear_backward_scratch_bytes(int64_t n);

/* ---- FP8 linear layers (the fp8-mixed preset) ------------------------------
 * The GEMM inputs of a linear layer quantized per tensor, as NVIDIA
 * Transformer Engine's te.Linear under fp8_autocast with the HYBRID format:
 * x and W to E4M3 in the forward pass, the output gradient dy to E5M2 in the
 * backward pass, each with the delayed scale its owner took from earlier
 * steps' amax (ampc_fp8_update, ampc/amp.h). The products run with FP32
 * accumulation and the dequantization in the GEMM's alpha (scale_inv_a *
 * scale_inv_b, one FP32 product, as cuBLASLt's A/B scale pointers). The
 * quantized operands are exact FP8 values held in BF16 containers (every
 * E4M3 and E5M2 value is a bfloat16 value), so the CPU GEMM gives the sums
 * an FP8 GEMM with FP32 accumulation defines; memory is not saved on the CPU.
 * The bias gradient is summed from the unquantized dy (as TE does). */

/* One tensor's quantizer. A cast: v = fp32(x) * scale (one FP32 product),
 * then one round-to-nearest-even to fmt; finite values past the format's
 * largest (448, 57344) become +-largest (saturated, as TE's casts); inf and
 * NaN stay non-finite (E5M2 inf, E4M3 NaN), so the step's non-finite check
 * still sees an overflow. amax is the max |x| over the values cast (before
 * scaling; NaN ignored), folded in with max: the owner reads and resets it.
 * The counters count the casts of the forward x and W and of dy (the
 * backward pass re-casts x and W with the same scales, uncounted). */
typedef struct ampc_fp8_q {
  ampc_dtype fmt;         /* AMPC_F8_E4M3 or AMPC_F8_E5M2 */
  float scale, scale_inv; /* set by the owner; scale_inv = 1 / scale */
  float amax;             /* written (max) */
  uint64_t values;        /* values cast (counted casts) */
  uint64_t saturated;     /* finite values whose |x * scale| exceeded the largest FP8 value */
  uint64_t flushed;       /* non-zero finite values that became 0 */
} ampc_fp8_q;

/* A linear layer's quantizers: x and w (E4M3), dy (E5M2). ws: where the
 * quantized copies go (ampc_linear_fp8_ws_bytes; may be shared by layers that
 * run one after another; NULL or too small: allocated per call). */
/* An INT8 linear layer for inference (post-training quantization,
 * include/ampc/quant.h): W as int8 [n, k] with scale [n] per output channel
 * or [1] per tensor, and the activation's scale: x_scale > 0 a calibrated
 * (static) one, 0 dynamic (max|x| / 127 of each call's x, as PyTorch's
 * dynamic quantization). */
typedef struct ampc_linear_s8 {
  const int8_t *w;
  const float *scale;
  bool per_channel;
  float x_scale;
  /* w prepared for the INT8 GEMM once (ampc_gemm_s8_prepare; NULL: per
   * call) */
  const ampc_gemm_s8_b *prep;
} ampc_linear_s8;

typedef struct ampc_linear_fp8 {
  ampc_fp8_q x, w, dy;
  ampc_scratch *ws;
  /* non-NULL: the forward pass runs INT8 (ampc_linear_forward_s8) instead;
   * its backward pass is refused (inference only) */
  const ampc_linear_s8 *s8;
  /* non-NULL (INT8 calibration, include/ampc/quant.h): each forward call
   * first hands the layer's input, as FP32 x [m * k], to
   * observe(observe_user, x, m * k); without s8 the layer then runs as it
   * would without f (unquantized) */
  void (*observe)(void *user, const float *x, int64_t n);
  void *observe_user;
  /* true (and s8 NULL): INT8 fake quantization for quantization-aware
   * training instead of FP8 (ampc_linear_forward_fp8 below) */
  bool fake_q8;
} ampc_linear_fp8;

/* y [m, n] = dequant(xq [m, k] Wq^T) + b: x (xdt) quantized per tensor to
 * symmetric int8 with s->x_scale (or dynamically), round-half-even and
 * clamped to [-127, 127]; the product in exact INT32 (ampc_gemm_s8), then
 * acc * (x_scale * w_scale[j]) + b[j] in FP32, rounded once to ydt. b (bdt,
 * may be NULL); ws: scratch (NULL: allocated per call). Errors:
 * AMPC_ERR_INVALID_ARG (sizes, NULL, a scale that is
 * not positive and finite, k above ampc_gemm_s8's limit), AMPC_ERR_NOMEM,
 * AMPC_ERR_NUMERIC (a non-finite x under dynamic scaling: no scale fits). */
ampc_status ampc_linear_forward_s8(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                   const ampc_linear_s8 *s, const void *b, ampc_dtype bdt, void *y,
                                   ampc_dtype ydt, ampc_scratch *ws);
/* The workspace ampc_linear_forward_s8 uses for [m, k] -> [m, n] (less: the
 * rest is allocated per call). */
size_t ampc_linear_s8_ws_bytes(int64_t m, int64_t k, int64_t n);

/* INT8 fake quantization (quantization-aware training: Jacob et al. 2018,
 * "Quantization and Training of Neural Networks for Efficient
 * Integer-Arithmetic-Only Inference"; PyTorch's FakeQuantize), used by
 * ampc_linear_forward_fp8, _backward_fp8 and _dgrad_fp8 when f->fake_q8:
 * fq(v) = q * s with q = round-half-even(v / s) clamped to [-127, 127], the
 * values ampc_quantize and ampc_linear_forward_s8 give at inference: x per
 * tensor and per call with s = max|x| / 127, W per output channel (row j of
 * W [n, k]) with s_j = max|W_j| / 127; an all-zero set has s = 1 (fq = 0).
 * Forward: y = fq(x) fq(W)^T + b, the product on the dequantized FP32
 * values (FP32 operands, the layer's acc), rounded once to ydt. Backward,
 * the straight-through estimator (Bengio, Leonard, Courville 2013):
 * dx = dy fq(W), dW += dy^T fq(x), db += column sums of dy; fq(x) and fq(W)
 * are recomputed from x and W (the same bits as the forward's), and the
 * gradient passes fq unchanged (max-based scales clip nothing). A NaN or
 * infinite value is not quantized: it passes fq as itself (and the scale
 * is the max over the finite values), so a non-finite activation reaches the
 * loss and the step's non-finite check instead of being hidden as 0.
 * Workspace (f->ws; too small: allocated per call): */
size_t ampc_linear_fq8_ws_bytes(int64_t m, int64_t k, int64_t n);

/* x, w, dy quantizers with scale 1, amax 0, zero counters. */
void ampc_linear_fp8_init(ampc_linear_fp8 *f, ampc_scratch *ws);

/* Cast a rows x cols matrix src (row stride ld, dtype sdt: F32, F16, BF16)
 * with q (above) into dst [rows * cols] dense bfloat16 bits; count: update
 * q's counters. Errors: AMPC_ERR_INVALID_ARG (bad dtype, NULL, sizes). */
ampc_status ampc_fp8_cast_bf16(ampc_fp8_q *q, const void *src, ampc_dtype sdt, int64_t rows,
                               int64_t cols, int64_t ld, uint16_t *dst, bool count);

/* Workspace of the FP8 forward and backward passes of one [m, k] -> [m, n]
 * linear layer: the quantized x, W and dy. */
size_t ampc_linear_fp8_ws_bytes(int64_t m, int64_t k, int64_t n);

/* ampc_linear_forward with x and W quantized by f (f NULL: exactly
 * ampc_linear_forward). y = (xq Wq^T) * x.scale_inv * w.scale_inv + b.
 * f->fake_q8: y = fq(x) fq(W)^T + b (INT8 fake quantization, above). */
ampc_status ampc_linear_forward_fp8(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                    const void *w, ampc_dtype wdt, const void *b, void *y,
                                    ampc_dtype ydt, ampc_acc acc, ampc_linear_fp8 *f,
                                    ampc_round_stats *stats);
/* ampc_linear_backward with dy quantized to E5M2 by f->dy and W, x re-cast
 * with the forward's scales: dx = (dyq Wq) * dy.scale_inv * w.scale_inv,
 * dW += (dyq^T xq) * dy.scale_inv * x.scale_inv, db += column sums of dy.
 * f NULL: exactly ampc_linear_backward. f->fake_q8: dx = dy fq(W),
 * dW += dy^T fq(x), db += column sums of dy (above). */
ampc_status ampc_linear_backward_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                     ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                     ampc_dtype wdt, void *dx, void *dw, void *db, ampc_acc acc,
                                     ampc_linear_fp8 *f, ampc_scratch *ws);
/* c [m, k] (cdt) = (dy [m, n] . W [n, k]) (+ beta * c): the input-gradient
 * product of a linear layer on its own, with f's dy and w casts when f is
 * not NULL (count_dy: count the dy cast), else plain; f->fake_q8:
 * dy . fq(W). */
ampc_status ampc_linear_dgrad_fp8(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                                  const void *w, ampc_dtype wdt, float beta, void *c,
                                  ampc_dtype cdt, ampc_acc acc, ampc_linear_fp8 *f, bool count_dy);

/* ---- fused layers: a linear layer and the elementwise step after it -------
 * One call for what the model runs as two, with the step formed in the
 * GEMM's store on each finished block of the product (ampc_gemm_ex's post)
 * while it is in cache, as cuBLASLt's epilogues (CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
 * _DGELU, _BGRADB) and llm.c's fused layers do on a GPU. The results are the
 * bits of the two calls in sequence (the product rounded into its own
 * buffer first, then the step on the rounded values); with f (an FP8 or INT8
 * site), round stats or AMPC_ACC_F16 they are those two calls. Errors: the
 * two layers' (AMPC_ERR_INVALID_ARG naming the fused function), and
 * AMPC_ERR_INVALID_ARG when an output shares memory with an input or with
 * another output (except where stated): the fused layer writes each block
 * of its product while other blocks still read, so such a call would not
 * give the two layers' values. */

/* The MLP's first layer: h [m, n] (hdt) = x W^T + b as ampc_linear_forward_fp8
 * (kept for the backward pass), y [m, n] (ydt) = gelu(h) as ampc_gelu_forward
 * (y may be h itself, with h's dtype). */
ampc_status ampc_linear_gelu_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                     const void *w, ampc_dtype wdt, const void *b, void *h,
                                     ampc_dtype hdt, void *y, ampc_dtype ydt, ampc_acc acc,
                                     ampc_linear_fp8 *f, ampc_round_stats *stats);
/* An output projection and its residual add: t [m, n] (tdt) = x W^T + b,
 * y [m, n] (ydt) = r + t as ampc_add_forward (r [m, n] in rdt; y may be r
 * itself, with r's dtype). */
ampc_status ampc_linear_residual_forward(int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const void *b, void *t, ampc_dtype tdt, const void *r,
                                         ampc_dtype rdt, void *y, ampc_dtype ydt, ampc_acc acc,
                                         ampc_linear_fp8 *f, ampc_round_stats *stats);
/* The MLP's second layer's backward pass with the GELU's: as
 * ampc_linear_backward_fp8 (dx [m, k] = dy W, dW += dy^T x, db += the
 * column sums of dy) followed by ampc_gelu_backward: dh [m, k] (gdt) =
 * dx * gelu'(h), h [m, k] (hdt) the GELU's input; no two of dy, x, W, h,
 * dx, dh, dW, db share memory. */
ampc_status ampc_linear_backward_gelu(int64_t m, int64_t k, int64_t n, const void *dy,
                                      ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                      ampc_dtype wdt, const void *h, ampc_dtype hdt, void *dx,
                                      void *dh, void *dw, void *db, ampc_acc acc,
                                      ampc_linear_fp8 *f, ampc_scratch *ws);
/* The residual add and the layer norm after it, in one pass over the rows:
 * s [m, d] (sdt) = a + b as ampc_add_forward, y = ampc_layernorm_forward of
 * s (mean, rstd saved as there). */
ampc_status ampc_add_layernorm_forward(int64_t m, int64_t d, const void *a, ampc_dtype adt,
                                       const void *b, ampc_dtype bdt, void *s, ampc_dtype sdt,
                                       const void *gamma, const void *beta, ampc_dtype wdt,
                                       float eps, void *y, ampc_dtype ydt, float *mean, float *rstd,
                                       ampc_round_stats *stats);

/* ---- layer norm (Ba, Kiros, Hinton 2016; torch.nn.LayerNorm) --------------- */

/* x [m, d] (xdt), gamma/beta [d] (wdt), y [m, d] (ydt); saves mean [m] and
 * rstd [m] (FP32) for the backward pass. Mean and variance are two-pass sums
 * in double, so a constant row gives x - mean = 0 exactly and y = beta (no
 * NaN even for eps = 1e-12), and a 16-bit input with |x - mean| = 256 does not
 * overflow (256^2 > 65504 is only ever formed in double). */
ampc_status ampc_layernorm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt,
                                   const void *gamma, const void *beta, ampc_dtype wdt, float eps,
                                   void *y, ampc_dtype ydt, float *mean, float *rstd,
                                   ampc_round_stats *stats);
/* dy [m, d] (gdt) -> dx [m, d] (gdt, overwritten); dgamma, dbeta [d] (gdt) +=. */
ampc_status ampc_layernorm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                    const void *x, ampc_dtype xdt, const void *gamma,
                                    ampc_dtype wdt, const float *mean, const float *rstd, void *dx,
                                    void *dgamma, void *dbeta, ampc_scratch *ws);
/* The layer norm's backward pass and the residual add after it (fused, one
 * pass over the rows): ampc_layernorm_backward, then dres [m, d] (gdt) =
 * dres + dx as ampc_add_forward forms it (the residual stream's gradient
 * gathering the branch's); dres shares no memory with dx or dy. */
ampc_status ampc_layernorm_backward_add(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                        const void *x, ampc_dtype xdt, const void *gamma,
                                        ampc_dtype wdt, const float *mean, const float *rstd,
                                        void *dx, void *dgamma, void *dbeta, void *dres,
                                        ampc_scratch *ws);
/* Scratch of ampc_layernorm_backward on m rows of d: the double partial sums
 * of dgamma and dbeta per block of 32 rows (and 4d floats for d > 2048). */
size_t ampc_layernorm_backward_scratch_bytes(int64_t m, int64_t d);

/* ---- GELU, erf form (Hendrycks & Gimpel 2016; torch's default) -------------- */

/* y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), n elements. Phi(x) and the
 * backward factor Phi(x) + x phi(x) are evaluated in double (exp and a
 * Chebyshev series of erfcx: src/nn/gelu_impl.h) and rounded once to FP32:
 * the correctly rounded FP32 value except within ~1e-15 relative of a
 * rounding boundary (then one ulp), on every path (portable, AVX2, AVX-512:
 * the same bits). 16-bit inputs look the same FP32 values up in a table; the
 * FP32 value is then rounded once to ydt (backward: dy * factor in FP32). */
ampc_status ampc_gelu_forward(int64_t n, const void *x, ampc_dtype xdt, void *y, ampc_dtype ydt,
                              ampc_round_stats *stats);
/* dx = dy * (Phi(x) + x phi(x)), overwritten; a NaN dy gives itself (a NaN
 * x gives itself as gelu and as the factor, on every path). */
ampc_status ampc_gelu_backward(int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                               ampc_dtype xdt, void *dx);

/* ---- residual add: y = a + b (dtypes may differ; one rounding) ------------- */
ampc_status ampc_add_forward(int64_t n, const void *a, ampc_dtype adt, const void *b,
                             ampc_dtype bdt, void *y, ampc_dtype ydt, ampc_round_stats *stats);

/* ---- softmax over the last axis, with a key-padding mask -------------------- */

/* x [m, n] (xdt) scaled by `scale` (e.g. 1/sqrt(head_dim)), y [m, n] (ydt).
 * key_mask (uint8, or NULL for none) has shape [m / rows_per_mask, n]: row r
 * of x uses mask row r / rows_per_mask; 0 = masked (probability exactly 0).
 * Computed in FP32 with the row maximum (over unmasked entries) subtracted, so
 * huge logits (70000 in FP32, 60000 in FP16) give the right probabilities; a
 * row with every key masked gives all zeros (not NaN). */
ampc_status ampc_softmax_forward(int64_t m, int64_t n, const void *x, ampc_dtype xdt, float scale,
                                 const uint8_t *key_mask, int64_t rows_per_mask, void *y,
                                 ampc_dtype ydt, ampc_round_stats *stats);
/* dx = scale * y * (dy - sum(dy * y)) per row, overwritten (y from forward). */
ampc_status ampc_softmax_backward(int64_t m, int64_t n, const void *dy, ampc_dtype gdt,
                                  const void *y, ampc_dtype ydt, float scale, void *dx);

/* ---- token + learned position embedding ------------------------------------ */

/* ids [b, t] (int32, 0 <= id < vocab), tok [vocab, d] (wdt), pos [>= t, d] (wdt)
 * -> y [b*t, d] (ydt) = tok[id] + pos[position], summed in FP32, one rounding. */
ampc_status ampc_embedding_forward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                   int64_t vocab, const void *tok, const void *pos, ampc_dtype wdt,
                                   void *y, ampc_dtype ydt, ampc_round_stats *stats);
/* dy [b*t, d] (gdt). dtok [vocab, d] (gdt) += for each id, the sum over all its
 * occurrences, formed in FP32 and added with ONE rounding (so two 40000s of
 * the same id reach a binary16 gradient as 80000 -> inf, counted in `stats`
 * as an overflow); dpos [t, d] (gdt, or NULL) += the sum over the batch. */
ampc_status ampc_embedding_backward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                    int64_t vocab, const void *dy, ampc_dtype gdt, void *dtok,
                                    void *dpos, ampc_round_stats *stats, ampc_scratch *ws);
/* Scratch of ampc_embedding_backward: (id, row) pairs for b*t rows, a row of d floats. */
size_t ampc_embedding_backward_scratch_bytes(int64_t b, int64_t t, int64_t d);

/* ---- rows: the ViT input, gather, scatter-add, gradient sums, argmax -------- */

/* The ViT input (Dosovitskiy et al. 2021, eq. 1): y [b, np + 1, d] (ydt) with
 * y[i, 0] = cls [d] + pos[0] and y[i, t] = patches[i, t - 1] + pos[t] for
 * t = 1..np; patches [b, np, d] (pdt), cls and pos [np + 1, d] (wdt). Each sum
 * in FP32, one rounding. Errors: AMPC_ERR_INVALID_ARG for a bad shape, NULL
 * buffer or dtype. */
ampc_status ampc_vit_tokens_forward(int64_t b, int64_t np, int64_t d, const void *patches,
                                    ampc_dtype pdt, const void *cls, const void *pos,
                                    ampc_dtype wdt, void *y, ampc_dtype ydt);
/* Its backward pass from dy [b, np + 1, d] (gdt): dpatches [b, np, d] (gdt,
 * overwritten) = dy[:, 1:]; dpos [np + 1, d] += sum over the batch of dy and
 * dcls [d] += its row 0, each sum in FP32 (batch order), added to the
 * gradient with one rounding (ampc_grad_add_f32). Any output may be NULL. */
ampc_status ampc_vit_tokens_backward(int64_t b, int64_t np, int64_t d, const void *dy,
                                     ampc_dtype gdt, void *dpatches, void *dcls, void *dpos);

/* g[i] = g[i] + v[i] for i < n: the sum in FP32, one rounding into gdt (a
 * gradient accumulated from FP32 partial sums). */
ampc_status ampc_grad_add_f32(int64_t n, const float *v, void *g, ampc_dtype gdt);

/* y[r] = x[idx[r]] for r < n, rows of d elements: x [rows, d] (xdt), y [n, d]
 * (ydt; exact when ydt is at least as wide, else one rounding, not counted by
 * the tally: a copy, not a result). Errors: an index outside [0, rows). */
ampc_status ampc_gather_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows, const void *x,
                             ampc_dtype xdt, void *y, ampc_dtype ydt);

/* The scatter of rows (torch's index_copy_ on dim 0): for r = 0..n-1 in
 * order, row idx[r] of y [rows, d] = row r of x [n, d], both in dt, copied
 * bit for bit (a later r wins a repeated index). Errors: an index outside
 * [0, rows); bad shapes or dtype. */
ampc_status ampc_scatter_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows, const void *x,
                              ampc_dtype dt, void *y);

/* The scatter-add of rows (the backward pass of a gather; torch's
 * index_add_): for r = 0..n-1 in order, row idx[r] of y (FP32, rows of ldy >=
 * d floats, rows in all) += x[r] (+ x2[r], the two summed first), x and x2
 * [n, d]; idx NULL means row r. x2 may be NULL. Errors: an index outside
 * [0, rows); bad shapes or dtypes. */
ampc_status ampc_scatter_add_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                  const void *x, ampc_dtype xdt, const void *x2, ampc_dtype x2dt,
                                  float *y, int64_t ldy);

/* idx[i] = the column of row i's largest value in x [m, n] (xdt), the first
 * on ties; with skip_diag, column i is left out (n >= 2: the hardest
 * negative of a similarity matrix). A row holding a NaN has no largest value:
 * idx[i] = -1 (so a classifier's NaN logits are never right, unlike
 * torch.argmax, which picks the NaN). */
ampc_status ampc_argmax_rows(int64_t m, int64_t n, const void *x, ampc_dtype xdt, bool skip_diag,
                             int32_t *idx);

/* ---- patch embedding (ViT, Dosovitskiy et al. 2021) -------------------------- */

/* images [b, hh, ww, c] uint8 (HWC), each value v read as v * px_scale + px_shift;
 * patches of p x p (stride p; hh, ww multiples of p) unfolded in the order of
 * torch.nn.Conv2d's weight [d, c, p, p], i.e. (channel, dy, dx), rounded once
 * to wdt, then y [b * (hh/p) * (ww/p), d] = patches W^T + bias with
 * w [d, c*p*p] (wdt), bias [d] (wdt, or NULL). Rows are (image, patch row,
 * patch column). */
ampc_status ampc_patch_embed_forward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                     int64_t d, const uint8_t *images, float px_scale,
                                     float px_shift, const void *w, ampc_dtype wdt,
                                     const void *bias, void *y, ampc_dtype ydt, ampc_acc acc,
                                     ampc_round_stats *stats, ampc_scratch *ws);
/* Scratch of the patch embedding's passes: the unfolded patches [b*N, c*p*p]
 * in wdt, one patch in FP32, and the bias sums of the backward pass. */
size_t ampc_patch_embed_scratch_bytes(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                      int64_t d, ampc_dtype wdt);
/* dy [b*N, d] (gdt) -> dw [d, c*p*p] (gdt) +=, dbias [d] (gdt, or NULL) +=.
 * (No gradient flows into the images.) */
ampc_status ampc_patch_embed_backward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                      int64_t d, const uint8_t *images, float px_scale,
                                      float px_shift, ampc_dtype wdt, const void *dy,
                                      ampc_dtype gdt, void *dw, void *dbias, ampc_acc acc,
                                      ampc_scratch *ws);

/* ---- masked mean pooling and L2 normalisation --------------------------------- */

/* x [b, t, d] (xdt), mask [b, t] (uint8, NULL = all valid) -> y [b, d] (ydt) =
 * sum of valid rows / their count (zeros if none). Sums in FP32. */
ampc_status ampc_mean_pool_forward(int64_t b, int64_t t, int64_t d, const void *x, ampc_dtype xdt,
                                   const uint8_t *mask, void *y, ampc_dtype ydt,
                                   ampc_round_stats *stats);
/* dy [b, d] -> dx [b, t, d] (gdt, overwritten) = mask * dy / count. */
ampc_status ampc_mean_pool_backward(int64_t b, int64_t t, int64_t d, const void *dy, ampc_dtype gdt,
                                    const uint8_t *mask, void *dx);

/* x [m, d] (xdt) -> y = x / max(||x||_2, eps) (torch.nn.functional.normalize);
 * the norm in double. */
ampc_status ampc_l2norm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt, float eps,
                                void *y, ampc_dtype ydt, ampc_round_stats *stats);
/* dx [m, d] (gdt, overwritten) = (dy - y (y . dy)) / ||x|| (dy / eps where
 * ||x|| <= eps). */
ampc_status ampc_l2norm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                 const void *x, ampc_dtype xdt, float eps, void *dx);

/* ---- multi-head scaled dot-product attention (Vaswani et al. 2017) --------- */

/* The attention core after the projections, for self- and cross-attention:
 * q [b, tq, h*dh] (row stride ldq), k and v [b, tk, h*dh] (ldk, ldv), dtype
 * xdt; views into one packed qkv buffer work (ld = 3*h*dh). Per batch item
 * and head:  S = (q k^T) / sqrt(dh)  (a strided batched GEMM over the heads,
 * stored in `scores` [b, h, tq, tk] of dtype sdt),  P = softmax(S) with the
 * key-padding mask key_mask [b, tk] (uint8, 1 = attend, NULL = none; masked
 * keys get probability exactly 0, a row with no key gives zeros), stored in
 * `probs` [b, h, tq, tk] of dtype pdt (kept for the backward pass), and
 * out [b, tq, h*dh] (row stride ldo, dtype odt) = P v. */
ampc_status ampc_attention_forward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                   const void *q, int64_t ldq, const void *k, int64_t ldk,
                                   const void *v, int64_t ldv, ampc_dtype xdt,
                                   const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                   void *probs, ampc_dtype pdt, void *out, int64_t ldo,
                                   ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats);
/* ampc_attention_forward with P rounded for its product, as PyTorch's
 * autocast casts softmax's FP32 output to the 16-bit dtype for the P v
 * matmul (and FlashAttention, Dao et al. 2022, feeds P v a 16-bit P):
 * mdt F16 or BF16 with an FP32 pdt: out = round(P, mdt) v (the rounding is
 * a counted store; probs keep the FP32 P for the backward pass's softmax;
 * one sample at a time into a worker's buffer of h*tq*tk mdt values, taken
 * per call); mdt AMPC_F32, or a 16-bit pdt: ampc_attention_forward. Errors as there,
 * and AMPC_ERR_INVALID_ARG for an mdt other than F32, F16, BF16. */
ampc_status ampc_attention_forward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                      const void *q, int64_t ldq, const void *k, int64_t ldk,
                                      const void *v, int64_t ldv, ampc_dtype xdt,
                                      const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                      void *probs, ampc_dtype pdt, ampc_dtype mdt, void *out,
                                      int64_t ldo, ampc_dtype odt, ampc_acc acc,
                                      ampc_round_stats *stats);
/* The scores and probabilities of ampc_attention_forward again, bit for bit
 * (the same strided batched GEMM and softmax on the same q, k and
 * key_mask; arguments and errors as there): for a backward pass that did
 * not keep them (ampc_mha_cache.recompute; the memory-efficient attention of
 * Rabe & Staats 2021 and FlashAttention, Dao et al. 2022, recompute them in
 * the backward pass too). Counts nothing into the bound rounding tally: the
 * forward pass counted these stores. */
ampc_status ampc_attention_probs(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                 const void *q, int64_t ldq, const void *k, int64_t ldk,
                                 ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                                 ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_acc acc);
/* dout [b, tq, h*dh] (row stride lddo, gdt) -> dq [b, tq, h*dh] (lddq),
 * dk, dv [b, tk, h*dh] (lddk, lddv), all gdt, overwritten; probs from the
 * forward pass. Intermediate dP and dS are FP32 (workspace 2*h*tq*tk floats). */
ampc_status ampc_attention_backward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                    const void *q, int64_t ldq, const void *k, int64_t ldk,
                                    const void *v, int64_t ldv, ampc_dtype xdt, const void *probs,
                                    ampc_dtype pdt, const void *dout, int64_t lddo, ampc_dtype gdt,
                                    void *dq, int64_t lddq, void *dk, int64_t lddk, void *dv,
                                    int64_t lddv, ampc_acc acc, ampc_scratch *ws);
/* ampc_attention_backward with the products' operands of
 * ampc_attention_forward_ex: mdt F16 or BF16 rounds dS (FP32, from the
 * softmax backward pass on the stored P) to mdt before dq = scale dS k and
 * dk = scale dS^T q (a counted store: autocast's cast of the scores'
 * gradient), and an FP32 P to mdt for dv = P^T dout (as the forward's
 * product, not counted again); mdt AMPC_F32: ampc_attention_backward. The
 * same workspace. */
ampc_status ampc_attention_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                       const void *q, int64_t ldq, const void *k, int64_t ldk,
                                       const void *v, int64_t ldv, ampc_dtype xdt,
                                       const void *probs, ampc_dtype pdt, ampc_dtype mdt,
                                       const void *dout, int64_t lddo, ampc_dtype gdt, void *dq,
                                       int64_t lddq, void *dk, int64_t lddk, void *dv, int64_t lddv,
                                       ampc_acc acc, ampc_scratch *ws);
/* Scratch of ampc_attention_backward: dP and dS of one sample per thread
 * (at most ampc_get_num_threads() threads). */
size_t ampc_attention_backward_scratch_bytes(int64_t b, int64_t tq, int64_t tk, int64_t h,
                                             int64_t dh);

/* ---- the multi-head attention layer: projections + core ------------------- */

/* Buffers the forward pass fills and the backward pass reads, owned by the
 * caller: q [b*tq, dm], k and v [b*tk, dm], o [b*tq, dm] (the core's output,
 * before the output projection) in the activation dtype; scores and probs
 * [b, h, tq, tk] in the probabilities' dtype. recompute (false: the
 * backward pass reads the forward's probs): the backward pass recomputes
 * scores and probs from q and k (ampc_attention_probs) with key_mask, the
 * forward's mask (or NULL), so scores and probs may be buffers that other
 * layers overwrite in between (one pair for every block of a model: the
 * probabilities, [b, h, tq, tk] per block, are then no saved activation). */
typedef struct ampc_mha_cache {
  void *q, *k, *v, *o, *scores, *probs;
  bool recompute;
  const uint8_t *key_mask;
  /* the attention products' operand dtype for P and dS (the mdt of
   * ampc_attention_forward_ex / _backward_ex); AMPC_F32 (0, a zeroed
   * cache): as they are */
  ampc_dtype mdt;
} ampc_mha_cache;

/* Multi-head attention with separate projections, as
 * torch.nn.MultiheadAttention(dm, h, batch_first=True) with its in_proj split
 * into wq, wk, wv: q = xq Wq^T + bq, k = xkv Wk^T + bk, v = xkv Wv^T + bv,
 * o = attention core (above, key_mask [b, tk] or NULL), y = o Wo^T + bo.
 * xq [b*tq, dm], xkv [b*tk, dm] (pass xkv = xq, tk = tq for self-attention)
 * and y [b*tq, dm] in adt; weights [dm, dm] and biases [dm] (or NULL) in wdt;
 * dm must be a multiple of h. fp8: NULL, or the quantizers of the q, k, v
 * and output projections (4 pointers: fp8-mixed). Errors as the layers it is
 * built from. */
ampc_status ampc_mha_forward(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                             const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                             const void *bq, const void *wk, const void *bk, const void *wv,
                             const void *bv, const void *wo, const void *bo, ampc_dtype wdt,
                             const uint8_t *key_mask, const ampc_mha_cache *cache, ampc_dtype pdt,
                             void *y, ampc_acc acc, ampc_linear_fp8 *const *fp8,
                             ampc_round_stats *stats);

/* dy [b*tq, dm] (gdt). Input gradients are overwritten: dxq [b*tq, dm] and
 * dxkv [b*tk, dm] (gdt); for self-attention (xkv == xq) pass dxkv = NULL and
 * every contribution lands in dxq. Each input gradient is summed in FP32 and
 * rounded once. Parameter gradients (gdt) accumulate (+=); bias gradients
 * may be NULL. Workspace: 4 activation-sized gradient buffers. */
ampc_status ampc_mha_backward(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                              const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                              const void *wk, const void *wv, const void *wo, ampc_dtype wdt,
                              const ampc_mha_cache *cache, ampc_dtype pdt, const void *dy,
                              ampc_dtype gdt, void *dxq, void *dxkv, void *dwq, void *dbq,
                              void *dwk, void *dbk, void *dwv, void *dbv, void *dwo, void *dbo,
                              ampc_acc acc, ampc_linear_fp8 *const *fp8, ampc_scratch *ws);
/* The same with dxkv = dxkv_scale x (the FP32 sum), rounded once: the
 * crossing of a gradient into another branch under per-branch loss scaling
 * (ampc/amp.h; a power of two keeps it exact). dxkv_scale > 0 and finite; 1
 * is ampc_mha_backward. */
ampc_status ampc_mha_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                 const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                                 const void *wk, const void *wv, const void *wo, ampc_dtype wdt,
                                 const ampc_mha_cache *cache, ampc_dtype pdt, const void *dy,
                                 ampc_dtype gdt, void *dxq, void *dxkv, float dxkv_scale, void *dwq,
                                 void *dbq, void *dwk, void *dbk, void *dwv, void *dbv, void *dwo,
                                 void *dbo, ampc_acc acc, ampc_linear_fp8 *const *fp8,
                                 ampc_scratch *ws);
/* Scratch of ampc_mha_backward: its gradient buffers and those of the
 * linear and attention backward passes it calls. */
size_t ampc_mha_backward_scratch_bytes(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                       ampc_dtype gdt);

/* ---- losses, all in FP32; backward seeded with the loss scale S ------------ */

/* Mean cross-entropy of logits [m, c] (xdt) against class ids target [m]
 * (0 <= t < c), via log-softmax. *loss is the unscaled mean. */
ampc_status ampc_cross_entropy_forward(int64_t m, int64_t c, const void *logits, ampc_dtype xdt,
                                       const int32_t *target, float *loss);
/* dlogits [m, c] (gdt, overwritten) = S * (softmax - onehot) / m. */
ampc_status ampc_cross_entropy_backward(int64_t m, int64_t c, const void *logits, ampc_dtype xdt,
                                        const int32_t *target, float loss_scale, void *dlogits,
                                        ampc_dtype gdt);

/* Mean binary cross-entropy with logits x [m] against targets t [m] in [0, 1]
 * (FP32), the log(1 + exp(-|x|)) form that never overflows. */
ampc_status ampc_bce_logits_forward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                    float *loss);
/* dx [m] (gdt, overwritten) = S * (sigmoid(x) - t) / m. */
ampc_status ampc_bce_logits_backward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                     float loss_scale, void *dx, ampc_dtype gdt);

/* Symmetric InfoNCE (CLIP, Radford et al. 2021): sim [b, b] (xdt) holds
 * image_i . text_j of L2-normalised embeddings; logits = exp(log_temp) * sim;
 * loss = (CE(logits, diag) + CE(logits^T, diag)) / 2, in FP32. */
ampc_status ampc_infonce_forward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                 float *loss);
/* dsim [b, b] (gdt, overwritten) and *dlog_temp (+=, FP32), both times S. */
ampc_status ampc_infonce_backward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                  float loss_scale, void *dsim, ampc_dtype gdt, float *dlog_temp,
                                  ampc_scratch *ws);
/* Scratch of ampc_infonce_backward: the 2b row and column log-sum-exps. */
size_t ampc_infonce_backward_scratch_bytes(int64_t b);

/* One direction of InfoNCE over a slice of a larger batch, for negatives
 * gathered from other ranks (CLIP's global batch, Radford et al. 2021): sim
 * [m, n] (xdt) holds m queries against all n keys, query i's positive is key
 * label0 + i; *sum = the sum over rows of CE(exp(log_temp) * sim row,
 * label0 + i), in double (divide by the global count). Errors: labels
 * outside [0, n). */
ampc_status ampc_infonce_rows_forward(int64_t m, int64_t n, const void *sim, ampc_dtype xdt,
                                      float log_temp, int64_t label0, double *sum);
/* Its backward pass for loss = coef * sum: dsim [m, n] (gdt, overwritten) =
 * coef * exp(log_temp) * (softmax - onehot) and *dlog_temp += coef * sum_ij
 * (softmax - onehot)_ij * logit_ij (coef carries the loss scale and the
 * 1 / count). ws: m floats (ampc_infonce_rows_backward_scratch_bytes). */
ampc_status ampc_infonce_rows_backward(int64_t m, int64_t n, const void *sim, ampc_dtype xdt,
                                       float log_temp, int64_t label0, float coef, void *dsim,
                                       ampc_dtype gdt, float *dlog_temp, ampc_scratch *ws);
size_t ampc_infonce_rows_backward_scratch_bytes(int64_t m);

#ifdef __cplusplus
}
#endif
#endif
