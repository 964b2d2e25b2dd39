/*
 * src/report/memory.c: the memory account of include/ampc/report.h: bytes
 * per role predicted from the allocation code itself (parameter table padding,
 * the model's arena layout), the batch planner, byte-count parsing and the
 * process's peak RSS. Nothing here allocates the memory it predicts.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ampc/backend.h"
#include "ampc/report.h"

const char *ampc_mem_role_name(ampc_mem_role r) {
  static const char *const names[AMPC_MEM_ROLE_COUNT] = {
      [AMPC_MEM_WEIGHTS] = "weights",
      [AMPC_MEM_MASTER] = "master",
      [AMPC_MEM_GRADS] = "grads",
      [AMPC_MEM_MOMENTS] = "moments",
      [AMPC_MEM_COMPENSATION] = "compensation",
      [AMPC_MEM_ACTIVATIONS] = "activations",
      [AMPC_MEM_WORKSPACE] = "workspace",
      [AMPC_MEM_FP8_STATE] = "fp8_state",
      [AMPC_MEM_DEVICE_SCRATCH] = "device_scratch",
      [AMPC_MEM_GRAD_STAGE] = "grad_stage",
  };
  return (unsigned)r < AMPC_MEM_ROLE_COUNT ? names[r] : "?";
}

ampc_status ampc_mem_optimizer_moments(const char *name, int *moments) {
  if (!name || !moments)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "optimizer: NULL argument");
  if (!strcmp(name, "adamw") || !strcmp(name, "adam"))
    *moments = 2;
  else if (!strcmp(name, "sgd"))
    *moments = 1;
  else if (!strcmp(name, "none"))
    *moments = 0;
  else
    return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown optimizer '%s' (adamw, sgd, none)", name);
  return AMPC_OK;
}

/* the parameter roles for `elements` elements per role */
static void param_roles(int64_t elements, const ampc_amp_config *amp, int moments,
                        ampc_mem_account *a) {
  const size_t e = (size_t)elements, wsz = ampc_dtype_size(amp->lowp);
  const bool master = amp->master_weights && amp->lowp != AMPC_F32; /* as ampc_params_create */
  a->elements = elements;
  a->ranks = 1, a->zero = 0, a->rank = 0; /* one process holds everything */
  a->shard_lo = 0, a->shard_n = elements;
  a->bytes[AMPC_MEM_WEIGHTS] = e * wsz;
  a->bytes[AMPC_MEM_MASTER] = master ? e * 4 : 0;
  a->bytes[AMPC_MEM_GRADS] = e * wsz;
  a->bytes[AMPC_MEM_MOMENTS] = (size_t)moments * e * ampc_dtype_size(amp->state_dtype);
  /* as ampc_params_add_compensation: Kahan updates of 16-bit weights, no master */
  a->bytes[AMPC_MEM_COMPENSATION] =
      amp->weight_update == AMPC_UPDATE_KAHAN && !master && amp->lowp != AMPC_F32 ? e * wsz : 0;
}

static void finish(ampc_mem_account *a) {
  size_t p = 0, t = 0;
  for (int r = 0; r < AMPC_MEM_ROLE_COUNT; r++) {
    t += a->bytes[r];
    if (r < AMPC_MEM_ACTIVATIONS || r == AMPC_MEM_GRAD_STAGE) /* per parameter */
      p += a->bytes[r];
  }
  a->total = t;
  a->bytes_per_param = a->params > 0 ? (double)p / (double)a->params : 0.0;
}

static ampc_status check_amp(const ampc_amp_config *amp, int moments, const void *out) {
  if (!amp || !out || moments < 0 || moments > 2 ||
      (amp->lowp != AMPC_F32 && amp->lowp != AMPC_F16 && amp->lowp != AMPC_BF16) ||
      (amp->state_dtype != AMPC_F32 && amp->state_dtype != AMPC_F16 &&
       amp->state_dtype != AMPC_BF16))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "memory account: bad precision or optimizer");
  return AMPC_OK;
}

