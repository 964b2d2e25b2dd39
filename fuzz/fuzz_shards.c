/*
 * fuzz/fuzz_shards.c: the packed-dataset reader (src/data/shards.c): the
 * manifest, the shard headers and sizes, the SHA-256 check, the val split in
 * memory and the streaming training order with and without the prefetch
 * thread.
 *
 * Each input becomes a pack folder (one per process, made with mkdtemp under
 * /dev/shm or /tmp; the files are rewritten for every input). Byte 0 picks
 * the mode and options:
 *   bits 0-1  mode: 0 raw: bytes 1-2 are the manifest's length L (u16 LE),
 *             then L bytes of manifest.json, then the bytes of
 *             shard-00000.ampcs (the manifest may name it, or not);
 *             1 derived: the rest is shard-00000.ampcs and the harness writes
 *             a manifest that agrees with its header fields and SHA-256;
 *             2 generated: bytes 1-5 give image_size 4..8, channels 1..4,
 *             seq_len 1..6, 1..3 shards and vocab 2..41, then 2 bytes per
 *             shard its train (0..8) and val (0..4) counts; the records are
 *             the rest of the input, repeated (zeros when none); the harness
 *             writes valid headers, SHA-256 and manifest;
 *             3: as 2, with the last shard one byte short.
 *   bit 2     open manifest.json rather than the folder
 *   bit 3     also stream with the prefetch thread (checked against the
 *             stream without it)
 *   bits 4-5  shuffle buffer samples 0 (default), 1, 3 or 5
 *   bit 6     modes 1-3: a wrong SHA-256 for the first shard, and a second
 *             entry naming a missing file
 *   bit 7     modes 1-3: three classes with prompt tokens
 * Every input is opened with verify and strict each false and true; a pack
 * that opens is read through every call of include/ampc/shards.h, and the
 * results are checked against what the header promises (abort when not).
 */
#define _GNU_SOURCE /* mkdtemp */
#include "fuzz.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/data.h"
#include "ampc/shards.h"
#include "data/shards_internal.h"

static char g_dir[64];
static const char *const g_files[] = {"manifest.json", "shard-00000.ampcs", "shard-00001.ampcs",
                                      "shard-00002.ampcs"};
enum { N_FILES = 4, MANIFEST_CAP = 8192, MAX_IMAGE_BYTES = 16 << 20 };

static void path_of(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_dir, name);
}

static void cleanup(void) {
  char p[128];
  for (int i = 0; i < N_FILES; i++) {
    path_of(p, sizeof p, g_files[i]);
    unlink(p);
  }
  rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *roots[] = {"/dev/shm", "/tmp"};
  for (int i = 0; i < 2 && !g_dir[0]; i++) {
    snprintf(g_dir, sizeof g_dir, "%s/fuzz_shards.XXXXXX", roots[i]);
    if (!mkdtemp(g_dir))
      g_dir[0] = 0;
  }
  if (!g_dir[0]) {
    perror("fuzz_shards: mkdtemp");
    abort();
  }
  atexit(cleanup);
  return 0;
}

static void put_file(const char *name, const uint8_t *data, size_t size) {
  char p[128];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror("fuzz_shards: write");
    abort();
  }
}

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_shards: broken promise: %s\n", what);
    abort();
  }
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* ---- the manifest the harness writes (modes 1-3) ---------------------------------------- */

typedef struct gen_shard {
  const char *file;
  unsigned long long train, val;
  char sha[65];
} gen_shard;

