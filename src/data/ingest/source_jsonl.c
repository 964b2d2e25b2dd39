/*
 * src/data/ingest/source_jsonl.c: the JSON Lines reader (one object per line,
 * LLaVA / Hugging Face style; an image folder's metadata.jsonl). Lines are
 * read with getline and parsed with cJSON; blank lines are skipped; a line
 * that is not one JSON object, or whose image or caption is missing or not a
 * string, is a BAD_ROW item. A label may be a string or a number.
 */
#define _POSIX_C_SOURCE 200809L /* getline */

#include "data/ingest/source_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct src_jsonl {
  FILE *f;
  char *line;
  size_t line_cap;
  int64_t line_no;
  cJSON *doc; /* the last line's object (its strings back the last item) */
  char num[48];
  src_buf why;
};

ampc_status src_jsonl_open(ampc_source *s, const char *path) {
  src_jsonl *j = calloc(1, sizeof *j);
  if (!j)
    return ampc_fail(AMPC_ERR_NOMEM, "out of memory");
  s->jsonl = j;
  if (!(j->f = fopen(path, "rb")))
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open", path);
  return AMPC_OK;
}

static bool blank(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strchr(" \t\r\n\f\v", p[i]) || p[i] == 0)
      return false;
  return true;
}

ampc_status src_jsonl_next(ampc_source *s, ampc_source_item *it, bool *done) {
  src_jsonl *j = s->jsonl;
  cJSON_Delete(j->doc);
  j->doc = NULL;
  for (;;) {
    errno = 0;
    const ssize_t got = getline(&j->line, &j->line_cap, j->f);
    if (got < 0) {
      if (ferror(j->f))
        return ampc_fail(errno == ENOMEM ? AMPC_ERR_NOMEM : AMPC_ERR_IO, "%s: read error",
                         s->list_path);
      *done = true;
      return AMPC_OK;
    }
    j->line_no++;
    char *p = j->line;
    size_t n = (size_t)got;
    if (j->line_no == 1 && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
      p += 3, n -= 3; /* a UTF-8 byte order mark */
    if (blank(p, n))
      continue;
    src_row r = {.line = j->line_no};
    const char *end = NULL;
    j->doc = cJSON_ParseWithLengthOpts(p, n, &end, false);
    if (!j->doc || !cJSON_IsObject(j->doc) || !end || !blank(end, n - (size_t)(end - p))) {
      r.bad = "not one JSON object";
      return src_emit_row(s, &r, it);
    }
    const cJSON *img = cJSON_GetObjectItemCaseSensitive(j->doc, s->image_key);
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(j->doc, s->caption_key);
    if (!cap && s->caption_alt)
      cap = cJSON_GetObjectItemCaseSensitive(j->doc, s->caption_alt);
    const cJSON *lab = s->label_key ? cJSON_GetObjectItemCaseSensitive(j->doc, s->label_key) : NULL;
    if (cJSON_IsString(img))
      r.image = img->valuestring, r.image_len = strlen(img->valuestring);
    if (cJSON_IsString(cap))
      r.caption = cap->valuestring, r.caption_len = strlen(cap->valuestring);
    if (cJSON_IsString(lab))
      r.label = lab->valuestring;
    else if (cJSON_IsNumber(lab)) {
      const double v = lab->valuedouble;
      /* the range first: converting a double outside long long's is undefined */
      if (v > -1e18 && v < 1e18 && v == (double)(long long)v)
        snprintf(j->num, sizeof j->num, "%lld", (long long)v);
      else
        snprintf(j->num, sizeof j->num, "%.17g", v);
      r.label = j->num;
    }
    if (r.label)
      r.label_len = strlen(r.label);
    ampc_status st = AMPC_OK;
    if (!img)
      st = src_buf_printf(&j->why, "no key \"%s\"", s->image_key);
    else if (!r.image)
      st = src_buf_printf(&j->why, "\"%s\" is not a string", s->image_key);
    else if (!cap && s->caption_alt)
      st = src_buf_printf(&j->why, "no key \"%s\" or \"%s\"", s->caption_key, s->caption_alt);
    else if (!cap)
      st = src_buf_printf(&j->why, "no key \"%s\"", s->caption_key);
    else if (!r.caption)
      st = src_buf_printf(&j->why, "\"%s\" is not a string", cap->string);
    else if (lab && !r.label)
      st = src_buf_printf(&j->why, "\"%s\" is not a string or a number", s->label_key);
    else
      j->why.n = 0;
    AMPC_TRY(st);
    if (j->why.n)
      r.bad = j->why.p;
    return src_emit_row(s, &r, it);
  }
}

void src_jsonl_close(src_jsonl *j) {
  if (!j)
    return;
  if (j->f)
    fclose(j->f);
  cJSON_Delete(j->doc);
  free(j->line);
  src_buf_free(&j->why);
  free(j);
}
