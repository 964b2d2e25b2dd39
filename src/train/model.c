/*
 * src/train/model.c: the run's model interface (include/ampc/train.h) over
 * the models of src/model/: the MLP on dense features, and the multimodal
 * image-text model with its image-only ViT variants. Also what names a model
 * in a checkpoint, evaluation of the classifiers, and one training step with
 * gradient accumulation (the one place micro-batches are averaged).
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/io.h"
#include "ampc/report.h"
#include "ampc/shards.h"
#include "ampc/train.h"
#include "backend/backend.h"
#include "run_internal.h"

ampc_status ampc_model_desc_get(const char *name, const ampc_dataset *d, ampc_model_desc *out) {
  if (!name || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_desc_get: NULL argument");
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  if (strcmp(name, "mlp") == 0) {
    out->kind = AMPC_MODEL_MLP;
    out->mlp = (ampc_mlp_config){.in = 16, .hidden = 64, .classes = 5};
    return AMPC_OK;
  }
  out->kind = AMPC_MODEL_MM;
  if (d && (!d->tokens || d->seq_len <= 0)) { /* image-only data: only an image-only model */
    ampc_mmodel_config probe;
    char list[96];
    if (ampc_mmodel_config_get(name, 3, 1, 2, &probe) == AMPC_OK && !probe.image_only)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "model %s needs image-text pairs and the data has no captions (models "
                       "for its %dx%dx%d images: %s)",
                       name, d->height, d->width, d->channels,
                       ampc_mmodel_list(list, sizeof list, d->height, d->width, d->channels, 0));
  }
  return ampc_mmodel_config_get(name, d ? d->vocab : 0, d ? d->seq_len : 0, d ? d->n_classes : 0,
                                &out->mm);
}

ampc_status ampc_mmodel_follow_image(ampc_mmodel_config *mc, int64_t side) {
  if (!mc || side < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_follow_image: bad arguments");
  if (mc->image_only || side == mc->img)
    return AMPC_OK;
  /* the patch grows with the image: the number of patches stays the preset's where it can */
  const int64_t p = mc->patch * side / mc->img;
  const bool scales = p >= 1 && p * mc->img == mc->patch * side && side % p == 0;
  return ampc_mmodel_set_image(mc, side, scales ? p : mc->patch);
}

ampc_status ampc_mmodel_set_image(ampc_mmodel_config *mc, int64_t img, int64_t patch) {
  if (!mc || img < 1 || img > 4096 || patch < 1 || patch > img || img % patch != 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "image size %lld with patch %lld: the patch must divide the image "
                     "(--patch)",
                     (long long)img, (long long)patch);
  if ((img / patch) * (img / patch) > 4096)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "image size %lld with patch %lld gives %lld patches (at most 4096: a "
                     "larger --patch)",
                     (long long)img, (long long)patch, (long long)((img / patch) * (img / patch)));
  mc->img = img, mc->patch = patch;
  return AMPC_OK;
}

ampc_status ampc_mmodel_check_data(const ampc_mmodel_config *mc, const ampc_dataset *D,
                                   const char *dn) {
  if (!mc || !D || !dn)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_check_data: NULL argument");
  char list[128];
  const bool text = D->tokens && D->seq_len > 0;
  if (!mc->image_only && !text)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the data '%s' has no captions: model %s needs image-text pairs (models "
                     "for its %dx%dx%d images: %s)",
                     dn, mc->name, D->height, D->width, D->channels,
                     ampc_mmodel_list(list, sizeof list, D->height, D->width, D->channels, 0));
  if (D->height != mc->img || D->width != mc->img || D->channels != mc->channels)
    return ampc_fail(
        AMPC_ERR_INVALID_ARG,
        "model %s takes %lldx%lldx%lld images, the data '%s' "
        "has %dx%dx%d (models for them: %s)",
        mc->name, (long long)mc->img, (long long)mc->img, (long long)mc->channels, dn, D->height,
        D->width, D->channels,
        ampc_mmodel_list(list, sizeof list, D->height, D->width, D->channels, text ? -1 : 0));
  if (!mc->image_only && (D->vocab != mc->vocab || D->seq_len != mc->seq_len))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "model %s has vocabulary %lld and %lld tokens per caption, the data '%s' "
                     "%lld and %lld",
                     mc->name, (long long)mc->vocab, (long long)mc->seq_len, dn,
                     (long long)D->vocab, (long long)D->seq_len);
  return AMPC_OK;
}

bool ampc_model_known(const char *name) {
  ampc_mmodel_config c;
  return name && (strcmp(name, "mlp") == 0 || ampc_mmodel_config_get(name, 3, 1, 2, &c) == AMPC_OK);
}

ampc_status ampc_model_desc_from_checkpoint(const char *path, ampc_model_desc *out, char *precision,
                                            size_t precision_cap, int64_t *iteration) {
  if (!path || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_desc_from_checkpoint: NULL argument");
  ampc_safetensors *f = NULL; /* any dtype: a quantized checkpoint's I8 weights too */
  AMPC_TRY(ampc_safetensors_read_ex(path, AMPC_ST_ANY_DTYPE, &f));
  const char *mj = ampc_safetensors_meta(f, "ampc.model_config");
  const char *cj = ampc_safetensors_meta(f, "ampc.config");
  cJSON *m = mj ? cJSON_Parse(mj) : NULL, *c = cj ? cJSON_Parse(cj) : NULL;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "model");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "vocab");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "seq_len");
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(m, "classes");
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "precision");
  ampc_status st = AMPC_OK;
  const char *kind = ampc_safetensors_meta(f, "ampc.model");
  if (!mj && kind && strcmp(kind, "mlp") == 0) {
    st = ampc_fail(AMPC_ERR_FORMAT,
                   "%s: a checkpoint of the MLP (ampc train --model mlp), not of a multimodal "
                   "or ViT model: it has no retrieval or class evaluation here (its test accuracy "
                   "is in the training run's summary)",
                   path);
  } else if (!(cJSON_IsString(name) && cJSON_IsNumber(v) && cJSON_IsNumber(s) &&
               cJSON_IsNumber(k) && cJSON_IsString(p))) {
    st = ampc_fail(AMPC_ERR_FORMAT,
                   "%s: not a checkpoint of a multimodal model (missing or bad "
                   "ampc.model_config / ampc.config metadata)",
                   path);
  } else {
    memset(out, 0, sizeof *out);
    out->kind = AMPC_MODEL_MM;
    snprintf(out->name, sizeof out->name, "%s", name->valuestring);
    st = ampc_mmodel_config_get(name->valuestring, (int64_t)v->valuedouble, (int64_t)s->valuedouble,
                                (int64_t)k->valuedouble, &out->mm);
    if (st != AMPC_OK) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: %s", path, ampc_last_error());
    } else {
      /* w_mlm and mlm_prob: 0 and 0.15 in checkpoints from before MLM */
      const char *wn[5] = {"w_itc", "w_itm", "w_cls", "w_mlm", "mlm_prob"};
      float *w[5] = {&out->mm.w_itc, &out->mm.w_itm, &out->mm.w_cls, &out->mm.w_mlm,
                     &out->mm.mlm_prob};
      const float dflt[5] = {1.0f, 1.0f, 1.0f, 0.0f, 0.15f};
      for (int i = 0; i < 5; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(m, wn[i]);
        *w[i] = cJSON_IsNumber(x) ? (float)x->valuedouble : dflt[i];
      }
      if (!(out->mm.w_mlm >= 0.0f) ||
          (out->mm.w_mlm > 0.0f && !(out->mm.mlm_prob > 0.0f && out->mm.mlm_prob <= 1.0f)))
        st = ampc_fail(AMPC_ERR_FORMAT, "%s: bad w_mlm %g / mlm_prob %g in ampc.model_config", path,
                       (double)out->mm.w_mlm, (double)out->mm.mlm_prob);
      /* the image size and patch when they are not the preset's */
      const cJSON *is = cJSON_GetObjectItemCaseSensitive(m, "image_size");
      const cJSON *ps = cJSON_GetObjectItemCaseSensitive(m, "patch");
      if ((is || ps) && !(cJSON_IsNumber(is) && cJSON_IsNumber(ps) &&
                          ampc_mmodel_set_image(&out->mm, (int64_t)is->valuedouble,
                                                (int64_t)ps->valuedouble) == AMPC_OK))
        st = ampc_fail(AMPC_ERR_FORMAT, "%s: bad image_size / patch in ampc.model_config", path);
      /* the attention products' 16-bit operands (--attention-cast): absent, off */
      const cJSON *ac = cJSON_GetObjectItemCaseSensitive(m, "attention_cast");
      out->mm.attn_cast = cJSON_IsTrue(ac);
      if (ac && !cJSON_IsBool(ac))
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "%s: bad attention_cast in ampc.model_config (not true or false)", path);
      if (precision && precision_cap)
        snprintf(precision, precision_cap, "%s", p->valuestring);
      const char *it = ampc_safetensors_meta(f, "ampc.iteration");
      if (iteration)
        *iteration = it ? strtoll(it, NULL, 10) : 0;
    }
  }
  cJSON_Delete(m);
  cJSON_Delete(c);
  ampc_safetensors_free(f);
  return st;
}

