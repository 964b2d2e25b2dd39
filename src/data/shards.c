/*
 * src/data/shards.c: reading a packed dataset (include/ampc/shards.h): the
 * manifest, the shards through mmap (each checked: header, size, SHA-256),
 * the val split in memory, the streaming training order with a prefetch
 * thread, and the samples' keys (each shard's keys file, read when first asked).
 */
#define _POSIX_C_SOURCE 200809L /* mmap, pthread */
#define _DEFAULT_SOURCE         /* madvise */
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#ifdef AMPC_HAVE_OPENSSL
#include <openssl/evp.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ampc/shards.h"
#include "data/data_internal.h"
#include "data/shards_internal.h"

int64_t ampc_shard_record_bytes(int32_t image_size, int32_t channels, int32_t seq_len) {
  const int64_t raw = (int64_t)image_size * image_size * channels + 4 * (int64_t)seq_len + 8;
  return (raw + 7) / 8 * 8;
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

void ampc__shard_header_put(uint8_t h[AMPC_SHARD_HEADER_BYTES], int32_t image_size,
                            int32_t channels, int32_t seq_len, uint64_t n_train, uint64_t n_val) {
  memset(h, 0, AMPC_SHARD_HEADER_BYTES);
  memcpy(h, AMPC_SHARD_MAGIC, 8);
  const uint32_t f[6] = {
      AMPC_SHARD_VERSION,   AMPC_SHARD_HEADER_BYTES,
      (uint32_t)image_size, (uint32_t)channels,
      (uint32_t)seq_len,    (uint32_t)ampc_shard_record_bytes(image_size, channels, seq_len)};
  for (int k = 0; k < 6; k++)
    for (int b = 0; b < 4; b++)
      h[8 + 4 * k + b] = (uint8_t)(f[k] >> (8 * b));
  for (int b = 0; b < 8; b++) {
    h[32 + b] = (uint8_t)(n_train >> (8 * b));
    h[40 + b] = (uint8_t)(n_val >> (8 * b));
  }
}

void ampc__sha256_hex(const unsigned char d[32], char hex[65]) {
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

ampc_status ampc__sha256(const void *data, size_t n, char hex[65]) {
#ifdef AMPC_HAVE_OPENSSL
  unsigned char d[32];
  unsigned int len = 0;
  if (!EVP_Digest(data, n, d, &len, EVP_sha256(), NULL) || len != 32)
    return ampc_fail(AMPC_ERR_NOMEM, "SHA-256 failed (OpenSSL)");
  ampc__sha256_hex(d, hex);
  return AMPC_OK;
#else /* a build without OpenSSL (the GPU check's command line) */
  (void)data, (void)n;
  hex[0] = 0;
  return ampc_fail(AMPC_ERR_UNSUPPORTED, "SHA-256: this ampc is built without OpenSSL");
#endif
}

/* ---- the manifest and the shards ---------------------------------------------------- */

typedef struct shard {
  char *path;
  const uint8_t *map; /* the whole file, or NULL when left out */
  size_t size;
  int64_t n_train, n_val;
  /* the keys file (NULL: the manifest names none) and its SHA-256 ("": none
   * given); keys_bad: the manifest's entry is not a file name in the folder */
  char *keys_path, keys_sha[65];
  bool keys_bad;
  char *keys;        /* loaded: the keys, NUL-terminated one after another, or NULL */
  int64_t *keys_off; /* [n_train + n_val] offsets into keys */
} shard;

struct ampc_shards {
  ampc_shards_info info;
  char *dir, *tokenizer;
  char **class_names;
  char **bad_notes; /* [n_sh]: the first bad_shards hold "PATH: left out (why)" */
  char *mpath;      /* the manifest, for messages */
  uint64_t id_hash;
  char id[17];
  int32_t *class_prompts;
  shard *sh;
  int64_t n_sh;
  int64_t rec;    /* record bytes */
  int64_t img_sz; /* image bytes */
};

const ampc_shards_info *ampc_shards_get_info(const ampc_shards *s) { return &s->info; }

void ampc_shards_close(ampc_shards *s) {
  if (!s)
    return;
  for (int64_t i = 0; i < s->n_sh; i++) {
    if (s->sh[i].map)
      munmap((void *)s->sh[i].map, s->sh[i].size);
    free(s->sh[i].path), free(s->sh[i].keys_path), free(s->sh[i].keys), free(s->sh[i].keys_off);
  }
  for (int32_t c = 0; s->class_names && c < s->info.n_classes; c++)
    free(s->class_names[c]); /* NULL past a failed parse: free(NULL) */
  for (int64_t i = 0; s->bad_notes && i < s->info.bad_shards; i++)
    free(s->bad_notes[i]);
  free(s->bad_notes);
  free(s->class_names), free(s->class_prompts), free(s->sh), free(s->dir), free(s->tokenizer);
  free(s->mpath);
  free(s);
}

/* the file as a string, NULL when it cannot be read or has more than max
 * bytes; the buffer doubles from 4 KiB, so a small manifest costs no
 * max-sized allocation */
static char *read_text(const char *path, size_t max) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = max < 4096 ? max : 4096, n = 0;
  char *buf = NULL;
  for (;;) {
    char *nb = realloc(buf, cap + 1);
    if (!nb)
      break;
    buf = nb;
    n += fread(buf + n, 1, cap + 1 - n, f);
    if (n <= cap) { /* the end of the file */
      fclose(f);
      buf[n] = 0;
      return buf;
    }
    if (cap == max)
      break;
    cap = cap > max / 2 ? max : 2 * cap;
  }
  fclose(f);
  free(buf);
  return NULL;
}

static int json_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int64_t *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsNumber(x) || x->valuedouble < (double)lo || x->valuedouble > (double)hi ||
      x->valuedouble != (double)(int64_t)x->valuedouble)
    return -1;
  *v = (int64_t)x->valuedouble;
  return 0;
}

