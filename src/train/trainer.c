/*
 * src/train/trainer.c: the training engine's step (the scaler's finish:
 * unscale, non-finite check, scale update; then clip and the optimizer, or
 * the skip), its resolved-configuration record and the configuration lint. See
 * include/ampc/engine.h for the contract.
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/engine.h"
#include "ampc/train.h"
#include "backend/backend.h"
#include "numeric/numeric.h"

ampc_status ampc_trainer_init(ampc_trainer *T, const ampc_amp_config *amp,
                              const ampc_optim_config *opt, const ampc_param_spec *specs, int n,
                              uint64_t seed) {
  if (!T || !amp || !opt)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_init: NULL argument");
  memset(T, 0, sizeof *T);
  ampc_status st = ampc_amp_config_check(amp);
  if (st != AMPC_OK)
    return st;
  if ((st = ampc_optim_config_check(opt)) != AMPC_OK)
    return st;
  T->amp = *amp;
  T->opt = *opt;
  /* the weights' stochastic rounding: its bits depend on the run's seed, the
   * step and the element only (a resumed run draws the same ones) */
  T->opt.stochastic_round = amp->weight_update == AMPC_UPDATE_STOCHASTIC;
  T->opt.round_seed = seed ^ 0x5352u; /* "SR": apart from the init's stream */
  T->opt.kahan = amp->weight_update == AMPC_UPDATE_KAHAN;
  ampc_rng_seed(&T->rng, seed);
  st = ampc_params_create(&T->params, specs, n, amp->lowp, amp->master_weights, amp->state_dtype,
                          ampc_optim_moments(opt), &T->rng);
  if (st == AMPC_OK && T->opt.kahan)
    st = ampc_params_add_compensation(&T->params);
  if (st != AMPC_OK) {
    ampc_params_free(&T->params);
    memset(T, 0, sizeof *T);
    return st;
  }
  T->swallow = calloc((size_t)n, sizeof *T->swallow);
  T->unscale_ws.bytes = ampc_grad_unscale_scratch_bytes(T->params.total);
  T->unscale_ws.base = malloc(T->unscale_ws.bytes);
  if (!T->swallow || !T->unscale_ws.base) {
    free(T->swallow);
    free(T->unscale_ws.base);
    ampc_params_free(&T->params);
    memset(T, 0, sizeof *T);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_trainer_init: out of memory");
  }
  ampc_scaler_init(&T->scaler, &amp->scaler);
  ampc_scale_plan_init(&T->plan);
  T->telemetry = true;
  return AMPC_OK;
}

/* the role buffers of a table, in ampc_param_role order */
static void **role_ptr(ampc_params *P, int r) {
  switch (r) {
  case AMPC_ROLE_WEIGHTS: return &P->w;
  case AMPC_ROLE_MASTER: return (void **)&P->master;
  case AMPC_ROLE_GRADS: return &P->grad;
  case AMPC_ROLE_MOMENT1: return &P->m;
  case AMPC_ROLE_MOMENT2: return &P->v;
  default: return &P->comp;
  }
}

static void release_device(ampc_trainer *T) {
  const ampc_backend *be = ampc_device_backend(T->device);
  if (T->device != AMPC_DEVICE_CPU && be)
    for (int r = 0; r < AMPC_ROLE_COUNT; r++)
      be->release(*role_ptr(&T->dparams, r));
  memset(&T->dparams, 0, sizeof T->dparams);
  T->device = AMPC_DEVICE_CPU;
}

