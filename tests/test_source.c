/*
 * tests/test_source.c: the readers of a user's image-text pairs
 * (src/data/ingest/source.h), on files written here in a mkdtemp folder.
 *
 * - CSV: RFC 4180 quoting (quoted commas, quoted line ends, doubled quotes),
 *   the physical line each record starts on, blank lines, relative and
 *   absolute image paths, short rows, missing and zero-byte images,
 *   non-UTF-8 and blank captions, headers_only, custom column names and
 *   labels, a header without the named column (the documented message), an
 *   empty file, an unclosed quote running past the field limit, TSV with
 *   CRLF line ends, a forced kind;
 * - JSONL: "caption" and "text" keys, blank lines, lines that are not one
 *   object or lack a key, numeric labels;
 * - image folders with metadata.jsonl (preferred) and metadata.csv;
 * - WebDataset shards written with libarchive's writer: a brace pattern over
 *   two shards, jpg/png/webp/JPEG members, keys in sub-folders, a key
 *   without .txt, one without an image, .cls labels, hidden and directory
 *   members skipped, a truncated shard (its complete groups, one
 *   TRUNCATED_TAR item, then the next shard), a missing shard in a list;
 * - brace patterns, UTF-8 validation, fault names.
 * Every item is checked whole: key, where, caption, label, fault, message and
 * image bytes.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, strdup */

#include <archive.h>
#include <archive_entry.h>

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
#include <unistd.h>

#include "data/ingest/source.h"

static char g_dir[256]; /* scratch directory for this run */

static const char *tmp_path(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) & 7;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static void write_all(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *text) { write_all(path, text, strlen(text)); }

static void make_dir(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    assert_int_equal(mkdir(path, 0755), 0);
}

/* ---- collecting a source's items ---------------------------------------- */

typedef struct got {
  char *key, *where, *caption, *label, *msg;
  ampc_sample_fault fault;
  unsigned char *img; /* NULL: the item had none */
  size_t img_n;
} got;

typedef struct got_list {
  got *v;
  int n;
} got_list;

static char *dup_s(const char *s) {
  char *d = strdup(s);
  assert_non_null(d);
  return d;
}

static got_list collect(const char *spec, const ampc_source_options *o) {
  ampc_source *s = NULL;
  const ampc_status st = ampc_source_open(&s, spec, o);
  if (st != AMPC_OK)
    fprintf(stderr, "open %s: %s\n", spec, ampc_last_error());
  assert_int_equal(st, AMPC_OK);
  got_list L = {0};
  for (;;) {
    ampc_source_item it;
    bool done = false;
    assert_int_equal(ampc_source_next(s, &it, &done), AMPC_OK);
    if (done)
      break;
    L.v = realloc(L.v, (size_t)(L.n + 1) * sizeof *L.v);
    assert_non_null(L.v);
    got *g = &L.v[L.n++];
    assert_non_null(it.key);
    assert_non_null(it.where);
    assert_non_null(it.caption);
    assert_non_null(it.fault_msg);
    g->key = dup_s(it.key), g->where = dup_s(it.where), g->caption = dup_s(it.caption);
    g->label = it.label ? dup_s(it.label) : NULL;
    g->msg = dup_s(it.fault_msg);
    g->fault = it.fault;
    g->img = NULL, g->img_n = it.image_size;
    if (it.image) {
      g->img = malloc(it.image_size ? it.image_size : 1);
      assert_non_null(g->img);
      memcpy(g->img, it.image, it.image_size);
    } else
      assert_int_equal(it.image_size, 0);
    if (it.fault == AMPC_FAULT_NONE)
      assert_string_equal(it.fault_msg, "");
    else
      assert_null(it.image);
  }
  bool done = false;
  ampc_source_item it;
  assert_int_equal(ampc_source_next(s, &it, &done), AMPC_OK); /* stays at the end */
  assert_true(done);
  ampc_source_close(s);
  return L;
}

static void got_free(got_list *L) {
  for (int i = 0; i < L->n; i++) {
    got *g = &L->v[i];
    free(g->key), free(g->where), free(g->caption), free(g->label), free(g->msg), free(g->img);
  }
  free(L->v);
  L->v = NULL, L->n = 0;
}

/* One item as expected. img NULL: no image bytes. msg NULL: not checked
 * (the fault is), "" for a good item. */
static void expect(const got *g, const char *key, const char *where, const char *caption,
                   const char *label, ampc_sample_fault fault, const char *msg, const char *img) {
  assert_string_equal(g->key, key);
  assert_string_equal(g->where, where);
  assert_string_equal(g->caption, caption);
  if (label)
    assert_string_equal(g->label, label);
  else
    assert_null(g->label);
  assert_string_equal(ampc_sample_fault_name(g->fault), ampc_sample_fault_name(fault));
  if (msg)
    assert_string_equal(g->msg, msg);
  if (img) {
    assert_non_null(g->img);
    assert_int_equal(g->img_n, strlen(img));
    assert_memory_equal(g->img, img, strlen(img));
  } else
    assert_null(g->img);
}

static char *cat3(const char *a, const char *b, const char *c) {
  const size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
  char *s = malloc(n);
  assert_non_null(s);
  snprintf(s, n, "%s%s%s", a, b, c);
  return s;
}

