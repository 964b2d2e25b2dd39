/*
 * ampc/train.h: the training run (DESIGN.md section 1, "training run"; the
 * log contract of section 4). Everything `ampc train` does lives here, so a C
 * program reproduces a CLI run bit for bit:
 *
 *   ampc_amp_config amp;  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp);
 *   ampc_optim_config opt = ampc_optim_adamw_defaults();
 *   opt.warmup_steps = 20, opt.total_steps = 300;    (the schedule is the optimizer's:
 *                                                     `ampc train` sets warmup min(20, steps)
 *                                                     and total_steps = steps for cosine)
 *   ampc_run_config rc = ampc_run_config_defaults();
 *   rc.steps = 300, rc.batch = 64, rc.log_path = "run.jsonl", rc.save_path = "ck.safetensors";
 *   ampc_model_desc md;   ampc_model_desc_get("mm-tiny", &dataset, &md);
 *   ampc_run_data data = {.dataset = &dataset, .name = "emoji"};
 *   ampc_run *R;
 *   ampc_run_create(&R, &rc, &amp, &opt, &md, &data);   (builds trainer and model, resumes)
 *   ampc_run_train(R, NULL);                            (the loop, once; callbacks may print)
 *   ampc_run_free(R);
 *
 * examples/train_mm.c is a complete program; with the CLI's defaults it
 * writes the checkpoint `ampc train` writes, bit for bit.
 *
 * Layers: the run sits above the models (src/model/), the trainer's parts
 * (src/amp/, src/optim/), io, diag and report; the CLI (tools/ampc/) only
 * parses flags and prints what the callbacks hand it. Where MPI or a GPU
 * backend come in, they plug into this one loop.
 */
#ifndef AMPC_TRAIN_H
#define AMPC_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/data.h"
#include "ampc/diag.h"
#include "ampc/engine.h"
#include "ampc/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the model interface ---------------------------------------------------------- */

typedef enum ampc_model_kind {
  AMPC_MODEL_MLP = 0, /* the MLP classifier on dense FP32 features (the engine's smoke test) */
  AMPC_MODEL_MM = 1,  /* the multimodal image-text model and the image-only ViTs (src/model/mm.c) */
} ampc_model_kind;

/* What model to build: a kind and its configuration. */
typedef struct ampc_model_desc {
  ampc_model_kind kind;
  char name[32]; /* "mlp", "mm-tiny", "vit-ref", ... */
  ampc_mlp_config mlp;
  ampc_mmodel_config mm;
} ampc_model_desc;

/* The model called `name` ("mlp": in 16, hidden 64, classes 5; or a name of
 * ampc_mmodel_config_get) for dataset d (vocab, seq_len, classes; may be NULL for
 * the MLP). Errors: AMPC_ERR_INVALID_ARG (unknown name). */
ampc_status ampc_model_desc_get(const char *name, const ampc_dataset *d, ampc_model_desc *out);

/* Whether dataset D (called dn in messages) can feed the multimodal or ViT
 * model mc: captions for an image-text model, images of mc's size, and an
 * image-text model's vocab and seq_len. Errors: AMPC_ERR_INVALID_ARG naming
 * the mismatch and the models that fit D's images (ampc_mmodel_list). */
ampc_status ampc_mmodel_check_data(const ampc_mmodel_config *mc, const ampc_dataset *D,
                                   const char *dn);

/* True for the names ampc_model_desc_get knows (whatever the data). */
bool ampc_model_known(const char *name);

/* The model a checkpoint of a multimodal run was trained with, read from
 * the metadata the run writes ("ampc.model_config": a JSON object of name,
 * vocab, seq_len, classes, the loss weights and attention_cast, the model's
 * attn_cast (absent: false), so that an evaluation rounds as training
 * did), the preset it was trained in
 * (precision; may be NULL) and its iteration (may be NULL). Errors:
 * AMPC_ERR_IO, AMPC_ERR_FORMAT (not a checkpoint of a multimodal model; the
 * message names the file). */
ampc_status ampc_model_desc_from_checkpoint(const char *path, ampc_model_desc *out, char *precision,
                                            size_t precision_cap, int64_t *iteration);
/* The metadata entries that name model d in a checkpoint ("ampc.model"; for
 * the multimodal kind also "ampc.model_config" and "ampc.data" = data_name).
 * The model config records d->mm.attn_cast as given: pass it as in effect
 * (ampc train records false under 32-true, where the cast does nothing).
 * Fills meta[0..n) (at most 3; the strings live in *storage) and returns n. */
typedef struct ampc_model_meta_storage {
  char config[512];
} ampc_model_meta_storage;
int ampc_model_checkpoint_meta(const ampc_model_desc *d, const char *data_name,
                               ampc_model_meta_storage *storage, ampc_st_meta meta[3]);

/* One (micro-)batch. Multimodal: images [b, img, img, channels] uint8,
 * tokens [b, seq_len] (NULL for the image-only models), labels [b]. MLP:
 * features [b, in] FP32, labels [b]. */
typedef struct ampc_batch {
  int64_t b;
  const uint8_t *images;
  const int32_t *tokens;
  const int32_t *labels;
  const float *features;
  uint64_t neg_seed;  /* ampc_mmodel_batch.neg_seed (0: hardest negatives) */
  uint64_t mask_seed; /* ampc_mmodel_batch.mask_seed (MLM's masked positions) */
  bool neg_uniform;   /* ampc_mmodel_batch.neg_uniform (random negatives) */
  /* ampc_mmodel_batch's test hook (extreme_factor 0: off) */
  int64_t extreme_row;
  float extreme_factor;
} ampc_batch;

/* The losses of one forward pass (FP32, unscaled): the weighted total and the
 * named parts that go into the step line (multimodal: loss_itc, loss_itm,
 * loss_cls, itm_acc, group_acc, and with MLM loss_mlm, mlm_acc; the MLP has
 * none). */
enum { AMPC_LOSS_PARTS_MAX = 8 };
typedef struct ampc_losses {
  float total;
  int n_parts;
  const char *part_name[AMPC_LOSS_PARTS_MAX]; /* static strings */
  float part[AMPC_LOSS_PARTS_MAX];
} ampc_losses;

/* What an evaluation measured. Retrieval (multimodal models): new_style and
 * zero_shot (accuracy, loss, samples and split are 0). Classes (the ViTs and
 * the MLP): accuracy and mean loss of the class head on `samples` samples of
 * one split (new_style and zero_shot are 0). An evaluation covers the whole
 * split (the emoji set's: 1,729 new-style and 2,384 zero-shot images). */
