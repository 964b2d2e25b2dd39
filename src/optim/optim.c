/*
 * src/optim/optim.c: AdamW and SGD (with momentum, dampening, Nesterov) on the
 * parameter table; the warmup + cosine learning-rate schedule.
 *
 * The per-element arithmetic follows PyTorch's single-tensor reference
 * implementations (torch/optim/adamw.py `_single_tensor_adamw`,
 * torch/optim/sgd.py `_single_tensor_sgd`, 2.x), one elementary tensor op at a
 * time: each op computes in FP32 and rounds its result to the dtype of the
 * tensor it writes (rp: the parameter being updated, rs: the optimizer state).
 * With FP32 master and FP32 state both are exact no-ops.
 */
#include "internal.h"

#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ampc/optim.h"
#include "numeric/numeric.h"
#include "optim/optim_impl.h"

ampc_optim_config ampc_optim_adamw_defaults(void) {
  ampc_optim_config c = {.kind = AMPC_OPTIM_ADAMW,
                         .lr = 1e-3f,
                         .weight_decay = 1e-2f,
                         .beta1 = 0.9f,
                         .beta2 = 0.999f,
                         .eps = 1e-8f};
  return c;
}

ampc_optim_config ampc_optim_sgd_defaults(void) {
  ampc_optim_config c = {.kind = AMPC_OPTIM_SGD, .lr = 1e-2f, .momentum = 0.9f};
  return c;
}

int ampc_optim_moments(const ampc_optim_config *c) {
  if (c->kind == AMPC_OPTIM_ADAMW)
    return 2;
  return c->momentum != 0.0f ? 1 : 0;
}

ampc_status ampc_optim_config_check(const ampc_optim_config *c) {
  if (!c)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "optimizer config is NULL");
  if (c->kind != AMPC_OPTIM_ADAMW && c->kind != AMPC_OPTIM_SGD)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown optimizer %d", (int)c->kind);
  if (!(c->lr > 0.0f) || !isfinite(c->lr))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--lr %g: must be a positive finite number",
                     (double)c->lr);
  if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--weight-decay %g: must be >= 0",
                     (double)c->weight_decay);
  if (c->kind == AMPC_OPTIM_ADAMW &&
      (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "AdamW betas (%g, %g): each must be in [0, 1)",
                     (double)c->beta1, (double)c->beta2);
  if (c->kind == AMPC_OPTIM_ADAMW && (!(c->eps >= 0.0f) || !isfinite(c->eps)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "AdamW eps %g: must be >= 0", (double)c->eps);
  if (c->kind == AMPC_OPTIM_SGD &&
      (!(c->momentum >= 0.0f && c->momentum < 1.0f) || !(c->dampening >= 0.0f) ||
       (c->nesterov && (c->momentum == 0.0f || c->dampening != 0.0f))))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "SGD momentum %g / dampening %g: momentum in [0, 1); Nesterov needs "
                     "momentum > 0 and dampening 0",
                     (double)c->momentum, (double)c->dampening);
  if (c->warmup_steps < 0 || c->total_steps < 0 ||
      (c->total_steps && c->warmup_steps > c->total_steps))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "warmup %lld / total %lld steps: bad schedule",
                     (long long)c->warmup_steps, (long long)c->total_steps);
  if (!(c->min_lr >= 0.0f) || !(c->min_lr <= c->lr))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--min-lr %g: must be in [0, lr]", (double)c->min_lr);
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    if (!(c->branch_lr[b] >= 0.0f) || !isfinite(c->branch_lr[b]))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--lr-%s %g: must be a finite number >= 0 (0: --lr)",
                       ampc_branch_name((ampc_branch)b), (double)c->branch_lr[b]);
  if (!(c->clip_norm >= 0.0f) || !isfinite(c->clip_norm))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--clip-norm %g: must be >= 0 (0 = off)",
                     (double)c->clip_norm);
  return AMPC_OK;
}