/* "where: tail" for a where built from tmp_path(name) and ":line" */
static const char *at(const char *name, int line) {
  static char buf[8][600];
  static int k;
  k = (k + 1) & 7;
  snprintf(buf[k], sizeof buf[k], "%s:%d", tmp_path(name), line);
  return buf[k];
}

static const char *msg_at(const char *name, int line, const char *tail) {
  static char buf[8][800];
  static int k;
  k = (k + 1) & 7;
  snprintf(buf[k], sizeof buf[k], "%s:%d: %s", tmp_path(name), line, tail);
  return buf[k];
}

/* images shared by the listing tests: img/a.jpg "AAAA", img/b.jpg "BB",
 * img/c.jpg "C", img/d.jpg "DDDDD", img/zero.jpg (0 bytes) */
static void make_images(void) {
  make_dir(tmp_path("img"));
  write_text(tmp_path("img/a.jpg"), "AAAA");
  write_text(tmp_path("img/b.jpg"), "BB");
  write_text(tmp_path("img/c.jpg"), "C");
  write_all(tmp_path("img/d.jpg"), "D\0D\0D", 5);
  write_all(tmp_path("img/zero.jpg"), "", 0);
}

/* ---- CSV ------------------------------------------------------------------ */

static void test_csv(void **state) {
  (void)state;
  make_images();
  char *abs_a = cat3(g_dir, "/img/a.jpg", "");
  char *text = cat3("filepath,title\n"
                    "img/a.jpg,\"a cat, sitting\"\n" /* line 2 */
                    "img/b.jpg,\"two\n"              /* line 3 */
                    "lines\"\n"
                    "img/c.jpg,\"she said \"\"hi\"\"\"\n" /* line 5 */
                    "\n"                                  /* blank line 6 */
                    "\"img/d.jpg\",plain\n"               /* line 7 */
                    "img/e.jpg\n"                         /* line 8: one field */
                    "img/none.jpg,missing\n"              /* line 9 */
                    "img/zero.jpg,zero\n"                 /* line 10 */
                    "img/a.jpg,bad \xff caption\n"        /* line 11 */
                    "img/a.jpg,\"  \"\n"                  /* line 12 */
                    "img/c.jpg,\"\"\n",                   /* line 13 */
                    abs_a, ",absolute");                  /* line 14, no final line end */
  write_text(tmp_path("data.csv"), text);
  free(text);
  const char *f = "data.csv";
  got_list L = collect(tmp_path(f), NULL);
  assert_int_equal(L.n, 11);
  expect(&L.v[0], "img/a.jpg", at(f, 2), "a cat, sitting", NULL, AMPC_FAULT_NONE, "", "AAAA");
  expect(&L.v[1], "img/b.jpg", at(f, 3), "two\nlines", NULL, AMPC_FAULT_NONE, "", "BB");
  expect(&L.v[2], "img/c.jpg", at(f, 5), "she said \"hi\"", NULL, AMPC_FAULT_NONE, "", "C");
  assert_int_equal(L.v[3].img_n, 5);
  assert_memory_equal(L.v[3].img, "D\0D\0D", 5);
  assert_string_equal(L.v[3].where, at(f, 7));
  assert_string_equal(L.v[3].key, "img/d.jpg");
  assert_string_equal(L.v[3].caption, "plain");
  expect(&L.v[4], "img/e.jpg", at(f, 8), "", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 8, "1 field where the header has 2"), NULL);
  expect(&L.v[5], "img/none.jpg", at(f, 9), "missing", NULL, AMPC_FAULT_MISSING_FILE,
         msg_at(f, 9, "img/none.jpg: no such file"), NULL);
  expect(&L.v[6], "img/zero.jpg", at(f, 10), "zero", NULL, AMPC_FAULT_EMPTY_FILE,
         msg_at(f, 10, "img/zero.jpg: empty file"), NULL);
  expect(&L.v[7], "img/a.jpg", at(f, 11), "bad \xff caption", NULL, AMPC_FAULT_CAPTION_UTF8,
         msg_at(f, 11, "caption is not valid UTF-8"), NULL);
  expect(&L.v[8], "img/a.jpg", at(f, 12), "  ", NULL, AMPC_FAULT_CAPTION_EMPTY,
         msg_at(f, 12, "caption is empty"), NULL);
  expect(&L.v[9], "img/c.jpg", at(f, 13), "", NULL, AMPC_FAULT_CAPTION_EMPTY,
         msg_at(f, 13, "caption is empty"), NULL);
  expect(&L.v[10], abs_a, at(f, 14), "absolute", NULL, AMPC_FAULT_NONE, "", "AAAA");
  got_free(&L);
  free(abs_a);
}

