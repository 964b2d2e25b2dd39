/*
 * src/train/run.c: the training run of include/ampc/train.h: its creation
 * (a short sequence of steps: settings, device, data and sampler, trainer,
 * model, resume) and its loop (micro-batches from the sampler, the trainer's
 * step, the telemetry schedule, evaluation and checkpoint cadence, the stall
 * policy). Its parts live beside it: the model kinds in model.c, the log and
 * summary in run_log.c, the ranks' agreement in run_ranks.c, the stall check
 * and diagnosis in run_health.c, the resume check in checkpoint.c, sampling
 * and batching in src/data/. The library never prints: progress goes to the
 * caller's callbacks.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ampc/io.h"
#include "ampc/report.h"
#include "ampc/shards.h"
#include "ampc/train.h"
#include "backend/backend.h"
#include "run_internal.h"

/* ---- test hooks: the fault plan ------------------------------------------------------ */

ampc_status ampc_fault_at_parse(const char *spec, ampc_fault_at *out) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fault_at_parse: out is NULL");
  *out = (ampc_fault_at){-1, 0};
  int r = -1;
  long long it = -1;
  if (!spec)
    return AMPC_OK;
  if (sscanf(spec, "%d:%lld", &r, &it) != 2)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "fault plan '%s': not RANK:ITERATION", spec);
  *out = (ampc_fault_at){r, (int64_t)it};
  return AMPC_OK;
}

static bool fault_due(const ampc_fault_at *f, const ampc_run *R) {
  return f->iteration > 0 && f->rank == R->rank && f->iteration == R->it_no + 1;
}

/* before the ranks' sum: this rank fails, or its gradient becomes non-finite,
 * where the plan says */
static ampc_status fault_hook(void *user, void *g, ampc_dtype dt, int64_t n) {
  const ampc_run *R = user;
  if (fault_due(&R->rc.faults.fail, R))
    return ampc_fail(AMPC_ERR_IO, "rank %d: injected failure (AMPC_FAULT_FAIL)", R->rank);
  if (n > 0 && fault_due(&R->rc.faults.nan_grad, R)) {
    const float nan = NAN;
    (void)ampc_convert(g, dt, &nan, AMPC_F32, 1);
  }
  return AMPC_OK;
}

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
                           .seed = 1,
                           /* the recipe the main job needs to learn its matching head:
                            * shifted images, uniformly drawn ITM negatives */
                           .augment_shift = 2,
                           .itm_sample_negatives = true,
                           .itm_random_negatives = true,
                           .anomaly_replay = true};
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
  if (R->dctx) { /* after everything it holds; rebinds the context before */
    ampc_device_close(R->dctx);
  }
  ampc_mmodel_specs_free(&R->specs);
  ampc_sampler_free(&R->smp);
  ampc_telemetry_end(R->telemetry);
  free(R->telemetry);
  ampc_diag_free(R->diag);
  free(R->fp8_amax);
  cJSON_Delete(R->summary);
  ampc_sample_groups_free(&R->groups);
  ampc_batch_buffers_free(&R->buf);
  free(R->stream_raw);
  free(R->accum.host);
  free(R);
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
  /* a probe file, created and removed: said now, not after the training
   * (access() says yes to root on read-only and virtual file systems) */
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/.ampc-probe-XXXXXX", dir);
  const int fd = mkstemp(probe);
  if (fd < 0) {
    const int e = errno;
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s %s: cannot create a file in directory %s: %s", what,
                     path, dir, strerror(e));
  }
  close(fd);
  unlink(probe);
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
  if (rc->zero != 0 && rc->zero != 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--zero %d: expected 0 or 1", rc->zero);
  if (rc->zero && rc->device != AMPC_DEVICE_CPU)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--zero 1 with --device %s: ZeRO-1 runs on the CPU only for now (a device's "
                     "shards need NCCL's reduce-scatter and all-gather)",
                     ampc_device_name(rc->device));
  if (rc->zero && rc->reduce != AMPC_REDUCE_F32)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--zero 1 with --allreduce working: ZeRO-1 sums the gradients in FP32 in rank "
                     "order (--allreduce f32), the sum its shards are cut from");
  if (rc->overlap && (rc->device != AMPC_DEVICE_CPU || rc->reduce != AMPC_REDUCE_F32))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--overlap on needs --device cpu and --allreduce f32 (the rank-order FP32 "
                     "chain on host buffers; got --device %s, --allreduce %s)",
                     ampc_device_name(rc->device),
                     rc->reduce == AMPC_REDUCE_F32 ? "f32" : "working");
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
  if (rc->global_negatives && rc->micro_batches > 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--global-negatives with --micro-batches %lld: the contrastive loss would "
                     "contrast each micro-batch's %lld samples alone, not the batch of %lld (run "
                     "%lld MPI ranks with --micro-batches 1 for that: mpirun -np %lld)",
                     (long long)rc->micro_batches,
                     (long long)(rc->batch / size / rc->micro_batches), (long long)rc->batch,
                     (long long)(rc->micro_batches * size), (long long)(rc->micro_batches * size));
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

