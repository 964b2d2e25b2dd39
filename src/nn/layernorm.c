/*
 * src/nn/layernorm.c: layer normalisation over the last axis (Ba et al. 2016),
 * statistics in double, everything else in FP32, one rounding per store.
 *
 * Each row is widened once into an FP32 row buffer (ampc_convert's vector
 * code; on the stack up to LN_ROW floats, else one heap buffer and one
 * thread) and the rows are shared among ampc's threads; the parameter
 * gradients of the backward pass are summed in double over fixed blocks of
 * rows (in row order within a block, then block by block), in the same pass
 * that forms dx. A row's sums in double run over four
 * interleaved partial sums (element j into sum j mod 4, combined as
 * (s0 + s1) + (s2 + s3)): four independent add chains instead of one, and the
 * same order on every path, so the bits depend neither on the path, the round
 * stats nor the thread count.
 */
#include "nn/nn_util.h"
#include "nn/elementwise_impl.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

enum { LN_ROW = 2048, LN_RB = 32 }; /* widest row on the stack; rows per gradient block */

/* sum_j x[j] in double, four partial sums */
static double sum4(const float *x, int64_t d) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t j = 0;
  for (; j + 4 <= d; j += 4)
    for (int l = 0; l < 4; l++)
      s[l] += (double)x[j + l];
  for (int l = 0; j + l < d; l++)
    s[l] += (double)x[j + l];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* sum_j (x[j] - mu)^2 in double, four partial sums */
static double sqdev4(const float *x, int64_t d, double mu) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t j = 0;
  for (; j + 4 <= d; j += 4)
    for (int l = 0; l < 4; l++) {
      const double c = (double)x[j + l] - mu;
      s[l] += c * c;
    }
  for (int l = 0; j + l < d; l++) {
    const double c = (double)x[j + l] - mu;
    s[l] += c * c;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* The backward row sums: sum_j gg_j and sum_j gg_j * xhat_j in double, with
 * gg_j = dy_j * gamma_j and xhat_j = (x_j - mean) * rstd in FP32. */
static void bwd_sums4(const float *xr, const float *gr, const float *gam, int64_t d, float mean,
                      float rstd, double *sg_out, double *sgx_out) {
  double sg[4] = {0.0, 0.0, 0.0, 0.0}, sgx[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t j = 0;
  for (; j + 4 <= d; j += 4)
    for (int l = 0; l < 4; l++) {
      const float xhat = (xr[j + l] - mean) * rstd;
      const float gg = gr[j + l] * gam[j + l];
      sg[l] += (double)gg;
      sgx[l] += (double)gg * (double)xhat;
    }
  for (int l = 0; j + l < d; l++) {
    const float xhat = (xr[j + l] - mean) * rstd;
    const float gg = gr[j + l] * gam[j + l];
    sg[l] += (double)gg;
    sgx[l] += (double)gg * (double)xhat;
  }
  *sg_out = (sg[0] + sg[1]) + (sg[2] + sg[3]);
  *sgx_out = (sgx[0] + sgx[1]) + (sgx[2] + sgx[3]);
}

/* One row of the forward pass: y = (x - mean) rstd gamma + beta in FP32,
 * mean and rstd from the two-pass sums in double. */
static void ln_row(const float *xr, int64_t d, float eps, const float *gb, const float *bb,
                   float *yr, float *mean, float *rstd) {
  const double mu = sum4(xr, d) / (double)d;
  const double v = sqdev4(xr, d, mu);
  const double r = 1.0 / sqrt(v / (double)d + (double)eps);
  *mean = (float)mu;
  *rstd = (float)r;
  const float muf = (float)mu, rf = (float)r;
  for (int64_t j = 0; j < d; j++) {
    const float xhat = (xr[j] - muf) * rf;
    yr[j] = xhat * gb[j] + bb[j];
  }
}

ampc_status ampc_layernorm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt,
                                   const void *gamma, const void *beta, ampc_dtype wdt, float eps,
                                   void *y, ampc_dtype ydt, float *mean, float *rstd,
                                   ampc_round_stats *stats) {
  const char *fn = "ampc_layernorm_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, gamma);
  NN_CHECK_PTR(fn, beta);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_PTR(fn, mean);
  NN_CHECK_PTR(fn, rstd);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  if (!(eps >= 0.0f))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: eps must be >= 0 (got %g)", fn, (double)eps);
  /* two passes in double: x - mean is formed in double, so a constant row
   * (whose mean is then exact) gives x - mean = 0 and y = beta */
  const int wide = d > LN_ROW;
  const int nt = (stats || wide) ? 1 : nn_threads(m * d);
  float *heap = wide ? malloc((size_t)(4 * d) * sizeof *heap) : NULL;
  if (wide && !heap)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn, (long long)(4 * d));
  float gst[LN_ROW], bst[LN_ROW];
  float *gb = wide ? heap : gst, *bb = wide ? heap + d : bst;
  nn_load(gamma, wdt, 0, d, gb);
  nn_load(beta, wdt, 0, d, bb);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < m; i++) {
    ampc_tally_adopt(tally);
    float xst[LN_ROW], yst[LN_ROW];
    float *xb = wide ? heap + 2 * d : xst;
    float *yr = nn_out(y, ydt, i * d, wide ? heap + 3 * d : yst, stats);
    const float *xr = nn_in(x, xdt, i * d, d, xb);
    ln_row(xr, d, eps, gb, bb, yr, &mean[i], &rstd[i]);
    nn_out_done(y, ydt, i * d, yr, d, stats);
  }
  free(heap);
  return AMPC_OK;
}

