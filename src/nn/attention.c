/*
 * src/nn/attention.c: multi-head scaled dot-product attention on the strided
 * batched GEMM (heads are column blocks of the q, k, v, out rows) and the
 * masked FP32 softmax.
 *
 * The per-sample products are small (tq x tk x head_dim per head), so the
 * samples, not the GEMMs, are shared among ampc's threads: each sample's
 * batched GEMMs run on one thread (an OpenMP region inside a parallel loop
 * is not split again). A GEMM's result does not depend on its thread count,
 * so the bits are the same.
 */
#include "nn/nn_util.h"
#include "nn/mha_impl.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

/* the first failure of a parallel loop, its message copied out of the
 * failing thread's error buffer */
typedef struct {
  ampc_status st;
  char msg[256];
} par_err;

static void par_fail(par_err *e, ampc_status st) {
#pragma omp critical(ampc_attention_err)
  if (e->st == AMPC_OK) {
    e->st = st;
    snprintf(e->msg, sizeof e->msg, "%s", ampc_last_error());
  }
}

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

/* S = scale q k^T (all heads, a strided batched GEMM per sample) and P =
 * softmax(S): the first half of ampc_attention_forward, which
 * ampc_attention_probs repeats */
static ampc_status scores_probs(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                const void *q, int64_t ldq, const void *k, int64_t ldk,
                                ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                                ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_acc acc) {
  const float scale = (float)(1.0 / sqrt((double)dh));
  const int64_t ss = tq * tk; /* one head's score matrix */
  const int nt = b > 1 ? nn_threads(b * h * ss * dh) : 1;
  par_err pe = {AMPC_OK, ""};
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t bi = 0; bi < b; bi++) { /* S = scale q k^T, all heads */
    ampc_tally_adopt(tally);
    ampc_status s = ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, scale,
                                              at_(q, xdt, bi * tq * ldq), xdt, ldq, dh,
                                              at_(k, xdt, bi * tk * ldk), xdt, ldk, dh, 0.0f,
                                              atw_(scores, sdt, bi * h * ss), sdt, tk, ss, h, acc);
    if (s != AMPC_OK)
      par_fail(&pe, s);
  }
  if (pe.st != AMPC_OK)
    return ampc_fail(pe.st, "%s", pe.msg);
  return ampc_softmax_forward(b * h * tq, tk, scores, sdt, 1.0f, key_mask, h * tq, probs, pdt,
                              NULL);
}

ampc_status ampc_attention_probs(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                 const void *q, int64_t ldq, const void *k, int64_t ldk,
                                 ampc_dtype xdt, const uint8_t *key_mask, void *scores,
                                 ampc_dtype sdt, void *probs, ampc_dtype pdt, ampc_acc acc) {
  const char *fn = "ampc_attention_probs";
  ampc_status st = attn_check(fn, b, tq, tk, h, dh, ldq, ldk, ldk); /* no v: ldk for ldv */
  if (st != AMPC_OK)
    return st;
  NN_CHECK_PTR(fn, q);
  NN_CHECK_PTR(fn, k);
  NN_CHECK_PTR(fn, scores);
  NN_CHECK_PTR(fn, probs);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, sdt);
  NN_CHECK_DT(fn, pdt);
  ampc_tally *const was = ampc_tally_bind(NULL); /* counted once, by the forward pass */
  st = scores_probs(b, tq, tk, h, dh, q, ldq, k, ldk, xdt, key_mask, scores, sdt, probs, pdt, acc);
  (void)ampc_tally_bind(was);
  return st;
}

/* mdt: F32 (P enters P v as stored), or a 16-bit dtype that an FP32 P is
 * rounded to for the product (autocast's cast; counted as a store) */
static bool cast_p(ampc_dtype pdt, ampc_dtype mdt) { return mdt != AMPC_F32 && pdt == AMPC_F32; }
static ampc_status check_mdt(const char *fn, ampc_dtype mdt) {
  if (mdt != AMPC_F32 && mdt != AMPC_F16 && mdt != AMPC_BF16)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: mdt must be F32, F16 or BF16 (got %d)", fn,
                     (int)mdt);
  return AMPC_OK;
}

