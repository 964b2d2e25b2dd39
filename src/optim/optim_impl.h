/*
 * src/optim/optim_impl.h: what the CPU optimizer (optim.c) and the GPU's
 * (src/backend/cuda/cuda_optim.cu) share: the per-step constants of each parameter
 * group, formed once on the host, so both update every element from the same
 * FP32 values.
 */
#ifndef AMPC_OPTIM_IMPL_H
#define AMPC_OPTIM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/optim.h"

#if defined(__CUDACC__)
#define AMPC_OPT_HD static __host__ __device__ __forceinline__
#else
#define AMPC_OPT_HD static inline
#endif

/* ampc_sr_bits (ampc/optim.h): the stochastic rounding's 16 random bits for
 * element `index` at step `step`, compiled for both the CPU and the GPU so
 * that both draw the same bits */
AMPC_OPT_HD uint32_t ampc_sr_hash(uint64_t seed, int64_t step, int64_t index) {
  uint64_t z =
      seed ^ ((uint64_t)step * 0x9E3779B97F4A7C15u) ^ ((uint64_t)index * 0xD1B54A32D192ED03u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u; /* SplitMix64's finaliser (Steele et al. 2014) */
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  z ^= z >> 31;
  return (uint32_t)(z >> 48);
}

#ifdef __cplusplus
extern "C" {
#endif

typedef struct step_consts {
  const ampc_optim_config *c;
  const void *grad; /* the gradients read (P->grad, or an FP32 sum) */
  ampc_dtype gdt;   /* their dtype */
  float lr, gm, clip;
  /* AdamW */
  float one_m_b1, b2, one_m_b2, step_size, bc2_sqrt, eps, decay_factor;
  float lr_wd; /* lr * weight_decay in FP32: the decay's change for Kahan updates */
  /* SGD */
  bool first;
  int64_t t; /* the step, for the stochastic rounding's bits */
} step_consts;

/* The constants of step t at learning rate lr (ampc_optim_step_from's
 * arguments): kb[b] for the parameters of branch b, *base for those with no
 * branch. Bias corrections and group learning rates in double, each rounded
 * once to FP32. */
void ampc_optim_consts(const ampc_optim_config *c, int64_t t, float lr,
                       const float grad_mult[AMPC_BRANCH_COUNT], float clip_coef, const void *grad,
                       ampc_dtype gdt, step_consts kb[AMPC_BRANCH_COUNT], step_consts *base);

#ifdef __cplusplus
}
#endif
#endif
