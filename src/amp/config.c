/*
 * src/amp/config.c: the presets of DESIGN.md section 2 as resolved
 * configurations, and the per-safeguard overrides (--master-weights,
 * --loss-scale, --accumulate, and the scaler's knobs).
 */
#include "internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/amp.h"

static const ampc_scaler_config k_scaler_default = {
    .mode = AMPC_LOSS_SCALE_NONE,
    .init_scale = 65536.0f,
    .growth_factor = 2.0f,
    .backoff_factor = 0.5f,
    .growth_interval = 2000,
    .hysteresis = 1,
    .min_scale = 1.0f,
    .max_scale = FLT_MAX,
};

ampc_status ampc_amp_config_preset(ampc_precision p, ampc_amp_config *out) {
  if ((unsigned)p >= AMPC_PRECISION_COUNT || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_amp_config_preset: invalid preset %d", (int)p);
  ampc_amp_config c = {.precision = p, .scaler = k_scaler_default};
  c.lowp = ampc_precision_lowp(p);
  c.master_weights = ampc_precision_is_mixed(p);
  c.state_dtype = ampc_precision_is_mixed(p) ? AMPC_F32 : c.lowp;
  c.accumulate = p == AMPC_PRECISION_16_TRUE ? AMPC_ACC_F16 : AMPC_ACC_F32;
  if (p == AMPC_PRECISION_16_MIXED)
    c.scaler.mode = AMPC_LOSS_SCALE_DYNAMIC;
  c.fp8_amax_history = 1024;
  c.fp8_amax_algo = AMPC_AMAX_MAX;
  c.fp8_margin = 0.0f;
  *out = c;
  return AMPC_OK;
}

const char *ampc_loss_scale_mode_name(ampc_loss_scale_mode m) {
  switch (m) {
  case AMPC_LOSS_SCALE_NONE: return "none";
  case AMPC_LOSS_SCALE_STATIC: return "static";
  case AMPC_LOSS_SCALE_DYNAMIC: return "dynamic";
  case AMPC_LOSS_SCALE_PER_BRANCH: return "per-branch";
  case AMPC_LOSS_SCALE_PER_LOSS: return "per-loss";
  }
  return "?";
}

/* A finite float from the whole string, or an error naming the option. */
static ampc_status parse_float(const char *name, const char *v, float *out) {
  char *end = NULL;
  errno = 0;
  const double d = strtod(v, &end);
  const bool syntax = end != v && *end == '\0';
  if (syntax &&
      (errno == ERANGE || (isfinite(d) && (isinf((float)d) || (d != 0.0 && (float)d == 0.0f)))))
    return ampc_fail(
        AMPC_ERR_INVALID_ARG,
        "--%s: '%s' is out of the float range (nonzero |x| from about 1e-45 to 3.4e38)", name, v);
  if (!syntax || errno || !isfinite(d))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--%s: '%s' is not a finite number", name, v);
  *out = (float)d;
  return AMPC_OK;
}

static ampc_status parse_int(const char *name, const char *v, int lo, int *out) {
  char *end = NULL;
  errno = 0;
  const long x = strtol(v, &end, 10);
  if (end == v || *end != '\0')
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--%s: '%s' is not an integer >= %d", name, v, lo);
  if (errno == ERANGE || x < lo || x > 1000000000L)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--%s: %s is out of range (%d .. 1000000000)", name, v,
                     lo);
  *out = (int)x;
  return AMPC_OK;
}

