/*
 * ampc/plot.h: PNG plots for the diagnosis: line/point plots of
 * training curves and the log2-magnitude histogram of gradients with
 * binary16's bands. Drawn with PLplot's `mem` driver into an RGB buffer
 * (text in PLplot's Hershey stroke fonts) and written with libpng. Each call
 * uses its own PLplot stream and ends it; PLplot keeps global state, so do
 * not call these from several threads at once.
 */
#ifndef AMPC_PLOT_H
#define AMPC_PLOT_H

#include <stdint.h>

#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ampc_plot_series {
  const char *label;   /* legend text */
  int64_t n;           /* points */
  const double *x, *y; /* [n]; non-finite y values are skipped (gap), not plotted */
  int style;           /* 0 = line, 1 = points (markers) */
} ampc_plot_series;

/* Line/point plot of ns series into a PNG at path (width x height pixels, e.g. 900x560);
 * logy != 0: y on a log2 axis (values <= 0 skipped). Legend, title, axis labels.
 * Errors: AMPC_ERR_INVALID_ARG (bad sizes, NULL), AMPC_ERR_IO naming the path. */
ampc_status ampc_plot_lines(const char *path, const char *title, const char *xlabel,
                            const char *ylabel, const ampc_plot_series *s, int ns, int logy);

typedef struct ampc_plot_hist {
  const char *label;      /* e.g. "vision" */
  const uint64_t *counts; /* [nbins]: counts[k] = values v with floor(log2|v|) == lo + k */
  uint64_t zeros;         /* exact zeros (drawn as a separate bar at the left, labelled "0") */
} ampc_plot_hist;

/* Histogram of log2|g| (fraction of values per bin, one panel or overlaid step lines per
 * entry) with binary16's bands shaded: normal [2^-14, 65504], subnormal [2^-24, 2^-14),
 * flushed to zero (< 2^-25), and overflow (>= 2^16), as in Micikevicius et al. 2018
 * (Mixed Precision Training, Fig. 3 activation-gradient histogram). Entries are
 * overlaid step lines (fraction of the entry's values, zeros included, per
 * bin); [2^-25, 2^-24) is shaded with the subnormals (it rounds to 2^-24, bar
 * the tie 2^-25 itself). The image is 900 x 560 pixels. Errors:
 * AMPC_ERR_INVALID_ARG (nbins < 1, nh < 1, NULL), AMPC_ERR_IO naming the path. */
ampc_status ampc_plot_log2_hist(const char *path, const char *title, int lo, int nbins,
                                const ampc_plot_hist *h, int nh);

/* The bands of another format, or of binary16 at a scale, for
 * ampc_plot_log2_hist_bands: positions on the log2 axis (reals, not
 * necessarily integers), flush_below <= normal_from <= overflow_from. The
 * format name is informative; xlabel is the axis label (PLplot escapes, e.g.
 * "log#d2#u|x|"; NULL for that). */
typedef struct ampc_plot_bands {
  double flush_below;   /* values below round to 0 */
  double normal_from;   /* subnormal below, normal from here */
  double overflow_from; /* overflow from here */
  const char *format;
  const char *xlabel;
} ampc_plot_bands;

/* As ampc_plot_log2_hist with the bands given (ampc_plot_log2_hist is this
 * with binary16's: -25, -14, 16, x label log2|g|). Errors as it, and
 * AMPC_ERR_INVALID_ARG for bands out of order. */
ampc_status ampc_plot_log2_hist_bands(const char *path, const char *title, int lo, int nbins,
                                      const ampc_plot_hist *h, int nh, const ampc_plot_bands *b);

/* The size of the image ampc_plot_lines draws: 900 x 560 pixels. */
enum { AMPC_PLOT_WIDTH = 900, AMPC_PLOT_HEIGHT = 560 };

#ifdef __cplusplus
}
#endif
#endif