/* ---- creation, step by step ---------------------------------------------------------- */

/* no device: said before the trainer's state is allocated (3 GB of host
 * memory for mm-large) */
static ampc_status check_device(const ampc_run_config *rc, const ampc_model_desc *md,
                                const run_kind *kind) {
  if (rc->device != AMPC_DEVICE_CPU && !kind->on_device) /* as ampc_model_create_on */
    return ampc_fail(AMPC_ERR_UNSUPPORTED,
                     "--device: model %s is not on a device yet (the multimodal models and "
                     "ViTs are)",
                     md->name);
  return ampc_device_check(rc->device);
}

/* the ranks, the micro-batch and how the step's gradient is summed */
static void set_layout(ampc_run *R, const ampc_amp_config *amp) {
  const ampc_run_config *rc = &R->rc;
  R->rank = rc->comm ? rc->comm->rank : 0;
  R->size = rc->comm ? rc->comm->size : 1;
  R->mb = rc->batch / R->size / rc->micro_batches;
  R->accum =
      (ampc_accum){.micro_batches = rc->micro_batches,
                   /* a group of one: only with the device sums forced on
                    * (ampc_dist_use_device, AMPC_NCCL_ONE_RANK) */
                   .comm = R->size > 1 || (rc->comm && rc->comm->sum_device_f32_ordered &&
                                           rc->device != AMPC_DEVICE_CPU)
                               ? rc->comm
                               : NULL,
                   .reduce = rc->reduce,
                   .hook_user = R,
                   .loss_multiplier = rc->loss_multiplier > 0.0f ? rc->loss_multiplier : 1.0f,
                   .per_loss = amp->scaler.mode == AMPC_LOSS_SCALE_PER_LOSS,
                   .overlap = rc->overlap,
                   .zero = rc->zero != 0,
                   .reduce_wait_s = &R->reduce_wait_s};
  /* the fault injection writes the gradients from the host: not GPU memory */
  if ((rc->faults.fail.iteration > 0 || rc->faults.nan_grad.iteration > 0) &&
      !ampc_device_desc_get(rc->device)->foreign_memory)
    R->accum.before_reduce = fault_hook;
}

/* the data against the model, the sampler's groups and one micro-batch's buffers */
static ampc_status set_feed(ampc_run *R) {
  const ampc_run_config *rc = &R->rc;
  AMPC_TRY(R->kind->check_data(R));
  if (R->mb < R->kind->min_micro_batch(&R->md))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "batch %lld in %lld micro-batches on %d ranks: the contrastive loss needs at "
                     "least 2 samples per micro-batch",
                     (long long)rc->batch, (long long)rc->micro_batches, R->size);
  AMPC_TRY(R->kind->feed(R));
  if (rc->batch > R->groups.count)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "batch %lld is larger than the number of training concepts (%lld)",
                     (long long)rc->batch, (long long)R->groups.count);
  /* a stream has its own order (ampc_stream_index) */
  return R->data.stream ? AMPC_OK : ampc_sampler_init(&R->smp, R->groups.count, rc->seed);
}

