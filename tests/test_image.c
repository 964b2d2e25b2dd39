/*
 * tests/test_image.c: the user-image decoder (src/data/ingest/image.h).
 *
 * - the resampler against values computed here independently: a constant
 *   stays constant (shrinking and enlarging); 4x4 -> 2x2 is the rounded 2x2
 *   block means; 6x6 -> 4x4 (ratio 1.5) is the area-weighted mean with
 *   fractional coverage, integrated here in doubles; a 200x100 ramp -> 50
 *   keeps the centre columns; 2x2 -> 4x4 is bilinear with half-pixel centres;
 * - PNG (RGB, RGBA, gray, 16-bit gray, palette + tRNS, interlaced, non-square)
 *   written with libpng in memory and decoded at native size: exact, alpha
 *   composited over white with the documented integer formula;
 * - JPEG (colour and gray) written with TurboJPEG at quality 95, decoded to
 *   64 from 256 (DCT scaling 1/4), compared with the exact area downsample of
 *   the original;
 * - WebP lossless round trip, exact;
 * - bad data: empty, random bytes, every 1/8 truncation of a JPEG, PNG and
 *   WebP, PNG and JPEG headers claiming 30000x30000, a side above 65535, a
 *   lowered pixel limit, a CMYK JPEG, bad sizes: the right status, *why and
 *   message.
 */
#include <png.h> /* before cmocka: it brings its own setjmp.h */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <webp/encode.h>
#include <zlib.h>

#include "ampc/status.h"
#include "data/ingest/image.h"

/* ---- helpers ----------------------------------------------------------------- */

static uint32_t g_rng = 12345u;
static uint32_t rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return g_rng >> 8;
}

typedef struct membuf {
  unsigned char *p;
  size_t n, cap;
} membuf;

static void mb_write(png_structp png, png_bytep data, size_t len) {
  membuf *m = png_get_io_ptr(png);
  if (m->n + len > m->cap) {
    m->cap = (m->n + len) * 2;
    m->p = realloc(m->p, m->cap);
    assert_non_null(m->p);
  }
  memcpy(m->p + m->n, data, len);
  m->n += len;
}
static void mb_flush(png_structp png) { (void)png; }

/* A PNG in memory: rows of `bpr` bytes each, colour type/depth as given; an
 * optional palette (npal entries) and tRNS (ntrns alpha values). */
