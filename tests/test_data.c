/*
 * tests/test_data.c: the data layer (include/ampc/data.h).
 *
 * - the embedded emoji dataset: documented counts, splits, shapes, classes;
 *   images not blank, every caption has a token, no <unk> in training text;
 * - the dataset file: writer -> loader round trip (with and without text),
 *   deterministic bytes; corrupt files (every truncation, wrong magic or
 *   version, absurd sizes refused before allocating, token id >= vocab, label
 *   out of range, unknown split, wrong string counts, byte flips) give
 *   AMPC_ERR_FORMAT and never crash. Sections are re-encoded here from the
 *   layout in docs/DATA.md, independently of src/data/dataset.c;
 * - PNG decoding: PNGs in RGBA, gray+alpha, palette+tRNS (8 and 4 bits), RGB,
 *   16-bit gray and interlaced, written with libpng here, decoded, composited
 *   over white and downsampled, compared exactly with the documented formula
 *   and with hand-computed blocks; corrupt, truncated, non-PNG and 32x32 files
 *   give errors naming the file;
 * - emoji preparation on small synthetic npm packages (join on unified and
 *   non_qualified, skips, caption words, vocabulary order, <unk> for held-out
 *   words, classes, splits, sample order);
 * - Fashion-MNIST on tiny gzipped IDX files written here (and on Debian's files
 *   when installed), bad magic, truncation, count mismatch, bad labels.
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
#include <zlib.h>

#include "ampc/data.h"

static char g_dir[256]; /* scratch directory for this run */

static const char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) & 3;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  const long n = ftell(f);
  assert_true(n >= 0);
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

static void write_text(const char *path, const char *text) { write_all(path, text, strlen(text)); }

/* ---- the embedded dataset ------------------------------------------------ */

/* The numbers documented in docs/DATA.md for data/emoji.ampcds. */
enum {
  EMOJI_STYLES = 3,      /* google, openmoji (training), twitter (held out) */
  EMOJI_CONCEPTS = 1729, /* training concepts */
  EMOJI_HELD = 177,      /* held-out concepts */
  EMOJI_N = EMOJI_STYLES * (EMOJI_CONCEPTS + EMOJI_HELD),
  EMOJI_VOCAB = 3840
};

static void test_embedded(void **state) {
  (void)state;
  ampc_dataset d;
  assert_int_equal(ampc_dataset_load_default(&d), AMPC_OK);
  assert_int_equal(d.n, EMOJI_N);
  assert_int_equal(d.height, 32);
  assert_int_equal(d.width, 32);
  assert_int_equal(d.channels, 3);
  assert_int_equal(d.seq_len, AMPC_EMOJI_SEQ_LEN);
  assert_int_equal(d.vocab, EMOJI_VOCAB);
  assert_int_equal(d.n_classes, 9);
  assert_non_null(d.words);
  assert_non_null(d.class_names);
  assert_non_null(d.captions);
  assert_string_equal(d.words[AMPC_TOKEN_PAD], "<pad>");
  assert_string_equal(d.words[AMPC_TOKEN_UNK], "<unk>");
  assert_int_equal(d.n_styles, EMOJI_STYLES);
  assert_string_equal(d.style_names[0], "google");
  assert_string_equal(d.style_names[1], "openmoji");
  assert_string_equal(d.style_names[2], "twitter");
  static const char *const names[9] = {"smileys-emotion", "people-body",   "animals-nature",
                                       "food-drink",      "travel-places", "activities",
                                       "objects",         "symbols",       "flags"};
  for (int c = 0; c < 9; c++)
    assert_string_equal(d.class_names[c], names[c]);
  int32_t per_split[4] = {0, 0, 0, 0}, per_class[9] = {0};
  for (int32_t i = 0; i < d.n; i++) {
    assert_true(d.split[i] <= AMPC_SPLIT_ZERO_SHOT);
    per_split[d.split[i]]++;
    per_class[d.label[i]]++;
    /* sample order: the training concepts in google, openmoji (train) and
     * twitter (new style), then the held-out ones in the same styles */
    const int trained = i < EMOJI_STYLES * EMOJI_CONCEPTS;
    const int expect_style =
        trained ? i / EMOJI_CONCEPTS : (i - EMOJI_STYLES * EMOJI_CONCEPTS) / EMOJI_HELD;
    const int expect_split = !trained            ? AMPC_SPLIT_ZERO_SHOT
                             : expect_style == 2 ? AMPC_SPLIT_NEW_STYLE
                                                 : AMPC_SPLIT_TRAIN;
    assert_int_equal(d.split[i], expect_split);
    assert_int_equal(d.style[i], expect_style);
    /* not blank: some pixel differs from white */
    const uint8_t *img = d.images + (size_t)i * 32 * 32 * 3;
    int nonwhite = 0;
    for (int k = 0; k < 32 * 32 * 3; k++)
      nonwhite += img[k] != 255;
    assert_true(nonwhite > 0);
    /* at least one real token, padding only at the end, captions non-empty */
    const int32_t *t = d.tokens + (size_t)i * d.seq_len;
    assert_true(t[0] != AMPC_TOKEN_PAD);
    for (int k = 1; k < d.seq_len; k++)
      if (t[k - 1] == AMPC_TOKEN_PAD)
        assert_int_equal(t[k], AMPC_TOKEN_PAD);
    assert_true(strlen(d.captions[i]) > 0);
    /* the training vocabulary covers every training caption */
    if (d.split[i] != AMPC_SPLIT_ZERO_SHOT)
      for (int k = 0; k < d.seq_len; k++)
        assert_int_not_equal(t[k], AMPC_TOKEN_UNK);
  }
  assert_int_equal(per_split[AMPC_SPLIT_TRAIN], 2 * EMOJI_CONCEPTS);
  assert_int_equal(per_split[AMPC_SPLIT_NEW_STYLE], EMOJI_CONCEPTS);
  assert_int_equal(per_split[AMPC_SPLIT_ZERO_SHOT], EMOJI_STYLES * EMOJI_HELD);
  static const int32_t class_counts[9] = {507, 1158, 477, 393, 654, 255, 792, 672, 810};
  for (int c = 0; c < 9; c++)
    assert_int_equal(per_class[c], class_counts[c]);
  /* every style of a concept shares concept id, label, caption and tokens */
  for (int32_t i = 0; i < (EMOJI_STYLES - 1) * EMOJI_CONCEPTS; i++) {
    const int32_t j = i + EMOJI_CONCEPTS;
    assert_int_equal(d.concept[i], d.concept[j]);
    assert_int_equal(d.label[i], d.label[j]);
    assert_string_equal(d.captions[i], d.captions[j]);
    assert_memory_equal(d.tokens + (size_t)i * d.seq_len, d.tokens + (size_t)j * d.seq_len,
                        (size_t)d.seq_len * sizeof(int32_t));
    assert_memory_not_equal(d.images + (size_t)i * 3072, d.images + (size_t)j * 3072, 3072);
  }
  /* held-out concepts never appear in training */
  uint8_t *in_train = calloc(4096, 1);
  assert_non_null(in_train);
  for (int32_t i = 0; i < d.n; i++) {
    assert_true(d.concept[i] >= 0 && d.concept[i] < 4096);
    if (d.split[i] == AMPC_SPLIT_TRAIN)
      in_train[d.concept[i]] = 1;
    else if (d.split[i] == AMPC_SPLIT_ZERO_SHOT)
      assert_false(in_train[d.concept[i]]);
  }
  free(in_train);
  ampc_dataset_free(&d);
  assert_null(d.images);
}

