/*
 * src/train/checkpoint.c: trainer checkpoints as safetensors (DESIGN.md 4).
 *
 * Tensors: FP32 master weights under the parameter names (a PyTorch user can
 * load_state_dict them), optimizer moments under PyTorch's state names, in the
 * state dtype, and the Kahan compensation (--weight-update kahan) as
 * "optimizer.kahan_comp.<name>" in the working dtype. Metadata (strings, per the safetensors
 * format): the resolved configuration, the step counters, the scaler state and the RNG state.
 * Loading validates everything before it changes the trainer. Also the run's
 * resume check: whether a checkpoint fits the run that resumes it (model,
 * loss multiplier, loss-term heads, data recipe), and the run's save (its
 * metadata and FP8 state beside the trainer's).
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/engine.h"
#include "ampc/train.h"
#include "ampc/version.h"
#include "numeric/numeric.h"
#include "run_internal.h"

enum { NAME_CAP = AMPC_PARAM_NAME_MAX + 32 };

static const char *moment_prefix(const ampc_optim_config *o, int which) {
  if (o->kind == AMPC_OPTIM_ADAMW)
    return which == 0 ? "optimizer.exp_avg." : "optimizer.exp_avg_sq.";
  return "optimizer.momentum_buffer.";
}

ampc_status ampc_trainer_save(const ampc_trainer *T, const char *path, const ampc_st_meta *extra,
                              int nextra) {
  return ampc_trainer_save_ex(T, path, extra, nextra, NULL, 0);
}

ampc_status ampc_trainer_save_ex(const ampc_trainer *T, const char *path, const ampc_st_meta *extra,
                                 int nextra, const ampc_st_tensor *xt, int nxt) {
  if (!T || !path || nextra < 0 || (nextra > 0 && !extra) || nxt < 0 || (nxt > 0 && !xt))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_save: bad arguments");
  /* on a device, params is the host's cache of the device's table: bring it
   * up to date (the trainer's state itself does not change) */
  AMPC_TRY(ampc_trainer_sync_host((ampc_trainer *)(uintptr_t)T));
  const ampc_params *P = &T->params;
  const int nmom = ampc_optim_moments(&T->opt);
  const int nt = P->count * (1 + nmom + (P->comp ? 1 : 0)) + nxt;
  ampc_st_tensor *t = calloc((size_t)nt, sizeof *t);
  char(*names)[NAME_CAP] = calloc((size_t)nt, sizeof *names);
  float *wide = NULL;
  if (!P->master && P->wdt != AMPC_F32)
    wide = malloc((size_t)P->total * sizeof *wide);
  ampc_st_meta *meta = calloc((size_t)nextra + 6, sizeof *meta);
  char *cfg = ampc_trainer_config_json(T);
  if (!t || !names || !meta || !cfg || (!P->master && P->wdt != AMPC_F32 && !wide)) {
    free(t), free(names), free(wide), free(meta), free(cfg);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory while saving", path);
  }
  const float *src = P->master;
  if (!src && P->wdt == AMPC_F32)
    src = P->w;
  if (wide) {
    for (int64_t e = 0; e < P->total; e++)
      wide[e] = ampc_elem_load(P->w, P->wdt, e); /* exact widening */
    src = wide;
  }
  int k = 0;
  for (int i = 0; i < P->count; i++, k++) {
    const ampc_param *p = &P->p[i];
    snprintf(names[k], NAME_CAP, "%s", p->name);
    t[k] = (ampc_st_tensor){.name = names[k],
                            .dtype = AMPC_F32,
                            .ndim = p->ndim,
                            .data = src + p->offset,
                            .nbytes = (size_t)p->numel * 4};
    memcpy(t[k].shape, p->shape, sizeof p->shape);
  }
  const size_t ssz = ampc_dtype_size(P->sdt);
  for (int which = 0; which < nmom; which++) {
    const char *buf = which == 0 ? P->m : P->v;
    for (int i = 0; i < P->count; i++, k++) {
      const ampc_param *p = &P->p[i];
      snprintf(names[k], NAME_CAP, "%s%s", moment_prefix(&T->opt, which), p->name);
      t[k] = (ampc_st_tensor){.name = names[k],
                              .dtype = P->sdt,
                              .ndim = p->ndim,
                              .data = buf + (size_t)p->offset * ssz,
                              .nbytes = (size_t)p->numel * ssz};
      memcpy(t[k].shape, p->shape, sizeof p->shape);
    }
  }
  const size_t wsz = ampc_dtype_size(P->wdt);
  for (int i = 0; P->comp && i < P->count; i++, k++) {
    const ampc_param *p = &P->p[i];
    snprintf(names[k], NAME_CAP, "optimizer.kahan_comp.%s", p->name);
    t[k] = (ampc_st_tensor){.name = names[k],
                            .dtype = P->wdt,
                            .ndim = p->ndim,
                            .data = (const char *)P->comp + (size_t)p->offset * wsz,
                            .nbytes = (size_t)p->numel * wsz};
    memcpy(t[k].shape, p->shape, sizeof p->shape);
  }
  for (int i = 0; i < nxt; i++, k++)
    t[k] = xt[i];
  char step[32], iter[32], scaler[640], rng[80];
  snprintf(step, sizeof step, "%" PRId64, T->step);
  snprintf(iter, sizeof iter, "%" PRId64, T->iteration);
  const ampc_scaler *sc = &T->scaler;
  int sn = snprintf(scaler, sizeof scaler,
                    "{\"scale\":%.9g,\"growth_tracker\":%d,\"hysteresis_left\":%d,"
                    "\"overflow_count\":%" PRId64 ",\"skip_count\":%" PRId64,
                    (double)sc->scale, sc->growth_tracker, sc->hysteresis_left, sc->overflow_count,
                    sc->skip_count);
  /* each branch's state, in ampc_branch order, or each loss term's */
  const char *slot = sc->cfg.mode == AMPC_LOSS_SCALE_PER_BRANCH ? "branch"
                     : sc->cfg.mode == AMPC_LOSS_SCALE_PER_LOSS ? "term"
                                                                : NULL;
  if (slot)
    sn += snprintf(scaler + sn, sizeof scaler - (size_t)sn,
                   ",\"%s_scales\":[%.9g,%.9g,%.9g,%.9g],\"%s_growth_tracker\":[%d,%d,%d,%d],"
                   "\"%s_hysteresis_left\":[%d,%d,%d,%d],\"%s_picks\":%" PRId64,
                   slot, (double)sc->branch_scale[0], (double)sc->branch_scale[1],
                   (double)sc->branch_scale[2], (double)sc->branch_scale[3], slot,
                   sc->branch_tracker[0], sc->branch_tracker[1], sc->branch_tracker[2],
                   sc->branch_tracker[3], slot, sc->branch_hysteresis[0], sc->branch_hysteresis[1],
                   sc->branch_hysteresis[2], sc->branch_hysteresis[3], slot, sc->branch_picks);
  snprintf(scaler + sn, sizeof scaler - (size_t)sn, "}");
  snprintf(rng, sizeof rng, "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64, T->rng.s[0],
           T->rng.s[1], T->rng.s[2], T->rng.s[3]);
  int nm = 0;
  meta[nm++] = (ampc_st_meta){"format", "pt"};
  meta[nm++] = (ampc_st_meta){"ampc.version", AMPC_VERSION_STRING};
  meta[nm++] = (ampc_st_meta){"ampc.config", cfg};
  meta[nm++] = (ampc_st_meta){"ampc.step", step};
  meta[nm++] = (ampc_st_meta){"ampc.iteration", iter};
  meta[nm++] = (ampc_st_meta){"ampc.scaler", scaler};
  ampc_st_meta rngm = {"ampc.rng", rng};
  ampc_st_meta *all = realloc(meta, ((size_t)nm + 1 + (size_t)nextra) * sizeof *meta);
  if (!all) {
    free(t), free(names), free(wide), free(meta), free(cfg);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory while saving", path);
  }
  meta = all;
  meta[nm++] = rngm;
  for (int i = 0; i < nextra; i++)
    meta[nm++] = extra[i];
  const ampc_status st = ampc_safetensors_write(path, t, nt, meta, nm);
  free(t), free(names), free(wide), free(meta), free(cfg);
  return st;
}

