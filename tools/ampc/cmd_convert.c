/*
 * tools/ampc/cmd_convert.c: `ampc convert --to FMT [--saturate] [--json] VALUE...`
 *
 * Each VALUE is first read as an FP32 (a decimal is rounded to the nearest
 * FP32 by strtof; "0x" followed by 1 to 8 hex digits is taken as FP32 bits),
 * then rounded into the target format with ampc's scalar conversion.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ampc/dtype.h"
#include "numeric/numeric.h"

static const char k_usage[] =
    "Usage: ampc convert --to f16|bf16|e4m3|e5m2|f32 [--saturate] [--json] VALUE...\n"
    "\n"
    "Round each VALUE to the target format and show the stored bits, the value,\n"
    "its class and the relative error. VALUE is a number (65519.99, 1e-8, nan,\n"
    "-inf, or a C hex float with a '.' or 'p' such as 0x1.8p3), rounded to FP32\n"
    "first, or an FP32 bit pattern written as 0x followed by 1 to 8 hex digits\n"
    "(0x33000001). Negative numbers are values, not options\n"
    "(ampc convert --to f16 -65520). Format names are case-insensitive; aliases:\n"
    "fp16/half/binary16, bfloat16, fp32/float32, f8_e4m3, f8_e5m2.\n"
    "\n"
    "Options:\n"
    "  --to FMT     target format: f16 (binary16), bf16, e4m3, e5m2, or f32\n"
    "  --saturate   e4m3/e5m2 only: out-of-range values become +-max finite\n"
    "               (CUDA __NV_SATFINITE) instead of NaN/inf (__NV_NOSAT)\n"
    "  --json       one JSON object per value: input, input_bits, input_value,\n"
    "               to, saturate, output_bits, value, class, rel_error\n"
    "  --           treat every later argument as a VALUE\n"
    "  -h, --help   show this help\n"
    "\n"
    "Examples:\n"
    "  ampc convert --to f16 65504 65519.99 65520 1e-8 0x33000001\n"
    "  ampc convert --to e4m3 --saturate 464 465 inf\n";

/* Parse VALUE into FP32 bits. Returns 0 on success, -1 with *why set. */
static int parse_value(const char *s, uint32_t *bits, const char **why) {
  if (!*s) {
    *why = "empty value";
    return -1;
  }
  const char *p = s;
  int signed_ = (*p == '+' || *p == '-');
  if (signed_)
    p++;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && !strpbrk(p, ".pP")) {
    size_t nd = strspn(p + 2, "0123456789abcdefABCDEF");
    if (nd == 0 || p[2 + nd] != '\0') {
      *why = "not a hex bit pattern (0x followed by 1 to 8 hex digits)";
      return -1;
    }
    if (signed_) {
      *why = "an FP32 bit pattern takes no sign";
      return -1;
    }
    if (nd > 8) {
      *why = "an FP32 bit pattern has at most 8 hex digits";
      return -1;
    }
    *bits = (uint32_t)strtoul(p + 2, NULL, 16);
    return 0;
  }
  char *end = NULL;
  errno = 0;
  float f = strtof(s, &end);
  if (end == s || *end != '\0' || isspace((unsigned char)s[0])) {
    *why = "not a number";
    return -1;
  }
  *bits = ampc_f32_bits(f);
  if (errno == ERANGE)
    fprintf(stderr, "ampc convert: note: %s is outside the FP32 range; read as %.9g\n", s,
            (double)f);
  return 0;
}

static uint32_t round_to(ampc_dtype dt, uint32_t x, int sat, double *value) {
  uint32_t out;
  switch (dt) {
  case AMPC_F16: out = ampc_f32bits_to_f16bits(x); break;
  case AMPC_BF16: out = ampc_f32bits_to_bf16bits(x); break;
  case AMPC_F8_E4M3: out = ampc_f32bits_to_e4m3bits(x, sat); break;
  case AMPC_F8_E5M2: out = ampc_f32bits_to_e5m2bits(x, sat); break;
  default: out = x; break;
  }
  uint32_t back;
  switch (dt) {
  case AMPC_F16: back = ampc_f16bits_to_f32bits((uint16_t)out); break;
  case AMPC_BF16: back = ampc_bf16bits_to_f32bits((uint16_t)out); break;
  case AMPC_F8_E4M3: back = ampc_e4m3bits_to_f32bits((uint8_t)out); break;
  case AMPC_F8_E5M2: back = ampc_e5m2bits_to_f32bits((uint8_t)out); break;
  default: back = out; break;
  }
  *value = (double)ampc_bits_f32(back);
  return out;
}

/* Relative error (out - in) / |in|; NAN when undefined (non-finite operands). */
static double rel_error(double in, double out) {
  if (!isfinite(in) || !isfinite(out))
    return (double)NAN;
  if (in == 0.0)
    return out == 0.0 ? 0.0 : (double)NAN;
  return (out - in) / fabs(in);
}

static void fmt_num(char *b, size_t n, double v) {
  if (isnan(v))
    snprintf(b, n, signbit(v) ? "-nan" : "nan");
  else if (isinf(v))
    snprintf(b, n, v > 0 ? "inf" : "-inf");
  else
    snprintf(b, n, "%.9g", v);
}

