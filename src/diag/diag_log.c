/*
 * src/diag/diag_log.c: the diagnosis' side of the metrics log (DESIGN.md
 * section 4): the fields a step line carries, reading a log back, and the
 * verdicts as JSON. cJSON does the JSON.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ampc/amp.h"
#include "ampc/diag.h"
#include "internal.h"

/* ---- writing ------------------------------------------------------------------- */

static void add_stats(cJSON *o, const char *key, const ampc_tm_stats *t) {
  cJSON *g = cJSON_AddObjectToObject(o, key);
  const ampc_round_stats *r = &t->r;
  cJSON_AddNumberToObject(g, "count", (double)r->count);
  cJSON_AddNumberToObject(g, "zeros", (double)t->zeros);
  cJSON_AddNumberToObject(g, "flushed", (double)r->underflow);
  cJSON_AddNumberToObject(g, "subnormal", (double)r->subnormal);
  cJSON_AddNumberToObject(g, "overflow", (double)r->overflow);
  cJSON_AddNumberToObject(g, "inf", (double)r->inf);
  cJSON_AddNumberToObject(g, "nan", (double)r->nan);
  cJSON_AddNumberToObject(g, "max_abs", (double)r->max_abs);
  cJSON_AddNumberToObject(g, "flushed_fraction",
                          r->count ? (double)r->underflow / (double)r->count : 0.0);
  int lo = 0, hi = -1;
  for (int i = 0; i < AMPC_TM_BINS; i++)
    if (t->hist[i]) {
      if (hi < 0)
        lo = i;
      hi = i;
    }
  cJSON *h = cJSON_AddObjectToObject(g, "log2_hist");
  /* bin i holds floor(log2|x|) = i - 127 (bin 0: FP32 subnormals, below 2^-126) */
  cJSON_AddNumberToObject(h, "lo", hi < 0 ? 0 : lo - 127);
  cJSON *arr = cJSON_AddArrayToObject(h, "counts");
  for (int i = lo; i <= hi; i++)
    cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)t->hist[i]));
}

char *ampc_diag_step_json(const ampc_diag_step *s) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddNumberToObject(o, "nonfinite_weights", (double)s->nonfinite_weights);
  cJSON_AddBoolToObject(o, "telemetry", s->telemetry);
  cJSON *br = cJSON_AddObjectToObject(o, "branches");
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    const ampc_diag_branch *d = &s->br[b];
    if (!d->parameters && !d->grad.r.count && !d->act.r.count)
      continue;
    cJSON *h = cJSON_AddObjectToObject(br, ampc_branch_name((ampc_branch)b));
    cJSON_AddNumberToObject(h, "parameters", (double)d->parameters);
    cJSON_AddNumberToObject(h, "updated", (double)d->updated);
    cJSON_AddNumberToObject(h, "swallowed", (double)d->swallowed);
    cJSON_AddNumberToObject(h, "would_swallow", (double)d->would_swallow);
    cJSON_AddNumberToObject(h, "swallowed_fraction",
                            d->updated ? (double)d->swallowed / (double)d->updated : 0.0);
    cJSON_AddNumberToObject(h, "would_swallow_fraction",
                            d->updated ? (double)d->would_swallow / (double)d->updated : 0.0);
    if (d->fp8_values) {
      cJSON_AddNumberToObject(h, "fp8_values", (double)d->fp8_values);
      cJSON_AddNumberToObject(h, "fp8_saturated", (double)d->fp8_saturated);
      cJSON_AddNumberToObject(h, "fp8_flushed", (double)d->fp8_flushed);
    }
    if (s->telemetry) {
      add_stats(h, "grad", &d->grad);
      add_stats(h, "act", &d->act);
      if (d->acc_err >= 0.0 || isnan(d->acc_err)) {
        cJSON_AddNumberToObject(h, "accumulation_rel_err", d->acc_err);
        cJSON_AddNumberToObject(h, "accumulation_k", (double)d->acc_k);
        cJSON_AddStringToObject(h, "accumulation_tensor", d->acc_tensor);
      }
    }
  }
  if (s->telemetry && s->first_nonfinite_branch >= 0) {
    cJSON *f = cJSON_AddObjectToObject(o, "first_nonfinite");
    cJSON_AddStringToObject(f, "tensor", s->first_nonfinite);
    cJSON_AddStringToObject(f, "branch", ampc_branch_name((ampc_branch)s->first_nonfinite_branch));
    cJSON_AddStringToObject(f, "phase", s->first_nonfinite_phase == 0 ? "forward" : "backward");
    ampc_dtype dt;
    if (s->first_nonfinite_dtype[0] && ampc_dtype_parse(s->first_nonfinite_dtype, &dt) == AMPC_OK) {
      ampc_format_info fi;
      cJSON_AddStringToObject(f, "dtype", ampc_dtype_name(dt));
      if (ampc_format_info_get(dt, &fi) == AMPC_OK)
        cJSON_AddNumberToObject(f, "dtype_max", fi.max);
    }
    if (s->first_nonfinite_max_abs >= 0.0) /* the largest finite FP32 result before rounding */
      cJSON_AddNumberToObject(f, "max_abs_fp32", s->first_nonfinite_max_abs);
    if (s->nf_samples_of > 0) {
      cJSON_AddNumberToObject(f, "samples_total", (double)s->nf_samples_total);
      cJSON_AddNumberToObject(f, "samples_of", (double)s->nf_samples_of);
      cJSON *a = cJSON_AddArrayToObject(f, "samples");
      bool keys = false;
      for (int i = 0; i < s->n_nf_samples && i < AMPC_TM_SAMPLES; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->nf_sample[i]));
        keys = keys || s->nf_key[i][0];
      }
      cJSON *k = keys ? cJSON_AddArrayToObject(f, "keys") : NULL;
      for (int i = 0; k && i < s->n_nf_samples && i < AMPC_TM_SAMPLES; i++)
        cJSON_AddItemToArray(k, cJSON_CreateString(s->nf_key[i]));
    }
  }
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

