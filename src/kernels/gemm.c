/*
 * src/kernels/gemm.c: the public GEMM entry points: argument validation, the
 * choice of path (OpenBLAS SGEMM, the blocked framework with the AVX2 or
 * AVX-512 micro-kernel, the portable loop, the FP16-accumulation ablation's
 * paths), thread and blocking settings, the FMA peak, and the
 * double-precision reference. It only dispatches: the paths live in the
 * files gemm_impl.h lists, and none of them calls back here. Semantics:
 * include/ampc/gemm.h.
 */
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_impl.h"
#include "numeric/convert_impl.h"
#include "numeric/numeric.h"

/* OpenBLAS's thread control (declared in its cblas.h on Debian; repeated here
 * so the build does not depend on which cblas.h is found first). */
void openblas_set_num_threads(int num_threads);

static ampc_gemm_config g_cfg = {.mc = 144, .kc = 256, .nc = 512};
static atomic_int g_threads = 0; /* 0: OpenMP's default */

ampc_gemm_config ampc_gemm_get_config(void) { return g_cfg; }

ampc_status ampc_gemm_set_config(const ampc_gemm_config *cfg) {
  if (!cfg || cfg->mc <= 0 || cfg->mc % AMPC_GEMM_MR || cfg->nc <= 0 || cfg->nc % AMPC_GEMM_NR ||
      cfg->kc <= 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "gemm config: mc must be a positive multiple of %d, nc of %d, kc >= 1 "
                     "(got mc=%d kc=%d nc=%d)",
                     AMPC_GEMM_MR, AMPC_GEMM_NR, cfg ? cfg->mc : 0, cfg ? cfg->kc : 0,
                     cfg ? cfg->nc : 0);
  g_cfg = *cfg;
  return AMPC_OK;
}

void ampc_set_num_threads(int n) {
  atomic_store(&g_threads, n > 0 ? n : 0);
  openblas_set_num_threads(n > 0 ? n : omp_get_max_threads());
}

int ampc_get_num_threads(void) {
  int n = atomic_load(&g_threads);
  return n > 0 ? n : omp_get_max_threads();
}

static const ampc_gemm_ukernel *g_forced_uk;

void ampc_gemm_force_ukernel(const ampc_gemm_ukernel *uk) { g_forced_uk = uk; }

const ampc_gemm_ukernel *ampc_gemm_active_ukernel(void) {
  if (g_forced_uk)
    return g_forced_uk;
  if (!ampc_use_avx2())
    return NULL;
  return ampc_use_avx512() ? &ampc_gemm_uk_avx512 : &ampc_gemm_uk_avx2;
}

const char *ampc_gemm_isa(void) {
  const ampc_gemm_ukernel *uk = ampc_gemm_active_ukernel();
  return uk ? uk->isa : "portable";
}

/* F32 x F32 -> F32 on ampc's blocked kernel (the default: the same kernel,
 * blocking and summation order as the 16-bit dtypes, so that presets differ
 * only in storage) or on OpenBLAS (AMPC_GEMM_F32=openblas, read once; also
 * when there is no vector micro-kernel, where OpenBLAS is the faster one). */
static int f32_on_openblas(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("AMPC_GEMM_F32");
    v = e && strcmp(e, "openblas") == 0;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v || !ampc_gemm_active_ukernel();
}

/* GFLOP/s of loop on nthreads threads at once, each running about `seconds` */
static double peak_of(double (*loop)(int64_t), int nthreads, double seconds) {
  int64_t iters = 1 << 16;
  for (;;) { /* calibrate on one thread */
    const double t0 = ampc_now_s();
    loop(iters);
    const double dt = ampc_now_s() - t0;
    if (dt >= seconds / 4 || iters > ((int64_t)1 << 40)) {
      iters = (int64_t)((double)iters * seconds / (dt > 0 ? dt : 1e-9)) + 1;
      break;
    }
    iters *= 4;
  }
  /* the best of 5 runs: other load and a VM's drifting clock only slow a
   * run down, so the fastest is the closest to what the machine can do */
  double best = 0;
  for (int trial = 0; trial < 5; trial++) {
    double flops = 0;
    const double t0 = ampc_now_s();
#pragma omp parallel num_threads(nthreads) reduction(+ : flops)
    flops += loop(iters / 5 + 1);
    const double g = flops / (ampc_now_s() - t0) / 1e9;
    best = g > best ? g : best;
  }
  return best;
}

