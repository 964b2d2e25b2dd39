/*
 * src/amp/unscale.c: the gradient pass between backward and the optimizer:
 * unscale by 1/S in FP32, count non-finite values, and form the global L2
 * norm for clipping (on unscaled values, so clipping never depends on S).
 *
 * The sum of squares runs in double over fixed 4096-element chunks whose
 * partial sums are added in chunk order, so the norm has the same bits for
 * any number of threads. Within a chunk the values are widened 256 at a time
 * (ampc_convert) and summed into four interleaved partial sums (element i
 * into sum i mod 4, combined as (s0 + s1) + (s2 + s3)): independent add chains.
 */
#include "internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "ampc/amp.h"
#include "ampc/params.h"
#include "numeric/numeric.h"

enum { CHUNK = 4096 };
_Static_assert((int)CHUNK == (int)AMPC_SHARD_ALIGN, "ZeRO-1's shards are whole chunks of the norm");

/* q[i mod 4] += (u[i] * inv)^2 in double for the finite ones; returns how
 * many were not finite. */
static int64_t sumsq4(const float *u, int64_t len, float inv, double q[4]) {
  double q0 = q[0], q1 = q[1], q2 = q[2], q3 = q[3];
  int64_t nb = 0, i = 0;
#define AMPC_SQ(qq, k)                                                                             \
  do {                                                                                             \
    const float v = u[k] * inv;                                                                    \
    const int ok = isfinite(v);                                                                    \
    qq += ok ? (double)v * (double)v : 0.0;                                                        \
    nb += !ok;                                                                                     \
  } while (0)
  for (; i + 4 <= len; i += 4) {
    AMPC_SQ(q0, i);
    AMPC_SQ(q1, i + 1);
    AMPC_SQ(q2, i + 2);
    AMPC_SQ(q3, i + 3);
  }
  if (i < len)
    AMPC_SQ(q0, i);
  if (i + 1 < len)
    AMPC_SQ(q1, i + 1);
  if (i + 2 < len)
    AMPC_SQ(q2, i + 2);
#undef AMPC_SQ
  q[0] = q0, q[1] = q1, q[2] = q2, q[3] = q3;
  return nb;
}

ampc_status ampc_grad_unscale_parts(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                    double *part, int64_t *bad) {
  if ((!g && n > 0) || n < 0 || (n > 0 && (!part || !bad)) ||
      (gdt != AMPC_F32 && gdt != AMPC_F16 && gdt != AMPC_BF16))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_grad_unscale_parts: bad arguments");
  const int64_t nchunks = (n + CHUNK - 1) / CHUNK;
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) if (n > 8 * CHUNK)
  for (int64_t c = 0; c < nchunks; c++) {
    ampc_tally_adopt(tally);
    const int64_t lo = c * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
    double q[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t nb = 0;
    float buf[256];
    for (int64_t b0 = lo; b0 < hi; b0 += 256) {
      const int64_t len = hi - b0 < 256 ? hi - b0 : 256;
      const float *u = buf;
      if (gdt == AMPC_F32)
        u = (const float *)g + b0;
      else
        ampc_convert(buf, AMPC_F32, (const char *)g + b0 * (int64_t)ampc_dtype_size(gdt), gdt,
                     (size_t)len);
      nb += sumsq4(u, len, inv_scale, q); /* b0 - lo is a multiple of 4 */
    }
    part[c] = (q[0] + q[1]) + (q[2] + q[3]);
    bad[c] = nb;
  }
  return AMPC_OK;
}

ampc_status ampc_grad_unscale_check(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                    int64_t *nonfinite, double *norm, ampc_scratch *ws) {
  if ((!g && n > 0) || n < 0 || !nonfinite || !norm ||
      (gdt != AMPC_F32 && gdt != AMPC_F16 && gdt != AMPC_BF16))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_grad_unscale_check: bad arguments");
  const int64_t nchunks = (n + CHUNK - 1) / CHUNK;
  const size_t nc = (size_t)(nchunks > 0 ? nchunks : 1);
  /* the per-chunk sums: from the caller's scratch when it is large enough */
  const bool own = !ws || !ws->base || ws->bytes < ampc_grad_unscale_scratch_bytes(n);
  double *part = own ? malloc(nc * sizeof *part) : ws->base;
  int64_t *bad = own ? malloc(nc * sizeof *bad) : (int64_t *)(void *)(part + nc);
  if (!part || !bad) {
    if (own)
      free(part), free(bad);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_grad_unscale_check: out of memory");
  }
  const ampc_status st = ampc_grad_unscale_parts(g, gdt, n, inv_scale, part, bad);
  double s = 0.0;
  int64_t nb = 0;
  for (int64_t c = 0; st == AMPC_OK && c < nchunks; c++)
    s += part[c], nb += bad[c];
  if (own)
    free(part), free(bad);
  *nonfinite = nb;
  *norm = sqrt(s);
  return st;
}

size_t ampc_grad_unscale_scratch_bytes(int64_t n) {
  const size_t nc = (size_t)(n > 0 ? (n + CHUNK - 1) / CHUNK : 1);
  return nc * (sizeof(double) + sizeof(int64_t));
}

float ampc_clip_coef(double norm, float max_norm) {
  if (!(max_norm > 0.0f) || !(norm > (double)max_norm))
    return 1.0f;
  return (float)((double)max_norm / norm);
}
