/*
 * tools/ampc/cmd_memory.c: `ampc memory` (the memory account: bytes per
 * parameter and per role for a parameter count, or every role of a model at
 * a batch size) and `ampc plan` (the largest batch whose predicted memory
 * fits a budget, per preset). The predictions come from the library's
 * allocation plans (include/ampc/report.h); nothing large is allocated here.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "ampc/report.h"

/* Fixed allowance added to the measured baseline RSS by `ampc plan`: what a
 * training process holds besides the predicted roles and the loaded dataset
 * (batch staging buffers, the evaluation's buffers, per-call temporaries of
 * the layers such as the attention backward's workspace, OpenMP and
 * OpenBLAS per-thread buffers, allocator slack). Measured in docs/DIAGNOSIS.md
 * ("Memory account"). */
#define PLAN_MARGIN_BYTES ((uint64_t)48 << 20)

static const char k_memory_usage[] =
    "Usage: ampc memory --params N [--optimizer adamw|sgd|none] [--precision P]\n"
    "                   [--ranks N] [--zero 0|1] [--json]\n"
    "       ampc memory --model NAME [--batch B] [--optimizer ...] [--precision P]\n"
    "                   [--ranks N] [--zero 0|1] [--json]\n"
    "\n"
    "The memory account of mixed-precision training, in bytes per role:\n"
    "weights (the preset's working dtype), master (FP32 copy), grads, moments\n"
    "(AdamW: 2 buffers, SGD with momentum: 1, none: 0; FP32, or 16-bit in the\n"
    "-true presets), compensation (Kahan updates only) and, with --model, the\n"
    "model's activations and gradient workspace, predicted from the model's own\n"
    "allocation plan (no allocation). Sizes print in binary units (KiB, MiB,\n"
    "GiB), as ampc train's; with --params also in decimal ones (GB), as the\n"
    "literature's tables give them: 17.88 GiB (19.20 GB).\n"
    "\n"
    "  --params N         parameter count (e.g. 1.2e9): bytes per parameter and total\n"
    "  --model NAME       mm-tiny, mm-small, mm-base, mm-large, mm-micro, vit-ref,\n"
    "                     vit-fm, vit-micro, mlp\n"
    "  --batch B          batch size for --model (64)\n"
    "  --data D           the sizes of the data --model trains on (emoji, a file,\n"
    "                     or a folder from `ampc data pack`: its image size,\n"
    "                     vocabulary and caption length; default: the emoji data)\n"
    "  --w-mlm W          the model trains with masked caption modelling (as ampc\n"
    "                     train --w-mlm W): its head and the masked copies counted\n"
    "  --recompute on|off as ampc train --recompute (on: the attention probabilities\n"
    "                     and the FP32 stream after attention are recomputed in the\n"
    "                     backward pass, not kept as activations)\n"
    "  --attention-cast on|off   as ampc train --attention-cast (off; on adds, on the\n"
    "                     GPU, the 16-bit probabilities of the largest attention\n"
    "                     call to device_scratch)\n"
    "  --classes C        classes of the head (default: the emoji data's 9; vit-fm\n"
    "                     10; mlp 5); --in N (16) --hidden N (64) for mlp\n"
    "  --optimizer O      adamw (default) | sgd | none\n"
    "  --precision P      32-true | 16-mixed (default) | bf16-mixed | 16-true |\n"
    "                     bf16-true | fp8-mixed (with --model: an fp8_state role,\n"
    "                     the amax histories; --fp8-amax-history N (1024) sizes it)\n"
    "  --master-weights on|off   override the preset's FP32 master copy\n"
    "  --weight-update nearest|stochastic|kahan   kahan adds a compensation buffer\n"
    "                     in the working dtype (16-bit weights without a master)\n"
    "  --device cpu|cuda  with --model: the account of a run on that device (cuda:\n"
    "                     every role in GPU memory, the arena also holds the batch's\n"
    "                     inputs, and device_scratch allows for cuBLASLt's 32 MiB\n"
    "                     workspace and the CUDA layers' FP32 staging, which grows\n"
    "                     with the batch)\n"
    "  --ranks N          data-parallel ranks (1; at most 1048576): the account is\n"
    "                     per rank (--batch is each rank's batch)\n"
    "  --zero 0|1         0 (default): every rank holds every role; 1: ZeRO stage 1\n"
    "                     (Rajbhandari et al. 2020), master, moments and\n"
    "                     compensation partitioned over the ranks in shards of\n"
    "                     4096 ceil(elements / (4096 N)) elements, weights and\n"
    "                     grads whole: rank 0's, the largest shard, is shown,\n"
    "                     with the --zero 0 total beside it. 16-mixed with AdamW:\n"
    "                     4 + 12/N bytes per parameter, e.g. --params 1.2e9\n"
    "                     --ranks 8 --zero 1: 6.15 GiB per rank, not 17.88 GiB\n"
    "  --json             one JSON object: bytes_per_param, total_bytes, roles{...}\n"
    "                     (with --ranks or --zero also ranks, zero, rank,\n"
    "                     shard_elements, total_bytes_zero_0, total_bytes_zero_1)\n"
    "\n"
    "Exit status: 0 success, 1 runtime error, 2 bad usage.\n";