/* headers_only: no image is opened, so missing and empty files pass */
static void test_csv_headers_only(void **state) {
  (void)state;
  make_images();
  write_text(tmp_path("h.csv"), "filepath,title\n"
                                "img/none.jpg,missing\n"
                                "img/zero.jpg,zero\n"
                                "img/a.jpg,\"\"\n");
  const ampc_source_options o = {.headers_only = true};
  got_list L = collect(tmp_path("h.csv"), &o);
  assert_int_equal(L.n, 3);
  expect(&L.v[0], "img/none.jpg", at("h.csv", 2), "missing", NULL, AMPC_FAULT_NONE, "", NULL);
  expect(&L.v[1], "img/zero.jpg", at("h.csv", 3), "zero", NULL, AMPC_FAULT_NONE, "", NULL);
  expect(&L.v[2], "img/a.jpg", at("h.csv", 4), "", NULL, AMPC_FAULT_CAPTION_EMPTY,
         msg_at("h.csv", 4, "caption is empty"), NULL);
  got_free(&L);
}

/* custom columns, a label column, a quoted line end in the first field (the
 * next record's line must still be right), more fields than the header,
 * a UTF-8 byte order mark before the header */
static void test_csv_custom(void **state) {
  (void)state;
  make_images();
  write_text(tmp_path("c.csv"), "\xEF\xBB\xBFtext,id,path,label\n"
                                "\"multi\n"
                                "line\",1,img/b.jpg,dog\n" /* line 2 */
                                "   \n"                    /* blank line 4 */
                                "one,2,img/c.jpg,cat,extra\n");
  const ampc_source_options o = {.image_key = "path", .caption_key = "text", .label_key = "label"};
  got_list L = collect(tmp_path("c.csv"), &o);
  assert_int_equal(L.n, 2);
  expect(&L.v[0], "img/b.jpg", at("c.csv", 2), "multi\nline", "dog", AMPC_FAULT_NONE, "", "BB");
  expect(&L.v[1], "img/c.jpg", at("c.csv", 5), "one", "cat", AMPC_FAULT_NONE, "", "C");
  got_free(&L);
}

static void test_csv_errors(void **state) {
  (void)state;
  ampc_source *s = NULL;
  write_text(tmp_path("wrong.csv"), "path,caption\nimg/a.jpg,x\n");
  assert_int_equal(ampc_source_open(&s, tmp_path("wrong.csv"), NULL), AMPC_ERR_FORMAT);
  assert_null(s);
  char *want = cat3(tmp_path("wrong.csv"), ": no column \"filepath\" (columns: path, caption)", "");
  assert_string_equal(ampc_last_error(), want);
  free(want);
  /* the caption column named, missing */
  const ampc_source_options o = {.image_key = "path", .caption_key = "title"};
  assert_int_equal(ampc_source_open(&s, tmp_path("wrong.csv"), &o), AMPC_ERR_FORMAT);
  want = cat3(tmp_path("wrong.csv"), ": no column \"title\" (columns: path, caption)", "");
  assert_string_equal(ampc_last_error(), want);
  free(want);
  /* the label column missing */
  const ampc_source_options ol = {.image_key = "path", .caption_key = "caption", .label_key = "y"};
  assert_int_equal(ampc_source_open(&s, tmp_path("wrong.csv"), &ol), AMPC_ERR_FORMAT);
  want = cat3(tmp_path("wrong.csv"), ": no column \"y\" (columns: path, caption)", "");
  assert_string_equal(ampc_last_error(), want);
  free(want);
  write_text(tmp_path("empty.csv"), "");
  assert_int_equal(ampc_source_open(&s, tmp_path("empty.csv"), NULL), AMPC_ERR_FORMAT);
  want = cat3(tmp_path("empty.csv"), ": empty file (no header row)", "");
  assert_string_equal(ampc_last_error(), want);
  free(want);
  assert_int_equal(ampc_source_open(&s, tmp_path("absent.csv"), NULL), AMPC_ERR_IO);
  assert_int_equal(ampc_source_open(&s, tmp_path("data.xyz"), NULL), AMPC_ERR_INVALID_ARG);
  assert_null(s);
}

/* an unclosed quote: the field grows past 16 MiB, one BAD_ROW ends the file */
static void test_csv_long_field(void **state) {
  (void)state;
  make_images();
  const size_t big = 17u << 20;
  const char *head = "filepath,title\nimg/a.jpg,fine\nimg/b.jpg,\"never closed ";
  char *text = malloc(strlen(head) + big);
  assert_non_null(text);
  memcpy(text, head, strlen(head));
  for (size_t i = 0; i < big; i++)
    text[strlen(head) + i] = i % 100 == 99 ? '\n' : 'x';
  write_all(tmp_path("long.csv"), text, strlen(head) + big);
  free(text);
  got_list L = collect(tmp_path("long.csv"), NULL);
  assert_int_equal(L.n, 2);
  expect(&L.v[0], "img/a.jpg", at("long.csv", 2), "fine", NULL, AMPC_FAULT_NONE, "", "AAAA");
  expect(&L.v[1], at("long.csv", 3), at("long.csv", 3), "", NULL, AMPC_FAULT_BAD_ROW,
         msg_at("long.csv", 3,
                "a field longer than 16 MiB (an unclosed quote?): the rest of the file is not "
                "read"),
         NULL);
  got_free(&L);
}

