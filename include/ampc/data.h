/*
 * ampc/data.h: datasets (DESIGN.md section 1, src/data/).
 *
 * The image-text dataset (emoji pairs, docs/DATA.md): every sample is one
 * emoji image in one artwork style with its caption (CLDR label + keywords)
 * as word tokens, its CLDR group as class label, its concept id (the same for
 * both styles of an emoji) and its split:
 *   AMPC_SPLIT_TRAIN      Google (Noto) images of the training concepts
 *   AMPC_SPLIT_NEW_STYLE  Twitter (Twemoji) images of the training concepts
 *   AMPC_SPLIT_ZERO_SHOT  both styles of the held-out concepts (captions never
 *                         seen in training)
 * Image-only datasets (Fashion-MNIST) use the same struct with seq_len = 0.
 */
#ifndef AMPC_DATA_H
#define AMPC_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ampc_split {
  AMPC_SPLIT_TRAIN = 0,
  AMPC_SPLIT_NEW_STYLE = 1,
  AMPC_SPLIT_ZERO_SHOT = 2,
  AMPC_SPLIT_TEST = 3, /* image-only datasets: the test set */
  AMPC_SPLIT_VAL = 4,  /* a packed dataset's val split (include/ampc/shards.h), in memory
                        * only: never in a dataset file */
} ampc_split;

enum { AMPC_TOKEN_PAD = 0, AMPC_TOKEN_UNK = 1 };

typedef struct ampc_dataset {
  int32_t n;                       /* samples */
  int32_t height, width, channels; /* image shape (HWC, uint8) */
  int32_t seq_len;                 /* tokens per caption, padded with AMPC_TOKEN_PAD (0: no text) */
  int32_t vocab;                   /* token ids are in [0, vocab) */
  int32_t n_classes;
  uint8_t *images;    /* [n, height, width, channels] */
  int32_t *tokens;    /* [n, seq_len] or NULL */
  int32_t *label;     /* [n] class in [0, n_classes) */
  int32_t *concept;   /* [n] concept id (or the sample index) */
  uint8_t *split;     /* [n] ampc_split */
  uint8_t *style;     /* [n] artwork style, an index into style_names (0 for image-only) */
  char **words;       /* [vocab] token strings, or NULL */
  char **class_names; /* [n_classes] or NULL */
  char **captions;    /* [n] the caption text, or NULL */
  int32_t n_styles;   /* entries of style_names (0 when it is NULL) */
  char **style_names; /* [n_styles] ("google", "twitter", "openmoji", ...), or NULL: then
                       * style is 0 or 1, read as google / twitter (dataset files of
                       * version 1, image-only datasets) */
  void *owner_;       /* internal: backing allocation */
} ampc_dataset;

/* Load a dataset file written by `ampc data emoji` (layout in docs/DATA.md:
 * magic "AMPCDS01", version, sizes, zlib-compressed sections). Everything is
 * validated (magic, version, sizes against the file length, token ids < vocab,
 * labels < n_classes, splits known) before use. Errors: AMPC_ERR_IO (cannot
 * read), AMPC_ERR_FORMAT (message names the file and the problem),
 * AMPC_ERR_NOMEM. */
ampc_status ampc_dataset_load(const char *path, ampc_dataset *out);
/* The same from memory (`name` is used in messages). */
ampc_status ampc_dataset_load_mem(const void *data, size_t size, const char *name,
                                  ampc_dataset *out);
/* The emoji dataset compiled into the library (the bundled default), or an
 * error when the build has none. */
ampc_status ampc_dataset_load_default(ampc_dataset *out);
void ampc_dataset_free(ampc_dataset *d);

/* Write d as a dataset file (docs/DATA.md) that ampc_dataset_load reads back
 * identically: every section zlib-compressed at level 9, no timestamps, so the
 * same dataset gives the same bytes. d is validated as the loader would (token
 * ids < vocab, labels < n_classes, known splits, string counts); the file is
 * written to "<path>.tmp" and renamed. Errors: AMPC_ERR_INVALID_ARG (d is not
 * valid: the message says which field), AMPC_ERR_IO (naming the file),
 * AMPC_ERR_NOMEM. */
