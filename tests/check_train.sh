#!/bin/sh
# tests/check_train.sh AMPC: `ampc train` end to end: every preset runs, the
# config line comes first, a run resumed from a checkpoint is bit-identical to
# an uninterrupted one (log lines without timings, and the final checkpoint),
# bad flags exit 2, runtime errors exit 1, and no half-written checkpoint is
# left behind.
. "$(dirname "$0")/cli_lib.sh"

for p in 32-true 16-mixed bf16-mixed 16-true bf16-true; do
  extra=""
  [ "$p" = 16-true ] && extra="--eps 1e-4 --weight-decay 0"
  "$ampc" train --model mlp --precision "$p" $extra --steps 40 --quiet --log "$tmp/$p.jsonl" >/dev/null 2>&1 ||
    die "preset $p exited $?"
  head -n 1 "$tmp/$p.jsonl" | grep -q "^{\"event\":\"config\",\"precision\":\"$p\"" ||
    die "$p: first log line is not the config"
  tail -n 1 "$tmp/$p.jsonl" | grep -q '^{"event":"summary"' || die "$p: last log line is not the summary"
  [ "$(grep -c '"event":"step"' "$tmp/$p.jsonl")" = 40 ] || die "$p: expected 40 step lines"
done

# resume: 200 steps straight vs 120 + 80 resumed, with skipped steps in both
flags="--precision 16-mixed --init-scale 1e30 --max-scale 1e30 --growth-interval 50 --steps 200 --quiet"
"$ampc" train --model mlp $flags --log "$tmp/full.jsonl" --save "$tmp/full.st" >/dev/null 2>&1 || die "full run"
"$ampc" train --model mlp $flags --stop-at 120 --log "$tmp/part.jsonl" --save "$tmp/part.st" >/dev/null 2>&1 ||
  die "interrupted run"
"$ampc" train --model mlp $flags --resume "$tmp/part.st" --log "$tmp/part.jsonl" --save "$tmp/res.st" \
  >/dev/null 2>&1 || die "resumed run"
strip() { grep '"event":"step"' "$1" | sed -e 's/"ms":[^,]*,//' -e 's/,"cores":[^,}]*//'; }
strip "$tmp/full.jsonl" >"$tmp/a"
strip "$tmp/part.jsonl" >"$tmp/b"
[ "$(wc -l <"$tmp/a")" = 200 ] || die "full log has $(wc -l <"$tmp/a") step lines"
grep -q '"skipped":true' "$tmp/a" || die "the resume case has no skipped step"
cmp -s "$tmp/a" "$tmp/b" || die "resumed log differs from the uninterrupted one"
cmp -s "$tmp/full.st" "$tmp/res.st" || die "resumed checkpoint differs"
# same seed and threads: identical logs
"$ampc" train --model mlp $flags --log "$tmp/again.jsonl" >/dev/null 2>&1
strip "$tmp/again.jsonl" >"$tmp/c"
cmp -s "$tmp/a" "$tmp/c" || die "same seed, different log"

# a run resumed with another loss-scale mode uses its own, not the checkpoint's
"$ampc" train --model mlp --precision 16-mixed --steps 20 --stop-at 10 --quiet --save "$tmp/m.st" \
  >/dev/null 2>&1 || die "16-mixed run for the mode-change resume"
"$ampc" train --model mlp --precision 16-mixed --loss-scale none --steps 20 --quiet \
  --resume "$tmp/m.st" --log "$tmp/none.jsonl" >/dev/null 2>&1 || die "resume with --loss-scale none"
[ "$(grep -c '"event":"step".*"loss_scale":1,' "$tmp/none.jsonl")" = 10 ] ||
  die "resumed with --loss-scale none, but S was not 1"

