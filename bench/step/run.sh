#!/bin/sh
# bench/step/run.sh [AMPC] [MODEL...]: the step benchmark. Whole training
# steps of ampc (32-true, 16-mixed, bf16-mixed: `ampc bench step`) against
# PyTorch on identical models (FP32 and bf16 autocast:
# tests/reference/torch_step.py with Debian's /usr/bin/python3), batch 128,
# AdamW. The modes are interleaved in ROUNDS rounds of STEPS timed steps each
# (after WARMUP untimed steps per process), so every mode sees the same machine
# state; the median is over all ROUNDS x STEPS steps (default 4 x 5 = 20).
# Thread settings: first, each mode is timed briefly under each candidate
# setting (all cores with the default OpenMP wait policy, all cores with
# OMP_WAIT_POLICY=passive, 1 thread), twice, and its fastest setting is used
# for its rounds. The machine's FMA peak comes from `ampc bench gemm`, for
# the steps' GEMM FLOP rate as a fraction of it. OpenBLAS (ampc 32-true's SGEMM and
# PyTorch FP32's matmuls) picks its kernels from the CPU model; in a VM whose
# CPU it does not recognise it falls back to the SSE3 "Prescott" kernels
# (~1/4 of the FMA peak), so unless OPENBLAS_CORETYPE is set the script sets
# it to SkylakeX (CPUs with AVX-512) or Haswell (AVX2) for both frameworks and
# prints the core in use. Prints a markdown table (ms/step, ratio to PyTorch
# FP32, GEMM GFLOP/s and its fraction of the FMA peak, peak RSS) and the goal
# checks. Never a test.
#
# Environment: ROUNDS (4), STEPS (5), WARMUP (2), BATCH (128), PY
# (/usr/bin/python3), OUT (a directory for the raw JSON lines; default: a
# temporary one, removed).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ampc=${1:-$root/build/ampc}
[ $# -gt 0 ] && shift
models=${*:-vit-ref mm-tiny}
ROUNDS=${ROUNDS:-4} STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} BATCH=${BATCH:-128}
PY=${PY:-/usr/bin/python3}
torch_step="$root/tests/reference/torch_step.py"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  tmp=$OUT
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
[ -x "$ampc" ] || { echo "run.sh: $ampc is not executable (build first)" >&2; exit 1; }
"$PY" -c "import torch" 2>/dev/null || { echo "run.sh: $PY has no torch (apt install python3-torch)" >&2; exit 1; }

# one run; $1 framework (ampc|torch), $2 setting (omp|passive|1), $3 model, $4 mode, $5 steps, $6 warmup
one() {
  fw=$1 set=$2 model=$3 mode=$4 steps=$5 warm=$6
  case $set in
    omp) env_="GOMP_SPINCOUNT=300000"; thr=$(nproc) ;; # libgomp's default spinning (ampc waits passively unless told)
    passive) env_="OMP_WAIT_POLICY=passive"; thr=$(nproc) ;;
    1) env_=""; thr=1 ;;
  esac
  if [ "$fw" = ampc ]; then
    env $env_ "$ampc" bench step --model "$model" --precision "$mode" --batch "$BATCH" \
      --steps "$steps" --warmup "$warm" --threads "$thr" --json
  else
    env $env_ "$PY" "$torch_step" --model "$model" --mode "$mode" --batch "$BATCH" \
      --steps "$steps" --warmup "$warm" --threads "$thr"
  fi
}
median_of() { "$PY" -c 'import json,sys,statistics; print("%.1f" % statistics.median(json.loads(l)["ms_per_step_median"] for l in sys.stdin))'; }

if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then OPENBLAS_CORETYPE=Haswell
  fi
  [ -n "${OPENBLAS_CORETYPE:-}" ] && export OPENBLAS_CORETYPE
fi
core=$(OPENBLAS_VERBOSE=2 "$ampc" bench gemm --quick --threads 1 --reps 1 2>&1 | sed -n 's/^Core: //p' | head -1)
echo "# bench/step/run.sh: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
echo "# OpenBLAS core: ${core:-?} (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}); torch $("$PY" -c 'import torch; print(torch.__version__)'); batch $BATCH, $ROUNDS rounds x $STEPS steps after $WARMUP warm-up"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# the machine's FMA peak (ampc bench gemm measures it first), for the step's
# fraction of it
"$ampc" bench gemm --quick --reps 1 --json >"$tmp/peak.json"
for model in $models; do
  # thread settings, per mode: each candidate twice, interleaved, 3 steps
  # after 1 warm-up; the fastest is that mode's setting for the rounds
  for m in ampc:32-true ampc:16-mixed ampc:bf16-mixed torch:fp32 torch:bf16; do
    fw=${m%%:*} mode=${m#*:} key=$(echo "$m" | tr ':-' '__')
    : >"$tmp/threads-$key-$model"
    for rep in 1 2; do
      for set in omp passive 1; do
        t=$(one $fw $set "$model" $mode 3 1 | median_of)
        echo "$set $t" >>"$tmp/threads-$key-$model"
      done
    done
    best=$(sort -k2 -g "$tmp/threads-$key-$model" | head -1 | cut -d' ' -f1)
    eval "best_$key=$best"
    echo "# $model: $fw $mode thread settings (ms/step, 3 steps): $(tr '\n' ' ' <"$tmp/threads-$key-$model")-> $best"
  done
  : >"$tmp/runs-$model.jsonl"
  r=1
  while [ $r -le "$ROUNDS" ]; do
    for m in ampc:32-true ampc:16-mixed ampc:bf16-mixed torch:fp32 torch:bf16; do
      fw=${m%%:*} mode=${m#*:} key=$(echo "$m" | tr ':-' '__')
      eval "set=\$best_$key"
      one "$fw" "$set" "$model" "$mode" "$STEPS" "$WARMUP" |
        "$PY" -c 'import json,sys; o=json.loads(sys.stdin.read()); o["framework"]=sys.argv[1]; o["setting"]=sys.argv[2]; print(json.dumps(o))' "$fw" "$set" \
        >>"$tmp/runs-$model.jsonl"
    done
    echo "# $model: round $r/$ROUNDS done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    r=$((r + 1))
  done
  "$PY" "$here/table.py" "$tmp/runs-$model.jsonl" "$tmp/peak.json"
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
