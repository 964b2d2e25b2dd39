/*
 * src/backend/registry.c: the devices by name, and which backends this
 * library was built with (ampc/backend.h, src/backend/backend.h). The only
 * file that knows what the build contains: a backend not built has its
 * facts here (its name, planning facts, environment switches) but no table,
 * so that running on it fails with AMPC_ERR_UNSUPPORTED "not built" while a
 * plan for it still works.
 *
 * Adding a backend: its folder under src/backend/ (a table and a desc), a
 * row below, its enum value in ampc/backend.h, its sources in CMakeLists.txt.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/backend.h"
#include "backend/backend.h"

extern const ampc_device_desc ampc_cuda_desc; /* src/backend/cuda/cuda_desc.c */
#ifdef AMPC_HAVE_CUDA
extern const ampc_backend ampc_backend_cuda_table; /* src/backend/cuda/cuda_backend.c */
#define CUDA_TABLE (&ampc_backend_cuda_table)
#else
#define CUDA_TABLE NULL
#endif

/* every known device: its facts, its table (NULL: not built), and the CMake
 * option that builds it */
typedef struct entry {
  ampc_device dev;
  const ampc_device_desc *desc;
  const ampc_backend *table;
  const char *option;
} entry;

static const entry k_devices[] = {
    {AMPC_DEVICE_CPU, NULL, &ampc_backend_cpu_table, ""},
    {AMPC_DEVICE_CUDA, &ampc_cuda_desc, CUDA_TABLE, "AMPC_CUDA"},
    {AMPC_DEVICE_CPU_SPLIT, NULL, &ampc_backend_cpu_split_table, ""},
};
enum { NDEV = sizeof k_devices / sizeof k_devices[0] };

static const entry *find(ampc_device dev) {
  for (int i = 0; i < NDEV; i++)
    if (k_devices[i].dev == dev)
      return &k_devices[i];
  return NULL;
}
static const ampc_device_desc *desc_of(const entry *e) {
  return e->table ? e->table->desc : e->desc;
}

const ampc_device_desc *ampc_device_desc_get(ampc_device dev) {
  const entry *e = find(dev);
  return e ? desc_of(e) : NULL;
}

const char *ampc_device_name(ampc_device dev) {
  const ampc_device_desc *d = ampc_device_desc_get(dev);
  return d ? d->name : "?";
}

const char *ampc_device_list(char *buf, size_t cap, const char *sep, bool with_tests) {
  if (!buf || cap == 0)
    return buf;
  buf[0] = '\0';
  size_t at = 0;
  for (int i = 0; i < NDEV && at < cap; i++) {
    const ampc_device_desc *d = desc_of(&k_devices[i]);
    if (d->test_only && !with_tests)
      continue;
    const int n = snprintf(buf + at, cap - at, "%s%s", at ? sep : "", d->name);
    at += n > 0 ? (size_t)n : 0;
  }
  return buf;
}

ampc_status ampc_device_parse(const char *name, ampc_device *out) {
  for (int i = 0; name && out && i < NDEV; i++)
    if (strcmp(name, desc_of(&k_devices[i])->name) == 0) {
      *out = k_devices[i].dev;
      return AMPC_OK;
    }
  char list[128];
  return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown device '%s' (known: %s)", name ? name : "(null)",
                   ampc_device_list(list, sizeof list, ", ", true));
}

bool ampc_device_supports(ampc_device dev, const ampc_op_query *op) {
  const ampc_device_desc *d = ampc_device_desc_get(dev);
  return d && op && (!d->supports || d->supports(op));
}

int ampc_device_built(ampc_device dev) {
  const entry *e = find(dev);
  return e && e->table ? 1 : 0;
}

const ampc_backend *ampc_device_backend(ampc_device dev) {
  const entry *e = find(dev);
  return e ? e->table : NULL;
}

/* the reason a known backend is not built */
static const char *not_built(const entry *e) {
  static _Thread_local char why[128];
  snprintf(why, sizeof why, "not built into this ampc (configure with -D%s=ON)", e->option);
  return why;
}

