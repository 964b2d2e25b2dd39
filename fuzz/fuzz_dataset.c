/*
 * fuzz/fuzz_dataset.c: the dataset file reader (ampc_dataset_load_mem, the
 * code under ampc_dataset_load and `--data FILE`). An accepted dataset has
 * every array read, so sizes that escaped the checks would show up under
 * AddressSanitizer.
 */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "ampc/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ampc_dataset d;
  if (ampc_dataset_load_mem(data, size, "fuzz.ampcds", &d) != AMPC_OK)
    return 0;
  unsigned sum = 0;
  const size_t img = (size_t)d.height * (size_t)d.width * (size_t)d.channels;
  for (int32_t i = 0; i < d.n; i++) {
    if (img)
      sum += d.images[(size_t)i * img + img - 1];
    sum += (unsigned)d.label[i] + (unsigned)d.split[i] + (unsigned)d.concept[i] + d.style[i];
    if (d.captions)
      sum += (unsigned)strlen(d.captions[i]);
    for (int32_t t = 0; t < d.seq_len; t++)
      if (d.tokens[(size_t)i * (size_t)d.seq_len + t] >= d.vocab)
        abort(); /* the loader promises token ids < vocab */
    if (d.label[i] < 0 || d.label[i] >= d.n_classes)
      abort(); /* and labels < n_classes */
  }
  for (int32_t v = 0; d.words && v < d.vocab; v++)
    sum += (unsigned)strlen(d.words[v]);
  for (int32_t c = 0; d.class_names && c < d.n_classes; c++)
    sum += (unsigned)strlen(d.class_names[c]);
  ampc_dataset_free(&d);
  return (int)(sum & 0u);
}
