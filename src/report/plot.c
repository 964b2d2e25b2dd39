/*
 * src/report/plot.c: PNG plots (include/ampc/plot.h). PLplot draws into an
 * RGB buffer we own through its `mem` driver (plsmem), with Hershey stroke
 * fonts for text; libpng writes the buffer. Every call makes its own PLplot
 * stream (plmkstrm) and ends it (plend1), so nothing leaks between calls;
 * PLplot's abort handler is replaced so that its errors become an ampc
 * status instead of text on stderr.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plplot.h>

#include "ampc/plot.h"

enum { W = AMPC_PLOT_WIDTH, H = AMPC_PLOT_HEIGHT, NCOL = 8 };

/* series colours (Okabe-Ito), cmap0 indices 2.. */
static const int k_col[NCOL][3] = {{0, 114, 178}, {213, 94, 0},   {0, 158, 115}, {204, 121, 167},
                                   {230, 159, 0}, {86, 180, 233}, {0, 0, 0},     {240, 228, 66}};
/* band shades, cmap0 indices 10..13: normal, subnormal, flushed, overflow */
static const int k_band[4][3] = {
    {225, 240, 225}, {255, 240, 200}, {250, 215, 215}, {230, 220, 245}};

static char g_plerr[256]; /* PLplot's last abort message (one stream at a time) */
static void on_abort(PLCHAR_VECTOR msg) { snprintf(g_plerr, sizeof g_plerr, "%s", msg); }

static ampc_status write_png(const char *path, const uint8_t *rgb, int w, int h) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return ampc_fail(AMPC_ERR_IO, "cannot write PNG %s: %s", path, strerror(errno));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    fclose(f);
    return ampc_fail(AMPC_ERR_NOMEM, "cannot write PNG %s: out of memory", path);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    fclose(f);
    return ampc_fail(AMPC_ERR_IO, "cannot write PNG %s", path);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; y++)
    png_write_row(png, (png_const_bytep)(rgb + (size_t)y * (size_t)w * 3));
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  if (fclose(f) != 0)
    return ampc_fail(AMPC_ERR_IO, "cannot write PNG %s: %s", path, strerror(errno));
  return AMPC_OK;
}

/* A new stream drawing into rgb (white), colours set, initialised. Returns
 * the previous stream number for end_stream. */
static PLINT begin_stream(uint8_t *rgb) {
  memset(rgb, 255, (size_t)W * H * 3);
  PLINT old = 0, strm = 0;
  plgstrm(&old);
  plmkstrm(&strm);
  plsabort(on_abort);
  g_plerr[0] = '\0';
  plsdev("mem");
  plsmem(W, H, rgb);
  plscolbg(255, 255, 255);
  plscol0(1, 0, 0, 0);
  for (int i = 0; i < NCOL; i++)
    plscol0(2 + i, k_col[i][0], k_col[i][1], k_col[i][2]);
  for (int i = 0; i < 4; i++)
    plscol0(10 + i, k_band[i][0], k_band[i][1], k_band[i][2]);
  plscol0(14, 128, 128, 128);
  plinit();
  pladv(0);
  plschr(0.0, 0.9);
  plpsty(8); /* the mem driver has no solid fill: PLplot falls back to its software
                fill (pattern 8) and says so on stderr, unless it is chosen here */
  return old;
}

static void end_stream(PLINT old) {
  plend1();
  plsstrm(old);
}

/* y tick labels on the log2 axis: 2^k */
static void log2_label(PLINT axis, PLFLT value, PLCHAR_NC_VECTOR label, PLINT length,
                       PLPointer data) {
  (void)data;
  if (axis == PL_Y_AXIS)
    snprintf(label, (size_t)length, "2#u%d#d", (int)lround(value));
  else
    snprintf(label, (size_t)length, "%g", value);
}

static double ty(double y, int logy) { return logy ? log2(y) : y; }
static int usable(double y, int logy) { return isfinite(y) && (!logy || y > 0); }

/* A label as PLplot text: '#' starts PLplot's escape sequences, "##" is a
 * literal '#' (cut short to fit cap). */
