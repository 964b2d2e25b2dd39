/*
 * src/amp/loss_scaler.c: static and dynamic loss scaling.
 *
 * Dynamic scaling follows torch.cuda.amp.GradScaler (PyTorch's
 * _amp_update_scale_: backoff and tracker reset on a non-finite step; growth
 * after growth_interval clean steps, only to a finite value) with two
 * additions from DeepSpeed's DynamicLossScaler: hysteresis (tolerate h - 1
 * consecutive overflows before backing off; consecutive_hysteresis, i.e. the
 * credit is restored by any clean step) and a floor (min_loss_scale). A
 * ceiling (max_scale) caps growth. The scale is kept in FP32, as GradScaler
 * keeps it in an FP32 tensor.
 */
#include "internal.h"

#include <math.h>

#include "ampc/amp.h"

void ampc_scaler_init(ampc_scaler *s, const ampc_scaler_config *cfg) {
  s->cfg = *cfg;
  s->scale = cfg->mode == AMPC_LOSS_SCALE_NONE ? 1.0f : cfg->init_scale;
  s->growth_tracker = 0;
  s->hysteresis_left = cfg->hysteresis > 0 ? cfg->hysteresis : 1;
  s->overflow_count = 0;
  s->skip_count = 0;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    s->branch_scale[b] = s->scale;
    s->branch_tracker[b] = 0;
    s->branch_hysteresis[b] = s->hysteresis_left;
  }
  s->branch_picks = 0;
}

float ampc_scaler_term_scale(const ampc_scaler *s, int k) {
  if (s->cfg.mode == AMPC_LOSS_SCALE_PER_LOSS && k >= 0 && k < AMPC_BRANCH_COUNT)
    return s->branch_scale[k];
  return s->scale;
}

float ampc_scaler_branch_scale(const ampc_scaler *s, ampc_branch br) {
  if (s->cfg.mode == AMPC_LOSS_SCALE_PER_BRANCH && (unsigned)br < AMPC_BRANCH_COUNT)
    return s->branch_scale[br];
  return s->scale;
}

float ampc_scaler_inv_scale(const ampc_scaler *s) { return (float)(1.0 / (double)s->scale); }

bool ampc_scaler_update(ampc_scaler *s, bool found_nonfinite) {
  const ampc_scaler_config *c = &s->cfg;
  if (found_nonfinite)
    s->overflow_count++;
  switch (c->mode) {
  case AMPC_LOSS_SCALE_NONE: return false;
  case AMPC_LOSS_SCALE_STATIC:
    if (found_nonfinite)
      s->skip_count++;
    return found_nonfinite;
  case AMPC_LOSS_SCALE_DYNAMIC:
  case AMPC_LOSS_SCALE_PER_BRANCH:
  case AMPC_LOSS_SCALE_PER_LOSS: break;
  }
  if (found_nonfinite) {
    s->skip_count++;
    s->growth_tracker = 0;
    if (s->hysteresis_left > 1) {
      s->hysteresis_left--;
    } else {
      const float next = s->scale * c->backoff_factor;
      s->scale = next > c->min_scale ? next : c->min_scale;
    }
    return true;
  }
  s->hysteresis_left = c->hysteresis > 0 ? c->hysteresis : 1;
  if (++s->growth_tracker >= c->growth_interval) {
    const float next = s->scale * c->growth_factor;
    if (isfinite(next))
      s->scale = next < c->max_scale ? next : c->max_scale;
    s->growth_tracker = 0;
  }
  return false;
}

/* The largest power of two <= x (x >= 2^-126 and finite): the per-branch
 * scales stay powers of two, so a ceiling of FLT_MAX caps them at 2^127. */
static float pow2_floor(float x) {
  int e = 0;
  (void)frexpf(x, &e); /* x = m 2^e, m in [0.5, 1) */
  return ldexpf(1.0f, e - 1);
}

bool ampc_scaler_update_branches(ampc_scaler *s, const bool nonfinite[AMPC_BRANCH_COUNT],
                                 const float *amax) {
  bool any = false;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    any = any || nonfinite[b];
  if (s->cfg.mode != AMPC_LOSS_SCALE_PER_BRANCH && s->cfg.mode != AMPC_LOSS_SCALE_PER_LOSS)
    return ampc_scaler_update(s, any);
  const ampc_scaler_config *c = &s->cfg;
  /* per-branch keeps powers of two (a ceiling of FLT_MAX caps at 2^127);
   * per-loss caps at max_scale itself, as a dynamic scaler does */
  const float lo = c->min_scale,
              hi = c->mode == AMPC_LOSS_SCALE_PER_BRANCH ? pow2_floor(c->max_scale) : c->max_scale;
  if (any) {
    s->overflow_count++;
    s->skip_count++;
  }
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    float S = s->branch_scale[b];
    if (any) { /* the step is skipped: no growth anywhere */
      s->branch_tracker[b] = 0;
      if (nonfinite[b]) {
        if (s->branch_hysteresis[b] > 1) {
          s->branch_hysteresis[b]--;
        } else {
          const float next = S * c->backoff_factor;
          S = next > lo ? next : lo;
        }
      }
      s->branch_scale[b] = S;
      continue;
    }
    s->branch_hysteresis[b] = c->hysteresis > 0 ? c->hysteresis : 1;
    if (++s->branch_tracker[b] >= c->growth_interval) {
      const float next = S * c->growth_factor;
      if (isfinite(next))
        S = next < hi ? next : hi;
      s->branch_tracker[b] = 0;
    }
    /* the pick is per-branch's; per-loss terms are plain GradScalers */
    const float a = amax && c->mode == AMPC_LOSS_SCALE_PER_BRANCH ? amax[b] : -1.0f;
    if (a > 0.0f && isfinite(a)) {
      int e = 0;
      (void)frexpf(a, &e); /* floor(log2 a) = e - 1 */
      const int shift = AMPC_BRANCH_PICK_TOP_LOG2 - (e - 1);
      /* S_b 2^shift in double (no FP32 overflow on the way), then clamped */
      const double want = ldexp((double)s->branch_scale[b], shift);
      const float next = want <= (double)lo ? lo : want >= (double)hi ? hi : (float)want;
      if (next != s->branch_scale[b])
        s->branch_picks++;
      S = next;
      s->branch_tracker[b] = 0;
    }
    s->branch_scale[b] = S;
  }
  /* per-branch: the heads' scale seeds the losses; per-loss: term 0's */
  const int lead = s->cfg.mode == AMPC_LOSS_SCALE_PER_BRANCH ? AMPC_BRANCH_HEADS : 0;
  s->scale = s->branch_scale[lead];
  s->growth_tracker = s->branch_tracker[lead];
  s->hysteresis_left = s->branch_hysteresis[lead];
  return any;
}
