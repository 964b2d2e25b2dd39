/*
 * src/data/ingest/source.c: opening a source (which reader, from the spec),
 * the parts the readers share (the item's strings, reading an image file,
 * caption checks), brace patterns and UTF-8 validation. The readers are in
 * source_csv.c, source_jsonl.c and source_tar.c.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, strndup, O_CLOEXEC */

#include "data/ingest/source_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small buffers ---------------------------------------------------- */

ampc_status src_buf_reserve(src_buf *b, size_t need) {
  if (need >= SIZE_MAX / 2)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory (a string of %zu bytes)", need);
  if (b->p && need + 1 <= b->cap)
    return AMPC_OK;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory (a string of %zu bytes)", need);
  if (!b->p)
    p[0] = 0;
  b->p = p, b->cap = cap;
  return AMPC_OK;
}

ampc_status src_buf_set(src_buf *b, const char *s, size_t n) {
  AMPC_TRY(src_buf_reserve(b, n));
  if (n)
    memcpy(b->p, s, n);
  b->p[n] = 0, b->n = n;
  return AMPC_OK;
}

ampc_status src_buf_add(src_buf *b, const char *s, size_t n) {
  AMPC_TRY(src_buf_reserve(b, b->n + n));
  if (n)
    memcpy(b->p + b->n, s, n);
  b->n += n, b->p[b->n] = 0;
  return AMPC_OK;
}

static ampc_status buf_vprintf(src_buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  const int len = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (len < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "source: bad message format");
  AMPC_TRY(src_buf_reserve(b, (size_t)len));
  vsnprintf(b->p, (size_t)len + 1, fmt, ap);
  b->n = (size_t)len;
  return AMPC_OK;
}

ampc_status src_buf_printf(src_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const ampc_status st = buf_vprintf(b, fmt, ap);
  va_end(ap);
  return st;
}

void src_buf_free(src_buf *b) {
  free(b->p);
  b->p = NULL, b->n = b->cap = 0;
}

ampc_status src_img_reserve(ampc_source *s, size_t n) {
  if (n <= s->img_cap && s->img)
    return AMPC_OK;
  uint8_t *p = realloc(s->img, n ? n : 1);
  if (!p)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory (an image of %zu bytes)", n);
  s->img = p, s->img_cap = n;
  return AMPC_OK;
}

/* ---- names, UTF-8, brace patterns ------------------------------------- */

const char *ampc_sample_fault_name(ampc_sample_fault f) {
  switch (f) {
  case AMPC_FAULT_NONE: return "none";
  case AMPC_FAULT_MISSING_FILE: return "missing_file";
  case AMPC_FAULT_EMPTY_FILE: return "empty_file";
  case AMPC_FAULT_FILE_TOO_BIG: return "file_too_big";
  case AMPC_FAULT_BAD_ROW: return "bad_row";
  case AMPC_FAULT_CAPTION_UTF8: return "caption_utf8";
  case AMPC_FAULT_CAPTION_EMPTY: return "caption_empty";
  case AMPC_FAULT_NO_CAPTION: return "no_caption";
  case AMPC_FAULT_NO_IMAGE: return "no_image";
  case AMPC_FAULT_TRUNCATED_TAR: return "truncated_tar";
  case AMPC_FAULT_COUNT: break;
  }
  return "unknown";
}

/* RFC 3629 section 4's well-formed byte sequences. */
bool ampc_utf8_valid(const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < len) {
    const unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;                      /* continuation bytes */
    unsigned lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
      k = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      k = 2;
      if (c == 0xE0)
        lo = 0xA0; /* no overlongs */
      if (c == 0xED)
        hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
      k = 3;
      if (c == 0xF0)
        lo = 0x90;
      if (c == 0xF4)
        hi = 0x8F; /* <= U+10FFFF */
    } else
      return false;
    if (len - i <= k)
      return false;
    if (s[i + 1] < lo || s[i + 1] > hi)
      return false;
    for (size_t j = 2; j <= k; j++)
      if ((s[i + j] & 0xC0) != 0x80)
        return false;
    i += k + 1;
  }
  return true;
}

