/*
 * src/core/params.c: the parameter table: names, shapes, branches, and one
 * allocation per role (working weights, FP32 master, gradients, moments).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "ampc/params.h"
#include "numeric/numeric.h"

enum { ALIGN_BYTES = 64 };

const char *ampc_branch_name(ampc_branch b) {
  static const char *const names[AMPC_BRANCH_COUNT] = {
      [AMPC_BRANCH_VISION] = "vision",
      [AMPC_BRANCH_TEXT] = "text",
      [AMPC_BRANCH_FUSION] = "fusion",
      [AMPC_BRANCH_HEADS] = "heads",
  };
  return (unsigned)b < AMPC_BRANCH_COUNT ? names[b] : "?";
}

static void *alloc_role(size_t bytes) {
  if (bytes == 0)
    return NULL;
  void *p = aligned_alloc(ALIGN_BYTES, (bytes + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES);
  if (p)
    memset(p, 0, bytes);
  return p;
}

void ampc_params_free(ampc_params *P) {
  if (!P)
    return;
  free(P->p);
  free(P->w);
  free(P->master);
  free(P->grad);
  free(P->m);
  free(P->v);
  free(P->comp);
  memset(P, 0, sizeof *P);
}

ampc_status ampc_params_add_compensation(ampc_params *P) {
  if (!P || !P->w || P->wdt == AMPC_F32 || P->master)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "Kahan compensation needs 16-bit weights without an FP32 master");
  if (P->comp)
    return AMPC_OK;
  const size_t bytes = (size_t)P->total * ampc_dtype_size(P->wdt);
  P->comp = alloc_role(bytes);
  if (!P->comp)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory for the Kahan compensation (%zu bytes)", bytes);
  P->bytes[AMPC_ROLE_COMPENSATION] = bytes;
  return AMPC_OK;
}

ampc_status ampc_params_shard(ampc_params *P, int64_t lo, int64_t n) {
  if (!P || lo < 0 || n < 0 || lo + n > P->total || P->shard_lo != 0 || P->shard_n != P->total)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_params_shard: bad range [%lld, %lld) of %lld",
                     (long long)lo, (long long)(lo + n), P ? (long long)P->total : 0ll);
  static const int roles[4] = {AMPC_ROLE_MASTER, AMPC_ROLE_MOMENT1, AMPC_ROLE_MOMENT2,
                               AMPC_ROLE_COMPENSATION};
  void **bufs[4] = {(void **)&P->master, &P->m, &P->v, &P->comp};
  /* one role at a time (its shard copied, the whole buffer freed), so the
   * transient is one role's shard above the whole state */
  for (int k = 0; k < 4; k++) {
    if (!*bufs[k])
      continue;
    const size_t es = P->bytes[roles[k]] / (size_t)P->total, nb = (size_t)n * es;
    /* an empty shard keeps a one-element buffer: the role stays present */
    void *fresh = alloc_role(nb ? nb : es);
    if (!fresh)
      return ampc_fail(AMPC_ERR_NOMEM,
                       "ampc_params_shard: out of memory (%zu bytes; the table is partly cut: "
                       "free it)",
                       nb);
    memcpy(fresh, (char *)*bufs[k] + (size_t)lo * es, nb);
    free(*bufs[k]);
    *bufs[k] = fresh;
    P->bytes[roles[k]] = nb;
  }
  P->shard_lo = lo, P->shard_n = n;
  return AMPC_OK;
}

static int dt_ok(ampc_dtype dt) { return dt == AMPC_F32 || dt == AMPC_F16 || dt == AMPC_BF16; }

