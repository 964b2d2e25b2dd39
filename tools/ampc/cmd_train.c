/*
 * tools/ampc/cmd_train.c: `ampc train`: run the training engine on a model.
 *
 * For now the model is the MLP classifier on synthetic Gaussian-blob data
 * (include/ampc/model.h); the multimodal model and real data plug into the
 * same loop. Every precision safeguard is one flag; the resolved configuration
 * is printed at start and written as the first line of the JSONL log; the run
 * is deterministic for a seed and thread count, and --resume continues a
 * checkpoint exactly where an uninterrupted run would be.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ampc/ampc.h"
#include "train.h"

static const char k_usage[] =
    "Usage: ampc train [options]\n"
    "\n"
    "Train a model with mixed precision. Models: --model mm-tiny (default),\n"
    "mm-small, mm-base (59 M parameters), mm-large (188 M): the multimodal\n"
    "image-text model (ViT vision encoder, text encoder, cross-attention fusion;\n"
    "loss w_itc InfoNCE + w_itm matching BCE + w_cls group CE) on --data emoji\n"
    "(the bundled emoji pairs; default) or a file from `ampc data emoji`; --model\n"
    "vit-ref, vit-fm: image-only ViTs (vit-fm: the default for --data\n"
    "fashion-mnist); --model mlp: an MLP on synthetic Gaussian blobs. mm-micro\n"
    "and vit-micro take 8x8 images: the tests' gradient-check models, which no\n"
    "bundled data fits.\n"
    "\n"
    "Precision (presets as PyTorch Lightning's precision=):\n"
    "  --precision P        32-true | 16-mixed | bf16-mixed | 16-true | bf16-true |\n"
    "                       fp8-mixed (default 16-mixed); a list A,B,... runs each\n"
    "                       preset and prints them side by side, its --log and\n"
    "                       --save FILEs named per preset (run.jsonl -> run.A.jsonl)\n"
    "  --fp8-amax-history N (1024) --fp8-amax-compute max|most_recent --fp8-margin M\n"
    "  --master-weights on|off   FP32 master copy of the weights\n"
    "  --loss-scale none|dynamic|per-branch|per-loss|S   loss scaling (S: a static\n"
    "                       scale; per-branch: one dynamic scale per branch, vision,\n"
    "                       text, fusion, heads, each picked from its gradient\n"
    "                       histogram on the --telemetry-every steps, powers of two\n"
    "                       only; per-loss: one dynamic scale per loss term, itc,\n"
    "                       itm, cls, a backward pass each, unscaled into an FP32\n"
    "                       sum; one global skip; the log's loss_scale is the heads'\n"
    "                       (per-branch) or the smallest term's (per-loss),\n"
    "                       branch_scales / loss_scales give each)\n"
    "  --accumulate fp32|fp16    GEMM accumulation\n"
    "  --weight-update nearest|stochastic|kahan  update of 16-bit weights without a\n"
    "                       master (bf16-true; kahan also 16-true)\n"
    "  --init-scale S (65536) --growth-factor G (2) --backoff-factor B (0.5)\n"
    "  --growth-interval N (2000) --hysteresis H (1) --min-scale S (1) --max-scale S\n"
    "\n";

static const char k_usage_more[] =
    "Optimizer:\n"
    "  --optimizer adamw|sgd (adamw)  --lr LR (1e-3; sgd 1e-2)\n"
    "  --weight-decay WD (adamw 0.01, sgd 0)  --beta1 B1 (0.9)  --beta2 B2 (0.999)\n"
    "  --eps E (1e-8)  --momentum M (sgd 0.9)  --nesterov\n"
    "  --warmup N (20; mlp 0)  --schedule cosine|constant (cosine)  --min-lr LR (0)\n"
    "  --clip-norm C (0 = off; global L2 norm of the unscaled gradients)\n"
    "  --lr-vision LR --lr-text LR --lr-fusion LR --lr-heads LR   parameter groups:\n"
    "                   a branch's own peak learning rate (default --lr), on the same\n"
    "                   warmup and schedule\n"
    "\n"
    "Run:\n"
    "  --steps N (300)  --stop-at N (end after step N as if interrupted, saving\n"
    "                   the checkpoint; the LR schedule still spans --steps)\n"
    "  --batch B (64)  --micro-batches K (1: gradient accumulation)\n"
    "  --loss-multiplier L|2^K  backward of L*loss, L in [2^-40, 1], eps and clip\n"
    "                   norm scaled by L (AdamW only; grad_norm is L's)\n"
    "  --seed S (1)  --threads N (all cores)  --eval-every N (100; and at the end)\n"
    "  --no-eval        no evaluation at all\n"
    "  --in N (16) --hidden N (64) --classes N (5) --train-size N (4096)\n"
    "  --test-size N (1024) --separation X (0.8)   mlp model and data sizes\n"
    "  --data emoji|fashion-mnist[:DIR]|FILE   the bundled emoji pairs (default),\n"
    "                   Debian's Fashion-MNIST (image-only; the default model\n"
    "                   becomes vit-fm), or a file from `ampc data emoji`\n"
    "  --hold-out-style S   the artwork style evaluated as the new style; the model\n"
    "                   trains on the others (default: the data file's, twitter;\n"
    "                   `ampc data info` lists the styles)\n"
    "  --augment-shift N   translate each training image by up to N pixels (0..8;\n"
    "                   default 0), the border filled with its background\n"
    "  --itm-negatives hardest|sampled|random   the matching head's negative text per\n"
    "                   image: the most similar in the batch (default), drawn by\n"
    "                   similarity (ALBEF), or drawn uniformly from the other texts\n"
    "  --w-itc W --w-itm W --w-cls W   loss weights (1, 1, 1)\n"
    "  --w-mlm W        masked caption modelling (ALBEF's MLM) with weight W (0: off,\n"
    "                   the default): a token-level cross-entropy over the vocabulary\n"
    "                   at the masked tokens of a masked copy of each caption\n"
    "  --mlm-prob P     the share of tokens masked (0.15; at least one per caption)\n"
    "  --log FILE       JSON Lines: a config line, one line per step, eval lines,\n"
    "                   a summary line\n"
    "  --log-every N    step lines every N steps (1; sampled and overflowing steps\n"
    "                   are always logged)\n"
    "  --telemetry-every N   count what 16-bit rounding does (flushed to zero,\n"
    "                   subnormal, overflow, log2|x| histograms per branch) and run\n"
    "                   the FP64 shadow GEMM check every N steps (10; 0 = off;\n"
    "                   multimodal and ViT models)\n"
    "  --save FILE (or --checkpoint FILE)  safetensors checkpoint at the end (and\n"
    "                   every --save-every N)\n"
    "  --resume FILE    continue from a checkpoint (same model and data flags; any\n"
    "                   number of ranks)\n"
    "  --on-stall stop|warn  on non-finite weights, or N steps in a row that\n"
    "                   overflow at the scale floor or have a non-finite loss:\n"
    "                   print and log the diagnosis, then stop (default, exit 3)\n"
    "                   or go on; --stall-steps N (hysteresis + 2)\n"
    "  --json           the summary as one JSON object on stdout ({\"runs\":[...]} when\n"
    "                   --precision lists several)\n"
    "  --quiet          no progress, evaluation or diagnosis lines (one run's last\n"
    "                   line, done: ..., stays; a list prints its table)\n"
    "\n";

/* ... and its end */
static const char k_usage_tail[] =
    "Device:\n"
    "  --device cpu|cuda|cpu-split  where the model and the step run (cpu).\n"
    "                   cuda: GPU 0 (rank r of several: GPU r mod the GPUs; their\n"
    "                   sum over host memory): the forward and backward passes,\n"
    "                   the unscale check, the optimizer and the rounding\n"
    "                   telemetry on the device (multimodal and ViT models, every\n"
    "                   preset and safeguard, global negatives; not the mlp);\n"
    "                   exit 1 without a GPU. cpu-split: the device path run on the\n"
    "                   CPU (a test aid; the CPU's bits)\n"
    "  --recompute on|off  on (default): the backward pass recomputes each\n"
    "                   attention block's probabilities and, under an FP32\n"
    "                   residual stream with 16-bit activations (16-mixed,\n"
    "                   bf16-mixed), the stream after attention, instead of\n"
    "                   keeping them: the same bits, fewer activation bytes\n"
    "                   (`ampc memory`), one more q.k^T product per block. off:\n"
    "                   keep them (multimodal and ViT models)\n"
    "  --attention-cast on|off  on: the attention products take 16-bit\n"
    "                   operands under 16-bit activations, as PyTorch's autocast\n"
    "                   casts them (softmax's FP32 output rounded for P.v, dS\n"
    "                   rounded for the q.k^T product's backward pass; softmax's\n"
    "                   own backward pass still reads the FP32 P). off (default):\n"
    "                   P and dS enter those products in FP32\n"
    "\n"
    "Data parallel (mpirun -np N ampc train ...; --batch is global; docs/CLI.md):\n"
    "  --allreduce f32|working  sum gradients in FP32 in rank order (default: the\n"
    "                   bits of --micro-batches N) or in the gradient dtype\n"
    "  --check-replicas  compare the ranks' weights every step\n"
    "  --global-negatives  InfoNCE over the global batch (CLIP)\n"
    "\n"
    "Exit status: 0 success, 1 runtime error (unreadable checkpoint, unwritable\n"
    "log), 2 bad usage (unknown flag, bad value), 3 stalled (--on-stall stop).\n";

