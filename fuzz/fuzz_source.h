/*
 * fuzz/fuzz_source.h: what the source harnesses (fuzz_csv.c, fuzz_jsonl.c,
 * fuzz_tar.c) share: read a whole source as a pack would, checking the
 * promises of src/data/ingest/source.h on every item.
 */
#ifndef AMPC_FUZZ_SOURCE_H
#define AMPC_FUZZ_SOURCE_H

#include <stdlib.h>
#include <string.h>

#include "data/ingest/source.h"

/* Open `path` as `kind` with `o` and read every item; abort() on a broken
 * promise (a NULL string, a fault without a message, image bytes with a
 * fault, an out-of-range fault). Returns a sum of lengths (to be ignored). */
static size_t fuzz_source_drain(const char *path, ampc_source_options o, ampc_source_kind kind) {
  o.force_kind = true;
  o.kind = kind;
  ampc_source *s = NULL;
  if (ampc_source_open(&s, path, &o) != AMPC_OK)
    return 0;
  size_t sum = 0;
  for (;;) {
    ampc_source_item it;
    bool done = false;
    if (ampc_source_next(s, &it, &done) != AMPC_OK || done)
      break;
    if (!it.key || !it.where || !it.caption || !it.fault_msg)
      abort();
    if (it.fault < AMPC_FAULT_NONE || it.fault >= AMPC_FAULT_COUNT)
      abort();
    if ((it.fault != AMPC_FAULT_NONE) != (it.fault_msg[0] != 0))
      abort();
    if (it.fault != AMPC_FAULT_NONE && it.image)
      abort();
    if (!it.image && it.image_size)
      abort();
    if (it.fault == AMPC_FAULT_NONE && !ampc_utf8_valid(it.caption, strlen(it.caption)))
      abort();
    sum += strlen(it.key) + strlen(it.where) + strlen(it.caption) + strlen(it.fault_msg);
    sum += strlen(ampc_sample_fault_name(it.fault));
    if (it.label)
      sum += strlen(it.label);
    if (it.image && it.image_size)
      sum += it.image[0] + it.image[it.image_size - 1];
  }
  ampc_source_close(s);
  return sum;
}

#endif
