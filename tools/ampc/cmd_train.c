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
#include <sys/stat.h>
#include <time.h>

#include "ampc/ampc.h"
#include "train.h"

static const char k_usage[] =
    "Usage: ampc train [options]\n"
    "\n"
    "Train a model with mixed precision. Models: --model mm-tiny (default), mm-small,\n"
    "mm-micro: the multimodal image-text model (ViT vision encoder, text encoder,\n"
    "cross-attention fusion; loss w_itc InfoNCE + w_itm matching BCE + w_cls group\n"
    "CE) on --data emoji (the bundled emoji image-caption pairs; default) or a\n"
    "dataset file from `ampc data emoji`; --model vit-ref, vit-fm: image-only ViTs\n"
    "(class CE on CLS; vit-fm is the default for --data fashion-mnist); --model mlp:\n"
    "an MLP classifier on synthetic Gaussian blobs (the engine's smoke test).\n"
    "\n"
    "Precision (presets as PyTorch Lightning's precision=):\n"
    "  --precision P        32-true | 16-mixed | bf16-mixed | 16-true | bf16-true\n"
    "                       (default 16-mixed)\n"
    "  --master-weights on|off   FP32 master copy of the weights\n"
    "  --loss-scale none|dynamic|S   loss scaling (S: a static scale)\n"
    "  --accumulate fp32|fp16    GEMM accumulation\n"
    "  --init-scale S (65536) --growth-factor G (2) --backoff-factor B (0.5)\n"
    "  --growth-interval N (2000) --hysteresis H (1) --min-scale S (1)\n"
    "  --max-scale S (none)      dynamic loss scaler (torch GradScaler defaults)\n"
    "\n"
    "Optimizer:\n"
    "  --optimizer adamw|sgd (adamw)  --lr LR (1e-3; sgd 1e-2)\n"
    "  --weight-decay WD (adamw 0.01, sgd 0)  --beta1 B1 (0.9)  --beta2 B2 (0.999)\n"
    "  --eps E (1e-8)  --momentum M (sgd 0.9)  --nesterov\n"
    "  --warmup N (20; mlp 0)  --schedule cosine|constant (cosine)  --min-lr LR (0)\n"
    "  --clip-norm C (0 = off; global L2 norm of the unscaled gradients)\n"
    "\n"
    "Run:\n"
    "  --steps N (300)  --stop-at N (end after step N as if interrupted, saving\n"
    "                   the checkpoint; the LR schedule still spans --steps)\n"
    "  --batch B (64)  --micro-batches K (1: gradient accumulation)\n"
    "  --seed S (1)  --threads N (all cores)  --eval-every N (100; and at the end)\n"
    "  --no-eval        no evaluation at all (short diagnostic runs)\n"
    "  --in N (16) --hidden N (64) --classes N (5) --train-size N (4096)\n"
    "  --test-size N (1024) --separation X (0.8)   mlp model and data sizes\n"
    "  --data emoji|fashion-mnist[:DIR]|FILE   the bundled emoji pairs (default), Debian's\n"
    "                   Fashion-MNIST (image-only; the model becomes vit-fm), or a file\n"
    "                   from `ampc data emoji`\n"
    "  --w-itc W --w-itm W --w-cls W   loss weights (1, 1, 1)\n"
    "  --log FILE       JSON Lines: a config line, one line per step, eval lines,\n"
    "                   a summary line\n"
    "  --log-every N    step lines every N steps (1; sampled and overflowing steps\n"
    "                   are always logged)\n"
    "  --telemetry-every N   count what 16-bit rounding does (flushed to zero,\n"
    "                   subnormal, overflow, log2|x| histograms per branch) and run\n"
    "                   the FP64 shadow GEMM check every N steps (10; 0 = off;\n"
    "                   multimodal and ViT models)\n"
    "  --save FILE (or --checkpoint FILE)  safetensors checkpoint at the end (and every "
    "--save-every N)\n"
    "  --resume FILE    continue from a checkpoint (same model and data flags)\n"
    "  --json           print the summary as one JSON object on stdout (with a\n"
    "                   --precision list: {\"runs\":[summary, ...]})\n"
    "  --quiet          no progress lines\n"
    "\n"
    "Exit status: 0 success, 1 runtime error (unreadable checkpoint, unwritable\n"
    "log), 2 bad usage (unknown flag, bad value).\n";

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
  if (end == v || *end || errno || !isfinite(x) || fabs(x) > 3.4e38)
    return cli_usage_error("train", "%s: expected a finite number, got '%s'", flag, v);
  *out = (float)x;
  return 0;
}

