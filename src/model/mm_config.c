/*
 * src/model/mm_config.c: the multimodal model's named configurations
 * (mm-tiny, mm-small, mm-base, mm-large, mm-micro, vit-ref, vit-fm, vit-micro:
 * ampc_mmodel_names) and its parameter specs
 * (PyTorch-style names, shapes, branches, initialisations). The model itself
 * is described in src/model/mm.c.
 */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/data.h" /* AMPC_TOKEN_PAD */
#include "ampc/model.h"
#include "ampc/nn.h"
#include "model/mm_impl.h"
#include "numeric/numeric.h"

/* ---- configurations ------------------------------------------------------------ */

/* The names ampc_mmodel_config_get knows, in the order lists show them. */
static const char *const k_mm_names[] = {"mm-tiny", "mm-small", "mm-base",   "mm-large", "mm-micro",
                                         "vit-ref", "vit-fm",   "vit-micro", NULL};

const char *const *ampc_mmodel_names(void) { return k_mm_names; }

const char *ampc_mmodel_list(char *buf, size_t cap, int height, int width, int channels, int text) {
  if (!buf || cap == 0)
    return buf;
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; k_mm_names[i]; i++) {
    /* no filter: the names alone (ampc_mmodel_config_get's error lists
     * them, and must not call itself back) */
    ampc_mmodel_config c = {.img = 0};
    if ((height > 0 || text >= 0) &&
        (ampc_mmodel_config_get(k_mm_names[i], 3, 1, 2, &c) != AMPC_OK ||
         (height > 0 && (c.img != height || c.img != width || c.channels != channels)) ||
         (text == 0 && !c.image_only) || (text == 1 && c.image_only)))
      continue;
    const int n = snprintf(buf + at, cap - at, "%s%s", at ? ", " : "", k_mm_names[i]);
    at += n > 0 ? (size_t)n : 0;
    if (at >= cap)
      break;
  }
  if (!buf[0])
    snprintf(buf, cap, "none");
  return buf;
}

ampc_status ampc_mmodel_config_get(const char *name, int64_t vocab, int64_t seq_len,
                                   int64_t classes, ampc_mmodel_config *out) {
  const bool image_only =
      name && (!strcmp(name, "vit-ref") || !strcmp(name, "vit-fm") || !strcmp(name, "vit-micro"));
  if (!name || !out || (!image_only && (vocab < 3 || seq_len < 1)) || classes < 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "model config: bad vocab %lld / seq_len %lld / "
                     "classes %lld",
                     (long long)vocab, (long long)seq_len, (long long)classes);
  ampc_mmodel_config c = {.img = 32,
                          .patch = 4,
                          .channels = 3,
                          .dim = 128,
                          .heads = 4,
                          .mlp = 512,
                          .v_depth = 4,
                          .t_depth = 3,
                          .f_depth = 1,
                          .embed = 64,
                          .w_itc = 1.0f,
                          .w_itm = 1.0f,
                          .w_cls = 1.0f,
                          .w_mlm = 0.0f,
                          .mlm_prob = 0.15f};
  if (strcmp(name, "mm-tiny") == 0) {
  } else if (strcmp(name, "mm-small") == 0) {
    c.dim = 192, c.heads = 6, c.mlp = 768, c.v_depth = 6, c.t_depth = 4, c.f_depth = 2;
  } else if (strcmp(name, "mm-base") == 0) { /* the GPU-sized model: 59 M parameters */
    c.dim = 512, c.heads = 8, c.mlp = 2048, c.v_depth = 8, c.t_depth = 8, c.f_depth = 2;
    c.embed = 256;
  } else if (strcmp(name, "mm-large") == 0) { /* the top of the GPU-sized range: 188 M parameters */
    c.dim = 768, c.heads = 12, c.mlp = 3072, c.v_depth = 12, c.t_depth = 12, c.f_depth = 2;
    c.embed = 256;
  } else if (strcmp(name, "vit-ref") == 0) { /* the step benchmark's ViT: 32x32x3, patch 8 */
    c.patch = 8, c.image_only = true;
  } else if (strcmp(name, "vit-fm") == 0) { /* the same encoder on Fashion-MNIST's 28x28x1 */
    c.img = 28, c.channels = 1, c.image_only = true;
  } else if (strcmp(name, "vit-micro") == 0) { /* for gradient checks */
    c.img = 8, c.dim = 16, c.heads = 2, c.mlp = 32, c.v_depth = 1, c.image_only = true;
  } else if (strcmp(name, "mm-micro") == 0) {
    c.img = 8, c.dim = 16, c.heads = 2, c.mlp = 32, c.v_depth = 1, c.t_depth = 1, c.f_depth = 1;
    c.embed = 8;
  } else {
    char list[160];
    return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown model '%s' (available: %s)", name,
                     ampc_mmodel_list(list, sizeof list, 0, 0, 0, -1));
  }
  snprintf(c.name, sizeof c.name, "%s", name);
  c.vocab = image_only ? 0 : vocab, c.seq_len = image_only ? 0 : seq_len, c.classes = classes;
  *out = c;
  return AMPC_OK;
}

