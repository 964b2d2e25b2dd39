/*
 * src/train/eval.c: retrieval (R@1, R@5 in both directions), matching and
 * group accuracy of the multimodal model on one split of a dataset.
 */
#include "internal.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/data.h"
#include "ampc/model.h"
#include "ampc/train.h"
#include "run_internal.h"

/* rank of the best-ranked relevant item: 1 + number of irrelevant items
 * scoring strictly higher than the best relevant one (ties favour relevance
 * no more than chance would: an irrelevant tie counts as higher). Non-finite
 * scores rank nothing: a relevant item without a finite score is never
 * retrieved (rank n + 1), and an irrelevant non-finite score counts as higher,
 * so a model whose embeddings became NaN scores R@k = 0, not 1. */
static int64_t best_rank(const float *score, int64_t n, const int32_t *item_concept, int32_t want) {
  float best = 0.0f;
  bool found = false;
  for (int64_t j = 0; j < n; j++)
    if (item_concept[j] == want && isfinite(score[j]) && (!found || score[j] > best))
      best = score[j], found = true;
  if (!found)
    return n + 1;
  int64_t rank = 1;
  for (int64_t j = 0; j < n; j++)
    if (item_concept[j] != want && (!isfinite(score[j]) || score[j] >= best))
      rank++;
  return rank;
}

/* done of total work units of a split, to p's range; AMPC_OK, or the
 * cancellation's error when p's cancel flag is set */
static ampc_status report(const eval_progress *p, int64_t done, int64_t total) {
  if (p && p->fn && total > 0)
    p->fn(p->user, p->lo + (p->hi - p->lo) * (double)done / (double)total);
  if (p && p->cancel && *p->cancel)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "evaluation cancelled");
  return AMPC_OK;
}

ampc_status ampc_mmodel_evaluate(ampc_mmodel *M, const struct ampc_dataset *d, int split,
                                 ampc_mmodel_metrics *out) {
  return eval_mm_split(M, d, split, out, NULL);
}

ampc_status eval_mm_split(ampc_mmodel *M, const ampc_dataset *d, int split,
                          ampc_mmodel_metrics *out, const eval_progress *p) {
  if (!M || !d || !out || !d->tokens)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "evaluate: bad arguments (a dataset with text needed)");
  memset(out, 0, sizeof *out);
  /* the samples of the split, and one (the first) per concept */
  int64_t n = 0, nc = 0;
  for (int64_t i = 0; i < d->n; i++)
    n += d->split[i] == split;
  if (n < 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "evaluate: split %d has %lld samples (need 2)", split,
                     (long long)n);
  int64_t *idx = malloc((size_t)n * sizeof *idx), *uniq = malloc((size_t)n * sizeof *uniq);
  int64_t emb_dim = 0, B = 0;
  float *ie = NULL, *te = NULL, *score = NULL;
  int32_t *icon = malloc((size_t)n * sizeof *icon), *tcon = malloc((size_t)n * sizeof *tcon);
  int32_t *pred = NULL;
  uint8_t *ibuf = NULL;
  int32_t *tbuf = NULL, *lbuf = NULL;
  ampc_status st = AMPC_OK;
  if (!idx || !uniq || !icon || !tcon) {
    st = ampc_fail(AMPC_ERR_NOMEM, "evaluate: out of memory");
    goto done;
  }
  for (int64_t i = 0, k = 0; i < d->n; i++)
    if (d->split[i] == split)
      idx[k++] = i;
  for (int64_t k = 0; k < n; k++) {
    const int32_t cpt = d->concept[idx[k]];
    icon[k] = cpt;
    int seen = 0;
    for (int64_t u = 0; u < nc && !seen; u++)
      seen = tcon[u] == cpt;
    if (!seen) {
      uniq[nc] = idx[k];
      tcon[nc++] = cpt;
    }
  }
  const ampc_mmodel_config *c = ampc_mmodel_get_config(M);
  const int64_t img_sz = (int64_t)d->height * d->width * d->channels, T = d->seq_len;
  B = ampc_mmodel_max_batch(M);
  emb_dim = c->embed;
  if (d->height != c->img || d->width != c->img || d->channels != c->channels ||
      d->seq_len != c->seq_len || d->vocab != c->vocab || d->n_classes != c->classes) {
    st = ampc_fail(AMPC_ERR_INVALID_ARG, "evaluate: the dataset's shapes do not match model %s",
                   c->name);
    goto done;
  }
  ie = malloc((size_t)(n * emb_dim) * sizeof *ie);
  te = malloc((size_t)(nc * emb_dim) * sizeof *te);
  const int nth = omp_get_max_threads(); /* one score row per thread */
  const int64_t ms = n > nc ? n : nc;
  score = malloc((size_t)nth * (size_t)ms * sizeof *score);
  pred = malloc((size_t)B * sizeof *pred);
  ibuf = malloc((size_t)(B * img_sz));
  tbuf = malloc((size_t)(B * T) * sizeof *tbuf);
  lbuf = malloc((size_t)B * sizeof *lbuf);
  if (!ie || !te || !score || !pred || !ibuf || !tbuf || !lbuf) {
    st = ampc_fail(AMPC_ERR_NOMEM, "evaluate: out of memory");
    goto done;
  }
  /* the work, in samples through the model: every image and one caption
   * per concept embedded, then two forward passes per concept */
  const int64_t work = n + 3 * nc;
  /* image embeddings and group predictions */
  int64_t cls_hits = 0;
  for (int64_t s = 0; s < n && st == AMPC_OK; s += B) {
    const int64_t b = n - s < B ? n - s : B;
    for (int64_t k = 0; k < b; k++)
      memcpy(ibuf + k * img_sz, d->images + idx[s + k] * img_sz, (size_t)img_sz);
    st = ampc_mmodel_embed(M, b, ibuf, NULL, ie + s * emb_dim, NULL, pred);
    for (int64_t k = 0; k < b && st == AMPC_OK; k++)
      cls_hits += pred[k] == d->label[idx[s + k]];
    if (st == AMPC_OK)
      st = report(p, s + b, work);
  }
  /* caption embeddings, one per concept */
  for (int64_t s = 0; s < nc && st == AMPC_OK; s += B) {
    const int64_t b = nc - s < B ? nc - s : B;
    for (int64_t k = 0; k < b; k++)
      memcpy(tbuf + k * T, d->tokens + uniq[s + k] * T, (size_t)T * sizeof *tbuf);
    st = ampc_mmodel_embed(M, b, NULL, tbuf, NULL, te + s * emb_dim, NULL);
    if (st == AMPC_OK)
      st = report(p, n + s + b, work);
  }
  if (st != AMPC_OK)
    goto done;
  /* the ranks on every thread: each (image, caption) dot product is the same
   * whatever the thread count, so are the counts */
  int64_t r1 = 0, r5 = 0;
