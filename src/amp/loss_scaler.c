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
 *
 * The step's plan (the backward seeds per loss or per branch) and its finish
 * (unscale, non-finite check, global norm, scale update) live here too: the
 * scaler is the only code that forms 1/S and decides which gradients it
 * multiplies; it reaches device memory through the caller's ops.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

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

/* ---- the step's plan and its finish ------------------------------------------------- */

void ampc_scale_plan_init(ampc_scale_plan *p) {
  memset(p, 0, sizeof *p);
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    p->amax[b] = -1.0f;
}

void ampc_scaler_plan(const ampc_scaler *s, ampc_scale_plan *p, int64_t K, float m,
                      const bool *term_on, float *sum) {
  const bool per_loss = s->cfg.mode == AMPC_LOSS_SCALE_PER_LOSS;
  p->begun = true;
  p->mode = s->cfg.mode;
  p->loss_seed = (s->scale / (float)K) * m;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    p->scale[b] =
        per_loss ? ampc_scaler_term_scale(s, b) : ampc_scaler_branch_scale(s, (ampc_branch)b);
    p->seed[b] = (p->scale[b] / (float)K) * m;
    p->term_on[b] = per_loss && term_on && term_on[b];
    p->nonfinite[b] = false;
  }
  p->sum = per_loss ? sum : NULL;
  p->summed = false;
}

ampc_status ampc_scaler_take_term(ampc_scale_plan *p, int k, const ampc_grads *g,
                                  const ampc_unscale_ops *ops) {
  if (!p || !g || !ops || !ops->check || !ops->stage || p->mode != AMPC_LOSS_SCALE_PER_LOSS ||
      !p->sum || k < 0 || k >= AMPC_BRANCH_COUNT)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_scaler_take_term: bad arguments (term %d)", k);
  int64_t nf = 0;
  double norm = 0.0;
  AMPC_TRY(ops->check(g->g, g->dt, g->n, 1.0f, &nf, &norm, ops->ws));
  if (nf > 0)
    p->nonfinite[k] = true;
  AMPC_TRY(ops->stage(g->n, g->g, g->dt, (float)(1.0 / (double)p->scale[k]), !p->summed, p->sum));
  p->summed = true;
  return AMPC_OK;
}

/* the unscale and check of the plan's gradients: out's counts, norm and flags */
static ampc_status unscale_check(const ampc_scaler *s, const ampc_scale_plan *p,
                                 const ampc_grads *g, const ampc_unscale_ops *ops,
                                 ampc_unscaled *out, bool bnf[AMPC_BRANCH_COUNT]) {
  if (p->mode == AMPC_LOSS_SCALE_PER_LOSS && ops->check_group)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "per-loss scaling over sharded gradients (ZeRO-1) is not supported");
  if (p->mode == AMPC_LOSS_SCALE_PER_LOSS) { /* unscaled already, term by term */
    AMPC_TRY(ops->check(p->sum, AMPC_F32, g->n, 1.0f, &out->nonfinite, &out->norm, ops->ws));
    bool any = false;
    for (int k = 0; k < AMPC_BRANCH_COUNT; k++)
      bnf[k] = p->nonfinite[k], any = any || bnf[k];
    if (out->nonfinite > 0 && !any) /* a sum over ranks that overflowed FP32: the first term */
      bnf[0] = true;
    return AMPC_OK;
  }
  if (ops->check_group && p->mode == AMPC_LOSS_SCALE_PER_BRANCH)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "per-branch loss scaling over sharded gradients (ZeRO-1) is not supported");
  if (ops->check_group)
    return ops->check_group(ops->group_user, g->g, g->dt, g->n, ampc_scaler_inv_scale(s),
                            &out->nonfinite, &out->norm);
  if (p->mode != AMPC_LOSS_SCALE_PER_BRANCH)
    return ops->check(g->g, g->dt, g->n, ampc_scaler_inv_scale(s), &out->nonfinite, &out->norm,
                      ops->ws);
  /* each tensor with its branch's 1/S_b; the norm from the tensors' sums */
  const size_t gsz = ampc_dtype_size(g->dt);
  double sumsq = 0.0;
  for (int i = 0; i < g->count; i++) {
    const ampc_param *t = &g->p[i];
    const int b = (unsigned)t->branch < AMPC_BRANCH_COUNT ? (int)t->branch : AMPC_BRANCH_HEADS;
    int64_t nf = 0;
    double norm = 0.0;
    AMPC_TRY(ops->check((const char *)g->g + (size_t)t->offset * gsz, g->dt, t->numel, out->mult[b],
                        &nf, &norm, ops->ws));
    sumsq += norm * norm;
    out->nonfinite += nf;
    bnf[b] = bnf[b] || nf > 0;
  }
  out->norm = sqrt(sumsq);
  return AMPC_OK;
}

