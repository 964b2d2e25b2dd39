/*
 * ampc/amp.h: precision presets and the autocast policy table.
 *
 * Presets (names as in PyTorch Lightning's `precision=`; DESIGN.md section 2):
 *   32-true     everything FP32
 *   16-mixed    binary16 working weights and activations for GEMM-type ops,
 *               FP32 master weights, dynamic loss scaling, FP32 accumulation
 *   bf16-mixed  as 16-mixed with bfloat16, no loss scaling
 *   16-true     binary16 everywhere (no master, FP16 optimizer state, FP16 acc)
 *   bf16-true   bfloat16 everywhere (no master, BF16 optimizer state)
 *
 * The policy says, for each op and preset, which dtype the op reads, computes
 * in and writes. It is one table (src/amp/policy.c) that the model consults;
 * no layer decides this on its own. It follows PyTorch's autocast (CUDA op
 * lists, torch.amp, 1.13+): GEMM-type ops (linear, patch embedding, attention
 * products) run on 16-bit inputs and write 16-bit; ops on autocast's FP32 list
 * (softmax, layer norm, losses, exp/log/pow, norms and reductions) compute in
 * FP32 and, in the mixed presets, write FP32; elementwise ops not on either
 * list follow their inputs (GELU on a 16-bit linear output writes 16-bit; a
 * residual add of an FP32 stream and a 16-bit branch promotes to FP32). In
 * the -true presets every op writes the preset's dtype (model.half() style).
 * Whatever the storage, every kernel computes in FP32 registers and rounds
 * once when it stores.
 */
#ifndef AMPC_AMP_H
#define AMPC_AMP_H

#include <stdbool.h>

#include "ampc/dtype.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values go into logs and checkpoints: append only. */
typedef enum ampc_precision {
  AMPC_PRECISION_32_TRUE = 0,
  AMPC_PRECISION_16_MIXED = 1,
  AMPC_PRECISION_BF16_MIXED = 2,
  AMPC_PRECISION_16_TRUE = 3,
  AMPC_PRECISION_BF16_TRUE = 4,
  AMPC_PRECISION_COUNT
} ampc_precision;

/* "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"; "?" if invalid. */
const char *ampc_precision_name(ampc_precision p);
/* Parse a preset name (exactly as above). AMPC_ERR_INVALID_ARG otherwise. */
ampc_status ampc_precision_parse(const char *name, ampc_precision *out);
/* The 16-bit (or 32-bit) dtype of the preset's working weights and GEMM inputs. */
ampc_dtype ampc_precision_lowp(ampc_precision p);
/* True for the mixed presets (FP32 master weights by default). */
bool ampc_precision_is_mixed(ampc_precision p);

/* The ops of DESIGN.md section 1 whose dtypes the policy decides. */
typedef enum ampc_op_id {
  AMPC_OPID_LINEAR = 0,
  AMPC_OPID_PATCH_EMBED,
  AMPC_OPID_ATTN_SCORES, /* Q K^T */
  AMPC_OPID_ATTN_VALUES, /* P V */
  AMPC_OPID_EMBEDDING,   /* token + position lookup */
  AMPC_OPID_LAYER_NORM,
  AMPC_OPID_SOFTMAX,
  AMPC_OPID_GELU,
  AMPC_OPID_RESIDUAL_ADD,
  AMPC_OPID_MEAN_POOL,
  AMPC_OPID_L2_NORM,
  AMPC_OPID_CROSS_ENTROPY,
  AMPC_OPID_INFONCE,
  AMPC_OPID_BCE_LOGITS,
  AMPC_OPID_COUNT
} ampc_op_id;

/* How autocast treats an op. */
typedef enum ampc_op_class {
  AMPC_OPCLASS_LOWP = 1,    /* autocast's lower-precision list: GEMM-type */
  AMPC_OPCLASS_FP32 = 2,    /* autocast's FP32 list: numerically sensitive */
  AMPC_OPCLASS_FOLLOW = 3,  /* elementwise, output follows the input dtype */
  AMPC_OPCLASS_PROMOTE = 4, /* elementwise on several inputs: widest dtype */
} ampc_op_class;

typedef struct ampc_op_policy {
  ampc_op_class cls;
  ampc_dtype input;   /* dtype the op's inputs are read in (cast on entry) */
  ampc_dtype compute; /* always F32 on this engine: registers are FP32 */
  ampc_dtype output;  /* dtype the op stores its result in */
} ampc_op_policy;

/* The policy of op under preset p. Errors: AMPC_ERR_INVALID_ARG for an
 * invalid preset or op (out untouched). */
ampc_status ampc_policy_get(ampc_precision p, ampc_op_id op, ampc_op_policy *out);
/* "linear", "layer_norm", ... (PyTorch function names); "?" if invalid. */
const char *ampc_op_name(ampc_op_id op);

#ifdef __cplusplus
}
#endif
#endif