ampc_status ampc_gemm_fma_peak(int nthreads, double seconds, ampc_fma_peak *out) {
  if (!out || !(seconds > 0))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_gemm_fma_peak: NULL output or seconds <= 0");
  if (nthreads <= 0)
    nthreads = ampc_get_num_threads();
  *out = (ampc_fma_peak){
      .f32_isa = "none", .f16_isa = "none", .threads = nthreads, .bf16_isa = "none"};
  if (ampc_use_avx512()) {
    out->f32_isa = "avx512f";
    out->f32_gflops = peak_of(ampc_peak_f32_avx512, nthreads, seconds);
  } else if (ampc_use_avx2()) {
    out->f32_isa = "avx2+fma";
    out->f32_gflops = peak_of(ampc_peak_f32_avx2, nthreads, seconds);
  }
  if (ampc_use_avx512fp16()) {
    out->f16_isa = "avx512fp16";
    out->f16_gflops = peak_of(ampc_peak_f16_avx512fp16, nthreads, seconds);
  }
  if (ampc_gemm_bf16dot_available()) {
    out->bf16_isa = "avx512bf16";
    out->bf16_gflops = peak_of(ampc_peak_bf16_avx512bf16, nthreads, seconds);
  }
  return AMPC_OK;
}

const char *ampc_gemm_f32_path(void) { return f32_on_openblas() ? "openblas" : ampc_gemm_isa(); }

/* ---- validation ---------------------------------------------------------- */

static int operand_dtype_ok(ampc_dtype dt) {
  return dt == AMPC_F32 || dt == AMPC_F16 || dt == AMPC_BF16;
}

static ampc_status validate(const char *fn, ampc_op opa, ampc_op opb, int64_t m, int64_t n,
                            int64_t k, const void *a, ampc_dtype adt, int64_t lda, const void *b,
                            ampc_dtype bdt, int64_t ldb, int c_needed, const void *c,
                            ampc_dtype cdt, int64_t ldc, int ab_needed) {
  if ((opa != AMPC_OP_N && opa != AMPC_OP_T) || (opb != AMPC_OP_N && opb != AMPC_OP_T))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: op must be AMPC_OP_N or AMPC_OP_T", fn);
  if (m < 0 || n < 0 || k < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: negative dimension (m=%lld n=%lld k=%lld)", fn,
                     (long long)m, (long long)n, (long long)k);
  const ampc_dtype dts[3] = {adt, bdt, cdt};
  const char *names[3] = {"A", "B", "C"};
  for (int i = 0; i < 3; i++) {
    if ((unsigned)dts[i] >= AMPC_DTYPE_COUNT)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: invalid dtype %d for %s", fn, (int)dts[i],
                       names[i]);
    if (!operand_dtype_ok(dts[i]))
      return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: %s has dtype %s; GEMM takes f32, f16, bf16", fn,
                       names[i], ampc_dtype_name(dts[i]));
  }
  const int64_t min_lda = opa == AMPC_OP_N ? k : m;
  const int64_t min_ldb = opb == AMPC_OP_N ? n : k;
  if (lda < (min_lda > 1 ? min_lda : 1))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: lda=%lld < %lld (A is %s)", fn, (long long)lda,
                     (long long)(min_lda > 1 ? min_lda : 1), opa == AMPC_OP_N ? "M x K" : "K x M");
  if (ldb < (min_ldb > 1 ? min_ldb : 1))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldb=%lld < %lld (B is %s)", fn, (long long)ldb,
                     (long long)(min_ldb > 1 ? min_ldb : 1), opb == AMPC_OP_N ? "K x N" : "N x K");
  if (ldc < (n > 1 ? n : 1))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldc=%lld < %lld (C is M x N)", fn, (long long)ldc,
                     (long long)(n > 1 ? n : 1));
  if (m == 0 || n == 0)
    return AMPC_OK;
  /* every element offset (rows - 1) * ld + cols, in bytes, must fit in int64 */
  const int64_t ext[3][3] = {{opa == AMPC_OP_N ? m : k, lda, opa == AMPC_OP_N ? k : m},
                             {opb == AMPC_OP_N ? k : n, ldb, opb == AMPC_OP_N ? n : k},
                             {m, ldc, n}};
  for (int i = 0; i < 3; i++) {
    int64_t off;
    if (ext[i][0] > 0 && (__builtin_mul_overflow(ext[i][0] - 1, ext[i][1], &off) ||
                          __builtin_add_overflow(off, ext[i][2], &off) ||
                          __builtin_mul_overflow(off, (int64_t)8, &off)))
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "%s: %s is too large to address (%lld x %lld, ld %lld)", fn, names[i],
                       (long long)ext[i][0], (long long)ext[i][2], (long long)ext[i][1]);
  }
  if (ab_needed && (!a || !b))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s is NULL", fn, !a ? "A" : "B");
  if (c_needed && !c)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: C is NULL", fn);
  return AMPC_OK;
}

