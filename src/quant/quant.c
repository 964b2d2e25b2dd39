/*
 * src/quant/quant.c: INT8 post-training quantization of a checkpoint's
 * linear layers (include/ampc/quant.h): symmetric weights per output
 * channel or per tensor, their SQNR, and the quantized safetensors file.
 */
#include "ampc/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ampc/io.h"
#include "internal.h"
#include "numeric/numeric.h"

/* the scale of amax: amax / 127, or 1 for an all-zero set */
static float scale_of(float amax) { return amax > 0.0f ? amax / 127.0f : 1.0f; }

static int8_t q8(float w, float scale) {
  float r = nearbyintf(w / scale); /* the default rounding mode: half to even */
  r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
  return (int8_t)r;
}

ampc_status ampc_quant_weight_s8(const float *w, int64_t rows, int64_t cols,
                                 ampc_quant_granularity g, int8_t *q, float *scale) {
  if (!w || !q || !scale || rows < 1 || cols < 1 ||
      (g != AMPC_QUANT_CHANNEL && g != AMPC_QUANT_TENSOR))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_quant_weight_s8: bad arguments");
  float all = 0.0f;
  for (int64_t i = 0; i < rows * cols; i++) {
    if (!isfinite(w[i]))
      return ampc_fail(AMPC_ERR_NUMERIC, "weight %lld (row %lld) is %g: cannot quantize",
                       (long long)i, (long long)(i / cols), (double)w[i]);
    all = fabsf(w[i]) > all ? fabsf(w[i]) : all;
  }
  for (int64_t r = 0; r < rows; r++) {
    float s;
    if (g == AMPC_QUANT_TENSOR) {
      s = scale_of(all);
    } else {
      float m = 0.0f;
      for (int64_t c = 0; c < cols; c++)
        m = fabsf(w[r * cols + c]) > m ? fabsf(w[r * cols + c]) : m;
      s = scale_of(m);
      scale[r] = s;
    }
    for (int64_t c = 0; c < cols; c++)
      q[r * cols + c] = q8(w[r * cols + c], s);
  }
  if (g == AMPC_QUANT_TENSOR)
    scale[0] = scale_of(all);
  return AMPC_OK;
}

ampc_status ampc_dequant_s8(const int8_t *q, int64_t rows, int64_t cols, const float *scale,
                            bool per_row, float *out) {
  if (!q || !scale || !out || rows < 1 || cols < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dequant_s8: bad arguments");
  for (int64_t r = 0; r < (per_row ? rows : 1); r++)
    if (!(scale[r] > 0.0f) || !isfinite(scale[r]))
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "ampc_dequant_s8: scale %lld is %g (scales must be positive and finite)",
                       (long long)r, (double)scale[r]);
  for (int64_t r = 0; r < rows; r++) {
    const float s = scale[per_row ? r : 0];
    for (int64_t c = 0; c < cols; c++)
      out[r * cols + c] = (float)q[r * cols + c] * s;
  }
  return AMPC_OK;
}

double ampc_sqnr_db(const float *x, const float *xh, int64_t n) {
  double sig = 0.0, err = 0.0;
  for (int64_t i = 0; x && xh && i < n; i++) {
    const double d = (double)x[i] - (double)xh[i];
    sig += (double)x[i] * (double)x[i], err += d * d;
  }
  if (err == 0.0)
    return (double)INFINITY;
  if (sig == 0.0)
    return -(double)INFINITY;
  return 10.0 * log10(sig / err);
}

static bool ends_with(const char *s, const char *suffix) {
  const size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool ampc_quant_is_linear(const char *name, int ndim) {
  if (!name || ndim != 2 || strncmp(name, "optimizer.", 10) == 0)
    return false;
  if (strstr(name, "embed") && !strstr(name, "patch_embed"))
    return false; /* token and position embeddings: tables, not products */
  return ends_with(name, ".weight") || ends_with(name, "_weight");
}

/* whether name starts with one of keep's comma-separated prefixes */
static bool kept(const char *name, const char *keep) {
  for (const char *p = keep; p && *p;) {
    const char *e = strchr(p, ',');
    const size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 0 && strncmp(name, p, n) == 0)
      return true;
    p = e ? e + 1 : p + n;
  }
  return false;
}

