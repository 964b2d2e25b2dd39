/*
 * src/cuda/cuda_layers.cu: the GEMM-type layers of ampc/nn.h on the GPU:
 * the strided batched GEMM in ampc_gemm's row-major convention with any mix
 * of F32 / F16 / BF16 operands (ampc_cuda_gemm_strided_batched), the linear
 * layer (forward, backward with the bias column sums) and the attention core
 * (S = q k^T / sqrt(dh) per head, the masked softmax, P v; and back).
 *
 * cuBLASLt multiplies A and B of one dtype only (ampc/cuda.h). The CPU's
 * GEMM widens any operand to FP32 while packing, so a mixed product (an FP32
 * dS against 16-bit keys in the attention backward pass) is, exactly, the
 * FP32 product of the widened operands: here the 16-bit operand is widened
 * into device scratch (exact) and the FP32 GEMM runs (no TF32: PEDANTIC), and
 * a 16-bit C of an FP32 product goes through an FP32 copy rounded once.
 * Products of two 16-bit operands run on Tensor Cores with FP32 sums
 * (COMPUTE_32F); the FP16-accumulation ablation (AMPC_ACC_F16) needs F16
 * A, B and C (COMPUTE_16F). Built with --fmad=false.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.cuh"

using namespace ampc_cu;

namespace {

/* scratch slots (cuda_impl.h): 4, 5, 6 the GEMM's widened A, B, C; 7 the
 * layers' FP32 buffers (linear with stats, attention's dP and dS, dq, dk) */
enum { SLOT_A = 4, SLOT_B = 5, SLOT_C = 6, SLOT_L = 7 };

__global__ void widen_k(int64_t n, const void *src, int dt, float *dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = ld(src, dt, i);
}

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

/* every row of c [m, n] (dt) = bias (wdt) rounded to dt: the CPU's way of
 * adding the bias in the GEMM's FP32 epilogue (beta = 1) */
__global__ void bias_rows_k(int64_t m, int64_t n, const void *b, int bdt, void *c, int dt) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * n;
       e += (int64_t)gridDim.x * blockDim.x)
    st(c, dt, e, ld(b, bdt, e % n));
}

/* db[j] = round(db[j] + sum over rows of dy[i][j], rows in order, FP32) */
__global__ void bias_grad_k(int64_t m, int64_t n, const void *dy, int gdt, void *db,
                            dev_stats *ds) {
  lstats ls(ds);
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;
       j += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int64_t i = 0; i < m; i++)
      s += ld(dy, gdt, i * n + j);
    const float v = ld(db, gdt, j) + s;
    const uint32_t o = st(db, gdt, j, v);
    if (ds)
      ls.add(v, gdt, o);
  }
  ls.flush(ds);
}

/* elements spanned by a strided batch of rows x cols matrices */
int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
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

bool direct_ok(ampc_dtype a, ampc_dtype b, ampc_dtype c) {
  if (a != b)
    return false;
  if (a == AMPC_F32)
    return c == AMPC_F32;
  return c == a || c == AMPC_F32; /* F16 -> F16/F32, BF16 -> BF16/F32 */
}

} // namespace

