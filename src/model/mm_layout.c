/*
 * src/model/mm_layout.c: the multimodal model's memory: every activation,
 * attention cache, layer-norm statistic and gradient workspace is carved
 * from one arena by layout(), which runs twice, first counting (the memory
 * account's prediction, ampc_mmodel_plan_bytes) and then carving (ampc_mmodel_create),
 * so predicted and allocated bytes are the same code.
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

typedef struct {
  char *base;
  size_t used;
  size_t act_end; /* the activations' bytes: what follows (the blocks' shared forward-only
                     buffers, the gradient workspaces) is workspace (set by layout) */
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
  p->site = -1;
  const int *q = &p->n1w;
  for (int k = 0; k < PER_BLOCK; k++)
    if (q[k] < 0)
      return 0;
  return 1;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The scratch the layers need (ampc_scratch, ampc/nn.h): the maximum over the
 * calls of the forward and backward passes at the largest batch. The
 * attention formula counts the threads there are now; with more threads
 * later, a call that needs more allocates it (and bench/alloc shows it). */
static size_t scratch_bytes(const ampc_mmodel *M) {
  const ampc_mmodel_config *c = &M->c;
  const int64_t B = M->B, NV = M->NV, TT = M->TT, D = M->D, H = c->heads;
  const ampc_dtype grad_dt = M->grad_dt;
  size_t s =
      ampc_patch_embed_scratch_bytes(B, c->img, c->img, c->channels, c->patch, D, M->weight_dt);
  int64_t n = D > c->mlp ? D : c->mlp; /* the widest linear layer with a bias */
  n = n > c->classes ? n : c->classes;
  if (M->mlm)
    n = n > c->vocab ? n : c->vocab;
  s = max_sz(s, ampc_linear_backward_scratch_bytes(n));
  int64_t rows = B * NV; /* layer norm rows */
  s = max_sz(s, ampc_mha_backward_scratch_bytes(B, NV, NV, D, H, grad_dt));
  if (!c->image_only) {
    rows = rows > M->FB * B * TT ? rows : M->FB * B * TT;
    s = max_sz(s, ampc_mha_backward_scratch_bytes(M->TB * B, TT, TT, D, H, grad_dt));
    s = max_sz(s, ampc_mha_backward_scratch_bytes(M->FB * B, TT, NV, D, H, grad_dt));
    s = max_sz(s, ampc_embedding_backward_scratch_bytes(M->TB * B, TT, D));
    s = max_sz(s, ampc_infonce_backward_scratch_bytes(B));
  }
  s = max_sz(s, ampc_layernorm_backward_scratch_bytes(rows, D));
  return s;
}

/* carve every buffer from the arena (A->base NULL: just count); the host's
 * copies (h_*) from HA on a device backend, else they alias the tensors */