typedef enum { AMPC_EVAL_RETRIEVAL = 0, AMPC_EVAL_CLASSES = 1 } ampc_eval_kind;
typedef struct ampc_eval {
  ampc_eval_kind kind;
  ampc_mmodel_metrics new_style, zero_shot;
  ampc_mmodel_metrics val; /* a packed dataset's val split (samples 0: none) */
  /* zero-shot classification of the val images by the class prompts
   * ("a photo of a {label}"; ampc_mmodel_zero_shot): accuracy, classes
   * (0: the data has no labels) */
  double prompt_acc;
  int64_t prompt_classes;
  double accuracy, loss;
  int64_t samples;
  int split; /* ampc_split evaluated (classes) */
} ampc_eval;

/* The data a run trains and evaluates on: an image(-text) dataset (its
 * training split is sampled; evaluation on its evaluation splits) or, for
 * the MLP, dense features (train and test rows). */
struct ampc_stream;
typedef struct ampc_run_data {
  /* the image(-text) dataset; with a stream, the evaluation data (the
   * packed dataset's val split, which also gives the model its shapes) */
  const ampc_dataset *dataset;
  /* a packed dataset's training split, streamed (include/ampc/shards.h),
   * or NULL: the dataset's training split */
  struct ampc_stream *stream;
  /* the packed dataset the stream reads, for its samples' keys (NULL: none) */
  struct ampc_shards *shards;
  int64_t stream_n_train;
  const int32_t *class_prompts;    /* [n_classes, seq_len] or NULL (zero-shot prompts) */
  const char *pack_id;             /* the packed data's identity (ampc_shards_info.id), or NULL */
  int64_t n_train, n_test, dim;    /* dense features */
  const float *x_train, *x_test;   /* [n_train, dim], [n_test, dim] FP32 */
  const int32_t *y_train, *y_test; /* labels */
  const char *name;                /* recorded in the log and the checkpoint ("emoji") */
} ampc_run_data;

/* A model built over a parameter table: forward, backward(seed), evaluate.
 * The kinds above implement it; ops is public so another model can too. */
typedef struct ampc_model ampc_model;
typedef struct ampc_model_ops {
  /* forward pass on bt (b <= the max batch); bt's buffers must stay valid
   * until the backward pass */
  ampc_status (*forward)(ampc_model *m, const ampc_batch *bt, ampc_losses *out);
  /* backward pass of the last forward pass, seeded with `seed` (the loss scale
   * divided by the number of micro-batches), accumulating (+=) into the
   * parameter table's gradients */
  ampc_status (*backward)(ampc_model *m, float seed);
  /* the same with one seed per branch (--loss-scale per-branch;
   * ampc_mmodel_backward_branches); NULL for a model whose parameters are
   * all in one branch (the MLP: heads), which is seeded with seed[heads] */
  ampc_status (*backward_branches)(ampc_model *m, const float seed[AMPC_BRANCH_COUNT]);
  /* one seed per loss term (m->n_terms of them; --loss-scale per-loss;
   * ampc_mmodel_backward_losses), keeping the forward pass for the next
   * term's pass; NULL for a one-term model (the MLP), whose one pass is
   * backward(seed[0]) */
  ampc_status (*backward_losses)(ampc_model *m, const float *seed);
  ampc_status (*evaluate)(ampc_model *m, const ampc_run_data *d, ampc_eval *out);
  /* attach a telemetry collector (NULL: the model does not mark branches) */
  void (*set_telemetry)(ampc_model *m, ampc_telemetry *t);
  void (*destroy)(ampc_model *m);
} ampc_model_ops;

struct ampc_model {
  const ampc_model_ops *ops;
  ampc_model_desc desc;
  int64_t max_batch;
  size_t activation_bytes, workspace_bytes; /* what the model allocated, by role */
  ampc_fp8_sites *fp8; /* fp8-mixed: the model's FP8 sites (owned by impl), else NULL */
  /* the loss terms backward_losses seeds (per-loss scaling): n_terms, each
   * with its log name and whether it contributes (weight != 0, present) */
  int n_terms;
  const char *term_name[AMPC_MM_LOSSES];
  bool term_on[AMPC_MM_LOSSES];
  /* optional: called on the evaluating thread as ampc_model_evaluate
   * advances, with the fraction of the evaluation done (rising to 1; the
   * multimodal models after every batch, the others at the end) */
  void (*eval_progress)(void *user, double fraction);
  void *eval_progress_user;
  /* optional: non-zero stops the multimodal evaluation at its next batch
   * (ampc_model_evaluate fails with AMPC_ERR_INVALID_ARG, "evaluation
   * cancelled"); a signal handler may set it */
  const volatile sig_atomic_t *eval_cancel;
  void *impl;
};

/* ---- the FP8 scaling state in checkpoints (fp8-mixed) ------------------------ */

typedef struct ampc_fp8_state_storage {
  ampc_st_tensor *t;
  char (*names)[AMPC_FP8_SITE_NAME + 32];
  float *scales;
} ampc_fp8_state_storage;

/* The tensors of S's state for ampc_trainer_save_ex: per site
 * "fp8.<site>.amax_history" F32 [3, history] (x, w, dy; the histories point
 * into S) and "fp8.<site>.scale" F32 [3] (copied into st). Free st with
 * ampc_fp8_state_storage_free after saving. Errors: AMPC_ERR_NOMEM. */
ampc_status ampc_fp8_state_tensors(const ampc_fp8_sites *S, ampc_fp8_state_storage *st,
                                   ampc_st_tensor **out, int *n);
void ampc_fp8_state_storage_free(ampc_fp8_state_storage *st);
/* Restore S's histories and scales from the checkpoint at path (everything
 * validated before anything changes). A checkpoint without FP8 state (another
 * preset) leaves S fresh (*found = false). Errors: AMPC_ERR_IO,
 * AMPC_ERR_FORMAT (a malformed tensor, another --fp8-amax-history). */
ampc_status ampc_fp8_state_load(ampc_fp8_sites *S, const char *path, bool *found);

/* The parameter specs of a model (names stored in *out). Errors:
 * AMPC_ERR_INVALID_ARG, AMPC_ERR_NOMEM. */
