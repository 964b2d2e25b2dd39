/*
 * tests/test_memory.c: the memory account (include/ampc/report.h). The
 * predicted bytes per role equal, exactly, what a real trainer and model
 * allocate (mm-micro and vit-micro, 32-true and 16-mixed, several batches);
 * the literature's per-parameter table (16 B with Adam in 32-true and
 * 16-mixed); mm-tiny's 16-mixed activations are well below 32-true's; the
 * planner's batch is the largest that fits; byte counts parse with their
 * suffixes and garbage is refused; the peak RSS is positive and grows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"
#include "ampc/report.h"

static ampc_amp_config preset(ampc_precision p) {
  ampc_amp_config a;
  assert_int_equal(ampc_amp_config_preset(p, &a), AMPC_OK);
  return a;
}

/* predicted == allocated for one model, preset, optimizer and batch */
static void check_exact(const char *name, ampc_precision p, bool sgd, int64_t batch) {
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get(name, 11, 5, 3, &c), AMPC_OK);
  const ampc_amp_config amp = preset(p);
  const ampc_optim_config opt = sgd ? ampc_optim_sgd_defaults() : ampc_optim_adamw_defaults();
  ampc_mem_account m;
  assert_int_equal(ampc_mem_account_mm(&c, batch, &amp, ampc_optim_moments(&opt), &m), AMPC_OK);
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_mmodel_specs_make(&c, &sp), AMPC_OK);
  ampc_trainer T;
  assert_int_equal(ampc_trainer_init(&T, &amp, &opt, sp.specs, sp.n, 1), AMPC_OK);
  ampc_mmodel *M = NULL;
  assert_int_equal(ampc_mmodel_create(&M, &c, &T.params, &T.amp, batch), AMPC_OK);
  const ampc_params *P = &T.params;
  assert_int_equal(m.params, P->numel);
  assert_int_equal(m.elements, P->total);
  assert_int_equal(m.bytes[AMPC_MEM_WEIGHTS], P->bytes[AMPC_ROLE_WEIGHTS]);
  assert_int_equal(m.bytes[AMPC_MEM_MASTER], P->bytes[AMPC_ROLE_MASTER]);
  assert_int_equal(m.bytes[AMPC_MEM_GRADS], P->bytes[AMPC_ROLE_GRADS]);
  assert_int_equal(m.bytes[AMPC_MEM_MOMENTS],
                   P->bytes[AMPC_ROLE_MOMENT1] + P->bytes[AMPC_ROLE_MOMENT2]);
  assert_int_equal(m.bytes[AMPC_MEM_ACTIVATIONS] + m.bytes[AMPC_MEM_WORKSPACE],
                   ampc_mmodel_activation_bytes(M));
  assert_true(m.bytes[AMPC_MEM_ACTIVATIONS] > 0 && m.bytes[AMPC_MEM_WORKSPACE] > 0);
  size_t sum = 0;
  for (int r = 0; r < AMPC_MEM_ROLE_COUNT; r++)
    sum += m.bytes[r];
  assert_int_equal(m.total, sum);
  ampc_mmodel_free(M);
  ampc_trainer_free(&T);
  ampc_mmodel_specs_free(&sp);
}

static void test_prediction_is_exact(void **state) {
  (void)state;
  const char *models[] = {"mm-micro", "vit-micro"};
  const ampc_precision ps[] = {AMPC_PRECISION_32_TRUE, AMPC_PRECISION_16_MIXED};
  const int64_t batches[] = {2, 7, 32};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++)
        check_exact(models[i], ps[j], false, batches[k]);
  /* the other presets and SGD's single buffer too */
  check_exact("mm-micro", AMPC_PRECISION_16_TRUE, false, 4);
  check_exact("mm-micro", AMPC_PRECISION_BF16_MIXED, true, 4);
  check_exact("vit-micro", AMPC_PRECISION_BF16_TRUE, true, 4);
}

/* Micikevicius et al. 2018 / ZeRO's table: 16 bytes per parameter with Adam
 * in both 32-true and 16-mixed; 1.2e9 parameters -> 19.2 GB either way. */