static void layout(ampc_mmodel *M, arena *A, arena *HA) {
  const int64_t B = M->B, NV = M->NV, NP = M->NP, TT = M->TT, D = M->D, E = M->E;
  const int64_t H = M->c.heads, MLP = M->c.mlp, C = M->c.classes;
  const size_t ss = ampc_dtype_size(M->stream_dt), as = ampc_dtype_size(M->act_dt),
               gs = ampc_dtype_size(M->grad_dt), ps = ampc_dtype_size(M->prob_dt);
#define TAKE(ptr, n, sz) (ptr) = take(A, (size_t)(n) * (sz))
#define TAKE_H(hptr, ptr, n, sz)                                                                   \
  do {                                                                                             \
    TAKE(ptr, n, sz);                                                                              \
    (hptr) = HA ? take(HA, (size_t)(n) * (sz)) : (void *)(ptr);                                    \
  } while (0)
  struct {
    blk_a *a;
    int64_t depth, b, tq, tk;
  } groups[3] = {{M->va, M->c.v_depth, B, NV, NV},
                 {M->ta, M->c.image_only ? 0 : M->c.t_depth, M->TB * B, TT, TT},
                 {M->fa, M->c.image_only ? 0 : M->c.f_depth, M->FB * B, TT, NV}};
  for (int g = 0; g < 3; g++) {
    for (int64_t i = 0; i < groups[g].depth; i++) {
      blk_a *a = &groups[g].a[i];
      const int64_t rq = groups[g].b * groups[g].tq, rk = groups[g].b * groups[g].tk;
      TAKE(a->ln1, rq * D, as);
      if (M->x1_recompute)
        TAKE(a->y1, rq * D, as);
      else
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
      if (!M->recompute)
        TAKE(a->c.probs, groups[g].b * H * groups[g].tq * groups[g].tk, ps);
      a->c.recompute = M->recompute;
      a->c.mdt = M->attn_mdt;
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
  const int64_t BT = M->TB * B, BF = M->FB * B; /* text-encoder and fusion rows */
  TAKE_H(M->h_tmask, M->tmask, BT * TT, 1);
  TAKE(M->t0, BT * TT * D, ss);
  TAKE(M->tfin, BT * TT * D, as);
  TAKE(M->tmean, BT * TT, sizeof(float));
  TAKE(M->trstd, BT * TT, sizeof(float));
  TAKE(M->tpool, B * D, as);
  TAKE(M->temb, B * E, as);
  TAKE(M->tnorm, B * E, as);
  TAKE_H(M->h_sim, M->sim, B * B, sizeof(float));
  TAKE_H(M->h_neg, M->neg, B, sizeof(int32_t));
  TAKE_H(M->h_pair_text, M->pair_text, BF, sizeof(int32_t));
  TAKE_H(M->h_pair_img, M->pair_img, BF, sizeof(int32_t));
  TAKE_H(M->h_pred, M->pred, B, sizeof(int32_t));
  TAKE(M->fkv, BF * NV * D, as);
  TAKE(M->f0, BF * TT * D, ss);
  TAKE_H(M->h_fmask, M->fmask, BF * TT, 1);
  TAKE(M->ffin, BF * TT * D, as);
  TAKE(M->fmean, BF * TT, sizeof(float));
  TAKE(M->frstd, BF * TT, sizeof(float));
  TAKE(M->fpool, 2 * B * D, as);
  TAKE_H(M->h_itm, M->itm, 2 * B, as);
  TAKE_H(M->h_itm_t, M->itm_t, 2 * B, sizeof(float));
  if (M->mlm) {
    const int64_t V = M->c.vocab;
    TAKE_H(M->h_mtok, M->mtok, BT * TT, sizeof(int32_t));
    TAKE_H(M->h_mlm_pos, M->mlm_pos, B * TT, sizeof(int32_t));
    TAKE_H(M->h_mlm_tgt, M->mlm_tgt, B * TT, sizeof(int32_t));
    TAKE_H(M->h_mlm_pred, M->mlm_pred, B * TT, sizeof(int32_t));
    TAKE(M->mrows, B * TT * D, as);
    TAKE(M->mlog, B * TT * V, as);
  }
  if (HA) { /* a device: the batch's inputs are copied there */
    TAKE(M->d_images, B * M->c.img * M->c.img * M->c.channels, 1);
    TAKE(M->d_tokens, B * TT, sizeof(int32_t));
    TAKE(M->d_labels, B, sizeof(int32_t));
    TAKE(M->d_scalar, 16, 1);
  }
  A->act_end = A->used; /* what follows are workspaces */
  /* the blocks' forward-only buffers, one for all blocks (the blocks run one
   * after another): the pre-softmax scores (the backward pass reads the
   * probabilities) and the MHA / MLP outputs y (read by the residual add
   * only), sized for the largest group; with recompute the probabilities
   * too, and x1 (x1_recompute), which the backward pass forms again there */
  int64_t n_sc = 0, n_y = 0;
  for (int g = 0; g < 3; g++)
    if (groups[g].depth > 0) {
      const int64_t sc = groups[g].b * H * groups[g].tq * groups[g].tk;
      const int64_t y = groups[g].b * groups[g].tq * D;
      n_sc = sc > n_sc ? sc : n_sc, n_y = y > n_y ? y : n_y;
    }
  TAKE(M->fwd_scores, n_sc, ps);
  TAKE(M->fwd_y, n_y, as);
  M->fwd_probs = M->fwd_x1 = NULL;
  if (M->recompute)
    TAKE(M->fwd_probs, n_sc, ps);
  if (M->x1_recompute)
    TAKE(M->fwd_x1, n_y, ss);
  for (int g = 0; g < 3; g++)
    for (int64_t i = 0; i < groups[g].depth; i++) {
      blk_a *a = &groups[g].a[i];
      a->c.scores = M->fwd_scores, a->y = M->fwd_y;
      if (M->recompute)
        a->c.probs = M->fwd_probs;
      if (M->x1_recompute)
        a->x1 = M->fwd_x1;
      else
        a->y1 = NULL;
    }
  int64_t R = B * NV;
  if (BF * TT > R)
    R = BF * TT;
  TAKE(M->dS, R * D, gs);
  TAKE(M->dS2, R * D, gs);
  TAKE(M->dL, R * D, gs);
  TAKE(M->dH1, R * MLP, gs);
  TAKE(M->dH2, R * MLP, gs);
  TAKE(M->dKV, BF * NV * D, gs);
  TAKE(M->dKVsum, BF * NV * D, sizeof(float));
  if (M->mlm) {
    TAKE(M->dmlog, B * TT * M->c.vocab, gs);
    TAKE(M->dmrows, B * TT * D, gs);
  }
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
  TAKE(M->dt32, BT * TT * D, sizeof(float));
  /* the layers' scratch: the largest that any one call of the passes takes
   * (none on a device whose layers take theirs from its context) */
  M->ws.bytes = M->scratch_in_ctx ? 0 : scratch_bytes(M);
  TAKE(M->ws.base, M->ws.bytes, 1);
  /* fp8-mixed: the quantized operands of the largest block linear layer
   * (R rows: the vision tokens, or the fusion's 2B pairs of text queries or
   * image keys), x, W and dy in BF16 containers */
  M->fp8_ws_bytes = 0;
  if (M->fp8_on) {
    int64_t rows = B * NV;
    if (!M->c.image_only) {
      rows = rows > BF * TT ? rows : BF * TT;
      rows = rows > BF * NV ? rows : BF * NV;
    }
    M->fp8_ws_bytes = max_sz(
        ampc_linear_fp8_ws_bytes(rows, D, D),
        max_sz(ampc_linear_fp8_ws_bytes(rows, D, MLP), ampc_linear_fp8_ws_bytes(rows, MLP, D)));
    TAKE(M->fp8_ws, M->fp8_ws_bytes, 1);
  }
#undef TAKE_H
#undef TAKE
}

/* the group's buffers (global negatives) back to none */
static void group_release(ampc_mmodel *M) {
  if (M->be && M->be->device)
    M->be->release(M->gbuf);
  else
    free(M->gbuf);
  free(M->gbuf_host);
  M->gbuf = M->gbuf_host = NULL, M->gbuf_bytes = 0, M->global = false;
  memset(&M->group, 0, sizeof M->group);
}

ampc_status ampc_mmodel_set_group(ampc_mmodel *M, const ampc_model_group *g) {
  if (!M)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_set_group: M is NULL");
  group_release(M);
  if (!g || g->size <= 1)
    return AMPC_OK;
  if (M->c.image_only)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "global negatives: model %s has no contrastive loss (image-only)", M->c.name);
  if (g->rank < 0 || g->rank >= g->size || !g->allgather || !g->sum_f32)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_set_group: bad group");
  const int64_t B = M->B, E = M->E, G = B * g->size;
  const size_t as = ampc_dtype_size(M->act_dt), gs = ampc_dtype_size(M->grad_dt);
  /* iall tall sim_i2t sim_t2i dA dC part_i part_t dloc (the tensors), then
   * on a device h_loc (the host's staging of one embedding matrix) */
  const size_t sz[10] = {(size_t)(G * E) * as, (size_t)(G * E) * as, (size_t)(B * G) * 4,
                         (size_t)(B * G) * 4,  (size_t)(B * G) * gs, (size_t)(B * G) * gs,
                         (size_t)(G * E) * 4,  (size_t)(G * E) * 4,  (size_t)(2 * B * E) * 4,
                         (size_t)(B * E) * as};
  size_t off[10], total = 0;
  for (int i = 0; i < 10; i++) {
    off[i] = total;
    total += i < 9 || M->be->device ? (sz[i] + 63) & ~(size_t)63 : 0;
  }
  const size_t tensors = off[9];
  char *p = NULL;
  if (M->be->device) {
    void *d = NULL;
    AMPC_TRY(M->be->alloc(&d, tensors));
    M->gbuf = d;
    if (!(M->gbuf_host = aligned_alloc(64, total))) {
      group_release(M);
      return ampc_fail(AMPC_ERR_NOMEM, "global negatives: cannot allocate %zu host bytes", total);
    }
    p = M->gbuf;
  } else {
    if (!(p = aligned_alloc(64, tensors)))
      return ampc_fail(AMPC_ERR_NOMEM, "global negatives: cannot allocate %zu bytes", tensors);
    M->gbuf = p;
  }
  M->iall = p + off[0], M->tall = p + off[1], M->sim_i2t = (float *)(p + off[2]);
  M->sim_t2i = (float *)(p + off[3]), M->dA = p + off[4], M->dC = p + off[5];
  M->part_i = (float *)(p + off[6]), M->part_t = (float *)(p + off[7]);
  M->dloc_i = (float *)(p + off[8]), M->dloc_t = M->dloc_i + B * E;
  char *h = M->gbuf_host ? (char *)M->gbuf_host : p; /* the CPU: the same buffers */
  M->h_iall = h + off[0], M->h_tall = h + off[1], M->h_sim_i2t = (float *)(h + off[2]);
  M->h_sim_t2i = (float *)(h + off[3]), M->h_dA = h + off[4], M->h_dC = h + off[5];
  M->h_part_i = (float *)(h + off[6]), M->h_part_t = (float *)(h + off[7]);
  M->h_loc = M->gbuf_host ? h + off[9] : NULL;
  M->gbuf_bytes = tensors, M->group = *g, M->global = true;
  return AMPC_OK;
}

size_t ampc_mmodel_group_bytes(const ampc_mmodel *M) { return M ? M->gbuf_bytes : 0; }

void ampc_mmodel_free(ampc_mmodel *M) {
  if (!M)
    return;
  ampc_fp8_sites_free(&M->fp8);
  for (int i = 0; i < M->s8_sites; i++)
    if (M->s8[i].w && (i % SITES_PER_BLOCK == 0 || i % SITES_PER_BLOCK >= 3)) {
      /* q owns the in-projection's buffers (k and v point into them) */
      free((void *)M->s8[i].w), free((void *)M->s8[i].scale);
    }
  for (int i = 0; M->s8_prep && i < M->s8_sites; i++)
    ampc_gemm_s8_b_free(&M->s8_prep[i]);
  free(M->s8_lin), free(M->s8), free(M->s8_prep), free(M->s8_ws.base);
  if (M->be && M->be->device && M->shadow_dev)
    M->be->release(M->shadow_dev);
  if (M->be && M->be->device)
    M->be->release(M->arena);
  else
    free(M->arena);
  free(M->host_arena);
  group_release(M);
  free(M);
}

size_t ampc_mmodel_activation_bytes(const ampc_mmodel *M) { return M ? M->arena_bytes : 0; }
int ampc_mmodel_fp8_site_count(const ampc_mmodel_config *c) {
  if (!c)
    return 0;
  return SITES_PER_BLOCK * (c->v_depth + (c->image_only ? 0 : c->t_depth + c->f_depth));
}

ampc_fp8_sites *ampc_mmodel_fp8(ampc_mmodel *M) { return M && M->fp8_on ? &M->fp8 : NULL; }
const ampc_mmodel_config *ampc_mmodel_get_config(const ampc_mmodel *M) { return &M->c; }
int64_t ampc_mmodel_max_batch(const ampc_mmodel *M) { return M->B; }

static ampc_dtype policy_out(ampc_precision p, ampc_op_id op) {
  ampc_op_policy r;
  ampc_policy_get(p, op, &r);
  return r.output;
}

/* sizes and dtypes that layout() reads */
static void set_dims(ampc_mmodel *M, const ampc_mmodel_config *c, int64_t max_batch,
                     ampc_precision p, ampc_dtype weight_dt) {
  M->c = *c;
  M->B = max_batch;
  M->NP = (c->img / c->patch) * (c->img / c->patch);
  M->NV = M->NP + 1;
  M->TT = c->seq_len;
  M->D = c->dim;
  M->E = c->embed;
  M->stream_dt = policy_out(p, AMPC_OPID_RESIDUAL_ADD);
  M->act_dt = policy_out(p, AMPC_OPID_LINEAR);
  M->prob_dt = policy_out(p, AMPC_OPID_SOFTMAX);
  M->attn_mdt = c->attn_cast && M->act_dt != AMPC_F32 ? M->act_dt : AMPC_F32;
  M->weight_dt = weight_dt;
  M->recompute = !c->no_recompute;
  M->x1_recompute = M->recompute && ampc_dtype_size(M->stream_dt) > ampc_dtype_size(M->act_dt);
  M->grad_dt = weight_dt;
  M->fp8_on = ampc_precision_is_fp8(p);
  M->mlm = !c->image_only && c->w_mlm > 0.0f;
  M->TB = M->mlm ? 2 : 1;
  M->FB = M->mlm ? 3 : 2;
  M->mlm_w = M->mlm_b = -1;
}

ampc_status ampc_mmodel_plan_bytes(const ampc_mmodel_config *c, int64_t batch, ampc_precision p,
                                   size_t *activations, size_t *workspace) {
  return ampc_mmodel_plan_bytes_on(c, batch, p, AMPC_DEVICE_CPU, activations, workspace);
}

ampc_status ampc_mmodel_plan_bytes_on(const ampc_mmodel_config *c, int64_t batch, ampc_precision p,
                                      ampc_device dev, size_t *activations, size_t *workspace) {
  const ampc_device_desc *dd = ampc_device_desc_get(dev); /* built or not: a plan */
  if (!dd)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_plan_bytes: unknown device %d", (int)dev);
  if (!c || batch < 2 || batch > (1 << 20) || (unsigned)p >= AMPC_PRECISION_COUNT ||
      c->v_depth < 1 || c->v_depth > MAX_DEPTH || c->t_depth > MAX_DEPTH ||
      c->f_depth > MAX_DEPTH || c->patch < 1 || c->img % c->patch || c->dim < 1 || c->heads < 1 ||
      c->dim % c->heads)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_plan_bytes: bad arguments (batch %lld)",
                     (long long)batch);
  ampc_mmodel *M = calloc(1, sizeof *M);
  if (!M)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mmodel_plan_bytes: out of memory");
  set_dims(M, c, batch, p, ampc_precision_lowp(p));
  M->scratch_in_ctx = dd->scratch_in_context;
  arena A = {NULL, 0, 0}, H = {NULL, 0, 0};
  layout(M, &A, dev != AMPC_DEVICE_CPU ? &H : NULL); /* a device's: the inputs' copies too */
  free(M);
  if (activations)
    *activations = A.act_end;
  if (workspace)
    *workspace = A.used - A.act_end;
  return AMPC_OK;
}