static const char k_plan_usage[] =
    "Usage: ampc plan --budget BYTES [--model NAME] [--precision P[,P...]] [--json]\n"
    "\n"
    "The largest batch whose predicted memory (every role of `ampc memory --model`\n"
    "plus the process overhead) fits in BYTES, for each preset. The overhead is the\n"
    "peak RSS of this process after loading the dataset the model trains on, as\n"
    "`ampc train` does, plus a fixed margin of 48 MiB for batch buffers, layer\n"
    "temporaries and thread buffers. The model width is not searched.\n"
    "\n"
    "  --budget BYTES     e.g. 8G, 512M, 1.5GiB, 300000000 (K/M/G/T: powers of 1000,\n"
    "                     KiB/MiB/GiB/TiB: powers of 1024)\n"
    "  --model NAME       mm-tiny (default), mm-small, mm-base, mm-large, vit-ref,\n"
    "                     vit-fm (mm-micro, vit-micro: for 8x8 images)\n"
    "  --w-mlm W          with masked caption modelling (ampc train --w-mlm W)\n"
    "  --recompute on|off as ampc train --recompute (on)\n"
    "  --attention-cast on|off   as ampc train --attention-cast (off)\n"
    "  --precision LIST   presets, comma-separated (32-true,16-mixed,bf16-mixed)\n"
    "  --optimizer O      adamw (default) | sgd | none\n"
    "  --master-weights on|off   override the presets' FP32 master copy\n"
    "  --data emoji|fashion-mnist[:DIR]|FILE   the dataset `ampc train` would load\n"
    "                     (default: emoji; fashion-mnist for vit-fm)\n"
    "  --max-batch N      upper end of the search (default: the training split's\n"
    "                     size)\n"
    "  --overhead BYTES   use this process overhead instead of measuring it\n"
    "  --device cpu|cuda  cuda: plan GPU memory (ampc memory --device cuda's roles;\n"
    "                     the overhead is an allowance of 512 MiB for the CUDA\n"
    "                     context's own share unless --overhead; the act+scratch\n"
    "                     column adds device_scratch, which grows with the batch),\n"
    "                     e.g. ampc plan --device cuda --budget 80G --model mm-base\n"
    "  --json             one JSON object with one plan per preset\n"
    "\n"
    "Exit status: 0 success, 1 runtime error, 2 bad usage.\n";

typedef struct mem_args {
  const char *params, *model, *optimizer, *precision, *master, *update, *fp8hist, *data, *budget,
      *overhead;
  int64_t batch, classes, in, hidden, max_batch;
  int64_t ranks; /* --ranks (1) */
  int zero;      /* --zero 0|1 (0) */
  bool dp;       /* --ranks or --zero given: the per-rank account */
  float w_mlm;   /* --w-mlm: the masked caption modelling term's weight (0: off) */
  bool keep;     /* --recompute off */
  bool cast;     /* --attention-cast on */
  bool json;
  ampc_device device; /* --device (cpu) */
} mem_args;

static int parse_i64_flag(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi,
                          int64_t *out) {
  char *end = NULL;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return cli_usage_error(cmd, "--%s: expected an integer in [%lld, %lld], got '%s'", flag,
                           (long long)lo, (long long)hi, v);
  *out = x;
  return 0;
}

static bool is_json(const char *name) { return !strcmp(name, "json"); }