float ampc_lr_at(const ampc_optim_config *c, int64_t t) {
  const double lr = c->lr, lo = c->min_lr;
  if (c->warmup_steps > 0 && t <= c->warmup_steps)
    return (float)(lr * (double)t / (double)c->warmup_steps);
  if (c->total_steps <= 0 || c->total_steps <= c->warmup_steps)
    return c->lr;
  /* as torch's CosineAnnealingLR stepped after each optimizer step: the first
   * step after warmup runs at lr, the last one (t = total) just above min_lr */
  double p = (double)(t - c->warmup_steps - 1) / (double)(c->total_steps - c->warmup_steps);
  p = p < 0.0 ? 0.0 : (p > 1.0 ? 1.0 : p);
  return (float)(lo + (lr - lo) * 0.5 * (1.0 + cos(3.14159265358979323846 * p)));
}

/* x rounded to dt and widened back (identity for F32) */
static inline float rnd(float x, ampc_dtype dt) {
  switch (dt) {
  case AMPC_F16:
    return ampc_bits_f32(ampc_f16bits_to_f32bits(ampc_f32bits_to_f16bits(ampc_f32_bits(x))));
  case AMPC_BF16:
    return ampc_bits_f32(ampc_bf16bits_to_f32bits(ampc_f32bits_to_bf16bits(ampc_f32_bits(x))));
  default: return x;
  }
}

/* stored bits of element i of a 16- or 32-bit buffer */
static inline uint32_t raw_bits(const void *p, ampc_dtype dt, int64_t i) {
  if (dt == AMPC_F32)
    return ampc_f32_bits(((const float *)p)[i]);
  return ((const uint16_t *)p)[i];
}

uint32_t ampc_sr_bits(uint64_t seed, int64_t step, int64_t index) {
  return ampc_sr_hash(seed, step, index);
}

uint16_t ampc_bf16_round_stochastic(float x, uint32_t r) {
  const uint32_t b = ampc_f32_bits(x);
  if ((b & 0x7F800000u) == 0x7F800000u) /* inf, NaN: as the nearest rounding does */
    return ampc_f32bits_to_bf16bits(b);
  /* add the random bits below bfloat16's last bit to the magnitude and cut
   * them off: a carry (the value rounds up in magnitude) with probability
   * (low 16 bits) / 2^16; the sign bit is never reached from a finite value */
  return (uint16_t)((b + (r & 0xFFFFu)) >> 16);
}

/*
 * AdamW on one tensor with FP32 state and FP32 weights being updated (an FP32
 * master, or FP32 working weights without one) and no swallowed-update
 * statistics, a chunk at a time: the gradient widened with ampc_convert, the
 * update on 4 lanes (SSE2, the x86-64 baseline), the new master rounded into
 * the working weights with ampc_store_f32. Each
 * lane performs step_tensor's operations in the same order (no FMA: the build
 * has -ffp-contract=off and the intrinsics are separate multiplies and adds;
 * sqrtps and divps are correctly rounded like sqrtf and /), so the bits are
 * the same as the scalar loop's.
 */
static void adamw_f32_tensor(ampc_params *P, int i, const step_consts *k) {
  enum { CHUNK = 512 };
  const ampc_param *p = &P->p[i];
  const bool decay = p->decay && k->c->weight_decay != 0.0f;
  float g[CHUNK];
  const int64_t so = P->shard_lo, lo = p->offset > so ? p->offset : so,
                hi =
                    p->offset + p->numel < so + P->shard_n ? p->offset + p->numel : so + P->shard_n;
  for (int64_t e0 = lo; e0 < hi; e0 += CHUNK) {
    const int64_t n = hi - e0 < CHUNK ? hi - e0 : CHUNK;
    /* the FP32 weights updated: the master (the shard's), or the working
     * weights themselves (whole); the moments are the shard's */
    float *restrict mst = P->master ? P->master + (e0 - so) : (float *)P->w + e0,
                    *restrict mm = (float *)P->m + (e0 - so),
                    *restrict vv = (float *)P->v + (e0 - so);
    ampc_convert(g, AMPC_F32, (const char *)k->grad + e0 * (int64_t)ampc_dtype_size(k->gdt), k->gdt,
                 (size_t)n);
    int64_t j = 0;
#if defined(__SSE2__)
    const __m128 gm = _mm_set1_ps(k->gm), clip = _mm_set1_ps(k->clip),
                 df = _mm_set1_ps(k->decay_factor), omb1 = _mm_set1_ps(k->one_m_b1),
                 b2 = _mm_set1_ps(k->b2), omb2 = _mm_set1_ps(k->one_m_b2),
                 bc2 = _mm_set1_ps(k->bc2_sqrt), eps = _mm_set1_ps(k->eps),
                 nstep = _mm_set1_ps(-k->step_size);
    const bool do_clip = k->clip != 1.0f;
    for (; j + 4 <= n; j += 4) {
      __m128 gv = _mm_mul_ps(_mm_loadu_ps(g + j), gm);
      if (do_clip)
        gv = _mm_mul_ps(gv, clip);
      __m128 w = _mm_loadu_ps(mst + j);
      if (decay)
        w = _mm_mul_ps(w, df);
      __m128 m = _mm_loadu_ps(mm + j), v = _mm_loadu_ps(vv + j);
      m = _mm_add_ps(m, _mm_mul_ps(omb1, _mm_sub_ps(gv, m)));
      v = _mm_mul_ps(v, b2);
      v = _mm_add_ps(v, _mm_mul_ps(_mm_mul_ps(omb2, gv), gv));
      __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(v), bc2), eps);
      w = _mm_add_ps(w, _mm_mul_ps(nstep, _mm_div_ps(m, denom)));
      _mm_storeu_ps(mm + j, m);
      _mm_storeu_ps(vv + j, v);
      _mm_storeu_ps(mst + j, w);
    }