ampc_status ampc_trainer_to_device(ampc_trainer *T, ampc_device dev) {
  const ampc_backend *be = ampc_device_backend(dev);
  if (T && !be && ampc_device_desc_get(dev))
    return ampc_device_backend_get(dev, &be); /* a backend not built: say so */
  if (!T || !be || T->device != AMPC_DEVICE_CPU)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_trainer_to_device: bad arguments (device %d, already on %d)", (int)dev,
                     T ? (int)T->device : -1);
  if (dev == AMPC_DEVICE_CPU)
    return AMPC_OK;
  T->dparams = T->params; /* the metadata (p) is shared with the host's table */
  for (int r = 0; r < AMPC_ROLE_COUNT; r++)
    *role_ptr(&T->dparams, r) = NULL;
  T->device = dev;
  for (int r = 0; r < AMPC_ROLE_COUNT; r++) {
    void *h = *role_ptr(&T->params, r);
    if (!h)
      continue;
    void **d = role_ptr(&T->dparams, r);
    ampc_status st = be->alloc(d, T->params.bytes[r]);
    if (st == AMPC_OK)
      st = be->to_device(*d, h, T->params.bytes[r]);
    if (st != AMPC_OK) {
      release_device(T);
      return ampc_fail(st, "the parameters on the %s device: %s", be->name, ampc_last_error());
    }
  }
  return AMPC_OK;
}

/* copy the roles (all but the gradients) one way or the other */
static ampc_status sync_roles(ampc_trainer *T, bool to_host) {
  if (!T)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_sync: NULL trainer");
  if (T->device == AMPC_DEVICE_CPU)
    return AMPC_OK;
  const ampc_backend *be = ampc_device_backend(T->device);
  for (int r = 0; r < AMPC_ROLE_COUNT; r++) {
    void *h = *role_ptr(&T->params, r), *d = *role_ptr(&T->dparams, r);
    if (r == AMPC_ROLE_GRADS || !h || !d)
      continue;
    AMPC_TRY(to_host ? be->to_host(h, d, T->params.bytes[r])
                     : be->to_device(d, h, T->params.bytes[r]));
  }
  return AMPC_OK;
}
ampc_status ampc_trainer_sync_host(ampc_trainer *T) { return sync_roles(T, true); }
ampc_status ampc_trainer_sync_device(ampc_trainer *T) { return sync_roles(T, false); }

ampc_params *ampc_trainer_params(ampc_trainer *T) {
  return T->device != AMPC_DEVICE_CPU ? &T->dparams : &T->params;
}

void ampc_trainer_free(ampc_trainer *T) {
  if (!T)
    return;
  free(T->zero_bounds);
  free(T->zero_parts);
  free(T->zero_counts);
  release_device(T);
  ampc_params_free(&T->params);
  free(T->swallow);
  free(T->unscale_ws.base);
  memset(T, 0, sizeof *T);
}

float ampc_trainer_loss_scale(const ampc_trainer *T) { return T->scaler.scale; }

float ampc_trainer_term_scale(const ampc_trainer *T, int k) {
  return ampc_scaler_term_scale(&T->scaler, k);
}

float ampc_trainer_branch_scale(const ampc_trainer *T, ampc_branch b) {
  return ampc_scaler_branch_scale(&T->scaler, b);
}

void ampc_trainer_zero_grad(ampc_trainer *T) {
  if (T->device == AMPC_DEVICE_CPU) {
    ampc_params_zero_grad(&T->params);
    return;
  }
  const ampc_backend *be = ampc_device_backend(T->device);
  const ampc_status st = be->zero(T->dparams.grad, T->params.bytes[AMPC_ROLE_GRADS]);
  if (st != AMPC_OK && T->device_status == AMPC_OK) /* reported by the next step */
    T->device_status = st;
}

/* ---- ZeRO-1 ------------------------------------------------------------------ */

/* the norm's chunks per shard: rank 0's shard is the largest */
static int64_t zero_chunks_per_rank(const ampc_trainer *T) {
  return (T->zero_bounds[1] - T->zero_bounds[0] + AMPC_SHARD_ALIGN - 1) / AMPC_SHARD_ALIGN;
}

