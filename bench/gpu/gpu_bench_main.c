/* bench/gpu/gpu_bench_main.c: `gpu_bench gemm --device cuda [--json] [--reps
 * R] [--quick]`, the GPU check build's copy of `ampc bench gemm --device
 * cuda` (the same benchmark, the CUDA backend's src/backend/cuda/cuda_bench.c
 * through ampc_device_bench_gemm, without the rest of the CLI and its
 * libraries). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/backend.h"

static void print_line(void *user, const char *line) {
  (void)user;
  printf("%s\n", line);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "gemm") != 0) {
    fprintf(stderr, "usage: gpu_bench gemm --device cuda [--json] [--reps R] [--quick]\n");
    return 2;
  }
  bool json = false, quick = false;
  int reps = 5;
  ampc_device dev = AMPC_DEVICE_CUDA;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      if (ampc_device_parse(argv[++i], &dev) != AMPC_OK) {
        fprintf(stderr, "gpu_bench gemm: %s\n", ampc_last_error());
        return 2;
      }
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      char *end;
      const long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 101) {
        fprintf(stderr, "gpu_bench gemm: --reps needs a number in 1..101\n");
        return 2;
      }
      reps = (int)v;
    } else {
      fprintf(stderr, "gpu_bench gemm: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (ampc_device_bench_gemm(dev, reps, quick, json, print_line, NULL) != AMPC_OK) {
    fprintf(stderr, "gpu_bench gemm: %s\n", ampc_last_error());
    return 1;
  }
  return 0;
}
