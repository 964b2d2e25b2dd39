/*
 * fuzz/fuzz_safetensors.c: the safetensors reader (ampc_safetensors_read_mem)
 * and, for inputs it accepts, the checkpoint loader (ampc_trainer_load) into a
 * tiny MLP trainer (in 4, hidden 4, classes 2; 16-mixed, AdamW: the layout of
 * `ampc train --model mlp --in 4 --hidden 4 --classes 2`).
 * Every tensor byte of an accepted file is read, so an offset that escaped
 * the checks would show up under AddressSanitizer. The same bytes are then
 * read as `ampc inspect` does (AMPC_ST_ANY_DTYPE: every safetensors dtype),
 * and every tensor's values counted (ampc_inspect_values).
 */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "ampc/ampc.h"

static ampc_trainer g_T;
static int g_have_trainer;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  ampc_mlp_config c = {.in = 4, .hidden = 4, .classes = 2};
  ampc_param_spec specs[AMPC_MLP_NPARAMS];
  ampc_amp_config amp;
  const ampc_optim_config opt = ampc_optim_adamw_defaults();
  if (ampc_mlp_specs(&c, specs) != AMPC_OK ||
      ampc_amp_config_preset(AMPC_PRECISION_16_MIXED, &amp) != AMPC_OK ||
      ampc_trainer_init(&g_T, &amp, &opt, specs, AMPC_MLP_NPARAMS, 1) != AMPC_OK)
    abort();
  g_have_trainer = 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ampc_safetensors *f = NULL;
  if (ampc_safetensors_read_mem(data, size, "fuzz.safetensors", &f) != AMPC_OK)
    return 0;
  unsigned sum = 0;
  const int n = ampc_safetensors_count(f);
  for (int i = 0; i < n; i++) {
    const ampc_st_tensor *t = ampc_safetensors_tensor(f, i);
    const unsigned char *p = t->data;
    for (size_t k = 0; k < t->nbytes; k++)
      sum += p[k];
    if (ampc_safetensors_find(f, t->name) != t)
      abort(); /* names are unique: find must return this very tensor */
  }
  (void)ampc_safetensors_meta(f, "ampc.step");
  (void)ampc_safetensors_meta(f, "ampc.config");
  ampc_safetensors_free(f);
  /* every dtype of the format, as `ampc inspect` reads a file, and its counts */
  if (ampc_safetensors_read_mem_ex(data, size, "fuzz.safetensors", AMPC_ST_ANY_DTYPE, &f) ==
      AMPC_OK) {
    static ampc_inspect_stats st;
    for (int i = 0; i < ampc_safetensors_count(f); i++) {
      const ampc_st_tensor *t = ampc_safetensors_tensor(f, i);
      if (t->elem_size == 0 || t->nbytes % t->elem_size != 0)
        abort(); /* the reader checked the byte count against the shape */
      memset(&st, 0, sizeof st);
      if (ampc_inspect_values(&st, t->data, t->dtype_name, t->nbytes / t->elem_size, AMPC_F16,
                              65536.0) == AMPC_OK) {
        int lo, hi;
        (void)ampc_inspect_scale_range(&st, AMPC_F8_E4M3, 1e-3, &lo, &hi);
        if (st.count != t->nbytes / t->elem_size)
          abort();
      }
    }
    ampc_safetensors_free(f);
  }
  if (g_have_trainer)
    (void)ampc_trainer_load(&g_T, fuzz_memfile(data, size));
  return (int)(sum & 0u);
}
