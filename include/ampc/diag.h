/*
 * ampc/diag.h: telemetry of what 16-bit storage does to a training run, and the
 * diagnosis that turns it into verdicts (DESIGN.md section 3).
 *
 * Telemetry. While a collector is active, every rounding of an FP32 result into
 * storage made by ampc's kernels (the GEMM epilogue, the layers' stores, the
 * element stores of the models) is counted exactly, in the thread that made
 * it: values that were non-zero in FP32 and became 0 (flushed to zero), that
 * became subnormal, that overflowed to inf, NaNs, max |x|, and a histogram of
 * floor(log2 |x|) of the FP32 values before rounding. The model marks where a
 * tensor ends (ampc_telemetry_mark) so the counts are attributed to a branch
 * (vision, text, fusion, heads) and a phase (forward activations, backward
 * gradients), and the first tensor holding a non-finite value is named.
 * A shadow product in FP64 of sampled rows of a GEMM gives the relative error
 * of the accumulation mode in use (ampc_telemetry_shadow_linear).
 *
 * The collector is process-wide: one may be active at a time, and it must be
 * begun, marked and ended from one thread outside any parallel region (the
 * kernels' OpenMP workers only add to their own per-thread counters).
 */
#ifndef AMPC_DIAG_H
#define AMPC_DIAG_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/gemm.h"
#include "ampc/model.h"
#include "ampc/params.h"
#include "ampc/status.h"
#include "ampc/tally.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ampc_telemetry {
  bool on;                                            /* collect in the current iteration */
  ampc_tm_stats s[AMPC_TM_PHASES][AMPC_BRANCH_COUNT]; /* counts since ampc_telemetry_begin */
  /* the first tensor that held an inf or NaN after rounding, "" if none */
  char first_nonfinite[64];
  int first_nonfinite_branch; /* ampc_branch, or -1 */
  int first_nonfinite_phase;  /* ampc_tm_phase, or -1 */
  /* largest relative accumulation error (Frobenius norm, against FP64) of the
   * sampled GEMMs per branch, the tensor and its reduction length; -1 if none */
  double acc_err[AMPC_BRANCH_COUNT];
  char acc_tensor[AMPC_BRANCH_COUNT][64];
  int64_t acc_k[AMPC_BRANCH_COUNT];
  ampc_tally *tally; /* owned between begin and end; bound to the thread that began */
} ampc_telemetry;

/* Reset *t and start counting the stores of the kernels the calling thread
 * runs (t->on = true): t gets its own rounding tally (ampc/tally.h), bound to
 * this thread until ampc_telemetry_end. Beginning t again while it is on
 * restarts it. Start *t zeroed (or ended) before the first begin. Errors:
 * AMPC_ERR_INVALID_ARG if t is NULL or another collector is active on this
 * thread; AMPC_ERR_NOMEM. */
ampc_status ampc_telemetry_begin(ampc_telemetry *t);

/* Attribute everything counted since the previous mark (or begin) to branch br
 * and phase ph; `name` is the tensor (or block) just finished, recorded as
 * first_nonfinite if its counts hold the run's first inf or NaN. No-op when t
 * is NULL or not on. */
void ampc_telemetry_mark(ampc_telemetry *t, ampc_branch br, ampc_tm_phase ph, const char *name);

/* Stop counting and free t's tally (counts since the last mark are dropped;
 * mark first). Call it on the thread that began t. */
void ampc_telemetry_end(ampc_telemetry *t);

/* The shadow accumulation check of y = x W^T (torch.nn.Linear layout): up to 16
 * evenly spaced rows of x [m, k] (xdt) are multiplied by w [n, k] (wdt) once
 * with ampc_gemm in accumulation mode `acc` into FP32 (no output rounding) and
 * once in FP64 (ampc_gemm_reference); the relative Frobenius error is kept per
 * branch if it is the largest so far. Counting is paused meanwhile. No-op when
 * t is NULL or not on. Errors: those of ampc_gemm; AMPC_ERR_NOMEM. */
ampc_status ampc_telemetry_shadow_linear(ampc_telemetry *t, ampc_branch br, const char *name,
                                         int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         ampc_acc acc);

/* The collector as a model's probe (ampc/model.h): marks and shadow GEMMs
 * reported by the model go to t while t->on. t must outlive the model's use. */
ampc_model_probe ampc_telemetry_probe(ampc_telemetry *t);

/* ---- diagnosis: verdicts from a run's steps -------------------------------- */

typedef enum ampc_verdict_kind {
  AMPC_VERDICT_HEALTHY = 0,
  AMPC_VERDICT_OVERFLOW,              /* non-finite gradients without enough scaling */
  AMPC_VERDICT_NONFINITE_INDEPENDENT, /* non-finite values the loss scale cannot cause or cure */
  AMPC_VERDICT_UNDERFLOW,             /* gradients flushed to zero, loss plateau */
  AMPC_VERDICT_SWALLOWED,             /* updates rounded away by 16-bit weights */
  AMPC_VERDICT_ACCUMULATION,          /* GEMM sums measurably worse than FP32 accumulation */
  AMPC_VERDICT_COUNT
} ampc_verdict_kind;

