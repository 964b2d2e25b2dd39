/*
 * tests/test_fused.c: the fused layers (ampc/nn.h: linear + GELU, linear +
 * residual add, the second MLP layer's backward pass with the GELU's, residual
 * add + layer norm, the layer norm's backward pass + the residual add) against the two layers they
 * fuse, called one after the other: every output the same bits, for the preset dtypes, shapes with
 * edge tiles and more than one GEMM block (N > 512, M > 576), one and two threads, with the
 * rounding tally bound (the GEMM's unfused store path) and without, and through the CPU backends'
 * op tables.
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
#include "backend/backend.h"

static uint64_t g_rng = 0x5851F42D4C957F2Du;
static float frand(void) { /* [-1, 1) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (float)((double)((g_rng * 0x2545F4914F6CDD1Du) >> 11) * 0x1p-52 - 1.0);
}

/* n random values in [-s, s) stored in dt */
static void *rnd(ampc_dtype dt, int64_t n, float s) {
  float *f = malloc((size_t)n * sizeof *f);
  void *p = malloc((size_t)n * 4);
  assert_true(f && p);
  for (int64_t i = 0; i < n; i++)
    f[i] = s * frand();
  assert_int_equal(ampc_convert(p, dt, f, AMPC_F32, (size_t)n), AMPC_OK);
  free(f);
  return p;
}

static void *zeros(int64_t n) { return calloc((size_t)n, 4); }

static void same(const void *a, const void *b, ampc_dtype dt, int64_t n, const char *what) {
  if (memcmp(a, b, (size_t)n * ampc_dtype_size(dt)) != 0) {
    print_error("%s: fused and unfused differ\n", what);
    fail();
  }
}

typedef struct {
  ampc_dtype act, weight, grad, stream;
} preset;

/* 16-mixed, bf16-mixed, 32-true, and a stream wider than the activations */
static const preset k_presets[] = {{AMPC_F16, AMPC_F16, AMPC_F16, AMPC_F16},
                                   {AMPC_BF16, AMPC_BF16, AMPC_BF16, AMPC_BF16},
                                   {AMPC_F32, AMPC_F32, AMPC_F32, AMPC_F32},
                                   {AMPC_F16, AMPC_F16, AMPC_F16, AMPC_F32}};
static const int64_t k_shapes[][3] = {{1, 5, 3}, {37, 64, 96}, {300, 128, 1100}, {700, 96, 40}};

static void check_forward(const ampc_backend *be, const preset *pr, int64_t m, int64_t k,
                          int64_t n) {
  const ampc_dtype A = pr->act, W = pr->weight, S = pr->stream;
  void *x = rnd(A, m * k, 2.0f), *w = rnd(W, n * k, 0.3f), *b = rnd(W, n, 1.0f);
  void *r = rnd(S, m * n, 3.0f);
  void *h0 = zeros(m * n), *y0 = zeros(m * n), *h1 = zeros(m * n), *y1 = zeros(m * n);
  /* linear + GELU */
  assert_int_equal(ampc_linear_forward(m, k, n, x, A, w, W, b, h0, A, AMPC_ACC_F32, NULL), AMPC_OK);
  assert_int_equal(ampc_gelu_forward(m * n, h0, A, y0, A, NULL), AMPC_OK);
  assert_int_equal(
      be->linear_gelu_forward(m, k, n, x, A, w, W, b, h1, A, y1, A, AMPC_ACC_F32, NULL, NULL),
      AMPC_OK);
  same(h0, h1, A, m * n, "linear_gelu h");
  same(y0, y1, A, m * n, "linear_gelu y");
  /* linear + residual add */
  void *o0 = zeros(m * n), *o1 = zeros(m * n);
  assert_int_equal(ampc_linear_forward(m, k, n, x, A, w, W, b, h0, A, AMPC_ACC_F32, NULL), AMPC_OK);
  assert_int_equal(ampc_add_forward(m * n, r, S, h0, A, o0, S, NULL), AMPC_OK);
  assert_int_equal(be->linear_residual_forward(m, k, n, x, A, w, W, b, h1, A, r, S, o1, S,
                                               AMPC_ACC_F32, NULL, NULL),
                   AMPC_OK);
  same(h0, h1, A, m * n, "linear_residual t");
  same(o0, o1, S, m * n, "linear_residual y");
  /* residual add + layer norm, rows of n */
  void *a2 = rnd(A, m * n, 2.0f);
  float *mu0 = calloc((size_t)m, 4), *rs0 = calloc((size_t)m, 4), *mu1 = calloc((size_t)m, 4),
        *rs1 = calloc((size_t)m, 4);
  void *g = rnd(W, n, 1.5f);
  assert_true(mu0 && rs0 && mu1 && rs1);
  assert_int_equal(ampc_add_forward(m * n, r, S, a2, A, o0, S, NULL), AMPC_OK);
  assert_int_equal(ampc_layernorm_forward(m, n, o0, S, g, b, W, 1e-5f, y0, A, mu0, rs0, NULL),
                   AMPC_OK);
  assert_int_equal(
      be->add_layernorm_forward(m, n, r, S, a2, A, o1, S, g, b, W, 1e-5f, y1, A, mu1, rs1, NULL),
      AMPC_OK);
  same(o0, o1, S, m * n, "add_layernorm s");
  same(y0, y1, A, m * n, "add_layernorm y");
  same(mu0, mu1, AMPC_F32, m, "add_layernorm mean");
  same(rs0, rs1, AMPC_F32, m, "add_layernorm rstd");
  /* the layer norm's backward pass with the residual add after it */
  {
    const ampc_dtype G = pr->grad;
    void *dy = rnd(G, m * n, 1.0f), *res0 = rnd(G, m * n, 2.0f), *dg0 = rnd(G, n, 0.1f);
    void *db0 = rnd(G, n, 0.1f), *res1 = malloc((size_t)(m * n) * 4), *dg1 = malloc((size_t)n * 4);
    void *db1 = malloc((size_t)n * 4), *dx0 = zeros(m * n), *dx1 = zeros(m * n);
    const size_t gs = ampc_dtype_size(G);
    memcpy(res1, res0, (size_t)(m * n) * gs);
    memcpy(dg1, dg0, (size_t)n * gs);
    memcpy(db1, db0, (size_t)n * gs);
    assert_int_equal(
        ampc_layernorm_backward(m, n, dy, G, o0, S, g, W, mu0, rs0, dx0, dg0, db0, NULL), AMPC_OK);
    assert_int_equal(ampc_add_forward(m * n, res0, G, dx0, G, res0, G, NULL), AMPC_OK);
    assert_int_equal(
        be->layernorm_backward_add(m, n, dy, G, o0, S, g, W, mu0, rs0, dx1, dg1, db1, res1, NULL),
        AMPC_OK);
    same(dx0, dx1, G, m * n, "layernorm_backward_add dx");
    same(res0, res1, G, m * n, "layernorm_backward_add dres");
    same(dg0, dg1, G, n, "layernorm_backward_add dgamma");
    same(db0, db1, G, n, "layernorm_backward_add dbeta");
    free(dy), free(res0), free(dg0), free(db0), free(res1), free(dg1), free(db1), free(dx0),
        free(dx1);
  }
  free(x), free(w), free(b), free(r), free(h0), free(y0), free(h1), free(y1), free(o0), free(o1);
  free(a2), free(mu0), free(rs0), free(mu1), free(rs1), free(g);
}

