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
  case AMPC_LOSS_SCALE_DYNAMIC: break;
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
