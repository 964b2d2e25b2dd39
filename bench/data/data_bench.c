/*
 * bench/data/data_bench.c: the own-data path measured (docs/BENCHMARKS.md).
 *
 *   bench_data export-fashion DIR   Fashion-MNIST (Debian's dataset-fashion-mnist)
 *                                   as DIR/img/NNNNN.png + DIR/data.csv (filepath,
 *                                   title, label), a caption from a template per
 *                                   class
 *   bench_data export-emoji DIR     the bundled emoji pairs as WebDataset shards of
 *                                   JPEGs: DIR/emoji-{000..NNN}.tar (KEY.jpg, KEY.txt,
 *                                   KEY.cls), 1000 samples a shard
 *   bench_data make-jpeg DIR N      N synthetic 256x256 JPEGs (quality 90) and N PNGs
 *                                   with DIR/jpeg.csv and DIR/png.csv
 *   bench_data loader PACK [B] [S]  the streaming loader alone: S batches of B from a
 *                                   pack with the prefetch thread, samples/s
 *
 * Pack throughput is measured with `ampc data pack --threads 1|2 --json` on
 * make-jpeg's files (bench/data/run.sh).
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "ampc/data.h"
#include "ampc/shards.h"

static int die(const char *what) {
  fprintf(stderr, "bench_data: %s\n", what);
  return 1;
}

/* an RGB or gray image to a PNG file */
static int write_png(const char *path, const uint8_t *px, int w, int h, int ch) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(p);
  if (setjmp(png_jmpbuf(p))) {
    png_destroy_write_struct(&p, &info);
    fclose(f);
    return -1;
  }
  png_init_io(p, f);
  png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8,
               ch == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(p, info);
  for (int y = 0; y < h; y++)
    png_write_row(p, (png_bytep)(px + (size_t)y * (size_t)w * (size_t)ch));
  png_write_end(p, NULL);
  png_destroy_write_struct(&p, &info);
  return fclose(f);
}