ampc_status ampc_model_specs(const ampc_model_desc *d, ampc_mmodel_specs *out) {
  if (!d || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_specs: NULL argument");
  memset(out, 0, sizeof *out);
  if (d->kind == AMPC_MODEL_MM)
    return ampc_mmodel_specs_make(&d->mm, out);
  if (d->kind != AMPC_MODEL_MLP)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_specs: unknown model kind %d", (int)d->kind);
  out->specs = calloc(AMPC_MLP_NPARAMS, sizeof *out->specs);
  if (!out->specs)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_model_specs: out of memory");
  const ampc_status st = ampc_mlp_specs(&d->mlp, out->specs);
  if (st != AMPC_OK) {
    ampc_mmodel_specs_free(out);
    return st;
  }
  out->n = AMPC_MLP_NPARAMS;
  return AMPC_OK;
}

ampc_status ampc_model_plan_bytes(const ampc_model_desc *d, int64_t max_batch, ampc_precision p,
                                  size_t *activations, size_t *workspace) {
  if (!d)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_plan_bytes: NULL argument");
  if (d->kind == AMPC_MODEL_MM)
    return ampc_mmodel_plan_bytes(&d->mm, max_batch, p, activations, workspace);
  return ampc_mlp_plan_bytes(&d->mlp, max_batch, p, activations, workspace);
}

/* ---- the MLP ------------------------------------------------------------------------ */

static ampc_status mlp_forward(ampc_model *m, const ampc_batch *bt, ampc_losses *out) {
  if (!bt->features || !bt->labels)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "mlp: the batch has no features or labels");
  memset(out, 0, sizeof *out);
  return ampc_mlp_forward(m->impl, bt->b, bt->features, bt->labels, &out->total, NULL);
}

static ampc_status mlp_backward(ampc_model *m, float seed) {
  return ampc_mlp_backward(m->impl, seed);
}

static ampc_status mlp_evaluate(ampc_model *m, const ampc_run_data *d, ampc_eval *out);

static ampc_status mlp_evaluate_impl(ampc_model *m, const ampc_run_data *d, ampc_eval *out) {
  memset(out, 0, sizeof *out);
  out->kind = AMPC_EVAL_CLASSES;
  out->split = AMPC_SPLIT_TEST;
  const int64_t n = d->n_test, in = d->dim, batch = m->max_batch;
  if (n < 1 || !d->x_test || !d->y_test || in != m->desc.mlp.in)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "mlp evaluation: no test rows of %lld features",
                     (long long)m->desc.mlp.in);
  double ls = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < n; r += batch) {
    const int64_t b = n - r < batch ? n - r : batch;
    float l = 0;
    int64_t c = 0;
    AMPC_TRY(ampc_mlp_forward(m->impl, b, d->x_test + r * in, d->y_test + r, &l, &c));
    ls += (double)l * (double)b;
    hits += c;
  }
  ((ampc_mlp *)m->impl)->fwd_b = 0; /* evaluation leaves nothing to differentiate */
  out->loss = ls / (double)n;
  out->accuracy = (double)hits / (double)n;
  out->samples = n;
  return AMPC_OK;
}

static void mlp_destroy(ampc_model *m) {
  ampc_mlp_free(m->impl);
  free(m->impl);
}

/* the per-loss scaler keeps each loss term's state in its per-branch slots */
_Static_assert((int)AMPC_MM_LOSSES <= (int)AMPC_BRANCH_COUNT, "a loss term without a scaler slot");

static const ampc_model_ops k_mlp_ops = {
    .forward = mlp_forward,
    .backward = mlp_backward,
    .evaluate = mlp_evaluate,
    .set_telemetry = NULL, /* the MLP marks no branches */
    .destroy = mlp_destroy,
};

/* ---- the multimodal model and the ViTs ------------------------------------------------- */

static ampc_status mm_forward(ampc_model *m, const ampc_batch *bt, ampc_losses *out) {
  const ampc_mmodel_batch mb = {.b = bt->b,
                                .images = bt->images,
                                .tokens = m->desc.mm.image_only ? NULL : bt->tokens,
                                .labels = bt->labels,
                                .neg_seed = bt->neg_seed,
                                .mask_seed = bt->mask_seed,
                                .neg_uniform = bt->neg_uniform,
                                .extreme_row = bt->extreme_row,
                                .extreme_factor = bt->extreme_factor};
  ampc_mmodel_losses L;
  AMPC_TRY(ampc_mmodel_forward(m->impl, &mb, &L));
  memset(out, 0, sizeof *out);
  out->total = L.total;
  static const char *const names[7] = {"loss_itc",  "loss_itm", "loss_cls", "itm_acc",
                                       "group_acc", "loss_mlm", "mlm_acc"};
  const float v[7] = {L.itc, L.itm, L.cls, L.itm_acc, L.cls_acc, L.mlm, L.mlm_acc};
  out->n_parts = m->desc.mm.w_mlm > 0.0f && !m->desc.mm.image_only ? 7 : 5;
  for (int i = 0; i < out->n_parts; i++)
    out->part_name[i] = names[i], out->part[i] = v[i];
  return AMPC_OK;
}

static ampc_status mm_backward(ampc_model *m, float seed) {
  return ampc_mmodel_backward(m->impl, seed);
}

static ampc_status mm_backward_branches(ampc_model *m, const float seed[AMPC_BRANCH_COUNT]) {
  return ampc_mmodel_backward_branches(m->impl, seed);
}

static ampc_status mm_backward_losses(ampc_model *m, const float *seed) {
  return ampc_mmodel_backward_losses(m->impl, seed);
}

/* image-only models: accuracy and mean loss of the class head on a split,
 * in batches of the model's max batch, in dataset order */
static ampc_status eval_classes(ampc_mmodel *M, const ampc_dataset *d, int split, int64_t B,
                                ampc_eval *out) {
  const int64_t img_sz = (int64_t)d->height * d->width * d->channels;
  uint8_t *ib = malloc((size_t)(B * img_sz));
  int32_t *lb = malloc((size_t)B * sizeof *lb);
  if (!ib || !lb) {
    free(ib), free(lb);
    return ampc_fail(AMPC_ERR_NOMEM, "evaluation: out of memory");
  }
  double ls = 0, hits = 0;
  int64_t n = 0, k = 0;
  ampc_status st = AMPC_OK;
  for (int64_t i = 0; i <= d->n && st == AMPC_OK; i++) {
    if (i < d->n && d->split[i] == split) {
      memcpy(ib + k * img_sz, d->images + i * img_sz, (size_t)img_sz);
      lb[k++] = d->label[i];
    }
    if (k == B || (i == d->n && k > 0)) {
      ampc_mmodel_batch bt = {.b = k, .images = ib, .labels = lb};
      ampc_mmodel_losses L;
      st = ampc_mmodel_forward(M, &bt, &L);
      ls += (double)L.cls * (double)k, hits += (double)L.cls_acc * (double)k, n += k;
      k = 0;
    }
  }
  free(ib), free(lb);
  out->accuracy = n ? hits / (double)n : 0.0;
  out->loss = n ? ls / (double)n : 0.0;
  out->samples = n;
  return st;
}

