/*
 * tests/test_shards.c: packing a user's data and streaming it back
 * (include/ampc/shards.h) on data this test makes: 8x8 PNGs of one flat colour
 * each (so a 8 -> 8 pack keeps them exactly), captions naming the colour, a
 * label column, a CSV listing them.
 *
 * - the pack: counts, the split rule, records (image bytes exact, tokens as the
 *   tokenizer gives them, labels as the sorted classes), manifest, SHA-256s;
 *   the same input packs to the same bytes with 1 and 2 threads;
 * - bad samples are skipped and counted by reason; --strict stops naming them;
 * - a finished pack is never overwritten; a pack stopped after some shards
 *   resumes and gives the bytes of an uninterrupted one;
 * - the shard reader: a SHA-256 mismatch or a truncated shard is left out
 *   (strict: an error); the val split in memory with caption concepts;
 * - the stream: each epoch a permutation of the training split, a function of
 *   (seed, position) only (random access = sequential, resume = same batches),
 *   windows of whole shards (memory bounded by the buffer), the prefetch
 *   thread's batches equal to direct ones;
 * - the samples' keys (a CSV pack and a WebDataset pack with keys full of
 *   JSON's special characters): at every position of the stream, the key of
 *   ampc_stream_index's (shard, record) is the key of the sample whose image
 *   the stream reads there (each image's colour names its sample); each keys
 *   file lists the training then the val records' keys, under its manifest
 *   SHA-256; a damaged keys file is AMPC_ERR_FORMAT naming it; a deleted one,
 *   or a pack made before keys, opens and streams and its keys are
 *   AMPC_ERR_NOT_FOUND.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>
#include <png.h> /* before cmocka: it brings its own setjmp.h */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ampc/shards.h"
#include "data/ingest/tokenizer.h"
#include "data/shards_internal.h"

static char g_dir[256];