static int parse(const char *cmd, int argc, char **argv, mem_args *a) {
  for (int i = 1; i < argc; i++) {
    char name[32];
    const char *v = NULL;
    const int orc = cli_next_option(cmd, argc, argv, &i, is_json, name, sizeof name, &v);
    if (orc)
      return orc;
    if (!v) { /* --json */
      a->json = true;
      continue;
    }
    const bool is_plan = !strcmp(cmd, "plan");
    int rc = 0;
    if (!is_plan && !strcmp(name, "params"))
      a->params = v;
    else if (!strcmp(name, "model"))
      a->model = v;
    else if (!strcmp(name, "optimizer"))
      a->optimizer = v;
    else if (!strcmp(name, "precision"))
      a->precision = v;
    else if (!strcmp(name, "master-weights"))
      a->master = v;
    else if (!strcmp(name, "weight-update"))
      a->update = v;
    else if (!strcmp(name, "fp8-amax-history"))
      a->fp8hist = v;
    else if (!is_plan && !strcmp(name, "batch"))
      rc = parse_i64_flag(cmd, name, v, 1, 1 << 20, &a->batch);
    else if (!strcmp(name, "classes"))
      rc = parse_i64_flag(cmd, name, v, 2, 1 << 20, &a->classes);
    else if (!strcmp(name, "w-mlm")) {
      char *end = NULL;
      const double w = strtod(v, &end);
      if (!*v || *end || !(w >= 0.0 && w <= 1e30))
        return cli_usage_error(cmd, "--w-mlm: expected a weight >= 0, got '%s'", v);
      a->w_mlm = (float)w;
    } else if (!strcmp(name, "recompute"))
      rc = cli_parse_recompute(cmd, v, &a->keep);
    else if (!strcmp(name, "attention-cast"))
      rc = cli_parse_attention_cast(cmd, v, &a->cast);
    else if (!is_plan && !strcmp(name, "ranks")) {
      rc = parse_i64_flag(cmd, name, v, 1, 1 << 20, &a->ranks);
      a->dp = true;
    } else if (!is_plan && !strcmp(name, "zero")) {
      if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return cli_usage_error(cmd,
                               "--zero: expected 0 (every rank holds everything) or 1 (ZeRO "
                               "stage 1: master weights and optimizer state partitioned over "
                               "--ranks), got '%s'",
                               v);
      a->zero = v[0] - '0';
      a->dp = true;
    } else if (!is_plan && !strcmp(name, "in"))
      rc = parse_i64_flag(cmd, name, v, 1, 1 << 24, &a->in);
    else if (!is_plan && !strcmp(name, "hidden"))
      rc = parse_i64_flag(cmd, name, v, 1, 1 << 24, &a->hidden);
    else if (!strcmp(name, "device")) {
      if (cli_parse_device(cmd, v, false, &a->device) != 0)
        return AMPC_EXIT_USAGE;
    } else if (is_plan && !strcmp(name, "budget"))
      a->budget = v;
    else if (is_plan && !strcmp(name, "overhead"))
      a->overhead = v;
    else if (!strcmp(name, "data"))
      a->data = v;
    else if (is_plan && !strcmp(name, "max-batch"))
      rc = parse_i64_flag(cmd, name, v, 2, 1 << 20, &a->max_batch);
    else
      return cli_usage_error(cmd, "unknown option --%s", name);
    if (rc)
      return rc;
  }
  return 0;
}

/* The resolved precision of one preset name with the --master-weights override. */
static int resolve_amp(const char *cmd, const char *name, const char *master, const char *update,
                       const char *fp8hist, ampc_amp_config *amp) {
  ampc_precision p;
  if (ampc_precision_parse(name, &p) != AMPC_OK)
    return cli_usage_error(cmd, "--precision: %s", ampc_last_error());
  ampc_amp_config_preset(p, amp);
  if (master && ampc_amp_config_set(amp, "master-weights", master) != AMPC_OK)
    return cli_usage_error(cmd, "--master-weights: %s", ampc_last_error());
  if (update && ampc_amp_config_set(amp, "weight-update", update) != AMPC_OK)
    return cli_usage_error(cmd, "%s", ampc_last_error());
  if (fp8hist && ampc_amp_config_set(amp, "fp8-amax-history", fp8hist) != AMPC_OK)
    return cli_usage_error(cmd, "%s", ampc_last_error());
  if (ampc_amp_config_check(amp) != AMPC_OK)
    return cli_usage_error(cmd, "%s", ampc_last_error());
  return 0;
}

/* --attention-cast on where the device's attention does not take 16-bit
 * probabilities with these sums (ampc_device_supports; ampc train refuses it
 * at model creation too): a usage error for a preset that sums in FP16
 * (16-true) */
static int check_cast_gpu(const char *cmd, const char *name, const ampc_amp_config *amp, bool cast,
                          ampc_device dev) {
  const ampc_op_query q = {AMPC_DEVICE_OP_MHA, amp->lowp, amp->accumulate};
  if (cast && amp->lowp != AMPC_F32 && !ampc_device_supports(dev, &q))
    return cli_usage_error(cmd,
                           "--attention-cast on needs FP32 sums on the GPU; %s sums in FP16 "
                           "(ampc train --device %s refuses it too)",
                           name, ampc_device_name(dev));
  return 0;
}

/* the roles an account prints: the parameter roles (and the model's with
 * --model), the gradient staging of several ranks where there is one */
static bool role_shown(const ampc_mem_account *m, bool model, int k) {
  if (k == AMPC_MEM_GRAD_STAGE)
    return m->bytes[k] > 0;
  if (k == AMPC_MEM_DEVICE_SCRATCH && m->bytes[k] == 0) /* a CPU account */
    return false;
  return model || k < AMPC_MEM_ACTIVATIONS;
}

static cJSON *roles_json(const ampc_mem_account *m, bool model) {
  cJSON *r = cJSON_CreateObject();
  for (int k = 0; k < AMPC_MEM_ROLE_COUNT; k++)
    if (role_shown(m, model, k) || (model && k == AMPC_MEM_DEVICE_SCRATCH))
      cJSON_AddNumberToObject(r, ampc_mem_role_name((ampc_mem_role)k), (double)m->bytes[k]);
  return r;
}

/* b bytes in binary units, as `ampc train` prints them: "17.88 GiB",
 * "188.45 MiB", "4.00 KiB", "512 B" */
static const char *human(size_t b, char *buf, size_t n) {
  const double x = (double)b;
  if (x >= 0x1p30)
    snprintf(buf, n, "%.2f GiB", x / 0x1p30);
  else if (x >= 0x1p20)
    snprintf(buf, n, "%.2f MiB", x / 0x1p20);
  else if (x >= 0x1p10)
    snprintf(buf, n, "%.2f KiB", x / 0x1p10);
  else
    snprintf(buf, n, "%zu B", b);
  return buf;
}

