#!/bin/sh
# tests/check_crash.sh AMPC TEST_ROBUST: a killed run costs nothing, and runs
# are bit-exact (docs/ROBUSTNESS.md).
#
# 1. SIGKILL: `ampc train --model mlp --save-every 1` is killed at a random
#    moment (a seeded LCG picks 0-250 ms after its first checkpoint appears;
#    most of a step's time is the checkpoint write, so most kills land inside
#    one) in 24 trials. Each time the checkpoint must be complete: it loads
#    (a resumed run exits 0) and is byte-identical to the checkpoint an
#    uninterrupted run leaves at the same step. Only NAME.tmp.XXXXXX files may
#    be left beside it (a killed writer cannot remove its temporary file),
#    never anything under the final name.
# 2. Determinism: the same seed and thread count (2) give bit-identical logs
#    (timing fields removed) and checkpoints, for the MLP and for the
#    multimodal loop (mm-micro on an 8x8 dataset written by
#    `test_robust --write-dataset`); a multimodal run resumed at step k is
#    bit-identical to the uninterrupted one from k on (the MLP case is in
#    check_train.sh).
set -u
# Idle OpenMP threads sleep instead of spinning: results do not depend on it,
# but on a busy machine (or under a sanitizer) spinning threads of a 2-thread
# run wait for each other's time slices at every parallel region.
OMP_WAIT_POLICY=passive
export OMP_WAIT_POLICY
ampc=$1
robust=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }

# ---- 1. SIGKILL at random moments ------------------------------------------------
seed=20261130
next() { seed=$(((seed * 1103515245 + 12345) % 2147483648)); }
mlp="--model mlp --steps 2000 --threads 1 --quiet --seed 3 --hidden 16 --train-size 256 --test-size 64"
mlp="$mlp --batch 16 --eval-every 0"
trials=24 killed=0 midwrite=0
i=0
while [ $i -lt $trials ]; do
  i=$((i + 1))
  rm -rf "$tmp/k" && mkdir "$tmp/k"
  "$ampc" train $mlp --save "$tmp/k/ck.st" --save-every 1 >/dev/null 2>&1 &
  pid=$!
  n=0 # wait for the first checkpoint (at most 20 s)
  while [ ! -f "$tmp/k/ck.st" ] && [ $n -lt 2000 ]; do
    sleep 0.01
    n=$((n + 1))
  done
  next
  ms=$((seed / 65536 % 250))
  sleep "0.$(printf '%03d' $ms)"
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  rc=$?
  [ $rc = 137 ] && killed=$((killed + 1))
  [ $rc = 137 ] || [ $rc = 0 ] || die "trial $i: the run exited $rc"
  left=$(ls "$tmp/k" | grep -v '^ck\.st$' | grep -v '^ck\.st\.tmp\.[A-Za-z0-9]\{6\}$')
  [ -z "$left" ] || die "trial $i: unexpected files: $left"
  ls "$tmp/k" | grep -q '^ck\.st\.tmp\.' && midwrite=$((midwrite + 1))
  if [ ! -f "$tmp/k/ck.st" ]; then
    die "trial $i: no checkpoint although one had appeared"
    continue
  fi
  it=$(head -c 8192 "$tmp/k/ck.st" | tr -c '[:print:]' ' ' | sed -n 's/.*"ampc\.iteration":"\([0-9]*\)".*/\1/p')
  if [ -z "$it" ]; then
    die "trial $i: the checkpoint has no readable ampc.iteration"
    continue
  fi
  "$ampc" train $mlp --resume "$tmp/k/ck.st" --stop-at $((it + 1)) >/dev/null 2>"$tmp/err" ||
    die "trial $i: the step-$it checkpoint does not resume: $(cat "$tmp/err")"
  "$ampc" train $mlp --stop-at "$it" --save "$tmp/ref.st" >/dev/null 2>&1 || die "reference run to $it"
  cmp -s "$tmp/k/ck.st" "$tmp/ref.st" || die "trial $i: the step-$it checkpoint differs from an uninterrupted run's"
done
echo "check_crash: $trials trials, $killed killed mid-run, $midwrite with a checkpoint write in progress"
[ $killed -gt 0 ] || die "no trial was killed mid-run"

# ---- 1b. a crash at every byte of interest of the checkpoint write -----------------
# AMPC_FAULT_ABORT_AFTER_BYTES=N makes the atomic writer abort() once N bytes of
# its temporary file are written (src/io/safetensors.c); whatever N, the
# checkpoint of the step before must survive byte for byte. The kills above
# land inside a write only when the machine is slow enough; these always do.
rm -rf "$tmp/f" && mkdir "$tmp/f"
"$ampc" train $mlp --stop-at 4 --save "$tmp/f/ck.st" >/dev/null 2>&1 || die "fault: step-4 checkpoint"
cp "$tmp/f/ck.st" "$tmp/f/ref4.st"
size=$(wc -c <"$tmp/f/ck.st")
# the header length: the file's first 8 bytes, little-endian
hlen=$(od -An -t u8 -N 8 "$tmp/f/ck.st" | tr -d ' ')
faults=0
for n in 0 1 7 8 9 $((hlen + 7)) $((hlen + 8)) $((hlen + 9)) $((size / 2)) $((size - 1)) $size; do
  (ulimit -c 0; AMPC_FAULT_ABORT_AFTER_BYTES=$n exec "$ampc" train $mlp --resume "$tmp/f/ck.st" --stop-at 5 \
    --save "$tmp/f/ck.st") >/dev/null 2>&1
  rc=$?
  [ $rc = 134 ] || die "fault at byte $n: the writer did not abort (exit $rc)"
  cmp -s "$tmp/f/ck.st" "$tmp/f/ref4.st" || die "fault at byte $n: the previous checkpoint changed"
  tmpf=$(ls "$tmp/f" | grep '^ck\.st\.tmp\.' | head -n 1)
  if [ -n "$tmpf" ]; then # the crashed writer's temporary file holds exactly n bytes
    [ "$(wc -c <"$tmp/f/$tmpf")" = "$n" ] || die "fault at byte $n: temporary file has $(wc -c <"$tmp/f/$tmpf") bytes"
    rm -f "$tmp/f/$tmpf"
  else
    die "fault at byte $n: no temporary file left behind"
  fi
  faults=$((faults + 1))