ampc_status ampc_mem_account_shard(ampc_mem_account *a, int ranks, int zero, int rank) {
  if (!a || ranks < 1 || (zero != 0 && zero != 1) || rank < 0 || rank >= ranks)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "memory account: bad sharding (ranks %d, zero %d, rank %d; ranks >= 1, "
                     "zero 0 or 1, 0 <= rank < ranks)",
                     ranks, zero, rank);
  if (a->elements < 1 || a->ranks != 1 || a->zero != 0 || a->shard_lo != 0 ||
      a->shard_n != a->elements)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "memory account: not a whole account (sharded already, or empty)");
  a->ranks = ranks, a->zero = zero, a->rank = rank;
  /* the FP32 staging of the ranks' sum (--allreduce f32, the default) */
  a->bytes[AMPC_MEM_GRAD_STAGE] = ranks > 1 ? (size_t)a->elements * sizeof(float) : 0;
  if (zero == 0) { /* plain data parallelism: every rank holds the whole table */
    finish(a);
    return AMPC_OK;
  }
  int64_t lo = 0, n = 0;
  ampc_shard_range(a->elements, ranks, rank, &lo, &n);
  /* the roles ampc_params_shard partitions, at their element sizes (the
   * moments role is both buffers: moments x the state dtype's size) */
  static const ampc_mem_role sharded[3] = {AMPC_MEM_MASTER, AMPC_MEM_MOMENTS,
                                           AMPC_MEM_COMPENSATION};
  for (int k = 0; k < 3; k++) {
    const size_t per_element = a->bytes[sharded[k]] / (size_t)a->elements;
    a->bytes[sharded[k]] = (size_t)n * per_element;
  }
  /* the staging holds only the shard's sum (one micro-batch: the ranks' sum
   * is scattered straight from the working dtype, ampc_accum_stage_bytes) */
  a->bytes[AMPC_MEM_GRAD_STAGE] = ranks > 1 ? (size_t)n * sizeof(float) : 0;
  a->shard_lo = lo, a->shard_n = n;
  finish(a);
  return AMPC_OK;
}

ampc_status ampc_mem_account_params(int64_t n, const ampc_amp_config *amp, int moments,
                                    ampc_mem_account *out) {
  ampc_status st = check_amp(amp, moments, out);
  if (st != AMPC_OK)
    return st;
  if (n < 1 || n > ((int64_t)1 << 50))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "memory account: %lld parameters", (long long)n);
  memset(out, 0, sizeof *out);
  out->params = n;
  param_roles(n, amp, moments, out);
  finish(out);
  return AMPC_OK;
}

ampc_status ampc_mem_account_specs(const ampc_param_spec *specs, int n, const ampc_amp_config *amp,
                                   int moments, ampc_mem_account *out) {
  ampc_status st = check_amp(amp, moments, out);
  if (st != AMPC_OK)
    return st;
  if (!specs || n < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "memory account: no parameter specs");
  /* the offsets of ampc_params_create (src/core/params.c): every tensor
   * padded to 16 elements, so each slice starts on a 64-byte boundary */
  const int64_t align = 16;
  int64_t elements = 0, numel_sum = 0;
  for (int i = 0; i < n; i++) {
    const ampc_param_spec *s = &specs[i];
    if (s->ndim < 1 || s->ndim > AMPC_PARAM_MAX_DIMS)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "memory account: parameter %d has rank %d", i,
                       s->ndim);
    int64_t numel = 1;
    for (int d = 0; d < s->ndim; d++) {
      if (s->shape[d] <= 0 || s->shape[d] > ((int64_t)1 << 40) / numel)
        return ampc_fail(AMPC_ERR_INVALID_ARG, "memory account: parameter %d: bad size %lld", i,
                         (long long)s->shape[d]);
      numel *= s->shape[d];
    }
    elements += (numel + align - 1) / align * align;
    numel_sum += numel;
  }
  memset(out, 0, sizeof *out);
  out->params = numel_sum;
  param_roles(elements, amp, moments, out);
  finish(out);
  return AMPC_OK;
}

