/*
 * src/model/mlp.c: the small MLP classifier the engine's tests train in every
 * preset. Dtypes come from the autocast policy table (src/amp/policy.c); its
 * layers run through the CPU backend's table (src/backend/backend.h), on host
 * memory (the accuracy reads the logits here).
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/model.h"
#include "ampc/nn.h"
#include "backend/backend.h"
#include "numeric/numeric.h"

ampc_status ampc_mlp_specs(const ampc_mlp_config *c, ampc_param_spec specs[AMPC_MLP_NPARAMS]) {
  if (!c || !specs || c->in <= 0 || c->hidden <= 0 || c->classes <= 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "mlp: sizes must be positive (and classes >= 2)");
  const float b_in = (float)(1.0 / sqrt((double)c->in));
  const float b_h = (float)(1.0 / sqrt((double)c->hidden));
  const ampc_param_spec s[AMPC_MLP_NPARAMS] = {
      {"fc1.weight", 2, {c->hidden, c->in}, AMPC_BRANCH_HEADS, AMPC_INIT_UNIFORM, b_in, false},
      {"fc1.bias", 1, {c->hidden}, AMPC_BRANCH_HEADS, AMPC_INIT_UNIFORM, b_in, false},
      {"fc2.weight", 2, {c->hidden, c->hidden}, AMPC_BRANCH_HEADS, AMPC_INIT_UNIFORM, b_h, false},
      {"fc2.bias", 1, {c->hidden}, AMPC_BRANCH_HEADS, AMPC_INIT_UNIFORM, b_h, false},
      {"head.weight", 2, {c->classes, c->hidden}, AMPC_BRANCH_HEADS, AMPC_INIT_UNIFORM, b_h, false},
      {"head.bias", 1, {c->classes}, AMPC_BRANCH_HEADS, AMPC_INIT_UNIFORM, b_h, false},
  };
  memcpy(specs, s, sizeof s);
  return AMPC_OK;
}

void ampc_mlp_free(ampc_mlp *M) {
  if (!M)
    return;
  void *bufs[] = {M->x,      M->h1,    M->a1,     M->h2,      M->a2,
                  M->logits, M->d_big, M->d_big2, M->dlogits, M->ws.base};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    free(bufs[i]);
  if (M->fp8) {
    ampc_fp8_sites_free(M->fp8);
    free(M->fp8);
  }
  memset(M, 0, sizeof *M);
}

/* the layers' scratch: the bias sums of the widest linear backward */
static size_t mlp_scratch_bytes(const ampc_mlp_config *c) {
  return ampc_linear_backward_scratch_bytes(c->hidden > c->classes ? c->hidden : c->classes);
}

/* fp8-mixed: the casts' workspace of fc1 and fc2 */
static size_t mlp_fp8_ws_bytes(const ampc_mlp_config *c, int64_t batch) {
  const size_t a = ampc_linear_fp8_ws_bytes(batch, c->in, c->hidden),
               b = ampc_linear_fp8_ws_bytes(batch, c->hidden, c->hidden);
  return a > b ? a : b;
}

ampc_status ampc_mlp_plan_bytes(const ampc_mlp_config *c, int64_t batch, ampc_precision p,
                                size_t *activations, size_t *workspace) {
  ampc_op_policy pol;
  if (!c || batch <= 0 || c->in <= 0 || c->hidden <= 0 || c->classes <= 0 ||
      ampc_policy_get(p, AMPC_OPID_LINEAR, &pol) != AMPC_OK)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mlp_plan_bytes: bad arguments");
  /* the buffers of ampc_mlp_create below */
  const size_t as = ampc_dtype_size(pol.output), gs = ampc_dtype_size(ampc_precision_lowp(p));
  const size_t bh = (size_t)(batch * c->hidden), bc = (size_t)(batch * c->classes);
  if (activations)
    *activations = ((size_t)(batch * c->in) + 4 * bh + bc) * as;
  if (workspace)
    *workspace = (2 * bh + bc) * gs + mlp_scratch_bytes(c) +
                 (ampc_precision_is_fp8(p) ? mlp_fp8_ws_bytes(c, batch) : 0);
  return AMPC_OK;
}

