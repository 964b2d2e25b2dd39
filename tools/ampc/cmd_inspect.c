/*
 * tools/ampc/cmd_inspect.c: `ampc inspect FILE.safetensors`: what storing
 * each tensor of any framework's safetensors file in binary16, bfloat16 or FP8
 * would do at a scale (flushed, subnormal, overflow, rounding error), the
 * range of power-of-two scales that is safe for every tensor (the loss scale
 * to start from) and the tensors that limit it, grouped into branches by
 * name (issue 20; the counting is ampc/diag.h's "inspect").
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "ampc/plot.h"

static const char k_usage[] =
    "Usage: ampc inspect FILE.safetensors [--format FMT] [--scale S|auto] [options]\n"
    "\n"
    "For every floating-point tensor of a safetensors file (F64, F32, F16, BF16,\n"
    "F8_E4M3, F8_E5M2; written by ampc, PyTorch, tools/python/ampc_dump.py, ...),\n"
    "count exactly what rounding x*S once into the format does: values flushed to\n"
    "zero, left subnormal, overflowing, already non-finite, and the relative\n"
    "rounding error; grouped into branches by name (KIND/BRANCH.rest, e.g.\n"
    "grad/vision.blocks.0.attn.in_proj_weight is in grad/vision).\n"
    "\n"
    "Options:\n"
    "  --format FMT     f16 (binary16, default), bf16, e4m3, e5m2, or f32\n"
    "  --scale S        multiply every value by S first (a loss scale: 65536, 2^16;\n"
    "                   default 1). Powers of two give exact counts.\n"
    "  --scale auto     find the power-of-two scales 2^k at which no tensor\n"
    "                   overflows and none flushes more than --max-flush of its\n"
    "                   non-zero values, name the tensors that bound the range,\n"
    "                   and count at its top (the loss scale to start from)\n"
    "  --max-flush F    the flushing allowed by --scale auto, a fraction (0.001)\n"
    "  --select PREFIX  only tensors whose name starts with PREFIX (repeatable:\n"
    "                   any of them), e.g. --select grad/ --select act_grad/\n"
    "  --skip-other     skip integer and BOOL tensors (default: an error)\n"
    "  --tensors        list every tensor (default: the branches, and the tensors\n"
    "                   that overflow, hold inf/NaN, or flush the most)\n"
    "  --plot FILE.png  histogram of log2|x| per branch against the format's\n"
    "                   bands at the scale (shifted by log2 S)\n"
    "  --json           one JSON object: file, format, scale, tensors, branches,\n"
    "                   total, and with --scale auto the range\n"
    "\n"
    "Fractions are of all the values of a tensor (or branch). The relative error\n"
    "is |round(v) - v| / |v| for v = x*S, averaged over the values that do not\n"
    "overflow (a flushed value counts 1). With a PyTorch dump (README): inspect\n"
    "activations at scale 1 (--select act/) and gradients at the loss scale\n"
    "(--select grad/ --select act_grad/ --scale auto).\n"
    "\n"
    "Exit status: 0 inspected (whatever the counts), 1 unreadable file, not\n"
    "safetensors, no tensors, or a tensor of an unsupported dtype, 2 bad usage.\n";

enum { MAX_SELECT = 16, MAX_BRANCHES = 256 };

typedef struct tensor_rec {
  const ampc_st_tensor *t;
  int branch;
  ampc_inspect_stats s; /* at the scale reported */
  ampc_inspect_range rg;
  int k_lo, k_hi;
} tensor_rec;

typedef struct branch_rec {
  char name[96];
  int tensors;
  ampc_inspect_stats s;
} branch_rec;

/* the branch of a tensor name: KIND/ (up to the first '/') and the name's
 * first dotted component: "grad/vision.x.y" -> "grad/vision", "text.norm.w"
 * -> "text", "w" -> "w" */
static void branch_of(const char *name, char *out, size_t cap) {
  const char *slash = strchr(name, '/');
  const char *rest = slash ? slash + 1 : name;
  const size_t kind = slash ? (size_t)(slash - name) + 1 : 0;
  size_t b = strcspn(rest, ".");
  if (b == 0)
    b = strlen(rest);
  snprintf(out, cap, "%.*s%.*s", (int)kind, name, (int)b, rest);
}

