/*
 * src/diag/telemetry.c: the rounding collector behind ampc_telemetry
 * (include/ampc/diag.h): it owns a rounding tally of the numeric layer
 * (src/numeric/tally.c), binds it to the calling thread between begin and
 * end, and attributes the counts drained at each mark to a branch and phase;
 * the FP64 shadow GEMM. One collector per thread; threads that each drive
 * their own model may each run one.
 */
#include "ampc/diag.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numeric/numeric.h"

/* t is collecting on this thread: begun here and not ended */
static bool live(const ampc_telemetry *t) {
  return t && t->on && t->tally && ampc_tally_current() == t->tally;
}

ampc_status ampc_telemetry_begin(ampc_telemetry *t) {
  if (!t)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_telemetry_begin: t is NULL");
  ampc_tally *bound = ampc_tally_current();
  if (bound && !(t->on && t->tally == bound))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_telemetry_begin: another collector is active on this thread");
  ampc_tally *tally = bound ? bound : ampc_tally_create();
  if (!tally)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_telemetry_begin: cannot allocate the rounding tally");
  const int64_t offset = t->sample_offset; /* the caller's, kept */
  memset(t, 0, sizeof *t);
  t->sample_offset = offset;
  t->first_nonfinite_branch = t->first_nonfinite_phase = -1;
  t->first_nonfinite_dt = AMPC_DTYPE_COUNT;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    t->acc_err[b] = -1.0;
  ampc_tm_stats junk;
  ampc_tally_drain(tally, &junk); /* a restart drops what was counted before */
  t->tally = tally;
  t->on = true;
  (void)ampc_tally_bind(tally);
  return AMPC_OK;
}

bool ampc_telemetry_mark_dt(ampc_telemetry *t, ampc_branch br, ampc_tm_phase ph, const char *name,
                            ampc_dtype dt) {
  if (!live(t) || (unsigned)br >= AMPC_BRANCH_COUNT || (unsigned)ph >= AMPC_TM_PHASES)
    return false;
  ampc_tm_stats d;
  ampc_tally_drain(t->tally, &d);
  ampc_tm_stats_merge(&t->s[ph][br], &d);
  if (!(d.r.inf || d.r.nan) || t->first_nonfinite_branch >= 0)
    return false;
  snprintf(t->first_nonfinite, sizeof t->first_nonfinite, "%s", name ? name : "?");
  t->first_nonfinite_branch = (int)br;
  t->first_nonfinite_phase = (int)ph;
  t->first_nonfinite_max_abs = d.r.max_abs;
  t->first_nonfinite_dt = (unsigned)dt < AMPC_DTYPE_COUNT ? dt : AMPC_DTYPE_COUNT;
  return true;
}

void ampc_telemetry_mark(ampc_telemetry *t, ampc_branch br, ampc_tm_phase ph, const char *name) {
  (void)ampc_telemetry_mark_dt(t, br, ph, name, AMPC_DTYPE_COUNT);
}

void ampc_telemetry_samples(ampc_telemetry *t, const uint8_t *bad, int64_t n) {
  if (!t || !t->on || t->first_nonfinite_branch < 0 || !bad || n < 1 || t->nf_samples_of > 0)
    return;
  for (int64_t r = 0; r < n; r++) {
    if (!bad[r])
      continue;
    if (t->n_nf_samples < AMPC_TM_SAMPLES)
      t->nf_samples[t->n_nf_samples++] = t->sample_offset + r;
    t->nf_samples_total++;
  }
  t->nf_samples_of = n;
}

void ampc_telemetry_end(ampc_telemetry *t) {
  if (!t || !t->tally)
    return;
  if (ampc_tally_current() == t->tally)
    (void)ampc_tally_bind(NULL);
  ampc_tally_free(t->tally);
  t->tally = NULL;
  t->on = false;
}

/* Keep the relative Frobenius error of y [rows, n] (FP32) against the FP64
 * reference ref [rows, n] for branch br if it is the largest so far. */