static void test_per_parameter_table(void **state) {
  (void)state;
  const int64_t n = 1200000000;
  ampc_mem_account a, b;
  ampc_amp_config f32 = preset(AMPC_PRECISION_32_TRUE), mixed = preset(AMPC_PRECISION_16_MIXED);
  assert_int_equal(ampc_mem_account_params(n, &f32, 2, &a), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(n, &mixed, 2, &b), AMPC_OK);
  assert_true(a.bytes_per_param == 16.0 && b.bytes_per_param == 16.0);
  assert_int_equal(a.total, 19200000000u);
  assert_int_equal(b.total, 19200000000u);
  assert_int_equal(a.bytes[AMPC_MEM_WEIGHTS], 4 * n);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 0);
  assert_int_equal(b.bytes[AMPC_MEM_WEIGHTS], 2 * n);
  assert_int_equal(b.bytes[AMPC_MEM_MASTER], 4 * n);
  assert_int_equal(b.bytes[AMPC_MEM_GRADS], 2 * n);
  assert_int_equal(b.bytes[AMPC_MEM_MOMENTS], 8 * n);
  /* 16-true: no master, binary16 moments: 2 + 2 + 4 = 8 */
  ampc_amp_config t16 = preset(AMPC_PRECISION_16_TRUE);
  assert_int_equal(ampc_mem_account_params(n, &t16, 2, &a), AMPC_OK);
  assert_true(a.bytes_per_param == 8.0);
  /* 16-mixed without master, SGD momentum: 2 + 2 + 4 = 8; no optimizer: 4 */
  assert_int_equal(ampc_amp_config_set(&mixed, "master-weights", "off"), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(n, &mixed, 1, &a), AMPC_OK);
  assert_true(a.bytes_per_param == 8.0);
  assert_int_equal(ampc_mem_account_params(n, &mixed, 0, &a), AMPC_OK);
  assert_true(a.bytes_per_param == 4.0);
  /* master on is ignored for FP32 weights, as the trainer does */
  assert_int_equal(ampc_amp_config_set(&f32, "master-weights", "on"), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(n, &f32, 2, &a), AMPC_OK);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 0);
  int mo = -1;
  assert_int_equal(ampc_mem_optimizer_moments("adamw", &mo), AMPC_OK);
  assert_int_equal(mo, 2);
  assert_int_equal(ampc_mem_optimizer_moments("sgd", &mo), AMPC_OK);
  assert_int_equal(mo, 1);
  assert_int_equal(ampc_mem_optimizer_moments("none", &mo), AMPC_OK);
  assert_int_equal(mo, 0);
  assert_int_equal(ampc_mem_optimizer_moments("lamb", &mo), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mem_account_params(0, &f32, 2, &a), AMPC_ERR_INVALID_ARG);
}

/* ZeRO stage 1 (Rajbhandari et al. 2020, section 5.1; ampc partitions the FP32
 * master with the optimizer state, as DeepSpeed's stage 1): 1.2e9 parameters,
 * 16-mixed with AdamW, 8 ranks. Shards are S = 4096 ceil(1.2e9 / (4096 x 8))
 * = 4096 x 36622 = 150,003,712 elements (1.2e9 / 8 = 1.5e8 is not a multiple
 * of 4096): ranks 0..6 hold S, rank 7 the rest, 1.2e9 - 7 S = 149,974,016.
 * Rank 0: weights 2.4e9 and grads 2.4e9 whole, master 4 S = 600,014,848,
 * moments 8 S = 1,200,029,696, and the FP32 staging of the shard's gradient
 * sum (--allreduce f32, one micro-batch) 4 S = 600,014,848; total
 * 7,200,059,392 (4 + 16 / 8 = 6 bytes per parameter, up to the alignment),
 * not 24e9. */
