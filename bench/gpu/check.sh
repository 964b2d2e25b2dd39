#!/bin/sh
# bench/gpu/check.sh [tests|bench|all]: the GPU checks (the CUDA
# GEMM; the layers, model and trainer on the device) in one command, for the
# H200 machine lent through the device tool.
#
# Binaries: bench/gpu's build (ampc's formats, reference GEMM, CUDA backend,
# model and trainer; test_cuda_gemm, test_cuda_nn, test_model_device, test_nccl,
# gpu_bench, gpu_train, and ampc-gpu: the `ampc` CLI's train, diagnose,
# memory and plan without plotting), either
#   - prebuilt on the Debian machine (bench/gpu/prebuild.sh puts them in
#     .gpu-prebuilt/, carried; the same CUDA 13.0 toolkit, sm_90 + PTX;
#     cuBLASLt is loaded with dlopen, the CUDA runtime is static), used when
#     every library they need is found there, or
#   - configured and built there (cmake, nvcc, the host's compiler), with
#     cJSON and zlib from the carried .debs (bench/gpu/fetch_debs.sh made
#     .gpu-debs/).
# Then, in this order (the GEMM and device checks first, each check's
# measurements right after it, so a budget that runs out loses the least):
#   test_cuda_gemm       every GEMM mode against the double reference
#   ampc_gemm, torch_gemm  gpu_bench gemm --device cuda --json, then
#                        PyTorch on the same shapes; gemm_table.md
#   test_cuda_nn         the GPU's layers, FP8 casts, FP16-accumulation kernel,
#                        staged copies and optimizer against the CPU's
#   test_model_device    the whole model on the GPU against the CPU, every
#                        preset, and its rounding telemetry
#   gpu_train, torch_train  ampc's whole training step (vit-ref, mm-tiny,
#                        mm-base in 32-true, 16-mixed, bf16-mixed) and
#                        PyTorch's (fp32 without TF32, autocast bf16,
#                        autocast fp16 + GradScaler); the typed, cast,
#                        tuned and kept variants
#   nccl                 NCCL on the one GPU (bench/gpu/nccl_check.sh): test_nccl
#                        --gpu (a group of one: the chain and the all-reduce
#                        keep the values' bits), then `ampc-gpu train --device
#                        cuda` with the NCCL path forced on (AMPC_NCCL_ONE_RANK=1)
#                        against the plain run: the same checkpoint
#   signatures_run       tests/signatures.txt with `ampc-gpu train --device
#                        cuda` and `ampc-gpu diagnose` (bench/gpu/signatures.sh)
#   curves               50-step loss curves on the GPU against the CPU's
#                        seed-to-seed spread (gpu_train --curve); train_table.md
#   torch_compile        PyTorch fp16 + torch.compile on mm-base
#   profile              Nsight Compute's GPU time per kernel over one 16-mixed
#                        mm-base step (after two warm-up steps, not recorded);
#                        profile_table.md
#   sanitize_NAME        compute-sanitizer memcheck on a test that failed
#   sanitize_typed       racecheck, synccheck and memcheck over test_cuda_nn's
#                        typed checks alone
#   gpu_train_large, torch_train_large  mm-large (188 M parameters): the
#                        presets, everything prepared, PyTorch fp32 and fp16
#   build_on_device      the build there, when prebuilt binaries ran and
#                        time is left (it checks that the build works there)
# "tests" runs the three tests, nccl, signatures_run and curves; "bench" the
# measurements; "all" (the default) everything.
# Every part runs under a time limit (its own is a ceiling, not an
# estimate), cut to what is left of CHECK_BUDGET seconds (default 560, under
# the device tool's 600 s per command), so results so far always come back;
# a part with under 15 s left is skipped and says so, as is one named in
# CHECK_SKIP (e.g. CHECK_SKIP="ampc_gemm build_on_device" for a re-run).
# Results: the device tool brings back at most 8 files from $OUT, so every
# output goes to a work folder that is packed into $OUT/results.tar.gz after
# each part (per part NAME.txt; signatures.txt, sig/; ampc_gemm.json,
# torch_gemm.json, ampc_train.jsonl, torch_train.jsonl, curves.jsonl;
# build.log, nvidia-smi.txt), and parts.txt, gemm_table.md,
# train_table.md, profile_table.md and profile_typed_table.md are copied to $OUT too. Exits non-zero if a build or part
# fails, is skipped for lack of time, or skips its GPU half (no device).
# Device call, after sh bench/gpu/fetch_debs.sh and sh bench/gpu/prebuild.sh:
#   run(command="sh bench/gpu/check.sh", carry=[".gpu-debs", ".gpu-prebuilt"], timeout_s=600)
# Every part's ceiling together is well over one call's 600 s. With the 15 minutes a session
# gets, skip what earlier runs measured and this session did not change, e.g.
#   CHECK_BUDGET=540 CHECK_SKIP="ampc_gemm torch_compile build_on_device signatures_run curves"
set -u
what=${1:-all}
case "$what" in tests | bench | all) ;; *)
  echo "usage: sh bench/gpu/check.sh [tests|bench|all]" >&2
  exit 2
  ;;