static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < lo || x > hi)
    return cli_usage_error("train", "%s: expected an integer in [%lld, %lld], got '%s'", flag,
                           (long long)lo, (long long)hi, v);
  *out = x;
  return 0;
}

static int parse_f(const char *flag, const char *v, float *out) {
  char *end = NULL;
  errno = 0;
  const double x = strtod(v, &end);
  const bool syntax = end != v && !*end;
  /* a number that float cannot hold: it would round to inf or to 0 */
  if (syntax &&
      (errno == ERANGE || (isfinite(x) && (isinf((float)x) || (x != 0.0 && (float)x == 0.0f)))))
    return cli_usage_error(
        "train", "%s: '%s' is out of the float range (nonzero |x| from about 1e-45 to 3.4e38)",
        flag, v);
  if (!syntax || errno || !isfinite(x))
    return cli_usage_error("train", "%s: expected a finite number, got '%s'", flag, v);
  *out = (float)x;
  return 0;
}

static const char *const k_amp_flags[] = {
    "master-weights", "loss-scale",       "accumulate",       "init-scale", "growth-factor",
    "backoff-factor", "growth-interval",  "hysteresis",       "min-scale",  "max-scale",
    "weight-update",  "fp8-amax-history", "fp8-amax-compute", "fp8-margin"};
enum { N_AMP_FLAGS = sizeof k_amp_flags / sizeof k_amp_flags[0], MAX_FLAGS = 64 };

typedef struct {
  char name[48];
  const char *value;
} flag_value;

/* the other flags that take a value (train_parse_args's chain below; keep
 * in step): a missing value of one of these is "needs a value", of any
 * other name "unknown option" */
static const char *const k_value_flags[] = {"lr",
                                            "weight-decay",
                                            "beta1",
                                            "beta2",
                                            "eps",
                                            "momentum",
                                            "min-lr",
                                            "lr-vision",
                                            "lr-text",
                                            "lr-fusion",
                                            "lr-heads",
                                            "clip-norm",
                                            "warmup",
                                            "schedule",
                                            "steps",
                                            "stop-at",
                                            "batch",
                                            "micro-batches",
                                            "loss-multiplier",
                                            "eval-every",
                                            "log-every",
                                            "telemetry-every",
                                            "save-every",
                                            "seed",
                                            "threads",
                                            "in",
                                            "hidden",
                                            "classes",
                                            "train-size",
                                            "test-size",
                                            "separation",
                                            "log",
                                            "save",
                                            "checkpoint",
                                            "data",
                                            "hold-out-style",
                                            "augment-shift",
                                            "itm-negatives",
                                            "w-itc",
                                            "w-itm",
                                            "w-cls",
                                            "w-mlm",
                                            "mlm-prob",
                                            "resume",
                                            "on-stall",
                                            "stall-steps",
                                            "device",
                                            "recompute",
                                            "attention-cast",
                                            "allreduce",
                                            "model",
                                            "precision",
                                            "optimizer"};

static bool takes_value(const char *name) {
  for (size_t k = 0; k < sizeof k_value_flags / sizeof *k_value_flags; k++)
    if (!strcmp(name, k_value_flags[k]))
      return true;
  for (int k = 0; k < N_AMP_FLAGS; k++)
    if (!strcmp(name, k_amp_flags[k]))
      return true;
  return false;
}

/* the job's group (one process unless started by mpirun) */
static ampc_dist *g_dist;
/* a --precision list under --json: stdout carries only {"runs":[...]} */
static bool g_json_list;

/* an output path (NULL: none) that can be written (ampc_check_out_path),
 * as a usage error */
static int check_out_path(const char *flag, const char *path, bool regular) {
  return ampc_check_out_path(flag, path, regular) == AMPC_OK
             ? 0
             : cli_usage_error("train", "%s", ampc_last_error());
}

