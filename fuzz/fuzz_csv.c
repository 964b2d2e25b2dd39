/*
 * fuzz/fuzz_csv.c: the CSV reader of a user's pairs (src/data/ingest/
 * source_csv.c on libcsv): the header, the named columns, quoting, line
 * tracking, the row queue. The input is the CSV file; it is read twice, with
 * the default columns (filepath, title) and with custom ones (a, b, label),
 * headers only (the image paths it names are not opened).
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
  size_t sum =
      fuzz_source_drain(path, (ampc_source_options){.headers_only = true}, AMPC_SOURCE_CSV);
  sum += fuzz_source_drain(
      path,
      (ampc_source_options){
          .headers_only = true, .image_key = "a", .caption_key = "b", .label_key = "label"},
      AMPC_SOURCE_CSV);
  return (int)(sum & 0u);
}