ampc_status ampc_model_specs(const ampc_model_desc *d, ampc_mmodel_specs *out);
/* Build the model over P (whose specs are ampc_model_specs(d)) for batches of
 * up to max_batch under amp's policy and accumulation. Errors:
 * AMPC_ERR_INVALID_ARG, AMPC_ERR_NOMEM. */
ampc_status ampc_model_create(ampc_model *m, const ampc_model_desc *d, ampc_params *P,
                              const ampc_amp_config *amp, int64_t max_batch);
/* The same on a device (ampc_mmodel_create_on: P's role buffers are that
 * device's, e.g. ampc_trainer_params of a trainer moved there); the
 * multimodal models and ViTs only (else AMPC_ERR_UNSUPPORTED). */
ampc_status ampc_model_create_on(ampc_model *m, const ampc_model_desc *d, ampc_params *P,
                                 const ampc_amp_config *amp, int64_t max_batch, ampc_device dev);
void ampc_model_free(ampc_model *m);
/* The activation and workspace bytes ampc_model_create would allocate,
 * without allocating (the memory account). Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_model_plan_bytes(const ampc_model_desc *d, int64_t max_batch, ampc_precision p,
                                  size_t *activations, size_t *workspace);

/* ---- one training step ---------------------------------------------------------- */

/* Supplies micro-batch k (0-based) of the current step. */
typedef ampc_status (*ampc_batch_fn)(void *user, int64_t k, ampc_batch *out);

/* The first half of ampc_train_step: zero_grad and the forward and backward
 * passes of every micro-batch, without the trainer's step (so a caller can
 * end a telemetry window, or reduce gradients across processes, before it). */
ampc_status ampc_train_accumulate(ampc_trainer *T, ampc_model *m, int64_t n_micro,
                                  ampc_batch_fn next, void *user, ampc_losses *mean);

/* One optimizer step with gradient accumulation over n_micro micro-batches:
 * zero_grad; for each micro-batch a forward pass and a backward pass seeded
 * with S / n_micro (S = ampc_trainer_loss_scale); ampc_trainer_step; under
 * fp8-mixed, ampc_fp8_sites_update (the next step's scales, whether or not
 * this one was skipped). *mean
 * receives the losses averaged over the micro-batches (each weighted 1 /
 * n_micro in FP32). Errors: those of the model and the trainer. */
ampc_status ampc_train_step(ampc_trainer *T, ampc_model *m, int64_t n_micro, ampc_batch_fn next,
                            void *user, ampc_losses *mean, ampc_step_info *info);

/* ---- data parallelism: the group of processes a step runs in ----------------------- */

/* The data-parallel group, as the run sees it: a table of collective calls
 * that src/dist/ implements over MPI (ampc_dist_comm, ampc/dist.h), kept here
 * so that the training layer needs no MPI. Every call is collective: all
 * ranks make it, in the same order. NULL in the run config: one process. */
typedef struct ampc_comm {
  void *user;
  int rank, size; /* this process, of `size` (rank 0 writes the log and the checkpoint) */
  /* x[0..n) (in place) = the FP32 sum over ranks, formed left to right in
   * rank order ((x0 + x1) + x2) + ...: the same bits on every rank, and the
   * same as a single process summing the same terms in that order */
  ampc_status (*sum_f32_ordered)(void *user, float *x, int64_t n);
  /* x[0..n) (dtype dt, in place) = the sum over ranks in dtype dt, each
   * addition rounded once (the library's order: not fixed) */
  ampc_status (*sum_working)(void *user, void *x, ampc_dtype dt, int64_t n);
  ampc_status (*sum_u64)(void *user, uint64_t *x, int64_t n); /* exact sums, in place */
  ampc_status (*max_f64)(void *user, double *x, int64_t n);   /* maxima, in place */
  /* y [size * bytes] = every rank's x [bytes], in rank order */
  ampc_status (*allgather)(void *user, const void *x, size_t bytes, void *y);
  /* fails (AMPC_ERR_INVALID_ARG, naming `what`) unless every rank passed the
   * same n bytes */
  ampc_status (*check_same)(void *user, const void *bytes, size_t n, const char *what);
  /* bytes this rank has sent through the calls above (payload, not MPI's
   * headers) */
  uint64_t (*bytes_sent)(void *user);
  /* ZeRO-1 (may be NULL: no sharding). bounds[0..size]: rank r owns the
   * elements [bounds[r], bounds[r + 1]) (ampc_shard_range).
   * The rank-order FP32 sum of sum_f32_ordered, scattered: afterwards only
   * this rank's elements of x [n = bounds[size]] hold the sum (the same bits
   * as sum_f32_ordered's); the others are unspecified. */
  ampc_status (*sum_f32_ordered_scatter)(void *user, float *x, const int64_t *bounds);
  /* The same sum of every rank's g [bounds[size]] (dtype gdt, widened to
   * FP32 exactly, a chunk at a time: no FP32 copy of the whole gradient)
   * into `mine` [bounds[rank + 1] - bounds[rank]] FP32, this rank's shard of
   * the sum (the bits of sum_f32_ordered over the widened values). */
  ampc_status (*sum_f32_ordered_scatter_from)(void *user, const void *g, ampc_dtype gdt,
                                              float *mine, const int64_t *bounds);
  /* The shards gathered: every rank's `mine` (its bounds[r + 1] - bounds[r]
   * elements of elem bytes) into all [bounds[size] elements] at bounds[r],
   * on every rank (root < 0; all is then needed everywhere) or on rank root
   * only (all may be NULL elsewhere). mine may be all + bounds[rank] (in
   * place). */
  ampc_status (*gather_shards)(void *user, const void *mine, void *all, size_t elem,
                               const int64_t *bounds, int root);
  /* the same two sums on the device's own buffers (dx: device memory of the
   * bound CUDA context, ampc_device_open), through NCCL on that context's
   * stream (src/dist/nccl.h); NULL where NCCL is not available (not built,
   * no libnccl, no GPU, a run on the CPU, or a rank without it): the
   * trainer then copies through host memory (ampc_accum.host).
   * sum_device_f32_ordered gives sum_f32_ordered's bits (a chain in rank
   * order, then a broadcast); sum_device_working is ncclAllReduce in dt */
  ampc_status (*sum_device_f32_ordered)(void *user, float *dx, int64_t n);
  ampc_status (*sum_device_working)(void *user, void *dx, ampc_dtype dt, int64_t n);
  /* sum_f32_ordered overlapped with the backward pass (may be NULL: not
   * available; host buffers only). ovl_begin: the sum will be of x [n]
   * (collective). ovl_range: x[lo, hi) is final on this rank: its chain
   * starts (nonblocking); every rank must start the same ranges in the same
   * order, each element of x in exactly one range. ovl_progress: lets the
   * messages in flight move on (MPI moves data only inside its calls; call
   * it often). ovl_wait: blocks until every range started holds the sum;
   * then x [n] has sum_f32_ordered's bits on every rank. Only the calling
   * thread may call them (MPI_THREAD_FUNNELED), and x must stay in place
   * and unread until ovl_wait returns. */
  ampc_status (*ovl_begin)(void *user, float *x, int64_t n);
  ampc_status (*ovl_range)(void *user, int64_t lo, int64_t hi);
  ampc_status (*ovl_progress)(void *user);
  ampc_status (*ovl_wait)(void *user);
} ampc_comm;

