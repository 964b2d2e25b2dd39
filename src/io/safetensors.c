/*
 * src/io/safetensors.c: safetensors checkpoints (ampc/io.h), written
 * atomically and read with every claim of the file checked before it is used.
 *
 * Writing: the arguments are validated first, the JSON header is built with
 * cJSON (integers go in as raw text, so they are printed exactly and never in
 * exponent notation), padded with spaces to a multiple of 8, then header and
 * data go to a mkstemp file next to `path` that is flushed, fsync'ed, closed
 * and renamed over `path`; the directory is fsync'ed afterwards (best effort).
 * Any failure removes the temporary file, so `path` keeps its old contents.
 *
 * Reading: the whole file is loaded (its size comes from fstat, never from the
 * header), then the header length, the JSON and every tensor entry are
 * checked; the tensors are sorted by data offset and must tile the data region
 * exactly. cJSON keeps numbers as doubles, so shape sizes and offsets must be
 * integers no larger than 2^53 (the largest range a double holds exactly); a
 * larger value is rejected rather than silently rounded. Names and metadata
 * strings are copied into one block owned by the loaded file; tensor data
 * points into the file image.
 *
 * The raw data is little-endian on disk and copied as-is, so the host must be
 * little-endian (checked at compile time where the compiler says, and at run
 * time always).
 */
#define _XOPEN_SOURCE 700 /* mkstemp, fsync, realpath */

#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ampc/io.h"

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian and is copied as-is: host must be little-endian");
#endif
_Static_assert(AMPC_DTYPE_COUNT == 5, "update the safetensors dtype tables");

/* safetensors' own limit on the header (the Rust crate's MAX_HEADER_SIZE). */
#define ST_MAX_HEADER ((uint64_t)100000000u)
/* Largest integer accepted in a shape or offset: exact in a double. */
#define ST_MAX_INT ((uint64_t)1 << 53)
#define ST_META_KEY "__metadata__"

static const char *const k_st_dtype[AMPC_DTYPE_COUNT] = {"F32", "F16", "BF16", "F8_E4M3",
                                                         "F8_E5M2"};
static const size_t k_st_size[AMPC_DTYPE_COUNT] = {4, 2, 2, 1, 1};
/* The other dtypes of the safetensors format (the Rust crate's Dtype), read
 * with AMPC_ST_ANY_DTYPE only */
static const struct {
  const char *name;
  size_t size;
} k_st_other[] = {{"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4},  {"U32", 4}, {"I16", 2},
                  {"U16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"C64", 8}, {"F8_E8M0", 1}};

/* The dtype string and element size a tensor is written with: one of ampc's
 * dtypes, or AMPC_ST_OTHER with dtype_name one of the others ("I8", ...);
 * 0 when neither */
static int write_dtype(const ampc_st_tensor *x, const char **name, size_t *size) {
  if ((int)x->dtype >= 0 && (int)x->dtype < AMPC_DTYPE_COUNT) {
    *name = k_st_dtype[x->dtype], *size = k_st_size[x->dtype];
    return 1;
  }
  for (size_t k = 0;
       x->dtype == AMPC_ST_OTHER && x->dtype_name && k < sizeof k_st_other / sizeof k_st_other[0];
       k++)
    if (strcmp(x->dtype_name, k_st_other[k].name) == 0) {
      *name = k_st_other[k].name, *size = k_st_other[k].size;
      return 1;
    }
  return 0;
}

struct ampc_safetensors {
  unsigned char *buf;             /* the whole file, plus one NUL byte */
  char *strings;                  /* tensor names and metadata strings */
  ampc_st_tensor *t;              /* in data-offset order */
  const ampc_st_tensor **by_name; /* sorted by name, for find */
  ampc_st_meta *meta;             /* sorted by key */
  int n, nmeta;
};

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* 1 if s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points
 * above U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0)
        lo = 0xA0; /* overlong */
      else if (c == 0xED)
        hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0)
        lo = 0x90; /* overlong */
      else if (c == 0xF4)
        hi = 0x8F; /* above U+10FFFF */
    } else
      return 0;
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi)
      return 0;
    for (size_t k = 2; k < len; k++)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF)
        return 0;
    i += len;
  }
  return 1;
}

static int str_valid(const char *s) { return utf8_valid((const unsigned char *)s, strlen(s)); }