static const char *tmp(const char *name) {
  static char buf[32][512];
  static int k;
  k = (k + 1) & 31;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  const long n = ftell(f);
  rewind(f);
  unsigned char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

static void write_all(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

/* an 8x8 RGB PNG of one colour */
static void write_png(const char *path, uint8_t r, uint8_t g, uint8_t b) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(p);
  assert_int_equal(setjmp(png_jmpbuf(p)), 0);
  png_init_io(p, f);
  png_set_IHDR(p, info, 8, 8, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(p, info);
  uint8_t row[24];
  for (int x = 0; x < 8; x++)
    row[3 * x] = r, row[3 * x + 1] = g, row[3 * x + 2] = b;
  for (int y = 0; y < 8; y++)
    png_write_row(p, row);
  png_write_end(p, NULL);
  png_destroy_write_struct(&p, &info);
  fclose(f);
}

enum { N_GOOD = 120 };
static const char *const k_colours[4] = {"red", "green", "blue", "gray"};

/* sample i's colour: a distinct RGB per sample (i, 255 - i, 7 * i) */
static void colour_of(int i, uint8_t c[3]) {
  c[0] = (uint8_t)i, c[1] = (uint8_t)(255 - i), c[2] = (uint8_t)(7 * i);
}

/* data.csv (filepath,title,label) with N_GOOD good rows and, with bad, one of
 * each bad kind after them */
static void make_csv(const char *name, bool bad) {
  mkdir(tmp("img"), 0777);
  char *csv = malloc(1 << 16);
  assert_non_null(csv);
  size_t n = (size_t)sprintf(csv, "filepath,title,label\n");
  for (int i = 0; i < N_GOOD; i++) {
    char p[64];
    snprintf(p, sizeof p, "img/%03d.png", i);
    uint8_t c[3];
    colour_of(i, c);
    write_png(tmp(p), c[0], c[1], c[2]);
    /* quoted commas and doubled quotes in some captions */
    n += (size_t)sprintf(csv + n,
                         i % 7 == 0 ? "%s,\"a \"\"%s\"\", square number %d\",%s\n"
                                    : "%s,a %s square number %d,%s\n",
                         p, k_colours[i % 4], i, k_colours[i % 4]);
  }
  if (bad) {
    write_all(tmp("img/empty.png"), "", 0);
    write_all(tmp("img/corrupt.png"), "\x89PNG\r\n\x1a\nnot really", 18);
    n += (size_t)sprintf(csv + n, "img/missing.png,a missing image,red\n"
                                  "img/empty.png,an empty file,red\n"
                                  "img/corrupt.png,a corrupt image,red\n"
                                  "img/000.png,,red\n"
                                  "img/001.png,bad \xff\xfe utf8,red\n");
  }
  write_all(tmp(name), csv, n);
  free(csv);
}

static ampc_pack_options opts(const char *in, const char *out) {
  ampc_pack_options o;
  memset(&o, 0, sizeof o);
  o.input = in, o.out_dir = out, o.label_key = "label";
  o.image_size = 8, o.seq_len = 32, o.vocab = 48, o.shard_samples = 16;
  o.val_fraction = 0.25, o.seed = 7, o.threads = 1;
  return o;
}

static int rm_entry(const char *p, const struct stat *s, int f, struct FTW *w) {
  (void)s, (void)f, (void)w;
  return remove(p);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/ampc_test_shards_XXXXXX");
  if (!mkdtemp(g_dir))
    return -1;
  make_csv("data.csv", false);
  make_csv("bad.csv", true);
  ampc_pack_options o = opts(tmp("data.csv"), tmp("pack"));
  return ampc_pack(&o, NULL) == AMPC_OK ? 0 : (fprintf(stderr, "%s\n", ampc_last_error()), -1);
}

static int teardown(void **state) {
  (void)state;
  return nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static bool same_file(const char *a, const char *b) {
  size_t na, nb;
  unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
  const bool same = na == nb && memcmp(x, y, na) == 0;
  free(x), free(y);
  return same;
}

/* every record of the pack: the image is the sample's colour, the label its
 * colour's class, the tokens the tokenizer's encoding of its caption */
static void test_pack_records(void **state) {
  (void)state;
  ampc_shards *s;
  assert_int_equal(ampc_shards_open(&s, tmp("pack"), true, true), AMPC_OK);
  const ampc_shards_info *in = ampc_shards_get_info(s);
  assert_int_equal(in->image_size, 8);
  assert_int_equal(in->channels, 3);
  assert_int_equal(in->seq_len, 32);
  assert_true(in->vocab >= 8 && in->vocab <= 48);
  assert_int_equal(in->n_train + in->n_val, N_GOOD);
  assert_int_equal(in->n_shards, (N_GOOD + 15) / 16);
  assert_int_equal(in->bad_shards, 0);
  /* classes sorted: blue gray green red */
  assert_int_equal(in->n_classes, 4);
  assert_string_equal(in->class_names[0], "blue");
  assert_string_equal(in->class_names[3], "red");
  assert_non_null(in->class_prompts);
  /* the val share is near 0.25 (binomial: 120 samples, 4 sigma) */
  assert_true(in->n_val > 30 - 4 * 5 && in->n_val < 30 + 4 * 5);
  /* the val split in memory: every image is one of the colours, its label
   * that colour's class, its tokens the encoding of its caption */
  ampc_tokenizer *tk;
  assert_int_equal(ampc_tokenizer_load(&tk, in->tokenizer), AMPC_OK);
  ampc_dataset v;
  assert_int_equal(ampc_shards_val_dataset(s, 0, &v), AMPC_OK);
  assert_int_equal(v.n, in->n_val);
  for (int32_t k = 0; k < v.n; k++) {
    assert_int_equal(v.split[k], AMPC_SPLIT_VAL);
    const int i = v.images[k * 192]; /* red = i */
    uint8_t c[3];
    colour_of(i, c);
    for (int p = 0; p < 64; p++)
      assert_memory_equal(v.images + k * 192 + 3 * p, c, 3);
    static const int cls_of_colour[4] = {3, 2, 0, 1}; /* red green blue gray */
    assert_int_equal(v.label[k], cls_of_colour[i % 4]);
    char cap[128];
    snprintf(cap, sizeof cap, i % 7 == 0 ? "a \"%s\", square number %d" : "a %s square number %d",
             k_colours[i % 4], i);
    int32_t ids[32], n = 0;
    assert_int_equal(ampc_tokenizer_encode(tk, cap, ids, 32, &n), AMPC_OK);
    assert_true(n <= 32);
    assert_memory_equal(v.tokens + k * 32, ids, sizeof ids);
    /* every caption differs (the number): one concept each */
    assert_int_equal(v.concept[k], k);
  }
  ampc_dataset_free(&v);
  ampc_tokenizer_free(tk);
  ampc_shards_close(s);
}

/* the same input gives the same bytes with 2 decoding threads */
static void test_pack_deterministic(void **state) {
  (void)state;
  ampc_pack_options o = opts(tmp("data.csv"), tmp("pack2"));
  o.threads = 2;
  assert_int_equal(ampc_pack(&o, NULL), AMPC_OK);
  /* the manifest records the options (the thread count is not among them) */
  assert_true(same_file(tmp("pack/manifest.json"), tmp("pack2/manifest.json")));
  for (int k = 0; k < 8; k++) {
    char a[64], b[64];
    snprintf(a, sizeof a, "pack/shard-%05d.ampcs", k);
    snprintf(b, sizeof b, "pack2/shard-%05d.ampcs", k);
    assert_true(same_file(tmp(a), tmp(b)));
    snprintf(a, sizeof a, "pack/shard-%05d.keys.json", k);
    snprintf(b, sizeof b, "pack2/shard-%05d.keys.json", k);
    assert_true(same_file(tmp(a), tmp(b)));
  }
  assert_true(same_file(tmp("pack/tokenizer.model"), tmp("pack2/tokenizer.model")));
  /* never overwritten (tmp()'s buffers were reused above: the paths again) */
  o = opts(tmp("data.csv"), tmp("pack2"));
  assert_int_equal(ampc_pack(&o, NULL), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "already holds a finished pack"));
}

/* bad samples: skipped and counted; --strict names the first */
static void test_pack_bad(void **state) {
  (void)state;
  ampc_pack_options o = opts(tmp("bad.csv"), tmp("packbad"));
  ampc_pack_report r;
  assert_int_equal(ampc_pack(&o, &r), AMPC_OK);
  assert_int_equal(r.read, N_GOOD + 5);
  assert_int_equal(r.n_train + r.n_val, N_GOOD);
  assert_int_equal(r.skipped, 5);
  int64_t by[5] = {0};
  const char *const want[5] = {"missing_file", "empty_file", "corrupt_image", "caption_empty",
                               "caption_utf8"};
  for (int i = 0; i < ampc_pack_skip_reasons(); i++)
    for (int k = 0; k < 5; k++)
      if (strcmp(ampc_pack_skip_reason(i), want[k]) == 0)
        by[k] = r.skipped_by[i];
  for (int k = 0; k < 5; k++)
    assert_int_equal(by[k], 1);
  o.out_dir = tmp("packstrict");
  o.strict = true;
  assert_int_equal(ampc_pack(&o, NULL), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "missing.png"));
  /* the shards finished before it are kept; the manifest is not written */
  struct stat st;
  assert_int_equal(stat(tmp("packstrict/shard-00000.ampcs"), &st), 0);
  assert_int_not_equal(stat(tmp("packstrict/manifest.json"), &st), 0);
  /* resuming it without --strict finishes with the bytes of a pack in one go */
  o.strict = false;
  ampc_pack_report r2;
  assert_int_equal(ampc_pack(&o, &r2), AMPC_OK);
  assert_true(r2.resumed_shards >= 7);
  assert_int_equal(r2.skipped, 5);
  for (int k = 0; k < 8; k++) {
    char a[64], b[64];
    snprintf(a, sizeof a, "packbad/shard-%05d.ampcs", k);
    snprintf(b, sizeof b, "packstrict/shard-%05d.ampcs", k);
    assert_true(same_file(tmp(a), tmp(b)));
    snprintf(a, sizeof a, "packbad/shard-%05d.keys.json", k);
    snprintf(b, sizeof b, "packstrict/shard-%05d.keys.json", k);
    assert_true(same_file(tmp(a), tmp(b)));
  }
  assert_true(same_file(tmp("packbad/manifest.json"), tmp("packstrict/manifest.json")));
  /* a folder with another pack's state is refused */
  ampc_pack_options o3 = opts(tmp("bad.csv"), tmp("packstrict2"));
  o3.strict = true;
  assert_int_equal(ampc_pack(&o3, NULL), AMPC_ERR_FORMAT);
  o3.strict = false, o3.image_size = 16;
  assert_int_equal(ampc_pack(&o3, NULL), AMPC_ERR_INVALID_ARG);
  assert_non_null(strstr(ampc_last_error(), "other options"));
}

/* a changed or truncated shard is left out, or refused with strict */
static void test_shards_damaged(void **state) {
  (void)state;
  ampc_pack_options o = opts(tmp("data.csv"), tmp("packdmg"));
  assert_int_equal(ampc_pack(&o, NULL), AMPC_OK);
  size_t n;
  unsigned char *b = read_all(tmp("packdmg/shard-00001.ampcs"), &n);
  b[n - 10] ^= 1;
  write_all(tmp("packdmg/shard-00001.ampcs"), b, n);
  free(b);
  b = read_all(tmp("packdmg/shard-00002.ampcs"), &n);
  write_all(tmp("packdmg/shard-00002.ampcs"), b, n - 100);
  free(b);
  ampc_shards *s;
  assert_int_equal(ampc_shards_open(&s, tmp("packdmg"), true, false), AMPC_OK);
  assert_int_equal(ampc_shards_get_info(s)->bad_shards, 2);
  assert_int_equal(ampc_shards_get_info(s)->n_shards, 6);
  ampc_shards_close(s);
  assert_int_equal(ampc_shards_open(&s, tmp("packdmg/manifest.json"), true, true), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "shard-00001.ampcs: SHA-256 mismatch"));
  /* without the check the changed shard is read, the short one still not */
  assert_int_equal(ampc_shards_open(&s, tmp("packdmg"), false, false), AMPC_OK);
  assert_int_equal(ampc_shards_get_info(s)->bad_shards, 1);
  ampc_shards_close(s);
  assert_int_equal(ampc_shards_open(&s, tmp("nothing"), true, false), AMPC_ERR_IO);
  write_all(tmp("bad.json"), "{\"format\":\"x\"}", 14);
  assert_int_equal(ampc_shards_open(&s, tmp("bad.json"), true, false), AMPC_ERR_FORMAT);
}

