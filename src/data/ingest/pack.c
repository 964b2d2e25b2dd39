/*
 * src/data/ingest/pack.c: `ampc data pack` (include/ampc/shards.h): a user's
 * captioned images to a packed dataset.
 *
 * Pass 1 reads captions and labels only: the training captions train the
 * tokenizer (SentencePiece), the labels become the classes. Pass 2 reads the
 * images, decodes and resizes them on every core (OpenMP over a block of
 * samples; the output order is the source's whatever the thread count, so the
 * same input gives the same bytes), tokenizes the captions and writes one
 * shard per `shard_samples` source samples: its training records, then its
 * val records, and beside it the records' sample keys in the same order
 * (shard-NNNNN.keys.json). Every file goes to a temporary name first and is
 * renamed when complete; pack.state lists the finished shards, so a killed
 * pack resumes.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ampc/shards.h"
#include "data/ingest/image.h"
#include "data/ingest/source.h"
#include "data/ingest/tokenizer.h"
#include "data/shards_internal.h"

/* ---- skip reasons: the source's faults, then the decoder's, then labels ------------ */

#define AMPC_PACK_MAX_CLASSES 65536
#define AMPC_PACK_MAX_SEQ_LEN 1024

enum {
  N_SRC = AMPC_FAULT_COUNT - 1,
  R_NOT_IMAGE = N_SRC,
  R_CORRUPT,
  R_PIXELS,
  R_NO_LABEL,
  N_REASONS
};

int ampc_pack_skip_reasons(void) { return N_REASONS; }

const char *ampc_pack_skip_reason(int i) {
  if (i >= 0 && i < N_SRC)
    return ampc_sample_fault_name((ampc_sample_fault)(i + 1));
  switch (i) {
  case R_NOT_IMAGE: return "not_an_image";
  case R_CORRUPT: return "corrupt_image";
  case R_PIXELS: return "too_many_pixels";
  case R_NO_LABEL: return "no_label";
  default: return "unknown";
  }
}

static int image_reason(ampc_image_error e) {
  switch (e) {
  case AMPC_IMAGE_EMPTY: return AMPC_FAULT_EMPTY_FILE - 1;
  case AMPC_IMAGE_FORMAT: return R_NOT_IMAGE;
  case AMPC_IMAGE_TOO_LARGE: return R_PIXELS;
  default: return R_CORRUPT;
  }
}

/* ---- small helpers ------------------------------------------------------------------- */

static bool exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* write txt to path through path.tmp and a rename */
static ampc_status write_atomic(const char *path, const void *data, size_t n) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
  const bool ok = fwrite(data, 1, n, f) == n;
  if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
    remove(tmp);
    return ampc_fail(AMPC_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  }
  return AMPC_OK;
}

static ampc_status write_json(const char *path, const cJSON *j) {
  char *txt = cJSON_Print(j);
  if (!txt)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", path);
  ampc_status st = write_atomic(path, txt, strlen(txt));
  free(txt);
  return st;
}

/* FNV-1a 64 of the key, then mixed with the seed: val when below the fraction */
static bool is_val(const char *key, uint64_t seed, double frac) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)key; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return (double)(ampc_sample_hash(seed, (int64_t)h) % 1000000u) < frac * 1e6;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct strset {
  char **v;
  int64_t n, cap;
} strset;

static int strset_add(strset *s, const char *x) {
  for (int64_t i = 0; i < s->n; i++) /* classes are few; a linear scan is enough */
    if (strcmp(s->v[i], x) == 0)
      return 0;
  if (s->n >= AMPC_PACK_MAX_CLASSES)
    return 1;
  if (s->n == s->cap) {
    const int64_t nc = s->cap ? 2 * s->cap : 16;
    char **nv = realloc(s->v, (size_t)nc * sizeof *nv);
    if (!nv)
      return -1;
    s->v = nv, s->cap = nc;
  }
  return (s->v[s->n] = strdup(x)) ? (s->n++, 0) : -1;
}

