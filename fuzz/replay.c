/*
 * fuzz/replay.c: feed files to a harness's LLVMFuzzerTestOneInput without
 * libFuzzer, so that the committed seed corpus and every crashing input found
 * run as regression tests in the normal build (tests/CMakeLists.txt).
 *
 * Usage: replay_<harness> FILE|DIR...   (every regular file of a DIR, sorted)
 * Exit 0 when every input ran (a crash ends the process with a signal), 1 on
 * a usage or read error. The number of inputs run is printed on stdout.
 */
#define _XOPEN_SOURCE 700
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    fprintf(stderr, "replay: %s: cannot open\n", path);
    return -1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf)
      break;
    len += fread(buf + len, 1, cap - len, fp);
    if (len < cap)
      break;
    uint8_t *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  const int err = ferror(fp);
  fclose(fp);
  if (!buf || err) {
    free(buf);
    fprintf(stderr, "replay: %s: cannot read\n", path);
    return -1;
  }
  /* libFuzzer hands over a buffer of exactly `len` bytes: so do we */
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, len);
  free(buf);
  (void)LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 1;
  }
  (void)LLVMFuzzerInitialize(&argc, &argv);
  long count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: %s: not found\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
      if (run_file(argv[i]) != 0)
        return 1;
      count++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d)
      return 1;
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      if (e->d_name[0] == '.')
        continue;
      char **nn = realloc(names, (n + 1) * sizeof *names);
      const size_t plen = strlen(argv[i]) + strlen(e->d_name) + 2;
      char *p = malloc(plen);
      if (!nn || !p) {
        free(p);
        closedir(d);
        return 1;
      }
      names = nn;
      snprintf(p, plen, "%s/%s", argv[i], e->d_name);
      names[n++] = p;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_name);
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
      if (!bad && stat(names[k], &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (run_file(names[k]) != 0)
          bad = 1;
        else
          count++;
      }
      free(names[k]);
    }
    free(names);
    if (bad)
      return 1;
  }
  printf("replay: %ld inputs ran\n", count);
  return 0;
}