static ampc_status mm_evaluate_impl(ampc_model *m, const ampc_run_data *rd, ampc_eval *out) {
  memset(out, 0, sizeof *out);
  const ampc_dataset *d = rd->dataset;
  if (!d)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "evaluation: no dataset");
  if (m->desc.mm.image_only) {
    /* the held-out split: Fashion-MNIST's test images, the emoji set's new style */
    int64_t ntrain = 0;
    for (int64_t i = 0; i < d->n; i++)
      ntrain += d->split[i] == AMPC_SPLIT_TRAIN;
    out->kind = AMPC_EVAL_CLASSES;
    out->split =
        ntrain < d->n ? (d->tokens ? AMPC_SPLIT_NEW_STYLE : AMPC_SPLIT_TEST) : AMPC_SPLIT_NEW_STYLE;
    return eval_classes(m->impl, d, out->split, m->max_batch, out);
  }
  out->kind = AMPC_EVAL_RETRIEVAL;
  /* a split with fewer than 2 samples (a dataset with no held-out style, or
   * no held-out concepts) is left empty (samples 0); one of them is needed */
  int64_t count[AMPC_SPLIT_VAL + 1] = {0, 0, 0, 0, 0};
  for (int64_t i = 0; i < d->n; i++)
    count[d->split[i] <= AMPC_SPLIT_VAL ? d->split[i] : AMPC_SPLIT_TEST]++;
  if (count[AMPC_SPLIT_NEW_STYLE] < 2 && count[AMPC_SPLIT_ZERO_SHOT] < 2 &&
      count[AMPC_SPLIT_VAL] < 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "evaluation: the data has neither a held-out style (new_style split) nor "
                     "held-out concepts (zero_shot split) to evaluate on");
  /* the progress: each split's share in proportion to its images (the
   * prompts' zero-shot pass embeds the val images once more) */
  const bool prompts = count[AMPC_SPLIT_VAL] >= 2 && rd->class_prompts && d->n_classes > 1;
  double total = 0.0, at = 0.0;
  for (int s = AMPC_SPLIT_NEW_STYLE; s <= AMPC_SPLIT_VAL; s++)
    if (s != AMPC_SPLIT_TEST && count[s] >= 2)
      total += (double)count[s] * (s == AMPC_SPLIT_VAL && prompts ? 2.0 : 1.0);
  eval_progress p = {m->eval_progress, m->eval_progress_user, 0.0, 0.0, m->eval_cancel};
#define EVAL_SPLIT(s, dst)                                                                         \
  do {                                                                                             \
    p.lo = at / total, at += (double)count[s], p.hi = at / total;                                  \
    AMPC_TRY(eval_mm_split(m->impl, d, s, dst, &p));                                               \
  } while (0)
  if (count[AMPC_SPLIT_VAL] >= 2) { /* a packed dataset's val split */
    EVAL_SPLIT(AMPC_SPLIT_VAL, &out->val);
    if (prompts) {
      AMPC_TRY(
          ampc_mmodel_zero_shot(m->impl, d, AMPC_SPLIT_VAL, rd->class_prompts, &out->prompt_acc));
      out->prompt_classes = d->n_classes;
      at += (double)count[AMPC_SPLIT_VAL];
      if (p.fn)
        p.fn(p.user, at / total);
    }
  }
  if (count[AMPC_SPLIT_NEW_STYLE] >= 2)
    EVAL_SPLIT(AMPC_SPLIT_NEW_STYLE, &out->new_style);
  if (count[AMPC_SPLIT_ZERO_SHOT] >= 2)
    EVAL_SPLIT(AMPC_SPLIT_ZERO_SHOT, &out->zero_shot);
#undef EVAL_SPLIT
  return AMPC_OK;
}

static void mm_set_telemetry(ampc_model *m, ampc_telemetry *t) {
  const ampc_model_probe p = ampc_telemetry_probe(t);
  ampc_mmodel_set_probe(m->impl, t ? &p : NULL);
}

/* Evaluation runs the FP8 casts with the training's scales but must not move
 * them: the sites' amax and counters are kept aside and put back. */
static ampc_status fp8_guarded(ampc_model *m, const ampc_run_data *d, ampc_eval *out,
                               ampc_status (*eval)(ampc_model *, const ampc_run_data *,
                                                   ampc_eval *)) {
  if (!m->fp8)
    return eval(m, d, out);
  const size_t bytes = (size_t)m->fp8->n * sizeof *m->fp8->lin;
  ampc_linear_fp8 *keep = malloc(bytes);
  if (!keep)
    return ampc_fail(AMPC_ERR_NOMEM, "evaluation: out of memory");
  memcpy(keep, m->fp8->lin, bytes);
  const ampc_status st = eval(m, d, out);
  memcpy(m->fp8->lin, keep, bytes);
  free(keep);
  return st;
}

static ampc_status mlp_evaluate(ampc_model *m, const ampc_run_data *d, ampc_eval *out) {
  return fp8_guarded(m, d, out, mlp_evaluate_impl);
}

static ampc_status mm_evaluate(ampc_model *m, const ampc_run_data *d, ampc_eval *out) {
  return fp8_guarded(m, d, out, mm_evaluate_impl);
}

static void mm_destroy(ampc_model *m) { ampc_mmodel_free(m->impl); }

static const ampc_model_ops k_mm_ops = {
    .forward = mm_forward,
    .backward = mm_backward,
    .backward_branches = mm_backward_branches,
    .backward_losses = mm_backward_losses,
    .evaluate = mm_evaluate,
    .set_telemetry = mm_set_telemetry,
    .destroy = mm_destroy,
};

ampc_status ampc_model_create(ampc_model *m, const ampc_model_desc *d, ampc_params *P,
                              const ampc_amp_config *amp, int64_t max_batch) {
  return ampc_model_create_on(m, d, P, amp, max_batch, AMPC_DEVICE_CPU);
}

ampc_status ampc_model_create_on(ampc_model *m, const ampc_model_desc *d, ampc_params *P,
                                 const ampc_amp_config *amp, int64_t max_batch, ampc_device dev) {
  if (!m || !d || !P || !amp)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_create: NULL argument");
  memset(m, 0, sizeof *m);
  m->desc = *d;
  m->max_batch = max_batch;
  if (dev != AMPC_DEVICE_CPU && d->kind != AMPC_MODEL_MM)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "--device: model %s is not on a device yet (the multimodal models and ViTs "
                     "are)",
                     d->name);
  if (d->kind == AMPC_MODEL_MM) {
    ampc_mmodel *M = NULL;
    AMPC_TRY(ampc_mmodel_create_on(&M, &d->mm, P, amp, max_batch, dev));
    m->impl = M;
    m->ops = &k_mm_ops;
    m->fp8 = ampc_mmodel_fp8(M);
    static const char *const terms[AMPC_MM_LOSSES] = {"loss_itc", "loss_itm", "loss_cls",
                                                      "loss_mlm"};
    const float w[AMPC_MM_LOSSES] = {d->mm.w_itc, d->mm.w_itm, d->mm.w_cls, d->mm.w_mlm};
    m->n_terms = AMPC_MM_LOSSES;
    for (int k = 0; k < AMPC_MM_LOSSES; k++) {
      m->term_name[k] = terms[k];
      m->term_on[k] = w[k] != 0.0f && (!d->mm.image_only || k == AMPC_MM_LOSS_CLS);
    }
  } else if (d->kind == AMPC_MODEL_MLP) {
    ampc_mlp *M = calloc(1, sizeof *M);
    if (!M)
      return ampc_fail(AMPC_ERR_NOMEM, "ampc_model_create: out of memory");
    const ampc_status st = ampc_mlp_create(M, &d->mlp, P, amp, max_batch);
    if (st != AMPC_OK) {
      free(M);
      return st;
    }
    m->impl = M;
    m->ops = &k_mlp_ops;
    m->fp8 = M->fp8;
    m->n_terms = 1;
    m->term_name[0] = "loss";
    m->term_on[0] = true;
  } else {
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_create: unknown model kind %d",
                     (int)d->kind);
  }
  if (ampc_model_plan_bytes(d, max_batch, amp->precision, &m->activation_bytes,
                            &m->workspace_bytes) != AMPC_OK)
    m->activation_bytes = m->workspace_bytes = 0;
  return AMPC_OK;
}