static void to_general(ampc_gemm_args *g, ampc_op opa, ampc_op opb, int64_t lda, int64_t ldb) {
  g->opa = opa, g->opb = opb, g->lda = lda, g->ldb = ldb;
  g->rs_a = opa == AMPC_OP_N ? lda : 1;
  g->cs_a = opa == AMPC_OP_N ? 1 : lda;
  g->rs_b = opb == AMPC_OP_N ? ldb : 1;
  g->cs_b = opb == AMPC_OP_N ? 1 : ldb;
}

int ampc_gemm_bf16dot_available(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    v = ampc_use_avx512bf16() && ampc_gemm_bf16dot_probe();
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

const char *ampc_gemm_bf16_path(void) {
  return !g_forced_uk && ampc_gemm_active_ukernel() == &ampc_gemm_uk_avx512 &&
                 ampc_gemm_bf16dot_available()
             ? "avx512bf16"
             : ampc_gemm_isa();
}

const char *ampc_gemm_acc16_path(void) {
  return ampc_use_avx512fp16() ? "avx512fp16"
         : ampc_use_avx512()   ? "avx512f"
         : ampc_use_avx2()     ? "avx2+f16c"
                               : "portable";
}

static _Atomic uint64_t g_flops;

static ampc_acc16_path g_acc16_path;
void ampc_gemm_force_acc16(ampc_acc16_path path) { g_acc16_path = path; }

static ampc_status run(ampc_gemm_args *g, ampc_acc acc);

/* ampc_gemm_epi on a path other than the blocked kernel's (a portable loop,
 * OpenBLAS, alpha == 0 or K == 0): the bias laid into C (its values are C's
 * dtype's, so exactly) with beta = 1, the GEMM, then colsum and post over the
 * whole matrix: the same bits as the fused path. */
static ampc_status epi_apart(ampc_gemm_args *g, ampc_acc acc) {
  const ampc_gemm_epi *e = g->epi;
  g->epi = NULL;
  if (e->bias) {
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++)
        ampc_elem_store_uncounted(g->c, g->cdt, i * g->ldc + j, e->bias[j]);
    g->beta = 1.0f;
  }
  AMPC_TRY(run(g, acc));
  if (e->colsum) {
    const int nt = g->m * g->k >= (1 << 16) ? ampc_get_num_threads() : 1;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t p = 0; p < g->k; p++)
        e->colsum[i] += ampc_gemm_load(g->a, g->adt, i * g->rs_a + p * g->cs_a);
  }
  if (e->post)
    e->post(e->user, 0, g->m, 0, g->n);
  return AMPC_OK;
}