char *ampc__path_join(const char *dir, const char *name) {
  const size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* map shard i and check it against the manifest; a shard that fails is left
 * out (map NULL) with *why set, unless strict */
static ampc_status map_shard(ampc_shards *s, shard *h, const char *want_sha, bool verify,
                             bool strict, const char **why) {
  *why = NULL;
  const int fd = open(h->path, O_RDONLY);
  struct stat stt;
  if (fd < 0 || fstat(fd, &stt) != 0) {
    if (fd >= 0)
      close(fd);
    *why = "missing";
    return strict
               ? ampc_fail(AMPC_ERR_IO, "%s: cannot open the shard: %s", h->path, strerror(errno))
               : AMPC_OK;
  }
  /* checked by division: 64 + records x record bytes can pass 2^64 (2^41
   * records of up to 64 MiB), and a wrapped product let a 64-byte file claim
   * 2^41 records */
  const int64_t records = h->n_train + h->n_val,
                body = (int64_t)stt.st_size - AMPC_SHARD_HEADER_BYTES;
  if (body < 0 || body % s->rec != 0 || body / s->rec != records) {
    close(fd);
    *why = "size";
    return strict
               ? ampc_fail(AMPC_ERR_FORMAT,
                           "%s: the shard has %lld bytes, not 64 + %lld records x %lld bytes "
                           "(truncated?)",
                           h->path, (long long)stt.st_size, (long long)records, (long long)s->rec)
               : AMPC_OK;
  }
  const uint64_t want = (uint64_t)stt.st_size;
  void *m = mmap(NULL, (size_t)want, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    return ampc_fail(AMPC_ERR_IO, "%s: mmap failed: %s", h->path, strerror(errno));
  const uint8_t *p = m;
  const char *bad = NULL;
  if (memcmp(p, AMPC_SHARD_MAGIC, 8) != 0)
    bad = "not a shard (bad magic)";
  else if (rd32(p + 8) != AMPC_SHARD_VERSION || rd32(p + 12) != AMPC_SHARD_HEADER_BYTES)
    bad = "unknown shard version";
  else if (rd32(p + 16) != (uint32_t)s->info.image_size ||
           rd32(p + 20) != (uint32_t)s->info.channels ||
           rd32(p + 24) != (uint32_t)s->info.seq_len || rd32(p + 28) != (uint32_t)s->rec ||
           rd64(p + 32) != (uint64_t)h->n_train || rd64(p + 40) != (uint64_t)h->n_val)
    bad = "its header does not match the manifest";
  char hex[65];
  if (!bad && verify) {
    const ampc_status hs = ampc__sha256(p, (size_t)want, hex);
    if (hs != AMPC_OK && hs != AMPC_ERR_UNSUPPORTED) {
      munmap(m, (size_t)want);
      return hs;
    }
    if (hs == AMPC_OK && strcmp(hex, want_sha) != 0)
      bad = "SHA-256 mismatch (the file changed after packing)";
    madvise(m, (size_t)want, MADV_DONTNEED); /* read once: not kept in the process */
  }
  if (bad) {
    munmap(m, (size_t)want);
    *why = bad;
    return strict ? ampc_fail(AMPC_ERR_FORMAT, "%s: %s", h->path, bad) : AMPC_OK;
  }
  h->map = p, h->size = (size_t)want;
  return AMPC_OK;
}

static ampc_status parse_manifest(ampc_shards *s, const char *mpath, const cJSON *j, bool verify,
                                  bool strict) {
  int64_t v[4];
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "ampc-shards") != 0 ||
      json_int(j, "version", 1, 1, &v[0]))
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: not an ampc pack manifest (format \"ampc-shards\", "
                     "version 1)",
                     mpath);
  if (json_int(j, "image_size", 4, 4096, &v[0]) || json_int(j, "channels", 1, 4, &v[1]) ||
      json_int(j, "seq_len", 1, AMPC_DS_MAX_SEQ_LEN, &v[2]) ||
      json_int(j, "vocab", 2, AMPC_DS_MAX_VOCAB, &v[3]))
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: image_size, channels, seq_len or vocab missing or out of range", mpath);
  ampc_shards_info *in = &s->info;
  in->image_size = (int32_t)v[0], in->channels = (int32_t)v[1], in->seq_len = (int32_t)v[2];
  in->vocab = (int32_t)v[3];
  s->img_sz = (int64_t)in->image_size * in->image_size * in->channels;
  s->rec = ampc_shard_record_bytes(in->image_size, in->channels, in->seq_len);
  const cJSON *tk = cJSON_GetObjectItemCaseSensitive(j, "tokenizer");
  const cJSON *tf = cJSON_GetObjectItemCaseSensitive(tk, "file");
  if (cJSON_IsString(tf) && !strchr(tf->valuestring, '/'))
    s->tokenizer = ampc__path_join(s->dir, tf->valuestring);
  in->tokenizer = s->tokenizer;
  /* classes and the zero-shot prompts; the model's class head needs 2, so a
   * pack without labels (every label 0) or with one has 2, the second never
   * a label, and no prompts (zero-shot needs 2 real classes) */
  const cJSON *cl = cJSON_GetObjectItemCaseSensitive(j, "classes");
  const int nc = cJSON_IsArray(cl) ? cJSON_GetArraySize(cl) : 0;
  if (nc > AMPC_DS_MAX_CLASSES)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: %d classes (at most %d)", mpath, nc,
                     AMPC_DS_MAX_CLASSES);
  in->n_classes = nc > 2 ? nc : 2;
  if (nc > 0) {
    s->class_names = calloc((size_t)in->n_classes, sizeof *s->class_names);
    if (!s->class_names)
      return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", mpath);
    for (int c = 0; c < nc; c++) {
      const cJSON *x = cJSON_GetArrayItem(cl, c);
      if (!cJSON_IsString(x) || !(s->class_names[c] = strdup(x->valuestring)))
        return ampc_fail(AMPC_ERR_FORMAT, "%s: class %d is not a string", mpath, c);
    }
    if (nc == 1 && !(s->class_names[1] = strdup("(none: one label in the data)")))
      return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", mpath);
    in->class_names = (const char *const *)s->class_names;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "class_prompt_tokens");
    if (nc >= 2 && cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == nc) {
      s->class_prompts = calloc((size_t)nc * (size_t)in->seq_len, sizeof *s->class_prompts);
      if (!s->class_prompts)
        return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", mpath);
      for (int c = 0; c < nc; c++) {
        const cJSON *row = cJSON_GetArrayItem(pr, c);
        const int n = cJSON_IsArray(row) ? cJSON_GetArraySize(row) : -1;
        if (n < 0 || n > in->seq_len)
          return ampc_fail(AMPC_ERR_FORMAT,
                           "%s: class_prompt_tokens[%d] is not a list of at most "
                           "seq_len ids",
                           mpath, c);
        for (int t = 0; t < n; t++) {
          const cJSON *x = cJSON_GetArrayItem(row, t);
          if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= (double)in->vocab)
            return ampc_fail(AMPC_ERR_FORMAT, "%s: class_prompt_tokens[%d] has an id out of range",
                             mpath, c);
          s->class_prompts[(size_t)c * (size_t)in->seq_len + (size_t)t] = (int32_t)x->valuedouble;
        }
      }
      in->class_prompts = s->class_prompts;
    }
  }
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "shards");
  const int ns = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
  if (ns < 1)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: no shards listed", mpath);
  s->sh = calloc((size_t)ns, sizeof *s->sh);
  s->bad_notes = calloc((size_t)ns, sizeof *s->bad_notes);
  in->bad_shard_notes = (const char *const *)s->bad_notes;
  if (!s->sh || !s->bad_notes)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", mpath);
  for (int i = 0; i < ns; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(e, "sha256");
    int64_t nt, nv;
    if (!cJSON_IsString(f) || strchr(f->valuestring, '/') || !cJSON_IsString(h) ||
        strlen(h->valuestring) != 64 || json_int(e, "train", 0, 1ll << 40, &nt) ||
        json_int(e, "val", 0, 1ll << 40, &nv))
      return ampc_fail(AMPC_ERR_FORMAT, "%s: shard entry %d needs file, sha256, train and val",
                       mpath, i);
    shard *sd = &s->sh[s->n_sh++];
    sd->n_train = nt, sd->n_val = nv;
    if (!(sd->path = ampc__path_join(s->dir, f->valuestring)))
      return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", mpath);
    /* the keys file: optional (packs made before keys have none); a bad entry
     * is reported by ampc_shards_key, not here: training does not need keys */
    const cJSON *kf = cJSON_GetObjectItemCaseSensitive(e, "keys");
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(e, "keys_sha256");
    if (kf) {
      sd->keys_bad = !cJSON_IsString(kf) || !kf->valuestring[0] || strchr(kf->valuestring, '/') ||
                     (ks && (!cJSON_IsString(ks) || strlen(ks->valuestring) != 64));
      if (!sd->keys_bad) {
        if (!(sd->keys_path = ampc__path_join(s->dir, kf->valuestring)))
          return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", mpath);
        if (ks)
          memcpy(sd->keys_sha, ks->valuestring, 65);
      }
    }
    const char *why;
    AMPC_TRY(map_shard(s, sd, h->valuestring, verify, strict, &why));
    if (!sd->map) {
      char note[4096];
      snprintf(note, sizeof note, "%s: left out (%s)", sd->path, why);
      char *dup = strdup(note);
      if (!dup)
        return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", mpath);
      s->bad_notes[in->bad_shards++] = dup;
      continue;
    }
    in->n_shards++;
    in->keyed_shards += sd->keys_path != NULL;
    in->n_train += nt, in->n_val += nv;
  }
  if (in->n_train < 1)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: no training samples in the readable shards (%lld of "
                     "%d left out)",
                     mpath, (long long)in->bad_shards, ns);
  return AMPC_OK;
}