void ampc_model_free(ampc_model *m) {
  if (!m || !m->ops)
    return;
  m->ops->destroy(m);
  memset(m, 0, sizeof *m);
}

ampc_status ampc_model_evaluate(ampc_model *m, const ampc_run_data *d, ampc_eval *out) {
  if (!m || !m->ops || !d || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_evaluate: NULL argument");
  AMPC_TRY(m->ops->evaluate(m, d, out));
  if (m->eval_progress)
    m->eval_progress(m->eval_progress_user, 1.0);
  return AMPC_OK;
}

/* ---- one step ---------------------------------------------------------------------- */

ampc_status ampc_train_accumulate(ampc_trainer *T, ampc_model *m, int64_t n_micro,
                                  ampc_batch_fn next, void *user, ampc_losses *mean) {
  if (n_micro < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_train_accumulate: bad arguments");
  /* one process, micro-batches accumulated in place by the layers */
  const ampc_accum a = {.micro_batches = n_micro, .reduce = AMPC_REDUCE_WORKING};
  return ampc_train_accumulate_dp(T, m, &a, next, user, mean);
}

ampc_status ampc_model_set_group(ampc_model *m, const ampc_model_group *g) {
  if (!m)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_set_group: m is NULL");
  if (m->desc.kind != AMPC_MODEL_MM)
    return g ? ampc_fail(AMPC_ERR_INVALID_ARG, "global negatives: model %s has no contrastive loss",
                         m->desc.name)
             : AMPC_OK;
  const size_t was = ampc_mmodel_group_bytes(m->impl);
  AMPC_TRY(ampc_mmodel_set_group(m->impl, g));
  m->workspace_bytes = m->workspace_bytes - was + ampc_mmodel_group_bytes(m->impl);
  return AMPC_OK;
}

ampc_status ampc_model_set_fake_quant(ampc_model *m, bool on) {
  if (!m)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_model_set_fake_quant: m is NULL");
  if (m->desc.kind != AMPC_MODEL_MM || m->desc.mm.image_only)
    return on ? ampc_fail(AMPC_ERR_INVALID_ARG,
                          "--fake-quant int8: model %s is not an image-text model (INT8 "
                          "quantization-aware training is for the multimodal models, mm-*)",
                          m->desc.kind == AMPC_MODEL_MM ? m->desc.mm.name : m->desc.name)
              : AMPC_OK;
  return ampc_mmodel_set_fake_quant(m->impl, on);
}

size_t ampc_accum_stage_bytes(const ampc_accum *a, int64_t n) {
  if (a && n >= 1 && a->per_loss) /* the FP32 sum of the terms' unscaled gradients */
    return (size_t)n * sizeof(float);
  if (!a || n < 1 || a->reduce != AMPC_REDUCE_F32)
    return 0;
  const int size = a->comm ? a->comm->size : 1;
  if (a->zero && size > 1 && a->micro_batches == 1 && !a->overlap) { /* the shard's sum only */
    int64_t lo = 0, sn = 0;
    ampc_shard_range(n, size, a->comm->rank, &lo, &sn);
    return (size_t)sn * sizeof(float);
  }
  return a->micro_batches > 1 || size > 1 ? (size_t)n * sizeof(float) : 0;
}

/* the communicator sums device buffers itself (NCCL) */
static bool comm_on_device(const ampc_comm *c) {
  return c->sum_device_f32_ordered && c->sum_device_working;
}

size_t ampc_accum_host_bytes(const ampc_accum *a, int64_t n, ampc_dtype wdt) {
  if (!a || n < 1 || !a->comm || a->comm->size < 2 || comm_on_device(a->comm))
    return 0;
  const size_t st = ampc_accum_stage_bytes(a, n), w = (size_t)n * ampc_dtype_size(wdt);
  return st > w ? st : w;
}

/* The ranks' sum of x [n] (dt; FP32 in rank order, or in the working dtype)
 * in place; on a device through the communicator's device sums (NCCL) when
 * it has them, else through the host buffer `host`. */
static ampc_status reduce_ranks(const ampc_comm *c, const ampc_backend *be, void *host, void *x,
                                ampc_dtype dt, int64_t n, bool f32) {
  if (be->device && comm_on_device(c))
    return f32 ? c->sum_device_f32_ordered(c->user, x, n)
               : c->sum_device_working(c->user, x, dt, n);
  const size_t bytes = (size_t)n * ampc_dtype_size(dt);
  void *h = x;
  if (be->device) {
    if (!host)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "ampc_train_accumulate_dp: no host buffer for the ranks' sum on a device");
    h = host;
    AMPC_TRY(be->to_host(h, x, bytes));
  }
  AMPC_TRY(f32 ? c->sum_f32_ordered(c->user, h, n) : c->sum_working(c->user, h, dt, n));
  return be->device ? be->to_device(x, h, bytes) : AMPC_OK;
}

/* ---- the ranks' sum overlapped with the last backward pass (ampc_accum.overlap) -------- */

/* The model's grad-ready hook (ampc_mmodel_set_grad_ready) during the last
 * micro-batch: each range named is staged (widened into the FP32 stage, a
 * copy for the first micro-batch, an add after it) and its rank-order chain
 * started (comm->ovl_range); an empty range lets the messages move
 * (ovl_progress). The ranges named are kept (lo, hi: at most the table's
 * tensor count) so that the rest can be started after the pass. */
typedef struct ovl_ctx {
  const ampc_comm *c;
  const ampc_backend *be;
  const ampc_params *P;
  float *stage;
  bool first;
  int64_t *lo, *hi;
  int n, cap;
  ampc_status st; /* the first error (the hook cannot fail the pass) */
  double call_s;  /* seconds inside the ovl_* calls */
} ovl_ctx;

static ampc_status ovl_start(ovl_ctx *o, int64_t lo, int64_t hi) {
  const ampc_params *P = o->P;
  AMPC_TRY(o->be->stage_f32(hi - lo, (const char *)P->grad + (size_t)lo * ampc_dtype_size(P->wdt),
                            P->wdt, 1.0f, o->first, o->stage + lo));
  const double t0 = ampc_now_s();
  const ampc_status st = o->c->ovl_range(o->c->user, lo, hi);
  o->call_s += ampc_now_s() - t0;
  return st;
}

static void ovl_ready(void *user, int64_t lo, int64_t hi) {
  ovl_ctx *o = user;
  if (o->st != AMPC_OK)
    return;
  if (hi <= lo) {
    const double t0 = ampc_now_s();
    o->st = o->c->ovl_progress(o->c->user);
    o->call_s += ampc_now_s() - t0;
    return;
  }
  if (o->n == o->cap || lo < 0 || hi > o->P->total) {
    o->st = ampc_fail(AMPC_ERR_INVALID_ARG,
                      "the overlapped gradient sum: range [%lld, %lld) is range %d of at most %d "
                      "in a table of %lld",
                      (long long)lo, (long long)hi, o->n + 1, o->cap, (long long)o->P->total);
    return;
  }
  o->lo[o->n] = lo, o->hi[o->n] = hi, o->n++;
  o->st = ovl_start(o, lo, hi);
}

/* After the pass: the ranges not named (embeddings, final norms, heads,
 * padding), in ascending order; the named ones must not overlap (each
 * element is summed once). Every rank names the same ranges in the same
 * order (the pass runs the same blocks on every rank), so every rank starts
 * the same rest too. */
static ampc_status ovl_rest(ovl_ctx *o) {
  for (int i = 1; i < o->n; i++) /* insertion sort by lo: a few dozen ranges */
    for (int j = i; j > 0 && o->lo[j - 1] > o->lo[j]; j--) {
      const int64_t l = o->lo[j], h = o->hi[j];
      o->lo[j] = o->lo[j - 1], o->hi[j] = o->hi[j - 1];
      o->lo[j - 1] = l, o->hi[j - 1] = h;
    }
  int64_t pos = 0;
  for (int i = 0; i <= o->n; i++) {
    const int64_t lo = i < o->n ? o->lo[i] : o->P->total;
    if (lo < pos)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "the overlapped gradient sum: the model named overlapping ranges (at %lld)",
                       (long long)lo);
    if (lo > pos)
      AMPC_TRY(ovl_start(o, pos, lo));
    if (i < o->n)
      pos = o->hi[i];
  }
  return AMPC_OK;
}

