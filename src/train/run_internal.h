/*
 * src/train/run_internal.h: the training run's state and the parts of it
 * that live in their own files (not public API): the model kinds as the run
 * sees them (src/train/model.c), the metrics log and summary (run_log.c),
 * the ranks' agreement after a step (run_ranks.c), the stall policy and the
 * diagnosis' view of a step (run_health.c), the resume check (checkpoint.c).
 */
#ifndef AMPC_TRAIN_RUN_INTERNAL_H
#define AMPC_TRAIN_RUN_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ampc/train.h"

typedef struct run_kind run_kind;

struct ampc_run {
  ampc_run_config rc;
  ampc_run_data data;
  ampc_model_desc md;
  const run_kind *kind; /* what the run does differently per model kind */
  ampc_mmodel_specs specs;
  ampc_trainer T;
  ampc_model model;
  bool have_trainer, have_model;
  ampc_device_ctx *dctx; /* a device's context, bound to this thread (ampc_device_open) */
  int64_t ntrain, mb;    /* training samples; samples per micro-batch (on this rank) */
  int rank, size;        /* data parallelism (0 and 1: one process) */
  ampc_accum accum;      /* how a step's gradient is summed */
  /* the sampler draws groups (a concept's training images, or one feature
   * row): one member is picked per draw, so a batch never holds two images
   * of one concept (which the contrastive loss would take for negatives of
   * each other) */
  ampc_sampler smp;
  ampc_sample_groups groups;
  ampc_batch_buffers buf; /* one micro-batch, gathered */
  uint8_t *stream_raw;    /* a streamed micro-batch's images before the shift, or NULL */
  double data_wait_ms;    /* this iteration's wait for streamed data */
  double reduce_wait_s;   /* seconds in the ranks' gradient sums (ampc_accum.reduce_wait_s) */
  /* the image-text data's training recipe, recorded in the log and the
   * checkpoint and checked on resume: "held_out=S;shift=N;itm=sampled|hardest" */
  char recipe[128], held_out[64];
  char notes[6][256]; /* the run's own warnings (an option without effect, a resume's switches) */
  int n_notes;
  int64_t it_no; /* 0-based index of the iteration being gathered */
  ampc_telemetry *telemetry;
  ampc_diag *diag;
  cJSON *summary;
  bool trained;     /* ampc_run_train ran (once per run) */
  bool stalled;     /* it stopped on a stall */
  bool interrupted; /* it stopped at rc.interrupt */
  bool saved;       /* this run wrote its checkpoint at least once */
  /* fp8-mixed: the iteration's FP8 cast counts per branch (summed over ranks) */
  uint64_t fp8_values[AMPC_BRANCH_COUNT], fp8_sat[AMPC_BRANCH_COUNT], fp8_flush[AMPC_BRANCH_COUNT];
  double *fp8_amax; /* [3 * sites]: the amax reduction's buffer */
};

/* What the loop sums for the summary. */
typedef struct run_totals {
  ampc_losses last;
  bool have_eval;
  ampc_eval ev;
  double ms_sum, t_start;
  double wait_sum; /* milliseconds waited for streamed data */
  int64_t ms_n;
  ampc_swallow_stats sw;
  uint64_t bytes_sent; /* by this rank during the iterations (data parallel) */
  ampc_cpu_use cpu;    /* CPU time over the iterations (evaluation and saving left out) */
  double eval_s;       /* wall time in evaluations */
  int64_t evals;
} run_totals;

/* ---- evaluation progress (src/train/eval.c) -------------------------------------- */

/* Where one split's evaluation reports: fn(user, f) with f rising from lo
 * to hi over the split (the model's eval_progress, scaled to the split's
 * share of the whole evaluation). */
typedef struct eval_progress {
  void (*fn)(void *user, double fraction);
  void *user;
  double lo, hi;
  const volatile sig_atomic_t *cancel; /* non-zero: stop (NULL: never) */
} eval_progress;
/* ampc_mmodel_evaluate with progress p (NULL: none) */
ampc_status eval_mm_split(ampc_mmodel *M, const ampc_dataset *d, int split,
                          ampc_mmodel_metrics *out, const eval_progress *p);

/* ---- the model kinds (src/train/model.c) ---------------------------------------- */

