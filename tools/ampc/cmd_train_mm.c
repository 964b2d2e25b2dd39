/*
 * tools/ampc/cmd_train_mm.c: the training loop of `ampc train` for the
 * multimodal image-text model on an image-text dataset (the bundled emoji
 * pairs by default): batches from a deterministic per-epoch permutation of
 * the training split, the engine's step, JSONL log lines, evaluation on the
 * two evaluation splits, checkpoints and resume.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/ampc.h"
#include "ampc/data.h"
#include "train.h"

static void add_metrics(cJSON *o, const char *name, const ampc_mm_metrics *m) {
  cJSON *x = cJSON_AddObjectToObject(o, name);
  if (!x)
    return;
  cJSON_AddNumberToObject(x, "samples", (double)m->samples);
  cJSON_AddNumberToObject(x, "concepts", (double)m->concepts);
  cJSON_AddNumberToObject(x, "i2t_r1", m->i2t_r1);
  cJSON_AddNumberToObject(x, "i2t_r5", m->i2t_r5);
  cJSON_AddNumberToObject(x, "t2i_r1", m->t2i_r1);
  cJSON_AddNumberToObject(x, "t2i_r5", m->t2i_r5);
  cJSON_AddNumberToObject(x, "chance_r1", m->concepts ? 1.0 / (double)m->concepts : 0.0);
  cJSON_AddNumberToObject(x, "itm_acc", m->itm_acc);
  cJSON_AddNumberToObject(x, "group_acc", m->cls_acc);
  cJSON_AddNumberToObject(x, "loss", m->loss);
  cJSON_AddNumberToObject(x, "itc", m->itc);
  cJSON_AddNumberToObject(x, "itm", m->itm);
  cJSON_AddNumberToObject(x, "cls", m->cls);
}

/* image-only models: accuracy and mean loss of the class head on a split */
static ampc_status eval_classes(ampc_mm *M, const ampc_dataset *d, int split, int64_t B,
                                double *acc, double *loss, int64_t *count) {
  const int64_t img_sz = (int64_t)d->height * d->width * d->channels;
  uint8_t *ib = malloc((size_t)(B * img_sz));
  int32_t *lb = malloc((size_t)B * sizeof *lb);
  if (!ib || !lb) {
    free(ib), free(lb);
    return ampc_fail(AMPC_ERR_NOMEM, "evaluation: out of memory");
  }
  double ls = 0, hits = 0;
  int64_t n = 0, k = 0;
  ampc_status st = AMPC_OK;
  for (int64_t i = 0; i <= d->n && st == AMPC_OK; i++) {
    if (i < d->n && d->split[i] == split) {
      memcpy(ib + k * img_sz, d->images + i * img_sz, (size_t)img_sz);
      lb[k++] = d->label[i];
    }
    if (k == B || (i == d->n && k > 0)) {
      ampc_mm_batch bt = {k, ib, NULL, lb};
      ampc_mm_losses L;
      st = ampc_mm_forward_backward(M, &bt, 0.0f, 1.0f, &L);
      ls += (double)L.cls * (double)k, hits += (double)L.cls_acc * (double)k, n += k;
      k = 0;
    }
  }
  free(ib), free(lb);
  *acc = n ? hits / (double)n : 0.0;
  *loss = n ? ls / (double)n : 0.0;
  *count = n;
  return st;
}

