/*
 * src/data/dataset.c: the dataset file format (docs/DATA.md): loader, writer,
 * the embedded default and the shared allocation helpers.
 *
 * Layout (all integers little-endian):
 *   "AMPCDS01", u32 version (2; 1 is still read), u32 n, height, width,
 *   channels, seq_len, vocab, n_classes, then 10 sections in a fixed order (9
 *   in version 1, which has no style names), each
 *   [4-byte tag][u64 uncompressed length][u64 compressed length][zlib stream].
 *
 * The loader trusts nothing: it checks the header against fixed limits and
 * every section header against the bytes that remain, bounds each
 * uncompressed length by zlib's maximum ratio (so a forged header cannot ask
 * for a huge allocation), requires each stream to inflate to exactly the
 * expected length using exactly its compressed bytes, and then checks the
 * contents (token ids < vocab, labels < n_classes, known splits and styles,
 * string counts) before returning. Nothing is allocated until every section
 * header has been checked; then one block holds the whole dataset.
 */
#define _XOPEN_SOURCE 700 /* fsync */

#include "internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data_internal.h"

#define DS_MAGIC "AMPCDS01"
#define DS_VERSION 2u
#define DS_HEADER_BYTES 40u
#define DS_SECTION_HEADER_BYTES 20u
#define DS_ZLIB_LEVEL 9
/* deflate cannot describe more than 1032 output bytes per input byte (a
 * 258-byte match in about 2 bits), so a section claiming more is corrupt */
#define DS_MAX_RATIO 1032u

enum {
  SEC_IMAGES,
  SEC_TOKENS,
  SEC_LABEL,
  SEC_CONCEPT,
  SEC_SPLIT,
  SEC_STYLE,
  SEC_WORDS,
  SEC_CLASSES,
  SEC_CAPTIONS,
  SEC_STYLE_NAMES, /* version 2 */
  SEC_COUNT
};
static const char k_tags[SEC_COUNT][5] = {"IMGS", "TOKS", "LABL", "CONC", "SPLT",
                                          "STYL", "VOCB", "CLAS", "CAPT", "STYN"};

/* ---- allocation ------------------------------------------------------------ */

const char *ampc__dataset_check_sizes(const ampc_dataset *d) {
  if (d->n < 1 || d->n > AMPC_DS_MAX_N)
    return "sample count n";
  if (d->height < 1 || d->height > AMPC_DS_MAX_SIDE)
    return "image height";
  if (d->width < 1 || d->width > AMPC_DS_MAX_SIDE)
    return "image width";
  if (d->channels < 1 || d->channels > AMPC_DS_MAX_CHANNELS)
    return "image channels";
  if (d->seq_len < 0 || d->seq_len > AMPC_DS_MAX_SEQ_LEN)
    return "sequence length";
  if (d->vocab < 0 || d->vocab > AMPC_DS_MAX_VOCAB || (d->seq_len > 0 && d->vocab < 2))
    return "vocabulary size";
  if (d->n_classes < 1 || d->n_classes > AMPC_DS_MAX_CLASSES)
    return "class count";
  if (d->n_styles < 0 || d->n_styles > AMPC_DS_MAX_STYLES)
    return "style count";
  return NULL;
}

static size_t align16(size_t x) { return (x + 15u) & ~(size_t)15u; }

