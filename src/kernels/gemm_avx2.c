/*
 * src/kernels/gemm_avx2.c: the blocked GEMM for F16/BF16/F32 operands with FP32
 * accumulation, AVX2 + FMA + F16C. Compiled with -mavx2 -mfma -mf16c and only
 * called after the run-time CPU check.
 *
 * Structure (Goto & van de Geijn 2008; BLIS): C is cut into tasks of up to
 * MT x NC (MT = TASK_BLOCKS * MC rows, per batch matrix), spread over OpenMP
 * threads; a task owns an FP32 block Cs of partial sums (L2/L3). For each KC
 * slice of K the task packs its KC x NC panel of op(B) once, as NR-column
 * micro-panels, reading each row of B once; then for each MC block of its rows
 * packs MC x KC of op(A) into MR-row micro-panels (L2) and runs the 6 x 16
 * micro-kernel over every (B micro-panel, A micro-panel) pair, the B
 * micro-panel staying in L1 down the A block. Packing widens F16 (VCVTPH2PS)
 * and BF16 (shift) to FP32 exactly, so the micro-kernel is a plain FP32 FMA
 * kernel that reads half the bytes from the caller's matrices. After the last
 * slice the epilogue forms alpha*Cs + beta*C in FP32 and rounds once into C's
 * dtype. Edge tiles are packed with zero padding, computed at full size into
 * the padded Cs, and never stored beyond M x N; no load reads outside the
 * caller's matrices (prefetches may point past them; they never fault).
 */
#include "internal.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_impl.h"

/* TASK_BLOCKS: a task covers up to this many MC blocks of rows, so that the B
 * panel it packs is reused over TASK_BLOCKS * MC rows. The micro-tile (MR x NR)
 * comes from the micro-kernel descriptor (6 x 16 here, 12 x 32 in
 * gemm_avx512.c); the packing below is instantiated for both. */
enum { SLACK = 16, TASK_BLOCKS = 4 };

static inline size_t esz(ampc_dtype dt) { return dt == AMPC_F32 ? 4 : 2; }
static inline const void *at(const void *p, ampc_dtype dt, int64_t off) {
  return (const char *)p + off * (int64_t)esz(dt);
}

/* 8 consecutive elements of dtype dt at p, widened to FP32. */
static inline __m256 load8(const void *p, ampc_dtype dt) {
  switch (dt) {
  case AMPC_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  case AMPC_BF16:
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
  default: return _mm256_loadu_ps((const float *)p);
  }
}

/* In-register 8 x 8 transpose: r[i] holds row i on entry, column i on exit. */
static inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/*
 * Pack one micro-panel: dst[p*R + r] = src[r*stride_r + p*stride_p] widened to
 * FP32 for r < rv, and 0 for rv <= r < R; p < kc. `ravail` is how many lanes
 * r exist in the source from this panel on (so lanes rv..ravail-1 may be read
 * but are not used). May write up to 8 floats past dst + kc*R (SLACK).
 */
static inline __attribute__((always_inline)) void
pack_panel_dt(float *restrict dst, const int R, const void *src, const ampc_dtype dt, int rv,
              int64_t ravail, int64_t kc, int64_t stride_r, int64_t stride_p) {
  int64_t p = 0;
  if (stride_p == 1) {
    /* rows contiguous along p: load 8 p's per lane, transpose 8 x 8 per group
     * of 8 lanes; stored in address order, so that the lanes past R of the last
     * group (R = 6, 12) spill into the next p's row before it is written */
    for (; p + 8 <= kc; p += 8) {
      __m256 v[4][8]; /* R <= 32 */
      for (int g = 0; g < R; g += 8) {
        for (int rr = 0; rr < 8; rr++) {
          const int r = g + rr;
          v[g / 8][rr] = r < rv ? load8(at(src, dt, r * stride_r + p), dt) : _mm256_setzero_ps();
        }
        transpose8(v[g / 8]);
      }
      for (int pp = 0; pp < 8; pp++)
        for (int g = 0; g < R; g += 8)
          _mm256_storeu_ps(dst + (p + pp) * R + g, v[g / 8][pp]);
    }
  } else if (stride_r == 1 && rv == R && ravail >= ((R + 7) & ~7)) {
    /* lanes contiguous: R values per p straight from memory */
    for (; p < kc; p++) {
      const void *s = at(src, dt, p * stride_p);
      for (int g = 0; g < R; g += 8)
        _mm256_storeu_ps(dst + p * R + g, load8(at(s, dt, g), dt));
    }
  }
  for (; p < kc; p++) { /* remaining p: scalar */
    for (int r = 0; r < R; r++)
      dst[p * R + r] = r < rv ? ampc_gemm_load(src, dt, r * stride_r + p * stride_p) : 0.0f;
  }
}

/* One copy of the packing loops per (R, dtype), so that neither is tested
 * inside them. */
static void pack_panel(float *restrict dst, int R, const void *src, ampc_dtype dt, int rv,
                       int64_t ravail, int64_t kc, int64_t stride_r, int64_t stride_p) {
#define AMPC_PACK_CASE(RR, DT)                                                                     \
  if (R == RR && dt == DT) {                                                                       \
    if (rv == RR) /* a full panel: the lane tests fold away */                                     \
      pack_panel_dt(dst, RR, src, DT, RR, ravail, kc, stride_r, stride_p);                         \
    else                                                                                           \
      pack_panel_dt(dst, RR, src, DT, rv, ravail, kc, stride_r, stride_p);                         \
    return;                                                                                        \
  }
  AMPC_PACK_CASE(6, AMPC_F16)
  AMPC_PACK_CASE(6, AMPC_BF16)
  AMPC_PACK_CASE(6, AMPC_F32)
  AMPC_PACK_CASE(16, AMPC_F16)
  AMPC_PACK_CASE(16, AMPC_BF16)
  AMPC_PACK_CASE(16, AMPC_F32)
  AMPC_PACK_CASE(12, AMPC_F16)
  AMPC_PACK_CASE(12, AMPC_BF16)
  AMPC_PACK_CASE(12, AMPC_F32)
  AMPC_PACK_CASE(32, AMPC_F16)
  AMPC_PACK_CASE(32, AMPC_BF16)
  AMPC_PACK_CASE(32, AMPC_F32)
#undef AMPC_PACK_CASE
  /* other widths: the generic loops */
  pack_panel_dt(dst, R, src, dt, rv, ravail, kc, stride_r, stride_p);
}

