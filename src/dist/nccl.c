/*
 * src/dist/nccl.c: the ranks' sums on device buffers through NCCL
 * (src/dist/nccl.h): the rank-order chain's plan (plain C), NCCL loaded with
 * dlopen on first use, a group made from a unique id that the caller
 * broadcasts, the FP32 rank-order chain and the working-dtype all-reduce.
 * Without AMPC_HAVE_NCCL (no CUDA backend, or no nccl.h in the toolkit) every
 * NCCL entry says so and the plan stays.
 */
#define _POSIX_C_SOURCE 200809L /* dlopen, pthread_once */
#include "dist/nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- the chain's plan ------------------------------------------------------------------ */

int64_t ampc_chain_rounds(int64_t n, int64_t chunk) {
  if (n <= 0 || chunk <= 0)
    return 0;
  return (n + chunk - 1) / chunk + 1;
}

ampc_chain_round ampc_chain_round_get(int rank, int size, int64_t n, int64_t chunk, int64_t i) {
  ampc_chain_round rd = {0, 0, 0, 0};
  const int64_t rounds = ampc_chain_rounds(n, chunk);
  if (size < 1 || rank < 0 || rank >= size || i < 0 || i >= rounds)
    return rd;
  const int64_t chunks = rounds - 1;
  if (rank < size - 1 && i >= 1) { /* the finished chunk i - 1 goes on */
    rd.send_off = (i - 1) * chunk;
    rd.send_len = n - rd.send_off < chunk ? n - rd.send_off : chunk;
  }
  if (rank > 0 && i < chunks) { /* the running sum of chunk i comes in */
    rd.recv_off = i * chunk;
    rd.recv_len = n - rd.recv_off < chunk ? n - rd.recv_off : chunk;
  }
  return rd;
}

#ifdef AMPC_HAVE_NCCL

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_impl.h"

/* ---- NCCL, loaded on first use ----------------------------------------------------------- */

#define AMPC_NCCL_FUNCS(X)                                                                         \
  X(ncclGetVersion)                                                                                \
  X(ncclGetUniqueId)                                                                               \
  X(ncclCommInitRank)                                                                              \
  X(ncclCommDestroy)                                                                               \
  X(ncclGetErrorString)                                                                            \
  X(ncclAllReduce)                                                                                 \
  X(ncclBroadcast)                                                                                 \
  X(ncclSend)                                                                                      \
  X(ncclRecv)                                                                                      \
  X(ncclGroupStart)                                                                                \
  X(ncclGroupEnd)
#define AMPC_NCCL_DECL(f) static __typeof__(&f) p_##f;
AMPC_NCCL_FUNCS(AMPC_NCCL_DECL)
#undef AMPC_NCCL_DECL

#ifndef AMPC_NCCL_DIR
#define AMPC_NCCL_DIR "/usr/local/cuda/lib64"
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_error[512];
static int g_version;