size_t ampc_mem_device_scratch_bytes(const ampc_mmodel_config *c, int64_t batch) {
  if (!c || batch < 1 || c->patch < 1)
    return 0;
  const int64_t nv = (c->img / c->patch) * (c->img / c->patch) + 1;
  const int64_t fb = c->image_only ? 0 : c->w_mlm > 0.0f ? 3 : 2; /* fusion pairs per sample */
  int64_t rows = batch * nv;
  if (batch * fb * c->seq_len > rows)
    rows = batch * fb * c->seq_len;
  if (batch * fb * nv > rows) /* the cross-attention's keys */
    rows = batch * fb * nv;
  const int64_t width = c->mlp > c->dim ? c->mlp : c->dim;
  return ((size_t)32 << 20) + (size_t)(4 * rows * width) * sizeof(float);
}

ampc_status ampc_mem_account_mm(const ampc_mmodel_config *c, int64_t batch,
                                const ampc_amp_config *amp, int moments, ampc_mem_account *out) {
  return ampc_mem_account_mm_on(c, batch, amp, moments, AMPC_DEVICE_CPU, out);
}

ampc_status ampc_mem_account_mm_on(const ampc_mmodel_config *c, int64_t batch,
                                   const ampc_amp_config *amp, int moments, ampc_device dev,
                                   ampc_mem_account *out) {
  ampc_status st = check_amp(amp, moments, out);
  if (st != AMPC_OK)
    return st;
  size_t act = 0, ws = 0;
  if ((st = ampc_mmodel_plan_bytes_on(c, batch, amp->precision, dev, &act, &ws)) != AMPC_OK)
    return st;
  ampc_mmodel_specs sp;
  if ((st = ampc_mmodel_specs_make(c, &sp)) != AMPC_OK)
    return st;
  st = ampc_mem_account_specs(sp.specs, sp.n, amp, moments, out);
  ampc_mmodel_specs_free(&sp);
  if (st != AMPC_OK)
    return st;
  out->batch = batch;
  out->bytes[AMPC_MEM_ACTIVATIONS] = act;
  out->bytes[AMPC_MEM_WORKSPACE] = ws;
  if (ampc_precision_is_fp8(amp->precision))
    out->bytes[AMPC_MEM_FP8_STATE] =
        ampc_fp8_sites_state_bytes(ampc_mmodel_fp8_site_count(c), amp->fp8_amax_history);
  const ampc_device_desc *dd = ampc_device_desc_get(dev);
  if (dd && dd->scratch_in_context) { /* the allowance, and --attention-cast's 16-bit P: its slot */
    const size_t cast = ampc_mmodel_attn_cast_bytes(c, batch, amp->precision);
    out->bytes[AMPC_MEM_DEVICE_SCRATCH] =
        ampc_mem_device_scratch_bytes(c, batch) +
        (dd->scratch_slot_bytes ? dd->scratch_slot_bytes(cast) : cast);
  }
  finish(out);
  return AMPC_OK;
}

ampc_status ampc_mem_account_mlp(const ampc_mlp_config *c, int64_t batch,
                                 const ampc_amp_config *amp, int moments, ampc_mem_account *out) {
  ampc_status st = check_amp(amp, moments, out);
  if (st != AMPC_OK)
    return st;
  ampc_param_spec specs[AMPC_MLP_NPARAMS];
  size_t act = 0, ws = 0;
  if ((st = ampc_mlp_specs(c, specs)) != AMPC_OK ||
      (st = ampc_mlp_plan_bytes(c, batch, amp->precision, &act, &ws)) != AMPC_OK ||
      (st = ampc_mem_account_specs(specs, AMPC_MLP_NPARAMS, amp, moments, out)) != AMPC_OK)
    return st;
  out->batch = batch;
  out->bytes[AMPC_MEM_ACTIVATIONS] = act;
  out->bytes[AMPC_MEM_WORKSPACE] = ws;
  if (ampc_precision_is_fp8(amp->precision)) /* fc1 and fc2 */
    out->bytes[AMPC_MEM_FP8_STATE] = ampc_fp8_sites_state_bytes(2, amp->fp8_amax_history);
  finish(out);
  return AMPC_OK;
}

