/*
 * src/data/emoji_prep.c: builds the emoji image-text dataset from the unpacked
 * npm packages emoji-datasource-google, emoji-datasource-twitter (images and
 * the emoji list) and emojibase-data (CLDR labels, keywords and groups). The
 * rules (join, captions, vocabulary, classes, splits, sample order) are
 * documented in docs/DATA.md; `ampc data emoji` fetches the packages and
 * calls ampc_emoji_prepare.
 *
 * Deterministic: the result depends only on the package contents (file order
 * of emoji.json, fixed hash for the split, sorts with total orders).
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

enum { N_GROUPS = 10, GROUP_COMPONENT = 2 };
/* CLDR / emojibase group keys, indexed by emojibase's `group` number */
static const char *const k_group_names[N_GROUPS] = {
    "smileys-emotion", "people-body", "component", "animals-nature", "food-drink",
    "travel-places",   "activities",  "objects",   "symbols",        "flags"};

/* ---- PNG ------------------------------------------------------------------- */

static _Thread_local char g_png_msg[200];

static void png_error_fn(png_structp png, png_const_charp msg) {
  snprintf(g_png_msg, sizeof g_png_msg, "%s", msg ? msg : "libpng error");
  png_longjmp(png, 1);
}

/* libpng warnings (e.g. about ICC profiles) are not errors; the library never
 * prints, so they are dropped. */
static void png_warning_fn(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

ampc_status ampc_emoji_png_load(const char *path, uint8_t *out) {
  enum { S = AMPC_EMOJI_SRC_SIZE, D = AMPC_EMOJI_SIZE };
  if (!path || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_emoji_png_load: NULL argument");
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open", path);
  unsigned char sig[8];
  if (fread(sig, 1, sizeof sig, fp) != sizeof sig || png_sig_cmp(sig, 0, sizeof sig) != 0) {
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: not a PNG file", path);
  }
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, png_error_fn, png_warning_fn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_NOMEM, "%s: cannot allocate the PNG decoder", path);
  }
  /* 8-bit RGBA rows; nothing that the error path reads changes after setjmp */
  unsigned char pix[S][S * 4];
  png_bytep rows[S];
  for (int y = 0; y < S; y++)
    rows[y] = pix[y];
  g_png_msg[0] = '\0';
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: corrupt PNG: %s", path, g_png_msg);
  }
  png_init_io(png, fp);
  png_set_sig_bytes(png, sizeof sig);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w != S || h != S) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: image is %lux%lu, expected %dx%d", path,
                     (unsigned long)w, (unsigned long)h, S, S);
  }
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  const int trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  png_set_expand(png); /* palette -> RGB, gray < 8 bits -> 8 bits, tRNS -> alpha */
  if (depth == 16)
    png_set_scale_16(png); /* v * 255 / 65535, rounded */
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
    png_set_gray_to_rgb(png);
  if (!(color & PNG_COLOR_MASK_ALPHA) && !trns)
    png_set_add_alpha(png, 0xFF, PNG_FILLER_AFTER);
  (void)png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != (size_t)S * 4 || png_get_channels(png, info) != 4) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return ampc_fail(AMPC_ERR_FORMAT, "%s: cannot convert colour type %d, depth %d to RGBA8", path,
                     color, depth);
  }
  png_read_image(png, rows);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  fclose(fp);

  /* composite over white and average 2x2 blocks, exactly (see data.h) */
  for (int y = 0; y < D; y++)
    for (int x = 0; x < D; x++)
      for (int c = 0; c < 3; c++) {
        uint32_t num = 0;
        for (int dy = 0; dy < 2; dy++)
          for (int dx = 0; dx < 2; dx++) {
            const unsigned char *p = &pix[2 * y + dy][4 * (2 * x + dx)];
            const uint32_t a = p[3];
            num += (uint32_t)p[c] * a + 255u * (255u - a);
          }
        out[(y * D + x) * 3 + c] = (uint8_t)((num + 510u) / 1020u);
      }
  return AMPC_OK;
}

/* ---- small helpers --------------------------------------------------------- */

/* path = a/b (a fresh string), NULL when out of memory */
static char *join_path(const char *a, const char *b) {
  const size_t la = strlen(a), lb = strlen(b);
  char *p = malloc(la + lb + 2);
  if (!p)
    return NULL;
  memcpy(p, a, la);
  p[la] = '/';
  memcpy(p + la + 1, b, lb + 1);
  return p;
}

