/*
 * ampc/amp.h: precision presets and the autocast policy table.
 *
 * Presets (names as in PyTorch Lightning's `precision=`; DESIGN.md section 2):
 *   32-true     everything FP32
 *   16-mixed    binary16 working weights and activations for GEMM-type ops,
 *               FP32 master weights, dynamic loss scaling, FP32 accumulation
 *   bf16-mixed  as 16-mixed with bfloat16, no loss scaling
 *   16-true     binary16 everywhere (no master, FP16 optimizer state, FP16 acc)
 *   bf16-true   bfloat16 everywhere (no master, BF16 optimizer state)
 *
 * The policy says, for each op and preset, which dtype the op reads, computes
 * in and writes. It is one table (src/amp/policy.c) that the model consults;
 * no layer decides this on its own. It follows PyTorch's autocast (CUDA op
 * lists, torch.amp, 1.13+): GEMM-type ops (linear, patch embedding, attention
 * products) run on 16-bit inputs and write 16-bit; ops on autocast's FP32 list
 * (softmax, layer norm, losses, exp/log/pow, norms and reductions) compute in
 * FP32 and, in the mixed presets, write FP32; elementwise ops not on either
 * list follow their inputs (GELU on a 16-bit linear output writes 16-bit; a
 * residual add of an FP32 stream and a 16-bit branch promotes to FP32). In
 * the -true presets every op writes the preset's dtype (model.half() style).
 * Whatever the storage, every kernel computes in FP32 registers and rounds
 * once when it stores.
 */
#ifndef AMPC_AMP_H
#define AMPC_AMP_H

#include <stdbool.h>

#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/gemm.h"
#include "ampc/nn.h"     /* ampc_scratch */
#include "ampc/params.h" /* ampc_branch */
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values go into logs and checkpoints: append only. */
typedef enum ampc_precision {
  AMPC_PRECISION_32_TRUE = 0,
  AMPC_PRECISION_16_MIXED = 1,
  AMPC_PRECISION_BF16_MIXED = 2,
  AMPC_PRECISION_16_TRUE = 3,
  AMPC_PRECISION_BF16_TRUE = 4,
  AMPC_PRECISION_FP8_MIXED = 5, /* bf16-mixed with the linear layers' GEMM inputs in FP8
                                   (E4M3 forward, E5M2 gradients; Transformer Engine's
                                   HYBRID delayed-scaling recipe) */
  AMPC_PRECISION_COUNT
} ampc_precision;

/* "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "fp8-mixed";
 * "?" if invalid. */
const char *ampc_precision_name(ampc_precision p);
/* Parse a preset name as above, or an alias other trainers use: "32" and
 * "fp32" (32-true), "16" and "fp16" (16-mixed), "bf16" (bf16-mixed), "fp8"
 * (fp8-mixed), as Lightning's precision= and Accelerate's mixed_precision=.
 * AMPC_ERR_INVALID_ARG otherwise; the message suggests a preset within two
 * edits ("did you mean 16-mixed?"). */
ampc_status ampc_precision_parse(const char *name, ampc_precision *out);
/* The 16-bit (or 32-bit) dtype of the preset's working weights and GEMM inputs. */
ampc_dtype ampc_precision_lowp(ampc_precision p);
/* True for the mixed presets (FP32 master weights by default): 16-mixed,
 * bf16-mixed, fp8-mixed. */
bool ampc_precision_is_mixed(ampc_precision p);
/* True for fp8-mixed: the transformer blocks' linear layers run FP8 GEMMs. */
bool ampc_precision_is_fp8(ampc_precision p);

/* The ops of DESIGN.md section 1 whose dtypes the policy decides. */
typedef enum ampc_op_id {
  AMPC_OPID_LINEAR = 0,
  AMPC_OPID_PATCH_EMBED,
  AMPC_OPID_ATTN_SCORES, /* Q K^T */
  AMPC_OPID_ATTN_VALUES, /* P V */
  AMPC_OPID_EMBEDDING,   /* token + position lookup */
  AMPC_OPID_LAYER_NORM,
  AMPC_OPID_SOFTMAX,
  AMPC_OPID_GELU,
  AMPC_OPID_RESIDUAL_ADD,
  AMPC_OPID_MEAN_POOL,
  AMPC_OPID_L2_NORM,
  AMPC_OPID_CROSS_ENTROPY,
  AMPC_OPID_INFONCE,
  AMPC_OPID_BCE_LOGITS,
  AMPC_OPID_COUNT
} ampc_op_id;