void ampc_st_format_shape(char *buf, size_t cap, const int64_t *shape, int ndim) {
  size_t used = 0;
  int k = snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && k >= 0; i++) {
    used += (size_t)k;
    if (used >= cap)
      return;
    k = snprintf(buf + used, cap - used, "%s%" PRId64, i ? ", " : "", shape[i]);
  }
  if (k >= 0 && (used += (size_t)k) < cap)
    snprintf(buf + used, cap - used, "]");
}

/* Byte count of a shape: 0 if any size is 0, otherwise the product times the
 * element size. Returns 0 on success, -1 when it exceeds `limit`. Sizes must
 * already be known to be non-negative. */
static int shape_bytes(const int64_t *shape, int ndim, size_t esize, uint64_t limit,
                       uint64_t *out) {
  uint64_t b = esize;
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) {
      *out = 0;
      return 0;
    }
  for (int i = 0; i < ndim; i++) {
    const uint64_t d = (uint64_t)shape[i];
    if (b > limit / d)
      return -1;
    b *= d;
  }
  if (b > limit)
    return -1;
  *out = b;
  return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- writing -------------------------------------------------------------- */

/* Validate the tensors (and compute the data size) for the writer. */
static ampc_status check_tensors(const char *path, const ampc_st_tensor *t, int n,
                                 uint64_t *data_bytes) {
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    const ampc_st_tensor *x = &t[i];
    if (!x->name || !x->name[0])
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: tensor %d has an empty name", path, i);
    if (strcmp(x->name, ST_META_KEY) == 0)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: tensor %d: the name '%s' is reserved", path, i,
                       ST_META_KEY);
    if (!str_valid(x->name))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: tensor %d: the name is not valid UTF-8", path, i);
    const char *dname;
    size_t esize;
    if (!write_dtype(x, &dname, &esize))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: tensor '%s': invalid dtype %d (%s)", path,
                       x->name, (int)x->dtype, x->dtype_name ? x->dtype_name : "no name");
    if (x->ndim < 0 || x->ndim > AMPC_ST_MAX_DIMS)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: tensor '%s': ndim %d is not in 0..%d", path,
                       x->name, x->ndim, AMPC_ST_MAX_DIMS);
    for (int k = 0; k < x->ndim; k++)
      if (x->shape[k] < 0 || (uint64_t)x->shape[k] > ST_MAX_INT)
        return ampc_fail(AMPC_ERR_INVALID_ARG,
                         "%s: tensor '%s': shape[%d] = %" PRId64 " is not in 0..2^53", path,
                         x->name, k, x->shape[k]);
    char sh[160];
    ampc_st_format_shape(sh, sizeof sh, x->shape, x->ndim);
    uint64_t bytes;
    if (shape_bytes(x->shape, x->ndim, esize, ST_MAX_INT, &bytes) != 0 || bytes > SIZE_MAX)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: tensor '%s': shape %s of %s is too large", path,
                       x->name, sh, dname);
    if ((uint64_t)x->nbytes != bytes)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "%s: tensor '%s': nbytes %zu does not match shape %s of %s (%" PRIu64
                       " bytes)",
                       path, x->name, x->nbytes, sh, dname, bytes);
    if (bytes > 0 && !x->data)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: tensor '%s': data is NULL", path, x->name);
    if (bytes > ST_MAX_INT - total)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: the tensors hold more than 2^53 bytes", path);
    total += bytes;
  }
  if (total > SIZE_MAX)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: the tensors do not fit in memory", path);
  *data_bytes = total;
  return AMPC_OK;
}

/* Fail if two of the n strings are equal (what names the kind of string). */
static ampc_status check_unique(const char *path, const char **s, int n, const char *what) {
  if (n < 2)
    return AMPC_OK;
  const char **v = malloc((size_t)n * sizeof *v);
  if (!v)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory checking %s", path, what);
  memcpy(v, s, (size_t)n * sizeof *v);
  qsort(v, (size_t)n, sizeof *v, cmp_str_ptr);
  ampc_status st = AMPC_OK;
  for (int i = 1; i < n; i++)
    if (strcmp(v[i - 1], v[i]) == 0) {
      st = ampc_fail(AMPC_ERR_INVALID_ARG, "%s: duplicate %s '%s'", path, what, v[i]);
      break;
    }
  free(v);
  return st;
}

static int add_raw_uint(cJSON *arr, uint64_t v) {
  char num[32];
  snprintf(num, sizeof num, "%" PRIu64, v);
  cJSON *item = cJSON_CreateRaw(num);
  if (!item)
    return -1;
  if (!cJSON_AddItemToArray(arr, item)) {
    cJSON_Delete(item);
    return -1;
  }
  return 0;
}

