/*
 * tools/ampc/cmd_formats.c: `ampc formats [--json]`, the facts of each number
 * format as ampc's own conversions measure them (ampc_format_info_get).
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ampc/dtype.h"

static const char k_usage[] =
    "Usage: ampc formats [--json]\n"
    "\n"
    "Print the facts of fp32, fp16 (IEEE binary16), bf16 (bfloat16) and the FP8\n"
    "formats e4m3 and e5m2, each measured by running ampc's conversions:\n"
    "  max                 largest finite value\n"
    "  min normal          smallest positive normal value\n"
    "  min subnormal       smallest positive value\n"
    "  epsilon             gap between 1 and the next value\n"
    "  overflow at         smallest magnitude (from fp32; fp32 itself from double)\n"
    "                      that rounds to inf (NaN for e4m3)\n"
    "  underflow to 0      largest magnitude that still rounds to 0\n"
    "  swallow ratio       an update below about ratio*|w| leaves w unchanged\n"
    "                      (why FP32 master weights exist: 2^-11 for fp16)\n"
    "\n"
    "Options:\n"
    "  --json     print one JSON object keyed by format name\n"
    "  -h, --help show this help\n";

/* "2^k" for an exact power of two below 1 or above 2^4, else %.8g. */
static void fmt_value(char *buf, size_t n, double v) {
  int e;
  double m = frexp(v, &e);
  if (v > 0 && m == 0.5 && (e - 1 > 4 || e - 1 < 0))
    snprintf(buf, n, "2^%d", e - 1);
  else
    snprintf(buf, n, "%.8g", v);
}

static int run(int argc, char **argv) {
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else
      return cli_usage_error("formats", "unexpected argument '%s'", argv[i]);
  }
  ampc_format_info info[AMPC_DTYPE_COUNT];
  for (int d = 0; d < AMPC_DTYPE_COUNT; d++)
    if (ampc_format_info_get((ampc_dtype)d, &info[d]) != AMPC_OK)
      return cli_runtime_error("formats", "%s", ampc_last_error());

  if (json) {
    cJSON *root = cJSON_CreateObject();
    for (int d = 0; d < AMPC_DTYPE_COUNT; d++) {
      const ampc_format_info *f = &info[d];
      cJSON *o = cJSON_AddObjectToObject(root, f->name);
      cJSON_AddStringToObject(o, "dtype", ampc_dtype_name(f->dtype));
      cJSON_AddNumberToObject(o, "bits", f->bits);
      cJSON_AddNumberToObject(o, "exponent_bits", f->exponent_bits);
      cJSON_AddNumberToObject(o, "mantissa_bits", f->mantissa_bits);
      cJSON_AddNumberToObject(o, "bias", f->bias);
      cJSON_AddBoolToObject(o, "has_inf", f->has_inf);
      cJSON_AddNumberToObject(o, "max", f->max);
      cJSON_AddNumberToObject(o, "min_normal", f->min_normal);
      cJSON_AddNumberToObject(o, "min_subnormal", f->min_subnormal);
      cJSON_AddNumberToObject(o, "epsilon", f->epsilon);
      cJSON_AddNumberToObject(o, "overflow_threshold", f->overflow_threshold);
      cJSON_AddNumberToObject(o, "underflow_threshold", f->underflow_threshold);
      cJSON_AddNumberToObject(o, "swallow_ratio", f->swallow_ratio);
    }
    return cli_print_json("formats", root);
  }

  char b[64];
  printf("%-16s", "");
  for (int d = 0; d < AMPC_DTYPE_COUNT; d++)
    printf("%16s", info[d].name);
  printf("\n");
#define ROW_INT(label, field)                                                                      \
  printf("%-16s", label);                                                                          \
  for (int d = 0; d < AMPC_DTYPE_COUNT; d++)                                                       \
    printf("%16d", info[d].field);                                                                 \
  printf("\n")
#define ROW_VAL(label, field)                                                                      \
  printf("%-16s", label);                                                                          \
  for (int d = 0; d < AMPC_DTYPE_COUNT; d++) {                                                     \
    fmt_value(b, sizeof b, info[d].field);                                                         \
    printf("%16s", b);                                                                             \
  }                                                                                                \
  printf("\n")
  ROW_INT("bits", bits);
  ROW_INT("exponent bits", exponent_bits);
  ROW_INT("mantissa bits", mantissa_bits);
  ROW_INT("bias", bias);
  printf("%-16s", "has inf");
  for (int d = 0; d < AMPC_DTYPE_COUNT; d++)
    printf("%16s", info[d].has_inf ? "yes" : "no (NaN)");
  printf("\n");
  ROW_VAL("max", max);
  ROW_VAL("min normal", min_normal);
  ROW_VAL("min subnormal", min_subnormal);
  ROW_VAL("epsilon", epsilon);
  ROW_VAL("overflow at", overflow_threshold);
  ROW_VAL("underflow to 0", underflow_threshold);
  ROW_VAL("swallow ratio", swallow_ratio);
#undef ROW_INT
#undef ROW_VAL
  return AMPC_EXIT_OK;
}

const ampc_command ampc_cmd_formats = {
    .name = "formats",
    .summary = "facts of fp32, fp16, bf16, e4m3, e5m2 (max, epsilon, thresholds)",
    .usage = k_usage,
    .run = run,
};
