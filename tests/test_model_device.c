/*
 * tests/test_model_device.c: the multimodal model on a device backend
 * (ampc_mmodel_create_on, src/backend/backend.h) against the same model on the
 * CPU, from the same weights and batch.
 *
 * 1. AMPC_DEVICE_CPU_SPLIT (everywhere, CI included): the CPU's functions
 *    with the device path's memory handling, every host copy (masks, hard
 *    negatives, pairs, targets, accuracies, the logit scale, the batch's
 *    inputs) a real copy between separate buffers. It must give the CPU's
 *    bits: every loss, every gradient byte, the hard negatives, the
 *    embeddings. A copy the device path forgets leaves a buffer at zero and
 *    changes the bits, so this tests the plumbing the GPU run relies on.
 * 2. AMPC_DEVICE_CUDA (where a GPU is; else skipped with the reason): the
 *    same cases, compared within tolerances. Both sides compute the same
 *    function with the same roundings; they differ in the order of GEMM and
 *    row sums (src/backend/cuda/cuda_nn.h), which can move a 16-bit stored value by an
 *    ulp. tests/test_mm_parity.c bounds each side against the exact (float64)
 *    model: gradients within 32 u of their tensor's maximum (u = 2^-11
 *    binary16, 2^-8 bfloat16), losses within 8 u; 32-true gradients within
 *    1e-4 of the tensor maximum and losses within 2e-5. The triangle
 *    inequality gives twice those between the two sides, the tolerances
 *    used here. The fixture is test_mm_parity's (mm-micro, its seeds), whose
 *    hard negatives have a margin of 0.134 (34 bfloat16 units), so they must
 *    be equal on both sides.
 *
 *    16-true (F16 storage, FP16 accumulation: the ablation) runs with
 *    the CUDA setting acc16_exact (ampc_device_set), so that its products' FP16 sums are
 *    the CPU's bits and the two sides differ only as the mixed presets do
 *    (the order of row sums, an ulp of a binary16 store): the 16-mixed
 *    tolerances, an argument by analogy rather than a bound of
 *    test_mm_parity's, to confirm on the first device run.
 *
 * Cases per preset (32-true, 16-mixed, bf16-mixed, 16-true), one "ok" line each: the
 * composite loss with one backward pass; per-branch seeds (powers of two: the
 * gradients crossing branches are rescaled); per-loss passes (two backward
 * passes over one forward pass, the model's side of per-loss scaling, which
 * the trainer does not run on a device yet); sampled and uniform hard
 * negatives (neg_seed != 0: the similarities read on the host); masked
 * caption modelling (the MLM head, the masked copies, the scatter of its row
 * gradients); the image-only vit-ref; global negatives (a group of 2 ranks
 * simulated in the process, the other rank holding the same batch: the
 * embeddings and the rows' gradients through the host). Within every case: the retrieval
 * embeddings and group predictions, and the device arena against the memory
 * account's prediction; fp8-mixed too on cpu-split. Before them, silently:
 * what a device model refuses (a group without its exchange, an unknown
 * device). Global
 * negatives on the device path: tests/check_mpi.sh (2 ranks, cpu-split). Exits non-zero on any
 * failure.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "backend/backend.h" /* the device's table: its memory */
#include "ampc/data.h"
#include "mm_fixture.h"
#include "numeric/numeric.h" /* ampc_elem_load */

static int g_fail;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      g_fail++;                                                                                    \
    }                                                                                              \
  } while (0)
