/*
 * src/backend/cuda/cuda_gemm_batched.cu: the strided batched GEMM of the
 * GPU's GEMM-type layers: ampc_gemm_strided_batched's row-major convention
 * with any mix of F32 / F16 / BF16 operands (ampc_cuda_gemm_strided_batched,
 * ampc_cuda_set_acc16_exact), its widening, rounding and counting kernels
 * and the FP16-accumulation kernel (acc16_k); round_k, span and direct_ok
 * are shared with cuda_linear.cu and cuda_attention.cu
 * (cuda_layers_impl.cuh).
 *
 * cuBLASLt multiplies A and B of one dtype only (cuda.h). The CPU's
 * GEMM widens any operand to FP32 while packing, so a mixed product (an FP32
 * dS against 16-bit keys in the attention backward pass) is, exactly, the
 * FP32 product of the widened operands: here the 16-bit operand is widened
 * into device scratch (exact) and the FP32 GEMM runs (no TF32: PEDANTIC), and
 * a 16-bit C of an FP32 product goes through an FP32 copy rounded once.
 * Products of two 16-bit operands run on Tensor Cores with FP32 sums
 * (COMPUTE_32F). The FP16-accumulation ablation (AMPC_ACC_F16): F16 A and
 * B on cuBLASLt's COMPUTE_16F (the Tensor Cores' FP16 sums; an F32 or BF16
 * C through F16 scratch and the CPU's FP32 epilogue), other operands on a
 * kernel that sums in binary16 in order as the CPU does (gemm.c), every
 * product there with AMPC_CUDA_ACC16=exact. Built with --fmad=false.
 */
#include <assert.h>
#include <atomic>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_layers_impl.cuh"

using namespace ampc_cu;

namespace ampc_cu { /* declared in cuda_layers_impl.cuh */

/* dst (dt) = round(src) over a batch of rows x cols matrices (leading
 * dimensions lds, ldd; batch strides ss, sd), counting; dst NULL: the
 * rounding only counted, not stored (the counting twin of a product cuBLASLt
 * rounds into C itself) */
__global__ void round_k(int64_t batch, int64_t rows, int64_t cols, const float *src, int64_t lds,
                        int64_t ss, void *dst, int dt, int64_t ldd, int64_t sd, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = rows * cols;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / per, i = (e % per) / cols, j = e % cols;
    const float v = src[bi * ss + i * lds + j];
    const uint32_t o = dst ? st(dst, dt, bi * sd + i * ldd + j, v) : rbits(v, dt);
    if (ds)
      ls.add(v, dt, o);
  }
  ls.flush(ds);
}

/* elements spanned by a strided batch of rows x cols matrices */
int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

bool direct_ok(ampc_dtype a, ampc_dtype b, ampc_dtype c) {
  if (a != b)
    return false;
  if (a == AMPC_F32)
    return c == AMPC_F32;
  return c == a || c == AMPC_F32; /* F16 -> F16/F32, BF16 -> BF16/F32 */
}

} // namespace ampc_cu

namespace {

__global__ void widen_k(int64_t n, const void *src, int dt, float *dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = ld(src, dt, i);
}

/* c (dt) = round(c + src) over a batch of rows x cols matrices (src in c's
 * layout): alpha A B + C with alpha = beta = 1 as the FP32 epilogue forms it
 * (one FP32 addition of the product to C widened), rounded once; in place
 * of widening C into the FP32 copy before the GEMM and rounding it after
 * (a pass over C and a launch fewer: the weight gradients that the
 * backward pass adds into 16-bit gradients) */
template <typename I> /* int64_t, or uint32_t where every index fits (faster division) */
__global__ void add_round_k(I batch, I rows, I cols, const float *src, void *c, int dt, I ldc,
                            I sc) {
  const I per = rows * cols;
  for (I e = blockIdx.x * blockDim.x + threadIdx.x; e < batch * per; e += gridDim.x * blockDim.x) {
    const I bi = e / per, r = e - bi * per, i = r / cols, j = r - i * cols;
    const I at = bi * sc + i * ldc + j;
    st(c, dt, at, ld(c, dt, at) + src[at]);
  }
}

/* count what a batch of rows x cols matrices in dt holds, as stored from
 * itself (an FP32 result is its own source; the rounding tally's view of a
 * product cuBLASLt wrote) */
__global__ void count_k(int64_t batch, int64_t rows, int64_t cols, const void *c, int dt,
                        int64_t ldc, int64_t sc, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = rows * cols;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t bi = e / per, i = (e % per) / cols, j = e % cols, at = bi * sc + i * ldc + j;
    const uint32_t o =
        dt == DT_F32 ? static_cast<const uint32_t *>(c)[at] : static_cast<const uint16_t *>(c)[at];
    ls.add(ld(c, dt, at), dt, o);
  }
  ls.flush(ds);
}

