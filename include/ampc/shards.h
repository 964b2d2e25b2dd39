/*
 * ampc/shards.h: a user's image-text data, packed and streamed
 * (DESIGN.md section 1, src/data/; the format is in docs/DATA.md).
 *
 * `ampc data pack` turns captioned images (CSV/TSV, JSON Lines, WebDataset
 * tar shards, an image folder with metadata) into a packed dataset: a folder
 * with manifest.json, tokenizer.model (SentencePiece) and shard files of
 * fixed-size records that are read through mmap. `ampc train --data DIR`
 * streams the training split from the shards (WebDataset-style: shards in a
 * seeded order per epoch, samples shuffled within a buffer of whole shards)
 * and evaluates on the val split, which is held in memory.
 *
 * A shard file: a 64-byte header (magic "AMPCSH01", little-endian u32 fields
 * version, header_bytes, image_size, channels, seq_len, record_bytes, then
 * u64 n_train, n_val), then n_train training records followed by n_val val
 * records. A record: image [image_size, image_size, channels] uint8 HWC,
 * tokens [seq_len] int32 LE (padded with 0), label int32 LE (the class in
 * the manifest's sorted "classes"; 0 when the pack has no labels), a
 * reserved uint32 (0), zero bytes to a multiple of 8.
 *
 * Beside each shard, shard-NNNNN.keys.json (named with its SHA-256 in the
 * shard's manifest entry as "keys" and "keys_sha256") holds the records'
 * sample keys in record order (a JSON array of strings): the key a sample's
 * split was decided on, the image path as written in the listing or
 * SHARD/KEY in a WebDataset (its bytes as they are, UTF-8 or not). Packs
 * made before keys were kept have none.
 */
#ifndef AMPC_SHARDS_H
#define AMPC_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ampc/data.h"
#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMPC_SHARD_MAGIC "AMPCSH01"
enum { AMPC_SHARD_VERSION = 1, AMPC_SHARD_HEADER_BYTES = 64 };

/* The bytes of one record for these sizes (a multiple of 8). */
int64_t ampc_shard_record_bytes(int32_t image_size, int32_t channels, int32_t seq_len);

/* ---- packing (src/data/ingest/pack.c) ------------------------------------------------- */

typedef struct ampc_pack_options {
  const char *input;          /* a .csv/.tsv/.jsonl, a folder with metadata.jsonl|csv, a .tar, a
                               * brace pattern of tars or a comma-separated list of tars */
  const char *out_dir;        /* created; an existing complete pack there is never overwritten */
  const char *image_key;      /* NULL: the source's default (src/data/ingest/source.h) */
  const char *caption_key;    /* NULL: the source's default */
  const char *label_key;      /* NULL: no labels */
  const char *tokenizer;      /* a SentencePiece .model to use, or NULL: train one */
  const char *tokenizer_type; /* "bpe" (default) or "unigram" when training */
  const char *prompt;         /* zero-shot prompt with "{label}" (default "a photo of a {label}") */
  int32_t image_size;         /* side of the square images (default 64) */
  int32_t seq_len;            /* tokens per caption (default 32) */
  int32_t vocab;              /* pieces of a trained tokenizer (default 4000) */
  int32_t shard_samples;      /* source samples per shard (default 4096) */
  double val_fraction;        /* share of samples in the val split (default 0.05) */
  uint64_t seed;              /* of the split hash (default 0) */
  int64_t max_pixels;         /* decompression-bomb limit (default AMPC_IMAGE_MAX_PIXELS) */
  int threads;                /* decoding threads (0: every core) */
  bool strict;                /* stop at the first bad sample instead of skipping it */
  /* progress: called after each shard with samples done so far (NULL: none) */
  void (*progress)(void *user, int64_t done, int64_t total, int64_t skipped);
  void *user;
} ampc_pack_options;

/* What a pack did (also in the manifest). */
typedef struct ampc_pack_report {
  int64_t read;               /* source samples seen */
  int64_t n_train, n_val;     /* samples packed */
  int64_t skipped;            /* samples skipped, all reasons */
  int64_t skipped_by[32];     /* by reason: index = ampc_pack_skip_reason() order */
  int64_t truncated_captions; /* captions with more tokens than seq_len (cut) */
  int64_t shards;
  int64_t resumed_shards; /* shards found complete from an earlier, killed pack */
  int32_t vocab, n_classes;
  double seconds, decode_seconds;
} ampc_pack_report;

/* The name of skip reason i (< ampc_pack_skip_reasons()): "missing_file",
 * "corrupt_image", ... */
const char *ampc_pack_skip_reason(int i);
int ampc_pack_skip_reasons(void);

/* Pack o->input into o->out_dir (see the top of this file and docs/DATA.md).
 * Two passes over the source: the first reads captions and labels (training
 * captions train the tokenizer, labels become classes in sorted order), the
 * second decodes (o->threads threads) and writes the shards. Each sample's
 * split is val when hash(seed, key) % 1e6 < val_fraction * 1e6 (key: the image
 * path as written, or SHARD/KEY in a WebDataset). Every file is written to a
 * temporary name and renamed; pack.state records finished shards, so a killed
 * pack run again with the same options goes on where it stopped.
 * Errors: AMPC_ERR_INVALID_ARG (options; an out_dir holding a finished pack
 * or one of other options), AMPC_ERR_IO, AMPC_ERR_FORMAT (the source is
 * unusable; with strict, the first bad sample: the message names it and the
 * reason), AMPC_ERR_NOMEM. rep may be NULL. */
ampc_status ampc_pack(const ampc_pack_options *o, ampc_pack_report *rep);