/* the trainer (and its state on the device), the FP32 staging */
static ampc_status set_trainer(ampc_run *R, const ampc_amp_config *amp,
                               const ampc_optim_config *opt) {
  const ampc_run_config *rc = &R->rc;
  ampc_status st = ampc_model_specs(&R->md, &R->specs);
  if (st != AMPC_OK)
    return st;
  /* the loss multiplier's companions: eps and the clipping norm scaled with
   * the gradients, so that an FP32 run's updates do not change */
  if (R->accum.loss_multiplier != 1.0f && opt->kind != AMPC_OPTIM_ADAMW)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--loss-multiplier needs AdamW: its update is invariant to the gradients' "
                     "scale once eps is scaled too; SGD's steps would shrink with the multiplier");
  ampc_optim_config opt_l = *opt;
  opt_l.eps = opt->eps * R->accum.loss_multiplier;
  opt_l.clip_norm = opt->clip_norm * R->accum.loss_multiplier;
  AMPC_TRY(ampc_trainer_init(&R->T, amp, &opt_l, R->specs.specs, R->specs.n, rc->seed));
  R->have_trainer = true;
  const size_t stage = ampc_accum_stage_bytes(&R->accum, R->T.params.total);
  if (rc->device != AMPC_DEVICE_CPU) { /* the device and the trainer's state on it */
    /* rank r on unit r mod the node's count (one process per GPU on a
     * node); none on the CPU devices */
    AMPC_TRY(ampc_device_open(rc->device, R->rank, &R->dctx));
    AMPC_TRY(ampc_trainer_to_device(&R->T, rc->device));
  }
  if (stage) { /* the FP32 staging where the gradients are (host memory on the CPU) */
    void *p = NULL;
    AMPC_TRY(ampc_device_backend(rc->device)->alloc(&p, stage));
    R->accum.stage = p;
  }
  /* several ranks on a device: the ranks' sum goes through host memory
   * unless the communicator sums device buffers (NCCL; then no buffer) */
  const size_t hostb = rc->device != AMPC_DEVICE_CPU
                           ? ampc_accum_host_bytes(&R->accum, R->T.params.total, R->T.params.wdt)
                           : 0;
  if (hostb && !(R->accum.host = malloc(hostb)))
    return ampc_fail(AMPC_ERR_NOMEM, "cannot allocate the %zu-byte host buffer of the ranks' sum",
                     hostb);
  return AMPC_OK;
}

/* the model over the trainer's table, its group (global negatives) and notes */
static ampc_status set_model(ampc_run *R, const ampc_amp_config *amp) {
  const ampc_run_config *rc = &R->rc;
  AMPC_TRY(
      ampc_model_create_on(&R->model, &R->md, ampc_trainer_params(&R->T), amp, R->mb, rc->device));
  R->have_model = true;
  if (rc->fake_quant_int8)
    AMPC_TRY(ampc_model_set_fake_quant(&R->model, true));
  if (R->model.fp8 && !(R->fp8_amax = calloc((size_t)R->model.fp8->n * 3, sizeof(double))))
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory for the FP8 amax reduction");
  if (rc->global_negatives)
    AMPC_TRY(R->kind->check_global_negatives(&R->md));
  if (rc->global_negatives && R->size > 1) {
    if (!rc->comm->allgather)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "global negatives: the communicator has no allgather");
    const ampc_model_group g = {(void *)rc->comm, R->rank, R->size, group_allgather, group_sum};
    AMPC_TRY(ampc_model_set_group(&R->model, &g));
  }
  if (R->kind->attn_cast_asked(&R->md) && !run_attn_cast(R))
    snprintf(R->notes[R->n_notes++], sizeof R->notes[0],
             "--attention-cast on has no effect under %s (its attention products are FP32 already)",
             ampc_precision_name(amp->precision));
  return AMPC_OK;
}