extern "C" {

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
    if (a_dt != AMPC_F16 || b_dt != AMPC_F16 || c_dt != AMPC_F16)
      return ampc_fail(AMPC_ERR_UNSUPPORTED,
                       "%s: FP16 accumulation on the GPU needs F16 A, B and C (CUBLAS_COMPUTE_16F)",
                       fn);
    g.compute = AMPC_CUDA_COMPUTE_16F;
    AMPC_TRY(ampc_cuda_gemm(ctx, &g));
    /* the FP16 sums are the stored values: counted as they are */
    return counting ? count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c) : AMPC_OK;
  }
  const bool direct = direct_ok(a_dt, b_dt, c_dt);
  if (direct) {
    g.compute = a_dt == AMPC_F32 ? AMPC_CUDA_COMPUTE_32F_PEDANTIC : AMPC_CUDA_COMPUTE_32F;
    if (!counting)
      return ampc_cuda_gemm(ctx, &g);
    if (c_dt == AMPC_F32) {
      AMPC_TRY(ampc_cuda_gemm(ctx, &g));
      return count_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c);
    }
    /* the counting twin first (with beta it reads C before the product writes it) */
    float *w = NULL;
    AMPC_TRY(widen_c(fn, ctx, strm, batch, m, n, c, c_dt, ldc, stride_c, beta, &w));
    ampc_cuda_gemm_args t = g;
    t.c = w, t.c_dt = AMPC_F32;
    AMPC_TRY(ampc_cuda_gemm(ctx, &t));
    AMPC_TRY(ampc_cuda_gemm(ctx, &g));
    STATS_BEGIN(NULL);
    round_k<<<grid_for(batch * m * n), THREADS, 0, strm>>>(batch, m, n, w, ldc, stride_c, NULL,
                                                           c_dt, 0, 0, dst);
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

ampc_status ampc_cuda_linear_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                     const void *w, ampc_dtype wdt, const void *b, void *y,
                                     ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_linear_forward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, k);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  /* as the CPU: with stats, an FP32 product rounded once (and counted);
   * the bias laid into the destination, rounded to its dtype, and added by
   * the GEMM (beta = 1) in FP32 */
  const ampc_dtype cdt = stats ? AMPC_F32 : ydt;
  void *c = y;
  if (stats)
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)(m * n) * sizeof(float), &c));
  if (b) {
    bias_rows_k<<<grid_for(m * n), THREADS, 0, strm>>>(m, n, b, wdt, c, cdt);
    AMPC_TRY(ampc_cu_launched(fn));
  }
  AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, m, n, k, 1.0f, x, xdt, k, 0, w, wdt,
                                          k, 0, b ? 1.0f : 0.0f, c, cdt, n, 0, 1, acc));
  if (!stats)
    return AMPC_OK;
  dev_stats *dst = NULL;
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, stats, &dst));
  round_k<<<grid_for(m * n), THREADS, 0, strm>>>(1, m, n, static_cast<const float *>(c), n, 0, y,
                                                 ydt, n, 0, dst);
  AMPC_TRY(ampc_cu_launched(fn));
  return ampc_cu_stats_end(strm, dst, stats);
}

ampc_status ampc_cuda_linear_backward(int64_t m, int64_t k, int64_t n, const void *dy,
                                      ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                      ampc_dtype wdt, void *dx, void *dw, void *db, ampc_acc acc,
                                      ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_linear_backward";
  CU_CHECK_POS(fn, m);
  CU_CHECK_POS(fn, k);
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, dy);
  CU_CHECK_PTR(fn, x);
  CU_CHECK_PTR(fn, w);
  CU_CHECK_PTR(fn, dw);
  CU_CHECK_DT(fn, gdt);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, wdt);
  CU_BEGIN(fn);
  if (dx) /* dx [m, k] = dy [m, n] . W [n, k] */
    AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, 0, w,
                                            wdt, k, 0, 0.0f, dx, gdt, k, 0, 1, acc));
  /* dW [n, k] += dy^T [n, m] . x [m, k] */
  AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, n, k, m, 1.0f, dy, gdt, n, 0, x,
                                          xdt, k, 0, 1.0f, dw, gdt, k, 0, 1, acc));
  if (!db)
    return AMPC_OK;
  STATS_BEGIN(NULL); /* db counted as the CPU's gradient add counts it */
  bias_grad_k<<<grid_for(n), THREADS, 0, strm>>>(m, n, dy, gdt, db, dst);
  FINISH(fn, NULL);
}

/* The attention core: one strided batched GEMM per head, batched over the
 * samples (a head's q block of sample i is q + i tq ldq + head dh; its
 * scores are at (i h + head) tq tk). */
