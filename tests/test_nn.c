/*
 * tests/test_nn.c: the layers.
 *
 * 1. Gradients against central finite differences, evaluated in double on
 *    FP32 storage: f(theta) = sum_i g_i * y_i(theta) for a fixed random g, and
 *    d f / d theta_k ~ (f(theta_k + h) - f(theta_k - h)) / (2h). Tolerance from
 *    the two error terms of a central difference: truncation h^2/6 |f'''|
 *    (inputs are O(1), so |f'''| <= C * sum|g|) and the FP32 rounding of the
 *    forward pass, 2 * (ops * 2^-24 * sum|g y|) / (2h), with ops the longest
 *    chain of FP32 operations per output (a small multiple of the reduction
 *    length). h = 2^-7.
 * 2. Edge cases: constant-row layer norm, FP16 layer norm
 *    with |x - mean| = 256, softmax of huge logits, fully masked rows, the loss
 *    backward seeded with a power-of-two loss scale being exactly S times the
 *    unscaled gradient.
 * 3. 16-bit storage against FP32 storage on the same (exactly representable)
 *    inputs: the difference is at most the output rounding, u * |y| (u = 2^-11
 *    for f16, 2^-8 for bf16), plus the FP32 computation error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "nn/gelu_impl.h"
#include "numeric/convert_impl.h"

static uint64_t g_rng = 0x853C49E6748FEA9Bu;
static float frand(void) { /* [-1, 1) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (float)((double)((g_rng * 0x2545F4914F6CDD1Du) >> 11) * 0x1p-52 - 1.0);
}
static void fill(float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    p[i] = frand();
}
static double dot(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += (double)a[i] * (double)b[i];
  return s;
}
static double sum_abs_prod(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += fabs((double)a[i] * (double)b[i]);
  return s;
}

static const double H = 0x1p-2;

/* f(theta) for the finite-difference harness */
typedef double (*objective)(void *ctx);

static double central(objective f, void *ctx, float *theta, double h) {
  const float keep = theta[0];
  theta[0] = (float)((double)keep + h);
  const double fp = f(ctx);
  theta[0] = (float)((double)keep - h);
  const double fm = f(ctx);
  theta[0] = keep;
  return (fp - fm) / (2.0 * h);
}

/* Compare the analytic gradient `an` of the objective w.r.t. the n floats at
 * `theta` with central differences D(h) = (f(x+h) - f(x-h)) / 2h extrapolated
 * twice (Richardson): R1(h) = (4 D(h/2) - D(h)) / 3 is O(h^4), and
 * R2 = (16 R1(h/2) - R1(h)) / 15 = (64 D(h/4) - 20 D(h/2) + D(h)) / 45 is
 * O(h^6). Tolerance = rounding + truncation:
 *  - rounding: if one evaluation of f is off by at most df (FP32 rounding of
 *    the forward pass; passed in from the layer's op count), D(h) is off by at
 *    most df / h, so R2 by (64*4 + 20*2 + 1) / 45 * df / h = 6.6 df / h;
 *  - truncation: estimated from the extrapolation table itself, |R2 - R1(h/2)|
 *    (the next-order term), counted twice.
 * h = 1/4, 1/8, 1/16: powers of two, so theta +- h is exact in FP32. */
static void check_fd(const char *what, objective f, void *ctx, float *theta, const float *an,
                     int64_t n, double df) {
  for (int64_t i = 0; i < n; i++) {
    const double d1 = central(f, ctx, theta + i, H), d2 = central(f, ctx, theta + i, H / 2),
                 d4 = central(f, ctx, theta + i, H / 4);
    const double r1b = (4.0 * d4 - d2) / 3.0;
    const double r2 = (64.0 * d4 - 20.0 * d2 + d1) / 45.0;
    const double tol = 6.6 * df / H + 2.0 * fabs(r2 - r1b) + 1e-9;
    if (!(fabs(r2 - (double)an[i]) <= tol))
      fail_msg("%s: d/dtheta[%lld]: analytic %.9g, finite difference %.9g, |diff| %.3g > %.3g",
               what, (long long)i, (double)an[i], r2, fabs(r2 - (double)an[i]), tol);
  }
}