void ampc_strings_free(char **v, int64_t n) {
  if (!v)
    return;
  for (int64_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

/* digits [a, b): 1 to 18 decimal digits -> *out */
static bool parse_bound(const char *a, const char *b, long long *out) {
  if (b <= a || b - a > 18)
    return false;
  long long v = 0;
  for (const char *p = a; p < b; p++) {
    if (*p < '0' || *p > '9')
      return false;
    v = v * 10 + (*p - '0');
  }
  *out = v;
  return true;
}

ampc_status ampc_brace_expand(const char *pattern, char ***out, int64_t *n) {
  if (!pattern || !out || !n)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_brace_expand: NULL argument");
  *out = NULL, *n = 0;
  const char *open = strchr(pattern, '{');
  const char *close = open ? strchr(open, '}') : strchr(pattern, '}');
  if (!open && !close) {
    char **v = malloc(sizeof *v);
    char *one = strdup(pattern);
    if (!v || !one) {
      free(v), free(one);
      return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
    }
    v[0] = one;
    *out = v, *n = 1;
    return AMPC_OK;
  }
  const char *dots = open && close ? strstr(open, "..") : NULL;
  long long lo = 0, hi = -1;
  if (!open || !close || strchr(open + 1, '{') || strchr(close + 1, '}') || !dots || dots > close ||
      !parse_bound(open + 1, dots, &lo) || !parse_bound(dots + 2, close, &hi) || lo > hi)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "bad brace pattern \"%s\": expected one {FIRST..LAST} range of decimal "
                     "numbers with FIRST <= LAST",
                     pattern);
  if (hi - lo >= 1000000)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "brace pattern \"%s\": %lld names (at most 1000000)",
                     pattern, hi - lo + 1);
  const int width = (int)(dots - open - 1);
  const int64_t count = hi - lo + 1;
  const size_t pre = (size_t)(open - pattern), post = strlen(close + 1);
  char **v = calloc((size_t)count, sizeof *v);
  if (!v)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < count; i++) {
    const size_t cap = pre + 24 + post;
    v[i] = malloc(cap);
    if (!v[i]) {
      ampc_strings_free(v, i);
      return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
    }
    snprintf(v[i], cap, "%.*s%0*lld%s", (int)pre, pattern, width, lo + i, close + 1);
  }
  *out = v, *n = count;
  return AMPC_OK;
}

/* ---- items ------------------------------------------------------------ */

ampc_sample_fault src_check_caption(const char *c, size_t n, const char **why) {
  if (n && memchr(c, 0, n)) {
    *why = "caption holds a NUL byte";
    return AMPC_FAULT_CAPTION_UTF8;
  }
  if (!ampc_utf8_valid(c, n)) {
    *why = "caption is not valid UTF-8";
    return AMPC_FAULT_CAPTION_UTF8;
  }
  for (size_t i = 0; i < n; i++)
    if (!strchr(" \t\n\v\f\r", c[i]))
      return AMPC_FAULT_NONE;
  *why = "caption is empty";
  return AMPC_FAULT_CAPTION_EMPTY;
}

ampc_status src_fault(ampc_source *s, ampc_source_item *it, ampc_sample_fault f, const char *fmt,
                      ...) {
  src_buf tail = {0};
  va_list ap;
  va_start(ap, fmt);
  ampc_status st = buf_vprintf(&tail, fmt, ap);
  va_end(ap);
  if (st == AMPC_OK)
    st = src_buf_printf(&s->msg, "%s: %s", it->where, tail.p);
  src_buf_free(&tail);
  if (st != AMPC_OK)
    return st;
  it->fault = f;
  it->fault_msg = s->msg.p;
  return AMPC_OK;
}

