/*
 * src/nn/linear.c: y = x W^T + b on ampc_gemm, and its backward pass; the
 * FP8 and INT8 forms; and the fused layers (a linear layer with the GELU,
 * the residual add or the GELU's backward step in the GEMM's store).
 */
#include "nn/nn_util.h"
#include "nn/elementwise_impl.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum { LIN_BIAS_ROW = 4096 }; /* widest bias row on the stack */

/* y = alpha * x W^T + b, the bias in bdt; post (or NULL): ampc_gemm_epi's
 * post step on y's blocks (then there are no stats) */
static ampc_status linear_fwd_post(const char *fn, int64_t m, int64_t k, int64_t n, const void *x,
                                   ampc_dtype xdt, const void *w, ampc_dtype wdt, const void *b,
                                   ampc_dtype bdt, float alpha, void *y, ampc_dtype ydt,
                                   ampc_acc acc, ampc_round_stats *stats,
                                   const ampc_gemm_epi *post) {
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  /* With telemetry the product goes to an FP32 buffer first, so that the one
   * rounding into y can be counted; otherwise straight into y. The bias is
   * rounded once to the destination's dtype (exact when y's dtype holds it:
   * both the preset's dtype, or y F32) and added by the GEMM's store in FP32
   * before the rounding (ampc_gemm_epi); the FP16-accumulation ablation lays
   * it into the destination instead and adds it with beta = 1 (the same
   * values). */
  const ampc_dtype cdt = stats ? AMPC_F32 : ydt;
  void *c = stats ? malloc((size_t)(m * n) * sizeof(float)) : y;
  float rowst[LIN_BIAS_ROW];
  float *row = b && n > LIN_BIAS_ROW ? malloc((size_t)n * sizeof *row) : rowst;
  if (!c || !row) {
    if (stats)
      free(c);
    if (row != rowst)
      free(row);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn, (long long)(m * n));
  }
  ampc_gemm_epi epi = post ? *post : (ampc_gemm_epi){0};
  if (b) { /* the bias row rounded once to C's dtype (not counted: not a result) */
    nn_load(b, bdt, 0, n, row);
    for (int64_t j = 0; j < n; j++) {
      uint32_t held = 0;
      ampc_elem_store_uncounted(&held, cdt, 0, row[j]);
      row[j] = ampc_elem_load(&held, cdt, 0);
    }
  }
  ampc_status st;
  if (acc == AMPC_ACC_F32) {
    epi.bias = b ? row : NULL;
    st = ampc_gemm_ex(AMPC_OP_N, AMPC_OP_T, m, n, k, alpha, x, xdt, k, w, wdt, k, 0.0f, c, cdt, n,
                      acc, epi.bias || epi.post ? &epi : NULL);
  } else {
    if (b) {
      const int nt = nn_threads(m * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
          ampc_elem_store_uncounted(c, cdt, i * n + j, row[j]);
    }
    st = ampc_gemm(AMPC_OP_N, AMPC_OP_T, m, n, k, alpha, x, xdt, k, w, wdt, k, b ? 1.0f : 0.0f, c,
                   cdt, n, acc);
    if (st == AMPC_OK && post)
      post->post(post->user, 0, m, 0, n);
  }
  if (st == AMPC_OK && stats)
    st = ampc_store_f32(y, ydt, c, (size_t)(m * n), stats);
  if (stats)
    free(c);
  if (row != rowst)
    free(row);
  return st;
}

static ampc_status linear_fwd(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                              const void *w, ampc_dtype wdt, const void *b, ampc_dtype bdt,
                              float alpha, void *y, ampc_dtype ydt, ampc_acc acc,
                              ampc_round_stats *stats) {
  return linear_fwd_post("ampc_linear_forward", m, k, n, x, xdt, w, wdt, b, bdt, alpha, y, ydt, acc,
                         stats, NULL);
}

ampc_status ampc_linear_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                const void *w, ampc_dtype wdt, const void *b, void *y,
                                ampc_dtype ydt, ampc_acc acc, ampc_round_stats *stats) {
  const char *fn = "ampc_linear_forward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  return linear_fwd(m, k, n, x, xdt, w, wdt, b, wdt, 1.0f, y, ydt, acc, stats);
}

/* the bias gradient: db [n] += column sums of dy [m, n] */
static ampc_status bias_grad(int64_t m, int64_t n, const void *dy, ampc_dtype gdt, void *db,
                             ampc_scratch *ws) {
  const char *fn = "ampc_linear_backward";
  ampc_status st = AMPC_OK;
  { /* column sums in FP32 (rows in order), one rounding each */
    size_t off = 0;
    nn_buf sb;
    float *s = nn_take(ws, &off, (size_t)n * sizeof *s, &sb);
    if (!s)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lld floats", fn, (long long)n);
    memset(s, 0, (size_t)n * sizeof *s);
    /* columns in blocks of 64 shared among the threads, each summed over
     * the rows in order (the same bits for any thread count) */
    const int64_t nblk = (n + 63) / 64;
    const int nt = nn_threads(m * n);
    ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bk = 0; bk < nblk; bk++) {
      ampc_tally_adopt(tally);
      const int64_t j0 = bk * 64, len = n - j0 < 64 ? n - j0 : 64;
      float row[64];
      float *restrict sj = s + j0;
      for (int64_t i = 0; i < m; i++) {
        const float *restrict r = nn_in(dy, gdt, i * n + j0, len, row);
        for (int64_t j = 0; j < len; j++)
          sj[j] += r[j];
      }
    }
    for (int64_t j = 0; j < n; j++)
      nn_grad_add(db, gdt, j, s[j]);
    nn_give(&sb);
  }
  return st;
}