/* a header whose records x record bytes wraps past 2^64 to 0: 2^40 + 2^40
 * records of 1448 x 1448 x 4 + 4 x 445 + 8 = 2^23 bytes, in a 64-byte file */
static void test_shards_wrapped_size(void **state) {
  (void)state;
  uint8_t h[AMPC_SHARD_HEADER_BYTES];
  ampc__shard_header_put(h, 1448, 4, 445, 1ull << 40, 1ull << 40);
  assert_int_equal(ampc_shard_record_bytes(1448, 4, 445), 1ll << 23);
  assert_int_equal(mkdir(tmp("wrap"), 0700), 0);
  write_all(tmp("wrap/s.ampcs"), h, sizeof h);
  char m[512];
  const int n = snprintf(m, sizeof m,
                         "{\"format\": \"ampc-shards\", \"version\": 1, \"image_size\": 1448, "
                         "\"channels\": 4, \"seq_len\": 445, \"vocab\": 16, \"shards\": "
                         "[{\"file\": \"s.ampcs\", \"train\": %lld, \"val\": %lld, "
                         "\"sha256\": \"%064d\"}]}",
                         1ll << 40, 1ll << 40, 0);
  write_all(tmp("wrap/manifest.json"), m, (size_t)n);
  ampc_shards *s = NULL;
  assert_int_equal(ampc_shards_open(&s, tmp("wrap"), false, false), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "(1 of 1 left out)"));
  assert_int_equal(ampc_shards_open(&s, tmp("wrap"), false, true), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(),
                         "s.ampcs: the shard has 64 bytes, not 64 + 2199023255552 records x "
                         "8388608 bytes"));
  assert_null(s);
}