/* ---- the dataset file ------------------------------------------------------ */

/* A small dataset with every field: 5 samples of 2x3x3, 4 tokens, vocab 6,
 * 3 classes. */
typedef struct tiny {
  ampc_dataset d;
  uint8_t images[5 * 2 * 3 * 3];
  int32_t tokens[5 * 4], label[5], concept[5];
  uint8_t split[5], style[5];
  char *words[6], *class_names[3], *captions[5], *style_names[3];
} tiny;

static void tiny_init(tiny *t, int with_text) {
  memset(t, 0, sizeof *t);
  static const char *w[6] = {"<pad>", "<unk>", "red", "blue", "caf\xc3\xa9", "x"};
  static const char *c[3] = {"alpha", "beta", "gamma"};
  static const char *cap[5] = {"red", "blue red", "caf\xc3\xa9 x", "", "x x x x"};
  for (int i = 0; i < (int)sizeof t->images; i++)
    t->images[i] = (uint8_t)(i * 37 + 11);
  for (int i = 0; i < 20; i++)
    t->tokens[i] = (i * 7) % 6;
  for (int i = 0; i < 5; i++) {
    t->label[i] = i % 3;
    t->concept[i] = 100 + i / 2;
    t->split[i] = (uint8_t)(i % 4);
    t->style[i] = (uint8_t)(with_text ? i % 3 : i & 1);
    t->captions[i] = (char *)cap[i];
  }
  for (int i = 0; i < 6; i++)
    t->words[i] = (char *)w[i];
  for (int i = 0; i < 3; i++)
    t->class_names[i] = (char *)c[i];
  ampc_dataset *d = &t->d;
  d->n = 5;
  d->height = 2;
  d->width = 3;
  d->channels = 3;
  d->n_classes = 3;
  d->images = t->images;
  d->label = t->label;
  d->concept = t->concept;
  d->split = t->split;
  d->style = t->style;
  d->class_names = t->class_names;
  if (with_text) {
    d->seq_len = 4;
    d->vocab = 6;
    d->tokens = t->tokens;
    d->words = t->words;
    d->captions = t->captions;
    static const char *sn[3] = {"google", "twitter", "openmoji"};
    for (int i = 0; i < 3; i++)
      t->style_names[i] = (char *)sn[i];
    d->style_names = t->style_names;
    d->n_styles = 3;
  }
}

static void assert_same_dataset(const ampc_dataset *a, const ampc_dataset *b) {
  assert_int_equal(a->n, b->n);
  assert_int_equal(a->height, b->height);
  assert_int_equal(a->width, b->width);
  assert_int_equal(a->channels, b->channels);
  assert_int_equal(a->seq_len, b->seq_len);
  assert_int_equal(a->vocab, b->vocab);
  assert_int_equal(a->n_classes, b->n_classes);
  const size_t n = (size_t)a->n;
  assert_memory_equal(a->images, b->images, n * (size_t)(a->height * a->width * a->channels));
  if (a->seq_len)
    assert_memory_equal(a->tokens, b->tokens, n * (size_t)a->seq_len * sizeof(int32_t));
  else
    assert_null(b->tokens);
  assert_memory_equal(a->label, b->label, n * sizeof(int32_t));
  assert_memory_equal(a->concept, b->concept, n * sizeof(int32_t));
  assert_memory_equal(a->split, b->split, n);
  assert_memory_equal(a->style, b->style, n);
  assert_true(!a->words == !b->words);
  for (int32_t i = 0; a->words && i < a->vocab; i++)
    assert_string_equal(a->words[i], b->words[i]);
  assert_true(!a->class_names == !b->class_names);
  for (int32_t i = 0; a->class_names && i < a->n_classes; i++)
    assert_string_equal(a->class_names[i], b->class_names[i]);
  assert_true(!a->captions == !b->captions);
  for (int32_t i = 0; a->captions && i < a->n; i++)
    assert_string_equal(a->captions[i], b->captions[i]);
  assert_true(!a->style_names == !b->style_names);
  if (a->style_names) {
    assert_int_equal(a->n_styles, b->n_styles);
    for (int32_t i = 0; i < a->n_styles; i++)
      assert_string_equal(a->style_names[i], b->style_names[i]);
  }
}

static void test_round_trip(void **state) {
  (void)state;
  for (int with_text = 0; with_text < 2; with_text++) {
    tiny t;
    tiny_init(&t, with_text);
    const char *p = tmp_path("tiny.ampcds");
    assert_int_equal(ampc_dataset_save(&t.d, p), AMPC_OK);
    ampc_dataset back;
    assert_int_equal(ampc_dataset_load(p, &back), AMPC_OK);
    assert_same_dataset(&t.d, &back);
    /* the file of a loaded dataset is byte-identical: deterministic writer */
    size_t l1, l2;
    unsigned char *b1 = read_all(p, &l1);
    const char *p2 = tmp_path("tiny2.ampcds");
    assert_int_equal(ampc_dataset_save(&back, p2), AMPC_OK);
    unsigned char *b2 = read_all(p2, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(b1, b2, l1);
    assert_memory_equal(b1, "AMPCDS01\x02\x00\x00\x00\x05\x00\x00\x00", 16);
    ampc_dataset m;
    assert_int_equal(ampc_dataset_load_mem(b1, l1, "mem", &m), AMPC_OK);
    assert_same_dataset(&t.d, &m);
    ampc_dataset_free(&m);
    free(b1);
    free(b2);
    ampc_dataset_free(&back);
  }
  /* the writer refuses what the loader would refuse */
  tiny t;
  tiny_init(&t, 1);
  t.tokens[7] = 6;
  assert_int_equal(ampc_dataset_save(&t.d, tmp_path("bad.ampcds")), AMPC_ERR_INVALID_ARG);
  tiny_init(&t, 1);
  t.label[2] = 3;
  assert_int_equal(ampc_dataset_save(&t.d, tmp_path("bad.ampcds")), AMPC_ERR_INVALID_ARG);
  tiny_init(&t, 1);
  t.d.height = 0;
  assert_int_equal(ampc_dataset_save(&t.d, tmp_path("bad.ampcds")), AMPC_ERR_INVALID_ARG);
  tiny_init(&t, 1);
  assert_int_equal(ampc_dataset_save(&t.d, "/nonexistent-dir/x.ampcds"), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "/nonexistent-dir/x.ampcds"));
}

/* An independent reader/writer of the section layout (docs/DATA.md): the
 * header is 40 bytes, then 9 sections [tag][u64 raw][u64 packed][zlib]. */
