/*
 * src/kernels/gemm_s8.c: the INT8 GEMM of include/ampc/gemm.h
 * (ampc_gemm_s8): C [m, n] int32 = A [m, k] int8 times B [n, k]^T int8, the
 * exact integer sums. The portable loop is the definition; the vector paths
 * (gemm_s8_avx2.c: VPMADDWD on sign-extended int16; gemm_s8_avx512.c:
 * AVX512-VNNI VPDPBUSD) give the same integers, since integer sums are exact
 * in any order while they fit int32 (k <= 65536 guarantees it, below).
 * Threads: OpenMP over blocks of rows of A.
 */
#include "ampc/gemm.h"

#include <float.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernels/gemm_impl.h"
#include "numeric/convert_impl.h"

/* rows of A per OpenMP work item */
enum { S8_ROWS = 16 };

void ampc_gemm_s8_rows_portable(int64_t i0, int64_t i1, int64_t n, int64_t k, const int8_t *a,
                                int64_t lda, const int8_t *b, int64_t ldb, int32_t *c,
                                int64_t ldc) {
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = 0; j < n; j++) {
      int32_t s = 0;
      for (int64_t p = 0; p < k; p++)
        s += (int32_t)a[i * lda + p] * (int32_t)b[j * ldb + p];
      c[i * ldc + j] = s;
    }
}

int ampc_cpu_has_avx512vnni(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    v = ampc_use_avx512() && __builtin_cpu_supports("avx512vnni");
#else
    v = 0;
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

ampc_gemm_s8_path ampc_gemm_s8_best(void) {
  if (ampc_cpu_has_avx512vnni())
    return AMPC_GEMM_S8_AVX512VNNI;
  if (ampc_use_avx2())
    return AMPC_GEMM_S8_AVX2;
  return AMPC_GEMM_S8_PORTABLE;
}

const char *ampc_gemm_s8_path_name(ampc_gemm_s8_path p) {
  switch (p) {
  case AMPC_GEMM_S8_PORTABLE: return "portable";
  case AMPC_GEMM_S8_AVX2: return "avx2 (vpmaddwd)";
  case AMPC_GEMM_S8_AVX512VNNI: return "avx512-vnni (vpdpbusd)";
  default: return "?";
  }
}

/* path: AUTO resolved to the fastest here; a path this CPU (or AMPC_ISA)
 * lacks, or no path at all: AMPC_ERR_UNSUPPORTED naming it */
static ampc_status resolve_path(ampc_gemm_s8_path *path, const char *fn) {
  if (*path == AMPC_GEMM_S8_AUTO)
    *path = ampc_gemm_s8_best();
  if ((*path == AMPC_GEMM_S8_AVX512VNNI && !ampc_cpu_has_avx512vnni()) ||
      (*path == AMPC_GEMM_S8_AVX2 && !ampc_use_avx2()) || *path < AMPC_GEMM_S8_AUTO ||
      *path > AMPC_GEMM_S8_AVX512VNNI)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: path %s not available on this CPU", fn,
                     ampc_gemm_s8_path_name(*path));
  return AMPC_OK;
}

void ampc_gemm_s8_b_free(ampc_gemm_s8_b *pb) {
  if (!pb)
    return;
  free(pb->packed), free(pb->bsum);
  memset(pb, 0, sizeof *pb);
}

ampc_status ampc_gemm_s8_prepare(ampc_gemm_s8_b *pb, ampc_gemm_s8_path path, int64_t n, int64_t k,
                                 const int8_t *b, int64_t ldb) {
  const char *fn = "ampc_gemm_s8_prepare";
  if (!pb)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: NULL", fn);
  memset(pb, 0, sizeof *pb);
  if (n < 1 || k < 1 || k > AMPC_GEMM_S8_MAX_K || !b || ldb < k)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: n=%lld k=%lld (k at most %d), ldb %lld", fn,
                     (long long)n, (long long)k, AMPC_GEMM_S8_MAX_K, (long long)ldb);
  AMPC_TRY(resolve_path(&path, fn));
  *pb = (ampc_gemm_s8_b){.n = n, .k = k, .ldb = ldb, .path = path, .b = b};
  if (path != AMPC_GEMM_S8_AVX512VNNI)
    return AMPC_OK;
  /* VNNI: B packed, and its row sums for the +128 offset of A */
  pb->bsum = malloc((size_t)n * sizeof *pb->bsum);
  pb->packed = malloc((size_t)(((k + 3) / 4) * ((n + 15) / 16 * 16) * 4));
  if (!pb->bsum || !pb->packed) {
    ampc_gemm_s8_b_free(pb);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", fn);
  }
