/*
 * src/nn/embed.c: token + position embedding, patch embedding, masked mean
 * pooling and L2 normalisation.
 */
#include "nn/nn_util.h"

#include <math.h>
#include <stdlib.h>

static ampc_status check_ids(const char *fn, const int32_t *ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ids[%lld] = %d is outside [0, %lld)", fn,
                       (long long)i, (int)ids[i], (long long)vocab);
  return AMPC_OK;
}

ampc_status ampc_embedding_forward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                   int64_t vocab, const void *tok, const void *pos, ampc_dtype wdt,
                                   void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_embedding_forward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, t);
  NN_CHECK_POS(fn, d);
  NN_CHECK_POS(fn, vocab);
  NN_CHECK_PTR(fn, ids);
  NN_CHECK_PTR(fn, tok);
  NN_CHECK_PTR(fn, pos);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  ampc_status st = check_ids(fn, ids, b * t, vocab);
  if (st != AMPC_OK)
    return st;
  nn_writer w;
  nn_writer_init(&w, y, ydt, 0, stats);
  for (int64_t r = 0; r < b * t; r++) {
    const int64_t id = ids[r], tp = r % t;
    for (int64_t j = 0; j < d; j++)
      nn_writer_put(&w,
                    ampc_elem_load(tok, wdt, id * d + j) + ampc_elem_load(pos, wdt, tp * d + j));
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

/* order (id, row) pairs by id, then row (so the sums run in row order) */
static int cmp_pair(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

ampc_status ampc_embedding_backward(int64_t b, int64_t t, int64_t d, const int32_t *ids,
                                    int64_t vocab, const void *dy, ampc_dtype gdt, void *dtok,
                                    void *dpos, ampc_round_stats *stats, ampc_scratch *ws) {
  const char *fn = "ampc_embedding_backward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, t);
  NN_CHECK_POS(fn, d);
  NN_CHECK_POS(fn, vocab);
  NN_CHECK_PTR(fn, ids);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, dtok);
  NN_CHECK_DT(fn, gdt);
  ampc_status st = check_ids(fn, ids, b * t, vocab);
  if (st != AMPC_OK)
    return st;
  const int64_t n = b * t;
  /* (id, row) pairs sorted by id: each id's rows are then contiguous */
  size_t off = 0;
  nn_buf pb, sb;
  int64_t *pairs = nn_take(ws, &off, (size_t)n * 2 * sizeof *pairs, &pb);
  float *sum = nn_take(ws, &off, (size_t)d * sizeof *sum, &sb);
  if (!pairs || !sum) {
    nn_give(&pb);
    nn_give(&sb);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate workspace", fn);
  }
  for (int64_t r = 0; r < n; r++)
    pairs[2 * r] = ids[r], pairs[2 * r + 1] = r;
  qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_pair);
  for (int64_t s = 0; s < n;) {
    const int64_t id = pairs[2 * s];
    for (int64_t j = 0; j < d; j++)
      sum[j] = 0.0f;
    int64_t e = s;
    for (; e < n && pairs[2 * e] == id; e++)
      for (int64_t j = 0; j < d; j++)
        sum[j] += ampc_elem_load(dy, gdt, pairs[2 * e + 1] * d + j);
    for (int64_t j = 0; j < d; j++)
      sum[j] += ampc_elem_load(dtok, gdt, id * d + j);
    ampc_store_f32((char *)dtok + id * d * (int64_t)ampc_dtype_size(gdt), gdt, sum, (size_t)d,
                   stats);
    s = e;
  }
  if (dpos) {
    for (int64_t tp = 0; tp < t; tp++) {
      for (int64_t j = 0; j < d; j++) {
        float acc = ampc_elem_load(dpos, gdt, tp * d + j);
        float bsum = 0.0f;
        for (int64_t bi = 0; bi < b; bi++)
          bsum += ampc_elem_load(dy, gdt, (bi * t + tp) * d + j);
        sum[j] = acc + bsum;
      }
      ampc_store_f32((char *)dpos + tp * d * (int64_t)ampc_dtype_size(gdt), gdt, sum, (size_t)d,
                     NULL);
    }
  }
  nn_give(&pb);
  nn_give(&sb);
  return AMPC_OK;
}

/* Unfold images into patch rows [b*N, c*p*p] of dtype wdt, taken from ws at
 * *off (or allocated: *ob says which). */
