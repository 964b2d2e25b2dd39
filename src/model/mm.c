/*
 * src/model/mm.c: the multimodal image-text model (issue 6, DESIGN.md 1).
 *
 *   vision encoder  ViT (Dosovitskiy et al. 2021): patch embedding, CLS token,
 *                   learned positions, pre-norm blocks, final layer norm
 *   text encoder    token + position embedding, pre-norm blocks with a
 *                   key-padding mask, final layer norm, masked mean pooling
 *   fusion          blocks in which text tokens cross-attend to the image
 *                   tokens (ALBEF, Li et al. 2021), then an image-text
 *                   matching (ITM) head on the pooled fused text
 *   heads           contrastive projections (CLIP, Radford et al. 2021) with
 *                   a learnable log temperature, a group classifier on CLS
 *   loss            w_itc InfoNCE + w_itm BCE(ITM on positives and in-batch
 *                   hard negatives) + w_cls CE(group)
 *
 * Dtypes come from the autocast policy (src/amp/policy.c): the residual
 * stream is stored in the residual-add dtype (FP32 in the mixed presets),
 * GEMM-type outputs in the 16-bit dtype; ops on autocast's FP32 list (layer
 * norm, pooling, L2 norm) compute in FP32 and, where a GEMM reads their
 * output, write it directly in the GEMM's input dtype (the same single
 * rounding as autocast's cast). Gradients are stored in the working dtype
 * (DESIGN.md 2); where several paths meet (CLS, image tokens, text tokens,
 * positions) they are summed in FP32 and rounded once.
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
#include "numeric/numeric.h"

enum { MAX_DEPTH = 16 };
static const float k_ln_eps = 1e-5f;
static const float k_l2_eps = 1e-12f;
static const float k_max_log_scale = 4.6051702f; /* ln 100, CLIP's clamp */

/* ---- configurations ------------------------------------------------------------ */

ampc_status ampc_mm_config_get(const char *name, int64_t vocab, int64_t seq_len, int64_t classes,
                               ampc_mm_config *out) {
  const bool image_only =
      name && (!strcmp(name, "vit-ref") || !strcmp(name, "vit-fm") || !strcmp(name, "vit-micro"));
  if (!name || !out || (!image_only && (vocab < 3 || seq_len < 1)) || classes < 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "model config: bad vocab %lld / seq_len %lld / "
                     "classes %lld",
                     (long long)vocab, (long long)seq_len, (long long)classes);
  ampc_mm_config c = {.img = 32,
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
                      .w_cls = 1.0f};
  if (strcmp(name, "mm-tiny") == 0) {
  } else if (strcmp(name, "mm-small") == 0) {
    c.dim = 192, c.heads = 6, c.mlp = 768, c.v_depth = 6, c.t_depth = 4, c.f_depth = 2;
  } else if (strcmp(name, "vit-ref") == 0) { /* ViT on 32x32x3, patch 8 (issue 8's reference) */
    c.patch = 8, c.image_only = true;
  } else if (strcmp(name, "vit-fm") == 0) { /* the same encoder on Fashion-MNIST's 28x28x1 */
    c.img = 28, c.channels = 1, c.image_only = true;
  } else if (strcmp(name, "vit-micro") == 0) { /* for gradient checks */
    c.img = 8, c.dim = 16, c.heads = 2, c.mlp = 32, c.v_depth = 1, c.image_only = true;
  } else if (strcmp(name, "mm-micro") == 0) {
    c.img = 8, c.dim = 16, c.heads = 2, c.mlp = 32, c.v_depth = 1, c.t_depth = 1, c.f_depth = 1;
    c.embed = 8;
  } else {
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "unknown model '%s' (available: mm-tiny, mm-small, mm-micro, vit-ref, "
                     "vit-fm, vit-micro)",
                     name);
  }
  snprintf(c.name, sizeof c.name, "%s", name);
  c.vocab = image_only ? 0 : vocab, c.seq_len = image_only ? 0 : seq_len, c.classes = classes;
  *out = c;
  return AMPC_OK;
}

/* ---- parameter specs ------------------------------------------------------------ */

typedef struct {
  ampc_mm_specs *s;
  int cap;
} spec_builder;

static void add_spec(spec_builder *B, ampc_branch br, ampc_init init, float arg, bool no_decay,
                     int ndim, int64_t d0, int64_t d1, const char *fmt, ...) AMPC_PRINTF(9, 10);