ampc_status ampc_shards_open(ampc_shards **out, const char *path, bool verify, bool strict) {
  if (!out || !path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_shards_open: bad arguments");
  *out = NULL;
  ampc_shards *s = calloc(1, sizeof *s);
  if (!s)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
  s->id_hash = 1469598103934665603ull;
  struct stat st;
  char *mpath;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    s->dir = strdup(path);
    mpath = ampc__path_join(path, "manifest.json");
  } else {
    mpath = strdup(path);
    const char *slash = strrchr(path, '/');
    s->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
  }
  if (!s->dir || !mpath) {
    free(mpath);
    ampc_shards_close(s);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
  }
  char *txt = read_text(mpath, 64u << 20);
  ampc_status rc;
  if (txt) /* the pack's identity: FNV-1a 64 of its manifest (and below, the shards left out) */
    for (const unsigned char *p = (const unsigned char *)txt; *p; p++)
      s->id_hash = (s->id_hash ^ *p) * 1099511628211ull;
  if (!txt) {
    rc = ampc_fail(AMPC_ERR_IO,
                   "%s: cannot read the manifest (is it a folder made by `ampc data "
                   "pack`?)",
                   mpath);
  } else {
    cJSON *j = cJSON_Parse(txt);
    rc = j ? parse_manifest(s, mpath, j, verify, strict)
           : ampc_fail(AMPC_ERR_FORMAT, "%s: not valid JSON", mpath);
    cJSON_Delete(j);
  }
  free(txt);
  s->mpath = mpath;
  if (rc != AMPC_OK) {
    ampc_shards_close(s);
    return rc;
  }
  for (int64_t i = 0; i < s->n_sh; i++)
    if (!s->sh[i].map)
      s->id_hash = (s->id_hash ^ (uint64_t)(i + 1)) * 1099511628211ull;
  snprintf(s->id, sizeof s->id, "%016llx", (unsigned long long)s->id_hash);
  s->info.id = s->id;
  *out = s;
  return AMPC_OK;
}

