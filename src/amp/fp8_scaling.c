/*
 * src/amp/fp8_scaling.c: FP8 delayed scaling (semantics and source in
 * include/ampc/amp.h, "FP8 delayed scaling").
 */
#include "internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/amp.h"
#include "numeric/numeric.h"

ampc_status ampc_fp8_meta_init(ampc_fp8_meta *m, int len) {
  if (!m)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fp8_meta_init: NULL");
  memset(m, 0, sizeof *m);
  if (len < 1 || len > (1 << 20))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_fp8_meta_init: amax history length %d is not in 1..1048576", len);
  m->history = calloc((size_t)len, sizeof *m->history);
  if (!m->history)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_fp8_meta_init: cannot allocate %d floats", len);
  m->len = len;
  m->scale = m->scale_inv = 1.0f;
  return AMPC_OK;
}

void ampc_fp8_meta_free(ampc_fp8_meta *m) {
  if (!m)
    return;
  free(m->history);
  m->history = NULL;
  m->len = 0;
}

void ampc_fp8_record_amax(ampc_fp8_meta *m, float amax) {
  m->history[0] = fmaxf(m->history[0], amax);
}

static float fp8_max(ampc_dtype dt) { return dt == AMPC_F8_E4M3 ? 448.0f : 57344.0f; }

ampc_status ampc_fp8_update(ampc_fp8_meta *m, ampc_dtype fp8, float margin, ampc_amax_algo algo,
                            float *amax_used) {
  if (!m || !m->history || (fp8 != AMPC_F8_E4M3 && fp8 != AMPC_F8_E5M2) ||
      (algo != AMPC_AMAX_MAX && algo != AMPC_AMAX_MOST_RECENT) || !(margin >= 0.0f) ||
      !isfinite(margin))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_fp8_update: bad arguments (dtype %d, algo %d, margin %g)", (int)fp8,
                     (int)algo, (double)margin);
  const float last = m->history[0];
  float amax = 0.0f;
  if (algo == AMPC_AMAX_MAX)
    for (int i = 0; i < m->len; i++)
      amax = fmaxf(amax, m->history[i]); /* fmaxf: NaN entries are passed over */
  else
    amax = last;
  const float scaled_max = fp8_max(fp8) * powf(2.0f, -margin);
  if (isfinite(amax) && amax > 0.0f) {
    m->scale = scaled_max / amax;
    if (isinf(m->scale)) /* amax so small that the quotient overflows FP32 */
      m->scale = FLT_MAX;
  }
  m->scale_inv = 1.0f / m->scale;
  /* roll: i+1 -> i, the current amax to the end, a fresh history[0] */
  if (m->len > 1) {
    memmove(m->history, m->history + 1, (size_t)(m->len - 1) * sizeof *m->history);
    m->history[m->len - 1] = last;
  }
  m->history[0] = 0.0f;
  if (amax_used)
    *amax_used = amax;
  return AMPC_OK;
}

ampc_status ampc_fp8_quantize(void *dst, ampc_dtype fp8, const float *src, size_t n,
                              ampc_fp8_meta *m) {
  if (!m || !m->history || (fp8 != AMPC_F8_E4M3 && fp8 != AMPC_F8_E5M2) ||
      (n > 0 && (!dst || !src)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fp8_quantize: bad arguments");
  uint8_t *q = dst;
  float amax = 0.0f;
  for (size_t i = 0; i < n; i++) {
    amax = fmaxf(amax, fabsf(src[i]));
    const uint32_t x = ampc_f32_bits(src[i] * m->scale);
    q[i] = fp8 == AMPC_F8_E4M3 ? ampc_f32bits_to_e4m3bits(x, 1) : ampc_f32bits_to_e5m2bits(x, 1);
  }
  ampc_fp8_record_amax(m, amax);
  return AMPC_OK;
}

ampc_status ampc_fp8_dequantize(float *dst, const void *q, ampc_dtype fp8, size_t n,
                                const ampc_fp8_meta *m) {
  if (!m || (fp8 != AMPC_F8_E4M3 && fp8 != AMPC_F8_E5M2) || (n > 0 && (!dst || !q)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fp8_dequantize: bad arguments");
  const uint8_t *b = q;
  for (size_t i = 0; i < n; i++) {
    const uint32_t x =
        fp8 == AMPC_F8_E4M3 ? ampc_e4m3bits_to_f32bits(b[i]) : ampc_e5m2bits_to_f32bits(b[i]);
    dst[i] = ampc_bits_f32(x) * m->scale_inv;
  }
  return AMPC_OK;
}