/* the second MLP layer (k inputs = the GELU's width, n outputs) */
static void check_backward(const ampc_backend *be, const preset *pr, int64_t m, int64_t k,
                           int64_t n) {
  const ampc_dtype A = pr->act, W = pr->weight, G = pr->grad;
  void *dy = rnd(G, m * n, 1.0f), *x = rnd(A, m * k, 1.0f), *w = rnd(W, n * k, 0.3f);
  void *h = rnd(A, m * k, 3.0f);
  void *dw0 = rnd(G, n * k, 0.1f), *db0 = rnd(G, n, 0.1f);
  void *dw1 = malloc((size_t)(n * k) * 4), *db1 = malloc((size_t)n * 4);
  memcpy(dw1, dw0, (size_t)(n * k) * ampc_dtype_size(G));
  memcpy(db1, db0, (size_t)n * ampc_dtype_size(G));
  void *dx0 = zeros(m * k), *dh0 = zeros(m * k), *dx1 = zeros(m * k), *dh1 = zeros(m * k);
  assert_int_equal(
      ampc_linear_backward(m, k, n, dy, G, x, A, w, W, dx0, dw0, db0, AMPC_ACC_F32, NULL), AMPC_OK);
  assert_int_equal(ampc_gelu_backward(m * k, dx0, G, h, A, dh0), AMPC_OK);
  assert_int_equal(be->linear_backward_gelu(m, k, n, dy, G, x, A, w, W, h, A, dx1, dh1, dw1, db1,
                                            AMPC_ACC_F32, NULL, NULL),
                   AMPC_OK);
  same(dx0, dx1, G, m * k, "backward_gelu dx");
  same(dh0, dh1, G, m * k, "backward_gelu dh");
  same(dw0, dw1, G, n * k, "backward_gelu dW");
  same(db0, db1, G, n, "backward_gelu db");
  free(dy), free(x), free(w), free(h), free(dw0), free(db0), free(dw1), free(db1);
  free(dx0), free(dh0), free(dx1), free(dh1);
}

static void test_fused_same_bits(void **state) {
  (void)state;
  const ampc_backend *tables[2] = {&ampc_backend_cpu_table, &ampc_backend_cpu_split_table};
  for (int t = 1; t <= 2; t++) {
    ampc_set_num_threads(t);
    for (int tally = 0; tally < 2; tally++) {
      ampc_tally *tl = tally ? ampc_tally_create() : NULL, *was = ampc_tally_bind(tl);
      for (size_t p = 0; p < sizeof k_presets / sizeof k_presets[0]; p++)
        for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
          const int64_t *sh = k_shapes[s];
          check_forward(tables[(p + s) % 2], &k_presets[p], sh[0], sh[1], sh[2]);
          check_backward(tables[(p + s + 1) % 2], &k_presets[p], sh[0], sh[1], sh[2]);
        }
      (void)ampc_tally_bind(was);
      ampc_tally_free(tl);
    }
  }
  ampc_set_num_threads(0);
}

/* Non-finite values go through the fused store as through the two layers
 * (an overflowing product, a NaN input row), and bad arguments are refused. */