/* dW [n, k] += dy^T [n, m] . x [m, k] and db [n] += the column sums of dy
 * (rows in order from 0 in FP32, one rounding each into db): with FP32
 * accumulation the sums are formed while the GEMM packs dy^T (ampc_gemm_epi's
 * colsum, the same additions as bias_grad's), else by bias_grad */
static ampc_status weight_grads(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                                const void *x, ampc_dtype xdt, void *dw, void *db, ampc_acc acc,
                                ampc_scratch *ws) {
  if (!db || acc != AMPC_ACC_F32) {
    ampc_status st = ampc_gemm(AMPC_OP_T, AMPC_OP_N, n, k, m, 1.0f, dy, gdt, n, x, xdt, k, 1.0f, dw,
                               gdt, k, acc);
    if (st == AMPC_OK && db)
      st = bias_grad(m, n, dy, gdt, db, ws);
    return st;
  }
  size_t off = 0;
  nn_buf sb;
  float *s = nn_take(ws, &off, (size_t)n * sizeof *s, &sb);
  if (!s)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_linear_backward: cannot allocate %lld floats",
                     (long long)n);
  memset(s, 0, (size_t)n * sizeof *s);
  const ampc_gemm_epi epi = {.colsum = s};
  const ampc_status st = ampc_gemm_ex(AMPC_OP_T, AMPC_OP_N, n, k, m, 1.0f, dy, gdt, n, x, xdt, k,
                                      1.0f, dw, gdt, k, acc, &epi);
  if (st == AMPC_OK)
    for (int64_t j = 0; j < n; j++)
      nn_grad_add(db, gdt, j, s[j]);
  nn_give(&sb);
  return st;
}

ampc_status ampc_linear_backward(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                                 const void *x, ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                 void *dx, void *dw, void *db, ampc_acc acc, ampc_scratch *ws) {
  const char *fn = "ampc_linear_backward";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, dw);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  ampc_status st = AMPC_OK;
  if (dx) /* dx [m, k] = dy [m, n] . W [n, k] */
    st = ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, w, wdt, k, 0.0f, dx, gdt, k,
                   acc);
  if (st == AMPC_OK)
    st = weight_grads(m, k, n, dy, gdt, x, xdt, dw, db, acc, ws);
  return st;
}

size_t ampc_linear_backward_scratch_bytes(int64_t n) {
  return n > 0 ? nn_pad64((size_t)n * sizeof(float)) : 0;
}

/* ---- FP8 (fp8-mixed): casts into BF16 containers, products with the
 * dequantization in alpha (include/ampc/nn.h) ---- */

void ampc_linear_fp8_init(ampc_linear_fp8 *f, ampc_scratch *ws) {
  memset(f, 0, sizeof *f);
  f->x.fmt = f->w.fmt = AMPC_F8_E4M3;
  f->dy.fmt = AMPC_F8_E5M2;
  f->x.scale = f->x.scale_inv = f->w.scale = f->w.scale_inv = 1.0f;
  f->dy.scale = f->dy.scale_inv = 1.0f;
  f->ws = ws;
}

size_t ampc_linear_fp8_ws_bytes(int64_t m, int64_t k, int64_t n) {
  if (m < 1 || k < 1 || n < 1)
    return 0;
  return nn_pad64((size_t)(m * k) * 2) + nn_pad64((size_t)(n * k) * 2) +
         nn_pad64((size_t)(m * n) * 2);
}

