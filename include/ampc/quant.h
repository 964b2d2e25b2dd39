/*
 * ampc/quant.h: INT8 post-training quantization of a trained model's linear
 * layers (src/quant/), the contrast to mixed-precision training: precision
 * lowered after training, for inference, and judged by the accuracy lost
 * against the full-precision model.
 *
 * Weights: symmetric INT8 (zero point 0, values in [-127, 127], as
 * PyTorch's per-channel symmetric qscheme and TensorRT do for weights), one
 * scale per output channel (a row of W [out, in]) or one per tensor:
 * scale = amax / 127, q = round-half-even(w / scale), w ~ q * scale. Every
 * finite w within the amax the scale came from is off by at most half a
 * step (scale / 2).
 *
 * Files: a quantized checkpoint is safetensors (readable by PyTorch and the
 * safetensors crate): each quantized weight NAME as I8 [out, in] with F32
 * NAME_scale ([out] per channel, [1] per tensor); every other tensor of the
 * model (biases, norms, embeddings, the layers kept) as F32 under its own
 * name; the optimizer state is left out. Metadata: "format" =
 * "ampc-int8", "ampc.granularity" = "channel" or "tensor", "ampc.kept" =
 * the layers kept, and the checkpoint's own model metadata.
 */
#ifndef AMPC_QUANT_H
#define AMPC_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/model.h"
#include "ampc/params.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ampc_quant_granularity {
  AMPC_QUANT_CHANNEL = 0, /* one scale per output channel (row) */
  AMPC_QUANT_TENSOR = 1   /* one scale for the whole tensor */
} ampc_quant_granularity;

/* Quantize w [rows, cols] FP32 to q [rows, cols] int8 with scale [rows]
 * (channel) or [1] (tensor), as above. An all-zero row (or tensor) gets
 * scale 1 (its zeros are exact at any scale). Errors: AMPC_ERR_INVALID_ARG
 * (NULL, sizes < 1), AMPC_ERR_NUMERIC (a non-finite weight: the message
 * gives its index). */
ampc_status ampc_quant_weight_s8(const float *w, int64_t rows, int64_t cols,
                                 ampc_quant_granularity g, int8_t *q, float *scale);

/* out [rows, cols] = q * scale (scale [rows] when per_row, else [1]), in
 * FP32. Errors: AMPC_ERR_INVALID_ARG (NULL, sizes < 1, a scale that is not
 * positive and finite: zero scales are refused). */
ampc_status ampc_dequant_s8(const int8_t *q, int64_t rows, int64_t cols, const float *scale,
                            bool per_row, float *out);

/* Signal-to-quantization-noise ratio in dB of x [n] against its
 * approximation xh: 10 log10(sum x^2 / sum (x - xh)^2), summed in FP64;
 * +inf when xh == x exactly, -inf when x is all zero and xh is not. */
double ampc_sqnr_db(const float *x, const float *xh, int64_t n);

/* Whether checkpoint tensor `name` (of ndim dimensions) is the weight of a
 * linear layer that INT8 quantization applies to: attention in/out
 * projections, MLP fc1/fc2, the patch embedding, the heads' projections
 * and classifiers (2-D "...weight" tensors other than embeddings). */
bool ampc_quant_is_linear(const char *name, int ndim);

/* One linear layer of a quantized checkpoint. */
typedef struct ampc_quant_layer {
  char name[96];
  int64_t rows, cols;
  bool kept;             /* left in FP32 (--keep) */
  double sqnr_db;        /* of the quantized weight against the FP32 one (kept: +inf) */
  double sqnr_tensor_db; /* the same with one scale per tensor, for comparison */
  float amax;            /* largest |w| */
} ampc_quant_layer;

typedef struct ampc_quant_options {
  const char *checkpoint; /* an ampc training checkpoint (safetensors) */
  const char *out;        /* the quantized checkpoint to write (atomically) */
  ampc_quant_granularity granularity;
  /* comma-separated name prefixes of layers kept in FP32 (NULL: the default,
   * "vision.patch_embed,heads": the first and last layers, as is common) */
  const char *keep;
} ampc_quant_options;

typedef struct ampc_quant_report {
  int n;                    /* linear layers */
  ampc_quant_layer *layers; /* [n], in the checkpoint's order */
  int64_t params_quantized, params_kept, params_other;
  int64_t bytes_fp32, bytes_out; /* the model's tensors in FP32; the file written */
} ampc_quant_report;

/* Quantize the checkpoint's linear layers (ampc_quant_is_linear) except
 * those kept, and write o->out as above (nothing is written on an error).
 * rep (may be NULL) gets the per-layer report; free it with
 * ampc_quant_report_free. Errors: AMPC_ERR_INVALID_ARG (NULL, a --keep
 * prefix that names no linear layer: the message names it), AMPC_ERR_IO,
 * AMPC_ERR_FORMAT (not an ampc checkpoint: no model weights), the errors of
 * ampc_quant_weight_s8 (a NaN weight names its tensor), AMPC_ERR_NOMEM. */
ampc_status ampc_quantize_checkpoint(const ampc_quant_options *o, ampc_quant_report *rep);
void ampc_quant_report_free(ampc_quant_report *rep);

/* Load a quantized checkpoint (ampc_quantize_checkpoint's file) into P
 * (every tensor by name: F32 as is, I8 dequantized with its scales, into
 * P's weight dtype and master) and, with M non-NULL, make each transformer
 * block's linear layers run INT8 (ampc_mmodel_set_int8, activations
 * quantized dynamically per call); the heads and the patch embedding, when
 * quantized, run on their dequantized weights. *int8_layers (may be NULL)
 * gets the number of INT8 weights handed to M. Errors: AMPC_ERR_IO,
 * AMPC_ERR_FORMAT (not a quantized checkpoint, a tensor missing or of
 * another size or dtype, a scale missing or not positive), those of
 * ampc_mmodel_set_int8, AMPC_ERR_NOMEM. */
ampc_status ampc_quant_load(const char *path, ampc_params *P, ampc_mmodel *M, int *int8_layers);

#ifdef __cplusplus
}
#endif
#endif
