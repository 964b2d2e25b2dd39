/*
 * src/nn/gelu_avx512.c: the FP32 GELU on AVX-512F, 8 double lanes x 4 groups
 * (the body: gelu_vec.h). Compiled with -mavx512f; called only when the
 * CPU has it (ampc_cpu_has_avx512f).
 */
#include <immintrin.h>
#include <stdint.h>

#include "nn/gelu_impl.h"

#define VD __m512d
#define L 8
#define G 4
#define FUNC32 ampc_gelu32_avx512
#define FUNC64 ampc_gelu64_avx512
#define FUNCEXP ampc_exp32_avx512
#define LOADX(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define STORE32(p, v) _mm256_storeu_ps((p), _mm512_cvtpd_ps(v))
#define STORE64(p, v) _mm512_storeu_pd((p), (v))
#define SET1(c) _mm512_set1_pd(c)
#define ADD _mm512_add_pd
#define SUB _mm512_sub_pd
#define MUL _mm512_mul_pd
#define DIV _mm512_div_pd
#define FMA _mm512_fmadd_pd
#define FNMA _mm512_fnmadd_pd
#define MINV(a, b) _mm512_mask_blend_pd(_mm512_cmp_pd_mask((a), (b), _CMP_LT_OQ), (b), (a))
#define ABS(v)                                                                                     \
  _mm512_castsi512_pd(                                                                             \
      _mm512_andnot_si512(_mm512_castpd_si512(_mm512_set1_pd(-0.0)), _mm512_castpd_si512(v)))
#define LT(a, b) _mm512_cmp_pd_mask((a), (b), _CMP_LT_OQ)
#define SEL(m, a, b) _mm512_mask_blend_pd((m), (b), (a))
#define EXP2I(t)                                                                                   \
  _mm512_castsi512_pd(_mm512_add_epi64(_mm512_slli_epi64(_mm512_castpd_si512(t), 52),              \
                                       _mm512_set1_epi64((long long)((uint64_t)1023 << 52))))

#include "nn/gelu_vec.h"

/* ---- 16-bit GELU spans on the lookup table (elementwise.c) ---------------- */

#include "kernels/gemm_avx512_store.h"

/* 16 elements of a 16-bit dtype (F16, or BF16 when bf16) widened to FP32 */
static inline __m512 widen16(const uint16_t *p, int bf16, __mmask16 m) {
  const __m256i v = _mm256_maskz_loadu_epi16(m, p);
  return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16))
              : _mm512_cvtph_ps(v);
}

void ampc_gelu_tab16_avx512(const uint16_t *x, const float *tab, const uint16_t *dy, int bf16,
                            uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
    const __m512i idx = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i));
    __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, tab, 4);
    if (dy) { /* a NaN gradient passes as itself, as in the scalar loop */
      const __m512 g = widen16(dy + i, bf16, m);
      v = _mm512_mask_mov_ps(_mm512_mul_ps(g, v), _mm512_cmp_ps_mask(g, g, _CMP_UNORD_Q), g);
    }
    const __m256i r =
        bf16 ? ampc_avx512_bf16_round16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(out + i, m, r);
  }
}