/* b bytes in decimal units, as the budgets of `ampc plan` (8G) and the
 * literature's tables are given: "19.20 GB", "944.81 MB", "4.23 kB", "512 B" */
static const char *human_dec(size_t b, char *buf, size_t n) {
  const double x = (double)b;
  if (x >= 1e9)
    snprintf(buf, n, "%.2f GB", x / 1e9);
  else if (x >= 1e6)
    snprintf(buf, n, "%.2f MB", x / 1e6);
  else if (x >= 1e3)
    snprintf(buf, n, "%.2f kB", x / 1e3);
  else
    snprintf(buf, n, "%zu B", b);
  return buf;
}

/* both, for the outputs that compare with the literature's table in GB
 * (--params): "17.88 GiB (19.20 GB)"; bytes under 1 KiB once: "0 B" */
static const char *human_both(size_t b, char *buf, size_t n) {
  char bin[32], dec[32];
  if (b < 1024)
    return human(b, buf, n);
  snprintf(buf, n, "%s (%s)", human(b, bin, sizeof bin), human_dec(b, dec, sizeof dec));
  return buf;
}

/* The multimodal config of a model name with the data's sizes (the embedded
 * emoji dataset's vocab, seq_len and classes; image-only models need none). */
static int model_config(const char *cmd, const char *name, int64_t classes, const char *data,
                        ampc_mmodel_config *mc) {
  if (data) { /* the sizes of that data, as ampc train takes them (a pack: its image size) */
    ampc_dataset D;
    int rc = cli_load_data(cmd, data, &D);
    if (rc)
      return rc;
    ampc_model_desc md;
    ampc_status st = ampc_model_desc_get(name, &D, &md);
    if (st == AMPC_OK && cli_is_pack(data)) /* the model takes a pack's image size */
      st = ampc_mmodel_follow_image(&md.mm, D.height);
    ampc_dataset_free(&D);
    if (st != AMPC_OK)
      return cli_usage_error(cmd, "--model: %s", ampc_last_error());
    *mc = md.mm;
    if (classes > 0)
      mc->classes = classes;
    return 0;
  }
  int64_t vocab = 3, seq = 1, ncls = classes;
  const bool image_only =
      !strcmp(name, "vit-ref") || !strcmp(name, "vit-fm") || !strcmp(name, "vit-micro");
  if (!image_only || ncls == 0) {
    if (!strcmp(name, "vit-fm") && ncls == 0) {
      ncls = 10;
    } else {
      ampc_dataset D;
      if (ampc_dataset_load_default(&D) != AMPC_OK)
        return cli_runtime_error(cmd, "the embedded dataset: %s", ampc_last_error());
      vocab = D.vocab, seq = D.seq_len;
      if (ncls == 0)
        ncls = D.n_classes;
      ampc_dataset_free(&D);
    }
  }
  if (ampc_mmodel_config_get(name, vocab, seq, ncls, mc) != AMPC_OK)
    return cli_usage_error(cmd, "--model: %s", ampc_last_error());
  return 0;
}

/* the roles' table: bytes in binary units (--model), or in binary and decimal
 * units with bytes per parameter (--params, the literature's table) */
static void print_table(const ampc_mem_account *m, bool model, bool per_rank) {
  char b1[80];
  const int w = model ? 14 : 22;
  printf("%-14s %12s %*s", "role", per_rank ? "bytes/rank" : "bytes", w, "");
  printf("%s\n", model ? "" : "   bytes/param");
  for (int k = 0; k < AMPC_MEM_ROLE_COUNT; k++) {
    if (!role_shown(m, model, k))
      continue;
    printf("%-14s %12zu %*s", ampc_mem_role_name((ampc_mem_role)k), m->bytes[k], w,
           model ? human(m->bytes[k], b1, sizeof b1) : human_both(m->bytes[k], b1, sizeof b1));
    if (!model)
      printf(" %14g", (double)m->bytes[k] / (double)m->params);
    putchar('\n');
  }
  printf("%-14s %12zu %*s", "total", m->total, w,
         model ? human(m->total, b1, sizeof b1) : human_both(m->total, b1, sizeof b1));
  if (!model)
    printf(" %14g", m->bytes_per_param);
  putchar('\n');
}