ampc_status ampc_params_create(ampc_params *out, const ampc_param_spec *specs, int n,
                               ampc_dtype wdt, bool master, ampc_dtype sdt, int moments,
                               ampc_rng *rng) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_params_create: out is NULL");
  memset(out, 0, sizeof *out);
  if (!specs || n <= 0 || !rng || !dt_ok(wdt) || !dt_ok(sdt) || moments < 0 || moments > 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_params_create: bad arguments");
  if (master && wdt == AMPC_F32)
    master = false; /* FP32 weights are their own master */
  ampc_params P = {.count = n, .wdt = wdt, .sdt = sdt};
  P.p = calloc((size_t)n, sizeof *P.p);
  if (!P.p)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_params_create: out of memory");
  /* every slice starts on a 64-byte boundary in every role: align offsets to
   * 16 elements (64 bytes of F32, 32 of 16-bit; 16-bit roles are then 32-byte
   * aligned, enough for AVX2) */
  const int64_t align = 16;
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    const ampc_param_spec *s = &specs[i];
    ampc_param *p = &P.p[i];
    if (!s->name || !s->name[0] || strlen(s->name) >= AMPC_PARAM_NAME_MAX) {
      free(P.p);
      return ampc_fail(AMPC_ERR_INVALID_ARG, "parameter %d: empty or too long name", i);
    }
    for (int j = 0; j < i; j++) {
      if (strcmp(P.p[j].name, s->name) == 0) {
        free(P.p);
        return ampc_fail(AMPC_ERR_INVALID_ARG, "parameter '%s' declared twice", s->name);
      }
    }
    if (s->ndim < 1 || s->ndim > AMPC_PARAM_MAX_DIMS || (unsigned)s->branch >= AMPC_BRANCH_COUNT) {
      free(P.p);
      return ampc_fail(AMPC_ERR_INVALID_ARG, "parameter '%s': bad rank %d or branch", s->name,
                       s->ndim);
    }
    int64_t numel = 1;
    for (int d = 0; d < s->ndim; d++) {
      if (s->shape[d] <= 0 || s->shape[d] > ((int64_t)1 << 40) / numel) {
        free(P.p);
        return ampc_fail(AMPC_ERR_INVALID_ARG, "parameter '%s': bad size %lld in dim %d", s->name,
                         (long long)s->shape[d], d);
      }
      numel *= s->shape[d];
    }
    strcpy(p->name, s->name);
    p->ndim = s->ndim;
    memcpy(p->shape, s->shape, sizeof p->shape);
    p->numel = numel;
    p->offset = off;
    p->branch = s->branch;
    p->decay = !s->no_decay;
    off += (numel + align - 1) / align * align;
    P.numel += numel;
  }
  P.total = off;
  P.shard_lo = 0, P.shard_n = off;
  const size_t wsz = ampc_dtype_size(wdt), ssz = ampc_dtype_size(sdt);
  P.bytes[AMPC_ROLE_WEIGHTS] = (size_t)off * wsz;
  P.bytes[AMPC_ROLE_MASTER] = master ? (size_t)off * 4 : 0;
  P.bytes[AMPC_ROLE_GRADS] = (size_t)off * wsz;
  P.bytes[AMPC_ROLE_MOMENT1] = moments >= 1 ? (size_t)off * ssz : 0;
  P.bytes[AMPC_ROLE_MOMENT2] = moments >= 2 ? (size_t)off * ssz : 0;
  P.w = alloc_role(P.bytes[AMPC_ROLE_WEIGHTS]);
  P.master = alloc_role(P.bytes[AMPC_ROLE_MASTER]);
  P.grad = alloc_role(P.bytes[AMPC_ROLE_GRADS]);
  P.m = alloc_role(P.bytes[AMPC_ROLE_MOMENT1]);
  P.v = alloc_role(P.bytes[AMPC_ROLE_MOMENT2]);
  if (!P.w || !P.grad || (master && !P.master) || (moments >= 1 && !P.m) ||
      (moments >= 2 && !P.v)) {
    ampc_params_free(&P);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_params_create: out of memory for %lld parameters",
                     (long long)off);
  }
  for (int i = 0; i < n; i++) {
    const ampc_param_spec *s = &specs[i];
    const ampc_param *p = &P.p[i];
    for (int64_t e = 0; e < p->numel; e++) {
      float x = 0.0f;
      switch (s->init) {
      case AMPC_INIT_ZEROS: x = 0.0f; break;
      case AMPC_INIT_ONES: x = 1.0f; break;
      case AMPC_INIT_CONST: x = s->init_arg; break;
      case AMPC_INIT_UNIFORM:
        x = (float)((2.0 * ampc_rng_uniform(rng) - 1.0) * (double)s->init_arg);
        break;
      case AMPC_INIT_NORMAL: x = (float)(ampc_rng_normal(rng) * (double)s->init_arg); break;
      }
      if (P.master)
        P.master[p->offset + e] = x;
      ampc_elem_store(P.w, wdt, p->offset + e, x);
    }
  }
  *out = P;
  return AMPC_OK;
}

int ampc_params_find(const ampc_params *P, const char *name) {
  for (int i = 0; P && name && i < P->count; i++)
    if (strcmp(P->p[i].name, name) == 0)
      return i;
  return -1;
}

void *ampc_param_w(const ampc_params *P, int i) {
  return (char *)P->w + P->p[i].offset * (int64_t)ampc_dtype_size(P->wdt);
}
void *ampc_param_grad(const ampc_params *P, int i) {
  return (char *)P->grad + P->p[i].offset * (int64_t)ampc_dtype_size(P->wdt);
}
float *ampc_param_master(const ampc_params *P, int i) {
  return P->master && P->shard_n == P->total ? P->master + P->p[i].offset : NULL;
}

void ampc_shard_range(int64_t total, int size, int rank, int64_t *lo, int64_t *n) {
  if (size < 1 || rank < 0 || rank >= size || total < 0) {
    *lo = 0, *n = total > 0 ? total : 0;
    return;
  }
  const int64_t A = AMPC_SHARD_ALIGN, per = A * size;
  const int64_t S = (total + per - 1) / per * A;
  const int64_t a = S * rank < total ? S * rank : total;
  *lo = a;
  *n = total - a < S ? total - a : S;
}

void ampc_params_zero_grad(ampc_params *P) {
  if (P->grad)
    memset(P->grad, 0, P->bytes[AMPC_ROLE_GRADS]);
}

void ampc_params_sync_working(ampc_params *P) {
  if (P->master)
    ampc_store_f32((char *)P->w + (size_t)P->shard_lo * ampc_dtype_size(P->wdt), P->wdt, P->master,
                   (size_t)P->shard_n, NULL);
}
