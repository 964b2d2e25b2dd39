/*
 * ampc/gemm.h: general matrix multiply with 16-bit operands and FP32
 * accumulation, the Tensor Core contract on the CPU.
 *
 *   C = alpha * op(A) * op(B) + beta * C          (row-major, op in {N, T})
 *
 * Shapes (all row-major, leading dimensions in elements):
 *   op(A) is M x K:  AMPC_OP_N: A is stored M x K, lda >= max(1, K)
 *                    AMPC_OP_T: A is stored K x M, lda >= max(1, M)
 *   op(B) is K x N:  AMPC_OP_N: B is stored K x N, ldb >= max(1, N)
 *                    AMPC_OP_T: B is stored N x K, ldb >= max(1, K)
 *   C is M x N, ldc >= max(1, N).
 * Leading dimensions larger than the width address sub-matrices (e.g. one
 * attention head inside a [tokens, heads*dim] activation).
 *
 * Dtypes: A and B each F32, F16 or BF16 (they may differ); C F32, F16 or BF16.
 * Every operand is widened to FP32 exactly (in the packing step: BLIS's idea),
 * so the products are those of the exact 16-bit values.
 *
 * Accumulation (acc):
 *   AMPC_ACC_F32  Products summed in FP32 (FMA; the order of the sum is not
 *                 specified), then alpha * sum + beta * C formed in FP32 and
 *                 rounded once (RNE) to C's dtype. Error bound, for any order:
 *                 |err| <= K * 2^-24 * sum_p |a_ip * b_pj| (+ the final rounding).
 *                 Every combination runs on ampc's own blocked kernel (F16C
 *                 packing and a 12 x 32 AVX-512F micro-kernel, or a 6 x 16
 *                 AVX2+FMA one), F32 x F32 -> F32 included, so that 32-true
 *                 and the 16-bit presets run the same kernel and differ only
 *                 in storage; F32 x F32 -> F32 runs on OpenBLAS cblas_sgemm
 *                 instead when AMPC_GEMM_F32=openblas is in the environment
 *                 (read once) or the CPU has no AVX2 (where the others run a
 *                 portable scalar loop). The two vector
 *                 kernels sum each element in the same order (p order within
 *                 each KC slice, slices added in order) and give the same
 *                 bits, for any thread count. BF16 x BF16 on a CPU with
 *                 AVX512-BF16 runs on a VDPBF16PS micro-kernel (pairs of
 *                 products, high element first, each addition rounded: the
 *                 same order and bits) when every operand is +-0 or in
 *                 [2^-56, 2^63) (then no product or partial sum is subnormal,
 *                 so its DAZ/FTZ never acts); otherwise on the FMA kernel.
 *   AMPC_ACC_F16  The ablation: what a GEMM with an FP16 compute type does.
 *                 The running sum s is a binary16 value, s_0 = +0, and for
 *                 p = 0 .. K-1 in order,  s_{p+1} = fp16(a_ip * b_pj + s_p),
 *                 one round-to-nearest-even of the exact value (a fused
 *                 multiply-add into binary16, as HFMA). The result is
 *                 alpha * s_K + beta * C in FP32, rounded once to C's dtype.
 *                 a*b + s is formed with one double FMA and then rounded to
 *                 binary16; for F16 operands this is exactly the single
 *                 rounding stated (a*b has at most 22 significant bits and any
 *                 non-zero s is >= 2^-24, so a tie is never created by the
 *                 double step); for F32/BF16 operands it is that single
 *                 rounding except in contrived ties. With F16 A and B on a
 *                 CPU with AVX512-FP16 it runs on VFMADDPH (that single
 *                 rounding in hardware: the same bits, at vector speed); on
 *                 other AVX-512F CPUs on FP32 lanes: the exact FP32 product,
 *                 the sum rounded to odd in FP32 (EVEX embedded rounding)
 *                 and then to nearest binary16, which is the single rounding
 *                 (S. Boldo and G. Melquiond, IEEE Trans. Computers 57(4),
 *                 2008), NaN operands excepted (those matrices take the
 *                 AVX2 path, whose NaN follows the FMA's operand order);
 *                 otherwise on emulated rounding in double (AVX2 or scalar),
 *                 for demonstrating accumulation error only. Workspace:
 *                 (M + N) * K doubles (op(A) and op(B) widened once; halves
 *                 on AVX512-FP16, floats on AVX-512F).
 *
 * Special cases (BLAS conventions): beta == 0 means C is not read (NaN or
 * garbage in C does not propagate); alpha == 0 or K == 0 means A and B are not
 * read and C = beta * C; M == 0 or N == 0 is a no-op. NaN and inf in A or B
 * propagate as IEEE arithmetic says.
 *
 * Threads: the work is split over OpenMP threads (omp_get_max_threads(), or
 * ampc_set_num_threads()). A call is not reentrant with itself on the same C.
 *
 * Errors (nothing is written to C): AMPC_ERR_INVALID_ARG for a negative
 * dimension, a leading dimension below the minimum, a NULL pointer that would
 * be read or written, an unknown op or acc, overlapping batched C matrices;
 * AMPC_ERR_UNSUPPORTED for FP8 operands; AMPC_ERR_NOMEM when workspace cannot
 * be allocated.
 *
 * Method: K. Goto and R. van de Geijn, "Anatomy of High-Performance Matrix
 * Multiplication", ACM TOMS 34(3), 2008; F. Van Zee and R. van de Geijn, "BLIS:
 * A Framework for Rapidly Instantiating BLAS Functionality", ACM TOMS 41(3),
 * 2015 (packed panels, a register-blocked micro-kernel, MC/KC/NC cache blocks).
 */
