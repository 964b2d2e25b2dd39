/* bench/gpu/minimal/no_openblas.c: the GPU check's build has no OpenBLAS.
 * ampc_gemm sends F32 GEMMs to OpenBLAS only with AMPC_GEMM_F32=openblas or
 * on a CPU without AVX2, which the check does not use; if it ever happens,
 * say so and stop rather than compute something else. */
#include <stdio.h>
#include <stdlib.h>

#include "cblas.h"

void openblas_set_num_threads(int num_threads);

void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
                 float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                 float *c, int ldc) {
  (void)order, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
  (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
  fprintf(stderr, "gpu check build: cblas_sgemm called, but this build has no OpenBLAS\n");
  abort();
}
void openblas_set_num_threads(int num_threads) { (void)num_threads; }