/* ZeRO stage 1 (Rajbhandari et al. 2020, arXiv 1910.02054, section 5.1; as
 * DeepSpeed's stage 1, the FP32 master weights are partitioned with the
 * optimizer state): trainer T's master weights, moments and Kahan
 * compensation are cut to this rank's shard of group c (ampc_shard_range,
 * ampc_params_shard: 12 bytes per parameter with AdamW in the mixed presets
 * become 12 / size). Each step then takes the gradient's rank-order FP32
 * sum scattered over the shards (ampc_train_accumulate_dp), checks it and
 * forms its norm over all shards (one decision, the bits of one process),
 * updates its shard and gathers the working weights from every rank; the
 * swallowed-update counts are summed over the ranks. A group of one (c NULL
 * or size 1) changes nothing. Call after the trainer's state is final
 * (after a resume); the checkpoint stays whole (ampc_trainer_gather_view).
 * Errors: AMPC_ERR_INVALID_ARG on a device, with per-branch or per-loss
 * scaling, or twice; AMPC_ERR_UNSUPPORTED for a communicator without the
 * ZeRO calls; AMPC_ERR_NOMEM. */
ampc_status ampc_trainer_set_zero(ampc_trainer *T, const ampc_comm *c);

/* The whole trainer a checkpoint holds, from a ZeRO-1 trainer: *view is a
 * shallow copy of T whose master, moments and compensation are whole
 * buffers gathered from every rank's shard on rank `root` (collective: every
 * rank calls it; on the other ranks view->params has none of them).
 * ampc_trainer_view_free releases them. A trainer without shards: *view = *T
 * (no copy). Errors: those of the gather; AMPC_ERR_NOMEM. */
ampc_status ampc_trainer_gather_view(const ampc_trainer *T, int root, ampc_trainer *view);
void ampc_trainer_view_free(const ampc_trainer *T, ampc_trainer *view);

/* How gradients of several micro-batches and ranks are summed. */
typedef enum ampc_grad_reduce {
  /* each micro-batch's gradient on its own (working dtype), widened and
   * summed in FP32 (micro-batches in order, then ranks in order), rounded
   * once into the working dtype: one rounding for the whole sum, and N
   * ranks x 1 micro-batch give the bits of 1 rank x N micro-batches; an FP32
   * staging buffer of the parameters' size */
  AMPC_REDUCE_F32 = 0,
  /* micro-batches accumulate in place (the layers add into the gradient),
   * ranks sum in the working dtype (each addition rounded); no staging */
  AMPC_REDUCE_WORKING = 1,
} ampc_grad_reduce;

/* How one step's gradient is accumulated. */
typedef struct ampc_accum {
  int64_t micro_batches;   /* on this rank (>= 1) */
  const ampc_comm *comm;   /* NULL: one process */
  ampc_grad_reduce reduce; /* AMPC_REDUCE_F32 or AMPC_REDUCE_WORKING */
  float *stage;            /* [params total] FP32; needed by AMPC_REDUCE_F32 when
                              micro_batches > 1 or comm->size > 1, and by per-loss
                              scaling (else unused); in the trainer's device's
                              memory when it is on one (ampc_trainer_to_device) */
  /* optional: called with this rank's summed gradient (the FP32 stage or
   * the working-dtype gradient, n values) just before the ranks' sum (the
   * run's test hooks inject a non-finite value on one rank there) */
  ampc_status (*before_reduce)(void *user, void *g, ampc_dtype dt, int64_t n);
  void *hook_user;
  /* the loss multiplier lambda (the loss-multiplier sweep; 0 or 1: none): every
   * backward seed is multiplied by it, so the stored gradients are lambda
   * times the loss's (the reported losses are not) */
  float loss_multiplier;
  /* --loss-scale per-loss: a backward pass per loss term, each unscaled into
   * the FP32 stage (always needed then), which the trainer's step reads */
  bool per_loss;
  /* a trainer on a device with comm->size > 1: host memory the ranks' sum
   * goes through (the communicator works on host buffers; size:
   * ampc_accum_host_bytes); else unused */
  void *host;
  /* overlap the ranks' FP32 sum with the last micro-batch's backward pass
   * (comm->ovl_*): each transformer block's gradient is staged and its
   * chain started as soon as the block's backward pass is done
   * (ampc_mmodel_set_grad_ready), the rest after the pass; the same bits
   * as without. Needs AMPC_REDUCE_F32, a trainer on the CPU and one loss
   * scale (not per loss or per branch); a model without the hook (the MLP)
   * starts everything after its pass. Ignored for one process and when
   * before_reduce is set (the test hooks see the whole sum first). */
  bool overlap;
  /* ZeRO-1 (the trainer's ampc_trainer_set_zero): with one micro-batch and no
   * overlap the ranks' sum is reduce-scattered straight from the working
   * dtype (sum_f32_ordered_scatter_from), and the stage holds only this
   * rank's shard of the FP32 sum */
  bool zero;
  /* optional: += the seconds this rank spent in the ranks' gradient sum:
   * the blocking call's wall time, or, overlapped, the time inside the
   * ovl_* calls (ovl_wait's included) */
  double *reduce_wait_s;
} ampc_accum;

/* Let model m contrast over a data-parallel group (ampc_mmodel_set_group; NULL:
 * its own batch); its workspace bytes grow by the gathered buffers. Errors:
 * AMPC_ERR_INVALID_ARG for a model without a contrastive loss. */
ampc_status ampc_model_set_group(ampc_model *m, const ampc_model_group *g);
/* INT8 fake quantization of model m's transformer blocks on or off
 * (ampc_mmodel_set_fake_quant). Errors: AMPC_ERR_INVALID_ARG for a model
 * other than the image-text ones (an image-only ViT, the MLP), and
 * ampc_mmodel_set_fake_quant's. */
