/*
 * src/model/int8_sites.c: INT8 inference of a multimodal model's linear
 * layers (ampc_mmodel_set_int8, include/ampc/model.h): the transformer
 * blocks' q, k, v, out, fc1 and fc2 run as INT8 GEMMs with INT32 sums
 * (ampc_linear_forward_s8) through the same sites fp8-mixed uses; and
 * their fake quantization for quantization-aware training
 * (ampc_mmodel_set_fake_quant).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/mm_impl.h"

/* the block and first site part a weight name belongs to: part 0 for the
 * in-projection (q, k, v: three sites), 3 out, 4 fc1, 5 fc2; -1 if none */
static int site_of(const ampc_mmodel *M, const char *name, const blk_p **blk) {
  static const struct {
    const char *tower;
    ampc_branch br;
  } towers[3] = {
      {"vision", AMPC_BRANCH_VISION}, {"text", AMPC_BRANCH_TEXT}, {"fusion", AMPC_BRANCH_FUSION}};
  const blk_p *const p[3] = {M->vb, M->tb, M->fb};
  const int depth[3] = {(int)M->c.v_depth, M->c.image_only ? 0 : (int)M->c.t_depth,
                        M->c.image_only ? 0 : (int)M->c.f_depth};
  for (int g = 0; g < 3; g++)
    for (int i = 0; i < depth[g]; i++) {
      char pre[48];
      const int n = snprintf(pre, sizeof pre, "%s.blocks.%d.", towers[g].tower, i);
      if (strncmp(name, pre, (size_t)n) != 0)
        continue;
      const char *rest = name + n;
      *blk = &p[g][i];
      if (!strcmp(rest, "attn.in_proj_weight") || !strcmp(rest, "cross_attn.in_proj_weight"))
        return 0;
      if (!strcmp(rest, "attn.out_proj.weight") || !strcmp(rest, "cross_attn.out_proj.weight"))
        return 3;
      if (!strcmp(rest, "mlp.fc1.weight"))
        return 4;
      if (!strcmp(rest, "mlp.fc2.weight"))
        return 5;
      return -1;
    }
  return -1;
}

/* M's per-site INT8 layers and their workspace, allocated at first use */
static ampc_status ensure_sites(ampc_mmodel *M) {
  if (M->s8_lin)
    return AMPC_OK;
  const int n = ampc_mmodel_fp8_site_count(&M->c);
  M->s8_lin = calloc((size_t)n, sizeof *M->s8_lin);
  M->s8 = calloc((size_t)n, sizeof *M->s8);
  M->s8_prep = calloc((size_t)n, sizeof *M->s8_prep);
  if (!M->s8_lin || !M->s8 || !M->s8_prep) {
    free(M->s8_lin), free(M->s8), free(M->s8_prep);
    M->s8_lin = NULL, M->s8 = NULL, M->s8_prep = NULL;
    return ampc_fail(AMPC_ERR_NOMEM, "INT8 sites: out of memory");
  }
  M->s8_sites = n;
  /* the workspace of the widest site: rows of any tower (fusion: its
   * pairs' tokens and their image keys), the widest in and out; enough for
   * the INT8 layers and for the fake-quantized ones */
  int64_t most = M->B * M->NV;
  const int64_t more[3] = {M->TB * M->B * M->TT, M->FB * M->B * M->TT, M->FB * M->B * M->NV};
  for (int i = 0; !M->c.image_only && i < 3; i++)
    most = more[i] > most ? more[i] : most;
  const int64_t wide = 3 * M->D > M->c.mlp ? 3 * M->D : M->c.mlp;
  const size_t s8b = ampc_linear_s8_ws_bytes(most, wide, wide),
               fqb = ampc_linear_fq8_ws_bytes(most, wide, wide);
  M->s8_ws.bytes = s8b > fqb ? s8b : fqb;
  M->s8_ws.base = malloc(M->s8_ws.bytes);
  if (!M->s8_ws.base)
    M->s8_ws.bytes = 0; /* each call allocates its own */
  for (int i = 0; i < n; i++)
    M->s8_lin[i].ws = &M->s8_ws;
  return AMPC_OK;
}

/* the CPU backend and no FP8: where INT8 sites can run */
static ampc_status check_host(const ampc_mmodel *M, const char *what) {
  if (M->be->device)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s runs on the CPU backend (--device cpu), not %s",
                     what, M->be->name);
  if (M->fp8_on)
    return ampc_fail(
        AMPC_ERR_UNSUPPORTED,
        "%s with --precision fp8-mixed: its linear layers are FP8's "
        "(evaluate a quantized checkpoint in 32-true, the default, or a 16-bit preset)",
        what);
  return AMPC_OK;
}

int ampc_mmodel_int8_parts(const ampc_mmodel *M, const char *name) {
  const blk_p *blk = NULL;
  const int part = M && name ? site_of(M, name, &blk) : -1;
  return part < 0 ? 0 : (part == 0 ? 3 : 1);
}