ampc_status ampc_dataset_save(const ampc_dataset *d, const char *path);

/* The name of style `style` of d ("google", "twitter", "apple", "facebook",
 * "openmoji"): d->style_names[style], or for a dataset without style names
 * (version-1 files) "google" / "twitter" for 0 / 1 of an image-text dataset.
 * NULL when d has no such style. */
const char *ampc_dataset_style_name(const ampc_dataset *d, int style);
/* The index of the style called `name`, or -1. */
int ampc_dataset_find_style(const ampc_dataset *d, const char *name);
/* Choose which artwork style is held out (the "new style" split): every image
 * of a training concept becomes AMPC_SPLIT_NEW_STYLE when its style is `style`
 * and AMPC_SPLIT_TRAIN otherwise; zero-shot and test samples are unchanged.
 * So the model trains on every other style and is evaluated on one it never
 * saw. Errors: AMPC_ERR_INVALID_ARG (not an image-text dataset, no such
 * style, or the style has no images of the training concepts; a run refuses
 * data left with nothing to train on). */
ampc_status ampc_dataset_hold_out_style(ampc_dataset *d, int style);

/* ---- preparing the emoji dataset (src/data/emoji_prep.c) ------------------ */

enum {
  AMPC_EMOJI_SRC_SIZE = 64, /* source PNGs are 64x64 */
  AMPC_EMOJI_SIZE = 32,     /* dataset images are 32x32x3 */
  AMPC_EMOJI_SEQ_LEN = 24   /* caption tokens per sample */
};

/* Decode a 64x64 emoji PNG (any colour type and bit depth: palette, gray,
 * gray+alpha, RGB, RGBA, tRNS, 16-bit), composite it over white and
 * downsample it by 2x2 box averaging: out [32, 32, 3] uint8 RGB, HWC. With
 * each source pixel as 8-bit (r, g, b, a) (16-bit channels scaled to 8 bits
 * with libpng's png_set_scale_16, i.e. v*255/65535 rounded), every output
 * channel is computed exactly in integers:
 *   N = sum over the 2x2 block of (c*a + 255*(255 - a))   (= 255 * composited)
 *   out = floor((N + 510) / 1020)   (the exact mean, rounded half up)
 * Errors: AMPC_ERR_IO (cannot open), AMPC_ERR_FORMAT (not a PNG, corrupt or
 * truncated data, or not 64x64), each message naming the file. */
ampc_status ampc_emoji_png_load(const char *path, uint8_t *out);

/* What ampc_emoji_prepare did, for the report of `ampc data emoji`. */
typedef struct ampc_emoji_prep_stats {
  int32_t datasource_entries;   /* entries of emoji-datasource's emoji.json */
  int32_t emojibase_entries;    /* top-level entries of emojibase en/data.json */
  int32_t joined_unified;       /* joined on emoji-datasource `unified` */
  int32_t joined_non_qualified; /* joined only through `non_qualified` */
  int32_t skipped_unmatched;    /* no emojibase entry with either hexcode */
  int32_t skipped_duplicate;    /* emojibase entry already joined to another */
  int32_t skipped_no_group;     /* emojibase entry without a `group` */
  int32_t skipped_component;    /* group 2, "component" (skin tones, hair) */
  int32_t skipped_no_image;     /* an image missing in one of the styles */
  int32_t missing_in_style[8];  /* of those, by the first style (in the given order) lacking it */
  int32_t styles;               /* styles in the dataset */
  int32_t concepts, train_concepts, zero_shot_concepts;
  int32_t max_caption_words;  /* longest caption before truncation */
  int32_t truncated_captions; /* captions longer than AMPC_EMOJI_SEQ_LEN */
} ampc_emoji_prep_stats;

