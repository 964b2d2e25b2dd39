/*
 * src/amp/policy.c: the precision presets and the autocast policy table, the
 * single source of truth for which dtype each op reads and writes
 * (include/ampc/amp.h explains the rules; this file is the table).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#include "ampc/amp.h"

static const char *const k_precision_names[AMPC_PRECISION_COUNT] = {
    [AMPC_PRECISION_32_TRUE] = "32-true",       [AMPC_PRECISION_16_MIXED] = "16-mixed",
    [AMPC_PRECISION_BF16_MIXED] = "bf16-mixed", [AMPC_PRECISION_16_TRUE] = "16-true",
    [AMPC_PRECISION_BF16_TRUE] = "bf16-true",   [AMPC_PRECISION_FP8_MIXED] = "fp8-mixed",
};

static const ampc_dtype k_lowp[AMPC_PRECISION_COUNT] = {
    [AMPC_PRECISION_32_TRUE] = AMPC_F32,     [AMPC_PRECISION_16_MIXED] = AMPC_F16,
    [AMPC_PRECISION_BF16_MIXED] = AMPC_BF16, [AMPC_PRECISION_16_TRUE] = AMPC_F16,
    [AMPC_PRECISION_BF16_TRUE] = AMPC_BF16,  [AMPC_PRECISION_FP8_MIXED] = AMPC_BF16,
};

/* The table: one row per op. */
static const struct {
  const char *name;
  ampc_op_class cls;
} k_ops[AMPC_OPID_COUNT] = {
    [AMPC_OPID_LINEAR] = {"linear", AMPC_OPCLASS_LOWP},
    [AMPC_OPID_PATCH_EMBED] = {"patch_embed", AMPC_OPCLASS_LOWP},
    [AMPC_OPID_ATTN_SCORES] = {"attn_scores", AMPC_OPCLASS_LOWP},
    [AMPC_OPID_ATTN_VALUES] = {"attn_values", AMPC_OPCLASS_LOWP},
    /* embedding is not on autocast's lists; with FP32 weights (PyTorch AMP)
     * it yields the FP32 residual stream, which ampc keeps in mixed presets */
    [AMPC_OPID_EMBEDDING] = {"embedding", AMPC_OPCLASS_PROMOTE},
    [AMPC_OPID_LAYER_NORM] = {"layer_norm", AMPC_OPCLASS_FP32},
    [AMPC_OPID_SOFTMAX] = {"softmax", AMPC_OPCLASS_FP32},
    [AMPC_OPID_GELU] = {"gelu", AMPC_OPCLASS_FOLLOW},
    [AMPC_OPID_RESIDUAL_ADD] = {"add", AMPC_OPCLASS_PROMOTE},
    [AMPC_OPID_MEAN_POOL] = {"mean", AMPC_OPCLASS_FP32},
    [AMPC_OPID_L2_NORM] = {"normalize", AMPC_OPCLASS_FP32},
    [AMPC_OPID_CROSS_ENTROPY] = {"cross_entropy", AMPC_OPCLASS_FP32},
    [AMPC_OPID_INFONCE] = {"infonce", AMPC_OPCLASS_FP32},
    [AMPC_OPID_BCE_LOGITS] = {"binary_cross_entropy_with_logits", AMPC_OPCLASS_FP32},
};

const char *ampc_precision_name(ampc_precision p) {
  return (unsigned)p < AMPC_PRECISION_COUNT ? k_precision_names[p] : "?";
}

/* the short names other trainers take: Lightning's precision=32/16/bf16,
 * Accelerate's mixed_precision=fp16/bf16/fp8 */
static const struct {
  const char *alias;
  ampc_precision p;
} k_precision_aliases[] = {
    {"32", AMPC_PRECISION_32_TRUE},      {"fp32", AMPC_PRECISION_32_TRUE},
    {"16", AMPC_PRECISION_16_MIXED},     {"fp16", AMPC_PRECISION_16_MIXED},
    {"bf16", AMPC_PRECISION_BF16_MIXED}, {"fp8", AMPC_PRECISION_FP8_MIXED},
};