static membuf png_encode(int w, int h, int color, int depth, const unsigned char *pix, size_t bpr,
                         const png_color *pal, int npal, const unsigned char *trns, int ntrns,
                         int interlace) {
  membuf m = {NULL, 0, 0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  assert_non_null(info);
  if (setjmp(png_jmpbuf(png)))
    fail_msg("libpng write failed");
  png_set_write_fn(png, &m, mb_write, mb_flush);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (pal)
    png_set_PLTE(png, info, pal, npal);
  if (trns)
    png_set_tRNS(png, info, trns, ntrns, NULL);
  png_write_info(png, info);
  png_bytep *rows = malloc(sizeof *rows * (size_t)h);
  for (int y = 0; y < h; y++)
    rows[y] = (png_bytep)(pix + (size_t)y * bpr);
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(rows);
  return m;
}

static unsigned char white(unsigned c, unsigned a) {
  return (unsigned char)((c * a + 255u * (255u - a) + 127u) / 255u);
}

/* decode and expect success; out [s, s, 3] */
static void decode_ok(const void *data, size_t n, int s, uint8_t *out, ampc_image_format fmt, int w,
                      int h) {
  ampc_image_info info;
  ampc_image_error why = AMPC_IMAGE_CORRUPT;
  const ampc_status st = ampc_image_square(data, n, "t.img", s, 0, out, &info, &why);
  if (st != AMPC_OK)
    fail_msg("decode failed: %s", ampc_last_error());
  assert_int_equal(why, AMPC_IMAGE_OK);
  assert_int_equal(info.format, fmt);
  assert_int_equal(info.width, w);
  assert_int_equal(info.height, h);
}

/* decode and expect a refusal with this why; the message starts with the name */
static void decode_bad(const void *data, size_t n, int64_t max_pixels, ampc_image_error want,
                       const char *needle) {
  uint8_t out[16 * 16 * 3];
  ampc_image_error why = AMPC_IMAGE_OK;
  const ampc_status st = ampc_image_square(data, n, "bad.img", 16, max_pixels, out, NULL, &why);
  assert_int_equal(st, AMPC_ERR_FORMAT);
  if (why != want)
    fail_msg("why %d, want %d (%zu bytes): %s", (int)why, (int)want, n, ampc_last_error());
  const char *msg = ampc_last_error();
  assert_memory_equal(msg, "bad.img: ", 9);
  if (needle && !strstr(msg, needle))
    fail_msg("message \"%s\" lacks \"%s\"", msg, needle);
}

/* ---- the resampler -------------------------------------------------------- */

static void test_resize_constant(void **state) {
  (void)state;
  static const int dims[][3] = {{53, 37, 20}, {37, 53, 20}, {5, 7, 16}, {9, 9, 9}, {300, 2, 8}};
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
    const int h = dims[k][0], w = dims[k][1], s = dims[k][2];
    uint8_t *src = malloc((size_t)h * w * 3), *out = malloc((size_t)s * s * 3);
    for (int i = 0; i < h * w; i++) {
      src[3 * i] = 77;
      src[3 * i + 1] = 130;
      src[3 * i + 2] = 255;
    }
    assert_int_equal(ampc_image_resize_square(src, h, w, s, out), AMPC_OK);
    for (int i = 0; i < s * s; i++) {
      assert_int_equal(out[3 * i], 77);
      assert_int_equal(out[3 * i + 1], 130);
      assert_int_equal(out[3 * i + 2], 255);
    }
    free(src);
    free(out);
  }
}

static void test_resize_blocks(void **state) {
  (void)state;
  uint8_t src[4 * 4 * 3], out[2 * 2 * 3];
  for (int i = 0; i < 48; i++)
    src[i] = (uint8_t)rnd();
  assert_int_equal(ampc_image_resize_square(src, 4, 4, 2, out), AMPC_OK);
  for (int y = 0; y < 2; y++)
    for (int x = 0; x < 2; x++)
      for (int c = 0; c < 3; c++) {
        unsigned sum = 0;
        for (int dy = 0; dy < 2; dy++)
          for (int dx = 0; dx < 2; dx++)
            sum += src[((2 * y + dy) * 4 + 2 * x + dx) * 3 + c];
        assert_int_equal(out[(y * 2 + x) * 3 + c], (sum + 2) / 4); /* half up */
      }
}

/* the length of [a, b) inside [c, d) */
static double overlap(double a, double b, double c, double d) {
  const double lo = a > c ? a : c, hi = b < d ? b : d;
  return hi > lo ? hi - lo : 0.0;
}

static void test_resize_fractional(void **state) {
  (void)state;
  enum { N = 6, M = 4 };
  uint8_t src[N * N * 3], out[M * M * 3];
  for (int i = 0; i < N * N * 3; i++)
    src[i] = (uint8_t)rnd();
  assert_int_equal(ampc_image_resize_square(src, N, N, M, out), AMPC_OK);
  const double r = (double)N / M; /* output j covers [j r, (j+1) r) */
  for (int y = 0; y < M; y++)
    for (int x = 0; x < M; x++)
      for (int c = 0; c < 3; c++) {
        double sum = 0.0;
        for (int sy = 0; sy < N; sy++)
          for (int sx = 0; sx < N; sx++)
            sum += overlap(sx, sx + 1, x * r, (x + 1) * r) *
                   overlap(sy, sy + 1, y * r, (y + 1) * r) * src[(sy * N + sx) * 3 + c];
        const double ref = sum / (r * r);
        /* exact rounding of the exact mean: within half a unit (plus the
         * doubles' own rounding) */
        assert_true(fabs(out[(y * M + x) * 3 + c] - ref) <= 0.5 + 1e-9);
      }
}