ampc_status ampc_mlp_create(ampc_mlp *M, const ampc_mlp_config *c, ampc_params *P,
                            const ampc_amp_config *amp, int64_t max_batch) {
  if (!M || !c || !P || !amp || max_batch <= 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mlp_create: bad arguments");
  memset(M, 0, sizeof *M);
  const char *names[AMPC_MLP_NPARAMS] = {"fc1.weight", "fc1.bias",    "fc2.weight",
                                         "fc2.bias",   "head.weight", "head.bias"};
  for (int i = 0; i < AMPC_MLP_NPARAMS; i++)
    if (ampc_params_find(P, names[i]) != i)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mlp_create: the parameter table lacks '%s'",
                       names[i]);
  ampc_op_policy pol;
  ampc_status st = ampc_policy_get(amp->precision, AMPC_OPID_LINEAR, &pol);
  if (st != AMPC_OK)
    return st;
  M->cfg = *c;
  M->max_batch = max_batch;
  M->P = P;
  M->acc = amp->accumulate;
  M->act_dt = pol.output;
  const size_t as = ampc_dtype_size(M->act_dt), gs = ampc_dtype_size(P->wdt);
  const size_t bh = (size_t)(max_batch * c->hidden), bc = (size_t)(max_batch * c->classes);
  M->x = malloc((size_t)(max_batch * c->in) * as);
  M->h1 = malloc(bh * as), M->a1 = malloc(bh * as);
  M->h2 = malloc(bh * as), M->a2 = malloc(bh * as);
  M->logits = malloc(bc * as);
  M->d_big = malloc(bh * gs), M->d_big2 = malloc(bh * gs);
  M->dlogits = malloc(bc * gs);
  M->ws.bytes = mlp_scratch_bytes(c);
  M->ws.base = aligned_alloc(64, M->ws.bytes > 0 ? M->ws.bytes : 64);
  if (!M->x || !M->h1 || !M->a1 || !M->h2 || !M->a2 || !M->logits || !M->d_big || !M->d_big2 ||
      !M->dlogits || !M->ws.base) {
    ampc_mlp_free(M);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_mlp_create: out of memory");
  }
  if (ampc_precision_is_fp8(amp->precision)) {
    M->fp8 = calloc(1, sizeof *M->fp8);
    st = M->fp8 ? ampc_fp8_sites_init(M->fp8, 2, amp, mlp_fp8_ws_bytes(c, max_batch))
                : ampc_fail(AMPC_ERR_NOMEM, "ampc_mlp_create: out of memory");
    if (st != AMPC_OK) {
      ampc_mlp_free(M);
      return st;
    }
    ampc_fp8_sites_name(M->fp8, 0, AMPC_BRANCH_HEADS, "fc1");
    ampc_fp8_sites_name(M->fp8, 1, AMPC_BRANCH_HEADS, "fc2");
  }
  return AMPC_OK;
}

