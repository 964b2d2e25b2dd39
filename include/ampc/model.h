/*
 * ampc/model.h: the models (DESIGN.md section 1, "model"): forward and
 * backward passes over a parameter table they borrow (ampc/params.h), with
 * the dtypes of an autocast preset (ampc/amp.h); no training state (the
 * trainer and the run are ampc/engine.h and ampc/train.h, a layer above).
 * The forward pass keeps what the backward pass needs; backward(seed) is
 * seeded with the loss scale divided by the number of micro-batches. The
 * small MLP classifier exercises the engine in every preset; the multimodal
 * image-text model (and its image-only ViTs) is the main job's.
 *
 * MLP: x [b, in] (FP32 data) -> fc1 -> GELU -> fc2 -> GELU -> head -> logits
 * [b, classes] -> cross-entropy. Parameters "fc1.weight" [hidden, in],
 * "fc1.bias" [hidden], "fc2.weight" [hidden, hidden], "fc2.bias", "head.weight"
 * [classes, hidden], "head.bias" (torch.nn.Linear layout and default init
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in))), branch "heads". Dtypes come from the
 * autocast policy of the preset (linear reads and writes the 16-bit dtype,
 * GELU follows, the loss is FP32); gradients are stored in the working dtype.
 */
#ifndef AMPC_MODEL_H
#define AMPC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/amp.h"
#include "ampc/backend.h"
#include "ampc/nn.h"
#include "ampc/params.h"
#include "ampc/tally.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- FP8 sites (fp8-mixed) ---------------------------------------------------
 * A model's FP8 linear layers ("sites"): each has the quantizers of its x, W
 * and dy (ampc_linear_fp8, ampc/nn.h) and their delayed-scaling state (three
 * ampc_fp8_meta, ampc/amp.h: Transformer Engine's recipe). The model casts
 * with the current scales during the step; at the step's end
 * ampc_fp8_sites_update folds each quantizer's amax into its history and
 * takes the next scales. The models put the linear layers of their
 * transformer blocks (attention q, k, v, output; MLP fc1, fc2) and of the
 * MLP's hidden layers in FP8; embeddings, the patch embedding, the
 * projection heads and classifiers stay in BF16 (TE's practice of keeping
 * the first and last layers in higher precision). */
enum { AMPC_FP8_SITE_NAME = 48 };
typedef struct ampc_fp8_sites {
  int n;                            /* sites */
  ampc_linear_fp8 *lin;             /* [n] */
  ampc_fp8_meta *meta;              /* [3 n]: x, w, dy of site i at 3i, 3i+1, 3i+2 */
  float *history;                   /* [3 n * len]: the metas' histories, one block */
  ampc_branch *branch;              /* [n] */
  char (*name)[AMPC_FP8_SITE_NAME]; /* [n]: e.g. "vision.blocks.0.attn.q" */
  int len;                          /* amax history length */
  ampc_amax_algo algo;
  float margin;
  ampc_scratch ws; /* the casts' workspace, shared by the sites */
  bool own_ws;     /* ws allocated by ampc_fp8_sites_init */
  int64_t updates; /* ampc_fp8_sites_update calls */
} ampc_fp8_sites;

/* n sites (named later with ampc_fp8_sites_name) with amp's recipe and a
 * workspace of ws_bytes (allocated here). Errors: AMPC_ERR_INVALID_ARG,
 * AMPC_ERR_NOMEM. */
ampc_status ampc_fp8_sites_init(ampc_fp8_sites *S, int n, const ampc_amp_config *amp,
                                size_t ws_bytes);
void ampc_fp8_sites_free(ampc_fp8_sites *S); /* a zeroed or freed one is fine */
/* The bytes ampc_fp8_sites_init allocates for n sites with a history of len
 * (the amax histories dominate: 12 len bytes per site), its workspace
 * aside: the memory account's fp8_state role. */
size_t ampc_fp8_sites_state_bytes(int n, int len);
/* Name and branch site i. */
void ampc_fp8_sites_name(ampc_fp8_sites *S, int i, ampc_branch br, const char *name);
/* The step's end: for every quantizer, record its amax (lin[i].x.amax ...)
 * into history[0], ampc_fp8_update (new scale, history rolled), copy the
 * scale into the quantizer and reset its amax to 0. Errors: those of
 * ampc_fp8_update. */
ampc_status ampc_fp8_sites_update(ampc_fp8_sites *S);
/* Per-branch totals of the counted casts since the last call (values,
 * saturated, flushed; arrays of AMPC_BRANCH_COUNT, overwritten), and reset
 * the counters. */
void ampc_fp8_sites_take_counts(ampc_fp8_sites *S, uint64_t *values, uint64_t *saturated,
                                uint64_t *flushed);

typedef struct ampc_mlp_config {
  int64_t in, hidden, classes;
} ampc_mlp_config;

enum { AMPC_MLP_NPARAMS = 6 };

/* Fill the AMPC_MLP_NPARAMS parameter specs of the MLP (names point to static
 * strings). Errors: AMPC_ERR_INVALID_ARG for non-positive sizes. */
ampc_status ampc_mlp_specs(const ampc_mlp_config *c, ampc_param_spec specs[AMPC_MLP_NPARAMS]);

typedef struct ampc_mlp {
  ampc_mlp_config cfg;
  int64_t max_batch;
  ampc_params *P;          /* borrowed: the parameters */
  ampc_acc acc;            /* GEMM accumulation */
  ampc_dtype act_dt;       /* activation dtype of the linear layers */
  int64_t fwd_b;           /* rows of the last forward pass (0: none to differentiate) */
  const int32_t *fwd_y;    /* its labels (borrowed until the backward pass) */
  void *x;                 /* [max_batch, in] act_dt */
  void *h1, *a1, *h2, *a2; /* [max_batch, hidden] act_dt: pre- and post-GELU */
  void *logits;            /* [max_batch, classes] act_dt */
  void *d_big, *d_big2;    /* [max_batch, hidden] gradient workspaces (grad dtype) */
  void *dlogits;           /* [max_batch, classes] grad dtype */
  ampc_scratch ws;         /* the layers' scratch (counted as workspace) */
  ampc_fp8_sites *fp8;     /* fp8-mixed: fc1 and fc2 in FP8 (the head stays BF16); else NULL */
} ampc_mlp;

/* Activation buffers for batches of up to max_batch rows over the parameter
 * table P (made from ampc_mlp_specs; borrowed), with the dtypes of amp's
 * autocast policy and its GEMM accumulation. Errors: AMPC_ERR_NOMEM,
 * AMPC_ERR_INVALID_ARG. */
ampc_status ampc_mlp_create(ampc_mlp *M, const ampc_mlp_config *c, ampc_params *P,
                            const ampc_amp_config *amp, int64_t max_batch);
void ampc_mlp_free(ampc_mlp *M);
/* Bytes ampc_mlp_create allocates for max batch `batch` under preset p,
 * without allocating: *activations (x, h1, a1, h2, a2, logits in the linear
 * output dtype) and *workspace (d_big, d_big2, dlogits in the working dtype);
 * either may be NULL. Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_mlp_plan_bytes(const ampc_mlp_config *c, int64_t batch, ampc_precision p,
                                size_t *activations, size_t *workspace);

/* Forward pass on b <= max_batch rows x [b, in] (FP32 data) with labels y [b]:
 * *loss is the mean cross-entropy (FP32, unscaled), *correct (may be NULL)
 * the number of argmax hits. y must stay valid until the backward pass. */
ampc_status ampc_mlp_forward(ampc_mlp *M, int64_t b, const float *x, const int32_t *y, float *loss,
                             int64_t *correct);
/* Backward pass of the last forward pass, seeded with `seed` (the loss scale
 * divided by the number of micro-batches; > 0 and finite), accumulating (+=)
 * into P's gradients. Errors: AMPC_ERR_INVALID_ARG (no forward pass since the
 * last backward pass, or a bad seed). */
ampc_status ampc_mlp_backward(ampc_mlp *M, float seed);

/* ---- the multimodal image-text model (src/model/mm.c) ---------------------- */

/* Shapes of a named configuration. mm-tiny: 32x32x3 images, patch 4 (64
 * patches + CLS), width 128, 4 heads, MLP 512, vision depth 4, text depth 3,
 * fusion depth 1, contrastive dim 64. */
typedef struct ampc_mmodel_config {
  char name[32];
  int64_t img, patch, channels;      /* image side, patch side, channels */
  int64_t dim, heads, mlp;           /* transformer width, heads, MLP hidden */
  int64_t v_depth, t_depth, f_depth; /* blocks: vision, text, fusion */
  int64_t vocab, seq_len;            /* text (from the dataset) */
  int64_t embed;                     /* contrastive projection dim */
  int64_t classes;                   /* group classification head */
  float w_itc, w_itm, w_cls;         /* composite loss weights */
  /* masked caption modelling (MLM; 0: off, the default): its loss weight and
   * the probability of masking each non-padding token (at least one per
   * caption). On, the model has the head heads.mlm.{weight,bias} [vocab, dim]
   * and runs the text encoder on a masked copy of every caption too. */
  float w_mlm, mlm_prob;
  bool image_only; /* vit-ref / vit-fm: the vision encoder and the class head only (CE loss;
                      no text, fusion or projections) */
  /* false (the default): the backward pass recomputes two kinds of saved
   * activation, with the forward's bits, instead of keeping them: every
   * attention block's probabilities [b, h, tq, tk] (from its q and k, as
   * memory-efficient attention does: Rabe & Staats 2021; FlashAttention,
   * Dao et al. 2022), and, where the residual stream is wider than the
   * activations (FP32 stream, 16-bit activations: 16-mixed, bf16-mixed),
   * the stream after attention, x1 = x + attn(x), from the block's input
   * and the 16-bit attention output (kept instead: half the bytes). Costs
   * one more q k^T product, softmax and add per block in the backward pass.
   * true: keep both (ampc train --recompute off). Neither changes a value. */
  bool no_recompute;
  /* true (ampc train --attention-cast on): the attention products take
   * 16-bit operands where the activations are 16-bit, as PyTorch's autocast
   * casts them: softmax's FP32 output rounded to the activations' dtype
   * for P v and dv, dS rounded to it for dq and dk (both roundings
   * counted by the telemetry); softmax's backward pass still reads the
   * FP32 P (ampc_attention_forward_ex / _backward_ex). false (the
   * default): P and dS enter those products in FP32. */
  bool attn_cast;
} ampc_mmodel_config;

/* "mm-tiny", "mm-small", "mm-base" (width 512, 8 heads, MLP 2048, depths
 * 8/8/2, embed 256: 59,050,507 parameters on the emoji data; the
 * GPU-sized model), "mm-large" (width 768, 12 heads, MLP 3072, depths
 * 12/12/2, embed 256: 187,746,059 parameters; the top of the GPU-sized range)
 * or "mm-micro" (8x8x3 images, width 16: a very small one for gradient checks)
 * with the dataset's vocab, seq_len and classes; weights 1, 1, 1. Image-only:
 * "vit-ref" (32x32x3, patch 8, width 128, depth 4, 4 heads, MLP 512, CLS:
 * 821,642 parameters with 10 classes), "vit-fm" (the same on 28x28x1 with
 * patch 4, for Fashion-MNIST) and "vit-micro" (8x8x3, width 16, for gradient
 * checks); vocab and seq_len are ignored. Errors: AMPC_ERR_INVALID_ARG
 * naming an unknown model and the known ones. */
ampc_status ampc_mmodel_config_get(const char *name, int64_t vocab, int64_t seq_len,
                                   int64_t classes, ampc_mmodel_config *out);

/* The names ampc_mmodel_config_get knows, in the order lists show them
 * (mm-tiny, mm-small, mm-base, mm-large, mm-micro, vit-ref, vit-fm,
 * vit-micro), NULL-terminated; static storage. */
const char *const *ampc_mmodel_names(void);

/* The names of ampc_mmodel_names, comma-separated, into buf (cap bytes; cut
 * short where it is too small), keeping those whose images are height x
 * width x channels (height > 0; 0: any size) and, for text 0, the
 * image-only ones, for text 1 the image-text ones (-1: both); "none" when
 * no name is kept. Returns buf. */
const char *ampc_mmodel_list(char *buf, size_t cap, int height, int width, int channels, int text);

/* The parameter specs of the model (PyTorch-style names:
 * vision.patch_embed.weight, vision.blocks.0.attn.in_proj_weight, ...,
 * heads.logit_scale), with storage for their names. */
typedef struct ampc_mmodel_specs {
  int n;
  ampc_param_spec *specs;
  char (*names)[AMPC_PARAM_NAME_MAX];
} ampc_mmodel_specs;
ampc_status ampc_mmodel_specs_make(const ampc_mmodel_config *c, ampc_mmodel_specs *out);
void ampc_mmodel_specs_free(ampc_mmodel_specs *s);

typedef struct ampc_mmodel ampc_mmodel; /* activations and caches over one parameter table */

/* ampc_device (where a model's tensors live and run): ampc/backend.h */

/* One batch: images [b, img, img, channels] uint8, tokens [b, seq_len]
 * (AMPC_TOKEN_PAD = 0 is padding), labels [b] (group). */
typedef struct ampc_mmodel_batch {
  int64_t b;
  const uint8_t *images;
  const int32_t *tokens;
  const int32_t *labels;
  /* the matching head's negative text for image i: 0 = the hardest in-batch
   * one (largest contrastive similarity, deterministic: evaluation); else
   * drawn from softmax_j(sim[i, j] * logit scale) over j != i with this seed,
   * as ALBEF samples its hard negatives (Li et al. 2021, section 3.2) */
  uint64_t neg_seed;
  /* masked caption modelling: the seed of the positions masked (0: a fixed
   * one, deterministic: evaluation) */
  uint64_t mask_seed;
  /* with neg_seed != 0: the negative text drawn uniformly over j != i
   * instead (random negatives, an easier matching task than ALBEF's) */
  bool neg_uniform;
  /* a test hook for the diagnosis: with extreme_factor != 0, image
   * extreme_row's normalised pixels are multiplied by it ((p / 127.5 - 1) *
   * factor) before the patch embedding, as a sample far outside the data's
   * range would be; 0 (the default): off */
  int64_t extreme_row;
  float extreme_factor;
} ampc_mmodel_batch;

typedef struct ampc_mmodel_losses {
  float total, itc, itm, cls; /* FP32, unscaled, weighted total */
  float itm_acc, cls_acc;     /* matching accuracy on positives + hard negatives; group acc */
  float mlm, mlm_acc;         /* masked caption modelling: mean CE over the masked tokens, their
                                 argmax accuracy (0 when off) */
  int64_t mlm_tokens;         /* the masked tokens the MLM loss averages over */
} ampc_mmodel_losses;

/* Buffers for batches of up to max_batch (>= 2) over the parameter table P
 * (made from ampc_mmodel_specs_make(c); borrowed), with the dtypes of amp's
 * autocast policy and its GEMM accumulation. Errors: AMPC_ERR_INVALID_ARG,
 * AMPC_ERR_NOMEM. */
ampc_status ampc_mmodel_create(ampc_mmodel **out, const ampc_mmodel_config *c, ampc_params *P,
                               const ampc_amp_config *amp, int64_t max_batch);
/* The same on a device: P's role buffers (weights, gradients) must be that
 * device's memory (AMPC_DEVICE_CUDA: the backend's device memory, with a context
 * bound to the calling thread for every later call), and so are the
 * activations, caches and workspaces the model allocates; the batches stay
 * host memory (copied in by the forward pass), losses and metrics come back
 * to the host. Not on a device yet (AMPC_ERR_UNSUPPORTED): fp8-mixed,
 * global negatives (ampc_mmodel_set_group). The probe's marks work there
 * (the CUDA layers feed the bound rounding tally, src/backend/cuda/cuda_nn.h), and its
 * shadow GEMM runs on the device (shadow_result).
 * On AMPC_DEVICE_CUDA also refused: --accumulate fp16 (cuBLASLt's COMPUTE_16F
 * takes F16 only). Free the model with the same context bound (its memory
 * is released through the bound context; with none bound it would leak).
 * AMPC_DEVICE_CPU is ampc_mmodel_create. Errors: as ampc_mmodel_create,
 * AMPC_ERR_UNSUPPORTED, and the device's (AMPC_ERR_DEVICE). */
ampc_status ampc_mmodel_create_on(ampc_mmodel **out, const ampc_mmodel_config *c, ampc_params *P,
                                  const ampc_amp_config *amp, int64_t max_batch, ampc_device dev);
/* ampc_mmodel_plan_bytes for a model made on dev: on a device the arena also
 * holds the batch's inputs (images, token ids, labels) and one scalar;
 * *activations + *workspace equals ampc_mmodel_activation_bytes of that
 * model. Errors: as ampc_mmodel_plan_bytes, an unknown device. */
ampc_status ampc_mmodel_plan_bytes_on(const ampc_mmodel_config *c, int64_t batch, ampc_precision p,
                                      ampc_device dev, size_t *activations, size_t *workspace);
/* The device scratch a GPU model of configuration c at max batch `batch`
 * and preset p takes for --attention-cast (attn_cast): the largest attention
 * call's probabilities rounded to the 16-bit activation dtype for the P v
 * product, b*h*tq*tk values (the CUDA backend's attention rounds the
 * whole batch at once; the CPU rounds one sample per thread and takes no
 * more than h*tq*tk values a thread). 0 when the cast is not in effect
 * (attn_cast false, a 32-true preset, or 16-bit probabilities) or for bad
 * arguments. In bytes. */
size_t ampc_mmodel_attn_cast_bytes(const ampc_mmodel_config *c, int64_t batch, ampc_precision p);
void ampc_mmodel_free(ampc_mmodel *M);
/* The model's FP8 sites (fp8-mixed), or NULL in the other presets. */
ampc_fp8_sites *ampc_mmodel_fp8(ampc_mmodel *M);
/* FP8 sites of the multimodal model c under fp8-mixed: 6 per transformer
 * block (q, k, v, out, fc1, fc2) of every tower. */
int ampc_mmodel_fp8_site_count(const ampc_mmodel_config *c);

/* INT8 inference (post-training quantization, include/ampc/quant.h): the
 * linear layer whose weight is `name` (a block's attn or cross_attn
 * in_proj_weight [3D, D] (q, k and v), out_proj.weight, mlp.fc1.weight or
 * mlp.fc2.weight) runs its forward pass as ampc_linear_forward_s8 with w
 * [rows, cols] int8 and scale [rows] (per_channel) or [1], copied, and the
 * activation scales x_scales [3] for an in-projection's q, k, v inputs, [1]
 * otherwise (calibrated, positive and finite; NULL: dynamic, per call). The model's own weight of
 * that layer is then unused in the forward pass; the backward pass refuses. Errors:
 * AMPC_ERR_NOT_FOUND (not such a layer: keep it in the model's dtype), AMPC_ERR_INVALID_ARG (shape,
 * given twice), AMPC_ERR_UNSUPPORTED (a device backend, fp8-mixed), AMPC_ERR_NOMEM. */
ampc_status ampc_mmodel_set_int8(ampc_mmodel *M, const char *name, const int8_t *w, int64_t rows,
                                 int64_t cols, const float *scale, bool per_channel,
                                 const float *x_scales);
/* The INT8 sites of the layer whose weight is `name` (as above): 3 for an
 * in-projection (q, k, v: parts 0, 1, 2), 1 for the others, 0 for a layer
 * that is no block's (a head, the patch embedding). */
int ampc_mmodel_int8_parts(const ampc_mmodel *M, const char *name);
/* INT8 calibration: each forward pass hands the input of part `part` of
 * the layer whose weight is `name` (as above), as FP32 [n], to
 * observe(user, x, n) before the layer runs (ampc_linear_fp8.observe);
 * observe NULL stops it. Errors: AMPC_ERR_NOT_FOUND (no such block layer),
 * AMPC_ERR_INVALID_ARG (a part out of range), AMPC_ERR_UNSUPPORTED (a device
 * backend, fp8-mixed), AMPC_ERR_NOMEM. */
ampc_status ampc_mmodel_observe(ampc_mmodel *M, const char *name, int part,
                                void (*observe)(void *user, const float *x, int64_t n), void *user);
/* The INT8 sites set (q, k, v counted apart). */
int ampc_mmodel_int8_layers(const ampc_mmodel *M);
/* Quantization-aware training: on, every transformer block's q, k, v, out,
 * fc1 and fc2 runs INT8 fake-quantized (ampc_linear_fp8's fake_q8,
 * include/ampc/nn.h: x per tensor, W per output channel, the
 * straight-through estimator in the backward pass), the layers `ampc
 * quantize` quantizes by default; the patch embedding and the heads stay
 * unquantized. Off: back to the model's precision. Errors:
 * AMPC_ERR_UNSUPPORTED (a device backend, fp8-mixed, a model with INT8
 * weights, a model without blocks), AMPC_ERR_NOMEM, AMPC_ERR_INVALID_ARG. */
ampc_status ampc_mmodel_set_fake_quant(ampc_mmodel *M, bool on);
/* Whether the model's blocks are fake-quantized. */
bool ampc_mmodel_fake_quant(const ampc_mmodel *M);
/* The configuration and the largest batch the model was created for. */
const ampc_mmodel_config *ampc_mmodel_get_config(const ampc_mmodel *M);
int64_t ampc_mmodel_max_batch(const ampc_mmodel *M);
/* Bytes of activations, caches and gradient workspaces allocated. */
size_t ampc_mmodel_activation_bytes(const ampc_mmodel *M);
/* The same count without allocating anything: the bytes ampc_mmodel_create
 * would carve from its arena for configuration c, max batch `batch` and
 * preset p (the same layout code, run in counting mode), split into
 * *activations (saved activations, attention caches, layer-norm statistics,
 * embeddings: everything before the gradient workspaces) and *workspace (the
 * backward pass's gradient buffers); their sum equals
 * ampc_mmodel_activation_bytes. Either pointer may be NULL. Overrides of a preset
 * (master weights, loss scale, accumulation) do not change it. Errors:
 * AMPC_ERR_INVALID_ARG (batch outside [2, 2^20], bad config or preset). */
ampc_status ampc_mmodel_plan_bytes(const ampc_mmodel_config *c, int64_t batch, ampc_precision p,
                                   size_t *activations, size_t *workspace);

/* Forward pass of the composite loss w_itc * InfoNCE(image, text) + w_itm *
 * BCE(matching on the b positive pairs and b in-batch hard negatives: for
 * image i the text j != i of highest contrastive similarity) + w_cls *
 * CE(group of the image) [+ w_mlm * MLM]; image-only models: w_cls * CE of
 * the class head on CLS. MLM (w_mlm > 0; ALBEF's masked language modelling,
 * Li et al. 2021, section 3.1, after BERT, Devlin et al. 2019): each
 * non-padding token of a copy of caption i is replaced by AMPC_TOKEN_UNK
 * (the mask token) with probability mlm_prob (at least one per caption, from
 * mask_seed); the copy runs through the text encoder (beside the b captions:
 * 2b rows) and the fusion with image i (beside the 2b matching pairs: 3b),
 * and the MLM head's vocab logits at the masked positions give the mean
 * cross-entropy over every masked token of the batch: a token-level loss,
 * whose logit gradients are ~1/(vocab x tokens). bt's buffers must stay valid until the backward
 * pass. Errors: AMPC_ERR_INVALID_ARG (batch outside [2, max] (image-only: [1, max]), a label
 * outside [0, classes)), those of the layers. */
ampc_status ampc_mmodel_forward(ampc_mmodel *M, const ampc_mmodel_batch *bt,
                                ampc_mmodel_losses *out);

/* Backward pass of the last forward pass, each loss seeded with seed * its
 * weight (seed: the loss scale divided by the number of micro-batches; > 0
 * and finite), accumulating (+=) into P's gradients. Errors:
 * AMPC_ERR_INVALID_ARG (no forward pass since the last backward pass, a bad
 * seed), those of the layers. */
ampc_status ampc_mmodel_backward(ampc_mmodel *M, float seed);
/* The same with one seed per branch (per-branch loss scaling, ampc/amp.h):
 * the losses are seeded with seed[heads] (times their weights), and a
 * gradient crossing from branch a into branch b is multiplied by seed[b] /
 * seed[a] in FP32 before its one rounding (the heads' input gradients into
 * the fusion and the encoders, the fusion's cross-attention key/value
 * gradient into the vision encoder, its input gradient into the text
 * encoder), so every gradient of branch b is stored times seed[b]. The ratios
 * should be powers of two (exact). Telemetry: the key/value gradient is
 * counted with the fusion block that stores it. All seeds equal:
 * ampc_mmodel_backward, bit for bit. Errors: as ampc_mmodel_backward. */
ampc_status ampc_mmodel_backward_branches(ampc_mmodel *M, const float seed[AMPC_BRANCH_COUNT]);

/* The loss terms, in the order of the per-loss seeds below. */
enum {
  AMPC_MM_LOSS_ITC = 0,
  AMPC_MM_LOSS_ITM = 1,
  AMPC_MM_LOSS_CLS = 2,
  AMPC_MM_LOSS_MLM = 3, /* seeded only when w_mlm > 0 */
  AMPC_MM_LOSSES = 4
};

/* The backward pass with one seed per loss term (per-loss loss scaling,
 * ampc/amp.h): term k seeded with seed[k] (times its weight), 0 for a term
 * left out, one seed for every branch. Unlike the other backward passes it
 * keeps the forward pass, so each term can have its own pass (apex's
 * loss_id): the passes read the saved activations and write only gradients
 * and workspaces. Image-only models have the cls term only. Errors:
 * AMPC_ERR_INVALID_ARG (no forward pass, a seed negative or not finite,
 * every seed 0), those of the layers. */
ampc_status ampc_mmodel_backward_losses(ampc_mmodel *M, const float seed[AMPC_MM_LOSSES]);

/* What a model reports while it runs, for the rounding telemetry: the end of
 * each block or head (so the tally's counts since the previous mark belong to
 * that branch and pass), and one sampled linear product per transformer MLP
 * for the FP64 shadow accumulation check (y = x W^T: x [m, k], w [n, k]). A
 * probe is an interface the model calls and does not own; the diagnosis layer
 * implements it (ampc_telemetry_probe in ampc/diag.h), so the model does not
 * depend on the layer above it. on() false: the model skips both. A model on
 * a device reports its shadow through shadow_result instead: the sampled rows
 * (ampc_probe_shadow_rows) of x, w and the device's own FP32 product of
 * them (y [rows, n]), copied to the host. */
typedef struct ampc_model_probe {
  void *user;
  bool (*on)(void *user);
  /* the tensor `name` (stored in dt) is finished; true when it is the first
   * with a non-finite value (the model then reports its samples) */
  bool (*mark)(void *user, ampc_branch br, ampc_tm_phase ph, const char *name, ampc_dtype dt);
  ampc_status (*shadow_linear)(void *user, ampc_branch br, const char *name, int64_t m, int64_t k,
                               int64_t n, const void *x, ampc_dtype xdt, const void *w,
                               ampc_dtype wdt, ampc_acc acc);
  ampc_status (*shadow_result)(void *user, ampc_branch br, const char *name, int64_t rows,
                               int64_t k, int64_t n, const void *x, ampc_dtype xdt, const void *w,
                               ampc_dtype wdt, const float *y);
  /* which of the micro-batch's n samples hold a non-finite value in the
   * tensor the last mark named first (bad[r] != 0); may be NULL */
  void (*samples)(void *user, const uint8_t *bad, int64_t n);
} ampc_model_probe;

/* The rows of an x [m, k] a shadow check samples: min(m, 16) rows (0 for
 * m < 1), every (m / rows)-th from row 0. */
static inline int64_t ampc_probe_shadow_rows(int64_t m) { return m < 16 ? (m < 1 ? 0 : m) : 16; }

/* Attach a probe (copied; NULL detaches). */
void ampc_mmodel_set_probe(ampc_mmodel *M, const ampc_model_probe *p);

/* Where a backward pass says which gradients are final (fn NULL: nowhere,
 * the default). After each transformer block's backward pass (fusion,
 * vision, text: each in reverse depth order) fn(user, lo, hi) names the
 * element range [lo, hi) of the parameter table (every role buffer) that
 * holds the block's 12 parameters, norm1.weight .. mlp.fc2.bias, and their
 * padding: nothing later in the pass writes those gradients. Between the
 * larger ops it calls fn(user, lo, lo) (an empty range), so a caller can
 * let its nonblocking messages move (the data-parallel sum's overlap,
 * ampc_accum.overlap). It also names, once final, the fusion's final norm
 * with every head (the table's end: after the heads' backward pass) and the
 * vision encoder's patch embedding, CLS token, positions and final norm
 * (after its pass); the ranges named never overlap. The rest (the text
 * encoder's embeddings and final norm, padding between ranges) is not
 * named: it is final when the pass returns. fn runs on
 * the thread that called the backward pass, between the layers' parallel
 * regions; it cannot fail the pass (keep its error and check it after). */
void ampc_mmodel_set_grad_ready(ampc_mmodel *M, void (*fn)(void *user, int64_t lo, int64_t hi),
                                void *user);

/* The data-parallel group a multimodal model contrasts over, for CLIP's
 * global negatives: an interface the model calls and does not own (the
 * training run implements it on its communicator, ampc/train.h). Every call
 * is collective. */
typedef struct ampc_model_group {
  void *user;
  int rank, size;
  /* y [size * bytes] = every rank's x [bytes], in rank order */
  ampc_status (*allgather)(void *user, const void *x, size_t bytes, void *y);
  /* x [n] (in place) = the FP32 sum over ranks, in rank order */
  ampc_status (*sum_f32)(void *user, float *x, int64_t n);
} ampc_model_group;

/* Contrast over the group's global batch (NULL: each rank's own batch, the
 * default): the InfoNCE loss of the next passes sees all size x b image and
 * text embeddings (gathered; their gradients summed back to the rank that
 * owns each), every rank computing the rows of its own samples; the hard
 * negatives of the matching head stay within the rank's batch (the fusion
 * runs on local samples). Allocates the gathered buffers (for b up to the
 * model's max batch). Errors: AMPC_ERR_INVALID_ARG for an image-only model
 * or a bad group; AMPC_ERR_NOMEM. */
ampc_status ampc_mmodel_set_group(ampc_mmodel *M, const ampc_model_group *g);
/* Bytes of the global-negative buffers (0 when off). */
size_t ampc_mmodel_group_bytes(const ampc_mmodel *M);

/* The hard negatives chosen by the last forward pass: neg[i] is the text
 * paired with image i as a negative (b values). */
void ampc_mmodel_last_negatives(const ampc_mmodel *M, int64_t b, int32_t *neg);

/* Embeddings for retrieval: img_emb [b, embed] from images (or NULL), txt_emb
 * [b, embed] from tokens (or NULL), both L2-normalised, FP32; group
 * predictions cls [b] (or NULL, needs images). */
ampc_status ampc_mmodel_embed(ampc_mmodel *M, int64_t b, const uint8_t *images,
                              const int32_t *tokens, float *img_emb, float *txt_emb, int32_t *cls);

/* Metrics of the model on one split of an image-text dataset. */
typedef struct ampc_mmodel_metrics {
  int64_t samples, concepts;  /* images in the split; distinct concepts (captions) */
  double i2t_r1, i2t_r5;      /* image -> text: the image's caption ranked 1st / in top 5 */
  double t2i_r1, t2i_r5;      /* text -> image: an image of the caption's concept ranked
                                 1st / in the top 5 */
  double itm_acc;             /* matching accuracy on positives and hard negatives */
  double itm_acc_random;      /* ... on positives and random in-batch negatives (the
                                 negative of image i drawn uniformly, a fixed seed) */
  double cls_acc;             /* group accuracy of the image classifier */
  double loss, itc, itm, cls; /* mean losses over the evaluation batches */
  double mlm, mlm_acc;        /* masked caption modelling (0 when off) */
} ampc_mmodel_metrics;

#ifdef __cplusplus
}
#endif
#endif
