/*
 * fuzz/fuzz_diag_log.c: the metrics-log reader of `ampc diagnose`
 * (ampc_diag_read_log) and the verdicts on whatever it accepts: an accepted
 * log must give at least one verdict and a JSON report.
 */
#include "fuzz.h"

#include <stdlib.h>

#include "ampc/diag.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ampc_diag *d = NULL;
  if (ampc_diag_read_log(fuzz_memfile(data, size), &d) != AMPC_OK)
    return 0;
  ampc_verdict v[AMPC_VERDICT_COUNT];
  if (ampc_diag_verdicts(d, v, AMPC_VERDICT_COUNT) < 1)
    abort(); /* there is always a verdict, if only "healthy" */
  char *json = ampc_diag_json(d);
  if (!json)
    abort();
  free(json);
  for (int b = 0; b < AMPC_BRANCH_COUNT; b++)
    if (!ampc_diag_grad_stats(d, b))
      abort();
  ampc_diag_free(d);
  return 0;
}
