/*
 * src/data/sampler.c: which training sample each position of a run's
 * sequence draws. A per-epoch permutation (ampc_sampler) of sample groups
 * (ampc_sample_groups: the concepts of an image-text set, each holding its
 * training images in several styles; or one row per group for dense
 * features), and one member of the drawn group picked by a hash of the
 * position (ampc_sample_draw), so that a batch never holds two images of one
 * concept and a resumed run draws what an uninterrupted one would. Depends on
 * the dataset and core's RNG only.
 */
#include "internal.h"

#include <stdlib.h>

#include "ampc/data.h"
#include "ampc/params.h" /* ampc_rng */

ampc_status ampc_sampler_init(ampc_sampler *s, int64_t n, uint64_t seed) {
  if (!s || n < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_sampler_init: bad arguments (n %lld)",
                     (long long)n);
  s->n = n, s->epoch = -1, s->seed = seed;
  s->perm = malloc((size_t)n * sizeof *s->perm);
  if (!s->perm)
    return ampc_fail(AMPC_ERR_NOMEM, "sampler: out of memory for %lld samples", (long long)n);
  return AMPC_OK;
}

void ampc_sampler_free(ampc_sampler *s) {
  if (s) {
    free(s->perm);
    s->perm = NULL;
  }
}

int64_t ampc_sampler_index(ampc_sampler *s, int64_t j) {
  if (!s || !s->perm || j < 0)
    return -1;
  const int64_t epoch = j / s->n;
  if (epoch != s->epoch) {
    ampc_rng r;
    ampc_rng_seed(&r, s->seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch);
    for (int64_t i = 0; i < s->n; i++)
      s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
      const int64_t k = (int64_t)(ampc_rng_next(&r) % (uint64_t)(i + 1));
      const int64_t t = s->perm[i];
      s->perm[i] = s->perm[k], s->perm[k] = t;
    }
    s->epoch = epoch;
  }
  return s->perm[j % s->n];
}

/* ---- groups ------------------------------------------------------------------------ */

typedef struct concept_sample {
  int64_t concept, index;
} concept_sample;
static int cmp_concept_sample(const void *a, const void *b) {
  const concept_sample *x = a, *y = b;
  if (x->concept != y->concept) {
    return x->concept < y->concept ? -1 : 1;
  }
  return (x->index > y->index) - (x->index < y->index);
}
static int cmp_first_member(const void *a, const void *b) {
  const int64_t *x = a, *y = b; /* {first index, group start, count} */
  return (x[0] > y[0]) - (x[0] < y[0]);
}

static ampc_status groups_alloc(ampc_sample_groups *g, int64_t n) {
  g->n = n, g->count = 0;
  g->idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *g->idx);
  g->off = malloc((size_t)(n + 1) * sizeof *g->off);
  if (!g->idx || !g->off) {
    ampc_sample_groups_free(g);
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  }
  return AMPC_OK;
}

ampc_status ampc_sample_groups_concepts(ampc_sample_groups *g, const ampc_dataset *D) {
  if (!g || !D)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_sample_groups_concepts: NULL argument");
  int64_t n = 0;
  for (int64_t i = 0; i < D->n; i++)
    n += D->split[i] == AMPC_SPLIT_TRAIN;
  AMPC_TRY(groups_alloc(g, n));
  concept_sample *cs = malloc((size_t)(n > 0 ? n : 1) * sizeof *cs);
  int64_t *grp = malloc((size_t)(n > 0 ? n : 1) * 3 * sizeof *grp);
  if (!cs || !grp) {
    free(cs), free(grp);
    ampc_sample_groups_free(g);
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  }
  for (int64_t i = 0, k = 0; i < D->n; i++) {
    if (D->split[i] == AMPC_SPLIT_TRAIN) {
      cs[k].concept = D->concept[i];
      cs[k++].index = i;
    }
  }
  qsort(cs, (size_t)n, sizeof *cs, cmp_concept_sample);
  int64_t ng = 0;
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || cs[i].concept != cs[i - 1].concept) {
      grp[3 * ng] = cs[i].index, grp[3 * ng + 1] = i, grp[3 * ng + 2] = 0;
      ng++;
    }
  for (int64_t c = 0; c < ng; c++)
    grp[3 * c + 2] = (c + 1 < ng ? grp[3 * (c + 1) + 1] : n) - grp[3 * c + 1];
  qsort(grp, (size_t)ng, 3 * sizeof *grp, cmp_first_member);
  int64_t k = 0;
  for (int64_t c = 0; c < ng; c++) {
    g->off[c] = k;
    for (int64_t m = 0; m < grp[3 * c + 2]; m++)
      g->idx[k++] = cs[grp[3 * c + 1] + m].index;
  }
  g->off[ng] = k;
  g->count = ng;
  free(cs), free(grp);
  return AMPC_OK;
}

ampc_status ampc_sample_groups_rows(ampc_sample_groups *g, int64_t n) {
  if (!g || n < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_sample_groups_rows: bad arguments");
  AMPC_TRY(groups_alloc(g, n));
  for (int64_t i = 0; i < n; i++)
    g->idx[i] = i;
  for (int64_t i = 0; i <= n; i++)
    g->off[i] = i;
  g->count = n;
  return AMPC_OK;
}

void ampc_sample_groups_free(ampc_sample_groups *g) {
  if (!g)
    return;
  free(g->idx), free(g->off);
  g->idx = g->off = NULL;
  g->n = g->count = 0;
}

uint64_t ampc_sample_hash(uint64_t seed, int64_t pos) {
  uint64_t z = seed * 0xD1B54A32D192ED03ull + (uint64_t)pos * 0x9E3779B97F4A7C15ull + 0x5851F42Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t ampc_sample_draw(ampc_sampler *s, const ampc_sample_groups *g, uint64_t seed, int64_t pos,
                         uint64_t *h) {
  const int64_t c = ampc_sampler_index(s, pos);
  const int64_t n_in = g->off[c + 1] - g->off[c];
  *h = ampc_sample_hash(seed, pos);
  return g->idx[g->off[c] + (n_in > 1 ? (int64_t)(*h % (uint64_t)n_in) : 0)];
}