ampc_status ampc_add_layernorm_forward(int64_t m, int64_t d, const void *a, ampc_dtype adt,
                                       const void *b, ampc_dtype bdt, void *s, ampc_dtype sdt,
                                       const void *gamma, const void *beta, ampc_dtype wdt,
                                       float eps, void *y, ampc_dtype ydt, float *mean, float *rstd,
                                       ampc_round_stats *stats) {
  const char *fn = "ampc_add_layernorm_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, a);
  NN_CHECK_PTR(fn, b);
  NN_CHECK_PTR(fn, s);
  NN_CHECK_PTR(fn, gamma);
  NN_CHECK_PTR(fn, beta);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_PTR(fn, mean);
  NN_CHECK_PTR(fn, rstd);
  NN_CHECK_DT(fn, adt);
  NN_CHECK_DT(fn, bdt);
  NN_CHECK_DT(fn, sdt);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  if (!(eps >= 0.0f))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: eps must be >= 0 (got %g)", fn, (double)eps);
  if (stats || d > LN_ROW) { /* the two layers one after the other */
    AMPC_TRY(ampc_add_forward(m * d, a, adt, b, bdt, s, sdt, stats));
    return ampc_layernorm_forward(m, d, s, sdt, gamma, beta, wdt, eps, y, ydt, mean, rstd, stats);
  }
  float gb[LN_ROW], bb[LN_ROW];
  nn_load(gamma, wdt, 0, d, gb);
  nn_load(beta, wdt, 0, d, bb);
  const int nt = nn_threads(m * d);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < m; i++) {
    ampc_tally_adopt(tally);
    float xst[LN_ROW], yst[LN_ROW];
    /* s's row as ampc_add_forward stores it, then read back as the layer
     * norm reads its input (the rounded values) */
    ampc_nn_add_span(a, adt, b, bdt, i * d, d, s, sdt, NULL);
    const float *xr = nn_in(s, sdt, i * d, d, xst);
    float *yr = nn_out(y, ydt, i * d, yst, NULL);
    ln_row(xr, d, eps, gb, bb, yr, &mean[i], &rstd[i]);
    nn_out_done(y, ydt, i * d, yr, d, NULL);
  }
  return AMPC_OK;
}

/* the backward pass; dres (or NULL): then dres += dx row by row as
 * ampc_add_forward forms it (dres + dx, one rounding into gdt) */
