/*
 * tests/test_parity.c: every layer against PyTorch, from the committed goldens
 * (tests/reference/goldens.json, made by tests/reference/gen_goldens.py with
 * Debian's python3-torch; CI only reads the file).
 *
 * The golden inputs are exact in f32, f16 and bf16, so each layer runs on the
 * same values in all three storage dtypes. Tolerances:
 *  - f32 storage: |ampc - torch| <= 1e-5 * (|torch_i| + rms(torch)), the
 *    required 1e-5 relative error with a floor at the tensor's scale for
 *    entries near zero (both sides compute in FP32 with different orders);
 *  - f16 / bf16 storage: <= r * u * (|torch_i| + rms(torch)), u the unit
 *    roundoff (2^-11, 2^-8) and r the number of 16-bit roundings on the path
 *    from the exact inputs to that output (first order; listed per case),
 *    plus, where an input is itself rounded (pixels) or an intermediate is
 *    stored in 16 bits and then amplified (attention scores through exp), the
 *    propagated term, written out at the comparison.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"

static cJSON *g_cases;

static cJSON *case_(const char *name) {
  cJSON *c = cJSON_GetObjectItemCaseSensitive(g_cases, name);
  if (!c)
    fail_msg("goldens: no case '%s'", name);
  return c;
}
static int64_t ival(cJSON *c, const char *k) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);
  assert_true(cJSON_IsNumber(v));
  return (int64_t)v->valuedouble;
}
static float fval(cJSON *c, const char *k) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);
  assert_true(cJSON_IsNumber(v));
  return (float)v->valuedouble;
}
/* a float array (malloc'd), its length in *n */
static float *farr(cJSON *c, const char *k, int64_t *n) {
  cJSON *a = cJSON_GetObjectItemCaseSensitive(c, k);
  assert_true(cJSON_IsArray(a));
  const int64_t len = cJSON_GetArraySize(a);
  float *p = malloc((size_t)(len + 1) * sizeof *p);
  assert_non_null(p);
  int64_t i = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, a) p[i++] = (float)e->valuedouble;
  if (n)
    *n = len;
  return p;
}
static int32_t *iarr(cJSON *c, const char *k) {
  int64_t n;
  float *f = farr(c, k, &n);
  int32_t *p = malloc((size_t)(n + 1) * sizeof *p);
  assert_non_null(p);
  for (int64_t i = 0; i < n; i++)
    p[i] = (int32_t)f[i];
  free(f);
  return p;
}
static uint8_t *barr(cJSON *c, const char *k) {
  int64_t n;
  float *f = farr(c, k, &n);
  uint8_t *p = malloc((size_t)(n + 1));
  assert_non_null(p);
  for (int64_t i = 0; i < n; i++)
    p[i] = (uint8_t)f[i];
  free(f);
  return p;
}

/* a copy of f32 values in dtype dt (exact for golden inputs) */
static void *as_dt(const float *src, int64_t n, ampc_dtype dt) {
  void *p = malloc((size_t)(n + 1) * ampc_dtype_size(dt));
  assert_non_null(p);
  assert_int_equal(ampc_convert(p, dt, src, AMPC_F32, (size_t)n), AMPC_OK);
  float *back = malloc((size_t)(n + 1) * sizeof *back);
  ampc_convert(back, AMPC_F32, p, dt, (size_t)n);
  for (int64_t i = 0; i < n; i++)
    if (back[i] != src[i])
      fail_msg("golden input %.9g is not exact in %s", (double)src[i], ampc_dtype_name(dt));
  free(back);
  return p;
}
static void *zeros(int64_t n, ampc_dtype dt) {
  void *p = calloc((size_t)(n + 1), ampc_dtype_size(dt));
  assert_non_null(p);
  return p;
}

static double unit(ampc_dtype dt) {
  return dt == AMPC_F16 ? 0x1p-11 : dt == AMPC_BF16 ? 0x1p-8 : 0.0;
}

/* compare got (dtype dt) with the golden array `key`; r = 16-bit roundings on
 * the path; extra[i] (or NULL) an additional derived term per element */
