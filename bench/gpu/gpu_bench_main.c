/* bench/gpu/gpu_bench_main.c: `gpu_bench gemm --device cuda [--json] [--reps
 * R] [--quick]`, the GPU check build's copy of `ampc bench gemm --device
 * cuda` (the same code, tools/ampc/cmd_bench_cuda.c, without the rest of the
 * CLI and its libraries). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpu_bench %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "gemm") != 0) {
    fprintf(stderr, "usage: gpu_bench gemm --device cuda [--json] [--reps R] [--quick]\n");
    return 2;
  }
  return cli_bench_gemm_cuda(argc - 1, argv + 1);
}