/* ---- linear ---- */
typedef struct {
  int64_t m, k, n;
  float *x, *w, *b, *y, *g;
} lin_ctx;
static double lin_f(void *p) {
  lin_ctx *c = p;
  assert_int_equal(ampc_linear_forward(c->m, c->k, c->n, c->x, AMPC_F32, c->w, AMPC_F32, c->b, c->y,
                                       AMPC_F32, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  return dot(c->g, c->y, c->m * c->n);
}

static void test_linear_grad(void **state) {
  (void)state;
  lin_ctx c = {5, 7, 3, NULL, NULL, NULL, NULL, NULL};
  float x[35], w[21], b[3], y[15], g[15], dx[35], dw[21], db[3];
  c.x = x, c.w = w, c.b = b, c.y = y, c.g = g;
  fill(x, 35), fill(w, 21), fill(b, 3), fill(g, 15);
  for (int i = 0; i < 21; i++)
    dw[i] = 0.5f; /* accumulates: the result must be 0.5 + gradient */
  db[0] = db[1] = db[2] = 0.0f;
  lin_f(&c);
  assert_int_equal(ampc_linear_backward(5, 7, 3, g, AMPC_F32, x, AMPC_F32, w, AMPC_F32, dx, dw, db,
                                        AMPC_ACC_F32, NULL),
                   AMPC_OK);
  for (int i = 0; i < 21; i++)
    dw[i] -= 0.5f;
  /* each y is a K = 7 term FP32 dot product plus the bias: (K + 2) roundings */
  const double df = 9 * 0x1p-24 * (sum_abs_prod(g, y, 15) + 15.0);
  check_fd("linear dx", lin_f, &c, x, dx, 35, df); /* f is linear in each input */
  check_fd("linear dw", lin_f, &c, w, dw, 21, df);
  check_fd("linear db", lin_f, &c, b, db, 3, df);
}

/* ---- layer norm ---- */
typedef struct {
  int64_t m, d;
  float *x, *gam, *bet, *y, *g, mean[8], rstd[8];
} ln_ctx;
static double ln_f(void *p) {
  ln_ctx *c = p;
  assert_int_equal(ampc_layernorm_forward(c->m, c->d, c->x, AMPC_F32, c->gam, c->bet, AMPC_F32,
                                          1e-5f, c->y, AMPC_F32, c->mean, c->rstd, NULL),
                   AMPC_OK);
  return dot(c->g, c->y, c->m * c->d);
}

static void test_layernorm_grad(void **state) {
  (void)state;
  enum { M = 4, D = 9 };
  float x[M * D], gam[D], bet[D], y[M * D], g[M * D], dx[M * D], dg[D] = {0}, dbt[D] = {0};
  ln_ctx c = {M, D, x, gam, bet, y, g, {0}, {0}};
  fill(x, M * D), fill(gam, D), fill(bet, D), fill(g, M * D);
  ln_f(&c);
  assert_int_equal(ampc_layernorm_backward(M, D, g, AMPC_F32, x, AMPC_F32, gam, AMPC_F32, c.mean,
                                           c.rstd, dx, dg, dbt, NULL),
                   AMPC_OK);
  double sg = 0;
  for (int i = 0; i < M * D; i++)
    sg += fabs((double)g[i]);
  /* rstd of a row of U(-1,1) values is ~1.7; the third derivative of the
   * normalisation scales with rstd^3 */
  /* y = (x - mean) * rstd * gamma + beta: 4 roundings, plus the FP32 rounding
   * of the double statistics */
  const double df = 6 * 0x1p-24 * (sum_abs_prod(g, y, M * D) + sg);
  check_fd("layernorm dx", ln_f, &c, x, dx, M * D, df);
  check_fd("layernorm dgamma", ln_f, &c, gam, dg, D, df);
  check_fd("layernorm dbeta", ln_f, &c, bet, dbt, D, df);
}

/* ---- GELU ---- */
typedef struct {
  float *x, *y, *g;
  int64_t n;
} gelu_ctx;
static double gelu_f(void *p) {
  gelu_ctx *c = p;
  assert_int_equal(ampc_gelu_forward(c->n, c->x, AMPC_F32, c->y, AMPC_F32, NULL), AMPC_OK);
  return dot(c->g, c->y, c->n);
}

static void test_gelu(void **state) {
  (void)state;
  enum { N = 40 };
  float x[N], y[N], g[N], dx[N];
  gelu_ctx c = {x, y, g, N};
  for (int i = 0; i < N; i++)
    x[i] = 4.0f * frand();
  fill(g, N);
  gelu_f(&c);
  assert_int_equal(ampc_gelu_backward(N, g, AMPC_F32, x, AMPC_F32, dx), AMPC_OK);
  /* erff is within a few ulps; 0.5 * x * (1 + erf): 4 more roundings */
  check_fd("gelu dx", gelu_f, &c, x, dx, N, 8 * 0x1p-24 * (sum_abs_prod(g, y, N) + N));
  /* known values: GELU(0) = 0, GELU(1) = Phi(1) = 0.8413447460685429 */
  const float v[2] = {0.0f, 1.0f};
  float o[2];
  assert_int_equal(ampc_gelu_forward(2, v, AMPC_F32, o, AMPC_F32, NULL), AMPC_OK);
  assert_true(o[0] == 0.0f);
  assert_true(fabs((double)o[1] - 0.8413447460685429) <= 4 * 0x1p-24);
}

/* 16-bit GELU (tabulated): every one of the 65536 inputs of f16 and bf16
 * gives exactly the FP32 GELU of the widened input, forward (F32 output) and
 * backward (F32 dy = 1 and dy = 3); a NaN result only has to be a NaN */
static int same_f32(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, 4); }

static void test_gelu_16bit_exhaustive(void **state) {
  (void)state;
  enum { N = 65536 };
  uint16_t *x = malloc(N * sizeof *x);
  float *xf = malloc(N * sizeof *xf), *y = malloc(N * sizeof *y), *dy = malloc(N * sizeof *dy),
        *dx = malloc(N * sizeof *dx), *y32 = malloc(N * sizeof *y32),
        *dx32 = malloc(N * sizeof *dx32);
  assert_non_null(x), assert_non_null(xf), assert_non_null(y), assert_non_null(dy);
  assert_non_null(dx), assert_non_null(y32), assert_non_null(dx32);
  for (int i = 0; i < N; i++)
    x[i] = (uint16_t)i;
  const ampc_dtype dts[2] = {AMPC_F16, AMPC_BF16};
  for (int d = 0; d < 2; d++) {
    assert_int_equal(ampc_convert(xf, AMPC_F32, x, dts[d], N), AMPC_OK);
    assert_int_equal(ampc_gelu_forward(N, x, dts[d], y, AMPC_F32, NULL), AMPC_OK);
    assert_int_equal(ampc_gelu_forward(N, xf, AMPC_F32, y32, AMPC_F32, NULL), AMPC_OK);
    for (int rep = 0; rep < 2; rep++) {
      for (int i = 0; i < N; i++)
        dy[i] = rep ? 3.0f : 1.0f;
      assert_int_equal(ampc_gelu_backward(N, dy, AMPC_F32, x, dts[d], dx), AMPC_OK);
      assert_int_equal(ampc_gelu_backward(N, dy, AMPC_F32, xf, AMPC_F32, dx32), AMPC_OK);
      for (int i = 0; i < N; i++)
        if (!same_f32(y32[i], y[i]) || !same_f32(dx32[i], dx[i]))
          fail_msg("%s input 0x%04x: gelu %a (FP32 path %a), dx %a (FP32 path %a)",
                   d ? "bf16" : "f16", i, (double)y[i], (double)y32[i], (double)dx[i],
                   (double)dx32[i]);
    }
  }
  free(x), free(xf), free(y), free(dy), free(dx), free(y32), free(dx32);
}

/* FP32 GELU against libm's double erfc and exp: the result is the FP32
 * value nearest the exact one, up to a slack of 2^-44 relative (of |Phi| +
 * |x phi| for the backward factor, which cancels near x = -0.75) for the
 * method's and the reference's double errors (gelu_impl.h), on every 4099th
 * bit pattern, a dense sweep of [-9, 9] and the special values; and the
 * AVX2 path gives the bits of the portable one. */
static int near_rounded(float got, double ref, double scale) {
  if (isnan(ref))
    return isnan(got);
  if (isinf(ref))
    return got == (float)ref;
  const double slack = 0x1p-44 * scale + 0x1p-1074;
  const double up = (double)nextafterf(got, INFINITY), dn = (double)nextafterf(got, -INFINITY);
  const double g = (double)got;
  /* ref within half the gap to either neighbour, plus slack */
  return ref <= g + 0.5 * (up - g) + slack && ref >= g - 0.5 * (g - dn) - slack;
}

static void test_gelu_fp32_accuracy(void **state) {
  (void)state;
  enum { CAP = 1 << 21 };
  float *x = malloc(CAP * sizeof *x), *y = malloc(CAP * sizeof *y), *dx = malloc(CAP * sizeof *dx);
  float *one = malloc(CAP * sizeof *one);
  assert_true(x && y && dx && one);
  int64_t n = 0;
  for (uint64_t b = 0; b < (UINT64_C(1) << 32); b += 4099) {
    const uint32_t bits = (uint32_t)b;
    memcpy(&x[n++], &bits, 4);
  }
  for (int i = -(1 << 19); i < (1 << 19); i++)
    x[n++] = (float)i * (9.0f / (float)(1 << 19));
  const float special[] = {0.0f,       -0.0f,  INFINITY, -INFINITY,   NAN,     0x1p-149f,
                           -0x1p-149f, 1e-30f, -1e-30f,  -0.7517916f, -5.0f,   -13.5f,
                           -14.5f,     -27.0f, -30.0f,   -40.0f,      3.0e38f, -3.0e38f};
  const int64_t sp = n; /* where the special values start */
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
    x[n++] = special[i];
  assert_true(n <= CAP);
  for (int64_t i = 0; i < n; i++)
    one[i] = 1.0f;
  assert_int_equal(ampc_gelu_forward(n, x, AMPC_F32, y, AMPC_F32, NULL), AMPC_OK);
  assert_int_equal(ampc_gelu_backward(n, one, AMPC_F32, x, AMPC_F32, dx), AMPC_OK);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const double v = (double)x[i];
    const double phi = 0.5 * erfc(-v * 0x1.6a09e667f3bcdp-1);
    const double pdf = exp(-0.5 * v * v) * 0x1.9884533d43651p-2;
    const double g = v * phi, dg = phi + v * pdf;
    if (!near_rounded(y[i], g, fabs(g)) || !near_rounded(dx[i], dg, phi + fabs(v * pdf))) {
      if (bad++ < 5)
        print_message("x = %a: gelu %a (ref %a), dgelu %a (ref %a)\n", v, (double)y[i], g,
                      (double)dx[i], dg);
    }
  }
  print_message("FP32 GELU: %lld inputs checked, %lld outside half an ulp + slack\n", (long long)n,
                (long long)bad);
  assert_int_equal(bad, 0);
  /* special values as the erff formula gives them */
  assert_true(isinf(y[sp + 2]) && y[sp + 2] > 0); /* gelu(+inf) = inf */
  assert_true(isnan(y[sp + 3]) && isnan(dx[sp + 2]) && isnan(dx[sp + 3]) && isnan(y[sp + 4]));
  assert_true(y[sp] == 0.0f && !signbit(y[sp]) && y[sp + 1] == 0.0f && signbit(y[sp + 1]));
  /* the two paths agree before the FP32 rounding (every bit of the double) */
  double *d1 = malloc(CAP * sizeof *d1), *d2 = malloc(CAP * sizeof *d2);
  assert_true(d1 && d2);
  if (!ampc_cpu_has_avx2_f16c())
    print_message("no AVX2+FMA on this CPU: only the portable path checked\n");
  if (!ampc_cpu_has_avx512f())
    print_message("no AVX-512 on this CPU: its path not checked\n");
  for (int path = 0; path < 2; path++)
    for (int bwd = 0; bwd < 2; bwd++) {
      if (!(path ? ampc_cpu_has_avx512f() : ampc_cpu_has_avx2_f16c()))
        continue;
      ampc_gelu64_portable(x, d1, (size_t)n, bwd);
      (path ? ampc_gelu64_avx512 : ampc_gelu64_avx2)(x, d2, (size_t)n, bwd);
      for (int64_t i = 0; i < n; i++)
        if (memcmp(&d1[i], &d2[i], 8) != 0 && !(isnan(d1[i]) && isnan(d2[i])))
          fail_msg("x = %a (%s): portable %a, %s %a", (double)x[i], bwd ? "dgelu" : "gelu", d1[i],
                   path ? "AVX-512" : "AVX2", d2[i]);
    }
  free(d1), free(d2);
  free(x), free(y), free(dx), free(one);
}

