/* bench/gpu/minimal/cblas.h: the part of CBLAS that src/kernels/gemm.c
 * names, for the GPU check's build without OpenBLAS (no_openblas.c). */
#ifndef AMPC_MINIMAL_CBLAS_H
#define AMPC_MINIMAL_CBLAS_H
typedef enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 } CBLAS_ORDER;
typedef enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 } CBLAS_TRANSPOSE;
void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
                 float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                 float *c, int ldc);
#endif
