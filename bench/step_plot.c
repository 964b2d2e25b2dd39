/*
 * bench/step_plot.c: `bench_step_plot RESULTS.jsonl PREFIX` turns the JSON
 * lines of `ampc bench step --json` runs (bench/step/scaling.sh) into the
 * scaling tables of docs/BENCHMARKS.md (markdown on stdout) and two PNG plots
 * drawn with ampc_plot_lines: PREFIX-batch.png (ms/step against the batch at
 * width 128) and PREFIX-dim.png (against the width at batch 128), one series
 * per precision. A benchmark helper, never a test.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampc/plot.h"

enum { MAXP = 64, NPREC = 2 };
static const char *const k_prec[NPREC] = {"32-true", "16-mixed"};

typedef struct {
  double batch, dim, ms, rss;
  int prec;
} point;

static int cmp_x(const void *a, const void *b) {
  const double *x = a, *y = b;
  return (*x > *y) - (*x < *y);
}

/* the sorted distinct values of field f (0 batch, 1 dim) among the points
 * whose other field equals `fixed` */
static int axis(const point *p, int n, int f, double fixed, double *xs) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    const double x = f ? p[i].dim : p[i].batch, o = f ? p[i].batch : p[i].dim;
    int seen = o != fixed;
    for (int j = 0; j < k && !seen; j++)
      seen = xs[j] == x;
    if (!seen && k < MAXP)
      xs[k++] = x;
  }
  qsort(xs, (size_t)k, sizeof *xs, cmp_x);
  return k;
}

static const point *find(const point *p, int n, int prec, double batch, double dim) {
  for (int i = 0; i < n; i++)
    if (p[i].prec == prec && p[i].batch == batch && p[i].dim == dim)
      return &p[i];
  return NULL;
}

static int emit(const point *p, int n, int f, const char *prefix) {
  const double fixed = 128; /* the other axis: batch 128 or width 128 */
  double xs[MAXP], ys[NPREC][MAXP];
  const int k = axis(p, n, f, fixed, xs);
  const char *xname = f ? "width (dim; MLP 4 dim, batch 128)" : "batch (width 128)";
  printf("\n| %s | 32-true ms/step | 16-mixed ms/step | 16-mixed / 32-true | 32-true ms per "
         "sample | 16-mixed ms per sample | 32-true peak RSS MiB | 16-mixed peak RSS MiB |\n"
         "|---:|---:|---:|---:|---:|---:|---:|---:|\n",
         f ? "dim" : "batch");
  for (int i = 0; i < k; i++) {
    const double b = f ? 128 : xs[i], d = f ? xs[i] : 128;
    const point *a = find(p, n, 0, b, d), *h = find(p, n, 1, b, d);
    ys[0][i] = a ? a->ms : (double)NAN;
    ys[1][i] = h ? h->ms : (double)NAN;
    printf("| %.0f | %.1f | %.1f | %.2f | %.2f | %.2f | %.0f | %.0f |\n", xs[i], ys[0][i], ys[1][i],
           ys[1][i] / ys[0][i], ys[0][i] / b, ys[1][i] / b, a ? a->rss / 1048576.0 : (double)NAN,
           h ? h->rss / 1048576.0 : (double)NAN);
  }
  ampc_plot_series s[NPREC];
  for (int q = 0; q < NPREC; q++)
    s[q] = (ampc_plot_series){k_prec[q], k, xs, ys[q], 0};
  char path[1024], title[160];
  snprintf(path, sizeof path, "%s-%s.png", prefix, f ? "dim" : "batch");
  snprintf(title, sizeof title, "ampc vit-ref training step vs %s", f ? "width" : "batch");
  if (ampc_plot_lines(path, title, xname, "ms per step (log2 axis)", s, NPREC, 1) != AMPC_OK) {
    fprintf(stderr, "bench_step_plot: %s\n", ampc_last_error());
    return 1;
  }
  fprintf(stderr, "wrote %s\n", path);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bench_step_plot RESULTS.jsonl PREFIX\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    fprintf(stderr, "bench_step_plot: cannot open %s\n", argv[1]);
    return 1;
  }
  static point p[4 * MAXP];
  static char line[1 << 16];
  int n = 0;
  while (n < 4 * MAXP && fgets(line, sizeof line, f)) {
    cJSON *o = cJSON_Parse(line);
    if (!o)
      continue;
    const cJSON *pr = cJSON_GetObjectItem(o, "precision");
    int q = -1;
    for (int i = 0; i < NPREC; i++)
      if (cJSON_IsString(pr) && strcmp(pr->valuestring, k_prec[i]) == 0)
        q = i;
    if (q >= 0)
      p[n++] = (point){cJSON_GetNumberValue(cJSON_GetObjectItem(o, "batch")),
                       cJSON_GetNumberValue(cJSON_GetObjectItem(o, "dim")),
                       cJSON_GetNumberValue(cJSON_GetObjectItem(o, "ms_per_step_median")),
                       cJSON_GetNumberValue(cJSON_GetObjectItem(o, "peak_rss_bytes")), q};
    cJSON_Delete(o);
  }
  fclose(f);
  return emit(p, n, 0, argv[2]) | emit(p, n, 1, argv[2]);
}
