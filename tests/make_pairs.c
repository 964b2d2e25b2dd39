/*
 * tests/make_pairs.c DIR: the captioned images tests/check_pack.sh packs, in
 * every layout `ampc data pack` reads, made here with the field's encoders
 * (libjpeg-turbo, libpng, libwebp, libarchive):
 *
 *   DIR/img/NNN.jpg|png|webp   60 images of 24x16 pixels (w x h), one colour
 *                              ramp each, the format rotating jpg, png, webp
 *   DIR/data.csv               filepath,title,label (RFC 4180: quoted commas,
 *                              a quoted newline, doubled quotes)
 *   DIR/data.tsv               the same, tab-separated, no quoting
 *   DIR/data.jsonl             {"image", "caption" or "text", "label"}
 *   DIR/folder/                metadata.jsonl + img/ (Hugging Face imagefolder)
 *   DIR/folder2/               metadata.csv + img/
 *   DIR/wds-000.tar, -001.tar  WebDataset: KEY.jpg|png|webp, KEY.txt, KEY.cls
 *   DIR/bad.csv                the 60 good rows and one of each bad sample:
 *                              a missing file, a zero-byte file, a truncated
 *                              JPEG, a PNG whose header claims 30000x30000, a
 *                              text file named .png, a caption that is not
 *                              UTF-8, an empty caption
 *   DIR/trunc.tar              wds-000.tar cut in the middle of a member
 *
 * Captions: "a COLOUR ramp number I" (colour of the label, I the index).
 */
#define _POSIX_C_SOURCE 200809L
#include <archive.h>
#include <archive_entry.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <webp/encode.h>
#include <zlib.h>

enum { N = 60, W = 24, H = 16 };
static const char *const k_col[3] = {"red", "green", "blue"};
static const char *const k_ext[3] = {"jpg", "png", "webp"};

static void fail(const char *what) {
  fprintf(stderr, "make_pairs: %s\n", what);
  exit(1);
}

static void put(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(d, 1, n, f) != n || fclose(f) != 0)
    fail(path);
}

static unsigned char *png_mem(const uint8_t *px, size_t *n) {
  char tmp[] = "/tmp/make_pairs_XXXXXX";
  FILE *f = fdopen(mkstemp(tmp), "w+b");
  if (!f)
    fail("tmp");
  png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(p);
  if (setjmp(png_jmpbuf(p)))
    fail("png");
  png_init_io(p, f);
  png_set_IHDR(p, info, W, H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(p, info);
  for (int y = 0; y < H; y++)
    png_write_row(p, (png_bytep)(px + y * W * 3));
  png_write_end(p, NULL);
  png_destroy_write_struct(&p, &info);
  fflush(f);
  *n = (size_t)ftell(f);
  rewind(f);
  unsigned char *b = malloc(*n);
  if (!b || fread(b, 1, *n, f) != *n)
    fail("png read back");
  fclose(f);
  remove(tmp);
  return b;
}

/* image i encoded in its format */
static unsigned char *encode(int i, size_t *n) {
  uint8_t px[W * H * 3];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < 3; c++)
        px[(y * W + x) * 3 + c] = (uint8_t)(c == i % 3 ? 128 + 4 * x + i : 8 * y + i);
  if (i % 3 == 0) {
    tjhandle tj = tjInitCompress();
    unsigned char *j = NULL;
    unsigned long len = 0;
    if (tjCompress2(tj, px, W, 0, H, TJPF_RGB, &j, &len, TJSAMP_444, 95, 0) != 0)
      fail("jpeg");
    tjDestroy(tj);
    unsigned char *b = malloc(len);
    memcpy(b, j, len);
    tjFree(j);
    *n = len;
    return b;
  }
  if (i % 3 == 1)
    return png_mem(px, n);
  uint8_t *w = NULL;
  *n = WebPEncodeLosslessRGB(px, W, H, W * 3, &w);
  if (!*n)
    fail("webp");
  unsigned char *b = malloc(*n);
  memcpy(b, w, *n);
  WebPFree(w);
  return b;
}

static void tar_add(struct archive *a, const char *name, const void *d, size_t n) {
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, name);
  archive_entry_set_size(e, (la_int64_t)n);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  if (archive_write_header(a, e) != ARCHIVE_OK || archive_write_data(a, d, n) != (la_ssize_t)n)
    fail("tar");
  archive_entry_free(e);
}

