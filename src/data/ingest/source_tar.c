/*
 * src/data/ingest/source_tar.c: the WebDataset reader (img2dataset /
 * OpenCLIP tar shards), through libarchive (tar formats; gzip, bzip2, xz and
 * zstd compressed tars too).
 *
 * As WebDataset does, consecutive regular-file members are grouped by key:
 * the member path up to the first dot of its base name ("a/b/000123.jpg":
 * key "a/b/000123", extension "jpg"). A group's first .jpg/.jpeg/.png/.webp
 * member (any case) is its image, its first .txt (or options.caption_key)
 * member its caption, its first options.label_key member its label. Members
 * whose base name starts with a dot are skipped. Reading a member's header
 * with a new key ends the group before it; that member's data is read at the
 * next call, so the returned group's buffers stay untouched until then.
 * A shard that ends in error (truncated, corrupt) yields the groups completed
 * before, then one TRUNCATED_TAR item; the group in progress is lost.
 */
#define _POSIX_C_SOURCE 200809L

#include "data/ingest/source_internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

struct src_tar {
  char **shards;
  int64_t n, i; /* shards[i] is the one being read (or opened next) */
  struct archive *a;
  bool pending; /* a member header read whose data belongs to the next group */
  src_buf pend_path;
  int64_t pend_size;
  bool in_group;
  src_buf gkey, img_ext, txt, lab;
  bool have_img, have_txt, have_lab, txt_big, lab_big;
  int64_t img_size, txt_size, lab_size;
  size_t img_n;
};

static const char *base_name(const char *p) {
  const char *slash = strrchr(p, '/');
  return slash ? slash + 1 : p;
}

static bool is_image_ext(const char *e) {
  return !strcasecmp(e, "jpg") || !strcasecmp(e, "jpeg") || !strcasecmp(e, "png") ||
         !strcasecmp(e, "webp");
}

/* Open one shard for reading. NULL: it failed, err says why; *corrupt: the
 * file was read but is no archive libarchive knows (not an I/O failure). */