#endif
    for (; j < n; j++) { /* the tail: step_tensor's arithmetic with F32 state */
      float gv = g[j] * k->gm;
      if (k->clip != 1.0f)
        gv = gv * k->clip;
      float w = mst[j];
      if (decay)
        w = w * k->decay_factor;
      float m = mm[j], v = vv[j];
      m = m + k->one_m_b1 * (gv - m);
      v = v * k->b2;
      v = v + k->one_m_b2 * gv * gv;
      const float denom = sqrtf(v) / k->bc2_sqrt + k->eps;
      w = w + -k->step_size * (m / denom);
      mm[j] = m;
      vv[j] = v;
      mst[j] = w;
    }
    if (P->master)
      ampc_store_f32((char *)P->w + e0 * (int64_t)ampc_dtype_size(P->wdt), P->wdt, mst, (size_t)n,
                     NULL);
  }
}

static void step_tensor(ampc_params *P, int i, const step_consts *k, ampc_swallow_stats *sw) {
  if (k->c->kind == AMPC_OPTIM_ADAMW && P->sdt == AMPC_F32 && (P->master || P->wdt == AMPC_F32) &&
      !sw) {
    adamw_f32_tensor(P, i, k);
    return;
  }
  const ampc_param *p = &P->p[i];
  const ampc_optim_config *c = k->c;
  const ampc_dtype wdt = P->wdt, sdt = P->sdt;
  const bool has_master = P->master != NULL;
  const ampc_dtype pdt = has_master ? AMPC_F32 : wdt; /* dtype of the updated tensor */
  const bool decay = p->decay && c->weight_decay != 0.0f;
  /* stochastic rounding: the decayed and updated weight formed in FP32 and
   * rounded once, stochastically (not twice to nearest) */
  const bool sr = c->stochastic_round && !has_master && wdt == AMPC_BF16;
  /* Kahan: the whole change d formed in FP32 (the decay as -lr*wd*w, not
   * w*(1 - lr*wd) - w, which would cancel), applied with the compensation */
  const bool kh = c->kahan && P->comp && !has_master && wdt != AMPC_F32;
  int64_t n_upd = 0, n_sw = 0, n_would = 0, n_nf = 0;
  /* the elements of this tensor in the table's shard; the sharded roles
   * (master, m, v, comp) at e - so */
  const int64_t so = P->shard_lo, lo = p->offset > so ? p->offset : so,
                hi =
                    p->offset + p->numel < so + P->shard_n ? p->offset + p->numel : so + P->shard_n;
  for (int64_t e = lo; e < hi; e++) {
    const int64_t es = e - so;
    float g = ampc_elem_load(k->grad, k->gdt, e) * k->gm;
    if (k->clip != 1.0f)
      g = g * k->clip;
    const uint32_t w16_before = raw_bits(P->w, wdt, e);
    const float w16_old = ampc_elem_load(P->w, wdt, e);
    const float w_old = has_master ? P->master[es] : ampc_elem_load(P->w, wdt, e);
    float w = w_old;
    float change = 0.0f; /* Kahan: the step's whole change, in FP32 */
    bool nonzero = false;
    if (c->kind == AMPC_OPTIM_ADAMW) {
      if (decay && kh) {
        change = -(k->lr_wd * w_old);
        nonzero = nonzero || (w_old != 0.0f);
      } else if (decay) {
        w = sr ? w * k->decay_factor : rnd(w * k->decay_factor, pdt); /* param.mul_(1 - lr * wd) */
        nonzero = nonzero || (w_old != 0.0f);
      }
      float m = ampc_elem_load(P->m, sdt, es), v = ampc_elem_load(P->v, sdt, es);
      m = rnd(m + k->one_m_b1 * (g - m), sdt);       /* exp_avg.lerp_(g, 1 - b1) */
      v = rnd(v * k->b2, sdt);                       /* exp_avg_sq.mul_(b2) */
      v = rnd(v + k->one_m_b2 * g * g, sdt);         /* .addcmul_(g, g, 1 - b2) */
      float denom = rnd(sqrtf(v), sdt);              /* exp_avg_sq.sqrt() */
      denom = rnd(denom / k->bc2_sqrt, sdt);         /* / bias_correction2_sqrt */
      denom = rnd(denom + k->eps, sdt);              /* .add_(eps) */
      const float upd = -k->step_size * (m / denom); /* addcdiv value */
      if (kh)
        change = change + upd;
      else
        w = sr ? w + upd : rnd(w + upd, pdt); /* param.addcdiv_(m, denom) */
      nonzero = nonzero || upd != 0.0f;
      ampc_elem_store(P->m, sdt, es, m);
      ampc_elem_store(P->v, sdt, es, v);
    } else {
      float d = g;
      if (decay)
        d = rnd(d + c->weight_decay * w_old, sdt); /* grad.add(param, alpha=wd) */
      if (c->momentum != 0.0f) {
        float buf;
        if (k->first) {
          buf = rnd(d, sdt); /* torch.clone(grad) */
        } else {
          buf = rnd(ampc_elem_load(P->m, sdt, es) * c->momentum, sdt);
          buf = rnd(buf + (1.0f - c->dampening) * d, sdt);
        }
        ampc_elem_store(P->m, sdt, es, buf);
        d = c->nesterov ? rnd(d + c->momentum * buf, sdt) : buf;
      }
      const float upd = -k->lr * d;
      if (kh)
        change = upd;
      else
        w = sr ? w + upd : rnd(w + upd, pdt); /* param.add_(d, alpha=-lr) */
      nonzero = upd != 0.0f;
    }
    if (kh) {
      const float y = change + ampc_elem_load(P->comp, wdt, es);
      w = rnd(w_old + y, wdt);
      ampc_elem_store(P->comp, wdt, es, isfinite(w) ? y - (w - w_old) : 0.0f);
    }
    if (sr)
      w = ampc_bits_f32(ampc_bf16bits_to_f32bits(
          ampc_bf16_round_stochastic(w, ampc_sr_bits(c->round_seed, k->t, e))));
    if (has_master)
      P->master[es] = w;
    ampc_elem_store(P->w, wdt, e, w);
    if (sw && (!isfinite(w) || !isfinite(ampc_elem_load(P->w, wdt, e))))
      n_nf++;
    /* a swallowed update is a finite non-zero one that a finite weight did
     * not take; non-finite weights are counted apart (nonfinite) */
    if (sw && nonzero && isfinite(w) && isfinite(w16_old) && isfinite(w_old)) {
      n_upd++;
      if (raw_bits(P->w, wdt, e) == w16_before)
        n_sw++;
      if (has_master) {
        const float direct = rnd(w16_old + (w - w_old), wdt);
        if (ampc_f32_bits(direct) == ampc_f32_bits(w16_old))
          n_would++;
      }
    }
  }
  if (sw) {
    sw->updated = n_upd;
    sw->swallowed = n_sw;
    sw->would_swallow = n_would;
    sw->nonfinite = n_nf;
  }
}