static const char *const k_amp_flags[] = {
    "master-weights", "loss-scale",      "accumulate", "init-scale", "growth-factor",
    "backoff-factor", "growth-interval", "hysteresis", "min-scale",  "max-scale"};
enum { N_AMP_FLAGS = sizeof k_amp_flags / sizeof k_amp_flags[0], MAX_FLAGS = 64 };

typedef struct {
  char name[48];
  const char *value;
} flag_value;

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
        !strcmp(f.name, "no-eval")) {
      if (f.value)
        return cli_usage_error("train", "--%s takes no value", f.name);
      if (f.name[0] == 'j')
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
      if (i + 1 >= argc)
        return cli_usage_error("train", "--%s needs a value", f.name);
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
  a->steps = 300, a->batch = 64, a->micro = 1, a->eval_every = 100, a->log_every = 1;
  a->tm_every = 10;
  a->ntrain = 4096, a->ntest = 1024, a->sep = 0.8f, a->seed = 1, a->cosine = true;
  a->model = "mm-tiny";
  a->data = "emoji";
  a->w_itc = a->w_itm = a->w_cls = 1.0f;
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
      rc = parse_i64(flag, v, 1, 1024, &a->micro);
    else if (!strcmp(n, "eval-every"))
      rc = parse_i64(flag, v, 0, 1000000000, &a->eval_every);
    else if (!strcmp(n, "log-every"))
      rc = parse_i64(flag, v, 1, 1000000000, &a->log_every);
    else if (!strcmp(n, "telemetry-every"))
      rc = parse_i64(flag, v, 0, 1000000000, &a->tm_every);
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
    else if (!strcmp(n, "w-itc"))
      rc = parse_f(flag, v, &a->w_itc);
    else if (!strcmp(n, "w-itm"))
      rc = parse_f(flag, v, &a->w_itm);
    else if (!strcmp(n, "w-cls"))
      rc = parse_f(flag, v, &a->w_cls);
    else if (!strcmp(n, "resume"))
      a->resume = v;
    else if (!strcmp(n, "model")) {
      if (strcmp(v, "mlp") && strcmp(v, "mm-tiny") && strcmp(v, "mm-small") &&
          strcmp(v, "mm-micro") && strcmp(v, "vit-ref") && strcmp(v, "vit-fm"))
        rc = cli_usage_error("train",
                             "--model: unknown model '%s' (available: mm-tiny, mm-small, "
                             "mm-micro, vit-ref, vit-fm, mlp)",
                             v);
      a->model = v;
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
  if (a->batch % a->micro != 0)
    return cli_usage_error("train", "--batch %lld is not a multiple of --micro-batches %lld",
                           (long long)a->batch, (long long)a->micro);
  /* output paths: distinct, and checked now rather than after the run */
  if ((a->log && a->save && !strcmp(a->log, a->save)) ||
      (a->log && a->resume && !strcmp(a->log, a->resume)))
    return cli_usage_error("train", "--log must not name the checkpoint file (%s)", a->log);
  if (a->save) {
    struct stat sb;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", a->save);
    char *slash = strrchr(dir, '/');
    if (slash)
      slash == dir ? (void)(slash[1] = '\0') : (void)(*slash = '\0');
    else
      snprintf(dir, sizeof dir, ".");
    if (!a->save[0] || (stat(a->save, &sb) == 0 && !S_ISREG(sb.st_mode)))
      return cli_usage_error("train", "--save %s: not a regular file path", a->save);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return cli_usage_error("train", "--save %s: directory %s does not exist", a->save, dir);
  }
  if (!(a->w_itc >= 0.0f && a->w_itm >= 0.0f && a->w_cls >= 0.0f))
    return cli_usage_error("train", "--w-itc/--w-itm/--w-cls must be >= 0");
  if (strcmp(a->model, "mlp") != 0) {
    if (a->batch < 2 || (a->batch / a->micro) < 2)
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

double train_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A deterministic permutation of the training set for each epoch, derived
 * from (seed, epoch) only, so a resumed run sees the same batches. */
int64_t train_sample_index(train_sampler *s, int64_t j) {
  const int64_t epoch = j / s->n;
  if (epoch != s->epoch) {
    ampc_rng r;
    ampc_rng_seed(&r, s->seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch);
    for (int64_t i = 0; i < s->n; i++)
      s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
      const int64_t k = (int64_t)(ampc_rng_next(&r) % (uint64_t)(i + 1));
      const int64_t t = s->perm[i];
      s->perm[i] = s->perm[k], s->perm[k] = t;
    }
    s->epoch = epoch;
  }
  return s->perm[j % s->n];
}

/* print a JSON object as one log line (and free it); false on a write error */
cJSON *train_step_line(const ampc_step_info *info, double loss, double ms,
                       const ampc_diag_step *ds) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "event", "step");
  cJSON_AddNumberToObject(o, "step", (double)info->iteration);
  cJSON_AddNumberToObject(o, "optimizer_step", (double)info->step);
  cJSON_AddNumberToObject(o, "loss", loss);
  cJSON_AddNumberToObject(o, "loss_scale", (double)info->loss_scale);
  cJSON_AddBoolToObject(o, "overflow", info->overflow);
  cJSON_AddBoolToObject(o, "skipped", info->skipped);
  cJSON_AddNumberToObject(o, "growth_tracker", info->growth_tracker);
  cJSON_AddNumberToObject(o, "nonfinite_grads", (double)info->nonfinite);
  cJSON_AddNumberToObject(o, "grad_norm", info->grad_norm);
  cJSON_AddNumberToObject(o, "clip_coef", (double)info->clip_coef);
  cJSON_AddNumberToObject(o, "lr", (double)info->lr);
  cJSON_AddNumberToObject(o, "ms", ms);
  char *txt = ampc_diag_step_json(ds);
  cJSON *d = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!d) {
    cJSON_Delete(o);
    return NULL;
  }
  while (d->child) {
    cJSON *it = cJSON_DetachItemViaPointer(d, d->child);
    cJSON_AddItemToObject(o, it->string, it);
  }
  cJSON_Delete(d);
  return o;
}

