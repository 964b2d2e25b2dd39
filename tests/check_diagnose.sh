#!/bin/sh
# tests/check_diagnose.sh AMPC: the signature suite on real data.
# Short mm-tiny runs on the bundled emoji pairs, each configured so that one
# safeguard is missing, and `ampc diagnose` must name that failure from the
# run's own counts (nothing is injected); the complete runs are healthy. Then
# `ampc compare` end to end (summary, report, plots) and the usage errors.
. "$(dirname "$0")/cli_lib.sh"
# --on-stall warn: these runs show a failure's signature to the end (the stop
# policy has its own test, check_stall.sh)
common="--threads 1 --no-eval --quiet --batch 16 --on-stall warn"

# sig NAME VERDICT [train flags]: the first verdict of the run must be VERDICT
sig() {
  name=$1; want=$2; shift 2
  # shellcheck disable=SC2086
  "$ampc" train $common --log "$tmp/$name.jsonl" --json "$@" >"$tmp/$name.sum" 2>"$tmp/err" ||
    { die "$name: train exited $? ($(cat "$tmp/err"))"; return; }
  "$ampc" diagnose --json "$tmp/$name.jsonl" >"$tmp/$name.diag" 2>"$tmp/err" ||
    { die "$name: diagnose exited $? ($(cat "$tmp/err"))"; return; }
  grep -q "^{\"verdict\":\"$want\"" "$tmp/$name.diag" ||
    die "$name: expected $want, got $(head -c 300 "$tmp/$name.diag")"
  # the run's own summary carries the same diagnosis
  grep -q "\"diagnosis\":{\"verdict\":\"$want\"" "$tmp/$name.sum" ||
    die "$name: the summary's diagnosis is not $want"
}

# the suite (tests/signatures.txt: NAME VERDICT FLAGS per line)
while read -r name want flags; do
  case "$name" in '' | '#'*) continue ;; esac
  # shellcheck disable=SC2086
  sig "$name" "$want" $flags </dev/null
done <"$(dirname "$0")/signatures.txt"
# and what each names beyond its verdict
grep -q '"tensor":"' "$tmp/static.diag" || die "static: no first non-finite tensor named"
# vision and fusion both pass 1 % flushed at step 1; either is the first
grep -Eq '"branch":"(vision|fusion)"' "$tmp/noscale.diag" || die "noscale: wrong branch"
grep -q 'non-finite weights' "$tmp/true16.diag" || die "true16: evidence lacks the weights"
grep -q 'forward pass, vision' "$tmp/bigact.diag" || die "bigact: no forward overflow in vision"
grep -q '"branch":"fusion"' "$tmp/fp8sat.diag" || die "fp8sat: the fusion branch is not named"
grep -q 'fp8-margin' "$tmp/fp8sat.diag" || die "fp8sat: no --fp8-margin safeguard"

# against the FP32 twin: the MLP at lr 1e-4 in pure bfloat16
# stays 10 % above FP32's loss with most updates swallowed; bf16-mixed
# matches it; the cross-run verdict names the cause
for p in 32-true bf16-true bf16-mixed; do
  "$ampc" train --model mlp --precision $p --lr 1e-4 --steps 300 --quiet --log "$tmp/tw-$p.jsonl" \
    >/dev/null 2>&1 || die "mlp $p: exit $?"
done
"$ampc" diagnose --json "$tmp/tw-bf16-true.jsonl" --baseline "$tmp/tw-32-true.jsonl" >"$tmp/tw.json" ||
  die "diagnose --baseline exited $?"
python3 - "$tmp/tw.json" <<'PY' || die "bf16-true vs 32-true: $(head -c 400 "$tmp/tw.json")"
import json, sys
b = json.load(open(sys.argv[1]))["baseline"]
assert b["significant"] and b["verdict"] == "swallowed-updates", b
assert b["rel"] > 0.05 and b["window"] == 30, b
PY
"$ampc" diagnose "$tmp/tw-bf16-mixed.jsonl" --baseline "$tmp/tw-32-true.jsonl" >"$tmp/out" 2>&1 ||
  die "diagnose --baseline (bf16-mixed) exited $?"
