/*
 * src/data/ingest/image.c: one encoded image (JPEG, PNG, WebP) to a square
 * sRGB uint8 tile (ampc_image_square, image.h).
 *
 * Decoding is the field's libraries': TurboJPEG (with DCT scaling), libpng
 * from memory, libwebp. Every decoder gets its own per-call state, so calls
 * are thread-safe. The encoded width and height are read from the header and
 * checked against the pixel limit before any pixel buffer is allocated.
 *
 * The resampler is exact integer arithmetic. Along each axis an output
 * sample is a weighted sum of source samples with integer weights and a
 * per-axis integer denominator:
 * - shrinking (n source samples to m < n): the area (box) filter. Source
 *   sample i covers [i, i+1), output j covers [j n/m, (j+1) n/m); scaled by m,
 *   source i is [i m, (i+1) m) and output j is [j n, (j+1) n), so each weight
 *   is the integer overlap length and the weights of one output sum to n;
 * - enlarging (m > n): bilinear with half-pixel centres (align_corners =
 *   false, as PyTorch's and OpenCV's resize): output j samples source
 *   coordinate x = (j + 1/2) n/m - 1/2 = ((2j+1) n - m) / (2m), clamped to
 *   [0, n-1]; the two weights are in units of 1/(2m);
 * - equal sizes: the identity (one weight n, denominator n).
 * The two passes are combined without intermediate rounding: out =
 * round(sum_y wy sum_x wx v / (Dx Dy)), rounded half up in integers
 * (exact: no floating point anywhere). Bounds: Dx, Dy <= max(65535,
 * 2 * 65535 * 1024) so 255 * Dx * Dy < 2^64 (see resize_square's limits).
 */
#include "internal.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#include "data/data_internal.h"
#include "data/ingest/image.h"

/* the largest side any decoder is asked for (also the JPEG format's limit) */
#define IMG_MAX_SIDE 65535

