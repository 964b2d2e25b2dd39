/*
 * src/nn/elementwise.c: GELU (erf form) and the residual add.
 *
 * Each works on chunks of AMPC_NN_CHUNK elements: the inputs are widened with
 * ampc_convert (vector code), the FP32 formula is applied element by element,
 * and the chunk is rounded once with ampc_store_f32. Chunks are independent,
 * so they are shared among ampc's threads (without round stats: those are
 * accumulated in one struct); the results are the same bits either way.
 */
#include "nn/nn_util.h"

#include <math.h>
#include <stddef.h>

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
  const int nt = stats ? 1 : nn_threads(n);
  const size_t ys = ampc_dtype_size(ydt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c0 = 0; c0 < n; c0 += AMPC_NN_CHUNK) {
    float b[AMPC_NN_CHUNK];
    const int64_t len = n - c0 < AMPC_NN_CHUNK ? n - c0 : AMPC_NN_CHUNK;
    nn_load(x, xdt, c0, len, b);
    for (int64_t i = 0; i < len; i++) {
      const float v = b[i];
      b[i] = 0.5f * v * (1.0f + erff(v * AMPC_SQRT1_2));
    }
    ampc_store_f32((char *)y + c0 * (ptrdiff_t)ys, ydt, b, (size_t)len, stats);
  }
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
  const int nt = nn_threads(n);
  const size_t gs = ampc_dtype_size(gdt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c0 = 0; c0 < n; c0 += AMPC_NN_CHUNK) {
    float xb[AMPC_NN_CHUNK], gb[AMPC_NN_CHUNK];
    const int64_t len = n - c0 < AMPC_NN_CHUNK ? n - c0 : AMPC_NN_CHUNK;
    nn_load(x, xdt, c0, len, xb);
    nn_load(dy, gdt, c0, len, gb);
    for (int64_t i = 0; i < len; i++) {
      const float v = xb[i];
      const float cdf = 0.5f * (1.0f + erff(v * AMPC_SQRT1_2));
      const float pdf = AMPC_INV_SQRT_2PI * expf(-0.5f * v * v);
      gb[i] = gb[i] * (cdf + v * pdf);
    }
    ampc_store_f32((char *)dx + c0 * (ptrdiff_t)gs, gdt, gb, (size_t)len, NULL);
  }
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
  const int nt = stats ? 1 : nn_threads(n);
  const size_t ys = ampc_dtype_size(ydt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c0 = 0; c0 < n; c0 += AMPC_NN_CHUNK) {
    float ab[AMPC_NN_CHUNK], bb[AMPC_NN_CHUNK];
    const int64_t len = n - c0 < AMPC_NN_CHUNK ? n - c0 : AMPC_NN_CHUNK;
    nn_load(a, adt, c0, len, ab);
    nn_load(b, bdt, c0, len, bb);
    for (int64_t i = 0; i < len; i++)
      ab[i] = ab[i] + bb[i];
    ampc_store_f32((char *)y + c0 * (ptrdiff_t)ys, ydt, ab, (size_t)len, stats);
  }
  return AMPC_OK;
}