/* binary16 rounding of a double (RNE, subnormals kept, overflow to inf) as
 * a double: gemm_portable.c's round_f16_f64, the same operations (scale the
 * binary16 ulp to 1, round with the 1.5 2^52 trick, scale back) */
__device__ __forceinline__ double round_f16_d(double x) {
  const unsigned long long u = (unsigned long long)__double_as_longlong(x);
  const unsigned long long ax = u & ~(1ull << 63);
  if (ax >= 0x7FF0000000000000ull) /* inf or NaN */
    return x;
  int e = (int)(ax >> 52) - 1023;
  if (e < -14)
    e = -14;
  if (e > 16)
    return x > 0 ? __longlong_as_double(0x7FF0000000000000ll)
                 : __longlong_as_double((long long)0xFFF0000000000000ull);
  const double s_up = __longlong_as_double((long long)(1023 + 10 - e) << 52);
  const double s_down = __longlong_as_double((long long)(1023 - 10 + e) << 52);
  const double q = x * s_up; /* |q| < 2^11: exact */
  const double r = __dsub_rn(__dadd_rn(q, 0x1.8p52), 0x1.8p52);
  const double v = copysign(r * s_down, x);
  if (fabs(v) > 65504.0)
    return x > 0 ? __longlong_as_double(0x7FF0000000000000ll)
                 : __longlong_as_double((long long)0xFFF0000000000000ull);
  return v;
}

/* The FP16-accumulation ablation as the CPU defines it (gemm.c's
 * gemm_acc16): per element of C, s <- fp16(fma(a, b, s)) for p = 0..k-1 in
 * order from +0 (operands widened exactly to double), then the FP32
 * epilogue alpha s + beta C rounded once into C, counted. op(A)[i][p] =
 * a[i rsa + p csa], op(B)[p][j] = b[p rsb + j csb]. One thread per element:
 * slow, for the ablation's operand mixes that COMPUTE_16F cannot take, and
 * for all of them with AMPC_CUDA_ACC16=exact. */
__global__ void acc16_k(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                        int adt, int64_t rsa, int64_t csa, int64_t sa, const void *b, int bdt,
                        int64_t rsb, int64_t csb, int64_t sb, float beta, void *c, int cdt,
                        int64_t ldc, int64_t sc, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = m * n;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / per, i = (e % per) / n, j = e % n;
    const int64_t a0 = t * sa + i * rsa, b0 = t * sb + j * csb;
    double s = 0.0;
    for (int64_t p = 0; p < k; p++)
      s = round_f16_d(fma((double)ld(a, adt, a0 + p * csa), (double)ld(b, bdt, b0 + p * rsb), s));
    const int64_t at = t * sc + i * ldc + j;
    float v = alpha * (float)s;
    if (beta != 0.0f)
      v += beta * ld(c, cdt, at);
    cst(c, cdt, at, v, ls, ds);
  }
  ls.flush(ds);
}

/* C (cdt, counted) = alpha s + beta C in FP32, one rounding: the epilogue
 * of an FP16-accumulated product s (F16, ldc n, batch stride m n) */
__global__ void acc16_epi_k(int64_t batch, int64_t m, int64_t n, const __half *s, float alpha,
                            float beta, void *c, int cdt, int64_t ldc, int64_t sc, dev_stats *ds) {
  lstats ls(ds);
  const int64_t per = m * n;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * per;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / per, i = (e % per) / n, j = e % n, at = t * sc + i * ldc + j;
    float v = alpha * __half2float(s[e]);
    if (beta != 0.0f)
      v += beta * ld(c, cdt, at);
    cst(c, cdt, at, v, ls, ds);
  }
  ls.flush(ds);
}

/* 1: every FP16-accumulated product on acc16_k (the CPU's bits); 0: F16 x
 * F16 products on cuBLASLt's COMPUTE_16F; -1: not yet set, AMPC_CUDA_ACC16
 * ("exact") decides at the first use */
std::atomic<int> g_acc16_exact{-1};
bool acc16_exact(void) {
  int v = g_acc16_exact.load(std::memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("AMPC_CUDA_ACC16");
    v = e && strcmp(e, "exact") == 0;
    int unset = -1; /* a setter's value wins */
    if (!g_acc16_exact.compare_exchange_strong(unset, v))
      v = g_acc16_exact.load(std::memory_order_relaxed);
  }
  return v != 0;
}

/* count C (a batch of m x n matrices, ldc, stride sc) as it is stored: an
 * FP32 product is its own source (the tally's view of cuBLASLt's output) */
ampc_status count_c(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, int64_t batch, int64_t m,
                    int64_t n, const void *c, ampc_dtype dt, int64_t ldc, int64_t sc) {
  STATS_BEGIN(NULL);
  count_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, c, dt, ldc, sc, dst);
  FINISH(fn, NULL);
}