static void model_grad_ready(ampc_model *m, void (*fn)(void *, int64_t, int64_t), void *user) {
  if (m->desc.kind == AMPC_MODEL_MM)
    ampc_mmodel_set_grad_ready(m->impl, fn, user);
}

/* The FP32 staging goes through the trainer's backend (stage_f32): stage =
 * widen(g) for the first micro-batch, stage += widen(g) after it (the first is
 * a copy, so a -0 stays -0 as it would in rank 0's own buffer); per-loss,
 * the scaler adds each term's widen(g) * (1/S_k) (ampc_scaler_take_term). */

/* ampc_train_accumulate_dp; oc: the overlapped sum's state (NULL: the
 * blocking sum after the passes) */
static ampc_status accumulate_dp(ampc_trainer *T, ampc_model *m, const ampc_accum *a,
                                 ampc_batch_fn next, void *user, ampc_losses *mean, ovl_ctx *oc) {
  const ampc_comm *c = a->comm;
  const int size = c ? c->size : 1;
  const int64_t n_micro = a->micro_batches, K = n_micro * size;
  ampc_params *P = ampc_trainer_params(T); /* on a device, its table: every read of P->grad
                                              goes through the backend */
  const ampc_backend *be = ampc_device_backend(T->device);
  /* ZeRO-1, one micro-batch: the sum scattered from the working dtype into
   * the stage, which holds this rank's shard (ampc_accum_stage_bytes) */
  const bool zero_direct = T->zero && size > 1 && n_micro == 1 && !a->per_loss && !oc &&
                           a->reduce == AMPC_REDUCE_F32 && a->zero;
  const bool staged = !zero_direct && ampc_accum_stage_bytes(a, P->total) > 0;
  if ((staged || (zero_direct && P->shard_n > 0)) && !a->stage)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_train_accumulate_dp: no FP32 staging buffer");
  if (a->per_loss != (T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_LOSS))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_train_accumulate_dp: the accumulation's per_loss and the trainer's "
                     "--loss-scale disagree");
  /* the scaler's plan: the seeds of K passes (per loss or per branch) */
  bool term_on[AMPC_BRANCH_COUNT] = {false, false, false, false};
  for (int t = 0; t < m->n_terms && t < AMPC_BRANCH_COUNT; t++)
    term_on[t] = m->term_on[t];
  ampc_scale_plan *plan = &T->plan;
  ampc_scaler_plan(&T->scaler, plan, K, a->loss_multiplier > 0.0f ? a->loss_multiplier : 1.0f,
                   term_on, a->per_loss ? a->stage : NULL);
  ampc_trainer_zero_grad(T);
  const bool per_branch = T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_BRANCH;
  const float w = 1.0f / (float)K;
  const ampc_grads grads = {P->grad, P->wdt, P->total, P->p, P->count};
  const ampc_unscale_ops ops = {
      .check = be->grad_unscale_check, .stage = be->stage_f32, .ws = &T->unscale_ws};
  memset(mean, 0, sizeof *mean);
  for (int64_t k = 0; k < n_micro; k++) {
    if (staged && k > 0)
      ampc_trainer_zero_grad(T);
    ampc_batch bt;
    AMPC_TRY(next(user, k, &bt));
    ampc_losses L;
    AMPC_TRY(m->ops->forward(m, &bt, &L));
    const bool ovl_now = oc && k == n_micro - 1; /* the last pass: its sum overlapped */
    if (ovl_now) {
      oc->first = k == 0;
      const double t0 = ampc_now_s();
      AMPC_TRY(c->ovl_begin(c->user, a->stage, P->total));
      oc->call_s += ampc_now_s() - t0;
      model_grad_ready(m, ovl_ready, oc);
      const ampc_status st = m->ops->backward(m, plan->loss_seed);
      model_grad_ready(m, NULL, NULL);
      AMPC_TRY(st);
      AMPC_TRY(oc->st);
      AMPC_TRY(ovl_rest(oc));
    } else if (a->per_loss) {
      /* one backward pass per loss term, each at its own scale, handed to
       * the scaler, which checks it and unscales it into the FP32 stage
       * (apex's loss_id with FP32 master grads) */
      for (int t = 0; t < m->n_terms; t++) {
        if (!m->term_on[t])
          continue;
        ampc_trainer_zero_grad(T);
        if (m->ops->backward_losses) {
          float seeds[AMPC_MM_LOSSES] = {0.0f, 0.0f, 0.0f, 0.0f};
          seeds[t] = plan->seed[t];
          AMPC_TRY(m->ops->backward_losses(m, seeds));
        } else {
          AMPC_TRY(m->ops->backward(m, plan->seed[t]));
        }
        AMPC_TRY(ampc_scaler_take_term(plan, t, &grads, &ops));
      }
      if (k == 0 && !plan->summed) /* no term on: a zero gradient */
        AMPC_TRY(be->zero(a->stage, (size_t)P->total * sizeof(float)));
    } else if (per_branch && m->ops->backward_branches) {
      AMPC_TRY(m->ops->backward_branches(m, plan->seed));
    } else {
      AMPC_TRY(m->ops->backward(m, plan->loss_seed));
    }
    if (staged && !a->per_loss && !ovl_now)
      AMPC_TRY(be->stage_f32(P->total, P->grad, P->wdt, 1.0f, k == 0, a->stage));
    mean->total += w * L.total;
    mean->n_parts = L.n_parts;
    for (int i = 0; i < L.n_parts; i++) {
      mean->part_name[i] = L.part_name[i];
      mean->part[i] += w * L.part[i];
    }
  }
  if (a->before_reduce)
    AMPC_TRY(staged ? a->before_reduce(a->hook_user, a->stage, AMPC_F32, P->total)
                    : a->before_reduce(a->hook_user, P->grad, P->wdt, P->total));
  if (size > 1 && T->zero && !staged && !zero_direct)
    return ampc_fail(
        AMPC_ERR_UNSUPPORTED,
        "ZeRO-1 sums the gradients in FP32 (--allreduce f32), not in the working dtype");
  /* a group of one sums only where the device sums are forced on
   * (AMPC_NCCL_ONE_RANK, ampc_dist_use_device: the one-GPU check of NCCL) */
  if (size > 1 || (c && be->device && comm_on_device(c))) {
    const double t0 = ampc_now_s();
    if (oc) /* the whole sum on every rank (under ZeRO-1 too: each uses its shard) */
      AMPC_TRY(c->ovl_wait(c->user));
    else if (zero_direct)
      AMPC_TRY(c->sum_f32_ordered_scatter_from(c->user, P->grad, P->wdt, a->stage, T->zero_bounds));
    else if (T->zero) /* each rank gets its shard of the rank-order sum */
      AMPC_TRY(c->sum_f32_ordered_scatter(c->user, a->stage, T->zero_bounds));
    else if (staged)
      AMPC_TRY(reduce_ranks(c, be, a->host, a->stage, AMPC_F32, P->total, true));
    else
      AMPC_TRY(reduce_ranks(c, be, a->host, P->grad, P->wdt, P->total, false));
    if (a->reduce_wait_s)
      *a->reduce_wait_s += ampc_now_s() - t0 + (oc ? oc->call_s : 0.0);
    float l[1 + AMPC_LOSS_PARTS_MAX];
    l[0] = mean->total;
    for (int i = 0; i < mean->n_parts; i++)
      l[1 + i] = mean->part[i];
    AMPC_TRY(c->sum_f32_ordered(c->user, l, 1 + mean->n_parts));
    mean->total = l[0];
    for (int i = 0; i < mean->n_parts; i++)
      mean->part[i] = l[1 + i];
  }
  if (a->per_loss) {
    /* the scaler's finish reads the unscaled FP32 sum; a term that
     * overflowed on any rank overflowed for all */
    if (size > 1) {
      double nfv[AMPC_BRANCH_COUNT];
      for (int t = 0; t < AMPC_BRANCH_COUNT; t++)
        nfv[t] = plan->nonfinite[t] ? 1.0 : 0.0;
      AMPC_TRY(c->max_f64(c->user, nfv, AMPC_BRANCH_COUNT));
      for (int t = 0; t < AMPC_BRANCH_COUNT; t++)
        plan->nonfinite[t] = nfv[t] > 0.0;
    }
    return AMPC_OK;
  }
  if (zero_direct) /* the stage is the shard */
    AMPC_TRY(be->convert((char *)P->grad + (size_t)P->shard_lo * ampc_dtype_size(P->wdt), P->wdt,
                         a->stage, AMPC_F32, (size_t)P->shard_n));
  else if (staged && T->zero) /* the shard's: the rest of the gradient is not summed here */
    AMPC_TRY(be->convert((char *)P->grad + (size_t)P->shard_lo * ampc_dtype_size(P->wdt), P->wdt,
                         a->stage + P->shard_lo, AMPC_F32, (size_t)P->shard_n));
  else if (staged) /* one rounding of the whole sum into the working dtype */
    AMPC_TRY(be->convert(P->grad, P->wdt, a->stage, AMPC_F32, (size_t)P->total));
  return AMPC_OK;
}