static void add_spec(spec_builder *B, ampc_branch br, ampc_init init, float arg, bool no_decay,
                     int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
  ampc_mm_specs *s = B->s;
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

static void block_specs(spec_builder *B, const ampc_mm_config *c, ampc_branch br,
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

enum { PER_BLOCK = 12 };

static int spec_count(const ampc_mm_config *c) {
  if (c->image_only)
    return 4 + 2 + 2 + PER_BLOCK * (int)c->v_depth;
  return 6 + 4 + 2 + 7 + PER_BLOCK * (int)(c->v_depth + c->t_depth + c->f_depth);
}

ampc_status ampc_mm_specs_make(const ampc_mm_config *c, ampc_mm_specs *out) {
  if (!c || !out || c->v_depth < 1 || c->v_depth > MAX_DEPTH ||
      (!c->image_only &&
       (c->t_depth < 1 || c->t_depth > MAX_DEPTH || c->f_depth < 1 || c->f_depth > MAX_DEPTH)) ||
      c->dim % c->heads || c->img % c->patch)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "model specs: bad configuration");
  const int cap = spec_count(c);
  memset(out, 0, sizeof *out);
  out->specs = calloc((size_t)cap, sizeof *out->specs);
  out->names = calloc((size_t)cap, sizeof *out->names);
  if (!out->specs || !out->names) {
    ampc_mm_specs_free(out);
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
  if (out->n != cap) {
    ampc_mm_specs_free(out);
    return ampc_fail(AMPC_ERR_INVALID_ARG, "model specs: internal count mismatch");
  }
  return AMPC_OK;
}

void ampc_mm_specs_free(ampc_mm_specs *s) {
  if (!s)
    return;
  free(s->specs);
  free(s->names);
  memset(s, 0, sizeof *s);
}

/* ---- the model's state ------------------------------------------------------------ */

typedef struct { /* parameter indices of one block */
  int n1w, n1b, inw, inb, outw, outb, n2w, n2b, f1w, f1b, f2w, f2b;
} blk_p;

typedef struct { /* saved activations of one block */
  void *ln1, *y, *x1, *ln2, *h, *g, *out;
  float *mean1, *rstd1, *mean2, *rstd2;
  ampc_mha_cache c;
} blk_a;

struct ampc_mm {
  ampc_mm_config c;
  ampc_params *P; /* borrowed: the parameter table (weights read, gradients accumulated) */
  int64_t B, NV, NP, TT, D, E;
  ampc_dtype sdt, adt, gdt, pdt, wdt;
  ampc_acc acc;
  /* parameter indices */
  int patch_w, patch_b, cls_tok, vpos, vn_w, vn_b, tok, tpos, tn_w, tn_b, fn_w, fn_b;
  int iproj, tproj, lscale, itm_w, itm_b, cls_w, cls_b;
  blk_p vb[MAX_DEPTH], tb[MAX_DEPTH], fb[MAX_DEPTH];
  blk_a va[MAX_DEPTH], ta[MAX_DEPTH], fa[MAX_DEPTH];
  /* activations */
  void *patch, *v0, *vfin, *vcls, *iemb, *inorm, *clog;
  float *vmean, *vrstd;
  uint8_t *tmask;
  void *t0, *tfin, *tpool, *temb, *tnorm;
  float *tmean, *trstd;
  float *sim;
  int32_t *neg, *pair_text;
  void *fkv, *f0, *ffin, *fpool, *itm;
  uint8_t *fmask;
  float *fmean, *frstd, *itm_t;
  /* gradient workspaces */
  void *dS, *dS2, *dL, *dH1, *dH2, *dKV, *dKVsum;
  void *dclog, *dvcls, *dvcls2, *ditm, *dfpool, *dsim, *dinorm, *dtnorm, *diemb, *dtemb, *dtpool;
  float *dv32, *dt32, *dsmall32;
  ampc_model_probe probe; /* the telemetry's (probe.on NULL: none) */
  /* what the backward pass needs of the last forward pass */
  ampc_mm_batch fwd; /* the batch (borrowed: valid until the backward pass) */
  float fwd_ls;      /* log-temperature used */
  bool fwd_clamped;  /* it was clamped (zero gradient) */
  bool have_fwd;     /* a forward pass ran since the last backward pass */
  /* one allocation for all of the above */
  void *arena;
  size_t arena_bytes;
};

typedef struct {
  char *base;
  size_t used;
  size_t act_end; /* bytes before the gradient workspaces (set by layout) */
} arena;

static void *take(arena *A, size_t bytes) {
  const size_t off = (A->used + 63) / 64 * 64;
  A->used = off + bytes;
  return A->base ? A->base + off : NULL;
}

static int pidx(const ampc_params *P, const char *fmt, ...) AMPC_PRINTF(2, 3);
static int pidx(const ampc_params *P, const char *fmt, ...) {
  char name[AMPC_PARAM_NAME_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  return ampc_params_find(P, name);
}

static int find_block(const ampc_params *P, const char *prefix, int i, bool cross, blk_p *p) {
  const char *att = cross ? "cross_attn" : "attn";
  p->n1w = pidx(P, "%s.blocks.%d.norm1.weight", prefix, i);
  p->n1b = pidx(P, "%s.blocks.%d.norm1.bias", prefix, i);
  p->inw = pidx(P, "%s.blocks.%d.%s.in_proj_weight", prefix, i, att);
  p->inb = pidx(P, "%s.blocks.%d.%s.in_proj_bias", prefix, i, att);
  p->outw = pidx(P, "%s.blocks.%d.%s.out_proj.weight", prefix, i, att);
  p->outb = pidx(P, "%s.blocks.%d.%s.out_proj.bias", prefix, i, att);
  p->n2w = pidx(P, "%s.blocks.%d.norm2.weight", prefix, i);
  p->n2b = pidx(P, "%s.blocks.%d.norm2.bias", prefix, i);
  p->f1w = pidx(P, "%s.blocks.%d.mlp.fc1.weight", prefix, i);
  p->f1b = pidx(P, "%s.blocks.%d.mlp.fc1.bias", prefix, i);
  p->f2w = pidx(P, "%s.blocks.%d.mlp.fc2.weight", prefix, i);
  p->f2b = pidx(P, "%s.blocks.%d.mlp.fc2.bias", prefix, i);
  const int *q = &p->n1w;
  for (int k = 0; k < PER_BLOCK; k++)
    if (q[k] < 0)
      return 0;
  return 1;
}

/* carve every buffer from the arena (A->base NULL: just count) */
static void layout(ampc_mm *M, arena *A) {
  const int64_t B = M->B, NV = M->NV, NP = M->NP, TT = M->TT, D = M->D, E = M->E;
  const int64_t H = M->c.heads, MLP = M->c.mlp, C = M->c.classes;
  const size_t ss = ampc_dtype_size(M->sdt), as = ampc_dtype_size(M->adt),
               gs = ampc_dtype_size(M->gdt), ps = ampc_dtype_size(M->pdt);
#define TAKE(ptr, n, sz) (ptr) = take(A, (size_t)(n) * (sz))
  struct {
    blk_a *a;
    int64_t depth, b, tq, tk;
  } groups[3] = {{M->va, M->c.v_depth, B, NV, NV},
                 {M->ta, M->c.image_only ? 0 : M->c.t_depth, B, TT, TT},
                 {M->fa, M->c.image_only ? 0 : M->c.f_depth, 2 * B, TT, NV}};
  for (int g = 0; g < 3; g++) {
    for (int64_t i = 0; i < groups[g].depth; i++) {
      blk_a *a = &groups[g].a[i];
      const int64_t rq = groups[g].b * groups[g].tq, rk = groups[g].b * groups[g].tk;
      TAKE(a->ln1, rq * D, as);
      TAKE(a->y, rq * D, as);
      TAKE(a->x1, rq * D, ss);
      TAKE(a->ln2, rq * D, as);
      TAKE(a->h, rq * MLP, as);
      TAKE(a->g, rq * MLP, as);
      TAKE(a->out, rq * D, ss);
      TAKE(a->mean1, rq, sizeof(float));
      TAKE(a->rstd1, rq, sizeof(float));
      TAKE(a->mean2, rq, sizeof(float));
      TAKE(a->rstd2, rq, sizeof(float));
      TAKE(a->c.q, rq * D, as);
      TAKE(a->c.k, rk * D, as);
      TAKE(a->c.v, rk * D, as);
      TAKE(a->c.o, rq * D, as);
      TAKE(a->c.scores, groups[g].b * H * groups[g].tq * groups[g].tk, ps);
      TAKE(a->c.probs, groups[g].b * H * groups[g].tq * groups[g].tk, ps);
    }
  }
  TAKE(M->patch, B * NP * D, as);
  TAKE(M->v0, B * NV * D, ss);
  TAKE(M->vfin, B * NV * D, as);
  TAKE(M->vmean, B * NV, sizeof(float));
  TAKE(M->vrstd, B * NV, sizeof(float));
  TAKE(M->vcls, B * D, as);
  TAKE(M->iemb, B * E, as);
  TAKE(M->inorm, B * E, as);
  TAKE(M->clog, B * C, as);
  TAKE(M->tmask, B * TT, 1);
  TAKE(M->t0, B * TT * D, ss);
  TAKE(M->tfin, B * TT * D, as);
  TAKE(M->tmean, B * TT, sizeof(float));
  TAKE(M->trstd, B * TT, sizeof(float));
  TAKE(M->tpool, B * D, as);
  TAKE(M->temb, B * E, as);
  TAKE(M->tnorm, B * E, as);
  TAKE(M->sim, B * B, sizeof(float));
  TAKE(M->neg, B, sizeof(int32_t));
  TAKE(M->pair_text, 2 * B, sizeof(int32_t));
  TAKE(M->fkv, 2 * B * NV * D, as);
  TAKE(M->f0, 2 * B * TT * D, ss);
  TAKE(M->fmask, 2 * B * TT, 1);
  TAKE(M->ffin, 2 * B * TT * D, as);
  TAKE(M->fmean, 2 * B * TT, sizeof(float));
  TAKE(M->frstd, 2 * B * TT, sizeof(float));
  TAKE(M->fpool, 2 * B * D, as);
  TAKE(M->itm, 2 * B, as);
  TAKE(M->itm_t, 2 * B, sizeof(float));
  A->act_end = A->used; /* what follows are gradient workspaces */
  int64_t R = B * NV;
  if (2 * B * TT > R)
    R = 2 * B * TT;
  TAKE(M->dS, R * D, gs);
  TAKE(M->dS2, R * D, gs);
  TAKE(M->dL, R * D, gs);
  TAKE(M->dH1, R * MLP, gs);
  TAKE(M->dH2, R * MLP, gs);
  TAKE(M->dKV, 2 * B * NV * D, gs);
  TAKE(M->dKVsum, 2 * B * NV * D, sizeof(float));
  TAKE(M->dclog, B * C, gs);
  TAKE(M->dvcls, B * D, gs);
  TAKE(M->dvcls2, B * D, gs);
  TAKE(M->ditm, 2 * B, gs);
  TAKE(M->dfpool, 2 * B * D, gs);
  TAKE(M->dsim, B * B, gs);
  TAKE(M->dinorm, B * E, gs);
  TAKE(M->dtnorm, B * E, gs);
  TAKE(M->diemb, B * E, gs);
  TAKE(M->dtemb, B * E, gs);
  TAKE(M->dtpool, B * D, gs);
  TAKE(M->dv32, B * NV * D, sizeof(float));
  TAKE(M->dt32, B * TT * D, sizeof(float));
  TAKE(M->dsmall32, (NV > TT ? NV : TT) * D + D, sizeof(float));
#undef TAKE
}

void ampc_mm_free(ampc_mm *M) {
  if (!M)
    return;
  free(M->arena);
  free(M);
}

size_t ampc_mm_activation_bytes(const ampc_mm *M) { return M ? M->arena_bytes : 0; }
const ampc_mm_config *ampc_mm_get_config(const ampc_mm *M) { return &M->c; }
int64_t ampc_mm_max_batch(const ampc_mm *M) { return M->B; }

static ampc_dtype policy_out(ampc_precision p, ampc_op_id op) {
  ampc_op_policy r;
  ampc_policy_get(p, op, &r);
  return r.output;
}

/* sizes and dtypes that layout() reads */
static void set_dims(ampc_mm *M, const ampc_mm_config *c, int64_t max_batch, ampc_precision p,
                     ampc_dtype wdt) {
  M->c = *c;
  M->B = max_batch;
  M->NP = (c->img / c->patch) * (c->img / c->patch);
  M->NV = M->NP + 1;
  M->TT = c->seq_len;
  M->D = c->dim;
  M->E = c->embed;
  M->sdt = policy_out(p, AMPC_OPID_RESIDUAL_ADD);
  M->adt = policy_out(p, AMPC_OPID_LINEAR);
  M->pdt = policy_out(p, AMPC_OPID_SOFTMAX);
  M->wdt = wdt;
  M->gdt = wdt;
}

ampc_status ampc_mm_plan_bytes(const ampc_mm_config *c, int64_t batch, ampc_precision p,
                               size_t *activations, size_t *workspace) {
  if (!c || batch < 2 || batch > (1 << 20) || (unsigned)p >= AMPC_PRECISION_COUNT ||
      c->v_depth < 1 || c->v_depth > MAX_DEPTH || c->t_depth > MAX_DEPTH ||
      c->f_depth > MAX_DEPTH || c->patch < 1 || c->img % c->patch || c->dim < 1 || c->heads < 1 ||
      c->dim % c->heads)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mm_plan_bytes: bad arguments (batch %lld)",
                     (long long)batch);
  ampc_mm *M = calloc(1, sizeof *M);
  if (!M)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mm_plan_bytes: out of memory");
  set_dims(M, c, batch, p, ampc_precision_lowp(p));
  arena A = {NULL, 0, 0};
  layout(M, &A);
  free(M);
  if (activations)
    *activations = A.act_end;
  if (workspace)
    *workspace = A.used - A.act_end;
  return AMPC_OK;
}

ampc_status ampc_mm_create(ampc_mm **out, const ampc_mm_config *c, ampc_params *P,
                           const ampc_amp_config *amp, int64_t max_batch) {
  if (!out || !c || !P || !amp || max_batch < 2 || max_batch > (1 << 20))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mm_create: bad arguments (batch %lld)",
                     (long long)max_batch);
  *out = NULL;
  ampc_mm *M = calloc(1, sizeof *M);
  if (!M)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mm_create: out of memory");
  set_dims(M, c, max_batch, amp->precision, P->wdt);
  M->P = P;
  M->acc = amp->accumulate;
  int ok = 1;
#define IDX(field, name) ok = ok && (M->field = ampc_params_find(P, name)) >= 0
  IDX(patch_w, "vision.patch_embed.weight");
  IDX(patch_b, "vision.patch_embed.bias");
  IDX(cls_tok, "vision.cls_token");
  IDX(vpos, "vision.pos_embed");
  IDX(vn_w, "vision.norm.weight");
  IDX(vn_b, "vision.norm.bias");
  IDX(cls_w, "heads.cls.weight");
  IDX(cls_b, "heads.cls.bias");
  if (!c->image_only) {
    IDX(tok, "text.token_embed.weight");
    IDX(tpos, "text.pos_embed.weight");
    IDX(tn_w, "text.norm.weight");
    IDX(tn_b, "text.norm.bias");
    IDX(fn_w, "fusion.norm.weight");
    IDX(fn_b, "fusion.norm.bias");
    IDX(iproj, "heads.image_proj.weight");
    IDX(tproj, "heads.text_proj.weight");
    IDX(lscale, "heads.logit_scale");
    IDX(itm_w, "heads.itm.weight");
    IDX(itm_b, "heads.itm.bias");
  }
#undef IDX
  for (int i = 0; ok && i < c->v_depth; i++)
    ok = find_block(P, "vision", i, false, &M->vb[i]);
  for (int i = 0; ok && !c->image_only && i < c->t_depth; i++)
    ok = find_block(P, "text", i, false, &M->tb[i]);
  for (int i = 0; ok && !c->image_only && i < c->f_depth; i++)
    ok = find_block(P, "fusion", i, true, &M->fb[i]);
  if (!ok ||
      (!c->image_only &&
       (P->p[M->tok].shape[0] != c->vocab || P->p[M->tpos].shape[0] != c->seq_len)) ||
      P->p[M->cls_w].shape[0] != c->classes ||
      P->p[M->patch_w].shape[1] != c->channels * c->patch * c->patch ||
      P->p[M->vpos].shape[0] != M->NV) {
    free(M);
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mm_create: the parameter table is not that of model %s", c->name);
  }
  arena A = {NULL, 0, 0};
  layout(M, &A);
  M->arena = calloc(1, A.used + 64);
  if (!M->arena) {
    free(M);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mm_create: cannot allocate %zu bytes of activations",
                     A.used);
  }
  M->arena_bytes = A.used;
  A.base = (char *)(((uintptr_t)M->arena + 63) / 64 * 64);
  A.used = 0;
  layout(M, &A);
  *out = M;
  return AMPC_OK;
}