typedef struct raw_file {
  unsigned char header[40];
  char tag[10][4];
  unsigned char *data[10]; /* decompressed */
  size_t len[10];
  int nsec; /* 10 (version 2) or 9 (version 1) */
} raw_file;

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static void raw_parse(raw_file *r, const unsigned char *b, size_t n) {
  memcpy(r->header, b, 40);
  size_t pos = 40;
  r->nsec = 10;
  for (int k = 0; k < 10; k++) {
    memcpy(r->tag[k], b + pos, 4);
    r->len[k] = (size_t)le64(b + pos + 4);
    uLong packed = (uLong)le64(b + pos + 12);
    pos += 20;
    uLongf out = (uLongf)r->len[k];
    r->data[k] = calloc(r->len[k] + 1, 1);
    assert_non_null(r->data[k]);
    assert_int_equal(uncompress(r->data[k], &out, b + pos, packed), Z_OK);
    assert_int_equal(out, r->len[k]);
    pos += packed;
  }
  assert_int_equal(pos, n);
}

static unsigned char *raw_build(const raw_file *r, size_t *n) {
  size_t cap = 40, pos = 40;
  for (int k = 0; k < r->nsec; k++)
    cap += 20 + compressBound((uLong)r->len[k]);
  unsigned char *b = malloc(cap);
  assert_non_null(b);
  memcpy(b, r->header, 40);
  for (int k = 0; k < r->nsec; k++) {
    uLongf z = (uLongf)(cap - pos - 20);
    assert_int_equal(compress2(b + pos + 20, &z, r->data[k], (uLong)r->len[k], 6), Z_OK);
    memcpy(b + pos, r->tag[k], 4);
    for (int i = 0; i < 8; i++) {
      b[pos + 4 + i] = (unsigned char)((uint64_t)r->len[k] >> (8 * i));
      b[pos + 12 + i] = (unsigned char)((uint64_t)z >> (8 * i));
    }
    pos += 20 + z;
  }
  *n = pos;
  return b;
}

static void raw_free(raw_file *r) {
  for (int k = 0; k < 10; k++)
    free(r->data[k]);
}

/* Load b [n] from memory and expect AMPC_ERR_FORMAT with "bad" in the
 * message along with the name. */
static void expect_format(const unsigned char *b, size_t n, const char *needle) {
  ampc_dataset d;
  assert_int_equal(ampc_dataset_load_mem(b, n, "corrupt.ampcds", &d), AMPC_ERR_FORMAT);
  assert_null(d.images);
  const char *msg = ampc_last_error();
  assert_non_null(strstr(msg, "corrupt.ampcds"));
  if (needle && !strstr(msg, needle))
    fail_msg("message '%s' lacks '%s'", msg, needle);
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void test_corrupt(void **state) {
  (void)state;
  tiny t;
  tiny_init(&t, 1);
  const char *p = tmp_path("good.ampcds");
  assert_int_equal(ampc_dataset_save(&t.d, p), AMPC_OK);
  size_t n;
  unsigned char *good = read_all(p, &n);
  unsigned char *b = malloc(n + 64);
  assert_non_null(b);

  /* every truncation, and one trailing byte */
  for (size_t cut = 0; cut < n; cut++)
    expect_format(good, cut, NULL);
  memcpy(b, good, n);
  b[n] = 0;
  expect_format(b, n + 1, "after the last section");
  /* magic, version */
  memcpy(b, good, n);
  b[3] = 'X';
  expect_format(b, n, "magic");
  memcpy(b, good, n);
  put32(b + 8, 3);
  expect_format(b, n, "version 3");
  /* absurd sizes in the header: refused by the limits */
  const uint32_t absurd[][2] = {{12, 0x7FFFFFFFu}, {12, 0}, {16, 100000},     {24, 5},
                                {32, 1},           {36, 0}, {12, 0x80000000u}};
  for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
    memcpy(b, good, n);
    put32(b + absurd[i][0], absurd[i][1]);
    expect_format(b, n, NULL);
  }
  /* plausible but large sizes: refused by comparing with the section
   * headers and the file size, before any allocation (the messages are those
   * of the checks that run first) */
  memcpy(b, good, n);
  put32(b + 12, 1u << 24); /* n = 16M */
  expect_format(b, n, "the header implies");
  {
    /* a section header that matches a huge header: 16M x 4096 x 4096 x 4
     * bytes of images from a few compressed bytes */
    unsigned char h[40 + 20 + 16];
    memcpy(h, good, 40);
    put32(h + 12, 1u << 24);
    put32(h + 16, 4096);
    put32(h + 20, 4096);
    put32(h + 24, 4);
    memcpy(h + 40, "IMGS", 4);
    const uint64_t raw = (uint64_t)1 << 50, packed = 16;
    for (int i = 0; i < 8; i++) {
      h[44 + i] = (unsigned char)(raw >> (8 * i));
      h[52 + i] = (unsigned char)(packed >> (8 * i));
    }
    memset(h + 60, 0, 16);
    expect_format(h, sizeof h, "more than zlib can produce");
    /* and a compressed length beyond the end of the file */
    h[52] = 200;
    expect_format(h, sizeof h, "remain");
  }
  /* section tag */
  memcpy(b, good, n);
  b[40] = 'J';
  expect_format(b, n, "IMGS");

  /* contents, re-encoded with valid compression */
  raw_file r;
  raw_parse(&r, good, n);
  size_t m;
  unsigned char *x;
#define MUTATE(sec, off, val, needle)                                                              \
  do {                                                                                             \
    const unsigned char keep = r.data[sec][off];                                                   \
    r.data[sec][off] = (val);                                                                      \
    x = raw_build(&r, &m);                                                                         \
    expect_format(x, m, needle);                                                                   \
    free(x);                                                                                       \
    r.data[sec][off] = keep;                                                                       \
  } while (0)
  x = raw_build(&r, &m); /* unmodified: loads */
  ampc_dataset ok;
  assert_int_equal(ampc_dataset_load_mem(x, m, "rebuilt", &ok), AMPC_OK);
  assert_same_dataset(&t.d, &ok);
  ampc_dataset_free(&ok);
  free(x);
  MUTATE(1, 4 * 5, 6, "token id 6");        /* token = vocab */
  MUTATE(1, 4 * 5 + 3, 0x80, "token id");   /* negative token */
  MUTATE(2, 4 * 3, 3, "label 3");           /* label = n_classes */
  MUTATE(3, 4 * 1 + 3, 0xFF, "concept id"); /* negative concept */
  MUTATE(4, 2, 4, "unknown split 4");
  MUTATE(5, 0, 3, "unknown style 3");
  MUTATE(6, 0, 0, "VOCB");              /* one string too many */
  MUTATE(7, r.len[7] - 1, 'z', "CLAS"); /* last class name not terminated */
  MUTATE(8, 0, 0, "CAPT");
  MUTATE(9, r.len[9] - 1, 'z', "STYN"); /* last style name not terminated */
  MUTATE(9, 0, 0, "style name 0 is empty or repeated");
#undef MUTATE
  /* version 1: no STYN section, styles 0 / 1 read as google / twitter */
  {
    raw_file v1 = r;
    v1.nsec = 9;
    put32(v1.header + 8, 1);
    x = raw_build(&v1, &m);
    expect_format(x, m, "unknown style 2"); /* sample 2 has style 2 */
    free(x);
    const unsigned char keep = r.data[5][2];
    r.data[5][2] = 1;
    v1.data[5] = r.data[5];
    x = raw_build(&v1, &m);
    ampc_dataset old;
    assert_int_equal(ampc_dataset_load_mem(x, m, "v1", &old), AMPC_OK);
    assert_null(old.style_names);
    assert_string_equal(ampc_dataset_style_name(&old, 1), "twitter");
    assert_null(ampc_dataset_style_name(&old, 2));
    assert_int_equal(ampc_dataset_find_style(&old, "google"), 0);
    ampc_dataset_free(&old);
    free(x);
    r.data[5][2] = keep;
  }
  /* a section that inflates to more or fewer bytes than its header says */
  for (int delta = -1; delta <= 1; delta += 2) {
    r.len[0] += (size_t)delta;
    x = raw_build(&r, &m);
    expect_format(x, m, "IMGS");
    free(x);
    r.len[0] -= (size_t)delta;
  }
  for (int k = 6; k < 9; k++) { /* string sections: a shorter blob */
    r.len[k]--;
    x = raw_build(&r, &m);
    expect_format(x, m, NULL);
    free(x);
    r.len[k]++;
  }
  raw_free(&r);

  /* every single-byte corruption: an error or (never here) a valid load */
  for (size_t i = 0; i < n; i++) {
    memcpy(b, good, n);
    b[i] ^= 0x5A;
    ampc_dataset d;
    const ampc_status st = ampc_dataset_load_mem(b, n, "flip", &d);
    assert_true(st == AMPC_ERR_FORMAT || st == AMPC_OK);
    ampc_dataset_free(&d);
  }

  /* files: missing, truncated on disk */
  ampc_dataset d;
  assert_int_equal(ampc_dataset_load(tmp_path("missing.ampcds"), &d), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "missing.ampcds"));
  write_all(tmp_path("short.ampcds"), good, n / 2);
  assert_int_equal(ampc_dataset_load(tmp_path("short.ampcds"), &d), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "short.ampcds"));
  free(b);
  free(good);
}

