/*
 * src/diag/diagnose.c: verdicts from a run's steps (include/ampc/diag.h).
 *
 * Each verdict is the signature of one missing safeguard (DESIGN.md section 3,
 * after Micikevicius et al. 2018, "Mixed Precision Training", section 3):
 *   overflow          non-finite gradients that the loss scale caused (static S
 *                     too large) or that a dynamic scaler keeps hitting;
 *   nonfinite-independent-of-scale
 *                     non-finite values in the forward pass or in the weights,
 *                     or overflow that persists with S at its floor;
 *   underflow         gradient values flushed to zero by 16-bit storage, with
 *                     the loss on a plateau;
 *   swallowed-updates 16-bit weights updated in place that do not change;
 *   accumulation-error GEMM sums measurably worse than FP32 accumulation.
 * The thresholds are constants below, each with its reason; the evidence is
 * the exact counts.
 */
#include "ampc/diag.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/amp.h"
#include "internal.h"

/* A branch underflows when at least this fraction of its stored gradient
 * values were non-zero in FP32 and flushed to 0 (healthy 16-mixed runs flush
 * well under 1e-4; without loss scaling the emoji model flushes several %). */
static const double k_flush_frac = 0.01;
/* ... or at least this fraction, plateau or not (the paper's Fig. 3 case: most
 * activation gradients below binary16's range). */
static const double k_flush_frac_any = 0.05;
/* Updates swallowed: a run with 16-bit weights updated in place whose applied
 * updates left at least this fraction of the weights unchanged. */
static const double k_swallow_frac = 0.25;
/* Accumulation error: the sampled GEMMs' relative error exceeds the unit
 * roundoff of binary16 (2^-11): the sum loses more than rounding the result
 * to binary16 once would (FP32 accumulation stays near K * 2^-24). */
static const double k_acc_err = 4.8828125e-4;
/* Dynamic scaling overflows too often when this fraction of the steps after
 * its first applied one is skipped, and at least k_min_skips of them. */
static const double k_skip_frac = 0.25;
static const int64_t k_min_skips = 3;
/* FP8 saturation (fp8-mixed): at least this fraction of a branch's counted
 * FP8 casts after the first step (which casts with scale 1, before any amax
 * history exists) clipped at the format's largest value. Delayed scaling
 * takes the scale from earlier steps' amax, so a tensor whose amax keeps
 * growing saturates (Micikevicius et al. 2022, "FP8 Formats for Deep
 * Learning", section 4; TE's recipe.DelayedScaling). */
static const double k_fp8_sat_frac = 1e-3;
/* FP8 underflow: at least this fraction of a branch's counted casts after
 * step 1 were non-zero and became 0 (healthy fp8-mixed runs of mm-tiny flush
 * 0.0007-0.2 %, with --fp8-margin 2 up to 4 %). */
static const double k_fp8_flush_frac = 0.1;
/* Overflow with the scale at its floor for this many consecutive steps. */
static const int k_floor_run = 3;

struct ampc_diag {
  ampc_diag_config c;
  ampc_diag_step *s;
  int64_t n, cap;
  ampc_tm_stats grad_sum[AMPC_BRANCH_COUNT];
};

const char *ampc_verdict_name(ampc_verdict_kind k) {
  switch (k) {
  case AMPC_VERDICT_HEALTHY: return "healthy";
  case AMPC_VERDICT_OVERFLOW: return "overflow";
  case AMPC_VERDICT_NONFINITE_INDEPENDENT: return "nonfinite-independent-of-scale";
  case AMPC_VERDICT_UNDERFLOW: return "underflow";
  case AMPC_VERDICT_SWALLOWED: return "swallowed-updates";
  case AMPC_VERDICT_ACCUMULATION: return "accumulation-error";
  case AMPC_VERDICT_FP8_SATURATION: return "fp8-saturation";
  case AMPC_VERDICT_FP8_UNDERFLOW: return "fp8-underflow";
  case AMPC_VERDICT_PRECISION_GAP: return "precision-gap";
  default: return "?";
  }
}

ampc_diag *ampc_diag_create(const ampc_diag_config *c) {
  ampc_diag *d = calloc(1, sizeof *d);
  if (d && c)
    d->c = *c;
  return d;
}

void ampc_diag_free(ampc_diag *d) {
  if (d) {
    free(d->s);
    free(d);
  }
}

ampc_status ampc_diag_add(ampc_diag *d, const ampc_diag_step *s) {
  if (!d || !s)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_diag_add: NULL argument");
  if (d->n == d->cap) {
    const int64_t cap = d->cap ? 2 * d->cap : 64;
    ampc_diag_step *p = realloc(d->s, (size_t)cap * sizeof *p);
    if (!p)
      return ampc_fail(AMPC_ERR_NOMEM, "diagnosis: %lld steps", (long long)cap);
    d->s = p, d->cap = cap;
  }
  d->s[d->n++] = *s;
  if (s->telemetry)
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      ampc_tm_stats_merge(&d->grad_sum[b], &s->br[b].grad);
  return AMPC_OK;
}

