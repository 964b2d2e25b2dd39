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
 * copy in 32-true) but the logit scale, the working copy re-rounded.
 * AMPC_ERR_INVALID_ARG without an FP32 copy to perturb. */
static inline ampc_status mmf_perturb(ampc_trainer *T) {
  if (!T->params.master && T->params.wdt != AMPC_F32)
    return AMPC_ERR_INVALID_ARG;
  float *w = T->params.master ? T->params.master : (float *)T->params.w;
  ampc_rng r;
  ampc_rng_seed(&r, k_mmf_noise_seed);
  for (int i = 0; i < T->params.count; i++) {
    const ampc_param *q = &T->params.p[i];
    if (strcmp(q->name, "heads.logit_scale") == 0)
      continue;
    for (int64_t e = 0; e < q->numel; e++)
      w[q->offset + e] += (float)(0.3 * ampc_rng_normal(&r));
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