ampc_status ampc_cuda_attention_forward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                        const void *q, int64_t ldq, const void *k, int64_t ldk,
                                        const void *v, int64_t ldv, ampc_dtype xdt,
                                        const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                        void *probs, ampc_dtype pdt, void *out, int64_t ldo,
                                        ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_attention_forward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, tq);
  CU_CHECK_POS(fn, tk);
  CU_CHECK_POS(fn, h);
  CU_CHECK_POS(fn, dh);
  if (ldq < h * dh || ldk < h * dh || ldv < h * dh || ldo < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldq/ldk/ldv/ldo must be >= h*dh = %lld", fn,
                     (long long)(h * dh));
  CU_CHECK_PTR(fn, q);
  CU_CHECK_PTR(fn, k);
  CU_CHECK_PTR(fn, v);
  CU_CHECK_PTR(fn, scores);
  CU_CHECK_PTR(fn, probs);
  CU_CHECK_PTR(fn, out);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, sdt);
  CU_CHECK_DT(fn, pdt);
  CU_CHECK_DT(fn, odt);
  CU_BEGIN(fn);
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk;
  const size_t xs = ampc_dtype_size(xdt), es = ampc_dtype_size(sdt), ps = ampc_dtype_size(pdt);
  for (int64_t hi = 0; hi < h; hi++)
    AMPC_TRY(ampc_cuda_gemm_strided_batched(
        AMPC_OP_N, AMPC_OP_T, tq, tk, dh, scale, (const char *)q + hi * dh * xs, xdt, ldq, tq * ldq,
        (const char *)k + hi * dh * xs, xdt, ldk, tk * ldk, 0.0f, (char *)scores + hi * ss * es,
        sdt, tk, h * ss, b, acc));
  AMPC_TRY(ampc_cuda_softmax_forward(b * h * tq, tk, scores, sdt, 1.0f, key_mask, h * tq, probs,
                                     pdt, NULL));
  /* out = P v, heads side by side; with stats through an FP32 copy */
  void *dst = out;
  ampc_dtype ddt = odt;
  int64_t ldd = ldo;
  if (stats) {
    AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)(b * tq * h * dh) * sizeof(float), &dst));
    ddt = AMPC_F32, ldd = h * dh;
  }
  const size_t ds = ampc_dtype_size(ddt);
  for (int64_t hi = 0; hi < h; hi++)
    AMPC_TRY(ampc_cuda_gemm_strided_batched(
        AMPC_OP_N, AMPC_OP_N, tq, dh, tk, 1.0f, (const char *)probs + hi * ss * ps, pdt, tk, h * ss,
        (const char *)v + hi * dh * xs, xdt, ldv, tk * ldv, 0.0f, (char *)dst + hi * dh * ds, ddt,
        ldd, tq * ldd, b, acc));
  if (!stats)
    return AMPC_OK;
  dev_stats *dstats = NULL;
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, stats, &dstats));
  round_k<<<grid_for(b * tq * h * dh), THREADS, 0, strm>>>(
      1, b * tq, h * dh, static_cast<const float *>(dst), ldd, 0, out, odt, ldo, 0, dstats);
  AMPC_TRY(ampc_cu_launched(fn));
  return ampc_cu_stats_end(strm, dstats, stats);
}

