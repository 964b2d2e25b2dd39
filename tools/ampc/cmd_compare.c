/*
 * tools/ampc/cmd_compare.c: `ampc compare --out DIR [--run LABEL='flags']...
 * [train flags]`: the same training run in several precisions side by side
 * (the experiment of Micikevicius et al. 2018: an FP32 baseline, FP16 without
 * loss scaling, FP16 with it), each in its own process so that peak memory is
 * its own, then a summary, a report and plots of loss, loss scale and the
 * gradient histogram against binary16's bands.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ampc/ampc.h"
#include "ampc/plot.h"
#include "train.h"

static const char k_usage[] =
    "Usage: ampc compare --out DIR [--run LABEL='FLAGS']... [train flags]\n"
    "\n"
    "Train the same model on the same data, seed and steps in several precisions,\n"
    "one process each, and write side by side:\n"
    "  DIR/summary.json   {\"runs\":[{\"label\",\"flags\",\"final_loss\",\"eval\",\n"
    "                     \"skipped_steps\",\"verdicts\",\"ms_per_step\",\n"
    "                     \"peak_rss_bytes\"},...]}\n"
    "  DIR/report.md      the same as a table, with each run's diagnosis\n"
    "  DIR/loss.png       training loss of every run\n"
    "  DIR/scale.png      loss scale over the steps, skipped steps marked\n"
    "  DIR/grad_hist.png  log2|g| per branch (from the 32-true run if there is one:\n"
    "                     the true gradients) against binary16's normal, subnormal\n"
    "                     and flushed-to-zero bands\n"
    "  DIR/LABEL.jsonl    each run's metrics log; DIR/LABEL.txt its messages\n"
    "\n"
    "Default runs (the seed experiment, plus bfloat16 and pure FP16):\n"
    "  32-true            --precision 32-true            (FP32 baseline)\n"
    "  16-mixed-noscale   --precision 16-mixed --loss-scale none   (run A)\n"
    "  16-mixed           --precision 16-mixed           (run B: dynamic scaling)\n"
    "  bf16-mixed         --precision bf16-mixed\n"
    "  16-true            --precision 16-true\n"
    "  --run LABEL='FLAGS'  replace the list (repeat it; LABEL: letters, digits,\n"
    "                     '.', '_', '-'; FLAGS: `ampc train` flags split on spaces)\n"
    "Every other flag goes to `ampc train` for every run (before the run's own), e.g.\n"
    "  ampc compare --out cmp --steps 150 --batch 32\n"
    "(see `ampc train --help`; --log, --json and --save are set by compare).\n"
    "\n"
    "Exit status: 0 when every run finished (whatever its verdict), 1 when a run\n"
    "failed or an output cannot be written, 2 bad usage (also when every run\n"
    "refused its flags, e.g. a model the data cannot feed).\n";

enum { MAX_RUNS = 16, MAX_ARGS = 256 };

typedef struct {
  char label[64];
  char flags[512];
  char log[4096];
  cJSON *summary; /* the run's summary (owned), NULL if it failed */
  int status;
  ampc_diag *diag;
} run_t;

