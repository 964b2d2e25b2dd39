/*
 * src/kernels/gemm_impl.h: the GEMM's private interface between its files,
 * laid out as BLIS lays out frame and kernels; each file calls only the ones
 * listed after it, never back:
 *   gemm.c             the public entry points: validation, path dispatch,
 *                      threads and block sizes, the double reference;
 *   gemm_frame.c       the blocked FP32-accumulation framework (task grid,
 *                      cache blocking, loops, threads), portable C, around a
 *                      registered micro-kernel and its packing kernels;
 *   gemm_portable.c    the plain C paths (the definitions the others match);
 *   gemm_acc16_fp16.c, gemm_acc16_avx512.c
 *                      the FP16-accumulation ablation on AVX512-FP16 and
 *                      AVX-512F (binary16 operands);
 *   gemm_acc16_avx2.c  the ablation on AVX2, and the NaN fallback of the
 *                      binary16 vector paths;
 *   gemm_avx2.c, gemm_avx512.c
 *                      the micro-kernels (6 x 16 AVX2; 12 x 32 AVX-512F and
 *                      AVX512-BF16), with their tiles, and the peak loops;
 *   gemm_pack_avx2.c   the packing and output kernels those micro-kernels
 *                      register;
 *   gemm_workspace.c   the per-thread workspace (a leaf).
 * The micro-kernel descriptors are data: the framework reaches the ISA code
 * only through their function pointers.
 */
#ifndef AMPC_GEMM_IMPL_H
#define AMPC_GEMM_IMPL_H

#include <stdint.h>

#include "ampc/gemm.h"
#include "numeric/numeric.h"

enum { AMPC_GEMM_MR = 6, AMPC_GEMM_NR = 16 };

/* A validated (strided batched) GEMM in general-stride form:
 *   op(A)[i][p] = a[i*rs_a + p*cs_a],  op(B)[p][j] = b[p*rs_b + j*cs_b],
 *   C[i][j] = c[i*ldc + j]; matrix t of the batch is offset by t*stride_x. */
typedef struct ampc_gemm_args {
  ampc_op opa, opb; /* as passed (the general strides below say the same) */
  int64_t lda, ldb; /* as passed */
  int64_t m, n, k, batch;
  float alpha, beta;
  const void *a;
  ampc_dtype adt;
  int64_t rs_a, cs_a, stride_a;
  const void *b;
  ampc_dtype bdt;
  int64_t rs_b, cs_b, stride_b;
  void *c;
  ampc_dtype cdt;
  int64_t ldc, stride_c;
  const ampc_gemm_epi *epi; /* batch 1 only; NULL: none (ampc_gemm_ex) */
} ampc_gemm_args;

/* Element access: the shared scalar helpers of numeric.h. */
#define ampc_gemm_load ampc_elem_load
#define ampc_gemm_store ampc_elem_store

/* Bytes per element of a GEMM operand (F32: 4; F16, BF16: 2), and the
 * address of element off of an array of that dtype. */
static inline size_t ampc_gemm_esz(ampc_dtype dt) { return dt == AMPC_F32 ? 4 : 2; }
static inline const void *ampc_gemm_at(const void *p, ampc_dtype dt, int64_t off) {
  return (const char *)p + off * (int64_t)ampc_gemm_esz(dt);
}

/* C[i] = alpha * acc + beta * C[i], formed in FP32 (two products and a sum,
 * no FMA), rounded once to C's dtype; C is not read when beta == 0. */
static inline void ampc_gemm_epilogue1(void *c, ampc_dtype dt, int64_t i, float alpha, float beta,
                                       float acc) {
  float v = alpha * acc;
  if (beta != 0.0f)
    v += beta * ampc_gemm_load(c, dt, i);
  ampc_gemm_store(c, dt, i, v);
}

/* Where a fused micro-kernel writes its tile: C (dtype dt, row stride ldc)
 * at the tile's first element, rows x cols of the MR x NR tile inside the
 * matrix, C = alpha * sum + beta * C formed as the epilogue does. */
typedef struct ampc_gemm_out {
  void *c;
  int64_t ldc;
  ampc_dtype dt;
  float alpha, beta;
  int rows, cols;
  const float *bias; /* the tile's first column of ampc_gemm_epi's bias, or NULL (beta is 0 then) */
} ampc_gemm_out;

