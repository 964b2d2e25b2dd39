/*
 * src/numeric/round_stats.c: the counting behind ampc_store_f32's statistics:
 * the portable rounding loop that stores FP32 values into any dtype and
 * counts what the rounding did (underflow to zero, subnormals, overflow,
 * inf, NaN, max |x|), and the merge of two sets of counts. A leaf: the
 * dispatch (store.c), the AVX2 loop (convert_avx2.c, for its tail) and the
 * rounding tally (tally.c) call it; it calls none of them.
 */
#include "internal.h"

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
