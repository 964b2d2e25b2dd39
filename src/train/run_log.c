/*
 * src/train/run_log.c: the training run's metrics log (DESIGN.md section 4,
 * JSON Lines, field names as before): the config line, the step lines, the
 * summary (with its memory account), and the cut of a resumed run's log
 * back to its checkpoint. A model kind adds its own part of the config,
 * eval and summary lines (run_kind, src/train/model.c). cJSON writes the
 * JSON; every line is flushed, so `tail -f` and a killed run keep every
 * finished step.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/io.h"
#include "ampc/report.h"
#include "ampc/gemm.h"
#include "run_internal.h"

cJSON *run_parse_owned(char *txt) {
  cJSON *o = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  return o;
}

cJSON *run_config_object(const ampc_run *R) {
  cJSON *cj = run_parse_owned(ampc_trainer_config_json(&R->T));
  cJSON *run_o = cJSON_CreateObject();
  if (!cj || !run_o) {
    cJSON_Delete(cj);
    cJSON_Delete(run_o);
    return NULL;
  }
  const ampc_run_config *rc = &R->rc;
  R->kind->log_config(run_o, R);
  cJSON_AddNumberToObject(run_o, "steps", (double)rc->steps);
  cJSON_AddNumberToObject(run_o, "batch", (double)rc->batch);
  cJSON_AddNumberToObject(run_o, "micro_batches", (double)rc->micro_batches);
  cJSON_AddNumberToObject(run_o, "loss_multiplier", (double)R->accum.loss_multiplier);
  cJSON_AddNumberToObject(run_o, "seed", (double)rc->seed);
  cJSON_AddNumberToObject(run_o, "threads", (double)ampc_get_num_threads());
  cJSON_AddStringToObject(run_o, "resumed_from", rc->resume_path ? rc->resume_path : "");
  cJSON_AddStringToObject(run_o, "fake_quant", rc->fake_quant_int8 ? "int8" : "none");
  /* data parallelism: the ranks, how gradients are summed, and which
   * samples the contrastive loss contrasts (each rank's own shard) */
  cJSON *dp = cJSON_AddObjectToObject(run_o, "data_parallel");
  cJSON_AddNumberToObject(dp, "ranks", (double)R->size);
  cJSON_AddStringToObject(dp, "reduce", rc->reduce == AMPC_REDUCE_F32 ? "f32" : "working");
  cJSON_AddNumberToObject(dp, "zero", rc->zero);
  cJSON_AddStringToObject(dp, "overlap", rc->overlap ? "on" : "off");
  if (R->T.zero) { /* this rank's part of the master weights and optimizer state */
    cJSON_AddNumberToObject(dp, "shard_first", (double)R->T.params.shard_lo);
    cJSON_AddNumberToObject(dp, "shard_elements", (double)R->T.params.shard_n);
  }
  /* where the ranks' gradient sums run: NCCL on the GPU's buffers, MPI on
   * host buffers ("none": one process; "device": the device sums on
   * another device, a test's) */
  const ampc_comm *cm = R->accum.comm;
  const bool dev_sums = cm && cm->sum_device_f32_ordered && rc->device != AMPC_DEVICE_CPU;
  cJSON_AddStringToObject(dp, "allreduce",
                          !cm                              ? "none"
                          : !dev_sums                      ? "host (MPI)"
                          : rc->device == AMPC_DEVICE_CUDA ? "nccl"
                                                           : "device");
  cJSON_AddNumberToObject(dp, "shard", (double)(rc->batch / R->size));
  /* what the contrastive loss contrasts: each rank's shard, or the global
   * batch (the hard negatives of the matching head stay in the shard) */
  cJSON_AddStringToObject(dp, "negatives", rc->global_negatives ? "global" : "shard");
  cJSON_AddStringToObject(run_o, "device", ampc_device_name(rc->device));
  /* what decides the device's bits beyond the preset (e.g. tuned GEMMs pick
   * their algorithms by timing: not bit-reproducible), under its name */
  cJSON *ck = NULL;
  for (int i = 0; i < ampc_device_setting_count(rc->device); i++) {
    const char *sn;
    bool on, logged;
    if (ampc_device_setting(rc->device, i, &sn, &on, &logged) != AMPC_OK || !logged)
      continue;
    if (!ck)
      ck = cJSON_AddObjectToObject(run_o, ampc_device_name(rc->device));
    cJSON_AddBoolToObject(ck, sn, on);
  }
  cJSON_AddItemToObject(cj, "run", run_o);
  char warns[16][256];
  const int nw = ampc_run_warnings(R, warns, 16);
  cJSON *wj = cJSON_AddArrayToObject(cj, "warnings");
  for (int k = 0; k < nw && k < 16; k++)
    cJSON_AddItemToArray(wj, cJSON_CreateString(warns[k]));
  /* "event" first, then the resolved settings */
  cJSON *first = cJSON_CreateObject();
  cJSON_AddStringToObject(first, "event", "config");
  for (cJSON *it = cj->child; it; it = it->next)
    cJSON_AddItemToObject(first, it->string, cJSON_Duplicate(it, 1));
  cJSON_Delete(cj);
  return first;
}

