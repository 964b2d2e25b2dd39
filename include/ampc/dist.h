/*
 * ampc/dist.h: data-parallel training across processes and machines, on MPI
 * (DESIGN.md section 1, the dist layer). ampc does not move bytes itself: the
 * collectives are MPI's (Open MPI's mpirun, or any MPI launcher and host
 * file), as llm.c and Horovod use it. A build without MPI (CMake option
 * AMPC_MPI off, or no MPI found) keeps every function: the group is then one
 * process.
 *
 * Usage: ampc_dist_init at the start of main, ampc_dist_comm into the run
 * config (ampc/train.h: ampc_run_config.comm), ampc_dist_finalize at the end;
 * on an error that ends a rank, ampc_dist_abort after printing it, so that
 * the other ranks do not wait for it forever.
 */
#ifndef AMPC_DIST_H
#define AMPC_DIST_H

#include <stdbool.h>

#include "ampc/backend.h"
#include "ampc/status.h"
#include "ampc/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ampc_dist ampc_dist;

/* True when ampc was built with MPI (AMPC_MPI). */
bool ampc_dist_have_mpi(void);

/* Join the job. With MPI built in and the process started by an MPI launcher
 * (its environment: OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), this calls
 * MPI_Init_thread (MPI_THREAD_FUNNELED: only the main thread calls MPI; the
 * kernels' OpenMP threads never do) and the group is MPI_COMM_WORLD; else the
 * group is this process alone and MPI is not touched. argc/argv may be NULL.
 * Errors: AMPC_ERR_NOMEM; an MPI that fails to start aborts (MPI's default). */
ampc_status ampc_dist_init(int *argc, char ***argv, ampc_dist **out);

int ampc_dist_rank(const ampc_dist *d); /* 0 for NULL */
int ampc_dist_size(const ampc_dist *d); /* 1 for NULL */

/* The group's collectives for the run (ampc_comm, ampc/train.h); NULL for a
 * group of one (a run without communicator is a single-process run). Valid
 * until ampc_dist_finalize. Sums in FP32 (sum_f32_ordered) go through the
 * ranks as a pipelined chain in rank order (chunks of 1 MiB from rank 0 to
 * rank size-1, each adding its own values, then a broadcast from the last
 * rank): deterministic and the same bits as one process adding the terms in
 * rank order; sums in the working dtype (sum_working) are MPI_Allreduce with
 * MPI_SUM (FP32) or a commutative user op adding binary16 or bfloat16 values
 * with one rounding per addition. */
const ampc_comm *ampc_dist_comm(ampc_dist *d);

/* Where the gradient sums of a run on device `dev` go: NCCL on the device's
 * buffers (ampc_comm.sum_device_f32_ordered / sum_device_working set) when
 * dev is cuda and every rank can load libnccl.so.2 and sees a GPU, else
 * through host memory over MPI (those entries NULL). Call it on every rank at
 * the same point, before the run (the ranks agree by an MPI_Allreduce); the
 * NCCL group itself is made at the first device sum, on the CUDA context the
 * run bound (rank r on GPU r mod the GPUs). Returns the path for the log:
 * "nccl 2.28.9", "host (MPI): <why not NCCL>", or "none (one process)" (a
 * group of one without MPI); valid until the next call or
 * ampc_dist_finalize. With AMPC_NCCL_ONE_RANK=1 in the environment and dev
 * cuda with NCCL usable, a group of one (under an MPI launcher or not: then
 * with host collectives of one process, each an identity) gets a
 * communicator from ampc_dist_comm too, so that one GPU runs the NCCL path
 * (sums of one term: the gradients unchanged) for the GPU check. */
const char *ampc_dist_use_device(ampc_dist *d, ampc_device dev);

/* End the whole job from this rank (MPI_Abort with exit code `code`) when the
 * group has more than one rank; returns doing nothing otherwise. Print the
 * message first. */
void ampc_dist_abort(ampc_dist *d, int code);

/* Leave the job (MPI_Finalize when MPI was started) and free d (NULL: no-op). */
void ampc_dist_finalize(ampc_dist *d);

#ifdef __cplusplus
}
#endif
#endif