void ampc_quant_report_free(ampc_quant_report *rep) {
  if (rep) {
    free(rep->layers);
    memset(rep, 0, sizeof *rep);
  }
}

/* the tensor as FP32 (any of ampc's dtypes; the file's bytes may be unaligned) */
static float *as_f32(const ampc_st_tensor *t, int64_t n) {
  void *raw = malloc(t->nbytes ? t->nbytes : 1);
  float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  if (raw && f)
    memcpy(raw, t->data, t->nbytes);
  if (!raw || !f || (n > 0 && ampc_convert(f, AMPC_F32, raw, t->dtype, (size_t)n) != AMPC_OK)) {
    free(raw), free(f);
    return NULL;
  }
  free(raw);
  return f;
}

static int64_t numel(const ampc_st_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    n *= t->shape[d];
  return n;
}

/* metadata of the training checkpoint carried into the quantized file */
static const char *const k_meta_keys[] = {
    "ampc.version",   "ampc.model", "ampc.model_config", "ampc.config",         "ampc.step",
    "ampc.iteration", "ampc.data",  "ampc.batch",        "ampc.held_out_style", "ampc.data_recipe"};

ampc_status ampc_quantize_checkpoint(const ampc_quant_options *o, ampc_quant_report *rep) {
  if (rep)
    memset(rep, 0, sizeof *rep);
  if (!o || !o->checkpoint || !o->out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_quantize_checkpoint: NULL argument");
  const char *keep = o->keep ? o->keep : "vision.patch_embed,heads";
  ampc_safetensors *f = NULL;
  AMPC_TRY(ampc_safetensors_read_ex(o->checkpoint, AMPC_ST_ANY_DTYPE, &f));
  const char *fmt = ampc_safetensors_meta(f, "format");
  if (fmt && !strcmp(fmt, "ampc-int8")) {
    ampc_safetensors_free(f);
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s is already quantized (format ampc-int8): quantize the checkpoint it "
                     "came from",
                     o->checkpoint);
  }
  const int nt = ampc_safetensors_count(f);
  ampc_st_tensor *out = calloc((size_t)(3 * nt + 1), sizeof *out);
  void **bufs = calloc((size_t)(4 * nt + 1), sizeof *bufs);
  char **names = calloc((size_t)(2 * nt + 1), sizeof *names); /* _scale, _input_scale */
  ampc_quant_layer *layers = calloc((size_t)(nt + 1), sizeof *layers);
  ampc_quant_report r = {0};
  int no = 0, nb = 0;
  ampc_status st =
      out && bufs && names && layers ? AMPC_OK : ampc_fail(AMPC_ERR_NOMEM, "quantize: memory");
  for (int i = 0; st == AMPC_OK && i < nt; i++) {
    const ampc_st_tensor *t = ampc_safetensors_tensor(f, i);
    if (strncmp(t->name, "optimizer.", 10) == 0)
      continue; /* the optimizer state: training only */
    if ((int)t->dtype < 0 || t->dtype >= AMPC_DTYPE_COUNT) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s' is %s, not a dtype of ampc's weights",
                     o->checkpoint, t->name, t->dtype_name ? t->dtype_name : "?");
      break;
    }
    const int64_t n = numel(t);
    float *w = as_f32(t, n);
    if (!w) {
      st = ampc_fail(AMPC_ERR_NOMEM, "quantize: memory");
      break;
    }
    bufs[nb++] = w;
    int64_t bad = 0;
    while (bad < n && isfinite(w[bad]))
      bad++;
    if (bad < n) { /* a damaged or diverged checkpoint: nothing to quantize */
      st = ampc_fail(AMPC_ERR_NUMERIC, "%s: tensor '%s' holds %g (value %lld): not a usable model",
                     o->checkpoint, t->name, (double)w[bad], (long long)bad);
      break;
    }
    r.bytes_fp32 += n * 4;
    ampc_st_tensor *x = &out[no++];
    *x = *t;
    x->dtype = AMPC_F32, x->data = w, x->nbytes = (size_t)n * sizeof(float);
    x->dtype_name = NULL;
    if (!ampc_quant_is_linear(t->name, t->ndim)) {
      r.params_other += n;
      continue;
    }
    ampc_quant_layer *L = &layers[r.n++];
    snprintf(L->name, sizeof L->name, "%s", t->name);
    L->rows = t->shape[0], L->cols = t->shape[1];
    L->kept = kept(t->name, keep);
    for (int64_t k = 0; k < n; k++)
      L->amax = fabsf(w[k]) > L->amax ? fabsf(w[k]) : L->amax;
    /* both granularities' SQNR; the chosen one is written */
    int8_t *q[2] = {malloc((size_t)n), malloc((size_t)n)};
    float *sc[2] = {malloc((size_t)L->rows * sizeof(float)), malloc(sizeof(float))};
    float *deq = malloc((size_t)n * sizeof *deq);
    if (!q[0] || !q[1] || !sc[0] || !sc[1] || !deq)
      st = ampc_fail(AMPC_ERR_NOMEM, "quantize: memory");
    double sq[2] = {0.0, 0.0};
    for (int g = 0; st == AMPC_OK && g < 2; g++) {
      st = ampc_quant_weight_s8(w, L->rows, L->cols, (ampc_quant_granularity)g, q[g], sc[g]);
      if (st != AMPC_OK) {
        st = ampc_fail(st, "%s: tensor '%s': %s", o->checkpoint, t->name, ampc_last_error());
        break;
      }
      st = ampc_dequant_s8(q[g], L->rows, L->cols, sc[g], g == AMPC_QUANT_CHANNEL, deq);
      sq[g] = ampc_sqnr_db(w, deq, n);
    }
    free(deq);
    const int g = (int)o->granularity == AMPC_QUANT_TENSOR ? 1 : 0;
    L->sqnr_db = L->kept ? (double)INFINITY : sq[g];
    L->sqnr_tensor_db = sq[1];
    if (st != AMPC_OK || L->kept) {
      free(q[0]), free(q[1]), free(sc[0]), free(sc[1]);
      r.params_kept += L->kept ? n : 0;
      continue;
    }
    r.params_quantized += n;
    free(q[1 - g]), free(sc[1 - g]);
    bufs[nb++] = q[g], bufs[nb++] = sc[g];
    /* NAME as I8, NAME_scale as F32 */
    x->dtype = AMPC_ST_OTHER, x->dtype_name = "I8", x->data = q[g], x->nbytes = (size_t)n;
    const size_t ln = strlen(t->name) + 7;
    names[i] = malloc(ln);
    if (!names[i]) {
      st = ampc_fail(AMPC_ERR_NOMEM, "quantize: memory");
      break;
    }
    snprintf(names[i], ln, "%s_scale", t->name);
    ampc_st_tensor *s = &out[no++];
    memset(s, 0, sizeof *s);
    s->name = names[i], s->dtype = AMPC_F32, s->ndim = 1;
    s->shape[0] = g == 0 ? L->rows : 1;
    s->data = sc[g], s->nbytes = (size_t)s->shape[0] * sizeof(float);
    /* NAME_input_scale: the calibrated activation scales of a block layer */
    int parts = 0;
    while (o->calib && parts < 3 && ampc_calib_find(o->calib, t->name, parts))
      parts++;
    if (parts == 0)
      continue;
    float *xs = malloc((size_t)parts * sizeof *xs);
    names[nt + i] = malloc(ln + 6);
    if (!xs || !names[nt + i]) {
      free(xs);
      st = ampc_fail(AMPC_ERR_NOMEM, "quantize: memory");
      break;
    }
    bufs[nb++] = xs;
    for (int j = 0; j < parts; j++)
      xs[j] = ampc_calib_find(o->calib, t->name, j)->scale[o->calib->method];
    snprintf(names[nt + i], ln + 6, "%s_input_scale", t->name);
    s = &out[no++];
    memset(s, 0, sizeof *s);
    s->name = names[nt + i], s->dtype = AMPC_F32, s->ndim = 1, s->shape[0] = parts;
    s->data = xs, s->nbytes = (size_t)parts * sizeof(float);
  }
  if (st == AMPC_OK && r.n == 0)
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: no linear layer weights (not an ampc checkpoint?)",
                   o->checkpoint);
  if (st == AMPC_OK && r.params_quantized == 0)
    st = ampc_fail(AMPC_ERR_INVALID_ARG,
                   "--keep %s keeps every linear layer of %s: nothing to "
                   "quantize",
                   keep, o->checkpoint);
  /* every --keep prefix the caller gave must name a layer (the default's
   * need not: an MLP has neither) */
  for (const char *p = o->keep; st == AMPC_OK && p && *p;) {
    const char *e = strchr(p, ',');
    const size_t n = e ? (size_t)(e - p) : strlen(p);
    char one[96];
    snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one ? n : sizeof one - 1), p);
    bool any = false;
    for (int k = 0; k < r.n && !any; k++)
      any = kept(layers[k].name, one);
    if (n > 0 && !any)
      st = ampc_fail(AMPC_ERR_INVALID_ARG, "--keep %s: names no linear layer of %s (its first: %s)",
                     one, o->checkpoint, r.n > 0 ? layers[0].name : "none");
    p = e ? e + 1 : p + n;
  }
  if (st == AMPC_OK) {
    ampc_st_meta meta[16];
    int nm = 0;
    meta[nm++] = (ampc_st_meta){"format", "ampc-int8"};
    meta[nm++] = (ampc_st_meta){"ampc.granularity",
                                o->granularity == AMPC_QUANT_TENSOR ? "tensor" : "channel"};
    meta[nm++] = (ampc_st_meta){"ampc.kept", keep};
    char cal[96];
    if (o->calib) {
      if (o->calib->method == AMPC_CALIB_PERCENTILE)
        snprintf(cal, sizeof cal, "percentile %g, %d batches", o->calib->percentile,
                 o->calib->batches);
      else
        snprintf(cal, sizeof cal, "%s, %d batches", ampc_calib_method_name(o->calib->method),
                 o->calib->batches);
      meta[nm++] = (ampc_st_meta){"ampc.calibration", cal};
    }
    for (size_t k = 0; k < sizeof k_meta_keys / sizeof k_meta_keys[0]; k++) {
      const char *v = ampc_safetensors_meta(f, k_meta_keys[k]);
      if (v)
        meta[nm++] = (ampc_st_meta){k_meta_keys[k], v};
    }
    st = ampc_safetensors_write(o->out, out, no, meta, nm);
  }
  struct stat sb;
  if (st == AMPC_OK && stat(o->out, &sb) == 0) /* the file written, header included */
    r.bytes_out = (int64_t)sb.st_size;
  for (int i = 0; i < nb; i++)
    free(bufs[i]);
  for (int i = 0; names && i < 2 * nt; i++)
    free(names[i]);
  free(bufs), free(names), free(out);
  ampc_safetensors_free(f);
  if (st == AMPC_OK && rep) {
    r.layers = layers;
    *rep = r;
  } else {
    free(layers);
  }
  return st;
}