int train_parse_args(int argc, char **argv, train_args *a) {
  memset(a, 0, sizeof *a);
  const char *precision = "16-mixed", *optimizer = "adamw";
  static flag_value amp_over[MAX_FLAGS], rest[MAX_FLAGS];
  int namp = 0, nrest = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0 || !arg[2])
      return cli_usage_error("train", "unexpected argument '%s'", arg);
    flag_value f = {.value = NULL};
    const char *eq = strchr(arg + 2, '=');
    const size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (len >= sizeof f.name)
      return cli_usage_error("train", "unknown option %s", arg);
    memcpy(f.name, arg + 2, len);
    f.name[len] = '\0';
    if (eq)
      f.value = eq + 1;
    if (!strcmp(f.name, "json") || !strcmp(f.name, "quiet") || !strcmp(f.name, "nesterov") ||
        !strcmp(f.name, "no-eval") || !strcmp(f.name, "check-replicas") ||
        !strcmp(f.name, "global-negatives")) {
      if (f.value)
        return cli_usage_error("train", "--%s takes no value", f.name);
      if (f.name[0] == 'g')
        a->global_negatives = true;
      else if (f.name[0] == 'c')
        a->check_replicas = true;
      else if (f.name[0] == 'j')
        a->json = true;
      else if (f.name[0] == 'q')
        a->quiet = true;
      else if (f.name[0] == 'n' && f.name[1] == 'o')
        a->no_eval = true;
      else
        a->opt.nesterov = true; /* kept across the optimizer defaults below */
      continue;
    }
    if (!f.value) {
      if ((i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) && !takes_value(f.name))
        return cli_usage_error("train", "unknown option --%s", f.name);
      if (i + 1 >= argc)
        return cli_usage_error("train", "--%s needs a value", f.name);
      if (!strncmp(argv[i + 1], "--", 2)) /* no value is a flag: "--lr --steps 5" */
        return cli_usage_error("train", "--%s needs a value (got the flag %s)", f.name,
                               argv[i + 1]);
      f.value = argv[++i];
    }
    if (!strcmp(f.name, "precision")) {
      precision = f.value;
      continue;
    }
    if (!strcmp(f.name, "optimizer")) {
      optimizer = f.value;
      continue;
    }
    bool is_amp = false;
    for (int k = 0; k < N_AMP_FLAGS; k++)
      is_amp = is_amp || !strcmp(f.name, k_amp_flags[k]);
    if ((is_amp ? namp : nrest) == MAX_FLAGS)
      return cli_usage_error("train", "too many flags");
    if (is_amp)
      amp_over[namp++] = f;
    else
      rest[nrest++] = f;
  }
  const bool nesterov = a->opt.nesterov;
  ampc_precision p;
  if (ampc_precision_parse(precision, &p) != AMPC_OK)
    return cli_usage_error("train", "--precision: %s", ampc_last_error());
  ampc_amp_config_preset(p, &a->amp);
  for (int k = 0; k < namp; k++)
    if (ampc_amp_config_set(&a->amp, amp_over[k].name, amp_over[k].value) != AMPC_OK)
      return cli_usage_error("train", "%s", ampc_last_error());
  if (ampc_amp_config_check(&a->amp) != AMPC_OK)
    return cli_usage_error("train", "%s", ampc_last_error());
  if (!strcmp(optimizer, "adamw"))
    a->opt = ampc_optim_adamw_defaults();
  else if (!strcmp(optimizer, "sgd"))
    a->opt = ampc_optim_sgd_defaults();
  else
    return cli_usage_error("train", "--optimizer: expected adamw or sgd, got '%s'", optimizer);
  a->opt.nesterov = nesterov;
  a->mc = (ampc_mlp_config){.in = 16, .hidden = 64, .classes = 5};
  a->steps = 300, a->batch = 64, a->micro_batches = 1, a->eval_every = 100, a->log_every = 1;
  a->telemetry_every = 10;
  a->ntrain = 4096, a->ntest = 1024, a->sep = 0.8f, a->seed = 1, a->cosine = true;
  a->model = "mm-tiny";
  a->data = "emoji";
  a->w_itc = a->w_itm = a->w_cls = 1.0f;
  a->w_mlm = 0.0f, a->mlm_prob = 0.15f;
  a->loss_multiplier = 1.0f;
  int64_t warmup = -1; /* default: 20 for the transformer models, 0 for mlp */
  for (int k = 0; k < nrest; k++) {
    const char *n = rest[k].name, *v = rest[k].value;
    char flag[80];
    snprintf(flag, sizeof flag, "--%.47s", n);
    int rc = 0;
    int64_t seed = 0;
    if (!strcmp(n, "lr"))
      rc = parse_f(flag, v, &a->opt.lr);
    else if (!strcmp(n, "weight-decay"))
      rc = parse_f(flag, v, &a->opt.weight_decay);
    else if (!strcmp(n, "beta1"))
      rc = parse_f(flag, v, &a->opt.beta1);
    else if (!strcmp(n, "beta2"))
      rc = parse_f(flag, v, &a->opt.beta2);
    else if (!strcmp(n, "eps"))
      rc = parse_f(flag, v, &a->opt.eps);
    else if (!strcmp(n, "momentum"))
      rc = parse_f(flag, v, &a->opt.momentum);
    else if (!strcmp(n, "min-lr"))
      rc = parse_f(flag, v, &a->opt.min_lr);
    else if (!strcmp(n, "lr-vision"))
      rc = parse_f(flag, v, &a->opt.branch_lr[AMPC_BRANCH_VISION]);
    else if (!strcmp(n, "lr-text"))
      rc = parse_f(flag, v, &a->opt.branch_lr[AMPC_BRANCH_TEXT]);
    else if (!strcmp(n, "lr-fusion"))
      rc = parse_f(flag, v, &a->opt.branch_lr[AMPC_BRANCH_FUSION]);
    else if (!strcmp(n, "lr-heads"))
      rc = parse_f(flag, v, &a->opt.branch_lr[AMPC_BRANCH_HEADS]);
    else if (!strcmp(n, "clip-norm"))
      rc = parse_f(flag, v, &a->opt.clip_norm);
    else if (!strcmp(n, "warmup"))
      rc = parse_i64(flag, v, 0, 1000000000, &warmup);
    else if (!strcmp(n, "schedule")) {
      if (!strcmp(v, "cosine"))
        a->cosine = true;
      else if (!strcmp(v, "constant"))
        a->cosine = false;
      else
        rc = cli_usage_error("train", "--schedule: expected cosine or constant, got '%s'", v);
    } else if (!strcmp(n, "steps"))
      rc = parse_i64(flag, v, 1, 1000000000, &a->steps);
    else if (!strcmp(n, "stop-at"))
      rc = parse_i64(flag, v, 1, 1000000000, &a->stop_at);
    else if (!strcmp(n, "batch"))
      rc = parse_i64(flag, v, 1, 1 << 20, &a->batch);
    else if (!strcmp(n, "micro-batches"))
      rc = parse_i64(flag, v, 1, 1024, &a->micro_batches);
    else if (!strcmp(n, "loss-multiplier")) {
      /* a number or 2^K */
      float lm = 0.0f;
      if (!strncmp(v, "2^", 2)) {
        int64_t e2 = 0;
        rc = parse_i64(flag, v + 2, -40, 0, &e2);
        lm = ldexpf(1.0f, (int)e2);
      } else {
        rc = parse_f(flag, v, &lm);
      }
      if (!rc && !(lm >= 0x1p-40f && lm <= 1.0f))
        rc = cli_usage_error("train",
                             "--loss-multiplier: expected a number in [2^-40, 1] (or "
                             "2^K, K in -40..0), got '%s'",
                             v);
      a->loss_multiplier = lm;
    } else if (!strcmp(n, "eval-every"))
      rc = parse_i64(flag, v, 0, 1000000000, &a->eval_every);
    else if (!strcmp(n, "log-every"))
      rc = parse_i64(flag, v, 1, 1000000000, &a->log_every);
    else if (!strcmp(n, "telemetry-every"))
      rc = parse_i64(flag, v, 0, 1000000000, &a->telemetry_every);
    else if (!strcmp(n, "save-every"))
      rc = parse_i64(flag, v, 0, 1000000000, &a->save_every);
    else if (!strcmp(n, "seed")) {
      rc = parse_i64(flag, v, 0, INT64_MAX, &seed);
      a->seed = (uint64_t)seed;
    } else if (!strcmp(n, "threads")) {
      int64_t t = 0;
      rc = parse_i64(flag, v, 1, 1024, &t);
      a->threads = (int)t;
    } else if (!strcmp(n, "in"))
      rc = parse_i64(flag, v, 1, 1 << 16, &a->mc.in);
    else if (!strcmp(n, "hidden"))
      rc = parse_i64(flag, v, 1, 1 << 16, &a->mc.hidden);
    else if (!strcmp(n, "classes"))
      rc = parse_i64(flag, v, 2, 1 << 16, &a->mc.classes);
    else if (!strcmp(n, "train-size"))
      rc = parse_i64(flag, v, 1, 1 << 24, &a->ntrain);
    else if (!strcmp(n, "test-size"))
      rc = parse_i64(flag, v, 1, 1 << 24, &a->ntest);
    else if (!strcmp(n, "separation"))
      rc = parse_f(flag, v, &a->sep);
    else if (!strcmp(n, "log"))
      a->log = v;
    else if (!strcmp(n, "save") || !strcmp(n, "checkpoint"))
      a->save = v;
    else if (!strcmp(n, "data"))
      a->data = v;
    else if (!strcmp(n, "hold-out-style"))
      a->hold_out_style = v;
    else if (!strcmp(n, "augment-shift"))
      rc = parse_i64(flag, v, 0, 8, &a->augment_shift);
    else if (!strcmp(n, "itm-negatives")) {
      if (!strcmp(v, "hardest") || !strcmp(v, "sampled") || !strcmp(v, "random"))
        a->itm_sampled = v[0] != 'h', a->itm_random = v[0] == 'r';
      else
        rc = cli_usage_error("train",
                             "--itm-negatives: expected hardest, sampled or random, got '%s'", v);
    } else if (!strcmp(n, "w-itc"))
      rc = parse_f(flag, v, &a->w_itc);
    else if (!strcmp(n, "w-itm"))
      rc = parse_f(flag, v, &a->w_itm);
    else if (!strcmp(n, "w-cls"))
      rc = parse_f(flag, v, &a->w_cls);
    else if (!strcmp(n, "w-mlm"))
      rc = parse_f(flag, v, &a->w_mlm);
    else if (!strcmp(n, "mlm-prob"))
      rc = parse_f(flag, v, &a->mlm_prob);
    else if (!strcmp(n, "resume"))
      a->resume = v;
    else if (!strcmp(n, "on-stall")) {
      if (!strcmp(v, "stop"))
        a->on_stall = AMPC_STALL_STOP;
      else if (!strcmp(v, "warn"))
        a->on_stall = AMPC_STALL_WARN;
      else
        rc = cli_usage_error("train", "--on-stall: expected stop or warn, got '%s'", v);
    } else if (!strcmp(n, "stall-steps"))
      rc = parse_i64(flag, v, 1, 1000000000, &a->stall_steps);
    else if (!strcmp(n, "device")) {
      rc = cli_parse_device("train", v, true, &a->device);
    } else if (!strcmp(n, "recompute"))
      rc = cli_parse_recompute("train", v, &a->keep_activations);
    else if (!strcmp(n, "attention-cast"))
      rc = cli_parse_attention_cast("train", v, &a->attn_cast);
    else if (!strcmp(n, "allreduce")) {
      if (!strcmp(v, "f32"))
        a->reduce = AMPC_REDUCE_F32;
      else if (!strcmp(v, "working"))
        a->reduce = AMPC_REDUCE_WORKING;
      else
        rc = cli_usage_error("train", "--allreduce: expected f32 or working, got '%s'", v);
    } else if (!strcmp(n, "model")) {
      if (!ampc_model_known(v)) /* the library's list of models */
        rc = cli_unknown_model("train", v, true);
      a->model = v;
      a->model_given = true;
    } else
      rc = cli_usage_error("train", "unknown option --%s", n);
    if (rc)
      return rc;
  }
  if (warmup < 0) { /* the default, never longer than the run */
    warmup = strcmp(a->model, "mlp") == 0 ? 0 : 20;
    if (warmup > a->steps)
      warmup = a->steps;
  }
  if (a->cosine && warmup > a->steps)
    return cli_usage_error("train",
                           "--warmup %lld is longer than the run (--steps %lld) under the cosine "
                           "schedule",
                           (long long)warmup, (long long)a->steps);
  a->opt.warmup_steps = warmup;
  a->opt.total_steps = a->cosine ? a->steps : 0;
  if (ampc_optim_config_check(&a->opt) != AMPC_OK)
    return cli_usage_error("train", "%s", ampc_last_error());
  if (a->batch % a->micro_batches != 0)
    return cli_usage_error("train", "--batch %lld is not a multiple of --micro-batches %lld",
                           (long long)a->batch, (long long)a->micro_batches);
  /* output paths: distinct, and checked now rather than after the run */
  if (cli_same_file(a->log, a->save) || cli_same_file(a->log, a->resume))
    return cli_usage_error("train", "--log must not name the checkpoint file (%s)", a->log);
  /* an input is never overwritten: --data FILE (a prepared dataset; not
   * the names of the built-in sets, which are no files here) */
  const bool data_file = strcmp(a->data, "emoji") != 0 && strcmp(a->data, "fashion-mnist") != 0 &&
                         strncmp(a->data, "fashion-mnist:", 14) != 0;
  if (data_file && (cli_same_file(a->log, a->data) || cli_same_file(a->save, a->data)))
    return cli_usage_error("train", "--%s %s names the --data file",
                           a->log && cli_same_file(a->log, a->data) ? "log" : "save",
                           cli_same_file(a->log, a->data) ? a->log : a->save);
  /* rank 0 alone writes them */
  if (ampc_dist_rank(g_dist) == 0) {
    int rc = check_out_path("--save", a->save, true);
    if (!rc)
      rc = check_out_path("--log", a->log, false);
    if (rc)
      return rc;
  }
  if (!(a->w_itc >= 0.0f && a->w_itm >= 0.0f && a->w_cls >= 0.0f && a->w_mlm >= 0.0f))
    return cli_usage_error("train", "--w-itc/--w-itm/--w-cls/--w-mlm must be >= 0");
  if (!(a->mlm_prob > 0.0f && a->mlm_prob <= 1.0f))
    return cli_usage_error("train", "--mlm-prob %g: expected a share in (0, 1]",
                           (double)a->mlm_prob);
  if (strcmp(a->model, "mlp") == 0 && a->device != AMPC_DEVICE_CPU)
    return cli_usage_error("train",
                           "--device %s: the mlp model runs on the CPU only (the multimodal "
                           "models and ViTs run on a device)",
                           ampc_device_name(a->device));
  if (strcmp(a->model, "mlp") != 0) {
    if (a->batch < 2 || (a->batch / a->micro_batches) < 2)
      return cli_usage_error("train",
                             "--batch %lld: the contrastive loss needs at least 2 "
                             "samples per micro-batch",
                             (long long)a->batch);
    return 0; /* the dataset's size is checked once it is loaded */
  }
  if (a->batch > a->ntrain)
    return cli_usage_error("train", "--batch %lld is larger than the training set (%lld samples)",
                           (long long)a->batch, (long long)a->ntrain);
  if (!(a->sep >= 0.0f))
    return cli_usage_error("train", "--separation must be >= 0");
  return 0;
}

