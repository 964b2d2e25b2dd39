/*
 * src/data/batch.c: one micro-batch gathered from a dataset into buffers the
 * model reads (images, tokens and labels of image-text samples; rows of
 * dense features and their labels), and the image-shift augmentation applied
 * while gathering. The buffers are allocated once per run, so gathering
 * allocates nothing.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "ampc/data.h"

ampc_status ampc_batch_buffers_pairs(ampc_batch_buffers *bb, const ampc_dataset *D, int64_t cap) {
  if (!bb || !D || cap < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_batch_buffers_pairs: bad arguments");
  memset(bb, 0, sizeof *bb);
  bb->cap = cap;
  bb->img_sz = (int64_t)D->height * D->width * D->channels;
  bb->seq_len = D->tokens && D->seq_len > 0 ? D->seq_len : 0;
  bb->labels = malloc((size_t)cap * sizeof *bb->labels);
  bb->images = malloc((size_t)(cap * bb->img_sz));
  if (bb->seq_len > 0)
    bb->tokens = malloc((size_t)(cap * bb->seq_len) * sizeof *bb->tokens);
  if (!bb->labels || !bb->images || (bb->seq_len > 0 && !bb->tokens)) {
    ampc_batch_buffers_free(bb);
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  }
  return AMPC_OK;
}

ampc_status ampc_batch_buffers_rows(ampc_batch_buffers *bb, int64_t dim, int64_t cap) {
  if (!bb || dim < 1 || cap < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_batch_buffers_rows: bad arguments");
  memset(bb, 0, sizeof *bb);
  bb->cap = cap, bb->dim = dim;
  bb->labels = malloc((size_t)cap * sizeof *bb->labels);
  bb->features = malloc((size_t)(cap * dim) * sizeof *bb->features);
  if (!bb->labels || !bb->features) {
    ampc_batch_buffers_free(bb);
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  }
  return AMPC_OK;
}

void ampc_batch_buffers_free(ampc_batch_buffers *bb) {
  if (!bb)
    return;
  free(bb->images), free(bb->tokens), free(bb->labels), free(bb->features);
  memset(bb, 0, sizeof *bb);
}

void ampc_image_shift(uint8_t *dst, const uint8_t *src, int32_t h, int32_t w, int32_t c, int s,
                      uint64_t r) {
  const int span = 2 * s + 1;
  const int dx = (int)(r % (uint64_t)span) - s,
            dy = (int)((r / (uint64_t)span) % (uint64_t)span) - s;
  for (int32_t y = 0; y < h; y++)
    for (int32_t x = 0; x < w; x++) {
      const int32_t sy = y - dy, sx = x - dx;
      const uint8_t *p =
          sy >= 0 && sy < h && sx >= 0 && sx < w ? src + ((size_t)sy * w + sx) * c : src;
      memcpy(dst + ((size_t)y * w + x) * c, p, (size_t)c);
    }
}

void ampc_batch_put_pair(ampc_batch_buffers *bb, const ampc_dataset *D, int64_t r, int64_t src,
                         int shift, uint64_t bits) {
  const int64_t img_sz = bb->img_sz, L = bb->seq_len;
  if (shift > 0)
    ampc_image_shift(bb->images + r * img_sz, D->images + src * img_sz, D->height, D->width,
                     D->channels, shift, bits);
  else
    memcpy(bb->images + r * img_sz, D->images + src * img_sz, (size_t)img_sz);
  if (bb->tokens) /* image-only data (Fashion-MNIST) has no tokens to copy */
    memcpy(bb->tokens + r * L, D->tokens + src * L, (size_t)L * sizeof *bb->tokens);
  bb->labels[r] = D->label[src];
}

void ampc_batch_put_row(ampc_batch_buffers *bb, const float *x, const int32_t *y, int64_t r,
                        int64_t src) {
  const int64_t in = bb->dim;
  memcpy(bb->features + r * in, x + src * in, (size_t)in * sizeof *bb->features);
  bb->labels[r] = y[src];
}