ampc_image_format ampc_image_sniff(const void *data, size_t size) {
  const unsigned char *p = data;
  if (!p)
    return AMPC_IMAGE_UNKNOWN;
  if (size >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
    return AMPC_IMAGE_JPEG;
  if (size >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
    return AMPC_IMAGE_PNG;
  if (size >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
    return AMPC_IMAGE_WEBP;
  return AMPC_IMAGE_UNKNOWN;
}

const char *ampc_image_format_name(ampc_image_format f) {
  switch (f) {
  case AMPC_IMAGE_JPEG: return "jpeg";
  case AMPC_IMAGE_PNG: return "png";
  case AMPC_IMAGE_WEBP: return "webp";
  default: return "unknown";
  }
}

/* ---- resampling ------------------------------------------------------------ */

/* One axis's filter for the output samples [off, off + count) of a resize from
 * n to m samples: for output k, taps start[k]..start[k]+ntap[k]-1 with the
 * weights wt[first[k] ...]; every weight sums to den. */
typedef struct axis_filter {
  int32_t *start, *ntap, *first;
  uint32_t *wt;
  uint64_t den;
} axis_filter;

static void axis_free(axis_filter *a) {
  free(a->start);
  free(a->ntap);
  free(a->first);
  free(a->wt);
  memset(a, 0, sizeof *a);
}

/* Build the filter (see the file comment). n, m >= 1; 0 <= off, off + count <= m.
 * Returns 0, or -1 when out of memory. */
static int axis_build(axis_filter *a, int64_t n, int64_t m, int64_t off, int32_t count) {
  memset(a, 0, sizeof *a);
  /* a box output touches at most ceil(n/m) + 1 sources, bilinear 2 */
  const int64_t per = m < n ? (n + m - 1) / m + 1 : 2;
  a->start = malloc(sizeof *a->start * (size_t)count);
  a->ntap = malloc(sizeof *a->ntap * (size_t)count);
  a->first = malloc(sizeof *a->first * (size_t)count);
  a->wt = malloc(sizeof *a->wt * (size_t)(per * count));
  if (!a->start || !a->ntap || !a->first || !a->wt) {
    axis_free(a);
    return -1;
  }
  int32_t used = 0;
  for (int32_t k = 0; k < count; k++) {
    const int64_t j = off + k;
    a->first[k] = used;
    if (m == n) {
      a->den = (uint64_t)n;
      a->start[k] = (int32_t)j;
      a->ntap[k] = 1;
      a->wt[used++] = (uint32_t)n;
    } else if (m < n) {
      /* output [j n, (j+1) n) against sources [i m, (i+1) m) */
      a->den = (uint64_t)n;
      const int64_t lo = j * n, hi = (j + 1) * n;
      const int64_t i0 = lo / m, i1 = (hi - 1) / m; /* first and last source touched */
      a->start[k] = (int32_t)i0;
      a->ntap[k] = (int32_t)(i1 - i0 + 1);
      for (int64_t i = i0; i <= i1; i++) {
        const int64_t s0 = i * m > lo ? i * m : lo, s1 = (i + 1) * m < hi ? (i + 1) * m : hi;
        a->wt[used++] = (uint32_t)(s1 - s0);
      }
    } else {
      /* x = ((2j+1) n - m) / (2m), clamped to [0, n-1] */
      const int64_t d = 2 * m;
      const int64_t num = (2 * j + 1) * n - m;
      a->den = (uint64_t)d;
      if (num <= 0) {
        a->start[k] = 0;
        a->ntap[k] = 1;
        a->wt[used++] = (uint32_t)d;
      } else {
        const int64_t i0 = num / d, f = num - i0 * d;
        if (i0 >= n - 1) {
          a->start[k] = (int32_t)(n - 1);
          a->ntap[k] = 1;
          a->wt[used++] = (uint32_t)d;
        } else {
          a->start[k] = (int32_t)i0;
          a->ntap[k] = 2;
          a->wt[used++] = (uint32_t)(d - f);
          a->wt[used++] = (uint32_t)f;
        }
      }
    }
  }
  return 0;
}

/* The resized length of the longer side: round(L s / S) (half up), >= s. */
static int64_t long_side(int64_t l, int64_t sh, int64_t s) {
  int64_t r = (2 * l * s + sh) / (2 * sh);
  return r < s ? s : r;
}

ampc_status ampc_image_resize_square(const uint8_t *src, int32_t h, int32_t w, int32_t s,
                                     uint8_t *out) {
  if (!src || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_image_resize_square: NULL argument");
  if (h < 1 || w < 1 || h > IMG_MAX_SIDE || w > IMG_MAX_SIDE || s < 1 || s > 4096)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_image_resize_square: %dx%d -> %d is out of range (sides 1..%d, "
                     "target 1..4096)",
                     (int)w, (int)h, (int)s, IMG_MAX_SIDE);
  const int64_t sh = h < w ? h : w;
  const int64_t nw = w <= h ? s : long_side(w, sh, s);
  const int64_t nh = h < w ? s : long_side(h, sh, s);
  axis_filter fx, fy;
  if (axis_build(&fx, w, nw, (nw - s) / 2, s) != 0)
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_image_resize_square: out of memory");
  if (axis_build(&fy, h, nh, (nh - s) / 2, s) != 0) {
    axis_free(&fx);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_image_resize_square: out of memory");
  }
  uint64_t *row = malloc(sizeof *row * (size_t)s * 3); /* one source row, filtered along x */
  uint64_t *acc = malloc(sizeof *acc * (size_t)s * 3);
  if (!row || !acc) {
    free(row);
    free(acc);
    axis_free(&fx);
    axis_free(&fy);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_image_resize_square: out of memory");
  }
  const uint64_t den = fx.den * fy.den, half = den / 2;
  for (int32_t y = 0; y < s; y++) {
    memset(acc, 0, sizeof *acc * (size_t)s * 3);
    for (int32_t t = 0; t < fy.ntap[y]; t++) {
      const uint64_t wy = fy.wt[fy.first[y] + t];
      if (wy == 0)
        continue;
      const uint8_t *sr = src + (size_t)(fy.start[y] + t) * (size_t)w * 3;
      for (int32_t x = 0; x < s; x++) {
        const uint8_t *p = sr + (size_t)fx.start[x] * 3;
        const uint32_t *wx = fx.wt + fx.first[x];
        uint64_t r = 0, g = 0, b = 0;
        for (int32_t u = 0; u < fx.ntap[x]; u++, p += 3) {
          r += (uint64_t)wx[u] * p[0];
          g += (uint64_t)wx[u] * p[1];
          b += (uint64_t)wx[u] * p[2];
        }
        row[3 * x] = r;
        row[3 * x + 1] = g;
        row[3 * x + 2] = b;
      }
      for (int32_t i = 0; i < s * 3; i++)
        acc[i] += wy * row[i];
    }
    uint8_t *o = out + (size_t)y * (size_t)s * 3;
    for (int32_t i = 0; i < s * 3; i++) {
      const uint64_t v = (acc[i] + half) / den;
      o[i] = (uint8_t)(v > 255 ? 255 : v);
    }
  }
  free(row);
  free(acc);
  axis_free(&fx);
  axis_free(&fy);
  return AMPC_OK;
}

/* ---- shared ---------------------------------------------------------------- */

/* RGBA [n, 4] -> RGB [n, 3] in place, alpha over white, exactly:
 * out = (c a + 255 (255 - a) + 127) / 255. */
static void over_white(uint8_t *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const uint32_t a = buf[4 * i + 3];
    for (int c = 0; c < 3; c++) {
      const uint32_t v = buf[4 * i + (size_t)c];
      buf[3 * i + (size_t)c] = (uint8_t)((v * a + 255u * (255u - a) + 127u) / 255u);
    }
  }
}

static ampc_status too_large(const char *name, int64_t w, int64_t h, int64_t max_pixels,
                             ampc_image_error *why) {
  *why = AMPC_IMAGE_TOO_LARGE;
  if (w > IMG_MAX_SIDE || h > IMG_MAX_SIDE)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: image is %lldx%lld, a side above %d", name, (long long)w,
                     (long long)h, IMG_MAX_SIDE);
  return ampc_fail(AMPC_ERR_FORMAT,
                   "%s: image is %lldx%lld = %lld pixels, above the limit of %lld (a "
                   "decompression bomb?)",
                   name, (long long)w, (long long)h, (long long)(w * h), (long long)max_pixels);
}

static int dims_ok(int64_t w, int64_t h, int64_t max_pixels) {
  return w <= IMG_MAX_SIDE && h <= IMG_MAX_SIDE && w * h <= max_pixels;
}

/* A decoded image: rgb [h, w, 3] (malloc'd, owned). */
typedef struct decoded {
  uint8_t *rgb;
  int32_t w, h;
} decoded;

/* ---- JPEG ------------------------------------------------------------------ */

static int has_text(const char *hay, const char *needle) {
  for (; *hay; hay++) {
    size_t k = 0;
    while (needle[k] && hay[k] && (hay[k] | 0x20) == (needle[k] | 0x20))
      k++;
    if (!needle[k])
      return 1;
  }
  return 0;
}

static ampc_status decode_jpeg(const uint8_t *data, size_t size, const char *name, int32_t s,
                               int64_t max_pixels, decoded *d, ampc_image_info *info,
                               ampc_image_error *why) {
  tjhandle tj = tjInitDecompress();
  if (!tj)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot create the JPEG decoder", name);
  int w = 0, h = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(tj, data, (unsigned long)size, &w, &h, &subsamp, &cs) != 0 || w < 1 ||
      h < 1) {
    const ampc_status st = ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt or truncated JPEG (libjpeg: %s)",
                                     name, tjGetErrorStr2(tj));
    tjDestroy(tj);
    *why = AMPC_IMAGE_CORRUPT;
    return st;
  }
  info->width = w;
  info->height = h;
  if (!dims_ok(w, h, max_pixels)) {
    tjDestroy(tj);
    return too_large(name, w, h, max_pixels, why);
  }
  if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
    tjDestroy(tj);
    *why = AMPC_IMAGE_FORMAT;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: CMYK JPEGs are not supported", name);
  }
  /* the smallest DCT scaling factor (<= 1) whose shorter side still covers s */
  int nsf = 0;
  const tjscalingfactor *sfs = tjGetScalingFactors(&nsf);
  tjscalingfactor best = {1, 1};
  const int shorter = w < h ? w : h;
  for (int i = 0; sfs && i < nsf; i++) {
    const tjscalingfactor f = sfs[i];
    if (f.num > f.denom || TJSCALED(shorter, f) < s)
      continue;
    if ((int64_t)f.num * best.denom < (int64_t)best.num * f.denom)
      best = f;
  }
  const int sw = TJSCALED(w, best), sh = TJSCALED(h, best);
  uint8_t *buf = malloc((size_t)sw * (size_t)sh * 3);
  if (!buf) {
    tjDestroy(tj);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory for a %dx%d image", name, sw, sh);
  }
  int flags = 0;