/* How autocast treats an op. */
typedef enum ampc_op_class {
  AMPC_OPCLASS_LOWP = 1,    /* autocast's lower-precision list: GEMM-type */
  AMPC_OPCLASS_FP32 = 2,    /* autocast's FP32 list: numerically sensitive */
  AMPC_OPCLASS_FOLLOW = 3,  /* elementwise, output follows the input dtype */
  AMPC_OPCLASS_PROMOTE = 4, /* elementwise on several inputs: widest dtype */
} ampc_op_class;

typedef struct ampc_op_policy {
  ampc_op_class cls;
  ampc_dtype input;   /* dtype the op's inputs are read in (cast on entry) */
  ampc_dtype compute; /* always F32 on this engine: registers are FP32 */
  ampc_dtype output;  /* dtype the op stores its result in */
} ampc_op_policy;

/* The policy of op under preset p. Errors: AMPC_ERR_INVALID_ARG for an
 * invalid preset or op (out untouched). */
ampc_status ampc_policy_get(ampc_precision p, ampc_op_id op, ampc_op_policy *out);
/* "linear", "layer_norm", ... (PyTorch function names); "?" if invalid. */
const char *ampc_op_name(ampc_op_id op);

/* ---- the resolved precision configuration: a preset plus overrides ------- */

/* Loss-scaling mode (values go into logs and checkpoints: append only). */
typedef enum ampc_loss_scale_mode {
  AMPC_LOSS_SCALE_NONE = 0,       /* S = 1, no check-and-skip (a plain PyTorch loop) */
  AMPC_LOSS_SCALE_STATIC = 1,     /* fixed S; a non-finite step is skipped (apex/DeepSpeed) */
  AMPC_LOSS_SCALE_DYNAMIC = 2,    /* GradScaler semantics (below) */
  AMPC_LOSS_SCALE_PER_BRANCH = 3, /* one dynamic scale per model branch (vision, text,
                                     fusion, heads), each picked from the branch's gradient
                                     histogram; the skip stays global (below) */
  AMPC_LOSS_SCALE_PER_LOSS = 4,   /* one dynamic scale per loss term (apex's num_losses):
                                     a backward pass per term, each unscaled into an FP32
                                     gradient sum; the skip stays global (below) */
} ampc_loss_scale_mode;

/* Loss-scaler settings. Defaults (ampc_amp_config_preset) are
 * torch.cuda.amp.GradScaler's: init 2^16, growth 2, backoff 0.5, growth
 * interval 2000; plus DeepSpeed's hysteresis (1 = off) and a floor of 1
 * (DeepSpeed's min_loss_scale; GradScaler has none) and no ceiling. */
typedef struct ampc_scaler_config {
  ampc_loss_scale_mode mode;
  float init_scale;     /* dynamic: first S; static: S. Finite, > 0 */
  float growth_factor;  /* > 1 */
  float backoff_factor; /* in (0, 1) */
  int growth_interval;  /* >= 1 clean steps before S grows */
  int hysteresis;       /* >= 1; h consecutive overflows before S backs off */
  float min_scale;      /* floor, > 0 and with 1/min_scale finite in FP32 */
  float max_scale;      /* ceiling, >= min_scale (FLT_MAX = none) */
} ampc_scaler_config;

/* How the optimizer rounds updated 16-bit weights that have no FP32 master
 * (values go into logs: append only). */
typedef enum ampc_weight_update {
  AMPC_UPDATE_NEAREST = 0,    /* round to nearest even: an update below half a
                                 step of the weight is swallowed */
  AMPC_UPDATE_STOCHASTIC = 1, /* bfloat16 stochastic rounding: up with the
                                 probability of the distance (ampc/optim.h) */
  AMPC_UPDATE_KAHAN = 2       /* Kahan-compensated updates: what a rounding drops
                                 is kept in a 16-bit compensation buffer and
                                 added to the next update (ampc/optim.h) */
} ampc_weight_update;

