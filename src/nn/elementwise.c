/*
 * src/nn/elementwise.c: GELU (erf form) and the residual add.
 */
#include "nn/nn_util.h"

#include <math.h>

#define AMPC_SQRT1_2 0.70710678118654752440f      /* 1/sqrt(2) */
#define AMPC_INV_SQRT_2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */

ampc_status ampc_gelu_forward(int64_t n, const void *x, ampc_dtype xdt, void *y, ampc_dtype ydt,
                              ampc_round_stats *stats) {
  const char *fn = "ampc_gelu_forward";
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, ydt);
  nn_writer w;
  nn_writer_init(&w, y, ydt, 0, stats);
  for (int64_t i = 0; i < n; i++) {
    const float v = ampc_elem_load(x, xdt, i);
    nn_writer_put(&w, 0.5f * v * (1.0f + erff(v * AMPC_SQRT1_2)));
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_gelu_backward(int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                               ampc_dtype xdt, void *dx) {
  const char *fn = "ampc_gelu_backward";
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, xdt);
  nn_writer w;
  nn_writer_init(&w, dx, gdt, 0, NULL);
  for (int64_t i = 0; i < n; i++) {
    const float v = ampc_elem_load(x, xdt, i);
    const float cdf = 0.5f * (1.0f + erff(v * AMPC_SQRT1_2));
    const float pdf = AMPC_INV_SQRT_2PI * expf(-0.5f * v * v);
    nn_writer_put(&w, ampc_elem_load(dy, gdt, i) * (cdf + v * pdf));
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_add_forward(int64_t n, const void *a, ampc_dtype adt, const void *b,
                             ampc_dtype bdt, void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_add_forward";
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, a);
  NN_CHECK_PTR(fn, b);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, adt);
  NN_CHECK_DT(fn, bdt);
  NN_CHECK_DT(fn, ydt);
  nn_writer w;
  nn_writer_init(&w, y, ydt, 0, stats);
  for (int64_t i = 0; i < n; i++)
    nn_writer_put(&w, ampc_elem_load(a, adt, i) + ampc_elem_load(b, bdt, i));
  nn_writer_flush(&w);
  return AMPC_OK;
}