static void strset_free(strset *s) {
  for (int64_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

static int32_t class_of(const strset *cl, const char *label) {
  if (!label)
    return -1;
  const char **hit = bsearch(&label, cl->v, (size_t)cl->n, sizeof *cl->v, cmp_str);
  return hit ? (int32_t)(hit - (const char **)cl->v) : -1;
}

/* the caption as one lower-case line (ASCII letters; SentencePiece's NFKC
 * does the rest), for the tokenizer's training file */
static void put_line(FILE *f, const char *c) {
  for (const char *p = c; *p; p++) {
    char ch = *p;
    if (ch == '\n' || ch == '\r' || ch == '\t')
      ch = ' ';
    else if (ch >= 'A' && ch <= 'Z')
      ch = (char)(ch - 'A' + 'a');
    fputc(ch, f);
  }
  fputc('\n', f);
}

/* ---- the options that make a pack, recorded to refuse resuming another --------------- */

static cJSON *options_json(const ampc_pack_options *o) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "input", o->input);
  cJSON_AddStringToObject(j, "image_key", o->image_key ? o->image_key : "");
  cJSON_AddStringToObject(j, "caption_key", o->caption_key ? o->caption_key : "");
  cJSON_AddStringToObject(j, "label_key", o->label_key ? o->label_key : "");
  cJSON_AddStringToObject(j, "tokenizer", o->tokenizer ? o->tokenizer : "");
  cJSON_AddStringToObject(j, "tokenizer_type", o->tokenizer_type);
  cJSON_AddStringToObject(j, "prompt", o->prompt);
  cJSON_AddNumberToObject(j, "image_size", o->image_size);
  cJSON_AddNumberToObject(j, "seq_len", o->seq_len);
  cJSON_AddNumberToObject(j, "vocab", o->vocab);
  cJSON_AddNumberToObject(j, "shard_samples", o->shard_samples);
  cJSON_AddNumberToObject(j, "val_fraction", o->val_fraction);
  cJSON_AddNumberToObject(j, "seed", (double)o->seed);
  cJSON_AddNumberToObject(j, "max_pixels", (double)o->max_pixels);
  return j;
}

/* The input's listing and tar files with their sizes and modification
 * times: a resumed pack refuses an input changed since it started (an image
 * file changed in place behind a listing is not seen). */
static void fingerprint_file(cJSON *arr, const char *path) {
  struct stat st;
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "file", path);
  const bool ok = stat(path, &st) == 0;
  cJSON_AddNumberToObject(e, "bytes", ok ? (double)st.st_size : -1.0);
  cJSON_AddNumberToObject(e, "mtime_ns",
                          ok ? (double)st.st_mtim.tv_sec * 1e9 + (double)st.st_mtim.tv_nsec : -1.0);
  cJSON_AddItemToArray(arr, e);
}

static cJSON *input_fingerprint(const char *input) {
  cJSON *arr = cJSON_CreateArray();
  struct stat st;
  if (stat(input, &st) == 0 && S_ISDIR(st.st_mode)) {
    char *a = ampc__path_join(input, "metadata.jsonl"), *b = ampc__path_join(input, "metadata.csv");
    if (a && b)
      fingerprint_file(arr, exists(a) ? a : b);
    free(a), free(b);
    return arr;
  }
  char *list = strdup(input);
  for (char *save = NULL, *t = list ? strtok_r(list, ",", &save) : NULL; t;
       t = strtok_r(NULL, ",", &save)) {
    char **names = NULL;
    int64_t n = 0;
    if (ampc_brace_expand(t, &names, &n) == AMPC_OK) {
      for (int64_t i = 0; i < n; i++)
        fingerprint_file(arr, names[i]);
      ampc_strings_free(names, n);
    }
  }
  free(list);
  return arr;
}

/* ---- a shard's sample keys ------------------------------------------------------------ */

/* the keys of a shard's records, in record order (owned strings) */
typedef struct keylist {
  char **v;
  int64_t n, cap;
} keylist;

/* append k (taken over; NULL: out of memory already) */
static int keylist_push(keylist *l, char *k) {
  if (!k)
    return -1;
  if (l->n == l->cap) {
    const int64_t nc = l->cap ? 2 * l->cap : 64;
    char **nv = realloc(l->v, (size_t)nc * sizeof *nv);
    if (!nv) {
      free(k);
      return -1;
    }
    l->v = nv, l->cap = nc;
  }
  l->v[l->n++] = k;
  return 0;
}

static void keylist_clear(keylist *l) {
  for (int64_t i = 0; i < l->n; i++)
    free(l->v[i]);
  l->n = 0;
}

/* "[\n  \"KEY\",\n ...]\n": the keys of a shard's training records then of
 * its val records, a JSON array of strings (cJSON escapes every character),
 * one key per line so that line r + 2 holds record r's */
static char *keys_text(const keylist *tr, const keylist *va) {
  size_t cap = 4096, n = 0;
  char *out = malloc(cap);
  if (!out)
    return NULL;
  n += (size_t)snprintf(out, cap, "[");
  for (int64_t i = 0; i < tr->n + va->n; i++) {
    const char *k = i < tr->n ? tr->v[i] : va->v[i - tr->n];
    cJSON *x = cJSON_CreateString(k);
    char *q = x ? cJSON_PrintUnformatted(x) : NULL;
    cJSON_Delete(x);
    const size_t need = q ? strlen(q) + 16 : 0; /* ",\n  ", and "\n]\n" at the end */
    if (q && n + need > cap) {
      while (n + need > cap)
        cap *= 2;
      char *no = realloc(out, cap);
      if (!no)
        free(q), q = NULL;
      else
        out = no;
    }
    if (!q) {
      free(out);
      return NULL;
    }
    n += (size_t)snprintf(out + n, cap - n, "%s\n  %s", i ? "," : "", q);
    free(q);
  }
  snprintf(out + n, cap - n, "\n]\n");
  return out;
}