/* FP32 scratch over the span of a 16-bit C (slot SLOT_C), holding C widened
 * when beta reads it */
ampc_status widen_c(const char *fn, ampc_cuda_ctx *ctx, cudaStream_t strm, int64_t batch, int64_t m,
                    int64_t n, const void *c, ampc_dtype dt, int64_t ldc, int64_t sc, float beta,
                    float **w) {
  const int64_t sp = span(m, n, ldc, sc, batch);
  void *p = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_C, (size_t)sp * sizeof(float), &p));
  *w = static_cast<float *>(p);
  if (beta != 0.0f)
    widen_k<<<grid_for(sp), THREADS, 0, strm>>>(sp, c, dt, *w);
  return ampc_cu_launched(fn);
}

} // namespace

extern "C" {

void ampc_cuda_set_acc16_exact(bool exact) { g_acc16_exact.store(exact ? 1 : 0); }

ampc_status ampc_cuda_gemm_strided_batched(ampc_op opa, ampc_op opb, int64_t m, int64_t n,
                                           int64_t k, float alpha, const void *a, ampc_dtype a_dt,
                                           int64_t lda, int64_t stride_a, const void *b,
                                           ampc_dtype b_dt, int64_t ldb, int64_t stride_b,
                                           float beta, void *c, ampc_dtype c_dt, int64_t ldc,
                                           int64_t stride_c, int64_t batch, ampc_acc acc) {
  const char *fn = "ampc_cuda_gemm_strided_batched";
  CU_CHECK_DT(fn, a_dt);
  CU_CHECK_DT(fn, b_dt);
  CU_CHECK_DT(fn, c_dt);
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: negative size", fn);
  CU_BEGIN(fn);
  if (m == 0 || n == 0 || batch == 0)
    return AMPC_OK;
  ampc_cuda_gemm_args g = ampc_cuda_gemm_args_default();
  g.opa = opa, g.opb = opb, g.m = m, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
  g.a = a, g.a_dt = a_dt, g.lda = lda, g.stride_a = stride_a;
  g.b = b, g.b_dt = b_dt, g.ldb = ldb, g.stride_b = stride_b;
  g.c = c, g.c_dt = c_dt, g.ldc = ldc, g.stride_c = stride_c, g.batch = batch;
  /* With a rounding tally bound, C is counted as the CPU's GEMM epilogue
   * counts it (m n per matrix), and the product is the one an unsampled step
   * makes (the telemetry does not change the run): an FP32 C is counted after
   * the product; a 16-bit C that cuBLASLt rounds itself is counted from a
   * second, FP32 product of the same operands (its rounding computed, not
   * stored: the counts describe sums within the GEMM bound of cuBLASLt's) */
  const bool counting = ampc_cu_tally_on();
  if (acc == AMPC_ACC_F16) {
    const bool none = alpha == 0.0f || k == 0; /* as the CPU: A B not read */
    if (!none && !acc16_exact() && a_dt == AMPC_F16 && b_dt == AMPC_F16) {
      g.compute = AMPC_CUDA_COMPUTE_16F;
      if (c_dt == AMPC_F16) { /* straight into C: alpha and beta in binary16 */
        AMPC_TRY(ampc_cuda_gemm(ctx, &g));
        /* the FP16 sums are the stored values: counted as they are */
        return counting ? count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c) : AMPC_OK;
      }
      /* an F32 or BF16 C: the FP16 sums into F16 scratch, then the CPU's
       * FP32 epilogue (alpha s + beta C, one rounding) */
      void *s16 = NULL;
      AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_C, (size_t)(batch * m * n) * 2, &s16));
      g.alpha = 1.0f, g.beta = 0.0f;
      g.c = s16, g.c_dt = AMPC_F16, g.ldc = n, g.stride_c = m * n;
      AMPC_TRY(ampc_cuda_gemm(ctx, &g));
      STATS_BEGIN(NULL);
      acc16_epi_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(
          batch, m, n, static_cast<const __half *>(s16), alpha, beta, c, c_dt, ldc, stride_c, dst);
      FINISH(fn, NULL);
    }
    /* any other operands (an FP32 dS, BF16), or AMPC_CUDA_ACC16=exact: the
     * CPU's definition, element by element */
    STATS_BEGIN(NULL);
    acc16_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(
        batch, m, n, none ? 0 : k, none ? 0.0f : alpha, a, a_dt, opa == AMPC_OP_N ? lda : 1,
        opa == AMPC_OP_N ? 1 : lda, stride_a, b, b_dt, opb == AMPC_OP_N ? ldb : 1,
        opb == AMPC_OP_N ? 1 : ldb, stride_b, beta, c, c_dt, ldc, stride_c, dst);
    FINISH(fn, NULL);
  }
  const bool direct = direct_ok(a_dt, b_dt, c_dt);
  if (direct) {
    g.compute = a_dt == AMPC_F32 ? AMPC_CUDA_COMPUTE_32F_PEDANTIC : AMPC_CUDA_COMPUTE_32F;
    /* A 16-bit C that beta reads: cuBLASLt's epilogue rounds alpha A B to
     * C's dtype before it adds beta C (seen on an H200, cuBLASLt 13.1: two
     * roundings, up to 1.5 ulps), so the sum is formed in FP32 scratch and
     * rounded once, as the CPU's epilogue does */
    const bool wide = c_dt != AMPC_F32 && beta != 0.0f;
    if (!counting && !wide)
      return ampc_cuda_gemm(ctx, &g);
    if (c_dt == AMPC_F32) {
      AMPC_TRY(ampc_cuda_gemm(ctx, &g));
      return count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c);
    }
    if (!counting && alpha == 1.0f && beta == 1.0f) { /* C += A B, uncounted */
      float *w = NULL;
      AMPC_TRY(widen_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c, 0.0f, &w));
      ampc_cuda_gemm_args t = g;
      t.c = w, t.c_dt = AMPC_F32, t.beta = 0.0f;
      AMPC_TRY(ampc_cuda_gemm(ctx, &t));
      const int64_t last = (batch - 1) * stride_c + (m - 1) * ldc + n; /* C's span */
      if (batch * m * n < ((int64_t)1 << 31) && last < ((int64_t)1 << 31))
        add_round_k<uint32_t><<<grid_for(batch * m * n), THREADS, 0, strm>>>(
            (uint32_t)batch, (uint32_t)m, (uint32_t)n, w, c, c_dt, (uint32_t)ldc,
            (uint32_t)stride_c);
      else
        add_round_k<int64_t>
            <<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, w, c, c_dt, ldc, stride_c);
      return ampc_cu_launched(fn);
    }
    /* the FP32 product first (with beta it reads C before anything writes
     * it); without beta, cuBLASLt's own 16-bit C beside it (one rounding
     * too) and the FP32 one only counted */
    float *w = NULL;
    AMPC_TRY(widen_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c, beta, &w));
    ampc_cuda_gemm_args t = g;
    t.c = w, t.c_dt = AMPC_F32;
    AMPC_TRY(ampc_cuda_gemm(ctx, &t));
    if (!wide)
      AMPC_TRY(ampc_cuda_gemm(ctx, &g));
    STATS_BEGIN(NULL);
    round_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, w, ldc, stride_c,
                                                           wide ? c : NULL, c_dt, wide ? ldc : 0,
                                                           wide ? stride_c : 0, dst);
    FINISH(fn, NULL);
  }
  /* mixed: widen to FP32 (exact), FP32 GEMM, one rounding into C */
  const int64_t ar = opa == AMPC_OP_N ? m : k, ac = opa == AMPC_OP_N ? k : m;
  const int64_t br = opb == AMPC_OP_N ? k : n, bc = opb == AMPC_OP_N ? n : k;
  if (k > 0 && a_dt != AMPC_F32) {
    const int64_t sp = span(ar, ac, lda, stride_a, batch);
    void *w = NULL;
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_A, (size_t)sp * sizeof(float), &w));
    widen_k<<<grid_for(sp), THREADS, 0, strm>>>(sp, a, a_dt, static_cast<float *>(w));
    g.a = w, g.a_dt = AMPC_F32;
  }
  if (k > 0 && b_dt != AMPC_F32) {
    const int64_t sp = span(br, bc, ldb, stride_b, batch);
    void *w = NULL;
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_B, (size_t)sp * sizeof(float), &w));
    widen_k<<<grid_for(sp), THREADS, 0, strm>>>(sp, b, b_dt, static_cast<float *>(w));
    g.b = w, g.b_dt = AMPC_F32;
  }
  g.compute = AMPC_CUDA_COMPUTE_32F_PEDANTIC;
  if (c_dt == AMPC_F32) {
    AMPC_TRY(ampc_cu_launched(fn));
    AMPC_TRY(ampc_cuda_gemm(ctx, &g));
    return counting ? count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c) : AMPC_OK;
  }
  /* a 16-bit C: its span widened when beta reads it, the FP32 result
   * rounded back into the matrices (elements between them are not touched) */
  float *w = NULL;
  AMPC_TRY(widen_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c, beta, &w));
  g.c = w, g.c_dt = AMPC_F32;
  AMPC_TRY(ampc_cuda_gemm(ctx, &g));
  STATS_BEGIN(NULL);
  round_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, w, ldc, stride_c, c, c_dt,
                                                         ldc, stride_c, dst);
  FINISH(fn, NULL);
}

} /* extern "C" */
