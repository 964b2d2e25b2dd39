/*
 * src/data/ingest/source.h: reading a user's image-text pairs in the layouts
 * people have them (not public API):
 *   - CSV/TSV with an image path column and a caption column (OpenCLIP's
 *     --csv-img-key / --csv-caption-key; RFC 4180 quoting through libcsv;
 *     paths relative to the CSV's folder; ".tsv" is tab-separated);
 *   - JSON Lines with "image" and "caption" (or "text") keys (LLaVA /
 *     Hugging Face style; cJSON);
 *   - WebDataset tar shards: members KEY.jpg|jpeg|png|webp and KEY.txt
 *     (img2dataset / OpenCLIP), grouped by KEY (the member name up to the
 *     first dot of its base name), read with libarchive; a brace pattern
 *     "shards-{000..099}.tar" or a comma-separated list of tars;
 *   - an image folder with metadata.jsonl or metadata.csv (Hugging Face
 *     imagefolder: key "file_name" for the image, relative to the folder).
 * An optional label column/key names each sample's class (a string).
 */
#ifndef AMPC_DATA_INGEST_SOURCE_H
#define AMPC_DATA_INGEST_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/status.h"

typedef enum ampc_source_kind {
  AMPC_SOURCE_CSV = 0,
  AMPC_SOURCE_JSONL = 1,
  AMPC_SOURCE_WEBDATASET = 2,
  AMPC_SOURCE_IMAGEFOLDER = 3,
} ampc_source_kind;

/* Why one sample could not be read (it is then skipped and counted, or with
 * --strict the pack stops naming it). The image decoder adds its own reasons
 * (src/data/ingest/image.h). */
typedef enum ampc_sample_fault {
  AMPC_FAULT_NONE = 0,
  AMPC_FAULT_MISSING_FILE,  /* the image path does not exist / cannot be opened */
  AMPC_FAULT_EMPTY_FILE,    /* the image has zero bytes */
  AMPC_FAULT_FILE_TOO_BIG,  /* the image file is above AMPC_SOURCE_MAX_FILE bytes */
  AMPC_FAULT_BAD_ROW,       /* a CSV row or JSON line that does not parse, or lacks a field */
  AMPC_FAULT_CAPTION_UTF8,  /* the caption is not valid UTF-8 */
  AMPC_FAULT_CAPTION_EMPTY, /* the caption is empty (or only white space) */
  AMPC_FAULT_NO_CAPTION,    /* a WebDataset key without a .txt member */
  AMPC_FAULT_NO_IMAGE,      /* a WebDataset key without an image member */
  AMPC_FAULT_TRUNCATED_TAR, /* a tar ended early or is corrupt: the rest of that shard is lost */
  AMPC_FAULT_COUNT
} ampc_sample_fault;
/* "missing_file", "empty_file", ... (the keys of the pack report's "skipped") */
const char *ampc_sample_fault_name(ampc_sample_fault f);

#define AMPC_SOURCE_MAX_FILE (256ll * 1024 * 1024)

typedef struct ampc_source_options {
  const char *image_key;   /* CSV column / JSON key of the image path; NULL: "filepath" for CSV,
                            * "image" for JSONL, "file_name" for an image folder (unused for
                            * WebDataset: the first .jpg/.jpeg/.png/.webp member) */
  const char *caption_key; /* NULL: "title" for CSV, "caption" then "text" for JSONL and
                            * an image folder, the .txt member for WebDataset (given: that
                            * column / key / member extension only) */
  const char *label_key;   /* NULL: no labels; for WebDataset the extension of a member
                            * holding the label text ("cls" reads KEY.cls; its surrounding
                            * white space is trimmed). With a label key, a sample without
                            * one is a BAD_ROW (a CSV without the column: AMPC_ERR_FORMAT);
                            * a JSON number is given as its decimal text */
  bool headers_only;       /* next() skips reading image bytes (image_size = 0): the first pass
                            * of a pack only needs captions and labels */
  bool force_kind;         /* true: read spec as `kind` whatever its name says (a path without
                            * an extension, e.g. a memfd's /proc/self/fd/N; a forced CSV is
                            * comma-separated unless the name ends in .tsv); false: from the spec */
  ampc_source_kind kind;   /* used only with force_kind */
} ampc_source_options;

