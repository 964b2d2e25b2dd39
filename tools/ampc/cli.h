/*
 * tools/ampc/cli.h: shared helpers for the ampc subcommands. The command-line
 * layer is the only one that prints for users and decides exit codes:
 * 0 success, 1 runtime error (message names the file or value), 2 bad usage.
 */
#ifndef AMPC_CLI_H
#define AMPC_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include "internal.h"

#include "ampc/backend.h"

/* 3: `ampc train` stopped a run that could no longer learn (--on-stall stop) */
enum { AMPC_EXIT_OK = 0, AMPC_EXIT_ERROR = 1, AMPC_EXIT_USAGE = 2, AMPC_EXIT_STALLED = 3 };

typedef struct ampc_command {
  const char *name;
  const char *summary;
  const char *usage;                 /* full help text printed by `ampc <name> --help` */
  int (*run)(int argc, char **argv); /* argv[0] is the command name */
  const char *usage_more;            /* the help text's continuation, or NULL (C99 compilers
                                        need not take a literal over 4095 characters) */
  const char *usage_tail;            /* its end, or NULL */
} ampc_command;

extern const ampc_command ampc_cmd_formats;
extern const ampc_command ampc_cmd_convert;
extern const ampc_command ampc_cmd_bench;
extern const ampc_command ampc_cmd_train;
extern const ampc_command ampc_cmd_eval;
extern const ampc_command ampc_cmd_data;
/* `ampc data pack` (tools/ampc/cmd_pack.c) and its usage text */
int cmd_data_pack(int argc, char **argv);
extern const char ampc_pack_usage[];
extern const ampc_command ampc_cmd_diagnose;
extern const ampc_command ampc_cmd_compare;
extern const ampc_command ampc_cmd_memory;
extern const ampc_command ampc_cmd_plan;
extern const ampc_command ampc_cmd_inspect;
extern const ampc_command ampc_cmd_quantize;

/* Print "ampc <cmd>: <message>" and a hint to stderr; returns AMPC_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) AMPC_PRINTF(2, 3);
/* true: cli_usage_error prints nothing (the ranks but 0 of a data-parallel
 * job, which all see the same flags: one copy of the message is enough) */
extern bool cli_quiet_usage;
/* non-NULL: cli_usage_error prints it in parentheses after the message,
 * before the hint (which run of a --precision list the error is in) */
extern const char *cli_usage_context;
/* Print "ampc <cmd>: <message>" to stderr; returns AMPC_EXIT_ERROR. */
int cli_runtime_error(const char *cmd, const char *fmt, ...) AMPC_PRINTF(2, 3);
/* The usage error (exit 2) of cmd for an unknown --model name, listing the
 * names ampc knows (ampc_mmodel_list; with_mlp: and "mlp"). */
int cli_unknown_model(const char *cmd, const char *name, bool with_mlp);
/* --recompute on|off (train, memory, plan, bench step): *keep = (v is
 * "off"), 0; anything else is a usage error of cmd (exit 2). */
int cli_parse_recompute(const char *cmd, const char *v, bool *keep);
/* --device NAME: the registry's names (ampc_device_parse), its test aids
 * (cpu-split) only with with_tests; else a usage error listing them */
int cli_parse_device(const char *cmd, const char *v, bool with_tests, ampc_device *dev);
/* --attention-cast on|off (train, memory, plan): *on = (v is "on"), 0;
 * anything else is a usage error of cmd (exit 2). */
int cli_parse_attention_cast(const char *cmd, const char *v, bool *on);
/* The option at argv[*i] of cmd: "--name value" or "--name=value", or a
 * bare flag (is_flag(name) true: *value NULL, "=value" refused). name gets
 * the name without its dashes (cap bytes). *i moves past a separate value.
 * Returns 0, or a usage error (exit 2): "unexpected argument", "unknown
 * option" (a name too long), "--x takes no value", "--x needs a value", "--x
 * needs a value (got the flag --y)". */
int cli_next_option(const char *cmd, int argc, char **argv, int *i, bool (*is_flag)(const char *),
                    char *name, size_t cap, const char **value);
/* True for "-h" and "--help". */
int cli_is_help(const char *arg);

/* Whether paths a and b name the same file: the same text, the same file
 * (device and inode) where both exist, or the same name in the same
 * directory (directories resolved with realpath) where they do not yet. So
 * `--log ./c.st` is caught against `--resume c.st`, and an output that is a
 * hard link or symlink to an input too. NULL: false. */
bool cli_same_file(const char *a, const char *b);
/* Print a cJSON object on one line to stdout and free it; AMPC_EXIT_ERROR if
 * it could not be built. */
struct cJSON;
int cli_print_json(const char *cmd, struct cJSON *obj);
/* Load the dataset named by --data: emoji (embedded), fashion-mnist[:DIR]
 * (Debian's dataset-fashion-mnist), or a dataset file. 0, or the exit code
 * after printing "ampc <cmd>: <why>" (the message names the file). */
struct ampc_dataset;
int cli_load_data(const char *cmd, const char *name, struct ampc_dataset *d);
/* Is `name` a packed dataset (a folder, which must hold manifest.json, or a
 * .json file; never the bundled names emoji and fashion-mnist[:DIR])?
 * cli_load_data then gives its val split (at most CLI_PACK_EVAL_SAMPLES
 * samples: retrieval ranks every image against every caption). */
bool cli_is_pack(const char *name);
enum { CLI_PACK_EVAL_SAMPLES = 5000 };
/* Make `style` the held-out (new-style) split of d (ampc_dataset_hold_out_style);
 * a usage error (exit 2) naming the data's styles when it has no such style. */
int cli_hold_out_style(const char *cmd, const char *style, struct ampc_dataset *d);

#endif
