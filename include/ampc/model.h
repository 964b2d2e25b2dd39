/*
 * ampc/model.h: models trained by the engine. For now the small MLP classifier
 * that exercises the engine in every preset (the multimodal model comes with
 * the main job).
 *
 * MLP: x [b, in] (FP32 data) -> fc1 -> GELU -> fc2 -> GELU -> head -> logits
 * [b, classes] -> cross-entropy. Parameters "fc1.weight" [hidden, in],
 * "fc1.bias" [hidden], "fc2.weight" [hidden, hidden], "fc2.bias", "head.weight"
 * [classes, hidden], "head.bias" (torch.nn.Linear layout and default init
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in))), branch "heads". Dtypes come from the
 * autocast policy of the trainer's preset (linear reads and writes the 16-bit
 * dtype, GELU follows, the loss is FP32); gradients are stored in the working
 * dtype; the backward pass is seeded with the trainer's loss scale.
 */
#ifndef AMPC_MODEL_H
#define AMPC_MODEL_H

#include <stdint.h>

#include "ampc/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ampc_mlp_config {
  int64_t in, hidden, classes;
} ampc_mlp_config;

enum { AMPC_MLP_NPARAMS = 6 };

/* Fill the AMPC_MLP_NPARAMS parameter specs of the MLP (names point to static
 * strings). Errors: AMPC_ERR_INVALID_ARG for non-positive sizes. */
ampc_status ampc_mlp_specs(const ampc_mlp_config *c, ampc_param_spec specs[AMPC_MLP_NPARAMS]);

typedef struct ampc_mlp {
  ampc_mlp_config cfg;
  int64_t max_batch;
  ampc_trainer *T;         /* borrowed: holds the parameters */
  ampc_dtype adt;          /* activation dtype of the linear layers */
  void *x;                 /* [max_batch, in] adt */
  void *h1, *a1, *h2, *a2; /* [max_batch, hidden] adt: pre- and post-GELU */
  void *logits;            /* [max_batch, classes] adt */
  void *d_big, *d_big2;    /* [max_batch, hidden] gradient workspaces (grad dtype) */
  void *dlogits;           /* [max_batch, classes] grad dtype */
} ampc_mlp;

/* Activation buffers for batches of up to max_batch rows; the trainer must
 * have been initialised with ampc_mlp_specs. Errors: AMPC_ERR_NOMEM,
 * AMPC_ERR_INVALID_ARG. */
ampc_status ampc_mlp_create(ampc_mlp *M, const ampc_mlp_config *c, ampc_trainer *T,
                            int64_t max_batch);
void ampc_mlp_free(ampc_mlp *M);

/* Forward pass on b <= max_batch rows x [b, in] with labels y [b]: *loss is
 * the mean cross-entropy (FP32, unscaled), *correct the number of argmax hits.
 * When loss_scale > 0 the backward pass runs too, seeded with loss_scale (and
 * grad_div: the loss is divided by grad_div micro-batches), accumulating into
 * the trainer's gradients. loss_scale = 0: evaluation only. */
ampc_status ampc_mlp_run(ampc_mlp *M, int64_t b, const float *x, const int32_t *y, float loss_scale,
                         float grad_div, float *loss, int64_t *correct);

/* Synthetic classification data (src/data/synth.c): `classes` Gaussian blobs
 * in R^in with centres drawn N(0, sep^2) and unit noise, from seed. x [n, in]
 * FP32, y [n] in [0, classes). */
void ampc_synth_blobs(int64_t n, int64_t in, int64_t classes, float sep, uint64_t seed, float *x,
                      int32_t *y);

#ifdef __cplusplus
}
#endif
#endif
