/*
 * src/numeric/store.c: ampc_store_f32, rounding FP32 results into storage while
 * counting what the rounding did (underflow to zero, subnormals, overflow, NaN,
 * max |x|). The counts are exact: they compare each FP32 input with the value
 * actually stored, so they say what the format did, not what it might do.
 */
#include "internal.h"

#include <string.h>

#include "numeric/convert_impl.h"
#include "numeric/numeric.h"

void ampc_round_stats_merge(ampc_round_stats *into, const ampc_round_stats *from) {
  into->count += from->count;
  into->underflow += from->underflow;
  into->subnormal += from->subnormal;
  into->overflow += from->overflow;
  into->inf += from->inf;
  into->nan += from->nan;
  if (from->max_abs > into->max_abs)
    into->max_abs = from->max_abs;
}

/* Count one value: x the FP32 input bits, cls the class of what was stored. */
static inline void count1(ampc_round_stats *s, uint32_t x, ampc_fpclass cls) {
  const uint32_t ax = x & 0x7FFFFFFFu;
  const int finite_in = ax < 0x7F800000u;
  s->underflow += finite_in && ax != 0 && cls == AMPC_CLASS_ZERO;
  s->subnormal += cls == AMPC_CLASS_SUBNORMAL;
  s->overflow += finite_in && (cls == AMPC_CLASS_INF || cls == AMPC_CLASS_NAN);
  s->inf += cls == AMPC_CLASS_INF;
  s->nan += cls == AMPC_CLASS_NAN;
  if (finite_in && ampc_bits_f32(ax) > s->max_abs)
    s->max_abs = ampc_bits_f32(ax);
}

void ampc_store_stats_portable(void *dst, ampc_dtype dt, const float *src, size_t n,
                               ampc_round_stats *s) {
  for (size_t i = 0; i < n; i++) {
    const uint32_t x = ampc_f32_bits(src[i]);
    uint32_t out;
    switch (dt) {
    case AMPC_F16: out = ((uint16_t *)dst)[i] = ampc_f32bits_to_f16bits(x); break;
    case AMPC_BF16: out = ((uint16_t *)dst)[i] = ampc_f32bits_to_bf16bits(x); break;
    case AMPC_F8_E4M3: out = ((uint8_t *)dst)[i] = ampc_f32bits_to_e4m3bits(x, 0); break;
    case AMPC_F8_E5M2: out = ((uint8_t *)dst)[i] = ampc_f32bits_to_e5m2bits(x, 0); break;
    default: out = x, ((float *)dst)[i] = src[i]; break;
    }
    count1(s, x, ampc_classify(dt, out));
  }
  s->count += n;
}

static ampc_status store_impl(void *dst, ampc_dtype dt, const float *src, size_t n,
                              ampc_round_stats *stats) {
  if (!stats)
    return ampc_convert(dst, dt, src, AMPC_F32, n);
  if ((unsigned)dt >= AMPC_DTYPE_COUNT)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_store_f32: invalid dtype %d", (int)dt);
  if (n == 0)
    return AMPC_OK;
  if (!dst || !src)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_store_f32: NULL buffer with n = %zu", n);
  if ((dt == AMPC_F16 || dt == AMPC_BF16) && ampc_use_avx2())
    ampc_store_stats_avx2(dst, dt, src, n, stats);
  else
    ampc_store_stats_portable(dst, dt, src, n, stats);
  return AMPC_OK;
}

ampc_status ampc_store_f32(void *dst, ampc_dtype dt, const float *src, size_t n,
                           ampc_round_stats *stats) {
  const ampc_status st = store_impl(dst, dt, src, n, stats);
  ampc_tally *const t = ampc_tally_tls; /* the rounding tally (ampc/tally.h) */
  if (t && st == AMPC_OK && n > 0)
    ampc_tally_count(t, src, dst, dt, n);
  return st;
}
