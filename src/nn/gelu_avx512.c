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