#pragma omp parallel for reduction(+ : r1, r5) schedule(static)
  for (int64_t k = 0; k < n; k++) { /* image -> text */
    float *sc = score + (int64_t)omp_get_thread_num() * ms;
    for (int64_t u = 0; u < nc; u++) {
      float dot = 0;
      for (int64_t e = 0; e < emb_dim; e++)
        dot += ie[k * emb_dim + e] * te[u * emb_dim + e];
      sc[u] = dot;
    }
    const int64_t rank = best_rank(sc, nc, tcon, icon[k]);
    r1 += rank <= 1, r5 += rank <= 5;
  }
  out->i2t_r1 = (double)r1 / (double)n, out->i2t_r5 = (double)r5 / (double)n;
  r1 = r5 = 0;
#pragma omp parallel for reduction(+ : r1, r5) schedule(static)
  for (int64_t u = 0; u < nc; u++) { /* text -> image */
    float *sc = score + (int64_t)omp_get_thread_num() * ms;
    for (int64_t k = 0; k < n; k++) {
      float dot = 0;
      for (int64_t e = 0; e < emb_dim; e++)
        dot += ie[k * emb_dim + e] * te[u * emb_dim + e];
      sc[k] = dot;
    }
    const int64_t rank = best_rank(sc, n, icon, tcon[u]);
    r1 += rank <= 1, r5 += rank <= 5;
  }
  out->t2i_r1 = (double)r1 / (double)nc, out->t2i_r5 = (double)r5 / (double)nc;
  out->samples = n, out->concepts = nc;
  out->cls_acc = (double)cls_hits / (double)n;
  /* losses and matching accuracy on batches of one sample per concept */
  double wsum = 0, msum = 0;
  for (int64_t s = 0; s + 2 <= nc && st == AMPC_OK; s += B) {
    const int64_t b = nc - s < B ? nc - s : B;
    if (b < 2)
      break;
    for (int64_t k = 0; k < b; k++) {
      const int64_t i = uniq[s + k];
      memcpy(ibuf + k * img_sz, d->images + i * img_sz, (size_t)img_sz);
      memcpy(tbuf + k * T, d->tokens + i * T, (size_t)T * sizeof *tbuf);
      lbuf[k] = d->label[i];
    }
    ampc_mmodel_batch bt = {.b = b, .images = ibuf, .tokens = tbuf, .labels = lbuf};
    ampc_mmodel_losses L;
    st = ampc_mmodel_forward(M, &bt, &L);
    if (st != AMPC_OK)
      break;
    out->loss += (double)L.total * (double)b, out->itc += (double)L.itc * (double)b;
    out->itm += (double)L.itm * (double)b, out->cls += (double)L.cls * (double)b;
    out->itm_acc += (double)L.itm_acc * (double)b;
    wsum += (double)b;
    /* the same positives against random negatives (deterministic draws) */
    ampc_mmodel_batch br = bt;
    br.neg_seed = 0x52414e444f4dull + (uint64_t)s, br.neg_uniform = true;
    ampc_mmodel_losses Lr;
    st = ampc_mmodel_forward(M, &br, &Lr);
    if (st != AMPC_OK)
      break;
    out->itm_acc_random += (double)Lr.itm_acc * (double)b;
    /* MLM: over every masked token (fixed masks: mask_seed 0) */
    out->mlm += (double)L.mlm * (double)L.mlm_tokens;
    out->mlm_acc += (double)L.mlm_acc * (double)L.mlm_tokens;
    msum += (double)L.mlm_tokens;
    if (st == AMPC_OK)
      st = report(p, n + nc + 2 * (s + b), work);
  }
  if (st == AMPC_OK)
    st = report(p, work, work);
  if (wsum > 0) {
    out->loss /= wsum, out->itc /= wsum, out->itm /= wsum, out->cls /= wsum;
    out->itm_acc /= wsum, out->itm_acc_random /= wsum;
  }
  if (msum > 0)
    out->mlm /= msum, out->mlm_acc /= msum;
