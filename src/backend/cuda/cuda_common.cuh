/*
 * src/backend/cuda/cuda_common.cuh: what the CUDA layer files (cuda_launch.cu, the layer files,
 * cuda_optim.cu) share: element loads and stores in ampc's dtypes with
 * CUDA's round-to-nearest-even intrinsics, the exact rounding counters of a
 * store (ampc_round_stats on the device: warp-reduced, one atomic per warp),
 * warp reductions, launch shapes, and the host-side argument checks and
 * error mapping. Compiled with --fmad=false (CMakeLists.txt): no multiply-add
 * is contracted into an fma the C code does not have.
 */
#ifndef AMPC_CUDA_COMMON_CUH
#define AMPC_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_nn.h"
#include "ampc/tally.h"
#include "backend/cuda/cuda_impl.h"

namespace ampc_cu {

/* ampc_dtype values (ampc/dtype.h) */
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };
enum { THREADS = 256, WARPS = THREADS / 32 };

__device__ __forceinline__ float ld(const void *p, int dt, int64_t i) {
  switch (dt) {
  case DT_F16: return __half2float(static_cast<const __half *>(p)[i]);
  case DT_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  default: return static_cast<const float *>(p)[i];
  }
}

/* element i's bits as stored (16-bit dtypes in the low half), and the
 * value of such bits: widen(raw_bits(p, dt, i), dt) == ld(p, dt, i). Apart,
 * a thread can issue many loads before it waits for the first (a load
 * converted at once stalls there) */
__device__ __forceinline__ uint32_t raw_bits(const void *p, int dt, int64_t i) {
  if (dt == DT_F32)
    return __float_as_uint(static_cast<const float *>(p)[i]);
  return static_cast<const uint16_t *>(p)[i];
}
__device__ __forceinline__ float widen(uint32_t b, int dt) {
  switch (dt) {
  case DT_F16: return __half2float(__ushort_as_half((unsigned short)b));
  case DT_BF16: return __bfloat162float(__ushort_as_bfloat16((unsigned short)b));
  default: return __uint_as_float(b);
  }
}

/* store v rounded to dt; returns the stored bits (F32: the float's bits) */
__device__ __forceinline__ uint32_t st(void *p, int dt, int64_t i, float v) {
  switch (dt) {
  case DT_F16: {
    const __half h = __float2half_rn(v);
    static_cast<__half *>(p)[i] = h;
    return __half_as_ushort(h);
  }
  case DT_BF16: {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    static_cast<__nv_bfloat16 *>(p)[i] = h;
    return __bfloat16_as_ushort(h);
  }
  default: static_cast<float *>(p)[i] = v; return __float_as_uint(v);
  }
}

/* the bits st() would store for v in dt, without storing */
__device__ __forceinline__ uint32_t rbits(float v, int dt) {
  switch (dt) {
  case DT_F16: return __half_as_ushort(__float2half_rn(v));
  case DT_BF16: return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  default: return __float_as_uint(v);
  }
}

/* v rounded to dt and widened back */
__device__ __forceinline__ float rnd(float v, int dt) {
  switch (dt) {
  case DT_F16: return __half2float(__float2half_rn(v));
  case DT_BF16: return __bfloat162float(__float2bfloat16_rn(v));
  default: return v;
  }
}

/* ampc_round_stats on the device (every counter 64-bit for the atomics),
 * and with hist_on (a rounding tally, ampc/tally.h, is bound on the host) the
 * tally's FP32 side: zeros and the exponent histogram of the values stored */
struct dev_stats {
  unsigned long long count, underflow, subnormal, overflow, inf, nan;
  unsigned int max_abs_bits;
  int hist_on;
  unsigned long long zeros;
  unsigned long long hist[AMPC_TM_BINS];
};

/* one thread's counts; flush() adds a warp's counts with one atomic each.
 * Every lane of the warp must call flush (kernels that count have no early
 * return before it). The histogram goes straight to the device counters,
 * aggregated over the lanes that store a value of the same exponent. */
