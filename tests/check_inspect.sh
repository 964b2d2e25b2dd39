#!/bin/sh
# tests/check_inspect.sh AMPC TEST_INSPECT: `ampc inspect` through the CLI:
# the counts and the auto scale of a constructed file (every dtype
# the command reads; the values are documented in test_inspect.c's
# write_files), which files get loss-scale advice (gradients) and which are
# told whether they fit at scale 1 (weights, activations, a checkpoint of
# `ampc train --save`), the plot, and bad input: an empty file, a file that is not
# safetensors, a directory, no tensors, an integer tensor, bad flags, an
# unwritable plot: a message naming the file (and tensor), exit 1 (2 for usage).
set -u
ampc=$1
gen=$2
dir=$(mktemp -d /tmp/ampc_inspect.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }
"$gen" --write-files "$dir" || exit 1
m=$dir/mixed.safetensors

# expect CODE PATTERN CMD...: exit code CODE and PATTERN (grep -E) in stdout+stderr
expect() {
  code=$1 pat=$2
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$code" ] || die "'$*' exited $rc, not $code: $out"
  echo "$out" | grep -Eq -- "$pat" || die "'$*': no /$pat/ in: $out"
}
# key JSON NAME: the first number after "NAME": in JSON
num() { echo "$1" | grep -o "\"$2\":[-0-9.e]*" | head -n 1 | cut -d: -f2; }

# ---- counts and the auto scale -------------------------------------------------
j=$("$ampc" inspect "$m" --json) || die "inspect --json failed"
[ "$(num "$j" count)" = 8 ] || die "grad/vision.w: count $(num "$j" count), want 8"
[ "$(num "$j" zeros)" = 1 ] || die "grad/vision.w: zeros"
[ "$(num "$j" nonfinite)" = 1 ] || die "grad/vision.w: nonfinite"
[ "$(num "$j" flushed)" = 2 ] || die "grad/vision.w: flushed $(num "$j" flushed), want 2"
echo "$j" | grep -q '"name":"act/text.h","dtype":"F16"' || die "act/text.h not listed as F16"
echo "$j" | grep -q '"dtype":"BF16"' || die "the BF16 tensor is missing"
a=$("$ampc" inspect "$m" --select grad/ --scale auto --json) || die "--scale auto failed"
[ "$(num "$a" scale_log2)" = 6 ] || die "auto scale 2^$(num "$a" scale_log2), want 2^6"
echo "$a" | grep -q '"scale_range":{"status":"ok","min_log2":6,"max_log2":6,"flush_limited_by":"grad/vision.w","overflow_limited_by":"grad/text.w"}' ||
  die "the file's range is not 2^6 .. 2^6 bounded by grad/vision.w and grad/text.w: $a"
echo "$a" | grep -q '"name":"grad/vision","tensors":1,"scale_range":{"status":"ok","min_log2":6,"max_log2":14}' ||
  die "branch grad/vision's range is not 2^6 .. 2^14"
