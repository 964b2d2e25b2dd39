/*
 * src/nn/gelu_vec.h: the vector body of the FP32 GELU and of the FP32
 * exponential of softmax (method: gelu_impl.h),
 * written once over a small set of macros and instantiated for AVX2+FMA
 * (gelu_avx2.c: 4 lanes, 3 groups) and AVX-512F (gelu_avx512.c: 8 lanes, 4
 * groups). Every lane performs the operations of gelu.c's portable loop in
 * the same order, so all paths give the same bits. Groups are interleaved:
 * the series and the polynomial are chains of dependent FMAs, and
 * independent groups fill their latency.
 *
 * The including file defines: VD (double vector), L (lanes), G (groups),
 * FUNC32 / FUNC64 / FUNCEXP (the entry points' names) and
 * LOADX(p) (L floats widened to doubles), STORE32(p, v) (v rounded to L
 * floats, stored), STORE64(p, v), SET1(c), ADD, SUB, MUL, DIV, FMA(a, b, c)
 * = a*b + c, FNMA(a, b, c) = -(a*b) + c, MINV(a, b) = a < b ? a : b, ABS(v),
 * LT(a, b) (mask of a < b, ordered), SEL(m, a, b) (m ? a : b), EXP2I(t)
 * (2^n from t = n + 1.5 * 2^52, by the bits).
 */
#ifndef VD
#error "gelu_vec.h: define the vector macros first"
#endif

/* e[g] = exp(q[g]) for q <= 0 (0 below AMPC_EXP_MIN), gelu.c's exp_nonpos */
static inline __attribute__((always_inline)) void exp_groups(const VD q[G], VD e[G]) {
  VD t[G], r[G], p[G];
  const VD shift = SET1(AMPC_EXP_SHIFT);
  for (int g = 0; g < G; g++) {
    t[g] = FMA(q[g], SET1(AMPC_LOG2E), shift);
    const VD nn = SUB(t[g], shift);
    r[g] = FNMA(nn, SET1(AMPC_LN2_HI), q[g]);
    r[g] = FNMA(nn, SET1(AMPC_LN2_LO), r[g]);
    p[g] = SET1(k_exp_taylor[0]);
  }
  for (int k = 1; k < 14; k++)
    for (int g = 0; g < G; g++)
      p[g] = FMA(p[g], r[g], SET1(k_exp_taylor[k]));
  for (int g = 0; g < G; g++)
    e[g] = SEL(LT(q[g], SET1(AMPC_EXP_MIN)), SET1(0.0), MUL(p[g], EXP2I(t[g])));
}

static inline __attribute__((always_inline)) void gelu_groups(const float *x, VD out[G], int bwd) {
  VD v[G], q[G], e[G], y[G], y2[G], b1[G], b2[G];
  for (int g = 0; g < G; g++) {
    v[g] = LOADX(x + L * g);
    q[g] = MUL(MUL(v[g], v[g]), SET1(-0.5)); /* e = exp(-v^2 / 2) */
  }
  exp_groups(q, e);
  for (int g = 0; g < G; g++) {
    /* R = erfcx(|v| / sqrt 2) */
    const VD u = MINV(MUL(ABS(v[g]), SET1(AMPC_GELU_INV_SQRT2)), SET1(AMPC_ERFCX_UMAX));
    const VD w = DIV(SUB(u, SET1(AMPC_ERFCX_K)), ADD(u, SET1(AMPC_ERFCX_K)));
    y[g] = FMA(w, SET1(AMPC_ERFCX_A), SET1(AMPC_ERFCX_A - 1.0));
    y2[g] = ADD(y[g], y[g]);
    b1[g] = b2[g] = SET1(0.0);
  }
  for (int j = AMPC_ERFCX_N - 1; j > 0; j--)
    for (int g = 0; g < G; g++) {
      const VD b0 = FMA(y2[g], b1[g], SUB(SET1(k_erfcx_cheb[j]), b2[g]));
      b2[g] = b1[g];
      b1[g] = b0;
    }
  for (int g = 0; g < G; g++) {
    const VD rr = FMA(y[g], b1[g], SUB(SET1(k_erfcx_cheb[0]), b2[g]));
    /* Phi and the result */
    const VD h = MUL(SET1(0.5), MUL(e[g], rr));
    const VD phi = SEL(LT(v[g], SET1(0.0)), h, SUB(SET1(1.0), h));
    out[g] = bwd ? FMA(v[g], MUL(e[g], SET1(AMPC_GELU_INV_SQRT2PI)), phi) : MUL(v[g], phi);
  }
}

/* the tail: up to L*G - 1 elements through a zero-padded buffer */
static void gelu_tail(const float *x, size_t n, VD out[G], int bwd) {
  float xb[L * G] = {0.0f};
  for (size_t k = 0; k < n; k++)
    xb[k] = x[k];
  gelu_groups(xb, out, bwd);
}

/* out[i] = exp(x[i]) rounded to FP32, x[i] <= 0 (or NaN) */
void FUNCEXP(const float *x, float *out, size_t n) {
  size_t i = 0;
  VD q[G], e[G];
  for (; i + L * G <= n; i += L * G) {
    for (int g = 0; g < G; g++)
      q[g] = LOADX(x + i + L * g);
    exp_groups(q, e);
    for (int g = 0; g < G; g++)
      STORE32(out + i + L * g, e[g]);
  }
  if (i < n) {
    float xb[L * G] = {0.0f}, ob[L * G];
    for (size_t k = 0; i + k < n; k++)
      xb[k] = x[i + k];
    for (int g = 0; g < G; g++)
      q[g] = LOADX(xb + L * g);
    exp_groups(q, e);
    for (int g = 0; g < G; g++)
      STORE32(ob + L * g, e[g]);
    for (size_t k = 0; i + k < n; k++)
      out[i + k] = ob[k];
  }
}

/* the G groups' results at element i of out32 (rounded to FP32) or, when
 * out32 is NULL, of out64 */
static inline __attribute__((always_inline)) void store_groups(const VD o[G], float *out32,
                                                               double *out64, size_t i) {
  for (int g = 0; g < G; g++) {
    if (out32)
      STORE32(out32 + i + L * g, o[g]);
    else
      STORE64(out64 + i + L * g, o[g]);
  }
}

/* gelu or dgelu of n elements into out32 (rounded to FP32) or, when out32
 * is NULL, into out64 (the double results, for tests) */
static inline __attribute__((always_inline)) void gelu_run(const float *x, float *out32,
                                                           double *out64, size_t n, int bwd) {
  size_t i = 0;
  VD o[G];
  for (; i + L * G <= n; i += L * G) {
    gelu_groups(x + i, o, bwd);
    store_groups(o, out32, out64, i);
  }
  if (i < n) { /* the tail's lanes, through buffers */
    float ob32[L * G];
    double ob64[L * G];
    gelu_tail(x + i, n - i, o, bwd);
    store_groups(o, out32 ? ob32 : NULL, ob64, 0);
    for (size_t k = 0; i + k < n; k++) {
      if (out32)
        out32[i + k] = ob32[k];
      else
        out64[i + k] = ob64[k];
    }
  }
}

void FUNC32(const float *x, float *out, size_t n, int bwd) { gelu_run(x, out, NULL, n, bwd); }

void FUNC64(const float *x, double *out, size_t n, int bwd) { gelu_run(x, NULL, out, n, bwd); }