static void shadow_keep(ampc_telemetry *t, ampc_branch br, const char *name, int64_t rows,
                        int64_t k, int64_t n, const float *y, const double *ref) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < rows * n; i++) {
    const double d = (double)y[i] - ref[i];
    num += d * d, den += ref[i] * ref[i];
  }
  const double rel = den > 0.0 ? sqrt(num / den) : (num > 0.0 ? (double)INFINITY : 0.0);
  if (rel > t->acc_err[br] || isnan(rel)) {
    t->acc_err[br] = rel;
    t->acc_k[br] = k;
    snprintf(t->acc_tensor[br], sizeof t->acc_tensor[br], "%s", name ? name : "?");
  }
}

/* Columns of the FP64 reference per pass over a row of x. */
enum { SHADOW_COLS = 16 };

/* ref [rows, n] = the rows of x [rows, k] (dtype xdt; row r at r * step * k)
 * times w^T (w [n, k], dtype wdt) in FP64: ampc_gemm_reference's sums (each
 * from +0, products in p order; a product of two widened FP32 values is
 * exact in FP64, so contracting it into an FMA would not change a bit),
 * computed SHADOW_COLS columns at a time from x and w widened once instead
 * of one element load at a time. F32, F16 and BF16 operands (others:
 * ampc_gemm_reference). Errors: out of memory. */
static ampc_status shadow_reference(int64_t rows, int64_t step, int64_t k, int64_t n, const void *x,
                                    ampc_dtype xdt, const void *w, ampc_dtype wdt, double *ref) {
  const int ok_dt = (xdt == AMPC_F32 || xdt == AMPC_F16 || xdt == AMPC_BF16) &&
                    (wdt == AMPC_F32 || wdt == AMPC_F16 || wdt == AMPC_BF16);
  if (!ok_dt)
    return ampc_gemm_reference(AMPC_OP_N, AMPC_OP_T, rows, n, k, 1.0, x, xdt, step * k, w, wdt, k,
                               0.0, NULL, AMPC_F32, n, ref, NULL);
  double *xd = malloc((size_t)(rows * k) * sizeof *xd);
  double *wt = malloc((size_t)(k * SHADOW_COLS) * sizeof *wt);
  float *f = malloc((size_t)k * sizeof *f);
  ampc_status st =
      xd && wt && f ? AMPC_OK : ampc_fail(AMPC_ERR_NOMEM, "telemetry: shadow GEMM workspace");
  for (int64_t r = 0; st == AMPC_OK && r < rows; r++) {
    st = ampc_convert(f, AMPC_F32, (const char *)x + r * step * k * (int64_t)ampc_dtype_size(xdt),
                      xdt, (size_t)k);
    for (int64_t p = 0; st == AMPC_OK && p < k; p++)
      xd[r * k + p] = (double)f[p];
  }
  for (int64_t j0 = 0; st == AMPC_OK && j0 < n; j0 += SHADOW_COLS) {
    const int64_t nc = n - j0 < SHADOW_COLS ? n - j0 : SHADOW_COLS;
    /* wt [k, SHADOW_COLS]: columns j0 .. j0 + nc of w^T, zero past nc */
    for (int64_t l = 0; st == AMPC_OK && l < SHADOW_COLS; l++) {
      if (l < nc)
        st = ampc_convert(f, AMPC_F32,
                          (const char *)w + (j0 + l) * k * (int64_t)ampc_dtype_size(wdt), wdt,
                          (size_t)k);
      for (int64_t p = 0; st == AMPC_OK && p < k; p++)
        wt[p * SHADOW_COLS + l] = l < nc ? (double)f[p] : 0.0;
    }
    for (int64_t r = 0; st == AMPC_OK && r < rows; r++) {
      double acc[SHADOW_COLS] = {0};
      const double *xr = xd + r * k;
      for (int64_t p = 0; p < k; p++) {
        const double *wp = wt + p * SHADOW_COLS;
        for (int l = 0; l < SHADOW_COLS; l++)
          acc[l] += xr[p] * wp[l];
      }
      for (int64_t l = 0; l < nc; l++)
        ref[r * n + j0 + l] = acc[l];
    }
  }
  free(xd), free(wt), free(f);
  return st;
}

