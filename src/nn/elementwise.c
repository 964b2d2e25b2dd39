/*
 * src/nn/elementwise.c: GELU (erf form) and the residual add.
 *
 * Each works on chunks of AMPC_NN_CHUNK elements: the inputs are widened with
 * ampc_convert (vector code), the FP32 formula is applied element by element,
 * and the chunk is rounded once with ampc_store_f32. Chunks are independent,
 * so they are shared among ampc's threads (without round stats: those are
 * accumulated in one struct); the results are the same bits either way.
 *
 * GELU of FP32 inputs: evaluated in double and rounded once to FP32
 * (gelu_impl.h: the correctly rounded value except within ~1e-15 relative of
 * a rounding boundary), 4 lanes at a time with AVX2+FMA. GELU of a 16-bit
 * input: there are only 65536 inputs, so the FP32 values of the forward
 * formula and of the backward factor Phi(x) + x phi(x) are tabulated once per
 * format (built on first use by the same FP32 function on the widened input,
 * so a lookup gives the same bits as computing it) and looked up.
 */
#include "nn/nn_util.h"
#include "nn/elementwise_impl.h"

#include "nn/gelu_impl.h"
#include "numeric/convert_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* [65536] FP32 table of gelu (bwd 0) or of the backward factor (bwd 1) over
 * every bit pattern of dt (F16 or BF16); NULL for other dtypes. Thread-safe. */
static const float *gelu_table(ampc_dtype dt, int bwd) {
  static float tab[2][2][65536];
  static atomic_int ready[2][2];
  if (dt != AMPC_F16 && dt != AMPC_BF16)
    return NULL;
  const int k = dt == AMPC_BF16;
  if (!atomic_load_explicit(&ready[k][bwd], memory_order_acquire)) {
#pragma omp critical(ampc_gelu_table)
    if (!atomic_load_explicit(&ready[k][bwd], memory_order_relaxed)) {
      float *t = tab[k][bwd];
      for (int32_t i = 0; i < 65536; i++) {
        const uint16_t bits = (uint16_t)i;
        t[i] = ampc_bits_f32(k ? ampc_bf16bits_to_f32bits(bits) : ampc_f16bits_to_f32bits(bits));
      }
      ampc_gelu32(t, t, 65536, bwd); /* in place: element by element */
      atomic_store_explicit(&ready[k][bwd], 1, memory_order_release);
    }
  }
  return tab[k][bwd];
}

ampc_status ampc_gelu_forward(int64_t n, const void *x, ampc_dtype xdt, void *y, ampc_dtype ydt,
                              ampc_round_stats *stats) {
  const char *fn = "ampc_gelu_forward";
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, xdt);
  NN_CHECK_DT(fn, ydt);
  const int nt = stats ? 1 : nn_threads(n);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c0 = 0; c0 < n; c0 += AMPC_NN_CHUNK) {
    ampc_tally_adopt(tally);
    ampc_nn_gelu_span(x, xdt, c0, n - c0 < AMPC_NN_CHUNK ? n - c0 : AMPC_NN_CHUNK, y, ydt, stats);
  }
  return AMPC_OK;
}

ampc_status ampc_gelu_backward(int64_t n, const void *dy, ampc_dtype gdt, const void *x,
                               ampc_dtype xdt, void *dx) {
  const char *fn = "ampc_gelu_backward";
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, dy);
  NN_CHECK_PTR(fn, x);
  NN_CHECK_PTR(fn, dx);
  NN_CHECK_DT(fn, gdt);
  NN_CHECK_DT(fn, xdt);
  const int nt = nn_threads(n);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c0 = 0; c0 < n; c0 += AMPC_NN_CHUNK) {
    ampc_tally_adopt(tally);
    ampc_nn_gelu_bwd_span(dy, gdt, x, xdt, c0, n - c0 < AMPC_NN_CHUNK ? n - c0 : AMPC_NN_CHUNK, dx);
  }
  return AMPC_OK;
}