grep -q 'no precision gap' "$tmp/out" || die "bf16-mixed vs 32-true: $(cat "$tmp/out")"
"$ampc" diagnose "$tmp/tw-bf16-true.jsonl" --baseline "$tmp/nonexistent.jsonl" >/dev/null 2>&1
[ $? = 1 ] || die "diagnose --baseline of a missing file: not exit 1"
# a baseline that is not the run's 32-true twin is refused, naming why
"$ampc" diagnose "$tmp/tw-bf16-true.jsonl" --baseline "$tmp/tw-bf16-mixed.jsonl" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q 'must be the run.s 32-true twin' "$tmp/err" ||
  die "diagnose --baseline bf16-mixed: $(cat "$tmp/err")"
"$ampc" train --model mlp --precision 32-true --lr 1e-4 --steps 300 --seed 2 --quiet \
  --log "$tmp/tw-seed2.jsonl" >/dev/null 2>&1 || die "mlp seed 2: exit $?"
"$ampc" diagnose "$tmp/tw-bf16-true.jsonl" --baseline "$tmp/tw-seed2.jsonl" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "'seed' differs" "$tmp/err" || die "diagnose --baseline seed 2: $(cat "$tmp/err")"
"$ampc" diagnose "$tmp/tw-bf16-true.jsonl" --margin 0.05 >/dev/null 2>&1
[ $? = 2 ] || die "diagnose --margin without --baseline: not exit 2"
"$ampc" diagnose "$tmp/tw-bf16-true.jsonl" --baseline "$tmp/tw-32-true.jsonl" --margin 0 >/dev/null 2>&1
[ $? = 2 ] || die "diagnose --margin 0: not exit 2"
"$ampc" diagnose "$tmp/tw-bf16-true.jsonl" --baseline >/dev/null 2>&1
[ $? = 2 ] || die "diagnose --baseline without a value: not exit 2"

# the text report names the verdict, the evidence and the safeguard
"$ampc" diagnose "$tmp/noscale.jsonl" >"$tmp/out" 2>&1 || die "diagnose (text) exited $?"
grep -q '^verdict: underflow' "$tmp/out" || die "text report lacks the verdict"
grep -q 'safeguard: loss scaling' "$tmp/out" || die "text report lacks the safeguard"

# ampc compare: two runs, all outputs
"$ampc" compare --out "$tmp/cmp" --run fp32='--precision 32-true' \
  --run A='--precision 16-mixed --loss-scale none' --steps 3 --batch 8 --threads 1 --no-eval \
  2>"$tmp/err" || die "compare exited $? ($(cat "$tmp/err"))"
for f in summary.json report.md loss.png scale.png grad_hist.png fp32.jsonl A.jsonl; do
  [ -s "$tmp/cmp/$f" ] || die "compare did not write $f"
done
for f in loss.png scale.png grad_hist.png; do
  head -c 8 "$tmp/cmp/$f" | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a' || die "$f is not a PNG"
done
grep -q '"label":[[:space:]]*"A"' "$tmp/cmp/summary.json" || die "summary.json lacks run A"
grep -q '"peak_rss_bytes":[[:space:]]*[1-9]' "$tmp/cmp/summary.json" || die "summary.json lacks peak_rss_bytes"
grep -q '| fp32 |' "$tmp/cmp/report.md" || die "report.md lacks the fp32 row"
# with enough steps, every run against the 32-true one (vs_fp32, the report's table)
"$ampc" compare --out "$tmp/cmp2" --model mlp --lr 1e-4 --steps 300 \
  --run fp32='--precision 32-true' --run bt='--precision bf16-true' \
  --run bm='--precision bf16-mixed' 2>"$tmp/err" || die "compare (mlp) exited $? ($(cat "$tmp/err"))"
