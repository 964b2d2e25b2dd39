/*
 * tools/ampc/cmd_inspect.c: `ampc inspect FILE.safetensors`: what storing
 * each tensor of any framework's safetensors file in binary16, bfloat16 or FP8
 * would do at a scale (flushed, subnormal, overflow, rounding error), the
 * range of power-of-two scales that is safe for every tensor (for gradients:
 * the loss scale to start from; for weights: whether scale 1 is in it) and the
 * tensors that limit it, grouped into branches by name (the counting is
 * ampc/diag.h's "inspect").
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
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
    "grad/vision.blocks.0.attn.in_proj_weight is in grad/vision; a #N suffix, a\n"
    "module's Nth call, joins its branch).\n"
    "\n"
    "Options:\n"
    "  --format FMT     f16 (binary16, default), bf16, e4m3, e5m2, or f32\n"
    "  --scale S        multiply every value by S first (a loss scale: 65536, or\n"
    "                   2^K with K in -1074..1023; default 1). Powers of two give\n"
    "                   exact counts.\n"
    "  --scale auto     find the power-of-two scales 2^k at which no tensor\n"
    "                   overflows and none flushes more than --max-flush of its\n"
    "                   finite non-zero values, name the tensors that bound the\n"
    "                   range, and count at its top (for gradients: the loss scale\n"
    "                   to start from)\n"
    "  --max-flush F    the flushing allowed by --scale auto, a fraction (0.001)\n"
    "  --select PREFIX  only tensors whose name starts with PREFIX (repeatable:\n"
    "                   any of them), e.g. --select grad/ --select act_grad/\n"
    "  --skip-other     skip tensors that are not floating point (I64, BOOL, ...;\n"
    "                   default: an error)\n"
    "  --tensors        list every tensor (default: the branches, and the tensors\n"
    "                   that overflow, hold inf/NaN, or flush the most)\n"
    "  --plot FILE.png  histogram of log2|x| per branch (the first 16) against the\n"
    "                   format's bands at the scale (shifted by log2 S)\n"
    "  --json           one JSON object: file, format, scale, tensors, branches,\n"
    "                   total (with total.scale_range: the file's safe range),\n"
    "                   gradient_tensors (how many are named as gradients)\n"
    "  --               the next argument is the file, even if it starts with -\n"
    "\n"
    "Columns: zero and inf/nan are fractions of all the values; flushed,\n"
    "subnormal and overflow of the finite non-zero ones (what the format can\n"
    "lose). rel.err is the mean of |round(v) - v| / |v| for v = x*S over the\n"
    "finite non-zero values that do not overflow (a flushed value counts 1; '-'\n"
    "when there are none). A file written by ampc_dump.py with loss_scale=S\n"
    "(gradients that already carry S) says so, and the safe scales are also\n"
    "given as training loss scales. The safe scales are loss-scale advice only\n"
    "when every tensor inspected is named as a gradient (grad/, act_grad/, or a\n"
    "'grad' component: fc.weight.grad); for other tensors (an ampc checkpoint's\n"
    "weights and moments) it says whether they fit at scale 1, as stored. With\n"
    "a PyTorch dump (docs/ENGINE.md): inspect activations at scale 1 (--select\n"
    "act/) and gradients at the loss scale (--select grad/ --select act_grad/\n"
    "--scale auto).\n"
    "\n"
    "Exit status: 0 inspected (whatever the counts), 1 unreadable file, not\n"
    "safetensors, no tensors, or a tensor of an unsupported dtype, 2 bad usage.\n";

enum { MAX_SELECT = 16, MAX_BRANCHES = 256, K_NONE = 2200 };

/* a tensor's counts without the histograms (34 KB less per tensor) */
typedef struct counts {
  uint64_t count, zeros, nonfinite, flushed, subnormal, normal, overflow, err_n;
  double err_sum, err_max, max_abs, min_abs;
} counts;

static counts counts_of(const ampc_inspect_stats *s) {
  return (counts){s->count,    s->zeros, s->nonfinite, s->flushed, s->subnormal, s->normal,
                  s->overflow, s->err_n, s->err_sum,   s->err_max, s->max_abs,   s->min_abs};
}

