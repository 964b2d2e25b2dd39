#!/bin/sh
# bench/gpu/nccl_check.sh BINDIR OUTDIR: NCCL (src/dist/nccl.c) on the one GPU
# of the GPU machine (bench/gpu/check.sh's part "nccl").
#  1. BINDIR/test_nccl --gpu: a group of one on GPU 0; the rank-order chain
#     (several chunks) and the all-reduce in f32, f16 and bf16 leave the
#     values' bits as they were (a sum of one term).
#  2. `ampc-gpu train --device cuda` with the NCCL path forced on for one
#     process (AMPC_NCCL_ONE_RANK=1: ampc-gpu has no MPI, and one GPU can
#     hold only one rank) against the same run without it: the trainer hands
#     its device buffers to NCCL every step (2 micro-batches with --allreduce
#     f32: the FP32 staging through the chain; --allreduce working: the
#     working-dtype gradient through ncclAllReduce), and since a sum over one
#     rank is the identity the checkpoints must be equal bit for bit; the
#     config line must say "allreduce":"nccl".
# What one GPU cannot show: the chain's sends and receives between ranks,
# and the all-reduce's arithmetic (tests/test_nccl.c checks the chain's plan
# on the CPU; tests/check_dist_device.sh the trainer's device-sum path on 2
# and 3 ranks with host sums).
# Exit 77 when test_nccl finds no device or no NCCL, 1 on a failure.
set -u
if [ $# -ne 2 ]; then
  echo "usage: sh bench/gpu/nccl_check.sh BINDIR OUTDIR (e.g. build-gpu /tmp/out)" >&2
  exit 2
fi
bin=$1 out=$2
mkdir -p "$out"
"$bin/test_nccl" --gpu
st=$?
[ "$st" -eq 0 ] || exit "$st"
fail=0
common="--threads 4 --no-eval --quiet --model mm-tiny --precision 16-mixed --steps 6 --batch 16 --device cuda"
for case in "f32 2" "working 1"; do
  set -- $case
  tag="$1.$2"
  "$bin/ampc-gpu" train $common --allreduce "$1" --micro-batches "$2" --save "$out/plain.$tag.st" \
    --log "$out/plain.$tag.jsonl" >"$out/plain.$tag.out" 2>&1 ||
    { echo "FAIL $tag: the plain run: exit $? ($(tail -n 1 "$out/plain.$tag.out"))"; fail=1; continue; }
  AMPC_NCCL_ONE_RANK=1 "$bin/ampc-gpu" train $common --allreduce "$1" --micro-batches "$2" \
    --save "$out/nccl.$tag.st" --log "$out/nccl.$tag.jsonl" >"$out/nccl.$tag.out" 2>&1 ||
    { echo "FAIL $tag: the NCCL run: exit $? ($(tail -n 1 "$out/nccl.$tag.out"))"; fail=1; continue; }
  grep -q '"allreduce":"nccl"' "$out/nccl.$tag.jsonl" ||
    { echo "FAIL $tag: the NCCL run's config line does not say allreduce nccl"; fail=1; }
  if cmp -s "$out/plain.$tag.st" "$out/nccl.$tag.st"; then
    echo "nccl $tag: the NCCL path's checkpoint is the plain run's, bit for bit"
  else
    echo "FAIL $tag: the NCCL path leaves another checkpoint"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "nccl_check: passed"
exit "$fail"
