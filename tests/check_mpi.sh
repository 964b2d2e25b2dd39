#!/bin/sh
# tests/check_mpi.sh AMPC MPIEXEC: data-parallel training on MPI.
#
# 1. Equivalence: `mpirun -np N ampc train --batch B` (each rank B/N samples,
#    --allreduce f32) leaves the same checkpoint, bit for bit, and the same
#    step lines (losses, scales, telemetry counts) as one process with
#    --micro-batches N, for 32-true, 16-mixed, bf16-mixed and fp8-mixed (the
#    amax of every FP8 cast maximised over the ranks) on 2 ranks and
#    16-mixed on 3; every rank's weights and master weights are compared
#    after every step (--check-replicas).
# 2. A non-finite gradient on rank 1 only (AMPC_FAULT_NAN_GRAD=1:I): the step
#    is skipped and the scale halved once, on every rank (the run checks the
#    ranks' scaler states after every step and would fail on a difference).
# 3. Resume on another world size: a checkpoint saved by 2 ranks continues on
#    1 rank (--micro-batches 2) to the same bits as the uninterrupted 2-rank
#    run, and continues on 3 ranks to the bits of 1 rank with --micro-batches 3.
# 4. --allreduce working: runs, and the replicas stay identical.
# 5. A rank that fails (AMPC_FAULT_FAIL=1:2, as a bad input would) ends the
#    job with its message and a non-zero exit within seconds, no hang; a
#    global batch that does not divide over the ranks is a clear error.
# 6. --global-negatives: the loss and gradient of the global batch (below).
# 7. The device path on 2 ranks (--device cpu-split): the CPU path's bits,
#    global negatives too.
# 8. The diagnosis names a non-finite sample that only rank 1 holds.
# 9. Ranks that cannot disagree: ranks started with a different flag (an
#    MPMD launch) are refused before the first step, exit 2, the flag named;
#    ranks resuming from different checkpoints likewise; a rank killed
#    (SIGKILL) mid-run ends the job within seconds with the checkpoint it
#    would have overwritten intact; --global-negatives with --micro-batches
#    in one process is refused (it would contrast each micro-batch alone).
# 10. ZeRO-1 (--zero 1): below.
# 11. --overlap on (the ranks' sum overlapped with the backward pass): the
#     checkpoint of one process with --micro-batches N, bit for bit, on 2
#     and 3 ranks, with 2 micro-batches per rank and with --zero 1, and of
#     --overlap off on 2 ranks; refused (exit 2, the flag named) with
#     --allreduce working.
set -u
. "$(dirname "$0")/mpi_lib.sh"
common="--steps 6 --no-eval --threads 1 --telemetry-every 3 --quiet"

# the step and summary lines of two logs, timings, sizes and paths left out
same_log() {
  python3 - "$1" "$2" <<'PY'
import json, os, sys
skip = {"ms", "wall_s", "ms_per_step_mean", "peak_rss_bytes", "checkpoint", "ranks", "cores", "cpu",
        "bytes_sent_per_step", "reduce_wait_ms_per_step"} | set(os.environ.get("SAME_LOG_SKIP", "").split())
def clean(x):
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items() if k not in skip}
    return x
def lines(p):
    return [clean(json.loads(l)) for l in open(p) if '"config"' not in l]
a, b = lines(sys.argv[1]), lines(sys.argv[2])
if len(a) != len(b):
    sys.exit("different numbers of lines: %d and %d" % (len(a), len(b)))
for x, y in zip(a, b):
    if x != y:
        keys = [k for k in set(x) | set(y) if x.get(k) != y.get(k)]
        sys.exit("%s line differs in %s" % (x.get("event"), keys))
PY
}