/* The exponential of softmax (x <= 0): within half an ulp (+ 2^-44 relative
 * slack) of libm's double exp on every 4099th non-positive bit pattern and a
 * sweep of [-104, 0] (outputs down to the FP32 subnormals), with -inf -> 0
 * and NaN -> NaN; every path gives the portable path's bits (their shared
 * exp body is also compared in double through the GELU test). */
static void test_exp_fp32(void **state) {
  (void)state;
  enum { CAP = 1 << 21 };
  float *x = malloc(CAP * sizeof *x), *y = malloc(CAP * sizeof *y), *z = malloc(CAP * sizeof *z);
  assert_true(x && y && z);
  int64_t n = 0;
  for (uint64_t b = 0x80000000u; b < (UINT64_C(1) << 32); b += 4099) {
    const uint32_t bits = (uint32_t)b;
    memcpy(&x[n++], &bits, 4);
  }
  for (int i = 0; i < (1 << 20); i++)
    x[n++] = -104.0f * (float)i / (float)(1 << 20);
  x[n++] = -INFINITY;
  x[n++] = NAN;
  x[n++] = -0.0f;
  assert_true(n <= CAP);
  ampc_exp32(x, y, (size_t)n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const double ref = exp((double)x[i]);
    if (!near_rounded(y[i], ref, ref) && bad++ < 5)
      print_message("exp(%a) = %a, libm %a\n", (double)x[i], (double)y[i], ref);
  }
  print_message("FP32 exp: %lld inputs checked, %lld outside half an ulp + slack\n", (long long)n,
                (long long)bad);
  assert_int_equal(bad, 0);
  assert_true(y[n - 3] == 0.0f && isnan(y[n - 2]) && y[n - 1] == 1.0f);
  ampc_exp32_portable(x, z, (size_t)n);
  for (int64_t i = 0; i < n; i++)
    if (!same_f32(y[i], z[i]))
      fail_msg("exp(%a): %a, portable %a", (double)x[i], (double)y[i], (double)z[i]);
  for (int64_t i = 0; i < n; i += 997)
    assert_true(same_f32(ampc_exp1(x[i]), z[i]));
  free(x), free(y), free(z);
}

/* ---- softmax ---- */
typedef struct {
  float *x, *y, *g;
  const uint8_t *mask;
  int64_t m, n;
  float scale;
} sm_ctx;
static double sm_f(void *p) {
  sm_ctx *c = p;
  assert_int_equal(
      ampc_softmax_forward(c->m, c->n, c->x, AMPC_F32, c->scale, c->mask, 2, c->y, AMPC_F32, NULL),
      AMPC_OK);
  return dot(c->g, c->y, c->m * c->n);
}

static void test_softmax(void **state) {
  (void)state;
  enum { M = 4, N = 6 };
  float x[M * N], y[M * N], g[M * N], dx[M * N];
  const uint8_t mask[2 * N] = {1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0, 1};
  sm_ctx c = {x, y, g, mask, M, N, 0.5f};
  fill(x, M * N), fill(g, M * N);
  sm_f(&c);
  for (int i = 0; i < M; i++) { /* rows sum to 1; masked entries exactly 0 */
    double s = 0;
    for (int j = 0; j < N; j++) {
      s += (double)y[i * N + j];
      if (!mask[(i / 2) * N + j])
        assert_true(y[i * N + j] == 0.0f);
    }
    assert_true(fabs(s - 1.0) <= 2 * N * 0x1p-24);
  }
  assert_int_equal(ampc_softmax_backward(M, N, g, AMPC_F32, y, AMPC_F32, 0.5f, dx), AMPC_OK);
  /* per output: N expf (a few ulps each), an N-term sum, a division */
  check_fd("softmax dx", sm_f, &c, x, dx, M * N, (2 * N + 8) * 0x1p-24 * M);
}

static void test_softmax_edges(void **state) {
  (void)state;
  /* huge logits: FP32 70000, 69999 -> sigmoid(1), sigmoid(-1) */
  const float big[2] = {70000.0f, 69999.0f};
  float p[2];
  assert_int_equal(ampc_softmax_forward(1, 2, big, AMPC_F32, 1.0f, NULL, 1, p, AMPC_F32, NULL),
                   AMPC_OK);
  assert_true(fabs((double)p[0] - 0.7310585786300049) <= 4 * 0x1p-24);
  assert_true(fabs((double)p[1] - 0.2689414213699951) <= 4 * 0x1p-24);
  /* FP16 storage: 60000 and 59968 (the next smaller binary16) -> 1 and e^-32 */
  ampc_f16 h[2] = {ampc_f32_to_f16(60000.0f), ampc_f32_to_f16(59968.0f)};
  ampc_f16 ph[2];
  ampc_round_stats st = {0};
  assert_int_equal(ampc_softmax_forward(1, 2, h, AMPC_F16, 1.0f, NULL, 1, ph, AMPC_F16, &st),
                   AMPC_OK);
  assert_true(ampc_f16_to_f32(ph[0]) == 1.0f);
  assert_true(fabs((double)ampc_f16_to_f32(ph[1]) - exp(-32.0)) <= 0x1p-24); /* subnormal */
  assert_int_equal(st.nan + st.inf, 0);
  /* a fully masked row gives zeros, not NaN */
  const uint8_t none[3] = {0, 0, 0};
  const float x3[3] = {1, 2, 3};
  float y3[3] = {9, 9, 9};
  assert_int_equal(ampc_softmax_forward(1, 3, x3, AMPC_F32, 1.0f, none, 1, y3, AMPC_F32, NULL),
                   AMPC_OK);
  assert_true(y3[0] == 0.0f && y3[1] == 0.0f && y3[2] == 0.0f);
}

static void test_layernorm_edges(void **state) {
  (void)state;
  const ampc_dtype dts[3] = {AMPC_F32, AMPC_F16, AMPC_BF16};
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = dts[t];
    /* constant row, eps = 1e-12: y = beta exactly */
    float xf[8], gf[8], bf[8];
    uint32_t x[8], gam[8], bet[8], y[8];
    for (int j = 0; j < 8; j++)
      xf[j] = 0.1f, gf[j] = 1.5f, bf[j] = (float)j - 3.25f;
    ampc_convert(x, dt, xf, AMPC_F32, 8);
    ampc_convert(gam, dt, gf, AMPC_F32, 8);
    ampc_convert(bet, dt, bf, AMPC_F32, 8);
    float mean, rstd;
    assert_int_equal(
        ampc_layernorm_forward(1, 8, x, dt, gam, bet, dt, 1e-12f, y, dt, &mean, &rstd, NULL),
        AMPC_OK);
    assert_memory_equal(y, bet, 8 * ampc_dtype_size(dt));
    assert_true(isfinite(rstd));
  }
  /* FP16 input with |x - mean| = 256: the variance 65536 exceeds binary16 */
  const float xf[4] = {-256.0f, 256.0f, -256.0f, 256.0f}, one[4] = {1, 1, 1, 1},
              zero[4] = {0, 0, 0, 0};
  ampc_f16 x[4], gam[4], bet[4], y[4];
  ampc_convert(x, AMPC_F16, xf, AMPC_F32, 4);
  ampc_convert(gam, AMPC_F16, one, AMPC_F32, 4);
  ampc_convert(bet, AMPC_F16, zero, AMPC_F32, 4);
  float mean, rstd;
  ampc_round_stats st = {0};
  assert_int_equal(ampc_layernorm_forward(1, 4, x, AMPC_F16, gam, bet, AMPC_F16, 1e-5f, y, AMPC_F16,
                                          &mean, &rstd, &st),
                   AMPC_OK);
  for (int j = 0; j < 4; j++)
    assert_true(fabs((double)ampc_f16_to_f32(y[j]) - (j % 2 ? 1.0 : -1.0)) <= 0x1p-11);
  assert_int_equal(st.inf + st.nan, 0);
}

