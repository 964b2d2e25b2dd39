/*
 * tests/test_cuda_nn.c: the GPU's layers, gradient pass and optimizer
 * (src/backend/cuda/cuda_nn.h) against their CPU twins (ampc/nn.h, ampc/amp.h,
 * ampc/optim.h) on the same inputs, in every dtype combination the model
 * uses.
 *
 * Everywhere (no GPU needed): the host-side checks run before any CUDA call
 * (bad sizes, NULL buffers, bad dtypes: AMPC_ERR_INVALID_ARG; no bound
 * context: AMPC_ERR_INVALID_ARG naming ampc_cuda_bind; a build without CUDA:
 * AMPC_ERR_UNSUPPORTED). Then, without a device, exit 77 (CTest: skipped)
 * with the reason; bench/gpu/check.sh runs the rest on the GPU machine.
 *
 * On a GPU, what src/backend/cuda/cuda_nn.h promises:
 *   bit-equal to the CPU (NaN payloads aside), round stats equal too:
 *     add, GELU and its backward, gradient add, ViT tokens (both ways),
 *     mean pooling (both ways), embeddings (both ways, repeated ids), layer
 *     norm's dgamma and dbeta (from the same mean and rstd), the optimizer
 *     step (AdamW and SGD; FP32 master; 16-bit state; stochastic rounding;
 *     Kahan; swallowed-update counts);
 *   within bounds derived from the reduction order (the CPU sums in order,
 *   the GPU in a fixed tree):
 *     layer norm forward: mean and rstd (double sums rounded to FP32) within
 *       1 ulp of FP32, y within 1 ulp of its dtype plus 2 ulps of FP32 of
 *       |xhat gamma| (through mean and rstd);
 *     layer norm dx: 4 * 2^-24 * rstd (|g gamma| + |mean(g gamma)| +
 *       |xhat mean(g gamma xhat)|) plus 1 ulp of the dtype;
 *     softmax: (n + 2) 2^-24 |y| plus 1 ulp of the dtype (FP32 row sums
 *       in another order), backward (n + 2) 2^-24 |scale y| sum |dy y| + ulp;
 *     L2 normalisation: 2 ulps of FP32 relative plus 1 ulp of the dtype
 *       (double norms), backward with |x| |c| (n + 2) 2^-52 more;
 *     gradient norm: 2^-40 relative (double sums of up to 10^6 terms);
 *     GEMMs (linear, attention): twice the CPU GEMM's bound (K + 3) 2^-24
 *       sum |a b| plus the output roundings (both sides meet it), and for
 *       the attention's probabilities and gradients the first-order
 *       propagation of those bounds through the softmax; the attention
 *       layer (projections + core) normwise: 8 K 2^-24 max |ref| with K the
 *       inner dimensions along the chain;
 *     losses (CUDA's expf and log against glibc's): a few ulps of FP32 at
 *       the size of the log-sum-exps; the patch embedding's unfold is
 *       bit-equal and its products meet the GEMM bound.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_nn.h"

#ifdef AMPC_TEST_ON_CPU
/* The harness's self-check (CTest test_cuda_nn_harness, built from this file
 * with AMPC_TEST_ON_CPU): the "device" is host memory and every ampc_cuda_
 * function under test is its CPU twin, so every comparison below must come
 * out bit-equal. It runs the buffers, copies, tolerances and comparisons of
 * the GPU test where there is no GPU, so that the one device run checks the
 * kernels, not the harness. */
static ampc_status fake_malloc(ampc_cuda_ctx *c, size_t n, void **p) {
  (void)c;
  *p = malloc(n ? n : 1);
  return *p ? AMPC_OK : AMPC_ERR_NOMEM;
}
static void fake_free(ampc_cuda_ctx *c, void *p) { (void)c, free(p); }
static ampc_status fake_copy(ampc_cuda_ctx *c, void *dst, const void *src, size_t n) {
  (void)c, memcpy(dst, src, n);
  return AMPC_OK;
}
#define ampc_cuda_malloc fake_malloc
#define ampc_cuda_free fake_free
#define ampc_cuda_to_device fake_copy
#define ampc_cuda_to_host fake_copy
#define ampc_cuda_add_forward ampc_add_forward
#define ampc_cuda_gelu_forward ampc_gelu_forward
#define ampc_cuda_gelu_backward ampc_gelu_backward
#define ampc_cuda_grad_add_f32 ampc_grad_add_f32
#define ampc_cuda_layernorm_forward ampc_layernorm_forward
#define ampc_cuda_layernorm_backward ampc_layernorm_backward
#define ampc_cuda_softmax_forward ampc_softmax_forward
#define ampc_cuda_softmax_backward ampc_softmax_backward
#define ampc_cuda_embedding_forward ampc_embedding_forward
#define ampc_cuda_embedding_backward ampc_embedding_backward
#define ampc_cuda_vit_tokens_forward ampc_vit_tokens_forward
#define ampc_cuda_vit_tokens_backward ampc_vit_tokens_backward
#define ampc_cuda_mean_pool_forward ampc_mean_pool_forward
#define ampc_cuda_mean_pool_backward ampc_mean_pool_backward
#define ampc_cuda_l2norm_forward ampc_l2norm_forward
#define ampc_cuda_l2norm_backward ampc_l2norm_backward
#define ampc_cuda_linear_forward ampc_linear_forward
#define ampc_cuda_linear_backward ampc_linear_backward
#define ampc_cuda_fp8_cast_bf16 ampc_fp8_cast_bf16
#define ampc_cuda_linear_forward_fp8 ampc_linear_forward_fp8
#define ampc_cuda_linear_backward_fp8 ampc_linear_backward_fp8
#define ampc_cuda_linear_dgrad_fp8 ampc_linear_dgrad_fp8
#define ampc_cuda_attention_forward ampc_attention_forward
#define ampc_cuda_attention_forward_ex ampc_attention_forward_ex
#define ampc_cuda_attention_backward_ex ampc_attention_backward_ex
#define ampc_cuda_attention_backward ampc_attention_backward
#define ampc_cuda_attention_probs ampc_attention_probs
#define ampc_cuda_mha_forward ampc_mha_forward
#define ampc_cuda_mha_backward_ex ampc_mha_backward_ex
#define ampc_cuda_patch_embed_forward ampc_patch_embed_forward
#define ampc_cuda_patch_embed_backward ampc_patch_embed_backward
#define ampc_cuda_cross_entropy_forward ampc_cross_entropy_forward
#define ampc_cuda_cross_entropy_backward ampc_cross_entropy_backward
#define ampc_cuda_bce_logits_forward ampc_bce_logits_forward
#define ampc_cuda_bce_logits_backward ampc_bce_logits_backward
#define ampc_cuda_infonce_forward ampc_infonce_forward
#define ampc_cuda_infonce_backward ampc_infonce_backward
#define ampc_cuda_grad_unscale_check ampc_grad_unscale_check
#define ampc_cuda_optim_step_from ampc_optim_step_from
#define ampc_cuda_gather_rows ampc_gather_rows
#define ampc_cuda_scatter_rows ampc_scatter_rows
#define ampc_cuda_scatter_add_rows ampc_scatter_add_rows
#define ampc_cuda_argmax_rows ampc_argmax_rows
#define ampc_cuda_store_f32 ampc_store_f32
#define ampc_cuda_convert ampc_convert
#define ampc_cuda_gemm_strided_batched ampc_gemm_strided_batched
#define ampc_cuda_set_acc16_exact(on) ((void)(on))
#define ampc_cuda_set_typed_kernels(on) ((void)(on))
#define ampc_cuda_typed_launches() 0LL
static ampc_status fake_scale_f32(int64_t n, float *x, float s) {
  for (int64_t i = 0; i < n; i++)
    x[i] *= s;
  return AMPC_OK;
}
static ampc_status fake_zero(void *p, size_t n) {
  memset(p, 0, n);
  return AMPC_OK;
}
static ampc_status fake_copy2d(void *dst, size_t dp, const void *src, size_t sp, size_t w,
                               size_t rows) {
  for (size_t r = 0; r < rows; r++)
    memcpy((char *)dst + r * dp, (const char *)src + r * sp, w);
  return AMPC_OK;
}
#define ampc_cuda_scale_f32 fake_scale_f32
#define ampc_cuda_zero fake_zero
#define ampc_cuda_copy2d fake_copy2d
#endif

static int g_fail;
static int64_t g_checked;
static ampc_cuda_ctx *g_ctx;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      g_fail = 1;                                                                                  \
    }                                                                                              \
  } while (0)
#define OK(call)                                                                                   \
  do {                                                                                             \
    ampc_status s_ = (call);                                                                       \
    if (s_ != AMPC_OK) {                                                                           \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, ampc_last_error());       \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static const ampc_dtype k_dts[3] = {AMPC_F32, AMPC_F16, AMPC_BF16};
static const char *dn(ampc_dtype dt) {
  return dt == AMPC_F32 ? "f32" : dt == AMPC_F16 ? "f16" : "bf16";
}
/* unit roundoff and smallest subnormal step of a dtype */
static double ulp_rel(ampc_dtype dt) {
  return dt == AMPC_F16 ? 0x1p-10 : dt == AMPC_BF16 ? 0x1p-7 : 0x1p-23;
}
static double ulp_min(ampc_dtype dt) {
  return dt == AMPC_F16 ? 0x1p-24 : dt == AMPC_BF16 ? 0x1p-133 : 0x1p-149;
}

/* ---- buffers: a host copy and a device copy ------------------------------- */

typedef struct buf {
  void *h, *d;
  ampc_dtype dt;
  int64_t n;
  size_t bytes;
} buf;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [0, 1) */
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * 0x1p-53;
}

/* n elements of dt from f (FP32 values, rounded once to dt), on both sides */
static buf from_f32(ampc_dtype dt, const float *f, int64_t n) {
  buf b = {NULL, NULL, dt, n, (size_t)n * ampc_dtype_size(dt)};
  b.h = malloc(b.bytes ? b.bytes : 1);
  if (!b.h)
    exit(1);
  OK(ampc_convert(b.h, dt, f, AMPC_F32, (size_t)n));
  if (g_ctx) {
    OK(ampc_cuda_malloc(g_ctx, b.bytes, &b.d));
    OK(ampc_cuda_to_device(g_ctx, b.d, b.h, b.bytes));
  }
  return b;
}
/* uniform in [lo, hi) */
static buf rnd_buf(ampc_dtype dt, int64_t n, double lo, double hi) {
  float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
  for (int64_t i = 0; i < n; i++)
    f[i] = (float)(lo + (hi - lo) * urand());
  buf b = from_f32(dt, f, n);
  free(f);
  return b;
}
/* raw bytes (ids, masks) */
static buf raw_buf(const void *src, size_t bytes) {
  buf b = {NULL, NULL, AMPC_F32, 0, bytes};
  b.h = malloc(bytes ? bytes : 1);
  memcpy(b.h, src, bytes);
  if (g_ctx) {
    OK(ampc_cuda_malloc(g_ctx, bytes, &b.d));
    OK(ampc_cuda_to_device(g_ctx, b.d, b.h, bytes));
  }
  return b;
}
static void drop(buf *b) {
  free(b->h);
  if (g_ctx)
    ampc_cuda_free(g_ctx, b->d);
  b->h = b->d = NULL;
}
/* the device copy, widened to FP32 */
static float *down_f32(const buf *b) {
  void *raw = malloc(b->bytes ? b->bytes : 1);
  float *f = malloc((size_t)(b->n > 0 ? b->n : 1) * sizeof *f);
  OK(ampc_cuda_to_host(g_ctx, raw, b->d, b->bytes));
  OK(ampc_convert(f, AMPC_F32, raw, b->dt, (size_t)b->n));
  free(raw);
  return f;
}
static float *host_f32(const buf *b) {
  float *f = malloc((size_t)(b->n > 0 ? b->n : 1) * sizeof *f);
  OK(ampc_convert(f, AMPC_F32, b->h, b->dt, (size_t)b->n));
  return f;
}

/* Compare the device copy with the host copy (the CPU's result): bit-equal
 * (tol NULL; NaN equals NaN whatever the payload) or |gpu - cpu| <= tol[i]. */
static void compare(const char *what, const buf *b, const double *tol) {
  float *g = down_f32(b), *c = host_f32(b);
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < b->n; i++) {
    const bool both_nan = isnan(g[i]) && isnan(c[i]);
    bool ok;
    if (both_nan)
      ok = true;
    else if (!tol)
      ok = memcmp(&g[i], &c[i], sizeof g[i]) == 0;
    else {
      const double d = fabs((double)g[i] - (double)c[i]);
      ok = (isinf(g[i]) || isinf(c[i])) ? g[i] == c[i] : d <= tol[i];
      if (tol[i] > 0.0 && d / tol[i] > worst)
        worst = d / tol[i];
    }
    if (!ok && bad++ == 0)
      first = i;
  }
  g_checked += b->n;
  CHECK(bad == 0, "%s: %lld of %lld differ (first [%lld]: gpu %.9g cpu %.9g)", what, (long long)bad,
        (long long)b->n, (long long)first, first >= 0 ? (double)g[first] : 0.0,
        first >= 0 ? (double)c[first] : 0.0);
  if (tol)
    printf("  %-44s %8lld values, worst |diff| / bound %.3f\n", what, (long long)b->n, worst);
  else
    printf("  %-44s %8lld values, bit-equal\n", what, (long long)b->n);
  free(g);
  free(c);
}

static void stats_equal(const char *what, const ampc_round_stats *g, const ampc_round_stats *c) {
  CHECK(g->count == c->count && g->underflow == c->underflow && g->subnormal == c->subnormal &&
            g->overflow == c->overflow && g->inf == c->inf && g->nan == c->nan &&
            g->max_abs == c->max_abs,
        "%s: round stats differ: gpu count %llu uf %llu sub %llu of %llu inf %llu nan %llu max "
        "%g, cpu %llu %llu %llu %llu %llu %llu %g",
        what, (unsigned long long)g->count, (unsigned long long)g->underflow,
        (unsigned long long)g->subnormal, (unsigned long long)g->overflow,
        (unsigned long long)g->inf, (unsigned long long)g->nan, (double)g->max_abs,
        (unsigned long long)c->count, (unsigned long long)c->underflow,
        (unsigned long long)c->subnormal, (unsigned long long)c->overflow,
        (unsigned long long)c->inf, (unsigned long long)c->nan, (double)c->max_abs);
}

/* ---- element-wise and row layers --------------------------------------------- */

static void test_elementwise(void) {
  printf("element-wise:\n");
  const int64_t n = 70001; /* not a multiple of anything */
  for (int ia = 0; ia < 3; ia++)
    for (int iy = 0; iy < 3; iy++) {
      const ampc_dtype adt = k_dts[ia], ydt = k_dts[iy];
      char nm[96];
      /* values that overflow, flush and go subnormal in the 16-bit types */
      buf a = rnd_buf(adt, n, -70000.0, 70000.0), b = rnd_buf(AMPC_F32, n, -1.0, 1.0);
      float *bf = host_f32(&b);
      for (int64_t i = 0; i < n; i += 7)
        bf[i] = (float)(1e-9 * (urand() - 0.5));
      drop(&b);
      b = from_f32(AMPC_F32, bf, n);
      free(bf);
      buf y = rnd_buf(ydt, n, 0, 1);
      ampc_round_stats sc = {0}, sg = {0};
      OK(ampc_add_forward(n, a.h, adt, b.h, AMPC_F32, y.h, ydt, &sc));
      OK(ampc_cuda_add_forward(n, a.d, adt, b.d, AMPC_F32, y.d, ydt, &sg));
      snprintf(nm, sizeof nm, "add %s + f32 -> %s", dn(adt), dn(ydt));
      compare(nm, &y, NULL);
      stats_equal(nm, &sg, &sc);
      drop(&a);
      /* GELU on [-12, 12) plus specials */
      buf x = rnd_buf(adt, n, -12.0, 12.0);
      float *xf = host_f32(&x);
      xf[0] = INFINITY, xf[1] = -INFINITY, xf[2] = NAN, xf[3] = 0.0f, xf[4] = -0.0f;
      xf[5] = -0.75f, xf[6] = 1e-30f;
      drop(&x);
      x = from_f32(adt, xf, n);
      free(xf);
      memset(&sc, 0, sizeof sc), memset(&sg, 0, sizeof sg);
      OK(ampc_gelu_forward(n, x.h, adt, y.h, ydt, &sc));
      OK(ampc_cuda_gelu_forward(n, x.d, adt, y.d, ydt, &sg));
      snprintf(nm, sizeof nm, "gelu %s -> %s", dn(adt), dn(ydt));
      compare(nm, &y, NULL);
      stats_equal(nm, &sg, &sc);
      buf dy = rnd_buf(ydt, n, -2.0, 2.0), dx = rnd_buf(ydt, n, 0, 1);
      OK(ampc_gelu_backward(n, dy.h, ydt, x.h, adt, dx.h));
      OK(ampc_cuda_gelu_backward(n, dy.d, ydt, x.d, adt, dx.d));
      snprintf(nm, sizeof nm, "gelu backward x %s, grads %s", dn(adt), dn(ydt));
      compare(nm, &dx, NULL);
      /* the gradient add: FP32 partial sums into a gradient */
      OK(ampc_grad_add_f32(n, b.h, dx.h, ydt));
      OK(ampc_cuda_grad_add_f32(n, b.d, dx.d, ydt));
      snprintf(nm, sizeof nm, "grad add f32 -> %s", dn(ydt));
      compare(nm, &dx, NULL);
      drop(&x), drop(&b), drop(&y), drop(&dy), drop(&dx);
    }
  /* GELU and its derivative of every 16-bit value (the GPU reads them from
   * a table built once per context: every entry against the CPU's method),
   * into F32 so that nothing rounds them further; 16 times over, 2^20
   * elements, the size from which the GPU copies part of the table into
   * shared memory (both ways of reading it are covered: the window and
   * the rest) */
  for (int ix = 1; ix < 3; ix++) {
    const ampc_dtype adt = k_dts[ix];
    enum { N16 = 16 * 65536 };
    uint16_t *bits = malloc(N16 * sizeof *bits);
    float *ones = malloc(N16 * sizeof *ones);
    if (!bits || !ones)
      exit(1);
    for (int i = 0; i < N16; i++)
      bits[i] = (uint16_t)(i & 0xFFFF), ones[i] = 1.0f;
    buf x = raw_buf(bits, N16 * sizeof *bits);
    x.dt = adt, x.n = N16;
    buf dy = from_f32(AMPC_F32, ones, N16), y = rnd_buf(AMPC_F32, N16, 0, 1),
        dx = rnd_buf(AMPC_F32, N16, 0, 1);
    char nm[96];
    OK(ampc_gelu_forward(N16, x.h, adt, y.h, AMPC_F32, NULL));
    OK(ampc_cuda_gelu_forward(N16, x.d, adt, y.d, AMPC_F32, NULL));
    snprintf(nm, sizeof nm, "gelu of every %s value", dn(adt));
    compare(nm, &y, NULL);
    OK(ampc_gelu_backward(N16, dy.h, AMPC_F32, x.h, adt, dx.h));
    OK(ampc_cuda_gelu_backward(N16, dy.d, AMPC_F32, x.d, adt, dx.d));
    snprintf(nm, sizeof nm, "gelu' of every %s value", dn(adt));
    compare(nm, &dx, NULL);
    drop(&x), drop(&dy), drop(&y), drop(&dx);
    free(bits);
    free(ones);
  }
}

static void test_layernorm(void) {
  printf("layer norm:\n");
  /* the GPU's parameter-gradient final sums take a thread per column up to
   * 16 blocks of 32 rows and a warp per column beyond (700 rows) */
  const int64_t shapes[4][2] = {{37, 128}, {300, 512}, {5, 3000}, {700, 640}};
  for (int s = 0; s < 4; s++)
    for (int ix = 0; ix < 3; ix++) {
      const int64_t m = shapes[s][0], d = shapes[s][1];
      const ampc_dtype xdt = k_dts[ix], wdt = k_dts[(ix + 1) % 3], ydt = k_dts[(ix + 2) % 3];
      char nm[96];
      /* rows with an offset (the two-pass statistics matter) and a constant row */
      buf x = rnd_buf(xdt, m * d, -3.0, 5.0);
      float *xf = host_f32(&x);
      for (int64_t j = 0; j < d; j++)
        xf[j] = 2.5f;
      drop(&x);
      x = from_f32(xdt, xf, m * d);
      free(xf);
      buf gam = rnd_buf(wdt, d, 0.5, 1.5), bet = rnd_buf(wdt, d, -0.5, 0.5);
      buf y = rnd_buf(ydt, m * d, 0, 1), mean = rnd_buf(AMPC_F32, m, 0, 1),
          rstd = rnd_buf(AMPC_F32, m, 0, 1);
      ampc_round_stats sc = {0}, sg = {0};
      OK(ampc_layernorm_forward(m, d, x.h, xdt, gam.h, bet.h, wdt, 1e-5f, y.h, ydt, mean.h, rstd.h,
                                &sc));
      OK(ampc_cuda_layernorm_forward(m, d, x.d, xdt, gam.d, bet.d, wdt, 1e-5f, y.d, ydt, mean.d,
                                     rstd.d, &sg));
      double *tol = malloc((size_t)(m * d) * sizeof *tol);
      for (int64_t i = 0; i < m; i++)
        tol[i] = 0x1p-23 * fabs((double)((float *)mean.h)[i]) + 1e-30;
      snprintf(nm, sizeof nm, "ln mean %lldx%lld %s", (long long)m, (long long)d, dn(xdt));
      compare(nm, &mean, tol);
      for (int64_t i = 0; i < m; i++)
        tol[i] = 0x1p-23 * fabs((double)((float *)rstd.h)[i]);
      snprintf(nm, sizeof nm, "ln rstd %lldx%lld %s", (long long)m, (long long)d, dn(xdt));
      compare(nm, &rstd, tol);
      float *yc = host_f32(&y), *gf = host_f32(&gam), *xh = host_f32(&x), *bf = host_f32(&bet);
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < d; j++) {
          const double xhat =
              ((double)xh[i * d + j] - (double)((float *)mean.h)[i]) * (double)((float *)rstd.h)[i];
          /* mean and rstd 1 ulp apart move xhat by 2^-23 (|mean| rstd + |xhat|);
           * the FP32 ops round at |xhat gamma| and |beta|; then ydt's rounding */
          const double mu = fabs((double)((float *)mean.h)[i]), r = (double)((float *)rstd.h)[i];
          tol[i * d + j] = 0x1p-22 * (fabs((double)gf[j]) * (mu * r + fabs(xhat)) +
                                      fabs(xhat * (double)gf[j]) + fabs((double)bf[j])) +
                           ulp_rel(ydt) * fabs((double)yc[i * d + j]) + ulp_min(ydt);
        }
      snprintf(nm, sizeof nm, "ln y %s x, %s w -> %s", dn(xdt), dn(wdt), dn(ydt));
      compare(nm, &y, tol);
      CHECK(sg.count == sc.count, "%s: stats count %llu vs %llu", nm, (unsigned long long)sg.count,
            (unsigned long long)sc.count);
      /* backward from the CPU's mean and rstd on both sides */
      OK(ampc_cuda_to_device(g_ctx, mean.d, mean.h, mean.bytes));
      OK(ampc_cuda_to_device(g_ctx, rstd.d, rstd.h, rstd.bytes));
      const ampc_dtype gdt = ydt;
      buf dy = rnd_buf(gdt, m * d, -1.0, 1.0), dx = rnd_buf(gdt, m * d, 0, 1);
      buf dg = rnd_buf(gdt, d, -0.1, 0.1), db = rnd_buf(gdt, d, -0.1, 0.1);
      OK(ampc_layernorm_backward(m, d, dy.h, gdt, x.h, xdt, gam.h, wdt, mean.h, rstd.h, dx.h, dg.h,
                                 db.h, NULL));
      OK(ampc_cuda_layernorm_backward(m, d, dy.d, gdt, x.d, xdt, gam.d, wdt, mean.d, rstd.d, dx.d,
                                      dg.d, db.d, NULL));
      snprintf(nm, sizeof nm, "ln dgamma %s", dn(gdt));
      compare(nm, &dg, NULL);
      snprintf(nm, sizeof nm, "ln dbeta %s", dn(gdt));
      compare(nm, &db, NULL);
      float *dyf = host_f32(&dy), *dxc = host_f32(&dx);
      for (int64_t i = 0; i < m; i++) {
        const double mi = ((float *)mean.h)[i], ri = ((float *)rstd.h)[i];
        double sg1 = 0, sgx = 0;
        for (int64_t j = 0; j < d; j++) {
          const double xhat = ((double)xh[i * d + j] - mi) * ri;
          sg1 += (double)dyf[i * d + j] * (double)gf[j];
          sgx += (double)dyf[i * d + j] * (double)gf[j] * xhat;
        }
        for (int64_t j = 0; j < d; j++) {
          const double xhat = ((double)xh[i * d + j] - mi) * ri;
          tol[i * d + j] = 4 * 0x1p-24 * ri *
                               (fabs((double)dyf[i * d + j] * (double)gf[j]) +
                                fabs(sg1 / (double)d) + fabs(xhat * sgx / (double)d)) +
                           ulp_rel(gdt) * fabs((double)dxc[i * d + j]) + ulp_min(gdt);
        }
      }
      snprintf(nm, sizeof nm, "ln dx %s", dn(gdt));
      compare(nm, &dx, tol);
      free(yc), free(gf), free(xh), free(bf), free(dyf), free(dxc), free(tol);
      drop(&x), drop(&gam), drop(&bet), drop(&y), drop(&mean), drop(&rstd);
      drop(&dy), drop(&dx), drop(&dg), drop(&db);
    }
}