#ifndef AMPC_GEMM_H
#define AMPC_GEMM_H

#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ampc_op { AMPC_OP_N = 0, AMPC_OP_T = 1 } ampc_op;
typedef enum ampc_acc { AMPC_ACC_F32 = 0, AMPC_ACC_F16 = 1 } ampc_acc;

/* One GEMM (see the top of this file). */
ampc_status ampc_gemm(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k, float alpha,
                      const void *a, ampc_dtype a_dt, int64_t lda, const void *b, ampc_dtype b_dt,
                      int64_t ldb, float beta, void *c, ampc_dtype c_dt, int64_t ldc, ampc_acc acc);

/* `batch` independent GEMMs of the same shape; matrix i uses a + i*stride_a,
 * b + i*stride_b, c + i*stride_c (strides in elements). stride_a or stride_b
 * may be 0 (the same A or B for every product); the C matrices must not
 * overlap: when batch > 1 either stride_c >= (M-1)*ldc + N (stacked) or
 * N <= stride_c and (batch-1)*stride_c + N <= ldc (side by side, e.g. the
 * heads of an attention output). As cublasGemmStridedBatchedEx. */
ampc_status ampc_gemm_strided_batched(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k,
                                      float alpha, const void *a, ampc_dtype a_dt, int64_t lda,
                                      int64_t stride_a, const void *b, ampc_dtype b_dt, int64_t ldb,
                                      int64_t stride_b, float beta, void *c, ampc_dtype c_dt,
                                      int64_t ldc, int64_t stride_c, int64_t batch, ampc_acc acc);

/* What a GEMM does around its products besides C = alpha op(A) op(B) + beta C
 * (ampc_gemm_ex; the fused epilogues of a linear layer, as cuBLASLt's
 * CUBLASLT_EPILOGUE_BIAS / _GELU_AUX / _BGRADA and llm.c's fused layers do
 * them on a GPU). Each field is optional (NULL: not done).
 *   bias [n] FP32: C = alpha * sum + bias[j], formed in FP32 (one product
 *        and one sum, no FMA) and rounded once to C's dtype; beta must be 0,
 *        and every bias[j] must be a value of C's dtype (the caller rounds it:
 *        then the result is the one of laying the bias into C and beta = 1).
 *   post(user, i0, rows, j0, cols): called once for each block of C (the
 *        blocks partition the M x N matrix) as soon as those elements hold
 *        their final values, from the GEMM's own threads (several blocks at
 *        once; it must not start a parallel region of its own): an
 *        elementwise step (GELU, a residual add) on C while it is in cache.
 *   colsum [m] FP32: colsum[i] += op(A)[i][p] for p = 0 .. K-1 in order, one
 *        FP32 addition each onto the value it holds (the widened operand;
 *        with op(A) = dY^T of a weight-gradient product these are the bias
 *        gradient's column sums of dY, in row order).
 * The results (C, what post writes, colsum) are the same bits as the
 * unfused sequence, on every path and thread count. M == 0 or N == 0 does
 * nothing at all (colsum untouched, post not called). */
