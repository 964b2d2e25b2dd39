#!/bin/sh
# tests/check_example.sh AMPC TRAIN_MM TEST_ROBUST: examples/train_mm.c (a run
# through the public library only) writes the checkpoint `ampc train` writes
# with the same settings, bit for bit, and the same log up to its timings.
set -u
. "$(dirname "$0")/cli_lib.sh"
ampc=$1 example=$2 robust=$3
"$robust" --write-dataset "$tmp/d8.ampcds" || die "writing the 8x8 dataset"
mkdir "$tmp/lib" "$tmp/cli" # the same file names: the log names the checkpoint
"$example" "$tmp/d8.ampcds" "$tmp/lib/log.jsonl" "$tmp/lib/ck.st" mm-micro 6 8 >"$tmp/out" 2>"$tmp/err" ||
  die "the example exited $? ($(cat "$tmp/err"))"
grep -q "^done: 6 steps" "$tmp/out" || die "the example did not report 6 steps"
"$ampc" train --model mm-micro --data "$tmp/d8.ampcds" --steps 6 --batch 8 --seed 1 \
  --eval-every 0 --quiet --log "$tmp/cli/log.jsonl" --save "$tmp/cli/ck.st" >/dev/null 2>"$tmp/err" ||
  die "ampc train exited $? ($(cat "$tmp/err"))"
cmp -s "$tmp/lib/ck.st" "$tmp/cli/ck.st" || die "the library's checkpoint differs from the CLI's"
strip() { sed -E -e 's/"(ms|wall_s|ms_per_step_mean|peak_rss_bytes|cores)":[^,}]*,?//g' -e 's/"cpu":\{[^}]*\},?//' "$1"; }
strip "$tmp/lib/log.jsonl" | sed "s|$tmp/lib/|DIR/|g" >"$tmp/a"
strip "$tmp/cli/log.jsonl" | sed "s|$tmp/cli/|DIR/|g" >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || die "the library's log differs from the CLI's: $(diff "$tmp/a" "$tmp/b" | head -c 600)"
[ "$(grep -c '"event":"step"' "$tmp/lib/log.jsonl")" = 6 ] || die "expected 6 step lines"
exit $fail
