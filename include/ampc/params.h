/*
 * ampc/params.h: the parameter table (DESIGN.md sections 1 and 5) and the
 * engine's random number generator.
 *
 * Every parameter tensor has a PyTorch-style name ("fc1.weight",
 * "vision.blocks.0.attn.qkv.weight"), a shape and a model branch. Storage is
 * ONE allocation per role, each tensor a slice at the same element offset in
 * every role:
 *   w       working weights, the dtype the forward/backward passes read
 *           (F32 in 32-true, else the preset's 16-bit dtype)
 *   master  FP32 master weights (NULL when off, and in 32-true where w is FP32)
 *   grad    gradients, in the working dtype (backward accumulates into them)
 *   m, v    optimizer moments (AdamW exp_avg, exp_avg_sq; SGD uses m as its
 *           momentum buffer and has no v), dtype state_dtype
 *   comp    Kahan compensation of the weight update (--weight-update kahan:
 *           16-bit weights without a master), in wdt; NULL otherwise
 * so zeroing, unscaling, the non-finite check and the optimizer are flat loops
 * over `total` elements, and the bytes of each role are known exactly. Slices
 * start on 64-byte boundaries; the padding between them is kept at zero.
 */
#ifndef AMPC_PARAMS_H
#define AMPC_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Model branches for telemetry (values go into logs: append only). */
typedef enum ampc_branch {
  AMPC_BRANCH_VISION = 0,
  AMPC_BRANCH_TEXT = 1,
  AMPC_BRANCH_FUSION = 2,
  AMPC_BRANCH_HEADS = 3,
  AMPC_BRANCH_COUNT
} ampc_branch;

/* "vision", "text", "fusion", "heads"; "?" if invalid. */
const char *ampc_branch_name(ampc_branch b);

/* How a tensor is initialised (in FP32, then rounded once to the working
 * dtype; the master copy keeps the FP32 value). */
typedef enum ampc_init {
  AMPC_INIT_ZEROS = 0,
  AMPC_INIT_ONES = 1,
  AMPC_INIT_UNIFORM = 2, /* U(-a, a) */
  AMPC_INIT_NORMAL = 3,  /* N(0, a^2) */
  AMPC_INIT_CONST = 4,   /* every element = a */
} ampc_init;

enum { AMPC_PARAM_MAX_DIMS = 4, AMPC_PARAM_NAME_MAX = 96 };

/* What a model declares for each parameter. */
typedef struct ampc_param_spec {
  const char *name; /* unique, < AMPC_PARAM_NAME_MAX characters */
  int ndim;         /* 1..AMPC_PARAM_MAX_DIMS */
  int64_t shape[AMPC_PARAM_MAX_DIMS];
  ampc_branch branch;
  ampc_init init;
  float init_arg; /* a of ampc_init */
  bool no_decay;  /* exclude from weight decay (torch applies decay to every
                     parameter by default; models may opt out for biases) */
} ampc_param_spec;

typedef struct ampc_param {
  char name[AMPC_PARAM_NAME_MAX];
  int ndim;
  int64_t shape[AMPC_PARAM_MAX_DIMS];
  int64_t numel;
  int64_t offset; /* element offset of this tensor in every role buffer */
  ampc_branch branch;
  bool decay;
} ampc_param;

/* Roles, for the byte account. */
typedef enum ampc_param_role {
  AMPC_ROLE_WEIGHTS = 0,
  AMPC_ROLE_MASTER = 1,
  AMPC_ROLE_GRADS = 2,
  AMPC_ROLE_MOMENT1 = 3,
  AMPC_ROLE_MOMENT2 = 4,
  AMPC_ROLE_COMPENSATION = 5,
  AMPC_ROLE_COUNT
} ampc_param_role;

typedef struct ampc_params {
  int count;
  ampc_param *p;
  int64_t total;                 /* elements per role buffer, padding included */
  int64_t numel;                 /* parameters, padding excluded */
  ampc_dtype wdt;                /* working weights and gradients */
  ampc_dtype sdt;                /* optimizer moments */
  void *w;                       /* [total] wdt */
  float *master;                 /* [total] F32, or NULL */
  void *grad;                    /* [total] wdt */
  void *m, *v;                   /* [total] sdt, or NULL when the optimizer has none */
  void *comp;                    /* [total] wdt Kahan compensation, or NULL */
  size_t bytes[AMPC_ROLE_COUNT]; /* bytes allocated per role (0 when absent) */
  /* ZeRO-1 (ampc_params_shard): master, m, v and comp hold only the elements
   * [shard_lo, shard_lo + shard_n) of the table, element e at index
   * e - shard_lo; w and grad stay whole. Without a shard: 0 and total. */
  int64_t shard_lo, shard_n;
} ampc_params;

