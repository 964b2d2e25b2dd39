/*
 * src/model/mm_impl.h: the multimodal model's state, shared by its three
 * files: mm_config.c (named configurations and parameter specs), mm_layout.c
 * (the arena layout: plan, create, free) and mm.c (the forward and backward
 * passes). Not installed.
 */
#ifndef AMPC_MM_IMPL_H
#define AMPC_MM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "ampc/model.h"
#include "ampc/nn.h"
#include "backend/backend.h"

enum { MAX_DEPTH = 16, PER_BLOCK = 12 };

typedef struct { /* parameter indices of one block */
  int n1w, n1b, inw, inb, outw, outb, n2w, n2b, f1w, f1b, f2w, f2b;
  int site; /* its first linear site (q, k, v, out, fc1, fc2 follow): FP8 or INT8 */
} blk_p;

enum { SITES_PER_BLOCK = 6 };

typedef struct { /* saved activations of one block (y and c.scores: the
                  * forward's transients, one buffer shared by every block;
                  * so are c.probs with recompute, and x1 when y1 is kept) */
  void *ln1, *y, *x1, *ln2, *h, *g, *out;
  void *y1; /* the attention's output, kept to recompute x1 = x + y1 (x1_recompute), or NULL */
  float *mean1, *rstd1, *mean2, *rstd2;
  ampc_mha_cache c;
} blk_a;

