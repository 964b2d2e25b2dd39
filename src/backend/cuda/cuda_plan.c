/*
 * src/backend/cuda/cuda_plan.c: the checks and the row-major -> column-major mapping
 * of ampc_cuda_gemm (see cuda_impl.h). Host code only, built with or without
 * CUDA, so that tests/test_cuda_plan.c runs everywhere.
 */
#include "backend/cuda/cuda_impl.h"

#include "internal.h"

static int is_fp8(ampc_dtype dt) { return dt == AMPC_F8_E4M3 || dt == AMPC_F8_E5M2; }

ampc_cuda_gemm_args ampc_cuda_gemm_args_default(void) {
  ampc_cuda_gemm_args g = {0};
  g.opa = g.opb = AMPC_OP_N;
  g.alpha = 1.0f;
  g.beta = 0.0f;
  g.batch = 1;
  g.a_dt = g.b_dt = g.c_dt = g.bias_dt = AMPC_F16;
  g.compute = AMPC_CUDA_COMPUTE_32F;
  return g;
}

int ampc_cuda_align_class(const void *p) {
  const uintptr_t u = (uintptr_t)p;
  int a = 1;
  while (a < 256 && (u & (uintptr_t)(2 * a - 1)) == 0)
    a *= 2;
  return a;
}

static const char *compute_name(ampc_cuda_compute c) {
  switch (c) {
  case AMPC_CUDA_COMPUTE_32F: return "32F";
  case AMPC_CUDA_COMPUTE_16F: return "16F";
  case AMPC_CUDA_COMPUTE_32F_PEDANTIC: return "32F_PEDANTIC";
  case AMPC_CUDA_COMPUTE_32F_FAST_TF32: return "32F_FAST_TF32";
  }
  return "?";
}

/* cuBLASLt's data-type table, as restricted in cuda.h */
static ampc_status check_dtypes(const char *fn, const ampc_cuda_gemm_args *g) {
  const ampc_dtype at = g->a_dt, bt = g->b_dt, ct = g->c_dt;
  const char *an = ampc_dtype_name(at), *bn = ampc_dtype_name(bt), *cn = ampc_dtype_name(ct);
  switch (g->compute) {
  case AMPC_CUDA_COMPUTE_32F:
    if (is_fp8(at) || is_fp8(bt)) {
      if (!is_fp8(at) || !is_fp8(bt))
        return ampc_fail(AMPC_ERR_UNSUPPORTED,
                         "%s: A is %s and B is %s; an FP8 GEMM needs both operands FP8", fn, an,
                         bn);
      if (at == AMPC_F8_E5M2 && bt == AMPC_F8_E5M2)
        return ampc_fail(AMPC_ERR_UNSUPPORTED,
                         "%s: E5M2 x E5M2 is not offered by cuBLASLt (use E4M3 for one operand)",
                         fn);
      if (ct != AMPC_F16 && ct != AMPC_BF16 && ct != AMPC_F32 && !is_fp8(ct))
        return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: C has dtype %s", fn, cn);
      if (ct == AMPC_F8_E5M2 && at != AMPC_F8_E5M2 && bt != AMPC_F8_E5M2)
        return ampc_fail(AMPC_ERR_UNSUPPORTED,
                         "%s: an E5M2 C needs an E5M2 operand (cuBLASLt: E4M3 x E4M3 gives "
                         "E4M3, bf16, f16 or f32)",
                         fn);
      return AMPC_OK;
    }
    if (at != bt)
      return ampc_fail(AMPC_ERR_UNSUPPORTED,
                       "%s: A is %s and B is %s; cuBLASLt needs one input dtype", fn, an, bn);
    if (at == AMPC_F16 && (ct == AMPC_F16 || ct == AMPC_F32))
      return AMPC_OK;
    if (at == AMPC_BF16 && (ct == AMPC_BF16 || ct == AMPC_F32))
      return AMPC_OK;
    if (at == AMPC_F32 && ct == AMPC_F32)
      return AMPC_OK;
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "%s: %s x %s -> %s with compute 32F is not offered (f16 -> f16|f32, bf16 -> "
                     "bf16|f32, f32 -> f32, FP8)",
                     fn, an, bn, cn);
  case AMPC_CUDA_COMPUTE_16F:
    if (at == AMPC_F16 && bt == AMPC_F16 && ct == AMPC_F16)
      return AMPC_OK;
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "%s: compute 16F takes f16 A, B and C (got %s x %s -> %s)", fn, an, bn, cn);
  case AMPC_CUDA_COMPUTE_32F_PEDANTIC:
  case AMPC_CUDA_COMPUTE_32F_FAST_TF32:
    if (at == AMPC_F32 && bt == AMPC_F32 && ct == AMPC_F32)
      return AMPC_OK;
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "%s: compute %s takes f32 A, B and C (got %s x %s -> %s)", fn,
                     compute_name(g->compute), an, bn, cn);
  }
  return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: unknown compute type %d", fn, (int)g->compute);
}