/* Parse a decimal int64 metadata value. */
static int parse_i64(const char *s, int64_t *out) {
  if (!s || !*s)
    return 0;
  char *end = NULL;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (*end || errno || v < 0)
    return 0;
  *out = v;
  return 1;
}

/* Copy a tensor of the checkpoint into dst (dtype dt) with shape checks. */
static ampc_status load_tensor(const char *path, const ampc_safetensors *f, const char *name,
                               const ampc_param *p, void *dst, ampc_dtype dt) {
  const ampc_st_tensor *t = ampc_safetensors_find(f, name);
  if (!t)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
  int same = t->ndim == p->ndim;
  for (int d = 0; same && d < p->ndim; d++)
    same = t->shape[d] == p->shape[d];
  if (!same) {
    char have[160], want[160];
    ampc_st_format_shape(have, sizeof have, t->shape, t->ndim);
    ampc_st_format_shape(want, sizeof want, p->shape, p->ndim);
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: tensor '%s' has shape %s, the model's is %s (a checkpoint of "
                     "another model or configuration?)",
                     path, name, have, want);
  }
  if (t->dtype != AMPC_F32 && t->dtype != AMPC_F16 && t->dtype != AMPC_BF16)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s' has dtype %s (expected F32, F16 or BF16)",
                     path, name, ampc_dtype_name(t->dtype));
  for (int64_t e = 0; e < p->numel; e++) {
    float v;
    if (t->dtype == AMPC_F32)
      memcpy(&v, (const char *)t->data + e * 4, 4); /* the file need not be aligned */
    else
      v = ampc_elem_load(t->data, t->dtype, e);
    ampc_elem_store(dst, dt, e, v);
  }
  return AMPC_OK;
}

/* FP32 weights w [P->total] into P: the master and the working copy rounded
 * from it, or (no master) the working weights rounded once */
static void commit_weights(ampc_params *P, const float *w) {
  if (P->master) {
    memcpy(P->master, w, (size_t)P->total * sizeof *w);
    ampc_params_sync_working(P);
  } else {
    ampc_store_f32(P->w, P->wdt, w, (size_t)P->total, NULL);
  }
}

