/*
 * src/data/ingest/source_csv.c: the CSV/TSV reader (an OpenCLIP --csv-img-key
 * / --csv-caption-key listing, or an image folder's metadata.csv).
 *
 * The file is parsed by libcsv (RFC 4180 quoting: quoted delimiters, line
 * ends and doubled quotes; non-strict, so a stray quote inside an unquoted
 * field is kept as a character). It is read in 64 KiB chunks and fed to the
 * parser one physical line at a time, so that the line a record starts on is
 * known: a record starts on the line being fed when the parser stood between
 * records before it (libcsv's ROW_NOT_BEGUN state, 0; blank lines make no
 * record). Completed records wait in a small queue until next() hands them
 * out; only the image, caption and label fields are kept.
 */
#define _POSIX_C_SOURCE 200809L /* strndup */

#include "data/ingest/source_internal.h"

#include <csv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CSV_CHUNK (64 * 1024)
#define CSV_ROW_NOT_BEGUN 0 /* libcsv's parser state between records */
#define CSV_FIELD_BEGUN 2   /* ... inside a field (with p.quoted: a quoted one) */

enum { F_IMAGE = 0, F_CAPTION = 1, F_LABEL = 2, F_N = 3 };

typedef struct csv_rec {
  int64_t line, nfields;
  src_buf f[F_N];
  bool has[F_N];
} csv_rec;

struct src_csv {
  FILE *f;
  struct csv_parser p;
  bool parser_live;
  char *chunk;
  size_t chunk_n, chunk_pos;
  bool eof, finished, first;
  bool too_long;    /* a field passed SRC_CSV_MAX_FIELD: one BAD_ROW, then the end */
  bool unclosed;    /* the file ended inside a quoted field: one BAD_ROW */
  int64_t line;     /* the physical line of the next byte fed */
  int64_t rec_line; /* the line the record being parsed started on */
  bool have_header;
  char **names; /* the header's fields, until it is complete */
  int64_t n_names, cap_names;
  int64_t n_cols; /* fields in the header */
  int64_t col[F_N];
  int64_t field; /* index of the next field of the record being parsed */
  csv_rec cur;   /* the record being parsed */
  csv_rec *q;    /* complete records, q[qpos..qn) not handed out yet */
  int64_t qn, qpos, qcap;
  ampc_status st; /* the first failure inside a callback */
  ampc_source *s;
};

static void rec_free(csv_rec *r) {
  for (int k = 0; k < F_N; k++)
    src_buf_free(&r->f[k]);
}

static void on_field(void *data, size_t len, void *ctx) {
  src_csv *c = ctx;
  if (c->st != AMPC_OK)
    return;
  const char *d = data ? data : "";
  if (!c->have_header) {
    if (c->n_names == c->cap_names) {
      const int64_t cap = c->cap_names ? 2 * c->cap_names : 16;
      char **v = realloc(c->names, (size_t)cap * sizeof *v);
      if (!v) {
        c->st = ampc_fail(AMPC_ERR_NOMEM, "out of memory");
        return;
      }
      c->names = v, c->cap_names = cap;
    }
    if (!(c->names[c->n_names] = strndup(d, len))) {
      c->st = ampc_fail(AMPC_ERR_NOMEM, "out of memory");
      return;
    }
    c->n_names++;
    return;
  }
  if (c->field == 0)
    for (int k = 0; k < F_N; k++)
      c->cur.has[k] = false;
  for (int k = 0; k < F_N; k++)
    if (c->col[k] == c->field) {
      if ((c->st = src_buf_set(&c->cur.f[k], d, len)) != AMPC_OK)
        return;
      c->cur.has[k] = true;
    }
  c->field++;
}

static int64_t find_col(const src_csv *c, const char *name) {
  for (int64_t i = 0; name && i < c->n_names; i++)
    if (strcmp(c->names[i], name) == 0)
      return i;
  return -1;
}