/* ---- pass 2's blocks: items copied out of the source, decoded in parallel ------------ */

enum { BLOCK = 64 };

typedef struct item_copy {
  char *key, *where, *caption, *label, *fault_msg;
  uint8_t *image;
  size_t image_size;
  int fault; /* ampc_sample_fault */
  /* the result */
  int reason; /* -1: packed */
  char *msg;  /* the decoder's message, for --strict */
  bool val;
  int32_t n_tokens;
} item_copy;

static void item_clear(item_copy *c) {
  free(c->key), free(c->where), free(c->caption), free(c->label), free(c->fault_msg);
  free(c->image), free(c->msg);
  memset(c, 0, sizeof *c);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static int item_copy_from(item_copy *c, const ampc_source_item *it) {
  memset(c, 0, sizeof *c);
  c->key = dup_or_null(it->key), c->where = dup_or_null(it->where);
  c->caption = dup_or_null(it->caption), c->label = dup_or_null(it->label);
  c->fault_msg = dup_or_null(it->fault_msg);
  c->fault = it->fault;
  if (it->image && it->image_size) {
    c->image = malloc(it->image_size);
    if (!c->image)
      return -1;
    memcpy(c->image, it->image, it->image_size);
    c->image_size = it->image_size;
  }
  return (it->key && !c->key) || (it->caption && !c->caption) ? -1 : 0;
}

typedef struct pack_state {
  const ampc_pack_options *o;
  const char *dir;
  ampc_tokenizer *tok;
  strset classes;
  int64_t rec, img_sz;
  ampc_pack_report *rep;
  cJSON *shards;     /* the finished shards' entries */
  int64_t read_done; /* source samples covered by finished shards */
  int64_t total;     /* source samples (pass 1) */
  ampc_source *src;  /* pass 2's source */
} pack_state;

/* decode one item into rec (a record) or set its reason */
static void process(pack_state *P, item_copy *c, uint8_t *rec) {
  const ampc_pack_options *o = P->o;
  c->reason = -1;
  if (c->fault != AMPC_FAULT_NONE) {
    c->reason = c->fault - 1;
    return;
  }
  int32_t label = 0;
  if (o->label_key) {
    label = class_of(&P->classes, c->label);
    if (label < 0) {
      c->reason = R_NO_LABEL;
      return;
    }
  }
  ampc_image_error why = AMPC_IMAGE_OK;
  char name[1024]; /* "data.csv:12: img/cat.jpg"; a tar member's where names it already */
  const char *w = c->where ? c->where : "", *k = c->key ? c->key : "";
  if (!w[0] || ampc_source_get_kind(P->src) == AMPC_SOURCE_WEBDATASET)
    snprintf(name, sizeof name, "%s", w[0] ? w : k);
  else
    snprintf(name, sizeof name, "%s: %s", w, k);
  if (ampc_image_square(c->image, c->image_size, name, o->image_size, o->max_pixels, rec, NULL,
                        &why) != AMPC_OK) {
    c->reason = image_reason(why);
    c->msg = strdup(ampc_last_error());
    return;
  }
  int32_t tok[AMPC_PACK_MAX_SEQ_LEN + 2];
  if (ampc_tokenizer_encode(P->tok, c->caption, tok, o->seq_len, &c->n_tokens) != AMPC_OK) {
    c->reason = AMPC_FAULT_BAD_ROW - 1;
    c->msg = strdup(ampc_last_error());
    return;
  }
  tok[o->seq_len] = label;
  tok[o->seq_len + 1] = 0;      /* reserved */
  uint8_t *p = rec + P->img_sz; /* little-endian, whatever the alignment */
  for (int32_t t = 0; t < o->seq_len + 2; t++)
    for (int b = 0; b < 4; b++)
      *p++ = (uint8_t)((uint32_t)tok[t] >> (8 * b));
  c->val = is_val(c->key, o->seed, o->val_fraction);
}

static ampc_status save_state(pack_state *P) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddItemToObject(j, "options", options_json(P->o));
  cJSON_AddItemToObject(j, "input_files", input_fingerprint(P->o->input));
  cJSON_AddNumberToObject(j, "read", (double)P->read_done);
  cJSON_AddItemReferenceToObject(j, "shards", P->shards);
  cJSON *sk = cJSON_AddObjectToObject(j, "skipped");
  for (int r = 0; r < N_REASONS; r++)
    cJSON_AddNumberToObject(sk, ampc_pack_skip_reason(r), (double)P->rep->skipped_by[r]);
  cJSON_AddNumberToObject(j, "truncated_captions", (double)P->rep->truncated_captions);
  char *path = ampc__path_join(P->dir, "pack.state");
  ampc_status st = path ? write_json(path, j) : ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  free(path);
  cJSON_Delete(j);
  return st;
}

/* the finished shard file: header, train records, val records; its SHA-256;
 * and before the shard is renamed into place, its keys file (tr: the
 * training records' keys, va: the val records'), so a shard listed in
 * pack.state always has its keys */