/* Truncations of the real embedded file: all refused, quickly. */
static void test_corrupt_embedded(void **state) {
  (void)state;
  ampc_dataset d;
  assert_int_equal(ampc_dataset_load_default(&d), AMPC_OK);
  const char *p = tmp_path("emoji.ampcds");
  assert_int_equal(ampc_dataset_save(&d, p), AMPC_OK);
  ampc_dataset_free(&d);
  size_t n;
  unsigned char *b = read_all(p, &n);
  for (size_t k = 0; k < 200; k++) {
    const size_t cut = k < 100 ? k * 7 : n - 1 - (k - 100) * (n / 100);
    expect_format(b, cut, NULL);
  }
  assert_int_equal(ampc_dataset_load_mem(b, n, "copy", &d), AMPC_OK);
  ampc_dataset_free(&d);
  free(b);
}

/* ---- PNG decoding ------------------------------------------------------------ */

typedef struct png_spec {
  int w, h, color, depth, interlace;
  const png_color *pal;
  int npal;
  const png_byte *trns;
  int ntrns;
} png_spec;

/* Write a PNG from packed rows (PNG byte order, rowbytes per row). */
static void write_png(const char *path, const png_spec *s, const unsigned char *rows_data) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  assert_non_null(info);
  if (setjmp(png_jmpbuf(png)))
    fail_msg("libpng could not write %s", path);
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)s->w, (png_uint_32)s->h, s->depth, s->color,
               s->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (s->pal)
    png_set_PLTE(png, info, s->pal, s->npal);
  if (s->trns)
    png_set_tRNS(png, info, s->trns, s->ntrns, NULL);
  png_write_info(png, info);
  const size_t rb = png_get_rowbytes(png, info);
  png_bytep rows[256];
  for (int y = 0; y < s->h; y++)
    rows[y] = (png_bytep)(rows_data + (size_t)y * rb);
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  assert_int_equal(fclose(f), 0);
}

/* The documented result from 8-bit RGBA source pixels [64][64][4]. */
static void expected_from_rgba(const unsigned char *rgba, uint8_t *out) {
  for (int y = 0; y < 32; y++)
    for (int x = 0; x < 32; x++)
      for (int c = 0; c < 3; c++) {
        unsigned num = 0;
        for (int dy = 0; dy < 2; dy++)
          for (int dx = 0; dx < 2; dx++) {
            const unsigned char *p = rgba + ((2 * y + dy) * 64 + 2 * x + dx) * 4;
            num += p[c] * p[3] + 255u * (255u - p[3]);
          }
        out[(y * 32 + x) * 3 + c] = (uint8_t)((num + 510) / 1020);
      }
}

static void check_png(const char *name, const png_spec *s, const unsigned char *rows,
                      const unsigned char *truth_rgba) {
  const char *p = tmp_path(name);
  write_png(p, s, rows);
  uint8_t got[32 * 32 * 3], want[32 * 32 * 3];
  if (ampc_emoji_png_load(p, got) != AMPC_OK)
    fail_msg("%s: %s", name, ampc_last_error());
  expected_from_rgba(truth_rgba, want);
  for (int i = 0; i < 32 * 32 * 3; i++)
    if (got[i] != want[i])
      fail_msg("%s: byte %d (pixel %d,%d channel %d) is %d, expected %d", name, i, (i / 3) % 32,
               i / 96, i % 3, got[i], want[i]);
}

