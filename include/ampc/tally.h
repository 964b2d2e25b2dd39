/*
 * ampc/tally.h: the rounding tally of the numeric layer (DESIGN.md section 1):
 * exact counts of what rounding FP32 results into a storage dtype did. While
 * the tally is on, every store of ampc's kernels into storage (the GEMM
 * epilogue, the layers' stores, the element stores, the optimizer's
 * re-rounding) is counted in the thread that made it. Counting says nothing
 * about where a value belongs: the diagnosis layer (ampc/diag.h) switches the
 * tally on, drains it at the end of each tensor and attributes the counts to
 * a model branch.
 *
 * A tally is an object with one owner (a collector, e.g. ampc_telemetry),
 * not a process-wide switch: the owner binds it to the thread that calls the
 * kernels, each kernel hands the calling thread's tally to its OpenMP workers,
 * and the owner drains it from that thread between kernel calls. Two threads
 * that each drive their own model may each bind their own tally.
 */
#ifndef AMPC_TALLY_H
#define AMPC_TALLY_H

#include <stdint.h>

#include "ampc/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Histogram bins: bin e (0..255) counts finite non-zero FP32 values whose biased
 * exponent field is e, i.e. floor(log2 |x|) = e - 127 for e >= 1; bin 0 holds
 * FP32 subnormals (|x| < 2^-126). Zeros are counted apart. */
enum { AMPC_TM_BINS = 256 };

typedef struct ampc_tm_stats {
  ampc_round_stats r;          /* what the rounding into storage did */
  uint64_t zeros;              /* values that were exactly 0 in FP32 already */
  uint64_t hist[AMPC_TM_BINS]; /* FP32 exponents of the non-zero finite values */
} ampc_tm_stats;

/* Where counted values belong, as a model reports it: forward or backward pass. */
typedef enum ampc_tm_phase {
  AMPC_TM_ACT = 0,  /* forward pass: activations */
  AMPC_TM_GRAD = 1, /* backward pass: activation and parameter gradients */
  AMPC_TM_PHASES
} ampc_tm_phase;

typedef struct ampc_tally ampc_tally;

/* A new tally with every count zero (about 670 KB: a slot for each of the
 * first 64 threads that count into it, one shared by any more);
 * NULL when out of memory. Free with ampc_tally_free (NULL is a no-op; a
 * tally bound to the calling thread is unbound first). */
ampc_tally *ampc_tally_create(void);
void ampc_tally_free(ampc_tally *t);

/* Count the stores of every ampc kernel the calling thread runs from now on
 * into t (NULL: count nothing); returns the tally bound before. Bind, run,
 * drain and unbind on the same thread. */
ampc_tally *ampc_tally_bind(ampc_tally *t);

/* The tally bound to the calling thread, or NULL. */
ampc_tally *ampc_tally_current(void);

/* Sum every thread's counts in t since its last drain into *out (zeroed
 * first; all zero for t NULL) and clear them. Call between kernel calls. */
void ampc_tally_drain(ampc_tally *t, ampc_tm_stats *out);

/* Add counts made elsewhere (a device's store kernels, src/backend/cuda/) into
 * the calling thread's part of t, as if its kernels had counted them. No-op
 * for t or s NULL. */
void ampc_tally_add(ampc_tally *t, const ampc_tm_stats *s);

/* Add the counts of `from` into `into`. */
void ampc_tm_stats_merge(ampc_tm_stats *into, const ampc_tm_stats *from);

/* The FP32 exponent bin of 2^e, for plotting bands: e + 127 clamped to [0, 255]. */
int ampc_tm_bin_of_log2(int e);

#ifdef __cplusplus
}
#endif
#endif