# --attention-cast: the checkpoint records it as in effect, a resume with the
# same setting is bit-identical to the uninterrupted run, a resume that
# switches it says so (stderr and the log's config warnings), and ampc eval
# rounds as the checkpoint was trained unless told otherwise
acf="--model mm-tiny --batch 8 --steps 4 --no-eval --threads 2 --quiet --attention-cast on"
"$ampc" train $acf --save "$tmp/ac_full.st" >/dev/null 2>&1 || die "--attention-cast on run"
"$ampc" train $acf --stop-at 2 --save "$tmp/ac_part.st" >/dev/null 2>&1 || die "--attention-cast on, stop at 2"
head -c 4096 "$tmp/ac_part.st" | grep -aq 'attention_cast\\":true' ||
  die "--attention-cast on: not in the checkpoint's ampc.model_config"
"$ampc" train $acf --resume "$tmp/ac_part.st" --save "$tmp/ac_res.st" >/dev/null 2>"$tmp/err" ||
  die "--attention-cast on: resume failed"
grep -q "attention cast" "$tmp/err" && die "--attention-cast resumed as trained, yet: $(cat "$tmp/err")"
cmp -s "$tmp/ac_full.st" "$tmp/ac_res.st" || die "--attention-cast on: resumed run differs"
"$ampc" train --model mm-tiny --batch 8 --steps 4 --no-eval --threads 2 --quiet \
  --resume "$tmp/ac_part.st" --log "$tmp/ac_off.jsonl" >/dev/null 2>"$tmp/err" ||
  die "--attention-cast off: resume failed"
grep -q "ac_part.st was trained with the attention cast on, this run has it off" "$tmp/err" ||
  die "a resume that switches --attention-cast says nothing: $(cat "$tmp/err")"
head -n 1 "$tmp/ac_off.jsonl" | grep -q '"warnings":\[[^]]*attention cast on, this run has it off' ||
  die "the switch is not in the log's config warnings: $(head -c 600 "$tmp/ac_off.jsonl")"
"$ampc" eval --checkpoint "$tmp/ac_part.st" --json 2>/dev/null | grep -q '"attention_cast":true' ||
  die "ampc eval does not round as the checkpoint was trained"
"$ampc" eval --checkpoint "$tmp/ac_part.st" --attention-cast off --json 2>/dev/null |
  grep -q '"attention_cast":false' || die "ampc eval --attention-cast off"
"$ampc" train $acf --precision 32-true --stop-at 1 --save "$tmp/ac_32.st" --log "$tmp/ac_32.jsonl" \
  >/dev/null 2>"$tmp/err" || die "32-true --attention-cast on"
grep -q "no effect under 32-true" "$tmp/err" || die "32-true --attention-cast on: no warning"
head -n 1 "$tmp/ac_32.jsonl" | grep -q '"warnings":\[[^]]*no effect under 32-true' ||
  die "32-true --attention-cast on: the warning is not in the log's config warnings"
head -c 4096 "$tmp/ac_32.st" | grep -aq 'attention_cast\\":false' ||
  die "32-true: the checkpoint does not record the attention cast as off (not in effect)"
# a malformed record (not true or false) is refused by resume and eval, naming the file
python3 - "$tmp/ac_part.st" "$tmp/ac_bad.st" <<'PY' || die "could not write the malformed checkpoint"
import sys
b = open(sys.argv[1], "rb").read()
old = b'attention_cast\\":true'
assert b.count(old) == 1
open(sys.argv[2], "wb").write(b.replace(old, b'attention_cast\\":1234'))  # same length
PY
"$ampc" train $acf --resume "$tmp/ac_bad.st" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "ac_bad.st: bad attention_cast" "$tmp/err" ||
  die "resume of a malformed attention_cast: $(cat "$tmp/err")"
"$ampc" eval --checkpoint "$tmp/ac_bad.st" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "ac_bad.st: bad attention_cast" "$tmp/err" ||
  die "eval of a malformed attention_cast: $(cat "$tmp/err")"
"$ampc" train --model mlp --steps 1 --quiet --attention-cast on >/dev/null 2>"$tmp/err" ||
  die "mlp --attention-cast on"
grep -q "has no attention: --attention-cast is ignored" "$tmp/err" || die "mlp --attention-cast: $(cat "$tmp/err")"

