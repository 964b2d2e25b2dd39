/*
 * tests/test_safetensors.c: safetensors checkpoints (ampc/io.h).
 *
 * Round trips of every dtype and odd shapes (a 0-d scalar, empty tensors, 8
 * dims) with bit-exact data and metadata; the exact bytes of a tiny file; the
 * reader refusing malformed files (each built by hand here) with
 * AMPC_ERR_FORMAT; the writer refusing bad arguments and failing cleanly on
 * I/O errors (missing directory, a file-size limit standing in for a full
 * disk): AMPC_ERR_IO, no temporary file left, the old file untouched.
 *
 * `test_safetensors --write-check FILE` only writes FILE (the tensor
 * "check.f32", shape [2, 3], values 0.5 * i, and metadata step = "7", plus a
 * few more tensors) for tests/reference/check_safetensors.py and exits.
 */
#define _XOPEN_SOURCE 700

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ampc/io.h"

static char g_dir[64]; /* this run's scratch directory */
static char g_path[256];

static const char *in_dir(const char *name) {
  snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
  return g_path;
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/ampc_st_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

/* Remove every file in the scratch directory (it holds no subdirectories
 * except the one made by test_writer_io_errors, which removes it itself). */
static void clear_dir(void) {
  DIR *d = opendir(g_dir);
  assert_non_null(d);
  struct dirent *e;
  char p[512];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
    unlink(p);
  }
  closedir(d);
}

static int teardown(void **state) {
  (void)state;
  clear_dir();
  return rmdir(g_dir);
}

/* Number of entries (other than . and ..) in a directory. */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  const long n = ftell(fp);
  assert_true(n >= 0);
  fseek(fp, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
  fclose(fp);
  b[n] = 0;
  *len = (size_t)n;
  return b;
}

static void put_bytes(const char *path, const void *b, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(b, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
}

/* Write a file with this 8-byte length, header text and data (no padding). */
static void put_file(const char *path, uint64_t hlen, const char *hdr, const void *data,
                     size_t ndata) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  unsigned char le[8];
  for (int i = 0; i < 8; i++)
    le[i] = (unsigned char)(hlen >> (8 * i));
  assert_int_equal(fwrite(le, 1, 8, fp), 8);
  const size_t hl = strlen(hdr);
  if (hl)
    assert_int_equal(fwrite(hdr, 1, hl, fp), hl);
  if (ndata)
    assert_int_equal(fwrite(data, 1, ndata, fp), ndata);
  assert_int_equal(fclose(fp), 0);
}

/* A file whose length field is right for hdr, padded with spaces to 8. */
static void put_header(const char *path, const char *hdr, size_t ndata) {
  char buf[4096];
  size_t n = strlen(hdr);
  assert_true(n + 8 < sizeof buf);
  memcpy(buf, hdr, n);
  while (n % 8)
    buf[n++] = ' ';
  buf[n] = 0;
  unsigned char data[256];
  assert_true(ndata <= sizeof data);
  for (size_t i = 0; i < ndata; i++)
    data[i] = (unsigned char)(i * 7 + 1);
  put_file(path, n, buf, data, ndata);
}

static ampc_st_tensor mk(const char *name, ampc_dtype dt, int ndim, const int64_t *shape,
                         const void *data, size_t nbytes) {
  ampc_st_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name;
  t.dtype = dt;
  t.ndim = ndim;
  for (int i = 0; i < ndim; i++)
    t.shape[i] = shape[i];
  t.data = data;
  t.nbytes = nbytes;
  return t;
}

static void fill(void *p, size_t n, uint32_t seed) {
  unsigned char *b = p;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b[i] = (unsigned char)x;
  }
}

/* ---- round trips ---------------------------------------------------------- */

