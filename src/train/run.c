/*
 * src/train/run.c: the training run of include/ampc/train.h: the sampler,
 * the loop (micro-batches from a per-epoch permutation, the trainer's step,
 * the telemetry schedule, evaluation and checkpoint cadence, resume) and the
 * metrics log (DESIGN.md section 4: config, step, eval and summary lines,
 * field names as before). The library never prints: progress goes to the
 * caller's callbacks. cJSON writes the JSON.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ampc/cuda_nn.h"
#include "ampc/io.h"
#include "ampc/report.h"
#include "ampc/train.h"
#include "model/backend.h"

/* ---- the sampler ------------------------------------------------------------------ */

ampc_status ampc_sampler_init(ampc_sampler *s, int64_t n, uint64_t seed) {
  if (!s || n < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_sampler_init: bad arguments (n %lld)",
                     (long long)n);
  s->n = n, s->epoch = -1, s->seed = seed;
  s->perm = malloc((size_t)n * sizeof *s->perm);
  if (!s->perm)
    return ampc_fail(AMPC_ERR_NOMEM, "sampler: out of memory for %lld samples", (long long)n);
  return AMPC_OK;
}

void ampc_sampler_free(ampc_sampler *s) {
  if (s) {
    free(s->perm);
    s->perm = NULL;
  }
}

int64_t ampc_sampler_index(ampc_sampler *s, int64_t j) {
  if (!s || !s->perm || j < 0)
    return -1;
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

/* ---- grouping, style picks and augmentation ---------------------------------------- */

typedef struct concept_sample {
  int64_t concept, index;
} concept_sample;
static int cmp_concept_sample(const void *a, const void *b) {
  const concept_sample *x = a, *y = b;
  if (x->concept != y->concept) {
    return x->concept < y->concept ? -1 : 1;
  }
  return (x->index > y->index) - (x->index < y->index);
}
static int cmp_first_member(const void *a, const void *b) {
  const int64_t *x = a, *y = b; /* {first index, group start, count} */
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* train_idx and grp_off from the training samples, grouped by concept id; the
 * groups in the order of their first sample, each group's samples in dataset
 * order (one sample per concept: train_idx is the training split in order) */
static ampc_status group_by_concept(struct ampc_run *R, const ampc_dataset *D);

/* a 64-bit hash of (seed, the sample's position in the run's sequence):
 * which style of a concept is drawn, and the shift (splitmix64's finaliser) */
static uint64_t draw_hash(uint64_t seed, int64_t pos) {
  uint64_t z = seed * 0xD1B54A32D192ED03ull + (uint64_t)pos * 0x9E3779B97F4A7C15ull + 0x5851F42Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* dst = src [h, w, c] uint8 translated by (dx, dy) in [-s, s]^2 (from the bits
 * r), the uncovered border filled with src's top-left pixel (the background:
 * white for the emoji, black for Fashion-MNIST). A translation keeps what an
 * emoji means (a flip or a colour change would not: direction and colour are
 * in the captions). */
static void shift_image(uint8_t *dst, const uint8_t *src, int32_t h, int32_t w, int32_t c, int s,
                        uint64_t r) {
  const int span = 2 * s + 1;
  const int dx = (int)(r % (uint64_t)span) - s,
            dy = (int)((r / (uint64_t)span) % (uint64_t)span) - s;
  for (int32_t y = 0; y < h; y++)
    for (int32_t x = 0; x < w; x++) {
      const int32_t sy = y - dy, sx = x - dx;
      const uint8_t *p =
          sy >= 0 && sy < h && sx >= 0 && sx < w ? src + ((size_t)sy * w + sx) * c : src;
      memcpy(dst + ((size_t)y * w + x) * c, p, (size_t)c);
    }
}

/* ---- the run's state --------------------------------------------------------------- */

struct ampc_run {
  ampc_run_config rc;
  ampc_run_data data;
  ampc_model_desc md;
  ampc_mmodel_specs specs;
  ampc_trainer T;
  ampc_model model;
  bool have_trainer, have_model;
  ampc_cuda_ctx *cuda;      /* --device cuda: GPU 0's context, bound to this thread */
  ampc_cuda_ctx *prev_cuda; /* the context bound before (restored by ampc_run_free) */
  ampc_sampler smp;
  int64_t ntrain, mb; /* training samples; samples per micro-batch (on this rank) */
  int rank, size;     /* data parallelism (0 and 1: one process) */
  ampc_accum accum;   /* how a step's gradient is summed */
  int64_t *train_idx; /* [ntrain]: dataset index of training sample i, grouped by concept */
  /* the sampler draws concepts (groups): group g's samples (its images in each
   * training style) are train_idx[grp_off[g] .. grp_off[g + 1]); one of them is
   * picked per draw, so a batch never holds two images of one concept (which
   * the contrastive loss would take for negatives of each other) */
  int64_t ngroup, *grp_off;
  /* the image-text data's training recipe, recorded in the log and the
   * checkpoint and checked on resume: "held_out=S;shift=N;itm=sampled|hardest" */
  char recipe[128], held_out[64];
  char notes[2][256]; /* the run's own warnings (an option without effect, a resume's switch) */
  int n_notes;
  /* one micro-batch, gathered */
  uint8_t *bimg;
  int32_t *btok, *blab;
  float *bfeat;
  int64_t it_no; /* 0-based index of the iteration being gathered */
  ampc_telemetry *telemetry;
  ampc_diag *diag;
  cJSON *summary;
  bool trained; /* ampc_run_train ran (once per run) */
  bool stalled; /* it stopped on a stall */
  bool saved;   /* this run wrote its checkpoint at least once */
  /* fp8-mixed: the iteration's FP8 cast counts per branch (summed over ranks) */
  uint64_t fp8_values[AMPC_BRANCH_COUNT], fp8_sat[AMPC_BRANCH_COUNT], fp8_flush[AMPC_BRANCH_COUNT];
  double *fp8_amax; /* [3 * sites]: the amax reduction's buffer */
};

static ampc_status group_by_concept(struct ampc_run *R, const ampc_dataset *D) {
  const int64_t n = R->ntrain;
  concept_sample *cs = malloc((size_t)n * sizeof *cs);
  int64_t *grp = malloc((size_t)n * 3 * sizeof *grp);
  R->grp_off = malloc((size_t)(n + 1) * sizeof *R->grp_off);
  if (!cs || !grp || !R->grp_off) {
    free(cs), free(grp);
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  }
  for (int64_t i = 0, k = 0; i < D->n; i++) {
    if (D->split[i] == AMPC_SPLIT_TRAIN) {
      cs[k].concept = D->concept[i];
      cs[k++].index = i;
    }
  }
  qsort(cs, (size_t)n, sizeof *cs, cmp_concept_sample);
  int64_t ng = 0;
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || cs[i].concept != cs[i - 1].concept) {
      grp[3 * ng] = cs[i].index, grp[3 * ng + 1] = i, grp[3 * ng + 2] = 0;
      ng++;
    }
  for (int64_t g = 0; g < ng; g++)
    grp[3 * g + 2] = (g + 1 < ng ? grp[3 * (g + 1) + 1] : n) - grp[3 * g + 1];
  qsort(grp, (size_t)ng, 3 * sizeof *grp, cmp_first_member);
  int64_t k = 0;
  for (int64_t g = 0; g < ng; g++) {
    R->grp_off[g] = k;
    for (int64_t m = 0; m < grp[3 * g + 2]; m++)
      R->train_idx[k++] = cs[grp[3 * g + 1] + m].index;
  }
  R->grp_off[ng] = k;
  R->ngroup = ng;
  free(cs), free(grp);
  return AMPC_OK;
}

static ampc_status fault_hook(void *user, void *g, ampc_dtype dt, int64_t n);

/* the model's view of the communicator (global negatives) */
static ampc_status group_allgather(void *user, const void *x, size_t bytes, void *y) {
  const ampc_comm *c = user;
  return c->allgather(c->user, x, bytes, y);
}
static ampc_status group_sum(void *user, float *x, int64_t n) {
  const ampc_comm *c = user;
  return c->sum_f32_ordered(c->user, x, n);
}

ampc_run_config ampc_run_config_defaults(void) {
  return (ampc_run_config){.steps = 300,
                           .batch = 64,
                           .micro_batches = 1,
                           .eval_every = 100,
                           .eval = true,
                           .log_every = 1,
                           .telemetry_every = 10,
                           .seed = 1};
}

void ampc_run_free(ampc_run *R) {
  if (!R)
    return;
  if (R->have_model)
    ampc_model_free(&R->model);
  if (R->have_trainer)
    ampc_trainer_free(&R->T);
  /* by the backend that made it, with a device's context still bound */
  const ampc_backend *sbe = ampc_device_backend(R->rc.device);
  if (sbe && R->accum.stage)
    sbe->release(R->accum.stage);
  if (R->cuda) { /* after everything it holds */
    ampc_cuda_bind(R->prev_cuda);
    ampc_cuda_destroy(R->cuda);
  }
  ampc_mmodel_specs_free(&R->specs);
  ampc_sampler_free(&R->smp);
  ampc_telemetry_end(R->telemetry);
  free(R->telemetry);
  ampc_diag_free(R->diag);
  free(R->fp8_amax);
  cJSON_Delete(R->summary);
  free(R->train_idx), free(R->grp_off), free(R->bimg), free(R->btok), free(R->blab), free(R->bfeat);
  free(R->accum.host);
  free(R);
}

/* the checks of the data against the model, in the order the CLI reported them */
static ampc_status check_data(ampc_run *R) {
  const ampc_run_data *d = &R->data;
  const ampc_run_config *rc = &R->rc;
  if (R->md.kind == AMPC_MODEL_MLP) {
    if (!d->x_train || !d->y_train || d->n_train < 1 || d->dim != R->md.mlp.in)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "the mlp model needs dense training features of dimension %lld",
                       (long long)R->md.mlp.in);
    R->ntrain = d->n_train;
    if (rc->batch > R->ntrain)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "batch %lld is larger than the training set (%lld samples)",
                       (long long)rc->batch, (long long)R->ntrain);
    return AMPC_OK;
  }
  const ampc_dataset *D = d->dataset;
  const char *dn = d->name ? d->name : "the dataset";
  if (!D)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "model %s needs a dataset", R->md.name);
  for (int64_t i = 0; i < D->n; i++)
    R->ntrain += D->split[i] == AMPC_SPLIT_TRAIN;
  if (rc->batch > R->ntrain)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "batch %lld is larger than the training split (%lld samples)",
                     (long long)rc->batch, (long long)R->ntrain);
  const ampc_mmodel_config *mc = &R->md.mm;
  AMPC_TRY(ampc_mmodel_check_data(mc, D, dn));
  if (!mc->image_only && rc->eval) { /* something to evaluate on, known now, not at the end */
    int64_t ns = 0, zs = 0;
    for (int64_t i = 0; i < D->n; i++)
      ns += D->split[i] == AMPC_SPLIT_NEW_STYLE, zs += D->split[i] == AMPC_SPLIT_ZERO_SHOT;
    if (ns < 2 && zs < 2)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "%s has neither a held-out style (new_style split) nor held-out concepts "
                       "(zero_shot split) with 2 samples to evaluate on (--no-eval trains "
                       "without evaluating)",
                       dn);
  }
  return AMPC_OK;
}

