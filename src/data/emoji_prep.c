/*
 * src/data/emoji_prep.c: builds the emoji image-text dataset from the unpacked
 * npm packages emoji-datasource-google, emoji-datasource-twitter (images and
 * the emoji list) and emojibase-data (CLDR labels, keywords and groups). The
 * rules (join, captions, vocabulary, classes, splits, sample order) are
 * documented in docs/DATA.md; `ampc data emoji` fetches the packages and
 * calls ampc_emoji_prepare. PNG decoding is src/data/emoji_png.c, the
 * captions' word splitting src/data/caption_words.c.
 *
 * Deterministic: the result depends only on the package contents (file order
 * of emoji.json, fixed hash for the split, sorts with total orders).
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

enum { N_GROUPS = 10, GROUP_COMPONENT = 2 };
/* CLDR / emojibase group keys, indexed by emojibase's `group` number */
static const char *const k_group_names[N_GROUPS] = {
    "smileys-emotion", "people-body", "component", "animals-nature", "food-drink",
    "travel-places",   "activities",  "objects",   "symbols",        "flags"};

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
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
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
  const char *hexcode; /* the emojibase key (upper case), inside the index */
  int group;
  int held_out;
  ampc__wordlist words; /* caption words, deduplicated, truncated to the sequence length */
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

/* Which kind of package a style comes from. */
typedef struct style_kind {
  const char *name;
  int datasource; /* 1: emoji-datasource-<name> (emoji.json, img/<name>/64/<image>);
                   * 0: openmoji, rendered to 64/<HEXCODE>.png by `ampc data emoji` */
} style_kind;
static const style_kind k_styles[] = {
    {"google", 1}, {"twitter", 1}, {"apple", 1}, {"facebook", 1}, {"openmoji", 0}};
enum { N_KNOWN_STYLES = (int)(sizeof k_styles / sizeof k_styles[0]) };

static const style_kind *find_kind(const char *name) {
  for (int k = 0; name && k < N_KNOWN_STYLES; k++)
    if (strcmp(k_styles[k].name, name) == 0)
      return &k_styles[k];
  return NULL;
}

static int file_exists(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (fp)
    fclose(fp);
  return fp != NULL;
}

/* per-style state of the preparation */
typedef struct style_src {
  const style_kind *kind;
  const char *dir;
  char *json_path, *img_dir;
  cJSON *json;          /* emoji.json of a datasource package */
  const char **has_img; /* sorted `unified` codes with has_img_<style> */
  int n_has;
} style_src;