ampc_status ampc__dataset_alloc(ampc_dataset *d, const size_t text_bytes[AMPC__DS_TEXTS],
                                char *text[AMPC__DS_TEXTS]) {
  const size_t n = (size_t)d->n;
  const size_t img = n * (size_t)d->height * (size_t)d->width * (size_t)d->channels;
  const size_t tok = n * (size_t)d->seq_len * sizeof(int32_t);
  const int32_t counts[AMPC__DS_TEXTS] = {d->vocab, d->n_classes, d->n, d->n_styles};
  size_t off[16], total = 0;
  int k = 0;
#define CARVE(bytes)                                                                               \
  do {                                                                                             \
    off[k++] = total;                                                                              \
    total = align16(total + (bytes));                                                              \
  } while (0)
  CARVE(img);                              /* 0 images */
  CARVE(tok);                              /* 1 tokens */
  CARVE(n * sizeof(int32_t));              /* 2 label */
  CARVE(n * sizeof(int32_t));              /* 3 concept */
  CARVE(n);                                /* 4 split */
  CARVE(n);                                /* 5 style */
  for (int t = 0; t < AMPC__DS_TEXTS; t++) /* 6..9 pointer tables, 10..13 blobs */
    CARVE(text_bytes[t] ? (size_t)counts[t] * sizeof(char *) : 0);
  for (int t = 0; t < AMPC__DS_TEXTS; t++)
    CARVE(text_bytes[t]);
#undef CARVE
  unsigned char *base = calloc(1, total ? total : 1);
  if (!base)
    return ampc_fail(AMPC_ERR_NOMEM, "dataset: cannot allocate %zu bytes", total);
  d->owner_ = base;
  d->images = base + off[0];
  d->tokens = d->seq_len > 0 ? (int32_t *)(void *)(base + off[1]) : NULL;
  d->label = (int32_t *)(void *)(base + off[2]);
  d->concept = (int32_t *)(void *)(base + off[3]);
  d->split = base + off[4];
  d->style = base + off[5];
  char **tables[AMPC__DS_TEXTS];
  for (int t = 0; t < AMPC__DS_TEXTS; t++) {
    tables[t] = text_bytes[t] ? (char **)(void *)(base + off[6 + t]) : NULL;
    text[t] = text_bytes[t] ? (char *)(base + off[6 + AMPC__DS_TEXTS + t]) : NULL;
  }
  d->words = tables[0];
  d->class_names = tables[1];
  d->captions = tables[2];
  d->style_names = tables[3];
  return AMPC_OK;
}

int ampc__split_strings(char *blob, size_t len, int32_t count, char **out) {
  if (len == 0 || blob[len - 1] != '\0')
    return -1;
  int32_t k = 0;
  for (size_t i = 0; i < len;) {
    if (k == count)
      return -1;
    out[k++] = blob + i;
    i += strlen(blob + i) + 1;
  }
  return k == count ? 0 : -1;
}

void ampc_dataset_free(ampc_dataset *d) {
  if (!d)
    return;
  free(d->owner_);
  memset(d, 0, sizeof *d);
}

/* ---- styles ------------------------------------------------------------------ */

const char *ampc_dataset_style_name(const ampc_dataset *d, int style) {
  if (!d || style < 0)
    return NULL;
  if (d->style_names)
    return style < d->n_styles ? d->style_names[style] : NULL;
  static const char *const legacy[2] = {"google", "twitter"};
  return style < 2 && d->tokens ? legacy[style] : NULL;
}

int ampc_dataset_find_style(const ampc_dataset *d, const char *name) {
  if (!d || !name)
    return -1;
  const int n = d->style_names ? d->n_styles : 2;
  for (int s = 0; s < n; s++) {
    const char *nm = ampc_dataset_style_name(d, s);
    if (nm && strcmp(nm, name) == 0)
      return s;
  }
  return -1;
}

ampc_status ampc_dataset_hold_out_style(ampc_dataset *d, int style) {
  if (!d || !d->split || !d->style)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_hold_out_style: no dataset");
  if (!d->tokens || style < 0 || !ampc_dataset_style_name(d, style))
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_dataset_hold_out_style: style %d is not a style of this image-text "
                     "dataset",
                     style);
  int64_t held = 0, train = 0;
  for (int32_t i = 0; i < d->n; i++) {
    if (d->split[i] != AMPC_SPLIT_TRAIN && d->split[i] != AMPC_SPLIT_NEW_STYLE)
      continue;
    const bool out = d->style[i] == style;
    held += out, train += !out;
  }
  (void)train; /* a run checks that something is left to train on */
  if (held == 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "holding out style '%s' leaves nothing to evaluate: it has no images of the "
                     "training concepts",
                     ampc_dataset_style_name(d, style));
  for (int32_t i = 0; i < d->n; i++)
    if (d->split[i] == AMPC_SPLIT_TRAIN || d->split[i] == AMPC_SPLIT_NEW_STYLE)
      d->split[i] = d->style[i] == style ? AMPC_SPLIT_NEW_STYLE : AMPC_SPLIT_TRAIN;
  return AMPC_OK;
}