int train_check_args(int argc, char **argv) {
  train_args A;
  return train_parse_args(argc, argv, &A);
}

/* ---- printing what the run reports (the library never prints) ---------------------- */

typedef struct printer {
  const train_args *A;
  FILE *out; /* stdout, or stderr under --json */
  bool tty;  /* progress as one rewritten line on a terminal's stderr */
  int64_t every;
} printer;

static void print_config(FILE *out, ampc_run *R, const train_args *A) {
  const ampc_trainer *T = ampc_run_trainer(R);
  const ampc_amp_config *am = &T->amp;
  const ampc_model_desc *md = ampc_run_model_desc(R);
  fprintf(out,
          "ampc train: %s, precision %s: weights %s, master weights %s, optimizer state %s, "
          "loss scale %s",
          ampc_run_model_desc(R)->name, ampc_precision_name(am->precision),
          ampc_dtype_name(am->lowp),
          am->master_weights ? "on (f32)" : (am->lowp == AMPC_F32 ? "n/a" : "off"),
          ampc_dtype_name(am->state_dtype), ampc_loss_scale_mode_name(am->scaler.mode));
  if (am->scaler.mode != AMPC_LOSS_SCALE_NONE)
    fprintf(out, " (%g)", (double)am->scaler.init_scale);
  if (am->weight_update != AMPC_UPDATE_NEAREST)
    fprintf(out, ", weight update %s", ampc_weight_update_name(am->weight_update));
  const float lmul = ampc_run_get_config(R)->loss_multiplier;
  if (lmul > 0.0f && lmul != 1.0f)
    fprintf(out, ", loss multiplier %g", (double)lmul);
  if (ampc_precision_is_fp8(am->precision))
    fprintf(out, ", FP8 e4m3/e5m2 (amax history %d, %s, margin %g)", am->fp8_amax_history,
            am->fp8_amax_algo == AMPC_AMAX_MAX ? "max" : "most_recent", (double)am->fp8_margin);
  fprintf(out, ", accumulate %s", am->accumulate == AMPC_ACC_F16 ? "fp16" : "fp32");
  if (md->kind == AMPC_MODEL_MM && md->mm.no_recompute)
    fprintf(out, ", recompute off");
  if (md->kind == AMPC_MODEL_MM && md->mm.attn_cast && am->lowp != AMPC_F32)
    fprintf(out, ", attention cast on");
  fprintf(out, "; %lld parameters", (long long)T->params.numel);
  const ampc_run_config *rc = ampc_run_get_config(R);
  if (rc->comm && rc->comm->size > 1)
    fprintf(out, "; %d ranks, %lld samples each", rc->comm->size,
            (long long)(rc->batch / rc->comm->size));
  fputc('\n', out);
  char warns[16][256];
  const int nw = ampc_run_warnings(R, warns, 16);
  for (int k = 0; k < nw && k < 16; k++)
    fprintf(stderr, "ampc train: warning: %s\n", warns[k]);
  if (md->kind != AMPC_MODEL_MM && (A->attn_cast || A->keep_activations))
    fprintf(stderr, "ampc train: warning: --model %s has no attention: %s ignored\n", md->name,
            A->attn_cast && A->keep_activations ? "--attention-cast and --recompute are"
            : A->attn_cast                      ? "--attention-cast is"
                                                : "--recompute is");
}