#ifdef TJFLAG_LIMITSCANS
  flags |= TJFLAG_LIMITSCANS; /* refuse progressive files with absurd scan counts */
#endif
  if (tjDecompress2(tj, data, (unsigned long)size, buf, sw, 0, sh, TJPF_RGB, flags) != 0) {
    const char *msg = tjGetErrorStr2(tj);
    /* libjpeg-turbo only warns on truncated or damaged entropy data (and fills
     * the rest with grey); those are refused, other warnings (e.g. extraneous
     * bytes before a marker, common in camera files) are not */
    const int fatal =
        tjGetErrorCode(tj) == TJERR_FATAL || has_text(msg, "premature") || has_text(msg, "huffman");
    if (fatal) {
      const ampc_status st =
          ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt or truncated JPEG (libjpeg: %s)", name, msg);
      free(buf);
      tjDestroy(tj);
      *why = AMPC_IMAGE_CORRUPT;
      return st;
    }
  }
  tjDestroy(tj);
  d->rgb = buf;
  d->w = sw;
  d->h = sh;
  return AMPC_OK;
}

/* ---- PNG ------------------------------------------------------------------- */

typedef struct png_src {
  const uint8_t *data;
  size_t size, pos;
  char msg[200]; /* libpng's error */
} png_src;

static void png_err(png_structp png, png_const_charp msg) {
  png_src *ps = png_get_error_ptr(png);
  snprintf(ps->msg, sizeof ps->msg, "%s", msg ? msg : "error");
  png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

static void png_read_mem(png_structp png, png_bytep dst, size_t n) {
  png_src *ps = png_get_io_ptr(png);
  if (n > ps->size - ps->pos)
    png_error(png, "unexpected end of data");
  memcpy(dst, ps->data + ps->pos, n);
  ps->pos += n;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static ampc_status decode_png(const uint8_t *data, size_t size, const char *name,
                              int64_t max_pixels, decoded *d, ampc_image_info *info,
                              ampc_image_error *why) {
  /* the IHDR is the first chunk: its size is checked before libpng runs, so a
   * bomb is reported as such rather than as libpng's limit error */
  if (size >= 24 && memcmp(data + 12, "IHDR", 4) == 0) {
    const int64_t w = be32(data + 16), h = be32(data + 20);
    if (w > 0 && h > 0 && !dims_ok(w, h, max_pixels)) {
      info->width = w > INT32_MAX ? INT32_MAX : (int32_t)w;
      info->height = h > INT32_MAX ? INT32_MAX : (int32_t)h;
      return too_large(name, w, h, max_pixels, why);
    }
  }
  png_src ps = {data, size, 0, ""};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ps, png_err, png_warn);
  png_infop pinfo = png ? png_create_info_struct(png) : NULL;
  if (!pinfo) {
    png_destroy_read_struct(&png, NULL, NULL);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot create the PNG decoder", name);
  }
  uint8_t *volatile buf = NULL;
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &pinfo, NULL);
    free(buf);
    free(rows);
    *why = AMPC_IMAGE_CORRUPT;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt or truncated PNG (libpng: %s)", name, ps.msg);
  }
  png_set_read_fn(png, &ps, png_read_mem);
  png_set_user_limits(png, IMG_MAX_SIDE, IMG_MAX_SIDE);
  png_set_chunk_malloc_max(png, 16u << 20); /* text and profile chunks */
  png_read_info(png, pinfo);
  const png_uint_32 w = png_get_image_width(png, pinfo), h = png_get_image_height(png, pinfo);
  info->width = (int32_t)w;
  info->height = (int32_t)h;
  if (!dims_ok(w, h, max_pixels)) {
    png_destroy_read_struct(&png, &pinfo, NULL);
    return too_large(name, w, h, max_pixels, why);
  }
  ampc__png_rgba8(png, pinfo);
  if (png_get_rowbytes(png, pinfo) != (size_t)w * 4 || png_get_channels(png, pinfo) != 4)
    png_error(png, "cannot convert the colour type to 8-bit RGBA");
  buf = malloc((size_t)w * h * 4);
  rows = malloc(sizeof *rows * h);
  if (!buf || !rows) {
    png_destroy_read_struct(&png, &pinfo, NULL);
    free(buf);
    free(rows);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory for a %lux%lu image", name,
                     (unsigned long)w, (unsigned long)h);
  }
  for (png_uint_32 y = 0; y < h; y++)
    rows[y] = buf + (size_t)y * w * 4;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &pinfo, NULL);
  free(rows);
  over_white(buf, (size_t)w * h);
  d->rgb = buf;
  d->w = (int32_t)w;
  d->h = (int32_t)h;
  return AMPC_OK;
}

