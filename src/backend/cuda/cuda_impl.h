/*
 * src/backend/cuda/cuda_impl.h: what the CUDA backend's host files share, and the
 * GEMM plan: ampc's row-major problem restated as cuBLASLt's column-major one.
 *
 * Row-major C (M x N, ldc) is, read column-major, C^T (N x M, ldc), and
 * C^T = op(B)^T op(A)^T. So cuBLASLt's A is ampc's B and its B is ampc's A,
 * with each op kept: a row-major matrix stored r x c is the column-major
 * c x r matrix, i.e. already transposed. ampc_cuda_plan_gemm does this
 * mapping and every check that needs no device, so the mapping is tested on
 * machines without a GPU (tests/test_cuda_plan.c replays plans on a column-
 * major reference GEMM written from cuBLASLt's definition).
 */
#ifndef AMPC_CUDA_IMPL_H
#define AMPC_CUDA_IMPL_H

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuBLASLt's problem: D = alpha * op_a(A) op_b(B) + beta * C (column-major;
 * C and D share the buffer `d`), with A stored a_rows x a_cols (ld lda) and
 * op_a(A) m x k, B stored b_rows x b_cols and op_b(B) k x n, D m x n. */
typedef struct ampc_cuda_plan {
  int trans_a, trans_b; /* 0 = N, 1 = T */
  int64_t m, n, k;
  const void *a;
  ampc_dtype a_dt;
  int64_t a_rows, a_cols, lda, stride_a;
  const void *b;
  ampc_dtype b_dt;
  int64_t b_rows, b_cols, ldb, stride_b;
  void *d;
  ampc_dtype d_dt;
  ampc_dtype c_layout_dt; /* the C layout's dtype: D's; for an FP8 D the bias's, or BF16 */
  int64_t ldd, stride_d;
  int64_t batch;
  float alpha, beta;
  const void *bias; /* bias[i] is added to row i of D (a column of ampc's C) */
  ampc_dtype bias_dt;
  const float *scale_a, *scale_b, *scale_d; /* cuBLASLt's A / B / D scales */
  float *amax_d;
  ampc_cuda_compute compute;
  int fp8;    /* A and B are FP8 */
  int noop;   /* M, N or batch is 0: nothing to do */
  int k_zero; /* K == 0 or alpha == 0: D = beta * D (+ bias), no product */
} ampc_cuda_plan;

/* Validate args (see cuda.h) and fill *out. fn names the caller in
 * error messages. Errors: AMPC_ERR_INVALID_ARG, AMPC_ERR_UNSUPPORTED. */
ampc_status ampc_cuda_plan_gemm(const char *fn, const ampc_cuda_gemm_args *args,
                                ampc_cuda_plan *out);

/* Load cuBLASLt (dlopen, once; no GPU needed) and give its version
 * (cublasLtGetVersion). Errors: AMPC_ERR_UNSUPPORTED (not found, a symbol
 * missing, or no CUDA in this build). */
ampc_status ampc_cuda_load_cublaslt(size_t *version);

/* The largest power of two <= 256 that divides the address (256 for NULL):
 * cuBLASLt's heuristic depends on the operands' alignment, so the plan cache
 * keys on it. */
int ampc_cuda_align_class(const void *p);

/* ---- what the layers (cuda_launch.cu, the layer files, cuda_optim.cu) take from a context ---- */

/* The context's stream (a cudaStream_t). */
void *ampc_cuda_ctx_stream(ampc_cuda_ctx *ctx);
/* The context's device number (-1 for NULL). */
int ampc_cuda_ctx_device(const ampc_cuda_ctx *ctx);
/* Device scratch owned by the context, one buffer per slot, at least `bytes`
 * (grown on demand; a grown slot's old buffer is freed after the stream has
 * finished with it). Contents undefined. Slots: 0 the round-stats counters;
 * 1 the row layers' partial sums and row groups (ampc_cu_group_rows); 2 the gradient norm's; 3 the
 * optimizer's swallowed-update counts; 4, 5, 6 a mixed GEMM's widened A, B, C; 7 the GEMM layers'
 * FP32 buffers; 8 the attention layer's gradient buffers; 9 the unfolded patches; 10 the losses'
 * row terms; 11 the FP8 layers' casts' reports and quantized operands; 12 the bias gradient's ones
 * vector; 13, 14 the GELU tables of F16 and BF16 inputs; 15 the optimizer's list of tensor pieces;
 * 16 the attention forward's 16-bit probabilities (the products' operand,
 * ampc_cuda_attention_forward_ex); 17 the typed bias gradient's counts and
 * partial sums. Errors: AMPC_ERR_NOMEM, AMPC_ERR_DEVICE. */
#define AMPC_CUDA_SCRATCH_SLOTS 18
ampc_status ampc_cuda_ctx_scratch(ampc_cuda_ctx *ctx, int slot, size_t bytes, void **out);
/* cudaStreamSynchronize(stream) (a cudaStream_t), counted with the seconds
 * it took in the bound context's counters (ampc_cuda_counters_get); returns
 * the cudaError_t. */
int ampc_cuda_wait(void *stream);
/* The slot's tag: 0 whenever the slot's buffer is (re)allocated, else what
 * its user last stored (e.g. what the contents are, so a constant buffer is
 * filled once, not per call). NULL for a NULL ctx or a bad slot. */
uint64_t *ampc_cuda_ctx_scratch_tag(ampc_cuda_ctx *ctx, int slot);

/* ---- device kernels (cuda_kernels.cu) ------------------------------------ */
/* cudaError_t values (0 = success), launched on `stream` (a cudaStream_t). */
int ampc_cuda_k_fill_uniform(void *stream, void *dst, int dt, int64_t count, float lo, float hi,
                             uint64_t seed);
/* D = beta * D (+ bias[row]) on a column-major rows x cols x batch matrix in
 * dtype dt (F32/F16/BF16), beta == 0 writing without reading. */
int ampc_cuda_k_scale(void *stream, void *d, int dt, int64_t rows, int64_t cols, int64_t ld,
                      int64_t stride, int64_t batch, float beta, const void *bias, int bias_dt);
/* *amax = max |D| over a column-major rows x cols x batch matrix (F32/F16/
 * BF16; NaN propagates): the fallback for an FP8 GEMM with a 16-bit or F32 D
 * whose amax cuBLASLt does not fuse (such a D takes no D scale). */
int ampc_cuda_k_amax(void *stream, const void *d, int dt, int64_t rows, int64_t cols, int64_t ld,
                     int64_t stride, int64_t batch, float *amax);

#ifdef __cplusplus
}
#endif
#endif