/* The unpadded JSON header text (free with cJSON_free), or NULL when out of
 * memory. Arguments are already validated. */
static char *build_header(const ampc_st_tensor *t, int n, const ampc_st_meta *meta, int nmeta) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return NULL;
  char *text = NULL;
  if (nmeta > 0) {
    cJSON *m = cJSON_AddObjectToObject(root, ST_META_KEY);
    if (!m)
      goto done;
    for (int i = 0; i < nmeta; i++)
      if (!cJSON_AddStringToObject(m, meta[i].key, meta[i].value))
        goto done;
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    cJSON *o = cJSON_AddObjectToObject(root, t[i].name);
    const char *dname;
    size_t esize;
    if (!o || !write_dtype(&t[i], &dname, &esize) || !cJSON_AddStringToObject(o, "dtype", dname))
      goto done;
    cJSON *sh = cJSON_AddArrayToObject(o, "shape");
    if (!sh)
      goto done;
    for (int k = 0; k < t[i].ndim; k++)
      if (add_raw_uint(sh, (uint64_t)t[i].shape[k]) != 0)
        goto done;
    cJSON *offs = cJSON_AddArrayToObject(o, "data_offsets");
    if (!offs || add_raw_uint(offs, off) != 0 || add_raw_uint(offs, off + t[i].nbytes) != 0)
      goto done;
    off += t[i].nbytes;
  }
  text = cJSON_PrintUnformatted(root);
done:
  cJSON_Delete(root);
  return text;
}

/* The directory part of path ("." when there is none), or NULL (no memory). */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    char *d = malloc(2);
    if (d)
      memcpy(d, ".", 2);
    return d;
  }
  size_t len = (size_t)(slash - path);
  if (len == 0)
    len = 1; /* "/name": the root directory */
  char *d = malloc(len + 1);
  if (d) {
    memcpy(d, path, len);
    d[len] = '\0';
  }
  return d;
}

/* Make a rename inside the directory of path durable. Best effort: some file
 * systems refuse fsync on a directory, and the data itself is already safe. */
static void sync_dir(const char *path) {
  char *dir = dir_of(path);
  if (!dir)
    return;
  const int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd);
    (void)close(fd);
  }
  free(dir);
}

/* The crash-safety test hook (docs/ROBUSTNESS.md, tests/check_crash.sh): with
 * AMPC_FAULT_ABORT_AFTER_BYTES=N in the environment the writer abort()s, as a
 * crash would, once N bytes of the temporary file are written (what stdio
 * holds is flushed first); N >= the file's size aborts just before the rename.
 * -1 when unset or not a non-negative integer. */
static long long fault_limit(void) {
  const char *e = getenv("AMPC_FAULT_ABORT_AFTER_BYTES");
  if (!e || !*e)
    return -1;
  char *end = NULL;
  errno = 0;
  const long long v = strtoll(e, &end, 10);
  return (*end || errno || v < 0) ? -1 : v;
}

/* fwrite n bytes, counting them into *done; the fault hook fires inside */
static bool put(FILE *fp, const void *p, size_t n, size_t *done, long long limit) {
  if (limit >= 0 && (unsigned long long)(*done + n) > (unsigned long long)limit) {
    const size_t k = (size_t)((unsigned long long)limit - *done);
    if (k)
      (void)fwrite(p, 1, k, fp);
    (void)fflush(fp);
    abort();
  }
  const size_t w = fwrite(p, 1, n, fp);
  *done += w;
  return w == n;
}

