#!/bin/sh
# tests/check_quantize.sh AMPC SRC: `ampc quantize` end to end on a short
# run's checkpoint. Per channel (keeping the default first and last layers)
# and per tensor (--keep none), the file is read back by PyTorch
# (tests/reference/quant_readback.py: scales, range, half-step round trip,
# the F32 tensors unchanged; skipped with the reason without python3-torch);
# the report names the most sensitive layers; `ampc eval` runs the file with
# INT8 GEMMs, the same metrics on every vector path. Bad input writes nothing: a
# NaN weight (exit 1, the tensor named), a truncated checkpoint, a file with
# no weights (exit 1), an unknown --keep layer, --out = the checkpoint, a
# bad --granularity or a missing flag (exit 2). Calibration (--calib): static
# activation scales in the file (PyTorch reads them), the eval's metrics the
# same on AVX2; --keep auto evaluates its choices; bad calibration flags
# (exit 2), --calib on an MLP or with bad data (exit 1).
. "$(dirname "$0")/cli_lib.sh"
src=$2
here=$(dirname "$0")
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
"$ampc" train --steps 3 --batch 16 --threads 1 --no-eval --quiet --save "$tmp/run.st" \
  >/dev/null 2>"$tmp/err" || die "the training run exited $? ($(cat "$tmp/err"))"

"$ampc" quantize --checkpoint "$tmp/run.st" --out "$tmp/ch.st" >"$tmp/out" 2>"$tmp/err" ||
  die "quantize exited $? ($(cat "$tmp/err"))"
grep -q "^vision.blocks.0.mlp.fc1.weight  *512x128 .* [0-9][0-9]*\.[0-9]  *[0-9]" "$tmp/out" ||
  die "no SQNR row for vision.blocks.0.mlp.fc1: $(head -3 "$tmp/out")"
grep -q "^heads.itm.weight .*kept f32" "$tmp/out" || die "heads.itm is not kept by default"
grep -q "^most sensitive (lowest SQNR): [a-z]" "$tmp/out" || die "no sensitive layers named"
"$ampc" quantize --checkpoint "$tmp/run.st" --out "$tmp/t.st" --granularity tensor --keep none \
  --json >"$tmp/j" 2>"$tmp/err" || die "quantize per tensor exited $? ($(cat "$tmp/err"))"
[ "$(field params_kept <"$tmp/j")" = 0 ] || die "--keep none kept layers: $(cat "$tmp/j")"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$src/tests/reference/quant_readback.py" "$tmp/run.st" "$tmp/ch.st" channel \
    vision.patch_embed,heads || die "PyTorch read-back (per channel) failed"
  /usr/bin/python3 "$src/tests/reference/quant_readback.py" "$tmp/run.st" "$tmp/t.st" tensor "" ||
    die "PyTorch read-back (per tensor) failed"
else
  echo "skipped the PyTorch read-back: /usr/bin/python3 cannot import torch (python3-torch)"
fi

# INT8 inference: ampc eval on the quantized file runs the blocks' 32 linear
# layers in INT8 (mm-tiny: 4 + 3 + 1 blocks, 4 weights each); the integer
# sums are exact, so the AVX2 paths give the same metrics as the default ones
"$ampc" eval --checkpoint "$tmp/ch.st" --threads 2 --json >"$tmp/e1" 2>"$tmp/err" ||
  die "eval of the INT8 file exited $? ($(cat "$tmp/err"))"
[ "$(field int8_layers <"$tmp/e1")" = 32 ] || die "eval: not 32 INT8 layers: $(cat "$tmp/e1")"
grep -q '"precision":"32-true"' "$tmp/e1" || die "eval: the INT8 file is not evaluated in 32-true"
AMPC_ISA=avx2 "$ampc" eval --checkpoint "$tmp/ch.st" --threads 2 --json >"$tmp/e2" 2>"$tmp/err" ||
  die "eval (AVX2) exited $?"
cmp -s "$tmp/e1" "$tmp/e2" || die "the AVX2 paths' INT8 eval differs: $(cat "$tmp/e1" "$tmp/e2")"

# calibrated (static) activation scales: NAME_input_scale for each block
# layer (PyTorch reads them), the eval runs them, the same on AVX2; the
# report gives the activations' SQNR
"$ampc" quantize --checkpoint "$tmp/run.st" --out "$tmp/cal.st" --calib 2 --batch 16 \
  --calib-method=max >"$tmp/out" 2>"$tmp/err" || die "quantize --calib exited $? ($(cat "$tmp/err"))"
grep -q "^activations: static scales by max over 2 batches of 16" "$tmp/out" ||
  die "no calibration summary: $(tail -4 "$tmp/out")"
grep -q "^vision.blocks.0.mlp.fc2.weight .* 0.000%$" "$tmp/out" ||
  die "max calibration clipped, or no activation column: $(grep fc2 "$tmp/out" | head -2)"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$src/tests/reference/quant_readback.py" "$tmp/run.st" "$tmp/cal.st" channel \
    vision.patch_embed,heads calibrated || die "PyTorch read-back (calibrated) failed"
fi
"$ampc" eval --checkpoint "$tmp/cal.st" --threads 2 --json >"$tmp/e1" 2>"$tmp/err" ||
  die "eval of the calibrated file exited $? ($(cat "$tmp/err"))"