ampc_status ampc_amp_config_set(ampc_amp_config *c, const char *name, const char *value) {
  if (!c || !name || !value)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_amp_config_set: NULL argument");
  ampc_amp_config t = *c;
  ampc_status st = AMPC_OK;
  float f = 0.0f;
  if (strcmp(name, "master-weights") == 0) {
    if (strcmp(value, "on") == 0)
      t.master_weights = t.lowp != AMPC_F32; /* FP32 weights are their own master */
    else if (strcmp(value, "off") == 0)
      t.master_weights = false;
    else
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--master-weights: expected on or off, got '%s'",
                       value);
  } else if (strcmp(name, "loss-scale") == 0) {
    if (strcmp(value, "none") == 0) {
      t.scaler.mode = AMPC_LOSS_SCALE_NONE;
    } else if (strcmp(value, "dynamic") == 0) {
      t.scaler.mode = AMPC_LOSS_SCALE_DYNAMIC;
    } else if (strcmp(value, "per-branch") == 0) {
      t.scaler.mode = AMPC_LOSS_SCALE_PER_BRANCH;
    } else if (strcmp(value, "per-loss") == 0) {
      t.scaler.mode = AMPC_LOSS_SCALE_PER_LOSS;
    } else {
      if (parse_float(name, value, &f) != AMPC_OK || !(f > 0.0f))
        return ampc_fail(AMPC_ERR_INVALID_ARG,
                         "--loss-scale: expected none, dynamic, per-branch, per-loss or a positive "
                         "finite number, "
                         "got '%s'",
                         value);
      t.scaler.mode = AMPC_LOSS_SCALE_STATIC;
      t.scaler.init_scale = f;
    }
  } else if (strcmp(name, "accumulate") == 0) {
    if (strcmp(value, "fp32") == 0)
      t.accumulate = AMPC_ACC_F32;
    else if (strcmp(value, "fp16") == 0)
      t.accumulate = AMPC_ACC_F16;
    else
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--accumulate: expected fp32 or fp16, got '%s'",
                       value);
  } else if (strcmp(name, "weight-update") == 0) {
    if (strcmp(value, "nearest") == 0)
      t.weight_update = AMPC_UPDATE_NEAREST;
    else if (strcmp(value, "stochastic") == 0)
      t.weight_update = AMPC_UPDATE_STOCHASTIC;
    else if (strcmp(value, "kahan") == 0)
      t.weight_update = AMPC_UPDATE_KAHAN;
    else
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "--weight-update: expected nearest, stochastic or kahan, got '%s'", value);
  } else if (strcmp(name, "fp8-amax-history") == 0) {
    if ((st = parse_int(name, value, 1, &t.fp8_amax_history)) != AMPC_OK)
      return st;
    if (t.fp8_amax_history > (1 << 20))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--fp8-amax-history: at most 1048576, got '%s'",
                       value);
  } else if (strcmp(name, "fp8-amax-compute") == 0) {
    if (strcmp(value, "max") == 0)
      t.fp8_amax_algo = AMPC_AMAX_MAX;
    else if (strcmp(value, "most_recent") == 0)
      t.fp8_amax_algo = AMPC_AMAX_MOST_RECENT;
    else
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "--fp8-amax-compute: expected max or most_recent, got '%s'", value);
  } else if (strcmp(name, "fp8-margin") == 0) {
    if ((st = parse_float(name, value, &f)) != AMPC_OK)
      return st;
    if (!(f >= 0.0f) || f > 100.0f)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--fp8-margin: must be in [0, 100], got '%s'", value);
    t.fp8_margin = f;
  } else if (strcmp(name, "init-scale") == 0) {
    if ((st = parse_float(name, value, &f)) != AMPC_OK)
      return st;
    if (!(f > 0.0f))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--init-scale: must be > 0, got '%s'", value);
    t.scaler.init_scale = f;
  } else if (strcmp(name, "growth-factor") == 0) {
    if ((st = parse_float(name, value, &f)) != AMPC_OK)
      return st;
    if (!(f > 1.0f))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--growth-factor: must be > 1, got '%s'", value);
    t.scaler.growth_factor = f;
  } else if (strcmp(name, "backoff-factor") == 0) {
    if ((st = parse_float(name, value, &f)) != AMPC_OK)
      return st;
    if (!(f > 0.0f && f < 1.0f))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--backoff-factor: must be in (0, 1), got '%s'",
                       value);
    t.scaler.backoff_factor = f;
  } else if (strcmp(name, "growth-interval") == 0) {
    if ((st = parse_int(name, value, 1, &t.scaler.growth_interval)) != AMPC_OK)
      return st;
  } else if (strcmp(name, "hysteresis") == 0) {
    if ((st = parse_int(name, value, 1, &t.scaler.hysteresis)) != AMPC_OK)
      return st;
  } else if (strcmp(name, "min-scale") == 0 || strcmp(name, "max-scale") == 0) {
    if ((st = parse_float(name, value, &f)) != AMPC_OK)
      return st;
    if (!(f > 0.0f))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "--%s: must be > 0, got '%s'", name, value);
    if (name[1] == 'i')
      t.scaler.min_scale = f;
    else
      t.scaler.max_scale = f;
  } else {
    return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown precision option --%s", name);
  }
  *c = t;
  return AMPC_OK;
}

const char *ampc_weight_update_name(ampc_weight_update u) {
  switch (u) {
  case AMPC_UPDATE_NEAREST: return "nearest";
  case AMPC_UPDATE_STOCHASTIC: return "stochastic";
  case AMPC_UPDATE_KAHAN: return "kahan";
  }
  return "?";
}

