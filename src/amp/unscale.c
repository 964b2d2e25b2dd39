/*
 * src/amp/unscale.c: the gradient pass between backward and the optimizer:
 * unscale by 1/S in FP32, count non-finite values, and form the global L2
 * norm for clipping (on unscaled values, so clipping never depends on S).
 *
 * The sum of squares runs in double over fixed 4096-element chunks whose
 * partial sums are added in chunk order, so the norm has the same bits for
 * any number of threads.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

#include "ampc/amp.h"
#include "numeric/numeric.h"

enum { CHUNK = 4096 };

ampc_status ampc_grad_unscale_check(const void *g, ampc_dtype gdt, int64_t n, float inv_scale,
                                    int64_t *nonfinite, double *norm) {
  if ((!g && n > 0) || n < 0 || !nonfinite || !norm ||
      (gdt != AMPC_F32 && gdt != AMPC_F16 && gdt != AMPC_BF16))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_grad_unscale_check: bad arguments");
  const int64_t nchunks = (n + CHUNK - 1) / CHUNK;
  double *part = malloc((size_t)(nchunks > 0 ? nchunks : 1) * sizeof *part);
  int64_t *bad = malloc((size_t)(nchunks > 0 ? nchunks : 1) * sizeof *bad);
  if (!part || !bad) {
    free(part);
    free(bad);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_grad_unscale_check: out of memory");
  }
#pragma omp parallel for schedule(static) if (n > 8 * CHUNK)
  for (int64_t c = 0; c < nchunks; c++) {
    const int64_t lo = c * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
    double s = 0.0;
    int64_t nb = 0;
    for (int64_t i = lo; i < hi; i++) {
      const float u = ampc_elem_load(g, gdt, i) * inv_scale;
      if (isfinite(u))
        s += (double)u * (double)u;
      else
        nb++;
    }
    part[c] = s;
    bad[c] = nb;
  }
  double s = 0.0;
  int64_t nb = 0;
  for (int64_t c = 0; c < nchunks; c++)
    s += part[c], nb += bad[c];
  free(part);
  free(bad);
  *nonfinite = nb;
  *norm = sqrt(s);
  return AMPC_OK;
}

float ampc_clip_coef(double norm, float max_norm) {
  if (!(max_norm > 0.0f) || !(norm > (double)max_norm))
    return 1.0f;
  return (float)((double)max_norm / norm);
}