ampc_status ampc_attention_forward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                   const void *q, int64_t ldq, const void *k, int64_t ldk,
                                   const void *v, int64_t ldv, ampc_dtype xdt,
                                   const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                   void *probs, ampc_dtype pdt, void *out, int64_t ldo,
                                   ampc_dtype odt, ampc_acc acc, ampc_round_stats *stats) {
  return ampc_attention_forward_ex(b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, key_mask, scores,
                                   sdt, probs, pdt, AMPC_F32, out, ldo, odt, acc, stats);
}

ampc_status ampc_attention_forward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                      const void *q, int64_t ldq, const void *k, int64_t ldk,
                                      const void *v, int64_t ldv, ampc_dtype xdt,
                                      const uint8_t *key_mask, void *scores, ampc_dtype sdt,
                                      void *probs, ampc_dtype pdt, ampc_dtype mdt, void *out,
                                      int64_t ldo, ampc_dtype odt, ampc_acc acc,
                                      ampc_round_stats *stats) {
  const char *fn = "ampc_attention_forward";
  if (check_mdt(fn, mdt) != AMPC_OK)
    return AMPC_ERR_INVALID_ARG;
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
  const int64_t ss = tq * tk; /* one head's score matrix */
  int nt = b > 1 ? nn_threads(b * h * ss * dh) : 1;
  if (nt > b) /* a worker per sample at most: the 16-bit P buffers below */
    nt = (int)b;
  par_err pe = {AMPC_OK, ""};
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
  st = scores_probs(b, tq, tk, h, dh, q, ldq, k, ldk, xdt, key_mask, scores, sdt, probs, pdt, acc);
  /* P rounded to mdt for the product, one sample at a time into the
   * worker's own buffer of h*tq*tk values (the stored P stays as it is: the
   * backward pass's softmax reads it) */
  const bool cast = cast_p(pdt, mdt);
  const size_t pm_n = cast ? (size_t)(h * ss) : 0, pm_sz = cast ? ampc_dtype_size(mdt) : 0;
  char *pm = NULL;
  if (st == AMPC_OK && cast) {
    pm = malloc((size_t)nt * pm_n * pm_sz);
    if (!pm)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the 16-bit probabilities", fn);
  }
  /* out = P v, heads side by side; with telemetry, through an FP32 buffer so
   * that the one rounding into odt can be counted */
  float *tmp = NULL;
  if (st == AMPC_OK && stats) {
    tmp = malloc((size_t)(b * tq * h * dh) * sizeof *tmp);
    if (!tmp) {
      free(pm);
      return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the output buffer", fn);
    }
  }
  void *dst = tmp ? (void *)tmp : out;
  const ampc_dtype ddt = tmp ? AMPC_F32 : odt;
  const int64_t ldd = tmp ? h * dh : ldo;
  if (st == AMPC_OK) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bi = 0; bi < b; bi++) {
      ampc_tally_adopt(tally);
      const void *pp = at_(probs, pdt, bi * h * ss);
      ampc_dtype ppdt = pdt;
      ampc_status s = AMPC_OK;
      if (cast) { /* a counted store into the bound tally */
        void *pmt = pm + (size_t)omp_get_thread_num() * pm_n * pm_sz;
        s = ampc_store_f32(pmt, mdt, (const float *)pp, pm_n, NULL);
        pp = pmt, ppdt = mdt;
      }
      if (s == AMPC_OK)
        s = ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, tq, dh, tk, 1.0f, pp, ppdt, tk, ss,
                                      at_(v, xdt, bi * tk * ldv), xdt, ldv, dh, 0.0f,
                                      atw_(dst, ddt, bi * tq * ldd), ddt, ldd, dh, h, acc);
      if (s != AMPC_OK)
        par_fail(&pe, s);
    }
    if (pe.st != AMPC_OK)
      st = ampc_fail(pe.st, "%s", pe.msg);
  }
  for (int64_t r = 0; tmp && st == AMPC_OK && r < b * tq; r++)
    st = ampc_store_f32(atw_(out, odt, r * ldo), odt, tmp + r * h * dh, (size_t)(h * dh), stats);
  free(tmp);
  free(pm);
  return st;
}

ampc_status ampc_attention_backward(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                    const void *q, int64_t ldq, const void *k, int64_t ldk,
                                    const void *v, int64_t ldv, ampc_dtype xdt, const void *probs,
                                    ampc_dtype pdt, const void *dout, int64_t lddo, ampc_dtype gdt,
                                    void *dq, int64_t lddq, void *dk, int64_t lddk, void *dv,
                                    int64_t lddv, ampc_acc acc, ampc_scratch *ws) {
  return ampc_attention_backward_ex(b, tq, tk, h, dh, q, ldq, k, ldk, v, ldv, xdt, probs, pdt,
                                    AMPC_F32, dout, lddo, gdt, dq, lddq, dk, lddk, dv, lddv, acc,
                                    ws);
}

