/*
 * src/backend/cuda/cuda.h: the CUDA backend's GEMM on Tensor Cores, through cuBLASLt.
 *
 * The CPU's ampc_gemm emulates the Tensor Core contract (16-bit inputs, FP32
 * sums); this is the contract itself, on an NVIDIA GPU. Everything here works
 * on device memory (cudaMalloc, never managed memory) and runs on one stream
 * that the context owns; results are ready after ampc_cuda_synchronize (or a
 * copy back, which synchronizes).
 *
 * Built when CMake finds nvcc (option AMPC_CUDA). Without it, or on a machine
 * with no GPU or driver, ampc_cuda_device_count gives 0 with the reason in
 * ampc_cuda_unavailable_reason(), and every other call fails with
 * AMPC_ERR_UNSUPPORTED: the rest of ampc does not depend on this file.
 *
 * Errors: AMPC_ERR_INVALID_ARG for a shape, leading dimension, stride, dtype
 * or pointer the contract does not allow (checked on the host, before any
 * CUDA call); AMPC_ERR_UNSUPPORTED for a combination cuBLASLt does not offer
 * (e.g. FP8 on a GPU older than compute capability 8.9); AMPC_ERR_NOMEM when
 * device memory runs out; AMPC_ERR_DEVICE when the CUDA runtime or cuBLASLt
 * fails, with their own message (cudaGetErrorString, cublasLtGetStatusString)
 * in ampc_last_error().
 *
 * Source of the method: NVIDIA cuBLAS documentation, "Using the cuBLASLt API"
 * (cublasLtMatmul, its data-type table, the FP8 requirements and epilogues);
 * the Hopper tuning of llm.c (one handle, one 32 MiB workspace, the
 * heuristic's first algorithm).
 */
#ifndef AMPC_CUDA_H
#define AMPC_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/gemm.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build of ampc has the CUDA backend compiled in, else 0. */
int ampc_cuda_built(void);

/* Number of CUDA devices (0 where there is no GPU, no driver, or no CUDA in
 * this build; never an error). */
int ampc_cuda_device_count(void);

/* Why ampc_cuda_device_count() is 0 ("built without CUDA (AMPC_CUDA=OFF)",
 * "cudaGetDeviceCount: no CUDA-capable device is detected", ...); "" when a
 * device is there. For the skip message of GPU tests. */
const char *ampc_cuda_unavailable_reason(void);

/* What a device is (cudaGetDeviceProperties, cudaDriverGetVersion, ...). */
typedef struct ampc_cuda_device_info {
  char name[256];
  int cc_major, cc_minor;  /* compute capability (9.0 on H100 / H200) */
  int sm_count;            /* streaming multiprocessors */
  int clock_khz;           /* peak SM clock (0 where the runtime does not say) */
  size_t total_mem_bytes;  /* device memory */
  int driver_version;      /* cudaDriverGetVersion: 1000 * major + 10 * minor */
  int runtime_version;     /* cudaRuntimeGetVersion, the same encoding */
  size_t cublaslt_version; /* cublasLtGetVersion(), e.g. 130000 */
  char driver_release[64]; /* from nvidia-smi's source, /proc/driver/nvidia/version
                              ("580.159.03"), or "" */
} ampc_cuda_device_info;

/* Errors: AMPC_ERR_INVALID_ARG (no such device, NULL), AMPC_ERR_UNSUPPORTED. */
ampc_status ampc_cuda_device_info_get(int device, ampc_cuda_device_info *out);

/* A context: one device, one stream, one cuBLASLt handle, one workspace and
 * the algorithm cache (below). Not thread-safe: one thread uses a context. */
typedef struct ampc_cuda_ctx ampc_cuda_ctx;

/* workspace_bytes: cuBLASLt's workspace (0: 32 MiB, what Hopper's kernels
 * want). Errors: AMPC_ERR_INVALID_ARG, AMPC_ERR_UNSUPPORTED (no device),
 * AMPC_ERR_NOMEM, AMPC_ERR_DEVICE. */
