/*
 * src/nn/softmax.c: row softmax with scale and key-padding mask, in FP32;
 * the exponentials are evaluated in double and rounded once (ampc_exp32:
 * the correctly rounded expf up to ~1e-16 relative ties, on every path).
 *
 * Rows up to SM_ROW wide: the row is widened once (ampc_convert's vector
 * code, or read in place when FP32), each exponential is computed once and
 * kept for the normalisation, and the rows are shared among ampc's threads
 * (without round stats). The values and their order of summation are those of
 * the element-wise loops kept for wider rows, so the bits are the same.
 */
#include "nn/nn_util.h"

#include "nn/gelu_impl.h"

#include <math.h>
#include <stddef.h>

enum { SM_ROW = 2048 };

ampc_status ampc_softmax_forward(int64_t m, int64_t n, const void *x, ampc_dtype xdt, float scale,
                                 const uint8_t *key_mask, int64_t rows_per_mask, void *y,
                                 ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_softmax_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, ydt);
  if (key_mask)
    NN_CHECK_POS(fn, rows_per_mask);
  if (n <= SM_ROW) {
    const int nt = stats ? 1 : nn_threads(m * n);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < m; i++) {
      ampc_tally_adopt(tally);
      float xb[SM_ROW], eb[SM_ROW];
      const float *xr = nn_in(x, xdt, i * n, n, xb);
      float *e = nn_out(y, ydt, i * n, eb, stats);
      const uint8_t *mk = key_mask ? key_mask + (i / rows_per_mask) * n : NULL;
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; j++)
        if (!mk || mk[j]) {
          const float v = xr[j] * scale;
          mx = v > mx ? v : mx;
        }
      if (mx == -INFINITY) {
        for (int64_t j = 0; j < n; j++)
          e[j] = 0.0f;
      } else {
        for (int64_t j = 0; j < n; j++) /* masked keys: exp(-inf) = 0 */
          e[j] = (!mk || mk[j]) ? xr[j] * scale - mx : -INFINITY;
        ampc_exp32(e, e, (size_t)n);
        float s = 0.0f;
        for (int64_t j = 0; j < n; j++)
          if (!mk || mk[j])
            s += e[j];
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < n; j++)
          e[j] = e[j] * inv;
      }
      nn_out_done(y, ydt, i * n, e, n, stats);
    }
    return AMPC_OK;
  }
  nn_writer w;
  nn_writer_init(&w, y, ydt, 0, stats);
  for (int64_t i = 0; i < m; i++) {
    const uint8_t *mk = key_mask ? key_mask + (i / rows_per_mask) * n : NULL;
    /* the maximum over unmasked entries; masked ones are skipped, never
     * replaced by a sentinel that could overflow a 16-bit type */
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++)
      if (!mk || mk[j]) {
        const float v = ampc_elem_load(x, xdt, i * n + j) * scale;
        mx = v > mx ? v : mx;
      }
    if (mx == -INFINITY) { /* every key masked (or all -inf): zeros, not NaN */
      for (int64_t j = 0; j < n; j++)
        nn_writer_put(&w, 0.0f);
      continue;
    }
    float s = 0.0f;
    for (int64_t j = 0; j < n; j++)
      if (!mk || mk[j])
        s += ampc_exp1(ampc_elem_load(x, xdt, i * n + j) * scale - mx);
    const float inv = 1.0f / s;
    for (int64_t j = 0; j < n; j++) {
      const float e =
          (!mk || mk[j]) ? ampc_exp1(ampc_elem_load(x, xdt, i * n + j) * scale - mx) : 0.0f;
      nn_writer_put(&w, e * inv);
    }
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_softmax_backward(int64_t m, int64_t n, const void *dy, ampc_dtype gdt,
                                  const void *y, ampc_dtype ydt, float scale, void *dx) {
  const char *fn = "ampc_softmax_backward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, ydt);
  if (n <= SM_ROW) {
    const int nt = nn_threads(m * n);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < m; i++) {
      ampc_tally_adopt(tally);
      float gb[SM_ROW], yb[SM_ROW], ob[SM_ROW];
      const float *gr = nn_in(dy, gdt, i * n, n, gb), *yr = nn_in(y, ydt, i * n, n, yb);
      float *out = nn_out(dx, gdt, i * n, ob, NULL);
      float dot = 0.0f;
      for (int64_t j = 0; j < n; j++)
        dot += gr[j] * yr[j];
      for (int64_t j = 0; j < n; j++)
        out[j] = scale * yr[j] * (gr[j] - dot);
      nn_out_done(dx, gdt, i * n, out, n, NULL);
    }
    return AMPC_OK;
  }
  nn_writer w;
  nn_writer_init(&w, dx, gdt, 0, NULL);
  for (int64_t i = 0; i < m; i++) {
    float dot = 0.0f;
    for (int64_t j = 0; j < n; j++)
      dot += ampc_elem_load(dy, gdt, i * n + j) * ampc_elem_load(y, ydt, i * n + j);
    for (int64_t j = 0; j < n; j++)
      nn_writer_put(&w, scale * ampc_elem_load(y, ydt, i * n + j) *
                            (ampc_elem_load(dy, gdt, i * n + j) - dot));
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}