done
# and the run then resumes from the surviving checkpoint as if nothing happened
"$ampc" train $mlp --resume "$tmp/f/ck.st" --stop-at 5 --save "$tmp/f/ck.st" >/dev/null 2>&1 ||
  die "fault: resume after the crashes"
"$ampc" train $mlp --stop-at 5 --save "$tmp/f/ref5.st" >/dev/null 2>&1 || die "fault: reference to 5"
cmp -s "$tmp/f/ck.st" "$tmp/f/ref5.st" || die "fault: the step-5 checkpoint after the crashes differs"
echo "check_crash: $faults injected crashes inside the checkpoint write (0..$size of $size bytes, header $hlen)"

# ---- 2. determinism ---------------------------------------------------------------
# timing fields (and the CPU time behind them), the process's peak RSS (the summary's, and its memory
# account's), and the checkpoint's name in the summary
strip() {
  sed -e 's/"ms":[^,}]*[,}]//' -e 's/"ms_per_step_mean":[^,}]*[,}]//' -e 's/"wall_s":[^,}]*[,}]//' \
    -e 's/"peak_rss_bytes":[^,}]*[,}]//g' -e 's/"checkpoint":"[^"]*"//' \
    -e 's/"cores":[^,}]*[,}]//' -e 's/"cpu":{[^}]*},\{0,1\}//' "$1"
}
"$ampc" train --model mlp --steps 120 --threads 2 --quiet --log "$tmp/a.jsonl" --save "$tmp/a.st" \
  >/dev/null 2>&1 || die "mlp run a"
"$ampc" train --model mlp --steps 120 --threads 2 --quiet --log "$tmp/b.jsonl" --save "$tmp/b.st" \
  >/dev/null 2>&1 || die "mlp run b"
strip "$tmp/a.jsonl" >"$tmp/a.txt"
strip "$tmp/b.jsonl" >"$tmp/b.txt"
cmp -s "$tmp/a.txt" "$tmp/b.txt" || die "mlp: same seed and threads, different logs"
grep -q '"ms"\|wall_s' "$tmp/a.txt" && die "mlp: timing fields were not stripped"
cmp -s "$tmp/a.st" "$tmp/b.st" || die "mlp: same seed and threads, different checkpoints"

"$robust" --write-dataset "$tmp/d8.ampcds" || die "writing the 8x8 dataset"
mm="--model mm-micro --data $tmp/d8.ampcds --batch 8 --steps 80 --eval-every 20 --threads 2 --quiet"
mm="$mm --init-scale 1e30 --max-scale 1e30 --growth-interval 10" # skipped steps on both sides of k
"$ampc" train $mm --log "$tmp/m1.jsonl" --save "$tmp/m1.st" >/dev/null 2>&1 || die "mm run 1"
"$ampc" train $mm --log "$tmp/m2.jsonl" --save "$tmp/m2.st" >/dev/null 2>&1 || die "mm run 2"
strip "$tmp/m1.jsonl" >"$tmp/m1.txt"
strip "$tmp/m2.jsonl" >"$tmp/m2.txt"
[ "$(grep -c '"event":"step"' "$tmp/m1.txt")" = 80 ] || die "mm: expected 80 step lines"
grep -q '"skipped":true' "$tmp/m1.txt" || die "mm: no skipped step in the determinism case"
cmp -s "$tmp/m1.txt" "$tmp/m2.txt" || die "mm-micro: same seed and threads, different logs"
cmp -s "$tmp/m1.st" "$tmp/m2.st" || die "mm-micro: same seed and threads, different checkpoints"
# resumed at k = 37 (between two evaluations, after skipped steps)
"$ampc" train $mm --stop-at 37 --log "$tmp/p.jsonl" --save "$tmp/p.st" >/dev/null 2>&1 ||
  die "mm interrupted run"
"$ampc" train $mm --resume "$tmp/p.st" --log "$tmp/p.jsonl" --save "$tmp/r.st" >/dev/null 2>&1 ||
  die "mm resumed run"
steps() { grep '"event":"step"\|"event":"eval"' "$1"; }
steps "$tmp/m1.txt" >"$tmp/full.txt"
strip "$tmp/p.jsonl" >"$tmp/p.txt"
# (the interrupted run evaluates at its last step, 37, as every run does)
steps "$tmp/p.txt" | grep -v '"event":"eval","step":37,' >"$tmp/pr.txt"
cmp -s "$tmp/full.txt" "$tmp/pr.txt" || die "mm-micro: resumed run's step/eval lines differ"
grep -q '"skipped":true' "$tmp/pr.txt" || die "mm: no skipped step"
cmp -s "$tmp/m1.st" "$tmp/r.st" || die "mm-micro: resumed run's final checkpoint differs"

[ $fail = 0 ] && echo "check_crash: ok"
exit $fail
