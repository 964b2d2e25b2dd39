/*
 * src/model/mm.c: the multimodal image-text model (issue 6, DESIGN.md 1): its
 * forward and backward passes (configurations and parameter specs are in
 * mm_config.c, the arena layout in mm_layout.c, the shared state in
 * mm_impl.h).
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
#include "model/mm_impl.h"
#include "numeric/numeric.h"

static const float k_ln_eps = 1e-5f;
static const float k_l2_eps = 1e-12f;
static const float k_max_log_scale = 4.6051702f; /* ln 100, CLIP's clamp */

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
                                G(M, p->f2w), G(M, p->f2b), acc, &M->ws));
  AMPC_TRY(ampc_gelu_backward(rq * MLP, M->dH1, gdt, a->h, adt, M->dH2));
  AMPC_TRY(ampc_linear_backward(rq, D, MLP, M->dH2, gdt, a->ln2, adt, W(M, p->f1w), wdt, M->dL,
                                G(M, p->f1w), G(M, p->f1b), acc, &M->ws));
  AMPC_TRY(ampc_layernorm_backward(rq, D, M->dL, gdt, a->x1, sdt, W(M, p->n2w), wdt, a->mean2,
                                   a->rstd2, M->dS2, G(M, p->n2w), G(M, p->n2b), &M->ws));
  AMPC_TRY(ampc_add_forward(rq * D, dout, gdt, M->dS2, gdt, dout, gdt, NULL));
  const size_t ws = ampc_dtype_size(wdt), gsz = ampc_dtype_size(gdt);
  const char *win = W(M, p->inw);
  char *gin = G(M, p->inw), *gbin = G(M, p->inb);
  AMPC_TRY(ampc_mha_backward(
      b, tq, tk, D, M->c.heads, a->ln1, kv ? kv : a->ln1, adt, win, win + (size_t)(D * D) * ws,
      win + (size_t)(2 * D * D) * ws, W(M, p->outw), wdt, &a->c, M->pdt, dout, gdt, M->dL, dkv, gin,
      gbin, gin + (size_t)(D * D) * gsz, gbin + (size_t)D * gsz, gin + (size_t)(2 * D * D) * gsz,
      gbin + (size_t)(2 * D) * gsz, G(M, p->outw), G(M, p->outb), acc, &M->ws));
  AMPC_TRY(ampc_layernorm_backward(rq, D, M->dL, gdt, x, sdt, W(M, p->n1w), wdt, a->mean1, a->rstd1,
                                   M->dS2, G(M, p->n1w), G(M, p->n1b), &M->ws));
  AMPC_TRY(ampc_add_forward(rq * D, dout, gdt, M->dS2, gdt, dout, gdt, NULL));
  return AMPC_OK;
}

/* ---- encoders ------------------------------------------------------------------------- */

static ampc_status vision_fwd(ampc_mm *M, int64_t b, const uint8_t *images) {
  const int64_t D = M->D, NV = M->NV, NP = M->NP;
  const ampc_dtype sdt = M->sdt, adt = M->adt, wdt = M->wdt;
  AMPC_TRY(ampc_patch_embed_forward(b, M->c.img, M->c.img, M->c.channels, M->c.patch, D, images,
                                    1.0f / 127.5f, -1.0f, W(M, M->patch_w), wdt, W(M, M->patch_b),
                                    M->patch, adt, M->acc, NULL, &M->ws));
  /* x0 = [cls; patches] + positions, summed in FP32, one rounding per row */
  const void *cls = W(M, M->cls_tok), *pos = W(M, M->vpos);
  /* positions, the source row and the sum in FP32: from the scratch (sized
   * for it by the layout), else allocated */
  const size_t pf_bytes = (size_t)((NV + 2) * D) * sizeof(float);
  const bool pf_heap = M->ws.bytes < pf_bytes;
  float *pf = pf_heap ? malloc(pf_bytes) : M->ws.base;
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
  if (pf_heap)
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
                                   M->vrstd, M->dS, G(M, M->vn_w), G(M, M->vn_b), &M->ws));
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
                                     G(M, M->patch_b), acc, &M->ws));
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
                                M->dvcls, G(M, M->cls_w), G(M, M->cls_b), M->acc, &M->ws));
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

/* The text encoder's backward pass from dt32 [b*TT, D] (FP32 sums of the
 * gradient of its final-norm output: the fusion's and the contrastive head's). */