static ampc_status ln_bwd(const char *fn, int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                          const void *x, ampc_dtype xdt, const void *gamma, ampc_dtype wdt,
                          const float *mean, const float *rstd, void *dx, void *dgamma, void *dbeta,
                          void *dres, ampc_scratch *ws) {
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, gamma);
  NN_CHECK_PTR(fn, mean);
  NN_CHECK_PTR(fn, rstd);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_PTR(fn, dgamma);
  NN_CHECK_PTR(fn, dbeta);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  /* The parameter gradients are summed in double over blocks of LN_RB rows
   * (rows in order within a block), the blocks' partial sums then added in
   * block order: the same order for any thread count. Each row is read once,
   * for its dx and its share of dgamma, dbeta. */
  const int wide = d > LN_ROW;
  const int nt = nn_threads(m * d);
  const int64_t nrb = (m + LN_RB - 1) / LN_RB;
  size_t off = 0;
  nn_buf pbuf, hbuf = {NULL, 0};
  double *part = nn_take(ws, &off, (size_t)(nrb * 2 * d) * sizeof *part, &pbuf);
  float *heap = wide ? nn_take(ws, &off, (size_t)(4 * d) * sizeof *heap, &hbuf) : NULL;
  if (!part || (wide && !heap)) {
    nn_give(&pbuf);
    nn_give(&hbuf);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the row-block sums (%lld x %lld)", fn,
                     (long long)nrb, (long long)d);
  }
  float gst[LN_ROW];
  float *gam = wide ? heap : gst;
  nn_load(gamma, wdt, 0, d, gam);
  /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; row
   * blocks shared among the threads (one thread for wide rows) */
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(wide ? 1 : nt) if (!wide && nt > 1)
  for (int64_t rb = 0; rb < nrb; rb++) {
    ampc_tally_adopt(tally);
    double *restrict pg = part + rb * 2 * d, *restrict pb = pg + d;
    for (int64_t j = 0; j < 2 * d; j++)
      pg[j] = 0.0;
    const int64_t i1 = (rb + 1) * LN_RB < m ? (rb + 1) * LN_RB : m;
    for (int64_t i = rb * LN_RB; i < i1; i++) {
      float xst[LN_ROW], gst2[LN_ROW], ost[LN_ROW];
      float *xb = wide ? heap + d : xst, *gb = wide ? heap + 2 * d : gst2;
      float *out = nn_out(dx, gdt, i * d, wide ? heap + 3 * d : ost, NULL);
      const float *xr = nn_in(x, xdt, i * d, d, xb);
      const float *gr = nn_in(dy, gdt, i * d, d, gb);
      double sg, sgx;
      bwd_sums4(xr, gr, gam, d, mean[i], rstd[i], &sg, &sgx);
      const float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
      const float mi = mean[i], ri = rstd[i];
      for (int64_t j = 0; j < d; j++) { /* gr[j] is read before out[j] (dx may be dy) */
        const float xhat = (xr[j] - mi) * ri;
        const float g = gr[j];
        pg[j] += (double)g * (double)xhat;
        pb[j] += (double)g;
        out[j] = ri * (g * gam[j] - mg - xhat * mgx);
      }
      nn_out_done(dx, gdt, i * d, out, d, NULL);
      if (dres)
        ampc_nn_add_span(dres, gdt, dx, gdt, i * d, d, dres, gdt, NULL);
    }
  }
  nn_give(&hbuf);
  for (int64_t j = 0; j < d; j++) {
    double sgm = 0.0, sbt = 0.0;
    for (int64_t rb = 0; rb < nrb; rb++) {
      sgm += part[rb * 2 * d + j];
      sbt += part[rb * 2 * d + d + j];
    }
    nn_grad_add(dgamma, gdt, j, (float)sgm);
    nn_grad_add(dbeta, gdt, j, (float)sbt);
  }
  nn_give(&pbuf);
  return AMPC_OK;
}

ampc_status ampc_layernorm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                    const void *x, ampc_dtype xdt, const void *gamma,
                                    ampc_dtype wdt, const float *mean, const float *rstd, void *dx,
                                    void *dgamma, void *dbeta, ampc_scratch *ws) {
  return ln_bwd("ampc_layernorm_backward", m, d, dy, gdt, x, xdt, gamma, wdt, mean, rstd, dx,
                dgamma, dbeta, NULL, ws);
}

ampc_status ampc_layernorm_backward_add(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                        const void *x, ampc_dtype xdt, const void *gamma,
                                        ampc_dtype wdt, const float *mean, const float *rstd,
                                        void *dx, void *dgamma, void *dbeta, void *dres,
                                        ampc_scratch *ws) {
  const char *fn = "ampc_layernorm_backward_add";
  NN_CHECK_PTR(fn, dres);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_DT(fn, gdt);
  if (m > 0 && d > 0) {
    const nn_span out = {dres, m * d, gdt, "dres"};
    const nn_span in[2] = {{dx, m * d, gdt, "dx"}, {dy, m * d, gdt, "dy"}};
    AMPC_TRY(nn_apart(fn, &out, 1, in, 2));
  }
  return ln_bwd(fn, m, d, dy, gdt, x, xdt, gamma, wdt, mean, rstd, dx, dgamma, dbeta, dres, ws);
}

size_t ampc_layernorm_backward_scratch_bytes(int64_t m, int64_t d) {
  if (m < 1 || d < 1)
    return 0;
  const int64_t nrb = (m + LN_RB - 1) / LN_RB;
  return nn_pad64((size_t)(nrb * 2 * d) * sizeof(double)) +
         (d > LN_ROW ? nn_pad64((size_t)(4 * d) * sizeof(float)) : 0);
}
