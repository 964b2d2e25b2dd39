#!/bin/sh
# tests/check_memory.sh AMPC: `ampc memory` and `ampc plan` end to end: the
# literature's table (1.2e9 parameters with Adam: 16 bytes per parameter and
# 19.2 GB in both 32-true and 16-mixed), bad usage exits 2, and a short
# `ampc train` run at the batch `ampc plan` picks for a budget stays under
# that budget (peak RSS from getrusage, reported in the run's summary).
. "$(dirname "$0")/cli_lib.sh"

for p in 32-true 16-mixed; do
  out=$("$ampc" memory --params 1.2e9 --optimizer adamw --precision "$p" --json) || die "memory $p exited $?"
  [ "$(echo "$out" | field total_bytes)" = 19200000000 ] || die "$p: total is not 19.2 GB: $out"
  [ "$(echo "$out" | field bytes_per_param)" = 16 ] || die "$p: not 16 B/param: $out"
done
out=$("$ampc" memory --params 1.2e9 --precision 16-mixed --json)
echo "$out" | grep -q '"roles":{"weights":2400000000,"master":4800000000,"grads":2400000000,"moments":9600000000,"compensation":0}' ||
  die "16-mixed roles: $out"
# pure bfloat16: no master, BF16 moments: 8 B/param; Kahan updates
# add a BF16 compensation: 10 B/param, 12 GB instead of 19.2
out=$("$ampc" memory --params 1.2e9 --precision bf16-true --json)
[ "$(echo "$out" | field bytes_per_param)" = 8 ] || die "bf16-true: not 8 B/param: $out"
out=$("$ampc" memory --params 1.2e9 --precision bf16-true --weight-update kahan --json)
[ "$(echo "$out" | field total_bytes)" = 12000000000 ] || die "bf16-true kahan: not 12 GB: $out"
echo "$out" | grep -q '"compensation":2400000000' || die "bf16-true kahan roles: $out"
"$ampc" memory --params 1.2e9 --precision 16-mixed | grep -q "does not shrink" || die "no comparison sentence"
# sizes in binary units, as `ampc train` prints them; --params adds the decimal
# figure of the literature's table: 19.2e9 B = 17.88 GiB (19.20 GB)
out=$("$ampc" memory --params 1.2e9 --precision 16-mixed)
echo "$out" | grep -q '^total  *19200000000   17\.88 GiB (19\.20 GB)  *16$' || die "memory --params total line: $out"
echo "$out" | grep -q '^moments  *9600000000     8\.94 GiB (9\.60 GB)  *8$' || die "memory --params moments line: $out"
echo "$out" | grep -q '16 bytes/param, 17\.88 GiB (19\.20 GB), the same as 32-true' || die "memory --params sentence: $out"
"$ampc" memory --params 1.2e9 --precision bf16-true | grep -q ': 0\.50x of 32-true with adamw: 16 bytes/param, 17\.88 GiB (19\.20 GB)\.$' ||
  die "memory --params bf16-true: no 32-true comparison in GiB and GB"
# --model: binary units only (the total: its bytes / 2^20 MiB)
out=$("$ampc" memory --model mm-tiny --batch 64 --precision 16-mixed)
echo "$out" | awk '$1 == "total" { ok = ($4 == "MiB" && $3 == sprintf("%.2f", $2 / 1048576)) } END { exit !ok }' ||
  die "memory --model total line is not its bytes in MiB: $out"
echo "$out" | grep -Eq ' (kB|MB|GB)' && die "memory --model prints decimal units: $out"
out=$("$ampc" memory --model mm-tiny --batch 64 --precision 16-mixed --json) || die "memory --model exited $?"
echo "$out" | grep -q '"activations":[1-9]' || die "no activations role: $out"
echo "$out" | grep -q '"workspace":[1-9]' || die "no workspace role: $out"
"$ampc" memory --model mlp --batch 32 --json | grep -q '"activations":[1-9]' || die "memory --model mlp"
# --w-mlm: the MLM head's parameters (vocab x 128 + vocab, vocab 3840) and the
# masked copies' activations, as a training run with the term allocates them
base=$("$ampc" memory --model mm-tiny --batch 32 --json | field params)
out=$("$ampc" memory --model mm-tiny --batch 32 --w-mlm 1 --json) || die "memory --w-mlm exited $?"
[ "$(echo "$out" | field params)" = $((base + 3840 * 128 + 3840)) ] || die "memory --w-mlm params: $out"
"$ampc" train --w-mlm 1 --batch 32 --steps 1 --no-eval --threads 2 --quiet --log "$tmp/mlm.jsonl" \
  >/dev/null 2>&1 || die "train --w-mlm for the memory check"
got=$(tail -n 1 "$tmp/mlm.jsonl" | sed -n 's/.*"memory":{[^}]*"activations":\([0-9]*\).*/\1/p')
[ -n "$got" ] && [ "$(echo "$out" | sed -n 's/.*"activations":\([0-9]*\).*/\1/p')" = "$got" ] ||
  die "memory --w-mlm activations differ from the run's $got: $out"
# --recompute off: the attention probabilities and x1 kept (more activation
# bytes), as a training run with --recompute off allocates them
off=$("$ampc" memory --model mm-tiny --batch 32 --recompute off --json) || die "memory --recompute off exited $?"
act() { sed -n 's/.*"activations":\([0-9]*\).*/\1/p'; }
on_b=$("$ampc" memory --model mm-tiny --batch 32 --json | act)
off_b=$(echo "$off" | act)
[ -n "$on_b" ] && [ -n "$off_b" ] && [ "$off_b" -gt "$on_b" ] ||
  die "memory --recompute off: activations $off_b not above recompute on's $on_b"