char *ampc_diag_json(const ampc_diag *d) {
  ampc_verdict v[AMPC_VERDICT_COUNT];
  const int n = ampc_diag_verdicts(d, v, AMPC_VERDICT_COUNT);
  cJSON *o = cJSON_CreateObject();
  if (!o || n < 1) {
    cJSON_Delete(o);
    return NULL;
  }
  cJSON_AddStringToObject(o, "verdict", ampc_verdict_name(v[0].kind));
  cJSON *all = cJSON_AddArrayToObject(o, "verdicts");
  cJSON *evid = cJSON_AddArrayToObject(o, "evidence");
  for (int i = 0; i < n; i++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "verdict", ampc_verdict_name(v[i].kind));
    if (v[i].branch >= 0)
      cJSON_AddStringToObject(x, "branch", ampc_branch_name((ampc_branch)v[i].branch));
    if (v[i].step >= 0)
      cJSON_AddNumberToObject(x, "step", (double)v[i].step);
    if (v[i].tensor[0])
      cJSON_AddStringToObject(x, "tensor", v[i].tensor);
    cJSON *e = cJSON_AddArrayToObject(x, "evidence");
    for (int k = 0; k < v[i].n_evidence; k++) {
      cJSON_AddItemToArray(e, cJSON_CreateString(v[i].evidence[k]));
      if (i == 0)
        cJSON_AddItemToArray(evid, cJSON_CreateString(v[i].evidence[k]));
    }
    if (v[i].safeguard[0])
      cJSON_AddStringToObject(x, "safeguard", v[i].safeguard);
    cJSON_AddItemToArray(all, x);
  }
  if (v[0].safeguard[0])
    cJSON_AddStringToObject(o, "safeguard", v[0].safeguard);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

/* ---- reading ------------------------------------------------------------------- */

/* Reading validates as it goes: a field that is present with the wrong type
 * or out of range makes the line malformed (v->bad names it); absent fields
 * take their defaults (older logs lack some). */
typedef struct {
  const char *bad;
} vctx;

static const cJSON *field(const cJSON *o, const char *k) {
  return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}