static int run_memory(int argc, char **argv) {
  const char *cmd = "memory";
  mem_args a = {
      .optimizer = "adamw", .precision = "16-mixed", .batch = 64, .ranks = 1}; /* in, hidden: 0 */
  int rc = parse(cmd, argc, argv, &a);
  if (rc)
    return rc;
  if (!a.params == !a.model)
    return cli_usage_error(cmd, "give exactly one of --params N and --model NAME");
  if ((a.in || a.hidden) && (!a.model || strcmp(a.model, "mlp") != 0))
    return cli_usage_error(cmd, "--in and --hidden size the mlp model: give --model mlp");
  if (a.model && !ampc_model_known(a.model))
    return cli_unknown_model(cmd, a.model, true);
  int moments;
  if (ampc_mem_optimizer_moments(a.optimizer, &moments) != AMPC_OK)
    return cli_usage_error(cmd, "--optimizer: %s", ampc_last_error());
  ampc_amp_config amp, ref;
  if ((rc = resolve_amp(cmd, a.precision, a.master, a.update, a.fp8hist, &amp)) != 0 ||
      (rc = resolve_amp(cmd, "32-true", NULL, NULL, NULL, &ref)) != 0)
    return rc;
  ampc_mem_account m, m32;
  const bool model = a.model != NULL;
  /* the attention cast as in effect: a multimodal or ViT model, 16-bit activations */
  const bool has_attn = model && strcmp(a.model, "mlp") != 0;
  const bool cast = has_attn && a.cast && amp.lowp != AMPC_F32;
  if ((rc = check_cast_gpu(cmd, a.precision, &amp, a.cast, a.device)) != 0)
    return rc;
  if (a.cast && !cast)
    fprintf(stderr, "ampc memory: warning: %s\n",
            has_attn
                ? "--attention-cast on has no effect under 32-true (its attention products are "
                  "FP32 already)"
                : "--attention-cast is ignored without a --model that has attention");
  if (a.device != AMPC_DEVICE_CPU && (!model || !strcmp(a.model, "mlp")))
    return cli_usage_error(cmd,
                           "--device %s: give a multimodal or ViT --model (the GPU runs "
                           "those; --params and mlp are CPU accounts)",
                           ampc_device_name(a.device));
  if (!model) {
    char *end = NULL;
    errno = 0;
    const double n = strtod(a.params, &end);
    if (!*a.params || *end || errno || !(n >= 1) || n > 1e15 || n != floor(n))
      return cli_usage_error(cmd, "--params: expected a whole number >= 1 (e.g. 1.2e9), got '%s'",
                             a.params);
    if (ampc_mem_account_params((int64_t)n, &amp, moments, &m) != AMPC_OK ||
        ampc_mem_account_params((int64_t)n, &ref, moments, &m32) != AMPC_OK)
      return cli_usage_error(cmd, "%s", ampc_last_error());
  } else if (!strcmp(a.model, "mlp")) {
    const ampc_mlp_config mc = {a.in ? a.in : 16, a.hidden ? a.hidden : 64,
                                a.classes ? a.classes : 5};
    if (ampc_mem_account_mlp(&mc, a.batch, &amp, moments, &m) != AMPC_OK ||
        ampc_mem_account_mlp(&mc, a.batch, &ref, moments, &m32) != AMPC_OK)
      return cli_usage_error(cmd, "%s", ampc_last_error());
  } else {
    ampc_mmodel_config mc;
    if ((rc = model_config(cmd, a.model, a.classes, a.data, &mc)) != 0)
      return rc;
    if (!mc.image_only) /* the MLM head and the masked copies' activations */
      mc.w_mlm = a.w_mlm;
    mc.no_recompute = a.keep;
    mc.attn_cast = a.cast;
    if (a.batch < 2)
      return cli_usage_error(cmd, "--batch: model %s needs at least 2", a.model);
    if (ampc_mem_account_mm_on(&mc, a.batch, &amp, moments, a.device, &m) != AMPC_OK ||
        ampc_mem_account_mm_on(&mc, a.batch, &ref, moments, a.device, &m32) != AMPC_OK)
      return cli_usage_error(cmd, "%s", ampc_last_error());
  }
  /* per rank: rank 0's account (the largest shard), and the other --zero's
   * total for comparison */
  ampc_mem_account alt = m;
  if (ampc_mem_account_shard(&m, (int)a.ranks, a.zero, 0) != AMPC_OK ||
      ampc_mem_account_shard(&m32, (int)a.ranks, a.zero, 0) != AMPC_OK ||
      ampc_mem_account_shard(&alt, (int)a.ranks, !a.zero, 0) != AMPC_OK)
    return cli_runtime_error(cmd, "%s", ampc_last_error());
  const ampc_mem_account *z0 = a.zero ? &alt : &m, *z1 = a.zero ? &m : &alt;
  if (a.zero && a.ranks == 1)
    fprintf(stderr, "ampc memory: warning: --zero 1 over 1 rank partitions nothing (give --ranks "
                    "N)\n");
  if (a.json) {
    cJSON *o = cJSON_CreateObject();
    if (model) {
      cJSON_AddStringToObject(o, "model", a.model);
      cJSON_AddNumberToObject(o, "batch", (double)m.batch);
      if (has_attn) {
        cJSON_AddBoolToObject(o, "recompute", !a.keep);
        cJSON_AddBoolToObject(o, "attention_cast", cast);
      }
    }
    cJSON_AddNumberToObject(o, "params", (double)m.params);
    cJSON_AddStringToObject(o, "precision", a.precision);
    cJSON_AddStringToObject(o, "device", ampc_device_name(a.device));
    cJSON_AddStringToObject(o, "optimizer", a.optimizer);
    cJSON_AddBoolToObject(o, "master_weights", amp.master_weights && amp.lowp != AMPC_F32);
    cJSON_AddNumberToObject(o, "bytes_per_param", m.bytes_per_param);
    cJSON_AddNumberToObject(o, "total_bytes", (double)m.total);
    cJSON_AddItemToObject(o, "roles", roles_json(&m, model));
    cJSON_AddNumberToObject(o, "total_bytes_32_true", (double)m32.total);
    if (a.dp) {
      cJSON_AddNumberToObject(o, "ranks", (double)a.ranks);
      cJSON_AddNumberToObject(o, "zero", a.zero);
      cJSON_AddNumberToObject(o, "rank", m.rank);
      cJSON_AddNumberToObject(o, "shard_elements", (double)m.shard_n);
      cJSON_AddNumberToObject(o, "total_bytes_zero_0", (double)z0->total);
      cJSON_AddNumberToObject(o, "total_bytes_zero_1", (double)z1->total);
    }
    return cli_print_json(cmd, o);
  }
  char b1[80], b2[80], dp[96] = "";
  if (a.dp && a.zero)
    snprintf(dp, sizeof dp, ", per rank: rank 0 of %lld (the largest shard), ZeRO-1",
             (long long)a.ranks);
  else if (a.dp)
    snprintf(dp, sizeof dp, ", per rank: each of %lld, ZeRO off", (long long)a.ranks);
  if (model)
    printf("ampc memory: %s, batch %lld, %lld parameters, precision %s, optimizer %s%s%s%s%s\n",
           a.model, (long long)a.batch, (long long)m.params, a.precision, a.optimizer,
           strcmp(a.model, "mlp") == 0 ? ""
           : a.keep                    ? ", recompute off"
                                       : ", recompute on",
           cast ? ", attention cast on" : "",
           ampc_device_desc_get(a.device)->foreign_memory ? ", on the GPU (device memory)" : "",
           dp);
  else
    printf("ampc memory: %lld parameters, precision %s, optimizer %s%s\n", (long long)m.params,
           a.precision, a.optimizer, dp);
  print_table(&m, model, a.dp);
  const size_t p = m.total - m.bytes[AMPC_MEM_ACTIVATIONS] - m.bytes[AMPC_MEM_WORKSPACE] -
                   m.bytes[AMPC_MEM_FP8_STATE] - m.bytes[AMPC_MEM_DEVICE_SCRATCH];
  const size_t p32 = m32.total - m32.bytes[AMPC_MEM_ACTIVATIONS] - m32.bytes[AMPC_MEM_WORKSPACE] -
                     m32.bytes[AMPC_MEM_DEVICE_SCRATCH];
  const double r = (double)m.total / (double)m32.total;
  if (!model && fabs(r - 1.0) < 1e-9)
    printf("%s: %g bytes/param, %s, the same as 32-true with %s: weight and optimizer memory "
           "does not shrink with mixed precision (the FP32 master copy takes back what 16-bit "
           "weights and gradients save); only activations do.\n",
           a.precision, m.bytes_per_param, human_both(m.total, b1, sizeof b1), a.optimizer);
  else if (!model)
    printf("%s: %g bytes/param, %s: %.2fx of 32-true with %s: %g bytes/param, %s.\n", a.precision,
           m.bytes_per_param, human_both(m.total, b1, sizeof b1), r, a.optimizer,
           m32.bytes_per_param, human_both(m32.total, b2, sizeof b2));
  else
    printf("vs 32-true: parameter state %.2fx (%s), activations %.3fx, activations + workspace "
           "%.3fx (%s).\n",
           (double)p / (double)p32, human(p32, b1, sizeof b1),
           (double)m.bytes[AMPC_MEM_ACTIVATIONS] / (double)m32.bytes[AMPC_MEM_ACTIVATIONS],
           (double)(m.bytes[AMPC_MEM_ACTIVATIONS] + m.bytes[AMPC_MEM_WORKSPACE]) /
               (double)(m32.bytes[AMPC_MEM_ACTIVATIONS] + m32.bytes[AMPC_MEM_WORKSPACE]),
           human(m32.bytes[AMPC_MEM_ACTIVATIONS] + m32.bytes[AMPC_MEM_WORKSPACE], b2, sizeof b2));
  if (a.dp) { /* the comparison with the other --zero */
    const char *(*size)(size_t, char *, size_t) = model ? human : human_both;
    int64_t lo = 0, last = 0;
    ampc_shard_range(m.elements, (int)a.ranks, (int)a.ranks - 1, &lo, &last);
    if (a.zero)
      printf("ZeRO-1 over %lld rank%s: %s per rank instead of %s with --zero 0 (master, moments "
             "and compensation: %lld of %lld elements on rank 0, %lld on the last).\n",
             (long long)a.ranks, a.ranks == 1 ? "" : "s", size(z1->total, b1, sizeof b1),
             size(z0->total, b2, sizeof b2), (long long)z1->shard_n, (long long)m.elements,
             (long long)last);
    else
      printf("Data parallelism over %lld rank%s without ZeRO: every rank holds %s; with --zero 1 "
             "%s per rank.\n",
             (long long)a.ranks, a.ranks == 1 ? "" : "s", size(z0->total, b1, sizeof b1),
             size(z1->total, b2, sizeof b2));
  }
  return AMPC_EXIT_OK;
}