static void test_fused_special(void **state) {
  (void)state;
  enum { M = 13, K = 8, N = 40 };
  const preset pr = {AMPC_F16, AMPC_F16, AMPC_F16, AMPC_F16};
  ampc_f16 x[M * K], w[N * K], b[N], h0[M * N], y0[M * N], h1[M * N], y1[M * N];
  for (int i = 0; i < M * K; i++)
    x[i] = ampc_f32_to_f16(i % 7 == 3 ? 60000.0f : frand());
  x[5] = ampc_f32_to_f16(NAN);
  for (int i = 0; i < N * K; i++)
    w[i] = ampc_f32_to_f16(i % 5 == 1 ? 2.0f : frand());
  for (int i = 0; i < N; i++)
    b[i] = ampc_f32_to_f16(frand());
  assert_int_equal(
      ampc_linear_forward(M, K, N, x, pr.act, w, pr.weight, b, h0, pr.act, AMPC_ACC_F32, NULL),
      AMPC_OK);
  assert_int_equal(ampc_gelu_forward(M * N, h0, pr.act, y0, pr.act, NULL), AMPC_OK);
  assert_int_equal(ampc_linear_gelu_forward(M, K, N, x, pr.act, w, pr.weight, b, h1, pr.act, y1,
                                            pr.act, AMPC_ACC_F32, NULL, NULL),
                   AMPC_OK);
  same(h0, h1, pr.act, M * N, "non-finite h");
  same(y0, y1, pr.act, M * N, "non-finite y");
  int inf = 0, nan = 0;
  for (int i = 0; i < M * N; i++)
    inf += isinf(ampc_f16_to_f32(h1[i])), nan += isnan(ampc_f16_to_f32(h1[i]));
  assert_true(inf > 0 && nan > 0);
  /* refusals name the op */
  assert_int_equal(ampc_linear_gelu_forward(0, K, N, x, pr.act, w, pr.weight, b, h1, pr.act, y1,
                                            pr.act, AMPC_ACC_F32, NULL, NULL),
                   AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "ampc_linear_gelu_forward"));
  assert_int_equal(ampc_linear_residual_forward(M, K, N, x, pr.act, w, pr.weight, b, h1, pr.act,
                                                NULL, pr.act, y1, pr.act, AMPC_ACC_F32, NULL, NULL),
                   AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_linear_backward_gelu(M, K, N, y0, pr.grad, x, pr.act, w, pr.weight, NULL,
                                             pr.act, h1, y1, w, b, AMPC_ACC_F32, NULL, NULL),
                   AMPC_ERR_INVALID_ARG);
  float mu[M], rs[M];
  assert_int_equal(ampc_layernorm_backward_add(M, N, y0, pr.grad, h0, pr.act, b, pr.weight, mu, rs,
                                               h1, y1, b, h1, NULL),
                   AMPC_ERR_INVALID_ARG); /* dres is dx */
  assert_int_equal(ampc_add_layernorm_forward(M, N, h0, pr.act, y0, pr.act, h1, pr.act, b, b,
                                              pr.weight, -1.0f, y1, pr.act, mu, rs, NULL),
                   AMPC_ERR_INVALID_ARG);
}

/* The 16-bit GELU's vector path (a table gather, AVX-512) gives the scalar
 * loop's bits (the one that runs while a rounding tally is bound) on every
 * bit pattern of binary16 and bfloat16, NaNs and infinities included,
 * forward and backward (in place too). */
static void test_gelu16_every_input(void **state) {
  (void)state;
  enum { N = 65536 };
  const ampc_dtype dts[2] = {AMPC_F16, AMPC_BF16};
  uint16_t *x = malloc(N * 2), *dy = malloc(N * 2), *v0 = malloc(N * 2), *v1 = malloc(N * 2);
  assert_true(x && dy && v0 && v1);
  for (int d = 0; d < 2; d++) {
    for (int i = 0; i < N; i++) {
      x[i] = (uint16_t)i;
      const float g = 4.0f * frand();
      assert_int_equal(ampc_convert(&dy[i], dts[d], &g, AMPC_F32, 1), AMPC_OK);
    }
    dy[7] = x[N - 1]; /* a NaN gradient */
    for (int bwd = 0; bwd < 2; bwd++) {
      for (int slow = 0; slow < 2; slow++) {
        ampc_tally *tl = slow ? ampc_tally_create() : NULL, *was = ampc_tally_bind(tl);
        uint16_t *out = slow ? v1 : v0;
        if (bwd) {
          memcpy(out, dy, N * 2); /* in place: dx = dy */
          assert_int_equal(ampc_gelu_backward(N - 3, out, dts[d], x, dts[d], out), AMPC_OK);
        } else
          assert_int_equal(ampc_gelu_forward(N - 3, x, dts[d], out, dts[d], NULL), AMPC_OK);
        (void)ampc_tally_bind(was);
        ampc_tally_free(tl);
      }
      if (memcmp(v0, v1, (N - 3) * 2) != 0) {
        print_error("%s GELU (%s): vector and scalar paths differ\n", ampc_dtype_name(dts[d]),
                    bwd ? "backward" : "forward");
        fail();
      }
    }
  }
  free(x), free(dy), free(v0), free(v1);
}

/* ---- edges: shapes, values and dtypes the tests above do not reach ---- */

/* n values of dt, each s * frand() except (by mode) 1: +-60000 (binary16
 * products overflow), 2: NaN and inf, 3: FP32/bfloat16 subnormals, values
 * that underflow binary16, and binary16 subnormals, 4: |x| < 2^-56 (outside
 * VDPBF16PS's range: the bf16 GEMM falls back to the FMA kernel mid-way) */