static void on_step(void *user, const ampc_run *R, const ampc_run_progress *p) {
  (void)R;
  const printer *pr = user;
  const ampc_step_info *info = p->info;
  const int64_t done = info->iteration - p->start;
  if (pr->tty) {
    const double eta =
        done > 0 ? p->elapsed_s / (double)done * (double)(p->end - info->iteration) : 0.0;
    fprintf(stderr, "\rstep %lld/%lld  loss %.4f  scale %g  skipped %lld  %.2f it/s  ETA %.0f s   ",
            (long long)info->iteration, (long long)pr->A->steps, (double)p->losses->total,
            (double)info->next_scale, (long long)p->skipped,
            p->elapsed_s > 0 ? (double)done / p->elapsed_s : 0.0, eta);
  } else if (!pr->A->quiet && (info->iteration % pr->every == 0 || info->iteration == p->end)) {
    fprintf(pr->out, "step %lld/%lld  loss %.4f", (long long)info->iteration,
            (long long)pr->A->steps, (double)p->losses->total);
    const bool image_only = p->losses->n_parts >= 3 && p->losses->part[0] == 0.0f &&
                            p->losses->part[1] == 0.0f; /* vit-fm, vit-ref: no ITC/ITM */
    if (image_only)
      fprintf(pr->out, " (cls %.4f", (double)p->losses->part[2]);
    else if (p->losses->n_parts >= 3) /* the multimodal terms */
      fprintf(pr->out, " (itc %.4f itm %.4f cls %.4f", (double)p->losses->part[0],
              (double)p->losses->part[1], (double)p->losses->part[2]);
    if (p->losses->n_parts >= 7)
      fprintf(pr->out, " mlm %.4f", (double)p->losses->part[5]);
    if (p->losses->n_parts >= 3)
      fputc(')', pr->out);
    fprintf(pr->out, "  scale %g  skipped %lld\n", (double)info->next_scale, (long long)p->skipped);
  }
}

static void on_eval(void *user, const ampc_run *R, int64_t iteration, const ampc_eval *e) {
  (void)R;
  const printer *pr = user;
  if (pr->tty)
    fputc('\n', stderr);
  if (pr->A->quiet)
    return;
  if (e->kind == AMPC_EVAL_CLASSES) {
    fprintf(pr->out, "eval @%lld  %s: accuracy %.4f, loss %.4f (%lld samples)\n",
            (long long)iteration, e->split == AMPC_SPLIT_NEW_STYLE ? "new style" : "test",
            e->accuracy, e->loss, (long long)e->samples);
    return;
  }
  const ampc_mmodel_metrics *n = &e->new_style, *z = &e->zero_shot;
  fprintf(pr->out, "eval @%lld", (long long)iteration);
  if (n->samples > 0)
    fprintf(pr->out, "  new style: R@1 i2t %.3f t2i %.3f (chance %.4f), group %.3f", n->i2t_r1,
            n->t2i_r1, 1.0 / (double)n->concepts, n->cls_acc);
  if (z->samples > 0)
    fprintf(pr->out, "%s zero-shot: R@1 i2t %.3f t2i %.3f (chance %.3f)",
            n->samples > 0 ? "  |" : " ", z->i2t_r1, z->t2i_r1, 1.0 / (double)z->concepts);
  fprintf(pr->out, "\n");
}