void ampc_diag_truncate(ampc_diag *d, int64_t step) {
  if (!d)
    return;
  while (d->n > 0 && d->s[d->n - 1].step >= step)
    d->n--;
  memset(d->grad_sum, 0, sizeof d->grad_sum);
  for (int64_t i = 0; i < d->n; i++)
    if (d->s[i].telemetry)
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        ampc_tm_stats_merge(&d->grad_sum[b], &d->s[i].br[b].grad);
}

int64_t ampc_diag_steps(const ampc_diag *d) { return d ? d->n : 0; }
const ampc_diag_step *ampc_diag_step_at(const ampc_diag *d, int64_t i) {
  return d && i >= 0 && i < d->n ? &d->s[i] : NULL;
}
const ampc_diag_config *ampc_diag_get_config(const ampc_diag *d) { return d ? &d->c : NULL; }
const ampc_tm_stats *ampc_diag_grad_stats(const ampc_diag *d, int br) {
  return d && br >= 0 && br < AMPC_BRANCH_COUNT ? &d->grad_sum[br] : NULL;
}

/* ---- verdicts ------------------------------------------------------------------ */

static void ev(ampc_verdict *v, const char *fmt, ...) AMPC_PRINTF(2, 3);
static void ev(ampc_verdict *v, const char *fmt, ...) {
  if (v->n_evidence >= 8)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->evidence[v->n_evidence++], sizeof v->evidence[0], fmt, ap);
  va_end(ap);
}

/* The first non-finite tensor of step s as evidence: the op and pass, its
 * largest finite FP32 result before rounding against the storage format's
 * largest value, and the samples whose rows carry it (dataset indices and
 * keys, as many as fit). `sampled`: say that a sampled step named it. */
static void nf_evidence(ampc_verdict *v, const ampc_diag_step *s, bool sampled) {
  const char *bname = ampc_branch_name((ampc_branch)s->first_nonfinite_branch);
  const bool fwd = s->first_nonfinite_phase == 0;
  char mag[160] = "";
  ampc_dtype dt;
  ampc_format_info fi;
  if (s->first_nonfinite_max_abs >= 0.0 && s->first_nonfinite_dtype[0] &&
      ampc_dtype_parse(s->first_nonfinite_dtype, &dt) == AMPC_OK &&
      ampc_format_info_get(dt, &fi) == AMPC_OK) {
    if (s->first_nonfinite_max_abs == 0.0) /* nothing finite counted there */
      snprintf(mag, sizeof mag, "; none of its FP32 results was finite and non-zero");
    else if (s->first_nonfinite_max_abs > fi.max)
      snprintf(mag, sizeof mag, "; FP32 results up to %.3g before rounding, past %s's largest %g",
               s->first_nonfinite_max_abs, fi.name, fi.max);
    else
      snprintf(mag, sizeof mag,
               "; its finite FP32 results fit %s (largest %.3g): the inf/NaN came from its "
               "inputs or its arithmetic",
               fi.name, s->first_nonfinite_max_abs);
  }
  ev(v, "first non-finite tensor%s: %s, %s (%s, step %lld)%s", sampled ? " sampled" : "",
     s->first_nonfinite, fwd ? "forward output" : "backward input gradient", bname,
     (long long)s->step, mag);
  if (s->nf_samples_of <= 0)
    return;
  if (s->nf_samples_total == 0) {
    ev(v, "no sample's rows of %s hold the non-finite values (a sum over the batch)",
       s->first_nonfinite);
    return;
  }
  char list[160];
  size_t used = 0;
  list[0] = '\0';
  for (int i = 0; i < s->n_nf_samples && used + 1 < sizeof list; i++) {
    char key[36]; /* at most 32 characters of the key, "..." where cut */
    snprintf(key, sizeof key, "%.32s", s->nf_key[i]);
    if (strlen(s->nf_key[i]) > 32)
      memcpy(key + 29, "...", 4);
    const int w = s->nf_key[i][0] ? snprintf(list + used, sizeof list - used, "%s%lld (%s)",
                                             i ? ", " : "", (long long)s->nf_sample[i], key)
                                  : snprintf(list + used, sizeof list - used, "%s%lld",
                                             i ? ", " : "", (long long)s->nf_sample[i]);
    if (w < 0 || (size_t)w >= sizeof list - used) {
      list[used] = '\0';
      break;
    }
    used += (size_t)w;
  }
  if (s->nf_samples_total == s->nf_samples_of && s->nf_samples_of > 1)
    ev(v,
       "every sample of its micro-batch carries it (%lld of %lld): the op or a weight, not one "
       "input",
       (long long)s->nf_samples_total, (long long)s->nf_samples_of);
  else
    ev(v, "samples carrying it: %lld of %lld: %s%s", (long long)s->nf_samples_total,
       (long long)s->nf_samples_of, list, s->nf_samples_total > s->n_nf_samples ? ", ..." : "");
}

static ampc_verdict verdict(ampc_verdict_kind k) {
  ampc_verdict v;
  memset(&v, 0, sizeof v);
  v.kind = k, v.branch = -1, v.step = -1;
  return v;
}