/* ---- little-endian helpers ------------------------------------------------ */

static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static void wr64(unsigned char *p, uint64_t v) {
  wr32(p, (uint32_t)v);
  wr32(p + 4, (uint32_t)(v >> 32));
}

/* ---- validation shared by the loader and the writer ----------------------- */

/* Check the contents of a dataset whose arrays are filled. Returns NULL or a
 * description of the problem written to buf. */
static const char *check_contents(const ampc_dataset *d, char *buf, size_t bufsz) {
  const int64_t nt = (int64_t)d->n * d->seq_len;
  for (int64_t i = 0; i < nt; i++)
    if (d->tokens[i] < 0 || d->tokens[i] >= d->vocab) {
      snprintf(buf, bufsz, "token id %d of sample %lld is outside [0, %d)", (int)d->tokens[i],
               (long long)(i / d->seq_len), (int)d->vocab);
      return buf;
    }
  for (int32_t i = 0; i < d->n; i++) {
    if (d->label[i] < 0 || d->label[i] >= d->n_classes) {
      snprintf(buf, bufsz, "label %d of sample %d is outside [0, %d)", (int)d->label[i], (int)i,
               (int)d->n_classes);
      return buf;
    }
    if (d->concept[i] < 0) {
      snprintf(buf, bufsz, "concept id %d of sample %d is negative", (int)d->concept[i], (int)i);
      return buf;
    }
    if (d->split[i] > AMPC_SPLIT_TEST) {
      snprintf(buf, bufsz, "unknown split %u of sample %d", (unsigned)d->split[i], (int)i);
      return buf;
    }
    if (d->style[i] >= (d->style_names ? d->n_styles : 2)) {
      snprintf(buf, bufsz, "unknown style %u of sample %d", (unsigned)d->style[i], (int)i);
      return buf;
    }
  }
  return NULL;
}

/* ---- loader ---------------------------------------------------------------- */

typedef struct section {
  uint64_t raw, packed;   /* uncompressed and compressed lengths */
  const unsigned char *z; /* the zlib stream inside the file */
} section;

static ampc_status inflate_exact(const section *s, void *dst, const char *name, int k) {
  unsigned char dummy;
  uLongf out_len = (uLongf)s->raw;
  uLong in_len = (uLong)s->packed;
  int rc = uncompress2(s->raw ? (Bytef *)dst : &dummy, &out_len, s->z, &in_len);
  if (rc != Z_OK || out_len != s->raw || in_len != s->packed)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: section %s does not inflate to its %llu bytes (zlib: %s, got %llu from "
                     "%llu of %llu compressed bytes)",
                     name, k_tags[k], (unsigned long long)s->raw, rc == Z_OK ? "ok" : zError(rc),
                     (unsigned long long)out_len, (unsigned long long)in_len,
                     (unsigned long long)s->packed);
  return AMPC_OK;
}