/* ---- helpers ---------------------------------------------------------------------- */

static inline void *W(const ampc_mm *M, int i) { return ampc_param_w(M->P, i); }
static inline void *G(const ampc_mm *M, int i) { return ampc_param_grad(M->P, i); }
static inline void *at(void *p, ampc_dtype dt, int64_t i) {
  return (char *)p + i * (int64_t)ampc_dtype_size(dt);
}

/* index of the largest of row r of x [*, n] (the first one on ties) */
/* the class of the largest logit; -1 (no class, never right) if any logit is NaN */
static int64_t argmax_row(const void *x, ampc_dtype dt, int64_t r, int64_t n) {
  int64_t best = 0;
  for (int64_t k = 0; k < n; k++) {
    const float v = ampc_elem_load(x, dt, r * n + k);
    if (isnan(v))
      return -1;
    if (v > ampc_elem_load(x, dt, r * n + best))
      best = k;
  }
  return best;
}

/* g[i] += v[i] for n values summed in FP32, one rounding each */
void ampc_mm_set_probe(ampc_mm *M, const ampc_model_probe *p) {
  if (M) {
    if (p && p->on)
      M->probe = *p;
    else
      memset(&M->probe, 0, sizeof M->probe);
  }
}

static bool probe_on(const ampc_mm *M) { return M->probe.on && M->probe.on(M->probe.user); }

