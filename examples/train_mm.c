/*
 * examples/train_mm.c: a whole `ampc train` run through the public library
 * (include/ampc/train.h), no CLI code: the multimodal model on an image-text
 * dataset file, 16-mixed with dynamic loss scaling, AdamW on FP32 master
 * weights, a JSON Lines log and a safetensors checkpoint. The same settings on
 * the command line,
 *
 *   ampc train --model MODEL --data DATA --steps N --batch B --seed 1
 *              --eval-every 0 --log LOG --save CKPT
 *
 * write the same checkpoint, bit for bit, and the same log up to the timings
 * (tests/check_example.sh checks it).
 *
 * Usage: train_mm DATA LOG CKPT [MODEL (mm-micro)] [STEPS (4)] [BATCH (8)]
 */
#include <stdio.h>
#include <stdlib.h>

#include "ampc/ampc.h"

static void progress(void *user, const ampc_run *R, const ampc_run_progress *p) {
  (void)user, (void)R;
  printf("step %lld  loss %.4f  loss scale %g%s\n", (long long)p->info->iteration,
         (double)p->losses->total, (double)p->info->loss_scale,
         p->info->skipped ? "  (skipped: inf/NaN gradients)" : "");
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 7) {
    fprintf(stderr, "usage: %s DATA LOG CKPT [MODEL] [STEPS] [BATCH]\n", argv[0]);
    return 2;
  }
  ampc_dataset data;
  if (ampc_dataset_load(argv[1], &data) != AMPC_OK) {
    fprintf(stderr, "train_mm: %s\n", ampc_last_error());
    return 1;
  }
  /* the model for this data's vocabulary, caption length and groups */
  ampc_model_desc model;
  if (ampc_model_desc_get(argc > 4 ? argv[4] : "mm-micro", &data, &model) != AMPC_OK) {
    fprintf(stderr, "train_mm: %s\n", ampc_last_error());
    ampc_dataset_free(&data);
    return 2;
  }
  /* precision: the 16-mixed preset (FP16 weights and activations, FP32 master
   * weights, dynamic loss scale 2^16, FP32 accumulation) */
  ampc_amp_config amp;
  ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp);
  /* the run: the CLI's defaults, as `ampc train` sets them */
  ampc_run_config rc = ampc_run_config_defaults();
  rc.steps = argc > 5 ? atoll(argv[5]) : 4;
  rc.batch = argc > 6 ? atoll(argv[6]) : 8;
  rc.eval_every = 0; /* evaluate once, at the end */
  rc.log_path = argv[2];
  rc.save_path = argv[3];
  /* AdamW, warmup 20 steps (never longer than the run), cosine decay */
  ampc_optim_config opt = ampc_optim_adamw_defaults();
  opt.warmup_steps = rc.steps < 20 ? rc.steps : 20;
  opt.total_steps = rc.steps;
  const ampc_run_data rd = {.dataset = &data, .name = argv[1]};
  ampc_run *run = NULL;
  int rc_exit = 0;
  if (ampc_run_create(&run, &rc, &amp, &opt, &model, &rd) != AMPC_OK) {
    fprintf(stderr, "train_mm: %s\n", ampc_last_error());
    rc_exit = 1;
  } else {
    const ampc_run_callbacks cb = {.step = progress};
    if (ampc_run_train(run, &cb) != AMPC_OK) {
      fprintf(stderr, "train_mm: %s\n", ampc_last_error());
      rc_exit = 1;
    } else {
      ampc_verdict v;
      ampc_diag_verdicts(ampc_run_diag(run), &v, 1);
      printf("done: %lld steps, diagnosis %s, checkpoint %s\n",
             (long long)ampc_run_trainer(run)->iteration, ampc_verdict_name(v.kind), argv[3]);
    }
  }
  ampc_run_free(run);
  ampc_dataset_free(&data);
  return rc_exit;
}