static cJSON *json_num(double v) {
  char b[32];
  if (isfinite(v))
    return cJSON_CreateNumber(v);
  fmt_num(b, sizeof b, v);
  return cJSON_CreateString(b);
}

static int run(int argc, char **argv) {
  const char *to = NULL;
  int sat = 0, json = 0, nvals = 0, opts_done = 0;
  const char **vals = calloc((size_t)argc, sizeof *vals);
  uint32_t *in_bits_all = calloc((size_t)argc, sizeof *in_bits_all);
  if (!vals || !in_bits_all) {
    free(vals);
    free(in_bits_all);
    return cli_runtime_error("convert", "out of memory");
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!opts_done && strcmp(a, "--") == 0) {
      opts_done = 1;
    } else if (!opts_done && (strcmp(a, "--to") == 0 || strncmp(a, "--to=", 5) == 0)) {
      if (to) {
        free(vals);
        free(in_bits_all);
        return cli_usage_error("convert", "--to given twice ('%s' and '%s')", to, a);
      }
      if (a[4] == '=') {
        to = a + 5;
      } else if (i + 1 >= argc) {
        free(vals);
        free(in_bits_all);
        return cli_usage_error("convert", "--to needs a format (f16, bf16, e4m3, e5m2 or f32)");
      } else {
        to = argv[++i];
      }
    } else if (!opts_done && strcmp(a, "--saturate") == 0) {
      sat = 1;
    } else if (!opts_done && strcmp(a, "--json") == 0) {
      json = 1;
    } else if (!opts_done && a[0] == '-' &&
               (a[1] == '-' || (isalpha((unsigned char)a[1]) && strncasecmp(a + 1, "inf", 3) != 0 &&
                                strncasecmp(a + 1, "nan", 3) != 0))) {
      free(vals);
      free(in_bits_all);
      return cli_usage_error("convert", "unknown option '%s'", a);
    } else {
      vals[nvals++] = a;
    }
  }
  int rc = AMPC_EXIT_OK;
  ampc_dtype dt = AMPC_F32;
  if (!to) {
    rc = cli_usage_error("convert", "missing --to FORMAT (f16, bf16, e4m3, e5m2 or f32)");
  } else if (ampc_dtype_parse(to, &dt) != AMPC_OK) {
    rc = cli_usage_error("convert", "--to: %s", ampc_last_error());
  } else if (sat && dt != AMPC_F8_E4M3 && dt != AMPC_F8_E5M2) {
    rc = cli_usage_error("convert", "--saturate applies only to e4m3 and e5m2, not '%s'", to);
  } else if (nvals == 0) {
    rc = cli_usage_error("convert", "no VALUE given");
  }
  /* validate every value before printing anything */
  for (int i = 0; rc == AMPC_EXIT_OK && i < nvals; i++) {
    const char *why;
    if (parse_value(vals[i], &in_bits_all[i], &why) != 0)
      rc = cli_usage_error("convert", "bad VALUE '%s': %s", vals[i], why);
  }
  for (int i = 0; rc == AMPC_EXIT_OK && i < nvals; i++) {
    const uint32_t in_bits = in_bits_all[i];
    const double in = (double)ampc_bits_f32(in_bits);
    double out;
    const uint32_t out_bits = round_to(dt, in_bits, sat, &out);
    const char *cls = ampc_fpclass_name(ampc_classify(dt, out_bits));
    const double rel = rel_error(in, out);
    const int width = (int)ampc_dtype_size(dt) * 2;
    char ob[16];
    snprintf(ob, sizeof ob, "0x%0*x", width, (unsigned)out_bits);
    if (json) {
      char ib[16];
      snprintf(ib, sizeof ib, "0x%08x", (unsigned)in_bits);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "input", vals[i]);
      cJSON_AddStringToObject(o, "input_bits", ib);
      cJSON_AddItemToObject(o, "input_value", json_num(in));
      cJSON_AddStringToObject(o, "to", ampc_dtype_name(dt));
      cJSON_AddBoolToObject(o, "saturate", sat);
      cJSON_AddStringToObject(o, "output_bits", ob);
      cJSON_AddItemToObject(o, "value", json_num(out));
      cJSON_AddStringToObject(o, "class", cls);
      if (isnan(rel))
        cJSON_AddNullToObject(o, "rel_error");
      else
        cJSON_AddNumberToObject(o, "rel_error", rel);
      rc = cli_print_json("convert", o);
    } else {
      char inb[32], outb[32], relb[32];
      fmt_num(inb, sizeof inb, in);
      fmt_num(outb, sizeof outb, out);
      if (isnan(rel))
        snprintf(relb, sizeof relb, "n/a");
      else
        snprintf(relb, sizeof relb, "%.3e", rel);
      printf("%s: fp32 0x%08x (%s) -> %s %s = %s (%s), rel_error %s\n", vals[i], (unsigned)in_bits,
             inb, ampc_dtype_name(dt), ob, outb, cls, relb);
    }
  }
  free(vals);
  free(in_bits_all);
  return rc;
}

const ampc_command ampc_cmd_convert = {
    .name = "convert",
    .summary = "round values to f16, bf16, e4m3, e5m2 (or f32); show bits and error",
    .usage = k_usage,
    .run = run,
};
