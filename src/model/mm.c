/*
 * src/model/mm.c: the multimodal image-text model (DESIGN.md 1): its
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

static inline void *W(const ampc_mmodel *M, int i) { return ampc_param_w(M->P, i); }
static inline void *G(const ampc_mmodel *M, int i) { return ampc_param_grad(M->P, i); }
static inline void *at(void *p, ampc_dtype dt, int64_t i) {
  return (char *)p + i * (int64_t)ampc_dtype_size(dt);
}

void ampc_mmodel_set_probe(ampc_mmodel *M, const ampc_model_probe *p) {
  if (M) {
    if (p && p->on)
      M->probe = *p;
    else
      memset(&M->probe, 0, sizeof M->probe);
  }
}

/* the telemetry's probe: on a device too (its kernels feed the bound tally;
 * the shadow GEMM runs there and its inputs and product are copied back) */
void ampc_mmodel_set_grad_ready(ampc_mmodel *M, void (*fn)(void *user, int64_t lo, int64_t hi),
                                void *user) {
  if (M)
    M->grad_ready = fn, M->grad_ready_user = fn ? user : NULL;
}

/* the grad-ready hook: an empty range (progress only) */
static void grads_progress(const ampc_mmodel *M) {
  if (M->grad_ready)
    M->grad_ready(M->grad_ready_user, 0, 0);
}
/* the grad-ready hook: block p's parameters, consecutive in the table
 * (block_specs), from norm1.weight to the next tensor (or the end) */
static void grads_ready(const ampc_mmodel *M, const blk_p *p) {
  if (!M->grad_ready || p->f2b != p->n1w + PER_BLOCK - 1)
    return; /* not consecutive: left to the caller's rest */
  const ampc_params *P = M->P;
  const int64_t lo = P->p[p->n1w].offset,
                hi = p->f2b + 1 < P->count ? P->p[p->f2b + 1].offset : P->total;
  M->grad_ready(M->grad_ready_user, lo, hi);
}

/* the grad-ready hook: the parameters first .. last (table indices), which
 * are consecutive in the table */
static void grads_ready_params(const ampc_mmodel *M, int first, int last) {
  const ampc_params *P = M->P;
  if (!M->grad_ready || first < 0 || last < first || last >= P->count)
    return;
  const int64_t lo = P->p[first].offset,
                hi = last + 1 < P->count ? P->p[last + 1].offset : P->total;
  M->grad_ready(M->grad_ready_user, lo, hi);
}

static bool probe_on(const ampc_mmodel *M) { return M->probe.on && M->probe.on(M->probe.user); }

/* The shadow check of y = x w^T (x [m, k] xdt, w [n, k] wdt, tensors) on a
 * device: the sampled rows of x times w^T by the backend's own GEMM into FP32,
 * then rows, w and product copied to the host for the FP64 reference. Nothing
 * here is counted by the tally. */
static ampc_status shadow_on_device(ampc_mmodel *M, ampc_branch br, const char *name, int64_t m,
                                    int64_t k, int64_t n, const void *x, ampc_dtype xdt,
                                    const void *w, ampc_dtype wdt) {
  const ampc_backend *be = M->be;
  const int64_t rows = ampc_probe_shadow_rows(m);
  if (!M->probe.shadow_result || rows < 1)
    return AMPC_OK;
  const int64_t step = m / rows;
  const size_t xs = ampc_dtype_size(xdt), wsz = ampc_dtype_size(wdt);
  const size_t ybytes = (size_t)(rows * n) * sizeof(float);
  void *hx = malloc((size_t)(rows * k) * xs), *hw = malloc((size_t)(n * k) * wsz);
  float *hy = malloc(ybytes);
  ampc_status st =
      hx && hw && hy ? AMPC_OK : ampc_fail(AMPC_ERR_NOMEM, "telemetry: shadow GEMM buffers");
  if (st == AMPC_OK && M->shadow_dev_bytes < ybytes) { /* the device product's buffer, kept */
    be->release(M->shadow_dev);
    M->shadow_dev = NULL, M->shadow_dev_bytes = 0;
    if ((st = be->alloc(&M->shadow_dev, ybytes)) == AMPC_OK)
      M->shadow_dev_bytes = ybytes;
  }
  void *dy = M->shadow_dev;
  ampc_tally *was = ampc_tally_bind(NULL); /* the shadow's stores are not the model's */
  if (st == AMPC_OK)
    st = be->gemm(AMPC_OP_N, AMPC_OP_T, rows, n, k, 1.0f, x, xdt, step * k, w, wdt, k, 0.0f, dy,
                  AMPC_F32, n, M->acc);
  (void)ampc_tally_bind(was);
  for (int64_t i = 0; st == AMPC_OK && i < rows; i++)
    st = be->to_host((char *)hx + (size_t)(i * k) * xs,
                     (const char *)x + (size_t)(i * step * k) * xs, (size_t)k * xs);
  if (st == AMPC_OK)
    st = be->to_host(hw, w, (size_t)(n * k) * wsz);
  if (st == AMPC_OK)
    st = be->to_host(hy, dy, ybytes);
  if (st == AMPC_OK)
    st = M->probe.shadow_result(M->probe.user, br, name, rows, k, n, hx, xdt, hw, wdt, hy);
  free(hx), free(hw), free(hy);
  return st;
}

/* The inputs the passes read (M->in_*): the caller's host buffers on the
 * CPU; on a device, copies of them there (any may be NULL: not needed). */
static ampc_status load_inputs(ampc_mmodel *M, int64_t b, const uint8_t *images,
                               const int32_t *tokens, const int32_t *labels) {
  M->in_images = images, M->in_tokens = tokens, M->in_labels = labels;
  if (!M->be->device)
    return AMPC_OK;
  const ampc_mmodel_config *c = &M->c;
  if (images) {
    AMPC_TRY(M->be->to_device(M->d_images, images, (size_t)(b * c->img * c->img * c->channels)));
    M->in_images = M->d_images;
  }
  if (tokens) {
    AMPC_TRY(M->be->to_device(M->d_tokens, tokens, (size_t)(b * M->TT) * sizeof *tokens));
    M->in_tokens = M->d_tokens;
  }
  if (labels) {
    AMPC_TRY(M->be->to_device(M->d_labels, labels, (size_t)b * sizeof *labels));
    M->in_labels = M->d_labels;
  }
  return AMPC_OK;
}

/* The tensor a telemetry mark names, for the samples behind a first
 * non-finite value: rows [rows, per] in dt, row r belonging to batch sample
 * r % b, or (pairs: the fusion's) to the image h_pair_img[r] and the caption
 * h_pair_text[r] % b of matching pair r. p NULL: none (a sum over the batch,
 * or not per sample). */
typedef struct tref {
  const void *p;
  ampc_dtype dt;
  int64_t rows, per;
  bool pairs;
} tref;
/* a tensor stored in dt that is not per sample (a parameter gradient) */
#define NOT_PER_SAMPLE(dt_) ((tref){NULL, (dt_), 0, 0, false})

/* rows [rows, per] (dt) of branch br: the fusion's rows are matching pairs */
static tref rows_of(ampc_branch br, const void *p, ampc_dtype dt, int64_t rows, int64_t per) {
  return (tref){p, dt, rows, per, br == AMPC_BRANCH_FUSION};
}

/* which batch samples t's non-finite values belong to, to the probe (on a
 * device the tensor is copied to the host first); once per sampled step at
 * most, so a plain scan */
static void report_samples(const ampc_mmodel *M, tref t) {
  const int64_t b = M->fwd.b;
  if (!M->probe.samples || !t.p || t.rows < 1 || t.per < 1 || b < 1 ||
      (unsigned)t.dt >= AMPC_DTYPE_COUNT)
    return;
  const size_t bytes = (size_t)(t.rows * t.per) * ampc_dtype_size(t.dt);
  void *copy = M->be->device ? malloc(bytes) : NULL;
  uint8_t *bad = calloc((size_t)b, 1);
  const void *h = t.p;
  if (M->be->device) {
    if (!copy || M->be->to_host(copy, t.p, bytes) != AMPC_OK)
      h = NULL;
    else
      h = copy;
  }
  for (int64_t r = 0; h && bad && r < t.rows; r++) {
    bool nf = false;
    for (int64_t i = 0; i < t.per && !nf; i++)
      nf = !isfinite(ampc_elem_load(h, t.dt, r * t.per + i));
    if (!nf)
      continue;
    if (t.pairs) {
      bad[M->h_pair_img[r] % b] = 1;
      bad[M->h_pair_text[r] % b] = 1;
    } else {
      bad[r % b] = 1;
    }
  }
  if (h && bad)
    M->probe.samples(M->probe.user, bad, b);
  free(copy), free(bad);
}

/* telemetry: everything rounded since the last mark belongs to the tensor
 * named (t: its values, for the samples behind a first non-finite one) */
static void mark_tensor(const ampc_mmodel *M, ampc_branch br, ampc_tm_phase ph, tref t,
                        const char *fmt, ...) AMPC_PRINTF(5, 6);
