/*
 * tests/test_cli.c: the `ampc` command line as a user meets it: exit codes
 * (0 ok, 1 runtime error, 2 bad usage), help and version, `formats` and
 * `convert` output (JSON parsed with cJSON). argv[1] is the path to ampc.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *g_ampc;

typedef struct {
  int code;
  char out[65536];
} result;

/* Run `ampc ARGS` (stderr to /dev/null), capture stdout and the exit code. */
static void run(result *r, const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", g_ampc, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(r->out, 1, sizeof r->out - 1, p);
  r->out[n] = '\0';
  int st = pclose(p);
  assert_true(WIFEXITED(st));
  r->code = WEXITSTATUS(st);
}

static result R;

static void test_top_level(void **state) {
  (void)state;
  run(&R, "--help");
  assert_int_equal(R.code, 0);
  assert_non_null(strstr(R.out, "formats"));
  assert_non_null(strstr(R.out, "convert"));
  run(&R, "--version");
  assert_int_equal(R.code, 0);
  assert_non_null(strstr(R.out, "ampc "));
  run(&R, "");
  assert_int_equal(R.code, 2);
  run(&R, "frobnicate");
  assert_int_equal(R.code, 2);
  run(&R, "formats --help");
  assert_int_equal(R.code, 0);
  assert_non_null(strstr(R.out, "Usage: ampc formats"));
  run(&R, "convert --help");
  assert_int_equal(R.code, 0);
  assert_non_null(strstr(R.out, "Usage: ampc convert"));
}

static double num(cJSON *o, const char *fmt, const char *key) {
  cJSON *f = cJSON_GetObjectItemCaseSensitive(o, fmt);
  assert_non_null(f);
  cJSON *v = cJSON_GetObjectItemCaseSensitive(f, key);
  assert_true(cJSON_IsNumber(v));
  return v->valuedouble;
}

static void test_formats(void **state) {
  (void)state;
  run(&R, "formats");
  assert_int_equal(R.code, 0);
  assert_non_null(strstr(R.out, "65504"));
  assert_non_null(strstr(R.out, "2^-11"));
  run(&R, "formats --json");
  assert_int_equal(R.code, 0);
  cJSON *o = cJSON_Parse(R.out);
  assert_non_null(o);
  assert_true(num(o, "fp16", "max") == 65504.0);
  assert_true(num(o, "fp16", "overflow_threshold") == 65520.0);
  assert_true(num(o, "fp16", "swallow_ratio") == 0x1p-11);
  assert_true(num(o, "fp16", "underflow_threshold") == 0x1p-25);
  assert_true(num(o, "bf16", "epsilon") == 0x1p-7);
  assert_true(num(o, "e4m3", "max") == 448.0);
  assert_true(num(o, "e5m2", "max") == 57344.0);
  assert_true(num(o, "fp32", "min_subnormal") == 0x1p-149);
  cJSON_Delete(o);
  run(&R, "formats --bogus");
  assert_int_equal(R.code, 2);
}

static cJSON *convert_json(const char *args) {
  char a[512];
  snprintf(a, sizeof a, "convert --json %s", args);
  run(&R, a);
  assert_int_equal(R.code, 0);
  cJSON *o = cJSON_Parse(R.out);
  assert_non_null(o);
  return o;
}

static const char *str(cJSON *o, const char *key) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  assert_true(cJSON_IsString(v));
  return v->valuestring;
}

static void test_convert(void **state) {
  (void)state;
  cJSON *o = convert_json("--to f16 65519.99");
  assert_string_equal(str(o, "output_bits"), "0x7bff");
  assert_string_equal(str(o, "class"), "normal");
  assert_true(cJSON_GetObjectItem(o, "value")->valuedouble == 65504.0);
  assert_true(cJSON_IsNumber(cJSON_GetObjectItem(o, "rel_error")));
  cJSON_Delete(o);
  o = convert_json("--to f16 0x33000001");
  assert_string_equal(str(o, "input_bits"), "0x33000001");
  assert_string_equal(str(o, "output_bits"), "0x0001");
  assert_string_equal(str(o, "class"), "subnormal");
  cJSON_Delete(o);
  o = convert_json("--to f16 -65520");
  assert_string_equal(str(o, "output_bits"), "0xfc00");
  assert_string_equal(str(o, "value"), "-inf");
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "rel_error")));
  cJSON_Delete(o);
  o = convert_json("--to bf16 nan");
  assert_string_equal(str(o, "class"), "nan");
  cJSON_Delete(o);
  o = convert_json("--to e4m3 --saturate 465");
  assert_string_equal(str(o, "output_bits"), "0x7e");
  cJSON_Delete(o);
  o = convert_json("--to e4m3 465");
  assert_string_equal(str(o, "output_bits"), "0x7f");
  cJSON_Delete(o);
  o = convert_json("--to=e5m2 -- -61440");
  assert_string_equal(str(o, "output_bits"), "0xfc");
  cJSON_Delete(o);
  o = convert_json("--to f16 1e-8");
  assert_string_equal(str(o, "class"), "zero");
  assert_true(cJSON_GetObjectItem(o, "rel_error")->valuedouble == -1.0);
  cJSON_Delete(o);

  /* several values: one JSON object per line */
  run(&R, "convert --json --to f16 1 2 3");
  assert_int_equal(R.code, 0);
  int lines = 0;
  for (const char *p = R.out; *p; p++)
    lines += *p == '\n';
  assert_int_equal(lines, 3);
  /* plain text */
  run(&R, "convert --to f16 65520");
  assert_int_equal(R.code, 0);
  assert_non_null(strstr(R.out, "0x7c00"));

  /* bad usage -> 2 */
  const char *bad[] = {"convert 1.0",
                       "convert --to f12 1",
                       "convert --to f16",
                       "convert --to f16 abc",
                       "convert --to f16 1.5x",
                       "convert --to f16 ''",
                       "convert --to f16 0x123456789",
                       "convert --to f16 -0x10",
                       "convert --to f16 --saturate 1",
                       "convert --to",
                       "convert --to f16 --bogus 1",
                       "convert --to f16 -x 1",
                       "convert --to f16 --to bf16 1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    run(&R, bad[i]);
    if (R.code != 2)
      fail_msg("'ampc %s' exited %d, expected 2", bad[i], R.code);
    assert_int_equal(R.out[0], '\0'); /* nothing printed to stdout */
  }
}

static void test_write_errors(void **state) {
  (void)state;
  const char *cmds[] = {
      "formats >/dev/full",   "formats --json >/dev/full",     "--help >/dev/full",
      "--version >/dev/full", "convert --to f16 1 >/dev/full", "convert --help >/dev/full"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    run(&R, cmds[i]);
    if (R.code != 1)
      fail_msg("'ampc %s' exited %d, expected 1", cmds[i], R.code);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_cli PATH_TO_AMPC\n");
    return 2;
  }
  g_ampc = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_top_level),
      cmocka_unit_test(test_formats),
      cmocka_unit_test(test_convert),
      cmocka_unit_test(test_write_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
