/*
 * src/backend/cuda/cuda_gemm.c: the CUDA context (device, stream, cuBLASLt handle,
 * workspace), device memory, and ampc_cuda_gemm on cublasLtMatmul with a
 * per-shape cache of descriptors and the heuristic's algorithm.
 *
 * Built only with AMPC_CUDA (without it the backend is not registered). Host C against the CUDA
 * runtime (linked statically: libcudart_static) and cuBLASLt's C API, which
 * is loaded with dlopen when a context is first made: linked normally, the
 * 500 MB libcublasLt.so costs every ampc process about 200 MB of resident
 * memory at start-up, GPU or not, and the memory planner (`ampc plan`)
 * measures that overhead. The few device kernels are in cuda_kernels.cu.
 */
#define _POSIX_C_SOURCE 200809L /* dlopen, pthread_once */
#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_impl.h"
#include "internal.h"

/* ---- cuBLASLt, loaded on first use -------------------------------------- */

#define AMPC_LT_FUNCS(X)                                                                           \
  X(cublasLtCreate)                                                                                \
  X(cublasLtDestroy)                                                                               \
  X(cublasLtGetStatusString)                                                                       \
  X(cublasLtGetVersion)                                                                            \
  X(cublasLtMatmul)                                                                                \
  X(cublasLtMatmulAlgoGetHeuristic)                                                                \
  X(cublasLtMatmulDescCreate)                                                                      \
  X(cublasLtMatmulDescDestroy)                                                                     \
  X(cublasLtMatmulDescSetAttribute)                                                                \
  X(cublasLtMatmulPreferenceCreate)                                                                \
  X(cublasLtMatmulPreferenceDestroy)                                                               \
  X(cublasLtMatmulPreferenceSetAttribute)                                                          \
  X(cublasLtMatrixLayoutCreate)                                                                    \
  X(cublasLtMatrixLayoutDestroy)                                                                   \
  X(cublasLtMatrixLayoutSetAttribute)
#define AMPC_LT_DECL(f) static __typeof__(&f) p_##f;
AMPC_LT_FUNCS(AMPC_LT_DECL)
#define AMPC_STR2(x) #x
#define AMPC_STR(x) AMPC_STR2(x)
#ifndef AMPC_CUBLASLT_DIR
#define AMPC_CUBLASLT_DIR "/usr/local/cuda/lib64"
#endif

static pthread_once_t g_lt_once = PTHREAD_ONCE_INIT;
static char g_lt_error[384];

static void lt_load_once(void) {
  /* the soname of the cuBLASLt this was compiled against, then the
   * toolkit's own copy (CMake passes its folder) */
  static const char soname[] = "libcublasLt.so." AMPC_STR(CUBLAS_VER_MAJOR);
  void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h)
    h = dlopen(AMPC_CUBLASLT_DIR "/libcublasLt.so." AMPC_STR(CUBLAS_VER_MAJOR),
               RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(g_lt_error, sizeof g_lt_error, "cannot load cuBLASLt (%s): %s", soname, dlerror());
    return;
  }
  void *sym;
