/*
 * tools/ampc/cmd_eval.c: `ampc eval --checkpoint FILE [--data emoji|FILE]
 * [--precision P] [--attention-cast on|off] [--batch B] [--json]`: retrieval R@1/R@5 in both
 * directions, matching accuracy and group accuracy of a trained multimodal
 * model on both evaluation splits (new artwork style, zero-shot concepts).
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/ampc.h"
#include "ampc/data.h"
#include "ampc/shards.h"

static const char k_usage[] =
    "Usage: ampc eval --checkpoint FILE [--data emoji|FILE] [--precision P]\n"
    "                 [--attention-cast on|off] [--hold-out-style S] [--batch B]\n"
    "                 [--threads N] [--json]\n"
    "\n"
    "Evaluate a multimodal checkpoint written by `ampc train` on the two\n"
    "evaluation splits of the image-text data (default: the bundled emoji set):\n"
    "  new_style  the training concepts drawn in the held-out artwork style (the\n"
    "             one the checkpoint was trained without, as ampc train records it)\n"
    "  zero_shot  every style of the held-out concepts (captions never trained on)\n"
    "Metrics: image->text and text->image R@1 and R@5 (one caption per concept;\n"
    "chance R@1 = 1/concepts), matching (ITM) accuracy on positives and in-batch\n"
    "hard negatives (ITM hard) and random in-batch negatives (ITM rand), group\n"
    "accuracy, mean losses (with MLM: loss_mlm, mlm_acc in --json).\n"
    "\n"
    "  --precision P  run the forward pass in this preset (default: the one the\n"
    "                 checkpoint was trained in)\n"
    "  --attention-cast on|off  the attention products' 16-bit P operand (default:\n"
    "                 as the checkpoint was trained, which ampc train records)\n"
    "  --batch B      evaluation batch size (default 64)\n"
    "  --hold-out-style S  the style evaluated as new_style (default: the data\n"
    "                 file's; give the one the checkpoint was trained without)\n"
    "  --json         print one JSON object\n";

/* one split's metrics, as the training log writes them */
static void put_metrics(cJSON *o, const char *name, const ampc_mmodel_metrics *m) {
  char *txt = ampc_mmodel_metrics_json(m);
  cJSON *x = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (x)
    cJSON_AddItemToObject(o, name, x);
}

static bool is_json(const char *name) { return !strcmp(name, "json"); }

/* the progress of an evaluation on stderr: one rewritten line on a
 * terminal, a line at each quarter on a pipe */
typedef struct eval_meter {
  double t0;
  int quarter; /* the last quarter printed (a pipe) */
  bool tty;
} eval_meter;

static void on_progress(void *user, double fraction) {
  eval_meter *em = user;
  const double el = ampc_now_s() - em->t0;
  const double eta = fraction > 0.0 ? el / fraction * (1.0 - fraction) : 0.0;
  if (em->tty) {
    fprintf(stderr, "\rampc eval: %3.0f %%  %.0f s, ETA %.0f s   ", 100.0 * fraction, el, eta);
  } else if ((int)(4.0 * fraction) > em->quarter && fraction < 1.0) {
    em->quarter = (int)(4.0 * fraction);
    fprintf(stderr, "ampc eval: %d %% (%.0f s, ETA %.0f s)\n", 25 * em->quarter, el, eta);
  }
}

/* ampc_model_evaluate with its progress on stderr */
static ampc_status evaluate(ampc_model *M, const ampc_run_data *rd, ampc_eval *ev) {
  eval_meter em = {ampc_now_s(), 0, isatty(fileno(stderr))};
  M->eval_progress = on_progress, M->eval_progress_user = &em;
  const ampc_status st = ampc_model_evaluate(M, rd, ev);
  M->eval_progress = NULL, M->eval_progress_user = NULL;
  if (em.tty)
    fputc('\n', stderr);
  return st;
}