/* the stream's order */
static void test_stream_order(void **state) {
  (void)state;
  ampc_shards *s;
  assert_int_equal(ampc_shards_open(&s, tmp("pack"), true, true), AMPC_OK);
  const int64_t N = ampc_shards_get_info(s)->n_train;
  ampc_stream *a, *b, *c;
  /* a buffer of 1 sample: one shard per window */
  assert_int_equal(ampc_stream_create(&a, s, 42, 1, false), AMPC_OK);
  assert_int_equal(ampc_stream_create(&b, s, 42, 1, true), AMPC_OK);
  assert_int_equal(ampc_stream_create(&c, s, 43, 1 << 20, false), AMPC_OK);
  int64_t *sh = malloc((size_t)(3 * N) * sizeof *sh), *rec = malloc((size_t)(3 * N) * sizeof *rec);
  assert_non_null(sh);
  assert_non_null(rec);
  for (int64_t j = 0; j < 3 * N; j++)
    ampc_stream_index(a, j, &sh[j], &rec[j]);
  /* each epoch: every (shard, record) once */
  for (int64_t e = 0; e < 3; e++) {
    uint8_t seen[16][16] = {{0}};
    for (int64_t j = e * N; j < (e + 1) * N; j++) {
      assert_true(sh[j] >= 0 && sh[j] < 16 && rec[j] >= 0 && rec[j] < 16);
      assert_int_equal(seen[sh[j]][rec[j]]++, 0);
    }
  }
  /* epochs differ; another seed differs */
  assert_true(memcmp(sh, sh + N, (size_t)N * sizeof *sh) != 0 ||
              memcmp(rec, rec + N, (size_t)N * sizeof *rec) != 0);
  int diff = 0;
  for (int64_t j = 0; j < N; j++) {
    int64_t x, y;
    ampc_stream_index(c, j, &x, &y);
    diff += x != sh[j] || y != rec[j];
  }
  assert_true(diff > 0);
  /* random access (backwards, across epochs) = the sequence */
  for (int64_t j = 3 * N - 1; j >= 0; j -= 7) {
    int64_t x, y;
    ampc_stream_index(b, j, &x, &y);
    assert_int_equal(x, sh[j]);
    assert_int_equal(y, rec[j]);
  }
  /* one shard per window: the positions of an epoch read the shards one
   * after the other (the memory touched at a time is one shard) */
  int switches = 0;
  for (int64_t j = 1; j < N; j++)
    switches += sh[j] != sh[j - 1];
  assert_int_equal(switches, ampc_shards_get_info(s)->n_shards - 1);
  /* the prefetching stream fills what the direct one does, whatever the
   * order of the calls (a resumed run jumps) */
  const int64_t img = 192, B = 5;
  uint8_t *i1 = malloc((size_t)(B * img)), *i2 = malloc((size_t)(B * img));
  int32_t t1[5 * 32], t2[5 * 32], l1[5], l2[5];
  const int64_t bases[6] = {0, 5, 10, 55, 60, 3};
  for (int k = 0; k < 6; k++) {
    const int64_t next = k + 1 < 6 ? bases[k + 1] : -1;
    (void)ampc_stream_fill(a, bases[k], B, i1, t1, l1, -1);
    const double ms = ampc_stream_fill(b, bases[k], B, i2, t2, l2, next);
    assert_true(ms >= 0.0);
    assert_memory_equal(i1, i2, (size_t)(B * img));
    assert_memory_equal(t1, t2, sizeof t1);
    assert_memory_equal(l1, l2, sizeof l1);
  }
  free(i1), free(i2), free(sh), free(rec);
  ampc_stream_free(a), ampc_stream_free(b), ampc_stream_free(c);
  ampc_shards_close(s);
}