static const char *pl_text(const char *label, char *buf, size_t cap) {
  size_t o = 0;
  for (const char *p = label ? label : ""; *p && o + 2 < cap; p++) {
    if (*p == '#')
      buf[o++] = '#';
    buf[o++] = *p;
  }
  buf[o] = 0;
  return buf;
}

ampc_status ampc_plot_lines(const char *path, const char *title, const char *xlabel,
                            const char *ylabel, const ampc_plot_series *s, int ns, int logy) {
  if (!path || !s || ns < 1 || ns > 64)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_plot_lines: bad arguments (%d series)", ns);
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  int64_t maxn = 0;
  for (int i = 0; i < ns; i++) {
    if (s[i].n < 0 || (s[i].n > 0 && (!s[i].x || !s[i].y)))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_plot_lines: series %d: bad points", i);
    if (s[i].n > maxn)
      maxn = s[i].n;
    for (int64_t k = 0; k < s[i].n; k++) {
      if (!isfinite(s[i].x[k]) || !usable(s[i].y[k], logy))
        continue;
      const double yv = ty(s[i].y[k], logy);
      x0 = fmin(x0, s[i].x[k]), x1 = fmax(x1, s[i].x[k]);
      y0 = fmin(y0, yv), y1 = fmax(y1, yv);
    }
  }
  if (!(x0 <= x1)) /* nothing to plot: an empty frame */
    x0 = 0, x1 = 1, y0 = logy ? 0 : 0, y1 = 1;
  if (x1 - x0 < 1e-12)
    x0 -= 0.5, x1 += 0.5;
  if (y1 - y0 < 1e-12)
    y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  if (logy) /* whole powers of two, never a line on the frame */
    y0 = floor(y0 - 0.25), y1 = ceil(y1 + 0.25);
  uint8_t *rgb = malloc((size_t)W * H * 3);
  PLFLT *px = malloc((size_t)(maxn > 0 ? maxn : 1) * sizeof *px);
  PLFLT *py = malloc((size_t)(maxn > 0 ? maxn : 1) * sizeof *py);
  if (!rgb || !px || !py) {
    free(rgb), free(px), free(py);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_plot_lines: out of memory");
  }
  const PLINT old = begin_stream(rgb);
  plvpor(0.10, 0.96, 0.11, 0.91);
  plwind(x0, x1, y0, y1);
  plcol0(1);
  if (logy) {
    plslabelfunc(log2_label, NULL);
    plbox("bcnst", 0.0, 0, "bcnostv", y1 - y0 > 12 ? ceil((y1 - y0) / 8) : 1.0, 0);
    plslabelfunc(NULL, NULL);
  } else {
    plbox("bcnst", 0.0, 0, "bcnstv", 0.0, 0);
  }
  pllab(xlabel ? xlabel : "", ylabel ? ylabel : "", title ? title : "");
  PLINT opts[64], lcol[64], lsty[64], scol[64], snum[64];
  PLFLT lw[64], ssc[64];
  const char *text[64], *sym[64];
  static char lbuf[64][256]; /* PLplot is single-threaded here anyway (plot.h) */
  for (int i = 0; i < ns; i++) {
    const PLINT col = 2 + i % NCOL;
    /* a line style per series as well as a colour, so series that coincide
     * (e.g. several runs at loss scale 1) stay visible */
    const PLINT sty = 1 + (PLINT)(i % 8);
    plcol0(col);
    plwidth(2.0);
    pllsty(sty);
    /* runs of usable points; a non-finite y ends a run (a gap) */
    int64_t k = 0;
    while (k < s[i].n) {
      PLINT m = 0;
      while (k < s[i].n && isfinite(s[i].x[k]) && usable(s[i].y[k], logy)) {
        px[m] = s[i].x[k], py[m] = ty(s[i].y[k], logy);
        m++, k++;
      }
      if (m > 0) {
        if (s[i].style == 1)
          plstring(m, px, py, "#(840)"); /* a filled circle (Hershey 840) */
        else if (m == 1)
          plstring(1, px, py, "#(840)");
        else
          plline(m, px, py);
      }
      k++;
    }
    opts[i] = s[i].style == 1 ? PL_LEGEND_SYMBOL : PL_LEGEND_LINE;
    lcol[i] = col, lsty[i] = sty, lw[i] = 2.0;
    scol[i] = col, ssc[i] = 1.0, snum[i] = 3, sym[i] = "#(840)";
    text[i] = pl_text(s[i].label, lbuf[i], sizeof lbuf[i]);
  }
  plwidth(1.0);
  pllsty(1);
  PLFLT lgw = 0, lgh = 0;
  PLINT tcol[64];
  for (int i = 0; i < ns; i++)
    tcol[i] = 1;
  pllegend(&lgw, &lgh, PL_LEGEND_BOUNDING_BOX,
           PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE, 0.01, 0.01, 0.08, 0, 1, 1, 0,
           0, ns, opts, 1.0, 0.8, 2.0, 0.0, tcol, text, NULL, NULL, NULL, NULL, lcol, lsty, lw,
           scol, ssc, snum, sym);
  end_stream(old);
  free(px), free(py);
  ampc_status st = g_plerr[0] ? ampc_fail(AMPC_ERR_IO, "plot %s: PLplot: %s", path, g_plerr)
                              : write_png(path, rgb, W, H);
  free(rgb);
  return st;
}