/* Write hdr and the tensor data to a temporary file, then rename it to path. */
static ampc_status write_atomic(const char *path, const unsigned char *hdr, size_t hdr_len,
                                const ampc_st_tensor *t, int n) {
  static const char suffix[] = ".tmp.XXXXXX";
  const size_t plen = strlen(path);
  char *tmp = malloc(plen + sizeof suffix);
  if (!tmp)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, suffix, sizeof suffix);

  const int fd = mkstemp(tmp);
  if (fd < 0) {
    const int e = errno;
    ampc_status st = ampc_fail(AMPC_ERR_IO, "%s: cannot create a temporary file next to it: %s",
                               path, strerror(e));
    free(tmp);
    return st;
  }
  /* mkstemp creates the file 0600: give the result the permissions of the file
   * it replaces, or the usual 0644 for a new file (best effort). */
  struct stat old;
  const mode_t mode = (stat(path, &old) == 0 && S_ISREG(old.st_mode)) ? (old.st_mode & 0777) : 0644;
  (void)fchmod(fd, mode);

  const char *what = "open";
  int e = 0;
  FILE *fp = fdopen(fd, "wb");
  if (!fp) {
    e = errno;
    (void)close(fd);
    goto fail;
  }
  /* errno is cleared before each step so that a failure reports its own */
  what = "write";
  errno = 0;
  const long long fault = fault_limit();
  size_t done = 0;
  if (!put(fp, hdr, hdr_len, &done, fault))
    goto fail_errno;
  for (int i = 0; i < n; i++) {
    errno = 0;
    if (t[i].nbytes > 0 && !put(fp, t[i].data, t[i].nbytes, &done, fault))
      goto fail_errno;
  }
  what = "flush";
  errno = 0;
  if (fflush(fp) != 0)
    goto fail_errno;
  what = "fsync";
  errno = 0;
  if (fsync(fileno(fp)) != 0)
    goto fail_errno;
  what = "close";
  {
    FILE *f = fp;
    fp = NULL; /* fclose releases the stream even when it fails */
    errno = 0;
    if (fclose(f) != 0)
      goto fail_errno;
  }
  if (fault >= 0 && (unsigned long long)done <= (unsigned long long)fault)
    abort(); /* the hook: every byte written and synced, not yet renamed */
  what = "rename";
  errno = 0;
  if (rename(tmp, path) != 0)
    goto fail_errno;
  free(tmp);
  sync_dir(path);
  return AMPC_OK;

fail_errno:
  e = errno ? errno : EIO;
  if (fp)
    (void)fclose(fp);
fail:
  (void)unlink(tmp);
  {
    ampc_status st =
        ampc_fail(AMPC_ERR_IO, "%s: %s of the temporary file %s failed: %s (file left unchanged)",
                  path, what, tmp, strerror(e));
    free(tmp);
    return st;
  }
}

ampc_status ampc_file_write_atomic(const char *path, const void *data, size_t n) {
  if (!path || (!data && n))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_file_write_atomic: NULL argument");
  return write_atomic(path, data, n, NULL, 0);
}

ampc_status ampc_safetensors_write(const char *path, const ampc_st_tensor *t, int n,
                                   const ampc_st_meta *meta, int nmeta) {
  if (!path || !path[0])
    return ampc_fail(AMPC_ERR_INVALID_ARG, "safetensors write: empty path");
  if (n < 0 || (n > 0 && !t))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: invalid tensor list (n = %d)", path, n);
  if (nmeta < 0 || (nmeta > 0 && !meta))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: invalid metadata list (nmeta = %d)", path, nmeta);
  if (!host_is_little_endian())
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: safetensors needs a little-endian host", path);

  /* never replace a device, FIFO or directory; write through a symlink to
   * its target (as torch.save does) rather than replacing the link */
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return ampc_fail(AMPC_ERR_IO, "%s: exists and is not a regular file; refusing to replace it",
                     path);
  uint64_t data_bytes = 0;
  ampc_status st = check_tensors(path, t, n, &data_bytes);
  if (st != AMPC_OK)
    return st;
  for (int i = 0; i < nmeta; i++) {
    if (!meta[i].key || !meta[i].value)
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: metadata entry %d has a NULL key or value", path,
                       i);
    if (!str_valid(meta[i].key) || !str_valid(meta[i].value))
      return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: metadata entry %d is not valid UTF-8", path, i);
  }

  /* uniqueness: gather the name pointers once for both lists */
  const int most = n > nmeta ? n : nmeta;
  const char **names = malloc((size_t)(most > 0 ? most : 1) * sizeof *names);
  if (!names)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < n; i++)
    names[i] = t[i].name;
  st = check_unique(path, names, n, "tensor name");
  if (st == AMPC_OK) {
    for (int i = 0; i < nmeta; i++)
      names[i] = meta[i].key;
    st = check_unique(path, names, nmeta, "metadata key");
  }
  free(names);
  if (st != AMPC_OK)
    return st;

  char *json = build_header(t, n, meta, nmeta);
  if (!json)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory building the header", path);
  const size_t jlen = strlen(json);
  const size_t padded = jlen + (8 - jlen % 8) % 8;
  if ((uint64_t)padded > ST_MAX_HEADER) {
    cJSON_free(json);
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: the header would be %zu bytes, more than readers accept (%" PRIu64 ")",
                     path, padded, ST_MAX_HEADER);
  }
  unsigned char *hdr = malloc(8 + padded);
  if (!hdr) {
    cJSON_free(json);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
  }
  for (int i = 0; i < 8; i++)
    hdr[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  memcpy(hdr + 8, json, jlen);
  memset(hdr + 8 + jlen, ' ', padded - jlen);
  cJSON_free(json);

  struct stat lsb;
  char *target = NULL;
  if (lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
    target = realpath(path, NULL);
    if (!target) {
      free(hdr);
      return ampc_fail(AMPC_ERR_IO, "%s: cannot resolve the symbolic link: %s", path,
                       strerror(errno));
    }
  }
  st = write_atomic(target ? target : path, hdr, 8 + padded, t, n);
  free(target);
  free(hdr);
  return st;
}

