/*
 * src/data/emoji_png.c: decoding the emoji sets' PNGs with libpng into the
 * dataset's RGB layout (ampc_emoji_png_load, ampc/data.h): errors and
 * warnings of libpng become ampc_status messages naming the file.
 */
#include "internal.h"

#include <png.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

/* ---- PNG ------------------------------------------------------------------- */

static _Thread_local char g_png_msg[200];

static void png_error_fn(png_structp png, png_const_charp msg) {
  snprintf(g_png_msg, sizeof g_png_msg, "%s", msg ? msg : "libpng error");
  png_longjmp(png, 1);
}

/* libpng warnings (e.g. about ICC profiles) are not errors; the library never
 * prints, so they are dropped. */
static void png_warning_fn(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

void ampc__png_rgba8(struct png_struct_def *png, struct png_info_def *info) {
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  const int trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  png_set_expand(png); /* palette -> RGB, gray < 8 bits -> 8 bits, tRNS -> alpha */
  if (depth == 16)
    png_set_scale_16(png); /* v * 255 / 65535, rounded */
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
    png_set_gray_to_rgb(png);
  if (!(color & PNG_COLOR_MASK_ALPHA) && !trns)
    png_set_add_alpha(png, 0xFF, PNG_FILLER_AFTER);
  (void)png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

ampc_status ampc_emoji_png_load(const char *path, uint8_t *out) {
  enum { S = AMPC_EMOJI_SRC_SIZE, D = AMPC_EMOJI_SIZE };
  if (!path || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_emoji_png_load: NULL argument");
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  unsigned char sig[8];
  if (fread(sig, 1, sizeof sig, fp) != sizeof sig || png_sig_cmp(sig, 0, sizeof sig) != 0) {
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: not a PNG file", path);
  }
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, png_error_fn, png_warning_fn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the PNG decoder", path);
  }
  /* 8-bit RGBA rows; nothing that the error path reads changes after setjmp */
  unsigned char pix[S][S * 4];
  png_bytep rows[S];
  for (int y = 0; y < S; y++)
    rows[y] = pix[y];
  g_png_msg[0] = '\0';
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt PNG: %s", path, g_png_msg);
  }
  png_init_io(png, fp);
  png_set_sig_bytes(png, sizeof sig);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w != S || h != S) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: image is %lux%lu, expected %dx%d", path,
                     (unsigned long)w, (unsigned long)h, S, S);
  }
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  ampc__png_rgba8(png, info);
  if (png_get_rowbytes(png, info) != (size_t)S * 4 || png_get_channels(png, info) != 4) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: cannot convert colour type %d, depth %d to RGBA8", path,
                     color, depth);
  }
  png_read_image(png, rows);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  fclose(fp);

  /* composite over white and average 2x2 blocks, exactly (see data.h) */
  for (int y = 0; y < D; y++)
    for (int x = 0; x < D; x++)
      for (int c = 0; c < 3; c++) {
        uint32_t num = 0;
        for (int dy = 0; dy < 2; dy++)
          for (int dx = 0; dx < 2; dx++) {
            const unsigned char *p = &pix[2 * y + dy][4 * (2 * x + dx)];
            const uint32_t a = p[3];
            num += (uint32_t)p[c] * a + 255u * (255u - a);
          }
        out[(y * D + x) * 3 + c] = (uint8_t)((num + 510u) / 1020u);
      }
  return AMPC_OK;
}
