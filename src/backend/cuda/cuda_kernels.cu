/*
 * src/backend/cuda/cuda_kernels.cu: the CUDA backend's few device kernels beside
 * cuBLASLt: device-side uniform fill (test and benchmark data), D = beta * D
 * (+ bias) for the K = 0 / alpha = 0 GEMM, and max |D| for an FP8 GEMM whose
 * amax cuBLASLt does not fuse. Declared in cuda_impl.h (C linkage).
 *
 * Conversions use CUDA's own intrinsics, whose rounding ampc's host
 * conversions match (RNE; FP8 __NV_SATFINITE, as ampc_convert with
 * AMPC_CONVERT_SATURATE; tests/test_fp8_cuda_oracle.cu checks the host side).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_impl.h"

namespace {

/* ampc_dtype values (ampc/dtype.h) */
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_E4M3 = 3, DT_E5M2 = 4 };

__device__ __forceinline__ uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ void store(void *p, int dt, int64_t i, float v) {
  switch (dt) {
  case DT_F16: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
  case DT_BF16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
  case DT_E4M3:
    static_cast<__nv_fp8_storage_t *>(p)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    break;
  case DT_E5M2:
    static_cast<__nv_fp8_storage_t *>(p)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
    break;
  default: static_cast<float *>(p)[i] = v; break;
  }
}

__device__ __forceinline__ float load(const void *p, int dt, int64_t i) {
  switch (dt) {
  case DT_F16: return __half2float(static_cast<const __half *>(p)[i]);
  case DT_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  default: return static_cast<const float *>(p)[i];
  }
}

__global__ void fill_uniform_k(void *dst, int dt, int64_t count, float lo, float hi,
                               uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float u = (float)(mix64(seed ^ ((uint64_t)i * 0xD1B54A32D192ED03ull)) >> 40) * 0x1p-24f;
    store(dst, dt, i, __fmaf_rn(hi - lo, u, lo));
  }
}

/* column-major rows x cols x batch: element e -> offset */
__device__ __forceinline__ int64_t offset_of(int64_t e, int64_t rows, int64_t cols, int64_t ld,
                                             int64_t stride) {
  const int64_t r = e % rows, rest = e / rows;
  return (rest / cols) * stride + (rest % cols) * ld + r;
}

__global__ void scale_k(void *d, int dt, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                        int64_t total, float beta, const void *bias, int bias_dt) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = offset_of(e, rows, cols, ld, stride);
    float v = beta == 0.0f ? 0.0f : beta * load(d, dt, o);
    if (bias)
      v += load(bias, bias_dt, e % rows);
    store(d, dt, o, v);
  }
}

__global__ void amax_k(const void *d, int dt, int64_t rows, int64_t cols, int64_t ld,
                       int64_t stride, int64_t total, float *amax) {
  /* |x| as an int orders like the float (NaN's bits above inf's: NaN wins) */
  unsigned int m = 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const unsigned int b =
        __float_as_uint(load(d, dt, offset_of(e, rows, cols, ld, stride))) & 0x7FFFFFFFu;
    m = b > m ? b : m;
  }
  for (int off = 16; off > 0; off /= 2) {
    const unsigned int o = __shfl_down_sync(0xFFFFFFFFu, m, off);
    m = o > m ? o : m;
  }
  if ((threadIdx.x & 31) == 0)
    atomicMax(reinterpret_cast<unsigned int *>(amax), m);
}

int grid_for(int64_t n) {
  const int64_t g = (n + 255) / 256;
  return (int)(g < 4096 ? (g > 0 ? g : 1) : 4096);
}

} // namespace

extern "C" int ampc_cuda_k_fill_uniform(void *stream, void *dst, int dt, int64_t count, float lo,
                                        float hi, uint64_t seed) {
  fill_uniform_k<<<grid_for(count), 256, 0, static_cast<cudaStream_t>(stream)>>>(dst, dt, count, lo,
                                                                                 hi, seed);
  return (int)cudaGetLastError();
}

extern "C" int ampc_cuda_k_scale(void *stream, void *d, int dt, int64_t rows, int64_t cols,
                                 int64_t ld, int64_t stride, int64_t batch, float beta,
                                 const void *bias, int bias_dt) {
  const int64_t total = rows * cols * batch;
  scale_k<<<grid_for(total), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      d, dt, rows, cols, ld, stride, total, beta, bias, bias_dt);
  return (int)cudaGetLastError();
}

extern "C" int ampc_cuda_k_amax(void *stream, const void *d, int dt, int64_t rows, int64_t cols,
                                int64_t ld, int64_t stride, int64_t batch, float *amax) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), s);
  if (e != cudaSuccess)
    return (int)e;
  const int64_t total = rows * cols * batch;
  amax_k<<<grid_for(total), 256, 0, s>>>(d, dt, rows, cols, ld, stride, total, amax);
  return (int)cudaGetLastError();
}