static int parse_scale(const char *v, double *out, int *is_auto) {
  *is_auto = 0;
  if (!strcmp(v, "auto")) {
    *is_auto = 1;
    return 0;
  }
  char *end = NULL;
  if (!strncmp(v, "2^", 2)) {
    const long k = strtol(v + 2, &end, 10);
    if (end == v + 2 || *end || k < -1000 || k > 1000)
      return -1;
    *out = ldexp(1.0, (int)k);
    return 0;
  }
  const double s = strtod(v, &end);
  if (end == v || *end || !(s > 0) || !isfinite(s))
    return -1;
  *out = s;
  return 0;
}

static double frac(uint64_t a, uint64_t n) { return n ? (double)a / (double)n : 0.0; }

static double err_mean(const ampc_inspect_stats *s) {
  return s->err_n ? s->err_sum / (double)s->err_n : 0.0;
}

static cJSON *stats_json(const ampc_inspect_stats *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "count", (double)s->count);
  cJSON_AddNumberToObject(o, "zeros", (double)s->zeros);
  cJSON_AddNumberToObject(o, "nonfinite", (double)s->nonfinite);
  cJSON_AddNumberToObject(o, "flushed", (double)s->flushed);
  cJSON_AddNumberToObject(o, "subnormal", (double)s->subnormal);
  cJSON_AddNumberToObject(o, "normal", (double)s->normal);
  cJSON_AddNumberToObject(o, "overflow", (double)s->overflow);
  cJSON_AddNumberToObject(o, "flushed_frac", frac(s->flushed, s->count));
  cJSON_AddNumberToObject(o, "subnormal_frac", frac(s->subnormal, s->count));
  cJSON_AddNumberToObject(o, "overflow_frac", frac(s->overflow, s->count));
  cJSON_AddNumberToObject(o, "nonfinite_frac", frac(s->nonfinite, s->count));
  cJSON_AddNumberToObject(o, "rel_err_mean", err_mean(s));
  cJSON_AddNumberToObject(o, "rel_err_max", s->err_max);
  cJSON_AddNumberToObject(o, "max_abs", s->max_abs);
  cJSON_AddNumberToObject(o, "min_abs", s->min_abs);
  return o;
}

static cJSON *range_json(ampc_inspect_range rg, int lo, int hi) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "status",
                          rg == AMPC_INSPECT_RANGE_OK      ? "ok"
                          : rg == AMPC_INSPECT_RANGE_EMPTY ? "empty"
                                                           : "any");
  if (rg != AMPC_INSPECT_RANGE_ANY) {
    cJSON_AddNumberToObject(o, "min_log2", lo);
    cJSON_AddNumberToObject(o, "max_log2", hi);
  }
  return o;
}

static int g_w = 41; /* the name column's width */

static void print_row(const char *name, int tensors, const ampc_inspect_stats *s,
                      const char *range) {
  char tn[16] = "";
  if (tensors >= 0)
    snprintf(tn, sizeof tn, "%d", tensors);
  printf("  %-*s %7s %11llu %9.4g%% %9.4g%% %9.4g%% %9.4g%% %9.3g %s\n", g_w, name, tn,
         (unsigned long long)s->count, 100 * frac(s->flushed, s->count),
         100 * frac(s->subnormal, s->count), 100 * frac(s->overflow, s->count),
         100 * frac(s->nonfinite, s->count), err_mean(s), range);
}

static void range_text(char *b, size_t n, ampc_inspect_range rg, int lo, int hi) {
  if (rg == AMPC_INSPECT_RANGE_ANY)
    snprintf(b, n, "any");
  else if (rg == AMPC_INSPECT_RANGE_EMPTY)
    snprintf(b, n, "none (needs >= 2^%d, overflows above 2^%d)", lo, hi);
  else
    snprintf(b, n, "2^%d .. 2^%d", lo, hi);
}