ampc_status ampc_amp_config_check(const ampc_amp_config *c) {
  if (!c || (unsigned)c->precision >= AMPC_PRECISION_COUNT)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "precision config: invalid preset");
  const ampc_scaler_config *s = &c->scaler;
  /* 1/min_scale must be a finite FP32 value, or unscaling divides by 0 */
  if (!(s->min_scale > 0.0f) || !isfinite(1.0 / (double)s->min_scale) ||
      1.0 / (double)s->min_scale > (double)FLT_MAX)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--min-scale %g: 1/min-scale must be finite in FP32",
                     (double)s->min_scale);
  if (!(s->max_scale >= s->min_scale))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--max-scale %g is below --min-scale %g",
                     (double)s->max_scale, (double)s->min_scale);
  if (s->mode != AMPC_LOSS_SCALE_NONE &&
      !(s->init_scale >= s->min_scale && s->init_scale <= s->max_scale))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "loss scale %g is outside [--min-scale %g, --max-scale %g]",
                     (double)s->init_scale, (double)s->min_scale, (double)s->max_scale);
  if (s->mode == AMPC_LOSS_SCALE_PER_BRANCH) {
    /* the ratios S_b / S_a at the branch boundaries must be exact */
    const float v[4] = {s->init_scale, s->growth_factor, s->backoff_factor, s->min_scale};
    const char *n[4] = {"--init-scale", "--growth-factor", "--backoff-factor", "--min-scale"};
    for (int i = 0; i < 4; i++) {
      int e = 0;
      if (frexpf(v[i], &e) != 0.5f)
        return ampc_fail(AMPC_ERR_INVALID_ARG,
                         "--loss-scale per-branch needs powers of two (the gradients crossing "
                         "from one branch into another are multiplied by the ratio of their "
                         "scales, which must be exact): %s is %g",
                         n[i], (double)v[i]);
    }
    int e = 0;
    if (s->max_scale != FLT_MAX && frexpf(s->max_scale, &e) != 0.5f)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "--loss-scale per-branch needs powers of two: --max-scale is %g",
                       (double)s->max_scale);
  }
  if (c->master_weights && c->lowp == AMPC_F32)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "master weights with FP32 working weights");
  if (c->fp8_amax_history < 1 || c->fp8_amax_history > (1 << 20) ||
      (c->fp8_amax_algo != AMPC_AMAX_MAX && c->fp8_amax_algo != AMPC_AMAX_MOST_RECENT) ||
      !(c->fp8_margin >= 0.0f && c->fp8_margin <= 8.0f))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "FP8 recipe: amax history %d (1..1048576), algorithm %d, margin %g (0..8)",
                     c->fp8_amax_history, (int)c->fp8_amax_algo, (double)c->fp8_margin);
  const bool fp8 = ampc_precision_is_fp8(c->precision);
  if (!fp8 &&
      (c->fp8_amax_history != 1024 || c->fp8_amax_algo != AMPC_AMAX_MAX || c->fp8_margin != 0.0f))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--fp8-amax-history / --fp8-amax-compute / --fp8-margin set the FP8 recipe of "
                     "fp8-mixed; %s has no FP8 casts",
                     ampc_precision_name(c->precision));
  if (fp8 && c->scaler.mode == AMPC_LOSS_SCALE_PER_LOSS)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--loss-scale per-loss runs a backward pass per loss term; fp8-mixed's "
                     "delayed scaling records each cast once per step (and needs no loss scale)");
  if (fp8 && c->accumulate != AMPC_ACC_F32)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "fp8-mixed needs --accumulate fp32: the FP8 operands are scaled up to the "
                     "format's range (448, 57344), their products overflow a binary16 sum (FP8 "
                     "Tensor Cores accumulate in FP32)");
  if ((unsigned)c->weight_update > AMPC_UPDATE_KAHAN)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--weight-update: invalid value %d",
                     (int)c->weight_update);
  if (c->weight_update != AMPC_UPDATE_NEAREST && (c->lowp != AMPC_F32 && c->master_weights))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--weight-update %s acts on the 16-bit weights themselves: with %s it needs "
                     "--master-weights off (the FP32 master already keeps every update)",
                     ampc_weight_update_name(c->weight_update), ampc_precision_name(c->precision));
  if (c->weight_update == AMPC_UPDATE_KAHAN && c->lowp == AMPC_F32)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--weight-update kahan needs 16-bit weights (bf16-true or 16-true, or a "
                     "mixed preset with --master-weights off), not FP32");
  if (c->weight_update == AMPC_UPDATE_STOCHASTIC && c->lowp != AMPC_BF16)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "--weight-update stochastic needs bfloat16 weights (bf16-true, or "
                     "bf16-mixed --master-weights off), not %s",
                     ampc_dtype_name(c->lowp));
  return AMPC_OK;
}
