/*
 * tests/test_model.c: the multimodal model. The analytic gradient of the whole
 * composite loss (vision, text, fusion, heads) against central finite
 * differences on the mm-micro configuration in FP32, the parameter names
 * and counts of mm-tiny, and a short training run in 16-mixed that lowers the
 * loss.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "ampc/data.h"

/* a forward pass and, when seed > 0, the backward pass seeded with it */
static ampc_status fwd_bwd(ampc_mmodel *M, const ampc_mmodel_batch *bt, float seed,
                           ampc_mmodel_losses *L) {
  ampc_status st = ampc_mmodel_forward(M, bt, L);
  if (st == AMPC_OK && seed > 0.0f)
    st = ampc_mmodel_backward(M, seed);
  return st;
}

enum { B = 6, TT = 5, VOCAB = 11, CLASSES = 3 };

static void make_batch(int64_t img, uint8_t *images, int32_t *tokens, int32_t *labels,
                       uint64_t seed) {
  ampc_rng r;
  ampc_rng_seed(&r, seed);
  for (int64_t i = 0; i < B * img * img * 3; i++)
    images[i] = (uint8_t)(ampc_rng_next(&r) % 256);
  for (int b = 0; b < B; b++) {
    const int len = 1 + (int)(ampc_rng_next(&r) % TT);
    for (int t = 0; t < TT; t++)
      tokens[b * TT + t] = t < len ? 1 + (int32_t)(ampc_rng_next(&r) % (VOCAB - 1)) : 0;
    labels[b] = (int32_t)(ampc_rng_next(&r) % CLASSES);
  }
}

/* the mm-micro fixture: specs of c, a trainer over them in preset prec and
 * the model for batches of up to B */
static void micro_setup(const ampc_mmodel_config *c, ampc_precision prec, ampc_mmodel_specs *sp,
                        ampc_trainer *T, ampc_mmodel **M) {
  assert_int_equal(ampc_mmodel_specs_make(c, sp), AMPC_OK);
  ampc_amp_config a;
  ampc_amp_config_preset(prec, &a);
  ampc_optim_config o = ampc_optim_adamw_defaults();
  assert_int_equal(ampc_trainer_init(T, &a, &o, sp->specs, sp->n, 5), AMPC_OK);
  *M = NULL;
  assert_int_equal(ampc_mmodel_create(M, c, &T->params, &T->amp, B), AMPC_OK);
}

static int32_t g_neg0[B];
static int g_flipped;

/* the loss at the current weights; notes when the hard-negative choice (a
 * discontinuity of the loss) differs from the unperturbed one */
static float loss_at(ampc_mmodel *M, const ampc_mmodel_batch *bt) {
  ampc_mmodel_losses L;
  assert_int_equal(fwd_bwd(M, bt, 0.0f, &L), AMPC_OK);
  int32_t neg[B];
  ampc_mmodel_last_negatives(M, B, neg);
  if (memcmp(neg, g_neg0, sizeof neg) != 0)
    g_flipped = 1;
  return L.total;
}