char *ampc_run_config_json(const ampc_run *R) {
  cJSON *o = R ? run_config_object(R) : NULL;
  char *s = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return s;
}

/* one JSON object as one log line (and free it); flushed per line, so `tail -f`
 * and a killed run keep every finished step */
ampc_status run_log_line(FILE *f, const char *path, cJSON *o) {
  char *s = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  const bool ok = s && fprintf(f, "%s\n", s) > 0 && fflush(f) == 0;
  cJSON_free(s);
  return ok ? AMPC_OK : ampc_fail(AMPC_ERR_IO, "cannot write log file %s", path);
}

cJSON *run_step_object(const ampc_step_info *info, const ampc_losses *L, double ms,
                       const ampc_diag_step *ds, ampc_loss_scale_mode mode, const ampc_model *m) {
  const bool per_branch = mode == AMPC_LOSS_SCALE_PER_BRANCH;
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "event", "step");
  cJSON_AddNumberToObject(o, "step", (double)info->iteration);
  cJSON_AddNumberToObject(o, "optimizer_step", (double)info->step);
  cJSON_AddNumberToObject(o, "loss", (double)L->total);
  cJSON_AddNumberToObject(o, "loss_scale", (double)info->loss_scale);
  if (per_branch) { /* --loss-scale per-branch: each branch's scale and overflow */
    cJSON *bs = cJSON_AddObjectToObject(o, "branch_scales");
    cJSON *bo = cJSON_AddArrayToObject(o, "overflow_branches");
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      if (ds->br[b].parameters == 0) /* a branch the model does not have */
        continue;
      cJSON_AddNumberToObject(bs, ampc_branch_name((ampc_branch)b), (double)info->branch_scale[b]);
      if (info->branch_nonfinite & (1u << b))
        cJSON_AddItemToArray(bo, cJSON_CreateString(ampc_branch_name((ampc_branch)b)));
    }
  }
  if (mode == AMPC_LOSS_SCALE_PER_LOSS) { /* each loss term's scale and overflow */
    cJSON *ts = cJSON_AddObjectToObject(o, "loss_scales");
    cJSON *to = cJSON_AddArrayToObject(o, "overflow_terms");
    for (int t = 0; t < m->n_terms && t < AMPC_BRANCH_COUNT; t++) {
      if (!m->term_on[t])
        continue;
      cJSON_AddNumberToObject(ts, m->term_name[t], (double)info->branch_scale[t]);
      if (info->branch_nonfinite & (1u << t))
        cJSON_AddItemToArray(to, cJSON_CreateString(m->term_name[t]));
    }
  }
  cJSON_AddBoolToObject(o, "overflow", info->overflow);
  cJSON_AddBoolToObject(o, "skipped", info->skipped);
  cJSON_AddNumberToObject(o, "growth_tracker", info->growth_tracker);
  cJSON_AddNumberToObject(o, "nonfinite_grads", (double)info->nonfinite);
  cJSON_AddNumberToObject(o, "grad_norm", info->grad_norm);
  cJSON_AddNumberToObject(o, "clip_coef", (double)info->clip_coef);
  cJSON_AddNumberToObject(o, "lr", (double)info->lr);
  cJSON_AddNumberToObject(o, "ms", ms);
  cJSON *d = run_parse_owned(ampc_diag_step_json(ds));
  if (!d) {
    cJSON_Delete(o);
    return NULL;
  }
  while (d->child) {
    cJSON *it = cJSON_DetachItemViaPointer(d, d->child);
    cJSON_AddItemToObject(o, it->string, it);
  }
  cJSON_Delete(d);
  for (int i = 0; i < L->n_parts; i++)
    cJSON_AddNumberToObject(o, L->part_name[i], (double)L->part[i]);
  return o;
}