ampc_status ampc_dataset_load_mem(const void *data, size_t size, const char *name,
                                  ampc_dataset *out) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_load_mem: out is NULL");
  memset(out, 0, sizeof *out);
  if (!name)
    name = "<memory>";
  if (!data && size)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: data is NULL", name);
  const unsigned char *p = data;
  if (size < DS_HEADER_BYTES)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: %zu bytes is too short for a dataset header (%u)", name,
                     size, DS_HEADER_BYTES);
  if (memcmp(p, DS_MAGIC, 8) != 0)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: not an ampc dataset (magic is not \"%s\")", name,
                     DS_MAGIC);
  const uint32_t version = rd32(p + 8);
  if (version != 1u && version != DS_VERSION)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: dataset version %u, this build reads versions 1 and %u",
                     name, version, DS_VERSION);
  const int nsec = version == 1u ? SEC_STYLE_NAMES : SEC_COUNT; /* version 1: no style names */
  uint32_t f[7];
  for (int i = 0; i < 7; i++) {
    f[i] = rd32(p + 12 + 4 * i);
    if (f[i] > INT32_MAX)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: header field %d is %u, out of range", name, i, f[i]);
  }
  ampc_dataset d = {0};
  d.n = (int32_t)f[0];
  d.height = (int32_t)f[1];
  d.width = (int32_t)f[2];
  d.channels = (int32_t)f[3];
  d.seq_len = (int32_t)f[4];
  d.vocab = (int32_t)f[5];
  d.n_classes = (int32_t)f[6];
  const char *bad = ampc__dataset_check_sizes(&d);
  if (bad)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: implausible %s in the header (n %u, %ux%ux%u, seq_len "
                     "%u, vocab %u, classes %u)",
                     name, bad, f[0], f[1], f[2], f[3], f[4], f[5], f[6]);

  /* the section headers, all checked before anything is allocated */
  const uint64_t n = (uint64_t)d.n;
  const uint64_t expect[SEC_COUNT] = {
      n * (uint64_t)d.height * (uint64_t)d.width * (uint64_t)d.channels,
      n * (uint64_t)d.seq_len * 4u,
      n * 4u,
      n * 4u,
      n,
      n,
      UINT64_MAX, /* string sections: any length (checked after inflating) */
      UINT64_MAX,
      UINT64_MAX,
      UINT64_MAX};
  section sec[SEC_COUNT];
  memset(sec, 0, sizeof sec);
  size_t pos = DS_HEADER_BYTES;
  for (int k = 0; k < nsec; k++) {
    if (size - pos < DS_SECTION_HEADER_BYTES)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: truncated before the header of section %s", name,
                       k_tags[k]);
    if (memcmp(p + pos, k_tags[k], 4) != 0)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: expected section %s at byte %zu", name, k_tags[k],
                       pos);
    sec[k].raw = rd64(p + pos + 4);
    sec[k].packed = rd64(p + pos + 12);
    pos += DS_SECTION_HEADER_BYTES;
    if (sec[k].packed > size - pos)
      return ampc_fail(AMPC_ERR_FORMAT,
                       "%s: section %s claims %llu compressed bytes but only %zu remain", name,
                       k_tags[k], (unsigned long long)sec[k].packed, size - pos);
    if (expect[k] != UINT64_MAX && sec[k].raw != expect[k])
      return ampc_fail(AMPC_ERR_FORMAT, "%s: section %s holds %llu bytes, the header implies %llu",
                       name, k_tags[k], (unsigned long long)sec[k].raw,
                       (unsigned long long)expect[k]);
    if (sec[k].raw > (uint64_t)DS_MAX_RATIO * sec[k].packed + 64u)
      return ampc_fail(AMPC_ERR_FORMAT,
                       "%s: section %s claims %llu bytes from %llu compressed bytes, more than "
                       "zlib can produce",
                       name, k_tags[k], (unsigned long long)sec[k].raw,
                       (unsigned long long)sec[k].packed);
    if (sec[k].raw > (uint64_t)SIZE_MAX / 2)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: section %s is too large", name, k_tags[k]);
    sec[k].z = p + pos;
    pos += (size_t)sec[k].packed;
  }
  if (pos != size)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: %zu unexpected bytes after the last section", name,
                     size - pos);
  if (d.seq_len > 0 && sec[SEC_WORDS].raw == 0)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: captions are tokenized but there is no vocabulary",
                     name);

  size_t text_bytes[AMPC__DS_TEXTS];
  char *text[AMPC__DS_TEXTS];
  for (int t = 0; t < AMPC__DS_TEXTS; t++)
    text_bytes[t] = (size_t)sec[SEC_WORDS + t].raw;
  /* the style names are counted in the stream (inflated on its own first) */
  if (text_bytes[3] > 0) {
    char *names = malloc(text_bytes[3]);
    if (!names)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", name);
    ampc_status sn = inflate_exact(&sec[SEC_STYLE_NAMES], names, name, SEC_STYLE_NAMES);
    int64_t count = 0;
    for (size_t i = 0; i < text_bytes[3]; i++)
      count += names[i] == '\0';
    const bool ends = names[text_bytes[3] - 1] == '\0';
    free(names);
    if (sn != AMPC_OK)
      return sn;
    if (!ends || count > AMPC_DS_MAX_STYLES)
      return ampc_fail(AMPC_ERR_FORMAT,
                       "%s: section STYN must hold 1 to %d NUL-terminated style names", name,
                       AMPC_DS_MAX_STYLES);
    d.n_styles = (int32_t)count;
  }
  ampc_status st = ampc__dataset_alloc(&d, text_bytes, text);
  if (st != AMPC_OK)
    return ampc_fail(st, "%s: cannot allocate the dataset (%d samples)", name, (int)d.n);
  void *dst[SEC_COUNT] = {d.images, d.tokens, d.label, d.concept, d.split,
                          d.style,  text[0],  text[1], text[2],   text[3]};
  for (int k = 0; k < nsec && st == AMPC_OK; k++)
    st = inflate_exact(&sec[k], dst[k], name, k);
  if (st != AMPC_OK) {
    ampc_dataset_free(&d);
    return st;
  }
  /* integers from little-endian bytes, in place */
  const size_t nt = (size_t)d.n * (size_t)d.seq_len;
  for (size_t i = 0; i < nt; i++)
    d.tokens[i] = (int32_t)rd32((const unsigned char *)&d.tokens[i]);
  for (int32_t i = 0; i < d.n; i++) {
    d.label[i] = (int32_t)rd32((const unsigned char *)&d.label[i]);
    d.concept[i] = (int32_t)rd32((const unsigned char *)&d.concept[i]);
  }
  char **tables[AMPC__DS_TEXTS] = {d.words, d.class_names, d.captions, d.style_names};
  const int32_t counts[AMPC__DS_TEXTS] = {d.vocab, d.n_classes, d.n, d.n_styles};
  for (int t = 0; t < AMPC__DS_TEXTS; t++)
    if (text[t] && ampc__split_strings(text[t], text_bytes[t], counts[t], tables[t]) != 0) {
      ampc_dataset_free(&d);
      return ampc_fail(AMPC_ERR_FORMAT,
                       "%s: section %s does not hold exactly %d NUL-terminated strings", name,
                       k_tags[SEC_WORDS + t], (int)counts[t]);
    }
  for (int32_t a = 0; a < d.n_styles; a++) {
    bool dup = !d.style_names[a][0];
    for (int32_t b = 0; b < a && !dup; b++)
      dup = strcmp(d.style_names[a], d.style_names[b]) == 0;
    if (dup) {
      ampc_dataset_free(&d);
      return ampc_fail(AMPC_ERR_FORMAT, "%s: section STYN: style name %d is empty or repeated",
                       name, (int)a);
    }
  }
  char msg[160];
  bad = check_contents(&d, msg, sizeof msg);
  if (bad) {
    ampc_dataset_free(&d);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: %s", name, bad);
  }
  *out = d;
  return AMPC_OK;
}