/* Layer norm gives the same bits with and without round stats and with 1 or
 * 2 threads, for rows narrower and wider than its stack row buffer (2048),
 * forward and backward; a wide row's statistics match a double reference. */
static void test_layernorm_paths_agree(void **state) {
  (void)state;
  const int64_t shapes[2][2] = {{300, 131}, {3, 2500}};
  for (int sh = 0; sh < 2; sh++) {
    const int64_t m = shapes[sh][0], d = shapes[sh][1], n = m * d;
    float *x = malloc((size_t)n * sizeof *x), *g = malloc((size_t)n * sizeof *g);
    float *gam = malloc((size_t)d * sizeof *gam), *bet = malloc((size_t)d * sizeof *bet);
    ampc_f16 *y[2] = {malloc((size_t)n * 2), malloc((size_t)n * 2)};
    float *dx[2] = {malloc((size_t)n * 4), malloc((size_t)n * 4)};
    float *dgb[2] = {calloc((size_t)(2 * d), 4), calloc((size_t)(2 * d), 4)};
    float mean[2][300], rstd[2][300];
    assert_true(x && g && gam && bet && y[0] && y[1] && dx[0] && dx[1] && dgb[0] && dgb[1]);
    for (int64_t i = 0; i < n; i++)
      x[i] = 3.0f + 100.0f * frand(), g[i] = frand();
    for (int64_t j = 0; j < d; j++)
      gam[j] = 1.0f + frand(), bet[j] = frand();
    for (int q = 0; q < 2; q++) {
      ampc_set_num_threads(q + 1);
      ampc_round_stats st = {0};
      assert_int_equal(ampc_layernorm_forward(m, d, x, AMPC_F32, gam, bet, AMPC_F32, 1e-5f, y[q],
                                              AMPC_F16, mean[q], rstd[q], q ? &st : NULL),
                       AMPC_OK);
      assert_int_equal(ampc_layernorm_backward(m, d, g, AMPC_F32, x, AMPC_F32, gam, AMPC_F32,
                                               mean[q], rstd[q], dx[q], dgb[q], dgb[q] + d, NULL),
                       AMPC_OK);
      if (q)
        assert_int_equal(st.count, (uint64_t)n);
    }
    ampc_set_num_threads(0);
    assert_memory_equal(y[0], y[1], (size_t)n * 2);
    assert_memory_equal(mean[0], mean[1], (size_t)m * 4);
    assert_memory_equal(rstd[0], rstd[1], (size_t)m * 4);
    assert_memory_equal(dx[0], dx[1], (size_t)n * 4);
    assert_memory_equal(dgb[0], dgb[1], (size_t)(2 * d) * 4);
    for (int64_t i = 0; i < m; i++) { /* mean and 1/std of the row, rounded once to FP32 */
      double s = 0.0, v = 0.0;
      for (int64_t j = 0; j < d; j++)
        s += (double)x[i * d + j];
      s /= (double)d;
      for (int64_t j = 0; j < d; j++)
        v += ((double)x[i * d + j] - s) * ((double)x[i * d + j] - s);
      const double r = 1.0 / sqrt(v / (double)d + 1e-5);
      assert_true(fabs((double)mean[0][i] - s) <= 0x1p-24 * fabs(s) + 1e-12);
      assert_true(fabs((double)rstd[0][i] - r) <= 0x1p-23 * r);
    }
    free(x), free(g), free(gam), free(bet);
    for (int q = 0; q < 2; q++)
      free(y[q]), free(dx[q]), free(dgb[q]);
  }
}

/* ---- losses ---- */
typedef struct {
  float *x;
  const int32_t *t;
  int64_t m, c;
} ce_ctx;
static double ce_f(void *p) {
  ce_ctx *c = p;
  float l;
  assert_int_equal(ampc_cross_entropy_forward(c->m, c->c, c->x, AMPC_F32, c->t, &l), AMPC_OK);
  return (double)l;
}

static void test_losses(void **state) {
  (void)state;
  enum { M = 4, C = 5 };
  float x[M * C], dx[M * C], dx1[M * C];
  const int32_t t[M] = {0, 3, 4, 1};
  fill(x, M * C);
  ce_ctx c = {x, t, M, C};
  assert_int_equal(ampc_cross_entropy_backward(M, C, x, AMPC_F32, t, 1.0f, dx1, AMPC_F32), AMPC_OK);
  /* the loss is formed in double from FP32 exps: error ~ C ulps of each term */
  check_fd("cross-entropy", ce_f, &c, x, dx1, M * C, (2 * C + 4) * 0x1p-24 * 4);
  /* known value: uniform logits give log(C) */
  float zero[C] = {0}, l;
  const int32_t t0 = 2;
  assert_int_equal(ampc_cross_entropy_forward(1, C, zero, AMPC_F32, &t0, &l), AMPC_OK);
  assert_true(fabs((double)l - log(5.0)) <= 4 * 0x1p-24 * log(5.0));
  /* seeded with S = 65536: exactly S times the unscaled gradient */
  assert_int_equal(ampc_cross_entropy_backward(M, C, x, AMPC_F32, t, 65536.0f, dx, AMPC_F32),
                   AMPC_OK);
  for (int i = 0; i < M * C; i++)
    assert_true(dx[i] == 65536.0f * dx1[i]);
  /* bad target */
  const int32_t bad[M] = {0, 5, 0, 0};
  assert_int_equal(ampc_cross_entropy_forward(M, C, x, AMPC_F32, bad, &l), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "target[1]"));

  /* BCE with logits: known values and extreme logits without overflow */
  const float bx[4] = {0.0f, 100.0f, -100.0f, 2.0f}, bt[4] = {1.0f, 1.0f, 0.0f, 0.0f};
  assert_int_equal(ampc_bce_logits_forward(4, bx, AMPC_F32, bt, &l), AMPC_OK);
  const double want = (log(2.0) + log1p(exp(-100.0)) * 2 + (2.0 + log1p(exp(-2.0)))) / 4.0;
  assert_true(fabs((double)l - want) <= 8 * 0x1p-24 * want);
  float bd[4], bd1[4];
  assert_int_equal(ampc_bce_logits_backward(4, bx, AMPC_F32, bt, 1.0f, bd1, AMPC_F32), AMPC_OK);
  assert_int_equal(ampc_bce_logits_backward(4, bx, AMPC_F32, bt, 65536.0f, bd, AMPC_F32), AMPC_OK);
  for (int i = 0; i < 4; i++) {
    /* exact scaling wherever the unscaled gradient is a normal FP32; for
     * x = -100 it is subnormal (~1e-44 / 4), rounded to the 2^-149 grid:
     * the underflow that loss scaling exists to avoid */
    assert_true(isfinite(bd[i]));
    if (fabsf(bd1[i]) >= 0x1p-126f)
      assert_true(bd[i] == 65536.0f * bd1[i]);
    else
      assert_true(fabs((double)bd[i] - 65536.0 * (double)bd1[i]) <= 65536.0 * 0x1p-150);
  }
  assert_true(fabs((double)bd1[3] - (1.0 / (1.0 + exp(-2.0))) / 4.0) <= 4 * 0x1p-24);
}

typedef struct {
  float *sim;
  float lt;
  int64_t b;
} nce_ctx;
static double nce_f(void *p) {
  nce_ctx *c = p;
  float l;
  assert_int_equal(ampc_infonce_forward(c->b, c->sim, AMPC_F32, c->lt, &l), AMPC_OK);
  return (double)l;
}

static void test_infonce(void **state) {
  (void)state;
  enum { B = 5 };
  float sim[B * B], ds[B * B], dlt = 0.0f;
  fill(sim, B * B);
  nce_ctx c = {sim, 1.0f, B};
  assert_int_equal(ampc_infonce_backward(B, sim, AMPC_F32, 1.0f, 1.0f, ds, AMPC_F32, &dlt, NULL),
                   AMPC_OK);
  check_fd("infonce dsim", nce_f, &c, sim, ds, B * B, (4 * B + 8) * 0x1p-24 * 8);
  /* d/d log_temp by finite difference on the scalar */
  float lt = 1.0f, dlt_fd[1] = {dlt};
  nce_ctx c2 = {sim, 1.0f, B};
  (void)lt;
  check_fd("infonce dlog_temp", nce_f, &c2, &c2.lt, dlt_fd, 1, (4 * B + 8) * 0x1p-24 * 8);
  /* perfectly aligned pairs with a large temperature: loss -> 0 */
  float eye[B * B] = {0}, l;
  for (int i = 0; i < B; i++)
    eye[i * B + i] = 1.0f;
  assert_int_equal(ampc_infonce_forward(B, eye, AMPC_F32, logf(100.0f), &l), AMPC_OK);
  assert_true(l >= 0.0f && l < 1e-30f + 5.0f * expf(-100.0f) * 2);
}