/* ---- WebP ------------------------------------------------------------------ */

static ampc_status decode_webp(const uint8_t *data, size_t size, const char *name,
                               int64_t max_pixels, decoded *d, ampc_image_info *info,
                               ampc_image_error *why) {
  WebPBitstreamFeatures f;
  const VP8StatusCode vs = WebPGetFeatures(data, size, &f);
  if (vs != VP8_STATUS_OK) {
    *why = AMPC_IMAGE_CORRUPT;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt or truncated WebP (libwebp status %d)", name,
                     (int)vs);
  }
  info->width = f.width;
  info->height = f.height;
  if (f.width < 1 || f.height < 1) {
    *why = AMPC_IMAGE_CORRUPT;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt WebP (size %dx%d)", name, f.width, f.height);
  }
  if (!dims_ok(f.width, f.height, max_pixels))
    return too_large(name, f.width, f.height, max_pixels, why);
  if (f.has_animation) {
    *why = AMPC_IMAGE_FORMAT;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: animated WebP is not supported", name);
  }
  const size_t n = (size_t)f.width * (size_t)f.height;
  uint8_t *buf = malloc(n * 4);
  if (!buf)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory for a %dx%d image", name, f.width,
                     f.height);
  if (!WebPDecodeRGBAInto(data, size, buf, n * 4, f.width * 4)) {
    free(buf);
    *why = AMPC_IMAGE_CORRUPT;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt or truncated WebP (libwebp cannot decode it)",
                     name);
  }
  over_white(buf, n);
  d->rgb = buf;
  d->w = f.width;
  d->h = f.height;
  return AMPC_OK;
}