static ampc_status run(ampc_gemm_args *g, ampc_acc acc) {
  if (g->m == 0 || g->n == 0 || g->batch == 0)
    return AMPC_OK;
  if (g->epi && (g->alpha == 0.0f || g->k == 0))
    return epi_apart(g, acc);
  if (g->alpha == 0.0f || g->k == 0) {
    ampc_gemm_scale_c(g);
    return AMPC_OK;
  }
  const int nthreads = ampc_get_num_threads();
  if (acc == AMPC_ACC_F16) {
    const int f16_in = g->adt == AMPC_F16 && g->bdt == AMPC_F16;
    ampc_acc16_path path = g_acc16_path;
    if (path == AMPC_ACC16_AUTO ||
        ((path == AMPC_ACC16_FP16 || path == AMPC_ACC16_AVX512 || path == AMPC_ACC16_AVX2_F16) &&
         !f16_in))
      path = f16_in && ampc_use_avx512fp16() ? AMPC_ACC16_FP16
             : f16_in && ampc_use_avx512()   ? AMPC_ACC16_AVX512
             : f16_in && ampc_use_avx2()     ? AMPC_ACC16_AVX2_F16
             : ampc_use_avx2()               ? AMPC_ACC16_AVX2
                                             : AMPC_ACC16_SCALAR;
    return path == AMPC_ACC16_FP16       ? ampc_gemm_acc16_fp16(g, nthreads)
           : path == AMPC_ACC16_AVX512   ? ampc_gemm_acc16_avx512(g, nthreads)
           : path == AMPC_ACC16_AVX2_F16 ? ampc_gemm_acc16_avx2_f16(g, nthreads)
           : path == AMPC_ACC16_AVX2     ? ampc_gemm_acc16_avx2(g, nthreads)
                                         : ampc_gemm_acc16_portable(g, nthreads);
  }
  const ampc_gemm_ukernel *uk = ampc_gemm_active_ukernel();
  if (g->epi && (!uk || (g->adt == AMPC_F32 && g->bdt == AMPC_F32 && g->cdt == AMPC_F32 &&
                         f32_on_openblas())))
    return epi_apart(g, acc);
  if (g->adt == AMPC_F32 && g->bdt == AMPC_F32 && g->cdt == AMPC_F32 && f32_on_openblas() &&
      g->m <= INT32_MAX && g->n <= INT32_MAX && g->k <= INT32_MAX && g->lda <= INT32_MAX &&
      g->ldb <= INT32_MAX && g->ldc <= INT32_MAX) {
    for (int64_t t = 0; t < g->batch; t++)
      cblas_sgemm(CblasRowMajor, g->opa == AMPC_OP_T ? CblasTrans : CblasNoTrans,
                  g->opb == AMPC_OP_T ? CblasTrans : CblasNoTrans, (int)g->m, (int)g->n, (int)g->k,
                  g->alpha, (const float *)g->a + t * g->stride_a, (int)g->lda,
                  (const float *)g->b + t * g->stride_b, (int)g->ldb, g->beta,
                  (float *)g->c + t * g->stride_c, (int)g->ldc);
    ampc_tally *const tm = ampc_tally_tls; /* count C as the other paths' epilogues do */
    for (int64_t t = 0; tm && t < g->batch; t++)
      for (int64_t i = 0; i < g->m; i++) {
        const float *row = (const float *)g->c + t * g->stride_c + i * g->ldc;
        ampc_tally_count(tm, row, row, AMPC_F32, (size_t)g->n);
      }
    return AMPC_OK;
  }
  /* bf16 x bf16 on VDPBF16PS where the CPU has it (the same bits; operands
   * outside its range fall back inside ampc_gemm_blocked) */
  if (uk == &ampc_gemm_uk_avx512 && !g_forced_uk && g->adt == AMPC_BF16 && g->bdt == AMPC_BF16 &&
      ampc_gemm_bf16dot_available())
    uk = &ampc_gemm_uk_avx512bf16;
  if (uk)
    return ampc_gemm_blocked(g, &g_cfg, nthreads, uk);
  ampc_gemm_portable(g, nthreads);
  return AMPC_OK;
}