static int label_ok(const char *s, size_t n) {
  if (n == 0 || n >= 64)
    return 0;
  for (size_t i = 0; i < n; i++) {
    const char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

/* split s on spaces into argv (modifies s); returns the count or -1 */
static int split(char *s, char **argv, int max) {
  int n = 0;
  for (char *tok = strtok(s, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (n >= max)
      return -1;
    argv[n++] = tok;
  }
  return n;
}

/* argv of run r's `ampc train`: "ampc", "train", the common flags, the run's
 * own (split into flags, a copy of r->flags); NULL-terminated. Returns the
 * count, or -1 with too many flags. */
static int train_argv(const run_t *r, char **common, int nc, char *flags, char **args) {
  snprintf(flags, sizeof r->flags, "%s", r->flags);
  int na = 0;
  args[na++] = "ampc";
  args[na++] = "train";
  /* a comparison shows failing runs to the end (a flag of the user's can
   * still say --on-stall stop) */
  args[na++] = "--on-stall=warn";
  for (int i = 0; i < nc; i++)
    args[na++] = common[i];
  const int nf = split(flags, args + na, MAX_ARGS - na);
  if (nf < 0)
    return -1;
  args[na + nf] = NULL;
  return na + nf;
}

/* Run `ampc train` with args; its stdout (the summary JSON) into *out, its
 * stderr into errpath. Returns the exit status (or -1 if it could not run). */
static int run_child(char **args, const char *errpath, char **out) {
  int fd[2];
  *out = NULL;
  if (pipe(fd) != 0)
    return -1;
  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]), close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    FILE *e = fopen(errpath, "w");
    if (e)
      dup2(fileno(e), 2);
    dup2(fd[1], 1);
    close(fd[0]), close(fd[1]);
    execv("/proc/self/exe", args);
    fprintf(stderr, "ampc compare: cannot run /proc/self/exe: %s\n", strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  ssize_t r;
  while (buf && (r = read(fd[0], buf + len, cap - len - 1)) != 0) {
    if (r < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    len += (size_t)r;
    if (cap - len < 2) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb, cap *= 2;
    }
  }
  close(fd[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (buf)
    buf[len] = '\0';
  *out = buf;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static double jnum(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : (double)NAN;
}

/* ---- plots ---------------------------------------------------------------------- */

static int plot_loss_and_scale(const char *dir, run_t *runs, int n) {
  ampc_plot_series ls[MAX_RUNS], ss[(2 + AMPC_BRANCH_COUNT) * MAX_RUNS];
  double *bufs[(5 + AMPC_BRANCH_COUNT) * MAX_RUNS] = {0};
  int nl = 0, ns = 0, nb = 0, ok = 1;
  char *skip_labels[MAX_RUNS] = {0};
  char branch_labels[MAX_RUNS][AMPC_BRANCH_COUNT][96];
  for (int r = 0; r < n; r++) {
    if (!runs[r].diag)
      continue;
    const int64_t m = ampc_diag_steps(runs[r].diag);
    double *x = malloc((size_t)(m + 1) * sizeof *x), *y = malloc((size_t)(m + 1) * sizeof *y);
    double *sx = malloc((size_t)(m + 1) * sizeof *sx), *sy = malloc((size_t)(m + 1) * sizeof *sy);
    bufs[nb++] = x, bufs[nb++] = y, bufs[nb++] = sx, bufs[nb++] = sy;
    if (!x || !y || !sx || !sy) {
      ok = 0;
      break;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < m; i++) {
      const ampc_diag_step *s = ampc_diag_step_at(runs[r].diag, i);
      x[i] = (double)s->step, y[i] = s->loss, sy[i] = s->loss_scale;
      if (s->skipped)
        sx[k++] = (double)s->step;
    }
    ls[nl++] = (ampc_plot_series){runs[r].label, m, x, y, 0};
    if (ampc_diag_get_config(runs[r].diag)->loss_scale_mode == AMPC_LOSS_SCALE_PER_BRANCH) {
      /* one line per branch: the heads' is the losses' seed (loss_scale) */
      for (int b = 0; b < AMPC_BRANCH_COUNT && ok; b++) {
        double *by = malloc((size_t)(m + 1) * sizeof *by);
        if (!by) {
          ok = 0;
          break;
        }
        bufs[nb++] = by;
        for (int64_t i = 0; i < m; i++)
          by[i] = ampc_diag_step_at(runs[r].diag, i)->branch_scale[b];
        snprintf(branch_labels[r][b], sizeof branch_labels[r][b], "%s: %s", runs[r].label,
                 ampc_branch_name((ampc_branch)b));
        ss[ns++] = (ampc_plot_series){branch_labels[r][b], m, x, by, 0};
      }
      if (!ok)
        break;
    } else {
      ss[ns++] = (ampc_plot_series){runs[r].label, m, x, sy, 0};
    }
    if (k > 0) {
      double *ky = malloc((size_t)k * sizeof *ky);
      skip_labels[r] = malloc(96);
      if (!ky || !skip_labels[r]) {
        free(ky);
        ok = 0;
        break;
      }
      for (int64_t i = 0, j = 0; i < m && j < k; i++) {
        const ampc_diag_step *s = ampc_diag_step_at(runs[r].diag, i);
        if (s->skipped)
          ky[j++] = s->loss_scale;
      }
      bufs[nb++] = ky;
      snprintf(skip_labels[r], 96, "%s: skipped", runs[r].label);
      ss[ns++] = (ampc_plot_series){skip_labels[r], k, sx, ky, 1};
    }
  }
  char path[4200];
  if (ok && nl > 0) {
    snprintf(path, sizeof path, "%s/loss.png", dir);
    if (ampc_plot_lines(path, "training loss", "step", "loss", ls, nl, 0) != AMPC_OK)
      ok = 0;
    snprintf(path, sizeof path, "%s/scale.png", dir);
    if (ok && ampc_plot_lines(path, "loss scale (skipped steps marked)", "step", "loss scale", ss,
                              ns, 1) != AMPC_OK)
      ok = 0;
  }
  for (int i = 0; i < nb; i++)
    free(bufs[i]);
  for (int r = 0; r < n; r++)
    free(skip_labels[r]);
  return ok;
}

static int plot_hist(const char *dir, run_t *runs, int n) {
  int pick = -1;
  for (int r = 0; r < n && pick < 0; r++)
    if (runs[r].diag && !strcmp(ampc_diag_get_config(runs[r].diag)->precision, "32-true"))
      pick = r;
  for (int r = 0; r < n && pick < 0; r++)
    if (runs[r].diag)
      pick = r;
  if (pick < 0)
    return 2;
  int lo = AMPC_TM_BINS, hi = -1;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    const ampc_tm_stats *g = ampc_diag_grad_stats(runs[pick].diag, b);
    for (int i = 0; i < AMPC_TM_BINS; i++)
      if (g->hist[i]) {
        lo = i < lo ? i : lo;
        hi = i > hi ? i : hi;
      }
  }
  if (hi < 0)
    return 2; /* no telemetry in that run (e.g. the mlp model): nothing to draw */
  /* the far left tail (the smallest 1e-5 of the non-zero values, e.g. stray
   * 2^-100 products) would squeeze the plot: start where the mass starts */
  {
    uint64_t tot = 0, cum = 0;
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      for (int i = lo; i <= hi; i++)
        tot += ampc_diag_grad_stats(runs[pick].diag, b)->hist[i];
    for (int i = lo; i <= hi; i++) {
      for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
        cum += ampc_diag_grad_stats(runs[pick].diag, b)->hist[i];
      if ((double)cum >= 1e-5 * (double)tot) {
        lo = i;
        break;
      }
    }
  }
  /* show binary16's bands even when the gradients do not reach them */
  lo = lo > 127 - 30 ? 127 - 30 : lo;
  hi = hi < 127 + 17 ? 127 + 17 : hi;
  ampc_plot_hist h[AMPC_BRANCH_COUNT];
  uint64_t *c[AMPC_BRANCH_COUNT] = {0};
  int nh = 0, ok = 1;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    const ampc_tm_stats *g = ampc_diag_grad_stats(runs[pick].diag, b);
    if (!g->r.count)
      continue;
    c[nh] = calloc((size_t)(hi - lo + 1), sizeof(uint64_t));
    if (!c[nh]) {
      ok = 0;
      break;
    }
    memcpy(c[nh], &g->hist[lo], (size_t)(hi - lo + 1) * sizeof(uint64_t));
    h[nh] = (ampc_plot_hist){ampc_branch_name((ampc_branch)b), c[nh], g->zeros};
    nh++;
  }
  char path[4200], title[160];
  snprintf(path, sizeof path, "%s/grad_hist.png", dir);
  snprintf(title, sizeof title, "log2|gradient| per branch, run %s (loss scale included)",
           runs[pick].label);
  if (ok && nh > 0 && ampc_plot_log2_hist(path, title, lo - 127, hi - lo + 1, h, nh) != AMPC_OK)
    ok = 0;
  for (int i = 0; i < AMPC_BRANCH_COUNT; i++)
    free(c[i]);
  return ok;
}

/* ---- report ---------------------------------------------------------------------- */

static void fmt_eval(char *buf, size_t cap, const cJSON *m) {
  const cJSON *zs = cJSON_GetObjectItemCaseSensitive(m, "zero_shot");
  const cJSON *ns = cJSON_GetObjectItemCaseSensitive(m, "new_style");
  if (zs && ns)
    snprintf(buf, cap, "new-style R@1 i2t %.4f, zero-shot R@1 i2t %.4f / R@5 %.4f, group %.3f",
             jnum(ns, "i2t_r1"), jnum(zs, "i2t_r1"), jnum(zs, "i2t_r5"), jnum(ns, "group_acc"));
  else if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(m, "test_accuracy")))
    snprintf(buf, cap, "test accuracy %.4f", jnum(m, "test_accuracy"));
  else
    snprintf(buf, cap, "-");
}

static int write_outputs(const char *dir, run_t *runs, int n) {
  cJSON *root = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(root, "runs");
  char path[4200];
  snprintf(path, sizeof path, "%s/report.md", dir);
  FILE *md = fopen(path, "w");
  if (!md) {
    cJSON_Delete(root);
    return cli_runtime_error("compare", "cannot write %s: %s", path, strerror(errno));
  }
  fprintf(md, "# ampc compare\n\n| run | flags | final loss | eval | skipped | verdicts | ms/step "
              "| peak RSS (MiB) |\n|---|---|---:|---|---:|---|---:|---:|\n");
  /* the FP32 twin: the first 32-true run (the cross-run verdicts of issue 18) */
  int base = -1;
  for (int r = 0; r < n && base < 0; r++)
    if (runs[r].status == 0 && runs[r].diag &&
        !strcmp(ampc_diag_get_config(runs[r].diag)->precision, "32-true"))
      base = r;
  ampc_diag_gap *gaps = calloc((size_t)n, sizeof *gaps);
  ampc_verdict *gv = calloc((size_t)n, sizeof *gv);
  int *ngv = calloc((size_t)n, sizeof *ngv);
  bool *have_gap = calloc((size_t)n, sizeof *have_gap);
  if (!gaps || !gv || !ngv || !have_gap) {
    free(gaps), free(gv), free(ngv), free(have_gap);
    fclose(md);
    cJSON_Delete(root);
    return cli_runtime_error("compare", "out of memory");
  }
  char(*gap_err)[200] = calloc((size_t)n, sizeof *gap_err);
  for (int r = 0; r < n; r++) {
    if (base < 0 || r == base || runs[r].status != 0 || !runs[r].diag)
      continue;
    have_gap[r] = gap_err && ampc_diag_compare(runs[r].diag, runs[base].diag, 0.01, &gaps[r],
                                               &gv[r], &ngv[r]) == AMPC_OK;
    if (!have_gap[r] && gap_err)
      snprintf(gap_err[r], sizeof gap_err[r], "%s", ampc_last_error());
  }
  for (int r = 0; r < n; r++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "label", runs[r].label);
    cJSON_AddStringToObject(o, "flags", runs[r].flags);
    const cJSON *s = runs[r].summary;
    cJSON *verdicts = cJSON_CreateArray();
    char vtxt[256] = "";
    const cJSON *dg = cJSON_GetObjectItemCaseSensitive(s, "diagnosis");
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(dg, "verdicts");
    const cJSON *v;
    cJSON_ArrayForEach(v, vs) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "verdict");
      if (cJSON_IsString(nm)) {
        cJSON_AddItemToArray(verdicts, cJSON_CreateString(nm->valuestring));
        const size_t l = strlen(vtxt);
        snprintf(vtxt + l, sizeof vtxt - l, "%s%s", l ? ", " : "", nm->valuestring);
      }
    }
    const double steps = jnum(s, "steps");
    double ms = jnum(s, "ms_per_step_mean");
    if (!isfinite(ms))
      ms = jnum(s, "wall_s") * 1e3 / (steps > 0 ? steps : 1.0);
    const double loss = jnum(s, "final_train_loss");
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(s, "metrics");
    if (!metrics && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(s, "test_accuracy"))) {
      cJSON *m = cJSON_CreateObject();
      cJSON_AddNumberToObject(m, "test_accuracy", jnum(s, "test_accuracy"));
      cJSON_AddNumberToObject(m, "test_loss", jnum(s, "test_loss"));
      cJSON_AddItemToObject(o, "eval", m);
    } else {
      cJSON_AddItemToObject(o, "eval",
                            metrics ? cJSON_Duplicate(metrics, 1) : cJSON_CreateObject());
    }
    cJSON_AddNumberToObject(o, "final_loss", loss);
    cJSON_AddNumberToObject(o, "skipped_steps", jnum(s, "skipped_steps"));
    cJSON_AddItemToObject(o, "verdicts", verdicts);
    cJSON_AddNumberToObject(o, "ms_per_step", ms);
    cJSON_AddNumberToObject(o, "peak_rss_bytes", jnum(s, "peak_rss_bytes"));
    if (runs[r].status != 0)
      cJSON_AddNumberToObject(o, "exit_status", runs[r].status);
    if (dg)
      cJSON_AddItemToObject(o, "diagnosis", cJSON_Duplicate(dg, 1));
    if (have_gap[r]) {
      cJSON *g = cJSON_AddObjectToObject(o, "vs_fp32");
      cJSON_AddStringToObject(g, "baseline", runs[base].label);
      cJSON_AddBoolToObject(g, "finite", gaps[r].finite);
      cJSON_AddStringToObject(g, "quantity", gaps[r].quantity);
      cJSON_AddNumberToObject(g, "first_step", (double)gaps[r].first_step);
      cJSON_AddNumberToObject(g, "last_step", (double)gaps[r].last_step);
      cJSON_AddNumberToObject(g, "loss", gaps[r].run_loss);
      cJSON_AddNumberToObject(g, "baseline_loss", gaps[r].base_loss);
      cJSON_AddNumberToObject(g, "diff", gaps[r].diff);
      cJSON_AddNumberToObject(g, "diff_se", gaps[r].diff_se);
      cJSON_AddNumberToObject(g, "rel", gaps[r].rel);
      cJSON_AddNumberToObject(g, "window", (double)gaps[r].window);
      cJSON_AddBoolToObject(g, "significant", gaps[r].significant);
      if (ngv[r])
        cJSON_AddStringToObject(g, "verdict", ampc_verdict_name(gv[r].kind));
      else
        cJSON_AddNullToObject(g, "verdict");
    } else if (gap_err && gap_err[r][0]) {
      cJSON *g = cJSON_AddObjectToObject(o, "vs_fp32");
      cJSON_AddStringToObject(g, "baseline", runs[base].label);
      cJSON_AddStringToObject(g, "error", gap_err[r]);
    }
    cJSON_AddItemToArray(arr, o);
    char evtxt[256];
    fmt_eval(evtxt, sizeof evtxt, cJSON_GetObjectItemCaseSensitive(o, "eval"));
    if (runs[r].status != 0)
      fprintf(md, "| %s | `%s` | failed (exit %d, see %s.txt) | | | | | |\n", runs[r].label,
              runs[r].flags, runs[r].status, runs[r].label);
    else
      fprintf(md, "| %s | `%s` | %.4f | %s | %.0f | %s | %.0f | %.1f |\n", runs[r].label,
              runs[r].flags, loss, evtxt, jnum(s, "skipped_steps"), vtxt, ms,
              jnum(s, "peak_rss_bytes") / 1048576.0);
  }
  if (base >= 0) {
    fprintf(md,
            "\n## Against the FP32 baseline (%s)\n\nThe same batches in each twin (the same "
            "model, data, steps, batch, seed and optimizer, checked): the per-step loss "
            "difference over the last tenth of the steps; a verdict when it "
            "exceeds 1 %% and 3 standard errors with no non-finite loss or weight and every "
            "overflow skipped (`ampc diagnose "
            "LABEL.jsonl --baseline %s.jsonl`). The total loss is compared, or, when it "
            "shows no gap, the loss term with the largest one.\n\n| run | compared | loss | "
            "FP32 loss | difference | verdict |\n|---|---|---:|---:|---:|---|\n",
            runs[base].label, runs[base].label);
    for (int r = 0; r < n; r++) {
      if (have_gap[r] && !gaps[r].finite)
        fprintf(md, "| %s | - | - | - | - | not compared: non-finite values (its own verdicts) |\n",
                runs[r].label);
      else if (have_gap[r])
        fprintf(md, "| %s | %s | %.5g | %.5g | %+.3g (%+.2f %%) +- %.2g | %s |\n", runs[r].label,
                gaps[r].quantity, gaps[r].run_loss, gaps[r].base_loss, gaps[r].diff,
                100.0 * gaps[r].rel, gaps[r].diff_se,
                ngv[r]               ? ampc_verdict_name(gv[r].kind)
                : gaps[r].diff < 0.0 ? "no gap (below the FP32 loss)"
                                     : "no gap (within the margin)");
      else if (gap_err && gap_err[r][0])
        fprintf(md, "| %s | - | - | - | - | not compared: %s |\n", runs[r].label, gap_err[r]);
    }
  }
  fprintf(md, "\nPlots: `loss.png`, `scale.png`, `grad_hist.png` (the last only when a run "
              "sampled rounding telemetry). Logs: `LABEL.jsonl` (`ampc diagnose "
              "DIR/LABEL.jsonl` explains a verdict).\n\n## Diagnoses\n");
  for (int r = 0; r < n; r++) {
    fprintf(md, "\n### %s\n\n", runs[r].label);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(runs[r].summary, "diagnosis"), "verdicts");
    const cJSON *v;
    cJSON_ArrayForEach(v, vs) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "verdict");
      const cJSON *sg = cJSON_GetObjectItemCaseSensitive(v, "safeguard");
      fprintf(md, "- **%s**\n", cJSON_IsString(nm) ? nm->valuestring : "?");
      const cJSON *e;
      cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(v, "evidence")) {
        if (cJSON_IsString(e))
          fprintf(md, "  - %s\n", e->valuestring);
      }
      if (cJSON_IsString(sg))
        fprintf(md, "  - safeguard: %s\n", sg->valuestring);
    }
    if (have_gap[r] && ngv[r]) {
      fprintf(md, "- **%s** (against %s)\n", ampc_verdict_name(gv[r].kind), runs[base].label);
      for (int k = 0; k < gv[r].n_evidence; k++)
        fprintf(md, "  - %s\n", gv[r].evidence[k]);
      if (gv[r].safeguard[0])
        fprintf(md, "  - safeguard: %s\n", gv[r].safeguard);
    }
  }
  free(gaps), free(gv), free(ngv), free(have_gap), free(gap_err);
  const int bad = ferror(md);
  if (fclose(md) != 0 || bad) {
    cJSON_Delete(root);
    return cli_runtime_error("compare", "cannot write %s", path);
  }
  snprintf(path, sizeof path, "%s/summary.json", dir);
  char *txt = cJSON_Print(root);
  cJSON_Delete(root);
  FILE *f = txt ? fopen(path, "w") : NULL;
  const int wok = f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF;
  free(txt);
  if (!f || fclose(f) != 0 || !wok)
    return cli_runtime_error("compare", "cannot write %s", path);
  return AMPC_EXIT_OK;
}