struct run_kind {
  const char *(*name)(const ampc_model_desc *md); /* in the checkpoint and the log */
  bool on_device;                                 /* runs on a device backend (cpu-split too) */
  bool names_model_in_summary;                    /* the summary line has "model" */
  bool (*attn_cast_asked)(const ampc_model_desc *md);
  /* the data against the model; sets R->ntrain */
  ampc_status (*check_data)(ampc_run *R);
  int64_t (*min_micro_batch)(const ampc_model_desc *md);
  /* NULL when global negatives fit the model, else the error */
  ampc_status (*check_global_negatives)(const ampc_model_desc *md);
  /* the sampler's groups, the batch buffers and the recipe */
  ampc_status (*feed)(ampc_run *R);
  /* micro-batch rows [0, mb) from positions base + r of the run's sequence */
  void (*gather)(ampc_run *R, int64_t base, ampc_batch *out);
  /* the kind's part of the config line's "run", of an eval's "metrics",
   * and of the summary (after final_train_loss) */
  void (*log_config)(cJSON *run_o, const ampc_run *R);
  void (*log_eval)(cJSON *metrics, const ampc_eval *e);
  void (*log_summary)(cJSON *o, const ampc_run *R, const run_totals *t);
};
const run_kind *run_kind_of(const ampc_model_desc *md);
/* --attention-cast as in effect: asked for, in a preset with 16-bit
 * activations (the log's config line and the checkpoint record this) */
bool run_attn_cast(const ampc_run *R);

/* ---- the log (run_log.c) ------------------------------------------------------- */

cJSON *run_parse_owned(char *txt);
/* one JSON object as one log line (and free it); flushed per line */
ampc_status run_log_line(FILE *f, const char *path, cJSON *o);
cJSON *run_config_object(const ampc_run *R);
cJSON *run_step_object(const ampc_step_info *info, const ampc_losses *L, double ms,
                       const ampc_diag_step *ds, ampc_loss_scale_mode mode, const ampc_model *m);
cJSON *run_summary_object(const ampc_run *R, const run_totals *t);
cJSON *run_stall_object(const ampc_run *R, int64_t iteration, const char *why);
cJSON *run_eval_object(const ampc_run *R, int64_t iteration, const ampc_eval *e);
cJSON *run_save_skipped_object(int64_t iteration);
/* {"event":"interrupted","step":iteration}: the run stopped at a signal */
cJSON *run_interrupted_object(int64_t iteration);
/* the summary's "memory" object */
void run_add_memory(cJSON *summary, const ampc_run *R);
void run_add_mm_metrics(cJSON *o, const char *name, const ampc_mmodel_metrics *m);
/* a resumed run's log cut back to the checkpoint's iteration */
ampc_status run_cut_log(const char *path, int64_t iteration);

/* ---- the ranks after a step (run_ranks.c) ---------------------------------------- */

ampc_status run_fp8_end_step(ampc_run *R);
ampc_status run_check_replicas(ampc_run *R, const ampc_step_info *info);
/* Before the first step of a run on several ranks: every rank was started
 * with the same settings (the config line's fields, but the thread count
 * and the checkpoint's path) and holds the same weights. Else
 * AMPC_ERR_INVALID_ARG on every rank, naming the first differing field and
 * the flag that sets it. A collective: every rank calls it. */
ampc_status run_check_start(ampc_run *R);
ampc_status run_reduce_telemetry(ampc_run *R);

/* ---- the stall policy and the diagnosis (run_health.c) ------------------------------- */

typedef struct stall_state {
  int64_t floor_run, bad_loss; /* consecutive steps */
  bool reported;
  char reason[256];
} stall_state;
const char *run_stall_check(const ampc_run *R, stall_state *ss, const ampc_step_info *info,
                            float loss);
ampc_diag *run_diag_start(const ampc_diag_config *c, const char *resumed_log, int64_t iteration);
/* the step's diagnosis record: the trainer's, the loss parts, the FP8 counts */
void run_diag_step(ampc_diag_step *ds, const ampc_run *R, const ampc_step_info *info,
                   const ampc_losses *mean, bool sampled);

/* ---- resume and save (checkpoint.c) -------------------------------------------------------- */

/* Whether the checkpoint at rc.resume_path fits this run (its model, loss
 * multiplier, loss-term heads and data recipe); a switched attention cast
 * adds a note. A checkpoint that does not read is left to the trainer's
 * load. Errors: AMPC_ERR_FORMAT naming both. */
ampc_status run_resume_check(ampc_run *R);
/* Write the run's checkpoint (rc.save_path) with the metadata naming its
 * model, data recipe and loss multiplier, and the FP8 state. */
ampc_status run_save(ampc_run *R);

#endif