expect 0 'safe scales: 2\^6 \.\. 2\^6 \(as a loss scale: start from 2\^6, the largest\)$' "$ampc" inspect "$m" --select grad/ --scale auto
expect 0 'overflow bounds it above: grad/text.w' "$ampc" inspect "$m" --select grad/ --scale auto
# at 2^7 grad/text.w's 1000 overflows; in bf16 nothing does
j=$("$ampc" inspect "$m" --select grad/text --scale 128 --json)
[ "$(num "$j" overflow)" = 1 ] || die "1000 x 128 does not overflow binary16"
j=$("$ampc" inspect "$m" --select grad/text --scale 2^7 --format bf16 --json)
[ "$(num "$j" overflow)" = 0 ] || die "1000 x 128 overflows bfloat16"
# the whole file: act/text.h (65504) caps it at 2^0, below grad/vision.w's 2^6
expect 0 'no power of two is safe for every tensor' "$ampc" inspect "$m" --scale auto
expect 0 'act/text.h \(max \|x\| 65504\) overflows above 2\^0' "$ampc" inspect "$m"
expect 0 'act/text.h' "$ampc" inspect "$m" --tensors
# FP8: e4m3 of 65504 overflows
j=$("$ampc" inspect "$m" --select act/text --format e4m3 --json)
[ "$(num "$j" overflow)" = 1 ] || die "65504 does not overflow e4m3"
# the plot
expect 0 "wrote $dir/h.png" "$ampc" inspect "$m" --scale auto --plot "$dir/h.png"
[ "$(head -c 4 "$dir/h.png" | od -An -c | tr -d ' ')" = '211PNG' ] || die "h.png is not a PNG"
# integer tensors: an error naming the tensor, or skipped
expect 1 "ints.safetensors: tensor 'step': dtype I64 is not floating point" "$ampc" inspect "$dir/ints.safetensors"
expect 0 '1 tensors that are not floating point skipped' "$ampc" inspect "$dir/ints.safetensors" --skip-other
# inf/NaN already there: no scale helps, said so
expect 0 'warning: 1 tensor already holds inf/NaN \(grad/vision.w\)' "$ampc" inspect "$m" --scale auto
# fractions: zero and inf/nan of all values, flushed of the finite non-zero
# ones (grad/vision.w: 8 values, 1 zero, 1 NaN, 2 of 6 flushed)
expect 0 'grad/vision +1 +8 +12.5% +33.33% +0% +0% +12.5%' "$ampc" inspect "$m"
j=$("$ampc" inspect "$m" --select grad/vision --json)
[ "$(num "$j" flushed_frac)" = 0.33333333333333331 ] || die "flushed_frac $(num "$j" flushed_frac), want 2/6"
# every value overflowing: no relative error ('-', null)
expect 0 'act/text.h +2 +0% +0% +0% +100% +0% +- ' "$ampc" inspect "$m" --select act/text --scale 2^40 --format e5m2
j=$("$ampc" inspect "$m" --select act/text --scale 2^40 --format e5m2 --json)
echo "$j" | grep -q '"rel_err_mean":null' || die "rel_err_mean of all-overflow values is not null"
# --max-flush 1: no lower bound
expect 0 'safe scales: up to 2\^6 ' "$ampc" inspect "$m" --select grad/ --scale auto --max-flush 1
j=$("$ampc" inspect "$m" --select grad/ --scale auto --max-flush 1 --json)
echo "$j" | grep -q '"scale_range":{"status":"ok","min_log2":null,"max_log2":6,' || die "no null lower bound: $j"
# a recorded loss scale (ampc_dump.py's loss_scale=65536): the advice in training terms
expect 0 'records loss_scale 65536 \(2\^16\).*training loss scale: 2\^22 \.\. 2\^22' "$ampc" inspect "$dir/scaled.safetensors" --scale auto
j=$("$ampc" inspect "$dir/scaled.safetensors" --json)
[ "$(num "$j" recorded_loss_scale)" = 65536 ] || die "recorded_loss_scale not in the JSON"
# ---- what the file holds: a loss scale multiplies gradients --------------------
# the loss-scale advice is for gradients alone; other tensors (weights,
# activations) are told whether they fit the format at scale 1, as stored
# (no tensor overflows, none flushes more than --max-flush of its values)
# no_advice OUT: fail when OUT gives loss-scale advice
no_advice() { echo "$1" | grep -q 'loss scale:' && die "loss-scale advice for tensors that are not gradients: $1"; }
# PyTorch-style NAME.grad gradients: the advice
expect 0 'safe scales: 2\^6 \.\. 2\^6 \(as a loss scale: start from 2\^6, the largest\)$' "$ampc" inspect "$dir/dotgrad.safetensors" --scale auto
# the same values named as weights: none; vision.w needs >= 2^6, so scale 1
# flushes too much of it (2^-25 and 2^-30: 2 of 6); text.w's 2^-15 .. 2^6 holds 2^0
w=$("$ampc" inspect "$dir/weights.safetensors" --scale auto 2>&1) || die "inspect weights.safetensors exited $?"
no_advice "$w"
echo "$w" | grep -q '^safe scales: 2^6 \.\. 2^6$' || die "weights: no bare safe range: $w"
echo "$w" | grep -q '^no tensor named as a gradient (grad/, act_grad/, .grad): no loss-scale advice; at scale 1, as stored, they do not fit fp16: more than 0.001 flushed in 1 tensor$' ||
  die "weights: not told that scale 1 flushes vision.w: $w"