void ampc_optim_consts(const ampc_optim_config *c, int64_t t, float lr,
                       const float grad_mult[AMPC_BRANCH_COUNT], float clip_coef, const void *grad,
                       ampc_dtype gdt, step_consts kb[AMPC_BRANCH_COUNT], step_consts *base) {
  step_consts k = {.c = c,
                   .grad = grad,
                   .gdt = gdt,
                   .lr = lr,
                   .gm = grad_mult[0],
                   .clip = clip_coef,
                   .first = t == 1,
                   .t = t};
  double bc1 = 1.0;
  if (c->kind == AMPC_OPTIM_ADAMW) {
    bc1 = 1.0 - pow((double)c->beta1, (double)t);
    const double bc2 = 1.0 - pow((double)c->beta2, (double)t);
    k.one_m_b1 = (float)(1.0 - (double)c->beta1);
    k.b2 = c->beta2;
    k.one_m_b2 = (float)(1.0 - (double)c->beta2);
    k.bc2_sqrt = (float)sqrt(bc2);
    k.eps = c->eps;
  }
  /* each branch's group: its learning rate and what follows from it */
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    kb[b] = k;
    const double lr_b = c->branch_lr[b] > 0.0f && c->lr > 0.0f
                            ? (double)lr * ((double)c->branch_lr[b] / (double)c->lr)
                            : (double)lr;
    kb[b].lr = (float)lr_b;
    kb[b].step_size = (float)(lr_b / bc1);
    kb[b].decay_factor = (float)(1.0 - lr_b * (double)c->weight_decay);
    kb[b].lr_wd = (float)(lr_b * (double)c->weight_decay);
    kb[b].gm = grad_mult[b];
  }
  /* no branch: the base group */
  *base = kb[0];
  base->lr = k.lr, base->step_size = (float)((double)lr / bc1), base->gm = grad_mult[0],
  base->decay_factor = (float)(1.0 - (double)lr * (double)c->weight_decay),
  base->lr_wd = (float)((double)lr * (double)c->weight_decay);
}