static ampc_status finish_shard(pack_state *P, int64_t idx, FILE *f, const char *tmp,
                                int64_t n_train, const uint8_t *val, int64_t n_val,
                                const keylist *tr, const keylist *va) {
  const ampc_pack_options *o = P->o;
  uint8_t h[AMPC_SHARD_HEADER_BYTES];
  ampc__shard_header_put(h, o->image_size, 3, o->seq_len, (uint64_t)n_train, (uint64_t)n_val);
  bool ok = fwrite(val, (size_t)P->rec, (size_t)n_val, f) == (size_t)n_val;
  ok = ok && fseek(f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, f) == sizeof h;
  ok = fflush(f) == 0 && ok;
  const size_t size = AMPC_SHARD_HEADER_BYTES + (size_t)((n_train + n_val) * P->rec);
  char hex[65] = "";
  if (ok) {
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fileno(f), 0);
    if (m == MAP_FAILED)
      ok = false;
    else {
      if (ampc__sha256(m, size, hex) != AMPC_OK)
        ok = false;
      munmap(m, size);
    }
  }
  ok = fclose(f) == 0 && ok;
  char name[64], kname[64], khex[65] = "";
  snprintf(name, sizeof name, "shard-%05lld.ampcs", (long long)idx);
  snprintf(kname, sizeof kname, "shard-%05lld.keys.json", (long long)idx);
  if (ok && (tr->n != n_train || va->n != n_val)) { /* a bookkeeping fault, never the data's */
    remove(tmp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: %lld + %lld keys for %lld + %lld records", kname,
                     (long long)tr->n, (long long)va->n, (long long)n_train, (long long)n_val);
  }
  if (ok) {
    char *ktxt = keys_text(tr, va), *kpath = ampc__path_join(P->dir, kname);
    ampc_status ks = !ktxt || !kpath ? ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", kname)
                                     : ampc__sha256(ktxt, strlen(ktxt), khex);
    if (ks == AMPC_OK)
      ks = write_atomic(kpath, ktxt, strlen(ktxt));
    free(ktxt), free(kpath);
    if (ks != AMPC_OK) {
      remove(tmp);
      return ks;
    }
  }
  char *final = ampc__path_join(P->dir, name);
  if (!ok || !final || rename(tmp, final) != 0) {
    remove(tmp);
    free(final);
    return ampc_fail(AMPC_ERR_IO, "%s: cannot write the shard: %s", tmp, strerror(errno));
  }
  free(final);
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "file", name);
  cJSON_AddNumberToObject(e, "train", (double)n_train);
  cJSON_AddNumberToObject(e, "val", (double)n_val);
  cJSON_AddNumberToObject(e, "bytes", (double)size);
  cJSON_AddStringToObject(e, "sha256", hex);
  cJSON_AddStringToObject(e, "keys", kname);
  cJSON_AddStringToObject(e, "keys_sha256", khex);
  cJSON_AddItemToArray(P->shards, e);
  return AMPC_OK;
}

