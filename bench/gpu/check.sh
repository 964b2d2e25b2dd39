#!/bin/sh
# bench/gpu/check.sh: the whole GPU check of the CUDA GEMM backend (issue 16)
# in one command, for the H200 machine lent through the device tool:
#   1. unpack the carried .debs (bench/gpu/fetch_debs.sh made .gpu-debs/),
#   2. configure and build bench/gpu (ampc's formats, reference GEMM, CUDA
#      backend, test_cuda_gemm, gpu_bench) for sm_90,
#   3. run test_cuda_gemm (every mode against the double reference) and
#      test_cuda_nn (the GPU's layers and optimizer against the CPU's; issue 17),
#   4. gpu_bench gemm --device cuda --json (every mode, every shape), then
#      PyTorch's torch.matmul / torch._scaled_mm on the same shapes,
#   5. merge both into a markdown table (bench/gpu/table.py),
#   6. issue 17: test_model_device (the whole model on the GPU against the
#      CPU, every preset, and its rounding telemetry: the same values counted
#      per branch and pass, healthy and with two failure signatures; the
#      per-call counts are in test_cuda_nn's "rounding tally"), gpu_train (ampc's whole training step: vit-ref,
#      mm-tiny, mm-base in 32-true, 16-mixed, bf16-mixed) and PyTorch's
#      (tests/reference/torch_step.py --device cuda: fp32 without TF32,
#      autocast bf16, autocast fp16 + GradScaler, and fp16 with torch.compile
#      where it works), the 50-step loss curves on the GPU against the CPU
#      (gpu_train --curve), merged by bench/gpu/train_table.py.
# Results go to $OUT (the device tool brings it back): nvidia-smi.txt,
# build.log, test_cuda_gemm.txt, test_cuda_nn.txt, ampc_gemm.json, torch_gemm.json,
# gemm_table.md, test_model_device.txt, ampc_train.jsonl, torch_train.jsonl,
# curves.jsonl, train_table.md. Each part runs under a time limit so that one hang leaves
# the rest. Exits non-zero if the build or a test fails.
# Device call: run(command="sh bench/gpu/check.sh", carry=[".gpu-debs"], timeout_s=600)
# (issue 16's part was sized for 420 s; the training part's limits add at
# most 150 + 150 + 9 x 45 + 120 + 150 s. Nothing here has run on a GPU yet.)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ampc-gpu-out}
mkdir -p "$OUT"
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
t0=$(date +%s)
if ! { cmake -S bench/gpu -B build-gpu -DAMPC_DEPS="$deps" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build build-gpu -j "$(nproc)"; } >"$OUT/build.log" 2>&1; then
  tail -n 40 "$OUT/build.log"
  echo "check.sh: the build failed (build.log)"
  exit 1
fi
echo "check.sh: built in $(($(date +%s) - t0)) s"
rc=0
./build-gpu/test_cuda_gemm >"$OUT/test_cuda_gemm.txt" 2>&1 || rc=$?
cat "$OUT/test_cuda_gemm.txt"
echo "check.sh: test_cuda_gemm exit $rc"
rc_nn=0
./build-gpu/test_cuda_nn >"$OUT/test_cuda_nn.txt" 2>&1 || rc_nn=$?
cat "$OUT/test_cuda_nn.txt"
echo "check.sh: test_cuda_nn exit $rc_nn"
[ "$rc_nn" -eq 0 ] || rc=1
if ./build-gpu/gpu_bench gemm --device cuda --json --reps 7 >"$OUT/ampc_gemm.json"; then
  PYTHONUNBUFFERED=1 python3 bench/gpu/torch_matmul.py "$OUT/ampc_gemm.json" --reps 7 \
    >"$OUT/torch_gemm.json" || echo "check.sh: torch_matmul.py failed"
  python3 bench/gpu/table.py "$OUT/ampc_gemm.json" "$OUT/torch_gemm.json" >"$OUT/gemm_table.md" &&
    cat "$OUT/gemm_table.md"
else
  echo "check.sh: gpu_bench failed"
  rc=1
fi
# ---- issue 17: the whole training step -------------------------------------------
rc_md=0
timeout 150 ./build-gpu/test_model_device >"$OUT/test_model_device.txt" 2>&1 || rc_md=$?
tail -n 25 "$OUT/test_model_device.txt"
echo "check.sh: test_model_device exit $rc_md"
[ "$rc_md" -eq 0 ] || rc=1
timeout 150 ./build-gpu/gpu_train --steps 10 --warmup 3 >"$OUT/ampc_train.jsonl" 2>"$OUT/ampc_train.err" ||
  { echo "check.sh: gpu_train failed: $(tail -n 3 "$OUT/ampc_train.err")"; rc=1; }
: >"$OUT/torch_train.jsonl"
for m in vit-ref mm-tiny mm-base; do
  b=128
  [ "$m" = mm-base ] && b=64
  for mode in fp32 bf16 fp16; do
    timeout 45 python3 tests/reference/torch_step.py --device cuda --model "$m" --mode "$mode" \
      --batch "$b" --steps 10 --warmup 3 >>"$OUT/torch_train.jsonl" 2>>"$OUT/torch_train.err" ||
      echo "check.sh: torch_step $m $mode failed"
  done
done
for m in mm-base; do # torch.compile: its compile time is not timed (warmup)
  b=64
  timeout 120 python3 tests/reference/torch_step.py --device cuda --model "$m" --mode fp16 \
    --compile --batch "$b" --steps 10 --warmup 3 >>"$OUT/torch_train.jsonl" \
    2>>"$OUT/torch_train.err" || echo "check.sh: torch_step $m fp16 --compile failed"
done
# 50-step loss curves, GPU against the CPU and the CPU's seed-to-seed spread
timeout 150 ./build-gpu/gpu_train --curve 50 --models mm-tiny --batch 32 >"$OUT/curves.jsonl" \
  2>"$OUT/curves.err" || { echo "check.sh: the loss curves failed: $(tail -n 3 "$OUT/curves.err")"; rc=1; }
python3 bench/gpu/train_table.py "$OUT/ampc_train.jsonl" "$OUT/torch_train.jsonl" \
  "$OUT/curves.jsonl" >"$OUT/train_table.md" && cat "$OUT/train_table.md"
exit $rc
