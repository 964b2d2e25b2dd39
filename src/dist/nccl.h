/*
 * src/dist/nccl.h: the ranks' gradient sums on device buffers through NCCL
 * (the dist layer's private part; not installed). NCCL is loaded with dlopen
 * on first use (libnccl.so.2: the CUDA toolkit's library folder that CMake
 * passes as AMPC_NCCL_DIR, then the default search path), so a binary built
 * with it still runs where there is no NCCL or no GPU. Compiled in when the
 * CUDA backend is (AMPC_HAVE_NCCL, nccl.h from the toolkit); the plan of the
 * rank-order chain below is plain C, built and tested everywhere.
 *
 * Source of the method: NVIDIA's NCCL documentation (ncclGetUniqueId +
 * ncclCommInitRank with the id broadcast by the launcher's own channel, "Using
 * NCCL with MPI"; point-to-point ncclSend / ncclRecv inside ncclGroupStart /
 * ncclGroupEnd; ncclAllReduce, ncclBroadcast).
 */
#ifndef AMPC_DIST_NCCL_H
#define AMPC_DIST_NCCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/dtype.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the rank-order chain's plan (no NCCL, no GPU) --------------------------------------
 * x [n] is cut into chunks of `chunk` values (the last one shorter). Rank r of
 * `size` runs rounds i = 0 .. ampc_chain_rounds(n, chunk) - 1; in round i it
 * sends its finished chunk i - 1 to rank r + 1 (all but the last rank; i >= 1)
 * and receives the running sum of chunk i from rank r - 1 (all but rank 0;
 * i < chunks), both inside one group, then adds its own chunk i to what it
 * received. Rank r's finished chunk k is ((x_0 + x_1) + ...) + x_r in rank
 * order, so the last rank ends with the rank-order sum, which it then
 * broadcasts. Rank r's receive of chunk i (round i) meets rank r - 1's send
 * (round i + 1): the rounds r + i = c of all ranks meet only each other and
 * follow rounds of c - 1 on their streams, so the chain cannot deadlock, and
 * neighbouring ranks overlap (a pipeline of chunks). */
typedef struct ampc_chain_round {
  int64_t send_off, send_len; /* to rank + 1 (send_len 0: none) */
  int64_t recv_off, recv_len; /* from rank - 1, then added (recv_len 0: none) */
} ampc_chain_round;

/* The rounds of a chain over n values in chunks of `chunk` (> 0):
 * ceil(n / chunk) + 1, or 0 for n <= 0. */
int64_t ampc_chain_rounds(int64_t n, int64_t chunk);
/* Round i of rank `rank` (0 <= rank < size) as described above; an empty
 * round (both lengths 0) for arguments out of range. */
ampc_chain_round ampc_chain_round_get(int rank, int size, int64_t n, int64_t chunk, int64_t i);

/* ---- NCCL ------------------------------------------------------------------------------ */

/* True when this ampc was built with NCCL support (the CUDA backend and the
 * toolkit's nccl.h). */
bool ampc_nccl_built(void);

/* Loads libnccl.so.2 (once) and checks that a CUDA device is there. Errors:
 * AMPC_ERR_UNSUPPORTED with the reason ("NCCL: not built into this ampc
 * (...)", "NCCL: cannot load libnccl.so.2: ...", "NCCL: no CUDA device: ...").
 * Never crashes, needs no GPU to answer. */
ampc_status ampc_nccl_check(void);

/* NCCL's version (ncclGetVersion: 22809 for 2.28.9), 0 when not loaded. */
int ampc_nccl_version(void);

/* A group of `size` processes over NCCL on the CUDA backend's bound context
 * (ampc_cuda_current: its device, and its stream for every call, so the sums
 * are ordered with the kernels around them). Made collectively: every rank
 * calls ampc_nccl_create at the same point; rank 0 makes the unique id and
 * bcast hands its bytes to every rank (MPI_Bcast from rank 0; NULL is
 * allowed for size 1). chunk: values per message of the chain (0: 1 Mi
 * values, 4 MiB of FP32). Errors: ampc_nccl_check's; AMPC_ERR_INVALID_ARG
 * (no bound CUDA context, bad rank or size); AMPC_ERR_DEVICE (NCCL's or
 * CUDA's message); AMPC_ERR_NOMEM. */
typedef struct ampc_nccl ampc_nccl;
typedef ampc_status (*ampc_nccl_bcast_fn)(void *user, void *bytes, size_t n);
ampc_status ampc_nccl_create(int rank, int size, int64_t chunk, ampc_nccl_bcast_fn bcast,
                             void *user, ampc_nccl **out);
/* dx [n] FP32 on the device (in place) = the sum over ranks in rank order,
 * ((x_0 + x_1) + x_2) + ...: the chain above with ncclSend / ncclRecv, each
 * addition by the backend's stage_f32 (own + running, the same bits as
 * running + own), then ncclBroadcast from the last rank. The same bits as the
 * host's ampc_comm.sum_f32_ordered. Queued on the context's stream.
 * *sent (optional) += the payload bytes this rank passed to sending calls. */
ampc_status ampc_nccl_sum_f32_ordered(ampc_nccl *g, float *dx, int64_t n, uint64_t *sent);
/* dx [n] (F32, F16 or BF16 on the device, in place) = the sum over ranks in
 * that dtype: ncclAllReduce with ncclSum (NCCL's order, not fixed). Errors:
 * AMPC_ERR_INVALID_ARG for another dtype. */
ampc_status ampc_nccl_sum_working(ampc_nccl *g, void *dx, ampc_dtype dt, int64_t n, uint64_t *sent);
/* ncclCommDestroy and the device temporary (NULL: no-op). */
void ampc_nccl_destroy(ampc_nccl *g);

#ifdef __cplusplus
}
#endif
#endif