/* The packing and output kernels a micro-kernel registers, which the
 * framework calls around it (BLIS's packm kernels and the output stage):
 * a:       one A micro-panel, dst[p*R + r] = src[r*stride_r + p*stride_p]
 *          widened to FP32 for r < rv, 0 for rv <= r < R, p < kc; `ravail`
 *          lanes exist in the source from this panel on;
 * b:       the B panel op(B)[0:kc, 0:ncols] as ceil(ncols / NR) micro-panels
 *          at dst + s*kc*NR (64-byte aligned when dst is); navail columns
 *          exist in the source from this panel on;
 * pairs, b_pairs: the same as bfloat16 pairs for a kernel with bf16_pairs
 *          (32-bit words: element p in the high half, p + 1 in the low, 0
 *          past K); they return 0 when an element is outside the pairs
 *          kernel's range (the panel is then not for that kernel);
 * out:     C[ic + i][jc + j] = alpha*Cs + beta*C for an mcur x ncur block of
 *          FP32 sums Cs (row stride ldcs, rows padded to NR), formed as
 *          ampc_gemm_epilogue1 does (C not read when beta == 0), counted by
 *          the rounding tally when one is set; with g->epi's bias,
 *          alpha*Cs + bias[jc + j] (beta is 0 then).
 * Each may write up to 16 floats past the end of a panel (the framework's
 * slack) and reads nothing outside the caller's matrices. */
typedef struct ampc_gemm_packer {
  void (*a)(float *restrict dst, int R, const void *src, ampc_dtype dt, int rv, int64_t ravail,
            int64_t kc, int64_t stride_r, int64_t stride_p);
  void (*b)(float *restrict dst, int NR, int64_t ncols, const void *src, ampc_dtype dt,
            int64_t navail, int64_t kc, int64_t stride_r, int64_t stride_p);
  int (*pairs)(uint32_t *restrict dst, int R, const void *src, int rv, int64_t kc, int64_t stride_r,
               int64_t stride_p);
  int (*b_pairs)(uint32_t *restrict dst, int NR, int64_t ncols, const void *src, int64_t kc,
                 int64_t stride_r, int64_t stride_p);
  void (*out)(const ampc_gemm_args *g, void *c, int64_t ic, int64_t jc, int64_t mcur, int64_t ncur,
              const float *cs, int64_t ldcs);
} ampc_gemm_packer;

/* On AVX2 + FMA + F16C (gemm_pack_avx2.c), for the AVX2 and AVX-512 kernels. */
extern const ampc_gemm_packer ampc_gemm_pack_avx2;

/* A register-blocked micro-kernel: C tile (mr x nr FP32, row stride ldc) =
 * (accumulate: +=) the packed A micro-panel (kc x mr, p-major) times the packed
 * B micro-panel (kc x nr, p-major; 64-byte aligned). Each element is summed in
 * p order by FMA starting from +0 and then, if accumulate, added to C: every
 * micro-kernel performs these same operations, so they all give the same bits. */
typedef struct ampc_gemm_ukernel {
  int mr, nr;
  void (*fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int accumulate);
  /* optional (NULL: none): the last K slice straight into C; `cs` holds the
   * earlier slices' sums (read when accumulate) */
  void (*fn_out)(int64_t kc, const float *a, const float *b, const float *cs, int64_t ldcs,
                 int accumulate, const ampc_gemm_out *o);
  const ampc_gemm_packer *pack; /* its packing and output kernels */
  const char *isa;
  /* 1: the kernel reads bfloat16 pairs (gemm_avx512.c, VDPBF16PS): A and B
   * are packed as 32-bit words holding elements p (high half) and p + 1
   * (low half) of each row / column, a zero low half past K. Only for bf16
   * A and B that ampc_gemm_bf16dot_accepts; other GEMMs run on fallback. */
  int bf16_pairs;
  const struct ampc_gemm_ukernel *fallback;
} ampc_gemm_ukernel;

/* 6 x 16 on AVX2+FMA (gemm_avx2.c); 12 x 32 on AVX-512F/BW/VL, with a fused
 * output variant (gemm_avx512.c). */
extern const ampc_gemm_ukernel ampc_gemm_uk_avx2;
extern const ampc_gemm_ukernel ampc_gemm_uk_avx512;
/* 12 x 32 on AVX512-BF16's VDPBF16PS for bf16 x bf16 (gemm_avx512.c), the
 * same bits as the FMA kernels on the operands it accepts. */
