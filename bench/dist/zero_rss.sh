#!/bin/sh
# bench/dist/zero_rss.sh AMPC [MODEL] [RANKS]: resident memory per rank under
# --zero 0 and --zero 1 (ZeRO stage 1), measured against the account.
# Runs RANKS (2) ranks of `AMPC train --model MODEL (mm-base) --precision
# 16-mixed --optimizer adamw --batch 2*RANKS --threads 1 --no-eval
# --telemetry-every 0 --steps STEPS (6)`, once with --zero 0 and once with
# --zero 1, and samples every rank's VmRSS (and VmHWM) from /proc/PID/status
# every 0.2 s once the log shows an applied optimizer step (the first steps of
# 16-mixed are skipped by the loss scaler; after an applied one every buffer
# of the step has been written at least once). A rank's steady RSS is its
# largest sample from then until the last step is logged; VmHWM before step 1
# is logged shows the transient of init and the --zero 1 cut. The ranks are
# found by a tag in their environment and OMPI_COMM_WORLD_RANK in
# /proc/PID/environ.
# Predicted saving per rank: master + moments (+ compensation) bytes of the
# --zero 0 run's config line (parameter_bytes) minus those of the rank's shard,
# plus the FP32 staging (the summary's grad_stage: whole without ZeRO, the
# shard's with it)
# (ampc_shard_range over the same elements; rank 0's is checked against the
# --zero 1 run's config line). Measured saving: steady RSS at --zero 0 minus
# steady RSS at --zero 1. Also prints each run's summary peak_rss_bytes (rank
# 0's). Env STEPS, PER_RANK (batch per rank, 2), PRESET override. Needs
# mpirun (Open MPI); passes --allow-run-as-root and sets
# OMPI_MCA_btl_vader_single_copy_mechanism=none (no CMA in containers).
set -eu
ampc=$1
model=${2:-mm-base}
ranks=${3:-2}
steps=${STEPS:-6} per_rank=${PER_RANK:-2} preset=${PRESET:-16-mixed}
batch=$((per_rank * ranks))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
export OMPI_MCA_btl_vader_single_copy_mechanism=none
flags="--model $model --precision $preset --optimizer adamw --batch $batch --steps $steps --threads 1 --no-eval --telemetry-every 0 --quiet"
mpi="mpirun --allow-run-as-root --oversubscribe -np $ranks"
echo "# bench/dist/zero_rss.sh $*: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# each run: OMPI_MCA_btl_vader_single_copy_mechanism=none $mpi $ampc train $flags --zero Z --log LOG"

# run Z: one mpirun with --zero Z; samples to $tmp/rss.Z ("rank VmRSS_kB VmHWM_kB")
run() {
  z=$1
  log="$tmp/z$z.jsonl"
  tag="zero_rss.$$.$z"
  ZERO_RSS_TAG=$tag $mpi -x ZERO_RSS_TAG "$ampc" train $flags --zero "$z" --log "$log" >"$tmp/out.$z" 2>&1 &
  job=$!
  : >"$tmp/rss.$z"
  : >"$tmp/rss.$z.pre"
  pids=
  found=0
  while kill -0 "$job" 2>/dev/null; do
    if [ "$found" -lt "$ranks" ]; then
      pids=
      found=0
      for e in /proc/[0-9]*/environ; do
        env=$( (tr '\0' '\n' <"$e") 2>/dev/null) || continue
        case "$env" in *"ZERO_RSS_TAG=$tag"*) ;; *) continue ;; esac
        r=$(printf '%s\n' "$env" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ -n "$r" ] || continue
        p=${e#/proc/}
        pids="$pids ${p%/environ}:$r"
        found=$((found + 1))
      done
    else
      # before step 1 is logged: rss.Z.pre (init, the cut, step 1); from the
      # first applied optimizer step until the last step is logged: rss.Z
      out=
      if ! grep -q '"step":1,' "$log" 2>/dev/null; then
        out="$tmp/rss.$z.pre"
      elif grep -q '"skipped":false' "$log" && ! grep -q "\"step\":$steps," "$log"; then
        out="$tmp/rss.$z"
      fi
      if [ -n "$out" ]; then
        for pr in $pids; do
          awk -v r="${pr#*:}" '/^VmRSS:/ {rss = $2} /^VmHWM:/ {hwm = $2} END {if (rss != "") print r, rss, hwm}' \
            "/proc/${pr%:*}/status" 2>/dev/null >>"$out" || true
        done
      fi
    fi
    sleep 0.2
  done
  if ! wait "$job"; then
    cat "$tmp/out.$z" >&2
    echo "zero_rss.sh: the --zero $z run failed" >&2
    exit 1
  fi
  if [ "$found" -lt "$ranks" ]; then
    echo "zero_rss.sh: found $found of $ranks ranks of the --zero $z run in /proc" >&2
    exit 1
  fi
}
run 0
run 1
python3 - "$tmp" "$ranks" <<'PY'
import json, sys
tmp, N = sys.argv[1], int(sys.argv[2])
def events(z):
    out = {}
    for l in open("%s/z%d.jsonl" % (tmp, z)):
        o = json.loads(l)
        if o.get("event") in ("config", "summary"):
            out[o["event"]] = o
    return out
