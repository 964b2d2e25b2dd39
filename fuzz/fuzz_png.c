/*
 * fuzz/fuzz_png.c: the emoji PNG decoder of `ampc data emoji`
 * (ampc_emoji_png_load: libpng with every transform to 8-bit RGBA, 64x64
 * only, composite over white, 2x2 downsample). The input is served through a
 * memfd, as the decoder takes a path.
 */
#include "fuzz.h"

#include "ampc/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t out[AMPC_EMOJI_SIZE * AMPC_EMOJI_SIZE * 3];
  (void)ampc_emoji_png_load(fuzz_memfile(data, size), out);
  return 0;
}