ampc_status ampc_fp8_cast_bf16(ampc_fp8_q *q, const void *src, ampc_dtype sdt, int64_t rows,
                               int64_t cols, int64_t ld, uint16_t *dst, bool count) {
  const char *fn = "ampc_fp8_cast_bf16";
  NN_CHECK_PTR(fn, q);
  NN_CHECK_PTR(fn, src);
  NN_CHECK_PTR(fn, dst);
  NN_CHECK_DT(fn, sdt);
  if (rows < 0 || cols < 0 || ld < cols || (q->fmt != AMPC_F8_E4M3 && q->fmt != AMPC_F8_E5M2))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: bad sizes (%lld x %lld, ld %lld) or format", fn,
                     (long long)rows, (long long)cols, (long long)ld);
  const bool e4 = q->fmt == AMPC_F8_E4M3;
  const float fmax = e4 ? 448.0f : 57344.0f, scale = q->scale;
  /* finite values, branch-free (the compiler vectorises it): |v| clamped to
   * the largest value, then one RNE to the format's grid: below 2^emin (the
   * subnormals, grid 2^(emin - man)) by adding and subtracting 1.5 * 2^(23 +
   * log2 grid), whose ulp is the grid; above it on the FP32 bits, dropping
   * 23 - man fraction bits; the sign put back (signed zeros kept). The same
   * values as ampc_f32bits_to_e4m3bits / _e5m2bits with saturation
   * (test_fp8_linear compares them on every exponent). */
  const float tiny = e4 ? 0x1p-6f : 0x1p-14f, magic = e4 ? 0x1.8p14f : 0x1.8p7f;
  const unsigned drop = e4 ? 20u : 21u;
  const uint32_t low = (1u << drop) - 1u, half = (1u << (drop - 1u)) - 1u;
  float amax = 0.0f;
  uint64_t sat = 0, flushed = 0;
  const int nt = nn_threads(rows * cols);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)                              \
    reduction(max : amax) reduction(+ : sat, flushed)
  for (int64_t i = 0; i < rows; i++) {
    float buf[AMPC_NN_CHUNK];
    for (int64_t j0 = 0; j0 < cols; j0 += AMPC_NN_CHUNK) {
      const int64_t len = cols - j0 < AMPC_NN_CHUNK ? cols - j0 : AMPC_NN_CHUNK;
      const float *r = nn_in(src, sdt, i * ld + j0, len, buf);
      uint16_t *d = dst + i * cols + j0;
      uint32_t nf = 0, ns = 0, nfl = 0;
      int64_t j = 0;
#if defined(__SSE2__)
      { /* 4 lanes of the scalar loop below, op for op (MAXPS/MINPS keep the
         * second operand for a NaN, as the scalar ternaries do) */
        const __m128 vabs = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF)),
                     vflt = _mm_set1_ps(FLT_MAX), vsc = _mm_set1_ps(scale),
                     vmax = _mm_set1_ps(fmax), vtiny = _mm_set1_ps(tiny), vmag = _mm_set1_ps(magic),
                     vzero = _mm_setzero_ps();
        const __m128i vhalf = _mm_set1_epi32((int)half), vlow = _mm_set1_epi32((int)~low),
                      vone = _mm_set1_epi32(1), vsign = _mm_set1_epi32((int)0x80000000u),
                      vdrop = _mm_cvtsi32_si128((int)drop);
        __m128 vam = _mm_set1_ps(amax);
        /* per-lane counts: a true compare is -1, subtracted */
        __m128i cnf = _mm_setzero_si128(), cns = _mm_setzero_si128(), cfl = _mm_setzero_si128();
        for (; j + 4 <= len; j += 4) {
          const __m128 x = _mm_loadu_ps(r + j);
          const __m128 ar = _mm_and_ps(x, vabs);
          vam = _mm_max_ps(ar, vam);
          cnf = _mm_sub_epi32(cnf, _mm_castps_si128(_mm_cmpnle_ps(ar, vflt)));
          const __m128 v = _mm_mul_ps(x, vsc);
          const __m128 av = _mm_and_ps(v, vabs);
          cns = _mm_sub_epi32(cns, _mm_castps_si128(_mm_cmpnle_ps(av, vmax)));
          const __m128 a = _mm_min_ps(av, vmax);
          const __m128 sub = _mm_sub_ps(_mm_add_ps(a, vmag), vmag);
          __m128i b = _mm_castps_si128(a);
          b = _mm_and_si128(
              _mm_add_epi32(_mm_add_epi32(b, vhalf), _mm_and_si128(_mm_srl_epi32(b, vdrop), vone)),
              vlow);
          const __m128 lt = _mm_cmplt_ps(a, vtiny);
          const __m128 m = _mm_or_ps(_mm_and_ps(lt, sub), _mm_andnot_ps(lt, _mm_castsi128_ps(b)));
          const __m128i qb =
              _mm_or_si128(_mm_castps_si128(m), _mm_and_si128(_mm_castps_si128(v), vsign));
          /* the upper halves, sign-extended so that the signed pack is exact */
          const __m128i h = _mm_srai_epi32(qb, 16);
          _mm_storel_epi64((__m128i *)(void *)(d + j), _mm_packs_epi32(h, h));
          cfl = _mm_sub_epi32(
              cfl, _mm_castps_si128(_mm_and_ps(_mm_cmpneq_ps(ar, vzero), _mm_cmpeq_ps(m, vzero))));
        }
        float lanes[4];
        uint32_t c[3][4];
        _mm_storeu_ps(lanes, vam);
        _mm_storeu_si128((__m128i *)(void *)c[0], cnf);
        _mm_storeu_si128((__m128i *)(void *)c[1], cns);
        _mm_storeu_si128((__m128i *)(void *)c[2], cfl);
        for (int l = 0; l < 4; l++) {
          amax = lanes[l] > amax ? lanes[l] : amax;
          nf += c[0][l], ns += c[1][l], nfl += c[2][l];
        }
      }