ampc_status ampc_mem_plan_mm(const ampc_mmodel_config *c, const ampc_amp_config *amp, int moments,
                             size_t budget, size_t overhead, int64_t max_batch, int64_t *batch,
                             ampc_mem_account *at) {
  return ampc_mem_plan_mm_on(c, amp, moments, AMPC_DEVICE_CPU, budget, overhead, max_batch, batch,
                             at);
}

ampc_status ampc_mem_plan_mm_on(const ampc_mmodel_config *c, const ampc_amp_config *amp,
                                int moments, ampc_device dev, size_t budget, size_t overhead,
                                int64_t max_batch, int64_t *batch, ampc_mem_account *at) {
  if (!batch || max_batch < 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "memory plan: max batch %lld < 2", (long long)max_batch);
  if (max_batch > (1 << 20))
    max_batch = 1 << 20;
  ampc_mem_account a;
  ampc_status st = ampc_mem_account_mm_on(c, 2, amp, moments, dev, &a);
  if (st != AMPC_OK)
    return st;
  *batch = 0;
  if (a.total > budget || overhead > budget - a.total) {
    if (at)
      *at = a;
    return AMPC_OK;
  }
  /* invariant: lo fits, hi does not (or hi = max_batch + 1) */
  int64_t lo = 2, hi = max_batch + 1;
  ampc_mem_account best = a;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if ((st = ampc_mem_account_mm_on(c, mid, amp, moments, dev, &a)) != AMPC_OK)
      return st;
    if (a.total <= budget && overhead <= budget - a.total)
      lo = mid, best = a;
    else
      hi = mid;
  }
  *batch = lo;
  if (at)
    *at = best;
  return AMPC_OK;
}

/* ASCII case-insensitive equality */
static int same_ci(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return 0;
  return *a == *b;
}

ampc_status ampc_parse_bytes(const char *text, uint64_t *out) {
  if (!text || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "byte count: NULL argument");
  const char *p = text;
  while (isspace((unsigned char)*p))
    p++;
  if (!isdigit((unsigned char)*p) && *p != '.')
    return ampc_fail(AMPC_ERR_INVALID_ARG, "bad byte count '%s' (e.g. 8G, 512M, 1.5GiB)", text);
  char *end = NULL;
  errno = 0;
  const double v = strtod(p, &end);
  if (end == p || errno == ERANGE || !isfinite(v) || v < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "bad byte count '%s' (e.g. 8G, 512M, 1.5GiB)", text);
  while (isspace((unsigned char)*end))
    end++;
  static const struct {
    const char *suffix;
    double mult;
  } units[] = {
      {"", 1.0},
      {"b", 1.0},
      {"bytes", 1.0},
      {"k", 1e3},
      {"kb", 1e3},
      {"m", 1e6},
      {"mb", 1e6},
      {"g", 1e9},
      {"gb", 1e9},
      {"t", 1e12},
      {"tb", 1e12},
      {"ki", 1024.0},
      {"kib", 1024.0},
      {"mi", 1048576.0},
      {"mib", 1048576.0},
      {"gi", 1073741824.0},
      {"gib", 1073741824.0},
      {"ti", 1099511627776.0},
      {"tib", 1099511627776.0},
  };
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (same_ci(end, units[i].suffix)) {
      const double bytes = floor(v * units[i].mult);
      if (bytes > 4611686018427387904.0) /* 2^62 */
        return ampc_fail(AMPC_ERR_INVALID_ARG, "byte count '%s' is too large", text);
      *out = (uint64_t)bytes;
      return AMPC_OK;
    }
  }
  return ampc_fail(AMPC_ERR_INVALID_ARG,
                   "bad byte count '%s': unknown unit '%s' (K, M, G, T, KiB, MiB, GiB, TiB)", text,
                   end);
}

int64_t ampc_peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return -1;
  return (int64_t)ru.ru_maxrss * 1024;
}