static void mark_tensor(const ampc_mmodel *M, ampc_branch br, ampc_tm_phase ph, tref t,
                        const char *fmt, ...) {
  if (!probe_on(M) || !M->probe.mark)
    return;
  char name[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (M->probe.mark(M->probe.user, br, ph, name, t.dt))
    report_samples(M, t);
}

/* ---- one pre-norm transformer block ----------------------------------------------- */

/* FP8 site j (0 q, 1 k, 2 v, 3 out, 4 fc1, 5 fc2) of block p (or its INT8 or
 * fake-quantized layer), or NULL */
static ampc_linear_fp8 *site(ampc_mmodel *M, const blk_p *p, int j) {
  if (p->site < 0)
    return NULL;
  if (M->fp8_on)
    return &M->fp8.lin[p->site + j];
  const ampc_linear_fp8 *f = M->s8_lin ? &M->s8_lin[p->site + j] : NULL;
  return f && (f->s8 || f->observe || f->fake_q8) ? &M->s8_lin[p->site + j] : NULL;
}

static ampc_status blk_fwd(ampc_mmodel *M, const blk_p *p, blk_a *a, int64_t b, int64_t tq,
                           int64_t tk, const void *x, const void *kv, const uint8_t *kmask,
                           ampc_branch br, const char *name) {
  const int64_t D = M->D, rq = b * tq, MLP = M->c.mlp;
  const ampc_dtype stream_dt = M->stream_dt, act_dt = M->act_dt, weight_dt = M->weight_dt;
  /* telemetry marks per op (the checkpoint's names): a first non-finite
   * value is named by the op whose output holds it */
  const char *attn = kv ? "cross_attn" : "attn";
  AMPC_TRY(M->be->layernorm_forward(rq, D, x, stream_dt, W(M, p->n1w), W(M, p->n1b), weight_dt,
                                    k_ln_eps, a->ln1, act_dt, a->mean1, a->rstd1, NULL));
  mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->ln1, act_dt, b, tq * D), "%s.norm1", name);
  const void *win = W(M, p->inw), *bin = W(M, p->inb);
  const size_t ws = ampc_dtype_size(weight_dt);
  ampc_linear_fp8 *const f8[4] = {site(M, p, 0), site(M, p, 1), site(M, p, 2), site(M, p, 3)};
  AMPC_TRY(M->be->mha_forward(
      b, tq, tk, D, M->c.heads, a->ln1, kv ? kv : a->ln1, act_dt, win, bin,
      (const char *)win + (size_t)(D * D) * ws, (const char *)bin + (size_t)D * ws,
      (const char *)win + (size_t)(2 * D * D) * ws, (const char *)bin + (size_t)(2 * D) * ws,
      W(M, p->outw), W(M, p->outb), weight_dt, kmask, &a->c, M->prob_dt, a->y1 ? a->y1 : a->y,
      M->acc, M->fp8_on || M->s8_lin ? f8 : NULL, NULL));
  a->c.key_mask = kmask; /* for the backward pass's recomputation */
  mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->y1 ? a->y1 : a->y, act_dt, b, tq * D), "%s.%s",
              name, attn);
  /* the fused layers (each the bits of its two ops; every intermediate the
   * marks name is still written) */
  AMPC_TRY(M->be->add_layernorm_forward(rq, D, x, stream_dt, a->y1 ? a->y1 : a->y, act_dt, a->x1,
                                        stream_dt, W(M, p->n2w), W(M, p->n2b), weight_dt, k_ln_eps,
                                        a->ln2, act_dt, a->mean2, a->rstd2, NULL));
  mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->x1, stream_dt, b, tq * D), "%s.%s_residual", name,
              attn);
  mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->ln2, act_dt, b, tq * D), "%s.norm2", name);
  AMPC_TRY(M->be->linear_gelu_forward(rq, D, MLP, a->ln2, act_dt, W(M, p->f1w), weight_dt,
                                      W(M, p->f1b), a->h, act_dt, a->g, act_dt, M->acc,
                                      site(M, p, 4), NULL));
  mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->h, act_dt, b, tq * MLP), "%s.mlp.fc1", name);
  mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->g, act_dt, b, tq * MLP), "%s.mlp.gelu", name);
  AMPC_TRY(M->be->linear_residual_forward(rq, MLP, D, a->g, act_dt, W(M, p->f2w), weight_dt,
                                          W(M, p->f2b), a->y, act_dt, a->x1, stream_dt, a->out,
                                          stream_dt, M->acc, site(M, p, 5), NULL));
  mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->y, act_dt, b, tq * D), "%s.mlp.fc2", name);
  if (probe_on(M)) {
    char nm[64];
    snprintf(nm, sizeof nm, "%s.mlp.fc2", name);
    if (M->be->device)
      AMPC_TRY(shadow_on_device(M, br, nm, rq, MLP, D, a->g, act_dt, W(M, p->f2w), weight_dt));
    else if (M->probe.shadow_linear)
      AMPC_TRY(M->probe.shadow_linear(M->probe.user, br, nm, rq, MLP, D, a->g, act_dt, W(M, p->f2w),
                                      weight_dt, M->acc));
    mark_tensor(M, br, AMPC_TM_ACT, rows_of(br, a->out, stream_dt, b, tq * D), "%s", name);
  }
  return AMPC_OK;
}

/* dout [b*tq, D] (grad_dt): in, the gradient of the block's output; out, of its
 * input x. dkv [b*tk, D] (grad_dt, overwritten) for cross-attention, else NULL. */
/* The factor a gradient crossing from branch `from` into branch `to` is
 * multiplied by (per-branch loss scaling; 1 otherwise): a power of two. */
static float cross(const ampc_mmodel *M, ampc_branch to, ampc_branch from) {
  return M->bseed[to] / M->bseed[from];
}

/* dkv (cross-attention: the gradient of kv, which belongs to the vision
 * branch) is stored multiplied by cross(vision, fusion) */
static ampc_status blk_bwd(ampc_mmodel *M, const blk_p *p, blk_a *a, int64_t b, int64_t tq,
                           int64_t tk, const void *x, const void *kv, void *dout, void *dkv,
                           ampc_branch br, const char *name) {
  const char *attn = kv ? "cross_attn" : "attn"; /* the marks: each op's gradients */
  const int64_t D = M->D, rq = b * tq, MLP = M->c.mlp;
  const ampc_dtype stream_dt = M->stream_dt, act_dt = M->act_dt, weight_dt = M->weight_dt,
                   grad_dt = M->grad_dt;
  const ampc_acc acc = M->acc;
  ampc_linear_fp8 *const f8[4] = {site(M, p, 0), site(M, p, 1), site(M, p, 2), site(M, p, 3)};
  AMPC_TRY(M->be->linear_backward_gelu(rq, MLP, D, dout, grad_dt, a->g, act_dt, W(M, p->f2w),
                                       weight_dt, a->h, act_dt, M->dH1, M->dH2, G(M, p->f2w),
                                       G(M, p->f2b), acc, site(M, p, 5), &M->ws));
  mark_tensor(M, br, AMPC_TM_GRAD, rows_of(br, M->dH1, grad_dt, b, tq * MLP), "%s.mlp.fc2", name);
  grads_progress(M);
  mark_tensor(M, br, AMPC_TM_GRAD, rows_of(br, M->dH2, grad_dt, b, tq * MLP), "%s.mlp.gelu", name);
  AMPC_TRY(M->be->linear_backward_fp8(rq, D, MLP, M->dH2, grad_dt, a->ln2, act_dt, W(M, p->f1w),
                                      weight_dt, M->dL, G(M, p->f1w), G(M, p->f1b), acc,
                                      site(M, p, 4), &M->ws));
  mark_tensor(M, br, AMPC_TM_GRAD, rows_of(br, M->dL, grad_dt, b, tq * D), "%s.mlp.fc1", name);
  grads_progress(M);
  if (a->y1) { /* x1 again (the forward's add, the same bits), counted once: there */
    ampc_tally *const was = ampc_tally_bind(NULL);
    const ampc_status st =
        M->be->add_forward(rq * D, x, stream_dt, a->y1, act_dt, a->x1, stream_dt, NULL);
    (void)ampc_tally_bind(was);
    AMPC_TRY(st);
  }
  AMPC_TRY(M->be->layernorm_backward_add(rq, D, M->dL, grad_dt, a->x1, stream_dt, W(M, p->n2w),
                                         weight_dt, a->mean2, a->rstd2, M->dS2, G(M, p->n2w),
                                         G(M, p->n2b), dout, &M->ws));
  mark_tensor(M, br, AMPC_TM_GRAD, rows_of(br, M->dS2, grad_dt, b, tq * D), "%s.norm2", name);
  mark_tensor(M, br, AMPC_TM_GRAD, rows_of(br, dout, grad_dt, b, tq * D), "%s.%s_residual", name,
              attn);
  const size_t ws = ampc_dtype_size(weight_dt), gsz = ampc_dtype_size(grad_dt);
  const char *win = W(M, p->inw);
  char *gin = G(M, p->inw), *gbin = G(M, p->inb);
  AMPC_TRY(M->be->mha_backward_ex(
      b, tq, tk, D, M->c.heads, a->ln1, kv ? kv : a->ln1, act_dt, win, win + (size_t)(D * D) * ws,
      win + (size_t)(2 * D * D) * ws, W(M, p->outw), weight_dt, &a->c, M->prob_dt, dout, grad_dt,
      M->dL, dkv, dkv ? cross(M, AMPC_BRANCH_VISION, AMPC_BRANCH_FUSION) : 1.0f, gin, gbin,
      gin + (size_t)(D * D) * gsz, gbin + (size_t)D * gsz, gin + (size_t)(2 * D * D) * gsz,
      gbin + (size_t)(2 * D) * gsz, G(M, p->outw), G(M, p->outb), acc,
      M->fp8_on || M->s8_lin ? f8 : NULL, &M->ws));
  mark_tensor(M, br, AMPC_TM_GRAD, rows_of(br, M->dL, grad_dt, b, tq * D), "%s.%s", name, attn);
  grads_progress(M);
  AMPC_TRY(M->be->layernorm_backward_add(rq, D, M->dL, grad_dt, x, stream_dt, W(M, p->n1w),
                                         weight_dt, a->mean1, a->rstd1, M->dS2, G(M, p->n1w),
                                         G(M, p->n1b), dout, &M->ws));
  mark_tensor(M, br, AMPC_TM_GRAD, rows_of(br, M->dS2, grad_dt, b, tq * D), "%s.norm1", name);
  return AMPC_OK;
}