static void test_tsv(void **state) {
  (void)state;
  make_images();
  write_text(tmp_path("t.tsv"), "title\tfilepath\r\n"
                                "a, b \"q\"\timg/a.jpg\r\n"
                                "\"quoted\ttab\"\timg/b.jpg\r\n");
  got_list L = collect(tmp_path("t.tsv"), NULL);
  assert_int_equal(L.n, 2);
  expect(&L.v[0], "img/a.jpg", at("t.tsv", 2), "a, b \"q\"", NULL, AMPC_FAULT_NONE, "", "AAAA");
  expect(&L.v[1], "img/b.jpg", at("t.tsv", 3), "quoted\ttab", NULL, AMPC_FAULT_NONE, "", "BB");
  got_free(&L);
  /* a forced kind reads a name without the extension (a comma-separated CSV) */
  write_text(tmp_path("listing.txt"), "filepath,title\nimg/c.jpg,forced\n");
  const ampc_source_options o = {.force_kind = true, .kind = AMPC_SOURCE_CSV};
  L = collect(tmp_path("listing.txt"), &o);
  assert_int_equal(L.n, 1);
  expect(&L.v[0], "img/c.jpg", at("listing.txt", 2), "forced", NULL, AMPC_FAULT_NONE, "", "C");
  got_free(&L);
}

/* ---- JSONL ---------------------------------------------------------------- */

static void test_jsonl(void **state) {
  (void)state;
  make_images();
  write_text(tmp_path("d.jsonl"),
             "{\"image\": \"img/a.jpg\", \"caption\": \"cap a\"}\n"              /* 1 */
             "\n"                                                                /* 2 */
             "{\"image\": \"img/b.jpg\", \"text\": \"text b\"}\n"                /* 3 */
             "{not json\n"                                                       /* 4 */
             "{\"image\": \"img/c.jpg\"}\n"                                      /* 5 */
             "[1, 2]\n"                                                          /* 6 */
             "{\"image\": \"img/d.jpg\", \"caption\": \"x\"} tail\n"             /* 7 */
             "{\"image\": 5, \"caption\": \"x\"}\n"                              /* 8 */
             "{\"caption\": \"x\"}\n"                                            /* 9 */
             "{\"image\": \"img/c.jpg\", \"caption\": 7}\n"                      /* 10 */
             "{\"image\": \"img/none.jpg\", \"caption\": \"\\u00e9t\\u00e9\"}\n" /* 11 */
             "  {\"image\": \"img/c.jpg\", \"caption\": \"last\"}  ");           /* 12 */
  const char *f = "d.jsonl";
  got_list L = collect(tmp_path(f), NULL);
  assert_int_equal(L.n, 11);
  expect(&L.v[0], "img/a.jpg", at(f, 1), "cap a", NULL, AMPC_FAULT_NONE, "", "AAAA");
  expect(&L.v[1], "img/b.jpg", at(f, 3), "text b", NULL, AMPC_FAULT_NONE, "", "BB");
  expect(&L.v[2], at(f, 4), at(f, 4), "", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 4, "not one JSON object"), NULL);
  expect(&L.v[3], "img/c.jpg", at(f, 5), "", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 5, "no key \"caption\" or \"text\""), NULL);
  expect(&L.v[4], at(f, 6), at(f, 6), "", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 6, "not one JSON object"), NULL);
  expect(&L.v[5], at(f, 7), at(f, 7), "", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 7, "not one JSON object"), NULL);
  expect(&L.v[6], at(f, 8), at(f, 8), "x", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 8, "\"image\" is not a string"), NULL);
  expect(&L.v[7], at(f, 9), at(f, 9), "x", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 9, "no key \"image\""), NULL);
  expect(&L.v[8], "img/c.jpg", at(f, 10), "", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 10, "\"caption\" is not a string"), NULL);
  expect(&L.v[9], "img/none.jpg", at(f, 11), "\xc3\xa9t\xc3\xa9", NULL, AMPC_FAULT_MISSING_FILE,
         msg_at(f, 11, "img/none.jpg: no such file"), NULL);
  expect(&L.v[10], "img/c.jpg", at(f, 12), "last", NULL, AMPC_FAULT_NONE, "", "C");
  got_free(&L);
}

static void test_jsonl_labels(void **state) {
  (void)state;
  make_images();
  write_text(tmp_path("l.jsonl"), "{\"img\": \"img/a.jpg\", \"t\": \"a\", \"y\": 3}\n"
                                  "{\"img\": \"img/b.jpg\", \"t\": \"b\", \"y\": \"bird\"}\n"
                                  "{\"img\": \"img/c.jpg\", \"t\": \"c\", \"y\": 2.5}\n"
                                  "{\"img\": \"img/c.jpg\", \"t\": \"c\"}\n"
                                  "{\"img\": \"img/c.jpg\", \"t\": \"c\", \"y\": [1]}\n"
                                  "{\"img\": \"img/c.jpg\", \"text\": \"c\", \"y\": 1}\n"
                                  "{\"img\": \"img/c.jpg\", \"t\": \"c\", \"y\": 1e20}\n");
  const ampc_source_options o = {.image_key = "img", .caption_key = "t", .label_key = "y"};
  const char *f = "l.jsonl";
  got_list L = collect(tmp_path(f), &o);
  assert_int_equal(L.n, 7);
  expect(&L.v[0], "img/a.jpg", at(f, 1), "a", "3", AMPC_FAULT_NONE, "", "AAAA");
  expect(&L.v[1], "img/b.jpg", at(f, 2), "b", "bird", AMPC_FAULT_NONE, "", "BB");
  expect(&L.v[2], "img/c.jpg", at(f, 3), "c", "2.5", AMPC_FAULT_NONE, "", "C");
  expect(&L.v[3], "img/c.jpg", at(f, 4), "c", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 4, "no label \"y\""), NULL);
  expect(&L.v[4], "img/c.jpg", at(f, 5), "c", NULL, AMPC_FAULT_BAD_ROW,
         msg_at(f, 5, "\"y\" is not a string or a number"), NULL);
  /* a caption key given: no fallback to "text" */
  expect(&L.v[5], "img/c.jpg", at(f, 6), "", "1", AMPC_FAULT_BAD_ROW, msg_at(f, 6, "no key \"t\""),
         NULL);
  expect(&L.v[6], "img/c.jpg", at(f, 7), "c", "1e+20", AMPC_FAULT_NONE, "", "C");
  got_free(&L);
}