static void test_zero1_literature(void **state) {
  (void)state;
  const int64_t n = 1200000000, S = 150003712;
  const ampc_amp_config mixed = preset(AMPC_PRECISION_16_MIXED);
  ampc_mem_account whole, a;
  assert_int_equal(ampc_mem_account_params(n, &mixed, 2, &whole), AMPC_OK);
  assert_int_equal(whole.ranks, 1);
  assert_int_equal(whole.zero, 0);
  assert_int_equal(whole.shard_n, n);
  a = whole;
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, 0), AMPC_OK);
  assert_int_equal(a.ranks, 8);
  assert_int_equal(a.zero, 1);
  assert_int_equal(a.rank, 0);
  assert_int_equal(a.shard_lo, 0);
  assert_int_equal(a.shard_n, S);
  assert_int_equal(a.bytes[AMPC_MEM_WEIGHTS], 2400000000u);
  assert_int_equal(a.bytes[AMPC_MEM_GRADS], 2400000000u);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 600014848u);
  assert_int_equal(a.bytes[AMPC_MEM_MOMENTS], 1200029696u);
  assert_int_equal(a.bytes[AMPC_MEM_COMPENSATION], 0);
  assert_int_equal(a.bytes[AMPC_MEM_GRAD_STAGE], 600014848u);
  assert_int_equal(a.total, 7200059392u);
  assert_true(a.bytes_per_param == 7200059392.0 / 1.2e9);
  assert_int_equal(a.params, n);
  assert_int_equal(a.elements, n);
  /* every rank: S but the last; the shards tile the table; the sharded
   * roles sum to the whole account's 12 n bytes exactly; rank 0 is the largest */
  size_t master = 0, moments = 0;
  int64_t next = 0;
  for (int r = 0; r < 8; r++) {
    ampc_mem_account b = whole;
    assert_int_equal(ampc_mem_account_shard(&b, 8, 1, r), AMPC_OK);
    assert_int_equal(b.shard_lo, next);
    assert_int_equal(b.shard_n, r < 7 ? S : 149974016);
    next += b.shard_n;
    master += b.bytes[AMPC_MEM_MASTER];
    moments += b.bytes[AMPC_MEM_MOMENTS];
    assert_true(b.total <= a.total);
    assert_int_equal(b.bytes[AMPC_MEM_WEIGHTS], whole.bytes[AMPC_MEM_WEIGHTS]);
  }
  assert_int_equal(next, n);
  assert_int_equal(master, whole.bytes[AMPC_MEM_MASTER]);
  assert_int_equal(moments, whole.bytes[AMPC_MEM_MOMENTS]);
  assert_int_equal(master + moments, 12 * (size_t)n);
  /* 32-true: FP32 weights are their own master; only the moments shard */
  const ampc_amp_config f32 = preset(AMPC_PRECISION_32_TRUE);
  assert_int_equal(ampc_mem_account_params(n, &f32, 2, &a), AMPC_OK);
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, 0), AMPC_OK);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 0);
  assert_int_equal(a.bytes[AMPC_MEM_MOMENTS], 8 * (size_t)S);
  assert_int_equal(a.total, 9600000000u + 12 * (size_t)S); /* + the shard's staging */
  /* bf16-true with Kahan updates: BF16 moments (2 x 2 bytes) and the BF16
   * compensation shard */
  ampc_amp_config kahan = preset(AMPC_PRECISION_BF16_TRUE);
  assert_int_equal(ampc_amp_config_set(&kahan, "weight-update", "kahan"), AMPC_OK);
  assert_int_equal(ampc_mem_account_params(n, &kahan, 2, &a), AMPC_OK);
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, 0), AMPC_OK);
  assert_int_equal(a.bytes[AMPC_MEM_MOMENTS], 4 * (size_t)S);
  assert_int_equal(a.bytes[AMPC_MEM_COMPENSATION], 2 * (size_t)S);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 0);
  /* one rank under ZeRO-1 is the plain account; zero 0 over 8 ranks too */
  a = whole;
  assert_int_equal(ampc_mem_account_shard(&a, 1, 1, 0), AMPC_OK);
  assert_memory_equal(a.bytes, whole.bytes, sizeof a.bytes);
  assert_int_equal(a.total, whole.total);
  assert_int_equal(a.shard_n, n);
  a = whole; /* zero 0 over 8 ranks: the whole account and the FP32 staging */
  assert_int_equal(ampc_mem_account_shard(&a, 8, 0, 3), AMPC_OK);
  assert_memory_equal(a.bytes, whole.bytes, AMPC_MEM_GRAD_STAGE * sizeof a.bytes[0]);
  assert_int_equal(a.bytes[AMPC_MEM_GRAD_STAGE], 4800000000u);
  assert_int_equal(a.total, whole.total + 4800000000u);
  assert_int_equal(a.total, 24000000000u);
  assert_int_equal(a.ranks, 8);
  assert_int_equal(a.rank, 3);
  /* errors: bad ranks, stage, rank; an account sharded twice; NULL */
  a = whole;
  assert_int_equal(ampc_mem_account_shard(&a, 0, 1, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mem_account_shard(&a, 8, 2, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mem_account_shard(&a, 8, -1, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, 8), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, -1), AMPC_ERR_INVALID_ARG);
  assert_memory_equal(&a, &whole, sizeof a); /* untouched */
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, 0), AMPC_OK);
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_mem_account_shard(NULL, 8, 1, 0), AMPC_ERR_INVALID_ARG);
  a = whole;
  assert_int_equal(ampc_mem_account_shard(&a, 8, 0, 0), AMPC_OK);
  assert_int_equal(ampc_mem_account_shard(&a, 8, 1, 0), AMPC_ERR_INVALID_ARG);
}