ampc_status ampc_device_backend_get(ampc_device dev, const ampc_backend **out) {
  const entry *e = find(dev);
  *out = NULL;
  if (!e)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown device %d", (int)dev);
  if (!e->table)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "--device %s: the %s backend is %s", desc_of(e)->name,
                     desc_of(e)->label, not_built(e));
  *out = e->table;
  return AMPC_OK;
}

int ampc_device_count(ampc_device dev) {
  const entry *e = find(dev);
  if (!e || !e->table)
    return 0;
  return e->table->device_count ? e->table->device_count() : 1;
}

const char *ampc_device_unavailable_reason(ampc_device dev) {
  const entry *e = find(dev);
  if (!e)
    return "unknown device";
  if (!e->table)
    return not_built(e);
  return e->table->unavailable_reason ? e->table->unavailable_reason() : "";
}

ampc_status ampc_device_check(ampc_device dev) {
  const entry *e = find(dev);
  if (!e)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown device %d", (int)dev);
  if (ampc_device_count(dev) > 0)
    return AMPC_OK;
  return ampc_fail(AMPC_ERR_UNSUPPORTED, "--device %s: no %s device: %s", desc_of(e)->name,
                   desc_of(e)->label, ampc_device_unavailable_reason(dev));
}

/* ---- contexts ------------------------------------------------------------------ */

struct ampc_device_ctx {
  const ampc_backend *be;
  void *impl; /* the backend's */
};

ampc_status ampc_device_open(ampc_device dev, int rank, ampc_device_ctx **out) {
  if (!out || rank < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_device_open: bad arguments");
  *out = NULL;
  AMPC_TRY(ampc_device_check(dev));
  const ampc_backend *be = ampc_device_backend(dev);
  if (!be->open) /* the CPU devices: nothing to open */
    return AMPC_OK;
  ampc_device_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_device_open: out of memory");
  c->be = be;
  const ampc_status st = be->open(rank % ampc_device_count(dev), &c->impl);
  if (st != AMPC_OK) {
    free(c);
    return st;
  }
  *out = c;
  return AMPC_OK;
}

void ampc_device_close(ampc_device_ctx *ctx) {
  if (!ctx)
    return;
  ctx->be->close(ctx->impl);
  free(ctx);
}

ampc_status ampc_device_mem_info(ampc_device_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
  if (!ctx || !free_bytes || !total_bytes)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_device_mem_info: NULL argument");
  if (!ctx->be->mem_info)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "ampc_device_mem_info: not on %s", ctx->be->name);
  return ctx->be->mem_info(ctx->impl, free_bytes, total_bytes);
}

/* ---- settings and the GEMM benchmark --------------------------------------------- */

int ampc_device_setting_count(ampc_device dev) {
  const ampc_backend *be = ampc_device_backend(dev);
  return be ? be->n_settings : 0;
}

ampc_status ampc_device_setting(ampc_device dev, int i, const char **name, bool *value,
                                bool *logged) {
  const ampc_backend *be = ampc_device_backend(dev);
  if (!be || i < 0 || i >= be->n_settings)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_device_setting: no setting %d on %s", i,
                     ampc_device_name(dev));
  const ampc_backend_setting *s = &be->settings[i];
  if (name)
    *name = s->name;
  if (value)
    *value = s->get ? s->get() : false;
  if (logged)
    *logged = s->logged;
  return AMPC_OK;
}

ampc_status ampc_device_set(ampc_device dev, const char *name, bool on) {
  const ampc_backend *be;
  AMPC_TRY(ampc_device_backend_get(dev, &be));
  for (int i = 0; name && i < be->n_settings; i++)
    if (strcmp(be->settings[i].name, name) == 0) {
      be->settings[i].set(on);
      return AMPC_OK;
    }
  return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_device_set: %s has no setting '%s'",
                   ampc_device_name(dev), name ? name : "(null)");
}

ampc_status ampc_device_bench_gemm(ampc_device dev, int reps, bool quick, bool json,
                                   ampc_emit_fn emit, void *user) {
  const ampc_backend *be;
  AMPC_TRY(ampc_device_backend_get(dev, &be));
  if (!be->bench_gemm)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s has no device GEMM benchmark", be->name);
  if (!emit || reps < 1 || reps > 101)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_device_bench_gemm: bad arguments");
  AMPC_TRY(ampc_device_check(dev));
  return be->bench_gemm(reps, quick, json, emit, user);
}