/* telemetry: everything rounded since the last mark belongs to this tensor */
static void tm_mark(const ampc_mm *M, ampc_branch br, ampc_tm_phase ph, const char *fmt, ...)
    AMPC_PRINTF(4, 5);
static void tm_mark(const ampc_mm *M, ampc_branch br, ampc_tm_phase ph, const char *fmt, ...) {
  if (!probe_on(M) || !M->probe.mark)
    return;
  char name[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  M->probe.mark(M->probe.user, br, ph, name);
}

static void grad_add(void *g, ampc_dtype dt, const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    ampc_elem_store(g, dt, i, ampc_elem_load(g, dt, i) + v[i]);
}

/* ---- one pre-norm transformer block ----------------------------------------------- */

static ampc_status blk_fwd(ampc_mm *M, const blk_p *p, blk_a *a, int64_t b, int64_t tq, int64_t tk,
                           const void *x, const void *kv, const uint8_t *kmask, ampc_branch br,
                           const char *name) {
  const int64_t D = M->D, rq = b * tq, MLP = M->c.mlp;
  const ampc_dtype sdt = M->sdt, adt = M->adt, wdt = M->wdt;
  AMPC_TRY(ampc_layernorm_forward(rq, D, x, sdt, W(M, p->n1w), W(M, p->n1b), wdt, k_ln_eps, a->ln1,
                                  adt, a->mean1, a->rstd1, NULL));
  const void *win = W(M, p->inw), *bin = W(M, p->inb);
  const size_t ws = ampc_dtype_size(wdt);
  AMPC_TRY(ampc_mha_forward(
      b, tq, tk, D, M->c.heads, a->ln1, kv ? kv : a->ln1, adt, win, bin,
      (const char *)win + (size_t)(D * D) * ws, (const char *)bin + (size_t)D * ws,
      (const char *)win + (size_t)(2 * D * D) * ws, (const char *)bin + (size_t)(2 * D) * ws,
      W(M, p->outw), W(M, p->outb), wdt, kmask, &a->c, M->pdt, a->y, M->acc, NULL));
  AMPC_TRY(ampc_add_forward(rq * D, x, sdt, a->y, adt, a->x1, sdt, NULL));
  AMPC_TRY(ampc_layernorm_forward(rq, D, a->x1, sdt, W(M, p->n2w), W(M, p->n2b), wdt, k_ln_eps,
                                  a->ln2, adt, a->mean2, a->rstd2, NULL));
  AMPC_TRY(ampc_linear_forward(rq, D, MLP, a->ln2, adt, W(M, p->f1w), wdt, W(M, p->f1b), a->h, adt,
                               M->acc, NULL));
  AMPC_TRY(ampc_gelu_forward(rq * MLP, a->h, adt, a->g, adt, NULL));
  AMPC_TRY(ampc_linear_forward(rq, MLP, D, a->g, adt, W(M, p->f2w), wdt, W(M, p->f2b), a->y, adt,
                               M->acc, NULL));
  AMPC_TRY(ampc_add_forward(rq * D, a->x1, sdt, a->y, adt, a->out, sdt, NULL));
  if (probe_on(M)) {
    char nm[64];
    snprintf(nm, sizeof nm, "%s.mlp.fc2", name);
    if (M->probe.shadow_linear)
      AMPC_TRY(M->probe.shadow_linear(M->probe.user, br, nm, rq, MLP, D, a->g, adt, W(M, p->f2w),
                                      wdt, M->acc));
    tm_mark(M, br, AMPC_TM_ACT, "%s", name);
  }
  return AMPC_OK;
}

/* dout [b*tq, D] (gdt): in, the gradient of the block's output; out, of its
 * input x. dkv [b*tk, D] (gdt, overwritten) for cross-attention, else NULL. */
static ampc_status blk_bwd(ampc_mm *M, const blk_p *p, blk_a *a, int64_t b, int64_t tq, int64_t tk,
                           const void *x, const void *kv, void *dout, void *dkv) {
  const int64_t D = M->D, rq = b * tq, MLP = M->c.mlp;
  const ampc_dtype sdt = M->sdt, adt = M->adt, wdt = M->wdt, gdt = M->gdt;
  const ampc_acc acc = M->acc;
  AMPC_TRY(ampc_linear_backward(rq, MLP, D, dout, gdt, a->g, adt, W(M, p->f2w), wdt, M->dH1,
                                G(M, p->f2w), G(M, p->f2b), acc));
  AMPC_TRY(ampc_gelu_backward(rq * MLP, M->dH1, gdt, a->h, adt, M->dH2));
  AMPC_TRY(ampc_linear_backward(rq, D, MLP, M->dH2, gdt, a->ln2, adt, W(M, p->f1w), wdt, M->dL,
                                G(M, p->f1w), G(M, p->f1b), acc));
  AMPC_TRY(ampc_layernorm_backward(rq, D, M->dL, gdt, a->x1, sdt, W(M, p->n2w), wdt, a->mean2,
                                   a->rstd2, M->dS2, G(M, p->n2w), G(M, p->n2b)));
  AMPC_TRY(ampc_add_forward(rq * D, dout, gdt, M->dS2, gdt, dout, gdt, NULL));
  const size_t ws = ampc_dtype_size(wdt), gsz = ampc_dtype_size(gdt);
  const char *win = W(M, p->inw);
  char *gin = G(M, p->inw), *gbin = G(M, p->inb);
  AMPC_TRY(ampc_mha_backward(
      b, tq, tk, D, M->c.heads, a->ln1, kv ? kv : a->ln1, adt, win, win + (size_t)(D * D) * ws,
      win + (size_t)(2 * D * D) * ws, W(M, p->outw), wdt, &a->c, M->pdt, dout, gdt, M->dL, dkv, gin,
      gbin, gin + (size_t)(D * D) * gsz, gbin + (size_t)D * gsz, gin + (size_t)(2 * D * D) * gsz,
      gbin + (size_t)(2 * D) * gsz, G(M, p->outw), G(M, p->outb), acc));
  AMPC_TRY(ampc_layernorm_backward(rq, D, M->dL, gdt, x, sdt, W(M, p->n1w), wdt, a->mean1, a->rstd1,
                                   M->dS2, G(M, p->n1w), G(M, p->n1b)));
  AMPC_TRY(ampc_add_forward(rq * D, dout, gdt, M->dS2, gdt, dout, gdt, NULL));
  return AMPC_OK;
}

/* ---- encoders ------------------------------------------------------------------------- */

static ampc_status vision_fwd(ampc_mm *M, int64_t b, const uint8_t *images) {
  const int64_t D = M->D, NV = M->NV, NP = M->NP;
  const ampc_dtype sdt = M->sdt, adt = M->adt, wdt = M->wdt;
  AMPC_TRY(ampc_patch_embed_forward(b, M->c.img, M->c.img, M->c.channels, M->c.patch, D, images,
                                    1.0f / 127.5f, -1.0f, W(M, M->patch_w), wdt, W(M, M->patch_b),
                                    M->patch, adt, M->acc, NULL));
  /* x0 = [cls; patches] + positions, summed in FP32, one rounding per row */
  const void *cls = W(M, M->cls_tok), *pos = W(M, M->vpos);
  float *pf = malloc((size_t)((NV + 2) * D) * sizeof *pf);
  if (!pf)
    return ampc_fail(AMPC_ERR_NOMEM, "vision: cannot allocate %lld floats",
                     (long long)((NV + 2) * D));
  float *src = pf + NV * D, *row = src + D;
  ampc_convert(pf, AMPC_F32, pos, wdt, (size_t)(NV * D));
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t t = 0; t < NV; t++) {
      if (t == 0)
        ampc_convert(src, AMPC_F32, cls, wdt, (size_t)D);
      else
        ampc_convert(src, AMPC_F32, at(M->patch, adt, (bi * NP + t - 1) * D), adt, (size_t)D);
      for (int64_t j = 0; j < D; j++)
        row[j] = src[j] + pf[t * D + j];
      ampc_store_f32(at(M->v0, sdt, (bi * NV + t) * D), sdt, row, (size_t)D, NULL);
    }
  free(pf);
  tm_mark(M, AMPC_BRANCH_VISION, AMPC_TM_ACT, "vision.patch_embed");
  const void *x = M->v0;
  for (int i = 0; i < M->c.v_depth; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "vision.blocks.%d", i);
    AMPC_TRY(blk_fwd(M, &M->vb[i], &M->va[i], b, NV, NV, x, NULL, NULL, AMPC_BRANCH_VISION, nm));
    x = M->va[i].out;
  }
  AMPC_TRY(ampc_layernorm_forward(b * NV, D, x, sdt, W(M, M->vn_w), W(M, M->vn_b), wdt, k_ln_eps,
                                  M->vfin, adt, M->vmean, M->vrstd, NULL));
  tm_mark(M, AMPC_BRANCH_VISION, AMPC_TM_ACT, "vision.norm");
  const size_t as = ampc_dtype_size(adt);
  for (int64_t bi = 0; bi < b; bi++)
    memcpy(at(M->vcls, adt, bi * D), at(M->vfin, adt, bi * NV * D), (size_t)D * as);
  if (!M->c.image_only) {
    AMPC_TRY(ampc_linear_forward(b, D, M->E, M->vcls, adt, W(M, M->iproj), wdt, NULL, M->iemb, adt,
                                 M->acc, NULL));
    AMPC_TRY(ampc_l2norm_forward(b, M->E, M->iemb, adt, k_l2_eps, M->inorm, adt, NULL));
  }
  AMPC_TRY(ampc_linear_forward(b, D, M->c.classes, M->vcls, adt, W(M, M->cls_w), wdt,
                               W(M, M->cls_b), M->clog, adt, M->acc, NULL));
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, "%s", M->c.image_only ? "head" : "vision_proj");
  return AMPC_OK;
}

