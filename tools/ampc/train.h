/*
 * tools/ampc/train.h: the flags of `ampc train` (the run itself is the
 * library's: include/ampc/train.h), shared with `ampc compare`, which checks
 * every run's flags before it starts any.
 */
#ifndef AMPC_CLI_TRAIN_H
#define AMPC_CLI_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ampc/ampc.h"

typedef struct train_args {
  ampc_amp_config amp;
  ampc_optim_config opt;
  ampc_mlp_config mc;
  int64_t steps, stop_at, batch, micro_batches, eval_every, log_every, save_every, ntrain, ntest;
  int64_t telemetry_every; /* telemetry every N iterations (0 = off) */
  float sep;
  float w_itc, w_itm, w_cls, w_mlm, mlm_prob;
  float loss_multiplier; /* --loss-multiplier (1) */
  uint64_t seed;
  int threads;
  bool cosine, json, quiet, progress, no_eval;
  ampc_grad_reduce reduce;    /* --allreduce */
  bool check_replicas;        /* --check-replicas */
  bool global_negatives;      /* --global-negatives */
  ampc_stall_policy on_stall; /* --on-stall */
  int64_t stall_steps;        /* --stall-steps (0: the default) */
  const char *log, *save, *resume, *model, *data;
  const char *hold_out_style; /* --hold-out-style (NULL: the file's split) */
  int64_t augment_shift;      /* --augment-shift (0: off) */
  bool itm_sampled;           /* --itm-negatives sampled (or random) */
  bool itm_random;            /* --itm-negatives random */
  ampc_device device;         /* --device (cpu) */
  bool keep_activations;      /* --recompute off */
  bool attn_cast;             /* --attention-cast on */
  bool model_given;           /* --model named (not the default mm-tiny) */
} train_args;

/* Parse the flags of `ampc train` (argv[0] is the command name) into *a and
 * check them; no training runs. Returns 0, or the exit code after printing
 * the message (AMPC_EXIT_USAGE). Besides the flags it only stats --save's
 * path and directory. Not reentrant (the flag lists are static). */
int train_parse_args(int argc, char **argv, train_args *a);

/* Parse `ampc train` arguments (argv[0] the command name) without running:
 * AMPC_EXIT_OK, or AMPC_EXIT_USAGE after printing the error. */
int train_check_args(int argc, char **argv);
#endif