/* the account of rank r equals the bytes ampc_params_shard leaves in a real
 * table sharded with ampc_shard_range(P.total, ranks, r) */
static void check_shard_exact(const ampc_param_spec *specs, int n, const ampc_amp_config *amp,
                              int moments, int ranks) {
  ampc_mem_account whole;
  assert_int_equal(ampc_mem_account_specs(specs, n, amp, moments, &whole), AMPC_OK);
  for (int r = 0; r < ranks; r++) {
    ampc_rng rng;
    ampc_rng_seed(&rng, 7);
    ampc_params P;
    assert_int_equal(ampc_params_create(&P, specs, n, amp->lowp, amp->master_weights,
                                        amp->state_dtype, moments, &rng),
                     AMPC_OK);
    if (whole.bytes[AMPC_MEM_COMPENSATION])
      assert_int_equal(ampc_params_add_compensation(&P), AMPC_OK);
    int64_t lo = 0, cnt = 0;
    ampc_shard_range(P.total, ranks, r, &lo, &cnt);
    assert_int_equal(ampc_params_shard(&P, lo, cnt), AMPC_OK);
    ampc_mem_account a = whole;
    assert_int_equal(ampc_mem_account_shard(&a, ranks, 1, r), AMPC_OK);
    assert_int_equal(a.elements, P.total);
    assert_int_equal(a.shard_lo, P.shard_lo);
    assert_int_equal(a.shard_n, P.shard_n);
    assert_int_equal(a.bytes[AMPC_MEM_WEIGHTS], P.bytes[AMPC_ROLE_WEIGHTS]);
    assert_int_equal(a.bytes[AMPC_MEM_GRADS], P.bytes[AMPC_ROLE_GRADS]);
    assert_int_equal(a.bytes[AMPC_MEM_MASTER], P.bytes[AMPC_ROLE_MASTER]);
    assert_int_equal(a.bytes[AMPC_MEM_MOMENTS],
                     P.bytes[AMPC_ROLE_MOMENT1] + P.bytes[AMPC_ROLE_MOMENT2]);
    assert_int_equal(a.bytes[AMPC_MEM_COMPENSATION], P.bytes[AMPC_ROLE_COMPENSATION]);
    ampc_params_free(&P);
  }
}

/* Three ranks, the last shorter; four, the last empty. Specs of 100 x 99 =
 * 9900 (padded to 9904) and 7 (padded to 16) elements: 9920 per role. S =
 * 4096 ceil(9920 / 12288) = 4096: 3 ranks hold 4096, 4096, 1728; under
 * 16-mixed with AdamW rank 0's master is 4096 x 4 = 16,384 bytes, its moments
 * 4096 x 8 = 32,768, the last rank's 1728 x 4 = 6912 and 1728 x 8 = 13,824;
 * weights and grads 9920 x 2 = 19,840 each on every rank. Over 4 ranks (S =
 * 4096 still) rank 3's shard is empty: 0 bytes. Each matches a real table
 * sharded the same way, as do mm-micro's and the other presets'. */