/* Pack the B panel op(B)[0:kc, 0:ncols] as ceil(ncols / NR) micro-panels at
 * dst + s*kc*NR. When B's rows are contiguous along j, each row p is read once
 * across all full micro-panels (whole cache lines, one page per row), with a
 * software prefetch a few rows ahead: rows are a leading dimension apart,
 * often a page or more, which the hardware prefetcher does not follow (a
 * prefetch past the end of the matrix is harmless: it never faults). A partial
 * last micro-panel, and B stored transposed, go through pack_panel. */
static inline __attribute__((always_inline)) void pack_b_rows_dt(float *restrict dst, const int NR,
                                                                 int nsub, const void *src,
                                                                 const ampc_dtype dt, int64_t kc,
                                                                 int64_t stride_p) {
  const int64_t row_bytes = (int64_t)nsub * NR * (int64_t)esz(dt);
  for (int64_t p = 0; p < kc; p++) {
    const void *row = at(src, dt, p * stride_p);
    const char *ahead = (const char *)at(src, dt, (p + 8) * stride_p);
    for (int64_t off = 0; off < row_bytes; off += 64)
      _mm_prefetch(ahead + off, _MM_HINT_T0);
    for (int s = 0; s < nsub; s++) {
      float *d = dst + (int64_t)s * kc * NR + p * NR;
      for (int q = 0; q < NR; q += 8)
        _mm256_store_ps(d + q, load8(at(row, dt, s * NR + q), dt));
    }
  }
}

static void pack_b(float *restrict dst, const int NR, int64_t ncols, const void *src, ampc_dtype dt,
                   int64_t navail, int64_t kc, int64_t stride_r, int64_t stride_p) {
  int64_t j = 0;
  if (stride_r == 1 && ncols >= NR) {
    const int nfull = (int)(ncols / NR);
#define AMPC_PACKB_CASE(NN, DT)                                                                    \
  if (NR == NN && dt == DT)                                                                        \
    pack_b_rows_dt(dst, NN, nfull, src, DT, kc, stride_p);                                         \
  else
    AMPC_PACKB_CASE(16, AMPC_F16)
    AMPC_PACKB_CASE(16, AMPC_BF16)
    AMPC_PACKB_CASE(16, AMPC_F32)
    AMPC_PACKB_CASE(32, AMPC_F16)
    AMPC_PACKB_CASE(32, AMPC_BF16)
    AMPC_PACKB_CASE(32, AMPC_F32)
    pack_b_rows_dt(dst, NR, nfull, src, dt, kc, stride_p);
#undef AMPC_PACKB_CASE
    j = (int64_t)nfull * NR;
  }
  for (; j < ncols; j += NR) {
    const int rv = (int)(ncols - j < NR ? ncols - j : NR);
    pack_panel(dst + j * kc, NR, at(src, dt, j * stride_r), dt, rv, navail - j, kc, stride_r,
               stride_p);
  }
}

/* ---- bfloat16 pairs for the VDPBF16PS kernel ------------------------------- */

static inline uint16_t bits16(const void *p, int64_t i) {
  uint16_t v;
  memcpy(&v, (const char *)p + 2 * i, 2);
  return v;
}

/* VDPBF16PS's range for one bf16 value with magnitude bits x = v & 0x7FFF:
 * x == 0, or biased exponent 71 .. 189 (magnitude in [2^-56, 2^63); inf and
 * NaN are outside), i.e. x - 1 (16-bit, wrapping: 0 goes to 0xFFFF) >=
 * 0x237F and x <= 0x5EFF. The vector paths keep the running unsigned minimum
 * of x - 1 and maximum of x (4 operations per vector) and check them once. */
enum { BF16DOT_MIN1 = 0x237F, BF16DOT_MAX = 0x5EFF };
static inline void bf16_range_acc(__m256i v, __m256i *mn, __m256i *mx) {
  const __m256i x = _mm256_and_si256(v, _mm256_set1_epi16(0x7FFF));
  *mx = _mm256_max_epu16(*mx, x);
  *mn = _mm256_min_epu16(*mn, _mm256_sub_epi16(x, _mm256_set1_epi16(1)));
}
static inline int bf16_range_ok(__m256i mn, __m256i mx) {
  const __m256i lo = _mm256_cmpeq_epi16(_mm256_max_epu16(mn, _mm256_set1_epi16(BF16DOT_MIN1)), mn);
  const __m256i hi = _mm256_cmpeq_epi16(_mm256_min_epu16(mx, _mm256_set1_epi16(BF16DOT_MAX)), mx);
  return _mm256_movemask_epi8(_mm256_and_si256(lo, hi)) == -1;
}
static inline int bf16_scalar_in_range(uint16_t v) {
  const int e = (v >> 7) & 0xFF;
  return (v & 0x7FFF) == 0 || (e >= 71 && e <= 189);
}

/* One micro-panel of bfloat16 pairs: dst[q*R + r] = x(r, 2q) << 16 | x(r,
 * 2q+1) for q < ceil(kc / 2), with x(r, p) = src[r*stride_r + p*stride_p]
 * (bf16 bits) for r < rv and p < kc, else 0. Returns 1 when every x read is
 * in VDPBF16PS's range (bf16_range_acc), else 0: the panel is then not
 * for that kernel. Vector paths for full panels (R a multiple of 4): lanes
 * contiguous (interleave rows p and p+1) or p contiguous (load 8 pairs per
 * lane, swap the halves, transpose 8 x 8, 4 x 8 for the last 4 of R = 12). */