/* Build the emoji dataset from the unpacked npm packages (each directory is a
 * package root, the "package/" folder of the .tgz):
 *   google_dir     emoji-datasource-google: emoji.json, img/google/64/<image>
 *   twitter_dir    emoji-datasource-twitter: emoji.json, img/twitter/64/<image>
 *   emojibase_dir  emojibase-data: en/data.json
 * The join, captions, vocabulary, classes, splits and sample order are
 * documented in docs/DATA.md; the same as ampc_emoji_prepare_styles with
 * google, twitter and twitter held out. out is allocated as by ampc_dataset_load (free
 * with ampc_dataset_free); stats may be NULL. Errors: AMPC_ERR_IO (a file is
 * missing), AMPC_ERR_FORMAT (bad JSON or PNG, naming the file),
 * AMPC_ERR_NOMEM. */
ampc_status ampc_emoji_prepare(const char *google_dir, const char *twitter_dir,
                               const char *emojibase_dir, ampc_dataset *out,
                               ampc_emoji_prep_stats *stats);

enum { AMPC_EMOJI_MAX_STYLES = 8 };

/* One artwork style for ampc_emoji_prepare_styles: its name and the root of
 * its unpacked package ("package/" of the .tgz):
 *   "google", "twitter", "apple", "facebook"
 *       emoji-datasource-<name>@16.0.0: emoji.json (has_img_<name>),
 *       img/<name>/64/<image>
 *   "openmoji"
 *       a directory 64/ of 64x64 PNGs named <HEXCODE>.png by the emojibase
 *       hexcode (upper case), which `ampc data emoji` renders from the
 *       openmoji@17.0.0 package's color/svg/<HEXCODE>.svg */
typedef struct ampc_emoji_source {
  const char *style;
  const char *dir;
} ampc_emoji_source;

/* Build the emoji dataset from n_src styles (1..AMPC_EMOJI_MAX_STYLES, each
 * at most once, at least one emoji-datasource style: the first of them lists
 * the emoji, in its emoji.json's order) and emojibase-data (en/data.json).
 * A concept is kept when every style has its image. Samples: for each style
 * in the given order its images of the training concepts (split TRAIN, or
 * NEW_STYLE for style index held_out; -1: none held out), then for each style
 * its images of the held-out concepts (ZERO_SHOT). style_names are the
 * styles' names. The other rules are those of ampc_emoji_prepare (docs/DATA.md).
 * Errors: AMPC_ERR_INVALID_ARG (unknown or repeated style, no datasource
 * style), AMPC_ERR_IO, AMPC_ERR_FORMAT (naming the file), AMPC_ERR_NOMEM. */
ampc_status ampc_emoji_prepare_styles(const ampc_emoji_source *src, int n_src,
                                      const char *emojibase_dir, int held_out, ampc_dataset *out,
                                      ampc_emoji_prep_stats *stats);

/* Fashion-MNIST from the gzipped IDX files in dir (Debian's
 * dataset-fashion-mnist: /usr/share/datasets/fashion-mnist/): 60000 training
 * images (split TRAIN) then 10000 test images (split TEST), 28x28x1, 10
 * classes with their names. Errors: AMPC_ERR_IO naming the missing file,
 * AMPC_ERR_FORMAT (bad magic, counts or sizes). */
ampc_status ampc_fashion_mnist_load(const char *dir, ampc_dataset *out);

/* Synthetic classification data (src/data/synth.c): `classes` Gaussian blobs
 * in R^in with centres drawn N(0, sep^2) and unit noise, from seed. x [n, in]
 * FP32, y [n] in [0, classes). */
void ampc_synth_blobs(int64_t n, int64_t in, int64_t classes, float sep, uint64_t seed, float *x,
                      int32_t *y);

/* ---- sampling and batching (src/data/sampler.c, src/data/batch.c) ---------------- */

/* A permutation of [0, n) per epoch, derived from (seed, epoch) only (a
 * Fisher-Yates shuffle driven by ampc_rng seeded with seed * 0x9E3779B97F4A7C15
 * + epoch), so a run resumed at any step sees the batches an uninterrupted
 * run would, whatever the thread count. */
typedef struct ampc_sampler {
  int64_t n, epoch;
  int64_t *perm; /* [n] */
  uint64_t seed;
} ampc_sampler;