typedef struct ampc_gemm_epi {
  const float *bias;
  void (*post)(void *user, int64_t i0, int64_t rows, int64_t j0, int64_t cols);
  void *user;
  float *colsum;
} ampc_gemm_epi;

/* ampc_gemm with the epilogue epi (NULL: ampc_gemm itself). acc must be
 * AMPC_ACC_F32 when epi is given. Errors: ampc_gemm's, and
 * AMPC_ERR_INVALID_ARG for a bias with beta != 0, a bias value that C's dtype
 * does not hold, or AMPC_ACC_F16 with epi. */
ampc_status ampc_gemm_ex(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k, float alpha,
                         const void *a, ampc_dtype a_dt, int64_t lda, const void *b,
                         ampc_dtype b_dt, int64_t ldb, float beta, void *c, ampc_dtype c_dt,
                         int64_t ldc, ampc_acc acc, const ampc_gemm_epi *epi);

/* Reference for tests and for sampled accumulation-error telemetry: every
 * product and sum in double (exact products of the stored values; the sum
 * rounded to 53 bits, error <= K * 2^-53 * sum |a b|). For one GEMM, writes
 * out[i*n + j] = alpha * sum_p a_ip b_pj + beta * c_ij  (c read only if
 * beta != 0) and, if abs_out is not NULL, abs_out[i*n + j] = sum_p |a_ip b_pj|.
 * Same argument rules and errors as ampc_gemm. O(M N K), single-threaded. */
ampc_status ampc_gemm_reference(ampc_op opa, ampc_op opb, int64_t m, int64_t n, int64_t k,
                                double alpha, const void *a, ampc_dtype a_dt, int64_t lda,
                                const void *b, ampc_dtype b_dt, int64_t ldb, double beta,
                                const void *c, ampc_dtype c_dt, int64_t ldc, double *out,
                                double *abs_out);

/* Cache blocking of the 16-bit kernel: the micro-kernel computes MR x NR tiles
 * (6 x 16 on AVX2, 12 x 32 on AVX-512; mc and nc are rounded up to the tile
 * there); a thread's task owns up to 4*MC x NC of C (FP32 partial sums), packs
 * a KC x NC panel of B per K slice and an MC x KC block of A (L2) per MC rows.
 * KC fixes where each element's FP32 sum is split, so it is the one blocking
 * setting that changes result bits. Defaults mc = 144, kc = 256, nc = 512
 * (tuned on Zen 3). mc must be a positive multiple of 6, nc of 16, kc >= 1. */
typedef struct ampc_gemm_config {
  int mc, kc, nc;
} ampc_gemm_config;

ampc_gemm_config ampc_gemm_get_config(void);
/* Errors: AMPC_ERR_INVALID_ARG when a field breaks the rules above. */
ampc_status ampc_gemm_set_config(const ampc_gemm_config *cfg);

/* Number of threads ampc's kernels (and OpenBLAS) use; n <= 0 restores the
 * default (OMP_NUM_THREADS or the number of cores). */
void ampc_set_num_threads(int n);
int ampc_get_num_threads(void);

/* Which 16-bit GEMM path runs: "avx512f+avx2+fma+f16c" (AVX-512 F, BW and
 * VL), "avx2+fma+f16c" (no AVX-512, or AMPC_ISA=avx2 in the environment) or
 * "portable" (no AVX2/F16C, or AMPC_ISA=portable). Read once. */
const char *ampc_gemm_isa(void);