static void test_round_trip(void **state) {
  (void)state;
  static uint32_t f32[2 * 3];
  static uint16_t f16[4], bf16[1 * 1 * 5], f16_8d[2 * 3];
  static uint8_t e4m3[1], e5m2_big[3000];
  static uint32_t big[65536]; /* 256 KiB: more than one stdio buffer */
  fill(f32, sizeof f32, 1);
  f32[0] = 0x7FC12345u; /* a NaN with payload: kept bit for bit */
  f32[1] = 0x80000000u; /* -0 */
  fill(f16, sizeof f16, 2);
  fill(bf16, sizeof bf16, 3);
  fill(f16_8d, sizeof f16_8d, 4);
  e4m3[0] = 0x7F;
  fill(e5m2_big, sizeof e5m2_big, 5);
  fill(big, sizeof big, 6);
  const int64_t s23[] = {2, 3}, s4[] = {4}, s115[] = {1, 1, 5}, s03[] = {0, 3}, s0[] = {0},
                s8d[] = {1, 2, 1, 1, 3, 1, 1, 1}, s_big[] = {256, 256}, s_e5[] = {3000},
                s_zero_big[] = {0, (int64_t)1 << 50};
  const ampc_st_tensor t[] = {
      mk("layer.0.weight", AMPC_F32, 2, s23, f32, sizeof f32),
      mk("h\xC3\xA9llo/\"quoted\"\\", AMPC_F16, 1, s4, f16, sizeof f16),
      mk("bf", AMPC_BF16, 3, s115, bf16, sizeof bf16),
      mk("scalar", AMPC_F8_E4M3, 0, NULL, e4m3, 1),
      mk("empty", AMPC_F8_E5M2, 2, s03, NULL, 0),
      mk("empty1d", AMPC_F32, 1, s0, NULL, 0),
      mk("eight", AMPC_F16, 8, s8d, f16_8d, sizeof f16_8d),
      mk("big", AMPC_F32, 2, s_big, big, sizeof big),
      mk("e5", AMPC_F8_E5M2, 1, s_e5, e5m2_big, sizeof e5m2_big),
      mk("empty_wide", AMPC_BF16, 2, s_zero_big, NULL, 0),
  };
  const int n = (int)(sizeof t / sizeof t[0]);
  const ampc_st_meta meta[] = {
      {"step", "7"}, {"format", "pt"}, {"note", "caf\xC3\xA9 \"x\"\n"}, {"empty", ""}};
  const char *path = in_dir("rt.safetensors");
  assert_int_equal(ampc_safetensors_write(path, t, n, meta, 4), AMPC_OK);
  assert_int_equal(count_entries(g_dir), 1); /* no temporary file left */

  ampc_safetensors *f = NULL;
  assert_int_equal(ampc_safetensors_read(path, &f), AMPC_OK);
  assert_non_null(f);
  assert_int_equal(ampc_safetensors_count(f), n);
  /* written in the order given, so data-offset order is the same; empty
   * tensors sit at the offset where they were written */
  for (int i = 0; i < n; i++) {
    const ampc_st_tensor *r = ampc_safetensors_tensor(f, i);
    assert_non_null(r);
    assert_string_equal(r->name, t[i].name);
    assert_int_equal(r->dtype, t[i].dtype);
    assert_int_equal(r->ndim, t[i].ndim);
    for (int k = 0; k < t[i].ndim; k++)
      assert_int_equal(r->shape[k], t[i].shape[k]);
    assert_int_equal(r->nbytes, t[i].nbytes);
    if (t[i].nbytes)
      assert_memory_equal(r->data, t[i].data, t[i].nbytes);
    assert_ptr_equal(ampc_safetensors_find(f, t[i].name), r);
  }
  assert_null(ampc_safetensors_tensor(f, -1));
  assert_null(ampc_safetensors_tensor(f, n));
  assert_null(ampc_safetensors_find(f, "nope"));
  assert_null(ampc_safetensors_find(f, "__metadata__"));
  for (int i = 0; i < 4; i++)
    assert_string_equal(ampc_safetensors_meta(f, meta[i].key), meta[i].value);
  assert_null(ampc_safetensors_meta(f, "absent"));
  ampc_safetensors_free(f);
  ampc_safetensors_free(NULL);

  /* no tensors, no metadata: a valid file too */
  path = in_dir("none.safetensors");
  assert_int_equal(ampc_safetensors_write(path, NULL, 0, NULL, 0), AMPC_OK);
  assert_int_equal(ampc_safetensors_read(path, &f), AMPC_OK);
  assert_int_equal(ampc_safetensors_count(f), 0);
  assert_null(ampc_safetensors_tensor(f, 0));
  assert_null(ampc_safetensors_meta(f, "step"));
  ampc_safetensors_free(f);
  clear_dir();
}

