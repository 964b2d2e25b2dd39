/*
 * src/nn/gelu.c: GELU and exp of FP32 inputs in double (the method:
 * gelu_impl.h), the portable loops and the choice of path.
 */
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nn/gelu_impl.h"
#include "numeric/convert_impl.h"

/* exp(q) for q <= 0 (0 below AMPC_EXP_MIN; NaN stays NaN) */
static inline double exp_nonpos(double q) {
  const double t = fma(q, AMPC_LOG2E, AMPC_EXP_SHIFT);
  const double n = t - AMPC_EXP_SHIFT;
  double r = fma(-n, AMPC_LN2_HI, q);
  r = fma(-n, AMPC_LN2_LO, r);
  double p = k_exp_taylor[0];
  for (int k = 1; k < 14; k++)
    p = fma(p, r, k_exp_taylor[k]);
  uint64_t tb;
  memcpy(&tb, &t, sizeof tb);
  const uint64_t sb = (tb << 52) + ((uint64_t)1023 << 52); /* 2^n, n in [-1022, 0] */
  double s;
  memcpy(&s, &sb, sizeof s);
  const double e = p * s;
  return q < AMPC_EXP_MIN ? 0.0 : e;
}

/* erfcx(u), 0 <= u <= AMPC_ERFCX_UMAX (larger u and NaN: clamped) */
static inline double erfcx_series(double u) {
  u = u < AMPC_ERFCX_UMAX ? u : AMPC_ERFCX_UMAX;
  const double w = (u - AMPC_ERFCX_K) / (u + AMPC_ERFCX_K);
  const double y = fma(w, AMPC_ERFCX_A, AMPC_ERFCX_A - 1.0);
  const double y2 = y + y;
  double b1 = 0.0, b2 = 0.0;
  for (int j = AMPC_ERFCX_N - 1; j > 0; j--) {
    const double b0 = fma(y2, b1, k_erfcx_cheb[j] - b2);
    b2 = b1;
    b1 = b0;
  }
  return fma(y, b1, k_erfcx_cheb[0] - b2);
}

/* gelu (bwd 0) or dgelu (bwd 1) of v in double, before the FP32 rounding */
static inline double gelu1(double v, int bwd) {
  const double e = exp_nonpos((v * v) * -0.5);
  const double h = 0.5 * (e * erfcx_series(fabs(v) * AMPC_GELU_INV_SQRT2));
  const double phi = v < 0.0 ? h : 1.0 - h;
  return bwd ? fma(v, e * AMPC_GELU_INV_SQRT2PI, phi) : v * phi;
}

void ampc_gelu32_portable(const float *x, float *out, size_t n, int bwd) {
  for (size_t i = 0; i < n; i++)
    out[i] = (float)gelu1((double)x[i], bwd);
}

void ampc_gelu64_portable(const float *x, double *out, size_t n, int bwd) {
  for (size_t i = 0; i < n; i++)
    out[i] = gelu1((double)x[i], bwd);
}

void ampc_gelu32(const float *x, float *out, size_t n, int bwd) {
  if (ampc_use_avx512())
    ampc_gelu32_avx512(x, out, n, bwd);
  else if (ampc_use_avx2())
    ampc_gelu32_avx2(x, out, n, bwd);
  else
    ampc_gelu32_portable(x, out, n, bwd);
}

float ampc_exp1(float x) { return (float)exp_nonpos((double)x); }

void ampc_exp32_portable(const float *x, float *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = (float)exp_nonpos((double)x[i]);
}

void ampc_exp32(const float *x, float *out, size_t n) {
  if (ampc_use_avx512())
    ampc_exp32_avx512(x, out, n);
  else if (ampc_use_avx2())
    ampc_exp32_avx2(x, out, n);
  else
    ampc_exp32_portable(x, out, n);
}