/* Levenshtein distance of a and b (short names: at most 31 characters) */
static int edit_distance(const char *a, const char *b) {
  const int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 31 || lb > 31)
    return 99;
  int d[32][32];
  for (int i = 0; i <= la; i++)
    d[i][0] = i;
  for (int j = 0; j <= lb; j++)
    d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      const int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      const int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
      d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
  return d[la][lb];
}

ampc_status ampc_precision_parse(const char *name, ampc_precision *out) {
  for (int p = 0; name && out && p < AMPC_PRECISION_COUNT; p++) {
    if (strcmp(name, k_precision_names[p]) == 0) {
      *out = (ampc_precision)p;
      return AMPC_OK;
    }
  }
  const int na = (int)(sizeof k_precision_aliases / sizeof k_precision_aliases[0]);
  for (int k = 0; name && out && k < na; k++)
    if (strcmp(name, k_precision_aliases[k].alias) == 0) {
      *out = k_precision_aliases[k].p;
      return AMPC_OK;
    }
  const char *best = NULL;
  int bd = 3; /* suggest a preset within 2 edits */
  for (int p = 0; name && p < AMPC_PRECISION_COUNT; p++) {
    const int dist = edit_distance(name, k_precision_names[p]);
    if (dist < bd)
      bd = dist, best = k_precision_names[p];
  }
  char hint[64] = "";
  if (best)
    snprintf(hint, sizeof hint, "did you mean %s? ", best);
  return ampc_fail(AMPC_ERR_INVALID_ARG,
                   "unknown precision '%s' (%sexpected 32-true, 16-mixed, bf16-mixed, 16-true, "
                   "bf16-true, fp8-mixed, or 32, 16, bf16, fp16, fp32, fp8)",
                   name ? name : "(null)", hint);
}

ampc_dtype ampc_precision_lowp(ampc_precision p) {
  return (unsigned)p < AMPC_PRECISION_COUNT ? k_lowp[p] : AMPC_F32;
}

bool ampc_precision_is_mixed(ampc_precision p) {
  return p == AMPC_PRECISION_16_MIXED || p == AMPC_PRECISION_BF16_MIXED ||
         p == AMPC_PRECISION_FP8_MIXED;
}

bool ampc_precision_is_fp8(ampc_precision p) { return p == AMPC_PRECISION_FP8_MIXED; }

const char *ampc_op_name(ampc_op_id op) {
  return (unsigned)op < AMPC_OPID_COUNT ? k_ops[op].name : "?";
}

ampc_status ampc_policy_get(ampc_precision p, ampc_op_id op, ampc_op_policy *out) {
  if ((unsigned)p >= AMPC_PRECISION_COUNT || (unsigned)op >= AMPC_OPID_COUNT || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_policy_get: invalid preset %d or op %d", (int)p,
                     (int)op);
  const ampc_dtype lowp = k_lowp[p];
  const ampc_dtype wide = ampc_precision_is_mixed(p) ? AMPC_F32 : lowp;
  ampc_op_policy r = {.cls = k_ops[op].cls, .compute = AMPC_F32};
  switch (r.cls) {
  case AMPC_OPCLASS_LOWP: r.input = lowp, r.output = lowp; break;
  case AMPC_OPCLASS_FP32: r.input = wide, r.output = wide; break;
  case AMPC_OPCLASS_FOLLOW: r.input = lowp, r.output = lowp; break;
  case AMPC_OPCLASS_PROMOTE: r.input = lowp, r.output = wide; break;
  }
  /* losses always produce an FP32 scalar, whatever the preset */
  if (op == AMPC_OPID_CROSS_ENTROPY || op == AMPC_OPID_INFONCE || op == AMPC_OPID_BCE_LOGITS)
    r.output = AMPC_F32;
  *out = r;
  return AMPC_OK;
}