/* ---- reading -------------------------------------------------------------- */

typedef struct st_rec {
  ampc_st_tensor t;
  const char *name; /* in the cJSON tree until copied */
  uint64_t begin, end;
  int index; /* position in the header, to keep the sort deterministic */
} st_rec;

static int cmp_rec_offset(const void *a, const void *b) {
  const st_rec *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp((*(const ampc_st_tensor *const *)a)->name,
                (*(const ampc_st_tensor *const *)b)->name);
}

static int cmp_meta_key(const void *a, const void *b) {
  return strcmp(((const ampc_st_meta *)a)->key, ((const ampc_st_meta *)b)->key);
}

/* Read a JSON number that must be an integer in 0..2^53. Returns 0 on success;
 * -1 not a number, -2 negative, -3 not an integer, -4 too large. */
static int json_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v))
    return -1;
  const double d = v->valuedouble;
  if (d != d)
    return -3;
  if (d < 0)
    return -2;
  if (d > (double)ST_MAX_INT)
    return -4;
  const uint64_t u = (uint64_t)d;
  if ((double)u != d)
    return -3;
  *out = u;
  return 0;
}

static const char *json_uint_problem(int code) {
  switch (code) {
  case -1: return "is not a number";
  case -2: return "is negative";
  case -3: return "is not an integer";
  default: return "is larger than 2^53";
  }
}

/* Check one tensor entry of the header and fill r (name, dtype, shape,
 * nbytes, begin, end). data_size is the size of the data region. */
static ampc_status parse_entry(const char *path, const cJSON *e, uint64_t data_size, unsigned flags,
                               st_rec *r) {
  const char *name = e->string;
  if (!cJSON_IsObject(e))
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
  const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
  for (const cJSON *c = e->child; c; c = c->next) {
    const cJSON **slot = strcmp(c->string, "dtype") == 0          ? &dtype
                         : strcmp(c->string, "shape") == 0        ? &shape
                         : strcmp(c->string, "data_offsets") == 0 ? &offs
                                                                  : NULL;
    if (!slot)
      continue; /* unknown keys are ignored, as other readers do */
    if (*slot)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': duplicate key '%s'", path, name,
                       c->string);
    *slot = c;
  }
  if (!dtype || !shape || !offs)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': missing \"%s\"", path, name,
                     !dtype   ? "dtype"
                     : !shape ? "shape"
                              : "data_offsets");

  if (!cJSON_IsString(dtype))
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", path, name);
  int dt = -1;
  size_t esize = 0;
  const char *dname = NULL;
  for (int k = 0; k < AMPC_DTYPE_COUNT; k++)
    if (strcmp(dtype->valuestring, k_st_dtype[k]) == 0)
      dt = k, esize = k_st_size[k], dname = k_st_dtype[k];
  if (dt < 0 && (flags & AMPC_ST_ANY_DTYPE))
    for (size_t k = 0; k < sizeof k_st_other / sizeof k_st_other[0]; k++)
      if (strcmp(dtype->valuestring, k_st_other[k].name) == 0)
        esize = k_st_other[k].size, dname = k_st_other[k].name;
  if (!dname)
    return ampc_fail(AMPC_ERR_FORMAT,
                     (flags & AMPC_ST_ANY_DTYPE)
                         ? "%s: tensor '%s': dtype '%s' is not a safetensors dtype ampc reads "
                           "(F64, F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0, C64, I64, U64, I32, "
                           "U32, I16, U16, I8, U8, BOOL are; the sub-byte F4/F6 are not)"
                         : "%s: tensor '%s': dtype '%s' is not supported (F32, F16, BF16, "
                           "F8_E4M3, F8_E5M2 are)",
                     path, name, dtype->valuestring);

  if (!cJSON_IsArray(shape))
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': shape is not an array", path, name);
  const int ndim = cJSON_GetArraySize(shape);
  if (ndim > AMPC_ST_MAX_DIMS)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': shape has %d dimensions, more than %d",
                     path, name, ndim, AMPC_ST_MAX_DIMS);
  int k = 0;
  for (const cJSON *c = shape->child; c; c = c->next, k++) {
    uint64_t v;
    const int bad = json_uint(c, &v);
    if (bad)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': shape[%d] %s", path, name, k,
                       json_uint_problem(bad));
    r->t.shape[k] = (int64_t)v;
  }
  char sh[160];
  ampc_st_format_shape(sh, sizeof sh, r->t.shape, ndim);
  uint64_t bytes;
  if (shape_bytes(r->t.shape, ndim, esize, ST_MAX_INT, &bytes) != 0)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': shape %s of %s is too large", path, name,
                     sh, dname);

  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': data_offsets is not an array of two", path,
                     name);
  uint64_t be[2];
  k = 0;
  for (const cJSON *c = offs->child; c; c = c->next, k++) {
    const int bad = json_uint(c, &be[k]);
    if (bad)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: tensor '%s': data_offsets[%d] %s", path, name, k,
                       json_uint_problem(bad));
  }
  if (be[1] < be[0])
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                     "] end before they begin",
                     path, name, be[0], be[1]);
  if (be[1] - be[0] != bytes)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                     "] do not match shape %s of %s (%" PRIu64 " bytes)",
                     path, name, be[0], be[1], sh, dname, bytes);
  if (be[1] > data_size)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                     "] go past the end of the data region (%" PRIu64 " bytes)",
                     path, name, be[0], be[1], data_size);

  r->name = name;
  r->t.dtype = dt >= 0 ? (ampc_dtype)dt : AMPC_ST_OTHER;
  r->t.dtype_name = dname;
  r->t.elem_size = esize;
  r->t.ndim = ndim;
  r->t.nbytes = (size_t)bytes;
  r->begin = be[0];
  r->end = be[1];
  return AMPC_OK;
}