ampc_status ampc_train_accumulate_dp(ampc_trainer *T, ampc_model *m, const ampc_accum *a,
                                     ampc_batch_fn next, void *user, ampc_losses *mean) {
  if (!T || !m || !m->ops || !a || a->micro_batches < 1 || !next || !mean ||
      (a->reduce != AMPC_REDUCE_F32 && a->reduce != AMPC_REDUCE_WORKING))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_train_accumulate_dp: bad arguments");
  const ampc_comm *c = a->comm;
  /* the test hooks (before_reduce) see the whole sum first: no overlap */
  if (!a->overlap || !c || c->size < 2 || a->before_reduce)
    return accumulate_dp(T, m, a, next, user, mean, NULL);
  if (a->reduce != AMPC_REDUCE_F32 || a->per_loss ||
      T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_BRANCH || ampc_device_backend(T->device)->device)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--overlap on: the overlapped sum needs --allreduce f32, one loss scale (not "
                     "--loss-scale per-loss or per-branch) and --device cpu");
  if (!(c->ovl_begin && c->ovl_range && c->ovl_progress && c->ovl_wait))
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "--overlap on: the communicator has no overlapped sum (ovl_*)");
  const ampc_params *P = ampc_trainer_params(T);
  ovl_ctx oc = {.c = c,
                .be = ampc_device_backend(T->device),
                .P = P,
                .stage = a->stage,
                .st = AMPC_OK,
                .cap = P->count};
  int64_t *buf = malloc(2 * (size_t)P->count * sizeof *buf);
  if (!buf)
    return ampc_fail(AMPC_ERR_NOMEM, "the overlapped gradient sum: out of memory");
  oc.lo = buf, oc.hi = buf + P->count;
  const ampc_status st = accumulate_dp(T, m, a, next, user, mean, &oc);
  model_grad_ready(m, NULL, NULL); /* an error may have left it set */
  free(buf);
  return st;
}

ampc_status ampc_train_step(ampc_trainer *T, ampc_model *m, int64_t n_micro, ampc_batch_fn next,
                            void *user, ampc_losses *mean, ampc_step_info *info) {
  if (!info)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_train_step: info is NULL");
  AMPC_TRY(ampc_train_accumulate(T, m, n_micro, next, user, mean));
  AMPC_TRY(ampc_trainer_step(T, info));
  return m->fp8 ? ampc_fp8_sites_update(m->fp8) : AMPC_OK;
}

/* ---- what a checkpoint and a log say about a model ------------------------------------ */

int ampc_model_checkpoint_meta(const ampc_model_desc *d, const char *data_name,
                               ampc_model_meta_storage *storage, ampc_st_meta meta[3]) {
  meta[0] = (ampc_st_meta){"ampc.model", d->kind == AMPC_MODEL_MM ? d->mm.name : d->name};
  if (d->kind != AMPC_MODEL_MM)
    return 1;
  const ampc_mmodel_config *mc = &d->mm;
  /* read back by ampc_model_desc_from_checkpoint */
  snprintf(storage->config, sizeof storage->config,
           "{\"model\":\"%s\",\"vocab\":%lld,\"seq_len\":%lld,\"classes\":%lld,\"w_itc\":%g,"
           "\"w_itm\":%g,\"w_cls\":%g",
           mc->name, (long long)mc->vocab, (long long)mc->seq_len, (long long)mc->classes,
           (double)mc->w_itc, (double)mc->w_itm, (double)mc->w_cls);
  size_t used = strlen(storage->config);
  if (mc->w_mlm > 0.0f && !mc->image_only) { /* absent: off, as in checkpoints from before MLM */
    snprintf(storage->config + used, sizeof storage->config - used,
             ",\"w_mlm\":%.9g,\"mlm_prob\":%.9g", (double)mc->w_mlm, (double)mc->mlm_prob);
    used = strlen(storage->config);
  }
  /* the caller's attn_cast (ampc train: as in effect); absent in checkpoints
   * from before it was recorded */
  snprintf(storage->config + used, sizeof storage->config - used, ",\"attention_cast\":%s",
           mc->attn_cast ? "true" : "false");
  used = strlen(storage->config);
  ampc_mmodel_config preset;
  if (ampc_mmodel_config_get(mc->name, mc->vocab, mc->seq_len, mc->classes, &preset) == AMPC_OK &&
      (preset.img != mc->img || preset.patch != mc->patch)) { /* absent: the preset's */
    snprintf(storage->config + used, sizeof storage->config - used,
             ",\"image_size\":%lld,\"patch\":%lld", (long long)mc->img, (long long)mc->patch);
    used = strlen(storage->config);
  }
  snprintf(storage->config + used, sizeof storage->config - used, "}");
  meta[1] = (ampc_st_meta){"ampc.model_config", storage->config};
  meta[2] = (ampc_st_meta){"ampc.data", data_name ? data_name : ""};
  return 3;
}

char *ampc_mmodel_metrics_json(const ampc_mmodel_metrics *m) {
  cJSON *x = cJSON_CreateObject();
  if (!x || !m) {
    cJSON_Delete(x);
    return NULL;
  }
  cJSON_AddNumberToObject(x, "samples", (double)m->samples);
  cJSON_AddNumberToObject(x, "concepts", (double)m->concepts);
  cJSON_AddNumberToObject(x, "i2t_r1", m->i2t_r1);
  cJSON_AddNumberToObject(x, "i2t_r5", m->i2t_r5);
  cJSON_AddNumberToObject(x, "t2i_r1", m->t2i_r1);
  cJSON_AddNumberToObject(x, "t2i_r5", m->t2i_r5);
  cJSON_AddNumberToObject(x, "chance_r1", m->concepts ? 1.0 / (double)m->concepts : 0.0);
  cJSON_AddNumberToObject(x, "itm_acc", m->itm_acc);
  cJSON_AddNumberToObject(x, "itm_acc_random", m->itm_acc_random);
  cJSON_AddNumberToObject(x, "group_acc", m->cls_acc);
  if (m->mlm > 0.0) { /* masked caption modelling */
    cJSON_AddNumberToObject(x, "loss_mlm", m->mlm);
    cJSON_AddNumberToObject(x, "mlm_acc", m->mlm_acc);
  }
  cJSON_AddNumberToObject(x, "loss", m->loss);
  cJSON_AddNumberToObject(x, "itc", m->itc);
  cJSON_AddNumberToObject(x, "itm", m->itm);
  cJSON_AddNumberToObject(x, "cls", m->cls);
  char *s = cJSON_PrintUnformatted(x);
  cJSON_Delete(x);
  return s;
}