/* The machine's FMA peak, measured (for the ratios of `ampc bench gemm`):
 * 12 independent FMA chains per thread, on nthreads threads at once (<= 0:
 * ampc_get_num_threads()), the best of 5 runs of about seconds / 5 each (load
 * and a drifting VM clock only slow a run down). f32: FP32 FMA
 * with the widest vectors ampc's GEMM uses (512-bit with AVX-512, else 256-
 * bit; 0 without AVX2), f16: VFMADDPH (binary16 FMA, the FP16-accumulation
 * ablation's instruction; 0 without AVX512-FP16), bf16: VDPBF16PS (two
 * bfloat16 products added into FP32 per lane, what bf16 x bf16 products run
 * on where ampc_gemm_bf16_path() is "avx512bf16"; 0 elsewhere). GFLOP/s, 2
 * per lane per FMA (4 per lane per VDPBF16PS), for all the threads together. A measurement: it
 * depends on the clock and on other load. Errors: AMPC_ERR_INVALID_ARG (NULL, seconds <= 0). */
typedef struct ampc_fma_peak {
  double f32_gflops, f16_gflops;
  const char *f32_isa, *f16_isa; /* "avx512f", "avx2+fma", "avx512fp16", or "none" */
  int threads;
  double bf16_gflops;
  const char *bf16_isa; /* "avx512bf16" or "none" */
} ampc_fma_peak;
ampc_status ampc_gemm_fma_peak(int nthreads, double seconds, ampc_fma_peak *out);

/* Where F32 x F32 -> F32 products run: "openblas", or ampc_gemm_isa()'s
 * name of ampc's kernel (see AMPC_GEMM_F32 above). */
const char *ampc_gemm_f32_path(void);

/* The GEMM work done in this process so far: 2 * M * N * K * batch FLOPs
 * summed over every ampc_gemm / ampc_gemm_strided_batched call with alpha
 * != 0 that returned AMPC_OK (every accumulation mode; not the reference). For
 * benchmarks (a model step's GEMM FLOPs); thread-safe. */
uint64_t ampc_gemm_flop_count(void);

/* Where bf16 x bf16 products (FP32 accumulation) run: "avx512bf16" (the
 * VDPBF16PS micro-kernel, bit-identical to the FMA kernels; used when the
 * CPU has AVX512-BF16, its VDPBF16PS passes a check of its rounding order
 * at the first call, AMPC_GEMM_BF16DOT is not 0, and every operand is +-0 or
 * in [2^-56, 2^63): otherwise the FMA kernel runs) or ampc_gemm_isa(). */
const char *ampc_gemm_bf16_path(void);

/* Where the FP16-accumulation ablation runs for binary16 A and B:
 * "avx512fp16" (VFMADDPH), "avx512f" or "avx2+f16c" (round-to-odd sums in
 * FP32 lanes), or "portable"; all give the same bits. */
const char *ampc_gemm_acc16_path(void);

/* ---- INT8 GEMM with exact INT32 accumulation (post-training quantization) ----
 *
 *   C [m, n] = A [m, k] B [n, k]^T     (row-major; B as a linear layer's
 *                                      weight W [out, in] is stored: y = x W^T)
 *
 * A and B int8 (any value, -128 included), C int32: every element is the
 * exact integer sum of its k products, on every path and for any thread
 * count (integer sums do not depend on their order while they fit: k <=
 * AMPC_GEMM_S8_MAX_K keeps every partial sum below 2^31, the VNNI path's
 * unsigned offset included). Paths: AVX512-VNNI VPDPBUSD (Intel's
 * "Introduction to Intel DL Boost" method: A + 128 as unsigned bytes, the
 * offset taken back with B's row sums), AVX2 VPMADDWD on sign-extended int16
 * (VPMADDUBSW's int16 pair sums saturate, so it is not used), and the scalar
 * loop; AMPC_ISA=avx2 or portable in the environment caps the path as for
 * ampc_gemm. Errors: AMPC_ERR_INVALID_ARG (negative sizes, k > MAX_K, NULL
 * operands, leading dimensions below k, k, n). */
enum { AMPC_GEMM_S8_MAX_K = 65536 };
ampc_status ampc_gemm_s8(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda,
                         const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc);