/* ---- the entry point --------------------------------------------------------- */

ampc_status ampc_image_square(const void *data, size_t size, const char *name, int32_t s,
                              int64_t max_pixels, uint8_t *out, ampc_image_info *info,
                              ampc_image_error *why) {
  ampc_image_error why_local;
  ampc_image_info info_local;
  if (!why)
    why = &why_local;
  if (!info)
    info = &info_local;
  *why = AMPC_IMAGE_OK;
  memset(info, 0, sizeof *info);
  if (!name)
    name = "image";
  if (!out || (!data && size > 0))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: ampc_image_square: NULL argument", name);
  if (s < 8 || s > 1024)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: image size %d is out of range (8..1024)", name,
                     (int)s);
  if (max_pixels <= 0)
    max_pixels = AMPC_IMAGE_MAX_PIXELS;
  if (size == 0) {
    *why = AMPC_IMAGE_EMPTY;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: empty file (0 bytes)", name);
  }
  const ampc_image_format fmt = ampc_image_sniff(data, size);
  info->format = fmt;
  decoded d = {NULL, 0, 0};
  ampc_status st;
  switch (fmt) {
  case AMPC_IMAGE_JPEG: st = decode_jpeg(data, size, name, s, max_pixels, &d, info, why); break;
  case AMPC_IMAGE_PNG: st = decode_png(data, size, name, max_pixels, &d, info, why); break;
  case AMPC_IMAGE_WEBP: st = decode_webp(data, size, name, max_pixels, &d, info, why); break;
  default:
    *why = AMPC_IMAGE_FORMAT;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: not a JPEG, PNG or WebP image", name);
  }
  if (st != AMPC_OK)
    return st;
  st = ampc_image_resize_square(d.rgb, d.h, d.w, s, out);
  free(d.rgb);
  return st;
}
