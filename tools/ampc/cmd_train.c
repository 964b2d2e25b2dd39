/*
 * tools/ampc/cmd_train.c: `ampc train`: parse the flags into runs of the
 * library's training run and print what they report.
 *
 * The model is the multimodal image-text model (mm-tiny by default), an
 * image-only ViT, or the MLP on synthetic blobs (--model); the data the
 * bundled emoji pairs, Fashion-MNIST or a prepared file (--data). Every
 * precision safeguard is one flag; the resolved configuration is printed at
 * start and written as the first line of the JSONL log; the run is
 * deterministic for a seed and thread count, and --resume continues a
 * checkpoint exactly where an uninterrupted run would be. A --precision list
 * runs each preset in turn through ampc_compare_run (as `ampc compare` does)
 * and prints them side by side.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <signal.h>
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
    "  --data emoji|fashion-mnist[:DIR]|FILE|PACK   the bundled emoji pairs\n"
    "                   (default), Debian's Fashion-MNIST (image-only; the default\n"
    "                   model becomes vit-fm), a file from `ampc data emoji`, or a\n"
    "                   folder from `ampc data pack` (your own data: streamed from\n"
    "                   its shards, evaluated on its val split; the model takes\n"
    "                   its image size, vocabulary and caption length)\n"
    "  --patch N        the vision tower's patch side (default: the preset's, scaled\n"
    "                   with the data's image size: 64x64 data, patch 8)\n"
    "  --hold-out-style S   the artwork style evaluated as the new style; the model\n"
    "                   trains on the others (default: the data file's, twitter;\n"
    "                   `ampc data info` lists the styles)\n"
    "  --augment-shift N   translate each training image by up to N pixels (0..8;\n"
    "                   default 2; 0: off), the border filled with its background\n"
    "  --itm-negatives hardest|sampled|random   the matching head's negative text per\n"
    "                   image: the most similar in the batch, drawn by similarity\n"
    "                   (ALBEF), or drawn uniformly from the other texts (default:\n"
    "                   with hardest the head stays at chance on the emoji pairs)\n"
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
    "  --anomaly-replay on|off  on (default): an unsampled step with a non-finite\n"
    "                   loss or gradients runs again with telemetry, to name the\n"
    "                   first non-finite tensor (training unchanged)\n"
    "  --save FILE (or --checkpoint FILE)  safetensors checkpoint at the end and\n"
    "                   every --save-every N steps (100; 0: at the end only), and\n"
    "                   when the run is interrupted (Ctrl-C, SIGTERM)\n"
    "  --resume FILE    continue from a checkpoint (same model and data flags; any\n"
    "                   number of ranks) up to --steps (the whole run's, counted\n"
    "                   from its start)\n";

/* ... and its end */
static const char k_usage_tail[] =
    "  --fake-quant none|int8  int8: quantization-aware training: the blocks' linear\n"
    "                   layers INT8 fake-quantized as `ampc quantize` and INT8\n"
    "                   eval run them (CPU, mm-* models; docs/QUANTIZATION.md)\n"
    "  --on-stall stop|warn  on non-finite weights, or N steps in a row that\n"
    "                   overflow at the scale floor or have a non-finite loss:\n"
    "                   print and log the diagnosis, then stop (default, exit 3)\n"
    "                   or go on; --stall-steps N (hysteresis + 2)\n"
    "  --json           the summary as one JSON object on stdout ({\"runs\":[...]} when\n"
    "                   --precision lists several)\n"
    "  --quiet          no progress, evaluation or diagnosis lines (one run's last\n"
    "                   line, done: ..., stays; a list prints its table)\n"
    "\n"
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
    "  --zero 0|1       1: ZeRO stage 1, each rank keeps its shard of the FP32\n"
    "                   master weights and optimizer state (12 bytes/param / N\n"
    "                   with AdamW); the same bits, checkpoints stay whole\n"
    "  --overlap on|off  on: sum each block's gradient over the ranks while the\n"
    "                   backward pass goes on (CPU, --allreduce f32, one loss\n"
    "                   scale); the same bits. off (default): after the pass\n"
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
                                            "anomaly-replay",
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
                                            "fake-quant",
                                            "on-stall",
                                            "stall-steps",
                                            "device",
                                            "recompute",
                                            "attention-cast",
                                            "allreduce",
                                            "zero",
                                            "overlap",
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
static const char *g_allreduce_path = "none (one process)"; /* ampc_dist_use_device */
#ifdef AMPC_TEST_HOOKS
/* AMPC_TEST_DEVICE_SUMS=host: the group's device sums made of its host sums
 * on --device cpu-split (whose "device" buffers are host memory), so that the
 * trainer's device-sum path (the one NCCL takes) runs on the CPU
 * (tests/check_dist_device.sh) */
static ampc_comm g_test_comm;
#endif

/* SIGINT / SIGTERM: the run stops after the step in progress and writes its
 * checkpoint (ampc_run_config.interrupt); a second signal ends the process
 * at once, as the default action would */
static volatile sig_atomic_t g_interrupt;
static int g_argc;
static char **g_argv;

static void on_signal(int sig) {
  if (g_interrupt) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_interrupt = sig;
}

static void catch_signals(bool on) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on ? on_signal : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* one argument for a shell: as it is, or in single quotes */
static void put_arg(const char *a) {
  const bool plain = a[0] && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-_=.,/:+@%") == strlen(a);
  if (plain) {
    fprintf(stderr, " %s", a);
    return;
  }
  fputs(" '", stderr);
  for (; *a; a++)
    fputs(*a == '\'' ? "'\\''" : (char[2]){*a, 0}, stderr);
  fputc('\'', stderr);
}

/* "interrupted at step N; resume with: ampc train ARGS --resume FILE" (the
 * command line as given, a --resume in it replaced; a list's run: with its
 * own --precision, --save and --log) */