ampc_status ampc_trainer_set_zero(ampc_trainer *T, const ampc_comm *c) {
  if (!T)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_set_zero: T is NULL");
  if (T->zero)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_set_zero: the trainer is sharded already");
  /* refused in one process too, so that a command means the same on any
   * number of ranks */
  if (T->device != AMPC_DEVICE_CPU)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--zero 1 runs on the CPU only for now (a device's shards would need "
                     "NCCL's reduce-scatter and all-gather)");
  const ampc_loss_scale_mode mode = T->amp.scaler.mode;
  if (mode == AMPC_LOSS_SCALE_PER_BRANCH || mode == AMPC_LOSS_SCALE_PER_LOSS)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--zero 1 with --loss-scale %s: one scale for the whole gradient only "
                     "(none, a static scale or dynamic)",
                     ampc_loss_scale_mode_name(mode));
  if (!c || c->size < 2)
    return AMPC_OK;
  if (!c->sum_f32_ordered_scatter || !c->sum_f32_ordered_scatter_from || !c->gather_shards ||
      !c->allgather || !c->sum_u64)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "--zero 1: the communicator has no reduce-scatter or gather");
  const int size = c->size;
  int64_t *b = malloc(((size_t)size + 1) * sizeof *b);
  if (!b)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_trainer_set_zero: out of memory");
  for (int r = 0; r < size; r++) {
    int64_t n = 0;
    ampc_shard_range(T->params.total, size, r, &b[r], &n);
  }
  b[size] = T->params.total;
  T->zero_bounds = b;
  const int64_t per = zero_chunks_per_rank(T);
  /* this rank's parts and bad counts, then every rank's */
  T->zero_parts = malloc((size_t)(per > 0 ? per : 1) * 2 * ((size_t)size + 1) * sizeof(double));
  const int64_t nc = per > 4 * (int64_t)T->params.count ? per : 4 * (int64_t)T->params.count;
  T->zero_counts = malloc((size_t)(nc > 0 ? nc : 1) * sizeof *T->zero_counts);
  ampc_status st = T->zero_parts && T->zero_counts
                       ? AMPC_OK
                       : ampc_fail(AMPC_ERR_NOMEM, "ampc_trainer_set_zero: out of memory");
  if (st == AMPC_OK)
    st = ampc_params_shard(&T->params, b[c->rank], b[c->rank + 1] - b[c->rank]);
  if (st != AMPC_OK) {
    free(T->zero_bounds), free(T->zero_parts), free(T->zero_counts);
    T->zero_bounds = NULL, T->zero_parts = NULL, T->zero_counts = NULL;
    return st;
  }
  T->zero = c;
  return AMPC_OK;
}

/* The check over a shard: this rank's chunk sums and non-finite counts,
 * gathered from every rank and added in chunk order (rank order), as one
 * process adds its chunks (ampc_grad_unscale_parts) */
static ampc_status zero_check(void *user, const void *g, ampc_dtype gdt, int64_t n, float inv,
                              int64_t *nonfinite, double *norm) {
  ampc_trainer *T = user;
  const ampc_comm *c = T->zero;
  const int64_t *b = T->zero_bounds, per = zero_chunks_per_rank(T);
  if (n != b[c->size])
    return ampc_fail(AMPC_ERR_INVALID_ARG, "zero_check: %lld gradients, the shards cover %lld",
                     (long long)n, (long long)b[c->size]);
  double *mine = T->zero_parts, *all = T->zero_parts + 2 * per;
  int64_t *bad = (int64_t *)T->zero_counts; /* allocated at set_zero: no allocation per step */
  const int64_t lo = b[c->rank], len = b[c->rank + 1] - lo;
  const int64_t nch = (len + AMPC_SHARD_ALIGN - 1) / AMPC_SHARD_ALIGN;
  ampc_status st = ampc_grad_unscale_parts((const char *)g + (size_t)lo * ampc_dtype_size(gdt), gdt,
                                           len, inv, mine, bad);
  for (int64_t k = 0; k < 2 * per; k++) /* the counts as doubles: exact below 2^53 */
    if (k >= nch && k < per)
      mine[k] = 0.0;
    else if (k >= per)
      mine[k] = k - per < nch ? (double)bad[k - per] : 0.0;
  if (st == AMPC_OK && per > 0)
    st = c->allgather(c->user, mine, (size_t)(2 * per) * sizeof(double), all);
  if (st != AMPC_OK)
    return st;
  double s = 0.0, nb = 0.0;
  for (int q = 0; q < c->size; q++) {
    const int64_t nq = (b[q + 1] - b[q] + AMPC_SHARD_ALIGN - 1) / AMPC_SHARD_ALIGN;
    for (int64_t k = 0; k < nq; k++)
      s += all[q * 2 * per + k], nb += all[q * 2 * per + per + k];
  }
  *nonfinite = (int64_t)nb;
  *norm = sqrt(s);
  return AMPC_OK;
}

