/*
 * ampc/report.h: the memory account. What a training run holds, in
 * bytes, by role, predicted from the same code paths that allocate it:
 *
 *   weights      working weights, the preset's dtype (F32 in 32-true)
 *   master       FP32 master copy (mixed presets; 0 when off or in 32-true)
 *   grads        gradients, in the working dtype
 *   moments      optimizer state: AdamW's two moments or SGD's momentum
 *                buffer, in the state dtype (F32, or the 16-bit dtype in the
 *                -true presets); 0 without an optimizer
 *   compensation the Kahan compensation of --weight-update kahan (the working
 *                dtype; 0 otherwise)
 *   activations  the model's saved activations and caches (its arena up to
 *                the gradient workspaces)
 *   workspace    the model's gradient workspaces (the rest of its arena;
 *                under fp8-mixed also the casts' BF16 containers)
 *   fp8_state    fp8-mixed: every FP8 cast's amax history and scale
 *                (ampc_fp8_sites_state_bytes; --fp8-amax-history)
 *   device_scratch  a GPU run only (ampc_mem_account_mm_on): cuBLASLt's
 *                workspace and the device scratch the CUDA layers take
 *                (an allowance), plus the slot of --attention-cast's
 *                16-bit probabilities (ampc_mmodel_attn_cast_bytes as the
 *                context allocates it: the device's scratch_slot_bytes)
 *
 * The parameter roles follow ampc_params_create exactly (every tensor padded
 * to 16 elements); the model roles follow the model's own allocation plan
 * (ampc_mmodel_plan_bytes, ampc_mlp_plan_bytes). The per-parameter table is the
 * one of Micikevicius et al. 2018 (Mixed Precision Training, section 3) and
 * Rajbhandari et al. 2020 (ZeRO, section 3.1): with Adam, 32-true holds
 * 4 + 4 + 8 = 16 bytes per parameter and 16-mixed 2 + 2 + 4 + 8 = 16 bytes:
 * mixed precision does not shrink weight and optimizer memory, only the
 * activations.
 */
#ifndef AMPC_REPORT_H
#define AMPC_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/amp.h"
#include "ampc/model.h"
#include "ampc/params.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Roles of the account (an index into ampc_mem_account.bytes). */
typedef enum ampc_mem_role {
  AMPC_MEM_WEIGHTS = 0,
  AMPC_MEM_MASTER = 1,
  AMPC_MEM_GRADS = 2,
  AMPC_MEM_MOMENTS = 3,
  AMPC_MEM_COMPENSATION = 4, /* the parameter roles end here */
  AMPC_MEM_ACTIVATIONS = 5,
  AMPC_MEM_WORKSPACE = 6,
  AMPC_MEM_FP8_STATE = 7,      /* fp8-mixed: the amax histories and scales (model accounts) */
  AMPC_MEM_DEVICE_SCRATCH = 8, /* on a GPU: cuBLASLt's workspace and the layers' scratch (an
                                  allowance, ampc_mem_device_scratch_bytes); 0 on the CPU */
  AMPC_MEM_GRAD_STAGE = 9,     /* several ranks (ampc_mem_account_shard, ranks > 1): the FP32
                                  staging of the ranks' gradient sum under --allreduce f32
                                  (ampc_accum_stage_bytes) with one micro-batch, 4 bytes per
                                  element, under ZeRO-1 the rank's shard only; 0 otherwise */
  AMPC_MEM_ROLE_COUNT
} ampc_mem_role;

/* "weights", "master", "grads", "moments", "compensation", "activations",
 * "workspace", "fp8_state", "device_scratch"; "?". */
const char *ampc_mem_role_name(ampc_mem_role r);

typedef struct ampc_mem_account {
  int64_t params;                    /* parameters (padding excluded) */
  int64_t elements;                  /* elements per parameter role (padding included) */
  int64_t batch;                     /* batch of the model roles (0: parameters only) */
  double bytes_per_param;            /* the parameter roles' bytes / params */
  size_t bytes[AMPC_MEM_ROLE_COUNT]; /* bytes per role */
  size_t total;                      /* sum of bytes[] */
  /* data parallelism (ampc_mem_account_shard): the account is rank `rank`'s of
   * `ranks`, under ZeRO stage `zero` (0 or 1); master, moments and
   * compensation hold the elements [shard_lo, shard_lo + shard_n) of the
   * `elements`. The account functions set 1 rank, zero 0, rank 0 and the
   * whole table (0, elements). */
  int ranks, zero, rank;
  int64_t shard_lo, shard_n;
} ampc_mem_account;

/* Optimizer state buffers per parameter: 2 for "adamw", 1 for "sgd" (with
 * momentum, ampc's default), 0 for "none". AMPC_ERR_INVALID_ARG otherwise. */
ampc_status ampc_mem_optimizer_moments(const char *name, int *moments);

/* The literature's table for n parameters (no padding): bytes per parameter
 * and per role under the resolved precision amp (lowp, master_weights,
 * state_dtype, weight_update; master is ignored when lowp is F32, as the
 * trainer does) with
 * `moments` (0..2) state buffers. Model roles are 0. Errors:
 * AMPC_ERR_INVALID_ARG (n < 1, moments out of range, NULL). */
ampc_status ampc_mem_account_params(int64_t n, const ampc_amp_config *amp, int moments,
                                    ampc_mem_account *out);

/* The parameter roles exactly as ampc_trainer_init would allocate them for
 * these n specs (same padding as ampc_params_create). Model roles are 0.
 * Errors: AMPC_ERR_INVALID_ARG (bad shapes, NULL). */
ampc_status ampc_mem_account_specs(const ampc_param_spec *specs, int n, const ampc_amp_config *amp,
                                   int moments, ampc_mem_account *out);