typedef struct tensor_rec {
  const ampc_st_tensor *t;
  int branch;
  counts c; /* at the scale reported */
  ampc_inspect_range rg;
  int k_lo, k_hi;
} tensor_rec;

typedef struct branch_rec {
  char name[256];
  int tensors;
  ampc_inspect_stats s;
} branch_rec;

/* the branch of a tensor name: KIND/ (up to the first '/') and the name's
 * first dotted component without a #N call suffix: "grad/vision.x.y" ->
 * "grad/vision", "act/shared#2" -> "act/shared", "text.norm.w" -> "text" */
static void branch_of(const char *name, char *out, size_t cap) {
  const char *slash = strchr(name, '/');
  const char *rest = slash ? slash + 1 : name;
  const size_t kind = slash ? (size_t)(slash - name) + 1 : 0;
  size_t b = strcspn(rest, ".#");
  if (b == 0)
    b = strlen(rest);
  snprintf(out, cap, "%.*s%.*s", (int)kind, name, (int)b, rest);
}

/* whether a tensor name marks a gradient: its kind (before the first '/') is
 * "grad" or ends in "_grad" (ampc_dump.py's grad/ and act_grad/), or a dotted
 * component of the rest is "grad" ("grad.fc.weight", "fc.weight.grad") */
static int is_grad_name(const char *name) {
  const char *slash = strchr(name, '/');
  const char *rest = name;
  if (slash) {
    const size_t k = (size_t)(slash - name);
    if ((k == 4 && !strncmp(name, "grad", 4)) || (k >= 5 && !strncmp(slash - 5, "_grad", 5)))
      return 1;
    rest = slash + 1;
  }
  for (const char *c = rest;;) {
    const size_t l = strcspn(c, ".");
    if (l == 4 && !strncmp(c, "grad", 4))
      return 1;
    if (!c[l])
      return 0;
    c += l + 1;
  }
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
    if (end == v + 2 || *end || k < -1074 || k > 1023)
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

static uint64_t nonzero(const counts *c) { return c->count - c->zeros - c->nonfinite; }
static double frac(uint64_t a, uint64_t n) { return n ? (double)a / (double)n : 0.0; }

/* a fraction as a percentage that never reads 0 % or 100 % unless it is */
static void pct(char *b, size_t n, uint64_t a, uint64_t of) {
  const double f = 100 * frac(a, of);
  if (a == 0)
    snprintf(b, n, "0%%");
  else if (a == of)
    snprintf(b, n, "100%%");
  else if (f > 99.99)
    snprintf(b, n, ">99.99%%");
  else
    snprintf(b, n, "%.4g%%", f);
}

static cJSON *num_or_null(int ok, double v) {
  return ok ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static cJSON *counts_json(const counts *s) {
  const uint64_t nz = nonzero(s);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "count", (double)s->count);
  cJSON_AddNumberToObject(o, "zeros", (double)s->zeros);
  cJSON_AddNumberToObject(o, "nonfinite", (double)s->nonfinite);
  cJSON_AddNumberToObject(o, "flushed", (double)s->flushed);
  cJSON_AddNumberToObject(o, "subnormal", (double)s->subnormal);
  cJSON_AddNumberToObject(o, "normal", (double)s->normal);
  cJSON_AddNumberToObject(o, "overflow", (double)s->overflow);
  /* of all values */
  cJSON_AddNumberToObject(o, "zeros_frac", frac(s->zeros, s->count));
  cJSON_AddNumberToObject(o, "nonfinite_frac", frac(s->nonfinite, s->count));
  /* of the finite non-zero values */
  cJSON_AddNumberToObject(o, "flushed_frac", frac(s->flushed, nz));
  cJSON_AddNumberToObject(o, "subnormal_frac", frac(s->subnormal, nz));
  cJSON_AddNumberToObject(o, "overflow_frac", frac(s->overflow, nz));
  cJSON_AddItemToObject(o, "rel_err_mean",
                        num_or_null(s->err_n > 0, s->err_n ? s->err_sum / (double)s->err_n : 0));
  cJSON_AddItemToObject(o, "rel_err_max", num_or_null(s->err_n > 0, s->err_max));
  cJSON_AddNumberToObject(o, "max_abs", s->max_abs);
  cJSON_AddNumberToObject(o, "min_abs", s->min_abs);
  return o;
}

/* {"status", "min_log2" (null: no lower bound), "max_log2"} */
static cJSON *range_json(ampc_inspect_range rg, int lo, int hi) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "status",
                          rg == AMPC_INSPECT_RANGE_OK      ? "ok"
                          : rg == AMPC_INSPECT_RANGE_EMPTY ? "empty"
                                                           : "any");
  if (rg != AMPC_INSPECT_RANGE_ANY) {
    cJSON_AddItemToObject(o, "min_log2", num_or_null(lo > -K_NONE, lo));
    cJSON_AddNumberToObject(o, "max_log2", hi);
  }
  return o;
}

