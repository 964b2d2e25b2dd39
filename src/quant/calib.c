/*
 * src/quant/calib.c: calibration of static INT8 activation scales
 * (ampc_quant_calibrate, include/ampc/quant.h): the inputs of a model's
 * INT8 sites observed over calibration batches, and each method's scale
 * with its exact SQNR.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/quant.h"
#include "internal.h"

const char *ampc_calib_method_name(ampc_calib_method m) {
  switch (m) {
  case AMPC_CALIB_MAX: return "max";
  case AMPC_CALIB_PERCENTILE: return "percentile";
  case AMPC_CALIB_MSE: return "mse";
  }
  return "?";
}

int ampc_calib_method_parse(const char *s, ampc_calib_method *out) {
  for (int m = 0; s && m < AMPC_CALIB_METHODS; m++)
    if (!strcmp(s, ampc_calib_method_name((ampc_calib_method)m))) {
      *out = (ampc_calib_method)m;
      return 0;
    }
  return -1;
}

void ampc_calib_free(ampc_calib *c) {
  if (!c)
    return;
  for (int i = 0; c->sites && i < c->n; i++)
    free(c->sites[i].hist);
  free(c->sites);
  memset(c, 0, sizeof *c);
}

const ampc_calib_site *ampc_calib_find(const ampc_calib *c, const char *name, int part) {
  for (int i = 0; c && name && i < c->n; i++)
    if (c->sites[i].part == part && !strcmp(c->sites[i].name, name))
      return &c->sites[i];
  return NULL;
}

/* x quantized with scale s and back, as ampc_linear_forward_s8 does:
 * x / s rounded half to even, saturated at +-127 */
static float fq(float x, float s) {
  float v = x / s;
  v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
  return nearbyintf(v) * s;
}

/* the observer of one site: pass 0 the largest |x|, 1 the histogram and
 * the signal, 2 each method's error */
static void observe(void *user, const float *x, int64_t n) {
  ampc_calib_site *c = user;
  const int pass = *c->pass;
  if (pass == 0) {
    float amax = c->amax;
    uint64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
      const float a = fabsf(x[i]);
      bad += !(a <= 3.4028235e38f); /* inf or NaN */
      amax = a > amax && a <= 3.4028235e38f ? a : amax;
    }
    c->amax = amax, c->nonfinite += bad, c->values += (uint64_t)n;
  } else if (pass == 1) {
    const double w = (double)AMPC_CALIB_BINS / (double)c->amax;
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) {
      const double a = fabs((double)x[i]);
      ss += a * a;
      int64_t b = c->amax > 0.0f ? (int64_t)(a * w) : 0;
      b = b < AMPC_CALIB_BINS ? b : AMPC_CALIB_BINS - 1;
      c->hist[b]++;
    }
    c->sum_sq += ss;
  } else {
    for (int m = 0; m < AMPC_CALIB_METHODS; m++) {
      const float s = c->scale[m], lim = 127.0f * s;
      double e = 0.0;
      uint64_t clip = 0;
      for (int64_t i = 0; i < n; i++) {
        const double d = (double)x[i] - (double)fq(x[i], s);
        e += d * d;
        clip += fabsf(x[i]) > lim;
      }
      c->err_sq[m] += e, c->clip_n[m] += clip;
    }
  }
}

/* the thresholds of the percentile and of the least expected squared
 * error, from the histogram of |x| on [0, amax] */
static void choose(ampc_calib_site *c, double percentile) {
  const float amax = c->amax;
  const double w = (double)amax / AMPC_CALIB_BINS; /* bin width */
  c->scale[AMPC_CALIB_MAX] = amax > 0.0f ? amax / 127.0f : 1.0f;
  if (!(amax > 0.0f)) {
    c->scale[AMPC_CALIB_PERCENTILE] = c->scale[AMPC_CALIB_MSE] = 1.0f;
    return;
  }
  /* the percentile: the upper edge of the bin where the count reaches it */
  const double want = ceil(percentile / 100.0 * (double)c->values);
  uint64_t cum = 0;
  int bp = AMPC_CALIB_BINS - 1;
  for (int b = 0; b < AMPC_CALIB_BINS; b++) {
    cum += c->hist[b];
    if ((double)cum >= want) {
      bp = b;
      break;
    }
  }
  c->scale[AMPC_CALIB_PERCENTILE] =
      bp == AMPC_CALIB_BINS - 1 ? amax / 127.0f : (float)((bp + 1) * w / 127.0);
  /* MSE: each bin's values taken at its centre */
  double best = INFINITY;
  int bt = AMPC_CALIB_BINS - 1;
  for (int t = 0; t < AMPC_CALIB_BINS; t++) {
    const double th = (t + 1) * w, step = th / 127.0, noise = step * step / 12.0;
    double e = 0.0;
    for (int b = 0; b < AMPC_CALIB_BINS; b++) {
      if (!c->hist[b])
        continue;
      const double v = (b + 0.5) * w;
      const double eb = v > th ? (v - th) * (v - th) : (v < step / 2 ? v * v : noise);
      e += (double)c->hist[b] * eb;
    }
    if (e < best)
      best = e, bt = t;
  }
  c->scale[AMPC_CALIB_MSE] =
      bt == AMPC_CALIB_BINS - 1 ? amax / 127.0f : (float)((bt + 1) * w / 127.0);
}