static void test_png_modes(void **state) {
  (void)state;
  static unsigned char rows[64 * 64 * 8], truth[64 * 64 * 4];
  png_spec s = {64, 64, PNG_COLOR_TYPE_RGBA, 8, 0, NULL, 0, NULL, 0};

  /* RGBA: a pattern with every kind of alpha; the top-left 2x2 blocks are
   * set by hand below */
  for (int y = 0; y < 64; y++)
    for (int x = 0; x < 64; x++) {
      unsigned char *q = rows + (y * 64 + x) * 4;
      q[0] = (unsigned char)(x * 4);
      q[1] = (unsigned char)(y * 4 + 1);
      q[2] = (unsigned char)((x + y) * 3);
      q[3] = (unsigned char)((x * 13 + y * 7) & 255);
    }
  /* block (0,0): black and white opaque checker -> mean 127.5 -> 128 */
  const unsigned char blk0[4][4] = {
      {0, 0, 0, 255}, {255, 255, 255, 255}, {255, 255, 255, 255}, {0, 0, 0, 255}};
  /* block (1,0): fully transparent red -> white */
  const unsigned char blk1[4] = {255, 0, 0, 0};
  /* block (2,0): red at alpha 128 -> (255, 127, 127): 255*127/255 = 127 */
  const unsigned char blk2[4] = {255, 0, 0, 128};
  for (int k = 0; k < 4; k++) {
    const int y = k / 2, x = k % 2;
    memcpy(rows + (y * 64 + x) * 4, blk0[k], 4);
    memcpy(rows + (y * 64 + 2 + x) * 4, blk1, 4);
    memcpy(rows + (y * 64 + 4 + x) * 4, blk2, 4);
  }
  check_png("rgba.png", &s, rows, rows);
  uint8_t got[32 * 32 * 3];
  assert_int_equal(ampc_emoji_png_load(tmp_path("rgba.png"), got), AMPC_OK);
  const uint8_t hand[3][3] = {{128, 128, 128}, {255, 255, 255}, {255, 127, 127}};
  for (int b = 0; b < 3; b++)
    assert_memory_equal(got + 3 * b, hand[b], 3);
  /* the same pixels interlaced (Adam7) */
  s.interlace = 1;
  check_png("rgba_interlaced.png", &s, rows, rows);
  s.interlace = 0;

  /* gray + alpha */
  s.color = PNG_COLOR_TYPE_GRAY_ALPHA;
  for (int i = 0; i < 64 * 64; i++) {
    rows[2 * i] = (unsigned char)(i * 7);
    rows[2 * i + 1] = (unsigned char)(i * 11 + 3);
    truth[4 * i] = truth[4 * i + 1] = truth[4 * i + 2] = rows[2 * i];
    truth[4 * i + 3] = rows[2 * i + 1];
  }
  check_png("la.png", &s, rows, truth);

  /* palette with tRNS, 8 bits: 40 entries, the first 20 translucent */
  png_color pal[40];
  png_byte trns[20];
  for (int i = 0; i < 40; i++) {
    pal[i].red = (png_byte)(i * 6);
    pal[i].green = (png_byte)(255 - i * 5);
    pal[i].blue = (png_byte)(i * 97);
  }
  for (int i = 0; i < 20; i++)
    trns[i] = (png_byte)(i * 13);
  s.color = PNG_COLOR_TYPE_PALETTE;
  s.pal = pal;
  s.npal = 40;
  s.trns = trns;
  s.ntrns = 20;
  for (int i = 0; i < 64 * 64; i++) {
    const int k = (i * 7 + i / 64) % 40;
    rows[i] = (unsigned char)k;
    truth[4 * i] = pal[k].red;
    truth[4 * i + 1] = pal[k].green;
    truth[4 * i + 2] = pal[k].blue;
    truth[4 * i + 3] = k < 20 ? trns[k] : 255;
  }
  check_png("palette8.png", &s, rows, truth);

  /* palette with tRNS, 4 bits (as some Twemoji files) */
  s.depth = 4;
  s.npal = 16;
  s.ntrns = 10;
  memset(rows, 0, 32 * 64);
  for (int i = 0; i < 64 * 64; i++) {
    const int k = (i * 5 + i / 64) % 16;
    rows[i / 2] |= (unsigned char)(i % 2 ? k : k << 4); /* first pixel in the high nibble */
    truth[4 * i] = pal[k].red;
    truth[4 * i + 1] = pal[k].green;
    truth[4 * i + 2] = pal[k].blue;
    truth[4 * i + 3] = k < 10 ? trns[k] : 255;
  }
  check_png("palette4.png", &s, rows, truth);
  s.pal = NULL;
  s.npal = 0;
  s.trns = NULL;
  s.ntrns = 0;
  s.depth = 8;

  /* RGB, no alpha */
  s.color = PNG_COLOR_TYPE_RGB;
  for (int i = 0; i < 64 * 64; i++) {
    for (int c = 0; c < 3; c++)
      truth[4 * i + c] = rows[3 * i + c] = (unsigned char)(i * (c + 3) + c);
    truth[4 * i + 3] = 255;
  }
  check_png("rgb.png", &s, rows, truth);

  /* 16-bit gray: v = 257 k is exactly k in 8 bits; 257 k + 100 rounds to k */
  s.color = PNG_COLOR_TYPE_GRAY;
  s.depth = 16;
  for (int i = 0; i < 64 * 64; i++) {
    const unsigned k = (unsigned)(i * 5 + (i / 64) * 11) % 256;
    const unsigned v = 257 * k + (i % 2 == 0 && k < 255 ? 100 : 0);
    rows[2 * i] = (unsigned char)(v >> 8);
    rows[2 * i + 1] = (unsigned char)v;
    truth[4 * i] = truth[4 * i + 1] = truth[4 * i + 2] = (unsigned char)k;
    truth[4 * i + 3] = 255;
  }
  check_png("gray16.png", &s, rows, truth);
}

static void expect_png_error(const char *name, ampc_status want) {
  uint8_t out[32 * 32 * 3];
  const char *p = tmp_path(name);
  assert_int_equal(ampc_emoji_png_load(p, out), want);
  if (!strstr(ampc_last_error(), name))
    fail_msg("message '%s' does not name %s", ampc_last_error(), name);
}

static void test_png_errors(void **state) {
  (void)state;
  static unsigned char rows[64 * 64 * 4];
  for (size_t i = 0; i < sizeof rows; i++)
    rows[i] = (unsigned char)(i * 31 + 7);
  /* 32x32: wrong size */
  png_spec s = {32, 32, PNG_COLOR_TYPE_RGBA, 8, 0, NULL, 0, NULL, 0};
  write_png(tmp_path("small32.png"), &s, rows);
  expect_png_error("small32.png", AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "32x32"));
  /* not a PNG; missing */
  write_text(tmp_path("text.png"), "this is not a png file at all");
  expect_png_error("text.png", AMPC_ERR_FORMAT);
  expect_png_error("missing.png", AMPC_ERR_IO);
  /* truncated and corrupted versions of a good 64x64 file */
  s.w = s.h = 64;
  write_png(tmp_path("good.png"), &s, rows);
  size_t n;
  unsigned char *good = read_all(tmp_path("good.png"), &n);
  const size_t cuts[] = {8, 20, 40, 60, n / 3, n / 2, n - 40, n - 12};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    write_all(tmp_path("cut.png"), good, cuts[i]);
    expect_png_error("cut.png", AMPC_ERR_FORMAT);
  }
  unsigned char *bad = malloc(n);
  assert_non_null(bad);
  memcpy(bad, good, n);
  for (size_t i = n / 2; i < n / 2 + 16; i++)
    bad[i] ^= 0xA5; /* inside IDAT: CRC or zlib error */
  write_all(tmp_path("corrupt.png"), bad, n);
  expect_png_error("corrupt.png", AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "corrupt PNG"));
  free(bad);
  free(good);
}

/* ---- emoji preparation on synthetic packages ------------------------------ */

static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* A solid opaque 64x64 RGBA PNG. */
static void solid_png(const char *path, unsigned char r, unsigned char g, unsigned char b) {
  static unsigned char rows[64 * 64 * 4];
  for (int i = 0; i < 64 * 64; i++) {
    rows[4 * i] = r;
    rows[4 * i + 1] = g;
    rows[4 * i + 2] = b;
    rows[4 * i + 3] = 255;
  }
  const png_spec s = {64, 64, PNG_COLOR_TYPE_RGBA, 8, 0, NULL, 0, NULL, 0};
  write_png(path, &s, rows);
}

