/*
 * fuzz/fuzz_image.c: the user-image decoder of the dataset packer
 * (ampc_image_square: sniffing, TurboJPEG with DCT scaling, libpng from
 * memory, libwebp, the pixel limit, the exact area/bilinear resampler) on
 * arbitrary bytes, to a 32x32 tile. The pixel limit is lowered to 4096 x 4096
 * so that one input stays fast; the limit check itself is what is exercised.
 */
#include "fuzz.h"

#include "data/ingest/image.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t out[32 * 32 * 3];
  ampc_image_info info;
  ampc_image_error why;
  (void)ampc_image_square(data, size, "fuzz", 32, 4096ll * 4096, out, &info, &why);
  return 0;
}