# 1. equivalence
for case in "2 32-true 16" "2 16-mixed 16" "2 bf16-mixed 16" "2 fp8-mixed 16" "3 16-mixed 12"; do
  set -- $case
  n=$1 p=$2 b=$3
  tag="$p.$n"
  mpi "$n" "$ampc" train $common --precision "$p" --batch "$b" --check-replicas \
    --save "$tmp/dp.$tag.st" --log "$tmp/dp.$tag.jsonl" >"$tmp/dp.$tag.out" 2>&1 ||
    { die "$n ranks, $p: exit $?"; cat "$tmp/dp.$tag.out" >&2; continue; }
  "$ampc" train $common --precision "$p" --batch "$b" --micro-batches "$n" \
    --save "$tmp/mb.$tag.st" --log "$tmp/mb.$tag.jsonl" >/dev/null 2>&1 ||
    die "1 rank, $p, $n micro-batches: exit $?"
  cmp -s "$tmp/dp.$tag.st" "$tmp/mb.$tag.st" ||
    die "$p: $n ranks and $n micro-batches leave different checkpoints"
  msg=$(same_log "$tmp/dp.$tag.jsonl" "$tmp/mb.$tag.jsonl" 2>&1) ||
    die "$p: $n ranks and $n micro-batches log differently: $msg"
  grep -q '"ranks":'"$n" "$tmp/dp.$tag.jsonl" || die "$p: the config line does not name $n ranks"
done

# the device path on 2 ranks, run on the CPU (--device cpu-split:
# separate "device" buffers, the ranks' sum through host memory): the bits of
# the CPU path, in FP32 and in the working dtype, per-loss scaling too
for case in "f32 dynamic" "working dynamic" "f32 per-loss"; do
  set -- $case
  for d in cpu cpu-split; do
    mpi 2 "$ampc" train $common --precision 16-mixed --batch 16 --check-replicas --allreduce "$1" \
      --loss-scale "$2" --device $d --save "$tmp/dev.$1.$2.$d.st" --log "$tmp/dev.$1.$2.$d.jsonl" \
      >"$tmp/dev.out" 2>&1 || { die "2 ranks, --device $d, $case: exit $?"; cat "$tmp/dev.out" >&2; }
  done
  cmp -s "$tmp/dev.$1.$2.cpu.st" "$tmp/dev.$1.$2.cpu-split.st" ||
    die "2 ranks, $case: --device cpu-split leaves another checkpoint than --device cpu"
  msg=$(same_log "$tmp/dev.$1.$2.cpu.jsonl" "$tmp/dev.$1.$2.cpu-split.jsonl" 2>&1) ||
    die "2 ranks, $case: --device cpu-split logs differently: $msg"
done

# per-branch and per-loss scaling on 2 ranks: the ranks hold the same weights
# after every step (each branch's telemetry and each term's overflow are
# reduced over the ranks), and a second run gives the same checkpoint
for ls in per-branch per-loss; do
  for k in 1 2; do
    mpi 2 "$ampc" train $common --loss-scale $ls --batch 16 --check-replicas \
      --save "$tmp/$ls.$k.st" --log "$tmp/$ls.$k.jsonl" >"$tmp/$ls.out" 2>&1 ||
      { die "2 ranks, --loss-scale $ls: exit $?"; cat "$tmp/$ls.out" >&2; }
  done
  cmp -s "$tmp/$ls.1.st" "$tmp/$ls.2.st" || die "2 ranks, --loss-scale $ls: not deterministic"
done
grep -q '"loss_scales":{"loss_itc"' "$tmp/per-loss.1.jsonl" || die "2 ranks per-loss: no loss_scales"
grep -q '"branch_scales":{"vision"' "$tmp/per-branch.1.jsonl" || die "2 ranks per-branch: no branch_scales"

# 2. a non-finite gradient on one rank: every rank skips, the scale halves once
AMPC_FAULT_NAN_GRAD=1:5 mpi 2 "$ampc" train $common --batch 16 --check-replicas \
  --log "$tmp/nan.jsonl" >"$tmp/nan.out" 2>&1 || { die "NaN on rank 1: exit $?"; cat "$tmp/nan.out" >&2; }