/* after a ZeRO-1 update: every rank's shard of the working weights to every
 * rank, the swallowed-update counts summed */
static ampc_status zero_finish(ampc_trainer *T, bool counts) {
  const ampc_comm *c = T->zero;
  ampc_params *P = &T->params;
  const size_t wsz = ampc_dtype_size(P->wdt);
  AMPC_TRY(c->gather_shards(c->user, (char *)P->w + (size_t)P->shard_lo * wsz, P->w, wsz,
                            T->zero_bounds, -1));
  if (!counts)
    return AMPC_OK;
  _Static_assert(sizeof(ampc_swallow_stats) == 4 * sizeof(int64_t), "four counts");
  uint64_t *u = T->zero_counts;
  for (int i = 0; i < P->count; i++) {
    u[4 * i] = (uint64_t)T->swallow[i].updated, u[4 * i + 1] = (uint64_t)T->swallow[i].swallowed;
    u[4 * i + 2] = (uint64_t)T->swallow[i].would_swallow;
    u[4 * i + 3] = (uint64_t)T->swallow[i].nonfinite;
  }
  const ampc_status st = c->sum_u64(c->user, u, (int64_t)P->count * 4);
  for (int i = 0; st == AMPC_OK && i < P->count; i++)
    T->swallow[i] = (ampc_swallow_stats){(int64_t)u[4 * i], (int64_t)u[4 * i + 1],
                                         (int64_t)u[4 * i + 2], (int64_t)u[4 * i + 3]};
  return st;
}

ampc_status ampc_trainer_gather_view(const ampc_trainer *T, int root, ampc_trainer *view) {
  if (!T || !view)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_gather_view: NULL argument");
  *view = *T;
  if (!T->zero)
    return AMPC_OK;
  const ampc_comm *c = T->zero;
  const ampc_params *P = &T->params;
  ampc_params *V = &view->params;
  static const int roles[4] = {AMPC_ROLE_MASTER, AMPC_ROLE_MOMENT1, AMPC_ROLE_MOMENT2,
                               AMPC_ROLE_COMPENSATION};
  const void *mine[4] = {P->master, P->m, P->v, P->comp};
  void **whole[4] = {(void **)&V->master, &V->m, &V->v, &V->comp};
  const size_t es[4] = {sizeof(float), ampc_dtype_size(P->sdt), ampc_dtype_size(P->sdt),
                        ampc_dtype_size(P->wdt)};
  const bool receives = root < 0 || root == c->rank;
  bool ok = true;
  for (int k = 0; k < 4; k++) {
    *whole[k] = NULL;
    if (mine[k] && receives)
      ok = (*whole[k] = malloc((size_t)P->total * es[k])) != NULL && ok;
    V->bytes[roles[k]] = mine[k] && receives ? (size_t)P->total * es[k] : 0;
  }
  /* the gathers are collective: every rank learns whether the receivers
   * have their buffers before any starts */
  double failed = ok ? 0.0 : 1.0;
  ampc_status st = c->max_f64(c->user, &failed, 1);
  if (st == AMPC_OK && failed > 0.0)
    st = ampc_fail(AMPC_ERR_NOMEM, "out of memory for the whole optimizer state (%lld elements)",
                   (long long)P->total);
  for (int k = 0; k < 4 && st == AMPC_OK; k++)
    if (mine[k])
      st = c->gather_shards(c->user, mine[k], *whole[k], es[k], T->zero_bounds, root);
  V->shard_lo = 0, V->shard_n = P->total;
  view->zero = NULL;
  if (st != AMPC_OK)
    ampc_trainer_view_free(T, view);
  return st;
}

void ampc_trainer_view_free(const ampc_trainer *T, ampc_trainer *view) {
  if (!T || !view || !T->zero)
    return;
  ampc_params *V = &view->params;
  free(V->master), free(V->m), free(V->v), free(V->comp);
  V->master = NULL, V->m = V->v = V->comp = NULL;
}

