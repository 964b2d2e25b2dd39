/*
 * src/cuda/cuda_stub.c: ampc/cuda.h in a build without CUDA (AMPC_CUDA=OFF,
 * or no nvcc): no devices, and every call says so.
 */
#include "cuda/cuda_impl.h"
#include "internal.h"

static const char k_reason[] = "ampc was built without CUDA (AMPC_CUDA=OFF or no nvcc found)";

static ampc_status no_cuda(const char *fn) {
  return ampc_fail(AMPC_ERR_UNSUPPORTED, "%s: %s", fn, k_reason);
}

int ampc_cuda_built(void) { return 0; }
int ampc_cuda_device_count(void) { return 0; }
const char *ampc_cuda_unavailable_reason(void) { return k_reason; }

ampc_status ampc_cuda_device_info_get(int device, ampc_cuda_device_info *out) {
  (void)device, (void)out;
  return no_cuda("ampc_cuda_device_info_get");
}
ampc_status ampc_cuda_create(int device, size_t workspace_bytes, ampc_cuda_ctx **out) {
  (void)device, (void)workspace_bytes;
  if (out)
    *out = NULL;
  return no_cuda("ampc_cuda_create");
}
void ampc_cuda_destroy(ampc_cuda_ctx *ctx) { (void)ctx; }
ampc_status ampc_cuda_malloc(ampc_cuda_ctx *ctx, size_t bytes, void **dptr) {
  (void)ctx, (void)bytes;
  if (dptr)
    *dptr = NULL;
  return no_cuda("ampc_cuda_malloc");
}
void ampc_cuda_free(ampc_cuda_ctx *ctx, void *dptr) { (void)ctx, (void)dptr; }
ampc_status ampc_cuda_to_device(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx, (void)dst, (void)src, (void)bytes;
  return no_cuda("ampc_cuda_to_device");
}
ampc_status ampc_cuda_to_host(ampc_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx, (void)dst, (void)src, (void)bytes;
  return no_cuda("ampc_cuda_to_host");
}
ampc_status ampc_cuda_synchronize(ampc_cuda_ctx *ctx) {
  (void)ctx;
  return no_cuda("ampc_cuda_synchronize");
}
ampc_status ampc_cuda_fill_uniform(ampc_cuda_ctx *ctx, void *dst, ampc_dtype dt, int64_t count,
                                   float lo, float hi, uint64_t seed) {
  (void)ctx, (void)dst, (void)dt, (void)count, (void)lo, (void)hi, (void)seed;
  return no_cuda("ampc_cuda_fill_uniform");
}
ampc_status ampc_cuda_gemm(ampc_cuda_ctx *ctx, const ampc_cuda_gemm_args *args) {
  (void)ctx, (void)args;
  return no_cuda("ampc_cuda_gemm");
}
void ampc_cuda_gemm_cache_stats(const ampc_cuda_ctx *ctx, int64_t *queries, int *entries) {
  (void)ctx;
  if (queries)
    *queries = 0;
  if (entries)
    *entries = 0;
}
ampc_status ampc_cuda_timer_start(ampc_cuda_ctx *ctx) {
  (void)ctx;
  return no_cuda("ampc_cuda_timer_start");
}
ampc_status ampc_cuda_timer_stop(ampc_cuda_ctx *ctx, float *ms) {
  (void)ctx, (void)ms;
  return no_cuda("ampc_cuda_timer_stop");
}
ampc_status ampc_cuda_load_cublaslt(size_t *version) {
  if (version)
    *version = 0;
  return no_cuda("ampc_cuda_load_cublaslt");
}
