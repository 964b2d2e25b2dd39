/*
 * tools/ampc/cmd_bench.c: `ampc bench gemm [--json] [--threads N] [--reps R] [--quick]`
 * and `ampc bench step` (whole training steps of mm-tiny / vit-ref).
 *
 * GFLOP/s of OpenBLAS SGEMM and of ampc's GEMM modes on square sizes and on the
 * training shapes of the default model, interleaved within each repetition so
 * every mode sees the same machine state; the median over repetitions is
 * reported. A benchmark, never a test: timings are not asserted anywhere.
 */
#include "cli.h"
#include "internal.h" /* the CPU account (ampc_cpu_clock) */

#include <cblas.h>
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampc/ampc.h"
#include "ampc/data.h"

static const char k_usage[] =
    "Usage: ampc bench gemm [--json] [--threads N] [--reps R] [--quick]\n"
    "       ampc bench gemm --device cuda [--json] [--reps R] [--quick]\n"
    "       ampc bench step [--model M] [--precision P] [--batch B] [--steps N]\n"
    "                       [--warmup W] [--threads T] [--dim D] [--recompute on|off]\n"
    "                       [--json]\n"
    "\n"
    "Measure GEMM throughput (GFLOP/s = 2*M*N*K / seconds, median of R\n"
    "repetitions, all modes interleaved in each repetition, one warm-up; a\n"
    "repetition repeats a fast GEMM until it lasts >= 20 ms):\n"
    "  sgemm      OpenBLAS cblas_sgemm, f32 x f32 -> f32 (called directly)\n"
    "  f32        ampc, f32 x f32 -> f32 (what 32-true runs; AMPC_GEMM_F32=openblas\n"
    "             sends it to OpenBLAS)\n"
    "  f16        ampc, f16 x f16 -> f32, FP32 accumulation\n"
    "  bf16       ampc, bf16 x bf16 -> f32, FP32 accumulation\n"
    "  f16-out    ampc, f16 x f16 -> f16, FP32 accumulation\n"
    "  f16-acc16  ampc, f16 x f16 -> f32, FP16 accumulation (the ablation)\n"
    "on square 256..2048 and the training shapes of mm-tiny (M = 8192 tokens;\n"
    "forward NN products and the transposed weight-gradient products, TN).\n"
    "First this machine's FMA peak (12 independent FMA chains per thread): FP32\n"
    "with ampc's vector width, VFMADDPH on CPUs with AVX512-FP16 and VDPBF16PS\n"
    "where bf16 products run on it (AVX512-BF16); 0.0 (none) where the CPU has\n"
    "no such path. The header line names each mode's path; the table's last\n"
    "columns are f16 over the FP32 peak, bf16 over VDPBF16PS's (else FP32's)\n"
    "and f16-acc16 over VFMADDPH's (- without one).\n"
    "\n"
    "--device cuda: the same on GPU 0 through cuBLASLt (TFLOP/s; C = A B^T, the\n"
    "layout FP8 needs, for every mode): f16 and bf16 (16-bit in and out, FP32\n"
    "accumulation: COMPUTE_32F), f16-acc16 (COMPUTE_16F), fp8 (E4M3 x E4M3 ->\n"
    "bf16) and fp8-e5m2 (E4M3 x E5M2), tf32 (COMPUTE_32F_FAST_TF32) and f32\n"
    "(COMPUTE_32F_PEDANTIC: true FP32, the 32-true baseline), on squares\n"
    "1024..8192, mm-tiny's shapes and a width-768 model's; with the fraction\n"
    "of the dense peak on an H100 / H200 and the ratio to f32. Needs a build\n"
    "with CUDA (AMPC_CUDA) and a GPU; bench/gpu/check.sh runs it with\n"
    "PyTorch's torch.matmul beside it.\n"
    "\n"
    "Options:\n"
    "  --threads N  only N threads (default: 1 and all cores)\n"
    "  --reps R     repetitions, 1..101 (default 5)\n"
    "  --quick      only the small shapes (a smoke run)\n"
    "  --json       print {\"gemm_isa\",\"bf16_path\",\"acc16_path\",\"f32_path\",\n"
    "               \"openblas_core\",\"fma_peak\":[{\"threads\",\"f32_gflops\",\n"
    "               \"f16_gflops\",\"bf16_gflops\",..}],\"results\":[{\"m\",\"n\",\"k\",\n"
    "               \"op\",\"mode\",\"dtype\",\"acc\",\"out\",\"threads\",\"gflops\",\n"
    "               \"ratio_vs_sgemm\",\"peak_gflops\",\"ratio_vs_peak\"},..]}\n"
    "\n"
    "bench step: whole training steps as `ampc train` runs them (zero_grad,\n"
    "forward + backward seeded with the loss scale, the trainer's step: unscale,\n"
    "inf check, AdamW with the default settings), on one fixed batch of the\n"
    "bundled emoji data (training split, cycled when B is larger), telemetry off.\n"
    "W warm-up steps (default 3), then N timed steps (default 20); prints the\n"
    "median ms per step, peak RSS, the GEMM rate against the FMA peak. Image-only\n"
    "models get 10 classes (vit-ref: 821,642 parameters), image-text ones the data's.\n"
    "  --model M      vit-ref (default), mm-tiny, mm-small, mm-base, mm-large\n"
    "  --precision P  32-true | 16-mixed (default) | bf16-mixed | 16-true | bf16-true\n"
    "                 | fp8-mixed (16-true: AdamW's eps 1e-8 is 0 in binary16;\n"
    "                 its loss turns NaN in a step or two: it times the arithmetic)\n"
    "  --batch B      batch size, 2..4096 (default 128)\n"
    "  --steps N      timed steps, 1..100000 (default 20)\n"
    "  --warmup W     untimed steps first, 0..100000 (default 3)\n"
    "  --dim D        override the width (heads kept, MLP = 4 D) for scaling runs\n"
    "  --recompute on|off  as ampc train --recompute (on)\n"
    "  --threads T    threads (default: all cores)\n"
    "  --json         print {\"model\":..,\"precision\":..,\"batch\":..,\"threads\":..,\n"
    "                 \"ms_per_step_median\":..,\"peak_rss_bytes\":..} (and more keys;\n"
    "                 \"ms_steps\": every timed step in run order;\n"
    "                 \"peak_fraction\": the GEMM rate over the FMA peak)\n";