ampc_status ampc_trainer_step(ampc_trainer *T, ampc_step_info *info) {
  if (!T || !info)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_trainer_step: NULL argument");
  ampc_params *P = ampc_trainer_params(T);
  const ampc_backend *be = ampc_device_backend(T->device);
  if (T->device_status != AMPC_OK) {
    const ampc_status ds = T->device_status;
    T->device_status = AMPC_OK;
    return ampc_fail(ds, "ampc_trainer_step: zeroing the gradients on the %s device failed",
                     be->name);
  }
  /* the scaler unscales, checks and updates the scale; the optimizer takes
   * its factors in its fused update */
  const ampc_grads g = {P->grad, P->wdt, P->total, P->p, P->count};
  const ampc_unscale_ops ops = {.check = be->grad_unscale_check,
                                .stage = be->stage_f32,
                                .ws = &T->unscale_ws,
                                .check_group = T->zero ? zero_check : NULL,
                                .group_user = T};
  ampc_unscaled u;
  AMPC_TRY(ampc_scaler_finish(&T->scaler, &T->plan, &g, &ops, &u));
  ampc_step_info r = {.iteration = T->iteration + 1,
                      .loss_scale = u.loss_scale,
                      .next_scale = u.next_scale,
                      .overflow = u.overflow,
                      .skipped = u.skip,
                      .growth_tracker = u.growth_tracker,
                      .nonfinite = u.nonfinite,
                      /* as torch's clip_grad_norm_ reports an overflow */
                      .grad_norm = u.overflow ? (double)INFINITY : u.norm,
                      .clip_coef = 1.0f,
                      .branch_nonfinite = u.nonfinite_mask,
                      .branch_picked = u.picked};
  memcpy(r.branch_scale, u.scale, sizeof r.branch_scale);
  memcpy(r.next_branch_scale, u.next_branch_scale, sizeof r.next_branch_scale);
  r.lr = ampc_lr_at(&T->opt, T->step + 1);
  if (!u.skip) {
    /* (only with loss scaling off can a non-finite step reach here: the
     * finite values are clipped by their own norm, the others stay non-finite) */
    r.clip_coef = ampc_clip_coef(u.norm, T->opt.clip_norm);
    AMPC_TRY(be->optim_step_from(P, &T->opt, T->step + 1, r.lr, u.mult, r.clip_coef,
                                 T->telemetry ? T->swallow : NULL, u.grad, u.grad_dt));
    T->step++;
    if (T->zero)
      AMPC_TRY(zero_finish(T, T->telemetry));
    if (T->telemetry)
      for (int i = 0; i < P->count; i++)
        r.nonfinite_weights += T->swallow[i].nonfinite;
  }
  T->iteration++;
  r.step = T->step;
  *info = r;
  return AMPC_OK;
}

/* ---- resolved configuration ------------------------------------------------ */

/* The shortest decimal that reads back as the same FP32 value, as a double,
 * so the JSON says 1e-08 rather than 9.99999993922529e-09. */
static double short_float(float f) {
  char buf[32];
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, (double)f);
    if ((float)strtod(buf, NULL) == f)
      return strtod(buf, NULL);
  }
  return (double)f;
}

static const char *dt_name(ampc_dtype dt) { return ampc_dtype_name(dt); }

