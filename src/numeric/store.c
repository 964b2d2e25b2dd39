/*
 * src/numeric/store.c: ampc_store_f32, rounding FP32 results into storage while
 * counting what the rounding did (underflow to zero, subnormals, overflow, NaN,
 * max |x|). The counts are exact: they compare each FP32 input with the value
 * actually stored, so they say what the format did, not what it might do.
 * This file validates and dispatches: to the AVX2 loop (convert_avx2.c) or
 * the portable one (round_stats.c); neither calls back here.
 */
#include "internal.h"

#include "numeric/convert_impl.h"
#include "numeric/numeric.h"

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
