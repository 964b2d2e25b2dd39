/*
 * tools/ampc/train.h: what `ampc train`'s model-specific loops share (the
 * parsed flags, the config log line, the deterministic epoch sampler).
 */
#ifndef AMPC_TRAIN_H
#define AMPC_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ampc/ampc.h"

struct cJSON;

typedef struct train_args {
  ampc_amp_config amp;
  ampc_optim_config opt;
  ampc_mlp_config mc;
  int64_t steps, stop_at, batch, micro, eval_every, log_every, save_every, ntrain, ntest;
  int64_t tm_every; /* telemetry every N iterations (0 = off) */
  float sep;
  float w_itc, w_itm, w_cls;
  uint64_t seed;
  int threads;
  bool cosine, json, quiet, progress, no_eval;
  const char *log, *save, *resume, *model, *data;
} train_args;

/* Parse the flags of `ampc train` (argv[0] is the command name) into *a and
 * check them; no training runs. Returns 0, or the exit code after printing
 * the message (AMPC_EXIT_USAGE). Besides the flags it only stats --save's
 * path and directory. Not reentrant (the flag lists are static). */
int train_parse_args(int argc, char **argv, train_args *a);

/* The {"event":"config",...} line for trainer T (run_o: run settings to add;
 * consumed), after printing the resolved configuration to `say` and lint
 * warnings to stderr. NULL on allocation failure. */
struct cJSON *train_config_line(const ampc_trainer *T, const train_args *A, struct cJSON *run_o,
                                FILE *say);
/* Print a JSON object as one line (and free it); false on a write error. */
bool train_log_line(FILE *f, struct cJSON *o);
/* A {"event":"step",...} line: the engine's fields of `info`, the loss, the
 * step time, and the diagnosis fields of *ds (branches, telemetry). NULL on
 * allocation failure. */
struct cJSON *train_step_line(const ampc_step_info *info, double loss, double ms,
                              const ampc_diag_step *ds);
/* Add "diagnosis" (ampc_diag_json) to a summary object and, unless quiet,
 * print the verdicts to `say`. False on allocation failure. */
bool train_add_diagnosis(struct cJSON *summary, const ampc_diag *d, FILE *say, bool quiet);
/* Add the summary's "memory" object: T's parameter roles as allocated, the
 * model's activation and workspace bytes, their total, and the peak RSS. */
void train_add_memory(struct cJSON *summary, const ampc_trainer *T, size_t activations,
                      size_t workspace);
/* Parse `ampc train` arguments (argv[0] the command name) without running:
 * AMPC_EXIT_OK, or AMPC_EXIT_USAGE after printing the error. */
int train_check_args(int argc, char **argv);
/* The diagnosis accumulator of a run: a resumed run's log (resumed_log, when
 * it exists and reads) supplies the steps before `iteration`, so the summary
 * diagnoses the whole run; else a fresh one. NULL on allocation failure. */
ampc_diag *train_diag_start(const ampc_diag_config *c, const char *resumed_log,
                            int64_t iteration);
/* Monotonic seconds. */
double train_now_s(void);

/* A permutation of [0, n) per epoch, derived from (seed, epoch) only. */
typedef struct train_sampler {
  int64_t n, epoch;
  int64_t *perm;
  uint64_t seed;
} train_sampler;
/* The index of global sample number j (epoch j / n). */
int64_t train_sample_index(train_sampler *s, int64_t j);

/* The multimodal model's training loop (cmd_train_mm.c); *summary (when not
 * NULL) receives a copy of the summary object. */
int train_run_mm(const train_args *A, struct cJSON **summary);

#endif