/* Check "__metadata__": an object whose values are all strings. */
static ampc_status check_meta(const char *path, const cJSON *m) {
  if (!cJSON_IsObject(m))
    return ampc_fail(AMPC_ERR_FORMAT, "%s: %s is not a JSON object", path, ST_META_KEY);
  for (const cJSON *c = m->child; c; c = c->next)
    if (!cJSON_IsString(c))
      return ampc_fail(AMPC_ERR_FORMAT, "%s: %s '%s': value is not a string", path, ST_META_KEY,
                       c->string);
  return AMPC_OK;
}

/* Copy s into the string block at *pos. */
static const char *put_str(char *block, size_t *pos, const char *s) {
  const size_t len = strlen(s) + 1;
  char *dst = block + *pos;
  memcpy(dst, s, len);
  *pos += len;
  return dst;
}

/* Validate the header of the file image in f->buf (size bytes) and fill f. */
static ampc_status parse_file(const char *path, ampc_safetensors *f, size_t size, unsigned flags) {
  const unsigned char *buf = f->buf;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)buf[i] << (8 * i);
  /* a file that is not safetensors at all says so: its first 8 bytes read as
   * an absurd length and no JSON object follows them */
  const char *what = size > 8 && buf[8] != '{' ? "not a safetensors file: " : "";
  if (hlen > (uint64_t)size - 8)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: %sheader length %" PRIu64 " is larger than the %zu bytes after it", path,
                     what, hlen, size - 8);
  if (hlen > ST_MAX_HEADER)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: %sheader length %" PRIu64 " exceeds the %" PRIu64 "-byte limit", path,
                     what, hlen, ST_MAX_HEADER);
  const char *hdr = (const char *)buf + 8;
  const uint64_t data_size = (uint64_t)size - 8 - hlen;
  if (!utf8_valid((const unsigned char *)hdr, (size_t)hlen))
    return ampc_fail(AMPC_ERR_FORMAT, "%s: header is not valid UTF-8", path);

  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
  if (!root)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: header is not valid JSON", path);
  ampc_status st = AMPC_OK;
  st_rec *rec = NULL;
  for (const char *p = end; p < hdr + hlen; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: header has bytes after the JSON value (offset %zu)",
                     path, (size_t)(p - hdr));
      goto done;
    }
  if (!cJSON_IsObject(root)) {
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: header is not a JSON object", path);
    goto done;
  }

  /* count the tensors, find and check the metadata */
  const cJSON *meta = NULL;
  size_t n = 0, nmeta = 0, strbytes = 0;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, ST_META_KEY) == 0) {
      if (meta) {
        st = ampc_fail(AMPC_ERR_FORMAT, "%s: duplicate %s", path, ST_META_KEY);
        goto done;
      }
      meta = c;
      if ((st = check_meta(path, c)) != AMPC_OK)
        goto done;
      for (const cJSON *m = c->child; m; m = m->next, nmeta++)
        strbytes += strlen(m->string) + strlen(m->valuestring) + 2;
    } else {
      n++;
      strbytes += strlen(c->string) + 1;
    }
  }
  if (n > INT_MAX || nmeta > INT_MAX) {
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: too many header entries", path);
    goto done;
  }

  /* these sizes count objects already parsed from the (bounded) header */
  rec = calloc(n ? n : 1, sizeof *rec);
  f->t = calloc(n ? n : 1, sizeof *f->t);
  f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
  f->meta = calloc(nmeta ? nmeta : 1, sizeof *f->meta);
  f->strings = malloc(strbytes ? strbytes : 1);
  if (!rec || !f->t || !f->by_name || !f->meta || !f->strings) {
    st = ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
    goto done;
  }

  size_t i = 0;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (c == meta)
      continue;
    if ((st = parse_entry(path, c, data_size, flags, &rec[i])) != AMPC_OK)
      goto done;
    rec[i].index = (int)i;
    i++;
  }

  /* the tensors must tile the data region: no overlaps, no holes */
  qsort(rec, n, sizeof *rec, cmp_rec_offset);
  uint64_t cursor = 0;
  for (i = 0; i < n; i++) {
    if (rec[i].begin < cursor) {
      st = ampc_fail(AMPC_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                     "] overlap tensor '%s' [%" PRIu64 ", %" PRIu64 "]",
                     path, rec[i].name, rec[i].begin, rec[i].end, rec[i - 1].name, rec[i - 1].begin,
                     rec[i - 1].end);
      goto done;
    }
    if (rec[i].begin > cursor) {
      st = ampc_fail(AMPC_ERR_FORMAT,
                     "%s: bytes [%" PRIu64 ", %" PRIu64
                     ") of the data region belong to no tensor (a hole before tensor '%s')",
                     path, cursor, rec[i].begin, rec[i].name);
      goto done;
    }
    cursor = rec[i].end;
  }
  if (cursor != data_size) {
    st = ampc_fail(AMPC_ERR_FORMAT,
                   "%s: bytes [%" PRIu64 ", %" PRIu64
                   ") of the data region belong to no tensor (after the last one)",
                   path, cursor, data_size);
    goto done;
  }

  size_t pos = 0;
  const unsigned char *data = buf + 8 + hlen;
  for (i = 0; i < n; i++) {
    f->t[i] = rec[i].t;
    f->t[i].name = put_str(f->strings, &pos, rec[i].name);
    f->t[i].data = data + rec[i].begin;
    f->by_name[i] = &f->t[i];
  }
  f->n = (int)n;
  qsort(f->by_name, n, sizeof *f->by_name, cmp_tensor_name);
  for (i = 1; i < n; i++)
    if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: duplicate tensor name '%s'", path, f->by_name[i]->name);
      goto done;
    }

  i = 0;
  if (meta)
    for (const cJSON *m = meta->child; m; m = m->next, i++) {
      f->meta[i].key = put_str(f->strings, &pos, m->string);
      f->meta[i].value = put_str(f->strings, &pos, m->valuestring);
    }
  f->nmeta = (int)nmeta;
  qsort(f->meta, nmeta, sizeof *f->meta, cmp_meta_key);
  for (i = 1; i < nmeta; i++)
    if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: duplicate %s key '%s'", path, ST_META_KEY,
                     f->meta[i].key);
      goto done;
    }

