/*
 * src/backend/cuda/cuda_bench.c: the CUDA backend's GEMM benchmark (`ampc
 * bench gemm --device cuda [--json] [--reps R] [--quick]`, through
 * ampc_device_bench_gemm): cuBLASLt GEMM throughput per mode on GPU 0. The
 * report's lines go to the caller's emit function (the library prints
 * nothing itself).
 *
 * Every shape runs in the layout FP8 needs (row-major C = A B^T, both
 * operands K-contiguous: cuBLASLt's "TN"), so all modes are compared on the
 * same problem; the models' other products are brought to it by a transpose,
 * as Transformer Engine does for FP8. Per repetition every mode runs once
 * (interleaved); a timed run repeats the GEMM until it lasts >= 10 ms (CUDA
 * events on the stream); the median of R repetitions is reported.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ampc/backend.h"
#include "backend/cuda/cuda.h"

typedef struct gshape {
  int64_t m, n, k;
  const char *label;
  int quick;
} gshape;

/* squares; mm-tiny's products at batch 128 x 64 tokens (M = 8192, width 128,
 * MLP 512; dW products have K = 8192); and a width-768 model of the size
 * planned for mm-base (8320 = 128 x 65 tokens; QKV 2304, MLP 3072) */
static const gshape k_gshapes[] = {
    {1024, 1024, 1024, "square", 1},          {2048, 2048, 2048, "square", 0},
    {4096, 4096, 4096, "square", 0},          {8192, 8192, 8192, "square", 0},
    {8192, 384, 128, "mm-tiny qkv", 1},       {8192, 512, 128, "mm-tiny mlp-up", 0},
    {8192, 128, 512, "mm-tiny mlp-down", 0},  {384, 128, 8192, "mm-tiny dW qkv", 0},
    {512, 128, 8192, "mm-tiny dW mlp-up", 0}, {8320, 2304, 768, "w768 qkv", 0},
    {8320, 768, 768, "w768 attn-out", 0},     {8320, 3072, 768, "w768 mlp-up", 0},
    {8320, 768, 3072, "w768 mlp-down", 0},    {2304, 768, 8320, "w768 dW qkv", 0},
    {3072, 768, 8320, "w768 dW mlp-up", 0},   {768, 3072, 8320, "w768 dW mlp-down", 0},
};

typedef struct gmode {
  const char *name;
  ampc_dtype a, b, c;
  ampc_cuda_compute compute;
  int peak; /* index into the peak table */
} gmode;

enum { PEAK_16 = 0, PEAK_FP8 = 1, PEAK_TF32 = 2, PEAK_F32 = 3 };
static const gmode k_gmodes[] = {
    {"f16", AMPC_F16, AMPC_F16, AMPC_F16, AMPC_CUDA_COMPUTE_32F, PEAK_16},
    {"bf16", AMPC_BF16, AMPC_BF16, AMPC_BF16, AMPC_CUDA_COMPUTE_32F, PEAK_16},
    {"f16-acc16", AMPC_F16, AMPC_F16, AMPC_F16, AMPC_CUDA_COMPUTE_16F, PEAK_16},
    {"fp8", AMPC_F8_E4M3, AMPC_F8_E4M3, AMPC_BF16, AMPC_CUDA_COMPUTE_32F, PEAK_FP8},
    {"fp8-e5m2", AMPC_F8_E4M3, AMPC_F8_E5M2, AMPC_BF16, AMPC_CUDA_COMPUTE_32F, PEAK_FP8},
    {"tf32", AMPC_F32, AMPC_F32, AMPC_F32, AMPC_CUDA_COMPUTE_32F_FAST_TF32, PEAK_TF32},
    {"f32", AMPC_F32, AMPC_F32, AMPC_F32, AMPC_CUDA_COMPUTE_32F_PEDANTIC, PEAK_F32},
};
enum { NGMODES = sizeof k_gmodes / sizeof k_gmodes[0], F32_MODE = NGMODES - 1, MAXR = 101 };

/* dense peaks in TFLOP/s (NVIDIA's H100/H200 SXM datasheets; without
 * sparsity): FP16/BF16 989.4, FP8 1978.9, TF32 494.7, FP32 (no Tensor Cores)
 * 66.9. Only for GPUs named H100 or H200 (SXM); elsewhere no fraction. */
static const double k_hopper_peak[4] = {989.4, 1978.9, 494.7, 66.9};

static int cmp_f(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* what failed, with the CUDA call's message; returns 1 (the loops' rc) */
static int fail(ampc_status *st, const char *what) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", ampc_last_error());
  *st = ampc_fail(AMPC_ERR_DEVICE, "%s: %s", what, msg);
  return 1;
}