#define OK(call)                                                                                   \
  do {                                                                                             \
    const ampc_status st_ = (call);                                                                \
    if (st_ != AMPC_OK) {                                                                          \
      printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, ampc_last_error());                \
      g_fail++;                                                                                    \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

/* return a failed status from the enclosing function */
#define AMPC_TRY_T(call)                                                                           \
  do {                                                                                             \
    const ampc_status t_ = (call);                                                                 \
    if (t_ != AMPC_OK)                                                                             \
      return t_;                                                                                   \
  } while (0)

enum { B = MMF_B, TT = MMF_TT, VOCAB = MMF_VOCAB, CLASSES = MMF_CLASSES };

/* ---- device memory for the parameter table (the device's backend) -------------- */

static ampc_status dev_alloc(ampc_device dev, void **p, size_t bytes) {
  return ampc_device_backend(dev)->alloc(p, bytes);
}
static void dev_free(ampc_device dev, void *p) { ampc_device_backend(dev)->release(p); }
static ampc_status dev_put(ampc_device dev, void *d, const void *h, size_t bytes) {
  return ampc_device_backend(dev)->to_device(d, h, bytes);
}
static ampc_status dev_get(ampc_device dev, void *h, const void *d, size_t bytes) {
  return ampc_device_backend(dev)->to_host(h, d, bytes);
}

/* D: P's table with its weights and (zero) gradients in the device's memory */
static ampc_status mirror_params(ampc_device dev, const ampc_params *P, ampc_params *D) {
  *D = *P; /* the metadata (P->p) is shared and stays on the host */
  D->master = NULL, D->m = D->v = D->comp = NULL;
  const size_t bytes = (size_t)P->total * ampc_dtype_size(P->wdt);
  D->w = D->grad = NULL;
  ampc_status st = dev_alloc(dev, &D->w, bytes);
  if (st == AMPC_OK)
    st = dev_alloc(dev, &D->grad, bytes);
  if (st == AMPC_OK)
    st = dev_put(dev, D->w, P->w, bytes);
  if (st == AMPC_OK)
    st = dev_put(dev, D->grad, P->grad, bytes); /* zeros */
  return st;
}
static void mirror_free(ampc_device dev, ampc_params *D) {
  dev_free(dev, D->w);
  dev_free(dev, D->grad);
}

/* ---- the fixture (tests/mm_fixture.h, test_mm_parity's) ------------------------------ */

typedef struct {
  ampc_mmodel_config c;
  ampc_mmodel_specs sp;
  ampc_trainer T;
} weights;

static ampc_status make_weights(weights *w, const char *model, ampc_precision p, float w_mlm) {
  memset(w, 0, sizeof *w);
  AMPC_TRY_T(ampc_mmodel_config_get(model, VOCAB, TT, CLASSES, &w->c));
  w->c.w_itc = 1.0f, w->c.w_itm = 0.7f, w->c.w_cls = 0.5f;
  w->c.w_mlm = w_mlm, w->c.mlm_prob = w_mlm > 0.0f ? 0.3f : 0.0f;
  AMPC_TRY_T(ampc_mmodel_specs_make(&w->c, &w->sp));
  ampc_amp_config a;
  ampc_amp_config_preset(p, &a);
  const ampc_optim_config o = ampc_optim_adamw_defaults();
  AMPC_TRY_T(ampc_trainer_init(&w->T, &a, &o, w->sp.specs, w->sp.n, k_mmf_init_seed));
  return mmf_perturb(&w->T);
}
static void free_weights(weights *w) {
  ampc_trainer_free(&w->T);
  ampc_mmodel_specs_free(&w->sp);
}

/* ---- one case ----------------------------------------------------------------------- */

typedef enum { PASS_ONE, PASS_BRANCHES, PASS_LOSSES } pass_kind;

typedef struct {
  const char *name;
  const char *model; /* mm-micro or vit-ref */
  float w_mlm;
  uint64_t neg_seed;
  bool neg_uniform;
  pass_kind pass;
  bool global; /* global negatives over a group of 2 simulated in this process */
  bool keep;   /* the device model keeps what the CPU's recomputes (no_recompute) */
  bool cast;   /* both models: the attention products' 16-bit operands (attn_cast) */
} case_t;

/* a data-parallel group of 2 whose other rank holds this rank's batch: the
 * allgather repeats x, the sum doubles (exactly) */
static ampc_status twin_allgather(void *user, const void *x, size_t bytes, void *y) {
  (void)user;
  memcpy(y, x, bytes);
  memcpy((char *)y + bytes, x, bytes);
  return AMPC_OK;
}
static ampc_status twin_sum(void *user, float *x, int64_t n) {
  (void)user;
  for (int64_t i = 0; i < n; i++)
    x[i] = x[i] + x[i];
  return AMPC_OK;
}

/* tolerances (see the top): u per dtype, k for gradients and losses */
static double unit_of(ampc_dtype dt) {
  return dt == AMPC_F16 ? 0x1p-11 : dt == AMPC_BF16 ? 0x1p-8 : 1.0;
}

static int compare_losses(const char *what, const ampc_mmodel_losses *a,
                          const ampc_mmodel_losses *b, bool exact, double ltol) {
  const float av[] = {a->total, a->itc, a->itm, a->cls, a->itm_acc, a->cls_acc, a->mlm, a->mlm_acc};
  const float bv[] = {b->total, b->itc, b->itm, b->cls, b->itm_acc, b->cls_acc, b->mlm, b->mlm_acc};
  static const char *const nm[] = {"total",   "itc",     "itm", "cls",
                                   "itm_acc", "cls_acc", "mlm", "mlm_acc"};
  for (int i = 0; i < 8; i++) {
    if (exact)
      CHECK(memcmp(&av[i], &bv[i], sizeof av[i]) == 0,
            "%s: loss %s %.9g on the device, %.9g on "
            "the CPU",
            what, nm[i], (double)av[i], (double)bv[i]);
    else
      CHECK(fabs((double)av[i] - (double)bv[i]) <= ltol * fabs((double)bv[i]) + 1e-7,
            "%s: loss %s %.9g on the device, %.9g on the CPU (tol %.3g rel)", what, nm[i],
            (double)av[i], (double)bv[i], ltol);
  }
  CHECK(a->mlm_tokens == b->mlm_tokens, "%s: %lld masked tokens, %lld on the CPU", what,
        (long long)a->mlm_tokens, (long long)b->mlm_tokens);
  return 0;
}

/* the device's gradients (copied back) against the CPU's */
static void compare_grads(const char *what, ampc_device dev, const ampc_params *Pc,
                          const ampc_params *Pd, bool exact, double k) {
  const size_t es = ampc_dtype_size(Pc->wdt), bytes = (size_t)Pc->total * es;
  void *g = malloc(bytes);
  CHECK(g != NULL, "out of memory");
  if (!g)
    return;
  if (dev_get(dev, g, Pd->grad, bytes) != AMPC_OK) {
    CHECK(0, "%s: copying the gradients back: %s", what, ampc_last_error());
    free(g);
    return;
  }
  if (exact) {
    for (int i = 0; i < Pc->count; i++) {
      const ampc_param *q = &Pc->p[i];
      const char *a = (const char *)g + (size_t)q->offset * es;
      const char *b = (const char *)Pc->grad + (size_t)q->offset * es;
      CHECK(memcmp(a, b, (size_t)q->numel * es) == 0, "%s: gradient of %s differs from the CPU's",
            what, q->name);
    }
  } else {
    double gmax = 0.0;
    for (int64_t e = 0; e < Pc->total; e++)
      gmax = fmax(gmax, fabs((double)ampc_elem_load(Pc->grad, Pc->wdt, e)));
    for (int i = 0; i < Pc->count; i++) {
      const ampc_param *q = &Pc->p[i];
      double tmax = 0.0, worst = 0.0;
      for (int64_t e = 0; e < q->numel; e++)
        tmax = fmax(tmax, fabs((double)ampc_elem_load(Pc->grad, Pc->wdt, q->offset + e)));
      const double tol = k * tmax + 1e-7 * gmax;
      for (int64_t e = 0; e < q->numel; e++) {
        const double a = (double)ampc_elem_load(g, Pc->wdt, q->offset + e);
        const double b = (double)ampc_elem_load(Pc->grad, Pc->wdt, q->offset + e);
        worst = fmax(worst, isnan(a) != isnan(b) ? (double)INFINITY : fabs(a - b));
      }
      CHECK(worst <= tol, "%s: gradient of %s: worst |diff| %.3g > tol %.3g", what, q->name, worst,
            tol);
    }
  }
  free(g);
}

static int run_case(ampc_device dev, ampc_precision p, const case_t *cs) {
  char what[160];
  snprintf(what, sizeof what, "%s %s %s", dev == AMPC_DEVICE_CUDA ? "cuda" : "cpu-split",
           ampc_precision_name(p), cs->name);
  weights w;
  OK(make_weights(&w, cs->model, p, cs->w_mlm));
  w.c.attn_cast = cs->cast;
  if (cs->cast && dev == AMPC_DEVICE_CUDA && w.T.amp.accumulate == AMPC_ACC_F16) {
    /* FP16 sums take the per-head path, which has no 16-bit operands: the
     * device model refuses at creation */
    ampc_mmodel *Mr = NULL;
    CHECK(ampc_mmodel_create_on(&Mr, &w.c, &w.T.params, &w.T.amp, B, dev) == AMPC_ERR_UNSUPPORTED,
          "%s: not refused", what);
    ampc_mmodel_free(Mr);
    free_weights(&w);
    printf("ok - %s (refused: FP16 sums)\n", what);
    return 0;
  }
  ampc_params *Pc = &w.T.params, Pd;
  OK(mirror_params(dev, Pc, &Pd));
  ampc_mmodel *Mc = NULL, *Md = NULL;
  OK(ampc_mmodel_create(&Mc, &w.c, Pc, &w.T.amp, B));
  ampc_mmodel_config cfg = w.c;
  cfg.no_recompute = cs->keep;
  OK(ampc_mmodel_create_on(&Md, &cfg, &Pd, &w.T.amp, B, dev));
  if (cs->global) {
    const ampc_model_group g = {NULL, 0, 2, twin_allgather, twin_sum};
    OK(ampc_mmodel_set_group(Mc, &g));
    OK(ampc_mmodel_set_group(Md, &g));
  }
  size_t pa = 0, pw = 0; /* the memory account's prediction is what the device model took */
  OK(ampc_mmodel_plan_bytes_on(&cfg, B, w.T.amp.precision, dev, &pa, &pw));
  CHECK(pa + pw == ampc_mmodel_activation_bytes(Md), "%s: predicted %zu arena bytes, took %zu",
        cs->name, pa + pw, ampc_mmodel_activation_bytes(Md));
  const int64_t npix = B * w.c.img * w.c.img * w.c.channels;
  uint8_t *images = malloc((size_t)npix);
  if (!images) {
    CHECK(0, "out of memory");
    return 1;
  }
  int32_t tokens[B * TT], labels[B];
  mmf_batch(images, npix, tokens, labels);
  const bool image_only = w.c.image_only;
  ampc_mmodel_batch bt = {.b = B,
                          .images = images,
                          .tokens = image_only ? NULL : tokens,
                          .labels = labels,
                          .neg_seed = cs->neg_seed,
                          .mask_seed = cs->w_mlm > 0.0f ? 99 : 0,
                          .neg_uniform = cs->neg_uniform};
  const bool exact = dev != AMPC_DEVICE_CUDA;
  const double u = unit_of(Pc->wdt);
  const double kg = u == 1.0 ? 2e-4 : 64.0 * u, kl = u == 1.0 ? 4e-5 : 16.0 * u;
  ampc_mmodel_losses Lc, Ld;
  OK(ampc_mmodel_forward(Mc, &bt, &Lc));
  OK(ampc_mmodel_forward(Md, &bt, &Ld));
  compare_losses(what, &Ld, &Lc, exact, kl);
  if (!image_only) {
    int32_t nc[B], nd[B];
    ampc_mmodel_last_negatives(Mc, B, nc);
    ampc_mmodel_last_negatives(Md, B, nd);
    CHECK(memcmp(nc, nd, sizeof nc) == 0, "%s: the hard negatives differ", what);
  }
  const float S = Pc->wdt == AMPC_F16 ? 1024.0f : 1.0f;
  if (cs->pass == PASS_BRANCHES) {
    const float seeds[AMPC_BRANCH_COUNT] = {4 * S, 2 * S, S / 2, S}; /* vision text fusion heads */
    OK(ampc_mmodel_backward_branches(Mc, seeds));
    OK(ampc_mmodel_backward_branches(Md, seeds));
  } else if (cs->pass == PASS_LOSSES) {
    const float s1[AMPC_MM_LOSSES] = {S, 0, 0, 0}, s2[AMPC_MM_LOSSES] = {0, 2 * S, S, S};
    OK(ampc_mmodel_backward_losses(Mc, s1));
    OK(ampc_mmodel_backward_losses(Md, s1));
    OK(ampc_mmodel_backward_losses(Mc, s2));
    OK(ampc_mmodel_backward_losses(Md, s2));
  } else {
    OK(ampc_mmodel_backward(Mc, S));
    OK(ampc_mmodel_backward(Md, S));
  }
  compare_grads(what, dev, Pc, &Pd, exact, kg);
  /* retrieval embeddings and group predictions */
  float ec[B * 64], ed[B * 64], tc[B * 64], td[B * 64];
  int32_t cc[B], cd[B];
  const int64_t E = w.c.embed;
  if (!image_only && E <= 64) {
    OK(ampc_mmodel_embed(Mc, B, images, tokens, ec, tc, cc));
    OK(ampc_mmodel_embed(Md, B, images, tokens, ed, td, cd));
    const size_t n = (size_t)(B * E);
    if (exact) {
      CHECK(memcmp(ec, ed, n * sizeof *ec) == 0, "%s: image embeddings differ", what);
      CHECK(memcmp(tc, td, n * sizeof *tc) == 0, "%s: text embeddings differ", what);
    } else {
      for (size_t i = 0; i < n; i++) {
        CHECK(fabsf(ec[i] - ed[i]) <= (float)(kl + 1e-6), "%s: image embedding %zu", what, i);
        CHECK(fabsf(tc[i] - td[i]) <= (float)(kl + 1e-6), "%s: text embedding %zu", what, i);
      }
    }
    CHECK(memcmp(cc, cd, sizeof cc) == 0, "%s: group predictions differ", what);
  } else if (image_only) {
    OK(ampc_mmodel_embed(Mc, B, images, NULL, NULL, NULL, cc));
    OK(ampc_mmodel_embed(Md, B, images, NULL, NULL, NULL, cd));
    CHECK(memcmp(cc, cd, sizeof cc) == 0, "%s: class predictions differ", what);
  }
  ampc_mmodel_free(Md);
  ampc_mmodel_free(Mc);
  mirror_free(dev, &Pd);
  free_weights(&w);
  free(images);
  printf("ok - %s\n", what);
  return 0;
}

/* The rounding telemetry of one forward and backward pass (composite loss,
 * sampled negatives, MLM) on the CPU and on dev, with the loss scale S of a
 * healthy run and with those of two failure signatures of
 * tests/check_diagnose.sh (S = 1 without loss scaling: gradients flush to
 * zero; S = 2^30: they overflow): on cpu-split every count,
 * histogram and shadow error equal; on the GPU the number of values counted
 * per branch and pass equal (the same stores counted), every branch's shadow
 * accumulation error below 4 K 2^-24 (FP32 accumulation; none on 32-true's
 * pedantic FP32 beyond that either; 16-true's binary16 sums: (K + 3) 2^-11),
 * and the rounding outcomes close: a value
 * can change class (flushed, subnormal, zero) only where the two sides'
 * orders of summation move it across a class boundary, which a few values
 * in a thousand may do (first checked on the first device run). */
static int run_telemetry(ampc_device dev, ampc_precision p, float S, const char *label) {
  char what[160];
  snprintf(what, sizeof what, "%s %s telemetry, %s", dev == AMPC_DEVICE_CUDA ? "cuda" : "cpu-split",
           ampc_precision_name(p), label);
  weights w;
  OK(make_weights(&w, "mm-micro", p, 0.5f));
  ampc_params *Pc = &w.T.params, Pd;
  OK(mirror_params(dev, Pc, &Pd));
  ampc_mmodel *M[2] = {NULL, NULL};
  OK(ampc_mmodel_create(&M[0], &w.c, Pc, &w.T.amp, B));
  OK(ampc_mmodel_create_on(&M[1], &w.c, &Pd, &w.T.amp, B, dev));
  const int64_t npix = B * w.c.img * w.c.img * w.c.channels;
  uint8_t *images = malloc((size_t)npix);
  ampc_telemetry *tm = calloc(2, sizeof *tm);
  if (!images || !tm) {
    CHECK(0, "out of memory");
    return 1;
  }
  int32_t tokens[B * TT], labels[B];
  mmf_batch(images, npix, tokens, labels);
  const ampc_mmodel_batch bt = {.b = B,
                                .images = images,
                                .tokens = tokens,
                                .labels = labels,
                                .neg_seed = 1234,
                                .mask_seed = 99};
  for (int side = 0; side < 2; side++) {
    const ampc_model_probe pr = ampc_telemetry_probe(&tm[side]);
    ampc_mmodel_set_probe(M[side], &pr);
    ampc_mmodel_losses L;
    OK(ampc_telemetry_begin(&tm[side]));
    OK(ampc_mmodel_forward(M[side], &bt, &L));
    OK(ampc_mmodel_backward(M[side], S));
    ampc_telemetry_end(&tm[side]);
  }
  const ampc_telemetry *c = &tm[0], *d = &tm[1];
  static const char *const br[] = {"vision", "text", "fusion", "heads"};
  for (int ph = 0; ph < AMPC_TM_PHASES; ph++)
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      const ampc_tm_stats *x = &d->s[ph][b], *y = &c->s[ph][b];
      const char *pn = ph == AMPC_TM_ACT ? "act" : "grad";
      if (dev != AMPC_DEVICE_CUDA) {
        CHECK(memcmp(x, y, sizeof *x) == 0, "%s: %s %s counts differ from the CPU's", what, br[b],
              pn);
        continue;
      }
      CHECK(x->r.count == y->r.count, "%s: %s %s: %llu values counted, %llu on the CPU", what,
            br[b], pn, (unsigned long long)x->r.count, (unsigned long long)y->r.count);
      const double slack = 4e-3 * (double)y->r.count + 8.0;
      const uint64_t xs[] = {x->r.underflow, x->r.subnormal, x->zeros, x->r.inf, x->r.nan};
      const uint64_t ys[] = {y->r.underflow, y->r.subnormal, y->zeros, y->r.inf, y->r.nan};
      static const char *const nm[] = {"flushed", "subnormal", "zeros", "inf", "nan"};
      for (int k = 0; k < 5; k++)
        CHECK(fabs((double)xs[k] - (double)ys[k]) <= slack, "%s: %s %s: %s %llu, %llu on the CPU",
              what, br[b], pn, nm[k], (unsigned long long)xs[k], (unsigned long long)ys[k]);
    }
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    if (dev != AMPC_DEVICE_CUDA) {
      CHECK(c->acc_err[b] == d->acc_err[b] && c->acc_k[b] == d->acc_k[b] &&
                !strcmp(c->acc_tensor[b], d->acc_tensor[b]),
            "%s: %s shadow error %.3g (%s), %.3g (%s) on the CPU", what, br[b], d->acc_err[b],
            d->acc_tensor[b], c->acc_err[b], c->acc_tensor[b]);
    } else {
      CHECK((c->acc_err[b] < 0.0) == (d->acc_err[b] < 0.0), "%s: %s shadow sampled on one side",
            what, br[b]);
      /* FP32 sums: 4 K 2^-24; binary16 sums (16-true): (K + 3) 2^-11 */
      const double k = (double)d->acc_k[b];
      const double lim =
          w.T.amp.accumulate == AMPC_ACC_F16 ? (k + 3.0) * 0x1p-11 : 4.0 * k * 0x1p-24;
      CHECK(d->acc_err[b] <= lim, "%s: %s shadow error %.3g (k %lld, bound %.3g)", what, br[b],
            d->acc_err[b], (long long)d->acc_k[b], lim);
    }
  }
  CHECK(!strcmp(c->first_nonfinite, d->first_nonfinite), "%s: first non-finite %s, %s on the CPU",
        what, d->first_nonfinite, c->first_nonfinite);
  /* the signatures are there to be compared: binary16 gradients flush
   * without a loss scale, and overflow at 2^30 */
  uint64_t flushed = 0, nonfinite = 0;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    flushed += c->s[AMPC_TM_GRAD][b].r.underflow, nonfinite += c->s[AMPC_TM_GRAD][b].r.overflow;
  if (Pc->wdt == AMPC_F16 && S == 1.0f)
    CHECK(flushed > 0, "%s: no gradient flushed to zero on the CPU", what);
  if (Pc->wdt == AMPC_F16 && S > 65504.0f)
    CHECK(nonfinite > 0 && c->first_nonfinite[0], "%s: no gradient overflowed on the CPU", what);
  ampc_mmodel_free(M[1]);
  ampc_mmodel_free(M[0]);
  mirror_free(dev, &Pd);
  free_weights(&w);
  free(images);
  free(tm);
  printf("ok - %s\n", what);
  return 0;
}

