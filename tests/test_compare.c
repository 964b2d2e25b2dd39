/*
 * tests/test_compare.c: the precision comparison of include/ampc/train.h
 * (ampc_compare_run). Each run of a comparison gives the bits of the same run
 * alone (its summary's loss, its checkpoint); the results carry the summary's
 * numbers and the diagnosis; the callbacks see every run in order; the FP32
 * twin's comparison reads the logs back; a failing run stops the list or not
 * as asked; bad arguments are refused.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/ampc.h"

enum { IN = 8, CLS = 3, NTRAIN = 256, NTEST = 128, STEPS = 60 };

static float g_x[(NTRAIN + NTEST) * IN];
static int32_t g_y[NTRAIN + NTEST];
static ampc_run_data g_data;
static char g_dir[64];

static int setup(void **state) {
  (void)state;
  ampc_synth_blobs(NTRAIN + NTEST, IN, CLS, 0.6f, 7, g_x, g_y);
  g_data = (ampc_run_data){.n_train = NTRAIN,
                           .n_test = NTEST,
                           .dim = IN,
                           .x_train = g_x,
                           .x_test = g_x + NTRAIN * IN,
                           .y_train = g_y,
                           .y_test = g_y + NTRAIN,
                           .name = "blobs"};
  snprintf(g_dir, sizeof g_dir, "/tmp/ampc_test_compare_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* an MLP run in preset p; its log and checkpoint in the test directory
 * (LABEL.jsonl, LABEL.st; log and save: 128 bytes each) unless log is NULL */
static void spec_for(ampc_compare_spec *s, ampc_precision p, const char *label, char *log,
                     char *save) {
  memset(s, 0, sizeof *s);
  s->label = label;
  s->rc = ampc_run_config_defaults();
  s->rc.steps = STEPS, s->rc.batch = 32, s->rc.eval_every = 0, s->rc.seed = 3;
  s->rc.telemetry_every = 10;
  if (log) {
    snprintf(log, 128, "%s/%s.jsonl", g_dir, label);
    snprintf(save, 128, "%s/%s.st", g_dir, label);
    s->rc.log_path = log, s->rc.save_path = save;
  }
  ampc_amp_config_preset(p, &s->amp);
  s->opt = ampc_optim_adamw_defaults();
  s->opt.lr = 1e-3f, s->opt.total_steps = STEPS;
  assert_int_equal(ampc_model_desc_get("mlp", NULL, &s->md), AMPC_OK);
  s->md.mlp = (ampc_mlp_config){.in = IN, .hidden = 16, .classes = CLS};
  s->data = &g_data;
}