static void *rnd_mode(ampc_dtype dt, int64_t n, float s, int mode) {
  float *f = malloc((size_t)n * sizeof *f);
  void *p = malloc((size_t)n * 4);
  assert_true(f && p);
  for (int64_t i = 0; i < n; i++) {
    float v = s * frand();
    if (mode == 1 && i % 7 == 3)
      v = i % 2 ? 60000.0f : -60000.0f;
    else if (mode == 2 && i % 11 == 5)
      v = i % 3 ? NAN : -INFINITY;
    else if (mode == 3 && i % 3 == 0)
      v = ldexpf(frand(), -140 + (int)(i % 10));
    else if (mode == 3 && i % 3 == 1)
      v = ldexpf(frand(), -18);
    else if (mode == 4 && i % 5 == 2)
      v = ldexpf(1.0f + 0.5f * frand(), -60 - (int)(i % 20));
    f[i] = v;
  }
  assert_int_equal(ampc_convert(p, dt, f, AMPC_F32, (size_t)n), AMPC_OK);
  free(f);
  return p;
}

static void *copy_of(const void *p, ampc_dtype dt, int64_t n) {
  void *q = malloc((size_t)n * 4);
  assert_non_null(q);
  memcpy(q, p, (size_t)n * ampc_dtype_size(dt));
  return q;
}

/* the tally's counts of two runs */
static void same_counts(const ampc_tm_stats *a, const ampc_tm_stats *b, const char *what) {
  if (memcmp(&a->r, &b->r, sizeof a->r) != 0 || a->zeros != b->zeros ||
      memcmp(a->hist, b->hist, sizeof a->hist) != 0) {
    print_error("%s: the rounding tally counts differ between fused and unfused\n", what);
    fail();
  }
}

typedef struct {
  ampc_dtype x, w, h, y, s; /* input, weight, product (and gradient), output, stream */
} edge_dts;

/* One shape, dtypes and value mode through all five fused layers against
 * their two ops, and the GEMM epilogues inside the unfused linear layer
 * against what they replace: the bias laid into the output with beta = 1,
 * the bias gradient as FP32 column sums of dy (rows in order) added with one
 * rounding, dW from ampc_gemm without an epilogue. tl: the bound tally (its
 * counts compared too), or NULL. */