static void print_interrupted(const ampc_compare_result *r, const char *label, bool list,
                              const char *save, const char *log) {
  fprintf(stderr, "ampc train: interrupted (signal %d) at step %lld%s%s", (int)g_interrupt,
          (long long)r->steps, list ? " of run " : "", list ? label : "");
  if (!save) {
    fprintf(stderr, "; no --save was given, so there is nothing to resume from\n");
    return;
  }
  /* a list: its other runs did not start; that run alone resumes (a list
   * takes no --resume), with its own --precision and --save */
  fprintf(stderr, "; checkpoint %s; resume %swith:\n  ", save, list ? "that run alone " : "");
  const int ranks = ampc_dist_size(g_dist);
  if (ranks > 1) /* the same ranks (any count resumes it; this one gives the same bits) */
    fprintf(stderr, "mpirun -np %d ", ranks);
  fprintf(stderr, "ampc train");
  for (int i = 1; i < g_argc; i++) {
    const char *a = g_argv[i];
    const bool swap = list && (!strcmp(a, "--precision") || !strcmp(a, "--save") ||
                               !strcmp(a, "--checkpoint") || !strcmp(a, "--log"));
    if (!strcmp(a, "--resume") || swap) {
      if (swap && i + 1 < g_argc) {
        put_arg(a);
        put_arg(!strcmp(a, "--precision") ? label : !strcmp(a, "--log") ? log : save);
      }
      i++;
      continue;
    }
    if (!strncmp(a, "--resume=", 9))
      continue;
    if (list && !strncmp(a, "--precision=", 12)) {
      put_arg("--precision"), put_arg(label);
      continue;
    }
    if (list && (!strncmp(a, "--save=", 7) || !strncmp(a, "--checkpoint=", 13))) {
      put_arg("--save"), put_arg(save);
      continue;
    }
    if (list && !strncmp(a, "--log=", 6)) {
      put_arg("--log"), put_arg(log);
      continue;
    }
    put_arg(a);
  }
  fprintf(stderr, " --resume");
  put_arg(save);
  fputc('\n', stderr);
}

/* an output path (NULL: none) that can be written (ampc_check_out_path),
 * as a usage error */
static int check_out_path(const char *flag, const char *path, bool regular) {
  return ampc_check_out_path(flag, path, regular) == AMPC_OK
             ? 0
             : cli_usage_error("train", "%s", ampc_last_error());
}

/* room for a run's output path with its preset inserted */
enum { TRAIN_PATH = 4200 };

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

/* out = path with tag inserted: "run.jsonl" + "16-mixed" -> "run.16-mixed.jsonl" */
static void with_tag(const char *path, const char *tag, char *out, size_t cap) {
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  if (dot && (!slash || dot > slash + 1))
    snprintf(out, cap, "%.*s.%s%s", (int)(dot - path), path, tag, dot);
  else
    snprintf(out, cap, "%s.%s", path, tag);
}

void train_run_paths(const train_args *a, int k, char *log, char *save, size_t cap) {
  const char *in[2] = {a->log, a->save};
  char *out[2] = {log, save};
  for (int i = 0; i < 2; i++) {
    if (!in[i])
      out[i][0] = '\0';
    else if (a->n_presets > 1 && taggable(in[i]))
      with_tag(in[i], a->presets[k], out[i], cap);
    else
      snprintf(out[i], cap, "%s", in[i]);
  }
}

/* --precision P or a list A,B,... into a->presets (each name known, none
 * twice); 0 or a usage error */
static int parse_presets(const char *list, train_args *a) {
  a->n_presets = 0;
  const size_t ll = strlen(list);
  if (strchr(list, ',') && list[ll - 1] == ',') /* "32-true,": an empty last name */
    return cli_usage_error("train", "--precision: bad list '%s'", list);
  for (const char *p = list; *p || a->n_presets == 0;) {
    const char *c = strchr(p, ',');
    const size_t len = c ? (size_t)(c - p) : strlen(p);
    if (strchr(list, ',') && (len == 0 || len >= sizeof a->presets[0]))
      return cli_usage_error("train", "--precision: bad list '%s'", list);
    if (a->n_presets == TRAIN_MAX_PRESETS)
      return cli_usage_error("train", "--precision: at most %d presets in a list ('%s')",
                             TRAIN_MAX_PRESETS, list);
    char *name = a->presets[a->n_presets];
    snprintf(name, sizeof a->presets[0], "%.*s", (int)len, p);
    for (int k = 0; k < a->n_presets; k++)
      if (!strcmp(a->presets[k], name))
        return cli_usage_error("train", "--precision: %s is listed twice", name);
    a->n_presets++;
    p = c ? c + 1 : p + len;
  }
  /* every name checked before any run's own flags */
  for (int k = 0; k < a->n_presets; k++) {
    ampc_precision q;
    if (ampc_precision_parse(strchr(list, ',') ? a->presets[k] : list, &q) != AMPC_OK)
      return cli_usage_error("train", "--precision: %s", ampc_last_error());
  }
  return 0;
}

/* preset p with the precision flags over[0..n) applied in order, checked;
 * 0 or a usage error */
