/*
 * tools/ampc/cmd_quantize.c: `ampc quantize --checkpoint F --out F`: INT8
 * post-training quantization of a trained checkpoint's linear layers
 * (include/ampc/quant.h) and the per-layer report.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ampc/ampc.h"
#include "ampc/data.h"
#include "ampc/quant.h"
#include "ampc/shards.h"

static const char k_usage[] =
    "Usage: ampc quantize --checkpoint FILE --out FILE [--granularity channel|tensor]\n"
    "                     [--keep LIST|none|auto] [--max-drop P] [--calib N]\n"
    "                     [--calib-method max|percentile|mse] [--percentile P]\n"
    "                     [--data emoji|FILE] [--batch B] [--threads N] [--json]\n"
    "\n"
    "INT8 post-training quantization of a trained model's linear layers: symmetric\n"
    "INT8 weights (values -127..127, zero point 0), one scale per output channel\n"
    "(default) or per tensor; scale = max|w| / 127, rounded to nearest even. Writes a\n"
    "safetensors file (I8 weights NAME with F32 NAME_scale, other tensors F32,\n"
    "optimizer state left out), readable by PyTorch, and prints each layer's\n"
    "signal-to-quantization-noise ratio (SQNR, dB) per channel and per tensor, and\n"
    "the most sensitive layers.\n"
    "\n"
    "Options:\n"
    "  --checkpoint FILE   a checkpoint written by ampc train --save\n"
    "  --out FILE          the quantized checkpoint (written atomically)\n"
    "  --granularity G     channel (default) or tensor\n"
    "  --keep LIST         comma-separated name prefixes of layers left in FP32\n"
    "                      (default vision.patch_embed,heads: the first and last\n"
    "                      layers); --keep none quantizes every linear layer;\n"
    "                      --keep auto keeps the fewest, most sensitive first\n"
    "                      (lowest SQNR), that bring the drop in group accuracy\n"
    "                      under --max-drop (evaluates each choice on --data)\n"
    "  --max-drop P        with --keep auto: points of group accuracy (default 1)\n"
    "  --calib N           static activation scales from N training batches of\n"
    "                      --data (default: none, activations scaled per call)\n"
    "  --calib-method M    max, percentile or mse (default mse): the threshold of\n"
    "                      |x| that maps to 127\n"
    "  --percentile P      the percentile method's (default 99.99)\n"
    "  --data D            emoji (default) or a dataset file or pack, for --calib\n"
    "                      and --keep auto\n"
    "  --batch B           calibration and evaluation batch size (default 64)\n"
    "  --threads N         threads (default: all cores)\n"
    "  --json              the report as one JSON object\n"
    "  -h, --help          show this help\n"
    "\n"
    "Example:\n"
    "  ampc train --steps 500 --save run.st && ampc quantize --checkpoint run.st --out "
    "run.int8.st --calib 8\n";

/* The data and the checkpoint's model description, for calibration and
 * --keep auto's evaluations */
typedef struct qdata {
  const char *ckpt, *name;
  ampc_model_desc md;
  ampc_dataset D;
  ampc_shards *pack;
  int64_t batch;
  bool loaded;
} qdata;

static void qdata_free(qdata *q) {
  if (q->loaded)
    ampc_dataset_free(&q->D);
  ampc_shards_close(q->pack);
  q->loaded = false, q->pack = NULL;
}

/* the checkpoint's model and the data it was trained on, with the style it
 * was trained without held out: 0 or an exit code */
