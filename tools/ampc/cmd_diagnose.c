/*
 * tools/ampc/cmd_diagnose.c: `ampc diagnose LOG [--json]`: the verdicts of a
 * training run from its metrics log (ampc/diag.h; DESIGN.md section 3).
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"

static const char k_usage[] =
    "Usage: ampc diagnose LOG [--baseline FP32_LOG [--margin F]] [--json]\n"
    "\n"
    "Read the metrics log of `ampc train --log LOG` and name what went wrong, if\n"
    "anything, from exact counts: each verdict comes with its evidence (steps,\n"
    "tensors, fractions) and the safeguard to turn on.\n"
    "  healthy                          no failure signature\n"
    "  overflow                         inf/NaN gradients the loss scale caused or\n"
    "                                   keeps hitting\n"
    "  nonfinite-independent-of-scale   inf/NaN in the forward pass or the weights,\n"
    "                                   or overflow with the scale at its floor\n"
    "  underflow                        gradients flushed to zero, loss plateau\n"
    "  swallowed-updates                16-bit weights that updates do not change\n"
    "  accumulation-error               GEMM sums worse than FP32 accumulation\n"
    "  fp8-saturation                   fp8-mixed casts clipped at the format's\n"
    "                                   largest value (the delayed scale lags)\n"
    "  fp8-underflow                    fp8-mixed casts flushed to zero (the scale\n"
    "                                   is too small for the tensor)\n"
    "  precision-gap                    (--baseline) worse than the FP32 twin with\n"
    "                                   no single cause in the counts\n"
    "Rounding counts come from the steps sampled by --telemetry-every (default\n"
    "every 10 steps).\n"
    "\n"
    "  --baseline FP32_LOG  also compare LOG with its FP32 twin (the same model,\n"
    "           data, seed and steps in 32-true): the per-step loss difference\n"
    "           over the last tenth of the steps; worse by more than the margin\n"
    "           and 3 standard errors, with no non-finite value, gives\n"
    "           accumulation-error (the sampled GEMM error says so), underflow\n"
    "           (a branch flushed >= 1 % of its gradients), swallowed-updates\n"
    "           (16-bit weights left >= 25 % of updates unchanged) or precision-gap\n"
    "  --margin F  relative margin of --baseline, in [0.0001, 1] (0.01 = 1 %, the\n"
    "           default); the baseline must be 32-true with the same model, data,\n"
    "           steps, batch, seed and optimizer (checked from the config lines)\n"
    "  --json   print one JSON object: {\"verdict\":..,\"verdicts\":[{\"verdict\":..,\n"
    "           \"branch\":..,\"step\":..,\"tensor\":..,\"evidence\":[..],\n"
    "           \"safeguard\":..}],\"evidence\":[..],\"steps\":..}, with --baseline\n"
    "           also \"baseline\":{\"finite\",\"window\",\"loss\",\"baseline_loss\",\"diff\",\n"
    "           \"diff_se\",\"rel\",\"significant\",\"verdict\",...}\n"
    "\n"
    "Exit status: 0 diagnosed (whatever the verdict), 1 unreadable or malformed\n"
    "log, or a baseline that is not the run's FP32 twin; 2 bad usage.\n";

/* a verdict; present: a count-based signature whose run shows no loss gap
 * against its FP32 twin (printed as present, not as the outcome) */
static void print_verdict(const ampc_verdict *v, bool present) {
  printf("verdict: %s%s", ampc_verdict_name(v->kind),
         present ? " (present, no loss gap against the baseline)" : "");
  if (v->branch >= 0)
    printf("  branch: %s", ampc_branch_name((ampc_branch)v->branch));
  if (v->step >= 0)
    printf("  step: %lld", (long long)v->step);
  if (v->tensor[0])
    printf("  tensor: %s", v->tensor);
  putchar('\n');
  for (int k = 0; k < v->n_evidence; k++)
    printf("  - %s\n", v->evidence[k]);
  if (v->safeguard[0])
    printf("  safeguard: %s\n", v->safeguard);
}

static cJSON *gap_json(const ampc_diag_gap *g, const ampc_verdict *v, int nv, const char *path) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "log", path);
  cJSON_AddBoolToObject(o, "finite", g->finite);
  if (!g->finite) { /* nothing compared: the run's own verdicts say why */
    cJSON_AddNullToObject(o, "verdict");
    return o;
  }
  cJSON_AddStringToObject(o, "quantity", g->quantity);
  cJSON_AddNumberToObject(o, "window", (double)g->window);
  cJSON_AddNumberToObject(o, "first_step", (double)g->first_step);
  cJSON_AddNumberToObject(o, "last_step", (double)g->last_step);
  cJSON_AddNumberToObject(o, "loss", g->run_loss);
  cJSON_AddNumberToObject(o, "baseline_loss", g->base_loss);
  cJSON_AddNumberToObject(o, "diff", g->diff);
  cJSON_AddNumberToObject(o, "diff_se", g->diff_se);
  cJSON_AddNumberToObject(o, "rel", g->rel);
  cJSON_AddBoolToObject(o, "significant", g->significant);
  if (nv > 0) {
    cJSON_AddStringToObject(o, "verdict", ampc_verdict_name(v->kind));
    cJSON *e = cJSON_AddArrayToObject(o, "evidence");
    for (int k = 0; k < v->n_evidence; k++)
      cJSON_AddItemToArray(e, cJSON_CreateString(v->evidence[k]));
    cJSON_AddStringToObject(o, "safeguard", v->safeguard);
  } else {
    cJSON_AddNullToObject(o, "verdict");
  }
  return o;
}

