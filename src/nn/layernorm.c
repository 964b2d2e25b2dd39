/*
 * src/nn/layernorm.c: layer normalisation over the last axis (Ba et al. 2016),
 * statistics in double, everything else in FP32, one rounding per store.
 */
#include "nn/nn_util.h"

#include <math.h>
#include <stdlib.h>

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
  for (int64_t j = 0; j < d; j++) {
    nn_grad_add(dgamma, gdt, j, (float)acc[j]);
    nn_grad_add(dbeta, gdt, j, (float)acc[d + j]);
  }
  free(acc);
  return AMPC_OK;
}