/* OpenBLAS's own declaration (in its cblas.h on Debian; repeated so that the
 * build does not depend on which cblas.h is found first) */
char *openblas_get_corename(void);

typedef struct {
  int64_t m, n, k;
  ampc_op opa, opb;
  int quick;
} shape;

static const shape k_shapes[] = {
    {256, 256, 256, AMPC_OP_N, AMPC_OP_N, 1},    {512, 512, 512, AMPC_OP_N, AMPC_OP_N, 1},
    {1024, 1024, 1024, AMPC_OP_N, AMPC_OP_N, 0}, {2048, 2048, 2048, AMPC_OP_N, AMPC_OP_N, 0},
    {8192, 384, 128, AMPC_OP_N, AMPC_OP_N, 0},   {8192, 512, 128, AMPC_OP_N, AMPC_OP_N, 0},
    {8192, 128, 512, AMPC_OP_N, AMPC_OP_N, 0},   {384, 128, 8192, AMPC_OP_T, AMPC_OP_N, 0},
    {512, 128, 8192, AMPC_OP_T, AMPC_OP_N, 0},   {128, 512, 8192, AMPC_OP_T, AMPC_OP_N, 0},
};

typedef struct {
  const char *name;
  ampc_dtype in, out;
  ampc_acc acc;
} mode;

static const mode k_modes[] = {
    {"sgemm", AMPC_F32, AMPC_F32, AMPC_ACC_F32},   {"f32", AMPC_F32, AMPC_F32, AMPC_ACC_F32},
    {"f16", AMPC_F16, AMPC_F32, AMPC_ACC_F32},     {"bf16", AMPC_BF16, AMPC_F32, AMPC_ACC_F32},
    {"f16-out", AMPC_F16, AMPC_F16, AMPC_ACC_F32}, {"f16-acc16", AMPC_F16, AMPC_F32, AMPC_ACC_F16},
};
enum { NMODES = sizeof k_modes / sizeof k_modes[0], MAXREPS = 101 };

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void *filled(ampc_dtype dt, int64_t count) {
  float *tmp = malloc((size_t)count * sizeof *tmp);
  void *p = malloc((size_t)count * ampc_dtype_size(dt));
  if (!tmp || !p) {
    free(tmp);
    free(p);
    return NULL;
  }
  for (int64_t i = 0; i < count; i++)
    tmp[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  ampc_convert(p, dt, tmp, AMPC_F32, (size_t)count);
  free(tmp);
  return p;
}

/* the device benchmark's lines to stdout, as they come */
static void print_line(void *user, const char *line) {
  (void)user;
  printf("%s\n", line);
  fflush(stdout);
}

/* `ampc bench gemm --device NAME` on a device other than the CPU: the
 * backend's own GEMM benchmark (ampc_device_bench_gemm) */
static int run_gemm_device(int argc, char **argv, ampc_device dev) {
  int json = 0, quick = 0, reps = 5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--device") == 0) {
      i++; /* checked by the caller */
    } else if (strcmp(argv[i], "--reps") == 0) {
      char *end;
      long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || *end || v < 1 || v > 101)
        return cli_usage_error("bench", "--reps needs a number in 1..%d", 101);
      reps = (int)v;
      i++;
    } else {
      return cli_usage_error("bench", "unexpected argument '%s' for --device %s", argv[i],
                             ampc_device_name(dev));
    }
  }
  if (ampc_device_bench_gemm(dev, reps, quick, json, print_line, NULL) != AMPC_OK) {
    fprintf(stderr, "ampc bench gemm: %s\n", ampc_last_error());
    return AMPC_EXIT_ERROR;
  }
  return AMPC_EXIT_OK;
}