static void cmp(const char *cs, const char *key, cJSON *c, const void *got, ampc_dtype dt, double r,
                const double *extra) {
  int64_t n;
  float *want = farr(c, key, &n);
  float *g = malloc((size_t)(n + 1) * sizeof *g);
  ampc_convert(g, AMPC_F32, got, dt, (size_t)n);
  double rms = 0;
  for (int64_t i = 0; i < n; i++)
    rms += (double)want[i] * (double)want[i];
  rms = sqrt(rms / (double)n);
  double worst = 0; /* largest |diff| / (u * scale), or / (1e-5 * scale) in f32 */
  for (int64_t i = 0; i < n; i++) {
    const double scale = fabs((double)want[i]) + rms;
    worst = fmax(worst, fabs((double)g[i] - (double)want[i]) /
                            ((dt == AMPC_F32 ? 1e-5 : unit(dt)) * scale));
    double tol = dt == AMPC_F32 ? 1e-5 * scale : r * unit(dt) * scale + 1e-5 * scale;
    if (extra)
      tol += extra[i];
    if (!(fabs((double)g[i] - (double)want[i]) <= tol))
      fail_msg("%s %s [%s] element %lld: ampc %.9g, torch %.9g, |diff| %.3g > tol %.3g", cs, key,
               ampc_dtype_name(dt), (long long)i, (double)g[i], (double)want[i],
               fabs((double)g[i] - (double)want[i]), tol);
  }
  if (getenv("AMPC_PARITY_REPORT"))
    printf("  %-15s %-7s %-5s worst |diff| = %.2f %s x scale (allowed %.1f)\n", cs, key,
           ampc_dtype_name(dt), worst, dt == AMPC_F32 ? "1e-5" : "u",
           dt == AMPC_F32 ? 1.0 : r + 0.0);
  free(want);
  free(g);
}

static const ampc_dtype k_dts[3] = {AMPC_F32, AMPC_F16, AMPC_BF16};

static void test_linear(void **state) {
  (void)state;
  cJSON *c = case_("linear");
  const int64_t m = ival(c, "m"), k = ival(c, "k"), n = ival(c, "n");
  float *x = farr(c, "x", NULL), *w = farr(c, "w", NULL), *b = farr(c, "b", NULL),
        *g = farr(c, "g", NULL);
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = k_dts[t];
    void *xd = as_dt(x, m * k, dt), *wd = as_dt(w, n * k, dt), *bd = as_dt(b, n, dt),
         *gd = as_dt(g, m * n, dt);
    void *y = zeros(m * n, dt), *dx = zeros(m * k, dt), *dw = zeros(n * k, dt), *db = zeros(n, dt);
    assert_int_equal(ampc_linear_forward(m, k, n, xd, dt, wd, dt, bd, y, dt, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    assert_int_equal(
        ampc_linear_backward(m, k, n, gd, dt, xd, dt, wd, dt, dx, dw, db, AMPC_ACC_F32, NULL),
        AMPC_OK);
    /* one rounding of an FP32-accumulated result each */
    cmp("linear", "y", c, y, dt, 1, NULL);
    cmp("linear", "dx", c, dx, dt, 1, NULL);
    cmp("linear", "dw", c, dw, dt, 1, NULL);
    cmp("linear", "db", c, db, dt, 1, NULL);
    free(xd), free(wd), free(bd), free(gd), free(y), free(dx), free(dw), free(db);
  }
  free(x), free(w), free(b), free(g);
}

static void test_layer_norm(void **state) {
  (void)state;
  cJSON *c = case_("layer_norm");
  const int64_t m = ival(c, "m"), d = ival(c, "d");
  const float eps = fval(c, "eps");
  float *x = farr(c, "x", NULL), *gam = farr(c, "gamma", NULL), *bet = farr(c, "beta", NULL),
        *g = farr(c, "g", NULL);
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = k_dts[t];
    void *xd = as_dt(x, m * d, dt), *gm = as_dt(gam, d, dt), *bt = as_dt(bet, d, dt),
         *gd = as_dt(g, m * d, dt);
    void *y = zeros(m * d, dt), *dx = zeros(m * d, dt), *dg = zeros(d, dt), *db = zeros(d, dt);
    float mean[16], rstd[16];
    assert_int_equal(ampc_layernorm_forward(m, d, xd, dt, gm, bt, dt, eps, y, dt, mean, rstd, NULL),
                     AMPC_OK);
    assert_int_equal(
        ampc_layernorm_backward(m, d, gd, dt, xd, dt, gm, dt, mean, rstd, dx, dg, db, NULL),
        AMPC_OK);
    cmp("layer_norm", "y", c, y, dt, 1, NULL);
    /* dx: a difference of terms of size |g gamma|, so relative to the tensor
     * scale: one rounding of the result */
    cmp("layer_norm", "dx", c, dx, dt, 1, NULL);
    cmp("layer_norm", "dgamma", c, dg, dt, 1, NULL);
    cmp("layer_norm", "dbeta", c, db, dt, 1, NULL);
    free(xd), free(gm), free(bt), free(gd), free(y), free(dx), free(dg), free(db);
  }
  free(x), free(gam), free(bet), free(g);
}