/* One sample as read. Every pointer stays valid until the next call of
 * ampc_source_next or ampc_source_close. */
typedef struct ampc_source_item {
  const char *key;      /* unique in the source: the image path as written (CSV, JSONL,
                         * image folder; `where` for a record without one) or
                         * "SHARD/KEY" (WebDataset, SHARD the shard's base name; a
                         * shard's MISSING_FILE / TRUNCATED_TAR item: "SHARD") */
  const char *where;    /* for messages: "data.csv:12" (the listing as named in the spec
                         * and the physical line its record starts on) or
                         * "shard-003.tar:KEY" (the shard as named) */
  const uint8_t *image; /* the encoded image bytes, or NULL (fault, or headers_only) */
  size_t image_size;
  const char *caption;     /* NUL-terminated, as read (not trimmed; a WebDataset .txt loses its
                            * trailing line end), "" when there is none */
  const char *label;       /* NULL without a label key (or when the sample has none: a fault) */
  ampc_sample_fault fault; /* not NONE: the sample is bad; fault_msg says why */
  const char *fault_msg;   /* "data.csv:12: images/cat.jpg: no such file"; "" when fault is NONE */
} ampc_source_item;

typedef struct ampc_source ampc_source;

/* Open `spec`: a .csv, .tsv or .jsonl file; a folder holding metadata.jsonl or
 * metadata.csv; a .tar file (also .tar.gz/.tgz/.tar.bz2/.tar.xz/.tar.zst), a
 * brace pattern of tars ("a-{000..009}.tar", zero-padded ranges as written) or
 * a comma-separated list of tars (and patterns). The kind is chosen from the
 * spec (a folder, then the extension) unless o->force_kind; o may be NULL
 * (defaults above). Image paths are relative to the listing's folder. In a
 * list of shards, one that cannot be opened is a MISSING_FILE item, one that
 * is no tar a TRUNCATED_TAR item; a single shard that cannot be opened is
 * AMPC_ERR_IO.
 * Errors (the whole input is unusable, message names the file and problem):
 * AMPC_ERR_IO (cannot open), AMPC_ERR_FORMAT (a CSV header without the named
 * column: the message lists the columns there are; an empty file),
 * AMPC_ERR_INVALID_ARG (a spec that is none of the above, a bad brace
 * pattern), AMPC_ERR_NOMEM. */
ampc_status ampc_source_open(ampc_source **out, const char *spec, const ampc_source_options *o);
ampc_source_kind ampc_source_get_kind(const ampc_source *s);
/* The next sample: *done = true at the end (item untouched). A bad sample is
 * returned with item->fault set (never an error: the caller skips or stops).
 * Errors are only for the machine failing (AMPC_ERR_NOMEM, AMPC_ERR_IO on a
 * read error of the listing file itself). */
ampc_status ampc_source_next(ampc_source *s, ampc_source_item *item, bool *done);
void ampc_source_close(ampc_source *s);

/* Expand a brace pattern: "a-{000..012}.tar" -> "a-000.tar" ... "a-012.tar"
 * (the width of the first bound; one {..} range per pattern, or none: the
 * pattern itself). *out is malloc'ed, each string too (ampc_strings_free).
 * Errors: AMPC_ERR_INVALID_ARG (malformed, or more than 1,000,000 names). */
ampc_status ampc_brace_expand(const char *pattern, char ***out, int64_t *n);
void ampc_strings_free(char **v, int64_t n);

/* Is s [len bytes] valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF)? */
bool ampc_utf8_valid(const char *s, size_t len);

#endif
