/*
 * bench/bench_image.c: decode + resize throughput of the user-image decoder
 * (ampc_image_square), single-threaded.
 *
 * Usage: build/bench/bench_image [images] [reps]   (defaults 64 images, 5 reps)
 *
 * Encodes `images` different 256x256 RGB images (smooth gradients plus noise,
 * so that the entropy coder has work to do) as quality-90 4:2:0 JPEGs
 * (TurboJPEG) and as PNGs (libpng, default compression), then decodes each to
 * a 64x64 tile: JPEGs through the 1/4 DCT scaling (no resampling left to do),
 * PNGs at full size followed by the 4x4 area filter. Prints the median
 * images/s over the repetitions for each format.
 */
#include "internal.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "data/ingest/image.h"

enum { N = 256, S = 64 };

typedef struct blob {
  unsigned char *p;
  size_t n, cap;
} blob;

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void png_put(png_structp png, png_bytep d, size_t len) {
  blob *b = png_get_io_ptr(png);
  if (b->n + len > b->cap) {
    b->cap = (b->n + len) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p)
      png_error(png, "out of memory");
  }
  memcpy(b->p + b->n, d, len);
  b->n += len;
}
static void png_flush_none(png_structp png) { (void)png; }

static int png_encode(const unsigned char *pix, blob *b) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return -1;
  }
  png_set_write_fn(png, b, png_put, png_flush_none);
  png_set_IHDR(png, info, N, N, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < N; y++)
    png_write_row(png, pix + (size_t)y * N * 3);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  return 0;
}

/* images per second of decoding every blob once, median of reps */
static double rate(const blob *b, int count, int reps, const char *what) {
  double *t = malloc(sizeof *t * (size_t)reps);
  uint8_t out[S * S * 3];
  for (int r = 0; r < reps; r++) {
    const double t0 = ampc_now_s();
    for (int i = 0; i < count; i++)
      if (ampc_image_square(b[i].p, b[i].n, what, S, 0, out, NULL, NULL) != AMPC_OK) {
        fprintf(stderr, "bench_image: %s\n", ampc_last_error());
        exit(1);
      }
    t[r] = ampc_now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_d);
  const double v = count / t[reps / 2];
  free(t);
  return v;
}

int main(int argc, char **argv) {
  const int count = argc > 1 ? atoi(argv[1]) : 64, reps = argc > 2 ? atoi(argv[2]) : 5;
  if (count < 1 || reps < 1) {
    fprintf(stderr, "usage: bench_image [images >= 1] [reps >= 1]\n");
    return 2;
  }
  blob *jpg = calloc((size_t)count, sizeof *jpg), *png = calloc((size_t)count, sizeof *png);
  unsigned char *pix = malloc(N * N * 3);
  tjhandle tj = tjInitCompress();
  if (!jpg || !png || !pix || !tj)
    return 1;
  uint32_t seed = 1;
  size_t jbytes = 0, pbytes = 0;
  for (int i = 0; i < count; i++) {
    for (int y = 0; y < N; y++)
      for (int x = 0; x < N; x++)
        for (int c = 0; c < 3; c++) {
          seed = seed * 1664525u + 1013904223u;
          const int v = (x * (c + 1) + y * (3 - c) + 7 * i) / 3 + (int)(seed >> 28);
          pix[(y * N + x) * 3 + c] = (unsigned char)(v & 255);
        }
    unsigned long n = 0;
    if (tjCompress2(tj, pix, N, 0, N, TJPF_RGB, &jpg[i].p, &n, TJSAMP_420, 90, 0) != 0 ||
        png_encode(pix, &png[i]) != 0) {
      fprintf(stderr, "bench_image: encoding failed\n");
      return 1;
    }
    jpg[i].n = n;
    jbytes += n;
    pbytes += png[i].n;
  }
  tjDestroy(tj);
  printf("bench_image: %d images 256x256 -> 64x64, 1 thread, median of %d\n", count, reps);
  printf("  jpeg q90 4:2:0 (%6.1f KiB avg): %8.1f images/s\n", jbytes / 1024.0 / count,
         rate(jpg, count, reps, "bench.jpg"));
  printf("  png            (%6.1f KiB avg): %8.1f images/s\n", pbytes / 1024.0 / count,
         rate(png, count, reps, "bench.png"));
  for (int i = 0; i < count; i++) {
    tjFree(jpg[i].p);
    free(png[i].p);
  }
  free(jpg);
  free(png);
  free(pix);
  return 0;
}