#if defined(__x86_64__)
  ampc_gemm_s8_pack_vnni(n, k, b, ldb, pb->packed);
#endif
  for (int64_t j = 0; j < n; j++) {
    int32_t s = 0;
    for (int64_t p = 0; p < k; p++)
      s += b[j * ldb + p];
    pb->bsum[j] = s;
  }
  return AMPC_OK;
}

/* C (y NULL) or the dequantized y of rows 0 .. m-1, threads over blocks of
 * S8_ROWS rows; the paths without a fused epilogue dequantize each block's
 * int32 rows from the thread's workspace */
static ampc_status run(const ampc_gemm_s8_b *pb, int64_t m, const int8_t *a, int64_t lda,
                       int32_t *c, int64_t ldc, float alpha, const float *mult, const float *bias,
                       float *y, int64_t ldy) {
  const int64_t n = pb->n, k = pb->k, blocks = (m + S8_ROWS - 1) / S8_ROWS;
  int nomem = 0;
#pragma omp parallel for schedule(static) reduction(| : nomem) if (m * n * k > (int64_t)1 << 18)
  for (int64_t blk = 0; blk < blocks; blk++) {
    const int64_t i0 = blk * S8_ROWS, i1 = i0 + S8_ROWS < m ? i0 + S8_ROWS : m;
#if defined(__x86_64__)
    if (pb->path == AMPC_GEMM_S8_AVX512VNNI) {
      ampc_gemm_s8_rows_avx512vnni(i0, i1, n, k, a, lda, pb->packed, pb->bsum, c, ldc, alpha, mult,
                                   bias, y, ldy);
      continue;
    }
#endif
    if (!y) {
#if defined(__x86_64__)
      if (pb->path == AMPC_GEMM_S8_AVX2)
        ampc_gemm_s8_rows_avx2(i0, i1, n, k, a, lda, pb->b, pb->ldb, c, ldc);
      else
#endif
        ampc_gemm_s8_rows_portable(i0, i1, n, k, a, lda, pb->b, pb->ldb, c, ldc);
      continue;
    }
    /* this block's sums (its rows from 0) in the thread's workspace, then
     * the epilogue */
    int32_t *cb = ampc_gemm_workspace((size_t)(S8_ROWS * n) * sizeof *cb);
    if (!cb) {
      nomem = 1;
      continue;
    }
    const int8_t *ab = a + i0 * lda;
#if defined(__x86_64__)
    if (pb->path == AMPC_GEMM_S8_AVX2)
      ampc_gemm_s8_rows_avx2(0, i1 - i0, n, k, ab, lda, pb->b, pb->ldb, cb, n);
    else
#endif
      ampc_gemm_s8_rows_portable(0, i1 - i0, n, k, ab, lda, pb->b, pb->ldb, cb, n);
    for (int64_t i = i0; i < i1; i++)
      for (int64_t j = 0; j < n; j++) {
        const float mj = mult ? alpha * mult[j] : alpha;
        const float v = (float)cb[(i - i0) * n + j] * mj; /* a product, then a sum: no FMA */
        y[i * ldy + j] = v + (bias ? bias[j] : 0.0f);
      }
  }
  return nomem ? ampc_fail(AMPC_ERR_NOMEM, "ampc_gemm_s8: out of memory") : AMPC_OK;
}