static int pack_pairs(uint32_t *restrict dst, int R, const void *src, int rv, int64_t kc,
                      int64_t stride_r, int64_t stride_p) {
  const int64_t kp = (kc + 1) / 2;
  int64_t q = 0;
  __m256i mn = _mm256_set1_epi16(-1), mx = _mm256_setzero_si256();
  if (rv == R && (R & 3) == 0 && stride_r == 1) {
    for (; q < kc / 2; q++) {
      const char *r0 = (const char *)src + 2 * (2 * q) * stride_p;
      const char *r1 = (const char *)src + 2 * (2 * q + 1) * stride_p;
      int g = 0;
      for (; g + 8 <= R; g += 8) {
        const __m128i hi = _mm_loadu_si128((const __m128i *)(r0 + 2 * g));
        const __m128i lo = _mm_loadu_si128((const __m128i *)(r1 + 2 * g));
        bf16_range_acc(_mm256_setr_m128i(hi, lo), &mn, &mx);
        _mm_storeu_si128((__m128i *)(dst + q * R + g), _mm_unpacklo_epi16(lo, hi));
        _mm_storeu_si128((__m128i *)(dst + q * R + g + 4), _mm_unpackhi_epi16(lo, hi));
      }
      if (g < R) { /* 4 lanes left: the low halves of 64-bit loads */
        const __m128i hi = _mm_loadl_epi64((const __m128i *)(r0 + 2 * g));
        const __m128i lo = _mm_loadl_epi64((const __m128i *)(r1 + 2 * g));
        /* (the upper 64 bits of each load are 0: in range) */
        bf16_range_acc(_mm256_setr_m128i(hi, lo), &mn, &mx);
        _mm_storeu_si128((__m128i *)(dst + q * R + g), _mm_unpacklo_epi16(lo, hi));
      }
    }
  } else if (rv == R && (R & 3) == 0 && stride_p == 1) {
    for (; q + 8 <= kc / 2; q += 8)
      for (int g = 0; g < R; g += 8) { /* 8 lanes (4 in a last half group) x 8 pairs */
        const int w = R - g < 8 ? R - g : 8;
        __m256 v[8];
        for (int rr = 0; rr < 8; rr++) {
          if (rr >= w) {
            v[rr] = _mm256_setzero_ps();
            continue;
          }
          const __m256i x = _mm256_loadu_si256(
              (const __m256i *)((const char *)src + 2 * ((g + rr) * stride_r + 2 * q)));
          bf16_range_acc(x, &mn, &mx);
          v[rr] = _mm256_castsi256_ps(
              _mm256_or_si256(_mm256_slli_epi32(x, 16), _mm256_srli_epi32(x, 16)));
        }
        transpose8(v);
        if (w == 8)
          for (int qq = 0; qq < 8; qq++)
            _mm256_storeu_ps((float *)(dst + (q + qq) * R + g), v[qq]);
        else
          for (int qq = 0; qq < 8; qq++)
            _mm_storeu_ps((float *)(dst + (q + qq) * R + g), _mm256_castps256_ps128(v[qq]));
      }
  }
  int ok = bf16_range_ok(mn, mx);
  for (; q < kp; q++) /* the rest (and partial panels): scalar */
    for (int r = 0; r < R; r++) {
      uint32_t w = 0;
      if (r < rv) {
        const int64_t p = 2 * q;
        const uint16_t x0 = bits16(src, r * stride_r + p * stride_p);
        const uint16_t x1 = p + 1 < kc ? bits16(src, r * stride_r + (p + 1) * stride_p) : 0;
        ok &= bf16_scalar_in_range(x0) & bf16_scalar_in_range(x1);
        w = (uint32_t)x0 << 16 | x1;
      }
      dst[q * R + r] = w;
    }
  return ok;
}

/* The B panel as ceil(ncols / NR) pair micro-panels at dst + s*kc*NR words
 * (the offsets of pack_b, so that run_task addresses both alike). */
static int pack_b_pairs(uint32_t *restrict dst, int NR, int64_t ncols, const void *src, int64_t kc,
                        int64_t stride_r, int64_t stride_p) {
  int ok = 1;
  for (int64_t j = 0; j < ncols && ok; j += NR) {
    const int rv = (int)(ncols - j < NR ? ncols - j : NR);
    ok = pack_pairs(dst + j * kc, NR, (const char *)src + 2 * j * stride_r, rv, kc, stride_r,
                    stride_p);
  }
  return ok;
}

/* Whether every element of a rows x cols bf16 matrix (element (r, c) at
 * p[r*sr + c*sc]) is +-0 or finite with magnitude in [2^-56, 2^63): biased
 * exponent 71 .. 189. */
static int bf16_in_dot_range(const void *p, int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  if (sr == 1 && sc != 1) { /* walk along the contiguous index */
    const int64_t t = rows;
    rows = cols, cols = t, sr = sc, sc = 1;
  }
  const __m256i emask = _mm256_set1_epi16(0x7F80), lo = _mm256_set1_epi16(71 << 7),
                hi = _mm256_set1_epi16(189 << 7), mant = _mm256_set1_epi16(0x7FFF);
  for (int64_t r = 0; r < rows; r++) {
    const char *row = (const char *)p + 2 * r * sr;
    int64_t c = 0;
    if (sc == 1) {
      __m256i bad = _mm256_setzero_si256();
      for (; c + 16 <= cols; c += 16) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(row + 2 * c));
        const __m256i e = _mm256_and_si256(v, emask);
        /* exponent bits as signed 16-bit values: 0 .. 0x7F80, no wrap */
        const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi16(lo, e), _mm256_cmpgt_epi16(e, hi));
        const __m256i zero = _mm256_cmpeq_epi16(_mm256_and_si256(v, mant), _mm256_setzero_si256());
        bad = _mm256_or_si256(bad, _mm256_andnot_si256(zero, out));
      }
      if (!_mm256_testz_si256(bad, bad))
        return 0;
    }
    for (; c < cols; c++) {
      const uint16_t v = bits16(row, c * sc);
      const int e = (v >> 7) & 0xFF;
      if ((v & 0x7FFF) != 0 && (e < 71 || e > 189))
        return 0;
    }
  }
  return 1;
}

int ampc_gemm_bf16dot_accepts(const ampc_gemm_args *g) {
  if (g->adt != AMPC_BF16 || g->bdt != AMPC_BF16)
    return 0;
  for (int64_t t = 0; t < g->batch; t++) {
    if (!bf16_in_dot_range(at(g->a, AMPC_BF16, t * g->stride_a), g->m, g->k, g->rs_a, g->cs_a) ||
        !bf16_in_dot_range(at(g->b, AMPC_BF16, t * g->stride_b), g->k, g->n, g->rs_b, g->cs_b))
      return 0;
    if (g->stride_a == 0 && g->stride_b == 0)
      break; /* the same operands for every matrix */
  }
  return 1;
}

/* C tile (6 x 16, FP32, row stride ldc) = (or +=) A panel * B panel over kc:
 * each element's products summed in p order by FMA from +0, then (accumulate)
 * added to C; the same operations as every other micro-kernel. */