static void check_edge(const edge_dts *e, int64_t m, int64_t k, int64_t n, int mode,
                       ampc_tally *tl) {
  const ampc_dtype X = e->x, W = e->w, H = e->h, Y = e->y, S = e->s;
  void *x = rnd_mode(X, m * k, 2.0f, mode), *w = rnd_mode(W, n * k, 0.5f, mode);
  void *b = rnd_mode(W, n, 1.0f, mode == 4 ? 0 : mode), *r = rnd_mode(S, m * n, 3.0f, mode);
  void *h0 = zeros(m * n), *y0 = zeros(m * n), *h1 = zeros(m * n), *y1 = zeros(m * n);
  ampc_tm_stats c0, c1;
  ampc_tally_drain(tl, &c0);
  /* linear + GELU */
  assert_int_equal(ampc_linear_forward(m, k, n, x, X, w, W, b, h0, H, AMPC_ACC_F32, NULL), AMPC_OK);
  assert_int_equal(ampc_gelu_forward(m * n, h0, H, y0, Y, NULL), AMPC_OK);
  ampc_tally_drain(tl, &c0);
  assert_int_equal(
      ampc_linear_gelu_forward(m, k, n, x, X, w, W, b, h1, H, y1, Y, AMPC_ACC_F32, NULL, NULL),
      AMPC_OK);
  ampc_tally_drain(tl, &c1);
  same(h0, h1, H, m * n, "edge linear_gelu h");
  same(y0, y1, Y, m * n, "edge linear_gelu y");
  same_counts(&c0, &c1, "edge linear_gelu");
  { /* the bias laid into h, then ampc_gemm with beta = 1 */
    void *hr = zeros(m * n);
    float *bf = malloc((size_t)n * sizeof *bf);
    assert_non_null(bf);
    assert_int_equal(ampc_convert(bf, AMPC_F32, b, W, (size_t)n), AMPC_OK);
    for (int64_t i = 0; i < m; i++)
      assert_int_equal(ampc_convert((char *)hr + (size_t)(i * n) * ampc_dtype_size(H), H, bf,
                                    AMPC_F32, (size_t)n),
                       AMPC_OK);
    assert_int_equal(ampc_gemm(AMPC_OP_N, AMPC_OP_T, m, n, k, 1.0f, x, X, k, w, W, k, 1.0f, hr, H,
                               n, AMPC_ACC_F32),
                     AMPC_OK);
    same(hr, h0, H, m * n, "edge linear_forward against the laid bias");
    free(hr), free(bf);
  }
  /* linear + residual add */
  ampc_tally_drain(tl, &c0);
  assert_int_equal(ampc_linear_forward(m, k, n, x, X, w, W, b, h0, H, AMPC_ACC_F32, NULL), AMPC_OK);
  assert_int_equal(ampc_add_forward(m * n, r, S, h0, H, y0, Y, NULL), AMPC_OK);
  ampc_tally_drain(tl, &c0);
  assert_int_equal(ampc_linear_residual_forward(m, k, n, x, X, w, W, b, h1, H, r, S, y1, Y,
                                                AMPC_ACC_F32, NULL, NULL),
                   AMPC_OK);
  ampc_tally_drain(tl, &c1);
  same(h0, h1, H, m * n, "edge linear_residual t");
  same(y0, y1, Y, m * n, "edge linear_residual y");
  same_counts(&c0, &c1, "edge linear_residual");
  /* residual add + layer norm over rows of n, and its backward pass + add */
  void *a2 = rnd_mode(H, m * n, 2.0f, mode), *g = rnd(W, n, 1.5f);
  void *s0 = zeros(m * n), *s1 = zeros(m * n);
  float *mu0 = calloc((size_t)m, 4), *rs0 = calloc((size_t)m, 4), *mu1 = calloc((size_t)m, 4),
        *rs1 = calloc((size_t)m, 4);
  assert_true(mu0 && rs0 && mu1 && rs1);
  ampc_tally_drain(tl, &c0);
  assert_int_equal(ampc_add_forward(m * n, r, S, a2, H, s0, S, NULL), AMPC_OK);
  assert_int_equal(ampc_layernorm_forward(m, n, s0, S, g, b, W, 1e-5f, y0, Y, mu0, rs0, NULL),
                   AMPC_OK);
  ampc_tally_drain(tl, &c0);
  assert_int_equal(
      ampc_add_layernorm_forward(m, n, r, S, a2, H, s1, S, g, b, W, 1e-5f, y1, Y, mu1, rs1, NULL),
      AMPC_OK);
  ampc_tally_drain(tl, &c1);
  same(s0, s1, S, m * n, "edge add_layernorm s");
  same(y0, y1, Y, m * n, "edge add_layernorm y");
  same(mu0, mu1, AMPC_F32, m, "edge add_layernorm mean");
  same(rs0, rs1, AMPC_F32, m, "edge add_layernorm rstd");
  same_counts(&c0, &c1, "edge add_layernorm");
  {
    void *dy = rnd_mode(H, m * n, 1.0f, mode), *res0 = rnd_mode(H, m * n, 2.0f, mode);
    void *dg0 = rnd(H, n, 0.1f), *db0 = rnd(H, n, 0.1f);
    void *res1 = copy_of(res0, H, m * n), *dg1 = copy_of(dg0, H, n), *db1 = copy_of(db0, H, n);
    void *dx0 = zeros(m * n), *dx1 = zeros(m * n);
    ampc_tally_drain(tl, &c0);
    assert_int_equal(
        ampc_layernorm_backward(m, n, dy, H, s0, S, g, W, mu0, rs0, dx0, dg0, db0, NULL), AMPC_OK);
    assert_int_equal(ampc_add_forward(m * n, res0, H, dx0, H, res0, H, NULL), AMPC_OK);
    ampc_tally_drain(tl, &c0);
    assert_int_equal(
        ampc_layernorm_backward_add(m, n, dy, H, s0, S, g, W, mu0, rs0, dx1, dg1, db1, res1, NULL),
        AMPC_OK);
    ampc_tally_drain(tl, &c1);
    same(dx0, dx1, H, m * n, "edge layernorm_backward_add dx");
    same(res0, res1, H, m * n, "edge layernorm_backward_add dres");
    same(dg0, dg1, H, n, "edge layernorm_backward_add dgamma");
    same(db0, db1, H, n, "edge layernorm_backward_add dbeta");
    same_counts(&c0, &c1, "edge layernorm_backward_add");
    free(dy), free(res0), free(dg0), free(db0), free(res1), free(dg1), free(db1), free(dx0),
        free(dx1);
  }
  free(a2), free(g), free(s0), free(s1), free(mu0), free(rs0), free(mu1), free(rs1);
  { /* the second MLP layer's backward pass (k -> n), gradients in H */
    void *dy = rnd_mode(H, m * n, 1.0f, mode), *hh = rnd_mode(X, m * k, 3.0f, mode);
    void *dw0 = rnd(H, n * k, 0.1f), *db0 = rnd(H, n, 0.1f);
    void *dw1 = copy_of(dw0, H, n * k), *db1 = copy_of(db0, H, n), *dw2 = copy_of(dw0, H, n * k);
    void *dx0 = zeros(m * k), *dh0 = zeros(m * k), *dx1 = zeros(m * k), *dh1 = zeros(m * k);
    float *dyf = malloc((size_t)(m * n) * sizeof *dyf), *dbf = malloc((size_t)n * sizeof *dbf);
    assert_true(dyf && dbf);
    assert_int_equal(ampc_convert(dbf, AMPC_F32, db0, H, (size_t)n), AMPC_OK);
    ampc_tally_drain(tl, &c0);
    assert_int_equal(
        ampc_linear_backward(m, k, n, dy, H, x, X, w, W, dx0, dw0, db0, AMPC_ACC_F32, NULL),
        AMPC_OK);
    assert_int_equal(ampc_gelu_backward(m * k, dx0, H, hh, X, dh0), AMPC_OK);
    ampc_tally_drain(tl, &c0);
    assert_int_equal(ampc_linear_backward_gelu(m, k, n, dy, H, x, X, w, W, hh, X, dx1, dh1, dw1,
                                               db1, AMPC_ACC_F32, NULL, NULL),
                     AMPC_OK);
    ampc_tally_drain(tl, &c1);
    same(dx0, dx1, H, m * k, "edge linear_backward_gelu dx");
    same(dh0, dh1, H, m * k, "edge linear_backward_gelu dh");
    same(dw0, dw1, H, n * k, "edge linear_backward_gelu dW");
    same(db0, db1, H, n, "edge linear_backward_gelu db");
    same_counts(&c0, &c1, "edge linear_backward_gelu");
    /* dW without the epilogue; db as FP32 column sums in row order, one rounding each */
    assert_int_equal(ampc_gemm(AMPC_OP_T, AMPC_OP_N, n, k, m, 1.0f, dy, H, n, x, X, k, 1.0f, dw2, H,
                               k, AMPC_ACC_F32),
                     AMPC_OK);
    same(dw2, dw0, H, n * k, "edge linear_backward dW against ampc_gemm");
    assert_int_equal(ampc_convert(dyf, AMPC_F32, dy, H, (size_t)(m * n)), AMPC_OK);
    for (int64_t j = 0; j < n; j++) {
      float s = 0.0f;
      for (int64_t i = 0; i < m; i++)
        s += dyf[i * n + j];
      dbf[j] += s;
    }
    void *db2 = zeros(n);
    assert_int_equal(ampc_convert(db2, H, dbf, AMPC_F32, (size_t)n), AMPC_OK);
    same(db2, db0, H, n, "edge linear_backward db against FP32 column sums");
    ampc_tally_drain(tl, &c0);
    free(dy), free(hh), free(dw0), free(db0), free(dw1), free(db1), free(dw2), free(db2);
    free(dx0), free(dh0), free(dx1), free(dh1), free(dyf), free(dbf);
  }
  free(x), free(w), free(b), free(r), free(h0), free(y0), free(h1), free(y1);
}

