#!/bin/sh
# tests/check_main.sh AMPC: the main job's commands end to end on the bundled
# emoji data: a short mm-tiny run with a checkpoint, `ampc eval` on it (text and
# JSON), and the errors for bad data, models and checkpoints (exit 1 or 2 with a
# message, nothing overwritten).
. "$(dirname "$0")/cli_lib.sh"

"$ampc" train --steps 2 --batch 8 --eval-every 0 --quiet --save "$tmp/mm.st" --log "$tmp/mm.jsonl" \
  --json >"$tmp/sum.json" 2>"$tmp/err" || die "mm-tiny run exited $? ($(cat "$tmp/err"))"
grep -q '"model":"mm-tiny"' "$tmp/sum.json" || die "summary does not name mm-tiny"
grep -q '"new_style":{' "$tmp/sum.json" || die "summary has no new-style metrics"
grep -q '"zero_shot":{' "$tmp/sum.json" || die "summary has no zero-shot metrics"
head -n 1 "$tmp/mm.jsonl" | grep -q '^{"event":"config"' || die "log does not start with config"
grep -q '"loss_itc":' "$tmp/mm.jsonl" || die "step lines lack the loss terms"
"$ampc" eval --checkpoint "$tmp/mm.st" --json >"$tmp/eval.json" 2>"$tmp/err" ||
  die "eval exited $? ($(cat "$tmp/err"))"
grep -q '"i2t_r1":' "$tmp/eval.json" || die "eval JSON lacks i2t_r1"

expect 1 train --steps 1 --batch 4 --data "$tmp/missing.ampcds"
printf 'AMPCDS01garbage' >"$tmp/bad.ampcds"
expect 1 train --steps 1 --batch 4 --data "$tmp/bad.ampcds"
grep -q "bad.ampcds" "$tmp/err" || die "bad dataset error does not name the file"
expect 1 train --steps 1 --batch 4 --data "fashion-mnist:$tmp/nowhere"
expect 2 train --steps 1 --model mm-huge
expect 2 train --steps 1 --batch 4 --model mm-micro   # 8x8 model, 32x32 data
grep -q "(models for them: mm-tiny, mm-small, mm-base, mm-large, vit-ref)" "$tmp/err" ||
  die "train --model mm-micro does not name the models that fit: $(cat "$tmp/err")"
# image-only data: the default model becomes vit-fm, a --model named is kept
if [ -d /usr/share/datasets/fashion-mnist ]; then # Debian's dataset-fashion-mnist
  expect 2 train --steps 1 --batch 4 --model mm-tiny --data fashion-mnist
  grep -q "models for its 28x28x1 images: vit-fm" "$tmp/err" ||
    die "mm-tiny on fashion-mnist: $(cat "$tmp/err")"
fi
expect 2 train --steps 1 --batch 1                    # contrastive loss needs 2
expect 2 train --steps 1 --batch 100000
expect 1 eval --checkpoint "$tmp/missing.st"
expect 2 eval
expect 2 eval --checkpoint "$tmp/mm.st" --precision 8-mixed
"$ampc" train --model mlp --steps 2 --quiet --save "$tmp/mlp.st" >/dev/null 2>&1
expect 1 eval --checkpoint "$tmp/mlp.st"
grep -q "a checkpoint of the MLP" "$tmp/err" || die "eval of an MLP checkpoint: $(cat "$tmp/err")"
expect 1 train --steps 3 --batch 8 --eval-every 0 --resume "$tmp/mlp.st"
cp "$tmp/mm.st" "$tmp/mm.copy"
expect 2 train --steps 1 --batch 8 --save "$tmp/mm.st" --log "$tmp/mm.st"
cmp -s "$tmp/mm.st" "$tmp/mm.copy" || die "a refused run changed the checkpoint"

# an environment switch with a value the library does not know: a warning
# naming it, and the command still runs
AMPC_CUDA_TYPED=yes "$ampc" formats >/dev/null 2>"$tmp/err" || die "formats with AMPC_CUDA_TYPED=yes exited $?"
grep -q "AMPC_CUDA_TYPED='yes' is not one of 1, on, 0, off" "$tmp/err" ||
  die "no warning for AMPC_CUDA_TYPED=yes: $(cat "$tmp/err")"
