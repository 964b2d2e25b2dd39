/*
 * src/numeric/convert.c: ampc_convert, the portable array kernels, and the
 * run-time choice between them and the AVX2+F16C kernels (convert_avx2.c).
 *
 * Any dtype pair is routed through FP32 in cache-sized chunks; since FP32 holds
 * every F16/BF16/FP8 value exactly, the result is a single rounding.
 */
#include "internal.h"

#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "numeric/convert_impl.h"
#include "numeric/numeric.h"

static void p_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = ampc_f32bits_to_f16bits(ampc_f32_bits(src[i]));
}
static void p_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = ampc_bits_f32(ampc_f16bits_to_f32bits(src[i]));
}
static void p_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = ampc_f32bits_to_bf16bits(ampc_f32_bits(src[i]));
}
static void p_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = ampc_bits_f32(ampc_bf16bits_to_f32bits(src[i]));
}

const ampc_convert_kernels ampc_convert_portable = {
    .isa = "portable",
    .f32_to_f16 = p_f32_to_f16,
    .f16_to_f32 = p_f16_to_f32,
    .f32_to_bf16 = p_f32_to_bf16,
    .bf16_to_f32 = p_bf16_to_f32,
};

int ampc_cpu_has_avx2_f16c(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#if defined(__clang__)
    /* clang (14) has no "f16c" for __builtin_cpu_supports: CPUID.1:ECX bit 29
     * (the AVX2 check above already covers the OS's YMM state) */
    unsigned a = 0, b = 0, c = 0, d = 0;
    v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
#else
    v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c");
#endif
#else
    v = 0;
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

int ampc_use_avx2(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    const char *force = getenv("AMPC_ISA");
    v = ampc_cpu_has_avx2_f16c() && !(force && strcmp(force, "portable") == 0);
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

int ampc_cpu_has_avx512f(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
#if defined(__x86_64__) || defined(__i386__)
    /* __builtin_cpu_supports also checks that the OS saves the ZMM state (XCR0) */
    __builtin_cpu_init();
    v = ampc_cpu_has_avx2_f16c() && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    v = 0;
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

int ampc_use_avx512(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    const char *force = getenv("AMPC_ISA");
    v = ampc_use_avx2() && ampc_cpu_has_avx512f() && !(force && strcmp(force, "avx2") == 0);
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

int ampc_use_avx512fp16(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#if defined(__clang__)
    /* clang (14) has no "avx512fp16" for __builtin_cpu_supports:
     * CPUID.(EAX=7,ECX=0):EDX bit 23 (ampc_use_avx512 already covers the OS's
     * ZMM state) */
    unsigned a = 0, b = 0, c = 0, d = 0;
    v = ampc_use_avx512() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 23)) != 0;
#else
    v = ampc_use_avx512() && __builtin_cpu_supports("avx512fp16");
#endif
#else
    v = 0;
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

int ampc_use_avx512bf16(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const char *off = getenv("AMPC_GEMM_BF16DOT");
    v = ampc_use_avx512() && __builtin_cpu_supports("avx512bf16") &&
        !(off && strcmp(off, "0") == 0);
#else
    v = 0;
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

const ampc_convert_kernels *ampc_convert_active(void) {
  return ampc_use_avx2() ? &ampc_convert_avx2 : &ampc_convert_portable;
}

const char *ampc_convert_isa(void) { return ampc_convert_active()->isa; }

/* FP32 source -> any destination. */
static void from_f32(void *dst, ampc_dtype dt, const float *src, size_t n, unsigned flags,
                     const ampc_convert_kernels *k) {
  const int sat = (flags & AMPC_CONVERT_SATURATE) != 0;
  switch (dt) {
  case AMPC_F32: memmove(dst, src, n * sizeof(float)); break;
  case AMPC_F16: k->f32_to_f16(dst, src, n); break;
  case AMPC_BF16: k->f32_to_bf16(dst, src, n); break;
  case AMPC_F8_E4M3: {
    uint8_t *d = dst;
    for (size_t i = 0; i < n; i++)
      d[i] = ampc_f32bits_to_e4m3bits(ampc_f32_bits(src[i]), sat);
    break;
  }
  case AMPC_F8_E5M2: {
    uint8_t *d = dst;
    for (size_t i = 0; i < n; i++)
      d[i] = ampc_f32bits_to_e5m2bits(ampc_f32_bits(src[i]), sat);
    break;
  }
  case AMPC_DTYPE_COUNT: break;
  }
}

/* Any source -> FP32 destination. */
static void to_f32(float *dst, const void *src, ampc_dtype st, size_t n,
                   const ampc_convert_kernels *k) {
  switch (st) {
  case AMPC_F32: memmove(dst, src, n * sizeof(float)); break;
  case AMPC_F16: k->f16_to_f32(dst, src, n); break;
  case AMPC_BF16: k->bf16_to_f32(dst, src, n); break;
  case AMPC_F8_E4M3: {
    const uint8_t *s = src;
    for (size_t i = 0; i < n; i++)
      dst[i] = ampc_bits_f32(ampc_e4m3bits_to_f32bits(s[i]));
    break;
  }
  case AMPC_F8_E5M2: {
    const uint8_t *s = src;
    for (size_t i = 0; i < n; i++)
      dst[i] = ampc_bits_f32(ampc_e5m2bits_to_f32bits(s[i]));
    break;
  }
  case AMPC_DTYPE_COUNT: break;
  }
}

ampc_status ampc_convert_ex(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                            size_t n, unsigned flags) {
  if ((unsigned)dst_dt >= AMPC_DTYPE_COUNT || (unsigned)src_dt >= AMPC_DTYPE_COUNT)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_convert: invalid dtype (%d -> %d)", (int)src_dt,
                     (int)dst_dt);
  if (flags & ~(unsigned)AMPC_CONVERT_SATURATE)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_convert: unknown flags 0x%x", flags);
  if (n == 0)
    return AMPC_OK;
  if (!dst || !src)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_convert: NULL buffer with n = %zu", n);
  const ampc_convert_kernels *k = ampc_convert_active();
  if (src_dt == dst_dt) {
    memmove(dst, src, n * ampc_dtype_size(src_dt));
  } else if (src_dt == AMPC_F32) {
    from_f32(dst, dst_dt, src, n, flags, k);
  } else if (dst_dt == AMPC_F32) {
    to_f32(dst, src, src_dt, n, k);
  } else {
    enum { CHUNK = 1024 };
    float buf[CHUNK];
    const size_t ss = ampc_dtype_size(src_dt), ds = ampc_dtype_size(dst_dt);
    for (size_t i = 0; i < n; i += CHUNK) {
      size_t m = n - i < CHUNK ? n - i : CHUNK;
      to_f32(buf, (const char *)src + i * ss, src_dt, m, k);
      from_f32((char *)dst + i * ds, dst_dt, buf, m, flags, k);
    }
  }
  return AMPC_OK;
}

ampc_status ampc_convert(void *dst, ampc_dtype dst_dt, const void *src, ampc_dtype src_dt,
                         size_t n) {
  return ampc_convert_ex(dst, dst_dt, src, src_dt, n, 0);
}