static void test_softmax(void) {
  printf("softmax:\n");
  const int64_t shapes[3][2] = {{64 * 4, 65}, {33, 24}, {7, 3001}};
  for (int s = 0; s < 3; s++)
    for (int ix = 0; ix < 3; ix++) {
      const int64_t m = shapes[s][0], n = shapes[s][1], rpm = s == 0 ? 4 : 1;
      const ampc_dtype xdt = k_dts[ix], ydt = k_dts[(ix + s) % 3];
      char nm[96];
      buf x = rnd_buf(xdt, m * n, -30.0, 30.0);
      uint8_t *mk = malloc((size_t)((m / rpm) * n));
      for (int64_t i = 0; i < (m / rpm) * n; i++)
        mk[i] = urand() < 0.8;
      for (int64_t j = 0; j < n; j++) /* a row with every key masked */
        mk[j] = 0;
      buf mask = raw_buf(mk, (size_t)((m / rpm) * n));
      buf y = rnd_buf(ydt, m * n, 0, 1);
      const float scale = 0.125f;
      ampc_round_stats sc = {0}, sg = {0};
      OK(ampc_softmax_forward(m, n, x.h, xdt, scale, mk, rpm, y.h, ydt, &sc));
      OK(ampc_cuda_softmax_forward(m, n, x.d, xdt, scale, mask.d, rpm, y.d, ydt, &sg));
      float *yc = host_f32(&y);
      double *tol = malloc((size_t)(m * n) * sizeof *tol);
      for (int64_t i = 0; i < m * n; i++)
        tol[i] = (double)(n + 2) * 0x1p-24 * fabs((double)yc[i]) +
                 ulp_rel(ydt) * fabs((double)yc[i]) + ulp_min(ydt);
      snprintf(nm, sizeof nm, "softmax %lldx%lld %s -> %s, mask", (long long)m, (long long)n,
               dn(xdt), dn(ydt));
      compare(nm, &y, tol);
      CHECK(sg.count == sc.count, "%s: stats count", nm);
      /* backward from the CPU's probabilities */
      OK(ampc_cuda_to_device(g_ctx, y.d, y.h, y.bytes));
      const ampc_dtype gdt = k_dts[(ix + 1) % 3];
      buf dy = rnd_buf(gdt, m * n, -1.0, 1.0), dx = rnd_buf(gdt, m * n, 0, 1);
      OK(ampc_softmax_backward(m, n, dy.h, gdt, y.h, ydt, scale, dx.h));
      OK(ampc_cuda_softmax_backward(m, n, dy.d, gdt, y.d, ydt, scale, dx.d));
      float *dyf = host_f32(&dy), *dxc = host_f32(&dx);
      for (int64_t i = 0; i < m; i++) {
        double sa = 0;
        for (int64_t j = 0; j < n; j++)
          sa += fabs((double)dyf[i * n + j] * (double)yc[i * n + j]);
        for (int64_t j = 0; j < n; j++)
          tol[i * n + j] =
              (double)(n + 2) * 0x1p-24 * fabs((double)scale * (double)yc[i * n + j]) * sa +
              ulp_rel(gdt) * fabs((double)dxc[i * n + j]) + ulp_min(gdt);
      }
      snprintf(nm, sizeof nm, "softmax backward %s grads", dn(gdt));
      compare(nm, &dx, tol);
      free(mk), free(yc), free(tol), free(dyf), free(dxc);
      drop(&x), drop(&mask), drop(&y), drop(&dy), drop(&dx);
    }
}

static void test_rows(void) {
  printf("embeddings, ViT tokens, pooling, L2 norm:\n");
  for (int iw = 0; iw < 3; iw++) {
    const ampc_dtype wdt = k_dts[iw], adt = k_dts[(iw + 1) % 3], gdt = k_dts[(iw + 2) % 3];
    char nm[96];
    /* token + position embeddings, ids repeated (a small vocab) */
    const int64_t b = 9, t = 24, d = 96, vocab = 50;
    int32_t *ids = malloc((size_t)(b * t) * sizeof *ids);
    for (int64_t i = 0; i < b * t; i++)
      ids[i] = (int32_t)(urand() * (double)vocab);
    ids[0] = ids[1] = ids[5] = 7; /* one id many times */
    buf idb = raw_buf(ids, (size_t)(b * t) * sizeof *ids);
    buf tok = rnd_buf(wdt, vocab * d, -1, 1), pos = rnd_buf(wdt, t * d, -1, 1);
    buf y = rnd_buf(adt, b * t * d, 0, 1);
    ampc_round_stats sc = {0}, sg = {0};
    OK(ampc_embedding_forward(b, t, d, ids, vocab, tok.h, pos.h, wdt, y.h, adt, &sc));
    OK(ampc_cuda_embedding_forward(b, t, d, idb.d, vocab, tok.d, pos.d, wdt, y.d, adt, &sg));
    snprintf(nm, sizeof nm, "embedding %s -> %s", dn(wdt), dn(adt));
    compare(nm, &y, NULL);
    stats_equal(nm, &sg, &sc);
    /* gradients large enough that repeated ids overflow binary16 */
    buf dy = rnd_buf(gdt, b * t * d, -30000, 30000);
    buf dtok = rnd_buf(gdt, vocab * d, -1, 1), dpos = rnd_buf(gdt, t * d, -1, 1);
    memset(&sc, 0, sizeof sc), memset(&sg, 0, sizeof sg);
    OK(ampc_embedding_backward(b, t, d, ids, vocab, dy.h, gdt, dtok.h, dpos.h, &sc, NULL));
    OK(ampc_cuda_embedding_backward(b, t, d, idb.d, vocab, dy.d, gdt, dtok.d, dpos.d, &sg, NULL));
    snprintf(nm, sizeof nm, "embedding backward dtok %s", dn(gdt));
    compare(nm, &dtok, NULL);
    stats_equal(nm, &sg, &sc);
    snprintf(nm, sizeof nm, "embedding backward dpos %s", dn(gdt));
    compare(nm, &dpos, NULL);
    free(ids);
    drop(&idb), drop(&tok), drop(&pos), drop(&y), drop(&dy), drop(&dtok), drop(&dpos);

    /* ViT tokens */
    const int64_t np = 64;
    buf pat = rnd_buf(adt, b * np * d, -2, 2), cls = rnd_buf(wdt, d, -1, 1),
        vpos = rnd_buf(wdt, (np + 1) * d, -1, 1), vy = rnd_buf(adt, b * (np + 1) * d, 0, 1);
    OK(ampc_vit_tokens_forward(b, np, d, pat.h, adt, cls.h, vpos.h, wdt, vy.h, adt));
    OK(ampc_cuda_vit_tokens_forward(b, np, d, pat.d, adt, cls.d, vpos.d, wdt, vy.d, adt));
    snprintf(nm, sizeof nm, "vit tokens %s + %s", dn(adt), dn(wdt));
    compare(nm, &vy, NULL);
    buf vdy = rnd_buf(gdt, b * (np + 1) * d, -1, 1), dpat = rnd_buf(gdt, b * np * d, 0, 1),
        dcls = rnd_buf(gdt, d, -1, 1), dvpos = rnd_buf(gdt, (np + 1) * d, -1, 1);
    OK(ampc_vit_tokens_backward(b, np, d, vdy.h, gdt, dpat.h, dcls.h, dvpos.h));
    OK(ampc_cuda_vit_tokens_backward(b, np, d, vdy.d, gdt, dpat.d, dcls.d, dvpos.d));
    snprintf(nm, sizeof nm, "vit tokens backward dpatches %s", dn(gdt));
    compare(nm, &dpat, NULL);
    compare("vit tokens backward dcls", &dcls, NULL);
    compare("vit tokens backward dpos", &dvpos, NULL);
    drop(&pat), drop(&cls), drop(&vpos), drop(&vy), drop(&vdy), drop(&dpat), drop(&dcls),
        drop(&dvpos);

    /* masked mean pooling (a row with nothing valid) */
    uint8_t *mk = malloc((size_t)(b * t));
    for (int64_t i = 0; i < b * t; i++)
      mk[i] = urand() < 0.6;
    for (int64_t j = 0; j < t; j++)
      mk[t + j] = 0;
    buf mask = raw_buf(mk, (size_t)(b * t));
    buf px = rnd_buf(adt, b * t * d, -3, 3), py = rnd_buf(wdt, b * d, 0, 1);
    memset(&sc, 0, sizeof sc), memset(&sg, 0, sizeof sg);
    OK(ampc_mean_pool_forward(b, t, d, px.h, adt, mk, py.h, wdt, &sc));
    OK(ampc_cuda_mean_pool_forward(b, t, d, px.d, adt, mask.d, py.d, wdt, &sg));
    snprintf(nm, sizeof nm, "mean pool %s -> %s", dn(adt), dn(wdt));
    compare(nm, &py, NULL);
    stats_equal(nm, &sg, &sc);
    buf pdy = rnd_buf(gdt, b * d, -1, 1), pdx = rnd_buf(gdt, b * t * d, 0, 1);
    OK(ampc_mean_pool_backward(b, t, d, pdy.h, gdt, mk, pdx.h));
    OK(ampc_cuda_mean_pool_backward(b, t, d, pdy.d, gdt, mask.d, pdx.d));
    compare("mean pool backward", &pdx, NULL);
    free(mk);
    drop(&mask), drop(&px), drop(&py), drop(&pdy), drop(&pdx);

    /* L2 normalisation (a zero row: the eps branch) */
    const int64_t m = 33, e = 64;
    buf lx = rnd_buf(adt, m * e, -2, 2);
    float *lxf = host_f32(&lx);
    for (int64_t j = 0; j < e; j++)
      lxf[j] = 0.0f;
    drop(&lx);
    lx = from_f32(adt, lxf, m * e);
    buf ly = rnd_buf(wdt, m * e, 0, 1);
    OK(ampc_l2norm_forward(m, e, lx.h, adt, 1e-12f, ly.h, wdt, NULL));
    OK(ampc_cuda_l2norm_forward(m, e, lx.d, adt, 1e-12f, ly.d, wdt, NULL));
    float *lyc = host_f32(&ly);
    double *tol = malloc((size_t)(m * e) * sizeof *tol);
    for (int64_t i = 0; i < m * e; i++)
      tol[i] = (2 * 0x1p-23 + ulp_rel(wdt)) * fabs((double)lyc[i]) + ulp_min(wdt);
    snprintf(nm, sizeof nm, "l2norm %s -> %s", dn(adt), dn(wdt));
    compare(nm, &ly, tol);
    buf ldy = rnd_buf(gdt, m * e, -1, 1), ldx = rnd_buf(gdt, m * e, 0, 1);
    OK(ampc_l2norm_backward(m, e, ldy.h, gdt, lx.h, adt, 1e-12f, ldx.h));
    OK(ampc_cuda_l2norm_backward(m, e, ldy.d, gdt, lx.d, adt, 1e-12f, ldx.d));
    float *ldyf = host_f32(&ldy), *ldxc = host_f32(&ldx);
    for (int64_t i = 0; i < m; i++) {
      double nrm = 0, c = 0;
      for (int64_t j = 0; j < e; j++)
        nrm += (double)lxf[i * e + j] * (double)lxf[i * e + j];
      nrm = sqrt(nrm);
      for (int64_t j = 0; j < e; j++)
        c += nrm > 0 ? fabs((double)lxf[i * e + j] / nrm * (double)ldyf[i * e + j]) : 0.0;
      for (int64_t j = 0; j < e; j++) {
        const double inv = nrm > 1e-12 ? 1.0 / nrm : 1e12;
        tol[i * e + j] =
            4 * 0x1p-23 * inv *
                (fabs((double)ldyf[i * e + j]) + fabs((double)lxf[i * e + j] * inv) * c) +
            ulp_rel(gdt) * fabs((double)ldxc[i * e + j]) + ulp_min(gdt);
      }
    }
    snprintf(nm, sizeof nm, "l2norm backward %s", dn(gdt));
    compare(nm, &ldx, tol);
    free(lxf), free(lyc), free(tol), free(ldyf), free(ldxc);
    drop(&lx), drop(&ly), drop(&ldy), drop(&ldx);
  }
}

/* ---- GEMM-type layers ----------------------------------------------------------- */

/* tol[i][j] = (K + 3) 2^-24 sum_p |a[i][p] b[p][j]| (+ |extra[i][j]|) plus the
 * rounding of out (dt) at ref: the CPU GEMM's bound, which both sides meet
 * (tests/test_gemm.c; the difference of two results within it is at most
 * twice it) */
static double *gemm_tol(int64_t m, int64_t n, int64_t k, const float *a, int64_t sai, int64_t sap,
                        const float *b, int64_t sbp, int64_t sbj, double alpha, const float *extra,
                        const float *ref, ampc_dtype dt) {
  double *tol = malloc((size_t)(m * n) * sizeof *tol);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++)
        s += fabs((double)a[i * sai + p * sap] * (double)b[p * sbp + j * sbj]);
      s = fabs(alpha) * s + (extra ? fabs((double)extra[i * n + j]) : 0.0);
      tol[i * n + j] = 2 * ((double)(k + 3) * 0x1p-24 * s) +
                       2 * (ulp_rel(dt) * fabs((double)ref[i * n + j]) + ulp_min(dt));
    }
  return tol;
}

/* bound for db [n] += column sums of dy [m, n] (FP32 sums rounded once into
 * db): the GPU sums on cuBLASLt (ones . dy) in its order, the CPU in row
 * order; each within (m + 3) 2^-24 (sum |dy| + |db0|) of the exact sum, plus
 * db's rounding; the two results differ by at most twice that */
static double *colsum_tol(int64_t m, int64_t n, const float *dyf, const float *db0, const buf *db) {
  float *f = host_f32(db);
  double *tol = malloc((size_t)n * sizeof *tol);
  for (int64_t j = 0; j < n; j++) {
    double sa = fabs((double)db0[j]);
    for (int64_t i = 0; i < m; i++)
      sa += fabs((double)dyf[i * n + j]);
    tol[j] = 2 * (double)(m + 3) * 0x1p-24 * sa +
             2 * (ulp_rel(db->dt) * fabs((double)f[j]) + ulp_min(db->dt));
  }
  free(f);
  return tol;
}

static void test_linear(void) {
  printf("linear (cuBLASLt):\n");
  const int64_t m = 130, k = 96, n = 72;
  for (int ix = 0; ix < 3; ix++)
    for (int iw = 0; iw < 3; iw++) {
      const ampc_dtype xdt = k_dts[ix], wdt = k_dts[iw], ydt = k_dts[(ix + iw) % 3];
      char nm[96];
      buf x = rnd_buf(xdt, m * k, -1, 1), w = rnd_buf(wdt, n * k, -0.5, 0.5),
          bias = rnd_buf(wdt, n, -1, 1), y = rnd_buf(ydt, m * n, 0, 1);
      ampc_round_stats sc = {0}, sg = {0};
      OK(ampc_linear_forward(m, k, n, x.h, xdt, w.h, wdt, bias.h, y.h, ydt, AMPC_ACC_F32, &sc));
      OK(ampc_cuda_linear_forward(m, k, n, x.d, xdt, w.d, wdt, bias.d, y.d, ydt, AMPC_ACC_F32,
                                  &sg));
      float *xf = host_f32(&x), *wf = host_f32(&w), *yf = host_f32(&y), *bf = host_f32(&bias);
      float *bb = malloc((size_t)(m * n) * sizeof *bb);
      for (int64_t i = 0; i < m * n; i++)
        bb[i] = bf[i % n];
      double *tol = gemm_tol(m, n, k, xf, k, 1, wf, 1, k, 1.0, bb, yf, ydt);
      snprintf(nm, sizeof nm, "linear %s x %s -> %s, bias", dn(xdt), dn(wdt), dn(ydt));
      compare(nm, &y, tol);
      CHECK(sg.count == sc.count, "%s: stats count", nm);
      /* without stats (the model's call): a 16-bit y with a bias goes
       * through the device's FP32 scratch, not through y; the CPU's bits
       * are those of the call with stats */
      OK(ampc_linear_forward(m, k, n, x.h, xdt, w.h, wdt, bias.h, y.h, ydt, AMPC_ACC_F32, NULL));
      OK(ampc_cuda_linear_forward(m, k, n, x.d, xdt, w.d, wdt, bias.d, y.d, ydt, AMPC_ACC_F32,
                                  NULL));
      snprintf(nm, sizeof nm, "linear %s x %s -> %s, bias, no stats", dn(xdt), dn(wdt), dn(ydt));
      compare(nm, &y, tol);
      free(tol);
      /* backward: dx = dy W, dW += dy^T x, db += column sums */
      const ampc_dtype gdt = ydt;
      buf dy = rnd_buf(gdt, m * n, -1, 1), dx = rnd_buf(gdt, m * k, 0, 1),
          dw = rnd_buf(gdt, n * k, -0.1, 0.1), db = rnd_buf(gdt, n, -0.1, 0.1);
      float *dw0 = host_f32(&dw), *db0 = host_f32(&db);
      OK(ampc_linear_backward(m, k, n, dy.h, gdt, x.h, xdt, w.h, wdt, dx.h, dw.h, db.h,
                              AMPC_ACC_F32, NULL));
      OK(ampc_cuda_linear_backward(m, k, n, dy.d, gdt, x.d, xdt, w.d, wdt, dx.d, dw.d, db.d,
                                   AMPC_ACC_F32, NULL));
      float *dyf = host_f32(&dy), *dxf = host_f32(&dx), *dwf = host_f32(&dw);
      tol = gemm_tol(m, k, n, dyf, n, 1, wf, k, 1, 1.0, NULL, dxf, gdt);
      snprintf(nm, sizeof nm, "linear dx %s", dn(gdt));
      compare(nm, &dx, tol);
      free(tol);
      tol = gemm_tol(n, k, m, dyf, 1, n, xf, k, 1, 1.0, dw0, dwf, gdt);
      snprintf(nm, sizeof nm, "linear dW += %s", dn(gdt));
      compare(nm, &dw, tol);
      free(tol);
      tol = colsum_tol(m, n, dyf, db0, &db);
      snprintf(nm, sizeof nm, "linear db += %s", dn(gdt));
      compare(nm, &db, tol);
      free(tol), free(db0);
      free(xf), free(wf), free(yf), free(bf), free(bb), free(dw0), free(dyf), free(dxf), free(dwf);
      drop(&x), drop(&w), drop(&bias), drop(&y), drop(&dy), drop(&dx), drop(&dw), drop(&db);
    }
  /* the FP16-accumulation ablation: COMPUTE_16F needs F16 throughout */
  buf x = rnd_buf(AMPC_F16, m * k, -1, 1), w = rnd_buf(AMPC_F16, n * k, -1, 1),
      y = rnd_buf(AMPC_F16, m * n, 0, 1);
  OK(ampc_linear_forward(m, k, n, x.h, AMPC_F16, w.h, AMPC_F16, NULL, y.h, AMPC_F16, AMPC_ACC_F16,
                         NULL));
  OK(ampc_cuda_linear_forward(m, k, n, x.d, AMPC_F16, w.d, AMPC_F16, NULL, y.d, AMPC_F16,
                              AMPC_ACC_F16, NULL));
  float *xf = host_f32(&x), *wf = host_f32(&w), *yf = host_f32(&y);
  float *zero = calloc((size_t)(m * n), sizeof *zero);
  double *tol = gemm_tol(m, n, k, xf, k, 1, wf, 1, k, 1.0, NULL, zero, AMPC_F16);
  free(zero);
  for (int64_t i = 0; i < m * n; i++) /* binary16 sums in any order: (K + 3) 2^-11 S */
    tol[i] = (tol[i] - 2 * ulp_min(AMPC_F16)) * 0x1p13 +
             2 * (ulp_rel(AMPC_F16) * fabs((double)yf[i]) + ulp_min(AMPC_F16));
  compare("linear f16, FP16 accumulation (bound K 2^-11)", &y, tol);
  /* into an F32 C (the F16 sums widened, the FP32 epilogue): the same bound */
  buf y32 = rnd_buf(AMPC_F32, m * n, 0, 1);
  OK(ampc_linear_forward(m, k, n, x.h, AMPC_F16, w.h, AMPC_F16, NULL, y32.h, AMPC_F32, AMPC_ACC_F16,
                         NULL));
  OK(ampc_cuda_linear_forward(m, k, n, x.d, AMPC_F16, w.d, AMPC_F16, NULL, y32.d, AMPC_F32,
                              AMPC_ACC_F16, NULL));
  compare("linear f16 -> f32, FP16 accumulation", &y32, tol);
  free(xf), free(wf), free(yf), free(tol);
  drop(&x), drop(&w), drop(&y), drop(&y32);
}