static int g_w = 41; /* the name column's width */

static void print_row(const char *name, int tensors, const counts *s, const char *range) {
  char tn[16] = "", z[16], fl[16], sb[16], ov[16], nf[16], er[16];
  if (tensors >= 0)
    snprintf(tn, sizeof tn, "%d", tensors);
  const uint64_t nz = nonzero(s);
  pct(z, sizeof z, s->zeros, s->count);
  pct(fl, sizeof fl, s->flushed, nz);
  pct(sb, sizeof sb, s->subnormal, nz);
  pct(ov, sizeof ov, s->overflow, nz);
  pct(nf, sizeof nf, s->nonfinite, s->count);
  if (s->err_n)
    snprintf(er, sizeof er, "%.3g", s->err_sum / (double)s->err_n);
  else
    snprintf(er, sizeof er, "-");
  printf("  %-*s %7s %11llu %8s %10s %10s %10s %9s %9s %s\n", g_w, name, tn,
         (unsigned long long)s->count, z, fl, sb, ov, nf, er, range);
}

static void range_text(char *b, size_t n, ampc_inspect_range rg, int lo, int hi) {
  if (rg == AMPC_INSPECT_RANGE_ANY)
    snprintf(b, n, "any");
  else if (rg == AMPC_INSPECT_RANGE_EMPTY)
    snprintf(b, n, "none (needs >= 2^%d, overflows above 2^%d)", lo, hi);
  else if (lo <= -K_NONE)
    snprintf(b, n, "up to 2^%d", hi);
  else
    snprintf(b, n, "2^%d .. 2^%d", lo, hi);
}

static void header(const char *first) {
  printf("  %-*s %7s %11s %8s %10s %10s %10s %9s %9s %s\n", g_w, first,
         strcmp(first, "branch") ? "" : "tensors", "values", "zero", "flushed", "subnormal",
         "overflow", "inf/nan", "rel.err", "safe scales");
}

