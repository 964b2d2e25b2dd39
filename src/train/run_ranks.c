/*
 * src/train/run_ranks.c: what the ranks of a data-parallel run agree on after
 * each step: the FP8 casts' amax (maximised over the ranks, as Transformer
 * Engine reduces amax over the data-parallel group) and counts, the rounding
 * telemetry of a sampled iteration, and the replicas' check (the scaler's
 * state every step, the weights on request). One process: nothing to do.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "numeric/numeric.h"
#include "run_internal.h"

/* fp8-mixed, after each optimizer iteration (skipped or not): the amax of
 * every cast maximised over the ranks (so every rank takes the same scales,
 * as Transformer Engine reduces amax over the data-parallel group), the
 * counts summed, then the next scales (ampc_fp8_sites_update). */
ampc_status run_fp8_end_step(ampc_run *R) {
  ampc_fp8_sites *S = R->model.fp8;
  if (!S)
    return AMPC_OK;
  ampc_fp8_sites_take_counts(S, R->fp8_values, R->fp8_sat, R->fp8_flush);
  const ampc_comm *c = R->accum.comm;
  if (c && c->size > 1) {
    if (!R->fp8_amax)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "fp8: no amax buffer");
    for (int i = 0; i < S->n; i++) {
      R->fp8_amax[3 * i] = (double)S->lin[i].x.amax;
      R->fp8_amax[3 * i + 1] = (double)S->lin[i].w.amax;
      R->fp8_amax[3 * i + 2] = (double)S->lin[i].dy.amax;
    }
    AMPC_TRY(c->max_f64(c->user, R->fp8_amax, 3 * S->n));
    for (int i = 0; i < S->n; i++) {
      S->lin[i].x.amax = (float)R->fp8_amax[3 * i];
      S->lin[i].w.amax = (float)R->fp8_amax[3 * i + 1];
      S->lin[i].dy.amax = (float)R->fp8_amax[3 * i + 2];
    }
    uint64_t u[3 * AMPC_BRANCH_COUNT];
    memcpy(u, R->fp8_values, sizeof R->fp8_values);
    memcpy(u + AMPC_BRANCH_COUNT, R->fp8_sat, sizeof R->fp8_sat);
    memcpy(u + 2 * AMPC_BRANCH_COUNT, R->fp8_flush, sizeof R->fp8_flush);
    AMPC_TRY(c->sum_u64(c->user, u, 3 * AMPC_BRANCH_COUNT));
    memcpy(R->fp8_values, u, sizeof R->fp8_values);
    memcpy(R->fp8_sat, u + AMPC_BRANCH_COUNT, sizeof R->fp8_sat);
    memcpy(R->fp8_flush, u + 2 * AMPC_BRANCH_COUNT, sizeof R->fp8_flush);
  }
  return ampc_fp8_sites_update(S);
}

/* Every rank must hold the same state after a step; a difference (a
 * non-deterministic reduction, a rank that skipped alone) ends the run
 * rather than letting replicas drift apart. The scaler's state every step,
 * the weights when check_replicas is set. */
ampc_status run_check_replicas(ampc_run *R, const ampc_step_info *info) {
  const ampc_comm *c = R->accum.comm;
  if (!c)
    return AMPC_OK;
  const ampc_trainer *T = &R->T;
  const double st[6] = {(double)T->scaler.scale,      (double)T->scaler.growth_tracker,
                        (double)T->scaler.skip_count, (double)T->step,
                        (double)info->skipped,        (double)info->nonfinite};
  char what[96];
  snprintf(what, sizeof what, "the loss scaler's state after iteration %lld",
           (long long)info->iteration);
  AMPC_TRY(c->check_same(c->user, st, sizeof st, what));
  if (R->rc.check_replicas) {
    if (R->rc.device != AMPC_DEVICE_CPU) /* the host copies the check reads */
      AMPC_TRY(ampc_trainer_sync_host(&R->T));
    const ampc_params *P = &T->params;
    snprintf(what, sizeof what, "the weights after iteration %lld", (long long)info->iteration);
    AMPC_TRY(c->check_same(c->user, P->w, (size_t)P->total * ampc_dtype_size(P->wdt), what));
    if (P->master) {
      snprintf(what, sizeof what, "the master weights after iteration %lld",
               (long long)info->iteration);
      AMPC_TRY(c->check_same(c->user, P->master, (size_t)P->total * sizeof(float), what));
    }
  }
  return AMPC_OK;
}

/* The telemetry of a sampled iteration over all ranks: counts summed, the
 * largest |x| and accumulation errors the maxima (the first non-finite
 * tensor and the accumulation tensors stay rank 0's). */
