#!/bin/sh
# bench/step/f32_fair.sh AMPC [ROUNDS]: is 32-true's step time a fair FP32
# baseline? One training step of `ampc bench step` for:
#   32-true        on ampc's own GEMM kernel (the default: the kernel, blocking
#                  and summation order of the 16-bit presets)
#   32-true/ob     on OpenBLAS as it picks its kernels (AMPC_GEMM_F32=openblas,
#                  no OPENBLAS_CORETYPE: the fallback on a CPU it does not know)
#   32-true/ob+ct  on OpenBLAS with OPENBLAS_CORETYPE (SkylakeX with AVX-512,
#                  else Haswell)
#   16-mixed, bf16-mixed
# ROUNDS (3) rounds, the configurations interleaved in each; prints the median
# ms/step of each over the rounds. Env: MODELS (vit-ref mm-tiny), BATCH (128),
# STEPS (10), WARMUP (2), THREADS (all cores). Run on an idle machine.
set -eu
ampc=$1
rounds=${2:-3}
models=${MODELS:-vit-ref mm-tiny}
batch=${BATCH:-128}
steps=${STEPS:-10}
warmup=${WARMUP:-2}
threads=${THREADS:-$(nproc)}
ct=Haswell
grep -q avx512f /proc/cpuinfo && ct=SkylakeX
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
one() { # label env... -- precision model
  label=$1
  shift
  envs=""
  while [ "$1" != "--" ]; do envs="$envs $1"; shift; done
  shift
  # shellcheck disable=SC2086
  env $envs "$ampc" bench step --model "$2" --precision "$1" --batch "$batch" --steps "$steps" \
    --warmup "$warmup" --threads "$threads" --json |
    sed -n 's/.*"ms_per_step_median":\([0-9.e+-]*\).*/\1/p' >>"$tmp/$2.$label"
}
for r in $(seq "$rounds"); do
  for m in $models; do
    one 32-true -- 32-true "$m"
    one 32-true_ob -u OPENBLAS_CORETYPE AMPC_GEMM_F32=openblas -- 32-true "$m"
    one 32-true_ob+ct AMPC_GEMM_F32=openblas OPENBLAS_CORETYPE=$ct -- 32-true "$m"
    one 16-mixed -- 16-mixed "$m"
    one bf16-mixed -- bf16-mixed "$m"
  done
done
echo "# ms/step, median of $rounds interleaved rounds; batch $batch, $threads threads, OpenBLAS core type for ob+ct: $ct"
echo "| model | 32-true (ampc kernel) | 32-true on OpenBLAS, no core type | 32-true on OpenBLAS, $ct | 16-mixed | bf16-mixed |"
echo "|---|---:|---:|---:|---:|---:|"
for m in $models; do
  row="| $m"
  for l in 32-true 32-true_ob 32-true_ob+ct 16-mixed bf16-mixed; do
    med=$(sort -g "$tmp/$m.$l" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    row="$row | $med"
  done
  echo "$row |"
done