/* The account of one data-parallel rank: a (from any account function above)
 * becomes what rank `rank` of `ranks` holds under ZeRO stage `zero`.
 *
 * zero 0 (plain data parallelism): every rank holds every role; only ranks
 * and rank are recorded. zero 1 (Rajbhandari et al. 2020, "ZeRO: Memory
 * Optimizations Toward Training Trillion Parameter Models", section 5.1, P_os:
 * the optimizer state partitioned over the N data-parallel ranks; ampc, as
 * DeepSpeed's stage 1, partitions the FP32 master weights with it): master,
 * moments and compensation keep only the rank's shard of the a->elements
 * table elements, ampc_shard_range(a->elements, ranks, rank) (shards of
 * AMPC_SHARD_ALIGN-aligned size S = 4096 ceil(elements / (4096 ranks)) in rank
 * order, the last ones shorter or empty), bytes = shard elements x each
 * role's element size, exactly what ampc_params_shard leaves in
 * P->bytes[AMPC_ROLE_MASTER, MOMENT1, MOMENT2, COMPENSATION] of the table a
 * was predicted for; weights, grads and the model roles stay whole. With
 * 16-mixed and AdamW: 2 + 2 bytes per element whole, 4 + 8 sharded, so
 * 4 elements + 12 S bytes per rank. Rank 0 holds the largest shard (all but
 * the last ones are equal), so rank 0's account is the largest rank's.
 * total and bytes_per_param are recomputed (bytes per parameter of this
 * rank). Errors: AMPC_ERR_INVALID_ARG (NULL, ranks < 1, zero not 0 or 1,
 * rank outside [0, ranks), an account sharded already, an empty account). */
ampc_status ampc_mem_account_shard(ampc_mem_account *a, int ranks, int zero, int rank);

/* Every role of the multimodal model c at max batch `batch`: the parameter
 * roles from its specs, activations and workspace from ampc_mmodel_plan_bytes
 * (equal to ampc_mmodel_activation_bytes of a model created with that batch).
 * Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_mem_account_mm(const ampc_mmodel_config *c, int64_t batch,
                                const ampc_amp_config *amp, int moments, ampc_mem_account *out);

/* The account of the same run on a device (the GPU path): every role lives in
 * the device's memory; activations and workspace are the device arena
 * (ampc_mmodel_plan_bytes_on: the batch's inputs too); device_scratch is
 * ampc_mem_device_scratch_bytes plus the slot of ampc_mmodel_attn_cast_bytes on
 * AMPC_DEVICE_CUDA (0 on the CPU and AMPC_DEVICE_CPU_SPLIT). Errors: as ampc_mem_account_mm. */
ampc_status ampc_mem_account_mm_on(const ampc_mmodel_config *c, int64_t batch,
                                   const ampc_amp_config *amp, int moments, ampc_device dev,
                                   ampc_mem_account *out);

/* The device memory a GPU training step of model c at batch `batch` takes
 * beyond the parameter table and the model's arena: cuBLASLt's workspace
 * (32 MiB, the CUDA context's default) plus the CUDA layers' scratch, which
 * the context grows to the largest single call's need. That scratch is
 * bounded from the layers' code (src/backend/cuda/: the FP32 copies of a staged
 * GEMM's A, B and C and of a linear layer's output, each at most R x
 * max(dim, mlp) FP32 values, R the most rows any layer sees) by
 * 4 R max(dim, mlp) x 4 bytes: an allowance, not an exact count (checked
 * against cudaMemGetInfo by bench/gpu/gpu_train.c). 0 for bad arguments. */
size_t ampc_mem_device_scratch_bytes(const ampc_mmodel_config *c, int64_t batch);

/* The same for the MLP classifier (ampc_mlp_plan_bytes). */
ampc_status ampc_mem_account_mlp(const ampc_mlp_config *c, int64_t batch,
                                 const ampc_amp_config *amp, int moments, ampc_mem_account *out);

/* The largest batch in [2, max_batch] whose predicted total for model c plus
 * `overhead` bytes fits in `budget` bytes (the total grows with the batch, so
 * a bisection finds it). *batch = 0 when not even batch 2 fits; *at (may be
 * NULL) receives the account at the chosen batch (at batch 2 when none fits).
 * Errors: AMPC_ERR_INVALID_ARG. */
ampc_status ampc_mem_plan_mm(const ampc_mmodel_config *c, const ampc_amp_config *amp, int moments,
                             size_t budget, size_t overhead, int64_t max_batch, int64_t *batch,
                             ampc_mem_account *at);
/* The same for a run on dev (ampc_mem_account_mm_on). */
ampc_status ampc_mem_plan_mm_on(const ampc_mmodel_config *c, const ampc_amp_config *amp,
                                int moments, ampc_device dev, size_t budget, size_t overhead,
                                int64_t max_batch, int64_t *batch, ampc_mem_account *at);

/* Parse a byte count: a non-negative decimal number with an optional suffix
 * K, M, G, T (powers of 1000; also KB, MB, GB, TB) or KiB, MiB, GiB, TiB
 * (powers of 1024), case-insensitive, optional "B"/"bytes" alone; e.g.
 * "8G", "512M", "1.5GiB", "1000000". The result is rounded down to whole
 * bytes. Errors: AMPC_ERR_INVALID_ARG (garbage, negative, non-finite, more
 * than 2^62 bytes), the message naming the text. */
ampc_status ampc_parse_bytes(const char *text, uint64_t *out);

/* Peak resident set size of this process so far, in bytes: getrusage
 * (RUSAGE_SELF) ru_maxrss, which Linux reports in KiB, times 1024 (POSIX
 * leaves the unit open; Linux's getrusage(2) documents kilobytes). -1 when
 * getrusage fails. */
int64_t ampc_peak_rss_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