/* one line of the report to emit (without its newline) */
static void emitf(ampc_emit_fn emit, void *user, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void emitf(ampc_emit_fn emit, void *user, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  emit(user, line);
}

ampc_status ampc_cuda_bench_gemm(int reps, bool quick, bool json, ampc_emit_fn emit, void *user);

ampc_status ampc_cuda_bench_gemm(int reps, bool quick, bool json, ampc_emit_fn emit, void *user) {
  ampc_status st_out = AMPC_OK;
  ampc_cuda_device_info info;
  if (ampc_cuda_device_info_get(0, &info) != AMPC_OK)
    return fail(&st_out, "device"), st_out;
  ampc_cuda_ctx *ctx;
  if (ampc_cuda_create(0, 0, &ctx) != AMPC_OK)
    return fail(&st_out, "context"), st_out;
  const int hopper = strstr(info.name, "H100") || strstr(info.name, "H200");
  const int fp8_ok = info.cc_major * 10 + info.cc_minor >= 89;

  cJSON *root = cJSON_CreateObject(), *res = cJSON_CreateArray();
  cJSON *dev = cJSON_AddObjectToObject(root, "device");
  cJSON_AddStringToObject(dev, "name", info.name);
  char cc[16];
  snprintf(cc, sizeof cc, "%d.%d", info.cc_major, info.cc_minor);
  cJSON_AddStringToObject(dev, "compute_capability", cc);
  cJSON_AddNumberToObject(dev, "sm_count", info.sm_count);
  cJSON_AddNumberToObject(dev, "memory_bytes", (double)info.total_mem_bytes);
  cJSON_AddNumberToObject(dev, "driver_version", info.driver_version);
  cJSON_AddNumberToObject(dev, "runtime_version", info.runtime_version);
  cJSON_AddNumberToObject(dev, "cublaslt_version", (double)info.cublaslt_version);
  cJSON_AddNumberToObject(root, "reps", reps);
  cJSON_AddStringToObject(root, "op", "NT");
  cJSON_AddItemToObject(root, "results", res);
  if (!json) {
    emitf(emit, user,
          "# ampc bench gemm --device cuda: TFLOP/s (median of %d), %s (cc %s, %d SMs), "
          "driver %d, runtime %d, cuBLASLt %zu; C = A B^T (TN)",
          reps, info.name, cc, info.sm_count, info.driver_version, info.runtime_version,
          info.cublaslt_version);
    emit(user,
         "| M | N | K | shape | fills | f16 | bf16 | f16-acc16 | fp8 | fp8-e5m2 | tf32 | f32 | "
         "f16/f32 | bf16/f32 | f16 %peak | bf16 %peak | fp8 %peak |");
    emit(user, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
  }
  int rc = 0;
  for (size_t si = 0; si < sizeof k_gshapes / sizeof k_gshapes[0] && rc == 0; si++) {
    const gshape *s = &k_gshapes[si];
    if (quick && !s->quick)
      continue;
    void *a[NGMODES] = {0}, *b[NGMODES] = {0}, *c[NGMODES] = {0};
    int on[NGMODES];
    for (int md = 0; md < NGMODES; md++) {
      const gmode *g = &k_gmodes[md];
      on[md] = fp8_ok || g->a != AMPC_F8_E4M3;
      if (!on[md])
        continue;
      if (ampc_cuda_malloc(ctx, (size_t)(s->m * s->k) * ampc_dtype_size(g->a), &a[md]) ||
          ampc_cuda_malloc(ctx, (size_t)(s->n * s->k) * ampc_dtype_size(g->b), &b[md]) ||
          ampc_cuda_malloc(ctx, (size_t)(s->m * s->n) * ampc_dtype_size(g->c), &c[md]) ||
          ampc_cuda_fill_uniform(ctx, a[md], g->a, s->m * s->k, -1.0f, 1.0f, 1) ||
          ampc_cuda_fill_uniform(ctx, b[md], g->b, s->n * s->k, -1.0f, 1.0f, 2)) {
        rc = fail(&st_out, "buffers");
        break;
      }
    }
    float ms[NGMODES][MAXR];
    int inner[NGMODES];
    for (int md = 0; md < NGMODES && rc == 0; md++) {
      inner[md] = 1;
      if (!on[md])
        continue;
      const gmode *g = &k_gmodes[md];
      ampc_cuda_gemm_args ga = ampc_cuda_gemm_args_default();
      ga.opa = AMPC_OP_N, ga.opb = AMPC_OP_T, ga.m = s->m, ga.n = s->n, ga.k = s->k;
      ga.a = a[md], ga.a_dt = g->a, ga.lda = s->k, ga.b = b[md], ga.b_dt = g->b, ga.ldb = s->k;
      ga.c = c[md], ga.c_dt = g->c, ga.ldc = s->n, ga.compute = g->compute;
      float t1 = 0;
      /* warm-up (the heuristic query), then size the timed run */
      if (ampc_cuda_gemm(ctx, &ga) || ampc_cuda_synchronize(ctx) || ampc_cuda_timer_start(ctx) ||
          ampc_cuda_gemm(ctx, &ga) || ampc_cuda_timer_stop(ctx, &t1)) {
        rc = fail(&st_out, g->name);
        break;
      }
      inner[md] = t1 >= 10.0f ? 1 : (int)(10.0f / (t1 > 1e-3f ? t1 : 1e-3f)) + 1;
    }
    for (int r = 0; r < reps && rc == 0; r++)
      for (int md = 0; md < NGMODES && rc == 0; md++) {
        if (!on[md])
          continue;
        const gmode *g = &k_gmodes[md];
        ampc_cuda_gemm_args ga = ampc_cuda_gemm_args_default();
        ga.opa = AMPC_OP_N, ga.opb = AMPC_OP_T, ga.m = s->m, ga.n = s->n, ga.k = s->k;
        ga.a = a[md], ga.a_dt = g->a, ga.lda = s->k, ga.b = b[md], ga.b_dt = g->b;
        ga.ldb = s->k, ga.c = c[md], ga.c_dt = g->c, ga.ldc = s->n, ga.compute = g->compute;
        float t = 0;
        ampc_status st = ampc_cuda_timer_start(ctx);
        for (int it = 0; it < inner[md] && st == AMPC_OK; it++)
          st = ampc_cuda_gemm(ctx, &ga);
        if (st == AMPC_OK)
          st = ampc_cuda_timer_stop(ctx, &t);
        if (st != AMPC_OK)
          rc = fail(&st_out, g->name);
        ms[md][r] = t / (float)inner[md];
      }
    double tf[NGMODES] = {0};
    cJSON *obj[NGMODES] = {0};
    const double flop = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    const int fills = (s->m / 128) * (s->n / 128) >= info.sm_count;
    for (int md = 0; md < NGMODES && rc == 0; md++) {
      if (!on[md])
        continue;
      qsort(ms[md], (size_t)reps, sizeof ms[md][0], cmp_f);
      const double med = (double)ms[md][reps / 2];
      tf[md] = flop / (med * 1e-3) * 1e-12;
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "m", (double)s->m);
      cJSON_AddNumberToObject(o, "n", (double)s->n);
      cJSON_AddNumberToObject(o, "k", (double)s->k);
      cJSON_AddStringToObject(o, "shape", s->label);
      cJSON_AddBoolToObject(o, "fills_gpu", fills);
      cJSON_AddStringToObject(o, "mode", k_gmodes[md].name);
      cJSON_AddStringToObject(o, "a", ampc_dtype_name(k_gmodes[md].a));
      cJSON_AddStringToObject(o, "b", ampc_dtype_name(k_gmodes[md].b));
      cJSON_AddStringToObject(o, "c", ampc_dtype_name(k_gmodes[md].c));
      cJSON_AddNumberToObject(o, "ms_median", med);
      cJSON_AddNumberToObject(o, "tflops", tf[md]);
      if (hopper)
        cJSON_AddNumberToObject(o, "peak_fraction", tf[md] / k_hopper_peak[k_gmodes[md].peak]);
      cJSON_AddItemToArray(res, o);
      obj[md] = o;
    }
    for (int md = 0; md < NGMODES && rc == 0; md++)
      if (obj[md] && tf[F32_MODE] > 0)
        cJSON_AddNumberToObject(obj[md], "ratio_vs_f32_pedantic", tf[md] / tf[F32_MODE]);
    if (!json && rc == 0) {
      char line[1024];
      size_t at = 0;
#define ADD(...)                                                                                   \
  at += (size_t)snprintf(line + at, at < sizeof line ? sizeof line - at : 0, __VA_ARGS__)
      ADD("| %lld | %lld | %lld | %s | %s |", (long long)s->m, (long long)s->n, (long long)s->k,
          s->label, fills ? "yes" : "no");
      for (int md = 0; md < NGMODES; md++)
        ADD(on[md] ? " %.1f |" : " - |", tf[md]);
      ADD(" %.2f | %.2f |", tf[0] / tf[F32_MODE], tf[1] / tf[F32_MODE]);
      if (hopper)
        ADD(" %.0f %% | %.0f %% | %.0f %% |", 100 * tf[0] / k_hopper_peak[PEAK_16],
            100 * tf[1] / k_hopper_peak[PEAK_16], 100 * tf[3] / k_hopper_peak[PEAK_FP8]);
      else
        ADD(" - | - | - |");
#undef ADD
      emit(user, line);
    }
    for (int md = 0; md < NGMODES; md++) {
      ampc_cuda_free(ctx, a[md]);
      ampc_cuda_free(ctx, b[md]);
      ampc_cuda_free(ctx, c[md]);
    }
  }
  if (rc == 0 && json) {
    char *txt = cJSON_PrintUnformatted(root);
    if (txt)
      emit(user, txt);
    free(txt);
  }
  cJSON_Delete(root);
  ampc_cuda_destroy(ctx);
  return rc ? st_out : AMPC_OK;
}