#define AMPC_LT_LOAD(f)                                                                            \
  if (!g_lt_error[0]) {                                                                            \
    sym = dlsym(h, #f);                                                                            \
    if (!sym)                                                                                      \
      snprintf(g_lt_error, sizeof g_lt_error, "%s has no %s", soname, #f);                         \
    else                                                                                           \
      memcpy(&p_##f, &sym, sizeof sym);                                                            \
  }
  AMPC_LT_FUNCS(AMPC_LT_LOAD)
#undef AMPC_LT_LOAD
}

static ampc_status lt_load(void) {
  pthread_once(&g_lt_once, lt_load_once);
  if (g_lt_error[0])
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s", g_lt_error);
  return AMPC_OK;
}

ampc_status ampc_cuda_load_cublaslt(size_t *version) {
  ampc_status st = lt_load();
  if (st == AMPC_OK && version)
    *version = p_cublasLtGetVersion();
  return st;
}

/* every cuBLASLt call below goes through the loaded pointers */
#define cublasLtCreate p_cublasLtCreate
#define cublasLtDestroy p_cublasLtDestroy
#define cublasLtGetStatusString p_cublasLtGetStatusString
#define cublasLtGetVersion p_cublasLtGetVersion
#define cublasLtMatmul p_cublasLtMatmul
#define cublasLtMatmulAlgoGetHeuristic p_cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmulDescCreate p_cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy p_cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute p_cublasLtMatmulDescSetAttribute
#define cublasLtMatmulPreferenceCreate p_cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy p_cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute p_cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatrixLayoutCreate p_cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy p_cublasLtMatrixLayoutDestroy
#define cublasLtMatrixLayoutSetAttribute p_cublasLtMatrixLayoutSetAttribute

enum { CACHE_SIZE = 256 }; /* a training step of mm-base has ~100 distinct GEMMs */

static int is_fp8(ampc_dtype dt) { return dt == AMPC_F8_E4M3 || dt == AMPC_F8_E5M2; }

/* Everything the heuristic's choice depends on; int64 fields only, so that a
 * zeroed key compares with memcmp. */
typedef struct plan_key {
  int64_t trans_a, trans_b, m, n, k;
  int64_t a_dt, b_dt, d_dt, c_dt, bias_dt;
  int64_t lda, ldb, ldd, stride_a, stride_b, stride_d, batch;
  int64_t compute, align_a, align_b, align_d, align_bias;
  int64_t has_bias, has_scale_a, has_scale_b, has_scale_d, has_amax;
} plan_key;
_Static_assert(sizeof(plan_key) % sizeof(int64_t) == 0, "key_hash reads the key as int64 words");

typedef struct plan_entry {
  int used;
  uint64_t hash; /* key_hash(&key): compared before the key itself */
  plan_key key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatmulAlgo_t algo;
  /* with GEMM tuning: the heuristic's candidates, timed at the plan's first
   * call (tune_entry), and whether that was done */
  cublasLtMatmulAlgo_t cand[8];
  int ncand, tuned;
  int own_amax; /* a 16-bit or F32 D: cuBLASLt fuses the amax of FP8 D's only
                   (it refuses AMAX_D otherwise, at the matmul: pytorch#122821),
                   so ampc's amax kernel runs after the GEMM */
} plan_entry;

struct ampc_cuda_ctx {
  int device;
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void *workspace;
  size_t ws_bytes;
  cudaEvent_t ev0, ev1;
  void *scratch[AMPC_CUDA_SCRATCH_SLOTS]; /* the layers' device scratch (cuda_launch.cu) */
  size_t scratch_bytes[AMPC_CUDA_SCRATCH_SLOTS];
  uint64_t scratch_tag[AMPC_CUDA_SCRATCH_SLOTS]; /* 0 when (re)allocated */
  plan_entry cache[CACHE_SIZE];
  int next_victim;
  int64_t queries;
  uint64_t flops; /* 2 m n k batch of every product run (model FLOP utilisation) */
  ampc_cuda_counters counters;
  /* pinned staging of small host-to-device copies (ampc_cuda_to_device):
   * filled from `staged` on, reused from 0 after a stream synchronisation */
  void *pinned;
  size_t staged;
  int pinned_failed;
};

/* the staging buffer's size and the largest copy staged (larger copies:
 * weights, checkpoints, wait for the copy) */
enum { PINNED_BYTES = 4 << 20, PINNED_MAX_COPY = 1 << 20 };

/* ---- errors ------------------------------------------------------------- */

static ampc_status cuda_fail(cudaError_t e, const char *what) {
  const ampc_status s = e == cudaErrorMemoryAllocation ? AMPC_ERR_NOMEM : AMPC_ERR_DEVICE;
  return ampc_fail(s, "%s: CUDA error %d (%s): %s", what, (int)e, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}
static ampc_status lt_fail(cublasStatus_t e, const char *what) {
  const ampc_status s = e == CUBLAS_STATUS_NOT_SUPPORTED  ? AMPC_ERR_UNSUPPORTED
                        : e == CUBLAS_STATUS_ALLOC_FAILED ? AMPC_ERR_NOMEM
                                                          : AMPC_ERR_DEVICE;
  return ampc_fail(s, "%s: cuBLASLt status %d (%s)", what, (int)e, cublasLtGetStatusString(e));
}
#define CU(call, what)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return cuda_fail(e_, what);                                                                  \
  } while (0)
#define LT(call, what)                                                                             \
  do {                                                                                             \
    cublasStatus_t e_ = (call);                                                                    \
    if (e_ != CUBLAS_STATUS_SUCCESS)                                                               \
      return lt_fail(e_, what);                                                                    \
  } while (0)

/* ---- devices ------------------------------------------------------------ */

static char g_reason[256];

int ampc_cuda_built(void) { return 1; }

int ampc_cuda_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* CUDA says "driver version is insufficient" also where there is no
     * driver at all: say what to look for */
    snprintf(g_reason, sizeof g_reason, "cudaGetDeviceCount: %s (%s)%s", cudaGetErrorString(e),
             cudaGetErrorName(e),
             e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
                 ? "; is an NVIDIA GPU with its driver installed here?"
                 : "");
    (void)cudaGetLastError(); /* clear the error, which is not sticky */
    return 0;
  }
  if (n == 0)
    snprintf(g_reason, sizeof g_reason, "cudaGetDeviceCount: 0 devices");
  else
    g_reason[0] = '\0';
  return n;
}

const char *ampc_cuda_unavailable_reason(void) {
  (void)ampc_cuda_device_count();
  return g_reason;
}

