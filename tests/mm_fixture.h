/*
 * tests/mm_fixture.h: the multimodal parity fixture shared by
 * tests/test_mm_parity.c (whose goldens were made from it, and whose header
 * says why these seeds: the hard negatives' margin) and
 * tests/test_model_device.c: mm-micro with vocab 11, 5 tokens, 3 classes; the
 * trainer's init from seed 5, then N(0, 0.3^2) noise (seed 13) on every weight
 * but the logit scale; 6 random images (batch seed 7) and texts with padding,
 * one with an interior pad. Header-only (static functions) for two tests.
 */
#ifndef AMPC_TESTS_MM_FIXTURE_H
#define AMPC_TESTS_MM_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "ampc/data.h"

enum { MMF_B = 6, MMF_TT = 5, MMF_VOCAB = 11, MMF_CLASSES = 3 };
static const uint64_t k_mmf_init_seed = 5, k_mmf_noise_seed = 13, k_mmf_batch_seed = 7;
/* which token positions hold a token (1) or padding (0, AMPC_TOKEN_PAD): full,
 * a single token, prefixes, an interior pad (row 4), so the masks are masks
 * and not lengths */
static const uint8_t k_mmf_used[MMF_B][MMF_TT] = {{1, 1, 1, 1, 1}, {1, 0, 0, 0, 0},
                                                  {1, 1, 1, 0, 0}, {1, 1, 0, 0, 0},
                                                  {1, 0, 1, 1, 0}, {1, 1, 1, 1, 0}};

/* N(0, 0.3^2) noise on T's FP32 weights (the master copy, or the working
 * copy in 32-true) but the logit scale, the working copy re-rounded; without
 * master weights in a 16-bit preset (16-true), on the working copy widened
 * to FP32 and rounded back once. AMPC_ERR_NOMEM if that copy cannot be made. */
static inline ampc_status mmf_perturb(ampc_trainer *T) {
  const ampc_params *P = &T->params;
  float *w = P->master ? P->master : P->wdt == AMPC_F32 ? (float *)P->w : NULL;
  float *tmp = NULL;
  if (!w) {
    if (!(tmp = (float *)malloc((size_t)P->total * sizeof *tmp)))
      return AMPC_ERR_NOMEM;
    ampc_status st = ampc_convert(tmp, AMPC_F32, P->w, P->wdt, (size_t)P->total);
    if (st != AMPC_OK) {
      free(tmp);
      return st;
    }
    w = tmp;
  }
  ampc_rng r;
  ampc_rng_seed(&r, k_mmf_noise_seed);
  for (int i = 0; i < P->count; i++) {
    const ampc_param *q = &P->p[i];
    if (strcmp(q->name, "heads.logit_scale") == 0)
      continue;
    for (int64_t e = 0; e < q->numel; e++)
      w[q->offset + e] += (float)(0.3 * ampc_rng_normal(&r));
  }
  if (tmp) {
    const ampc_status st = ampc_convert(P->w, P->wdt, tmp, AMPC_F32, (size_t)P->total);
    free(tmp);
    return st;
  }
  ampc_params_sync_working(&T->params);
  return AMPC_OK;
}

/* The batch: npix random pixels (the parity model's: MMF_B * 8 * 8 * 3),
 * tokens [MMF_B, MMF_TT] with k_mmf_used's padding, labels [MMF_B]. */
static inline void mmf_batch(uint8_t *images, int64_t npix, int32_t *tokens, int32_t *labels) {
  ampc_rng r;
  ampc_rng_seed(&r, k_mmf_batch_seed);
  for (int64_t i = 0; i < npix; i++)
    images[i] = (uint8_t)(ampc_rng_next(&r) % 256);
  for (int b = 0; b < MMF_B; b++) {
    for (int t = 0; t < MMF_TT; t++)
      tokens[b * MMF_TT + t] =
          k_mmf_used[b][t] ? 1 + (int32_t)(ampc_rng_next(&r) % (MMF_VOCAB - 1)) : AMPC_TOKEN_PAD;
    labels[b] = (int32_t)(ampc_rng_next(&r) % MMF_CLASSES);
  }
}

#endif
