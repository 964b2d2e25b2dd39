/*
 * src/nn/gelu_math.h: the scalar method of gelu_impl.h (exp of a non-positive
 * double, erfcx by its Chebyshev series, GELU and its derivative in double)
 * as inline functions that compile both as C11 (the CPU's portable path,
 * src/nn/gelu.c) and as CUDA C++ (__host__ __device__: the GPU's layers,
 * src/backend/cuda/cuda_gelu.cu), so the two run the same operations in the same order
 * and give the same bits: fma where written, every other operation one IEEE
 * rounding (the CUDA files are compiled with --fmad=false so that nvcc does
 * not contract a multiply and an add into an fma the C code does not have).
 *
 * The coefficient tables are passed in: the CPU keeps them in static
 * arrays (gelu_impl.h), the GPU in __constant__ memory. The method and its
 * error bounds are described in gelu_impl.h.
 */
#ifndef AMPC_GELU_MATH_H
#define AMPC_GELU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define AMPC_HD static __host__ __device__ __forceinline__
#else
#define AMPC_HD static inline
#endif

/* erfcx series (tests/reference/gen_erfcx_cheb.py: K = 3.75, A = 1.1875; c0
 * already halved) */
#define AMPC_ERFCX_N 24
#define AMPC_ERFCX_CHEB                                                                            \
  0x1.5e9d08b649633p-2, -0x1.bd6fa83363990p-2, 0x1.45ccd0627ce2fp-3, -0x1.8c217c6548b6ep-5,        \
      0x1.8fc492bdacc66p-7, -0x1.498dd3f58a75bp-9, 0x1.aa8f966f69952p-12, -0x1.8808485b62423p-15,  \
      0x1.5295c88cc9cacp-19, 0x1.1c4995edfdc36p-22, -0x1.1e00cbf8e775fp-24, 0x1.624155faf6537p-29, \
      0x1.e2ab6e29285a4p-31, -0x1.d635f02d6f045p-34, -0x1.638dcd206f258p-37,                       \
      0x1.649fc800c7b16p-39, 0x1.0e7eb2868ca8ap-43, -0x1.fccdbbbf9701cp-45,                        \
      -0x1.14f14f5318937p-49, 0x1.759180f684bd1p-50, 0x1.e8156e6a249acp-55,                        \
      -0x1.1bf94d45ca3b0p-55, -0x1.2aed2b90ec149p-59, 0x1.af9a8b0f0441bp-61
#define AMPC_ERFCX_K 3.75
#define AMPC_ERFCX_A 1.1875
#define AMPC_ERFCX_UMAX 20.0

/* exp: 1/k! for k = 13 .. 0 (Horner order), log2(e), ln 2 split in two */
#define AMPC_EXP_TAYLOR                                                                            \
  1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,        \
      1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0
#define AMPC_LOG2E 0x1.71547652b82fep+0
#define AMPC_LN2_HI 0x1.62e42fefa39efp-1
#define AMPC_LN2_LO 0x1.abc9e3b39803fp-56
#define AMPC_EXP_SHIFT 0x1.8p52 /* adding it rounds to an integer, kept in the low bits */
#define AMPC_EXP_MIN (-708.0)
#define AMPC_GELU_INV_SQRT2 0x1.6a09e667f3bcdp-1   /* 1/sqrt(2) */
#define AMPC_GELU_INV_SQRT2PI 0x1.9884533d43651p-2 /* 1/sqrt(2 pi) */

/* exp(q) for q <= 0 (0 below AMPC_EXP_MIN; NaN stays NaN); taylor: the 14
 * coefficients of AMPC_EXP_TAYLOR */
AMPC_HD double ampc_exp_nonpos(double q, const double *taylor) {
  const double t = fma(q, AMPC_LOG2E, AMPC_EXP_SHIFT);
  const double n = t - AMPC_EXP_SHIFT;
  double r = fma(-n, AMPC_LN2_HI, q);
  r = fma(-n, AMPC_LN2_LO, r);
  double p = taylor[0];
  for (int k = 1; k < 14; k++)
    p = fma(p, r, taylor[k]);
  uint64_t tb;
  memcpy(&tb, &t, sizeof tb);
  const uint64_t sb = (tb << 52) + ((uint64_t)1023 << 52); /* 2^n, n in [-1022, 0] */
  double s;
  memcpy(&s, &sb, sizeof s);
  const double e = p * s;
  return q < AMPC_EXP_MIN ? 0.0 : e;
}

/* erfcx(u), 0 <= u <= AMPC_ERFCX_UMAX (larger u and NaN: clamped); cheb: the
 * AMPC_ERFCX_N coefficients of AMPC_ERFCX_CHEB */
AMPC_HD double ampc_erfcx_series(double u, const double *cheb) {
  u = u < AMPC_ERFCX_UMAX ? u : AMPC_ERFCX_UMAX;
  const double w = (u - AMPC_ERFCX_K) / (u + AMPC_ERFCX_K);
  const double y = fma(w, AMPC_ERFCX_A, AMPC_ERFCX_A - 1.0);
  const double y2 = y + y;
  double b1 = 0.0, b2 = 0.0;
  for (int j = AMPC_ERFCX_N - 1; j > 0; j--) {
    const double b0 = fma(y2, b1, cheb[j] - b2);
    b2 = b1;
    b1 = b0;
  }
  return fma(y, b1, cheb[0] - b2);
}

/* gelu (bwd 0) or dgelu (bwd 1) of v in double, before the FP32 rounding */
AMPC_HD double ampc_gelu1(double v, int bwd, const double *taylor, const double *cheb) {
  const double e = ampc_exp_nonpos((v * v) * -0.5, taylor);
  const double h = 0.5 * (e * ampc_erfcx_series(fabs(v) * AMPC_GELU_INV_SQRT2, cheb));
  const double phi = v < 0.0 ? h : 1.0 - h;
  return bwd ? fma(v, e * AMPC_GELU_INV_SQRT2PI, phi) : v * phi;
}

#endif
