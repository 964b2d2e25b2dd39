/*
 * src/nn/gelu_avx2.c: GELU of FP32 inputs in double, 4 lanes with AVX2+FMA:
 * the operations of ampc_gelu32_portable (gelu.c) in the same order, so the
 * same bits. Compiled with -mavx2 -mfma; called only when ampc_use_avx2().
 */
#include <immintrin.h>
#include <stdint.h>

#include "nn/gelu_impl.h"

/* G groups of 4 lanes at a time, interleaved: the series and the polynomial
 * are chains of dependent FMAs, and independent groups fill their latency. */
enum { G = 3 };

static inline __attribute__((always_inline)) void gelu4g(const float *x, __m256d out[G], int bwd) {
  __m256d v[G], q[G], t[G], nn[G], r[G], p[G], e[G], y[G], y2[G], b1[G], b2[G];
  const __m256d shift = _mm256_set1_pd(AMPC_EXP_SHIFT);
  for (int g = 0; g < G; g++) {
    v[g] = _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * g));
    /* e = exp(-v^2 / 2) */
    q[g] = _mm256_mul_pd(_mm256_mul_pd(v[g], v[g]), _mm256_set1_pd(-0.5));
    t[g] = _mm256_fmadd_pd(q[g], _mm256_set1_pd(AMPC_LOG2E), shift);
    nn[g] = _mm256_sub_pd(t[g], shift);
    r[g] = _mm256_fnmadd_pd(nn[g], _mm256_set1_pd(AMPC_LN2_HI), q[g]);
    r[g] = _mm256_fnmadd_pd(nn[g], _mm256_set1_pd(AMPC_LN2_LO), r[g]);
    p[g] = _mm256_set1_pd(k_exp_taylor[0]);
  }
  for (int k = 1; k < 14; k++)
    for (int g = 0; g < G; g++)
      p[g] = _mm256_fmadd_pd(p[g], r[g], _mm256_set1_pd(k_exp_taylor[k]));
  for (int g = 0; g < G; g++) {
    const __m256i sb = _mm256_add_epi64(_mm256_slli_epi64(_mm256_castpd_si256(t[g]), 52),
                                        _mm256_set1_epi64x((long long)((uint64_t)1023 << 52)));
    e[g] = _mm256_mul_pd(p[g], _mm256_castsi256_pd(sb));
    e[g] = _mm256_blendv_pd(e[g], _mm256_setzero_pd(),
                            _mm256_cmp_pd(q[g], _mm256_set1_pd(AMPC_EXP_MIN), _CMP_LT_OQ));
    /* R = erfcx(|v| / sqrt 2); u < max ? u : max, as the C */
    __m256d u = _mm256_mul_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), v[g]),
                              _mm256_set1_pd(AMPC_GELU_INV_SQRT2));
    u = _mm256_min_pd(u, _mm256_set1_pd(AMPC_ERFCX_UMAX));
    const __m256d kk = _mm256_set1_pd(AMPC_ERFCX_K);
    const __m256d w = _mm256_div_pd(_mm256_sub_pd(u, kk), _mm256_add_pd(u, kk));
    y[g] = _mm256_fmadd_pd(w, _mm256_set1_pd(AMPC_ERFCX_A), _mm256_set1_pd(AMPC_ERFCX_A - 1.0));
    y2[g] = _mm256_add_pd(y[g], y[g]);
    b1[g] = b2[g] = _mm256_setzero_pd();
  }
  for (int j = AMPC_ERFCX_N - 1; j > 0; j--)
    for (int g = 0; g < G; g++) {
      const __m256d b0 =
          _mm256_fmadd_pd(y2[g], b1[g], _mm256_sub_pd(_mm256_set1_pd(k_erfcx_cheb[j]), b2[g]));
      b2[g] = b1[g];
      b1[g] = b0;
    }
  for (int g = 0; g < G; g++) {
    const __m256d rr =
        _mm256_fmadd_pd(y[g], b1[g], _mm256_sub_pd(_mm256_set1_pd(k_erfcx_cheb[0]), b2[g]));
    /* Phi and the result */
    const __m256d h = _mm256_mul_pd(_mm256_set1_pd(0.5), _mm256_mul_pd(e[g], rr));
    const __m256d neg = _mm256_cmp_pd(v[g], _mm256_setzero_pd(), _CMP_LT_OQ);
    const __m256d phi = _mm256_blendv_pd(_mm256_sub_pd(_mm256_set1_pd(1.0), h), h, neg);
    out[g] =
        bwd ? _mm256_fmadd_pd(v[g], _mm256_mul_pd(e[g], _mm256_set1_pd(AMPC_GELU_INV_SQRT2PI)), phi)
            : _mm256_mul_pd(v[g], phi);
  }
}

/* the tail: up to 4G - 1 elements through a zero-padded buffer */
static void gelu_tail(const float *x, size_t n, __m256d out[G], int bwd) {
  float xb[4 * G] = {0.0f};
  for (size_t k = 0; k < n; k++)
    xb[k] = x[k];
  gelu4g(xb, out, bwd);
}

void ampc_gelu32_avx2(const float *x, float *out, size_t n, int bwd) {
  size_t i = 0;
  __m256d o[G];
  for (; i + 4 * G <= n; i += 4 * G) {
    gelu4g(x + i, o, bwd);
    for (int g = 0; g < G; g++)
      _mm_storeu_ps(out + i + 4 * g, _mm256_cvtpd_ps(o[g]));
  }
  if (i < n) {
    float ob[4 * G];
    gelu_tail(x + i, n - i, o, bwd);
    for (int g = 0; g < G; g++)
      _mm_storeu_ps(ob + 4 * g, _mm256_cvtpd_ps(o[g]));
    for (size_t k = 0; i + k < n; k++)
      out[i + k] = ob[k];
  }
}

void ampc_gelu64_avx2(const float *x, double *out, size_t n, int bwd) {
  size_t i = 0;
  __m256d o[G];
  for (; i + 4 * G <= n; i += 4 * G) {
    gelu4g(x + i, o, bwd);
    for (int g = 0; g < G; g++)
      _mm256_storeu_pd(out + i + 4 * g, o[g]);
  }
  if (i < n) {
    double ob[4 * G];
    gelu_tail(x + i, n - i, o, bwd);
    for (int g = 0; g < G; g++)
      _mm256_storeu_pd(ob + 4 * g, o[g]);
    for (size_t k = 0; i + k < n; k++)
      out[i + k] = ob[k];
  }
}