/* ---- the samples' keys ---------------------------------------------------------------- */

enum { KEYS_MAX_BYTES = 1 << 30 };

/* read, check and index shard h's keys file (h->keys_path set) */
static ampc_status load_keys(shard *h) {
  const char *path = h->keys_path;
  struct stat stt;
  if (stat(path, &stt) != 0)
    return errno == ENOENT ? ampc_fail(AMPC_ERR_NOT_FOUND,
                                       "%s: the keys file is missing (the samples' keys of %s "
                                       "are unknown)",
                                       path, h->path)
                           : ampc_fail(AMPC_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  if (!S_ISREG(stt.st_mode))
    return ampc_fail(AMPC_ERR_FORMAT, "%s: damaged keys file: not a regular file", path);
  if (stt.st_size > KEYS_MAX_BYTES)
    return ampc_fail(AMPC_ERR_FORMAT, "%s: damaged keys file: %lld bytes (at most %d)", path,
                     (long long)stt.st_size, KEYS_MAX_BYTES);
  char *txt = read_text(path, KEYS_MAX_BYTES);
  if (!txt)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot read the keys file", path);
  const size_t len = strlen(txt);
  if (len != (size_t)stt.st_size) {
    free(txt);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: damaged keys file: a NUL byte at offset %zu", path, len);
  }
  char hex[65];
  const ampc_status hs = h->keys_sha[0] ? ampc__sha256(txt, len, hex) : AMPC_ERR_UNSUPPORTED;
  if (hs != AMPC_OK && hs != AMPC_ERR_UNSUPPORTED) {
    free(txt);
    return hs;
  }
  if (hs == AMPC_OK && strcmp(hex, h->keys_sha) != 0) {
    free(txt);
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: damaged keys file: SHA-256 mismatch (the file changed after packing)",
                     path);
  }
  /* the whole text one JSON value (the length counts the NUL: cJSON wants to see it) */
  cJSON *j = cJSON_ParseWithLengthOpts(txt, len + 1, NULL, true);
  free(txt);
  const int64_t want = h->n_train + h->n_val;
  const char *bad = NULL;
  int64_t n = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : -1, bytes = 0, bad_at = -1;
  if (!j)
    bad = "not valid JSON";
  else if (n < 0)
    bad = "not a JSON array of strings";
  else if (n != want)
    bad = "wrong count";
  const cJSON *x;
  int64_t k = 0;
  for (x = bad ? NULL : j->child; x; x = x->next, k++) {
    if (!cJSON_IsString(x) || !x->valuestring) {
      bad = "not a string", bad_at = k;
      break;
    }
    bytes += (int64_t)strlen(x->valuestring) + 1;
  }
  if (bad) {
    cJSON_Delete(j);
    if (bad_at >= 0)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: damaged keys file: entry %lld is not a string", path,
                       (long long)bad_at);
    if (n >= 0 && n != want)
      return ampc_fail(AMPC_ERR_FORMAT,
                       "%s: damaged keys file: %lld keys for the shard's %lld + %lld records", path,
                       (long long)n, (long long)h->n_train, (long long)h->n_val);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: damaged keys file: %s", path, bad);
  }
  h->keys = malloc((size_t)bytes + 1);
  h->keys_off = malloc((size_t)(want > 0 ? want : 1) * sizeof *h->keys_off);
  if (!h->keys || !h->keys_off) {
    cJSON_Delete(j);
    free(h->keys), free(h->keys_off);
    h->keys = NULL, h->keys_off = NULL;
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
  }
  int64_t at = 0;
  k = 0;
  cJSON_ArrayForEach(x, j) {
    const size_t l = strlen(x->valuestring) + 1;
    memcpy(h->keys + at, x->valuestring, l);
    h->keys_off[k++] = at;
    at += (int64_t)l;
  }
  cJSON_Delete(j);
  return AMPC_OK;
}