static ampc_status text_fwd(ampc_mm *M, int64_t b, const int32_t *tokens) {
  const int64_t D = M->D, TT = M->TT;
  const ampc_dtype sdt = M->sdt, adt = M->adt, wdt = M->wdt;
  for (int64_t i = 0; i < b * TT; i++) {
    if (tokens[i] < 0 || tokens[i] >= M->c.vocab)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "text: token id %d outside [0, %lld)", tokens[i],
                       (long long)M->c.vocab);
    M->tmask[i] = tokens[i] != AMPC_TOKEN_PAD;
  }
  AMPC_TRY(ampc_embedding_forward(b, TT, D, tokens, M->c.vocab, W(M, M->tok), W(M, M->tpos), wdt,
                                  M->t0, sdt, NULL));
  tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_ACT, "text.embeddings");
  const void *x = M->t0;
  for (int i = 0; i < M->c.t_depth; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "text.blocks.%d", i);
    AMPC_TRY(blk_fwd(M, &M->tb[i], &M->ta[i], b, TT, TT, x, NULL, M->tmask, AMPC_BRANCH_TEXT, nm));
    x = M->ta[i].out;
  }
  AMPC_TRY(ampc_layernorm_forward(b * TT, D, x, sdt, W(M, M->tn_w), W(M, M->tn_b), wdt, k_ln_eps,
                                  M->tfin, adt, M->tmean, M->trstd, NULL));
  AMPC_TRY(ampc_mean_pool_forward(b, TT, D, M->tfin, adt, M->tmask, M->tpool, adt, NULL));
  tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_ACT, "text.norm");
  AMPC_TRY(ampc_linear_forward(b, D, M->E, M->tpool, adt, W(M, M->tproj), wdt, NULL, M->temb, adt,
                               M->acc, NULL));
  AMPC_TRY(ampc_l2norm_forward(b, M->E, M->temb, adt, k_l2_eps, M->tnorm, adt, NULL));
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, "text_proj");
  return AMPC_OK;
}

