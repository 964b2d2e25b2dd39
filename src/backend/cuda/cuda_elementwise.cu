/*
 * src/backend/cuda/cuda_elementwise.cu: the residual add of ampc/nn.h (src/nn/elementwise.c) on
 * the GPU (cuda_nn.h says what matches the CPU bit for bit).
 *
 * Shapes: element-wise kernels are grid-stride loops of 256-thread blocks;
 * row kernels give each row one warp (8 rows a block), the lanes striding
 * over the row and a butterfly (__shfl_xor_sync) combining their sums, so a
 * row's result does not depend on the grid. Built with --fmad=false.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

using namespace ampc_cu;

namespace {

/* Generic: I int64_t, AT = BT = YT = -1; typed: the dtypes as constants and
 * 32-bit indices where every index fits (cuda_common.cuh) */
template <typename I, int AT, int BT, int YT>
__global__ void add_k(I n, const void *a, int adt_, const void *b, int bdt_, void *y, int ydt_,
                      dev_stats *ds) {
  const int adt = TDT(AT, adt_), bdt = TDT(BT, bdt_), ydt = TDT(YT, ydt_);
  lstats ls(ds);
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const float v = ld(a, adt, i) + ld(b, bdt, i);
    const uint32_t o = st(y, ydt, i, v);
    if (ds)
      ls.add(v, ydt, o);
  }
  ls.flush(ds);
}

} // namespace

extern "C" {

ampc_status ampc_cuda_add_forward(int64_t n, const void *a, ampc_dtype adt, const void *b,
                                  ampc_dtype bdt, void *y, ampc_dtype ydt,
                                  ampc_round_stats *stats) {
  const char *fn = "ampc_cuda_add_forward";
  CU_CHECK_POS(fn, n);
  CU_CHECK_PTR(fn, a);
  CU_CHECK_PTR(fn, b);
  CU_CHECK_PTR(fn, y);
  CU_CHECK_DT(fn, adt);
  CU_CHECK_DT(fn, bdt);
  CU_CHECK_DT(fn, ydt);
  CU_BEGIN(fn);
  STATS_BEGIN(stats);
  /* the residual stream plus an activation (forward), gradients (backward) */
  if (!(ampc_cu_typed() && n < ((int64_t)1 << 31) &&
        typed_pick(
            adt, bdt, ydt,
            [&](auto t) {
              using T = decltype(t);
              add_k<uint32_t, T::a, T::b, T::c>
                  <<<grid_for(n), THREADS, 0, strm>>>((uint32_t)n, a, adt, b, bdt, y, ydt, dst);
            },
            dts<0, 0, 0>{}, dts<0, 1, 0>{}, dts<0, 2, 0>{}, dts<1, 1, 1>{}, dts<2, 2, 2>{})))
    add_k<int64_t, -1, -1, -1><<<grid_for(n), THREADS, 0, strm>>>(n, a, adt, b, bdt, y, ydt, dst);
  FINISH(fn, stats);
}

} /* extern "C" */