ampc_status ampc_attention_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t dh,
                                       const void *q, int64_t ldq, const void *k, int64_t ldk,
                                       const void *v, int64_t ldv, ampc_dtype xdt,
                                       const void *probs, ampc_dtype pdt, ampc_dtype mdt,
                                       const void *dout, int64_t lddo, ampc_dtype gdt, void *dq,
                                       int64_t lddq, void *dk, int64_t lddk, void *dv, int64_t lddv,
                                       ampc_acc acc, ampc_scratch *ws) {
  const char *fn = "ampc_attention_backward";
  if (check_mdt(fn, mdt) != AMPC_OK)
    return AMPC_ERR_INVALID_ARG;
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
  const int nt = b > 1 ? nn_threads(b * h * ss * dh) : 1;
  /* dP and dS of one sample, per thread */
  size_t off = 0;
  nn_buf dpb;
  float *dp = nn_take(ws, &off, (size_t)nt * (size_t)(2 * h * ss) * sizeof *dp, &dpb);
  if (!dp)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn,
                     (long long)(nt * 2 * h * ss));
  par_err pe = {AMPC_OK, ""};
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    ampc_tally_adopt(tally);
    float *dpt = dp + (size_t)omp_get_thread_num() * (size_t)(2 * h * ss);
    float *ds = dpt + h * ss;
#pragma omp for schedule(static)
    for (int64_t bi = 0; bi < b; bi++) {
      const char *p_b = at_(probs, pdt, bi * h * ss);
      const char *q_b = at_(q, xdt, bi * tq * ldq), *k_b = at_(k, xdt, bi * tk * ldk),
                 *v_b = at_(v, xdt, bi * tk * ldv), *do_b = at_(dout, gdt, bi * tq * lddo);
      /* dP = dout v^T */
      ampc_status s =
          ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_T, tq, tk, dh, 1.0f, do_b, gdt, lddo, dh,
                                    v_b, xdt, ldv, dh, 0.0f, dpt, AMPC_F32, tk, ss, h, acc);
      /* dS = softmax backward (FP32) */
      if (s == AMPC_OK)
        s = ampc_softmax_backward(h * tq, tk, dpt, AMPC_F32, p_b, pdt, 1.0f, ds);
      /* with mdt 16-bit: dS rounded to mdt (counted: the gradient autocast's
       * cast stores) and an FP32 P to mdt again (the forward counted it),
       * both in dP's place, which the softmax backward pass has read */
      const void *dsp = ds, *pp = p_b;
      ampc_dtype dsdt = AMPC_F32, ppdt = pdt;
      if (s == AMPC_OK && mdt != AMPC_F32) {
        const size_t n = (size_t)(h * ss), ms = ampc_dtype_size(mdt);
        s = ampc_store_f32(dpt, mdt, ds, n, NULL);
        dsp = dpt, dsdt = mdt;
        if (s == AMPC_OK && cast_p(pdt, mdt)) {
          char *p16 = (char *)dpt + n * ms;
          s = ampc_convert(p16, mdt, p_b, AMPC_F32, n);
          pp = p16, ppdt = mdt;
        }
      }
      /* dq = scale dS k ; dk = scale dS^T q ; dv = P^T dout (heads side by side) */
      if (s == AMPC_OK)
        s = ampc_gemm_strided_batched(AMPC_OP_N, AMPC_OP_N, tq, dh, tk, scale, dsp, dsdt, tk, ss,
                                      k_b, xdt, ldk, dh, 0.0f, atw_(dq, gdt, bi * tq * lddq), gdt,
                                      lddq, dh, h, acc);
      if (s == AMPC_OK)
        s = ampc_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, scale, dsp, dsdt, tk, ss,
                                      q_b, xdt, ldq, dh, 0.0f, atw_(dk, gdt, bi * tk * lddk), gdt,
                                      lddk, dh, h, acc);
      if (s == AMPC_OK)
        s = ampc_gemm_strided_batched(AMPC_OP_T, AMPC_OP_N, tk, dh, tq, 1.0f, pp, ppdt, tk, ss,
                                      do_b, gdt, lddo, dh, 0.0f, atw_(dv, gdt, bi * tk * lddv), gdt,
                                      lddv, dh, h, acc);
      if (s != AMPC_OK)
        par_fail(&pe, s);
    }
  }
  nn_give(&dpb);
  if (pe.st != AMPC_OK)
    return ampc_fail(pe.st, "%s", pe.msg);
  return st;
}