/* the checkpoint's state, after the check that it fits the run */
static ampc_status resume(ampc_run *R) {
  const ampc_run_config *rc = &R->rc;
  AMPC_TRY(run_resume_check(R));
  ampc_status st;
  if (rc->resume_path && (st = ampc_trainer_load(&R->T, rc->resume_path)) != AMPC_OK)
    return ampc_fail(st, "cannot resume: %s", ampc_last_error());
  if (rc->resume_path && R->model.fp8 &&
      (st = ampc_fp8_state_load(R->model.fp8, rc->resume_path, NULL)) != AMPC_OK)
    return ampc_fail(st, "cannot resume: %s", ampc_last_error());
  if (R->T.iteration > rc->steps)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s is at step %lld, beyond steps = %lld",
                     rc->resume_path, (long long)R->T.iteration, (long long)rc->steps);
  return AMPC_OK;
}

static ampc_status set_telemetry(ampc_run *R) {
  R->telemetry = calloc(1, sizeof *R->telemetry);
  if (!R->telemetry)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  if (R->model.ops->set_telemetry)
    R->model.ops->set_telemetry(&R->model, R->telemetry);
  return AMPC_OK;
}

ampc_status ampc_run_create(ampc_run **out, const ampc_run_config *rc, const ampc_amp_config *amp,
                            const ampc_optim_config *opt, const ampc_model_desc *md,
                            const ampc_run_data *data) {
  if (!out || !rc || !amp || !opt || !md || !data)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_create: NULL argument");
  *out = NULL;
  AMPC_TRY(check_config(rc));
  const run_kind *kind = run_kind_of(md);
  if (!kind)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_create: unknown model kind %d", (int)md->kind);
  AMPC_TRY(check_device(rc, md, kind));
  if (rc->overlap && (amp->scaler.mode == AMPC_LOSS_SCALE_PER_LOSS ||
                      amp->scaler.mode == AMPC_LOSS_SCALE_PER_BRANCH))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--overlap on with --loss-scale %s: the overlapped sum needs one loss scale "
                     "(one backward pass per micro-batch)",
                     amp->scaler.mode == AMPC_LOSS_SCALE_PER_LOSS ? "per-loss" : "per-branch");
  ampc_run *R = calloc(1, sizeof *R);
  if (!R)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_run_create: out of memory");
  R->rc = *rc, R->data = *data, R->md = *md, R->kind = kind;
  set_layout(R, amp);
  ampc_status st = set_feed(R);
  if (st == AMPC_OK)
    st = set_trainer(R, amp, opt);
  if (st == AMPC_OK)
    st = set_model(R, amp);
  if (st == AMPC_OK)
    st = resume(R);
  if (st == AMPC_OK)
    st = set_telemetry(R);
  if (st == AMPC_OK)
    st = run_check_start(R);
  if (st == AMPC_OK && rc->zero) /* after the checks and the resume: they read the whole state */
    st = ampc_trainer_set_zero(&R->T, R->accum.comm);
  if (st == AMPC_OK && rc->zero && R->size < 2 && R->n_notes < 6)
    snprintf(R->notes[R->n_notes++], sizeof R->notes[0],
             "--zero 1 in one process partitions nothing (start the ranks with mpirun -np N)");
  if (st != AMPC_OK) {
    ampc_run_free(R);
    return st;
  }
  *out = R;
  return AMPC_OK;
}

bool ampc_run_stalled(const ampc_run *R) { return R && R->stalled; }
bool ampc_run_interrupted(const ampc_run *R) { return R && R->interrupted; }
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

/* ---- the batches ----------------------------------------------------------------------- */

/* the sample at position pos of the run's sequence: a streamed sample's
 * shard * 2^32 + record, else the dataset's sample (the MLP: the training
 * feature row) */
static int64_t sample_at(ampc_run *R, int64_t pos) {
  if (R->data.stream) {
    int64_t shard, rec;
    ampc_stream_index(R->data.stream, pos, &shard, &rec);
    return shard * ((int64_t)1 << 32) + rec;
  }
  uint64_t h;
  return ampc_sample_draw(&R->smp, &R->groups, R->rc.seed, pos, &h);
}

/* ds's non-finite samples (batch positions of iteration R->it_no, from the
 * telemetry) as the run's sample numbers, with their keys: a packed
 * dataset's own (ampc_shards_key), the bundled data's caption and style */