ampc_status ampc_check_out_path(const char *what, const char *path, bool regular) {
  if (!path)
    return AMPC_OK;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    slash == dir ? (void)(slash[1] = '\0') : (void)(*slash = '\0');
  else
    snprintf(dir, sizeof dir, ".");
  struct stat sb;
  if (!path[0])
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: an empty path", what);
  if (stat(path, &sb) == 0 && (regular ? !S_ISREG(sb.st_mode) : S_ISDIR(sb.st_mode)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s %s: not a %s path", what, path,
                     regular ? "regular file" : "file");
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s %s: directory %s does not exist", what, path, dir);
  return AMPC_OK;
}

static ampc_status check_config(const ampc_run_config *rc) {
  if (!(rc->loss_multiplier >= 0.0f && rc->loss_multiplier <= 1.0f) ||
      (rc->loss_multiplier > 0.0f && rc->loss_multiplier < 0x1p-40f))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--loss-multiplier %g: must be in [2^-40, 1] (0: none)",
                     (double)rc->loss_multiplier);
  if (rc->steps < 1 || rc->stop_at < 0 || rc->batch < 1 || rc->micro_batches < 1 ||
      rc->eval_every < 0 || rc->log_every < 1 || rc->save_every < 0 || rc->telemetry_every < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_run_create: bad run settings (steps %lld, batch %lld, micro-batches "
                     "%lld, log every %lld)",
                     (long long)rc->steps, (long long)rc->batch, (long long)rc->micro_batches,
                     (long long)rc->log_every);
  /* only rank 0 writes the checkpoint, so only its file system must have
   * the directory */
  const ampc_status st = rc->comm && rc->comm->rank != 0
                             ? AMPC_OK
                             : ampc_check_out_path("save_path", rc->save_path, true);
  if (st != AMPC_OK)
    return st;
  if ((rc->on_stall != AMPC_STALL_STOP && rc->on_stall != AMPC_STALL_WARN) || rc->stall_steps < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_create: bad stall policy (%d, %lld steps)",
                     (int)rc->on_stall, (long long)rc->stall_steps);
  if (rc->reduce != AMPC_REDUCE_F32 && rc->reduce != AMPC_REDUCE_WORKING)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_create: bad gradient reduction %d",
                     (int)rc->reduce);
  const int size = rc->comm ? rc->comm->size : 1;
  if (rc->comm &&
      (size < 1 || rc->comm->rank < 0 || rc->comm->rank >= size || !rc->comm->sum_f32_ordered ||
       !rc->comm->sum_working || !rc->comm->sum_u64 || !rc->comm->max_f64 || !rc->comm->check_same))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_create: incomplete communicator");
  if (size > 1 && rc->batch % size != 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "batch %lld does not divide evenly over %d ranks (the batch is the global "
                     "batch: pick a multiple of %d)",
                     (long long)rc->batch, size, size);
  if ((rc->batch / size) % rc->micro_batches != 0)
    return size > 1 ? ampc_fail(AMPC_ERR_INVALID_ARG,
                                "the shard of %lld samples per rank (batch %lld over %d ranks) "
                                "is not a multiple of micro_batches %lld",
                                (long long)(rc->batch / size), (long long)rc->batch, size,
                                (long long)rc->micro_batches)
                    : ampc_fail(AMPC_ERR_INVALID_ARG,
                                "batch %lld is not a multiple of micro_batches %lld",
                                (long long)rc->batch, (long long)rc->micro_batches);
  return AMPC_OK;
}

/* --attention-cast as in effect: a multimodal model asking for it in a
 * preset with 16-bit activations (the log's config line and the checkpoint
 * record this) */
static bool attn_cast_in_effect(const ampc_model_desc *md, ampc_precision p) {
  return md->kind == AMPC_MODEL_MM && md->mm.attn_cast && ampc_precision_lowp(p) != AMPC_F32;
}

ampc_status ampc_run_create(ampc_run **out, const ampc_run_config *rc, const ampc_amp_config *amp,
                            const ampc_optim_config *opt, const ampc_model_desc *md,
                            const ampc_run_data *data) {
  if (!out || !rc || !amp || !opt || !md || !data)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_create: NULL argument");
  *out = NULL;
  ampc_status st = check_config(rc);
  if (st != AMPC_OK)
    return st;
  /* no device: said before the trainer's state is allocated (3 GB of host
   * memory for mm-large) */
  if (rc->device != AMPC_DEVICE_CPU && md->kind != AMPC_MODEL_MM) /* as ampc_model_create_on */
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "--device: model %s is not on a device yet (the multimodal models and "
                     "ViTs are)",
                     md->name);
  if (rc->device == AMPC_DEVICE_CUDA && ampc_cuda_device_count() == 0)
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "--device cuda: no CUDA device: %s",
                     ampc_cuda_unavailable_reason());
  ampc_run *R = calloc(1, sizeof *R);
  if (!R)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_run_create: out of memory");
  R->rc = *rc, R->data = *data, R->md = *md;
  R->rank = rc->comm ? rc->comm->rank : 0;
  R->size = rc->comm ? rc->comm->size : 1;
  R->mb = rc->batch / R->size / rc->micro_batches;
  R->accum =
      (ampc_accum){.micro_batches = rc->micro_batches,
                   .comm = R->size > 1 ? rc->comm : NULL,
                   .reduce = rc->reduce,
                   .hook_user = R,
                   .loss_multiplier = rc->loss_multiplier > 0.0f ? rc->loss_multiplier : 1.0f,
                   .per_loss = amp->scaler.mode == AMPC_LOSS_SCALE_PER_LOSS};
  /* the fault injection writes the gradients from the host: not GPU memory */
  if ((getenv("AMPC_FAULT_FAIL") || getenv("AMPC_FAULT_NAN_GRAD")) &&
      rc->device != AMPC_DEVICE_CUDA)
    R->accum.before_reduce = fault_hook;
