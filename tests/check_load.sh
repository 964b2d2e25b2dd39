#!/bin/sh
# tests/check_load.sh AMPC: a run on an oversubscribed machine says so. With
# as many threads as CPUs and a shell busy loop beside it, the summary's
# "cpu" says timing "disturbed" with the other processes' cores, and the
# console says its step times are not comparable; on the same machine
# without the loop nothing is said about timing only when it came out clean
# (the test machine may be busy on its own). The wait policy ampc sets when
# the user sets none is passive (tools/ampc/main.c), and a user's own
# OMP_WAIT_POLICY is kept.
. "$(dirname "$0")/cli_lib.sh"
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OMP_NUM_THREADS
n=$(nproc)
common="--steps 16 --batch 16 --no-eval --threads $n"

sh -c 'while :; do :; done' &
busy=$!
"$ampc" train $common --json >"$tmp/sum.json" 2>"$tmp/err"
rc=$?
"$ampc" train $common >"$tmp/out.txt" 2>>"$tmp/err"
rc2=$?
kill $busy
[ $rc = 0 ] && [ $rc2 = 0 ] || die "the runs exited $rc, $rc2 ($(cat "$tmp/err"))"
grep -q '"cpu":{"threads":'"$n"',"cpus":'"$n"',' "$tmp/sum.json" ||
  die "no cpu account in the summary: $(cat "$tmp/sum.json")"
grep -q '"timing":"disturbed"' "$tmp/sum.json" ||
  die "a run beside a busy loop is not marked disturbed: $(cat "$tmp/sum.json")"
grep -q '"other_cores":0\.[5-9]\|"other_cores":1' "$tmp/sum.json" ||
  die "the busy loop's core is not counted: $(cat "$tmp/sum.json")"
grep -q "^timing: the machine was busy (other processes used [0-9.]* of $n cores while this run's $n threads trained): its step times are not comparable$" "$tmp/out.txt" ||
  die "no busy-machine line: $(tail -3 "$tmp/out.txt")"

# alone: a clean run prints no timing line
"$ampc" train $common --json >"$tmp/sum.json" 2>"$tmp/err" || die "the run exited $?"
if grep -q '"timing":"clean"' "$tmp/sum.json"; then
  grep -q '"cores_used":' "$tmp/sum.json" || die "no cores_used: $(cat "$tmp/sum.json")"
else
  echo "check_load: the machine was busy on its own; the clean case is not checked"
fi
# every step line counts the cores it used
"$ampc" train --steps 2 --batch 8 --no-eval --quiet --log "$tmp/l.jsonl" >/dev/null 2>&1
grep '"event":"step"' "$tmp/l.jsonl" | grep -qv '"cores":' && die "a step line lacks cores"

# the wait policy: passive unless the user chose (libgomp shows it with
# OMP_DISPLAY_ENV on stderr at its start)
OMP_DISPLAY_ENV=verbose "$ampc" formats >/dev/null 2>"$tmp/env"
grep -q "GOMP_SPINCOUNT = '0'" "$tmp/env" || die "ampc did not wait passively: $(grep SPIN "$tmp/env")"
OMP_DISPLAY_ENV=verbose OMP_WAIT_POLICY=active "$ampc" formats >/dev/null 2>"$tmp/env"
grep -q "OMP_WAIT_POLICY = 'ACTIVE'" "$tmp/env" || die "the user's OMP_WAIT_POLICY was not kept"
[ $fail = 0 ] && echo "check_load: ok"
exit $fail