python3 - "$tmp/nan.jsonl" <<'PY' || die "NaN on rank 1: step 5 was not skipped with the scale halved"
import json, sys
steps = {o["step"]: o for o in map(json.loads, open(sys.argv[1])) if o.get("event") == "step"}
s = steps[5]
assert s["overflow"] and s["skipped"], s
assert steps[6]["loss_scale"] == s["loss_scale"] / 2, (s, steps[6])
assert not steps[6]["skipped"], steps[6]
PY

# 3. resume on other world sizes
mpi 2 "$ampc" train $common --batch 12 --save "$tmp/full.st" >/dev/null 2>&1 || die "2 ranks, 6 steps"
mpi 2 "$ampc" train $common --batch 12 --stop-at 3 --save "$tmp/half.st" >/dev/null 2>&1 ||
  die "2 ranks, stop at 3"
"$ampc" train $common --batch 12 --micro-batches 2 --resume "$tmp/half.st" \
  --save "$tmp/r1.st" >/dev/null 2>&1 || die "resume on 1 rank"
cmp -s "$tmp/full.st" "$tmp/r1.st" || die "saved on 2 ranks, resumed on 1: not the 2-rank bits"
mpi 3 "$ampc" train $common --batch 12 --resume "$tmp/half.st" --check-replicas \
  --save "$tmp/r3.st" >/dev/null 2>&1 || die "resume on 3 ranks"
"$ampc" train $common --batch 12 --micro-batches 3 --resume "$tmp/half.st" \
  --save "$tmp/r1m3.st" >/dev/null 2>&1 || die "resume on 1 rank, 3 micro-batches"
cmp -s "$tmp/r3.st" "$tmp/r1m3.st" ||
  die "saved on 2 ranks, resumed on 3: not the bits of 1 rank with 3 micro-batches"

# 4. --allreduce working
mpi 2 "$ampc" train $common --batch 16 --allreduce working --check-replicas \
  --log "$tmp/w.jsonl" >"$tmp/w.out" 2>&1 || { die "--allreduce working: exit $?"; cat "$tmp/w.out" >&2; }
grep -q '"reduce":"working"' "$tmp/w.jsonl" || die "--allreduce working: not in the config line"

# 6. --global-negatives: InfoNCE over the global batch. 32-true, matching
#    head off (its hard negatives stay in each rank's shard): step 1 of 2
#    ranks x 8 has the loss of 1 process x 16 and its gradient norm. Bounds:
#    the similarities are the same dot products, the loss a double sum in
#    another order rounded to FP32 (1 ulp: 2^-23 relative, 2^-22 allowed);
#    the gradients are FP32 sums over the 16 samples split into per-rank
#    partial sums (reassociation: 16 x 2^-24 ~ 1e-6 relative to the sum of
#    magnitudes; 1e-5 allowed for cancellation). Without the flag the loss
#    contrasts 8 samples, not 16 (at initialisation about ln 8 against ln 16).
gflags="$common --precision 32-true --w-itm 0 --steps 2"
mpi 2 "$ampc" train $gflags --batch 16 --global-negatives --check-replicas \
  --log "$tmp/g2.jsonl" >"$tmp/g2.out" 2>&1 || { die "--global-negatives: exit $?"; cat "$tmp/g2.out" >&2; }
mpi 2 "$ampc" train $gflags --batch 16 --log "$tmp/l2.jsonl" >/dev/null 2>&1 || die "2 ranks, shard negatives"
"$ampc" train $gflags --batch 16 --log "$tmp/g1.jsonl" >/dev/null 2>&1 || die "1 process, batch 16"
python3 - "$tmp/g2.jsonl" "$tmp/g1.jsonl" "$tmp/l2.jsonl" <<'PY' || die "--global-negatives: not the global batch's loss and gradient"
import json, sys
def step1(p):
    return [o for o in map(json.loads, open(p)) if o.get("event") == "step" and o["step"] == 1][0]