void ampc_nn_gelu_bwd_span(const void *dy, ampc_dtype gdt, const void *x, ampc_dtype xdt,
                           int64_t off, int64_t n, void *dx) {
  const float *tab = gelu_table(xdt, 1);
  if (tab && gdt == xdt && !ampc_tally_tls && ampc_use_avx512()) { /* the same values, vectors */
    ampc_gelu_tab16_avx512((const uint16_t *)x + off, tab, (const uint16_t *)dy + off,
                           xdt == AMPC_BF16, (uint16_t *)dx + off, (size_t)n);
    return;
  }
  for (int64_t c0 = off; c0 < off + n; c0 += AMPC_NN_CHUNK) {
    float xb[AMPC_NN_CHUNK], gb[AMPC_NN_CHUNK], obb[AMPC_NN_CHUNK];
    const int64_t len = off + n - c0 < AMPC_NN_CHUNK ? off + n - c0 : AMPC_NN_CHUNK;
    const float *gi = nn_in(dy, gdt, c0, len, gb);
    float *ob = nn_out(dx, gdt, c0, obb, NULL);
    if (tab) {
      const uint16_t *xh = (const uint16_t *)x + c0;
      for (int64_t i = 0; i < len; i++) /* a NaN gradient passes as itself */
        ob[i] = isnan(gi[i]) ? gi[i] : gi[i] * tab[xh[i]];
    } else {
      float f[AMPC_NN_CHUNK]; /* the factors apart: ob may be dy */
      const float *xi = nn_in(x, xdt, c0, len, xb);
      ampc_gelu32(xi, f, (size_t)len, 1);
      for (int64_t i = 0; i < len; i++)
        ob[i] = isnan(gi[i]) ? gi[i] : gi[i] * f[i];
    }
    nn_out_done(dx, gdt, c0, ob, len, NULL);
  }
}

void ampc_nn_gelu_span(const void *x, ampc_dtype xdt, int64_t off, int64_t n, void *y,
                       ampc_dtype ydt, ampc_round_stats *stats) {
  const float *tab = gelu_table(xdt, 0);
  if (tab && ydt == xdt && !stats && !ampc_tally_tls && ampc_use_avx512()) {
    ampc_gelu_tab16_avx512((const uint16_t *)x + off, tab, NULL, xdt == AMPC_BF16,
                           (uint16_t *)y + off, (size_t)n);
    return;
  }
  for (int64_t c0 = off; c0 < off + n; c0 += AMPC_NN_CHUNK) {
    float bb[AMPC_NN_CHUNK];
    float *b = nn_out(y, ydt, c0, bb, stats);
    const int64_t len = off + n - c0 < AMPC_NN_CHUNK ? off + n - c0 : AMPC_NN_CHUNK;
    if (tab) {
      const uint16_t *xb = (const uint16_t *)x + c0;
      for (int64_t i = 0; i < len; i++)
        b[i] = tab[xb[i]];
    } else {
      float xb[AMPC_NN_CHUNK];
      const float *xi = nn_in(x, xdt, c0, len, xb);
      ampc_gelu32(xi, b, (size_t)len, 0);
    }
    nn_out_done(y, ydt, c0, b, len, stats);
  }
}

ampc_status ampc_add_forward(int64_t n, const void *a, ampc_dtype adt, const void *b,
                             ampc_dtype bdt, void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  const char *fn = "ampc_add_forward";
  NN_CHECK_POS(fn, n);
  NN_CHECK_PTR(fn, a);
  NN_CHECK_PTR(fn, b);
  NN_CHECK_PTR(fn, y);
  NN_CHECK_DT(fn, adt);
  NN_CHECK_DT(fn, bdt);
  NN_CHECK_DT(fn, ydt);
  const int nt = stats ? 1 : nn_threads(n);
  ampc_tally *const tally = ampc_tally_tls; /* handed to the workers */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c0 = 0; c0 < n; c0 += AMPC_NN_CHUNK) {
    ampc_tally_adopt(tally);
    ampc_nn_add_span(a, adt, b, bdt, c0, n - c0 < AMPC_NN_CHUNK ? n - c0 : AMPC_NN_CHUNK, y, ydt,
                     stats);
  }
  return AMPC_OK;
}

void ampc_nn_add_span(const void *a, ampc_dtype adt, const void *b, ampc_dtype bdt, int64_t off,
                      int64_t n, void *y, ampc_dtype ydt, ampc_round_stats *stats) {
  for (int64_t c0 = off; c0 < off + n; c0 += AMPC_NN_CHUNK) {
    float ab[AMPC_NN_CHUNK], bb[AMPC_NN_CHUNK], obb[AMPC_NN_CHUNK];
    const int64_t len = off + n - c0 < AMPC_NN_CHUNK ? off + n - c0 : AMPC_NN_CHUNK;
    const float *ai = nn_in(a, adt, c0, len, ab), *bi = nn_in(b, bdt, c0, len, bb);
    float *ob = nn_out(y, ydt, c0, obb, stats);
    for (int64_t i = 0; i < len; i++)
      ob[i] = ai[i] + bi[i];
    nn_out_done(y, ydt, c0, ob, len, stats);
  }
}