static double num(vctx *v, const cJSON *o, const char *k, double def) {
  const cJSON *x = field(o, k);
  if (!x)
    return def;
  if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
    v->bad = v->bad ? v->bad : k;
    return def;
  }
  return x->valuedouble;
}
/* a count: a whole number in [0, 2^63) */
static int64_t cnt(vctx *v, const cJSON *o, const char *k) {
  const double d = num(v, o, k, 0.0);
  if (!(d >= 0.0 && d < 9.2e18) || floor(d) != d) {
    v->bad = v->bad ? v->bad : k;
    return 0;
  }
  return (int64_t)d;
}
static bool flag(vctx *v, const cJSON *o, const char *k) {
  const cJSON *x = field(o, k);
  if (x && !cJSON_IsBool(x))
    v->bad = v->bad ? v->bad : k;
  return cJSON_IsTrue(x);
}
static const char *str(vctx *v, const cJSON *o, const char *k) {
  const cJSON *x = field(o, k);
  if (x && !cJSON_IsString(x))
    v->bad = v->bad ? v->bad : k;
  return cJSON_IsString(x) ? x->valuestring : NULL;
}
static const cJSON *obj(vctx *v, const cJSON *o, const char *k) {
  const cJSON *x = field(o, k);
  if (x && !cJSON_IsObject(x)) {
    v->bad = v->bad ? v->bad : k;
    return NULL;
  }
  return x;
}

static void read_stats(vctx *v, const cJSON *o, ampc_tm_stats *t) {
  memset(t, 0, sizeof *t);
  if (!o)
    return;
  t->r.count = (uint64_t)cnt(v, o, "count");
  t->zeros = (uint64_t)cnt(v, o, "zeros");
  t->r.underflow = (uint64_t)cnt(v, o, "flushed");
  t->r.subnormal = (uint64_t)cnt(v, o, "subnormal");
  t->r.overflow = (uint64_t)cnt(v, o, "overflow");
  t->r.inf = (uint64_t)cnt(v, o, "inf");
  t->r.nan = (uint64_t)cnt(v, o, "nan");
  const double m = num(v, o, "max_abs", 0.0);
  if (!(m >= 0.0 && m <= 3.4028234663852886e38))
    v->bad = v->bad ? v->bad : "max_abs";
  else
    t->r.max_abs = (float)m;
  const cJSON *h = obj(v, o, "log2_hist");
  if (!h)
    return;
  const cJSON *arr = field(h, "counts");
  const double lo = num(v, h, "lo", 0.0);
  if (!cJSON_IsArray(arr) || !(lo >= -127.0 && lo <= 128.0) || floor(lo) != lo) {
    v->bad = v->bad ? v->bad : "log2_hist";
    return;
  }
  int i = (int)lo + 127;
  const cJSON *x;
  cJSON_ArrayForEach(x, arr) {
    const double c = cJSON_IsNumber(x) ? x->valuedouble : -1.0;
    if (i >= AMPC_TM_BINS || !(c >= 0.0 && c < 9.2e18) || floor(c) != c) {
      v->bad = v->bad ? v->bad : "log2_hist";
      return;
    }
    t->hist[i++] = (uint64_t)c;
  }
}

static int branch_of(const char *name) {
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    if (name && strcmp(name, ampc_branch_name((ampc_branch)b)) == 0)
      return b;
  return -1;
}

static ampc_dtype dtype_of(const char *s) {
  if (s && strcmp(s, "f16") == 0)
    return AMPC_F16;
  if (s && strcmp(s, "bf16") == 0)
    return AMPC_BF16;
  return AMPC_F32;
}