/* ---- encoders ------------------------------------------------------------------------- */

/* the vision encoder on M->in_images */
static ampc_status vision_fwd(ampc_mmodel *M, int64_t b) {
  const int64_t D = M->D, NV = M->NV, NP = M->NP;
  const ampc_dtype stream_dt = M->stream_dt, act_dt = M->act_dt, weight_dt = M->weight_dt;
  AMPC_TRY(M->be->patch_embed_forward(
      b, M->c.img, M->c.img, M->c.channels, M->c.patch, D, M->in_images, 1.0f / 127.5f, -1.0f,
      W(M, M->patch_w), weight_dt, W(M, M->patch_b), M->patch, act_dt, M->acc, NULL, &M->ws));
  const int64_t xr = M->fwd.extreme_row;
  if (M->fwd.extreme_factor != 0.0f && xr >= 0 && xr < b) { /* the test hook: one image again */
    const float f = M->fwd.extreme_factor;
    const int64_t px = M->c.img * M->c.img * M->c.channels;
    AMPC_TRY(M->be->patch_embed_forward(
        1, M->c.img, M->c.img, M->c.channels, M->c.patch, D, M->in_images + xr * px, f / 127.5f, -f,
        W(M, M->patch_w), weight_dt, W(M, M->patch_b),
        (char *)M->patch + (size_t)(xr * NP * D) * ampc_dtype_size(act_dt), act_dt, M->acc, NULL,
        &M->ws));
  }
  /* x0 = [cls; patches] + positions, summed in FP32, one rounding */
  AMPC_TRY(M->be->vit_tokens_forward(b, NP, D, M->patch, act_dt, W(M, M->cls_tok), W(M, M->vpos),
                                     weight_dt, M->v0, stream_dt));
  mark_tensor(M, AMPC_BRANCH_VISION, AMPC_TM_ACT,
              rows_of(AMPC_BRANCH_VISION, M->patch, act_dt, b, NP * D), "vision.patch_embed");
  const void *x = M->v0;
  for (int i = 0; i < M->c.v_depth; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "vision.blocks.%d", i);
    AMPC_TRY(blk_fwd(M, &M->vb[i], &M->va[i], b, NV, NV, x, NULL, NULL, AMPC_BRANCH_VISION, nm));
    x = M->va[i].out;
  }
  AMPC_TRY(M->be->layernorm_forward(b * NV, D, x, stream_dt, W(M, M->vn_w), W(M, M->vn_b),
                                    weight_dt, k_ln_eps, M->vfin, act_dt, M->vmean, M->vrstd,
                                    NULL));
  mark_tensor(M, AMPC_BRANCH_VISION, AMPC_TM_ACT,
              rows_of(AMPC_BRANCH_VISION, M->vfin, act_dt, b, NV * D), "vision.norm");
  const size_t as = ampc_dtype_size(act_dt);
  AMPC_TRY(M->be->copy2d(M->vcls, (size_t)D * as, M->vfin, (size_t)(NV * D) * as, (size_t)D * as,
                         (size_t)b)); /* the CLS rows */
  if (!M->c.image_only) {
    AMPC_TRY(M->be->linear_forward(b, D, M->E, M->vcls, act_dt, W(M, M->iproj), weight_dt, NULL,
                                   M->iemb, act_dt, M->acc, NULL));
    AMPC_TRY(M->be->l2norm_forward(b, M->E, M->iemb, act_dt, k_l2_eps, M->inorm, act_dt, NULL));
    mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT,
                rows_of(AMPC_BRANCH_HEADS, M->iemb, act_dt, b, M->E), "vision_proj");
  }
  AMPC_TRY(M->be->linear_forward(b, D, M->c.classes, M->vcls, act_dt, W(M, M->cls_w), weight_dt,
                                 W(M, M->cls_b), M->clog, act_dt, M->acc, NULL));
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT,
              rows_of(AMPC_BRANCH_HEADS, M->clog, act_dt, b, M->c.classes), "%s",
              M->c.image_only ? "head" : "cls_head");
  return AMPC_OK;
}

/* the text encoder on b captions (h_tokens on the host, tokens where the
 * tensors are: the same buffer on the CPU); the pooled embedding of the
 * first npool */
static ampc_status text_fwd(ampc_mmodel *M, int64_t b, const int32_t *h_tokens,
                            const int32_t *tokens, int64_t npool) {
  const int64_t D = M->D, TT = M->TT;
  const ampc_dtype stream_dt = M->stream_dt, act_dt = M->act_dt, weight_dt = M->weight_dt;
  for (int64_t i = 0; i < b * TT; i++) {
    if (h_tokens[i] < 0 || h_tokens[i] >= M->c.vocab)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "text: token id %d outside [0, %lld)", h_tokens[i],
                       (long long)M->c.vocab);
    M->h_tmask[i] = h_tokens[i] != AMPC_TOKEN_PAD;
  }
  AMPC_TRY(ampc_backend_put(M->be, M->tmask, M->h_tmask, (size_t)(b * TT)));
  AMPC_TRY(M->be->embedding_forward(b, TT, D, tokens, M->c.vocab, W(M, M->tok), W(M, M->tpos),
                                    weight_dt, M->t0, stream_dt, NULL));
  mark_tensor(M, AMPC_BRANCH_TEXT, AMPC_TM_ACT,
              rows_of(AMPC_BRANCH_TEXT, M->t0, stream_dt, b, TT * D), "text.embeddings");
  const void *x = M->t0;
  for (int i = 0; i < M->c.t_depth; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "text.blocks.%d", i);
    AMPC_TRY(blk_fwd(M, &M->tb[i], &M->ta[i], b, TT, TT, x, NULL, M->tmask, AMPC_BRANCH_TEXT, nm));
    x = M->ta[i].out;
  }
  AMPC_TRY(M->be->layernorm_forward(b * TT, D, x, stream_dt, W(M, M->tn_w), W(M, M->tn_b),
                                    weight_dt, k_ln_eps, M->tfin, act_dt, M->tmean, M->trstd,
                                    NULL));
  AMPC_TRY(
      M->be->mean_pool_forward(npool, TT, D, M->tfin, act_dt, M->tmask, M->tpool, act_dt, NULL));
  mark_tensor(M, AMPC_BRANCH_TEXT, AMPC_TM_ACT,
              rows_of(AMPC_BRANCH_TEXT, M->tfin, act_dt, b, TT * D), "text.norm");
  AMPC_TRY(M->be->linear_forward(npool, D, M->E, M->tpool, act_dt, W(M, M->tproj), weight_dt, NULL,
                                 M->temb, act_dt, M->acc, NULL));
  AMPC_TRY(M->be->l2norm_forward(npool, M->E, M->temb, act_dt, k_l2_eps, M->tnorm, act_dt, NULL));
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT,
              rows_of(AMPC_BRANCH_HEADS, M->tnorm, act_dt, npool, M->E), "text_proj");
  return AMPC_OK;
}

/* the log-temperature used (*ls; clamped at ln 100) */
static ampc_status log_scale(const ampc_mmodel *M, float *ls, bool *clamped) {
  uint32_t raw = 0; /* one weight, up to 4 bytes */
  AMPC_TRY(M->be->to_host(&raw, W(M, M->lscale), ampc_dtype_size(M->weight_dt)));
  const float v = ampc_elem_load(&raw, M->weight_dt, 0);
  *clamped = v > k_max_log_scale;
  *ls = *clamped ? k_max_log_scale : v;
  return AMPC_OK;
}

/* ALBEF's negatives: for each image i, a text j != i drawn with probability
 * softmax_j(sim[i, j] * exp(ls)) (FP64 weights over the FP32 similarities);
 * a row whose similarities are not all finite keeps its argmax pick. */