void train_add_memory(cJSON *summary, const ampc_trainer *T, size_t activations, size_t workspace) {
  cJSON *mem = cJSON_AddObjectToObject(summary, "memory");
  size_t total = activations + workspace;
  for (int r = 0; r < AMPC_ROLE_COUNT; r++)
    total += T->params.bytes[r];
  cJSON_AddNumberToObject(mem, "weights", (double)T->params.bytes[AMPC_ROLE_WEIGHTS]);
  cJSON_AddNumberToObject(mem, "master", (double)T->params.bytes[AMPC_ROLE_MASTER]);
  cJSON_AddNumberToObject(mem, "grads", (double)T->params.bytes[AMPC_ROLE_GRADS]);
  cJSON_AddNumberToObject(
      mem, "moments",
      (double)(T->params.bytes[AMPC_ROLE_MOMENT1] + T->params.bytes[AMPC_ROLE_MOMENT2]));
  cJSON_AddNumberToObject(mem, "activations", (double)activations);
  cJSON_AddNumberToObject(mem, "workspace", (double)workspace);
  cJSON_AddNumberToObject(mem, "total", (double)total);
  cJSON_AddNumberToObject(mem, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
}

int train_check_args(int argc, char **argv) {
  train_args A;
  return train_parse_args(argc, argv, &A);
}

ampc_diag *train_diag_start(const ampc_diag_config *c, const char *resumed_log, int64_t iteration) {
  ampc_diag *d = NULL;
  if (resumed_log && iteration > 0 && ampc_diag_read_log(resumed_log, &d) == AMPC_OK) {
    ampc_diag_truncate(d, iteration + 1);
    return d;
  }
  return ampc_diag_create(c);
}

bool train_add_diagnosis(cJSON *summary, const ampc_diag *d, FILE *say, bool quiet) {
  char *txt = ampc_diag_json(d);
  cJSON *j = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!j)
    return false;
  cJSON_AddItemToObject(summary, "diagnosis", j);
  if (!quiet) {
    ampc_verdict v[AMPC_VERDICT_COUNT];
    const int n = ampc_diag_verdicts(d, v, AMPC_VERDICT_COUNT);
    for (int i = 0; i < n; i++) {
      fprintf(say, "diagnosis: %s", ampc_verdict_name(v[i].kind));
      if (v[i].branch >= 0)
        fprintf(say, " (%s)", ampc_branch_name((ampc_branch)v[i].branch));
      fputc('\n', say);
      for (int k = 0; k < v[i].n_evidence; k++)
        fprintf(say, "  - %s\n", v[i].evidence[k]);
      if (v[i].safeguard[0])
        fprintf(say, "  safeguard: %s\n", v[i].safeguard);
    }
  }
  return true;
}