size_t ampc_attention_backward_scratch_bytes(int64_t b, int64_t tq, int64_t tk, int64_t h,
                                             int64_t dh) {
  (void)dh;
  if (b < 1 || tq < 1 || tk < 1 || h < 1)
    return 0;
  const int64_t nt = b > 1 ? ampc_get_num_threads() : 1; /* nn_threads' largest answer */
  return nn_pad64((size_t)nt * (size_t)(2 * h * tq * tk) * sizeof(float));
}

/* ---- the layer: projections around the core ------------------------------- */

ampc_status ampc_mha_forward_with(const ampc_mha_ops *o, int64_t b, int64_t tq, int64_t tk,
                                  int64_t dm, int64_t h, const void *xq, const void *xkv,
                                  ampc_dtype adt, const void *wq, const void *bq, const void *wk,
                                  const void *bk, const void *wv, const void *bv, const void *wo,
                                  const void *bo, ampc_dtype wdt, const uint8_t *key_mask,
                                  const ampc_mha_cache *cache, ampc_dtype pdt, void *y,
                                  ampc_acc acc, ampc_linear_fp8 *const *fp8,
                                  ampc_round_stats *stats) {
  const char *fn = "ampc_mha_forward";
  NN_CHECK_POS(fn, dm);
  NN_CHECK_POS(fn, h);
  NN_CHECK_PTR(fn, cache);
  if (dm % h)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: dm = %lld is not a multiple of h = %lld", fn,
                     (long long)dm, (long long)h);
  ampc_linear_fp8 *const f[4] = {fp8 ? fp8[0] : NULL, fp8 ? fp8[1] : NULL, fp8 ? fp8[2] : NULL,
                                 fp8 ? fp8[3] : NULL};
  ampc_status st =
      o->linear_fwd(b * tq, dm, dm, xq, adt, wq, wdt, bq, cache->q, adt, acc, f[0], NULL);
  if (st == AMPC_OK)
    st = o->linear_fwd(b * tk, dm, dm, xkv, adt, wk, wdt, bk, cache->k, adt, acc, f[1], NULL);
  if (st == AMPC_OK)
    st = o->linear_fwd(b * tk, dm, dm, xkv, adt, wv, wdt, bv, cache->v, adt, acc, f[2], NULL);
  if (st == AMPC_OK)
    st = o->attn_fwd(b, tq, tk, h, dm / h, cache->q, dm, cache->k, dm, cache->v, dm, adt, key_mask,
                     cache->scores, pdt, cache->probs, pdt, cache->mdt, cache->o, dm, adt, acc,
                     NULL);
  if (st == AMPC_OK)
    st = o->linear_fwd(b * tq, dm, dm, cache->o, adt, wo, wdt, bo, y, adt, acc, f[3], stats);
  return st;
}

ampc_status ampc_mha_backward(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                              const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                              const void *wk, const void *wv, const void *wo, ampc_dtype wdt,
                              const ampc_mha_cache *cache, ampc_dtype pdt, const void *dy,
                              ampc_dtype gdt, void *dxq, void *dxkv, void *dwq, void *dbq,
                              void *dwk, void *dbk, void *dwv, void *dbv, void *dwo, void *dbo,
                              ampc_acc acc, ampc_linear_fp8 *const *fp8, ampc_scratch *ws) {
  return ampc_mha_backward_ex(b, tq, tk, dm, h, xq, xkv, adt, wq, wk, wv, wo, wdt, cache, pdt, dy,
                              gdt, dxq, dxkv, 1.0f, dwq, dbq, dwk, dbk, dwv, dbv, dwo, dbo, acc,
                              fp8, ws);
}

