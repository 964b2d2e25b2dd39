/*
 * src/nn/gelu.c: GELU and exp of FP32 inputs in double (the method:
 * gelu_impl.h; its scalar code: gelu_math.h), the portable loops and the
 * choice of path.
 */
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nn/gelu_impl.h"
#include "numeric/convert_impl.h"

/* the scalar method (nn/gelu_math.h) on this file's tables */
static inline double exp_nonpos(double q) { return ampc_exp_nonpos(q, k_exp_taylor); }
static inline double gelu1(double v, int bwd) {
  return ampc_gelu1(v, bwd, k_exp_taylor, k_erfcx_cheb);
}

void ampc_gelu32_portable(const float *x, float *out, size_t n, int bwd) {
  for (size_t i = 0; i < n; i++)
    out[i] = (float)gelu1((double)x[i], bwd);
}

void ampc_gelu64_portable(const float *x, double *out, size_t n, int bwd) {
  for (size_t i = 0; i < n; i++)
    out[i] = gelu1((double)x[i], bwd);
}

/* A NaN input gives itself (both gelu and the backward factor): the paths'
 * own arithmetic would pick NaNs of different signs */
void ampc_gelu32(const float *x, float *out, size_t n, int bwd) {
  enum { CH = 256 };
  for (size_t i0 = 0; i0 < n; i0 += CH) {
    const size_t len = n - i0 < CH ? n - i0 : CH;
    float keep[CH]; /* the inputs (out may be x) */
    memcpy(keep, x + i0, len * sizeof *keep);
    if (ampc_use_avx512())
      ampc_gelu32_avx512(x + i0, out + i0, len, bwd);
    else if (ampc_use_avx2())
      ampc_gelu32_avx2(x + i0, out + i0, len, bwd);
    else
      ampc_gelu32_portable(x + i0, out + i0, len, bwd);
    for (size_t i = 0; i < len; i++)
      if (isnan(keep[i]))
        out[i0 + i] = keep[i];
  }
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