bool train_log_line(FILE *f, cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!s)
    return false;
  /* flushed per line, so `tail -f` and a killed run keep every finished step */
  const bool ok = fprintf(f, "%s\n", s) > 0 && fflush(f) == 0;
  cJSON_free(s);
  return ok;
}

static void evaluate(ampc_mlp *M, const float *x, const int32_t *y, int64_t n, int64_t in,
                     int64_t batch, double *loss, double *acc) {
  double ls = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < n; r += batch) {
    const int64_t b = n - r < batch ? n - r : batch;
    float l = 0;
    int64_t c = 0;
    if (ampc_mlp_run(M, b, x + r * in, y + r, 0.0f, 1.0f, &l, &c) == AMPC_OK) {
      ls += (double)l * (double)b;
      hits += c;
    }
  }
  *loss = ls / (double)n;
  *acc = (double)hits / (double)n;
}

cJSON *train_config_line(const ampc_trainer *T, const train_args *A, cJSON *run_o, FILE *say) {
  char *cfg = ampc_trainer_config_json(T);
  cJSON *cj = cfg ? cJSON_Parse(cfg) : NULL;
  free(cfg);
  if (!cj || !run_o) {
    cJSON_Delete(cj);
    cJSON_Delete(run_o);
    return NULL;
  }
  cJSON_AddNumberToObject(run_o, "steps", (double)A->steps);
  cJSON_AddNumberToObject(run_o, "batch", (double)A->batch);
  cJSON_AddNumberToObject(run_o, "micro_batches", (double)A->micro);
  cJSON_AddNumberToObject(run_o, "seed", (double)A->seed);
  cJSON_AddNumberToObject(run_o, "threads", (double)ampc_get_num_threads());
  cJSON_AddStringToObject(run_o, "resumed_from", A->resume ? A->resume : "");
  cJSON_AddItemToObject(cj, "run", run_o);
  /* the resolved configuration, printed and logged first */
  const ampc_amp_config *am = &T->amp;
  fprintf(say,
          "ampc train: %s, precision %s: weights %s, master weights %s, optimizer state %s, "
          "loss scale %s",
          A->model, ampc_precision_name(am->precision), ampc_dtype_name(am->lowp),
          am->master_weights ? "on (f32)" : (am->lowp == AMPC_F32 ? "n/a" : "off"),
          ampc_dtype_name(am->state_dtype), ampc_loss_scale_mode_name(am->scaler.mode));
  if (am->scaler.mode != AMPC_LOSS_SCALE_NONE)
    fprintf(say, " (%g)", (double)am->scaler.init_scale);
  fprintf(say, ", accumulate %s; %lld parameters\n",
          am->accumulate == AMPC_ACC_F16 ? "fp16" : "fp32", (long long)T->params.numel);
  char warns[16][256];
  const int nw = ampc_config_lint(am, &T->opt, warns, 16);
  cJSON *wj = cJSON_AddArrayToObject(cj, "warnings");
  for (int k = 0; k < nw && k < 16; k++) {
    fprintf(stderr, "ampc train: warning: %s\n", warns[k]);
    cJSON_AddItemToArray(wj, cJSON_CreateString(warns[k]));
  }
  /* the config line: "event" first, then the resolved settings */
  cJSON *first = cJSON_CreateObject();
  cJSON_AddStringToObject(first, "event", "config");
  for (cJSON *it = cj->child; it; it = it->next)
    cJSON_AddItemToObject(first, it->string, cJSON_Duplicate(it, 1));
  cJSON_Delete(cj);
  return first;
}

