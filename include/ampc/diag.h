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

enum { AMPC_TM_SAMPLES = 8 }; /* samples named per non-finite tensor */

typedef struct ampc_telemetry {
  bool on;                                            /* collect in the current iteration */
  ampc_tm_stats s[AMPC_TM_PHASES][AMPC_BRANCH_COUNT]; /* counts since ampc_telemetry_begin */
  /* the first tensor that held an inf or NaN after rounding, "" if none */
  char first_nonfinite[64];
  int first_nonfinite_branch; /* ampc_branch, or -1 */
  int first_nonfinite_phase;  /* ampc_tm_phase, or -1 */
  /* that tensor's largest finite FP32 result before rounding (|x|, the
   * tally's max_abs of its stores) and the dtype it was stored in
   * (AMPC_DTYPE_COUNT: not told) */
  float first_nonfinite_max_abs;
  ampc_dtype first_nonfinite_dt;
  /* the samples whose rows of that tensor hold inf or NaN: their positions
   * in the step's (global) batch, sample_offset + row, the first
   * AMPC_TM_SAMPLES of them in order; nf_samples_total counts all of them
   * and nf_samples_of the samples the tensor holds (0: not per sample or
   * not scanned) */
  int n_nf_samples;
  int64_t nf_samples[AMPC_TM_SAMPLES];
  int64_t nf_samples_total, nf_samples_of;
  /* set by the caller before each micro-batch: the batch position of its
   * first sample (ranks and accumulated micro-batches) */
  int64_t sample_offset;
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

/* ampc_telemetry_mark for a tensor stored in dtype dt (AMPC_DTYPE_COUNT:
 * not told); returns true when this mark recorded the first non-finite
 * tensor (then the caller may report its samples with
 * ampc_telemetry_samples). */
bool ampc_telemetry_mark_dt(ampc_telemetry *t, ampc_branch br, ampc_tm_phase ph, const char *name,
                            ampc_dtype dt);

/* The samples of the first non-finite tensor: bad[r] != 0 when sample r of
 * the current micro-batch (n samples) holds an inf or NaN there; recorded at
 * batch positions t->sample_offset + r. No-op when t is not on or no
 * non-finite tensor was recorded. The method of PyTorch's anomaly mode and
 * transformers' DebugUnderflowOverflow, narrowed to rows: the first op whose
 * output is non-finite, and which inputs it came from. */
void ampc_telemetry_samples(ampc_telemetry *t, const uint8_t *bad, int64_t n);

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

/* The shadow check of a product computed elsewhere (a device's GEMM, e.g.
 * cuBLASLt's on Tensor Cores): y [rows, n] FP32, the unrounded product x w^T of
 * x [rows, k] (xdt, contiguous) and w [n, k] (wdt), all host memory, against
 * the FP64 reference (ampc_gemm_reference); kept as
 * ampc_telemetry_shadow_linear keeps its error. No-op when t is NULL or not
 * on. Errors: AMPC_ERR_INVALID_ARG for a NULL buffer, AMPC_ERR_NOMEM. */
ampc_status ampc_telemetry_shadow_result(ampc_telemetry *t, ampc_branch br, const char *name,
                                         int64_t rows, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const float *y);

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
  AMPC_VERDICT_FP8_SATURATION,        /* FP8 casts clipped at the format's largest value: the
                                         delayed scale lags a growing amax */
  AMPC_VERDICT_FP8_UNDERFLOW,         /* FP8 casts flushed to zero: the scale is too small
                                         for the tensor (margin, or a stale history max) */
  AMPC_VERDICT_PRECISION_GAP,         /* cross-run: worse than the FP32 twin by more than the
                                         margin, no non-finite value, no single cause named */
  AMPC_VERDICT_COUNT
} ampc_verdict_kind;

/* "healthy", "overflow", "nonfinite-independent-of-scale", "underflow",
 * "swallowed-updates", "accumulation-error", "fp8-saturation", "fp8-underflow",
 * "precision-gap" ("?" for an invalid kind). */
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
  /* fp8-mixed: the step's counted FP8 casts of the branch's linear layers
   * (x, W forward; dy backward), those that saturated at the format's
   * largest value and the non-zero ones flushed to 0 (0 in other presets) */
  int64_t fp8_values, fp8_saturated, fp8_flushed;
} ampc_diag_branch;

enum { AMPC_DIAG_PARTS = 8, AMPC_DIAG_PART_NAME = 24 };