static void test_emoji_prepare(void **state) {
  (void)state;
  /* the held-out choice of these codes (FNV-1a of `unified` mod 10 == 0) */
  assert_int_equal(fnv1a("1F4A9") % 10, 0);
  const char *train_codes[] = {"1F600", "263A-FE0F", "1F1E8-1F1EE", "1F1E6-1F1FD"};
  for (int i = 0; i < 4; i++)
    assert_int_not_equal(fnv1a(train_codes[i]) % 10, 0);

  const char *dirs[] = {"g", "g/img", "g/img/google",  "g/img/google/64",
                        "t", "t/img", "t/img/twitter", "t/img/twitter/64",
                        "b", "b/en"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
    assert_int_equal(mkdir(tmp_path(dirs[i]), 0700), 0);
  /* emoji-datasource: 10 entries (the last a duplicate of 263A) */
  static const char *const ds[10][3] = {/* unified, non_qualified, image */
                                        {"1F600", NULL, "1f600.png"},
                                        {"263A-FE0F", "263A", "263a-fe0f.png"},
                                        {"1F3FB", NULL, "1f3fb.png"},
                                        {"1F9FF", NULL, "1f9ff.png"},
                                        {"1F355", NULL, "1f355.png"},
                                        {"1F1E8-1F1EE", NULL, "1f1e8-1f1ee.png"},
                                        {"1F4A9", NULL, "1f4a9.png"},
                                        {"1F697", NULL, "1f697.png"},
                                        {"1F1E6-1F1FD", NULL, "1f1e6-1f1fd.png"},
                                        {"263A", NULL, "263a.png"}};
  char json[2][8192];
  for (int pkg = 0; pkg < 2; pkg++) {
    size_t pos = 0;
    pos += (size_t)snprintf(json[pkg] + pos, sizeof json[pkg] - pos, "[");
    for (int i = 0; i < 10; i++) {
      char nq[32] = "null";
      if (ds[i][1])
        snprintf(nq, sizeof nq, "\"%s\"", ds[i][1]);
      const int twitter_img = i != 4; /* 1F355 has no twitter image */
      pos += (size_t)snprintf(json[pkg] + pos, sizeof json[pkg] - pos,
                              "%s{\"unified\":\"%s\",\"non_qualified\":%s,\"image\":\"%s\","
                              "\"has_img_google\":true,\"has_img_twitter\":%s,\"category\":\"X\"}",
                              i ? "," : "", ds[i][0], nq, ds[i][2], twitter_img ? "true" : "false");
    }
    snprintf(json[pkg] + pos, sizeof json[pkg] - pos, "]");
  }
  write_text(tmp_path("g/emoji.json"), json[0]);
  write_text(tmp_path("t/emoji.json"), json[1]);
  /* emojibase: lower-case hexcodes to exercise the case-insensitive match */
  write_text(tmp_path("b/en/data.json"),
             "[{\"label\":\"grinning face\",\"hexcode\":\"1f600\",\"tags\":[\"face\",\"grin\"],"
             "\"group\":0},"
             "{\"label\":\"smiling face\",\"hexcode\":\"263A\",\"tags\":[\"face\",\"outlined\","
             "\"relaxed\",\"smile\"],\"group\":0},"
             "{\"label\":\"light skin tone\",\"hexcode\":\"1F3FB\",\"tags\":[\"skin\"],"
             "\"group\":2},"
             "{\"label\":\"pizza\",\"hexcode\":\"1F355\",\"tags\":[\"cheese\"],\"group\":4},"
             "{\"label\":\"flag: C\xc3\xb4te d\xe2\x80\x99Ivoire\",\"hexcode\":\"1F1E8-1F1EE\","
             "\"tags\":[\"CI\",\"flag\"],\"group\":9},"
             "{\"label\":\"pile of poo\",\"hexcode\":\"1F4A9\",\"tags\":[\"face\",\"monster\","
             "\"poo\",\"\xc3\xb7\",\"\xc3\x97\",\"\xe2\x9c\x93\"],\"group\":0},"
             "{\"label\":\"automobile\",\"hexcode\":\"1F697\",\"tags\":[\"car\"]},"
             "{\"label\":\"flag: \xc3\x85land Islands\",\"hexcode\":\"1F1E6-1F1FD\","
             "\"tags\":[\"AX\",\"flag\"],\"group\":9},"
             "{\"label\":\"regional indicator A\",\"hexcode\":\"1F1E6\"}]");
  /* images of the 5 concepts: google (10i, 20, 30), twitter (200, 10i, 40) */
  const int concept_entry[5] = {0, 1, 5, 6, 8};
  for (int i = 0; i < 5; i++) {
    char name[128];
    snprintf(name, sizeof name, "g/img/google/64/%s", ds[concept_entry[i]][2]);
    solid_png(tmp_path(name), (unsigned char)(10 * i), 20, 30);
    snprintf(name, sizeof name, "t/img/twitter/64/%s", ds[concept_entry[i]][2]);
    solid_png(tmp_path(name), 200, (unsigned char)(10 * i), 40);
  }

  char g[512], t[512], b[512];
  snprintf(g, sizeof g, "%s", tmp_path("g"));
  snprintf(t, sizeof t, "%s", tmp_path("t"));
  snprintf(b, sizeof b, "%s", tmp_path("b"));
  ampc_dataset d;
  ampc_emoji_prep_stats s;
  if (ampc_emoji_prepare(g, t, b, &d, &s) != AMPC_OK)
    fail_msg("%s", ampc_last_error());
  assert_int_equal(s.datasource_entries, 10);
  assert_int_equal(s.emojibase_entries, 9);
  assert_int_equal(s.joined_unified, 8); /* includes the duplicate 263A */
  assert_int_equal(s.joined_non_qualified, 1);
  assert_int_equal(s.skipped_unmatched, 1);
  assert_int_equal(s.skipped_duplicate, 1);
  assert_int_equal(s.skipped_component, 1);
  assert_int_equal(s.skipped_no_group, 1);
  assert_int_equal(s.skipped_no_image, 1);
  assert_int_equal(s.concepts, 5);
  assert_int_equal(s.train_concepts, 4);
  assert_int_equal(s.zero_shot_concepts, 1);
  assert_int_equal(s.max_caption_words, 5);
  assert_int_equal(s.truncated_captions, 0);

  assert_int_equal(d.n, 10);
  assert_int_equal(d.seq_len, AMPC_EMOJI_SEQ_LEN);
  assert_int_equal(d.n_classes, 2);
  assert_string_equal(d.class_names[0], "smileys-emotion");
  assert_string_equal(d.class_names[1], "flags");
  /* vocabulary: training words by count (face 2, flag 2), then byte order */
  static const char *const vocab[] = {"<pad>",   "<unk>",       "face",     "flag",    "ax",
                                      "ci",      "c\xc3\xb4te", "d",        "grin",    "grinning",
                                      "islands", "ivoire",      "outlined", "relaxed", "smile",
                                      "smiling", "\xc3\xa5land"};
  assert_int_equal(d.vocab, (int)(sizeof vocab / sizeof vocab[0]));
  for (int i = 0; i < d.vocab; i++)
    assert_string_equal(d.words[i], vocab[i]);
  /* samples: concepts 0,1,2,4 google; the same twitter; concept 3 both */
  const int concept[10] = {0, 1, 2, 4, 0, 1, 2, 4, 3, 3};
  const int split[10] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2};
  const int label[5] = {0, 0, 1, 0, 1};
  static const char *const caption[5] = {
      "grinning face grin", "smiling face outlined relaxed smile", "flag c\xc3\xb4te d ivoire ci",
      "pile of poo face monster", "flag \xc3\xa5land islands ax"};
  static const int32_t tokens[5][6] = {{9, 2, 8, 0, 0, 0},
                                       {15, 2, 12, 13, 14, 0},
                                       {3, 6, 7, 11, 5, 0},
                                       {1, 1, 1, 2, 1, 0},
                                       {3, 16, 10, 4, 0, 0}};
  for (int i = 0; i < 10; i++) {
    const int c = concept[i], style = i >= 4 && i != 8;
    assert_int_equal(d.concept[i], c);
    assert_int_equal(d.split[i], split[i]);
    assert_int_equal(d.style[i], style);
    assert_int_equal(d.label[i], label[c]);
    assert_string_equal(d.captions[i], caption[c]);
    assert_memory_equal(d.tokens + i * d.seq_len, tokens[c], sizeof tokens[c]);
    for (int k = 6; k < d.seq_len; k++)
      assert_int_equal(d.tokens[i * d.seq_len + k], AMPC_TOKEN_PAD);
    const uint8_t want[3] = {style ? 200 : (uint8_t)(10 * c), style ? (uint8_t)(10 * c) : 20,
                             style ? 40 : 30};
    for (int p = 0; p < 32 * 32; p++)
      assert_memory_equal(d.images + (size_t)i * 3072 + 3 * p, want, 3);
  }
  /* it saves and loads */
  assert_int_equal(ampc_dataset_save(&d, tmp_path("synthetic.ampcds")), AMPC_OK);
  ampc_dataset back;
  assert_int_equal(ampc_dataset_load(tmp_path("synthetic.ampcds"), &back), AMPC_OK);
  assert_same_dataset(&d, &back);
  ampc_dataset_free(&back);
  ampc_dataset_free(&d);

  /* three styles: openmoji's PNGs by emojibase hexcode; Cote d'Ivoire has none */
  assert_int_equal(mkdir(tmp_path("o"), 0700), 0);
  assert_int_equal(mkdir(tmp_path("o/64"), 0700), 0);
  static const char *const om[4] = {"1F600", "263A", "1F4A9", "1F1E6-1F1FD"};
  for (int i = 0; i < 4; i++) {
    char name[128];
    snprintf(name, sizeof name, "o/64/%s.png", om[i]);
    solid_png(tmp_path(name), 5, 6, (unsigned char)(100 + i));
  }
  char o[512];
  snprintf(o, sizeof o, "%s", tmp_path("o"));
  const ampc_emoji_source src3[3] = {{"google", g}, {"openmoji", o}, {"twitter", t}};
  if (ampc_emoji_prepare_styles(src3, 3, b, 2, &d, &s) != AMPC_OK)
    fail_msg("%s", ampc_last_error());
  assert_int_equal(s.styles, 3);
  assert_int_equal(s.concepts, 4);
  assert_int_equal(s.skipped_no_image, 2);
  /* Cote d'Ivoire and pizza have no openmoji image (pizza no twitter one either;
   * the first style in the given order that lacks it is counted) */
  assert_int_equal(s.missing_in_style[1], 2);
  assert_int_equal(s.missing_in_style[2], 0);
  assert_int_equal(d.n, 12);
  assert_int_equal(d.n_styles, 3);
  assert_string_equal(d.style_names[0], "google");
  assert_string_equal(d.style_names[1], "openmoji");
  assert_string_equal(d.style_names[2], "twitter");
  {
    /* concepts: 0 grinning, 1 smiling, 2 poo (held out), 3 Aland */
    const int c3[12] = {0, 1, 3, 0, 1, 3, 0, 1, 3, 2, 2, 2};
    const int sp3[12] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
    const int st3[12] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 1, 2};
    const int om_of[4] = {0, 1, 2, 3}; /* concept -> index in om[] */
    for (int i = 0; i < 12; i++) {
      assert_int_equal(d.concept[i], c3[i]);
      assert_int_equal(d.split[i], sp3[i]);
      assert_int_equal(d.style[i], st3[i]);
      if (st3[i] == 1) {
        const uint8_t want[3] = {5, 6, (uint8_t)(100 + om_of[c3[i]])};
        assert_memory_equal(d.images + (size_t)i * 3072 + 3 * 517, want, 3);
      }
    }
    /* it saves and loads with its style names */
    assert_int_equal(ampc_dataset_save(&d, tmp_path("three.ampcds")), AMPC_OK);
    assert_int_equal(ampc_dataset_load(tmp_path("three.ampcds"), &back), AMPC_OK);
    assert_same_dataset(&d, &back);
    ampc_dataset_free(&back);
    /* hold out google instead: twitter joins the training styles */
    assert_int_equal(ampc_dataset_find_style(&d, "google"), 0);
    assert_int_equal(ampc_dataset_find_style(&d, "apple"), -1);
    assert_int_equal(ampc_dataset_hold_out_style(&d, 0), AMPC_OK);
    for (int i = 0; i < 12; i++)
      assert_int_equal(d.split[i], i >= 9 ? 2 : st3[i] == 0 ? 1 : 0);
    assert_int_equal(ampc_dataset_hold_out_style(&d, 3), AMPC_ERR_INVALID_ARG);
  }
  ampc_dataset_free(&d);
  {
    /* one style: nothing held out; holding it out leaves only evaluation
     * (ampc eval may; a run refuses it: nothing to train on) */
    const ampc_emoji_source one[1] = {{"google", g}};
    solid_png(tmp_path("g/img/google/64/1f355.png"), 1, 2, 3); /* pizza: google only */
    assert_int_equal(ampc_emoji_prepare_styles(one, 1, b, -1, &d, NULL), AMPC_OK);
    for (int i = 0; i < d.n; i++)
      assert_int_not_equal(d.split[i], AMPC_SPLIT_NEW_STYLE);
    assert_int_equal(ampc_dataset_hold_out_style(&d, 0), AMPC_OK);
    for (int i = 0; i < d.n; i++)
      assert_int_not_equal(d.split[i], AMPC_SPLIT_TRAIN);
    ampc_dataset_free(&d);
    /* unknown, repeated, or no emoji-datasource style */
    const ampc_emoji_source bad1[1] = {{"noto", g}};
    assert_int_equal(ampc_emoji_prepare_styles(bad1, 1, b, -1, &d, NULL), AMPC_ERR_INVALID_ARG);
    assert_non_null(strstr(ampc_last_error(), "unknown style 'noto'"));
    const ampc_emoji_source bad2[2] = {{"google", g}, {"google", g}};
    assert_int_equal(ampc_emoji_prepare_styles(bad2, 2, b, -1, &d, NULL), AMPC_ERR_INVALID_ARG);
    const ampc_emoji_source bad3[1] = {{"openmoji", o}};
    assert_int_equal(ampc_emoji_prepare_styles(bad3, 1, b, -1, &d, NULL), AMPC_ERR_INVALID_ARG);
    assert_non_null(strstr(ampc_last_error(), "emoji-datasource"));
  }

  /* a concept whose image is missing, or bad JSON: errors naming the file */
  remove(tmp_path("t/img/twitter/64/1f4a9.png"));
  assert_int_equal(ampc_emoji_prepare(g, t, b, &d, NULL), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "1f4a9.png"));
  write_text(tmp_path("b/en/data.json"), "[{\"label\": ");
  assert_int_equal(ampc_emoji_prepare(g, t, b, &d, NULL), AMPC_ERR_FORMAT);
  assert_non_null(strstr(ampc_last_error(), "data.json"));
  assert_int_equal(ampc_emoji_prepare(g, t, tmp_path("nowhere"), &d, NULL), AMPC_ERR_IO);
  assert_null(d.images);
}