/* pass 2 from source sample P->read_done on */
static ampc_status pass2(pack_state *P, ampc_source *src) {
  const ampc_pack_options *o = P->o;
  ampc_pack_report *rep = P->rep;
  item_copy *blk = calloc(BLOCK, sizeof *blk);
  uint8_t *recs = calloc(BLOCK, (size_t)P->rec);
  uint8_t *val = NULL;
  int64_t val_cap = 0, n_val = 0, n_train = 0, in_shard = 0;
  keylist tkeys = {0}, vkeys = {0}; /* the current shard's training and val records' keys */
  int64_t shard_idx = cJSON_GetArraySize(P->shards), read = 0;
  FILE *f = NULL;
  char tmp[4096] = "";
  ampc_status st = AMPC_OK;
  if (!blk || !recs) {
    st = ampc_fail(AMPC_ERR_NOMEM, "pack: out of memory");
    goto done;
  }
  bool done = false;
  while (!done && st == AMPC_OK) {
    int nb = 0; /* read a block (never past the end of the current shard) */
    while (nb < BLOCK && in_shard + nb < o->shard_samples) {
      ampc_source_item it;
      if ((st = ampc_source_next(src, &it, &done)) != AMPC_OK || done)
        break;
      if (read++ < P->read_done) /* covered by a finished shard (resume) */
        continue;
      if (item_copy_from(&blk[nb++], &it) != 0) {
        st = ampc_fail(AMPC_ERR_NOMEM, "pack: out of memory");
        break;
      }
    }
    if (st != AMPC_OK)
      break;
    const double t0 = ampc_now_s();
#pragma omp parallel for schedule(dynamic, 1) num_threads(o->threads)
    for (int k = 0; k < nb; k++)
      process(P, &blk[k], recs + (size_t)k * (size_t)P->rec);
    rep->decode_seconds += ampc_now_s() - t0;
    for (int k = 0; k < nb && st == AMPC_OK; k++) {
      item_copy *c = &blk[k];
      if (c->reason >= 0) {
        if (o->strict)
          st = ampc_fail(AMPC_ERR_FORMAT, "%s (--strict stops at the first bad sample)",
                         c->msg         ? c->msg
                         : c->fault_msg ? c->fault_msg
                                        : c->where);
        rep->skipped++, rep->skipped_by[c->reason]++;
        continue;
      }
      rep->truncated_captions += c->n_tokens > o->seq_len;
      const uint8_t *r = recs + (size_t)k * (size_t)P->rec;
      if (!f) { /* the shard's file: header space, then the training records */
        snprintf(tmp, sizeof tmp, "%s/shard-%05lld.ampcs.tmp", P->dir, (long long)shard_idx);
        f = fopen(tmp, "w+b");
        uint8_t zero[AMPC_SHARD_HEADER_BYTES] = {0};
        if (!f || fwrite(zero, 1, sizeof zero, f) != sizeof zero) {
          st = ampc_fail(AMPC_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
          break;
        }
      }
      if (c->val) {
        if (n_val == val_cap) {
          const int64_t nc = val_cap ? 2 * val_cap : 64;
          uint8_t *nv = realloc(val, (size_t)(nc * P->rec));
          if (!nv) {
            st = ampc_fail(AMPC_ERR_NOMEM, "pack: out of memory");
            break;
          }
          val = nv, val_cap = nc;
        }
        memcpy(val + n_val++ * P->rec, r, (size_t)P->rec);
        rep->n_val++;
      } else {
        if (fwrite(r, (size_t)P->rec, 1, f) != 1) {
          st = ampc_fail(AMPC_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
          break;
        }
        n_train++, rep->n_train++;
      }
      /* the key is_val() split on, taken over from the copy */
      char *key = c->key ? c->key : strdup("");
      c->key = NULL;
      if (keylist_push(c->val ? &vkeys : &tkeys, key) != 0) {
        st = ampc_fail(AMPC_ERR_NOMEM, "pack: out of memory");
        break;
      }
    }
    for (int k = 0; k < nb; k++)
      item_clear(&blk[k]);
    in_shard += nb;
    rep->read += nb;
    if (st != AMPC_OK)
      break;
    if (in_shard == o->shard_samples || (done && in_shard > 0)) {
      if (f) {
        st = finish_shard(P, shard_idx++, f, tmp, n_train, val, n_val, &tkeys, &vkeys);
        f = NULL;
        rep->shards++;
      }
      keylist_clear(&tkeys), keylist_clear(&vkeys);
      P->read_done += in_shard;
      in_shard = n_train = n_val = 0;
      if (st == AMPC_OK)
        st = save_state(P);
    }
    if (o->progress)
      o->progress(o->user, P->read_done + in_shard, P->total, rep->skipped);
  }
done:
  if (f) {
    fclose(f);
    remove(tmp);
  }
  for (int k = 0; blk && k < BLOCK; k++)
    item_clear(&blk[k]);
  keylist_clear(&tkeys), keylist_clear(&vkeys);
  free(tkeys.v), free(vkeys.v);
  free(blk), free(recs), free(val);
  return st;
}

/* ---- pass 1: captions and labels ------------------------------------------------------- */

static ampc_status pass1(pack_state *P, const char *captions_path) {
  const ampc_pack_options *o = P->o;
  ampc_source_options so = {.image_key = o->image_key,
                            .caption_key = o->caption_key,
                            .label_key = o->label_key,
                            .headers_only = true};
  ampc_source *src;
  AMPC_TRY(ampc_source_open(&src, o->input, &so));
  FILE *f = captions_path ? fopen(captions_path, "wb") : NULL;
  ampc_status st = AMPC_OK;
  if (captions_path && !f)
    st = ampc_fail(AMPC_ERR_IO, "%s: cannot write: %s", captions_path, strerror(errno));
  int64_t lines = 0, bad = 0;
  char first_bad[512] = "";
  for (bool done = false; st == AMPC_OK;) {
    ampc_source_item it;
    if ((st = ampc_source_next(src, &it, &done)) != AMPC_OK || done)
      break;
    P->total++;
    if (it.fault != AMPC_FAULT_NONE) {
      if (bad++ == 0)
        snprintf(first_bad, sizeof first_bad, "%s", it.fault_msg ? it.fault_msg : "");
      continue;
    }
    if (o->label_key && it.label && it.label[0]) {
      const int r = strset_add(&P->classes, it.label);
      if (r)
        st = r < 0 ? ampc_fail(AMPC_ERR_NOMEM, "pack: out of memory")
                   : ampc_fail(AMPC_ERR_FORMAT, "%s: more than %d distinct labels in '%s'",
                               o->input, AMPC_PACK_MAX_CLASSES, o->label_key);
    }
    if (f && !is_val(it.key, o->seed, o->val_fraction))
      put_line(f, it.caption), lines++;
  }
  ampc_source_close(src);
  if (f && fclose(f) != 0 && st == AMPC_OK)
    st = ampc_fail(AMPC_ERR_IO, "%s: cannot write", captions_path);
  if (st == AMPC_OK && f && lines == 0)
    st = bad ? ampc_fail(AMPC_ERR_FORMAT,
                         "%s: no readable training samples: %lld of %lld are bad (the first: %s)",
                         o->input, (long long)bad, (long long)P->total, first_bad)
             : ampc_fail(AMPC_ERR_FORMAT,
                         "%s: no training samples (%lld read, all in the val split or none)",
                         o->input, (long long)P->total);
  if (P->classes.n > 1)
    qsort(P->classes.v, (size_t)P->classes.n, sizeof *P->classes.v, cmp_str);
  return st;
}

static ampc_status copy_file(const char *from, const char *to) {
  FILE *f = fopen(from, "rb");
  if (!f)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot read: %s", from, strerror(errno));
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += r;
    if (n == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb)
        free(buf);
      buf = nb;
    }
  }
  fclose(f);
  if (!buf)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", from);
  ampc_status st = write_atomic(to, buf, n);
  free(buf);
  return st;
}