/* "nearest", "stochastic", "kahan"; "?" if invalid. */
const char *ampc_weight_update_name(ampc_weight_update u);

/* How FP8 delayed scaling picks the amax of the history (below). */
typedef enum ampc_amax_algo {
  AMPC_AMAX_MAX = 0,        /* TE's "max" (the recipe's default) */
  AMPC_AMAX_MOST_RECENT = 1 /* TE's "most_recent" */
} ampc_amax_algo;

/* Everything the precision presets decide, after overrides. */
typedef struct ampc_amp_config {
  ampc_precision precision;
  ampc_dtype lowp;        /* working weights, activations of GEMM-type ops, gradients */
  bool master_weights;    /* FP32 master copy (meaningless, and false, when lowp is F32) */
  ampc_dtype state_dtype; /* optimizer moments: F32, or lowp in the -true presets */
  ampc_acc accumulate;    /* GEMM accumulation */
  ampc_scaler_config scaler;
  ampc_weight_update weight_update; /* nearest (every preset); stochastic: BF16, no master;
                                       kahan: 16-bit weights, no master */
  /* fp8-mixed's delayed-scaling recipe (TE's recipe.DelayedScaling defaults:
   * amax_history_len 1024, amax_compute_algo "max", margin 0) */
  int fp8_amax_history; /* 1 .. 2^20 */
  ampc_amax_algo fp8_amax_algo;
  float fp8_margin; /* >= 0: scale = fp8_max * 2^-margin / amax */
} ampc_amp_config;

/* The preset's configuration (DESIGN.md section 2 table). Errors:
 * AMPC_ERR_INVALID_ARG for an invalid preset. */
ampc_status ampc_amp_config_preset(ampc_precision p, ampc_amp_config *out);

/* Apply one override by its command-line name (without the dashes):
 *   master-weights  on | off
 *   loss-scale      none | dynamic | per-branch | per-loss | <S>  (a positive
 *                   finite number: static S)
 *   accumulate      fp32 | fp16
 *   fp8-amax-history N (1..2^20), fp8-amax-compute max | most_recent,
 *   fp8-margin M (>= 0)  (fp8-mixed's recipe)
 *   weight-update   nearest | stochastic | kahan  (stochastic: BF16 weights
 *                   without an FP32 master only, e.g. bf16-true; kahan: 16-bit
 *                   weights without a master, bf16-true or 16-true)
 *   init-scale, growth-factor, backoff-factor, growth-interval, hysteresis,
 *   min-scale, max-scale  (numbers; see ampc_scaler_config for the ranges)
 * Errors: AMPC_ERR_INVALID_ARG naming the option and the value (the config is
 * unchanged). Call ampc_amp_config_check after the last override. */
ampc_status ampc_amp_config_set(ampc_amp_config *c, const char *name, const char *value);

/* Check the combination (e.g. min-scale <= init-scale <= max-scale).
 * Errors: AMPC_ERR_INVALID_ARG with a message naming the values. */
ampc_status ampc_amp_config_check(const ampc_amp_config *c);

/* "none", "static", "dynamic", "per-branch", "per-loss". */
const char *ampc_loss_scale_mode_name(ampc_loss_scale_mode m);

/* ---- the loss scaler (src/amp/loss_scaler.c) ------------------------------ */

/* State. Everything here goes into checkpoints. */
typedef struct ampc_scaler {
  ampc_scaler_config cfg;
  float scale;            /* S for the next backward pass (FP32); per-branch: the heads'
                             scale, which seeds the losses */
  int growth_tracker;     /* clean steps since the last growth or overflow */
  int hysteresis_left;    /* overflows still tolerated before a backoff */
  int64_t overflow_count; /* steps whose gradients were non-finite */
  int64_t skip_count;     /* optimizer steps skipped */
  /* per-branch mode: each branch's own dynamic state (indexed by ampc_branch);
   * per-loss mode: each loss term's (indexed by the model's terms: itc, itm,
   * cls for the multimodal models, one term for the others) */
  float branch_scale[AMPC_BRANCH_COUNT];
  int branch_tracker[AMPC_BRANCH_COUNT];
  int branch_hysteresis[AMPC_BRANCH_COUNT];
  int64_t branch_picks; /* scales moved by ampc_scaler_update_branches' histogram pick */
} ampc_scaler;