static void test_resize_crop_centre(void **state) {
  (void)state;
  enum { W = 200, H = 100, S = 50 };
  uint8_t *src = malloc(W * H * 3), out[S * S * 3];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      src[(y * W + x) * 3] = (uint8_t)x;
      src[(y * W + x) * 3 + 1] = (uint8_t)(y * 2);
      src[(y * W + x) * 3 + 2] = 9;
    }
  assert_int_equal(ampc_image_resize_square(src, H, W, S, out), AMPC_OK);
  /* resized to 100x50, crop offset (100-50)/2 = 25: output column j is the
   * mean of source columns 2(25+j) and 2(25+j)+1, i.e. 50 + 2j + 0.5, rounded
   * half up; rows y: mean of the values 2(2y) and 2(2y+1), i.e. 4y + 1 */
  for (int y = 0; y < S; y++)
    for (int x = 0; x < S; x++) {
      assert_int_equal(out[(y * S + x) * 3], 51 + 2 * x);
      assert_int_equal(out[(y * S + x) * 3 + 1], 4 * y + 1);
      assert_int_equal(out[(y * S + x) * 3 + 2], 9);
    }
  /* the same transposed: a 100x200 (w x h) image keeps the centre rows */
  uint8_t *tr = malloc(W * H * 3);
  for (int y = 0; y < W; y++)
    for (int x = 0; x < H; x++)
      memcpy(tr + (y * H + x) * 3, src + (x * W + y) * 3, 3);
  uint8_t out2[S * S * 3];
  assert_int_equal(ampc_image_resize_square(tr, W, H, S, out2), AMPC_OK);
  for (int y = 0; y < S; y++)
    for (int x = 0; x < S; x++)
      assert_memory_equal(out2 + (y * S + x) * 3, out + (x * S + y) * 3, 3);
  free(src);
  free(tr);
}

static void test_resize_enlarge(void **state) {
  (void)state;
  const uint8_t v[4] = {0, 100, 200, 41}; /* [[a, b], [c, d]], every channel shifted */
  uint8_t src[2 * 2 * 3], out[4 * 4 * 3];
  for (int i = 0; i < 4; i++)
    for (int c = 0; c < 3; c++)
      src[i * 3 + c] = (uint8_t)(v[i] + 5 * c);
  assert_int_equal(ampc_image_resize_square(src, 2, 2, 4, out), AMPC_OK);
  /* half-pixel centres: x = (j + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25,
   * clamped to 0, 0.25, 0.75, 1: the weight of the second source sample */
  const double f[4] = {0.0, 0.25, 0.75, 1.0};
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++)
      for (int c = 0; c < 3; c++) {
        const double a = src[c], b = src[3 + c], cc = src[6 + c], d = src[9 + c];
        const double top = a + f[x] * (b - a), bot = cc + f[x] * (d - cc);
        const double ref = top + f[y] * (bot - top); /* multiples of 1/16: exact */
        assert_int_equal(out[(y * 4 + x) * 3 + c], (int)floor(ref + 0.5));
      }
}

static void test_resize_args(void **state) {
  (void)state;
  uint8_t src[3] = {1, 2, 3}, out[3];
  assert_int_equal(ampc_image_resize_square(NULL, 1, 1, 1, out), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_image_resize_square(src, 0, 1, 1, out), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_image_resize_square(src, 1, 1, 0, out), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_image_resize_square(src, 1, 1, 1, out), AMPC_OK);
  assert_memory_equal(src, out, 3);
}

/* ---- PNG ------------------------------------------------------------------- */