static ampc_status read_json(const char *path, cJSON **out) {
  *out = NULL;
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open", path);
  size_t cap = 1 << 16, len = 0; /* doubled as needed */
  char *buf = malloc(cap);
  while (buf) {
    len += fread(buf + len, 1, cap - len, fp);
    if (len < cap)
      break;
    char *nb = realloc(buf, cap * 2);
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
  if (!buf)
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory reading it", path);
  if (err) {
    free(buf);
    return ampc_fail(AMPC_ERR_IO, "%s: read error", path);
  }
  *out = cJSON_ParseWithLength(buf, len);
  free(buf);
  if (!*out || !cJSON_IsArray(*out)) {
    cJSON_Delete(*out);
    *out = NULL;
    return ampc_fail(AMPC_ERR_FORMAT, "%s: not a JSON array", path);
  }
  return AMPC_OK;
}

/* Upper-case hexcode key ("1f600" -> "1F600"); -1 when it does not fit. */
enum { KEY_MAX = 96 };
static int hex_key(const char *s, char key[KEY_MAX]) {
  size_t i = 0;
  for (; s[i]; i++) {
    if (i + 1 >= KEY_MAX)
      return -1;
    key[i] = (s[i] >= 'a' && s[i] <= 'z') ? (char)(s[i] - 'a' + 'A') : s[i];
  }
  key[i] = '\0';
  return 0;
}

/* 32-bit FNV-1a of a string (offset basis 2166136261, prime 16777619). */
static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 16777619u;
  }
  return h;
}

/* ---- caption words --------------------------------------------------------- */

/* Decode one UTF-8 code point at s; returns the bytes used (>= 1) and sets
 * *cp, or UINT32_MAX for an invalid sequence (which then separates words). */
static size_t utf8_next(const unsigned char *s, uint32_t *cp) {
  const unsigned char c = s[0];
  size_t n;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2, v = c & 0x1Fu, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, v = c & 0x0Fu, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, v = c & 0x07u, min = 0x10000;
  } else {
    *cp = UINT32_MAX;
    return 1;
  }
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *cp = UINT32_MAX;
      return 1;
    }
    v = v << 6 | (s[i] & 0x3Fu);
  }
  *cp = (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) ? UINT32_MAX : v;
  return n;
}

/* Word characters: ASCII letters and digits, and the Latin letters
 * U+00C0..U+024F except U+00D7 (x sign) and U+00F7 (division sign). */
static int is_word_cp(uint32_t cp) {
  return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
         (cp >= 0xC0 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7);
}

/* Lower case: ASCII A-Z and the Latin-1 capitals U+00C0..U+00DE. */
static uint32_t lower_cp(uint32_t cp) {
  if ((cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7))
    return cp + 0x20;
  return cp;
}

static size_t utf8_put(uint32_t cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  o[0] = (char)(0xE0 | cp >> 12); /* word characters are all below U+0250 */
  o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[2] = (char)(0x80 | (cp & 0x3F));
  return 3;
}

typedef struct wordlist {
  char **w;
  int n, cap;
} wordlist;

static void wordlist_free(wordlist *l) {
  for (int i = 0; i < l->n; i++)
    free(l->w[i]);
  free(l->w);
  memset(l, 0, sizeof *l);
}

/* Append word (len bytes) unless the list already has it. -1: no memory. */
static int wordlist_add(wordlist *l, const char *word, size_t len) {
  for (int i = 0; i < l->n; i++)
    if (strlen(l->w[i]) == len && memcmp(l->w[i], word, len) == 0)
      return 0;
  if (l->n == l->cap) {
    const int cap = l->cap ? 2 * l->cap : 16;
    char **nw = realloc(l->w, (size_t)cap * sizeof *nw);
    if (!nw)
      return -1;
    l->w = nw;
    l->cap = cap;
  }
  char *s = malloc(len + 1);
  if (!s)
    return -1;
  memcpy(s, word, len);
  s[len] = '\0';
  l->w[l->n++] = s;
  return 0;
}

/* Split text into lower-cased words (maximal runs of word characters) and
 * append the new ones to l. -1: no memory. */
static int add_words(wordlist *l, const char *text) {
  const unsigned char *s = (const unsigned char *)text;
  char word[256];
  size_t wl = 0;
  for (;;) {
    uint32_t cp = 0;
    const size_t used = *s ? utf8_next(s, &cp) : 0;
    if (used && is_word_cp(cp)) {
      if (wl + 4 < sizeof word) /* absurdly long words are cut, never overflow */
        wl += utf8_put(lower_cp(cp), word + wl);
    } else if (wl) {
      if (wordlist_add(l, word, wl) != 0)
        return -1;
      wl = 0;
    }
    if (!used)
      return 0;
    s += used;
  }
}

/* ---- the join -------------------------------------------------------------- */

