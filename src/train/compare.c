/*
 * src/train/compare.c: the precision comparison of include/ampc/train.h
 * (ampc_compare_run): several runs of the same training, one after another
 * in this process, each a plain ampc_run, their summaries gathered into
 * results and, on request, every run's loss set against its FP32 twin's.
 * `ampc train --precision A,B,...` and `ampc compare` both run through it.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/gemm.h"
#include "ampc/train.h"

enum { COMPARE_MAX_RUNS = 64 };

/* Start the process's peak resident set over from what it holds now, so
 * that the next run's summary (peak_rss_bytes, getrusage's ru_maxrss)
 * covers that run, not the largest earlier one. Linux (since 4.0):
 * /proc/self/clear_refs, "5"; elsewhere nothing (the peak so far). */
static void reset_peak_rss(void) {
#ifdef __linux__
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
#endif
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : (double)NAN;
}

/* metrics.split.key, NaN where absent */
static double metric(const cJSON *sum, const char *split, const char *key) {
  const cJSON *m =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sum, "metrics"), split);
  return num(m, key);
}

/* The numbers of a run's summary line. The MLP's carries its test metrics
 * at the top level and its memory under "memory"; the other models' under
 * "metrics" and "activation_bytes". */
static void read_summary(const cJSON *s, ampc_compare_result *r) {
  r->steps = (int64_t)num(s, "steps");
  r->skipped_steps = (int64_t)num(s, "skipped_steps");
  r->final_loss = num(s, "final_train_loss");
  r->wall_s = num(s, "wall_s");
  r->ms_per_step = num(s, "ms_per_step_mean");
  if (isnan(r->ms_per_step))
    r->ms_per_step = 1e3 * r->wall_s / (r->steps > 0 ? (double)r->steps : 1.0);
  const double act = num(s, "activation_bytes");
  const cJSON *mem = cJSON_GetObjectItemCaseSensitive(s, "memory");
  r->activation_mib =
      (isnan(act) ? num(mem, "activations") + num(mem, "workspace") : act) / 1048576.0;
  r->peak_rss_bytes = num(s, "peak_rss_bytes");
  if (isnan(r->peak_rss_bytes))
    r->peak_rss_bytes = num(mem, "peak_rss_bytes");
  r->param_state_mib =
      (num(mem, "weights") + num(mem, "master") + num(mem, "grads") + num(mem, "moments")) /
      1048576.0;
  const double comp = num(mem, "compensation");
  if (!isnan(comp))
    r->param_state_mib += comp / 1048576.0;
  const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(s, "cpu");
  const cJSON *timing = cJSON_GetObjectItemCaseSensitive(cpu, "timing");
  r->timing_disturbed = cJSON_IsString(timing) && !strcmp(timing->valuestring, "disturbed");
  r->other_cores = num(cpu, "other_cores");
  r->test_accuracy = num(cJSON_GetObjectItemCaseSensitive(s, "metrics"), "test_accuracy");
  if (isnan(r->test_accuracy))
    r->test_accuracy = num(s, "test_accuracy");
  r->new_i2t_r1 = metric(s, "new_style", "i2t_r1");
  r->new_t2i_r1 = metric(s, "new_style", "t2i_r1");
  r->zs_i2t_r1 = metric(s, "zero_shot", "i2t_r1");
  r->zs_t2i_r1 = metric(s, "zero_shot", "t2i_r1");
  r->group_acc = metric(s, "new_style", "group_acc");
  r->new_chance_r1 = metric(s, "new_style", "chance_r1");
  r->zs_chance_r1 = metric(s, "zero_shot", "chance_r1");
  r->val_i2t_r1 = metric(s, "val", "i2t_r1");
  r->val_t2i_r1 = metric(s, "val", "t2i_r1");
  r->val_chance_r1 = metric(s, "val", "chance_r1");
  r->prompt_acc = num(cJSON_GetObjectItemCaseSensitive(s, "metrics"), "zero_shot_accuracy");
}

static void result_init(ampc_compare_result *r) {
  memset(r, 0, sizeof *r);
  r->baseline = -1;
  r->final_loss = r->wall_s = r->ms_per_step = r->activation_mib = r->peak_rss_bytes = NAN;
  r->param_state_mib = r->other_cores = NAN;
  r->test_accuracy = r->new_i2t_r1 = r->new_t2i_r1 = r->zs_i2t_r1 = r->zs_t2i_r1 = NAN;
  r->group_acc = r->new_chance_r1 = r->zs_chance_r1 = NAN;
  r->val_i2t_r1 = r->val_t2i_r1 = r->val_chance_r1 = r->prompt_acc = NAN;
}

/* The result of a run that failed with st: the message and the flags. */
static void fail_result(ampc_compare_result *r, ampc_status st, const ampc_run *R) {
  r->status = st;
  r->refused = R == NULL && st == AMPC_ERR_INVALID_ARG;
  r->stalled = R != NULL && ampc_run_stalled(R);
  snprintf(r->error, sizeof r->error, "%s", ampc_last_error());
}

/* Read run k's log back into r->diag (options.vs_fp32): false when it has
 * none or it does not read (r->error says why). */
static bool read_back(const ampc_compare_spec *s, ampc_compare_result *r) {
  if (r->status != AMPC_OK || !r->ran || !s->rc.log_path)
    return false;
  if (ampc_diag_read_log(s->rc.log_path, &r->diag) != AMPC_OK) {
    r->diag = NULL;
    snprintf(r->error, sizeof r->error, "%s", ampc_last_error());
    return false;
  }
  return true;
}

