/*
 * bench/quant/int8_bench.c: one INT8 linear layer (ampc_linear_forward_s8,
 * dynamic and static activation scales) against the same layer in FP32
 * (ampc_linear_forward), and the INT8 GEMM alone against the FP32 GEMM, at
 * mm-tiny's shapes (rows = batch 64 x 65 vision tokens). Prints
 * milliseconds per call and GOP/s; results in docs/BENCHMARKS.md.
 *   bench_int8 [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampc/ampc.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double per_call(int reps, int what, int64_t m, int64_t k, int64_t n, const float *x,
                       const float *w, const float *b, float *y, ampc_linear_s8 *s,
                       ampc_scratch *ws, const int8_t *xq, int32_t *acc) {
  const double t0 = now_s();
  for (int r = 0; r < reps; r++) {
    ampc_status st = AMPC_OK;
    if (what == 0)
      st = ampc_linear_forward(m, k, n, x, AMPC_F32, w, AMPC_F32, b, y, AMPC_F32, AMPC_ACC_F32,
                               NULL);
    else if (what == 1 || what == 2)
      st = ampc_linear_forward_s8(m, k, n, x, AMPC_F32, s, b, AMPC_F32, y, AMPC_F32, ws);
    else if (what == 3)
      st = ampc_gemm(AMPC_OP_N, AMPC_OP_T, m, n, k, 1.0f, x, AMPC_F32, k, w, AMPC_F32, k, 0.0f, y,
                     AMPC_F32, n, AMPC_ACC_F32);
    else
      st = ampc_gemm_s8(m, n, k, xq, k, s->w, k, acc, n);
    if (st != AMPC_OK) {
      fprintf(stderr, "bench_int8: %s\n", ampc_last_error());
      exit(1);
    }
  }
  return (now_s() - t0) / reps;
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  static const int64_t shapes[4][3] = {
      {4160, 128, 384}, {4160, 128, 128}, {4160, 128, 512}, {4160, 512, 128}};
  printf("INT8 path: %s; %d threads; ms per call (GOP/s)\n",
         ampc_gemm_s8_path_name(ampc_gemm_s8_best()), ampc_get_num_threads());
  printf("%-18s %16s %16s %16s %16s %16s\n", "m x k -> n", "fp32 linear", "int8 dynamic",
         "int8 static", "sgemm", "gemm_s8");
  for (int sh = 0; sh < 4; sh++) {
    const int64_t m = shapes[sh][0], k = shapes[sh][1], n = shapes[sh][2];
    float *x = malloc((size_t)(m * k) * sizeof *x), *w = malloc((size_t)(n * k) * sizeof *w);
    float *b = calloc((size_t)n, sizeof *b), *y = malloc((size_t)(m * n) * sizeof *y);
    float *sc = malloc((size_t)n * sizeof *sc);
    int8_t *q = malloc((size_t)(n * k)), *xq = malloc((size_t)(m * k));
    int32_t *acc = malloc((size_t)(m * n) * sizeof *acc);
    ampc_scratch ws = {.bytes = ampc_linear_s8_ws_bytes(m, k, n)};
    ws.base = malloc(ws.bytes);
    if (!x || !w || !b || !y || !sc || !q || !xq || !acc || !ws.base)
      return 1;
    for (int64_t i = 0; i < m * k; i++)
      x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f, xq[i] = (int8_t)(i % 255 - 127);
    for (int64_t i = 0; i < n * k; i++)
      w[i] = (float)((i * 104729) % 1000) / 5000.0f - 0.1f;
    if (ampc_quant_weight_s8(w, n, k, AMPC_QUANT_CHANNEL, q, sc) != AMPC_OK)
      return 1;
    ampc_linear_s8 s = {.w = q, .scale = sc, .per_channel = true};
    double t[5];
    for (int v = 0; v < 5; v++) {
      s.x_scale = v == 2 ? 1.0f / 127.0f : 0.0f;
      (void)per_call(2, v, m, k, n, x, w, b, y, &s, &ws, xq, acc); /* warm */
      t[v] = per_call(reps, v, m, k, n, x, w, b, y, &s, &ws, xq, acc);
    }
    char name[32];
    snprintf(name, sizeof name, "%lldx%lld -> %lld", (long long)m, (long long)k, (long long)n);
    printf("%-18s", name);
    for (int v = 0; v < 5; v++)
      printf(" %7.3f (%6.1f)", 1e3 * t[v], 2.0 * (double)(m * n * k) / t[v] * 1e-9);
    printf("\n");
    free(x), free(w), free(b), free(y), free(sc), free(q), free(xq), free(acc), free(ws.base);
  }
  return 0;
}