/* ---- image folders ---------------------------------------------------------- */

static void test_imagefolder(void **state) {
  (void)state;
  make_dir(tmp_path("f1"));
  make_dir(tmp_path("f1/train"));
  write_text(tmp_path("f1/train/x.png"), "PNGX");
  write_text(tmp_path("f1/metadata.jsonl"), "{\"file_name\": \"train/x.png\", \"text\": \"t x\"}\n"
                                            "{\"file_name\": \"y.png\", \"caption\": \"t y\"}\n");
  write_text(tmp_path("f1/metadata.csv"), "file_name,caption\nnot/used.png,no\n");
  got_list L = collect(tmp_path("f1"), NULL);
  assert_int_equal(L.n, 2);
  expect(&L.v[0], "train/x.png", at("f1/metadata.jsonl", 1), "t x", NULL, AMPC_FAULT_NONE, "",
         "PNGX");
  expect(&L.v[1], "y.png", at("f1/metadata.jsonl", 2), "t y", NULL, AMPC_FAULT_MISSING_FILE,
         msg_at("f1/metadata.jsonl", 2, "y.png: no such file"), NULL);
  got_free(&L);
  ampc_source *s = NULL;
  assert_int_equal(ampc_source_open(&s, tmp_path("f1"), NULL), AMPC_OK);
  assert_int_equal(ampc_source_get_kind(s), AMPC_SOURCE_IMAGEFOLDER);
  ampc_source_close(s);

  make_dir(tmp_path("f2"));
  write_text(tmp_path("f2/x.webp"), "WEBP");
  write_text(tmp_path("f2/metadata.csv"), "file_name,text,other\nx.webp,hello,1\n");
  char *spec = cat3(tmp_path("f2"), "/", ""); /* a trailing slash is fine */
  L = collect(spec, NULL);
  free(spec);
  assert_int_equal(L.n, 1);
  expect(&L.v[0], "x.webp", at("f2/metadata.csv", 2), "hello", NULL, AMPC_FAULT_NONE, "", "WEBP");
  got_free(&L);

  make_dir(tmp_path("f3"));
  assert_int_equal(ampc_source_open(&s, tmp_path("f3"), NULL), AMPC_ERR_INVALID_ARG);
  assert_null(s);
}

/* ---- WebDataset --------------------------------------------------------------- */

typedef struct member {
  const char *name;
  const char *data; /* NULL: a directory */
  size_t len;       /* 0: strlen(data) */
} member;

static void write_tar(const char *path, const member *m, int n) {
  struct archive *a = archive_write_new();
  assert_non_null(a);
  assert_int_equal(archive_write_set_format_ustar(a), ARCHIVE_OK);
  assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
  for (int i = 0; i < n; i++) {
    struct archive_entry *e = archive_entry_new();
    const size_t len = m[i].data ? (m[i].len ? m[i].len : strlen(m[i].data)) : 0;
    archive_entry_set_pathname(e, m[i].name);
    archive_entry_set_filetype(e, m[i].data ? AE_IFREG : AE_IFDIR);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)len);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    if (len)
      assert_int_equal(archive_write_data(a, m[i].data, len), (la_ssize_t)len);
    archive_entry_free(e);
  }
  assert_int_equal(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
}

static const char *shard_where(const char *shard, const char *key) {
  static char buf[8][600];
  static int k;
  k = (k + 1) & 7;
  snprintf(buf[k], sizeof buf[k], "%s:%s", tmp_path(shard), key);
  return buf[k];
}

static const char *shard_msg(const char *shard, const char *key, const char *tail) {
  static char buf[8][800];
  static int k;
  k = (k + 1) & 7;
  snprintf(buf[k], sizeof buf[k], "%s:%s: %s", tmp_path(shard), key, tail);
  return buf[k];
}

