/*
 * tools/ampc/cli.c: error printing and JSON output shared by the subcommands.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void vreport(const char *cmd, const char *fmt, va_list ap) {
  fprintf(stderr, "ampc%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(cmd, fmt, ap);
  va_end(ap);
  fprintf(stderr, "Try 'ampc%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
  return AMPC_EXIT_USAGE;
}

int cli_runtime_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(cmd, fmt, ap);
  va_end(ap);
  return AMPC_EXIT_ERROR;
}

int cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

int cli_print_json(const char *cmd, cJSON *obj) {
  char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
  cJSON_Delete(obj);
  if (!s)
    return cli_runtime_error(cmd, "out of memory while writing JSON");
  puts(s);
  cJSON_free(s);
  return fflush(stdout) == 0 ? AMPC_EXIT_OK : cli_runtime_error(cmd, "cannot write to stdout");
}