ampc_status ampc_scaler_finish(ampc_scaler *s, ampc_scale_plan *p, const ampc_grads *g,
                               const ampc_unscale_ops *ops, ampc_unscaled *out) {
  if (!s || !p || !g || !ops || !ops->check || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_scaler_finish: NULL argument");
  if (!p->begun)
    ampc_scaler_plan(s, p, 1, 1.0f, NULL, NULL);
  const bool per_loss = p->mode == AMPC_LOSS_SCALE_PER_LOSS;
  if (per_loss != (p->sum != NULL) || p->mode != s->cfg.mode)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_scaler_finish: per-loss scaling takes its gradient from the FP32 sum "
                     "of the terms' unscaled gradients (ampc_scaler_take_term), and only it");
  memset(out, 0, sizeof *out);
  const float S = s->scale, inv = ampc_scaler_inv_scale(s);
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    out->scale[b] = p->scale[b];
    /* the factors of the optimizer's fused update: the sum is unscaled already */
    out->mult[b] = per_loss                                ? 1.0f
                   : p->mode == AMPC_LOSS_SCALE_PER_BRANCH ? (float)(1.0 / (double)p->scale[b])
                                                           : inv;
  }
  bool bnf[AMPC_BRANCH_COUNT] = {false, false, false, false};
  AMPC_TRY(unscale_check(s, p, g, ops, out, bnf));
  out->overflow = out->nonfinite > 0;
  out->skip = out->overflow && s->cfg.mode != AMPC_LOSS_SCALE_NONE;
  out->grad = per_loss ? (const void *)p->sum : g->g;
  out->grad_dt = per_loss ? AMPC_F32 : g->dt;
  if (!per_loss && p->mode != AMPC_LOSS_SCALE_PER_BRANCH)
    bnf[AMPC_BRANCH_HEADS] = out->overflow;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    out->nonfinite_mask |= bnf[b] ? 1u << b : 0u;
  const int64_t picks = s->branch_picks;
  (void)ampc_scaler_update_branches(s, bnf, p->amax); /* its skip is out->skip */
  out->picked = s->branch_picks > picks;
  out->loss_scale = S;
  out->next_scale = s->scale;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    out->next_branch_scale[b] =
        per_loss ? ampc_scaler_term_scale(s, b) : ampc_scaler_branch_scale(s, (ampc_branch)b);
  if (per_loss) { /* the smallest of the model's terms' scales */
    bool have = false;
    for (int k = 0; k < AMPC_BRANCH_COUNT; k++)
      if (p->term_on[k]) {
        if (!have || out->scale[k] < out->loss_scale)
          out->loss_scale = out->scale[k];
        if (!have || out->next_branch_scale[k] < out->next_scale)
          out->next_scale = out->next_branch_scale[k];
        have = true;
      }
  }
  out->growth_tracker = s->growth_tracker;
  ampc_scale_plan_init(p); /* used once */
  return AMPC_OK;
}