ampc_status ampc_cuda_device_info_get(int device, ampc_cuda_device_info *out) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_device_info_get: NULL");
  const int n = ampc_cuda_device_count();
  if (n == 0)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "no CUDA device: %s", g_reason);
  if (device < 0 || device >= n)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "CUDA device %d does not exist (%d found)", device, n);
  struct cudaDeviceProp p;
  CU(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->cc_major = p.major, out->cc_minor = p.minor;
  out->sm_count = p.multiProcessorCount;
  out->total_mem_bytes = p.totalGlobalMem;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, device) == cudaSuccess)
    out->clock_khz = v;
  else
    (void)cudaGetLastError();
  CU(cudaDriverGetVersion(&out->driver_version), "cudaDriverGetVersion");
  CU(cudaRuntimeGetVersion(&out->runtime_version), "cudaRuntimeGetVersion");
  out->cublaslt_version = lt_load() == AMPC_OK ? cublasLtGetVersion() : 0;
  return AMPC_OK;
}

/* ---- context and memory ------------------------------------------------- */

static void cache_clear(ampc_cuda_ctx *ctx) {
  for (int i = 0; i < CACHE_SIZE; i++) {
    plan_entry *e = &ctx->cache[i];
    if (!e->used)
      continue;
    cublasLtMatrixLayoutDestroy(e->la);
    cublasLtMatrixLayoutDestroy(e->lb);
    cublasLtMatrixLayoutDestroy(e->lc);
    cublasLtMatrixLayoutDestroy(e->ld);
    cublasLtMatmulDescDestroy(e->desc);
    e->used = 0;
  }
}

void ampc_cuda_destroy(ampc_cuda_ctx *ctx) {
  if (!ctx)
    return;
  cudaSetDevice(ctx->device);
  if (ctx->stream)
    cudaStreamSynchronize(ctx->stream);
  cache_clear(ctx);
  for (int i = 0; i < AMPC_CUDA_SCRATCH_SLOTS; i++)
    if (ctx->scratch[i])
      cudaFree(ctx->scratch[i]);
  if (ampc_cuda_current() == ctx)
    ampc_cuda_bind(NULL);
  if (ctx->ev0)
    cudaEventDestroy(ctx->ev0);
  if (ctx->ev1)
    cudaEventDestroy(ctx->ev1);
  if (ctx->workspace)
    cudaFree(ctx->workspace);
  if (ctx->lt)
    cublasLtDestroy(ctx->lt);
  if (ctx->stream)
    cudaStreamDestroy(ctx->stream);
  if (ctx->pinned)
    cudaFreeHost(ctx->pinned);
  free(ctx);
}

static ampc_status create_parts(ampc_cuda_ctx *c, size_t ws) {
  CU(cudaSetDevice(c->device), "cudaSetDevice");
  CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  LT(cublasLtCreate(&c->lt), "cublasLtCreate");
  c->ws_bytes = ws;
  CU(cudaMalloc(&c->workspace, ws), "cudaMalloc (cuBLASLt workspace)");
  CU(cudaEventCreate(&c->ev0), "cudaEventCreate");
  CU(cudaEventCreate(&c->ev1), "cudaEventCreate");
  return AMPC_OK;
}

ampc_status ampc_cuda_create(int device, size_t workspace_bytes, ampc_cuda_ctx **out) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_create: NULL");
  *out = NULL;
  const int n = ampc_cuda_device_count();
  if (n == 0)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "no CUDA device: %s", g_reason);
  if (device < 0 || device >= n)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "CUDA device %d does not exist (%d found)", device, n);
  if (lt_load() != AMPC_OK)
    return AMPC_ERR_UNSUPPORTED;
  ampc_cuda_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_cuda_create: out of host memory");
  c->device = device;
  ampc_status st = create_parts(c, workspace_bytes ? workspace_bytes : (size_t)32 << 20);
  if (st != AMPC_OK) {
    ampc_cuda_destroy(c);
    return st;
  }
  *out = c;
  return AMPC_OK;
}

/* ---- the layers' view of a context (cuda_impl.h, cuda_nn.h) -------- */

static _Thread_local ampc_cuda_ctx *g_bound;

ampc_cuda_ctx *ampc_cuda_bind(ampc_cuda_ctx *ctx) {
  ampc_cuda_ctx *const before = g_bound;
  g_bound = ctx;
  return before;
}

ampc_cuda_ctx *ampc_cuda_current(void) { return g_bound; }

void *ampc_cuda_ctx_stream(ampc_cuda_ctx *ctx) { return ctx ? (void *)ctx->stream : NULL; }

int ampc_cuda_ctx_device(const ampc_cuda_ctx *ctx) { return ctx ? ctx->device : -1; }

/* the host waits for ctx's stream, counted (ampc_cuda_counters_get) */
static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cudaError_t ctx_wait(ampc_cuda_ctx *ctx) {
  const double t0 = mono_s();
  const cudaError_t e = cudaStreamSynchronize(ctx->stream);
  ctx->counters.waits++;
  ctx->counters.wait_s += mono_s() - t0;
  return e;
}