/* ---- the manifest ----------------------------------------------------------------------- */

static ampc_status write_manifest(pack_state *P, const char *kind) {
  const ampc_pack_options *o = P->o;
  ampc_pack_report *rep = P->rep;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "format", "ampc-shards");
  cJSON_AddNumberToObject(j, "version", 1);
  cJSON_AddNumberToObject(j, "image_size", o->image_size);
  cJSON_AddNumberToObject(j, "channels", 3);
  cJSON_AddNumberToObject(j, "seq_len", o->seq_len);
  cJSON_AddNumberToObject(j, "vocab", ampc_tokenizer_vocab(P->tok));
  cJSON_AddNumberToObject(j, "record_bytes", (double)P->rec);
  cJSON *tk = cJSON_AddObjectToObject(j, "tokenizer");
  cJSON_AddStringToObject(tk, "file", "tokenizer.model");
  cJSON_AddStringToObject(tk, "kind", "sentencepiece");
  cJSON_AddStringToObject(tk, "type", o->tokenizer ? "given" : o->tokenizer_type);
  if (o->tokenizer)
    cJSON_AddStringToObject(tk, "from", o->tokenizer);
  cJSON *sm = cJSON_AddObjectToObject(j, "samples");
  cJSON_AddNumberToObject(sm, "read", (double)P->total);
  cJSON_AddNumberToObject(sm, "train", (double)rep->n_train);
  cJSON_AddNumberToObject(sm, "val", (double)rep->n_val);
  cJSON_AddNumberToObject(sm, "skipped", (double)rep->skipped);
  cJSON *sk = cJSON_AddObjectToObject(j, "skipped");
  for (int r = 0; r < N_REASONS; r++)
    if (rep->skipped_by[r])
      cJSON_AddNumberToObject(sk, ampc_pack_skip_reason(r), (double)rep->skipped_by[r]);
  cJSON_AddNumberToObject(j, "truncated_captions", (double)rep->truncated_captions);
  cJSON *sp = cJSON_AddObjectToObject(j, "split");
  cJSON_AddStringToObject(sp, "rule",
                          "val when splitmix(seed, fnv1a64(key)) % 1e6 < "
                          "val_fraction * 1e6");
  cJSON_AddNumberToObject(sp, "seed", (double)o->seed);
  cJSON_AddNumberToObject(sp, "val_fraction", o->val_fraction);
  cJSON *src = cJSON_AddObjectToObject(j, "source");
  cJSON_AddStringToObject(src, "input", o->input);
  cJSON_AddStringToObject(src, "kind", kind);
  cJSON_AddItemToObject(j, "options", options_json(o));
  if (P->classes.n > 0) {
    cJSON_AddItemToObject(
        j, "classes",
        cJSON_CreateStringArray((const char *const *)P->classes.v, (int)P->classes.n));
    cJSON_AddStringToObject(j, "prompt", o->prompt);
    cJSON *pt = cJSON_AddArrayToObject(j, "class_prompt_tokens");
    int32_t *ids = malloc((size_t)o->seq_len * sizeof *ids);
    const char *at = strstr(o->prompt, "{label}");
    for (int64_t c = 0; ids && c < P->classes.n; c++) {
      char text[1024];
      if (at)
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - o->prompt), o->prompt, P->classes.v[c],
                 at + 7);
      else
        snprintf(text, sizeof text, "%s %s", o->prompt, P->classes.v[c]);
      int32_t n = 0;
      cJSON *row = cJSON_CreateArray();
      if (ampc_tokenizer_encode(P->tok, text, ids, o->seq_len, &n) == AMPC_OK)
        for (int32_t t = 0; t < (n < o->seq_len ? n : o->seq_len); t++)
          cJSON_AddItemToArray(row, cJSON_CreateNumber(ids[t]));
      cJSON_AddItemToArray(pt, row);
    }
    free(ids);
  }
  cJSON_AddItemReferenceToObject(j, "shards", P->shards);
  char *path = ampc__path_join(P->dir, "manifest.json");
  ampc_status st = path ? write_json(path, j) : ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  free(path);
  cJSON_Delete(j);
  return st;
}

