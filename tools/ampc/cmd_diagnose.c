/*
 * tools/ampc/cmd_diagnose.c: `ampc diagnose LOG [--json]`: the verdicts of a
 * training run from its metrics log (ampc/diag.h; DESIGN.md section 3).
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"

static const char k_usage[] =
    "Usage: ampc diagnose LOG [--json]\n"
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
    "Rounding counts come from the steps sampled by --telemetry-every (default\n"
    "every 10 steps).\n"
    "\n"
    "  --json   print one JSON object: {\"verdict\":..,\"verdicts\":[{\"verdict\":..,\n"
    "           \"branch\":..,\"step\":..,\"tensor\":..,\"evidence\":[..],\n"
    "           \"safeguard\":..}],\"evidence\":[..],\"steps\":..}\n"
    "\n"
    "Exit status: 0 diagnosed (whatever the verdict), 1 unreadable or malformed\n"
    "log, 2 bad usage.\n";

static int run(int argc, char **argv) {
  const char *path = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) {
      fputs(k_usage, stdout);
      return AMPC_EXIT_OK;
    } else if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (argv[i][0] == '-' && argv[i][1] != '\0')
      return cli_usage_error("diagnose", "unknown option '%s'", argv[i]);
    else if (path)
      return cli_usage_error("diagnose", "one log at a time (got '%s' and '%s')", path, argv[i]);
    else
      path = argv[i];
  }
  if (!path)
    return cli_usage_error("diagnose", "missing LOG (a metrics log from `ampc train --log`)");
  ampc_diag *d = NULL;
  if (ampc_diag_read_log(path, &d) != AMPC_OK)
    return cli_runtime_error("diagnose", "%s", ampc_last_error());
  int ret = AMPC_EXIT_OK;
  if (json) {
    char *txt = ampc_diag_json(d);
    cJSON *o = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (o)
      cJSON_AddNumberToObject(o, "steps", (double)ampc_diag_steps(d));
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
    for (int i = 0; i < n; i++) {
      printf("verdict: %s", ampc_verdict_name(v[i].kind));
      if (v[i].branch >= 0)
        printf("  branch: %s", ampc_branch_name((ampc_branch)v[i].branch));
      if (v[i].step >= 0)
        printf("  step: %lld", (long long)v[i].step);
      if (v[i].tensor[0])
        printf("  tensor: %s", v[i].tensor);
      putchar('\n');
      for (int k = 0; k < v[i].n_evidence; k++)
        printf("  - %s\n", v[i].evidence[k]);
      if (v[i].safeguard[0])
        printf("  safeguard: %s\n", v[i].safeguard);
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