ampc_status ampc_cuda_attention_backward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                         const void *q, int64_t ldq, const void *k, int64_t ldk,
                                         const void *v, int64_t ldv, ampc_dtype xdt,
                                         const void *probs, ampc_dtype pdt, const void *dout,
                                         int64_t lddo, ampc_dtype gdt, void *dq, int64_t lddq,
                                         void *dk, int64_t lddk, void *dv, int64_t lddv,
                                         ampc_acc acc, ampc_scratch *ws) {
  (void)ws;
  const char *fn = "ampc_cuda_attention_backward";
  CU_CHECK_POS(fn, b);
  CU_CHECK_POS(fn, tq);
  CU_CHECK_POS(fn, tk);
  CU_CHECK_POS(fn, h);
  CU_CHECK_POS(fn, dh);
  if (ldq < h * dh || ldk < h * dh || ldv < h * dh || lddo < h * dh || lddq < h * dh ||
      lddk < h * dh || lddv < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: leading dimensions must be >= h*dh = %lld", fn,
                     (long long)(h * dh));
  CU_CHECK_PTR(fn, q);
  CU_CHECK_PTR(fn, k);
  CU_CHECK_PTR(fn, v);
  CU_CHECK_PTR(fn, probs);
  CU_CHECK_PTR(fn, dout);
  CU_CHECK_PTR(fn, dq);
  CU_CHECK_PTR(fn, dk);
  CU_CHECK_PTR(fn, dv);
  CU_CHECK_DT(fn, xdt);
  CU_CHECK_DT(fn, pdt);
  CU_CHECK_DT(fn, gdt);
  CU_BEGIN(fn);
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk, dm = h * dh;
  /* FP32 buffers: dP, dS [b, h, tq, tk]; dq32 [b*tq, dm]; dk32 [b*tk, dm] */
  void *sp = NULL;
  const int64_t nf = 2 * b * h * ss + b * tq * dm + b * tk * dm;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, SLOT_L, (size_t)nf * sizeof(float), &sp));
  float *dp = static_cast<float *>(sp), *dsm = dp + b * h * ss, *dq32 = dsm + b * h * ss,
        *dk32 = dq32 + b * tq * dm;
  const size_t xs = ampc_dtype_size(xdt), gs = ampc_dtype_size(gdt), ps = ampc_dtype_size(pdt);
  for (int64_t hi = 0; hi < h; hi++) /* dP = dout v^T */
    AMPC_TRY(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, 1.0f,
                                            (const char *)dout + hi * dh * gs, gdt, lddo, tq * lddo,
                                            (const char *)v + hi * dh * xs, xdt, ldv, tk * ldv,
                                            0.0f, dp + hi * ss, AMPC_F32, tk, h * ss, b, acc));
  /* dS = softmax backward, FP32 */
  AMPC_TRY(ampc_cuda_softmax_backward(b * h * tq, tk, dp, AMPC_F32, probs, pdt, 1.0f, dsm));
  for (int64_t hi = 0; hi < h; hi++) {
    /* dq = scale dS k ; dk = scale dS^T q (FP32, then one rounding each,
     * counted there: the CPU's GEMM writes them straight into dq, dk) */
    ampc_tally *const was = ampc_tally_bind(NULL);
    ampc_status st = ampc_cuda_gemm_strided_batched(
        AMPC_OP_N, AMPC_OP_N, tq, dh, tk, scale, dsm + hi * ss, AMPC_F32, tk, h * ss,
        (const char *)k + hi * dh * xs, xdt, ldk, tk * ldk, 0.0f, dq32 + hi * dh, AMPC_F32, dm,
        tq * dm, b, acc);
    if (st == AMPC_OK)
      st = ampc_cuda_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, scale, dsm + hi * ss,
                                          AMPC_F32, tk, h * ss, (const char *)q + hi * dh * xs, xdt,
                                          ldq, tq * ldq, 0.0f, dk32 + hi * dh, AMPC_F32, dm,
                                          tk * dm, b, acc);
    (void)ampc_tally_bind(was);
    AMPC_TRY(st);
    /* dv = P^T dout */
    AMPC_TRY(ampc_cuda_gemm_strided_batched(
        AMPC_OP_T, AMPC_OP_N, tk, dh, tq, 1.0f, (const char *)probs + hi * ss * ps, pdt, tk, h * ss,
        (const char *)dout + hi * dh * gs, gdt, lddo, tq * lddo, 0.0f, (char *)dv + hi * dh * gs,
        gdt, lddv, tk * lddv, b, acc));
  }
  STATS_BEGIN(NULL);
  round_k<<<grid_for(b * tq * dm), THREADS, 0, strm>>>(1, b * tq, dm, dq32, dm, 0, dq, gdt, lddq, 0,
                                                       dst);
  round_k<<<grid_for(b * tk * dm), THREADS, 0, strm>>>(1, b * tk, dm, dk32, dm, 0, dk, gdt, lddk, 0,
                                                       dst);
  FINISH(fn, NULL);
}

} /* extern "C" */
