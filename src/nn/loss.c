/*
 * src/nn/loss.c: cross-entropy, binary cross-entropy with logits, symmetric
 * InfoNCE; all in FP32 (sums in double), backward seeded with the loss scale.
 */
#include "nn/nn_util.h"

#include <math.h>
#include <stdlib.h>

/* log(sum_j exp(v_j)) of a row (stride between elements `step`), max-shifted */
static double row_logsumexp(const void *x, ampc_dtype dt, int64_t base, int64_t n, int64_t step,
                            float scale) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    const float v = ampc_elem_load(x, dt, base + j * step) * scale;
    mx = v > mx ? v : mx;
  }
  double s = 0.0;
  for (int64_t j = 0; j < n; j++)
    s += (double)expf(ampc_elem_load(x, dt, base + j * step) * scale - mx);
  return (double)mx + log(s);
}

ampc_status ampc_cross_entropy_forward(int64_t m, int64_t c, const void *logits, ampc_dtype xdt,
                                       const int32_t *target, float *loss) {
  const char *fn = "ampc_cross_entropy_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, c);
  NN_CHECK_PTR(fn, logits);
  NN_CHECK_PTR(fn, target);
  NN_CHECK_PTR(fn, loss);
  NN_CHECK_DT(fn, xdt);
  for (int64_t i = 0; i < m; i++)
    if (target[i] < 0 || target[i] >= c)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: target[%lld] = %d is outside [0, %lld)", fn,
                       (long long)i, (int)target[i], (long long)c);
  double s = 0.0;
  for (int64_t i = 0; i < m; i++)
    s += row_logsumexp(logits, xdt, i * c, c, 1, 1.0f) -
         (double)ampc_elem_load(logits, xdt, i * c + target[i]);
  *loss = (float)(s / (double)m);
  return AMPC_OK;
}

ampc_status ampc_cross_entropy_backward(int64_t m, int64_t c, const void *logits, ampc_dtype xdt,
                                        const int32_t *target, float loss_scale, void *dlogits,
                                        ampc_dtype gdt) {
  const char *fn = "ampc_cross_entropy_backward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, c);
  NN_CHECK_PTR(fn, logits);
  NN_CHECK_PTR(fn, target);
  NN_CHECK_PTR(fn, dlogits);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, gdt);
  for (int64_t i = 0; i < m; i++)
    if (target[i] < 0 || target[i] >= c)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: target[%lld] = %d is outside [0, %lld)", fn,
                       (long long)i, (int)target[i], (long long)c);
  const float g = loss_scale / (float)m; /* exact for powers of two */
  nn_writer w;
  nn_writer_init(&w, dlogits, gdt, 0, NULL);
  for (int64_t i = 0; i < m; i++) {
    const float lse = (float)row_logsumexp(logits, xdt, i * c, c, 1, 1.0f);
    for (int64_t j = 0; j < c; j++) {
      const float p = expf(ampc_elem_load(logits, xdt, i * c + j) - lse);
      nn_writer_put(&w, g * (p - (j == target[i] ? 1.0f : 0.0f)));
    }
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_bce_logits_forward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                    float *loss) {
  const char *fn = "ampc_bce_logits_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, t);
  NN_CHECK_PTR(fn, loss);
  NN_CHECK_DT(fn, xdt);
  double s = 0.0;
  for (int64_t i = 0; i < m; i++) {
    const float v = ampc_elem_load(x, xdt, i);
    /* max(v, 0) - v t + log(1 + exp(-|v|)) */
    s += (double)(fmaxf(v, 0.0f) - v * t[i]) + log1p(exp(-fabs((double)v)));
  }
  *loss = (float)(s / (double)m);
  return AMPC_OK;
}