/* {"event":"stall"}: why, the policy, the diagnosis so far */
cJSON *run_stall_object(const ampc_run *R, int64_t iteration, const char *why) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "stall");
  cJSON_AddNumberToObject(o, "step", (double)iteration);
  cJSON_AddStringToObject(o, "reason", why);
  cJSON_AddStringToObject(o, "policy", R->rc.on_stall == AMPC_STALL_STOP ? "stop" : "warn");
  cJSON *dj = run_parse_owned(ampc_diag_json(R->diag));
  if (dj)
    cJSON_AddItemToObject(o, "diagnosis", dj);
  return o;
}

/* {"event":"eval"} with the model kind's metrics */
cJSON *run_eval_object(const ampc_run *R, int64_t iteration, const ampc_eval *e) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "eval");
  cJSON_AddNumberToObject(o, "step", (double)iteration);
  R->kind->log_eval(cJSON_AddObjectToObject(o, "metrics"), e);
  return o;
}

/* {"event":"save_skipped"}: the last good checkpoint is kept */
cJSON *run_interrupted_object(int64_t iteration) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "interrupted");
  cJSON_AddNumberToObject(o, "step", (double)iteration);
  return o;
}

cJSON *run_save_skipped_object(int64_t iteration) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "save_skipped");
  cJSON_AddNumberToObject(o, "step", (double)iteration);
  cJSON_AddStringToObject(o, "reason",
                          "the step overflowed at the scale floor or its loss or weights "
                          "are non-finite: the last checkpoint is kept");
  return o;
}

void run_add_mm_metrics(cJSON *o, const char *name, const ampc_mmodel_metrics *m) {
  if (m->samples == 0) /* a split the data does not have */
    return;
  cJSON *x = run_parse_owned(ampc_mmodel_metrics_json(m));
  if (x)
    cJSON_AddItemToObject(o, name, x);
}

/* the summary's "memory": the parameter roles as allocated, the model's
 * activation and workspace bytes, their total, and the peak RSS */