ampc_status ampc_cuda_ctx_scratch(ampc_cuda_ctx *ctx, int slot, size_t bytes, void **out) {
  if (!ctx || !out || slot < 0 || slot >= AMPC_CUDA_SCRATCH_SLOTS)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_ctx_scratch: bad arguments");
  if (ctx->scratch_bytes[slot] < bytes) {
    CU(cudaSetDevice(ctx->device), "cudaSetDevice");
    if (ctx->scratch[slot]) { /* kernels on the stream may still read the old one */
      CU(ctx_wait(ctx), "cudaStreamSynchronize");
      cudaFree(ctx->scratch[slot]);
      ctx->scratch[slot] = NULL, ctx->scratch_bytes[slot] = 0;
    }
    const size_t want = ampc_cuda_scratch_slot_bytes(bytes); /* room to grow */
    cudaError_t e = cudaMalloc(&ctx->scratch[slot], want);
    if (e != cudaSuccess) {
      ctx->scratch[slot] = NULL;
      (void)cudaGetLastError();
      return cuda_fail(e, "cudaMalloc (layer scratch)");
    }
    ctx->scratch_bytes[slot] = want;
    ctx->scratch_tag[slot] = 0;
  }
  *out = ctx->scratch[slot];
  return AMPC_OK;
}

uint64_t *ampc_cuda_ctx_scratch_tag(ampc_cuda_ctx *ctx, int slot) {
  return ctx && slot >= 0 && slot < AMPC_CUDA_SCRATCH_SLOTS ? &ctx->scratch_tag[slot] : NULL;
}

ampc_status ampc_cuda_malloc(ampc_cuda_ctx *ctx, size_t bytes, void **dptr) {
  if (!ctx || !dptr)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_malloc: NULL");
  *dptr = NULL;
  CU(cudaSetDevice(ctx->device), "cudaSetDevice");
  cudaError_t e = cudaMalloc(dptr, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *dptr = NULL;
    (void)cudaGetLastError();
    const ampc_status s = cuda_fail(e, "cudaMalloc");
    return ampc_fail(s, "%s (%zu bytes)", ampc_last_error(), bytes);
  }
  return AMPC_OK;
}

void ampc_cuda_free(ampc_cuda_ctx *ctx, void *dptr) {
  if (!ctx || !dptr)
    return;
  cudaSetDevice(ctx->device);
  cudaStreamSynchronize(ctx->stream);
  cudaFree(dptr);
}

int ampc_cuda_wait(void *stream) {
  ampc_cuda_ctx *const ctx = g_bound;
  if (ctx && (void *)ctx->stream == stream)
    return (int)ctx_wait(ctx);
  return (int)cudaStreamSynchronize((cudaStream_t)stream);
}

void ampc_cuda_counters_get(const ampc_cuda_ctx *ctx, ampc_cuda_counters *out) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (ctx)
    *out = ctx->counters;
}