#define FAIL(s)                                                                                    \
  do {                                                                                             \
    st = (s);                                                                                      \
    goto fail;                                                                                     \
  } while (0)
  if ((st = check_data(R)) != AMPC_OK)
    goto fail;
  if (md->kind == AMPC_MODEL_MM && R->mb < (md->mm.image_only ? 1 : 2))
    FAIL(ampc_fail(AMPC_ERR_INVALID_ARG,
                   "batch %lld in %lld micro-batches on %d ranks: the contrastive loss needs at "
                   "least 2 samples per micro-batch",
                   (long long)rc->batch, (long long)rc->micro_batches, R->size));
  /* the training samples and one micro-batch's buffers */
  R->train_idx = malloc((size_t)R->ntrain * sizeof *R->train_idx);
  R->blab = malloc((size_t)R->mb * sizeof *R->blab);
  if (!R->train_idx || !R->blab)
    FAIL(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
  const ampc_dataset *D = data->dataset;
  if (md->kind == AMPC_MODEL_MM) {
    if ((st = group_by_concept(R, D)) != AMPC_OK)
      goto fail;
    const int64_t img_sz = (int64_t)D->height * D->width * D->channels;
    R->bimg = malloc((size_t)(R->mb * img_sz));
    if (!R->bimg)
      FAIL(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
    if (D->tokens && D->seq_len > 0) {
      R->btok = malloc((size_t)(R->mb * D->seq_len) * sizeof *R->btok);
      if (!R->btok)
        FAIL(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
    }
  } else {
    for (int64_t i = 0; i < R->ntrain; i++)
      R->train_idx[i] = i;
    R->ngroup = R->ntrain;
    R->grp_off = malloc((size_t)(R->ntrain + 1) * sizeof *R->grp_off);
    if (!R->grp_off)
      FAIL(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
    for (int64_t i = 0; i <= R->ntrain; i++)
      R->grp_off[i] = i;
    R->bfeat = malloc((size_t)(R->mb * data->dim) * sizeof *R->bfeat);
    if (!R->bfeat)
      FAIL(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
  }
  if (rc->batch > R->ngroup)
    FAIL(ampc_fail(AMPC_ERR_INVALID_ARG,
                   "batch %lld is larger than the number of training concepts (%lld)",
                   (long long)rc->batch, (long long)R->ngroup));
  if (md->kind == AMPC_MODEL_MM) {
    const char *h = "none";
    for (int64_t i = 0; i < D->n; i++)
      if (D->split[i] == AMPC_SPLIT_NEW_STYLE) {
        const char *nm = ampc_dataset_style_name(D, D->style[i]);
        h = nm ? nm : "unnamed";
        break;
      }
    snprintf(R->held_out, sizeof R->held_out, "%s", h);
    snprintf(R->recipe, sizeof R->recipe, "held_out=%s;shift=%d;itm=%s", R->held_out,
             rc->augment_shift,
             !rc->itm_sample_negatives  ? "hardest"
             : rc->itm_random_negatives ? "random"
                                        : "sampled");
  }
  if ((st = ampc_sampler_init(&R->smp, R->ngroup, rc->seed)) != AMPC_OK)
    goto fail;
  /* the trainer, the model, the resumed state */
  if ((st = ampc_model_specs(md, &R->specs)) != AMPC_OK)
    goto fail;
  /* the loss multiplier's companions: eps and the clipping norm scaled with
   * the gradients, so that an FP32 run's updates do not change */
  if (R->accum.loss_multiplier != 1.0f && opt->kind != AMPC_OPTIM_ADAMW)
    FAIL(ampc_fail(AMPC_ERR_INVALID_ARG,
                   "--loss-multiplier needs AdamW: its update is invariant to the gradients' "
                   "scale once eps is scaled too; SGD's steps would shrink with the multiplier"));
  ampc_optim_config opt_l = *opt;
  opt_l.eps = opt->eps * R->accum.loss_multiplier;
  opt_l.clip_norm = opt->clip_norm * R->accum.loss_multiplier;
  if ((st = ampc_trainer_init(&R->T, amp, &opt_l, R->specs.specs, R->specs.n, rc->seed)) != AMPC_OK)
    goto fail;
  R->have_trainer = true;
  const size_t stage = ampc_accum_stage_bytes(&R->accum, R->T.params.total);
  if (rc->device != AMPC_DEVICE_CPU) {    /* the device and the trainer's state on it */
    if (rc->device == AMPC_DEVICE_CUDA) { /* a device is there (checked above) */
      /* rank r on GPU r mod the node's count (one process per GPU on a node) */
      if ((st = ampc_cuda_create(R->rank % ampc_cuda_device_count(), 0, &R->cuda)) != AMPC_OK)
        goto fail;
      R->prev_cuda = ampc_cuda_bind(R->cuda);
    }
    if ((st = ampc_trainer_to_device(&R->T, rc->device)) != AMPC_OK)
      goto fail;
  }
  if (stage) { /* the FP32 staging where the gradients are (host memory on the CPU) */
    void *p = NULL;
    if ((st = ampc_device_backend(rc->device)->alloc(&p, stage)) != AMPC_OK)
      goto fail;
    R->accum.stage = p;
  }
  /* several ranks on a device: the ranks' sum goes through host memory (the
   * communicator is MPI on host buffers, not NCCL) */
  const size_t hostb = rc->device != AMPC_DEVICE_CPU
                           ? ampc_accum_host_bytes(&R->accum, R->T.params.total, R->T.params.wdt)
                           : 0;
  if (hostb && !(R->accum.host = malloc(hostb)))
    FAIL(ampc_fail(AMPC_ERR_NOMEM, "cannot allocate the %zu-byte host buffer of the ranks' sum",
                   hostb));
  if ((st = ampc_model_create_on(&R->model, md, ampc_trainer_params(&R->T), amp, R->mb,
                                 rc->device)) != AMPC_OK)
    goto fail;
  R->have_model = true;
  if (R->model.fp8 && !(R->fp8_amax = calloc((size_t)R->model.fp8->n * 3, sizeof(double))))
    FAIL(ampc_fail(AMPC_ERR_NOMEM, "out of memory for the FP8 amax reduction"));
  if (rc->global_negatives && md->kind != AMPC_MODEL_MM)
    FAIL(ampc_fail(AMPC_ERR_INVALID_ARG, "global negatives: model %s has no contrastive loss",
                   md->name));
  if (rc->global_negatives && md->kind == AMPC_MODEL_MM && md->mm.image_only)
    FAIL(ampc_fail(AMPC_ERR_INVALID_ARG,
                   "global negatives: model %s has no contrastive loss (image-only)", md->mm.name));
  if (rc->global_negatives && R->size > 1) {
    if (!rc->comm->allgather)
      FAIL(ampc_fail(AMPC_ERR_INVALID_ARG, "global negatives: the communicator has no allgather"));
    const ampc_model_group g = {(void *)rc->comm, R->rank, R->size, group_allgather, group_sum};
    if ((st = ampc_model_set_group(&R->model, &g)) != AMPC_OK)
      goto fail;
  }
  if (md->kind == AMPC_MODEL_MM && md->mm.attn_cast && !attn_cast_in_effect(md, amp->precision))
    snprintf(R->notes[R->n_notes++], sizeof R->notes[0],
             "--attention-cast on has no effect under %s (its attention products are FP32 already)",
             ampc_precision_name(amp->precision));
  if (rc->resume_path) { /* a checkpoint of another model says so, not "tensor missing" */
    ampc_safetensors *f = NULL;
    if (ampc_safetensors_read(rc->resume_path, &f) == AMPC_OK) {
      const char *was = ampc_safetensors_meta(f, "ampc.model");
      const char *now = md->kind == AMPC_MODEL_MM ? md->mm.name : md->name;
      if (was && strcmp(was, now) != 0) {
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "cannot resume: %s is a checkpoint of model %s, this run's model is %s",
                       rc->resume_path, was, now);
        ampc_safetensors_free(f);
        goto fail;
      }
      /* Adam's moments are in units of the multiplied gradients: the
       * multiplier must stay what it was (absent: 1) */
      const char *lm = ampc_safetensors_meta(f, "ampc.loss_multiplier");
      const float was_lm = lm ? (float)strtod(lm, NULL) : 1.0f;
      if (was_lm != R->accum.loss_multiplier) {
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "cannot resume: %s was trained with --loss-multiplier %g, this run has "
                       "%g (the optimizer state is in units of the multiplied gradients)",
                       rc->resume_path, (double)was_lm, (double)R->accum.loss_multiplier);
        ampc_safetensors_free(f);
        goto fail;
      }
      /* the loss terms' heads: a checkpoint with the MLM head resumed without
       * the term (or the reverse) would drop or invent a trained tensor */
      const char *mcs =
          md->kind == AMPC_MODEL_MM ? ampc_safetensors_meta(f, "ampc.model_config") : NULL;
      cJSON *mroot = mcs ? cJSON_Parse(mcs) : NULL;
      const cJSON *mcj = mroot ? cJSON_GetObjectItemCaseSensitive(mroot, "w_mlm") : NULL;
      const double was_mlm = cJSON_IsNumber(mcj) ? mcj->valuedouble : 0.0;
      /* absent: a checkpoint from before the cast was recorded (not checked) */
      const cJSON *acj = cJSON_GetObjectItemCaseSensitive(mroot, "attention_cast");
      const bool has_cast = acj != NULL, was_cast = cJSON_IsTrue(acj),
                 bad_cast = acj && !cJSON_IsBool(acj);
      cJSON_Delete(mroot);
      if (bad_cast) {
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "cannot resume: %s: bad attention_cast in ampc.model_config (not true or "
                       "false)",
                       rc->resume_path);
        ampc_safetensors_free(f);
        goto fail;
      }
      if (md->kind == AMPC_MODEL_MM && !md->mm.image_only &&
          (was_mlm > 0.0) != (md->mm.w_mlm > 0.0f)) {
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "cannot resume: %s was trained %s masked caption modelling (--w-mlm %g; "
                       "its head heads.mlm), this run has --w-mlm %g",
                       rc->resume_path, was_mlm > 0.0 ? "with" : "without", was_mlm,
                       (double)md->mm.w_mlm);
        ampc_safetensors_free(f);
        goto fail;
      }
      /* --attention-cast may change on resume (as --precision may: the
       * weights and optimizer state mean the same), but the forward pass's
       * rounding changes with it: say so */
      const bool now_cast = attn_cast_in_effect(md, amp->precision);
      if (md->kind == AMPC_MODEL_MM && has_cast && was_cast != now_cast)
        snprintf(R->notes[R->n_notes++], sizeof R->notes[0],
                 "%s was trained with the attention cast %s, this run has it %s%s: attention "
                 "products round differently from here on",
                 rc->resume_path, was_cast ? "on" : "off", now_cast ? "on" : "off",
                 md->mm.attn_cast && !now_cast ? " (under 32-true)" : "");
      /* the data recipe (held-out style, shifts, negatives) must stay what
       * it was: a resume would otherwise train on another split or sampler
       * (absent: a checkpoint from before it was recorded, not checked) */
      const char *rec = ampc_safetensors_meta(f, "ampc.data_recipe");
      if (rec && R->recipe[0] && strcmp(rec, R->recipe) != 0) {
        st = ampc_fail(AMPC_ERR_FORMAT,
                       "cannot resume: %s was trained with %s, this run has %s (give the same "
                       "--hold-out-style, --augment-shift and --itm-negatives)",
                       rc->resume_path, rec, R->recipe);
        ampc_safetensors_free(f);
        goto fail;
      }
      ampc_safetensors_free(f);
    }
  }
  if (rc->resume_path && (st = ampc_trainer_load(&R->T, rc->resume_path)) != AMPC_OK)
    FAIL(ampc_fail(st, "cannot resume: %s", ampc_last_error()));
  if (rc->resume_path && R->model.fp8 &&
      (st = ampc_fp8_state_load(R->model.fp8, rc->resume_path, NULL)) != AMPC_OK)
    FAIL(ampc_fail(st, "cannot resume: %s", ampc_last_error()));
  if (R->T.iteration > rc->steps)
    FAIL(ampc_fail(AMPC_ERR_INVALID_ARG, "%s is at step %lld, beyond steps = %lld", rc->resume_path,
                   (long long)R->T.iteration, (long long)rc->steps));
  R->telemetry = calloc(1, sizeof *R->telemetry);
  if (!R->telemetry)
    FAIL(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
  if (R->model.ops->set_telemetry)
    R->model.ops->set_telemetry(&R->model, R->telemetry);
#undef FAIL
  *out = R;
  return AMPC_OK;
fail:
  ampc_run_free(R);
  return st;
}

bool ampc_run_stalled(const ampc_run *R) { return R && R->stalled; }
ampc_trainer *ampc_run_trainer(ampc_run *R) { return R ? &R->T : NULL; }
ampc_model *ampc_run_model(ampc_run *R) { return R ? &R->model : NULL; }
const ampc_diag *ampc_run_diag(const ampc_run *R) { return R ? R->diag : NULL; }
const ampc_model_desc *ampc_run_model_desc(const ampc_run *R) { return R ? &R->md : NULL; }
const ampc_run_config *ampc_run_get_config(const ampc_run *R) { return R ? &R->rc : NULL; }

int ampc_run_warnings(const ampc_run *R, char (*msgs)[256], int max) {
  if (!R)
    return 0;
  int n = ampc_config_lint(&R->T.amp, &R->T.opt, msgs, max);
  for (int k = 0; k < R->n_notes; k++, n++) /* counted past max, as the lint's */
    if (msgs && n < max)
      snprintf(msgs[n], sizeof msgs[0], "%s", R->notes[k]);
  return n;
}

/* ---- what the diagnosis sees of a step (src/diag/ knows no trainer) ---------------- */

void ampc_diag_config_from(ampc_diag_config *c, const ampc_trainer *T) {
  memset(c, 0, sizeof *c);
  snprintf(c->precision, sizeof c->precision, "%s", ampc_precision_name(T->amp.precision));
  c->lowp = T->amp.lowp;
  c->master_weights = T->amp.master_weights;
  c->loss_scale_mode = (int)T->amp.scaler.mode;
  c->min_scale = (double)T->amp.scaler.min_scale;
  c->accumulate = T->amp.accumulate;
  c->stochastic_update = T->amp.weight_update != AMPC_UPDATE_NEAREST;
}

void ampc_diag_step_fill(ampc_diag_step *s, const ampc_trainer *T, const ampc_step_info *info,
                         double loss, const ampc_telemetry *tm) {
  memset(s, 0, sizeof *s);
  s->step = info->iteration;
  s->loss = loss;
  s->loss_scale = (double)info->loss_scale;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    s->branch_scale[b] = (double)info->branch_scale[b];
  s->overflow = info->overflow, s->skipped = info->skipped;
  s->nonfinite_grads = info->nonfinite;
  s->nonfinite_weights = info->nonfinite_weights;
  s->first_nonfinite_branch = s->first_nonfinite_phase = -1;
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    s->br[b].acc_err = -1.0;
  for (int i = 0; i < T->params.count; i++) {
    const int b = (int)T->params.p[i].branch;
    if (b < 0 || b >= AMPC_BRANCH_COUNT)
      continue;
    s->br[b].parameters += T->params.p[i].numel;
    if (!info->skipped && T->telemetry) {
      s->br[b].updated += T->swallow[i].updated;
      s->br[b].swallowed += T->swallow[i].swallowed;
      s->br[b].would_swallow += T->swallow[i].would_swallow;
    }
  }
  if (tm) {
    s->telemetry = true;
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      s->br[b].grad = tm->s[AMPC_TM_GRAD][b];
      s->br[b].act = tm->s[AMPC_TM_ACT][b];
      s->br[b].acc_err = tm->acc_err[b];
      s->br[b].acc_k = tm->acc_k[b];
      snprintf(s->br[b].acc_tensor, sizeof s->br[b].acc_tensor, "%s", tm->acc_tensor[b]);
    }
    snprintf(s->first_nonfinite, sizeof s->first_nonfinite, "%s", tm->first_nonfinite);
    s->first_nonfinite_branch = tm->first_nonfinite_branch;
    s->first_nonfinite_phase = tm->first_nonfinite_phase;
  }
}