ampc_status ampc_model_set_fake_quant(ampc_model *m, bool on);

/* Bytes of FP32 staging that accumulation `a` needs over n parameters (0 when
 * it needs none). */
size_t ampc_accum_stage_bytes(const ampc_accum *a, int64_t n);
/* Bytes of host staging (ampc_accum.host) for the ranks' sum of n parameters
 * in dtype wdt when the trainer is on a device (0 for one process). */
size_t ampc_accum_host_bytes(const ampc_accum *a, int64_t n, ampc_dtype wdt);

/* ampc_train_accumulate across micro-batches and ranks: each micro-batch's
 * backward pass is seeded with S / K, K = micro_batches x ranks (as
 * DistributedDataParallel averages: the summed gradient is the global
 * batch's mean), the gradients are summed as a->reduce says, and *mean gets
 * the losses weighted 1 / K in FP32 and summed over ranks in rank order, so
 * every rank holds the same gradient and losses. Errors: those of the model
 * and of the collectives; AMPC_ERR_INVALID_ARG for a missing stage. */
ampc_status ampc_train_accumulate_dp(ampc_trainer *T, ampc_model *m, const ampc_accum *a,
                                     ampc_batch_fn next, void *user, ampc_losses *mean);

/* ---- the diagnosis' view of a trainer (src/diag/ is below the trainer) ---------------- */

/* Fill *s from a trainer after ampc_trainer_step returned info, the run's loss
 * and the telemetry collector that sampled the iteration (ended; NULL when the
 * iteration was not sampled). */
void ampc_diag_step_fill(ampc_diag_step *s, const ampc_trainer *T, const ampc_step_info *info,
                         double loss, const ampc_telemetry *tm);
/* The settings of trainer T as the diagnosis sees them. */
void ampc_diag_config_from(ampc_diag_config *c, const ampc_trainer *T);

/* ---- the run -------------------------------------------------------------------- */

/* What a run does when it can no longer learn. */
typedef enum ampc_stall_policy {
  AMPC_STALL_STOP = 0, /* print, log, save nothing more, fail (DeepSpeed's default) */
  AMPC_STALL_WARN = 1, /* print and log once, go on */
} ampc_stall_policy;

/* Test hooks of the robustness tests (docs/ROBUSTNESS.md): where a rank
 * fails, or its summed gradient becomes non-finite, just before the ranks'
 * sum: rank `rank` in 1-based iteration `iteration` (0: never). A release
 * build of the CLI never sets them; the test build's `ampc train` reads them
 * from AMPC_FAULT_FAIL / AMPC_FAULT_NAN_GRAD (built with AMPC_TEST_HOOKS). */
typedef struct ampc_fault_at {
  int rank;
  int64_t iteration;
} ampc_fault_at;
typedef struct ampc_fault_plan {
  ampc_fault_at fail;     /* the rank's step fails (AMPC_ERR_IO), as a bad input would */
  ampc_fault_at nan_grad; /* the rank's gradient gets a NaN */
} ampc_fault_plan;
/* "R:I" (rank R, 1-based iteration I) into *out; NULL: never. Errors:
 * AMPC_ERR_INVALID_ARG for another form (*out: never). */
ampc_status ampc_fault_at_parse(const char *spec, ampc_fault_at *out);