static int run_plan(int argc, char **argv) {
  const char *cmd = "plan";
  mem_args a = {
      .model = "mm-tiny", .optimizer = "adamw", .precision = "32-true,16-mixed,bf16-mixed"};
  int rc = parse(cmd, argc, argv, &a);
  if (rc)
    return rc;
  if (!a.budget)
    return cli_usage_error(cmd, "--budget BYTES is required");
  uint64_t budget = 0, overhead = 0;
  if (ampc_parse_bytes(a.budget, &budget) != AMPC_OK)
    return cli_usage_error(cmd, "--budget: %s", ampc_last_error());
  if (a.overhead && ampc_parse_bytes(a.overhead, &overhead) != AMPC_OK)
    return cli_usage_error(cmd, "--overhead: %s", ampc_last_error());
  if (!strcmp(a.model, "mlp"))
    return cli_usage_error(cmd, "--model mlp is not planned (its batch is not memory-bound)");
  if (!ampc_model_known(a.model))
    return cli_unknown_model(cmd, a.model, false);
  const ampc_device_desc *dd = ampc_device_desc_get(a.device);
  const bool gpu = dd->foreign_memory;
  int moments;
  if (ampc_mem_optimizer_moments(a.optimizer, &moments) != AMPC_OK)
    return cli_usage_error(cmd, "--optimizer: %s", ampc_last_error());
  /* presets first: a bad list is bad usage, before any work */
  enum { MAXP = 8 };
  char names[MAXP][16];
  ampc_amp_config amps[MAXP];
  int np = 0;
  for (const char *s = a.precision; *s;) {
    const char *e = strchr(s, ',');
    const size_t len = e ? (size_t)(e - s) : strlen(s);
    if (np == MAXP || len == 0 || len >= sizeof names[0])
      return cli_usage_error(cmd, "--precision: bad list '%s'", a.precision);
    memcpy(names[np], s, len);
    names[np][len] = '\0';
    for (int j = 0; j < np; j++)
      if (strcmp(names[j], names[np]) == 0)
        return cli_usage_error(cmd, "--precision: %s is listed twice", names[np]);
    if ((rc = resolve_amp(cmd, names[np], a.master, a.update, a.fp8hist, &amps[np])) != 0 ||
        (rc = check_cast_gpu(cmd, names[np], &amps[np], a.cast, a.device)) != 0)
      return rc;
    np++;
    s = e ? e + 1 : s + len;
    if (e && !*s)
      return cli_usage_error(cmd, "--precision: bad list '%s'", a.precision);
  }
  ampc_mmodel_config mc;
  const char *data = a.data ? a.data : !strcmp(a.model, "vit-fm") ? "fashion-mnist" : "emoji";
  /* the dataset, loaded as the training loop loads it: its sizes shape the
   * model, its training split bounds the batch, and the process's peak RSS
   * after loading it is the measured overhead */
  ampc_dataset D;
  memset(&D, 0, sizeof D);
  if ((rc = cli_load_data(cmd, data, &D)) != 0)
    return rc;
  int64_t ntrain = 0;
  for (int64_t i = 0; i < D.n; i++)
    ntrain += D.split[i] == AMPC_SPLIT_TRAIN;
  /* the model with the data's sizes (a probe's for data without captions:
   * the check then says why it cannot feed an image-text model), checked
   * against the data as ampc train checks it */
  const bool text = D.tokens && D.seq_len > 0;
  ampc_status st = ampc_mmodel_config_get(a.model, text ? D.vocab : 3, text ? D.seq_len : 1,
                                          a.classes ? a.classes : D.n_classes, &mc);
  if (cli_is_pack(data)) { /* the model takes its image size; its training split is in the
                            * shards, not in memory */
    if (st == AMPC_OK)
      st = ampc_mmodel_follow_image(&mc, D.height);
    ampc_shards *sh;
    if (ampc_shards_open(&sh, data, false, false) == AMPC_OK) {
      ntrain = ampc_shards_get_info(sh)->n_train;
      ampc_shards_close(sh);
    }
  }
  if (st == AMPC_OK)
    st = ampc_mmodel_check_data(&mc, &D, data);
  ampc_dataset_free(&D);
  if (st != AMPC_OK)
    return cli_usage_error(cmd, "--model: %s", ampc_last_error());
  if (!mc.image_only) /* the MLM head and the masked copies' activations */
    mc.w_mlm = a.w_mlm;
  mc.no_recompute = a.keep;
  mc.attn_cast = a.cast;
  const int64_t rss = ampc_peak_rss_bytes();
  const bool measured = a.overhead == NULL && !gpu;
  if (a.overhead == NULL && gpu) /* the device: its context's own share */
    overhead = dd->context_bytes;
  if (measured) {
    if (rss < 0)
      return cli_runtime_error(cmd, "getrusage failed; give --overhead BYTES");
    overhead = (uint64_t)rss + PLAN_MARGIN_BYTES;
  }
  const int64_t max_batch = a.max_batch ? a.max_batch : ntrain;
  if (max_batch < 2)
    return cli_usage_error(cmd, "--max-batch: the training split has %lld samples",
                           (long long)ntrain);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", mc.name);
  cJSON_AddBoolToObject(o, "recompute", !a.keep);
  cJSON_AddBoolToObject(o, "attention_cast", a.cast);
  cJSON_AddStringToObject(o, "data", data);
  cJSON_AddNumberToObject(o, "budget_bytes", (double)budget);
  cJSON_AddNumberToObject(o, "overhead_bytes", (double)overhead);
  char allowance[64];
  snprintf(allowance, sizeof allowance, "%s context allowance", dd->name);
  cJSON_AddStringToObject(o, "overhead_source",
                          measured     ? "measured"
                          : a.overhead ? "--overhead"
                                       : allowance);
  cJSON_AddStringToObject(o, "device", dd->name);
  if (measured) {
    cJSON_AddNumberToObject(o, "baseline_rss_bytes", (double)rss);
    cJSON_AddNumberToObject(o, "margin_bytes", (double)PLAN_MARGIN_BYTES);
  }
  cJSON_AddNumberToObject(o, "max_batch", (double)max_batch);
  cJSON_AddStringToObject(o, "optimizer", a.optimizer);
  cJSON_AddStringToObject(o, "width", "not searched");
  cJSON *plans = cJSON_AddArrayToObject(o, "plans");
  char b1[32], b2[32], b3[32], allowance_text[96];
  snprintf(allowance_text, sizeof allowance_text, "the %s context's allowance; GPU memory",
           dd->label);
  if (!a.json)
    printf("ampc plan: %s on %s, recompute %s%s, budget %s, overhead %s (%s), batch <= %lld\n",
           mc.name, data, a.keep ? "off" : "on",
           a.cast ? ", attention cast on (the 16-bit presets)" : "",
           human_dec((size_t)budget, b1, sizeof b1), human_dec((size_t)overhead, b2, sizeof b2),
           measured     ? "measured RSS after loading the data + 48 MiB"
           : a.overhead ? "--overhead"
                        : allowance_text,
           (long long)max_batch);
  if (!a.json)
    printf("%-11s %7s %14s %14s %14s\n", "precision", "batch", "parameters",
           gpu ? "act+scratch" : "activations", "total");
  for (int k = 0; k < np; k++) {
    int64_t b = 0;
    ampc_mem_account m;
    if (ampc_mem_plan_mm_on(&mc, &amps[k], moments, a.device, (size_t)budget, (size_t)overhead,
                            max_batch, &b, &m) != AMPC_OK) {
      cJSON_Delete(o);
      return cli_runtime_error(cmd, "%s", ampc_last_error());
    }
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "precision", names[k]);
    cJSON_AddNumberToObject(p, "batch", (double)b);
    cJSON_AddBoolToObject(p, "fits", b > 0);
    cJSON_AddBoolToObject(p, "attention_cast", a.cast && amps[k].lowp != AMPC_F32);
    cJSON_AddBoolToObject(p, "limited_by_data", b == max_batch);
    cJSON_AddNumberToObject(p, "predicted_bytes", (double)(m.total + overhead));
    cJSON_AddItemToObject(p, "roles", roles_json(&m, true));
    cJSON_AddItemToArray(plans, p);
    if (!a.json) {
      const size_t params = m.bytes[AMPC_MEM_WEIGHTS] + m.bytes[AMPC_MEM_MASTER] +
                            m.bytes[AMPC_MEM_GRADS] + m.bytes[AMPC_MEM_MOMENTS];
      if (b > 0)
        printf("%-11s %7lld %14s %14s %14s%s\n", names[k], (long long)b,
               human_dec(params, b1, sizeof b1),
               human_dec(m.bytes[AMPC_MEM_ACTIVATIONS] + m.bytes[AMPC_MEM_WORKSPACE] +
                             m.bytes[AMPC_MEM_DEVICE_SCRATCH],
                         b2, sizeof b2),
               human_dec(m.total + overhead, b3, sizeof b3),
               b == max_batch ? "  (the whole training split)" : "");
      else
        printf("%-11s %7s  does not fit: batch 2 needs %s\n", names[k], "-",
               human_dec(m.total + overhead, b1, sizeof b1));
    }
  }
  if (a.json)
    return cli_print_json(cmd, o);
  cJSON_Delete(o);
  printf("(model width not searched; totals include the overhead)\n");
  return AMPC_EXIT_OK;
}

const ampc_command ampc_cmd_memory = {
    .name = "memory",
    .summary = "bytes per role: weights, master, grads, moments, activations",
    .usage = k_memory_usage,
    .run = run_memory,
};

const ampc_command ampc_cmd_plan = {
    .name = "plan",
    .summary = "largest batch whose predicted memory fits a budget, per preset",
    .usage = k_plan_usage,
    .run = run_plan,
};