/* the run alone: its summary's final loss and, when save is set, its checkpoint bytes */
static double alone(const ampc_compare_spec *s) {
  ampc_run *R = NULL;
  assert_int_equal(ampc_run_create(&R, &s->rc, &s->amp, &s->opt, &s->md, s->data), AMPC_OK);
  assert_int_equal(ampc_run_train(R, NULL), AMPC_OK);
  assert_int_equal(ampc_run_trainer(R)->iteration, STEPS);
  char *txt = ampc_run_summary_json(R);
  assert_non_null(txt);
  const char *f = strstr(txt, "\"final_train_loss\":");
  assert_non_null(f);
  const double v = strtod(f + strlen("\"final_train_loss\":"), NULL);
  free(txt);
  ampc_run_free(R);
  return v;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(*n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

typedef struct seen {
  int starts, ends, steps, order[8];
} seen;

static void on_start(void *user, int k, ampc_run *R) {
  seen *s = user;
  assert_non_null(R);
  s->order[s->starts++] = k;
}
static void on_step(void *user, const ampc_run *R, const ampc_run_progress *p) {
  (void)R, (void)p;
  ((seen *)user)->steps++;
}
static void on_end(void *user, int k, ampc_run *R, const ampc_compare_result *res) {
  seen *s = user;
  (void)R;
  assert_int_equal(s->order[s->ends++], k);
  assert_true(res->ran);
}

/* two presets side by side: the bits of each alone, the summary's numbers,
 * the callbacks in order, and the FP32 twin's comparison */
static void test_two_presets(void **state) {
  (void)state;
  ampc_compare_spec s[2];
  char log[2][128], save[2][128];
  spec_for(&s[0], AMPC_PRECISION_32_TRUE, "fp32", log[0], save[0]);
  spec_for(&s[1], AMPC_PRECISION_BF16_TRUE, "bt", log[1], save[1]);
  seen sn = {0};
  const ampc_compare_callbacks cb = {
      .user = &sn, .run_start = on_start, .run = {&sn, on_step, NULL, NULL}, .run_end = on_end};
  const ampc_compare_options opt = {.vs_fp32 = true};
  ampc_compare_result res[2];
  assert_int_equal(ampc_compare_run(s, 2, &opt, &cb, res), AMPC_OK);
  assert_int_equal(sn.starts, 2);
  assert_int_equal(sn.ends, 2);
  assert_int_equal(sn.steps, 2 * STEPS);
  size_t n0, n1;
  char *ck0 = slurp(save[0], &n0), *ck1 = slurp(save[1], &n1);
  for (int k = 0; k < 2; k++) {
    assert_true(res[k].ran);
    assert_int_equal(res[k].status, AMPC_OK);
    assert_non_null(res[k].summary_json);
    assert_int_equal(res[k].steps, STEPS);
    assert_true(isfinite(res[k].final_loss) && res[k].final_loss > 0.0);
    assert_true(isfinite(res[k].test_accuracy));
    assert_true(isnan(res[k].new_i2t_r1)); /* no retrieval: the MLP */
    assert_true(res[k].ms_per_step > 0.0 && res[k].activation_mib > 0.0);
    assert_true(res[k].peak_rss_bytes > 0.0);
    assert_true(res[k].n_verdicts >= 1);
    assert_non_null(res[k].diag);
    assert_int_equal(res[k].baseline, 0);
  }
  assert_false(res[0].have_gap); /* the baseline itself */
  assert_true(res[1].have_gap);
  assert_int_equal(res[1].gap_error[0], '\0');
  /* each run alone gives the same loss and the same checkpoint */
  for (int k = 0; k < 2; k++) {
    char path[160];
    snprintf(path, sizeof path, "%s/alone.st", g_dir);
    ampc_compare_spec a = s[k];
    a.rc.log_path = NULL, a.rc.save_path = path;
    assert_true(alone(&a) == res[k].final_loss);
    size_t m;
    char *ck = slurp(path, &m);
    assert_int_equal(m, k ? n1 : n0);
    assert_memory_equal(ck, k ? ck1 : ck0, m);
    free(ck);
  }
  free(ck0), free(ck1);
  ampc_compare_results_free(res, 2);
}

/* a run that cannot start (batch larger than the training set): refused;
 * stop_on_error leaves the later runs unstarted, else they run */
static void test_failing_run(void **state) {
  (void)state;
  ampc_compare_spec s[2];
  spec_for(&s[0], AMPC_PRECISION_32_TRUE, "big", NULL, NULL);
  spec_for(&s[1], AMPC_PRECISION_16_MIXED, "ok", NULL, NULL);
  s[0].rc.batch = NTRAIN + 1;
  ampc_compare_result res[2];
  ampc_compare_options opt = {.stop_on_error = true};
  assert_int_equal(ampc_compare_run(s, 2, &opt, NULL, res), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "run big: "));
  assert_true(res[0].ran && res[0].refused);
  assert_non_null(res[0].error[0] ? res[0].error : NULL);
  assert_null(res[0].summary_json);
  assert_true(isnan(res[0].final_loss));
  assert_false(res[1].ran);
  ampc_compare_results_free(res, 2);
  opt.stop_on_error = false;
  assert_int_equal(ampc_compare_run(s, 2, &opt, NULL, res), AMPC_ERR_INVALID_ARG);
  assert_true(res[0].refused);
  assert_true(res[1].ran);
  assert_int_equal(res[1].status, AMPC_OK);
  assert_non_null(res[1].summary_json);
  assert_null(res[1].diag); /* no vs_fp32 */
  ampc_compare_results_free(res, 2);
}

static void test_bad_args(void **state) {
  (void)state;
  ampc_compare_spec s;
  spec_for(&s, AMPC_PRECISION_32_TRUE, "x", NULL, NULL);
  ampc_compare_result r;
  assert_int_equal(ampc_compare_run(&s, 0, NULL, NULL, &r), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_compare_run(NULL, 1, NULL, NULL, &r), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_compare_run(&s, 1, NULL, NULL, NULL), AMPC_ERR_INVALID_ARG);
  ampc_compare_results_free(NULL, 3); /* nothing to free */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_presets),
      cmocka_unit_test(test_failing_run),
      cmocka_unit_test(test_bad_args),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
