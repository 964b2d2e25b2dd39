#!/bin/sh
# bench/results/run.sh AMPC OUTDIR: the runs behind the main job's table in
# docs/BENCHMARKS.md (their summaries: bench/results/main_job/, fashion_mnist/).
# Emoji image-text pairs: mm-tiny, 500 steps, batch 64, AdamW lr 1e-3 with 20
# warmup steps and cosine decay, images shifted by up to 2 pixels, random
# matching negatives, seeds 1, 2 and 3, in 32-true, 16-mixed and bf16-mixed
# (README's main job); Fashion-MNIST (with FM=1): vit-fm, 400 steps, seed 1,
# the same presets. Two runs at a time with one thread each (a 2-core
# machine), then
#   python3 bench/results/table.py OUTDIR
# prints the markdown tables.
set -eu
A=$1
out=$2
mkdir -p "$out"
emoji() {
  "$A" train --threads 1 --precision "$1" --seed "$2" --steps 500 --warmup 20 --lr 1e-3 \
    --batch 64 --augment-shift 2 --itm-negatives random --eval-every 0 --quiet --json --log "$out/$1.s$2.jsonl" >"$out/$1.s$2.json"
}
fm() {
  "$A" train --data fashion-mnist --threads "$3" --precision "$1" --seed "$2" --steps 400 \
    --warmup 20 --lr 1e-3 --batch 64 --eval-every 0 --quiet --json \
    --log "$out/fm.$1.s$2.jsonl" >"$out/fm.$1.s$2.json"
}
emoji 32-true 1 & emoji 16-mixed 1; wait
emoji bf16-mixed 1 & emoji 32-true 2; wait
emoji 16-mixed 2 & emoji bf16-mixed 2; wait
emoji 32-true 3 & emoji 16-mixed 3; wait
emoji bf16-mixed 3
if [ "${FM:-0}" = 1 ]; then
  fm 32-true 1 1 & fm 16-mixed 1 1; wait
  fm bf16-mixed 1 1
fi