/* ---- the log's lines ------------------------------------------------------------------ */

static cJSON *parse_owned(char *txt) {
  cJSON *o = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  return o;
}

static cJSON *config_object(const ampc_run *R) {
  cJSON *cj = parse_owned(ampc_trainer_config_json(&R->T));
  cJSON *run_o = cJSON_CreateObject();
  if (!cj || !run_o) {
    cJSON_Delete(cj);
    cJSON_Delete(run_o);
    return NULL;
  }
  const ampc_run_config *rc = &R->rc;
  if (R->md.kind == AMPC_MODEL_MLP) {
    cJSON_AddStringToObject(run_o, "model", R->md.name);
    cJSON_AddNumberToObject(run_o, "in", (double)R->md.mlp.in);
    cJSON_AddNumberToObject(run_o, "hidden", (double)R->md.mlp.hidden);
    cJSON_AddNumberToObject(run_o, "classes", (double)R->md.mlp.classes);
    cJSON_AddNumberToObject(run_o, "train_size", (double)R->data.n_train);
    cJSON_AddNumberToObject(run_o, "test_size", (double)R->data.n_test);
  } else {
    const ampc_dataset *D = R->data.dataset;
    const ampc_mmodel_config *mc = &R->md.mm;
    cJSON_AddStringToObject(run_o, "model", mc->name);
    cJSON_AddStringToObject(run_o, "data", R->data.name ? R->data.name : "");
    cJSON_AddNumberToObject(run_o, "train_samples", (double)R->ntrain);
    cJSON_AddNumberToObject(run_o, "train_concepts", (double)R->ngroup);
    cJSON_AddStringToObject(run_o, "held_out_style", R->held_out);
    cJSON_AddNumberToObject(run_o, "augment_shift", (double)R->rc.augment_shift);
    cJSON_AddStringToObject(run_o, "itm_negatives",
                            !R->rc.itm_sample_negatives  ? "hardest"
                            : R->rc.itm_random_negatives ? "random"
                                                         : "sampled");
    cJSON_AddNumberToObject(run_o, "vocab", (double)D->vocab);
    cJSON_AddNumberToObject(run_o, "seq_len", (double)D->seq_len);
    cJSON_AddNumberToObject(run_o, "classes", (double)D->n_classes);
    cJSON_AddNumberToObject(run_o, "w_itc", (double)mc->w_itc);
    cJSON_AddNumberToObject(run_o, "w_itm", (double)mc->w_itm);
    cJSON_AddNumberToObject(run_o, "w_cls", (double)mc->w_cls);
    if (mc->w_mlm > 0.0f) { /* masked caption modelling (absent: off, as in older logs) */
      cJSON_AddNumberToObject(run_o, "w_mlm", (double)mc->w_mlm);
      cJSON_AddNumberToObject(run_o, "mlm_prob", (double)mc->mlm_prob);
    }
    cJSON_AddNumberToObject(run_o, "activation_bytes",
                            (double)(R->model.activation_bytes + R->model.workspace_bytes));
    cJSON_AddBoolToObject(run_o, "recompute", !mc->no_recompute);
    /* in effect: on, under 16-bit activations (absent in older logs: off) */
    cJSON_AddBoolToObject(run_o, "attention_cast", attn_cast_in_effect(&R->md, R->T.amp.precision));
  }
  cJSON_AddNumberToObject(run_o, "steps", (double)rc->steps);
  cJSON_AddNumberToObject(run_o, "batch", (double)rc->batch);
  cJSON_AddNumberToObject(run_o, "micro_batches", (double)rc->micro_batches);
  cJSON_AddNumberToObject(run_o, "loss_multiplier", (double)R->accum.loss_multiplier);
  cJSON_AddNumberToObject(run_o, "seed", (double)rc->seed);
  cJSON_AddNumberToObject(run_o, "threads", (double)ampc_get_num_threads());
  cJSON_AddStringToObject(run_o, "resumed_from", rc->resume_path ? rc->resume_path : "");
  /* data parallelism: the ranks, how gradients are summed, and which
   * samples the contrastive loss contrasts (each rank's own shard) */
  cJSON *dp = cJSON_AddObjectToObject(run_o, "data_parallel");
  cJSON_AddNumberToObject(dp, "ranks", (double)R->size);
  cJSON_AddStringToObject(dp, "reduce", rc->reduce == AMPC_REDUCE_F32 ? "f32" : "working");
  cJSON_AddNumberToObject(dp, "shard", (double)(rc->batch / R->size));
  /* what the contrastive loss contrasts: each rank's shard, or the global
   * batch (the hard negatives of the matching head stay in the shard) */
  cJSON_AddStringToObject(dp, "negatives", rc->global_negatives ? "global" : "shard");
  cJSON_AddStringToObject(run_o, "device",
                          rc->device == AMPC_DEVICE_CUDA        ? "cuda"
                          : rc->device == AMPC_DEVICE_CPU_SPLIT ? "cpu-split"
                                                                : "cpu");
  if (rc->device == AMPC_DEVICE_CUDA) { /* what decides the device's bits beyond the preset */
    cJSON *ck = cJSON_AddObjectToObject(run_o, "cuda");
    cJSON_AddBoolToObject(ck, "typed_kernels", ampc_cuda_typed_kernels());
    /* tuned GEMMs pick their algorithms by timing: not bit-reproducible */
    cJSON_AddBoolToObject(ck, "gemm_tuning", ampc_cuda_gemm_tuning());
  }
  cJSON_AddItemToObject(cj, "run", run_o);
  char warns[16][256];
  const int nw = ampc_run_warnings(R, warns, 16);
  cJSON *wj = cJSON_AddArrayToObject(cj, "warnings");
  for (int k = 0; k < nw && k < 16; k++)
    cJSON_AddItemToArray(wj, cJSON_CreateString(warns[k]));
  /* "event" first, then the resolved settings */
  cJSON *first = cJSON_CreateObject();
  cJSON_AddStringToObject(first, "event", "config");
  for (cJSON *it = cj->child; it; it = it->next)
    cJSON_AddItemToObject(first, it->string, cJSON_Duplicate(it, 1));
  cJSON_Delete(cj);
  return first;
}

char *ampc_run_config_json(const ampc_run *R) {
  cJSON *o = R ? config_object(R) : NULL;
  char *s = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return s;
}

/* one JSON object as one log line (and free it); flushed per line, so `tail -f`
 * and a killed run keep every finished step */
static ampc_status log_line(FILE *f, const char *path, cJSON *o) {
  char *s = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  const bool ok = s && fprintf(f, "%s\n", s) > 0 && fflush(f) == 0;
  cJSON_free(s);
  return ok ? AMPC_OK : ampc_fail(AMPC_ERR_IO, "cannot write log file %s", path);
}

