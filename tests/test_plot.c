/*
 * tests/test_plot.c: the PNG plots (include/ampc/plot.h). Each plot is
 * rendered into a temporary file, decoded with libpng and checked: its size
 * (900 x 560), that it is not blank (a minimum count of non-white pixels),
 * that the series appear in distinct colours (each series colour is found);
 * an unwritable path gives AMPC_ERR_IO naming the path; bad arguments give
 * AMPC_ERR_INVALID_ARG. PLplot must stay silent on stderr (checked by the
 * CTest registration, which fails on any stderr output matching PLplot's).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, access */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/plot.h"
#include "ampc/status.h"

typedef struct {
  int w, h;
  uint8_t *rgb; /* [h][w][3] */
} image;

static image decode(const char *path) {
  image im = {0, 0, NULL};
  png_image p;
  memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  assert_true(png_image_begin_read_from_file(&p, path));
  p.format = PNG_FORMAT_RGB;
  im.w = (int)p.width, im.h = (int)p.height;
  im.rgb = malloc(PNG_IMAGE_SIZE(p));
  assert_non_null(im.rgb);
  assert_true(png_image_finish_read(&p, NULL, im.rgb, 0, NULL));
  return im;
}

static int64_t count_non_white(const image *im) {
  int64_t n = 0;
  for (int64_t i = 0; i < (int64_t)im->w * im->h; i++)
    n += im->rgb[3 * i] != 255 || im->rgb[3 * i + 1] != 255 || im->rgb[3 * i + 2] != 255;
  return n;
}

/* pixels exactly of colour (r, g, b) */
static int64_t count_colour(const image *im, int r, int g, int b) {
  int64_t n = 0;
  for (int64_t i = 0; i < (int64_t)im->w * im->h; i++)
    n += im->rgb[3 * i] == r && im->rgb[3 * i + 1] == g && im->rgb[3 * i + 2] == b;
  return n;
}

static char g_dir[64];

static void tmp_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", g_dir, name);
}

static void test_lines(void **state) {
  (void)state;
  enum { N = 200 };
  double x[N], y1[N], y2[N], y3[N];
  for (int i = 0; i < N; i++) {
    x[i] = i;
    y1[i] = 65536.0 / pow(2.0, i / 20.0);
    y2[i] = 2.0 + sin(i / 10.0);
    y3[i] = 0.5 + i / 100.0;
  }
  y1[50] = NAN; /* a gap */
  y2[10] = INFINITY;
  y3[0] = -1; /* skipped on a log axis */
  const ampc_plot_series s[3] = {
      {"loss scale", N, x, y1, 0}, {"loss", N, x, y2, 0}, {"grad norm", N, x, y3, 1}};
  char path[128];
  for (int logy = 0; logy <= 1; logy++) {
    tmp_path(path, sizeof path, logy ? "lines_log.png" : "lines.png");
    assert_int_equal(ampc_plot_lines(path, "training", "step", "value", s, 3, logy), AMPC_OK);
    image im = decode(path);
    assert_int_equal(im.w, AMPC_PLOT_WIDTH);
    assert_int_equal(im.h, AMPC_PLOT_HEIGHT);
    const int64_t ink = count_non_white(&im);
    printf("lines (logy %d): %lld non-white pixels\n", logy, (long long)ink);
    assert_true(ink > 5000);
    /* the three series colours (Okabe-Ito blue, vermillion, green) */
    assert_true(count_colour(&im, 0, 114, 178) > 100);
    assert_true(count_colour(&im, 213, 94, 0) > 100);
    assert_true(count_colour(&im, 0, 158, 115) > 100);
    free(im.rgb);
  }
}

static void test_hist(void **state) {
  (void)state;
  enum { LO = -40, NB = 60 };
  uint64_t a[NB], b[NB];
  for (int k = 0; k < NB; k++) {
    const double e = LO + k;
    a[k] = (uint64_t)(1e6 * exp(-(e + 12) * (e + 12) / 30.0));
    b[k] = (uint64_t)(1e6 * exp(-(e + 26) * (e + 26) / 20.0));
  }
  const ampc_plot_hist h[2] = {{"vision", a, 50000}, {"text", b, 200000}};
  char path[128];
  tmp_path(path, sizeof path, "hist.png");
  assert_int_equal(ampc_plot_log2_hist(path, "activation gradients", LO, NB, h, 2), AMPC_OK);
  image im = decode(path);
  assert_int_equal(im.w, AMPC_PLOT_WIDTH);
  assert_int_equal(im.h, AMPC_PLOT_HEIGHT);
  const int64_t ink = count_non_white(&im);
  printf("hist: %lld non-white pixels\n", (long long)ink);
  assert_true(ink > 20000);
  assert_true(count_colour(&im, 0, 114, 178) > 100); /* vision */
  assert_true(count_colour(&im, 213, 94, 0) > 100);  /* text */
  /* the four bands: normal, subnormal, flushed, overflow shades */
  assert_true(count_colour(&im, 225, 240, 225) > 1000);
  assert_true(count_colour(&im, 255, 240, 200) > 1000);
  assert_true(count_colour(&im, 250, 215, 215) > 1000);
  assert_true(count_colour(&im, 230, 220, 245) > 1000);
  free(im.rgb);
}

static void test_errors(void **state) {
  (void)state;
  double x[2] = {0, 1}, y[2] = {1, 2};
  const ampc_plot_series s = {"a", 2, x, y, 0};
  const char *bad = "/nonexistent-dir-ampc/plot.png";
  assert_int_equal(ampc_plot_lines(bad, "t", "x", "y", &s, 1, 0), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), bad));
  uint64_t c[3] = {1, 2, 3};
  const ampc_plot_hist h = {"g", c, 0};
  assert_int_equal(ampc_plot_log2_hist(bad, "t", -2, 3, &h, 1), AMPC_ERR_IO);
  assert_non_null(strstr(ampc_last_error(), bad));
  char path[128];
  tmp_path(path, sizeof path, "never.png");
  assert_int_equal(ampc_plot_lines(path, "t", "x", "y", NULL, 1, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_plot_lines(path, "t", "x", "y", &s, 0, 0), AMPC_ERR_INVALID_ARG);
  const ampc_plot_series nox = {"a", 2, NULL, y, 0};
  assert_int_equal(ampc_plot_lines(path, "t", "x", "y", &nox, 1, 0), AMPC_ERR_INVALID_ARG);
  assert_int_equal(ampc_plot_log2_hist(path, "t", -2, 0, &h, 1), AMPC_ERR_INVALID_ARG);
  const ampc_plot_hist noc = {"g", NULL, 0};
  assert_int_equal(ampc_plot_log2_hist(path, "t", -2, 3, &noc, 1), AMPC_ERR_INVALID_ARG);
  assert_int_equal(access(path, F_OK), -1);
  /* all points unusable: an empty frame, still a valid image */
  double ny[2] = {NAN, -1};
  const ampc_plot_series empty = {"e", 2, x, ny, 0};
  assert_int_equal(ampc_plot_lines(path, "empty", "x", "y", &empty, 1, 1), AMPC_OK);
  image im = decode(path);
  assert_int_equal(im.w, AMPC_PLOT_WIDTH);
  free(im.rgb);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ampc_plot_XXXXXX");
  if (!mkdtemp(g_dir))
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lines),
      cmocka_unit_test(test_hist),
      cmocka_unit_test(test_errors),
  };
  const int rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (getenv("AMPC_KEEP_PLOTS")) {
    printf("plots kept in %s\n", g_dir);
    return rc;
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0)
    return 1;
  return rc;
}