static void sample_negatives(ampc_mmodel *M, int64_t b, float ls, uint64_t seed, bool uniform) {
  ampc_rng r;
  ampc_rng_seed(&r, seed);
  const double scale = exp((double)ls);
  const float *sim = M->h_sim;
  for (int64_t i = 0; i < b; i++) {
    const uint64_t u = ampc_rng_next(&r); /* one draw per row, whatever happens */
    if (uniform) {                        /* j != i, each with probability 1 / (b - 1) */
      const int64_t j = (int64_t)(u % (uint64_t)(b - 1));
      M->h_neg[i] = (int32_t)(j >= i ? j + 1 : j);
      continue;
    }
    double mx = -INFINITY;
    bool finite = true;
    for (int64_t j = 0; j < b; j++)
      if (j != i) {
        finite = finite && isfinite(sim[i * b + j]);
        if ((double)sim[i * b + j] > mx)
          mx = (double)sim[i * b + j];
      }
    if (!finite)
      continue;
    double z = 0.0;
    for (int64_t j = 0; j < b; j++)
      if (j != i)
        z += exp(((double)sim[i * b + j] - mx) * scale);
    const double t = (double)(u >> 11) * 0x1p-53 * z;
    double acc = 0.0;
    int64_t pick = -1;
    for (int64_t j = 0; j < b && pick < 0; j++)
      if (j != i) {
        acc += exp(((double)sim[i * b + j] - mx) * scale);
        if (acc > t)
          pick = j;
      }
    if (pick < 0) /* t rounded to the top: the last candidate */
      pick = i == b - 1 ? b - 2 : b - 1;
    M->h_neg[i] = (int32_t)pick;
  }
}

/* ---- the whole model ------------------------------------------------------------------ */

/* The vision encoder's backward pass from dv32 [b*NV, D] (FP32 sums of the
 * gradient of its final-norm output). */
static ampc_status vision_bwd(ampc_mmodel *M, int64_t b, const float *dv32) {
  const int64_t D = M->D, NV = M->NV;
  const ampc_dtype stream_dt = M->stream_dt, weight_dt = M->weight_dt, grad_dt = M->grad_dt;
  const ampc_acc acc = M->acc;
  const ampc_mmodel_config *c = &M->c;
  /* vision encoder */
  AMPC_TRY(M->be->store_f32(M->dS2, grad_dt, dv32, (size_t)(b * NV * D), NULL));
  const void *vlast = M->va[c->v_depth - 1].out;
  AMPC_TRY(M->be->layernorm_backward(b * NV, D, M->dS2, grad_dt, vlast, stream_dt, W(M, M->vn_w),
                                     weight_dt, M->vmean, M->vrstd, M->dS, G(M, M->vn_w),
                                     G(M, M->vn_b), &M->ws));
  mark_tensor(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD,
              rows_of(AMPC_BRANCH_VISION, M->dS, grad_dt, b, NV * D), "vision.norm");
  grads_progress(M);
  for (int i = (int)c->v_depth - 1; i >= 0; i--) {
    const void *xin = i == 0 ? M->v0 : M->va[i - 1].out;
    char nm[32];
    snprintf(nm, sizeof nm, "vision.blocks.%d", i);
    AMPC_TRY(blk_bwd(M, &M->vb[i], &M->va[i], b, NV, NV, xin, NULL, M->dS, NULL, AMPC_BRANCH_VISION,
                     nm));
    mark_tensor(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD,
                rows_of(AMPC_BRANCH_VISION, M->dS, grad_dt, b, NV * D), "%s", nm);
    grads_ready(M, &M->vb[i]);
  }
  /* dx0 -> cls token, positions (batch sums in FP32) and the patch embedding */
  AMPC_TRY(M->be->vit_tokens_backward(b, M->NP, D, M->dS, grad_dt, M->dS2, G(M, M->cls_tok),
                                      G(M, M->vpos)));
  AMPC_TRY(M->be->patch_embed_backward(b, c->img, c->img, c->channels, c->patch, D, M->in_images,
                                       1.0f / 127.5f, -1.0f, weight_dt, M->dS2, grad_dt,
                                       G(M, M->patch_w), G(M, M->patch_b), acc, &M->ws));
  mark_tensor(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD, NOT_PER_SAMPLE(M->grad_dt),
              "vision.patch_embed");
  /* the vision encoder's other parameters are final too: the patch
   * embedding, CLS token and positions (before its blocks in the table) and
   * its final norm (after them) */
  grads_ready_params(M, M->patch_w, M->vb[0].n1w - 1);
  grads_ready_params(M, M->vn_w, M->vn_b);
  return AMPC_OK;
}

/* image-only models (vit-ref, vit-fm): CE of the group/class head on CLS */
static ampc_status image_only_fwd(ampc_mmodel *M, const ampc_mmodel_batch *bt,
                                  ampc_mmodel_losses *out) {
  if (bt->b < 1 || bt->b > M->B || !bt->images || !bt->labels)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mmodel_forward: bad arguments (batch %lld, "
                     "max %lld)",
                     (long long)bt->b, (long long)M->B);
  const int64_t b = bt->b, C = M->c.classes;
  const ampc_dtype act_dt = M->act_dt;
  for (int64_t i = 0; i < b; i++)
    if (bt->labels[i] < 0 || bt->labels[i] >= C)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "label %d outside [0, %lld)", bt->labels[i],
                       (long long)C);
  AMPC_TRY(load_inputs(M, b, bt->images, NULL, bt->labels));
  AMPC_TRY(vision_fwd(M, b));
  ampc_mmodel_losses L = {0};
  AMPC_TRY(M->be->cross_entropy_forward(b, C, M->clog, act_dt, M->in_labels, &L.cls));
  AMPC_TRY(M->be->argmax_rows(b, C, M->clog, act_dt, false, M->pred));
  AMPC_TRY(ampc_backend_get(M->be, M->h_pred, M->pred, (size_t)b * sizeof *M->pred));
  int64_t hit = 0;
  for (int64_t i = 0; i < b; i++)
    hit += M->h_pred[i] == bt->labels[i];
  L.cls_acc = (float)hit / (float)b;
  L.total = M->c.w_cls * L.cls;
  *out = L;
  return AMPC_OK;
}

/* dx [m, k] = r (dy [m, n] W [n, k]): a linear layer's input gradient,
 * crossing into another branch with the factor r (rounded once) */
static ampc_status dgrad(ampc_mmodel *M, int64_t m, int64_t k, int64_t n, float r, const void *dy,
                         const void *w, void *dx) {
  return M->be->gemm(AMPC_OP_N, AMPC_OP_N, m, k, n, r, dy, M->grad_dt, n, w, M->weight_dt, k, 0.0f,
                     dx, M->grad_dt, k, M->acc);
}

static ampc_status image_only_bwd(ampc_mmodel *M) {
  const ampc_mmodel_batch *bt = &M->fwd;
  const int64_t b = bt->b, D = M->D, NV = M->NV, C = M->c.classes;
  const ampc_dtype act_dt = M->act_dt, grad_dt = M->grad_dt;
  AMPC_TRY(M->be->cross_entropy_backward(b, C, M->clog, act_dt, M->in_labels,
                                         M->lseed[AMPC_MM_LOSS_CLS] * M->c.w_cls, M->dclog,
                                         grad_dt));
  AMPC_TRY(M->be->linear_backward(b, D, C, M->dclog, grad_dt, M->vcls, act_dt, W(M, M->cls_w),
                                  M->weight_dt, NULL, G(M, M->cls_w), G(M, M->cls_b), M->acc,
                                  &M->ws));
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD,
              rows_of(AMPC_BRANCH_HEADS, M->dclog, grad_dt, b, C), "head");
  AMPC_TRY(dgrad(M, b, D, C, cross(M, AMPC_BRANCH_VISION, AMPC_BRANCH_HEADS), M->dclog,
                 W(M, M->cls_w), M->dvcls));
  mark_tensor(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD, NOT_PER_SAMPLE(M->grad_dt), "vision.cls");
  float *dv32 = M->dv32;
  AMPC_TRY(M->be->zero(dv32, (size_t)(b * NV * D) * sizeof(float)));
  for (int64_t bi = 0; bi < b; bi++) /* the CLS rows (exact widening) */
    AMPC_TRY(M->be->convert(dv32 + bi * NV * D, AMPC_F32, at(M->dvcls, grad_dt, bi * D), grad_dt,
                            (size_t)D));
  return vision_bwd(M, b, dv32);
}

/* ---- global negatives (ampc_mmodel_set_group) ---------------------------------------- */

/* InfoNCE over the group's global batch of G = b x ranks pairs: every rank's
 * normalised embeddings are gathered; this rank's b images are scored against
 * all G texts and its b texts against all G images (rows label0 = rank x b
 * on), so the ranks' rows together are the global similarity matrix and its
 * transpose. loss = (sum of this rank's row CEs) / (2b): the mean over ranks,
 * as the run averages it, is the global loss. The local b x b block is kept
 * in M->sim for the hard negatives. */