# bad usage exits 2 with a message naming the flag
expect() {
  want=$1; shift
  "$ampc" train --model mlp --steps 2 --quiet "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  [ "$rc" = "$want" ] || die "'$*' exited $rc, expected $want"
  [ -s "$tmp/err" ] || die "'$*' printed no message"
}
expect 2 --precision 8-mixed
expect 2 --loss-scale -3
expect 2 --loss-scale banana
expect 2 --steps 0
expect 2 --batch 100000
expect 2 --lr -1
expect 2 --lr nan
expect 2 --master-weights maybe
expect 2 --accumulate fp8
expect 2 --no-such-flag 1
expect 2 --optimizer lion
expect 2 --min-scale 10 --max-scale 1
expect 2 --steps
grep -q -- "--steps" "$tmp/err" || die "missing value message does not name --steps"
expect 2 --log /nonexistent/dir/log.jsonl
grep -q "/nonexistent/dir/log.jsonl" "$tmp/err" || die "log error does not name the file"
expect 1 --resume "$tmp/missing.st"
printf 'garbage' >"$tmp/bad.st"
expect 1 --resume "$tmp/bad.st"
grep -q "bad.st" "$tmp/err" || die "bad checkpoint error does not name the file"
expect 1 --resume "$tmp/full.st" --hidden 32
expect 2 --save /nonexistent/dir/x.st
expect 2 --save "$tmp"
expect 2 --log "$tmp/same.st" --save "$tmp/same.st"
# lint warnings name the value
"$ampc" train --model mlp --precision 16-true --steps 1 --quiet 2>"$tmp/err" >/dev/null
grep -q "eps = 1e-08" "$tmp/err" || die "no lint warning for eps in fp16"
"$ampc" train --model mlp --loss-scale 1000 --steps 1 --quiet 2>"$tmp/err" >/dev/null
grep -q "not a power of two" "$tmp/err" || die "no lint warning for a static scale of 1000"

# progress lines through a pipe arrive while the run goes on (line-buffered):
# the first line must reach the reader long before a 100000-step run ends
rm -f "$tmp/pipe.txt" "$tmp/pid"
("$ampc" train --model mlp --steps 100000 --eval-every 0 --hidden 16 --batch 8 2>/dev/null &
  echo $! >"$tmp/pid"
  wait) | cat >"$tmp/pipe.txt" &
n=0
while ! grep -q "ampc train:" "$tmp/pipe.txt" 2>/dev/null && [ $n -lt 300 ]; do
  sleep 0.1
  n=$((n + 1))
done
grep -q "ampc train:" "$tmp/pipe.txt" 2>/dev/null || die "no progress line through a pipe within 30 s"
[ -s "$tmp/pid" ] && kill "$(cat "$tmp/pid")" 2>/dev/null
wait

# --json with a --precision list: stdout is one JSON object, the per-run
# headers go to stderr
"$ampc" train --model mlp --precision 32-true,16-mixed --steps 2 --json >"$tmp/list.json" 2>/dev/null ||
  die "--precision list --json: exit $?"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["runs"]) == 2' \
  "$tmp/list.json" || die "--precision list --json: stdout is not one JSON object"
# each run of a list writes its own --log and --save, tagged with its preset,
# in both spellings (--log FILE, --log=FILE)
"$ampc" train --model mlp --precision 32-true,16-mixed --steps 2 --quiet --log="$tmp/lr.jsonl" \
  --save "$tmp/lm.st" >/dev/null 2>&1 || die "--precision list with --log=FILE: exit $?"
for p in 32-true 16-mixed; do
  [ -s "$tmp/lr.$p.jsonl" ] && [ -s "$tmp/lm.$p.st" ] || die "--precision list: no $p log or checkpoint"
done
[ -e "$tmp/lr.jsonl" ] && die "--precision list: --log=FILE written untagged"
"$ampc" train --model mlp --precision 32-true,16-mixed --steps 2 --quiet --save="$tmp/ls.st" \
  >/dev/null 2>&1 || die "--precision list with --save=FILE: exit $?"