static cJSON *step_object(const ampc_step_info *info, const ampc_losses *L, double ms,
                          const ampc_diag_step *ds, ampc_loss_scale_mode mode,
                          const ampc_model *m) {
  const bool per_branch = mode == AMPC_LOSS_SCALE_PER_BRANCH;
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "event", "step");
  cJSON_AddNumberToObject(o, "step", (double)info->iteration);
  cJSON_AddNumberToObject(o, "optimizer_step", (double)info->step);
  cJSON_AddNumberToObject(o, "loss", (double)L->total);
  cJSON_AddNumberToObject(o, "loss_scale", (double)info->loss_scale);
  if (per_branch) { /* --loss-scale per-branch: each branch's scale and overflow */
    cJSON *bs = cJSON_AddObjectToObject(o, "branch_scales");
    cJSON *bo = cJSON_AddArrayToObject(o, "overflow_branches");
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      if (ds->br[b].parameters == 0) /* a branch the model does not have */
        continue;
      cJSON_AddNumberToObject(bs, ampc_branch_name((ampc_branch)b), (double)info->branch_scale[b]);
      if (info->branch_nonfinite & (1u << b))
        cJSON_AddItemToArray(bo, cJSON_CreateString(ampc_branch_name((ampc_branch)b)));
    }
  }
  if (mode == AMPC_LOSS_SCALE_PER_LOSS) { /* each loss term's scale and overflow */
    cJSON *ts = cJSON_AddObjectToObject(o, "loss_scales");
    cJSON *to = cJSON_AddArrayToObject(o, "overflow_terms");
    for (int t = 0; t < m->n_terms && t < AMPC_BRANCH_COUNT; t++) {
      if (!m->term_on[t])
        continue;
      cJSON_AddNumberToObject(ts, m->term_name[t], (double)info->branch_scale[t]);
      if (info->branch_nonfinite & (1u << t))
        cJSON_AddItemToArray(to, cJSON_CreateString(m->term_name[t]));
    }
  }
  cJSON_AddBoolToObject(o, "overflow", info->overflow);
  cJSON_AddBoolToObject(o, "skipped", info->skipped);
  cJSON_AddNumberToObject(o, "growth_tracker", info->growth_tracker);
  cJSON_AddNumberToObject(o, "nonfinite_grads", (double)info->nonfinite);
  cJSON_AddNumberToObject(o, "grad_norm", info->grad_norm);
  cJSON_AddNumberToObject(o, "clip_coef", (double)info->clip_coef);
  cJSON_AddNumberToObject(o, "lr", (double)info->lr);
  cJSON_AddNumberToObject(o, "ms", ms);
  cJSON *d = parse_owned(ampc_diag_step_json(ds));
  if (!d) {
    cJSON_Delete(o);
    return NULL;
  }
  while (d->child) {
    cJSON *it = cJSON_DetachItemViaPointer(d, d->child);
    cJSON_AddItemToObject(o, it->string, it);
  }
  cJSON_Delete(d);
  for (int i = 0; i < L->n_parts; i++)
    cJSON_AddNumberToObject(o, L->part_name[i], (double)L->part[i]);
  return o;
}

static void add_mm_metrics(cJSON *o, const char *name, const ampc_mmodel_metrics *m) {
  if (m->samples == 0) /* a split the data does not have */
    return;
  cJSON *x = parse_owned(ampc_mmodel_metrics_json(m));
  if (x)
    cJSON_AddItemToObject(o, name, x);
}

/* the "metrics" object of an eval or summary line */
static void add_eval(cJSON *m, const ampc_run *R, const ampc_eval *e) {
  if (e->kind == AMPC_EVAL_RETRIEVAL) {
    add_mm_metrics(m, "new_style", &e->new_style);
    add_mm_metrics(m, "zero_shot", &e->zero_shot);
  } else if (R->md.kind == AMPC_MODEL_MLP) {
    cJSON_AddNumberToObject(m, "test_loss", e->loss);
    cJSON_AddNumberToObject(m, "test_accuracy", e->accuracy);
  } else {
    cJSON_AddNumberToObject(m, "test_accuracy", e->accuracy);
    cJSON_AddNumberToObject(m, "test_loss", e->loss);
    cJSON_AddNumberToObject(m, "test_samples", (double)e->samples);
  }
}

/* the summary's "memory": the parameter roles as allocated, the model's
 * activation and workspace bytes, their total, and the peak RSS */
static void add_memory(cJSON *summary, const ampc_trainer *T, size_t activations, size_t workspace,
                       size_t grad_stage, const ampc_fp8_sites *fp8) {
  cJSON *mem = cJSON_AddObjectToObject(summary, "memory");
  const size_t fp8_state = fp8 ? ampc_fp8_sites_state_bytes(fp8->n, fp8->len) : 0;
  size_t total = activations + workspace + grad_stage + fp8_state;
  for (int r = 0; r < AMPC_ROLE_COUNT; r++)
    total += T->params.bytes[r];
  cJSON_AddNumberToObject(mem, "weights", (double)T->params.bytes[AMPC_ROLE_WEIGHTS]);
  cJSON_AddNumberToObject(mem, "master", (double)T->params.bytes[AMPC_ROLE_MASTER]);
  cJSON_AddNumberToObject(mem, "grads", (double)T->params.bytes[AMPC_ROLE_GRADS]);
  cJSON_AddNumberToObject(
      mem, "moments",
      (double)(T->params.bytes[AMPC_ROLE_MOMENT1] + T->params.bytes[AMPC_ROLE_MOMENT2]));
  if (T->params.bytes[AMPC_ROLE_COMPENSATION]) /* --weight-update kahan */
    cJSON_AddNumberToObject(mem, "compensation", (double)T->params.bytes[AMPC_ROLE_COMPENSATION]);
  cJSON_AddNumberToObject(mem, "activations", (double)activations);
  cJSON_AddNumberToObject(mem, "workspace", (double)workspace);
  if (grad_stage) /* the FP32 sum over micro-batches and ranks */
    cJSON_AddNumberToObject(mem, "grad_stage", (double)grad_stage);
  if (fp8_state) /* fp8-mixed: the amax histories and scales */
    cJSON_AddNumberToObject(mem, "fp8_state", (double)fp8_state);
  cJSON_AddNumberToObject(mem, "total", (double)total);
  cJSON_AddNumberToObject(mem, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
}

typedef struct run_totals {
  ampc_losses last;
  bool have_eval;
  ampc_eval ev;
  double ms_sum, t_start;
  int64_t ms_n;
  ampc_swallow_stats sw;
  uint64_t bytes_sent; /* by this rank during the iterations (data parallel) */
} run_totals;

static cJSON *summary_object(const ampc_run *R, const run_totals *t) {
  const ampc_trainer *T = &R->T;
  const bool mlp = R->md.kind == AMPC_MODEL_MLP;
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "event", "summary");
  if (!mlp)
    cJSON_AddStringToObject(o, "model", R->md.mm.name);
  cJSON_AddStringToObject(o, "precision", ampc_precision_name(T->amp.precision));
  cJSON_AddNumberToObject(o, "steps", (double)T->iteration);
  cJSON_AddNumberToObject(o, "optimizer_steps", (double)T->step);
  cJSON_AddNumberToObject(o, "skipped_steps", (double)T->scaler.skip_count);
  cJSON_AddNumberToObject(o, "overflow_steps", (double)T->scaler.overflow_count);
  float final_scale = T->scaler.scale;
  if (T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_LOSS) { /* the smallest of the model's terms */
    bool have = false;
    for (int k = 0; k < R->model.n_terms && k < AMPC_BRANCH_COUNT; k++)
      if (R->model.term_on[k] && (!have || T->scaler.branch_scale[k] < final_scale))
        final_scale = T->scaler.branch_scale[k], have = true;
  }
  cJSON_AddNumberToObject(o, "final_loss_scale", (double)final_scale);
  if (T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_BRANCH) { /* the branches the model has */
    cJSON *bs = cJSON_AddObjectToObject(o, "final_branch_scales");
    bool has[AMPC_BRANCH_COUNT] = {false, false, false, false};
    for (int i = 0; i < T->params.count; i++)
      if ((unsigned)T->params.p[i].branch < AMPC_BRANCH_COUNT)
        has[T->params.p[i].branch] = true;
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
      if (has[b])
        cJSON_AddNumberToObject(bs, ampc_branch_name((ampc_branch)b),
                                (double)T->scaler.branch_scale[b]);
  } else if (T->amp.scaler.mode == AMPC_LOSS_SCALE_PER_LOSS) {
    cJSON *ts = cJSON_AddObjectToObject(o, "final_loss_scales");
    for (int k = 0; k < R->model.n_terms && k < AMPC_BRANCH_COUNT; k++)
      if (R->model.term_on[k])
        cJSON_AddNumberToObject(ts, R->model.term_name[k], (double)T->scaler.branch_scale[k]);
  }
  cJSON_AddNumberToObject(o, "final_train_loss", (double)t->last.total);
  const size_t act = R->model.activation_bytes, ws = R->model.workspace_bytes;
  if (mlp) {
    /* the MLP's summary carries the test metrics at its top level */
    cJSON_AddNumberToObject(o, "test_loss", t->have_eval ? t->ev.loss : (double)NAN);
    cJSON_AddNumberToObject(o, "test_accuracy", t->have_eval ? t->ev.accuracy : (double)NAN);
    cJSON_AddNumberToObject(o, "swallowed_fraction",
                            t->sw.updated ? (double)t->sw.swallowed / (double)t->sw.updated : 0);
    cJSON_AddNumberToObject(o, "wall_s", ampc_now_s() - t->t_start);
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
    add_memory(o, T, act, ws, ampc_accum_stage_bytes(&R->accum, T->params.total), R->model.fp8);
  } else {
    cJSON_AddNumberToObject(o, "ms_per_step_mean", t->ms_n ? t->ms_sum / (double)t->ms_n : 0.0);
    cJSON_AddNumberToObject(o, "wall_s", ampc_now_s() - t->t_start);
    cJSON_AddNumberToObject(o, "activation_bytes", (double)(act + ws));
    size_t pbytes = 0;
    for (int r = 0; r < AMPC_ROLE_COUNT; r++)
      pbytes += T->params.bytes[r];
    cJSON_AddNumberToObject(o, "parameter_state_bytes", (double)pbytes);
    add_memory(o, T, act, ws, ampc_accum_stage_bytes(&R->accum, T->params.total), R->model.fp8);
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
    if (t->have_eval)
      add_eval(cJSON_AddObjectToObject(o, "metrics"), R, &t->ev);
  }
  /* a stopped run names its checkpoint only if it wrote one */
  cJSON_AddStringToObject(o, "checkpoint",
                          R->rc.save_path && (!R->stalled || R->saved) ? R->rc.save_path : "");
  if (R->accum.comm) { /* what this rank sent per iteration (payload bytes) */
    cJSON_AddNumberToObject(o, "ranks", (double)R->size);
    cJSON_AddNumberToObject(o, "bytes_sent_per_step",
                            t->ms_n ? (double)t->bytes_sent / (double)t->ms_n : 0.0);
  }
  cJSON *dj = parse_owned(ampc_diag_json(R->diag));
  if (!dj) {
    cJSON_Delete(o);
    return NULL;
  }
  cJSON_AddItemToObject(o, "diagnosis", dj);
  return o;
}