/* device buffers a and b hold the same bytes */
static void same_device(const char *what, const buf *a, const buf *b) {
  void *x = malloc(a->bytes ? a->bytes : 1), *y = malloc(b->bytes ? b->bytes : 1);
  OK(ampc_cuda_to_host(g_ctx, x, a->d, a->bytes));
  OK(ampc_cuda_to_host(g_ctx, y, b->d, b->bytes));
  g_checked += a->n;
  CHECK(a->bytes == b->bytes && memcmp(x, y, a->bytes) == 0, "%s: the bytes differ", what);
  printf("  %-44s %8lld values, bit-equal\n", what, (long long)a->n);
  free(x), free(y);
}

/* The op table's fused layers on the device against the device's two ops
 * one after the other (the CUDA backend runs each fused layer as those two
 * ops: bit-equal), for each preset dtype; the CPU side is tests/test_fused.c
 * (the CPU's fused layers give its unfused bits). */
static void test_fused_layers(void) {
  printf("fused layers (op table) against their two ops:\n");
#ifdef AMPC_TEST_ON_CPU
  const ampc_backend *be = &ampc_backend_cpu_split_table;
#else
  const ampc_backend *be = ampc_device_backend(AMPC_DEVICE_CUDA);
  CHECK(be != NULL, "the CUDA backend is not registered");
  if (!be)
    return;
#endif
  const int64_t m = 130, k = 96, n = 72;
  for (int i = 0; i < 3; i++) {
    const ampc_dtype dt = k_dts[i];
    char nm[96];
    buf x = rnd_buf(dt, m * k, -1, 1), w = rnd_buf(dt, n * k, -0.5, 0.5), b = rnd_buf(dt, n, -1, 1);
    buf r = rnd_buf(dt, m * n, -2, 2), h = rnd_buf(dt, m * n, 0, 1), y = rnd_buf(dt, m * n, 0, 1);
    buf h2 = rnd_buf(dt, m * n, 0, 1), y2 = rnd_buf(dt, m * n, 0, 1);
    OK(be->linear_gelu_forward(m, k, n, x.d, dt, w.d, dt, b.d, h.d, dt, y.d, dt, AMPC_ACC_F32, NULL,
                               NULL));
    OK(ampc_cuda_linear_forward(m, k, n, x.d, dt, w.d, dt, b.d, h2.d, dt, AMPC_ACC_F32, NULL));
    OK(ampc_cuda_gelu_forward(m * n, h2.d, dt, y2.d, dt, NULL));
    snprintf(nm, sizeof nm, "linear + GELU %s: h", dn(dt));
    same_device(nm, &h, &h2);
    snprintf(nm, sizeof nm, "linear + GELU %s: y", dn(dt));
    same_device(nm, &y, &y2);
    OK(be->linear_residual_forward(m, k, n, x.d, dt, w.d, dt, b.d, h.d, dt, r.d, dt, y.d, dt,
                                   AMPC_ACC_F32, NULL, NULL));
    OK(ampc_cuda_linear_forward(m, k, n, x.d, dt, w.d, dt, b.d, h2.d, dt, AMPC_ACC_F32, NULL));
    OK(ampc_cuda_add_forward(m * n, r.d, dt, h2.d, dt, y2.d, dt, NULL));
    snprintf(nm, sizeof nm, "linear + residual %s: y", dn(dt));
    same_device(nm, &y, &y2);
    /* rows of n: residual add + layer norm, and the backward pass + add */
    buf g = rnd_buf(dt, n, 0.5, 1.5), mu = rnd_buf(AMPC_F32, m, 0, 1),
        rs = rnd_buf(AMPC_F32, m, 0, 1);
    buf mu2 = rnd_buf(AMPC_F32, m, 0, 1), rs2 = rnd_buf(AMPC_F32, m, 0, 1);
    OK(be->add_layernorm_forward(m, n, r.d, dt, x.d, dt, h.d, dt, g.d, b.d, dt, 1e-5f, y.d, dt,
                                 mu.d, rs.d, NULL));
    OK(ampc_cuda_add_forward(m * n, r.d, dt, x.d, dt, h2.d, dt, NULL));
    OK(ampc_cuda_layernorm_forward(m, n, h2.d, dt, g.d, b.d, dt, 1e-5f, y2.d, dt, mu2.d, rs2.d,
                                   NULL));
    snprintf(nm, sizeof nm, "residual + layer norm %s: s", dn(dt));
    same_device(nm, &h, &h2);
    snprintf(nm, sizeof nm, "residual + layer norm %s: y", dn(dt));
    same_device(nm, &y, &y2);
    same_device("residual + layer norm: rstd", &rs, &rs2);
    buf dg = rnd_buf(dt, n, 0, 0), db = rnd_buf(dt, n, 0, 0), dg2 = rnd_buf(dt, n, 0, 0);
    buf db2 = rnd_buf(dt, n, 0, 0), res = rnd_buf(dt, m * n, -1, 1),
        res2 = rnd_buf(dt, m * n, -1, 1);
    OK(ampc_cuda_to_device(g_ctx, res2.d, res.h, res.bytes)); /* the same start */
    OK(be->layernorm_backward_add(m, n, r.d, dt, h.d, dt, g.d, dt, mu.d, rs.d, y.d, dg.d, db.d,
                                  res.d, NULL));
    OK(ampc_cuda_layernorm_backward(m, n, r.d, dt, h.d, dt, g.d, dt, mu.d, rs.d, y2.d, dg2.d, db2.d,
                                    NULL));
    OK(ampc_cuda_add_forward(m * n, res2.d, dt, y2.d, dt, res2.d, dt, NULL));
    snprintf(nm, sizeof nm, "layer norm backward + residual %s: dres", dn(dt));
    same_device(nm, &res, &res2);
    snprintf(nm, sizeof nm, "layer norm backward + residual %s: dgamma", dn(dt));
    same_device(nm, &dg, &dg2);
    /* the MLP's second layer's backward pass with the GELU's (k = n here) */
    buf dy = rnd_buf(dt, m * n, -1, 1), w2 = rnd_buf(dt, n * n, -0.5, 0.5);
    buf dx = rnd_buf(dt, m * n, 0, 0), dh = rnd_buf(dt, m * n, 0, 0),
        dx2 = rnd_buf(dt, m * n, 0, 0);
    buf dh2 = rnd_buf(dt, m * n, 0, 0), dw = rnd_buf(dt, n * n, 0, 0),
        dw2 = rnd_buf(dt, n * n, 0, 0);
    buf dbb = rnd_buf(dt, n, 0, 0), dbb2 = rnd_buf(dt, n, 0, 0);
    OK(be->linear_backward_gelu(m, n, n, dy.d, dt, r.d, dt, w2.d, dt, h.d, dt, dx.d, dh.d, dw.d,
                                dbb.d, AMPC_ACC_F32, NULL, NULL));
    OK(ampc_cuda_linear_backward(m, n, n, dy.d, dt, r.d, dt, w2.d, dt, dx2.d, dw2.d, dbb2.d,
                                 AMPC_ACC_F32, NULL));
    OK(ampc_cuda_gelu_backward(m * n, dx2.d, dt, h.d, dt, dh2.d));
    snprintf(nm, sizeof nm, "linear backward + GELU %s: dh", dn(dt));
    same_device(nm, &dh, &dh2);
    snprintf(nm, sizeof nm, "linear backward + GELU %s: dW", dn(dt));
    same_device(nm, &dw, &dw2);
    snprintf(nm, sizeof nm, "linear backward + GELU %s: db", dn(dt));
    same_device(nm, &dbb, &dbb2);
    buf *all[] = {&x,  &w,   &b,   &r,   &h,   &y,   &h2,  &y2,  &g,    &mu,
                  &rs, &mu2, &rs2, &dg,  &db,  &dg2, &db2, &res, &res2, &dy,
                  &w2, &dx,  &dh,  &dx2, &dh2, &dw,  &dw2, &dbb, &dbb2};
    for (size_t q = 0; q < sizeof all / sizeof all[0]; q++)
      drop(all[q]);
  }
}

static void test_attention(void) {
  printf("attention core:\n");
  const int64_t b = 5, tq = 17, tk = 23, h = 4, dh = 16, dm = h * dh, ld = 3 * dm;
  /* probabilities in the activations' dtype, and in FP32 (the model's
   * mixed presets: softmax is an FP32 op), which takes the staged GEMMs */
  /* cases 5, 6: FP32 probabilities rounded to the activations' dtype for
   * the products, and dS too (mdt, ampc_attention_forward_ex) */
  for (int ic = 0; ic < 7; ic++) {
    const int ix = ic < 3 ? ic : ic < 5 ? ic - 2 : ic - 4;
    const ampc_dtype xdt = k_dts[ix], pdt = ic < 3 ? xdt : AMPC_F32, gdt = xdt;
    const bool cast = ic >= 5;
    const ampc_dtype mdt = cast ? xdt : AMPC_F32, ppdt = cast ? mdt : pdt;
    char nm[96];
    /* q, k, v as views into packed qkv rows (ld = 3 dm), as the model's */
    buf qkv = rnd_buf(xdt, b * tk * ld, -1.5, 1.5);
    const size_t xs = ampc_dtype_size(xdt);
    uint8_t *mk = malloc((size_t)(b * tk));
    for (int64_t i = 0; i < b * tk; i++)
      mk[i] = urand() < 0.75;
    for (int64_t j = 0; j < tk; j++)
      mk[j] = j < 3; /* sample 0: three keys */
    buf mask = raw_buf(mk, (size_t)(b * tk));
    buf sc = rnd_buf(pdt, b * h * tq * tk, 0, 1), pr = rnd_buf(pdt, b * h * tq * tk, 0, 1),
        out = rnd_buf(xdt, b * tq * dm, 0, 1);
    const char *qh = qkv.h, *qd = qkv.d;
    ampc_round_stats stc = {0}, stg = {0}; /* with stats: the FP32 copy path */
    OK(ampc_attention_forward_ex(b, tq, tk, h, dh, qh, ld, qh + dm * xs, ld, qh + 2 * dm * xs, ld,
                                 xdt, mk, sc.h, pdt, pr.h, pdt, mdt, out.h, dm, xdt, AMPC_ACC_F32,
                                 ic == 4 || ic == 6 ? &stc : NULL));
    OK(ampc_cuda_attention_forward_ex(b, tq, tk, h, dh, qd, ld, qd + dm * xs, ld, qd + 2 * dm * xs,
                                      ld, xdt, mask.d, sc.d, pdt, pr.d, pdt, mdt, out.d, dm, xdt,
                                      AMPC_ACC_F32, ic == 4 || ic == 6 ? &stg : NULL));
    CHECK(stc.count == stg.count, "attention stats count gpu %llu cpu %llu",
          (unsigned long long)stg.count, (unsigned long long)stc.count);
    float *qf = host_f32(&qkv), *scf = host_f32(&sc), *prf = host_f32(&pr), *of = host_f32(&out);
    const double scale = 1.0 / sqrt((double)dh);
    /* scores: the GEMM bound per element */
    double *tol = malloc((size_t)(b * h * tq * tk) * sizeof *tol);
    double *srow = malloc((size_t)(b * h * tq) * sizeof *srow); /* max score bound per row */
    for (int64_t bi = 0; bi < b; bi++)
      for (int64_t hi = 0; hi < h; hi++)
        for (int64_t i = 0; i < tq; i++) {
          double mx = 0;
          for (int64_t j = 0; j < tk; j++) {
            double s = 0;
            for (int64_t p = 0; p < dh; p++)
              s += fabs((double)qf[(bi * tq + i) * ld + hi * dh + p] *
                        (double)qf[(bi * tk + j) * ld + dm + hi * dh + p]);
            const int64_t e = ((bi * h + hi) * tq + i) * tk + j;
            tol[e] = 2 * (double)(dh + 3) * 0x1p-24 * scale * s +
                     2 * (ulp_rel(pdt) * fabs((double)scf[e]) + ulp_min(pdt));
            mx = tol[e] > mx ? tol[e] : mx;
          }
          srow[(bi * h + hi) * tq + i] = mx;
        }
    snprintf(nm, sizeof nm, "attention scores %s", dn(xdt));
    compare(nm, &sc, tol);
    /* probabilities: scores off by at most d move p by p (2 d) (to first
     * order), plus softmax's own sums and the rounding to pdt */
    for (int64_t r = 0; r < b * h * tq; r++)
      for (int64_t j = 0; j < tk; j++) {
        const double p = fabs((double)prf[r * tk + j]);
        tol[r * tk + j] = p * (2.5 * srow[r] + (double)(tk + 2) * 0x1p-24) +
                          2 * (ulp_rel(pdt) * p + ulp_min(pdt));
      }
    snprintf(nm, sizeof nm, "attention probs %s (x %s), key mask", dn(pdt), dn(xdt));
    compare(nm, &pr, tol);
    free(tol);
    /* out = P v: the GEMM bound plus what the probabilities' difference moves */
    double *otol = malloc((size_t)(b * tq * dm) * sizeof *otol);
    for (int64_t bi = 0; bi < b; bi++)
      for (int64_t i = 0; i < tq; i++)
        for (int64_t c = 0; c < dm; c++) {
          const int64_t hi = c / dh, r = (bi * h + hi) * tq + i;
          double s = 0, dp = 0;
          for (int64_t j = 0; j < tk; j++) {
            const double vv = fabs((double)qf[(bi * tk + j) * ld + 2 * dm + c]);
            const double p = fabs((double)prf[r * tk + j]);
            s += p * vv;
            dp += (p * (2.5 * srow[r] + (double)(tk + 2) * 0x1p-24) +
                   2 * (ulp_rel(ppdt) * p + ulp_min(ppdt))) *
                  vv;
          }
          const int64_t e = (bi * tq + i) * dm + c;
          otol[e] = 2 * (double)(tk + 3) * 0x1p-24 * s + dp +
                    2 * (ulp_rel(xdt) * fabs((double)of[e]) + ulp_min(xdt));
        }
    snprintf(nm, sizeof nm, "attention out %s%s", dn(xdt), cast ? ", P rounded to it" : "");
    compare(nm, &out, otol);
    free(otol), free(srow);
    /* backward from the CPU's probabilities on both sides */
    OK(ampc_cuda_to_device(g_ctx, pr.d, pr.h, pr.bytes));
    buf dout = rnd_buf(gdt, b * tq * dm, -1, 1), dq = rnd_buf(gdt, b * tq * dm, 0, 1),
        dk = rnd_buf(gdt, b * tk * dm, 0, 1), dv = rnd_buf(gdt, b * tk * dm, 0, 1);
    OK(ampc_attention_backward_ex(b, tq, tk, h, dh, qh, ld, qh + dm * xs, ld, qh + 2 * dm * xs, ld,
                                  xdt, pr.h, pdt, mdt, dout.h, dm, gdt, dq.h, dm, dk.h, dm, dv.h,
                                  dm, AMPC_ACC_F32, NULL));
    OK(ampc_cuda_attention_backward_ex(b, tq, tk, h, dh, qd, ld, qd + dm * xs, ld, qd + 2 * dm * xs,
                                       ld, xdt, pr.d, pdt, mdt, dout.d, dm, gdt, dq.d, dm, dk.d, dm,
                                       dv.d, dm, AMPC_ACC_F32, NULL));
    /* dv = P^T dout is one GEMM from identical inputs: its bound */
    float *dof = host_f32(&dout), *dvf = host_f32(&dv);
    double *vtol = malloc((size_t)(b * tk * dm) * sizeof *vtol);
    for (int64_t bi = 0; bi < b; bi++)
      for (int64_t j = 0; j < tk; j++)
        for (int64_t c = 0; c < dm; c++) {
          const int64_t hi = c / dh;
          double s = 0;
          for (int64_t i = 0; i < tq; i++)
            s += fabs((double)prf[((bi * h + hi) * tq + i) * tk + j] *
                      (double)dof[(bi * tq + i) * dm + c]);
          const int64_t e = (bi * tk + j) * dm + c;
          vtol[e] = 2 * (double)(tq + 3) * 0x1p-24 * s +
                    2 * (ulp_rel(gdt) * fabs((double)dvf[e]) + ulp_min(gdt));
        }
    snprintf(nm, sizeof nm, "attention dv %s", dn(gdt));
    compare(nm, &dv, vtol);
    free(vtol);
    /* dq, dk go through dP (a GEMM), the softmax backward (FP32 sums) and a
     * second GEMM: bounded here by 4 (tk + dh + 6) 2^-24 times the sum of
     * |dS| |k| terms formed from bounds on |dP| (a first-order bound) */
    float *dqf = host_f32(&dq), *dkf = host_f32(&dk);
    double *qtol = malloc((size_t)(b * tq * dm) * sizeof *qtol),
           *ktol = malloc((size_t)(b * tk * dm) * sizeof *ktol);
    for (int64_t i = 0; i < b * tq * dm; i++)
      qtol[i] = 0;
    for (int64_t i = 0; i < b * tk * dm; i++)
      ktol[i] = 0;
    for (int64_t bi = 0; bi < b; bi++)
      for (int64_t hi = 0; hi < h; hi++)
        for (int64_t i = 0; i < tq; i++) {
          /* |dP_ij| <= sum_c |dout_ic v_jc| =: A_ij; |dS_ij| error <= p_ij (A_ij +
           * sum_l p_il A_il) (tk + dh + 6) 2^-24 */
          double aij[64], sp = 0;
          for (int64_t j = 0; j < tk; j++) {
            double s = 0;
            for (int64_t c = 0; c < dh; c++)
              s += fabs((double)dof[(bi * tq + i) * dm + hi * dh + c] *
                        (double)qf[(bi * tk + j) * ld + 2 * dm + hi * dh + c]);
            aij[j] = s;
            sp += fabs((double)prf[((bi * h + hi) * tq + i) * tk + j]) * s;
          }
          for (int64_t j = 0; j < tk; j++) {
            const double p = fabs((double)prf[((bi * h + hi) * tq + i) * tk + j]);
            const double dsm = p * (aij[j] + sp);
            /* with mdt: each side rounds its dS to mdt as well */
            const double dse =
                (p * (aij[j] + sp) + p * (aij[j] + sp)) * (double)(tk + dh + 6) * 0x1p-24 +
                (cast ? ulp_rel(mdt) * dsm + ulp_min(mdt) : 0.0);
            for (int64_t c = 0; c < dh; c++) {
              const double kk = fabs((double)qf[(bi * tk + j) * ld + dm + hi * dh + c]);
              const double qq = fabs((double)qf[(bi * tq + i) * ld + hi * dh + c]);
              qtol[(bi * tq + i) * dm + hi * dh + c] +=
                  scale * (2 * dse + 2 * (double)(tk + 3) * 0x1p-24 * dsm) * kk;
              ktol[(bi * tk + j) * dm + hi * dh + c] +=
                  scale * (2 * dse + 2 * (double)(tq + 3) * 0x1p-24 * dsm) * qq;
            }
          }
        }
    for (int64_t i = 0; i < b * tq * dm; i++)
      qtol[i] += 2 * (ulp_rel(gdt) * fabs((double)dqf[i]) + ulp_min(gdt));
    for (int64_t i = 0; i < b * tk * dm; i++)
      ktol[i] += 2 * (ulp_rel(gdt) * fabs((double)dkf[i]) + ulp_min(gdt));
    snprintf(nm, sizeof nm, "attention dq %s%s", dn(gdt), cast ? ", dS rounded to it" : "");
    compare(nm, &dq, qtol);
    snprintf(nm, sizeof nm, "attention dk %s%s", dn(gdt), cast ? ", dS rounded to it" : "");
    compare(nm, &dk, ktol);
    free(qtol), free(ktol), free(dqf), free(dkf), free(dof), free(dvf);
    if (cast) {
      /* the roundings the cast adds are counted on both sides alike (a
       * bound tally: the P store forward, the dS store backward), and the
       * GPU's output moved with the cast (it rounded P at all) */
      ampc_tally *tl[2] = {ampc_tally_create(), ampc_tally_create()};
      CHECK(tl[0] && tl[1], "out of memory");
      ampc_tm_stats ts[2];
      for (int side = 0; side < 2 && tl[0] && tl[1]; side++) {
        ampc_tally *was = ampc_tally_bind(tl[side]);
        const char *x = side ? qd : qh;
        void *scp = side ? sc.d : sc.h, *prp = side ? pr.d : pr.h, *op = side ? out.d : out.h;
        const void *dop = side ? dout.d : dout.h;
        void *dqp = side ? dq.d : dq.h, *dkp = side ? dk.d : dk.h, *dvp = side ? dv.d : dv.h;
        const uint8_t *mp = side ? (const uint8_t *)mask.d : mk;
        if (side) {
          OK(ampc_cuda_attention_forward_ex(b, tq, tk, h, dh, x, ld, x + dm * xs, ld,
                                            x + 2 * dm * xs, ld, xdt, mp, scp, pdt, prp, pdt, mdt,
                                            op, dm, xdt, AMPC_ACC_F32, NULL));
          OK(ampc_cuda_attention_backward_ex(b, tq, tk, h, dh, x, ld, x + dm * xs, ld,
                                             x + 2 * dm * xs, ld, xdt, prp, pdt, mdt, dop, dm, gdt,
                                             dqp, dm, dkp, dm, dvp, dm, AMPC_ACC_F32, NULL));
        } else {
          OK(ampc_attention_forward_ex(b, tq, tk, h, dh, x, ld, x + dm * xs, ld, x + 2 * dm * xs,
                                       ld, xdt, mp, scp, pdt, prp, pdt, mdt, op, dm, xdt,
                                       AMPC_ACC_F32, NULL));
          OK(ampc_attention_backward_ex(b, tq, tk, h, dh, x, ld, x + dm * xs, ld, x + 2 * dm * xs,
                                        ld, xdt, prp, pdt, mdt, dop, dm, gdt, dqp, dm, dkp, dm, dvp,
                                        dm, AMPC_ACC_F32, NULL));
        }
        (void)ampc_tally_bind(was);
        ampc_tally_drain(tl[side], &ts[side]);
      }
      if (tl[0] && tl[1]) {
        CHECK(ts[0].r.count == ts[1].r.count && ts[0].r.count > 0,
              "attention cast %s: the GPU counted %llu roundings, the CPU %llu", dn(xdt),
              (unsigned long long)ts[1].r.count, (unsigned long long)ts[0].r.count);
        printf("  %-44s %8llu values counted on each side\n", "attention cast: tally",
               (unsigned long long)ts[0].r.count);
      }
      ampc_tally_free(tl[0]), ampc_tally_free(tl[1]);
      /* without the cast the GPU's output differs somewhere */
      void *o1 = malloc(out.bytes), *o2 = malloc(out.bytes);
      CHECK(o1 && o2, "out of memory");
      OK(ampc_cuda_to_host(g_ctx, o1, out.d, out.bytes));
      OK(ampc_cuda_attention_forward(b, tq, tk, h, dh, qd, ld, qd + dm * xs, ld, qd + 2 * dm * xs,
                                     ld, xdt, mask.d, sc.d, pdt, pr.d, pdt, out.d, dm, xdt,
                                     AMPC_ACC_F32, NULL));
      OK(ampc_cuda_to_host(g_ctx, o2, out.d, out.bytes));
      CHECK(memcmp(o1, o2, out.bytes) != 0, "attention cast %s: the GPU did not round P", dn(xdt));
      free(o1), free(o2);
    }
    free(qf), free(scf), free(prf), free(of), free(mk);
    drop(&qkv), drop(&mask), drop(&sc), drop(&pr), drop(&out), drop(&dout), drop(&dq), drop(&dk),
        drop(&dv);
  }
}