#endif
      for (; j < len; j++) {
        const float ar = fabsf(r[j]);
        amax = ar > amax ? ar : amax; /* NaN: ignored */
        nf += !(ar <= FLT_MAX);
        const float v = r[j] * scale;
        const float av = fabsf(v);
        ns += !(av <= fmax);
        const float a = av < fmax ? av : fmax;
        const float sub = (a + magic) - magic;
        uint32_t b = ampc_f32_bits(a);
        b = (b + half + ((b >> drop) & 1u)) & ~low;
        const float m = a < tiny ? sub : ampc_bits_f32(b);
        const uint32_t qb = ampc_f32_bits(m) | (ampc_f32_bits(v) & 0x80000000u);
        d[j] = (uint16_t)(qb >> 16); /* exact: an FP8 value is a bfloat16 value */
        nfl += (ar != 0.0f) & (m == 0.0f);
      }
      if (nf) { /* inf and NaN inputs: not counted, and kept non-finite */
        for (int64_t t = 0; t < len; t++) {
          if (fabsf(r[t]) <= FLT_MAX)
            continue;
          const uint32_t vb = ampc_f32_bits(r[t] * scale);
          const uint8_t c8 = e4 ? ampc_f32bits_to_e4m3bits(vb, 0) : ampc_f32bits_to_e5m2bits(vb, 0);
          const uint32_t back = e4 ? ampc_e4m3bits_to_f32bits(c8) : ampc_e5m2bits_to_f32bits(c8);
          d[t] = (uint16_t)(back >> 16);
          ns--; /* counted as past the largest above */
        }
      }
      sat += ns, flushed += nfl;
    }
  }
  if (amax > q->amax || (isnan(q->amax)))
    q->amax = amax;
  if (count) {
    q->values += (uint64_t)(rows * cols);
    q->saturated += sat;
    q->flushed += flushed;
  }
  return AMPC_OK;
}

/* ---- INT8 inference (post-training quantization) ------------------------------------ */

ampc_status ampc_linear_forward_s8(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                   const ampc_linear_s8 *s, const void *b, ampc_dtype bdt, void *y,
                                   ampc_dtype ydt, ampc_scratch *ws) {
  const char *fn = "ampc_linear_forward_s8";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, s);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, ydt);
  if (!s->w || !s->scale || !(s->x_scale >= 0.0f) || !isfinite(s->x_scale))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: no INT8 weights, or a bad activation scale %g", fn,
                     (double)s->x_scale);
  for (int64_t j = 0; j < (s->per_channel ? n : 1); j++)
    if (!(s->scale[j] > 0.0f) || !isfinite(s->scale[j]))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: weight scale %lld is %g", fn, (long long)j,
                       (double)s->scale[j]);
  /* x as FP32 (a copy unless it is FP32 already), x in int8, the sums, the
   * FP32 results, the bias */
  size_t off = 0;
  nn_buf b1 = {0}, b2, b4, b5;
  float *xf = xdt == AMPC_F32 ? NULL : nn_take(ws, &off, (size_t)(m * k) * sizeof(float), &b1);
  int8_t *xq = nn_take(ws, &off, (size_t)(m * k), &b2);
  float *out = nn_take(ws, &off, (size_t)(m * n) * sizeof(float), &b4);
  float *bias = nn_take(ws, &off, (size_t)n * sizeof(float), &b5);
  if ((xdt != AMPC_F32 && !xf) || !xq || !out || !bias) {
    nn_give(&b1), nn_give(&b2), nn_give(&b4), nn_give(&b5);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: %lld x %lld", fn, (long long)m, (long long)n);
  }
  memset(bias, 0, (size_t)n * sizeof *bias);
  ampc_status st = xf ? ampc_convert(xf, AMPC_F32, x, xdt, (size_t)(m * k)) : AMPC_OK;
  const float *xv = xf ? xf : (const float *)x;
  for (int64_t j = 0; b && j < n; j++)
    bias[j] = ampc_elem_load(b, bdt, j);
  float xs = s->x_scale;
  if (xs == 0.0f) { /* dynamic: this call's max |x| (NaN fails the comparison: caught) */
    float amax = 0.0f;
    int64_t bad = 0; /* inf or NaN */
#pragma omp simd reduction(max : amax) reduction(+ : bad)
    for (int64_t i = 0; i < m * k; i++) {
      const float v = fabsf(xv[i]);
      bad += !(v <= FLT_MAX);
      amax = v > amax ? v : amax;
    }
    if (bad && st == AMPC_OK)
      st = ampc_fail(AMPC_ERR_NUMERIC, "%s: an activation is not finite", fn);
    xs = amax > 0.0f ? amax / 127.0f : 1.0f;
    xs = xs > 0.0f ? xs : FLT_TRUE_MIN; /* amax / 127 under the subnormals */
  }
  /* past the calibrated range: saturated at +-127; NaN (a static scale
   * does not look): 0 */
  if (st == AMPC_OK)
    st = ampc_gemm_s8_quantize(AMPC_GEMM_S8_AUTO, xv, m * k, xs, xq);
  /* the INT32 sums dequantized inside the GEMM: acc * (xs * w_scale[j]) + b[j] */
  ampc_gemm_s8_b local = {0};
  const ampc_gemm_s8_b *pb = s->prep;
  if (st == AMPC_OK && (!pb || pb->b != s->w || pb->n != n || pb->k != k)) {
    st = ampc_gemm_s8_prepare(&local, AMPC_GEMM_S8_AUTO, n, k, s->w, k);
    pb = &local;
  }
  float *o = ydt == AMPC_F32 ? (float *)y : out; /* FP32: straight into y */
  if (st == AMPC_OK)
    st = ampc_gemm_s8_dequant(pb, m, xq, k, s->per_channel ? xs : xs * s->scale[0],
                              s->per_channel ? s->scale : NULL, bias, o, n);
  ampc_gemm_s8_b_free(&local);
  if (st == AMPC_OK && o == out)
    st = ampc_store_f32(y, ydt, out, (size_t)(m * n), NULL);
  nn_give(&b1), nn_give(&b2), nn_give(&b4), nn_give(&b5);
  return st;
}