/* ---- the model kinds as the run sees them ------------------------------------------- *
 * What a run does differently per model kind (run_kind, src/train/run_internal.h):
 * the data it takes, how it samples and gathers a micro-batch, and its part
 * of the log's lines. The run itself never asks which kind it has. */

bool run_attn_cast(const ampc_run *R) {
  return R->kind->attn_cast_asked(&R->md) && ampc_precision_lowp(R->T.amp.precision) != AMPC_F32;
}

/* ---- the MLP on dense features ---- */

static const char *mlp_name(const ampc_model_desc *md) { return md->name; }
static bool mlp_attn_cast_asked(const ampc_model_desc *md) {
  (void)md;
  return false;
}
static int64_t mlp_min_micro_batch(const ampc_model_desc *md) {
  (void)md;
  return 1;
}

static ampc_status mlp_check_data(ampc_run *R) {
  const ampc_run_data *d = &R->data;
  if (!d->x_train || !d->y_train || d->n_train < 1 || d->dim != R->md.mlp.in)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "the mlp model needs dense training features of dimension %lld",
                     (long long)R->md.mlp.in);
  R->ntrain = d->n_train;
  if (R->rc.batch > R->ntrain)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "batch %lld is larger than the training set (%lld samples)",
                     (long long)R->rc.batch, (long long)R->ntrain);
  return AMPC_OK;
}

static ampc_status mlp_check_global_negatives(const ampc_model_desc *md) {
  return ampc_fail(AMPC_ERR_INVALID_ARG, "global negatives: model %s has no contrastive loss",
                   md->name);
}

static ampc_status mlp_feed(ampc_run *R) { /* every row its own group */
  AMPC_TRY(ampc_sample_groups_rows(&R->groups, R->ntrain));
  return ampc_batch_buffers_rows(&R->buf, R->data.dim, R->mb);
}

static void mlp_gather(ampc_run *R, int64_t base, ampc_batch *out) {
  for (int64_t r = 0; r < R->mb; r++)
    ampc_batch_put_row(&R->buf, R->data.x_train, R->data.y_train, r,
                       R->groups.idx[ampc_sampler_index(&R->smp, base + r)]);
  out->labels = R->buf.labels;
  out->features = R->buf.features;
}

static void mlp_log_config(cJSON *run_o, const ampc_run *R) {
  cJSON_AddStringToObject(run_o, "model", R->md.name);
  cJSON_AddNumberToObject(run_o, "in", (double)R->md.mlp.in);
  cJSON_AddNumberToObject(run_o, "hidden", (double)R->md.mlp.hidden);
  cJSON_AddNumberToObject(run_o, "classes", (double)R->md.mlp.classes);
  cJSON_AddNumberToObject(run_o, "train_size", (double)R->data.n_train);
  cJSON_AddNumberToObject(run_o, "test_size", (double)R->data.n_test);
}

static void mlp_log_eval(cJSON *m, const ampc_eval *e) {
  cJSON_AddNumberToObject(m, "test_loss", e->loss);
  cJSON_AddNumberToObject(m, "test_accuracy", e->accuracy);
}

/* the MLP's summary carries the test metrics at its top level */
static void mlp_log_summary(cJSON *o, const ampc_run *R, const run_totals *t) {
  cJSON_AddNumberToObject(o, "test_loss", t->have_eval ? t->ev.loss : (double)NAN);
  cJSON_AddNumberToObject(o, "test_accuracy", t->have_eval ? t->ev.accuracy : (double)NAN);
  cJSON_AddNumberToObject(o, "swallowed_fraction",
                          t->sw.updated ? (double)t->sw.swallowed / (double)t->sw.updated : 0);
  cJSON_AddNumberToObject(o, "wall_s", ampc_now_s() - t->t_start);
  cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
  run_add_memory(o, R);
}

static const run_kind k_mlp_kind = {
    .name = mlp_name,
    .on_device = false,
    .names_model_in_summary = false,
    .attn_cast_asked = mlp_attn_cast_asked,
    .check_data = mlp_check_data,
    .min_micro_batch = mlp_min_micro_batch,
    .check_global_negatives = mlp_check_global_negatives,
    .feed = mlp_feed,
    .gather = mlp_gather,
    .log_config = mlp_log_config,
    .log_eval = mlp_log_eval,
    .log_summary = mlp_log_summary,
};

/* ---- the multimodal models and the ViTs on an image(-text) dataset ---- */

static const char *mm_name(const ampc_model_desc *md) { return md->mm.name; }
static bool mm_attn_cast_asked(const ampc_model_desc *md) { return md->mm.attn_cast; }
/* the contrastive loss needs two samples (the image-only ViTs one) */
static int64_t mm_min_micro_batch(const ampc_model_desc *md) { return md->mm.image_only ? 1 : 2; }

/* the checks of the data against the model, in the order the CLI reported them */
static ampc_status mm_check_data(ampc_run *R) {
  const ampc_run_config *rc = &R->rc;
  const ampc_dataset *D = R->data.dataset;
  const char *dn = R->data.name ? R->data.name : "the dataset";
  if (!D)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "model %s needs a dataset", R->md.name);
  if (R->data.stream) /* a packed dataset: the training split is streamed */
    R->ntrain = R->data.stream_n_train;
  for (int64_t i = 0; i < D->n; i++)
    R->ntrain += D->split[i] == AMPC_SPLIT_TRAIN;
  if (rc->batch > R->ntrain)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "batch %lld is larger than the training split (%lld samples)",
                     (long long)rc->batch, (long long)R->ntrain);
  const ampc_mmodel_config *mc = &R->md.mm;
  AMPC_TRY(ampc_mmodel_check_data(mc, D, dn));
  if (!mc->image_only && rc->eval) { /* something to evaluate on, known now, not at the end */
    int64_t ns = 0, zs = 0, vs = 0;
    for (int64_t i = 0; i < D->n; i++)
      ns += D->split[i] == AMPC_SPLIT_NEW_STYLE, zs += D->split[i] == AMPC_SPLIT_ZERO_SHOT,
          vs += D->split[i] == AMPC_SPLIT_VAL;
    if (R->data.stream && vs < 2)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "%s has %lld val samples, 2 are needed to evaluate (pack with a larger "
                       "--val-fraction, or train with --no-eval)",
                       dn, (long long)vs);
    if (ns < 2 && zs < 2 && vs < 2)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "%s has neither a held-out style (new_style split) nor held-out concepts "
                       "(zero_shot split) with 2 samples to evaluate on (--no-eval trains "
                       "without evaluating)",
                       dn);
  }
  return AMPC_OK;
}

static ampc_status mm_check_global_negatives(const ampc_model_desc *md) {
  return md->mm.image_only ? ampc_fail(AMPC_ERR_INVALID_ARG,
                                       "global negatives: model %s has no contrastive loss "
                                       "(image-only)",
                                       md->mm.name)
                           : AMPC_OK;
}

static const char *itm_negatives(const ampc_run_config *rc) {
  return !rc->itm_sample_negatives ? "hardest" : rc->itm_random_negatives ? "random" : "sampled";
}

/* the concepts as groups, the batch buffers, and the recipe */
static ampc_status mm_feed(ampc_run *R) {
  const ampc_dataset *D = R->data.dataset;
  if (R->data.stream) { /* every streamed sample is its own group, drawn in the stream's order */
    R->groups.count = R->ntrain;
    AMPC_TRY(ampc_batch_buffers_pairs(&R->buf, D, R->mb));
    if (R->rc.augment_shift > 0 && !(R->stream_raw = malloc((size_t)(R->mb * R->buf.img_sz))))
      return ampc_fail(AMPC_ERR_NOMEM, "out of memory for the stream's batch");
    snprintf(R->held_out, sizeof R->held_out, "none");
    snprintf(R->recipe, sizeof R->recipe, "held_out=none;shift=%d;itm=%s;pack=%s",
             R->rc.augment_shift, itm_negatives(&R->rc),
             R->data.pack_id ? R->data.pack_id : "unknown");
    return AMPC_OK;
  }
  AMPC_TRY(ampc_sample_groups_concepts(&R->groups, D));
  AMPC_TRY(ampc_batch_buffers_pairs(&R->buf, D, R->mb));
  const char *h = "none";
  for (int64_t i = 0; i < D->n; i++)
    if (D->split[i] == AMPC_SPLIT_NEW_STYLE) {
      const char *nm = ampc_dataset_style_name(D, D->style[i]);
      h = nm ? nm : "unnamed";
      break;
    }
  snprintf(R->held_out, sizeof R->held_out, "%s", h);
  snprintf(R->recipe, sizeof R->recipe, "held_out=%s;shift=%d;itm=%s", R->held_out,
           R->rc.augment_shift, itm_negatives(&R->rc));
  return AMPC_OK;
}