ampc_status run_reduce_telemetry(ampc_run *R) {
  const ampc_comm *c = R->accum.comm;
  if (!c)
    return AMPC_OK;
  ampc_telemetry *t = R->telemetry;
  enum { PER = 7 + AMPC_TM_BINS, NS = AMPC_TM_PHASES * AMPC_BRANCH_COUNT };
  uint64_t *u = malloc(sizeof(uint64_t) * PER * NS);
  double mx[NS + AMPC_BRANCH_COUNT];
  if (!u)
    return ampc_fail(AMPC_ERR_NOMEM, "telemetry: out of memory");
  for (int i = 0; i < NS; i++) {
    ampc_tm_stats *s = &t->s[i / AMPC_BRANCH_COUNT][i % AMPC_BRANCH_COUNT];
    uint64_t *o = u + i * PER;
    o[0] = s->r.count, o[1] = s->r.underflow, o[2] = s->r.subnormal, o[3] = s->r.overflow;
    o[4] = s->r.inf, o[5] = s->r.nan, o[6] = s->zeros;
    memcpy(o + 7, s->hist, sizeof s->hist);
    mx[i] = (double)s->r.max_abs;
  }
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    mx[NS + b] = t->acc_err[b];
  ampc_status st = c->sum_u64(c->user, u, PER * NS);
  if (st == AMPC_OK)
    st = c->max_f64(c->user, mx, NS + AMPC_BRANCH_COUNT);
  if (st == AMPC_OK)
    for (int i = 0; i < NS; i++) {
      ampc_tm_stats *s = &t->s[i / AMPC_BRANCH_COUNT][i % AMPC_BRANCH_COUNT];
      const uint64_t *o = u + i * PER;
      s->r.count = o[0], s->r.underflow = o[1], s->r.subnormal = o[2], s->r.overflow = o[3];
      s->r.inf = o[4], s->r.nan = o[5], s->zeros = o[6];
      memcpy(s->hist, o + 7, sizeof s->hist);
      s->r.max_abs = (float)mx[i];
    }
  /* what one process would keep of its micro-batches in order: the first
   * (lowest-rank) holder of each branch's largest error names its tensor,
   * and the first rank that met a non-finite value names that tensor */
  /* an entry: the name (64 bytes), then k, or branch, phase and the
   * non-finite tensor's max |x| bits, dtype and samples */
  enum { NB = AMPC_BRANCH_COUNT, NAME = 64 / 8, EXTRA = 7 + AMPC_TM_SAMPLES, ENT = NAME + EXTRA };
  double who[NB + 1];
  for (int b = 0; b < NB; b++)
    who[b] = t->acc_err[b] >= 0.0 && t->acc_err[b] == mx[NS + b] ? -(double)c->rank : -1e9;
  who[NB] = t->first_nonfinite_branch >= 0 ? -(double)c->rank : -1e9;
  if (st == AMPC_OK)
    st = c->max_f64(c->user, who, NB + 1);
  uint64_t names[(NB + 1) * ENT];
  memset(names, 0, sizeof names);
  for (int b = 0; b <= NB; b++) {
    if (who[b] != -(double)c->rank)
      continue;
    uint64_t *o = names + b * ENT;
    if (b < NB) {
      memcpy(o, t->acc_tensor[b], 64);
      o[NAME] = (uint64_t)t->acc_k[b];
    } else {
      memcpy(o, t->first_nonfinite, 64);
      o[NAME] = (uint64_t)t->first_nonfinite_branch,
      o[NAME + 1] = (uint64_t)t->first_nonfinite_phase;
      o[NAME + 2] = (uint64_t)ampc_f32_bits(t->first_nonfinite_max_abs);
      o[NAME + 3] = (uint64_t)t->first_nonfinite_dt;
      o[NAME + 4] = (uint64_t)t->n_nf_samples, o[NAME + 5] = (uint64_t)t->nf_samples_total;
      o[NAME + 6] = (uint64_t)t->nf_samples_of;
      for (int i = 0; i < t->n_nf_samples; i++)
        o[NAME + 7 + i] = (uint64_t)t->nf_samples[i];
    }
  }
  if (st == AMPC_OK)
    st = c->sum_u64(c->user, names, (NB + 1) * ENT);
  if (st == AMPC_OK) {
    for (int b = 0; b <= NB; b++) {
      const uint64_t *o = names + b * ENT;
      if (who[b] < -1e8)
        continue; /* no rank has one */
      if (b < NB) {
        t->acc_err[b] = mx[NS + b];
        memcpy(t->acc_tensor[b], o, 64);
        t->acc_tensor[b][63] = '\0';
        t->acc_k[b] = (int64_t)o[NAME];
      } else {
        memcpy(t->first_nonfinite, o, 64);
        t->first_nonfinite[63] = '\0';
        t->first_nonfinite_branch = (int)o[NAME], t->first_nonfinite_phase = (int)o[NAME + 1];
        t->first_nonfinite_max_abs = ampc_bits_f32((uint32_t)o[NAME + 2]);
        t->first_nonfinite_dt = (ampc_dtype)o[NAME + 3];
        t->n_nf_samples = (int)o[NAME + 4], t->nf_samples_total = (int64_t)o[NAME + 5];
        t->nf_samples_of = (int64_t)o[NAME + 6];
        for (int i = 0; i < t->n_nf_samples && i < AMPC_TM_SAMPLES; i++)
          t->nf_samples[i] = (int64_t)o[NAME + 7 + i];
      }
    }
  }
  free(u);
  return st;
}