/* Offsets in the header, not the order of entries, decide the tensor order;
 * an unpadded header is accepted (older writers did not pad). */
static void test_read_offset_order(void **state) {
  (void)state;
  const char *path = in_dir("order.safetensors");
  const char *hdr = "{\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],\"extra\":1}}";
  const unsigned char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  put_file(path, strlen(hdr), hdr, data, 8);
  ampc_safetensors *f = NULL;
  assert_int_equal(ampc_safetensors_read(path, &f), AMPC_OK);
  assert_int_equal(ampc_safetensors_count(f), 3);
  assert_string_equal(ampc_safetensors_tensor(f, 0)->name, "a");
  assert_string_equal(ampc_safetensors_tensor(f, 1)->name, "z");
  assert_string_equal(ampc_safetensors_tensor(f, 2)->name, "b");
  assert_int_equal(ampc_safetensors_tensor(f, 0)->ndim, 0);
  assert_memory_equal(ampc_safetensors_find(f, "b")->data, data + 4, 4);
  assert_memory_equal(ampc_safetensors_find(f, "a")->data, data, 4);
  ampc_safetensors_free(f);
  clear_dir();
}

/* ---- the bytes on disk ---------------------------------------------------- */

static void test_exact_bytes(void **state) {
  (void)state;
  const float v[2] = {1.0f, -2.0f};
  const int64_t s2[] = {2};
  const ampc_st_tensor t = mk("a", AMPC_F32, 1, s2, v, sizeof v);
  const ampc_st_meta m = {"k", "v"};
  const char *path = in_dir("tiny.safetensors");
  assert_int_equal(ampc_safetensors_write(path, &t, 1, &m, 1), AMPC_OK);
  size_t len;
  unsigned char *b = slurp(path, &len);
  const char json[] = "{\"__metadata__\":{\"k\":\"v\"},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  const size_t jl = sizeof json - 1; /* 79 */
  const size_t hl = (jl + 7) / 8 * 8;
  uint64_t n = 0;
  for (int i = 0; i < 8; i++)
    n |= (uint64_t)b[i] << (8 * i);
  assert_int_equal(n, hl);
  assert_int_equal(n % 8, 0);
  assert_int_equal(len, 8 + hl + 8);
  assert_memory_equal(b + 8, json, jl);
  for (size_t i = 8 + jl; i < 8 + hl; i++)
    assert_int_equal(b[i], ' ');
  /* little-endian FP32: 1.0 = 0x3F800000, -2.0 = 0xC0000000 */
  const unsigned char want[8] = {0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0};
  assert_memory_equal(b + 8 + hl, want, 8);

  /* and the JSON, parsed independently, says what it should */
  cJSON *o = cJSON_ParseWithLength((const char *)b + 8, (size_t)n);
  assert_non_null(o);
  assert_true(cJSON_IsObject(o));
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "__metadata__");
  assert_true(cJSON_IsObject(md));
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(md, "k")->valuestring, "v");
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "a");
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(a, "dtype")->valuestring, "F32");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(a, "shape");
  assert_int_equal(cJSON_GetArraySize(sh), 1);
  assert_int_equal(cJSON_GetArrayItem(sh, 0)->valueint, 2);
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(a, "data_offsets");
  assert_int_equal(cJSON_GetArraySize(off), 2);
  assert_int_equal(cJSON_GetArrayItem(off, 0)->valueint, 0);
  assert_int_equal(cJSON_GetArrayItem(off, 1)->valueint, 8);
  cJSON_Delete(o);
  free(b);

  /* every dtype gets its safetensors name */
  static const char *const names[] = {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"};
  for (int dt = 0; dt < 5; dt++) {
    const int64_t s0[] = {0};
    const ampc_st_tensor e = mk("x", (ampc_dtype)dt, 1, s0, NULL, 0);
    assert_int_equal(ampc_safetensors_write(path, &e, 1, NULL, 0), AMPC_OK);
    b = slurp(path, &len);
    char expect[128];
    snprintf(expect, sizeof expect, "{\"x\":{\"dtype\":\"%s\",\"shape\":[0],", names[dt]);
    assert_memory_equal(b + 8, expect, strlen(expect));
    assert_true(len % 8 == 0); /* no data: the file is the padded header */
    free(b);
  }
  clear_dir();
}