ampc_status ampc_optim_step(ampc_params *P, const ampc_optim_config *c, int64_t t, float lr,
                            float grad_mult, float clip_coef, ampc_swallow_stats *sw) {
  const float gm[AMPC_BRANCH_COUNT] = {grad_mult, grad_mult, grad_mult, grad_mult};
  return ampc_optim_step_branches(P, c, t, lr, gm, clip_coef, sw);
}

ampc_status ampc_optim_step_branches(ampc_params *P, const ampc_optim_config *c, int64_t t,
                                     float lr, const float grad_mult[AMPC_BRANCH_COUNT],
                                     float clip_coef, ampc_swallow_stats *sw) {
  return ampc_optim_step_from(P, c, t, lr, grad_mult, clip_coef, sw, P ? P->grad : NULL,
                              P ? P->wdt : AMPC_F32);
}

ampc_status ampc_optim_step_from(ampc_params *P, const ampc_optim_config *c, int64_t t, float lr,
                                 const float grad_mult[AMPC_BRANCH_COUNT], float clip_coef,
                                 ampc_swallow_stats *sw, const void *grad, ampc_dtype gdt) {
  if (!grad_mult || !grad || (gdt != AMPC_F32 && gdt != AMPC_F16 && gdt != AMPC_BF16))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_optim_step: bad gradients or multipliers");
  if (!P || !c || t < 1 || !(lr >= 0.0f))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_optim_step: bad arguments (t = %lld)",
                     (long long)t);
  if ((c->kind == AMPC_OPTIM_ADAMW && (!P->m || !P->v)) ||
      (c->kind == AMPC_OPTIM_SGD && c->momentum != 0.0f && !P->m))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_optim_step: the table has no moment buffers");
  if (c->kahan && (!P->comp || P->master || P->wdt == AMPC_F32))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_optim_step: Kahan updates need 16-bit weights without a master and "
                     "the compensation buffer (ampc_params_add_compensation)");
  step_consts kb[AMPC_BRANCH_COUNT], k0;
  ampc_optim_consts(c, t, lr, grad_mult, clip_coef, grad, gdt, kb, &k0);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(dynamic, 1) if (P->numel > 65536)
  for (int i = 0; i < P->count; i++) {
    ampc_tally_adopt(tally);
    const step_consts *ki =
        (unsigned)P->p[i].branch < AMPC_BRANCH_COUNT ? &kb[P->p[i].branch] : &k0;
    step_tensor(P, i, ki, sw ? &sw[i] : NULL);
  }
  return AMPC_OK;
}