ampc_status ampc_cuda_profile_range(ampc_cuda_ctx *ctx, bool on) {
  if (!ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_profile_range: NULL context");
  CU(cudaSetDevice(ctx->device), "cudaSetDevice");
  CU(on ? cudaProfilerStart() : cudaProfilerStop(), on ? "cudaProfilerStart" : "cudaProfilerStop");
  return AMPC_OK;
}

/* A small copy goes through the pinned staging buffer: src is copied into
 * it (so the caller may reuse src at once) and the DMA is queued on the
 * stream without waiting, so the host keeps queueing the step's kernels
 * (the model puts a batch's inputs, masks, pair indices and targets
 * mid-step). The buffer is filled in order; when the next copy does not fit
 * the stream is synchronised (every earlier copy out of it done) and it is
 * reused from the start. Without pinned memory (cudaHostAlloc failed), and
 * for copies over PINNED_MAX_COPY, the copy is waited for. */
ampc_status ampc_cuda_to_device(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
  if (!ctx || (bytes && (!dst || !src)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_to_device: NULL");
  if (bytes == 0)
    return AMPC_OK;
  if (bytes <= PINNED_MAX_COPY && !ctx->pinned && !ctx->pinned_failed) {
    CU(cudaSetDevice(ctx->device), "cudaSetDevice");
    if (cudaHostAlloc(&ctx->pinned, PINNED_BYTES, cudaHostAllocPortable) != cudaSuccess) {
      ctx->pinned = NULL, ctx->pinned_failed = 1; /* pageable copies from now on */
      (void)cudaGetLastError();
    }
  }
  if (bytes <= PINNED_MAX_COPY && ctx->pinned) {
    const size_t need = (bytes + 255) & ~(size_t)255;
    if (ctx->staged + need > PINNED_BYTES) {
      CU(ctx_wait(ctx), "cudaStreamSynchronize");
      ctx->staged = 0;
    }
    char *p = (char *)ctx->pinned + ctx->staged;
    memcpy(p, src, bytes);
    CU(cudaMemcpyAsync(dst, p, bytes, cudaMemcpyHostToDevice, ctx->stream), "cudaMemcpy H2D");
    ctx->staged += need;
    return AMPC_OK;
  }
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream), "cudaMemcpy H2D");
  CU(ctx_wait(ctx), "cudaStreamSynchronize");
  return AMPC_OK;
}

ampc_status ampc_cuda_to_host(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
  if (!ctx || (bytes && (!dst || !src)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_to_host: NULL");
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream), "cudaMemcpy D2H");
  CU(ctx_wait(ctx), "cudaStreamSynchronize");
  return AMPC_OK;
}

ampc_status ampc_cuda_synchronize(ampc_cuda_ctx *ctx) {
  if (!ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_synchronize: NULL");
  CU(ctx_wait(ctx), "cudaStreamSynchronize");
  return AMPC_OK;
}

ampc_status ampc_cuda_fill_uniform(ampc_cuda_ctx *ctx, void *dst, ampc_dtype dt, int64_t count,
                                   float lo, float hi, uint64_t seed) {
  if (!ctx || (count > 0 && !dst) || count < 0 || (unsigned)dt >= AMPC_DTYPE_COUNT)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_fill_uniform: bad argument");
  if (count == 0)
    return AMPC_OK;
  CU((cudaError_t)ampc_cuda_k_fill_uniform(ctx->stream, dst, (int)dt, count, lo, hi, seed),
     "fill kernel");
  return AMPC_OK;
}

ampc_status ampc_cuda_timer_start(ampc_cuda_ctx *ctx) {
  if (!ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_timer_start: NULL");
  CU(cudaEventRecord(ctx->ev0, ctx->stream), "cudaEventRecord");
  return AMPC_OK;
}

ampc_status ampc_cuda_timer_stop(ampc_cuda_ctx *ctx, float *ms) {
  if (!ctx || !ms)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_timer_stop: NULL");
  CU(cudaEventRecord(ctx->ev1, ctx->stream), "cudaEventRecord");
  CU(cudaEventSynchronize(ctx->ev1), "cudaEventSynchronize");
  CU(cudaEventElapsedTime(ms, ctx->ev0, ctx->ev1), "cudaEventElapsedTime");
  return AMPC_OK;
}

uint64_t ampc_cuda_gemm_flops(const ampc_cuda_ctx *ctx) { return ctx ? ctx->flops : 0; }

ampc_status ampc_cuda_mem_info(ampc_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
  if (!ctx || !free_bytes || !total_bytes)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_cuda_mem_info: NULL argument");
  CU(cudaSetDevice(ctx->device), "cudaSetDevice");
  CU(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
  return AMPC_OK;
}

void ampc_cuda_gemm_cache_stats(const ampc_cuda_ctx *ctx, int64_t *queries, int *entries) {
  int n = 0;
  if (ctx)
    for (int i = 0; i < CACHE_SIZE; i++)
      n += ctx->cache[i].used;
  if (queries)
    *queries = ctx ? ctx->queries : 0;
  if (entries)
    *entries = n;
}

/* ---- the GEMM ----------------------------------------------------------- */

static cudaDataType_t cuda_dt(ampc_dtype dt) {
  switch (dt) {
  case AMPC_F16: return CUDA_R_16F;
  case AMPC_BF16: return CUDA_R_16BF;
  case AMPC_F8_E4M3: return CUDA_R_8F_E4M3;
  case AMPC_F8_E5M2: return CUDA_R_8F_E5M2;
  default: return CUDA_R_32F;
  }
}

static cublasComputeType_t cuda_compute(ampc_cuda_compute c) {
  switch (c) {
  case AMPC_CUDA_COMPUTE_16F: return CUBLAS_COMPUTE_16F;
  case AMPC_CUDA_COMPUTE_32F_PEDANTIC: return CUBLAS_COMPUTE_32F_PEDANTIC;
  case AMPC_CUDA_COMPUTE_32F_FAST_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
  default: return CUBLAS_COMPUTE_32F;
  }
}

/* the alignment a kernel may assume for an operand: its address, and every
 * row and batch start, i.e. the address, ld and stride in bytes together */
static int64_t operand_align(const void *p, int64_t ld, int64_t stride, ampc_dtype dt) {
  const uintptr_t es = ampc_dtype_size(dt);
  const uintptr_t u = (uintptr_t)p | (uintptr_t)ld * es | (uintptr_t)stride * es;
  return ampc_cuda_align_class((const void *)(u ? u : 256));
}

static plan_key make_key(const ampc_cuda_plan *p) {
  plan_key k;
  memset(&k, 0, sizeof k);
  k.trans_a = p->trans_a, k.trans_b = p->trans_b, k.m = p->m, k.n = p->n, k.k = p->k;
  k.a_dt = p->a_dt, k.b_dt = p->b_dt, k.d_dt = p->d_dt, k.c_dt = p->c_layout_dt;
  k.lda = p->lda, k.ldb = p->ldb, k.ldd = p->ldd, k.batch = p->batch;
  if (p->batch > 1)
    k.stride_a = p->stride_a, k.stride_b = p->stride_b, k.stride_d = p->stride_d;
  k.compute = p->compute;
  k.align_a = operand_align(p->a, p->lda, k.stride_a, p->a_dt);
  k.align_b = operand_align(p->b, p->ldb, k.stride_b, p->b_dt);
  k.align_d = operand_align(p->d, p->ldd, k.stride_d, p->d_dt);
  k.has_bias = p->bias != NULL;
  if (p->bias)
    k.bias_dt = p->bias_dt, k.align_bias = ampc_cuda_align_class(p->bias);
  k.has_scale_a = p->scale_a != NULL, k.has_scale_b = p->scale_b != NULL;
  k.has_scale_d = p->scale_d != NULL, k.has_amax = p->amax_d != NULL;
  return k;
}

static void entry_free(plan_entry *e) {
  if (e->la)
    cublasLtMatrixLayoutDestroy(e->la);
  if (e->lb)
    cublasLtMatrixLayoutDestroy(e->lb);
  if (e->lc)
    cublasLtMatrixLayoutDestroy(e->lc);
  if (e->ld)
    cublasLtMatrixLayoutDestroy(e->ld);
  if (e->desc)
    cublasLtMatmulDescDestroy(e->desc);
  memset(e, 0, sizeof *e);
}

static ampc_status make_layout(cublasLtMatrixLayout_t *l, ampc_dtype dt, int64_t rows, int64_t cols,
                               int64_t ld, int64_t batch, int64_t stride) {
  LT(cublasLtMatrixLayoutCreate(l, cuda_dt(dt), (uint64_t)rows, (uint64_t)cols, ld),
     "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t b32 = (int32_t)batch;
    LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b32, sizeof b32),
       "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
    LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                        sizeof stride),
       "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
  }
  return AMPC_OK;
}

static ampc_status set_ptr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *p,
                           const char *what) {
  LT(cublasLtMatmulDescSetAttribute(d, a, &p, sizeof p), what);
  return AMPC_OK;
}

/* the per-call pointers of the descriptor (the key fixes which are set) */
static ampc_status set_pointers(cublasLtMatmulDesc_t d, const ampc_cuda_plan *p, int with_amax) {
  ampc_status st = AMPC_OK;
  if (p->bias && st == AMPC_OK)
    st = set_ptr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p->bias, "BIAS_POINTER");
  if (p->scale_a && st == AMPC_OK)
    st = set_ptr(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p->scale_a, "A_SCALE_POINTER");
  if (p->scale_b && st == AMPC_OK)
    st = set_ptr(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p->scale_b, "B_SCALE_POINTER");
  if (p->scale_d && st == AMPC_OK)
    st = set_ptr(d, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, p->scale_d, "D_SCALE_POINTER");
  /* only for an FP8 D (Transformer Engine sets it only then too); a 16-bit
   * or FP32 D gets ampc's amax kernel and never this attribute */
  if (p->amax_d && with_amax && st == AMPC_OK)
    st = set_ptr(d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, p->amax_d, "AMAX_D_POINTER");
  return st;
}