static ampc_status text_bwd(ampc_mm *M, int64_t b, const int32_t *tokens, const float *dt32) {
  const ampc_mm_config *c = &M->c;
  const int64_t D = M->D, TT = M->TT;
  const ampc_dtype sdt = M->sdt, wdt = M->wdt, gdt = M->gdt;
  AMPC_TRY(ampc_store_f32(M->dS2, gdt, dt32, (size_t)(b * TT * D), NULL));
  const void *tlast = M->ta[c->t_depth - 1].out;
  AMPC_TRY(ampc_layernorm_backward(b * TT, D, M->dS2, gdt, tlast, sdt, W(M, M->tn_w), wdt, M->tmean,
                                   M->trstd, M->dS, G(M, M->tn_w), G(M, M->tn_b), &M->ws));
  tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, "text.norm");
  for (int i = (int)c->t_depth - 1; i >= 0; i--) {
    const void *xin = i == 0 ? M->t0 : M->ta[i - 1].out;
    AMPC_TRY(blk_bwd(M, &M->tb[i], &M->ta[i], b, TT, TT, xin, NULL, M->dS, NULL));
    tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, "text.blocks.%d", i);
  }
  AMPC_TRY(ampc_embedding_backward(b, TT, D, tokens, c->vocab, M->dS, gdt, G(M, M->tok),
                                   G(M, M->tpos), NULL, &M->ws));
  tm_mark(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, "text.embeddings");
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
                                G(M, M->cls_w), G(M, M->cls_b), acc, &M->ws));
  /* matching head and fusion */
  AMPC_TRY(ampc_bce_logits_backward(np, M->itm, adt, M->itm_t, S * c->w_itm, M->ditm, gdt));
  AMPC_TRY(ampc_linear_backward(np, D, 1, M->ditm, gdt, M->fpool, adt, W(M, M->itm_w), wdt,
                                M->dfpool, G(M, M->itm_w), G(M, M->itm_b), acc, &M->ws));
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD, "cls_head+itm_head");
  AMPC_TRY(ampc_mean_pool_backward(np, TT, D, M->dfpool, gdt, M->fmask, M->dL));
  AMPC_TRY(ampc_layernorm_backward(np * TT, D, M->dL, gdt, fout, sdt, W(M, M->fn_w), wdt, M->fmean,
                                   M->frstd, M->dS, G(M, M->fn_w), G(M, M->fn_b), &M->ws));
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
  AMPC_TRY(
      ampc_infonce_backward(b, M->sim, AMPC_F32, ls, S * c->w_itc, M->dsim, gdt, &dls, &M->ws));
  if (!clamped) /* the clamp has zero gradient */
    grad_add(G(M, M->lscale), gdt, &dls, 1);
  AMPC_TRY(ampc_gemm(AMPC_OP_N, AMPC_OP_N, b, E, b, 1.0f, M->dsim, gdt, b, M->tnorm, adt, E, 0.0f,
                     M->dinorm, gdt, E, acc));
  AMPC_TRY(ampc_gemm(AMPC_OP_T, AMPC_OP_N, b, E, b, 1.0f, M->dsim, gdt, b, M->inorm, adt, E, 0.0f,
                     M->dtnorm, gdt, E, acc));
  AMPC_TRY(ampc_l2norm_backward(b, E, M->dinorm, gdt, M->iemb, adt, k_l2_eps, M->diemb));
  AMPC_TRY(ampc_linear_backward(b, D, E, M->diemb, gdt, M->vcls, adt, W(M, M->iproj), wdt,
                                M->dvcls2, G(M, M->iproj), NULL, acc, &M->ws));
  AMPC_TRY(ampc_l2norm_backward(b, E, M->dtnorm, gdt, M->temb, adt, k_l2_eps, M->dtemb));
  AMPC_TRY(ampc_linear_backward(b, D, E, M->dtemb, gdt, M->tpool, adt, W(M, M->tproj), wdt,
                                M->dtpool, G(M, M->tproj), NULL, acc, &M->ws));
  AMPC_TRY(ampc_mean_pool_backward(b, TT, D, M->dtpool, gdt, M->tmask, M->dL));
  for (int64_t k = 0; k < b * TT * D; k++)
    dt32[k] += ampc_elem_load(M->dL, gdt, k);
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t j = 0; j < D; j++)
      dv32[bi * NV * D + j] +=
          ampc_elem_load(M->dvcls, gdt, bi * D + j) + ampc_elem_load(M->dvcls2, gdt, bi * D + j);
  tm_mark(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD, "contrastive_heads");
  AMPC_TRY(vision_bwd(M, b, bt->images, dv32));
  return text_bwd(M, b, bt->tokens, dt32);
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