static float log_scale(const ampc_mm *M, bool *clamped) {
  const float ls = ampc_elem_load(W(M, M->lscale), M->wdt, 0);
  *clamped = ls > k_max_log_scale;
  return *clamped ? k_max_log_scale : ls;
}

/* ---- the whole model ------------------------------------------------------------------ */

/* The vision encoder's backward pass from dv32 [b*NV, D] (FP32 sums of the
 * gradient of its final-norm output). */
static ampc_status vision_bwd(ampc_mm *M, int64_t b, const uint8_t *images, const float *dv32) {
  const int64_t D = M->D, NV = M->NV;
  const ampc_dtype sdt = M->sdt, wdt = M->wdt, gdt = M->gdt;
  const ampc_acc acc = M->acc;
  const ampc_mm_config *c = &M->c;
  /* vision encoder */
  AMPC_TRY(ampc_store_f32(M->dS2, gdt, dv32, (size_t)(b * NV * D), NULL));
  const void *vlast = M->va[c->v_depth - 1].out;
  AMPC_TRY(ampc_layernorm_backward(b * NV, D, M->dS2, gdt, vlast, sdt, W(M, M->vn_w), wdt, M->vmean,
                                   M->vrstd, M->dS, G(M, M->vn_w), G(M, M->vn_b)));
  tm_mark(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD, "vision.norm");
  for (int i = (int)c->v_depth - 1; i >= 0; i--) {
    const void *xin = i == 0 ? M->v0 : M->va[i - 1].out;
    AMPC_TRY(blk_bwd(M, &M->vb[i], &M->va[i], b, NV, NV, xin, NULL, M->dS, NULL));
    tm_mark(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD, "vision.blocks.%d", i);
  }
  /* dx0 -> cls token, positions (batch sums in FP32) and the patch embedding */
  float *sum = M->dsmall32;
  memset(sum, 0, (size_t)(NV * D) * sizeof(float));
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t k = 0; k < NV * D; k++)
      sum[k] += ampc_elem_load(M->dS, gdt, bi * NV * D + k);
  grad_add(G(M, M->vpos), gdt, sum, NV * D);
  grad_add(G(M, M->cls_tok), gdt, sum, D); /* row 0 of the positions' sum is the CLS one */
  const size_t gs = ampc_dtype_size(gdt);
  for (int64_t bi = 0; bi < b; bi++)
    memcpy(at(M->dS2, gdt, bi * M->NP * D), at(M->dS, gdt, (bi * NV + 1) * D),
           (size_t)(M->NP * D) * gs);
  AMPC_TRY(ampc_patch_embed_backward(b, c->img, c->img, c->channels, c->patch, D, images,
                                     1.0f / 127.5f, -1.0f, wdt, M->dS2, gdt, G(M, M->patch_w),
                                     G(M, M->patch_b), acc));
  tm_mark(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD, "vision.patch_embed");
  return AMPC_OK;
}

/* image-only models (vit-ref, vit-fm): CE of the group/class head on CLS */
static ampc_status image_only_fwd(ampc_mm *M, const ampc_mm_batch *bt, ampc_mm_losses *out) {
  if (bt->b < 1 || bt->b > M->B || !bt->images || !bt->labels)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mm_forward: bad arguments (batch %lld, "
                     "max %lld)",
                     (long long)bt->b, (long long)M->B);
  const int64_t b = bt->b, C = M->c.classes;
  const ampc_dtype adt = M->adt;
  for (int64_t i = 0; i < b; i++)
    if (bt->labels[i] < 0 || bt->labels[i] >= C)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "label %d outside [0, %lld)", bt->labels[i],
                       (long long)C);
  AMPC_TRY(vision_fwd(M, b, bt->images));
  ampc_mm_losses L = {0};
  AMPC_TRY(ampc_cross_entropy_forward(b, C, M->clog, adt, bt->labels, &L.cls));
  int64_t hit = 0;
  for (int64_t i = 0; i < b; i++) {
    hit += argmax_row(M->clog, adt, i, C) == bt->labels[i];
  }
  L.cls_acc = (float)hit / (float)b;
  L.total = M->c.w_cls * L.cls;
  *out = L;
  return AMPC_OK;
}

static ampc_status image_only_bwd(ampc_mm *M, float S) {
  const ampc_mm_batch *bt = &M->fwd;
  const int64_t b = bt->b, D = M->D, NV = M->NV, C = M->c.classes;
  const ampc_dtype adt = M->adt, gdt = M->gdt;
  AMPC_TRY(
      ampc_cross_entropy_backward(b, C, M->clog, adt, bt->labels, S * M->c.w_cls, M->dclog, gdt));
  AMPC_TRY(ampc_linear_backward(b, D, C, M->dclog, gdt, M->vcls, adt, W(M, M->cls_w), M->wdt,
                                M->dvcls, G(M, M->cls_w), G(M, M->cls_b), M->acc));
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD, "head");
  float *dv32 = M->dv32;
  memset(dv32, 0, (size_t)(b * NV * D) * sizeof(float));
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t j = 0; j < D; j++)
      dv32[bi * NV * D + j] = ampc_elem_load(M->dvcls, gdt, bi * D + j);
  return vision_bwd(M, b, bt->images, dv32);
}