/* normwise bound for a result that went through several FP32 GEMMs and a
 * softmax (Higham 2nd ed. 3.5): 8 K 2^-24 max |ref| (K: the inner
 * dimensions along the chain), plus two roundings of the output dtype */
static double max_abs(const buf *r) {
  float *f = host_f32(r);
  double mx = 0;
  for (int64_t i = 0; i < r->n; i++)
    mx = fabs((double)f[i]) > mx ? fabs((double)f[i]) : mx;
  free(f);
  return mx;
}
static double *normwise_tol(const buf *r, int64_t kchain) {
  float *f = host_f32(r);
  const double mx = max_abs(r);
  double *tol = malloc((size_t)r->n * sizeof *tol);
  for (int64_t i = 0; i < r->n; i++)
    tol[i] = 8.0 * (double)kchain * 0x1p-24 * mx +
             2 * (ulp_rel(r->dt) * fabs((double)f[i]) + ulp_min(r->dt));
  free(f);
  return tol;
}
/* the same with 16-bit intermediates (dtype mid) on the chain: the GPU's
 * FP32 sums, in another order than the CPU's, can land on the other side of
 * a rounding boundary of an intermediate (q, k, v, scores, probabilities,
 * the heads' output), which then differs by one ulp of mid; the
 * layer passes that on at about the result's scale. Two such ulps of mid at
 * scale `scale` (the largest |value| among the results of the same sums)
 * are added to every bound. */
static double *normwise_tol_mid(const buf *r, int64_t kchain, ampc_dtype mid, double scale) {
  double *tol = normwise_tol(r, kchain);
  const double extra = mid == AMPC_F32 ? 0.0 : 2.0 * ulp_rel(mid) * scale;
  for (int64_t i = 0; i < r->n; i++)
    tol[i] += extra;
  return tol;
}

static void test_mha(void) {
  printf("multi-head attention layer (self and cross):\n");
  const int64_t b = 3, tq = 11, h = 4, dm = 64;
  for (int ia = 0; ia < 3; ia++)
    for (int cross = 0; cross < 2; cross++) {
      const ampc_dtype adt = k_dts[ia], wdt = adt, pdt = adt, gdt = adt;
      const int64_t tk = cross ? 19 : tq;
      char nm[96];
      buf xq = rnd_buf(adt, b * tq * dm, -1, 1),
          xkv = cross ? rnd_buf(adt, b * tk * dm, -1, 1) : xq;
      buf W[4], B[4];
      for (int i = 0; i < 4; i++)
        W[i] = rnd_buf(wdt, dm * dm, -0.2, 0.2), B[i] = rnd_buf(wdt, dm, -0.1, 0.1);
      uint8_t *mk = malloc((size_t)(b * tk));
      for (int64_t i = 0; i < b * tk; i++)
        mk[i] = urand() < 0.8 || i % tk == 0;
      buf mask = raw_buf(mk, (size_t)(b * tk));
      buf cq = rnd_buf(adt, b * tq * dm, 0, 1), ck = rnd_buf(adt, b * tk * dm, 0, 1),
          cv = rnd_buf(adt, b * tk * dm, 0, 1), co = rnd_buf(adt, b * tq * dm, 0, 1),
          cs = rnd_buf(pdt, b * h * tq * tk, 0, 1), cp = rnd_buf(pdt, b * h * tq * tk, 0, 1);
      const ampc_mha_cache hc = {cq.h, ck.h, cv.h, co.h, cs.h, cp.h, false, NULL, AMPC_F32};
      const ampc_mha_cache dc = {cq.d, ck.d, cv.d, co.d, cs.d, cp.d, false, NULL, AMPC_F32};
      buf y = rnd_buf(adt, b * tq * dm, 0, 1);
      OK(ampc_mha_forward(b, tq, tk, dm, h, xq.h, xkv.h, adt, W[0].h, B[0].h, W[1].h, B[1].h,
                          W[2].h, B[2].h, W[3].h, B[3].h, wdt, cross ? mk : NULL, &hc, pdt, y.h,
                          AMPC_ACC_F32, NULL, NULL));
      OK(ampc_cuda_mha_forward(b, tq, tk, dm, h, xq.d, xkv.d, adt, W[0].d, B[0].d, W[1].d, B[1].d,
                               W[2].d, B[2].d, W[3].d, B[3].d, wdt, cross ? mask.d : NULL, &dc, pdt,
                               y.d, AMPC_ACC_F32, NULL, NULL));
      double *tol = normwise_tol_mid(&y, 2 * dm + tk, adt, max_abs(&y));
      snprintf(nm, sizeof nm, "mha %s forward %s", cross ? "cross" : "self", dn(adt));
      compare(nm, &y, tol);
      free(tol);
      /* backward from the CPU's cache on both sides */
      const buf *cb[6] = {&cq, &ck, &cv, &co, &cs, &cp};
      for (int i = 0; i < 6; i++)
        OK(ampc_cuda_to_device(g_ctx, cb[i]->d, cb[i]->h, cb[i]->bytes));
      buf dy = rnd_buf(gdt, b * tq * dm, -1, 1), dxq = rnd_buf(gdt, b * tq * dm, 0, 1),
          dxkv = rnd_buf(gdt, b * tk * dm, 0, 1);
      buf dW[4], dB[4];
      for (int i = 0; i < 4; i++)
        dW[i] = rnd_buf(gdt, dm * dm, -0.01, 0.01), dB[i] = rnd_buf(gdt, dm, -0.01, 0.01);
      const float sc = cross ? 0.5f : 1.0f;
      OK(ampc_mha_backward_ex(b, tq, tk, dm, h, xq.h, xkv.h, adt, W[0].h, W[1].h, W[2].h, W[3].h,
                              wdt, &hc, pdt, dy.h, gdt, dxq.h, cross ? dxkv.h : NULL, sc, dW[0].h,
                              dB[0].h, dW[1].h, dB[1].h, dW[2].h, dB[2].h, dW[3].h, dB[3].h,
                              AMPC_ACC_F32, NULL, NULL));
      OK(ampc_cuda_mha_backward_ex(b, tq, tk, dm, h, xq.d, xkv.d, adt, W[0].d, W[1].d, W[2].d,
                                   W[3].d, wdt, &dc, pdt, dy.d, gdt, dxq.d, cross ? dxkv.d : NULL,
                                   sc, dW[0].d, dB[0].d, dW[1].d, dB[1].d, dW[2].d, dB[2].d,
                                   dW[3].d, dB[3].d, AMPC_ACC_F32, NULL, NULL));
      const char *wn[4] = {"q", "k", "v", "out"};
      /* the bias gradients' scale: the largest of the four (k's is a sum
       * that cancels to about 0, softmax being blind to a shift of every
       * score of a row, so its own size says nothing of its summands) */
      double dbmax = 0;
      for (int i = 0; i < 4; i++)
        dbmax = fmax(dbmax, max_abs(&dB[i]));
      for (int i = 0; i < 4; i++) {
        const int64_t kc = 2 * dm + tq + tk + b * tk;
        tol = normwise_tol_mid(&dW[i], kc, gdt, max_abs(&dW[i]));
        snprintf(nm, sizeof nm, "mha %s dW%s %s", cross ? "cross" : "self", wn[i], dn(gdt));
        compare(nm, &dW[i], tol);
        free(tol);
        tol = normwise_tol_mid(&dB[i], kc, gdt, dbmax);
        snprintf(nm, sizeof nm, "mha %s db%s %s", cross ? "cross" : "self", wn[i], dn(gdt));
        compare(nm, &dB[i], tol);
        free(tol);
      }
      tol = normwise_tol_mid(&dxq, 3 * dm + tq + tk, gdt, max_abs(&dxq));
      snprintf(nm, sizeof nm, "mha %s dxq %s", cross ? "cross" : "self", dn(gdt));
      compare(nm, &dxq, tol);
      free(tol);
      if (cross) {
        tol = normwise_tol_mid(&dxkv, 3 * dm + tq + tk, gdt, max_abs(&dxkv));
        snprintf(nm, sizeof nm, "mha cross dxkv (x 0.5) %s", dn(gdt));
        compare(nm, &dxkv, tol);
        free(tol);
      }
      free(mk);
      drop(&xq);
      if (cross)
        drop(&xkv);
      for (int i = 0; i < 4; i++)
        drop(&W[i]), drop(&B[i]), drop(&dW[i]), drop(&dB[i]);
      drop(&mask), drop(&cq), drop(&ck), drop(&cv), drop(&co), drop(&cs), drop(&cp), drop(&y);
      drop(&dy), drop(&dxq), drop(&dxkv);
    }
}

/* The backward pass that recomputes the attention probabilities
 * (ampc_mha_cache.recompute: the model's default) against the one that
 * reads the forward's, both on the GPU: bit-equal (the same kernels on the
 * same q and k), with the forward's scores and probabilities overwritten in
 * between; FP32 and 16-bit probabilities, self and cross attention with a
 * key mask (as the text and fusion blocks), the forward with a bound tally
 * (a telemetry step), and FP16 accumulation (the per-head path). */
static void test_mha_recompute(void) {
  printf("multi-head attention, probabilities recomputed in the backward pass:\n");
  const int64_t b = 3, tq = 13, h = 4, dm = 64;
  for (int ia = 0; ia < 4; ia++)
    for (int cross = 0; cross < 2; cross++)
      for (int p32 = 0; p32 < 2; p32++) {
        const bool acc16 = ia == 3; /* binary16 with FP16 sums */
        const ampc_dtype adt = acc16 ? AMPC_F16 : k_dts[ia], pdt = p32 ? AMPC_F32 : adt;
        const ampc_acc acc = acc16 ? AMPC_ACC_F16 : AMPC_ACC_F32;
        if (p32 && (adt == AMPC_F32 || acc16))
          continue;
        const int64_t tk = cross ? 21 : tq;
        buf xq = rnd_buf(adt, b * tq * dm, -1, 1),
            xkv = cross ? rnd_buf(adt, b * tk * dm, -1, 1) : xq;
        buf W[4], B[4];
        for (int i = 0; i < 4; i++)
          W[i] = rnd_buf(adt, dm * dm, -0.2, 0.2), B[i] = rnd_buf(adt, dm, -0.1, 0.1);
        uint8_t *mk = malloc((size_t)(b * tk));
        for (int64_t i = 0; i < b * tk; i++)
          mk[i] = urand() < 0.7 || i % tk == 1;
        buf mask = raw_buf(mk, (size_t)(b * tk));
        const uint8_t *dmask = mask.d;
        buf cq = rnd_buf(adt, b * tq * dm, 0, 1), ck = rnd_buf(adt, b * tk * dm, 0, 1),
            cv = rnd_buf(adt, b * tk * dm, 0, 1), co = rnd_buf(adt, b * tq * dm, 0, 1),
            cs = rnd_buf(pdt, b * h * tq * tk, 0, 1), cp = rnd_buf(pdt, b * h * tq * tk, 0, 1);
        buf y = rnd_buf(adt, b * tq * dm, 0, 1), dy = rnd_buf(adt, b * tq * dm, -1, 1);
        buf g[2][10];
        for (int r = 0; r < 2; r++) {
          ampc_mha_cache dc = {cq.d, ck.d, cv.d, co.d, cs.d, cp.d, false, NULL, AMPC_F32};
          ampc_tally *t = r && cross ? ampc_tally_create() : NULL; /* the counting forward */
          ampc_tally *was = t ? ampc_tally_bind(t) : NULL;
          OK(ampc_cuda_mha_forward(b, tq, tk, dm, h, xq.d, xkv.d, adt, W[0].d, B[0].d, W[1].d,
                                   B[1].d, W[2].d, B[2].d, W[3].d, B[3].d, adt, dmask, &dc, pdt,
                                   y.d, acc, NULL, NULL));
          if (t) {
            (void)ampc_tally_bind(was);
            ampc_tally_free(t);
          }
          if (r) { /* NaN where the forward left its scores and probabilities */
            memset(cs.h, 0xff, cs.bytes), memset(cp.h, 0xff, cp.bytes);
            OK(ampc_cuda_to_device(g_ctx, cs.d, cs.h, cs.bytes));
            OK(ampc_cuda_to_device(g_ctx, cp.d, cp.h, cp.bytes));
            dc.recompute = true, dc.key_mask = dmask;
          }
          g[r][0] = rnd_buf(adt, b * tq * dm, 0, 1), g[r][1] = rnd_buf(adt, b * tk * dm, 0, 1);
          for (int i = 0; i < 4; i++) /* the same start for both runs */
            g[r][2 + i] = rnd_buf(adt, dm * dm, 0, 0), g[r][6 + i] = rnd_buf(adt, dm, 0, 0);
          OK(ampc_cuda_mha_backward_ex(b, tq, tk, dm, h, xq.d, xkv.d, adt, W[0].d, W[1].d, W[2].d,
                                       W[3].d, adt, &dc, pdt, dy.d, adt, g[r][0].d,
                                       cross ? g[r][1].d : NULL, cross ? 0.5f : 1.0f, g[r][2].d,
                                       g[r][6].d, g[r][3].d, g[r][7].d, g[r][4].d, g[r][8].d,
                                       g[r][5].d, g[r][9].d, acc, NULL, NULL));
        }
        for (int i = 0; i < 10; i++) {
          if (i == 1 && !cross)
            continue;
          /* the first run's result as the host copy of the second's */
          OK(ampc_cuda_to_host(g_ctx, g[1][i].h, g[0][i].d, g[0][i].bytes));
          char nm[96];
          snprintf(nm, sizeof nm, "mha %s recompute %s%s, probs %s, grad %d",
                   cross ? "cross" : "self", dn(adt), acc16 ? " (FP16 sums)" : "", dn(pdt), i);
          compare(nm, &g[1][i], NULL);
        }
        for (int r = 0; r < 2; r++)
          for (int i = 0; i < 10; i++)
            drop(&g[r][i]);
        free(mk);
        drop(&mask);
        drop(&xq);
        if (cross)
          drop(&xkv);
        for (int i = 0; i < 4; i++)
          drop(&W[i]), drop(&B[i]);
        drop(&cq), drop(&ck), drop(&cv), drop(&co), drop(&cs), drop(&cp), drop(&y), drop(&dy);
      }
}

static void test_patch_and_losses(void) {
  printf("patch embedding and losses:\n");
  char nm[96];
  for (int iw = 0; iw < 3; iw++) {
    const ampc_dtype wdt = k_dts[iw], ydt = wdt, gdt = wdt;
    /* patch embedding: 3 images of 16x16x3, patch 4 */
    const int64_t b = 3, hh = 16, ww = 16, c = 3, p = 4, d = 40, np = 16, k = c * p * p;
    const float sc = 1.0f / 127.5f, sh = -1.0f;
    uint8_t *img = malloc((size_t)(b * hh * ww * c));
    for (int64_t i = 0; i < b * hh * ww * c; i++)
      img[i] = (uint8_t)(urand() * 256.0);
    buf im = raw_buf(img, (size_t)(b * hh * ww * c));
    buf w = rnd_buf(wdt, d * k, -0.2, 0.2), bias = rnd_buf(wdt, d, -0.1, 0.1),
        y = rnd_buf(ydt, b * np * d, 0, 1);
    OK(ampc_patch_embed_forward(b, hh, ww, c, p, d, img, sc, sh, w.h, wdt, bias.h, y.h, ydt,
                                AMPC_ACC_F32, NULL, NULL));
    OK(ampc_cuda_patch_embed_forward(b, hh, ww, c, p, d, im.d, sc, sh, w.d, wdt, bias.d, y.d, ydt,
                                     AMPC_ACC_F32, NULL, NULL));
    /* the unfolded patches (|v| <= 1 after the shift): bound from |patch| <= 1 */
    float *wf = host_f32(&w), *bf = host_f32(&bias), *yf = host_f32(&y);
    double *tol = malloc((size_t)(b * np * d) * sizeof *tol);
    for (int64_t r = 0; r < b * np; r++)
      for (int64_t j = 0; j < d; j++) {
        double sw = 0;
        for (int64_t q = 0; q < k; q++)
          sw += fabs((double)wf[j * k + q]);
        tol[r * d + j] = 2 * (double)(k + 3) * 0x1p-24 * (sw + fabs((double)bf[j])) +
                         2 * (ulp_rel(ydt) * fabs((double)yf[r * d + j]) + ulp_min(ydt));
      }
    snprintf(nm, sizeof nm, "patch embed %s", dn(wdt));
    compare(nm, &y, tol);
    free(tol);
    buf dy = rnd_buf(gdt, b * np * d, -1, 1), dw = rnd_buf(gdt, d * k, -0.1, 0.1),
        db = rnd_buf(gdt, d, -0.1, 0.1);
    float *dw0 = host_f32(&dw), *db0 = host_f32(&db);
    OK(ampc_patch_embed_backward(b, hh, ww, c, p, d, img, sc, sh, wdt, dy.h, gdt, dw.h, db.h,
                                 AMPC_ACC_F32, NULL));
    OK(ampc_cuda_patch_embed_backward(b, hh, ww, c, p, d, im.d, sc, sh, wdt, dy.d, gdt, dw.d, db.d,
                                      AMPC_ACC_F32, NULL));
    float *dyf = host_f32(&dy), *dwf = host_f32(&dw);
    tol = malloc((size_t)(d * k) * sizeof *tol);
    for (int64_t j = 0; j < d; j++) {
      double sd = 0;
      for (int64_t r = 0; r < b * np; r++)
        sd += fabs((double)dyf[r * d + j]);
      for (int64_t q = 0; q < k; q++)
        tol[j * k + q] = 2 * (double)(b * np + 3) * 0x1p-24 * (sd + fabs((double)dw0[j * k + q])) +
                         2 * (ulp_rel(gdt) * fabs((double)dwf[j * k + q]) + ulp_min(gdt));
    }
    snprintf(nm, sizeof nm, "patch embed dW += %s", dn(gdt));
    compare(nm, &dw, tol);
    free(tol);
    tol = colsum_tol(b * np, d, dyf, db0, &db);
    snprintf(nm, sizeof nm, "patch embed db += %s", dn(gdt));
    compare(nm, &db, tol);
    free(db0);
    free(tol), free(wf), free(bf), free(yf), free(dw0), free(dyf), free(dwf), free(img);
    drop(&im), drop(&w), drop(&bias), drop(&y), drop(&dy), drop(&dw), drop(&db);

    /* cross-entropy over 9 classes; logits up to 20 */
    const int64_t m = 37, nc = 9;
    buf lg = rnd_buf(wdt, m * nc, -20, 20);
    int32_t *tg = malloc((size_t)m * sizeof *tg);
    for (int64_t i = 0; i < m; i++)
      tg[i] = (int32_t)(urand() * (double)nc);
    buf tgb = raw_buf(tg, (size_t)m * sizeof *tg);
    float lc = -1, lgpu = -2;
    OK(ampc_cross_entropy_forward(m, nc, lg.h, wdt, tg, &lc));
    OK(ampc_cuda_cross_entropy_forward(m, nc, lg.d, wdt, tgb.d, &lgpu));
    /* expf within 2 ulps and log within 1: the log-sum-exp within 4 ulps of
     * FP32 at 1 + its size (max |logit| <= 20) */
    CHECK(fabs((double)lgpu - (double)lc) <= 0x1p-21 * (1.0 + 20.0) + 0x1p-23 * fabs((double)lc),
          "cross-entropy %s: gpu %.9g cpu %.9g", dn(wdt), (double)lgpu, (double)lc);
    printf("  %-44s gpu %.9g cpu %.9g\n", "cross-entropy loss", (double)lgpu, (double)lc);
    g_checked++;
    buf dl = rnd_buf(gdt, m * nc, 0, 1);
    const float S = 65536.0f;
    OK(ampc_cross_entropy_backward(m, nc, lg.h, wdt, tg, S, dl.h, gdt));
    OK(ampc_cuda_cross_entropy_backward(m, nc, lg.d, wdt, tgb.d, S, dl.d, gdt));
    float *dlf = host_f32(&dl);
    tol = malloc((size_t)(m * nc) * sizeof *tol);
    for (int64_t i = 0; i < m * nc; i++) /* p off by 4 ulps of (1 + |lse|) relative */
      tol[i] = (double)S / (double)m * 0x1p-21 * 21.0 +
               2 * (ulp_rel(gdt) * fabs((double)dlf[i]) + ulp_min(gdt));
    snprintf(nm, sizeof nm, "cross-entropy backward x S %s", dn(gdt));
    compare(nm, &dl, tol);
    free(tol), free(dlf);
    /* a target outside [0, c): refused as on the CPU */
    tg[3] = (int32_t)nc;
    OK(ampc_cuda_to_device(g_ctx, tgb.d, tg, (size_t)m * sizeof *tg));
    CHECK(ampc_cuda_cross_entropy_forward(m, nc, lg.d, wdt, tgb.d, &lgpu) == AMPC_ERR_INVALID_ARG,
          "a bad target accepted");
    CHECK(ampc_cuda_cross_entropy_backward(m, nc, lg.d, wdt, tgb.d, S, dl.d, gdt) ==
              AMPC_ERR_INVALID_ARG,
          "a bad target accepted (backward)");
    free(tg);
    drop(&lg), drop(&tgb), drop(&dl);

    /* BCE with logits */
    buf bx = rnd_buf(wdt, 2 * m, -30, 30), bt = rnd_buf(AMPC_F32, 2 * m, 0, 1);
    float *btf = host_f32(&bt);
    for (int64_t i = 0; i < 2 * m; i++)
      btf[i] = i < m ? 1.0f : 0.0f;
    drop(&bt);
    bt = from_f32(AMPC_F32, btf, 2 * m);
    free(btf);
    OK(ampc_bce_logits_forward(2 * m, bx.h, wdt, bt.h, &lc));
    OK(ampc_cuda_bce_logits_forward(2 * m, bx.d, wdt, bt.d, &lgpu));
    CHECK(fabs((double)lgpu - (double)lc) <= 0x1p-21 * (1.0 + 30.0) + 0x1p-23 * fabs((double)lc),
          "bce %s: gpu %.9g cpu %.9g", dn(wdt), (double)lgpu, (double)lc);
    printf("  %-44s gpu %.9g cpu %.9g\n", "bce loss", (double)lgpu, (double)lc);
    g_checked++;
    buf bdx = rnd_buf(gdt, 2 * m, 0, 1);
    OK(ampc_bce_logits_backward(2 * m, bx.h, wdt, bt.h, S, bdx.h, gdt));
    OK(ampc_cuda_bce_logits_backward(2 * m, bx.d, wdt, bt.d, S, bdx.d, gdt));
    float *bdf = host_f32(&bdx);
    tol = malloc((size_t)(2 * m) * sizeof *tol);
    for (int64_t i = 0; i < 2 * m; i++) /* sigmoid from expf: 4 ulps */
      tol[i] = (double)S / (double)(2 * m) * 4 * 0x1p-23 +
               2 * (ulp_rel(gdt) * fabs((double)bdf[i]) + ulp_min(gdt));
    snprintf(nm, sizeof nm, "bce backward x S %s", dn(gdt));
    compare(nm, &bdx, tol);
    free(tol), free(bdf);
    drop(&bx), drop(&bt), drop(&bdx);

    /* InfoNCE on a 24 x 24 similarity matrix (cosines), temperature 1/0.07 */
    const int64_t bb = 24;
    buf sim = rnd_buf(wdt, bb * bb, -1, 1);
    const float lt = logf(1.0f / 0.07f), scl = expf(lt);
    OK(ampc_infonce_forward(bb, sim.h, wdt, lt, &lc));
    OK(ampc_cuda_infonce_forward(bb, sim.d, wdt, lt, &lgpu));
    const double L = 1.0 + (double)scl;
    CHECK(fabs((double)lgpu - (double)lc) <= 0x1p-21 * L + 0x1p-23 * fabs((double)lc),
          "infonce %s: gpu %.9g cpu %.9g", dn(wdt), (double)lgpu, (double)lc);
    printf("  %-44s gpu %.9g cpu %.9g\n", "infonce loss", (double)lgpu, (double)lc);
    g_checked++;
    buf ds = rnd_buf(gdt, bb * bb, 0, 1);
    float dtc = 0.25f, dtg = 0.25f;
    OK(ampc_infonce_backward(bb, sim.h, wdt, lt, S, ds.h, gdt, &dtc, NULL));
    OK(ampc_cuda_infonce_backward(bb, sim.d, wdt, lt, S, ds.d, gdt, &dtg, NULL));
    float *dsf = host_f32(&ds);
    tol = malloc((size_t)(bb * bb) * sizeof *tol);
    for (int64_t i = 0; i < bb * bb; i++) /* P + Q <= 2, off by 4 ulps of L relative */
      tol[i] = (double)S * (double)scl * 2.0 / (2.0 * (double)bb) * 0x1p-21 * L +
               2 * (ulp_rel(gdt) * fabs((double)dsf[i]) + ulp_min(gdt));
    snprintf(nm, sizeof nm, "infonce backward x S %s", dn(gdt));
    compare(nm, &ds, tol);
    CHECK(fabs((double)dtg - (double)dtc) <=
              (double)S * (double)bb * 0x1p-21 * L * (double)scl + 0x1p-22 * fabs((double)dtc),
          "infonce dlog_temp %s: gpu %.9g cpu %.9g", dn(wdt), (double)dtg, (double)dtc);
    g_checked++;
    free(tol), free(dsf);
    drop(&sim), drop(&ds);
  }
}

