#!/bin/sh
# tests/check_stall.sh AMPC: a run that can no longer learn says so while it
# runs (--on-stall), on mm-tiny with the bundled data.
# 1. --lr 100: the weights blow up, the loss turns
#    non-finite; with the default (stop) the run prints the stall and the
#    diagnosis on stderr at once, logs a "stall" event and a summary, exits 3
#    and writes no checkpoint after the stall (--save-every 2: the last
#    checkpoint is the one before the loss went non-finite, and no save
#    happens on an unhealthy step).
# 2. The same with --on-stall warn: printed and logged once, the run goes on
#    to its last step and exits 0.
# 3. A dynamic scale pinned at its floor (--init-scale = --min-scale = 2^60:
#    every gradient overflows binary16): stalls after hysteresis + 2 = 3
#    overflowing steps, or after --stall-steps N.
# 4. A healthy run never stalls.
. "$(dirname "$0")/cli_lib.sh"
OMP_WAIT_POLICY=passive
export OMP_WAIT_POLICY
common="--threads 2 --no-eval --batch 8 --telemetry-every 0"

# 1. stop
"$ampc" train $common --steps 40 --lr 100 --log "$tmp/s.jsonl" --save "$tmp/s.st" --save-every 2 \
  >"$tmp/s.out" 2>"$tmp/s.err"
rc=$?
[ $rc -eq 3 ] || die "--lr 100: exit $rc, expected 3"
grep -q "the run stalled at step" "$tmp/s.err" || die "--lr 100: no stall message on stderr"
grep -q "^diagnosis: nonfinite-independent-of-scale" "$tmp/s.err" || die "--lr 100: no live diagnosis"
# --json: the stalled run's summary on stdout, its diagnosis included
"$ampc" train $common --steps 40 --lr 100 --json >"$tmp/j.out" 2>/dev/null
rc=$?
[ $rc -eq 3 ] || die "--lr 100 --json: exit $rc, expected 3"
grep -q '^{"event":"summary".*"verdict":"nonfinite-independent-of-scale"' "$tmp/j.out" ||
  die "--lr 100 --json: no summary with the diagnosis on stdout: $(head -c 300 "$tmp/j.out")"
grep -q '"event":"stall".*"policy":"stop"' "$tmp/s.jsonl" || die "--lr 100: no stall event in the log"
grep -q '"event":"summary"' "$tmp/s.jsonl" || die "--lr 100: no summary line"
python3 - "$tmp/s.jsonl" <<'PY' || die "--lr 100: a checkpoint was written on or after an unhealthy step"
import json, math, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
stall = [e for e in ev if e.get("event") == "stall"][0]["step"]
steps = {e["step"]: e for e in ev if e.get("event") == "step"}
assert max(steps) == stall, (max(steps), stall)   # nothing ran after the stall
bad = [k for k, e in steps.items() if e["loss"] is None or not math.isfinite(e["loss"])]
assert bad, "the loss never went non-finite"
skipped = [e["step"] for e in ev if e.get("event") == "save_skipped"]
# every even step with a non-finite loss had its save skipped
assert all(k in skipped for k in bad if k % 2 == 0 and k < stall), (bad, skipped)
PY
# the checkpoint that remains is a complete, earlier one: it resumes
if [ -f "$tmp/s.st" ]; then
  "$ampc" eval --checkpoint "$tmp/s.st" --json >/dev/null 2>&1 || die "--lr 100: the kept checkpoint does not load"
fi

# 2. warn
"$ampc" train $common --steps 12 --lr 100 --on-stall warn --log "$tmp/w.jsonl" >/dev/null 2>"$tmp/w.err" ||
  die "--on-stall warn: exit $?"
[ "$(grep -c 'the run stalled at step' "$tmp/w.err")" -eq 1 ] || die "--on-stall warn: not printed exactly once"
grep -q '"event":"stall".*"policy":"warn"' "$tmp/w.jsonl" || die "--on-stall warn: no stall event"
grep -q '"event":"step","step":12,' "$tmp/w.jsonl" || die "--on-stall warn: the run did not go on to step 12"

# 3. the scale's floor
floor="--init-scale 1152921504606846976 --min-scale 1152921504606846976"
"$ampc" train $common --steps 20 $floor --log "$tmp/f.jsonl" >/dev/null 2>"$tmp/f.err"
rc=$?
[ $rc -eq 3 ] || die "scale at its floor: exit $rc, expected 3"
grep -q '"event":"stall","step":3,.*"3 consecutive steps overflowed with the loss scale at its floor' \
  "$tmp/f.jsonl" || die "scale at its floor: not stalled at step 3 for the floor"
"$ampc" train $common --steps 20 $floor --stall-steps 5 --log "$tmp/f5.jsonl" >/dev/null 2>&1
grep -q '"event":"stall","step":5,' "$tmp/f5.jsonl" || die "--stall-steps 5: not stalled at step 5"
expect 2 train --stall-steps 0
expect 2 train --on-stall maybe

# 4. healthy
"$ampc" train $common --steps 6 --log "$tmp/h.jsonl" >/dev/null 2>&1 || die "healthy run: exit $?"
grep -q '"event":"stall"' "$tmp/h.jsonl" && die "a healthy run stalled"
[ $fail -eq 0 ] && echo "check_stall: all cases passed"
exit $fail
