/*
 * src/data/ingest/source_internal.h: what the source readers share
 * (source.c: opening, the item's strings, image files and caption checks;
 * source_csv.c, source_jsonl.c, source_tar.c: one reader each).
 * Not public API; see source.h for the behaviour.
 */
#ifndef AMPC_DATA_INGEST_SOURCE_INTERNAL_H
#define AMPC_DATA_INGEST_SOURCE_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#include "data/ingest/source.h"

/* The longest CSV field (bytes) before a row is given up as unreadable (an
 * unclosed quote would otherwise pull the rest of the file into one field). */
#define SRC_CSV_MAX_FIELD (16ll * 1024 * 1024)
/* The longest WebDataset caption (.txt) and label member (bytes). */
#define SRC_TAR_MAX_TEXT (1024ll * 1024)

/* A growable byte buffer, kept NUL-terminated once anything was put in it
 * (p[n] == 0); n excludes the terminator. Zero-initialised = empty. */
typedef struct src_buf {
  char *p;
  size_t n, cap;
} src_buf;

/* Room for at least `need` bytes plus a terminator. Errors: AMPC_ERR_NOMEM. */
ampc_status src_buf_reserve(src_buf *b, size_t need);
/* b = s[0..n) (s may hold NUL bytes; may be NULL when n == 0). Errors: NOMEM. */
ampc_status src_buf_set(src_buf *b, const char *s, size_t n);
/* b += s[0..n). Errors: NOMEM. */
ampc_status src_buf_add(src_buf *b, const char *s, size_t n);
/* b = printf(fmt, ...). Errors: NOMEM. */
ampc_status src_buf_printf(src_buf *b, const char *fmt, ...) AMPC_PRINTF(2, 3);
void src_buf_free(src_buf *b);

typedef struct src_csv src_csv;
typedef struct src_jsonl src_jsonl;
typedef struct src_tar src_tar;

struct ampc_source {
  ampc_source_kind kind;
  bool headers_only;
  char *label_key;   /* NULL: no labels */
  char *image_key;   /* the column / key naming the image (CSV, JSONL, folder) */
  char *caption_key; /* the caption column / key */
  char *caption_alt; /* tried when caption_key is absent (NULL: none) */
  char *list_path;   /* the CSV/JSONL file as named (for `where`) */
  char *base_dir;    /* relative image paths are under it ("" : as written) */
  /* what the last item points to */
  src_buf key, where, caption, label, msg, path;
  uint8_t *img;
  size_t img_cap;
  src_csv *csv;
  src_jsonl *jsonl;
  src_tar *tar;
};

/* One record of a listing file (CSV row or JSON line) as parsed: the fields
 * point into the reader's memory. image == NULL: no image field. */
typedef struct src_row {
  int64_t line; /* 1-based physical line the record starts on */
  const char *image;
  size_t image_len;
  const char *caption; /* NULL: none */
  size_t caption_len;
  const char *label; /* NULL: none */
  size_t label_len;
  const char *bad; /* non-NULL: the record is malformed (AMPC_FAULT_BAD_ROW), this says why */
} src_row;

/* Fill *it from a listing record: key (the image path, or `where` when there
 * is none), where ("FILE:LINE"), caption, label, then the fault (BAD_ROW,
 * caption checks, then the image file read into s->img unless headers_only).
 * Errors: AMPC_ERR_NOMEM only. */
ampc_status src_emit_row(ampc_source *s, const src_row *r, ampc_source_item *it);

/* The caption fault of c[0..n): CAPTION_UTF8 (invalid UTF-8, or a NUL byte),
 * CAPTION_EMPTY (nothing but ASCII white space), else NONE; *why names it. */
ampc_sample_fault src_check_caption(const char *c, size_t n, const char **why);

/* Set it->fault = f and it->fault_msg = "WHERE: " + printf(fmt, ...) (in s->msg).
 * Errors: NOMEM. */
ampc_status src_fault(ampc_source *s, ampc_source_item *it, ampc_sample_fault f, const char *fmt,
                      ...) AMPC_PRINTF(4, 5);

/* Make s->img hold at least n bytes. Errors: NOMEM. */
ampc_status src_img_reserve(ampc_source *s, size_t n);

/* The readers. open: the reader's state from s's keys and path (errors as in
 * ampc_source_open); next: as ampc_source_next; close: frees (NULL is fine). */
ampc_status src_csv_open(ampc_source *s, const char *path, char delim);
ampc_status src_csv_next(ampc_source *s, ampc_source_item *it, bool *done);
void src_csv_close(src_csv *c);

ampc_status src_jsonl_open(ampc_source *s, const char *path);
ampc_status src_jsonl_next(ampc_source *s, ampc_source_item *it, bool *done);
void src_jsonl_close(src_jsonl *j);

/* shards: malloc'ed names (taken over, also on failure), n >= 1. */
ampc_status src_tar_open(ampc_source *s, char **shards, int64_t n);
ampc_status src_tar_next(ampc_source *s, ampc_source_item *it, bool *done);
void src_tar_close(src_tar *t);

#endif
