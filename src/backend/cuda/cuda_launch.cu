/*
 * src/backend/cuda/cuda_launch.cu: the launch runtime the CUDA layers share
 * (cuda_common.cuh): the typed-kernel switch and its launch count, the
 * bound context and its stream for a launch (ampc_cu_begin), the launch
 * check, and the round-stats counters a store kernel fills and the host
 * reads back into ampc_round_stats and the bound rounding tally.
 */
#include <atomic>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

using namespace ampc_cu;

/* the typed launches so far (ampc_cuda_typed_launches: the tests' proof
 * that a typed path ran) */
static std::atomic<long long> g_typed_launches{0};
void ampc_cu::typed_launched(void) { g_typed_launches.fetch_add(1, std::memory_order_relaxed); }

/* 1: the typed instantiations (cuda_common.cuh); 0: the generic kernels
 * only; -1: not yet set, AMPC_CUDA_TYPED decides at the first use */
static std::atomic<int> g_typed{-1};
bool ampc_cu_typed(void) {
  int v = g_typed.load(std::memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("AMPC_CUDA_TYPED");
    v = e && (strcmp(e, "1") == 0 || strcmp(e, "on") == 0);
    int unset = -1; /* a setter's value wins */
    if (!g_typed.compare_exchange_strong(unset, v))
      v = g_typed.load(std::memory_order_relaxed);
  }
  return v != 0;
}

/* ---- host side: checks, launches ------------------------------------------ */

ampc_status ampc_cu_begin(const char *fn, ampc_cuda_ctx **ctx, cudaStream_t *stream) {
  *ctx = ampc_cuda_current();
  if (!*ctx)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: no CUDA context is bound (ampc_cuda_bind)", fn);
  *stream = (cudaStream_t)ampc_cuda_ctx_stream(*ctx);
  /* the context's device current for the launches (as ampc_cuda_gemm does) */
  const cudaError_t e = cudaSetDevice(ampc_cuda_ctx_device(*ctx));
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "%s: cudaSetDevice: %s", fn, cudaGetErrorString(e));
  return AMPC_OK;
}

ampc_status ampc_cu_launched(const char *fn) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess)
    return AMPC_OK;
  return ampc_fail(AMPC_ERR_DEVICE, "%s: kernel launch: CUDA error %d (%s): %s", fn, (int)e,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

/* the counter block a begin takes next (8 rotate: see cuda_common.cuh) */
static thread_local unsigned g_stats_turn;
enum { STATS_BLOCKS = 8 };

ampc_status ampc_cu_stats_begin(ampc_cuda_ctx *ctx, cudaStream_t s, ampc_round_stats *stats,
                                dev_stats **out) {
  *out = NULL;
  const bool tally = ampc_cu_tally_on();
  if (!stats && !tally)
    return AMPC_OK;
  void *p = NULL;
  AMPC_TRY(ampc_cuda_ctx_scratch(ctx, 0, STATS_BLOCKS * sizeof(dev_stats), &p));
  dev_stats *d = static_cast<dev_stats *>(p) + (g_stats_turn++ % STATS_BLOCKS);
  /* without a tally the histogram stays off and is neither cleared nor read */
  const size_t head = offsetof(dev_stats, hist);
  cudaError_t e = cudaMemsetAsync(d, 0, tally ? sizeof(dev_stats) : head, s);
  if (e == cudaSuccess && tally)
    e = cudaMemsetAsync(&d->hist_on, 1, 1, s); /* hist_on = 1 (little-endian int) */
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "round stats: cudaMemsetAsync: %s", cudaGetErrorString(e));
  *out = d;
  return AMPC_OK;
}

ampc_status ampc_cu_stats_end(cudaStream_t s, const dev_stats *d, ampc_round_stats *stats) {
  if (!d)
    return AMPC_OK;
  ampc_tally *const t = ampc_tally_current();
  static thread_local dev_stats h;
  const size_t bytes = t ? sizeof h : offsetof(dev_stats, hist);
  cudaError_t e = cudaMemcpyAsync(&h, d, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess)
    e = (cudaError_t)ampc_cuda_wait(s);
  if (e != cudaSuccess)
    return ampc_fail(AMPC_ERR_DEVICE, "round stats: copy back: %s", cudaGetErrorString(e));
  ampc_round_stats r;
  r.count = h.count, r.underflow = h.underflow, r.subnormal = h.subnormal;
  r.overflow = h.overflow, r.inf = h.inf, r.nan = h.nan;
  memcpy(&r.max_abs, &h.max_abs_bits, sizeof r.max_abs);
  if (stats)
    ampc_round_stats_merge(stats, &r);
  if (t && h.hist_on && h.count) { /* a tally bound at begin and still at end */
    static thread_local ampc_tm_stats tm;
    tm.r = r;
    tm.zeros = h.zeros;
    for (int i = 0; i < AMPC_TM_BINS; i++)
      tm.hist[i] = h.hist[i];
    ampc_tally_add(t, &tm);
  }
  return AMPC_OK;
}

extern "C" {

void ampc_cuda_set_typed_kernels(bool on) { g_typed.store(on ? 1 : 0); }
bool ampc_cuda_typed_kernels(void) { return ampc_cu_typed(); }
long long ampc_cuda_typed_launches(void) { return g_typed_launches.load(); }

} /* extern "C" */
