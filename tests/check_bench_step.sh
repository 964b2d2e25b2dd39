#!/bin/sh
# tests/check_bench_step.sh AMPC: `ampc bench step` prints the
# documented JSON keys for a tiny run of each model family, the text form
# prints a line, and bad usage exits 2. Never asserts timing.
. "$(dirname "$0")/cli_lib.sh"

out=$("$ampc" bench step --model vit-ref --batch 4 --steps 2 --warmup 1 --json) || die "vit-ref exited $?"
for k in model precision batch threads ms_per_step_median peak_rss_bytes; do
  echo "$out" | grep -q "\"$k\":" || die "no key $k: $out"
done
echo "$out" | grep -q '"model":"vit-ref"' || die "model: $out"
echo "$out" | grep -q '"precision":"16-mixed"' || die "precision: $out"
[ "$(echo "$out" | field batch)" = 4 ] || die "batch: $out"
[ "$(echo "$out" | field parameters)" = 821642 ] || die "vit-ref parameters: $out"
echo "$out" | field ms_per_step_median | grep -q '^[0-9]' || die "ms_per_step_median: $out"
echo "$out" | field peak_rss_bytes | grep -q '^[1-9]' || die "peak_rss_bytes: $out"

out=$("$ampc" bench step --model mm-tiny --precision 32-true --batch 2 --steps 1 --warmup 0 --threads 1 --json) ||
  die "mm-tiny exited $?"
[ "$(echo "$out" | field parameters)" = 2113931 ] || die "mm-tiny parameters: $out"
[ "$(echo "$out" | field threads)" = 1 ] || die "threads: $out"
"$ampc" bench step --model vit-ref --precision bf16-mixed --batch 2 --steps 1 --warmup 0 --dim 64 |
  grep -q "ms/step" || die "text output"

for bad in "--model nope" "--precision 8-mixed" "--batch 1" "--steps x" "--dim 66" "--frobnicate"; do
  # shellcheck disable=SC2086
  "$ampc" bench step $bad --steps 1 --warmup 0 >/dev/null 2>&1
  rc=$?
  [ "$rc" = 2 ] || die "bench step $bad exited $rc, expected 2"
done
[ $fail = 0 ] && echo "bench step: ok"
exit $fail