def negatives(p):
    return [o for o in map(json.loads, open(p)) if o.get("event") == "config"][0]["run"]["data_parallel"]["negatives"]
g, one, loc = step1(sys.argv[1]), step1(sys.argv[2]), step1(sys.argv[3])
assert negatives(sys.argv[1]) == "global" and negatives(sys.argv[3]) == "shard"
assert abs(g["loss_itc"] - one["loss_itc"]) <= 2 ** -22 * abs(one["loss_itc"]), (g["loss_itc"], one["loss_itc"])
assert abs(g["grad_norm"] - one["grad_norm"]) <= 1e-5 * one["grad_norm"], (g["grad_norm"], one["grad_norm"])
assert abs(loc["loss_itc"] - one["loss_itc"]) > 0.1, (loc["loss_itc"], one["loss_itc"])
PY
# global negatives on the device path (--device cpu-split: the embeddings
# and the rows' gradients through host buffers): the CPU path's bits, in
# 16-mixed with the matching head on
for d in cpu cpu-split; do
  mpi 2 "$ampc" train $common --precision 16-mixed --batch 16 --global-negatives --check-replicas \
    --device $d --save "$tmp/gn.$d.st" --log "$tmp/gn.$d.jsonl" >"$tmp/gn.out" 2>&1 ||
    { die "--global-negatives --device $d: exit $?"; cat "$tmp/gn.out" >&2; }
done
cmp -s "$tmp/gn.cpu.st" "$tmp/gn.cpu-split.st" ||
  die "--global-negatives: --device cpu-split leaves another checkpoint than --device cpu"
msg=$(same_log "$tmp/gn.cpu.jsonl" "$tmp/gn.cpu-split.jsonl" 2>&1) ||
  die "--global-negatives: --device cpu-split logs differently: $msg"
grep -q '"negatives":"global"' "$tmp/gn.cpu-split.jsonl" || die "--global-negatives: cpu-split ran without"

# 5. a failing rank ends the job; a batch that does not divide
start=$(date +%s)
AMPC_FAULT_FAIL=1:2 mpi 2 "$ampc" train $common --batch 16 >"$tmp/f.out" 2>&1 &&
  die "a failing rank: the job exited 0"
grep -q "injected failure" "$tmp/f.out" || die "a failing rank: its message is missing"
[ $(($(date +%s) - start)) -lt 60 ] || die "a failing rank: the job took over 60 s to end"
mpi 2 "$ampc" train $common --batch 15 >"$tmp/b.out" 2>&1 && die "batch 15 on 2 ranks: exit 0"
grep -q "does not divide evenly over 2 ranks" "$tmp/b.out" || {
  die "batch 15 on 2 ranks: no clear message"
  cat "$tmp/b.out" >&2
}

# a stall is decided on replicated state: both ranks stop at the same step
# and end without MPI_Abort (exit 3); a usage error is printed once
mpi 2 "$ampc" train $common --batch 8 --lr 100 --steps 30 >"$tmp/st.out" 2>&1
rc=$?
[ $rc -eq 3 ] || die "a stall on 2 ranks: exit $rc, expected 3"
grep -q "MPI_ABORT" "$tmp/st.out" && die "a stall on 2 ranks went through MPI_Abort"
[ "$(grep -c 'the run stalled at step' "$tmp/st.out")" -eq 1 ] || die "a stall on 2 ranks: not reported once"
mpi 2 "$ampc" train --allreduce bogus >"$tmp/u.out" 2>&1 && die "--allreduce bogus: exit 0"
[ "$(grep -c "expected f32 or working" "$tmp/u.out")" -eq 1 ] || die "a usage error on 2 ranks: not printed once"
# a check that rank 0 alone makes (the paths it writes): every rank stops
# with its exit code, none waits in the run (timeout: a hang fails the case)
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$ampc" train $common \
  --model mlp --log "$tmp/no/such/dir/l.jsonl" >"$tmp/p.out" 2>&1
