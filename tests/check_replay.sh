#!/bin/sh
# tests/check_replay.sh AMPC: anomaly replay. A checkpoint with one weight of
# one branch blown up (x 1e6: its activations pass binary16's 65504) is
# resumed in 16-mixed at the default --telemetry-every 10; its first step
# (not a telemetry step) has a non-finite loss, is replayed with telemetry,
# and the live diagnosis names the branch, the op whose output first held a
# non-finite value, its FP32 magnitude against binary16's limit, and the
# samples carrying it (on the CPU and on the device path). A test hook
# makes one sample extreme: the diagnosis names that sample alone.
# With --anomaly-replay off it names neither; with it on or off the run's
# checkpoint is the same, bit for bit.
. "$(dirname "$0")/cli_lib.sh"
here=$(dirname "$0")
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
common="--steps 12 --batch 16 --threads 1 --no-eval"
"$ampc" train --steps 3 --batch 16 --threads 1 --no-eval --quiet --save "$tmp/base.st" \
  >/dev/null 2>"$tmp/err" || die "base run exited $? ($(cat "$tmp/err"))"

# one weight per branch; the tensor the diagnosis names first, and whether
# every sample carries it (a weight: all of them; the matching head: the
# pairs whose logit overflowed)
for case in vision:vision.blocks.0.mlp.fc1.weight:vision.blocks.0.mlp.fc1:all \
  text:text.blocks.0.mlp.fc1.weight:text.blocks.0.mlp.fc1:all \
  fusion:fusion.blocks.0.mlp.fc1.weight:fusion.blocks.0.mlp.fc1:all \
  heads:heads.itm.weight:itm_head:some; do
  br=${case%%:*} rest=${case#*:}
  w=${rest%%:*} rest=${rest#*:}
  first=${rest%%:*} samples=${rest#*:}
  python3 "$here/scale_tensor.py" "$tmp/base.st" "$tmp/blown.st" "$w" 1e6 || die "cannot blow up $w"
  "$ampc" train $common --resume "$tmp/blown.st" --log "$tmp/$br.jsonl" >"$tmp/out" 2>&1
  rc=$?
  [ $rc = 3 ] || die "$w: exited $rc, expected 3 (stalled): $(tail -3 "$tmp/out")"
  grep -q "^diagnosis: nonfinite-independent-of-scale ($br)$" "$tmp/out" ||
    die "$w: the diagnosis does not name $br: $(grep -A3 '^diagnosis' "$tmp/out")"
  # the op, its pass, and its FP32 values past binary16's largest before rounding
  grep -q "^  - first non-finite tensor: $first, forward output ($br, step 4); FP32 results up to [0-9.e+]* before rounding, past fp16's largest 65504$" "$tmp/out" ||
    die "$w: the first non-finite tensor is not $first: $(grep 'non-finite tensor' "$tmp/out")"
  if [ "$samples" = all ]; then
    grep -q "^  - every sample of its micro-batch carries it (16 of 16)" "$tmp/out" ||
      die "$w: not every sample: $(grep -A1 'non-finite tensor' "$tmp/out")"
  else
    grep -q "^  - samples carrying it: [0-9]* of 16: [0-9]" "$tmp/out" ||
      die "$w: no samples named: $(grep -A1 'non-finite tensor' "$tmp/out")"
  fi
  grep '"step":4,' "$tmp/$br.jsonl" | grep -q '"anomaly_replay":true' ||
    die "$w: step 4's log line is not marked as replayed"
done

# the device path (on the CPU: cpu-split) replays and names the same op
python3 "$here/scale_tensor.py" "$tmp/base.st" "$tmp/blown.st" vision.blocks.0.mlp.fc1.weight 1e6
"$ampc" train $common --resume "$tmp/blown.st" --device cpu-split >"$tmp/out" 2>&1
grep -q "^  - first non-finite tensor: vision.blocks.0.mlp.fc1, forward output (vision, step 4)" "$tmp/out" ||
  die "cpu-split: $(grep -A3 '^diagnosis' "$tmp/out")"

# one sample of step 4's batch (the first the vision case's log names) made
# extreme by the test hook (its normalised pixels x 1e6): the patch
# embedding overflows in that sample's rows only, and the diagnosis names it
idx=$(grep '"step":4,' "$tmp/vision.jsonl" | sed -n 's/.*"samples":\[\([0-9]*\).*/\1/p')
[ -n "$idx" ] || die "the vision case's log names no samples"
for dev in cpu cpu-split; do
  AMPC_TEST_EXTREME_SAMPLE=$idx:1e6 "$ampc" train --steps 6 --batch 16 --threads 1 --no-eval \
    --device $dev --log "$tmp/x.jsonl" >"$tmp/out" 2>&1
  grep -q "^  - first non-finite tensor: vision.patch_embed, forward output (vision, step 4)" "$tmp/out" ||
    die "extreme sample ($dev): $(grep -A3 '^diagnosis' "$tmp/out")"
  grep -q "^  - samples carrying it: 1 of 16: $idx (" "$tmp/out" ||
    die "extreme sample ($dev): sample $idx not named: $(grep -A1 'non-finite tensor' "$tmp/out")"
  grep '"step":4,' "$tmp/x.jsonl" | grep -q "\"samples\":\\[$idx\\]" ||
    die "extreme sample ($dev): the log does not list [$idx]"
done

# off: the branch is not named; on or off: the same checkpoint
python3 "$here/scale_tensor.py" "$tmp/base.st" "$tmp/blown.st" vision.blocks.0.mlp.fc1.weight 1e6
"$ampc" train $common --resume "$tmp/blown.st" --anomaly-replay off >"$tmp/out" 2>&1
grep -q "^diagnosis: nonfinite-independent-of-scale$" "$tmp/out" ||
  die "replay off: $(grep -A2 '^diagnosis' "$tmp/out")"
for r in on off; do
  "$ampc" train $common --resume "$tmp/blown.st" --on-stall warn --anomaly-replay $r --quiet \
    --save "$tmp/w-$r.st" >/dev/null 2>"$tmp/err" || die "replay $r exited $? ($(cat "$tmp/err"))"
done
cmp -s "$tmp/w-on.st" "$tmp/w-off.st" || die "the replay changed the run's checkpoint"
# a static scale of 2^20: every step overflows and is skipped, the same bits
for r in on off; do
  "$ampc" train --steps 6 --batch 16 --threads 1 --no-eval --quiet --loss-scale 1048576 \
    --anomaly-replay $r --on-stall warn --save "$tmp/s-$r.st" --log "$tmp/s-$r.jsonl" \
    >/dev/null 2>"$tmp/err" || die "static-scale run ($r) exited $?"
done
cmp -s "$tmp/s-on.st" "$tmp/s-off.st" || die "the replay of an overflow step changed the checkpoint"
# every step overflows: all but the sampled step 1 are replayed
[ "$(grep -c '"anomaly_replay":true' "$tmp/s-on.jsonl")" = 5 ] || die "not 5 replays"
expect 2 train --steps 1 --anomaly-replay maybe
[ $fail = 0 ] && echo "check_replay: ok"
exit $fail