size_t ampc_mmodel_attn_cast_bytes(const ampc_mmodel_config *c, int64_t batch, ampc_precision p) {
  if (!c || !c->attn_cast || batch < 1 || (unsigned)p >= AMPC_PRECISION_COUNT || c->patch < 1 ||
      c->heads < 1)
    return 0;
  const ampc_dtype adt = policy_out(p, AMPC_OPID_LINEAR);
  if (adt == AMPC_F32 || policy_out(p, AMPC_OPID_SOFTMAX) != AMPC_F32)
    return 0; /* set_dims' attn_mdt, and the cast needs an FP32 P */
  const int64_t nv = (c->img / c->patch) * (c->img / c->patch) + 1, tt = c->seq_len;
  const bool mlm = !c->image_only && c->w_mlm > 0.0f;
  /* the calls of layout()'s groups: vision, text, fusion (queries x keys) */
  const int64_t calls[3][3] = {
      {batch, nv, nv},
      {c->image_only || c->t_depth < 1 ? 0 : (mlm ? 2 : 1) * batch, tt, tt},
      {c->image_only || c->f_depth < 1 ? 0 : (mlm ? 3 : 2) * batch, tt, nv}};
  int64_t n = 0;
  for (int g = 0; g < 3; g++) {
    const int64_t e = calls[g][0] * c->heads * calls[g][1] * calls[g][2];
    n = e > n ? e : n;
  }
  return (size_t)n * ampc_dtype_size(adt);
}