struct lstats {
  uint32_t n, uf, sub, of, inf, nan, maxb, z;
  unsigned long long *hist;
  __device__ explicit lstats(const dev_stats *ds)
      : n(0), uf(0), sub(0), of(0), inf(0), nan(0), maxb(0), z(0),
        hist(ds && ds->hist_on ? const_cast<unsigned long long *>(ds->hist) : nullptr) {}
  /* x: the FP32 value rounded, out: the stored bits in dt (as store.c's
   * count1 and tally.c's count16/count32) */
  __device__ __forceinline__ void add(float x, int dt, uint32_t out) {
    const uint32_t ax = __float_as_uint(x) & 0x7FFFFFFFu;
    const bool finite_in = ax < 0x7F800000u;
    uint32_t e, m, emax;
    if (dt == DT_F16)
      e = (out >> 10) & 0x1Fu, m = out & 0x3FFu, emax = 0x1Fu;
    else if (dt == DT_BF16)
      e = (out >> 7) & 0xFFu, m = out & 0x7Fu, emax = 0xFFu;
    else
      e = (out >> 23) & 0xFFu, m = out & 0x7FFFFFu, emax = 0xFFu;
    const bool zero = e == 0 && m == 0, subn = e == 0 && m != 0;
    const bool isinf = e == emax && m == 0, isnan = e == emax && m != 0;
    n++;
    uf += finite_in && ax != 0 && zero;
    sub += subn;
    of += finite_in && (isinf || isnan);
    inf += isinf;
    nan += isnan;
    if (finite_in && ax > maxb)
      maxb = ax;
    if (hist && finite_in) {
      if (ax == 0) {
        z++;
      } else { /* the lanes here with the same exponent add once */
        const uint32_t bin = ax >> 23;
        const unsigned same = __match_any_sync(__activemask(), bin);
        if ((int)(threadIdx.x & 31) == __ffs(same) - 1)
          atomicAdd(&hist[bin], (unsigned long long)__popc(same));
      }
    }
  }
  __device__ void flush(dev_stats *s) {
    if (!s)
      return;
    uint32_t v[8] = {n, uf, sub, of, inf, nan, maxb, z};
    for (int k = 0; k < 8; k++)
      for (int o = 16; o > 0; o >>= 1) {
        const uint32_t w = __shfl_down_sync(0xFFFFFFFFu, v[k], o);
        v[k] = k == 6 ? (w > v[k] ? w : v[k]) : v[k] + w;
      }
    if ((threadIdx.x & 31) == 0) {
      unsigned long long *const c[6] = {&s->count,    &s->underflow, &s->subnormal,
                                        &s->overflow, &s->inf,       &s->nan};
      for (int k = 0; k < 6; k++)
        if (v[k])
          atomicAdd(c[k], (unsigned long long)v[k]);
      if (v[6])
        atomicMax(&s->max_abs_bits, v[6]);
      if (v[7])
        atomicAdd(&s->zeros, (unsigned long long)v[7]);
    }
  }
};

/* st() counted into ls when ds (the kernel's counters) is given */
__device__ __forceinline__ void cst(void *p, int dt, int64_t i, float v, lstats &ls,
                                    const dev_stats *ds) {
  const uint32_t o = st(p, dt, i, v);
  if (ds)
    ls.add(v, dt, o);
}

/* warp all-reduce (every lane gets the result; a fixed butterfly order) */
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float warp_sumf(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
/* the larger, NaN ignored (as the CPU's `v > mx ? v : mx`) */
__device__ __forceinline__ float warp_maxf(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/* ---- the typed kernels ------------------------------------------------------
 * A kernel that takes its dtypes as arguments (ld/st switch on them per
 * element) can also be instantiated with them as template constants, the
 * switches then folded away: the same source, so the same operations in the
 * same order and the same bits, in less code (a row kernel unrolled over
 * three dtypes per load is thousands of instructions). TDT(T, r): the
 * template constant T, or the argument r where T is -1 (the generic
 * instantiation, every dtype). ampc_cu_typed() says whether the layers
 * launch the typed instantiations where they have one for the dtypes at
 * hand (ampc_cuda_set_typed_kernels; AMPC_CUDA_TYPED=1). */
#define TDT(T, r) ((T) >= 0 ? (T) : (r))

/* a dtype combination as a type: a, b, c are DT_ values */
template <int A, int B, int C> struct dts { static constexpr int a = A, b = B, c = C; };
/* Call f(L{}) for the first combination L of the list with (a, b, c) equal
 * to (L::a, L::b, L::c) (an unused position: 0 on both sides); false when
 * none matches (the caller launches the generic kernel). */
void typed_launched(void); /* counts a typed launch (ampc_cuda_typed_launches) */
template <typename F, typename... L> bool typed_pick(int a, int b, int c, F &&f, L... l) {
  bool hit = false;
  ((!hit && a == L::a && b == L::b && c == L::c ? (f(l), hit = true) : false), ...);
  if (hit)
    typed_launched();
  return hit;
}
/* the presets' combinations of (stream, parameter, activation) dtypes:
 * 32-true; 16-mixed; bf16-mixed and fp8-mixed; 16-true; bf16-true */
#define DTS_PRESETS                                                                                \
  dts<0, 0, 0>{}, dts<0, 1, 1>{}, dts<0, 2, 2>{}, dts<1, 1, 1>{}, dts<2, 2, 2> {}

/* blocks for a grid-stride loop over n items */
static inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + THREADS - 1) / THREADS;
  return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

} // namespace ampc_cu