ampc_status ampc_trainer_load(ampc_trainer *T, const char *path) {
  if (!T || !path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_load: bad arguments");
  ampc_safetensors *f = NULL;
  ampc_status st = ampc_safetensors_read(path, &f);
  if (st != AMPC_OK)
    return st;
  ampc_params *P = &T->params;
  const int nmom = ampc_optim_moments(&T->opt);
  const size_t ssz = ampc_dtype_size(P->sdt);
  /* stage everything; commit only when all of it is valid */
  float *master = calloc((size_t)P->total, sizeof *master);
  char *mom[2] = {NULL, NULL};
  for (int w = 0; w < nmom; w++)
    mom[w] = calloc((size_t)P->total, ssz);
  /* the Kahan compensation: loaded when the checkpoint has it (a run that
   * switches to --weight-update kahan starts from zeros) */
  const size_t wsz = ampc_dtype_size(P->wdt);
  char *comp = P->comp ? calloc((size_t)P->total, wsz) : NULL;
  int64_t step = 0, iter = 0;
  ampc_scaler sc = T->scaler;
  ampc_rng rng = T->rng;
  cJSON *sj = NULL;
  if (!master || (nmom >= 1 && !mom[0]) || (nmom >= 2 && !mom[1]) || (P->comp && !comp)) {
    st = ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory while loading", path);
    goto done;
  }
  for (int i = 0; i < P->count && st == AMPC_OK; i++)
    st = load_tensor(path, f, P->p[i].name, &P->p[i], master + P->p[i].offset, AMPC_F32);
  for (int w = 0; w < nmom && st == AMPC_OK; w++) {
    for (int i = 0; i < P->count && st == AMPC_OK; i++) {
      char name[NAME_CAP];
      snprintf(name, sizeof name, "%s%s", moment_prefix(&T->opt, w), P->p[i].name);
      st = load_tensor(path, f, name, &P->p[i], mom[w] + (size_t)P->p[i].offset * ssz, P->sdt);
    }
  }
  /* all or nothing: a checkpoint without any compensation (another
   * --weight-update) starts from zeros; one with some must hold all, finite */
  bool any_comp = false;
  for (int i = 0; i < ampc_safetensors_count(f); i++)
    any_comp = any_comp || !strncmp(ampc_safetensors_tensor(f, i)->name, "optimizer.kahan_comp.",
                                    strlen("optimizer.kahan_comp."));
  for (int i = 0; comp && any_comp && i < P->count && st == AMPC_OK; i++) {
    char name[NAME_CAP];
    snprintf(name, sizeof name, "optimizer.kahan_comp.%s", P->p[i].name);
    char *dst = comp + (size_t)P->p[i].offset * wsz;
    st = load_tensor(path, f, name, &P->p[i], dst, P->wdt);
    for (int64_t e = 0; st == AMPC_OK && e < P->p[i].numel; e++)
      if (!isfinite(ampc_elem_load(dst, P->wdt, e)))
        st = ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s' holds a non-finite compensation", path,
                       name);
  }
  if (st != AMPC_OK)
    goto done;
  if (!parse_i64(ampc_safetensors_meta(f, "ampc.step"), &step) ||
      !parse_i64(ampc_safetensors_meta(f, "ampc.iteration"), &iter) || iter < step) {
    st = ampc_fail(AMPC_ERR_FORMAT,
                   "%s: missing or bad ampc.step / ampc.iteration metadata "
                   "(not an ampc checkpoint?)",
                   path);
    goto done;
  }
  const char *s = ampc_safetensors_meta(f, "ampc.scaler");
  sj = s ? cJSON_Parse(s) : NULL;
  const cJSON *js = cJSON_GetObjectItemCaseSensitive(sj, "scale");
  const cJSON *jt = cJSON_GetObjectItemCaseSensitive(sj, "growth_tracker");
  const cJSON *jh = cJSON_GetObjectItemCaseSensitive(sj, "hysteresis_left");
  const cJSON *jo = cJSON_GetObjectItemCaseSensitive(sj, "overflow_count");
  const cJSON *jk = cJSON_GetObjectItemCaseSensitive(sj, "skip_count");
  const double kmax_count = 9007199254740992.0; /* 2^53: exact in a JSON double */
  if (!cJSON_IsNumber(js) || !cJSON_IsNumber(jt) || !cJSON_IsNumber(jh) || !cJSON_IsNumber(jo) ||
      !cJSON_IsNumber(jk) || !(js->valuedouble > 0.0) || !(js->valuedouble <= (double)FLT_MAX) ||
      (float)js->valuedouble == 0.0f || !(jt->valuedouble >= 0 && jt->valuedouble <= INT_MAX) ||
      !(jh->valuedouble >= 0 && jh->valuedouble <= INT_MAX) ||
      !(jo->valuedouble >= 0 && jo->valuedouble <= kmax_count) ||
      !(jk->valuedouble >= 0 && jk->valuedouble <= kmax_count)) {
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: missing or out-of-range ampc.scaler metadata", path);
    goto done;
  }
  /* the dynamic scaler's state carries over only into a dynamic scaler; a run
   * resumed with another loss-scale mode (none, a static S, another preset)
   * starts its scaler from its own configuration (between dynamic,
   * per-branch and per-loss the scale itself carries over: below) */
  const char *cfg = ampc_safetensors_meta(f, "ampc.config");
  cJSON *cj = cfg ? cJSON_Parse(cfg) : NULL;
  const cJSON *mode =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cj, "loss_scale"), "mode");
  const bool was_dynamic = cJSON_IsString(mode) && strcmp(mode->valuestring, "dynamic") == 0;
  const bool was_per_branch = cJSON_IsString(mode) && strcmp(mode->valuestring, "per-branch") == 0;
  const bool was_per_loss = cJSON_IsString(mode) && strcmp(mode->valuestring, "per-loss") == 0;
  cJSON_Delete(cj);
  const bool pb = was_per_branch && T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_BRANCH;
  const bool pl = was_per_loss && T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_LOSS;
  if (pb || pl) {
    /* every branch's (or loss term's) scale, tracker and credit, all or nothing */
    const char *slot = pb ? "branch" : "term";
    char key[4][40];
    snprintf(key[0], sizeof key[0], "%s_scales", slot);
    snprintf(key[1], sizeof key[1], "%s_growth_tracker", slot);
    snprintf(key[2], sizeof key[2], "%s_hysteresis_left", slot);
    snprintf(key[3], sizeof key[3], "%s_picks", slot);
    const cJSON *a[3] = {cJSON_GetObjectItemCaseSensitive(sj, key[0]),
                         cJSON_GetObjectItemCaseSensitive(sj, key[1]),
                         cJSON_GetObjectItemCaseSensitive(sj, key[2])};
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(sj, key[3]);
    bool ok = cJSON_IsNumber(jp) && jp->valuedouble >= 0 && jp->valuedouble <= kmax_count;
    for (int k = 0; k < 3; k++)
      ok = ok && cJSON_IsArray(a[k]) && cJSON_GetArraySize(a[k]) == AMPC_BRANCH_COUNT;
    for (int b = 0; ok && b < AMPC_BRANCH_COUNT; b++) {
      const cJSON *v0 = cJSON_GetArrayItem(a[0], b), *v1 = cJSON_GetArrayItem(a[1], b),
                  *v2 = cJSON_GetArrayItem(a[2], b);
      int e = 0;
      ok = cJSON_IsNumber(v0) && cJSON_IsNumber(v1) && cJSON_IsNumber(v2) &&
           v0->valuedouble > 0.0 && v0->valuedouble <= (double)FLT_MAX &&
           (pl || frexpf((float)v0->valuedouble, &e) == 0.5f) && v1->valuedouble >= 0 &&
           v1->valuedouble == floor(v1->valuedouble) && v2->valuedouble == floor(v2->valuedouble) &&
           v1->valuedouble <= INT_MAX && v2->valuedouble >= 0 && v2->valuedouble <= INT_MAX;
      if (ok) {
        float S = (float)v0->valuedouble;
        S = S < sc.cfg.min_scale ? sc.cfg.min_scale : S > sc.cfg.max_scale ? sc.cfg.max_scale : S;
        sc.branch_scale[b] = S;
        sc.branch_tracker[b] = (int)v1->valuedouble;
        const int hmax = sc.cfg.hysteresis > 0 ? sc.cfg.hysteresis : 1;
        const int h = (int)v2->valuedouble;
        sc.branch_hysteresis[b] = h < 1 ? 1 : h > hmax ? hmax : h;
      }
    }
    if (!ok) {
      st = ampc_fail(AMPC_ERR_FORMAT,
                     "%s: ampc.scaler of a per-%s run lacks valid %s_scales (%s), "
                     "%s_growth_tracker, %s_hysteresis_left or %s_picks",
                     path, pb ? "branch" : "loss", slot, pb ? "powers of two" : "positive, finite",
                     slot, slot, slot);
      goto done;
    }
    sc.branch_picks = (int64_t)jp->valuedouble;
    const int lead = pb ? AMPC_BRANCH_HEADS : 0;
    sc.scale = sc.branch_scale[lead];
    sc.growth_tracker = sc.branch_tracker[lead];
    sc.hysteresis_left = sc.branch_hysteresis[lead];
  }
  if (was_dynamic && T->amp.scaler.mode == AMPC_LOSS_SCALE_DYNAMIC) {
    sc.scale = (float)js->valuedouble; /* written with %.9g: reads back exactly */
    if (sc.scale < sc.cfg.min_scale)
      sc.scale = sc.cfg.min_scale;
    if (sc.scale > sc.cfg.max_scale)
      sc.scale = sc.cfg.max_scale;
    sc.growth_tracker = (int)jt->valuedouble;
    sc.hysteresis_left = (int)jh->valuedouble;
  }
  {
    /* between the dynamic modes (dynamic, per-branch, per-loss) the scale
     * carries over: a per-branch or per-loss checkpoint gives its smallest
     * scale (no branch or term overflows at it), a dynamic one its scale to
     * every branch or term; the trackers start again */
    const ampc_loss_scale_mode now = T->amp.scaler.mode;
    const bool now_slots = now == AMPC_LOSS_SCALE_PER_BRANCH || now == AMPC_LOSS_SCALE_PER_LOSS;
    double carry = -1.0;
    if (was_dynamic && now_slots) {
      carry = js->valuedouble;
    } else if ((was_per_branch || was_per_loss) && !pb && !pl &&
               (now == AMPC_LOSS_SCALE_DYNAMIC || now_slots)) {
      const cJSON *arr =
          cJSON_GetObjectItemCaseSensitive(sj, was_per_branch ? "branch_scales" : "term_scales");
      for (int b = 0; cJSON_IsArray(arr) && b < cJSON_GetArraySize(arr); b++) {
        const cJSON *x = cJSON_GetArrayItem(arr, b);
        if (cJSON_IsNumber(x) && x->valuedouble > 0.0 && x->valuedouble <= (double)FLT_MAX &&
            (carry < 0.0 || x->valuedouble < carry))
          carry = x->valuedouble;
      }
    }
    int e = 0;
    float S = carry > 0.0 ? (float)carry : 0.0f;
    if (S > 0.0f) {
      S = S < sc.cfg.min_scale ? sc.cfg.min_scale : S > sc.cfg.max_scale ? sc.cfg.max_scale : S;
      if (now == AMPC_LOSS_SCALE_PER_BRANCH && frexpf(S, &e) != 0.5f)
        S = 0.0f; /* per-branch keeps powers of two: start from its own init */
    }
    if (S > 0.0f && now == AMPC_LOSS_SCALE_DYNAMIC) {
      sc.scale = S;
      sc.growth_tracker = 0;
    } else if (S > 0.0f && now_slots) {
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        sc.branch_scale[b] = S, sc.branch_tracker[b] = 0;
      sc.scale = S, sc.growth_tracker = 0;
    }
  }
  sc.overflow_count = (int64_t)jo->valuedouble;
  sc.skip_count = (int64_t)jk->valuedouble;
  const char *r = ampc_safetensors_meta(f, "ampc.rng");
  unsigned long long w4[4];
  if (!r || sscanf(r, "%llx %llx %llx %llx", &w4[0], &w4[1], &w4[2], &w4[3]) != 4) {
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: missing or bad ampc.rng metadata", path);
    goto done;
  }
  for (int i = 0; i < 4; i++)
    rng.s[i] = (uint64_t)w4[i];
  /* commit */
  commit_weights(P, master);
  if (nmom >= 1)
    memcpy(P->m, mom[0], (size_t)P->total * ssz);
  if (nmom >= 2)
    memcpy(P->v, mom[1], (size_t)P->total * ssz);
  if (comp)
    memcpy(P->comp, comp, (size_t)P->total * wsz);
  T->step = step;
  T->iteration = iter;
  T->scaler = sc;
  T->rng = rng;
  st = ampc_trainer_sync_device(T); /* on a device: the loaded values there too */