static int qdata_open(qdata *q) {
  char precision[32];
  int64_t iteration = 0;
  if (ampc_model_desc_from_checkpoint(q->ckpt, &q->md, precision, sizeof precision, &iteration) !=
      AMPC_OK)
    return cli_runtime_error("quantize", "%s", ampc_last_error());
  if (q->md.kind != AMPC_MODEL_MM || q->md.mm.image_only)
    return cli_runtime_error("quantize",
                             "%s: --calib and --keep auto need the multimodal model (its "
                             "transformer blocks' INT8 layers and retrieval evaluation)",
                             q->ckpt);
  ampc_status st;
  if (cli_is_pack(q->name)) {
    st = ampc_shards_open(&q->pack, q->name, false, false);
    if (st == AMPC_OK &&
        (st = ampc_shards_val_dataset(q->pack, CLI_PACK_EVAL_SAMPLES, &q->D)) != AMPC_OK) {
      ampc_shards_close(q->pack);
      q->pack = NULL;
    }
  } else {
    st = strcmp(q->name, "emoji") == 0 ? ampc_dataset_load_default(&q->D)
                                       : ampc_dataset_load(q->name, &q->D);
  }
  if (st != AMPC_OK)
    return cli_runtime_error("quantize", "%s", ampc_last_error());
  q->loaded = true;
  const ampc_dataset *D = &q->D;
  if (D->vocab != q->md.mm.vocab || D->seq_len != q->md.mm.seq_len ||
      D->n_classes != q->md.mm.classes || !D->tokens)
    return cli_runtime_error("quantize",
                             "%s was trained on data with vocab %lld, %lld tokens, %lld classes; "
                             "%s has %d, %d, %d",
                             q->ckpt, (long long)q->md.mm.vocab, (long long)q->md.mm.seq_len,
                             (long long)q->md.mm.classes, q->name, D->vocab, D->seq_len,
                             D->n_classes);
  ampc_safetensors *f = NULL;
  if (ampc_safetensors_read_ex(q->ckpt, AMPC_ST_ANY_DTYPE, &f) == AMPC_OK) {
    const char *h = ampc_safetensors_meta(f, "ampc.held_out_style");
    const int k = h && strcmp(h, "none") != 0 ? ampc_dataset_find_style(&q->D, h) : -1;
    if (k >= 0)
      (void)ampc_dataset_hold_out_style(&q->D, k);
    ampc_safetensors_free(f);
  }
  return 0;
}

/* A model over q's description in 32-true with the weights of `file` (a
 * training checkpoint, or a quantized one: int8) */
typedef struct qmodel {
  ampc_mmodel_specs sp;
  ampc_params P;
  ampc_model M;
} qmodel;

static void qmodel_free(qmodel *m) {
  ampc_model_free(&m->M);
  ampc_params_free(&m->P);
  ampc_mmodel_specs_free(&m->sp);
}

static ampc_status qmodel_open(qmodel *m, const qdata *q, const char *file, bool int8) {
  memset(m, 0, sizeof *m);
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_32_TRUE, &amp);
  ampc_rng rng;
  ampc_rng_seed(&rng, 0);
  AMPC_TRY(ampc_model_specs(&q->md, &m->sp));
  AMPC_TRY(ampc_params_create(&m->P, m->sp.specs, m->sp.n, amp.lowp, amp.master_weights,
                              amp.state_dtype, 0, &rng));
  AMPC_TRY(ampc_model_create(&m->M, &q->md, &m->P, &amp, q->batch));
  return int8 ? ampc_quant_load(file, &m->P, m->M.impl, NULL) : ampc_params_load(&m->P, file);
}

/* calibration batches: B samples of the training split (a pack's val split)
 * each, drawn in a fixed shuffled order */
typedef struct qcalib {
  qmodel *m;
  const ampc_dataset *D;
  ampc_batch_buffers bb;
  int64_t *idx, n_idx, B;
} qcalib;

static ampc_status calib_batch(void *user, int i) {
  qcalib *c = user;
  for (int64_t r = 0; r < c->B; r++)
    ampc_batch_put_pair(&c->bb, c->D, r, c->idx[((int64_t)i * c->B + r) % c->n_idx], 0, 0);
  const ampc_mmodel_batch bt = {
      .b = c->B, .images = c->bb.images, .tokens = c->bb.tokens, .labels = c->bb.labels};
  ampc_mmodel_losses L;
  return ampc_mmodel_forward(c->m->M.impl, &bt, &L);
}