static void *unfold(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p, const uint8_t *images,
                    float sc, float sh, ampc_dtype wdt, ampc_scratch *ws, size_t *off, nn_buf *ob) {
  const int64_t np = (hh / p) * (ww / p), k = c * p * p;
  void *out = nn_take(ws, off, (size_t)(b * np * k) * ampc_dtype_size(wdt), ob);
  if (!out)
    return NULL;
  nn_buf rb; /* one patch in FP32, rounded once per row */
  float *row = nn_take(ws, off, (size_t)k * sizeof *row, &rb);
  if (!row) {
    nn_give(ob);
    return NULL;
  }
  const size_t os = ampc_dtype_size(wdt);
  int64_t r = 0;
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t py = 0; py < hh / p; py++)
      for (int64_t px = 0; px < ww / p; px++, r++) {
        int64_t col = 0;
        for (int64_t ch = 0; ch < c; ch++)
          for (int64_t dy = 0; dy < p; dy++)
            for (int64_t dx = 0; dx < p; dx++, col++) {
              const int64_t yy = py * p + dy, xx = px * p + dx;
              row[col] = (float)images[((bi * hh + yy) * ww + xx) * c + ch] * sc + sh;
            }
        ampc_store_f32((char *)out + r * k * (int64_t)os, wdt, row, (size_t)k, NULL);
      }
  nn_give(&rb);
  return out;
}

size_t ampc_patch_embed_scratch_bytes(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                      int64_t d, ampc_dtype wdt) {
  if (b < 1 || p < 1 || c < 1)
    return 0;
  const int64_t np = (hh / p) * (ww / p), k = c * p * p;
  return nn_pad64((size_t)(b * np * k) * ampc_dtype_size(wdt)) +
         nn_pad64((size_t)k * sizeof(float)) + ampc_linear_backward_scratch_bytes(d);
}

static ampc_status patch_check(const char *fn, int64_t b, int64_t hh, int64_t ww, int64_t c,
                               int64_t p, int64_t d, const uint8_t *images) {
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, hh);
  NN_CHECK_POS(fn, ww);
  NN_CHECK_POS(fn, c);
  NN_CHECK_POS(fn, p);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, images);
  if (hh % p || ww % p)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: image %lld x %lld is not a multiple of patch %lld",
                     fn, (long long)hh, (long long)ww, (long long)p);
  return AMPC_OK;
}

ampc_status ampc_patch_embed_forward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                     int64_t d, const uint8_t *images, float px_scale,
                                     float px_shift, const void *w, ampc_dtype wdt,
                                     const void *bias, void *y, ampc_dtype ydt, ampc_acc acc,
                                     ampc_round_stats *stats, ampc_scratch *ws) {
  const char *fn = "ampc_patch_embed_forward";
  ampc_status st = patch_check(fn, b, hh, ww, c, p, d, images);
  if (st != AMPC_OK)
    return st;
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  size_t off = 0;
  nn_buf pb;
  void *patches = unfold(b, hh, ww, c, p, images, px_scale, px_shift, wdt, ws, &off, &pb);
  if (!patches)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the patch matrix", fn);
  st = ampc_linear_forward(b * (hh / p) * (ww / p), c * p * p, d, patches, wdt, w, wdt, bias, y,
                           ydt, acc, stats);
  nn_give(&pb);
  return st;
}

ampc_status ampc_patch_embed_backward(int64_t b, int64_t hh, int64_t ww, int64_t c, int64_t p,
                                      int64_t d, const uint8_t *images, float px_scale,
                                      float px_shift, ampc_dtype wdt, const void *dy,
                                      ampc_dtype gdt, void *dw, void *dbias, ampc_acc acc,
                                      ampc_scratch *ws) {
  const char *fn = "ampc_patch_embed_backward";
  ampc_status st = patch_check(fn, b, hh, ww, c, p, d, images);
  if (st != AMPC_OK)
    return st;
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, dw);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, gdt);
  size_t off = 0;
  nn_buf pb;
  void *patches = unfold(b, hh, ww, c, p, images, px_scale, px_shift, wdt, ws, &off, &pb);
  if (!patches)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the patch matrix", fn);
  /* the linear backward with no input gradient; W is not read then */
  ampc_scratch rest = nn_rest(ws, off); /* after the patches and the row */
  st = ampc_linear_backward(b * (hh / p) * (ww / p), c * p * p, d, dy, gdt, patches, wdt, patches,
                            wdt, NULL, dw, dbias, acc, &rest);
  nn_give(&pb);
  return st;
}