ampc_status ampc_mmodel_observe(ampc_mmodel *M, const char *name, int part,
                                void (*observe)(void *user, const float *x, int64_t n),
                                void *user) {
  if (!M || !name)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_observe: bad arguments");
  AMPC_TRY(check_host(M, "INT8 calibration"));
  const blk_p *blk = NULL;
  const int first = site_of(M, name, &blk);
  if (first < 0)
    return ampc_fail(AMPC_ERR_NOT_FOUND, "%s is not a linear layer of a block", name);
  if (part < 0 || part >= (first == 0 ? 3 : 1))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: no part %d", name, part);
  AMPC_TRY(ensure_sites(M));
  ampc_linear_fp8 *f = &M->s8_lin[blk->site + first + part];
  f->observe = observe, f->observe_user = observe ? user : NULL;
  return AMPC_OK;
}

ampc_status ampc_mmodel_set_int8(ampc_mmodel *M, const char *name, const int8_t *w, int64_t rows,
                                 int64_t cols, const float *scale, bool per_channel,
                                 const float *x_scales) {
  if (!M || !name || !w || !scale || rows < 1 || cols < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_set_int8: bad arguments");
  AMPC_TRY(check_host(M, "INT8 inference"));
  if (M->fq8_on)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "INT8 weights on a model in fake-quantized training (turn it off first)");
  const blk_p *blk = NULL;
  const int part = site_of(M, name, &blk);
  if (part < 0)
    return ampc_fail(AMPC_ERR_NOT_FOUND, "%s is not a linear layer of a block", name);
  const int parts = part == 0 ? 3 : 1;
  for (int j = 0; x_scales && j < parts; j++)
    if (!(x_scales[j] > 0.0f) || !isfinite(x_scales[j]))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: activation scale %d is %g", name, j,
                       (double)x_scales[j]);
  const int64_t D = M->D, want_rows = part == 0 ? 3 * D : (part == 4 ? M->c.mlp : D),
                want_cols = part == 5 ? M->c.mlp : D;
  if (rows != want_rows || cols != want_cols)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: INT8 weight %lldx%lld, the model's is %lldx%lld",
                     name, (long long)rows, (long long)cols, (long long)want_rows,
                     (long long)want_cols);
  AMPC_TRY(ensure_sites(M));
  const int first = blk->site + part;
  if (M->s8[first].w)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: INT8 weights given twice", name);
  const int64_t ns = per_channel ? rows : 1;
  int8_t *wc = malloc((size_t)(rows * cols));
  float *sc = malloc((size_t)ns * sizeof *sc);
  if (!wc || !sc) {
    free(wc), free(sc);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mmodel_set_int8: out of memory");
  }
  memcpy(wc, w, (size_t)(rows * cols));
  memcpy(sc, scale, (size_t)ns * sizeof *sc);
  /* the in-projection's rows: q [0, D), k [D, 2D), v [2D, 3D) */
  ampc_status st = AMPC_OK;
  for (int j = 0; j < parts && st == AMPC_OK; j++) /* prepared once: packed for VNNI */
    st = ampc_gemm_s8_prepare(&M->s8_prep[first + j], AMPC_GEMM_S8_AUTO, rows / parts, cols,
                              wc + (size_t)(j * (rows / parts) * cols), cols);
  if (st != AMPC_OK) {
    for (int j = 0; j < parts; j++)
      ampc_gemm_s8_b_free(&M->s8_prep[first + j]);
    free(wc), free(sc);
    return st;
  }
  for (int j = 0; j < parts; j++) {
    ampc_linear_s8 *s = &M->s8[first + j];
    s->w = wc + (size_t)(j * D * cols);
    s->scale = per_channel ? sc + j * D : sc;
    s->per_channel = per_channel;
    s->x_scale = x_scales ? x_scales[j] : 0.0f;
    s->prep = &M->s8_prep[first + j];
    M->s8_lin[first + j].s8 = s;
  }
  return AMPC_OK;
}

int ampc_mmodel_int8_layers(const ampc_mmodel *M) {
  int n = 0;
  for (int i = 0; M && M->s8 && i < M->s8_sites; i++)
    n += M->s8[i].w != NULL;
  return n;
}

ampc_status ampc_mmodel_set_fake_quant(ampc_mmodel *M, bool on) {
  if (!M)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mmodel_set_fake_quant: no model");
  if (!on) {
    for (int i = 0; M->s8_lin && i < M->s8_sites; i++)
      M->s8_lin[i].fake_q8 = false;
    M->fq8_on = false;
    return AMPC_OK;
  }
  if (M->be->device)
    return ampc_fail(
        AMPC_ERR_UNSUPPORTED,
        "fake-quantized (INT8) training runs on the CPU backend (--device cpu), not %s",
        M->be->name);
  if (M->fp8_on)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "fake-quantized (INT8) training with --precision fp8-mixed: its linear "
                     "layers are FP8's (use 32-true or a 16-bit preset)");
  if (ampc_mmodel_int8_layers(M) > 0)
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "fake-quantized training of a model with INT8 weights (an INT8 checkpoint "
                     "is for inference: train from the FP32 checkpoint)");
  if (ampc_mmodel_fp8_site_count(&M->c) < 1)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "fake quantization: the model has no transformer block");
  AMPC_TRY(ensure_sites(M));
  for (int i = 0; i < M->s8_sites; i++)
    M->s8_lin[i].fake_q8 = true;
  M->fq8_on = true;
  return AMPC_OK;
}

bool ampc_mmodel_fake_quant(const ampc_mmodel *M) { return M && M->fq8_on; }