/* a filled rectangle [xa, xb] x [ya, yb] in colour col, of a frame whose
 * world y range is yrange: horizontal lines under a pixel apart (the mem
 * driver has no solid fill and PLplot's software fill is a hatch) */
static void rect(double xa, double xb, double ya, double yb, PLINT col, double yrange) {
  const int n = 2 + (int)ceil((yb - ya) / yrange * H * 1.6);
  plcol0(col);
  for (int i = 0; i < n; i++) {
    const PLFLT y = ya + (yb - ya) * i / (n - 1);
    pljoin(xa, y, xb, y);
  }
}

ampc_status ampc_plot_log2_hist(const char *path, const char *title, int lo, int nbins,
                                const ampc_plot_hist *h, int nh) {
  const ampc_plot_bands f16 = {-25, -14, 16, "binary16", "log#d2#u|g|"};
  return ampc_plot_log2_hist_bands(path, title, lo, nbins, h, nh, &f16);
}

ampc_status ampc_plot_log2_hist_bands(const char *path, const char *title, int lo, int nbins,
                                      const ampc_plot_hist *h, int nh, const ampc_plot_bands *fb) {
  if (!fb || !(fb->flush_below <= fb->normal_from && fb->normal_from <= fb->overflow_from))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_plot_log2_hist: bad bands");
  if (!path || !h || nh < 1 || nh > 64 || nbins < 1 || nbins > 4096 || lo < -100000 || lo > 100000)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_plot_log2_hist: bad arguments (%d bins, %d "
                     "entries)",
                     nbins, nh);
  for (int i = 0; i < nh; i++)
    if (!h[i].counts)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_plot_log2_hist: entry %d has no counts", i);
  /* x: log2|g|; the zero bars sit in [lo - 3, lo - 1), left of the bins */
  const double x0 = lo - 4, x1 = lo + nbins + 1, zx0 = lo - 3, zx1 = lo - 1;
  double ymax = 0;
  double *tot = calloc((size_t)nh, sizeof *tot);
  PLFLT *px = malloc((size_t)(2 * nbins + 2) * sizeof *px);
  PLFLT *py = malloc((size_t)(2 * nbins + 2) * sizeof *py);
  uint8_t *rgb = malloc((size_t)W * H * 3);
  if (!tot || !px || !py || !rgb) {
    free(tot), free(px), free(py), free(rgb);
    return ampc_fail(AMPC_ERR_NOMEM, "ampc_plot_log2_hist: out of memory");
  }
  for (int i = 0; i < nh; i++) {
    double t = (double)h[i].zeros;
    for (int k = 0; k < nbins; k++)
      t += (double)h[i].counts[k];
    tot[i] = t > 0 ? t : 1;
    ymax = fmax(ymax, (double)h[i].zeros / tot[i]);
    for (int k = 0; k < nbins; k++)
      ymax = fmax(ymax, (double)h[i].counts[k] / tot[i]);
  }
  if (ymax <= 0)
    ymax = 1;
  const double y1 = ymax * 1.18;
  const PLINT old = begin_stream(rgb);
  plvpor(0.10, 0.96, 0.11, 0.91);
  plwind(x0, x1, 0, y1);
  /* binary16's bands, clipped to the frame: flushed (< 2^-25), subnormal
   * ([2^-25, 2^-14): [2^-25, 2^-24) rounds to 2^-24), normal [2^-14, 2^16),
   * overflow [2^16, ...); the zero bars' slot stays white */
  const struct {
    double a, b;
    PLINT col;
    const char *name;
  } bands[4] = {{-1e9, fb->flush_below, 12, "flushed to 0"},
                {fb->flush_below, fb->normal_from, 11, "subnormal"},
                {fb->normal_from, fb->overflow_from, 10, "normal"},
                {fb->overflow_from, 1e9, 13, "overflow"}};
  for (int i = 0; i < 4; i++) {
    const double a = fmax(bands[i].a, zx1 + 0.5), b = fmin(bands[i].b, x1);
    if (a >= b)
      continue;
    rect(a, b, 0, y1, bands[i].col, y1);
    plcol0(14);
    if (b - a >= 12)
      plptex((a + b) / 2, y1 * 0.96, 1, 0, 0.5, bands[i].name);
    else /* a narrow band at an edge: the name along it */
      plptex((a + b) / 2, y1 * 0.5, 0, 1, 0.5, bands[i].name);
  }
  plcol0(1);
  plbox("bcnst", 0.0, 0, "bcnstv", 0.0, 0);
  pllab(fb->xlabel ? fb->xlabel : "log#d2#u|x|", "fraction of values", title ? title : "");
  double zmax = 0;
  for (int i = 0; i < nh; i++)
    zmax = fmax(zmax, (double)h[i].zeros / tot[i]);
  plptex((zx0 + zx1) / 2, zmax + y1 * 0.02, 1, 0, 0.5, "0"); /* the zeros' bars */
  PLINT opts[64], lcol[64], lsty[64], tcol[64];
  PLFLT lw[64];
  const char *text[64];
  static char lbuf[64][256];
  const double bw = (zx1 - zx0) / nh;
  for (int i = 0; i < nh; i++) {
    const PLINT col = 2 + i % NCOL;
    /* zeros: a bar per entry, side by side */
    const double zf = (double)h[i].zeros / tot[i];
    if (zf > 0)
      rect(zx0 + i * bw, zx0 + (i + 1) * bw, 0, zf, col, y1);
    /* the bins as a step line */
    PLINT m = 0;
    for (int k = 0; k < nbins; k++) {
      const double f = (double)h[i].counts[k] / tot[i];
      px[m] = lo + k, py[m] = f, m++;
      px[m] = lo + k + 1, py[m] = f, m++;
    }
    plcol0(col);
    plwidth(2.0);
    plline(m, px, py);
    plwidth(1.0);
    opts[i] = PL_LEGEND_LINE, lcol[i] = col, lsty[i] = 1, lw[i] = 2.0, tcol[i] = 1;
    text[i] = pl_text(h[i].label, lbuf[i], sizeof lbuf[i]);
  }
  PLFLT lgw = 0, lgh = 0;
  pllegend(&lgw, &lgh, PL_LEGEND_BOUNDING_BOX,
           PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE, 0.01, 0.08, 0.08, 0, 1, 1, 0,
           0, nh, opts, 1.0, 0.8, 2.0, 0.0, tcol, text, NULL, NULL, NULL, NULL, lcol, lsty, lw,
           NULL, NULL, NULL, NULL);
  end_stream(old);
  free(tot), free(px), free(py);
  ampc_status st = g_plerr[0] ? ampc_fail(AMPC_ERR_IO, "plot %s: PLplot: %s", path, g_plerr)
                              : write_png(path, rgb, W, H);
  free(rgb);
  return st;
}