/* The top of the FP32 exponent range the per-branch pick aims a branch's
 * largest scaled gradient at: max |g| S_b in [2^12, 2^13), 8 to 16 times
 * below binary16's largest value (65504), room for the amax of the steps
 * between two samples (on mm-tiny it varies by 2-4x from step to step). */
enum { AMPC_BRANCH_PICK_TOP_LOG2 = 12 };

/* Initialise from cfg (S = init_scale, or 1 for mode none). */
void ampc_scaler_init(ampc_scaler *s, const ampc_scaler_config *cfg);

/* 1/S formed in double and rounded once to FP32. */
float ampc_scaler_inv_scale(const ampc_scaler *s);

/* After the non-finite check of a step: returns true when the optimizer step
 * must be skipped (found_nonfinite with a static or dynamic scaler), and
 * updates the scale. Dynamic (torch GradScaler's _amp_update_scale plus
 * DeepSpeed's hysteresis): on overflow, tracker = 0 and, unless hysteresis
 * still has credit (then credit -= 1), S = max(S * backoff, min_scale); on a
 * clean step, hysteresis credit is restored, tracker += 1 and when it reaches
 * growth_interval, S = min(S * growth, max_scale) if S * growth is finite,
 * and tracker = 0. Mode none never skips (a non-finite gradient reaches the
 * weights, as in a PyTorch loop without a GradScaler). */
bool ampc_scaler_update(ampc_scaler *s, bool found_nonfinite);

/* The scale of branch br's gradients: S_br in per-branch mode, else S. */
float ampc_scaler_branch_scale(const ampc_scaler *s, ampc_branch br);

/* Per-branch loss scaling (no framework has it built in: the idea
 * is apex's one-scale-per-loss `num_losses` carried to the branches of a
 * fused model, with the scale of each chosen as Transformer Engine's delayed
 * scaling chooses an FP8 tensor's, from the amax of earlier steps). The
 * backward pass stores branch b's gradients (activation and parameter
 * gradients) multiplied by S_b: the losses are seeded with S_heads, and where
 * a gradient crosses from branch a into branch b it is multiplied by S_b /
 * S_a in FP32 before it is rounded (a power of two: exact). The unscale
 * multiplies each parameter's gradient by its own branch's 1/S_b.
 *
 * After each step, nonfinite[b] says whether branch b's gradients held an
 * inf or NaN, and amax[b] (or amax NULL, or an entry < 0: unknown) is the
 * largest |value| the backward pass stored in branch b before rounding (the
 * top of its gradient histogram, from the rounding telemetry on sampled
 * steps). If any branch is non-finite the step is skipped (one global skip)
 * and each non-finite branch backs off as a dynamic scaler does (hysteresis
 * per branch; the finite ones keep their scale and reset their tracker). On
 * a clean step every branch counts toward growth as a dynamic scaler does,
 * and a branch whose amax is known, finite and > 0 is then moved to S_b 2^(12
 * - floor(log2 amax)) (clamped to [min_scale, max_scale]; tracker reset), so
 * its largest value lands in [2^12, 2^13), whichever way that moves S_b.
 * Returns true when the step must be skipped. s->scale follows S_heads.
 * Other modes: ampc_scaler_update(s, any nonfinite). */
bool ampc_scaler_update_branches(ampc_scaler *s, const bool nonfinite[AMPC_BRANCH_COUNT],
                                 const float *amax);

/* Per-loss loss scaling (apex amp's num_losses / loss_id: one dynamic scaler
 * per loss; Micikevicius et al. 2018 use one): loss term k's backward pass is
 * seeded with its own S_k, its gradients are unscaled by 1/S_k into an FP32
 * sum, and the step is skipped when any term's gradients held inf or NaN.
 * The scale of term k (< AMPC_BRANCH_COUNT; its state sits in the same arrays
 * as the branches' do in per-branch mode); updated by
 * ampc_scaler_update_branches with nonfinite[k] per term and amax NULL (no
 * pick: each term is a GradScaler). Other modes: S. */
float ampc_scaler_term_scale(const ampc_scaler *s, int k);