/* ---- parameter specs ------------------------------------------------------------ */

typedef struct {
  ampc_mmodel_specs *s;
  int cap;
} spec_builder;

static void add_spec(spec_builder *B, ampc_branch br, ampc_init init, float arg, bool no_decay,
                     int ndim, int64_t d0, int64_t d1, const char *fmt, ...) AMPC_PRINTF(9, 10);

static void add_spec(spec_builder *B, ampc_branch br, ampc_init init, float arg, bool no_decay,
                     int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
  ampc_mmodel_specs *s = B->s;
  if (s->n >= B->cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->names[s->n], AMPC_PARAM_NAME_MAX, fmt, ap);
  va_end(ap);
  ampc_param_spec *p = &s->specs[s->n];
  memset(p, 0, sizeof *p);
  p->name = s->names[s->n];
  p->ndim = ndim;
  p->shape[0] = d0;
  p->shape[1] = d1;
  p->branch = br;
  p->init = init;
  p->init_arg = arg;
  p->no_decay = no_decay;
  s->n++;
}

static void block_specs(spec_builder *B, const ampc_mmodel_config *c, ampc_branch br,
                        const char *prefix, int i, bool cross) {
  const int64_t d = c->dim;
  const char *att = cross ? "cross_attn" : "attn";
  add_spec(B, br, AMPC_INIT_ONES, 0, true, 1, d, 0, "%s.blocks.%d.norm1.weight", prefix, i);
  add_spec(B, br, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "%s.blocks.%d.norm1.bias", prefix, i);
  add_spec(B, br, AMPC_INIT_NORMAL, 0.02f, false, 2, 3 * d, d, "%s.blocks.%d.%s.in_proj_weight",
           prefix, i, att);
  add_spec(B, br, AMPC_INIT_ZEROS, 0, true, 1, 3 * d, 0, "%s.blocks.%d.%s.in_proj_bias", prefix, i,
           att);
  add_spec(B, br, AMPC_INIT_NORMAL, 0.02f, false, 2, d, d, "%s.blocks.%d.%s.out_proj.weight",
           prefix, i, att);
  add_spec(B, br, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "%s.blocks.%d.%s.out_proj.bias", prefix, i,
           att);
  add_spec(B, br, AMPC_INIT_ONES, 0, true, 1, d, 0, "%s.blocks.%d.norm2.weight", prefix, i);
  add_spec(B, br, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "%s.blocks.%d.norm2.bias", prefix, i);
  add_spec(B, br, AMPC_INIT_NORMAL, 0.02f, false, 2, c->mlp, d, "%s.blocks.%d.mlp.fc1.weight",
           prefix, i);
  add_spec(B, br, AMPC_INIT_ZEROS, 0, true, 1, c->mlp, 0, "%s.blocks.%d.mlp.fc1.bias", prefix, i);
  add_spec(B, br, AMPC_INIT_NORMAL, 0.02f, false, 2, d, c->mlp, "%s.blocks.%d.mlp.fc2.weight",
           prefix, i);
  add_spec(B, br, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "%s.blocks.%d.mlp.fc2.bias", prefix, i);
}

static int spec_count(const ampc_mmodel_config *c) {
  if (c->image_only)
    return 4 + 2 + 2 + PER_BLOCK * (int)c->v_depth;
  return 6 + 4 + 2 + 7 + (c->w_mlm > 0.0f ? 2 : 0) +
         PER_BLOCK * (int)(c->v_depth + c->t_depth + c->f_depth);
}

