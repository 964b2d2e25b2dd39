/*
 * src/kernels/gemm_impl.h: what gemm.c (validation, dispatch, portable and
 * FP16-accumulation paths) shares with gemm_avx2.c (the blocked kernel).
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
} ampc_gemm_args;

/* Element i of a buffer of dtype dt (F32, F16 or BF16), widened to FP32. */
static inline float ampc_gemm_load(const void *p, ampc_dtype dt, int64_t i) {
  switch (dt) {
  case AMPC_F16: return ampc_bits_f32(ampc_f16bits_to_f32bits(((const uint16_t *)p)[i]));
  case AMPC_BF16: return ampc_bits_f32(ampc_bf16bits_to_f32bits(((const uint16_t *)p)[i]));
  default: return ((const float *)p)[i];
  }
}

/* Round v once (RNE) to dt and store it as element i. */
static inline void ampc_gemm_store(void *p, ampc_dtype dt, int64_t i, float v) {
  switch (dt) {
  case AMPC_F16: ((uint16_t *)p)[i] = ampc_f32bits_to_f16bits(ampc_f32_bits(v)); break;
  case AMPC_BF16: ((uint16_t *)p)[i] = ampc_f32bits_to_bf16bits(ampc_f32_bits(v)); break;
  default: ((float *)p)[i] = v; break;
  }
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

/* The AVX2+FMA+F16C blocked GEMM (FP32 accumulation), gemm_avx2.c. Returns
 * AMPC_ERR_NOMEM if workspace cannot be allocated (C untouched then). */
ampc_status ampc_gemm_blocked_avx2(const ampc_gemm_args *g, const ampc_gemm_config *cfg,
                                   int nthreads);

/* The FP16-accumulation ablation, AVX2 (bit-identical to the scalar path in
 * gemm.c). AMPC_ERR_NOMEM if workspace cannot be allocated (C untouched). */
ampc_status ampc_gemm_acc16_avx2(const ampc_gemm_args *g, int nthreads);

#endif
