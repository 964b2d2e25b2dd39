/*
 * tools/ampc/cmd_quantize.c: `ampc quantize --checkpoint F --out F`: INT8
 * post-training quantization of a trained checkpoint's linear layers
 * (include/ampc/quant.h) and the per-layer report.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ampc/quant.h"

static const char k_usage[] =
    "Usage: ampc quantize --checkpoint FILE --out FILE [--granularity channel|tensor]\n"
    "                     [--keep LIST] [--json]\n"
    "\n"
    "INT8 post-training quantization of a trained model's linear layers: symmetric\n"
    "INT8 weights (values -127..127, zero point 0), one scale per output channel\n"
    "(default) or per tensor; scale = max|w| / 127, rounded to nearest even. Writes a\n"
    "safetensors file (I8 weights NAME with F32 NAME_scale, other tensors F32,\n"
    "optimizer state left out), readable by PyTorch, and prints each layer's\n"
    "signal-to-quantization-noise ratio (SQNR, dB) per channel and per tensor, and\n"
    "the most sensitive layers.\n"
    "\n"
    "Options:\n"
    "  --checkpoint FILE   a checkpoint written by ampc train --save\n"
    "  --out FILE          the quantized checkpoint (written atomically)\n"
    "  --granularity G     channel (default) or tensor\n"
    "  --keep LIST         comma-separated name prefixes of layers left in FP32\n"
    "                      (default vision.patch_embed,heads: the first and last\n"
    "                      layers); --keep none quantizes every linear layer\n"
    "  --json              the report as one JSON object\n"
    "  -h, --help          show this help\n"
    "\n"
    "Example:\n"
    "  ampc train --steps 500 --save run.st && ampc quantize --checkpoint run.st --out "
    "run.int8.st\n";

static int run(int argc, char **argv) {
  ampc_quant_options o = {0};
  const char *gran = "channel";
  bool json = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = !strcmp(a, "--checkpoint")    ? &o.checkpoint
                        : !strcmp(a, "--out")         ? &o.out
                        : !strcmp(a, "--granularity") ? &gran
                        : !strcmp(a, "--keep")        ? &o.keep
                                                      : NULL;
    if (slot) {
      if (i + 1 >= argc)
        return cli_usage_error("quantize", "%s needs a value", a);
      *slot = argv[++i];
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else {
      return cli_usage_error("quantize", "unknown option '%s'", a);
    }
  }
  if (!o.checkpoint || !o.out)
    return cli_usage_error("quantize", "%s is required", !o.checkpoint ? "--checkpoint" : "--out");
  if (!strcmp(gran, "channel"))
    o.granularity = AMPC_QUANT_CHANNEL;
  else if (!strcmp(gran, "tensor"))
    o.granularity = AMPC_QUANT_TENSOR;
  else
    return cli_usage_error("quantize", "--granularity '%s': expected channel or tensor", gran);
  if (o.keep && !strcmp(o.keep, "none"))
    o.keep = "";
  else if (o.keep && (!o.keep[0] || strspn(o.keep, ",") == strlen(o.keep)))
    return cli_usage_error("quantize", "--keep '%s': no layer named (none: quantize every layer)",
                           o.keep);
  else if (o.keep && strstr(o.keep, "none"))
    return cli_usage_error("quantize", "--keep %s: 'none' cannot be combined with layer names",
                           o.keep);
  /* the same file by any spelling or link: refused, it would be replaced */
  struct stat a, b;
  if (!strcmp(o.checkpoint, o.out) || (stat(o.checkpoint, &a) == 0 && stat(o.out, &b) == 0 &&
                                       a.st_dev == b.st_dev && a.st_ino == b.st_ino))
    return cli_usage_error("quantize", "--out %s is the checkpoint itself (%s)", o.out,
                           o.checkpoint);
  ampc_quant_report r;
  const ampc_status st = ampc_quantize_checkpoint(&o, &r);
  if (st == AMPC_ERR_INVALID_ARG) /* a --keep that names nothing */
    return cli_usage_error("quantize", "%s", ampc_last_error());
  if (st != AMPC_OK)
    return cli_runtime_error("quantize", "%s", ampc_last_error());
  /* the most sensitive: the quantized layers of lowest SQNR */
  int worst[3] = {-1, -1, -1};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < r.n; i++) {
      if (r.layers[i].kept || i == worst[0] || i == worst[1])
        continue;
      if (worst[k] < 0 || r.layers[i].sqnr_db < r.layers[worst[k]].sqnr_db)
        worst[k] = i;
    }
  if (json) {
    cJSON *j = cJSON_CreateObject(), *ls = cJSON_AddArrayToObject(j, "layers");
    cJSON_AddStringToObject(j, "checkpoint", o.checkpoint);
    cJSON_AddStringToObject(j, "out", o.out);
    cJSON_AddStringToObject(j, "granularity", gran);
    for (int i = 0; i < r.n; i++) {
      const ampc_quant_layer *L = &r.layers[i];
      cJSON *l = cJSON_CreateObject();
      cJSON_AddStringToObject(l, "name", L->name);
      cJSON *sh = cJSON_AddArrayToObject(l, "shape");
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)L->rows));
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)L->cols));
      cJSON_AddBoolToObject(l, "kept", L->kept);
      cJSON_AddNumberToObject(l, "amax", (double)L->amax);
      if (!L->kept)
        cJSON_AddNumberToObject(l, "sqnr_db", L->sqnr_db);
      cJSON_AddNumberToObject(l, "sqnr_per_tensor_db", L->sqnr_tensor_db);
      cJSON_AddItemToArray(ls, l);
    }
    cJSON_AddNumberToObject(j, "params_quantized", (double)r.params_quantized);
    cJSON_AddNumberToObject(j, "params_kept", (double)r.params_kept);
    cJSON_AddNumberToObject(j, "params_other", (double)r.params_other);
    cJSON_AddNumberToObject(j, "bytes_fp32", (double)r.bytes_fp32);
    cJSON_AddNumberToObject(j, "bytes_out", (double)r.bytes_out);
    char *t = cJSON_PrintUnformatted(j);
    printf("%s\n", t ? t : "{}");
    free(t), cJSON_Delete(j);
  } else {
    printf("%-44s %9s %8s %9s %10s\n", "layer", "shape", "max|w|", "SQNR dB", "per tensor");
    for (int i = 0; i < r.n; i++) {
      const ampc_quant_layer *L = &r.layers[i];
      char sh[32], sq[16];
      snprintf(sh, sizeof sh, "%lldx%lld", (long long)L->rows, (long long)L->cols);
      if (L->kept)
        snprintf(sq, sizeof sq, "kept f32");
      else
        snprintf(sq, sizeof sq, "%.1f", L->sqnr_db);
      printf("%-44s %9s %8.4f %9s %10.1f\n", L->name, sh, (double)L->amax, sq, L->sqnr_tensor_db);
    }
    printf("most sensitive (lowest SQNR):");
    for (int k = 0; k < 3 && worst[k] >= 0; k++)
      printf("%s %s (%.1f dB)", k ? "," : "", r.layers[worst[k]].name, r.layers[worst[k]].sqnr_db);
    printf("\n%lld parameters in INT8, %lld kept in FP32, %lld others in FP32; %s: %.2f MiB "
           "(FP32 model %.2f MiB)\n",
           (long long)r.params_quantized, (long long)r.params_kept, (long long)r.params_other,
           o.out, (double)r.bytes_out / 1048576.0, (double)r.bytes_fp32 / 1048576.0);
  }
  ampc_quant_report_free(&r);
  return AMPC_EXIT_OK;
}

const ampc_command ampc_cmd_quantize = {
    .name = "quantize",
    .summary = "INT8 post-training quantization of a checkpoint; per-layer SQNR",
    .usage = k_usage,
    .run = run,
};