/* descriptors, layouts and the heuristic's first algorithm for plan p */
static ampc_status entry_build(ampc_cuda_ctx *ctx, const ampc_cuda_plan *p, const plan_key *key,
                               int with_amax, plan_entry *e) {
  memset(e, 0, sizeof *e);
  e->key = *key;
  const cudaDataType_t scale_t = p->compute == AMPC_CUDA_COMPUTE_16F ? CUDA_R_16F : CUDA_R_32F;
  LT(cublasLtMatmulDescCreate(&e->desc, cuda_compute(p->compute), scale_t),
     "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
     "TRANSA");
  LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
     "TRANSB");
  if (p->bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bt = (int32_t)cuda_dt(p->bias_dt);
    LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
       "EPILOGUE");
    LT(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
       "BIAS_DATA_TYPE");
  }
  /* FP8: FAST_ACCUM stays 0 (its default), so Hopper's FP8 partial sums are
   * promoted to FP32 and the Tensor Core contract holds */
  ampc_status st = set_pointers(e->desc, p, with_amax);
  if (st != AMPC_OK)
    return st;
  st = make_layout(&e->la, p->a_dt, p->a_rows, p->a_cols, p->lda, p->batch, p->stride_a);
  if (st == AMPC_OK)
    st = make_layout(&e->lb, p->b_dt, p->b_rows, p->b_cols, p->ldb, p->batch, p->stride_b);
  if (st == AMPC_OK)
    st = make_layout(&e->lc, p->c_layout_dt, p->m, p->n, p->ldd, p->batch, p->stride_d);
  if (st == AMPC_OK)
    st = make_layout(&e->ld, p->d_dt, p->m, p->n, p->ldd, p->batch, p->stride_d);
  if (st != AMPC_OK)
    return st;

  cublasLtMatmulPreference_t pref = NULL;
  LT(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = ctx->ws_bytes;
  const uint32_t al[4] = {(uint32_t)key->align_a, (uint32_t)key->align_b, (uint32_t)key->align_d,
                          (uint32_t)key->align_d};
  const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
    s = cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]);
  /* split-K only with partial sums in the compute type: the INPLACE and
   * OUTPUT_TYPE schemes would round them to C's dtype, breaking "FP32 sums,
   * rounded once" */
  const uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red,
                                             sizeof red);
  /* the first algorithm, or with tuning up to 8 candidates for tune_entry */
  enum { NCAND = sizeof e->cand / sizeof e->cand[0] };
  cublasLtMatmulHeuristicResult_t res[NCAND];
  const int want = ampc_cuda_gemm_tuning() ? NCAND : 1;
  int found = 0;
  memset(res, 0, sizeof res);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, e->desc, e->la, e->lb, e->lc, e->ld, pref, want,
                                       res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  ctx->queries++;
  if (s != CUBLAS_STATUS_SUCCESS)
    return lt_fail(s, "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "cuBLASLt has no algorithm for this GEMM (%s x %s -> %s, compute %d)",
                     ampc_dtype_name(p->a_dt), ampc_dtype_name(p->b_dt), ampc_dtype_name(p->d_dt),
                     (int)p->compute);
  e->algo = res[0].algo;
  for (int i = 0; i < found && i < NCAND; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS)
      e->cand[e->ncand++] = res[i].algo;
  e->tuned = e->ncand < 2;
  e->used = 1;
  return AMPC_OK;
}