/* ---- the gradient pass and the optimizer ------------------------------------ */

static void test_unscale(void) {
  printf("unscale + non-finite check + norm:\n");
  const int64_t n = 1000003;
  for (int ig = 0; ig < 3; ig++) {
    const ampc_dtype gdt = k_dts[ig];
    buf g = rnd_buf(gdt, n, -60000, 60000);
    float *gf = host_f32(&g);
    gf[17] = INFINITY, gf[4096] = NAN, gf[n - 1] = -INFINITY;
    drop(&g);
    g = from_f32(gdt, gf, n);
    free(gf);
    int64_t nbc = -1, nbg = -2;
    double nc = -1, ng = -2;
    OK(ampc_grad_unscale_check(g.h, gdt, n, 0x1p-16f, &nbc, &nc, NULL));
    OK(ampc_cuda_grad_unscale_check(g.d, gdt, n, 0x1p-16f, &nbg, &ng, NULL));
    CHECK(nbc == nbg && nbc == 3, "unscale %s: non-finite gpu %lld cpu %lld", dn(gdt),
          (long long)nbg, (long long)nbc);
    CHECK(fabs(ng - nc) <= 0x1p-40 * nc, "unscale %s: norm gpu %.17g cpu %.17g", dn(gdt), ng, nc);
    printf("  %-44s norm %.17g vs %.17g (rel %.2e), %lld non-finite\n", dn(gdt), ng, nc,
           fabs(ng - nc) / nc, (long long)nbg);
    g_checked += n;
    drop(&g);
  }
}

/* a parameter table mirrored on the device: same metadata, device role buffers */
typedef struct mirror {
  ampc_params host, dev;
} mirror;

static void mirror_make(mirror *M, ampc_dtype wdt, bool master, ampc_dtype sdt, int moments,
                        bool kahan) {
  static const ampc_param_spec specs[] = {
      {"a.weight", 2, {33, 65}, AMPC_BRANCH_VISION, AMPC_INIT_NORMAL, 0.02f, false},
      {"a.bias", 1, {33}, AMPC_BRANCH_VISION, AMPC_INIT_ZEROS, 0.0f, true},
      {"b.weight", 2, {257, 40}, AMPC_BRANCH_TEXT, AMPC_INIT_NORMAL, 0.5f, false},
      {"c.scale", 1, {1}, AMPC_BRANCH_HEADS, AMPC_INIT_CONST, 2.0f, true},
  };
  ampc_rng r;
  ampc_rng_seed(&r, 11);
  OK(ampc_params_create(&M->host, specs, 4, wdt, master, sdt, moments, &r));
  if (kahan)
    OK(ampc_params_add_compensation(&M->host));
  M->dev = M->host;
  ampc_params *H = &M->host, *D = &M->dev;
  const size_t ws = ampc_dtype_size(wdt) * (size_t)H->total,
               ss = ampc_dtype_size(sdt) * (size_t)H->total;
  /* moments and gradients with values, so the first step is not special */
  float *f = malloc((size_t)H->total * sizeof *f);
  for (int64_t i = 0; i < H->total; i++)
    f[i] = (float)(urand() - 0.5) * 1e-3f;
  if (H->m)
    OK(ampc_convert(H->m, sdt, f, AMPC_F32, (size_t)H->total));
  for (int64_t i = 0; i < H->total; i++)
    f[i] = (float)urand() * 1e-6f;
  if (H->v)
    OK(ampc_convert(H->v, sdt, f, AMPC_F32, (size_t)H->total));
  for (int64_t i = 0; i < H->total; i++)
    f[i] = (float)(urand() - 0.5) * (i % 5 == 0 ? 1e-7f : 2.0f);
  OK(ampc_convert(H->grad, wdt, f, AMPC_F32, (size_t)H->total));
  free(f);
#define MIRROR(field, bytes)                                                                       \
  if (H->field) {                                                                                  \
    void *p_ = NULL;                                                                               \
    OK(ampc_cuda_malloc(g_ctx, (bytes), &p_));                                                     \
    OK(ampc_cuda_to_device(g_ctx, p_, H->field, (bytes)));                                         \
    D->field = p_;                                                                                 \
  }
  MIRROR(w, ws);
  MIRROR(grad, ws);
  MIRROR(master, sizeof(float) * (size_t)H->total);
  MIRROR(m, ss);
  MIRROR(v, ss);
  MIRROR(comp, ws);
#undef MIRROR
}