static void name_samples(ampc_run *R, ampc_diag_step *ds) {
  const ampc_dataset *D = R->data.dataset;
  for (int i = 0; i < ds->n_nf_samples; i++) {
    const int64_t id = sample_at(R, R->it_no * R->rc.batch + ds->nf_sample[i]);
    char *key = ds->nf_key[i];
    const size_t kn = sizeof ds->nf_key[i];
    ds->nf_sample[i] = id;
    key[0] = '\0';
    if (R->data.stream && R->data.shards) {
      if (ampc_shards_key(R->data.shards, id >> 32, id & 0xFFFFFFFF, key, kn) != AMPC_OK)
        key[0] = '\0'; /* an older pack: no keys */
    } else if (!R->data.stream && D && D->captions && id >= 0 && id < D->n) {
      const int st = D->style ? D->style[id] : -1;
      snprintf(key, kn, "%s%s%s%s", D->captions[id] ? D->captions[id] : "",
               st >= 0 && D->style_names && st < D->n_styles ? " (" : "",
               st >= 0 && D->style_names && st < D->n_styles ? D->style_names[st] : "",
               st >= 0 && D->style_names && st < D->n_styles ? ")" : "");
    }
  }
}

ampc_status ampc_run_batch_samples(ampc_run *R, int64_t iteration, int64_t *out) {
  if (!R || !out || iteration < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_run_batch_samples: bad arguments");
  for (int64_t r = 0; r < R->rc.batch; r++)
    out[r] = sample_at(R, iteration * R->rc.batch + r);
  return AMPC_OK;
}

/* micro-batch k of iteration R->it_no on this rank: samples it_no * batch +
 * rank * (batch / size) + k * mb + r of the sampler's sequence (rank r's
 * shard is the r-th of `size` consecutive slices of the global batch) */
static ampc_status gather(void *user, int64_t k, ampc_batch *out) {
  ampc_run *R = user;
  const int64_t shard = R->rc.batch / R->size;
  memset(out, 0, sizeof *out);
  out->b = R->mb;
  const int64_t offset = R->rank * shard + k * R->mb, base = R->it_no * R->rc.batch + offset;
  R->kind->gather(R, base, out);
  if (R->telemetry) /* the telemetry names samples by batch position */
    R->telemetry->sample_offset = offset;
  for (int64_t r = 0; R->rc.extreme_factor != 0.0f && r < R->mb; r++)
    if (sample_at(R, base + r) == R->rc.extreme_sample)
      out->extreme_row = r, out->extreme_factor = R->rc.extreme_factor;
  return AMPC_OK;
}

/* ---- the loop ------------------------------------------------------------------------ */

/* Iteration R->it_no once more with telemetry on (anomaly replay): the same
 * batch (gather reads the iteration's positions), weights and scaler state
 * (the caller's), its gradients left unused; the scaler's plan is kept. */
static ampc_status replay(ampc_run *R) {
  ampc_trainer *T = &R->T;
  const ampc_scale_plan plan = T->plan;
  AMPC_TRY(ampc_telemetry_begin(R->telemetry));
  ampc_losses again;
  ampc_status st = ampc_train_accumulate_dp(T, &R->model, &R->accum, gather, R, &again);
  ampc_telemetry_end(R->telemetry);
  if (st == AMPC_OK)
    st = run_reduce_telemetry(R);
  T->plan = plan;
  return st;
}

/* whether every rank agrees that flag holds (the ranks' maximum) */
static ampc_status agree(ampc_run *R, bool *flag) {
  if (!R->accum.comm || R->size < 2)
    return AMPC_OK;
  double v = *flag ? 1.0 : 0.0;
  AMPC_TRY(R->accum.comm->max_f64(R->accum.comm->user, &v, 1));
  *flag = v > 0.0;
  return AMPC_OK;
}

/* One iteration after its telemetry began: the micro-batches (summed over
 * the ranks), the telemetry's end, the trainer's step with the scaler's
 * finish, and what the ranks agree on after it; an unsampled iteration
 * with non-finite values may be replayed with telemetry (*replayed).
 * Errors name the step. */
static ampc_status iterate(ampc_run *R, bool sampled, ampc_losses *mean, ampc_step_info *info,
                           bool *replayed) {
  ampc_trainer *T = &R->T;
  *replayed = false;
  const bool may_replay = !sampled && R->rc.anomaly_replay && R->model.ops->set_telemetry != NULL &&
                          R->telemetry && !R->model.fp8;
  ampc_status st = ampc_train_accumulate_dp(T, &R->model, &R->accum, gather, R, mean);
  ampc_telemetry_end(R->telemetry); /* the optimizer's stores are not the model's */
  if (st == AMPC_OK && sampled)
    st = run_reduce_telemetry(R);
  /* a non-finite loss: replayed before the step, at the same scale */
  bool bad_loss = may_replay && !isfinite(mean->total);
  if (st == AMPC_OK && may_replay)
    st = agree(R, &bad_loss);
  if (st == AMPC_OK && bad_loss)
    st = replay(R), *replayed = true;
  /* per-branch loss scaling picks each branch's next scale from the top of
   * its gradient histogram on sampled steps (not on a replay: the run's
   * bits do not depend on it) */
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++) {
    const ampc_tm_stats *g = &R->telemetry->s[AMPC_TM_GRAD][b];
    T->plan.amax[b] = sampled && g->r.count > 0 ? g->r.max_abs : -1.0f;
  }
  const ampc_scaler before = T->scaler;
  if (st == AMPC_OK)
    st = ampc_trainer_step(T, info);
  /* non-finite gradients of a finite loss, the step skipped (the weights
   * are those of the pass): replayed after it, at the scale it used */
  if (st == AMPC_OK && may_replay && !*replayed && info->skipped && info->overflow) {
    const ampc_scaler after = T->scaler;
    const int64_t iteration = T->iteration;
    T->scaler = before, T->iteration = iteration - 1;
    st = replay(R), *replayed = true;
    T->scaler = after, T->iteration = iteration;
  }
  if (st == AMPC_OK)
    st = run_fp8_end_step(R);
  if (st == AMPC_OK)
    st = run_check_replicas(R, info);
  return st == AMPC_OK ? AMPC_OK
                       : ampc_fail(st, "step %lld: %s", (long long)R->it_no + 1, ampc_last_error());
}