typedef struct base_entry {
  char key[KEY_MAX];
  cJSON *e;
  int used;
} base_entry;

static int cmp_base(const void *a, const void *b) {
  return strcmp(((const base_entry *)a)->key, ((const base_entry *)b)->key);
}
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static base_entry *find_base(base_entry *idx, size_t n, const char *hex) {
  base_entry k;
  if (!hex || hex_key(hex, k.key) != 0)
    return NULL;
  return bsearch(&k, idx, n, sizeof *idx, cmp_base);
}

typedef struct concept {
  const char *unified; /* inside the google emoji.json tree */
  const char *image;
  int group;
  int held_out;
  wordlist words; /* caption words, deduplicated, truncated to the sequence length */
}
concept;

typedef struct vocab_entry {
  const char *word;
  int32_t count, id;
} vocab_entry;

static int cmp_vocab_freq(const void *a, const void *b) {
  const vocab_entry *x = a, *y = b;
  if (x->count != y->count)
    return x->count > y->count ? -1 : 1;
  return strcmp(x->word, y->word);
}
static int cmp_vocab_word(const void *a, const void *b) {
  return strcmp(((const vocab_entry *)a)->word, ((const vocab_entry *)b)->word);
}

static const char *str_field(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

ampc_status ampc_emoji_prepare(const char *google_dir, const char *twitter_dir,
                               const char *emojibase_dir, ampc_dataset *out,
                               ampc_emoji_prep_stats *stats) {
  enum { D = AMPC_EMOJI_SIZE, L = AMPC_EMOJI_SEQ_LEN, IMG = D * D * 3 };
  if (!google_dir || !twitter_dir || !emojibase_dir || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_emoji_prepare: NULL argument");
  memset(out, 0, sizeof *out);
  ampc_emoji_prep_stats S;
  memset(&S, 0, sizeof S);
  ampc_status st = AMPC_OK;
  cJSON *gj = NULL, *tj = NULL, *bj = NULL;
  char *gpath = NULL, *tpath = NULL, *bpath = NULL, *gimg = NULL, *timg = NULL, *file = NULL;
  base_entry *idx = NULL;
  const char **twitter_ok = NULL;
  concept *con = NULL;
  uint8_t *pixels = NULL;
  vocab_entry *voc = NULL;
  const char **all = NULL;
  int nt = 0, nc = 0;
  size_t nidx = 0;
  int32_t nvoc = 0;

  gpath = join_path(google_dir, "emoji.json");
  tpath = join_path(twitter_dir, "emoji.json");
  bpath = join_path(emojibase_dir, "en/data.json");
  gimg = join_path(google_dir, "img/google/64");
  timg = join_path(twitter_dir, "img/twitter/64");
  if (!gpath || !tpath || !bpath || !gimg || !timg) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
    goto done;
  }
  if ((st = read_json(gpath, &gj)) != AMPC_OK || (st = read_json(tpath, &tj)) != AMPC_OK ||
      (st = read_json(bpath, &bj)) != AMPC_OK)
    goto done;

  /* emojibase entries by upper-case hexcode */
  S.emojibase_entries = cJSON_GetArraySize(bj);
  idx = calloc((size_t)S.emojibase_entries + 1, sizeof *idx);
  if (!idx) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
    goto done;
  }
  for (cJSON *e = bj->child; e; e = e->next) {
    const char *hex = str_field(e, "hexcode");
    if (!hex || hex_key(hex, idx[nidx].key) != 0) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: entry %zu has no usable \"hexcode\"", bpath, nidx);
      goto done;
    }
    idx[nidx++].e = e;
  }
  qsort(idx, nidx, sizeof *idx, cmp_base);

  /* emoji that the twitter package has an image for */
  twitter_ok = calloc((size_t)cJSON_GetArraySize(tj) + 1, sizeof *twitter_ok);
  if (!twitter_ok) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
    goto done;
  }
  for (cJSON *e = tj->child; e; e = e->next) {
    const char *u = str_field(e, "unified");
    if (u && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "has_img_twitter")))
      twitter_ok[nt++] = u;
  }
  qsort(twitter_ok, (size_t)nt, sizeof *twitter_ok, cmp_str);

  /* the concepts, in the file order of the google emoji.json */
  S.datasource_entries = cJSON_GetArraySize(gj);
  con = calloc((size_t)S.datasource_entries + 1, sizeof *con);
  if (!con) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
    goto done;
  }
  int entry = 0;
  for (cJSON *e = gj->child; e; e = e->next, entry++) {
    const char *u = str_field(e, "unified"), *q = str_field(e, "non_qualified");
    const char *image = str_field(e, "image");
    if (!u || !image || !*image || strchr(image, '/')) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: entry %d lacks \"unified\" or a plain \"image\" name",
                     gpath, entry);
      goto done;
    }
    base_entry *b = find_base(idx, nidx, u);
    if (b)
      S.joined_unified++;
    else if ((b = find_base(idx, nidx, q)) != NULL)
      S.joined_non_qualified++;
    else {
      S.skipped_unmatched++;
      continue;
    }
    if (b->used) {
      S.skipped_duplicate++;
      continue;
    }
    b->used = 1;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(b->e, "group");
    if (!cJSON_IsNumber(g)) {
      S.skipped_no_group++;
      continue;
    }
    const double gv = g->valuedouble;
    const int group = gv >= 0 && gv < N_GROUPS ? (int)gv : -1;
    if (group < 0 || gv != (double)group) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: %s has unknown group %g", bpath, b->key, g->valuedouble);
      goto done;
    }
    if (group == GROUP_COMPONENT) {
      S.skipped_component++;
      continue;
    }
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "has_img_google")) ||
        !bsearch(&u, twitter_ok, (size_t)nt, sizeof *twitter_ok, cmp_str)) {
      S.skipped_no_image++;
      continue;
    }
    concept *c = &con[nc++];
    c->unified = u;
    c->image = image;
    c->group = group;
    c->held_out = fnv1a(u) % 10u == 0;
    /* caption: label words, then tag words, deduplicated in order */
    const char *label = str_field(b->e, "label");
    if (!label) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: %s has no \"label\"", bpath, b->key);
      goto done;
    }
    int oom = add_words(&c->words, label);
    const cJSON *tags = cJSON_GetObjectItemCaseSensitive(b->e, "tags");
    const cJSON *t;
    cJSON_ArrayForEach(t, tags) {
      if (cJSON_IsString(t))
        oom |= add_words(&c->words, t->valuestring);
    }
    if (oom) {
      st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
      goto done;
    }
    if (c->words.n == 0) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: %s has an empty caption", bpath, b->key);
      goto done;
    }
    if (c->words.n > S.max_caption_words)
      S.max_caption_words = c->words.n;
    if (c->words.n > L) {
      S.truncated_captions++;
      while (c->words.n > L)
        free(c->words.w[--c->words.n]);
    }
    if (c->held_out)
      S.zero_shot_concepts++;
    else
      S.train_concepts++;
  }
  S.concepts = nc;
  if (S.train_concepts == 0 || nc == 0) {
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: no usable emoji after the join", gpath);
    goto done;
  }

  /* images: [concept][style][D*D*3] */
  pixels = malloc((size_t)nc * 2 * IMG);
  if (!pixels) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory for %d images", 2 * nc);
    goto done;
  }
  for (int i = 0; i < nc; i++)
    for (int s = 0; s < 2; s++) {
      free(file);
      file = join_path(s ? timg : gimg, con[i].image);
      if (!file) {
        st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
        goto done;
      }
      if ((st = ampc_emoji_png_load(file, pixels + ((size_t)i * 2 + (size_t)s) * IMG)) != AMPC_OK)
        goto done;
    }

  /* vocabulary: the words of the training captions, by number of training
   * concepts using them (descending), then by byte order; ids from 2 */
  size_t nall = 0;
  for (int i = 0; i < nc; i++)
    if (!con[i].held_out)
      nall += (size_t)con[i].words.n;
  all = malloc((nall + 1) * sizeof *all);
  voc = malloc((nall + 1) * sizeof *voc);
  if (!all || !voc) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
    goto done;
  }
  nall = 0;
  for (int i = 0; i < nc; i++)
    if (!con[i].held_out)
      for (int k = 0; k < con[i].words.n; k++)
        all[nall++] = con[i].words.w[k];
  qsort(all, nall, sizeof *all, cmp_str);
  for (size_t i = 0; i < nall; i++) {
    if (nvoc > 0 && strcmp(voc[nvoc - 1].word, all[i]) == 0) {
      voc[nvoc - 1].count++;
    } else {
      voc[nvoc].word = all[i];
      voc[nvoc].count = 1;
      nvoc++;
    }
  }
  qsort(voc, (size_t)nvoc, sizeof *voc, cmp_vocab_freq);
  for (int32_t i = 0; i < nvoc; i++)
    voc[i].id = i + 2;

  /* classes: the groups that occur, in group order, numbered from 0 */
  int class_of[N_GROUPS];
  int32_t ncls = 0;
  for (int g = 0; g < N_GROUPS; g++) {
    int seen = 0;
    for (int i = 0; i < nc && !seen; i++)
      seen = con[i].group == g;
    class_of[g] = seen ? ncls++ : -1;
  }

  /* samples: train (google, training concepts), new style (twitter, training
   * concepts), zero-shot (google then twitter, held-out concepts) */
  const int32_t n = 2 * nc;
  size_t text_bytes[3] = {0, 0, 0};
  text_bytes[0] = sizeof "<pad>" + sizeof "<unk>";
  for (int32_t i = 0; i < nvoc; i++)
    text_bytes[0] += strlen(voc[i].word) + 1;
  for (int g = 0; g < N_GROUPS; g++)
    if (class_of[g] >= 0)
      text_bytes[1] += strlen(k_group_names[g]) + 1;
  for (int i = 0; i < nc; i++) {
    size_t len = 0;
    for (int k = 0; k < con[i].words.n; k++)
      len += strlen(con[i].words.w[k]) + 1; /* words and a space or the final NUL */
    text_bytes[2] += 2 * len;
  }
  ampc_dataset d = {0};
  d.n = n;
  d.height = D;
  d.width = D;
  d.channels = 3;
  d.seq_len = L;
  d.vocab = nvoc + 2;
  d.n_classes = ncls;
  char *text[3];
  if (ampc__dataset_check_sizes(&d) != NULL) {
    st = ampc_fail(AMPC_ERR_FORMAT, "emoji prep: dataset sizes out of range");
    goto done;
  }
  if ((st = ampc__dataset_alloc(&d, text_bytes, text)) != AMPC_OK)
    goto done;
  /* string tables */
  char *w = text[0];
  memcpy(w, "<pad>\0<unk>", sizeof "<pad>" + sizeof "<unk>");
  w += sizeof "<pad>" + sizeof "<unk>";
  for (int32_t i = 0; i < nvoc; i++) {
    const size_t l = strlen(voc[i].word) + 1;
    memcpy(w, voc[i].word, l);
    w += l;
  }
  w = text[1];
  for (int g = 0; g < N_GROUPS; g++)
    if (class_of[g] >= 0) {
      const size_t l = strlen(k_group_names[g]) + 1;
      memcpy(w, k_group_names[g], l);
      w += l;
    }
  qsort(voc, (size_t)nvoc, sizeof *voc, cmp_vocab_word); /* for lookups by word */
  if (ampc__split_strings(text[0], text_bytes[0], d.vocab, d.words) != 0 ||
      ampc__split_strings(text[1], text_bytes[1], d.n_classes, d.class_names) != 0) {
    ampc_dataset_free(&d);
    st = ampc_fail(AMPC_ERR_FORMAT, "emoji prep: internal error building the string tables");
    goto done;
  }
  char *cap = text[2];
  int32_t s = 0;
  for (int block = 0; block < 4; block++) {
    const int held = block >= 2, style = block & 1;
    const uint8_t split = block == 0   ? AMPC_SPLIT_TRAIN
                          : block == 1 ? AMPC_SPLIT_NEW_STYLE
                                       : AMPC_SPLIT_ZERO_SHOT;
    for (int i = 0; i < nc; i++) {
      const concept *c = &con[i];
      if (c->held_out != held)
        continue;
      memcpy(d.images + (size_t)s * IMG, pixels + ((size_t)i * 2 + (size_t)style) * IMG, IMG);
      d.label[s] = class_of[c->group];
      d.concept[s] = i;
      d.split[s] = split;
      d.style[s] = (uint8_t)style;
      d.captions[s] = cap;
      for (int k = 0; k < c->words.n; k++) {
        const size_t l = strlen(c->words.w[k]);
        memcpy(cap, c->words.w[k], l);
        cap[l] = k + 1 < c->words.n ? ' ' : '\0';
        cap += l + 1;
        vocab_entry key = {c->words.w[k], 0, 0};
        const vocab_entry *v = bsearch(&key, voc, (size_t)nvoc, sizeof *voc, cmp_vocab_word);
        d.tokens[(size_t)s * L + (size_t)k] = v ? v->id : AMPC_TOKEN_UNK;
      }
      s++;
    }
  }
  *out = d;

done:
  if (stats)
    *stats = S;
  for (int i = 0; i < nc; i++)
    wordlist_free(&con[i].words);
  free(con);
  free(all);
  free(voc);
  free(pixels);
  free(twitter_ok);
  free(idx);
  cJSON_Delete(gj);
  cJSON_Delete(tj);
  cJSON_Delete(bj);
  free(gpath);
  free(tpath);
  free(bpath);
  free(gimg);
  free(timg);
  free(file);
  return st;
}
