/*
 * src/nn/rows.c: the row operations a model needs between its layers: the
 * ViT input (class token and position embeddings), gather, scatter and
 * scatter-add of rows, FP32 gradient accumulation and the row argmax. Semantics in
 * include/ampc/nn.h. Every sum is FP32 of exactly widened values, rounded
 * once into its output; stores into 16-bit buffers go through
 * ampc_store_f32, so the rounding tally counts them.
 */
#include <math.h>
#include <string.h>

#include "nn/nn_util.h"

static inline char *row_at(const void *p, ampc_dtype dt, int64_t i) {
  return (char *)p + i * (int64_t)ampc_dtype_size(dt);
}

ampc_status ampc_vit_tokens_forward(int64_t b, int64_t np, int64_t d, const void *patches,
                                    ampc_dtype pdt, const void *cls, const void *pos,
                                    ampc_dtype wdt, void *y, ampc_dtype ydt) {
  static const char fn[] = "ampc_vit_tokens_forward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, d);
  if (np < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: np must not be negative (got %lld)", fn,
                     (long long)np);
  NN_CHECK_PTR(fn, cls);
  NN_CHECK_PTR(fn, pos);
  NN_CHECK_PTR(fn, y);
  if (np > 0)
    NN_CHECK_PTR(fn, patches);
  NN_CHECK_DT(fn, pdt);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  const int64_t nt = np + 1;
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t t = 0; t < nt; t++)
      for (int64_t j0 = 0; j0 < d; j0 += AMPC_NN_CHUNK) {
        const int64_t len = d - j0 < AMPC_NN_CHUNK ? d - j0 : AMPC_NN_CHUNK;
        float sb[AMPC_NN_CHUNK], pb[AMPC_NN_CHUNK], ob[AMPC_NN_CHUNK];
        const float *s = t == 0 ? nn_in(cls, wdt, j0, len, sb)
                                : nn_in(patches, pdt, (bi * np + t - 1) * d + j0, len, sb);
        const float *p = nn_in(pos, wdt, t * d + j0, len, pb);
        const int64_t off = (bi * nt + t) * d + j0;
        float *o = nn_out(y, ydt, off, ob, NULL);
        for (int64_t j = 0; j < len; j++)
          o[j] = s[j] + p[j];
        nn_out_done(y, ydt, off, o, len, NULL);
      }
  return AMPC_OK;
}

ampc_status ampc_vit_tokens_backward(int64_t b, int64_t np, int64_t d, const void *dy,
                                     ampc_dtype gdt, void *dpatches, void *dcls, void *dpos) {
  static const char fn[] = "ampc_vit_tokens_backward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, d);
  if (np < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: np must not be negative (got %lld)", fn,
                     (long long)np);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_DT(fn, gdt);
  const int64_t nt = np + 1, row = nt * d;
  /* the batch sum per position, a chunk of columns at a time; its first row
   * (position 0) is also the class token's gradient */
  for (int64_t k0 = 0; k0 < row; k0 += AMPC_NN_CHUNK) {
    const int64_t len = row - k0 < AMPC_NN_CHUNK ? row - k0 : AMPC_NN_CHUNK;
    float s[AMPC_NN_CHUNK] = {0}, xb[AMPC_NN_CHUNK];
    for (int64_t bi = 0; bi < b; bi++) {
      const float *x = nn_in(dy, gdt, bi * row + k0, len, xb);
      for (int64_t j = 0; j < len; j++)
        s[j] += x[j];
    }
    if (dpos)
      AMPC_TRY(ampc_grad_add_f32(len, s, row_at(dpos, gdt, k0), gdt));
    if (dcls && k0 < d)
      AMPC_TRY(ampc_grad_add_f32((d - k0 < len ? d - k0 : len), s, row_at(dcls, gdt, k0), gdt));
  }
  if (dpatches && np > 0) {
    const size_t bytes = (size_t)(np * d) * ampc_dtype_size(gdt);
    for (int64_t bi = 0; bi < b; bi++)
      memmove(row_at(dpatches, gdt, bi * np * d), row_at(dy, gdt, bi * row + d), bytes);
  }
  return AMPC_OK;
}

ampc_status ampc_grad_add_f32(int64_t n, const float *v, void *g, ampc_dtype gdt) {
  static const char fn[] = "ampc_grad_add_f32";
  if (n < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: n must not be negative (got %lld)", fn,
                     (long long)n);
  if (n == 0)
    return AMPC_OK;
  NN_CHECK_PTR(fn, v);
  NN_CHECK_PTR(fn, g);
  NN_CHECK_DT(fn, gdt);
  for (int64_t i = 0; i < n; i++)
    ampc_elem_store(g, gdt, i, ampc_elem_load(g, gdt, i) + v[i]);
  return AMPC_OK;
}