/* ---- malformed files ------------------------------------------------------ */

static void expect_format(const char *path, const char *needle) {
  ampc_safetensors *f = (ampc_safetensors *)&f; /* must be reset to NULL */
  const ampc_status st = ampc_safetensors_read(path, &f);
  if (st != AMPC_ERR_FORMAT)
    fail_msg("%s: got status %d (%s), want AMPC_ERR_FORMAT", path, (int)st, ampc_last_error());
  assert_null(f);
  const char *msg = ampc_last_error();
  assert_non_null(strstr(msg, path));
  if (needle && !strstr(msg, needle))
    fail_msg("message \"%s\" lacks \"%s\"", msg, needle);
}

#define F32_2 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"

static void test_reject_malformed(void **state) {
  (void)state;
  const char *p = in_dir("bad.safetensors");

  put_bytes(p, "", 0);
  expect_format(p, "0 bytes");
  put_bytes(p, "\x08\0\0\0\0\0\0", 7);
  expect_format(p, "7 bytes");
  put_file(p, 100, "{}", NULL, 0); /* claims 100 header bytes, has 2 */
  expect_format(p, "header length 100");
  put_file(p, (uint64_t)1 << 63, "{}      ", NULL, 0);
  expect_format(p, "header length 9223372036854775808");
  put_file(p, UINT64_MAX, "{}      ", NULL, 0);
  expect_format(p, "header length");
  put_bytes(p, "hello world, this is not a safetensors file", 43); /* text: says so */
  expect_format(p, "not a safetensors file: header length");
  put_file(p, 0, "", NULL, 0); /* empty header */
  expect_format(p, "JSON");
  put_header(p, "not json", 0);
  expect_format(p, "not valid JSON");
  put_header(p, "[1, 2]", 0);
  expect_format(p, "not a JSON object");
  put_header(p, "\"s\"", 0);
  expect_format(p, "not a JSON object");
  put_header(p, "{} {}", 0);
  expect_format(p, "after the JSON");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}\xFF", 4);
  expect_format(p, "UTF-8");
  put_bytes(p, "\x08\0\0\0\0\0\0\0{}\0     ", 16); /* NUL padding is not whitespace */
  expect_format(p, "after the JSON");

  /* entries */
  put_header(p, "{\"a\":[]}", 0);
  expect_format(p, "tensor 'a': entry is not a JSON object");
  put_header(p, "{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
  expect_format(p, "dtype 'Q4'");
  put_header(p, "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8);
  expect_format(p, "dtype 'F64'");
  put_header(p, "{\"a\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_format(p, "dtype is not a string");
  put_header(p, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_format(p, "missing \"dtype\"");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4);
  expect_format(p, "missing \"shape\"");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
  expect_format(p, "missing \"data_offsets\"");
  put_header(
      p, "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_format(p, "duplicate key 'dtype'");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0);
  expect_format(p, "shape[0] is negative");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 10);
  expect_format(p, "shape[0] is not an integer");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8);
  expect_format(p, "shape[0] is not a number");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8);
  expect_format(p, "shape is not an array");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
             4);
  expect_format(p, "9 dimensions");
  put_header(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
             "\"data_offsets\":[0,4]}}",
             4);
  expect_format(p, "too large");
  put_header(p,
             "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[4294967296,4294967296,4294967296],"
             "\"data_offsets\":[0,1]}}",
             1);
  expect_format(p, "too large");
  put_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4);
  expect_format(p, "larger than 2^53");
  put_header(p, "{\"a\":" F32_2 "[0,12]}}", 12);
  expect_format(p, "tensor 'a': data_offsets [0, 12] do not match shape [2] of F32 (8 bytes)");
  put_header(p, "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", 12);
  expect_format(p, "tensor 'fc1.weight': data_offsets [0, 12] do not match shape [2, 3] of F32 "
                   "(24 bytes)");
  put_header(p, "{\"a\":" F32_2 "[0,8,16]}}", 8);
  expect_format(p, "array of two");
  put_header(p, "{\"a\":" F32_2 "[-8,0]}}", 8);
  expect_format(p, "data_offsets[0] is negative");
  put_header(p, "{\"a\":" F32_2 "[0,8]}}", 4); /* past the end */
  expect_format(p, "past the end");
  put_header(p, "{\"a\":" F32_2 "[8,0]}}", 8); /* end < begin */
  expect_format(p, "end before");
  put_header(p, "{\"a\":" F32_2 "[0,8]},\"b\":" F32_2 "[4,12]}}", 12); /* overlap */
  expect_format(p, "overlap");
  put_header(p, "{\"a\":" F32_2 "[0,8]},\"b\":" F32_2 "[0,8]}}", 8); /* same bytes twice */
  expect_format(p, "overlap");
  put_header(p, "{\"a\":" F32_2 "[0,8]},\"b\":" F32_2 "[12,20]}}", 20); /* hole */
  expect_format(p, "hole before tensor 'b'");
  put_header(p, "{\"a\":" F32_2 "[4,12]}}", 12); /* hole at the start */
  expect_format(p, "hole before tensor 'a'");
  put_header(p, "{\"a\":" F32_2 "[0,8]}}", 9); /* a trailing byte no tensor owns */
  expect_format(p, "after the last one");
  put_header(p, "{}", 3);
  expect_format(p, "after the last one");
  put_header(p, "{\"a\":" F32_2 "[0,8]},\"a\":" F32_2 "[8,16]}}", 16);
  expect_format(p, "duplicate tensor name 'a'");

  /* metadata */
  put_header(p, "{\"__metadata__\":{\"k\":1}}", 0);
  expect_format(p, "'k': value is not a string");
  put_header(p, "{\"__metadata__\":{\"k\":null}}", 0);
  expect_format(p, "not a string");
  put_header(p, "{\"__metadata__\":\"x\"}", 0);
  expect_format(p, "__metadata__ is not a JSON object");
  put_header(p, "{\"__metadata__\":{},\"__metadata__\":{}}", 0);
  expect_format(p, "duplicate __metadata__");
  put_header(p, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0);
  expect_format(p, "duplicate __metadata__ key 'k'");

  /* a good file cut short by one byte */
  const float v[6] = {1, 2, 3, 4, 5, 6};
  const int64_t s23[] = {2, 3};
  const ampc_st_tensor t = mk("w", AMPC_F32, 2, s23, v, sizeof v);
  assert_int_equal(ampc_safetensors_write(p, &t, 1, NULL, 0), AMPC_OK);
  ampc_safetensors *f = NULL;
  assert_int_equal(ampc_safetensors_read(p, &f), AMPC_OK);
  ampc_safetensors_free(f);
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(truncate(p, sb.st_size - 1), 0);
  expect_format(p,
                "tensor 'w': data_offsets [0, 24] go past the end of the data region (23 bytes)");
  /* and cut inside the header */
  assert_int_equal(truncate(p, 20), 0);
  expect_format(p, "header length");
  clear_dir();
}