static ampc_status parse_config(const cJSON *o, ampc_diag_config *c) {
  vctx v = {0};
  memset(c, 0, sizeof *c);
  const char *p = str(&v, o, "precision");
  snprintf(c->precision, sizeof c->precision, "%s", p ? p : "?");
  c->lowp = dtype_of(str(&v, o, "grads_dtype"));
  const char *mw = str(&v, o, "master_weights");
  c->master_weights = mw && strcmp(mw, "on") == 0;
  const char *wu = str(&v, o, "weight_update"); /* absent in older logs: nearest */
  c->stochastic_update = wu && (strcmp(wu, "stochastic") == 0 || strcmp(wu, "kahan") == 0);
  const char *acc = str(&v, o, "accumulate");
  c->accumulate = acc && strcmp(acc, "fp16") == 0 ? AMPC_ACC_F16 : AMPC_ACC_F32;
  const cJSON *ls = obj(&v, o, "loss_scale");
  const char *mode = str(&v, ls, "mode");
  c->loss_scale_mode = !mode                             ? -1
                       : strcmp(mode, "none") == 0       ? AMPC_LOSS_SCALE_NONE
                       : strcmp(mode, "static") == 0     ? AMPC_LOSS_SCALE_STATIC
                       : strcmp(mode, "dynamic") == 0    ? AMPC_LOSS_SCALE_DYNAMIC
                       : strcmp(mode, "per-branch") == 0 ? AMPC_LOSS_SCALE_PER_BRANCH
                       : strcmp(mode, "per-loss") == 0   ? AMPC_LOSS_SCALE_PER_LOSS
                                                         : -1;
  c->min_scale = num(&v, ls, "min_scale", 1.0);
  /* the twin key: the run's and optimizer's settings that a precision
   * comparison must hold fixed (eps and the clip norm are left out: a loss
   * multiplier scales them) */
  static const char *const run_keys[] = {
      "model",         "data",       "steps", "batch", "seed",  "in",    "hidden",  "classes",
      "micro_batches", "train_size", "w_itc", "w_itm", "w_cls", "w_mlm", "mlm_prob"};
  static const char *const opt_keys[] = {
      "kind",        "lr",     "weight_decay", "beta1",   "beta2",     "momentum", "warmup_steps",
      "total_steps", "min_lr", "lr_vision",    "lr_text", "lr_fusion", "lr_heads"};
  const cJSON *run = cJSON_GetObjectItemCaseSensitive(o, "run");
  const cJSON *opt = cJSON_GetObjectItemCaseSensitive(o, "optimizer");
  size_t used = 0;
  for (int g = 0; g < 2; g++) {
    const cJSON *src = g ? opt : run;
    const int nk =
        g ? (int)(sizeof opt_keys / sizeof *opt_keys) : (int)(sizeof run_keys / sizeof *run_keys);
    for (int k = 0; src && k < nk; k++) {
      const char *key = g ? opt_keys[k] : run_keys[k];
      const cJSON *it = cJSON_GetObjectItemCaseSensitive(src, key);
      char val[64] = "";
      if (cJSON_IsString(it))
        snprintf(val, sizeof val, "%.60s", it->valuestring);
      else if (cJSON_IsNumber(it))
        snprintf(val, sizeof val, "%.9g", it->valuedouble);
      else
        continue;
      const int w = snprintf(c->twin_key + used, sizeof c->twin_key - used, "%s=%s;", key, val);
      if (w < 0 || (size_t)w >= sizeof c->twin_key - used)
        break;
      used += (size_t)w;
    }
  }
  return c->loss_scale_mode < 0 || v.bad ? AMPC_ERR_FORMAT : AMPC_OK;
}