/* calibrate the checkpoint's model on `batches` batches: 0 or an exit code */
static int calibrate(qdata *q, int batches, ampc_calib_method method, double pct, ampc_calib *out) {
  qmodel m;
  memset(&m, 0, sizeof m);
  qcalib c = {.m = &m, .D = &q->D, .B = q->batch};
  const int split = q->pack ? AMPC_SPLIT_VAL : AMPC_SPLIT_TRAIN;
  c.idx = malloc((size_t)q->D.n * sizeof *c.idx);
  for (int64_t i = 0; c.idx && i < q->D.n; i++)
    if (q->D.split[i] == split)
      c.idx[c.n_idx++] = i;
  ampc_rng rng; /* a fixed shuffle: the same batches every run */
  ampc_rng_seed(&rng, 0x5eed);
  for (int64_t i = c.n_idx - 1; i > 0; i--) {
    const int64_t j = (int64_t)(ampc_rng_next(&rng) % (uint64_t)(i + 1)), t = c.idx[i];
    c.idx[i] = c.idx[j], c.idx[j] = t;
  }
  int ret = 0;
  ampc_status st = c.idx ? AMPC_OK : ampc_fail(AMPC_ERR_NOMEM, "calibration: memory");
  if (st == AMPC_OK && c.n_idx == 0)
    st = ampc_fail(AMPC_ERR_INVALID_ARG, "%s: no %s samples to calibrate on", q->name,
                   q->pack ? "val" : "training");
  if (st == AMPC_OK)
    st = ampc_batch_buffers_pairs(&c.bb, &q->D, c.B);
  if (st == AMPC_OK)
    st = qmodel_open(&m, q, q->ckpt, false);
  if (st == AMPC_OK)
    st = ampc_quant_calibrate(m.M.impl, &m.P, batches, method, pct, calib_batch, &c, out);
  if (st != AMPC_OK)
    ret = cli_runtime_error("quantize", "calibration: %s", ampc_last_error());
  if ((int64_t)batches * c.B > c.n_idx && ret == 0)
    fprintf(stderr,
            "ampc quantize: note: %d batches of %lld = %lld samples, %s has %lld: some "
            "are seen twice\n",
            batches, (long long)c.B, (long long)batches * c.B, q->name, (long long)c.n_idx);
  qmodel_free(&m);
  ampc_batch_buffers_free(&c.bb);
  free(c.idx);
  return ret;
}

/* group accuracy, in points, of `file` (a checkpoint, or quantized: int8)
 * on q's evaluation split (the new style; a pack's val split) */
static ampc_status group_points(qdata *q, const char *file, bool int8, double *pts) {
  qmodel m;
  ampc_status st = qmodel_open(&m, q, file, int8);
  const ampc_run_data rd = {.dataset = &q->D,
                            .name = q->name,
                            .class_prompts =
                                q->pack ? ampc_shards_get_info(q->pack)->class_prompts : NULL};
  ampc_eval ev;
  if (st == AMPC_OK)
    st = ampc_model_evaluate(&m.M, &rd, &ev);
  if (st == AMPC_OK)
    *pts = 100.0 * (ev.new_style.samples > 0 ? ev.new_style.cls_acc : ev.val.cls_acc);
  qmodel_free(&m);
  return st;
}

/* --keep auto: the fewest layers kept in FP32, most sensitive first (lowest
 * SQNR of weights or calibrated activations), whose quantized model's group
 * accuracy is within max_drop points of the checkpoint's. *keep gets the
 * list ("" for none). 0 or an exit code. */