/* PNG: per branch, log2|x| against the format's bands at the scale */
static int plot(const char *path, const char *file, const ampc_format_info *fi, double scale,
                const char *sc, branch_rec *br, int nb) {
  int lo = AMPC_INSPECT_BINS, hi = -1;
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < AMPC_INSPECT_BINS; i++)
      if (br[b].s.hist[i]) {
        lo = i < lo ? i : lo;
        hi = i > hi ? i : hi;
      }
  const double sh = log2(scale);
  const ampc_plot_bands bands = {log2(fi->min_subnormal / 2) - sh, log2(fi->min_normal) - sh,
                                 log2(fi->overflow_threshold) - sh, fi->name, "log#d2#u|x|"};
  if (hi < 0) /* nothing finite and non-zero: the bands alone */
    lo = hi = (int)floor(bands.normal_from) - AMPC_INSPECT_LOG2_MIN;
  /* show the bands' edges around the data */
  const int b_lo = (int)floor(bands.flush_below) - 2 - AMPC_INSPECT_LOG2_MIN;
  const int b_hi = (int)ceil(bands.overflow_from) + 2 - AMPC_INSPECT_LOG2_MIN;
  if (b_lo < lo && b_lo >= 0 && hi - b_lo < 400)
    lo = b_lo;
  if (b_hi > hi && b_hi < AMPC_INSPECT_BINS && b_hi - lo < 400)
    hi = b_hi;
  const int n = nb < 16 ? nb : 16;
  ampc_plot_hist h[16];
  for (int b = 0; b < n; b++)
    h[b] = (ampc_plot_hist){br[b].name, br[b].s.hist + lo, br[b].s.zeros};
  char title[256];
  const char *base = strrchr(file, '/');
  snprintf(title, sizeof title, "%s: log#d2#u|x| against %s at scale %s", base ? base + 1 : file,
           fi->name, sc);
  if (ampc_plot_log2_hist_bands(path, title, lo + AMPC_INSPECT_LOG2_MIN, hi - lo + 1, h, n,
                                &bands) != AMPC_OK)
    return cli_runtime_error("inspect", "%s", ampc_last_error());
  return AMPC_EXIT_OK;
}