grep -q '"activation_scales":"max, 2 batches"' "$tmp/e1" || die "eval: not static: $(cat "$tmp/e1")"
AMPC_ISA=avx2 "$ampc" eval --checkpoint "$tmp/cal.st" --threads 2 --json >"$tmp/e2" 2>"$tmp/err" ||
  die "eval (AVX2, calibrated) exited $?"
cmp -s "$tmp/e1" "$tmp/e2" || die "the AVX2 paths' calibrated eval differs"
"$ampc" quantize --checkpoint "$tmp/run.st" --out "$tmp/cal2.st" --calib 1 --batch 8 --json \
  >"$tmp/j" 2>"$tmp/err" || die "quantize --calib (mse, json) exited $? ($(cat "$tmp/err"))"
grep -q '"calibration":{"method":"mse","batches":1,' "$tmp/j" || die "json: no calibration"
grep -q '"activations":\[{"part":0,' "$tmp/j" || die "json: no activations per layer"

# --keep auto: the baseline and the all-INT8 model evaluated; a budget of
# 100 points keeps nothing
"$ampc" quantize --checkpoint "$tmp/run.st" --out "$tmp/auto.st" --keep auto --max-drop 100 \
  --threads 2 --json >"$tmp/j" 2>"$tmp/err" || die "--keep auto exited $? ($(cat "$tmp/err"))"
[ "$(field params_kept <"$tmp/j")" = 0 ] || die "--keep auto --max-drop 100 kept layers"
grep -q "in FP32 has group accuracy" "$tmp/err" || die "--keep auto: no baseline: $(cat "$tmp/err")"
grep -q "^ampc quantize: --keep auto: 0 kept: group accuracy .* (drop " "$tmp/err" ||
  die "--keep auto: no trial line: $(cat "$tmp/err")"

# an MLP checkpoint: the default --keep (the multimodal model's first and
# last layers) does not apply and is not an error
"$ampc" train --model mlp --steps 2 --threads 1 --quiet --save "$tmp/mlp.st" >/dev/null 2>&1 ||
  die "the MLP run failed"
"$ampc" quantize --checkpoint "$tmp/mlp.st" --out "$tmp/mlp8.st" >/dev/null 2>"$tmp/err" ||
  die "quantize of an MLP checkpoint exited $? ($(cat "$tmp/err"))"

# bad input: a clear error, nothing written
python3 "$here/scale_tensor.py" "$tmp/run.st" "$tmp/nan.st" text.blocks.1.mlp.fc2.weight nan ||
  die "cannot write the NaN checkpoint"
expect 1 quantize --checkpoint "$tmp/nan.st" --out "$tmp/x.st"
grep -q "text.blocks.1.mlp.fc2.weight" "$tmp/err" || die "the NaN weight's tensor is not named: $(cat "$tmp/err")"
head -c 5000 "$tmp/run.st" >"$tmp/short.st"
expect 1 quantize --checkpoint "$tmp/short.st" --out "$tmp/x.st"
printf 'hello' >"$tmp/junk.st"
expect 1 quantize --checkpoint "$tmp/junk.st" --out "$tmp/x.st"
expect 2 quantize --checkpoint "$tmp/ch.st" --out "$tmp/x.st"
grep -q "already quantized" "$tmp/err" || die "an INT8 file as the checkpoint: $(cat "$tmp/err")"
python3 "$here/scale_tensor.py" "$tmp/run.st" "$tmp/emb.st" text.token_embed.weight nan ||
  die "cannot write the NaN embedding"
expect 1 quantize --checkpoint "$tmp/emb.st" --out "$tmp/x.st" # not a linear layer, still refused
grep -q "text.token_embed.weight" "$tmp/err" || die "the NaN embedding is not named: $(cat "$tmp/err")"
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --calib-method max
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --percentile=99
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --data "$tmp/junk.st"
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --keep vision.nosuch
grep -q "vision.nosuch" "$tmp/err" || die "the unknown --keep layer is not named"
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/run.st"
cp "$tmp/run.st" "$tmp/keep.st"
ln -s "$tmp/run.st" "$tmp/link.st"
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/./run.st"
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/link.st"
expect 2 quantize --checkpoint "$tmp/link.st" --out "$tmp/run.st"
cmp -s "$tmp/run.st" "$tmp/keep.st" || die "quantize replaced its own checkpoint"
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --keep ''
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --keep none,heads
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --keep vision,text,fusion,heads
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --granularity row
expect 2 quantize --checkpoint "$tmp/run.st"
expect 1 quantize --checkpoint "$tmp/missing.st" --out "$tmp/x.st"
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --calib 0
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --calib 2 --calib-method entropy
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --calib 2 --percentile 0
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --max-drop 1
expect 2 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --keep auto,heads
expect 1 quantize --checkpoint "$tmp/mlp.st" --out "$tmp/x.st" --calib 1
grep -q "MLP" "$tmp/err" || die "--calib on an MLP: $(cat "$tmp/err")"
expect 1 quantize --checkpoint "$tmp/run.st" --out "$tmp/x.st" --calib 1 --data "$tmp/junk.st"
expect 1 quantize --checkpoint "$tmp/nan.st" --out "$tmp/x.st" --calib 1 --batch 4
[ -e "$tmp/x.st" ] && die "a failed quantize wrote its output"
ls "$tmp" | grep -q '\.tmp' && die "a temporary file was left behind"
[ $fail = 0 ] && echo "check_quantize: ok"
exit $fail