[ -s "$tmp/ls.32-true.st" ] && [ -s "$tmp/ls.16-mixed.st" ] || die "--precision list: --save=FILE not tagged"
# an empty or directory-like value is not tagged into a hidden file: refused
expect 2 --model mlp --precision 32-true,16-mixed --steps 2 --log=
grep -q 'an empty path' "$tmp/err" || die "--precision list --log=: $(cat "$tmp/err")"

# --weight-update stochastic: bf16-true learns where nearest
# rounding swallows the updates; a stopped and resumed run is bit-identical;
# refused where it cannot apply
sr="--model mlp --precision bf16-true --lr 1e-4 --steps 300 --json"
near=$("$ampc" train $sr 2>/dev/null | field test_accuracy)
stoch=$("$ampc" train $sr --weight-update stochastic 2>/dev/null | field test_accuracy)
awk -v n="$near" -v s="$stoch" 'BEGIN { exit !(s > n + 0.2) }' ||
  die "bf16-true lr 1e-4: stochastic rounding accuracy $stoch is not clearly above nearest $near"
srf="--model mlp --precision bf16-true --weight-update stochastic --steps 6 --save-every 3 --quiet"
"$ampc" train $srf --save "$tmp/sr_full.st" 2>&1 | grep -q "weight update stochastic" ||
  die "--weight-update stochastic: not in the header"
AMPC_FAULT_FAIL=0:5 "$ampc" train $srf --save "$tmp/sr_part.st" >/dev/null 2>&1
"$ampc" train $srf --resume "$tmp/sr_part.st" --save "$tmp/sr_part.st" >/dev/null 2>&1 ||
  die "--weight-update stochastic: resume failed"
cmp -s "$tmp/sr_full.st" "$tmp/sr_part.st" || die "--weight-update stochastic: resumed run differs"
expect 2 --model mlp --weight-update stochastic --steps 1
grep -q 'needs --master-weights off' "$tmp/err" || die "16-mixed + stochastic: $(cat "$tmp/err")"
expect 2 --model mlp --precision 16-true --weight-update stochastic --steps 1
grep -q 'needs bfloat16 weights' "$tmp/err" || die "16-true + stochastic: $(cat "$tmp/err")"
expect 2 --model mlp --weight-update kahn --steps 1
grep -q 'expected nearest, stochastic or kahan' "$tmp/err" || die "--weight-update kahn: $(cat "$tmp/err")"

# --weight-update kahan: learns as stochastic rounding does, the compensation
# is in the memory summary and the checkpoint, resume is bit-identical;
# 16-true takes it too; refused with a master
kah=$("$ampc" train $sr --weight-update kahan 2>/dev/null | field test_accuracy)
awk -v n="$near" -v s="$kah" 'BEGIN { exit !(s > n + 0.2) }' ||
  die "bf16-true lr 1e-4: Kahan accuracy $kah is not clearly above nearest $near"
khf="--model mlp --precision bf16-true --weight-update kahan --steps 6 --save-every 3 --quiet"
"$ampc" train $khf --save "$tmp/kh_full.st" 2>&1 | grep -q "weight update kahan" ||
  die "--weight-update kahan: not in the header"
AMPC_FAULT_FAIL=0:5 "$ampc" train $khf --save "$tmp/kh_part.st" >/dev/null 2>&1
"$ampc" train $khf --resume "$tmp/kh_part.st" --save "$tmp/kh_part.st" >/dev/null 2>&1 ||
  die "--weight-update kahan: resume failed"
cmp -s "$tmp/kh_full.st" "$tmp/kh_part.st" || die "--weight-update kahan: resumed run differs"
grep -q 'optimizer.kahan_comp.fc1.weight' "$tmp/kh_full.st" ||
  die "--weight-update kahan: no compensation in the checkpoint"
"$ampc" train --model mlp --precision bf16-true --weight-update kahan --steps 3 --json 2>/dev/null |
  python3 -c 'import json, sys; m = json.load(sys.stdin)["memory"]; assert m["compensation"] == m["weights"], m' ||
  die "--weight-update kahan: the summary's memory has no compensation equal to the weights"
