/* tests/install_consumer.c: a program built against the installed ampc (see
 * check_install.sh). Exits 0 when the library works as documented. */
#include <ampc/ampc.h>
#include <stdio.h>
#include <stdlib.h>

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
  /* the engine (pulls in OpenBLAS, OpenMP and cJSON through the .pc file) */
  ampc_amp_config amp;
  ampc_optim_config opt = ampc_optim_adamw_defaults();
  ampc_param_spec spec = {"w", 1, {3}, AMPC_BRANCH_HEADS, AMPC_INIT_ONES, 0.0f, 0};
  ampc_trainer t;
  if (ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp) != AMPC_OK ||
      ampc_trainer_init(&t, &amp, &opt, &spec, 1, 1) != AMPC_OK) {
    fprintf(stderr, "trainer: %s\n", ampc_last_error());
    return 1;
  }
  char *cfg = ampc_trainer_config_json(&t);
  if (!cfg) {
    fprintf(stderr, "no config json\n");
    return 1;
  }
  free(cfg);
  ampc_trainer_free(&t);
  printf("ampc %s from an installed prefix: ok (%s)\n", AMPC_VERSION_STRING, ampc_convert_isa());
  return 0;
}