static void print_diagnosis(FILE *out, const ampc_diag *d) {
  ampc_verdict v[AMPC_VERDICT_COUNT];
  const int n = ampc_diag_verdicts(d, v, AMPC_VERDICT_COUNT);
  for (int i = 0; i < n; i++) {
    fprintf(out, "diagnosis: %s", ampc_verdict_name(v[i].kind));
    if (v[i].branch >= 0)
      fprintf(out, " (%s)", ampc_branch_name((ampc_branch)v[i].branch));
    fputc('\n', out);
    for (int k = 0; k < v[i].n_evidence; k++)
      fprintf(out, "  - %s\n", v[i].evidence[k]);
    if (v[i].safeguard[0])
      fprintf(out, "  safeguard: %s\n", v[i].safeguard);
  }
}

/* a stall: the reason and the diagnosis so far, on stderr at once */
static void on_stall(void *user, const ampc_run *R, int64_t iteration, const char *reason) {
  const printer *pr = user;
  if (pr->tty)
    fputc('\n', stderr); /* end the \r progress line */
  fprintf(stderr, "ampc train: the run stalled at step %lld: %s\n", (long long)iteration, reason);
  print_diagnosis(stderr, ampc_run_diag(R));
  fprintf(stderr, "ampc train: %s\n",
          pr->A->on_stall == AMPC_STALL_STOP
              ? "stopping (--on-stall stop): no checkpoint is written after this step"
              : "going on (--on-stall warn)");
}

/* the MLP's data: synthetic Gaussian blobs, train rows then test rows */
typedef struct blobs {
  float *x;
  int32_t *y;
} blobs;

static int run_one(int argc, char **argv, cJSON **summary) {
  train_args A;
  int rc = train_parse_args(argc, argv, &A);
  if (rc)
    return rc;
  if (ampc_dist_rank(g_dist) != 0) /* rank 0 prints; the others only their errors */
    A.quiet = true, A.json = false, summary = NULL;
  const bool lead = ampc_dist_rank(g_dist) == 0;
  if (A.threads > 0)
    ampc_set_num_threads(A.threads);
  FILE *out = A.json || g_json_list ? stderr : stdout;
  const bool mlp = strcmp(A.model, "mlp") == 0;
  ampc_dataset D;
  memset(&D, 0, sizeof D);
  blobs B = {NULL, NULL};
  ampc_run_data data = {.name = A.data};
  ampc_model_desc md;
  if (mlp) {
    const int64_t in = A.mc.in, ntot = A.ntrain + A.ntest;
    B.x = malloc((size_t)(ntot * in) * sizeof *B.x);
    B.y = malloc((size_t)ntot * sizeof *B.y);
    if (!B.x || !B.y) {
      free(B.x), free(B.y);
      return cli_runtime_error("train", "out of memory for %lld samples", (long long)ntot);
    }
    ampc_synth_blobs(ntot, in, A.mc.classes, A.sep, A.seed, B.x, B.y);
    data = (ampc_run_data){.n_train = A.ntrain,
                           .n_test = A.ntest,
                           .dim = in,
                           .x_train = B.x,
                           .x_test = B.x + A.ntrain * in,
                           .y_train = B.y,
                           .y_test = B.y + A.ntrain,
                           .name = "synthetic blobs"};
    (void)ampc_model_desc_get("mlp", NULL, &md);
    md.mlp = A.mc;
  } else {
    if ((rc = cli_load_data("train", A.data, &D)) != 0)
      return rc;
    if (A.hold_out_style && (rc = cli_hold_out_style("train", A.hold_out_style, &D)) != 0) {
      ampc_dataset_free(&D);
      return rc;
    }
    data.dataset = &D;
    /* image-only data: the default model becomes the image-only ViT (a
     * --model named is kept, and refused if it needs captions) */
    const char *model = !D.tokens && !A.model_given ? "vit-fm" : A.model;
    if (ampc_model_desc_get(model, &D, &md) != AMPC_OK) {
      ampc_dataset_free(&D);
      return cli_usage_error("train", "%s", ampc_last_error());
    }
    md.mm.w_itc = A.w_itc, md.mm.w_itm = A.w_itm, md.mm.w_cls = A.w_cls;
    md.mm.w_mlm = md.mm.image_only ? 0.0f : A.w_mlm, md.mm.mlm_prob = A.mlm_prob;
    md.mm.no_recompute = A.keep_activations;
    md.mm.attn_cast = A.attn_cast;
  }
  ampc_run_config c = ampc_run_config_defaults();
  c.steps = A.steps, c.stop_at = A.stop_at, c.batch = A.batch, c.micro_batches = A.micro_batches;
  c.loss_multiplier = A.loss_multiplier;
  c.augment_shift = (int)A.augment_shift;
  c.itm_sample_negatives = A.itm_sampled;
  c.itm_random_negatives = A.itm_random;
  c.eval_every = A.eval_every, c.eval = !A.no_eval, c.log_every = A.log_every;
  c.save_every = A.save_every, c.telemetry_every = A.telemetry_every, c.seed = A.seed;
  c.log_path = A.log, c.save_path = A.save, c.resume_path = A.resume;
  c.comm = ampc_dist_comm(g_dist), c.reduce = A.reduce, c.check_replicas = A.check_replicas;
  c.global_negatives = A.global_negatives;
  c.on_stall = A.on_stall, c.stall_steps = A.stall_steps;
  c.device = A.device;
#ifdef AMPC_TEST_HOOKS /* the robustness tests' faults (docs/ROBUSTNESS.md; not in a release) */
  (void)ampc_fault_at_parse(getenv("AMPC_FAULT_FAIL"), &c.faults.fail);
  (void)ampc_fault_at_parse(getenv("AMPC_FAULT_NAN_GRAD"), &c.faults.nan_grad);
#endif
  ampc_run *R = NULL;
  int ret = AMPC_EXIT_OK;
  const ampc_status st = ampc_run_create(&R, &c, &A.amp, &A.opt, &md, &data);
  if (st != AMPC_OK) {
    /* a setting that does not fit (batch, model, data, step) is a usage error */
    ret = st == AMPC_ERR_INVALID_ARG ? cli_usage_error("train", "%s", ampc_last_error())
                                     : cli_runtime_error("train", "%s", ampc_last_error());
    goto out;
  }
  if (lead)
    print_config(out, R, &A);
  printer pr = {&A, out, !A.quiet && isatty(fileno(stderr)), A.steps >= 20 ? A.steps / 20 : 1};
  const ampc_run_callbacks cb = {&pr, on_step, on_eval, on_stall};
  if (ampc_run_train(R, &cb) != AMPC_OK) {
    if (ampc_run_stalled(R)) { /* every rank agrees: no MPI_Abort needed */
      if (lead)
        fprintf(stderr, "ampc train: %s\n", ampc_last_error());
      ret = AMPC_EXIT_STALLED;
    } else {
      ret = cli_runtime_error("train", "%s", ampc_last_error());
    }
    goto out;
  }
  if (!A.quiet && !A.json)
    print_diagnosis(out, ampc_run_diag(R));
  char *txt = ampc_run_summary_json(R);
  cJSON *o = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!o) {
    ret = cli_runtime_error("train", "out of memory");
    goto out;
  }
  const bool in_list = summary != NULL; /* a run of a --precision list: the table reports it */
  if (summary)
    *summary = cJSON_Duplicate(o, 1);
  if (!lead) {
    cJSON_Delete(o);
  } else if (A.json) {
    ret = cli_print_json("train", o);
  } else {
    if (!A.quiet || !in_list) { /* --quiet: no progress lines, but this one */
      const ampc_trainer *T = ampc_run_trainer(R);
      fprintf(out, "done: %lld steps (%lld skipped), %.1f s%s%s\n", (long long)T->iteration,
              (long long)T->scaler.skip_count,
              cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "wall_s")),
              A.save ? ", checkpoint " : "", A.save ? A.save : "");
    }
    cJSON_Delete(o);
  }