static void test_png(void **state) {
  (void)state;
  enum { W = 24, H = 24 };
  unsigned char rgba[H][W * 4], rgb[H][W * 3], gray[H][W], gray16[H][W * 2], idx[H][W];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      for (int c = 0; c < 4; c++)
        rgba[y][x * 4 + c] = (unsigned char)rnd();
      if (x == 0)
        rgba[y][3] = (unsigned char)(y & 1 ? 0 : 255); /* the extremes too */
      memcpy(&rgb[y][x * 3], &rgba[y][x * 4], 3);
      gray[y][x] = (unsigned char)rnd();
      const unsigned g = (unsigned)(rnd() & 255) * 257u; /* maps exactly to g / 257 */
      gray16[y][x * 2] = (unsigned char)(g >> 8);
      gray16[y][x * 2 + 1] = (unsigned char)g;
      idx[y][x] = (unsigned char)(rnd() % 5);
    }
  uint8_t out[H * W * 3];
  for (int il = 0; il < 2; il++) {
    membuf m = png_encode(W, H, PNG_COLOR_TYPE_RGB, 8, &rgb[0][0], W * 3, NULL, 0, NULL, 0, il);
    assert_int_equal(ampc_image_sniff(m.p, m.n), AMPC_IMAGE_PNG);
    decode_ok(m.p, m.n, W, out, AMPC_IMAGE_PNG, W, H);
    assert_memory_equal(out, rgb, sizeof out);
    free(m.p);

    m = png_encode(W, H, PNG_COLOR_TYPE_RGBA, 8, &rgba[0][0], W * 4, NULL, 0, NULL, 0, il);
    decode_ok(m.p, m.n, W, out, AMPC_IMAGE_PNG, W, H);
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        for (int c = 0; c < 3; c++)
          assert_int_equal(out[(y * W + x) * 3 + c], white(rgba[y][x * 4 + c], rgba[y][x * 4 + 3]));
    free(m.p);
  }
  membuf m = png_encode(W, H, PNG_COLOR_TYPE_GRAY, 8, &gray[0][0], W, NULL, 0, NULL, 0, 0);
  decode_ok(m.p, m.n, W, out, AMPC_IMAGE_PNG, W, H);
  for (int i = 0; i < W * H; i++)
    for (int c = 0; c < 3; c++)
      assert_int_equal(out[i * 3 + c], gray[i / W][i % W]);
  free(m.p);

  m = png_encode(W, H, PNG_COLOR_TYPE_GRAY, 16, &gray16[0][0], W * 2, NULL, 0, NULL, 0, 0);
  decode_ok(m.p, m.n, W, out, AMPC_IMAGE_PNG, W, H);
  for (int i = 0; i < W * H; i++)
    assert_int_equal(out[i * 3 + 1], gray16[i / W][(i % W) * 2]); /* (g * 257) >> 8 = g */
  free(m.p);

  const png_color pal[5] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}, {200, 100, 50}};
  const unsigned char trns[3] = {255, 0, 128}; /* entries 3, 4: opaque */
  m = png_encode(W, H, PNG_COLOR_TYPE_PALETTE, 8, &idx[0][0], W, pal, 5, trns, 3, 0);
  decode_ok(m.p, m.n, W, out, AMPC_IMAGE_PNG, W, H);
  for (int i = 0; i < W * H; i++) {
    const int k = idx[i / W][i % W];
    const unsigned a = k < 3 ? trns[k] : 255u;
    assert_int_equal(out[i * 3], white(pal[k].red, a));
    assert_int_equal(out[i * 3 + 1], white(pal[k].green, a));
    assert_int_equal(out[i * 3 + 2], white(pal[k].blue, a));
  }
  free(m.p);

  /* non-square at its shorter side: the centre rows, unresampled */
  enum { T = 40 };
  unsigned char tall[T][W * 3];
  for (int y = 0; y < T; y++)
    for (int i = 0; i < W * 3; i++)
      tall[y][i] = (unsigned char)rnd();
  m = png_encode(W, T, PNG_COLOR_TYPE_RGB, 8, &tall[0][0], W * 3, NULL, 0, NULL, 0, 0);
  decode_ok(m.p, m.n, W, out, AMPC_IMAGE_PNG, W, T);
  assert_memory_equal(out, &tall[(T - W) / 2][0], sizeof out);
  free(m.p);
}