esac
cd "$(dirname "$0")/../.."
root=$(pwd)
OUT=${OUT:-/tmp/ampc-gpu-out}
R=/tmp/ampc-gpu-results
rm -rf "$R"
mkdir -p "$OUT" "$R"
t_start=$(date +%s)
deadline=$((t_start + ${CHECK_BUDGET:-560}))
echo "check.sh $what: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${CHECK_BUDGET:-560} s" >>"$R/parts.txt"
rc=0
ran=0

# pack: the results so far into $OUT (a few files, the rest in one archive)
pack() {
  tar czf "$OUT/results.tar.gz.tmp" -C "$R" . 2>/dev/null &&
    mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
  for f in parts.txt gemm_table.md train_table.md profile_table.md profile_typed_table.md; do
    [ -f "$R/$f" ] && cp "$R/$f" "$OUT/$f"
  done
  return 0
}

# left: seconds left of the budget
left() { echo $((deadline - $(date +%s) - 5)); }

# part NAME LIMIT CMD...: CMD under min(LIMIT, what is left), its output in
# $R/NAME.txt; records the exit status (77: the program found no device and
# skipped; 124: the limit); ran=1 if it ran; non-zero (and rc=1) on failure
# or skip
part() {
  name=$1 limit=$2
  shift 2
  ran=0
  case " ${CHECK_SKIP:-} " in *" $name "*)
    echo "check.sh: $name skipped (CHECK_SKIP)" | tee -a "$R/parts.txt"
    return 1
    ;;
  esac
  l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -lt 15 ]; then
    echo "check.sh: $name skipped: ${l}s left of the budget" | tee -a "$R/parts.txt"
    rc=1
    pack
    return 1
  fi
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$R/$name.txt" 2>&1
  st=$?
  ran=1
  what_st="exit $st"
  [ "$st" -eq 77 ] && what_st="skipped (exit 77: no device)"
  [ "$st" -eq 124 ] && what_st="stopped at its limit (exit 124)"
  echo "check.sh: $name $what_st in $(($(date +%s) - t0)) s (limit $limit s)" | tee -a "$R/parts.txt"
  [ "$st" -eq 0 ] || rc=1
  pack
  return "$st"
}

deps=/tmp/ampc-deps
mkdir -p "$deps"
for f in .gpu-debs/*.deb; do
  [ -f "$f" ] || continue
  if command -v dpkg >/dev/null 2>&1; then
    dpkg -x "$f" "$deps"
  else # a .deb is an ar archive holding data.tar.*
    abs="$root/$f"
    (cd "$deps" && ar x "$abs" && tar xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary)
  fi
done
command -v nvcc >/dev/null 2>&1 || export PATH="$PATH:/usr/local/cuda/bin"
# cuBLASLt (dlopen'ed): the toolkit's, else the one PyTorch's wheels carry
lt=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && lt="$lt:$d"
done
pylt=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null) &&
  [ -d "$pylt" ] && lt="$lt:$pylt"
# NCCL (dlopen'ed: the toolkit's folder first, then the search path): PyTorch's wheel's, if any
pync=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null) &&
  [ -d "$pync" ] && lt="$lt:$pync"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu$lt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  echo "nvcc: $(nvcc --version 2>&1 | tail -n 2 | tr '\n' ' ')"
  echo "cc: $(cc --version 2>&1 | head -n 1)"
  echo "cmake: $(cmake --version 2>&1 | head -n 1)"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ls -l /usr/local/cuda*/lib64/libcublasLt.so* 2>&1
  ls -l /usr/local/cuda*/lib*/libnccl.so* 2>&1
  lscpu | grep -E 'Model name|^CPU\(s\)'
} >"$R/nvidia-smi.txt" 2>&1