/* a streamed micro-batch: positions base .. base + mb - 1 of the stream's
 * order, the next one prefetched while this one trains */
static void mm_gather_stream(ampc_run *R, int64_t base) {
  const ampc_dataset *D = R->data.dataset;
  const int64_t slice = R->rc.batch / R->size, it_base = R->it_no * R->rc.batch + R->rank * slice;
  const int64_t next = base + R->mb < it_base + slice ? base + R->mb : it_base + R->rc.batch;
  const int s = R->rc.augment_shift;
  uint8_t *dst = s > 0 ? R->stream_raw : R->buf.images;
  R->data_wait_ms +=
      ampc_stream_fill(R->data.stream, base, R->mb, dst, R->buf.tokens, R->buf.labels, next);
  for (int64_t r = 0; s > 0 && r < R->mb; r++)
    ampc_image_shift(R->buf.images + r * R->buf.img_sz, dst + r * R->buf.img_sz, D->height,
                     D->width, D->channels, s, ampc_sample_hash(R->rc.seed, base + r) >> 32);
}

static void mm_gather(ampc_run *R, int64_t base, ampc_batch *out) {
  const ampc_dataset *D = R->data.dataset;
  if (R->data.stream)
    mm_gather_stream(R, base);
  for (int64_t r = 0; !R->data.stream && r < R->mb; r++) {
    uint64_t h;
    const int64_t src = ampc_sample_draw(&R->smp, &R->groups, R->rc.seed, base + r, &h);
    ampc_batch_put_pair(&R->buf, D, r, src, R->rc.augment_shift, h >> 32);
  }
  out->labels = R->buf.labels;
  out->images = R->buf.images;
  out->tokens = R->buf.tokens;
  out->neg_uniform = R->rc.itm_random_negatives;
  if (R->rc.itm_sample_negatives) /* never 0, which asks for the hardest negatives */
    out->neg_seed = ampc_sample_hash(R->rc.seed ^ 0xA5A5A5A5ull, base) | 1u;
  out->mask_seed = ampc_sample_hash(R->rc.seed ^ 0x5A5A5A5A3C3C3C3Cull, base) | 1u; /* MLM */
}

static void mm_log_config(cJSON *run_o, const ampc_run *R) {
  const ampc_dataset *D = R->data.dataset;
  const ampc_mmodel_config *mc = &R->md.mm;
  cJSON_AddStringToObject(run_o, "model", mc->name);
  cJSON_AddStringToObject(run_o, "data", R->data.name ? R->data.name : "");
  cJSON_AddNumberToObject(run_o, "train_samples", (double)R->ntrain);
  cJSON_AddNumberToObject(run_o, "train_concepts", (double)R->groups.count);
  cJSON_AddStringToObject(run_o, "held_out_style", R->held_out);
  if (R->data.stream) { /* a packed dataset: the model follows its image size */
    cJSON_AddBoolToObject(run_o, "streamed", true);
    cJSON_AddNumberToObject(run_o, "image_size", (double)mc->img);
    cJSON_AddNumberToObject(run_o, "patch", (double)mc->patch);
  }
  cJSON_AddNumberToObject(run_o, "augment_shift", (double)R->rc.augment_shift);
  cJSON_AddStringToObject(run_o, "itm_negatives", itm_negatives(&R->rc));
  cJSON_AddNumberToObject(run_o, "vocab", (double)D->vocab);
  cJSON_AddNumberToObject(run_o, "seq_len", (double)D->seq_len);
  cJSON_AddNumberToObject(run_o, "classes", (double)D->n_classes);
  cJSON_AddNumberToObject(run_o, "w_itc", (double)mc->w_itc);
  cJSON_AddNumberToObject(run_o, "w_itm", (double)mc->w_itm);
  cJSON_AddNumberToObject(run_o, "w_cls", (double)mc->w_cls);
  if (mc->w_mlm > 0.0f) { /* masked caption modelling (absent: off, as in older logs) */
    cJSON_AddNumberToObject(run_o, "w_mlm", (double)mc->w_mlm);
    cJSON_AddNumberToObject(run_o, "mlm_prob", (double)mc->mlm_prob);
  }
  cJSON_AddNumberToObject(run_o, "activation_bytes",
                          (double)(R->model.activation_bytes + R->model.workspace_bytes));
  cJSON_AddBoolToObject(run_o, "recompute", !mc->no_recompute);
  /* in effect: on, under 16-bit activations (absent in older logs: off) */
  cJSON_AddBoolToObject(run_o, "attention_cast", run_attn_cast(R));
}

/* retrieval (image-text) or the class head (the ViTs) */
static void mm_log_eval(cJSON *m, const ampc_eval *e) {
  if (e->kind == AMPC_EVAL_RETRIEVAL) {
    if (e->val.samples > 0)
      run_add_mm_metrics(m, "val", &e->val);
    if (e->prompt_classes > 0) {
      cJSON_AddNumberToObject(m, "zero_shot_accuracy", e->prompt_acc);
      cJSON_AddNumberToObject(m, "zero_shot_classes", (double)e->prompt_classes);
    }
    run_add_mm_metrics(m, "new_style", &e->new_style);
    run_add_mm_metrics(m, "zero_shot", &e->zero_shot);
  } else {
    cJSON_AddNumberToObject(m, "test_accuracy", e->accuracy);
    cJSON_AddNumberToObject(m, "test_loss", e->loss);
    cJSON_AddNumberToObject(m, "test_samples", (double)e->samples);
  }
}

static void mm_log_summary(cJSON *o, const ampc_run *R, const run_totals *t) {
  const ampc_trainer *T = &R->T;
  cJSON_AddNumberToObject(o, "ms_per_step_mean", t->ms_n ? t->ms_sum / (double)t->ms_n : 0.0);
  if (R->data.stream)
    cJSON_AddNumberToObject(o, "data_wait_ms_mean", t->ms_n ? t->wait_sum / (double)t->ms_n : 0.0);
  cJSON_AddNumberToObject(o, "wall_s", ampc_now_s() - t->t_start);
  cJSON_AddNumberToObject(o, "activation_bytes",
                          (double)(R->model.activation_bytes + R->model.workspace_bytes));
  size_t pbytes = 0;
  for (int r = 0; r < AMPC_ROLE_COUNT; r++)
    pbytes += T->params.bytes[r];
  cJSON_AddNumberToObject(o, "parameter_state_bytes", (double)pbytes);
  run_add_memory(o, R);
  cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
  if (t->have_eval)
    mm_log_eval(cJSON_AddObjectToObject(o, "metrics"), &t->ev);
}

static const run_kind k_mm_kind = {
    .name = mm_name,
    .on_device = true,
    .names_model_in_summary = true,
    .attn_cast_asked = mm_attn_cast_asked,
    .check_data = mm_check_data,
    .min_micro_batch = mm_min_micro_batch,
    .check_global_negatives = mm_check_global_negatives,
    .feed = mm_feed,
    .gather = mm_gather,
    .log_config = mm_log_config,
    .log_eval = mm_log_eval,
    .log_summary = mm_log_summary,
};

const run_kind *run_kind_of(const ampc_model_desc *md) {
  return md->kind == AMPC_MODEL_MM ? &k_mm_kind : md->kind == AMPC_MODEL_MLP ? &k_mlp_kind : NULL;
}