ampc_status ampc_dataset_load(const char *path, ampc_dataset *out) {
  if (!out || !path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_load: NULL argument");
  memset(out, 0, sizeof *out);
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  long len = -1;
  if (fseek(fp, 0, SEEK_END) == 0)
    len = ftell(fp);
  if (len < 0 || fseek(fp, 0, SEEK_SET) != 0) {
    fclose(fp);
    return ampc_fail(AMPC_ERR_IO, "%s: cannot determine the file size", path);
  }
  unsigned char *buf = malloc(len ? (size_t)len : 1);
  if (!buf) {
    fclose(fp);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %ld bytes to read it", path, len);
  }
  const size_t got = fread(buf, 1, (size_t)len, fp);
  const int err = ferror(fp);
  fclose(fp);
  if (got != (size_t)len || err) {
    free(buf);
    return ampc_fail(AMPC_ERR_IO, "%s: read error", path);
  }
  ampc_status st = ampc_dataset_load_mem(buf, (size_t)len, path, out);
  free(buf);
  return st;
}

/* ---- the embedded default (src/data/embed.S.in) ---------------------------- */

#ifdef AMPC_HAVE_EMBEDDED_EMOJI
extern const unsigned char ampc__emoji_data_start[];
extern const unsigned char ampc__emoji_data_end[];
#endif

ampc_status ampc_dataset_load_default(ampc_dataset *out) {
#ifdef AMPC_HAVE_EMBEDDED_EMOJI
  return ampc_dataset_load_mem(ampc__emoji_data_start,
                               (size_t)(ampc__emoji_data_end - ampc__emoji_data_start),
                               "<embedded data/emoji.ampcds>", out);
#else
  if (out)
    memset(out, 0, sizeof *out);
  return ampc_fail(AMPC_ERR_UNSUPPORTED,
                   "this build has no embedded dataset (data/emoji.ampcds was missing when it "
                   "was configured)");
#endif
}

/* ---- writer ---------------------------------------------------------------- */

/* A failed write of the temporary file `tmp` (errno says why). */
static ampc_status write_failed(const char *tmp) {
  const int e = errno ? errno : EIO;
  return ampc_fail(AMPC_ERR_IO, "%s: write error: %s (the file it replaces is left unchanged)", tmp,
                   strerror(e));
}

/* Compress src [len] and append the section to fp. */
static ampc_status write_section(FILE *fp, int k, const void *src, size_t len, const char *path) {
  unsigned char empty = 0;
  uLongf zlen = compressBound((uLong)len);
  unsigned char *z = malloc(zlen);
  if (!z)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate %lu bytes to compress section %s", path,
                     (unsigned long)zlen, k_tags[k]);
  int rc = compress2(z, &zlen, len ? src : &empty, (uLong)len, DS_ZLIB_LEVEL);
  if (rc != Z_OK) {
    free(z);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: zlib cannot compress section %s: %s", path, k_tags[k],
                     zError(rc));
  }
  unsigned char h[DS_SECTION_HEADER_BYTES];
  memcpy(h, k_tags[k], 4);
  wr64(h + 4, len);
  wr64(h + 12, zlen);
  errno = 0;
  const int ok = fwrite(h, 1, sizeof h, fp) == sizeof h && fwrite(z, 1, zlen, fp) == zlen;
  const ampc_status st = ok ? AMPC_OK : write_failed(path);
  free(z);
  return st;
}