static ampc_status global_itc_fwd(ampc_mmodel *M, int64_t b, float ls, float *itc) {
  const ampc_model_group *g = &M->group;
  const ampc_backend *be = M->be;
  const int64_t E = M->E, G = b * g->size, r0 = b * g->rank;
  const ampc_dtype act_dt = M->act_dt;
  const size_t bytes = (size_t)(b * E) * ampc_dtype_size(act_dt);
  /* the ranks' exchange on host buffers (on a device: this rank's rows
   * copied out, every rank's copied back in) */
  const void *src = M->inorm;
  if (be->device) {
    AMPC_TRY(ampc_backend_get(be, M->h_loc, M->inorm, bytes));
    src = M->h_loc;
  }
  AMPC_TRY(g->allgather(g->user, src, bytes, M->h_iall));
  src = M->tnorm;
  if (be->device) {
    AMPC_TRY(ampc_backend_get(be, M->h_loc, M->tnorm, bytes));
    src = M->h_loc;
  }
  AMPC_TRY(g->allgather(g->user, src, bytes, M->h_tall));
  AMPC_TRY(ampc_backend_put(be, M->iall, M->h_iall, bytes * (size_t)g->size));
  AMPC_TRY(ampc_backend_put(be, M->tall, M->h_tall, bytes * (size_t)g->size));
  AMPC_TRY(be->gemm(AMPC_OP_N, AMPC_OP_T, b, G, E, 1.0f, M->inorm, act_dt, E, M->tall, act_dt, E,
                    0.0f, M->sim_i2t, AMPC_F32, G, M->acc));
  AMPC_TRY(be->gemm(AMPC_OP_N, AMPC_OP_T, b, G, E, 1.0f, M->tnorm, act_dt, E, M->iall, act_dt, E,
                    0.0f, M->sim_t2i, AMPC_F32, G, M->acc));
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, NOT_PER_SAMPLE(M->act_dt), "similarity");
  /* the InfoNCE rows on the host (b x G FP32 each way) */
  const size_t sb = (size_t)(b * G) * sizeof(float);
  AMPC_TRY(ampc_backend_get(be, M->h_sim_i2t, M->sim_i2t, sb));
  AMPC_TRY(ampc_backend_get(be, M->h_sim_t2i, M->sim_t2i, sb));
  double s1 = 0.0, s2 = 0.0;
  AMPC_TRY(ampc_infonce_rows_forward(b, G, M->h_sim_i2t, AMPC_F32, ls, r0, &s1));
  AMPC_TRY(ampc_infonce_rows_forward(b, G, M->h_sim_t2i, AMPC_F32, ls, r0, &s2));
  *itc = (float)((s1 + s2) / (2.0 * (double)b));
  /* this rank's b x b block: the hard negatives are mined in the shard */
  for (int64_t i = 0; i < b; i++)
    memcpy(M->h_sim + i * b, M->h_sim_i2t + i * G + r0, (size_t)b * sizeof *M->h_sim);
  return ampc_backend_put(be, M->sim, M->h_sim, (size_t)(b * b) * sizeof *M->h_sim);
}

/* x [n] FP32 (a tensor) = the group's sum, through its host side h (the
 * same buffer on the CPU) */
static ampc_status group_sum(ampc_mmodel *M, float *x, float *h, int64_t n) {
  const size_t bytes = (size_t)n * sizeof *x;
  AMPC_TRY(ampc_backend_get(M->be, h, x, bytes));
  AMPC_TRY(M->group.sum_f32(M->group.user, h, n));
  return ampc_backend_put(M->be, x, h, bytes);
}

/* Its backward pass, seeded with S (times the loss weight): the gradients
 * of this rank's rows w.r.t. all G embeddings (part_i, part_t) are summed
 * over the ranks; each rank keeps the rows of its own samples and adds the
 * gradient through its own rows: dinorm = dA tall + sum_r part_i[r0..], in
 * FP32, one rounding into the gradient dtype. The rows' gradients (dA, dC)
 * and the ranks' sum are computed on the host, the products on the device. */
static ampc_status global_itc_bwd(ampc_mmodel *M, int64_t b, float ls, float S, float *dls) {
  const ampc_model_group *g = &M->group;
  const ampc_backend *be = M->be;
  const int64_t E = M->E, G = b * g->size, r0 = b * g->rank;
  const ampc_dtype act_dt = M->act_dt, grad_dt = M->grad_dt;
  const ampc_acc acc = M->acc;
  const float coef = S / (2.0f * (float)b);
  ampc_scratch *ws = be->device ? NULL : &M->ws; /* a device's ws is not host memory */
  AMPC_TRY(ampc_infonce_rows_backward(b, G, M->h_sim_i2t, AMPC_F32, ls, r0, coef, M->h_dA, grad_dt,
                                      dls, ws));
  AMPC_TRY(ampc_infonce_rows_backward(b, G, M->h_sim_t2i, AMPC_F32, ls, r0, coef, M->h_dC, grad_dt,
                                      dls, ws));
  const size_t db = (size_t)(b * G) * ampc_dtype_size(grad_dt);
  AMPC_TRY(ampc_backend_put(be, M->dA, M->h_dA, db));
  AMPC_TRY(ampc_backend_put(be, M->dC, M->h_dC, db));
  /* texts' gradient from this rank's image rows, images' from its text rows */
  AMPC_TRY(be->gemm(AMPC_OP_T, AMPC_OP_N, G, E, b, 1.0f, M->dA, grad_dt, G, M->inorm, act_dt, E,
                    0.0f, M->part_t, AMPC_F32, E, acc));
  AMPC_TRY(be->gemm(AMPC_OP_T, AMPC_OP_N, G, E, b, 1.0f, M->dC, grad_dt, G, M->tnorm, act_dt, E,
                    0.0f, M->part_i, AMPC_F32, E, acc));
  AMPC_TRY(group_sum(M, M->part_t, M->h_part_t, G * E));
  AMPC_TRY(group_sum(M, M->part_i, M->h_part_i, G * E));
  AMPC_TRY(be->gemm(AMPC_OP_N, AMPC_OP_N, b, E, G, 1.0f, M->dA, grad_dt, G, M->tall, act_dt, E,
                    0.0f, M->dloc_i, AMPC_F32, E, acc));
  AMPC_TRY(be->gemm(AMPC_OP_N, AMPC_OP_N, b, E, G, 1.0f, M->dC, grad_dt, G, M->iall, act_dt, E,
                    0.0f, M->dloc_t, AMPC_F32, E, acc));
  AMPC_TRY(be->scatter_add_rows(b, E, NULL, b, M->part_i + r0 * E, AMPC_F32, NULL, AMPC_F32,
                                M->dloc_i, E));
  AMPC_TRY(be->scatter_add_rows(b, E, NULL, b, M->part_t + r0 * E, AMPC_F32, NULL, AMPC_F32,
                                M->dloc_t, E));
  AMPC_TRY(be->store_f32(M->dinorm, grad_dt, M->dloc_i, (size_t)(b * E), NULL));
  return be->store_f32(M->dtnorm, grad_dt, M->dloc_t, (size_t)(b * E), NULL);
}

/* MLM's masking (BERT's, without the 10 % random and 10 % kept tokens):
 * M->mtok = the b captions, then copies in which each non-padding token is
 * replaced by AMPC_TOKEN_UNK with probability mlm_prob (one uniform draw per
 * token; a caption left unmasked gets one position drawn uniformly); the
 * masked positions as rows of the fusion's output (copy i is fusion pair
 * 2b + i) and their original ids. Returns the number masked. */
static int64_t mask_captions(ampc_mmodel *M, int64_t b, const int32_t *tokens, uint64_t seed) {
  const int64_t TT = M->TT;
  ampc_rng r;
  ampc_rng_seed(&r, seed ? seed : 0x6d6c6d2d6d61736bull);
  const double p = (double)M->c.mlm_prob;
  memcpy(M->h_mtok, tokens, (size_t)(b * TT) * sizeof *tokens);
  int32_t *cp = M->h_mtok + b * TT;
  memcpy(cp, tokens, (size_t)(b * TT) * sizeof *tokens);
  int64_t n = 0;
  for (int64_t i = 0; i < b; i++) {
    int64_t len = 0, here = 0;
    for (int64_t t = 0; t < TT; t++) {
      const uint64_t u = ampc_rng_next(&r); /* one draw per position, whatever happens */
      if (tokens[i * TT + t] == AMPC_TOKEN_PAD)
        continue;
      len++;
      if ((double)(u >> 11) * 0x1p-53 < p) {
        M->h_mlm_pos[n] = (int32_t)((2 * b + i) * TT + t), M->h_mlm_tgt[n] = tokens[i * TT + t];
        cp[i * TT + t] = AMPC_TOKEN_UNK;
        n++, here++;
      }
    }
    const uint64_t u = ampc_rng_next(&r);
    if (here == 0 && len > 0) { /* the k-th non-padding token */
      int64_t k = (int64_t)(u % (uint64_t)len);
      for (int64_t t = 0; t < TT; t++)
        if (tokens[i * TT + t] != AMPC_TOKEN_PAD && k-- == 0) {
          M->h_mlm_pos[n] = (int32_t)((2 * b + i) * TT + t), M->h_mlm_tgt[n] = tokens[i * TT + t];
          cp[i * TT + t] = AMPC_TOKEN_UNK;
          n++;
          break;
        }
    }
  }
  return n;
}

/* the MLM head on the masked positions of the fused copies: mean CE over
 * them and their argmax accuracy */
static ampc_status mlm_fwd(ampc_mmodel *M, int64_t np, ampc_mmodel_losses *L) {
  const int64_t D = M->D, TT = M->TT, V = M->c.vocab, n = M->n_masked;
  const ampc_dtype act_dt = M->act_dt;
  if (n == 0)
    return AMPC_OK;
  AMPC_TRY(M->be->gather_rows(n, D, M->mlm_pos, np * TT, M->ffin, act_dt, M->mrows, act_dt));
  AMPC_TRY(M->be->linear_forward(n, D, V, M->mrows, act_dt, W(M, M->mlm_w), M->weight_dt,
                                 W(M, M->mlm_b), M->mlog, act_dt, M->acc, NULL));
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, NOT_PER_SAMPLE(M->act_dt), "mlm_head");
  AMPC_TRY(M->be->cross_entropy_forward(n, V, M->mlog, act_dt, M->mlm_tgt, &L->mlm));
  AMPC_TRY(M->be->argmax_rows(n, V, M->mlog, act_dt, false, M->mlm_pred));
  AMPC_TRY(ampc_backend_get(M->be, M->h_mlm_pred, M->mlm_pred, (size_t)n * sizeof *M->mlm_pred));
  int64_t hit = 0;
  for (int64_t i = 0; i < n; i++)
    hit += M->h_mlm_pred[i] == M->h_mlm_tgt[i];
  L->mlm_acc = (float)hit / (float)n;
  L->mlm_tokens = n;
  return AMPC_OK;
}

