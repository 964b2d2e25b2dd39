/*
 * src/numeric/convert_impl.h: the array conversion kernels behind ampc_convert,
 * one table per instruction-set path. Tests compare the paths directly.
 */
#ifndef AMPC_CONVERT_IMPL_H
#define AMPC_CONVERT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/dtype.h"

typedef struct ampc_convert_kernels {
  const char *isa;
  void (*f32_to_f16)(uint16_t *dst, const float *src, size_t n);
  void (*f16_to_f32)(float *dst, const uint16_t *src, size_t n);
  void (*f32_to_bf16)(uint16_t *dst, const float *src, size_t n);
  void (*bf16_to_f32)(float *dst, const uint16_t *src, size_t n);
} ampc_convert_kernels;

extern const ampc_convert_kernels ampc_convert_portable;
/* Defined in convert_avx2.c; call only when ampc_cpu_has_avx2_f16c() is true. */
extern const ampc_convert_kernels ampc_convert_avx2;

/* True when the CPU supports AVX2, FMA and F16C (cached after the first call). */
int ampc_cpu_has_avx2_f16c(void);

/* True when ampc's kernels take their AVX2 paths: the CPU has AVX2+FMA+F16C
 * and the environment does not say AMPC_ISA=portable (read once). */
int ampc_use_avx2(void);

/* True when the CPU (and OS) have AVX-512 F, BW and VL (cached). */
int ampc_cpu_has_avx512f(void);

/* True when ampc's kernels take their AVX-512 paths (the GEMM micro-kernel,
 * GELU and exp): ampc_use_avx2(), AVX-512 F/BW/VL, and not AMPC_ISA=avx2. */
int ampc_use_avx512(void);

/* True when the FP16-accumulation ablation takes its AVX512-FP16 path:
 * ampc_use_avx512() and the CPU (and OS) have AVX512-FP16 (cached). */
int ampc_use_avx512fp16(void);
/* 1 when ampc_use_avx512() and the CPU (and OS) have AVX512-BF16 (VDPBF16PS),
 * unless AMPC_GEMM_BF16DOT=0 in the environment (read once, cached). */
int ampc_use_avx512bf16(void);

/* The table ampc_convert uses (AVX2 when available unless AMPC_ISA=portable). */
const ampc_convert_kernels *ampc_convert_active(void);

/* ampc_store_f32 with statistics: the portable loop (any dtype; round_stats.c)
 * and the AVX2 one (F16 and BF16 only, convert_avx2.c; bit-identical stores
 * and counts). */
void ampc_store_stats_portable(void *dst, ampc_dtype dt, const float *src, size_t n,
                               ampc_round_stats *s);
void ampc_store_stats_avx2(void *dst, ampc_dtype dt, const float *src, size_t n,
                           ampc_round_stats *s);

#endif
