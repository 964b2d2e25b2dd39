/*
 * src/data/fashion_mnist.c: Fashion-MNIST (Zalando, MIT licence) from its four
 * gzipped IDX files, as Debian's dataset-fashion-mnist installs them under
 * /usr/share/datasets/fashion-mnist/.
 *
 * IDX (big-endian): images u32 magic 2051, u32 count, u32 rows, u32 cols, then
 * count*rows*cols uint8 pixels row-major; labels u32 magic 2049, u32 count,
 * then count uint8 labels. The files are read with zlib's gzread (which also
 * reads an uncompressed file as is) and must end exactly after their data.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/data_internal.h"

enum { FM_SIDE = 28, FM_CLASSES = 10, FM_MAX_COUNT = 1 << 22 };
#define FM_IMAGES_MAGIC 2051u
#define FM_LABELS_MAGIC 2049u

static const char *const k_fm_names[FM_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
static const char *const k_fm_files[2][2] = {
    {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
    {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};

typedef struct fm_file {
  char path[4096];
  gzFile gz;
} fm_file;

static ampc_status fm_open(fm_file *f, const char *dir, const char *name) {
  f->gz = NULL;
  const int len = snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
  if (len < 0 || (size_t)len >= sizeof f->path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: directory name too long", dir);
  errno = 0;
  f->gz = gzopen(f->path, "rb");
  if (!f->gz)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open: %s", f->path,
                     errno ? strerror(errno) : "out of memory");
  return AMPC_OK;
}

/* Read exactly len bytes (len may exceed INT_MAX in principle; chunked). */
static ampc_status fm_read(fm_file *f, void *dst, size_t len, const char *what) {
  unsigned char *p = dst;
  while (len > 0) {
    const unsigned chunk = len > (1u << 30) ? (1u << 30) : (unsigned)len;
    const int got = gzread(f->gz, p, chunk);
    if (got < 0) {
      int errnum = 0;
      const char *msg = gzerror(f->gz, &errnum);
      return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt gzip data in the %s: %s", f->path, what,
                       msg ? msg : "unknown error");
    }
    if (got == 0)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: truncated in the %s", f->path, what);
    p += got;
    len -= (size_t)got;
  }
  return AMPC_OK;
}

/* The file must end here. */
static ampc_status fm_expect_end(fm_file *f) {
  unsigned char extra;
  const int got = gzread(f->gz, &extra, 1);
  if (got < 0) {
    int errnum = 0;
    const char *msg = gzerror(f->gz, &errnum);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt gzip data at the end: %s", f->path,
                     msg ? msg : "unknown error");
  }
  if (got > 0)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: unexpected bytes after the data", f->path);
  int errnum = Z_OK;
  const char *msg = gzerror(f->gz, &errnum);
  if (errnum != Z_OK) /* Z_BUF_ERROR: the gzip stream or its trailer is cut short */
    return ampc_fail(AMPC_ERR_FORMAT, "%s: truncated or corrupt gzip stream: %s", f->path,
                     msg ? msg : "unknown error");
  return AMPC_OK;
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Open one images/labels pair and check their headers; *count is the number
 * of samples. */
static ampc_status fm_headers(fm_file f[2], const char *dir, int set, uint32_t *count) {
  ampc_status st;
  if ((st = fm_open(&f[0], dir, k_fm_files[set][0])) != AMPC_OK ||
      (st = fm_open(&f[1], dir, k_fm_files[set][1])) != AMPC_OK)
    return st;
  unsigned char hi[16], hl[8];
  if ((st = fm_read(&f[0], hi, sizeof hi, "header")) != AMPC_OK ||
      (st = fm_read(&f[1], hl, sizeof hl, "header")) != AMPC_OK)
    return st;
  if (be32(hi) != FM_IMAGES_MAGIC)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: magic %u, expected %u (IDX uint8 images)", f[0].path,
                     be32(hi), FM_IMAGES_MAGIC);
  if (be32(hl) != FM_LABELS_MAGIC)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: magic %u, expected %u (IDX uint8 labels)", f[1].path,
                     be32(hl), FM_LABELS_MAGIC);
  const uint32_t ni = be32(hi + 4), rows = be32(hi + 8), cols = be32(hi + 12), nl = be32(hl + 4);
  if (rows != FM_SIDE || cols != FM_SIDE)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: images are %ux%u, expected %dx%d", f[0].path, rows, cols,
                     FM_SIDE, FM_SIDE);
  if (ni != nl)
    return ampc_fail(AMPC_ERR_FORMAT, "%s holds %u images but %s holds %u labels", f[0].path, ni,
                     f[1].path, nl);
  if (ni < 1 || ni > FM_MAX_COUNT)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: implausible image count %u", f[0].path, ni);
  *count = ni;
  return AMPC_OK;
}