ampc_status ampc_shards_key(ampc_shards *s, int64_t shard_i, int64_t rec_i, char *buf, size_t n) {
  if (buf && n > 0)
    buf[0] = 0;
  if (!s || !buf || n == 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_shards_key: bad arguments (NULL or n = 0)");
  if (shard_i < 0 || shard_i >= s->n_sh)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_shards_key: shard %lld: out of range (the pack lists %lld)",
                     (long long)shard_i, (long long)s->n_sh);
  if (rec_i < 0 || rec_i >= s->sh[shard_i].n_train)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "ampc_shards_key: shard %lld record %lld: out of range (%lld training "
                     "records)",
                     (long long)shard_i, (long long)rec_i, (long long)s->sh[shard_i].n_train);
  shard *h = &s->sh[shard_i];
  if (h->keys_bad)
    return ampc_fail(AMPC_ERR_FORMAT,
                     "%s: shard entry %lld: \"keys\" is not a file name in the pack's folder "
                     "with a 64-digit keys_sha256",
                     s->mpath, (long long)shard_i);
  if (!h->keys_path)
    return ampc_fail(AMPC_ERR_NOT_FOUND,
                     "%s: the manifest names no keys file for %s (packed before ampc kept the "
                     "samples' keys): the samples' keys are unknown",
                     s->mpath, h->path);
  if (!h->keys)
    AMPC_TRY(load_keys(h));
  const char *k = h->keys + h->keys_off[rec_i];
  const size_t l = strlen(k), c = l < n - 1 ? l : n - 1;
  memcpy(buf, k, c);
  buf[c] = 0;
  return AMPC_OK;
}

static const uint8_t *record(const ampc_shards *s, int64_t shard_i, int64_t r) {
  return s->sh[shard_i].map + AMPC_SHARD_HEADER_BYTES + r * s->rec;
}