static double frac(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

/* mean loss over steps [lo, hi) with a finite loss; NAN if none */
static double mean_loss(const ampc_diag *d, int64_t lo, int64_t hi) {
  double s = 0.0;
  int64_t n = 0;
  for (int64_t i = lo; i < hi && i < d->n; i++)
    if (isfinite(d->s[i].loss))
      s += d->s[i].loss, n++;
  return n ? s / (double)n : (double)NAN;
}

int ampc_diag_verdicts(const ampc_diag *d, ampc_verdict *out, int max) {
  if (!d || !out || max < 1)
    return 0;
  int nv = 0;
  const ampc_diag_config *c = &d->c;
  const char *bn[AMPC_BRANCH_COUNT];
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    bn[b] = ampc_branch_name((ampc_branch)b);

  /* ---- the first non-finite event and its kind ---- */
  int64_t n_over = 0, n_skip = 0, first_over = -1, first_nf_w = -1, first_nf_fwd = -1,
          first_nf_loss = -1;
  const ampc_diag_step *nf_tm = NULL; /* first sampled step naming a non-finite tensor */
  int64_t floor_run = 0, floor_run_max = 0, floor_run_at = -1;
  for (int64_t i = 0; i < d->n; i++) {
    const ampc_diag_step *s = &d->s[i];
    n_over += s->overflow, n_skip += s->skipped;
    if (s->overflow && first_over < 0)
      first_over = i;
    if (s->nonfinite_weights > 0 && first_nf_w < 0)
      first_nf_w = i;
    if (!isfinite(s->loss) && first_nf_loss < 0)
      first_nf_loss = i;
    if (s->telemetry && first_nf_fwd < 0)
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        if (s->br[b].act.r.inf || s->br[b].act.r.nan)
          first_nf_fwd = i;
    if (!nf_tm && s->telemetry && s->first_nonfinite_branch >= 0)
      nf_tm = s;
    const bool at_floor = (c->loss_scale_mode == AMPC_LOSS_SCALE_DYNAMIC ||
                           c->loss_scale_mode == AMPC_LOSS_SCALE_PER_BRANCH ||
                           c->loss_scale_mode == AMPC_LOSS_SCALE_PER_LOSS) &&
                          s->loss_scale <= c->min_scale;
    floor_run = s->overflow && at_floor ? floor_run + 1 : 0;
    if (floor_run > floor_run_max)
      floor_run_max = floor_run, floor_run_at = s->step - floor_run + 1;
  }
  /* forward non-finite: a non-finite loss or activation that is not a
   * consequence of non-finite weights written earlier */
  int64_t fwd = first_nf_fwd;
  if (first_nf_loss >= 0 && (fwd < 0 || first_nf_loss < fwd))
    fwd = first_nf_loss;
  const bool weights_first = first_nf_w >= 0 && (fwd < 0 || first_nf_w < fwd);
  /* the forward pass does not see the loss scale: a non-finite activation or
   * loss there is never the scale's doing, whatever overflowed before it */
  const bool fwd_first = fwd >= 0 && !weights_first;

  if (weights_first || fwd_first || floor_run_max >= k_floor_run) {
    ampc_verdict v = verdict(AMPC_VERDICT_NONFINITE_INDEPENDENT);
    if (weights_first) {
      const ampc_diag_step *s = &d->s[first_nf_w];
      v.step = s->step;
      ev(&v,
         "step %lld: the optimizer wrote %lld non-finite weights (%s weights updated %s, "
         "optimizer arithmetic in %s)",
         (long long)s->step, (long long)s->nonfinite_weights, ampc_dtype_name(c->lowp),
         c->master_weights ? "through an FP32 master" : "in place",
         c->master_weights ? "FP32" : ampc_dtype_name(c->lowp));
      if (first_over < 0 || d->s[first_over].step >= s->step)
        ev(&v, "the gradients were finite up to that step: the loss scale is not the cause");
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               c->master_weights
                   ? "lower the learning rate or clip gradients (--clip-norm): the FP32 update "
                     "itself left binary16's range"
                   : "FP32 master weights and optimizer state (--master-weights on, as "
                     "16-mixed): in binary16 Adam's eps 1e-8 rounds to 0 and m/sqrt(v) can "
                     "divide by 0");
    } else if (fwd_first) {
      const ampc_diag_step *s = &d->s[fwd];
      v.step = s->step;
      if (!isfinite(s->loss))
        ev(&v, "step %lld: the loss is %g", (long long)s->step, s->loss);
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        if (s->telemetry && (s->br[b].act.r.inf || s->br[b].act.r.nan)) {
          ev(&v,
             "step %lld, forward pass, %s: %llu activations overflowed to inf, %llu NaN "
             "(largest finite FP32 result before rounding %g; binary16 max 65504)",
             (long long)s->step, bn[b], (unsigned long long)s->br[b].act.r.overflow,
             (unsigned long long)s->br[b].act.r.nan, (double)s->br[b].act.r.max_abs);
          if (v.branch < 0)
            v.branch = b;
        }
      if (s->telemetry && s->first_nonfinite_branch >= 0 && s->first_nonfinite_phase == 0) {
        snprintf(v.tensor, sizeof v.tensor, "%s", s->first_nonfinite);
        nf_evidence(&v, s, false);
      }
      ev(&v, "the forward pass does not depend on the loss scale");
      if (first_over >= 0 && first_over < fwd) {
        int64_t before = 0;
        for (int64_t i = 0; i < fwd; i++)
          before += d->s[i].overflow;
        ev(&v, "%lld earlier steps had inf/NaN gradients (first at step %lld)", (long long)before,
           (long long)d->s[first_over].step);
      }
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               c->lowp == AMPC_F16 ? "keep the overflowing op in FP32 (autocast policy) or use "
                                     "bf16-mixed (range 3.4e38); check the data for inf/NaN and "
                                     "the learning rate for weights that grew"
                                   : "check the data and the model (inputs, learning rate, "
                                     "initialisation): the forward pass overflowed");
    } else {
      v.step = floor_run_at;
      ev(&v,
         "%lld consecutive overflowing steps from step %lld with the loss scale at its floor "
         "%g",
         (long long)floor_run_max, (long long)floor_run_at, c->min_scale);
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               "no loss scale can help: check the data and the model for values beyond "
               "binary16's range (or use bf16-mixed)");
    }
    if (nf_tm && !v.tensor[0]) {
      snprintf(v.tensor, sizeof v.tensor, "%s", nf_tm->first_nonfinite);
      nf_evidence(&v, nf_tm, true);
    }
    if (nv < max)
      out[nv++] = v;
  } else if (n_over > 0) {
    /* gradient overflow that the scale controls. A dynamic scaler's leading
     * skipped steps are it finding its scale (2^16 backing off), not a
     * failure: only skips after the first applied step count */
    const bool scaled = c->loss_scale_mode != AMPC_LOSS_SCALE_NONE;
    int64_t lead = 0;
    while (lead < d->n && d->s[lead].skipped)
      lead++;
    const int64_t later_skips = n_skip - lead, later_steps = d->n - lead;
    const bool dyn = c->loss_scale_mode == AMPC_LOSS_SCALE_DYNAMIC ||
                     c->loss_scale_mode == AMPC_LOSS_SCALE_PER_BRANCH ||
                     c->loss_scale_mode == AMPC_LOSS_SCALE_PER_LOSS;
    const bool bad = !dyn || (later_skips >= k_min_skips &&
                              frac((uint64_t)later_skips, (uint64_t)later_steps) >= k_skip_frac);
    if (bad) {
      ampc_verdict v = verdict(AMPC_VERDICT_OVERFLOW);
      const ampc_diag_step *s = &d->s[first_over];
      v.step = s->step;
      ev(&v,
         "%lld of %lld steps had inf/NaN gradients (first at step %lld, %lld values, loss "
         "scale %g)",
         (long long)n_over, (long long)d->n, (long long)s->step, (long long)s->nonfinite_grads,
         s->loss_scale);
      if (scaled)
        ev(&v, "%lld steps skipped (%.1f %%)", (long long)n_skip,
           100.0 * frac((uint64_t)n_skip, (uint64_t)d->n));
      else
        ev(&v, "with loss scaling off the non-finite gradients reached the weights");
      if (nf_tm) {
        snprintf(v.tensor, sizeof v.tensor, "%s", nf_tm->first_nonfinite);
        v.branch = nf_tm->first_nonfinite_branch;
        nf_evidence(&v, nf_tm, true);
      } else {
        ev(&v, "no sampled step named the tensor (run with --telemetry-every 1 to name it)");
      }
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               dyn ? "dynamic loss scaling with a longer growth interval or more hysteresis "
                     "(--growth-interval, --hysteresis)"
                   : "dynamic loss scaling (--loss-scale dynamic): it backs off until the "
                     "gradients fit binary16");
      if (nv < max)
        out[nv++] = v;
    }
  }

  /* ---- underflow ---- */
  if (c->lowp != AMPC_F32) {
    double worst = 0.0;
    int wb = -1;
    int64_t first_step[AMPC_BRANCH_COUNT];
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      first_step[b] = -1;
      for (int64_t i = 0; i < d->n && first_step[b] < 0; i++) {
        const ampc_tm_stats *g = &d->s[i].br[b].grad;
        if (d->s[i].telemetry && frac(g->r.underflow, g->r.count) >= k_flush_frac)
          first_step[b] = d->s[i].step;
      }
      const double f = frac(d->grad_sum[b].r.underflow, d->grad_sum[b].r.count);
      if (f > worst)
        worst = f, wb = b;
    }
    /* plateau: the last fifth improves the loss by less than a tenth of the
     * drop seen so far */
    const double l0 = mean_loss(d, 0, d->n / 10 + 1), lm = mean_loss(d, d->n * 2 / 5, d->n * 3 / 5),
                 l1 = mean_loss(d, d->n * 4 / 5, d->n);
    const bool plateau = d->n >= 10 && isfinite(l0) && isfinite(lm) && isfinite(l1) &&
                         (lm - l1) < 0.1 * fmax(l0 - lm, 0.0) + 0.005 * fabs(lm);
    if (wb >= 0 && (worst >= k_flush_frac_any || (worst >= k_flush_frac && plateau))) {
      ampc_verdict v = verdict(AMPC_VERDICT_UNDERFLOW);
      int fb = wb;
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        if (first_step[b] >= 0 && (first_step[fb] < 0 || first_step[b] < first_step[fb]))
          fb = b;
      v.branch = fb;
      v.step = first_step[fb];
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
        const ampc_tm_stats *g = &d->grad_sum[b];
        if (g->r.count)
          ev(&v,
             "%s: %.2f %% of gradient values flushed to zero (%llu of %llu), %.2f %% "
             "subnormal",
             bn[b], 100.0 * frac(g->r.underflow, g->r.count), (unsigned long long)g->r.underflow,
             (unsigned long long)g->r.count, 100.0 * frac(g->r.subnormal, g->r.count));
      }
      if (first_step[fb] >= 0)
        ev(&v, "%s underflows first (step %lld)", bn[fb], (long long)first_step[fb]);
      if (isfinite(l0) && isfinite(lm) && isfinite(l1))
        ev(&v, "loss %.4f (first tenth) -> %.4f (middle) -> %.4f (last fifth)%s", l0, lm, l1,
           plateau ? ": a plateau" : "");
      const int lsm = c->loss_scale_mode;
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               lsm == AMPC_LOSS_SCALE_NONE
                   ? "loss scaling (--loss-scale dynamic): it shifts the gradients into "
                     "binary16's range before they are stored"
               : lsm == AMPC_LOSS_SCALE_STATIC
                   ? "a larger loss scale (raise the static scale), or dynamic scaling"
               : lsm == AMPC_LOSS_SCALE_DYNAMIC
                   ? "a scale per branch or per loss (--loss-scale per-branch | per-loss) "
                     "when one branch's gradients hold the shared scale down; compare with "
                     "the FP32 twin (--baseline) to see whether the flushed values matter"
                   : "raise --max-scale if a scale sits at it; compare with the FP32 twin "
                     "(--baseline): the flushed share alone overstates the harm");
      if (nv < max)
        out[nv++] = v;
    }
  }

  /* ---- swallowed updates (not under stochastic rounding: there a weight
   * left unchanged was rounded down, and the update is kept on average; nor
   * under Kahan updates, which keep it in the compensation) ---- */
  if (c->lowp != AMPC_F32 && !c->master_weights && !c->stochastic_update) {
    int64_t upd[AMPC_BRANCH_COUNT] = {0}, sw[AMPC_BRANCH_COUNT] = {0}, tu = 0, ts = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < d->n; i++)
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
        upd[b] += d->s[i].br[b].updated, sw[b] += d->s[i].br[b].swallowed;
        tu += d->s[i].br[b].updated, ts += d->s[i].br[b].swallowed;
        if (first < 0 && frac((uint64_t)d->s[i].br[b].swallowed, (uint64_t)d->s[i].br[b].updated) >=
                             k_swallow_frac)
          first = d->s[i].step;
      }
    if (frac((uint64_t)ts, (uint64_t)tu) >= k_swallow_frac) {
      ampc_verdict v = verdict(AMPC_VERDICT_SWALLOWED);
      v.step = first;
      double worst = -1.0;
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
        if (!upd[b])
          continue;
        const double f = frac((uint64_t)sw[b], (uint64_t)upd[b]);
        ev(&v, "%s: %.1f %% of non-zero updates left the %s weight unchanged (%lld of %lld)", bn[b],
           100.0 * f, ampc_dtype_name(c->lowp), (long long)sw[b], (long long)upd[b]);
        if (f > worst)
          worst = f, v.branch = b;
      }
      ev(&v, "whole run: %.1f %% swallowed; weights are updated in %s in place",
         100.0 * frac((uint64_t)ts, (uint64_t)tu), ampc_dtype_name(c->lowp));
      /* half an ulp of the weight: 2^-11 |w| in binary16, 2^-8 |w| in bfloat16 */
      snprintf(v.safeguard, sizeof v.safeguard,
               "FP32 master weights (--master-weights on): updates below half an ulp of the "
               "weight (|w| * 2^-%d in %s) then accumulate in FP32; or --weight-update "
               "stochastic / kahan, which keep them without an FP32 copy",
               c->lowp == AMPC_BF16 ? 8 : 11, c->lowp == AMPC_BF16 ? "bfloat16" : "binary16");
      if (nv < max)
        out[nv++] = v;
    }
  }

  /* ---- accumulation error ---- */
  {
    double worst = -1.0;
    int wb = -1;
    int64_t wstep = -1;
    for (int64_t i = 0; i < d->n; i++)
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        if (d->s[i].telemetry && d->s[i].br[b].acc_err > worst)
          worst = d->s[i].br[b].acc_err, wb = b, wstep = i;
    if (wb >= 0 && worst > k_acc_err) {
      ampc_verdict v = verdict(AMPC_VERDICT_ACCUMULATION);
      const ampc_diag_branch *br = &d->s[wstep].br[wb];
      v.branch = wb, v.step = d->s[wstep].step;
      snprintf(v.tensor, sizeof v.tensor, "%s", br->acc_tensor);
      ev(&v,
         "shadow FP64 check of %s (K = %lld) at step %lld: relative error %.3g, above "
         "binary16's unit roundoff 2^-11 = 4.9e-4 (FP32 accumulation: about K * 2^-24 = %.2g "
         "at most)",
         br->acc_tensor, (long long)br->acc_k, (long long)d->s[wstep].step, worst,
         (double)br->acc_k * 5.9604644775390625e-8);
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
        double m = -1.0;
        for (int64_t i = 0; i < d->n; i++)
          if (d->s[i].telemetry && d->s[i].br[b].acc_err > m)
            m = d->s[i].br[b].acc_err;
        if (m >= 0.0)
          ev(&v, "%s: largest sampled relative error %.3g", bn[b], m);
      }
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               "FP32 accumulation in every GEMM (--accumulate fp32, as a Tensor Core's FP32 "
               "accumulator)");
      if (nv < max)
        out[nv++] = v;
    }
  }
  /* ---- FP8 saturation (fp8-mixed) ---- */
  {
    int64_t val[AMPC_BRANCH_COUNT] = {0}, sat[AMPC_BRANCH_COUNT] = {0}, fl[AMPC_BRANCH_COUNT] = {0},
            first[AMPC_BRANCH_COUNT];
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      first[b] = -1;
    for (int64_t i = 0; i < d->n; i++)
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
        const ampc_diag_branch *x = &d->s[i].br[b];
        if (d->s[i].step <= 1 || !x->fp8_values)
          continue;
        val[b] += x->fp8_values, sat[b] += x->fp8_saturated, fl[b] += x->fp8_flushed;
        if (first[b] < 0 &&
            frac((uint64_t)x->fp8_saturated, (uint64_t)x->fp8_values) >= k_fp8_sat_frac)
          first[b] = d->s[i].step;
      }
    int wb = -1;
    double worst = 0.0;
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      const double f = frac((uint64_t)sat[b], (uint64_t)val[b]);
      if (val[b] && f >= k_fp8_sat_frac && f > worst)
        worst = f, wb = b;
    }
    if (wb >= 0) {
      ampc_verdict v = verdict(AMPC_VERDICT_FP8_SATURATION);
      v.branch = wb, v.step = first[wb];
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        if (val[b])
          ev(&v,
             "%s: %lld of %lld FP8 casts after step 1 saturated at the format's largest value "
             "(%.3g %%), %lld flushed to zero (%.3g %%)",
             bn[b], (long long)sat[b], (long long)val[b],
             100.0 * frac((uint64_t)sat[b], (uint64_t)val[b]), (long long)fl[b],
             100.0 * frac((uint64_t)fl[b], (uint64_t)val[b]));
      if (first[wb] >= 0)
        ev(&v, "first step with at least %.2g %% saturated in %s: %lld", 100.0 * k_fp8_sat_frac,
           bn[wb], (long long)first[wb]);
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               "headroom for a growing amax: --fp8-margin 1 (or 2; each halves the delayed scale); "
               "else bf16-mixed");
      if (nv < max)
        out[nv++] = v;
    }
    int fb = -1;
    double fworst = 0.0;
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      const double f = frac((uint64_t)fl[b], (uint64_t)val[b]);
      if (val[b] && f >= k_fp8_flush_frac && f > fworst)
        fworst = f, fb = b;
    }
    if (fb >= 0) {
      ampc_verdict v = verdict(AMPC_VERDICT_FP8_UNDERFLOW);
      v.branch = fb;
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        if (val[b])
          ev(&v, "%s: %lld of %lld FP8 casts after step 1 flushed to zero (%.3g %%)", bn[b],
             (long long)fl[b], (long long)val[b], 100.0 * frac((uint64_t)fl[b], (uint64_t)val[b]));
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               "a larger FP8 scale: a smaller --fp8-margin, or --fp8-amax-compute most_recent / a "
               "shorter --fp8-amax-history when an old large amax holds the scale down; else "
               "bf16-mixed");
      if (nv < max)
        out[nv++] = v;
    }
  }
  if (nv == 0) {
    ampc_verdict v = verdict(AMPC_VERDICT_HEALTHY);
    ev(&v, "%lld steps, %lld skipped, %lld with non-finite gradients", (long long)d->n,
       (long long)n_skip, (long long)n_over);
    if (c->lowp != AMPC_F32) {
      uint64_t u = 0, n = 0;
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        u += d->grad_sum[b].r.underflow, n += d->grad_sum[b].r.count;
      if (n)
        ev(&v, "%.4f %% of sampled gradient values flushed to zero", 100.0 * frac(u, n));
    }
    out[nv++] = v;
  }
  return nv;
}