void run_add_memory(cJSON *summary, const ampc_run *R) {
  const ampc_trainer *T = &R->T;
  const size_t activations = R->model.activation_bytes, workspace = R->model.workspace_bytes;
  const size_t grad_stage = ampc_accum_stage_bytes(&R->accum, T->params.total);
  const ampc_fp8_sites *fp8 = R->model.fp8;
  cJSON *mem = cJSON_AddObjectToObject(summary, "memory");
  const size_t fp8_state = fp8 ? ampc_fp8_sites_state_bytes(fp8->n, fp8->len) : 0;
  size_t total = activations + workspace + grad_stage + fp8_state;
  for (int r = 0; r < AMPC_ROLE_COUNT; r++)
    total += T->params.bytes[r];
  cJSON_AddNumberToObject(mem, "weights", (double)T->params.bytes[AMPC_ROLE_WEIGHTS]);
  cJSON_AddNumberToObject(mem, "master", (double)T->params.bytes[AMPC_ROLE_MASTER]);
  cJSON_AddNumberToObject(mem, "grads", (double)T->params.bytes[AMPC_ROLE_GRADS]);
  cJSON_AddNumberToObject(
      mem, "moments",
      (double)(T->params.bytes[AMPC_ROLE_MOMENT1] + T->params.bytes[AMPC_ROLE_MOMENT2]));
  if (T->params.bytes[AMPC_ROLE_COMPENSATION]) /* --weight-update kahan */
    cJSON_AddNumberToObject(mem, "compensation", (double)T->params.bytes[AMPC_ROLE_COMPENSATION]);
  cJSON_AddNumberToObject(mem, "activations", (double)activations);
  cJSON_AddNumberToObject(mem, "workspace", (double)workspace);
  if (grad_stage) /* the FP32 sum over micro-batches and ranks */
    cJSON_AddNumberToObject(mem, "grad_stage", (double)grad_stage);
  if (fp8_state) /* fp8-mixed: the amax histories and scales */
    cJSON_AddNumberToObject(mem, "fp8_state", (double)fp8_state);
  cJSON_AddNumberToObject(mem, "total", (double)total);
  cJSON_AddNumberToObject(mem, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
}

/* the summary's "cpu": the threads, the online CPUs, the cores this process
 * and the other processes used during the iterations, and whether the
 * step times are clean or were taken on an oversubscribed machine */
static void run_add_cpu(cJSON *summary, const ampc_cpu_use *u) {
  const int threads = ampc_get_num_threads(), cpus = ampc_cpu_count();
  cJSON *c = cJSON_AddObjectToObject(summary, "cpu");
  cJSON_AddNumberToObject(c, "threads", threads);
  cJSON_AddNumberToObject(c, "cpus", cpus);
  if (u->wall_s > 0.0)
    cJSON_AddNumberToObject(c, "cores_used", u->own_s / u->wall_s);
  const double others = ampc_cpu_use_others(u);
  if (others >= 0.0)
    cJSON_AddNumberToObject(c, "other_cores", others);
  cJSON_AddStringToObject(c, "timing",
                          ampc_cpu_use_disturbed(u, threads, cpus) ? "disturbed" : "clean");
}

cJSON *run_summary_object(const ampc_run *R, const run_totals *t) {
  const ampc_trainer *T = &R->T;
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "event", "summary");
  if (R->kind->names_model_in_summary)
    cJSON_AddStringToObject(o, "model", R->kind->name(&R->md));
  cJSON_AddStringToObject(o, "precision", ampc_precision_name(T->amp.precision));
  cJSON_AddNumberToObject(o, "steps", (double)T->iteration);
  cJSON_AddNumberToObject(o, "optimizer_steps", (double)T->step);
  cJSON_AddNumberToObject(o, "skipped_steps", (double)T->scaler.skip_count);
  cJSON_AddNumberToObject(o, "overflow_steps", (double)T->scaler.overflow_count);
  float final_scale = T->scaler.scale;
  if (T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_LOSS) { /* the smallest of the model's terms */
    bool have = false;
    for (int k = 0; k < R->model.n_terms && k < AMPC_BRANCH_COUNT; k++)
      if (R->model.term_on[k] && (!have || T->scaler.branch_scale[k] < final_scale))
        final_scale = T->scaler.branch_scale[k], have = true;
  }
  cJSON_AddNumberToObject(o, "final_loss_scale", (double)final_scale);
  if (T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_BRANCH) { /* the branches the model has */
    cJSON *bs = cJSON_AddObjectToObject(o, "final_branch_scales");
    bool has[AMPC_BRANCH_COUNT] = {false, false, false, false};
    for (int i = 0; i < T->params.count; i++)
      if ((unsigned)T->params.p[i].branch < AMPC_BRANCH_COUNT)
        has[T->params.p[i].branch] = true;
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      if (has[b])
        cJSON_AddNumberToObject(bs, ampc_branch_name((ampc_branch)b),
                                (double)T->scaler.branch_scale[b]);
  } else if (T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_LOSS) {
    cJSON *ts = cJSON_AddObjectToObject(o, "final_loss_scales");
    for (int k = 0; k < R->model.n_terms && k < AMPC_BRANCH_COUNT; k++)
      if (R->model.term_on[k])
        cJSON_AddNumberToObject(ts, R->model.term_name[k], (double)T->scaler.branch_scale[k]);
  }
  cJSON_AddNumberToObject(o, "final_train_loss", (double)t->last.total);
  R->kind->log_summary(o, R, t);
  run_add_cpu(o, &t->cpu);
  /* a stopped run names its checkpoint only if it wrote one */
  cJSON_AddStringToObject(o, "checkpoint",
                          R->rc.save_path && (!R->stalled || R->saved) ? R->rc.save_path : "");
  if (R->accum.comm) { /* what this rank sent per iteration (payload bytes) */
    cJSON_AddNumberToObject(o, "ranks", (double)R->size);
    cJSON_AddNumberToObject(o, "bytes_sent_per_step",
                            t->ms_n ? (double)t->bytes_sent / (double)t->ms_n : 0.0);
    /* the time this rank was held in the gradient sum per iteration: the
     * blocking sum's, or the overlapped calls' (ovl_wait's included) */
    cJSON_AddNumberToObject(o, "reduce_wait_ms_per_step",
                            t->ms_n ? R->reduce_wait_s * 1e3 / (double)t->ms_n : 0.0);
  }
  cJSON *dj = run_parse_owned(ampc_diag_json(R->diag));
  if (!dj) {
    cJSON_Delete(o);
    return NULL;
  }
  cJSON_AddItemToObject(o, "diagnosis", dj);
  return o;
}

