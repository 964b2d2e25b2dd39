/*
 * src/numeric/scalar.c: the public scalar reference conversions and dtype names.
 * The bit-level work is in numeric.h; semantics in include/ampc/dtype.h.
 */
#include "internal.h"

#include <ctype.h>
#include <string.h>

#include "numeric/numeric.h"

static const struct {
  const char *name;
  size_t size;
} k_dtypes[AMPC_DTYPE_COUNT] = {
    [AMPC_F32] = {"f32", 4},      [AMPC_F16] = {"f16", 2},      [AMPC_BF16] = {"bf16", 2},
    [AMPC_F8_E4M3] = {"e4m3", 1}, [AMPC_F8_E5M2] = {"e5m2", 1},
};

static int dtype_valid(ampc_dtype dt) { return (unsigned)dt < (unsigned)AMPC_DTYPE_COUNT; }

size_t ampc_dtype_size(ampc_dtype dt) { return dtype_valid(dt) ? k_dtypes[dt].size : 0; }

const char *ampc_dtype_name(ampc_dtype dt) { return dtype_valid(dt) ? k_dtypes[dt].name : "?"; }

ampc_status ampc_dtype_parse(const char *name, ampc_dtype *out) {
  static const struct {
    const char *alias;
    ampc_dtype dt;
  } aliases[] = {
      {"f32", AMPC_F32},         {"fp32", AMPC_F32},         {"float32", AMPC_F32},
      {"float", AMPC_F32},       {"f16", AMPC_F16},          {"fp16", AMPC_F16},
      {"half", AMPC_F16},        {"float16", AMPC_F16},      {"binary16", AMPC_F16},
      {"bf16", AMPC_BF16},       {"bfloat16", AMPC_BF16},    {"e4m3", AMPC_F8_E4M3},
      {"f8_e4m3", AMPC_F8_E4M3}, {"fp8_e4m3", AMPC_F8_E4M3}, {"e5m2", AMPC_F8_E5M2},
      {"f8_e5m2", AMPC_F8_E5M2}, {"fp8_e5m2", AMPC_F8_E5M2},
  };
  if (!name || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "dtype name is NULL");
  char low[32];
  size_t n = strlen(name);
  if (n >= sizeof low)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "unknown dtype '%.40s'", name);
  for (size_t i = 0; i <= n; i++)
    low[i] = (char)tolower((unsigned char)name[i]);
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    if (strcmp(low, aliases[i].alias) == 0) {
      *out = aliases[i].dt;
      return AMPC_OK;
    }
  }
  return ampc_fail(AMPC_ERR_INVALID_ARG,
                   "unknown dtype '%s' (expected f32, f16, bf16, e4m3 or e5m2)", name);
}

ampc_f16 ampc_f32_to_f16(float x) { return (ampc_f16){ampc_f32bits_to_f16bits(ampc_f32_bits(x))}; }
float ampc_f16_to_f32(ampc_f16 h) { return ampc_bits_f32(ampc_f16bits_to_f32bits(h.bits)); }

ampc_bf16 ampc_f32_to_bf16(float x) {
  return (ampc_bf16){ampc_f32bits_to_bf16bits(ampc_f32_bits(x))};
}
float ampc_bf16_to_f32(ampc_bf16 h) { return ampc_bits_f32(ampc_bf16bits_to_f32bits(h.bits)); }

ampc_f8_e4m3 ampc_f32_to_e4m3(float x, bool saturate) {
  return (ampc_f8_e4m3){ampc_f32bits_to_e4m3bits(ampc_f32_bits(x), saturate)};
}
float ampc_e4m3_to_f32(ampc_f8_e4m3 v) { return ampc_bits_f32(ampc_e4m3bits_to_f32bits(v.bits)); }

ampc_f8_e5m2 ampc_f32_to_e5m2(float x, bool saturate) {
  return (ampc_f8_e5m2){ampc_f32bits_to_e5m2bits(ampc_f32_bits(x), saturate)};
}
float ampc_e5m2_to_f32(ampc_f8_e5m2 v) { return ampc_bits_f32(ampc_e5m2bits_to_f32bits(v.bits)); }