extern const ampc_gemm_ukernel ampc_gemm_uk_avx512bf16;

/* 1 when every element of op(A) and op(B) of every matrix of the batch is
 * +-0 or finite with magnitude in [2^-56, 2^63) (bf16 A and B only; else 0):
 * then every product of two is exact and normal in FP32 and every partial
 * sum is a multiple of 2^-126, so no sum is subnormal and VDPBF16PS's
 * DAZ/FTZ changes nothing (gemm_pack_avx2.c). The GEMM applies the same test
 * per K slice while it packs; this whole-operand form is for tests. */
int ampc_gemm_bf16dot_accepts(const ampc_gemm_args *g);

/* Whether ampc_gemm runs bf16 x bf16 on VDPBF16PS: ampc_use_avx512bf16() and
 * this CPU's VDPBF16PS behaves as the kernel assumes (checked once with
 * ampc_gemm_bf16dot_probe, gemm_avx512.c; call that one only on a CPU with
 * AVX512-BF16). */
int ampc_gemm_bf16dot_available(void);
int ampc_gemm_bf16dot_probe(void);

/* The blocked GEMM (FP32 accumulation, gemm_frame.c) around micro-kernel uk
 * and its packing kernels. The result does not depend on uk or the thread
 * count. Returns AMPC_ERR_NOMEM if workspace cannot be allocated (C untouched
 * then). */
ampc_status ampc_gemm_blocked(const ampc_gemm_args *g, const ampc_gemm_config *cfg, int nthreads,
                              const ampc_gemm_ukernel *uk);

/* The micro-kernel ampc_gemm uses: AVX-512 when the CPU (and OS) have it,
 * else AVX2, else NULL (the portable loop). AMPC_ISA=avx2 in the environment
 * skips AVX-512, AMPC_ISA=portable every vector path (read once). For tests:
 * ampc_gemm_force_ukernel(uk) overrides the choice until called with NULL
 * (not thread-safe; uk must be supported by the CPU). */
const ampc_gemm_ukernel *ampc_gemm_active_ukernel(void);
void ampc_gemm_force_ukernel(const ampc_gemm_ukernel *uk);

/* The vector FP16-accumulation paths' per-matrix workspace (gemm_workspace.c): A
 * packed (mp x k elements of es bytes), B packed (np x k), the running sums
 * (mp x np), each part starting 64-byte aligned, in the calling thread's
 * ampc_gemm_workspace. Fetch it again for each matrix of a batch (the NaN
 * fallback may grow the workspace). AMPC_ERR_NOMEM when it overflows or
 * cannot be allocated. */
typedef struct ampc_acc16_ws {
  void *a, *b, *s;
} ampc_acc16_ws;
ampc_status ampc_acc16_workspace(int64_t mp, int64_t np, int64_t k, size_t es, ampc_acc16_ws *w);

/* One matrix (a, b, c: its operands and C) of g on the AVX2 double path
 * (gemm_acc16_avx2.c), whose NaN is the scalar path's: what the binary16 vector paths do with a
 * matrix that has a NaN operand (their separate product and sum, or the
 * compiler's VFMADD operand order, would keep another NaN). */
ampc_status ampc_acc16_nan_fallback(const ampc_gemm_args *g, const void *a, const void *b, void *c,
                                    int nthreads);

/* The FP16-accumulation ablation, AVX2 (gemm_acc16_avx2.c; bit-identical to
 * ampc_gemm_acc16_portable). AMPC_ERR_NOMEM if workspace cannot be allocated (C untouched). */
ampc_status ampc_gemm_acc16_avx2(const ampc_gemm_args *g, int nthreads);

/* The same on AVX2+F16C for binary16 A and B (round-to-odd sums in FP32
 * lanes from TwoSum, gemm_acc16_avx2.c); bit-identical. Call only when
 * ampc_use_avx2(). */
ampc_status ampc_gemm_acc16_avx2_f16(const ampc_gemm_args *g, int nthreads);

/* The same on AVX-512F for binary16 A and B (round-to-odd sums in FP32
 * lanes, gemm_acc16_avx512.c); bit-identical. Call only when
 * ampc_use_avx512(). */
ampc_status ampc_gemm_acc16_avx512(const ampc_gemm_args *g, int nthreads);

/* The same on AVX512-FP16 (VFMADDPH), for binary16 A and B only; bit-
 * identical too (gemm_acc16_fp16.c). Call only when ampc_use_avx512fp16(). */