char *ampc_run_summary_json(const ampc_run *R) {
  return R && R->summary ? cJSON_PrintUnformatted(R->summary) : NULL;
}

/* A resumed run continues the log of the run it resumes, which may have been
 * killed after its checkpoint: cut the log back to the checkpoint's
 * iteration first (lines of later steps dropped, and a torn last line or
 * any line that does not parse), atomically, so that the log reads as if
 * the run had never been interrupted. No log yet: nothing to do. */
ampc_status run_cut_log(const char *path, int64_t iteration) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return AMPC_OK;
  char *in = NULL, *out = NULL;
  long len = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    len = ftell(f);
  if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (in = malloc((size_t)len + 1)) &&
      (out = malloc((size_t)len + 1)) && fread(in, 1, (size_t)len, f) != (size_t)len)
    len = -1;
  fclose(f);
  if (len <= 0 || !in || !out) {
    free(in), free(out);
    return len == 0 ? AMPC_OK : ampc_fail(AMPC_ERR_IO, "cannot read the log %s to resume it", path);
  }
  in[len] = '\0';
  size_t n_out = 0;
  for (char *line = in; *line;) {
    char *nl = strchr(line, '\n');
    if (!nl)
      break; /* a torn last line: the killed run's */
    *nl = '\0';
    cJSON *o = cJSON_Parse(line);
    bool keep = o != NULL;
    if (o) {
      const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
      const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
      const cJSON *steps = cJSON_GetObjectItemCaseSensitive(o, "steps");
      if (cJSON_IsNumber(st) && st->valuedouble > (double)iteration)
        keep = false;
      if (cJSON_IsString(ev) && strcmp(ev->valuestring, "summary") == 0 && cJSON_IsNumber(steps) &&
          steps->valuedouble > (double)iteration)
        keep = false;
      cJSON_Delete(o);
    }
    if (keep) {
      const size_t l = (size_t)(nl - line);
      memcpy(out + n_out, line, l);
      out[n_out + l] = '\n';
      n_out += l + 1;
    }
    line = nl + 1;
  }
  ampc_status st = AMPC_OK;
  if (n_out != (size_t)len) /* something to cut */
    st = ampc_file_write_atomic(path, out, n_out);
  free(in), free(out);
  return st;
}
