/*
 * src/nn/gelu_avx2.c: the FP32 GELU on AVX2+FMA, 4 double lanes x 3 groups
 * (the body: gelu_vec.h). Compiled with -mavx2 -mfma; called only when
 * ampc_use_avx2().
 */
#include <immintrin.h>
#include <stdint.h>

#include "nn/gelu_impl.h"

#define VD __m256d
#define L 4
#define G 3
#define FUNC32 ampc_gelu32_avx2
#define FUNC64 ampc_gelu64_avx2
#define FUNCEXP ampc_exp32_avx2
#define LOADX(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define STORE32(p, v) _mm_storeu_ps((p), _mm256_cvtpd_ps(v))
#define STORE64(p, v) _mm256_storeu_pd((p), (v))
#define SET1(c) _mm256_set1_pd(c)
#define ADD _mm256_add_pd
#define SUB _mm256_sub_pd
#define MUL _mm256_mul_pd
#define DIV _mm256_div_pd
#define FMA _mm256_fmadd_pd
#define FNMA _mm256_fnmadd_pd
#define MINV _mm256_min_pd /* a < b ? a : b, as the C (NaN: b) */
#define ABS(v) _mm256_andnot_pd(_mm256_set1_pd(-0.0), (v))
#define LT(a, b) _mm256_cmp_pd((a), (b), _CMP_LT_OQ)
#define SEL(m, a, b) _mm256_blendv_pd((b), (a), (m))
#define EXP2I(t)                                                                                   \
  _mm256_castsi256_pd(_mm256_add_epi64(_mm256_slli_epi64(_mm256_castpd_si256(t), 52),              \
                                       _mm256_set1_epi64x((long long)((uint64_t)1023 << 52))))

#include "nn/gelu_vec.h"
