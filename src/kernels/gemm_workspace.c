/*
 * src/kernels/gemm_workspace.c: the GEMM's per-thread workspace, which every
 * path packs into (kept between calls, so that a training step allocates
 * nothing once its largest GEMM has run), and its layout for the vector
 * FP16-accumulation paths. A leaf: it calls no other GEMM file.
 */
#include "internal.h"

#include <stdlib.h>

#include "kernels/gemm_impl.h"

void *ampc_gemm_workspace(size_t bytes) {
  static _Thread_local void *ws;
  static _Thread_local size_t have;
  if (bytes == 0)
    bytes = 64; /* a valid pointer for an empty product too */
  if (bytes > have) {
    const size_t want = (bytes + 63) & ~(size_t)63;
    free(ws);
    ws = aligned_alloc(64, want);
    have = ws ? want : 0;
  }
  return ws;
}

ampc_status ampc_acc16_workspace(int64_t mp, int64_t np, int64_t k, size_t es, ampc_acc16_ws *w) {
  size_t na, nb, ns, bytes;
  if (__builtin_mul_overflow((size_t)mp, (size_t)k, &na) ||
      __builtin_mul_overflow((size_t)np, (size_t)k, &nb) ||
      __builtin_mul_overflow((size_t)mp, (size_t)np, &ns) || __builtin_mul_overflow(na, es, &na) ||
      __builtin_mul_overflow(nb, es, &nb) || __builtin_mul_overflow(ns, es, &ns) ||
      __builtin_add_overflow(na, (size_t)63, &na) || __builtin_add_overflow(nb, (size_t)63, &nb) ||
      __builtin_add_overflow(na & ~(size_t)63, nb & ~(size_t)63, &bytes) ||
      __builtin_add_overflow(bytes, ns, &bytes))
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): workspace size overflows");
  char *ws = ampc_gemm_workspace(bytes);
  if (!ws)
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): cannot allocate %zu bytes", bytes);
  w->a = ws;
  w->b = ws + (na & ~(size_t)63);
  w->s = (char *)w->b + (nb & ~(size_t)63);
  return AMPC_OK;
}
