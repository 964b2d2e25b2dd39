/*
 * fuzz/fuzz_emoji_json.c: the JSON side of `ampc data emoji`
 * (ampc_emoji_prepare: cJSON parsing of the two emoji-datasource emoji.json
 * files and emojibase's en/data.json, the join, captions, vocabulary, splits).
 *
 * The input is split on NUL bytes into the three files, in that order (google
 * emoji.json, twitter emoji.json, emojibase en/data.json; a missing part is
 * "[]"). They are written into a private temporary package tree made once per
 * process, which also holds one valid 64x64 PNG named "a.png" in both image
 * folders, so that inputs naming it reach the whole preparation.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "fuzz.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ampc/data.h"

static char g_root[256];
static char g_dir[3][300];  /* the three package roots */
static char g_json[3][320]; /* the three JSON files */
static char g_png[2][320];  /* the two images */
static const char *const k_sub[3] = {"g", "t", "b"};

static void cleanup(void) {
  for (int k = 0; k < 3; k++)
    (void)unlink(g_json[k]);
  for (int s = 0; s < 2; s++)
    (void)unlink(g_png[s]);
  static const char *const dirs[] = {"g/img/google/64",
                                     "g/img/google",
                                     "g/img",
                                     "t/img/twitter/64",
                                     "t/img/twitter",
                                     "t/img",
                                     "b/en",
                                     "g",
                                     "t",
                                     "b",
                                     ""};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", g_root, dirs[i]);
    (void)rmdir(p);
  }
}

static void mk(const char *rel) {
  char p[400];
  snprintf(p, sizeof p, "%s/%s", g_root, rel);
  if (mkdir(p, 0700) != 0) {
    perror(p);
    abort();
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_root, sizeof g_root, "%s/ampc-fuzz-emoji-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_root)) {
    perror("fuzz: mkdtemp");
    abort();
  }
  static const char *const dirs[] = {"g", "g/img", "g/img/google",  "g/img/google/64",
                                     "t", "t/img", "t/img/twitter", "t/img/twitter/64",
                                     "b", "b/en"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
    mk(dirs[i]);
  for (int k = 0; k < 3; k++) {
    snprintf(g_dir[k], sizeof g_dir[k], "%s/%s", g_root, k_sub[k]);
    snprintf(g_json[k], sizeof g_json[k], "%s/%s/%s", g_root, k_sub[k],
             k < 2 ? "emoji.json" : "en/data.json");
  }
  snprintf(g_png[0], sizeof g_png[0], "%s/g/img/google/64/a.png", g_root);
  snprintf(g_png[1], sizeof g_png[1], "%s/t/img/twitter/64/a.png", g_root);
  static uint8_t px[64 * 64 * 4];
  for (size_t i = 0; i < sizeof px; i++)
    px[i] = (uint8_t)(i * 37u + 11u);
  for (int s = 0; s < 2; s++) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = im.height = 64;
    im.format = PNG_FORMAT_RGBA;
    if (!png_image_write_to_file(&im, g_png[s], 0, px, 0, NULL)) {
      fprintf(stderr, "fuzz: cannot write %s\n", g_png[s]);
      abort();
    }
  }
  atexit(cleanup);
  return 0;
}

static void put(const char *path, const uint8_t *p, size_t n) {
  FILE *fp = fopen(path, "wb");
  if (!fp || (n && fwrite(p, 1, n, fp) != n) || fclose(fp) != 0) {
    perror(path);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t start = 0;
  for (int k = 0; k < 3; k++) {
    if (start > size) {
      put(g_json[k], (const uint8_t *)"[]", 2);
      continue;
    }
    const uint8_t *nul = memchr(data + start, 0, size - start);
    const size_t end = nul ? (size_t)(nul - data) : size;
    put(g_json[k], data + start, end - start);
    start = end + 1;
  }
  ampc_dataset d;
  ampc_emoji_prep_stats st;
  if (ampc_emoji_prepare(g_dir[0], g_dir[1], g_dir[2], &d, &st) == AMPC_OK)
    ampc_dataset_free(&d);
  return 0;
}