static void test_read_io_errors(void **state) {
  (void)state;
  ampc_safetensors *f = NULL;
  assert_int_equal(ampc_safetensors_read(in_dir("missing.safetensors"), &f), AMPC_ERR_IO);
  assert_null(f);
  assert_non_null(strstr(ampc_last_error(), "missing.safetensors"));
  assert_int_equal(ampc_safetensors_read(g_dir, &f), AMPC_ERR_IO); /* a directory */
  assert_null(f);
  assert_int_equal(ampc_safetensors_read(NULL, &f), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_safetensors_read(in_dir("x"), NULL), AMPC_ERR_INVALID_ARG);
}

/* ---- writer errors -------------------------------------------------------- */

static void expect_write_invalid(const ampc_st_tensor *t, int n, const ampc_st_meta *m, int nm,
                                 const char *needle) {
  const char *path = in_dir("inv.safetensors");
  const ampc_status st = ampc_safetensors_write(path, t, n, m, nm);
  if (st != AMPC_ERR_INVALID_ARG)
    fail_msg("got status %d (%s), want AMPC_ERR_INVALID_ARG", (int)st, ampc_last_error());
  if (needle && !strstr(ampc_last_error(), needle))
    fail_msg("message \"%s\" lacks \"%s\"", ampc_last_error(), needle);
  assert_int_equal(count_entries(g_dir), 0);
}

