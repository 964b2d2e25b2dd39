/*
 * src/nn/elementwise_impl.h: the elementwise layers' loops over one span of
 * elements [off, off + n) (elementwise.c), for the layers' own parallel loops
 * and for the fused layers (fused.c), which run them on a GEMM's finished
 * blocks from the GEMM's threads: the same operations, so the same bits.
 * Each works in chunks of AMPC_NN_CHUNK elements and starts no thread.
 */
#ifndef AMPC_NN_ELEMENTWISE_IMPL_H
#define AMPC_NN_ELEMENTWISE_IMPL_H

#include <stdint.h>

#include "ampc/nn.h"

/* y = gelu(x), as ampc_gelu_forward (stats: its round stats, or NULL) */
void ampc_nn_gelu_span(const void *x, ampc_dtype xdt, int64_t off, int64_t n, void *y,
                       ampc_dtype ydt, ampc_round_stats *stats);
/* dx = dy * gelu'(x), as ampc_gelu_backward (dx may be dy) */
void ampc_nn_gelu_bwd_span(const void *dy, ampc_dtype gdt, const void *x, ampc_dtype xdt,
                           int64_t off, int64_t n, void *dx);
/* y = a + b, as ampc_add_forward */
void ampc_nn_add_span(const void *a, ampc_dtype adt, const void *b, ampc_dtype bdt, int64_t off,
                      int64_t n, void *y, ampc_dtype ydt, ampc_round_stats *stats);

#endif