static int run_one(int argc, char **argv, cJSON **summary) {
  train_args A;
  int rc = train_parse_args(argc, argv, &A);
  if (rc)
    return rc;
  if (A.threads > 0)
    ampc_set_num_threads(A.threads);
  if (strcmp(A.model, "mlp") != 0)
    return train_run_mm(&A, summary);
  FILE *say = A.json ? stderr : stdout;
  /* data */
  const int64_t in = A.mc.in, ntot = A.ntrain + A.ntest;
  float *x = malloc((size_t)(ntot * in) * sizeof *x);
  int32_t *y = malloc((size_t)ntot * sizeof *y);
  float *bx = malloc((size_t)(A.batch * in) * sizeof *bx);
  int32_t *by = malloc((size_t)A.batch * sizeof *by);
  train_sampler smp = {.n = A.ntrain, .epoch = -1, .seed = A.seed};
  smp.perm = malloc((size_t)A.ntrain * sizeof *smp.perm);
  if (!x || !y || !bx || !by || !smp.perm) {
    free(x), free(y), free(bx), free(by), free(smp.perm);
    return cli_runtime_error("train", "out of memory for %lld samples", (long long)ntot);
  }
  ampc_synth_blobs(ntot, in, A.mc.classes, A.sep, A.seed, x, y);
  const float *xt = x + A.ntrain * in;
  const int32_t *yt = y + A.ntrain;
  /* engine */
  ampc_param_spec specs[AMPC_MLP_NPARAMS];
  ampc_trainer T;
  ampc_mlp M;
  memset(&M, 0, sizeof M);
  FILE *log = NULL;
  ampc_diag *diag = NULL;
  int ret = AMPC_EXIT_OK;
  ampc_status ist = ampc_mlp_specs(&A.mc, specs);
  if (ist == AMPC_OK)
    ist = ampc_trainer_init(&T, &A.amp, &A.opt, specs, AMPC_MLP_NPARAMS, A.seed);
  if (ist != AMPC_OK) {
    ret = ist == AMPC_ERR_NOMEM ? cli_runtime_error("train", "%s", ampc_last_error())
                                : cli_usage_error("train", "%s", ampc_last_error());
    free(x), free(y), free(bx), free(by), free(smp.perm);
    return ret;
  }
  if (ampc_mlp_create(&M, &A.mc, &T, A.batch / A.micro) != AMPC_OK) {
    ret = cli_runtime_error("train", "%s", ampc_last_error());
    goto out;
  }
  if (A.resume && ampc_trainer_load(&T, A.resume) != AMPC_OK) {
    ret = cli_runtime_error("train", "cannot resume: %s", ampc_last_error());
    goto out;
  }
  if (T.iteration > A.steps) {
    ret = cli_usage_error("train", "%s is at step %lld, beyond --steps %lld", A.resume,
                          (long long)T.iteration, (long long)A.steps);
    goto out;
  }
  cJSON *run_o = cJSON_CreateObject();
  cJSON_AddStringToObject(run_o, "model", A.model);
  cJSON_AddNumberToObject(run_o, "in", (double)A.mc.in);
  cJSON_AddNumberToObject(run_o, "hidden", (double)A.mc.hidden);
  cJSON_AddNumberToObject(run_o, "classes", (double)A.mc.classes);
  cJSON_AddNumberToObject(run_o, "train_size", (double)A.ntrain);
  cJSON_AddNumberToObject(run_o, "test_size", (double)A.ntest);
  cJSON *first = train_config_line(&T, &A, run_o, say);
  if (!first) {
    ret = cli_runtime_error("train", "out of memory");
    goto out;
  }
  if (A.log) {
    log = fopen(A.log, A.resume ? "a" : "w");
    if (!log) {
      cJSON_Delete(first);
      ret = cli_runtime_error("train", "cannot open log file %s: %s", A.log, strerror(errno));
      goto out;
    }
    if (!train_log_line(log, first)) {
      ret = cli_runtime_error("train", "cannot write log file %s", A.log);
      goto out;
    }
  } else {
    cJSON_Delete(first);
  }
  const double t_start = train_now_s();
  const int64_t mb = A.batch / A.micro;
  double last_loss = NAN, ev_loss = NAN, ev_acc = NAN;
  ampc_swallow_stats sw_sum = {0};
  const int64_t end = A.stop_at > 0 && A.stop_at < A.steps ? A.stop_at : A.steps;
  ampc_diag_config dcfg;
  ampc_diag_config_from(&dcfg, &T);
  diag = train_diag_start(&dcfg, A.resume ? A.log : NULL, T.iteration);
  if (!diag) {
    ret = cli_runtime_error("train", "out of memory");
    goto out;
  }
  while (T.iteration < end) {
    const double t0 = train_now_s();
    const int64_t it_no = T.iteration; /* 0-based index of this step */
    ampc_trainer_zero_grad(&T);
    double loss = 0;
    const float S = ampc_trainer_loss_scale(&T);
    for (int64_t k = 0; k < A.micro; k++) {
      for (int64_t r = 0; r < mb; r++) {
        const int64_t src = train_sample_index(&smp, it_no * A.batch + k * mb + r);
        memcpy(bx + r * in, x + src * in, (size_t)in * sizeof *bx);
        by[r] = y[src];
      }
      float l = 0;
      if (ampc_mlp_run(&M, mb, bx, by, S, (float)A.micro, &l, NULL) != AMPC_OK) {
        ret = cli_runtime_error("train", "step %lld: %s", (long long)it_no + 1, ampc_last_error());
        goto out;
      }
      loss += (double)l / (double)A.micro;
    }
    ampc_step_info info;
    if (ampc_trainer_step(&T, &info) != AMPC_OK) {
      ret = cli_runtime_error("train", "step %lld: %s", (long long)it_no + 1, ampc_last_error());
      goto out;
    }
    const double ms = (train_now_s() - t0) * 1e3;
    last_loss = loss;
    if (!info.skipped)
      for (int i = 0; i < T.params.count; i++) {
        sw_sum.updated += T.swallow[i].updated, sw_sum.swallowed += T.swallow[i].swallowed;
        sw_sum.would_swallow += T.swallow[i].would_swallow;
      }
    ampc_diag_step ds;
    ampc_diag_step_fill(&ds, &T, &info, loss, NULL);
    if (ampc_diag_add(diag, &ds) != AMPC_OK) {
      ret = cli_runtime_error("train", "%s", ampc_last_error());
      goto out;
    }
    if (log && (info.iteration % A.log_every == 0 || info.iteration == end || info.overflow)) {
      cJSON *o = train_step_line(&info, loss, ms, &ds);
      if (!o || !train_log_line(log, o)) {
        ret = cli_runtime_error("train", "cannot write log file %s", A.log);
        goto out;
      }
    }
    const bool do_eval = A.eval_every > 0 && (info.iteration % A.eval_every == 0);
    if (!A.no_eval && (do_eval || info.iteration == end)) {
      evaluate(&M, xt, yt, A.ntest, in, A.batch / A.micro, &ev_loss, &ev_acc);
      if (!A.quiet)
        fprintf(say, "step %6lld  loss %.4f  scale %-8g skipped %lld  test loss %.4f  acc %.4f\n",
                (long long)info.iteration, loss, (double)info.loss_scale,
                (long long)T.scaler.skip_count, ev_loss, ev_acc);
      if (log) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "eval");
        cJSON_AddNumberToObject(o, "step", (double)info.iteration);
        cJSON *m = cJSON_AddObjectToObject(o, "metrics");
        cJSON_AddNumberToObject(m, "test_loss", ev_loss);
        cJSON_AddNumberToObject(m, "test_accuracy", ev_acc);
        if (!train_log_line(log, o)) {
          ret = cli_runtime_error("train", "cannot write log file %s", A.log);
          goto out;
        }
      }
    }
    if (A.save && A.save_every > 0 && info.iteration % A.save_every == 0 && info.iteration != end) {
      ampc_st_meta meta = {"ampc.model", A.model};
      if (ampc_trainer_save(&T, A.save, &meta, 1) != AMPC_OK) {
        ret = cli_runtime_error("train", "%s", ampc_last_error());
        goto out;
      }
    }
  }
  if (A.save) {
    ampc_st_meta meta = {"ampc.model", A.model};
    if (ampc_trainer_save(&T, A.save, &meta, 1) != AMPC_OK) {
      ret = cli_runtime_error("train", "%s", ampc_last_error());
      goto out;
    }
  }
  {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "summary");
    cJSON_AddStringToObject(o, "precision", ampc_precision_name(T.amp.precision));
    cJSON_AddNumberToObject(o, "steps", (double)T.iteration);
    cJSON_AddNumberToObject(o, "optimizer_steps", (double)T.step);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)T.scaler.skip_count);
    cJSON_AddNumberToObject(o, "overflow_steps", (double)T.scaler.overflow_count);
    cJSON_AddNumberToObject(o, "final_loss_scale", (double)T.scaler.scale);
    cJSON_AddNumberToObject(o, "final_train_loss", last_loss);
    cJSON_AddNumberToObject(o, "test_loss", ev_loss);
    cJSON_AddNumberToObject(o, "test_accuracy", ev_acc);
    cJSON_AddNumberToObject(o, "swallowed_fraction",
                            sw_sum.updated ? (double)sw_sum.swallowed / (double)sw_sum.updated : 0);
    cJSON_AddNumberToObject(o, "wall_s", train_now_s() - t_start);
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
    {
      size_t act = 0, ws = 0;
      (void)ampc_mlp_plan_bytes(&A.mc, A.batch / A.micro, T.amp.precision, &act, &ws);
      train_add_memory(o, &T, act, ws);
    }
    cJSON_AddStringToObject(o, "checkpoint", A.save ? A.save : "");
    if (!train_add_diagnosis(o, diag, say, A.quiet || A.json)) {
      cJSON_Delete(o);
      ret = cli_runtime_error("train", "out of memory");
      goto out;
    }
    if (summary)
      *summary = cJSON_Duplicate(o, 1);
    if (log) {
      cJSON *dup = cJSON_Duplicate(o, 1);
      if (!train_log_line(log, dup)) {
        cJSON_Delete(o);
        ret = cli_runtime_error("train", "cannot write log file %s", A.log);
        goto out;
      }
    }
    if (A.json) {
      ret = cli_print_json("train", o);
    } else {
      if (!A.quiet)
        fprintf(say, "done: %lld steps (%lld skipped), test accuracy %.4f%s%s\n",
                (long long)T.iteration, (long long)T.scaler.skip_count, ev_acc,
                A.save ? ", checkpoint " : "", A.save ? A.save : "");
      cJSON_Delete(o);
    }
  }