"$ampc" train --model mlp --precision 16-true --eps 1e-4 --weight-update kahan --steps 3 --quiet >/dev/null 2>&1 ||
  die "16-true --weight-update kahan failed"
expect 2 --model mlp --weight-update kahan --steps 1
grep -q 'needs --master-weights off' "$tmp/err" || die "16-mixed + kahan: $(cat "$tmp/err")"

# --loss-multiplier: in FP32, differentiating 2^-20 * loss
# with eps scaled alike takes the same steps: the same losses and weights
lmf="--model mlp --precision 32-true --steps 50 --quiet"
"$ampc" train $lmf --log "$tmp/lm1.jsonl" --save "$tmp/lm1.st" >/dev/null 2>&1 || die "lm 1 failed"
"$ampc" train $lmf --loss-multiplier 2^-20 --log "$tmp/lm20.jsonl" --save "$tmp/lm20.st" \
  >/dev/null 2>&1 || die "--loss-multiplier 2^-20 failed"
python3 - "$tmp/lm1.jsonl" "$tmp/lm20.jsonl" "$tmp/lm1.st" "$tmp/lm20.st" <<'PY' ||
import json, struct, sys
def losses(p):
    return [o["loss"] for o in map(json.loads, open(p)) if o.get("event") == "step"]
assert losses(sys.argv[1]) == losses(sys.argv[2])
cfg = [o for o in map(json.loads, open(sys.argv[2])) if o.get("event") == "config"][0]
assert cfg["run"]["loss_multiplier"] == 2 ** -20, cfg["run"]
def weights(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k != "__metadata__" and not k.startswith("optimizer.")}
assert weights(sys.argv[3]) == weights(sys.argv[4])
PY
  die "--loss-multiplier 2^-20 in FP32: not the same losses and weights as 1"
expect 2 --model mlp --loss-multiplier 2 --steps 1
expect 2 --model mlp --loss-multiplier 2^-41 --steps 1
expect 2 --model mlp --loss-multiplier 0 --steps 1
"$ampc" train --model mlp --optimizer sgd --loss-multiplier 2^-4 --steps 1 >/dev/null 2>"$tmp/err"
[ $? != 0 ] && grep -q 'needs AdamW' "$tmp/err" || die "--loss-multiplier with SGD: $(cat "$tmp/err")"

# --loss-scale per-branch: each branch's scale is in the
# log and moves apart from the others (the fusion's gradients are the
# smallest on mm-tiny), a stopped and resumed run is bit-identical, and
# scales that are not powers of two are refused
pbf="--loss-scale per-branch --steps 12 --save-every 6 --batch 8 --telemetry-every 2 --no-eval --threads 2 --quiet"
"$ampc" train $pbf --save "$tmp/pb_full.st" --log "$tmp/pb.jsonl" >/dev/null 2>&1 || die "per-branch failed"
AMPC_FAULT_FAIL=0:9 "$ampc" train $pbf --save "$tmp/pb_part.st" >/dev/null 2>&1
"$ampc" train $pbf --resume "$tmp/pb_part.st" --save "$tmp/pb_part.st" >/dev/null 2>&1 ||
  die "per-branch: resume failed"
cmp -s "$tmp/pb_full.st" "$tmp/pb_part.st" || die "per-branch: resumed run differs"
python3 - "$tmp/pb.jsonl" <<'PY' || die "per-branch: the log lacks the branch scales or they never move apart"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cfg = rows[0]
assert cfg["loss_scale"]["mode"] == "per-branch", cfg["loss_scale"]
steps = [o for o in rows if o.get("event") == "step"]
assert all(set(o["branch_scales"]) == {"vision", "text", "fusion", "heads"} for o in steps)
assert all(o["loss_scale"] == o["branch_scales"]["heads"] for o in steps)
assert any(o["branch_scales"]["fusion"] > o["branch_scales"]["heads"] for o in steps)
for o in steps:  # powers of two
    for v in o["branch_scales"].values():
        m = v
        while m >= 2: m /= 2
        while m < 1: m *= 2
        assert m == 1, v