/* copy record r of shard i into the outputs (label clamped to the classes) */
static void put(const ampc_shards *s, int64_t i, int64_t r, uint8_t *img, int32_t *tok,
                int32_t *lab) {
  const uint8_t *p = record(s, i, r);
  const int32_t T = s->info.seq_len;
  if (img)
    memcpy(img, p, (size_t)s->img_sz);
  p += s->img_sz;
  if (tok)
    for (int32_t t = 0; t < T; t++) {
      const int32_t id = (int32_t)rd32(p + 4 * t);
      tok[t] = id >= 0 && id < s->info.vocab ? id : AMPC_TOKEN_UNK;
    }
  if (lab) {
    const int32_t l = (int32_t)rd32(p + 4 * T);
    *lab = l >= 0 && l < s->info.n_classes ? l : 0;
  }
}

ampc_status ampc_shards_shape_dataset(const ampc_shards *s, ampc_dataset *out) {
  memset(out, 0, sizeof *out);
  out->height = out->width = s->info.image_size;
  out->channels = s->info.channels, out->seq_len = s->info.seq_len;
  out->vocab = s->info.vocab, out->n_classes = s->info.n_classes;
  return AMPC_OK;
}

/* caption ids: equal token rows share a concept (an open-addressing table) */
static uint64_t row_hash(const int32_t *t, int32_t T) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t k = 0; k < T; k++)
    h = (h ^ (uint32_t)t[k]) * 1099511628211ull;
  return h;
}

ampc_status ampc_shards_val_dataset(ampc_shards *s, int64_t max_samples, ampc_dataset *out) {
  memset(out, 0, sizeof *out);
  int64_t n = s->info.n_val;
  if (max_samples > 0 && n > max_samples)
    n = max_samples;
  if (n > AMPC_DS_MAX_N)
    n = AMPC_DS_MAX_N;
  ampc_dataset d;
  ampc_shards_shape_dataset(s, &d);
  d.n = (int32_t)n;
  size_t tb[AMPC__DS_TEXTS] = {0, 0, 0, 0};
  char *text[AMPC__DS_TEXTS];
  if (s->class_names)
    for (int32_t c = 0; c < d.n_classes; c++)
      tb[1] += strlen(s->class_names[c]) + 1;
  AMPC_TRY(ampc__dataset_alloc(&d, tb, text));
  if (s->class_names) {
    char *w = text[1];
    for (int32_t c = 0; c < d.n_classes; c++) {
      const size_t l = strlen(s->class_names[c]) + 1;
      memcpy(w, s->class_names[c], l);
      d.class_names[c] = w;
      w += l;
    }
  }
  const int32_t T = d.seq_len;
  int64_t k = 0;
  for (int64_t i = 0; i < s->n_sh && k < n; i++)
    for (int64_t r = 0; s->sh[i].map && r < s->sh[i].n_val && k < n; r++, k++) {
      put(s, i, s->sh[i].n_train + r, d.images + k * s->img_sz, d.tokens + k * T, &d.label[k]);
      d.split[k] = AMPC_SPLIT_VAL;
    }
  /* concepts */
  int64_t cap = 16;
  while (cap < 2 * n)
    cap *= 2;
  int64_t *tab = malloc((size_t)cap * sizeof *tab);
  if (!tab) {
    ampc_dataset_free(&d);
    return ampc_fail(AMPC_ERR_NOMEM, "val split: out of memory");
  }
  for (int64_t i = 0; i < cap; i++)
    tab[i] = -1;
  int32_t nc = 0;
  for (int64_t i = 0; i < n; i++) {
    const int32_t *t = d.tokens + i * T;
    int64_t at = (int64_t)(row_hash(t, T) & (uint64_t)(cap - 1));
    while (tab[at] >= 0 && memcmp(d.tokens + tab[at] * T, t, (size_t)T * sizeof *t) != 0)
      at = (at + 1) & (cap - 1);
    if (tab[at] < 0) {
      tab[at] = i;
      d.concept[i] = nc++;
    } else {
      d.concept[i] = d.concept[tab[at]];
    }
  }
  free(tab);
  *out = d;
  return AMPC_OK;
}

/* ---- the training order ------------------------------------------------------------- */

static uint64_t mix(uint64_t a, uint64_t b) { return ampc_sample_hash(a, (int64_t)b); }

/* a Fisher-Yates permutation of [0, n) from key */
static void permute(int64_t *p, int64_t n, uint64_t key) {
  for (int64_t i = 0; i < n; i++)
    p[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    const int64_t j = (int64_t)(mix(key, (uint64_t)i) % (uint64_t)(i + 1));
    const int64_t t = p[i];
    p[i] = p[j], p[j] = t;
  }
}