ampc_status ampc_fashion_mnist_load(const char *dir, ampc_dataset *out) {
  if (!dir || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_fashion_mnist_load: NULL argument");
  memset(out, 0, sizeof *out);
  fm_file f[2][2];
  memset(f, 0, sizeof f);
  uint32_t count[2] = {0, 0};
  ampc_dataset d = {0};
  ampc_status st = fm_headers(f[0], dir, 0, &count[0]);
  if (st == AMPC_OK)
    st = fm_headers(f[1], dir, 1, &count[1]);
  if (st != AMPC_OK)
    goto done;
  if ((uint64_t)count[0] + count[1] > AMPC_DS_MAX_N) {
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: too many images (%u + %u)", dir, count[0], count[1]);
    goto done;
  }
  d.n = (int32_t)(count[0] + count[1]);
  d.height = FM_SIDE;
  d.width = FM_SIDE;
  d.channels = 1;
  d.seq_len = 0;
  d.vocab = 0;
  d.n_classes = FM_CLASSES;
  size_t text_bytes[AMPC__DS_TEXTS] = {0, 0, 0, 0};
  for (int k = 0; k < FM_CLASSES; k++)
    text_bytes[1] += strlen(k_fm_names[k]) + 1;
  char *text[AMPC__DS_TEXTS];
  if ((st = ampc__dataset_alloc(&d, text_bytes, text)) != AMPC_OK)
    goto done;
  char *w = text[1];
  for (int k = 0; k < FM_CLASSES; k++) {
    const size_t l = strlen(k_fm_names[k]) + 1;
    memcpy(w, k_fm_names[k], l);
    d.class_names[k] = w;
    w += l;
  }
  size_t first = 0;
  for (int set = 0; set < 2 && st == AMPC_OK; set++) {
    const size_t cnt = count[set], px = (size_t)FM_SIDE * FM_SIDE;
    /* labels go through the split array as scratch, then into label */
    if ((st = fm_read(&f[set][0], d.images + first * px, cnt * px, "pixels")) != AMPC_OK ||
        (st = fm_read(&f[set][1], d.split + first, cnt, "labels")) != AMPC_OK ||
        (st = fm_expect_end(&f[set][0])) != AMPC_OK || (st = fm_expect_end(&f[set][1])) != AMPC_OK)
      break;
    for (size_t i = first; i < first + cnt; i++) {
      if (d.split[i] >= FM_CLASSES) {
        st = ampc_fail(AMPC_ERR_FORMAT, "%s: label %u of image %zu is not in [0, %d)",
                       f[set][1].path, (unsigned)d.split[i], i - first, FM_CLASSES);
        break;
      }
      d.label[i] = d.split[i];
      d.split[i] = set ? AMPC_SPLIT_TEST : AMPC_SPLIT_TRAIN;
      d.concept[i] = (int32_t)i;
      d.style[i] = 0;
    }
    first += cnt;
  }
  if (st == AMPC_OK)
    *out = d;
  else
    ampc_dataset_free(&d);
done:
  for (int set = 0; set < 2; set++)
    for (int k = 0; k < 2; k++)
      if (f[set][k].gz)
        gzclose(f[set][k].gz);
  return st;
}