done:
  free(rec);
  cJSON_Delete(root);
  return st;
}

ampc_status ampc_safetensors_read(const char *path, ampc_safetensors **out) {
  return ampc_safetensors_read_ex(path, 0, out);
}

ampc_status ampc_safetensors_read_ex(const char *path, unsigned flags, ampc_safetensors **out) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "safetensors read: NULL output pointer");
  *out = NULL;
  if (!path || !path[0])
    return ampc_fail(AMPC_ERR_INVALID_ARG, "safetensors read: empty path");
  if (!host_is_little_endian())
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: safetensors needs a little-endian host", path);

  /* O_NONBLOCK: opening a FIFO must not block before the regular-file check */
  const int rfd = open(path, O_RDONLY | O_NONBLOCK);
  FILE *fp = rfd >= 0 ? fdopen(rfd, "rb") : NULL;
  if (!fp) {
    const int e = errno;
    if (rfd >= 0)
      close(rfd);
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open: %s", path, strerror(e));
  }
  struct stat sb;
  if (fstat(fileno(fp), &sb) != 0) {
    const int e = errno;
    fclose(fp);
    return ampc_fail(AMPC_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    fclose(fp);
    return ampc_fail(AMPC_ERR_IO, "%s: not a regular file", path);
  }
  if (sb.st_size < 8) {
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: file is %lld bytes, too short for the 8-byte header length", path,
                     (long long)sb.st_size);
  }
  if ((uintmax_t)sb.st_size >= SIZE_MAX) {
    fclose(fp);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: file is too large to load", path);
  }
  const size_t size = (size_t)sb.st_size;

  ampc_safetensors *f = calloc(1, sizeof *f);
  /* one spare NUL byte: nothing reading the image can run off its end */
  if (!f || !(f->buf = malloc(size + 1))) {
    free(f);
    fclose(fp);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory loading %zu bytes", path, size);
  }
  f->buf[size] = 0;
  errno = 0;
  const size_t got = fread(f->buf, 1, size, fp);
  const int e = errno;
  const int err = ferror(fp);
  fclose(fp);
  if (got != size) {
    ampc_safetensors_free(f);
    if (err)
      return ampc_fail(AMPC_ERR_IO, "%s: read failed: %s", path, strerror(e ? e : EIO));
    return ampc_fail(AMPC_ERR_IO, "%s: file shrank while being read (%zu of %zu bytes)", path, got,
                     size);
  }

  const ampc_status st = parse_file(path, f, size, flags);
  if (st != AMPC_OK) {
    ampc_safetensors_free(f);
    return st;
  }
  *out = f;
  return AMPC_OK;
}

