#!/bin/sh
# tests/check_qat.sh AMPC: quantization-aware fine-tuning end to end. A
# short run's checkpoint is resumed with --fake-quant int8 (the banner, the
# log's config line and the checkpoint's metadata say so; the training
# differs from a plain resume's and is deterministic); `ampc quantize` and
# `ampc eval` take the QAT checkpoint (FP32 and INT8); resuming it without
# fake quantization warns. Bad flags are usage errors (exit 2): an unknown
# --fake-quant value, the MLP, an image-only ViT, fp8-mixed, a device.
. "$(dirname "$0")/cli_lib.sh"
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
run="--batch 16 --threads 1 --no-eval --precision 32-true"

"$ampc" train $run --steps 3 --quiet --save "$tmp/run.st" >/dev/null 2>"$tmp/err" ||
  die "the training run exited $? ($(cat "$tmp/err"))"
# QAT: steps 4 and 5 fake-quantized (--steps counts from the run's start)
"$ampc" train $run --steps 5 --resume "$tmp/run.st" --fake-quant int8 --save "$tmp/qat.st" \
  --log "$tmp/qat.jsonl" >"$tmp/out" 2>"$tmp/err" || die "the QAT resume exited $? ($(cat "$tmp/err"))"
grep -q "^ampc train: mm-tiny, precision 32-true: .*, fake quant int8 " "$tmp/out" ||
  die "the banner does not say fake quant int8: $(head -1 "$tmp/out")"
grep -q "^ampc train: resumed from .*run.st at step 3 of 5" "$tmp/out" ||
  die "not resumed at step 3 of 5: $(head -2 "$tmp/out")"
grep -q "^done: 5 steps" "$tmp/out" || die "the QAT run did not end at step 5: $(tail -1 "$tmp/out")"
head -1 "$tmp/qat.jsonl" | grep -q '"fake_quant":"int8"' || die "the log's config has no fake_quant int8"
grep -c '"event":"step"' "$tmp/qat.jsonl" | grep -qx 2 || die "not 2 step lines in the QAT log"
head -c 4096 "$tmp/qat.st" | grep -q '"ampc.fake_quant":"int8"' ||
  die "the QAT checkpoint has no ampc.fake_quant metadata"
head -c 4096 "$tmp/run.st" | grep -q 'ampc.fake_quant' && die "a plain checkpoint says fake_quant"

# the same steps without fake quantization give other weights; QAT again, the same bytes
"$ampc" train $run --steps 5 --resume "$tmp/run.st" --quiet --save "$tmp/plain.st" >/dev/null \
  2>"$tmp/err" || die "the plain resume exited $? ($(cat "$tmp/err"))"
cmp -s "$tmp/qat.st" "$tmp/plain.st" && die "fake quantization changed nothing"
"$ampc" train $run --steps 5 --resume "$tmp/run.st" --fake-quant int8 --quiet --save "$tmp/qat2.st" \
  >/dev/null 2>"$tmp/err" || die "the second QAT resume exited $?"
cmp -s "$tmp/qat.st" "$tmp/qat2.st" || die "two QAT runs differ"

# the QAT checkpoint: evaluated in FP32, quantized, evaluated in INT8
"$ampc" eval --checkpoint "$tmp/qat.st" --threads 2 --json >"$tmp/e0" 2>"$tmp/err" ||
  die "eval of the QAT checkpoint exited $? ($(cat "$tmp/err"))"
grep -q '"step":5' "$tmp/e0" || die "eval: the QAT checkpoint is not at step 5: $(cat "$tmp/e0")"
"$ampc" quantize --checkpoint "$tmp/qat.st" --out "$tmp/qat8.st" >/dev/null 2>"$tmp/err" ||
  die "quantize of the QAT checkpoint exited $? ($(cat "$tmp/err"))"
"$ampc" eval --checkpoint "$tmp/qat8.st" --threads 2 --json >"$tmp/e1" 2>"$tmp/err" ||
  die "eval of the INT8 QAT file exited $? ($(cat "$tmp/err"))"
[ "$(field int8_layers <"$tmp/e1")" = 32 ] || die "eval: not 32 INT8 layers: $(cat "$tmp/e1")"

# resuming a QAT checkpoint without fake quantization: allowed, with a warning
"$ampc" train $run --steps 6 --resume "$tmp/qat.st" --quiet --save "$tmp/after.st" >/dev/null \
  2>"$tmp/err" || die "resuming the QAT checkpoint plainly exited $? ($(cat "$tmp/err"))"
grep -q "warning: .*qat.st was trained with --fake-quant int8, this run has none" "$tmp/err" ||
  die "no warning on dropping fake quantization: $(cat "$tmp/err")"

# bad flags: usage errors naming the problem, nothing written
expect 2 train $run --steps 2 --fake-quant int4 --save "$tmp/x.st"
grep -q "fake-quant" "$tmp/err" || die "--fake-quant int4: $(cat "$tmp/err")"
expect 2 train --model mlp --steps 2 --fake-quant int8 --save "$tmp/x.st"
grep -q "fake-quant int8: --model mlp" "$tmp/err" || die "--model mlp: $(cat "$tmp/err")"
expect 2 train --model vit-ref $run --steps 2 --fake-quant int8 --save "$tmp/x.st"
grep -q "fake-quant int8: model vit-ref is image-only" "$tmp/err" || die "vit-ref: $(cat "$tmp/err")"
expect 2 train --batch 16 --steps 2 --precision fp8-mixed --fake-quant int8 --save "$tmp/x.st"
grep -q "fp8-mixed" "$tmp/err" || die "fp8-mixed: $(cat "$tmp/err")"
expect 2 train --batch 16 --steps 2 --device cuda --fake-quant int8 --save "$tmp/x.st"
expect 2 train --batch 16 --steps 2 --fake-quant --save "$tmp/x.st"
[ -e "$tmp/x.st" ] && die "a refused run wrote its checkpoint"
[ $fail = 0 ] && echo "check_qat: ok"
exit $fail
