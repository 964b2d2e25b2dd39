#!/bin/sh
# tests/check_device.sh AMPC: `ampc train --device`.
# 1. --device cpu-split runs the device path (the model's tensors, the
#    parameter table's role buffers, the unscale check and the optimizer
#    through the backend, every host exchange a real copy) on the CPU: its
#    step lines (loss, loss scale, gradient norm, the rounding telemetry),
#    evaluations and checkpoint must equal --device cpu's bit for bit, for
#    16-mixed on mm-tiny with sampled negatives, bf16-mixed on vit-ref, a
#    static loss scale, micro-batches summed in the working dtype and in
#    FP32, MLM, 16-true (FP16 accumulation), fp8-mixed, per-branch and per-loss loss
#    scaling, three of
#    check_diagnose.sh's failure signatures (diagnosed the same), a resume.
# 2. --device cuda without a GPU: exit 1 naming the reason; a bad device:
#    exit 2; what the device path does not have yet: exit 1 with a message.
. "$(dirname "$0")/cli_lib.sh"
OMP_WAIT_POLICY=passive
export OMP_WAIT_POLICY

# same_run NAME ARGS...: the run on cpu and on cpu-split, logs and checkpoints compared
same_run() {
  name=$1; shift
  for d in cpu cpu-split; do
    "$ampc" train --threads 2 --quiet --device $d --log "$tmp/$name.$d.jsonl" \
      --save "$tmp/$name.$d.st" "$@" >"$tmp/$name.$d.out" 2>&1 ||
      { die "$name --device $d: exit $? ($(tail -1 "$tmp/$name.$d.out"))"; return; }
  done
  python3 - "$tmp/$name.cpu.jsonl" "$tmp/$name.cpu-split.jsonl" <<'PY' || die "$name: the logs differ"
import json, sys
def keep(f):
    out = []
    for l in open(f):
        e = json.loads(l)
        if e.get("event") == "step":  # every field (telemetry too) but the time
            e.pop("ms", None), e.pop("cores", None)
            out.append(("step", json.dumps(e, sort_keys=True)))
        elif e.get("event") == "eval":
            out.append(("eval", e["step"], json.dumps(e["metrics"], sort_keys=True)))
    return out
a, b = keep(sys.argv[1]), keep(sys.argv[2])
assert a and a == b, [x for x in zip(a, b) if x[0] != x[1]][:3]
d = [json.loads(l) for l in open(sys.argv[2])][0]
assert d["run"]["device"] == "cpu-split", d["run"]
PY
  cmp -s "$tmp/$name.cpu.st" "$tmp/$name.cpu-split.st" || die "$name: the checkpoints differ"
}

same_run mm16 --model mm-tiny --precision 16-mixed --steps 5 --batch 12 --eval-every 5 \
  --itm-negatives sampled
same_run vitbf16 --model vit-ref --precision bf16-mixed --steps 4 --batch 16
same_run static --model mm-tiny --precision 16-mixed --loss-scale 1024 --steps 4 --batch 8 \
  --no-eval
same_run micro --model mm-tiny --precision bf16-mixed --micro-batches 2 --allreduce working \
  --steps 3 --batch 8 --no-eval
same_run mlm --model mm-tiny --precision 16-mixed --w-mlm 0.5 --steps 3 --batch 8 --no-eval
# the FP16-accumulation ablation (16-true: binary16 sums inside every GEMM)
same_run true16 --model mm-tiny --precision 16-true --optimizer sgd --lr 1e-2 --steps 3 --batch 8 \
  --no-eval --telemetry-every 1
# fp8-mixed: the FP8 linear layers' casts, amax and delayed scales
same_run fp8 --model mm-tiny --precision fp8-mixed --steps 4 --batch 8 --no-eval \
  --telemetry-every 2
# the trainer's FP32 staging on the device: micro-batches summed in FP32,
# per-loss scaling (one backward pass per term, each unscaled into FP32)
same_run micro32 --model mm-tiny --precision 16-mixed --micro-batches 2 --steps 3 --batch 8 \
  --no-eval
same_run perloss --model mm-tiny --precision 16-mixed --loss-scale per-loss --micro-batches 2 \
  --steps 4 --batch 8 --no-eval --telemetry-every 2
# the rounding telemetry on the device path: every sampled step's per-branch
# counts, histograms, shadow accumulation error and swallowed updates equal;
# so is per-branch loss scaling, which picks its scales from them, and the
# signatures of check_diagnose.sh (underflow without loss scaling, forward
# overflow at lr 100, swallowed updates without master weights)
same_run tele --model mm-tiny --precision 16-mixed --steps 6 --batch 12 --no-eval \
  --telemetry-every 2 --itm-negatives sampled
