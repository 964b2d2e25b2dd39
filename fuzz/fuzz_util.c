/*
 * fuzz/fuzz_util.c: helpers shared by the harnesses (fuzz/fuzz.h).
 */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

const char *fuzz_memfile(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("ampc-fuzz", 0);
    if (fd < 0) {
      perror("fuzz: memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0) {
    perror("fuzz: ftruncate");
    abort();
  }
  size_t off = 0;
  while (off < size) {
    const ssize_t w = pwrite(fd, data + off, size - off, (off_t)off);
    if (w <= 0) {
      perror("fuzz: pwrite");
      abort();
    }
    off += (size_t)w;
  }
  return path;
}
