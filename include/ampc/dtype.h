/*
 * ampc/dtype.h: the number formats ampc stores tensors in, done exactly.
 *
 * Formats
 *   F32      IEEE 754 binary32.
 *   F16      IEEE 754 binary16 (1 sign, 5 exponent, 10 fraction bits, bias 15).
 *   BF16     bfloat16, the upper half of a binary32 (1, 8, 7; bias 127).
 *   F8_E4M3  OCP OFP8 E4M3 / "FP8 Formats for Deep Learning" (Micikevicius et
 *            al., 2022): 1, 4, 3, bias 7, no infinities, S.1111.111 is NaN,
 *            largest finite 448.
 *   F8_E5M2  OCP OFP8 E5M2: 1, 5, 2, bias 15, IEEE-like (inf and NaN),
 *            largest finite 57344.
 *
 * Rounding: every narrowing conversion rounds to nearest, ties to even (RNE),
 * keeps subnormals (no flush to zero) and is a single rounding of the exact
 * input value. Widening conversions are exact.
 *
 * Exact semantics, per direction
 *   FP32 -> F16  Bit-identical to x86 F16C VCVTPS2PH with imm8 = 0 (RNE), for
 *                every one of the 2^32 inputs: |x| >= 65520 -> inf; NaN -> NaN
 *                with the sign kept, quiet bit (0x0200) set and the top 9
 *                payload bits kept (payload >> 13).
 *   F16 -> FP32  Bit-identical to VCVTPH2PS: exact; NaN keeps its sign and
 *                payload (shifted up 13 bits) and is quieted (0x00400000 set).
 *   FP32 -> BF16 RNE on the upper 16 bits. NaN -> NaN: sign and top payload
 *                bits kept, quiet bit (0x0040) set; a NaN never becomes inf.
 *   BF16 -> FP32 Exact (the 16 bits become the upper half), NaN payloads kept.
 *   FP32 -> FP8  Follows the host path of CUDA's cuda_fp8.h
 *                (__nv_cvt_float_to_fp8) in both modes:
 *                  non-saturating (__NV_NOSAT): E4M3: |x| > 464 or inf -> NaN
 *                  (0x7F | sign); 464, the tie between 448 and the NaN code,
 *                  rounds to 448 (even). E5M2: |x| >= 61440 -> inf.
 *                  saturating (__NV_SATFINITE): those cases give +-max finite
 *                  (448, 57344) instead, infinities included.
 *                NaN input -> 0x7F in both formats and both modes (CUDA
 *                canonicalises NaN and drops its sign). |x| <= min_subnormal/2
 *                -> signed zero.
 *   FP8 -> FP32  Exact for non-NaN codes; E5M2 inf -> inf; every NaN code
 *                decodes to 0x7FFFE000, the FP32 image of CUDA's canonical
 *                half NaN 0x7FFF (sign dropped, as cuda_fp8.h does).
 *
 * dtype values are written into files (checkpoints, datasets): append only.
 */
#ifndef AMPC_DTYPE_H
#define AMPC_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ampc_dtype {
  AMPC_F32 = 0,
  AMPC_F16 = 1,
  AMPC_BF16 = 2,
  AMPC_F8_E4M3 = 3,
  AMPC_F8_E5M2 = 4,
  AMPC_DTYPE_COUNT /* not a dtype; keep last */
} ampc_dtype;

/* Distinct storage types: a half cannot be passed where a float or an integer
 * is expected without the compiler noticing. */
typedef struct ampc_f16 {
  uint16_t bits;
} ampc_f16;
typedef struct ampc_bf16 {
  uint16_t bits;
} ampc_bf16;
typedef struct ampc_f8_e4m3 {
  uint8_t bits;
} ampc_f8_e4m3;
typedef struct ampc_f8_e5m2 {
  uint8_t bits;
} ampc_f8_e5m2;

/* Storage size in bytes of one element (4, 2, 2, 1, 1); 0 for an invalid dtype. */
size_t ampc_dtype_size(ampc_dtype dt);

/* Canonical short name: "f32", "f16", "bf16", "e4m3", "e5m2"; "?" if invalid. */
const char *ampc_dtype_name(ampc_dtype dt);

/* Parse a dtype name. Accepts the canonical names and the aliases fp32,
 * float32, fp16, half, float16, binary16, bfloat16, f8_e4m3, fp8_e4m3, f8_e5m2,
 * fp8_e5m2 (case-insensitive). Returns AMPC_ERR_INVALID_ARG for anything else. */
ampc_status ampc_dtype_parse(const char *name, ampc_dtype *out);

/* ---- scalar reference conversions (semantics: see the top of this file) --- */

ampc_f16 ampc_f32_to_f16(float x);
float ampc_f16_to_f32(ampc_f16 h);
ampc_bf16 ampc_f32_to_bf16(float x);
float ampc_bf16_to_f32(ampc_bf16 h);
/* saturate = false: CUDA __NV_NOSAT; true: __NV_SATFINITE. */
ampc_f8_e4m3 ampc_f32_to_e4m3(float x, bool saturate);
float ampc_e4m3_to_f32(ampc_f8_e4m3 v);
ampc_f8_e5m2 ampc_f32_to_e5m2(float x, bool saturate);
float ampc_e5m2_to_f32(ampc_f8_e5m2 v);

/* ---- array conversions ---------------------------------------------------- */

enum {
  AMPC_CONVERT_SATURATE = 1u /* FP8 targets: saturate to +-max finite; no effect on others */
};

