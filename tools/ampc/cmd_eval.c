/*
 * tools/ampc/cmd_eval.c: `ampc eval --checkpoint FILE [--data emoji|FILE]
 * [--precision P] [--batch B] [--json]`: retrieval R@1/R@5 in both
 * directions, matching accuracy and group accuracy of a trained multimodal
 * model on both evaluation splits (new artwork style, zero-shot concepts).
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "ampc/data.h"

static const char k_usage[] =
    "Usage: ampc eval --checkpoint FILE [--data emoji|FILE] [--precision P]\n"
    "                 [--batch B] [--threads N] [--json]\n"
    "\n"
    "Evaluate a multimodal checkpoint written by `ampc train` on the two\n"
    "evaluation splits of the image-text data (default: the bundled emoji set):\n"
    "  new_style  the training concepts drawn in the other artwork style\n"
    "  zero_shot  both styles of the held-out concepts (captions never trained on)\n"
    "Metrics: image->text and text->image R@1 and R@5 (one caption per concept;\n"
    "chance R@1 = 1/concepts), matching (ITM) accuracy on positives and in-batch\n"
    "hard negatives, group accuracy, mean losses.\n"
    "\n"
    "  --precision P  run the forward pass in this preset (default: the one the\n"
    "                 checkpoint was trained in)\n"
    "  --batch B      evaluation batch size (default 64)\n"
    "  --json         print one JSON object\n";

static int parse_model_meta(const char *path, const ampc_safetensors *f, char *model,
                            size_t model_cap, int64_t *vocab, int64_t *seq_len, int64_t *classes,
                            float w[3], char *precision, size_t prec_cap, int *sgd) {
  const char *mj = ampc_safetensors_meta(f, "ampc.model_config");
  const char *cj = ampc_safetensors_meta(f, "ampc.config");
  cJSON *m = mj ? cJSON_Parse(mj) : NULL, *c = cj ? cJSON_Parse(cj) : NULL;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "model");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "vocab");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "seq_len");
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(m, "classes");
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "precision");
  const cJSON *o =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "optimizer"), "name");
  int ok = cJSON_IsString(name) && cJSON_IsNumber(v) && cJSON_IsNumber(s) && cJSON_IsNumber(k) &&
           cJSON_IsString(p) && cJSON_IsString(o);
  if (ok) {
    snprintf(model, model_cap, "%s", name->valuestring);
    snprintf(precision, prec_cap, "%s", p->valuestring);
    *vocab = (int64_t)v->valuedouble, *seq_len = (int64_t)s->valuedouble;
    *classes = (int64_t)k->valuedouble;
    *sgd = strcmp(o->valuestring, "sgd") == 0;
    const char *wn[3] = {"w_itc", "w_itm", "w_cls"};
    for (int i = 0; i < 3; i++) {
      const cJSON *x = cJSON_GetObjectItemCaseSensitive(m, wn[i]);
      w[i] = cJSON_IsNumber(x) ? (float)x->valuedouble : 1.0f;
    }
  }
  cJSON_Delete(m);
  cJSON_Delete(c);
  if (!ok)
    return cli_runtime_error("eval",
                             "%s: not a checkpoint of a multimodal model (missing or bad "
                             "ampc.model_config / ampc.config metadata)",
                             path);
  return 0;
}

static void put_metrics(cJSON *o, const char *name, const ampc_mm_metrics *m) {
  cJSON *x = cJSON_AddObjectToObject(o, name);
  cJSON_AddNumberToObject(x, "samples", (double)m->samples);
  cJSON_AddNumberToObject(x, "concepts", (double)m->concepts);
  cJSON_AddNumberToObject(x, "i2t_r1", m->i2t_r1);
  cJSON_AddNumberToObject(x, "i2t_r5", m->i2t_r5);
  cJSON_AddNumberToObject(x, "t2i_r1", m->t2i_r1);
  cJSON_AddNumberToObject(x, "t2i_r5", m->t2i_r5);
  cJSON_AddNumberToObject(x, "chance_r1", 1.0 / (double)m->concepts);
  cJSON_AddNumberToObject(x, "itm_acc", m->itm_acc);
  cJSON_AddNumberToObject(x, "group_acc", m->cls_acc);
  cJSON_AddNumberToObject(x, "loss", m->loss);
}

static int run(int argc, char **argv) {
  const char *ckpt = NULL, *data = "emoji", *prec_flag = NULL;
  int64_t batch = 64, threads = 0;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const int has_val = i + 1 < argc;
    if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--checkpoint") && has_val) {
      ckpt = argv[++i];
    } else if (!strcmp(a, "--data") && has_val) {
      data = argv[++i];
    } else if (!strcmp(a, "--precision") && has_val) {
      prec_flag = argv[++i];
    } else if ((!strcmp(a, "--batch") || !strcmp(a, "--threads")) && has_val) {
      char *end = NULL;
      errno = 0;
      const long long v = strtoll(argv[++i], &end, 10);
      if (!*argv[i] || *end || errno || v < (a[2] == 'b' ? 2 : 1) || v > 4096)
        return cli_usage_error("eval", "%s: bad value '%s'", a, argv[i]);
      *(a[2] == 'b' ? &batch : &threads) = v;
    } else {
      return cli_usage_error("eval", "unknown or incomplete option '%s'", a);
    }
  }
  if (!ckpt)
    return cli_usage_error("eval", "--checkpoint FILE is required");
  if (threads > 0)
    ampc_set_num_threads((int)threads);
  ampc_safetensors *f = NULL;
  if (ampc_safetensors_read(ckpt, &f) != AMPC_OK)
    return cli_runtime_error("eval", "%s", ampc_last_error());
  char model[32], precision[32];
  int64_t vocab = 0, seq_len = 0, classes = 0;
  float w[3];
  int sgd = 0;
  int ret = parse_model_meta(ckpt, f, model, sizeof model, &vocab, &seq_len, &classes, w, precision,
                             sizeof precision, &sgd);
  ampc_safetensors_free(f);
  if (ret)
    return ret;
  ampc_precision p;
  if (ampc_precision_parse(prec_flag ? prec_flag : precision, &p) != AMPC_OK)
    return prec_flag ? cli_usage_error("eval", "--precision: %s", ampc_last_error())
                     : cli_runtime_error("eval", "%s: %s", ckpt, ampc_last_error());
  ampc_dataset D;
  const ampc_status dst =
      strcmp(data, "emoji") == 0 ? ampc_dataset_load_default(&D) : ampc_dataset_load(data, &D);
  if (dst != AMPC_OK)
    return cli_runtime_error("eval", "%s", ampc_last_error());
  if (D.vocab != vocab || D.seq_len != seq_len || D.n_classes != classes || !D.tokens) {
    ampc_dataset_free(&D);
    return cli_runtime_error("eval",
                             "%s was trained on data with vocab %lld, %lld tokens, %lld "
                             "classes; %s has %d, %d, %d",
                             ckpt, (long long)vocab, (long long)seq_len, (long long)classes, data,
                             D.vocab, D.seq_len, D.n_classes);
  }
  ampc_mm_config mc;
  ampc_mm_specs sp = {0};
  ampc_trainer T;
  memset(&T, 0, sizeof T);
  ampc_mm *M = NULL;
  ampc_amp_config amp;
  ampc_amp_config_preset(p, &amp);
  const ampc_optim_config opt = sgd ? ampc_optim_sgd_defaults() : ampc_optim_adamw_defaults();
  ampc_mm_metrics ns, zs;
  if (ampc_mm_config_get(model, vocab, seq_len, classes, &mc) != AMPC_OK ||
      ampc_mm_specs_make(&mc, &sp) != AMPC_OK ||
      ampc_trainer_init(&T, &amp, &opt, sp.specs, sp.n, 0) != AMPC_OK ||
      ampc_mm_create(&M, &mc, &T, batch) != AMPC_OK || ampc_trainer_load(&T, ckpt) != AMPC_OK ||
      ampc_mm_evaluate(M, &D, AMPC_SPLIT_NEW_STYLE, &ns) != AMPC_OK ||
      ampc_mm_evaluate(M, &D, AMPC_SPLIT_ZERO_SHOT, &zs) != AMPC_OK) {
    ret = cli_runtime_error("eval", "%s", ampc_last_error());
  } else if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "checkpoint", ckpt);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "precision", ampc_precision_name(p));
    cJSON_AddNumberToObject(o, "step", (double)T.iteration);
    put_metrics(o, "new_style", &ns);
    put_metrics(o, "zero_shot", &zs);
    ret = cli_print_json("eval", o);
  } else {
    printf("%s: %s at step %lld, evaluated in %s\n", ckpt, model, (long long)T.iteration,
           ampc_precision_name(p));
    printf("%-10s %8s %8s %8s %8s %8s %10s %9s %9s\n", "split", "samples", "i2t R@1", "i2t R@5",
           "t2i R@1", "t2i R@5", "chance R@1", "ITM acc", "group acc");
    const ampc_mm_metrics *ms[2] = {&ns, &zs};
    const char *names[2] = {"new_style", "zero_shot"};
    for (int k = 0; k < 2; k++)
      printf("%-10s %8lld %8.3f %8.3f %8.3f %8.3f %10.4f %9.3f %9.3f\n", names[k],
             (long long)ms[k]->samples, ms[k]->i2t_r1, ms[k]->i2t_r5, ms[k]->t2i_r1, ms[k]->t2i_r5,
             1.0 / (double)ms[k]->concepts, ms[k]->itm_acc, ms[k]->cls_acc);
  }
  ampc_mm_free(M);
  ampc_trainer_free(&T);
  ampc_mm_specs_free(&sp);
  ampc_dataset_free(&D);
  return ret;
}

const ampc_command ampc_cmd_eval = {
    .name = "eval",
    .summary = "evaluate a multimodal checkpoint (retrieval R@1/R@5, matching, group accuracy)",
    .usage = k_usage,
    .run = run,
};