static struct archive *open_shard(const char *path, src_buf *err, bool *corrupt) {
  *corrupt = false;
  struct archive *a = archive_read_new();
  if (!a) {
    src_buf_printf(err, "out of memory");
    return NULL;
  }
  archive_read_support_format_tar(a);
  archive_read_support_format_empty(a);
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_bzip2(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_zstd(a);
  if (archive_read_open_filename(a, path, 64 * 1024) != ARCHIVE_OK) {
    const char *m = archive_error_string(a);
    /* a file that opens for reading was refused for its contents */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat sb;
    *corrupt = fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
    if (fd >= 0)
      close(fd);
    src_buf_printf(err, "%s", m ? m : "cannot open");
    archive_read_free(a);
    return NULL;
  }
  return a;
}

ampc_status src_tar_open(ampc_source *s, char **shards, int64_t n) {
  src_tar *t = calloc(1, sizeof *t);
  if (!t) {
    ampc_strings_free(shards, n);
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  }
  s->tar = t;
  t->shards = shards, t->n = n;
  if (n == 1) { /* the only shard: not being able to open it is an error (a
                 * corrupt one is a TRUNCATED_TAR item, as in a list) */
    src_buf err = {0};
    bool corrupt = false;
    t->a = open_shard(shards[0], &err, &corrupt);
    if (!t->a && corrupt)
      src_buf_free(&err);
    else if (!t->a) {
      const ampc_status st =
          ampc_fail(AMPC_ERR_IO, "%s: cannot open (%s)", shards[0], err.p ? err.p : "?");
      src_buf_free(&err);
      return st;
    }
  }
  return AMPC_OK;
}

static void end_shard(src_tar *t) {
  if (t->a)
    archive_read_free(t->a);
  t->a = NULL;
  t->i++;
  t->pending = false;
}

static ampc_status emit_truncated(ampc_source *s, src_tar *t, ampc_source_item *it);

/* What taking in a member gave. */
enum { TAKE_OK = 0, TAKE_ARCHIVE = 1 /* libarchive failed */, TAKE_NOMEM = 2 };

/* Read the current member's data into b (at most SRC_TAR_MAX_TEXT bytes;
 * *big when there was more). */
static int read_text(struct archive *a, src_buf *b, int64_t size, bool *big) {
  b->n = 0;
  *big = size > SRC_TAR_MAX_TEXT;
  if (*big)
    return TAKE_OK;
  if (src_buf_reserve(b, (size_t)(size > 0 ? size : 0)) != AMPC_OK)
    return TAKE_NOMEM;
  b->p[0] = 0;
  char tmp[4096];
  for (;;) {
    const la_ssize_t r = archive_read_data(a, tmp, sizeof tmp);
    if (r < 0)
      return TAKE_ARCHIVE;
    if (r == 0)
      break;
    if ((long long)(b->n + (size_t)r) > SRC_TAR_MAX_TEXT) {
      *big = true;
      break;
    }
    if (src_buf_add(b, tmp, (size_t)r) != AMPC_OK)
      return TAKE_NOMEM;
  }
  return TAKE_OK;
}

/* Take in one member of the current group (TAKE_*). */
static int take_member(ampc_source *s, src_tar *t, const char *ext, int64_t size) {
  if (is_image_ext(ext) && !t->have_img) {
    t->have_img = true, t->img_size = size, t->img_n = 0;
    if (src_buf_set(&t->img_ext, ext, strlen(ext)) != AMPC_OK)
      return TAKE_NOMEM;
    if (s->headers_only || size <= 0 || size > AMPC_SOURCE_MAX_FILE)
      return TAKE_OK;
    if (src_img_reserve(s, (size_t)size) != AMPC_OK)
      return TAKE_NOMEM;
    while (t->img_n < (size_t)size) {
      const la_ssize_t r = archive_read_data(t->a, s->img + t->img_n, (size_t)size - t->img_n);
      if (r < 0)
        return TAKE_ARCHIVE;
      if (r == 0)
        break;
      t->img_n += (size_t)r;
    }
  } else if (strcasecmp(ext, s->caption_key) == 0 && !t->have_txt) {
    t->have_txt = true, t->txt_size = size;
    return read_text(t->a, &t->txt, size, &t->txt_big);
  } else if (s->label_key && strcasecmp(ext, s->label_key) == 0 && !t->have_lab) {
    t->have_lab = true, t->lab_size = size;
    return read_text(t->a, &t->lab, size, &t->lab_big);
  }
  return TAKE_OK;
}

/* The status of a take_member that did not give TAKE_OK: an item for a
 * libarchive failure, an error for memory. */
static ampc_status take_failed(ampc_source *s, src_tar *t, ampc_source_item *it, int took) {
  if (took == TAKE_NOMEM)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory reading %s", t->shards[t->i], t->gkey.p);
  return emit_truncated(s, t, it);
}

static void group_reset(src_tar *t) {
  t->in_group = false;
  t->have_img = t->have_txt = t->have_lab = t->txt_big = t->lab_big = false;
  t->img_size = t->txt_size = t->lab_size = 0;
  t->img_n = 0;
  t->txt.n = t->lab.n = 0;
}

/* The group's key and extension from a member path: false to skip it. */
static bool split_member(const char *path, size_t *key_len, const char **ext) {
  const char *base = base_name(path);
  if (!base[0] || base[0] == '.')
    return false;
  const char *dot = strchr(base, '.');
  *key_len = dot ? (size_t)(dot - path) : strlen(path);
  *ext = dot ? dot + 1 : "";
  return true;
}

static ampc_status emit_truncated(ampc_source *s, src_tar *t, ampc_source_item *it) {
  const char *shard = t->shards[t->i];
  const char *m = archive_error_string(t->a);
  ampc_status st = src_buf_set(&s->key, base_name(shard), strlen(base_name(shard)));
  if (st == AMPC_OK)
    st = t->in_group ? src_buf_printf(&s->where, "%s:%s", shard, t->gkey.p)
                     : src_buf_printf(&s->where, "%s", shard);
  if (st == AMPC_OK) {
    it->key = s->key.p, it->where = s->where.p;
    st = src_fault(s, it, AMPC_FAULT_TRUNCATED_TAR, "truncated or corrupt tar (%s)",
                   m ? m : "unknown error");
  }
  end_shard(t);
  group_reset(t);
  return st;
}

static void trim(src_buf *b, bool front) {
  while (b->n && strchr(" \t\r\n\f\v", b->p[b->n - 1]) && b->p[b->n - 1])
    b->p[--b->n] = 0;
  size_t k = 0;
  while (front && k < b->n && strchr(" \t\r\n\f\v", b->p[k]) && b->p[k])
    k++;
  if (k) {
    memmove(b->p, b->p + k, b->n - k + 1);
    b->n -= k;
  }
}

/* The fault of the group being finished, set in *it. */
static ampc_status group_faults(ampc_source *s, src_tar *t, ampc_source_item *it) {
  if (!t->have_img)
    return src_fault(s, it, AMPC_FAULT_NO_IMAGE, "no image member (.jpg, .jpeg, .png or .webp)");
  if (!t->have_txt)
    return src_fault(s, it, AMPC_FAULT_NO_CAPTION, "no .%s member", s->caption_key);
  if (t->txt_big)
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "the .%s member has %lld bytes (the limit is %lld)",
                     s->caption_key, (long long)t->txt_size, SRC_TAR_MAX_TEXT);
  if (s->label_key && !t->have_lab)
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "no .%s member", s->label_key);
  if (s->label_key && t->lab_big)
    return src_fault(s, it, AMPC_FAULT_BAD_ROW, "the .%s member has %lld bytes (the limit is %lld)",
                     s->label_key, (long long)t->lab_size, SRC_TAR_MAX_TEXT);
  const char *why = NULL;
  const ampc_sample_fault cf = src_check_caption(t->txt.p, t->txt.n, &why);
  if (cf != AMPC_FAULT_NONE)
    return src_fault(s, it, cf, "%s", why);
  const char *ext = t->img_ext.n ? t->img_ext.p : "image";
  if (t->img_size > AMPC_SOURCE_MAX_FILE)
    return src_fault(s, it, AMPC_FAULT_FILE_TOO_BIG,
                     "the .%s member has %lld bytes (the limit is %lld)", ext,
                     (long long)t->img_size, AMPC_SOURCE_MAX_FILE);
  if (t->img_size <= 0 || (!s->headers_only && t->img_n == 0))
    return src_fault(s, it, AMPC_FAULT_EMPTY_FILE, "the .%s member is empty", ext);
  if (!s->headers_only)
    it->image = s->img, it->image_size = t->img_n;
  return AMPC_OK;
}

