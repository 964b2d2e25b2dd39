/*
 * bench/convert_bench.c: array conversion throughput against memcpy.
 *
 * Usage: build/bench/bench_convert [MiB] [reps]   (defaults 64 MiB, 11 reps)
 *
 * Converts an FP32 buffer of MiB mebibytes (and 16-bit buffers of half that,
 * holding the same number of elements) FP32->F16, F16->FP32, FP32->BF16,
 * BF16->FP32 on one thread, and memcpy's the FP32 buffer. The operations are
 * interleaved in every repetition so that they see the same machine state;
 * the table reports the median over repetitions. "traffic" counts bytes read
 * plus bytes written (e.g. 64 + 32 MiB for FP32->F16, 64 + 64 MiB for memcpy);
 * the goal is traffic rate >= 0.9x memcpy's.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampc/ampc.h"
#include "numeric/convert_impl.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { OPS = 11, MAXREP = 101 };

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  int reps = argc > 2 ? atoi(argv[2]) : 11;
  if (mib == 0 || reps < 1 || reps > MAXREP) {
    fprintf(stderr, "usage: bench_convert [MiB >= 1] [reps 1..%d]\n", MAXREP);
    return 2;
  }
  const size_t n = mib * 1024 * 1024 / 4;
  float *f = aligned_alloc(64, n * 4), *g = aligned_alloc(64, n * 4);
  uint16_t *h = aligned_alloc(64, n * 2);
  if (!f || !g || !h) {
    fprintf(stderr, "bench_convert: cannot allocate %zu MiB\n", mib * 3);
    return 1;
  }
  for (size_t i = 0; i < n; i++)
    f[i] = (float)((double)i * 1e-3 - 1000.0);
  memset(g, 0, n * 4);
  memset(h, 0, n * 2);

  /* the operations, for every kernel table this CPU can run */
  struct op {
    char name[40];
    int kind; /* 0 memcpy, 1 f32->f16, 2 f16->f32, 3 f32->bf16, 4 bf16->f32,
               * 5 f32->f16 with telemetry, 6 f32->bf16 with telemetry */
    const ampc_convert_kernels *k;
    double t[MAXREP];
  } ops[OPS];
  int nops = 0;
  ops[nops++] = (struct op){.name = "memcpy", .kind = 0};
  const ampc_convert_kernels *ks[2] = {&ampc_convert_avx2, &ampc_convert_portable};
  static const char *const kind_names[5] = {"", "f32->f16", "f16->f32", "f32->bf16", "bf16->f32"};
  for (int ki = ampc_cpu_has_avx2_f16c() ? 0 : 1; ki < 2; ki++)
    for (int kind = 1; kind <= 4; kind++) {
      ops[nops] = (struct op){.kind = kind, .k = ks[ki]};
      snprintf(ops[nops].name, sizeof ops[nops].name, "%s %s", kind_names[kind], ks[ki]->isa);
      nops++;
    }
  if (ampc_cpu_has_avx2_f16c()) { /* ampc_store_f32 with rounding statistics */
    ops[nops] = (struct op){.kind = 5};
    snprintf(ops[nops].name, sizeof ops[nops].name, "f32->f16 +telemetry");
    nops++;
    ops[nops] = (struct op){.kind = 6};
    snprintf(ops[nops].name, sizeof ops[nops].name, "f32->bf16 +telemetry");
    nops++;
  }
  ampc_round_stats rs = {0};
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up, not recorded */
    for (int i = 0; i < nops; i++) {
      const ampc_convert_kernels *k = ops[i].k;
      double t0 = now_s();
      switch (ops[i].kind) {
      case 0: memcpy(g, f, n * 4); break;
      case 1: k->f32_to_f16(h, f, n); break;
      case 2: k->f16_to_f32(g, h, n); break;
      case 3: k->f32_to_bf16(h, f, n); break;
      case 4: k->bf16_to_f32(g, h, n); break;
      case 5: ampc_store_f32(h, AMPC_F16, f, n, &rs); break;
      case 6: ampc_store_f32(h, AMPC_BF16, f, n, &rs); break;
      }
      double dt = now_s() - t0;
      if (r >= 0)
        ops[i].t[r] = dt;
    }
  }
  printf("# bench_convert: %zu MiB FP32 buffer (%zu elements), 1 thread, median of %d reps\n", mib,
         n, reps);
  printf("| operation | median ms | traffic GB/s | vs memcpy |\n|---|---:|---:|---:|\n");
  double base = 0;
  for (int i = 0; i < nops; i++) {
    qsort(ops[i].t, (size_t)reps, sizeof(double), cmp_d);
    const double med = ops[i].t[reps / 2];
    const double bytes_per_elem = ops[i].kind == 0 ? 8.0 : 6.0; /* read + write */
    const double gbs = bytes_per_elem * (double)n / med / 1e9;
    if (i == 0)
      base = gbs;
    printf("| %s | %.2f | %.2f | %.2fx |\n", ops[i].name, med * 1e3, gbs, gbs / base);
  }
  free(f);
  free(g);
  free(h);
  return 0;
}