static void put_manifest(unsigned long long image_size, unsigned long long channels,
                         unsigned long long seq_len, unsigned vocab, bool classes,
                         const gen_shard *sh, int ns, bool missing) {
  char m[MANIFEST_CAP];
  int o = snprintf(m, sizeof m,
                   "{\"format\": \"ampc-shards\", \"version\": 1, \"image_size\": %llu, "
                   "\"channels\": %llu, \"seq_len\": %llu, \"vocab\": %u, "
                   "\"tokenizer\": {\"file\": \"tokenizer.model\"},",
                   image_size, channels, seq_len, vocab);
  if (classes)
    o += snprintf(m + o, sizeof m - (size_t)o,
                  "\"classes\": [\"cat\", \"dog\", \"fox\"], \"class_prompt_tokens\": "
                  "[[1], [%u], []],",
                  vocab - 1);
  o += snprintf(m + o, sizeof m - (size_t)o, "\"shards\": [");
  for (int i = 0; i < ns; i++)
    o += snprintf(m + o, sizeof m - (size_t)o,
                  "%s{\"file\": \"%s\", \"train\": %llu, \"val\": %llu, \"sha256\": \"%s\"}",
                  i ? ", " : "", sh[i].file, sh[i].train, sh[i].val, sh[i].sha);
  if (missing)
    o += snprintf(m + o, sizeof m - (size_t)o,
                  ", {\"file\": \"gone.ampcs\", \"train\": 1, \"val\": 0, \"sha256\": "
                  "\"%064d\"}",
                  0);
  o += snprintf(m + o, sizeof m - (size_t)o, "]}");
  check(o > 0 && o < (int)sizeof m, "the harness's manifest fits");
  put_file("manifest.json", (const uint8_t *)m, (size_t)o);
}

static void sha_of(const uint8_t *p, size_t n, char hex[65], bool wrong) {
  if (wrong || ampc__sha256(p, n, hex) != AMPC_OK)
    memset(hex, 'f', 64), hex[64] = 0;
}

/* mode 1: a manifest that agrees with the shard's header */
static void derived(const uint8_t *shard, size_t n, uint8_t ctl) {
  uint8_t h[AMPC_SHARD_HEADER_BYTES] = {0};
  memcpy(h, shard, n < sizeof h ? n : sizeof h);
  put_file(g_files[1], shard, n);
  gen_shard g = {.file = g_files[1], .train = rd64(h + 32), .val = rd64(h + 40)};
  sha_of(shard, n, g.sha, ctl & 0x40);
  put_manifest(rd32(h + 16), rd32(h + 20), rd32(h + 24), 16, ctl & 0x80, &g, 1, ctl & 0x40);
}

/* modes 2 and 3: valid shards with the input's records */
static void generated(const uint8_t *d, size_t n, uint8_t ctl) {
  uint8_t p[5] = {0};
  for (size_t i = 0; i < 5 && i < n; i++)
    p[i] = d[i];
  d += n < 5 ? n : 5, n -= n < 5 ? n : 5;
  const int32_t is = 4 + p[0] % 5, ch = 1 + p[1] % 4, T = 1 + p[2] % 6, ns = 1 + p[3] % 3;
  const unsigned vocab = 2 + p[4] % 40u;
  const int64_t rec = ampc_shard_record_bytes(is, ch, T);
  gen_shard g[3];
  for (int i = 0; i < ns; i++) {
    g[i].file = g_files[1 + i];
    g[i].train = n > 0 ? d[0] % 9u : 1;
    g[i].val = n > 1 ? d[1] % 5u : 0;
    d += n < 2 ? n : 2, n -= n < 2 ? n : 2;
  }
  for (int i = 0; i < ns; i++) {
    const size_t bytes = AMPC_SHARD_HEADER_BYTES + (size_t)(g[i].train + g[i].val) * (size_t)rec;
    uint8_t *buf = malloc(bytes);
    check(buf != NULL, "harness memory");
    ampc__shard_header_put(buf, is, ch, T, g[i].train, g[i].val);
    for (size_t k = AMPC_SHARD_HEADER_BYTES; k < bytes; k++)
      buf[k] = n ? d[(k - AMPC_SHARD_HEADER_BYTES) % n] : 0;
    sha_of(buf, bytes, g[i].sha, i == 0 && (ctl & 0x40));
    const bool short_one = (ctl & 3) == 3 && i == ns - 1;
    put_file(g[i].file, buf, bytes - short_one);
    free(buf);
  }
  put_manifest((unsigned long long)is, (unsigned long long)ch, (unsigned long long)T, vocab,
               ctl & 0x80, g, ns, ctl & 0x40);
}

/* ---- reading what opened ------------------------------------------------------------------ */

static volatile size_t g_sink;

static void check_rows(const ampc_shards_info *in, int64_t n, const int32_t *tok,
                       const int32_t *lab) {
  for (int64_t i = 0; tok && i < n * in->seq_len; i++)
    check(tok[i] >= 0 && tok[i] < in->vocab, "token ids within the vocabulary");
  for (int64_t i = 0; lab && i < n; i++)
    check(lab[i] >= 0 && lab[i] < in->n_classes, "labels within the classes");
}

