/*
 * src/data/ingest/image.h: decoding a user's image (JPEG, PNG, WebP) to one
 * square sRGB uint8 tile for a packed dataset (not public API).
 *
 * The decoders are the field's libraries: libjpeg-turbo (TurboJPEG API, with
 * its DCT scaling so a large JPEG is decoded at 1/2, 1/4 or 1/8 size when
 * that still covers the target), libpng, libwebp. ampc's part is the
 * resampling: the shorter side is resized to `size` with an area (box)
 * filter with exact fractional coverage (antialiased: every source pixel
 * contributes in proportion to the area it covers; when enlarging it is
 * bilinear), then the centre size x size square is cut. Alpha is composited
 * over white, gray is replicated to RGB.
 */
#ifndef AMPC_DATA_INGEST_IMAGE_H
#define AMPC_DATA_INGEST_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/status.h"

typedef enum ampc_image_format {
  AMPC_IMAGE_UNKNOWN = 0,
  AMPC_IMAGE_JPEG = 1,
  AMPC_IMAGE_PNG = 2,
  AMPC_IMAGE_WEBP = 3,
} ampc_image_format;

/* The default pixel limit (width * height of the encoded image, checked from
 * its header before anything is decoded): a decompression bomb is refused. */
#define AMPC_IMAGE_MAX_PIXELS (64ll * 1024 * 1024)

/* The format from the first bytes (magic numbers: FF D8 FF; 89 P N G; RIFF
 * ....WEBP), AMPC_IMAGE_UNKNOWN otherwise. */
ampc_image_format ampc_image_sniff(const void *data, size_t size);
/* "jpeg", "png", "webp", "unknown" */
const char *ampc_image_format_name(ampc_image_format f);

/* What was decoded (for reports): the source size and format. */
typedef struct ampc_image_info {
  ampc_image_format format;
  int32_t width, height; /* of the encoded image */
} ampc_image_info;

/* Why an image was refused (ampc_image_square's *why; the pack report counts
 * samples by these). */
typedef enum ampc_image_error {
  AMPC_IMAGE_OK = 0,
  AMPC_IMAGE_EMPTY,     /* zero bytes */
  AMPC_IMAGE_FORMAT,    /* not a JPEG, PNG or WebP */
  AMPC_IMAGE_CORRUPT,   /* the decoder failed: corrupt or truncated data */
  AMPC_IMAGE_TOO_LARGE, /* width * height above max_pixels (or a side above 65535) */
} ampc_image_error;

/* Decode the encoded image data [size bytes] and produce out [s, s, 3] uint8
 * RGB, HWC, s = `size` (8..1024): shorter side resized to s (area filter;
 * bilinear when enlarging), centre crop, alpha over white, gray to RGB.
 * max_pixels <= 0 means AMPC_IMAGE_MAX_PIXELS. `name` (a path or tar member)
 * is used in messages. Thread-safe (no global state), so the pack decodes on
 * every core. info and why may be NULL.
 * Errors: AMPC_ERR_FORMAT (message "NAME: <problem>", *why says which),
 * AMPC_ERR_INVALID_ARG (size out of range), AMPC_ERR_NOMEM. */
ampc_status ampc_image_square(const void *data, size_t size, const char *name, int32_t s,
                              int64_t max_pixels, uint8_t *out, ampc_image_info *info,
                              ampc_image_error *why);

/* The resampler alone (exposed for tests): src [h, w, 3] uint8 -> out [s, s, 3],
 * shorter side to s, centre crop, as above. The longer side L becomes
 * L' = max(s, round(L s / shorter)) and the crop starts at floor((L' - s) / 2).
 * Exact integer arithmetic (area weights are overlap lengths, bilinear weights
 * multiples of 1/(2 n') for a resized length n'), one rounding at the end, half
 * up. h, w in 1..65535, s in 1..4096. Errors: AMPC_ERR_INVALID_ARG, AMPC_ERR_NOMEM. */
ampc_status ampc_image_resize_square(const uint8_t *src, int32_t h, int32_t w, int32_t s,
                                     uint8_t *out);

#endif
