/*
 * tools/ampc/cmd_compare.c: `ampc compare --out DIR [--run LABEL='flags']...
 * [train flags]`: the same training run in several precisions side by side
 * (the experiment of Micikevicius et al. 2018: an FP32 baseline, FP16 without
 * loss scaling, FP16 with it), then a summary, a report and plots of loss,
 * loss scale and the gradient histogram against binary16's bands. Each run's
 * flags are `ampc train`'s (tools/ampc/train.h turns them into runs); the
 * runs and the comparison with the FP32 twin are the library's
 * ampc_compare_run, as for `ampc train --precision A,B`.
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
#include <unistd.h>

#include "ampc/ampc.h"
#include "ampc/plot.h"
#include "train.h"

static const char k_usage[] =
    "Usage: ampc compare --out DIR [--run LABEL='FLAGS']... [train flags]\n"
    "\n"
    "Train the same model on the same data, seed and steps in several precisions,\n"
    "one after another, and write side by side:\n"
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
    "A run that can no longer learn (non-finite weights, a loss scale stuck at its\n"
    "floor) stops there (--on-stall stop; --on-stall warn runs it to the end) and\n"
    "its row says where and why; the next run goes on.\n"
    "\n"
    "Exit status: 0 when every run finished or stopped at its stall (whatever its\n"
    "verdict), 1 when a run failed or an output cannot be written, 2 bad usage\n"
    "(also when every run refused its flags, e.g. a model the data cannot feed).\n";

enum { MAX_RUNS = 16, MAX_ARGS = 256, PATH_CAP = 4200 };

typedef struct {
  char label[64];
  char flags[512];
  char split[512];                /* flags, split in place: args point into it */
  char *args[MAX_ARGS + 8];       /* "train", the common flags, the run's own */
  train_args A;                   /* parsed from args */
  train_inputs in;                /* its data and model */
  char log[PATH_CAP];             /* DIR/LABEL.jsonl */
  char txt[PATH_CAP];             /* DIR/LABEL.txt: its messages */
  cJSON *summary;                 /* the run's summary (owned), NULL if it failed */
  int status;                     /* as `ampc train` would exit: 0, 1, 2 (refused), 3 (stalled) */
  char why[512];                  /* why it failed, or "" */
  const ampc_compare_result *res; /* NULL: refused before it ran */
  const ampc_diag *diag;          /* its diagnosis read back from its log, or NULL */
  char stall_verdict[64];         /* a stalled run's verdict, "" otherwise */
  cJSON *stall_diag;              /* a stalled run's diagnosis at its stall (owned), else NULL */
  int64_t stall_step;             /* the step it stopped after */
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

/* r->args: "train", "--on-stall=stop", the common flags, the run's own
 * (split on spaces into r->split); NULL-terminated. Returns the count, or
 * -1 with too many flags. */