ampc_status ampc_mlp_forward(ampc_mlp *M, int64_t b, const float *x, const int32_t *y, float *loss,
                             int64_t *correct) {
  if (!M || !x || !y || !loss || b <= 0 || b > M->max_batch)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mlp_forward: bad arguments (batch %lld, max %lld)",
                     (long long)b, (long long)M->max_batch);
  M->fwd_b = 0;
  const ampc_backend *be = &ampc_backend_cpu_table; /* host memory: the logits are read here */
  const ampc_params *P = M->P;
  const ampc_dtype weight_dt = P->wdt, act_dt = M->act_dt;
  const ampc_acc acc = M->acc;
  const int64_t in = M->cfg.in, hd = M->cfg.hidden, nc = M->cfg.classes;
  /* autocast: the FP32 input is cast to the linear layer's input dtype */
  AMPC_TRY(be->store_f32(M->x, act_dt, x, (size_t)(b * in), NULL));
  ampc_linear_fp8 *f1 = M->fp8 ? &M->fp8->lin[0] : NULL, *f2 = M->fp8 ? &M->fp8->lin[1] : NULL;
  AMPC_TRY(be->linear_forward_fp8(b, in, hd, M->x, act_dt, ampc_param_w(P, 0), weight_dt,
                                  ampc_param_w(P, 1), M->h1, act_dt, acc, f1, NULL));
  AMPC_TRY(be->gelu_forward(b * hd, M->h1, act_dt, M->a1, act_dt, NULL));
  AMPC_TRY(be->linear_forward_fp8(b, hd, hd, M->a1, act_dt, ampc_param_w(P, 2), weight_dt,
                                  ampc_param_w(P, 3), M->h2, act_dt, acc, f2, NULL));
  AMPC_TRY(be->gelu_forward(b * hd, M->h2, act_dt, M->a2, act_dt, NULL));
  AMPC_TRY(be->linear_forward(b, hd, nc, M->a2, act_dt, ampc_param_w(P, 4), weight_dt,
                              ampc_param_w(P, 5), M->logits, act_dt, acc, NULL));
  AMPC_TRY(be->cross_entropy_forward(b, nc, M->logits, act_dt, y, loss));
  if (correct) {
    int64_t hits = 0;
    for (int64_t r = 0; r < b; r++) {
      int64_t best = 0;
      float bv = ampc_elem_load(M->logits, act_dt, r * nc);
      for (int64_t c = 1; c < nc; c++) {
        const float v = ampc_elem_load(M->logits, act_dt, r * nc + c);
        if (v > bv)
          bv = v, best = c;
      }
      hits += best == y[r];
    }
    *correct = hits;
  }
  M->fwd_b = b, M->fwd_y = y;
  return AMPC_OK;
}

ampc_status ampc_mlp_backward(ampc_mlp *M, float seed) {
  if (!M || M->fwd_b <= 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_mlp_backward: no forward pass to differentiate");
  if (!(seed > 0.0f) || !isfinite(seed))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_mlp_backward: seed %g is not a positive finite "
                     "number",
                     (double)seed);
  const ampc_backend *be = &ampc_backend_cpu_table;
  const ampc_params *P = M->P;
  const ampc_dtype weight_dt = P->wdt, act_dt = M->act_dt, grad_dt = P->wdt;
  const ampc_acc acc = M->acc;
  const int64_t in = M->cfg.in, hd = M->cfg.hidden, nc = M->cfg.classes, b = M->fwd_b;
  const int32_t *y = M->fwd_y;
  M->fwd_b = 0;
  /* backward, seeded with S (and the 1/micro-batches factor) in FP32 */
  AMPC_TRY(be->cross_entropy_backward(b, nc, M->logits, act_dt, y, seed, M->dlogits, grad_dt));
  AMPC_TRY(be->linear_backward(b, hd, nc, M->dlogits, grad_dt, M->a2, act_dt, ampc_param_w(P, 4),
                               weight_dt, M->d_big, ampc_param_grad(P, 4), ampc_param_grad(P, 5),
                               acc, &M->ws));
  AMPC_TRY(be->gelu_backward(b * hd, M->d_big, grad_dt, M->h2, act_dt, M->d_big2));
  ampc_linear_fp8 *f1 = M->fp8 ? &M->fp8->lin[0] : NULL, *f2 = M->fp8 ? &M->fp8->lin[1] : NULL;
  AMPC_TRY(be->linear_backward_fp8(b, hd, hd, M->d_big2, grad_dt, M->a1, act_dt, ampc_param_w(P, 2),
                                   weight_dt, M->d_big, ampc_param_grad(P, 2),
                                   ampc_param_grad(P, 3), acc, f2, &M->ws));
  AMPC_TRY(be->gelu_backward(b * hd, M->d_big, grad_dt, M->h1, act_dt, M->d_big2));
  AMPC_TRY(be->linear_backward_fp8(b, in, hd, M->d_big2, grad_dt, M->x, act_dt, ampc_param_w(P, 0),
                                   weight_dt, NULL, ampc_param_grad(P, 0), ampc_param_grad(P, 1),
                                   acc, f1, &M->ws));
  return AMPC_OK;
}
