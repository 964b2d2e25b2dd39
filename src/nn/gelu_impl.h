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
#include <stdint.h>

#include "nn/gelu_math.h" /* the constants and the scalar method, shared with CUDA */

static const double k_erfcx_cheb[AMPC_ERFCX_N] = {AMPC_ERFCX_CHEB};
static const double k_exp_taylor[14] = {AMPC_EXP_TAYLOR};

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

/* A 16-bit GELU span on a table of FP32 values over every bit pattern of the
 * dtype (F16, or BF16 when bf16): forward (dy NULL) out[i] = tab[x[i]],
 * backward out[i] = widen(dy[i]) * tab[x[i]] in FP32, rounded once (RNE) to
 * the same dtype, n elements (out may be dy); the values of the scalar loops
 * with ampc_store_f32. AVX-512F (call only when ampc_use_avx512). */
void ampc_gelu_tab16_avx512(const uint16_t *x, const float *tab, const uint16_t *dy, int bf16,
                            uint16_t *out, size_t n);

/* the one the CPU runs: AVX-512 when ampc_use_avx512, AVX2+FMA when
 * ampc_use_avx2, else portable */
void ampc_gelu32(const float *x, float *out, size_t n, int bwd);

#endif