/* ---- 16-bit storage against FP32 on the same inputs ---- */
static void test_lowp_storage(void **state) {
  (void)state;
  enum { M = 6, K = 40, N = 10 };
  const ampc_dtype dts[2] = {AMPC_F16, AMPC_BF16};
  for (int t = 0; t < 2; t++) {
    const ampc_dtype dt = dts[t];
    const double u = dt == AMPC_F16 ? 0x1p-11 : 0x1p-8;
    float xf[M * K], wf[N * K], bf[N];
    fill(xf, M * K), fill(wf, N * K), fill(bf, N);
    uint16_t x[M * K], w[N * K], b[N], y[M * N];
    ampc_convert(x, dt, xf, AMPC_F32, M * K); /* then read them back: exact inputs */
    ampc_convert(xf, AMPC_F32, x, dt, M * K);
    ampc_convert(w, dt, wf, AMPC_F32, N * K);
    ampc_convert(wf, AMPC_F32, w, dt, N * K);
    ampc_convert(b, dt, bf, AMPC_F32, N);
    ampc_convert(bf, AMPC_F32, b, dt, N);
    float y32[M * N];
    assert_int_equal(ampc_linear_forward(M, K, N, xf, AMPC_F32, wf, AMPC_F32, bf, y32, AMPC_F32,
                                         AMPC_ACC_F32, NULL),
                     AMPC_OK);
    ampc_round_stats st = {0};
    assert_int_equal(ampc_linear_forward(M, K, N, x, dt, w, dt, b, y, dt, AMPC_ACC_F32, &st),
                     AMPC_OK);
    assert_int_equal(st.count, M * N);
    for (int i = 0; i < M * N; i++) {
      float yi;
      ampc_convert(&yi, AMPC_F32, &y[i], dt, 1);
      const double bound = u * fabs((double)y32[i]) + 2 * (K + 3) * 0x1p-24 * (K + 1);
      assert_true(fabs((double)yi - (double)y32[i]) <= bound);
    }
    /* GELU and layer norm outputs */
    uint16_t gy[M * K];
    float gy32[M * K], mean[M], rstd[M];
    assert_int_equal(ampc_gelu_forward(M * K, xf, AMPC_F32, gy32, AMPC_F32, NULL), AMPC_OK);
    assert_int_equal(ampc_gelu_forward(M * K, x, dt, gy, dt, NULL), AMPC_OK);
    for (int i = 0; i < M * K; i++) {
      float v;
      ampc_convert(&v, AMPC_F32, &gy[i], dt, 1);
      assert_true(fabs((double)v - (double)gy32[i]) <= u * fabs((double)gy32[i]) + 1e-30);
    }
    float gam[K], bet[K];
    for (int j = 0; j < K; j++)
      gam[j] = 1.0f, bet[j] = 0.0f;
    assert_int_equal(ampc_layernorm_forward(M, K, xf, AMPC_F32, gam, bet, AMPC_F32, 1e-5f, gy32,
                                            AMPC_F32, mean, rstd, NULL),
                     AMPC_OK);
    assert_int_equal(
        ampc_layernorm_forward(M, K, x, dt, gam, bet, AMPC_F32, 1e-5f, gy, dt, mean, rstd, NULL),
        AMPC_OK);
    for (int i = 0; i < M * K; i++) {
      float v;
      ampc_convert(&v, AMPC_F32, &gy[i], dt, 1);
      assert_true(fabs((double)v - (double)gy32[i]) <= u * fabs((double)gy32[i]) + 1e-30);
    }
  }
}