static int run_gemm(int argc, char **argv) {
  int json = 0, quick = 0, reps = 5, only_threads = 0;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--device") == 0) {
      ampc_device dev;
      char list[64];
      if (i + 1 >= argc || ampc_device_parse(argv[i + 1], &dev) != AMPC_OK ||
          ampc_device_desc_get(dev)->test_only)
        return cli_usage_error("bench", "--device needs %s",
                               ampc_device_list(list, sizeof list, " or ", false));
      if (dev != AMPC_DEVICE_CPU)
        return run_gemm_device(argc, argv, dev);
    }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0) {
      i++; /* cpu */
      continue;
    }
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--threads") == 0 || strcmp(argv[i], "--reps") == 0) {
      if (i + 1 >= argc)
        return cli_usage_error("bench", "%s needs a number", argv[i]);
      char *end;
      long v = strtol(argv[i + 1], &end, 10);
      if (*end || end == argv[i + 1] || v < 1 || v > (argv[i][2] == 't' ? 1024 : MAXREPS))
        return cli_usage_error("bench", "bad value '%s' for %s", argv[i + 1], argv[i]);
      if (argv[i][2] == 't')
        only_threads = (int)v;
      else
        reps = (int)v;
      i++;
    } else {
      return cli_usage_error("bench",
                             strncmp(argv[i], "--", 2) == 0 ? "unknown option %s"
                                                            : "unexpected argument '%s'",
                             argv[i]);
    }
  }
  int threads[2] = {1, omp_get_num_procs()}, nthr = threads[1] > 1 ? 2 : 1;
  if (only_threads)
    threads[0] = only_threads, nthr = 1;

  /* the machine's own FMA peak at each thread count, for the ratios */
  ampc_fma_peak peak[2];
  for (int ti = 0; ti < nthr; ti++)
    if (ampc_gemm_fma_peak(threads[ti], 0.5, &peak[ti]) != AMPC_OK)
      return cli_runtime_error("bench", "%s", ampc_last_error());
  cJSON *root = json ? cJSON_CreateObject() : NULL;
  if (json) {
    cJSON_AddStringToObject(root, "gemm_isa", ampc_gemm_isa());
    cJSON_AddStringToObject(root, "bf16_path", ampc_gemm_bf16_path());
    cJSON_AddStringToObject(root, "acc16_path", ampc_gemm_acc16_path());
    cJSON_AddStringToObject(root, "f32_path", ampc_gemm_f32_path());
    cJSON_AddStringToObject(root, "openblas_core", openblas_get_corename());
    cJSON *pk = cJSON_AddArrayToObject(root, "fma_peak");
    for (int ti = 0; ti < nthr; ti++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "threads", threads[ti]);
      cJSON_AddNumberToObject(o, "f32_gflops", peak[ti].f32_gflops);
      cJSON_AddStringToObject(o, "f32_isa", peak[ti].f32_isa);
      cJSON_AddNumberToObject(o, "f16_gflops", peak[ti].f16_gflops);
      cJSON_AddNumberToObject(o, "bf16_gflops", peak[ti].bf16_gflops);
      cJSON_AddStringToObject(o, "bf16_isa", peak[ti].bf16_isa);
      cJSON_AddStringToObject(o, "f16_isa", peak[ti].f16_isa);
      cJSON_AddItemToArray(pk, o);
    }
    cJSON_AddNumberToObject(root, "reps", reps);
  }
  cJSON *results = json ? cJSON_AddArrayToObject(root, "results") : NULL;
  if (!json)
    for (int ti = 0; ti < nthr; ti++)
      printf("# FMA peak, %d thread%s: fp32 %.1f GFLOP/s (%s), fp16 VFMADDPH %.1f GFLOP/s (%s), "
             "bf16 VDPBF16PS %.1f GFLOP/s (%s)\n",
             threads[ti], threads[ti] == 1 ? "" : "s", peak[ti].f32_gflops, peak[ti].f32_isa,
             peak[ti].f16_gflops, peak[ti].f16_isa, peak[ti].bf16_gflops, peak[ti].bf16_isa);
  if (!json)
    printf(
        "# ampc bench gemm: GFLOP/s, median of %d reps; gemm isa %s; f32 on %s; bf16 on %s; "
        "f16-acc16 on %s; OpenBLAS core %s\n"
        "| M | N | K | op | threads | sgemm | f32 | f16 | bf16 | f16-out | f16-acc16 | "
        "f32/sgemm | f16/sgemm | bf16/sgemm | f16/peak | bf16/peak | acc16/peak16 |\n"
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        reps, ampc_gemm_isa(), ampc_gemm_f32_path(), ampc_gemm_bf16_path(), ampc_gemm_acc16_path(),
        openblas_get_corename());
  for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
    const shape *sh = &k_shapes[s];
    if (quick && !sh->quick)
      continue;
    const int64_t an = sh->m * sh->k, bn = sh->k * sh->n, cn = sh->m * sh->n;
    void *a[3] = {filled(AMPC_F32, an), filled(AMPC_F16, an), filled(AMPC_BF16, an)};
    void *b[3] = {filled(AMPC_F32, bn), filled(AMPC_F16, bn), filled(AMPC_BF16, bn)};
    void *c = malloc((size_t)cn * sizeof(float));
    if (!a[0] || !a[1] || !a[2] || !b[0] || !b[1] || !b[2] || !c) {
      for (int i = 0; i < 3; i++)
        free(a[i]), free(b[i]);
      free(c);
      cJSON_Delete(root);
      return cli_runtime_error("bench", "out of memory for %lld x %lld x %lld", (long long)sh->m,
                               (long long)sh->n, (long long)sh->k);
    }
    const int64_t lda = sh->opa == AMPC_OP_N ? sh->k : sh->m;
    const int64_t ldb = sh->opb == AMPC_OP_N ? sh->n : sh->k;
    for (int ti = 0; ti < nthr; ti++) {
      ampc_set_num_threads(threads[ti]);
      static double t[NMODES][MAXREPS];
      int inner[NMODES];
      for (int md = 0; md < NMODES; md++)
        inner[md] = 1;
      for (int r = -1; r < reps; r++) {
        for (int md = 0; md < NMODES; md++) {
          const mode *mo = &k_modes[md];
          const int di = mo->in == AMPC_F32 ? 0 : mo->in == AMPC_F16 ? 1 : 2;
          double t0 = ampc_now_s();
          for (int it = 0; it < inner[md]; it++) {
            ampc_status st = AMPC_OK;
            if (md == 0) /* OpenBLAS itself, whatever ampc_gemm's F32 path is */
              cblas_sgemm(CblasRowMajor, sh->opa == AMPC_OP_T ? CblasTrans : CblasNoTrans,
                          sh->opb == AMPC_OP_T ? CblasTrans : CblasNoTrans, (int)sh->m, (int)sh->n,
                          (int)sh->k, 1.0f, a[0], (int)lda, b[0], (int)ldb, 0.0f, c, (int)sh->n);
            else
              st = ampc_gemm(sh->opa, sh->opb, sh->m, sh->n, sh->k, 1.0f, a[di], mo->in, lda, b[di],
                             mo->in, ldb, 0.0f, c, mo->out, sh->n, mo->acc);
            if (st != AMPC_OK) {
              cJSON_Delete(root);
              return cli_runtime_error("bench", "%s", ampc_last_error());
            }
          }
          double dt = (ampc_now_s() - t0) / inner[md];
          if (r < 0) /* warm-up: size each sample to >= 20 ms */
            inner[md] = dt >= 0.02 ? 1 : (int)(0.02 / dt) + 1;
          else
            t[md][r] = dt;
        }
      }
      double gf[NMODES];
      for (int md = 0; md < NMODES; md++) {
        qsort(t[md], (size_t)reps, sizeof(double), cmp_d);
        gf[md] = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k / t[md][reps / 2] / 1e9;
      }
      const char op[3] = {sh->opa == AMPC_OP_N ? 'N' : 'T', sh->opb == AMPC_OP_N ? 'N' : 'T', 0};
      if (json) {
        for (int md = 0; md < NMODES; md++) {
          cJSON *o = cJSON_CreateObject();
          cJSON_AddNumberToObject(o, "m", (double)sh->m);
          cJSON_AddNumberToObject(o, "n", (double)sh->n);
          cJSON_AddNumberToObject(o, "k", (double)sh->k);
          cJSON_AddStringToObject(o, "op", op);
          cJSON_AddStringToObject(o, "mode", k_modes[md].name);
          cJSON_AddStringToObject(o, "dtype", ampc_dtype_name(k_modes[md].in));
          cJSON_AddStringToObject(o, "acc", k_modes[md].acc == AMPC_ACC_F32 ? "f32" : "f16");
          cJSON_AddStringToObject(o, "out", ampc_dtype_name(k_modes[md].out));
          cJSON_AddNumberToObject(o, "threads", threads[ti]);
          cJSON_AddNumberToObject(o, "gflops", gf[md]);
          cJSON_AddNumberToObject(o, "ratio_vs_sgemm", gf[md] / gf[0]);
          const double pk = k_modes[md].acc == AMPC_ACC_F16 ? peak[ti].f16_gflops
                            : k_modes[md].in == AMPC_BF16 && peak[ti].bf16_gflops > 0
                                ? peak[ti].bf16_gflops
                                : peak[ti].f32_gflops;
          cJSON_AddNumberToObject(o, "peak_gflops", pk);
          cJSON_AddNumberToObject(o, "ratio_vs_peak", pk > 0 ? gf[md] / pk : 0);
          cJSON_AddItemToArray(results, o);
        }
      } else {
        const double pkb = peak[ti].bf16_gflops > 0 ? peak[ti].bf16_gflops : peak[ti].f32_gflops;
        char r16[16] = "-", rb[16] = "-", ra[16] = "-"; /* "-": no such peak here */
        if (peak[ti].f32_gflops > 0)
          snprintf(r16, sizeof r16, "%.2f", gf[2] / peak[ti].f32_gflops);
        if (pkb > 0)
          snprintf(rb, sizeof rb, "%.2f", gf[3] / pkb);
        if (peak[ti].f16_gflops > 0)
          snprintf(ra, sizeof ra, "%.2f", gf[5] / peak[ti].f16_gflops);
        printf("| %lld | %lld | %lld | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | "
               "%.2f | %.2f | %s | %s | %s |\n",
               (long long)sh->m, (long long)sh->n, (long long)sh->k, op, threads[ti], gf[0], gf[1],
               gf[2], gf[3], gf[4], gf[5], gf[1] / gf[0], gf[2] / gf[0], gf[3] / gf[0], r16, rb,
               ra);
        fflush(stdout);
      }
    }
    for (int i = 0; i < 3; i++)
      free(a[i]), free(b[i]);
    free(c);
  }
  ampc_set_num_threads(0);
  return json ? cli_print_json("bench", root) : AMPC_EXIT_OK;
}