/* ---- the step's plan: the scaler hands out the seeds and finishes the gradients ---- *
 * The scaler is the only code that unscales. A step asks it for a plan
 * (ampc_scaler_plan: the backward seeds, one per loss or per branch), runs
 * its backward passes with those seeds, hands every gradient back
 * (ampc_scaler_take_term for the per-loss terms as they come, then
 * ampc_scaler_finish once): the scaler forms every 1/S, unscales, checks for
 * inf/NaN, forms the global norm and updates the scale, and says which
 * factors the optimizer's fused update multiplies each branch's gradients
 * by. The model and the run only hand gradients and counts to it. Where the
 * gradients live in a device's memory the scaler reaches them through the
 * ops the caller passes (ampc_unscale_ops: the backend's functions of these
 * signatures), so this layer needs no backend. */

/* Over n gradient values g (dtype gdt) unscaled by inv_scale: count the
 * non-finite ones and the L2 norm of the finite ones (ampc_grad_unscale_check
 * and its device twins). */
typedef ampc_status (*ampc_unscale_check_fn)(const void *g, ampc_dtype gdt, int64_t n,
                                             float inv_scale, int64_t *nonfinite, double *norm,
                                             ampc_scratch *ws);
/* stage [n] FP32 = (first ? 0 : stage) + fp32(g) * inv (one FP32 product and
 * one FP32 sum; inv == 1: the widened value exactly). */
typedef ampc_status (*ampc_stage_fn)(int64_t n, const void *g, ampc_dtype gdt, float inv,
                                     bool first, float *stage);
/* Where the scaler's unscale runs: the caller's backend (host or device). */
typedef struct ampc_unscale_ops {
  ampc_unscale_check_fn check;
  ampc_stage_fn stage; /* per-loss only */
  ampc_scratch *ws;    /* the check's per-chunk sums (ampc_grad_unscale_scratch_bytes) */
  /* optional: the check of a data-parallel group whose ranks each hold a
   * shard of the summed gradient (ZeRO-1): called with `group_user` instead
   * of `check` (one scale for all: the per-branch and per-loss modes are
   * refused); counts and norm are the whole gradient's */
  ampc_status (*check_group)(void *group_user, const void *g, ampc_dtype gdt, int64_t n,
                             float inv_scale, int64_t *nonfinite, double *norm);
  void *group_user;
} ampc_unscale_ops;

/* A step's gradients in the working dtype: n values at g (in the ops'
 * memory), and the tensors (count of them; their offset, numel and branch)
 * that per-branch scaling unscales one by one. */
typedef struct ampc_grads {
  const void *g;
  ampc_dtype dt;
  int64_t n;
  const ampc_param *p;
  int count;
} ampc_grads;

/* One step's plan. Filled by ampc_scaler_plan; the amax entries by the
 * caller (per-branch: the largest |gradient| each branch stored, from the
 * telemetry; -1: unknown) at any time before ampc_scaler_finish, which uses
 * them once and sets them back to -1. */
typedef struct ampc_scale_plan {
  bool begun;                        /* ampc_scaler_plan ran for this step */
  ampc_loss_scale_mode mode;         /* the scaler's */
  float loss_seed;                   /* the one seed of a single backward pass: (S / K) * m */
  float scale[AMPC_BRANCH_COUNT];    /* S_b per branch (per-branch), S_k per loss term
                                        (per-loss), else S everywhere */
  float seed[AMPC_BRANCH_COUNT];     /* (scale / K) * m: the per-branch or per-term seeds */
  bool term_on[AMPC_BRANCH_COUNT];   /* per-loss: the model's terms (its loss_scale: the
                                        smallest of theirs) */
  bool nonfinite[AMPC_BRANCH_COUNT]; /* per-loss: term k's gradients held inf/NaN (several
                                        ranks: the caller ORs them before the finish) */
  float amax[AMPC_BRANCH_COUNT];     /* per-branch pick's input (see above) */
  float *sum;                        /* per-loss: [n] FP32 sum of the terms' unscaled
                                        gradients (the caller's buffer) */
  bool summed;                       /* a term was added into sum */
} ampc_scale_plan;

/* An idle plan (nothing begun, amax unknown). */
void ampc_scale_plan_init(ampc_scale_plan *p);