ampc_status ampc_mha_backward_with(const ampc_mha_ops *o, int64_t b, int64_t tq, int64_t tk,
                                   int64_t dm, int64_t h, const void *xq, const void *xkv,
                                   ampc_dtype adt, const void *wq, const void *wk, const void *wv,
                                   const void *wo, ampc_dtype wdt, const ampc_mha_cache *cache,
                                   ampc_dtype pdt, const void *dy, ampc_dtype gdt, void *dxq,
                                   void *dxkv, float dxkv_scale, void *dwq, void *dbq, void *dwk,
                                   void *dbk, void *dwv, void *dbv, void *dwo, void *dbo,
                                   ampc_acc acc, ampc_linear_fp8 *const *fp8, ampc_scratch *ws) {
  const char *fn = "ampc_mha_backward";
  if (!(dxkv_scale > 0.0f) || !isfinite(dxkv_scale) || (dxkv_scale != 1.0f && !dxkv))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad dxkv scale %g", fn, (double)dxkv_scale);
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, tq);
  NN_CHECK_POS(fn, tk);
  NN_CHECK_POS(fn, dm);
  NN_CHECK_POS(fn, h);
  NN_CHECK_PTR(fn, cache);
  NN_CHECK_PTR(fn, dxq);
  NN_CHECK_DT(fn, gdt);
  const int self = dxkv == NULL;
  if (dm % h)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: dm = %lld is not a multiple of h = %lld", fn,
                     (long long)dm, (long long)h);
  if (self && tk != tq)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: dxkv is NULL (self-attention) but tk != tq", fn);
  const int64_t nq = b * tq * dm, nk = b * tk * dm;
  const size_t gs = ampc_dtype_size(gdt);
  /* d(o), dq, dk, dv in gdt; FP32 sums for the input gradients */
  size_t off = 0;
  ampc_mha_buf own = {NULL, 0};
  char *buf =
      o->take(ws, &off, (size_t)(2 * nq + 2 * nk) * gs + (size_t)(nq + nk) * sizeof(float), &own);
  if (!buf)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate workspace", fn);
  void *dO = buf, *dq = buf + nq * gs, *dk = buf + 2 * nq * gs, *dv = buf + (2 * nq + nk) * gs;
  float *sq = (float *)(void *)(buf + (2 * nq + 2 * nk) * gs), *sk = sq + nq;
  ampc_scratch rest = o->rest(ws, off); /* for the layers called below, one at a time */
  ampc_linear_fp8 *const f[4] = {fp8 ? fp8[0] : NULL, fp8 ? fp8[1] : NULL, fp8 ? fp8[2] : NULL,
                                 fp8 ? fp8[3] : NULL};
  /* y = o Wo^T + bo */
  ampc_status st = o->linear_bwd(b * tq, dm, dm, dy, gdt, cache->o, adt, wo, wdt, dO, dwo, dbo, acc,
                                 f[3], &rest);
  /* the probabilities the forward pass did not keep: the same products
   * and softmax again, so the same bits (counted once, by the forward pass) */
  if (st == AMPC_OK && cache->recompute)
    st = o->attn_probs(b, tq, tk, h, dm / h, cache->q, dm, cache->k, dm, adt, cache->key_mask,
                       cache->scores, pdt, cache->probs, pdt, acc);
  if (st == AMPC_OK)
    st =
        o->attn_bwd(b, tq, tk, h, dm / h, cache->q, dm, cache->k, dm, cache->v, dm, adt,
                    cache->probs, pdt, cache->mdt, dO, dm, gdt, dq, dm, dk, dm, dv, dm, acc, &rest);
  /* parameter gradients of the three projections (no input gradient here) */
  if (st == AMPC_OK)
    st = o->linear_bwd(b * tq, dm, dm, dq, gdt, xq, adt, wq, wdt, NULL, dwq, dbq, acc, f[0], &rest);
  if (st == AMPC_OK)
    st =
        o->linear_bwd(b * tk, dm, dm, dk, gdt, xkv, adt, wk, wdt, NULL, dwk, dbk, acc, f[1], &rest);
  if (st == AMPC_OK)
    st =
        o->linear_bwd(b * tk, dm, dm, dv, gdt, xkv, adt, wv, wdt, NULL, dwv, dbv, acc, f[2], &rest);
  /* input gradients, summed in FP32: dxq = dq Wq (+ dk Wk + dv Wv if self);
   * under FP8 the casts of dq, dk, dv were counted above */
  float *skv = self ? sq : sk;
  if (st == AMPC_OK)
    st = o->linear_dgrad(b * tq, dm, dm, dq, gdt, wq, wdt, 0.0f, sq, AMPC_F32, acc, f[0], false);
  if (st == AMPC_OK)
    st = o->linear_dgrad(b * tk, dm, dm, dk, gdt, wk, wdt, self ? 1.0f : 0.0f, skv, AMPC_F32, acc,
                         f[1], false);
  if (st == AMPC_OK)
    st = o->linear_dgrad(b * tk, dm, dm, dv, gdt, wv, wdt, 1.0f, skv, AMPC_F32, acc, f[2], false);
  if (st == AMPC_OK)
    st = o->store_scaled(dxq, gdt, sq, nq, 1.0f);
  if (st == AMPC_OK && !self)
    st = o->store_scaled(dxkv, gdt, sk, nk, dxkv_scale);
  o->give(&own);
  return st;
}