ampc_status ampc_mean_pool_forward(int64_t b, int64_t t, int64_t d, const void *x, ampc_dtype xdt,
                                   const uint8_t *mask, void *y, ampc_dtype ydt,
                                   ampc_round_stats *stats) {
  const char *fn = "ampc_mean_pool_forward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, t);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, ydt);
  nn_writer w;
  nn_writer_init(&w, y, ydt, 0, stats);
  for (int64_t bi = 0; bi < b; bi++) {
    int64_t cnt = 0;
    for (int64_t ti = 0; ti < t; ti++)
      cnt += !mask || mask[bi * t + ti];
    for (int64_t j = 0; j < d; j++) {
      float s = 0.0f;
      for (int64_t ti = 0; ti < t; ti++)
        if (!mask || mask[bi * t + ti])
          s += ampc_elem_load(x, xdt, (bi * t + ti) * d + j);
      nn_writer_put(&w, cnt ? s / (float)cnt : 0.0f);
    }
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_mean_pool_backward(int64_t b, int64_t t, int64_t d, const void *dy, ampc_dtype gdt,
                                    const uint8_t *mask, void *dx) {
  const char *fn = "ampc_mean_pool_backward";
  NN_CHECK_POS(fn, b);
  NN_CHECK_POS(fn, t);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_DT(fn, gdt);
  nn_writer w;
  nn_writer_init(&w, dx, gdt, 0, NULL);
  for (int64_t bi = 0; bi < b; bi++) {
    int64_t cnt = 0;
    for (int64_t ti = 0; ti < t; ti++)
      cnt += !mask || mask[bi * t + ti];
    for (int64_t ti = 0; ti < t; ti++) {
      const int on = !mask || mask[bi * t + ti];
      for (int64_t j = 0; j < d; j++)
        nn_writer_put(&w, on && cnt ? ampc_elem_load(dy, gdt, bi * d + j) / (float)cnt : 0.0f);
    }
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

static double row_norm(const void *x, ampc_dtype dt, int64_t base, int64_t d) {
  double s = 0.0;
  for (int64_t j = 0; j < d; j++) {
    const double v = (double)ampc_elem_load(x, dt, base + j);
    s += v * v;
  }
  return sqrt(s);
}

ampc_status ampc_l2norm_forward(int64_t m, int64_t d, const void *x, ampc_dtype xdt, float eps,
                                void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_l2norm_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, ydt);
  nn_writer w;
  nn_writer_init(&w, y, ydt, 0, stats);
  for (int64_t i = 0; i < m; i++) {
    const double nrm = fmax(row_norm(x, xdt, i * d, d), (double)eps);
    const float inv = (float)(1.0 / nrm);
    for (int64_t j = 0; j < d; j++)
      nn_writer_put(&w, ampc_elem_load(x, xdt, i * d + j) * inv);
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

ampc_status ampc_l2norm_backward(int64_t m, int64_t d, const void *dy, ampc_dtype gdt,
                                 const void *x, ampc_dtype xdt, float eps, void *dx) {
  const char *fn = "ampc_l2norm_backward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, d);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, xdt);
  nn_writer w;
  nn_writer_init(&w, dx, gdt, 0, NULL);
  for (int64_t i = 0; i < m; i++) {
    const double nrm = row_norm(x, xdt, i * d, d);
    if (nrm <= (double)eps) { /* y = x / eps: a plain scaling */
      for (int64_t j = 0; j < d; j++)
        nn_writer_put(&w, ampc_elem_load(dy, gdt, i * d + j) / eps);
      continue;
    }
    double ydy = 0.0;
    for (int64_t j = 0; j < d; j++)
      ydy += (double)ampc_elem_load(x, xdt, i * d + j) / nrm *
             (double)ampc_elem_load(dy, gdt, i * d + j);
    const float inv = (float)(1.0 / nrm), c = (float)ydy;
    for (int64_t j = 0; j < d; j++) {
      const float yj = ampc_elem_load(x, xdt, i * d + j) * inv;
      nn_writer_put(&w, (ampc_elem_load(dy, gdt, i * d + j) - yj * c) * inv);
    }
  }
  nn_writer_flush(&w);
  return AMPC_OK;
}

size_t ampc_embedding_backward_scratch_bytes(int64_t b, int64_t t, int64_t d) {
  if (b < 1 || t < 1 || d < 1)
    return 0;
  return nn_pad64((size_t)(b * t) * 2 * sizeof(int64_t)) + nn_pad64((size_t)d * sizeof(float));
}