static int run(int argc, char **argv) {
  const char *path = NULL, *plot_path = NULL, *select[MAX_SELECT];
  int nsel = 0, json = 0, all = 0, skip_other = 0, is_auto = 0, scale_given = 0;
  double scale = 1.0, max_flush = 1e-3;
  ampc_dtype fmt = AMPC_F16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *eq = strchr(a, '=');
    char flag[32];
    const char *v = NULL;
    if (a[0] == '-' && a[1] == '-' && eq && (size_t)(eq - a) < sizeof flag) {
      snprintf(flag, sizeof flag, "%.*s", (int)(eq - a), a);
      v = eq + 1;
    } else
      snprintf(flag, sizeof flag, "%.31s", a);
    const int takes = !strcmp(flag, "--format") || !strcmp(flag, "--scale") ||
                      !strcmp(flag, "--max-flush") || !strcmp(flag, "--select") ||
                      !strcmp(flag, "--plot");
    if (takes && !v) {
      if (i + 1 >= argc)
        return cli_usage_error("inspect", "%s needs a value", flag);
      v = argv[++i];
    } else if (!takes && v)
      return cli_usage_error("inspect", "%s takes no value", flag);
    if (!strcmp(flag, "--format")) {
      if (ampc_dtype_parse(v, &fmt) != AMPC_OK)
        return cli_usage_error("inspect", "--format: %s", ampc_last_error());
    } else if (!strcmp(flag, "--scale")) {
      if (parse_scale(v, &scale, &is_auto) != 0)
        return cli_usage_error("inspect",
                               "--scale '%s': expected a positive finite number, 2^K, or auto", v);
      scale_given = 1;
      if (is_auto)
        scale = 1.0;
    } else if (!strcmp(flag, "--max-flush")) {
      char *end = NULL;
      max_flush = strtod(v, &end);
      if (end == v || *end || !(max_flush >= 0 && max_flush <= 1))
        return cli_usage_error("inspect", "--max-flush '%s': expected a fraction in [0, 1]", v);
    } else if (!strcmp(flag, "--select")) {
      if (nsel == MAX_SELECT)
        return cli_usage_error("inspect", "at most %d --select prefixes", MAX_SELECT);
      select[nsel++] = v;
    } else if (!strcmp(flag, "--plot"))
      plot_path = v;
    else if (!strcmp(flag, "--json"))
      json = 1;
    else if (!strcmp(flag, "--tensors"))
      all = 1;
    else if (!strcmp(flag, "--skip-other"))
      skip_other = 1;
    else if (a[0] == '-' && a[1] != '\0')
      return cli_usage_error("inspect", "unknown option '%s'", a);
    else if (path)
      return cli_usage_error("inspect", "one file at a time (got '%s' and '%s')", path, a);
    else
      path = a;
  }
  if (!path)
    return cli_usage_error("inspect", "missing FILE (a .safetensors file)");
  (void)scale_given;

  ampc_safetensors *f = NULL;
  if (ampc_safetensors_read_ex(path, AMPC_ST_ANY_DTYPE, &f) != AMPC_OK)
    return cli_runtime_error("inspect", "%s", ampc_last_error());
  const int nt = ampc_safetensors_count(f);
  tensor_rec *rec = calloc((size_t)(nt > 0 ? nt : 1), sizeof *rec);
  branch_rec *br = calloc(MAX_BRANCHES, sizeof *br);
  ampc_inspect_stats *tmp = calloc(1, sizeof *tmp);
  int ret = AMPC_EXIT_OK, n = 0, nb = 0, skipped = 0;
  ampc_format_info fi;
  ampc_format_info_get(fmt, &fi);
  if (!rec || !br || !tmp) {
    ret = cli_runtime_error("inspect", "out of memory");
    goto done;
  }
  /* pass 1: pick the tensors, check their dtypes, and with auto their ranges */
  for (int i = 0; i < nt; i++) {
    const ampc_st_tensor *t = ampc_safetensors_tensor(f, i);
    int keep = nsel == 0;
    for (int s = 0; s < nsel && !keep; s++)
      keep = !strncmp(t->name, select[s], strlen(select[s]));
    if (!keep)
      continue;
    memset(tmp, 0, sizeof *tmp);
    const size_t cnt = t->elem_size ? t->nbytes / t->elem_size : 0;
    if (ampc_inspect_values(tmp, t->data, t->dtype_name, cnt, fmt, scale) != AMPC_OK) {
      if (skip_other) {
        skipped++;
        continue;
      }
      ret = cli_runtime_error("inspect",
                              "%s: tensor '%s': %s; nothing to count in it (--skip-other "
                              "skips such tensors)",
                              path, t->name, ampc_last_error());
      goto done;
    }
    tensor_rec *r = &rec[n++];
    r->t = t;
    r->s = *tmp;
    r->rg = ampc_inspect_scale_range(tmp, fmt, max_flush, &r->k_lo, &r->k_hi);
    char bname[96];
    branch_of(t->name, bname, sizeof bname);
    int b = 0;
    while (b < nb && strcmp(br[b].name, bname) != 0)
      b++;
    if (b == nb) { /* a new branch; past the table's size, all in one "(other)" */
      if (nb < MAX_BRANCHES - 1)
        snprintf(br[nb++].name, sizeof br[b].name, "%s", bname);
      else {
        b = MAX_BRANCHES - 1;
        if (nb < MAX_BRANCHES)
          snprintf(br[b].name, sizeof br[b].name, "(other)"), nb = MAX_BRANCHES;
      }
    }
    r->branch = b;
  }
  if (n == 0) {
    ret = cli_runtime_error("inspect", "%s: %s", path,
                            nt == 0    ? "the file holds no tensors"
                            : nsel > 0 ? "no tensor matches --select"
                                       : "no floating-point tensor to inspect");
    goto done;
  }
  /* the file's range: every tensor's, intersected; the tensors at its ends */
  int f_lo = -2200, f_hi = 2200, lim_lo = -1, lim_hi = -1;
  for (int i = 0; i < n; i++) {
    if (rec[i].rg == AMPC_INSPECT_RANGE_ANY)
      continue;
    if (lim_lo < 0 || rec[i].k_lo > f_lo)
      f_lo = rec[i].k_lo, lim_lo = i;
    if (lim_hi < 0 || rec[i].k_hi < f_hi)
      f_hi = rec[i].k_hi, lim_hi = i;
  }
  const ampc_inspect_range f_rg = lim_lo < 0     ? AMPC_INSPECT_RANGE_ANY
                                  : f_lo <= f_hi ? AMPC_INSPECT_RANGE_OK
                                                 : AMPC_INSPECT_RANGE_EMPTY;
  if (is_auto) {
    /* count at the top of the range (no overflow anywhere): where a dynamic
     * loss scaler would start and back off from; 2^0 when nothing constrains */
    scale = f_rg == AMPC_INSPECT_RANGE_ANY ? 1.0 : ldexp(1.0, f_hi);
    for (int i = 0; i < n; i++) {
      memset(&rec[i].s, 0, sizeof rec[i].s);
      const ampc_st_tensor *t = rec[i].t;
      ampc_inspect_values(&rec[i].s, t->data, t->dtype_name, t->nbytes / t->elem_size, fmt, scale);
    }
  }
  ampc_inspect_stats *total = tmp;
  memset(total, 0, sizeof *total);
  for (int i = 0; i < n; i++) {
    ampc_inspect_merge(&br[rec[i].branch].s, &rec[i].s);
    br[rec[i].branch].tensors++;
    ampc_inspect_merge(total, &rec[i].s);
  }
  int b_lo[MAX_BRANCHES], b_hi[MAX_BRANCHES];
  ampc_inspect_range b_rg[MAX_BRANCHES];
  for (int b = 0; b < nb; b++) {
    b_rg[b] = AMPC_INSPECT_RANGE_ANY, b_lo[b] = -2200, b_hi[b] = 2200;
    for (int i = 0; i < n; i++)
      if (rec[i].branch == b && rec[i].rg != AMPC_INSPECT_RANGE_ANY) {
        if (b_rg[b] == AMPC_INSPECT_RANGE_ANY || rec[i].k_lo > b_lo[b])
          b_lo[b] = rec[i].k_lo;
        if (b_rg[b] == AMPC_INSPECT_RANGE_ANY || rec[i].k_hi < b_hi[b])
          b_hi[b] = rec[i].k_hi;
        b_rg[b] = b_lo[b] <= b_hi[b] ? AMPC_INSPECT_RANGE_OK : AMPC_INSPECT_RANGE_EMPTY;
      }
  }
  int e;
  const double m = frexp(scale, &e);
  const int pow2 = m == 0.5;
  char sc[64];
  if (pow2)
    snprintf(sc, sizeof sc, "2^%d", e - 1);
  else
    snprintf(sc, sizeof sc, "%g", scale);

  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", path);
    cJSON_AddStringToObject(o, "format", fi.name);
    cJSON_AddNumberToObject(o, "scale", scale);
    if (pow2)
      cJSON_AddNumberToObject(o, "scale_log2", e - 1);
    cJSON_AddStringToObject(o, "scale_from", is_auto ? "auto" : scale_given ? "given" : "default");
    cJSON_AddNumberToObject(o, "max_flush", max_flush);
    cJSON_AddNumberToObject(o, "skipped", skipped);
    cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
    for (int i = 0; i < n; i++) {
      const ampc_st_tensor *t = rec[i].t;
      cJSON *x = stats_json(&rec[i].s);
      cJSON_AddStringToObject(x, "name", t->name);
      cJSON_AddStringToObject(x, "dtype", t->dtype_name);
      cJSON *sh = cJSON_AddArrayToObject(x, "shape");
      for (int d = 0; d < t->ndim; d++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
      cJSON_AddStringToObject(x, "branch", br[rec[i].branch].name);
      cJSON_AddItemToObject(x, "scale_range", range_json(rec[i].rg, rec[i].k_lo, rec[i].k_hi));
      cJSON_AddItemToArray(ts, x);
    }
    cJSON *bs = cJSON_AddArrayToObject(o, "branches");
    for (int b = 0; b < nb; b++) {
      cJSON *x = stats_json(&br[b].s);
      cJSON_AddStringToObject(x, "name", br[b].name);
      cJSON_AddNumberToObject(x, "tensors", br[b].tensors);
      cJSON_AddItemToObject(x, "scale_range", range_json(b_rg[b], b_lo[b], b_hi[b]));
      cJSON_AddItemToArray(bs, x);
    }
    cJSON *tot = stats_json(total);
    cJSON_AddNumberToObject(tot, "tensors", n);
    cJSON *fr = range_json(f_rg, f_lo, f_hi);
    if (lim_lo >= 0) {
      cJSON_AddStringToObject(fr, "flush_limited_by", rec[lim_lo].t->name);
      cJSON_AddStringToObject(fr, "overflow_limited_by", rec[lim_hi].t->name);
    }
    cJSON_AddItemToObject(tot, "scale_range", fr);
    cJSON_AddItemToObject(o, "total", tot);
    ret = cli_print_json("inspect", o);
  } else {
    printf("%s: %d tensors, %llu values; as %s at scale %s%s\n", path, n,
           (unsigned long long)total->count, fi.name, sc,
           is_auto ? " (auto: the top of the safe range)" : "");
    if (skipped)
      printf("  (%d integer/BOOL tensors skipped)\n", skipped);
    for (int i = 0; i < n; i++) {
      const int l = (int)strlen(rec[i].t->name);
      g_w = l > g_w ? (l < 72 ? l : 72) : g_w;
    }
    printf("  %-*s %7s %11s %10s %10s %10s %10s %9s %s\n", g_w, "branch", "tensors", "values",
           "flushed", "subnormal", "overflow", "inf/nan", "rel.err", "safe scales");
    char rt[96];
    for (int b = 0; b < nb; b++) {
      range_text(rt, sizeof rt, b_rg[b], b_lo[b], b_hi[b]);
      print_row(br[b].name, br[b].tensors, &br[b].s, rt);
    }
    range_text(rt, sizeof rt, f_rg, f_lo, f_hi);
    print_row("all", n, total, rt);
    /* the tensors: all, or those that overflow or hold inf/NaN and the 5 that
     * flush the most */
    int *order = malloc((size_t)n * sizeof *order), no = 0;
    if (!order) {
      ret = cli_runtime_error("inspect", "out of memory");
      goto done;
    }
    for (int i = 0; i < n; i++)
      order[i] = i;
    if (!all) {
      for (int i = 1; i < n; i++) /* by flushed fraction, descending (stable) */
        for (int j = i; j > 0; j--) {
          const ampc_inspect_stats *a = &rec[order[j - 1]].s, *c = &rec[order[j]].s;
          if (frac(c->flushed, c->count) <= frac(a->flushed, a->count))
            break;
          const int t = order[j];
          order[j] = order[j - 1], order[j - 1] = t;
        }
      int *keep = malloc((size_t)n * sizeof *keep);
      if (!keep) {
        free(order);
        ret = cli_runtime_error("inspect", "out of memory");
        goto done;
      }
      int flushers = 0;
      for (int i = 0; i < n; i++) {
        const ampc_inspect_stats *s = &rec[order[i]].s;
        const int bad = s->overflow > 0 || s->nonfinite > 0;
        const int top = s->flushed > 0 && flushers < 5;
        flushers += top;
        if (bad || top)
          keep[no++] = order[i];
      }
      free(order);
      order = keep;
    } else
      no = n;
    if (no > 0) {
      printf("\n  %-*s %7s %11s %10s %10s %10s %10s %9s %s\n", g_w,
             all ? "tensor" : "tensor (overflow, inf/nan, most flushed)", "", "values", "flushed",
             "subnormal", "overflow", "inf/nan", "rel.err", "safe scales");
      for (int i = 0; i < no; i++) {
        const tensor_rec *r = &rec[order[i]];
        range_text(rt, sizeof rt, r->rg, r->k_lo, r->k_hi);
        print_row(r->t->name, -1, &r->s, rt);
      }
    }
    free(order);
    if (lim_lo >= 0) {
      printf("\n");
      if (f_rg == AMPC_INSPECT_RANGE_OK)
        printf("safe scales: 2^%d .. 2^%d (as a loss scale: start from 2^%d, the largest)\n", f_lo,
               f_hi, f_hi);
      else
        printf("no power of two is safe for every tensor at --max-flush %g: the largest "
               "without overflow is 2^%d\n",
               max_flush, f_hi);
      printf("  flushing bounds it below: %s needs >= 2^%d (at most %g of its non-zero values "
             "flushed)\n",
             rec[lim_lo].t->name, f_lo, max_flush);
      printf("  overflow bounds it above: %s (max |x| %.6g) overflows above 2^%d\n",
             rec[lim_hi].t->name, rec[lim_hi].s.max_abs, f_hi);
    }
  }
  if (ret == AMPC_EXIT_OK && plot_path) {
    ret = plot(plot_path, path, &fi, scale, sc, br, nb);
    if (ret == AMPC_EXIT_OK && !json)
      printf("wrote %s\n", plot_path);
  }
done:
  free(rec);
  free(br);
  free(tmp);
  ampc_safetensors_free(f);
  return ret;
}

const ampc_command ampc_cmd_inspect = {
    "inspect", "what FP16/BF16/FP8 would do to a safetensors file's tensors", k_usage, run};