char *ampc_trainer_config_json(const ampc_trainer *T) {
  const ampc_amp_config *a = &T->amp;
  const ampc_optim_config *o = &T->opt;
  const ampc_params *P = &T->params;
  cJSON *j = cJSON_CreateObject();
  if (!j)
    return NULL;
  cJSON_AddStringToObject(j, "precision", ampc_precision_name(a->precision));
  cJSON_AddStringToObject(j, "weights_dtype", dt_name(a->lowp));
  cJSON_AddStringToObject(j, "grads_dtype", dt_name(a->lowp));
  cJSON_AddStringToObject(j, "master_weights",
                          a->master_weights ? "on" : (a->lowp == AMPC_F32 ? "n/a (fp32)" : "off"));
  cJSON_AddStringToObject(j, "optimizer_state_dtype", dt_name(a->state_dtype));
  cJSON_AddStringToObject(j, "accumulate", a->accumulate == AMPC_ACC_F16 ? "fp16" : "fp32");
  cJSON_AddStringToObject(j, "weight_update", ampc_weight_update_name(a->weight_update));
  if (ampc_precision_is_fp8(a->precision)) {
    cJSON *f8 = cJSON_AddObjectToObject(j, "fp8");
    if (f8) {
      cJSON_AddStringToObject(f8, "format", "hybrid (e4m3 forward, e5m2 gradients)");
      cJSON_AddNumberToObject(f8, "amax_history", a->fp8_amax_history);
      cJSON_AddStringToObject(f8, "amax_compute",
                              a->fp8_amax_algo == AMPC_AMAX_MAX ? "max" : "most_recent");
      cJSON_AddNumberToObject(f8, "margin", short_float(a->fp8_margin));
    }
  }
  cJSON *ls = cJSON_AddObjectToObject(j, "loss_scale");
  if (ls) {
    const ampc_scaler_config *s = &a->scaler;
    cJSON_AddStringToObject(ls, "mode", ampc_loss_scale_mode_name(s->mode));
    cJSON_AddNumberToObject(ls, "init_scale", short_float(s->init_scale));
    cJSON_AddNumberToObject(ls, "growth_factor", short_float(s->growth_factor));
    cJSON_AddNumberToObject(ls, "backoff_factor", short_float(s->backoff_factor));
    cJSON_AddNumberToObject(ls, "growth_interval", s->growth_interval);
    cJSON_AddNumberToObject(ls, "hysteresis", s->hysteresis);
    cJSON_AddNumberToObject(ls, "min_scale", short_float(s->min_scale));
    cJSON_AddNumberToObject(ls, "max_scale", short_float(s->max_scale));
  }
  cJSON *op = cJSON_AddObjectToObject(j, "optimizer");
  if (op) {
    cJSON_AddStringToObject(op, "name", o->kind == AMPC_OPTIM_ADAMW ? "adamw" : "sgd");
    cJSON_AddNumberToObject(op, "lr", short_float(o->lr));
    cJSON_AddNumberToObject(op, "weight_decay", short_float(o->weight_decay));
    if (o->kind == AMPC_OPTIM_ADAMW) {
      cJSON_AddNumberToObject(op, "beta1", short_float(o->beta1));
      cJSON_AddNumberToObject(op, "beta2", short_float(o->beta2));
      cJSON_AddNumberToObject(op, "eps", short_float(o->eps));
    } else {
      cJSON_AddNumberToObject(op, "momentum", short_float(o->momentum));
      cJSON_AddNumberToObject(op, "dampening", short_float(o->dampening));
      cJSON_AddBoolToObject(op, "nesterov", o->nesterov);
    }
    cJSON_AddNumberToObject(op, "warmup_steps", (double)o->warmup_steps);
    cJSON_AddNumberToObject(op, "total_steps", (double)o->total_steps);
    cJSON_AddNumberToObject(op, "min_lr", short_float(o->min_lr));
    cJSON_AddNumberToObject(op, "clip_norm", short_float(o->clip_norm));
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      if (o->branch_lr[b] > 0.0f) { /* a parameter group's own peak lr (absent: lr) */
        char key[32];
        snprintf(key, sizeof key, "lr_%s", ampc_branch_name((ampc_branch)b));
        cJSON_AddNumberToObject(op, key, short_float(o->branch_lr[b]));
      }
  }
  cJSON_AddNumberToObject(j, "parameters", (double)P->numel);
  cJSON *b = cJSON_AddObjectToObject(j, "parameter_bytes");
  if (b) {
    static const char *const roles[AMPC_ROLE_COUNT] = {"weights", "master",     "grads",
                                                       "exp_avg", "exp_avg_sq", "kahan_comp"};
    for (int r = 0; r < AMPC_ROLE_COUNT; r++)
      cJSON_AddNumberToObject(b, roles[r], (double)P->bytes[r]);
  }
  char *s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return s;
}

/* ---- configuration lint ------------------------------------------------------- */