static int run(int argc, char **argv) {
  const char *out = NULL;
  run_t *runs = calloc(MAX_RUNS, sizeof *runs);
  char **common = calloc(MAX_ARGS, sizeof *common);
  if (!runs || !common) {
    free(runs), free(common);
    return cli_runtime_error("compare", "out of memory");
  }
  int nr = 0, nc = 0, ret = AMPC_EXIT_OK;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      fputs(k_usage, stdout);
      goto done;
    }
    if (!strcmp(a, "--out") || !strcmp(a, "--run")) {
      if (i + 1 >= argc) {
        ret = cli_usage_error("compare", "%s needs a value", a);
        goto done;
      }
      const char *v = argv[++i];
      if (!strcmp(a, "--out")) {
        out = v;
        continue;
      }
      const char *eq = strchr(v, '=');
      if (!eq || !label_ok(v, (size_t)(eq - v))) {
        ret = cli_usage_error("compare",
                              "--run: expected LABEL='FLAGS' with LABEL of letters, "
                              "digits, '.', '_', '-' (got '%s')",
                              v);
        goto done;
      }
      if (nr >= MAX_RUNS || strlen(eq + 1) >= sizeof runs[0].flags) {
        ret = cli_usage_error("compare", "--run: at most %d runs of at most %zu characters",
                              MAX_RUNS, sizeof runs[0].flags - 1);
        goto done;
      }
      for (int r = 0; r < nr; r++)
        if (!strncmp(runs[r].label, v, (size_t)(eq - v)) &&
            strlen(runs[r].label) == (size_t)(eq - v)) {
          ret = cli_usage_error("compare", "--run: label '%s' given twice", runs[r].label);
          goto done;
        }
      snprintf(runs[nr].label, sizeof runs[nr].label, "%.*s", (int)(eq - v), v);
      snprintf(runs[nr].flags, sizeof runs[nr].flags, "%s", eq + 1);
      nr++;
      continue;
    }
    if (!strcmp(a, "--log") || !strcmp(a, "--json") || !strcmp(a, "--save") ||
        !strcmp(a, "--checkpoint") || !strcmp(a, "--resume")) {
      ret = cli_usage_error("compare", "%s is set by compare (logs go to --out DIR)", a);
      goto done;
    }
    if (nc >= MAX_ARGS - 64) {
      ret = cli_usage_error("compare", "too many flags");
      goto done;
    }
    common[nc++] = argv[i];
  }
  if (!out) {
    ret = cli_usage_error("compare", "missing --out DIR");
    goto done;
  }
  if (nr == 0) {
    static const char *defl[][2] = {{"32-true", "--precision 32-true"},
                                    {"16-mixed-noscale", "--precision 16-mixed --loss-scale none"},
                                    {"16-mixed", "--precision 16-mixed"},
                                    {"bf16-mixed", "--precision bf16-mixed"},
                                    {"16-true", "--precision 16-true"}};
    for (int r = 0; r < 5; r++) {
      snprintf(runs[r].label, sizeof runs[r].label, "%s", defl[r][0]);
      snprintf(runs[r].flags, sizeof runs[r].flags, "%s", defl[r][1]);
    }
    nr = 5;
  }
  /* every run's flags must parse before any run starts */
  for (int r = 0; r < nr; r++) {
    char *args[MAX_ARGS + 8];
    char flags[sizeof runs[0].flags];
    const int na = train_argv(&runs[r], common, nc, flags, args);
    if (na < 0) {
      ret = cli_usage_error("compare", "--run %s: too many flags", runs[r].label);
      goto done;
    }
    char ctx[96];
    snprintf(ctx, sizeof ctx, "in the flags of run %s", runs[r].label);
    cli_usage_context = ctx; /* printed with the error, before the hint */
    const int rc = train_check_args(na - 1, args + 1);
    cli_usage_context = NULL;
    if (rc != AMPC_EXIT_OK) {
      ret = AMPC_EXIT_USAGE;
      goto done;
    }
  }
  if (mkdir(out, 0777) != 0 && errno != EEXIST) {
    ret = cli_runtime_error("compare", "cannot create %s: %s", out, strerror(errno));
    goto done;
  }
  struct stat stt;
  if (stat(out, &stt) != 0 || !S_ISDIR(stt.st_mode)) {
    ret = cli_runtime_error("compare", "%s is not a directory", out);
    goto done;
  }
  {
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.ampc-compare-probe", out);
    FILE *pf = fopen(probe, "w");
    if (!pf) {
      ret = cli_runtime_error("compare", "cannot write in %s: %s", out, strerror(errno));
      goto done;
    }
    fclose(pf);
    unlink(probe);
  }
  for (int r = 0; r < nr; r++) {
    char *args[MAX_ARGS + 8];
    char flags[sizeof runs[0].flags];
    int na = train_argv(&runs[r], common, nc, flags, args); /* checked above */
    snprintf(runs[r].log, sizeof runs[r].log, "%s/%s.jsonl", out, runs[r].label);
    char errpath[4200];
    snprintf(errpath, sizeof errpath, "%s/%s.txt", out, runs[r].label);
    args[na++] = "--log";
    args[na++] = runs[r].log;
    args[na++] = "--json";
    args[na] = NULL;
    fprintf(stderr, "ampc compare: run %d/%d %s: %s\n", r + 1, nr, runs[r].label, runs[r].flags);
    char *txt = NULL;
    runs[r].status = run_child(args, errpath, &txt);
    runs[r].summary = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (runs[r].status != 0 || !runs[r].summary) {
      if (runs[r].status == 0)
        runs[r].status = -1;
      fprintf(stderr, "ampc compare: run %s failed (exit %d); its messages are in %s\n",
              runs[r].label, runs[r].status, errpath);
      ret = AMPC_EXIT_ERROR;
      continue;
    }
    if (ampc_diag_read_log(runs[r].log, &runs[r].diag) != AMPC_OK) {
      fprintf(stderr, "ampc compare: %s\n", ampc_last_error());
      ret = AMPC_EXIT_ERROR;
    }
    const cJSON *dg = cJSON_GetObjectItemCaseSensitive(runs[r].summary, "diagnosis");
    const cJSON *vd = cJSON_GetObjectItemCaseSensitive(dg, "verdict");
    fprintf(stderr, "ampc compare:   final loss %.4f, %g skipped, verdict %s\n",
            jnum(runs[r].summary, "final_train_loss"), jnum(runs[r].summary, "skipped_steps"),
            cJSON_IsString(vd) ? vd->valuestring : "?");
  }
  int refused = 0; /* runs that exited 2: train refused the flags with the data */
  for (int r = 0; r < nr; r++)
    refused += runs[r].status == AMPC_EXIT_USAGE;
  if (refused == nr) { /* the same reason each time, most likely: show the first's */
    char path[4200], msg[512];
    snprintf(path, sizeof path, "%s/%s.txt", out, runs[0].label);
    FILE *ef = fopen(path, "r");
    const size_t got = ef ? fread(msg, 1, sizeof msg - 1, ef) : 0;
    if (ef)
      fclose(ef);
    msg[got] = '\0';
    fprintf(stderr, "ampc compare: every run refused its flags (exit 2); run %s said:\n%s",
            runs[0].label, msg);
    ret = AMPC_EXIT_USAGE;
  }
  const int wr = write_outputs(out, runs, nr);
  int any = 0;
  for (int r = 0; r < nr; r++)
    any |= runs[r].diag != NULL;
  const int pl = wr == AMPC_EXIT_OK && any ? plot_loss_and_scale(out, runs, nr) : 1;
  const int ph = wr == AMPC_EXIT_OK && any && pl ? plot_hist(out, runs, nr) : 2;
  if (wr != AMPC_EXIT_OK)
    ret = wr;
  else if (!pl || !ph)
    ret = cli_runtime_error("compare", "plots: %s", ampc_last_error());
  else
    fprintf(stderr, "ampc compare: wrote %s/summary.json, report.md%s%s\n", out,
            any ? ", loss.png, scale.png" : " (no run finished: no plots)",
            ph == 1 ? ", grad_hist.png"
                    : (any ? " (no grad_hist.png: no run sampled rounding telemetry; the mlp "
                             "model has none)"
                           : ""));
done:
  for (int r = 0; r < MAX_RUNS; r++) {
    cJSON_Delete(runs[r].summary);
    ampc_diag_free(runs[r].diag);
  }
  free(runs), free(common);
  return ret;
}

const ampc_command ampc_cmd_compare = {
    .name = "compare",
    .summary = "train several precisions side by side: summary, report, plots",
    .usage = k_usage,
    .run = run,
};
