/*
 * src/kernels/gemm_pack_avx2.c: the packing and output kernels of the blocked
 * GEMM (gemm_frame.c) on AVX2 + FMA + F16C, registered as ampc_gemm_pack_avx2
 * and shared by the 6 x 16 AVX2 and the 12 x 32 AVX-512 micro-kernels:
 * A and B micro-panels widened to FP32 (F16 by VCVTPH2PS, BF16 by a shift:
 * exact), bfloat16 pair panels for the VDPBF16PS kernel with its range
 * check, and the output stage C = alpha*Cs + beta*C rounded once to C's
 * dtype. Compiled with -mavx2 -mfma -mf16c and only called after the
 * run-time CPU check. No load reads outside the caller's matrices
 * (prefetches may point past them; they never fault).
 */
#include "internal.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/gemm_impl.h"

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
 * but are not used). May write up to 8 floats past dst + kc*R (within the slack the framework
 * leaves after each panel).
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
          v[g / 8][rr] =
              r < rv ? load8(ampc_gemm_at(src, dt, r * stride_r + p), dt) : _mm256_setzero_ps();
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
      const void *s = ampc_gemm_at(src, dt, p * stride_p);
      for (int g = 0; g < R; g += 8)
        _mm256_storeu_ps(dst + p * R + g, load8(ampc_gemm_at(s, dt, g), dt));
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
  const int64_t row_bytes = (int64_t)nsub * NR * (int64_t)ampc_gemm_esz(dt);
  for (int64_t p = 0; p < kc; p++) {
    const void *row = ampc_gemm_at(src, dt, p * stride_p);
    const char *ahead = (const char *)ampc_gemm_at(src, dt, (p + 8) * stride_p);
    for (int64_t off = 0; off < row_bytes; off += 64)
      _mm_prefetch(ahead + off, _MM_HINT_T0);
    for (int s = 0; s < nsub; s++) {
      float *d = dst + (int64_t)s * kc * NR + p * NR;
      for (int q = 0; q < NR; q += 8)
        _mm256_store_ps(d + q, load8(ampc_gemm_at(row, dt, s * NR + q), dt));
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
    pack_panel(dst + j * kc, NR, ampc_gemm_at(src, dt, j * stride_r), dt, rv, navail - j, kc,
               stride_r, stride_p);
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
 * (the offsets of pack_b, so that the framework addresses both alike). */
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
    if (!bf16_in_dot_range(ampc_gemm_at(g->a, AMPC_BF16, t * g->stride_a), g->m, g->k, g->rs_a,
                           g->cs_a) ||
        !bf16_in_dot_range(ampc_gemm_at(g->b, AMPC_BF16, t * g->stride_b), g->k, g->n, g->rs_b,
                           g->cs_b))
      return 0;
    if (g->stride_a == 0 && g->stride_b == 0)
      break; /* the same operands for every matrix */
  }
  return 1;
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
  /* a bias (beta is 0 then) takes beta * C's place: alpha * sum + bias */
  const float *bias = g->epi && g->epi->bias ? g->epi->bias + jc : NULL;
  const ampc_dtype dt = g->cdt;
  ampc_tally *const tm = ampc_tally_tls;
  /* with C = 1 * sum (no beta), the values rounded have the block's sums'
   * bits (1 * x is x, a NaN stays a NaN; ampc leaves MXCSR's FTZ off): the
   * tally counts each row of sums in one call, after its stores */
  ampc_tally *const tm_buf = g->alpha == 1.0f && !use_beta && !bias ? NULL : tm;
  float tbuf[256];
  void *tdst = NULL;
  int tn = 0;
  for (int64_t i = 0; i < mcur; i++) {
    const float *srow = cs + i * ldcs;
    const int64_t base = (ic + i) * g->ldc + jc;
    int64_t j = 0;
    if (tm && !tm_buf)
      for (int64_t j8 = 0; j8 + 8 <= ncur; j8 += 8) { /* the stores of the j loop below */
        const __m256 v = _mm256_mul_ps(va, _mm256_load_ps(srow + j8));
        void *cp = (char *)c + (base + j8) * (int64_t)ampc_gemm_esz(dt);
        switch (dt) {
        case AMPC_F16: _mm_storeu_si128((__m128i *)cp, _mm256_cvtps_ph(v, 0)); break;
        case AMPC_BF16: _mm_storeu_si128((__m128i *)cp, bf16_round8(v)); break;
        default: _mm256_storeu_ps((float *)cp, v); break;
        }
        j = j8 + 8;
      }
    if (j > 0)
      ampc_tally_count(tm, srow, (char *)c + base * (int64_t)ampc_gemm_esz(dt), dt, (size_t)j);
    for (; j + 8 <= ncur; j += 8) {
      __m256 v = _mm256_mul_ps(va, _mm256_load_ps(srow + j));
      void *cp = (char *)c + (base + j) * (int64_t)ampc_gemm_esz(dt);
      if (use_beta)
        v = _mm256_add_ps(v, _mm256_mul_ps(vb, load8(cp, dt)));
      else if (bias)
        v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
      switch (dt) {
      case AMPC_F16: _mm_storeu_si128((__m128i *)cp, _mm256_cvtps_ph(v, 0)); break;
      case AMPC_BF16: _mm_storeu_si128((__m128i *)cp, bf16_round8(v)); break;
      default: _mm256_storeu_ps((float *)cp, v); break;
      }
      if (tm_buf) { /* telemetry: count a row's stores 256 at a time (they are contiguous) */
        if (tn == 0)
          tdst = cp;
        _mm256_storeu_ps(tbuf + tn, v);
        tn += 8;
        if (tn == 256) {
          ampc_tally_count(tm, tbuf, tdst, dt, 256);
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
      const size_t rem = (size_t)(ncur - j), es = ampc_gemm_esz(dt);
      void *cp = (char *)c + (base + j) * (int64_t)es;
      _Alignas(32) uint16_t tmp[16] = {0};
      __m256 v = _mm256_mul_ps(va, _mm256_loadu_ps(srow + j));
      if (use_beta) {
        memcpy(tmp, cp, rem * es);
        v = _mm256_add_ps(v, _mm256_mul_ps(vb, load8(tmp, dt)));
      } else if (bias) {
        _Alignas(32) float bt[8] = {0};
        memcpy(bt, bias + j, rem * sizeof(float));
        v = _mm256_add_ps(v, _mm256_load_ps(bt));
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

const ampc_gemm_packer ampc_gemm_pack_avx2 = {
    .a = pack_panel, .b = pack_b, .pairs = pack_pairs, .b_pairs = pack_b_pairs, .out = epilogue};
