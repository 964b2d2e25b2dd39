/*
 * src/core/rng.c: xoshiro256** (Blackman and Vigna, "Scrambled linear
 * pseudorandom number generators", 2018) seeded by splitmix64, as their paper
 * recommends. Deterministic across platforms; its state is 4 words.
 */
#include "internal.h"

#include <math.h>

#include "ampc/params.h"

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void ampc_rng_seed(ampc_rng *r, uint64_t seed) {
  uint64_t z = seed;
  for (int i = 0; i < 4; i++) {
    z += 0x9E3779B97F4A7C15ull;
    uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    r->s[i] = x ^ (x >> 31);
  }
}

uint64_t ampc_rng_next(ampc_rng *r) {
  uint64_t *s = r->s;
  const uint64_t out = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double ampc_rng_uniform(ampc_rng *r) { return (double)(ampc_rng_next(r) >> 11) * 0x1p-53; }

double ampc_rng_normal(ampc_rng *r) {
  /* Box-Muller with u1 in (0, 1] so log never sees 0 */
  const double u1 = 1.0 - ampc_rng_uniform(r);
  const double u2 = ampc_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}