done:
  cJSON_Delete(sj);
  free(master);
  free(mom[0]);
  free(mom[1]);
  free(comp);
  ampc_safetensors_free(f);
  return st;
}

ampc_status ampc_params_load(ampc_params *P, const char *path) {
  if (!P || !path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_params_load: bad arguments");
  ampc_safetensors *f = NULL;
  ampc_status st = ampc_safetensors_read(path, &f);
  if (st != AMPC_OK)
    return st;
  /* stage the weights in FP32; commit only when all of them are valid */
  float *w = calloc((size_t)P->total > 0 ? (size_t)P->total : 1, sizeof *w);
  if (!w)
    st = ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory while loading", path);
  for (int i = 0; i < P->count && st == AMPC_OK; i++)
    st = load_tensor(path, f, P->p[i].name, &P->p[i], w + P->p[i].offset, AMPC_F32);
  if (st == AMPC_OK) {
    commit_weights(P, w);
  }
  free(w);
  ampc_safetensors_free(f);
  return st;
}

/* ---- the FP8 scaling state (fp8-mixed) ------------------------------------- */

ampc_status ampc_fp8_state_tensors(const ampc_fp8_sites *S, ampc_fp8_state_storage *st,
                                   ampc_st_tensor **out, int *n) {
  if (!S || !st || !out || !n)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fp8_state_tensors: NULL argument");
  memset(st, 0, sizeof *st);
  *out = NULL, *n = 0;
  if (S->n < 1)
    return AMPC_OK;
  st->t = calloc((size_t)S->n * 2, sizeof *st->t);
  st->names = calloc((size_t)S->n * 2, sizeof *st->names);
  st->scales = calloc((size_t)S->n * 3, sizeof *st->scales);
  if (!st->t || !st->names || !st->scales) {
    ampc_fp8_state_storage_free(st);
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory for the FP8 state");
  }
  for (int i = 0; i < S->n; i++) {
    for (int q = 0; q < 3; q++)
      st->scales[3 * i + q] = S->meta[3 * i + q].scale;
    snprintf(st->names[2 * i], sizeof st->names[0], "fp8.%s.amax_history", S->name[i]);
    snprintf(st->names[2 * i + 1], sizeof st->names[0], "fp8.%s.scale", S->name[i]);
    st->t[2 * i] = (ampc_st_tensor){.name = st->names[2 * i],
                                    .dtype = AMPC_F32,
                                    .ndim = 2,
                                    .shape = {3, S->len},
                                    .data = S->history + (size_t)(3 * i) * (size_t)S->len,
                                    .nbytes = (size_t)3 * (size_t)S->len * 4};
    st->t[2 * i + 1] = (ampc_st_tensor){.name = st->names[2 * i + 1],
                                        .dtype = AMPC_F32,
                                        .ndim = 1,
                                        .shape = {3},
                                        .data = st->scales + 3 * i,
                                        .nbytes = 12};
  }
  *out = st->t, *n = 2 * S->n;
  return AMPC_OK;
}

void ampc_fp8_state_storage_free(ampc_fp8_state_storage *st) {
  if (!st)
    return;
  free(st->t);
  free(st->names);
  free(st->scales);
  memset(st, 0, sizeof *st);
}

/* true when name is "fp8.<site>.amax_history" or "fp8.<site>.scale" of a site of S */
static bool fp8_known(const ampc_fp8_sites *S, const char *name) {
  for (int i = 0; i < S->n; i++) {
    const size_t l = strlen(S->name[i]);
    if (!strncmp(name + 4, S->name[i], l) &&
        (!strcmp(name + 4 + l, ".amax_history") || !strcmp(name + 4 + l, ".scale")))
      return true;
  }
  return false;
}

ampc_status ampc_fp8_state_load(ampc_fp8_sites *S, const char *path, bool *found) {
  if (!S || !path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fp8_state_load: bad arguments");
  if (found)
    *found = false;
  if (S->n < 1)
    return AMPC_OK;
  ampc_safetensors *f = NULL;
  ampc_status st = ampc_safetensors_read(path, &f);
  if (st != AMPC_OK)
    return st;
  /* all or nothing: a checkpoint of another preset has no fp8.* tensor (the
   * scales start fresh); one of fp8-mixed must hold every site, and nothing
   * it does not know */
  int nfp8 = 0;
  for (int i = 0; i < ampc_safetensors_count(f) && st == AMPC_OK; i++) {
    const char *nm = ampc_safetensors_tensor(f, i)->name;
    if (strncmp(nm, "fp8.", 4) != 0)
      continue;
    nfp8++;
    if (!fp8_known(S, nm))
      st = ampc_fail(AMPC_ERR_FORMAT,
                     "%s: tensor '%s' is not the FP8 state of a linear layer of this model", path,
                     nm);
  }
  const char *cfg = ampc_safetensors_meta(f, "ampc.config");
  if (st == AMPC_OK && nfp8 == 0 && cfg && strstr(cfg, "\"precision\":\"fp8-mixed\""))
    st = ampc_fail(AMPC_ERR_FORMAT,
                   "%s: an fp8-mixed checkpoint without its FP8 scaling state (fp8.* tensors)",
                   path);
  if (st != AMPC_OK || nfp8 == 0) {
    ampc_safetensors_free(f);
    return st;
  }
  char name[AMPC_FP8_SITE_NAME + 32];
  /* validate every tensor first, then commit */
  const size_t hl = (size_t)3 * (size_t)S->len;
  for (int i = 0; i < S->n && st == AMPC_OK; i++) {
    snprintf(name, sizeof name, "fp8.%s.amax_history", S->name[i]);
    const ampc_st_tensor *h = ampc_safetensors_find(f, name);
    snprintf(name, sizeof name, "fp8.%s.scale", S->name[i]);
    const ampc_st_tensor *sc = ampc_safetensors_find(f, name);
    if (!h || !sc || h->dtype != AMPC_F32 || sc->dtype != AMPC_F32 || h->ndim != 2 ||
        h->shape[0] != 3 || sc->ndim != 1 || sc->shape[0] != 3) {
      st = ampc_fail(AMPC_ERR_FORMAT,
                     "%s: the FP8 state of '%s' is missing or malformed (F32 [3, history] and [3])",
                     path, S->name[i]);
      break;
    }
    if (h->shape[1] != S->len) {
      st = ampc_fail(AMPC_ERR_FORMAT,
                     "%s: '%s' has an amax history of %lld steps, this run's is %d "
                     "(--fp8-amax-history)",
                     path, S->name[i], (long long)h->shape[1], S->len);
      break;
    }
    /* an amax is >= 0 and never NaN (NaN is not recorded); inf is (a cast of
     * an overflowed tensor) */
    for (size_t e = 0; e < hl && st == AMPC_OK; e++) {
      float v;
      memcpy(&v, (const char *)h->data + 4 * e, 4);
      if (!(v >= 0.0f))
        st = ampc_fail(AMPC_ERR_FORMAT, "%s: amax history of '%s' holds %g (an amax is >= 0)", path,
                       S->name[i], (double)v);
    }
    for (int q = 0; st == AMPC_OK && q < 3; q++) {
      float v;
      memcpy(&v, (const char *)sc->data + 4 * q, 4);
      if (!(v > 0.0f) || !(v <= FLT_MAX) || !(1.0f / v <= FLT_MAX))
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "%s: FP8 scale %g of '%s' is not a positive finite number with a finite "
                       "inverse",
                       path, (double)v, S->name[i]);
    }
  }
  for (int i = 0; i < S->n && st == AMPC_OK; i++) {
    snprintf(name, sizeof name, "fp8.%s.amax_history", S->name[i]);
    memcpy(S->history + (size_t)(3 * i) * (size_t)S->len, ampc_safetensors_find(f, name)->data,
           hl * 4);
    snprintf(name, sizeof name, "fp8.%s.scale", S->name[i]);
    const char *sd = ampc_safetensors_find(f, name)->data;
    ampc_fp8_q *qs[3] = {&S->lin[i].x, &S->lin[i].w, &S->lin[i].dy};
    for (int q = 0; q < 3; q++) {
      float v;
      memcpy(&v, sd + 4 * q, 4);
      ampc_fp8_meta *m = &S->meta[3 * i + q];
      m->scale = v;
      m->scale_inv = 1.0f / v; /* as ampc_fp8_update */
      qs[q]->scale = m->scale, qs[q]->scale_inv = m->scale_inv;
      qs[q]->amax = 0.0f;
    }
  }
  if (st == AMPC_OK && found)
    *found = true;
  ampc_safetensors_free(f);
  return st;
}

/* ---- a run's resume: does the checkpoint fit the run? --------------------------------- */

/* The model's config in the checkpoint: whether it trained the MLM head and
 * its attention cast (absent: a checkpoint from before it was recorded). */
typedef struct resume_model_facts {
  double w_mlm;
  bool has_cast, was_cast, bad_cast;
} resume_model_facts;

static resume_model_facts read_model_facts(const ampc_safetensors *f, bool multimodal) {
  resume_model_facts r = {0.0, false, false, false};
  const char *mcs = multimodal ? ampc_safetensors_meta(f, "ampc.model_config") : NULL;
  cJSON *mroot = mcs ? cJSON_Parse(mcs) : NULL;
  const cJSON *mcj = mroot ? cJSON_GetObjectItemCaseSensitive(mroot, "w_mlm") : NULL;
  r.w_mlm = cJSON_IsNumber(mcj) ? mcj->valuedouble : 0.0;
  const cJSON *acj = cJSON_GetObjectItemCaseSensitive(mroot, "attention_cast");
  r.has_cast = acj != NULL, r.was_cast = cJSON_IsTrue(acj), r.bad_cast = acj && !cJSON_IsBool(acj);
  cJSON_Delete(mroot);
  return r;
}

static ampc_status resume_check_file(ampc_run *R, const ampc_safetensors *f) {
  const ampc_run_config *rc = &R->rc;
  const ampc_model_desc *md = &R->md;
  const bool mm = md->kind == AMPC_MODEL_MM;
  /* a checkpoint of another model says so, not "tensor missing" */
  const char *was = ampc_safetensors_meta(f, "ampc.model");
  const char *now = R->kind->name(md);
  if (was && strcmp(was, now) != 0)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "cannot resume: %s is a checkpoint of model %s, this run's model is %s",
                     rc->resume_path, was, now);
  /* Adam's moments are in units of the multiplied gradients: the
   * multiplier must stay what it was (absent: 1) */
  const char *lm = ampc_safetensors_meta(f, "ampc.loss_multiplier");
  const float was_lm = lm ? (float)strtod(lm, NULL) : 1.0f;
  if (was_lm != R->accum.loss_multiplier)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "cannot resume: %s was trained with --loss-multiplier %g, this run has "
                     "%g (the optimizer state is in units of the multiplied gradients)",
                     rc->resume_path, (double)was_lm, (double)R->accum.loss_multiplier);
  /* the loss terms' heads: a checkpoint with the MLM head resumed without
   * the term (or the reverse) would drop or invent a trained tensor */
  const resume_model_facts mf = read_model_facts(f, mm);
  if (mf.bad_cast)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "cannot resume: %s: bad attention_cast in ampc.model_config (not true or "
                     "false)",
                     rc->resume_path);
  if (mm && !md->mm.image_only && (mf.w_mlm > 0.0) != (md->mm.w_mlm > 0.0f))
    return ampc_fail(AMPC_ERR_FORMAT,
                     "cannot resume: %s was trained %s masked caption modelling (--w-mlm %g; "
                     "its head heads.mlm), this run has --w-mlm %g",
                     rc->resume_path, mf.w_mlm > 0.0 ? "with" : "without", mf.w_mlm,
                     (double)md->mm.w_mlm);
  /* --attention-cast may change on resume (as --precision may: the
   * weights and optimizer state mean the same), but the forward pass's
   * rounding changes with it: say so */
  const bool now_cast = run_attn_cast(R);
  if (mm && mf.has_cast && mf.was_cast != now_cast)
    snprintf(R->notes[R->n_notes++], sizeof R->notes[0],
             "%s was trained with the attention cast %s, this run has it %s%s: attention "
             "products round differently from here on",
             rc->resume_path, mf.was_cast ? "on" : "off", now_cast ? "on" : "off",
             md->mm.attn_cast && !now_cast ? " (under 32-true)" : "");
  /* the preset may change at a resume (the FP32 master and moments mean
   * the same), but a run that only left --precision out switches to the
   * default: say so */
  const char *cfg = ampc_safetensors_meta(f, "ampc.config");
  cJSON *cj = cfg ? cJSON_Parse(cfg) : NULL;
  const cJSON *pj = cj ? cJSON_GetObjectItemCaseSensitive(cj, "precision") : NULL;
  const char *now_p = ampc_precision_name(R->T.amp.precision);
  if (cJSON_IsString(pj) && strcmp(pj->valuestring, now_p) != 0 && R->n_notes < 3)
    snprintf(R->notes[R->n_notes++], sizeof R->notes[0],
             "%s was trained in %.24s, this run is %s from here on (give --precision %.24s to "
             "keep it)",
             rc->resume_path, pj->valuestring, now_p, pj->valuestring);
  cJSON_Delete(cj);
  /* fake quantization may be turned on at a resume (quantization-aware
   * fine-tuning of a trained checkpoint: the banner says so) or off: that
   * one is said here */
  const char *fq = ampc_safetensors_meta(f, "ampc.fake_quant");
  if (fq && !strcmp(fq, "int8") && !rc->fake_quant_int8 && R->n_notes < 3)
    snprintf(R->notes[R->n_notes++], sizeof R->notes[0],
             "%s was trained with --fake-quant int8, this run has none: the blocks' linear "
             "layers run unquantized from here on",
             rc->resume_path);
  /* the data recipe (held-out style, shifts, negatives) must stay what
   * it was: a resume would otherwise train on another split or sampler
   * (absent: a checkpoint from before it was recorded, not checked) */
  /* the batch (absent: a checkpoint from before it was recorded) */
  const char *bs = ampc_safetensors_meta(f, "ampc.batch");
  if (bs && strtoll(bs, NULL, 10) != rc->batch)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "cannot resume: %s was trained with --batch %s, this run has --batch %lld "
                     "(the samples of each step would differ from the uninterrupted run's; give "
                     "the same --batch)",
                     rc->resume_path, bs, (long long)rc->batch);
  const char *rec = ampc_safetensors_meta(f, "ampc.data_recipe");
  if (rec && R->recipe[0] && strcmp(rec, R->recipe) != 0)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "cannot resume: %s was trained with %s, this run has %s (give the same "
                     "--hold-out-style, --augment-shift and --itm-negatives%s)",
                     rc->resume_path, rec, R->recipe,
                     strstr(rec, ";pack=") || R->data.stream
                         ? "; pack= names the packed data and its readable shards: the same "
                           "--data, with the same shards"
                         : "");
  return AMPC_OK;
}

