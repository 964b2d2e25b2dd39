/*
 * src/nn/layernorm.c: layer normalisation over the last axis (Ba et al. 2016),
 * statistics in double, everything else in FP32, one rounding per store.
 *
 * Rows up to LN_ROW floats wide are widened once into an FP32 row buffer
 * (ampc_convert's vector code) and the rows are shared among ampc's threads;
 * the parameter gradients of the backward pass are summed over the rows in
 * row order in a second loop shared by column ranges. Every value is formed
 * by the same operations in the same order as in the one-element-at-a-time
 * loops kept for wider rows and for round stats, so the bits do not depend on
 * the path or the thread count.
 */
#include "nn/nn_util.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

enum { LN_ROW = 2048 };

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
  if (d <= LN_ROW && !stats) {
    float gb[LN_ROW], bb[LN_ROW];
    nn_load(gamma, wdt, 0, d, gb);
    nn_load(beta, wdt, 0, d, bb);
    const int nt = nn_threads(m * d);
    const size_t ys = ampc_dtype_size(ydt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < m; i++) {
      float xb[LN_ROW], yr[LN_ROW];
      const float *xr = nn_in(x, xdt, i * d, d, xb);
      double s = 0.0;
      for (int64_t j = 0; j < d; j++)
        s += (double)xr[j];
      const double mu = s / (double)d;
      double v = 0.0;
      for (int64_t j = 0; j < d; j++) {
        const double c = (double)xr[j] - mu;
        v += c * c;
      }
      const double r = 1.0 / sqrt(v / (double)d + (double)eps);
      mean[i] = (float)mu;
      rstd[i] = (float)r;
      const float muf = (float)mu, rf = (float)r;
      for (int64_t j = 0; j < d; j++) {
        const float xhat = (xr[j] - muf) * rf;
        yr[j] = xhat * gb[j] + bb[j];
      }
      ampc_store_f32((char *)y + i * d * (ptrdiff_t)ys, ydt, yr, (size_t)d, NULL);
    }
    return AMPC_OK;
  }
  nn_writer w;
  nn_writer_init(&w, y, ydt, 0, stats);
  for (int64_t i = 0; i < m; i++) {
    /* two passes in double: the sum of d FP32 values is exact for d < 2^29
     * (and their mean exact when it is representable), so a constant row
     * gives x - mean = 0 exactly */
    double s = 0.0;
    for (int64_t j = 0; j < d; j++)
      s += (double)ampc_elem_load(x, xdt, i * d + j);
    const double mu = s / (double)d;
    double v = 0.0;
    for (int64_t j = 0; j < d; j++) {
      const double c = (double)ampc_elem_load(x, xdt, i * d + j) - mu;
      v += c * c;
    }
    const double r = 1.0 / sqrt(v / (double)d + (double)eps);
    mean[i] = (float)mu;
    rstd[i] = (float)r;
    const float muf = (float)mu, rf = (float)r;
    for (int64_t j = 0; j < d; j++) {
      const float xhat = (ampc_elem_load(x, xdt, i * d + j) - muf) * rf;
      nn_writer_put(&w, xhat * ampc_elem_load(gamma, wdt, j) + ampc_elem_load(beta, wdt, j));
    }
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_layernorm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                    const void *x, ampc_dtype xdt, const void *gamma,
                                    ampc_dtype wdt, const float *mean, const float *rstd, void *dx,
                                    void *dgamma, void *dbeta) {
  const char *fn = "ampc_layernorm_backward";
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
  /* parameter gradients summed over rows in double, added once at the end */
  double *acc = calloc((size_t)(2 * d), sizeof *acc);
  if (!acc)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld doubles", fn, (long long)(2 * d));
  if (d <= LN_ROW) {
    float gam[LN_ROW];
    nn_load(gamma, wdt, 0, d, gam);
    const int nt = nn_threads(m * d);
    const size_t gs = ampc_dtype_size(gdt);
    /* dgamma, dbeta first (dx may be dy): each column summed over the rows
     * in order; columns in blocks of 64 shared among the threads */
    const int64_t nblk = (d + 63) / 64;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bk = 0; bk < nblk; bk++) {
      const int64_t j0 = bk * 64, len = d - j0 < 64 ? d - j0 : 64;
      float xb[64], gb[64];
      for (int64_t i = 0; i < m; i++) {
        const float *xr = nn_in(x, xdt, i * d + j0, len, xb);
        const float *gr = nn_in(dy, gdt, i * d + j0, len, gb);
        for (int64_t j = 0; j < len; j++) {
          const float xhat = (xr[j] - mean[i]) * rstd[i];
          acc[j0 + j] += (double)gr[j] * (double)xhat;
          acc[d + j0 + j] += (double)gr[j];
        }
      }
    }
    /* then dx, rows shared among the threads */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < m; i++) {
      float xb[LN_ROW], gb[LN_ROW], out[LN_ROW];
      const float *xr = nn_in(x, xdt, i * d, d, xb);
      const float *gr = nn_in(dy, gdt, i * d, d, gb);
      double sg = 0.0, sgx = 0.0;
      for (int64_t j = 0; j < d; j++) {
        const float xhat = (xr[j] - mean[i]) * rstd[i];
        const float gg = gr[j] * gam[j];
        sg += (double)gg;
        sgx += (double)gg * (double)xhat;
      }
      const float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
      for (int64_t j = 0; j < d; j++) {
        const float xhat = (xr[j] - mean[i]) * rstd[i];
        const float gg = gr[j] * gam[j];
        out[j] = rstd[i] * (gg - mg - xhat * mgx);
      }
      ampc_store_f32((char *)dx + i * d * (ptrdiff_t)gs, gdt, out, (size_t)d, NULL);
    }
  } else {
    nn_writer w;
    nn_writer_init(&w, dx, gdt, 0, NULL);
    for (int64_t i = 0; i < m; i++) {
      /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma */
      double sg = 0.0, sgx = 0.0;
      for (int64_t j = 0; j < d; j++) {
        const float xhat = (ampc_elem_load(x, xdt, i * d + j) - mean[i]) * rstd[i];
        const float g = ampc_elem_load(dy, gdt, i * d + j);
        const float gg = g * ampc_elem_load(gamma, wdt, j);
        sg += (double)gg;
        sgx += (double)gg * (double)xhat;
        acc[j] += (double)g * (double)xhat; /* dgamma */
        acc[d + j] += (double)g;            /* dbeta */
      }
      const float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
      for (int64_t j = 0; j < d; j++) {
        const float xhat = (ampc_elem_load(x, xdt, i * d + j) - mean[i]) * rstd[i];
        const float gg = ampc_elem_load(dy, gdt, i * d + j) * ampc_elem_load(gamma, wdt, j);
        nn_writer_put(&w, rstd[i] * (gg - mg - xhat * mgx));
      }
    }
    nn_writer_flush(&w);
  }
  for (int64_t j = 0; j < d; j++) {
    nn_grad_add(dgamma, gdt, j, (float)acc[j]);
    nn_grad_add(dbeta, gdt, j, (float)acc[d + j]);
  }
  free(acc);
  return AMPC_OK;
}