static ampc_status mm_fwd(ampc_mmodel *M, const ampc_mmodel_batch *bt, ampc_mmodel_losses *out) {
  if (bt->b < 2 || bt->b > M->B || !bt->images || !bt->tokens || !bt->labels)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mmodel_forward: bad arguments (batch %lld, "
                     "max %lld)",
                     (long long)bt->b, (long long)M->B);
  const int64_t b = bt->b, D = M->D, NV = M->NV, TT = M->TT, E = M->E, C = M->c.classes;
  const ampc_dtype stream_dt = M->stream_dt, act_dt = M->act_dt, weight_dt = M->weight_dt;
  for (int64_t i = 0; i < b; i++)
    if (bt->labels[i] < 0 || bt->labels[i] >= C)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "label %d outside [0, %lld)", bt->labels[i],
                       (long long)C);
  AMPC_TRY(load_inputs(M, b, bt->images, bt->tokens, bt->labels));
  AMPC_TRY(vision_fwd(M, b));
  M->n_masked = M->mlm ? mask_captions(M, b, bt->tokens, bt->mask_seed) : 0;
  if (M->mlm) {
    const size_t nm32 = (size_t)M->n_masked * sizeof(int32_t);
    AMPC_TRY(ampc_backend_put(M->be, M->mtok, M->h_mtok, (size_t)(2 * b * TT) * sizeof(int32_t)));
    AMPC_TRY(ampc_backend_put(M->be, M->mlm_pos, M->h_mlm_pos, nm32));
    AMPC_TRY(ampc_backend_put(M->be, M->mlm_tgt, M->h_mlm_tgt, nm32));
  }
  AMPC_TRY(
      text_fwd(M, M->TB * b, M->mlm ? M->h_mtok : bt->tokens, M->mlm ? M->mtok : M->in_tokens, b));
  bool clamped = false;
  float ls = 0.0f;
  AMPC_TRY(log_scale(M, &ls, &clamped));
  ampc_mmodel_losses L = {0};
  if (M->global) {
    AMPC_TRY(global_itc_fwd(M, b, ls, &L.itc));
  } else {
    /* contrastive similarities (a GEMM on the normalised embeddings) */
    AMPC_TRY(M->be->gemm(AMPC_OP_N, AMPC_OP_T, b, b, E, 1.0f, M->inorm, act_dt, E, M->tnorm, act_dt,
                         E, 0.0f, M->sim, AMPC_F32, b, M->acc));
    mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, NOT_PER_SAMPLE(M->act_dt), "similarity");
    AMPC_TRY(M->be->infonce_forward(b, M->sim, AMPC_F32, ls, &L.itc));
  }
  /* hard negatives: for image i the most similar other text (a row holding
   * a NaN, whose loss is NaN anyway, takes the first other text) */
  AMPC_TRY(M->be->argmax_rows(b, b, M->sim, AMPC_F32, true, M->neg));
  AMPC_TRY(ampc_backend_get(M->be, M->h_neg, M->neg, (size_t)b * sizeof *M->neg));
  for (int64_t i = 0; i < b; i++)
    if (M->h_neg[i] < 0)
      M->h_neg[i] = i == 0 ? 1 : 0;
  if (bt->neg_seed != 0) {
    AMPC_TRY(ampc_backend_get(M->be, M->h_sim, M->sim, (size_t)(b * b) * sizeof *M->sim));
    sample_negatives(M, b, ls, bt->neg_seed, bt->neg_uniform);
  }
  /* fusion on 2b pairs: (i, i) positives then (i, neg[i]) negatives; with
   * MLM, then b more: image i with the masked copy of caption i (text row
   * b + i) */
  const int64_t np = M->FB * b;
  for (int64_t pr = 0; pr < np; pr++) {
    M->h_pair_img[pr] = (int32_t)(pr % b);
    M->h_pair_text[pr] = (int32_t)(pr < b ? pr : pr < 2 * b ? M->h_neg[pr - b] : pr - b);
    memcpy(M->h_fmask + pr * TT, M->h_tmask + M->h_pair_text[pr] * TT, (size_t)TT);
    if (pr < 2 * b)
      M->h_itm_t[pr] = pr < b ? 1.0f : 0.0f;
  }
  AMPC_TRY(ampc_backend_put(M->be, M->pair_img, M->h_pair_img, (size_t)np * sizeof(int32_t)));
  AMPC_TRY(ampc_backend_put(M->be, M->pair_text, M->h_pair_text, (size_t)np * sizeof(int32_t)));
  AMPC_TRY(ampc_backend_put(M->be, M->fmask, M->h_fmask, (size_t)(np * TT)));
  AMPC_TRY(ampc_backend_put(M->be, M->itm_t, M->h_itm_t, (size_t)(2 * b) * sizeof(float)));
  AMPC_TRY(M->be->gather_rows(np, NV * D, M->pair_img, b, M->vfin, act_dt, M->fkv, act_dt));
  AMPC_TRY(
      M->be->gather_rows(np, TT * D, M->pair_text, M->TB * b, M->tfin, act_dt, M->f0, stream_dt));
  const void *x = M->f0;
  for (int i = 0; i < M->c.f_depth; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "fusion.blocks.%d", i);
    AMPC_TRY(blk_fwd(M, &M->fb[i], &M->fa[i], np, TT, NV, x, M->fkv, NULL, AMPC_BRANCH_FUSION, nm));
    x = M->fa[i].out;
  }
  const void *fout = x;
  AMPC_TRY(M->be->layernorm_forward(np * TT, D, fout, stream_dt, W(M, M->fn_w), W(M, M->fn_b),
                                    weight_dt, k_ln_eps, M->ffin, act_dt, M->fmean, M->frstd,
                                    NULL));
  const int64_t nm = 2 * b; /* the matching pairs */
  AMPC_TRY(M->be->mean_pool_forward(nm, TT, D, M->ffin, act_dt, M->fmask, M->fpool, act_dt, NULL));
  mark_tensor(M, AMPC_BRANCH_FUSION, AMPC_TM_ACT,
              rows_of(AMPC_BRANCH_FUSION, M->fpool, act_dt, nm, D), "fusion.norm");
  AMPC_TRY(M->be->linear_forward(nm, D, 1, M->fpool, act_dt, W(M, M->itm_w), weight_dt,
                                 W(M, M->itm_b), M->itm, act_dt, M->acc, NULL));
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_ACT, (tref){M->itm, act_dt, nm, 1, true}, "itm_head");
  AMPC_TRY(M->be->bce_logits_forward(nm, M->itm, act_dt, M->itm_t, &L.itm));
  if (M->mlm)
    AMPC_TRY(mlm_fwd(M, np, &L));
  AMPC_TRY(M->be->cross_entropy_forward(b, C, M->clog, act_dt, M->in_labels, &L.cls));
  AMPC_TRY(ampc_backend_get(M->be, M->h_itm, M->itm, (size_t)nm * ampc_dtype_size(act_dt)));
  int64_t hit = 0;
  for (int64_t pr = 0; pr < nm; pr++) {
    const float v = ampc_elem_load(M->h_itm, act_dt, pr); /* a NaN logit is never right */
    hit += !isnan(v) && (v > 0.0f) == (pr < b);
  }
  L.itm_acc = (float)hit / (float)nm;
  AMPC_TRY(M->be->argmax_rows(b, C, M->clog, act_dt, false, M->pred));
  AMPC_TRY(ampc_backend_get(M->be, M->h_pred, M->pred, (size_t)b * sizeof *M->pred));
  hit = 0;
  for (int64_t i = 0; i < b; i++)
    hit += M->h_pred[i] == bt->labels[i];
  L.cls_acc = (float)hit / (float)b;
  const ampc_mmodel_config *c = &M->c;
  L.total = c->w_itc * L.itc + c->w_itm * L.itm + c->w_cls * L.cls;
  if (M->mlm)
    L.total += c->w_mlm * L.mlm;
  *out = L;
  M->fwd_ls = ls, M->fwd_clamped = clamped;
  return AMPC_OK;
}

/* The text encoder's backward pass from dt32 [b*TT, D] (FP32 sums of the
 * gradient of its final-norm output: the fusion's and the contrastive head's). */