static void make_shards(void) {
  const member s0[] = {
      {"._000000.jpg", "apple double", 0}, /* hidden: skipped */
      {"000000.jpg", "J0", 0},
      {"000000.txt", "a photo\n", 0},
      {"000000.cls", "3\n", 0},
      {"sub", NULL, 0}, /* a directory: skipped */
      {"sub/000001.png", "P1P1", 0},
      {"sub/000001.txt", "png caption", 0},
      {"sub/000001.cls", " 4 ", 0},
      {"000002.webp", "W2", 0},
      {"000002.cls", "5", 0},
      {"000002.txt", "webp caption\r\n", 0},
      {"000002.json", "{}", 0}, /* other members: ignored */
      {"000003.jpg", "J3", 0},
      {"000003.cls", "6", 0}, /* no .txt */
      {"000004.txt", "no image", 0},
      {"000004.cls", "7", 0},
  };
  write_tar(tmp_path("ds-000.tar"), s0, (int)(sizeof s0 / sizeof s0[0]));
  const member s1[] = {
      {"000005.JPEG", "J\0\x05", 3},   {"000005.txt", "upper case", 0}, {"000005.cls", "8", 0},
      {"000006.jpg", "J6", 0},         {"000006.txt", "no label", 0},   {"000007.jpg", "", 0},
      {"000007.txt", "zero image", 0}, {"000007.cls", "9", 0},          {"000008.jpg", "J8", 0},
      {"000008.txt", "\xff\xfe", 0},   {"000008.cls", "1", 0},          {"000009.jpg", "J9", 0},
      {"000009.txt", " \n", 0},        {"000009.cls", "2", 0},
  };
  write_tar(tmp_path("ds-001.tar"), s1, (int)(sizeof s1 / sizeof s1[0]));
}

static void test_webdataset(void **state) {
  (void)state;
  make_shards();
  char *spec = cat3(g_dir, "/ds-{000..001}.tar", "");
  const ampc_source_options o = {.label_key = "cls"};
  got_list L = collect(spec, &o);
  const char *a = "ds-000.tar", *b = "ds-001.tar";
  assert_int_equal(L.n, 10);
  expect(&L.v[0], "ds-000.tar/000000", shard_where(a, "000000"), "a photo", "3", AMPC_FAULT_NONE,
         "", "J0");
  expect(&L.v[1], "ds-000.tar/sub/000001", shard_where(a, "sub/000001"), "png caption", "4",
         AMPC_FAULT_NONE, "", "P1P1");
  expect(&L.v[2], "ds-000.tar/000002", shard_where(a, "000002"), "webp caption", "5",
         AMPC_FAULT_NONE, "", "W2");
  expect(&L.v[3], "ds-000.tar/000003", shard_where(a, "000003"), "", "6", AMPC_FAULT_NO_CAPTION,
         shard_msg(a, "000003", "no .txt member"), NULL);
  expect(&L.v[4], "ds-000.tar/000004", shard_where(a, "000004"), "no image", "7",
         AMPC_FAULT_NO_IMAGE,
         shard_msg(a, "000004", "no image member (.jpg, .jpeg, .png or .webp)"), NULL);
  assert_int_equal(L.v[5].img_n, 3);
  assert_memory_equal(L.v[5].img, "J\0\x05", 3);
  assert_string_equal(L.v[5].key, "ds-001.tar/000005");
  assert_string_equal(L.v[5].caption, "upper case");
  assert_string_equal(L.v[5].label, "8");
  expect(&L.v[6], "ds-001.tar/000006", shard_where(b, "000006"), "no label", NULL,
         AMPC_FAULT_BAD_ROW, shard_msg(b, "000006", "no .cls member"), NULL);
  expect(&L.v[7], "ds-001.tar/000007", shard_where(b, "000007"), "zero image", "9",
         AMPC_FAULT_EMPTY_FILE, shard_msg(b, "000007", "the .jpg member is empty"), NULL);
  expect(&L.v[8], "ds-001.tar/000008", shard_where(b, "000008"), "\xff\xfe", "1",
         AMPC_FAULT_CAPTION_UTF8, shard_msg(b, "000008", "caption is not valid UTF-8"), NULL);
  expect(&L.v[9], "ds-001.tar/000009", shard_where(b, "000009"), " ", "2", AMPC_FAULT_CAPTION_EMPTY,
         shard_msg(b, "000009", "caption is empty"), NULL);
  got_free(&L);

  /* headers_only, no label key: the same groups, no bytes; labels NULL */
  const ampc_source_options h = {.headers_only = true};
  L = collect(spec, &h);
  assert_int_equal(L.n, 10);
  expect(&L.v[0], "ds-000.tar/000000", shard_where(a, "000000"), "a photo", NULL, AMPC_FAULT_NONE,
         "", NULL);
  expect(&L.v[6], "ds-001.tar/000006", shard_where(b, "000006"), "no label", NULL, AMPC_FAULT_NONE,
         "", NULL);
  expect(&L.v[7], "ds-001.tar/000007", shard_where(b, "000007"), "zero image", NULL,
         AMPC_FAULT_EMPTY_FILE, shard_msg(b, "000007", "the .jpg member is empty"), NULL);
  got_free(&L);
  ampc_source *s = NULL;
  assert_int_equal(ampc_source_open(&s, spec, NULL), AMPC_OK);
  assert_int_equal(ampc_source_get_kind(s), AMPC_SOURCE_WEBDATASET);
  ampc_source_close(s);
  free(spec);

  /* a list with a missing shard: an item, not an error; alone, an error */
  char *list = cat3(tmp_path("nope.tar"), ",", tmp_path("ds-001.tar"));
  L = collect(list, &h);
  assert_int_equal(L.n, 6);
  assert_string_equal(L.v[0].key, "nope.tar");
  assert_string_equal(L.v[0].where, tmp_path("nope.tar"));
  assert_int_equal(L.v[0].fault, AMPC_FAULT_MISSING_FILE);
  char *pre = cat3(tmp_path("nope.tar"), ": cannot open (", "");
  assert_memory_equal(L.v[0].msg, pre, strlen(pre));
  free(pre);
  assert_string_equal(L.v[1].key, "ds-001.tar/000005");
  got_free(&L);
  free(list);
  assert_int_equal(ampc_source_open(&s, tmp_path("nope.tar"), NULL), AMPC_ERR_IO);
  assert_null(s);
  char *bad = cat3(g_dir, "/ds-{000..}.tar", "");
  assert_int_equal(ampc_source_open(&s, bad, NULL), AMPC_ERR_INVALID_ARG);
  free(bad);
  bad = cat3(tmp_path("ds-000.tar"), ",,", tmp_path("ds-001.tar"));
  assert_int_equal(ampc_source_open(&s, bad, NULL), AMPC_ERR_INVALID_ARG);
  free(bad);
}

