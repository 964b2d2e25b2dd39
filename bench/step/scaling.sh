#!/bin/sh
# bench/step/scaling.sh [BUILD] [OUTDIR]: how ampc's vit-ref training step
# grows with the batch (32..512 at width 128) and the width (128..512 at
# batch 128; heads 4, MLP 4 x width), for 32-true and 16-mixed: `ampc bench
# step` (STEPS timed steps after WARMUP, default 5 after 1), the two precisions
# interleaved per point. Writes OUTDIR/step-scaling.jsonl, prints the markdown
# tables and draws OUTDIR/step-scaling-batch.png and OUTDIR/step-scaling-dim.png
# (build/bench/bench_step_plot). THREADS (default 2) and OMP_WAIT_POLICY are
# passed through; OPENBLAS_CORETYPE (32-true's SGEMM) is set as in run.sh
# when unset. Never a test.
set -eu
build=${1:-build}
out=${2:-docs/img}
STEPS=${STEPS:-5} WARMUP=${WARMUP:-1} THREADS=${THREADS:-2}
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then OPENBLAS_CORETYPE=Haswell
  fi
  [ -n "${OPENBLAS_CORETYPE:-}" ] && export OPENBLAS_CORETYPE
fi
mkdir -p "$out"
: >"$out/step-scaling.jsonl"
echo "# bench/step/scaling.sh: $(date -u +%Y-%m-%dT%H:%MZ), $THREADS thread(s), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
for point in 32:128 64:128 128:128 256:128 512:128 128:256 128:384 128:512; do
  b=${point%%:*} d=${point#*:}
  for p in 32-true 16-mixed; do
    "$build/ampc" bench step --model vit-ref --precision "$p" --batch "$b" --dim "$d" \
      --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" --json >>"$out/step-scaling.jsonl"
  done
done
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/bench_step_plot" "$out/step-scaling.jsonl" "$out/step-scaling"
