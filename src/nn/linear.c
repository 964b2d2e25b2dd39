/*
 * src/nn/linear.c: y = x W^T + b on ampc_gemm, and its backward pass.
 */
#include "nn/nn_util.h"

#include <stdlib.h>
#include <string.h>

enum { LIN_BIAS_ROW = 4096 }; /* widest bias laid by copying rows */

ampc_status ampc_linear_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                const void *w, ampc_dtype wdt, const void *b, void *y,
                                ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats) {
  const char *fn = "ampc_linear_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  /* With telemetry the product goes to an FP32 buffer first, so that the one
   * rounding into y can be counted; otherwise straight into y. The bias is
   * laid into the destination and added by the GEMM epilogue (beta = 1), in
   * FP32 before the rounding: exact as long as y's dtype holds the bias
   * (true when both are the preset's dtype, or y is F32). The bias row is
   * rounded once and copied into the other rows. */
  const ampc_dtype cdt = stats ? AMPC_F32 : ydt;
  void *c = stats ? malloc((size_t)(m * n) * sizeof(float)) : y;
  if (!c)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn, (long long)(m * n));
  if (b && n > LIN_BIAS_ROW) {
    /* the bias is not a result: laid uncounted by telemetry (the GEMM's
     * epilogue counts the sums it rounds) */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        ampc_elem_store_uncounted(c, cdt, i * n + j, ampc_elem_load(b, wdt, j));
  } else if (b) { /* the first row rounded once, then copied (the same bits) */
    float row[LIN_BIAS_ROW];
    const size_t rb = (size_t)n * ampc_dtype_size(cdt);
    nn_load(b, wdt, 0, n, row);
    ampc_convert(c, cdt, row, AMPC_F32, (size_t)n); /* same rounding, not counted */
    const int nt = nn_threads(m * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t i = 1; i < m; i++)
      memcpy((char *)c + (size_t)i * rb, c, rb);
  }
  ampc_status st = ampc_gemm(AMPC_OP_N, AMPC_OP_T, m, n, k, 1.0f, x, xdt, k, w, wdt, k,
                             b ? 1.0f : 0.0f, c, cdt, n, acc);
  if (st == AMPC_OK && stats)
    st = ampc_store_f32(y, ydt, c, (size_t)(m * n), stats);
  if (stats)
    free(c);
  return st;
}

ampc_status ampc_linear_backward(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                                 const void *x, ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                 void *dx, void *dw, void *db, ampc_acc acc, ampc_scratch *ws) {
  const char *fn = "ampc_linear_backward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, dw);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  ampc_status st = AMPC_OK;
  if (dx) /* dx [m, k] = dy [m, n] . W [n, k] */
    st = ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, w, wdt, k, 0.0f, dx, gdt, k,
                   acc);
  if (st == AMPC_OK) /* dW [n, k] += dy^T [n, m] . x [m, k] */
    st = ampc_gemm(AMPC_OP_T, AMPC_OP_N, n, k, m, 1.0f, dy, gdt, n, x, xdt, k, 1.0f, dw, gdt, k,
                   acc);
  if (st == AMPC_OK && db) { /* column sums in FP32 (rows in order), one rounding each */
    size_t off = 0;
    nn_buf sb;
    float *s = nn_take(ws, &off, (size_t)n * sizeof *s, &sb);
    if (!s)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn, (long long)n);
    memset(s, 0, (size_t)n * sizeof *s);
    /* columns in blocks of 64 shared among the threads, each summed over
     * the rows in order (the same bits for any thread count) */
    const int64_t nblk = (n + 63) / 64;
    const int nt = nn_threads(m * n);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bk = 0; bk < nblk; bk++) {
      ampc_tally_adopt(tally);
      const int64_t j0 = bk * 64, len = n - j0 < 64 ? n - j0 : 64;
      float row[64];
      float *restrict sj = s + j0;
      for (int64_t i = 0; i < m; i++) {
        const float *restrict r = nn_in(dy, gdt, i * n + j0, len, row);
        for (int64_t j = 0; j < len; j++)
          sj[j] += r[j];
      }
    }
    for (int64_t j = 0; j < n; j++)
      nn_grad_add(db, gdt, j, s[j]);
    nn_give(&sb);
  }
  return st;
}

size_t ampc_linear_backward_scratch_bytes(int64_t n) {
  return n > 0 ? nn_pad64((size_t)n * sizeof(float)) : 0;
}
