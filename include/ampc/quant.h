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
 * name; with calibration, NAME_input_scale F32 [3] (an in-projection's q,
 * k, v inputs) or [1], the static activation scale of each quantized block
 * layer; the optimizer state is left out. Metadata: "format" =
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

/* ---- calibration: static activation scales ---------------------------------------- */

/* How a calibrated activation scale is chosen from what the calibration
 * batches showed of |x| (symmetric, per tensor; scale = threshold / 127):
 *   MAX         the largest |x| seen (PyTorch's MinMaxObserver, symmetric);
 *   PERCENTILE  the given percentile of |x| (99.99 by default, as NVIDIA's
 *               pytorch-quantization calibrator offers), values past it
 *               saturate at +-127;
 *   MSE         the threshold of least expected squared error over a
 *               2048-bin histogram of |x| on [0, max]: a value past the
 *               threshold costs (|x| - t)^2, one below it the rounding
 *               noise step^2 / 12 (x^2 where |x| < step / 2 rounds to zero),
 *               as PyTorch's HistogramObserver searches. */
typedef enum ampc_calib_method {
  AMPC_CALIB_MAX = 0,
  AMPC_CALIB_PERCENTILE = 1,
  AMPC_CALIB_MSE = 2
} ampc_calib_method;
enum { AMPC_CALIB_METHODS = 3, AMPC_CALIB_BINS = 2048 };

/* What calibration saw at one INT8 site: the input of a block's linear
 * layer (an in-projection has three: q, k, v, whose inputs differ in
 * cross-attention). */
typedef struct ampc_calib_site {
  char name[96];                      /* the layer's weight */
  int part;                           /* 0, 1, 2: q, k, v of an in-projection; 0 otherwise */
  uint64_t values;                    /* activations observed over the calibration batches */
  float amax;                         /* their largest |x| */
  float scale[AMPC_CALIB_METHODS];    /* each method's scale (threshold / 127) */
  double sqnr_db[AMPC_CALIB_METHODS]; /* the activations quantized with it, exact */
  double clipped[AMPC_CALIB_METHODS]; /* the fraction of values past its range */
  /* internal: the |x| histogram and the sums of each pass */
  uint64_t *hist;
  double sum_sq, err_sq[AMPC_CALIB_METHODS];
  uint64_t nonfinite, clip_n[AMPC_CALIB_METHODS];
  int *pass;
} ampc_calib_site;

typedef struct ampc_calib {
  int n;                    /* sites */
  ampc_calib_site *sites;   /* [n], in the parameter table's order */
  int batches;              /* calibration batches run (each three times) */
  double percentile;        /* PERCENTILE's, in percent */
  ampc_calib_method method; /* the one a quantized file is written with */
  int pass_;                /* internal */
} ampc_calib;

/* Run a model's forward pass on calibration batches and observe the input
 * of every INT8 site (ampc_mmodel_observe): run(user, i) must run M's
 * forward pass on calibration batch i (0 <= i < batches), the same batch
 * each time it is asked. Three passes over the batches: the largest |x|,
 * then a histogram of |x| on [0, largest] (the percentile and MSE
 * thresholds), then each method's exact SQNR and clipped fraction. M is
 * left without observers. method and percentile (0 < p <= 100) go into
 * out. Free out with ampc_calib_free. Errors: AMPC_ERR_INVALID_ARG (batches
 * < 1, a percentile out of range, NULL), AMPC_ERR_NUMERIC (a non-finite
 * activation: the message names the layer), those of ampc_mmodel_observe
 * and of run, AMPC_ERR_NOMEM. */
typedef ampc_status (*ampc_calib_batch_fn)(void *user, int batch);
ampc_status ampc_quant_calibrate(ampc_mmodel *M, const ampc_params *P, int batches,
                                 ampc_calib_method method, double percentile,
                                 ampc_calib_batch_fn run, void *user, ampc_calib *out);
void ampc_calib_free(ampc_calib *c);
/* The site of layer `name`, part `part`, or NULL. */
const ampc_calib_site *ampc_calib_find(const ampc_calib *c, const char *name, int part);
/* "max", "percentile", "mse"; ampc_calib_method_parse: 0 or -1 (unknown). */
const char *ampc_calib_method_name(ampc_calib_method m);
int ampc_calib_method_parse(const char *s, ampc_calib_method *out);

typedef struct ampc_quant_options {
  const char *checkpoint; /* an ampc training checkpoint (safetensors) */
  const char *out;        /* the quantized checkpoint to write (atomically) */
  ampc_quant_granularity granularity;
  /* comma-separated name prefixes of layers kept in FP32 (NULL: the default,
   * "vision.patch_embed,heads": the first and last layers, as is common) */
  const char *keep;
  /* non-NULL: static activation scales (calib->method's) for the
   * quantized block layers, written as NAME_input_scale F32 [3] (an
   * in-projection's q, k, v inputs) or [1]; NULL: dynamic, per call */
  const ampc_calib *calib;
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
 * block's linear layers run INT8 (ampc_mmodel_set_int8; activations with
 * their calibrated NAME_input_scale where the file has one, else quantized
 * dynamically per call); the heads and the patch embedding, when
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