/* m = 1, k = 1, widths off the 16/32-column tiles, a bias row wider than the
 * stack's 4096, layer-norm rows of 2048 (fused) and 2049 (the two ops);
 * overflow, NaN, subnormals, bfloat16 outside VDPBF16PS's range; mixed
 * dtypes; one and two threads, tally bound or not. */
static void test_fused_edges(void **state) {
  (void)state;
  const ampc_dtype F = AMPC_F32, H = AMPC_F16, B = AMPC_BF16;
  static const edge_dts dts[] = {{H, H, H, H, H}, {B, B, B, B, B}, {F, F, F, F, F},
                                 {H, F, F, H, F}, {B, B, F, B, F}, {H, H, F, H, H}};
  static const int64_t shapes[][3] = {{1, 1, 1},    {1, 7, 17},   {3, 1, 33},   {5, 300, 31},
                                      {2, 3, 2048}, {2, 3, 2049}, {3, 2, 4097}, {37, 20, 530}};
  const int ndt = (int)(sizeof dts / sizeof dts[0]);
  const int nsh = (int)(sizeof shapes / sizeof shapes[0]);
  for (int t = 1; t <= 2; t++) {
    ampc_set_num_threads(t);
    for (int tally = 0; tally < 2; tally++) {
      ampc_tally *tl = tally ? ampc_tally_create() : NULL, *was = ampc_tally_bind(tl);
      for (int d = 0; d < ndt; d++)
        for (int s = 0; s < nsh; s++)
          for (int mode = 0; mode < 5; mode++)
            if ((d + s + mode + t + tally) % 2 == 0 || s < 4) /* a mix of the large cases */
              check_edge(&dts[d], shapes[s][0], shapes[s][1], shapes[s][2], mode, tl);
      (void)ampc_tally_bind(was);
      ampc_tally_free(tl);
    }
  }
  ampc_set_num_threads(0);
}

/* The GELU backward pass's vector path gives the scalar loop's bits for
 * every gradient bit pattern too (the test above sweeps x), with x at zeros,
 * subnormals, normals and the largest finite values (where the factor is
 * finite; x = +inf, whose factor is a NaN, is in test_fused_aliasing_and_nan). */
static void test_gelu16_backward_every_gradient(void **state) {
  (void)state;
  enum { N = 65536 };
  const ampc_dtype dts[2] = {AMPC_F16, AMPC_BF16};
  static const uint16_t xs[2][12] = {{0x0000, 0x8001, 0x03ff, 0x3c00, 0xc200, 0x7bff, 0xfbff,
                                      0x0400, 0x8400, 0x4900, 0xcc00, 0x3555},
                                     {0x0000, 0x8001, 0x007f, 0x3f80, 0xc040, 0x7f7f, 0xff7f,
                                      0x0080, 0x8080, 0x4120, 0xc180, 0x3eaa}};
  uint16_t *x = malloc(N * 2), *v0 = malloc(N * 2), *v1 = malloc(N * 2);
  assert_true(x && v0 && v1);
  for (int d = 0; d < 2; d++)
    for (int p = 0; p < 12; p++) {
      for (int i = 0; i < N; i++)
        x[i] = xs[d][p];
      for (int slow = 0; slow < 2; slow++) {
        ampc_tally *tl = slow ? ampc_tally_create() : NULL, *was = ampc_tally_bind(tl);
        uint16_t *out = slow ? v1 : v0;
        for (int i = 0; i < N; i++)
          out[i] = (uint16_t)i; /* in place: dx = dy */
        assert_int_equal(ampc_gelu_backward(N, out, dts[d], x, dts[d], out), AMPC_OK);
        (void)ampc_tally_bind(was);
        ampc_tally_free(tl);
      }
      if (memcmp(v0, v1, N * 2) != 0) {
        print_error("%s GELU backward at x = %04x: vector and scalar paths differ\n",
                    ampc_dtype_name(dts[d]), xs[d][p]);
        fail();
      }
    }
  free(x), free(v0), free(v1);
}

/* ---- refusals, aliasing and NaNs (found by a review of the fused layers):
 * each check states the contract it holds the code to ---- */

static int g_bad;

/* a refusal whose message names the public function called */
static void want_refusal(ampc_status st, const char *fn, const char *what) {
  if (st == AMPC_OK || !strstr(ampc_last_error(), fn)) {
    print_error("%s: status %d, message \"%s\" (want a refusal naming %s)\n", what, (int)st,
                st == AMPC_OK ? "" : ampc_last_error(), fn);
    g_bad++;
  }
}

/* either refused, or the bits of the two ops (buffers of n elements of dt) */
static void want_refused_or_same(ampc_status st, const void *a, const void *b, ampc_dtype dt,
                                 int64_t n, const char *what) {
  if (st == AMPC_OK && memcmp(a, b, (size_t)n * ampc_dtype_size(dt)) != 0) {
    print_error("%s: accepted, and the result differs from the two ops'\n", what);
    g_bad++;
  }
}

