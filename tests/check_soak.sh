#!/bin/sh
# tests/check_soak.sh AMPC TEST_ROBUST [KILLS]: kill-and-resume soak.
# 1. A 16-mixed mm-micro run on an 8x8 dataset (`test_robust
#    --write-dataset`) with --save-every 1 is killed with SIGKILL at seeded
#    random moments KILLS times (default 6; more by the argument), resumed
#    from its checkpoint each time, then run to its end. Its final checkpoint
#    must equal an uninterrupted run's byte for byte, and its log must hold,
#    for every step, the uninterrupted run's step and eval lines (timings
#    removed): a resumed run first cuts the log back to the checkpoint's
#    step, dropping what the killed run wrote after it, a torn last line
#    included.
# 2. Two runs (seeds 1 and 2) save to the same path at once, every step: a
#    copy of the file taken at any moment is a complete checkpoint (it
#    loads), and the file left is one of the two runs' final checkpoints,
#    never a mix.
set -u
OMP_WAIT_POLICY=passive
export OMP_WAIT_POLICY
ampc=$1
robust=$2
kills=${3:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }
"$robust" --write-dataset "$tmp/d8.ampcds" || { echo "FAIL: writing the dataset" >&2; exit 1; }
steps=$((kills * 20 > 120 ? kills * 20 : 120)) # long enough for every kill
flags="--model mm-micro --data $tmp/d8.ampcds --batch 8 --steps $steps --eval-every 30 --threads 2"
flags="$flags --telemetry-every 5 --quiet --save-every 1"

"$ampc" train $flags --log "$tmp/ref.jsonl" --save "$tmp/ref.st" >/dev/null 2>&1 || die "reference run"

# 1. kill, resume, repeat: each run is killed once it has logged a new step
#    (so it is training, saving every step), after a further delay of 0..400
#    ms from a seeded LCG: inside a step, a log line or a checkpoint write
nsteps() {
  c=$(grep -c '"event":"step"' "$tmp/s.jsonl" 2>/dev/null)
  echo "${c:-0}"
}
seed=12345
n=0
done_=0
while [ $n -lt "$kills" ]; do
  res=""
  [ -f "$tmp/s.st" ] && res="--resume $tmp/s.st"
  before=$(nsteps)
  "$ampc" train $flags $res --log "$tmp/s.jsonl" --save "$tmp/s.st" >/dev/null 2>"$tmp/s.err" &
  pid=$!
  t=0
  while kill -0 "$pid" 2>/dev/null && [ "$(nsteps)" -le "$before" ] && [ $t -lt 2400 ]; do
    sleep 0.05
    t=$((t + 1))
  done
  seed=$(((seed * 1103515245 + 12345) % 2147483648))
  ms=$((seed % 400))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null
    n=$((n + 1))
  else
    wait "$pid" && done_=1
    break
  fi
done
if [ $done_ -eq 0 ]; then
  res=""
  [ -f "$tmp/s.st" ] && res="--resume $tmp/s.st"
  "$ampc" train $flags $res --log "$tmp/s.jsonl" --save "$tmp/s.st" >/dev/null 2>"$tmp/s.err" ||
    die "the last resume: exit $? ($(cat "$tmp/s.err"))"
fi
echo "check_soak: $n kills"
cmp -s "$tmp/ref.st" "$tmp/s.st" || die "after $n kills the final checkpoint differs from the uninterrupted run's"
python3 - "$tmp/ref.jsonl" "$tmp/s.jsonl" <<'PY' || die "after $n kills the log differs from the uninterrupted run's"
import json, sys
skip = {"ms", "wall_s", "ms_per_step_mean", "peak_rss_bytes", "resumed_from", "cores", "cpu"}
def clean(x):
    return {k: clean(v) for k, v in x.items() if k not in skip} if isinstance(x, dict) else x
def lines(p):
    out = []
    for l in open(p):
        o = json.loads(l)  # every line whole: no torn line survives
        if o.get("event") in ("step", "eval"):
            out.append(clean(o))
    return out
a, b = lines(sys.argv[1]), lines(sys.argv[2])
if a != b:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            sys.exit("line %d: %s step %s differs" % (i, x.get("event"), x.get("step")))
    sys.exit("%d lines against %d" % (len(a), len(b)))
PY

# 2. two writers, one path
one="--model mm-micro --data $tmp/d8.ampcds --batch 8 --steps 12 --no-eval --threads 1 --quiet"
"$ampc" train $one --seed 1 --save "$tmp/a.st" >/dev/null 2>&1 || die "writer a alone"
"$ampc" train $one --seed 2 --save "$tmp/b.st" >/dev/null 2>&1 || die "writer b alone"
"$ampc" train $one --seed 1 --save "$tmp/same.st" --save-every 1 >/dev/null 2>&1 &
pa=$!
"$ampc" train $one --seed 2 --save "$tmp/same.st" --save-every 1 >/dev/null 2>&1 &
pb=$!
copies=0
while kill -0 $pa 2>/dev/null || kill -0 $pb 2>/dev/null; do
  if cp "$tmp/same.st" "$tmp/copy.st" 2>/dev/null; then
    "$ampc" eval --checkpoint "$tmp/copy.st" --data "$tmp/d8.ampcds" --json >/dev/null 2>"$tmp/e.err" ||
      die "a copy of the shared checkpoint does not load: $(cat "$tmp/e.err")"
    copies=$((copies + 1))
  fi
done
wait $pa || die "writer a: exit $?"
wait $pb || die "writer b: exit $?"
cmp -s "$tmp/same.st" "$tmp/a.st" || cmp -s "$tmp/same.st" "$tmp/b.st" ||
  die "the shared checkpoint is neither run's final checkpoint"
echo "check_soak: $copies copies of the shared checkpoint loaded"
[ $fail -eq 0 ] && echo "check_soak: ok"
exit $fail