/* Errors: AMPC_ERR_INVALID_ARG (n < 1), AMPC_ERR_NOMEM. */
ampc_status ampc_sampler_init(ampc_sampler *s, int64_t n, uint64_t seed);
void ampc_sampler_free(ampc_sampler *s);
/* The sample index (in [0, n)) of global draw number j >= 0: epoch j / n,
 * position j % n of that epoch's permutation. */
int64_t ampc_sampler_index(ampc_sampler *s, int64_t j);

/* The groups the sampler permutes: group g's members are idx[off[g] ..
 * off[g + 1]) (sample or row indices; n of them in all, count groups). */
typedef struct ampc_sample_groups {
  int64_t n, count;
  int64_t *idx; /* [n] */
  int64_t *off; /* [count + 1] */
} ampc_sample_groups;
/* The training split of D grouped by concept id: the groups in the order of
 * their first sample, each group's samples in dataset order (a concept's
 * training images in each style; one sample per concept gives the training
 * split in order). Errors: AMPC_ERR_INVALID_ARG, AMPC_ERR_NOMEM. */
ampc_status ampc_sample_groups_concepts(ampc_sample_groups *g, const ampc_dataset *D);
/* n rows, one per group (dense features). Errors: as above. */
ampc_status ampc_sample_groups_rows(ampc_sample_groups *g, int64_t n);
void ampc_sample_groups_free(ampc_sample_groups *g);

/* A 64-bit hash of (seed, pos) (splitmix64's finaliser over a mix of the
 * two): which member of a group a position draws, its shift, the matching
 * head's and MLM's seeds. */
uint64_t ampc_sample_hash(uint64_t seed, int64_t pos);
/* The sample at position pos of a run's sequence (iteration * batch +
 * slot): the sampler's group, then one of its members picked by
 * *h = ampc_sample_hash(seed, pos) (the shift takes its high bits). */
int64_t ampc_sample_draw(ampc_sampler *s, const ampc_sample_groups *g, uint64_t seed, int64_t pos,
                         uint64_t *h);

/* dst = src [h, w, c] uint8 translated by (dx, dy) in [-s, s]^2 (from the bits
 * r), the uncovered border filled with src's top-left pixel (the background:
 * white for the emoji, black for Fashion-MNIST). A translation keeps what an
 * emoji means (a flip or a colour change would not: direction and colour are
 * in the captions). */
void ampc_image_shift(uint8_t *dst, const uint8_t *src, int32_t h, int32_t w, int32_t c, int s,
                      uint64_t r);

/* One micro-batch's buffers, allocated once: image-text samples (images
 * [cap, img_sz] uint8, tokens [cap, seq_len] or NULL without captions,
 * labels [cap]) or dense rows (features [cap, dim] FP32, labels [cap]). */
typedef struct ampc_batch_buffers {
  int64_t cap, img_sz, seq_len, dim;
  uint8_t *images;
  int32_t *tokens, *labels;
  float *features;
} ampc_batch_buffers;
/* Errors: AMPC_ERR_INVALID_ARG, AMPC_ERR_NOMEM (nothing left allocated). */
ampc_status ampc_batch_buffers_pairs(ampc_batch_buffers *bb, const ampc_dataset *D, int64_t cap);
ampc_status ampc_batch_buffers_rows(ampc_batch_buffers *bb, int64_t dim, int64_t cap);
void ampc_batch_buffers_free(ampc_batch_buffers *bb);
/* Row r (< cap) = D's sample src: its image (shifted by up to `shift`
 * pixels by the bits `bits` when shift > 0, ampc_image_shift), tokens and
 * label. */
void ampc_batch_put_pair(ampc_batch_buffers *bb, const ampc_dataset *D, int64_t r, int64_t src,
                         int shift, uint64_t bits);
/* Row r = row src of the features x [.., dim] and its label y[src]. */
void ampc_batch_put_row(ampc_batch_buffers *bb, const float *x, const int32_t *y, int64_t r,
                        int64_t src);

#ifdef __cplusplus
}
#endif
#endif