size_t ampc_linear_s8_ws_bytes(int64_t m, int64_t k, int64_t n) {
  if (m < 1 || k < 1 || n < 1)
    return 0;
  return nn_pad64((size_t)(m * k) * sizeof(float)) + nn_pad64((size_t)(m * k)) +
         nn_pad64((size_t)(m * n) * sizeof(float)) + nn_pad64((size_t)n * sizeof(float));
}

/* hand x (xdt, n values) to the layer's observer as FP32 (a copy in the
 * layer's workspace unless it is FP32 already) */
static ampc_status observe_input(int64_t n, const void *x, ampc_dtype xdt, ampc_linear_fp8 *f) {
  if (n < 1 || !x)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_linear_forward_fp8: no input to observe");
  if (xdt == AMPC_F32) {
    f->observe(f->observe_user, x, n);
    return AMPC_OK;
  }
  size_t off = 0;
  nn_buf bb;
  float *xf = nn_take(f->ws, &off, (size_t)n * sizeof(float), &bb);
  if (!xf)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_linear_forward_fp8: %lld values to observe",
                     (long long)n);
  const ampc_status st = ampc_convert(xf, AMPC_F32, x, xdt, (size_t)n);
  if (st == AMPC_OK)
    f->observe(f->observe_user, xf, n);
  nn_give(&bb);
  return st;
}

/* ---- INT8 fake quantization (quantization-aware training) ---------------------------- */

size_t ampc_linear_fq8_ws_bytes(int64_t m, int64_t k, int64_t n) {
  if (m < 1 || k < 1 || n < 1)
    return 0;
  return nn_pad64((size_t)(m * k) * sizeof(float)) + nn_pad64((size_t)(n * k) * sizeof(float));
}

/* fq of one finite value with scale s (NaN and inf: themselves) */
static inline float fq8_one(float v, float s) {
  float q = v / s;
  q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
  /* to nearest, ties to even (|q| <= 127 < 2^22: adding and taking away
   * 1.5 * 2^23 rounds it to an integer; no fast-math folds it) */
  q = (q + 0x1.8p23f) - 0x1.8p23f;
  return fabsf(v) <= FLT_MAX ? q * s : v;
}

/* v [rows, cols] (FP32, in place) = fq(v): one scale per row (per_row) or
 * one for all; the scale is max|v| / 127 over the finite values (1 for none
 * or all zero); NaN and inf are left as they are. The max does not depend
 * on the order: the same bits for any thread count. */
static void fq8_inplace(float *v, int64_t rows, int64_t cols, bool per_row) {
  const int64_t total = rows * cols;
  const int nt = nn_threads(total);
  if (!per_row) {
    float amax = 0.0f;
#pragma omp parallel for simd schedule(static) num_threads(nt) if (nt > 1) reduction(max : amax)
    for (int64_t i = 0; i < total; i++) {
      const float a = fabsf(v[i]);
      amax = a <= FLT_MAX && a > amax ? a : amax;
    }
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
#pragma omp parallel for simd schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < total; i++)
      v[i] = fq8_one(v[i], s);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t g = 0; g < rows; g++) {
    float *restrict r = v + g * cols;
    float amax = 0.0f;
    for (int64_t i = 0; i < cols; i++) {
      const float a = fabsf(r[i]);
      amax = a <= FLT_MAX && a > amax ? a : amax;
    }
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
#pragma omp simd
    for (int64_t i = 0; i < cols; i++)
      r[i] = fq8_one(r[i], s);
  }
}

/* fq(x) [m, k] per tensor into *xf (x non-NULL) and fq(W) [n, k] per output
 * channel into *wf (w non-NULL), FP32, from f->ws (b: give back after use) */
static ampc_status fq8_operands(const char *fn, int64_t m, int64_t k, int64_t n, const void *x,
                                ampc_dtype xdt, const void *w, ampc_dtype wdt, ampc_linear_fp8 *f,
                                float **xf, float **wf, nn_buf *b) {
  size_t off = 0;
  char *base = nn_take(f->ws, &off, ampc_linear_fq8_ws_bytes(m, k, n), b);
  if (!base)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the fake-quantized operands", fn);
  *xf = (float *)(void *)base;
  *wf = (float *)(void *)(base + nn_pad64((size_t)(m * k) * sizeof(float)));
  ampc_status st = AMPC_OK;
  if (x) {
    st = ampc_convert(*xf, AMPC_F32, x, xdt, (size_t)(m * k));
    if (st == AMPC_OK)
      fq8_inplace(*xf, m, k, false);
  }
  if (w && st == AMPC_OK) {
    st = ampc_convert(*wf, AMPC_F32, w, wdt, (size_t)(n * k));
    if (st == AMPC_OK)
      fq8_inplace(*wf, n, k, true);
  }
  if (st != AMPC_OK)
    nn_give(b);
  return st;
}