/* Begin a step: the seeds of K micro-batches (x ranks) under loss
 * multiplier m (1: none), each (S / K) * m in FP32 as the backward pass
 * takes it. term_on (per-loss: the model's terms, may be NULL otherwise)
 * and sum (per-loss: the FP32 buffer the terms are unscaled into; else
 * NULL). Leaves p->amax as it is. */
void ampc_scaler_plan(const ampc_scaler *s, ampc_scale_plan *p, int64_t K, float m,
                      const bool *term_on, float *sum);

/* Per-loss: take term k's gradients g (scaled by S_k): check them for
 * inf/NaN (p->nonfinite[k]) and add them unscaled, fp32(g) * (1/S_k), into
 * p->sum (the first term of the step overwrites it). Errors: the ops',
 * AMPC_ERR_INVALID_ARG (not per-loss, no sum, k out of range). */
ampc_status ampc_scaler_take_term(ampc_scale_plan *p, int k, const ampc_grads *g,
                                  const ampc_unscale_ops *ops);

/* What the finish found, and what the optimizer is to do. */
typedef struct ampc_unscaled {
  int64_t nonfinite;       /* non-finite unscaled gradient values */
  double norm;             /* global L2 norm of the finite unscaled values */
  bool overflow;           /* nonfinite > 0 */
  bool skip;               /* overflow with loss scaling on: the optimizer step is skipped */
  unsigned nonfinite_mask; /* bit b: branch (per-loss: term) b held inf/NaN; other modes:
                              the heads' bit = overflow */
  bool picked;             /* a per-branch scale moved to its histogram's pick */
  float loss_scale;        /* S the step used (per-loss: the smallest of the terms') */
  float next_scale;        /* S of the next step (likewise) */
  float scale[AMPC_BRANCH_COUNT], next_branch_scale[AMPC_BRANCH_COUNT];
  int growth_tracker; /* after the update */
  /* the optimizer's input: the gradient it reads (the working-dtype one, or
   * per-loss the FP32 sum) and the factor each branch's values are
   * multiplied by in its fused update (1/S_b, 1/S, or 1 for the sum) */
  const void *grad;
  ampc_dtype grad_dt;
  float mult[AMPC_BRANCH_COUNT];
} ampc_unscaled;

/* Finish a step: unscale g (or, per-loss, p->sum) by the plan's 1/S (per
 * branch: each tensor by its branch's 1/S_b, the norm from the tensors'
 * sums of squares), count the non-finite values, form the global norm, and
 * update the scale (ampc_scaler_update_branches with the branches', terms'
 * or heads' flags and p->amax). A plan not begun is begun with K = 1, m = 1.
 * The plan is idle afterwards. Errors: the ops', AMPC_ERR_INVALID_ARG
 * (per-loss without its sum: per-loss scaling takes the FP32 sum of the
 * terms' unscaled gradients, and only it). */
ampc_status ampc_scaler_finish(ampc_scaler *s, ampc_scale_plan *p, const ampc_grads *g,
                               const ampc_unscale_ops *ops, ampc_unscaled *out);

/* ---- unscale, non-finite check, global norm (src/amp/unscale.c) ----------- */

/* Over n gradient values g (dtype gdt; F32, F16 or BF16), each unscaled as
 * u = fp32(g) * inv_scale (one FP32 rounding, the product the optimizer
 * will form again): counts the non-finite u and returns the global L2 norm
 * sqrt(sum u^2) of the finite ones, summed in double over fixed 4096-element
 * chunks in a fixed order (the same bits for any thread count). Method:
 * torch.nn.utils.clip_grad_norm_ after GradScaler.unscale_. Errors:
 * AMPC_ERR_INVALID_ARG for a bad dtype or NULL. ws: the per-chunk sums
 * (ampc_scratch, ampc/nn.h; may be NULL). */
ampc_status ampc_grad_unscale_check(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                    int64_t *nonfinite, double *norm, ampc_scratch *ws);
/* Scratch of ampc_grad_unscale_check over n values: one double and one
 * count per chunk (given NULL or less, it allocates them itself). */