/* ---- attention ---- */
enum { AB = 2, ATQ = 3, ATK = 4, AH = 2, ADH = 3, AHD = AH * ADH };
typedef struct {
  float q[AB * ATQ * AHD], k[AB * ATK * AHD], v[AB * ATK * AHD], out[AB * ATQ * AHD],
      g[AB * ATQ * AHD], s[AB * AH * ATQ * ATK], p[AB * AH * ATQ * ATK];
  const uint8_t *mask;
} at_ctx;
static double at_f(void *ctx) {
  at_ctx *c = ctx;
  assert_int_equal(ampc_attention_forward(AB, ATQ, ATK, AH, ADH, c->q, AHD, c->k, AHD, c->v, AHD,
                                          AMPC_F32, c->mask, c->s, AMPC_F32, c->p, AMPC_F32, c->out,
                                          AHD, AMPC_F32, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  return dot(c->g, c->out, AB * ATQ * AHD);
}

static void test_attention(void **state) {
  (void)state;
  static at_ctx c;
  const uint8_t mask[AB * ATK] = {1, 1, 0, 1, 1, 0, 1, 1};
  c.mask = mask;
  fill(c.q, AB * ATQ * AHD), fill(c.k, AB * ATK * AHD), fill(c.v, AB * ATK * AHD);
  fill(c.g, AB * ATQ * AHD);
  at_f(&c);
  float dq[AB * ATQ * AHD], dk[AB * ATK * AHD], dv[AB * ATK * AHD];
  assert_int_equal(ampc_attention_backward(AB, ATQ, ATK, AH, ADH, c.q, AHD, c.k, AHD, c.v, AHD,
                                           AMPC_F32, c.p, AMPC_F32, c.g, AHD, AMPC_F32, dq, AHD, dk,
                                           AHD, dv, AHD, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  /* masked keys: no probability, no gradient */
  for (int i = 0; i < AH * ATQ; i++)
    assert_true(c.p[i * ATK + 2] == 0.0f);
  for (int j = 0; j < AHD; j++)
    assert_true(dk[2 * AHD + j] == 0.0f && dv[2 * AHD + j] == 0.0f);
  /* per output: a dh-term score, a tk-term softmax, a tk-term P v */
  const double df = (ADH + 2 * ATK + ATK + 12) * 0x1p-24 * (sum_abs_prod(c.g, c.out, 36) + 36);
  check_fd("attention dq", at_f, &c, c.q, dq, AB * ATQ * AHD, df);
  check_fd("attention dk", at_f, &c, c.k, dk, AB * ATK * AHD, df);
  check_fd("attention dv", at_f, &c, c.v, dv, AB * ATK * AHD, df);

  /* the same through one packed [q | k | v] buffer (ld = 3 h dh), self-attention
   * shape (tq = tk), checks the leading-dimension views */
  enum { T = 4, LD = 3 * AHD };
  float qkv[AB * T * LD], o1[AB * T * AHD], o2[AB * T * AHD], s[AB * AH * T * T],
      p[AB * AH * T * T];
  float qs[AB * T * AHD], ks[AB * T * AHD], vs[AB * T * AHD];
  fill(qkv, AB * T * LD);
  for (int r = 0; r < AB * T; r++)
    for (int j = 0; j < AHD; j++)
      qs[r * AHD + j] = qkv[r * LD + j], ks[r * AHD + j] = qkv[r * LD + AHD + j],
                   vs[r * AHD + j] = qkv[r * LD + 2 * AHD + j];
  assert_int_equal(ampc_attention_forward(AB, T, T, AH, ADH, qkv, LD, qkv + AHD, LD, qkv + 2 * AHD,
                                          LD, AMPC_F32, NULL, s, AMPC_F32, p, AMPC_F32, o1, AHD,
                                          AMPC_F32, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  assert_int_equal(ampc_attention_forward(AB, T, T, AH, ADH, qs, AHD, ks, AHD, vs, AHD, AMPC_F32,
                                          NULL, s, AMPC_F32, p, AMPC_F32, o2, AHD, AMPC_F32,
                                          AMPC_ACC_F32, NULL),
                   AMPC_OK);
  assert_memory_equal(o1, o2, sizeof o1);

  /* FP16 storage with huge logits: q.k = 60000 * ... stays finite */
  ampc_f16 hq[ADH], hk[2 * ADH], hv[2 * ADH], ho[ADH];
  float hs[2], hp[2]; /* scores and probabilities in F32 */
  const float qf[ADH] = {240.0f, 0.0f, 0.0f}, kf[2 * ADH] = {250.0f, 0, 0, 249.0f, 0, 0},
              vf[2 * ADH] = {1, 2, 3, 4, 5, 6};
  ampc_convert(hq, AMPC_F16, qf, AMPC_F32, ADH);
  ampc_convert(hk, AMPC_F16, kf, AMPC_F32, 2 * ADH);
  ampc_convert(hv, AMPC_F16, vf, AMPC_F32, 2 * ADH);
  ampc_round_stats st = {0};
  assert_int_equal(ampc_attention_forward(1, 1, 2, 1, ADH, hq, ADH, hk, ADH, hv, ADH, AMPC_F16,
                                          NULL, hs, AMPC_F32, hp, AMPC_F32, ho, ADH, AMPC_F16,
                                          AMPC_ACC_F32, &st),
                   AMPC_OK);
  assert_int_equal(st.nan + st.inf, 0);
  /* scores 60000/sqrt(3) and 59760/sqrt(3): p1 / p0 = exp(-240/sqrt(3)) ~ 0 */
  assert_true(fabs((double)ampc_f16_to_f32(ho[0]) - 1.0) <= 0x1p-11);
}

/* ---- finite differences for the remaining layers ---- */
enum { EB = 2, ET = 3, ED = 4, EV = 5 };
typedef struct {
  float tok[EV * ED], pos[ET * ED], x[EB * ET * ED], pooled[EB * ED], y[EB * ET * ED],
      g[EB * ET * ED], n[EB * ED];
  int32_t ids[EB * ET];
  uint8_t mask[EB * ET];
} misc_ctx;

static double emb_f(void *p) { /* embedding -> sum g y */
  misc_ctx *c = p;
  assert_int_equal(ampc_embedding_forward(EB, ET, ED, c->ids, EV, c->tok, c->pos, AMPC_F32, c->y,
                                          AMPC_F32, NULL),
                   AMPC_OK);
  return dot(c->g, c->y, EB * ET * ED);
}
static double pool_norm_f(void *p) { /* masked mean pool -> L2 normalise -> sum g y */
  misc_ctx *c = p;
  assert_int_equal(
      ampc_mean_pool_forward(EB, ET, ED, c->x, AMPC_F32, c->mask, c->pooled, AMPC_F32, NULL),
      AMPC_OK);
  assert_int_equal(ampc_l2norm_forward(EB, ED, c->pooled, AMPC_F32, 1e-12f, c->n, AMPC_F32, NULL),
                   AMPC_OK);
  return dot(c->g, c->n, EB * ED);
}
static double add_f(void *p) { /* residual add of the first EV*ED of x and tok -> sum g y */
  misc_ctx *c = p;
  float out[EV * ED];
  assert_int_equal(ampc_add_forward(EV * ED, c->x, AMPC_F32, c->tok, AMPC_F32, out, AMPC_F32, NULL),
                   AMPC_OK);
  return dot(c->g, out, EV * ED);
}

static void test_misc_grads(void **state) {
  (void)state;
  static misc_ctx c;
  const int32_t ids[EB * ET] = {1, 4, 1, 1, 0, 2};
  const uint8_t mask[EB * ET] = {1, 0, 1, 1, 1, 1};
  memcpy(c.ids, ids, sizeof ids);
  memcpy(c.mask, mask, sizeof mask);
  fill(c.tok, EV * ED), fill(c.pos, ET * ED), fill(c.x, EB * ET * ED), fill(c.g, EB * ET * ED);
  /* embedding: f is linear in tok and pos */
  float dtok[EV * ED] = {0}, dpos[ET * ED] = {0};
  emb_f(&c);
  assert_int_equal(
      ampc_embedding_backward(EB, ET, ED, c.ids, EV, c.g, AMPC_F32, dtok, dpos, NULL, NULL),
      AMPC_OK);
  const double dfe = 4 * 0x1p-24 * (sum_abs_prod(c.g, c.y, EB * ET * ED) + EB * ET * ED);
  check_fd("embedding dtok", emb_f, &c, c.tok, dtok, EV * ED, dfe);
  check_fd("embedding dpos", emb_f, &c, c.pos, dpos, ET * ED, dfe);
  /* pooling then normalisation: backward chained */
  float dn[EB * ED], dx[EB * ET * ED];
  pool_norm_f(&c);
  assert_int_equal(ampc_l2norm_backward(EB, ED, c.g, AMPC_F32, c.pooled, AMPC_F32, 1e-12f, dn),
                   AMPC_OK);
  assert_int_equal(ampc_mean_pool_backward(EB, ET, ED, dn, AMPC_F32, c.mask, dx), AMPC_OK);
  check_fd("pool+normalize dx", pool_norm_f, &c, c.x, dx, EB * ET * ED,
           16 * 0x1p-24 * (sum_abs_prod(c.g, c.n, EB * ED) + EB * ED));
  /* residual add: d/dx = g (identity) */
  check_fd("add dx", add_f, &c, c.x, c.g, EV * ED, 2 * 0x1p-24 * (EB * ET * ED));
}

/* patch embedding: d/dW of sum g y equals the dW from the backward pass */
typedef struct {
  uint8_t img[2 * 4 * 4 * 3];
  float w[5 * 12], b[5], y[8 * 5], g[8 * 5];
} pe_ctx;
static double pe_f(void *p) {
  pe_ctx *c = p;
  assert_int_equal(ampc_patch_embed_forward(2, 4, 4, 3, 2, 5, c->img, 1.0f / 255.0f, -0.5f, c->w,
                                            AMPC_F32, c->b, c->y, AMPC_F32, AMPC_ACC_F32, NULL,
                                            NULL),
                   AMPC_OK);
  return dot(c->g, c->y, 40);
}

static void test_patch_grad(void **state) {
  (void)state;
  static pe_ctx c;
  for (int i = 0; i < 96; i++)
    c.img[i] = (uint8_t)((i * 73 + 5) % 256);
  fill(c.w, 60), fill(c.b, 5), fill(c.g, 40);
  float dw[60] = {0}, db[5] = {0};
  pe_f(&c);
  assert_int_equal(ampc_patch_embed_backward(2, 4, 4, 3, 2, 5, c.img, 1.0f / 255.0f, -0.5f,
                                             AMPC_F32, c.g, AMPC_F32, dw, db, AMPC_ACC_F32, NULL),
                   AMPC_OK);
  const double df = 16 * 0x1p-24 * (sum_abs_prod(c.g, c.y, 40) + 40);
  check_fd("patch_embed dw", pe_f, &c, c.w, dw, 60, df);
  check_fd("patch_embed db", pe_f, &c, c.b, db, 5, df);
}

/* ---- the multi-head attention layer ---- */
enum { MB = 2, MTQ = 3, MTK = 4, MDM = 4, MH = 2 };
typedef struct {
  float xq[MB * MTQ * MDM], xkv[MB * MTK * MDM], w[4][MDM * MDM], bias[4][MDM];
  float q[MB * MTK * MDM], k[MB * MTK * MDM], v[MB * MTK * MDM], o[MB * MTQ * MDM],
      s[MB * MH * MTQ * MTK], p[MB * MH * MTQ * MTK], y[MB * MTQ * MDM], g[MB * MTQ * MDM];
  int self;
  const uint8_t *mask;
} mha_ctx;
static double mha_f(void *ctx) {
  mha_ctx *c = ctx;
  ampc_mha_cache cache = {c->q, c->k, c->v, c->o, c->s, c->p, false, NULL, AMPC_F32};
  const int64_t tk = c->self ? MTQ : MTK;
  assert_int_equal(ampc_mha_forward(MB, MTQ, tk, MDM, MH, c->xq, c->self ? c->xq : c->xkv, AMPC_F32,
                                    c->w[0], c->bias[0], c->w[1], c->bias[1], c->w[2], c->bias[2],
                                    c->w[3], c->bias[3], AMPC_F32, c->mask, &cache, AMPC_F32, c->y,
                                    AMPC_ACC_F32, NULL, NULL),
                   AMPC_OK);
  return dot(c->g, c->y, MB * MTQ * MDM);
}

static void test_mha(void **state) {
  (void)state;
  static mha_ctx c;
  const uint8_t mask[MB * MTK] = {1, 1, 0, 1, 0, 1, 1, 1};
  for (int self = 0; self < 2; self++) {
    c.self = self;
    c.mask = self ? NULL : mask;
    fill(c.xq, MB * MTQ * MDM), fill(c.xkv, MB * MTK * MDM), fill(c.g, MB * MTQ * MDM);
    for (int i = 0; i < 4; i++)
      fill(c.w[i], MDM * MDM), fill(c.bias[i], MDM);
    mha_f(&c);
    ampc_mha_cache cache = {c.q, c.k, c.v, c.o, c.s, c.p, false, NULL, AMPC_F32};
    float dxq[MB * MTQ * MDM], dxkv[MB * MTK * MDM], dw[4][MDM * MDM], db[4][MDM];
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    const int64_t tk = self ? MTQ : MTK;
    assert_int_equal(ampc_mha_backward(MB, MTQ, tk, MDM, MH, c.xq, self ? c.xq : c.xkv, AMPC_F32,
                                       c.w[0], c.w[1], c.w[2], c.w[3], AMPC_F32, &cache, AMPC_F32,
                                       c.g, AMPC_F32, dxq, self ? NULL : dxkv, dw[0], db[0], dw[1],
                                       db[1], dw[2], db[2], dw[3], db[3], AMPC_ACC_F32, NULL, NULL),
                     AMPC_OK);
    /* per output: four chained products of length dm or tk, a softmax */
    const double df = 64 * 0x1p-24 * (sum_abs_prod(c.g, c.y, MB * MTQ * MDM) + MB * MTQ * MDM);
    check_fd(self ? "self-mha dxq" : "cross-mha dxq", mha_f, &c, c.xq, dxq, MB * MTQ * MDM, df);
    if (!self)
      check_fd("cross-mha dxkv", mha_f, &c, c.xkv, dxkv, MB * MTK * MDM, df);
    const char *wn[4] = {"dwq", "dwk", "dwv", "dwo"};
    for (int i = 0; i < 4; i++) {
      check_fd(wn[i], mha_f, &c, c.w[i], dw[i], MDM * MDM, df);
      check_fd(wn[i], mha_f, &c, c.bias[i], db[i], MDM, df);
    }
  }
}

/* ampc_attention_forward_ex / _backward_ex with a 16-bit mdt: the forward's
 * product is that of 16-bit probabilities (equal, bit for bit, to the
 * forward with pdt 16-bit, whose softmax rounds the same FP32 values once)
 * while the stored P stays FP32; the backward pass is the composition
 * dP = dout v^T, dS = softmax backward on the FP32 P, dq = s round(dS) k,
 * dk = s round(dS)^T q, dv = round(P)^T dout, stated here with the public
 * layers; the tally counts the P and dS roundings (b h tq tk values each)
 * on top of the FP32 path's counts. */
static uint64_t tally_count(ampc_tally *t) {
  ampc_tm_stats st;
  memset(&st, 0, sizeof st);
  ampc_tally_drain(t, &st);
  return st.r.count;
}

static void test_attention_cast(void **state) {
  (void)state;
  enum { CB = 2, CTQ = 3, CTK = 5, CH = 2, CDH = 4, CDM = CH * CDH, CSS = CTQ * CTK };
  for (int id = 0; id < 2; id++) {
    const ampc_dtype xdt = id ? AMPC_BF16 : AMPC_F16, gdt = xdt;
    uint16_t q[CB * CTQ * CDM], k[CB * CTK * CDM], v[CB * CTK * CDM], dout[CB * CTQ * CDM];
    float f[CB * CTK * CDM];
    for (int i = 0; i < CB * CTK * CDM; i++)
      f[i] = (float)sin(0.37 * i + id) * 1.7f;
    assert_int_equal(ampc_convert(q, xdt, f, AMPC_F32, CB * CTQ * CDM), AMPC_OK);
    for (int i = 0; i < CB * CTK * CDM; i++)
      f[i] = (float)cos(0.51 * i - id) * 1.3f;
    assert_int_equal(ampc_convert(k, xdt, f, AMPC_F32, CB * CTK * CDM), AMPC_OK);
    for (int i = 0; i < CB * CTK * CDM; i++)
      f[i] = (float)sin(0.23 * i + 1.0) * 0.9f;
    assert_int_equal(ampc_convert(v, xdt, f, AMPC_F32, CB * CTK * CDM), AMPC_OK);
    for (int i = 0; i < CB * CTQ * CDM; i++)
      f[i] = (float)cos(0.71 * i) * 0.01f;
    assert_int_equal(ampc_convert(dout, xdt, f, AMPC_F32, CB * CTQ * CDM), AMPC_OK);
    const uint8_t mask[CB * CTK] = {1, 1, 1, 0, 1, 1, 0, 1, 1, 1};
    float sc[CB * CH * CSS], p32[CB * CH * CSS];
    uint16_t p16[CB * CH * CSS], out_ex[CB * CTQ * CDM], out_ref[CB * CTQ * CDM];
    ampc_tally *t = ampc_tally_create();
    assert_non_null(t);
    ampc_tally *was = ampc_tally_bind(t);
    assert_int_equal(ampc_attention_forward_ex(CB, CTQ, CTK, CH, CDH, q, CDM, k, CDM, v, CDM, xdt,
                                               mask, sc, AMPC_F32, p32, AMPC_F32, xdt, out_ex, CDM,
                                               xdt, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    const uint64_t n_ex = tally_count(t);
    float sc_f[CB * CH * CSS], p_f[CB * CH * CSS];
    assert_int_equal(ampc_attention_forward(CB, CTQ, CTK, CH, CDH, q, CDM, k, CDM, v, CDM, xdt,
                                            mask, sc_f, AMPC_F32, p_f, AMPC_F32, out_ref + 0, CDM,
                                            xdt, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    const uint64_t n_32 = tally_count(t);
    assert_int_equal(n_ex, n_32 + (uint64_t)(CB * CH * CSS)); /* the P rounding counted */
    /* the stored P is the FP32 one; the product used it rounded: the
     * forward whose softmax rounds its FP32 result to xdt */
    assert_memory_equal(p32, p_f, sizeof p32);
    assert_int_equal(ampc_attention_forward(CB, CTQ, CTK, CH, CDH, q, CDM, k, CDM, v, CDM, xdt,
                                            mask, sc_f, AMPC_F32, p16, xdt, out_ref, CDM, xdt,
                                            AMPC_ACC_F32, NULL),
                     AMPC_OK);
    (void)tally_count(t);
    assert_memory_equal(out_ex, out_ref, sizeof out_ex);
    /* backward */
    uint16_t dq[CB * CTQ * CDM], dk[CB * CTK * CDM], dv[CB * CTK * CDM];
    assert_int_equal(ampc_attention_backward_ex(CB, CTQ, CTK, CH, CDH, q, CDM, k, CDM, v, CDM, xdt,
                                                p32, AMPC_F32, xdt, dout, CDM, gdt, dq, CDM, dk,
                                                CDM, dv, CDM, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    const uint64_t nb_ex = tally_count(t);
    const float scale = (float)(1.0 / sqrt((double)CDH));
    uint16_t rdq[CB * CTQ * CDM], rdk[CB * CTK * CDM], rdv[CB * CTK * CDM];
    for (int bi = 0; bi < CB; bi++) {
      float dp[CH * CSS], ds[CH * CSS];
      uint16_t ds16[CH * CSS], pr16[CH * CSS];
      const size_t o = (size_t)bi * CH * CSS;
      assert_int_equal(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, CTQ, CTK, CDH, 1.0f,
                                                 dout + bi * CTQ * CDM, gdt, CDM, CDH,
                                                 v + bi * CTK * CDM, xdt, CDM, CDH, 0.0f, dp,
                                                 AMPC_F32, CTK, CSS, CH, AMPC_ACC_F32),
                       AMPC_OK);
      assert_int_equal(
          ampc_softmax_backward(CH * CTQ, CTK, dp, AMPC_F32, p32 + o, AMPC_F32, 1.0f, ds), AMPC_OK);
      assert_int_equal(ampc_convert(ds16, xdt, ds, AMPC_F32, CH * CSS), AMPC_OK);
      assert_int_equal(ampc_convert(pr16, xdt, p32 + o, AMPC_F32, CH * CSS), AMPC_OK);
      assert_int_equal(ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, CTQ, CDH, CTK, scale, ds16,
                                                 xdt, CTK, CSS, k + bi * CTK * CDM, xdt, CDM, CDH,
                                                 0.0f, rdq + bi * CTQ * CDM, gdt, CDM, CDH, CH,
                                                 AMPC_ACC_F32),
                       AMPC_OK);
      assert_int_equal(ampc_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, CTK, CDH, CTQ, scale, ds16,
                                                 xdt, CTK, CSS, q + bi * CTQ * CDM, xdt, CDM, CDH,
                                                 0.0f, rdk + bi * CTK * CDM, gdt, CDM, CDH, CH,
                                                 AMPC_ACC_F32),
                       AMPC_OK);
      assert_int_equal(ampc_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, CTK, CDH, CTQ, 1.0f, pr16,
                                                 xdt, CTK, CSS, dout + bi * CTQ * CDM, gdt, CDM,
                                                 CDH, 0.0f, rdv + bi * CTK * CDM, gdt, CDM, CDH, CH,
                                                 AMPC_ACC_F32),
                       AMPC_OK);
    }
    const uint64_t nb_ref = tally_count(t); /* the reference's GEMM stores */
    (void)ampc_tally_bind(was);
    ampc_tally_free(t);
    assert_memory_equal(dq, rdq, sizeof dq);
    assert_memory_equal(dk, rdk, sizeof dk);
    assert_memory_equal(dv, rdv, sizeof dv);
    /* the same stores counted, plus the layer's dS rounding (the reference
     * rounds dS and P with ampc_convert, which counts nothing; the layer's
     * P rounding for dv is not counted again either) */
    assert_int_equal(nb_ex, nb_ref + (uint64_t)(CB * CH * CSS));
  }
  /* a bad mdt is refused */
  float x[4] = {0};
  assert_int_equal(ampc_attention_forward_ex(1, 1, 1, 1, 1, x, 1, x, 1, x, 1, AMPC_F32, NULL, x,
                                             AMPC_F32, x, AMPC_F32, AMPC_F8_E4M3, x, 1, AMPC_F32,
                                             AMPC_ACC_F32, NULL),
                   AMPC_ERR_INVALID_ARG);
}

/* The backward pass that recomputes the probabilities (ampc_mha_cache.
 * recompute) gives the bits of the one that reads the forward's, in every
 * storage dtype of the presets, with a key mask, and counts no rounding
 * twice: the scores and probabilities are overwritten with NaN in between. */
static void test_mha_recompute(void **state) {
  (void)state;
  enum { B = 3, TQ = 5, TK = 7, DM = 8, NH = 2 };
  const ampc_dtype dts[3] = {AMPC_F32, AMPC_F16, AMPC_BF16};
  const uint8_t mask[B * TK] = {1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0};
  static float f[2 * B * TK * DM + 4 * DM * DM + 4 * DM + B * TQ * DM];
  for (int d = 0; d < 3; d++)
    for (int pd = 0; pd < 2; pd++) {
      const ampc_dtype dt = dts[d], pdt = pd ? AMPC_F32 : dt;
      const size_t es = ampc_dtype_size(dt), ps = ampc_dtype_size(pdt);
      g_rng = 0x9E3779B97F4A7C15u + (uint64_t)(d * 2 + pd);
      fill(f, (int64_t)(sizeof f / sizeof *f));
      /* xq, xkv, w[4], b[4], dy in dt */
      char *x = malloc(sizeof f / sizeof *f * es);
      assert_non_null(x);
      assert_int_equal(ampc_convert(f, AMPC_F32, x, dt, sizeof f / sizeof *f), AMPC_OK);
      char *xq = x, *xkv = xq + B * TK * DM * es, *w = xkv + B * TK * DM * es;
      char *bias = w + 4 * DM * DM * es, *dy = bias + 4 * DM * es;
      const size_t nact = (size_t)B * TK * DM * es, nsc = (size_t)B * NH * TQ * TK * ps;
      char *buf = calloc(1, 4 * nact + 2 * nsc + B * TQ * DM * es);
      char *grads[2];
      assert_non_null(buf);
      ampc_mha_cache c = {
          buf,   buf + nact, buf + 2 * nact, buf + 3 * nact, buf + 4 * nact, buf + 4 * nact + nsc,
          false, NULL,       AMPC_F32};
      void *y = buf + 4 * nact + 2 * nsc;
      const size_t wsz = DM * DM * es, bsz = DM * es;
      uint64_t counted[2];
      for (int r = 0; r < 2; r++) {
        ampc_tally *t = ampc_tally_create();
        assert_non_null(t);
        ampc_tally *was = ampc_tally_bind(t);
        assert_int_equal(ampc_mha_forward(B, TQ, TK, DM, NH, xq, xkv, dt, w, bias, w + wsz,
                                          bias + bsz, w + 2 * wsz, bias + 2 * bsz, w + 3 * wsz,
                                          bias + 3 * bsz, dt, mask, &c, pdt, y, AMPC_ACC_F32, NULL,
                                          NULL),
                         AMPC_OK);
        c.recompute = r, c.key_mask = r ? mask : NULL;
        if (r) { /* NaN where the forward left its scores and probabilities */
          memset(c.scores, 0xff, nsc);
          memset(c.probs, 0xff, nsc);
        }
        /* dxq, dxkv, dw[4], db[4] */
        const size_t ng = 2 * nact + 4 * wsz + 4 * bsz;
        grads[r] = calloc(1, ng);
        assert_non_null(grads[r]);
        char *g = grads[r], *gw = g + 2 * nact, *gb = gw + 4 * wsz;
        assert_int_equal(ampc_mha_backward(B, TQ, TK, DM, NH, xq, xkv, dt, w, w + wsz, w + 2 * wsz,
                                           w + 3 * wsz, dt, &c, pdt, dy, dt, g, g + nact, gw, gb,
                                           gw + wsz, gb + bsz, gw + 2 * wsz, gb + 2 * bsz,
                                           gw + 3 * wsz, gb + 3 * bsz, AMPC_ACC_F32, NULL, NULL),
                         AMPC_OK);
        ampc_tm_stats tm;
        ampc_tally_drain(t, &tm);
        counted[r] = tm.r.count;
        ampc_tally_bind(was);
        ampc_tally_free(t);
        if (r)
          assert_memory_equal(grads[0], grads[1], ng);
      }
      assert_true(counted[0] > 0);
      assert_int_equal(counted[0], counted[1]);
      free(grads[0]), free(grads[1]), free(buf), free(x);
    }
}

static void test_errors(void **state) {
  (void)state;
  float x[4] = {0}, y[4];
  assert_int_equal(ampc_gelu_forward(0, x, AMPC_F32, y, AMPC_F32, NULL), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "n must be positive"));
  assert_int_equal(ampc_gelu_forward(4, NULL, AMPC_F32, y, AMPC_F32, NULL), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_gelu_forward(4, x, AMPC_F8_E4M3, y, AMPC_F32, NULL), AMPC_ERR_INVALID_ARG);
  float mean, rstd;
  assert_int_equal(ampc_layernorm_forward(1, 4, x, AMPC_F32, x, x, AMPC_F32, -1.0f, y, AMPC_F32,
                                          &mean, &rstd, NULL),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(
      ampc_softmax_forward(1, 4, x, AMPC_F32, 1.0f, (const uint8_t *)x, 0, y, AMPC_F32, NULL),
      AMPC_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_grad),
      cmocka_unit_test(test_layernorm_grad),
      cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_gelu_16bit_exhaustive),
      cmocka_unit_test(test_gelu_fp32_accuracy),
      cmocka_unit_test(test_exp_fp32),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_softmax_edges),
      cmocka_unit_test(test_layernorm_edges),
      cmocka_unit_test(test_layernorm_paths_agree),
      cmocka_unit_test(test_losses),
      cmocka_unit_test(test_infonce),
      cmocka_unit_test(test_lowp_storage),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_misc_grads),
      cmocka_unit_test(test_patch_grad),
      cmocka_unit_test(test_mha),
      cmocka_unit_test(test_mha_recompute),
      cmocka_unit_test(test_attention_cast),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