/* ---- the samples' keys ------------------------------------------------------------ */

typedef void (*key_of_fn)(int i, char *out, size_t n);

/* data.csv's key of sample i: the image path as written */
static void csv_key(int i, char *out, size_t n) { snprintf(out, n, "img/%03d.png", i); }

static cJSON *read_json(const char *path) {
  size_t n;
  unsigned char *b = read_all(path, &n);
  cJSON *j = cJSON_ParseWithLength((const char *)b, n);
  free(b);
  assert_non_null(j);
  return j;
}

static void write_json_file(const char *path, const cJSON *j) {
  char *t = cJSON_Print(j);
  assert_non_null(t);
  write_all(path, t, strlen(t));
  free(t);
}

/* the pack in dir holds the keys of key_of for its n samples: the manifest
 * names each shard's keys file and its SHA-256; each file lists the training
 * records' keys then the val records' (the val split in memory reads the
 * shards' val records in order); and at every position of two epochs of a
 * stream, ampc_shards_key of ampc_stream_index's (shard, record) is the key
 * of the sample whose image the stream reads there, each sample once an
 * epoch */
static void check_keys(const char *dir, key_of_fn key_of, int n) {
  char path[600], want[256], got[256];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  cJSON *m = read_json(path);
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(m, "shards");
  const int ns = cJSON_GetArraySize(arr);
  assert_true(ns >= 2);
  ampc_shards *s;
  assert_int_equal(ampc_shards_open(&s, dir, true, true), AMPC_OK);
  const ampc_shards_info *in = ampc_shards_get_info(s);
  assert_int_equal(in->n_shards, ns);
  assert_int_equal(in->keyed_shards, ns);
  assert_int_equal(in->n_train + in->n_val, n);
  /* the val records' keys, shard after shard */
  char **val_keys = calloc((size_t)in->n_val + 1, sizeof *val_keys);
  assert_non_null(val_keys);
  int64_t nv = 0;
  for (int i = 0; i < ns; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    char name[64];
    snprintf(name, sizeof name, "shard-%05d.keys.json", i);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "keys")->valuestring, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len;
    unsigned char *b = read_all(path, &len);
    char hex[65];
    assert_int_equal(ampc__sha256(b, len, hex), AMPC_OK);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "keys_sha256")->valuestring, hex);
    free(b);
    cJSON *k = read_json(path);
    const int nt = cJSON_GetObjectItemCaseSensitive(e, "train")->valueint;
    const int nvs = cJSON_GetObjectItemCaseSensitive(e, "val")->valueint;
    assert_int_equal(cJSON_GetArraySize(k), nt + nvs);
    for (int r = nt; r < nt + nvs; r++) {
      const cJSON *x = cJSON_GetArrayItem(k, r);
      assert_true(cJSON_IsString(x));
      val_keys[nv++] = strdup(x->valuestring);
    }
    cJSON_Delete(k);
  }
  assert_int_equal(nv, in->n_val);
  ampc_dataset v;
  assert_int_equal(ampc_shards_val_dataset(s, 0, &v), AMPC_OK);
  const int64_t img = (int64_t)in->image_size * in->image_size * in->channels;
  for (int32_t k = 0; k < v.n; k++) {
    key_of(v.images[k * img], want, sizeof want);
    assert_string_equal(val_keys[k], want);
    free(val_keys[k]);
  }
  free(val_keys);
  ampc_dataset_free(&v);
  /* the training order's keys */
  const int64_t N = in->n_train;
  uint8_t *px = malloc((size_t)img), *seen = calloc((size_t)n, 1);
  assert_non_null(px);
  assert_non_null(seen);
  ampc_stream *st;
  assert_int_equal(ampc_stream_create(&st, s, 11, 1, false), AMPC_OK);
  for (int64_t j = 0; j < 2 * N; j++) {
    if (j % N == 0)
      memset(seen, 0, (size_t)n);
    int64_t sh, rec;
    ampc_stream_index(st, j, &sh, &rec);
    (void)ampc_stream_fill(st, j, 1, px, NULL, NULL, -1);
    const int i = px[0];
    uint8_t c[3];
    colour_of(i, c);
    assert_true(i < n);
    assert_memory_equal(px, c, 3);
    assert_int_equal(seen[i]++, 0);
    key_of(i, want, sizeof want);
    assert_int_equal(ampc_shards_key(s, sh, rec, got, sizeof got), AMPC_OK);
    assert_string_equal(got, want);
  }
  ampc_stream_free(st);
  free(px), free(seen);
  ampc_shards_close(s);
  cJSON_Delete(m);
}