static void load_once(void) {
  /* the toolkit's copy first (CMake passes its folder), then the search path */
  static const char soname[] = "libnccl.so.2";
  void *h = dlopen(AMPC_NCCL_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(g_error, sizeof g_error, "NCCL: cannot load %s (nor %s/%s): %s", soname, AMPC_NCCL_DIR,
             soname, dlerror());
    return;
  }
  void *sym;
#define AMPC_NCCL_LOAD(f)                                                                          \
  if (!g_error[0]) {                                                                               \
    sym = dlsym(h, #f);                                                                            \
    if (!sym)                                                                                      \
      snprintf(g_error, sizeof g_error, "NCCL: %s has no %s", soname, #f);                         \
    else                                                                                           \
      memcpy(&p_##f, &sym, sizeof sym);                                                            \
  }
  AMPC_NCCL_FUNCS(AMPC_NCCL_LOAD)
#undef AMPC_NCCL_LOAD
  if (!g_error[0] && p_ncclGetVersion(&g_version) != ncclSuccess)
    g_version = 0;
}

static ampc_status load(void) {
  pthread_once(&g_once, load_once);
  return g_error[0] ? ampc_fail(AMPC_ERR_UNSUPPORTED, "%s", g_error) : AMPC_OK;
}

bool ampc_nccl_built(void) { return true; }

int ampc_nccl_version(void) { return g_error[0] ? 0 : g_version; }

ampc_status ampc_nccl_check(void) {
  AMPC_TRY(load());
  if (ampc_cuda_device_count() < 1)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "NCCL: no CUDA device: %s",
                     ampc_cuda_unavailable_reason());
  return AMPC_OK;
}

/* ---- the group --------------------------------------------------------------------------- */

struct ampc_nccl {
  int rank, size, device;
  int64_t chunk;
  ncclComm_t comm;
  float *tmp; /* [chunk] on the device: the running sum received */
};

static ampc_status nccl_fail(ncclResult_t r, const char *what) {
  return ampc_fail(r == ncclInvalidArgument || r == ncclInvalidUsage ? AMPC_ERR_INVALID_ARG
                                                                     : AMPC_ERR_DEVICE,
                   "NCCL: %s: %s", what, p_ncclGetErrorString(r));
}
#define NC(call, what)                                                                             \
  do {                                                                                             \
    const ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess)                                                                         \
      return nccl_fail(r_, what);                                                                  \
  } while (0)

static ampc_status cuda_fail(cudaError_t e, const char *what) {
  return ampc_fail(e == cudaErrorMemoryAllocation ? AMPC_ERR_NOMEM : AMPC_ERR_DEVICE,
                   "NCCL group: %s: %s", what, cudaGetErrorString(e));
}

/* the bound context's stream, on the group's device */
static ampc_status bound_stream(const ampc_nccl *g, cudaStream_t *s, const char *fn) {
  ampc_cuda_ctx *ctx = ampc_cuda_current();
  if (!ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: no CUDA context is bound (ampc_device_open)", fn);
  if (ampc_cuda_ctx_device(ctx) != g->device)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: the NCCL group is on GPU %d, the bound context on GPU %d", fn, g->device,
                     ampc_cuda_ctx_device(ctx));
  const cudaError_t e = cudaSetDevice(g->device);
  if (e != cudaSuccess)
    return cuda_fail(e, "cudaSetDevice");
  *s = (cudaStream_t)ampc_cuda_ctx_stream(ctx);
  return AMPC_OK;
}

void ampc_nccl_destroy(ampc_nccl *g) {
  if (!g)
    return;
  if (g->device >= 0)
    (void)cudaSetDevice(g->device);
  if (g->comm)
    (void)p_ncclCommDestroy(g->comm);
  if (g->tmp)
    (void)cudaFree(g->tmp);
  free(g);
}

static ampc_status create(ampc_nccl *g, ampc_nccl_bcast_fn bcast, void *user) {
  ampc_cuda_ctx *ctx = ampc_cuda_current();
  if (!ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_nccl_create: no CUDA context is bound (ampc_device_open)");
  g->device = ampc_cuda_ctx_device(ctx);
  cudaError_t e = cudaSetDevice(g->device);
  if (e != cudaSuccess)
    return cuda_fail(e, "cudaSetDevice");
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (g->rank == 0)
    NC(p_ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (g->size > 1)
    AMPC_TRY(bcast(user, &id, sizeof id));
  NC(p_ncclCommInitRank(&g->comm, g->size, id, g->rank), "ncclCommInitRank");
  if (g->rank > 0 &&
      (e = cudaMalloc((void **)&g->tmp, (size_t)g->chunk * sizeof(float))) != cudaSuccess)
    return cuda_fail(e, "cudaMalloc (the chain's chunk)");
  return AMPC_OK;
}

ampc_status ampc_nccl_create(int rank, int size, int64_t chunk, ampc_nccl_bcast_fn bcast,
                             void *user, ampc_nccl **out) {
  if (!out || size < 1 || rank < 0 || rank >= size || chunk < 0 || (size > 1 && !bcast))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_nccl_create: bad arguments (rank %d of %d)", rank,
                     size);
  *out = NULL;
  AMPC_TRY(ampc_nccl_check());
  ampc_nccl *g = calloc(1, sizeof *g);
  if (!g)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_nccl_create: out of memory");
  g->rank = rank, g->size = size, g->device = -1;
  g->chunk = chunk ? chunk : (int64_t)1 << 20;
  const ampc_status st = create(g, bcast, user);
  if (st != AMPC_OK) {
    ampc_nccl_destroy(g);
    return st;
  }
  *out = g;
  return AMPC_OK;
}

ampc_status ampc_nccl_sum_f32_ordered(ampc_nccl *g, float *dx, int64_t n, uint64_t *sent) {
  const char *fn = "ampc_nccl_sum_f32_ordered";
  if (!g || n < 0 || (n > 0 && !dx))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad arguments", fn);
  if (n == 0)
    return AMPC_OK;
  cudaStream_t s;
  AMPC_TRY(bound_stream(g, &s, fn));
  const ampc_backend *be = ampc_device_backend(AMPC_DEVICE_CUDA);
  if (!be || !be->stage_f32)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: no CUDA backend", fn);
  uint64_t bytes = 0;
  const int64_t rounds = ampc_chain_rounds(n, g->chunk);
  for (int64_t i = 0; i < rounds; i++) {
    const ampc_chain_round rd = ampc_chain_round_get(g->rank, g->size, n, g->chunk, i);
    if (!rd.send_len && !rd.recv_len)
      continue;
    NC(p_ncclGroupStart(), "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    if (rd.send_len)
      r = p_ncclSend(dx + rd.send_off, (size_t)rd.send_len, ncclFloat32, g->rank + 1, g->comm, s);
    if (r == ncclSuccess && rd.recv_len)
      r = p_ncclRecv(g->tmp, (size_t)rd.recv_len, ncclFloat32, g->rank - 1, g->comm, s);
    const ncclResult_t r_end = p_ncclGroupEnd();
    NC(r, "the gradient chain (ncclSend / ncclRecv)");
    NC(r_end, "the gradient chain (ncclGroupEnd)");
    bytes += (uint64_t)rd.send_len * sizeof(float);
    /* own + running: the same bits as running + own (IEEE addition commutes) */
    if (rd.recv_len)
      AMPC_TRY(be->stage_f32(rd.recv_len, g->tmp, AMPC_F32, 1.0f, false, dx + rd.recv_off));
  }
  NC(p_ncclBroadcast(dx, dx, (size_t)n, ncclFloat32, g->size - 1, g->comm, s),
     "the gradient broadcast (ncclBroadcast)");
  if (g->rank == g->size - 1)
    bytes += (uint64_t)n * sizeof(float);
  if (sent)
    *sent += bytes;
  return AMPC_OK;
}

ampc_status ampc_nccl_sum_working(ampc_nccl *g, void *dx, ampc_dtype dt, int64_t n,
                                  uint64_t *sent) {
  const char *fn = "ampc_nccl_sum_working";
  if (!g || n < 0 || (n > 0 && !dx))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad arguments", fn);
  ncclDataType_t t;
  switch (dt) {
  case AMPC_F32: t = ncclFloat32; break;
  case AMPC_F16: t = ncclFloat16; break;
  case AMPC_BF16: t = ncclBfloat16; break;
  default:
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: dtype %s is not f32, f16 or bf16", fn,
                     ampc_dtype_name(dt));
  }
  if (n == 0)
    return AMPC_OK;
  cudaStream_t s;
  AMPC_TRY(bound_stream(g, &s, fn));
  NC(p_ncclAllReduce(dx, dx, (size_t)n, t, ncclSum, g->comm, s),
     "the gradient all-reduce (ncclAllReduce)");
  if (sent)
    *sent += (uint64_t)n * ampc_dtype_size(dt);
  return AMPC_OK;
}

#else /* no NCCL in this build */

static const char k_not_built[] =
    "NCCL: not built into this ampc (it needs the CUDA backend, AMPC_CUDA, and the toolkit's "
    "nccl.h)";

bool ampc_nccl_built(void) { return false; }
int ampc_nccl_version(void) { return 0; }
ampc_status ampc_nccl_check(void) { return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s", k_not_built); }
ampc_status ampc_nccl_create(int rank, int size, int64_t chunk, ampc_nccl_bcast_fn bcast,
                             void *user, ampc_nccl **out) {
  (void)rank, (void)size, (void)chunk, (void)bcast, (void)user;
  if (out)
    *out = NULL;
  return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s", k_not_built);
}
ampc_status ampc_nccl_sum_f32_ordered(ampc_nccl *g, float *dx, int64_t n, uint64_t *sent) {
  (void)g, (void)dx, (void)n, (void)sent;
  return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s", k_not_built);
}
ampc_status ampc_nccl_sum_working(ampc_nccl *g, void *dx, ampc_dtype dt, int64_t n,
                                  uint64_t *sent) {
  (void)g, (void)dx, (void)dt, (void)n, (void)sent;
  return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s", k_not_built);
}
void ampc_nccl_destroy(ampc_nccl *g) { (void)g; }

#endif /* AMPC_HAVE_NCCL */