/* one thread's view of the order: the epoch's shard order and window
 * offsets, and the current window's permutation */
typedef struct order_cache {
  int64_t epoch, window, window_epoch;
  int64_t *shard_order; /* [ng] indices into good[] */
  int64_t *prev_order;  /* [ng] the shard order of the epoch of `window` */
  int64_t *win_off;     /* [nw + 1] sample offsets of the windows within the epoch */
  int64_t *perm;        /* [max window samples] */
} order_cache;

typedef struct prefetch_job {
  int64_t base, n;
  bool posted, done;
} prefetch_job;

struct ampc_stream {
  ampc_shards *s;
  uint64_t seed;
  int64_t *good, ng; /* the readable shards with training samples */
  int64_t window, nw, max_win;
  order_cache main, bg;
  /* the prefetch thread */
  bool threaded, stop;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  prefetch_job job;
  int64_t cap;
  uint8_t *pimg;
  int32_t *ptok, *plab;
};

static int cache_init(order_cache *c, const ampc_stream *st) {
  c->epoch = c->window = c->window_epoch = -1;
  c->shard_order = malloc((size_t)st->ng * sizeof(int64_t));
  c->prev_order = malloc((size_t)st->ng * sizeof(int64_t));
  c->win_off = malloc((size_t)(st->nw + 1) * sizeof(int64_t));
  c->perm = malloc((size_t)st->max_win * sizeof(int64_t));
  return c->shard_order && c->prev_order && c->win_off && c->perm ? 0 : -1;
}
static void cache_free(order_cache *c) {
  free(c->shard_order), free(c->prev_order), free(c->win_off), free(c->perm);
}

static void locate(ampc_stream *st, order_cache *c, int64_t j, int64_t *shard_i, int64_t *rec) {
  const ampc_shards *s = st->s;
  const int64_t N = s->info.n_train, e = j / N, o = j % N;
  if (c->epoch != e) {
    permute(c->shard_order, st->ng, mix(st->seed ^ 0x5348415244ull, (uint64_t)e));
    c->win_off[0] = 0;
    for (int64_t w = 0; w < st->nw; w++) {
      int64_t sum = 0;
      for (int64_t k = w * st->window; k < (w + 1) * st->window && k < st->ng; k++)
        sum += s->sh[st->good[c->shard_order[k]]].n_train;
      c->win_off[w + 1] = c->win_off[w] + sum;
    }
    c->epoch = e;
  }
  int64_t lo = 0, hi = st->nw - 1; /* the window holding offset o */
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (c->win_off[mid] <= o)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t w = lo, cnt = c->win_off[w + 1] - c->win_off[w];
  if (c->window != w || c->window_epoch != e) {
    /* a thread leaves a window: its shards' pages go back to the page cache
     * (a read-only file mapping: dropping them loses nothing, a later read
     * faults them in again, so the other thread may still read there), and
     * the process holds about one shuffle buffer, not the dataset */
    if (c->window >= 0 && c->window_epoch >= 0)
      for (int64_t k = c->window * st->window; k < (c->window + 1) * st->window && k < st->ng;
           k++) {
        const shard *h = &s->sh[st->good[c->prev_order[k]]];
        madvise((void *)h->map, h->size, MADV_DONTNEED);
      }
    permute(c->perm, cnt, mix(mix(st->seed ^ 0x57494E444F57ull, (uint64_t)e), (uint64_t)w));
    c->window = w;
    c->window_epoch = e;
    memcpy(c->prev_order, c->shard_order, (size_t)st->ng * sizeof *c->prev_order);
  }
  int64_t q = c->perm[o - c->win_off[w]];
  for (int64_t k = w * st->window;; k++) {
    const int64_t g = st->good[c->shard_order[k]];
    if (q < s->sh[g].n_train) {
      *shard_i = g, *rec = q;
      return;
    }
    q -= s->sh[g].n_train;
  }
}

void ampc_stream_index(ampc_stream *st, int64_t j, int64_t *shard_i, int64_t *rec) {
  locate(st, &st->main, j, shard_i, rec);
}

static void fill_now(ampc_stream *st, order_cache *c, int64_t base, int64_t n, uint8_t *img,
                     int32_t *tok, int32_t *lab) {
  const ampc_shards *s = st->s;
  const int32_t T = s->info.seq_len;
  for (int64_t r = 0; r < n; r++) {
    int64_t i, q;
    locate(st, c, base + r, &i, &q);
    put(s, i, q, img ? img + r * s->img_sz : NULL, tok ? tok + r * T : NULL, lab ? lab + r : NULL);
  }
}