/* the CSV pack: keys at every position; the API's edges */
static void test_keys_csv(void **state) {
  (void)state;
  check_keys(tmp("pack"), csv_key, N_GOOD);
  ampc_shards *s;
  assert_int_equal(ampc_shards_open(&s, tmp("pack"), false, false), AMPC_OK);
  const ampc_shards_info *in = ampc_shards_get_info(s);
  /* shard 0's first training record is the first training sample of the
   * listing: the first i whose key is not in the val split */
  ampc_dataset v;
  assert_int_equal(ampc_shards_val_dataset(s, 0, &v), AMPC_OK);
  int first = 0;
  for (bool val = true; val; first += val) {
    val = false;
    for (int32_t k = 0; k < v.n; k++)
      val = val || v.images[k * 192] == first;
  }
  ampc_dataset_free(&v);
  char want[64], got[64];
  csv_key(first, want, sizeof want);
  assert_int_equal(ampc_shards_key(s, 0, 0, got, sizeof got), AMPC_OK);
  assert_string_equal(got, want);
  /* cut to n - 1 bytes */
  char small[5] = "xxxx";
  assert_int_equal(ampc_shards_key(s, 0, 0, small, 5), AMPC_OK);
  assert_string_equal(small, "img/");
  assert_int_equal(ampc_shards_key(s, 0, 0, small, 1), AMPC_OK);
  assert_string_equal(small, "");
  /* out of range: record n_train of a shard (its first val record), a
   * shard past the list, negatives, NULL */
  cJSON *m = read_json(tmp("pack/manifest.json"));
  const int nt0 = cJSON_GetObjectItemCaseSensitive(
                      cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "shards"), 0), "train")
                      ->valueint;
  cJSON_Delete(m);
  assert_int_equal(ampc_shards_key(s, 0, nt0 - 1, got, sizeof got), AMPC_OK);
  assert_int_equal(ampc_shards_key(s, 0, nt0, got, sizeof got), AMPC_ERR_INVALID_ARG);
  assert_string_equal(got, "");
  assert_int_equal(ampc_shards_key(s, in->n_shards, 0, got, sizeof got), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_shards_key(s, -1, 0, got, sizeof got), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_shards_key(s, 0, -1, got, sizeof got), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_shards_key(s, 0, 0, NULL, 8), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_shards_key(s, 0, 0, got, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_shards_key(NULL, 0, 0, got, sizeof got), AMPC_ERR_INVALID_ARG);
  ampc_shards_close(s);
}