/* 1: GEMM tuning on; 0: off; -1: not yet set, AMPC_CUDA_GEMM_TUNE decides at
 * the first plan */
static int g_tune = -1;
static pthread_mutex_t g_tune_mu = PTHREAD_MUTEX_INITIALIZER;

void ampc_cuda_set_gemm_tuning(bool on) {
  pthread_mutex_lock(&g_tune_mu);
  g_tune = on ? 1 : 0;
  pthread_mutex_unlock(&g_tune_mu);
}

bool ampc_cuda_gemm_tuning(void) {
  pthread_mutex_lock(&g_tune_mu);
  if (g_tune < 0) {
    const char *v = getenv("AMPC_CUDA_GEMM_TUNE");
    g_tune = v && (strcmp(v, "1") == 0 || strcmp(v, "on") == 0);
  }
  const int t = g_tune;
  pthread_mutex_unlock(&g_tune_mu);
  return t != 0;
}

/* Time the plan's candidates on this call's operands and keep the fastest
 * (e->algo): each writes a temporary D (C, when beta reads it, is the
 * call's D, only read), one run to check it works, then three between two
 * events; the least time wins. Done once per plan; any failure (no memory
 * for the temporary D, an event) keeps the heuristic's first algorithm.
 * Not for FP8 D or an amax (their scale and amax outputs would be written).
 * A plan evicted from the cache (past 256 shapes, round-robin) is tuned
 * again when it comes back.
 * XLA autotunes its cuBLASLt GEMMs the same way (xla/service/gpu, the
 * gemm autotuner); cuBLASLt's heuristic orders its candidates by an
 * estimate only. */
static void tune_entry(ampc_cuda_ctx *ctx, plan_entry *e, const ampc_cuda_plan *p,
                       const void *alpha, const void *beta, const void *c_ptr) {
  e->tuned = 1;
  if (e->ncand < 2 || is_fp8(p->d_dt) || p->amax_d || p->scale_d)
    return;
  /* D is column-major for cuBLASLt: m x n, leading dimension ldd */
  const size_t span = (size_t)((p->batch - 1) * p->stride_d + (p->n - 1) * p->ldd + p->m) *
                      ampc_dtype_size(p->d_dt);
  void *tmp = NULL;
  cudaEvent_t t0 = NULL, t1 = NULL;
  if (cudaMalloc(&tmp, span) != cudaSuccess)
    tmp = NULL;
  if (tmp && cudaEventCreate(&t0) != cudaSuccess)
    t0 = NULL;
  if (t0 && cudaEventCreate(&t1) != cudaSuccess)
    t1 = NULL;
  const int ready = tmp && t0 && t1;
  float best = 0.0f;
  int won = -1;
  for (int i = 0; i < e->ncand && ready; i++) {
    if (cublasLtMatmul(ctx->lt, e->desc, alpha, p->a, e->la, p->b, e->lb, beta, c_ptr, e->lc, tmp,
                       e->ld, &e->cand[i], ctx->workspace, ctx->ws_bytes,
                       ctx->stream) != CUBLAS_STATUS_SUCCESS)
      continue;
    int ok = cudaEventRecord(t0, ctx->stream) == cudaSuccess;
    for (int r = 0; r < 3 && ok; r++)
      ok = cublasLtMatmul(ctx->lt, e->desc, alpha, p->a, e->la, p->b, e->lb, beta, c_ptr, e->lc,
                          tmp, e->ld, &e->cand[i], ctx->workspace, ctx->ws_bytes,
                          ctx->stream) == CUBLAS_STATUS_SUCCESS;
    float ms = 0.0f; /* the wait counted as the host's (ampc_cuda_counters) */
    ok = ok && cudaEventRecord(t1, ctx->stream) == cudaSuccess && ctx_wait(ctx) == cudaSuccess &&
         cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess;
    if (ok && (won < 0 || ms < best))
      best = ms, won = i;
  }
  if (won >= 0) {
    e->algo = e->cand[won];
    ctx->counters.tuned++;
  }
  if (t0)
    cudaEventDestroy(t0);
  if (t1)
    cudaEventDestroy(t1);
  if (tmp) {
    (void)ctx_wait(ctx);
    cudaFree(tmp);
  }
  (void)cudaGetLastError(); /* a failed allocation is not sticky: clear it for later checks */
}