/* The shadow of rows rows of x (every step-th) times w^T: y0 the product the
 * caller measured (NULL: ampc_gemm computes it here in mode acc). */
static ampc_status shadow(ampc_telemetry *t, ampc_branch br, const char *name, int64_t rows,
                          int64_t step, int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                          const void *w, ampc_dtype wdt, ampc_acc acc, const float *y0) {
  float *y = y0 ? NULL : malloc((size_t)(rows * n) * sizeof *y);
  double *ref = malloc((size_t)(rows * n) * sizeof *ref);
  if ((!y0 && !y) || !ref) {
    free(y), free(ref);
    return ampc_fail(AMPC_ERR_NOMEM, "telemetry: shadow GEMM workspace");
  }
  ampc_tally *was = ampc_tally_bind(NULL); /* the shadow's own stores are not the model's */
  ampc_status st = AMPC_OK;
  if (!y0)
    st = ampc_gemm(AMPC_OP_N, AMPC_OP_T, rows, n, k, 1.0f, x, xdt, step * k, w, wdt, k, 0.0f, y,
                   AMPC_F32, n, acc);
  if (st == AMPC_OK)
    st = shadow_reference(rows, step, k, n, x, xdt, w, wdt, ref);
  (void)ampc_tally_bind(was);
  if (st == AMPC_OK)
    shadow_keep(t, br, name, rows, k, n, y0 ? y0 : y, ref);
  free(y), free(ref);
  return st;
}

ampc_status ampc_telemetry_shadow_linear(ampc_telemetry *t, ampc_branch br, const char *name,
                                         int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         ampc_acc acc) {
  if (!live(t) || (unsigned)br >= AMPC_BRANCH_COUNT || m < 1 || k < 1 || n < 1)
    return AMPC_OK;
  const int64_t rows = ampc_probe_shadow_rows(m);
  return shadow(t, br, name, rows, m / rows, k, n, x, xdt, w, wdt, acc, NULL);
}

ampc_status ampc_telemetry_shadow_result(ampc_telemetry *t, ampc_branch br, const char *name,
                                         int64_t rows, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         const float *y) {
  if (!live(t) || (unsigned)br >= AMPC_BRANCH_COUNT || rows < 1 || k < 1 || n < 1)
    return AMPC_OK;
  if (!x || !w || !y)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_telemetry_shadow_result: NULL buffer");
  return shadow(t, br, name, rows, 1, k, n, x, xdt, w, wdt, AMPC_ACC_F32, y);
}

/* ---- the collector as a model probe ------------------------------------------------- */

static bool probe_on(void *user) {
  const ampc_telemetry *t = user;
  return t && t->on;
}

static bool probe_mark(void *user, ampc_branch br, ampc_tm_phase ph, const char *name,
                       ampc_dtype dt) {
  return ampc_telemetry_mark_dt(user, br, ph, name, dt);
}

static void probe_samples(void *user, const uint8_t *bad, int64_t n) {
  ampc_telemetry_samples(user, bad, n);
}

static ampc_status probe_shadow(void *user, ampc_branch br, const char *name, int64_t m, int64_t k,
                                int64_t n, const void *x, ampc_dtype xdt, const void *w,
                                ampc_dtype wdt, ampc_acc acc) {
  return ampc_telemetry_shadow_linear(user, br, name, m, k, n, x, xdt, w, wdt, acc);
}

static ampc_status probe_result(void *user, ampc_branch br, const char *name, int64_t rows,
                                int64_t k, int64_t n, const void *x, ampc_dtype xdt, const void *w,
                                ampc_dtype wdt, const float *y) {
  return ampc_telemetry_shadow_result(user, br, name, rows, k, n, x, xdt, w, wdt, y);
}

ampc_model_probe ampc_telemetry_probe(ampc_telemetry *t) {
  return (ampc_model_probe){t, probe_on, probe_mark, probe_shadow, probe_result, probe_samples};
}