/* ---- the pack -------------------------------------------------------------------------- */

static const char *kind_name(ampc_source_kind k) {
  static const char *const n[] = {"csv", "jsonl", "webdataset", "imagefolder"};
  return (unsigned)k < 4 ? n[k] : "unknown";
}

/* resume from pack.state when its options are these; 1: resumed */
static ampc_status load_state(pack_state *P, const char *state_path, int *resumed) {
  *resumed = 0;
  FILE *f = fopen(state_path, "rb");
  if (!f)
    return AMPC_OK;
  char *txt = malloc(64u << 20);
  const size_t n = txt ? fread(txt, 1, (64u << 20) - 1, f) : 0;
  fclose(f);
  if (!txt)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  txt[n] = 0;
  cJSON *j = cJSON_Parse(txt);
  free(txt);
  cJSON *mine = options_json(P->o);
  const cJSON *theirs = cJSON_GetObjectItemCaseSensitive(j, "options");
  const bool same = theirs && cJSON_Compare(theirs, mine, true);
  cJSON_Delete(mine);
  if (!j || !same) {
    cJSON_Delete(j);
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: holds an unfinished pack made with other options (or a damaged "
                     "pack.state); remove the folder or choose another --out",
                     P->dir);
  }
  cJSON *now = input_fingerprint(P->o->input);
  const bool same_input =
      cJSON_Compare(cJSON_GetObjectItemCaseSensitive(j, "input_files"), now, true);
  cJSON_Delete(now);
  if (!same_input) {
    cJSON_Delete(j);
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: holds an unfinished pack of %s as it was before: the input's files "
                     "changed since (size or time); remove the folder or choose another --out",
                     P->dir, P->o->input);
  }
  const cJSON *rd = cJSON_GetObjectItemCaseSensitive(j, "read");
  cJSON *sh = cJSON_DetachItemFromObjectCaseSensitive(j, "shards");
  if (!cJSON_IsNumber(rd) || !cJSON_IsArray(sh)) {
    cJSON_Delete(sh), cJSON_Delete(j);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: damaged (no read count or shard list)", state_path);
  }
  P->read_done = (int64_t)rd->valuedouble;
  cJSON_Delete(P->shards);
  P->shards = sh;
  const cJSON *sk = cJSON_GetObjectItemCaseSensitive(j, "skipped");
  for (int r = 0; r < N_REASONS; r++) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(sk, ampc_pack_skip_reason(r));
    P->rep->skipped_by[r] = cJSON_IsNumber(x) ? (int64_t)x->valuedouble : 0;
    P->rep->skipped += P->rep->skipped_by[r];
  }
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "truncated_captions");
  P->rep->truncated_captions = cJSON_IsNumber(tc) ? (int64_t)tc->valuedouble : 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, P->shards) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "train");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "val");
    P->rep->n_train += cJSON_IsNumber(t) ? (int64_t)t->valuedouble : 0;
    P->rep->n_val += cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
    P->rep->shards++, P->rep->resumed_shards++;
  }
  P->rep->read = P->read_done;
  cJSON_Delete(j);
  *resumed = 1;
  return AMPC_OK;
}

