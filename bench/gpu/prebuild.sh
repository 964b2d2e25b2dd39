#!/bin/sh
# bench/gpu/prebuild.sh: build bench/gpu's binaries here, on the Debian
# machine (CUDA 13.0 toolkit, sm_90 code + compute_90 PTX), into
# .gpu-prebuilt/ (ignored by git), which the device tool's `carry` takes to
# the GPU machine: bench/gpu/check.sh runs them there when every library they
# need is found (cuBLASLt is loaded with dlopen and the CUDA runtime is
# linked statically, so they need only libc, libgomp, libstdc++ and cJSON,
# which travels as a .deb), so the check spends no device time compiling.
# BUILD_INFO records the commit, the toolkit and the date.
set -eu
cd "$(dirname "$0")/../.."
cmake -S bench/gpu -B build-gpu-prebuilt -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu-prebuilt -j "$(nproc)"
rm -rf .gpu-prebuilt
mkdir -p .gpu-prebuilt
for b in test_cuda_gemm test_cuda_nn test_model_device test_nccl gpu_bench gpu_train ampc-gpu; do
  cp build-gpu-prebuilt/$b .gpu-prebuilt/
done
{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include tests bench tools || echo '+changes'), $(nvcc --version | tail -n 1), built $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
  git status --short -- src include tests bench tools
} >.gpu-prebuilt/BUILD_INFO
ls -l .gpu-prebuilt