/* ---- reading (src/data/shards.c) ---------------------------------------------------- */

typedef struct ampc_shards ampc_shards;

typedef struct ampc_shards_info {
  int32_t image_size, channels, seq_len, vocab, n_classes;
  int64_t n_train, n_val, n_shards;
  int64_t bad_shards;                 /* shards left out: missing, short, or a SHA-256 mismatch */
  const char *const *bad_shard_notes; /* [bad_shards] "PATH: left out (why)" */
  const char *const *class_names;     /* [n_classes] or NULL */
  const int32_t *class_prompts; /* [n_classes, seq_len] the prompt's tokens per class, or NULL */
  const char *tokenizer;        /* path of the tokenizer model */
  const char *id;       /* 16 hex digits: FNV-1a 64 of the manifest and the shards left out (a
                         * checkpoint records it; a resume on other data is refused) */
  int64_t keyed_shards; /* readable shards whose manifest entry names a keys file (equal to
                         * n_shards: every training sample's key can be asked for; whether
                         * the file is still there and intact shows at ampc_shards_key) */
} ampc_shards_info;

/* Open a packed dataset: `path` is its folder or its manifest.json. Every
 * shard is mapped read-only (mmap); with verify, each shard's SHA-256 is
 * checked against the manifest (a mismatch leaves the shard out and counts
 * it, or with strict fails). Errors: AMPC_ERR_IO (no manifest, a shard
 * missing with strict), AMPC_ERR_FORMAT (bad manifest or shard header, a
 * mismatch with strict, no training samples left), AMPC_ERR_NOMEM. */
ampc_status ampc_shards_open(ampc_shards **out, const char *path, bool verify, bool strict);
void ampc_shards_close(ampc_shards *s);
const ampc_shards_info *ampc_shards_get_info(const ampc_shards *s);
/* The val split as an in-memory dataset (split AMPC_SPLIT_VAL; concept = the
 * caption: equal token sequences share one; labels; class names), at most
 * max_samples of it (0: all), for evaluation. Free with ampc_dataset_free. */
ampc_status ampc_shards_val_dataset(ampc_shards *s, int64_t max_samples, ampc_dataset *out);
/* An empty (n = 0) dataset with the pack's shapes, for the model's sizes. */
ampc_status ampc_shards_shape_dataset(const ampc_shards *s, ampc_dataset *out);

/* The user's key of training record `record` of shard `shard` (the pair
 * ampc_stream_index gives: shard an index into the manifest's shard list,
 * record into that shard's training records, which are its first n_train
 * records) into buf [n bytes], NUL-terminated; a longer key is cut to n - 1
 * bytes (possibly inside a UTF-8 sequence), so strlen(buf) == n - 1 may mean
 * cut. The key is the one the pack split on (this file's top):
 * the image path as written in the CSV/JSONL/image folder listing, or
 * SHARD/KEY in a WebDataset. The shard's keys file is read, checked (its
 * SHA-256 against the manifest when OpenSSL is built in, the key count
 * against the shard's records) and kept on the first call for that shard,
 * until ampc_shards_close; a failed read is tried again at the next call.
 * Not thread-safe: one caller at a time per ampc_shards (a stream's
 * prefetch thread does not touch the keys, so it may run meanwhile).
 * On any error buf holds "" (when buf and n allow).
 * Errors: AMPC_ERR_INVALID_ARG (s or buf NULL, n 0, shard or record out of
 * range), AMPC_ERR_NOT_FOUND (the manifest names no keys file for the shard,
 * a pack made before keys were kept, or the file is gone: the key is
 * unknown), AMPC_ERR_FORMAT (the keys file or its manifest entry is
 * damaged: the message names the file and what is wrong), AMPC_ERR_IO,
 * AMPC_ERR_NOMEM. */
ampc_status ampc_shards_key(ampc_shards *s, int64_t shard, int64_t record, char *buf, size_t n);

/* The training order: position j >= 0 of a run's sequence is sample
 * ampc_stream_index(j) of the training split. Epoch e = j / n_train; the
 * shards are permuted by (seed, e); consecutive groups of `window` shards in
 * that order form shuffle buffers whose samples are permuted by (seed, e,
 * group). So the order is a function of (seed, j) only: a run resumed at any
 * step sees the batches an uninterrupted run would, and the memory touched at
 * a time is one buffer of shards (window * shard size), not the dataset. */
typedef struct ampc_stream ampc_stream;
/* buffer_samples: shuffle buffer size (whole shards, at least one; 0: 8192).
 * prefetch: start a thread that copies the next micro-batch's records while
 * the step runs. Errors: AMPC_ERR_INVALID_ARG, AMPC_ERR_NOMEM. */
ampc_status ampc_stream_create(ampc_stream **out, ampc_shards *s, uint64_t seed,
                               int64_t buffer_samples, bool prefetch);
void ampc_stream_free(ampc_stream *st);
/* (shard, record) of position j */
void ampc_stream_index(ampc_stream *st, int64_t j, int64_t *shard, int64_t *record);
/* Positions base .. base + n - 1 into images [n, img_sz] uint8, tokens
 * [n, seq_len] int32, labels [n] int32 (-1 none; any may be NULL), then start
 * prefetching n positions from next_base (< 0: none). Returns the
 * milliseconds this call waited for data (0 when the prefetch had it ready). */
double ampc_stream_fill(ampc_stream *st, int64_t base, int64_t n, uint8_t *images, int32_t *tokens,
                        int32_t *labels, int64_t next_base);

#ifdef __cplusplus
}
#endif
#endif
