/* tests/install_consumer.c: a program built against the installed ampc (see
 * check_install.sh). Exits 0 when the library works as documented. */
#include <ampc/ampc.h>
#include <stdio.h>

int main(void) {
  const float x[3] = {1.0f, 65520.0f, 1e-8f};
  ampc_f16 h[3];
  if (ampc_convert(h, AMPC_F16, x, AMPC_F32, 3) != AMPC_OK) {
    fprintf(stderr, "ampc_convert: %s\n", ampc_last_error());
    return 1;
  }
  if (h[0].bits != 0x3C00 || h[1].bits != 0x7C00 || h[2].bits != 0x0000) {
    fprintf(stderr, "wrong bits %04x %04x %04x\n", h[0].bits, h[1].bits, h[2].bits);
    return 1;
  }
  printf("ampc %s from an installed prefix: ok (%s)\n", AMPC_VERSION_STRING, ampc_convert_isa());
  return 0;
}