static void test_gelu(void **state) {
  (void)state;
  cJSON *c = case_("gelu");
  const int64_t n = ival(c, "n");
  float *x = farr(c, "x", NULL), *g = farr(c, "g", NULL);
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = k_dts[t];
    void *xd = as_dt(x, n, dt), *gd = as_dt(g, n, dt), *y = zeros(n, dt), *dx = zeros(n, dt);
    assert_int_equal(ampc_gelu_forward(n, xd, dt, y, dt, NULL), AMPC_OK);
    assert_int_equal(ampc_gelu_backward(n, gd, dt, xd, dt, dx), AMPC_OK);
    cmp("gelu", "y", c, y, dt, 1, NULL);
    cmp("gelu", "dx", c, dx, dt, 1, NULL);
    free(xd), free(gd), free(y), free(dx);
  }
  free(x), free(g);
}

static void test_softmax(void **state) {
  (void)state;
  cJSON *c = case_("softmax");
  const int64_t m = ival(c, "m"), n = ival(c, "n"), per = ival(c, "rows_per_mask");
  const float scale = fval(c, "scale");
  float *x = farr(c, "x", NULL), *g = farr(c, "g", NULL);
  uint8_t *mask = barr(c, "mask");
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = k_dts[t];
    void *xd = as_dt(x, m * n, dt), *gd = as_dt(g, m * n, dt), *y = zeros(m * n, dt),
         *dx = zeros(m * n, dt);
    assert_int_equal(ampc_softmax_forward(m, n, xd, dt, scale, mask, per, y, dt, NULL), AMPC_OK);
    assert_int_equal(ampc_softmax_backward(m, n, gd, dt, y, dt, scale, dx), AMPC_OK);
    cmp("softmax", "y", c, y, dt, 1, NULL);
    /* dx reads the rounded y (1) and rounds once (1) */
    cmp("softmax", "dx", c, dx, dt, 2, NULL);
    free(xd), free(gd), free(y), free(dx);
  }
  free(x), free(g), free(mask);
}