static void test_writer_invalid_args(void **state) {
  (void)state;
  const float v[6] = {0};
  const int64_t s23[] = {2, 3}, neg[] = {-1}, huge[] = {(int64_t)1 << 40, (int64_t)1 << 40};
  ampc_st_tensor t[2];
  t[0] = mk("a", AMPC_F32, 2, s23, v, sizeof v);
  t[1] = mk("b", AMPC_F32, 2, s23, v, sizeof v);

  t[1].name = "";
  expect_write_invalid(t, 2, NULL, 0, "empty name");
  t[1].name = NULL;
  expect_write_invalid(t, 2, NULL, 0, "empty name");
  t[1].name = "__metadata__";
  expect_write_invalid(t, 2, NULL, 0, "reserved");
  t[1].name = "a";
  expect_write_invalid(t, 2, NULL, 0, "duplicate tensor name 'a'");
  t[1].name = "\xC3\x28"; /* invalid UTF-8 */
  expect_write_invalid(t, 2, NULL, 0, "UTF-8");
  t[1].name = "b";
  t[1].nbytes = 20;
  expect_write_invalid(t, 2, NULL, 0, "nbytes 20 does not match shape [2, 3] of F32 (24 bytes)");
  t[1].nbytes = sizeof v;
  t[1].dtype = AMPC_DTYPE_COUNT;
  expect_write_invalid(t, 2, NULL, 0, "dtype");
  t[1].dtype = AMPC_F32;
  t[1].ndim = 9;
  expect_write_invalid(t, 2, NULL, 0, "ndim 9");
  t[1].ndim = -1;
  expect_write_invalid(t, 2, NULL, 0, "ndim -1");
  t[1] = mk("b", AMPC_F32, 1, neg, v, 0);
  expect_write_invalid(t, 2, NULL, 0, "shape[0] = -1");
  t[1] = mk("b", AMPC_F32, 2, huge, v, 0);
  expect_write_invalid(t, 2, NULL, 0, "too large");
  t[1] = mk("b", AMPC_F32, 2, s23, NULL, sizeof v);
  expect_write_invalid(t, 2, NULL, 0, "NULL");
  t[1] = mk("b", AMPC_F32, 2, s23, v, sizeof v);

  const ampc_st_meta dup[] = {{"k", "1"}, {"k", "2"}};
  expect_write_invalid(t, 2, dup, 2, "duplicate metadata key 'k'");
  const ampc_st_meta nul[] = {{"k", NULL}};
  expect_write_invalid(t, 2, nul, 1, "NULL");
  expect_write_invalid(t, -1, NULL, 0, NULL);
  expect_write_invalid(NULL, 1, NULL, 0, NULL);
  expect_write_invalid(t, 2, NULL, 1, NULL);
  assert_int_equal(ampc_safetensors_write(NULL, t, 2, NULL, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_safetensors_write("", t, 2, NULL, 0), AMPC_ERR_INVALID_ARG);
  /* and the same tensors are fine */
  assert_int_equal(ampc_safetensors_write(in_dir("ok.safetensors"), t, 2, NULL, 0), AMPC_OK);
  clear_dir();
}

/* Write a small file at path holding one tensor of value v. */
static void write_marker(const char *path, float v) {
  const int64_t s1[] = {1};
  const ampc_st_tensor t = mk("marker", AMPC_F32, 1, s1, &v, sizeof v);
  assert_int_equal(ampc_safetensors_write(path, &t, 1, NULL, 0), AMPC_OK);
}

static float read_marker(const char *path) {
  ampc_safetensors *f = NULL;
  assert_int_equal(ampc_safetensors_read(path, &f), AMPC_OK);
  const ampc_st_tensor *t = ampc_safetensors_find(f, "marker");
  assert_non_null(t);
  float v;
  memcpy(&v, t->data, sizeof v);
  ampc_safetensors_free(f);
  return v;
}

static void test_replace_only_on_success(void **state) {
  (void)state;
  const char *path = in_dir("ckpt.safetensors");
  char keep[256];
  snprintf(keep, sizeof keep, "%s", path);
  write_marker(keep, 1.0f);
  assert_true(read_marker(keep) == 1.0f);
  write_marker(keep, 2.0f); /* success replaces */
  assert_true(read_marker(keep) == 2.0f);
  assert_int_equal(count_entries(g_dir), 1);
  /* a rejected write leaves it alone */
  const int64_t s1[] = {1};
  const float v = 3.0f;
  const ampc_st_tensor bad = mk("marker", AMPC_F32, 1, s1, &v, 2);
  assert_int_equal(ampc_safetensors_write(keep, &bad, 1, NULL, 0), AMPC_ERR_INVALID_ARG);
  assert_true(read_marker(keep) == 2.0f);
  /* the permissions of the replaced file are kept */
  assert_int_equal(chmod(keep, 0640), 0);
  write_marker(keep, 4.0f);
  struct stat sb;
  assert_int_equal(stat(keep, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0640);
  assert_true(read_marker(keep) == 4.0f);
  assert_int_equal(count_entries(g_dir), 1);
  clear_dir();
}

static void test_writer_io_errors(void **state) {
  (void)state;
  const float v[4] = {1, 2, 3, 4};
  const int64_t s4[] = {4};
  const ampc_st_tensor t = mk("w", AMPC_F32, 1, s4, v, sizeof v);

  /* a directory that does not exist */
  const char *path = in_dir("no/such/dir/x.safetensors");
  assert_int_equal(ampc_safetensors_write(path, &t, 1, NULL, 0), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "x.safetensors"));
  assert_non_null(strstr(ampc_last_error(), "No such file or directory"));
  assert_int_equal(count_entries(g_dir), 0);

  /* path is a directory (or any other non-regular file): refused up front */
  char sub[256];
  snprintf(sub, sizeof sub, "%s/sub", g_dir);
  assert_int_equal(mkdir(sub, 0755), 0);
  assert_int_equal(ampc_safetensors_write(sub, &t, 1, NULL, 0), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "not a regular file"));
  assert_int_equal(ampc_safetensors_write("/dev/null", &t, 1, NULL, 0), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "not a regular file"));
  /* a symbolic link: the file it points to is replaced, the link stays */
  char real[300], link[300];
  snprintf(real, sizeof real, "%s/real.st", g_dir);
  snprintf(link, sizeof link, "%s/link.st", g_dir);
  assert_int_equal(ampc_safetensors_write(real, &t, 1, NULL, 0), AMPC_OK);
  assert_int_equal(symlink("real.st", link), 0);
  const float v2[4] = {5, 6, 7, 8};
  const ampc_st_tensor t2 = mk("w", AMPC_F32, 1, s4, v2, sizeof v2);
  assert_int_equal(ampc_safetensors_write(link, &t2, 1, NULL, 0), AMPC_OK);
  struct stat lsb;
  assert_int_equal(lstat(link, &lsb), 0);
  assert_true(S_ISLNK(lsb.st_mode));
  ampc_safetensors *rf = NULL;
  assert_int_equal(ampc_safetensors_read(real, &rf), AMPC_OK);
  assert_memory_equal(ampc_safetensors_find(rf, "w")->data, v2, sizeof v2);
  ampc_safetensors_free(rf);
  assert_int_equal(unlink(link), 0);
  assert_int_equal(unlink(real), 0);
  /* a FIFO is refused on reading without blocking */
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/fifo", g_dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(ampc_safetensors_read(fifo, &rf), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "not a regular file"));
  assert_int_equal(unlink(fifo), 0);
  assert_int_equal(count_entries(g_dir), 1);
  assert_int_equal(count_entries(sub), 0);

  /* a read-only directory (permissions do not stop root) */
  if (geteuid() != 0) {
    assert_int_equal(chmod(sub, 0555), 0);
    char p[300];
    snprintf(p, sizeof p, "%s/x.safetensors", sub);
    assert_int_equal(ampc_safetensors_write(p, &t, 1, NULL, 0), AMPC_ERR_IO);
    assert_int_equal(count_entries(sub), 0);
    assert_int_equal(chmod(sub, 0755), 0);
  }
  assert_int_equal(rmdir(sub), 0);

  /* a full disk, simulated with a file-size limit: writes past it fail with
   * EFBIG (SIGXFSZ ignored). The old file must survive untouched. */
  char keep[256];
  snprintf(keep, sizeof keep, "%s", in_dir("full.safetensors"));
  write_marker(keep, 5.0f);
  size_t old_len;
  unsigned char *old = slurp(keep, &old_len);

  static uint32_t big[64 * 1024]; /* 256 KiB */
  fill(big, sizeof big, 9);
  const int64_t sbig[] = {64 * 1024};
  const ampc_st_tensor tb = mk("marker", AMPC_F32, 1, sbig, big, sizeof big);
  struct rlimit saved, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
  lim = saved;
  lim.rlim_cur = saved.rlim_max < 16 * 1024 ? saved.rlim_max : 16 * 1024;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  const ampc_status st = ampc_safetensors_write(keep, &tb, 1, NULL, 0);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", ampc_last_error());
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, prev);
  if (st != AMPC_ERR_IO)
    fail_msg("status %d, message %s", (int)st, msg);
  assert_non_null(strstr(msg, "full.safetensors"));
  assert_non_null(strstr(msg, "File too large"));
  assert_int_equal(count_entries(g_dir), 1); /* only the old file */
  size_t now_len;
  unsigned char *now = slurp(keep, &now_len);
  assert_int_equal(now_len, old_len);
  assert_memory_equal(now, old, old_len);
  free(now);
  free(old);
  assert_true(read_marker(keep) == 5.0f);
  clear_dir();
}

