/*
 * src/nn/gelu_impl.h: GELU of FP32 inputs, evaluated in double and rounded
 * once to FP32, shared by the portable loop (gelu.c) and the AVX2+FMA one
 * (gelu_avx2.c), which perform the same operations (fma where written) and so
 * give the same bits.
 *
 * For x (FP32, widened exactly):
 *   e   = exp(-x^2 / 2)            x*x is exact in double; exp by Cody-Waite
 *                                  reduction (n = nearest(q / ln 2)) and a
 *                                  degree-13 Taylor polynomial on |r| <= ln2/2
 *                                  (truncation < 5e-18); 0 below -708
 *   R   = erfcx(|x| / sqrt 2)      erfcx(u) = exp(u^2) erfc(u): a 24-term
 *                                  Chebyshev series in y = A w + (A - 1),
 *                                  w = (u - K) / (u + K), K = 3.75, u <= 20
 *                                  (series error 2.2e-18;
 *                                  tests/reference/gen_erfcx_cheb.py)
 *   h   = e R / 2 = Phi(-|x|)      so Phi(x) = h for x < 0, 1 - h otherwise
 *   gelu(x)  = x Phi(x)
 *   dgelu(x) = Phi(x) + x phi(x) = fma(x, e / sqrt(2 pi), Phi(x))
 * each rounded once to FP32. The double result is within ~1e-15 relative of
 * the exact value (of Phi + |x phi| for dgelu, which cancels near x = -0.75),
 * so the FP32 result is the correctly rounded one except when the exact value
 * lies within that distance of a rounding boundary (then 1 ulp off);
 * tests/test_nn.c checks this against libm's double erfc. Phi(x) for
 * x < -28 (u clamped to 20) is below 1e-170 and rounds to zero in FP32 either
 * way. NaN gives NaN, gelu(+inf) = inf, gelu(-inf) = dgelu(+-inf) = NaN
 * (inf * 0), as the erff formula gives.
 */
#ifndef AMPC_GELU_IMPL_H
#define AMPC_GELU_IMPL_H

#include <stddef.h>

/* erfcx series (gen_erfcx_cheb.py: K = 3.75, A = 1.1875; c0 already halved) */
#define AMPC_ERFCX_N 24
static const double k_erfcx_cheb[AMPC_ERFCX_N] = {
    0x1.5e9d08b649633p-2,  -0x1.bd6fa83363990p-2,  0x1.45ccd0627ce2fp-3,   -0x1.8c217c6548b6ep-5,
    0x1.8fc492bdacc66p-7,  -0x1.498dd3f58a75bp-9,  0x1.aa8f966f69952p-12,  -0x1.8808485b62423p-15,
    0x1.5295c88cc9cacp-19, 0x1.1c4995edfdc36p-22,  -0x1.1e00cbf8e775fp-24, 0x1.624155faf6537p-29,
    0x1.e2ab6e29285a4p-31, -0x1.d635f02d6f045p-34, -0x1.638dcd206f258p-37, 0x1.649fc800c7b16p-39,
    0x1.0e7eb2868ca8ap-43, -0x1.fccdbbbf9701cp-45, -0x1.14f14f5318937p-49, 0x1.759180f684bd1p-50,
    0x1.e8156e6a249acp-55, -0x1.1bf94d45ca3b0p-55, -0x1.2aed2b90ec149p-59, 0x1.af9a8b0f0441bp-61};
#define AMPC_ERFCX_K 3.75
#define AMPC_ERFCX_A 1.1875
#define AMPC_ERFCX_UMAX 20.0

/* exp: 1/k! for k = 13 .. 0 (Horner order), log2(e), ln 2 split in two */
static const double k_exp_taylor[14] = {1.0 / 6227020800.0,
                                        1.0 / 479001600.0,
                                        1.0 / 39916800.0,
                                        1.0 / 3628800.0,
                                        1.0 / 362880.0,
                                        1.0 / 40320.0,
                                        1.0 / 5040.0,
                                        1.0 / 720.0,
                                        1.0 / 120.0,
                                        1.0 / 24.0,
                                        1.0 / 6.0,
                                        0.5,
                                        1.0,
                                        1.0};
#define AMPC_LOG2E 0x1.71547652b82fep+0
#define AMPC_LN2_HI 0x1.62e42fefa39efp-1
#define AMPC_LN2_LO 0x1.abc9e3b39803fp-56
#define AMPC_EXP_SHIFT 0x1.8p52 /* adding it rounds to an integer, kept in the low bits */
#define AMPC_EXP_MIN (-708.0)
#define AMPC_GELU_INV_SQRT2 0x1.6a09e667f3bcdp-1   /* 1/sqrt(2) */
#define AMPC_GELU_INV_SQRT2PI 0x1.9884533d43651p-2 /* 1/sqrt(2 pi) */

/* out[i] = gelu(x[i]) (bwd 0) or dgelu(x[i]) (bwd 1), FP32, n elements */
void ampc_gelu32_portable(const float *x, float *out, size_t n, int bwd);
void ampc_gelu32_avx2(const float *x, float *out, size_t n, int bwd);
void ampc_gelu32_avx512(const float *x, float *out, size_t n, int bwd);
/* the same before the FP32 rounding (for tests: the paths agree in double) */
void ampc_gelu64_portable(const float *x, double *out, size_t n, int bwd);
void ampc_gelu64_avx2(const float *x, double *out, size_t n, int bwd);
void ampc_gelu64_avx512(const float *x, double *out, size_t n, int bwd);
/* out[i] = exp(x[i]) for x[i] <= 0 (or NaN), in double as for gelu (so the
 * correctly rounded FP32 value except within ~1e-16 relative of a rounding
 * boundary), rounded once to FP32; -inf gives 0, NaN NaN. For softmax. */
void ampc_exp32_portable(const float *x, float *out, size_t n);
void ampc_exp32_avx2(const float *x, float *out, size_t n);
void ampc_exp32_avx512(const float *x, float *out, size_t n);
void ampc_exp32(const float *x, float *out, size_t n);
/* one element, the portable arithmetic */
float ampc_exp1(float x);

/* the one the CPU runs: AVX-512 when ampc_use_avx512, AVX2+FMA when
 * ampc_use_avx2, else portable */
void ampc_gelu32(const float *x, float *out, size_t n, int bwd);

#endif
