/*
 * src/train/run_ranks.c: what the ranks of a data-parallel run agree on: at
 * the start, their settings and weights (run_check_start); after each step: the FP8 casts' amax
 * (maximised over the ranks, as Transformer Engine reduces amax over the data-parallel group) and
 * counts, the rounding telemetry of a sampled iteration, and the replicas' check (the scaler's
 * state every step, the weights on request). One process: nothing to do.
 */
#include "internal.h"

#include <stdio.h>
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
    if (P->master && P->shard_n == P->total) { /* a shard differs by design */
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

/* ---- ranks started alike ------------------------------------------------------------- */

/* the flag that sets a config field (its dotted path in the config line):
 * the field's last name with '-' for '_', but for these */
static const char *flag_of(const char *path, char *buf, size_t cap) {
  static const char *const map[][2] = {
      {"precision", "--precision"},
      {"weights_dtype", "--precision"},
      {"grads_dtype", "--precision"},
      {"optimizer_state_dtype", "--precision"},
      {"loss_scale.mode", "--loss-scale"},
      {"optimizer.name", "--optimizer"},
      {"optimizer.warmup_steps", "--warmup"},
      {"optimizer.total_steps", "--steps"},
      {"parameters", "--model"},
      {"run.held_out_style", "--hold-out-style"},
      {"run.data_parallel.reduce", "--allreduce"},
      {"run.data_parallel.zero", "--zero"},
      {"run.data_parallel.overlap", "--overlap"},
      {"run.data_parallel.negatives", "--global-negatives"},
      {"run.data_parallel.shard", "--batch"},
      {"run.train_samples", "--data"},
      {"run.train_concepts", "--data"},
      {"run.vocab", "--data"},
      {"run.seq_len", "--data"},
      {"run.classes", "--data"},
      {"collectives.eval", "--no-eval"},
      {"collectives.on_stall", "--on-stall"},
      {"collectives.stall_steps", "--on-stall"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(path, map[i][0]))
      return map[i][1];
  if (!strncmp(path, "parameter_bytes.", 16))
    return "--model";
  const char *last = strrchr(path, '.');
  last = last ? last + 1 : path;
  snprintf(buf, cap, "--%s", last);
  for (char *p = buf; *p; p++)
    *p = *p == '_' ? '-' : *p;
  return buf;
}

/* the config's leaves in order, as "path" and "value" (JSON text), but the
 * ones that may differ between ranks (the thread count, the checkpoint's
 * path: the weights are compared instead, the warnings) */
typedef struct leaf {
  char path[96];
  char *value;
} leaf;

static int collect(const cJSON *o, const char *prefix, leaf *out, int n, int max) {
  for (const cJSON *it = o->child; it && n >= 0; it = it->next) {
    char path[96];
    snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", it->string ? it->string : "");
    if (!strcmp(path, "event") || !strcmp(path, "warnings") || !strcmp(path, "run.threads") ||
        !strcmp(path, "run.resumed_from") || !strcmp(path, "run.activation_bytes"))
      continue;
    if (cJSON_IsObject(it)) {
      n = collect(it, path, out, n, max);
      continue;
    }
    if (n >= max)
      return -1;
    snprintf(out[n].path, sizeof out[n].path, "%s", path);
    if (!(out[n].value = cJSON_PrintUnformatted(it)))
      return -1;
    n++;
  }
  return n;
}

/* fields that follow from others (the preset's dtypes, the model's sizes,
 * the schedule's defaults, the shard): compared last, so that the field a
 * flag set is the one named */
static bool derived(const char *path) {
  static const char *const d[] = {"weights_dtype",
                                  "grads_dtype",
                                  "optimizer_state_dtype",
                                  "master_weights",
                                  "parameters",
                                  "optimizer.warmup_steps",
                                  "optimizer.total_steps",
                                  "run.data_parallel.shard",
                                  "run.loss_multiplier"};
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
    if (!strcmp(path, d[i]))
      return true;
  return !strncmp(path, "parameter_bytes.", 16);
}

ampc_status run_check_start(ampc_run *R) {
  const ampc_comm *c = R->rc.comm;
  if (!c || c->size < 2)
    return AMPC_OK;
  enum { MAX_LEAVES = 256 };
  cJSON *cfg = run_config_object(R);
  /* settings outside the log's config line that decide which collectives a
   * rank calls (a rank stopping early, checking replicas or sampling
   * telemetry alone would wait forever or mismatch its messages) */
  cJSON *more = cfg ? cJSON_AddObjectToObject(cfg, "collectives") : NULL;
  if (more) {
    const ampc_run_config *rc = &R->rc;
    cJSON_AddNumberToObject(more, "stop_at", (double)rc->stop_at);
    cJSON_AddBoolToObject(more, "check_replicas", rc->check_replicas);
    cJSON_AddNumberToObject(more, "telemetry_every", (double)rc->telemetry_every);
    cJSON_AddNumberToObject(more, "eval_every", (double)rc->eval_every);
    cJSON_AddBoolToObject(more, "eval", rc->eval);
    cJSON_AddNumberToObject(more, "save_every", (double)rc->save_every);
    cJSON_AddNumberToObject(more, "log_every", (double)rc->log_every);
    cJSON_AddBoolToObject(more, "anomaly_replay", rc->anomaly_replay);
    cJSON_AddNumberToObject(more, "on_stall", (double)rc->on_stall);
    cJSON_AddNumberToObject(more, "stall_steps", (double)rc->stall_steps);
  }
  leaf *lv = calloc(MAX_LEAVES, sizeof *lv);
  char *keys = NULL;
  ampc_status st = AMPC_OK;
  const int n = cfg && lv ? collect(cfg, "", lv, 0, MAX_LEAVES) : -1;
  if (n < 0)
    st = ampc_fail(AMPC_ERR_NOMEM, "the ranks' start check: out of memory");
  /* the fields first (the same count of checks follows on every rank),
   * then the whole config, then field by field only when it differs */
  size_t kb = 1, vb = 1;
  for (int i = 0; i < n; i++)
    kb += strlen(lv[i].path) + 1, vb += strlen(lv[i].path) + strlen(lv[i].value) + 2;
  if (st == AMPC_OK && !(keys = malloc(kb > vb ? kb : vb)))
    st = ampc_fail(AMPC_ERR_NOMEM, "the ranks' start check: out of memory");
  if (st == AMPC_OK) {
    size_t off = 0;
    for (int i = 0; i < n; i++)
      off += (size_t)sprintf(keys + off, "%s\n", lv[i].path);
    if (c->check_same(c->user, keys, off, "the config's fields") != AMPC_OK)
      st = ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the %d ranks were started with different settings: their runs have "
                     "different fields (a different --model, --data or --device?); start every "
                     "rank with the same flags",
                     c->size);
  }
  bool same = false;
  if (st == AMPC_OK) {
    size_t off = 0;
    for (int i = 0; i < n; i++)
      off += (size_t)sprintf(keys + off, "%s=%s\n", lv[i].path, lv[i].value);
    same = c->check_same(c->user, keys, off, "the config") == AMPC_OK;
  }
  for (int k = 0; st == AMPC_OK && !same && k < 2 * n; k++) {
    const int i = k % n;
    if ((k < n) == derived(lv[i].path) ||
        c->check_same(c->user, lv[i].value, strlen(lv[i].value), lv[i].path) == AMPC_OK)
      continue;
    char buf[128];
    st = ampc_fail(AMPC_ERR_INVALID_ARG,
                   "the %d ranks were started with different settings: %s differs (%s is %s on "
                   "rank %d, not on every rank); start every rank with the same flags and data",
                   c->size, flag_of(lv[i].path, buf, sizeof buf), lv[i].path, lv[i].value, c->rank);
  }
  /* the weights they start from (--seed, --resume) */
  if (st == AMPC_OK) {
    if (R->rc.device != AMPC_DEVICE_CPU)
      st = ampc_trainer_sync_host(&R->T);
    const ampc_params *P = &R->T.params;
    if (st == AMPC_OK &&
        (c->check_same(c->user, P->w, (size_t)P->total * ampc_dtype_size(P->wdt), "w") != AMPC_OK ||
         (P->master && c->check_same(c->user, P->master, (size_t)P->total * sizeof(float),
                                     "master") != AMPC_OK)))
      st = ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the %d ranks start from different weights (a different --seed, or "
                     "--resume from different checkpoints): start every rank with the same flags",
                     c->size);
  }
  for (int i = 0; lv && i < MAX_LEAVES; i++)
    cJSON_free(lv[i].value);
  free(lv), free(keys);
  cJSON_Delete(cfg);
  return st;
}