static ampc_status gemm_sb(const char *fn, ampc_op opa, ampc_op opb, int64_t m, int64_t n,
                           int64_t k, float alpha, const void *a, ampc_dtype a_dt, int64_t lda,
                           int64_t stride_a, const void *b, ampc_dtype b_dt, int64_t ldb,
                           int64_t stride_b, float beta, void *c, ampc_dtype c_dt, int64_t ldc,
                           int64_t stride_c, int64_t batch, ampc_acc acc,
                           const ampc_gemm_epi *epi) {
  if (acc != AMPC_ACC_F32 && acc != AMPC_ACC_F16)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: acc must be AMPC_ACC_F32 or AMPC_ACC_F16", fn);
  if (batch < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: negative batch or stride (batch=%lld stride_a=%lld stride_b=%lld "
                     "stride_c=%lld)",
                     fn, (long long)batch, (long long)stride_a, (long long)stride_b,
                     (long long)stride_c);
  const int ab_needed = alpha != 0.0f && k > 0;
  ampc_status st =
      validate(fn, opa, opb, m, n, k, a, a_dt, lda, b, b_dt, ldb, 1, c, c_dt, ldc, ab_needed);
  if (st != AMPC_OK)
    return st;
  int64_t last;
  if (batch > 1 && (__builtin_mul_overflow(batch - 1, stride_a, &last) ||
                    __builtin_mul_overflow(batch - 1, stride_b, &last) ||
                    __builtin_mul_overflow(batch - 1, stride_c, &last) ||
                    __builtin_mul_overflow(last, (int64_t)8, &last)))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: batch %lld with these strides is too large to address", fn,
                     (long long)batch);
  /* the batched C matrices must not share an element: either stacked
   * (stride_c >= (M-1) ldc + N) or side by side within the rows (column
   * blocks, e.g. the heads of one attention output: N <= stride_c and
   * (batch-1) stride_c + N <= ldc) */
  if (batch > 1 && m > 0 && n > 0 && stride_c < (m - 1) * ldc + n &&
      !(stride_c >= n && (batch - 1) * stride_c + n <= ldc))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: stride_c=%lld lets batched C matrices overlap (need >= %lld, or side "
                     "by side within ldc)",
                     fn, (long long)stride_c, (long long)((m - 1) * ldc + n));
  ampc_gemm_args g = {.m = m,
                      .n = n,
                      .k = k,
                      .batch = batch,
                      .alpha = alpha,
                      .beta = beta,
                      .a = a,
                      .adt = a_dt,
                      .stride_a = stride_a,
                      .b = b,
                      .bdt = b_dt,
                      .stride_b = stride_b,
                      .c = c,
                      .cdt = c_dt,
                      .ldc = ldc,
                      .stride_c = stride_c,
                      .epi = epi};
  to_general(&g, opa, opb, lda, ldb);
  st = run(&g, acc);
  if (st == AMPC_OK && alpha != 0.0f) /* (K = 0 adds 0) */
    atomic_fetch_add_explicit(&g_flops,
                              2 * (uint64_t)m * (uint64_t)n * (uint64_t)k * (uint64_t)batch,
                              memory_order_relaxed);
  return st;
}

ampc_status ampc_gemm_strided_batched(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k,
                                      float alpha, const void *a, ampc_dtype a_dt, int64_t lda,
                                      int64_t stride_a, const void *b, ampc_dtype b_dt, int64_t ldb,
                                      int64_t stride_b, float beta, void *c, ampc_dtype c_dt,
                                      int64_t ldc, int64_t stride_c, int64_t batch, ampc_acc acc) {
  return gemm_sb("ampc_gemm", opa, opb, m, n, k, alpha, a, a_dt, lda, stride_a, b, b_dt, ldb,
                 stride_b, beta, c, c_dt, ldc, stride_c, batch, acc, NULL);
}