/* ---- bench step ------------------------------------------------------------------ */

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end;
  if (!v)
    return cli_usage_error("bench", "%s needs a value", flag);
  long x = strtol(v, &end, 10);
  if (*end || end == v || x < lo || x > hi)
    return cli_usage_error("bench", "bad value '%s' for %s (%ld..%ld)", v, flag, lo, hi);
  *out = x;
  return 0;
}

/* the same batch for every step */
typedef struct fixed_batch {
  ampc_batch b;
} fixed_batch;
static ampc_status next_fixed(void *user, int64_t k, ampc_batch *out) {
  (void)k;
  *out = ((const fixed_batch *)user)->b;
  return AMPC_OK;
}

static int run_step(int argc, char **argv) {
  const char *model = "vit-ref", *precision = "16-mixed";
  long batch = 128, steps = 20, warmup = 3, threads = 0, dim = 0;
  int json = 0, rc = 0;
  bool keep = false; /* --recompute off */
  char flag[32];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--json") == 0) {
      json = 1;
      continue;
    }
    const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
    const bool inline_v = eq && (size_t)(eq - a) < sizeof flag;
    if (inline_v) { /* --flag=value */
      snprintf(flag, sizeof flag, "%.*s", (int)(eq - a), a);
      a = flag, v = eq + 1, i--; /* the i++ below skips nothing */
    } else if (v && !strncmp(v, "--", 2) && v[2]) {
      return cli_usage_error("bench", "%s needs a value (got the flag %s)", a, v);
    }
    if (strcmp(a, "--model") == 0 && v)
      model = v;
    else if (strcmp(a, "--precision") == 0 && v)
      precision = v;
    else if (strcmp(a, "--batch") == 0)
      rc = parse_long(a, v, 2, 4096, &batch);
    else if (strcmp(a, "--steps") == 0)
      rc = parse_long(a, v, 1, 100000, &steps);
    else if (strcmp(a, "--warmup") == 0)
      rc = parse_long(a, v, 0, 100000, &warmup);
    else if (strcmp(a, "--threads") == 0)
      rc = parse_long(a, v, 1, 1024, &threads);
    else if (strcmp(a, "--dim") == 0)
      rc = parse_long(a, v, 1, 4096, &dim);
    else if (strcmp(a, "--recompute") == 0 && v)
      rc = cli_parse_recompute("bench", v, &keep);
    else if (!v &&
             (!strcmp(a, "--model") || !strcmp(a, "--precision") || !strcmp(a, "--recompute")))
      return cli_usage_error("bench", "%s needs a value", a);
    else
      return cli_usage_error(
          "bench", strncmp(a, "--", 2) == 0 ? "unknown option %s" : "unexpected argument '%s'", a);
    if (rc)
      return rc;
    i++;
  }
  ampc_precision p;
  if (ampc_precision_parse(precision, &p) != AMPC_OK)
    return cli_usage_error("bench", "--precision: %s", ampc_last_error());
  if (threads > 0)
    ampc_set_num_threads((int)threads);
  if (threads > ampc_cpu_count())
    fprintf(stderr,
            "ampc bench: note: --threads %ld on %d CPUs: the threads take turns at every "
            "barrier, so each step can take many times longer than on %d threads\n",
            threads, ampc_cpu_count(), ampc_cpu_count());
  ampc_dataset D;
  memset(&D, 0, sizeof D);
  if (ampc_dataset_load_default(&D) != AMPC_OK)
    return cli_runtime_error("bench", "%s", ampc_last_error());
  ampc_mmodel_config mc;
  if (ampc_mmodel_config_get(model, D.vocab, D.seq_len, 10, &mc) != AMPC_OK) {
    char list[192];
    ampc_mmodel_list(list, sizeof list, D.height, D.width, D.channels, -1);
    ampc_dataset_free(&D);
    return cli_usage_error("bench", "--model: unknown model '%s' (bench step runs %s)", model,
                           list);
  }
  if (!mc.image_only)
    mc.classes = D.n_classes; /* as `ampc train` on emoji */
  mc.no_recompute = keep;
  if (dim > 0) {
    if (dim % mc.heads) {
      ampc_dataset_free(&D);
      return cli_usage_error("bench", "--dim %ld is not a multiple of %lld heads", dim,
                             (long long)mc.heads);
    }
    mc.dim = dim, mc.mlp = 4 * dim;
  }
  if (D.height != mc.img || D.width != mc.img || D.channels != mc.channels) {
    const int h = D.height, w = D.width, c = D.channels; /* read before the free */
    ampc_dataset_free(&D);
    char list[192];
    return cli_usage_error("bench",
                           "model %s takes %lldx%lldx%lld images, the bundled data has %dx%dx%d "
                           "(bench step runs %s)",
                           mc.name, (long long)mc.img, (long long)mc.img, (long long)mc.channels, h,
                           w, c, ampc_mmodel_list(list, sizeof list, h, w, c, -1));
  }
  /* one fixed batch: the first B training samples, cycled */
  const int64_t B = batch, img_sz = (int64_t)D.height * D.width * D.channels;
  const int64_t tl = D.seq_len > 0 ? D.seq_len : 1;
  uint8_t *bimg = malloc((size_t)(B * img_sz));
  int32_t *btok = calloc((size_t)(B * tl), sizeof *btok);
  int32_t *blab = malloc((size_t)B * sizeof *blab);
  double *ms = malloc((size_t)steps * sizeof *ms);
  ampc_mmodel_specs sp = {0};
  ampc_trainer T;
  memset(&T, 0, sizeof T);
  ampc_model M;
  memset(&M, 0, sizeof M);
  int ret = AMPC_EXIT_OK;
  if (!bimg || !btok || !blab || !ms) {
    ret = cli_runtime_error("bench", "out of memory");
    goto out;
  }
  for (int64_t r = 0, i = 0; r < B; i = (i + 1) % D.n) {
    if (D.split[i] != AMPC_SPLIT_TRAIN)
      continue;
    memcpy(bimg + r * img_sz, D.images + i * img_sz, (size_t)img_sz);
    if (D.tokens)
      memcpy(btok + r * tl, D.tokens + i * D.seq_len, (size_t)D.seq_len * sizeof *btok);
    blab[r++] = D.label[i];
  }
  ampc_amp_config amp;
  ampc_amp_config_preset(p, &amp);
  ampc_optim_config opt = ampc_optim_adamw_defaults();
  ampc_model_desc md = {.kind = AMPC_MODEL_MM, .mm = mc};
  snprintf(md.name, sizeof md.name, "%s", mc.name);
  if (ampc_model_specs(&md, &sp) != AMPC_OK ||
      ampc_trainer_init(&T, &amp, &opt, sp.specs, sp.n, 1) != AMPC_OK ||
      ampc_model_create(&M, &md, &T.params, &amp, B) != AMPC_OK) {
    ret = cli_runtime_error("bench", "%s", ampc_last_error());
    goto out;
  }
  T.telemetry = false; /* as with `ampc train --tm-every 0`: no swallow counting */
  const int64_t nparams = T.params.numel;
  fixed_batch fb = {{.b = B, .images = bimg, .tokens = btok, .labels = blab}};
  int64_t skipped = 0;
  float loss = 0;
  uint64_t flops0 = ampc_gemm_flop_count();
  /* the FMA peak before and after the steps (the larger: load only slows a
   * measurement down), and the cores other processes used meanwhile */
  ampc_fma_peak pk0 = {0}, pk = {0};
  if (ampc_gemm_fma_peak(ampc_get_num_threads(), 0.5, &pk0) != AMPC_OK) {
    ret = cli_runtime_error("bench", "%s", ampc_last_error());
    goto out;
  }
  ampc_cpu_clock c0 = {0}, c1 = {0};
  for (long s = -warmup; s < steps; s++) {
    if (s == 0) {
      flops0 = ampc_gemm_flop_count();
      ampc_cpu_clock_read(&c0);
    }
    const double t0 = ampc_now_s();
    ampc_losses L;
    ampc_step_info info;
    /* the training run's own step: zero_grad, forward, backward(S), the trainer's step */
    if (ampc_train_step(&T, &M, 1, next_fixed, &fb, &L, &info) != AMPC_OK) {
      ret = cli_runtime_error("bench", "step %ld: %s", s + warmup + 1, ampc_last_error());
      goto out;
    }
    if (s >= 0) {
      ms[s] = (ampc_now_s() - t0) * 1e3;
      skipped += info.skipped;
    }
    loss = L.total;
  }
  ampc_cpu_clock_read(&c1);
  const double gemm_flop = (double)(ampc_gemm_flop_count() - flops0) / (double)steps;
  /* the step's GEMM FLOP rate as a fraction of the FP32 FMA peak on the same
   * threads (clocks drift: a ratio taken in one run) */
  if (ampc_gemm_fma_peak(ampc_get_num_threads(), 0.5, &pk) != AMPC_OK) {
    ret = cli_runtime_error("bench", "%s", ampc_last_error());
    goto out;
  }
  if (pk0.f32_gflops > pk.f32_gflops)
    pk.f32_gflops = pk0.f32_gflops;
  if (pk0.bf16_gflops > pk.bf16_gflops)
    pk.bf16_gflops = pk0.bf16_gflops;
  ampc_cpu_use use = {0};
  ampc_cpu_use_add(&use, &c0, &c1);
  const double others = ampc_cpu_use_others(&use);
  const bool busy = ampc_cpu_use_disturbed(&use, ampc_get_num_threads(), ampc_cpu_count());
  /* bf16 x bf16 products run on VDPBF16PS where the CPU has it: their own peak */
  const bool dot = (p == AMPC_PRECISION_BF16_MIXED || p == AMPC_PRECISION_BF16_TRUE) &&
                   strcmp(ampc_gemm_bf16_path(), "avx512bf16") == 0 && pk.bf16_gflops > 0;
  cJSON *raw = json ? cJSON_CreateDoubleArray(ms, (int)steps) : NULL; /* in run order */
  qsort(ms, (size_t)steps, sizeof *ms, cmp_d);
  const double med = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", mc.name);
    cJSON_AddStringToObject(o, "precision", ampc_precision_name(p));
    cJSON_AddBoolToObject(o, "recompute", !keep);
    cJSON_AddNumberToObject(o, "batch", (double)B);
    cJSON_AddNumberToObject(o, "threads", ampc_get_num_threads());
    cJSON_AddNumberToObject(o, "ms_per_step_median", med);
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
    cJSON_AddNumberToObject(o, "ms_per_step_min", ms[0]);
    cJSON_AddNumberToObject(o, "ms_per_step_max", ms[steps - 1]);
    cJSON_AddNumberToObject(o, "steps", (double)steps);
    cJSON_AddNumberToObject(o, "warmup", (double)warmup);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)skipped);
    cJSON_AddNumberToObject(o, "dim", (double)mc.dim);
    cJSON_AddNumberToObject(o, "parameters", (double)nparams);
    cJSON_AddNumberToObject(o, "activation_bytes",
                            (double)(M.activation_bytes + M.workspace_bytes));
    cJSON_AddNumberToObject(o, "final_loss", (double)loss);
    cJSON_AddStringToObject(o, "gemm_isa", ampc_gemm_isa());
    cJSON_AddStringToObject(o, "gemm_bf16_path", ampc_gemm_bf16_path());
    cJSON_AddNumberToObject(o, "gemm_flop_per_step", gemm_flop);
    cJSON_AddNumberToObject(o, "gemm_gflops", gemm_flop / med / 1e6);
    cJSON_AddNumberToObject(o, "fma_peak_gflops", pk.f32_gflops);
    cJSON_AddNumberToObject(o, "peak_fraction",
                            pk.f32_gflops > 0 ? gemm_flop / med / 1e6 / pk.f32_gflops : 0.0);
    if (dot)
      cJSON_AddNumberToObject(o, "bf16dot_peak_gflops", pk.bf16_gflops);
    if (others >= 0.0)
      cJSON_AddNumberToObject(o, "other_cores", others);
    cJSON_AddStringToObject(o, "timing",
                            busy                    ? "disturbed"
                            : use.busy_wall_s < 1.0 ? "unknown"
                                                    : "clean");
    cJSON_AddItemToObject(o, "ms_steps", raw);
    ret = cli_print_json("bench", o);
  } else {
    printf("%s %s batch %lld dim %lld, %d threads, %lld parameters: median %.2f ms/step "
           "(min %.2f, max %.2f; %ld steps after %ld warm-up, %lld skipped), peak RSS %.1f MiB\n",
           mc.name, ampc_precision_name(p), (long long)B, (long long)mc.dim, ampc_get_num_threads(),
           (long long)nparams, med, ms[0], ms[steps - 1], steps, warmup, (long long)skipped,
           (double)ampc_peak_rss_bytes() / 1048576.0);
    if (pk.f32_gflops > 0)
      printf("GEMM work %.2f GFLOP/step at the median: %.1f GFLOP/s, %.3f of the FP32 FMA "
             "peak of %d threads (%.1f GFLOP/s, %s, the larger of two measurements around the "
             "steps)\n",
             gemm_flop / 1e9, gemm_flop / med / 1e6, gemm_flop / med / 1e6 / pk.f32_gflops,
             ampc_get_num_threads(), pk.f32_gflops, pk.f32_isa);
    if (dot)
      printf("(the bf16 products run on VDPBF16PS: %.3f of its peak, %.1f GFLOP/s)\n",
             gemm_flop / med / 1e6 / pk.bf16_gflops, pk.bf16_gflops);
    if (busy)
      printf("timing: the machine was busy (other processes used %.1f of %d cores): these "
             "times and ratios are not comparable\n",
             others, ampc_cpu_count());
    else if (use.busy_wall_s < 1.0)
      printf("timing: the timed steps took under 1 s, too short to tell whether other processes "
             "used the cores (give more --steps)\n");
  }
