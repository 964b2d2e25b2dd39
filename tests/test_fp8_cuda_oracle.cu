/*
 * tests/test_fp8_cuda_oracle.cu: optional test, built only when a CUDA
 * toolkit is installed (no GPU needed: it runs the host code of cuda_fp8.h,
 * cuda_fp16.h and cuda_bf16.h). For all 2^32 FP32 patterns:
 *   - ampc FP32 -> E4M3 / E5M2 (both saturation modes) == __nv_cvt_float_to_fp8;
 *   - ampc FP32 -> F16 == __float2half_rn and -> BF16 == __float2bfloat16_rn
 *     for every non-NaN input (CUDA's host code canonicalises NaNs; ampc keeps
 *     the payload as F16C does);
 * and for all 256 FP8 codes, ampc's decode == CUDA's decode through half.
 * Exits non-zero on any mismatch.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <omp.h>
#include <stdio.h>

#include "numeric/numeric.h"

int main(void) {
  unsigned long long bad = 0;
  for (unsigned v = 0; v < 256; v++) {
    for (int f = 0; f < 2; f++) {
      __nv_fp8_interpretation_t in = f ? __NV_E5M2 : __NV_E4M3;
      __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, in);
      uint32_t want = ampc_f16bits_to_f32bits(h.x);
      uint32_t got =
          f ? ampc_e5m2bits_to_f32bits((uint8_t)v) : ampc_e4m3bits_to_f32bits((uint8_t)v);
      if (got != want) {
        fprintf(stderr, "decode %s 0x%02x: ampc 0x%08x cuda 0x%08x\n", f ? "e5m2" : "e4m3", v, got,
                want);
        bad++;
      }
    }
  }
#pragma omp parallel for schedule(dynamic, 256) reduction(+ : bad)
  for (long long blk = 0; blk < (1LL << 16); blk++) {
    for (uint32_t i = 0; i < (1u << 16); i++) {
      const uint32_t x = (uint32_t)(blk << 16) | i;
      const float fx = ampc_bits_f32(x);
      for (int sat = 0; sat < 2; sat++) {
        __nv_saturation_t s = sat ? __NV_SATFINITE : __NV_NOSAT;
        uint8_t c4 = __nv_cvt_float_to_fp8(fx, s, __NV_E4M3);
        uint8_t c5 = __nv_cvt_float_to_fp8(fx, s, __NV_E5M2);
        if (c4 != ampc_f32bits_to_e4m3bits(x, sat) || c5 != ampc_f32bits_to_e5m2bits(x, sat)) {
          if (bad < 8)
            fprintf(stderr, "fp8 x=0x%08x sat=%d: cuda %02x %02x ampc %02x %02x\n", x, sat, c4, c5,
                    ampc_f32bits_to_e4m3bits(x, sat), ampc_f32bits_to_e5m2bits(x, sat));
          bad++;
        }
      }
      if ((x & 0x7FFFFFFFu) <= 0x7F800000u) {
        __half_raw hr = __half_raw(__float2half_rn(fx));
        __nv_bfloat16_raw br = __nv_bfloat16_raw(__float2bfloat16_rn(fx));
        if (hr.x != ampc_f32bits_to_f16bits(x) || br.x != ampc_f32bits_to_bf16bits(x)) {
          if (bad < 8)
            fprintf(stderr, "16-bit x=0x%08x: cuda %04x %04x ampc %04x %04x\n", x, hr.x, br.x,
                    ampc_f32bits_to_f16bits(x), ampc_f32bits_to_bf16bits(x));
          bad++;
        }
      }
    }
  }
  fprintf(stderr, "cuda_fp8.h/cuda_fp16.h/cuda_bf16.h oracle: %llu mismatches over 2^32 inputs\n",
          bad);
  return bad ? 1 : 0;
}
