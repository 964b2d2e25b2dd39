#!/bin/sh
# bench/gpu/check.sh [tests|bench|all]: the GPU checks of issues 16 and 17 in
# one command, for the H200 machine lent through the device tool:
#   1. unpack the carried .debs (bench/gpu/fetch_debs.sh made .gpu-debs/:
#      cJSON, and zlib's static library for the dataset files),
#   2. configure and build bench/gpu for sm_90: ampc's formats, reference
#      GEMM, CUDA backend, model and trainer; test_cuda_gemm, test_cuda_nn,
#      test_model_device, gpu_bench, gpu_train, and ampc-gpu (the `ampc` CLI's
#      train, diagnose, memory and plan, without plotting),
# then, "tests" (correctness first, in this order):
#   3. test_cuda_gemm (every GEMM mode against the double reference),
#      test_cuda_nn (the GPU's layers, FP8 casts, FP16-accumulation kernel,
#      staged copies and optimizer against the CPU's), test_model_device (the
#      whole model on the GPU against the CPU, every preset, and its rounding
#      telemetry),
#   4. the failure-signature suite (tests/signatures.txt, as
#      tests/check_diagnose.sh runs it on the CPU) with `ampc-gpu train
#      --device cuda` and `ampc-gpu diagnose` (bench/gpu/signatures.sh),
# and "bench" (the measurements):
#   5. gpu_bench gemm --device cuda --json (every mode, every shape), then
#      PyTorch's torch.matmul / torch._scaled_mm on the same shapes, merged
#      into a markdown table (bench/gpu/table.py),
#   6. gpu_train (ampc's whole training step: vit-ref, mm-tiny, mm-base in
#      32-true, 16-mixed, bf16-mixed) and PyTorch's
#      (tests/reference/torch_step.py --device cuda: fp32 without TF32,
#      autocast bf16, autocast fp16 + GradScaler; fp16 with torch.compile on
#      mm-base), the 50-step loss curves on the GPU against the CPU
#      (gpu_train --curve), merged by bench/gpu/train_table.py.
# "all" (the default) runs both. The build and every part run under a time
# limit (a part's own is a ceiling, not an estimate), cut to what is left of
# CHECK_BUDGET seconds (default 570, under the device tool's 600 s per
# command) so that the results so far always come back; a part with under
# 15 s left is skipped and says so. If "all" runs out, run "bench" alone.
# Results go to $OUT (the device tool brings it back): parts.txt (appended:
# each part's exit status and seconds, skips, a skipped CUDA half),
# nvidia-smi.txt, build.log; per part NAME.txt (its output: test_cuda_gemm,
# test_cuda_nn, test_model_device, signatures_run, ampc_gemm, torch_gemm,
# gpu_train, torch_MODEL.MODE, curves); signatures.txt, signatures.err and
# sig/ (each run's log and diagnosis); ampc_gemm.json, torch_gemm.json,
# gemm_table.md, ampc_train.jsonl, torch_train.jsonl, curves.jsonl,
# train_table.md. Exits non-zero if the build or any part fails, is skipped
# for lack of time, or skips its GPU half (no device).
# Device call: run(command="sh bench/gpu/check.sh", carry=[".gpu-debs"], timeout_s=600)
# (Nothing here has run on a GPU yet.)
set -u
what=${1:-all}
case "$what" in tests | bench | all) ;; *)
  echo "usage: sh bench/gpu/check.sh [tests|bench|all]" >&2
  exit 2
  ;;
esac
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ampc-gpu-out}
mkdir -p "$OUT"
t_start=$(date +%s)
deadline=$((t_start + ${CHECK_BUDGET:-570}))
echo "check.sh $what: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${CHECK_BUDGET:-570} s" >>"$OUT/parts.txt"
rc=0
ran=0

# part NAME LIMIT CMD...: CMD under min(LIMIT, what is left), its output in
# $OUT/NAME.txt (an old one removed first); records the exit status (77:
# the program found no device and skipped; 124: the limit); ran=1 if it
# ran; non-zero (and rc=1) on failure or skip
part() {
  name=$1 limit=$2
  shift 2
  ran=0
  rm -f "$OUT/$name.txt"
  left=$((deadline - $(date +%s) - 5))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    echo "check.sh: $name skipped: ${left}s left of the budget" | tee -a "$OUT/parts.txt"
    rc=1
    return 1
  fi
  t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  st=$?
  ran=1
  what_st="exit $st"
  [ "$st" -eq 77 ] && what_st="skipped (exit 77: no device)"
  [ "$st" -eq 124 ] && what_st="stopped at its limit (exit 124)"
  echo "check.sh: $name $what_st in $(($(date +%s) - t0)) s (limit $limit s)" | tee -a "$OUT/parts.txt"
  [ "$st" -eq 0 ] || rc=1
  return "$st"
}

