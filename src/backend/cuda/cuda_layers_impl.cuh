/*
 * src/backend/cuda/cuda_layers_impl.cuh: what the GEMM-type layers' files
 * share (private to cuda_gemm_batched.cu, cuda_linear.cu and
 * cuda_attention.cu): their scratch slots, and the helpers defined once in
 * cuda_gemm_batched.cu: round_k (a rounding of FP32 copies into C, counted),
 * span (the elements of a strided batch) and direct_ok (the operand mixes
 * that cuBLASLt multiplies without widening).
 */
#ifndef AMPC_CUDA_LAYERS_IMPL_CUH
#define AMPC_CUDA_LAYERS_IMPL_CUH

#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"

namespace ampc_cu {

/* scratch slots (cuda_impl.h): 4, 5, 6 the GEMM's widened A, B, C; 7 the
 * layers' FP32 buffers (the linear layer's FP32 product with stats or with a
 * bias into a 16-bit y; attention's FP32 out copy and widened v, its dP, dS,
 * dq, dk, dv copies and widened q, k, dout); 11 the FP8 layers' quantized
 * operands; 12 the bias gradient's ones vector; 16 the attention forward's
 * 16-bit probabilities (the products' operand); 17 the typed bias
 * gradient's counts and partial sums */
enum { SLOT_A = 4, SLOT_B = 5, SLOT_C = 6, SLOT_L = 7, SLOT_F8 = 11 };
enum { SLOT_ONES = 12, SLOT_PM = 16, SLOT_BG = 17 };
static_assert(SLOT_BG < AMPC_CUDA_SCRATCH_SLOTS, "the bias gradient's slot is a context slot");
static_assert(SLOT_PM < AMPC_CUDA_SCRATCH_SLOTS,
              "the 16-bit probabilities' slot is a context slot");
static_assert(SLOT_ONES < AMPC_CUDA_SCRATCH_SLOTS, "the ones slot is a context slot");

/* dst (dt) = round(src) over a batch of rows x cols matrices, counting
 * (cuda_gemm_batched.cu) */
__global__ void round_k(int64_t batch, int64_t rows, int64_t cols, const float *src, int64_t lds,
                        int64_t ss, void *dst, int dt, int64_t ldd, int64_t sd, dev_stats *ds);
/* elements spanned by a strided batch of rows x cols matrices */
int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch);
/* a and b of one dtype that cuBLASLt multiplies into c directly */
bool direct_ok(ampc_dtype a, ampc_dtype b, ampc_dtype c);

} // namespace ampc_cu

#endif /* AMPC_CUDA_LAYERS_IMPL_CUH */