/* Convert n elements: dst[i] = round(src[i]) from src_dt to dst_dt.
 * Any pair of dtypes is allowed; a conversion between two narrow formats goes
 * through FP32, which holds every value of each exactly, so it is still one
 * rounding. Same dtype copies the bytes (memmove). dst and src must not
 * partially overlap (identical pointers are fine only for equal dtypes).
 * Uses AVX2+F16C when the CPU has them (checked at run time with
 * __builtin_cpu_supports) and a portable path otherwise; both give identical
 * bits. Errors: AMPC_ERR_INVALID_ARG for an invalid dtype or a NULL pointer
 * with n > 0. */
ampc_status ampc_convert(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                         size_t n);
/* As ampc_convert, with flags (AMPC_CONVERT_SATURATE). */
ampc_status ampc_convert_ex(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                            size_t n, unsigned flags);

/* Which array path ampc_convert uses: "avx2+f16c" or "portable". Setting
 * AMPC_ISA=portable in the environment before the first call forces the
 * portable path (for testing and comparison). */
const char *ampc_convert_isa(void);

/* ---- rounding into storage, with telemetry (DESIGN.md section 3) ---------- */

/* What rounding FP32 values into a storage dtype did, counted exactly. */
typedef struct ampc_round_stats {
  uint64_t count;     /* values stored */
  uint64_t underflow; /* non-zero in FP32, zero after rounding (flushed) */
  uint64_t subnormal; /* non-zero and subnormal after rounding */
  uint64_t overflow;  /* finite in FP32, inf after rounding (NaN for E4M3) */
  uint64_t inf;       /* inf after rounding, overflowed or already inf */
  uint64_t nan;       /* NaN after rounding (NaN already in FP32, or E4M3 overflow) */
  float max_abs;      /* largest |x| among the finite FP32 inputs (0 if none) */
} ampc_round_stats;

/* Add the counts of `from` to `into` (max_abs: the larger). */
void ampc_round_stats_merge(ampc_round_stats *into, const ampc_round_stats *from);

/* dst[i] = round(src[i]) into dt, exactly as ampc_convert from F32 (non-
 * saturating), and, when stats is not NULL, add what the rounding did to
 * *stats (the counts accumulate across calls; zero the struct to start). The
 * counting is vectorised for F16 and BF16 (AVX2). Errors: AMPC_ERR_INVALID_ARG
 * for an invalid dtype or a NULL buffer with n > 0. */
ampc_status ampc_store_f32(void *dst, ampc_dtype dt, const float *src, size_t n,
                           ampc_round_stats *stats);

/* ---- classification and format facts -------------------------------------- */

typedef enum ampc_fpclass {
  AMPC_CLASS_ZERO = 0,
  AMPC_CLASS_SUBNORMAL = 1,
  AMPC_CLASS_NORMAL = 2,
  AMPC_CLASS_INF = 3,
  AMPC_CLASS_NAN = 4
} ampc_fpclass;

/* Classify one stored value given as raw bits (low bits of `bits` for the
 * narrow formats). Returns AMPC_CLASS_NAN for an invalid dtype. */
ampc_fpclass ampc_classify(ampc_dtype dt, uint32_t bits);
/* "zero", "subnormal", "normal", "inf", "nan". */
const char *ampc_fpclass_name(ampc_fpclass c);

/* Facts about a format, each computed by running the conversions above (not
 * typed in), so they describe what ampc actually does. Values are in double. */
typedef struct ampc_format_info {
  ampc_dtype dtype;
  const char *name; /* "fp32", "fp16", "bf16", "e4m3", "e5m2" */
  int bits;         /* storage width */
  int exponent_bits;
  int mantissa_bits; /* stored fraction bits (precision is mantissa_bits + 1) */
  int bias;
  bool has_inf;
  double max;           /* largest finite value */
  double min_normal;    /* smallest positive normal value */
  double min_subnormal; /* smallest positive subnormal value */
  double epsilon;       /* distance from 1 to the next larger value */
  /* Smallest magnitude that converts (from FP32; for F32 itself, from double)
   * to a non-finite value in non-saturating mode: 65520 for F16. */
  double overflow_threshold;
  /* Largest magnitude that still rounds to zero: 2^-25 for F16 (a tie, rounded
   * to the even value 0). */
  double underflow_threshold;
  /* Largest power of two r such that round(1 + r) == 1: an update smaller than
   * about r * |w| leaves a weight w unchanged (2^-11 for F16). */
  double swallow_ratio;
} ampc_format_info;

/* Fill *out for dt. Errors: AMPC_ERR_INVALID_ARG for an invalid dtype or NULL. */
ampc_status ampc_format_info_get(ampc_dtype dt, ampc_format_info *out);

/* x (a double) rounded once into dt, to nearest with ties to even, returned
 * as the double value of the result: the same value ampc_convert gives for
 * every x that is an FP32, without the second rounding that going through
 * FP32 would add for the other doubles. Non-saturating: a value past the
 * largest finite one becomes +-inf (NaN for E4M3, which has no inf), as
 * ampc_convert's default. NaN stays NaN; the sign of zero is kept (a flushed
 * negative value gives -0). Needs the default rounding mode (FE_TONEAREST).
 * Returns NaN for an invalid dtype. */
double ampc_round_f64(ampc_dtype dt, double x);

#ifdef __cplusplus
}
#endif
#endif