static void test_losses(void **state) {
  (void)state;
  cJSON *c = case_("cross_entropy");
  const int64_t m = ival(c, "m"), nc = ival(c, "c");
  float *x = farr(c, "x", NULL);
  int32_t *tg = iarr(c, "target");
  cJSON *cb = case_("bce_logits");
  const int64_t mb = ival(cb, "m");
  float *xb = farr(cb, "x", NULL), *tb = farr(cb, "target", NULL);
  cJSON *ci = case_("infonce");
  const int64_t bi = ival(ci, "b");
  float *sim = farr(ci, "sim", NULL);
  const float lt = fval(ci, "log_temp");
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = k_dts[t];
    float loss;
    /* losses: FP32 scalars from exact inputs, 1e-5 in every storage dtype */
    void *xd = as_dt(x, m * nc, dt), *dx = zeros(m * nc, dt);
    assert_int_equal(ampc_cross_entropy_forward(m, nc, xd, dt, tg, &loss), AMPC_OK);
    assert_true(fabs((double)loss - (double)fval(c, "loss")) <= 1e-5 * (double)fval(c, "loss"));
    assert_int_equal(ampc_cross_entropy_backward(m, nc, xd, dt, tg, 1.0f, dx, dt), AMPC_OK);
    cmp("cross_entropy", "dx", c, dx, dt, 1, NULL);
    void *xbd = as_dt(xb, mb, dt), *dxb = zeros(mb, dt);
    assert_int_equal(ampc_bce_logits_forward(mb, xbd, dt, tb, &loss), AMPC_OK);
    assert_true(fabs((double)loss - (double)fval(cb, "loss")) <= 1e-5 * (double)fval(cb, "loss"));
    assert_int_equal(ampc_bce_logits_backward(mb, xbd, dt, tb, 1.0f, dxb, dt), AMPC_OK);
    cmp("bce_logits", "dx", cb, dxb, dt, 1, NULL);
    void *sd = as_dt(sim, bi * bi, dt), *ds = zeros(bi * bi, dt);
    float dlt = 0.0f;
    assert_int_equal(ampc_infonce_forward(bi, sd, dt, lt, &loss), AMPC_OK);
    assert_true(fabs((double)loss - (double)fval(ci, "loss")) <= 1e-5 * (double)fval(ci, "loss"));
    assert_int_equal(ampc_infonce_backward(bi, sd, dt, lt, 1.0f, ds, dt, &dlt, NULL), AMPC_OK);
    cmp("infonce", "dsim", ci, ds, dt, 1, NULL);
    const double want_dlt = (double)fval(ci, "dlog_temp");
    assert_true(fabs((double)dlt - want_dlt) <= 1e-5 * (fabs(want_dlt) + 1.0));
    free(xd), free(dx), free(xbd), free(dxb), free(sd), free(ds);
  }
  free(x), free(tg), free(xb), free(tb), free(sim);
}

static void test_embedding(void **state) {
  (void)state;
  cJSON *c = case_("embedding");
  const int64_t b = ival(c, "b"), t = ival(c, "t"), d = ival(c, "d"), v = ival(c, "vocab");
  int32_t *ids = iarr(c, "ids");
  float *tok = farr(c, "tok", NULL), *pos = farr(c, "pos", NULL), *g = farr(c, "g", NULL);
  for (int q = 0; q < 3; q++) {
    const ampc_dtype dt = k_dts[q];
    void *tk = as_dt(tok, v * d, dt), *ps = as_dt(pos, t * d, dt), *gd = as_dt(g, b * t * d, dt);
    void *y = zeros(b * t * d, dt), *dtok = zeros(v * d, dt), *dpos = zeros(t * d, dt);
    assert_int_equal(ampc_embedding_forward(b, t, d, ids, v, tk, ps, dt, y, dt, NULL), AMPC_OK);
    assert_int_equal(ampc_embedding_backward(b, t, d, ids, v, gd, dt, dtok, dpos, NULL, NULL),
                     AMPC_OK);
    cmp("embedding", "y", c, y, dt, 1, NULL);
    cmp("embedding", "dtok", c, dtok, dt, 1, NULL);
    cmp("embedding", "dpos", c, dpos, dt, 1, NULL);
    free(tk), free(ps), free(gd), free(y), free(dtok), free(dpos);
  }
  free(ids), free(tok), free(pos), free(g);
}