#define TRYR(call)                                                                                 \
  do {                                                                                             \
    st = (call);                                                                                   \
    if (st != AMPC_OK)                                                                             \
      goto out;                                                                                    \
  } while (0)

/* the evaluations still to come when step `iteration` has just run (its
 * own included): every eval_every-th step's in [iteration, end], and the
 * last step's */
static int64_t evals_after(const ampc_run_config *rc, int64_t iteration, int64_t end) {
  if (!rc->eval || iteration > end)
    return 0;
  const int64_t e = rc->eval_every;
  const int64_t every = e > 0 ? end / e - (iteration - 1) / e : 0;
  return every + (e > 0 && end % e == 0 ? 0 : 1);
}

/* the model's evaluation progress, to the run's observer */
typedef struct eval_hook {
  const ampc_run_callbacks *cb;
  const ampc_run *R;
  int64_t iteration;
} eval_hook;

static void on_eval_progress(void *user, double fraction) {
  const eval_hook *h = user;
  h->cb->eval_progress(h->cb->user, h->R, h->iteration, fraction);
}

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
  /* the ranks that take part in a save: rank 0 alone, or every rank when the
   * state is sharded (rank 0 gathers it) */
  const bool saver = lead || T->zero;
  if (lead && rc->log_path && rc->resume_path) {
    const ampc_status cs = run_cut_log(rc->log_path, T->iteration);
    if (cs != AMPC_OK)
      return cs;
  }
  if (lead && rc->log_path) {
    cJSON *first = run_config_object(R);
    if (!first)
      return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
    log = fopen(rc->log_path, rc->resume_path ? "a" : "w");
    if (!log) {
      const int e = errno;
      cJSON_Delete(first);
      return ampc_fail(AMPC_ERR_IO, "cannot open log file %s: %s", rc->log_path, strerror(e));
    }
    TRYR(run_log_line(log, rc->log_path, first));
  }
  const int64_t end = rc->stop_at > 0 && rc->stop_at < rc->steps ? rc->stop_at : rc->steps;
  run_totals tot = {.t_start = ampc_now_s()};
  const int64_t start_iter = T->iteration;
  ampc_diag_config dcfg;
  ampc_diag_config_from(&dcfg, T);
  ampc_diag_free(R->diag);
  R->diag = run_diag_start(&dcfg, rc->resume_path ? rc->log_path : NULL, T->iteration);
  if (!R->diag)
    TRYR(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
  /* telemetry only for models that mark their branches */
  const bool can_sample = m->ops->set_telemetry != NULL && rc->telemetry_every > 0;
  stall_state ss = {0};
  bool saved_end = false; /* the checkpoint of the last step is written */
  R->reduce_wait_s = 0.0; /* the summary's: this run's iterations */
  const uint64_t bytes0 = R->accum.comm && R->accum.comm->bytes_sent
                              ? R->accum.comm->bytes_sent(R->accum.comm->user)
                              : 0;
  while (T->iteration < end) {
    ampc_cpu_clock c0, c1;
    ampc_cpu_clock_read(&c0);
    const double t0 = c0.wall_s;
    const int64_t it_no = T->iteration;
    const bool sampled = can_sample && (it_no == 0 || (it_no + 1) % rc->telemetry_every == 0);
    if (sampled)
      TRYR(ampc_telemetry_begin(R->telemetry));
    R->it_no = it_no;
    R->data_wait_ms = 0.0;
    ampc_losses mean;
    ampc_step_info info;
    bool replayed;
    TRYR(iterate(R, sampled, &mean, &info, &replayed));
    ampc_cpu_clock_read(&c1);
    const double ms = (c1.wall_s - t0) * 1e3;
    ampc_cpu_use_add(&tot.cpu, &c0, &c1);
    if (R->accum.comm && R->accum.comm->bytes_sent)
      tot.bytes_sent = R->accum.comm->bytes_sent(R->accum.comm->user) - bytes0;
    tot.ms_sum += ms, tot.ms_n++;
    tot.wait_sum += R->data_wait_ms;
    tot.last = mean;
    if (!info.skipped)
      for (int i = 0; i < T->params.count; i++) {
        tot.sw.updated += T->swallow[i].updated, tot.sw.swallowed += T->swallow[i].swallowed;
        tot.sw.would_swallow += T->swallow[i].would_swallow;
      }
    ampc_diag_step ds;
    run_diag_step(&ds, R, &info, &mean, sampled || replayed);
    name_samples(R, &ds);
    TRYR(ampc_diag_add(R->diag, &ds));
    if (log && (info.iteration % rc->log_every == 0 || info.iteration == end || sampled ||
                replayed || info.overflow)) {
      cJSON *so = run_step_object(&info, &mean, ms, &ds, T->amp.scaler.mode, &R->model);
      if (so && replayed) /* its telemetry is the replay's */
        cJSON_AddBoolToObject(so, "anomaly_replay", true);
      if (so && R->data.stream) /* the wait for streamed data (prefetched: ~0) */
        cJSON_AddNumberToObject(so, "data_wait_ms", R->data_wait_ms);
      if (so && c0.own_s >= 0.0 && c1.own_s >= 0.0 && c1.wall_s > c0.wall_s) /* CPU cores used */
        cJSON_AddNumberToObject(so, "cores", (c1.own_s - c0.own_s) / (c1.wall_s - c0.wall_s));
      TRYR(run_log_line(log, rc->log_path, so));
    }
    const char *why = ss.reported ? NULL : run_stall_check(R, &ss, &info, mean.total);
    if (why) {
      ss.reported = true;
      if (log) {
        TRYR(run_log_line(log, rc->log_path, run_stall_object(R, info.iteration, why)));
      }
      if (lead && cb->stall)
        cb->stall(cb->user, R, info.iteration, why);
      if (rc->on_stall == AMPC_STALL_STOP) {
        R->stalled = true;
        R->summary = run_summary_object(R, &tot);
        if (log && R->summary)
          TRYR(run_log_line(log, rc->log_path, cJSON_Duplicate(R->summary, 1)));
        st = ampc_fail(AMPC_ERR_NUMERIC,
                       "stopped at step %lld: %s (on_stall stop: no checkpoint written after "
                       "this step)",
                       (long long)info.iteration, why);
        goto out;
      }
    }
    if (lead && cb->step) {
      const ampc_run_progress p = {&info,
                                   &mean,
                                   ms,
                                   ampc_now_s() - tot.t_start,
                                   end,
                                   start_iter,
                                   T->scaler.skip_count,
                                   tot.eval_s,
                                   tot.evals,
                                   evals_after(rc, info.iteration, end)};
      cb->step(cb->user, R, &p);
    }
    if (rc->interrupt) { /* asked to stop: after this iteration, on every rank */
      double stop = *rc->interrupt ? 1.0 : 0.0;
      if (R->accum.comm && R->size > 1)
        TRYR(R->accum.comm->max_f64(R->accum.comm->user, &stop, 1));
      if (stop > 0.0) {
        R->interrupted = true;
        if (log)
          TRYR(run_log_line(log, rc->log_path, run_interrupted_object(info.iteration)));
        break;
      }
    }
    const bool do_eval =
        lead && rc->eval &&
        ((rc->eval_every > 0 && info.iteration % rc->eval_every == 0) || info.iteration == end);
    if (saver && rc->save_path && info.iteration == end && !saved_end) {
      TRYR(run_save(R)); /* before the last evaluation: a signal during it loses nothing */
      saved_end = true;
    }
    if (do_eval) {
      const double e0 = ampc_now_s();
      eval_hook hook = {cb, R, info.iteration};
      m->eval_progress = cb->eval_progress ? on_eval_progress : NULL;
      m->eval_progress_user = &hook;
      /* a signal stops the evaluation too (the run's checkpoint at its last
       * step is written already); mid-run only alone: the other ranks would
       * go on to the next step */
      const bool cancellable = R->size == 1 || info.iteration == end;
      m->eval_cancel = cancellable ? rc->interrupt : NULL;
      st = ampc_model_evaluate(m, &R->data, &tot.ev);
      m->eval_progress = NULL, m->eval_progress_user = NULL, m->eval_cancel = NULL;
      tot.eval_s += ampc_now_s() - e0, tot.evals++;
      if (st != AMPC_OK && cancellable && rc->interrupt && *rc->interrupt) {
        st = AMPC_OK;
        R->interrupted = true;
        if (log)
          TRYR(run_log_line(log, rc->log_path, run_interrupted_object(info.iteration)));
        break;
      }
      if (st != AMPC_OK) {
        st = ampc_fail(st, "evaluation: %s", ampc_last_error());
        goto out;
      }
      tot.have_eval = true;
      if (cb->eval)
        cb->eval(cb->user, R, info.iteration, &tot.ev);
      if (log) {
        TRYR(run_log_line(log, rc->log_path, run_eval_object(R, info.iteration, &tot.ev)));
      }
    }
    if (saver && rc->save_path && rc->save_every > 0 && info.iteration % rc->save_every == 0 &&
        info.iteration != end) {
      /* not over the last good checkpoint while the run looks stuck (an
       * overflow at the floor, a non-finite loss or weights) */
      const bool unhealthy = ss.floor_run > 0 || ss.bad_loss > 0 || info.nonfinite_weights > 0;
      if (!unhealthy || rc->on_stall == AMPC_STALL_WARN) {
        TRYR(run_save(R));
      } else if (log) {
        TRYR(run_log_line(log, rc->log_path, run_save_skipped_object(info.iteration)));
      }
    }
  }
  if (saver && rc->save_path && !saved_end)
    TRYR(run_save(R));
  R->summary = run_summary_object(R, &tot);
  if (!R->summary)
    TRYR(ampc_fail(AMPC_ERR_NOMEM, "out of memory"));
  if (log)
    TRYR(run_log_line(log, rc->log_path, cJSON_Duplicate(R->summary, 1)));
out:
  if (log && fclose(log) != 0 && st == AMPC_OK)
    st = ampc_fail(AMPC_ERR_IO, "cannot write log file %s", rc->log_path);
  return st;
}
