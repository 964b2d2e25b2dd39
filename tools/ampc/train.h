/*
 * tools/ampc/train.h: the flags of `ampc train` and what turns them into
 * runs of the library's comparison (ampc_compare_run, include/ampc/train.h):
 * the data and model a run's flags name, its spec, and the printer of what a
 * run reports. Shared with `ampc compare`, whose runs are `ampc train` flags.
 */
#ifndef AMPC_CLI_TRAIN_H
#define AMPC_CLI_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ampc/ampc.h"

/* presets in one --precision list */
enum { TRAIN_MAX_PRESETS = 8 };

typedef struct train_args {
  ampc_amp_config amp[TRAIN_MAX_PRESETS]; /* per preset: it with the precision flags */
  ampc_optim_config opt;
  ampc_mlp_config mc;
  int64_t steps, stop_at, batch, micro_batches, eval_every, log_every, save_every, ntrain, ntest;
  int64_t telemetry_every; /* telemetry every N iterations (0 = off) */
  bool no_anomaly_replay;  /* --anomaly-replay off */
  float sep;
  float w_itc, w_itm, w_cls, w_mlm, mlm_prob;
  float loss_multiplier; /* --loss-multiplier (1) */
  uint64_t seed;
  int threads;
  bool cosine, json, quiet, progress, no_eval;
  ampc_grad_reduce reduce;    /* --allreduce */
  bool check_replicas;        /* --check-replicas */
  int zero;                   /* --zero */
  bool overlap;               /* --overlap on */
  bool global_negatives;      /* --global-negatives */
  ampc_stall_policy on_stall; /* --on-stall */
  int64_t stall_steps;        /* --stall-steps (0: the default) */
  const char *log, *save, *resume, *model, *data;
  const char *hold_out_style; /* --hold-out-style (NULL: the file's split) */
  int64_t augment_shift;      /* --augment-shift (0: off) */
  int64_t patch;              /* --patch (0: the model's, scaled with the data) */
  bool itm_sampled;           /* --itm-negatives sampled (or random) */
  bool itm_random;            /* --itm-negatives random */
  ampc_device device;         /* --device (cpu) */
  bool keep_activations;      /* --recompute off */
  bool attn_cast;             /* --attention-cast on */
  bool model_given;           /* --model named (not the default mm-tiny) */
  /* --precision A,B,...: the presets in order (one: a single run) */
  int n_presets;
  char presets[TRAIN_MAX_PRESETS][32];
  bool fake_q8; /* --fake-quant int8 */
} train_args;

/* Parse the flags of `ampc train` (argv[0] is the command name) into *a and
 * check them, each preset of a --precision list with its own output paths
 * (train_run_paths); no training runs. Returns 0, or the exit code after
 * printing the message (AMPC_EXIT_USAGE). Besides the flags it only stats
 * the output paths and their directories. Not reentrant (the flag lists are
 * static). */
int train_parse_args(int argc, char **argv, train_args *a);

/* Run k's --log and --save paths into log and save (cap bytes each; "" for
 * none): as given for one preset; in a list the preset inserted before the
 * extension (run.jsonl -> run.16-mixed.jsonl), except a path that names a
 * directory or nothing, left as given for the run's own check to refuse. */
void train_run_paths(const train_args *a, int k, char *log, char *save, size_t cap);

/* What a run trains on, loaded from its flags: the dataset (or the MLP's
 * synthetic blobs) and the model (an image-only dataset turns the default
 * model into vit-fm). */
struct ampc_shards;
typedef struct train_inputs {
  ampc_dataset D; /* loaded here (owned) unless shared; a packed dataset's val split */
  bool owns_data;
  struct ampc_shards *shards; /* a packed dataset (owned with D), or NULL */
  float *x;                   /* the MLP's blobs: [n_train + n_test, in] features, labels */
  int32_t *y;
  ampc_run_data data;
  ampc_model_desc md;
} train_inputs;

/* Load a's data and model into *in. share: an earlier run's inputs whose
 * dataset (same --data and --hold-out-style) is used rather than loaded
 * again, or NULL. Returns 0; AMPC_EXIT_USAGE with *refused set and the
 * reason in why (not printed: a model the data cannot feed); or the exit code
 * after printing the message as cmd's (the data cannot be read, a style it
 * lacks, out of memory). */
int train_inputs_load(const char *cmd, const train_args *a, const train_inputs *share,
                      train_inputs *in, bool *refused, char *why, size_t cap);
void train_inputs_free(train_inputs *in);

/* The spec of a run with a's flags on in (label and paths unset: label NULL,
 * rc.log_path and rc.save_path a->log, a->save). */
void train_spec(const train_args *a, const train_inputs *in, ampc_compare_spec *s);

/* Prints what the runs report (the library never prints). */
typedef struct train_printer {
  const train_args *A; /* the current run's flags */
  FILE *out;           /* config, progress and evaluation lines */
  FILE *err;           /* warnings and stall reports */
  bool quiet;          /* no progress, evaluation or diagnosis lines */
  bool tty;            /* progress as one rewritten line on stderr */
  bool lead;           /* rank 0 (the others print nothing) */
  int64_t every;       /* progress lines every N steps */
} train_printer;

/* Point p at run flags A (out, err: where it prints) before the run
 * starts: progress on a terminal's stderr unless quiet, 20 lines a run. */
void train_printer_set(train_printer *p, const train_args *A, FILE *out, FILE *err, bool quiet,
                       bool lead);
/* The callbacks that print through p (user = p): the config line (and
 * warnings) when a run starts, its progress, evaluations and stalls; run_end
 * is left NULL for the command to fill. */
ampc_compare_callbacks train_printer_callbacks(train_printer *p);
/* The seconds left of a run at progress p: the steps left at the mean step
 * time, and the evaluations left at the mean evaluation time (0 for them
 * before the first: not known yet). */
double train_eta_s(const ampc_run_progress *p);
/* The run's diagnosis (its verdicts, evidence and safeguards) to out;
 * no_loss_gap (NULL: none) marks the verdicts present in the counts while
 * the loss shows no gap against the run named baseline. */
void train_print_verdicts(FILE *out, const ampc_verdict *v, int n, const bool *no_loss_gap,
                          const char *baseline);
#endif