struct ampc_mmodel {
  ampc_mmodel_config c;
  ampc_params *P; /* borrowed: the parameter table (weights read, gradients accumulated) */
  int64_t B, NV, NP, TT, D, E;
  ampc_dtype stream_dt, act_dt, grad_dt, prob_dt, weight_dt;
  ampc_dtype attn_mdt; /* the attention products' P and dS operands (config attn_cast) */
  bool recompute;      /* the attention probabilities recomputed in the backward pass */
  bool x1_recompute;   /* and x1 = x + y1 (a stream wider than the activations) */
  ampc_acc acc;
  bool fp8_on;        /* fp8-mixed: the blocks' linear layers in FP8 */
  ampc_fp8_sites fp8; /* their sites (fp8_on) */
  void *fp8_ws;       /* [fp8_ws_bytes] the casts' workspace (in the arena) */
  /* INT8 inference (ampc_mmodel_set_int8): per site, the layer (.s8 set
   * where a weight was given) and its INT8 weights and scales (owned) */
  ampc_linear_fp8 *s8_lin;
  ampc_linear_s8 *s8;
  ampc_gemm_s8_b *s8_prep; /* each site's weights prepared for the INT8 GEMM */
  int s8_sites;
  ampc_scratch s8_ws; /* their workspace, for the widest site (owned) */
  bool fq8_on;        /* every site fake-quantized (ampc_mmodel_set_fake_quant) */
  size_t fp8_ws_bytes;
  /* parameter indices */
  int patch_w, patch_b, cls_tok, vpos, vn_w, vn_b, tok, tpos, tn_w, tn_b, fn_w, fn_b;
  int iproj, tproj, lscale, itm_w, itm_b, cls_w, cls_b;
  int mlm_w, mlm_b; /* the MLM head (mlm on), else -1 */
  bool mlm;         /* masked caption modelling on (w_mlm > 0) */
  int64_t TB, FB;   /* text-encoder and fusion rows per sample: 2 and 3 with MLM, else 1, 2 */
  blk_p vb[MAX_DEPTH], tb[MAX_DEPTH], fb[MAX_DEPTH];
  blk_a va[MAX_DEPTH], ta[MAX_DEPTH], fa[MAX_DEPTH];
  /* activations */
  void *patch, *v0, *vfin, *vcls, *iemb, *inorm, *clog;
  float *vmean, *vrstd;
  uint8_t *tmask;
  void *t0, *tfin, *tpool, *temb, *tnorm;
  float *tmean, *trstd;
  float *sim;
  int32_t *neg, *pair_text, *pair_img; /* hard negatives; the text and image of each pair */
  int32_t *pred;                       /* the classifier's argmax */
  void *fkv, *f0, *ffin, *fpool, *itm;
  uint8_t *fmask;
  float *fmean, *frstd, *itm_t;
  /* MLM (mlm on): the 2B captions (the batch's, then their masked copies),
   * the masked positions (fusion rows), their targets, the gathered rows and
   * the head's logits; the number masked in the last forward pass */
  int32_t *mtok, *mlm_pos, *mlm_tgt, *mlm_pred;
  void *mrows, *mlog;
  int64_t n_masked;
  /* the blocks' forward-only buffers (after the activations): the
   * attention scores before the softmax and the MHA / MLP outputs before
   * their residual adds, which no backward pass reads */
  void *fwd_scores, *fwd_y;
  void *fwd_probs, *fwd_x1; /* recompute: the probabilities; x1_recompute: x1 */
  /* gradient workspaces */
  void *dS, *dS2, *dL, *dH1, *dH2, *dKV, *dKVsum;
  void *dmlog, *dmrows; /* MLM: the logits' and the gathered rows' gradients */
  void *dclog, *dvcls, *dvcls2, *ditm, *dfpool, *dsim, *dinorm, *dtnorm, *diemb, *dtemb, *dtpool;
  float *dv32, *dt32;
  ampc_scratch ws; /* the layers' scratch, one call at a time (the largest need, see layout) */
  /* global negatives (ampc_mmodel_set_group; all NULL when off): G = B x ranks */
  ampc_model_group group;
  bool global;
  void *gbuf; /* the one allocation below */
  size_t gbuf_bytes;
  void *iall, *tall;        /* [G, E] act_dt: every rank's normalised embeddings */
  float *sim_i2t, *sim_t2i; /* [B, G]: local images vs all texts, local texts vs all images */
  void *dA, *dC;            /* [B, G] grad_dt: their gradients */
  float *part_i, *part_t;   /* [G, E]: the gradient of every embedding from this rank's rows */
  float *dloc_i, *dloc_t;   /* [B, E] */
  /* the host's side of the above (the same pointers on the CPU; on a
   * device one host allocation, gbuf_host): the ranks' exchange (allgather,
   * sum) and the InfoNCE rows run on the host; h_loc [B, E] act_dt stages
   * this rank's embeddings for the allgather (NULL on the CPU) */
  void *gbuf_host;
  void *h_iall, *h_tall, *h_dA, *h_dC, *h_loc;
  float *h_sim_i2t, *h_sim_t2i, *h_part_i, *h_part_t;
  ampc_model_probe probe; /* the telemetry's (probe.on NULL: none) */
  /* ampc_mmodel_set_grad_ready's callback (NULL: none) and its argument */
  void (*grad_ready)(void *user, int64_t lo, int64_t hi);
  void *grad_ready_user;
  /* what the backward pass needs of the last forward pass */
  ampc_mmodel_batch fwd; /* the batch (borrowed: valid until the backward pass) */
  float fwd_ls;          /* log-temperature used */
  bool fwd_clamped;      /* it was clamped (zero gradient) */
  bool have_fwd;         /* a forward pass ran since the last backward pass */
  /* the backward pass's seed per branch (ampc_mmodel_backward_branches): the
   * losses start from bseed[heads]; a gradient crossing from branch a into
   * branch b is multiplied by bseed[b] / bseed[a] (all equal: one scale) */
  float bseed[AMPC_BRANCH_COUNT];
  float lseed[AMPC_MM_LOSSES]; /* each loss term's seed (itc, itm, cls) */
  /* one allocation for all of the above (the backend's memory) */
  void *arena;
  size_t arena_bytes;
  /* where the tensors live and which functions compute (src/backend/backend.h) */
  const ampc_backend *be;
  /* the layers take their scratch from the device context: no workspace */
  bool scratch_in_ctx;
  /* the host's copies of what it computes or reads (h_x == x on the CPU
   * backend; on a device, one host allocation, host_arena) */
  uint8_t *h_tmask, *h_fmask;
  int32_t *h_neg, *h_pair_text, *h_pair_img, *h_pred;
  int32_t *h_mtok, *h_mlm_pos, *h_mlm_tgt, *h_mlm_pred;
  float *h_sim, *h_itm_t;
  void *h_itm;
  void *host_arena;
  /* on a device: the batch's inputs copied there (NULL on the CPU, which
   * reads the batch's own buffers) and one FP32 scalar */
  uint8_t *d_images;
  int32_t *d_tokens, *d_labels;
  float *d_scalar;
  /* the shadow accumulation check's product on a device (telemetry steps;
   * grown on demand, released with the model) */
  void *shadow_dev;
  size_t shadow_dev_bytes;
  /* the inputs the passes read (the batch's on the CPU, the copies above
   * on a device): set by the forward pass, read by the backward pass */
  const uint8_t *in_images;
  const int32_t *in_tokens, *in_labels;
};

#endif