ampc_status ampc_gather_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows, const void *x,
                             ampc_dtype xdt, void *y, ampc_dtype ydt) {
  static const char fn[] = "ampc_gather_rows";
  if (n < 0 || d < 1 || rows < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad shape (n %lld, d %lld, rows %lld)", fn,
                     (long long)n, (long long)d, (long long)rows);
  NN_CHECK_PTR(fn, idx);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, ydt);
  for (int64_t r = 0; r < n; r++)
    if (idx[r] < 0 || idx[r] >= rows)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: idx[%lld] = %d outside [0, %lld)", fn,
                       (long long)r, idx[r], (long long)rows);
  for (int64_t r = 0; r < n; r++)
    AMPC_TRY(ampc_convert(row_at(y, ydt, r * d), ydt, row_at(x, xdt, (int64_t)idx[r] * d), xdt,
                          (size_t)d));
  return AMPC_OK;
}

ampc_status ampc_scatter_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows, const void *x,
                              ampc_dtype dt, void *y) {
  static const char fn[] = "ampc_scatter_rows";
  if (n < 0 || d < 1 || rows < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad shape (n %lld, d %lld, rows %lld)", fn,
                     (long long)n, (long long)d, (long long)rows);
  if (n == 0)
    return AMPC_OK;
  NN_CHECK_PTR(fn, idx);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, dt);
  for (int64_t r = 0; r < n; r++)
    if (idx[r] < 0 || idx[r] >= rows)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: idx[%lld] = %d outside [0, %lld)", fn,
                       (long long)r, idx[r], (long long)rows);
  const size_t bytes = (size_t)d * ampc_dtype_size(dt);
  for (int64_t r = 0; r < n; r++)
    memcpy(row_at(y, dt, (int64_t)idx[r] * d), row_at(x, dt, r * d), bytes);
  return AMPC_OK;
}

ampc_status ampc_scatter_add_rows(int64_t n, int64_t d, const int32_t *idx, int64_t rows,
                                  const void *x, ampc_dtype xdt, const void *x2, ampc_dtype x2dt,
                                  float *y, int64_t ldy) {
  static const char fn[] = "ampc_scatter_add_rows";
  if (n < 0 || d < 1 || rows < 1 || ldy < d)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad shape (n %lld, d %lld, rows %lld, ldy %lld)",
                     fn, (long long)n, (long long)d, (long long)rows, (long long)ldy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  if (x2)
    NN_CHECK_DT(fn, x2dt);
  for (int64_t r = 0; r < n; r++) {
    const int64_t to = idx ? idx[r] : r;
    if (to < 0 || to >= rows)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: row %lld goes to %lld, outside [0, %lld)", fn,
                       (long long)r, (long long)to, (long long)rows);
  }
  for (int64_t r = 0; r < n; r++) {
    float *yr = y + (idx ? idx[r] : r) * ldy;
    for (int64_t j0 = 0; j0 < d; j0 += AMPC_NN_CHUNK) {
      const int64_t len = d - j0 < AMPC_NN_CHUNK ? d - j0 : AMPC_NN_CHUNK;
      float ab[AMPC_NN_CHUNK], bb[AMPC_NN_CHUNK];
      const float *a = nn_in(x, xdt, r * d + j0, len, ab);
      if (x2) {
        const float *c = nn_in(x2, x2dt, r * d + j0, len, bb);
        for (int64_t j = 0; j < len; j++)
          yr[j0 + j] += a[j] + c[j];
      } else {
        for (int64_t j = 0; j < len; j++)
          yr[j0 + j] += a[j];
      }
    }
  }
  return AMPC_OK;
}

ampc_status ampc_argmax_rows(int64_t m, int64_t n, const void *x, ampc_dtype xdt, bool skip_diag,
                             int32_t *idx) {
  static const char fn[] = "ampc_argmax_rows";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, idx);
  NN_CHECK_DT(fn, xdt);
  if (skip_diag && n < 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: skipping the diagonal needs n >= 2 (got %lld)", fn,
                     (long long)n);
  for (int64_t i = 0; i < m; i++) {
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t k = 0; k < n; k++) {
      if (skip_diag && k == i)
        continue;
      const float v = ampc_elem_load(x, xdt, i * n + k);
      if (isnan(v)) {
        best = -1;
        break;
      }
      if (best < 0 || v > bv)
        best = k, bv = v;
    }
    idx[i] = (int32_t)best;
  }
  return AMPC_OK;
}
