/*
 * src/nn/nn_util.h: argument checks and chunked stores shared by the layers.
 */
#ifndef AMPC_NN_UTIL_H
#define AMPC_NN_UTIL_H

#include "ampc/gemm.h"
#include "ampc/nn.h"
#include "internal.h"
#include "numeric/numeric.h"

#include <stdlib.h>

enum { AMPC_NN_CHUNK = 256 };

static inline int nn_dtype_ok(ampc_dtype dt) {
  return dt == AMPC_F32 || dt == AMPC_F16 || dt == AMPC_BF16;
}

#define NN_CHECK_PTR(fn, p)                                                                        \
  do {                                                                                             \
    if (!(p))                                                                                      \
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s is NULL", fn, #p);                            \
  } while (0)
#define NN_CHECK_DT(fn, dt)                                                                        \
  do {                                                                                             \
    if (!nn_dtype_ok(dt))                                                                          \
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s must be f32, f16 or bf16 (got %d)", fn, #dt,  \
                       (int)(dt));                                                                 \
  } while (0)
#define NN_CHECK_POS(fn, v)                                                                        \
  do {                                                                                             \
    if ((v) <= 0)                                                                                  \
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s must be positive (got %lld)", fn, #v,         \
                       (long long)(v));                                                            \
  } while (0)

/* Stores FP32 values into a typed buffer through a small FP32 chunk, so each
 * element is rounded once and counted when stats are asked for. */
typedef struct {
  void *dst;
  ampc_dtype dt;
  int64_t off; /* next element of dst */
  int n;
  float buf[AMPC_NN_CHUNK];
  ampc_round_stats *stats;
} nn_writer;

static inline void nn_writer_flush(nn_writer *w) {
  if (w->n) {
    ampc_store_f32((char *)w->dst + w->off * (int64_t)ampc_dtype_size(w->dt), w->dt, w->buf,
                   (size_t)w->n, w->stats);
    w->off += w->n;
    w->n = 0;
  }
}

static inline void nn_writer_init(nn_writer *w, void *dst, ampc_dtype dt, int64_t off,
                                  ampc_round_stats *stats) {
  w->dst = dst, w->dt = dt, w->off = off, w->n = 0, w->stats = stats;
}

static inline void nn_writer_put(nn_writer *w, float v) {
  w->buf[w->n++] = v;
  if (w->n == AMPC_NN_CHUNK)
    nn_writer_flush(w);
}

/* dst[0..n) = elements [off, off + n) of src (dtype dt) widened to FP32:
 * exact, the same values as ampc_elem_load (ampc_convert's vector path) */
static inline void nn_load(const void *src, ampc_dtype dt, int64_t off, int64_t n, float *dst) {
  ampc_convert(dst, AMPC_F32, (const char *)src + off * (int64_t)ampc_dtype_size(dt), dt,
               (size_t)n);
}

/* Elements [off, off + n) of src as FP32: src itself when it is F32 (no
 * copy), else widened into buf (nn_load) and buf returned. */
static inline const float *nn_in(const void *src, ampc_dtype dt, int64_t off, int64_t n,
                                 float *buf) {
  if (dt == AMPC_F32)
    return (const float *)src + off;
  nn_load(src, dt, off, n, buf);
  return buf;
}

/* Where FP32 results for elements [off, off + n) of dst go: straight into
 * dst when it is F32 and nothing counts the stores (no round stats, telemetry
 * off), else into buf, which nn_out_done rounds into dst (ampc_store_f32).
 * The layers write each output element after reading that element's inputs
 * only, so this is safe when dst is also an input (in-place). */
static inline float *nn_out(void *dst, ampc_dtype dt, int64_t off, float *buf,
                            const ampc_round_stats *stats) {
  return (dt == AMPC_F32 && !stats && !ampc_tally_tls) ? (float *)dst + off : buf;
}
static inline void nn_out_done(void *dst, ampc_dtype dt, int64_t off, const float *v, int64_t n,
                               ampc_round_stats *stats) {
  if (!(dt == AMPC_F32 && v == (const float *)dst + off))
    ampc_store_f32((char *)dst + off * (int64_t)ampc_dtype_size(dt), dt, v, (size_t)n, stats);
}

/* The threads for a layer loop over `work` elements: ampc's thread count
 * when the work is large enough to pay for a parallel region, else 1. The
 * layers split their loops so that every element is computed the same way
 * whatever the thread count (results do not depend on it). */
static inline int nn_threads(int64_t work) {
  return work >= (int64_t)1 << 15 ? ampc_get_num_threads() : 1;
}

/* g[i] += v, formed in FP32 and rounded once into the gradient's dtype */
static inline void nn_grad_add(void *g, ampc_dtype dt, int64_t i, float v) {
  ampc_elem_store(g, dt, i, ampc_elem_load(g, dt, i) + v);
}

/* ---- buffers that must not share memory ---- */

/* n elements of dtype dt at p (p NULL or n 0: none), named for messages */
typedef struct nn_span {
  const void *p;
  int64_t n;
  ampc_dtype dt;
  const char *name;
} nn_span;

/* AMPC_ERR_INVALID_ARG naming fn and both buffers when a span of a shares a
 * byte with a span of b (a fused layer writes its outputs block by block
 * while other blocks still read its inputs, so an overlap would give other
 * values than the layers one after the other). */
static inline ampc_status nn_apart(const char *fn, const nn_span *a, int na, const nn_span *b,
                                   int nb) {
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb; j++) {
      if (!a[i].p || !b[j].p || a[i].n <= 0 || b[j].n <= 0)
        continue;
      const uintptr_t a0 = (uintptr_t)a[i].p, b0 = (uintptr_t)b[j].p;
      const uintptr_t a1 = a0 + (uintptr_t)a[i].n * ampc_dtype_size(a[i].dt);
      const uintptr_t b1 = b0 + (uintptr_t)b[j].n * ampc_dtype_size(b[j].dt);
      if (a0 < b1 && b0 < a1)
        return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s and %s share memory", fn, a[i].name,
                         b[j].name);
    }
  return AMPC_OK;
}

/* ---- scratch (ampc_scratch, ampc/nn.h) ---- */

/* bytes rounded up to the 64-byte alignment of every carve */
static inline size_t nn_pad64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* A buffer of one layer call: carved from the caller's scratch at *off when
 * it fits, else allocated (heap: freed by nn_give). */
typedef struct nn_buf {
  void *p;
  int heap;
} nn_buf;

static inline void *nn_take(ampc_scratch *ws, size_t *off, size_t bytes, nn_buf *b) {
  if (ws && ws->base && *off + nn_pad64(bytes) <= ws->bytes) {
    b->p = (char *)ws->base + *off;
    b->heap = 0;
    *off += nn_pad64(bytes);
  } else {
    b->p = malloc(bytes ? bytes : 1);
    b->heap = 1;
  }
  return b->p;
}

static inline void nn_give(nn_buf *b) {
  if (b->heap)
    free(b->p);
  b->p = NULL, b->heap = 0;
}

/* what is left of ws after off bytes (for the layers a layer calls) */
static inline ampc_scratch nn_rest(const ampc_scratch *ws, size_t off) {
  ampc_scratch r = {NULL, 0};
  if (ws && ws->base && off <= ws->bytes)
    r.base = (char *)ws->base + off, r.bytes = ws->bytes - off;
  return r;
}

#endif