static int run(int argc, char **argv) {
  const char *path = NULL, *base_path = NULL;
  double margin = 0.01;
  bool have_margin = false;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) {
      fputs(k_usage, stdout);
      return AMPC_EXIT_OK;
    } else if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strncmp(argv[i], "--baseline", 10) || !strncmp(argv[i], "--margin", 8)) {
      const bool is_base = argv[i][2] == 'b';
      const size_t fl = is_base ? 10 : 8;
      const char *val = NULL;
      if (argv[i][fl] == '=')
        val = argv[i] + fl + 1;
      else if (argv[i][fl] != '\0')
        return cli_usage_error("diagnose", "unknown option '%s'", argv[i]);
      else if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
        return cli_usage_error("diagnose", "%s needs a value", argv[i]);
      else
        val = argv[++i];
      if (is_base) {
        if (base_path)
          return cli_usage_error("diagnose", "--baseline given twice");
        base_path = val;
      } else {
        char *end = NULL;
        margin = strtod(val, &end);
        have_margin = true;
        if (end == val || *end || !(margin >= 1e-4 && margin <= 1.0))
          return cli_usage_error("diagnose",
                                 "--margin: expected a number in [0.0001, 1] (a fraction of "
                                 "the baseline's loss), got '%s'",
                                 val);
      }
    } else if (argv[i][0] == '-' && argv[i][1] != '\0')
      return cli_usage_error("diagnose", "unknown option '%s'", argv[i]);
    else if (path)
      return cli_usage_error("diagnose", "one log at a time (got '%s' and '%s')", path, argv[i]);
    else
      path = argv[i];
  }
  if (!path)
    return cli_usage_error("diagnose", "missing LOG (a metrics log from `ampc train --log`)");
  if (have_margin && !base_path)
    return cli_usage_error("diagnose", "--margin applies to --baseline");
  ampc_diag *d = NULL, *b = NULL;
  if (ampc_diag_read_log(path, &d) != AMPC_OK)
    return cli_runtime_error("diagnose", "%s", ampc_last_error());
  ampc_diag_gap gap;
  ampc_verdict gv;
  int ngv = 0;
  if (base_path) {
    if (ampc_diag_read_log(base_path, &b) != AMPC_OK) {
      ampc_diag_free(d);
      return cli_runtime_error("diagnose", "%s", ampc_last_error());
    }
    const ampc_status st = ampc_diag_compare(d, b, margin, &gap, &gv, &ngv);
    ampc_diag_free(b);
    if (st != AMPC_OK) {
      ampc_diag_free(d);
      return cli_runtime_error("diagnose", "%s against %s: %s", path, base_path, ampc_last_error());
    }
  }
  int ret = AMPC_EXIT_OK;
  if (json) {
    char *txt = ampc_diag_json(d);
    cJSON *o = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (o)
      cJSON_AddNumberToObject(o, "steps", (double)ampc_diag_steps(d));
    if (o && base_path)
      cJSON_AddItemToObject(o, "baseline", gap_json(&gap, &gv, ngv, base_path));
    ret = cli_print_json("diagnose", o);
  } else {
    ampc_verdict v[AMPC_VERDICT_COUNT];
    const int n = ampc_diag_verdicts(d, v, AMPC_VERDICT_COUNT);
    const ampc_diag_config *c = ampc_diag_get_config(d);
    int64_t sampled = 0;
    for (int64_t i = 0; i < ampc_diag_steps(d); i++)
      sampled += ampc_diag_step_at(d, i)->telemetry;
    printf("%s: %s run, %lld steps logged (%lld sampled by telemetry)\n", path, c->precision,
           (long long)ampc_diag_steps(d), (long long)sampled);
    const bool no_gap = base_path && gap.finite && !gap.significant;
    for (int i = 0; i < n; i++)
      print_verdict(&v[i], no_gap && ampc_verdict_count_based(v[i].kind));
    if (base_path && !gap.finite) {
      printf("against the FP32 baseline %s: no cross-run verdict, the run has non-finite "
             "values (its own verdicts above)\n",
             base_path);
    } else if (base_path) {
      printf("against the FP32 baseline %s: %s%s %.5g vs %.5g over steps %lld-%lld, "
             "%+.3g per step (%+.2f %%) +- %.2g (%.2f %%)\n",
             base_path, strcmp(gap.quantity, "loss") ? "loss term " : "training loss",
             strcmp(gap.quantity, "loss") ? gap.quantity : "", gap.run_loss, gap.base_loss,
             (long long)gap.first_step, (long long)gap.last_step, gap.diff, 100.0 * gap.rel,
             gap.diff_se, gap.base_loss != 0.0 ? 100.0 * gap.diff_se / fabs(gap.base_loss) : 0.0);
      if (ngv)
        print_verdict(&gv, false);
      else if (gap.diff < 0.0)
        printf("no precision gap: the run ends below the FP32 loss\n");
      else
        printf("no precision gap: not worse than FP32 by more than the margin (%.3g %%) and 3 "
               "standard errors\n",
               100.0 * margin);
    }
  }
  ampc_diag_free(d);
  return ret;
}

const ampc_command ampc_cmd_diagnose = {
    .name = "diagnose",
    .summary = "name the failure signature of a run from its metrics log",
    .usage = k_usage,
    .run = run,
};
