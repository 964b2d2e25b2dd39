/*
 * src/backend/cuda/cuda_desc.c: what the "cuda" device is, for planning and
 * messages (ampc_device_desc). Compiled in every build, with or without the
 * CUDA backend, so that a memory plan for a GPU and the environment checks
 * work on any machine; the backend itself (cuda_backend.c and the kernels)
 * is built only with CUDA. Pure C: no CUDA header.
 */
#include "internal.h"

#include "ampc/backend.h"
#include "backend/cuda/cuda.h" /* ampc_cuda_scratch_slot_bytes (inline) */

static size_t cuda_slot_bytes(size_t bytes) { return ampc_cuda_scratch_slot_bytes(bytes); }

/* the GPU's attention with FP16 sums runs per head, without 16-bit
 * probabilities: --attention-cast needs FP32 sums */
static bool cuda_supports(const ampc_op_query *op) {
  return !(op->op == AMPC_DEVICE_OP_MHA && op->pdt != AMPC_F32 && op->acc == AMPC_ACC_F16);
}

/* the switches the CUDA files read once (getenv): cuda_launch.cu, cuda_gemm.c,
 * cuda_gemm_batched.cu */
static const ampc_env_switch k_cuda_env[] = {
    {"AMPC_CUDA_TYPED", {"1", "on", "0", "off", NULL}, "the typed CUDA kernels stay off"},
    {"AMPC_CUDA_GEMM_TUNE", {"1", "on", "0", "off", NULL}, "GEMM tuning stays off"},
    {"AMPC_CUDA_ACC16", {"exact", NULL}, "FP16-accumulated products run on cuBLASLt"},
};

/* The CUDA runtime and driver take device memory for the context itself
 * (the kernels' code, the runtime's heap), beyond what ampc allocates: a
 * plan keeps an allowance of 512 MiB for it until it is measured. */
const ampc_device_desc ampc_cuda_desc = {
    .name = "cuda",
    .label = "CUDA",
    .foreign_memory = true,
    .scratch_in_context = true,
    .context_bytes = (uint64_t)512 << 20,
    .scratch_slot_bytes = cuda_slot_bytes,
    .supports = cuda_supports,
    .env = k_cuda_env,
    .n_env = (int)(sizeof k_cuda_env / sizeof k_cuda_env[0]),
};