/* a WebDataset key (SHARD/KEY, KEY the member path up to the name's first
 * dot): the even samples' keys hold a folder, a space, a quote, a backslash,
 * a tab and UTF-8, some odd ones a control character and a byte that is not
 * UTF-8 (a Latin-1 file name): the keys file must carry each byte */
static const char *wds_stem(int i, char *out, size_t n) {
  if (i % 2 == 0)
    snprintf(out, n, "sub dir/q\"uo\\te\tü-%03d", i);
  else if (i % 4 == 1)
    snprintf(out, n, "lat\xe9n\x01-%03d", i);
  else
    snprintf(out, n, "%06d", i);
  return out;
}

static void wds_key(int i, char *out, size_t n) {
  char stem[128];
  snprintf(out, n, "wds-%03d.tar/%s", i / 20, wds_stem(i, stem, sizeof stem));
}

static void tar_add(struct archive *a, const char *name, const void *d, size_t n) {
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, name);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_size(e, (la_int64_t)n);
  assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
  assert_int_equal(archive_write_data(a, d, n), (la_ssize_t)n);
  archive_entry_free(e);
}

/* wds-000.tar and wds-001.tar, 20 samples each: sample i's PNG of colour i,
 * its caption and its colour as the label */
static void make_wds(void) {
  for (int t = 0; t < 2; t++) {
    char p[64];
    snprintf(p, sizeof p, "wds-%03d.tar", t);
    struct archive *a = archive_write_new();
    assert_non_null(a);
    assert_int_equal(archive_write_set_format_ustar(a), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, tmp(p)), ARCHIVE_OK);
    for (int i = 20 * t; i < 20 * t + 20; i++) {
      uint8_t c[3];
      colour_of(i, c);
      write_png(tmp("wds.png"), c[0], c[1], c[2]);
      size_t len;
      unsigned char *png = read_all(tmp("wds.png"), &len);
      char stem[128], name[160], cap[64];
      wds_stem(i, stem, sizeof stem);
      snprintf(name, sizeof name, "%s.png", stem);
      tar_add(a, name, png, len);
      free(png);
      snprintf(cap, sizeof cap, "a %s square number %d", k_colours[i % 4], i);
      snprintf(name, sizeof name, "%s.txt", stem);
      tar_add(a, name, cap, strlen(cap));
      snprintf(name, sizeof name, "%s.cls", stem);
      tar_add(a, name, k_colours[i % 4], strlen(k_colours[i % 4]));
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
  }
}

static void test_keys_webdataset(void **state) {
  (void)state;
  make_wds();
  char in[1100];
  snprintf(in, sizeof in, "%s,%s", tmp("wds-000.tar"), tmp("wds-001.tar"));
  ampc_pack_options o = opts(in, tmp("packwds"));
  o.label_key = "cls";
  ampc_pack_report r;
  assert_int_equal(ampc_pack(&o, &r), AMPC_OK);
  assert_int_equal(r.skipped, 0);
  assert_int_equal(r.n_train + r.n_val, 40);
  check_keys(tmp("packwds"), wds_key, 40);
}