ampc_status ampc_gemm_ex(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k, float alpha,
                         const void *a, ampc_dtype a_dt, int64_t lda, const void *b,
                         ampc_dtype b_dt, int64_t ldb, float beta, void *c, ampc_dtype c_dt,
                         int64_t ldc, ampc_acc acc, const ampc_gemm_epi *epi) {
  const char *fn = "ampc_gemm_ex";
  if (epi && acc != AMPC_ACC_F32)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: an epilogue needs AMPC_ACC_F32", fn);
  if (epi && epi->bias) {
    if (beta != 0.0f)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: a bias needs beta = 0 (got %g)", fn,
                       (double)beta);
    if ((unsigned)c_dt < AMPC_DTYPE_COUNT && operand_dtype_ok(c_dt))
      for (int64_t j = 0; j < n; j++) { /* each value one of C's dtype */
        uint32_t held = 0;
        ampc_elem_store_uncounted(&held, c_dt, 0, epi->bias[j]);
        const float back = ampc_elem_load(&held, c_dt, 0);
        if (memcmp(&back, &epi->bias[j], sizeof back) != 0 && !isnan(back))
          return ampc_fail(AMPC_ERR_INVALID_ARG,
                           "%s: bias[%lld] = %g is not a value of C's dtype %s", fn, (long long)j,
                           (double)epi->bias[j], ampc_dtype_name(c_dt));
      }
  }
  return gemm_sb(fn, opa, opb, m, n, k, alpha, a, a_dt, lda, 0, b, b_dt, ldb, 0, beta, c, c_dt, ldc,
                 0, 1, acc, epi);
}

uint64_t ampc_gemm_flop_count(void) { return atomic_load_explicit(&g_flops, memory_order_relaxed); }

ampc_status ampc_gemm(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k, float alpha,
                      const void *a, ampc_dtype a_dt, int64_t lda, const void *b, ampc_dtype b_dt,
                      int64_t ldb, float beta, void *c, ampc_dtype c_dt, int64_t ldc,
                      ampc_acc acc) {
  return ampc_gemm_strided_batched(opa, opb, m, n, k, alpha, a, a_dt, lda, 0, b, b_dt, ldb, 0, beta,
                                   c, c_dt, ldc, 0, 1, acc);
}

ampc_status ampc_gemm_reference(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k,
                                double alpha, const void *a, ampc_dtype a_dt, int64_t lda,
                                const void *b, ampc_dtype b_dt, int64_t ldb, double beta,
                                const void *c, ampc_dtype c_dt, int64_t ldc, double *out,
                                double *abs_out) {
  ampc_status st = validate("ampc_gemm_reference", opa, opb, m, n, k, a, a_dt, lda, b, b_dt, ldb,
                            beta != 0.0, c, c_dt, ldc, alpha != 0.0 && k > 0);
  if (st != AMPC_OK)
    return st;
  if (m > 0 && n > 0 && !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_gemm_reference: out is NULL");
  ampc_gemm_args g = {0};
  to_general(&g, opa, opb, lda, ldb);
  for (int64_t i = 0; i < m; i++) {
    for (int64_t j = 0; j < n; j++) {
      double s = 0.0, sa = 0.0;
      for (int64_t p = 0; alpha != 0.0 && p < k; p++) { /* A, B not read when alpha == 0 */
        double prod = (double)ampc_gemm_load(a, a_dt, i * g.rs_a + p * g.cs_a) *
                      (double)ampc_gemm_load(b, b_dt, p * g.rs_b + j * g.cs_b);
        s += prod;
        sa += fabs(prod);
      }
      double v = alpha * s;
      if (beta != 0.0)
        v += beta * (double)ampc_gemm_load(c, c_dt, i * ldc + j);
      out[i * n + j] = v;
      if (abs_out)
        abs_out[i * n + j] = sa;
    }
  }
  return AMPC_OK;
}