out:
  ampc_run_free(R);
  ampc_dataset_free(&D);
  free(B.x), free(B.y);
  return ret;
}

/* a table cell: the value, or "-" right-aligned where the run has none
 * (NaN: no evaluation, --no-eval) */
static void cell(double v, int width, int prec) {
  if (isnan(v))
    printf(" %*s", width, "-");
  else
    printf(" %*.*f", width, prec, v);
}

/* "run.jsonl" + "16-mixed" -> "run.16-mixed.jsonl" */
static char *with_tag(const char *path, const char *tag) {
  const size_t n = strlen(path) + strlen(tag) + 2;
  char *out = malloc(n);
  if (!out)
    return NULL;
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  if (dot && (!slash || dot > slash + 1))
    snprintf(out, n, "%.*s.%s%s", (int)(dot - path), path, tag, dot);
  else
    snprintf(out, n, "%s.%s", path, tag);
  return out;
}

/* metrics.split.key (key NULL: metrics.split), NaN where absent */
static double metric(const cJSON *sum, const char *split, const char *key) {
  const cJSON *m =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sum, "metrics"), split);
  if (key)
    m = cJSON_GetObjectItemCaseSensitive(m, key);
  return cJSON_IsNumber(m) ? m->valuedouble : (double)NAN;
}

static double field(const cJSON *sum, const char *key) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(sum, key);
  return cJSON_IsNumber(m) ? m->valuedouble : (double)NAN;
}

/* the summary's test accuracy (vit-fm / vit-ref: metrics.test_accuracy; the
 * MLP: test_accuracy), ms per step (the mean, or wall time over steps) and
 * activation MiB (the arena, or the MLP's activations + workspace); NaN
 * where the run has none */
static double test_acc(const cJSON *s) {
  const double a = metric(s, "test_accuracy", NULL);
  return isnan(a) ? field(s, "test_accuracy") : a;
}

static double ms_per_step(const cJSON *s) {
  const double m = field(s, "ms_per_step_mean");
  return isnan(m) ? 1e3 * field(s, "wall_s") / field(s, "steps") : m;
}

static double act_mib(const cJSON *s) {
  const double a = field(s, "activation_bytes");
  if (!isnan(a))
    return a / 1048576.0;
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, "memory");
  return (field(m, "activations") + field(m, "workspace")) / 1048576.0;
}

/* --precision A,B,...: one run per preset (same seed and data), then a
 * side-by-side table; --log/--save get the preset inserted in their names.
 * check_only: the flags of every run checked, nothing run (one preset: its
 * flags); the exit code. */
static int run_list(int argc, char **argv, bool check_only);

/* Under mpirun every rank runs this; a rank that fails ends the job
 * (MPI_Abort) after its message, so no rank waits for it forever. */
static int run(int argc, char **argv) {
  if (ampc_dist_init(NULL, NULL, &g_dist) != AMPC_OK)
    return cli_runtime_error("train", "%s", ampc_last_error());
  /* the flags are the same on every rank: rank 0 alone reports their errors,
   * and every rank stops (a --precision list: every run's flags) */
  cli_quiet_usage = ampc_dist_rank(g_dist) != 0;
  int check = run_list(argc, argv, true);
  cli_quiet_usage = false;
  /* some checks run on rank 0 alone (the output paths it writes): every
   * rank learns the worst result, so none goes on alone into the run */
  const ampc_comm *cm = ampc_dist_comm(g_dist);
  if (cm && cm->size > 1) {
    double worst = check;
    if (cm->max_f64(cm->user, &worst, 1) != AMPC_OK)
      check = cli_runtime_error("train", "%s", ampc_last_error());
    else if (check == AMPC_EXIT_OK)
      check = (int)worst;
  }
  if (check != AMPC_EXIT_OK) {
    ampc_dist_finalize(g_dist); /* every rank stops here: nobody waits */
    g_dist = NULL;
    return check;
  }
  const int rc = run_list(argc, argv, false);
  g_json_list = false;
  /* a stall is decided on replicated state: every rank stops at the same
   * step, so they end together without MPI_Abort */
  if (rc != 0 && rc != AMPC_EXIT_STALLED && ampc_dist_size(g_dist) > 1) {
    fprintf(stderr, "ampc train: rank %d of %d failed (exit %d): ending the job\n",
            ampc_dist_rank(g_dist), ampc_dist_size(g_dist), rc);
    ampc_dist_abort(g_dist, rc);
  }
  ampc_dist_finalize(g_dist);
  g_dist = NULL;
  return rc;
}

/* a path a preset's tag can go into: not empty, not a directory's name
 * (ends in '/', is . or .., or an existing directory): those are left as
 * given, for the run's own check to refuse */
static bool taggable(const char *p) {
  const size_t n = strlen(p);
  const char *base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
  struct stat sb;
  return n > 0 && p[n - 1] != '/' && strcmp(base, ".") != 0 && strcmp(base, "..") != 0 &&
         !(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode));
}

/* av (argc + 1 entries) = argv with the --precision list at pi replaced by
 * name, --log/--save/--checkpoint FILE (or =FILE) tagged with it (tagged:
 * the caller frees them) and --json replaced by --quiet (*json set: one
 * object for the whole list). Non-zero when out of memory. */
static int list_argv(int argc, char **argv, int pi, const char *name, char **av, char **tagged,
                     char *pbuf, size_t pcap, bool *json) {
  /* tagged [argc]: the tagged copy of argv[i], NULL elsewhere (a flag may
   * be given twice: each copy lives until the caller frees them all) */
  for (int i = 0; i < argc; i++) {
    av[i] = argv[i];
    if (!strcmp(argv[i], "--json")) {
      *json = true;
      av[i] = "--quiet";
    }
  }
  av[argc] = NULL;
  if (!strncmp(argv[pi], "--precision=", 12)) {
    snprintf(pbuf, pcap, "--precision=%s", name);
    av[pi] = pbuf;
  } else {
    av[pi] = (char *)name;
  }
  static const char *const paths[3] = {"--log", "--save", "--checkpoint"};
  for (int i = 1; i < argc; i++)
    for (int f = 0; f < 3; f++) {
      const size_t n = strlen(paths[f]);
      if (!strcmp(argv[i], paths[f]) && i + 1 < argc && taggable(argv[i + 1])) { /* --log FILE */
        char *t = with_tag(argv[i + 1], name);
        if (!t)
          return 1;
        free(tagged[i + 1]);
        tagged[i + 1] = t;
        av[i + 1] = t;
      } else if (!strncmp(argv[i], paths[f], n) && argv[i][n] == '=' &&
                 taggable(argv[i] + n + 1)) { /* --log=FILE */
        char *t = with_tag(argv[i] + n + 1, name);
        char *flag = t ? malloc(n + 1 + strlen(t) + 1) : NULL;
        if (!flag) {
          free(t);
          return 1;
        }
        sprintf(flag, "%s=%s", paths[f], t);
        free(t);
        free(tagged[i]);
        tagged[i] = flag;
        av[i] = flag;
      }
    }
  return 0;
}