static float round_to(float x, ampc_dtype dt) {
  uint16_t h = 0;
  switch (dt) {
  case AMPC_F16:
    h = ampc_f32bits_to_f16bits(ampc_f32_bits(x));
    return ampc_bits_f32(ampc_f16bits_to_f32bits(h));
  case AMPC_BF16:
    h = ampc_f32bits_to_bf16bits(ampc_f32_bits(x));
    return ampc_bits_f32(ampc_bf16bits_to_f32bits(h));
  default: return x;
  }
}

static int mant_bits(ampc_dtype dt) { return dt == AMPC_F16 ? 10 : (dt == AMPC_BF16 ? 7 : 23); }

#define LINT(...)                                                                                  \
  do {                                                                                             \
    if (count < max && msgs)                                                                       \
      snprintf(msgs[count], 256, __VA_ARGS__);                                                     \
    count++;                                                                                       \
  } while (0)

int ampc_config_lint(const ampc_amp_config *amp, const ampc_optim_config *opt, char (*msgs)[256],
                     int max) {
  int count = 0;
  const ampc_dtype sdt = amp->state_dtype;
  const ampc_dtype pdt = amp->master_weights ? AMPC_F32 : amp->lowp;
  if (opt->kind == AMPC_OPTIM_ADAMW && opt->eps > 0.0f && round_to(opt->eps, sdt) == 0.0f)
    LINT("AdamW eps = %g rounds to 0 in %s (the optimizer state dtype): once v underflows the "
         "update divides by zero",
         (double)opt->eps, ampc_dtype_name(sdt));
  /* with stochastic rounding a small decay is taken on average, with Kahan
   * updates it is kept in the compensation: not swallowed either way */
  if (opt->weight_decay > 0.0f && amp->weight_update == AMPC_UPDATE_NEAREST) {
    const double d = (double)opt->lr * (double)opt->weight_decay;
    const double half_ulp_below_one = ldexp(1.0, -(mant_bits(pdt) + 2));
    if (d < half_ulp_below_one)
      LINT("weight decay: lr * weight_decay = %g is below half an ulp of 1.0 in %s (%g): "
           "w * (1 - lr * wd) rounds back to w, the decay is swallowed%s",
           d, ampc_dtype_name(pdt), half_ulp_below_one,
           pdt == AMPC_BF16 ? " (--weight-update stochastic or kahan keeps it)"
                            : (pdt == AMPC_F16 ? " (--weight-update kahan keeps it)" : ""));
  }
  if (round_to(opt->lr, pdt) == 0.0f)
    LINT("lr = %g rounds to 0 in %s", (double)opt->lr, ampc_dtype_name(pdt));
  /* AdamW moves a weight by about lr a step (|m / sqrt(v)| <= ~1): below
   * half an ulp of a weight of magnitude 2^-10 (a small initial weight) in
   * the dtype the update is added in, nearest rounding gives the weight back */
  if (opt->kind == AMPC_OPTIM_ADAMW && opt->lr > 0.0f &&
      amp->weight_update == AMPC_UPDATE_NEAREST) {
    const double half_ulp_small_w = ldexp(1.0, -10 - (mant_bits(pdt) + 1));
    if ((double)opt->lr < half_ulp_small_w)
      LINT("lr = %g is below half an ulp (%g) of a weight of 2^-10 in %s: AdamW's updates "
           "(~lr a step) round away, the weights freeze (swallowed updates)%s",
           (double)opt->lr, half_ulp_small_w, ampc_dtype_name(pdt),
           pdt == AMPC_F32 ? "" : " (--master-weights on keeps them)");
  }
  const ampc_scaler_config *s = &amp->scaler;
  if (s->mode == AMPC_LOSS_SCALE_STATIC) {
    int e = 0;
    const float frac = frexpf(s->init_scale, &e); /* S = frac * 2^e, frac in [0.5, 1) */
    if (frac != 0.5f)
      LINT("static loss scale %g is not a power of two: scaling and unscaling round every "
           "gradient (use %g)",
           (double)s->init_scale, ldexp(1.0, frac < 0.75f ? e - 1 : e));
  }
  if (s->mode != AMPC_LOSS_SCALE_NONE && amp->lowp != AMPC_F16)
    LINT("loss scaling with %s gradients is unnecessary: their exponent range is FP32's",
         ampc_dtype_name(amp->lowp));
  return count;
}