/* "no column "x" (columns: a, b)" as the failure of the header */
static void missing_col(src_csv *c, const char *name, const char *alt) {
  src_buf cols = {0};
  ampc_status st = src_buf_set(&cols, "", 0);
  for (int64_t i = 0; st == AMPC_OK && i < c->n_names; i++) {
    if (cols.n > 1000) {
      st = src_buf_add(&cols, ", ...", 5);
      break;
    }
    if (i)
      st = src_buf_add(&cols, ", ", 2);
    if (st == AMPC_OK)
      st = src_buf_add(&cols, c->names[i], strlen(c->names[i]));
  }
  if (st == AMPC_OK)
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: no column \"%s\"%s%s%s (columns: %s)", c->s->list_path,
                   name, alt ? " or \"" : "", alt ? alt : "", alt ? "\"" : "", cols.p);
  src_buf_free(&cols);
  c->st = st;
}

static void header_done(src_csv *c) {
  const ampc_source *s = c->s;
  c->n_cols = c->n_names;
  c->col[F_IMAGE] = find_col(c, s->image_key);
  c->col[F_CAPTION] = find_col(c, s->caption_key);
  if (c->col[F_CAPTION] < 0)
    c->col[F_CAPTION] = find_col(c, s->caption_alt);
  c->col[F_LABEL] = find_col(c, s->label_key);
  if (c->col[F_IMAGE] < 0)
    missing_col(c, s->image_key, NULL);
  else if (c->col[F_CAPTION] < 0)
    missing_col(c, s->caption_key, s->caption_alt);
  else if (s->label_key && c->col[F_LABEL] < 0)
    missing_col(c, s->label_key, NULL);
  for (int64_t i = 0; i < c->n_names; i++)
    free(c->names[i]);
  free(c->names);
  c->names = NULL, c->n_names = c->cap_names = 0;
  c->have_header = true;
}

static void on_row(int term, void *ctx) {
  (void)term;
  src_csv *c = ctx;
  if (c->st != AMPC_OK)
    return;
  if (!c->have_header) {
    header_done(c);
    return;
  }
  if (c->field == 0)
    for (int k = 0; k < F_N; k++)
      c->cur.has[k] = false;
  if (c->qn == c->qcap) {
    const int64_t cap = c->qcap ? 2 * c->qcap : 8;
    csv_rec *q = realloc(c->q, (size_t)cap * sizeof *q);
    if (!q) {
      c->st = ampc_fail(AMPC_ERR_NOMEM, "out of memory");
      return;
    }
    memset(q + c->qcap, 0, (size_t)(cap - c->qcap) * sizeof *q);
    c->q = q, c->qcap = cap;
  }
  c->cur.line = c->rec_line, c->cur.nfields = c->field;
  const csv_rec t = c->q[c->qn]; /* swap: no copying of the fields */
  c->q[c->qn++] = c->cur;
  c->cur = t;
  c->field = 0;
}

/* Feed the parser one more line (or part of one), read a chunk, or finish. */
static ampc_status feed_some(src_csv *c) {
  if (c->chunk_pos == c->chunk_n) {
    if (c->eof) {
      c->rec_line = c->p.pstate == CSV_ROW_NOT_BEGUN ? c->line : c->rec_line;
      if (c->p.pstate == CSV_FIELD_BEGUN && c->p.quoted) {
        /* a quote never closed: the rest of the file is one field; the row
         * is dropped and reported, not packed with that caption */
        c->unclosed = true;
        c->finished = true;
        return c->st;
      }
      csv_fini(&c->p, on_field, on_row, c);
      c->finished = true;
      return c->st;
    }
    c->chunk_n = fread(c->chunk, 1, CSV_CHUNK, c->f);
    c->chunk_pos = 0;
    if (c->chunk_n < CSV_CHUNK) {
      if (ferror(c->f))
        return ampc_fail(AMPC_ERR_IO, "%s: read error", c->s->list_path);
      c->eof = true;
    }
    if (c->first && c->chunk_n >= 3 && memcmp(c->chunk, "\xEF\xBB\xBF", 3) == 0)
      c->chunk_pos = 3; /* a UTF-8 byte order mark */
    c->first = false;
    return AMPC_OK;
  }
  const char *seg = c->chunk + c->chunk_pos;
  const char *nl = memchr(seg, '\n', c->chunk_n - c->chunk_pos);
  const size_t len = nl ? (size_t)(nl - seg) + 1 : c->chunk_n - c->chunk_pos;
  if (c->p.pstate == CSV_ROW_NOT_BEGUN)
    c->rec_line = c->line;
  const size_t used = csv_parse(&c->p, seg, len, on_field, on_row, c);
  AMPC_TRY(c->st);
  if (used != len)
    return ampc_fail(csv_error(&c->p) == CSV_ENOMEM ? AMPC_ERR_NOMEM : AMPC_ERR_FORMAT, "%s: %s",
                     c->s->list_path, csv_strerror(csv_error(&c->p)));
  c->chunk_pos += len;
  if (nl)
    c->line++;
  if ((long long)c->p.entry_pos > SRC_CSV_MAX_FIELD) {
    c->too_long = true;
    c->finished = true;
  }
  return AMPC_OK;
}