ampc_status ampc_safetensors_read_mem(const void *data, size_t size, const char *name,
                                      ampc_safetensors **out) {
  return ampc_safetensors_read_mem_ex(data, size, name, 0, out);
}

ampc_status ampc_safetensors_read_mem_ex(const void *data, size_t size, const char *name,
                                         unsigned flags, ampc_safetensors **out) {
  if (!out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "safetensors read: NULL output pointer");
  *out = NULL;
  if (!name)
    name = "<memory>";
  if (!data && size)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: data is NULL", name);
  if (!host_is_little_endian())
    return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: safetensors needs a little-endian host", name);
  if (size < 8)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: file is %zu bytes, too short for the 8-byte header length", name, size);
  if (size >= SIZE_MAX)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: file is too large to load", name);
  ampc_safetensors *f = calloc(1, sizeof *f);
  if (!f || !(f->buf = malloc(size + 1))) {
    free(f);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory loading %zu bytes", name, size);
  }
  memcpy(f->buf, data, size);
  f->buf[size] = 0;
  const ampc_status st = parse_file(name, f, size, flags);
  if (st != AMPC_OK) {
    ampc_safetensors_free(f);
    return st;
  }
  *out = f;
  return AMPC_OK;
}

int ampc_safetensors_count(const ampc_safetensors *f) { return f ? f->n : 0; }

const ampc_st_tensor *ampc_safetensors_tensor(const ampc_safetensors *f, int i) {
  if (!f || i < 0 || i >= f->n)
    return NULL;
  return &f->t[i];
}

const ampc_st_tensor *ampc_safetensors_find(const ampc_safetensors *f, const char *name) {
  if (!f || !name)
    return NULL;
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    const int c = strcmp(name, f->by_name[mid]->name);
    if (c == 0)
      return f->by_name[mid];
    if (c < 0)
      hi = mid - 1;
    else
      lo = mid + 1;
  }
  return NULL;
}

const char *ampc_safetensors_meta(const ampc_safetensors *f, const char *key) {
  if (!f || !key)
    return NULL;
  int lo = 0, hi = f->nmeta - 1;
  while (lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    const int c = strcmp(key, f->meta[mid].key);
    if (c == 0)
      return f->meta[mid].value;
    if (c < 0)
      hi = mid - 1;
    else
      lo = mid + 1;
  }
  return NULL;
}

void ampc_safetensors_free(ampc_safetensors *f) {
  if (!f)
    return;
  free(f->buf);
  free(f->strings);
  free(f->t);
  free(f->by_name);
  free(f->meta);
  free(f);
}