static void mirror_check(const mirror *M, const char *what) {
  const ampc_params *H = &M->host, *D = &M->dev;
  char nm[128];
#define SAME(field, dt)                                                                            \
  if (H->field) {                                                                                  \
    buf b = {H->field, D->field, (dt), H->total, ampc_dtype_size(dt) * (size_t)H->total};          \
    snprintf(nm, sizeof nm, "%s: %s", what, #field);                                               \
    compare(nm, &b, NULL);                                                                         \
  }
  SAME(w, H->wdt);
  SAME(master, AMPC_F32);
  SAME(m, H->sdt);
  SAME(v, H->sdt);
  SAME(comp, H->wdt);
#undef SAME
}

static void mirror_free(mirror *M) {
  ampc_cuda_free(g_ctx, M->dev.w);
  ampc_cuda_free(g_ctx, M->dev.grad);
  ampc_cuda_free(g_ctx, M->dev.master);
  ampc_cuda_free(g_ctx, M->dev.m);
  ampc_cuda_free(g_ctx, M->dev.v);
  ampc_cuda_free(g_ctx, M->dev.comp);
  ampc_params_free(&M->host);
}

static void test_optim(void) {
  printf("optimizer (3 steps each):\n");
  struct {
    const char *name;
    ampc_optim_kind kind;
    ampc_dtype wdt, sdt;
    bool master, sr, kahan, nesterov, no_momentum;
  } cases[] = {
      {"adamw 16-mixed", AMPC_OPTIM_ADAMW, AMPC_F16, AMPC_F32, true, false, false, false, false},
      {"adamw bf16-mixed", AMPC_OPTIM_ADAMW, AMPC_BF16, AMPC_F32, true, false, false, false, false},
      {"adamw 32-true", AMPC_OPTIM_ADAMW, AMPC_F32, AMPC_F32, false, false, false, false, false},
      {"adamw 16-true", AMPC_OPTIM_ADAMW, AMPC_F16, AMPC_F16, false, false, false, false, false},
      {"adamw bf16-true stochastic", AMPC_OPTIM_ADAMW, AMPC_BF16, AMPC_BF16, false, true, false,
       false, false},
      {"adamw bf16 kahan", AMPC_OPTIM_ADAMW, AMPC_BF16, AMPC_F32, false, false, true, false, false},
      {"sgd 16-mixed", AMPC_OPTIM_SGD, AMPC_F16, AMPC_F32, true, false, false, false, false},
      {"sgd nesterov 16-true", AMPC_OPTIM_SGD, AMPC_F16, AMPC_F16, false, false, false, true,
       false},
      {"sgd bf16 kahan", AMPC_OPTIM_SGD, AMPC_BF16, AMPC_F32, false, false, true, false, false},
      {"sgd without momentum 16-mixed", AMPC_OPTIM_SGD, AMPC_F16, AMPC_F32, true, false, false,
       false, true},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    ampc_optim_config c = cases[ci].kind == AMPC_OPTIM_ADAMW ? ampc_optim_adamw_defaults()
                                                             : ampc_optim_sgd_defaults();
    c.weight_decay = 0.05f;
    c.nesterov = cases[ci].nesterov;
    c.stochastic_round = cases[ci].sr;
    c.kahan = cases[ci].kahan;
    if (cases[ci].no_momentum)
      c.momentum = 0.0f; /* no moment buffer at all */
    c.round_seed = 99;
    c.branch_lr[AMPC_BRANCH_TEXT] = c.lr * 0.5f;
    mirror M;
    mirror_make(&M, cases[ci].wdt, cases[ci].master, cases[ci].sdt, ampc_optim_moments(&c),
                cases[ci].kahan);
    const float gm[AMPC_BRANCH_COUNT] = {0x1p-10f, 0x1p-10f, 0x1p-9f, 0x1p-10f};
    ampc_swallow_stats swc[4], swg[4];
    for (int64_t t = 1; t <= 3; t++) {
      const float clip = t == 2 ? 0.5f : 1.0f;
      OK(ampc_optim_step_from(&M.host, &c, t, c.lr, gm, clip, swc, M.host.grad, M.host.wdt));
      OK(ampc_cuda_optim_step_from(&M.dev, &c, t, c.lr, gm, clip, swg, M.dev.grad, M.dev.wdt));
      for (int i = 0; i < 4; i++)
        CHECK(swc[i].updated == swg[i].updated && swc[i].swallowed == swg[i].swallowed &&
                  swc[i].would_swallow == swg[i].would_swallow &&
                  swc[i].nonfinite == swg[i].nonfinite,
              "%s step %lld tensor %d: swallow counts gpu %lld/%lld/%lld/%lld cpu "
              "%lld/%lld/%lld/%lld",
              cases[ci].name, (long long)t, i, (long long)swg[i].updated,
              (long long)swg[i].swallowed, (long long)swg[i].would_swallow,
              (long long)swg[i].nonfinite, (long long)swc[i].updated, (long long)swc[i].swallowed,
              (long long)swc[i].would_swallow, (long long)swc[i].nonfinite);
    }
    mirror_check(&M, cases[ci].name);
    mirror_free(&M);
  }
}

/* ---- host-side checks (no GPU needed) ------------------------------------- */
#ifndef AMPC_TEST_ON_CPU

static void test_host_checks(void) {
  const ampc_status nb = ampc_cuda_built() ? AMPC_ERR_INVALID_ARG : AMPC_ERR_UNSUPPORTED;
  float x[4] = {0};
  ampc_round_stats st = {0};
  /* bad arguments are refused before the context is looked at */
  if (ampc_cuda_built()) {
    CHECK(ampc_cuda_add_forward(0, x, AMPC_F32, x, AMPC_F32, x, AMPC_F32, NULL) ==
              AMPC_ERR_INVALID_ARG,
          "n = 0 accepted");
    CHECK(strstr(ampc_last_error(), "n must be positive") != NULL, "message: %s",
          ampc_last_error());
    CHECK(ampc_cuda_gelu_forward(4, NULL, AMPC_F32, x, AMPC_F32, NULL) == AMPC_ERR_INVALID_ARG,
          "NULL x accepted");
    CHECK(ampc_cuda_layernorm_forward(1, 4, x, AMPC_F8_E4M3, x, x, AMPC_F32, 1e-5f, x, AMPC_F32, x,
                                      x, NULL) == AMPC_ERR_INVALID_ARG,
          "an FP8 input accepted");
    CHECK(ampc_cuda_layernorm_forward(1, 4, x, AMPC_F32, x, x, AMPC_F32, -1.0f, x, AMPC_F32, x, x,
                                      NULL) == AMPC_ERR_INVALID_ARG,
          "eps < 0 accepted");
    CHECK(ampc_cuda_vit_tokens_forward(1, -1, 4, x, AMPC_F32, x, x, AMPC_F32, x, AMPC_F32) ==
              AMPC_ERR_INVALID_ARG,
          "np < 0 accepted");
    CHECK(ampc_cuda_grad_unscale_check(x, AMPC_F32, 4, 1.0f, NULL, NULL, NULL) ==
              AMPC_ERR_INVALID_ARG,
          "NULL outputs accepted");
    CHECK(ampc_cuda_stage_f32(-1, x, AMPC_F32, 1.0f, true, x) == AMPC_ERR_INVALID_ARG,
          "staging n < 0 accepted");
    CHECK(ampc_cuda_stage_f32(4, x, AMPC_F8_E5M2, 1.0f, true, x) == AMPC_ERR_INVALID_ARG,
          "staging an FP8 gradient accepted");
    CHECK(ampc_cuda_stage_f32(4, x, AMPC_F32, 1.0f, true, NULL) == AMPC_ERR_INVALID_ARG,
          "staging into NULL accepted");
  }
  /* well-formed calls without a bound context (or without CUDA) */
  ampc_cuda_bind(NULL);
  CHECK(ampc_cuda_add_forward(4, x, AMPC_F32, x, AMPC_F32, x, AMPC_F32, &st) == nb,
        "add without a context: %s", ampc_last_error());
  if (ampc_cuda_built())
    CHECK(strstr(ampc_last_error(), "ampc_cuda_bind") != NULL, "message: %s", ampc_last_error());
  CHECK(st.count == 0, "stats touched by a refused call");
  int64_t nf = 0;
  double norm = 0;
  CHECK(ampc_cuda_grad_unscale_check(x, AMPC_F32, 4, 1.0f, &nf, &norm, NULL) == nb,
        "unscale without a context");
  CHECK(ampc_cuda_stage_f32(4, x, AMPC_F32, 0.5f, false, x) == nb, "staging without a context");
  CHECK(x[0] == 0.0f, "a refused staging wrote");
  CHECK(ampc_cuda_current() == NULL, "a context is bound");
  printf("host-side checks: %s\n", g_fail ? "FAILED" : "passed");
}
#endif

/* the device copy's bytes against the host copy's (ids, raw bits) */
static void compare_raw(const char *what, const buf *b) {
  void *g = malloc(b->bytes ? b->bytes : 1);
  OK(ampc_cuda_to_host(g_ctx, g, b->d, b->bytes));
  g_checked += (int64_t)b->bytes / 4;
  CHECK(memcmp(g, b->h, b->bytes) == 0, "%s: the bytes differ", what);
  printf("  %-44s %8zu bytes, bit-equal\n", what, b->bytes);
  free(g);
}

/* what the model does between its layers (src/backend/cuda/cuda_rows.cu): bit-equal */
static void test_model_rows(void) {
  printf("rows, stores and memory:\n");
  enum { ROWS = 37, D = 300, N = 111, M = 29, C = 57 };
  char nm[96];
  int32_t idx[N];
  for (int i = 0; i < N; i++)
    idx[i] = (int32_t)(urand() * ROWS); /* repeats: the scatter-add's order matters */
  buf bidx = raw_buf(idx, sizeof idx);
  for (int ix = 0; ix < 3; ix++) {
    const ampc_dtype xdt = k_dts[ix], ydt = k_dts[(ix + 1) % 3];
    buf x = rnd_buf(xdt, ROWS * D, -3.0, 3.0), y = rnd_buf(ydt, N * D, 0, 1);
    OK(ampc_gather_rows(N, D, idx, ROWS, x.h, xdt, y.h, ydt));
    OK(ampc_cuda_gather_rows(N, D, bidx.d, ROWS, x.d, xdt, y.d, ydt));
    snprintf(nm, sizeof nm, "gather rows %s -> %s", dn(xdt), dn(ydt));
    compare(nm, &y, NULL);
    /* scatter (a later row wins a repeated index) */
    buf z = rnd_buf(xdt, ROWS * D, 0, 1), src = rnd_buf(xdt, N * D, -1, 1);
    OK(ampc_scatter_rows(N, D, idx, ROWS, src.h, xdt, z.h));
    OK(ampc_cuda_scatter_rows(N, D, bidx.d, ROWS, src.d, xdt, z.d));
    snprintf(nm, sizeof nm, "scatter rows %s", dn(xdt));
    compare(nm, &z, NULL);
    /* scatter-add in FP32 (ldy > d), with and without a second source and idx */
    buf acc = rnd_buf(AMPC_F32, ROWS * (D + 5), -1, 1), x2 = rnd_buf(ydt, N * D, -1e-3, 1e-3);
    OK(ampc_scatter_add_rows(N, D, idx, ROWS, src.h, xdt, x2.h, ydt, acc.h, D + 5));
    OK(ampc_cuda_scatter_add_rows(N, D, bidx.d, ROWS, src.d, xdt, x2.d, ydt, acc.d, D + 5));
    snprintf(nm, sizeof nm, "scatter-add rows %s + %s by index", dn(xdt), dn(ydt));
    compare(nm, &acc, NULL);
    OK(ampc_scatter_add_rows(ROWS, D, NULL, ROWS, z.h, xdt, NULL, ydt, acc.h, D + 5));
    OK(ampc_cuda_scatter_add_rows(ROWS, D, NULL, ROWS, z.d, xdt, NULL, ydt, acc.d, D + 5));
    snprintf(nm, sizeof nm, "scatter-add rows %s in place", dn(xdt));
    compare(nm, &acc, NULL);
    /* argmax: ties (values on a coarse grid), a NaN row, the diagonal skipped */
    float *af = malloc((size_t)(M * C) * sizeof *af);
    for (int i = 0; i < M * C; i++)
      af[i] = (float)(int)(urand() * 8.0);
    af[3 * C + 7] = NAN;
    buf a = from_f32(xdt, af, M * C);
    free(af);
    int32_t none[M];
    for (int i = 0; i < M; i++)
      none[i] = -7;
    for (int sd = 0; sd < 2; sd++) {
      buf out = raw_buf(none, sizeof none);
      OK(ampc_argmax_rows(M, C, a.h, xdt, sd == 1, out.h));
      OK(ampc_cuda_argmax_rows(M, C, a.d, xdt, sd == 1, out.d));
      snprintf(nm, sizeof nm, "argmax rows %s%s", dn(xdt), sd ? " skipping the diagonal" : "");
      compare_raw(nm, &out);
      drop(&out);
    }
    /* the rounding store from FP32, with stats: overflow, underflow, subnormals */
    float *sf = malloc((size_t)(N * D) * sizeof *sf);
    for (int i = 0; i < N * D; i++)
      sf[i] = (float)((urand() - 0.5) * pow(2.0, -30.0 + 50.0 * urand()));
    sf[0] = 1e30f, sf[1] = -1e-30f, sf[2] = NAN, sf[3] = INFINITY;
    buf s32 = from_f32(AMPC_F32, sf, N * D), sy = rnd_buf(ydt, N * D, 0, 1);
    free(sf);
    ampc_round_stats sc = {0}, sg = {0};
    OK(ampc_store_f32(sy.h, ydt, s32.h, (size_t)(N * D), &sc));
    OK(ampc_cuda_store_f32(sy.d, ydt, s32.d, (size_t)(N * D), &sg));
    snprintf(nm, sizeof nm, "store f32 -> %s", dn(ydt));
    compare(nm, &sy, NULL);
    stats_equal(nm, &sg, &sc);
    OK(ampc_convert(y.h, ydt, s32.h, AMPC_F32, (size_t)(N * D)));
    OK(ampc_cuda_convert(y.d, ydt, s32.d, AMPC_F32, (size_t)(N * D)));
    snprintf(nm, sizeof nm, "convert f32 -> %s", dn(ydt));
    compare(nm, &y, NULL);
    OK(ampc_convert(s32.h, AMPC_F32, x.h, xdt, (size_t)(ROWS * D)));
    OK(ampc_cuda_convert(s32.d, AMPC_F32, x.d, xdt, (size_t)(ROWS * D)));
    snprintf(nm, sizeof nm, "convert %s -> f32", dn(xdt));
    buf view = s32;
    view.n = ROWS * D, view.bytes = (size_t)(ROWS * D) * sizeof(float);
    compare(nm, &view, NULL);
    drop(&x), drop(&y), drop(&z), drop(&src), drop(&acc), drop(&x2), drop(&a), drop(&s32),
        drop(&sy);
  }
  /* scale, zero, 2D copy */
  buf f = rnd_buf(AMPC_F32, N * D, -5, 5), g = rnd_buf(AMPC_F32, N * D, -5, 5);
  for (int64_t i = 0; i < N * D; i++)
    ((float *)f.h)[i] *= 0.375f;
  OK(ampc_cuda_scale_f32(N * D, f.d, 0.375f));
  compare("scale f32 by 0.375", &f, NULL);
  memset((char *)f.h + 40, 0, 4000);
  OK(ampc_cuda_zero((char *)f.d + 40, 4000));
  compare("zero 4000 bytes at offset 40", &f, NULL);
  for (int r = 0; r < 9; r++)
    memcpy((char *)g.h + (size_t)r * 64 * 4, (const char *)f.h + (size_t)r * 300 * 4, 48 * 4);
  OK(ampc_cuda_copy2d(g.d, 64 * 4, f.d, 300 * 4, 48 * 4, 9));
  compare("copy2d 9 rows of 48 floats", &g, NULL);
  drop(&f), drop(&g), drop(&bidx);
}

/* ---- the rounding tally (ampc/tally.h) ------------------------------------ */

/* With a tally bound, the device counts what its twin's stores counted on the
 * CPU: the same number of values in every call (r.count), and for the
 * bit-equal functions the same counts, histogram and max |x|. Each call runs
 * on the CPU, then on the device, each side drained on its own. */
static ampc_tally *g_tally;
static ampc_tm_stats g_tc;
#define TALLY_CPU(call)                                                                            \
  do {                                                                                             \
    (void)ampc_tally_bind(g_tally);                                                                \
    OK(call);                                                                                      \
    (void)ampc_tally_bind(NULL);                                                                   \
    ampc_tally_drain(g_tally, &g_tc);                                                              \
  } while (0)
#define TALLY_DEV(what, exact, call)                                                               \
  do {                                                                                             \
    (void)ampc_tally_bind(g_tally);                                                                \
    OK(call);                                                                                      \
    (void)ampc_tally_bind(NULL);                                                                   \
    ampc_tm_stats g_;                                                                              \
    ampc_tally_drain(g_tally, &g_);                                                                \
    tally_equal(what, &g_, &g_tc, exact);                                                          \
  } while (0)

static void tally_equal(const char *what, const ampc_tm_stats *g, const ampc_tm_stats *c,
                        bool exact) {
  g_checked++;
  CHECK(g->r.count == c->r.count && c->r.count > 0,
        "tally %s: %llu values counted, %llu on the CPU", what, (unsigned long long)g->r.count,
        (unsigned long long)c->r.count);
  if (exact)
    CHECK(memcmp(g, c, sizeof *g) == 0,
          "tally %s: counts differ (flushed %llu/%llu, subnormal %llu/%llu, zeros %llu/%llu)", what,
          (unsigned long long)g->r.underflow, (unsigned long long)c->r.underflow,
          (unsigned long long)g->r.subnormal, (unsigned long long)c->r.subnormal,
          (unsigned long long)g->zeros, (unsigned long long)c->zeros);
}

static void test_tally(void) {
  printf("rounding tally (what the telemetry counts):\n");
  g_tally = ampc_tally_create();
  if (!g_tally)
    exit(1);
  char nm[96];
  for (int id = 0; id < 3; id++) {
    const ampc_dtype dt = k_dts[id];
    /* element-wise, bit-equal: the whole tally equal (values near the
     * binary16 subnormal range so that flushes and subnormals occur) */
    const int64_t n = 5000;
    buf x = rnd_buf(dt, n, -4, 4), dy = rnd_buf(dt, n, -1e-5, 1e-5), dx = rnd_buf(dt, n, 0, 1);
    snprintf(nm, sizeof nm, "gelu backward %s", dn(dt));
    TALLY_CPU(ampc_gelu_backward(n, dy.h, dt, x.h, dt, dx.h));
    TALLY_DEV(nm, true, ampc_cuda_gelu_backward(n, dy.d, dt, x.d, dt, dx.d));
    buf v = rnd_buf(AMPC_F32, n, -1e-6, 1e-6);
    snprintf(nm, sizeof nm, "gradient add %s", dn(dt));
    TALLY_CPU(ampc_grad_add_f32(n, v.h, dx.h, dt));
    TALLY_DEV(nm, true, ampc_cuda_grad_add_f32(n, v.d, dx.d, dt));
    snprintf(nm, sizeof nm, "store_f32 %s", dn(dt));
    TALLY_CPU(ampc_store_f32(dx.h, dt, v.h, (size_t)n, NULL));
    TALLY_DEV(nm, true, ampc_cuda_store_f32(dx.d, dt, v.d, (size_t)n, NULL));
    /* embeddings backward with repeated ids and the position gradient */
    const int64_t b = 4, t = 6, d = 24, vocab = 9;
    int32_t ids[4 * 6];
    for (int i = 0; i < b * t; i++)
      ids[i] = (int32_t)(urand() * 5.0);
    buf bid = raw_buf(ids, sizeof ids), edy = rnd_buf(dt, b * t * d, -1e-4, 1e-4),
        dtok = rnd_buf(dt, vocab * d, -1e-4, 1e-4), dpos = rnd_buf(dt, t * d, -1e-4, 1e-4);
    snprintf(nm, sizeof nm, "embedding backward %s", dn(dt));
    TALLY_CPU(ampc_embedding_backward(b, t, d, ids, vocab, edy.h, dt, dtok.h, dpos.h, NULL, NULL));
    TALLY_DEV(
        nm, true,
        ampc_cuda_embedding_backward(b, t, d, bid.d, vocab, edy.d, dt, dtok.d, dpos.d, NULL, NULL));
    drop(&x), drop(&dy), drop(&dx), drop(&v), drop(&bid), drop(&edy), drop(&dtok), drop(&dpos);

    /* reductions: the same number of values */
    const int64_t m = 33, dd = 96;
    buf lx = rnd_buf(dt, m * dd, -2, 2), gam = rnd_buf(dt, dd, 0.5, 1.5),
        ldy = rnd_buf(dt, m * dd, -1, 1), ldx = rnd_buf(dt, m * dd, 0, 1),
        dg = rnd_buf(dt, dd, 0, 1), dbt = rnd_buf(dt, dd, 0, 1), mean = rnd_buf(AMPC_F32, m, 0, 0),
        rstd = rnd_buf(AMPC_F32, m, 1, 1);
    snprintf(nm, sizeof nm, "layer norm backward %s", dn(dt));
    TALLY_CPU(ampc_layernorm_backward(m, dd, ldy.h, dt, lx.h, dt, gam.h, dt, mean.h, rstd.h, ldx.h,
                                      dg.h, dbt.h, NULL));
    TALLY_DEV(nm, false,
              ampc_cuda_layernorm_backward(m, dd, ldy.d, dt, lx.d, dt, gam.d, dt, mean.d, rstd.d,
                                           ldx.d, dg.d, dbt.d, NULL));
    buf sy = rnd_buf(dt, m * dd, 0, 0.1), sdx = rnd_buf(AMPC_F32, m * dd, 0, 1);
    snprintf(nm, sizeof nm, "softmax backward %s -> f32", dn(dt));
    TALLY_CPU(ampc_softmax_backward(m, dd, ldy.h, dt, sy.h, dt, 0.5f, sdx.h));
    TALLY_DEV(nm, false, ampc_cuda_softmax_backward(m, dd, ldy.d, dt, sy.d, dt, 0.5f, sdx.d));
    drop(&lx), drop(&gam), drop(&ldy), drop(&ldx), drop(&dg), drop(&dbt), drop(&mean), drop(&rstd),
        drop(&sy), drop(&sdx);

    /* GEMMs: every C element once (F32 C; 16-bit C direct and through a
     * beta = 1 accumulation; a mixed product; heads side by side with gaps) */
    const int64_t gm = 40, gn = 24, gk = 56, nb = 3;
    buf ga = rnd_buf(dt, nb * gm * gk, -1, 1), gb = rnd_buf(dt, nb * gk * gn, -1, 1),
        gc = rnd_buf(AMPC_F32, nb * gm * gn, 0, 1), gd = rnd_buf(dt, gm * nb * gn, 0, 1),
        gf = rnd_buf(AMPC_F32, gm * gk, -1, 1);
    snprintf(nm, sizeof nm, "gemm %s -> f32, batch %d", dn(dt), (int)nb);
    TALLY_CPU(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, gm, gn, gk, 1.0f, ga.h, dt, gk,
                                        gm * gk, gb.h, dt, gn, gk * gn, 0.0f, gc.h, AMPC_F32, gn,
                                        gm * gn, nb, AMPC_ACC_F32));
    TALLY_DEV(nm, false,
              ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, gm, gn, gk, 1.0f, ga.d, dt, gk,
                                             gm * gk, gb.d, dt, gn, gk * gn, 0.0f, gc.d, AMPC_F32,
                                             gn, gm * gn, nb, AMPC_ACC_F32));
    snprintf(nm, sizeof nm, "gemm %s heads side by side, beta 1", dn(dt));
    TALLY_CPU(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, gm, gn, gk, 0.5f, ga.h, dt, gk,
                                        gm * gk, gb.h, dt, gn, gk * gn, 1.0f, gd.h, dt, nb * gn, gn,
                                        nb, AMPC_ACC_F32));
    TALLY_DEV(nm, false,
              ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, gm, gn, gk, 0.5f, ga.d, dt, gk,
                                             gm * gk, gb.d, dt, gn, gk * gn, 1.0f, gd.d, dt,
                                             nb * gn, gn, nb, AMPC_ACC_F32));
    snprintf(nm, sizeof nm, "gemm f32 x %s -> %s (mixed)", dn(dt), dn(dt));
    TALLY_CPU(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, gm, gn, gk, 1.0f, gf.h, AMPC_F32, gk,
                                        0, gb.h, dt, gn, 0, 0.0f, gd.h, dt, gn, 0, 1,
                                        AMPC_ACC_F32));
    TALLY_DEV(nm, false,
              ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, gm, gn, gk, 1.0f, gf.d, AMPC_F32,
                                             gk, 0, gb.d, dt, gn, 0, 0.0f, gd.d, dt, gn, 0, 1,
                                             AMPC_ACC_F32));
    drop(&ga), drop(&gb), drop(&gc), drop(&gd), drop(&gf);

    /* layers: linear (bias; with stats), attention with FP32 probabilities */
    const int64_t lm = 30, lk = 48, ln = 20;
    buf x2 = rnd_buf(dt, lm * lk, -1, 1), w2 = rnd_buf(dt, ln * lk, -0.3, 0.3),
        b2 = rnd_buf(dt, ln, -0.1, 0.1), y2 = rnd_buf(dt, lm * ln, 0, 1),
        dy2 = rnd_buf(dt, lm * ln, -1, 1), dx2 = rnd_buf(dt, lm * lk, 0, 1),
        dw2 = rnd_buf(dt, ln * lk, 0, 0.01), db2 = rnd_buf(dt, ln, 0, 0.01);
    snprintf(nm, sizeof nm, "linear %s, bias", dn(dt));
    TALLY_CPU(
        ampc_linear_forward(lm, lk, ln, x2.h, dt, w2.h, dt, b2.h, y2.h, dt, AMPC_ACC_F32, NULL));
    TALLY_DEV(nm, false,
              ampc_cuda_linear_forward(lm, lk, ln, x2.d, dt, w2.d, dt, b2.d, y2.d, dt, AMPC_ACC_F32,
                                       NULL));
    ampc_round_stats rs = {0};
    snprintf(nm, sizeof nm, "linear %s with stats", dn(dt));
    TALLY_CPU(
        ampc_linear_forward(lm, lk, ln, x2.h, dt, w2.h, dt, b2.h, y2.h, dt, AMPC_ACC_F32, &rs));
    TALLY_DEV(nm, false,
              ampc_cuda_linear_forward(lm, lk, ln, x2.d, dt, w2.d, dt, b2.d, y2.d, dt, AMPC_ACC_F32,
                                       &rs));
    snprintf(nm, sizeof nm, "linear backward %s", dn(dt));
    TALLY_CPU(ampc_linear_backward(lm, lk, ln, dy2.h, dt, x2.h, dt, w2.h, dt, dx2.h, dw2.h, db2.h,
                                   AMPC_ACC_F32, NULL));
    TALLY_DEV(nm, false,
              ampc_cuda_linear_backward(lm, lk, ln, dy2.d, dt, x2.d, dt, w2.d, dt, dx2.d, dw2.d,
                                        db2.d, AMPC_ACC_F32, NULL));
    drop(&x2), drop(&w2), drop(&b2), drop(&y2), drop(&dy2), drop(&dx2), drop(&dw2), drop(&db2);

    const int64_t ab = 2, tq = 7, h = 2, dm = 32;
    const ampc_dtype pdt = AMPC_F32;
    buf xq = rnd_buf(dt, ab * tq * dm, -1, 1), W[4], B[4], dW[4], dB[4];
    for (int i = 0; i < 4; i++) {
      W[i] = rnd_buf(dt, dm * dm, -0.2, 0.2), B[i] = rnd_buf(dt, dm, -0.1, 0.1);
      dW[i] = rnd_buf(dt, dm * dm, 0, 0.01), dB[i] = rnd_buf(dt, dm, 0, 0.01);
    }
    buf cq = rnd_buf(dt, ab * tq * dm, 0, 1), ck = rnd_buf(dt, ab * tq * dm, 0, 1),
        cv = rnd_buf(dt, ab * tq * dm, 0, 1), co = rnd_buf(dt, ab * tq * dm, 0, 1),
        cs = rnd_buf(pdt, ab * h * tq * tq, 0, 1), cp = rnd_buf(pdt, ab * h * tq * tq, 0, 1),
        my = rnd_buf(dt, ab * tq * dm, 0, 1), mdy = rnd_buf(dt, ab * tq * dm, -1, 1),
        mdx = rnd_buf(dt, ab * tq * dm, 0, 1);
    const ampc_mha_cache hc = {cq.h, ck.h, cv.h, co.h, cs.h, cp.h, false, NULL, AMPC_F32};
    const ampc_mha_cache dc = {cq.d, ck.d, cv.d, co.d, cs.d, cp.d, false, NULL, AMPC_F32};
    snprintf(nm, sizeof nm, "mha forward %s, f32 probabilities", dn(dt));
    TALLY_CPU(ampc_mha_forward(ab, tq, tq, dm, h, xq.h, xq.h, dt, W[0].h, B[0].h, W[1].h, B[1].h,
                               W[2].h, B[2].h, W[3].h, B[3].h, dt, NULL, &hc, pdt, my.h,
                               AMPC_ACC_F32, NULL, NULL));
    TALLY_DEV(nm, false,
              ampc_cuda_mha_forward(ab, tq, tq, dm, h, xq.d, xq.d, dt, W[0].d, B[0].d, W[1].d,
                                    B[1].d, W[2].d, B[2].d, W[3].d, B[3].d, dt, NULL, &dc, pdt,
                                    my.d, AMPC_ACC_F32, NULL, NULL));
    snprintf(nm, sizeof nm, "mha backward %s, f32 probabilities", dn(dt));
    TALLY_CPU(ampc_mha_backward_ex(ab, tq, tq, dm, h, xq.h, xq.h, dt, W[0].h, W[1].h, W[2].h,
                                   W[3].h, dt, &hc, pdt, mdy.h, dt, mdx.h, NULL, 1.0f, dW[0].h,
                                   dB[0].h, dW[1].h, dB[1].h, dW[2].h, dB[2].h, dW[3].h, dB[3].h,
                                   AMPC_ACC_F32, NULL, NULL));
    TALLY_DEV(nm, false,
              ampc_cuda_mha_backward_ex(ab, tq, tq, dm, h, xq.d, xq.d, dt, W[0].d, W[1].d, W[2].d,
                                        W[3].d, dt, &dc, pdt, mdy.d, dt, mdx.d, NULL, 1.0f, dW[0].d,
                                        dB[0].d, dW[1].d, dB[1].d, dW[2].d, dB[2].d, dW[3].d,
                                        dB[3].d, AMPC_ACC_F32, NULL, NULL));
    drop(&xq);
    for (int i = 0; i < 4; i++)
      drop(&W[i]), drop(&B[i]), drop(&dW[i]), drop(&dB[i]);
    drop(&cq), drop(&ck), drop(&cv), drop(&co), drop(&cs), drop(&cp), drop(&my), drop(&mdy),
        drop(&mdx);

    /* the patch embedding (its unfold counted both ways) */
    const int64_t pb = 2, hh = 8, ww = 8, c = 3, p = 4, pd = 16, np = 4, pk = c * p * p;
    uint8_t img[2 * 8 * 8 * 3];
    for (size_t i = 0; i < sizeof img; i++)
      img[i] = (uint8_t)(urand() * 256.0);
    buf im = raw_buf(img, sizeof img), pw = rnd_buf(dt, pd * pk, -0.2, 0.2),
        pbias = rnd_buf(dt, pd, -0.1, 0.1), py = rnd_buf(dt, pb * np * pd, 0, 1),
        pdy = rnd_buf(dt, pb * np * pd, -1, 1), pdw = rnd_buf(dt, pd * pk, 0, 0.01),
        pdb = rnd_buf(dt, pd, 0, 0.01);
    snprintf(nm, sizeof nm, "patch embed forward %s", dn(dt));
    TALLY_CPU(ampc_patch_embed_forward(pb, hh, ww, c, p, pd, img, 1.0f / 127.5f, -1.0f, pw.h, dt,
                                       pbias.h, py.h, dt, AMPC_ACC_F32, NULL, NULL));
    TALLY_DEV(nm, false,
              ampc_cuda_patch_embed_forward(pb, hh, ww, c, p, pd, im.d, 1.0f / 127.5f, -1.0f, pw.d,
                                            dt, pbias.d, py.d, dt, AMPC_ACC_F32, NULL, NULL));
    snprintf(nm, sizeof nm, "patch embed backward %s", dn(dt));
    TALLY_CPU(ampc_patch_embed_backward(pb, hh, ww, c, p, pd, img, 1.0f / 127.5f, -1.0f, dt, pdy.h,
                                        dt, pdw.h, pdb.h, AMPC_ACC_F32, NULL));
    TALLY_DEV(nm, false,
              ampc_cuda_patch_embed_backward(pb, hh, ww, c, p, pd, im.d, 1.0f / 127.5f, -1.0f, dt,
                                             pdy.d, dt, pdw.d, pdb.d, AMPC_ACC_F32, NULL));
    drop(&im), drop(&pw), drop(&pbias), drop(&py), drop(&pdy), drop(&pdw), drop(&pdb);
  }
  ampc_tally_free(g_tally);
  g_tally = NULL;
}

/* the quantizers' states equal (amax bit for bit, the counters) */
static void q_equal(const char *what, const ampc_fp8_q *g, const ampc_fp8_q *c) {
  g_checked++;
  CHECK(memcmp(&g->amax, &c->amax, sizeof g->amax) == 0 && g->values == c->values &&
            g->saturated == c->saturated && g->flushed == c->flushed,
        "%s: quantizer differs: amax %g/%g, values %llu/%llu, saturated %llu/%llu, flushed "
        "%llu/%llu (gpu/cpu)",
        what, (double)g->amax, (double)c->amax, (unsigned long long)g->values,
        (unsigned long long)c->values, (unsigned long long)g->saturated,
        (unsigned long long)c->saturated, (unsigned long long)g->flushed,
        (unsigned long long)c->flushed);
}

/* the quantized values of src (rows x cols) as FP32, cast on the host */
static float *quantized(const ampc_fp8_q *q, const buf *src, int64_t rows, int64_t cols) {
  ampc_fp8_q t = *q;
  uint16_t *bits = malloc((size_t)(rows * cols) * 2);
  float *f = malloc((size_t)(rows * cols) * sizeof *f);
  OK(ampc_fp8_cast_bf16(&t, src->h, src->dt, rows, cols, cols, bits, false));
  OK(ampc_convert(f, AMPC_F32, bits, AMPC_BF16, (size_t)(rows * cols)));
  free(bits);
  return f;
}

/* The FP8 layers of fp8-mixed (ampc_cuda_fp8_cast_bf16, ampc_cuda_linear_
 * {forward,backward,dgrad}_fp8): every cast bit-equal to the CPU's, with the
 * same amax and counters (values across 40 binades, zeros, subnormals of
 * both formats, the saturation edges 448/464/465 and 57344/61440, inf and
 * NaN; three scales; a row stride); the products within the GEMM bound of
 * the quantized operands (both sides multiply the same exact FP8 values
 * with FP32 sums), the bias gradient bit-equal, every quantizer's state
 * equal after each call. */