rc=$?
[ $rc -eq 2 ] || die "--log in a missing directory on 2 ranks: exit $rc, expected 2 (124: a hang)"
[ "$(grep -c "does not exist" "$tmp/p.out")" -eq 1 ] || die "--log in a missing directory on 2 ranks: not printed once"
# a --precision list's bad flag: checked for every run before any trains,
# reported once, every rank exits 2 without MPI_Abort
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$ampc" train $common \
  --model mlp --precision 32-true,16-mixed --lr -1 >"$tmp/l.out" 2>&1
rc=$?
[ $rc -eq 2 ] || die "a list's bad flag on 2 ranks: exit $rc, expected 2"
grep -q "MPI_ABORT" "$tmp/l.out" && die "a list's bad flag on 2 ranks went through MPI_Abort"
[ "$(grep -c "must be a positive finite number" "$tmp/l.out")" -eq 1 ] || die "a list's bad flag on 2 ranks: not printed once"

# the diagnosis names a sample that only rank 1 holds: the first sample of
# iteration 8 at batch 8 is position 8 of iteration 4 at batch 16 (the
# sequence depends on the position only), the first of rank 1's half; the
# test hook makes it extreme and the 2-rank run names it (and 1 of 8: a
# rank's micro-batch)
"$ampc" train --steps 7 --batch 8 --threads 1 --no-eval --quiet --save "$tmp/b8.st" \
  >/dev/null 2>&1 || die "the batch-8 run failed"
python3 "$(dirname "$0")/scale_tensor.py" "$tmp/b8.st" "$tmp/b8x.st" \
  vision.blocks.0.mlp.fc1.weight 1e6 || die "cannot blow up the weight"
"$ampc" train --steps 8 --batch 8 --threads 1 --no-eval --resume "$tmp/b8x.st" \
  --log "$tmp/b8.jsonl" >/dev/null 2>&1
idx=$(grep '"step":8,' "$tmp/b8.jsonl" | sed -n 's/.*"samples":\[\([0-9]*\).*/\1/p')
[ -n "$idx" ] || die "step 8 of the blown run names no samples"
AMPC_TEST_EXTREME_SAMPLE=$idx:1e6 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$ampc" train --steps 6 --batch 16 --threads 1 \
  --no-eval >"$tmp/x.out" 2>&1
grep -q "^  - samples carrying it: 1 of 8: $idx (" "$tmp/x.out" ||
  die "rank 1's extreme sample $idx is not named: $(grep -A1 'non-finite tensor' "$tmp/x.out")"