static void kernel_6x16(int64_t kc, const float *restrict a, const float *restrict b,
                        float *restrict c, int64_t ldc, int accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; p++) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 av;
    av = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
    a += 6;
    b += 16;
  }
  __m256 acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (int r = 0; r < 6; r++) {
    float *cr = c + r * ldc;
    if (accumulate) {
      acc[2 * r] = _mm256_add_ps(acc[2 * r], _mm256_load_ps(cr));
      acc[2 * r + 1] = _mm256_add_ps(acc[2 * r + 1], _mm256_load_ps(cr + 8));
    }
    _mm256_store_ps(cr, acc[2 * r]);
    _mm256_store_ps(cr + 8, acc[2 * r + 1]);
  }
}

/* 8 FP32 lanes rounded to bfloat16 (RNE; NaN quieted), in the low halves. */
static inline __m128i bf16_round8(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
  __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                                     _mm256_set1_epi32(0x7F800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(x, _mm256_set1_epi32(0x00400000)), isnan);
  r = _mm256_srli_epi32(r, 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* C[i][j] = alpha*Cs + beta*C for an mcur x ncur block; one rounding to C's dtype. */
static void epilogue(const ampc_gemm_args *g, void *c, int64_t ic, int64_t jc, int64_t mcur,
                     int64_t ncur, const float *cs, int64_t ldcs) {
  const __m256 va = _mm256_set1_ps(g->alpha), vb = _mm256_set1_ps(g->beta);
  const int use_beta = g->beta != 0.0f;
  const ampc_dtype dt = g->cdt;
  ampc_tally *const tm = ampc_tally_tls;
  float tbuf[64];
  void *tdst = NULL;
  int tn = 0;
  for (int64_t i = 0; i < mcur; i++) {
    const float *srow = cs + i * ldcs;
    const int64_t base = (ic + i) * g->ldc + jc;
    int64_t j = 0;
    for (; j + 8 <= ncur; j += 8) {
      __m256 v = _mm256_mul_ps(va, _mm256_load_ps(srow + j));
      void *cp = (char *)c + (base + j) * (int64_t)esz(dt);
      if (use_beta)
        v = _mm256_add_ps(v, _mm256_mul_ps(vb, load8(cp, dt)));
      switch (dt) {
      case AMPC_F16: _mm_storeu_si128((__m128i *)cp, _mm256_cvtps_ph(v, 0)); break;
      case AMPC_BF16: _mm_storeu_si128((__m128i *)cp, bf16_round8(v)); break;
      default: _mm256_storeu_ps((float *)cp, v); break;
      }
      if (tm) { /* telemetry: count a row's stores 64 at a time (they are contiguous) */
        if (tn == 0)
          tdst = cp;
        _mm256_storeu_ps(tbuf + tn, v);
        tn += 8;
        if (tn == 64) {
          ampc_tally_count(tm, tbuf, tdst, dt, 64);
          tn = 0;
        }
      }
    }
    if (tn) {
      ampc_tally_count(tm, tbuf, tdst, dt, (size_t)tn);
      tn = 0;
    }
    if (j < ncur) { /* the last 1..7 columns: the same lane arithmetic through a buffer
                       (Cs rows are padded to NR, so srow[j .. j+7] can be read) */
      const size_t rem = (size_t)(ncur - j), es = esz(dt);
      void *cp = (char *)c + (base + j) * (int64_t)es;
      _Alignas(32) uint16_t tmp[16] = {0};
      __m256 v = _mm256_mul_ps(va, _mm256_loadu_ps(srow + j));
      if (use_beta) {
        memcpy(tmp, cp, rem * es);
        v = _mm256_add_ps(v, _mm256_mul_ps(vb, load8(tmp, dt)));
      }
      switch (dt) {
      case AMPC_F16: _mm_store_si128((__m128i *)tmp, _mm256_cvtps_ph(v, 0)); break;
      case AMPC_BF16: _mm_store_si128((__m128i *)tmp, bf16_round8(v)); break;
      default: _mm256_store_ps((float *)tmp, v); break;
      }
      memcpy(cp, tmp, rem * es);
      if (tm) {
        _mm256_storeu_ps(tbuf, v);
        ampc_tally_count(tm, tbuf, cp, dt, rem);
      }
    }
  }
}

typedef struct {
  int64_t mr, nr;                       /* the micro-tile */
  int64_t mt, mc, kc, nc, ldcs, tm, tn; /* task rows, A block rows, ..., task grid */
  size_t ap_floats, bp_floats, cs_floats;
} plan;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Estimated time of one thread's share when the tasks of a tm x tn grid (per
 * batch matrix) of an m x n product run on nthreads (<= GRID_THREADS)
 * threads: each task costs its padded rows x columns (the multiply-adds per
 * unit of K) plus PACK_W per packed row and column (each task packs its own
 * A rows and B columns), and the tasks are dealt largest first to the least
 * loaded thread (LPT, a model of the dynamic schedule). */
enum { PACK_W = 8, GRID_THREADS = 8, GRID_TASKS_PER_THREAD = 4 };
static double grid_makespan(int64_t m, int64_t n, int64_t batch, int64_t mt, int64_t nc, int64_t mr,
                            int64_t nr, int nthreads) {
  double load[GRID_THREADS] = {0};
  const int64_t tm = ceil_div(m, mt), tn = ceil_div(n, nc);
  /* task sizes: full, last row, last column, corner (counts of each) */
  const int64_t rl = round_up(m - (tm - 1) * mt, mr), cl = round_up(n - (tn - 1) * nc, nr);
  const int64_t rows[2] = {mt, rl}, cols[2] = {nc, cl};
  const int64_t cnt_r[2] = {tm - 1, 1}, cnt_c[2] = {tn - 1, 1};
  double cost[4];
  int64_t count[4];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      cost[i * 2 + j] = (double)rows[i] * (double)cols[j] + PACK_W * (double)(rows[i] + cols[j]);
      count[i * 2 + j] = batch * cnt_r[i] * cnt_c[j];
    }
  for (int rep = 0; rep < 4; rep++) { /* largest first */
    int best = -1;
    for (int q = 0; q < 4; q++)
      if (count[q] > 0 && (best < 0 || cost[q] > cost[best]))
        best = q;
    if (best < 0)
      break;
    for (int64_t t = 0; t < count[best]; t++) {
      int lo = 0;
      for (int i = 1; i < nthreads; i++)
        if (load[i] < load[lo])
          lo = i;
      load[lo] += cost[best];
    }
    count[best] = 0;
  }
  double mk = 0;
  for (int i = 0; i < nthreads; i++)
    mk = load[i] > mk ? load[i] : mk;
  return mk;
}