echo "$off" | grep -q '"recompute":false' || die "memory --recompute off --json: $off"
"$ampc" train --recompute off --batch 32 --steps 1 --no-eval --threads 2 --quiet \
  --log "$tmp/keep.jsonl" >/dev/null 2>&1 || die "train --recompute off for the memory check"
got=$(tail -n 1 "$tmp/keep.jsonl" | sed -n 's/.*"memory":{[^}]*"activations":\([0-9]*\).*/\1/p')
[ "$off_b" = "$got" ] || die "memory --recompute off activations $off_b differ from the run's $got"
grep -q '"recompute":false' "$tmp/keep.jsonl" || die "train --recompute off: not in the log's config"
# --attention-cast on: the CPU rounds P one sample at a time (no activation
# or workspace bytes); the GPU's account adds the largest attention call's
# 16-bit P to device_scratch: mm-tiny at batch 32, the vision tower's
# 32 x 4 heads x 65 x 65 values x 2 bytes = 1,081,600 (the fusion's 64 pairs
# x 4 x 24 x 65 are fewer), in a scratch slot a quarter larger: 1,352,000
scr() { sed -n 's/.*"device_scratch":\([0-9]*\).*/\1/p'; }
tot() { sed -n 's/.*"total_bytes":\([0-9]*\).*/\1/p'; }
c_on=$("$ampc" memory --model mm-tiny --batch 32 --attention-cast on --json) || die "memory --attention-cast on exited $?"
c_off=$("$ampc" memory --model mm-tiny --batch 32 --json)
[ "$(echo "$c_on" | tot)" = "$(echo "$c_off" | tot)" ] || die "memory --attention-cast on changed the CPU account: $c_on"
echo "$c_on" | grep -q '"attention_cast":true' || die "memory --attention-cast on --json: $c_on"
g_on=$("$ampc" memory --model mm-tiny --batch 32 --device cuda --attention-cast on --json | scr)
g_off=$("$ampc" memory --model mm-tiny --batch 32 --device cuda --json | scr)
[ -n "$g_on" ] && [ -n "$g_off" ] && [ "$g_on" = $((g_off + 1352000)) ] ||
  die "memory --device cuda --attention-cast on: device_scratch $g_on, expected $g_off + 1352000"

# bad usage: exit 2 with a message
expect2() {
  "$ampc" "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  [ "$rc" = 2 ] || die "'$*' exited $rc, expected 2"
  [ -s "$tmp/err" ] || die "'$*' printed no message"
}
expect2 memory
expect2 memory --params 1e6 --precision 16-mixed --weight-update kahan
expect2 memory --params 1e6 --precision bf16-true --weight-update kahn
expect2 memory --params 1e9 --model mm-tiny
expect2 memory --model mm-tiny --w-mlm -1
expect2 memory --model mm-tiny --recompute maybe
expect2 memory --model mm-tiny --attention-cast maybe
expect2 plan --budget 1G --attention-cast 1
expect2 memory --params lots
expect2 memory --params 1e9 --optimizer lamb
expect2 memory --params 1e9 --precision 8-mixed
expect2 memory --model nosuch
expect2 memory --params 1e9 --bogus 1
expect2 plan
expect2 plan --budget garbage
expect2 plan --budget 12Q
expect2 plan --budget -1G
expect2 plan --budget 1G --precision 32-true,
expect2 plan --budget 1G --model nosuch
expect2 memory --model mm-tiny --in 5                 # an mlp size for another model
expect2 plan --budget 1G --precision 16-mixed,16-mixed  # a preset twice
# the model lists: each command names what it takes
expect2 memory --model nosuch
grep -q "vit-micro, mlp)" "$tmp/err" || die "memory's unknown-model error omits mlp: $(cat "$tmp/err")"
expect2 plan --budget 1G --model nosuch
grep -q "mlp" "$tmp/err" && die "plan's unknown-model error lists mlp, which it refuses"
# a model the data cannot feed is refused, as ampc train refuses it
expect2 plan --budget 1G --model mm-micro
grep -q "mm-micro takes 8x8x3 images, the data 'emoji' has 32x32x3" "$tmp/err" ||
  die "plan --model mm-micro: $(cat "$tmp/err")"
expect2 bench step --model nosuch
grep -q "bench step runs mm-tiny, mm-small, mm-base, mm-large, vit-ref)" "$tmp/err" ||
  die "bench step's unknown-model error: $(cat "$tmp/err")"
"$ampc" memory --help | grep -q "Usage: ampc memory" || die "memory --help"
"$ampc" plan --help | grep -q "Usage: ampc plan" || die "plan --help"

# the plan holds: vit-ref (its 2-step run is quick) at the planned batch
budget=250000000
for p in 32-true 16-mixed; do
  out=$("$ampc" plan --budget 250M --model vit-ref --precision "$p" --json) || die "plan exited $?"
  batch=$(echo "$out" | sed -n 's/.*"batch":\([0-9]*\).*/\1/p')
  [ -n "$batch" ] && [ "$batch" -ge 16 ] || { die "$p: planned batch '$batch': $out"; continue; }
  "$ampc" train --model vit-ref --precision "$p" --batch "$batch" --steps 2 --threads 1 --quiet \
    --json >"$tmp/sum.json" 2>/dev/null || die "train at the planned batch $batch exited $?"
  rss=$(field peak_rss_bytes <"$tmp/sum.json")
  echo "$p: budget $budget, planned batch $batch, peak RSS $rss"
  [ -n "$rss" ] && [ "$rss" -gt 0 ] && [ "$rss" -le "$budget" ] ||
    die "$p: peak RSS $rss exceeds the budget $budget at batch $batch"
done
exit $fail