static void gradient_check(const char *model, float w_mlm) {
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get(model, VOCAB, TT, CLASSES, &c), AMPC_OK);
  c.w_itc = 1.0f, c.w_itm = 0.7f, c.w_cls = 0.5f, c.w_mlm = w_mlm, c.mlm_prob = 0.3f;
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_mmodel_specs_make(&c, &sp), AMPC_OK);
  ampc_amp_config a;
  ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &a);
  ampc_optim_config o = ampc_optim_adamw_defaults();
  ampc_trainer T;
  assert_int_equal(ampc_trainer_init(&T, &a, &o, sp.specs, sp.n, 5), AMPC_OK);
  /* larger random weights than the 0.02 init, so every path carries signal */
  ampc_rng r;
  ampc_rng_seed(&r, 9);
  float *w = T.params.w;
  for (int i = 0; i < T.params.count; i++) {
    const ampc_param *p = &T.params.p[i];
    if (strstr(p->name, "logit_scale"))
      continue;
    for (int64_t e = 0; e < p->numel; e++)
      w[p->offset + e] += (float)(0.3 * ampc_rng_normal(&r));
  }
  ampc_mmodel *M = NULL;
  assert_int_equal(ampc_mmodel_create(&M, &c, &T.params, &T.amp, B), AMPC_OK);
  uint8_t images[B * 8 * 8 * 3];
  int32_t tokens[B * TT], labels[B];
  make_batch(8, images, tokens, labels, 3);
  ampc_mmodel_batch bt = {.b = B, .images = images, .tokens = tokens, .labels = labels};
  ampc_trainer_zero_grad(&T);
  ampc_mmodel_losses L;
  assert_int_equal(fwd_bwd(M, &bt, 1.0f, &L), AMPC_OK);
  ampc_mmodel_last_negatives(M, B, g_neg0);
  printf("# losses: total %.5f itc %.5f itm %.5f cls %.5f mlm %.5f (%lld tokens)\n",
         (double)L.total, (double)L.itc, (double)L.itm, (double)L.cls, (double)L.mlm,
         (long long)L.mlm_tokens);
  if (w_mlm > 0.0f) { /* at least one masked token per caption, the loss near ln(vocab) */
    assert_true(L.mlm_tokens >= B && L.mlm_tokens <= B * TT);
    assert_true(L.mlm > 0.0f && isfinite(L.mlm));
  } else {
    assert_true(L.mlm == 0.0f && L.mlm_tokens == 0);
  }
  const float *g = T.params.grad;
  /* every tensor: a few elements (the largest-gradient one and random ones) */
  double dot = 0, nf = 0, na = 0;
  int checked = 0, bad = 0, skipped = 0;
  for (int i = 0; i < T.params.count; i++) {
    const ampc_param *p = &T.params.p[i];
    int64_t idx[3];
    idx[0] = 0;
    for (int64_t e = 1; e < p->numel; e++)
      if (fabsf(g[p->offset + e]) > fabsf(g[p->offset + idx[0]]))
        idx[0] = e;
    for (int k = 1; k < 3; k++)
      idx[k] = (int64_t)(ampc_rng_next(&r) % (uint64_t)p->numel);
    for (int k = 0; k < 3; k++) {
      const int64_t e = p->offset + idx[k];
      const float w0 = w[e], h = 1e-2f;
      g_flipped = 0;
      w[e] = w0 + h;
      const double lp = loss_at(M, &bt);
      w[e] = w0 - h;
      const double lm = loss_at(M, &bt);
      w[e] = w0 + 0.5f * h;
      const double lp2 = loss_at(M, &bt);
      w[e] = w0 - 0.5f * h;
      const double lm2 = loss_at(M, &bt);
      w[e] = w0;
      if (g_flipped) { /* the step crossed a tie of the negative choice */
        skipped++;
        continue;
      }
      /* Richardson: (4 D(h/2) - D(h)) / 3 cancels the h^2 term */
      const double d1 = (lp - lm) / (2.0 * (double)h), d2 = (lp2 - lm2) / (double)h;
      const double fd = (4.0 * d2 - d1) / 3.0, an = (double)g[e];
      /* FP32 loss noise ~ 1e-7 |L| / h amplified by Richardson, plus rel 2 % */
      const double tol = 0.02 * fabs(an) + 3e-4;
      if (fabs(fd - an) > tol) {
        printf("# %s[%lld]: analytic %.6g, finite difference %.6g\n", p->name, (long long)idx[k],
               an, fd);
        bad++;
      }
      dot += fd * an, nf += fd * fd, na += an * an;
      checked++;
    }
  }
  const double cosine = dot / sqrt(nf * na);
  printf("# %d gradients checked, %d outside tolerance, %d skipped (negative choice flipped), "
         "cosine %.8f\n",
         checked, bad, skipped, cosine);
  assert_int_equal(bad, 0);
  assert_true(skipped * 10 < checked);
  assert_true(cosine > 0.9999);
  ampc_mmodel_free(M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

static void test_gradient_check(void **state) {
  (void)state;
  gradient_check("mm-micro", 0.0f);
}

/* the same with the token-level MLM term (its head, the masked copies through
 * the text encoder and the fusion) */
static void test_gradient_check_mlm(void **state) {
  (void)state;
  gradient_check("mm-micro", 0.8f);
}

/* the image-only ViT (vision encoder + class head) */
static void test_gradient_check_vit(void **state) {
  (void)state;
  gradient_check("vit-micro", 0.0f);
}

/* Per-branch seeds (--loss-scale per-branch): equal seeds give
 * ampc_mmodel_backward's bits; seeds that differ by powers of two store
 * every gradient of branch b times seed[b] exactly (every backward op is
 * linear in its upstream gradient, and a power of two commutes with each
 * rounding while nothing leaves the format's normal range: bfloat16 has
 * FP32's exponent range, so no gradient here comes near it), so each
 * gradient divided by its branch's seed equals the one-seed gradient, bit
 * for bit. */
static float load1(const void *base, ampc_dtype dt, int64_t i) {
  float v = 0.0f;
  assert_int_equal(
      ampc_convert(&v, AMPC_F32, (const char *)base + (size_t)i * ampc_dtype_size(dt), dt, 1),
      AMPC_OK);
  return v;
}

static void branch_seeds_exact(const char *model, ampc_precision prec, float w_mlm) {
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get(model, VOCAB, TT, CLASSES, &c), AMPC_OK);
  c.w_mlm = w_mlm;
  ampc_mmodel_specs sp;
  ampc_trainer T;
  ampc_mmodel *M;
  micro_setup(&c, prec, &sp, &T, &M);
  ampc_params *P = &T.params;
  uint8_t images[B * 8 * 8 * 3];
  int32_t tokens[B * TT], labels[B];
  make_batch(8, images, tokens, labels, 3);
  ampc_mmodel_batch bt = {.b = B, .images = images, .tokens = tokens, .labels = labels};
  const size_t gsz = ampc_dtype_size(P->wdt), bytes = (size_t)P->total * gsz;
  char *g1 = malloc(bytes);
  assert_non_null(g1);
  ampc_mmodel_losses L;
  /* one seed */
  ampc_trainer_zero_grad(&T);
  assert_int_equal(fwd_bwd(M, &bt, 8.0f, &L), AMPC_OK);
  memcpy(g1, P->grad, bytes);
  /* the same seed per branch: the same bits */
  const float same[AMPC_BRANCH_COUNT] = {8.0f, 8.0f, 8.0f, 8.0f};
  ampc_trainer_zero_grad(&T);
  assert_int_equal(ampc_mmodel_forward(M, &bt, &L), AMPC_OK);
  assert_int_equal(ampc_mmodel_backward_branches(M, same), AMPC_OK);
  assert_memory_equal(g1, P->grad, bytes);
  /* vision 2^10, text 2^-3, fusion 2^17, heads 2^3 (the losses' seed) */
  const float seeds[AMPC_BRANCH_COUNT] = {1024.0f, 0.125f, 131072.0f, 8.0f};
  ampc_trainer_zero_grad(&T);
  assert_int_equal(ampc_mmodel_forward(M, &bt, &L), AMPC_OK);
  assert_int_equal(ampc_mmodel_backward_branches(M, seeds), AMPC_OK);
  int64_t nonzero = 0, branches_seen = 0;
  bool seen[AMPC_BRANCH_COUNT] = {false, false, false, false};
  for (int i = 0; i < P->count; i++) {
    const ampc_param *p = &P->p[i];
    const float f = seeds[p->branch] / 8.0f;
    for (int64_t e = 0; e < p->numel; e++) {
      const float want = load1(g1, P->wdt, p->offset + e);
      const float got = load1(P->grad, P->wdt, p->offset + e) / f;
      if (want != got)
        printf("# %s[%lld]: %.9g, per-branch %.9g / %g\n", p->name, (long long)e, (double)want,
               (double)(got * f), (double)f);
      assert_true(want == got);
      nonzero += want != 0.0f;
      if (want != 0.0f && !seen[p->branch])
        seen[p->branch] = true, branches_seen++;
    }
  }
  printf("# %s %s: %lld non-zero gradients, %lld branches, each /seed[b] bit-equal\n", model,
         ampc_precision_name(prec), (long long)nonzero, (long long)branches_seen);
  assert_true(nonzero > P->total / 2);
  assert_int_equal(branches_seen, c.image_only ? 2 : 4);
  /* a seed that is not positive and finite is refused */
  const float bad[AMPC_BRANCH_COUNT] = {1.0f, 0.0f, 1.0f, 1.0f};
  assert_int_equal(ampc_mmodel_forward(M, &bt, &L), AMPC_OK);
  assert_int_equal(ampc_mmodel_backward_branches(M, bad), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "text seed"));
  free(g1);
  ampc_mmodel_free(M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

static void test_backward_branches_exact(void **state) {
  (void)state;
  branch_seeds_exact("mm-micro", AMPC_PRECISION_32_TRUE, 0.0f);
  branch_seeds_exact("mm-micro", AMPC_PRECISION_BF16_MIXED, 0.0f);
  branch_seeds_exact("mm-micro", AMPC_PRECISION_BF16_MIXED, 1.0f); /* the MLM head's gradient too */
  branch_seeds_exact("vit-micro", AMPC_PRECISION_BF16_MIXED, 0.0f);
}

/* one forward and backward pass of M from zeroed gradients, seeded with
 * scale, counted by a tally of its own: the gradients (a copy, to free),
 * the losses and the counts */
static char *counted_pass(ampc_mmodel *M, ampc_trainer *T, const ampc_mmodel_batch *bt, float scale,
                          ampc_mmodel_losses *L, ampc_tm_stats *tm) {
  const size_t bytes = (size_t)T->params.total * ampc_dtype_size(T->params.wdt);
  ampc_tally *t = ampc_tally_create();
  assert_non_null(t);
  ampc_tally *was = ampc_tally_bind(t);
  ampc_trainer_zero_grad(T);
  assert_int_equal(fwd_bwd(M, bt, scale, L), AMPC_OK);
  ampc_tally_drain(t, tm);
  ampc_tally_bind(was);
  ampc_tally_free(t);
  char *g = malloc(bytes);
  assert_non_null(g);
  memcpy(g, T->params.grad, bytes);
  return g;
}

/* counted_pass of models M[0] and M[1] (the same parameters T) on one
 * mm-micro batch made from seed, at loss scale 1024 */
static void counted_pair(ampc_mmodel *M[2], ampc_trainer *T, uint64_t seed, char *g[2],
                         ampc_mmodel_losses L[2], ampc_tm_stats tm[2]) {
  uint8_t images[B * 8 * 8 * 3];
  int32_t tokens[B * TT], labels[B];
  make_batch(8, images, tokens, labels, seed);
  ampc_mmodel_batch bt = {.b = B, .images = images, .tokens = tokens, .labels = labels};
  for (int r = 0; r < 2; r++)
    g[r] = counted_pass(M[r], T, &bt, 1024.0f, &L[r], &tm[r]);
}

/* The backward pass that recomputes the attention probabilities and x1
 * (the default) gives the bits of the one that keeps them, in every preset
 * (with MLM and its masked rows too): the same gradients, losses and
 * rounding tally; and it allocates fewer activation bytes (x1's half under
 * an FP32 stream, every block's probabilities). */
static void recompute_exact(const char *model, ampc_precision prec, float w_mlm, bool cast) {
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get(model, VOCAB, TT, CLASSES, &c), AMPC_OK);
  c.w_mlm = w_mlm;
  c.attn_cast = cast; /* the attention products' 16-bit operands */
  ampc_mmodel_specs sp;
  ampc_trainer T;
  ampc_mmodel *M[2];
  micro_setup(&c, prec, &sp, &T, &M[0]); /* recompute (the default) */
  ampc_mmodel_config keep = c;
  keep.no_recompute = true;
  assert_int_equal(ampc_mmodel_create(&M[1], &keep, &T.params, &T.amp, B), AMPC_OK);
  size_t act[2];
  assert_int_equal(ampc_mmodel_plan_bytes(&c, B, prec, &act[0], NULL), AMPC_OK);
  assert_int_equal(ampc_mmodel_plan_bytes(&keep, B, prec, &act[1], NULL), AMPC_OK);
  assert_true(act[0] < act[1]);
  ampc_params *P = &T.params;
  const size_t bytes = (size_t)P->total * ampc_dtype_size(P->wdt);
  char *g[2];
  ampc_mmodel_losses L[2];
  ampc_tm_stats tm[2];
  counted_pair(M, &T, 11, g, L, tm);
  assert_memory_equal(g[0], g[1], bytes);
  assert_memory_equal(&L[0], &L[1], sizeof L[0]);
  assert_true(tm[0].r.count > 0);
  const ampc_round_stats *a = &tm[0].r, *b = &tm[1].r;
  assert_true(a->count == b->count && a->underflow == b->underflow &&
              a->subnormal == b->subnormal && a->overflow == b->overflow && a->inf == b->inf &&
              a->nan == b->nan && a->max_abs == b->max_abs && tm[0].zeros == tm[1].zeros);
  assert_memory_equal(tm[0].hist, tm[1].hist, sizeof tm[0].hist);
  printf("# %s %s%s%s: recompute bit-equal to keep; activations %zu of %zu bytes\n", model,
         ampc_precision_name(prec), w_mlm > 0.0f ? " +MLM" : "", cast ? " attention-cast" : "",
         act[0], act[1]);
  free(g[0]), free(g[1]);
  ampc_mmodel_free(M[0]), ampc_mmodel_free(M[1]);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

static void test_recompute_exact(void **state) {
  (void)state;
  const ampc_precision ps[5] = {AMPC_PRECISION_32_TRUE, AMPC_PRECISION_16_MIXED,
                                AMPC_PRECISION_BF16_MIXED, AMPC_PRECISION_16_TRUE,
                                AMPC_PRECISION_FP8_MIXED};
  for (int i = 0; i < 5; i++)
    recompute_exact("mm-micro", ps[i], 0.0f, false);
  recompute_exact("mm-micro", AMPC_PRECISION_16_MIXED, 1.0f, false);
  recompute_exact("vit-micro", AMPC_PRECISION_BF16_MIXED, 0.0f, false);
  for (int i = 1; i < 4; i++) /* the attention products' 16-bit operands */
    recompute_exact("mm-micro", ps[i], 0.0f, true);
}

/* --attention-cast: the 16-bit operands change the gradients (by roundings
 * of the attention's P and dS) and count one more rounding per probability
 * in each pass, forward and backward */
static void test_attention_cast_model(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-micro", VOCAB, TT, CLASSES, &c), AMPC_OK);
  ampc_mmodel_specs sp;
  ampc_trainer T;
  ampc_mmodel *M[2];
  micro_setup(&c, AMPC_PRECISION_16_MIXED, &sp, &T, &M[0]);
  ampc_mmodel_config cc = c;
  cc.attn_cast = true;
  assert_int_equal(ampc_mmodel_create(&M[1], &cc, &T.params, &T.amp, B), AMPC_OK);
  ampc_params *P = &T.params;
  const size_t bytes = (size_t)P->total * ampc_dtype_size(P->wdt);
  char *g[2];
  ampc_mmodel_losses L[2];
  ampc_tm_stats tm[2];
  counted_pair(M, &T, 5, g, L, tm);
  assert_true(memcmp(g[0], g[1], bytes) != 0);
  /* every attention block's probabilities, once forward (P) and once
   * backward (dS): mm-micro's blocks, [b, h, tq, tk] each */
  const int64_t nv = (c.img / c.patch) * (c.img / c.patch) + 1, fb = 2;
  const int64_t probs = (int64_t)c.v_depth * B * c.heads * nv * nv +
                        (int64_t)c.t_depth * B * c.heads * TT * TT +
                        (int64_t)c.f_depth * fb * B * c.heads * TT * nv;
  assert_int_equal(tm[1].r.count, tm[0].r.count + (uint64_t)(2 * probs));
  printf("# attention-cast: %llu more roundings counted (P and dS of %lld probabilities)\n",
         (unsigned long long)(tm[1].r.count - tm[0].r.count), (long long)probs);
  free(g[0]), free(g[1]);
  ampc_mmodel_free(M[0]), ampc_mmodel_free(M[1]);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

/* Per-loss seeds (--loss-scale per-loss): the passes keep the forward pass,
 * so a second pass with the same seeds gives the same bits; the three
 * one-term passes add up (in FP64 here) to the all-terms pass within the
 * FP32 roundings of the different summation order; a term seeded 0
 * contributes nothing (the cls term alone leaves the text and fusion at 0) */
static void test_backward_losses(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-micro", VOCAB, TT, CLASSES, &c), AMPC_OK);
  c.w_mlm = 0.5f; /* all four terms */
  ampc_mmodel_specs sp;
  ampc_trainer T;
  ampc_mmodel *M;
  micro_setup(&c, AMPC_PRECISION_32_TRUE, &sp, &T, &M);
  ampc_params *P = &T.params;
  uint8_t images[B * 8 * 8 * 3];
  int32_t tokens[B * TT], labels[B];
  make_batch(8, images, tokens, labels, 3);
  ampc_mmodel_batch bt = {.b = B, .images = images, .tokens = tokens, .labels = labels};
  const size_t bytes = (size_t)P->total * sizeof(float);
  float *all = malloc(bytes), *one = malloc(bytes);
  double *sum = calloc((size_t)P->total, sizeof *sum);
  assert_true(all && one && sum);
  ampc_mmodel_losses L;
  ampc_trainer_zero_grad(&T);
  assert_int_equal(fwd_bwd(M, &bt, 1.0f, &L), AMPC_OK);
  memcpy(all, P->grad, bytes);
  assert_int_equal(ampc_mmodel_forward(M, &bt, &L), AMPC_OK);
  for (int k = 0; k < AMPC_MM_LOSSES; k++) {
    float seed[AMPC_MM_LOSSES] = {0.0f, 0.0f, 0.0f, 0.0f};
    seed[k] = 1.0f;
    ampc_trainer_zero_grad(&T);
    assert_int_equal(ampc_mmodel_backward_losses(M, seed), AMPC_OK);
    memcpy(one, P->grad, bytes);
    ampc_trainer_zero_grad(&T); /* the same pass again, on the same forward pass */
    assert_int_equal(ampc_mmodel_backward_losses(M, seed), AMPC_OK);
    assert_memory_equal(one, P->grad, bytes);
    int64_t nz_text = 0;
    for (int i = 0; i < P->count; i++)
      for (int64_t e = 0; e < P->p[i].numel; e++) {
        sum[P->p[i].offset + e] += (double)one[P->p[i].offset + e];
        nz_text += P->p[i].branch == AMPC_BRANCH_TEXT && one[P->p[i].offset + e] != 0.0f;
      }
    if (k == AMPC_MM_LOSS_CLS)
      assert_int_equal(nz_text, 0); /* the group head sees the image only */
    else
      assert_true(nz_text > 0);
  }
  /* relative to each tensor's largest gradient: the terms' partial sums
   * cancel in places, so an element's own magnitude is no scale for the
   * rounding differences (a few FP32 ulps of the largest partials) */
  double worst = 0.0;
  for (int i = 0; i < P->count; i++) {
    const ampc_param *p = &P->p[i];
    double mx = 0.0, d = 0.0;
    for (int64_t e = p->offset; e < p->offset + p->numel; e++) {
      mx = fmax(mx, fabs((double)all[e]));
      d = fmax(d, fabs(sum[e] - (double)all[e]));
    }
    if (mx > 0.0)
      worst = fmax(worst, d / mx);
  }
  printf("# per-loss passes sum to the all-terms pass: worst difference %.3g of the tensor's "
         "largest gradient\n",
         worst);
  assert_true(worst < 1e-5);
  /* errors: negative, non-finite, all zero; no forward pass */
  const float neg[AMPC_MM_LOSSES] = {-1.0f, 1.0f, 1.0f, 1.0f},
              zero[AMPC_MM_LOSSES] = {0.0f, 0.0f, 0.0f, 0.0f};
  assert_int_equal(ampc_mmodel_backward_losses(M, neg), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mmodel_backward_losses(M, zero), AMPC_ERR_INVALID_ARG);
  const float one_seed[AMPC_MM_LOSSES] = {1.0f, 0.0f, 0.0f, 0.0f};
  assert_int_equal(ampc_mmodel_backward(M, 1.0f), AMPC_OK); /* consumes the forward pass */
  assert_int_equal(ampc_mmodel_backward_losses(M, one_seed), AMPC_ERR_INVALID_ARG);
  free(all), free(one), free(sum);
  ampc_mmodel_free(M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

/* --itm-negatives random: with neg_uniform, image i's negative is another
 * text drawn uniformly (never i; over 600 batches each of the 5 others about
 * 120 times: a 6-sigma band, and the draws are deterministic) */
static void test_uniform_negatives(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-micro", VOCAB, TT, CLASSES, &c), AMPC_OK);
  ampc_mmodel_specs sp;
  ampc_trainer T;
  ampc_mmodel *M;
  micro_setup(&c, AMPC_PRECISION_32_TRUE, &sp, &T, &M);
  uint8_t images[B * 8 * 8 * 3];
  int32_t tokens[B * TT], labels[B];
  make_batch(8, images, tokens, labels, 3);
  int count[B][B];
  memset(count, 0, sizeof count);
  for (uint64_t s = 1; s <= 600; s++) {
    ampc_mmodel_batch bt = {.b = B,
                            .images = images,
                            .tokens = tokens,
                            .labels = labels,
                            .neg_seed = s,
                            .neg_uniform = true};
    ampc_mmodel_losses L;
    assert_int_equal(ampc_mmodel_forward(M, &bt, &L), AMPC_OK);
    int32_t neg[B];
    ampc_mmodel_last_negatives(M, B, neg);
    for (int i = 0; i < B; i++) {
      assert_true(neg[i] >= 0 && neg[i] < B && neg[i] != i);
      count[i][neg[i]]++;
    }
  }
  for (int i = 0; i < B; i++)
    for (int j = 0; j < B; j++)
      if (j != i)
        assert_true(count[i][j] >= 60 && count[i][j] <= 180);
  ampc_mmodel_free(M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

static void test_mm_tiny_names(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-tiny", 1000, 24, 10, &c), AMPC_OK);
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_mmodel_specs_make(&c, &sp), AMPC_OK);
  int64_t n = 0;
  for (int i = 0; i < sp.n; i++) {
    int64_t e = 1;
    for (int d = 0; d < sp.specs[i].ndim; d++)
      e *= sp.specs[i].shape[d];
    n += e;
  }
  /* per block: 2 norms (4*128) + in_proj (3*128*128 + 3*128) + out_proj
   * (128*128 + 128) + fc1 (512*128 + 512) + fc2 (128*512 + 128) = 198272 */
  const int64_t blk =
      4 * 128 + 3 * 128 * 128 + 3 * 128 + 128 * 128 + 128 + 512 * 128 + 512 + 128 * 512 + 128;
  const int64_t want = 128 * 48 + 128 + 128 + 65 * 128 + 2 * 128    /* vision stem, norm */
                       + 1000 * 128 + 24 * 128 + 2 * 128            /* text stem, norm */
                       + 2 * 128                                    /* fusion norm */
                       + 2 * 64 * 128 + 1 + 128 + 1 + 10 * 128 + 10 /* heads */
                       + 8 * blk;
  assert_int_equal(n, want);
  assert_string_equal(sp.specs[0].name, "vision.patch_embed.weight");
  bool found = false;
  for (int i = 0; i < sp.n; i++)
    found = found || strcmp(sp.specs[i].name, "fusion.blocks.0.cross_attn.in_proj_weight") == 0;
  assert_true(found);
  /* vit-ref: the 821,642 parameters of the reference ViT (32x32x3, patch 8) */
  ampc_mmodel_config v;
  assert_int_equal(ampc_mmodel_config_get("vit-ref", 0, 0, 10, &v), AMPC_OK);
  ampc_mmodel_specs vs;
  assert_int_equal(ampc_mmodel_specs_make(&v, &vs), AMPC_OK);
  int64_t nv = 0;
  for (int i = 0; i < vs.n; i++) {
    int64_t e = 1;
    for (int d = 0; d < vs.specs[i].ndim; d++)
      e *= vs.specs[i].shape[d];
    nv += e;
  }
  assert_int_equal(nv, 821642);
  ampc_mmodel_specs_free(&vs);
  ampc_mmodel_config bad;
  assert_int_equal(ampc_mmodel_config_get("mm-huge", 10, 4, 2, &bad), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "mm-huge"));
  /* every listed name is known, and the unknown-model error lists each one */
  const char *const *names = ampc_mmodel_names();
  int count = 0;
  for (; names[count]; count++) {
    assert_int_equal(ampc_mmodel_config_get(names[count], 10, 4, 2, &bad), AMPC_OK);
    assert_string_equal(bad.name, names[count]);
  }
  assert_int_equal(count, 8);
  assert_int_equal(ampc_mmodel_config_get("mm-huge", 10, 4, 2, &bad), AMPC_ERR_INVALID_ARG);
  for (int i = 0; i < count; i++)
    assert_non_null(strstr(ampc_last_error(), names[i]));
  ampc_mmodel_specs_free(&sp);
}

/* 16-mixed: a few steps on one fixed batch lower the loss */
static void test_training_lowers_loss(void **state) {
  (void)state;
  const ampc_precision ps[3] = {AMPC_PRECISION_32_TRUE, AMPC_PRECISION_16_MIXED,
                                AMPC_PRECISION_BF16_MIXED};
  for (int k = 0; k < 3; k++) {
    ampc_mmodel_config c;
    assert_int_equal(ampc_mmodel_config_get("mm-micro", VOCAB, TT, CLASSES, &c), AMPC_OK);
    ampc_mmodel_specs sp;
    assert_int_equal(ampc_mmodel_specs_make(&c, &sp), AMPC_OK);
    ampc_amp_config a;
    ampc_amp_config_preset(ps[k], &a);
    ampc_optim_config o = ampc_optim_adamw_defaults();
    o.lr = 3e-3f;
    ampc_trainer T;
    assert_int_equal(ampc_trainer_init(&T, &a, &o, sp.specs, sp.n, 5), AMPC_OK);
    ampc_mmodel *M = NULL;
    assert_int_equal(ampc_mmodel_create(&M, &c, &T.params, &T.amp, B), AMPC_OK);
    uint8_t images[B * 8 * 8 * 3];
    int32_t tokens[B * TT], labels[B];
    make_batch(8, images, tokens, labels, 4);
    ampc_mmodel_batch bt = {.b = B, .images = images, .tokens = tokens, .labels = labels};
    float first = 0, last = 0;
    for (int s = 0; s < 60; s++) {
      ampc_trainer_zero_grad(&T);
      ampc_mmodel_losses L;
      assert_int_equal(fwd_bwd(M, &bt, ampc_trainer_loss_scale(&T), &L), AMPC_OK);
      ampc_step_info info;
      assert_int_equal(ampc_trainer_step(&T, &info), AMPC_OK);
      if (s == 0)
        first = L.total;
      last = L.total;
    }
    printf("# %s: loss %.4f -> %.4f\n", ampc_precision_name(ps[k]), (double)first, (double)last);
    assert_true(isfinite(last));
    assert_true(last < 0.6f * first);
    ampc_mmodel_free(M);
    ampc_trainer_free(&T);
    ampc_mmodel_specs_free(&sp);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mm_tiny_names),        cmocka_unit_test(test_gradient_check),
      cmocka_unit_test(test_gradient_check_mlm),   cmocka_unit_test(test_uniform_negatives),
      cmocka_unit_test(test_gradient_check_vit),   cmocka_unit_test(test_backward_branches_exact),
      cmocka_unit_test(test_backward_losses),      cmocka_unit_test(test_recompute_exact),
      cmocka_unit_test(test_attention_cast_model), cmocka_unit_test(test_training_lowers_loss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