static void read_val(ampc_shards *s, const ampc_shards_info *in, int64_t img_sz) {
  int64_t max = MAX_IMAGE_BYTES / img_sz;
  max = max > 64 ? 64 : max < 1 ? 1 : max;
  ampc_dataset d;
  if (ampc_shards_val_dataset(s, max, &d) != AMPC_OK)
    return;
  const int64_t want = in->n_val < max ? in->n_val : max;
  check(d.n == want, "val dataset size");
  check(d.height == in->image_size && d.channels == in->channels && d.seq_len == in->seq_len,
        "val dataset shapes");
  check_rows(in, d.n, d.tokens, d.label);
  for (int32_t i = 0; i < d.n; i++) {
    check(d.concept[i] >= 0 && d.concept[i] <= i, "concept ids in first-seen order");
    check(d.split[i] == AMPC_SPLIT_VAL, "val split");
    g_sink += d.images[(size_t)i * (size_t)img_sz];
  }
  for (int32_t c = 0; d.class_names && c < d.n_classes; c++)
    g_sink += strlen(d.class_names[c]);
  ampc_dataset_free(&d);
}

typedef struct batch {
  uint8_t *img;
  int32_t *tok, *lab;
} batch;

static void read_stream(ampc_shards *s, const ampc_shards_info *in, int64_t img_sz, uint64_t seed,
                        int64_t buffer, bool prefetch) {
  ampc_stream *st = NULL;
  if (ampc_stream_create(&st, s, seed, buffer, false) != AMPC_OK)
    return;
  const int64_t N = in->n_train;
  /* the first two epochs visit every training sample once each (small packs) */
  if (N <= 64) {
    for (int64_t e = 0; e < 2; e++) {
      int64_t seen_sh[64], seen_r[64];
      for (int64_t j = 0; j < N; j++) {
        ampc_stream_index(st, e * N + j, &seen_sh[j], &seen_r[j]);
        check(seen_sh[j] >= 0 && seen_r[j] >= 0, "index in range");
        for (int64_t k = 0; k < j; k++)
          check(seen_sh[k] != seen_sh[j] || seen_r[k] != seen_r[j], "an epoch is a permutation");
      }
    }
  }
  const int64_t pos[] = {0, 1, N - 1, N, 3 * N + N / 2, 1000 * N + 7, (1ll << 40) + 5};
  int64_t sh, r;
  for (size_t k = 0; k < sizeof pos / sizeof *pos; k++) {
    ampc_stream_index(st, pos[k], &sh, &r);
    check(sh >= 0 && r >= 0 && r < N, "index in range");
    /* the sample's key: there, or absent, or a damaged keys file; never
     * out of range for an index the stream gave */
    char key[8] = "junk";
    const ampc_status ks = ampc_shards_key(s, sh, r, key, sizeof key);
    check(ks == AMPC_OK || ks == AMPC_ERR_NOT_FOUND || ks == AMPC_ERR_FORMAT || ks == AMPC_ERR_IO ||
              ks == AMPC_ERR_NOMEM,
          "a key, or why not");
    check(strlen(key) < sizeof key && (ks == AMPC_OK || key[0] == 0), "the key's buffer");
  }
  check(ampc_shards_key(s, in->n_shards + in->bad_shards, 0, (char[4]){0}, 4) ==
            AMPC_ERR_INVALID_ARG,
        "a shard past the list");
  const int64_t B = N < 4 ? N : 4;
  const bool images = B * img_sz <= MAX_IMAGE_BYTES;
  batch a[3], b[3];
  for (int k = 0; k < 3; k++) {
    a[k].img = images ? malloc((size_t)(B * img_sz)) : NULL;
    b[k].img = images ? malloc((size_t)(B * img_sz)) : NULL;
    a[k].tok = malloc((size_t)(B * in->seq_len) * sizeof(int32_t));
    b[k].tok = malloc((size_t)(B * in->seq_len) * sizeof(int32_t));
    a[k].lab = malloc((size_t)B * sizeof(int32_t));
    b[k].lab = malloc((size_t)B * sizeof(int32_t));
    check((!images || (a[k].img && b[k].img)) && a[k].tok && b[k].tok && a[k].lab && b[k].lab,
          "harness memory");
  }
  const int64_t base[3] = {N / 2, N / 2 + B, 5 * N + 3};
  for (int k = 0; k < 3; k++) {
    ampc_stream_fill(st, base[k], B, a[k].img, a[k].tok, a[k].lab, -1);
    check_rows(in, B, a[k].tok, a[k].lab);
  }
  ampc_stream_fill(st, (1ll << 40) + 1, 1, NULL, b[0].tok, NULL, -1); /* outputs may be NULL */
  ampc_stream_free(st);
  if (prefetch && ampc_stream_create(&st, s, seed, buffer, true) == AMPC_OK) {
    /* the prefetched batch (k = 1) and the fills around it give what the
     * stream without the thread gave */
    for (int k = 0; k < 3; k++) {
      ampc_stream_fill(st, base[k], B, b[k].img, b[k].tok, b[k].lab, k == 0 ? base[1] : -1);
      check((!images || memcmp(a[k].img, b[k].img, (size_t)(B * img_sz)) == 0) &&
                memcmp(a[k].tok, b[k].tok, (size_t)(B * in->seq_len) * sizeof(int32_t)) == 0 &&
                memcmp(a[k].lab, b[k].lab, (size_t)B * sizeof(int32_t)) == 0,
            "the prefetch thread's batch equals the direct one");
    }
    ampc_stream_fill(st, 2 * N, B, NULL, NULL, NULL, 7 * N); /* left pending at free */
    ampc_stream_free(st);
  }
  for (int k = 0; k < 3; k++) {
    free(a[k].img), free(a[k].tok), free(a[k].lab);
    free(b[k].img), free(b[k].tok), free(b[k].lab);
  }
}

