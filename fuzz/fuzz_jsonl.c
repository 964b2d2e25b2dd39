/*
 * fuzz/fuzz_jsonl.c: the JSON Lines reader of a user's pairs (src/data/
 * ingest/source_jsonl.c on cJSON): line splitting, blank lines, objects,
 * keys, the caption fallback, numeric labels. The input is the .jsonl file,
 * read headers only (the image paths it names are not opened) with the
 * default keys and a label key "label".
 */
#include "fuzz.h"
#include "fuzz_source.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_memfile(data, size);
  const size_t sum = fuzz_source_drain(
      path, (ampc_source_options){.headers_only = true, .label_key = "label"}, AMPC_SOURCE_JSONL);
  return (int)(sum & 0u);
}
