/*
 * ampc/engine.h: the mixed-precision training engine (DESIGN.md sections 2, 4).
 *
 * A trainer owns the parameter table, the optimizer and the loss scaler. A
 * model's training step is:
 *
 *   ampc_trainer_zero_grad(T);
 *   for each micro-batch (gradient accumulation):
 *     forward (weights: ampc_param_w, dtype T->params.wdt), loss in FP32,
 *     backward seeded with S = ampc_trainer_loss_scale(T) (divide the loss by
 *     the number of micro-batches), gradients accumulated (+=) into
 *     ampc_param_grad in the working dtype;
 *   ampc_trainer_step(T, &info);
 *
 * and ampc_trainer_step does, in this order: the loss scaler's finish
 * (ampc_scaler_finish: every gradient converted to FP32 and multiplied by
 * 1/S, ALL of them checked for inf/NaN, the global norm, the scale update);
 * clip by global norm on the unscaled values (clipping never depends on S);
 * the optimizer step (its fused update applies the scaler's 1/S) on the
 * FP32 master weights (or on the 16-bit weights when master weights are off)
 * and the re-rounding of the working copy, or a skip when the scaler says so
 * (a skipped step advances neither the optimizer's step count, i.e. Adam's
 * bias correction, nor the LR schedule). One scale
 * serves the whole accumulation window, and an overflow in any micro-batch
 * makes the accumulated gradient non-finite, so the window is skipped.
 */
#ifndef AMPC_ENGINE_H
#define AMPC_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/amp.h"
#include "ampc/io.h"
#include "ampc/model.h" /* ampc_device */
#include "ampc/optim.h"
#include "ampc/params.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ampc_comm;

typedef struct ampc_trainer {
  ampc_amp_config amp;
  ampc_optim_config opt;
  ampc_params params;
  ampc_scaler scaler;
  ampc_rng rng;                /* seeded at init; models may draw from it */
  int64_t step;                /* optimizer steps applied */
  int64_t iteration;           /* steps attempted (applied + skipped) */
  bool telemetry;              /* fill `swallow` at each applied step (default on) */
  ampc_swallow_stats *swallow; /* [params.count]: the last applied step */
  ampc_scratch unscale_ws;     /* the unscale check's per-chunk sums (allocated at init) */
  /* the step's scaling plan (ampc/amp.h): begun by ampc_train_accumulate_dp
   * (the backward seeds), filled while the gradients are handed back (per
   * loss: each term's unscaled sum; per branch: plan.amax, the largest
   * |gradient| each branch stored, from the telemetry, -1 unknown) and
   * finished by ampc_trainer_step, which leaves it idle. A step that begins
   * none (a caller seeding with ampc_trainer_loss_scale) gets the plain one. */
  ampc_scale_plan plan;
  /* on a device (ampc_trainer_to_device): the table the model and the step
   * use, whose role buffers are that device's memory (its metadata, p, is
   * params'); `params` stays the host's copy, current after
   * ampc_trainer_sync_host. AMPC_DEVICE_CPU: dparams unused */
  ampc_device device;
  ampc_params dparams;
  ampc_status device_status; /* a failed zero_grad on the device, reported by the next step */
  /* ZeRO-1 (ampc_trainer_set_zero, ampc/train.h): the group the master
   * weights and optimizer state are partitioned over, its shards' bounds
   * [size + 1] and the norm's gathered chunk sums; NULL: not sharded */
  const struct ampc_comm *zero;
  int64_t *zero_bounds;
  double *zero_parts;
  uint64_t *zero_counts; /* each step's non-finite counts per chunk, swallowed-update counts */
} ampc_trainer;

/* What one call to ampc_trainer_step did. */
typedef struct ampc_step_info {
  int64_t iteration;  /* 1-based attempt number */
  int64_t step;       /* optimizer steps applied after this call */
  float loss_scale;   /* S the backward pass used */
  float next_scale;   /* S for the next step */
  float lr;           /* learning rate of the step (of the step that would have been, if skipped) */
  bool overflow;      /* some unscaled gradient was inf or NaN */
  bool skipped;       /* the optimizer step was skipped */
  int growth_tracker; /* after the scaler update */
  int64_t nonfinite;  /* number of non-finite unscaled gradient values */
  double grad_norm;   /* global L2 norm of the unscaled gradients (inf if any is not finite) */
  float clip_coef;    /* 1 when not clipped */
  int64_t nonfinite_weights; /* weights (or masters) inf or NaN after the step (counted
                                when telemetry is on; 0 when skipped) */
  /* each branch's scale (all equal to loss_scale unless --loss-scale per-branch) */
  float branch_scale[AMPC_BRANCH_COUNT];      /* the backward pass used (per-loss: each
                                                 loss term's, in the model's term order) */
  float next_branch_scale[AMPC_BRANCH_COUNT]; /* for the next step */
  unsigned branch_nonfinite; /* bit b: branch b's gradients held inf/NaN (per-branch) */
  bool branch_picked;        /* a per-branch scale moved to its histogram's pick */
} ampc_step_info;

/* Resolve everything and build the table: params in amp->lowp, FP32 master iff
 * amp->master_weights, moments in amp->state_dtype, initialised from `seed`.
 * Errors: AMPC_ERR_INVALID_ARG (bad config, named), AMPC_ERR_NOMEM. */
