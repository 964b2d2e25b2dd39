/*
 * tools/ampc/main.c: the `ampc` command-line entry point and command table.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    &ampc_cmd_memory,  &ampc_cmd_plan,    &ampc_cmd_inspect,
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

/* A command that printed its result but could not write it has failed. */
static int finish(int rc) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "ampc: cannot write to stdout\n");
    return rc == AMPC_EXIT_OK ? AMPC_EXIT_ERROR : rc;
  }
  return rc;
}

/* AMPC_ISA selects the kernels (the library reads it once): portable, avx2,
 * or unset for the best the CPU has. Anything else is ignored by the library;
 * say so rather than run another path than the user asked for. */
static void check_isa_env(void) {
  const char *isa = getenv("AMPC_ISA");
  if (isa && *isa && strcmp(isa, "portable") != 0 && strcmp(isa, "avx2") != 0)
    fprintf(stderr,
            "ampc: warning: AMPC_ISA=%s is not one of portable, avx2 (lower case): ignored, "
            "using the best path this CPU has\n",
            isa);
}

int main(int argc, char **argv) {
  /* progress lines appear as they are printed, also through a pipe (`| tee`),
   * where stdio would otherwise hold them back in a 4 KiB block */
  setvbuf(stdout, NULL, _IOLBF, 0);
  check_isa_env();
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
      for (int j = 2; j < argc && strcmp(argv[j], "--") != 0; j++) {
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