char *ampc_run_summary_json(const ampc_run *R) {
  return R && R->summary ? cJSON_PrintUnformatted(R->summary) : NULL;
}

/* ---- the loop ------------------------------------------------------------------------ */

/* micro-batch k of iteration R->it_no on this rank: samples it_no * batch +
 * rank * (batch / size) + k * mb + r of the sampler's sequence (rank r's
 * shard is the r-th of `size` consecutive slices of the global batch) */
/* The dataset index of the sample at position pos of the run's sequence
 * (iteration * batch + slot): the sampler's concept, then one of its
 * training-style images; *h gets the position's hash (the shift's bits). */
static int64_t sample_at(ampc_run *R, int64_t pos, uint64_t *h) {
  const int64_t g = ampc_sampler_index(&R->smp, pos);
  const int64_t n_in = R->grp_off[g + 1] - R->grp_off[g];
  *h = draw_hash(R->rc.seed, pos);
  return R->train_idx[R->grp_off[g] + (n_in > 1 ? (int64_t)(*h % (uint64_t)n_in) : 0)];
}

ampc_status ampc_run_batch_samples(ampc_run *R, int64_t iteration, int64_t *out) {
  if (!R || !out || iteration < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_batch_samples: bad arguments");
  for (int64_t r = 0; r < R->rc.batch; r++) {
    uint64_t h;
    const int64_t src = sample_at(R, iteration * R->rc.batch + r, &h);
    out[r] = src; /* the dataset's sample (the MLP: the training feature row) */
  }
  return AMPC_OK;
}

static ampc_status gather(void *user, int64_t k, ampc_batch *out) {
  ampc_run *R = user;
  const int64_t shard = R->rc.batch / R->size;
  const int64_t mb = R->mb, base = R->it_no * R->rc.batch + R->rank * shard + k * mb;
  memset(out, 0, sizeof *out);
  out->b = mb;
  out->labels = R->blab;
  if (R->md.kind == AMPC_MODEL_MLP) {
    const int64_t in = R->data.dim;
    for (int64_t r = 0; r < mb; r++) {
      const int64_t src = R->train_idx[ampc_sampler_index(&R->smp, base + r)];
      memcpy(R->bfeat + r * in, R->data.x_train + src * in, (size_t)in * sizeof *R->bfeat);
      R->blab[r] = R->data.y_train[src];
    }
    out->features = R->bfeat;
    return AMPC_OK;
  }
  const ampc_dataset *D = R->data.dataset;
  const int64_t img_sz = (int64_t)D->height * D->width * D->channels, L = D->seq_len;
  for (int64_t r = 0; r < mb; r++) {
    uint64_t h;
    const int64_t src = sample_at(R, base + r, &h);
    if (R->rc.augment_shift > 0)
      shift_image(R->bimg + r * img_sz, D->images + src * img_sz, D->height, D->width, D->channels,
                  R->rc.augment_shift, h >> 32);
    else
      memcpy(R->bimg + r * img_sz, D->images + src * img_sz, (size_t)img_sz);
    if (R->btok) /* image-only data (Fashion-MNIST) has no tokens to copy */
      memcpy(R->btok + r * L, D->tokens + src * L, (size_t)L * sizeof *R->btok);
    R->blab[r] = D->label[src];
  }
  out->images = R->bimg;
  out->tokens = R->btok;
  out->neg_uniform = R->rc.itm_random_negatives;
  if (R->rc.itm_sample_negatives) /* never 0, which asks for the hardest negatives */
    out->neg_seed = draw_hash(R->rc.seed ^ 0xA5A5A5A5ull, base) | 1u;
  out->mask_seed = draw_hash(R->rc.seed ^ 0x5A5A5A5A3C3C3C3Cull, base) | 1u; /* MLM's masks */
  return AMPC_OK;
}

/* The diagnosis accumulator: a resumed run's log (when it exists and reads)
 * supplies the steps before `iteration`, so the summary diagnoses the whole
 * run; else a fresh one. */
static ampc_diag *diag_start(const ampc_diag_config *c, const char *resumed_log,
                             int64_t iteration) {
  ampc_diag *d = NULL;
  if (resumed_log && iteration > 0 && ampc_diag_read_log(resumed_log, &d) == AMPC_OK) {
    ampc_diag_truncate(d, iteration + 1);
    return d;
  }
  return ampc_diag_create(c);
}

/* the checkpoint's metadata naming the model (ampc_model_desc_from_checkpoint reads it) */
static ampc_status save(ampc_run *R) {
  ampc_model_meta_storage ms;
  ampc_st_meta meta[8];
  ampc_model_desc md = R->md; /* the attention cast as in effect */
  md.mm.attn_cast = attn_cast_in_effect(&R->md, R->T.amp.precision);
  int n = ampc_model_checkpoint_meta(&md, R->data.name, &ms, meta);
  if (R->recipe[0]) { /* checked on resume; ampc eval reads the held-out style */
    meta[n++] = (ampc_st_meta){"ampc.data_recipe", R->recipe};
    meta[n++] = (ampc_st_meta){"ampc.held_out_style", R->held_out};
  }
  char lm[32];
  if (R->accum.loss_multiplier != 1.0f) { /* checked on resume */
    snprintf(lm, sizeof lm, "%.9g", (double)R->accum.loss_multiplier);
    meta[n++] = (ampc_st_meta){"ampc.loss_multiplier", lm};
  }
  ampc_fp8_state_storage fs = {0};
  ampc_st_tensor *xt = NULL;
  int nxt = 0;
  if (R->model.fp8)
    AMPC_TRY(ampc_fp8_state_tensors(R->model.fp8, &fs, &xt, &nxt));
  const ampc_status st = ampc_trainer_save_ex(&R->T, R->rc.save_path, meta, n, xt, nxt);
  ampc_fp8_state_storage_free(&fs);
  AMPC_TRY(st);
  R->saved = true;
  return AMPC_OK;
}

/* Test hooks of the data-parallel tests (docs/ROBUSTNESS.md):
 * AMPC_FAULT_NAN_GRAD=R:I makes rank R's gradient non-finite in iteration I
 * (1-based) before the ranks' sum; AMPC_FAULT_FAIL=R:I makes rank R fail
 * there, as a bad input would. Unset: nothing. */
static bool fault_at(const char *var, const ampc_run *R, int64_t it_no) {
  const char *v = getenv(var);
  int r = -1;
  long long it = -1;
  return v && sscanf(v, "%d:%lld", &r, &it) == 2 && r == R->rank && it == it_no + 1;
}

static ampc_status fault_hook(void *user, void *g, ampc_dtype dt, int64_t n) {
  const ampc_run *R = user;
  if (fault_at("AMPC_FAULT_FAIL", R, R->it_no))
    return ampc_fail(AMPC_ERR_IO, "rank %d: injected failure (AMPC_FAULT_FAIL)", R->rank);
  if (n > 0 && fault_at("AMPC_FAULT_NAN_GRAD", R, R->it_no)) {
    const float nan = NAN;
    (void)ampc_convert(g, dt, &nan, AMPC_F32, 1);
  }
  return AMPC_OK;
}

/* Every rank must hold the same state after a step; a difference (a
 * non-deterministic reduction, a rank that skipped alone) ends the run
 * rather than letting replicas drift apart. The scaler's state every step,
 * the weights when check_replicas is set. */
/* fp8-mixed, after each optimizer iteration (skipped or not): the amax of
 * every cast maximised over the ranks (so every rank takes the same scales,
 * as Transformer Engine reduces amax over the data-parallel group), the
 * counts summed, then the next scales (ampc_fp8_sites_update). */
static ampc_status fp8_end_step(ampc_run *R) {
  ampc_fp8_sites *S = R->model.fp8;
  if (!S)
    return AMPC_OK;
  ampc_fp8_sites_take_counts(S, R->fp8_values, R->fp8_sat, R->fp8_flush);
  const ampc_comm *c = R->accum.comm;
  if (c && c->size > 1) {
    if (!R->fp8_amax)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "fp8: no amax buffer");
    for (int i = 0; i < S->n; i++) {
      R->fp8_amax[3 * i] = (double)S->lin[i].x.amax;
      R->fp8_amax[3 * i + 1] = (double)S->lin[i].w.amax;
      R->fp8_amax[3 * i + 2] = (double)S->lin[i].dy.amax;
    }
    AMPC_TRY(c->max_f64(c->user, R->fp8_amax, 3 * S->n));
    for (int i = 0; i < S->n; i++) {
      S->lin[i].x.amax = (float)R->fp8_amax[3 * i];
      S->lin[i].w.amax = (float)R->fp8_amax[3 * i + 1];
      S->lin[i].dy.amax = (float)R->fp8_amax[3 * i + 2];
    }
    uint64_t u[3 * AMPC_BRANCH_COUNT];
    memcpy(u, R->fp8_values, sizeof R->fp8_values);
    memcpy(u + AMPC_BRANCH_COUNT, R->fp8_sat, sizeof R->fp8_sat);
    memcpy(u + 2 * AMPC_BRANCH_COUNT, R->fp8_flush, sizeof R->fp8_flush);
    AMPC_TRY(c->sum_u64(c->user, u, 3 * AMPC_BRANCH_COUNT));
    memcpy(R->fp8_values, u, sizeof R->fp8_values);
    memcpy(R->fp8_sat, u + AMPC_BRANCH_COUNT, sizeof R->fp8_sat);
    memcpy(R->fp8_flush, u + 2 * AMPC_BRANCH_COUNT, sizeof R->fp8_flush);
  }
  return ampc_fp8_sites_update(S);
}