ampc_status ampc_linear_forward_fp8(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                    const void *w, ampc_dtype wdt, const void *b, void *y,
                                    ampc_dtype ydt, ampc_acc acc, ampc_linear_fp8 *f,
                                    ampc_round_stats *stats) {
  if (!f)
    return ampc_linear_forward(m, k, n, x, xdt, w, wdt, b, y, ydt, acc, stats);
  if (f->observe) {
    AMPC_TRY(observe_input(m * k, x, xdt, f));
    if (!f->s8 && !f->fake_q8)
      return ampc_linear_forward(m, k, n, x, xdt, w, wdt, b, y, ydt, acc, stats);
  }
  if (f->s8)
    return ampc_linear_forward_s8(m, k, n, x, xdt, f->s8, b, wdt, y, ydt, f->ws);
  const char *fn = "ampc_linear_forward_fp8";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  NN_CHECK_DT(fn, ydt);
  if (f->fake_q8) { /* y = fq(x) fq(W)^T + b on FP32 operands */
    float *xf, *wf;
    nn_buf fb;
    AMPC_TRY(fq8_operands(fn, m, k, n, x, xdt, w, wdt, f, &xf, &wf, &fb));
    const ampc_status st =
        linear_fwd(m, k, n, xf, AMPC_F32, wf, AMPC_F32, b, wdt, 1.0f, y, ydt, acc, stats);
    nn_give(&fb);
    return st;
  }
  size_t off = 0;
  nn_buf bb;
  uint16_t *xq = nn_take(f->ws, &off, ampc_linear_fp8_ws_bytes(m, k, n), &bb);
  if (!xq)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the FP8 operands", fn);
  uint16_t *wq = xq + nn_pad64((size_t)(m * k) * 2) / 2;
  ampc_status st = ampc_fp8_cast_bf16(&f->x, x, xdt, m, k, k, xq, true);
  if (st == AMPC_OK)
    st = ampc_fp8_cast_bf16(&f->w, w, wdt, n, k, k, wq, true);
  if (st == AMPC_OK)
    st = linear_fwd(m, k, n, xq, AMPC_BF16, wq, AMPC_BF16, b, wdt, f->x.scale_inv * f->w.scale_inv,
                    y, ydt, acc, stats);
  nn_give(&bb);
  return st;
}

ampc_status ampc_linear_dgrad_fp8(int64_t m, int64_t k, int64_t n, const void *dy, ampc_dtype gdt,
                                  const void *w, ampc_dtype wdt, float beta, void *c,
                                  ampc_dtype cdt, ampc_acc acc, ampc_linear_fp8 *f, bool count_dy) {
  if (f && f->s8)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "ampc_linear_dgrad_fp8: an INT8 layer is inference only");
  if (!f || (f->observe && !f->fake_q8))
    return ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, w, wdt, k, beta, c, cdt, k,
                     acc);
  const char *fn = "ampc_linear_dgrad_fp8";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, c);
  if (f->fake_q8) { /* c = dy . fq(W) (+ beta c) */
    float *xf, *wf;
    nn_buf fb;
    NN_CHECK_DT(fn, wdt);
    AMPC_TRY(fq8_operands(fn, m, k, n, NULL, AMPC_F32, w, wdt, f, &xf, &wf, &fb));
    const ampc_status st = ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, wf, AMPC_F32,
                                     k, beta, c, cdt, k, acc);
    nn_give(&fb);
    return st;
  }
  size_t off = 0;
  nn_buf bb;
  uint16_t *dyq = nn_take(f->ws, &off, ampc_linear_fp8_ws_bytes(m, k, n), &bb);
  if (!dyq)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the FP8 operands", fn);
  uint16_t *wq = dyq + nn_pad64((size_t)(m * n) * 2) / 2;
  ampc_status st = ampc_fp8_cast_bf16(&f->dy, dy, gdt, m, n, n, dyq, count_dy);
  if (st == AMPC_OK)
    st = ampc_fp8_cast_bf16(&f->w, w, wdt, n, k, k, wq, false);
  if (st == AMPC_OK)
    st = ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, k, n, f->dy.scale_inv * f->w.scale_inv, dyq, AMPC_BF16,
                   n, wq, AMPC_BF16, k, beta, c, cdt, k, acc);
  nn_give(&bb);
  return st;
}