/* "healthy", "overflow", "nonfinite-independent-of-scale", "underflow",
 * "swallowed-updates", "accumulation-error" ("?" for an invalid kind). */
const char *ampc_verdict_name(ampc_verdict_kind k);

/* One branch at one step. Rounding counts come from the telemetry collector
 * (zero when the step was not sampled); update counts from the optimizer. */
typedef struct ampc_diag_branch {
  int64_t parameters;
  ampc_tm_stats grad, act;
  double acc_err; /* relative accumulation error of the sampled GEMMs, -1 if none */
  int64_t acc_k;
  char acc_tensor[64];
  int64_t updated, swallowed, would_swallow;
} ampc_diag_branch;

/* What the diagnosis needs of one training iteration (one line of the log). */
typedef struct ampc_diag_step {
  int64_t step;
  double loss;       /* unscaled training loss (may be non-finite) */
  double loss_scale; /* S the backward pass used */
  bool overflow, skipped;
  int64_t nonfinite_grads, nonfinite_weights;
  bool telemetry; /* rounding counts present */
  ampc_diag_branch br[AMPC_BRANCH_COUNT];
  char first_nonfinite[64];
  int first_nonfinite_branch, first_nonfinite_phase; /* -1 if none */
} ampc_diag_step;

/* The run's settings that the verdicts depend on. */
typedef struct ampc_diag_config {
  char precision[24];  /* preset name, e.g. "16-mixed" */
  ampc_dtype lowp;     /* working (weights and gradients) dtype */
  bool master_weights; /* FP32 master copy on */
  int loss_scale_mode; /* 0 none, 1 static, 2 dynamic (ampc_loss_scale_mode) */
  double min_scale;    /* dynamic scaler's floor */
  ampc_acc accumulate; /* GEMM accumulation */
} ampc_diag_config;

typedef struct ampc_verdict {
  ampc_verdict_kind kind;
  int branch;      /* ampc_branch it names, or -1 */
  int64_t step;    /* the step it names, or -1 */
  char tensor[64]; /* the tensor it names, or "" */
  int n_evidence;
  char evidence[8][200]; /* the numbers behind it, one sentence each */
  char safeguard[240];   /* what to turn on (or check) */
} ampc_verdict;

typedef struct ampc_diag ampc_diag;

/* A diagnosis accumulator for a run with settings c. NULL on allocation failure. */
ampc_diag *ampc_diag_create(const ampc_diag_config *c);
void ampc_diag_free(ampc_diag *d);
/* Append one step (in step order). Errors: AMPC_ERR_INVALID_ARG, AMPC_ERR_NOMEM. */
ampc_status ampc_diag_add(ampc_diag *d, const ampc_diag_step *s);
/* Drop the steps numbered >= step (a resumed run's log repeats them). */
void ampc_diag_truncate(ampc_diag *d, int64_t step);
/* The verdicts of the run so far (at least one: healthy when no failure
 * signature is present), at most max, in the order of the kinds. */
int ampc_diag_verdicts(const ampc_diag *d, ampc_verdict *out, int max);
/* {"verdict": first verdict, "verdicts": [...], "evidence": [...], "safeguard": ..}
 * as a malloc'd JSON text; NULL on allocation failure. */
char *ampc_diag_json(const ampc_diag *d);
/* Gradient histogram of branch br summed over the sampled steps (AMPC_TM_BINS
 * bins as in ampc_tm_stats, zeros apart); NULL for a bad branch. */
const ampc_tm_stats *ampc_diag_grad_stats(const ampc_diag *d, int br);
/* Steps added so far and step i (0-based), for plots; NULL when out of range. */
int64_t ampc_diag_steps(const ampc_diag *d);
const ampc_diag_step *ampc_diag_step_at(const ampc_diag *d, int64_t i);
const ampc_diag_config *ampc_diag_get_config(const ampc_diag *d);

/* The diagnosis fields of a step line of the metrics log as a malloc'd JSON
 * object text: "nonfinite_weights", "telemetry", "branches" (per branch:
 * parameters, updated/swallowed counts and fractions, and when sampled "grad"
 * and "act" rounding counts with a sparse "log2_hist", the accumulation
 * error), "first_nonfinite". NULL on allocation failure. */
char *ampc_diag_step_json(const ampc_diag_step *s);

/* Read a metrics log (JSON Lines, DESIGN.md section 4) written by ampc train:
 * its config line and step lines. Errors (message names the file and line):
 * AMPC_ERR_IO (cannot open or read), AMPC_ERR_FORMAT (not a log: bad JSON,
 * no config line, a step line without its fields), AMPC_ERR_NOMEM. */
ampc_status ampc_diag_read_log(const char *path, ampc_diag **out);

#ifdef __cplusplus
}
#endif

#endif