typedef struct ampc_run_config {
  int64_t steps;           /* optimizer iterations of the whole run (the LR schedule's length) */
  int64_t stop_at;         /* > 0: end after this iteration as if interrupted (and save);
                              >= steps: the run's end */
  int64_t batch;           /* samples per iteration */
  int64_t micro_batches;   /* gradient accumulation: batch / micro_batches per pass */
  int64_t eval_every;      /* evaluate every N iterations (0: only at the end) */
  bool eval;               /* false: never evaluate */
  int64_t log_every;       /* step lines every N iterations (sampled, overflowing, last: always) */
  int64_t save_every;      /* checkpoint every N iterations (0: only at the end) */
  int64_t telemetry_every; /* rounding telemetry every N iterations (0: off) */
  uint64_t seed;           /* parameter initialisation and the sampler */
  const char *log_path;    /* JSON Lines metrics log, or NULL */
  const char *save_path;   /* checkpoint, or NULL */
  const char *resume_path; /* checkpoint to continue from, or NULL */
  /* data parallelism: the group (NULL: one process); batch is the global
   * batch, split evenly over comm->size ranks (each rank's shard: its
   * consecutive batch / size samples of the sampler's sequence) */
  const ampc_comm *comm;
  ampc_grad_reduce reduce; /* gradient sums over micro-batches and ranks */
  bool check_replicas;     /* compare every rank's weights after every step */
  /* ZeRO stage (ampc_trainer_set_zero): 0, every rank holds the whole master
   * weights and optimizer state; 1, each rank its shard (the CPU, --allreduce
   * f32, one loss scale; checkpoints stay whole, gathered on rank 0 when
   * saved, and resume on any number of ranks) */
  int zero;
  /* overlap the ranks' gradient sum with the last micro-batch's backward
   * pass (ampc_accum.overlap: the same bits; the CPU, --allreduce f32, one
   * loss scale; under ZeRO-1 the whole sum is broadcast and each rank uses
   * its shard) */
  bool overlap;
  /* A stall: the weights hold a non-finite value (no loss scale brings them
   * back), or stall_steps consecutive steps overflowed with a dynamic loss
   * scale at its floor (each one skipped), or the loss was non-finite for
   * stall_steps consecutive steps (the forward pass does not see the scale).
   * stall_steps 0: the scaler's hysteresis + 2 (3 with torch's defaults). */
  ampc_stall_policy on_stall;
  int64_t stall_steps;
  bool global_negatives; /* InfoNCE over the global batch (multimodal models;
                            ampc_mmodel_set_group); else each rank's shard */
  /* lambda in (0, 1] (0: 1): the backward pass differentiates lambda * loss
   * while AdamW's eps and the clipping norm are scaled by lambda too, so an
   * FP32 run takes the same steps (bit for bit for a power of two, short of
   * FP32 underflow; AdamW only: SGD's step is not scale-invariant, refused)
   * and every difference a 16-bit run shows comes from
   * gradients shrunk into its underflow range (the loss-multiplier sweep). The
   * logged losses are the unmultiplied ones. */
  float loss_multiplier;
  /* > 0: each training image is translated by up to this many pixels in x
   * and y (uniform, from the seed and the sample's position in the run, so
   * a resume is bit-identical), the border filled with its top-left pixel;
   * 0: off. Images of several styles of one concept (the emoji set's training
   * styles) are drawn one per concept per epoch, whatever this is.
   * ampc_run_config_defaults: 2. */
  int augment_shift;
  /* true: the matching head's negatives are drawn from the in-batch
   * similarities (ALBEF; ampc_mmodel_batch.neg_seed, from the seed, the
   * iteration, the rank and the micro-batch); false: the hardest one */
  bool itm_sample_negatives;
  /* with itm_sample_negatives: drawn uniformly over the other texts of the
   * batch instead of by similarity (--itm-negatives random). Defaults: both
   * true (with the hardest negatives the matching head stays at chance on
   * the emoji pairs: accuracy 0.49 after 250 steps) */
  bool itm_random_negatives;
  /* where the model and the step run: AMPC_DEVICE_CPU (0, the
   * default); AMPC_DEVICE_CUDA, GPU 0 (the run makes and binds its context;
   * the host only feeds batches and reads losses, metrics and step scalars);
   * AMPC_DEVICE_CPU_SPLIT, the device path on the CPU (a test aid: the CPU's
   * bits). Every loss-scaling mode, FP32 staging of micro-batches, the
   * rounding telemetry and several ranks (CUDA: rank r on GPU r mod the
   * count; the ranks' sum through host memory, ampc_accum.host) run there.
   * Not on a device yet (AMPC_ERR_UNSUPPORTED): the MLP, fp8-mixed, global
   * negatives. */
  ampc_device device;
  ampc_fault_plan faults; /* test hooks (above); zero: none */
  /* Anomaly replay: an iteration whose loss or gradients are non-finite
   * and that was not sampled by telemetry is run again with telemetry on
   * (the same weights, batch, loss scale and random draws), so its log line
   * and the live diagnosis name the first non-finite tensor whatever
   * telemetry_every is. The training is unchanged: a sampled pass gives the
   * unsampled one's bits, and the replay's gradients are not used. Every
   * such iteration is replayed (a rule without state: a resumed run replays
   * what the uninterrupted one did); each costs one more forward and
   * backward pass. Replayed: a non-finite loss, before the optimizer step;
   * non-finite gradients of a finite loss after a skipped step, at the
   * step's scale. Not replayed: fp8-mixed (its amax histories would see the
   * pass twice), and gradients that turn non-finite in the backward pass
   * alone with no loss scaling (the step was applied). As PyTorch's
   * torch.autograd.detect_anomaly, but only where a value went non-finite.
   * ampc_run_config_defaults: true. */
  bool anomaly_replay;
  /* a test hook for the diagnosis (ampc_mmodel_batch.extreme_factor): the
   * image of sample extreme_sample (numbered as ampc_run_batch_samples
   * numbers them) is made extreme in every batch that holds it, its
   * normalised pixels times extreme_factor; 0 (the default): off */
  int64_t extreme_sample;
  float extreme_factor;
  /* polled after each iteration (NULL: never): non-zero stops the run there,
   * as a run that reached its last step stops (no evaluation): the checkpoint
   * is written (save_path), the log gets {"event":"interrupted"} and the
   * summary, ampc_run_train returns AMPC_OK and ampc_run_interrupted(R) is
   * true. Under data parallelism the ranks take the flag's maximum, so all
   * stop after the same iteration. A signal handler may set it. */
  const volatile sig_atomic_t *interrupt;
  /* INT8 quantization-aware training: the multimodal model's transformer
   * blocks' linear layers run fake-quantized (ampc_mmodel_set_fake_quant,
   * include/ampc/model.h: INT8 per output channel weights, per tensor
   * dynamic activations, the straight-through estimator). Recorded in the
   * checkpoint ("ampc.fake_quant": "int8") and the log's config line. CPU
   * only; not fp8-mixed, image-only models or the MLP (AMPC_ERR_UNSUPPORTED,
   * AMPC_ERR_INVALID_ARG). Default false. */
  bool fake_quant_int8;
} ampc_run_config;

/* steps 300, batch 64, micro_batches 1, eval_every 100, eval on, log_every 1,
 * telemetry_every 10, seed 1, anomaly replay on; no files. */
ampc_run_config ampc_run_config_defaults(void);

typedef struct ampc_run ampc_run;

/* What the callbacks see after each iteration. */
typedef struct ampc_run_progress {
  const ampc_step_info *info;
  const ampc_losses *losses; /* averaged over the micro-batches */
  double ms;                 /* this iteration's wall time */
  double elapsed_s;          /* since ampc_run_train started */
  int64_t end;               /* the last iteration this call will run */
  int64_t start;             /* the iteration it started from (resume) */
  int64_t skipped;           /* skipped steps so far */
  double eval_s;             /* wall time spent evaluating so far (in elapsed_s) */
  int64_t evals_done;        /* evaluations so far */
  int64_t evals_left;        /* evaluations still to come (the last step's included) */
} ampc_run_progress;

/* Optional observers (the CLI prints through them; the library never does).
 * Any may be NULL. */
typedef struct ampc_run_callbacks {
  void *user;
  void (*step)(void *user, const ampc_run *R, const ampc_run_progress *p);
  void (*eval)(void *user, const ampc_run *R, int64_t iteration, const ampc_eval *e);
  /* the run can no longer learn (see ampc_run_config.on_stall): `reason`
   * says why; ampc_run_diag(R) holds the diagnosis so far */
  void (*stall)(void *user, const ampc_run *R, int64_t iteration, const char *reason);
  /* an evaluation after step `iteration` is `fraction` (0..1] done */
  void (*eval_progress)(void *user, const ampc_run *R, int64_t iteration, double fraction);
} ampc_run_callbacks;

/* True when the last ampc_run_train stopped because the run stalled
 * (on_stall AMPC_STALL_STOP; it returned AMPC_ERR_NUMERIC). */
bool ampc_run_stalled(const ampc_run *R);
/* True when the last ampc_run_train stopped at ampc_run_config.interrupt. */
bool ampc_run_interrupted(const ampc_run *R);