/* ---- a run against its FP32 twin ------------------------------------------ */

/* index of the step numbered `step` in d (steps are in order), or -1 */
static int64_t find_step(const ampc_diag *d, int64_t step) {
  int64_t lo = 0, hi = d->n - 1;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (d->s[mid].step == step)
      return mid;
    if (d->s[mid].step < step)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* step i's loss (part NULL) or its loss term `part` (NaN when absent) */
static double quantity_at(const ampc_diag_step *s, const char *part) {
  if (!part)
    return s->loss;
  for (int t = 0; t < s->n_parts; t++)
    if (!strcmp(s->part_name[t], part))
      return s->part[t];
  return (double)NAN;
}

/* The gap statistic over the last w common steps (ampc/diag.h) of the total
 * loss (part NULL) or of one loss term. */
static void window_gap(const ampc_diag *run, const ampc_diag *base, int64_t w, double margin,
                       const char *part, ampc_diag_gap *gap) {
  memset(gap, 0, sizeof *gap);
  snprintf(gap->quantity, sizeof gap->quantity, "%s", part ? part : "loss");
  gap->finite = true;
  double sd = 0.0, sd2 = 0.0, sr = 0.0, sb = 0.0;
  int64_t k = 0;
  for (int64_t i = run->n - 1; i >= 0 && k < w; i--) {
    const int64_t j = find_step(base, run->s[i].step);
    if (j < 0)
      continue;
    const double a = quantity_at(&run->s[i], part), b = quantity_at(&base->s[j], part), d = a - b;
    if (!isfinite(d)) {
      gap->finite = false;
      continue;
    }
    if (k == 0)
      gap->last_step = run->s[i].step;
    gap->first_step = run->s[i].step;
    sd += d, sd2 += d * d, sr += a, sb += b;
    k++;
  }
  gap->window = k;
  if (k < 2) {
    gap->finite = false;
    return;
  }
  gap->diff = sd / (double)k;
  const double var = (sd2 - (double)k * gap->diff * gap->diff) / (double)(k - 1);
  gap->diff_se = sqrt(var > 0.0 ? var : 0.0) / sqrt((double)k);
  gap->run_loss = sr / (double)k, gap->base_loss = sb / (double)k;
  gap->rel = gap->base_loss != 0.0 ? gap->diff / fabs(gap->base_loss) : 0.0;
  gap->significant = gap->diff > margin * fabs(gap->base_loss) && gap->diff > 3.0 * gap->diff_se;
}

ampc_status ampc_diag_compare(const ampc_diag *run, const ampc_diag *base, double margin,
                              ampc_diag_gap *gap, ampc_verdict *out, int *n_out) {
  if (!run || !base || !gap || !out || !n_out || !(margin > 0.0) || !isfinite(margin))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_diag_compare: bad arguments (margin %g)", margin);
  memset(gap, 0, sizeof *gap);
  snprintf(gap->quantity, sizeof gap->quantity, "loss");
  *n_out = 0;
  if (strcmp(base->c.precision, "32-true") != 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the baseline is a %s run; it must be the run's 32-true twin",
                     base->c.precision);
  /* twins: the same model, data, steps, batch, seed and optimizer */
  if (run->c.twin_key[0] && base->c.twin_key[0] && strcmp(run->c.twin_key, base->c.twin_key)) {
    const char *p = run->c.twin_key, *q = base->c.twin_key;
    while (*p && *p == *q)
      p++, q++;
    while (p > run->c.twin_key && p[-1] != ';')
      p--;
    const char *e = strchr(p, '=');
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "not the run's twin: the setting '%.*s' differs (the run and its 32-true "
                     "baseline need the same model, data, steps, batch, seed and optimizer)",
                     e ? (int)(e - p) : 16, p);
  }
  gap->finite = true;
  for (int64_t i = 0; i < run->n; i++) {
    const ampc_diag_step *s = &run->s[i];
    /* an overflow the scaler skipped is the scaler at work (its leading steps
     * find the scale): only non-finite values that reached the loss or the
     * weights end the comparison */
    if (!isfinite(s->loss) || ((s->overflow || s->nonfinite_grads) && !s->skipped) ||
        s->nonfinite_weights)
      gap->finite = false;
  }
  if (!gap->finite) /* no cross-run verdict: the run's own verdicts say why */
    return AMPC_OK;
  for (int64_t i = 0; i < base->n; i++)
    if (!isfinite(base->s[i].loss) || base->s[i].nonfinite_weights)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "the baseline has a non-finite loss or weights at step %lld",
                       (long long)base->s[i].step);
  if (run->n > 0 && find_step(base, run->s[run->n - 1].step) < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the baseline has no step %lld, the run's last (a cut log, or another "
                     "--log-every?)",
                     (long long)run->s[run->n - 1].step);
  /* the steps both logs have, in the run's order */
  int64_t common = 0;
  for (int64_t i = 0; i < run->n; i++)
    common += find_step(base, run->s[i].step) >= 0;
  if (common < 5)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the run and its baseline have %lld step(s) in common; at least 5 are "
                     "needed",
                     (long long)common);
  int64_t w = common / 10;
  w = w < 5 ? 5 : w;
  window_gap(run, base, w, margin, NULL, gap);
  if (!gap->finite)
    return AMPC_OK;
  if (!gap->significant && run->n > 0) {
    /* the terms of a composite loss, the largest real relative gap */
    const ampc_diag_step *last = &run->s[run->n - 1];
    for (int t = 0; t < last->n_parts; t++) {
      ampc_diag_gap g;
      window_gap(run, base, w, margin, last->part_name[t], &g);
      if (g.finite && g.significant && (!gap->significant || g.rel > gap->rel))
        *gap = g;
    }
  }
  if (!gap->significant)
    return AMPC_OK;
  /* the cause, from the run's own evidence */
  double acc = -1.0;
  int acc_b = -1;
  for (int64_t i = 0; i < run->n; i++)
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      if (run->s[i].telemetry && run->s[i].br[b].acc_err > acc)
        acc = run->s[i].br[b].acc_err, acc_b = b;
  double fl = 0.0;
  int fl_b = -1;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    const double f = frac(run->grad_sum[b].r.underflow, run->grad_sum[b].r.count);
    if (f > fl)
      fl = f, fl_b = b;
  }
  int64_t upd = 0, swl = 0;
  for (int64_t i = 0; i < run->n; i++)
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      upd += run->s[i].br[b].updated, swl += run->s[i].br[b].swallowed;
  const bool in_place = run->c.lowp != AMPC_F32 && !run->c.master_weights;
  const double swf = frac((uint64_t)swl, (uint64_t)upd);
  ampc_verdict v;
  if (acc > k_acc_err) {
    v = verdict(AMPC_VERDICT_ACCUMULATION);
    v.branch = acc_b;
    snprintf(v.safeguard, sizeof v.safeguard, "%s",
             "FP32 accumulation in every GEMM (--accumulate fp32, as a Tensor Core's FP32 "
             "accumulator)");
  } else if (fl >= k_flush_frac) {
    v = verdict(AMPC_VERDICT_UNDERFLOW);
    v.branch = fl_b;
    if (run->c.loss_scale_mode == AMPC_LOSS_SCALE_DYNAMIC)
      snprintf(v.safeguard, sizeof v.safeguard,
               "a scale per branch (--loss-scale per-branch): one dynamic scale is held down "
               "by the largest branch's gradients while the %s branch's flush",
               fl_b >= 0 ? ampc_branch_name((ampc_branch)fl_b) : "smallest");
    else
      snprintf(v.safeguard, sizeof v.safeguard, "%s",
               "loss scaling (--loss-scale dynamic), or a larger scale");
  } else if (in_place && !run->c.stochastic_update && swf >= k_swallow_frac) {
    v = verdict(AMPC_VERDICT_SWALLOWED);
    snprintf(v.safeguard, sizeof v.safeguard, "%s",
             "FP32 master weights (--master-weights on), or for bfloat16 --weight-update "
             "stochastic / kahan");
  } else {
    v = verdict(AMPC_VERDICT_PRECISION_GAP);
    snprintf(v.safeguard, sizeof v.safeguard, "%s",
             "no single safeguard is indicated: compare with --master-weights on, "
             "--accumulate fp32, --loss-scale dynamic one at a time, or bf16-mixed");
  }
  const bool total = !strcmp(gap->quantity, "loss");
  ev(&v,
     "%s%s over steps %lld-%lld: %.5g against the FP32 baseline's %.5g, %+.3g "
     "(%+.2f %%) per step +- %.2g (standard error), past the margin of %.3g %% and 3 "
     "standard errors",
     total ? "training loss" : "loss term ", total ? "" : gap->quantity, (long long)gap->first_step,
     (long long)gap->last_step, gap->run_loss, gap->base_loss, gap->diff, 100.0 * gap->rel,
     gap->diff_se, 100.0 * margin);
  if (!total)
    ev(&v, "the total loss is within the margin: the other terms dominate it");
  ev(&v, "no non-finite loss or weight in the run, and every non-finite gradient skipped");
  if (acc >= 0.0)
    ev(&v, "largest sampled GEMM relative error %.3g (%s; threshold 2^-11 = 4.9e-4)", acc,
       acc_b >= 0 ? ampc_branch_name((ampc_branch)acc_b) : "-");
  uint64_t sampled = 0;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    sampled += run->grad_sum[b].r.count;
  if (sampled)
    ev(&v,
       "largest branch share of sampled gradient values flushed to zero: %.3g %% (%s; "
       "threshold 1 %%)",
       100.0 * fl, fl_b >= 0 ? ampc_branch_name((ampc_branch)fl_b) : "-");
  else
    ev(&v, "no rounding telemetry in the run (the model does not sample it, or "
           "--telemetry-every 0): flushing not measured");
  if (in_place)
    ev(&v, "%.3g %% of the non-zero updates left the 16-bit weight unchanged%s", 100.0 * swf,
       run->c.stochastic_update ? " (kept by stochastic rounding or the Kahan compensation)" : "");
  out[0] = v;
  *n_out = 1;
  return AMPC_OK;
}

bool ampc_verdict_count_based(ampc_verdict_kind k) {
  return k != AMPC_VERDICT_HEALTHY && k != AMPC_VERDICT_PRECISION_GAP &&
         k != AMPC_VERDICT_NONFINITE_INDEPENDENT && (unsigned)k < AMPC_VERDICT_COUNT;
}
