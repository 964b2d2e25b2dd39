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
 *   thread's batches equal to direct ones.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pack_records), cmocka_unit_test(test_pack_deterministic),
      cmocka_unit_test(test_pack_bad),     cmocka_unit_test(test_shards_damaged),
      cmocka_unit_test(test_stream_order), cmocka_unit_test(test_shards_wrapped_size),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