/* Block sizes for this problem: the configured ones, shrunk to the matrix.
 * When there are few tasks for the threads, the task grid (task height MT,
 * width NC) is re-cut: on up to GRID_THREADS threads to the grid of at most
 * GRID_TASKS_PER_THREAD tasks a thread with the least estimated time
 * (grid_makespan), e.g. a 128 x 128 product on 2 threads in two 128 x 64
 * tasks rather than 72 and 56 rows (a search of at most 64 grids of at most
 * 32 tasks); on more threads to the first grid whose task count the threads
 * divide. The grid only partitions C: the bits do not depend on it. */
static plan make_plan(const ampc_gemm_args *g, const ampc_gemm_config *cfg, int nthreads,
                      const ampc_gemm_ukernel *uk) {
  plan P;
  const int64_t MR = uk->mr, NR = uk->nr;
  P.mr = MR, P.nr = NR;
  /* KC is the configured one whatever the micro-tile: it fixes where each
   * element's FP32 sum is split, so every micro-kernel gives the same bits */
  P.kc = min64(g->k, cfg->kc);
  P.mc = min64(round_up(g->m, MR), round_up(cfg->mc, MR));
  P.mt = min64(round_up(g->m, MR), round_up(cfg->mc, MR) * TASK_BLOCKS);
  P.nc = min64(round_up(g->n, NR), round_up(cfg->nc, NR));
  P.tm = ceil_div(g->m, P.mt);
  P.tn = ceil_div(g->n, P.nc);
  const int64_t ntasks = g->batch * P.tm * P.tn;
  if (nthreads > 1 && nthreads <= GRID_THREADS && ntasks < GRID_TASKS_PER_THREAD * nthreads) {
    double best = grid_makespan(g->m, g->n, g->batch, P.mt, P.nc, MR, NR, nthreads);
    const int64_t tm_max = min64(ceil_div(g->m, MR), P.tm * 8);
    const int64_t tn_max = min64(ceil_div(g->n, NR), P.tn * 8);
    for (int64_t tm = P.tm; tm <= tm_max; tm++)
      for (int64_t tn = P.tn; tn <= tn_max; tn++) {
        const int64_t mt = round_up(ceil_div(g->m, tm), MR), nc = round_up(ceil_div(g->n, tn), NR);
        if (g->batch * ceil_div(g->m, mt) * ceil_div(g->n, nc) > GRID_TASKS_PER_THREAD * nthreads)
          continue;
        const double t = grid_makespan(g->m, g->n, g->batch, mt, nc, MR, NR, nthreads);
        if (t < best * 0.999) /* strictly better: fewer tasks win ties */
          best = t, P.mt = mt, P.nc = nc;
      }
    P.tm = ceil_div(g->m, P.mt);
    P.tn = ceil_div(g->n, P.nc);
  } else if (nthreads > 1 && ntasks % nthreads != 0 && ntasks < 16 * nthreads) {
    int done = 0;
    for (int64_t tm = P.tm + 1; !done && tm <= ceil_div(g->m, MR); tm++) {
      int64_t mt = round_up(ceil_div(g->m, tm), MR), tm2 = ceil_div(g->m, mt);
      if ((g->batch * tm2 * P.tn) % nthreads == 0)
        P.mt = mt, P.tm = tm2, done = 1;
    }
    for (int64_t tn = P.tn + 1; !done && tn <= ceil_div(g->n, NR); tn++) {
      int64_t nc = round_up(ceil_div(g->n, tn), NR), tn2 = ceil_div(g->n, nc);
      if ((g->batch * P.tm * tn2) % nthreads == 0)
        P.nc = nc, P.tn = tn2, done = 1;
    }
  }
  P.mc = min64(P.mc, P.mt);
  P.ldcs = P.nc + 16; /* avoid power-of-two row strides in the C block */
  P.ap_floats = (size_t)(P.mc * P.kc + SLACK);
  P.bp_floats = (size_t)(P.kc * P.nc + SLACK);
  P.cs_floats = (size_t)(P.mt * P.ldcs);
  return P;
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static void run_task(const ampc_gemm_args *g, const plan *P, const ampc_gemm_ukernel *uk,
                     int64_t task, float *ap, float *bp, float *cs) {
  const int MR = (int)P->mr, NR = (int)P->nr;
  /* with telemetry on, the stores go through the epilogue, which counts them */
  const int fuse = uk->fn_out != NULL && !ampc_tally_tls;
  const int64_t es = (int64_t)esz(g->cdt);
  const int64_t per = P->tm * P->tn;
  const int64_t t = task / per, ti = (task % per) / P->tn, tj = task % P->tn;
  const void *a = at(g->a, g->adt, t * g->stride_a);
  const void *b = at(g->b, g->bdt, t * g->stride_b);
  void *c = (char *)g->c + t * g->stride_c * (int64_t)esz(g->cdt);
  const int64_t it = ti * P->mt, jc = tj * P->nc;
  const int64_t mtcur = min64(g->m - it, P->mt), ncur = min64(g->n - jc, P->nc);
  for (int64_t pc = 0; pc < g->k; pc += P->kc) {
    const int64_t kcur = min64(g->k - pc, P->kc);
    const void *bsl = at(b, g->bdt, pc * g->rs_b + jc * g->cs_b);
    /* the pairs kernel while every operand packed so far in this slice is in
     * its range; else this slice (from the first A block that is not, B
     * re-packed) on the FP32 kernel: each slice's sums start from +0 and are
     * added in order, so mixing the two kernels keeps the bits */
    const ampc_gemm_ukernel *k = uk;
    if (!uk->bf16_pairs || !pack_b_pairs((uint32_t *)bp, NR, ncur, bsl, kcur, g->cs_b, g->rs_b)) {
      k = uk->bf16_pairs ? uk->fallback : uk;
      pack_b(bp, NR, ncur, bsl, g->bdt, g->n - jc, kcur, g->cs_b, g->rs_b);
    }
    for (int64_t ic = it; ic < it + mtcur; ic += P->mc) {
      const int64_t mcur = min64(it + mtcur - ic, P->mc);
      int pairs = k->bf16_pairs;
      for (int64_t ir = 0; pairs && ir < mcur; ir += MR)
        pairs = pack_pairs((uint32_t *)(ap + ir * kcur), MR,
                           at(a, g->adt, (ic + ir) * g->rs_a + pc * g->cs_a),
                           (int)min64(mcur - ir, MR), kcur, g->rs_a, g->cs_a);
      if (k->bf16_pairs && !pairs) {
        k = uk->fallback;
        pack_b(bp, NR, ncur, bsl, g->bdt, g->n - jc, kcur, g->cs_b, g->rs_b);
      }
      if (!k->bf16_pairs)
        for (int64_t ir = 0; ir < mcur; ir += MR)
          pack_panel(ap + ir * kcur, MR, at(a, g->adt, (ic + ir) * g->rs_a + pc * g->cs_a), g->adt,
                     (int)min64(mcur - ir, MR), g->m - ic - ir, kcur, g->rs_a, g->cs_a);
      float *cblk = cs + (ic - it) * P->ldcs;
      if (fuse && pc + kcur >= g->k) { /* the last slice, straight into C */
        for (int64_t jr = 0; jr < ncur; jr += NR)
          for (int64_t ir = 0; ir < mcur; ir += MR) {
            const ampc_gemm_out o = {(char *)c + ((ic + ir) * g->ldc + jc + jr) * es,
                                     g->ldc,
                                     g->cdt,
                                     g->alpha,
                                     g->beta,
                                     (int)min64(MR, mcur - ir),
                                     (int)min64(NR, ncur - jr)};
            k->fn_out(kcur, ap + ir * kcur, bp + jr * kcur, cblk + ir * P->ldcs + jr, P->ldcs,
                      pc > 0, &o);
          }
      } else {
        for (int64_t jr = 0; jr < ncur; jr += NR)
          for (int64_t ir = 0; ir < mcur; ir += MR)
            k->fn(kcur, ap + ir * kcur, bp + jr * kcur, cblk + ir * P->ldcs + jr, P->ldcs, pc > 0);
      }
    }
  }
  if (!fuse)
    epilogue(g, c, it, jc, mtcur, ncur, cs, P->ldcs);
}

const ampc_gemm_ukernel ampc_gemm_uk_avx2 = {
    .mr = 6, .nr = 16, .fn = kernel_6x16, .fn_out = NULL, .isa = "avx2+fma+f16c"};

/* Workspaces up to this many floats live on the stack when one thread runs
 * the whole GEMM (the small per-head products of attention: no malloc). */
enum { STACK_WS = 8192 };

ampc_status ampc_gemm_blocked(const ampc_gemm_args *g, const ampc_gemm_config *cfg, int nthreads,
                              const ampc_gemm_ukernel *uk) {
  /* called from inside a parallel region that cannot nest (attention's
   * per-sample loop): plan for the one thread that will run it */
  if (omp_in_parallel() && omp_get_active_level() >= omp_get_max_active_levels())
    nthreads = 1;
  if (uk->bf16_pairs && (g->adt != AMPC_BF16 || g->bdt != AMPC_BF16))
    uk = uk->fallback;
  const plan P = make_plan(g, cfg, nthreads, uk);
  const int64_t ntasks = g->batch * P.tm * P.tn;
  if (nthreads > ntasks)
    nthreads = (int)ntasks;
  const size_t per_thread = round16(P.ap_floats) + round16(P.bp_floats) + round16(P.cs_floats);
  if (nthreads == 1 && per_thread <= STACK_WS) { /* no workspace allocation, no thread team */
    _Alignas(64) float ws[STACK_WS];
    for (int64_t task = 0; task < ntasks; task++)
      run_task(g, &P, uk, task, ws, ws + round16(P.ap_floats),
               ws + round16(P.ap_floats) + round16(P.bp_floats));
    return AMPC_OK;
  }
  const size_t bytes = (size_t)nthreads * per_thread * sizeof(float);
  float *ws = ampc_gemm_workspace(bytes);
  if (!ws)
    return ampc_fail(AMPC_ERR_NOMEM, "gemm: cannot allocate %zu bytes of workspace", bytes);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {
    ampc_tally_adopt(tally);
    float *ap = ws + (size_t)omp_get_thread_num() * per_thread;
    float *bp = ap + round16(P.ap_floats);
    float *cs = bp + round16(P.bp_floats);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; task++)
      run_task(g, &P, uk, task, ap, bp, cs);
  }
  return AMPC_OK;
}