/* ---- JPEG ------------------------------------------------------------------ */

static unsigned char *jpeg_encode(const unsigned char *pix, int w, int h, int gray, int q,
                                  unsigned long *n) {
  tjhandle tj = tjInitCompress();
  assert_non_null(tj);
  unsigned char *jpg = NULL;
  *n = 0;
  assert_int_equal(tjCompress2(tj, pix, w, 0, h, gray ? TJPF_GRAY : TJPF_RGB, &jpg, n,
                               gray ? TJSAMP_GRAY : TJSAMP_444, q, 0),
                   0);
  tjDestroy(tj);
  return jpg;
}

static void test_jpeg(void **state) {
  (void)state;
  enum { N = 256, S = 64 };
  unsigned char *rgb = malloc(N * N * 3), *g = malloc(N * N), *g3 = malloc(N * N * 3);
  for (int y = 0; y < N; y++)
    for (int x = 0; x < N; x++) {
      const double fx = x / (double)N, fy = y / (double)N;
      unsigned char *p = rgb + (y * N + x) * 3;
      p[0] = (unsigned char)(40 + 170 * fx);
      p[1] = (unsigned char)(128 + 100 * sin(6.283 * fy));
      p[2] = (unsigned char)(60 + 80 * fx * fy + 60 * fy);
      g[y * N + x] = p[1];
      memset(g3 + (y * N + x) * 3, p[1], 3);
    }
  uint8_t out[S * S * 3], ref[S * S * 3];
  for (int gray = 0; gray < 2; gray++) {
    unsigned long n;
    unsigned char *jpg = jpeg_encode(gray ? g : rgb, N, N, gray, 95, &n);
    assert_int_equal(ampc_image_sniff(jpg, n), AMPC_IMAGE_JPEG);
    decode_ok(jpg, n, S, out, AMPC_IMAGE_JPEG, N, N);
    assert_int_equal(ampc_image_resize_square(gray ? g3 : rgb, N, N, S, ref), AMPC_OK);
    /* quality 95 on a smooth image: the quantisation error of the DC and low
     * frequencies is about one level; the 1/4 DCT scaling computes each output
     * from the block's 2x2 lowest frequencies (the 4x4 mean up to the dropped
     * high frequencies, which are ~0 here); the 8-bit rounding of the
     * decoder and of the reference add half a level each. Mean error <= 2,
     * no sample further than 8 levels. */
    double sum = 0.0;
    int worst = 0;
    for (int i = 0; i < S * S * 3; i++) {
      const int d = abs((int)out[i] - (int)ref[i]);
      sum += d;
      worst = d > worst ? d : worst;
      if (gray && i % 3 == 0)
        assert_true(out[i] == out[i + 1] && out[i] == out[i + 2]);
    }
    const double mae = sum / (S * S * 3);
    printf("JPEG (gray %d) 256 -> 64 vs area downsample: mean abs error %.3f, max %d\n", gray, mae,
           worst);
    if (mae > 2.0 || worst > 8)
      fail_msg("JPEG (gray %d) vs area downsample: mean abs error %.3f, max %d", gray, mae, worst);
    tjFree(jpg);
  }
  free(rgb);
  free(g);
  free(g3);
}

/* ---- WebP ------------------------------------------------------------------ */