ampc_status run_resume_check(ampc_run *R) {
  ampc_safetensors *f = NULL;
  if (!R->rc.resume_path || ampc_safetensors_read(R->rc.resume_path, &f) != AMPC_OK)
    return AMPC_OK; /* a file that does not read: the trainer's load says why */
  const ampc_status st = resume_check_file(R, f);
  ampc_safetensors_free(f);
  return st;
}

/* the checkpoint's metadata naming the model (ampc_model_desc_from_checkpoint reads it) */
ampc_status run_save(ampc_run *R) {
  ampc_model_meta_storage ms;
  ampc_st_meta meta[9];
  ampc_model_desc md = R->md; /* the attention cast as in effect */
  md.mm.attn_cast = run_attn_cast(R);
  int n = ampc_model_checkpoint_meta(&md, R->data.name, &ms, meta);
  if (R->recipe[0]) { /* checked on resume; ampc eval reads the held-out style */
    meta[n++] = (ampc_st_meta){"ampc.data_recipe", R->recipe};
    meta[n++] = (ampc_st_meta){"ampc.held_out_style", R->held_out};
  }
  char bs[32]; /* checked on resume: another batch draws other samples at each position */
  snprintf(bs, sizeof bs, "%lld", (long long)R->rc.batch);
  meta[n++] = (ampc_st_meta){"ampc.batch", bs};
  if (R->rc.fake_quant_int8) /* a reader of the checkpoint knows how it was trained */
    meta[n++] = (ampc_st_meta){"ampc.fake_quant", "int8"};
  char lm[32];
  if (R->accum.loss_multiplier != 1.0f) { /* checked on resume */
    snprintf(lm, sizeof lm, "%.9g", (double)R->accum.loss_multiplier);
    meta[n++] = (ampc_st_meta){"ampc.loss_multiplier", lm};
  }
  ampc_fp8_state_storage fs = {0};
  ampc_st_tensor *xt = NULL;
  int nxt = 0;
  if (R->model.fp8)
    AMPC_TRY(ampc_fp8_state_tensors(R->model.fp8, &fs, &xt, &nxt));
  /* ZeRO-1: the whole state gathered on rank 0, which writes the file that
   * one process would (every rank calls this) */
  ampc_trainer view;
  ampc_status st = ampc_trainer_gather_view(&R->T, 0, &view);
  if (st == AMPC_OK && R->rank == 0)
    st = ampc_trainer_save_ex(&view, R->rc.save_path, meta, n, xt, nxt);
  ampc_trainer_view_free(&R->T, &view); /* idempotent; nothing without shards */
  ampc_fp8_state_storage_free(&fs);
  AMPC_TRY(st);
  R->saved = R->rank == 0;
  return AMPC_OK;
}