/* ---- the FP16-accumulation ablation, 4 x 8 chains at a time ---------------- */

/* binary16 rounding of 4 doubles (RNE, subnormals kept, overflow to inf, inf
 * and NaN unchanged): the vector form of round_f16_f64 in gemm.c, same steps. */
static inline __m256d round_f16_pd(__m256d x) {
  const __m256i xb = _mm256_castpd_si256(x);
  const __m256i sign = _mm256_and_si256(xb, _mm256_set1_epi64x((long long)0x8000000000000000ull));
  const __m256i ax = _mm256_andnot_si256(_mm256_set1_epi64x((long long)0x8000000000000000ull), xb);
  __m256i e = _mm256_sub_epi64(_mm256_srli_epi64(ax, 52), _mm256_set1_epi64x(1023));
  const __m256i lo = _mm256_set1_epi64x(-14), hi = _mm256_set1_epi64x(17);
  e = _mm256_blendv_epi8(e, lo, _mm256_cmpgt_epi64(lo, e));
  e = _mm256_blendv_epi8(e, hi, _mm256_cmpgt_epi64(e, hi));
  const __m256d up = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_sub_epi64(_mm256_set1_epi64x(1023 + 10), e), 52));
  const __m256d down = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_add_epi64(_mm256_set1_epi64x(1023 - 10), e), 52));
  const __m256d magic = _mm256_set1_pd(0x1.8p52);
  const __m256d q = _mm256_mul_pd(x, up);
  const __m256d r = _mm256_sub_pd(_mm256_add_pd(q, magic), magic);
  __m256d v = _mm256_or_pd(_mm256_mul_pd(r, down), _mm256_castsi256_pd(sign));
  const __m256d absv = _mm256_andnot_pd(
      _mm256_castsi256_pd(_mm256_set1_epi64x((long long)0x8000000000000000ull)), v);
  const __m256d over = _mm256_cmp_pd(absv, _mm256_set1_pd(65504.0), _CMP_GT_OQ);
  const __m256d inf = _mm256_or_pd(_mm256_set1_pd((double)INFINITY), _mm256_castsi256_pd(sign));
  v = _mm256_blendv_pd(v, inf, over);
  const __m256i special = _mm256_cmpgt_epi64(ax, _mm256_set1_epi64x(0x7FEFFFFFFFFFFFFFll));
  return _mm256_blendv_pd(v, x, _mm256_castsi256_pd(special));
}