static ampc_status text_bwd(ampc_mmodel *M, int64_t b, const int32_t *tokens, const float *dt32) {
  const ampc_mmodel_config *c = &M->c;
  const int64_t D = M->D, TT = M->TT;
  const ampc_dtype stream_dt = M->stream_dt, weight_dt = M->weight_dt, grad_dt = M->grad_dt;
  AMPC_TRY(M->be->store_f32(M->dS2, grad_dt, dt32, (size_t)(b * TT * D), NULL));
  const void *tlast = M->ta[c->t_depth - 1].out;
  AMPC_TRY(M->be->layernorm_backward(b * TT, D, M->dS2, grad_dt, tlast, stream_dt, W(M, M->tn_w),
                                     weight_dt, M->tmean, M->trstd, M->dS, G(M, M->tn_w),
                                     G(M, M->tn_b), &M->ws));
  mark_tensor(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD,
              rows_of(AMPC_BRANCH_TEXT, M->dS, grad_dt, b, TT * D), "text.norm");
  grads_progress(M);
  for (int i = (int)c->t_depth - 1; i >= 0; i--) {
    const void *xin = i == 0 ? M->t0 : M->ta[i - 1].out;
    char nm[32];
    snprintf(nm, sizeof nm, "text.blocks.%d", i);
    AMPC_TRY(
        blk_bwd(M, &M->tb[i], &M->ta[i], b, TT, TT, xin, NULL, M->dS, NULL, AMPC_BRANCH_TEXT, nm));
    mark_tensor(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD,
                rows_of(AMPC_BRANCH_TEXT, M->dS, grad_dt, b, TT * D), "%s", nm);
    grads_ready(M, &M->tb[i]);
  }
  AMPC_TRY(M->be->embedding_backward(b, TT, D, tokens, c->vocab, M->dS, grad_dt, G(M, M->tok),
                                     G(M, M->tpos), NULL, &M->ws));
  mark_tensor(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, NOT_PER_SAMPLE(M->grad_dt), "text.embeddings");
  return AMPC_OK;
}

/* the backward pass, each loss seeded with S * its weight (S: the heads'
 * seed); the gradients crossing into the fusion and the encoders are
 * rescaled to their branch's seed (cross) */
static ampc_status mm_bwd(ampc_mmodel *M) {
  const ampc_mmodel_batch *bt = &M->fwd;
  const ampc_mmodel_config *c = &M->c;
  const int64_t b = bt->b, D = M->D, NV = M->NV, TT = M->TT, E = M->E, C = c->classes;
  const int64_t np = M->FB * b, nm = 2 * b, bt_rows = M->TB * b; /* fusion pairs, ITM pairs */
  const ampc_dtype stream_dt = M->stream_dt, act_dt = M->act_dt, weight_dt = M->weight_dt,
                   grad_dt = M->grad_dt;
  const float ls = M->fwd_ls;
  const bool clamped = M->fwd_clamped;
  const void *fout = c->f_depth > 0 ? M->fa[c->f_depth - 1].out : M->f0;
  const ampc_acc acc = M->acc;
  /* a term seeded 0 (ampc_mmodel_backward_losses) is skipped with every pass
   * only it reaches: its gradient is 0 there */
  const float *S = M->lseed;
  const bool do_cls = S[AMPC_MM_LOSS_CLS] != 0.0f, do_itm = S[AMPC_MM_LOSS_ITM] != 0.0f,
             do_itc = S[AMPC_MM_LOSS_ITC] != 0.0f,
             do_mlm = M->mlm && S[AMPC_MM_LOSS_MLM] != 0.0f && M->n_masked > 0;
  const size_t gsz = ampc_dtype_size(grad_dt);
  /* group head */
  if (do_cls) {
    AMPC_TRY(M->be->cross_entropy_backward(b, C, M->clog, act_dt, M->in_labels,
                                           S[AMPC_MM_LOSS_CLS] * c->w_cls, M->dclog, grad_dt));
    AMPC_TRY(M->be->linear_backward(b, D, C, M->dclog, grad_dt, M->vcls, act_dt, W(M, M->cls_w),
                                    weight_dt, NULL, G(M, M->cls_w), G(M, M->cls_b), acc, &M->ws));
  }
  /* matching head and fusion */
  if (do_itm) {
    AMPC_TRY(M->be->bce_logits_backward(nm, M->itm, act_dt, M->itm_t,
                                        S[AMPC_MM_LOSS_ITM] * c->w_itm, M->ditm, grad_dt));
    AMPC_TRY(M->be->linear_backward(nm, D, 1, M->ditm, grad_dt, M->fpool, act_dt, W(M, M->itm_w),
                                    weight_dt, NULL, G(M, M->itm_w), G(M, M->itm_b), acc, &M->ws));
  }
  const int64_t nmask = M->n_masked, V = c->vocab;
  if (do_mlm) { /* the token-level loss: S w_mlm (softmax - onehot) / nmask per logit */
    AMPC_TRY(M->be->cross_entropy_backward(nmask, V, M->mlog, act_dt, M->mlm_tgt,
                                           S[AMPC_MM_LOSS_MLM] * c->w_mlm, M->dmlog, grad_dt));
    AMPC_TRY(M->be->linear_backward(nmask, D, V, M->dmlog, grad_dt, M->mrows, act_dt,
                                    W(M, M->mlm_w), weight_dt, NULL, G(M, M->mlm_w), G(M, M->mlm_b),
                                    acc, &M->ws));
  }
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD, NOT_PER_SAMPLE(M->grad_dt), "%s",
              M->mlm ? "cls_head+itm_head+mlm_head" : "cls_head+itm_head");
  grads_progress(M);
  float *dkv32 = M->dKVsum;
  float *dv32 = M->dv32, *dt32 = M->dt32;
  AMPC_TRY(M->be->zero(dv32, (size_t)(b * NV * D) * sizeof(float)));
  AMPC_TRY(M->be->zero(dt32, (size_t)(bt_rows * TT * D) * sizeof(float)));
  if (do_itm || do_mlm) {
    /* the heads' input gradients: into the fusion (counted with its blocks) */
    const float r_fh = cross(M, AMPC_BRANCH_FUSION, AMPC_BRANCH_HEADS);
    if (do_itm) {
      AMPC_TRY(dgrad(M, nm, D, 1, r_fh, M->ditm, W(M, M->itm_w), M->dfpool));
      AMPC_TRY(M->be->mean_pool_backward(nm, TT, D, M->dfpool, grad_dt, M->fmask, M->dL));
    } else {
      AMPC_TRY(M->be->zero(M->dL, (size_t)(nm * TT * D) * gsz));
    }
    if (M->mlm) { /* the masked copies' rows: the MLM head's gradient at the masked positions */
      AMPC_TRY(
          M->be->zero((char *)M->dL + (size_t)(nm * TT * D) * gsz, (size_t)(b * TT * D) * gsz));
      if (do_mlm) {
        AMPC_TRY(dgrad(M, nmask, D, V, r_fh, M->dmlog, W(M, M->mlm_w), M->dmrows));
        AMPC_TRY(M->be->scatter_rows(nmask, D, M->mlm_pos, np * TT, M->dmrows, grad_dt, M->dL));
      }
    }
    AMPC_TRY(M->be->layernorm_backward(np * TT, D, M->dL, grad_dt, fout, stream_dt, W(M, M->fn_w),
                                       weight_dt, M->fmean, M->frstd, M->dS, G(M, M->fn_w),
                                       G(M, M->fn_b), &M->ws));
    AMPC_TRY(M->be->zero(dkv32, (size_t)(np * NV * D) * sizeof(float)));
    for (int i = (int)c->f_depth - 1; i >= 0; i--) {
      const void *xin = i == 0 ? M->f0 : M->fa[i - 1].out;
      char bn[32];
      snprintf(bn, sizeof bn, "fusion.blocks.%d", i);
      AMPC_TRY(blk_bwd(M, &M->fb[i], &M->fa[i], np, TT, NV, xin, M->fkv, M->dS, M->dKV,
                       AMPC_BRANCH_FUSION, bn));
      mark_tensor(M, AMPC_BRANCH_FUSION, AMPC_TM_GRAD,
                  rows_of(AMPC_BRANCH_FUSION, M->dS, grad_dt, np, TT * D), "%s", bn);
      grads_ready(M, &M->fb[i]);
      AMPC_TRY(M->be->scatter_add_rows(np * NV, D, NULL, np * NV, M->dKV, grad_dt, NULL, grad_dt,
                                       dkv32, D));
    }
    /* scatter the fusion gradients back to the encoders' outputs, in FP32 */
    AMPC_TRY(M->be->scatter_add_rows(np, NV * D, M->pair_img, b, dkv32, AMPC_F32, NULL, grad_dt,
                                     dv32, NV * D));
    AMPC_TRY(M->be->scatter_add_rows(np, TT * D, M->pair_text, bt_rows, M->dS, grad_dt, NULL,
                                     grad_dt, dt32, TT * D));
    const float r_tf = cross(M, AMPC_BRANCH_TEXT, AMPC_BRANCH_FUSION);
    if (r_tf != 1.0f) /* the fusion's input gradient crosses into the text encoder */
      AMPC_TRY(M->be->scale_f32(bt_rows * TT * D, dt32, r_tf));
  }
  /* contrastive heads */
  float dls = 0.0f;
  if (do_itc) {
    if (M->global) {
      AMPC_TRY(global_itc_bwd(M, b, ls, S[AMPC_MM_LOSS_ITC] * c->w_itc, &dls));
    } else {
      AMPC_TRY(M->be->infonce_backward(b, M->sim, AMPC_F32, ls, S[AMPC_MM_LOSS_ITC] * c->w_itc,
                                       M->dsim, grad_dt, &dls, &M->ws));
      AMPC_TRY(M->be->gemm(AMPC_OP_N, AMPC_OP_N, b, E, b, 1.0f, M->dsim, grad_dt, b, M->tnorm,
                           act_dt, E, 0.0f, M->dinorm, grad_dt, E, acc));
      AMPC_TRY(M->be->gemm(AMPC_OP_T, AMPC_OP_N, b, E, b, 1.0f, M->dsim, grad_dt, b, M->inorm,
                           act_dt, E, 0.0f, M->dtnorm, grad_dt, E, acc));
    }
    if (!clamped) {             /* the clamp has zero gradient */
      const float *dlsp = &dls; /* a host scalar: copied to the device there */
      if (M->be->device) {
        AMPC_TRY(M->be->to_device(M->d_scalar, &dls, sizeof dls));
        dlsp = M->d_scalar;
      }
      AMPC_TRY(M->be->grad_add_f32(1, dlsp, G(M, M->lscale), grad_dt));
    }
    AMPC_TRY(M->be->l2norm_backward(b, E, M->dinorm, grad_dt, M->iemb, act_dt, k_l2_eps, M->diemb));
    AMPC_TRY(M->be->linear_backward(b, D, E, M->diemb, grad_dt, M->vcls, act_dt, W(M, M->iproj),
                                    weight_dt, NULL, G(M, M->iproj), NULL, acc, &M->ws));
    AMPC_TRY(M->be->l2norm_backward(b, E, M->dtnorm, grad_dt, M->temb, act_dt, k_l2_eps, M->dtemb));
    AMPC_TRY(M->be->linear_backward(b, D, E, M->dtemb, grad_dt, M->tpool, act_dt, W(M, M->tproj),
                                    weight_dt, NULL, G(M, M->tproj), NULL, acc, &M->ws));
  }
  mark_tensor(M, AMPC_BRANCH_HEADS, AMPC_TM_GRAD, NOT_PER_SAMPLE(M->grad_dt), "contrastive_heads");
  /* the fusion's final norm and every head (the table's end, in that order)
   * are final: what follows computes input gradients only */
  if (M->fn_b + 1 == M->iproj)
    grads_ready_params(M, M->fn_w, M->P->count - 1);
  else
    grads_progress(M);
  /* the heads' input gradients into the encoders: the CLS rows (group head
   * and image projection) and the text pool */
  const float r_vh = cross(M, AMPC_BRANCH_VISION, AMPC_BRANCH_HEADS);
  if (do_cls)
    AMPC_TRY(dgrad(M, b, D, C, r_vh, M->dclog, W(M, M->cls_w), M->dvcls));
  if (do_itc)
    AMPC_TRY(dgrad(M, b, D, E, r_vh, M->diemb, W(M, M->iproj), M->dvcls2));
  mark_tensor(M, AMPC_BRANCH_VISION, AMPC_TM_GRAD, NOT_PER_SAMPLE(M->grad_dt), "vision.cls");
  if (do_itc) {
    AMPC_TRY(dgrad(M, b, D, E, cross(M, AMPC_BRANCH_TEXT, AMPC_BRANCH_HEADS), M->dtemb,
                   W(M, M->tproj), M->dtpool));
    AMPC_TRY(M->be->mean_pool_backward(b, TT, D, M->dtpool, grad_dt, M->tmask, M->dL));
  }
  mark_tensor(M, AMPC_BRANCH_TEXT, AMPC_TM_GRAD, NOT_PER_SAMPLE(M->grad_dt), "text.pool");
  if (do_itc)
    AMPC_TRY(
        M->be->scatter_add_rows(b * TT, D, NULL, b * TT, M->dL, grad_dt, NULL, grad_dt, dt32, D));
  /* the CLS rows: both heads' gradients, summed first */
  if (do_cls && do_itc)
    AMPC_TRY(M->be->scatter_add_rows(b, D, NULL, b, M->dvcls, grad_dt, M->dvcls2, grad_dt, dv32,
                                     NV * D));
  else if (do_cls || do_itc)
    AMPC_TRY(M->be->scatter_add_rows(b, D, NULL, b, do_cls ? M->dvcls : M->dvcls2, grad_dt, NULL,
                                     grad_dt, dv32, NV * D));
  AMPC_TRY(vision_bwd(M, b, dv32));
  /* the text encoder has gradients from the contrastive, matching and MLM terms */
  return do_itc || do_itm || do_mlm ? text_bwd(M, bt_rows, M->mlm ? M->mtok : M->in_tokens, dt32)
                                    : AMPC_OK;
}