/* One path forced, for tests and benchmarks (AUTO: the fastest the CPU and
 * AMPC_ISA allow). AMPC_ERR_UNSUPPORTED when the CPU lacks it. */
typedef enum ampc_gemm_s8_path {
  AMPC_GEMM_S8_AUTO = 0,
  AMPC_GEMM_S8_PORTABLE,
  AMPC_GEMM_S8_AVX2,
  AMPC_GEMM_S8_AVX512VNNI
} ampc_gemm_s8_path;
ampc_status ampc_gemm_s8_with(ampc_gemm_s8_path path, int64_t m, int64_t n, int64_t k,
                              const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb,
                              int32_t *c, int64_t ldc);
/* The path AUTO takes on this CPU, and a path's name ("avx512-vnni (vpdpbusd)", ...). */
ampc_gemm_s8_path ampc_gemm_s8_best(void);
const char *ampc_gemm_s8_path_name(ampc_gemm_s8_path p);

/* B [n, k] int8 prepared once for many products with it (an INT8 layer's
 * weights at inference): the path fixed, and for AVX512-VNNI B packed and
 * its row sums computed here instead of in every call. b is borrowed (it
 * must outlive pb); the packed copy is owned: free with
 * ampc_gemm_s8_b_free. Errors: AMPC_ERR_INVALID_ARG (sizes < 1, k > MAX_K,
 * NULL, ldb < k), AMPC_ERR_UNSUPPORTED (the path not on this CPU),
 * AMPC_ERR_NOMEM. */
typedef struct ampc_gemm_s8_b {
  int64_t n, k, ldb;
  ampc_gemm_s8_path path; /* never AUTO once prepared */
  const int8_t *b;
  int8_t *packed; /* VNNI: [ceil(k/4)][n rounded up to 16][4] */
  int32_t *bsum;  /* VNNI: sum_p b[j, p] */
} ampc_gemm_s8_b;
ampc_status ampc_gemm_s8_prepare(ampc_gemm_s8_b *pb, ampc_gemm_s8_path path, int64_t n, int64_t k,
                                 const int8_t *b, int64_t ldb);
void ampc_gemm_s8_b_free(ampc_gemm_s8_b *pb);

/* The INT8 GEMM with its dequantization fused (the epilogue of an INT8
 * linear layer): y [m, n] FP32 (row stride ldy) =
 * (float)(A B^T)[i, j] * (alpha * col_scale[j]) + bias[j], the integer sum
 * exact as in ampc_gemm_s8, then one FP32 product and one FP32 sum, each
 * rounded to nearest (no fused multiply-add: every path gives the same
 * bits). col_scale [n] (NULL: alpha alone), bias [n] (NULL: + 0). The int32
 * sums never leave the kernel (a 4 x 64 tile at a time on AVX512-VNNI).
 * Errors: as ampc_gemm_s8 (m < 0, NULL, lda < k, ldy < n). */
ampc_status ampc_gemm_s8_dequant(const ampc_gemm_s8_b *pb, int64_t m, const int8_t *a, int64_t lda,
                                 float alpha, const float *col_scale, const float *bias, float *y,
                                 int64_t ldy);

/* The INT8 quantization of an activation (symmetric, zero point 0, one
 * scale for the tensor: the A operand of ampc_gemm_s8): q [n] int8 =
 * round-half-even(clamp(x[i] / scale, -127, 127)), a NaN to 0 (+-inf
 * saturates). The quotient is IEEE single division on every path (the
 * scalar loop, AVX2, AVX-512; path as ampc_gemm_s8_with, AVX512VNNI standing
 * for AVX-512), so each gives the same bits; OpenMP threads over blocks of
 * x when n is large. scale: finite and > 0 (as PyTorch's
 * quantize_per_tensor with qint8, restricted to -127..127). Errors:
 * AMPC_ERR_INVALID_ARG (n < 0, NULL, a bad scale), AMPC_ERR_UNSUPPORTED. */
ampc_status ampc_gemm_s8_quantize(ampc_gemm_s8_path path, const float *x, int64_t n, float scale,
                                  int8_t *q);

#ifdef __cplusplus
}
#endif
#endif