/* CSV quoting (RFC 4180): always quoted, quotes doubled */
static void put_csv_field(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static int export_fashion(const char *dir) {
  ampc_dataset d;
  if (ampc_fashion_mnist_load("/usr/share/datasets/fashion-mnist", &d) != AMPC_OK)
    return die(ampc_last_error());
  char p[4096];
  mkdir(dir, 0777);
  snprintf(p, sizeof p, "%s/img", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/data.csv", dir);
  FILE *csv = fopen(p, "w");
  if (!csv)
    return die("cannot write data.csv");
  fprintf(csv, "filepath,title,label\n");
  /* a few templates per class so captions are not all one string */
  static const char *const tmpl[4] = {"a photo of a %s", "a grayscale picture of a %s",
                                      "a small image of a %s", "a %s on a black background"};
  for (int32_t i = 0; i < d.n; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "img/%05d.png", i);
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    if (write_png(p, d.images + (size_t)i * 784, 28, 28, 1) != 0)
      return die("cannot write a PNG");
    char name[64], cap[128];
    snprintf(name, sizeof name, "%s", d.class_names[d.label[i]]);
    for (char *c = name; *c; c++)
      *c = *c == '/' ? ' ' : (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    snprintf(cap, sizeof cap, tmpl[(uint32_t)(i * 2654435761u) >> 30], name);
    fprintf(csv, "%s,", rel);
    put_csv_field(csv, cap);
    fputc(',', csv);
    put_csv_field(csv, name);
    fputc('\n', csv);
  }
  fclose(csv);
  printf("exported %d Fashion-MNIST images to %s/data.csv\n", d.n, dir);
  ampc_dataset_free(&d);
  return 0;
}

static int tar_add(struct archive *a, const char *name, const void *data, size_t n) {
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, name);
  archive_entry_set_size(e, (la_int64_t)n);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_mtime(e, 0, 0);
  int rc =
      archive_write_header(a, e) == ARCHIVE_OK && archive_write_data(a, data, n) == (la_ssize_t)n
          ? 0
          : -1;
  archive_entry_free(e);
  return rc;
}

static int export_emoji(const char *dir) {
  ampc_dataset d;
  if (ampc_dataset_load_default(&d) != AMPC_OK)
    return die(ampc_last_error());
  mkdir(dir, 0777);
  tjhandle tj = tjInitCompress();
  struct archive *a = NULL;
  int shard = -1;
  const int per = 1000;
  for (int32_t i = 0; i < d.n; i++) {
    if (i / per != shard) {
      if (a && (archive_write_close(a) != ARCHIVE_OK || archive_write_free(a) != ARCHIVE_OK))
        return die("cannot finish a tar");
      shard = i / per;
      char p[4096];
      snprintf(p, sizeof p, "%s/emoji-%03d.tar", dir, shard);
      a = archive_write_new();
      archive_write_set_format_ustar(a);
      if (archive_write_open_filename(a, p) != ARCHIVE_OK)
        return die("cannot write a tar");
    }
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    if (tjCompress2(tj, d.images + (size_t)i * 3072, 32, 0, 32, TJPF_RGB, &jpg, &n, TJSAMP_444, 95,
                    0) != 0)
      return die(tjGetErrorStr2(tj));
    char key[64];
    snprintf(key, sizeof key, "%06d", i);
    char name[80];
    snprintf(name, sizeof name, "%s.jpg", key);
    int rc = tar_add(a, name, jpg, n);
    tjFree(jpg);
    snprintf(name, sizeof name, "%s.txt", key);
    rc |= tar_add(a, name, d.captions[i], strlen(d.captions[i]));
    snprintf(name, sizeof name, "%s.cls", key);
    const char *cls = d.class_names[d.label[i]];
    rc |= tar_add(a, name, cls, strlen(cls));
    if (rc)
      return die("cannot add to a tar");
  }
  if (a && (archive_write_close(a) != ARCHIVE_OK || archive_write_free(a) != ARCHIVE_OK))
    return die("cannot finish a tar");
  tjDestroy(tj);
  printf("exported %d emoji pairs to %s/emoji-{000..%03d}.tar\n", d.n, dir, shard);
  ampc_dataset_free(&d);
  return 0;
}

/* smooth colour fields with texture, so the JPEGs are photo-like in size */
static int make_jpeg(const char *dir, int n) {
  mkdir(dir, 0777);
  char p[4096];
  snprintf(p, sizeof p, "%s/img", dir);
  mkdir(p, 0777);
  tjhandle tj = tjInitCompress();
  uint8_t *px = malloc(256 * 256 * 3);
  snprintf(p, sizeof p, "%s/jpeg.csv", dir);
  FILE *cj = fopen(p, "w");
  snprintf(p, sizeof p, "%s/png.csv", dir);
  FILE *cp = fopen(p, "w");
  if (!tj || !px || !cj || !cp)
    return die("cannot start");
  fprintf(cj, "filepath,title\n");
  fprintf(cp, "filepath,title\n");
  uint64_t s = 0x1234567;
  for (int i = 0; i < n; i++) {
    const int fx = i % 7 + 1, fy = i % 5 + 1;
    for (int y = 0; y < 256; y++)
      for (int x = 0; x < 256; x++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int noise = (int)(s >> 60) - 8;
        for (int c = 0; c < 3; c++) {
          int v = 128 + ((x * fx + y * fy + 40 * c + i) % 256) / 2 - 64 + noise;
          px[(y * 256 + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
      }
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    if (tjCompress2(tj, px, 256, 0, 256, TJPF_RGB, &jpg, &len, TJSAMP_420, 90, 0) != 0)
      return die(tjGetErrorStr2(tj));
    snprintf(p, sizeof p, "%s/img/%05d.jpg", dir, i);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(jpg, 1, len, f) != len || fclose(f) != 0)
      return die("cannot write a JPEG");
    tjFree(jpg);
    snprintf(p, sizeof p, "%s/img/%05d.png", dir, i);
    if (write_png(p, px, 256, 256, 3) != 0)
      return die("cannot write a PNG");
    fprintf(cj, "img/%05d.jpg,pattern %d with stripes %d and %d\n", i, i, fx, fy);
    fprintf(cp, "img/%05d.png,pattern %d with stripes %d and %d\n", i, i, fx, fy);
  }
  fclose(cj), fclose(cp);
  free(px);
  tjDestroy(tj);
  printf("wrote %d 256x256 JPEGs and PNGs to %s/img\n", n, dir);
  return 0;
}

static int loader(const char *pack, int64_t B, int64_t steps) {
  ampc_shards *s;
  ampc_stream *st;
  if (ampc_shards_open(&s, pack, true, false) != AMPC_OK ||
      ampc_stream_create(&st, s, 1, 0, true) != AMPC_OK)
    return die(ampc_last_error());
  const ampc_shards_info *in = ampc_shards_get_info(s);
  const int64_t img = (int64_t)in->image_size * in->image_size * in->channels;
  uint8_t *im = malloc((size_t)(B * img));
  int32_t *tok = malloc((size_t)(B * in->seq_len) * sizeof *tok), *lab = malloc((size_t)B * 4);
  double wait = 0.0;
  const double t0 = ampc_now_s();
  for (int64_t k = 0; k < steps; k++)
    wait += ampc_stream_fill(st, k * B, B, im, tok, lab, (k + 1) * B);
  const double sec = ampc_now_s() - t0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double train_mib =
      (double)in->n_train *
      (double)ampc_shard_record_bytes(in->image_size, in->channels, in->seq_len) / 1048576.0;
  printf("{\"bench\":\"loader\",\"pack\":\"%s\",\"image_size\":%d,\"batch\":%lld,\"batches\":%lld,"
         "\"epochs\":%.2f,\"seconds\":%.4f,\"samples_per_s\":%.0f,\"wait_ms_per_batch\":%.4f,"
         "\"train_split_mib\":%.1f,\"peak_rss_mib\":%.1f}\n",
         pack, in->image_size, (long long)B, (long long)steps,
         (double)(B * steps) / (double)in->n_train, sec, (double)(B * steps) / sec,
         wait / (double)steps, train_mib, (double)ru.ru_maxrss / 1024.0);
  free(im), free(tok), free(lab);
  ampc_stream_free(st);
  ampc_shards_close(s);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "export-fashion"))
    return export_fashion(argv[2]);
  if (argc >= 3 && !strcmp(argv[1], "export-emoji"))
    return export_emoji(argv[2]);
  if (argc >= 4 && !strcmp(argv[1], "make-jpeg"))
    return make_jpeg(argv[2], atoi(argv[3]));
  if (argc >= 3 && !strcmp(argv[1], "loader"))
    return loader(argv[2], argc > 3 ? atoll(argv[3]) : 64, argc > 4 ? atoll(argv[4]) : 2000);
  fprintf(stderr, "usage: bench_data export-fashion DIR | export-emoji DIR | make-jpeg DIR N | "
                  "loader PACK [BATCH] [BATCHES]\n");
  return 2;
}
