#!/bin/sh
# tests/check_pack.sh AMPC MAKE_PAIRS [MPIEXEC]: the user's own data end to end
# on data tests/make_pairs.c makes (60 captioned JPEG/PNG/WebP images, 3 labels):
# 1. `ampc data pack` reads each layout (CSV, TSV, JSONL, image folders with
#    metadata.jsonl and metadata.csv, WebDataset tars by brace pattern and
#    by list) and packs all 60 samples;
# 2. `ampc train --data PACK` trains from the stream, logs data_wait_ms,
#    evaluates R@1 on the val split and zero-shot accuracy by prompt;
#    `ampc eval` and `ampc memory --data` read the pack;
# 3. a run stopped and resumed mid-epoch writes the checkpoint of an
#    uninterrupted run, bit for bit (and across an epoch boundary);
# 4. with MPI: 2 ranks equal one process with 2 micro-batches;
# 5. bad data: skipped and counted by reason (docs/ROBUSTNESS.md); --strict
#    stops naming the file and reason; a wrong column, a finished pack, a
#    changed shard, a missing manifest; a pack without its keys files trains;
#    a sample made extreme (test hook) is named by its key in the diagnosis.
. "$(dirname "$0")/cli_lib.sh"
make_pairs=$2
mpiexec=${3:-}
OMP_NUM_THREADS=1
OMP_WAIT_POLICY=PASSIVE
export OMP_NUM_THREADS OMP_WAIT_POLICY
"$make_pairs" "$tmp/src" || die "make_pairs failed"
small="--image-size 16 --seq-len 12 --vocab 40 --shard-samples 16 --val-fraction 0.2 --label-key label"

# 1. every layout
for input in data.csv data.tsv data.jsonl folder folder2 'wds-{000..001}.tar' wds-000.tar,wds-001.tar; do
  out="$tmp/p-$(printf '%s' "$input" | tr -c 'a-z0-9' '_')"
  case "$input" in *.tar*) lk="--label-key cls" ;; *) lk="--label-key label" ;; esac
  (cd "$tmp/src" && "$ampc" data pack "$input" --out "$out" --image-size 16 --seq-len 12 \
    --vocab 40 --shard-samples 16 --val-fraction 0.2 $lk --json) >"$tmp/rep" 2>"$tmp/err" ||
    die "pack $input exited $? ($(cat "$tmp/err"))"
  tr=$(field train <"$tmp/rep") va=$(field val <"$tmp/rep") sk=$(field skipped <"$tmp/rep")
  [ "$((tr + va))" = 60 ] && [ "$sk" = 0 ] || die "pack $input: train $tr + val $va != 60, skipped $sk"
  [ "$(field classes <"$tmp/rep")" = 3 ] || die "pack $input: not 3 classes"
  grep -q '"sha256"' "$out/manifest.json" || die "pack $input: no SHA-256 in the manifest"
  [ -f "$out/pack.state" ] && die "pack $input: pack.state left behind"
  for f in "$out"/shard-*.ampcs; do
    k=$(basename "$f" .ampcs).keys.json
    [ -f "$out/$k" ] && grep -q "\"keys\":[[:space:]]*\"$k\"" "$out/manifest.json" ||
      die "pack $input: no $k, or the manifest does not name it"
  done
done
pack="$tmp/p-data_csv"
# the same input and flags give the same bytes (2 threads against 1)
"$ampc" data pack "$tmp/src/data.csv" --out "$tmp/again" $small --threads 2 --json >/dev/null 2>&1 ||
  die "second pack failed"
for f in "$pack"/shard-*.ampcs; do
  cmp -s "$f" "$tmp/again/$(basename "$f")" || die "$(basename "$f") differs between two packs"
done

# `ampc data info` on a pack: its facts, the shards checked
"$ampc" data info "$pack" >"$tmp/info" 2>"$tmp/err" || die "data info PACK exited $? ($(cat "$tmp/err"))"
grep -q "^samples     train .*(SHA-256 checked)" "$tmp/info" || die "data info PACK: $(cat "$tmp/info")"
grep -q "^classes     3: blue, green, red" "$tmp/info" || die "data info PACK classes: $(cat "$tmp/info")"

# 2. training, evaluation, memory
common="--data $pack --batch 8 --threads 1 --eval-every 0 --quiet"
"$ampc" train $common --steps 4 --log "$tmp/t.jsonl" --save "$tmp/t.st" --json >"$tmp/sum" \
  2>"$tmp/err" || die "train --data PACK exited $? ($(cat "$tmp/err"))"
