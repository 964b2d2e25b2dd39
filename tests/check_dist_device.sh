#!/bin/sh
# tests/check_dist_device.sh AMPC MPIEXEC: the trainer's device-sum path (the
# one NCCL takes on GPUs: ampc_comm.sum_device_f32_ordered /
# sum_device_working, no host copies) on the CPU, where there is no GPU.
#
# 1. --device cpu-split (its "device" buffers are host memory) on 2 and 3
#    ranks with AMPC_TEST_DEVICE_SUMS=host (a test hook of the CLI: the
#    group's device sums are its host sums, called on the trainer's device
#    buffers directly): the checkpoint is bit for bit the host path's (the
#    gradient copied to host memory, summed, copied back), for --allreduce
#    f32 (the FP32 staging, 2 micro-batches, and per-loss scaling) and
#    --allreduce working; the config line says which path ran.
# 2. Without a GPU, --device cuda fails with a clear message and
#    AMPC_NCCL_ONE_RANK=1 changes nothing of a CPU run under mpirun -np 1.
set -u
. "$(dirname "$0")/mpi_lib.sh"
common="--steps 4 --no-eval --threads 1 --telemetry-every 2 --quiet --precision 16-mixed"

# 1. device sums against host sums
for case in "2 f32 1 dynamic" "2 f32 2 dynamic" "3 f32 1 per-loss" "2 working 1 dynamic" \
  "3 working 2 dynamic"; do
  set -- $case
  n=$1 red=$2 mb=$3 ls=$4
  b=$((n * mb * 4))
  tag="$n.$red.$mb.$ls"
  mpi "$n" "$ampc" train $common --device cpu-split --batch "$b" --micro-batches "$mb" \
    --allreduce "$red" --loss-scale "$ls" --check-replicas --save "$tmp/host.$tag.st" \
    --log "$tmp/host.$tag.jsonl" >"$tmp/out" 2>&1 ||
    { die "$tag, host sums: exit $?"; cat "$tmp/out" >&2; continue; }
  AMPC_TEST_DEVICE_SUMS=host mpi "$n" "$ampc" train $common --device cpu-split --batch "$b" \
    --micro-batches "$mb" --allreduce "$red" --loss-scale "$ls" --check-replicas \
    --save "$tmp/dev.$tag.st" --log "$tmp/dev.$tag.jsonl" >"$tmp/out" 2>&1 ||
    { die "$tag, device sums: exit $?"; cat "$tmp/out" >&2; continue; }
  cmp -s "$tmp/host.$tag.st" "$tmp/dev.$tag.st" ||
    die "$tag: the device-sum path leaves another checkpoint than the host path"
  grep -q '"allreduce":"host (MPI)"' "$tmp/host.$tag.jsonl" ||
    die "$tag: the host run's config line does not say allreduce host (MPI)"
  grep -q '"allreduce":"device"' "$tmp/dev.$tag.jsonl" ||
    die "$tag: the device-sum run's config line does not say allreduce device"
done

# 2. no GPU here: a clear refusal; the one-rank switch leaves a CPU run alone
if "$ampc" train $common --device cuda --batch 4 >"$tmp/cuda.out" 2>&1; then
  echo "check_dist_device: a GPU is here; --device cuda ran (the GPU check covers it)"
else
  grep -q "cuda" "$tmp/cuda.out" || { die "--device cuda without a GPU: no message"; cat "$tmp/cuda.out" >&2; }
fi
mpi 1 "$ampc" train $common --batch 8 --save "$tmp/one.st" >/dev/null 2>&1 || die "1 rank: exit $?"
AMPC_NCCL_ONE_RANK=1 mpi 1 "$ampc" train $common --batch 8 --save "$tmp/one_forced.st" \
  --log "$tmp/one_forced.jsonl" >/dev/null 2>&1 || die "1 rank, AMPC_NCCL_ONE_RANK=1: exit $?"
cmp -s "$tmp/one.st" "$tmp/one_forced.st" || die "AMPC_NCCL_ONE_RANK=1 changed a CPU run"
grep -q '"allreduce":"none"' "$tmp/one_forced.jsonl" ||
  die "AMPC_NCCL_ONE_RANK=1 on the CPU: the config line does not say allreduce none"

[ "$fail" = 0 ] && echo "check_dist_device: passed"
exit "$fail"