static void *prefetch_main(void *arg) {
  ampc_stream *st = arg;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    while (!st->stop && (!st->job.posted || st->job.done))
      pthread_cond_wait(&st->cv, &st->mu);
    if (st->stop)
      break;
    const prefetch_job j = st->job;
    pthread_mutex_unlock(&st->mu);
    fill_now(st, &st->bg, j.base, j.n, st->pimg, st->ptok, st->plab);
    pthread_mutex_lock(&st->mu);
    st->job.done = true;
    pthread_cond_broadcast(&st->cv);
  }
  pthread_mutex_unlock(&st->mu);
  return NULL;
}

ampc_status ampc_stream_create(ampc_stream **out, ampc_shards *s, uint64_t seed,
                               int64_t buffer_samples, bool prefetch) {
  if (!out || !s)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_stream_create: bad arguments");
  *out = NULL;
  ampc_stream *st = calloc(1, sizeof *st);
  if (!st)
    return ampc_fail(AMPC_ERR_NOMEM, "stream: out of memory");
  st->s = s, st->seed = seed;
  st->good = malloc((size_t)s->n_sh * sizeof *st->good);
  if (!st->good) {
    free(st);
    return ampc_fail(AMPC_ERR_NOMEM, "stream: out of memory");
  }
  int64_t biggest = 1;
  for (int64_t i = 0; i < s->n_sh; i++)
    if (s->sh[i].map && s->sh[i].n_train > 0) {
      st->good[st->ng++] = i;
      biggest = s->sh[i].n_train > biggest ? s->sh[i].n_train : biggest;
    }
  /* whole shards per buffer: as many of the largest as fit, at least one */
  const int64_t want = buffer_samples > 0 ? buffer_samples : 8192;
  st->window = want / biggest > 1 ? want / biggest : 1;
  if (st->window > st->ng)
    st->window = st->ng;
  st->nw = (st->ng + st->window - 1) / st->window;
  st->max_win = st->window * biggest;
  if (cache_init(&st->main, st) || cache_init(&st->bg, st)) {
    ampc_stream_free(st);
    return ampc_fail(AMPC_ERR_NOMEM, "stream: out of memory");
  }
  if (prefetch) {
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    if (pthread_create(&st->th, NULL, prefetch_main, st) == 0)
      st->threaded = true;
    else {
      pthread_mutex_destroy(&st->mu);
      pthread_cond_destroy(&st->cv);
    }
  }
  *out = st;
  return AMPC_OK;
}

void ampc_stream_free(ampc_stream *st) {
  if (!st)
    return;
  if (st->threaded) {
    pthread_mutex_lock(&st->mu);
    st->stop = true;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    pthread_join(st->th, NULL);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
  }
  cache_free(&st->main), cache_free(&st->bg);
  free(st->good), free(st->pimg), free(st->ptok), free(st->plab);
  free(st);
}

double ampc_stream_fill(ampc_stream *st, int64_t base, int64_t n, uint8_t *images, int32_t *tokens,
                        int32_t *labels, int64_t next_base) {
  const double t0 = ampc_now_s();
  const ampc_shards *s = st->s;
  const int32_t T = s->info.seq_len;
  bool copied = false;
  if (st->threaded) {
    pthread_mutex_lock(&st->mu);
    if (st->job.posted && st->job.base == base && st->job.n == n) {
      while (!st->job.done)
        pthread_cond_wait(&st->cv, &st->mu);
      if (images)
        memcpy(images, st->pimg, (size_t)(n * s->img_sz));
      if (tokens)
        memcpy(tokens, st->ptok, (size_t)(n * T) * sizeof *tokens);
      if (labels)
        memcpy(labels, st->plab, (size_t)n * sizeof *labels);
      copied = true;
    }
    while (st->job.posted && !st->job.done) /* a stale job: let it end */
      pthread_cond_wait(&st->cv, &st->mu);
    st->job.posted = false;
    pthread_mutex_unlock(&st->mu);
  }
  const double waited = (ampc_now_s() - t0) * 1e3;
  if (!copied)
    fill_now(st, &st->main, base, n, images, tokens, labels);
  const double ms = copied ? waited : (ampc_now_s() - t0) * 1e3;
  if (st->threaded && next_base >= 0) {
    pthread_mutex_lock(&st->mu);
    if (n > st->cap) {
      free(st->pimg), free(st->ptok), free(st->plab);
      st->pimg = malloc((size_t)(n * s->img_sz));
      st->ptok = malloc((size_t)(n * T) * sizeof *st->ptok);
      st->plab = malloc((size_t)n * sizeof *st->plab);
      st->cap = st->pimg && st->ptok && st->plab ? n : 0;
    }
    if (st->cap >= n) {
      st->job = (prefetch_job){.base = next_base, .n = n, .posted = true, .done = false};
      pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
  }
  return ms;
}