grep -q '"data_wait_ms":' "$tmp/t.jsonl" || die "no data_wait_ms in the step lines"
grep -q '"val":{' "$tmp/sum" || die "the summary has no val metrics"
grep -q '"zero_shot_accuracy":' "$tmp/sum" || die "the summary has no zero-shot accuracy"
grep -q '"streamed":true' "$tmp/t.jsonl" || die "the config line does not say streamed"
"$ampc" eval --checkpoint "$tmp/t.st" --data "$pack" >"$tmp/ev" 2>"$tmp/err" ||
  die "eval on the pack exited $? ($(cat "$tmp/err"))"
grep -q '^val ' "$tmp/ev" || die "eval prints no val row"
grep -q 'zero-shot classification' "$tmp/ev" || die "eval prints no zero-shot accuracy"
"$ampc" memory --model mm-tiny --data "$pack" --json >/dev/null 2>"$tmp/err" ||
  die "memory --data PACK exited $? ($(cat "$tmp/err"))"
# the model follows the data: 16x16 images, patch 2 (mm-tiny's 4 at 32x32)
"$ampc" train $common --steps 1 --patch 3 >/dev/null 2>"$tmp/err" &&
  die "--patch 3 on 16x16 images was accepted"

# 3. resume mid-epoch (about 48 training samples, 8 a step: step 6 or 7 ends the epoch)
"$ampc" train $common --steps 8 --save "$tmp/full.st" >/dev/null 2>"$tmp/err" ||
  die "8 steps exited $? ($(cat "$tmp/err"))"
"$ampc" train $common --steps 8 --stop-at 3 --save "$tmp/half.st" >/dev/null 2>"$tmp/err" ||
  die "--stop-at 3 exited $? ($(cat "$tmp/err"))"
"$ampc" train $common --steps 8 --resume "$tmp/half.st" --save "$tmp/rest.st" >/dev/null \
  2>"$tmp/err" || die "resume exited $? ($(cat "$tmp/err"))"
cmp -s "$tmp/full.st" "$tmp/rest.st" || die "resumed mid-epoch: the checkpoint differs"

# 4. two ranks = one process with two micro-batches
if [ -n "$mpiexec" ]; then
  OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_btl_vader_single_copy_mechanism
  "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$ampc" train $common --steps 4 \
    --save "$tmp/mpi.st" >/dev/null 2>"$tmp/err" || die "mpirun -np 2 exited $? ($(cat "$tmp/err"))"
  "$ampc" train $common --steps 4 --micro-batches 2 --save "$tmp/mb.st" >/dev/null 2>"$tmp/err" ||
    die "--micro-batches 2 exited $? ($(cat "$tmp/err"))"
  cmp -s "$tmp/mpi.st" "$tmp/mb.st" || die "2 ranks differ from 2 micro-batches"
fi

# 5. bad data
(cd "$tmp/src" && "$ampc" data pack bad.csv --out "$tmp/bad" $small --json) >"$tmp/rep" \
  2>"$tmp/err" || die "pack of bad.csv exited $? ($(cat "$tmp/err"))"
[ "$(field skipped <"$tmp/rep")" = 7 ] || die "bad.csv: expected 7 skipped: $(cat "$tmp/rep")"
for r in missing_file empty_file corrupt_image too_many_pixels not_an_image caption_utf8 \
  caption_empty; do
  grep -q "\"$r\":1" "$tmp/rep" || die "bad.csv: no $r in $(cat "$tmp/rep")"
done
grep -q '"missing_file":[[:space:]]*1' "$tmp/bad/manifest.json" || die "the manifest does not count the skips"
(cd "$tmp/src" && "$ampc" data pack bad.csv --out "$tmp/strict" $small --strict) >/dev/null \
  2>"$tmp/err"
[ $? = 1 ] || die "--strict did not exit 1"
grep -q "img/missing.jpg" "$tmp/err" || die "--strict does not name the file: $(cat "$tmp/err")"
[ -f "$tmp/strict/manifest.json" ] && die "--strict left a manifest"
(cd "$tmp/src" && "$ampc" data pack trunc.tar --out "$tmp/trunc" $small --label-key cls --json) \
  >"$tmp/rep" 2>"$tmp/err" || die "pack of a truncated tar exited $? ($(cat "$tmp/err"))"