# the binaries: prebuilt if all their libraries resolve here, else built here
B=""
if [ -x .gpu-prebuilt/test_cuda_gemm ] && [ -x .gpu-prebuilt/ampc-gpu ]; then
  bins="test_cuda_gemm test_cuda_nn test_model_device test_nccl gpu_bench gpu_train ampc-gpu"
  if (cd .gpu-prebuilt && ldd $bins) >"$R/prebuilt_ldd.txt" 2>&1 &&
    ! grep -q "not found" "$R/prebuilt_ldd.txt"; then
    B=.gpu-prebuilt
    echo "check.sh: prebuilt binaries ($(cat .gpu-prebuilt/BUILD_INFO 2>/dev/null | head -n 1))" | tee -a "$R/parts.txt"
  else
    echo "check.sh: prebuilt binaries lack libraries here (prebuilt_ldd.txt): building" | tee -a "$R/parts.txt"
  fi
fi
build_here() {
  cmake -S bench/gpu -B build-gpu -DAMPC_DEPS="$deps" -DCMAKE_BUILD_TYPE=Release &&
    timeout $(($(left) - 15)) cmake --build build-gpu -j "$(nproc)"
}
if [ -z "$B" ]; then
  if ! build_here >"$R/build.log" 2>&1; then
    tail -n 40 "$R/build.log"
    echo "check.sh: the build failed or ran out of the budget (build.log)" | tee -a "$R/parts.txt"
    pack
    exit 1
  fi
  B=build-gpu
  echo "check.sh: built here in $(($(date +%s) - t_start)) s" | tee -a "$R/parts.txt"
fi
pack

failed_tests=""
# test BIN LIMIT: one test binary as a part, its summary on stdout
test_part() {
  part "$1" "$2" "./$B/$1"
  st=$?
  [ "$ran" = 1 ] || return
  grep -E "FAIL|fail|SKIP|skip|passed|error|Error" "$R/$1.txt" | grep -v '^ok' | tail -n 25
  [ "$st" -eq 0 ] || failed_tests="$failed_tests $1"
  if [ "$1" = test_model_device ] && grep -q '^# skip' "$R/$1.txt"; then
    echo "check.sh: test_model_device skipped its CUDA half (no device)" | tee -a "$R/parts.txt"
    rc=1
  fi
}

[ "$what" != bench ] && test_part test_cuda_gemm 90

if [ "$what" != tests ]; then
  if part ampc_gemm 120 sh -c "./$B/gpu_bench gemm --device cuda --json --reps 7 >'$R/ampc_gemm.json'"; then
    part torch_gemm 90 sh -c "PYTHONUNBUFFERED=1 python3 bench/gpu/torch_matmul.py '$R/ampc_gemm.json' --reps 7 >'$R/torch_gemm.json'"
    python3 bench/gpu/table.py "$R/ampc_gemm.json" "$R/torch_gemm.json" >"$R/gemm_table.md" 2>&1
    cat "$R/gemm_table.md"
    pack
  fi
fi

if [ "$what" != bench ]; then
  test_part test_cuda_nn 90
  test_part test_model_device 120
  # the model's step with the typed kernels (test_cuda_nn runs its checks both ways itself)
  part test_model_device_typed 120 env AMPC_CUDA_TYPED=1 "./$B/test_model_device"
  # (a failure sets rc; memcheck below reruns the generic test_model_device only)
  if [ "$ran" = 1 ]; then
    grep -E "FAIL|fail|passed|error" "$R/test_model_device_typed.txt" | tail -n 10
    if grep -q '^# skip' "$R/test_model_device_typed.txt"; then
      echo "check.sh: test_model_device_typed skipped its CUDA half (no device)" | tee -a "$R/parts.txt"
      rc=1
    fi
  fi
fi