static int choose_keep(qdata *q, const ampc_quant_options *o, double max_drop, char **keep) {
  *keep = NULL;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.keep-auto.tmp", o->out);
  ampc_quant_options t = *o;
  t.out = tmp, t.keep = "";
  ampc_quant_report r = {0};
  double base = 0.0, acc = 0.0;
  ampc_status st = group_points(q, o->checkpoint, false, &base);
  if (st == AMPC_OK)
    st = ampc_quantize_checkpoint(&t, &r);
  int *order = st == AMPC_OK ? malloc((size_t)(r.n + 1) * sizeof *order) : NULL;
  double *sens = st == AMPC_OK ? malloc((size_t)(r.n + 1) * sizeof *sens) : NULL;
  size_t cap = 1;
  for (int i = 0; st == AMPC_OK && i < r.n; i++)
    cap += strlen(r.layers[i].name) + 1;
  *keep = st == AMPC_OK ? calloc(cap, 1) : NULL;
  if (st == AMPC_OK && (!order || !sens || !*keep))
    st = ampc_fail(AMPC_ERR_NOMEM, "--keep auto: out of memory");
  /* the layers by sensitivity, lowest SQNR first (insertion sort: few) */
  for (int i = 0; st == AMPC_OK && i < r.n; i++) {
    sens[i] = r.layers[i].sqnr_db;
    for (int j = 0; j < 3; j++) {
      const ampc_calib_site *c = ampc_calib_find(o->calib, r.layers[i].name, j);
      if (c)
        sens[i] = fmin(sens[i], c->sqnr_db[o->calib->method]);
    }
    int k = i;
    for (; k > 0 && sens[order[k - 1]] > sens[i]; k--)
      order[k] = order[k - 1];
    order[k] = i;
  }
  fprintf(stderr, "ampc quantize: --keep auto: %s in FP32 has group accuracy %.2f %%\n",
          o->checkpoint, base);
  int kept = 0;
  for (; st == AMPC_OK; kept++) {
    if (kept > 0) {
      const size_t used = strlen(*keep);
      snprintf(*keep + used, cap - used, "%s%s", kept > 1 ? "," : "",
               r.layers[order[kept - 1]].name);
      t.keep = *keep;
      st = ampc_quantize_checkpoint(&t, NULL);
    }
    if (st == AMPC_OK)
      st = group_points(q, tmp, true, &acc);
    if (st != AMPC_OK)
      break;
    fprintf(stderr, "ampc quantize: --keep auto: %d kept%s%s: group accuracy %.2f %% (drop %.2f)\n",
            kept, kept ? ", the last " : "", kept ? r.layers[order[kept - 1]].name : "", acc,
            base - acc);
    if (base - acc <= max_drop || kept + 1 >= r.n)
      break;
  }
  remove(tmp);
  int ret = 0;
  if (st != AMPC_OK)
    ret = cli_runtime_error("quantize", "--keep auto: %s", ampc_last_error());
  else if (base - acc > max_drop)
    ret = cli_runtime_error("quantize",
                            "--keep auto: with all but one layer kept the drop is %.2f points, "
                            "over --max-drop %g: INT8 does not fit this budget",
                            base - acc, max_drop);
  free(order), free(sens);
  ampc_quant_report_free(&r);
  if (ret) {
    free(*keep);
    *keep = NULL;
  }
  return ret;
}

static bool is_json(const char *name) { return !strcmp(name, "json"); }