/* What the diagnosis needs of one training iteration (one line of the log). */
typedef struct ampc_diag_step {
  int64_t step;
  double loss; /* unscaled training loss (may be non-finite) */
  /* the composite loss's terms, unweighted, as the log names them ("loss_itc",
   * "loss_itm", "loss_cls"; none for the MLP) */
  int n_parts;
  char part_name[AMPC_DIAG_PARTS][AMPC_DIAG_PART_NAME];
  double part[AMPC_DIAG_PARTS];
  double loss_scale;                      /* S the backward pass used */
  double branch_scale[AMPC_BRANCH_COUNT]; /* each branch's S (per-branch; else loss_scale) */
  bool overflow, skipped;
  int64_t nonfinite_grads, nonfinite_weights;
  bool telemetry; /* rounding counts present */
  ampc_diag_branch br[AMPC_BRANCH_COUNT];
  char first_nonfinite[64];
  int first_nonfinite_branch, first_nonfinite_phase; /* -1 if none */
  /* that tensor's largest finite FP32 |x| before rounding (-1: unknown) and
   * its storage dtype's name ("" unknown) */
  double first_nonfinite_max_abs;
  char first_nonfinite_dtype[16];
  /* the samples carrying its non-finite values: dataset indices (streamed
   * data: shard * 2^32 + record) and, where the data has them, keys ("" if
   * not); n of the first AMPC_TM_SAMPLES, total of `of` samples in the batch
   * (of 0: not known) */
  int n_nf_samples;
  int64_t nf_sample[AMPC_TM_SAMPLES];
  char nf_key[AMPC_TM_SAMPLES][96];
  int64_t nf_samples_total, nf_samples_of;
} ampc_diag_step;

