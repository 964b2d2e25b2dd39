/*
 * tools/ampc/main.c: the `ampc` command-line entry point and command table.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/ampc.h"

#ifdef AMPC_CLI_LITE /* bench/gpu's ampc-gpu: what the GPU check runs, without plotting */
static const ampc_command *const k_commands[] = {
    &ampc_cmd_train,
    &ampc_cmd_diagnose,
    &ampc_cmd_memory,
    &ampc_cmd_plan,
};
#else
static const ampc_command *const k_commands[] = {
    &ampc_cmd_formats, &ampc_cmd_convert, &ampc_cmd_bench,    &ampc_cmd_train,
    &ampc_cmd_eval,    &ampc_cmd_data,    &ampc_cmd_diagnose, &ampc_cmd_compare,
    &ampc_cmd_memory,  &ampc_cmd_plan,    &ampc_cmd_inspect,  &ampc_cmd_quantize,
};
#endif
enum { N_COMMANDS = sizeof k_commands / sizeof k_commands[0] };

static void print_usage(FILE *f) {
  fprintf(f,
          "ampc %s: mixed-precision training of multimodal networks\n"
          "\n"
          "Usage: ampc <command> [options]\n"
          "       ampc <command> --help\n"
          "       ampc --version\n"
          "\n"
          "Commands:\n",
          AMPC_VERSION_STRING);
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", k_commands[i]->name, k_commands[i]->summary);
  fprintf(f, "\nExit status: 0 success, 1 runtime error, 2 bad usage.\n");
}

/* OpenMP's wait policy. libgomp's default lets an idle thread spin about
 * 300000 rounds at every barrier before it sleeps; when another process
 * holds a core, the spinning thread burns the time slice its partner
 * needs, and the main job's step ran several times slower than with
 * passive waiting (bench/load/run.sh, docs/BENCHMARKS.md). So ampc waits
 * passively unless the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT set).
 * libgomp reads the environment once, in its constructor, before main; a
 * setenv in an executable's .preinit_array is undone when libc's own
 * initialisation sets environ afterwards, so the way that holds is to set
 * the variable and execute this program again (/proc/self/exe, the same
 * arguments). Where that fails, the run goes on with libgomp's default. A
 * program linking libampc itself chooses its own policy. */
static void set_wait_policy(char **argv) {
  const char *w = getenv("OMP_WAIT_POLICY"), *c = getenv("GOMP_SPINCOUNT");
  if ((w && *w) || (c && *c))
    return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
    execv("/proc/self/exe", argv); /* returns only on failure */
}

/* A command that printed its result but could not write it has failed. */
static int finish(int rc) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "ampc: cannot write to stdout\n");
    return rc == AMPC_EXIT_OK ? AMPC_EXIT_ERROR : rc;
  }
  return rc;
}

/* The environment switches the library reads once (docs/CLI.md): a value it
 * does not know leaves the switch at its default without a word from the
 * library, so say so here rather than run another path than the user asked
 * for. Unset or empty: the default. */
typedef ampc_env_switch env_switch; /* name, the values the library knows, otherwise */

/* the CPU engine's; each device's backend lists its own (ampc_device_desc) */
static const env_switch k_env_switches[] = {
    {"AMPC_ISA", {"portable", "avx2", NULL}, "ignored, using the best path this CPU has"},
    {"AMPC_GEMM_F32", {"openblas", NULL}, "F32 products stay on ampc's kernel"},
    {"AMPC_GEMM_BF16DOT", {"0", "1", NULL}, "bf16 products use VDPBF16PS where the CPU has it"},
};

/* v as it can be shown on one line: printable ASCII kept, other bytes as
 * \xNN, cut after 40 bytes ("...") */
static const char *shown(const char *v, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (size_t i = 0; v[i] && at + 8 < cap; i++) {
    const unsigned char ch = (unsigned char)v[i];
    if (i == 40) {
      snprintf(buf + at, cap - at, "...");
      break;
    }
    const int n = ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\''
                      ? snprintf(buf + at, cap - at, "%c", ch)
                      : snprintf(buf + at, cap - at, "\\x%02x", ch);
    at += n > 0 ? (size_t)n : 0;
  }
  return buf;
}

static void check_env_one(const env_switch *e) {
  const char *v = getenv(e->name);
  if (!v || !*v)
    return;
  bool known = false;
  char list[64] = "", val[200];
  for (int j = 0; e->values[j]; j++) {
    known = known || strcmp(v, e->values[j]) == 0;
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "", e->values[j]);
  }
  if (!known)
    fprintf(stderr, "ampc: warning: %s='%s' is not one of %s: %s\n", e->name,
            shown(v, val, sizeof val), list, e->otherwise);
}

static void check_env(void) {
  for (size_t i = 0; i < sizeof k_env_switches / sizeof k_env_switches[0]; i++)
    check_env_one(&k_env_switches[i]);
  for (int d = 0; ampc_device_desc_get((ampc_device)d); d++) {
    const ampc_device_desc *dd = ampc_device_desc_get((ampc_device)d);
    for (int i = 0; i < dd->n_env; i++)
      check_env_one(&dd->env[i]);
  }
}

int main(int argc, char **argv) {
  /* progress lines appear as they are printed, also through a pipe (`| tee`),
   * where stdio would otherwise hold them back in a 4 KiB block */
  setvbuf(stdout, NULL, _IOLBF, 0);
  set_wait_policy(argv);
  check_env();
  if (argc < 2) {
    print_usage(stderr);
    return AMPC_EXIT_USAGE;
  }
  if (cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
    print_usage(stdout);
    return finish(AMPC_EXIT_OK);
  }
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
    printf("ampc %s\n", AMPC_VERSION_STRING);
    return finish(AMPC_EXIT_OK);
  }
  for (int i = 0; i < N_COMMANDS; i++) {
    const ampc_command *c = k_commands[i];
    if (strcmp(argv[1], c->name) == 0) {
      /* `ampc data pack --help`: the subcommand's own reference */
      const bool sub_help = argc > 2 && !strcmp(c->name, "data") && !strcmp(argv[2], "pack");
      for (int j = 2; j < argc && strcmp(argv[j], "--") != 0 && !sub_help; j++) {
        if (cli_is_help(argv[j])) {
          fputs(c->usage, stdout);
          if (c->usage_more)
            fputs(c->usage_more, stdout);
          if (c->usage_tail)
            fputs(c->usage_tail, stdout);
          return finish(AMPC_EXIT_OK);
        }
      }
      int rc = c->run(argc - 1, argv + 1);
      return finish(rc);
    }
  }
  return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
}