static int run(int argc, char **argv) {
  ampc_quant_options o = {0};
  const char *gran = "channel", *method_s = "mse";
  qdata q = {.name = "emoji", .batch = 64};
  bool json = false, autokeep = false;
  double max_drop = 1.0, pct = 99.99;
  int calib_n = 0;
  int64_t threads = 0;
  for (int i = 1; i < argc; i++) {
    char name[32];
    const char *v = NULL;
    const int orc = cli_next_option("quantize", argc, argv, &i, is_json, name, sizeof name, &v);
    if (orc)
      return orc;
    char *end = NULL;
    errno = 0;
    if (!v) {
      json = true;
    } else if (!strcmp(name, "checkpoint")) {
      o.checkpoint = v;
    } else if (!strcmp(name, "out")) {
      o.out = v;
    } else if (!strcmp(name, "granularity")) {
      gran = v;
    } else if (!strcmp(name, "keep")) {
      o.keep = v;
    } else if (!strcmp(name, "calib-method")) {
      method_s = v;
    } else if (!strcmp(name, "data")) {
      q.name = v;
    } else if (!strcmp(name, "max-drop") || !strcmp(name, "percentile")) {
      const double x = strtod(v, &end);
      const bool is_pct = name[0] == 'p';
      if (!*v || *end || errno || !(is_pct ? x > 0.0 && x <= 100.0 : x >= 0.0 && x <= 100.0))
        return cli_usage_error("quantize", "--%s '%s': expected %s", name, v,
                               is_pct ? "a percentile in (0, 100]"
                                      : "points of group accuracy in [0, 100]");
      *(is_pct ? &pct : &max_drop) = x;
    } else if (!strcmp(name, "calib") || !strcmp(name, "batch") || !strcmp(name, "threads")) {
      const long long x = strtoll(v, &end, 10);
      const long long lo = name[0] == 'b' ? 2 : 1;
      if (!*v || *end || errno || x < lo || x > 4096)
        return cli_usage_error("quantize", "--%s '%s': expected an integer in [%lld, 4096]%s", name,
                               v, lo, name[0] == 'c' ? " (calibration batches)" : "");
      if (name[0] == 'c')
        calib_n = (int)x;
      else
        *(name[0] == 'b' ? &q.batch : &threads) = x;
    } else {
      return cli_usage_error("quantize", "unknown option --%s", name);
    }
  }
  if (!o.checkpoint || !o.out)
    return cli_usage_error("quantize", "%s is required", !o.checkpoint ? "--checkpoint" : "--out");
  if (!strcmp(gran, "channel"))
    o.granularity = AMPC_QUANT_CHANNEL;
  else if (!strcmp(gran, "tensor"))
    o.granularity = AMPC_QUANT_TENSOR;
  else
    return cli_usage_error("quantize", "--granularity '%s': expected channel or tensor", gran);
  ampc_calib_method method;
  if (ampc_calib_method_parse(method_s, &method) != 0)
    return cli_usage_error("quantize", "--calib-method '%s': expected max, percentile or mse",
                           method_s);
  if (o.keep && !strcmp(o.keep, "auto"))
    autokeep = true, o.keep = NULL;
  else if (o.keep && !strcmp(o.keep, "none"))
    o.keep = "";
  else if (o.keep && (!o.keep[0] || strspn(o.keep, ",") == strlen(o.keep)))
    return cli_usage_error("quantize", "--keep '%s': no layer named (none: quantize every layer)",
                           o.keep);
  else if (o.keep && (strstr(o.keep, "none") || strstr(o.keep, "auto")))
    return cli_usage_error("quantize", "--keep %s: '%s' cannot be combined with layer names",
                           o.keep, strstr(o.keep, "none") ? "none" : "auto");
  /* options that only calibration or --keep auto read: refused without them */
  static const struct {
    const char *flag, *needs;
    int when; /* 1: --calib, 2: --keep auto, 3: either */
  } only[] = {{"--max-drop", "--keep auto", 2},
              {"--calib-method", "--calib N", 1},
              {"--percentile", "--calib N", 1},
              {"--data", "--calib N or --keep auto", 3},
              {"--batch", "--calib N or --keep auto", 3}};
  const int have = (calib_n > 0 ? 1 : 0) | (autokeep ? 2 : 0);
  for (int i = 1; i < argc; i++)
    for (size_t k = 0; k < sizeof only / sizeof only[0]; k++) {
      const size_t n = strlen(only[k].flag);
      if (!strncmp(argv[i], only[k].flag, n) && (!argv[i][n] || argv[i][n] == '=') &&
          !(have & only[k].when))
        return cli_usage_error("quantize", "%s applies with %s", only[k].flag, only[k].needs);
    }
  /* the same file by any spelling or link: refused, it would be replaced */
  struct stat a, b;
  if (!strcmp(o.checkpoint, o.out) || (stat(o.checkpoint, &a) == 0 && stat(o.out, &b) == 0 &&
                                       a.st_dev == b.st_dev && a.st_ino == b.st_ino))
    return cli_usage_error("quantize", "--out %s is the checkpoint itself (%s)", o.out,
                           o.checkpoint);
  if (threads > 0)
    ampc_set_num_threads((int)threads);
  q.ckpt = o.checkpoint;
  ampc_calib cal = {0};
  int ret = 0;
  if ((calib_n > 0 || autokeep) && (ret = qdata_open(&q)) != 0) {
    qdata_free(&q);
    return ret;
  }
  if (calib_n > 0 && (ret = calibrate(&q, calib_n, method, pct, &cal)) != 0) {
    qdata_free(&q);
    return ret;
  }
  o.calib = calib_n > 0 ? &cal : NULL;
  char *auto_keep = NULL;
  if (autokeep && (ret = choose_keep(&q, &o, max_drop, &auto_keep)) != 0) {
    ampc_calib_free(&cal);
    qdata_free(&q);
    return ret;
  }
  if (autokeep)
    o.keep = auto_keep[0] ? auto_keep : "";
  ampc_quant_report r;
  const ampc_status st = ampc_quantize_checkpoint(&o, &r);
  if (st != AMPC_OK) {
    free(auto_keep);
    ampc_calib_free(&cal);
    qdata_free(&q);
    if (st == AMPC_ERR_INVALID_ARG) /* a --keep that names nothing */
      return cli_usage_error("quantize", "%s", ampc_last_error());
    return cli_runtime_error("quantize", "%s", ampc_last_error());
  }
  /* each layer's activations (calibrated): the lowest SQNR of its parts */
  double *act = calloc((size_t)(r.n + 1), sizeof *act);
  float *xmax = calloc((size_t)(r.n + 1), sizeof *xmax);
  double *clip = calloc((size_t)(r.n + 1), sizeof *clip);
  for (int i = 0; act && xmax && clip && i < r.n; i++) {
    act[i] = (double)INFINITY;
    for (int j = 0; j < 3; j++) {
      const ampc_calib_site *c = ampc_calib_find(o.calib, r.layers[i].name, j);
      if (!c)
        break;
      act[i] = c->sqnr_db[method] < act[i] ? c->sqnr_db[method] : act[i];
      xmax[i] = c->amax > xmax[i] ? c->amax : xmax[i];
      clip[i] = c->clipped[method] > clip[i] ? c->clipped[method] : clip[i];
    }
  }
  /* the most sensitive: the quantized layers of lowest SQNR, of the weights
   * or (calibrated) of the activations */
  int worst[3] = {-1, -1, -1};
  for (int k = 0; act && k < 3; k++)
    for (int i = 0; i < r.n; i++) {
      if (r.layers[i].kept || i == worst[0] || i == worst[1])
        continue;
      const double si = fmin(r.layers[i].sqnr_db, act[i]);
      if (worst[k] < 0 || si < fmin(r.layers[worst[k]].sqnr_db, act[worst[k]]))
        worst[k] = i;
    }
  /* the calibration's mean SQNR per method, over the quantized layers' sites */
  double mean[AMPC_CALIB_METHODS] = {0};
  int sites = 0;
  for (int i = 0; i < cal.n; i++) {
    bool quantized = false;
    for (int k = 0; k < r.n; k++)
      quantized |= !r.layers[k].kept && !strcmp(r.layers[k].name, cal.sites[i].name);
    for (int m = 0; quantized && m < AMPC_CALIB_METHODS; m++)
      mean[m] += cal.sites[i].sqnr_db[m];
    sites += quantized;
  }
  for (int m = 0; sites && m < AMPC_CALIB_METHODS; m++)
    mean[m] /= sites;
  if (!act || !xmax || !clip) {
    ret = cli_runtime_error("quantize", "out of memory");
  } else if (json) {
    cJSON *j = cJSON_CreateObject(), *ls = cJSON_AddArrayToObject(j, "layers");
    cJSON_AddStringToObject(j, "checkpoint", o.checkpoint);
    cJSON_AddStringToObject(j, "out", o.out);
    cJSON_AddStringToObject(j, "granularity", gran);
    cJSON_AddStringToObject(j, "keep", o.keep ? o.keep : "vision.patch_embed,heads");
    if (o.calib) {
      cJSON *c = cJSON_AddObjectToObject(j, "calibration");
      cJSON_AddStringToObject(c, "method", ampc_calib_method_name(method));
      cJSON_AddNumberToObject(c, "batches", calib_n);
      cJSON_AddNumberToObject(c, "batch", (double)q.batch);
      cJSON_AddNumberToObject(c, "percentile", pct);
      cJSON *ms = cJSON_AddObjectToObject(c, "mean_sqnr_db");
      for (int m = 0; m < AMPC_CALIB_METHODS; m++)
        cJSON_AddNumberToObject(ms, ampc_calib_method_name((ampc_calib_method)m), mean[m]);
    }
    for (int i = 0; i < r.n; i++) {
      const ampc_quant_layer *L = &r.layers[i];
      cJSON *l = cJSON_CreateObject();
      cJSON_AddStringToObject(l, "name", L->name);
      cJSON *sh = cJSON_AddArrayToObject(l, "shape");
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)L->rows));
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)L->cols));
      cJSON_AddBoolToObject(l, "kept", L->kept);
      cJSON_AddNumberToObject(l, "amax", (double)L->amax);
      if (!L->kept)
        cJSON_AddNumberToObject(l, "sqnr_db", L->sqnr_db);
      cJSON_AddNumberToObject(l, "sqnr_per_tensor_db", L->sqnr_tensor_db);
      cJSON *as = NULL;
      for (int p = 0; p < 3; p++) {
        const ampc_calib_site *c = ampc_calib_find(o.calib, L->name, p);
        if (!c)
          break;
        as = as ? as : cJSON_AddArrayToObject(l, "activations");
        cJSON *a1 = cJSON_CreateObject();
        cJSON_AddNumberToObject(a1, "part", p);
        cJSON_AddNumberToObject(a1, "amax", (double)c->amax);
        cJSON_AddNumberToObject(a1, "scale", (double)c->scale[method]);
        cJSON *sq = cJSON_AddObjectToObject(a1, "sqnr_db");
        cJSON *cl = cJSON_AddObjectToObject(a1, "clipped");
        for (int m = 0; m < AMPC_CALIB_METHODS; m++) {
          cJSON_AddNumberToObject(sq, ampc_calib_method_name((ampc_calib_method)m), c->sqnr_db[m]);
          cJSON_AddNumberToObject(cl, ampc_calib_method_name((ampc_calib_method)m), c->clipped[m]);
        }
        cJSON_AddItemToArray(as, a1);
      }
      cJSON_AddItemToArray(ls, l);
    }
    cJSON *wj = cJSON_AddArrayToObject(j, "most_sensitive");
    for (int k = 0; k < 3 && worst[k] >= 0; k++)
      cJSON_AddItemToArray(wj, cJSON_CreateString(r.layers[worst[k]].name));
    cJSON_AddNumberToObject(j, "params_quantized", (double)r.params_quantized);
    cJSON_AddNumberToObject(j, "params_kept", (double)r.params_kept);
    cJSON_AddNumberToObject(j, "params_other", (double)r.params_other);
    cJSON_AddNumberToObject(j, "bytes_fp32", (double)r.bytes_fp32);
    cJSON_AddNumberToObject(j, "bytes_out", (double)r.bytes_out);
    char *t = cJSON_PrintUnformatted(j);
    printf("%s\n", t ? t : "{}");
    free(t), cJSON_Delete(j);
  } else {
    printf("%-44s %9s %8s %9s %10s", "layer", "shape", "max|w|", "SQNR dB", "per tensor");
    if (o.calib)
      printf(" %8s %9s %8s", "max|x|", "x SQNR dB", "clipped");
    printf("\n");
    for (int i = 0; i < r.n; i++) {
      const ampc_quant_layer *L = &r.layers[i];
      char sh[32], sq[16];
      snprintf(sh, sizeof sh, "%lldx%lld", (long long)L->rows, (long long)L->cols);
      if (L->kept)
        snprintf(sq, sizeof sq, "kept f32");
      else
        snprintf(sq, sizeof sq, "%.1f", L->sqnr_db);
      printf("%-44s %9s %8.4f %9s %10.1f", L->name, sh, (double)L->amax, sq, L->sqnr_tensor_db);
      if (o.calib && !L->kept && isfinite(act[i]))
        printf(" %8.3f %9.1f %7.3f%%", (double)xmax[i], act[i], 100.0 * clip[i]);
      else if (o.calib)
        printf(" %8s %9s %8s", "-", L->kept ? "kept f32" : "dynamic", "-");
      printf("\n");
    }
    if (o.calib)
      printf("activations: static scales by %s over %d batches of %lld%s; mean SQNR over %d "
             "sites: max %.1f dB, percentile %g %.1f dB, mse %.1f dB\n",
             ampc_calib_method_name(method), calib_n, (long long)q.batch,
             q.pack ? " (the pack's val split)" : " (the training split)", sites,
             mean[AMPC_CALIB_MAX], pct, mean[AMPC_CALIB_PERCENTILE], mean[AMPC_CALIB_MSE]);
    else
      printf("activations: scaled per call (dynamic); --calib N calibrates static scales\n");
    printf("most sensitive (lowest SQNR%s):", o.calib ? " of weights or activations" : "");
    for (int k = 0; k < 3 && worst[k] >= 0; k++)
      printf("%s %s (%.1f dB)", k ? "," : "", r.layers[worst[k]].name,
             fmin(r.layers[worst[k]].sqnr_db, act[worst[k]]));
    printf("\n%lld parameters in INT8, %lld kept in FP32, %lld others in FP32; %s: %.2f MiB "
           "(FP32 model %.2f MiB)\n",
           (long long)r.params_quantized, (long long)r.params_kept, (long long)r.params_other,
           o.out, (double)r.bytes_out / 1048576.0, (double)r.bytes_fp32 / 1048576.0);
  }
  free(act), free(xmax), free(clip), free(auto_keep);
  ampc_quant_report_free(&r);
  ampc_calib_free(&cal);
  qdata_free(&q);
  return ret;
}

const ampc_command ampc_cmd_quantize = {
    .name = "quantize",
    .summary = "INT8 post-training quantization of a checkpoint; per-layer SQNR",
    .usage = k_usage,
    .run = run,
};