/* The run's settings that the verdicts depend on. */
typedef struct ampc_diag_config {
  char precision[24];  /* preset name, e.g. "16-mixed" */
  ampc_dtype lowp;     /* working (weights and gradients) dtype */
  bool master_weights; /* FP32 master copy on */
  int loss_scale_mode; /* 0 none, 1 static, 2 dynamic, 3 per-branch (ampc_loss_scale_mode) */
  double min_scale;    /* dynamic scaler's floor */
  ampc_acc accumulate; /* GEMM accumulation */
  /* what must match for two runs to be twins (ampc_diag_compare): model,
   * data, steps, batch, seed, optimizer settings as "key=value;" pairs from
   * the log's config line; "" when not read from a log (then unchecked) */
  char twin_key[480];
  bool stochastic_update; /* --weight-update stochastic or kahan: an unchanged
                             weight was rounded down (SR) or its update is
                             kept in the compensation (Kahan), not lost: no
                             swallowed-updates verdict */
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
/* Whether verdicts of kind k come from a run's own counts (overflow,
 * underflow, swallowed updates, accumulation error, FP8 saturation or
 * underflow) and so harm the run only where its loss shows it: against its
 * FP32 twin with no significant gap (ampc_diag_compare), such a verdict is
 * a signature present, not the outcome. False for healthy, precision-gap
 * (itself the loss's verdict) and nonfinite-independent-of-scale. */
bool ampc_verdict_count_based(ampc_verdict_kind k);
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

/* ---- a run against its FP32 twin ---------------------------------------------
 * The same model, data, seed and steps in FP32 ("the baseline") and in a
 * 16-bit preset see the same batches, so the per-step loss difference d_t =
 * loss_run(t) - loss_base(t) cancels the batch-to-batch noise the two share.
 * Over the last `window` steps both logs have (a tenth of them, at least 5):
 * mean d and its standard error se = sd(d) / sqrt(window). The gap is real
 * when mean d > margin * |mean baseline loss| and mean d > 3 se. The total
 * loss is compared first; when its gap is not real, each term of a composite
 * loss (loss_itc, loss_itm, ...) is compared the same way and the term with
 * the largest real relative gap is reported (a weighted term can fail while
 * the total, dominated by another, does not move). */
typedef struct ampc_diag_gap {
  char quantity[AMPC_DIAG_PART_NAME];    /* "loss" (the total), or the loss term compared */
  int64_t window, first_step, last_step; /* the steps compared */
  double run_loss, base_loss;            /* mean training loss over them */
  double diff, diff_se;                  /* mean per-step difference, its standard error */
  double rel;                            /* diff / |base_loss| */
  bool finite; /* no non-finite loss or weight anywhere in the run, and every step with
                  non-finite gradients skipped (an overflow the scaler handled) */
  bool significant;
} ampc_diag_gap;

/* Compare run with baseline at relative margin (> 0, e.g. 0.01). Fills *gap
 * and returns the number of verdicts written to *out (0 or 1): when the gap
 * is significant and the run finite, accumulation-error if the run's sampled
 * GEMMs err past the accumulation threshold, underflow if a branch flushed at
 * least 1 % of its sampled gradient values, swallowed-updates if its 16-bit
 * weights (no master, nearest rounding) left >= 25 % of the updates
 * unchanged, else precision-gap; each with the gap as evidence. Errors: AMPC_ERR_INVALID_ARG (NULL,
 * margin <= 0, fewer than 5 common steps). */
ampc_status ampc_diag_compare(const ampc_diag *run, const ampc_diag *baseline, double margin,
                              ampc_diag_gap *gap, ampc_verdict *out, int *n_out);

/* Read a metrics log (JSON Lines, DESIGN.md section 4) written by ampc train:
 * its config line and step lines. Errors (message names the file and line):
 * AMPC_ERR_IO (cannot open or read), AMPC_ERR_FORMAT (not a log: bad JSON,
 * no config line, a step line without its fields), AMPC_ERR_NOMEM. */
ampc_status ampc_diag_read_log(const char *path, ampc_diag **out);

/* ---- inspect: what a format would do to a tensor ------------------------------
 * `ampc inspect` (tools/ampc/cmd_inspect.c) over any safetensors file, e.g. the
 * activations and gradients tools/python/ampc_dump.py writes from PyTorch.
 * For a value x (unscaled, as stored in the file) and a scale s, v = x s is
 * rounded once into the format with ampc_round_f64 and classed: zero (x == 0),
 * non-finite (x is inf or NaN), flushed (v != 0 rounds to 0), subnormal,
 * normal, overflow (v finite, its rounding past the largest finite value: inf,
 * NaN for E4M3, or +-max under saturation). The relative error |r - v| / |v|
 * of the rounding r is summed over the values that neither overflow nor are
 * zero or non-finite (a flushed value counts 1). For a power-of-two s (as
 * loss scales are) v is exact, so the counts are exact; other scales round
 * x s to a double first. Method: the format bands of Micikevicius et al. 2018
 * (Mixed Precision Training, section 3.2, Fig. 3) counted exactly. */

/* floor(log2 |x|) bins of finite non-zero doubles: -1074 .. 1023 */
enum { AMPC_INSPECT_LOG2_MIN = -1074, AMPC_INSPECT_BINS = 2098 };

typedef struct ampc_inspect_stats {
  uint64_t count;                                /* values seen */
  uint64_t zeros;                                /* x == 0 */
  uint64_t nonfinite;                            /* x inf or NaN */
  uint64_t flushed, subnormal, normal, overflow; /* of the finite non-zero x, at the scale */
  uint64_t err_n;                   /* values in err_sum: flushed + subnormal + normal */
  double err_sum, err_max;          /* relative rounding error, summed and largest */
  double max_abs, min_abs;          /* finite non-zero |x| (0, 0 when none) */
  uint64_t hist[AMPC_INSPECT_BINS]; /* hist[i]: finite non-zero x, floor(log2|x|) == MIN + i */
  uint64_t pow2[AMPC_INSPECT_BINS]; /* of those, |x| exactly 2^(MIN + i) */
} ampc_inspect_stats;

/* Add n values to *st (zero it first to start): `data` holds them little-
 * endian, in the safetensors dtype `src_dtype` ("F64", "F32", "F16", "BF16",
 * "F8_E4M3", "F8_E5M2"), not necessarily aligned; `fmt` is the format asked
 * about (any ampc dtype, F32 included) and `scale` a positive finite s.
 * Errors: AMPC_ERR_UNSUPPORTED for a dtype that is not floating point (integer
 * and BOOL tensors; the message names the dtype), AMPC_ERR_INVALID_ARG (bad
 * fmt or scale, NULL with n > 0). */
ampc_status ampc_inspect_values(ampc_inspect_stats *st, const void *data, const char *src_dtype,
                                size_t n, ampc_dtype fmt, double scale);

/* Add every count of `from` to `into` (max_abs: the larger; min_abs: the
 * smaller non-zero; err_max: the larger). */
void ampc_inspect_merge(ampc_inspect_stats *into, const ampc_inspect_stats *from);

/* Values x with |x| <= 2^m among those counted (from hist and pow2). */
uint64_t ampc_inspect_count_le_pow2(const ampc_inspect_stats *st, int m);

/* 1 when the format facts the counting uses (smallest normal, smallest
 * subnormal, largest finite value) equal ampc_format_info_get's for every
 * dtype (a self-check for the tests), else 0. */
int ampc_inspect_facts_agree(void);

typedef enum ampc_inspect_range {
  AMPC_INSPECT_RANGE_OK = 0,    /* [k_lo, k_hi] is non-empty */
  AMPC_INSPECT_RANGE_EMPTY = 1, /* k_lo > k_hi: no power of two meets both */
  AMPC_INSPECT_RANGE_ANY = 2    /* no finite non-zero value: every scale does */
} ampc_inspect_range;

/* The power-of-two scales 2^k for which storing these values (their hist,
 * pow2 and max_abs: independent of the scale they were counted at) in fmt
 * overflows nothing and flushes at most max_flush (a fraction in [0, 1]) of
 * the finite non-zero ones: k_hi is the largest k with round(max_abs 2^k)
 * finite (exact, by ampc_round_f64), k_lo the smallest k with at most
 * floor(max_flush * nonzero) values |x| 2^k <= the format's largest
 * magnitude that rounds to 0 (half its smallest subnormal; the tie rounds to
 * 0). Both are clamped to [-2200, 2200]. Returns the case; *k_lo and *k_hi
 * are set in every case (to -2200 and 2200 for ANY). */
ampc_inspect_range ampc_inspect_scale_range(const ampc_inspect_stats *st, ampc_dtype fmt,
                                            double max_flush, int *k_lo, int *k_hi);

#ifdef __cplusplus
}
#endif

#endif
