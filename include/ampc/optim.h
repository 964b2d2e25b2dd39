/*
 * ampc/optim.h: AdamW and SGD with momentum on the parameter table, the
 * learning-rate schedule, and swallowed-update telemetry.
 *
 * The update is applied to the FP32 master weights when the table has them
 * (then the working weights are re-rounded from the master, once), else to
 * the working weights directly. Every elementary op of PyTorch's reference
 * (single-tensor, non-foreach) implementation is followed in the same order,
 * computed in FP32 and rounded to the dtype of the tensor it writes: the
 * parameter (FP32 master, or the 16-bit weight when there is no master) and
 * the optimizer state (F32, or 16-bit in the -true presets). So with 16-bit
 * state the update breaks exactly where a pure-FP16 PyTorch run breaks (e.g.
 * Adam's eps = 1e-8 rounds to 0 in binary16 and the denominator of a tiny
 * gradient becomes 0).
 */
#ifndef AMPC_OPTIM_H
#define AMPC_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/params.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ampc_optim_kind { AMPC_OPTIM_ADAMW = 0, AMPC_OPTIM_SGD = 1 } ampc_optim_kind;

typedef struct ampc_optim_config {
  ampc_optim_kind kind;
  float lr;                  /* peak learning rate (> 0) */
  float weight_decay;        /* AdamW: decoupled (Loshchilov and Hutter 2019); SGD: L2 added to g */
  float beta1, beta2, eps;   /* AdamW (Kingma and Ba 2015): 0.9, 0.999, 1e-8 */
  float momentum, dampening; /* SGD: torch.optim.SGD semantics */
  bool nesterov;             /* SGD */
  int64_t warmup_steps;      /* linear warmup from lr/warmup to lr */
  int64_t total_steps;       /* cosine decay to min_lr at this step; 0 = constant */
  float min_lr;              /* floor of the cosine */
  float clip_norm;           /* global-norm clipping of unscaled grads; 0 = off */
  /* parameter groups by branch (vision, text, fusion, heads; ampc_branch
   * order), as torch.optim's param_groups each with its own lr: a branch's
   * peak learning rate (0: lr). The schedule scales every group alike, as
   * torch's LambdaLR does: at step t a branch with branch_lr B takes
   * ampc_lr_at(c, t) * B / lr, the warmup and the cosine floor min_lr
   * scaled by B / lr too (CosineAnnealingLR would give every group the same
   * floor); the weight decay follows, as torch's AdamW multiplies it by the
   * group's lr. */
  float branch_lr[AMPC_BRANCH_COUNT];
  /* BF16 weights without a master: stochastic rounding of each updated
   * weight (set by the trainer from ampc_amp_config.weight_update), with the
   * random bits of ampc_sr_bits(round_seed, step, element index) */
  bool stochastic_round;
  uint64_t round_seed;
  /* 16-bit weights without a master: Kahan-compensated updates (set by the
   * trainer from ampc_amp_config.weight_update; the table must have comp).
   * Per element, with c the compensation (wdt) and d the step's whole change
   * (decay and update) in FP32:  y = d + c;  w' = round(w + y);
   * c' = round(y - (w' - w))  (w' - w is exact: two nearby 16-bit values), so
   * what the rounding of w' dropped is carried into the next step instead of
   * lost (Kahan 1965; for BF16 training, Zamirai et al. 2020, "Revisiting
   * BFloat16 Training"). Non-finite w' resets c to 0. */
  bool kahan;
} ampc_optim_config;

/* 16 random bits for element `index` (its position in the whole parameter
 * table) at optimizer step `step`: a counter-based hash (the SplitMix64
 * finaliser of seed, step and index mixed), so the bits do not depend on
 * threads, chunking or the number of ranks. */
uint32_t ampc_sr_bits(uint64_t seed, int64_t step, int64_t index);