/* ---- loading a quantized checkpoint for INT8 inference ------------------------------ */

ampc_status ampc_quant_load(const char *path, ampc_params *P, ampc_mmodel *M, int *int8_layers) {
  if (int8_layers)
    *int8_layers = 0;
  if (!path || !P)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_quant_load: NULL argument");
  ampc_safetensors *f = NULL;
  AMPC_TRY(ampc_safetensors_read_ex(path, AMPC_ST_ANY_DTYPE, &f));
  const char *fmt = ampc_safetensors_meta(f, "format");
  const char *gran = ampc_safetensors_meta(f, "ampc.granularity");
  ampc_status st = AMPC_OK;
  if (!fmt || strcmp(fmt, "ampc-int8") != 0 || !gran)
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: not a quantized checkpoint (ampc quantize writes them)",
                   path);
  const bool per_channel = gran && strcmp(gran, "channel") == 0;
  for (int i = 0; st == AMPC_OK && i < P->count; i++) {
    const ampc_param *p = &P->p[i];
    const ampc_st_tensor *t = ampc_safetensors_find(f, p->name);
    if (!t) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s' is missing", path, p->name);
      break;
    }
    if (numel(t) != p->numel) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s' has %lld values, the model's %lld", path,
                     p->name, (long long)numel(t), (long long)p->numel);
      break;
    }
    float *w = malloc((size_t)p->numel * sizeof *w);
    int8_t *q = NULL;
    float *sc = NULL;
    if (!w) {
      st = ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
      break;
    }
    const bool i8 = t->dtype == AMPC_ST_OTHER && t->dtype_name && !strcmp(t->dtype_name, "I8");
    if (t->dtype == AMPC_F32) {
      memcpy(w, t->data, t->nbytes);
    } else if (i8 && t->ndim == 2) {
      char sn[160];
      snprintf(sn, sizeof sn, "%s_scale", p->name);
      const ampc_st_tensor *s = ampc_safetensors_find(f, sn);
      const int64_t ns = per_channel ? t->shape[0] : 1;
      q = malloc((size_t)p->numel);
      sc = malloc((size_t)ns * sizeof *sc);
      if (!s || s->dtype != AMPC_F32 || numel(s) != ns)
        st = ampc_fail(AMPC_ERR_FORMAT, "%s: '%s' is missing or not F32 [%lld]", path, sn,
                       (long long)ns);
      else if (!q || !sc)
        st = ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
      if (st == AMPC_OK) {
        memcpy(q, t->data, (size_t)p->numel);
        memcpy(sc, s->data, (size_t)ns * sizeof *sc);
        st = ampc_dequant_s8(q, t->shape[0], t->shape[1], sc, per_channel, w);
        if (st != AMPC_OK)
          st = ampc_fail(st, "%s: '%s': %s", path, sn, ampc_last_error());
      }
      if (st == AMPC_OK && M) { /* the layer runs INT8 where the model has such a site */
        /* the calibrated activation scales, where the file has them */
        char xn[176];
        snprintf(xn, sizeof xn, "%s_input_scale", p->name);
        const ampc_st_tensor *xs = ampc_safetensors_find(f, xn);
        const int parts = ampc_mmodel_int8_parts(M, p->name);
        float x3[3];
        if (xs && (xs->dtype != AMPC_F32 || numel(xs) != parts || parts > 3))
          st = ampc_fail(AMPC_ERR_FORMAT, "%s: '%s' is not F32 [%d]", path, xn, parts);
        else if (xs)
          memcpy(x3, xs->data, (size_t)parts * sizeof(float)); /* the file's bytes: unaligned */
        if (st == AMPC_OK)
          st = ampc_mmodel_set_int8(M, p->name, q, t->shape[0], t->shape[1], sc, per_channel,
                                    xs ? x3 : NULL);
        if (st == AMPC_ERR_INVALID_ARG && xs)
          st = ampc_fail(AMPC_ERR_FORMAT, "%s: %s", path, ampc_last_error());
        if (st == AMPC_OK && int8_layers)
          ++*int8_layers;
        else if (st == AMPC_ERR_NOT_FOUND) /* a head or the patch embedding: dequantized */
          st = AMPC_OK;
      }
    } else {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s' is %s, expected F32 or a 2-D I8", path,
                     p->name, t->dtype_name ? t->dtype_name : "?");
    }
    /* the model's own copy: the weight as dequantized, in its dtype */
    if (st == AMPC_OK)
      st = ampc_store_f32(ampc_param_w(P, i), P->wdt, w, (size_t)p->numel, NULL);
    if (st == AMPC_OK && P->master)
      memcpy(ampc_param_master(P, i), w, (size_t)p->numel * sizeof *w);
    free(w), free(q), free(sc);
  }
  ampc_safetensors_free(f);
  return st;
}