static int amp_for(const char *p, const flag_value *over, int n, ampc_amp_config *amp) {
  ampc_precision q;
  if (ampc_precision_parse(p, &q) != AMPC_OK)
    return cli_usage_error("train", "--precision: %s", ampc_last_error());
  ampc_amp_config_preset(q, amp);
  for (int k = 0; k < n; k++)
    if (ampc_amp_config_set(amp, over[k].name, over[k].value) != AMPC_OK)
      return cli_usage_error("train", "%s", ampc_last_error());
  if (ampc_amp_config_check(amp) != AMPC_OK)
    return cli_usage_error("train", "%s", ampc_last_error());
  return 0;
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
  int rc = parse_presets(precision, a);
  /* each preset with the precision flags over it; a list's errors name the
   * run they are in */
  char ctx[96];
  for (int k = 0; k < a->n_presets && !rc; k++) {
    snprintf(ctx, sizeof ctx, "in the run of --precision %s", a->presets[k]);
    cli_usage_context = a->n_presets > 1 ? ctx : NULL;
    rc = amp_for(a->presets[k], amp_over, namp, &a->amp[k]);
    cli_usage_context = NULL;
  }
  if (rc)
    return rc;
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
  /* the recipe that learns (ampc_run_config_defaults): without it the
   * matching head stays at chance */
  a->augment_shift = 2, a->itm_sampled = true, a->itm_random = true;
  int64_t warmup = -1; /* default: 20 for the transformer models, 0 for mlp */
  a->save_every = -1;  /* default: 100 with --save (an interrupted machine keeps its work) */
  for (int k = 0; k < nrest; k++) {
    const char *n = rest[k].name, *v = rest[k].value;
    char flag[80];
    snprintf(flag, sizeof flag, "--%.47s", n);
    rc = 0;
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
    else if (!strcmp(n, "anomaly-replay")) {
      if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
        rc = cli_usage_error("train", "--anomaly-replay: expected on or off, got '%s'", v);
      else
        a->no_anomaly_replay = !strcmp(v, "off");
    } else if (!strcmp(n, "save-every"))
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
    else if (!strcmp(n, "patch"))
      rc = parse_i64(flag, v, 1, 1024, &a->patch);
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
    else if (!strcmp(n, "fake-quant")) {
      if (!strcmp(v, "none") || !strcmp(v, "int8"))
        a->fake_q8 = !strcmp(v, "int8");
      else
        rc = cli_usage_error("train", "--fake-quant: expected none or int8, got '%s'", v);
    } else if (!strcmp(n, "on-stall")) {
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
    } else if (!strcmp(n, "zero")) {
      if (!strcmp(v, "0") || !strcmp(v, "1"))
        a->zero = v[0] - '0';
      else
        rc = cli_usage_error("train",
                             "--zero: expected 0 (every rank holds the whole optimizer state) or "
                             "1 (ZeRO stage 1: each rank its shard), got '%s'",
                             v);
    } else if (!strcmp(n, "overlap")) {
      if (!strcmp(v, "on") || !strcmp(v, "off"))
        a->overlap = !strcmp(v, "on");
      else
        rc = cli_usage_error("train",
                             "--overlap: expected on (sum the gradients over the ranks during the "
                             "backward pass) or off, got '%s'",
                             v);
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
  if (a->save_every < 0)
    a->save_every = a->save ? 100 : 0;
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
  /* one checkpoint cannot continue several presets: each would start from
   * the same weights, and the side-by-side answer would compare nothing */
  if (a->resume && a->n_presets > 1)
    return cli_usage_error("train",
                           "--resume with a --precision list: each preset has its own checkpoint; "
                           "resume one preset at a time (--precision P --resume "
                           "CHECKPOINT.P.safetensors) or run the list again");
  /* quantization-aware training: the CPU's image-text models in a preset
   * whose blocks' linear layers are not FP8's */
  if (a->fake_q8 && !strcmp(a->model, "mlp"))
    return cli_usage_error("train", "--fake-quant int8: --model mlp has no transformer blocks "
                                    "(INT8 quantization-aware training is for the mm-* models)");
  if (a->fake_q8 && a->device != AMPC_DEVICE_CPU)
    return cli_usage_error("train",
                           "--fake-quant int8 runs on the CPU (--device cpu), not --device "
                           "%s",
                           ampc_device_name(a->device));
  for (int k = 0; a->fake_q8 && k < a->n_presets; k++)
    if (ampc_precision_is_fp8(a->amp[k].precision))
      return cli_usage_error("train",
                             "--fake-quant int8 with --precision %s: its linear layers are FP8's "
                             "(use 32-true or a 16-bit preset)",
                             a->presets[k]);
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
  /* rank 0 alone writes them: each run's own (a list's, tagged) */
  for (int k = 0; k < a->n_presets && ampc_dist_rank(g_dist) == 0 && !rc; k++) {
    char log[TRAIN_PATH], save[TRAIN_PATH];
    train_run_paths(a, k, log, save, sizeof log);
    snprintf(ctx, sizeof ctx, "in the run of --precision %s", a->presets[k]);
    cli_usage_context = a->n_presets > 1 ? ctx : NULL;
    rc = check_out_path("--save", a->save ? save : NULL, true);
    if (!rc)
      rc = check_out_path("--log", a->log ? log : NULL, false);
    cli_usage_context = NULL;
  }
  if (rc)
    return rc;
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

/* ---- printing what the runs report (the library never prints) ---------------------- */

void train_print_verdicts(FILE *out, const ampc_verdict *v, int n, const bool *no_loss_gap,
                          const char *baseline) {
  for (int i = 0; i < n; i++) {
    fprintf(out, "diagnosis: %s", ampc_verdict_name(v[i].kind));
    if (v[i].branch >= 0)
      fprintf(out, " (%s)", ampc_branch_name((ampc_branch)v[i].branch));
    if (no_loss_gap && no_loss_gap[i]) /* the signature, not the outcome */
      fprintf(out, ": present, no loss gap against %s", baseline ? baseline : "32-true");
    fputc('\n', out);
    for (int k = 0; k < v[i].n_evidence; k++)
      fprintf(out, "  - %s\n", v[i].evidence[k]);
    if (v[i].safeguard[0])
      fprintf(out, "  safeguard: %s\n", v[i].safeguard);
  }
}

static void print_diagnosis(FILE *out, const ampc_diag *d) {
  ampc_verdict v[AMPC_VERDICT_COUNT];
  train_print_verdicts(out, v, ampc_diag_verdicts(d, v, AMPC_VERDICT_COUNT), NULL, NULL);
}

/* the run's resolved configuration (out) and its warnings (err) */
static void print_config(FILE *out, FILE *err, ampc_run *R, const train_args *A) {
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
  const ampc_run_config *rc = ampc_run_get_config(R);
  if (rc->fake_quant_int8)
    fprintf(out, ", fake quant int8 (the blocks' linear layers: weights per channel, activations "
                 "per tensor)");
  fprintf(out, "; %lld parameters", (long long)T->params.numel);
  if (rc->comm && rc->comm->size > 1)
    fprintf(out, "; %d ranks, %lld samples each", rc->comm->size,
            (long long)(rc->batch / rc->comm->size));
  if (rc->comm) /* where the gradient sums run (ampc_dist_use_device) */
    fprintf(out, "; allreduce: %s", g_allreduce_path);
  if (T->zero) /* this rank's part of the FP32 state (rank 0's: the largest) */
    fprintf(out,
            "; ZeRO-1: each rank keeps <= %lld of %lld elements of the FP32 master weights and "
            "optimizer state",
            (long long)T->params.shard_n, (long long)T->params.total);
  fputc('\n', out);
  if (rc->resume_path) /* where it goes on from */
    fprintf(out, "ampc train: resumed from %s at step %lld of %lld\n", rc->resume_path,
            (long long)T->iteration, (long long)rc->steps);
  char warns[16][256];
  const int nw = ampc_run_warnings(R, warns, 16);
  for (int k = 0; k < nw && k < 16; k++)
    fprintf(err, "ampc train: warning: %s\n", warns[k]);
  if (md->kind != AMPC_MODEL_MM && (A->attn_cast || A->keep_activations))
    fprintf(err, "ampc train: warning: --model %s has no attention: %s ignored\n", md->name,
            A->attn_cast && A->keep_activations ? "--attention-cast and --recompute are"
            : A->attn_cast                      ? "--attention-cast is"
                                                : "--recompute is");
}

double train_eta_s(const ampc_run_progress *p) {
  const int64_t done = p->info->iteration - p->start;
  const double train_s = p->elapsed_s - p->eval_s;
  double eta = done > 0 ? train_s / (double)done * (double)(p->end - p->info->iteration) : 0.0;
  if (p->evals_done > 0)
    eta += p->eval_s / (double)p->evals_done * (double)p->evals_left;
  return eta;
}

static void on_step(void *user, const ampc_run *R, const ampc_run_progress *p) {
  (void)R;
  const train_printer *pr = user;
  const ampc_step_info *info = p->info;
  const int64_t done = info->iteration - p->start;
  if (pr->tty) {
    const double train_s = p->elapsed_s - p->eval_s, eta = train_eta_s(p);
    fprintf(
        stderr, "\rstep %lld/%lld  loss %.4f  scale %g  skipped %lld  %.2f it/s  ETA %.0f s%s   ",
        (long long)info->iteration, (long long)pr->A->steps, (double)p->losses->total,
        (double)info->next_scale, (long long)p->skipped, train_s > 0 ? (double)done / train_s : 0.0,
        eta, p->evals_done == 0 && p->evals_left > 0 ? " + eval" : "");
  } else if (!pr->quiet && (info->iteration % pr->every == 0 || info->iteration == p->end)) {
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
  const train_printer *pr = user;
  if (pr->tty)
    fputc('\n', stderr);
  if (pr->quiet)
    return;
  if (e->kind == AMPC_EVAL_CLASSES) {
    fprintf(pr->out, "eval @%lld  %s: accuracy %.4f, loss %.4f (%lld samples)\n",
            (long long)iteration, e->split == AMPC_SPLIT_NEW_STYLE ? "new style" : "test",
            e->accuracy, e->loss, (long long)e->samples);
    return;
  }
  const ampc_mmodel_metrics *n = &e->new_style, *z = &e->zero_shot, *v = &e->val;
  fprintf(pr->out, "eval @%lld", (long long)iteration);
  if (v->samples > 0)
    fprintf(pr->out, "  val: R@1 i2t %.3f t2i %.3f, R@5 i2t %.3f t2i %.3f (chance R@1 %.4f)",
            v->i2t_r1, v->t2i_r1, v->i2t_r5, v->t2i_r5, 1.0 / (double)v->concepts);
  if (e->prompt_classes > 0)
    fprintf(pr->out, "  | zero-shot by prompt: accuracy %.3f (%lld classes)", e->prompt_acc,
            (long long)e->prompt_classes);
  if (n->samples > 0)
    fprintf(pr->out, "  new style: R@1 i2t %.3f t2i %.3f (chance %.4f), group %.3f", n->i2t_r1,
            n->t2i_r1, 1.0 / (double)n->concepts, n->cls_acc);
  if (z->samples > 0)
    fprintf(pr->out, "%s zero-shot: R@1 i2t %.3f t2i %.3f (chance %.3f)",
            n->samples > 0 ? "  |" : " ", z->i2t_r1, z->t2i_r1, 1.0 / (double)z->concepts);
  fprintf(pr->out, "\n");
}

/* an evaluation's progress: one rewritten line on a terminal (the result
 * line follows it; on a pipe the result line alone) */
static void on_eval_progress(void *user, const ampc_run *R, int64_t iteration, double fraction) {
  (void)R;
  const train_printer *pr = user;
  if (pr->tty)
    fprintf(stderr, "\reval @%lld  %3.0f %%%-60s", (long long)iteration, 100.0 * fraction, "");
}

/* a stall: the reason and the diagnosis so far, on stderr at once */
static void on_stall(void *user, const ampc_run *R, int64_t iteration, const char *reason) {
  const train_printer *pr = user;
  if (pr->tty)
    fputc('\n', stderr); /* end the \r progress line */
  fprintf(pr->err, "ampc train: the run stalled at step %lld: %s\n", (long long)iteration, reason);
  print_diagnosis(pr->err, ampc_run_diag(R));
  fprintf(pr->err, "ampc train: %s\n",
          pr->A->on_stall == AMPC_STALL_STOP
              ? "stopping (--on-stall stop): no checkpoint is written after this step"
              : "going on (--on-stall warn)");
}

void train_printer_set(train_printer *p, const train_args *A, FILE *out, FILE *err, bool quiet,
                       bool lead) {
  *p = (train_printer){.A = A,
                       .out = out,
                       .err = err,
                       .quiet = quiet || !lead,
                       .tty = !quiet && lead && isatty(fileno(stderr)),
                       .lead = lead,
                       .every = A->steps >= 20 ? A->steps / 20 : 1};
}

static void on_run_start(void *user, int k, ampc_run *R) {
  (void)k;
  const train_printer *pr = user;
  if (pr->lead)
    print_config(pr->out, pr->err, R, pr->A);
}

ampc_compare_callbacks train_printer_callbacks(train_printer *p) {
  return (ampc_compare_callbacks){.user = p,
                                  .run_start = on_run_start,
                                  .run = {p, on_step, on_eval, on_stall, on_eval_progress}};
}

/* ---- from flags to runs ----------------------------------------------------------- */

/* a packed dataset: its shards (each checked against its SHA-256), the
 * training stream and the val split in memory */
static int train_inputs_open_pack(const char *cmd, const train_args *A, train_inputs *in) {
  ampc_status st = ampc_shards_open(&in->shards, A->data, true, false);
  if (st == AMPC_OK)
    st = ampc_shards_val_dataset(in->shards, CLI_PACK_EVAL_SAMPLES, &in->D);
  if (st == AMPC_OK) {
    in->owns_data = true;
    st = ampc_stream_create(&in->data.stream, in->shards, A->seed, 0, true);
  }
  if (st != AMPC_OK) {
    train_inputs_free(in);
    return cli_runtime_error(cmd, "%s", ampc_last_error());
  }
  const ampc_shards_info *si = ampc_shards_get_info(in->shards);
  for (int64_t i = 0; i < si->bad_shards; i++) /* left out, not fatal (as a bad sample) */
    fprintf(stderr, "ampc %s: warning: %s\n", cmd, si->bad_shard_notes[i]);
  in->data.shards = in->shards;
  in->data.stream_n_train = si->n_train;
  in->data.pack_id = si->id;
  in->data.class_prompts = si->class_prompts;
  return 0;
}

int train_inputs_load(const char *cmd, const train_args *A, const train_inputs *share,
                      train_inputs *in, bool *refused, char *why, size_t cap) {
  memset(in, 0, sizeof *in);
  *refused = false;
  in->data.name = A->data;
  if (strcmp(A->model, "mlp") == 0) { /* synthetic Gaussian blobs, train rows then test rows */
    const int64_t dim = A->mc.in, ntot = A->ntrain + A->ntest;
    in->x = malloc((size_t)(ntot * dim) * sizeof *in->x);
    in->y = malloc((size_t)ntot * sizeof *in->y);
    if (!in->x || !in->y) {
      train_inputs_free(in);
      return cli_runtime_error(cmd, "out of memory for %lld samples", (long long)ntot);
    }
    ampc_synth_blobs(ntot, dim, A->mc.classes, A->sep, A->seed, in->x, in->y);
    in->data = (ampc_run_data){.n_train = A->ntrain,
                               .n_test = A->ntest,
                               .dim = dim,
                               .x_train = in->x,
                               .x_test = in->x + A->ntrain * dim,
                               .y_train = in->y,
                               .y_test = in->y + A->ntrain,
                               .name = "synthetic blobs"};
    (void)ampc_model_desc_get("mlp", NULL, &in->md);
    in->md.mlp = A->mc;
    return 0;
  }
  const ampc_dataset *D = share ? share->data.dataset : NULL;
  if (D && share->data.stream) { /* the same packed dataset */
    in->data.stream = share->data.stream;
    in->data.stream_n_train = share->data.stream_n_train;
    in->data.class_prompts = share->data.class_prompts;
    in->data.pack_id = share->data.pack_id;
    in->data.shards = share->data.shards;
  }
  if (!D && cli_is_pack(A->data)) {
    if (A->hold_out_style)
      return cli_usage_error(cmd,
                             "--hold-out-style: %s is a packed dataset (its val split is "
                             "held out by `ampc data pack --val-fraction`)",
                             A->data);
    int rc = train_inputs_open_pack(cmd, A, in);
    if (rc)
      return rc;
    D = &in->D;
  }
  if (!D) {
    int rc = cli_load_data(cmd, A->data, &in->D);
    if (rc)
      return rc;
    in->owns_data = true;
    if (A->hold_out_style && (rc = cli_hold_out_style(cmd, A->hold_out_style, &in->D)) != 0) {
      train_inputs_free(in);
      return rc;
    }
    D = &in->D;
  }
  in->data.dataset = D;
  /* image-only data: the default model becomes the image-only ViT (a
   * --model named is kept, and refused if it needs captions) */
  const char *model = !D->tokens && !A->model_given ? "vit-fm" : A->model;
  if (ampc_model_desc_get(model, D, &in->md) != AMPC_OK) {
    snprintf(why, cap, "%s", ampc_last_error());
    *refused = true;
    train_inputs_free(in);
    return AMPC_EXIT_USAGE;
  }
  if (A->fake_q8 && (in->md.kind != AMPC_MODEL_MM || in->md.mm.image_only)) {
    snprintf(why, cap,
             "--fake-quant int8: model %s is image-only (INT8 quantization-aware training is "
             "for the image-text models, mm-*)",
             model);
    *refused = true;
    train_inputs_free(in);
    return AMPC_EXIT_USAGE;
  }
  ampc_mmodel_config *mm = &in->md.mm;
  /* a packed dataset's image size (the bundled data's models are fixed) */
  if (in->data.stream && ampc_mmodel_follow_image(mm, D->height) != AMPC_OK) {
    snprintf(why, cap, "%s", ampc_last_error());
    *refused = true;
    train_inputs_free(in);
    return AMPC_EXIT_USAGE;
  }
  if (A->patch > 0 && ampc_mmodel_set_image(mm, mm->img, A->patch) != AMPC_OK) {
    snprintf(why, cap, "--patch: %s", ampc_last_error());
    *refused = true;
    train_inputs_free(in);
    return AMPC_EXIT_USAGE;
  }
  mm->w_itc = A->w_itc, mm->w_itm = A->w_itm, mm->w_cls = A->w_cls;
  if (in->data.stream && !D->class_names) /* a pack without labels: no class loss */
    mm->w_cls = 0.0f;
  mm->w_mlm = mm->image_only ? 0.0f : A->w_mlm, mm->mlm_prob = A->mlm_prob;
  mm->no_recompute = A->keep_activations;
  mm->attn_cast = A->attn_cast;
  return 0;
}

void train_inputs_free(train_inputs *in) {
  if (in->owns_data)
    ampc_dataset_free(&in->D);
  if (in->shards) {
    ampc_stream_free(in->data.stream);
    ampc_shards_close(in->shards);
  }
  free(in->x), free(in->y);
  memset(in, 0, sizeof *in);
}

void train_spec(const train_args *A, const train_inputs *in, ampc_compare_spec *s) {
  memset(s, 0, sizeof *s);
  s->amp = A->amp[0];
  s->opt = A->opt;
  s->md = in->md;
  s->data = &in->data;
  s->threads = A->threads;
  ampc_run_config *c = &s->rc;
  *c = ampc_run_config_defaults();
  c->steps = A->steps, c->stop_at = A->stop_at, c->batch = A->batch;
  c->micro_batches = A->micro_batches;
  c->loss_multiplier = A->loss_multiplier;
  c->augment_shift = (int)A->augment_shift;
  c->itm_sample_negatives = A->itm_sampled;
  c->itm_random_negatives = A->itm_random;
  c->eval_every = A->eval_every, c->eval = !A->no_eval, c->log_every = A->log_every;
  c->save_every = A->save_every, c->telemetry_every = A->telemetry_every, c->seed = A->seed;
  c->anomaly_replay = !A->no_anomaly_replay;
  c->interrupt = &g_interrupt;
  c->log_path = A->log, c->save_path = A->save, c->resume_path = A->resume;
  c->comm = ampc_dist_comm(g_dist), c->reduce = A->reduce, c->check_replicas = A->check_replicas;
  c->zero = A->zero, c->overlap = A->overlap;
#ifdef AMPC_TEST_HOOKS
  const char *ds = getenv("AMPC_TEST_DEVICE_SUMS");
  if (ds && !strcmp(ds, "host") && c->comm && A->device == AMPC_DEVICE_CPU_SPLIT) {
    g_test_comm = *c->comm;
    g_test_comm.sum_device_f32_ordered = g_test_comm.sum_f32_ordered;
    g_test_comm.sum_device_working = g_test_comm.sum_working;
    c->comm = &g_test_comm;
    g_allreduce_path = "device sums (test: the host sums on cpu-split's buffers)";
  }
#endif
  c->global_negatives = A->global_negatives;
  c->on_stall = A->on_stall, c->stall_steps = A->stall_steps;
  c->device = A->device;
  c->fake_quant_int8 = A->fake_q8;
#ifdef AMPC_TEST_HOOKS /* the robustness tests' faults (docs/ROBUSTNESS.md; not in a release) */
  (void)ampc_fault_at_parse(getenv("AMPC_FAULT_FAIL"), &c->faults.fail);
  (void)ampc_fault_at_parse(getenv("AMPC_FAULT_NAN_GRAD"), &c->faults.nan_grad);
  /* one sample made extreme: AMPC_TEST_EXTREME_SAMPLE=INDEX:FACTOR */
  const char *xs = getenv("AMPC_TEST_EXTREME_SAMPLE");
  long long xi;
  float xf;
  if (xs && sscanf(xs, "%lld:%f", &xi, &xf) == 2)
    c->extreme_sample = xi, c->extreme_factor = xf;
#endif
}

/* ---- ampc train ------------------------------------------------------------------- */

/* what run_end needs besides the printer */
typedef struct train_ctx {
  train_printer pr;
  bool list; /* a --precision list: the table reports each run */
} train_ctx;

/* a run's end: its diagnosis and "done:" line (a list under --quiet: the
 * table reports it; --json: the summary object instead) */
static void on_run_end(void *user, int k, ampc_run *R, const ampc_compare_result *res) {
  (void)k;
  const train_ctx *tc = user;
  const train_printer *pr = &tc->pr;
  if (res->status != AMPC_OK || !pr->lead || pr->A->json)
    return;
  const char *save = ampc_run_get_config(R)->save_path; /* a list's: tagged */
  if (!pr->quiet) {
    const bool gap = res->have_gap && res->baseline >= 0;
    train_print_verdicts(pr->out, res->verdicts, res->n_verdicts, gap ? res->no_loss_gap : NULL,
                         gap ? pr->A->presets[res->baseline] : NULL);
    if (gap && res->n_gap_verdicts) /* worse than its FP32 twin */
      train_print_verdicts(pr->out, &res->gap_verdict, 1, NULL, NULL);
  }
  /* data parallel: the time rank 0 was held in the gradient sums */
  char wait[64] = "";
  cJSON *so = res->summary_json ? cJSON_Parse(res->summary_json) : NULL;
  const cJSON *rw = cJSON_GetObjectItemCaseSensitive(so, "reduce_wait_ms_per_step");
  if (cJSON_IsNumber(rw))
    snprintf(wait, sizeof wait, ", reduce wait %.2f ms/step", rw->valuedouble);
  cJSON_Delete(so);
  if (!pr->quiet || !tc->list) /* --quiet: no progress lines, but this one */
    fprintf(pr->out, "%s: %lld steps (%lld skipped), %.1f s%s%s%s\n",
            res->interrupted ? "interrupted" : "done", (long long)res->steps,
            (long long)res->skipped_steps, res->wall_s, wait, save ? ", checkpoint " : "",
            save ? save : "");
  if (res->timing_disturbed && (!pr->quiet || !tc->list))
    fprintf(pr->out,
            "timing: the machine was busy (other processes used %.1f of %d cores while this "
            "run's %d threads trained): its step times are not comparable\n",
            res->other_cores, ampc_cpu_count(), ampc_get_num_threads());
}

/* a table cell: the value, or "-" right-aligned where the run has none
 * (NaN: no evaluation, --no-eval) */
static void cell(double v, int width, int prec) {
  if (isnan(v))
    printf(" %*s", width, "-");
  else
    printf(" %*.*f", width, prec, v);
}

/* the runs of a list side by side: retrieval (the multimodal models) or
 * the test accuracy (vit-fm, vit-ref, the MLP) */
/* a metric column of the table: its header, the result's field, format */
typedef struct table_col {
  const char *name;
  size_t off; /* offsetof(ampc_compare_result, the double shown) */
  int width, prec;
} table_col;

/* the header and one row per run: precision, loss, skipped, the metric
 * columns, ms/step and activation MiB */
static void table(const train_args *A, const ampc_compare_result *res, const table_col *mid,
                  int n_mid, int ms_prec, int act_prec) {
  printf("%-11s %9s %8s", "precision", "loss", "skipped");
  for (int c = 0; c < n_mid; c++)
    printf(" %*s", mid[c].width, mid[c].name);
  printf(" %9s %10s\n", "ms/step", "act MiB");
  for (int k = 0; k < A->n_presets; k++) {
    printf("%-11s", A->presets[k]);
    cell(res[k].final_loss, 9, 4);
    cell((double)res[k].skipped_steps, 8, 0);
    for (int c = 0; c < n_mid; c++)
      cell(*(const double *)((const char *)&res[k] + mid[c].off), mid[c].width, mid[c].prec);
    cell(res[k].ms_per_step, 9, ms_prec);
    cell(res[k].activation_mib, 10, act_prec);
    putchar('\n');
  }
}

#define COL(name, field, width, prec)                                                              \
  { name, offsetof(ampc_compare_result, field), width, prec }

static void print_table_rows(const train_args *A, const ampc_compare_result *res) {
  printf("\nside by side (same seed, data and steps):\n");
  if (!isnan(res[0].val_i2t_r1)) { /* a packed dataset: its val split */
    static const table_col val[] = {COL("val R@1 i2t", val_i2t_r1, 11, 4),
                                    COL("val R@1 t2i", val_t2i_r1, 11, 4),
                                    COL("zero-shot", prompt_acc, 10, 3)};
    table(A, res, val, 3, 0, 1);
    printf("chance R@1: val %.4f\n", res[0].val_chance_r1);
  } else if (isnan(res[0].new_i2t_r1) && isnan(res[0].test_accuracy)) { /* --no-eval */
    table(A, res, NULL, 0, 1, 2);
  } else if (isnan(res[0].new_i2t_r1)) { /* the ViTs and the MLP */
    static const table_col acc[] = {COL("test acc", test_accuracy, 9, 4)};
    table(A, res, acc, 1, 2, 2);
  } else {
    static const table_col mm[] = {
        COL("new R@1 i2t", new_i2t_r1, 11, 4), COL("new R@1 t2i", new_t2i_r1, 11, 4),
        COL("zs R@1 i2t", zs_i2t_r1, 11, 4), COL("zs R@1 t2i", zs_t2i_r1, 11, 4),
        COL("group", group_acc, 9, 3)};
    table(A, res, mm, 5, 0, 1);
    printf("chance R@1: new style %.4f, zero-shot %.4f\n", res[0].new_chance_r1,
           res[0].zs_chance_r1);
  }
}
#undef COL

/* the table, and which runs' step times another process disturbed */
static void print_table(const train_args *A, const ampc_compare_result *res) {
  print_table_rows(A, res);
  for (int k = 0; k < A->n_presets; k++)
    if (res[k].timing_disturbed)
      printf("%s: the machine was busy (other processes used %.1f of %d cores while it "
             "trained): its ms/step is not comparable\n",
             A->presets[k], res[k].other_cores, ampc_cpu_count());
}

/* the list's answer, one line per preset against the 32-true run: the loss
 * gap over the last tenth of the steps with its standard error (the same
 * batches: a paired difference, ampc_diag_compare) and what it saved */
static void print_answers(const train_args *A, const ampc_compare_result *res, int n,
                          const ampc_compare_spec *specs) {
  int printed = 0;
  for (int k = 0; k < n; k++) {
    const ampc_compare_result *r = &res[k];
    if (!r->have_gap || r->baseline < 0 || r->baseline == k)
      continue;
    const ampc_compare_result *b = &res[r->baseline];
    const ampc_diag_gap *g = &r->gap;
    const double se = g->base_loss != 0.0 ? 100.0 * g->diff_se / fabs(g->base_loss) : (double)NAN;
    if (!printed++)
      putchar('\n');
    printf("%s vs %s: ", A->presets[k], A->presets[r->baseline]);
    if (!g->finite)
      printf("the run went non-finite");
    else if (g->significant)
      printf("loss gap %+.2f %% +- %.2f %% (%s)", 100.0 * g->rel, se,
             r->n_gap_verdicts ? ampc_verdict_name(r->gap_verdict.kind) : "significant");
    else
      printf("no significant loss gap (%+.2f %% +- %.2f %%)", 100.0 * g->rel, se);
    printf(" over steps %lld-%lld", (long long)g->first_step, (long long)g->last_step);
    int n_sig = 0; /* signatures in the counts that did no harm */
    for (int i = 0; i < r->n_verdicts; i++)
      if (r->no_loss_gap[i])
        printf("%s%s", n_sig++ ? " and " : ", ", ampc_verdict_name(r->verdicts[i].kind));
    if (n_sig)
      printf(" present without a loss gap");
    printf("; activations+workspace %.2fx, parameter state %.2fx",
           r->activation_mib / b->activation_mib, r->param_state_mib / b->param_state_mib);
    if (r->peak_rss_bytes > 0.0 && b->peak_rss_bytes > 0.0)
      printf(", peak RSS %.2fx", r->peak_rss_bytes / b->peak_rss_bytes);
    if (!r->timing_disturbed && !b->timing_disturbed)
      printf(", step time %.2fx\n", r->ms_per_step / b->ms_per_step);
    else /* another process took CPU time from one of the two */
      printf("; step time not compared (the machine was busy)\n");
  }
  if (printed && specs[0].rc.log_path) {
    const char *slash = strrchr(specs[0].rc.log_path, '/');
    printf("logs: %.*s (ampc diagnose LOG --baseline %s)\n",
           slash ? (int)(slash - specs[0].rc.log_path) : 1, slash ? specs[0].rc.log_path : ".",
           specs[res[0].baseline >= 0 ? res[0].baseline : 0].rc.log_path);
  }
}

/* --json: one run's summary object, or {"runs":[...]} for a list */
static int print_json(const ampc_compare_result *res, int n, bool list) {
  cJSON *o = list ? cJSON_CreateObject() : cJSON_Parse(res[0].summary_json);
  cJSON *runs = list && o ? cJSON_AddArrayToObject(o, "runs") : NULL;
  for (int k = 0; list && k < n; k++) {
    cJSON *s = cJSON_Parse(res[k].summary_json);
    if (!s || !runs || !cJSON_AddItemToArray(runs, s)) {
      cJSON_Delete(s), cJSON_Delete(o);
      return cli_runtime_error("train", "out of memory");
    }
  }
  if (!o)
    return cli_runtime_error("train", "out of memory");
  return cli_print_json("train", o);
}

/* The runs of A (one per preset), with the same seed, data and steps: the
 * exit code. */
static int train_runs(const train_args *A) {
  const int n = A->n_presets;
  const bool list = n > 1, lead = ampc_dist_rank(g_dist) == 0;
  train_inputs in;
  bool refused = false;
  char why[512];
  int rc = train_inputs_load("train", A, NULL, &in, &refused, why, sizeof why);
  if (rc)
    return refused ? cli_usage_error("train", "%s", why) : rc;
  ampc_compare_spec specs[TRAIN_MAX_PRESETS];
  char paths[TRAIN_MAX_PRESETS][2][TRAIN_PATH];
  for (int k = 0; k < n; k++) {
    train_spec(A, &in, &specs[k]);
    specs[k].label = A->presets[k];
    specs[k].amp = A->amp[k];
    train_run_paths(A, k, paths[k][0], paths[k][1], sizeof paths[k][0]);
    specs[k].rc.log_path = A->log ? paths[k][0] : NULL;
    specs[k].rc.save_path = A->save ? paths[k][1] : NULL;
  }
  /* a list keeps its logs (the answer against 32-true is read from them, and
   * `ampc diagnose --baseline` can be run on them afterwards): in the --log
   * given, else in a fresh folder ampc-runs/UTC-TIME */
  char run_dir[128] = "";
  if (list && !A->log) {
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    mkdir("ampc-runs", 0777);
    snprintf(run_dir, sizeof run_dir, "ampc-runs/%04d%02d%02d-%02d%02d%02d", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    if (mkdir(run_dir, 0777) != 0 && errno == EEXIST) /* two lists in one second */
      snprintf(run_dir + strlen(run_dir), sizeof run_dir - strlen(run_dir), "-%ld", (long)getpid());
    mkdir(run_dir, 0777);
    for (int k = 0; k < n; k++) {
      snprintf(paths[k][0], sizeof paths[k][0], "%s/%s.jsonl", run_dir, A->presets[k]);
      specs[k].rc.log_path = paths[k][0];
    }
  }
  train_ctx tc = {.list = list};
  /* a list's runs print as --quiet under --json; the JSON goes to stdout alone */
  train_printer_set(&tc.pr, A, A->json ? stderr : stdout, stderr, A->quiet || (list && A->json),
                    lead);
  ampc_compare_callbacks cb = train_printer_callbacks(&tc.pr);
  cb.user = &tc, cb.run_end = on_run_end; /* tc.pr comes first: the printer's user too */
  /* a list: every run against the 32-true one (its loss gap, from the logs) */
  const ampc_compare_options opt = {.stop_on_error = true,
                                    .vs_fp32 = list && lead && specs[0].rc.log_path,
                                    .vs_fp32_margin = 0.01};
  ampc_compare_result *res = calloc((size_t)n, sizeof *res);
  if (!res) {
    train_inputs_free(&in);
    return cli_runtime_error("train", "out of memory");
  }
  if (ampc_compare_run(specs, n, &opt, &cb, res) != AMPC_OK) {
    for (int k = 0; k < n; k++) {
      if (!res[k].ran || res[k].status == AMPC_OK)
        continue;
      if (res[k].stalled) { /* every rank agrees: no MPI_Abort needed */
        if (lead)
          fprintf(stderr, "ampc train: %s\n", res[k].error);
        /* --json: the summaries so far, the stalled run's diagnosis included */
        bool all = true;
        for (int j = 0; j <= k; j++)
          all = all && res[j].summary_json;
        if (lead && A->json && all)
          (void)print_json(res, k + 1, list);
        rc = AMPC_EXIT_STALLED;
      } else if (res[k].refused) { /* a setting that does not fit (batch, model, data) */
        rc = cli_usage_error("train", "%s", res[k].error);
      } else {
        rc = cli_runtime_error("train", "%s", res[k].error);
      }
      break;
    }
  } else if (lead && A->json) {
    rc = print_json(res, n, list);
  } else if (lead && list) {
    print_table(A, res);
    print_answers(A, res, n, specs);
  }
  for (int k = 0; k < n && rc == AMPC_EXIT_OK; k++)
    if (res[k].interrupted) { /* the shell's code for a death by that signal */
      if (lead)
        print_interrupted(&res[k], A->presets[k], list, specs[k].rc.save_path,
                          specs[k].rc.log_path ? specs[k].rc.log_path : "");
      rc = 128 + (int)g_interrupt;
    }
  ampc_compare_results_free(res, n);
  free(res);
  train_inputs_free(&in);
  return rc;
}

/* Under mpirun every rank runs this; a rank that fails ends the job
 * (MPI_Abort) after its message, so no rank waits for it forever. */
static int run(int argc, char **argv) {
  if (ampc_dist_init(NULL, NULL, &g_dist) != AMPC_OK)
    return cli_runtime_error("train", "%s", ampc_last_error());
  g_argc = argc, g_argv = argv, g_interrupt = 0;
  catch_signals(true);
  train_args *A = malloc(sizeof *A);
  if (!A) {
    ampc_dist_finalize(g_dist);
    g_dist = NULL;
    return cli_runtime_error("train", "out of memory");
  }
  /* the flags are the same on every rank: rank 0 alone reports their errors,
   * and every rank stops (a --precision list: every run's flags) */
  cli_quiet_usage = ampc_dist_rank(g_dist) != 0;
  int check = train_parse_args(argc, argv, A);
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
    free(A);
    ampc_dist_finalize(g_dist); /* every rank stops here: nobody waits */
    g_dist = NULL;
    return check;
  }
  /* NCCL for the device's gradient sums, if every rank has it */
  g_allreduce_path = ampc_dist_use_device(g_dist, A->device);
  const int rc = train_runs(A);
  free(A);
  /* a stall is decided on replicated state: every rank stops at the same
   * step, so they end together without MPI_Abort */
  catch_signals(false);
  /* an interruption is agreed on too (128 + the signal) */
  if (rc != 0 && rc != AMPC_EXIT_STALLED && rc < 128 && ampc_dist_size(g_dist) > 1) {
    fprintf(stderr, "ampc train: rank %d of %d failed (exit %d): ending the job\n",
            ampc_dist_rank(g_dist), ampc_dist_size(g_dist), rc);
    ampc_dist_abort(g_dist, rc);
  }
  ampc_dist_finalize(g_dist);
  g_dist = NULL;
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