static void test_truncated_tar(void **state) {
  (void)state;
  static char big0[1000], big1[3000];
  memset(big0, 'x', sizeof big0);
  memset(big1, 'y', sizeof big1);
  const member t0[] = {
      {"k0.jpg", big0, sizeof big0},
      {"k0.txt", "first", 0},
      {"k1.jpg", big1, sizeof big1},
      {"k1.txt", "lost", 0},
  };
  write_tar(tmp_path("tr-000.tar"), t0, 4);
  /* ustar: k0.jpg header 0, data 512..1512 (to 1536); k0.txt header 1536,
   * data 2048; k1.jpg header 2560, data 3072..6072: cut inside it */
  FILE *f = fopen(tmp_path("tr-000.tar"), "rb");
  assert_non_null(f);
  static char buf[4000];
  assert_int_equal(fread(buf, 1, sizeof buf, f), sizeof buf);
  fclose(f);
  assert_memory_equal(buf + 3072, "yyyy", 4);
  write_all(tmp_path("tr-000.tar"), buf, sizeof buf);
  const member t1[] = {{"k2.png", "P2", 0}, {"k2.txt", "next shard", 0}};
  write_tar(tmp_path("tr-001.tar"), t1, 2);

  char *spec = cat3(g_dir, "/tr-{000..001}.tar", "");
  got_list L = collect(spec, NULL);
  assert_int_equal(L.n, 3);
  assert_string_equal(L.v[0].key, "tr-000.tar/k0");
  assert_string_equal(L.v[0].caption, "first");
  assert_int_equal(L.v[0].fault, AMPC_FAULT_NONE);
  assert_int_equal(L.v[0].img_n, sizeof big0);
  assert_memory_equal(L.v[0].img, big0, sizeof big0);
  assert_string_equal(L.v[1].key, "tr-000.tar");
  assert_string_equal(L.v[1].where, shard_where("tr-000.tar", "k1"));
  assert_int_equal(L.v[1].fault, AMPC_FAULT_TRUNCATED_TAR);
  assert_null(L.v[1].img);
  const char *pre = shard_msg("tr-000.tar", "k1", "truncated or corrupt tar (");
  assert_memory_equal(L.v[1].msg, pre, strlen(pre));
  assert_true(strlen(L.v[1].msg) > strlen(pre) + 1);
  assert_int_equal(L.v[1].msg[strlen(L.v[1].msg) - 1], ')');
  expect(&L.v[2], "tr-001.tar/k2", shard_where("tr-001.tar", "k2"), "next shard", NULL,
         AMPC_FAULT_NONE, "", "P2");
  got_free(&L);
  free(spec);

  /* garbage that is no tar at all: one TRUNCATED_TAR item naming the shard */
  write_text(tmp_path("junk.tar"), "this is not a tar archive, not even close to one .........");
  L = collect(tmp_path("junk.tar"), NULL);
  assert_int_equal(L.n, 1);
  assert_string_equal(L.v[0].key, "junk.tar");
  assert_string_equal(L.v[0].where, tmp_path("junk.tar"));
  assert_int_equal(L.v[0].fault, AMPC_FAULT_TRUNCATED_TAR);
  char *want =
      cat3(tmp_path("junk.tar"), ": truncated or corrupt tar (Unrecognized archive format)", "");
  assert_string_equal(L.v[0].msg, want);
  free(want);
  got_free(&L);
  /* an empty file is an empty archive */
  write_all(tmp_path("empty.tar"), "", 0);
  L = collect(tmp_path("empty.tar"), NULL);
  assert_int_equal(L.n, 0);
  got_free(&L);
}

/* ---- brace patterns, UTF-8, names --------------------------------------------- */