out:
  if (log && fclose(log) != 0 && ret == AMPC_EXIT_OK)
    ret = cli_runtime_error("train", "cannot write log file %s", A.log);
  ampc_diag_free(diag);
  ampc_mlp_free(&M);
  ampc_trainer_free(&T);
  free(x), free(y), free(bx), free(by), free(smp.perm);
  return ret;
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

static double metric(const cJSON *sum, const char *split, const char *key) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sum, "metrics"), split),
      key);
  return cJSON_IsNumber(m) ? m->valuedouble : (double)NAN;
}

static double field(const cJSON *sum, const char *key) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(sum, key);
  return cJSON_IsNumber(m) ? m->valuedouble : (double)NAN;
}

/* --precision A,B,...: one run per preset (same seed and data), then a
 * side-by-side table; --log/--save get the preset inserted in their names */
static int run(int argc, char **argv) {
  int pi = -1;
  const char *list = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--precision") && i + 1 < argc)
      pi = i + 1, list = argv[i + 1];
    else if (!strncmp(argv[i], "--precision=", 12))
      pi = i, list = argv[i] + 12;
  }
  if (!list || !strchr(list, ','))
    return run_one(argc, argv, NULL);
  char names[8][32];
  int n = 0;
  for (const char *p = list; *p && n < 8;) {
    const char *c = strchr(p, ',');
    const size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len == 0 || len >= sizeof names[0])
      return cli_usage_error("train", "--precision: bad list '%s'", list);
    memcpy(names[n], p, len);
    names[n++][len] = '\0';
    p = c ? c + 1 : p + len;
  }
  char **av = malloc((size_t)(argc + 1) * sizeof *av);
  cJSON *sums[8] = {NULL};
  char pbuf[64];
  int rc = 0;
  bool json = false;
  for (int k = 0; k < n && !rc && av; k++) {
    char *tagged[2] = {NULL, NULL};
    for (int i = 0; i < argc; i++) {
      av[i] = argv[i];
      if (!strcmp(argv[i], "--json")) { /* one JSON object for the whole list, below */
        json = true;
        av[i] = "--quiet";
      }
    }
    av[argc] = NULL;
    if (!strncmp(argv[pi], "--precision=", 12)) {
      snprintf(pbuf, sizeof pbuf, "--precision=%s", names[k]);
      av[pi] = pbuf;
    } else {
      av[pi] = names[k];
    }
    for (int i = 1; i + 1 < argc; i++) {
      if (!strcmp(argv[i], "--log") || !strcmp(argv[i], "--save") ||
          !strcmp(argv[i], "--checkpoint")) {
        char *t = with_tag(argv[i + 1], names[k]);
        if (!t)
          break;
        free(tagged[argv[i][2] == 'l' ? 0 : 1]);
        tagged[argv[i][2] == 'l' ? 0 : 1] = t;
        av[i + 1] = t;
      }
    }
    rc = run_one(argc, av, &sums[k]);
    free(tagged[0]);
    free(tagged[1]);
  }
  free(av);
  if (!rc && json) {
    cJSON *o = cJSON_CreateObject();
    cJSON *runs = cJSON_AddArrayToObject(o, "runs");
    for (int k = 0; k < n; k++) {
      cJSON_AddItemToArray(runs, sums[k]);
      sums[k] = NULL;
    }
    rc = cli_print_json("train", o);
  } else if (!rc && n > 0 && sums[n - 1]) {
    printf("\nside by side (same seed, data and steps):\n");
    printf("%-11s %9s %8s %11s %11s %11s %11s %9s %9s %10s\n", "precision", "loss", "skipped",
           "new R@1 i2t", "new R@1 t2i", "zs R@1 i2t", "zs R@1 t2i", "group", "ms/step", "act MiB");
    for (int k = 0; k < n; k++) {
      const cJSON *s = sums[k];
      if (!s)
        continue;
      printf("%-11s %9.4f %8.0f %11.4f %11.4f %11.4f %11.4f %9.3f %9.0f %10.1f\n", names[k],
             field(s, "final_train_loss"), field(s, "skipped_steps"),
             metric(s, "new_style", "i2t_r1"), metric(s, "new_style", "t2i_r1"),
             metric(s, "zero_shot", "i2t_r1"), metric(s, "zero_shot", "t2i_r1"),
             metric(s, "new_style", "group_acc"), field(s, "ms_per_step_mean"),
             field(s, "activation_bytes") / 1048576.0);
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
    .summary = "train a model with mixed precision (presets, loss scaling, checkpoints)",
    .usage = k_usage,
    .run = run,
};