grep -q '"truncated_tar":1' "$tmp/rep" || die "the truncated tar is not counted: $(cat "$tmp/rep")"
expect 1 data pack "$tmp/src/data.csv" --out "$tmp/x" --image-key path
grep -q 'no column' "$tmp/err" || die "a wrong column: $(cat "$tmp/err")"
expect 1 data pack "$tmp/src/data.csv" --out "$pack" $small
grep -q 'already holds a finished pack' "$tmp/err" || die "a finished pack: $(cat "$tmp/err")"
expect 2 data pack "$tmp/src/data.csv" --out "$tmp/y" --image-size 7
expect 2 data pack "$tmp/src/data.csv"
echo '{"format": "something else"}' >"$tmp/other.json"
expect 1 train --data "$tmp/other.json" --steps 1
# a changed shard is left out with a warning; training goes on
cp -r "$pack" "$tmp/changed"
printf 'X' | dd of="$tmp/changed/shard-00000.ampcs" bs=1 seek=100 conv=notrunc 2>/dev/null
"$ampc" train --data "$tmp/changed" --batch 8 --threads 1 --steps 1 --no-eval --quiet \
  >/dev/null 2>"$tmp/err" || die "training with a changed shard exited $? ($(cat "$tmp/err"))"
grep -q 'shard-00000.ampcs: left out (SHA-256 mismatch' "$tmp/err" ||
  die "no warning for the changed shard: $(cat "$tmp/err")"
# a pack whose keys files are gone (as one made before keys) trains
cp -r "$pack" "$tmp/nokeys"
rm "$tmp/nokeys"/shard-*.keys.json
"$ampc" train --data "$tmp/nokeys" --batch 8 --threads 1 --steps 1 --no-eval --quiet \
  >/dev/null 2>"$tmp/err" || die "training without keys files exited $? ($(cat "$tmp/err"))"
# one sample made extreme by the test hook (sample 0: shard 0's first
# training record): the diagnosis names it by its key, the first of
# shard-00000.keys.json
key=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0])' \
  "$pack/shard-00000.keys.json") || die "cannot read shard-00000.keys.json"
AMPC_TEST_EXTREME_SAMPLE=0:1e6 "$ampc" train --data "$pack" --batch 8 --threads 1 --steps 8 \
  --no-eval >"$tmp/out" 2>&1 || die "training with an extreme sample exited $?"
grep -qxF "  - samples carrying it: 1 of 8: 0 ($key)" "$tmp/out" ||
  die "the extreme sample is not named by its key $key: $(grep -A1 'non-finite tensor' "$tmp/out")"
# a pack without labels trains (no class loss); a resume on another pack is refused
"$ampc" data pack "$tmp/src/data.jsonl" --out "$tmp/nolabel" --image-size 16 --seq-len 12 --vocab 40 \
  >/dev/null 2>&1 || die "pack without labels failed"
"$ampc" train --data "$tmp/nolabel" --batch 8 --threads 1 --steps 2 --eval-every 0 --quiet \
  --save "$tmp/nl.st" >/dev/null 2>"$tmp/err" || die "training without labels: $(cat "$tmp/err")"
expect 1 train --data "$pack" --batch 8 --threads 1 --steps 3 --resume "$tmp/nl.st"
grep -q 'pack=' "$tmp/err" || die "a resume on another pack: $(cat "$tmp/err")"
# a quote never closed: the rows before it are packed, the rest is one bad row
(head -4 "$tmp/src/data.csv" && echo 'img/020.webp,"never closed,blue' &&
  tail -n 20 "$tmp/src/data.csv") >"$tmp/src/open.csv"
(cd "$tmp/src" && "$ampc" data pack open.csv --out "$tmp/open" $small --json) >"$tmp/rep" 2>&1 ||
  die "pack with an unclosed quote: $(cat "$tmp/rep")"
grep -q '"read":4,.*"bad_row":1' "$tmp/rep" || die "the unclosed quote: $(cat "$tmp/rep")"
# a folder another pack is writing is refused; an input changed under a
# stopped pack is refused on resume
mkdir "$tmp/locked"
flock "$tmp/locked/pack.lock" sleep 3 &
sleep 1
expect 1 data pack "$tmp/src/data.csv" --out "$tmp/locked" $small
grep -q 'another `ampc data pack` is writing' "$tmp/err" || die "no lock: $(cat "$tmp/err")"
wait
cp "$tmp/src/bad.csv" "$tmp/src/bad2.csv"
(cd "$tmp/src" && "$ampc" data pack bad2.csv --out "$tmp/chg" $small --strict) >/dev/null 2>&1
echo "img/002.webp,one more row,blue" >>"$tmp/src/bad2.csv"
(cd "$tmp/src" && "$ampc" data pack bad2.csv --out "$tmp/chg" $small) >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "files changed since" "$tmp/err" || die "a changed input resumed: $(cat "$tmp/err")"
exit $fail