static void test_webp(void **state) {
  (void)state;
  enum { W = 32, H = 20 };
  unsigned char rgba[H * W * 4];
  for (int i = 0; i < H * W * 4; i++)
    rgba[i] = (unsigned char)rnd();
  for (int i = 0; i < H * W; i += 3)
    rgba[i * 4 + 3] = 255;
  uint8_t *webp = NULL;
  const size_t n = WebPEncodeLosslessRGBA(rgba, W, H, W * 4, &webp);
  assert_true(n > 0);
  assert_int_equal(ampc_image_sniff(webp, n), AMPC_IMAGE_WEBP);
  uint8_t out[H * H * 3];
  decode_ok(webp, n, H, out, AMPC_IMAGE_WEBP, W, H);
  const int off = (W - H) / 2;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < H; x++)
      for (int c = 0; c < 3; c++) {
        const unsigned char *p = rgba + (y * W + x + off) * 4;
        assert_int_equal(out[(y * H + x) * 3 + c], white(p[c], p[3]));
      }
  /* every truncation is refused */
  for (int k = 1; k < 8; k++)
    decode_bad(webp, n * (size_t)k / 8, 0, AMPC_IMAGE_CORRUPT, "WebP");
  WebPFree(webp);
}

/* ---- bad data -------------------------------------------------------------- */

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* a PNG signature + IHDR (w x h, 8-bit RGB) with a valid CRC + IEND */
static size_t png_header(unsigned char *b, uint32_t w, uint32_t h) {
  memcpy(b, "\x89PNG\r\n\x1a\n", 8);
  put32(b + 8, 13);
  memcpy(b + 12, "IHDR", 4);
  put32(b + 16, w);
  put32(b + 20, h);
  b[24] = 8, b[25] = 2, b[26] = 0, b[27] = 0, b[28] = 0;
  put32(b + 29, (uint32_t)crc32(0, b + 12, 17));
  put32(b + 33, 0);
  memcpy(b + 37, "IEND", 4);
  put32(b + 41, (uint32_t)crc32(0, b + 37, 4));
  return 45;
}