static int run(int argc, char **argv) {
  const char *ckpt = NULL, *data = "emoji", *prec_flag = NULL, *hold = NULL, *cast_flag = NULL;
  int64_t batch = 64, threads = 0;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    char name[32];
    const char *v = NULL;
    const int orc = cli_next_option("eval", argc, argv, &i, is_json, name, sizeof name, &v);
    if (orc)
      return orc;
    if (!v) {
      json = 1;
    } else if (!strcmp(name, "checkpoint")) {
      ckpt = v;
    } else if (!strcmp(name, "data")) {
      data = v;
    } else if (!strcmp(name, "precision")) {
      prec_flag = v;
    } else if (!strcmp(name, "attention-cast")) {
      cast_flag = v;
      bool on = false;
      if (cli_parse_attention_cast("eval", cast_flag, &on) != 0)
        return AMPC_EXIT_USAGE;
    } else if (!strcmp(name, "hold-out-style")) {
      hold = v;
    } else if (!strcmp(name, "batch") || !strcmp(name, "threads")) {
      const bool is_batch = name[0] == 'b';
      char *end = NULL;
      errno = 0;
      const long long x = strtoll(v, &end, 10);
      if (!*v || *end || errno || x < (is_batch ? 2 : 1) || x > 4096)
        return cli_usage_error("eval", "--%s: bad value '%s'", name, v);
      *(is_batch ? &batch : &threads) = x;
    } else {
      return cli_usage_error("eval", "unknown option --%s", name);
    }
  }
  if (!strcmp(data, "fashion-mnist") || !strncmp(data, "fashion-mnist:", 14))
    return cli_usage_error("eval",
                           "--data %s: an image-only set; `ampc eval` measures image-text "
                           "retrieval (--data emoji or a file from `ampc data emoji`)",
                           data);
  if (!ckpt)
    return cli_usage_error("eval", "--checkpoint FILE is required");
  if (threads > 0)
    ampc_set_num_threads((int)threads);
  ampc_model_desc md;
  char precision[32];
  int64_t iteration = 0;
  if (ampc_model_desc_from_checkpoint(ckpt, &md, precision, sizeof precision, &iteration) !=
      AMPC_OK)
    return cli_runtime_error("eval", "%s", ampc_last_error());
  if (cast_flag) /* else as trained (ampc_model_desc_from_checkpoint) */
    md.mm.attn_cast = strcmp(cast_flag, "on") == 0;
  const char *model = md.mm.name;
  if (md.mm.image_only)
    return cli_runtime_error("eval",
                             "%s: %s is an image-only model; `ampc eval` measures retrieval "
                             "(its class accuracy is in the training log's eval lines)",
                             ckpt, model);
  const int64_t vocab = md.mm.vocab, seq_len = md.mm.seq_len, classes = md.mm.classes;
  int ret = AMPC_EXIT_OK;
  /* a quantized checkpoint (ampc quantize): INT8 linear layers, the rest in FP32 */
  bool int8 = false;
  char calibration[96] = ""; /* its activations' calibration, or "" (dynamic) */
  {
    ampc_safetensors *f = NULL;
    if (ampc_safetensors_read_ex(ckpt, AMPC_ST_ANY_DTYPE, &f) == AMPC_OK) {
      const char *fmt = ampc_safetensors_meta(f, "format");
      const char *cal = ampc_safetensors_meta(f, "ampc.calibration");
      int8 = fmt && strcmp(fmt, "ampc-int8") == 0;
      snprintf(calibration, sizeof calibration, "%s", int8 && cal ? cal : "");
      ampc_safetensors_free(f);
    }
  }
  if (int8 && !prec_flag)
    snprintf(precision, sizeof precision, "32-true");
  ampc_precision p;
  if (ampc_precision_parse(prec_flag ? prec_flag : precision, &p) != AMPC_OK)
    return prec_flag ? cli_usage_error("eval", "--precision: %s", ampc_last_error())
                     : cli_runtime_error("eval", "%s: %s", ckpt, ampc_last_error());
  ampc_dataset D;
  ampc_shards *pack = NULL; /* a packed dataset: its val split and zero-shot prompts */
  ampc_status dst;
  if (cli_is_pack(data)) {
    dst = ampc_shards_open(&pack, data, false, false);
    if (dst == AMPC_OK &&
        (dst = ampc_shards_val_dataset(pack, CLI_PACK_EVAL_SAMPLES, &D)) != AMPC_OK)
      ampc_shards_close(pack);
  } else {
    dst = strcmp(data, "emoji") == 0 ? ampc_dataset_load_default(&D) : ampc_dataset_load(data, &D);
  }
  if (dst != AMPC_OK)
    return cli_runtime_error("eval", "%s", ampc_last_error());
  /* the style the checkpoint was trained without (ampc train records it),
   * unless --hold-out-style says otherwise */
  char trained_without[64] = "";
  {
    ampc_safetensors *f = NULL;
    if (ampc_safetensors_read_ex(ckpt, AMPC_ST_ANY_DTYPE, &f) == AMPC_OK) {
      const char *h = ampc_safetensors_meta(f, "ampc.held_out_style");
      if (h)
        snprintf(trained_without, sizeof trained_without, "%s", h);
      ampc_safetensors_free(f);
    }
  }
  if (!hold && trained_without[0] && strcmp(trained_without, "none") != 0 &&
      ampc_dataset_find_style(&D, trained_without) >= 0)
    hold = trained_without;
  if (hold && (ret = cli_hold_out_style("eval", hold, &D)) != 0) {
    ampc_dataset_free(&D);
    ampc_shards_close(pack);
    return ret;
  }
  if (hold && trained_without[0] && strcmp(hold, trained_without) != 0)
    fprintf(stderr,
            "ampc eval: note: %s was trained with style '%s' held out; evaluating '%s' as the "
            "new style, a style it may have trained on\n",
            ckpt, trained_without, hold);
  if (D.vocab != vocab || D.seq_len != seq_len || D.n_classes != classes || !D.tokens) {
    const int dv = D.vocab, ds = D.seq_len, dc = D.n_classes; /* before the free clears them */
    ampc_dataset_free(&D);
    ampc_shards_close(pack);
    return cli_runtime_error("eval",
                             "%s was trained on data with vocab %lld, %lld tokens, %lld "
                             "classes; %s has %d, %d, %d",
                             ckpt, (long long)vocab, (long long)seq_len, (long long)classes, data,
                             dv, ds, dc);
  }
  /* the weights only: no trainer, no optimizer state */
  ampc_mmodel_specs sp = {0};
  ampc_params P;
  memset(&P, 0, sizeof P);
  ampc_model M;
  memset(&M, 0, sizeof M);
  ampc_amp_config amp;
  ampc_amp_config_preset(p, &amp);
  ampc_rng rng;
  ampc_rng_seed(&rng, 0);
  const ampc_run_data rd = {.dataset = &D,
                            .name = data,
                            .class_prompts =
                                pack ? ampc_shards_get_info(pack)->class_prompts : NULL};
  ampc_eval ev;
  int n_int8 = 0;
  if (ampc_model_specs(&md, &sp) != AMPC_OK ||
      ampc_params_create(&P, sp.specs, sp.n, amp.lowp, amp.master_weights, amp.state_dtype, 0,
                         &rng) != AMPC_OK ||
      ampc_model_create(&M, &md, &P, &amp, batch) != AMPC_OK ||
      (int8 ? ampc_quant_load(ckpt, &P, M.impl, &n_int8) : ampc_params_load(&P, ckpt)) != AMPC_OK ||
      evaluate(&M, &rd, &ev) != AMPC_OK) {
    ret = cli_runtime_error("eval", "%s", ampc_last_error());
  } else if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "checkpoint", ckpt);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "precision", ampc_precision_name(p));
    cJSON_AddBoolToObject(o, "attention_cast", md.mm.attn_cast && amp.lowp != AMPC_F32);
    cJSON_AddNumberToObject(o, "step", (double)iteration);
    if (int8)
      cJSON_AddNumberToObject(o, "int8_layers", n_int8);
    if (int8)
      cJSON_AddStringToObject(o, "activation_scales", calibration[0] ? calibration : "dynamic");
    if (hold)
      cJSON_AddStringToObject(o, "held_out_style", hold);
    if (ev.val.samples > 0)
      put_metrics(o, "val", &ev.val);
    if (ev.prompt_classes > 0) {
      cJSON_AddNumberToObject(o, "zero_shot_accuracy", ev.prompt_acc);
      cJSON_AddNumberToObject(o, "zero_shot_classes", (double)ev.prompt_classes);
    }
    if (ev.new_style.samples > 0)
      put_metrics(o, "new_style", &ev.new_style);
    if (ev.zero_shot.samples > 0)
      put_metrics(o, "zero_shot", &ev.zero_shot);
    ret = cli_print_json("eval", o);
  } else {
    printf("%s: %s at step %lld, evaluated in %s%s", ckpt, model, (long long)iteration,
           ampc_precision_name(p),
           md.mm.attn_cast && amp.lowp != AMPC_F32 ? ", attention cast on" : "");
    if (int8 && calibration[0])
      printf(", %d linear layers in INT8 (INT32 sums, static activation scales: %s)", n_int8,
             calibration);
    else if (int8)
      printf(", %d linear layers in INT8 (INT32 sums, activations scaled per call)", n_int8);
    printf("\n");
    printf("%-10s %8s %8s %8s %8s %8s %10s %9s %9s %9s\n", "split", "samples", "i2t R@1", "i2t R@5",
           "t2i R@1", "t2i R@5", "chance R@1", "ITM hard", "ITM rand", "group acc");
    const ampc_mmodel_metrics *ms[3] = {&ev.val, &ev.new_style, &ev.zero_shot};
    const char *names[3] = {"val", "new_style", "zero_shot"};
    for (int k = 0; k < 3; k++)
      if (ms[k]->samples > 0)
        printf("%-10s %8lld %8.3f %8.3f %8.3f %8.3f %10.4f %9.3f %9.3f %9.3f\n", names[k],
               (long long)ms[k]->samples, ms[k]->i2t_r1, ms[k]->i2t_r5, ms[k]->t2i_r1,
               ms[k]->t2i_r5, 1.0 / (double)ms[k]->concepts, ms[k]->itm_acc, ms[k]->itm_acc_random,
               ms[k]->cls_acc);
  }
  if (ret == AMPC_EXIT_OK && !json && ev.prompt_classes > 0)
    printf("zero-shot classification of the val images by prompt (%lld classes): accuracy %.3f "
           "(chance %.3f)\n",
           (long long)ev.prompt_classes, ev.prompt_acc, 1.0 / (double)ev.prompt_classes);
  ampc_model_free(&M);
  ampc_params_free(&P);
  ampc_mmodel_specs_free(&sp);
  ampc_dataset_free(&D);
  ampc_shards_close(pack);
  return ret;
}

const ampc_command ampc_cmd_eval = {
    .name = "eval",
    .summary = "evaluate a checkpoint (retrieval R@1/R@5, matching, group accuracy)",
    .usage = k_usage,
    .run = run,
};
