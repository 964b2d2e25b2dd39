#!/bin/sh
# bench/gpu/signatures.sh AMPC DEVICE OUTDIR: the failure-signature suite of
# tests/check_diagnose.sh (tests/signatures.txt) on a device: each run with
# `AMPC train --device DEVICE` on the bundled emoji pairs, then `AMPC
# diagnose`; one line per run (name, expected verdict, the device's verdict)
# into OUTDIR/signatures.txt (a failed run's last line in signatures.err),
# and exit 1 if any verdict differs. On the GPU
# machine AMPC is bench/gpu's ampc-gpu (train, diagnose, memory, plan without
# plotting); here it runs with --device cpu-split too.
set -u
if [ $# -ne 3 ]; then
  echo "usage: sh bench/gpu/signatures.sh AMPC DEVICE OUTDIR (e.g. build-gpu/ampc-gpu cuda /tmp/out)" >&2
  exit 2
fi
ampc=$1 dev=$2 out=$3
list="$(dirname "$0")/../../tests/signatures.txt"
common="--threads 1 --no-eval --quiet --batch 16 --on-stall warn"
mkdir -p "$out/sig"
: >"$out/signatures.txt"
: >"$out/signatures.err"
fail=0
while read -r name want flags; do
  case "$name" in '' | '#'*) continue ;; esac
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if "$ampc" train $common --device "$dev" --log "$out/sig/$name.jsonl" $flags \
    >"$out/sig/$name.out" 2>&1 </dev/null; then
    "$ampc" diagnose --json "$out/sig/$name.jsonl" >"$out/sig/$name.diag" 2>&1 </dev/null
    got=$(sed -n '1s/^{"verdict":"\([^"]*\)".*/\1/p' "$out/sig/$name.diag")
  else
    got="train-exit-$?"
    echo "$name: $(tail -n 1 "$out/sig/$name.out")" >>"$out/signatures.err"
  fi
  [ "$got" = "$want" ] || fail=1
  printf '%-10s expected %-32s got %-32s %3d s\n' "$name" "$want" "${got:-none}" \
    $(($(date +%s) - t0)) | tee -a "$out/signatures.txt"
done <"$list"
exit $fail