static void test_brace(void **state) {
  (void)state;
  char **v = NULL;
  int64_t n = 0;
  assert_int_equal(ampc_brace_expand("a-{000..012}.tar", &v, &n), AMPC_OK);
  assert_int_equal(n, 13);
  assert_string_equal(v[0], "a-000.tar");
  assert_string_equal(v[9], "a-009.tar");
  assert_string_equal(v[12], "a-012.tar");
  ampc_strings_free(v, n);
  assert_int_equal(ampc_brace_expand("s{8..10}", &v, &n), AMPC_OK);
  assert_int_equal(n, 3);
  assert_string_equal(v[0], "s8");
  assert_string_equal(v[1], "s9");
  assert_string_equal(v[2], "s10");
  ampc_strings_free(v, n);
  assert_int_equal(ampc_brace_expand("{00..100}", &v, &n), AMPC_OK);
  assert_int_equal(n, 101);
  assert_string_equal(v[0], "00");
  assert_string_equal(v[99], "99");
  assert_string_equal(v[100], "100");
  ampc_strings_free(v, n);
  assert_int_equal(ampc_brace_expand("x{7..7}.tar", &v, &n), AMPC_OK);
  assert_int_equal(n, 1);
  assert_string_equal(v[0], "x7.tar");
  ampc_strings_free(v, n);
  assert_int_equal(ampc_brace_expand("plain.tar", &v, &n), AMPC_OK);
  assert_int_equal(n, 1);
  assert_string_equal(v[0], "plain.tar");
  ampc_strings_free(v, n);
  static const char *const bad[] = {"a{1..}",   "a{..2}",       "a{1..2",       "a1..2}",
                                    "a{2..1}",  "a{x..y}",      "{0..1}{0..1}", "a{1,2}",
                                    "a{1...2}", "a{-1..2}",     "a{}",          "a{1..2}}",
                                    "{1.2}",    "{0..1000000}", "a{1 ..2}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = (char **)1, n = 7;
    assert_int_equal(ampc_brace_expand(bad[i], &v, &n), AMPC_ERR_INVALID_ARG);
    assert_null(v);
    assert_int_equal(n, 0);
  }
  assert_int_equal(ampc_brace_expand("{0..999999}", &v, &n), AMPC_OK); /* the most */
  assert_int_equal(n, 1000000);
  assert_string_equal(v[999999], "999999");
  ampc_strings_free(v, n);
}

static void test_utf8_names(void **state) {
  (void)state;
  assert_true(ampc_utf8_valid("", 0));
  assert_true(ampc_utf8_valid("plain ascii", 11));
  assert_true(ampc_utf8_valid("\xc3\xa9", 2));          /* U+00E9 */
  assert_true(ampc_utf8_valid("\xe2\x82\xac", 3));      /* U+20AC */
  assert_true(ampc_utf8_valid("\xf0\x9f\x98\x80", 4));  /* U+1F600 */
  assert_true(ampc_utf8_valid("\xf4\x8f\xbf\xbf", 4));  /* U+10FFFF */
  assert_true(ampc_utf8_valid("\xed\x9f\xbf", 3));      /* U+D7FF */
  assert_true(ampc_utf8_valid("a\0b", 3));              /* NUL is valid UTF-8 */
  assert_false(ampc_utf8_valid("\xc0\xaf", 2));         /* overlong '/' */
  assert_false(ampc_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
  assert_false(ampc_utf8_valid("\xf0\x80\x80\xaf", 4)); /* overlong */
  assert_false(ampc_utf8_valid("\xed\xa0\x80", 3));     /* U+D800, a surrogate */
  assert_false(ampc_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
  assert_false(ampc_utf8_valid("\xf5\x80\x80\x80", 4)); /* above U+10FFFF */
  assert_false(ampc_utf8_valid("\xe2\x82", 2));         /* cut short */
  assert_false(ampc_utf8_valid("\x80", 1));             /* a lone continuation */
  assert_false(ampc_utf8_valid("\xc3\x28", 2));         /* a bad continuation */
  assert_false(ampc_utf8_valid("\xe2\x82\xac\xff", 4)); /* 0xFF never appears */
  assert_true(ampc_utf8_valid("\xe2\x82\xac\xff", 3));  /* the length is respected */
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_NONE), "none");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_MISSING_FILE), "missing_file");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_EMPTY_FILE), "empty_file");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_FILE_TOO_BIG), "file_too_big");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_BAD_ROW), "bad_row");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_CAPTION_UTF8), "caption_utf8");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_CAPTION_EMPTY), "caption_empty");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_NO_CAPTION), "no_caption");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_NO_IMAGE), "no_image");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_TRUNCATED_TAR), "truncated_tar");
  assert_string_equal(ampc_sample_fault_name(AMPC_FAULT_COUNT), "unknown");
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/ampc-test-source-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "cannot create %s\n", g_dir);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_csv),
      cmocka_unit_test(test_csv_headers_only),
      cmocka_unit_test(test_csv_custom),
      cmocka_unit_test(test_csv_errors),
      cmocka_unit_test(test_csv_long_field),
      cmocka_unit_test(test_tsv),
      cmocka_unit_test(test_jsonl),
      cmocka_unit_test(test_jsonl_labels),
      cmocka_unit_test(test_imagefolder),
      cmocka_unit_test(test_webdataset),
      cmocka_unit_test(test_truncated_tar),
      cmocka_unit_test(test_brace),
      cmocka_unit_test(test_utf8_names),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (!getenv("AMPC_TEST_KEEP")) /* set it to keep the files for a look */
    nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return failed ? 1 : 0;
}
