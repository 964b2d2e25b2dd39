#!/bin/sh
# tests/check_signal.sh AMPC: Ctrl-C keeps the work. SIGINT (and SIGTERM)
# during `ampc train --save F` stops the run after the step in progress,
# writes F, logs {"event":"interrupted"}, prints the command that resumes it
# and exits 130 (143); resuming gives the checkpoint of an uninterrupted run,
# bit for bit. Without --save it says there is nothing to resume from.
. "$(dirname "$0")/cli_lib.sh"
OMP_NUM_THREADS=1
OMP_WAIT_POLICY=PASSIVE
export OMP_NUM_THREADS OMP_WAIT_POLICY
common="--steps 30 --batch 8 --threads 1 --eval-every 0 --quiet"

# wait (at most 120 s) until log $1 has $2 step lines
wait_steps() {
  i=0
  while [ "$(cat "$1" 2>/dev/null | grep -c '"event":"step"')" -lt "$2" ] && [ $i -lt 1200 ]; do
    sleep 0.1
    i=$((i + 1))
  done
}

for sig in INT TERM; do
  rm -f "$tmp/a.st" "$tmp/a.jsonl"
  "$ampc" train $common --save "$tmp/a.st" --log "$tmp/a.jsonl" >/dev/null 2>"$tmp/err" &
  pid=$!
  wait_steps "$tmp/a.jsonl" 3
  kill -$sig $pid
  wait $pid
  rc=$?
  want=130
  [ $sig = TERM ] && want=143
  [ $rc = $want ] || die "SIG$sig: exit $rc, expected $want ($(cat "$tmp/err"))"
  grep -q '"event":"interrupted"' "$tmp/a.jsonl" || die "SIG$sig: no interrupted line in the log"
  grep -q '"event":"summary"' "$tmp/a.jsonl" || die "SIG$sig: no summary in the log"
  grep -q "interrupted (signal .*) at step [0-9]*; checkpoint $tmp/a.st; resume with:" "$tmp/err" ||
    die "SIG$sig: message: $(cat "$tmp/err")"
  grep -q -- "ampc train .* --resume $tmp/a.st" "$tmp/err" || die "SIG$sig: no resume command"
  [ -f "$tmp/a.st" ] || die "SIG$sig: no checkpoint"
done

# resuming the interrupted run = the uninterrupted run; it says where it goes on
"$ampc" train $common --resume "$tmp/a.st" --save "$tmp/b.st" >"$tmp/out" 2>"$tmp/err" ||
  die "resume exited $? ($(cat "$tmp/err"))"
grep -q "^ampc train: resumed from $tmp/a.st at step [0-9]* of 30" "$tmp/out" ||
  die "the resume does not say where: $(cat "$tmp/out")"
# another --batch is refused (each step would draw other samples)
expect 1 train --steps 30 --batch 16 --threads 1 --eval-every 0 --quiet --resume "$tmp/a.st"
grep -q "trained with --batch 8, this run has --batch 16" "$tmp/err" || die "batch: $(cat "$tmp/err")"
"$ampc" train $common --save "$tmp/c.st" >/dev/null 2>"$tmp/err" || die "full run exited $?"
cmp -s "$tmp/b.st" "$tmp/c.st" || die "the resumed checkpoint differs from the uninterrupted one"

# without --save: nothing to resume from, said so
"$ampc" train $common --log "$tmp/n.jsonl" >/dev/null 2>"$tmp/err" &
pid=$!
wait_steps "$tmp/n.jsonl" 2
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || die "without --save: exit $rc"
grep -q "no --save was given" "$tmp/err" || die "without --save: $(cat "$tmp/err")"

# a signal during the last evaluation: the checkpoint of the last step is
# written before it, and the evaluation stops
rm -f "$tmp/e.st" "$tmp/e.jsonl"
"$ampc" train --steps 4 --batch 8 --threads 1 --eval-every 0 --quiet --save "$tmp/e.st" \
  --log "$tmp/e.jsonl" >/dev/null 2>"$tmp/err" &
pid=$!
wait_steps "$tmp/e.jsonl" 4
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || die "a signal in the evaluation: exit $rc ($(cat "$tmp/err"))"
[ -f "$tmp/e.st" ] || die "a signal in the evaluation: no checkpoint"
grep -q '"event":"interrupted","step":4' "$tmp/e.jsonl" || die "a signal in the evaluation: no interrupted line"
grep -q '"event":"eval"' "$tmp/e.jsonl" && die "the evaluation was not stopped"
# a list's interrupted run: the command resumes that run alone
"$ampc" train --precision 32-true,16-mixed $common --save "$tmp/l.st" --log "$tmp/l.jsonl" \
  >/dev/null 2>"$tmp/err" &
pid=$!
wait_steps "$tmp/l.32-true.jsonl" 3
kill -INT $pid
wait $pid
grep -q -- "--precision 32-true .*--save $tmp/l.32-true.st --log $tmp/l.32-true.jsonl --resume $tmp/l.32-true.st$" "$tmp/err" ||
  die "a list's resume command: $(cat "$tmp/err")"
[ $fail = 0 ] && echo "check_signal: ok"
exit $fail