assert all(o["overflow_branches"] for o in steps if o["overflow"]), "an overflow names no branch"
PY
"$ampc" diagnose "$tmp/pb.jsonl" >/dev/null 2>&1 || die "diagnose cannot read a per-branch log"
expect 2 --model mlp --loss-scale per-branch --init-scale 1000 --steps 1
grep -q 'powers of two' "$tmp/err" || die "per-branch with init 1000: $(cat "$tmp/err")"
expect 2 --model mlp --loss-scale per-brunch --steps 1

# --loss-scale per-loss (apex's num_losses): one scale per loss term, a
# backward pass each; only the overflowing term backs off; resume is
# bit-identical; fp8-mixed refuses it; between the dynamic modes a resume
# carries the scale over (per-branch -> dynamic: the smallest branch scale)
plf="--loss-scale per-loss --steps 12 --save-every 6 --batch 8 --telemetry-every 2 --no-eval --threads 2 --quiet"
"$ampc" train $plf --save "$tmp/pl_full.st" --log "$tmp/pl.jsonl" >/dev/null 2>&1 || die "per-loss failed"
AMPC_FAULT_FAIL=0:9 "$ampc" train $plf --save "$tmp/pl_part.st" >/dev/null 2>&1
"$ampc" train $plf --resume "$tmp/pl_part.st" --save "$tmp/pl_part.st" >/dev/null 2>&1 ||
  die "per-loss: resume failed"
cmp -s "$tmp/pl_full.st" "$tmp/pl_part.st" || die "per-loss: resumed run differs"
python3 - "$tmp/pl.jsonl" <<'PY' || die "per-loss: the log lacks the terms' scales, or an overflow moved another term"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [o for o in rows if o.get("event") == "step"]
assert all(set(o["loss_scales"]) == {"loss_itc", "loss_itm", "loss_cls"} for o in steps)
assert all(o["loss_scale"] == min(o["loss_scales"].values()) for o in steps)
for a, b in zip(steps, steps[1:]):
    for t, v in a["loss_scales"].items():
        if t in a["overflow_terms"]:
            assert b["loss_scales"][t] == v / 2, (a["step"], t)
        else:
            assert b["loss_scales"][t] == v, (a["step"], t)  # growth interval 2000
assert any(o["overflow_terms"] for o in steps), "no term overflowed at 2^16"
summ = rows[-1]
assert set(summ["final_loss_scales"]) == {"loss_itc", "loss_itm", "loss_cls"}, summ
assert summ["final_loss_scale"] == min(summ["final_loss_scales"].values()), summ
PY
# masked caption modelling (--w-mlm): a fourth loss term with its own
# per-loss scale; an interrupted and resumed run is bit-identical; the log
# and `ampc eval` carry loss_mlm; the checkpoint records the term, so a
# resume without it is refused (its head would be dropped) and eval rebuilds it
mlf="--w-mlm 1 --loss-scale per-loss --steps 8 --save-every 4 --batch 8 --no-eval --threads 2 --quiet"
"$ampc" train $mlf --save "$tmp/ml_full.st" --log "$tmp/ml.jsonl" >/dev/null 2>&1 || die "--w-mlm failed"
AMPC_FAULT_FAIL=0:5 "$ampc" train $mlf --save "$tmp/ml_part.st" >/dev/null 2>&1
"$ampc" train $mlf --resume "$tmp/ml_part.st" --save "$tmp/ml_part.st" >/dev/null 2>&1 ||
  die "--w-mlm: resume failed"