if [ "$what" != tests ]; then
  part gpu_train 120 sh -c "./$B/gpu_train --steps 10 --warmup 3 >'$R/ampc_train.jsonl'"
  # the same with the typed kernels (ampc_cuda_set_typed_kernels): rows "typed"
  part gpu_train_typed 120 sh -c "./$B/gpu_train --typed --steps 10 --warmup 3 >>'$R/ampc_train.jsonl'"
  # mm-base with 16-bit operands in the attention products (--attention-cast), with the
  # typed kernels and without: rows "cast" and "typed cast"
  part gpu_train_cast 90 sh -c "./$B/gpu_train --models mm-base --precision 16-mixed --attention-cast --steps 10 --warmup 3 >>'$R/ampc_train.jsonl' && ./$B/gpu_train --models mm-base --precision 16-mixed --attention-cast --typed --steps 10 --warmup 3 >>'$R/ampc_train.jsonl'"
  # mm-base with everything prepared: typed kernels, the cast, and GEMM algorithms chosen by
  # timing (--tune), against 32-true with the typed kernels and tuning: rows "typed cast tuned"
  part gpu_train_tuned 90 sh -c "./$B/gpu_train --models mm-base --precision 32-true --typed --tune --steps 10 --warmup 3 >>'$R/ampc_train.jsonl' && ./$B/gpu_train --models mm-base --precision 16-mixed --attention-cast --typed --tune --steps 10 --warmup 3 >>'$R/ampc_train.jsonl'"
  # mm-base keeping the attention probabilities and x1 (--recompute off): what recomputing costs
  part gpu_train_keep 60 sh -c "./$B/gpu_train --models mm-base --keep --steps 10 --warmup 3 >>'$R/ampc_train.jsonl'"
  : >"$R/torch_train.jsonl"
  # one process per batch size (one torch import and CUDA start each)
  part torch_train_base 90 sh -c "PYTHONUNBUFFERED=1 python3 tests/reference/torch_step.py --device cuda --model mm-base --mode fp32,bf16,fp16 --batch 64 --steps 10 --warmup 3 --saved-bytes >>'$R/torch_train.jsonl'"
  part torch_train_small 90 sh -c "PYTHONUNBUFFERED=1 python3 tests/reference/torch_step.py --device cuda --model mm-tiny,vit-ref --mode fp32,bf16,fp16 --batch 128 --steps 10 --warmup 3 >>'$R/torch_train.jsonl'"
  python3 bench/gpu/train_table.py "$R/ampc_train.jsonl" "$R/torch_train.jsonl" >"$R/train_table.md" 2>&1
  cat "$R/train_table.md"
  pack
fi

if [ "$what" != bench ]; then
  # NCCL for the ranks' device sums, on a group of one (one GPU, no MPI in ampc-gpu)
  part nccl 90 sh bench/gpu/nccl_check.sh "./$B" "$R/nccl"
  [ "$ran" = 1 ] && grep -E "FAIL|passed|skip|nccl " "$R/nccl.txt" | tail -n 8
fi

if [ "$what" != bench ]; then
  part signatures_run 150 sh bench/gpu/signatures.sh "./$B/ampc-gpu" cuda "$R"
  [ "$ran" = 1 ] && cat "$R/signatures.txt" "$R/signatures.err"
  # 50-step loss curves, GPU against the CPU and the CPU's seed-to-seed spread
  part curves 120 sh -c "./$B/gpu_train --curve 50 --models mm-tiny --batch 32 >'$R/curves.jsonl'"
  [ "$ran" = 1 ] && sed 's/,"loss_device.*//' "$R/curves.jsonl"
  if [ -f "$R/ampc_train.jsonl" ]; then
    python3 bench/gpu/train_table.py "$R/ampc_train.jsonl" "$R/torch_train.jsonl" \
      "$R/curves.jsonl" >"$R/train_table.md" 2>&1
    tail -n 8 "$R/train_table.md"
  fi
  pack
fi

if [ "$what" != tests ]; then
  # torch.compile: its compile time is not timed (warmup)
  part torch_compile 120 sh -c "PYTHONUNBUFFERED=1 python3 tests/reference/torch_step.py --device cuda --model mm-base --mode fp16 --compile --batch 64 --steps 10 --warmup 3 >>'$R/torch_train.jsonl'"
  if [ -f "$R/ampc_train.jsonl" ]; then
    python3 bench/gpu/train_table.py "$R/ampc_train.jsonl" "$R/torch_train.jsonl" \
      "$R/curves.jsonl" >"$R/train_table.md" 2>&1
    pack
  fi
fi