# 9. ranks that cannot disagree
for case in "--lr 1e-3:--lr 2e-3:--lr" "--seed 1:--seed 2:--seed" \
  "--precision 16-mixed:--precision bf16-mixed:--precision" "--batch 16:--batch 16 --w-itm 0:--w-itm" \
  "--stop-at 2:--stop-at 3:--stop-at" "--check-replicas:--batch 16:--check-replicas" \
  "--steps 5:--steps 6:--steps" "--micro-batches 2:--micro-batches 1:--micro-batches"; do
  a=${case%%:*} rest=${case#*:} b=${rest%%:*} flag=${case##*:}
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$ampc" train $common --batch 16 $a : \
    -np 1 "$ampc" train $common --batch 16 $b >"$tmp/mm.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { die "ranks started with $a and $b: exit $rc, expected 2 (124: a hang)"; cat "$tmp/mm.out" >&2; }
  grep -q "started with different settings: $flag differs" "$tmp/mm.out" ||
    { die "ranks started with $a and $b: $flag not named"; cat "$tmp/mm.out" >&2; }
  [ $(($(date +%s) - start)) -lt 60 ] || die "ranks started with $a and $b: over 60 s to end"
done
# the thread count may differ (the bits do not depend on it)
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$ampc" train $common --batch 16 : \
  -np 1 "$ampc" train $common --batch 16 --threads 2 >"$tmp/th.out" 2>&1 ||
  { die "ranks with 1 and 2 threads: exit $?"; cat "$tmp/th.out" >&2; }
"$ampc" train $common --batch 16 --save "$tmp/r1.st" >/dev/null 2>&1 || die "the resume source failed"
"$ampc" train $common --batch 16 --seed 5 --save "$tmp/r2.st" >/dev/null 2>&1 || die "the resume source failed"
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$ampc" train $common --batch 16 --steps 8 \
  --resume "$tmp/r1.st" : -np 1 "$ampc" train $common --batch 16 --steps 8 --resume "$tmp/r2.st" >"$tmp/rr.out" 2>&1
rc=$?
[ $rc -eq 2 ] || die "ranks resuming from different checkpoints: exit $rc, expected 2"
grep -q "start from different weights" "$tmp/rr.out" || { die "ranks resuming from different checkpoints: no clear message"; cat "$tmp/rr.out" >&2; }
# a killed rank: the job ends, the checkpoint it would overwrite is whole
cp "$tmp/r1.st" "$tmp/k.st"
mpi 2 "$ampc" train --steps 3000 --batch 16 --no-eval --threads 1 --quiet --resume "$tmp/k.st" \
  --save "$tmp/k.st" --log "$tmp/k.jsonl" >"$tmp/k.out" 2>&1 &
job=$!
i=0
while [ $i -lt 120 ] && ! grep -q '"step":20,' "$tmp/k.jsonl" 2>/dev/null; do sleep 1; i=$((i + 1)); done
victim=
for p in $(pgrep -f "ampc train --steps 3000"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
if [ -z "$victim" ]; then
  die "a killed rank: rank 1 not found (step 20 never logged?)"
  kill "$job" 2>/dev/null
else
  kill -9 "$victim"
  start=$(date +%s)
  i=0
  while kill -0 "$job" 2>/dev/null && [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done
  if kill -0 "$job" 2>/dev/null; then
    die "a killed rank: the job still runs 60 s later (a hang)"
    pkill -9 -f "ampc train --steps 3000"
  else
    wait "$job" && die "a killed rank: the job exited 0"
    echo "a killed rank: the job ended $(($(date +%s) - start)) s after the kill"
  fi
  cmp -s "$tmp/r1.st" "$tmp/k.st" || die "a killed rank: the checkpoint changed"
  ls "$tmp"/k.st.* >/dev/null 2>&1 && echo "note: a temporary checkpoint file is left: $(ls "$tmp"/k.st.*)"
fi
"$ampc" train $common --batch 16 --micro-batches 2 --global-negatives >"$tmp/gm.out" 2>&1
rc=$?
[ $rc -eq 2 ] || die "--global-negatives --micro-batches 2 in one process: exit $rc, expected 2"
grep -q "would contrast each micro-batch" "$tmp/gm.out" || die "--global-negatives --micro-batches 2: no clear message"

# 10. ZeRO-1 (--zero 1): each rank keeps its shard of the master weights and
#     optimizer state; the checkpoint (gathered on rank 0) and the step lines
#     are those of one process with --micro-batches N, on 2 and 3 ranks, in
#     16-mixed, bf16-mixed and fp8-mixed, SGD and clipping; a checkpoint of a
#     sharded run resumes on another rank count, sharded or not; a NaN on one
#     rank skips the step everywhere; the shard's bytes are in the config line.
for case in "2 16-mixed 16" "2 bf16-mixed 16" "2 fp8-mixed 16" "3 16-mixed 12" "3 bf16-mixed 12" \
  "3 fp8-mixed 12" "3 32-true 12 --optimizer sgd" "2 16-mixed 16 --clip-norm 0.05"; do
  set -- $case
  n=$1 p=$2 b=$3
  shift 3
  tag="z.$p.$n.$#"
  mpi "$n" "$ampc" train $common --precision "$p" --batch "$b" --zero 1 --check-replicas "$@" \
    --save "$tmp/$tag.st" --log "$tmp/$tag.jsonl" >"$tmp/$tag.out" 2>&1 ||
    { die "--zero 1 on $n ranks, $p $*: exit $?"; cat "$tmp/$tag.out" >&2; continue; }
  "$ampc" train $common --precision "$p" --batch "$b" --micro-batches "$n" "$@" \
    --save "$tmp/$tag.mb.st" --log "$tmp/$tag.mb.jsonl" >/dev/null 2>&1 ||
    die "1 rank, $p, $n micro-batches $*: exit $?"
  cmp -s "$tmp/$tag.st" "$tmp/$tag.mb.st" ||
    die "--zero 1, $p $*: $n ranks and $n micro-batches leave different checkpoints"
  # (the memory account is the shard's, by design)
  msg=$(SAME_LOG_SKIP="memory parameter_state_bytes" same_log "$tmp/$tag.jsonl" "$tmp/$tag.mb.jsonl" 2>&1) ||
    die "--zero 1, $p $*: $n ranks and $n micro-batches log differently: $msg"
done
python3 - "$tmp/z.16-mixed.3.0.jsonl" <<'PY' || die "--zero 1: the config line does not carry the shard"
import json, sys
c = json.loads(open(sys.argv[1]).readline())
dp, mem = c["run"]["data_parallel"], c["parameter_bytes"]
assert dp["zero"] == 1 and dp["shard_first"] == 0, dp
n = dp["shard_elements"]  # rank 0's: 4096-aligned, about a third of the table
assert n % 4096 == 0 and mem["master"] == 4 * n, (dp, mem)
assert mem["exp_avg"] == 4 * n and mem["exp_avg_sq"] == 4 * n, (dp, mem)
assert 3 * n >= mem["weights"] // 2 > 2 * n, (dp, mem)
PY
# with 2 micro-batches per rank (the whole FP32 staging, then the scatter):
# the bits of the same run without --zero
for z in 0 1; do
  mpi 2 "$ampc" train $common --batch 16 --micro-batches 2 --zero $z --save "$tmp/zk$z.st" \
    >/dev/null 2>&1 || die "--zero $z --micro-batches 2 on 2 ranks: exit $?"
done
cmp -s "$tmp/zk0.st" "$tmp/zk1.st" || die "--zero 1 --micro-batches 2: not the bits of --zero 0"
# resume: saved sharded on 2 ranks at step 3, continued sharded on 3 ranks and
# unsharded on 1 rank: the bits of one process with 3 and 2 micro-batches
mpi 2 "$ampc" train $common --batch 12 --zero 1 --stop-at 3 --save "$tmp/zh.st" >/dev/null 2>&1 ||
  die "--zero 1, 2 ranks, stop at 3"
cmp -s "$tmp/zh.st" "$tmp/half.st" || die "--zero 1: the step-3 checkpoint differs from the unsharded one"
mpi 3 "$ampc" train $common --batch 12 --zero 1 --resume "$tmp/zh.st" --save "$tmp/zr3.st" \
  >/dev/null 2>&1 || die "--zero 1: resume on 3 ranks"
cmp -s "$tmp/zr3.st" "$tmp/r1m3.st" || die "--zero 1: resumed on 3 ranks, not the bits of 3 micro-batches"
"$ampc" train $common --batch 12 --micro-batches 2 --resume "$tmp/zh.st" --save "$tmp/zr1.st" \
  >/dev/null 2>&1 || die "--zero 1: resume on 1 rank"
cmp -s "$tmp/zr1.st" "$tmp/full.st" || die "--zero 1: resumed on 1 rank, not the uninterrupted bits"
# a NaN on rank 1's gradient: every rank skips step 5 and halves the scale
AMPC_FAULT_NAN_GRAD=1:5 mpi 2 "$ampc" train $common --batch 16 --zero 1 --check-replicas \
  --log "$tmp/znan.jsonl" >"$tmp/znan.out" 2>&1 || { die "--zero 1, NaN on rank 1: exit $?"; cat "$tmp/znan.out" >&2; }
python3 - "$tmp/znan.jsonl" <<'PY' || die "--zero 1, NaN on rank 1: step 5 was not skipped with the scale halved"
import json, sys
steps = {o["step"]: o for o in map(json.loads, open(sys.argv[1])) if o.get("event") == "step"}
assert steps[5]["overflow"] and steps[5]["skipped"], steps[5]
assert steps[6]["loss_scale"] == steps[5]["loss_scale"] / 2 and not steps[6]["skipped"], steps[6]
PY
# what it refuses: a rank without --zero 1, the working-dtype sum, a device, per-branch scaling
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$ampc" train $common --batch 16 --zero 1 : \
  -np 1 "$ampc" train $common --batch 16 >"$tmp/zm.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "started with different settings: --zero differs" "$tmp/zm.out" ||
  { die "ranks with and without --zero 1: exit $rc, the flag not named"; cat "$tmp/zm.out" >&2; }
for bad in "--allreduce working" "--device cpu-split" "--loss-scale per-branch" "--zero 2"; do
  mpi 2 "$ampc" train $common --batch 16 --zero 1 $bad >"$tmp/zb.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { die "--zero 1 $bad: exit $rc, expected 2"; cat "$tmp/zb.out" >&2; }
  grep -q -- "--zero" "$tmp/zb.out" || { die "--zero 1 $bad: the message does not name --zero"; cat "$tmp/zb.out" >&2; }
done

# 11. --overlap on
ovl="--steps 4 --no-eval --threads 1 --quiet --precision 16-mixed"
for case in "2 16 1" "3 12 1" "2 16 2"; do
  set -- $case
  n=$1 b=$2 k=$3
  tag="ovl.$n.$k"
  offs="on"
  [ "$n.$k" = 2.1 ] && offs="on off" # off: the bits of micro-batches (section 1)
  for o in $offs; do
    mpi "$n" "$ampc" train $ovl --batch "$b" --micro-batches "$k" --overlap $o --check-replicas \
      --save "$tmp/$tag.$o.st" >"$tmp/$tag.out" 2>&1 ||
      { die "--overlap $o on $n ranks x $k micro-batches: exit $?"; cat "$tmp/$tag.out" >&2; }
  done
  "$ampc" train $ovl --batch "$b" --micro-batches $((n * k)) --save "$tmp/$tag.mb.st" \
    >/dev/null 2>&1 || die "--overlap: 1 rank, $((n * k)) micro-batches: exit $?"
  [ -f "$tmp/$tag.off.st" ] && ! cmp -s "$tmp/$tag.on.st" "$tmp/$tag.off.st" &&
    die "$n ranks x $k micro-batches: --overlap on and off leave different checkpoints"
  cmp -s "$tmp/$tag.on.st" "$tmp/$tag.mb.st" ||
    die "--overlap on, $n ranks x $k micro-batches: not the bits of $((n * k)) micro-batches"
done
mpi 2 "$ampc" train $ovl --batch 16 --overlap on --zero 1 --save "$tmp/ovl.z.st" \
  >"$tmp/ovl.z.out" 2>&1 || { die "--overlap on --zero 1: exit $?"; cat "$tmp/ovl.z.out" >&2; }
cmp -s "$tmp/ovl.z.st" "$tmp/ovl.2.1.mb.st" ||
  die "--overlap on --zero 1 on 2 ranks: not the bits of 2 micro-batches"
mpi 2 "$ampc" train $ovl --batch 16 --overlap on --allreduce working >"$tmp/ovl.b.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--overlap" "$tmp/ovl.b.out" ||
  { die "--overlap on --allreduce working: exit $rc (expected 2, --overlap named)"; cat "$tmp/ovl.b.out" >&2; }

[ $fail -eq 0 ] && echo "check_mpi: all cases passed"
exit $fail