cmp -s "$tmp/ml_full.st" "$tmp/ml_part.st" || die "--w-mlm: resumed run differs"
python3 - "$tmp/ml.jsonl" <<'PY' || die "--w-mlm: the log lacks the MLM term or its scale"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cfg, steps = rows[0], [o for o in rows if o.get("event") == "step"]
assert cfg["run"]["w_mlm"] == 1 and abs(cfg["run"]["mlm_prob"] - 0.15) < 1e-6, cfg["run"]
assert all(set(o["loss_scales"]) == {"loss_itc", "loss_itm", "loss_cls", "loss_mlm"} for o in steps)
# a vocab of 3840 words: the first steps' MLM loss is near ln(3840)
assert abs(steps[0]["loss_mlm"] - math.log(3840)) < 0.3, steps[0]["loss_mlm"]
assert all(0 <= o["mlm_acc"] <= 1 for o in steps)
PY
"$ampc" train --w-mlm 0 --loss-scale per-loss --steps 8 --batch 8 --no-eval --threads 2 --quiet \
  --resume "$tmp/ml_part.st" >"$tmp/err" 2>&1 && die "a resume without the MLM term was accepted"
grep -q 'heads.mlm' "$tmp/err" || die "resume without --w-mlm: $(cat "$tmp/err")"
"$ampc" eval --checkpoint "$tmp/ml_full.st" --json >"$tmp/ml_eval.json" 2>"$tmp/err" ||
  die "eval of an MLM checkpoint: $(cat "$tmp/err")"
grep -q '"loss_mlm":' "$tmp/ml_eval.json" || die "eval of an MLM checkpoint has no loss_mlm"
expect 2 --w-mlm 1 --mlm-prob 0 --steps 1
expect 2 --w-mlm -1 --steps 1
"$ampc" train --model vit-ref --loss-scale per-loss --steps 2 --batch 8 --no-eval --threads 2 --quiet \
  --log "$tmp/plv.jsonl" >/dev/null 2>&1 || die "per-loss vit-ref failed"
grep -q '"loss_scales":{"loss_cls":' "$tmp/plv.jsonl" || die "per-loss vit-ref: not the cls term alone"
expect 2 --precision fp8-mixed --loss-scale per-loss --steps 1
grep -q 'per-loss runs a backward pass per loss term' "$tmp/err" || die "fp8 + per-loss: $(cat "$tmp/err")"
"$ampc" train $pbf --stop-at 6 --save "$tmp/pb6.st" >/dev/null 2>&1 || die "per-branch 6 steps failed"
"$ampc" train $pbf --loss-scale dynamic --resume "$tmp/pb6.st" --log "$tmp/pbd.jsonl" >/dev/null 2>&1 ||
  die "per-branch -> dynamic resume failed"
python3 - "$tmp/pb6.st" "$tmp/pbd.jsonl" <<'PY' || die "per-branch -> dynamic: the smallest branch scale did not carry over"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
sc = json.loads(json.loads(raw[8:8 + n])["__metadata__"]["ampc.scaler"])
steps = [json.loads(l) for l in open(sys.argv[2]) if '"event":"step"' in l]
assert steps[0]["loss_scale"] == min(sc["branch_scales"]), (steps[0]["loss_scale"], sc)
PY

# fp8-mixed: the MLP learns as bf16-mixed does; on mm-tiny the
# log counts the FP8 casts per branch, the checkpoint holds every site's
# amax history and scales, a stopped and resumed run is bit-identical; a
# resume with another --fp8-amax-history is refused
f8=$("$ampc" train --model mlp --precision fp8-mixed --json 2>/dev/null | field test_accuracy)
b16=$("$ampc" train --model mlp --precision bf16-mixed --json 2>/dev/null | field test_accuracy)
awk -v f="$f8" -v b="$b16" 'BEGIN { exit !(f > b - 0.03 && f > 0.8) }' ||
  die "fp8-mixed MLP accuracy $f8 is not within 0.03 of bf16-mixed's $b16"
f8f="--precision fp8-mixed --steps 6 --save-every 3 --batch 16 --no-eval --threads 2 --quiet"
"$ampc" train $f8f --save "$tmp/f8_full.st" --log "$tmp/f8.jsonl" >/dev/null 2>&1 ||
  die "fp8-mixed mm-tiny failed"
AMPC_FAULT_FAIL=0:5 "$ampc" train $f8f --save "$tmp/f8_part.st" >/dev/null 2>&1
"$ampc" train $f8f --resume "$tmp/f8_part.st" --save "$tmp/f8_part.st" >/dev/null 2>&1 ||
  die "fp8-mixed: resume failed"