static void test_patch_embed(void **state) {
  (void)state;
  cJSON *c = case_("patch_embed");
  const int64_t b = ival(c, "b"), hh = ival(c, "h"), ww = ival(c, "w"), ch = ival(c, "c"),
                p = ival(c, "p"), d = ival(c, "d");
  const int64_t k = ch * p * p, rows = b * (hh / p) * (ww / p);
  uint8_t *img = barr(c, "images");
  float *w = farr(c, "weight", NULL), *bias = farr(c, "bias", NULL), *g = farr(c, "g", NULL);
  double *extra = malloc((size_t)(rows * d) * sizeof *extra);
  for (int q = 0; q < 3; q++) {
    const ampc_dtype dt = k_dts[q];
    void *wd = as_dt(w, d * k, dt), *bd = as_dt(bias, d, dt), *gd = as_dt(g, rows * d, dt);
    void *y = zeros(rows * d, dt), *dw = zeros(d * k, dt), *db = zeros(d, dt);
    assert_int_equal(ampc_patch_embed_forward(b, hh, ww, ch, p, d, img, 1.0f / 255.0f, -0.5f, wd,
                                              dt, bd, y, dt, AMPC_ACC_F32, NULL, NULL),
                     AMPC_OK);
    assert_int_equal(ampc_patch_embed_backward(b, hh, ww, ch, p, d, img, 1.0f / 255.0f, -0.5f, dt,
                                               gd, dt, dw, db, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    /* the pixels (|x| <= 0.5) are rounded to dt on the way in: each output
     * moves by at most u * 0.5 * sum_k |w_ok| */
    for (int64_t r = 0; r < rows; r++)
      for (int64_t o = 0; o < d; o++) {
        double sw = 0;
        for (int64_t i = 0; i < k; i++)
          sw += fabs((double)w[o * k + i]);
        extra[r * d + o] = unit(dt) * 0.5 * sw;
      }
    cmp("patch_embed", "y", c, y, dt, 1, extra);
    cmp("patch_embed", "db", c, db, dt, 1, NULL);
    /* dw sums g * pixel over the rows: the pixel rounding adds u * sum|g| * 0.5 */
    double *ew = malloc((size_t)(d * k) * sizeof *ew);
    for (int64_t o = 0; o < d; o++) {
      double sg = 0;
      for (int64_t r = 0; r < rows; r++)
        sg += fabs((double)g[r * d + o]);
      for (int64_t i = 0; i < k; i++)
        ew[o * k + i] = unit(dt) * 0.5 * sg;
    }
    cmp("patch_embed", "dw", c, dw, dt, 1, ew);
    free(ew), free(wd), free(bd), free(gd), free(y), free(dw), free(db);
  }
  free(extra), free(img), free(w), free(bias), free(g);
}

static void test_pool_normalize(void **state) {
  (void)state;
  cJSON *c = case_("pool_normalize");
  const int64_t b = ival(c, "b"), t = ival(c, "t"), d = ival(c, "d");
  uint8_t *mask = barr(c, "mask");
  float *x = farr(c, "x", NULL), *g = farr(c, "g", NULL);
  for (int q = 0; q < 3; q++) {
    const ampc_dtype dt = k_dts[q];
    void *xd = as_dt(x, b * t * d, dt), *gd = as_dt(g, b * d, dt);
    void *pooled = zeros(b * d, dt), *y = zeros(b * d, dt), *dp = zeros(b * d, dt),
         *dx = zeros(b * t * d, dt);
    assert_int_equal(ampc_mean_pool_forward(b, t, d, xd, dt, mask, pooled, dt, NULL), AMPC_OK);
    assert_int_equal(ampc_l2norm_forward(b, d, pooled, dt, 1e-12f, y, dt, NULL), AMPC_OK);
    assert_int_equal(ampc_l2norm_backward(b, d, gd, dt, pooled, dt, 1e-12f, dp), AMPC_OK);
    assert_int_equal(ampc_mean_pool_backward(b, t, d, dp, dt, mask, dx), AMPC_OK);
    cmp("pool_normalize", "pooled", c, pooled, dt, 1, NULL);
    /* y = pooled / |pooled|: the rounded pooled (1, relative, also through the
     * norm: 1) and the output rounding (1) */
    cmp("pool_normalize", "y", c, y, dt, 3, NULL);
    /* dx: through the normalisation backward (3 as above) and dp's rounding (1),
     * then the division by the count and its rounding (1) */
    cmp("pool_normalize", "dx", c, dx, dt, 5, NULL);
    free(xd), free(gd), free(pooled), free(y), free(dp), free(dx);
  }
  free(mask), free(x), free(g);
}

static void test_attention(void **state) {
  (void)state;
  cJSON *c = case_("attention");
  const int64_t b = ival(c, "b"), tq = ival(c, "tq"), tk = ival(c, "tk"), h = ival(c, "h"),
                dh = ival(c, "dh"), hd = h * dh;
  uint8_t *km = barr(c, "key_mask");
  float *q = farr(c, "q", NULL), *k = farr(c, "k", NULL), *v = farr(c, "v", NULL),
        *g = farr(c, "g", NULL);
  /* the largest |score| = |q.k| / sqrt(dh) bounds how a score's rounding is
   * amplified by exp: dp <= p * 2 u max|s| */
  double smax = 0, vmax = 0;
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t hi = 0; hi < h; hi++)
      for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < tk; j++) {
          double s = 0;
          for (int64_t e = 0; e < dh; e++)
            s += (double)q[(bi * tq + i) * hd + hi * dh + e] *
                 (double)k[(bi * tk + j) * hd + hi * dh + e];
          smax = fmax(smax, fabs(s) / sqrt((double)dh));
        }
  for (int64_t i = 0; i < b * tk * hd; i++)
    vmax = fmax(vmax, fabs((double)v[i]));
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = k_dts[t];
    void *qd = as_dt(q, b * tq * hd, dt), *kd = as_dt(k, b * tk * hd, dt),
         *vd = as_dt(v, b * tk * hd, dt), *gd = as_dt(g, b * tq * hd, dt);
    void *sc = zeros(b * h * tq * tk, dt), *pr = zeros(b * h * tq * tk, dt),
         *out = zeros(b * tq * hd, dt);
    void *dq = zeros(b * tq * hd, dt), *dk = zeros(b * tk * hd, dt), *dv = zeros(b * tk * hd, dt);
    assert_int_equal(ampc_attention_forward(b, tq, tk, h, dh, qd, hd, kd, hd, vd, hd, dt, km, sc,
                                            dt, pr, dt, out, hd, dt, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    assert_int_equal(ampc_attention_backward(b, tq, tk, h, dh, qd, hd, kd, hd, vd, hd, dt, pr, dt,
                                             gd, hd, dt, dq, hd, dk, hd, dv, hd, AMPC_ACC_F32,
                                             NULL),
                     AMPC_OK);
    /* out = sum_j p_j v_j: rounded scores move p by <= 2 u smax p, rounded p
     * by u p, so out moves by <= u (2 smax + 1) max|v|, plus its own rounding */
    const double amp = 2.0 * smax + 1.0;
    double *ex = malloc((size_t)(b * tq * hd) * sizeof *ex);
    for (int64_t i = 0; i < b * tq * hd; i++)
      ex[i] = unit(dt) * amp * vmax;
    cmp("attention", "out", c, out, dt, 1, ex);
    /* gradients: the same perturbation of p through two more products, to
     * first order; relative to the tensor scale */
    cmp("attention", "dv", c, dv, dt, 1 + amp, NULL);
    cmp("attention", "dq", c, dq, dt, 2 + 2 * amp, NULL);
    cmp("attention", "dk", c, dk, dt, 2 + 2 * amp, NULL);
    free(ex), free(qd), free(kd), free(vd), free(gd), free(sc), free(pr), free(out);
    free(dq), free(dk), free(dv);
  }
  free(km), free(q), free(k), free(v), free(g);
}

static void test_mha(void **state) {
  (void)state;
  cJSON *c = case_("mha");
  const int64_t b = ival(c, "b"), tq = ival(c, "tq"), tk = ival(c, "tk"), dm = ival(c, "dm"),
                h = ival(c, "h");
  uint8_t *km = barr(c, "key_mask");
  const char *pn[8] = {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"};
  float *pf[8];
  for (int i = 0; i < 8; i++)
    pf[i] = farr(c, pn[i], NULL);
  float *xq = farr(c, "xq", NULL), *xkv = farr(c, "xkv", NULL), *g = farr(c, "g", NULL);
  for (int t = 0; t < 3; t++) {
    const ampc_dtype dt = k_dts[t];
    void *pd[8], *dp[8];
    for (int i = 0; i < 8; i++) {
      pd[i] = as_dt(pf[i], i < 4 ? dm * dm : dm, dt);
      dp[i] = zeros(i < 4 ? dm * dm : dm, dt);
    }
    void *xqd = as_dt(xq, b * tq * dm, dt), *xkvd = as_dt(xkv, b * tk * dm, dt),
         *gd = as_dt(g, b * tq * dm, dt);
    ampc_mha_cache cache = {zeros(b * tq * dm, dt),
                            zeros(b * tk * dm, dt),
                            zeros(b * tk * dm, dt),
                            zeros(b * tq * dm, dt),
                            zeros(b * h * tq * tk, dt),
                            zeros(b * h * tq * tk, dt),
                            false,
                            NULL,
                            AMPC_F32};
    void *y = zeros(b * tq * dm, dt), *dxq = zeros(b * tq * dm, dt), *dxkv = zeros(b * tk * dm, dt);
    assert_int_equal(ampc_mha_forward(b, tq, tk, dm, h, xqd, xkvd, dt, pd[0], pd[4], pd[1], pd[5],
                                      pd[2], pd[6], pd[3], pd[7], dt, km, &cache, dt, y,
                                      AMPC_ACC_F32, NULL, NULL),
                     AMPC_OK);
    assert_int_equal(ampc_mha_backward(b, tq, tk, dm, h, xqd, xkvd, dt, pd[0], pd[1], pd[2], pd[3],
                                       dt, &cache, dt, gd, dt, dxq, dxkv, dp[0], dp[4], dp[1],
                                       dp[5], dp[2], dp[6], dp[3], dp[7], AMPC_ACC_F32, NULL, NULL),
                     AMPC_OK);
    /* in 16 bits every activation on the way is stored rounded: q, k, v
     * (1 each), scores (amplified by exp: 2 |s|max, |s| < 4 here), probs (1),
     * o (1), y (1); gradients run the same path back. A first-order count:
     * 16 roundings forward, 32 for the gradients, relative to the tensor scale */
    cmp("mha", "y", c, y, dt, 16, NULL);
    const char *gn[10] = {"dxq", "dxkv", "dwq", "dwk", "dwv", "dwo", "dbq", "dbk", "dbv", "dbo"};
    void *gp[10] = {dxq, dxkv, dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7]};
    for (int i = 0; i < 10; i++)
      if (strcmp(gn[i], "dbk") != 0) /* exactly 0 in math: softmax ignores a shift */
        cmp("mha", gn[i], c, gp[i], dt, 32, NULL);
    for (int i = 0; i < 8; i++)
      free(pd[i]), free(dp[i]);
    free(xqd), free(xkvd), free(gd), free(y), free(dxq), free(dxkv);
    free(cache.q), free(cache.k), free(cache.v), free(cache.o), free(cache.scores);
    free(cache.probs);
  }
  for (int i = 0; i < 8; i++)
    free(pf[i]);
  free(km), free(xq), free(xkv), free(g);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_parity tests/reference/goldens.json\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    fprintf(stderr, "test_parity: cannot open %s\n", argv[1]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)len + 1);
  if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) {
    fprintf(stderr, "test_parity: cannot read %s\n", argv[1]);
    return 1;
  }
  fclose(f);
  text[len] = '\0';
  cJSON *root = cJSON_Parse(text);
  free(text);
  g_cases = root ? cJSON_GetObjectItemCaseSensitive(root, "cases") : NULL;
  if (!g_cases) {
    fprintf(stderr, "test_parity: %s is not a goldens file\n", argv[1]);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear),      cmocka_unit_test(test_layer_norm),
      cmocka_unit_test(test_gelu),        cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_losses),      cmocka_unit_test(test_embedding),
      cmocka_unit_test(test_patch_embed), cmocka_unit_test(test_pool_normalize),
      cmocka_unit_test(test_attention),   cmocka_unit_test(test_mha),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  cJSON_Delete(root);
  return rc;
}