# where the step's time goes: one 16-mixed mm-base step's kernels under
# Nsight Compute (GPU time per launch, each kernel alone; the clocks left
# alone), the step after two warm-up steps bracketed by gpu_train --profile;
# summed by kernel in profile_table.md (bench/gpu/ncu_table.py)
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ "$what" != tests ] && [ -n "$ncu" ]; then
  part profile 90 "$ncu" --profile-from-start off --clock-control none --csv \
    --metrics gpu__time_duration.sum "./$B/gpu_train" --models mm-base --precision 16-mixed \
    --steps 1 --warmup 2 --profile
  if [ "$ran" = 1 ]; then
    python3 bench/gpu/ncu_table.py "$R/profile.txt" >"$R/profile_table.md" 2>&1
    head -n 14 "$R/profile_table.md"
    pack
  fi
  # the same step with the typed kernels
  part profile_typed 90 "$ncu" --profile-from-start off --clock-control none --csv \
    --metrics gpu__time_duration.sum "./$B/gpu_train" --models mm-base --precision 16-mixed \
    --steps 1 --warmup 2 --profile --typed
  if [ "$ran" = 1 ]; then
    python3 bench/gpu/ncu_table.py "$R/profile_typed.txt" >"$R/profile_typed_table.md" 2>&1
    head -n 14 "$R/profile_typed_table.md"
    pack
  fi
fi

# where a test failed: compute-sanitizer's memcheck on it, for the next session
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
for t in $failed_tests; do
  [ -n "$cs" ] && [ "$(left)" -ge 40 ] || break
  part "sanitize_$t" 120 "$cs" --tool memcheck --print-limit 20 "./$B/$t"
  [ "$ran" = 1 ] && tail -n 30 "$R/sanitize_$t.txt"
done

# the typed kernels' own checks (test_cuda_nn AMPC_TEST_ONLY=typed) under compute-sanitizer:
# racecheck (shared memory: the bias gradient's and layer norm's block sums), synccheck (the
# barriers) and memcheck; a hazard or error fails the part (--error-exitcode)
if [ "$what" != bench ] && [ -n "$cs" ] && [ "$(left)" -ge 60 ]; then
  part sanitize_typed 120 sh -c "for t in racecheck synccheck memcheck; do AMPC_TEST_ONLY=typed '$cs' --tool \$t --error-exitcode 1 --print-limit 20 ./$B/test_cuda_nn || exit 1; done"
  [ "$ran" = 1 ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Invalid|FAILED|passed" "$R/sanitize_typed.txt" | tail -n 12
fi

# mm-large (width 768, depth 12 per tower, 188 M parameters: the top of the GPU-sized range),
# where the GEMMs weigh more: the three presets, then everything prepared (rows "typed cast
# tuned" against "32-true typed tuned"), and PyTorch fp32 / fp16 AMP on the same shapes; last,
# as the part a short budget loses first
if [ "$what" != tests ]; then
  part gpu_train_large 120 sh -c "./$B/gpu_train --models mm-large --steps 10 --warmup 3 >>'$R/ampc_train.jsonl' && ./$B/gpu_train --models mm-large --precision 32-true --typed --tune --steps 10 --warmup 3 >>'$R/ampc_train.jsonl' && ./$B/gpu_train --models mm-large --precision 16-mixed --attention-cast --typed --tune --steps 10 --warmup 3 >>'$R/ampc_train.jsonl'"
  part torch_train_large 90 sh -c "PYTHONUNBUFFERED=1 python3 tests/reference/torch_step.py --device cuda --model mm-large --mode fp32,fp16 --batch 64 --steps 10 --warmup 3 >>'$R/torch_train.jsonl'"
  if [ -f "$R/ampc_train.jsonl" ]; then
    python3 bench/gpu/train_table.py "$R/ampc_train.jsonl" "$R/torch_train.jsonl" \
      "$R/curves.jsonl" >"$R/train_table.md" 2>&1
    grep "mm-large" "$R/train_table.md"
    pack
  fi
fi

# the build there too, when the prebuilt binaries ran (not counted in rc: it
# checks that a GPU machine can build this, after the measurements)
if [ "$B" = .gpu-prebuilt ] && [ "$(left)" -ge 60 ]; then
  rc_keep=$rc
  part build_on_device 300 sh -c "cmake -S bench/gpu -B build-gpu -DAMPC_DEPS='$deps' -DCMAKE_BUILD_TYPE=Release && cmake --build build-gpu -j $(nproc)"
  [ "$ran" = 1 ] && tail -n 5 "$R/build_on_device.txt"
  rc=$rc_keep
fi
echo "check.sh: done in $(($(date +%s) - t_start)) s, exit $rc" | tee -a "$R/parts.txt"
pack
exit $rc