/* ---- Fashion-MNIST ---------------------------------------------------------- */

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* Write an IDX file, gzipped; rows == 0 makes a labels file. extra bytes are
 * appended after the data; cut removes bytes from its end. */
static void write_idx(const char *dir, const char *name, uint32_t magic, uint32_t count,
                      uint32_t rows, const unsigned char *data, size_t len, size_t cut) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  gzFile f = gzopen(path, "wb9");
  assert_non_null(f);
  unsigned char h[16];
  put_be32(h, magic);
  put_be32(h + 4, count);
  put_be32(h + 8, rows);
  put_be32(h + 12, rows);
  const size_t hl = rows ? 16 : 8;
  unsigned char *all = malloc(hl + len);
  assert_non_null(all);
  memcpy(all, h, hl);
  memcpy(all + hl, data, len);
  assert_int_equal(gzwrite(f, all, (unsigned)(hl + len - cut)), (int)(hl + len - cut));
  free(all);
  assert_int_equal(gzclose(f), Z_OK);
}

typedef struct fm_case {
  uint32_t img_magic, lab_magic, train_labels, side;
  size_t img_cut, lab_extra;
  unsigned char bad_label;
} fm_case;

static void make_fm(const char *dir, const fm_case *c) {
  static unsigned char img[5 * 28 * 28];
  for (size_t i = 0; i < sizeof img; i++)
    img[i] = (unsigned char)(i * 13 + i / 784);
  unsigned char lab[8] = {9, 0, 3, 7, 1, 0, 0, 0};
  if (c->bad_label)
    lab[1] = c->bad_label;
  write_idx(dir, "train-images-idx3-ubyte.gz", c->img_magic, 3, c->side, img, 3 * 784, c->img_cut);
  write_idx(dir, "train-labels-idx1-ubyte.gz", c->lab_magic, c->train_labels, 0, lab,
            3 + c->lab_extra, 0);
  write_idx(dir, "t10k-images-idx3-ubyte.gz", 2051, 2, 28, img + 3 * 784, 2 * 784, 0);
  write_idx(dir, "t10k-labels-idx1-ubyte.gz", 2049, 2, 0, lab + 3, 2, 0);
}

