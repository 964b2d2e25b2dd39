#!/bin/sh
# bench/load/run.sh: the training step under OpenMP wait policies, on an idle
# machine and on one where another process keeps one core busy (a shell
# busy loop), ROUNDS interleaved rounds of STEPS steps of the main job's model
# (mm-tiny, 2 threads, no evaluation). Each line: the policy, the load, ms per
# step (the run's mean), the cores this process used and the other
# processes' cores (/proc/stat), and the run's own timing verdict.
# Usage: bench/load/run.sh [BUILD_DIR] (default build); ROUNDS (2), STEPS (12).
set -eu
B=${1:-build}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-12}
AMPC="$B/ampc"
echo "# bench/load/run.sh: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# policy load ms_per_step cores_used other_cores timing"
one() { # policy load
  case $1 in
  ampc-default) envs="" ;; # the ampc binary's own: passive, unless the user chose
  libgomp-default) envs="GOMP_SPINCOUNT=300000" ;; # libgomp's default spin count (kept by ampc)
  passive) envs="OMP_WAIT_POLICY=passive" ;;
  active) envs="OMP_WAIT_POLICY=active" ;;
  spin*) envs="GOMP_SPINCOUNT=${1#spin}" ;;
  1-thread) envs="" ;;
  esac
  thr=2
  [ "$1" = 1-thread ] && thr=1
  busy=""
  if [ "$2" = busy ]; then
    sh -c 'while :; do :; done' &
    busy=$!
    sleep 0.5
  fi
  out=$(env $envs "$AMPC" train --steps "$STEPS" --no-eval --quiet --json --threads $thr 2>/dev/null)
  [ -n "$busy" ] && kill "$busy"
  echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin); c = d["cpu"]
print("%s %s %.1f %.2f %.2f %s" % (sys.argv[1], sys.argv[2], d["ms_per_step_mean"], c["cores_used"], c.get("other_cores", -1), c["timing"]))' "$1" "$2"
}
for r in $(seq "$ROUNDS"); do
  for load in idle busy; do
    for p in ampc-default libgomp-default 1-thread; do
      one $p $load
    done
  done
done
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