ampc_status ampc_mmodel_forward(ampc_mmodel *M, const ampc_mmodel_batch *bt,
                                ampc_mmodel_losses *out) {
  if (!M || !bt || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_forward: NULL argument");
  M->have_fwd = false;
  M->fwd = *bt; /* the telemetry's samples read its size during the pass */
  AMPC_TRY(M->c.image_only ? image_only_fwd(M, bt, out) : mm_fwd(M, bt, out));
  M->have_fwd = true;
  return AMPC_OK;
}

ampc_status ampc_mmodel_backward(ampc_mmodel *M, float seed) {
  if (!M || !M->have_fwd)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mmodel_backward: no forward pass to differentiate");
  if (!(seed > 0.0f) || !isfinite(seed))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mmodel_backward: seed %g is not a positive finite "
                     "number",
                     (double)seed);
  M->have_fwd = false;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    M->bseed[b] = seed;
  for (int k = 0; k < AMPC_MM_LOSSES; k++)
    M->lseed[k] = seed;
  return M->c.image_only ? image_only_bwd(M) : mm_bwd(M);
}

ampc_status ampc_mmodel_backward_losses(ampc_mmodel *M, const float seed[AMPC_MM_LOSSES]) {
  if (!M || !M->have_fwd || !seed)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mmodel_backward_losses: no forward pass to differentiate");
  static const char *const names[AMPC_MM_LOSSES] = {"itc", "itm", "cls", "mlm"};
  bool any = false;
  for (int k = 0; k < AMPC_MM_LOSSES; k++) {
    if (!(seed[k] >= 0.0f) || !isfinite(seed[k]))
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "ampc_mmodel_backward_losses: the %s seed %g is not a finite number >= 0",
                       names[k], (double)seed[k]);
    any = any || seed[k] > 0.0f;
  }
  if (!any)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_backward_losses: every seed is 0");
  /* the forward pass stays: another term's backward pass may follow */
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    M->bseed[b] = 1.0f;
  for (int k = 0; k < AMPC_MM_LOSSES; k++)
    M->lseed[k] = seed[k];
  return M->c.image_only ? image_only_bwd(M) : mm_bwd(M);
}

ampc_status ampc_mmodel_backward_branches(ampc_mmodel *M, const float seed[AMPC_BRANCH_COUNT]) {
  if (!M || !M->have_fwd || !seed)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mmodel_backward_branches: no forward pass to differentiate");
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    if (!(seed[b] > 0.0f) || !isfinite(seed[b]))
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "ampc_mmodel_backward_branches: the %s seed %g is not a positive finite "
                       "number",
                       ampc_branch_name((ampc_branch)b), (double)seed[b]);
  M->have_fwd = false;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    M->bseed[b] = seed[b];
  for (int k = 0; k < AMPC_MM_LOSSES; k++)
    M->lseed[k] = seed[AMPC_BRANCH_HEADS];
  return M->c.image_only ? image_only_bwd(M) : mm_bwd(M);
}

/* out [n] (host FP32) = x [n] (act_dt, a tensor): widened where the tensors
 * are (on a device through dv32), then copied */
static ampc_status embeddings_to_host(ampc_mmodel *M, float *out, const void *x, size_t n) {
  if (!M->be->device)
    return ampc_convert(out, AMPC_F32, x, M->act_dt, n);
  AMPC_TRY(M->be->convert(M->dv32, AMPC_F32, x, M->act_dt, n));
  return M->be->to_host(out, M->dv32, n * sizeof(float));
}

ampc_status ampc_mmodel_embed(ampc_mmodel *M, int64_t b, const uint8_t *images,
                              const int32_t *tokens, float *img_emb, float *txt_emb, int32_t *cls) {
  if (!M || b < 1 || b > M->B || (!images && (img_emb || cls)) || (!tokens && txt_emb) ||
      (M->c.image_only && (img_emb || tokens || txt_emb)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_embed: bad arguments");
  const int64_t E = M->E, C = M->c.classes;
  if (M->be->device && E > M->NV * M->D)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_embed: embed %lld past the staging rows",
                     (long long)E);
  M->have_fwd = false; /* the buffers a backward pass would read are overwritten */
  AMPC_TRY(load_inputs(M, b, images, tokens, NULL));
  if (images) {
    AMPC_TRY(vision_fwd(M, b));
    if (img_emb)
      AMPC_TRY(embeddings_to_host(M, img_emb, M->inorm, (size_t)(b * E)));
    if (cls) {
      AMPC_TRY(M->be->argmax_rows(b, C, M->clog, M->act_dt, false, M->be->device ? M->pred : cls));
      AMPC_TRY(ampc_backend_get(M->be, cls, M->pred, M->be->device ? (size_t)b * sizeof *cls : 0));
    }
  }
  if (tokens) {
    AMPC_TRY(text_fwd(M, b, tokens, M->in_tokens, b));
    if (txt_emb)
      AMPC_TRY(embeddings_to_host(M, txt_emb, M->tnorm, (size_t)(b * E)));
  }
  return AMPC_OK;
}

void ampc_mmodel_last_negatives(const ampc_mmodel *M, int64_t b, int32_t *neg) {
  if (M && neg && b >= 0 && b <= M->B)
    memcpy(neg, M->h_neg, (size_t)b * sizeof *neg);
}