/* Describe the group read so far in *it (key, where, caption, label, fault)
 * and reset the group. */
static ampc_status finish_group(ampc_source *s, src_tar *t, ampc_source_item *it) {
  const char *shard = t->shards[t->i];
  AMPC_TRY(src_buf_printf(&s->key, "%s/%s", base_name(shard), t->gkey.p));
  AMPC_TRY(src_buf_printf(&s->where, "%s:%s", shard, t->gkey.p));
  it->key = s->key.p, it->where = s->where.p;
  /* the caption loses its line end(s) */
  while (t->txt.n && (t->txt.p[t->txt.n - 1] == '\n' || t->txt.p[t->txt.n - 1] == '\r'))
    t->txt.p[--t->txt.n] = 0;
  AMPC_TRY(src_buf_set(&s->caption, t->txt.p, t->have_txt && !t->txt_big ? t->txt.n : 0));
  it->caption = s->caption.p;
  if (s->label_key && t->have_lab && !t->lab_big) {
    trim(&t->lab, true);
    AMPC_TRY(src_buf_set(&s->label, t->lab.p, t->lab.n));
    it->label = s->label.p;
  }
  const ampc_status st = group_faults(s, t, it);
  group_reset(t);
  return st;
}

ampc_status src_tar_next(ampc_source *s, ampc_source_item *it, bool *done) {
  src_tar *t = s->tar;
  for (;;) {
    if (!t->a) {
      if (t->i >= t->n) {
        *done = true;
        return AMPC_OK;
      }
      src_buf err = {0};
      bool corrupt = false;
      t->a = open_shard(t->shards[t->i], &err, &corrupt);
      if (!t->a) {
        const char *shard = t->shards[t->i];
        ampc_status st = src_buf_set(&s->key, base_name(shard), strlen(base_name(shard)));
        if (st == AMPC_OK)
          st = src_buf_set(&s->where, shard, strlen(shard));
        if (st == AMPC_OK) {
          it->key = s->key.p, it->where = s->where.p;
          st = corrupt ? src_fault(s, it, AMPC_FAULT_TRUNCATED_TAR, "truncated or corrupt tar (%s)",
                                   err.p ? err.p : "?")
                       : src_fault(s, it, AMPC_FAULT_MISSING_FILE, "cannot open (%s)",
                                   err.p ? err.p : "?");
        }
        src_buf_free(&err);
        t->i++;
        return st;
      }
    }
    group_reset(t);
    if (t->pending) {
      t->pending = false;
      size_t klen = t->pend_path.n;
      const char *ext = "";
      split_member(t->pend_path.p, &klen, &ext); /* it passed before */
      AMPC_TRY(src_buf_set(&t->gkey, t->pend_path.p, klen));
      t->in_group = true;
      const int took = take_member(s, t, ext, t->pend_size);
      if (took != TAKE_OK)
        return take_failed(s, t, it, took);
    }
    for (;;) {
      struct archive_entry *e = NULL;
      const int r = archive_read_next_header(t->a, &e);
      if (r == ARCHIVE_EOF) {
        if (t->in_group) {
          const ampc_status st = finish_group(s, t, it);
          end_shard(t);
          return st;
        }
        end_shard(t);
        break;
      }
      if (r < ARCHIVE_WARN || r == ARCHIVE_RETRY)
        return emit_truncated(s, t, it);
      if (archive_entry_filetype(e) != AE_IFREG)
        continue;
      const char *path = archive_entry_pathname(e);
      if (!path)
        path = archive_entry_pathname_utf8(e);
      size_t klen;
      const char *ext;
      if (!path || !split_member(path, &klen, &ext))
        continue;
      const int64_t size = archive_entry_size_is_set(e) ? (int64_t)archive_entry_size(e) : 0;
      if (t->in_group && (klen != t->gkey.n || memcmp(path, t->gkey.p, klen) != 0)) {
        AMPC_TRY(src_buf_set(&t->pend_path, path, strlen(path)));
        t->pend_size = size;
        t->pending = true;
        return finish_group(s, t, it);
      }
      if (!t->in_group) {
        AMPC_TRY(src_buf_set(&t->gkey, path, klen));
        t->in_group = true;
      }
      const int took = take_member(s, t, ext, size);
      if (took != TAKE_OK)
        return take_failed(s, t, it, took);
    }
  }
}

void src_tar_close(src_tar *t) {
  if (!t)
    return;
  if (t->a)
    archive_read_free(t->a);
  ampc_strings_free(t->shards, t->n);
  src_buf_free(&t->pend_path), src_buf_free(&t->gkey), src_buf_free(&t->img_ext);
  src_buf_free(&t->txt), src_buf_free(&t->lab);
  free(t);
}
