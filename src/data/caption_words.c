/*
 * src/data/caption_words.c: the tokenizer's word splitting for emoji
 * captions: UTF-8 decoded, maximal runs of word characters, lower-cased,
 * collected without repeats (the vocabulary is built from these lists in
 * src/data/emoji_prep.c).
 */
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

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

void ampc__wordlist_free(ampc__wordlist *l) {
  for (int i = 0; i < l->n; i++)
    free(l->w[i]);
  free(l->w);
  memset(l, 0, sizeof *l);
}

/* Append word (len bytes) unless the list already has it. -1: no memory. */
static int wordlist_add(ampc__wordlist *l, const char *word, size_t len) {
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
int ampc__add_words(ampc__wordlist *l, const char *text) {
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