static const case_t k_cases[] = {
    {"composite", "mm-micro", 0.0f, 0, false, PASS_ONE, false, false, false},
    {"per-branch seeds", "mm-micro", 0.0f, 0, false, PASS_BRANCHES, false, false, false},
    {"per-loss passes", "mm-micro", 0.0f, 0, false, PASS_LOSSES, false, false, false},
    {"sampled negatives", "mm-micro", 0.0f, 1234, false, PASS_ONE, false, false, false},
    {"uniform negatives", "mm-micro", 0.0f, 77, true, PASS_ONE, false, false, false},
    {"masked captions", "mm-micro", 0.5f, 0, false, PASS_ONE, false, false, false},
    {"image-only", "vit-ref", 0.0f, 0, false, PASS_ONE, false, false, false},
    {"global negatives", "mm-micro", 0.0f, 0, false, PASS_ONE, true, false, false},
    {"kept probabilities and x1", "mm-micro", 0.5f, 0, false, PASS_ONE, false, true, false},
    {"attention cast", "mm-micro", 0.0f, 0, false, PASS_ONE, false, false, true},
};

static int run_device(ampc_device dev) {
  static const ampc_precision presets[] = {AMPC_PRECISION_32_TRUE, AMPC_PRECISION_16_MIXED,
                                           AMPC_PRECISION_BF16_MIXED, AMPC_PRECISION_16_TRUE};
  for (size_t p = 0; p < sizeof presets / sizeof *presets; p++)
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++)
      run_case(dev, presets[p], &k_cases[i]);
  /* fp8-mixed on cpu-split only: on the GPU an ulp of difference before a
   * cast can move an operand by an FP8 ulp (2^-3 relative), so no useful
   * bound follows; the GPU's FP8 layers are checked one by one against the
   * CPU's by test_cuda_nn (casts bit-equal, products within the GEMM bound) */
  if (dev != AMPC_DEVICE_CUDA)
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++)
      run_case(dev, AMPC_PRECISION_FP8_MIXED, &k_cases[i]);
  for (size_t p = 0; p < sizeof presets / sizeof *presets; p++) {
    run_telemetry(dev, presets[p], presets[p] == AMPC_PRECISION_16_MIXED ? 1024.0f : 1.0f,
                  "healthy");
    if (presets[p] != AMPC_PRECISION_32_TRUE && presets[p] != AMPC_PRECISION_16_TRUE) {
      run_telemetry(dev, presets[p], 1.0f, "no loss scale");
      run_telemetry(dev, presets[p], 0x1p30f, "loss scale 2^30");
    }
  }
  return 0;
}

