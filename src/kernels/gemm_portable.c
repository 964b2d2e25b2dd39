/*
 * src/kernels/gemm_portable.c: the GEMM paths in plain C, for a CPU without
 * AVX2 (or AMPC_ISA=portable) and as the definitions the vector paths match
 * bit for bit: C = beta * C when there is nothing to multiply, the FP32
 * accumulation (one FMA chain per element, in p order from +0), and the
 * FP16-accumulation ablation (the sum rounded to binary16 after every
 * product).
 */
#include "internal.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/gemm_impl.h"

static size_t esz(ampc_dtype dt) { return ampc_dtype_size(dt); }
#define AT(p, dt, off) ((const void *)((const char *)(p) + (size_t)(off)*esz(dt)))
#define ATW(p, dt, off) ((void *)((char *)(p) + (size_t)(off)*esz(dt)))

void ampc_gemm_scale_c(const ampc_gemm_args *g) {
  for (int64_t t = 0; t < g->batch; t++) {
    void *c = ATW(g->c, g->cdt, t * g->stride_c);
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++)
        ampc_gemm_epilogue1(c, g->cdt, i * g->ldc + j, 0.0f, g->beta, 0.0f);
  }
}

void ampc_gemm_portable(const ampc_gemm_args *g, int nthreads) {
  const int64_t total = g->batch * g->m;
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t r = 0; r < total; r++) {
    ampc_tally_adopt(tally);
    const int64_t t = r / g->m, i = r % g->m;
    const void *a = AT(g->a, g->adt, t * g->stride_a);
    const void *b = AT(g->b, g->bdt, t * g->stride_b);
    void *c = ATW(g->c, g->cdt, t * g->stride_c);
    for (int64_t j = 0; j < g->n; j++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < g->k; p++)
        acc = fmaf(ampc_gemm_load(a, g->adt, i * g->rs_a + p * g->cs_a),
                   ampc_gemm_load(b, g->bdt, p * g->rs_b + j * g->cs_b), acc);
      ampc_gemm_epilogue1(c, g->cdt, i * g->ldc + j, g->alpha, g->beta, acc);
    }
  }
}

/* binary16 rounding of a double (RNE, subnormals kept, overflow to inf), as a
 * double: scale so the binary16 ulp becomes 1, round to an integer with the
 * 1.5*2^52 trick (exact RNE in the default rounding mode), scale back. */
static inline double round_f16_f64(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  const uint64_t ax = u & ~(UINT64_C(1) << 63);
  if (ax >= UINT64_C(0x7FF0000000000000)) /* inf or NaN */
    return x;
  int e = (int)(ax >> 52) - 1023; /* |x| in [2^e, 2^(e+1)) */
  if (e < -14)
    e = -14;
  if (e > 16)
    return x > 0 ? (double)INFINITY : -(double)INFINITY;
  uint64_t up = (uint64_t)(1023 + 10 - e) << 52, down = (uint64_t)(1023 - 10 + e) << 52;
  double s_up, s_down;
  memcpy(&s_up, &up, 8);
  memcpy(&s_down, &down, 8);
  const double q = x * s_up; /* |q| < 2^11: exact */
  const double r = (q + 0x1.8p52) - 0x1.8p52;
  const double v = copysign(r * s_down, x);
  if (fabs(v) > 65504.0)
    return x > 0 ? (double)INFINITY : -(double)INFINITY;
  return v;
}

/* op(A) and op(B)^T are widened to double once per matrix of the batch. */
ampc_status ampc_gemm_acc16_portable(const ampc_gemm_args *g, int nthreads) {
  enum { JB = 8 };
  const int64_t m = g->m, n = g->n, k = g->k;
  size_t bytes;
  if (__builtin_mul_overflow((size_t)(m + n), (size_t)k * sizeof(double), &bytes))
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): workspace size overflows");
  double *ad = ampc_gemm_workspace(bytes);
  if (!ad)
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): cannot allocate %zu bytes", bytes);
  double *bt = ad + m * k;
  for (int64_t t = 0; t < g->batch; t++) {
    const void *a = AT(g->a, g->adt, t * g->stride_a);
    const void *b = AT(g->b, g->bdt, t * g->stride_b);
    void *c = ATW(g->c, g->cdt, t * g->stride_c);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel num_threads(nthreads)
    {
      ampc_tally_adopt(tally);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++)
          ad[i * k + p] = (double)ampc_gemm_load(a, g->adt, i * g->rs_a + p * g->cs_a);
#pragma omp for schedule(static)
      for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++)
          bt[j * k + p] = (double)ampc_gemm_load(b, g->bdt, p * g->rs_b + j * g->cs_b);
#pragma omp for schedule(dynamic, 4)
      for (int64_t i = 0; i < m; i++) {
        const double *ar = ad + i * k;
        for (int64_t j0 = 0; j0 < n; j0 += JB) {
          const int jb = (int)(n - j0 < JB ? n - j0 : JB);
          double s[JB] = {0};
          for (int64_t p = 0; p < k; p++)
            for (int jj = 0; jj < jb; jj++) /* JB independent chains */
              s[jj] = round_f16_f64(fma(ar[p], bt[(j0 + jj) * k + p], s[jj]));
          for (int jj = 0; jj < jb; jj++)
            ampc_gemm_epilogue1(c, g->cdt, i * g->ldc + j0 + jj, g->alpha, g->beta, (float)s[jj]);
        }
      }
    }
  }
  return AMPC_OK;
}