/* (rows - 1) * ld + cols elements, times batch strides, fit in int64 bytes */
static int too_large(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  int64_t off, last;
  if (rows <= 0 || cols <= 0)
    return 0;
  return __builtin_mul_overflow(rows - 1, ld, &off) || __builtin_add_overflow(off, cols, &off) ||
         __builtin_mul_overflow(batch - 1, stride, &last) ||
         __builtin_add_overflow(off, last, &off) || __builtin_mul_overflow(off, (int64_t)8, &off);
}

ampc_status ampc_cuda_plan_gemm(const char *fn, const ampc_cuda_gemm_args *g, ampc_cuda_plan *out) {
  if (!g || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: NULL argument", fn);
  if ((g->opa != AMPC_OP_N && g->opa != AMPC_OP_T) || (g->opb != AMPC_OP_N && g->opb != AMPC_OP_T))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: op must be AMPC_OP_N or AMPC_OP_T", fn);
  const int64_t m = g->m, n = g->n, k = g->k;
  if (m < 0 || n < 0 || k < 0 || g->batch < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: negative dimension (m=%lld n=%lld k=%lld batch=%lld)", fn, (long long)m,
                     (long long)n, (long long)k, (long long)g->batch);
  if (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: negative stride", fn);
  const ampc_dtype dts[3] = {g->a_dt, g->b_dt, g->c_dt};
  for (int i = 0; i < 3; i++)
    if ((unsigned)dts[i] >= AMPC_DTYPE_COUNT)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: invalid dtype %d for %c", fn, (int)dts[i],
                       "ABC"[i]);
  ampc_status st = check_dtypes(fn, g);
  if (st != AMPC_OK)
    return st;
  const int fp8 = is_fp8(g->a_dt);
  if (is_fp8(g->c_dt) && !fp8)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: an FP8 C needs FP8 A and B", fn);

  /* the row-major checks, as ampc_gemm's */
  const int64_t min_lda = g->opa == AMPC_OP_N ? k : m;
  const int64_t min_ldb = g->opb == AMPC_OP_N ? n : k;
  if (g->lda < (min_lda > 1 ? min_lda : 1))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: lda=%lld < %lld (A is %s)", fn, (long long)g->lda,
                     (long long)(min_lda > 1 ? min_lda : 1),
                     g->opa == AMPC_OP_N ? "M x K" : "K x M");
  if (g->ldb < (min_ldb > 1 ? min_ldb : 1))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldb=%lld < %lld (B is %s)", fn, (long long)g->ldb,
                     (long long)(min_ldb > 1 ? min_ldb : 1),
                     g->opb == AMPC_OP_N ? "K x N" : "N x K");
  if (g->ldc < (n > 1 ? n : 1))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldc=%lld < %lld (C is M x N)", fn,
                     (long long)g->ldc, (long long)(n > 1 ? n : 1));

  ampc_cuda_plan p = {0};
  p.noop = m == 0 || n == 0 || g->batch == 0;
  p.k_zero = k == 0 || g->alpha == 0.0f;
  p.fp8 = fp8;
  p.batch = g->batch;
  p.alpha = g->alpha;
  p.beta = g->beta;
  p.compute = g->compute;
  /* cuBLASLt's A = ampc's B, its B = ampc's A (see cuda_impl.h) */
  p.m = n, p.n = m, p.k = k;
  p.trans_a = g->opb == AMPC_OP_T;
  p.a = g->b, p.a_dt = g->b_dt, p.lda = g->ldb, p.stride_a = g->stride_b;
  p.a_rows = p.trans_a ? k : n, p.a_cols = p.trans_a ? n : k;
  p.trans_b = g->opa == AMPC_OP_T;
  p.b = g->a, p.b_dt = g->a_dt, p.ldb = g->lda, p.stride_b = g->stride_a;
  p.b_rows = p.trans_b ? m : k, p.b_cols = p.trans_b ? k : m;
  p.d = g->c, p.d_dt = g->c_dt, p.ldd = g->ldc, p.stride_d = g->stride_c;
  /* an FP8 D's C layout: the bias's dtype (cuBLASLt requires C = bias type
   * there), else BF16; C itself is not read (beta = 0) */
  p.c_layout_dt = is_fp8(g->c_dt) ? (g->bias ? g->bias_dt : AMPC_BF16) : g->c_dt;
  p.bias = g->bias, p.bias_dt = g->bias_dt;
  p.scale_a = g->scale_b, p.scale_b = g->scale_a, p.scale_d = g->scale_c;
  p.amax_d = g->amax_c;

  if (!fp8 && (g->scale_a || g->scale_b || g->scale_c || g->amax_c))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: scale_a, scale_b, scale_c and amax_c are for FP8 GEMMs only", fn);
  if (g->scale_c && !is_fp8(g->c_dt))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: scale_c applies to an FP8 C only (C is %s)", fn,
                     ampc_dtype_name(g->c_dt));
  if (is_fp8(g->c_dt) && g->beta != 0.0f)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: an FP8 C needs beta = 0 (C is not read)", fn);
  if (fp8) {
    if (g->opa != AMPC_OP_N || g->opb != AMPC_OP_T)
      return ampc_fail(AMPC_ERR_UNSUPPORTED,
                       "%s: FP8 needs op(A) = N and op(B) = T (both K-contiguous: cuBLASLt's TN)",
                       fn);
    if (g->lda % 16 || g->ldb % 16 || g->ldc % 16)
      return ampc_fail(AMPC_ERR_UNSUPPORTED,
                       "%s: FP8 needs lda, ldb, ldc multiples of 16 (got %lld, %lld, %lld)", fn,
                       (long long)g->lda, (long long)g->ldb, (long long)g->ldc);
    if ((g->batch > 1 && (g->stride_a % 16 || g->stride_b % 16 || g->stride_c % 16)) ||
        ampc_cuda_align_class(g->a) < 16 || ampc_cuda_align_class(g->b) < 16 ||
        ampc_cuda_align_class(g->c) < 16)
      return ampc_fail(AMPC_ERR_UNSUPPORTED,
                       "%s: FP8 needs A, B, C (and each batch's) 16-byte aligned", fn);
    /* cuBLASLt 13.1 on an H200 refused (status 15) every FP8 product whose
     * scale_b pointed 4 bytes into an allocation, and ran them without the
     * scales: the scale pointers are held to the matrices' 16 bytes */
    if ((g->scale_a && ampc_cuda_align_class(g->scale_a) < 16) ||
        (g->scale_b && ampc_cuda_align_class(g->scale_b) < 16) ||
        (g->scale_c && ampc_cuda_align_class(g->scale_c) < 16))
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "%s: FP8 scale pointers must be 16-byte aligned (e.g. each its own "
                       "allocation)",
                       fn);
  }
  if (g->bias) {
    int ok;
    if (!fp8)
      ok = g->bias_dt == g->c_dt;
    else if (g->c_dt == AMPC_F16 || g->c_dt == AMPC_BF16)
      ok = g->bias_dt == g->c_dt;
    else if (g->c_dt == AMPC_F32)
      ok = g->bias_dt == AMPC_BF16;
    else
      ok = g->bias_dt == AMPC_BF16 || g->bias_dt == AMPC_F16;
    if (!ok)
      return ampc_fail(AMPC_ERR_UNSUPPORTED,
                       "%s: bias dtype %s does not go with C %s%s (C's dtype; BF16 for FP8 with "
                       "F32 C; BF16 or F16 for FP8 C)",
                       fn, ampc_dtype_name(g->bias_dt), ampc_dtype_name(g->c_dt),
                       fp8 ? " in an FP8 GEMM" : "");
  }
  if (p.noop) {
    *out = p;
    return AMPC_OK;
  }
  const int64_t a_r = g->opa == AMPC_OP_N ? m : k, a_c = g->opa == AMPC_OP_N ? k : m;
  const int64_t b_r = g->opb == AMPC_OP_N ? k : n, b_c = g->opb == AMPC_OP_N ? n : k;
  if (too_large(a_r, a_c, g->lda, g->batch, g->stride_a) ||
      too_large(b_r, b_c, g->ldb, g->batch, g->stride_b) ||
      too_large(m, n, g->ldc, g->batch, g->stride_c))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: an operand is too large to address", fn);
  /* the batched C matrices must not share an element (as ampc_gemm) */
  if (g->batch > 1 && g->stride_c < (m - 1) * g->ldc + n &&
      !(g->stride_c >= n && (g->batch - 1) * g->stride_c + n <= g->ldc))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: stride_c=%lld lets batched C matrices overlap (need >= %lld, or side "
                     "by side within ldc)",
                     fn, (long long)g->stride_c, (long long)((m - 1) * g->ldc + n));
  if (!g->c)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: C is NULL", fn);
  if (!p.k_zero && (!g->a || !g->b))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s is NULL", fn, !g->a ? "A" : "B");
  /* element alignment: cuBLASLt reads whole elements */
  const void *ptrs[4] = {g->a, g->b, g->c, g->bias};
  const ampc_dtype pdt[4] = {g->a_dt, g->b_dt, g->c_dt, g->bias_dt};
  for (int i = 0; i < 4; i++)
    if (ptrs[i] && (size_t)ampc_cuda_align_class(ptrs[i]) < ampc_dtype_size(pdt[i]))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s is not aligned to its %s elements", fn,
                       i == 3 ? "bias" : (const char *[]){"A", "B", "C"}[i],
                       ampc_dtype_name(pdt[i]));
  *out = p;
  return AMPC_OK;
}
