#!/bin/sh
# bench/step/ab.sh OLD NEW [ROUNDS]: whole training steps of two ampc builds,
# interleaved (old, new, old, new, ... per model and preset) so both see the
# same machine state: `ampc bench step`, batch 128, STEPS timed steps after
# WARMUP per process; prints the median over the rounds' medians per binary
# and their ratio. Used for "no step gets slower" checks of a refactor.
# MODELS and PRESETS narrow the set. Never a test.
set -eu
old=$1 new=$2 rounds=${3:-3}
STEPS=${STEPS:-8} WARMUP=${WARMUP:-2}
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512f /proc/cpuinfo; then OPENBLAS_CORETYPE=SkylakeX; else OPENBLAS_CORETYPE=Haswell; fi
  export OPENBLAS_CORETYPE
fi
med() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
one() { "$1" bench step --model "$2" --precision "$3" --batch 128 --steps $STEPS --warmup $WARMUP --json |
  sed -n 's/.*"ms_per_step_median":\([0-9.e+-]*\).*/\1/p'; }
echo "| model | preset | old ms/step | new ms/step | new / old |"
echo "|---|---|---:|---:|---:|"
for m in ${MODELS:-vit-ref mm-tiny}; do
  for p in ${PRESETS:-32-true 16-mixed bf16-mixed}; do
    : >/tmp/ab.old; : >/tmp/ab.new
    r=0
    while [ $r -lt "$rounds" ]; do
      one "$old" $m $p >>/tmp/ab.old
      one "$new" $m $p >>/tmp/ab.new
      r=$((r + 1))
    done
    a=$(med </tmp/ab.old | awk "{ printf \"%.1f\", \$1 }") b=$(med </tmp/ab.new | awk "{ printf \"%.1f\", \$1 }")
    echo "| $m | $p | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }') |"
  done
done