/* Whether `path` (NULL: none) can be written, checked before a run rather
 * than after its last step: its directory exists, and it is not a directory
 * (regular: nor any other non-regular file; a log may be a device or FIFO
 * such as /dev/stdout). `what` names it in the message ("--save",
 * "save_path"). Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_check_out_path(const char *what, const char *path, bool regular);

/* Check rc, build the trainer (ampc_trainer_init with rc->seed) and the model
 * for micro-batches of batch / micro_batches samples, and resume from
 * rc->resume_path. Errors: AMPC_ERR_INVALID_ARG (a bad setting, a batch
 * larger than the training split, a model that does not fit the data; the
 * message names them), AMPC_ERR_NOMEM, the errors of ampc_trainer_load. */
ampc_status ampc_run_create(ampc_run **out, const ampc_run_config *rc, const ampc_amp_config *amp,
                            const ampc_optim_config *opt, const ampc_model_desc *md,
                            const ampc_run_data *data);
void ampc_run_free(ampc_run *R);

/* The {"event":"config",...} object as JSON text (malloc'd; caller frees;
 * NULL on allocation failure): the trainer's resolved configuration, the
 * configuration lint's "warnings", and "run" (model, data, batch, seed,
 * threads, resumed_from, ...). */
char *ampc_run_config_json(const ampc_run *R);
/* The run's warnings: the configuration lint's (ampc_config_lint), then
 * the run's own: --attention-cast on without effect (32-true), a resume
 * that switches the attention cast. Fills msgs[0..max), returns the count. */
int ampc_run_warnings(const ampc_run *R, char (*msgs)[256], int max);

/* Train from the current iteration to min(steps, stop_at), once per run (a
 * second call fails: a new run resumed from the checkpoint continues): per iteration
 * the sampled micro-batches, ampc_train_step, telemetry on sampled
 * iterations, the step line, evaluation and checkpoints at their cadence;
 * at the end the checkpoint and the summary line. The log (when set) gets
 * the config line first (appended to when resuming). Errors: those of the
 * step (message names the iteration), AMPC_ERR_IO (log or checkpoint). */
ampc_status ampc_run_train(ampc_run *R, const ampc_run_callbacks *cb);

/* The {"event":"summary",...} object of the last ampc_run_train (malloc'd
 * JSON text; NULL before or on allocation failure). */
char *ampc_run_summary_json(const ampc_run *R);

/* The parts of a run, for printing and for tests. */
/* The samples iteration `iteration` (0-based) trains on, across every rank
 * and micro-batch: out [batch] gets their dataset indices (the MLP: rows of
 * the training features), in the order the ranks' shards and micro-batches
 * take them. The sampler draws a permutation of the training concepts per
 * epoch (seeded by rc->seed and the epoch) and one of each concept's
 * training-style images, so no batch holds two images of one concept.
 * Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_run_batch_samples(ampc_run *R, int64_t iteration, int64_t *out);
ampc_trainer *ampc_run_trainer(ampc_run *R);
ampc_model *ampc_run_model(ampc_run *R);
const ampc_diag *ampc_run_diag(const ampc_run *R);
const ampc_model_desc *ampc_run_model_desc(const ampc_run *R);
const ampc_run_config *ampc_run_get_config(const ampc_run *R);

/* Evaluate m on d (the kind's evaluation: retrieval on the new-style and
 * zero-shot splits for the multimodal models; class accuracy on the test
 * split, or new-style split, for the ViTs; the test rows for the MLP). */
ampc_status ampc_model_evaluate(ampc_model *m, const ampc_run_data *d, ampc_eval *out);

/* One split's retrieval metrics as a JSON object text (samples, concepts,
 * i2t/t2i R@1 and R@5, chance_r1 (0 for no concepts), itm_acc, group_acc,
 * loss, itc, itm, cls): what the log, `ampc eval --json` and the summary
 * print. malloc'd; NULL on allocation failure. */
char *ampc_mmodel_metrics_json(const ampc_mmodel_metrics *m);

/* Evaluate the multimodal model M on the samples of `split` of d
 * (src/train/eval.c). Retrieval ranks every image against one caption per
 * concept (cosine similarity of the contrastive embeddings; chance R@1 is
 * 1/concepts); losses and accuracies come from forward passes on batches of
 * one sample per concept. Errors: AMPC_ERR_INVALID_ARG (empty split, shapes
 * that do not match the model), AMPC_ERR_NOMEM. */
ampc_status ampc_mmodel_evaluate(ampc_mmodel *M, const ampc_dataset *d, int split,
                                 ampc_mmodel_metrics *out);

/* Zero-shot classification (CLIP, Radford et al. 2021, section 3.1.2): each
 * image of `split` of d is given the class whose prompt ("a photo of a
 * {label}", tokenized at pack time) embeds closest (largest dot product of
 * the normalised contrastive embeddings); *acc = the share whose class is
 * d->label. prompts [d->n_classes, d->seq_len] int32. Errors:
 * AMPC_ERR_INVALID_ARG (empty split, shapes), AMPC_ERR_NOMEM. */
/* Set a multimodal config's image side and patch (the vision tower's
 * patch embedding then has (img / patch)^2 patches, ViT: Dosovitskiy et al.
 * 2021). Errors: AMPC_ERR_INVALID_ARG (patch does not divide img, more
 * than 4096 patches). */
ampc_status ampc_mmodel_set_image(ampc_mmodel_config *mc, int64_t img, int64_t patch);
/* A multimodal model for square images of `side` (a packed dataset's
 * --image-size): the patch scaled as the image where that divides it (64x64
 * data: mm-tiny's patch 4 at 32x32 becomes 8, the same 64 patches), else the
 * preset's patch. Image-only presets are left as they are (their data is
 * fixed). Errors: as ampc_mmodel_set_image. */
ampc_status ampc_mmodel_follow_image(ampc_mmodel_config *mc, int64_t side);

ampc_status ampc_mmodel_zero_shot(ampc_mmodel *M, const ampc_dataset *d, int split,
                                  const int32_t *prompts, double *acc);

/* Load only the weights of a checkpoint (FP32 master or working weights
 * widened, rounded once into P's working dtype; no optimizer state) into P.
 * Errors: AMPC_ERR_IO, AMPC_ERR_FORMAT (message names the file and tensor);
 * P is unchanged on error. */
ampc_status ampc_params_load(ampc_params *P, const char *path);

/* ---- comparing runs: the same training in several precisions --------------------- */

/* One run of a comparison: everything ampc_run_create takes, and a name.
 * A comparison of presets is a base (the run config, optimizer, model and
 * data shared by every run) and, per run, its ampc_amp_config (the preset
 * with the run's overrides: ampc_amp_config_preset, ampc_amp_config_set) and
 * its own log and checkpoint paths (two runs must not share one); the
 * caller may override anything else per run (`ampc compare --run`). */