ampc_status ampc_mmodel_specs_make(const ampc_mmodel_config *c, ampc_mmodel_specs *out) {
  if (!c || !out || c->v_depth < 1 || c->v_depth > MAX_DEPTH ||
      (!c->image_only &&
       (c->t_depth < 1 || c->t_depth > MAX_DEPTH || c->f_depth < 1 || c->f_depth > MAX_DEPTH)) ||
      c->dim % c->heads || c->img % c->patch || (!c->image_only && !(c->w_mlm >= 0.0f)) ||
      (!c->image_only && c->w_mlm > 0.0f && !(c->mlm_prob > 0.0f && c->mlm_prob <= 1.0f)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "model specs: bad configuration");
  const int cap = spec_count(c);
  memset(out, 0, sizeof *out);
  out->specs = calloc((size_t)cap, sizeof *out->specs);
  out->names = calloc((size_t)cap, sizeof *out->names);
  if (!out->specs || !out->names) {
    ampc_mmodel_specs_free(out);
    return ampc_fail(AMPC_ERR_NOMEM, "model specs: out of memory");
  }
  spec_builder B = {out, cap};
  const int64_t d = c->dim, np = (c->img / c->patch) * (c->img / c->patch);
  const int64_t pin = c->channels * c->patch * c->patch;
  const ampc_branch V = AMPC_BRANCH_VISION, Tb = AMPC_BRANCH_TEXT, F = AMPC_BRANCH_FUSION,
                    H = AMPC_BRANCH_HEADS;
  add_spec(&B, V, AMPC_INIT_NORMAL, 0.02f, false, 2, d, pin, "vision.patch_embed.weight");
  add_spec(&B, V, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "vision.patch_embed.bias");
  add_spec(&B, V, AMPC_INIT_NORMAL, 0.02f, true, 1, d, 0, "vision.cls_token");
  add_spec(&B, V, AMPC_INIT_NORMAL, 0.02f, true, 2, np + 1, d, "vision.pos_embed");
  for (int i = 0; i < c->v_depth; i++)
    block_specs(&B, c, V, "vision", i, false);
  add_spec(&B, V, AMPC_INIT_ONES, 0, true, 1, d, 0, "vision.norm.weight");
  add_spec(&B, V, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "vision.norm.bias");
  if (c->image_only) {
    add_spec(&B, H, AMPC_INIT_NORMAL, 0.02f, false, 2, c->classes, d, "heads.cls.weight");
    add_spec(&B, H, AMPC_INIT_ZEROS, 0, true, 1, c->classes, 0, "heads.cls.bias");
    return out->n == cap ? AMPC_OK
                         : ampc_fail(AMPC_ERR_INVALID_ARG, "model specs: internal count mismatch");
  }
  add_spec(&B, Tb, AMPC_INIT_NORMAL, 0.02f, true, 2, c->vocab, d, "text.token_embed.weight");
  add_spec(&B, Tb, AMPC_INIT_NORMAL, 0.02f, true, 2, c->seq_len, d, "text.pos_embed.weight");
  for (int i = 0; i < c->t_depth; i++)
    block_specs(&B, c, Tb, "text", i, false);
  add_spec(&B, Tb, AMPC_INIT_ONES, 0, true, 1, d, 0, "text.norm.weight");
  add_spec(&B, Tb, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "text.norm.bias");
  for (int i = 0; i < c->f_depth; i++)
    block_specs(&B, c, F, "fusion", i, true);
  add_spec(&B, F, AMPC_INIT_ONES, 0, true, 1, d, 0, "fusion.norm.weight");
  add_spec(&B, F, AMPC_INIT_ZEROS, 0, true, 1, d, 0, "fusion.norm.bias");
  add_spec(&B, H, AMPC_INIT_NORMAL, 0.02f, false, 2, c->embed, d, "heads.image_proj.weight");
  add_spec(&B, H, AMPC_INIT_NORMAL, 0.02f, false, 2, c->embed, d, "heads.text_proj.weight");
  /* CLIP stores the log of the logit scale, initialised to log(1 / 0.07) */
  add_spec(&B, H, AMPC_INIT_CONST, 2.6592600f, true, 1, 1, 0, "heads.logit_scale");
  add_spec(&B, H, AMPC_INIT_NORMAL, 0.02f, false, 2, 1, d, "heads.itm.weight");
  add_spec(&B, H, AMPC_INIT_ZEROS, 0, true, 1, 1, 0, "heads.itm.bias");
  add_spec(&B, H, AMPC_INIT_NORMAL, 0.02f, false, 2, c->classes, d, "heads.cls.weight");
  add_spec(&B, H, AMPC_INIT_ZEROS, 0, true, 1, c->classes, 0, "heads.cls.bias");
  if (c->w_mlm > 0.0f) { /* the MLM head: vocab logits from the fused text tokens */
    add_spec(&B, H, AMPC_INIT_NORMAL, 0.02f, false, 2, c->vocab, d, "heads.mlm.weight");
    add_spec(&B, H, AMPC_INIT_ZEROS, 0, true, 1, c->vocab, 0, "heads.mlm.bias");
  }
  if (out->n != cap) {
    ampc_mmodel_specs_free(out);
    return ampc_fail(AMPC_ERR_INVALID_ARG, "model specs: internal count mismatch");
  }
  return AMPC_OK;
}

void ampc_mmodel_specs_free(ampc_mmodel_specs *s) {
  if (!s)
    return;
  free(s->specs);
  free(s->names);
  memset(s, 0, sizeof *s);
}