ampc_status ampc_bce_logits_backward(int64_t m, const void *x, ampc_dtype xdt, const float *t,
                                     float loss_scale, void *dx, ampc_dtype gdt) {
  const char *fn = "ampc_bce_logits_backward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, t);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, gdt);
  const float g = loss_scale / (float)m;
  nn_writer w;
  nn_writer_init(&w, dx, gdt, 0, NULL);
  for (int64_t i = 0; i < m; i++) {
    const float v = ampc_elem_load(x, xdt, i);
    /* sigmoid without overflow for either sign */
    const float e = expf(-fabsf(v));
    const float sig = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    nn_writer_put(&w, g * (sig - t[i]));
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_infonce_forward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                 float *loss) {
  const char *fn = "ampc_infonce_forward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_PTR(fn, sim);
  NN_CHECK_PTR(fn, loss);
  NN_CHECK_DT(fn, xdt);
  const float scale = expf(log_temp);
  double s = 0.0;
  for (int64_t i = 0; i < b; i++) {
    const double diag = (double)(ampc_elem_load(sim, xdt, i * b + i) * scale);
    s += row_logsumexp(sim, xdt, i * b, b, 1, scale) - diag; /* image i -> texts */
    s += row_logsumexp(sim, xdt, i, b, b, scale) - diag;     /* text i -> images */
  }
  *loss = (float)(s / (2.0 * (double)b));
  return AMPC_OK;
}

ampc_status ampc_infonce_backward(int64_t b, const void *sim, ampc_dtype xdt, float log_temp,
                                  float loss_scale, void *dsim, ampc_dtype gdt, float *dlog_temp,
                                  ampc_scratch *ws) {
  const char *fn = "ampc_infonce_backward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_PTR(fn, sim);
  NN_CHECK_PTR(fn, dsim);
  NN_CHECK_PTR(fn, dlog_temp);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, gdt);
  const float scale = expf(log_temp);
  /* d loss / d logit_ij = (P_ij + Q_ij - 2 [i == j]) / (2b), with P the row
   * softmax and Q the column softmax; logit = scale * sim, so
   * d/dsim = scale * that and d/dlog_temp = sum_ij that * logit_ij */
  size_t off = 0;
  nn_buf lb;
  float *lse = nn_take(ws, &off, (size_t)(2 * b) * sizeof *lse, &lb); /* row, then column lse */
  if (!lse)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn, (long long)(2 * b));
  for (int64_t i = 0; i < b; i++) {
    lse[i] = (float)row_logsumexp(sim, xdt, i * b, b, 1, scale);
    lse[b + i] = (float)row_logsumexp(sim, xdt, i, b, b, scale);
  }
  double dt = 0.0;
  nn_writer w;
  nn_writer_init(&w, dsim, gdt, 0, NULL);
  for (int64_t i = 0; i < b; i++) {
    for (int64_t j = 0; j < b; j++) {
      const float logit = ampc_elem_load(sim, xdt, i * b + j) * scale;
      const float g = (expf(logit - lse[i]) + expf(logit - lse[b + j]) - (i == j ? 2.0f : 0.0f)) /
                      (2.0f * (float)b);
      dt += (double)g * (double)logit;
      nn_writer_put(&w, loss_scale * scale * g);
    }
  }
  nn_give(&lb);
  nn_writer_flush(&w);
  *dlog_temp += (float)((double)loss_scale * dt);
  return AMPC_OK;
}

size_t ampc_infonce_backward_scratch_bytes(int64_t b) {
  return b > 0 ? nn_pad64((size_t)(2 * b) * sizeof(float)) : 0;
}

ampc_status ampc_infonce_rows_forward(int64_t m, int64_t n, const void *sim, ampc_dtype xdt,
                                      float log_temp, int64_t label0, double *sum) {
  const char *fn = "ampc_infonce_rows_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, sim);
  NN_CHECK_PTR(fn, sum);
  NN_CHECK_DT(fn, xdt);
  if (label0 < 0 || label0 + m > n)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: labels %lld..%lld outside the %lld columns", fn,
                     (long long)label0, (long long)(label0 + m - 1), (long long)n);
  const float scale = expf(log_temp);
  double s = 0.0;
  for (int64_t i = 0; i < m; i++) {
    const double diag = (double)(ampc_elem_load(sim, xdt, i * n + label0 + i) * scale);
    s += row_logsumexp(sim, xdt, i * n, n, 1, scale) - diag;
  }
  *sum = s;
  return AMPC_OK;
}

ampc_status ampc_infonce_rows_backward(int64_t m, int64_t n, const void *sim, ampc_dtype xdt,
                                       float log_temp, int64_t label0, float coef, void *dsim,
                                       ampc_dtype gdt, float *dlog_temp, ampc_scratch *ws) {
  const char *fn = "ampc_infonce_rows_backward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, sim);
  NN_CHECK_PTR(fn, dsim);
  NN_CHECK_PTR(fn, dlog_temp);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, gdt);
  if (label0 < 0 || label0 + m > n)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: labels %lld..%lld outside the %lld columns", fn,
                     (long long)label0, (long long)(label0 + m - 1), (long long)n);
  const float scale = expf(log_temp);
  size_t off = 0;
  nn_buf lb;
  float *lse = nn_take(ws, &off, (size_t)m * sizeof *lse, &lb);
  if (!lse)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn, (long long)m);
  for (int64_t i = 0; i < m; i++)
    lse[i] = (float)row_logsumexp(sim, xdt, i * n, n, 1, scale);
  /* d sum / d logit_ij = softmax_ij - [j == label0 + i]; times coef */
  double dt = 0.0;
  nn_writer w;
  nn_writer_init(&w, dsim, gdt, 0, NULL);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      const float logit = ampc_elem_load(sim, xdt, i * n + j) * scale;
      const float g = coef * (expf(logit - lse[i]) - (j == label0 + i ? 1.0f : 0.0f));
      dt += (double)g * (double)logit;
      nn_writer_put(&w, scale * g);
    }
  nn_give(&lb);
  nn_writer_flush(&w);
  *dlog_temp += (float)dt;
  return AMPC_OK;
}

size_t ampc_infonce_rows_backward_scratch_bytes(int64_t m) {
  return m > 0 ? nn_pad64((size_t)m * sizeof(float)) : 0;
}