/* PNG: per branch, log2|x| against the format's bands at the scale */
static int plot(const char *path, const char *file, const ampc_format_info *fi, double scale,
                const char *sc, branch_rec *br, int nb) {
  int lo = AMPC_INSPECT_BINS, hi = -1;
  const int n = nb < 16 ? nb : 16;
  for (int b = 0; b < n; b++)
    for (int i = 0; i < AMPC_INSPECT_BINS; i++)
      if (br[b].s.hist[i]) {
        lo = i < lo ? i : lo;
        hi = i > hi ? i : hi;
      }
  const double sh = log2(scale);
  const ampc_plot_bands bands = {log2(fi->min_subnormal / 2) - sh, log2(fi->min_normal) - sh,
                                 log2(fi->overflow_threshold) - sh, fi->name, "log#d2#u|x|"};
  if (hi < 0) /* nothing finite and non-zero: the bands alone */
    lo = hi =
        (int)fmin(fmax(floor(bands.normal_from) - AMPC_INSPECT_LOG2_MIN, 0), AMPC_INSPECT_BINS - 1);
  /* show the bands' edges around the data */
  const int b_lo = (int)floor(bands.flush_below) - 2 - AMPC_INSPECT_LOG2_MIN;
  const int b_hi = (int)ceil(bands.overflow_from) + 2 - AMPC_INSPECT_LOG2_MIN;
  if (b_lo < lo && b_lo >= 0 && hi - b_lo < 400)
    lo = b_lo;
  if (b_hi > hi && b_hi < AMPC_INSPECT_BINS && b_hi - lo < 400)
    hi = b_hi;
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
  int nsel = 0, json = 0, all = 0, skip_other = 0, is_auto = 0, scale_given = 0, no_opts = 0;
  double scale = 1.0, max_flush = 1e-3;
  ampc_dtype fmt = AMPC_F16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!no_opts && !strcmp(a, "--")) {
      no_opts = 1;
      continue;
    }
    if (no_opts || a[0] != '-' || a[1] == '\0') {
      if (path)
        return cli_usage_error("inspect", "one file at a time (got '%s' and '%s')", path, a);
      path = a;
      continue;
    }
    const char *eq = strchr(a, '=');
    char flag[32];
    const char *v = NULL;
    if (a[1] == '-' && eq && (size_t)(eq - a) < sizeof flag) {
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
                               "--scale '%s': expected a positive finite number, 2^K with K in "
                               "-1074..1023, or auto",
                               v);
      scale_given = 1;
      if (is_auto)
        scale = 1.0;
    } else if (!strcmp(flag, "--max-flush")) {
      char *end = NULL;
      max_flush = strtod(v, &end);
      if (end == v || *end || !(max_flush >= 0 && max_flush <= 1))
        return cli_usage_error("inspect", "--max-flush '%s': expected a fraction in [0, 1]", v);
    } else if (!strcmp(flag, "--select")) {
      if (!v[0])
        return cli_usage_error("inspect", "--select needs a non-empty prefix");
      if (nsel == MAX_SELECT)
        return cli_usage_error("inspect", "at most %d --select prefixes", MAX_SELECT);
      select[nsel++] = v;
    } else if (!strcmp(flag, "--plot")) {
      if (!v[0])
        return cli_usage_error("inspect", "--plot needs a file name");
      plot_path = v;
    } else if (!strcmp(flag, "--json"))
      json = 1;
    else if (!strcmp(flag, "--tensors"))
      all = 1;
    else if (!strcmp(flag, "--skip-other"))
      skip_other = 1;
    else
      return cli_usage_error("inspect", "unknown option '%s'", a);
  }
  if (!path)
    return cli_usage_error("inspect", "missing FILE (a .safetensors file)");
  if (plot_path && cli_same_file(plot_path, path))
    return cli_usage_error("inspect", "--plot %s names the input file: give another name",
                           plot_path);

  ampc_safetensors *f = NULL;
  if (ampc_safetensors_read_ex(path, AMPC_ST_ANY_DTYPE, &f) != AMPC_OK)
    return cli_runtime_error("inspect", "%s", ampc_last_error());
  const int nt = ampc_safetensors_count(f);
  tensor_rec *rec = calloc((size_t)(nt > 0 ? nt : 1), sizeof *rec);
  branch_rec *br = calloc(MAX_BRANCHES, sizeof *br);
  ampc_inspect_stats *tmp = calloc(1, sizeof *tmp), *total = calloc(1, sizeof *total);
  int ret = AMPC_EXIT_OK, n = 0, nb = 0, skipped = 0;
  ampc_format_info fi;
  ampc_format_info_get(fmt, &fi);
  if (!rec || !br || !tmp || !total) {
    ret = cli_runtime_error("inspect", "%s: out of memory for %d tensors", path, nt);
    goto done;
  }
  /* a loss scale the gradients already carry (ampc_dump.py's loss_scale=) */
  double recorded = 0;
  const char *ls = ampc_safetensors_meta(f, "loss_scale");
  if (ls) {
    char *end = NULL;
    recorded = strtod(ls, &end);
    if (end == ls || *end || !(recorded > 0) || !isfinite(recorded))
      recorded = 0;
  }
  /* pass 1: pick the tensors, check their dtypes, count, and their ranges */
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
    r->c = counts_of(tmp);
    r->rg = ampc_inspect_scale_range(tmp, fmt, max_flush, &r->k_lo, &r->k_hi);
    char bname[256];
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
    if (!is_auto) { /* counted at the final scale already */
      ampc_inspect_merge(&br[b].s, tmp);
      ampc_inspect_merge(total, tmp);
    } else { /* the histograms do not depend on the scale: keep them from here */
      const uint64_t n_nf = tmp->nonfinite, n_z = tmp->zeros, n_c = tmp->count;
      memset(tmp, 0, offsetof(ampc_inspect_stats, hist));
      tmp->count = n_c, tmp->zeros = n_z, tmp->nonfinite = n_nf;
      ampc_inspect_merge(&br[b].s, tmp);
      ampc_inspect_merge(total, tmp);
    }
  }
  if (n == 0) {
    char sel[512] = "";
    for (int s = 0, o = 0; s < nsel && o < (int)sizeof sel - 1; s++)
      o += snprintf(sel + o, sizeof sel - (size_t)o, "%s%s", s ? ", " : "", select[s]);
    if (nt == 0 || nsel == 0)
      ret = cli_runtime_error("inspect", "%s: %s", path,
                              nt == 0 ? "the file holds no tensors"
                                      : "no floating-point tensor to inspect");
    else
      ret = cli_runtime_error("inspect", "%s: no tensor matches --select %s", path, sel);
    goto done;
  }
  /* the file's range: every tensor's, intersected; the tensors at its ends */
  int f_lo = -K_NONE, f_hi = K_NONE, lim_lo = -1, lim_hi = -1, n_bad = 0, first_bad = -1;
  for (int i = 0; i < n; i++) {
    if (rec[i].c.nonfinite > 0 && n_bad++ == 0)
      first_bad = i;
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
      memset(tmp, 0, sizeof *tmp);
      const ampc_st_tensor *t = rec[i].t;
      ampc_inspect_values(tmp, t->data, t->dtype_name, t->nbytes / t->elem_size, fmt, scale);
      rec[i].c = counts_of(tmp);
      /* the counts only: the histograms are in the branches already */
      memset(tmp->hist, 0, sizeof tmp->hist);
      memset(tmp->pow2, 0, sizeof tmp->pow2);
      tmp->count = tmp->zeros = tmp->nonfinite = 0;
      ampc_inspect_merge(&br[rec[i].branch].s, tmp);
      ampc_inspect_merge(total, tmp);
    }
  }
  for (int i = 0; i < n; i++)
    br[rec[i].branch].tensors++;
  int b_lo[MAX_BRANCHES], b_hi[MAX_BRANCHES];
  ampc_inspect_range b_rg[MAX_BRANCHES];
  for (int b = 0; b < nb; b++) {
    b_rg[b] = AMPC_INSPECT_RANGE_ANY, b_lo[b] = -K_NONE, b_hi[b] = K_NONE;
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
  int n_grad = 0; /* the tensors named as gradients */
  for (int i = 0; i < n; i++)
    n_grad += is_grad_name(rec[i].t->name);
  int re = 0;
  const int rec_pow2 = recorded > 0 && frexp(recorded, &re) == 0.5;
  const int rec_k = re - 1;
  const counts tc = counts_of(total);

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
    cJSON_AddNumberToObject(o, "nonfinite_tensors", n_bad);
    if (recorded > 0)
      cJSON_AddNumberToObject(o, "recorded_loss_scale", recorded);
    cJSON_AddNumberToObject(o, "gradient_tensors", n_grad);
    cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
    for (int i = 0; i < n; i++) {
      const ampc_st_tensor *t = rec[i].t;
      cJSON *x = counts_json(&rec[i].c);
      cJSON_AddStringToObject(x, "name", t->name);
      cJSON_AddStringToObject(x, "dtype", t->dtype_name);
      cJSON *shp = cJSON_AddArrayToObject(x, "shape");
      for (int d = 0; d < t->ndim; d++)
        cJSON_AddItemToArray(shp, cJSON_CreateNumber((double)t->shape[d]));
      cJSON_AddStringToObject(x, "branch", br[rec[i].branch].name);
      cJSON_AddItemToObject(x, "scale_range", range_json(rec[i].rg, rec[i].k_lo, rec[i].k_hi));
      cJSON_AddItemToArray(ts, x);
    }
    cJSON *bs = cJSON_AddArrayToObject(o, "branches");
    for (int b = 0; b < nb; b++) {
      const counts bc = counts_of(&br[b].s);
      cJSON *x = counts_json(&bc);
      cJSON_AddStringToObject(x, "name", br[b].name);
      cJSON_AddNumberToObject(x, "tensors", br[b].tensors);
      cJSON_AddItemToObject(x, "scale_range", range_json(b_rg[b], b_lo[b], b_hi[b]));
      cJSON_AddItemToArray(bs, x);
    }
    cJSON *tot = counts_json(&tc);
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
    const char *how = !is_auto                           ? ""
                      : f_rg == AMPC_INSPECT_RANGE_OK    ? " (auto: the top of the safe range)"
                      : f_rg == AMPC_INSPECT_RANGE_EMPTY ? " (auto: the largest scale without "
                                                           "overflow; none meets --max-flush)"
                                                         : " (auto: nothing to constrain it)";
    printf("%s: %d tensor%s, %llu values; as %s at scale %s%s\n", path, n, n == 1 ? "" : "s",
           (unsigned long long)tc.count, fi.name, sc, how);
    if (skipped)
      printf("  (%d tensors that are not floating point skipped)\n", skipped);
    for (int i = 0; i < n; i++) {
      const int l = (int)strlen(rec[i].t->name);
      g_w = l > g_w ? (l < 72 ? l : 72) : g_w;
    }
    header("branch");
    char rt[96];
    for (int b = 0; b < nb; b++) {
      range_text(rt, sizeof rt, b_rg[b], b_lo[b], b_hi[b]);
      const counts bc = counts_of(&br[b].s);
      print_row(br[b].name, br[b].tensors, &bc, rt);
    }
    range_text(rt, sizeof rt, f_rg, f_lo, f_hi);
    print_row("all", n, &tc, rt);
    /* the tensors: all, or those that overflow or hold inf/NaN and the 5 that
     * flush the most */
    int *order = malloc((size_t)n * sizeof *order), no = 0;
    if (!order) {
      ret = cli_runtime_error("inspect", "%s: out of memory", path);
      goto done;
    }
    if (all)
      for (int i = 0; i < n; i++)
        order[no++] = i;
    else {
      for (int i = 0; i < n; i++) /* overflow or inf/NaN, in file order */
        if (rec[i].c.overflow > 0 || rec[i].c.nonfinite > 0)
          order[no++] = i;
      for (int top = 0; top < 5; top++) { /* then the 5 largest flushed fractions */
        int best = -1;
        for (int i = 0; i < n; i++) {
          const counts *c = &rec[i].c;
          int seen = c->flushed == 0;
          for (int j = 0; j < no && !seen; j++)
            seen = order[j] == i;
          if (!seen && (best < 0 || frac(c->flushed, nonzero(c)) >
                                        frac(rec[best].c.flushed, nonzero(&rec[best].c))))
            best = i;
        }
        if (best < 0)
          break;
        order[no++] = best;
      }
    }
    if (no > 0) {
      printf("\n");
      header(all ? "tensor" : "tensor (overflow, inf/nan, most flushed)");
      for (int i = 0; i < no; i++) {
        const tensor_rec *r = &rec[order[i]];
        range_text(rt, sizeof rt, r->rg, r->k_lo, r->k_hi);
        print_row(r->t->name, -1, &r->c, rt);
      }
    }
    free(order);
    printf("\n");
    if (f_rg == AMPC_INSPECT_RANGE_ANY)
      printf("safe scales: any (no finite non-zero value to lose)\n");
    else {
      /* a loss scale multiplies gradients: advice only when they are all the
       * tensors inspected */
      char adv[80] = "";
      if (n_grad == n)
        snprintf(adv, sizeof adv, " (as a loss scale: start from 2^%d, the largest)", f_hi);
      if (f_rg == AMPC_INSPECT_RANGE_OK && f_lo <= -K_NONE)
        printf("safe scales: up to 2^%d%s\n", f_hi, adv);
      else if (f_rg == AMPC_INSPECT_RANGE_OK)
        printf("safe scales: 2^%d .. 2^%d%s\n", f_lo, f_hi, adv);
      else
        printf("no power of two is safe for every tensor at --max-flush %g: the largest "
               "without overflow is 2^%d\n",
               max_flush, f_hi);
      if (f_lo > -K_NONE)
        printf("  flushing bounds it below: %s needs >= 2^%d (at most %g of its finite non-zero "
               "values flushed)\n",
               rec[lim_lo].t->name, f_lo, max_flush);
      printf("  overflow bounds it above: %s (max |x| %.6g) overflows above 2^%d\n",
             rec[lim_hi].t->name, rec[lim_hi].c.max_abs, f_hi);
      if (n_grad == n && recorded > 0 && rec_pow2 && f_rg == AMPC_INSPECT_RANGE_OK) {
        char tr[64];
        if (f_lo > -K_NONE)
          snprintf(tr, sizeof tr, "2^%d .. 2^%d", f_lo + rec_k, f_hi + rec_k);
        else
          snprintf(tr, sizeof tr, "up to 2^%d", f_hi + rec_k);
        printf("the file records loss_scale %g (2^%d): its gradients carry it already, so as a "
               "training loss scale: %s\n",
               recorded, rec_k, tr);
      }
    }
    if (n_grad == n && recorded > 0 && !(rec_pow2 && f_rg == AMPC_INSPECT_RANGE_OK))
      printf("the file records loss_scale %g: its gradients carry it already; multiply the "
             "scales above by it for the training loss scale\n",
             recorded);
    if (n_grad > 0 && n_grad < n)
      printf("%d of the %d tensors are gradients: for a loss scale, inspect them alone "
             "(e.g. --select grad/ --select act_grad/)\n",
             n_grad, n);
    else if (n_grad == 0) { /* weights or other tensors: do they fit as stored? */
      int over1 = 0, flush1 = 0;
      for (int i = 0; i < n; i++)
        if (rec[i].rg != AMPC_INSPECT_RANGE_ANY) {
          over1 += rec[i].k_hi < 0;
          flush1 += rec[i].k_lo > 0;
        }
      char fit[160];
      if (!over1 && !flush1)
        snprintf(fit, sizeof fit, "they fit %s%s", fi.name,
                 n_bad > 0 ? " (but for the inf/NaN already there)" : "");
      else if (!flush1)
        snprintf(fit, sizeof fit, "they do not fit %s: overflow in %d tensor%s", fi.name, over1,
                 over1 == 1 ? "" : "s");
      else if (!over1)
        snprintf(fit, sizeof fit, "they do not fit %s: more than %g flushed in %d tensor%s",
                 fi.name, max_flush, flush1, flush1 == 1 ? "" : "s");
      else
        snprintf(fit, sizeof fit,
                 "they do not fit %s: overflow in %d tensor%s, more than %g flushed in %d", fi.name,
                 over1, over1 == 1 ? "" : "s", max_flush, flush1);
      printf("%s: no loss-scale advice; at scale 1, as stored, %s\n",
             ampc_safetensors_meta(f, "ampc.step")
                 ? "an ampc checkpoint (weights and optimizer state), not gradients"
                 : "no tensor named as a gradient (grad/, act_grad/, .grad)",
             fit);
    }
    if (n_bad > 0)
      printf("warning: %d tensor%s already hold%s inf/NaN (%s): no scale makes them finite%s\n",
             n_bad, n_bad == 1 ? "" : "s", n_bad == 1 ? "s" : "", rec[first_bad].t->name,
             n_grad > 0 ? ", and a dynamic loss scaler would skip this step at every scale" : "");
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
  free(total);
  ampc_safetensors_free(f);
  return ret;
}

const ampc_command ampc_cmd_inspect = {
    "inspect", "what FP16/BF16/FP8 would do to a safetensors file's tensors", k_usage, run, NULL,
    NULL};