ampc_status ampc_mmodel_create(ampc_mmodel **out, const ampc_mmodel_config *c, ampc_params *P,
                               const ampc_amp_config *amp, int64_t max_batch) {
  return ampc_mmodel_create_on(out, c, P, amp, max_batch, AMPC_DEVICE_CPU);
}

ampc_status ampc_mmodel_create_on(ampc_mmodel **out, const ampc_mmodel_config *c, ampc_params *P,
                                  const ampc_amp_config *amp, int64_t max_batch, ampc_device dev) {
  const ampc_backend *be = NULL;
  if (out && ampc_device_desc_get(dev))
    AMPC_TRY(ampc_device_backend_get(dev, &be)); /* "not built" */
  if (!out || !c || !P || !amp || !be || max_batch < 2 || max_batch > (1 << 20))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_create: bad arguments (batch %lld)",
                     (long long)max_batch);
  *out = NULL;
  ampc_mmodel *M = calloc(1, sizeof *M);
  if (!M)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mmodel_create: out of memory");
  set_dims(M, c, max_batch, amp->precision, P->wdt);
  M->P = P;
  M->be = be;
  M->scratch_in_ctx = be->desc->scratch_in_context;
  M->acc = amp->accumulate;
  const ampc_op_query mha = {AMPC_DEVICE_OP_MHA, M->attn_mdt, M->acc};
  if (M->attn_mdt != AMPC_F32 && !ampc_backend_supports(be, &mha)) {
    free(M); /* e.g. the GPU's attention with FP16 sums runs per head, without 16-bit operands */
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "--attention-cast on needs FP32 sums on the GPU; %s sums in FP16 (use "
                     "--accumulate fp32 or --attention-cast off)",
                     amp->precision == AMPC_PRECISION_16_TRUE ? "16-true" : "--accumulate fp16");
  }
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
    if (M->mlm) {
      IDX(mlm_w, "heads.mlm.weight");
      IDX(mlm_b, "heads.mlm.bias");
    }
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
      P->p[M->vpos].shape[0] != M->NV ||
      (M->mlm && (P->p[M->mlm_w].shape[0] != c->vocab || P->p[M->mlm_w].shape[1] != c->dim ||
                  P->p[M->mlm_b].shape[0] != c->vocab))) {
    free(M);
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mmodel_create: the parameter table is not that of model %s", c->name);
  }
  arena A = {NULL, 0, 0}, H = {NULL, 0, 0};
  layout(M, &A, be->device ? &H : NULL);
  if (be->device) {
    const ampc_status st = be->alloc(&M->arena, A.used + 64);
    M->host_arena = st == AMPC_OK ? calloc(1, H.used + 64) : NULL;
    if (!M->host_arena) {
      ampc_mmodel_free(M);
      return st != AMPC_OK
                 ? st
                 : ampc_fail(AMPC_ERR_NOMEM, "ampc_mmodel_create: cannot allocate %zu host bytes",
                             H.used);
    }
    H.base = (char *)(((uintptr_t)M->host_arena + 63) / 64 * 64);
    H.used = 0;
  } else {
    M->arena = calloc(1, A.used + 64);
  }
  if (!M->arena) {
    free(M);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mmodel_create: cannot allocate %zu bytes of activations",
                     A.used);
  }
  M->arena_bytes = A.used;
  A.base = (char *)(((uintptr_t)M->arena + 63) / 64 * 64);
  A.used = 0;
  layout(M, &A, be->device ? &H : NULL);
  /* the linear sites: 6 per block, in the order of the towers (FP8 casts
   * in fp8-mixed; INT8 layers after ampc_mmodel_set_int8) */
  if (M->fp8_on) {
    ampc_status st = ampc_fp8_sites_init(&M->fp8, ampc_mmodel_fp8_site_count(c), amp, 0);
    if (st != AMPC_OK) {
      ampc_mmodel_free(M);
      return st;
    }
    M->fp8.ws.base = M->fp8_ws;
    M->fp8.ws.bytes = M->fp8_ws_bytes;
  }
  {
    static const char *const part[SITES_PER_BLOCK] = {"q", "k", "v", "out", "fc1", "fc2"};
    struct {
      blk_p *p;
      int depth;
      const char *name;
      ampc_branch br;
    } towers[3] = {{M->vb, c->v_depth, "vision", AMPC_BRANCH_VISION},
                   {M->tb, c->image_only ? 0 : c->t_depth, "text", AMPC_BRANCH_TEXT},
                   {M->fb, c->image_only ? 0 : c->f_depth, "fusion", AMPC_BRANCH_FUSION}};
    int site = 0;
    for (int g = 0; g < 3; g++)
      for (int i = 0; i < towers[g].depth; i++) {
        towers[g].p[i].site = site;
        for (int j = 0; M->fp8_on && j < SITES_PER_BLOCK; j++) {
          char nm[AMPC_FP8_SITE_NAME];
          snprintf(nm, sizeof nm, "%s.blocks.%d.%s", towers[g].name, i, part[j]);
          ampc_fp8_sites_name(&M->fp8, site + j, towers[g].br, nm);
        }
        site += SITES_PER_BLOCK;
      }
  }
  *out = M;
  return AMPC_OK;
}