/* what a device model refuses, with a clear error */
static int refusals(void) {
  weights w;
  ampc_mmodel *M = NULL;
  OK(make_weights(&w, "mm-micro", AMPC_PRECISION_16_MIXED, 0.0f));
  OK(ampc_mmodel_create_on(&M, &w.c, &w.T.params, &w.T.amp, B, AMPC_DEVICE_CPU_SPLIT));
  const ampc_model_group g = {.rank = 0, .size = 2, .allgather = NULL, .sum_f32 = NULL};
  CHECK(ampc_mmodel_set_group(M, &g) == AMPC_ERR_INVALID_ARG, "a group without its exchange");
  ampc_mmodel_free(M);
  CHECK(ampc_mmodel_create_on(&M, &w.c, &w.T.params, &w.T.amp, B, (ampc_device)7) ==
            AMPC_ERR_INVALID_ARG,
        "an unknown device");
  free_weights(&w);
  return 0;
}

int main(void) {
  refusals();
  run_device(AMPC_DEVICE_CPU_SPLIT);
  if (!ampc_device_built(AMPC_DEVICE_CUDA)) { /* not registered: a clear refusal */
    ampc_device_ctx *none = NULL;
    CHECK(ampc_device_open(AMPC_DEVICE_CUDA, 0, &none) == AMPC_ERR_UNSUPPORTED && !none &&
              strstr(ampc_last_error(), "not built"),
          "--device cuda in a build without it");
  }
  if (ampc_device_count(AMPC_DEVICE_CUDA) == 0) {
    printf("# skip: the CUDA half (no GPU: %s)\n",
           ampc_device_unavailable_reason(AMPC_DEVICE_CUDA));
  } else {
    ampc_device_ctx *ctx = NULL;
    if (ampc_device_open(AMPC_DEVICE_CUDA, 0, &ctx) != AMPC_OK) {
      printf("FAIL: ampc_device_open: %s\n", ampc_last_error());
      return 1;
    }
    /* 16-true's FP16 sums: the CPU's bits (see the top) */
    if (ampc_device_set(AMPC_DEVICE_CUDA, "acc16_exact", true) != AMPC_OK) {
      printf("FAIL: acc16_exact: %s\n", ampc_last_error());
      return 1;
    }
    run_device(AMPC_DEVICE_CUDA);
    ampc_device_close(ctx);
  }
  if (g_fail)
    printf("%d check(s) failed\n", g_fail);
  return g_fail ? 1 : 0;
}