def samples(z, pre=False):
    rss, hwm = {}, {}
    for l in open("%s/rss.%d%s" % (tmp, z, ".pre" if pre else "")):
        f = l.split()
        if len(f) != 3:
            continue
        r, a, b = int(f[0]), int(f[1]) * 1024, int(f[2]) * 1024
        rss.setdefault(r, []).append(a)
        hwm[r] = max(hwm.get(r, 0), b)
    for r in range(N):
        if r not in rss and not pre:
            sys.exit("zero_rss.sh: no steady-state samples of rank %d at --zero %d (too few steps?)" % (r, z))
    return rss, hwm
def shard_range(total, size, rank):  # ampc_shard_range (src/core/params.c)
    A = 4096
    S = (total + A * size - 1) // (A * size) * A
    a = min(S * rank, total)
    return a, min(total - a, S)
e0, e1 = events(0), events(1)
pb0, pb1 = e0["config"]["parameter_bytes"], e1["config"]["parameter_bytes"]
roles = ["master", "exp_avg", "exp_avg_sq", "kahan_comp"]
T = pb0["master"] // 4  # the table's elements (each FP32 role holds 4 bytes per element)
state0 = sum(pb0[k] for k in roles)
dp1 = e1["config"]["run"]["data_parallel"]
n0 = shard_range(T, N, 0)[1]
if dp1["shard_elements"] != n0 or sum(pb1[k] for k in roles) * T != state0 * n0:
    sys.exit("zero_rss.sh: the --zero 1 config (shard %d, %s) is not the predicted shard %d of %d elements"
             % (dp1["shard_elements"], pb1, n0, T))
rss0, hwm0 = samples(0)
rss1, hwm1 = samples(1)
pre0, pre1 = samples(0, True)[1], samples(1, True)[1]
for h, p in ((hwm0, pre0), (hwm1, pre1)):  # the kernel's high-water mark lags a little
    for r in p:
        h[r] = max(h[r], p[r])
s0, s1 = e0["summary"], e1["summary"]
stage0 = s0["memory"].get("grad_stage", 0)
if s1["memory"].get("grad_stage", 0) != 4 * shard_range(T, N, 0)[1]:
    sys.exit("zero_rss.sh: the --zero 1 staging is %s bytes, not its shard's" % s1["memory"].get("grad_stage"))
print("model %s, %d ranks, %d parameters, %d elements in the table; --zero 0: master + moments + compensation %d bytes per rank, FP32 staging %d"
      % (e0["config"]["run"]["model"], N, e0["config"]["parameters"], T, state0, stage0))
print("steady RSS: each rank's largest VmRSS sample from the first applied optimizer step until the last step is logged (samples per rank: zero 0 %s, zero 1 %s)"
      % (min(len(v) for v in rss0.values()), min(len(v) for v in rss1.values())))
print()
print("| rank | shard elements | predicted saving (bytes) | steady RSS zero 0 | steady RSS zero 1 | measured saving | measured / predicted | VmHWM zero 0 | VmHWM zero 1 |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
worst = 0.0
for r in range(N):
    n = shard_range(T, N, r)[1]
    # master + moments + compensation, and the FP32 staging of the ranks' sum
    # (whole under --zero 0, the shard's under --zero 1 with one micro-batch)
    pred = state0 - state0 * n // T + stage0 - 4 * n
    a, b = max(rss0[r]), max(rss1[r])
    meas = a - b
    worst = max(worst, abs(meas / pred - 1))
    print("| %d | %d | %d (%.1f MiB) | %d (%.1f MiB) | %d (%.1f MiB) | %d (%.1f MiB) | %.4f | %.1f MiB | %.1f MiB |"
          % (r, n, pred, pred / 2**20, a, a / 2**20, b, b / 2**20, meas, meas / 2**20, meas / pred,
             hwm0[r] / 2**20, hwm1[r] / 2**20))
print()
print("spread of the steady samples (max - min): zero 0 %s MiB; zero 1 %s MiB"
      % (", ".join("%.1f" % ((max(rss0[r]) - min(rss0[r])) / 2**20) for r in range(N)),
         ", ".join("%.1f" % ((max(rss1[r]) - min(rss1[r])) / 2**20) for r in range(N))))
print("VmHWM before step 1 was logged (init, the --zero 1 cut, step 1): zero 0 %s MiB; zero 1 %s MiB"
      % (", ".join("%.1f" % (pre0.get(r, 0) / 2**20) for r in range(N)),
         ", ".join("%.1f" % (pre1.get(r, 0) / 2**20) for r in range(N))))
print("summary peak_rss_bytes (rank 0): zero 0 %d (%.1f MiB), zero 1 %d (%.1f MiB)"
      % (s0["peak_rss_bytes"], s0["peak_rss_bytes"] / 2**20, s1["peak_rss_bytes"], s1["peak_rss_bytes"] / 2**20))
print("wall_s (rank 0): zero 0 %.1f, zero 1 %.1f; largest |measured / predicted - 1|: %.4f"
      % (s0["wall_s"], s1["wall_s"], worst))
PY