static void test_zero1_shards(void **state) {
  (void)state;
  const ampc_param_spec specs[2] = {{.name = "w", .ndim = 2, .shape = {100, 99}},
                                    {.name = "b", .ndim = 1, .shape = {7}}};
  const ampc_amp_config mixed = preset(AMPC_PRECISION_16_MIXED);
  ampc_mem_account whole, a;
  assert_int_equal(ampc_mem_account_specs(specs, 2, &mixed, 2, &whole), AMPC_OK);
  assert_int_equal(whole.elements, 9920);
  assert_int_equal(whole.params, 9907);
  const int64_t shard[3] = {4096, 4096, 1728};
  size_t sum = 0;
  for (int r = 0; r < 3; r++) {
    a = whole;
    assert_int_equal(ampc_mem_account_shard(&a, 3, 1, r), AMPC_OK);
    assert_int_equal(a.shard_n, shard[r]);
    assert_int_equal(a.bytes[AMPC_MEM_WEIGHTS], 19840);
    assert_int_equal(a.bytes[AMPC_MEM_GRADS], 19840);
    assert_int_equal(a.bytes[AMPC_MEM_MASTER], r < 2 ? 16384 : 6912);
    assert_int_equal(a.bytes[AMPC_MEM_MOMENTS], r < 2 ? 32768 : 13824);
    assert_int_equal(a.bytes[AMPC_MEM_GRAD_STAGE], r < 2 ? 16384 : 6912);
    assert_int_equal(a.total, 39680 + (r < 2 ? 49152 + 16384 : 20736 + 6912));
    sum += a.bytes[AMPC_MEM_MASTER] + a.bytes[AMPC_MEM_MOMENTS];
  }
  assert_int_equal(sum, 12 * 9920);
  a = whole;
  assert_int_equal(ampc_mem_account_shard(&a, 4, 1, 3), AMPC_OK);
  assert_int_equal(a.shard_lo, 9920);
  assert_int_equal(a.shard_n, 0);
  assert_int_equal(a.bytes[AMPC_MEM_MASTER], 0);
  assert_int_equal(a.bytes[AMPC_MEM_MOMENTS], 0);
  assert_int_equal(a.bytes[AMPC_MEM_GRAD_STAGE], 0);
  assert_int_equal(a.total, 39680);
  /* predicted == a real sharded table */
  check_shard_exact(specs, 2, &mixed, 2, 3);
  check_shard_exact(specs, 2, &mixed, 2, 4);
  check_shard_exact(specs, 2, &mixed, 1, 2);
  const ampc_amp_config f32 = preset(AMPC_PRECISION_32_TRUE);
  check_shard_exact(specs, 2, &f32, 2, 3);
  ampc_amp_config kahan = preset(AMPC_PRECISION_BF16_TRUE);
  assert_int_equal(ampc_amp_config_set(&kahan, "weight-update", "kahan"), AMPC_OK);
  check_shard_exact(specs, 2, &kahan, 2, 3);
  /* a model's table: mm-micro's specs, and its model account's parameter
   * roles shard the same while activations and workspace stay whole */
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-micro", 11, 5, 3, &c), AMPC_OK);
  ampc_mmodel_specs sp;
  assert_int_equal(ampc_mmodel_specs_make(&c, &sp), AMPC_OK);
  check_shard_exact(sp.specs, sp.n, &mixed, 2, 2);
  check_shard_exact(sp.specs, sp.n, &mixed, 2, 3);
  ampc_mem_account mw, ms, s0;
  assert_int_equal(ampc_mem_account_mm(&c, 4, &mixed, 2, &mw), AMPC_OK);
  assert_int_equal(ampc_mem_account_specs(sp.specs, sp.n, &mixed, 2, &s0), AMPC_OK);
  ms = mw;
  assert_int_equal(ampc_mem_account_shard(&ms, 2, 1, 0), AMPC_OK);
  assert_int_equal(ampc_mem_account_shard(&s0, 2, 1, 0), AMPC_OK);
  for (int r = 0; r < AMPC_MEM_ACTIVATIONS; r++)
    assert_int_equal(ms.bytes[r], s0.bytes[r]);
  for (int r = AMPC_MEM_ACTIVATIONS; r < AMPC_MEM_GRAD_STAGE; r++)
    assert_int_equal(ms.bytes[r], mw.bytes[r]);
  assert_int_equal(ms.bytes[AMPC_MEM_GRAD_STAGE], s0.bytes[AMPC_MEM_GRAD_STAGE]);
  size_t t = 0;
  for (int r = 0; r < AMPC_MEM_ROLE_COUNT; r++)
    t += ms.bytes[r];
  assert_int_equal(ms.total, t);
  ampc_mmodel_specs_free(&sp);
}

