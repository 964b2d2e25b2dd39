/*
 * fuzz/fuzz_tar.c: the WebDataset reader of a user's pairs (src/data/ingest/
 * source_tar.c on libarchive): member grouping by key, image / caption /
 * label members, size limits, truncated and corrupt shards. The input is
 * one shard (a tar, or a compressed tar), read with its image bytes and a
 * label extension "cls".
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
  const size_t sum =
      fuzz_source_drain(path, (ampc_source_options){.label_key = "cls"}, AMPC_SOURCE_WEBDATASET);
  return (int)(sum & 0u);
}
