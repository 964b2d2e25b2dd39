/*
 * src/nn/attention.c: multi-head scaled dot-product attention on the strided
 * batched GEMM (heads are column blocks of the q, k, v, out rows) and the
 * masked FP32 softmax.
 */
#include "nn/nn_util.h"

#include <math.h>
#include <stdlib.h>

static const char *at_(const void *p, ampc_dtype dt, int64_t off) {
  return (const char *)p + off * (int64_t)ampc_dtype_size(dt);
}
static char *atw_(void *p, ampc_dtype dt, int64_t off) {
  return (char *)p + off * (int64_t)ampc_dtype_size(dt);
}

static ampc_status attn_check(const char *fn, int64_t b, int64_t tq, int64_t tk, int64_t h,
                              int64_t dh, int64_t ldq, int64_t ldk, int64_t ldv) {
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, tq);
  NN_CHECK_POS(fn, tk);
  NN_CHECK_POS(fn, h);
  NN_CHECK_POS(fn, dh);
  if (ldq < h * dh || ldk < h * dh || ldv < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldq/ldk/ldv must be >= h*dh = %lld", fn,
                     (long long)(h * dh));
  return AMPC_OK;
}

ampc_status ampc_attention_forward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                   const void *q, int64_t ldq, const void *k, int64_t ldk,
                                   const void *v, int64_t ldv, ampc_dtype xdt,
                                   const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                   void *probs, ampc_dtype pdt, void *out, int64_t ldo,
                                   ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats) {
  const char *fn = "ampc_attention_forward";
  ampc_status st = attn_check(fn, b, tq, tk, h, dh, ldq, ldk, ldv);
  if (st != AMPC_OK)
    return st;
  NN_CHECK_PTR(fn, q);
  NN_CHECK_PTR(fn, k);
  NN_CHECK_PTR(fn, v);
  NN_CHECK_PTR(fn, scores);
  NN_CHECK_PTR(fn, probs);
  NN_CHECK_PTR(fn, out);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, sdt);
  NN_CHECK_DT(fn, pdt);
  NN_CHECK_DT(fn, odt);
  if (ldo < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ldo must be >= h*dh", fn);
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk;                         /* one head's score matrix */
  for (int64_t bi = 0; bi < b && st == AMPC_OK; bi++) /* S = scale q k^T, all heads */
    st = ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, scale,
                                   at_(q, xdt, bi * tq * ldq), xdt, ldq, dh,
                                   at_(k, xdt, bi * tk * ldk), xdt, ldk, dh, 0.0f,
                                   atw_(scores, sdt, bi * h * ss), sdt, tk, ss, h, acc);
  if (st == AMPC_OK)
    st =
        ampc_softmax_forward(b * h * tq, tk, scores, sdt, 1.0f, key_mask, h * tq, probs, pdt, NULL);
  /* out = P v, heads side by side; with telemetry, through an FP32 buffer so
   * that the one rounding into odt can be counted */
  float *tmp = NULL;
  if (st == AMPC_OK && stats) {
    tmp = malloc((size_t)(b * tq * h * dh) * sizeof *tmp);
    if (!tmp)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the output buffer", fn);
  }
  void *dst = tmp ? (void *)tmp : out;
  const ampc_dtype ddt = tmp ? AMPC_F32 : odt;
  const int64_t ldd = tmp ? h * dh : ldo;
  for (int64_t bi = 0; bi < b && st == AMPC_OK; bi++)
    st = ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, tq, dh, tk, 1.0f,
                                   at_(probs, pdt, bi * h * ss), pdt, tk, ss,
                                   at_(v, xdt, bi * tk * ldv), xdt, ldv, dh, 0.0f,
                                   atw_(dst, ddt, bi * tq * ldd), ddt, ldd, dh, h, acc);
  for (int64_t r = 0; tmp && st == AMPC_OK && r < b * tq; r++)
    st = ampc_store_f32(atw_(out, odt, r * ldo), odt, tmp + r * h * dh, (size_t)(h * dh), stats);
  free(tmp);
  return st;
}

ampc_status ampc_attention_backward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                    const void *q, int64_t ldq, const void *k, int64_t ldk,
                                    const void *v, int64_t ldv, ampc_dtype xdt, const void *probs,
                                    ampc_dtype pdt, const void *dout, int64_t lddo, ampc_dtype gdt,
                                    void *dq, int64_t lddq, void *dk, int64_t lddk, void *dv,
                                    int64_t lddv, ampc_acc acc) {
  const char *fn = "ampc_attention_backward";
  ampc_status st = attn_check(fn, b, tq, tk, h, dh, ldq, ldk, ldv);
  if (st != AMPC_OK)
    return st;
  NN_CHECK_PTR(fn, q);
  NN_CHECK_PTR(fn, k);
  NN_CHECK_PTR(fn, v);
  NN_CHECK_PTR(fn, probs);
  NN_CHECK_PTR(fn, dout);
  NN_CHECK_PTR(fn, dq);
  NN_CHECK_PTR(fn, dk);
  NN_CHECK_PTR(fn, dv);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, pdt);
  NN_CHECK_DT(fn, gdt);
  if (lddo < h * dh || lddq < h * dh || lddk < h * dh || lddv < h * dh)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: gradient leading dimensions must be >= h*dh", fn);
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk;
  float *dp = malloc((size_t)(2 * h * ss) * sizeof *dp);
  if (!dp)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn,
                     (long long)(2 * h * ss));
  float *ds = dp + h * ss;
  for (int64_t bi = 0; bi < b && st == AMPC_OK; bi++) {
    const char *p_b = at_(probs, pdt, bi * h * ss);
    const char *q_b = at_(q, xdt, bi * tq * ldq), *k_b = at_(k, xdt, bi * tk * ldk),
               *v_b = at_(v, xdt, bi * tk * ldv), *do_b = at_(dout, gdt, bi * tq * lddo);
    /* dP = dout v^T */
    st = ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, 1.0f, do_b, gdt, lddo, dh, v_b,
                                   xdt, ldv, dh, 0.0f, dp, AMPC_F32, tk, ss, h, acc);
    /* dS = softmax backward (FP32) */
    if (st == AMPC_OK)
      st = ampc_softmax_backward(h * tq, tk, dp, AMPC_F32, p_b, pdt, 1.0f, ds);
    /* dq = scale dS k ; dk = scale dS^T q ; dv = P^T dout (heads side by side) */
    if (st == AMPC_OK)
      st = ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, tq, dh, tk, scale, ds, AMPC_F32, tk, ss,
                                     k_b, xdt, ldk, dh, 0.0f, atw_(dq, gdt, bi * tq * lddq), gdt,
                                     lddq, dh, h, acc);
    if (st == AMPC_OK)
      st = ampc_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, scale, ds, AMPC_F32, tk, ss,
                                     q_b, xdt, ldq, dh, 0.0f, atw_(dk, gdt, bi * tk * lddk), gdt,
                                     lddk, dh, h, acc);
    if (st == AMPC_OK)
      st = ampc_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, 1.0f, p_b, pdt, tk, ss, do_b,
                                     gdt, lddo, dh, 0.0f, atw_(dv, gdt, bi * tk * lddv), gdt, lddv,
                                     dh, h, acc);
  }
  free(dp);
  return st;
}