deps=/tmp/ampc-deps
mkdir -p "$deps"
for f in .gpu-debs/*.deb; do
  [ -f "$f" ] || continue
  if command -v dpkg >/dev/null 2>&1; then
    dpkg -x "$f" "$deps"
  else # a .deb is an ar archive holding data.tar.*
    abs="$(pwd)/$f"
    (cd "$deps" && ar x "$abs" && tar xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary)
  fi
done
command -v nvcc >/dev/null 2>&1 || export PATH="$PATH:/usr/local/cuda/bin"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } \
  >"$OUT/nvidia-smi.txt" 2>&1
if ! { cmake -S bench/gpu -B build-gpu -DAMPC_DEPS="$deps" -DCMAKE_BUILD_TYPE=Release &&
  timeout $((deadline - $(date +%s) - 20)) cmake --build build-gpu -j "$(nproc)"; } \
  >"$OUT/build.log" 2>&1; then
  tail -n 40 "$OUT/build.log"
  echo "check.sh: the build failed or ran out of the budget (build.log)" | tee -a "$OUT/parts.txt"
  exit 1
fi
echo "check.sh: built in $(($(date +%s) - t_start)) s" | tee -a "$OUT/parts.txt"

if [ "$what" != bench ]; then
  part test_cuda_gemm 120 ./build-gpu/test_cuda_gemm
  [ "$ran" = 1 ] && tail -n 30 "$OUT/test_cuda_gemm.txt"
  part test_cuda_nn 150 ./build-gpu/test_cuda_nn
  [ "$ran" = 1 ] && grep -E "FAIL|SKIP|passed|failed" "$OUT/test_cuda_nn.txt" | tail -n 30
  part test_model_device 150 ./build-gpu/test_model_device
  if [ "$ran" = 1 ]; then
    grep -v '^ok' "$OUT/test_model_device.txt" | tail -n 25
    if grep -q '^# skip' "$OUT/test_model_device.txt"; then # its cpu-split half passed alone
      echo "check.sh: test_model_device skipped its CUDA half (no device)" | tee -a "$OUT/parts.txt"
      rc=1
    fi
  fi
  rm -f "$OUT/signatures.txt" "$OUT/signatures.err"
  part signatures_run 150 sh bench/gpu/signatures.sh ./build-gpu/ampc-gpu cuda "$OUT"
  [ "$ran" = 1 ] && cat "$OUT/signatures.txt"
fi

if [ "$what" != tests ]; then
  if part ampc_gemm 150 sh -c "./build-gpu/gpu_bench gemm --device cuda --json --reps 7 >'$OUT/ampc_gemm.json'"; then
    part torch_gemm 90 sh -c "PYTHONUNBUFFERED=1 python3 bench/gpu/torch_matmul.py '$OUT/ampc_gemm.json' --reps 7 >'$OUT/torch_gemm.json'"
    python3 bench/gpu/table.py "$OUT/ampc_gemm.json" "$OUT/torch_gemm.json" >"$OUT/gemm_table.md" &&
      cat "$OUT/gemm_table.md"
  fi
  part gpu_train 150 sh -c "./build-gpu/gpu_train --steps 10 --warmup 3 >'$OUT/ampc_train.jsonl'"
  : >"$OUT/torch_train.jsonl"
  for m in mm-base mm-tiny vit-ref; do
    b=128
    [ "$m" = mm-base ] && b=64
    for mode in fp32 bf16 fp16; do
      part "torch_$m.$mode" 45 sh -c "python3 tests/reference/torch_step.py --device cuda --model $m --mode $mode --batch $b --steps 10 --warmup 3 >>'$OUT/torch_train.jsonl'"
    done
  done
  # torch.compile: its compile time is not timed (warmup)
  part torch_mm-base.compile 120 sh -c "python3 tests/reference/torch_step.py --device cuda --model mm-base --mode fp16 --compile --batch 64 --steps 10 --warmup 3 >>'$OUT/torch_train.jsonl'"
  # 50-step loss curves, GPU against the CPU and the CPU's seed-to-seed spread
  part curves 150 sh -c "./build-gpu/gpu_train --curve 50 --models mm-tiny --batch 32 >'$OUT/curves.jsonl'"
  python3 bench/gpu/train_table.py "$OUT/ampc_train.jsonl" "$OUT/torch_train.jsonl" \
    "$OUT/curves.jsonl" >"$OUT/train_table.md" && cat "$OUT/train_table.md"
fi
echo "check.sh: done in $(($(date +%s) - t_start)) s, exit $rc"
exit $rc