/* FNV-1a over the key's 64-bit fields: the lookup compares one word per
 * cached plan, not up to the whole key (a step makes ~700 lookups) */
static uint64_t key_hash(const plan_key *k) {
  const int64_t *f = (const int64_t *)k;
  uint64_t h = 1469598103934665603u;
  for (size_t i = 0; i < sizeof *k / sizeof *f; i++)
    h = (h ^ (uint64_t)f[i]) * 1099511628211u;
  return h;
}

static ampc_status find_entry(ampc_cuda_ctx *ctx, const ampc_cuda_plan *p, plan_entry **out) {
  const plan_key key = make_key(p);
  const uint64_t hash = key_hash(&key);
  for (int i = 0; i < CACHE_SIZE; i++)
    if (ctx->cache[i].used && ctx->cache[i].hash == hash &&
        memcmp(&ctx->cache[i].key, &key, sizeof key) == 0) {
      *out = &ctx->cache[i];
      return AMPC_OK;
    }
  int slot = -1;
  for (int i = 0; i < CACHE_SIZE && slot < 0; i++)
    if (!ctx->cache[i].used)
      slot = i;
  if (slot < 0) { /* round-robin replacement */
    slot = ctx->next_victim;
    ctx->next_victim = (ctx->next_victim + 1) % CACHE_SIZE;
    entry_free(&ctx->cache[slot]);
  }
  plan_entry *e = &ctx->cache[slot];
  const int own_amax = p->amax_d && !is_fp8(p->d_dt);
  ampc_status st = entry_build(ctx, p, &key, p->amax_d && !own_amax, e);
  e->own_amax = own_amax;
  e->hash = hash;
  if (st != AMPC_OK) {
    entry_free(e);
    return st;
  }
  *out = e;
  return AMPC_OK;
}

ampc_status ampc_cuda_gemm(ampc_cuda_ctx *ctx, const ampc_cuda_gemm_args *args) {
  static const char fn[] = "ampc_cuda_gemm";
  if (!ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: NULL context", fn);
  ampc_cuda_plan p;
  ampc_status st = ampc_cuda_plan_gemm(fn, args, &p);
  if (st != AMPC_OK || p.noop)
    return st;
  if (p.batch > INT32_MAX)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: batch %lld > 2^31 - 1", fn, (long long)p.batch);
  CU(cudaSetDevice(ctx->device), "cudaSetDevice");
  if (p.k_zero) { /* D = beta * D (+ bias), as BLAS: A and B are not read */
    if (p.amax_d || is_fp8(p.d_dt))
      return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: K = 0 or alpha = 0 with FP8 C or amax", fn);
    CU((cudaError_t)ampc_cuda_k_scale(ctx->stream, p.d, (int)p.d_dt, p.m, p.n, p.ldd, p.stride_d,
                                      p.batch, p.beta, p.bias, (int)p.bias_dt),
       "scale kernel");
    return AMPC_OK;
  }
  plan_entry *e;
  st = find_entry(ctx, &p, &e);
  if (st != AMPC_OK)
    return st;
  st = set_pointers(e->desc, &p, p.amax_d && !e->own_amax);
  if (st != AMPC_OK)
    return st;
  const void *alpha, *beta;
  float a32 = p.alpha, b32 = p.beta;
  uint16_t a16 = ampc_f32_to_f16(p.alpha).bits, b16 = ampc_f32_to_f16(p.beta).bits;
  if (p.compute == AMPC_CUDA_COMPUTE_16F)
    alpha = &a16, beta = &b16;
  else
    alpha = &a32, beta = &b32;
  /* an FP8 D takes no C (beta = 0): C is NULL, as Transformer Engine passes
   * it, since C == D would need C's layout to equal D's */
  const void *c_ptr = is_fp8(p.d_dt) ? NULL : p.d;
  if (!e->tuned)
    tune_entry(ctx, e, &p, alpha, beta, c_ptr);
  LT(cublasLtMatmul(ctx->lt, e->desc, alpha, p.a, e->la, p.b, e->lb, beta, c_ptr, e->lc, p.d, e->ld,
                    &e->algo, ctx->workspace, ctx->ws_bytes, ctx->stream),
     "cublasLtMatmul");
  ctx->counters.matmuls++;
  ctx->flops += 2u * (uint64_t)p.m * (uint64_t)p.n * (uint64_t)p.k * (uint64_t)p.batch;
  if (p.amax_d && e->own_amax)
    CU((cudaError_t)ampc_cuda_k_amax(ctx->stream, p.d, (int)p.d_dt, p.m, p.n, p.ldd, p.stride_d,
                                     p.batch, p.amax_d),
       "amax kernel");
  return AMPC_OK;
}