static ampc_status mm_fwd(ampc_mm *M, const ampc_mm_batch *bt, ampc_mm_losses *out) {
  if (bt->b < 2 || bt->b > M->B || !bt->images || !bt->tokens || !bt->labels)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mm_forward: bad arguments (batch %lld, "
                     "max %lld)",
                     (long long)bt->b, (long long)M->B);
  const int64_t b = bt->b, D = M->D, NV = M->NV, TT = M->TT, E = M->E, C = M->c.classes;
  const ampc_dtype sdt = M->sdt, adt = M->adt, wdt = M->wdt;
  const size_t as = ampc_dtype_size(adt);
  for (int64_t i = 0; i < b; i++)
    if (bt->labels[i] < 0 || bt->labels[i] >= C)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "label %d outside [0, %lld)", bt->labels[i],
                       (long long)C);
  AMPC_TRY(vision_fwd(M, b, bt->images));
  AMPC_TRY(text_fwd(M, b, bt->tokens));
  /* contrastive similarities (a GEMM on the normalised embeddings) */
  AMPC_TRY(ampc_gemm(AMPC_OP_N, AMPC_OP_T, b, b, E, 1.0f, M->inorm, adt, E, M->tnorm, adt, E, 0.0f,
                     M->sim, AMPC_F32, b, M->acc));
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, "similarity");
  bool clamped = false;
  const float ls = log_scale(M, &clamped);
  ampc_mm_losses L = {0};
  AMPC_TRY(ampc_infonce_forward(b, M->sim, AMPC_F32, ls, &L.itc));
  /* hard negatives: for image i the most similar other text */
  for (int64_t i = 0; i < b; i++) {
    int64_t best = i == 0 ? 1 : 0;
    for (int64_t j = 0; j < b; j++)
      if (j != i && M->sim[i * b + j] > M->sim[i * b + best])
        best = j;
    M->neg[i] = (int32_t)best;
  }
  /* fusion on 2b pairs: (i, i) positives then (i, neg[i]) negatives */
  const int64_t np = 2 * b;
  for (int64_t pr = 0; pr < np; pr++) {
    const int64_t img = pr % b, txt = pr < b ? pr : M->neg[pr - b];
    M->pair_text[pr] = (int32_t)txt;
    memcpy(at(M->fkv, adt, pr * NV * D), at(M->vfin, adt, img * NV * D), (size_t)(NV * D) * as);
    AMPC_TRY(ampc_convert(at(M->f0, sdt, pr * TT * D), sdt, at(M->tfin, adt, txt * TT * D), adt,
                          (size_t)(TT * D)));
    memcpy(M->fmask + pr * TT, M->tmask + txt * TT, (size_t)TT);
    M->itm_t[pr] = pr < b ? 1.0f : 0.0f;
  }
  const void *x = M->f0;
  for (int i = 0; i < M->c.f_depth; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "fusion.blocks.%d", i);
    AMPC_TRY(blk_fwd(M, &M->fb[i], &M->fa[i], np, TT, NV, x, M->fkv, NULL, AMPC_BRANCH_FUSION, nm));
    x = M->fa[i].out;
  }
  const void *fout = x;
  AMPC_TRY(ampc_layernorm_forward(np * TT, D, fout, sdt, W(M, M->fn_w), W(M, M->fn_b), wdt,
                                  k_ln_eps, M->ffin, adt, M->fmean, M->frstd, NULL));
  AMPC_TRY(ampc_mean_pool_forward(np, TT, D, M->ffin, adt, M->fmask, M->fpool, adt, NULL));
  tm_mark(M, AMPC_BRANCH_FUSION, AMPC_TM_ACT, "fusion.norm");
  AMPC_TRY(ampc_linear_forward(np, D, 1, M->fpool, adt, W(M, M->itm_w), wdt, W(M, M->itm_b), M->itm,
                               adt, M->acc, NULL));
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, "itm_head");
  AMPC_TRY(ampc_bce_logits_forward(np, M->itm, adt, M->itm_t, &L.itm));
  AMPC_TRY(ampc_cross_entropy_forward(b, C, M->clog, adt, bt->labels, &L.cls));
  int64_t hit = 0;
  for (int64_t pr = 0; pr < np; pr++) {
    const float v = ampc_elem_load(M->itm, adt, pr); /* a NaN logit is never right */
    hit += !isnan(v) && (v > 0.0f) == (pr < b);
  }
  L.itm_acc = (float)hit / (float)np;
  hit = 0;
  for (int64_t i = 0; i < b; i++) {
    hit += argmax_row(M->clog, adt, i, C) == bt->labels[i];
  }
  L.cls_acc = (float)hit / (float)b;
  const ampc_mm_config *c = &M->c;
  L.total = c->w_itc * L.itc + c->w_itm * L.itm + c->w_cls * L.cls;
  *out = L;
  M->fwd_ls = ls, M->fwd_clamped = clamped;
  return AMPC_OK;
}

