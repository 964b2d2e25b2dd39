/*
 * src/model/fp8_sites.c: a model's FP8 linear layers and their delayed-
 * scaling state (include/ampc/model.h, "FP8 sites").
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/model.h"

void ampc_fp8_sites_free(ampc_fp8_sites *S) {
  if (!S)
    return;
  free(S->lin);
  free(S->meta);
  free(S->history);
  free(S->branch);
  free(S->name);
  if (S->ws.bytes && S->ws.base && S->own_ws)
    free(S->ws.base);
  memset(S, 0, sizeof *S);
}

ampc_status ampc_fp8_sites_init(ampc_fp8_sites *S, int n, const ampc_amp_config *amp,
                                size_t ws_bytes) {
  if (!S || !amp || n < 1 || n > (1 << 16))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fp8_sites_init: bad arguments (%d sites)", n);
  memset(S, 0, sizeof *S);
  const ampc_status st = ampc_amp_config_check(amp);
  if (st != AMPC_OK)
    return st;
  const int len = amp->fp8_amax_history;
  S->n = n;
  S->len = len;
  S->algo = amp->fp8_amax_algo;
  S->margin = amp->fp8_margin;
  S->lin = calloc((size_t)n, sizeof *S->lin);
  S->meta = calloc((size_t)n * 3, sizeof *S->meta);
  S->history = calloc((size_t)n * 3 * (size_t)len, sizeof *S->history);
  S->branch = calloc((size_t)n, sizeof *S->branch);
  S->name = calloc((size_t)n, sizeof *S->name);
  if (ws_bytes) {
    S->ws.base = malloc(ws_bytes);
    S->ws.bytes = ws_bytes;
    S->own_ws = true;
  }
  if (!S->lin || !S->meta || !S->history || !S->branch || !S->name || (ws_bytes && !S->ws.base)) {
    ampc_fp8_sites_free(S);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_fp8_sites_init: out of memory (%d sites, history %d)", n,
                     len);
  }
  for (int i = 0; i < n; i++) {
    ampc_linear_fp8_init(&S->lin[i], &S->ws);
    for (int t = 0; t < 3; t++) {
      ampc_fp8_meta *m = &S->meta[3 * i + t];
      m->len = len;
      m->history = S->history + (size_t)(3 * i + t) * (size_t)len;
      m->scale = m->scale_inv = 1.0f;
    }
    snprintf(S->name[i], AMPC_FP8_SITE_NAME, "site%d", i);
  }
  return AMPC_OK;
}

size_t ampc_fp8_sites_state_bytes(int n, int len) {
  if (n < 1 || len < 1)
    return 0;
  const size_t N = (size_t)n;
  return N * sizeof(ampc_linear_fp8) + 3 * N * sizeof(ampc_fp8_meta) +
         3 * N * (size_t)len * sizeof(float) + N * sizeof(ampc_branch) + N * AMPC_FP8_SITE_NAME;
}

void ampc_fp8_sites_name(ampc_fp8_sites *S, int i, ampc_branch br, const char *name) {
  if (!S || i < 0 || i >= S->n)
    return;
  S->branch[i] = br;
  snprintf(S->name[i], AMPC_FP8_SITE_NAME, "%s", name);
}

ampc_status ampc_fp8_sites_update(ampc_fp8_sites *S) {
  if (!S || !S->n)
    return AMPC_OK;
  for (int i = 0; i < S->n; i++) {
    ampc_fp8_q *q[3] = {&S->lin[i].x, &S->lin[i].w, &S->lin[i].dy};
    for (int t = 0; t < 3; t++) {
      ampc_fp8_meta *m = &S->meta[3 * i + t];
      ampc_fp8_record_amax(m, q[t]->amax);
      const ampc_status st = ampc_fp8_update(m, q[t]->fmt, S->margin, S->algo, NULL);
      if (st != AMPC_OK)
        return st;
      q[t]->scale = m->scale;
      q[t]->scale_inv = m->scale_inv;
      q[t]->amax = 0.0f;
    }
  }
  S->updates++;
  return AMPC_OK;
}

void ampc_fp8_sites_take_counts(ampc_fp8_sites *S, uint64_t *values, uint64_t *saturated,
                                uint64_t *flushed) {
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    values[b] = saturated[b] = flushed[b] = 0;
  for (int i = 0; S && i < S->n; i++) {
    ampc_fp8_q *q[3] = {&S->lin[i].x, &S->lin[i].w, &S->lin[i].dy};
    const int b = (unsigned)S->branch[i] < AMPC_BRANCH_COUNT ? (int)S->branch[i] : 0;
    for (int t = 0; t < 3; t++) {
      values[b] += q[t]->values;
      saturated[b] += q[t]->saturated;
      flushed[b] += q[t]->flushed;
      q[t]->values = q[t]->saturated = q[t]->flushed = 0;
    }
  }
}