done:
  free(idx), free(uniq), free(icon), free(tcon), free(ie), free(te), free(score), free(pred);
  free(ibuf), free(tbuf), free(lbuf);
  return st;
}

ampc_status ampc_mmodel_zero_shot(ampc_mmodel *M, const struct ampc_dataset *d, int split,
                                  const int32_t *prompts, double *acc) {
  if (!M || !d || !prompts || !acc || d->n_classes < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "zero-shot: bad arguments");
  *acc = 0.0;
  const ampc_mmodel_config *c = ampc_mmodel_get_config(M);
  if (d->seq_len != c->seq_len || d->height != c->img || d->channels != c->channels)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "zero-shot: the dataset's shapes do not match model %s",
                     c->name);
  const int64_t B = ampc_mmodel_max_batch(M), E = c->embed, K = d->n_classes, T = d->seq_len;
  const int64_t img_sz = (int64_t)d->height * d->width * d->channels;
  float *te = malloc((size_t)(K * E) * sizeof *te), *ie = malloc((size_t)(B * E) * sizeof *ie);
  int32_t *tbuf = malloc((size_t)(B * T) * sizeof *tbuf);
  uint8_t *ibuf = malloc((size_t)(B * img_sz));
  ampc_status st =
      te && ie && tbuf && ibuf ? AMPC_OK : ampc_fail(AMPC_ERR_NOMEM, "zero-shot: out of memory");
  for (int64_t s = 0; s < K && st == AMPC_OK; s += B) { /* one text embedding per class */
    const int64_t b = K - s < B ? K - s : B;
    memcpy(tbuf, prompts + s * T, (size_t)(b * T) * sizeof *tbuf);
    st = ampc_mmodel_embed(M, b, NULL, tbuf, NULL, te + s * E, NULL);
  }
  int64_t hits = 0, n = 0;
  int64_t *idx = st == AMPC_OK ? malloc((size_t)B * sizeof *idx) : NULL;
  if (st == AMPC_OK && !idx)
    st = ampc_fail(AMPC_ERR_NOMEM, "zero-shot: out of memory");
  for (int64_t i = 0; i < d->n && st == AMPC_OK;) { /* the split's images, B at a time */
    int64_t b = 0;
    for (; i < d->n && b < B; i++)
      if (d->split[i] == split) {
        memcpy(ibuf + b * img_sz, d->images + i * img_sz, (size_t)img_sz);
        idx[b++] = i;
      }
    if (b == 0)
      break;
    st = ampc_mmodel_embed(M, b, ibuf, NULL, ie, NULL, NULL);
    for (int64_t k = 0; k < b && st == AMPC_OK; k++) { /* the best prompt; a NaN never wins */
      int64_t best = -1;
      float bs = 0.0f;
      for (int64_t j = 0; j < K; j++) {
        float dot = 0.0f;
        for (int64_t e = 0; e < E; e++)
          dot += ie[k * E + e] * te[j * E + e];
        if (isfinite(dot) && (best < 0 || dot > bs))
          best = j, bs = dot;
      }
      hits += best == d->label[idx[k]];
      n++;
    }
  }
  if (st == AMPC_OK && n == 0)
    st = ampc_fail(AMPC_ERR_INVALID_ARG, "zero-shot: split %d is empty", split);
  if (st == AMPC_OK)
    *acc = (double)hits / (double)n;
  free(te), free(ie), free(tbuf), free(ibuf), free(idx);
  return st;
}