/* a*b + s by FMA with the NaN the scalar path's fma(a, b, s) gives (glibc:
 * a's if a is NaN, else b's, else s's, else the default NaN of an invalid
 * operation), whichever operand order the compiler picks for VFMADD (the
 * hardware returns its first source operand's NaN). */
static inline __m256d fma_nan_ordered(__m256d a, __m256d b, __m256d s) {
  __m256d r = _mm256_fmadd_pd(a, b, s);
  const __m256d nan = _mm256_cmp_pd(r, r, _CMP_UNORD_Q);
  if (__builtin_expect(!_mm256_testz_pd(nan, nan), 0)) {
    r = _mm256_blendv_pd(r, s, _mm256_cmp_pd(s, s, _CMP_UNORD_Q));
    r = _mm256_blendv_pd(r, b, _mm256_cmp_pd(b, b, _CMP_UNORD_Q));
    r = _mm256_blendv_pd(r, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  return r;
}

ampc_status ampc_gemm_acc16_avx2(const ampc_gemm_args *g, int nthreads) {
  enum { RB = 4, CB = 8 };
  const int64_t m = g->m, n = g->n, k = g->k;
  const int64_t m4 = round_up(m, RB), n8 = round_up(n, CB);
  size_t bytes;
  if (__builtin_mul_overflow((size_t)(m4 + n8), (size_t)k * sizeof(double), &bytes))
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): workspace size overflows");
  double *ad = ampc_gemm_workspace(bytes);
  if (!ad)
    return ampc_fail(AMPC_ERR_NOMEM, "gemm (fp16 accumulation): cannot allocate %zu bytes", bytes);
  double *bd = ad + m4 * k; /* K x n8, row p contiguous over j */
  const int64_t nblk = (m4 / RB) * (n8 / CB);
  for (int64_t t = 0; t < g->batch; t++) {
    const void *a = at(g->a, g->adt, t * g->stride_a);
    const void *b = at(g->b, g->bdt, t * g->stride_b);
    void *c = (char *)g->c + t * g->stride_c * (int64_t)esz(g->cdt);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel num_threads(nthreads)
    {
      ampc_tally_adopt(tally);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < m4; i++)
        for (int64_t p = 0; p < k; p++)
          ad[i * k + p] =
              i < m ? (double)ampc_gemm_load(a, g->adt, i * g->rs_a + p * g->cs_a) : 0.0;
#pragma omp for schedule(static)
      for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n8; j++)
          bd[p * n8 + j] =
              j < n ? (double)ampc_gemm_load(b, g->bdt, p * g->rs_b + j * g->cs_b) : 0.0;
#pragma omp for schedule(dynamic, 4)
      for (int64_t blk = 0; blk < nblk; blk++) {
        const int64_t i0 = (blk / (n8 / CB)) * RB, j0 = (blk % (n8 / CB)) * CB;
        __m256d s[RB][2];
        for (int r = 0; r < RB; r++)
          s[r][0] = s[r][1] = _mm256_setzero_pd();
        for (int64_t p = 0; p < k; p++) {
          const __m256d b0 = _mm256_load_pd(bd + p * n8 + j0);
          const __m256d b1 = _mm256_load_pd(bd + p * n8 + j0 + 4);
          for (int r = 0; r < RB; r++) {
            const __m256d av = _mm256_broadcast_sd(ad + (i0 + r) * k + p);
            s[r][0] = round_f16_pd(fma_nan_ordered(av, b0, s[r][0]));
            s[r][1] = round_f16_pd(fma_nan_ordered(av, b1, s[r][1]));
          }
        }
        for (int r = 0; r < RB && i0 + r < m; r++) {
          double out[CB];
          _mm256_storeu_pd(out, s[r][0]);
          _mm256_storeu_pd(out + 4, s[r][1]);
          for (int jj = 0; jj < CB && j0 + jj < n; jj++)
            ampc_gemm_epilogue1(c, g->cdt, (i0 + r) * g->ldc + j0 + jj, g->alpha, g->beta,
                                (float)out[jj]);
        }
      }
    }
  }
  return AMPC_OK;
}

/* ---- the ablation for binary16 operands, round-to-odd in FP32 lanes --------- */

/* s <- binary16(s + prod) for 8 lanes, s a binary16 value and prod exact in
 * FP32 (a product of two binary16): the sum rounded to nearest in FP32 with
 * its exact error (Knuth's TwoSum: no overflow at these magnitudes), turned
 * into the round-to-odd sum (if inexact and the significand is even, one
 * step toward the exact value: an integer +-1 on the bits), then rounded to
 * nearest binary16 (VCVTPS2PH). Round-to-odd with 24 >= 11 + 2 bits and then
 * to nearest is the correctly rounded sum (Boldo and Melquiond 2008), as in
 * gemm_acc16_avx512.c. inf + finite keeps inf (its error is NaN: no step). */
static inline __m256 acc16_add8(__m256 s, __m256 prod) {
  const __m256 t = _mm256_add_ps(s, prod);
  const __m256 bp = _mm256_sub_ps(t, s), ap = _mm256_sub_ps(t, bp);
  const __m256 e = _mm256_add_ps(_mm256_sub_ps(s, ap), _mm256_sub_ps(prod, bp));
  const __m256i tb = _mm256_castps_si256(t);
  const __m256i even =
      _mm256_cmpeq_epi32(_mm256_and_si256(tb, _mm256_set1_epi32(1)), _mm256_setzero_si256());
  const __m256i inexact = _mm256_castps_si256(_mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_NEQ_OQ));
  /* +1 (away from 0) when e has t's sign, else -1 */
  const __m256i step = _mm256_or_si256(
      _mm256_srai_epi32(_mm256_xor_si256(_mm256_castps_si256(e), tb), 31), _mm256_set1_epi32(1));
  const __m256i ro = _mm256_add_epi32(tb, _mm256_and_si256(step, _mm256_and_si256(even, inexact)));
  return _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_castsi256_ps(ro), _MM_FROUND_TO_NEAREST_INT));
}

enum { A16_RB = 6, A16_CB = 16, A16_KC = 256 };