ampc_status ampc_linear_backward_fp8(int64_t m, int64_t k, int64_t n, const void *dy,
                                     ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                     ampc_dtype wdt, void *dx, void *dw, void *db, ampc_acc acc,
                                     ampc_linear_fp8 *f, ampc_scratch *ws) {
  if (f && f->s8)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "ampc_linear_backward_fp8: an INT8 layer is inference only");
  if (!f || (f->observe && !f->fake_q8))
    return ampc_linear_backward(m, k, n, dy, gdt, x, xdt, w, wdt, dx, dw, db, acc, ws);
  const char *fn = "ampc_linear_backward_fp8";
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_PTR(fn, dw);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  if (f->fake_q8) { /* the straight-through estimator: ampc_linear_backward on fq(x), fq(W) */
    float *xf, *wf;
    nn_buf fb;
    AMPC_TRY(fq8_operands(fn, m, k, n, x, xdt, dx ? w : NULL, wdt, f, &xf, &wf, &fb));
    const ampc_status st = ampc_linear_backward(m, k, n, dy, gdt, xf, AMPC_F32, dx ? wf : w,
                                                dx ? AMPC_F32 : wdt, dx, dw, db, acc, ws);
    nn_give(&fb);
    return st;
  }
  size_t off = 0;
  nn_buf bb;
  uint16_t *dyq = nn_take(f->ws, &off, ampc_linear_fp8_ws_bytes(m, k, n), &bb);
  if (!dyq)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the FP8 operands", fn);
  uint16_t *wq = dyq + nn_pad64((size_t)(m * n) * 2) / 2;
  uint16_t *xq = wq + nn_pad64((size_t)(n * k) * 2) / 2;
  ampc_status st = ampc_fp8_cast_bf16(&f->dy, dy, gdt, m, n, n, dyq, true);
  if (st == AMPC_OK && dx) { /* dx [m, k] = dyq [m, n] . Wq [n, k] */
    st = ampc_fp8_cast_bf16(&f->w, w, wdt, n, k, k, wq, false);
    if (st == AMPC_OK)
      st = ampc_gemm(AMPC_OP_N, AMPC_OP_N, m, k, n, f->dy.scale_inv * f->w.scale_inv, dyq,
                     AMPC_BF16, n, wq, AMPC_BF16, k, 0.0f, dx, gdt, k, acc);
  }
  if (st == AMPC_OK) /* dW [n, k] += dyq^T [n, m] . xq [m, k] */
    st = ampc_fp8_cast_bf16(&f->x, x, xdt, m, k, k, xq, false);
  if (st == AMPC_OK)
    st = ampc_gemm(AMPC_OP_T, AMPC_OP_N, n, k, m, f->dy.scale_inv * f->x.scale_inv, dyq, AMPC_BF16,
                   n, xq, AMPC_BF16, k, 1.0f, dw, gdt, k, acc);
  nn_give(&bb);
  if (st == AMPC_OK && db) /* from the unquantized dy, as TE's fused cast + dbias */
    st = bias_grad(m, n, dy, gdt, db, ws);
  return st;
}

/* ---- fused layers: the elementwise step that follows a linear layer run on
 * the GEMM's finished blocks (ampc_gemm_epi's post), the same bits as the
 * layers called one after the other ---- */

/* the fused layers' common checks: sizes, x and W, acc */
static ampc_status fused_checks(const char *fn, int64_t m, int64_t k, int64_t n, const void *x,
                                ampc_dtype xdt, const void *w, ampc_dtype wdt, ampc_acc acc) {
  NN_CHECK_POS(fn, m);
  NN_CHECK_POS(fn, k);
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, w);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, wdt);
  if (acc != AMPC_ACC_F32 && acc != AMPC_ACC_F16)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: acc must be AMPC_ACC_F32 or AMPC_ACC_F16", fn);
  return AMPC_OK;
}

/* what a post step works on: rows of width `ld` elements */
typedef struct {
  int kind; /* 0: y = gelu(c); 1: y = r + c; 2: dh = c * gelu'(h) */
  const void *c, *r;
  ampc_dtype cdt, rdt;
  void *y;
  ampc_dtype ydt;
  int64_t ld;
} fuse_job;

static void fuse_post(void *user, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
  const fuse_job *jb = user;
  for (int64_t i = i0; i < i0 + rows; i++) {
    const int64_t off = i * jb->ld + j0;
    switch (jb->kind) {
    case 0: ampc_nn_gelu_span(jb->c, jb->cdt, off, cols, jb->y, jb->ydt, NULL); break;
    case 1:
      ampc_nn_add_span(jb->r, jb->rdt, jb->c, jb->cdt, off, cols, jb->y, jb->ydt, NULL);
      break;
    default: ampc_nn_gelu_bwd_span(jb->c, jb->cdt, jb->r, jb->rdt, off, cols, jb->y); break;
    }
  }
}

ampc_status ampc_linear_gelu_forward(int64_t m, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                     const void *w, ampc_dtype wdt, const void *b, void *h,
                                     ampc_dtype hdt, void *y, ampc_dtype ydt, ampc_acc acc,
                                     ampc_linear_fp8 *f, ampc_round_stats *stats) {
  const char *fn = "ampc_linear_gelu_forward";
  AMPC_TRY(fused_checks(fn, m, k, n, x, xdt, w, wdt, acc));
  NN_CHECK_PTR(fn, h);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, hdt);
  NN_CHECK_DT(fn, ydt);
  const nn_span out[2] = {{h, m * n, hdt, "h"}, {y, m * n, ydt, "y"}};
  const nn_span in[2] = {{x, m * k, xdt, "x"}, {w, n * k, wdt, "w"}};
  AMPC_TRY(nn_apart(fn, out, 2, in, 2));
  if (!(h == y && hdt == ydt)) /* in place is the two layers' result too */
    AMPC_TRY(nn_apart(fn, &out[1], 1, &out[0], 1));
  if (f || stats || acc != AMPC_ACC_F32) { /* the two layers one after the other */
    AMPC_TRY(ampc_linear_forward_fp8(m, k, n, x, xdt, w, wdt, b, h, hdt, acc, f, stats));
    return ampc_gelu_forward(m * n, h, hdt, y, ydt, stats);
  }
  const fuse_job jb = {.kind = 0, .c = h, .cdt = hdt, .y = y, .ydt = ydt, .ld = n};
  const ampc_gemm_epi post = {.post = fuse_post, .user = (void *)&jb};
  return linear_fwd_post(fn, m, k, n, x, xdt, w, wdt, b, wdt, 1.0f, h, hdt, acc, NULL, &post);
}