expect 0 'at scale 1, as stored, they fit fp16$' "$ampc" inspect "$dir/weights.safetensors" --select text.
# activations, from a dump: act/text.h (65504, 2^-24) fits binary16 at 2^0
# exactly, and overflows e4m3 with 2^-24 flushed
w=$("$ampc" inspect "$m" --select act/ --scale auto 2>&1)
no_advice "$w"
echo "$w" | grep -q 'at scale 1, as stored, they fit fp16$' || die "act/: $w"
expect 0 'they do not fit e4m3: overflow in 1 tensor, more than 0.001 flushed in 1$' "$ampc" inspect "$m" --select act/text --format e4m3
# gradients and other tensors together: no advice, a pointer to --select
w=$("$ampc" inspect "$m" --scale auto 2>&1)
no_advice "$w"
echo "$w" | grep -q '^2 of the 4 tensors are gradients: for a loss scale, inspect them alone' || die "mixed: $w"
[ "$(num "$("$ampc" inspect "$m" --json)" gradient_tensors)" = 2 ] || die "mixed: gradient_tensors is not 2"
# a training checkpoint (`ampc train --save`: FP32 weights, Adam's moments):
# never a loss scale; its weights alone fit binary16 at scale 1, while
# exp_avg_sq (squared gradients) flushes
ck=$dir/ck.safetensors
"$ampc" train --model mlp --steps 2 --threads 1 --quiet --no-eval --save "$ck" >/dev/null 2>&1 ||
  die "ampc train --save for the checkpoint"
w=$("$ampc" inspect "$ck" --scale auto 2>&1) || die "inspect of the checkpoint exited $?"
no_advice "$w"
echo "$w" | grep -q '^an ampc checkpoint (weights and optimizer state), not gradients: no loss-scale advice; at scale 1, as stored, they do not fit fp16: more than 0.001 flushed in [0-9]* tensors*$' ||
  die "checkpoint: $w"
w=$("$ampc" inspect "$ck" --select fc --select head --scale auto 2>&1)
no_advice "$w"
echo "$w" | grep -q '^an ampc checkpoint (weights and optimizer state), not gradients: no loss-scale advice; at scale 1, as stored, they fit fp16$' ||
  die "checkpoint weights: $w"
[ "$(num "$("$ampc" inspect "$ck" --json)" gradient_tensors)" = 0 ] || die "checkpoint: gradient_tensors is not 0"
# the extremes of 2^K, and a file named like an option after --
cp "$m" "$dir/-m.safetensors"
expect 0 'at scale 2\^-1074' "$ampc" inspect --scale 2^-1074 -- "$dir/-m.safetensors"
expect 0 'at scale 2\^1023' "$ampc" inspect "$m" --scale 2^1023
expect 2 "K in -1074..1023" "$ampc" inspect "$m" --scale 2^1024
expect 2 '--select needs a non-empty prefix' "$ampc" inspect "$m" --select ''
expect 2 '--plot needs a file name' "$ampc" inspect "$m" --plot ''

# ---- bad input -------------------------------------------------------------------
: >"$dir/empty.safetensors"
expect 1 'empty.safetensors: file is 0 bytes' "$ampc" inspect "$dir/empty.safetensors"
printf 'this is not a safetensors file at all\n' >"$dir/text.safetensors"
expect 1 'text.safetensors: not a safetensors file: header length' "$ampc" inspect "$dir/text.safetensors"
expect 1 "$dir: not a regular file" "$ampc" inspect "$dir"
expect 1 'missing.safetensors: cannot open' "$ampc" inspect "$dir/missing.safetensors"
expect 1 'none.safetensors: the file holds no tensors' "$ampc" inspect "$dir/none.safetensors"
expect 1 'no tensor matches --select nothing/, none/' "$ampc" inspect "$m" --select nothing/ --select none/
expect 1 'cannot write PNG .*no/such/dir/h.png' "$ampc" inspect "$m" --plot "$dir/no/such/dir/h.png"
expect 2 'missing FILE' "$ampc" inspect
expect 2 "unknown dtype 'f12'" "$ampc" inspect "$m" --format f12
expect 2 "--scale '0'" "$ampc" inspect "$m" --scale 0
expect 2 "--scale 'nan'" "$ampc" inspect "$m" --scale nan
expect 2 "--scale 'x'" "$ampc" inspect "$m" --scale x
expect 2 "--max-flush '2'" "$ampc" inspect "$m" --max-flush 2
expect 2 "unknown option '--bogus'" "$ampc" inspect "$m" --bogus
expect 2 'one file at a time' "$ampc" inspect "$m" "$m"
expect 2 '--scale needs a value' "$ampc" inspect "$m" --scale
expect 0 'Usage: ampc inspect' "$ampc" inspect --help

[ "$fail" -eq 0 ] && echo "inspect_cli: all checks passed"
exit "$fail"