/* one step line; NULL, or the name of the first malformed field */
static const char *parse_step(const cJSON *o, ampc_diag_step *s) {
  vctx v = {0};
  memset(s, 0, sizeof *s);
  s->step = cnt(&v, o, "step");
  const cJSON *l = field(o, "loss");
  /* a non-finite loss is written as null by cJSON */
  if (l && !cJSON_IsNumber(l) && !cJSON_IsNull(l))
    v.bad = "loss";
  s->loss = cJSON_IsNumber(l) ? l->valuedouble : (double)NAN;
  s->loss_scale = num(&v, o, "loss_scale", 1.0);
  const cJSON *bsc = field(o, "branch_scales"); /* --loss-scale per-branch */
  if (bsc && !cJSON_IsObject(bsc))
    v.bad = "branch_scales";
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    s->branch_scale[b] =
        bsc ? num(&v, bsc, ampc_branch_name((ampc_branch)b), s->loss_scale) : s->loss_scale;
  for (const cJSON *it = o->child; it && s->n_parts < AMPC_DIAG_PARTS; it = it->next) {
    /* the loss terms: "loss_<term>" (not loss_scale), a number or null */
    if (!it->string || strncmp(it->string, "loss_", 5) != 0 || !strcmp(it->string, "loss_scale") ||
        strlen(it->string) >= AMPC_DIAG_PART_NAME || (!cJSON_IsNumber(it) && !cJSON_IsNull(it)))
      continue;
    snprintf(s->part_name[s->n_parts], AMPC_DIAG_PART_NAME, "%s", it->string);
    s->part[s->n_parts++] = cJSON_IsNumber(it) ? it->valuedouble : (double)NAN;
  }
  s->overflow = flag(&v, o, "overflow");
  s->skipped = flag(&v, o, "skipped");
  s->nonfinite_grads = cnt(&v, o, "nonfinite_grads");
  s->nonfinite_weights = cnt(&v, o, "nonfinite_weights");
  s->telemetry = flag(&v, o, "telemetry");
  s->first_nonfinite_branch = s->first_nonfinite_phase = -1;
  s->first_nonfinite_max_abs = -1.0;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    s->br[b].acc_err = -1.0;
  const cJSON *brs = obj(&v, o, "branches");
  const cJSON *h;
  cJSON_ArrayForEach(h, brs) {
    const int b = branch_of(h->string);
    if (b < 0)
      continue;
    if (!cJSON_IsObject(h)) {
      v.bad = v.bad ? v.bad : "branches";
      continue;
    }
    ampc_diag_branch *d = &s->br[b];
    d->parameters = cnt(&v, h, "parameters");
    d->updated = cnt(&v, h, "updated");
    d->swallowed = cnt(&v, h, "swallowed");
    d->would_swallow = cnt(&v, h, "would_swallow");
    if (d->swallowed > d->updated || d->would_swallow > d->updated)
      v.bad = v.bad ? v.bad : "swallowed";
    if (field(h, "fp8_values")) { /* fp8-mixed logs */
      d->fp8_values = cnt(&v, h, "fp8_values");
      d->fp8_saturated = cnt(&v, h, "fp8_saturated");
      d->fp8_flushed = cnt(&v, h, "fp8_flushed");
      if (d->fp8_saturated > d->fp8_values || d->fp8_flushed > d->fp8_values)
        v.bad = v.bad ? v.bad : "fp8_saturated";
    }
    read_stats(&v, obj(&v, h, "grad"), &d->grad);
    read_stats(&v, obj(&v, h, "act"), &d->act);
    const cJSON *ae = field(h, "accumulation_rel_err");
    if (cJSON_IsNumber(ae) && ae->valuedouble >= 0.0)
      d->acc_err = ae->valuedouble;
    else if (cJSON_IsNull(ae))
      d->acc_err = (double)INFINITY; /* written as null: non-finite */
    else if (ae)
      v.bad = v.bad ? v.bad : "accumulation_rel_err";
    d->acc_k = cnt(&v, h, "accumulation_k");
    const char *t = str(&v, h, "accumulation_tensor");
    snprintf(d->acc_tensor, sizeof d->acc_tensor, "%s", t ? t : "");
  }
  const cJSON *f = obj(&v, o, "first_nonfinite");
  if (f) {
    const char *t = str(&v, f, "tensor"), *ph = str(&v, f, "phase");
    const int b = branch_of(str(&v, f, "branch"));
    if (b < 0 || !t || !ph)
      v.bad = v.bad ? v.bad : "first_nonfinite";
    else {
      snprintf(s->first_nonfinite, sizeof s->first_nonfinite, "%s", t);
      s->first_nonfinite_branch = b;
      s->first_nonfinite_phase = strcmp(ph, "forward") == 0 ? 0 : 1;
    }
    /* absent in older logs */
    const cJSON *dt = field(f, "dtype"), *mx = field(f, "max_abs_fp32");
    if (cJSON_IsString(dt))
      snprintf(s->first_nonfinite_dtype, sizeof s->first_nonfinite_dtype, "%s", dt->valuestring);
    if (cJSON_IsNumber(mx) && mx->valuedouble >= 0.0)
      s->first_nonfinite_max_abs = mx->valuedouble;
    const cJSON *sa = field(f, "samples"), *ks = field(f, "keys");
    if (sa) {
      if (!cJSON_IsArray(sa))
        v.bad = v.bad ? v.bad : "first_nonfinite.samples";
      s->nf_samples_total = cnt(&v, f, "samples_total");
      s->nf_samples_of = cnt(&v, f, "samples_of");
      const cJSON *e;
      cJSON_ArrayForEach(e, sa) {
        if (s->n_nf_samples >= AMPC_TM_SAMPLES)
          break;
        if (!cJSON_IsNumber(e) || e->valuedouble < 0.0)
          v.bad = v.bad ? v.bad : "first_nonfinite.samples";
        else
          s->nf_sample[s->n_nf_samples++] = (int64_t)e->valuedouble;
      }
      int i = 0;
      cJSON_ArrayForEach(e, ks) {
        if (i < s->n_nf_samples && cJSON_IsString(e))
          snprintf(s->nf_key[i], sizeof s->nf_key[i], "%s", e->valuestring);
        i++;
      }
    }
  }
  return v.bad;
}