/* Run r against the baseline b (its FP32 twin, diagnoses read back): the
 * loss gap, and each of r's own count-based verdicts marked harmless when
 * the loss is finite and shows no significant gap. */
static void gap_against(ampc_compare_result *r, const ampc_compare_result *b, int base,
                        double margin) {
  r->baseline = base;
  r->have_gap = ampc_diag_compare(r->diag, b->diag, margin > 0.0 ? margin : 0.01, &r->gap,
                                  &r->gap_verdict, &r->n_gap_verdicts) == AMPC_OK;
  if (!r->have_gap) {
    r->n_gap_verdicts = 0;
    snprintf(r->gap_error, sizeof r->gap_error, "%s", ampc_last_error());
    return;
  }
  for (int i = 0; i < r->n_verdicts; i++)
    r->no_loss_gap[i] =
        r->gap.finite && !r->gap.significant && ampc_verdict_count_based(r->verdicts[i].kind);
}

/* One run: build, train, read its summary. AMPC_OK or the run's error (in
 * r as well). */
static ampc_status one_run(const ampc_compare_spec *s, int k, const ampc_compare_options *opt,
                           int base, const ampc_compare_callbacks *cb, ampc_compare_result *res) {
  ampc_compare_result *r = &res[k];
  r->ran = true;
  reset_peak_rss();
  ampc_run *R = NULL;
  ampc_status st = ampc_run_create(&R, &s->rc, &s->amp, &s->opt, &s->md, s->data);
  if (st != AMPC_OK) {
    fail_result(r, st, NULL);
    if (cb && cb->run_end)
      cb->run_end(cb->user, k, NULL, r);
    return st;
  }
  if (cb && cb->run_start)
    cb->run_start(cb->user, k, R);
  st = ampc_run_train(R, cb ? &cb->run : NULL);
  if (st == AMPC_OK) {
    r->summary_json = ampc_run_summary_json(R);
    cJSON *o = r->summary_json ? cJSON_Parse(r->summary_json) : NULL;
    if (o) {
      read_summary(o, r);
      cJSON_Delete(o);
      r->n_verdicts = ampc_diag_verdicts(ampc_run_diag(R), r->verdicts, AMPC_VERDICT_COUNT);
    } else {
      free(r->summary_json);
      r->summary_json = NULL;
      st = ampc_fail(AMPC_ERR_NOMEM, "out of memory for the run's summary");
    }
  }
  if (st != AMPC_OK)
    fail_result(r, st, R);
  if (r->stalled && !r->summary_json) /* a stalled run's summary, with its diagnosis */
    r->summary_json = ampc_run_summary_json(R);
  r->interrupted = ampc_run_interrupted(R);
  /* read back at once: its gap is known when its baseline ran before it */
  if (opt->vs_fp32 && read_back(s, r) && base >= 0)
    gap_against(r, &res[base], base, opt->vs_fp32_margin);
  if (cb && cb->run_end)
    cb->run_end(cb->user, k, R, r);
  ampc_run_free(R);
  return st;
}

ampc_status ampc_compare_run(const ampc_compare_spec *runs, int n,
                             const ampc_compare_options *options, const ampc_compare_callbacks *cb,
                             ampc_compare_result *results) {
  if (!runs || !results || n < 1 || n > COMPARE_MAX_RUNS)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_compare_run: %d runs (1 to %d, not NULL)", n,
                     COMPARE_MAX_RUNS);
  const ampc_compare_options none = {false, false, 0.0};
  const ampc_compare_options *o = options ? options : &none;
  for (int k = 0; k < n; k++)
    result_init(&results[k]);
  ampc_status first = AMPC_OK;
  int first_k = -1, base = -1; /* the first finished 32-true run */
  bool threads_set = false;    /* an earlier run set its own thread count */
  for (int k = 0; k < n; k++) {
    if (first != AMPC_OK && o->stop_on_error)
      break;
    /* each run with its own thread count, as if alone (0: the default) */
    if (runs[k].threads > 0 || threads_set)
      ampc_set_num_threads(runs[k].threads);
    threads_set = runs[k].threads > 0;
    const ampc_status st = one_run(&runs[k], k, o, base, cb, results);
    if (st != AMPC_OK && first == AMPC_OK)
      first = st, first_k = k;
    if (base < 0 && results[k].diag &&
        !strcmp(ampc_diag_get_config(results[k].diag)->precision, "32-true"))
      base = k;
    if (results[k].interrupted) /* asked to stop: the rest do not start */
      break;
  }
  /* the runs that finished before their baseline did */
  for (int k = 0; o->vs_fp32 && base >= 0 && k < n; k++) {
    results[k].baseline = base;
    if (k != base && results[k].diag && !results[k].have_gap && !results[k].gap_error[0])
      gap_against(&results[k], &results[base], base, o->vs_fp32_margin);
  }
  if (first != AMPC_OK)
    return ampc_fail(first, "run %s: %s", runs[first_k].label ? runs[first_k].label : "?",
                     results[first_k].error);
  return AMPC_OK;
}

void ampc_compare_results_free(ampc_compare_result *results, int n) {
  if (!results)
    return;
  for (int k = 0; k < n; k++) {
    free(results[k].summary_json);
    results[k].summary_json = NULL;
    ampc_diag_free(results[k].diag);
    results[k].diag = NULL;
  }
}