ampc_status ampc_quant_calibrate(ampc_mmodel *M, const ampc_params *P, int batches,
                                 ampc_calib_method method, double percentile,
                                 ampc_calib_batch_fn run, void *user, ampc_calib *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!M || !P || !run || !out || batches < 1 || !(percentile > 0.0 && percentile <= 100.0) ||
      (int)method < 0 || (int)method >= AMPC_CALIB_METHODS)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_quant_calibrate: bad arguments (%d batches, percentile %g)", batches,
                     percentile);
  int n = 0;
  for (int i = 0; i < P->count; i++)
    if (ampc_quant_is_linear(P->p[i].name, P->p[i].ndim))
      n += ampc_mmodel_int8_parts(M, P->p[i].name);
  if (n == 0)
    return ampc_fail(AMPC_ERR_NOT_FOUND, "calibration: the model has no INT8 sites (no "
                                         "transformer block linear layers)");
  ampc_calib c = {.n = n, .batches = batches, .percentile = percentile, .method = method};
  c.sites = calloc((size_t)n, sizeof *c.sites);
  ampc_status st = c.sites ? AMPC_OK : ampc_fail(AMPC_ERR_NOMEM, "calibration: memory");
  int k = 0;
  for (int i = 0; st == AMPC_OK && i < P->count; i++) {
    const int parts = ampc_quant_is_linear(P->p[i].name, P->p[i].ndim)
                          ? ampc_mmodel_int8_parts(M, P->p[i].name)
                          : 0;
    for (int j = 0; st == AMPC_OK && j < parts; j++, k++) {
      ampc_calib_site *s = &c.sites[k];
      snprintf(s->name, sizeof s->name, "%s", P->p[i].name);
      s->part = j, s->pass = &c.pass_;
      s->hist = calloc(AMPC_CALIB_BINS, sizeof *s->hist);
      st = s->hist ? ampc_mmodel_observe(M, s->name, j, observe, s)
                   : ampc_fail(AMPC_ERR_NOMEM, "calibration: memory");
    }
  }
  for (int pass = 0; st == AMPC_OK && pass < 3; pass++) {
    c.pass_ = pass;
    for (int b = 0; st == AMPC_OK && b < batches; b++)
      st = run(user, b);
    for (int i = 0; st == AMPC_OK && i < n && pass == 0; i++)
      if (c.sites[i].nonfinite)
        st = ampc_fail(
            AMPC_ERR_NUMERIC,
            "%llu non-finite activations enter %s%s (of %llu): the model's FP32 forward "
            "pass overflows on the calibration data, or a weight is not finite",
            (unsigned long long)c.sites[i].nonfinite, c.sites[i].name,
            c.sites[i].part == 0 && ampc_mmodel_int8_parts(M, c.sites[i].name) == 3 ? " (q)" : "",
            (unsigned long long)c.sites[i].values);
    for (int i = 0; st == AMPC_OK && i < n && pass == 1; i++)
      choose(&c.sites[i], percentile);
  }
  for (int i = 0; i < k; i++) /* M without observers, whatever happened */
    (void)ampc_mmodel_observe(M, c.sites[i].name, c.sites[i].part, NULL, NULL);
  for (int i = 0; st == AMPC_OK && i < n; i++) {
    ampc_calib_site *s = &c.sites[i];
    for (int m = 0; m < AMPC_CALIB_METHODS; m++) {
      s->sqnr_db[m] = s->err_sq[m] > 0.0 ? 10.0 * log10(s->sum_sq / s->err_sq[m])
                                         : (s->sum_sq > 0.0 ? (double)INFINITY : 0.0);
      s->clipped[m] = s->values ? (double)s->clip_n[m] / (double)s->values : 0.0;
    }
  }
  if (st != AMPC_OK) {
    ampc_calib_free(&c);
    return st;
  }
  for (int i = 0; i < n; i++)
    c.sites[i].pass = NULL; /* c moves into out */
  *out = c;
  return AMPC_OK;
}