int main(int argc, char **argv) {
  if (argc != 2)
    fail("usage: make_pairs DIR");
  const char *dir = argv[1];
  char p[4096];
  const char *sub[5] = {"", "/img", "/folder", "/folder/img", "/folder2"};
  for (int k = 0; k < 5; k++) {
    snprintf(p, sizeof p, "%s%s", dir, sub[k]);
    mkdir(p, 0777);
  }
  snprintf(p, sizeof p, "%s/folder2/img", dir);
  mkdir(p, 0777);
  FILE *csv, *tsv, *jl, *fj, *fc;
  snprintf(p, sizeof p, "%s/data.csv", dir);
  csv = fopen(p, "w");
  snprintf(p, sizeof p, "%s/data.tsv", dir);
  tsv = fopen(p, "w");
  snprintf(p, sizeof p, "%s/data.jsonl", dir);
  jl = fopen(p, "w");
  snprintf(p, sizeof p, "%s/folder/metadata.jsonl", dir);
  fj = fopen(p, "w");
  snprintf(p, sizeof p, "%s/folder2/metadata.csv", dir);
  fc = fopen(p, "w");
  if (!csv || !tsv || !jl || !fj || !fc)
    fail("cannot write the listings");
  fprintf(csv, "filepath,title,label\n");
  fprintf(tsv, "filepath\ttitle\tlabel\n");
  fprintf(fc, "file_name,caption,label\n");
  struct archive *tar[2];
  for (int s = 0; s < 2; s++) {
    tar[s] = archive_write_new();
    archive_write_set_format_ustar(tar[s]);
    snprintf(p, sizeof p, "%s/wds-%03d.tar", dir, s);
    if (archive_write_open_filename(tar[s], p) != ARCHIVE_OK)
      fail("tar open");
  }
  for (int i = 0; i < N; i++) {
    size_t n;
    unsigned char *img = encode(i, &n);
    const char *col = k_col[i % 3], *ext = k_ext[i % 3];
    char rel[64], cap[96];
    snprintf(rel, sizeof rel, "img/%03d.%s", i, ext);
    snprintf(cap, sizeof cap, "a %s ramp number %d", col, i);
    const char *roots[3] = {"", "/folder", "/folder2"};
    for (int r = 0; r < 3; r++) {
      snprintf(p, sizeof p, "%s%s/%s", dir, roots[r], rel);
      put(p, img, n);
    }
    if (i == 5) /* a quoted comma, a quoted newline and doubled quotes */
      fprintf(csv, "%s,\"a %s ramp, \"\"number\"\"\n%d\",%s\n", rel, col, i, col);
    else
      fprintf(csv, "%s,%s,%s\n", rel, cap, col);
    fprintf(tsv, "%s\t%s\t%s\n", rel, cap, col);
    fprintf(jl, "{\"image\": \"%s\", \"%s\": \"%s\", \"label\": \"%s\"}\n", rel,
            i % 2 ? "caption" : "text", cap, col);
    fprintf(fj, "{\"file_name\": \"%s\", \"caption\": \"%s\", \"label\": \"%s\"}\n", rel, cap, col);
    fprintf(fc, "%s,%s,%s\n", rel, cap, col);
    char key[32], name[64];
    snprintf(key, sizeof key, "%06d", i);
    snprintf(name, sizeof name, "%s.%s", key, ext);
    tar_add(tar[i % 2], name, img, n);
    snprintf(name, sizeof name, "%s.txt", key);
    tar_add(tar[i % 2], name, cap, strlen(cap));
    snprintf(name, sizeof name, "%s.cls", key);
    tar_add(tar[i % 2], name, col, strlen(col));
    if (i == 0) { /* the bad samples' files */
      snprintf(p, sizeof p, "%s/img/trunc.jpg", dir);
      put(p, img, n / 2);
    }
    free(img);
  }
  for (int s = 0; s < 2; s++)
    if (archive_write_close(tar[s]) != ARCHIVE_OK || archive_write_free(tar[s]) != ARCHIVE_OK)
      fail("tar close");
  fclose(tsv), fclose(jl), fclose(fj), fclose(fc);
  /* a PNG header claiming 30000x30000 (signature, IHDR with its CRC, IEND) */
  uint8_t bomb[8 + 25 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  uint8_t *h = bomb + 8;
  const uint8_t ihdr[17] = {'I', 'H', 'D', 'R', 0, 0, 0x75, 0x30, 0, 0, 0x75, 0x30, 8, 2, 0, 0, 0};
  h[3] = 13;
  memcpy(h + 4, ihdr, 17);
  uint32_t crc = (uint32_t)crc32(0, ihdr, 17);
  for (int b = 0; b < 4; b++)
    h[21 + b] = (uint8_t)(crc >> (24 - 8 * b));
  const uint8_t iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
  memcpy(bomb + 33, iend, 12);
  snprintf(p, sizeof p, "%s/img/bomb.png", dir);
  put(p, bomb, sizeof bomb);
  snprintf(p, sizeof p, "%s/img/empty.jpg", dir);
  put(p, "", 0);
  snprintf(p, sizeof p, "%s/img/text.png", dir);
  put(p, "this is not an image\n", 21);
  /* bad.csv: the good rows, then one of each bad kind */
  fclose(csv);
  snprintf(p, sizeof p, "%s/data.csv", dir);
  FILE *in = fopen(p, "rb");
  snprintf(p, sizeof p, "%s/bad.csv", dir);
  FILE *bad = fopen(p, "wb");
  if (!in || !bad)
    fail("bad.csv");
  for (int c; (c = fgetc(in)) != EOF;)
    fputc(c, bad);
  fclose(in);
  fprintf(bad, "img/missing.jpg,a missing image,red\n"
               "img/empty.jpg,a zero-byte file,red\n"
               "img/trunc.jpg,a truncated jpeg,red\n"
               "img/bomb.png,a decompression bomb,red\n"
               "img/text.png,not an image at all,red\n"
               "img/000.jpg,bad \xff\xfe utf-8,red\n"
               "img/001.png,,red\n");
  fclose(bad);
  /* trunc.tar: wds-000.tar cut in the middle */
  snprintf(p, sizeof p, "%s/wds-000.tar", dir);
  in = fopen(p, "rb");
  if (!in || fseek(in, 0, SEEK_END) != 0)
    fail("trunc.tar");
  const long len = ftell(in);
  rewind(in);
  unsigned char *t = malloc((size_t)len);
  if (!t || fread(t, 1, (size_t)len, in) != (size_t)len)
    fail("trunc.tar read");
  fclose(in);
  snprintf(p, sizeof p, "%s/trunc.tar", dir);
  put(p, t, (size_t)len / 2 + 100);
  free(t);
  return 0;
}
