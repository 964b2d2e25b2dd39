/*
 * src/diag/telemetry.c: the process-wide rounding collector behind
 * ampc_telemetry (include/ampc/diag.h).
 *
 * The kernels call ampc_tm_count only while ampc_tm_active is set. Each thread
 * adds to its own slot (found through a thread-local pointer, registered on
 * first use), so no atomics run per value; ampc_telemetry_mark sums and clears
 * the slots from the controlling thread between parallel regions (the OpenMP
 * barrier at the end of each region orders the workers' writes before it).
 */
#include "ampc/diag.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numeric/numeric.h"

int ampc_tm_active = 0;

enum { TM_MAX_SLOTS = 256 };

static ampc_tm_stats g_slot[TM_MAX_SLOTS];
static atomic_int g_nslots;
static _Thread_local ampc_tm_stats *tls_slot;
static ampc_telemetry *g_owner;

static ampc_tm_stats *my_slot(void) {
  if (!tls_slot) {
    int i = atomic_fetch_add(&g_nslots, 1);
    /* more threads than slots cannot happen with ampc's thread counts; share
     * the last slot rather than lose the counts (a benign miscount at worst) */
    tls_slot = &g_slot[i < TM_MAX_SLOTS ? i : TM_MAX_SLOTS - 1];
  }
  return tls_slot;
}

void ampc_tm_count(const float *src, const void *dst, ampc_dtype dt, size_t n) {
  ampc_tm_stats *s = my_slot();
  const size_t esz = ampc_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    const uint32_t x = ampc_f32_bits(src[i]);
    const uint32_t ax = x & 0x7FFFFFFFu;
    const unsigned char *p = (const unsigned char *)dst + i * esz;
    uint32_t out;
    if (esz == 4)
      memcpy(&out, p, 4);
    else if (esz == 2) {
      uint16_t h;
      memcpy(&h, p, 2);
      out = h;
    } else
      out = *p;
    const ampc_fpclass cls = ampc_classify(dt, out);
    const int finite_in = ax < 0x7F800000u;
    s->r.underflow += finite_in && ax != 0 && cls == AMPC_CLASS_ZERO;
    s->r.subnormal += cls == AMPC_CLASS_SUBNORMAL;
    s->r.overflow += finite_in && (cls == AMPC_CLASS_INF || cls == AMPC_CLASS_NAN);
    s->r.inf += cls == AMPC_CLASS_INF;
    s->r.nan += cls == AMPC_CLASS_NAN;
    if (finite_in) {
      if (ax == 0)
        s->zeros++;
      else {
        s->hist[ax >> 23]++;
        const float a = ampc_bits_f32(ax);
        if (a > s->r.max_abs)
          s->r.max_abs = a;
      }
    }
  }
  s->r.count += n;
}

void ampc_tm_stats_merge(ampc_tm_stats *into, const ampc_tm_stats *from) {
  ampc_round_stats_merge(&into->r, &from->r);
  into->zeros += from->zeros;
  for (int i = 0; i < AMPC_TM_BINS; i++)
    into->hist[i] += from->hist[i];
}

int ampc_tm_bin_of_log2(int e) { return e + 127 < 0 ? 0 : e + 127 > 255 ? 255 : e + 127; }

/* sum and clear every slot into *out (zeroed first) */
static void drain(ampc_tm_stats *out) {
  memset(out, 0, sizeof *out);
  const int n = atomic_load(&g_nslots);
  for (int i = 0; i < n && i < TM_MAX_SLOTS; i++) {
    if (g_slot[i].r.count) {
      ampc_tm_stats_merge(out, &g_slot[i]);
      memset(&g_slot[i], 0, sizeof g_slot[i]);
    }
  }
}

ampc_status ampc_telemetry_begin(ampc_telemetry *t) {
  if (!t)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_telemetry_begin: t is NULL");
  if (g_owner && g_owner != t)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_telemetry_begin: another collector is active");
  memset(t, 0, sizeof *t);
  t->first_nonfinite_branch = t->first_nonfinite_phase = -1;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    t->acc_err[b] = -1.0;
  ampc_tm_stats junk;
  drain(&junk);
  t->on = true;
  g_owner = t;
  ampc_tm_active = 1;
  return AMPC_OK;
}

void ampc_telemetry_mark(ampc_telemetry *t, ampc_branch br, ampc_tm_phase ph, const char *name) {
  if (!t || !t->on || g_owner != t || (unsigned)br >= AMPC_BRANCH_COUNT ||
      (unsigned)ph >= AMPC_TM_PHASES)
    return;
  ampc_tm_stats d;
  drain(&d);
  ampc_tm_stats_merge(&t->s[ph][br], &d);
  if ((d.r.inf || d.r.nan) && t->first_nonfinite_branch < 0) {
    snprintf(t->first_nonfinite, sizeof t->first_nonfinite, "%s", name ? name : "?");
    t->first_nonfinite_branch = (int)br;
    t->first_nonfinite_phase = (int)ph;
  }
}

void ampc_telemetry_end(ampc_telemetry *t) {
  if (!t || g_owner != t)
    return;
  ampc_tm_active = 0;
  ampc_tm_stats junk;
  drain(&junk);
  t->on = false;
  g_owner = NULL;
}

ampc_status ampc_telemetry_shadow_linear(ampc_telemetry *t, ampc_branch br, const char *name,
                                         int64_t m, int64_t k, int64_t n, const void *x,
                                         ampc_dtype xdt, const void *w, ampc_dtype wdt,
                                         ampc_acc acc) {
  if (!t || !t->on || g_owner != t || (unsigned)br >= AMPC_BRANCH_COUNT || m < 1 || k < 1 || n < 1)
    return AMPC_OK;
  const int64_t rows = m < 16 ? m : 16, step = m / rows;
  float *y = malloc((size_t)(rows * n) * sizeof *y);
  double *ref = malloc((size_t)(rows * n) * sizeof *ref);
  if (!y || !ref) {
    free(y), free(ref);
    return ampc_fail(AMPC_ERR_NOMEM, "telemetry: shadow GEMM workspace");
  }
  const int was = ampc_tm_active;
  ampc_tm_active = 0; /* the shadow's own stores are not the model's */
  ampc_status st = ampc_gemm(AMPC_OP_N, AMPC_OP_T, rows, n, k, 1.0f, x, xdt, step * k, w, wdt, k,
                             0.0f, y, AMPC_F32, n, acc);
  if (st == AMPC_OK)
    st = ampc_gemm_reference(AMPC_OP_N, AMPC_OP_T, rows, n, k, 1.0, x, xdt, step * k, w, wdt, k,
                             0.0, NULL, AMPC_F32, n, ref, NULL);
  ampc_tm_active = was;
  if (st == AMPC_OK) {
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
  free(y), free(ref);
  return st;
}