static void test_bad(void **state) {
  (void)state;
  uint8_t out[16 * 16 * 3];
  ampc_image_error why = AMPC_IMAGE_OK;
  assert_int_equal(ampc_image_square("", 0, "x.jpg", 16, 0, out, NULL, &why), AMPC_ERR_FORMAT);
  assert_int_equal(why, AMPC_IMAGE_EMPTY);
  assert_string_equal(ampc_last_error(), "x.jpg: empty file (0 bytes)");
  assert_int_equal(ampc_image_square("abc", 3, "x", 7, 0, out, NULL, NULL), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_image_square("abc", 3, "x", 1025, 0, out, NULL, NULL),
                   AMPC_ERR_INVALID_ARG);
  assert_string_equal(ampc_image_format_name(AMPC_IMAGE_WEBP), "webp");
  assert_string_equal(ampc_image_format_name(AMPC_IMAGE_UNKNOWN), "unknown");

  unsigned char junk[1000];
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (unsigned char)rnd();
  junk[0] = 'x';
  assert_int_equal(ampc_image_square(junk, sizeof junk, "x.bin", 16, 0, out, NULL, &why),
                   AMPC_ERR_FORMAT);
  assert_int_equal(why, AMPC_IMAGE_FORMAT);
  assert_string_equal(ampc_last_error(), "x.bin: not a JPEG, PNG or WebP image");
  /* magic numbers followed by noise */
  memcpy(junk, "\xFF\xD8\xFF", 3);
  decode_bad(junk, sizeof junk, 0, AMPC_IMAGE_CORRUPT, "JPEG");
  memcpy(junk, "\x89PNG\r\n\x1a\n", 8);
  decode_bad(junk, sizeof junk, 0, AMPC_IMAGE_CORRUPT, "corrupt or truncated PNG (libpng: ");
  memcpy(junk, "RIFF", 4);
  memcpy(junk + 8, "WEBP", 4);
  decode_bad(junk, sizeof junk, 0, AMPC_IMAGE_CORRUPT, "WebP");

  /* truncations at every eighth of a noisy 64x64 image */
  enum { N = 64 };
  unsigned char *pix = malloc(N * N * 3);
  for (int i = 0; i < N * N * 3; i++)
    pix[i] = (unsigned char)(rnd() & 0x3F) + (unsigned char)(i % 150);
  unsigned long jn;
  unsigned char *jpg = jpeg_encode(pix, N, N, 0, 90, &jn);
  membuf png = png_encode(N, N, PNG_COLOR_TYPE_RGB, 8, pix, N * 3, NULL, 0, NULL, 0, 0);
  decode_ok(jpg, jn, 16, out, AMPC_IMAGE_JPEG, N, N);
  decode_ok(png.p, png.n, 16, out, AMPC_IMAGE_PNG, N, N);
  for (int k = 1; k < 8; k++) {
    decode_bad(jpg, jn * (size_t)k / 8, 0, AMPC_IMAGE_CORRUPT, "corrupt or truncated JPEG");
    decode_bad(png.p, png.n * (size_t)k / 8, 0, AMPC_IMAGE_CORRUPT, "corrupt or truncated PNG");
  }
  /* a PNG with a lowered limit */
  decode_bad(png.p, png.n, 4095, AMPC_IMAGE_TOO_LARGE,
             "64x64 = 4096 pixels, above the limit of 4095");
  decode_bad(jpg, jn, 100, AMPC_IMAGE_TOO_LARGE, "above the limit of 100");
  free(png.p);
  free(pix);

  /* bombs: headers claiming 30000x30000 */
  unsigned char hdr[64];
  size_t hn = png_header(hdr, 30000, 30000);
  decode_bad(hdr, hn, 0, AMPC_IMAGE_TOO_LARGE,
             "image is 30000x30000 = 900000000 pixels, above the limit of 67108864 (a "
             "decompression bomb?)");
  hn = png_header(hdr, 70000, 1);
  decode_bad(hdr, hn, 0, AMPC_IMAGE_TOO_LARGE, "a side above 65535");
  hn = png_header(hdr, 0, 5); /* invalid: libpng refuses it */
  decode_bad(hdr, hn, 0, AMPC_IMAGE_CORRUPT, "PNG");

  size_t sof = 0;
  for (size_t i = 2; i + 9 < jn; i++)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
      sof = i;
      break;
    }
  assert_true(sof > 0);
  jpg[sof + 5] = 30000 >> 8, jpg[sof + 6] = 30000 & 255; /* height */
  jpg[sof + 7] = 30000 >> 8, jpg[sof + 8] = 30000 & 255; /* width */
  ampc_image_info info;
  assert_int_equal(ampc_image_square(jpg, jn, "cat.jpg", 16, 0, out, &info, &why), AMPC_ERR_FORMAT);
  assert_int_equal(why, AMPC_IMAGE_TOO_LARGE);
  assert_int_equal(info.width, 30000);
  assert_string_equal(ampc_last_error(),
                      "cat.jpg: image is 30000x30000 = 900000000 pixels, above the limit of "
                      "67108864 (a decompression bomb?)");
  tjFree(jpg);

  /* CMYK JPEGs are refused as an unsupported format */
  unsigned char cmyk[16 * 16 * 4];
  for (size_t i = 0; i < sizeof cmyk; i++)
    cmyk[i] = (unsigned char)rnd();
  tjhandle tj = tjInitCompress();
  unsigned char *cj = NULL;
  unsigned long cn = 0;
  assert_int_equal(tjCompress2(tj, cmyk, 16, 0, 16, TJPF_CMYK, &cj, &cn, TJSAMP_444, 90, 0), 0);
  tjDestroy(tj);
  decode_bad(cj, cn, 0, AMPC_IMAGE_FORMAT, "CMYK JPEGs are not supported");
  tjFree(cj);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resize_constant),
      cmocka_unit_test(test_resize_blocks),
      cmocka_unit_test(test_resize_fractional),
      cmocka_unit_test(test_resize_crop_centre),
      cmocka_unit_test(test_resize_enlarge),
      cmocka_unit_test(test_resize_args),
      cmocka_unit_test(test_png),
      cmocka_unit_test(test_jpeg),
      cmocka_unit_test(test_webp),
      cmocka_unit_test(test_bad),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