ampc_status ampc_gemm_s8_dequant(const ampc_gemm_s8_b *pb, int64_t m, const int8_t *a, int64_t lda,
                                 float alpha, const float *col_scale, const float *bias, float *y,
                                 int64_t ldy) {
  if (!pb || !pb->b || m < 0 || (m > 0 && (!a || !y)) || lda < pb->k || ldy < pb->n)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_gemm_s8_dequant: B not prepared, a NULL operand or a leading "
                     "dimension too small");
  return m == 0 ? AMPC_OK : run(pb, m, a, lda, NULL, 0, alpha, col_scale, bias, y, ldy);
}

ampc_status ampc_gemm_s8_with(ampc_gemm_s8_path path, int64_t m, int64_t n, int64_t k,
                              const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb,
                              int32_t *c, int64_t ldc) {
  const char *fn = "ampc_gemm_s8";
  if (m < 0 || n < 0 || k < 0 || k > AMPC_GEMM_S8_MAX_K)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: sizes m=%lld n=%lld k=%lld (k at most %d)", fn,
                     (long long)m, (long long)n, (long long)k, AMPC_GEMM_S8_MAX_K);
  if (m == 0 || n == 0)
    return AMPC_OK;
  if (!c || (k > 0 && (!a || !b)) || lda < k || ldb < k || ldc < n)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: NULL operand or leading dimension too small", fn);
  if (k == 0) {
    AMPC_TRY(resolve_path(&path, fn));
    for (int64_t i = 0; i < m; i++)
      memset(c + i * ldc, 0, (size_t)n * sizeof *c);
    return AMPC_OK;
  }
  ampc_gemm_s8_b pb;
  AMPC_TRY(ampc_gemm_s8_prepare(&pb, path, n, k, b, ldb));
  const ampc_status st = run(&pb, m, a, lda, c, ldc, 0.0f, NULL, NULL, NULL, 0);
  ampc_gemm_s8_b_free(&pb);
  return st;
}

void ampc_s8_quantize_portable(const float *x, int64_t n, float scale, int8_t *q) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i] / scale;
    v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    v = v == v ? v : 0.0f;
    /* to nearest, ties to even: |v| <= 127 < 2^22, so adding and taking
     * away 1.5 * 2^23 leaves v rounded to an integer (no fast-math folds it) */
    q[i] = (int8_t)(int32_t)((v + 0x1.8p23f) - 0x1.8p23f);
  }
}

/* values per OpenMP work item of the quantization */
enum { Q_BLOCK = 16384 };

ampc_status ampc_gemm_s8_quantize(ampc_gemm_s8_path path, const float *x, int64_t n, float scale,
                                  int8_t *q) {
  const char *fn = "ampc_gemm_s8_quantize";
  if (n < 0 || (n > 0 && (!x || !q)) || !(scale > 0.0f) || !(scale <= FLT_MAX))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: n=%lld, scale %g, or a NULL operand", fn,
                     (long long)n, (double)scale);
  AMPC_TRY(resolve_path(&path, fn));
  const int64_t blocks = (n + Q_BLOCK - 1) / Q_BLOCK;
#pragma omp parallel for schedule(static) if (blocks > 4)
  for (int64_t bi = 0; bi < blocks; bi++) {
    const int64_t i0 = bi * Q_BLOCK, len = n - i0 < Q_BLOCK ? n - i0 : Q_BLOCK;
#if defined(__x86_64__)
    if (path == AMPC_GEMM_S8_AVX512VNNI)
      ampc_s8_quantize_avx512(x + i0, len, scale, q + i0);
    else if (path == AMPC_GEMM_S8_AVX2)
      ampc_s8_quantize_avx2(x + i0, len, scale, q + i0);
    else
#endif
      ampc_s8_quantize_portable(x + i0, len, scale, q + i0);
  }
  return AMPC_OK;
}

ampc_status ampc_gemm_s8(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda,
                         const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc) {
  return ampc_gemm_s8_with(AMPC_GEMM_S8_AUTO, m, n, k, a, lda, b, ldb, c, ldc);
}
