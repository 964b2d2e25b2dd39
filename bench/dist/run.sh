#!/bin/sh
# bench/dist/run.sh AMPC [ROUNDS] [STEPS]: data-parallel step time on one
# machine, interleaved: 1 process x 1 thread, 1 process x 2 threads, 2 ranks
# x 1 thread (--allreduce f32), 2 ranks x 1 thread (--allreduce working), all
# mm-tiny 16-mixed at global batch 64 (env MODEL, PRESET, BATCH override).
# Prints per configuration the median step time over steps 3..STEPS of each
# round (from the log's "ms"), the bytes rank 0 sent per step and the FP32
# staging in the memory account. Needs mpirun (Open MPI); as root it passes
# --allow-run-as-root.
set -eu
ampc=$1
rounds=${2:-3}
steps=${3:-12}
model=${MODEL:-mm-tiny} preset=${PRESET:-16-mixed} batch=${BATCH:-64}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
flags="--model $model --precision $preset --batch $batch --steps $steps --no-eval --telemetry-every 0 --quiet"
mpi="mpirun --allow-run-as-root --oversubscribe --bind-to core"
r=1
while [ $r -le "$rounds" ]; do
  "$ampc" train $flags --threads 1 --log "$tmp/p1t1.$r.jsonl" >/dev/null
  "$ampc" train $flags --threads 2 --log "$tmp/p1t2.$r.jsonl" >/dev/null
  $mpi -np 2 "$ampc" train $flags --threads 1 --log "$tmp/p2f32.$r.jsonl" >/dev/null
  $mpi -np 2 "$ampc" train $flags --threads 1 --allreduce working --log "$tmp/p2w.$r.jsonl" >/dev/null
  r=$((r + 1))
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
names = {"p1t1": "1 process x 1 thread", "p1t2": "1 process x 2 threads",
         "p2f32": "2 ranks x 1 thread, --allreduce f32", "p2w": "2 ranks x 1 thread, --allreduce working"}
base = None
print("| configuration | median ms/step per round | mean | vs 1x2 threads | bytes sent/step (rank 0) | grad_stage bytes |")
print("|---|---|---:|---:|---:|---:|")
res = {}
for k, label in names.items():
    meds, sent, stage = [], 0, 0
    for r in range(1, rounds + 1):
        lines = [json.loads(l) for l in open("%s/%s.%d.jsonl" % (tmp, k, r))]
        ms = [o["ms"] for o in lines if o.get("event") == "step" and o["step"] >= 3]
        meds.append(statistics.median(ms))
        s = [o for o in lines if o.get("event") == "summary"][0]
        sent = s.get("bytes_sent_per_step", 0)
        stage = s.get("memory", {}).get("grad_stage", 0)
    res[k] = sum(meds) / len(meds)
    print("| %s | %s | %.1f | %s | %.0f | %d |" % (label, ", ".join("%.1f" % m for m in meds), res[k],
          "%.2fx" % (res["p1t2"] / res[k]) if "p1t2" in res else "-", sent, stage))
print("scaling efficiency of 2 ranks (f32) over 1 process x 1 thread: %.2f" % (res["p1t1"] / res["p2f32"] / 2))
PY