static ampc_status check_replicas(ampc_run *R, const ampc_step_info *info) {
  const ampc_comm *c = R->accum.comm;
  if (!c)
    return AMPC_OK;
  const ampc_trainer *T = &R->T;
  const double st[6] = {(double)T->scaler.scale,      (double)T->scaler.growth_tracker,
                        (double)T->scaler.skip_count, (double)T->step,
                        (double)info->skipped,        (double)info->nonfinite};
  char what[96];
  snprintf(what, sizeof what, "the loss scaler's state after iteration %lld",
           (long long)info->iteration);
  AMPC_TRY(c->check_same(c->user, st, sizeof st, what));
  if (R->rc.check_replicas) {
    if (R->rc.device != AMPC_DEVICE_CPU) /* the host copies the check reads */
      AMPC_TRY(ampc_trainer_sync_host(&R->T));
    const ampc_params *P = &T->params;
    snprintf(what, sizeof what, "the weights after iteration %lld", (long long)info->iteration);
    AMPC_TRY(c->check_same(c->user, P->w, (size_t)P->total * ampc_dtype_size(P->wdt), what));
    if (P->master) {
      snprintf(what, sizeof what, "the master weights after iteration %lld",
               (long long)info->iteration);
      AMPC_TRY(c->check_same(c->user, P->master, (size_t)P->total * sizeof(float), what));
    }
  }
  return AMPC_OK;
}

/* The telemetry of a sampled iteration over all ranks: counts summed, the
 * largest |x| and accumulation errors the maxima (the first non-finite
 * tensor and the accumulation tensors stay rank 0's). */
static ampc_status reduce_telemetry(ampc_run *R) {
  const ampc_comm *c = R->accum.comm;
  if (!c)
    return AMPC_OK;
  ampc_telemetry *t = R->telemetry;
  enum { PER = 7 + AMPC_TM_BINS, NS = AMPC_TM_PHASES * AMPC_BRANCH_COUNT };
  uint64_t *u = malloc(sizeof(uint64_t) * PER * NS);
  double mx[NS + AMPC_BRANCH_COUNT];
  if (!u)
    return ampc_fail(AMPC_ERR_NOMEM, "telemetry: out of memory");
  for (int i = 0; i < NS; i++) {
    ampc_tm_stats *s = &t->s[i / AMPC_BRANCH_COUNT][i % AMPC_BRANCH_COUNT];
    uint64_t *o = u + i * PER;
    o[0] = s->r.count, o[1] = s->r.underflow, o[2] = s->r.subnormal, o[3] = s->r.overflow;
    o[4] = s->r.inf, o[5] = s->r.nan, o[6] = s->zeros;
    memcpy(o + 7, s->hist, sizeof s->hist);
    mx[i] = (double)s->r.max_abs;
  }
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    mx[NS + b] = t->acc_err[b];
  ampc_status st = c->sum_u64(c->user, u, PER * NS);
  if (st == AMPC_OK)
    st = c->max_f64(c->user, mx, NS + AMPC_BRANCH_COUNT);
  if (st == AMPC_OK)
    for (int i = 0; i < NS; i++) {
      ampc_tm_stats *s = &t->s[i / AMPC_BRANCH_COUNT][i % AMPC_BRANCH_COUNT];
      const uint64_t *o = u + i * PER;
      s->r.count = o[0], s->r.underflow = o[1], s->r.subnormal = o[2], s->r.overflow = o[3];
      s->r.inf = o[4], s->r.nan = o[5], s->zeros = o[6];
      memcpy(s->hist, o + 7, sizeof s->hist);
      s->r.max_abs = (float)mx[i];
    }
  /* what one process would keep of its micro-batches in order: the first
   * (lowest-rank) holder of each branch's largest error names its tensor,
   * and the first rank that met a non-finite value names that tensor */
  enum { NB = AMPC_BRANCH_COUNT, NAME = 64 / 8 };
  double who[NB + 1];
  for (int b = 0; b < NB; b++)
    who[b] = t->acc_err[b] >= 0.0 && t->acc_err[b] == mx[NS + b] ? -(double)c->rank : -1e9;
  who[NB] = t->first_nonfinite_branch >= 0 ? -(double)c->rank : -1e9;
  if (st == AMPC_OK)
    st = c->max_f64(c->user, who, NB + 1);
  uint64_t names[(NB + 1) * (NAME + 2)];
  memset(names, 0, sizeof names);
  for (int b = 0; b <= NB; b++) {
    if (who[b] != -(double)c->rank)
      continue;
    uint64_t *o = names + b * (NAME + 2);
    if (b < NB) {
      memcpy(o, t->acc_tensor[b], 64);
      o[NAME] = (uint64_t)t->acc_k[b];
    } else {
      memcpy(o, t->first_nonfinite, 64);
      o[NAME] = (uint64_t)t->first_nonfinite_branch,
      o[NAME + 1] = (uint64_t)t->first_nonfinite_phase;
    }
  }
  if (st == AMPC_OK)
    st = c->sum_u64(c->user, names, (NB + 1) * (NAME + 2));
  if (st == AMPC_OK) {
    for (int b = 0; b <= NB; b++) {
      const uint64_t *o = names + b * (NAME + 2);
      if (who[b] < -1e8)
        continue; /* no rank has one */
      if (b < NB) {
        t->acc_err[b] = mx[NS + b];
        memcpy(t->acc_tensor[b], o, 64);
        t->acc_tensor[b][63] = '\0';
        t->acc_k[b] = (int64_t)o[NAME];
      } else {
        memcpy(t->first_nonfinite, o, 64);
        t->first_nonfinite[63] = '\0';
        t->first_nonfinite_branch = (int)o[NAME], t->first_nonfinite_phase = (int)o[NAME + 1];
      }
    }
  }
  free(u);
  return st;
}

/* The live stall check after a step (ampc_run_config.on_stall): the
 * reason, or NULL. floor_run and bad_loss count consecutive steps. */
typedef struct stall_state {
  int64_t floor_run, bad_loss;
  bool reported;
  char reason[256];
} stall_state;

static const char *stall_check(const ampc_run *R, stall_state *ss, const ampc_step_info *info,
                               float loss) {
  const ampc_scaler_config *sc = &R->T.amp.scaler;
  const int64_t n = R->rc.stall_steps > 0 ? R->rc.stall_steps : (int64_t)sc->hysteresis + 2;
  /* a static scale never moves: each overflow there is as final */
  bool floor_branch = false; /* per-branch: an overflowing branch already at the floor */
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    floor_branch = floor_branch ||
                   ((info->branch_nonfinite & (1u << b)) && info->branch_scale[b] <= sc->min_scale);
  const bool at_floor =
      sc->mode == AMPC_LOSS_SCALE_STATIC ||
      (sc->mode == AMPC_LOSS_SCALE_DYNAMIC && info->loss_scale <= sc->min_scale) ||
      ((sc->mode == AMPC_LOSS_SCALE_PER_BRANCH || sc->mode == AMPC_LOSS_SCALE_PER_LOSS) &&
       floor_branch);
  ss->floor_run = info->overflow && at_floor ? ss->floor_run + 1 : 0;
  ss->bad_loss = isfinite(loss) ? 0 : ss->bad_loss + 1;
  if (info->nonfinite_weights > 0)
    snprintf(ss->reason, sizeof ss->reason,
             "the weights hold %lld non-finite values after step %lld: no loss scale can bring "
             "them back",
             (long long)info->nonfinite_weights, (long long)info->iteration);
  else if (ss->floor_run >= n)
    snprintf(ss->reason, sizeof ss->reason,
             "%lld consecutive steps overflowed with the loss scale at its floor (%g): every "
             "further step would be skipped",
             (long long)ss->floor_run, (double)info->loss_scale);
  else if (ss->bad_loss >= n)
    snprintf(ss->reason, sizeof ss->reason,
             "the loss has been non-finite for %lld consecutive steps (the forward pass does not "
             "see the loss scale)",
             (long long)ss->bad_loss);
  else
    return NULL;
  return ss->reason;
}

/* A resumed run continues the log of the run it resumes, which may have been
 * killed after its checkpoint: cut the log back to the checkpoint's
 * iteration first (lines of later steps dropped, and a torn last line or
 * any line that does not parse), atomically, so that the log reads as if
 * the run had never been interrupted. No log yet: nothing to do. */
static ampc_status cut_log(const char *path, int64_t iteration) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return AMPC_OK;
  char *in = NULL, *out = NULL;
  long len = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    len = ftell(f);
  if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (in = malloc((size_t)len + 1)) &&
      (out = malloc((size_t)len + 1)) && fread(in, 1, (size_t)len, f) != (size_t)len)
    len = -1;
  fclose(f);
  if (len <= 0 || !in || !out) {
    free(in), free(out);
    return len == 0 ? AMPC_OK : ampc_fail(AMPC_ERR_IO, "cannot read the log %s to resume it", path);
  }
  in[len] = '\0';
  size_t n_out = 0;
  for (char *line = in; *line;) {
    char *nl = strchr(line, '\n');
    if (!nl)
      break; /* a torn last line: the killed run's */
    *nl = '\0';
    cJSON *o = cJSON_Parse(line);
    bool keep = o != NULL;
    if (o) {
      const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
      const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
      const cJSON *steps = cJSON_GetObjectItemCaseSensitive(o, "steps");
      if (cJSON_IsNumber(st) && st->valuedouble > (double)iteration)
        keep = false;
      if (cJSON_IsString(ev) && strcmp(ev->valuestring, "summary") == 0 && cJSON_IsNumber(steps) &&
          steps->valuedouble > (double)iteration)
        keep = false;
      cJSON_Delete(o);
    }
    if (keep) {
      const size_t l = (size_t)(nl - line);
      memcpy(out + n_out, line, l);
      out[n_out + l] = '\n';
      n_out += l + 1;
    }
    line = nl + 1;
  }
  ampc_status st = AMPC_OK;
  if (n_out != (size_t)len) /* something to cut */
    st = ampc_file_write_atomic(path, out, n_out);
  free(in), free(out);
  return st;
}

