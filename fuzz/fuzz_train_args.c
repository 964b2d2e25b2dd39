/*
 * fuzz/fuzz_train_args.c: the argument parser of `ampc train`
 * (train_parse_args in tools/ampc/cmd_train.c): argv is the input split on
 * NUL bytes, after argv[0] = "train". Nothing is trained; run it with
 * -close_fd_mask=2 to silence the usage messages. An accepted configuration must satisfy what the
 * training loops rely on.
 */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "train.h"

enum { MAX_ARGS = 64 };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = (char *)"train";
  for (size_t i = 0; i <= size && argc < MAX_ARGS + 1;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  train_args a;
  if (train_parse_args(argc, argv, &a) == 0) {
    /* what the loops divide by or allocate from */
    if (a.steps < 1 || a.batch < 1 || a.micro_batches < 1 || a.batch % a.micro_batches != 0 ||
        a.log_every < 1 || a.save_every < 0 || a.eval_every < 0 || !a.model || !a.data)
      abort();
    if (!strcmp(a.model, "mlp") &&
        (a.batch > a.ntrain || a.mc.in < 1 || a.mc.hidden < 1 || a.mc.classes < 2))
      abort();
    if (!(a.opt.lr >= 0.0f))
      abort();
  }
  free(buf);
  return 0;
}