ampc_status ampc_pack(const ampc_pack_options *opt, ampc_pack_report *rep_out) {
  if (!opt || !opt->input || !opt->out_dir)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "pack: an input and an output folder are needed");
  ampc_pack_options o = *opt;
  if (!o.tokenizer_type)
    o.tokenizer_type = "bpe";
  if (!o.prompt)
    o.prompt = "a photo of a {label}";
  o.image_size = o.image_size ? o.image_size : 64;
  o.seq_len = o.seq_len ? o.seq_len : 32;
  o.vocab = o.vocab ? o.vocab : 4000;
  o.shard_samples = o.shard_samples ? o.shard_samples : 4096;
  o.max_pixels = o.max_pixels > 0 ? o.max_pixels : AMPC_IMAGE_MAX_PIXELS;
  o.threads = o.threads > 0 ? o.threads : omp_get_num_procs();
  if (o.image_size < 8 || o.image_size > 1024)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--image-size %d: must be in 8..1024", o.image_size);
  if (o.seq_len < 1 || o.seq_len > 1024)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--seq-len %d: must be in 1..1024", o.seq_len);
  if (o.shard_samples < 1 || o.shard_samples > (1 << 24))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--shard-samples %d: must be in 1..16777216",
                     o.shard_samples);
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--val-fraction %g: must be in [0, 1)", o.val_fraction);
  if (strcmp(o.tokenizer_type, "bpe") != 0 && strcmp(o.tokenizer_type, "unigram") != 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "--tokenizer-type %s: bpe or unigram", o.tokenizer_type);
  ampc_pack_report rep;
  memset(&rep, 0, sizeof rep);
  const double t0 = ampc_now_s();
  if (mkdir(o.out_dir, 0777) != 0 && errno != EEXIST)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot create the folder: %s", o.out_dir, strerror(errno));
  /* one pack at a time in a folder: an advisory lock, released when this
   * process ends however it ends */
  char *lock_path = ampc__path_join(o.out_dir, "pack.lock");
  const int lock_fd = lock_path ? open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (lock_fd >= 0)
      close(lock_fd);
    free(lock_path);
    return e == EWOULDBLOCK
               ? ampc_fail(AMPC_ERR_INVALID_ARG,
                           "%s: another `ampc data pack` is writing this folder "
                           "(pack.lock)",
                           o.out_dir)
               : ampc_fail(AMPC_ERR_IO, "%s: cannot lock the folder: %s", o.out_dir, strerror(e));
  }
  pack_state P = {.o = &o, .dir = o.out_dir, .rep = &rep, .shards = cJSON_CreateArray()};
  P.img_sz = (int64_t)o.image_size * o.image_size * 3;
  P.rec = ampc_shard_record_bytes(o.image_size, 3, o.seq_len);
  char *manifest = ampc__path_join(o.out_dir, "manifest.json");
  char *state = ampc__path_join(o.out_dir, "pack.state");
  char *model = ampc__path_join(o.out_dir, "tokenizer.model");
  char *caps = ampc__path_join(o.out_dir, "captions.txt.tmp");
  ampc_source *src = NULL;
  ampc_status st = AMPC_OK;
  int resumed = 0;
  if (!manifest || !state || !model || !caps || !P.shards)
    st = ampc_fail(AMPC_ERR_NOMEM, "pack: out of memory");
  else if (exists(manifest))
    st = ampc_fail(AMPC_ERR_INVALID_ARG,
                   "%s: already holds a finished pack (manifest.json); "
                   "it is never overwritten: remove it or choose another "
                   "--out",
                   o.out_dir);
  else
    st = load_state(&P, state, &resumed);
  if (st == AMPC_OK && !resumed) {
    /* a folder with files but no state is somebody else's: refuse */
    char *tmp_shard = ampc__path_join(o.out_dir, "shard-00000.ampcs");
    if (tmp_shard && exists(tmp_shard))
      st = ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: holds shards but no pack.state; remove them or "
                     "choose another --out",
                     o.out_dir);
    free(tmp_shard);
  }
  /* pass 1 (again on a resume: the classes and the total are not stored) */
  const bool train_tok = !o.tokenizer && !(resumed && exists(model));
  if (st == AMPC_OK)
    st = pass1(&P, train_tok ? caps : NULL);
  if (st == AMPC_OK && train_tok)
    st = ampc_tokenizer_train(caps, o.vocab, o.tokenizer_type, model);
  else if (st == AMPC_OK && o.tokenizer && !(resumed && exists(model)))
    st = copy_file(o.tokenizer, model);
  remove(caps);
  if (st == AMPC_OK && (st = ampc_tokenizer_load(&P.tok, model)) != AMPC_OK && o.tokenizer)
    remove(model); /* a --tokenizer that is not a usable model leaves nothing behind */
  if (st == AMPC_OK && !resumed)
    st = save_state(&P);
  if (st == AMPC_OK) {
    ampc_source_options so = {
        .image_key = o.image_key, .caption_key = o.caption_key, .label_key = o.label_key};
    st = ampc_source_open(&src, o.input, &so);
  }
  P.src = src;
  if (st == AMPC_OK)
    st = pass2(&P, src);
  if (st == AMPC_OK && rep.n_train == 0) {
    int top = 0;
    for (int r = 1; r < N_REASONS; r++)
      top = rep.skipped_by[r] > rep.skipped_by[top] ? r : top;
    st = ampc_fail(AMPC_ERR_FORMAT,
                   "%s: no training sample could be packed (%lld skipped, most for %s)", o.input,
                   (long long)rep.skipped, ampc_pack_skip_reason(top));
  }
  if (st == AMPC_OK)
    st = write_manifest(&P, kind_name(ampc_source_get_kind(src)));
  if (st == AMPC_OK)
    remove(state);
  rep.vocab = P.tok ? ampc_tokenizer_vocab(P.tok) : 0;
  rep.n_classes = (int32_t)P.classes.n;
  rep.seconds = ampc_now_s() - t0;
  if (rep_out)
    *rep_out = rep;
  ampc_source_close(src);
  ampc_tokenizer_free(P.tok);
  strset_free(&P.classes);
  cJSON_Delete(P.shards);
  free(manifest), free(state), free(model), free(caps);
  if (st == AMPC_OK)
    remove(lock_path);
  close(lock_fd);
  free(lock_path);
  return st;
}