/* Read the image at s->path (named `shown` in messages) into s->img. */
static ampc_status read_image_file(ampc_source *s, ampc_source_item *it, const char *shown) {
  const int fd = open(s->path.p, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    return src_fault(s, it, AMPC_FAULT_MISSING_FILE, "%s: %s", shown,
                     e == ENOENT ? "no such file" : strerror(e));
  }
  struct stat sb;
  ampc_status st = AMPC_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    st = src_fault(s, it, AMPC_FAULT_MISSING_FILE, "%s: not a regular file", shown);
  else if (sb.st_size == 0)
    st = src_fault(s, it, AMPC_FAULT_EMPTY_FILE, "%s: empty file", shown);
  else if ((long long)sb.st_size > AMPC_SOURCE_MAX_FILE)
    st = src_fault(s, it, AMPC_FAULT_FILE_TOO_BIG, "%s: %lld bytes (the limit is %lld)", shown,
                   (long long)sb.st_size, AMPC_SOURCE_MAX_FILE);
  else if ((st = src_img_reserve(s, (size_t)sb.st_size)) == AMPC_OK) {
    size_t got = 0;
    const size_t want = (size_t)sb.st_size;
    while (got < want) {
      const ssize_t r = read(fd, s->img + got, want - got);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0) {
        st = src_fault(s, it, AMPC_FAULT_MISSING_FILE, "%s: read error (%s)", shown,
                       strerror(errno));
        break;
      }
      if (r == 0)
        break; /* it shrank while we read: keep what there was */
      got += (size_t)r;
    }
    if (st == AMPC_OK && it->fault == AMPC_FAULT_NONE) {
      if (got == 0)
        st = src_fault(s, it, AMPC_FAULT_EMPTY_FILE, "%s: empty file", shown);
      else
        it->image = s->img, it->image_size = got;
    }
  }
  close(fd);
  return st;
}

ampc_status src_emit_row(ampc_source *s, const src_row *r, ampc_source_item *it) {
  AMPC_TRY(src_buf_printf(&s->where, "%s:%lld", s->list_path, (long long)r->line));
  it->where = s->where.p;
  if (r->image && r->image_len)
    AMPC_TRY(src_buf_set(&s->key, r->image, r->image_len));
  else
    AMPC_TRY(src_buf_set(&s->key, s->where.p, s->where.n));
  it->key = s->key.p;
  AMPC_TRY(src_buf_set(&s->caption, r->caption, r->caption ? r->caption_len : 0));
  it->caption = s->caption.p;
  if (s->label_key && r->label) {
    AMPC_TRY(src_buf_set(&s->label, r->label, r->label_len));
    it->label = s->label.p;
  }
  if (r->bad)
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "%s", r->bad);
  if (!r->image || r->image_len == 0)
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "no image path");
  if (memchr(r->image, 0, r->image_len))
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "the image path holds a NUL byte");
  if (!r->caption)
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "no caption");
  if (s->label_key && !r->label)
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "no label \"%s\"", s->label_key);
  const char *why = NULL;
  const ampc_sample_fault cf = src_check_caption(r->caption, r->caption_len, &why);
  if (cf != AMPC_FAULT_NONE)
    return src_fault(s, it, cf, "%s", why);
  if (s->headers_only)
    return AMPC_OK;
  s->path.n = 0;
  if (s->base_dir[0] && r->image[0] != '/') {
    AMPC_TRY(src_buf_set(&s->path, s->base_dir, strlen(s->base_dir)));
    if (s->path.p[s->path.n - 1] != '/')
      AMPC_TRY(src_buf_add(&s->path, "/", 1));
  }
  AMPC_TRY(src_buf_add(&s->path, r->image, r->image_len));
  return read_image_file(s, it, s->key.p);
}

/* ---- opening ---------------------------------------------------------- */