ampc_status ampc_cuda_create(int device, size_t workspace_bytes, ampc_cuda_ctx **out);
void ampc_cuda_destroy(ampc_cuda_ctx *ctx); /* NULL is a no-op */

/* Device memory (cudaMalloc: never managed memory), freed with
 * ampc_cuda_free (NULL is a no-op, and waits for the stream first). Copies
 * are on the context's stream, in order with its kernels. A device-to-host
 * copy returns when it is done. A host-to-device copy returns once src has
 * been read: up to 1 MiB it is staged in the context's pinned buffer (4 MiB,
 * cudaHostAlloc) and the DMA queued without waiting, so that putting a
 * batch's inputs does not stall the host; larger copies, or all of them if
 * pinned memory cannot be had, return when the copy is done. An error of a
 * queued copy (a bad device pointer) is reported by the next call that
 * waits for the stream. */
ampc_status ampc_cuda_malloc(ampc_cuda_ctx *ctx, size_t bytes, void **dptr);
void ampc_cuda_free(ampc_cuda_ctx *ctx, void *dptr);
ampc_status ampc_cuda_to_device(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
ampc_status ampc_cuda_to_host(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
ampc_status ampc_cuda_synchronize(ampc_cuda_ctx *ctx);
/* The bytes a context's layer scratch slot holds after a request of
 * `bytes` grew it: at least 4 KiB, else a quarter more than asked (room to
 * grow, so that slightly larger requests reuse it); 0 for 0. The memory
 * account uses it for the slots it counts exactly. */
static inline size_t ampc_cuda_scratch_slot_bytes(size_t bytes) {
  return bytes == 0 ? 0 : bytes < 4096 ? 4096 : bytes + bytes / 4;
}
/* The context's device memory now (cudaMemGetInfo): free and total bytes.
 * Errors: AMPC_ERR_INVALID_ARG (NULL), AMPC_ERR_DEVICE. */
ampc_status ampc_cuda_mem_info(ampc_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes);

/* dst[i] = round(lo + (hi - lo) * u_i) in dt (F32, F16, BF16, F8_E4M3 or
 * F8_E5M2; FP8 saturating), u_i in [0, 1) a hash of (seed, i): device-side
 * test and benchmark data, the same for the same arguments. */
ampc_status ampc_cuda_fill_uniform(ampc_cuda_ctx *ctx, void *dst, ampc_dtype dt, int64_t count,
                                   float lo, float hi, uint64_t seed);

/* The compute type of a GEMM: what the sums are kept in. */
typedef enum ampc_cuda_compute {
  /* CUBLAS_COMPUTE_32F: FP32 sums; F16/BF16/FP8 inputs run on Tensor Cores
   * (the Tensor Core contract, what 16-mixed and bf16-mixed use). F32 inputs
   * run as plain SGEMM (no TF32). */
  AMPC_CUDA_COMPUTE_32F = 0,
  /* CUBLAS_COMPUTE_16F: binary16 sums, and alpha, beta and the epilogue in
   * binary16 too (the FP16-accumulation ablation; F16 A, B and C only). */
  AMPC_CUDA_COMPUTE_16F = 1,
  /* CUBLAS_COMPUTE_32F_PEDANTIC: FP32 throughout, no TF32 and no reduced-
   * precision reductions: the 32-true baseline (F32 operands only). */
  AMPC_CUDA_COMPUTE_32F_PEDANTIC = 2,
  /* CUBLAS_COMPUTE_32F_FAST_TF32: F32 operands rounded to TF32 (10-bit
   * significands) on Tensor Cores, FP32 sums (the option PyTorch calls
   * allow_tf32; F32 operands only). */
  AMPC_CUDA_COMPUTE_32F_FAST_TF32 = 3
} ampc_cuda_compute;

/* One (strided batched) GEMM on device buffers, in ampc_gemm's row-major
 * convention (ampc/gemm.h: shapes, op, leading dimensions in elements):
 *
 *   C_i = alpha * scale_a * scale_b * op(A_i) op(B_i) + beta * C_i (+ bias)
 *
 * for i < batch, A_i = a + i * stride_a (elements; 0: one A for every
 * product), likewise B_i, C_i. Dtypes (cuBLASLt's table):
 *   compute 32F:   A, B both F16 (C F16 or F32), both BF16 (C BF16 or F32),
 *                  or both F32 (C F32); or FP8 (below);
 *   compute 16F:   A, B, C F16;
 *   PEDANTIC, TF32: A, B, C F32.
 * FP8 (compute 32F; compute capability 8.9 or later): A and B E4M3 or E5M2,
 * not both E5M2; op(A) = N and op(B) = T (both operands K-contiguous: the
 * layout cuBLASLt calls "TN"), lda, ldb and ldc multiples of 16, a, b, c
 * 16-byte aligned; C F16, BF16, F32, E4M3 or E5M2 (FP8 C needs beta = 0 and
 * takes scale_c; E5M2 C needs an E5M2 operand). scale_a and scale_b are device pointers to one FP32
 * each, 16-byte aligned as scale_c (else AMPC_ERR_INVALID_ARG: cuBLASLt refused scaled FP8 products
 * on an H200 with a scale 4 bytes into an allocation, and runs them with 16-byte aligned ones)
 * (NULL: 1) that multiply the FP8 values back (Transformer Engine's
 * scale_inv); scale_c (FP8 C only; NULL: 1) multiplies the result before its rounding to FP8 (TE's
 * scale); amax_c (device, one FP32; NULL: not computed) receives max |result| before scale_c, over
 * all batches (fused by cuBLASLt for an FP8 C; for a 16-bit or F32 C, which cuBLASLt refuses,
 * ampc's own kernel reads C after the GEMM: the max of the rounded C). Hopper's FP8 Tensor Cores
 * keep about 14 significant bits inside each MMA; cuBLASLt (FAST_ACCUM off, as here) adds those
 * partial sums in FP32: |err| <= 2^-13 sum |a b| plus K 2^-24 sum |a b| and the output's rounding
 * (test_cuda_gemm; measured on an H200: 2^-13.8 sum |a b| at worst). bias: device, N elements (one
 * per column of row-major C, as a linear layer's), the same for every batch, in bias_dt: C's dtype,
 * or BF16 for FP8 with F32 or FP8 C (BF16 or F16 with FP8 C); NULL: no bias. Special cases: M, N or
 * batch = 0 is a no-op; K = 0 or alpha = 0 gives C = beta * C (+ bias) without reading A or B,
 * formed in FP32 (for compute 16F too) and rounded once. Alignment: any element-aligned pointer and
 * leading dimension works (misaligned ones run slower kernels), FP8 as above.
 *
 * Rounding: C is rounded once from the compute type (RNE), except that
 * cuBLASLt's epilogue on a 16-bit C rounds alpha A B to C's dtype before it
 * adds the bias or beta C (measured on an H200, cuBLASLt 13.1: two
 * roundings; ampc's layers avoid it, ampc_cuda_gemm_strided_batched forming
 * such sums in FP32 scratch); split-K is
 * allowed only with partial sums in the compute type
 * (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE). Error bound for
 * compute 32F with F16/BF16 inputs: |err| <= K * 2^-24 * sum |a b| plus the
 * output rounding (the CPU's bound); TF32 adds the inputs' rounding (2 * 2^-11
 * relative per product); 16F: K * 2^-11 * sum |a b|, order unspecified.
 *
 * The algorithm is the first of cublasLtMatmulAlgoGetHeuristic for the
 * shape, dtypes, compute type, epilogue and pointer alignments, cached in
 * the context (its descriptors too), so a repeated shape costs no heuristic
 * query. Runs asynchronously on the context's stream. */
typedef struct ampc_cuda_gemm_args {
  ampc_op opa, opb;
  int64_t m, n, k;
  float alpha, beta;
  const void *a;
  ampc_dtype a_dt;
  int64_t lda, stride_a;
  const void *b;
  ampc_dtype b_dt;
  int64_t ldb, stride_b;
  void *c;
  ampc_dtype c_dt;
  int64_t ldc, stride_c;
  int64_t batch;    /* >= 1; 0 is a no-op */
  const void *bias; /* NULL: no bias epilogue */
  ampc_dtype bias_dt;
  const float *scale_a, *scale_b, *scale_c; /* FP8 only; device; NULL = 1 */
  float *amax_c;                            /* FP8 only; device; NULL = none */
  ampc_cuda_compute compute;
} ampc_cuda_gemm_args;

/* args with batch 1, alpha 1, beta 0, compute 32F and no bias, scales or
 * amax; the caller fills shapes, pointers and dtypes. */
ampc_cuda_gemm_args ampc_cuda_gemm_args_default(void);

ampc_status ampc_cuda_gemm(ampc_cuda_ctx *ctx, const ampc_cuda_gemm_args *args);

/* GEMM tuning, off by default: with it on, each new GEMM shape (a plan of
 * the per-context cache) asks cuBLASLt's heuristic for up to 8 algorithms
 * and, at its first call, times each on that call's operands (into a
 * temporary D: three runs after one that checks it works) and keeps the
 * fastest for the context's life. Every candidate honours the same
 * constraints (split-K partial sums in the compute type, the alignment,
 * the workspace), so results stay within the GEMM bound, but which algorithm
 * wins can differ between runs (timing noise), and with it the summation
 * order and the last bits: runs are then not bit-reproducible. Costs host
 * waits (counted in ampc_cuda_counters) at each new shape's first call (a
 * training step's first). FP8 D
 * and amax outputs keep the heuristic's first algorithm. The environment
 * variable AMPC_CUDA_GEMM_TUNE=1 (or on) sets it at the first plan; it applies to
 * plans made after it is set. XLA autotunes its cuBLASLt GEMMs this way. */
void ampc_cuda_set_gemm_tuning(bool on);
bool ampc_cuda_gemm_tuning(void);

/* The FLOPs of every product ampc_cuda_gemm ran on ctx so far (2 m n k per
 * matrix; K = 0 products count 0): a step's model FLOPs are the difference
 * across it. */
uint64_t ampc_cuda_gemm_flops(const ampc_cuda_ctx *ctx);
/* Number of heuristic queries so far (cache misses) and cached plans. */
void ampc_cuda_gemm_cache_stats(const ampc_cuda_ctx *ctx, int64_t *queries, int *entries);

/* Where a step's host time goes, counted on ctx since its creation (a
 * step's share is the difference across it): the cuBLASLt products
 * launched, and the host's waits for the stream (every
 * cudaStreamSynchronize of ampc's layers, losses, optimizer, copies back
 * and ampc_cuda_synchronize on the thread the context is bound to, or on
 * ctx itself) with the seconds they took (CLOCK_MONOTONIC). A step whose
 * waits take most of its time is bound by the GPU; one that hardly waits is
 * bound by the host issuing its kernels (then fewer launches or a CUDA
 * graph help, not faster kernels). Zeros without CUDA or for NULL. */
typedef struct ampc_cuda_counters {
  int64_t matmuls; /* cublasLtMatmul calls */
  int64_t waits;   /* host waits for the stream */
  double wait_s;   /* seconds the host spent in them */
  int64_t tuned;   /* GEMM plans whose algorithm was chosen by timing (GEMM tuning) */
} ampc_cuda_counters;
void ampc_cuda_counters_get(const ampc_cuda_ctx *ctx, ampc_cuda_counters *out);

/* Brackets the region a profiler started with `--profile-from-start off`
 * records (Nsight Compute, Nsight Systems): cudaProfilerStart (on) or
 * cudaProfilerStop (off). Errors: AMPC_ERR_UNSUPPORTED without CUDA. */
ampc_status ampc_cuda_profile_range(ampc_cuda_ctx *ctx, bool on);

/* Timing on the context's stream (cudaEventRecord / cudaEventElapsedTime):
 * ampc_cuda_timer_start, then ampc_cuda_timer_stop gives the milliseconds
 * between them (it waits for the stream). */
ampc_status ampc_cuda_timer_start(ampc_cuda_ctx *ctx);
ampc_status ampc_cuda_timer_stop(ampc_cuda_ctx *ctx, float *ms);

#ifdef __cplusplus
}
#endif
#endif