/* ---- the file for tests/reference/check_safetensors.py ------------------- */

static int write_check_file(const char *path) {
  float f32[6];
  for (int i = 0; i < 6; i++)
    f32[i] = 0.5f * (float)i;
  const uint16_t f16[3] = {0x3C00, 0xC000, 0x3800}; /* 1, -2, 0.5 */
  const float scalar = 3.25f;
  const int64_t s23[] = {2, 3}, s3[] = {3}, s03[] = {0, 3};
  const ampc_st_tensor t[] = {
      mk("check.f32", AMPC_F32, 2, s23, f32, sizeof f32),
      mk("check.f16", AMPC_F16, 1, s3, f16, sizeof f16),
      mk("check.scalar", AMPC_F32, 0, NULL, &scalar, sizeof scalar),
      mk("check.empty", AMPC_F32, 2, s03, NULL, 0),
  };
  const ampc_st_meta meta[] = {{"step", "7"}, {"format", "pt"}};
  const ampc_status st = ampc_safetensors_write(path, t, 4, meta, 2);
  if (st != AMPC_OK) {
    fprintf(stderr, "test_safetensors: %s\n", ampc_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-check") == 0)
    return write_check_file(argv[2]);
  if (argc != 1) {
    fprintf(stderr, "usage: %s [--write-check FILE]\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_read_offset_order),
      cmocka_unit_test(test_exact_bytes),
      cmocka_unit_test(test_reject_malformed),
      cmocka_unit_test(test_read_io_errors),
      cmocka_unit_test(test_writer_invalid_args),
      cmocka_unit_test(test_replace_only_on_success),
      cmocka_unit_test(test_writer_io_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