AMPC_CUDA_GEMM_TUNE=on "$ampc" formats >/dev/null 2>"$tmp/err"
[ -s "$tmp/err" ] && die "AMPC_CUDA_GEMM_TUNE=on warned: $(cat "$tmp/err")"

# every help text fits 80 columns
for c in "" formats convert bench train eval data diagnose compare memory plan inspect; do
  # shellcheck disable=SC2086 # the empty command is the top-level help
  "$ampc" $c --help >"$tmp/help" 2>&1 || die "ampc $c --help exited $?"
  wide=$(awk 'length > 80 { n++ } END { print n + 0 }' "$tmp/help")
  [ "$wide" = 0 ] || die "ampc $c --help: $wide lines wider than 80 columns"
done

# a --precision list answers its question: each preset against 32-true (the
# loss gap with its standard error, the savings) from logs it keeps in ampc-runs/
(cd "$tmp" && "$ampc" train --precision 32-true,16-mixed --steps 10 --batch 8 --threads 1 \
  --eval-every 0 --quiet) >"$tmp/list.out" 2>"$tmp/err" || die "the list exited $? ($(cat "$tmp/err"))"
grep -Eq '^16-mixed vs 32-true: (no significant loss gap|loss gap) \([-+][0-9.]+ % \+- [0-9.]+ %' \
  "$tmp/list.out" || die "no answer line: $(cat "$tmp/list.out")"
grep -q 'activations+workspace 0\.[0-9]*x' "$tmp/list.out" || die "the answer lacks the savings"
grep -q '^logs: ampc-runs/' "$tmp/list.out" || die "the list did not keep its logs"
ls "$tmp"/ampc-runs/*/16-mixed.jsonl >/dev/null 2>&1 || die "no ampc-runs/*/16-mixed.jsonl"
grep -Eq '; activations\+workspace 0\.[0-9]+x, parameter state 1\.00x, peak RSS [0-9.]+x(, step time [0-9.]+x|; step time not compared \(the machine was busy\))$' \
  "$tmp/list.out" || die "the answer lacks parameter state, peak RSS or step time: $(grep vs "$tmp/list.out")"

# verdicts agree with the outcome: 16-mixed without loss scaling flushes
# gradients (the underflow signature) while its loss equals FP32's; the
# signature is reported as present without a loss gap, never as the verdict
(cd "$tmp" && "$ampc" train --precision 32-true,16-mixed --loss-scale none --steps 10 --batch 8 \
  --threads 1 --no-eval --log "$tmp/runs.jsonl") >"$tmp/list.out" 2>"$tmp/err" ||
  die "the list exited $? ($(cat "$tmp/err"))"
grep -q '^diagnosis: underflow (vision): present, no loss gap against 32-true$' "$tmp/list.out" ||
  die "the underflow signature is not marked harmless: $(grep diagnosis "$tmp/list.out")"
grep -c '^diagnosis: ' "$tmp/list.out" | grep -qx 2 ||
  die "another verdict was printed: $(grep diagnosis "$tmp/list.out")"
grep -Eq '^16-mixed vs 32-true: no significant loss gap \([-+]0\.00 % \+- 0\.00 %\) over steps 6-10, underflow present without a loss gap; ' \
  "$tmp/list.out" || die "the answer does not agree: $(grep vs "$tmp/list.out")"
# ampc diagnose on the same logs agrees
"$ampc" diagnose "$tmp/runs.16-mixed.jsonl" --baseline "$tmp/runs.32-true.jsonl" >"$tmp/dg.out" 2>&1 ||
  die "diagnose exited $?"
grep -q '^verdict: underflow (present, no loss gap against the baseline)  branch: vision' "$tmp/dg.out" ||
  die "diagnose --baseline does not agree: $(grep verdict "$tmp/dg.out")"
# one checkpoint cannot resume a list
expect 2 train --precision 32-true,16-mixed --steps 2 --resume "$tmp/mm.st"
grep -q "resume one preset at a time" "$tmp/err" || die "a list's --resume: $(cat "$tmp/err")"
[ $fail = 0 ] && echo "check_main: ok"
exit $fail