ampc_status ampc_trainer_init(ampc_trainer *T, const ampc_amp_config *amp,
                              const ampc_optim_config *opt, const ampc_param_spec *specs, int n,
                              uint64_t seed);
void ampc_trainer_free(ampc_trainer *T);

/* S to seed the backward pass with (1 when loss scaling is off; per-branch:
 * the heads' S, which seeds the losses). */
/* Move the step to a device: allocate every role buffer of the
 * parameter table there (the backend's memory: AMPC_DEVICE_CUDA needs a
 * context bound with ampc_device_open) and copy the host's values. From then
 * on zero_grad and step run there (the unscale check and the optimizer of
 * src/backend/cuda/cuda_nn.h: the CPU's bits per element; the global norm within 2^-50
 * relative); a model must be made over ampc_trainer_params(T) on the same
 * device. Per-loss scaling and FP32-staged micro-batches take their FP32
 * sum (ampc_accum.stage) in that device's memory too.
 * AMPC_DEVICE_CPU: a no-op. Errors: AMPC_ERR_INVALID_ARG (already on a
 * device, an unknown one), the device's (nothing is left allocated). */
ampc_status ampc_trainer_to_device(ampc_trainer *T, ampc_device dev);
/* The table the model and the step use: the device's, or params. */
ampc_params *ampc_trainer_params(ampc_trainer *T);
/* Copy the weights, master weights, moments and compensation (not the
 * gradients) from the device into params (before a checkpoint or a host
 * read), or from params to the device (after ampc_trainer_load). No-ops on
 * the CPU. Errors: the device's. */
ampc_status ampc_trainer_sync_host(ampc_trainer *T);
ampc_status ampc_trainer_sync_device(ampc_trainer *T);

float ampc_trainer_loss_scale(const ampc_trainer *T);
/* S_k of loss term k (per-loss; ampc_scaler_term_scale). */
float ampc_trainer_term_scale(const ampc_trainer *T, int k);
/* S_b of branch b's gradients (ampc_scaler_branch_scale). */
float ampc_trainer_branch_scale(const ampc_trainer *T, ampc_branch b);
void ampc_trainer_zero_grad(ampc_trainer *T);
/* Unscale, check, clip, update or skip, scaler update (see the top). */
ampc_status ampc_trainer_step(ampc_trainer *T, ampc_step_info *info);

/* The resolved configuration as one JSON object (malloc'd string, caller
 * frees; NULL on allocation failure): precision, dtypes, safeguards, scaler
 * and optimizer settings, parameter count and bytes per role. */
char *ampc_trainer_config_json(const ampc_trainer *T);

/* Configuration lint (DESIGN.md 2): warnings for constants that round to zero
 * or lose their meaning in the dtype they live in: Adam eps in the optimizer
 * state dtype, lr * weight_decay below half an ulp of 1.0 in the dtype the
 * update is applied to, lr rounding to 0 there, a static loss scale that is
 * not a power of two, loss scaling with a dtype that does not need it. Writes
 * at most max messages (each < 256 chars, naming the value) into msgs and
 * returns the number of warnings found. */
int ampc_config_lint(const ampc_amp_config *amp, const ampc_optim_config *opt, char (*msgs)[256],
                     int max);

/* ---- checkpoints (src/train/checkpoint.c): safetensors ---------------------- */

/* Save atomically (on a device, from the device's values: the host's copy
 * is brought up to date first): FP32 master weights (the working weights widened, exactly,
 * when there is no master) under the parameter names; optimizer moments under
 * optimizer.exp_avg.<name> / optimizer.exp_avg_sq.<name> (AdamW) or
 * optimizer.momentum_buffer.<name> (SGD), in the state dtype; metadata
 * "format" = "pt", "ampc.config" (the JSON above), "ampc.step",
 * "ampc.iteration", "ampc.scaler" (scale, growth tracker, hysteresis credit,
 * overflow and skip counts), "ampc.rng", plus the caller's extra entries.
 * Errors: as ampc_safetensors_write. */
ampc_status ampc_trainer_save(const ampc_trainer *T, const char *path, const ampc_st_meta *extra,
                              int nextra);
/* The same with extra tensors written after the trainer's (names must not
 * collide with them), e.g. the FP8 scaling state of ampc_fp8_state_tensors. */
ampc_status ampc_trainer_save_ex(const ampc_trainer *T, const char *path, const ampc_st_meta *extra,
                                 int nextra, const ampc_st_tensor *tensors, int ntensors);

/* Load a checkpoint into an initialised trainer for the same model: every
 * parameter must be present with the same shape (dtype F32, F16 or BF16;
 * converted exactly or rounded once), moments likewise when the optimizer has
 * them; step, iteration, scaler state and RNG are restored, the working
 * weights are re-rounded from the loaded master (and copied to the device
 * when the trainer is on one). Saving then loading restores
 * every bit. Loading never runs a step. On any error T is unchanged.
 * Errors: AMPC_ERR_IO, AMPC_ERR_FORMAT (message names the file and tensor). */
ampc_status ampc_trainer_load(ampc_trainer *T, const char *path);

#ifdef __cplusplus
}
#endif
#endif