static void test_fused_aliasing_and_nan(void **state) {
  (void)state;
  g_bad = 0;
  const ampc_dtype H = AMPC_F16, F = AMPC_F32;
  { /* refusals name the fused function, not ampc_linear_forward or ampc_gemm */
    enum { M = 4, K = 8, N = 24 };
    void *x = rnd(H, M * K, 1.0f), *w = rnd(H, N * K, 0.3f), *b = rnd(H, N, 1.0f);
    void *r = rnd(H, M * N, 1.0f), *h = zeros(M * N), *y = zeros(M * N);
    want_refusal(
        ampc_linear_gelu_forward(M, 0, N, x, H, w, H, b, h, H, y, H, AMPC_ACC_F32, NULL, NULL),
        "ampc_linear_gelu_forward", "linear_gelu_forward k = 0");
    want_refusal(
        ampc_linear_gelu_forward(M, K, N, x, H, w, H, b, NULL, H, y, H, AMPC_ACC_F32, NULL, NULL),
        "ampc_linear_gelu_forward", "linear_gelu_forward h NULL");
    want_refusal(ampc_linear_gelu_forward(M, K, N, x, H, w, H, b, h, (ampc_dtype)99, y, H,
                                          AMPC_ACC_F32, NULL, NULL),
                 "ampc_linear_gelu_forward", "linear_gelu_forward hdt 99");
    want_refusal(
        ampc_linear_gelu_forward(M, K, N, x, H, w, H, b, h, H, y, H, (ampc_acc)9, NULL, NULL),
        "ampc_linear_gelu_forward", "linear_gelu_forward acc 9");
    want_refusal(ampc_linear_residual_forward(M, 0, N, x, H, w, H, b, h, H, r, H, y, H,
                                              AMPC_ACC_F32, NULL, NULL),
                 "ampc_linear_residual_forward", "linear_residual_forward k = 0");
    want_refusal(ampc_linear_residual_forward(M, K, N, x, H, w, H, b, NULL, H, r, H, y, H,
                                              AMPC_ACC_F32, NULL, NULL),
                 "ampc_linear_residual_forward", "linear_residual_forward t NULL");
    /* nn.h: "y may not be t" */
    want_refusal(ampc_linear_residual_forward(M, K, N, x, H, w, H, b, h, H, r, H, h, H,
                                              AMPC_ACC_F32, NULL, NULL),
                 "ampc_linear_residual_forward", "linear_residual_forward y == t");
    void *dy = rnd(H, M * N, 1.0f), *dx = zeros(M * K), *dw = zeros(N * K), *db = zeros(N);
    void *hh = rnd(H, M * K, 2.0f);
    want_refusal(ampc_linear_backward_gelu(M, K, N, dy, H, x, H, w, H, hh, H, dx, dx, dw, db,
                                           (ampc_acc)3, NULL, NULL),
                 "ampc_linear_backward_gelu", "linear_backward_gelu acc 3");
    /* nn.h: "dx and dh distinct" */
    want_refusal(ampc_linear_backward_gelu(M, K, N, dy, H, x, H, w, H, hh, H, dx, dx, dw, db,
                                           AMPC_ACC_F32, NULL, NULL),
                 "ampc_linear_backward_gelu", "linear_backward_gelu dh == dx");
    free(x), free(w), free(b), free(r), free(h), free(y), free(dy), free(dx), free(dw), free(db),
        free(hh);
  }
  { /* y over t with t F32 and y F16: the bytes of y land on t's elements
     * that other GEMM blocks have not written yet */
    enum { M = 300, K = 64, N = 1100 };
    void *x = rnd(H, M * K, 1.0f), *w = rnd(H, N * K, 0.1f), *b = rnd(H, N, 1.0f);
    void *r = rnd(H, M * N, 1.0f), *t0 = zeros(M * N), *y0 = zeros(M * N), *t1 = zeros(M * N);
    assert_int_equal(ampc_linear_forward(M, K, N, x, H, w, H, b, t0, F, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    assert_int_equal(ampc_add_forward(M * N, r, H, t0, F, y0, H, NULL), AMPC_OK);
    const ampc_status st = ampc_linear_residual_forward(M, K, N, x, H, w, H, b, t1, F, r, H, t1, H,
                                                        AMPC_ACC_F32, NULL, NULL);
    want_refused_or_same(st, y0, t1, H, M * N, "linear_residual_forward y == t (t f32, y f16)");
    free(x), free(w), free(b), free(r), free(t0), free(y0), free(t1);
  }
  { /* an output over a GEMM input (k == n): the two ops in sequence read
     * all of x (or dy) before the second op writes; the fused layer writes
     * each finished block while other blocks still read */
    enum { M = 64, K = 1024, N = 1024 };
    ampc_set_num_threads(1);
    void *x = rnd(H, M * K, 1.0f), *w = rnd(H, N * K, 0.05f), *b = rnd(H, N, 1.0f);
    void *r = rnd(H, M * N, 1.0f), *t0 = zeros(M * N), *t1 = zeros(M * N);
    void *x0 = copy_of(x, H, M * K), *x1 = copy_of(x, H, M * K);
    assert_int_equal(ampc_linear_forward(M, K, N, x0, H, w, H, b, t0, H, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    assert_int_equal(ampc_add_forward(M * N, r, H, t0, H, x0, H, NULL), AMPC_OK);
    ampc_status st = ampc_linear_residual_forward(M, K, N, x1, H, w, H, b, t1, H, r, H, x1, H,
                                                  AMPC_ACC_F32, NULL, NULL);
    want_refused_or_same(st, x0, x1, H, M * N, "linear_residual_forward y == x");
    memcpy(x0, x, (size_t)(M * K) * 2), memcpy(x1, x, (size_t)(M * K) * 2);
    assert_int_equal(ampc_linear_forward(M, K, N, x0, H, w, H, b, t0, H, AMPC_ACC_F32, NULL),
                     AMPC_OK);
    assert_int_equal(ampc_gelu_forward(M * N, t0, H, x0, H, NULL), AMPC_OK);
    st = ampc_linear_gelu_forward(M, K, N, x1, H, w, H, b, t1, H, x1, H, AMPC_ACC_F32, NULL, NULL);
    want_refused_or_same(st, x0, x1, H, M * N, "linear_gelu_forward y == x");
    /* the backward pass with dh over dy: dW and db then read the overwritten dy */
    void *dy0 = rnd(H, M * N, 1.0f), *dy1 = copy_of(dy0, H, M * N), *hh = rnd(H, M * K, 3.0f);
    void *dw0 = zeros(N * K), *dw1 = zeros(N * K), *db0 = zeros(N), *db1 = zeros(N);
    void *dx0 = zeros(M * K), *dx1 = zeros(M * K);
    assert_int_equal(
        ampc_linear_backward(M, K, N, dy0, H, x, H, w, H, dx0, dw0, db0, AMPC_ACC_F32, NULL),
        AMPC_OK);
    assert_int_equal(ampc_gelu_backward(M * K, dx0, H, hh, H, dy0), AMPC_OK);
    st = ampc_linear_backward_gelu(M, K, N, dy1, H, x, H, w, H, hh, H, dx1, dy1, dw1, db1,
                                   AMPC_ACC_F32, NULL, NULL);
    want_refused_or_same(st, dw0, dw1, H, N * K, "linear_backward_gelu dh == dy: dW");
    want_refused_or_same(st, db0, db1, H, N, "linear_backward_gelu dh == dy: db");
    free(x), free(w), free(b), free(r), free(t0), free(t1), free(x0), free(x1), free(dy0),
        free(dy1), free(hh), free(dw0), free(dw1), free(db0), free(db1), free(dx0), free(dx1);
    ampc_set_num_threads(0);
  }
  { /* dy and the GELU factor both NaN (x = +inf: the factor is NaN): which
     * NaN comes out depends on the compiler's operand order (the vector
     * table path and the scalar loop differ in a -O2 AMPC_SANITIZE build) */
    enum { NG = 65536 };
    uint16_t *xg = malloc(NG * 2), *v0 = malloc(NG * 2), *v1 = malloc(NG * 2);
    assert_true(xg && v0 && v1);
    for (int i = 0; i < NG; i++)
      xg[i] = 0x7c00;
    for (int slow = 0; slow < 2; slow++) {
      ampc_tally *tl = slow ? ampc_tally_create() : NULL, *was = ampc_tally_bind(tl);
      uint16_t *out = slow ? v1 : v0;
      for (int i = 0; i < NG; i++)
        out[i] = (uint16_t)i;
      assert_int_equal(ampc_gelu_backward(NG, out, H, xg, H, out), AMPC_OK);
      (void)ampc_tally_bind(was);
      ampc_tally_free(tl);
    }
    want_refused_or_same(AMPC_OK, v0, v1, H, NG, "f16 GELU backward at x = +inf: vector vs scalar");
    free(xg), free(v0), free(v1);
  }
  { /* F32: dx = inf - inf (the default NaN, sign set) and h = +NaN: the
     * fused layer's one-element spans (k = 1) and the unfused call's long
     * span multiply in different operand orders (auto-vectorized body vs
     * scalar loop), so dh's NaN differs in sign */
    enum { M = 13, K = 1, N = 2 };
    float dy[M * N], x[M * K], w[N * K], h[M * K], dx0[M * K], dh0[M * K], dx1[M * K], dh1[M * K],
        dw0[N * K] = {0}, dw1[N * K] = {0}, db0[N] = {0}, db1[N] = {0};
    for (int i = 0; i < M; i++)
      dy[i * N] = INFINITY, dy[i * N + 1] = -INFINITY, x[i] = 1.0f, h[i] = NAN;
    for (int i = 0; i < N * K; i++)
      w[i] = 1.0f;
    assert_int_equal(
        ampc_linear_backward(M, K, N, dy, F, x, F, w, F, dx0, dw0, db0, AMPC_ACC_F32, NULL),
        AMPC_OK);
    assert_int_equal(ampc_gelu_backward(M * K, dx0, F, h, F, dh0), AMPC_OK);
    const ampc_status st = ampc_linear_backward_gelu(M, K, N, dy, F, x, F, w, F, h, F, dx1, dh1,
                                                     dw1, db1, AMPC_ACC_F32, NULL, NULL);
    want_refused_or_same(st, dh0, dh1, F, M * K, "f32 linear_backward_gelu dh, NaN dx and h");
  }
  if (g_bad)
    fail_msg("%d checks of the fused layers failed", g_bad);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fused_same_bits),
      cmocka_unit_test(test_fused_special),
      cmocka_unit_test(test_gelu16_every_input),
      cmocka_unit_test(test_fused_edges),
      cmocka_unit_test(test_gelu16_backward_every_gradient),
      cmocka_unit_test(test_fused_aliasing_and_nan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