out:
  ampc_model_free(&M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
  ampc_dataset_free(&D);
  free(bimg), free(btok), free(blab), free(ms);
  return ret;
}

/* OpenBLAS picks its kernels from the CPU model; on a CPU it does not know
 * (many VMs) it falls back to the SSE3 "Prescott" ones, several times slower
 * than its AVX2/AVX-512 kernels: SGEMM (ampc 32-true) would be benchmarked
 * at a fraction of what it can do. Say so. */
static void warn_slow_openblas(void) {
  const char *core = openblas_get_corename();
  if (!core || !(strcmp(core, "Prescott") == 0 || strcmp(core, "Core2") == 0 ||
                 strcmp(core, "Nehalem") == 0 || strcmp(core, "Dunnington") == 0))
    return;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2"))
    return;
  fprintf(stderr,
          "ampc bench: note: OpenBLAS uses its '%s' kernels on this CPU (it does not recognise "
          "the model), so SGEMM (and 32-true with AMPC_GEMM_F32=openblas) runs far below this "
          "CPU's speed; set "
          "OPENBLAS_CORETYPE=%s before running (bench/step/run.sh does)\n",
          core, __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
}

static int run(int argc, char **argv) {
  int on_gpu = 0; /* OpenBLAS's kernels do not matter to a device's benchmark */
  ampc_device dev;
  for (int i = 1; i + 1 < argc; i++)
    on_gpu |= strcmp(argv[i], "--device") == 0 && ampc_device_parse(argv[i + 1], &dev) == AMPC_OK &&
              dev != AMPC_DEVICE_CPU;
  if (!on_gpu)
    warn_slow_openblas();
  if (argc < 2)
    return cli_usage_error("bench", "missing benchmark name (gemm, step)");
  if (strcmp(argv[1], "gemm") == 0)
    return run_gemm(argc - 1, argv + 1);
  if (strcmp(argv[1], "step") == 0)
    return run_step(argc - 1, argv + 1);
  return cli_usage_error("bench", "unknown benchmark '%s' (expected gemm or step)", argv[1]);
}

const ampc_command ampc_cmd_bench = {
    .name = "bench",
    .summary = "benchmarks: `bench gemm` (GEMM vs OpenBLAS), `bench step` (steps)",
    .usage = k_usage,
    .run = run,
};