/* damaged, deleted and never written keys files */
static void test_keys_damaged(void **state) {
  (void)state;
  ampc_pack_options o = opts(tmp("data.csv"), tmp("packkeys"));
  assert_int_equal(ampc_pack(&o, NULL), AMPC_OK);
  char got[64];
  /* shard 1: one key changed (still valid JSON): the SHA-256 tells */
  size_t n;
  unsigned char *b = read_all(tmp("packkeys/shard-00001.keys.json"), &n);
  char *at = strstr((char *)b, "img/0");
  assert_non_null(at);
  at[4] = '9';
  write_all(tmp("packkeys/shard-00001.keys.json"), b, n);
  free(b);
  /* shard 2: cut short; shard 3: a key too few; shard 4: an entry not a
   * string (2 and 3 without their SHA-256 in the manifest, so the parse
   * speaks); shard 5: deleted; shard 6: a manifest entry from before keys;
   * shard 7: a keys name outside the folder */
  b = read_all(tmp("packkeys/shard-00002.keys.json"), &n);
  write_all(tmp("packkeys/shard-00002.keys.json"), b, n - 5);
  free(b);
  cJSON *k = read_json(tmp("packkeys/shard-00003.keys.json"));
  cJSON_DeleteItemFromArray(k, 0);
  write_json_file(tmp("packkeys/shard-00003.keys.json"), k);
  cJSON_Delete(k);
  k = read_json(tmp("packkeys/shard-00004.keys.json"));
  cJSON_ReplaceItemInArray(k, 0, cJSON_CreateNumber(7));
  write_json_file(tmp("packkeys/shard-00004.keys.json"), k);
  cJSON_Delete(k);
  assert_int_equal(remove(tmp("packkeys/shard-00005.keys.json")), 0);
  cJSON *m = read_json(tmp("packkeys/manifest.json"));
  cJSON *arr = cJSON_GetObjectItemCaseSensitive(m, "shards");
  for (int i = 2; i <= 4; i++)
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(arr, i), "keys_sha256");
  cJSON_DeleteItemFromObject(cJSON_GetArrayItem(arr, 6), "keys");
  cJSON_DeleteItemFromObject(cJSON_GetArrayItem(arr, 6), "keys_sha256");
  cJSON_ReplaceItemInObject(cJSON_GetArrayItem(arr, 7), "keys", cJSON_CreateString("../data.csv"));
  write_json_file(tmp("packkeys/manifest.json"), m);
  cJSON_Delete(m);
  /* it opens (the keys are not read) and streams every training record */
  ampc_shards *s;
  assert_int_equal(ampc_shards_open(&s, tmp("packkeys"), true, true), AMPC_OK);
  const ampc_shards_info *in = ampc_shards_get_info(s);
  assert_int_equal(in->n_shards, 8);
  assert_int_equal(in->bad_shards, 0);
  assert_int_equal(in->keyed_shards, 6);
  ampc_stream *st;
  assert_int_equal(ampc_stream_create(&st, s, 3, 0, true), AMPC_OK);
  uint8_t *px = malloc((size_t)(in->n_train * 192));
  assert_non_null(px);
  (void)ampc_stream_fill(st, 0, in->n_train, px, NULL, NULL, in->n_train);
  uint8_t seen[N_GOOD] = {0};
  for (int64_t j = 0; j < in->n_train; j++)
    assert_int_equal(seen[px[j * 192]]++, 0);
  free(px);
  ampc_stream_free(st);
  /* shard 0 is intact */
  assert_int_equal(ampc_shards_key(s, 0, 0, got, sizeof got), AMPC_OK);
  assert_non_null(strstr(got, "img/"));
  static const struct {
    int shard;
    ampc_status st;
    const char *msg;
  } want[] = {
      {1, AMPC_ERR_FORMAT, "shard-00001.keys.json: damaged keys file: SHA-256 mismatch"},
      {2, AMPC_ERR_FORMAT, "shard-00002.keys.json: damaged keys file: not valid JSON"},
      {3, AMPC_ERR_FORMAT, "shard-00003.keys.json: damaged keys file: 15 keys for the shard's"},
      {4, AMPC_ERR_FORMAT, "shard-00004.keys.json: damaged keys file: entry 0 is not a string"},
      {5, AMPC_ERR_NOT_FOUND, "shard-00005.keys.json: the keys file is missing"},
      {6, AMPC_ERR_NOT_FOUND, "names no keys file for"},
      {7, AMPC_ERR_FORMAT, "manifest.json: shard entry 7: \"keys\" is not a file name"},
  };
  for (size_t t = 0; t < sizeof want / sizeof *want; t++) {
    /* twice: a failed read is not kept */
    for (int again = 0; again < 2; again++) {
      strcpy(got, "junk");
      assert_int_equal(ampc_shards_key(s, want[t].shard, 0, got, sizeof got), want[t].st);
      if (!strstr(ampc_last_error(), want[t].msg))
        fail_msg("shard %d: '%s' lacks '%s'", want[t].shard, ampc_last_error(), want[t].msg);
      assert_string_equal(got, "");
    }
  }
  ampc_shards_close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pack_records), cmocka_unit_test(test_pack_deterministic),
      cmocka_unit_test(test_pack_bad),     cmocka_unit_test(test_shards_damaged),
      cmocka_unit_test(test_stream_order), cmocka_unit_test(test_shards_wrapped_size),
      cmocka_unit_test(test_keys_csv),     cmocka_unit_test(test_keys_webdataset),
      cmocka_unit_test(test_keys_damaged),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