static bool ends_with_ci(const char *s, const char *suffix) {
  const size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

static bool is_tar_name(const char *s) {
  static const char *const ext[] = {".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst"};
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
    if (ends_with_ci(s, ext[i]))
      return true;
  return false;
}

static bool is_regular(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The shard names of a tar spec: one existing file as named, else a
 * comma-separated list whose elements may be brace patterns. */
static ampc_status tar_names(const char *spec, char ***out, int64_t *n) {
  *out = NULL, *n = 0;
  if (is_regular(spec)) {
    char **v = malloc(sizeof *v);
    char *one = strdup(spec);
    if (!v || !one) {
      free(v), free(one);
      return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
    }
    v[0] = one;
    *out = v, *n = 1;
    return AMPC_OK;
  }
  if (!strchr(spec, ','))
    return ampc_brace_expand(spec, out, n);
  char **all = NULL;
  int64_t total = 0;
  ampc_status st = AMPC_OK;
  const char *p = spec;
  for (;;) {
    const char *comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char *one = strndup(p, len);
    char **v = NULL;
    int64_t k = 0;
    if (!one) {
      st = ampc_fail(AMPC_ERR_NOMEM, "out of memory");
      break;
    }
    if (len == 0)
      st = ampc_fail(AMPC_ERR_INVALID_ARG, "\"%s\": an empty name in the list of tars", spec);
    else
      st = ampc_brace_expand(one, &v, &k);
    free(one);
    if (st != AMPC_OK)
      break;
    if (total + k > 1000000) {
      ampc_strings_free(v, k);
      st = ampc_fail(AMPC_ERR_INVALID_ARG, "\"%s\": more than 1000000 tars", spec);
      break;
    }
    char **grown = realloc(all, (size_t)(total + k) * sizeof *grown);
    if (!grown) {
      ampc_strings_free(v, k);
      st = ampc_fail(AMPC_ERR_NOMEM, "out of memory");
      break;
    }
    all = grown;
    memcpy(all + total, v, (size_t)k * sizeof *v);
    total += k;
    free(v);
    if (!comma)
      break;
    p = comma + 1;
  }
  if (st != AMPC_OK) {
    ampc_strings_free(all, total);
    return st;
  }
  *out = all, *n = total;
  return AMPC_OK;
}

static char *dup_or(const char *a, const char *b) { return strdup(a ? a : b); }

/* The folder part of path, for relative image paths: "" when there is none. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return strdup("");
  return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* Set the keys and paths of a CSV/JSONL listing at `list`. */
static ampc_status listing_setup(ampc_source *s, const ampc_source_options *o, const char *list,
                                 const char *dir, const char *def_image, const char *def_caption,
                                 const char *def_alt) {
  s->image_key = dup_or(o->image_key, def_image);
  s->caption_key = dup_or(o->caption_key, def_caption);
  s->caption_alt = !o->caption_key && def_alt ? strdup(def_alt) : NULL;
  s->list_path = strdup(list);
  s->base_dir = dir ? strdup(dir) : dir_of(list);
  if (!s->image_key || !s->caption_key || (!o->caption_key && def_alt && !s->caption_alt) ||
      !s->list_path || !s->base_dir)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  return AMPC_OK;
}

static ampc_status open_folder(ampc_source *s, const ampc_source_options *o, const char *dir) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/')
    len--;
  src_buf p = {0};
  ampc_status st = src_buf_printf(&p, "%.*s/metadata.jsonl", (int)len, dir);
  if (st == AMPC_OK && is_regular(p.p)) {
    st = listing_setup(s, o, p.p, NULL, "file_name", "caption", "text");
    if (st == AMPC_OK)
      st = src_jsonl_open(s, p.p);
  } else if (st == AMPC_OK &&
             (st = src_buf_printf(&p, "%.*s/metadata.csv", (int)len, dir)) == AMPC_OK) {
    if (is_regular(p.p)) {
      st = listing_setup(s, o, p.p, NULL, "file_name", "caption", "text");
      if (st == AMPC_OK)
        st = src_csv_open(s, p.p, ',');
    } else
      st = ampc_fail(AMPC_ERR_INVALID_ARG, "%s: a folder without metadata.jsonl or metadata.csv",
                     dir);
  }
  src_buf_free(&p);
  return st;
}

static ampc_status open_kind(ampc_source *s, const ampc_source_options *o, const char *spec) {
  switch (s->kind) {
  case AMPC_SOURCE_CSV:
    AMPC_TRY(listing_setup(s, o, spec, NULL, "filepath", "title", NULL));
    return src_csv_open(s, spec, ends_with_ci(spec, ".tsv") ? '\t' : ',');
  case AMPC_SOURCE_JSONL:
    AMPC_TRY(listing_setup(s, o, spec, NULL, "image", "caption", "text"));
    return src_jsonl_open(s, spec);
  case AMPC_SOURCE_IMAGEFOLDER: return open_folder(s, o, spec);
  case AMPC_SOURCE_WEBDATASET: {
    s->caption_key = dup_or(o->caption_key, "txt");
    if (!s->caption_key)
      return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
    char **names = NULL;
    int64_t n = 0;
    AMPC_TRY(tar_names(spec, &names, &n));
    return src_tar_open(s, names, n);
  }
  }
  return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: unknown source kind %d", spec, (int)s->kind);
}

ampc_status ampc_source_open(ampc_source **out, const char *spec, const ampc_source_options *o) {
  if (!out || !spec)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_source_open: NULL argument");
  *out = NULL;
  const ampc_source_options defaults = {0};
  if (!o)
    o = &defaults;
  ampc_source_kind kind;
  struct stat sb;
  if (o->force_kind)
    kind = o->kind;
  else if (stat(spec, &sb) == 0 && S_ISDIR(sb.st_mode))
    kind = AMPC_SOURCE_IMAGEFOLDER;
  else if (ends_with_ci(spec, ".csv") || ends_with_ci(spec, ".tsv"))
    kind = AMPC_SOURCE_CSV;
  else if (ends_with_ci(spec, ".jsonl"))
    kind = AMPC_SOURCE_JSONL;
  else if (is_tar_name(spec))
    kind = AMPC_SOURCE_WEBDATASET;
  else
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: not a .csv, .tsv, .jsonl or .tar (or a pattern or list of .tar), nor a "
                     "folder with metadata.jsonl or metadata.csv",
                     spec);
  ampc_source *s = calloc(1, sizeof *s);
  if (!s)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  s->kind = kind;
  s->headers_only = o->headers_only;
  ampc_status st = AMPC_OK;
  if (o->label_key && !(s->label_key = strdup(o->label_key)))
    st = ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  if (st == AMPC_OK)
    st = open_kind(s, o, spec);
  if (st != AMPC_OK) {
    ampc_source_close(s);
    return st;
  }
  *out = s;
  return AMPC_OK;
}