/* Join count strings, each followed by NUL, into a new blob (*len bytes). */
static ampc_status join_strings(char *const *s, int32_t count, char **blob, size_t *len,
                                const char *what) {
  *blob = NULL;
  *len = 0;
  if (!s)
    return AMPC_OK;
  size_t total = 0;
  for (int32_t i = 0; i < count; i++) {
    if (!s[i])
      return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_save: %s[%d] is NULL", what, (int)i);
    total += strlen(s[i]) + 1;
  }
  char *b = malloc(total ? total : 1);
  if (!b)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_dataset_save: cannot allocate %zu bytes", total);
  size_t pos = 0;
  for (int32_t i = 0; i < count; i++) {
    const size_t l = strlen(s[i]) + 1;
    memcpy(b + pos, s[i], l);
    pos += l;
  }
  *blob = b;
  *len = total;
  return AMPC_OK;
}

ampc_status ampc_dataset_save(const ampc_dataset *d, const char *path) {
  if (!d || !path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_save: NULL argument");
  const char *bad = ampc__dataset_check_sizes(d);
  if (bad)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_save: %s: invalid %s", path, bad);
  if (!d->images || !d->label || !d->concept || !d->split || !d->style ||
      (d->seq_len > 0 && (!d->tokens || !d->words)))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_save: %s: a required array is NULL", path);
  char msg[160];
  bad = check_contents(d, msg, sizeof msg);
  if (bad)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_dataset_save: %s: %s", path, bad);

  const size_t n = (size_t)d->n;
  const size_t nt = n * (size_t)d->seq_len;
  /* the integer arrays as little-endian bytes */
  unsigned char *le = malloc((nt + 2 * n) * 4 + 1);
  if (!le)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_dataset_save: %s: out of memory", path);
  for (size_t i = 0; i < nt; i++)
    wr32(le + 4 * i, (uint32_t)d->tokens[i]);
  for (size_t i = 0; i < n; i++) {
    wr32(le + 4 * (nt + i), (uint32_t)d->label[i]);
    wr32(le + 4 * (nt + n + i), (uint32_t)d->concept[i]);
  }
  char *blob[AMPC__DS_TEXTS] = {NULL, NULL, NULL, NULL};
  size_t blen[AMPC__DS_TEXTS] = {0, 0, 0, 0};
  ampc_status st = join_strings(d->words, d->vocab, &blob[0], &blen[0], "words");
  if (st == AMPC_OK)
    st = join_strings(d->class_names, d->n_classes, &blob[1], &blen[1], "class_names");
  if (st == AMPC_OK)
    st = join_strings(d->captions, d->n, &blob[2], &blen[2], "captions");
  if (st == AMPC_OK)
    st = join_strings(d->style_names, d->n_styles, &blob[3], &blen[3], "style_names");
  if (st != AMPC_OK) {
    free(le);
    for (int t = 0; t < AMPC__DS_TEXTS; t++)
      free(blob[t]);
    return st;
  }

  const size_t plen = strlen(path);
  char *tmp = malloc(plen + 5);
  FILE *fp = NULL;
  if (!tmp) {
    st = ampc_fail(AMPC_ERR_NOMEM, "ampc_dataset_save: %s: out of memory", path);
    goto done;
  }
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  fp = fopen(tmp, "wb");
  if (!fp) {
    st = ampc_fail(AMPC_ERR_IO, "%s: cannot create", tmp);
    goto done;
  }
  unsigned char h[DS_HEADER_BYTES];
  memcpy(h, DS_MAGIC, 8);
  wr32(h + 8, DS_VERSION);
  const int32_t fields[7] = {d->n,       d->height, d->width,    d->channels,
                             d->seq_len, d->vocab,  d->n_classes};
  for (int i = 0; i < 7; i++)
    wr32(h + 12 + 4 * i, (uint32_t)fields[i]);
  errno = 0;
  if (fwrite(h, 1, sizeof h, fp) != sizeof h) {
    st = write_failed(tmp);
    goto done;
  }
  const void *src[SEC_COUNT] = {d->images, le,      le + 4 * nt, le + 4 * (nt + n), d->split,
                                d->style,  blob[0], blob[1],     blob[2],           blob[3]};
  const size_t len[SEC_COUNT] = {n * (size_t)d->height * (size_t)d->width * (size_t)d->channels,
                                 4 * nt,
                                 4 * n,
                                 4 * n,
                                 n,
                                 n,
                                 blen[0],
                                 blen[1],
                                 blen[2],
                                 blen[3]};
  for (int k = 0; k < SEC_COUNT && st == AMPC_OK; k++)
    st = write_section(fp, k, src[k], len[k], tmp);
  if (st != AMPC_OK)
    goto done;
  /* flushed and on disk before the rename: `path` is never a partial file */
  errno = 0;
  if (fflush(fp) != 0 || fsync(fileno(fp)) != 0) {
    st = write_failed(tmp);
    goto done;
  }
  errno = 0;
  if (fclose(fp) != 0) {
    fp = NULL;
    st = write_failed(tmp);
    goto done;
  }
  fp = NULL;
  if (rename(tmp, path) != 0)
    st = ampc_fail(AMPC_ERR_IO, "%s: cannot rename %s to it", path, tmp);
done:
  if (fp)
    fclose(fp);
  if (st != AMPC_OK && tmp)
    remove(tmp);
  free(tmp);
  free(le);
  for (int t = 0; t < AMPC__DS_TEXTS; t++)
    free(blob[t]);
  return st;
}
