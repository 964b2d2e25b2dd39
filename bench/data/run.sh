#!/bin/sh
# bench/data/run.sh BUILD OUT: the own-data path measured (docs/BENCHMARKS.md,
# "Your own data"). BUILD is a build folder with ampc and bench/bench_data;
# OUT gets the data, the packs and the JSON lines of every measurement.
#   1. pack throughput: 2000 synthetic 256x256 JPEGs (quality 90, 4:2:0) and
#      the same as PNGs, packed to 64x64 with --threads 1 and 2;
#   2. the loader alone: the 64x64 JPEG pack streamed in batches of 64 with
#      the prefetch thread (bench_data loader);
#   3. real runs: Fashion-MNIST exported as PNG + CSV (captions from 4
#      templates per class, the class as label) and the bundled emoji pairs
#      exported as JPEG WebDataset shards, each packed and trained with mm-tiny
#      in 32-true and 16-mixed (500 steps, batch 64), evaluated on the val
#      split (R@1 both ways, zero-shot accuracy by prompt).
set -eu
build=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
cd "$out"
ampc=$build/ampc
bd=$build/bench/bench_data
n=${N_IMAGES:-2000}
steps=${STEPS:-500}
log() { echo "$*" >&2; }

log "== 1. pack throughput ($n images)"
[ -d synth ] || "$bd" make-jpeg synth "$n" >/dev/null
for fmt in jpeg png; do
  for t in 1 2; do
    rm -rf "pack-$fmt-$t"
    "$ampc" data pack "synth/$fmt.csv" --out "pack-$fmt-$t" --image-size 64 --vocab 200 \
      --threads "$t" --json 2>/dev/null | sed "s/^{/{\"bench\":\"pack\",\"format\":\"$fmt\",\"threads\":$t,/" \
      | tee -a pack.jsonl
  done
done

log "== 2. loader"
"$bd" loader pack-jpeg-2 64 2000 | tee -a loader.jsonl

log "== 3. real runs"
[ -d fashion-csv ] || "$bd" export-fashion fashion-csv >/dev/null
[ -d emoji-wds ] || "$bd" export-emoji emoji-wds >/dev/null
[ -f fashion-pack/manifest.json ] ||
  "$ampc" data pack fashion-csv/data.csv --out fashion-pack --image-size 28 --seq-len 16 \
    --vocab 200 --label-key label --json 2>/dev/null | tee -a pack-real.jsonl
[ -f emoji-pack/manifest.json ] ||
  "$ampc" data pack 'emoji-wds/emoji-{000..005}.tar' --out emoji-pack --image-size 32 \
    --seq-len 24 --vocab 2000 --label-key cls --json 2>/dev/null | tee -a pack-real.jsonl
for d in emoji fashion; do
  "$ampc" train --data "$d-pack" --precision 32-true,16-mixed --steps "$steps" --batch 64 \
    --eval-every "$steps" --log "run-$d.jsonl" >"run-$d.txt" 2>&1
  tail -n 12 "run-$d.txt" >&2
done