/* 16-bit activations for GEMM outputs, FP32 residual stream and softmax:
 * 16-mixed's arena is well below 32-true's but above a quarter of it. */
static void test_activation_ratio(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-tiny", 3840, 24, 9, &c), AMPC_OK);
  size_t a32 = 0, w32 = 0, a16 = 0, w16 = 0, abf = 0;
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 64, AMPC_PRECISION_32_TRUE, &a32, &w32), AMPC_OK);
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 64, AMPC_PRECISION_16_MIXED, &a16, &w16), AMPC_OK);
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 64, AMPC_PRECISION_BF16_MIXED, &abf, NULL), AMPC_OK);
  const double r = (double)a16 / (double)a32;
  printf("mm-tiny batch 64 activations: 32-true %zu, 16-mixed %zu (ratio %.4f); workspace %zu "
         "vs %zu\n",
         a32, a16, r, w32, w16);
  assert_true(r > 0.4 && r < 0.75);
  assert_int_equal(abf, a16);
  assert_true(w16 < w32);
  assert_int_equal(ampc_mmodel_plan_bytes(&c, 1, AMPC_PRECISION_32_TRUE, &a32, &w32),
                   AMPC_ERR_INVALID_ARG);
}

/* --attention-cast's 16-bit P on a GPU (ampc_mmodel_attn_cast_bytes): the
 * largest attention call's b*h*tq*tk values, 2 bytes each, in the device
 * account's device_scratch only. mm-micro (8x8 images in 4x4 patches: 5
 * tokens with CLS; 5 text tokens; 2 heads; no MLM, so 2 fusion pairs a
 * sample) at batch 4: vision and text 4*2*5*5 = 200 values, the fusion's
 * cross-attention 8*2*5*5 = 400, so 800 bytes. mm-base at batch 64 with 16
 * text tokens: the vision tower's 64*8*65*65 = 2,163,200 values (the
 * fusion's 128*8*16*65 is less), 4,326,400 bytes. The device account adds
 * the slot the context allocates for it (the device's scratch_slot_bytes). */
static void test_attn_cast_bytes(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("mm-micro", 11, 5, 3, &c), AMPC_OK);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_16_MIXED), 0); /* off */
  c.attn_cast = true;
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_16_MIXED), 800);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_BF16_MIXED), 800);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 4, AMPC_PRECISION_32_TRUE), 0); /* no cast */
  assert_int_equal(ampc_mmodel_attn_cast_bytes(NULL, 4, AMPC_PRECISION_16_MIXED), 0);
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 0, AMPC_PRECISION_16_MIXED), 0);
  /* in the GPU's account, not the CPU's (the CPU rounds a sample at a time) */
  const ampc_amp_config amp = preset(AMPC_PRECISION_16_MIXED);
  ampc_mem_account on, off, cpu_on, cpu_off;
  assert_int_equal(ampc_mem_account_mm_on(&c, 4, &amp, 2, AMPC_DEVICE_CUDA, &on), AMPC_OK);
  assert_int_equal(ampc_mem_account_mm(&c, 4, &amp, 2, &cpu_on), AMPC_OK);
  c.attn_cast = false;
  assert_int_equal(ampc_mem_account_mm_on(&c, 4, &amp, 2, AMPC_DEVICE_CUDA, &off), AMPC_OK);
  assert_int_equal(ampc_mem_account_mm(&c, 4, &amp, 2, &cpu_off), AMPC_OK);
  /* the slot the context allocates: at least 4 KiB, else a quarter more */
  assert_int_equal(on.bytes[AMPC_MEM_DEVICE_SCRATCH], off.bytes[AMPC_MEM_DEVICE_SCRATCH] + 4096);
  assert_int_equal(on.total, off.total + 4096);
  size_t (*slot)(size_t) = ampc_device_desc_get(AMPC_DEVICE_CUDA)->scratch_slot_bytes;
  assert_non_null(slot);
  assert_int_equal(slot(0), 0);
  assert_int_equal(slot(800), 4096);
  assert_int_equal(slot(4326400), 5408000);
  assert_int_equal(cpu_on.total, cpu_off.total);
  assert_int_equal(cpu_on.bytes[AMPC_MEM_DEVICE_SCRATCH], 0);
  assert_int_equal(ampc_mmodel_config_get("mm-base", 3840, 16, 9, &c), AMPC_OK);
  c.attn_cast = true;
  assert_int_equal(ampc_mmodel_attn_cast_bytes(&c, 64, AMPC_PRECISION_16_MIXED), 4326400);
}

