#!/bin/sh
# bench/telemetry/run.sh AMPC [STEPS]: the cost of the rounding telemetry
# (the goal: <= 3 % of the run time at the default interval of 10, i.e. a
# sampled step costs <= +30 % of an unsampled one).
# mm-tiny, batch 64, 16-mixed, no evaluation; three runs of the
# same steps, interleaved twice: telemetry off, every 10 steps (default), every
# step (THREADS threads, default 1). Prints the mean step time over steps 3..N of each run (the first two
# are warm-up) and the overhead against "off", and, more robust on a busy
# machine, the cost of a sampled step against the unsampled steps of the same
# "every 10" runs, divided by 10. Run it on an idle machine.
set -eu
A=$1
steps=${2:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rep in 1 2; do
  for every in 0 10 1; do
    "$A" train --threads "${THREADS:-1}" --batch 64 --steps "$steps" --no-eval --quiet --telemetry-every "$every" \
      --log "$out/t$every.r$rep.jsonl" >/dev/null 2>&1
  done
done
mean() { # mean "ms" of step lines with step >= 3 in the given logs
  cat "$@" | grep '"event":"step"' | sed -n 's/.*"step":\([0-9]*\),.*"ms":\([0-9.e+-]*\).*/\1 \2/p' |
    awk '$1 >= 3 { s += $2; n++ } END { printf "%.1f", s / n }'
}
off=$(mean "$out"/t0.r*.jsonl)
printf 'telemetry     ms/step   overhead\n'
for every in 0 10 1; do
  m=$(mean "$out"/t$every.r*.jsonl)
  label=$([ "$every" = 0 ] && echo off || echo "every $every")
  awk -v l="$label" -v m="$m" -v o="$off" 'BEGIN { printf "%-12s %8.1f   %+6.1f %%\n", l, m, 100 * (m - o) / o }'
done
# within the "every 10" runs: sampled steps (1, 10, 20, ...) against the others
cat "$out"/t10.r*.jsonl | grep '"event":"step"' |
  sed -n 's/.*"step":\([0-9]*\),.*"ms":\([0-9.e+-]*\),.*"telemetry":\(true\|false\).*/\1 \2 \3/p' |
  awk '$1 >= 3 { if ($3 == "true") { s += $2; ns++ } else { u += $2; nu++ } }
       END { if (ns && nu) printf "within the every-10 runs: a sampled step costs %+.1f %% of an unsampled one (%d vs %d steps): %+.1f %% at interval 10\n", 100 * (s / ns - u / nu) / (u / nu), ns, nu, 10 * (s / ns - u / nu) / (u / nu) }'