/* the backward pass, each loss seeded with S * its weight */
static ampc_status mm_bwd(ampc_mm *M, float S) {
  const ampc_mm_batch *bt = &M->fwd;
  const ampc_mm_config *c = &M->c;
  const int64_t b = bt->b, D = M->D, NV = M->NV, TT = M->TT, E = M->E, C = c->classes;
  const int64_t np = 2 * b;
  const ampc_dtype sdt = M->sdt, adt = M->adt, wdt = M->wdt, gdt = M->gdt;
  const float ls = M->fwd_ls;
  const bool clamped = M->fwd_clamped;
  const void *fout = c->f_depth > 0 ? M->fa[c->f_depth - 1].out : M->f0;
  const ampc_acc acc = M->acc;
  /* group head */
  AMPC_TRY(
      ampc_cross_entropy_backward(b, C, M->clog, adt, bt->labels, S * c->w_cls, M->dclog, gdt));
  AMPC_TRY(ampc_linear_backward(b, D, C, M->dclog, gdt, M->vcls, adt, W(M, M->cls_w), wdt, M->dvcls,
                                G(M, M->cls_w), G(M, M->cls_b), acc));
  /* matching head and fusion */
  AMPC_TRY(ampc_bce_logits_backward(np, M->itm, adt, M->itm_t, S * c->w_itm, M->ditm, gdt));
  AMPC_TRY(ampc_linear_backward(np, D, 1, M->ditm, gdt, M->fpool, adt, W(M, M->itm_w), wdt,
                                M->dfpool, G(M, M->itm_w), G(M, M->itm_b), acc));
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD, "cls_head+itm_head");
  AMPC_TRY(ampc_mean_pool_backward(np, TT, D, M->dfpool, gdt, M->fmask, M->dL));
  AMPC_TRY(ampc_layernorm_backward(np * TT, D, M->dL, gdt, fout, sdt, W(M, M->fn_w), wdt, M->fmean,
                                   M->frstd, M->dS, G(M, M->fn_w), G(M, M->fn_b)));
  float *dkv32 = M->dKVsum;
  memset(dkv32, 0, (size_t)(np * NV * D) * sizeof(float));
  for (int i = (int)c->f_depth - 1; i >= 0; i--) {
    const void *xin = i == 0 ? M->f0 : M->fa[i - 1].out;
    AMPC_TRY(blk_bwd(M, &M->fb[i], &M->fa[i], np, TT, NV, xin, M->fkv, M->dS, M->dKV));
    tm_mark(M, AMPC_BRANCH_FUSION, AMPC_TM_GRAD, "fusion.blocks.%d", i);
    for (int64_t k = 0; k < np * NV * D; k++)
      dkv32[k] += ampc_elem_load(M->dKV, gdt, k);
  }
  /* scatter the fusion gradients back to the encoders' outputs, in FP32 */
  float *dv32 = M->dv32, *dt32 = M->dt32;
  memset(dv32, 0, (size_t)(b * NV * D) * sizeof(float));
  memset(dt32, 0, (size_t)(b * TT * D) * sizeof(float));
  for (int64_t pr = 0; pr < np; pr++) {
    const int64_t img = pr % b, txt = M->pair_text[pr];
    for (int64_t k = 0; k < NV * D; k++)
      dv32[img * NV * D + k] += dkv32[pr * NV * D + k];
    for (int64_t k = 0; k < TT * D; k++)
      dt32[txt * TT * D + k] += ampc_elem_load(M->dS, gdt, pr * TT * D + k);
  }
  /* contrastive heads */
  float dls = 0.0f;
  AMPC_TRY(ampc_infonce_backward(b, M->sim, AMPC_F32, ls, S * c->w_itc, M->dsim, gdt, &dls));
  if (!clamped) /* the clamp has zero gradient */
    grad_add(G(M, M->lscale), gdt, &dls, 1);
  AMPC_TRY(ampc_gemm(AMPC_OP_N, AMPC_OP_N, b, E, b, 1.0f, M->dsim, gdt, b, M->tnorm, adt, E, 0.0f,
                     M->dinorm, gdt, E, acc));
  AMPC_TRY(ampc_gemm(AMPC_OP_T, AMPC_OP_N, b, E, b, 1.0f, M->dsim, gdt, b, M->inorm, adt, E, 0.0f,
                     M->dtnorm, gdt, E, acc));
  AMPC_TRY(ampc_l2norm_backward(b, E, M->dinorm, gdt, M->iemb, adt, k_l2_eps, M->diemb));
  AMPC_TRY(ampc_linear_backward(b, D, E, M->diemb, gdt, M->vcls, adt, W(M, M->iproj), wdt,
                                M->dvcls2, G(M, M->iproj), NULL, acc));
  AMPC_TRY(ampc_l2norm_backward(b, E, M->dtnorm, gdt, M->temb, adt, k_l2_eps, M->dtemb));
  AMPC_TRY(ampc_linear_backward(b, D, E, M->dtemb, gdt, M->tpool, adt, W(M, M->tproj), wdt,
                                M->dtpool, G(M, M->tproj), NULL, acc));
  AMPC_TRY(ampc_mean_pool_backward(b, TT, D, M->dtpool, gdt, M->tmask, M->dL));
  for (int64_t k = 0; k < b * TT * D; k++)
    dt32[k] += ampc_elem_load(M->dL, gdt, k);
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t j = 0; j < D; j++)
      dv32[bi * NV * D + j] +=
          ampc_elem_load(M->dvcls, gdt, bi * D + j) + ampc_elem_load(M->dvcls2, gdt, bi * D + j);
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD, "contrastive_heads");
  AMPC_TRY(vision_bwd(M, b, bt->images, dv32));
  /* text encoder */
  AMPC_TRY(ampc_store_f32(M->dS2, gdt, dt32, (size_t)(b * TT * D), NULL));
  const void *tlast = M->ta[c->t_depth - 1].out;
  AMPC_TRY(ampc_layernorm_backward(b * TT, D, M->dS2, gdt, tlast, sdt, W(M, M->tn_w), wdt, M->tmean,
                                   M->trstd, M->dS, G(M, M->tn_w), G(M, M->tn_b)));
  tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, "text.norm");
  for (int i = (int)c->t_depth - 1; i >= 0; i--) {
    const void *xin = i == 0 ? M->t0 : M->ta[i - 1].out;
    AMPC_TRY(blk_bwd(M, &M->tb[i], &M->ta[i], b, TT, TT, xin, NULL, M->dS, NULL));
    tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, "text.blocks.%d", i);
  }
  AMPC_TRY(ampc_embedding_backward(b, TT, D, bt->tokens, c->vocab, M->dS, gdt, G(M, M->tok),
                                   G(M, M->tpos), NULL));
  tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, "text.embeddings");
  return AMPC_OK;
}

ampc_status ampc_mm_forward(ampc_mm *M, const ampc_mm_batch *bt, ampc_mm_losses *out) {
  if (!M || !bt || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mm_forward: NULL argument");
  M->have_fwd = false;
  AMPC_TRY(M->c.image_only ? image_only_fwd(M, bt, out) : mm_fwd(M, bt, out));
  M->fwd = *bt;
  M->have_fwd = true;
  return AMPC_OK;
}

ampc_status ampc_mm_backward(ampc_mm *M, float seed) {
  if (!M || !M->have_fwd)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mm_backward: no forward pass to differentiate");
  if (!(seed > 0.0f) || !isfinite(seed))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mm_backward: seed %g is not a positive finite "
                     "number",
                     (double)seed);
  M->have_fwd = false;
  return M->c.image_only ? image_only_bwd(M, seed) : mm_bwd(M, seed);
}

ampc_status ampc_mm_embed(ampc_mm *M, int64_t b, const uint8_t *images, const int32_t *tokens,
                          float *img_emb, float *txt_emb, int32_t *cls) {
  if (!M || b < 1 || b > M->B || (!images && (img_emb || cls)) || (!tokens && txt_emb) ||
      (M->c.image_only && (img_emb || tokens || txt_emb)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mm_embed: bad arguments");
  const int64_t E = M->E, C = M->c.classes;
  if (images) {
    AMPC_TRY(vision_fwd(M, b, images));
    if (img_emb)
      AMPC_TRY(ampc_convert(img_emb, AMPC_F32, M->inorm, M->adt, (size_t)(b * E)));
    if (cls)
      for (int64_t i = 0; i < b; i++) {
        cls[i] = (int32_t)argmax_row(M->clog, M->adt, i, C);
      }
  }
  if (tokens) {
    AMPC_TRY(text_fwd(M, b, tokens));
    if (txt_emb)
      AMPC_TRY(ampc_convert(txt_emb, AMPC_F32, M->tnorm, M->adt, (size_t)(b * E)));
  }
  return AMPC_OK;
}

void ampc_mm_last_negatives(const ampc_mm *M, int64_t b, int32_t *neg) {
  if (M && neg && b >= 0 && b <= M->B)
    memcpy(neg, M->neg, (size_t)b * sizeof *neg);
}