/* One 6 x 16 block over kc steps (12 chains); st: the running sums (6 x 16),
 * carried from slice to slice. ap: kc x 6 (p-major), bp: kc x 16, FP32. */
static void acc16_block8(int64_t kc, const float *restrict ap, const float *restrict bp,
                         float *restrict st) {
  __m256 s[A16_RB][2];
  for (int r = 0; r < A16_RB; r++)
    s[r][0] = _mm256_load_ps(st + r * A16_CB), s[r][1] = _mm256_load_ps(st + r * A16_CB + 8);
  for (int64_t p = 0; p < kc; p++) {
    const __m256 b0 = _mm256_load_ps(bp + p * A16_CB), b1 = _mm256_load_ps(bp + p * A16_CB + 8);
    for (int r = 0; r < A16_RB; r++) {
      const __m256 av = _mm256_broadcast_ss(ap + p * A16_RB + r);
      s[r][0] = acc16_add8(s[r][0], _mm256_mul_ps(av, b0));
      s[r][1] = acc16_add8(s[r][1], _mm256_mul_ps(av, b1));
    }
  }
  for (int r = 0; r < A16_RB; r++) {
    _mm256_store_ps(st + r * A16_CB, s[r][0]);
    _mm256_store_ps(st + r * A16_CB + 8, s[r][1]);
  }
}

ampc_status ampc_gemm_acc16_avx2_f16(const ampc_gemm_args *g, int nthreads) {
  const int64_t m = g->m, n = g->n, k = g->k;
  const int64_t mb = round_up(m, A16_RB), nb16 = round_up(n, A16_CB);
  const int64_t nbi = mb / A16_RB, nbj = nb16 / A16_CB, nblk = nbi * nbj;
  for (int64_t t = 0; t < g->batch; t++) {
    ampc_acc16_ws w;
    AMPC_TRY(ampc_acc16_workspace(mb, nb16, k, sizeof(float), &w));
    float *ad = w.a, *bd = w.b, *sd = w.s;
    const void *a = at(g->a, AMPC_F16, t * g->stride_a);
    const void *b = at(g->b, AMPC_F16, t * g->stride_b);
    void *c = (char *)g->c + t * g->stride_c * (int64_t)esz(g->cdt);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
    int nan_in = 0; /* a NaN among the operands: this matrix takes the double path */
#pragma omp parallel num_threads(nthreads)
    {
      ampc_tally_adopt(tally);
#pragma omp for schedule(static) reduction(| : nan_in)
      for (int64_t i = 0; i < mb; i++) {
        float *dst = ad + (i / A16_RB) * A16_RB * k + i % A16_RB;
        for (int64_t p = 0; p < k; p++) {
          const float v = i < m ? ampc_gemm_load(a, AMPC_F16, i * g->rs_a + p * g->cs_a) : 0.0f;
          nan_in |= v != v;
          dst[p * A16_RB] = v;
        }
      }
#pragma omp for schedule(static) reduction(| : nan_in)
      for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < nb16; j++) {
          const float v = j < n ? ampc_gemm_load(b, AMPC_F16, p * g->rs_b + j * g->cs_b) : 0.0f;
          nan_in |= v != v;
          bd[(j / A16_CB) * A16_CB * k + p * A16_CB + j % A16_CB] = v;
        }
      /* (the reductions end in a barrier: every thread sees the same nan_in) */
      if (!nan_in) {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < mb * nb16; i++)
          sd[i] = 0.0f; /* +0 */
        for (int64_t p0 = 0; p0 < k; p0 += A16_KC) {
          const int64_t kc = k - p0 < A16_KC ? k - p0 : A16_KC;
#pragma omp for schedule(dynamic, 1)
          for (int64_t blk = 0; blk < nblk; blk++) {
            const int64_t jb = blk / nbi, ib = blk % nbi;
            acc16_block8(kc, ad + ib * A16_RB * k + p0 * A16_RB, bd + jb * A16_CB * k + p0 * A16_CB,
                         sd + (ib * nbj + jb) * A16_RB * A16_CB);
          }
        }
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblk; blk++) {
          const int64_t i0 = (blk / nbj) * A16_RB, j0 = (blk % nbj) * A16_CB;
          const float *st = sd + blk * A16_RB * A16_CB;
          for (int r = 0; r < A16_RB && i0 + r < m; r++)
            for (int jj = 0; jj < A16_CB && j0 + jj < n; jj++)
              ampc_gemm_epilogue1(c, g->cdt, (i0 + r) * g->ldc + j0 + jj, g->alpha, g->beta,
                                  st[r * A16_CB + jj]);
        }
      }
    }
    if (nan_in) /* the NaN a sum ends with follows the FMA's operand order */
      AMPC_TRY(ampc_acc16_nan_fallback(g, a, b, c, nthreads));
  }
  return AMPC_OK;
}

/* ---- the FMA peak (bench: ampc_gemm_fma_peak) ------------------------------ */

/* iters x 12 independent 256-bit FP32 FMA chains (c = c * 0.5 + 0.5);
 * returns the FLOPs done. */
double ampc_peak_f32_avx2(int64_t iters) {
  const __m256 x = _mm256_set1_ps(0.5f), y = _mm256_set1_ps(0.5f);
  __m256 c0 = _mm256_set1_ps(1.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m256 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t i = 0; i < iters; i++) {
    c0 = _mm256_fmadd_ps(c0, x, y), c1 = _mm256_fmadd_ps(c1, x, y);
    c2 = _mm256_fmadd_ps(c2, x, y), c3 = _mm256_fmadd_ps(c3, x, y);
    c4 = _mm256_fmadd_ps(c4, x, y), c5 = _mm256_fmadd_ps(c5, x, y);
    c6 = _mm256_fmadd_ps(c6, x, y), c7 = _mm256_fmadd_ps(c7, x, y);
    c8 = _mm256_fmadd_ps(c8, x, y), c9 = _mm256_fmadd_ps(c9, x, y);
    c10 = _mm256_fmadd_ps(c10, x, y), c11 = _mm256_fmadd_ps(c11, x, y);
    __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5));
    __asm__ volatile("" : "+x"(c6), "+x"(c7), "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c10, c11)));
  volatile float sink = out[0];
  (void)sink;
  (void)c2, (void)c3, (void)c4, (void)c5, (void)c6, (void)c7, (void)c8, (void)c9;
  return (double)iters * 12 * 8 * 2;
}