python3 - "$tmp/cmp2/summary.json" <<'PY' || die "compare: vs_fp32 wrong"
import json, sys
runs = {r["label"]: r for r in json.load(open(sys.argv[1]))["runs"]}
assert "vs_fp32" not in runs["fp32"], runs["fp32"]
assert runs["bt"]["vs_fp32"]["verdict"] == "swallowed-updates", runs["bt"]["vs_fp32"]
assert runs["bm"]["vs_fp32"]["verdict"] is None and not runs["bm"]["vs_fp32"]["significant"]
PY
grep -q '^## Against the FP32 baseline (fp32)' "$tmp/cmp2/report.md" || die "report.md lacks the baseline table"
# a run that can no longer learn stops at its stall, with its verdict, and the next one runs
"$ampc" compare --out "$tmp/cmp3" --model mlp --steps 100 --run t16='--precision 16-true' \
  --run fp32='--precision 32-true' 2>"$tmp/err" || die "compare (16-true) exited $? ($(cat "$tmp/err"))"
grep -q "run t16 stopped at step 1: it can no longer learn (nonfinite-independent-of-scale)" \
  "$tmp/err" || die "compare did not stop 16-true: $(cat "$tmp/err")"
grep -q '| t16 | .* | stopped at step 1 (stalled, see t16.txt) | | | nonfinite-independent-of-scale |' \
  "$tmp/cmp3/report.md" || die "report.md: $(grep t16 "$tmp/cmp3/report.md")"
grep -q '| fp32 | .* | 0\.[0-9]* |' "$tmp/cmp3/report.md" || die "the run after the stall did not run"
# the stalled run's diagnosis at its stall, in the report and summary.json
grep -A2 '^### t16$' "$tmp/cmp3/report.md" | grep -q '^- \*\*nonfinite-independent-of-scale\*\*$' ||
  die "report.md has no diagnosis for the stalled run"
grep -q '| t16 | - | - | - | - | not compared: stopped at step 1 (stalled) |' "$tmp/cmp3/report.md" ||
  die "the baseline table does not say why t16 is not compared"
python3 - "$tmp/cmp3/summary.json" <<'PY' || die "summary.json: the stalled run has no verdicts"
import json, sys
runs = {r["label"]: r for r in json.load(open(sys.argv[1]))["runs"]}
assert runs["t16"]["verdicts"] == ["nonfinite-independent-of-scale"], runs["t16"]["verdicts"]
PY

# usage and runtime errors
expect 2 diagnose
expect 2 diagnose --bogus "$tmp/healthy.jsonl"
expect 2 diagnose "$tmp/healthy.jsonl" "$tmp/fp32.jsonl"
expect 1 diagnose "$tmp/nonexistent.jsonl"
printf 'not json\n' >"$tmp/bad.jsonl"
expect 1 diagnose "$tmp/bad.jsonl"
grep -q 'bad.jsonl:1' "$tmp/err" || die "malformed log error does not name file:line"
expect 2 compare --steps 2
expect 2 compare --out "$tmp/c2" --run 'bad label=--steps 2'
expect 2 compare --out "$tmp/c2" --log x.jsonl
: >"$tmp/afile"
expect 1 compare --out "$tmp/afile" --run x='--steps 1' --model mlp
# a model the data cannot feed: every run refuses it, compare says why, exit 2
expect 2 compare --out "$tmp/c3" --run a='--precision 32-true' --run b='--precision 16-mixed' \
  --model mm-micro --steps 1 --batch 4
grep -q "every run refused its flags" "$tmp/err" || die "compare, unfit model: $(cat "$tmp/err")"
grep -q "mm-micro takes 8x8x3 images" "$tmp/err" || die "compare does not say why: $(cat "$tmp/err")"
exit $fail