static void test_fp8(void) {
  printf("FP8 layers (fp8-mixed):\n");
  const int64_t rows = 37, cols = 111, ld = 120;
  float *v = malloc((size_t)(rows * ld) * sizeof *v);
  for (int64_t i = 0; i < rows * ld; i++) {
    const double mag = ldexp(1.0 + urand(), (int)(urand() * 40.0) - 24);
    v[i] = (float)(urand() < 0.5 ? -mag : mag);
  }
  const float special[] = {0.0f,     -0.0f,     448.0f,    464.0f,   465.0f,     -500.0f,
                           57344.0f, 61440.0f,  -70000.0f, 0x1p-9f,  0x1p-10f,   0x1.8p-10f,
                           0x1p-16f, 0x1p-17f,  1e-30f,    INFINITY, -INFINITY,  NAN,
                           0x1p-6f,  0x1.fp-7f, 0x1p-14f,  3.0e38f,  -0x1p-149f, 1.0f};
  /* each special in its own row, inside the cast columns */
  for (size_t i = 0; i < sizeof special / sizeof *special; i++)
    v[(int64_t)i * ld + (int64_t)(i * 7) % cols] = special[i];
  const float scales[3] = {1.0f, 0.125f, 37.5f};
  for (int id = 0; id < 6; id++) {
    /* id 3..5: the same with the non-finite values made finite, so that
     * amax is a finite maximum (with +inf present it is inf whatever the
     * reduction does) */
    const ampc_dtype dt = k_dts[id % 3];
    if (id == 3)
      for (int64_t i = 0; i < rows * ld; i++)
        if (!isfinite(v[i]))
          v[i] = 0.75f;
    buf src = from_f32(dt, v, rows * ld);
    for (int fm = 0; fm < 2; fm++)
      for (int si = 0; si < 3; si++) {
        ampc_fp8_q qc = {
            fm ? AMPC_F8_E5M2 : AMPC_F8_E4M3, scales[si], 1.0f / scales[si], 0.0f, 0, 0, 0};
        ampc_fp8_q qg = qc;
        buf dst = rnd_buf(AMPC_BF16, rows * cols, 0, 0);
        OK(ampc_fp8_cast_bf16(&qc, src.h, dt, rows, cols, ld, dst.h, true));
        OK(ampc_cuda_fp8_cast_bf16(&qg, src.d, dt, rows, cols, ld, dst.d, true));
        char nm[96];
        snprintf(nm, sizeof nm, "cast %s -> %s, scale %g%s", dn(dt), fm ? "e5m2" : "e4m3",
                 (double)scales[si], id >= 3 ? ", finite" : "");
        compare(nm, &dst, NULL);
        q_equal(nm, &qg, &qc);
        drop(&dst);
      }
    drop(&src);
  }
  free(v);
  /* linear layers, the quantized copies in the context's scratch (no
   * workspace), in a device workspace of ampc_linear_fp8_ws_bytes, and with
   * one too small (back to the scratch) */
  const int64_t m = 70, k = 48, n = 40;
  for (int iw = 0; iw < 6; iw++) {
    const ampc_dtype dt = k_dts[1 + iw % 2];
    const int wsmode = iw / 2;
    ampc_scratch dws = {NULL, 0};
    if (wsmode > 0) {
      dws.bytes = wsmode == 1 ? ampc_linear_fp8_ws_bytes(m, k, n) : 64;
      OK(ampc_cuda_malloc(g_ctx, dws.bytes, &dws.base));
    }
    ampc_linear_fp8 fc, fg;
    ampc_linear_fp8_init(&fc, NULL);
    fc.x.scale = 4.0f, fc.x.scale_inv = 0.25f, fc.w.scale = 16.0f, fc.w.scale_inv = 0.0625f;
    fc.dy.scale = 1024.0f, fc.dy.scale_inv = 0x1p-10f;
    fg = fc;
    fg.ws = wsmode > 0 ? &dws : NULL;
    printf("  (%s)\n", wsmode == 0   ? "no workspace"
                       : wsmode == 1 ? "a device workspace"
                                     : "a workspace too small");
    buf x = rnd_buf(dt, m * k, -2, 2), w = rnd_buf(dt, n * k, -0.3, 0.3),
        bias = rnd_buf(dt, n, -1, 1), y = rnd_buf(dt, m * n, 0, 1);
    char nm[96];
    OK(ampc_linear_forward_fp8(m, k, n, x.h, dt, w.h, dt, bias.h, y.h, dt, AMPC_ACC_F32, &fc,
                               NULL));
    OK(ampc_cuda_linear_forward_fp8(m, k, n, x.d, dt, w.d, dt, bias.d, y.d, dt, AMPC_ACC_F32, &fg,
                                    NULL));
    float *xq = quantized(&fc.x, &x, m, k), *wq = quantized(&fc.w, &w, n, k);
    float *yf = host_f32(&y), *bf = host_f32(&bias), *bb = malloc((size_t)(m * n) * sizeof *bb);
    for (int64_t i = 0; i < m * n; i++)
      bb[i] = bf[i % n];
    double *tol = gemm_tol(m, n, k, xq, k, 1, wq, 1, k, (double)(fc.x.scale_inv * fc.w.scale_inv),
                           bb, yf, dt);
    snprintf(nm, sizeof nm, "linear fp8 forward %s", dn(dt));
    compare(nm, &y, tol);
    q_equal("fp8 forward x", &fg.x, &fc.x);
    q_equal("fp8 forward w", &fg.w, &fc.w);
    free(tol);
    /* backward: dx, dW += , db += (from the unquantized dy) */
    buf dy = rnd_buf(dt, m * n, -1e-3, 1e-3), dx = rnd_buf(dt, m * k, 0, 1),
        dw = rnd_buf(dt, n * k, -0.01, 0.01), db = rnd_buf(dt, n, -0.01, 0.01);
    float *dw0 = host_f32(&dw), *db0 = host_f32(&db);
    OK(ampc_linear_backward_fp8(m, k, n, dy.h, dt, x.h, dt, w.h, dt, dx.h, dw.h, db.h, AMPC_ACC_F32,
                                &fc, NULL));
    OK(ampc_cuda_linear_backward_fp8(m, k, n, dy.d, dt, x.d, dt, w.d, dt, dx.d, dw.d, db.d,
                                     AMPC_ACC_F32, &fg, NULL));
    float *dyq = quantized(&fc.dy, &dy, m, n), *dxf = host_f32(&dx), *dwf = host_f32(&dw);
    tol = gemm_tol(m, k, n, dyq, n, 1, wq, k, 1, (double)(fc.dy.scale_inv * fc.w.scale_inv), NULL,
                   dxf, dt);
    snprintf(nm, sizeof nm, "linear fp8 dx %s", dn(dt));
    compare(nm, &dx, tol);
    free(tol);
    tol = gemm_tol(n, k, m, dyq, 1, n, xq, k, 1, (double)(fc.dy.scale_inv * fc.x.scale_inv), dw0,
                   dwf, dt);
    snprintf(nm, sizeof nm, "linear fp8 dW += %s", dn(dt));
    compare(nm, &dw, tol);
    free(tol);
    float *dyu = host_f32(&dy); /* db is from the unquantized dy */
    tol = colsum_tol(m, n, dyu, db0, &db);
    snprintf(nm, sizeof nm, "linear fp8 db += %s", dn(dt));
    compare(nm, &db, tol);
    free(tol), free(dyu), free(db0);
    q_equal("fp8 backward dy", &fg.dy, &fc.dy);
    q_equal("fp8 backward w", &fg.w, &fc.w);
    q_equal("fp8 backward x", &fg.x, &fc.x);
    /* the input-gradient product alone, into FP32 with beta = 1 */
    buf c = rnd_buf(AMPC_F32, m * k, -1, 1);
    float *c0 = host_f32(&c);
    OK(ampc_linear_dgrad_fp8(m, k, n, dy.h, dt, w.h, dt, 1.0f, c.h, AMPC_F32, AMPC_ACC_F32, &fc,
                             true));
    OK(ampc_cuda_linear_dgrad_fp8(m, k, n, dy.d, dt, w.d, dt, 1.0f, c.d, AMPC_F32, AMPC_ACC_F32,
                                  &fg, true));
    float *cf = host_f32(&c);
    tol = gemm_tol(m, k, n, dyq, n, 1, wq, k, 1, (double)(fc.dy.scale_inv * fc.w.scale_inv), c0, cf,
                   AMPC_F32);
    compare("linear fp8 dgrad -> f32, beta 1", &c, tol);
    q_equal("fp8 dgrad dy", &fg.dy, &fc.dy);
    free(tol), free(c0), free(cf);
    free(xq), free(wq), free(yf), free(bf), free(bb), free(dw0), free(dyq), free(dxf), free(dwf);
    drop(&x), drop(&w), drop(&bias), drop(&y), drop(&dy), drop(&dx), drop(&dw), drop(&db), drop(&c);
    if (dws.base)
      ampc_cuda_free(g_ctx, dws.base);
  }
  /* the attention layer with FP8 projections (the CPU's composition over
   * the GPU's FP8 linear layers). The projections of the layer's own inputs
   * cast the same values on both sides: their quantizers' amax and counts
   * must be equal; the output projection casts the attention output, which
   * the two sides compute in different orders (an ulp of bfloat16 apart,
   * which may move an FP8 value by an FP8 ulp): its amax within 2^-7
   * relative, and the output within a loose normwise bound of two E4M3
   * roundings per operand (2 x 2 x 2^-4 of max |y|): a plumbing check */
  {
    const int64_t b = 3, tq = 11, h = 4, dm = 64;
    const ampc_dtype adt = AMPC_BF16;
    buf xq = rnd_buf(adt, b * tq * dm, -1, 1), W[4], B[4];
    for (int i = 0; i < 4; i++)
      W[i] = rnd_buf(adt, dm * dm, -0.2, 0.2), B[i] = rnd_buf(adt, dm, -0.1, 0.1);
    buf cq = rnd_buf(adt, b * tq * dm, 0, 1), ck = rnd_buf(adt, b * tq * dm, 0, 1),
        cv = rnd_buf(adt, b * tq * dm, 0, 1), co = rnd_buf(adt, b * tq * dm, 0, 1),
        cs = rnd_buf(AMPC_F32, b * h * tq * tq, 0, 1),
        cp = rnd_buf(AMPC_F32, b * h * tq * tq, 0, 1);
    const ampc_mha_cache hc = {cq.h, ck.h, cv.h, co.h, cs.h, cp.h, false, NULL, AMPC_F32};
    const ampc_mha_cache dc = {cq.d, ck.d, cv.d, co.d, cs.d, cp.d, false, NULL, AMPC_F32};
    ampc_linear_fp8 qc[4], qg[4];
    ampc_linear_fp8 *pc[4], *pg[4];
    for (int i = 0; i < 4; i++) {
      ampc_linear_fp8_init(&qc[i], NULL);
      qc[i].x.scale = 8.0f, qc[i].x.scale_inv = 0.125f, qc[i].w.scale = 64.0f;
      qc[i].w.scale_inv = 1.0f / 64.0f;
      qg[i] = qc[i], pc[i] = &qc[i], pg[i] = &qg[i];
    }
    buf y = rnd_buf(adt, b * tq * dm, 0, 1);
    OK(ampc_mha_forward(b, tq, tq, dm, h, xq.h, xq.h, adt, W[0].h, B[0].h, W[1].h, B[1].h, W[2].h,
                        B[2].h, W[3].h, B[3].h, adt, NULL, &hc, AMPC_F32, y.h, AMPC_ACC_F32, pc,
                        NULL));
    OK(ampc_cuda_mha_forward(b, tq, tq, dm, h, xq.d, xq.d, adt, W[0].d, B[0].d, W[1].d, B[1].d,
                             W[2].d, B[2].d, W[3].d, B[3].d, adt, NULL, &dc, AMPC_F32, y.d,
                             AMPC_ACC_F32, pg, NULL));
    float *yf = host_f32(&y);
    double mx = 0.0;
    for (int64_t i = 0; i < y.n; i++)
      mx = fmax(mx, fabs((double)yf[i]));
    double *tol = malloc((size_t)y.n * sizeof *tol);
    for (int64_t i = 0; i < y.n; i++)
      tol[i] = 4.0 * 0x1p-4 * mx;
    compare("mha self forward bf16, FP8 projections", &y, tol);
    for (int i = 0; i < 3; i++) {
      q_equal("mha fp8 projection x", &qg[i].x, &qc[i].x);
      q_equal("mha fp8 projection w", &qg[i].w, &qc[i].w);
    }
    q_equal("mha fp8 output projection w", &qg[3].w, &qc[3].w);
    g_checked++;
    CHECK(fabs((double)qg[3].x.amax - (double)qc[3].x.amax) <= 0x1p-7 * (double)qc[3].x.amax &&
              qg[3].x.values == qc[3].x.values,
          "mha fp8 output projection x: amax %g, %g on the CPU", (double)qg[3].x.amax,
          (double)qc[3].x.amax);
    free(yf), free(tol);
    drop(&xq), drop(&y), drop(&cq), drop(&ck), drop(&cv), drop(&co), drop(&cs), drop(&cp);
    for (int i = 0; i < 4; i++)
      drop(&W[i]), drop(&B[i]);
  }
}

/* The FP16-accumulation ablation on the GPU (ampc_cuda_gemm_strided_batched
 * with AMPC_ACC_F16): with ampc_cuda_set_acc16_exact(true) every operand mix
 * gives the CPU's bits (s <- fp16(a b + s) in K order, the FP32 epilogue) and
 * the tally's counts; by default F16 x F16 products run on COMPUTE_16F,
 * within (K + 3) 2^-11 sum |ab| (the bound of binary16 sums in any order)
 * plus the output rounding. The sum of 4096 ones in FP16 stops at 2048
 * (2048 + 1 is a tie, rounded to even): the exact kernel gives 2048; what
 * the Tensor Cores give is printed. */
static void test_acc16(void) {
  printf("FP16 accumulation (the ablation):\n");
  typedef struct {
    ampc_op opa, opb;
    ampc_dtype adt, bdt, cdt;
    int64_t m, n, k, batch;
    float alpha, beta;
  } cfg;
  static const cfg cs[] = {
      {AMPC_OP_N, AMPC_OP_T, AMPC_F16, AMPC_F16, AMPC_F16, 37, 29, 300, 1, 1.0f, 0.0f},
      {AMPC_OP_N, AMPC_OP_T, AMPC_F16, AMPC_F16, AMPC_F32, 37, 29, 300, 2, 0.25f, 1.0f},
      {AMPC_OP_T, AMPC_OP_N, AMPC_F32, AMPC_F16, AMPC_F16, 21, 18, 77, 3, 0.125f, 1.0f},
      {AMPC_OP_N, AMPC_OP_N, AMPC_F32, AMPC_F16, AMPC_F32, 16, 40, 64, 1, 1.0f, 0.0f},
      {AMPC_OP_T, AMPC_OP_T, AMPC_BF16, AMPC_BF16, AMPC_BF16, 19, 23, 130, 2, 1.0f, 0.5f},
      {AMPC_OP_N, AMPC_OP_N, AMPC_F16, AMPC_F16, AMPC_BF16, 8, 8, 50, 1, 0.0f, 1.0f},
  };
  g_tally = ampc_tally_create();
  if (!g_tally)
    exit(1);
  for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++) {
    const cfg *q = &cs[ci];
    const int64_t ar = q->opa == AMPC_OP_N ? q->m : q->k, ac = q->opa == AMPC_OP_N ? q->k : q->m;
    const int64_t br = q->opb == AMPC_OP_N ? q->k : q->n, bc = q->opb == AMPC_OP_N ? q->n : q->k;
    const int64_t lda = ac + 3, ldb = bc + 1, ldc = q->n + 2; /* padded rows */
    const int64_t sa = ar * lda + 5, sb = br * ldb, sc = q->m * ldc + 7;
    buf a = rnd_buf(q->adt, q->batch * sa, -1, 1), b = rnd_buf(q->bdt, q->batch * sb, -1, 1),
        c = rnd_buf(q->cdt, q->batch * sc, -1, 1);
    float *c0 = host_f32(&c); /* C before: beta reads it */
    char nm[120];
    snprintf(nm, sizeof nm, "acc16 %s%s %s x %s -> %s, batch %d, alpha %g beta %g",
             q->opa == AMPC_OP_N ? "N" : "T", q->opb == AMPC_OP_N ? "N" : "T", dn(q->adt),
             dn(q->bdt), dn(q->cdt), (int)q->batch, (double)q->alpha, (double)q->beta);
    TALLY_CPU(ampc_gemm_strided_batched(q->opa, q->opb, q->m, q->n, q->k, q->alpha, a.h, q->adt,
                                        lda, sa, b.h, q->bdt, ldb, sb, q->beta, c.h, q->cdt, ldc,
                                        sc, q->batch, AMPC_ACC_F16));
    ampc_cuda_set_acc16_exact(true);
    TALLY_DEV(nm, true,
              ampc_cuda_gemm_strided_batched(q->opa, q->opb, q->m, q->n, q->k, q->alpha, a.d,
                                             q->adt, lda, sa, b.d, q->bdt, ldb, sb, q->beta, c.d,
                                             q->cdt, ldc, sc, q->batch, AMPC_ACC_F16));
    compare(nm, &c, NULL);
    ampc_cuda_set_acc16_exact(false);
    if (q->adt == AMPC_F16 && q->bdt == AMPC_F16 && q->alpha != 0.0f) { /* on COMPUTE_16F */
      buf c2 = from_f32(q->cdt, c0, q->batch * sc);
      OK(ampc_cuda_gemm_strided_batched(q->opa, q->opb, q->m, q->n, q->k, q->alpha, a.d, q->adt,
                                        lda, sa, b.d, q->bdt, ldb, sb, q->beta, c2.d, q->cdt, ldc,
                                        sc, q->batch, AMPC_ACC_F16));
      float *af = host_f32(&a), *bff = host_f32(&b), *cr = host_f32(&c);
      double *tol = calloc((size_t)(q->batch * sc), sizeof *tol);
      for (int64_t t = 0; t < q->batch; t++)
        for (int64_t i = 0; i < q->m; i++)
          for (int64_t j = 0; j < q->n; j++) {
            double sab = 0.0;
            for (int64_t p = 0; p < q->k; p++) {
              const double x = af[t * sa + (q->opa == AMPC_OP_N ? i * lda + p : p * lda + i)];
              const double y = bff[t * sb + (q->opb == AMPC_OP_N ? p * ldb + j : j * ldb + p)];
              sab += fabs(x * y);
            }
            const int64_t e = t * sc + i * ldc + j;
            /* both sides within (K + 3) 2^-11 |alpha| sum|ab| (plus alpha's
             * binary16 rounding, exact here) of the product; the outputs'
             * roundings */
            tol[e] = 2 * ((double)(q->k + 3) * 0x1p-11 * fabs((double)q->alpha) * sab) +
                     2 * (ulp_rel(q->cdt) * fabs((double)cr[e]) + ulp_min(q->cdt)) +
                     fabs((double)q->beta * (double)c0[e]) * 0x1p-10;
          }
      memcpy(c2.h, c.h, c.bytes); /* the CPU's result as the reference */
      char nm2[140];
      snprintf(nm2, sizeof nm2, "%s, COMPUTE_16F", nm);
      compare(nm2, &c2, tol);
      free(af), free(bff), free(cr), free(tol);
      drop(&c2);
    }
    free(c0);
    drop(&a), drop(&b), drop(&c);
  }
  ampc_tally_free(g_tally);
  g_tally = NULL;
  /* the sum of 4096 ones */
  const int64_t k = 4096;
  float *ones = malloc((size_t)k * sizeof *ones);
  for (int64_t i = 0; i < k; i++)
    ones[i] = 1.0f;
  buf a1 = from_f32(AMPC_F16, ones, k), b1 = from_f32(AMPC_F16, ones, k);
  buf s1 = rnd_buf(AMPC_F32, 1, 0, 0);
  ampc_cuda_set_acc16_exact(true);
  OK(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, 1, 1, k, 1.0f, a1.d, AMPC_F16, k, 0, b1.d,
                                    AMPC_F16, 1, 0, 0.0f, s1.d, AMPC_F32, 1, 0, 1, AMPC_ACC_F16));
  float *v = down_f32(&s1);
  CHECK(v[0] == 2048.0f, "4096 ones summed in FP16 (exact kernel): %g, not 2048", (double)v[0]);
  free(v);
  ampc_cuda_set_acc16_exact(false);
  OK(ampc_cuda_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, 1, 1, k, 1.0f, a1.d, AMPC_F16, k, 0, b1.d,
                                    AMPC_F16, 1, 0, 0.0f, s1.d, AMPC_F32, 1, 0, 1, AMPC_ACC_F16));
  v = down_f32(&s1);
  printf("  4096 ones summed with FP16 accumulation: %g exact kernel 2048, COMPUTE_16F %g\n",
         2048.0, (double)v[0]);
  CHECK(v[0] >= 2048.0f && v[0] <= 4096.0f, "4096 ones on COMPUTE_16F: %g", (double)v[0]);
  free(v), free(ones);
  drop(&a1), drop(&b1), drop(&s1);
}

/* the trainer's FP32 staging: (first ? 0 : stage) + widen(g) * inv, the
 * CPU's formula (one product, one sum), bit for bit */
static void test_stage(void) {
#ifndef AMPC_TEST_ON_CPU
  printf("FP32 gradient staging:\n");
  const int64_t n = 3001;
  for (int id = 0; id < 3; id++) {
    const ampc_dtype dt = k_dts[id];
    buf g = rnd_buf(dt, n, -3, 3), st = rnd_buf(AMPC_F32, n, 0, 0);
    float *gf = host_f32(&g), *ref = malloc((size_t)n * sizeof *ref);
    const float invs[3] = {1.0f, 0x1p-10f, 0.3f};
    for (int k = 0; k < 3; k++) {
      OK(ampc_cuda_stage_f32(n, g.d, dt, invs[k], k == 0, st.d));
      for (int64_t i = 0; i < n; i++) {
        const float v = invs[k] == 1.0f ? gf[i] : gf[i] * invs[k];
        ref[i] = k == 0 ? v : ref[i] + v;
      }
    }
    memcpy(st.h, ref, (size_t)n * sizeof *ref);
    char nm[64];
    snprintf(nm, sizeof nm, "stage f32 += %s * inv", dn(dt));
    compare(nm, &st, NULL);
    free(gf), free(ref);
    drop(&g), drop(&st);
  }
  /* host-to-device copies staged in pinned memory and queued without
   * waiting: the source reused at once, the 4 MiB staging buffer wrapped
   * (40 copies of 200 kB), one copy over the 1 MiB staging limit */
  enum { NC = 40, CB = 200000 };
  unsigned char *src = malloc(2 << 20), *back = malloc(2 << 20);
  void *d[NC + 1];
  for (int i = 0; i <= NC; i++)
    OK(ampc_cuda_malloc(g_ctx, i < NC ? CB : 2 << 20, &d[i]));
  for (int i = 0; i <= NC; i++) {
    const size_t nb = i < NC ? CB : 2 << 20;
    for (size_t j = 0; j < nb; j++)
      src[j] = (unsigned char)(i * 7 + j * 13);
    OK(ampc_cuda_to_device(g_ctx, d[i], src, nb));
    memset(src, 0xAB, nb); /* the copy must have read src already */
  }
  int64_t bad = 0;
  for (int i = 0; i <= NC; i++) {
    const size_t nb = i < NC ? CB : 2 << 20;
    OK(ampc_cuda_to_host(g_ctx, back, d[i], nb));
    for (size_t j = 0; j < nb; j++)
      bad += back[j] != (unsigned char)(i * 7 + j * 13);
    ampc_cuda_free(g_ctx, d[i]);
  }
  CHECK(bad == 0, "staged host-to-device copies: %lld bytes wrong", (long long)bad);
  printf("  %d staged copies (8 MB through a 4 MiB pinned buffer) and one of 2 MiB: %s\n", NC,
         bad ? "WRONG" : "bit-equal");
  free(src), free(back);
#endif
}

/* ---- the typed kernels (ampc_cuda_set_typed_kernels) --------------------------
 * The same call with the generic kernels, then with the typed ones, on the
 * same inputs, for the presets' dtype combinations: bit-equal outputs and
 * equal rounding counts (the typed kernels are the same operations in the
 * same order). Shapes reach each typed path and its edges: layer norm's
 * rows of 512 (16 per lane) and 640 (32 per lane) and of 3000 (generic),
 * row counts not a multiple of 8 or 32; GELU's table window (2^20 values
 * or more); a linear layer's bias rounded with its product (16-bit y). */

/* the device copy of b into its host copy: the reference of the next call */
static void snap(buf *b) { OK(ampc_cuda_to_host(g_ctx, b->h, b->d, b->bytes)); }

/* that the call since the count n0 launched a typed kernel (ran == true) or
 * none (false): a dtype list that stopped matching would otherwise fall
 * back to the generic kernel unseen (not in the harness: no kernels) */
static void typed_ran(const char *what, long long n0, bool ran) {
#ifdef AMPC_TEST_ON_CPU
  (void)what, (void)n0, (void)ran;
#else
  const long long n = ampc_cuda_typed_launches();
  CHECK((n > n0) == ran, "%s: %s typed kernel ran (%lld launches before, %lld after)", what,
        ran ? "no" : "a", n0, n);
#endif
}

/* the sums over rows grouped by index, typed against generic: the
 * embedding's token gradients, one id in most rows as the padding token's
 * (a group longer than the typed kernel's run of 32 rows and not a multiple
 * of it), 100 columns (not a multiple of a warp); the scatter-add by index
 * with 150 rows (grouped first), with and without its second source, and 9
 * rows (the generic kernel); on a device an index outside [0, rows) too,
 * which neither adds anywhere (the CPU twins refuse it: not in the harness) */
