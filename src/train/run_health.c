/*
 * src/train/run_health.c: how a run watches itself: what the diagnosis sees
 * of a step (src/diag/ knows no trainer), the diagnosis accumulator of a
 * resumed run, and the live stall check (ampc_run_config.on_stall).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "run_internal.h"

/* ---- what the diagnosis sees of a step (src/diag/ knows no trainer) ---------------- */

void ampc_diag_config_from(ampc_diag_config *c, const ampc_trainer *T) {
  memset(c, 0, sizeof *c);
  snprintf(c->precision, sizeof c->precision, "%s", ampc_precision_name(T->amp.precision));
  c->lowp = T->amp.lowp;
  c->master_weights = T->amp.master_weights;
  c->loss_scale_mode = (int)T->amp.scaler.mode;
  c->min_scale = (double)T->amp.scaler.min_scale;
  c->accumulate = T->amp.accumulate;
  c->stochastic_update = T->amp.weight_update != AMPC_UPDATE_NEAREST;
}

void ampc_diag_step_fill(ampc_diag_step *s, const ampc_trainer *T, const ampc_step_info *info,
                         double loss, const ampc_telemetry *tm) {
  memset(s, 0, sizeof *s);
  s->step = info->iteration;
  s->loss = loss;
  s->loss_scale = (double)info->loss_scale;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    s->branch_scale[b] = (double)info->branch_scale[b];
  s->overflow = info->overflow, s->skipped = info->skipped;
  s->nonfinite_grads = info->nonfinite;
  s->nonfinite_weights = info->nonfinite_weights;
  s->first_nonfinite_branch = s->first_nonfinite_phase = -1;
  s->first_nonfinite_max_abs = -1.0;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    s->br[b].acc_err = -1.0;
  for (int i = 0; i < T->params.count; i++) {
    const int b = (int)T->params.p[i].branch;
    if (b < 0 || b >= AMPC_BRANCH_COUNT)
      continue;
    s->br[b].parameters += T->params.p[i].numel;
    if (!info->skipped && T->telemetry) {
      s->br[b].updated += T->swallow[i].updated;
      s->br[b].swallowed += T->swallow[i].swallowed;
      s->br[b].would_swallow += T->swallow[i].would_swallow;
    }
  }
  if (tm) {
    s->telemetry = true;
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      s->br[b].grad = tm->s[AMPC_TM_GRAD][b];
      s->br[b].act = tm->s[AMPC_TM_ACT][b];
      s->br[b].acc_err = tm->acc_err[b];
      s->br[b].acc_k = tm->acc_k[b];
      snprintf(s->br[b].acc_tensor, sizeof s->br[b].acc_tensor, "%s", tm->acc_tensor[b]);
    }
    snprintf(s->first_nonfinite, sizeof s->first_nonfinite, "%s", tm->first_nonfinite);
    s->first_nonfinite_branch = tm->first_nonfinite_branch;
    s->first_nonfinite_phase = tm->first_nonfinite_phase;
    if (tm->first_nonfinite_branch >= 0) {
      s->first_nonfinite_max_abs = (double)tm->first_nonfinite_max_abs;
      if ((unsigned)tm->first_nonfinite_dt < AMPC_DTYPE_COUNT)
        snprintf(s->first_nonfinite_dtype, sizeof s->first_nonfinite_dtype, "%s",
                 ampc_dtype_name(tm->first_nonfinite_dt));
    }
    /* batch positions here; the run turns them into its samples' names */
    s->n_nf_samples = tm->n_nf_samples;
    for (int i = 0; i < tm->n_nf_samples; i++)
      s->nf_sample[i] = tm->nf_samples[i];
    s->nf_samples_total = tm->nf_samples_total, s->nf_samples_of = tm->nf_samples_of;
  }
}

/* The diagnosis accumulator: a resumed run's log (when it exists and reads)
 * supplies the steps before `iteration`, so the summary diagnoses the whole
 * run; else a fresh one. */
ampc_diag *run_diag_start(const ampc_diag_config *c, const char *resumed_log, int64_t iteration) {
  ampc_diag *d = NULL;
  if (resumed_log && iteration > 0 && ampc_diag_read_log(resumed_log, &d) == AMPC_OK) {
    ampc_diag_truncate(d, iteration + 1);
    return d;
  }
  return ampc_diag_create(c);
}

/* the step's record: the trainer's, the loss terms, the FP8 counts */
void run_diag_step(ampc_diag_step *ds, const ampc_run *R, const ampc_step_info *info,
                   const ampc_losses *mean, bool sampled) {
  ampc_diag_step_fill(ds, &R->T, info, (double)mean->total, sampled ? R->telemetry : NULL);
  for (int i = 0; i < mean->n_parts && ds->n_parts < AMPC_DIAG_PARTS; i++)
    if (!strncmp(mean->part_name[i], "loss_", 5) &&
        strlen(mean->part_name[i]) < AMPC_DIAG_PART_NAME) {
      snprintf(ds->part_name[ds->n_parts], AMPC_DIAG_PART_NAME, "%s", mean->part_name[i]);
      ds->part[ds->n_parts++] = (double)mean->part[i];
    }
  for (int b = 0; R->model.fp8 && b < AMPC_BRANCH_COUNT; b++) {
    ds->br[b].fp8_values = (int64_t)R->fp8_values[b];
    ds->br[b].fp8_saturated = (int64_t)R->fp8_sat[b];
    ds->br[b].fp8_flushed = (int64_t)R->fp8_flush[b];
  }
}

/* The live stall check after a step (ampc_run_config.on_stall): the
 * reason, or NULL. floor_run and bad_loss count consecutive steps. */
const char *run_stall_check(const ampc_run *R, stall_state *ss, const ampc_step_info *info,
                            float loss) {
  const ampc_scaler_config *sc = &R->T.amp.scaler;
  const int64_t n = R->rc.stall_steps > 0 ? R->rc.stall_steps : (int64_t)sc->hysteresis + 2;
  /* a static scale never moves: each overflow there is as final */
  bool floor_branch = false; /* per-branch: an overflowing branch already at the floor */
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    floor_branch = floor_branch ||
                   ((info->branch_nonfinite & (1u << b)) && info->branch_scale[b] <= sc->min_scale);
  const bool at_floor =
      sc->mode == AMPC_LOSS_SCALE_STATIC ||
      (sc->mode == AMPC_LOSS_SCALE_DYNAMIC && info->loss_scale <= sc->min_scale) ||
      ((sc->mode == AMPC_LOSS_SCALE_PER_BRANCH || sc->mode == AMPC_LOSS_SCALE_PER_LOSS) &&
       floor_branch);
  ss->floor_run = info->overflow && at_floor ? ss->floor_run + 1 : 0;
  ss->bad_loss = isfinite(loss) ? 0 : ss->bad_loss + 1;
  if (info->nonfinite_weights > 0)
    snprintf(ss->reason, sizeof ss->reason,
             "the weights hold %lld non-finite values after step %lld: no loss scale can bring "
             "them back",
             (long long)info->nonfinite_weights, (long long)info->iteration);
  else if (ss->floor_run >= n)
    snprintf(ss->reason, sizeof ss->reason,
             "%lld consecutive steps overflowed with the loss scale at its floor (%g): every "
             "further step would be skipped",
             (long long)ss->floor_run, (double)info->loss_scale);
  else if (ss->bad_loss >= n)
    snprintf(ss->reason, sizeof ss->reason,
             "the loss has been non-finite for %lld consecutive steps (the forward pass does not "
             "see the loss scale)",
             (long long)ss->bad_loss);
  else
    return NULL;
  return ss->reason;
}