typedef struct ampc_compare_spec {
  const char *label; /* the run's name ("16-mixed"), in results and messages */
  ampc_run_config rc;
  ampc_amp_config amp;
  ampc_optim_config opt;
  ampc_model_desc md;
  const ampc_run_data *data; /* may be shared by several runs */
  int threads;               /* > 0: the run's thread count (ampc_set_num_threads); 0: the
                                default (left alone unless an earlier run set one) */
} ampc_compare_spec;

typedef struct ampc_compare_options {
  /* true: the first run that fails ends the comparison (the later ones are
   * not started: ran false); false: every run is tried */
  bool stop_on_error;
  /* true: each finished run's metrics log (rc.log_path; one process, or
   * rank 0 of the group) is read back into result.diag, and every run is
   * compared with the first finished 32-true run (ampc_diag_compare with
   * margin vs_fp32_margin, 0: 0.01) */
  bool vs_fp32;
  double vs_fp32_margin;
} ampc_compare_options;

/* What one run of a comparison gave. Numbers the run does not have are
 * NaN (no evaluation, --no-eval; the retrieval numbers of an image-only
 * model; a run that failed). */
typedef struct ampc_compare_result {
  bool ran;           /* started (false: skipped after an earlier failure) */
  ampc_status status; /* AMPC_OK: trained to its end (a stall under
                         AMPC_STALL_WARN included); else the error of
                         ampc_run_create or ampc_run_train */
  bool refused;       /* ampc_run_create said AMPC_ERR_INVALID_ARG: a
                         setting that does not fit (model, data, batch) */
  bool stalled;       /* stopped by AMPC_STALL_STOP (status AMPC_ERR_NUMERIC) */
  char error[512];    /* the failure's message (ampc_last_error), or "" */
  char *summary_json; /* the run's {"event":"summary",...} (malloc'd); NULL on failure,
                       * except for a stalled run (its summary up to the stall) */
  int64_t steps, skipped_steps;
  double final_loss;          /* the last step's training loss (FP32, unscaled) */
  double wall_s, ms_per_step; /* the run's wall time; mean ms per step (or wall / steps) */
  double activation_mib;      /* the model's activations + workspace, MiB (2^20 bytes) */
  double param_state_mib;     /* weights, FP32 master, gradients, optimizer moments (and Kahan
                                 compensation), MiB, as allocated */
  double peak_rss_bytes;      /* the process's peak resident set at the run's end (Linux:
                                 the high-water mark is reset before each run) */
  double test_accuracy;       /* class accuracy (ViTs, MLP) */
  double new_i2t_r1, new_t2i_r1, zs_i2t_r1, zs_t2i_r1; /* retrieval R@1, new style and
                                                          zero-shot splits */
  double group_acc;                                    /* the new-style split's group accuracy */
  double new_chance_r1, zs_chance_r1;                  /* 1 / concepts of each split */
  double val_i2t_r1, val_t2i_r1, val_chance_r1;        /* a packed dataset's val split (else NaN) */
  double prompt_acc;     /* its zero-shot accuracy by prompt (else NaN) */
  bool interrupted;      /* stopped at rc.interrupt: the runs after it did not run */
  bool timing_disturbed; /* the machine was oversubscribed during the steps (its threads
                            plus other processes' CPU use above the online CPUs): its
                            step times are not comparable */
  double other_cores;    /* other processes' mean CPU use during the steps, cores (NaN:
                            unknown, no /proc/stat) */
  int n_verdicts;        /* the run's own diagnosis (>= 1 when it finished) */
  ampc_verdict verdicts[AMPC_VERDICT_COUNT];
  ampc_diag *diag; /* options.vs_fp32: the diagnosis read back from its log (owned), else
                      NULL (error says why when the log did not read) */
  /* options.vs_fp32, against the baseline run (baseline >= 0, not this one) */
  int baseline;       /* index of the first finished 32-true run, -1 when none */
  bool have_gap;      /* gap holds the comparison */
  ampc_diag_gap gap;  /* the loss gap over the last tenth of the steps */
  int n_gap_verdicts; /* 0 or 1 */
  ampc_verdict gap_verdict;
  /* verdicts[i] is a count-based signature (underflow, swallowed updates,
   * accumulation, overflow, FP8 saturation or underflow) present in the
   * run's counts while its loss is finite and shows no significant gap
   * against the baseline: report it as present, not as the outcome */
  bool no_loss_gap[AMPC_VERDICT_COUNT];
  char gap_error[200]; /* why the two could not be compared (not twins), or "" */
} ampc_compare_result;

/* Observers of a comparison (the library never prints). Any may be NULL;
 * run's callbacks see every run's steps, evaluations and stalls. */
typedef struct ampc_compare_callbacks {
  void *user;
  /* run k is built and about to train */
  void (*run_start)(void *user, int k, ampc_run *R);
  ampc_run_callbacks run;
  /* run k ended; res is filled, with options.vs_fp32 its diag too and its
   * gap when the baseline finished before it (a baseline listed later
   * fills the gap after the last run); R is NULL when ampc_run_create
   * failed, and freed after this returns */
  void (*run_end)(void *user, int k, ampc_run *R, const ampc_compare_result *res);
} ampc_compare_callbacks;

/* Train runs[0..n) one after another in this process (1 <= n <= 64), each
 * as ampc_run_create + ampc_run_train would, so each run's bits, log and
 * checkpoint are those of the same run alone, and fill results[0..n)
 * (free them with ampc_compare_results_free, also after an error). Method:
 * the experiment of Micikevicius et al. 2018 (Mixed Precision Training): the
 * same model, data, seed and steps in several precisions, side by side;
 * with options->vs_fp32 each run's loss is compared with the FP32 twin's.
 * Returns AMPC_OK when every run finished; else the status of the first
 * run that failed (ampc_last_error: "run LABEL: why"); results say which.
 * Errors: AMPC_ERR_INVALID_ARG (bad n, NULL runs or results), and those of
 * the runs. */
ampc_status ampc_compare_run(const ampc_compare_spec *runs, int n,
                             const ampc_compare_options *options, const ampc_compare_callbacks *cb,
                             ampc_compare_result *results);
/* Free what results[0..n) own (summary_json, diag). */
void ampc_compare_results_free(ampc_compare_result *results, int n);

#ifdef __cplusplus
}
#endif
#endif
