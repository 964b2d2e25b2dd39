/*
 * src/data/synth.c: synthetic Gaussian-blob classification data for the
 * engine's tests (deterministic from a seed).
 */
#include "internal.h"

#include "ampc/data.h"
#include "ampc/params.h" /* ampc_rng */

void ampc_synth_blobs(int64_t n, int64_t in, int64_t classes, float sep, uint64_t seed, float *x,
                      int32_t *y) {
  ampc_rng r;
  ampc_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) {
    const int32_t k = (int32_t)(ampc_rng_next(&r) % (uint64_t)classes);
    y[i] = k;
    /* the centre of class k, regenerated from its own stream */
    ampc_rng ck;
    ampc_rng_seed(&ck, seed * 1000003ull + (uint64_t)k + 1);
    for (int64_t j = 0; j < in; j++)
      x[i * in + j] = (float)(ampc_rng_normal(&ck) * (double)sep + ampc_rng_normal(&r));
  }
}
