#!/bin/sh
# tools/dev/bitcheck.sh: the before/after check of a refactor: short
# runs of every model and preset, whose checkpoints and logs (timings and RSS
# removed) must be byte-identical between two builds of ampc.
#   tools/dev/bitcheck.sh make OUTDIR [AMPC]   write the runs with AMPC (build/ampc)
#   tools/dev/bitcheck.sh diff DIR_A DIR_B      compare two such directories
#   (BITCHECK_IGNORE="field ..." leaves fields out that a change alters on purpose)
# Not a CTest: it needs two binaries and about 11 minutes on 2 cores. A run that
# stalls (exit 3: 16-true on the MLP and mm-tiny stop at step 1) is an outcome
# to compare like any other: its log, and no checkpoint.
set -eu
mode=$1
if [ "$mode" = diff ]; then
  # checkpoints byte for byte; logs line by line as JSON: every field of A's
  # line must be in B's with the same value (B may add fields: the log
  # contract lets fields be added, never renamed), except timings and RSS
  exec python3 - "$2" "$3" <<'PY'
import json, os, sys
a, b = sys.argv[1], sys.argv[2]
skip = {"ms", "wall_s", "ms_per_step_mean", "peak_rss_bytes"}
# fields a change alters on purpose, named for one comparison (e.g. the memory
# account's when workspaces start being counted): BITCHECK_IGNORE="a b"
skip |= set(os.environ.get("BITCHECK_IGNORE", "").split())
def sub(x, y, where):
    if isinstance(x, dict):
        if not isinstance(y, dict):
            return [where]
        out = []
        for k, v in x.items():
            if k in skip:
                continue
            if k not in y:
                out.append(where + "." + k + " (missing)")
            else:
                out += sub(v, y[k], where + "." + k)
        return out
    if isinstance(x, str) and isinstance(y, str):  # paths name their directory
        x, y = x.replace(a + "/", "DIR/"), y.replace(b + "/", "DIR/")
    return [] if x == y else [where + ": %r != %r" % (x, y)]
bad = 0
names = sorted(os.listdir(a))
for n in names:
    pa, pb = os.path.join(a, n), os.path.join(b, n)
    if not os.path.exists(pb):
        print("MISSING", n); bad = 1; continue
    if n.endswith(".jsonl"):
        la, lb = open(pa).read().splitlines(), open(pb).read().splitlines()
        if len(la) != len(lb):
            print("DIFF", n, "lines", len(la), len(lb)); bad = 1; continue
        for i, (x, y) in enumerate(zip(la, lb)):
            d = sub(json.loads(x), json.loads(y), "line%d" % (i + 1))
            if d:
                print("DIFF", n, d[:5]); bad = 1; break
    elif open(pa, "rb").read() != open(pb, "rb").read():
        print("DIFF", n); bad = 1
print("bitcheck: %d files compared, %s" % (len(names), "differences" if bad else "all identical"))
sys.exit(bad)
PY
fi
out=$2 ampc=${3:-build/ampc}
mkdir -p "$out"
run() { # tag, flags...
  tag=$1; shift
  "$ampc" train --quiet --threads 2 --seed 3 --telemetry-every 2 --eval-every 2 \
    --log "$out/$tag.jsonl" --save "$out/$tag.safetensors" "$@" >/dev/null 2>&1 || [ $? -eq 3 ]
}
for p in 32-true 16-mixed bf16-mixed 16-true bf16-true; do
  run mlp.$p --model mlp --precision $p --steps 3 --batch 32
  run tiny8.$p --model mm-tiny --precision $p --steps 3 --batch 8
  run vitref.$p --model vit-ref --precision $p --steps 3 --batch 16
done
run tiny.16-mixed --model mm-tiny --precision 16-mixed --steps 3 --batch 32 --micro-batches 2
run tiny.32-true --model mm-tiny --precision 32-true --steps 3 --batch 32
run tiny8.ls --model mm-tiny --precision 16-mixed --loss-scale none --accumulate fp16 --steps 3 --batch 8 --optimizer sgd
if [ -d /usr/share/dataset-fashion-mnist ] || [ -d /usr/share/fashion-mnist ]; then
  run fm.bf16-mixed --data fashion-mnist --precision bf16-mixed --steps 3 --batch 16 --eval-every 0 --no-eval
fi
# resume: 2 steps, then the third from the checkpoint
run tiny8.resume --model mm-tiny --precision 16-mixed --steps 3 --stop-at 2 --batch 16
run tiny8.resume --model mm-tiny --precision 16-mixed --steps 3 --batch 16 --resume "$out/tiny8.resume.safetensors"
run mlp.resume --model mlp --steps 3 --stop-at 2 --batch 32
run mlp.resume --model mlp --steps 3 --batch 32 --resume "$out/mlp.resume.safetensors"
echo "bitcheck: wrote $(ls "$out" | wc -l) files to $out"