static void read_pack(ampc_shards *s, uint64_t seed, int64_t buffer, bool prefetch) {
  const ampc_shards_info *in = ampc_shards_get_info(s);
  check(in->n_train >= 1 && in->n_shards >= 1 && in->n_val >= 0 && in->bad_shards >= 0,
        "counts of an open pack");
  check(in->n_classes >= 1 && in->seq_len >= 1 && in->vocab >= 2, "sizes of an open pack");
  for (int64_t i = 0; i < in->bad_shards; i++)
    g_sink += strlen(in->bad_shard_notes[i]);
  for (int32_t c = 0; in->class_names && c < in->n_classes; c++)
    g_sink += strlen(in->class_names[c]);
  if (in->class_prompts)
    check_rows(in, in->n_classes, in->class_prompts, NULL);
  if (in->tokenizer)
    g_sink += strlen(in->tokenizer);
  ampc_dataset shape;
  ampc_shards_shape_dataset(s, &shape);
  check(shape.n == 0 && shape.height == in->image_size && shape.vocab == in->vocab,
        "shape dataset");
  const int64_t img_sz = (int64_t)in->image_size * in->image_size * in->channels;
  read_val(s, in, img_sz);
  read_stream(s, in, img_sz, seed, buffer, prefetch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char p[128];
  for (int i = 0; i < N_FILES; i++) {
    path_of(p, sizeof p, g_files[i]);
    unlink(p);
  }
  if (size < 1)
    return 0;
  const uint8_t ctl = data[0];
  data++, size--;
  switch (ctl & 3) {
  case 0: {
    size_t L = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0;
    data += size < 2 ? size : 2, size -= size < 2 ? size : 2;
    L = L < size ? L : size;
    put_file("manifest.json", data, L);
    put_file(g_files[1], data + L, size - L);
    break;
  }
  case 1: derived(data, size, ctl); break;
  default: generated(data, size, ctl); break;
  }
  const int64_t buffers[4] = {0, 1, 3, 5};
  const int64_t buffer = buffers[(ctl >> 4) & 3];
  const uint64_t seed = size > 0 ? data[size - 1] : 0;
  if (ctl & 4)
    path_of(p, sizeof p, "manifest.json");
  else
    snprintf(p, sizeof p, "%s", g_dir);
  bool prefetched = false;
  for (int v = 0; v < 2; v++)
    for (int st = 0; st < 2; st++) {
      ampc_shards *s = NULL;
      if (ampc_shards_open(&s, p, v, st) != AMPC_OK) {
        check(s == NULL, "no pack on failure");
        continue;
      }
      read_pack(s, seed, buffer, (ctl & 8) && !prefetched);
      prefetched = true;
      ampc_shards_close(s);
    }
  return 0;
}