ampc_status ampc_linear_residual_forward(int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const void *b, void *t, ampc_dtype tdt, const void *r,
                                         ampc_dtype rdt, void *y, ampc_dtype ydt, ampc_acc acc,
                                         ampc_linear_fp8 *f, ampc_round_stats *stats) {
  const char *fn = "ampc_linear_residual_forward";
  AMPC_TRY(fused_checks(fn, m, k, n, x, xdt, w, wdt, acc));
  NN_CHECK_PTR(fn, t);
  NN_CHECK_PTR(fn, r);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, tdt);
  NN_CHECK_DT(fn, rdt);
  NN_CHECK_DT(fn, ydt);
  const nn_span out[2] = {{t, m * n, tdt, "t"}, {y, m * n, ydt, "y"}};
  const nn_span in[2] = {{x, m * k, xdt, "x"}, {w, n * k, wdt, "w"}};
  const nn_span res = {r, m * n, rdt, "r"};
  AMPC_TRY(nn_apart(fn, out, 2, in, 2));
  AMPC_TRY(nn_apart(fn, &out[1], 1, &out[0], 1));
  AMPC_TRY(nn_apart(fn, &out[0], 1, &res, 1));
  if (!(y == r && ydt == rdt)) /* y = y + t in place is the add's result too */
    AMPC_TRY(nn_apart(fn, &out[1], 1, &res, 1));
  if (f || stats || acc != AMPC_ACC_F32) {
    AMPC_TRY(ampc_linear_forward_fp8(m, k, n, x, xdt, w, wdt, b, t, tdt, acc, f, stats));
    return ampc_add_forward(m * n, r, rdt, t, tdt, y, ydt, stats);
  }
  const fuse_job jb = {
      .kind = 1, .c = t, .cdt = tdt, .r = r, .rdt = rdt, .y = y, .ydt = ydt, .ld = n};
  const ampc_gemm_epi post = {.post = fuse_post, .user = (void *)&jb};
  return linear_fwd_post(fn, m, k, n, x, xdt, w, wdt, b, wdt, 1.0f, t, tdt, acc, NULL, &post);
}

ampc_status ampc_linear_backward_gelu(int64_t m, int64_t k, int64_t n, const void *dy,
                                      ampc_dtype gdt, const void *x, ampc_dtype xdt, const void *w,
                                      ampc_dtype wdt, const void *h, ampc_dtype hdt, void *dx,
                                      void *dh, void *dw, void *db, ampc_acc acc,
                                      ampc_linear_fp8 *f, ampc_scratch *ws) {
  const char *fn = "ampc_linear_backward_gelu";
  AMPC_TRY(fused_checks(fn, m, k, n, x, xdt, w, wdt, acc));
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, h);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_PTR(fn, dh);
  NN_CHECK_PTR(fn, dw);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, hdt);
  const nn_span out[4] = {{dx, m * k, gdt, "dx"},
                          {dh, m * k, gdt, "dh"},
                          {dw, n * k, gdt, "dw"},
                          {db, db ? n : 0, gdt, "db"}};
  const nn_span in[4] = {
      {dy, m * n, gdt, "dy"}, {x, m * k, xdt, "x"}, {w, n * k, wdt, "w"}, {h, m * k, hdt, "h"}};
  AMPC_TRY(nn_apart(fn, out, 4, in, 4));
  for (int i = 0; i < 4; i++)
    AMPC_TRY(nn_apart(fn, &out[i], 1, out + i + 1, 3 - i));
  if (f || acc != AMPC_ACC_F32) {
    AMPC_TRY(ampc_linear_backward_fp8(m, k, n, dy, gdt, x, xdt, w, wdt, dx, dw, db, acc, f, ws));
    return ampc_gelu_backward(m * k, dx, gdt, h, hdt, dh);
  }
  const fuse_job jb = {.kind = 2, .c = dx, .cdt = gdt, .r = h, .rdt = hdt, .y = dh, .ld = k};
  const ampc_gemm_epi post = {.post = fuse_post, .user = (void *)&jb};
  /* dx [m, k] = dy [m, n] . W [n, k], dh from each finished block of it */
  AMPC_TRY(ampc_gemm_ex(AMPC_OP_N, AMPC_OP_N, m, k, n, 1.0f, dy, gdt, n, w, wdt, k, 0.0f, dx, gdt,
                        k, acc, &post));
  return weight_grads(m, k, n, dy, gdt, x, xdt, dw, db, acc, ws);
}
