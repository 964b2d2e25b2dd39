/*
 * src/data/data_internal.h: helpers shared by the dataset loader, the emoji
 * preparation and the Fashion-MNIST reader (not public API).
 *
 * Every ampc_dataset owns one allocation (owner_) that holds all its arrays
 * and strings, so ampc_dataset_free is a single free and a half-built dataset
 * never leaks.
 */
#ifndef AMPC_DATA_INTERNAL_H
#define AMPC_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/data.h"

/* Sanity limits on a dataset's sizes, checked before anything is allocated. */
#define AMPC_DS_MAX_N (1 << 24)
#define AMPC_DS_MAX_SIDE 4096
#define AMPC_DS_MAX_CHANNELS 4
#define AMPC_DS_MAX_SEQ_LEN 1024
#define AMPC_DS_MAX_VOCAB (1 << 24)
#define AMPC_DS_MAX_CLASSES 65536
#define AMPC_DS_MAX_STYLES 255 /* style ids are uint8 */

/* The string tables: 0 vocabulary words, 1 class names, 2 captions, 3 style
 * names (counts vocab, n_classes, n, n_styles). */
#define AMPC__DS_TEXTS 4

/* Check the size fields of d (n, height, width, channels, seq_len, vocab,
 * n_classes, n_styles) against the limits above. Returns NULL when they are fine, else a
 * static description of the first bad field. */
const char *ampc__dataset_check_sizes(const ampc_dataset *d);

/* Allocate the arrays of d from its size fields (already checked) in one
 * block: images, tokens (when seq_len > 0), label, concept, split, style, and
 * the string tables. text_bytes[k] (k = 0 vocabulary words, 1 class names,
 * 2 captions, 3 style names) is the byte size of a NUL-separated blob for that
 * table, 0 for none (the pointer array is then NULL too); text[k] receives the
 * blob. Everything is zeroed. Errors: AMPC_ERR_NOMEM. */
ampc_status ampc__dataset_alloc(ampc_dataset *d, const size_t text_bytes[AMPC__DS_TEXTS],
                                char *text[AMPC__DS_TEXTS]);

/* Point out[0..count) at the count NUL-terminated strings that fill blob
 * [len bytes] exactly. Returns 0 on success, -1 when the blob holds a
 * different number of strings or does not end with NUL. */
int ampc__split_strings(char *blob, size_t len, int32_t count, char **out);

/* A list of distinct words (src/data/caption_words.c). */
typedef struct ampc__wordlist {
  char **w;
  int n, cap;
} ampc__wordlist;
void ampc__wordlist_free(ampc__wordlist *l);
/* Split text into lower-cased words (maximal runs of word characters) and
 * append the new ones to l. -1: no memory. */
int ampc__add_words(ampc__wordlist *l, const char *text);

/* libpng's transforms to 8-bit RGBA for any colour type and depth (palette
 * and gray expanded, tRNS to alpha, 16 bits scaled by v * 255 / 65535
 * rounded, opaque alpha added, interlacing handled), then the info updated:
 * the emoji PNGs (src/data/emoji_png.c) and the user's (ingest/image.c).
 * Declared without <png.h>: png_structp is struct png_struct_def *. */
struct png_struct_def;
struct png_info_def;
void ampc__png_rgba8(struct png_struct_def *png, struct png_info_def *info);

#endif