size_t ampc_grad_unscale_scratch_bytes(int64_t n);
/* The parts of ampc_grad_unscale_check: over n values g (dtype gdt), for
 * each 4096-element chunk c (the last one shorter), part[c] = its sum of
 * squares of the finite u = fp32(g) * inv_scale and bad[c] = its count of
 * non-finite u; arrays of ceil(n / 4096) entries. ampc_grad_unscale_check's
 * norm is sqrt of the part[c] added in chunk order from 0.0, so a group
 * whose ranks hold 4096-aligned shards (ampc_shard_range) gets its bits by
 * adding every rank's parts in rank order. Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_grad_unscale_parts(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                    double *part, int64_t *bad);

/* The clipping coefficient for global norm `norm` and max_norm (0 = off):
 * 1 when norm <= max_norm, else max_norm / norm formed in double and rounded
 * to FP32 (no epsilon, so a norm of 4 clipped to 1 gives exactly 0.25). */
float ampc_clip_coef(double norm, float max_norm);

/* ---- FP8 delayed scaling (src/amp/fp8_scaling.c) -------------------------- *
 * One tensor's FP8 scaling state in NVIDIA Transformer Engine's delayed-
 * scaling recipe (transformer_engine.common.recipe.DelayedScaling; its
 * amax_and_scale_update): quantization uses the scale taken from earlier
 * steps' amax, not the current tensor's. history[0] collects the current
 * step's amax; at the step's end ampc_fp8_update takes the amax to use (the
 * history's maximum, or its most recent entry history[0]), sets
 * scale = fp8_max * 2^-margin / amax when that amax is finite and > 0 (else
 * keeps the scale; a quotient that overflows FP32, for an amax below about
 * 448 / FLT_MAX, is clamped to FLT_MAX, where TE's kernel stores inf),
 * scale_inv = 1 / scale, and rolls the history (entry i+1 moves to i, the
 * oldest, history[1], is dropped, history[0] goes to the end, and the new
 * history[0] is 0): the amax of a step counts in the scales of the next L
 * updates, its own included. */

typedef struct ampc_fp8_meta {
  int len;         /* history length, >= 1 (TE's amax_history_len, default 1024) */
  float *history;  /* [len]: history[0] is the current step's amax so far */
  float scale;     /* multiplies values before the cast to FP8 (starts at 1) */
  float scale_inv; /* 1 / scale: multiplies the FP8 values back (dequantize) */
} ampc_fp8_meta;

/* A zero history of len entries (allocated), scale = scale_inv = 1. Errors:
 * AMPC_ERR_INVALID_ARG (len < 1 or > 2^20, NULL), AMPC_ERR_NOMEM. */
ampc_status ampc_fp8_meta_init(ampc_fp8_meta *m, int len);
void ampc_fp8_meta_free(ampc_fp8_meta *m); /* NULL and a freed meta are fine */

/* history[0] = fmaxf(history[0], amax): the largest amax of the step's casts
 * (fmaxf: a NaN amax is ignored, as TE's amax reductions ignore NaN). */
void ampc_fp8_record_amax(ampc_fp8_meta *m, float amax);

/* The end-of-step update above for format fp8 (AMPC_F8_E4M3: max 448, or
 * AMPC_F8_E5M2: 57344) and margin (a power of two exponent, >= 0; scale is
 * computed in FP32 as TE does: (fp8_max * 2^-margin) / amax). Returns the
 * amax used. Errors: AMPC_ERR_INVALID_ARG (not an FP8 dtype, bad algo,
 * margin negative or not finite, NULL). */
ampc_status ampc_fp8_update(ampc_fp8_meta *m, ampc_dtype fp8, float margin, ampc_amax_algo algo,
                            float *amax_used);

/* Quantize n FP32 values: dst[i] = fp8(src[i] * scale) (the product in FP32,
 * then one saturating round to nearest even: values past the format's range
 * become +-max, as TE's casts clip; NaN stays NaN) and record their amax
 * (max |src[i]| over the non-NaN values, before scaling) into history[0].
 * Errors: AMPC_ERR_INVALID_ARG (not an FP8 dtype, NULL with n > 0). */
ampc_status ampc_fp8_quantize(void *dst, ampc_dtype fp8, const float *src, size_t n,
                              ampc_fp8_meta *m);

/* dst[i] = fp32(q[i]) * scale_inv (exact widening, one FP32 product). */
ampc_status ampc_fp8_dequantize(float *dst, const void *q, ampc_dtype fp8, size_t n,
                                const ampc_fp8_meta *m);

#ifdef __cplusplus
}
#endif
#endif