ampc_status ampc_gemm_acc16_fp16(const ampc_gemm_args *g, int nthreads);

/* The plain C paths (gemm_portable.c): C = beta * C, A and B not read (for
 * alpha == 0 or K == 0); the FP32 accumulation, one FMA chain per element in
 * p order from +0, rounded once into C; the FP16-accumulation ablation, s <-
 * fp16(a*b + s) after every product (AMPC_ERR_NOMEM if its workspace cannot
 * be allocated, C untouched). Every vector path gives these bits. */
void ampc_gemm_scale_c(const ampc_gemm_args *g);
void ampc_gemm_portable(const ampc_gemm_args *g, int nthreads);
ampc_status ampc_gemm_acc16_portable(const ampc_gemm_args *g, int nthreads);

/* The FMA peak loops (12 independent chains; they return the FLOPs done):
 * 512-bit and 256-bit FP32 FMA, and VFMADDPH. Call each only on a CPU that
 * has its ISA. */
double ampc_peak_f32_avx512(int64_t iters);
double ampc_peak_f32_avx2(int64_t iters);
double ampc_peak_f16_avx512fp16(int64_t iters);
double ampc_peak_bf16_avx512bf16(int64_t iters); /* VDPBF16PS: 4 FLOPs per lane */

/* Which FP16-accumulation path ampc_gemm takes, for tests: AMPC_ACC16_AUTO
 * (the fastest the CPU, the dtypes and AMPC_ISA allow), or one path forced
 * (not thread-safe; the path must be supported by the CPU, and FP16, AVX512
 * and AVX2_F16 only take binary16 A and B, else the automatic choice is
 * made). */
typedef enum ampc_acc16_path {
  AMPC_ACC16_AUTO = 0,
  AMPC_ACC16_SCALAR = 1,
  AMPC_ACC16_AVX2 = 2,
  AMPC_ACC16_FP16 = 3,
  AMPC_ACC16_AVX512 = 4,
  AMPC_ACC16_AVX2_F16 = 5
} ampc_acc16_path;
void ampc_gemm_force_acc16(ampc_acc16_path path);

/* The calling thread's GEMM workspace, at least `bytes` long and 64-byte
 * aligned, kept between calls and grown (never shrunk) when a GEMM needs
 * more, so a training step's GEMMs allocate nothing once the largest has run
 * (each OpenMP thread that calls a GEMM has its own). The contents are
 * undefined; the caller must not free it. NULL when it cannot grow. */
void *ampc_gemm_workspace(size_t bytes);

/* ---- the INT8 GEMM (gemm_s8.c): rows i0 .. i1-1 of C = A B^T, exact ---- */

/* The scalar definition, and the vector paths that give its integers. */
void ampc_gemm_s8_rows_portable(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                                int64_t lda, const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc);
void ampc_gemm_s8_rows_avx2(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                            int64_t lda, const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc);
/* bp: B packed by ampc_gemm_s8_pack_vnni ([ceil(k/4)][n rounded up to 16][4]
 * bytes); bsum [n]: the row sums of B (the +128 offset's correction). y
 * NULL: C as int32 into c; else y [i, j] = (float)C * (alpha * mult[j]) +
 * bias[j] in FP32 (mult, bias may be NULL: alpha, + 0), c unused. */
void ampc_gemm_s8_pack_vnni(int64_t n, int64_t k, const int8_t *b, int64_t ldb, int8_t *bp);
void ampc_gemm_s8_rows_avx512vnni(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                                  int64_t lda, const int8_t *bp, const int32_t *bsum, int32_t *c,
                                  int64_t ldc, float alpha, const float *mult, const float *bias,
                                  float *y, int64_t ldy);
/* q [n] = the INT8 quantization of x [n] with scale (ampc_gemm_s8_quantize):
 * the scalar definition and its AVX2 and AVX-512 forms (the same bits). */
void ampc_s8_quantize_portable(const float *x, int64_t n, float scale, int8_t *q);
void ampc_s8_quantize_avx2(const float *x, int64_t n, float scale, int8_t *q);
void ampc_s8_quantize_avx512(const float *x, int64_t n, float scale, int8_t *q);
/* 1 when ampc_use_avx512() and the CPU (and OS) have AVX512-VNNI (cached). */
int ampc_cpu_has_avx512vnni(void);

#endif