int train_run_mm(const train_args *A, cJSON **summary) {
  FILE *say = A->json ? stderr : stdout;
  ampc_dataset D;
  memset(&D, 0, sizeof D);
  int ret = cli_load_data("train", A->data, &D);
  if (ret)
    return ret;
  int64_t ntrain = 0;
  for (int64_t i = 0; i < D.n; i++)
    ntrain += D.split[i] == AMPC_SPLIT_TRAIN;
  if (A->batch > ntrain) {
    ampc_dataset_free(&D);
    return cli_usage_error("train", "--batch %lld is larger than the training split (%lld samples)",
                           (long long)A->batch, (long long)ntrain);
  }
  ampc_mm_config mc;
  /* image-only data: the default model becomes the image-only ViT */
  const char *model = A->model;
  if (!D.tokens && strcmp(model, "mm-tiny") == 0)
    model = "vit-fm";
  if (ampc_mm_config_get(model, D.vocab, D.seq_len, D.n_classes, &mc) != AMPC_OK) {
    ampc_dataset_free(&D);
    return cli_usage_error("train", "%s", ampc_last_error());
  }
  if (!mc.image_only && (D.seq_len <= 0 || !D.tokens)) {
    ampc_dataset_free(&D);
    return cli_usage_error("train",
                           "%s has no captions: model %s needs image-text pairs (use "
                           "an image-only model: vit-fm, vit-ref)",
                           A->data, mc.name);
  }
  const int eval_split = mc.image_only && ntrain < D.n
                             ? (D.tokens ? AMPC_SPLIT_NEW_STYLE : AMPC_SPLIT_TEST)
                             : AMPC_SPLIT_NEW_STYLE;
  if (D.height != mc.img || D.width != mc.img || D.channels != mc.channels) {
    const int h = D.height, w = D.width, c = D.channels; /* read before the free */
    ampc_dataset_free(&D);
    return cli_usage_error(
        "train", "model %s takes %lldx%lldx%lld images, the data '%s' has %dx%dx%d", mc.name,
        (long long)mc.img, (long long)mc.img, (long long)mc.channels, A->data, h, w, c);
  }
  mc.w_itc = A->w_itc, mc.w_itm = A->w_itm, mc.w_cls = A->w_cls;
  int64_t *train_idx = malloc((size_t)ntrain * sizeof *train_idx);
  const int64_t mb = A->batch / A->micro, img_sz = (int64_t)D.height * D.width * D.channels;
  uint8_t *bimg = malloc((size_t)(mb * img_sz));
  int32_t *btok = malloc((size_t)(mb * (D.seq_len > 0 ? D.seq_len : 1)) * sizeof *btok);
  int32_t *blab = malloc((size_t)mb * sizeof *blab);
  train_sampler smp = {.n = ntrain, .epoch = -1, .seed = A->seed};
  smp.perm = malloc((size_t)ntrain * sizeof *smp.perm);
  ampc_mm_specs sp = {0};
  ampc_trainer T;
  memset(&T, 0, sizeof T);
  ampc_mm *M = NULL;
  FILE *log = NULL;
  ampc_diag *diag = NULL;
  ampc_telemetry *tm = NULL;
  if (!train_idx || !bimg || !btok || !blab || !smp.perm) {
    ret = cli_runtime_error("train", "out of memory");
    goto out;
  }
  for (int64_t i = 0, k = 0; i < D.n; i++)
    if (D.split[i] == AMPC_SPLIT_TRAIN)
      train_idx[k++] = i;
  ampc_status ist = ampc_mm_specs_make(&mc, &sp);
  if (ist == AMPC_OK)
    ist = ampc_trainer_init(&T, &A->amp, &A->opt, sp.specs, sp.n, A->seed);
  if (ist != AMPC_OK) {
    ret = ist == AMPC_ERR_NOMEM ? cli_runtime_error("train", "%s", ampc_last_error())
                                : cli_usage_error("train", "%s", ampc_last_error());
    goto out;
  }
  if (ampc_mm_create(&M, &mc, &T, mb) != AMPC_OK) {
    ret = cli_runtime_error("train", "%s", ampc_last_error());
    goto out;
  }
  if (A->resume && ampc_trainer_load(&T, A->resume) != AMPC_OK) {
    ret = cli_runtime_error("train", "cannot resume: %s", ampc_last_error());
    goto out;
  }
  if (T.iteration > A->steps) {
    ret = cli_usage_error("train", "%s is at step %lld, beyond --steps %lld", A->resume,
                          (long long)T.iteration, (long long)A->steps);
    goto out;
  }
  cJSON *run_o = cJSON_CreateObject();
  cJSON_AddStringToObject(run_o, "model", mc.name);
  cJSON_AddStringToObject(run_o, "data", A->data);
  cJSON_AddNumberToObject(run_o, "train_samples", (double)ntrain);
  cJSON_AddNumberToObject(run_o, "vocab", (double)D.vocab);
  cJSON_AddNumberToObject(run_o, "seq_len", (double)D.seq_len);
  cJSON_AddNumberToObject(run_o, "classes", (double)D.n_classes);
  cJSON_AddNumberToObject(run_o, "w_itc", (double)mc.w_itc);
  cJSON_AddNumberToObject(run_o, "w_itm", (double)mc.w_itm);
  cJSON_AddNumberToObject(run_o, "w_cls", (double)mc.w_cls);
  cJSON_AddNumberToObject(run_o, "activation_bytes", (double)ampc_mm_activation_bytes(M));
  cJSON *first = train_config_line(&T, A, run_o, say);
  if (!first) {
    ret = cli_runtime_error("train", "out of memory");
    goto out;
  }
  if (A->log) {
    log = fopen(A->log, A->resume ? "a" : "w");
    if (!log) {
      cJSON_Delete(first);
      ret = cli_runtime_error("train", "cannot open log file %s: %s", A->log, strerror(errno));
      goto out;
    }
    if (!train_log_line(log, first)) {
      ret = cli_runtime_error("train", "cannot write log file %s", A->log);
      goto out;
    }
  } else {
    cJSON_Delete(first);
  }
  char model_meta[256];
  snprintf(model_meta, sizeof model_meta,
           "{\"model\":\"%s\",\"vocab\":%lld,\"seq_len\":%lld,\"classes\":%lld,\"w_itc\":%g,"
           "\"w_itm\":%g,\"w_cls\":%g}",
           mc.name, (long long)mc.vocab, (long long)mc.seq_len, (long long)mc.classes,
           (double)mc.w_itc, (double)mc.w_itm, (double)mc.w_cls);
  const ampc_st_meta meta[3] = {
      {"ampc.model", mc.name}, {"ampc.model_config", model_meta}, {"ampc.data", A->data}};
  const int64_t end = A->stop_at > 0 && A->stop_at < A->steps ? A->stop_at : A->steps;
  const bool tty = !A->quiet && isatty(fileno(stderr));
  const int64_t every = A->steps >= 20 ? A->steps / 20 : 1;
  const double t_start = train_now_s();
  const int64_t start_iter = T.iteration;
  ampc_mm_losses last = {0};
  ampc_mm_metrics ev_new = {0}, ev_zero = {0};
  bool have_eval = false;
  double ev_acc = 0, ev_loss = 0;
  int64_t ev_count = 0;
  double ms_sum = 0;
  int64_t ms_n = 0;
  ampc_diag_config dcfg;
  ampc_diag_config_from(&dcfg, &T);
  diag = train_diag_start(&dcfg, A->resume ? A->log : NULL, T.iteration);
  tm = calloc(1, sizeof *tm);
  if (!diag || !tm) {
    ret = cli_runtime_error("train", "out of memory");
    goto out;
  }
  ampc_mm_set_telemetry(M, tm);
  while (T.iteration < end) {
    const double t0 = train_now_s();
    const int64_t it_no = T.iteration;
    const bool sampled = A->tm_every > 0 && (it_no == 0 || (it_no + 1) % A->tm_every == 0);
    if (sampled && ampc_telemetry_begin(tm) != AMPC_OK) {
      ret = cli_runtime_error("train", "%s", ampc_last_error());
      goto out;
    }
    ampc_trainer_zero_grad(&T);
    const float S = ampc_trainer_loss_scale(&T);
    ampc_mm_losses sum = {0};
    for (int64_t k = 0; k < A->micro; k++) {
      for (int64_t r = 0; r < mb; r++) {
        const int64_t src = train_idx[train_sample_index(&smp, it_no * A->batch + k * mb + r)];
        memcpy(bimg + r * img_sz, D.images + src * img_sz, (size_t)img_sz);
        memcpy(btok + r * D.seq_len, D.tokens + src * D.seq_len, (size_t)D.seq_len * sizeof *btok);
        blab[r] = D.label[src];
      }
      ampc_mm_batch bt = {mb, bimg, mc.image_only ? NULL : btok, blab};
      ampc_mm_losses L;
      if (ampc_mm_forward_backward(M, &bt, S, (float)A->micro, &L) != AMPC_OK) {
        ret = cli_runtime_error("train", "step %lld: %s", (long long)it_no + 1, ampc_last_error());
        goto out;
      }
      const float w = 1.0f / (float)A->micro;
      sum.total += w * L.total, sum.itc += w * L.itc, sum.itm += w * L.itm, sum.cls += w * L.cls;
      sum.itm_acc += w * L.itm_acc, sum.cls_acc += w * L.cls_acc;
    }
    ampc_telemetry_end(tm);
    ampc_step_info info;
    if (ampc_trainer_step(&T, &info) != AMPC_OK) {
      ret = cli_runtime_error("train", "step %lld: %s", (long long)it_no + 1, ampc_last_error());
      goto out;
    }
    const double ms = (train_now_s() - t0) * 1e3;
    ms_sum += ms, ms_n++;
    last = sum;
    ampc_diag_step ds;
    ampc_diag_step_fill(&ds, &T, &info, (double)sum.total, sampled ? tm : NULL);
    if (ampc_diag_add(diag, &ds) != AMPC_OK) {
      ret = cli_runtime_error("train", "%s", ampc_last_error());
      goto out;
    }
    if (log &&
        (info.iteration % A->log_every == 0 || info.iteration == end || sampled || info.overflow)) {
      cJSON *o = train_step_line(&info, (double)sum.total, ms, &ds);
      if (o) {
        cJSON_AddNumberToObject(o, "loss_itc", (double)sum.itc);
        cJSON_AddNumberToObject(o, "loss_itm", (double)sum.itm);
        cJSON_AddNumberToObject(o, "loss_cls", (double)sum.cls);
        cJSON_AddNumberToObject(o, "itm_acc", (double)sum.itm_acc);
        cJSON_AddNumberToObject(o, "group_acc", (double)sum.cls_acc);
      }
      if (!o || !train_log_line(log, o)) {
        ret = cli_runtime_error("train", "cannot write log file %s", A->log);
        goto out;
      }
    }
    const double elapsed = train_now_s() - t_start;
    const int64_t done_here = info.iteration - start_iter;
    const double eta =
        done_here > 0 ? elapsed / (double)done_here * (double)(end - info.iteration) : 0.0;
    if (tty)
      fprintf(stderr,
              "\rstep %lld/%lld  loss %.4f  scale %g  skipped %lld  %.2f it/s  ETA %.0f s   ",
              (long long)info.iteration, (long long)A->steps, (double)sum.total,
              (double)info.next_scale, (long long)T.scaler.skip_count,
              elapsed > 0 ? (double)done_here / elapsed : 0.0, eta);
    else if (!A->quiet && (info.iteration % every == 0 || info.iteration == end))
      fprintf(say,
              "step %lld/%lld  loss %.4f (itc %.4f itm %.4f cls %.4f)  scale %g  skipped %lld\n",
              (long long)info.iteration, (long long)A->steps, (double)sum.total, (double)sum.itc,
              (double)sum.itm, (double)sum.cls, (double)info.next_scale,
              (long long)T.scaler.skip_count);
    const bool do_eval =
        !A->no_eval &&
        ((A->eval_every > 0 && info.iteration % A->eval_every == 0) || info.iteration == end);
    if (do_eval && mc.image_only) {
      if (eval_classes(M, &D, eval_split, mb, &ev_acc, &ev_loss, &ev_count) != AMPC_OK) {
        ret = cli_runtime_error("train", "evaluation: %s", ampc_last_error());
        goto out;
      }
      have_eval = true;
      if (tty)
        fputc('\n', stderr);
      if (!A->quiet)
        fprintf(say, "eval @%lld  %s: accuracy %.4f, loss %.4f (%lld images)\n",
                (long long)info.iteration, eval_split == AMPC_SPLIT_TEST ? "test" : "new style",
                ev_acc, ev_loss, (long long)ev_count);
      if (log) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "eval");
        cJSON_AddNumberToObject(o, "step", (double)info.iteration);
        cJSON *m = cJSON_AddObjectToObject(o, "metrics");
        cJSON_AddNumberToObject(m, "test_accuracy", ev_acc);
        cJSON_AddNumberToObject(m, "test_loss", ev_loss);
        cJSON_AddNumberToObject(m, "test_samples", (double)ev_count);
        if (!train_log_line(log, o)) {
          ret = cli_runtime_error("train", "cannot write log file %s", A->log);
          goto out;
        }
      }
    } else if (do_eval) {
      if (ampc_mm_evaluate(M, &D, AMPC_SPLIT_NEW_STYLE, &ev_new) != AMPC_OK ||
          ampc_mm_evaluate(M, &D, AMPC_SPLIT_ZERO_SHOT, &ev_zero) != AMPC_OK) {
        ret = cli_runtime_error("train", "evaluation: %s", ampc_last_error());
        goto out;
      }
      have_eval = true;
      if (tty)
        fputc('\n', stderr);
      if (!A->quiet)
        fprintf(say,
                "eval @%lld  new style: R@1 i2t %.3f t2i %.3f (chance %.4f), group %.3f  |  "
                "zero-shot: R@1 i2t %.3f t2i %.3f (chance %.3f)\n",
                (long long)info.iteration, ev_new.i2t_r1, ev_new.t2i_r1,
                ev_new.concepts ? 1.0 / (double)ev_new.concepts : 0.0, ev_new.cls_acc,
                ev_zero.i2t_r1, ev_zero.t2i_r1,
                ev_zero.concepts ? 1.0 / (double)ev_zero.concepts : 0.0);
      if (log) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "eval");
        cJSON_AddNumberToObject(o, "step", (double)info.iteration);
        cJSON *m = cJSON_AddObjectToObject(o, "metrics");
        add_metrics(m, "new_style", &ev_new);
        add_metrics(m, "zero_shot", &ev_zero);
        if (!train_log_line(log, o)) {
          ret = cli_runtime_error("train", "cannot write log file %s", A->log);
          goto out;
        }
      }
    }
    if (A->save && A->save_every > 0 && info.iteration % A->save_every == 0 &&
        info.iteration != end && ampc_trainer_save(&T, A->save, meta, 3) != AMPC_OK) {
      ret = cli_runtime_error("train", "%s", ampc_last_error());
      goto out;
    }
  }
  if (A->save && ampc_trainer_save(&T, A->save, meta, 3) != AMPC_OK) {
    ret = cli_runtime_error("train", "%s", ampc_last_error());
    goto out;
  }
  {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "summary");
    cJSON_AddStringToObject(o, "model", mc.name);
    cJSON_AddStringToObject(o, "precision", ampc_precision_name(T.amp.precision));
    cJSON_AddNumberToObject(o, "steps", (double)T.iteration);
    cJSON_AddNumberToObject(o, "optimizer_steps", (double)T.step);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)T.scaler.skip_count);
    cJSON_AddNumberToObject(o, "overflow_steps", (double)T.scaler.overflow_count);
    cJSON_AddNumberToObject(o, "final_loss_scale", (double)T.scaler.scale);
    cJSON_AddNumberToObject(o, "final_train_loss", (double)last.total);
    cJSON_AddNumberToObject(o, "ms_per_step_mean", ms_n ? ms_sum / (double)ms_n : 0.0);
    cJSON_AddNumberToObject(o, "wall_s", train_now_s() - t_start);
    cJSON_AddNumberToObject(o, "activation_bytes", (double)ampc_mm_activation_bytes(M));
    size_t pbytes = 0;
    for (int r = 0; r < AMPC_ROLE_COUNT; r++)
      pbytes += T.params.bytes[r];
    cJSON_AddNumberToObject(o, "parameter_state_bytes", (double)pbytes);
    {
      /* the memory account as allocated (ampc memory predicts the same roles) */
      size_t act = 0, ws = 0;
      if (ampc_mm_plan_bytes(&mc, mb, T.amp.precision, &act, &ws) != AMPC_OK ||
          act + ws != ampc_mm_activation_bytes(M))
        act = ampc_mm_activation_bytes(M), ws = 0;
      train_add_memory(o, &T, act, ws);
    }
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)ampc_peak_rss_bytes());
    if (have_eval && mc.image_only) {
      cJSON *m = cJSON_AddObjectToObject(o, "metrics");
      cJSON_AddNumberToObject(m, "test_accuracy", ev_acc);
      cJSON_AddNumberToObject(m, "test_loss", ev_loss);
      cJSON_AddNumberToObject(m, "test_samples", (double)ev_count);
    } else if (have_eval) {
      cJSON *m = cJSON_AddObjectToObject(o, "metrics");
      add_metrics(m, "new_style", &ev_new);
      add_metrics(m, "zero_shot", &ev_zero);
    }
    cJSON_AddStringToObject(o, "checkpoint", A->save ? A->save : "");
    if (!train_add_diagnosis(o, diag, say, A->quiet || A->json)) {
      cJSON_Delete(o);
      ret = cli_runtime_error("train", "out of memory");
      goto out;
    }
    if (summary)
      *summary = cJSON_Duplicate(o, 1);
    if (log && !train_log_line(log, cJSON_Duplicate(o, 1))) {
      cJSON_Delete(o);
      ret = cli_runtime_error("train", "cannot write log file %s", A->log);
      goto out;
    }
    if (A->json) {
      ret = cli_print_json("train", o);
    } else {
      if (!A->quiet)
        fprintf(say, "done: %lld steps (%lld skipped), %.1f s%s%s\n", (long long)T.iteration,
                (long long)T.scaler.skip_count, train_now_s() - t_start,
                A->save ? ", checkpoint " : "", A->save ? A->save : "");
      cJSON_Delete(o);
    }
  }
out:
  if (log && fclose(log) != 0 && ret == AMPC_EXIT_OK)
    ret = cli_runtime_error("train", "cannot write log file %s", A->log);
  ampc_telemetry_end(tm);
  free(tm);
  ampc_diag_free(diag);
  ampc_mm_free(M);
  ampc_trainer_free(&T);
  ampc_mm_specs_free(&sp);
  ampc_dataset_free(&D);
  free(train_idx), free(bimg), free(btok), free(blab), free(smp.perm);
  return ret;
}