#define TRYR(call)                                                                                 \
  do {                                                                                             \
    st = (call);                                                                                   \
    if (st != AMPC_OK)                                                                             \
      goto out;                                                                                    \
  } while (0)

ampc_status ampc_run_train(ampc_run *R, const ampc_run_callbacks *cb) {
  if (!R)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_train: NULL run");
  if (R->trained)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_run_train: this run has trained already (a new run with "
                     "resume_path = its checkpoint continues it)");
  R->trained = true;
  const ampc_run_callbacks none = {0};
  if (!cb)
    cb = &none;
  const ampc_run_config *rc = &R->rc;
  ampc_trainer *T = &R->T;
  ampc_model *m = &R->model;
  ampc_status st = AMPC_OK;
  FILE *log = NULL;
  cJSON_Delete(R->summary);
  R->summary = NULL;
  const bool lead = R->rank == 0; /* rank 0 writes the log and the checkpoint */
  if (lead && rc->log_path && rc->resume_path) {
    const ampc_status cs = cut_log(rc->log_path, T->iteration);
    if (cs != AMPC_OK)
      return cs;
  }
  if (lead && rc->log_path) {
    cJSON *first = config_object(R);
    if (!first)
      return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
    log = fopen(rc->log_path, rc->resume_path ? "a" : "w");
    if (!log) {
      const int e = errno;
      cJSON_Delete(first);
      return ampc_fail(AMPC_ERR_IO, "cannot open log file %s: %s", rc->log_path, strerror(e));
    }
    TRYR(log_line(log, rc->log_path, first));
  }
  const int64_t end = rc->stop_at > 0 && rc->stop_at < rc->steps ? rc->stop_at : rc->steps;
  run_totals tot = {.t_start = ampc_now_s()};
  const int64_t start_iter = T->iteration;
  ampc_diag_config dcfg;
  ampc_diag_config_from(&dcfg, T);
  ampc_diag_free(R->diag);
  R->diag = diag_start(&dcfg, rc->resume_path ? rc->log_path : NULL, T->iteration);
  if (!R->diag)
    TRYR(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
  /* telemetry only for models that mark their branches */
  const bool can_sample = m->ops->set_telemetry != NULL && rc->telemetry_every > 0;
  stall_state ss = {0};
  const uint64_t bytes0 = R->accum.comm && R->accum.comm->bytes_sent
                              ? R->accum.comm->bytes_sent(R->accum.comm->user)
                              : 0;
  while (T->iteration < end) {
    const double t0 = ampc_now_s();
    const int64_t it_no = T->iteration;
    const bool sampled = can_sample && (it_no == 0 || (it_no + 1) % rc->telemetry_every == 0);
    if (sampled)
      TRYR(ampc_telemetry_begin(R->telemetry));
    R->it_no = it_no;
    ampc_losses mean;
    st = ampc_train_accumulate_dp(T, m, &R->accum, gather, R, &mean);
    ampc_telemetry_end(R->telemetry); /* the optimizer's stores are not the model's */
    if (st == AMPC_OK && sampled)
      st = reduce_telemetry(R);
    /* per-branch loss scaling picks each branch's next scale from the top of
     * its gradient histogram on sampled steps */
    for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
      const ampc_tm_stats *g = &R->telemetry->s[AMPC_TM_GRAD][b];
      T->plan.amax[b] = sampled && g->r.count > 0 ? g->r.max_abs : -1.0f;
    }
    ampc_step_info info;
    if (st == AMPC_OK)
      st = ampc_trainer_step(T, &info);
    if (st == AMPC_OK)
      st = fp8_end_step(R);
    if (st == AMPC_OK)
      st = check_replicas(R, &info);
    if (st != AMPC_OK) {
      st = ampc_fail(st, "step %lld: %s", (long long)it_no + 1, ampc_last_error());
      goto out;
    }
    const double ms = (ampc_now_s() - t0) * 1e3;
    if (R->accum.comm && R->accum.comm->bytes_sent)
      tot.bytes_sent = R->accum.comm->bytes_sent(R->accum.comm->user) - bytes0;
    tot.ms_sum += ms, tot.ms_n++;
    tot.last = mean;
    if (!info.skipped)
      for (int i = 0; i < T->params.count; i++) {
        tot.sw.updated += T->swallow[i].updated, tot.sw.swallowed += T->swallow[i].swallowed;
        tot.sw.would_swallow += T->swallow[i].would_swallow;
      }
    ampc_diag_step ds;
    ampc_diag_step_fill(&ds, T, &info, (double)mean.total, sampled ? R->telemetry : NULL);
    for (int i = 0; i < mean.n_parts && ds.n_parts < AMPC_DIAG_PARTS; i++)
      if (!strncmp(mean.part_name[i], "loss_", 5) &&
          strlen(mean.part_name[i]) < AMPC_DIAG_PART_NAME) {
        snprintf(ds.part_name[ds.n_parts], AMPC_DIAG_PART_NAME, "%s", mean.part_name[i]);
        ds.part[ds.n_parts++] = (double)mean.part[i];
      }
    for (int b = 0; R->model.fp8 && b < AMPC_BRANCH_COUNT; b++) {
      ds.br[b].fp8_values = (int64_t)R->fp8_values[b];
      ds.br[b].fp8_saturated = (int64_t)R->fp8_sat[b];
      ds.br[b].fp8_flushed = (int64_t)R->fp8_flush[b];
    }
    TRYR(ampc_diag_add(R->diag, &ds));
    if (log &&
        (info.iteration % rc->log_every == 0 || info.iteration == end || sampled || info.overflow))
      TRYR(log_line(log, rc->log_path,
                    step_object(&info, &mean, ms, &ds, T->amp.scaler.mode, &R->model)));
    const char *why = ss.reported ? NULL : stall_check(R, &ss, &info, mean.total);
    if (why) {
      ss.reported = true;
      if (log) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "stall");
        cJSON_AddNumberToObject(o, "step", (double)info.iteration);
        cJSON_AddStringToObject(o, "reason", why);
        cJSON_AddStringToObject(o, "policy", rc->on_stall == AMPC_STALL_STOP ? "stop" : "warn");
        cJSON *dj = parse_owned(ampc_diag_json(R->diag));
        if (dj)
          cJSON_AddItemToObject(o, "diagnosis", dj);
        TRYR(log_line(log, rc->log_path, o));
      }
      if (lead && cb->stall)
        cb->stall(cb->user, R, info.iteration, why);
      if (rc->on_stall == AMPC_STALL_STOP) {
        R->stalled = true;
        R->summary = summary_object(R, &tot);
        if (log && R->summary)
          TRYR(log_line(log, rc->log_path, cJSON_Duplicate(R->summary, 1)));
        st = ampc_fail(AMPC_ERR_NUMERIC,
                       "stopped at step %lld: %s (on_stall stop: no checkpoint written after "
                       "this step)",
                       (long long)info.iteration, why);
        goto out;
      }
    }
    if (lead && cb->step) {
      const ampc_run_progress p = {
          &info, &mean, ms, ampc_now_s() - tot.t_start, end, start_iter, T->scaler.skip_count};
      cb->step(cb->user, R, &p);
    }
    const bool do_eval =
        lead && rc->eval &&
        ((rc->eval_every > 0 && info.iteration % rc->eval_every == 0) || info.iteration == end);
    if (do_eval) {
      st = ampc_model_evaluate(m, &R->data, &tot.ev);
      if (st != AMPC_OK) {
        st = ampc_fail(st, "evaluation: %s", ampc_last_error());
        goto out;
      }
      tot.have_eval = true;
      if (cb->eval)
        cb->eval(cb->user, R, info.iteration, &tot.ev);
      if (log) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "eval");
        cJSON_AddNumberToObject(o, "step", (double)info.iteration);
        add_eval(cJSON_AddObjectToObject(o, "metrics"), R, &tot.ev);
        TRYR(log_line(log, rc->log_path, o));
      }
    }
    if (lead && rc->save_path && rc->save_every > 0 && info.iteration % rc->save_every == 0 &&
        info.iteration != end) {
      /* not over the last good checkpoint while the run looks stuck (an
       * overflow at the floor, a non-finite loss or weights) */
      const bool unhealthy = ss.floor_run > 0 || ss.bad_loss > 0 || info.nonfinite_weights > 0;
      if (!unhealthy || rc->on_stall == AMPC_STALL_WARN) {
        TRYR(save(R));
      } else if (log) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "save_skipped");
        cJSON_AddNumberToObject(o, "step", (double)info.iteration);
        cJSON_AddStringToObject(o, "reason",
                                "the step overflowed at the scale floor or its loss or weights "
                                "are non-finite: the last checkpoint is kept");
        TRYR(log_line(log, rc->log_path, o));
      }
    }
  }
  if (lead && rc->save_path)
    TRYR(save(R));
  R->summary = summary_object(R, &tot);
  if (!R->summary)
    TRYR(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
  if (log)
    TRYR(log_line(log, rc->log_path, cJSON_Duplicate(R->summary, 1)));
out:
  if (log && fclose(log) != 0 && st == AMPC_OK)
    st = ampc_fail(AMPC_ERR_IO, "cannot write log file %s", rc->log_path);
  return st;
}