ampc_status ampc_diag_read_log(const char *path, ampc_diag **out) {
  if (!path || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_diag_read_log: NULL argument");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    return ampc_fail(AMPC_ERR_IO,
                     "%s: is a directory, not a metrics log (the JSON-lines file of `ampc train "
                     "--log FILE`)",
                     path);
  }
  ampc_diag *d = NULL;
  ampc_status st = AMPC_OK;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int64_t lineno = 0, last_step = 0;
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    if (len == 0 || (len == 1 && line[0] == '\n'))
      continue;
    cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
    if (!cJSON_IsObject(o)) {
      cJSON_Delete(o);
      /* an unterminated last line that does not parse is the partial write of
       * a run that was killed: the complete lines before it are the log */
      if (line[len - 1] != '\n' && d) /* getline ends without '\n' only at EOF */
        break;
      st = ampc_fail(AMPC_ERR_FORMAT, "%s:%lld: not a JSON object", path, (long long)lineno);
      break;
    }
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
    const char *event = cJSON_IsString(ev) ? ev->valuestring : NULL;
    if (!event) {
      cJSON_Delete(o);
      st = ampc_fail(AMPC_ERR_FORMAT, "%s:%lld: no \"event\" field", path, (long long)lineno);
      break;
    }
    if (strcmp(event, "config") == 0) {
      ampc_diag_config c;
      if (parse_config(o, &c) != AMPC_OK) {
        cJSON_Delete(o);
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "%s:%lld: config line without a valid loss_scale.mode or with a "
                       "malformed field",
                       path, (long long)lineno);
        break;
      }
      if (!d) {
        d = ampc_diag_create(&c);
        if (!d) {
          cJSON_Delete(o);
          st = ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
          break;
        }
      } /* a resumed run appends another config line: keep the first */
    } else if (strcmp(event, "step") == 0) {
      if (!d) {
        cJSON_Delete(o);
        st = ampc_fail(AMPC_ERR_FORMAT, "%s:%lld: step line before the config line", path,
                       (long long)lineno);
        break;
      }
      const cJSON *sx = cJSON_GetObjectItemCaseSensitive(o, "step");
      if (!cJSON_IsNumber(sx) || !(sx->valuedouble >= 1.0 && sx->valuedouble < 1e15)) {
        cJSON_Delete(o);
        st = ampc_fail(AMPC_ERR_FORMAT, "%s:%lld: step line without a valid \"step\"", path,
                       (long long)lineno);
        break;
      }
      ampc_diag_step s;
      const char *bad = parse_step(o, &s);
      if (bad) {
        cJSON_Delete(o);
        st = ampc_fail(AMPC_ERR_FORMAT, "%s:%lld: step line with a malformed \"%s\"", path,
                       (long long)lineno, bad);
        break;
      }
      if (s.step <= last_step) /* a resumed run repeats steps: keep the newest */
        ampc_diag_truncate(d, s.step);
      last_step = s.step;
      st = ampc_diag_add(d, &s);
      if (st != AMPC_OK) {
        cJSON_Delete(o);
        break;
      }
    }
    cJSON_Delete(o);
  }
  if (st == AMPC_OK && ferror(f))
    st = ampc_fail(AMPC_ERR_IO, "%s: read error", path);
  free(line);
  fclose(f);
  if (st == AMPC_OK && !d)
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: no config line: not an ampc metrics log", path);
  if (st != AMPC_OK) {
    ampc_diag_free(d);
    return st;
  }
  *out = d;
  return AMPC_OK;
}