/* x rounded to bfloat16 stochastically with the 16 random bits r: up (away
 * from zero) with probability (the 16 bits x loses) / 2^16, so the expected
 * result is x (Gupta et al. 2015, "Deep Learning with Limited Numerical
 * Precision"; the bf16 weight-update rounding of e.g. Zamirai et al. 2020).
 * bfloat16 values come back unchanged; NaN stays NaN (quieted), inf stays
 * inf; a value above the largest bfloat16 may round to inf. Returns the
 * bfloat16 bits. */
uint16_t ampc_bf16_round_stochastic(float x, uint32_t r);

/* torch.optim.AdamW's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 1e-2), no schedule, no clipping. */
ampc_optim_config ampc_optim_adamw_defaults(void);
/* torch.optim.SGD with lr 1e-2, momentum 0.9, no decay, no schedule. */
ampc_optim_config ampc_optim_sgd_defaults(void);

/* Check ranges (lr > 0 and finite, betas in [0, 1), eps >= 0, ...).
 * Errors: AMPC_ERR_INVALID_ARG naming the value. */
ampc_status ampc_optim_config_check(const ampc_optim_config *c);

/* Learning rate of applied step t (1-based): lr * t / warmup during warmup,
 * then min_lr + (lr - min_lr) (1 + cos(pi * p)) / 2 with p = (t - warmup - 1)
 * / (total - warmup) clamped to [0, 1] (Loshchilov and Hutter, SGDR 2017;
 * the values torch.optim.lr_scheduler.CosineAnnealingLR(T_max = total -
 * warmup) gives when stepped after each optimizer step), or lr when
 * total_steps is 0. Computed in double, rounded to FP32. */
float ampc_lr_at(const ampc_optim_config *c, int64_t t);

/* Per-tensor counts of one optimizer step. */
typedef struct ampc_swallow_stats {
  int64_t updated;       /* elements with a finite weight whose update was non-zero and
                            finite */
  int64_t swallowed;     /* ... of those, whose stored working weight did not change */
  int64_t would_swallow; /* with a master: updated elements whose working weight would
                            not have changed had the update been applied to it directly,
                            i.e. round(w16 + (master_new - master_old)) == w16 */
  int64_t nonfinite;     /* elements whose stored weight (or master) is inf or NaN after the step */
} ampc_swallow_stats;

/* One optimizer step t (1-based count of applied steps; drives Adam's bias
 * correction and SGD's first-step momentum) at learning rate lr (each
 * branch's group at lr * branch_lr / c->lr where branch_lr is set). Each
 * gradient is read as g = fp32(grad) * grad_mult (one FP32 rounding; pass
 * 1/S) and then, when clip_coef != 1, g = g * clip_coef. The table must have
 * m and v for AdamW, m for SGD with momentum. sw: NULL, or P->count entries
 * (overwritten). Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_optim_step(ampc_params *P, const ampc_optim_config *c, int64_t t, float lr,
                            float grad_mult, float clip_coef, ampc_swallow_stats *sw);

/* The same with each parameter's gradient multiplied by grad_mult[its
 * branch] (per-branch loss scaling: 1/S_b of its branch, ampc/amp.h). */
ampc_status ampc_optim_step_branches(ampc_params *P, const ampc_optim_config *c, int64_t t,
                                     float lr, const float grad_mult[AMPC_BRANCH_COUNT],
                                     float clip_coef, ampc_swallow_stats *sw);

/* The same reading the gradients from `grad` (dtype gdt: F32, F16 or BF16;
 * the table's layout, P->total values) instead of P->grad: per-loss scaling
 * hands the optimizer the FP32 sum of its terms' unscaled gradients. */
ampc_status ampc_optim_step_from(ampc_params *P, const ampc_optim_config *c, int64_t t, float lr,
                                 const float grad_mult[AMPC_BRANCH_COUNT], float clip_coef,
                                 ampc_swallow_stats *sw, const void *grad, ampc_dtype gdt);

/* Moment buffers the optimizer needs: 2 for AdamW, 1 for SGD with momentum, else 0. */
int ampc_optim_moments(const ampc_optim_config *c);

#ifdef __cplusplus
}
#endif
#endif