cmp -s "$tmp/f8_full.st" "$tmp/f8_part.st" || die "fp8-mixed: resumed run differs"
python3 - "$tmp/f8.jsonl" "$tmp/f8_full.st" <<'PY' || die "fp8-mixed: log or checkpoint lacks the FP8 state"
import json, struct, sys
steps = [o for o in map(json.loads, open(sys.argv[1])) if o.get("event") == "step"]
cfg = [o for o in map(json.loads, open(sys.argv[1])) if o.get("event") == "config"][0]
assert cfg["fp8"]["amax_history"] == 1024, cfg
for b in ("vision", "text", "fusion"):
    v = steps[-1]["branches"][b]
    assert v["fp8_values"] > 0 and 0 <= v["fp8_saturated"] <= v["fp8_values"], v
# step 1 casts with scale 1 (no history yet): gradients flush in E5M2
assert steps[0]["branches"]["vision"]["fp8_flushed"] > steps[-1]["branches"]["vision"]["fp8_flushed"]
raw = open(sys.argv[2], "rb").read()
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
hist = [k for k in h if k.startswith("fp8.") and k.endswith(".amax_history")]
assert "fp8.vision.blocks.0.q.amax_history" in h and "fp8.fusion.blocks.0.fc2.scale" in h, hist[:3]
assert all(h[k]["shape"] == [3, 1024] for k in hist), hist[:3]
PY
"$ampc" train $f8f --fp8-amax-history 16 --resume "$tmp/f8_part.st" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q 'amax history of 1024 steps, this run.s is 16' "$tmp/err" ||
  die "fp8-mixed resume with another history: $(cat "$tmp/err")"
# damaged FP8 or Kahan state is refused (exit 1, the file and tensor named),
# not silently replaced by fresh state
drop() { # drop FILE OUT TENSOR: the checkpoint without that tensor
  python3 - "$@" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
del h[sys.argv[3]]
data, out = raw[8 + n:], b""  # repacked in file order: no hole where it was
for k, v in sorted(((k, v) for k, v in h.items() if k != "__metadata__"),
                   key=lambda kv: kv[1]["data_offsets"][0]):
    a, b = v["data_offsets"]
    v["data_offsets"] = [len(out), len(out) + b - a]
    out += data[a:b]
hb = json.dumps(h).encode()
hb += b" " * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + out)
PY
}
drop "$tmp/f8_part.st" "$tmp/f8_bad.st" fp8.vision.blocks.0.q.amax_history
"$ampc" train $f8f --resume "$tmp/f8_bad.st" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "f8_bad.st: the FP8 state of 'vision.blocks.0.q' is missing" "$tmp/err" ||
  die "fp8-mixed resume without one site's history: $(cat "$tmp/err")"
drop "$tmp/kh_part.st" "$tmp/kh_bad.st" optimizer.kahan_comp.fc2.weight
"$ampc" train $khf --resume "$tmp/kh_bad.st" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "kahan_comp.fc2.weight' is missing" "$tmp/err" ||
  die "kahan resume without one compensation tensor: $(cat "$tmp/err")"
# the recipe flags belong to fp8-mixed; FP8 needs FP32 accumulation
expect 2 --model mlp --precision bf16-mixed --fp8-margin 1 --steps 1
grep -q 'bf16-mixed has no FP8 casts' "$tmp/err" || die "bf16-mixed --fp8-margin: $(cat "$tmp/err")"
expect 2 --model mlp --precision fp8-mixed --accumulate fp16 --steps 1
grep -q 'fp8-mixed needs --accumulate fp32' "$tmp/err" || die "fp8 + fp16 acc: $(cat "$tmp/err")"
expect 2 --model mlp --precision fp8-mixed --fp8-margin 9 --steps 1
expect 2 --model mlp --precision fp8-mixed --fp8-amax-compute mean --steps 1
grep -q 'expected max or most_recent' "$tmp/err" || die "--fp8-amax-compute mean: $(cat "$tmp/err")"

[ $fail = 0 ] && echo "check_train: ok"
exit $fail