static void free_tagged(char **tagged, int argc) {
  for (int i = 0; i <= argc; i++)
    free(tagged[i]), tagged[i] = NULL;
}

static int run_list(int argc, char **argv, bool check_only) {
  int pi = -1;
  const char *list = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--precision") && i + 1 < argc)
      pi = i + 1, list = argv[i + 1];
    else if (!strncmp(argv[i], "--precision=", 12))
      pi = i, list = argv[i] + 12;
  }
  if (!list || !strchr(list, ','))
    return check_only ? train_check_args(argc, argv) : run_one(argc, argv, NULL);
  enum { MAX_LIST = 8 };
  char names[MAX_LIST][32];
  int n = 0;
  const size_t ll = strlen(list);
  if (ll > 0 && list[ll - 1] == ',') /* "32-true,": an empty last name */
    return cli_usage_error("train", "--precision: bad list '%s'", list);
  for (const char *p = list; *p;) {
    const char *c = strchr(p, ',');
    const size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == 0 || len >= sizeof names[0])
      return cli_usage_error("train", "--precision: bad list '%s'", list);
    if (n == MAX_LIST)
      return cli_usage_error("train", "--precision: at most %d presets in a list ('%s')", MAX_LIST,
                             list);
    memcpy(names[n], p, len);
    names[n][len] = '\0';
    for (int k = 0; k < n; k++)
      if (!strcmp(names[k], names[n]))
        return cli_usage_error("train", "--precision: %s is listed twice", names[n]);
    n++;
    p = c ? c + 1 : p + len;
  }
  for (int k = 0; k < n; k++) { /* every name checked before the first run trains */
    ampc_precision q;
    if (ampc_precision_parse(names[k], &q) != AMPC_OK)
      return cli_usage_error("train", "--precision: %s", ampc_last_error());
  }
  char **av = malloc((size_t)(argc + 1) * sizeof *av);
  char **tagged = calloc((size_t)argc + 1, sizeof *tagged);
  if (!av || !tagged) {
    free(av), free(tagged);
    return cli_runtime_error("train", "out of memory");
  }
  cJSON *sums[MAX_LIST] = {NULL};
  char pbuf[64];
  int rc = 0;
  bool json = false;
  /* every run's flags checked (the preset's own rules, its tagged paths)
   * before the first one trains; under mpirun rank 0 alone reports (run()
   * calls this with check_only first, and the ranks agree on the result) */
  const bool quiet = cli_quiet_usage;
  cli_quiet_usage = quiet || ampc_dist_rank(g_dist) != 0;
  char ctx[96];
  for (int k = 0; k < n && !rc && check_only; k++) {
    snprintf(ctx, sizeof ctx, "in the run of --precision %s", names[k]);
    cli_usage_context = ctx;
    if (list_argv(argc, argv, pi, names[k], av, tagged, pbuf, sizeof pbuf, &json) != 0)
      rc = cli_runtime_error("train", "out of memory");
    else
      rc = train_check_args(argc, av);
    cli_usage_context = NULL;
    free_tagged(tagged, argc);
  }
  cli_quiet_usage = quiet;
  if (check_only) {
    free(av), free(tagged);
    return rc;
  }
  for (int i = 1; i < argc; i++) /* one JSON object for the list (list_argv sets it too) */
    json = json || !strcmp(argv[i], "--json");
  g_json_list = json;
  for (int k = 0; k < n && !rc; k++) {
    if (list_argv(argc, argv, pi, names[k], av, tagged, pbuf, sizeof pbuf, &json) != 0)
      rc = cli_runtime_error("train", "out of memory");
    else
      rc = run_one(argc, av, &sums[k]);
    free_tagged(tagged, argc);
  }
  free(av), free(tagged);
  if (!rc && json) {
    cJSON *o = cJSON_CreateObject();
    cJSON *runs = cJSON_AddArrayToObject(o, "runs");
    for (int k = 0; k < n; k++) {
      cJSON_AddItemToArray(runs, sums[k]);
      sums[k] = NULL;
    }
    rc = cli_print_json("train", o);
  } else if (!rc && n > 0 && sums[n - 1] && isnan(metric(sums[0], "new_style", "i2t_r1"))) {
    /* no retrieval (vit-fm, vit-ref, the MLP): the test accuracy */
    printf("\nside by side (same seed, data and steps):\n");
    printf("%-11s %9s %8s %9s %9s %10s\n", "precision", "loss", "skipped", "test acc", "ms/step",
           "act MiB");
    for (int k = 0; k < n; k++) {
      const cJSON *s = sums[k];
      if (!s)
        continue;
      printf("%-11s", names[k]);
      cell(field(s, "final_train_loss"), 9, 4);
      cell(field(s, "skipped_steps"), 8, 0);
      cell(test_acc(s), 9, 4);
      cell(ms_per_step(s), 9, 2);
      cell(act_mib(s), 10, 2);
      putchar('\n');
    }
  } else if (!rc && n > 0 && sums[n - 1]) {
    printf("\nside by side (same seed, data and steps):\n");
    printf("%-11s %9s %8s %11s %11s %11s %11s %9s %9s %10s\n", "precision", "loss", "skipped",
           "new R@1 i2t", "new R@1 t2i", "zs R@1 i2t", "zs R@1 t2i", "group", "ms/step", "act MiB");
    for (int k = 0; k < n; k++) {
      const cJSON *s = sums[k];
      if (!s)
        continue;
      printf("%-11s", names[k]);
      cell(field(s, "final_train_loss"), 9, 4);
      cell(field(s, "skipped_steps"), 8, 0);
      cell(metric(s, "new_style", "i2t_r1"), 11, 4);
      cell(metric(s, "new_style", "t2i_r1"), 11, 4);
      cell(metric(s, "zero_shot", "i2t_r1"), 11, 4);
      cell(metric(s, "zero_shot", "t2i_r1"), 11, 4);
      cell(metric(s, "new_style", "group_acc"), 9, 3);
      cell(field(s, "ms_per_step_mean"), 9, 0);
      cell(field(s, "activation_bytes") / 1048576.0, 10, 1);
      putchar('\n');
    }
    printf("chance R@1: new style %.4f, zero-shot %.4f\n",
           metric(sums[0], "new_style", "chance_r1"), metric(sums[0], "zero_shot", "chance_r1"));
  }
  for (int k = 0; k < n; k++)
    cJSON_Delete(sums[k]);
  return rc;
}

const ampc_command ampc_cmd_train = {
    .name = "train",
    .summary = "train with mixed precision (presets, loss scaling, checkpoints)",
    .usage = k_usage,
    .usage_more = k_usage_more,
    .usage_tail = k_usage_tail,
    .run = run,
};