/* the planned batch fits; one more does not */
static void test_plan(void **state) {
  (void)state;
  ampc_mmodel_config c;
  assert_int_equal(ampc_mmodel_config_get("vit-ref", 0, 0, 9, &c), AMPC_OK);
  const ampc_amp_config amp = preset(AMPC_PRECISION_16_MIXED);
  const size_t budget = 200000000, overhead = 30000000;
  int64_t b = 0;
  ampc_mem_account at, next;
  assert_int_equal(ampc_mem_plan_mm(&c, &amp, 2, budget, overhead, 100000, &b, &at), AMPC_OK);
  assert_true(b >= 2);
  assert_true(at.total + overhead <= budget);
  assert_int_equal(at.batch, b);
  assert_int_equal(ampc_mem_account_mm(&c, b + 1, &amp, 2, &next), AMPC_OK);
  assert_true(next.total + overhead > budget);
  /* capped by max_batch */
  assert_int_equal(ampc_mem_plan_mm(&c, &amp, 2, budget, overhead, 10, &b, NULL), AMPC_OK);
  assert_int_equal(b, 10);
  /* nothing fits */
  assert_int_equal(ampc_mem_plan_mm(&c, &amp, 2, 1000, 0, 100, &b, &at), AMPC_OK);
  assert_int_equal(b, 0);
}

static void test_parse_bytes(void **state) {
  (void)state;
  uint64_t v = 0;
  const struct {
    const char *s;
    uint64_t v;
  } ok[] = {
      {"8G", 8000000000u}, {"512M", 512000000u}, {"1.5GiB", 1610612736u}, {"1000", 1000},
      {"2k", 2000},        {"3MiB", 3145728},    {"4 gb", 4000000000u},   {"0", 0},
      {"10B", 10},         {"1.5e3", 1500},      {"7Ki", 7168},           {"1T", 1000000000000u}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    assert_int_equal(ampc_parse_bytes(ok[i].s, &v), AMPC_OK);
    assert_int_equal(v, ok[i].v);
  }
  const char *bad[] = {"", "G", "abc", "-5M", "8X", "8GG", "nan", "inf", "1e30", "5 M B"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(ampc_parse_bytes(bad[i], &v), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "5 M B"));
}

static void test_peak_rss(void **state) {
  (void)state;
  const int64_t before = ampc_peak_rss_bytes();
  assert_true(before > 0);
  const size_t n = 64u << 20;
  char *p = malloc(n);
  assert_non_null(p);
  for (size_t i = 0; i < n; i += 4096)
    p[i] = (char)i;
  const int64_t after = ampc_peak_rss_bytes();
  /* touched 64 MiB: the peak grew by at least most of it */
  assert_true(after >= before + (int64_t)(n / 2));
  free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prediction_is_exact),
      cmocka_unit_test(test_per_parameter_table),
      cmocka_unit_test(test_zero1_literature),
      cmocka_unit_test(test_zero1_shards),
      cmocka_unit_test(test_activation_ratio),
      cmocka_unit_test(test_attn_cast_bytes),
      cmocka_unit_test(test_plan),
      cmocka_unit_test(test_parse_bytes),
      cmocka_unit_test(test_peak_rss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