/* ---- host side ---------------------------------------------------------- */

/* src/internal.h's error setter (C linkage) and early return */
extern "C" ampc_status ampc_fail(ampc_status s, const char *fmt, ...);
#ifndef AMPC_TRY
#define AMPC_TRY(call)                                                                             \
  do {                                                                                             \
    const ampc_status try_st_ = (call);                                                            \
    if (try_st_ != AMPC_OK)                                                                        \
      return try_st_;                                                                              \
  } while (0)
#endif

/* The bound context and its stream, or an error naming fn. */
ampc_status ampc_cu_begin(const char *fn, ampc_cuda_ctx **ctx, cudaStream_t *stream);
/* AMPC_ERR_DEVICE naming fn when the last launch failed, else AMPC_OK. */
ampc_status ampc_cu_launched(const char *fn);
/* Device counters for a store, zeroed on the stream: NULL when stats is NULL
 * and no rounding tally is bound to the calling thread (ampc/tally.h); with
 * a tally, the histogram side too. ampc_cu_stats_end waits for the stream
 * and adds them into stats and into the bound tally. Take them after any
 * nested call that counts on its own (a GEMM, another layer): the counters
 * rotate through 8 blocks, so a block outlives 7 later begins only. */
ampc_status ampc_cu_stats_begin(ampc_cuda_ctx *ctx, cudaStream_t s, ampc_round_stats *stats,
                                ampc_cu::dev_stats **out);
ampc_status ampc_cu_stats_end(cudaStream_t s, const ampc_cu::dev_stats *d, ampc_round_stats *stats);
/* the typed instantiations are on (see TDT above) */
bool ampc_cu_typed(void);
/* Rows 0..n-1 grouped by their id, on strm (cuda_launch.cu): ids [n]
 * in [0, nid) (another id: the row is in no group); start [nid + 1] gets
 * each id's first place in sorted (start[nid]: the rows grouped), sorted
 * [n] the rows of id g at start[g] .. start[g + 1] - 1 in increasing order;
 * rank [n] is scratch. All int32 device memory. Errors: AMPC_ERR_DEVICE
 * naming fn. */
ampc_status ampc_cu_group_rows(const char *fn, cudaStream_t strm, int64_t n, const int32_t *ids,
                               int64_t nid, int32_t *start, int32_t *rank, int32_t *sorted);
/* a rounding tally is bound: every store the CPU's twin counts is counted */
static inline bool ampc_cu_tally_on(void) { return ampc_tally_current() != NULL; }
/* F32, F16 or BF16 */
static inline bool ampc_cu_dt_ok(ampc_dtype dt) {
  return dt == AMPC_F32 || dt == AMPC_F16 || dt == AMPC_BF16;
}

/* ctx and strm: the bound context and its stream, or return the error */
#define CU_BEGIN(fn)                                                                               \
  ampc_cuda_ctx *ctx = NULL;                                                                       \
  cudaStream_t strm = NULL;                                                                        \
  AMPC_TRY(ampc_cu_begin(fn, &ctx, &strm))
/* dst: the device counters of a store with stats (NULL without); FINISH
 * checks the launch and adds the counts into stats (waiting for the stream) */
#define STATS_BEGIN(stats)                                                                         \
  ampc_cu::dev_stats *dst = NULL;                                                                  \
  AMPC_TRY(ampc_cu_stats_begin(ctx, strm, stats, &dst))
#define FINISH(fn, stats)                                                                          \
  AMPC_TRY(ampc_cu_launched(fn));                                                                  \
  return ampc_cu_stats_end(strm, dst, stats)
#define CU_CHECK_POS(fn, v)                                                                        \
  do {                                                                                             \
    if ((v) < 1)                                                                                   \
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s must be positive (got %lld)", fn, #v,         \
                       (long long)(v));                                                            \
  } while (0)
#define CU_CHECK_PTR(fn, p)                                                                        \
  do {                                                                                             \
    if (!(p))                                                                                      \
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s is NULL", fn, #p);                            \
  } while (0)
#define CU_CHECK_DT(fn, dt)                                                                        \
  do {                                                                                             \
    if (!ampc_cu_dt_ok(dt))                                                                        \
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: %s must be F32, F16 or BF16 (got %d)", fn, #dt,  \
                       (int)(dt));                                                                 \
  } while (0)

#endif