static void test_fashion_mnist(void **state) {
  (void)state;
  const char *dir = tmp_path("fm");
  char fmdir[512];
  snprintf(fmdir, sizeof fmdir, "%s", dir);
  assert_int_equal(mkdir(fmdir, 0700), 0);
  const fm_case good = {2051, 2049, 3, 28, 0, 0, 0};
  make_fm(fmdir, &good);
  ampc_dataset d;
  if (ampc_fashion_mnist_load(fmdir, &d) != AMPC_OK)
    fail_msg("%s", ampc_last_error());
  assert_int_equal(d.n, 5);
  assert_int_equal(d.height, 28);
  assert_int_equal(d.width, 28);
  assert_int_equal(d.channels, 1);
  assert_int_equal(d.seq_len, 0);
  assert_null(d.tokens);
  assert_int_equal(d.n_classes, 10);
  assert_string_equal(d.class_names[0], "T-shirt/top");
  assert_string_equal(d.class_names[9], "Ankle boot");
  const int32_t labels[5] = {9, 0, 3, 7, 1};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(d.label[i], labels[i]);
    assert_int_equal(d.split[i], i < 3 ? AMPC_SPLIT_TRAIN : AMPC_SPLIT_TEST);
    assert_int_equal(d.concept[i], i);
  }
  for (size_t i = 0; i < 5 * 784; i++)
    assert_int_equal(d.images[i], (unsigned char)(i * 13 + i / 784));
  ampc_dataset_free(&d);

  /* broken variants: each an AMPC_ERR_FORMAT naming the file */
  const struct {
    fm_case c;
    const char *needle;
  } bad[] = {
      {{2049, 2049, 3, 28, 0, 0, 0}, "train-images-idx3-ubyte.gz: magic 2049"},
      {{2051, 2051, 3, 28, 0, 0, 0}, "train-labels-idx1-ubyte.gz: magic 2051"},
      {{2051, 2049, 4, 28, 0, 1, 0}, "4 labels"},
      {{2051, 2049, 3, 32, 0, 0, 0}, "32x32"},
      {{2051, 2049, 3, 28, 100, 0, 0}, "train-images-idx3-ubyte.gz: truncated"},
      {{2051, 2049, 3, 28, 0, 1, 0}, "unexpected bytes"},
      {{2051, 2049, 3, 28, 0, 0, 10}, "label 10"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    make_fm(fmdir, &bad[i].c);
    assert_int_equal(ampc_fashion_mnist_load(fmdir, &d), AMPC_ERR_FORMAT);
    if (!strstr(ampc_last_error(), bad[i].needle))
      fail_msg("case %zu: '%s' lacks '%s'", i, ampc_last_error(), bad[i].needle);
    assert_null(d.images);
  }
  /* a gzip stream cut short (the file itself truncated) */
  make_fm(fmdir, &good);
  char path[600];
  snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", fmdir);
  size_t n;
  unsigned char *z = read_all(path, &n);
  for (size_t cut = 1; cut < n; cut += (cut < 40 ? 1 : 97)) {
    write_all(path, z, n - cut);
    assert_int_equal(ampc_fashion_mnist_load(fmdir, &d), AMPC_ERR_FORMAT);
    assert_non_null(strstr(ampc_last_error(), "t10k-images-idx3-ubyte.gz"));
  }
  free(z);
  /* a missing file */
  remove(path);
  assert_int_equal(ampc_fashion_mnist_load(fmdir, &d), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), "t10k-images-idx3-ubyte.gz"));
}

static void test_fashion_mnist_debian(void **state) {
  (void)state;
  const char *dir = "/usr/share/datasets/fashion-mnist";
  struct stat st;
  if (stat(dir, &st) != 0) {
    print_message("skipped: %s not installed (apt-get install dataset-fashion-mnist)\n", dir);
    return;
  }
  ampc_dataset d;
  if (ampc_fashion_mnist_load(dir, &d) != AMPC_OK)
    fail_msg("%s", ampc_last_error());
  assert_int_equal(d.n, 70000);
  int32_t per_split[4] = {0, 0, 0, 0}, per_class[10] = {0};
  for (int32_t i = 0; i < d.n; i++) {
    per_split[d.split[i]]++;
    per_class[d.label[i]]++;
  }
  assert_int_equal(per_split[AMPC_SPLIT_TRAIN], 60000);
  assert_int_equal(per_split[AMPC_SPLIT_TEST], 10000);
  for (int c = 0; c < 10; c++)
    assert_int_equal(per_class[c], 7000); /* balanced: 6000 + 1000 per class */
  assert_int_equal(d.label[0], 9);
  assert_string_equal(d.class_names[d.label[0]], "Ankle boot");
  assert_int_equal(d.split[60000], AMPC_SPLIT_TEST);
  ampc_dataset_free(&d);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/ampc-test-data-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "cannot create %s\n", g_dir);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embedded),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_corrupt),
      cmocka_unit_test(test_corrupt_embedded),
      cmocka_unit_test(test_png_modes),
      cmocka_unit_test(test_png_errors),
      cmocka_unit_test(test_emoji_prepare),
      cmocka_unit_test(test_fashion_mnist),
      cmocka_unit_test(test_fashion_mnist_debian),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (!getenv("AMPC_TEST_KEEP")) /* set it to keep the files for a look */
    nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return failed ? 1 : 0;
}