static void test_typed_groups(void) {
  for (int i = 0; i < 3; i++) {
    const ampc_dtype gdt = k_dts[i];
    char nm[96];
    enum { EB = 7, ET = 23, ED = 100, EV = 40 };
    int32_t ids[EB * ET];
    for (int r = 0; r < EB * ET; r++)
      ids[r] = urand() < 0.7 ? 0 : 1 + (int32_t)(urand() * (EV - 1));
    buf idb = raw_buf(ids, sizeof ids);
    buf dy = rnd_buf(gdt, EB * ET * ED, -3000.0, 3000.0), dtok = rnd_buf(gdt, EV * ED, -1.0, 1.0),
        dpos = rnd_buf(gdt, ET * ED, -1.0, 1.0);
    void *tok0 = malloc(dtok.bytes), *pos0 = malloc(dpos.bytes);
    memcpy(tok0, dtok.h, dtok.bytes), memcpy(pos0, dpos.h, dpos.bytes);
    ampc_round_stats s0 = {0}, s1 = {0};
    ampc_cuda_set_typed_kernels(false);
    OK(ampc_cuda_embedding_backward(EB, ET, ED, idb.d, EV, dy.d, gdt, dtok.d, dpos.d, &s0, NULL));
    snap(&dtok), snap(&dpos);
    OK(ampc_cuda_to_device(g_ctx, dtok.d, tok0, dtok.bytes));
    OK(ampc_cuda_to_device(g_ctx, dpos.d, pos0, dpos.bytes));
    ampc_cuda_set_typed_kernels(true);
    long long n0 = ampc_cuda_typed_launches();
    OK(ampc_cuda_embedding_backward(EB, ET, ED, idb.d, EV, dy.d, gdt, dtok.d, dpos.d, &s1, NULL));
    snprintf(nm, sizeof nm, "typed embedding backward dtok %s", dn(gdt));
    typed_ran(nm, n0, true);
    compare(nm, &dtok, NULL);
    compare("  its dpos", &dpos, NULL);
    stats_equal(nm, &s1, &s0);
    free(tok0), free(pos0);
    drop(&idb), drop(&dy), drop(&dtok), drop(&dpos);

    enum { SR = 13, SD = 70, SL = SD + 3, SN = 150 };
    for (int k = 0; k < 3; k++) {
      const int64_t n = k == 2 ? 9 : SN;
      const bool two = k != 1;
      int32_t idx[SN];
      for (int r = 0; r < SN; r++)
        idx[r] = (int32_t)(urand() * SR);
#ifndef AMPC_TEST_ON_CPU
      idx[3] = SR + 2, idx[5] = -1;
#endif
      const ampc_dtype x2dt = k_dts[(i + 1) % 3];
      buf bi = raw_buf(idx, sizeof idx), src = rnd_buf(gdt, SN * SD, -1.0, 1.0),
          x2 = rnd_buf(x2dt, SN * SD, -1e-3, 1e-3), acc = rnd_buf(AMPC_F32, SR * SL, -1.0, 1.0);
      void *acc0 = malloc(acc.bytes);
      memcpy(acc0, acc.h, acc.bytes);
      ampc_cuda_set_typed_kernels(false);
      OK(ampc_cuda_scatter_add_rows(n, SD, bi.d, SR, src.d, gdt, two ? x2.d : NULL, x2dt, acc.d,
                                    SL));
      snap(&acc);
      OK(ampc_cuda_to_device(g_ctx, acc.d, acc0, acc.bytes));
      ampc_cuda_set_typed_kernels(true);
      n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_scatter_add_rows(n, SD, bi.d, SR, src.d, gdt, two ? x2.d : NULL, x2dt, acc.d,
                                    SL));
      snprintf(nm, sizeof nm, "typed scatter-add %lld rows of %s%s%s by index", (long long)n,
               dn(gdt), two ? " + " : "", two ? dn(x2dt) : "");
      typed_ran(nm, n0, n >= 16);
      compare(nm, &acc, NULL);
      free(acc0);
      drop(&bi), drop(&src), drop(&x2), drop(&acc);
    }
  }
}

/* the typed bias gradient (bias_grad_k): its own fixed order of FP32 sums,
 * so against the exact column sums within the GEMM bound (colsum_tol), and
 * bit-equal from one run to the next (the last block of a column tile adds
 * the row splits in split order, whatever block finishes last). Shapes: a
 * transformer layer's 4,160 x 512 (16 tiles of 64 splits), columns not a
 * multiple of 32, one split, fewer rows than a warp's lanes; dW by the way
 * (k = 1), dx not asked for. Between the two runs, a run on other values of
 * the same shape overwrites the split sums the first left in scratch (a
 * tile's last block elected too early would read those). With a rounding
 * tally bound, it counts what the generic path counts. */
static void test_typed_bias(void) {
  /* 4,160 x 512: 16 tiles of 32 splits; 2,048 x 2,050: 65 tiles (the last
   * partial) of 8; then 2 x 5, 3 x 3, 1 x 1 */
  static const int64_t shapes[][2] = {{4160, 512}, {2048, 2050}, {300, 33}, {130, 72}, {7, 5}};
  for (int i = 0; i < 3; i++)
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
      const ampc_dtype gdt = k_dts[i];
      const int64_t m = shapes[sh][0], n = shapes[sh][1];
      char nm[96];
      buf dy = rnd_buf(gdt, m * n, -1.0, 1.0), x = rnd_buf(gdt, m, -1.0, 1.0),
          w = rnd_buf(gdt, n, -1.0, 1.0), dw = rnd_buf(gdt, n, -0.1, 0.1),
          db = rnd_buf(gdt, n, -0.1, 0.1);
      void *db0 = malloc(db.bytes);
      memcpy(db0, db.h, db.bytes);
      float *dyf = host_f32(&dy), *db0f = host_f32(&db);
      OK(ampc_linear_backward(m, 1, n, dy.h, gdt, x.h, gdt, w.h, gdt, NULL, dw.h, db.h,
                              AMPC_ACC_F32, NULL));
      ampc_cuda_set_typed_kernels(true);
      long long n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_linear_backward(m, 1, n, dy.d, gdt, x.d, gdt, w.d, gdt, NULL, dw.d, db.d,
                                   AMPC_ACC_F32, NULL));
      snprintf(nm, sizeof nm, "typed bias gradient %lld x %lld %s", (long long)m, (long long)n,
               dn(gdt));
      typed_ran(nm, n0, true);
      double *tol = colsum_tol(m, n, dyf, db0f, &db);
      compare(nm, &db, tol);
      free(tol);
      snap(&db);
      buf other = rnd_buf(gdt, m * n, -2.0, 2.0);
      OK(ampc_cuda_linear_backward(m, 1, n, other.d, gdt, x.d, gdt, w.d, gdt, NULL, dw.d, db.d,
                                   AMPC_ACC_F32, NULL));
      OK(ampc_cuda_to_device(g_ctx, db.d, db0, db.bytes));
      OK(ampc_cuda_linear_backward(m, 1, n, dy.d, gdt, x.d, gdt, w.d, gdt, NULL, dw.d, db.d,
                                   AMPC_ACC_F32, NULL));
      compare("  again (another run between): the same bits", &db, NULL);
      /* counted as the generic path counts (db's n roundings, dW's n) */
      ampc_tm_stats ts[2];
      for (int typed = 0; typed < 2; typed++) {
        ampc_cuda_set_typed_kernels(typed != 0);
        OK(ampc_cuda_to_device(g_ctx, db.d, db0, db.bytes));
        ampc_tally *tl = ampc_tally_create();
        CHECK(tl != NULL, "out of memory");
        ampc_tally *was = ampc_tally_bind(tl);
        OK(ampc_cuda_linear_backward(m, 1, n, dy.d, gdt, x.d, gdt, w.d, gdt, NULL, dw.d, db.d,
                                     AMPC_ACC_F32, NULL));
        (void)ampc_tally_bind(was);
        ampc_tally_drain(tl, &ts[typed]);
        ampc_tally_free(tl);
      }
      CHECK(ts[1].r.count == ts[0].r.count && ts[1].r.count == (uint64_t)(2 * n),
            "%s: %llu roundings counted typed, %llu generic, %lld expected", nm,
            (unsigned long long)ts[1].r.count, (unsigned long long)ts[0].r.count,
            (long long)(2 * n));
      free(db0), free(dyf), free(db0f);
      drop(&dy), drop(&x), drop(&w), drop(&dw), drop(&db), drop(&other);
    }
}

/* the attention layer's head copies in the typed set (heads_multi_k,
 * unheads_multi_k: q and k in one launch, dout and v in one, q, k and dout
 * widened in one, dq, dk, dv rounded in one): the generic kernels' copies,
 * so bit-equal outputs and counts. Cross-attention shapes (tq != tk, k and
 * v packed in one buffer); the presets' dtypes, the attention cast, and
 * gradient dtypes other than the inputs' (the copies launched apart, dout
 * widened on its own). */
static void test_typed_attention(void) {
  static const ampc_dtype cfg[][4] = {
      /* xdt, gdt, pdt, mdt */
      {AMPC_F32, AMPC_F32, AMPC_F32, AMPC_F32},     {AMPC_F16, AMPC_F16, AMPC_F32, AMPC_F32},
      {AMPC_F16, AMPC_F16, AMPC_F32, AMPC_F16},     {AMPC_BF16, AMPC_BF16, AMPC_F32, AMPC_F32},
      {AMPC_BF16, AMPC_BF16, AMPC_BF16, AMPC_BF16}, {AMPC_F16, AMPC_F32, AMPC_F32, AMPC_F32},
      {AMPC_F32, AMPC_F16, AMPC_F32, AMPC_F32}};
  const int64_t b = 3, tq = 5, tk = 9, h = 2, dh = 16, dm = h * dh;
  for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
    const ampc_dtype xdt = cfg[ci][0], gdt = cfg[ci][1], pdt = cfg[ci][2], mdt = cfg[ci][3];
    const size_t xs = ampc_dtype_size(xdt);
    char nm[96];
    buf q = rnd_buf(xdt, b * tq * dm, -1, 1), kv = rnd_buf(xdt, b * tk * 2 * dm, -1, 1),
        sc = rnd_buf(pdt, b * h * tq * tk, 0, 1), pr = rnd_buf(pdt, b * h * tq * tk, 0, 1),
        out = rnd_buf(xdt, b * tq * dm, 0, 1), dout = rnd_buf(gdt, b * tq * dm, -1, 1),
        dq = rnd_buf(gdt, b * tq * dm, 0, 1), dk = rnd_buf(gdt, b * tk * dm, 0, 1),
        dv = rnd_buf(gdt, b * tk * dm, 0, 1);
    const char *kd = kv.d;
    ampc_round_stats s[2] = {{0}, {0}};
    ampc_tm_stats ts[2];
    for (int typed = 0; typed < 2; typed++) {
      ampc_cuda_set_typed_kernels(typed != 0);
      const long long n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_attention_forward_ex(b, tq, tk, h, dh, q.d, dm, kd, 2 * dm, kd + dm * xs, 2 * dm,
                                        xdt, NULL, sc.d, pdt, pr.d, pdt, mdt, out.d, dm, xdt,
                                        AMPC_ACC_F32, &s[typed]));
      ampc_tally *tl = ampc_tally_create();
      CHECK(tl != NULL, "out of memory");
      ampc_tally *was = ampc_tally_bind(tl);
      OK(ampc_cuda_attention_backward_ex(b, tq, tk, h, dh, q.d, dm, kd, 2 * dm, kd + dm * xs,
                                         2 * dm, xdt, pr.d, pdt, mdt, dout.d, dm, gdt, dq.d, dm,
                                         dk.d, dm, dv.d, dm, AMPC_ACC_F32, NULL));
      (void)ampc_tally_bind(was);
      ampc_tally_drain(tl, &ts[typed]);
      ampc_tally_free(tl);
      snprintf(nm, sizeof nm, "typed attention x %s, grads %s, P %s%s", dn(xdt), dn(gdt), dn(pdt),
               mdt != AMPC_F32 && mdt != pdt ? ", cast" : "");
      if (typed) {
        typed_ran(nm, n0, true);
        compare(nm, &out, NULL);
        compare("  its probabilities", &pr, NULL);
        compare("  dq", &dq, NULL);
        compare("  dk", &dk, NULL);
        compare("  dv", &dv, NULL);
        stats_equal(nm, &s[1], &s[0]);
        CHECK(ts[1].r.count == ts[0].r.count && ts[1].r.overflow == ts[0].r.overflow &&
                  ts[1].r.underflow == ts[0].r.underflow,
              "%s: the backward pass counted %llu roundings typed, %llu generic", nm,
              (unsigned long long)ts[1].r.count, (unsigned long long)ts[0].r.count);
      } else
        snap(&out), snap(&pr), snap(&dq), snap(&dk), snap(&dv);
    }
    drop(&q), drop(&kv), drop(&sc), drop(&pr), drop(&out), drop(&dout), drop(&dq), drop(&dk),
        drop(&dv);
  }
}

static void test_typed(void) {
  printf("typed kernels against the generic ones:\n");
  /* (stream, parameter, activation) as DTS_PRESETS (src/backend/cuda/cuda_common.cuh) */
  static const ampc_dtype pre[5][3] = {{AMPC_F32, AMPC_F32, AMPC_F32},
                                       {AMPC_F32, AMPC_F16, AMPC_F16},
                                       {AMPC_F32, AMPC_BF16, AMPC_BF16},
                                       {AMPC_F16, AMPC_F16, AMPC_F16},
                                       {AMPC_BF16, AMPC_BF16, AMPC_BF16}};
  /* 16 per lane: 512, 100 (partial lanes); 32 per lane: 640, 1000, 1024;
   * 3000: the generic kernels */
  static const int64_t ln_shapes[6][2] = {{300, 512}, {41, 100}, {37, 640},
                                          {19, 1000}, {9, 1024}, {5, 3000}};
  for (int p = 0; p < 5; p++) {
    const ampc_dtype sdt = pre[p][0], wdt = pre[p][1], adt = pre[p][2];
    char nm[96];
    ampc_round_stats s0 = {0}, s1 = {0};
    /* residual add: stream + activation -> stream, and gradients */
    {
      const int64_t n = 70001;
      buf a = rnd_buf(sdt, n, -70000.0, 70000.0), b = rnd_buf(adt, n, -3.0, 3.0),
          y = rnd_buf(sdt, n, 0, 1);
      ampc_cuda_set_typed_kernels(false);
      OK(ampc_cuda_add_forward(n, a.d, sdt, b.d, adt, y.d, sdt, &s0));
      snap(&y);
      ampc_cuda_set_typed_kernels(true);
      long long n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_add_forward(n, a.d, sdt, b.d, adt, y.d, sdt, &s1));
      snprintf(nm, sizeof nm, "typed add %s + %s", dn(sdt), dn(adt));
      typed_ran(nm, n0, true);
      compare(nm, &y, NULL);
      stats_equal(nm, &s1, &s0);
      drop(&a), drop(&b), drop(&y);
    }
    /* layer norm forward (stream -> activation) and backward (gradients in adt) */
    for (int sh = 0; sh < 6; sh++) {
      const int64_t m = ln_shapes[sh][0], d = ln_shapes[sh][1];
      buf x = rnd_buf(sdt, m * d, -3.0, 5.0), gam = rnd_buf(wdt, d, 0.5, 1.5),
          bet = rnd_buf(wdt, d, -0.5, 0.5), y = rnd_buf(adt, m * d, 0, 1),
          mean = rnd_buf(AMPC_F32, m, 0, 1), rstd = rnd_buf(AMPC_F32, m, 0, 1);
      memset(&s0, 0, sizeof s0), memset(&s1, 0, sizeof s1);
      ampc_cuda_set_typed_kernels(false);
      OK(ampc_cuda_layernorm_forward(m, d, x.d, sdt, gam.d, bet.d, wdt, 1e-5f, y.d, adt, mean.d,
                                     rstd.d, &s0));
      snap(&y), snap(&mean), snap(&rstd);
      ampc_cuda_set_typed_kernels(true);
      long long n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_layernorm_forward(m, d, x.d, sdt, gam.d, bet.d, wdt, 1e-5f, y.d, adt, mean.d,
                                     rstd.d, &s1));
      snprintf(nm, sizeof nm, "typed ln %lldx%lld %s -> %s", (long long)m, (long long)d, dn(sdt),
               dn(adt));
      typed_ran(nm, n0, d <= 1024);
      compare(nm, &y, NULL);
      compare("  its mean", &mean, NULL);
      compare("  its rstd", &rstd, NULL);
      stats_equal(nm, &s1, &s0);
      buf dy = rnd_buf(adt, m * d, -1.0, 1.0), dx = rnd_buf(adt, m * d, 0, 1),
          dg = rnd_buf(adt, d, -0.1, 0.1), db = rnd_buf(adt, d, -0.1, 0.1);
      void *dg0 = malloc(dg.bytes), *db0 = malloc(db.bytes);
      memcpy(dg0, dg.h, dg.bytes), memcpy(db0, db.h, db.bytes);
      ampc_cuda_set_typed_kernels(false);
      OK(ampc_cuda_layernorm_backward(m, d, dy.d, adt, x.d, sdt, gam.d, wdt, mean.d, rstd.d, dx.d,
                                      dg.d, db.d, NULL));
      snap(&dx), snap(&dg), snap(&db);
      OK(ampc_cuda_to_device(g_ctx, dg.d, dg0, dg.bytes)); /* the accumulated-into start again */
      OK(ampc_cuda_to_device(g_ctx, db.d, db0, db.bytes));
      ampc_cuda_set_typed_kernels(true);
      n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_layernorm_backward(m, d, dy.d, adt, x.d, sdt, gam.d, wdt, mean.d, rstd.d, dx.d,
                                      dg.d, db.d, NULL));
      snprintf(nm, sizeof nm, "typed ln backward %lldx%lld dx %s", (long long)m, (long long)d,
               dn(adt));
      typed_ran(nm, n0, true); /* the parameter sums at least */
      compare(nm, &dx, NULL);
      compare("  its dgamma", &dg, NULL);
      compare("  its dbeta", &db, NULL);
      if (sh == 1) { /* in place: dx is dy */
        buf io = raw_buf(dy.h, dy.bytes);
        io.dt = adt, io.n = m * d;
        OK(ampc_cuda_to_device(g_ctx, dg.d, dg0, dg.bytes));
        OK(ampc_cuda_to_device(g_ctx, db.d, db0, db.bytes));
        ampc_cuda_set_typed_kernels(false);
        OK(ampc_cuda_layernorm_backward(m, d, io.d, adt, x.d, sdt, gam.d, wdt, mean.d, rstd.d, io.d,
                                        dg.d, db.d, NULL));
        snap(&io);
        OK(ampc_cuda_to_device(g_ctx, io.d, dy.h, dy.bytes));
        OK(ampc_cuda_to_device(g_ctx, dg.d, dg0, dg.bytes));
        OK(ampc_cuda_to_device(g_ctx, db.d, db0, db.bytes));
        ampc_cuda_set_typed_kernels(true);
        OK(ampc_cuda_layernorm_backward(m, d, io.d, adt, x.d, sdt, gam.d, wdt, mean.d, rstd.d, io.d,
                                        dg.d, db.d, NULL));
        compare("  in place (dx = dy)", &io, NULL);
        drop(&io);
      }
      free(dg0), free(db0);
      drop(&x), drop(&gam), drop(&bet), drop(&y), drop(&mean), drop(&rstd);
      drop(&dy), drop(&dx), drop(&dg), drop(&db);
    }
    if (adt == AMPC_F32 && sdt == AMPC_F32)
      continue; /* the rest is 16-bit: GELU's table, a bias rounded into 16 bits */
    /* GELU forward and backward on the table window */
    {
      const int64_t n = (1 << 20) + 3;
      buf x = rnd_buf(adt, n, -9.0, 9.0), y = rnd_buf(adt, n, 0, 1),
          dy = rnd_buf(adt, n, -1.0, 1.0), dx = rnd_buf(adt, n, 0, 1);
      memset(&s0, 0, sizeof s0), memset(&s1, 0, sizeof s1);
      ampc_cuda_set_typed_kernels(false);
      OK(ampc_cuda_gelu_forward(n, x.d, adt, y.d, adt, &s0));
      OK(ampc_cuda_gelu_backward(n, dy.d, adt, x.d, adt, dx.d));
      snap(&y), snap(&dx);
      ampc_cuda_set_typed_kernels(true);
      long long n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_gelu_forward(n, x.d, adt, y.d, adt, &s1));
      snprintf(nm, sizeof nm, "typed gelu %s", dn(adt));
      typed_ran(nm, n0, true);
      n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_gelu_backward(n, dy.d, adt, x.d, adt, dx.d));
      typed_ran("  its derivative", n0, true);
      compare(nm, &y, NULL);
      stats_equal(nm, &s1, &s0);
      compare("  its derivative", &dx, NULL);
      drop(&x), drop(&y), drop(&dy), drop(&dx);
    }
    /* a linear layer with its bias into a 16-bit y */
    {
      const int64_t m = 300, k = 64, n = 384;
      buf x = rnd_buf(adt, m * k, -1.0, 1.0), w = rnd_buf(wdt, n * k, -0.2, 0.2),
          b = rnd_buf(wdt, n, -1.0, 1.0), y = rnd_buf(adt, m * n, 0, 1);
      ampc_cuda_set_typed_kernels(false);
      OK(ampc_cuda_linear_forward(m, k, n, x.d, adt, w.d, wdt, b.d, y.d, adt, AMPC_ACC_F32, NULL));
      snap(&y);
      ampc_cuda_set_typed_kernels(true);
      const long long n0 = ampc_cuda_typed_launches();
      OK(ampc_cuda_linear_forward(m, k, n, x.d, adt, w.d, wdt, b.d, y.d, adt, AMPC_ACC_F32, NULL));
      snprintf(nm, sizeof nm, "typed linear + bias -> %s", dn(adt));
      typed_ran(nm, n0, true);
      compare(nm, &y, NULL);
      drop(&x), drop(&w), drop(&b), drop(&y);
    }
  }
  test_typed_groups();
  test_typed_bias();
  test_typed_attention();
  ampc_cuda_set_typed_kernels(false);
}

static void run_all(void) {
  test_elementwise();
  test_layernorm();
  test_softmax();
  test_rows();
  test_linear();
  test_fused_layers();
  test_attention();
  test_mha();
  test_mha_recompute();
  test_patch_and_losses();
  test_unscale();
  test_optim();
  test_model_rows();
  test_tally();
  test_acc16();
  test_fp8();
  test_stage();
  test_typed();
}

int main(void) {
#ifdef AMPC_TEST_ON_CPU
  static int fake_device;
  g_ctx = (ampc_cuda_ctx *)&fake_device; /* never dereferenced: the copies are memcpy */
  printf("harness self-check: the CPU twins on both sides\n");
  run_all();
  printf("test_cuda_nn_harness: %lld values compared: %s\n", (long long)g_checked,
         g_fail ? "FAILED" : "all checks passed");
  return g_fail;
#else
  test_host_checks();
  if (g_fail)
    return 1;
  if (ampc_cuda_device_count() == 0) {
    printf("SKIP test_cuda_nn (GPU part): no CUDA device (%s)\n", ampc_cuda_unavailable_reason());
    return 77;
  }
  ampc_cuda_device_info info;
  OK(ampc_cuda_device_info_get(0, &info));
  printf("device 0: %s, compute capability %d.%d\n", info.name, info.cc_major, info.cc_minor);
  OK(ampc_cuda_create(0, 0, &g_ctx));
  CHECK(ampc_cuda_bind(g_ctx) == NULL, "a context was bound before");
  /* AMPC_TEST_ONLY=typed: the typed kernels' own checks alone (check.sh runs
   * them under compute-sanitizer's racecheck and memcheck, where the whole
   * file would take too long) */
  const char *only = getenv("AMPC_TEST_ONLY");
  if (only && strcmp(only, "typed") == 0) {
    test_typed();
    ampc_cuda_destroy(g_ctx);
    printf("test_cuda_nn (typed checks only): %lld values compared: %s\n", (long long)g_checked,
           g_fail ? "FAILED" : "all checks passed");
    return g_fail;
  }
  run_all();
  /* every check again with the typed kernels where they apply */
  printf("again, with the typed kernels (ampc_cuda_set_typed_kernels):\n");
  ampc_cuda_set_typed_kernels(true);
  run_all();
  ampc_cuda_set_typed_kernels(false);
  ampc_cuda_destroy(g_ctx);
  CHECK(ampc_cuda_current() == NULL, "destroy left the context bound");
  printf("test_cuda_nn: %lld values compared: %s\n", (long long)g_checked,
         g_fail ? "FAILED" : "all checks passed");
  return g_fail;
#endif
}
