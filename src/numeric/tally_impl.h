/*
 * src/numeric/tally_impl.h: the rounding tally's counting loops behind
 * ampc_tally_count (tally.c), one per instruction-set path, with the counts
 * they add in one struct; tests compare the paths (ampc_tally_count_path).
 */
#ifndef AMPC_TALLY_IMPL_H
#define AMPC_TALLY_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/tally.h"

/* What a counting loop adds: the rounding classes, FP32 zeros, and max |x|
 * as the bits of the largest finite |x| (start: the slot's; the loop keeps
 * the larger). */
typedef struct ampc_tally_acc {
  uint64_t under, sub, over, inf, nan, zeros;
  uint32_t maxbits;
} ampc_tally_acc;

/* The AVX-512 F/BW/VL loops (tally_avx512.c; call only when ampc_use_avx512()):
 * count16 for n FP32 values src[0..n) stored as dst[0..n) in binary16 or
 * bfloat16 (emask: the exponent field's bits, inf_bits: |inf|'s bits),
 * count32 for FP32 stores (only src is read). hist[0..256): the exponent
 * histogram the counts are added to. */
void ampc_tally_count16_avx512(ampc_tally_acc *acc, uint64_t *hist, const float *src,
                               const uint16_t *dst, size_t n, uint16_t emask, uint16_t inf_bits);
void ampc_tally_count32_avx512(ampc_tally_acc *acc, uint64_t *hist, const float *src, size_t n);

/* The AVX2 loops (tally_avx2.c; call only when ampc_use_avx2()), 32 values
 * at a time, the same contract as the AVX-512 ones. */
void ampc_tally_count16_avx2(ampc_tally_acc *acc, uint64_t *hist, const float *src,
                             const uint16_t *dst, size_t n, uint16_t emask, uint16_t inf_bits);
void ampc_tally_count32_avx2(ampc_tally_acc *acc, uint64_t *hist, const float *src, size_t n);

/* the counting paths */
enum { AMPC_TALLY_PORTABLE = 0, AMPC_TALLY_AVX2 = 1, AMPC_TALLY_AVX512 = 2 };

/* The path ampc_tally_count takes on this CPU: AVX-512 where ampc_use_avx512(),
 * else AVX2 where ampc_use_avx2() (so AMPC_ISA=avx2 picks AVX2 and
 * AMPC_ISA=portable the portable loops), else portable (read once). */
int ampc_tally_path(void);

/* ampc_tally_count on a chosen path (AMPC_TALLY_*) where this CPU and
 * AMPC_ISA allow it (AVX-512: ampc_use_avx512(); AVX2: ampc_use_avx2()),
 * else on the portable loops; returns the path that counted. The counts are
 * the same on every path. */
int ampc_tally_count_path(ampc_tally *t, const float *src, const void *dst, ampc_dtype dt, size_t n,
                          int path);

#endif