/* ZeRO-1's partition (Rajbhandari et al. 2020, "ZeRO", stage 1: the optimizer
 * state partitioned over the data-parallel ranks): the elements of a table
 * of `total` elements that rank `rank` of `size` owns, [*lo, *lo + *n).
 * Shards are S = AMPC_SHARD_ALIGN * ceil(total / (AMPC_SHARD_ALIGN * size))
 * elements, in rank order, the last ones shorter (or empty): a multiple of
 * the gradient norm's 4096-element chunk (ampc_grad_unscale_check), so the
 * ranks' partial norms are the chunks one process sums, and the norm keeps
 * its bits. size < 1 or rank outside [0, size): *lo = 0, *n = total. */
enum { AMPC_SHARD_ALIGN = 4096 };
void ampc_shard_range(int64_t total, int size, int rank, int64_t *lo, int64_t *n);

/* The engine's PRNG: xoshiro256** (Blackman and Vigna 2018), seeded through
 * splitmix64. Its 4 words go into checkpoints. */
typedef struct ampc_rng {
  uint64_t s[4];
} ampc_rng;
void ampc_rng_seed(ampc_rng *r, uint64_t seed);
uint64_t ampc_rng_next(ampc_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double ampc_rng_uniform(ampc_rng *r);
/* Standard normal (Box-Muller, in double). */
double ampc_rng_normal(ampc_rng *r);

/* Build the table for n specs and allocate the roles: working weights in
 * wdt, grads in wdt, FP32 master iff `master`, `moments` (0, 1 or 2) moment
 * buffers in sdt. Tensors are initialised from rng in spec order (masters get
 * the FP32 values, w their rounding); grads and moments are zero. Errors:
 * AMPC_ERR_INVALID_ARG (duplicate/empty/long name, bad shape or dtype; the
 * message names the tensor), AMPC_ERR_NOMEM. On error *out is left empty. */
ampc_status ampc_params_create(ampc_params *out, const ampc_param_spec *specs, int n,
                               ampc_dtype wdt, bool master, ampc_dtype sdt, int moments,
                               ampc_rng *rng);
void ampc_params_free(ampc_params *P);

/* Allocate the Kahan compensation buffer (zeros, wdt, bytes[AMPC_ROLE_
 * COMPENSATION]) for --weight-update kahan; a no-op when it exists. Errors:
 * AMPC_ERR_INVALID_ARG (NULL, FP32 weights or a master: nothing to
 * compensate), AMPC_ERR_NOMEM. */
ampc_status ampc_params_add_compensation(ampc_params *P);

/* Keep only the elements [lo, lo + n) of the roles ZeRO-1 partitions (master,
 * m, v, comp; their values copied, the whole buffers freed; bytes[] becomes
 * the shard's): each rank's part of the optimizer state and master weights
 * (ampc_shard_range). Once per table. Errors: AMPC_ERR_INVALID_ARG (a range
 * outside the table, a table sharded already), AMPC_ERR_NOMEM (the roles
 * are cut one at a time: the table is then partly cut, only fit to be
 * freed). */
ampc_status ampc_params_shard(ampc_params *P, int64_t lo, int64_t n);

/* Index of the named tensor, or -1. */
int ampc_params_find(const ampc_params *P, const char *name);
/* Pointers to tensor i in a role buffer (NULL when the role is absent). */
void *ampc_param_w(const ampc_params *P, int i);
void *ampc_param_grad(const ampc_params *P, int i);
float *ampc_param_master(const ampc_params *P, int i); /* NULL in a sharded table */

/* Set every gradient to zero (one memset). */
void ampc_params_zero_grad(ampc_params *P);
/* Round the master weights into the working weights (no-op without master;
 * in a sharded table, the shard's elements). */
void ampc_params_sync_working(ampc_params *P);

#ifdef __cplusplus
}
#endif
#endif