same_run branch --model mm-tiny --precision 16-mixed --loss-scale per-branch --steps 12 \
  --batch 8 --no-eval --telemetry-every 1
same_run noscale --model mm-tiny --loss-scale none --steps 4 --batch 16 --no-eval --on-stall warn
same_run bigact --model mm-tiny --optimizer sgd --lr 100 --steps 8 --batch 16 --no-eval --on-stall warn \
  --telemetry-every 1
same_run nomaster --model mm-tiny --master-weights off --optimizer sgd --lr 1e-4 --steps 4 \
  --batch 16 --no-eval
for n in noscale bigact nomaster; do
  "$ampc" diagnose --json "$tmp/$n.cpu-split.jsonl" >"$tmp/$n.diag" 2>&1 || die "diagnose $n: exit $?"
done
grep -q '^{"verdict":"underflow"' "$tmp/noscale.diag" || die "noscale: $(head -c 200 "$tmp/noscale.diag")"
grep -q '^{"verdict":"nonfinite-independent-of-scale"' "$tmp/bigact.diag" ||
  die "bigact: $(head -c 200 "$tmp/bigact.diag")"
grep -q '^{"verdict":"swallowed-updates"' "$tmp/nomaster.diag" ||
  die "nomaster: $(head -c 200 "$tmp/nomaster.diag")"
# a resume on the device path continues as the CPU does
for d in cpu cpu-split; do
  "$ampc" train --threads 2 --quiet --model mm-tiny --steps 5 --batch 8 --no-eval --device $d \
    --resume "$tmp/static.cpu.st" --loss-scale 1024 --log "$tmp/res.$d.jsonl" \
    --save "$tmp/res.$d.st" >/dev/null 2>&1 || die "resume --device $d: exit $?"
done
cmp -s "$tmp/res.cpu.st" "$tmp/res.cpu-split.st" || die "resume: the checkpoints differ"

# 2. errors
"$ampc" train --device cuda --steps 1 --quiet >/dev/null 2>"$tmp/err"
rc=$?
if grep -q "no CUDA device" "$tmp/err"; then # no GPU here (CI): a clear runtime error
  [ $rc -eq 1 ] || die "--device cuda without a GPU: exit $rc, expected 1"
elif [ $rc -ne 0 ]; then
  die "--device cuda: exit $rc: $(cat "$tmp/err")"
fi
expect 2 train --device gpu --steps 1
expect 2 train --device cpu-split --model mlp --steps 1   # a usage error, as memory's
grep -q "the mlp model runs on the CPU only" "$tmp/err" || die "mlp on cpu-split: $(cat "$tmp/err")"
expect 2 train --device cuda --model mlp --steps 1        # with or without a GPU
# 3. the device memory account: every role of the CPU's, the arena a little
#    larger (the batch's inputs), device_scratch's allowance; the plan on it
"$ampc" memory --model mm-base --batch 64 --json >"$tmp/mc.json" || die "memory: exit $?"
"$ampc" memory --model mm-base --batch 64 --device cuda --json >"$tmp/mg.json" ||
  die "memory --device cuda: exit $?"
python3 - "$tmp/mc.json" "$tmp/mg.json" <<'PY' || die "memory --device cuda: the account is off"
import json, sys
c, g = (json.load(open(f)) for f in sys.argv[1:])
rc, rg = c["roles"], g["roles"]
for k in ("weights", "master", "grads", "moments"):
    assert rc[k] == rg[k], k
assert rc["device_scratch"] == 0 and rg["device_scratch"] >= 32 << 20, (rc, rg)
# the activations gain the batch's inputs; the workspace loses the CPU layers'
# scratch (the GPU's comes from the CUDA context, in device_scratch)
inputs = 64 * (32 * 32 * 3 + 24 * 4 + 4) + 16
assert rc["activations"] < rg["activations"] <= rc["activations"] + inputs + 64 * 8, (rc, rg)
assert rg["workspace"] < rc["workspace"], (rc, rg)
assert g["device"] == "cuda" and g["total_bytes"] == sum(rg.values())
PY
"$ampc" plan --device cuda --budget 80G --model mm-base --json >"$tmp/plan.json" ||
  die "plan --device cuda: exit $?"
python3 - "$tmp/plan.json" <<'PY' || die "plan --device cuda: no batch fits 80 GB"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["device"] == "cuda" and o["overhead_source"] == "cuda context allowance", o
for p in o["plans"]:
    assert p["fits"] and p["batch"] > 64 and p["predicted_bytes"] <= 80e9, p
PY
expect 2 memory --device gpu --model mm-tiny
expect 2 memory --device cuda --params 1e6
expect 2 plan --device tpu --budget 8G
exit $fail