ampc_status src_csv_open(ampc_source *s, const char *path, char delim) {
  src_csv *c = calloc(1, sizeof *c);
  if (!c)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  s->csv = c;
  c->s = s;
  c->line = 1, c->first = true;
  if (!(c->chunk = malloc(CSV_CHUNK)))
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  if (csv_init(&c->p, 0) != 0)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  c->parser_live = true;
  csv_set_delim(&c->p, (unsigned char)delim);
  /* the field buffer grows by 1 MiB, not libcsv's 128 bytes: a long field
   * (an unclosed quote runs to the 16 MiB limit) costs 16 reallocations,
   * not 130,000 */
  csv_set_blk_size(&c->p, 1u << 20);
  if (!(c->f = fopen(path, "rb")))
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open", path);
  while (!c->have_header && !c->finished)
    AMPC_TRY(feed_some(c));
  if (c->too_long)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: the header row is longer than %lld bytes", path,
                     SRC_CSV_MAX_FIELD);
  if (!c->have_header)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: empty file (no header row)", path);
  return AMPC_OK;
}

ampc_status src_csv_next(ampc_source *s, ampc_source_item *it, bool *done) {
  src_csv *c = s->csv;
  while (c->qpos == c->qn && !c->finished) {
    c->qpos = c->qn = 0;
    AMPC_TRY(feed_some(c));
  }
  if (c->qpos == c->qn) {
    if (c->unclosed) {
      c->unclosed = false;
      const src_row r = {.line = c->rec_line,
                         .bad = "a quote opened in this row is never closed: the rest of the file "
                                "is one field and is not read"};
      return src_emit_row(c->s, &r, it);
    }
    if (!c->too_long) {
      *done = true;
      return AMPC_OK;
    }
    c->too_long = false;
    const src_row r = {.line = c->rec_line,
                       .bad = "a field longer than 16 MiB (an unclosed quote?): the rest of the "
                              "file is not read"};
    return src_emit_row(s, &r, it);
  }
  const csv_rec *q = &c->q[c->qpos++];
  char why[96] = "";
  if (q->nfields < c->n_cols)
    snprintf(why, sizeof why, "%lld field%s where the header has %lld", (long long)q->nfields,
             q->nfields == 1 ? "" : "s", (long long)c->n_cols);
  src_row r = {.line = q->line, .bad = why[0] ? why : NULL};
  if (q->has[F_IMAGE])
    r.image = q->f[F_IMAGE].p, r.image_len = q->f[F_IMAGE].n;
  if (q->has[F_CAPTION])
    r.caption = q->f[F_CAPTION].p, r.caption_len = q->f[F_CAPTION].n;
  if (q->has[F_LABEL])
    r.label = q->f[F_LABEL].p, r.label_len = q->f[F_LABEL].n;
  return src_emit_row(s, &r, it);
}

void src_csv_close(src_csv *c) {
  if (!c)
    return;
  if (c->f)
    fclose(c->f);
  if (c->parser_live)
    csv_free(&c->p);
  free(c->chunk);
  for (int64_t i = 0; i < c->n_names; i++)
    free(c->names[i]);
  free(c->names);
  rec_free(&c->cur);
  for (int64_t i = 0; i < c->qcap; i++)
    rec_free(&c->q[i]);
  free(c->q);
  free(c);
}