ampc_source_kind ampc_source_get_kind(const ampc_source *s) { return s->kind; }

ampc_status ampc_source_next(ampc_source *s, ampc_source_item *item, bool *done) {
  if (!s || !item || !done)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_source_next: NULL argument");
  ampc_source_item it = {.key = "", .where = "", .caption = "", .fault_msg = ""};
  *done = false;
  ampc_status st;
  if (s->tar)
    st = src_tar_next(s, &it, done);
  else if (s->csv)
    st = src_csv_next(s, &it, done);
  else if (s->jsonl)
    st = src_jsonl_next(s, &it, done);
  else
    st = ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_source_next: the source is not open");
  if (st == AMPC_OK && !*done)
    *item = it;
  return st;
}

void ampc_source_close(ampc_source *s) {
  if (!s)
    return;
  src_csv_close(s->csv);
  src_jsonl_close(s->jsonl);
  src_tar_close(s->tar);
  free(s->label_key), free(s->image_key), free(s->caption_key), free(s->caption_alt);
  free(s->list_path), free(s->base_dir);
  src_buf_free(&s->key), src_buf_free(&s->where), src_buf_free(&s->caption);
  src_buf_free(&s->label), src_buf_free(&s->msg), src_buf_free(&s->path);
  free(s->img);
  free(s);
}