static int train_argv(run_t *r, char **common, int nc) {
  snprintf(r->split, sizeof r->split, "%s", r->flags);
  int na = 0;
  r->args[na++] = "train";
  /* a run that can no longer learn (non-finite weights, a loss scale stuck
   * at its floor) stops there and is reported with its diagnosis, not run to
   * the end (a flag of the user's can still say --on-stall warn) */
  r->args[na++] = "--on-stall=stop";
  for (int i = 0; i < nc; i++)
    r->args[na++] = common[i];
  for (char *tok = strtok(r->split, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (na >= MAX_ARGS)
      return -1;
    r->args[na++] = tok;
  }
  r->args[na] = NULL;
  return na;
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

/* DIR/report.md and DIR/summary.json; base: the FP32 twin's run (-1: none) */
static int write_outputs(const char *dir, run_t *runs, int n, int base) {
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
  for (int r = 0; r < n; r++) {
    const ampc_compare_result *x = runs[r].res; /* NULL: refused before it ran */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "label", runs[r].label);
    cJSON_AddStringToObject(o, "flags", runs[r].flags);
    const cJSON *s = runs[r].summary;
    cJSON *verdicts = cJSON_CreateArray();
    char vtxt[256] = "";
    const cJSON *dg = s ? cJSON_GetObjectItemCaseSensitive(s, "diagnosis") : runs[r].stall_diag;
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(dg, "verdicts");
    const cJSON *v;
    int vi = 0;
    cJSON_ArrayForEach(v, vs) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "verdict");
      if (cJSON_IsString(nm)) {
        /* a signature in the counts whose run shows no loss gap: present,
         * not the outcome (the same order as the result's verdicts) */
        const bool harmless = x && vi < x->n_verdicts && x->no_loss_gap[vi];
        cJSON_AddItemToArray(verdicts, cJSON_CreateString(nm->valuestring));
        const size_t l = strlen(vtxt);
        snprintf(vtxt + l, sizeof vtxt - l, "%s%s%s", l ? ", " : "", nm->valuestring,
                 harmless ? " (present, no loss gap)" : "");
      }
      vi++;
    }
    if (x && x->have_gap && x->n_gap_verdicts) { /* worse than the FP32 twin */
      const char *gv = ampc_verdict_name(x->gap_verdict.kind);
      if (!strcmp(vtxt, "healthy"))
        vtxt[0] = '\0';
      const size_t l = strlen(vtxt);
      snprintf(vtxt + l, sizeof vtxt - l, "%s%s", l ? ", " : "", gv);
      cJSON_AddItemToArray(verdicts, cJSON_CreateString(gv));
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
    if (x && x->have_gap) {
      const ampc_diag_gap *gp = &x->gap;
      cJSON *g = cJSON_AddObjectToObject(o, "vs_fp32");
      cJSON_AddStringToObject(g, "baseline", runs[base].label);
      cJSON_AddBoolToObject(g, "finite", gp->finite);
      cJSON_AddStringToObject(g, "quantity", gp->quantity);
      cJSON_AddNumberToObject(g, "first_step", (double)gp->first_step);
      cJSON_AddNumberToObject(g, "last_step", (double)gp->last_step);
      cJSON_AddNumberToObject(g, "loss", gp->run_loss);
      cJSON_AddNumberToObject(g, "baseline_loss", gp->base_loss);
      cJSON_AddNumberToObject(g, "diff", gp->diff);
      cJSON_AddNumberToObject(g, "diff_se", gp->diff_se);
      cJSON_AddNumberToObject(g, "rel", gp->rel);
      cJSON_AddNumberToObject(g, "window", (double)gp->window);
      cJSON_AddBoolToObject(g, "significant", gp->significant);
      if (x->n_gap_verdicts)
        cJSON_AddStringToObject(g, "verdict", ampc_verdict_name(x->gap_verdict.kind));
      else
        cJSON_AddNullToObject(g, "verdict");
    } else if (x && x->gap_error[0]) {
      cJSON *g = cJSON_AddObjectToObject(o, "vs_fp32");
      cJSON_AddStringToObject(g, "baseline", runs[base].label);
      cJSON_AddStringToObject(g, "error", x->gap_error);
    }
    cJSON_AddItemToArray(arr, o);
    char evtxt[256];
    fmt_eval(evtxt, sizeof evtxt, cJSON_GetObjectItemCaseSensitive(o, "eval"));
    if (runs[r].status == AMPC_EXIT_STALLED) /* stopped where it could no longer learn */
      fprintf(md, "| %s | `%s` | stopped at step %lld (stalled, see %s.txt) | | | %s | | |\n",
              runs[r].label, runs[r].flags, (long long)runs[r].stall_step, runs[r].label,
              runs[r].stall_verdict[0] ? runs[r].stall_verdict : "-");
    else if (runs[r].status != 0)
      fprintf(md, "| %s | `%s` | failed (exit %d, see %s.txt) | | | | | |\n", runs[r].label,
              runs[r].flags, runs[r].status, runs[r].label);
    else
      fprintf(md, "| %s | `%s` | %.4f | %s | %.0f | %s | %.*f%s | %.1f |\n", runs[r].label,
              runs[r].flags, loss, evtxt, jnum(s, "skipped_steps"), vtxt, ms < 100.0 ? 1 : 0, ms,
              x && x->timing_disturbed ? " (machine busy)" : "",
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
      const ampc_compare_result *x = runs[r].res;
      const ampc_diag_gap *gp = x ? &x->gap : NULL;
      if (x && x->have_gap && !gp->finite)
        fprintf(md, "| %s | - | - | - | - | not compared: non-finite values (its own verdicts) |\n",
                runs[r].label);
      else if (x && x->have_gap)
        fprintf(md, "| %s | %s | %.5g | %.5g | %+.3g (%+.2f %%) +- %.2g | %s |\n", runs[r].label,
                gp->quantity, gp->run_loss, gp->base_loss, gp->diff, 100.0 * gp->rel, gp->diff_se,
                x->n_gap_verdicts ? ampc_verdict_name(x->gap_verdict.kind)
                : gp->diff < 0.0  ? "no gap (below the FP32 loss)"
                                  : "no gap (within the margin)");
      else if (x && x->gap_error[0])
        fprintf(md, "| %s | - | - | - | - | not compared: %s |\n", runs[r].label, x->gap_error);
      else if (runs[r].status == AMPC_EXIT_STALLED)
        fprintf(md, "| %s | - | - | - | - | not compared: stopped at step %lld (stalled) |\n",
                runs[r].label, (long long)runs[r].stall_step);
    }
  }
  fprintf(md, "\nPlots: `loss.png`, `scale.png`, `grad_hist.png` (the last only when a run "
              "sampled rounding telemetry). Logs: `LABEL.jsonl` (`ampc diagnose "
              "DIR/LABEL.jsonl` explains a verdict).\n\n## Diagnoses\n");
  for (int r = 0; r < n; r++) {
    fprintf(md, "\n### %s\n\n", runs[r].label);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(
        runs[r].summary ? cJSON_GetObjectItemCaseSensitive(runs[r].summary, "diagnosis")
                        : runs[r].stall_diag,
        "verdicts");
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
    const ampc_compare_result *x = runs[r].res;
    if (x && x->have_gap && x->n_gap_verdicts) {
      const ampc_verdict *gv = &x->gap_verdict;
      fprintf(md, "- **%s** (against %s)\n", ampc_verdict_name(gv->kind), runs[base].label);
      for (int k = 0; k < gv->n_evidence; k++)
        fprintf(md, "  - %s\n", gv->evidence[k]);
      if (gv->safeguard[0])
        fprintf(md, "  - safeguard: %s\n", gv->safeguard);
    }
  }
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

/* ---- the runs: ampc_compare_run, each run's messages into DIR/LABEL.txt -------------- */

typedef struct compare_ctx {
  train_printer pr; /* what the train callbacks print through */
  ampc_compare_callbacks train_cb;
  run_t *runs;
  const int *of_spec; /* spec k -> its run */
  int nr;
  FILE *msg;    /* the current run's DIR/LABEL.txt */
  int cur;      /* the run in progress */
  bool tty;     /* stderr is a terminal: one rewritten progress line */
  int64_t tick; /* a pipe: the last step a progress line was printed at */
} compare_ctx;

/* run r is about to start: say so, open its messages file */
static void begin_run(compare_ctx *cx, int r) {
  cx->cur = r, cx->tick = 0;
  fprintf(stderr, "ampc compare: run %d/%d %s: %s\n", r + 1, cx->nr, cx->runs[r].label,
          cx->runs[r].flags);
  if (!cx->msg)
    cx->msg = fopen(cx->runs[r].txt, "w");
  FILE *f = cx->msg ? cx->msg : stderr;
  train_printer_set(&cx->pr, &cx->runs[r].A, f, f, cx->runs[r].A.quiet, true);
  cx->pr.tty = false; /* the progress goes to the file */
}

/* each run's progress on the console as it trains (its full lines go to
 * DIR/LABEL.txt): one rewritten line on a terminal, a line every tenth of
 * the steps on a pipe */
static void on_step_stream(void *user, const ampc_run *R, const ampc_run_progress *p) {
  compare_ctx *cx = user;
  cx->train_cb.run.step(&cx->pr, R, p);
  const run_t *r = &cx->runs[cx->cur];
  const int64_t it = p->info->iteration, steps = r->A.steps;
  const double eta = train_eta_s(p);
  const int64_t every = steps >= 10 ? steps / 10 : 1;
  if (cx->tty)
    fprintf(stderr, "\rampc compare:   %s step %lld/%lld  loss %.4f  skipped %lld  ETA %.0f s%s   ",
            r->label, (long long)it, (long long)steps, (double)p->losses->total,
            (long long)p->skipped, eta, p->evals_done == 0 && p->evals_left > 0 ? " + eval" : "");
  else if (it / every != cx->tick / every || it == p->end) {
    fprintf(stderr, "ampc compare:   %s step %lld/%lld  loss %.4f  skipped %lld  ETA %.0f s%s\n",
            r->label, (long long)it, (long long)steps, (double)p->losses->total,
            (long long)p->skipped, eta, p->evals_done == 0 && p->evals_left > 0 ? " + eval" : "");
    cx->tick = it;
  }
}

static void on_eval_stream(void *user, const ampc_run *R, int64_t iteration, double fraction) {
  compare_ctx *cx = user;
  (void)R;
  if (cx->tty)
    fprintf(stderr, "\rampc compare:   %s eval @%lld  %3.0f %%%-40s", cx->runs[cx->cur].label,
            (long long)iteration, 100.0 * fraction, "");
}

static void on_start(void *user, int k, ampc_run *R) {
  compare_ctx *cx = user;
  begin_run(cx, cx->of_spec[k]);
  cx->train_cb.run_start(&cx->pr, k, R);
}

/* a run's outcome: failed ones with their message in DIR/LABEL.txt */
static void end_run(compare_ctx *cx, run_t *r) {
  if (cx->tty) /* end the rewritten progress line */
    fputc('\n', stderr);
  if (r->status != 0 && cx->msg)
    fprintf(cx->msg, "ampc train: %s\n", r->why);
  if (cx->msg)
    fclose(cx->msg);
  cx->msg = NULL;
  if (r->status == AMPC_EXIT_STALLED)
    fprintf(stderr,
            "ampc compare: run %s stopped at step %lld: it can no longer learn (%s); its "
            "messages are in %s; going on with the next run\n",
            r->label, (long long)r->stall_step, r->stall_verdict[0] ? r->stall_verdict : "stall",
            r->txt);
  else if (r->status != 0)
    fprintf(stderr, "ampc compare: run %s failed (exit %d); its messages are in %s\n", r->label,
            r->status, r->txt);
}

static void on_end(void *user, int k, ampc_run *R, const ampc_compare_result *res) {
  compare_ctx *cx = user;
  run_t *r = &cx->runs[cx->of_spec[k]];
  if (!R) /* ampc_run_create refused it: not started */
    begin_run(cx, cx->of_spec[k]);
  r->status = res->status == AMPC_OK ? 0
              : res->refused         ? AMPC_EXIT_USAGE
              : res->stalled         ? AMPC_EXIT_STALLED
                                     : AMPC_EXIT_ERROR;
  snprintf(r->why, sizeof r->why, "%s", res->error);
  if (res->stalled && R) { /* its diagnosis at the stall */
    ampc_verdict v[AMPC_VERDICT_COUNT];
    const int nv = ampc_diag_verdicts(ampc_run_diag(R), v, AMPC_VERDICT_COUNT);
    if (nv > 0)
      snprintf(r->stall_verdict, sizeof r->stall_verdict, "%s", ampc_verdict_name(v[0].kind));
    char *dj = ampc_diag_json(ampc_run_diag(R));
    cJSON_Delete(r->stall_diag);
    r->stall_diag = dj ? cJSON_Parse(dj) : NULL;
    free(dj);
    r->stall_step = ampc_run_trainer(R)->iteration;
  }
  end_run(cx, r);
  if (res->status == AMPC_OK) {
    fprintf(stderr, "ampc compare:   final loss %.4f, %lld skipped, verdict %s%s", res->final_loss,
            (long long)res->skipped_steps,
            res->n_verdicts ? ampc_verdict_name(res->verdicts[0].kind) : "?",
            res->n_verdicts && res->no_loss_gap[0] ? " (present, no loss gap)" : "");
    if (res->timing_disturbed)
      fprintf(stderr, "; timing disturbed (other processes used %.1f cores)", res->other_cores);
    if (res->have_gap && res->gap.finite)
      fprintf(stderr, "; against %s: %s (%+.2f %%)%s%s", cx->runs[cx->of_spec[res->baseline]].label,
              res->gap.significant ? "loss gap" : "no significant loss gap", 100.0 * res->gap.rel,
              res->n_gap_verdicts ? ", " : "",
              res->n_gap_verdicts ? ampc_verdict_name(res->gap_verdict.kind) : "");
    fputc('\n', stderr);
  }
}

/* the inputs of an earlier run that run r can share (the same --data and
 * --hold-out-style), or NULL */
static const train_inputs *shared_data(const run_t *runs, int r) {
  const train_args *a = &runs[r].A;
  for (int q = 0; q < r; q++) {
    const train_args *b = &runs[q].A;
    if (runs[q].in.owns_data && !strcmp(a->data, b->data) &&
        (a->hold_out_style && b->hold_out_style ? !strcmp(a->hold_out_style, b->hold_out_style)
                                                : a->hold_out_style == b->hold_out_style))
      return &runs[q].in;
  }
  return NULL;
}

static int run(int argc, char **argv) {
  const char *out = NULL;
  run_t *runs = calloc(MAX_RUNS, sizeof *runs);
  char **common = calloc(MAX_ARGS, sizeof *common);
  ampc_compare_spec *specs = calloc(MAX_RUNS, sizeof *specs);
  ampc_compare_result *res = calloc(MAX_RUNS, sizeof *res);
  int of_spec[MAX_RUNS];
  int nr = 0, nc = 0, ns = 0, ret = AMPC_EXIT_OK;
  if (!runs || !common || !specs || !res) {
    ret = cli_runtime_error("compare", "out of memory");
    goto done;
  }
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
    const int na = train_argv(&runs[r], common, nc);
    if (na < 0) {
      ret = cli_usage_error("compare", "--run %s: too many flags", runs[r].label);
      goto done;
    }
    char ctx[96];
    snprintf(ctx, sizeof ctx, "in the flags of run %s", runs[r].label);
    cli_usage_context = ctx; /* printed with the error, before the hint */
    int rc = train_parse_args(na, runs[r].args, &runs[r].A);
    if (!rc && runs[r].A.n_presets > 1)
      rc = cli_usage_error("compare", "--precision %s: one preset per run (--run LABEL='FLAGS')",
                           runs[r].A.presets[0]);
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
    char probe[PATH_CAP];
    snprintf(probe, sizeof probe, "%s/.ampc-compare-probe", out);
    FILE *pf = fopen(probe, "w");
    if (!pf) {
      ret = cli_runtime_error("compare", "cannot write in %s: %s", out, strerror(errno));
      goto done;
    }
    fclose(pf);
    unlink(probe);
  }
  compare_ctx cx = {.runs = runs, .of_spec = of_spec, .nr = nr};
  /* each run's data and model; a model its data cannot feed is refused */
  for (int r = 0; r < nr; r++) {
    run_t *u = &runs[r];
    snprintf(u->log, sizeof u->log, "%s/%s.jsonl", out, u->label);
    snprintf(u->txt, sizeof u->txt, "%s/%s.txt", out, u->label);
    u->A.log = u->log; /* --log is compare's */
    bool refused = false;
    const int rc = train_inputs_load("compare", &u->A, shared_data(runs, r), &u->in, &refused,
                                     u->why, sizeof u->why);
    if (rc && !refused) {
      ret = rc;
      goto done;
    }
    if (rc) {
      u->status = AMPC_EXIT_USAGE;
      begin_run(&cx, r);
      end_run(&cx, u);
      continue;
    }
    train_spec(&u->A, &u->in, &specs[ns]);
    specs[ns].label = u->label;
    of_spec[ns++] = r;
  }
  if (ns > 0) {
    cx.train_cb = train_printer_callbacks(&cx.pr);
    ampc_compare_callbacks cb = cx.train_cb;
    cb.user = &cx, cb.run_start = on_start, cb.run_end = on_end;
    cb.run.user = &cx; /* cx.pr comes first: the train printer's user too */
    cb.run.step = on_step_stream, cb.run.eval_progress = on_eval_stream;
    cx.tty = isatty(fileno(stderr));
    const ampc_compare_options opt = {.vs_fp32 = true, .vs_fp32_margin = 0.01};
    (void)ampc_compare_run(specs, ns, &opt, &cb, res); /* each run's outcome is in res */
  }
  int base = -1;
  for (int k = 0; k < ns; k++) {
    run_t *u = &runs[of_spec[k]];
    u->res = &res[k];
    u->diag = res[k].diag;
    /* a stalled run's summary is not a result: its row says it stalled */
    u->summary = res[k].summary_json && !res[k].stalled ? cJSON_Parse(res[k].summary_json) : NULL;
    if (res[k].baseline >= 0)
      base = of_spec[res[k].baseline];
    if (res[k].status == AMPC_OK && !u->diag) { /* its log did not read back */
      fprintf(stderr, "ampc compare: %s\n", res[k].error);
      ret = AMPC_EXIT_ERROR;
    }
  }
  int refused = 0; /* runs refused: a setting that does not fit the data */
  for (int r = 0; r < nr; r++) {
    refused += runs[r].status == AMPC_EXIT_USAGE;
    /* a run that stalled is a result of the comparison (its row says so), not
     * a failure of it */
    if (runs[r].status != 0 && runs[r].status != AMPC_EXIT_STALLED)
      ret = AMPC_EXIT_ERROR;
  }
  if (refused == nr) { /* the same reason each time, most likely: show the first's */
    fprintf(stderr, "ampc compare: every run refused its flags (exit 2); run %s said:\n%s\n",
            runs[0].label, runs[0].why);
    ret = AMPC_EXIT_USAGE;
  }
  const int wr = write_outputs(out, runs, nr, base);
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
  if (res)
    ampc_compare_results_free(res, ns);
  for (int r = 0; runs && r < MAX_RUNS; r++) {
    cJSON_Delete(runs[r].summary);
    cJSON_Delete(runs[r].stall_diag);
    train_inputs_free(&runs[r].in);
  }
  free(runs), free(common), free(specs), free(res);
  return ret;
}

const ampc_command ampc_cmd_compare = {
    .name = "compare",
    .summary = "train several precisions side by side: summary, report, plots",
    .usage = k_usage,
    .run = run,
};