/* ---- the CPU's table (the GPU's: src/backend/cuda/cuda_mha.cu) -------------- */

static ampc_status cpu_store_scaled(void *dst, ampc_dtype dt, float *src, int64_t n, float scale) {
  if (scale != 1.0f)
    for (int64_t i = 0; i < n; i++)
      src[i] *= scale;
  return ampc_store_f32(dst, dt, src, (size_t)n, NULL);
}
static void *cpu_take(ampc_scratch *ws, size_t *off, size_t bytes, ampc_mha_buf *own) {
  nn_buf b = {NULL, 0};
  void *p = nn_take(ws, off, bytes, &b);
  own->p = b.p, own->heap = b.heap;
  return p;
}
static void cpu_give(ampc_mha_buf *own) {
  nn_buf b = {own->p, own->heap};
  nn_give(&b);
}
static const ampc_mha_ops k_cpu_mha = {
    .linear_fwd = ampc_linear_forward_fp8,
    .linear_bwd = ampc_linear_backward_fp8,
    .linear_dgrad = ampc_linear_dgrad_fp8,
    .attn_fwd = ampc_attention_forward_ex,
    .attn_probs = ampc_attention_probs,
    .attn_bwd = ampc_attention_backward_ex,
    .store_scaled = cpu_store_scaled,
    .take = cpu_take,
    .give = cpu_give,
    .rest = nn_rest,
};

ampc_status ampc_mha_forward(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                             const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                             const void *bq, const void *wk, const void *bk, const void *wv,
                             const void *bv, const void *wo, const void *bo, ampc_dtype wdt,
                             const uint8_t *key_mask, const ampc_mha_cache *cache, ampc_dtype pdt,
                             void *y, ampc_acc acc, ampc_linear_fp8 *const *fp8,
                             ampc_round_stats *stats) {
  return ampc_mha_forward_with(&k_cpu_mha, b, tq, tk, dm, h, xq, xkv, adt, wq, bq, wk, bk, wv, bv,
                               wo, bo, wdt, key_mask, cache, pdt, y, acc, fp8, stats);
}

ampc_status ampc_mha_backward_ex(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                 const void *xq, const void *xkv, ampc_dtype adt, const void *wq,
                                 const void *wk, const void *wv, const void *wo, ampc_dtype wdt,
                                 const ampc_mha_cache *cache, ampc_dtype pdt, const void *dy,
                                 ampc_dtype gdt, void *dxq, void *dxkv, float dxkv_scale, void *dwq,
                                 void *dbq, void *dwk, void *dbk, void *dwv, void *dbv, void *dwo,
                                 void *dbo, ampc_acc acc, ampc_linear_fp8 *const *fp8,
                                 ampc_scratch *ws) {
  return ampc_mha_backward_with(&k_cpu_mha, b, tq, tk, dm, h, xq, xkv, adt, wq, wk, wv, wo, wdt,
                                cache, pdt, dy, gdt, dxq, dxkv, dxkv_scale, dwq, dbq, dwk, dbk, dwv,
                                dbv, dwo, dbo, acc, fp8, ws);
}

size_t ampc_mha_backward_scratch_bytes(int64_t b, int64_t tq, int64_t tk, int64_t dm, int64_t h,
                                       ampc_dtype gdt) {
  if (b < 1 || tq < 1 || tk < 1 || dm < 1 || h < 1 || dm % h)
    return 0;
  const int64_t nq = b * tq * dm, nk = b * tk * dm;
  const size_t own = nn_pad64((size_t)(2 * nq + 2 * nk) * ampc_dtype_size(gdt) +
                              (size_t)(nq + nk) * sizeof(float));
  const size_t lin = ampc_linear_backward_scratch_bytes(dm);
  const size_t att = ampc_attention_backward_scratch_bytes(b, tq, tk, h, dm / h);
  return own + (lin > att ? lin : att);
}