ampc_status ampc_emoji_prepare_styles(const ampc_emoji_source *src, int n_src,
                                      const char *emojibase_dir, int held_out, ampc_dataset *out,
                                      ampc_emoji_prep_stats *stats) {
  enum { D = AMPC_EMOJI_SIZE, L = AMPC_EMOJI_SEQ_LEN, IMG = D * D * 3 };
  if (!src || !emojibase_dir || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_emoji_prepare: NULL argument");
  memset(out, 0, sizeof *out);
  if (n_src < 1 || n_src > AMPC_EMOJI_MAX_STYLES || held_out < -1 || held_out >= n_src)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "emoji prep: %d styles (1 to %d) with held-out style %d",
                     n_src, AMPC_EMOJI_MAX_STYLES, held_out);
  ampc_emoji_prep_stats S;
  memset(&S, 0, sizeof S);
  ampc_status st = AMPC_OK;
  style_src ss[AMPC_EMOJI_MAX_STYLES];
  memset(ss, 0, sizeof ss);
  int list = -1; /* the datasource package whose emoji.json lists the emoji */
  for (int k = 0; k < n_src; k++) {
    ss[k].kind = find_kind(src[k].style);
    ss[k].dir = src[k].dir;
    if (!ss[k].kind || !src[k].dir)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "emoji prep: unknown style '%s' (google, twitter, apple, facebook, "
                       "openmoji) or no directory",
                       src[k].style ? src[k].style : "(null)");
    for (int j = 0; j < k; j++)
      if (ss[j].kind == ss[k].kind)
        return ampc_fail(AMPC_ERR_INVALID_ARG, "emoji prep: style '%s' is given twice",
                         src[k].style);
    if (ss[k].kind->datasource && list < 0)
      list = k;
  }
  if (list < 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "emoji prep: at least one emoji-datasource style (google, twitter, apple, "
                     "facebook) is needed: its emoji.json lists the emoji");
  cJSON *bj = NULL;
  char *bpath = NULL, *file = NULL;
  base_entry *idx = NULL;
  concept *con = NULL;
  uint8_t *pixels = NULL;
  vocab_entry *voc = NULL;
  const char **all = NULL;
  int nc = 0;
  size_t nidx = 0;
  int32_t nvoc = 0;
  const int NS = n_src;

  bpath = join_path(emojibase_dir, "en/data.json");
  if (!bpath) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
    goto done;
  }
  for (int k = 0; k < NS; k++) {
    style_src *x = &ss[k];
    if (x->kind->datasource) {
      char sub[64];
      snprintf(sub, sizeof sub, "img/%s/64", x->kind->name);
      x->json_path = join_path(x->dir, "emoji.json");
      x->img_dir = join_path(x->dir, sub);
    } else {
      x->img_dir = join_path(x->dir, "64");
    }
    if ((x->kind->datasource && !x->json_path) || !x->img_dir) {
      st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
      goto done;
    }
    if (!x->kind->datasource)
      continue;
    if ((st = read_json(x->json_path, &x->json)) != AMPC_OK)
      goto done;
    /* the emoji that this package has an image for */
    char flag[64];
    snprintf(flag, sizeof flag, "has_img_%s", x->kind->name);
    x->has_img = calloc((size_t)cJSON_GetArraySize(x->json) + 1, sizeof *x->has_img);
    if (!x->has_img) {
      st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
      goto done;
    }
    for (cJSON *e = x->json->child; e; e = e->next) {
      const char *u = str_field(e, "unified");
      if (u && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, flag)))
        x->has_img[x->n_has++] = u;
    }
    qsort(x->has_img, (size_t)x->n_has, sizeof *x->has_img, cmp_str);
  }
  if ((st = read_json(bpath, &bj)) != AMPC_OK)
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

  /* the concepts, in the file order of the listing package's emoji.json */
  const cJSON *gj = ss[list].json;
  const char *gpath = ss[list].json_path;
  S.datasource_entries = cJSON_GetArraySize(gj);
  con = calloc((size_t)S.datasource_entries + 1, sizeof *con);
  if (!con) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
    goto done;
  }
  int entry = 0;
  for (const cJSON *e = gj->child; e; e = e->next, entry++) {
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
    /* an image in every style */
    int missing = -1;
    for (int k = 0; k < NS && missing < 0; k++) {
      const style_src *x = &ss[k];
      if (x->kind->datasource) {
        if (!bsearch(&u, x->has_img, (size_t)x->n_has, sizeof *x->has_img, cmp_str))
          missing = k;
      } else {
        char name[KEY_MAX + 8];
        snprintf(name, sizeof name, "%s.png", b->key);
        free(file);
        if (!(file = join_path(x->img_dir, name))) {
          st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
          goto done;
        }
        if (!file_exists(file))
          missing = k;
      }
    }
    if (missing >= 0) {
      S.skipped_no_image++;
      S.missing_in_style[missing]++;
      continue;
    }
    concept *c = &con[nc++];
    c->unified = u;
    c->image = image;
    c->hexcode = b->key;
    c->group = group;
    c->held_out = fnv1a(u) % 10u == 0;
    /* caption: label words, then tag words, deduplicated in order */
    const char *label = str_field(b->e, "label");
    if (!label) {
      st = ampc_fail(AMPC_ERR_FORMAT, "%s: %s has no \"label\"", bpath, b->key);
      goto done;
    }
    int oom = ampc__add_words(&c->words, label);
    const cJSON *tags = cJSON_GetObjectItemCaseSensitive(b->e, "tags");
    const cJSON *t;
    cJSON_ArrayForEach(t, tags) {
      if (cJSON_IsString(t))
        oom |= ampc__add_words(&c->words, t->valuestring);
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
  S.styles = NS;
  if (S.train_concepts == 0 || nc == 0) {
    st = ampc_fail(AMPC_ERR_FORMAT, "%s: no usable emoji after the join", gpath);
    goto done;
  }

  /* images: [concept][style][D*D*3] */
  pixels = malloc((size_t)nc * (size_t)NS * IMG);
  if (!pixels) {
    st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory for %d images", NS * nc);
    goto done;
  }
  for (int i = 0; i < nc; i++)
    for (int k = 0; k < NS; k++) {
      char name[KEY_MAX + 8];
      snprintf(name, sizeof name, "%s.png", con[i].hexcode);
      free(file);
      file = join_path(ss[k].img_dir, ss[k].kind->datasource ? con[i].image : name);
      if (!file) {
        st = ampc_fail(AMPC_ERR_NOMEM, "emoji prep: out of memory");
        goto done;
      }
      if ((st = ampc_emoji_png_load(file, pixels + ((size_t)i * (size_t)NS + (size_t)k) * IMG)) !=
          AMPC_OK)
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

  /* samples: for each style in the given order, its images of the training
   * concepts (split train, or new style for the held-out style); then for each
   * style its images of the held-out concepts (zero-shot) */
  const int32_t n = NS * nc;
  size_t text_bytes[AMPC__DS_TEXTS] = {0, 0, 0, 0};
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
    text_bytes[2] += (size_t)NS * len;
  }
  for (int k = 0; k < NS; k++)
    text_bytes[3] += strlen(ss[k].kind->name) + 1;
  ampc_dataset d = {0};
  d.n = n;
  d.height = D;
  d.width = D;
  d.channels = 3;
  d.seq_len = L;
  d.vocab = nvoc + 2;
  d.n_classes = ncls;
  d.n_styles = NS;
  char *text[AMPC__DS_TEXTS];
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
  w = text[3];
  for (int k = 0; k < NS; k++) {
    const size_t l = strlen(ss[k].kind->name) + 1;
    memcpy(w, ss[k].kind->name, l);
    w += l;
  }
  qsort(voc, (size_t)nvoc, sizeof *voc, cmp_vocab_word); /* for lookups by word */
  if (ampc__split_strings(text[0], text_bytes[0], d.vocab, d.words) != 0 ||
      ampc__split_strings(text[1], text_bytes[1], d.n_classes, d.class_names) != 0 ||
      ampc__split_strings(text[3], text_bytes[3], d.n_styles, d.style_names) != 0) {
    ampc_dataset_free(&d);
    st = ampc_fail(AMPC_ERR_FORMAT, "emoji prep: internal error building the string tables");
    goto done;
  }
  char *cap = text[2];
  int32_t s = 0;
  for (int block = 0; block < 2 * NS; block++) {
    const int held = block >= NS, style = block % NS;
    const uint8_t split = held                ? AMPC_SPLIT_ZERO_SHOT
                          : style == held_out ? AMPC_SPLIT_NEW_STYLE
                                              : AMPC_SPLIT_TRAIN;
    for (int i = 0; i < nc; i++) {
      const concept *c = &con[i];
      if (c->held_out != held)
        continue;
      memcpy(d.images + (size_t)s * IMG, pixels + ((size_t)i * (size_t)NS + (size_t)style) * IMG,
             IMG);
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
    ampc__wordlist_free(&con[i].words);
  free(con);
  free(all);
  free(voc);
  free(pixels);
  free(idx);
  for (int k = 0; k < NS; k++) {
    free(ss[k].has_img);
    cJSON_Delete(ss[k].json);
    free(ss[k].json_path);
    free(ss[k].img_dir);
  }
  cJSON_Delete(bj);
  free(bpath);
  free(file);
  return st;
}

ampc_status ampc_emoji_prepare(const char *google_dir, const char *twitter_dir,
                               const char *emojibase_dir, ampc_dataset *out,
                               ampc_emoji_prep_stats *stats) {
  if (!google_dir || !twitter_dir || !emojibase_dir || !out)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_emoji_prepare: NULL argument");
  const ampc_emoji_source src[2] = {{"google", google_dir}, {"twitter", twitter_dir}};
  return ampc_emoji_prepare_styles(src, 2, emojibase_dir, 1, out, stats);
}
