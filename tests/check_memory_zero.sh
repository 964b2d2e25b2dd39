#!/bin/sh
# tests/check_memory_zero.sh AMPC: `ampc memory --ranks N --zero 0|1`, the
# per-rank account under data parallelism and ZeRO stage 1 (Rajbhandari et
# al. 2020, section 5.1; ampc partitions the FP32 master with the optimizer
# state, as DeepSpeed's stage 1). Shards are S = 4096 ceil(E / (4096 N))
# elements in rank order (ampc_shard_range), the last shorter; the account
# shows rank 0's, the largest. Expected bytes derived by hand below.
. "$(dirname "$0")/cli_lib.sh"

roles() { sed -n 's/.*"roles":{\([^}]*\)}.*/\1/p'; }

# 1.2e9 parameters, 16-mixed, AdamW, 8 ranks: S = 4096 ceil(1.2e9 / 32768) =
# 4096 x 36622 = 150003712 (1.2e9 / 8 = 1.5e8 is not a multiple of 4096);
# master 4 S = 600014848, moments 8 S = 1200029696, weights and grads whole
# (2.4e9 each) and the FP32 staging of the shard's sum 4 S = 600014848:
# 7200059392 bytes per rank instead of 24e9 (with the whole 4.8e9 staging)
out=$("$ampc" memory --params 1.2e9 --ranks 8 --zero 1 --json) || die "memory --ranks 8 --zero 1 exited $?"
[ "$(echo "$out" | roles)" = '"weights":2400000000,"master":600014848,"grads":2400000000,"moments":1200029696,"compensation":0,"grad_stage":600014848' ] ||
  die "ZeRO-1 8 ranks roles: $out"
[ "$(echo "$out" | field total_bytes)" = 7200059392 ] || die "ZeRO-1 8 ranks total: $out"
[ "$(echo "$out" | field ranks)" = 8 ] && [ "$(echo "$out" | field zero)" = 1 ] &&
  [ "$(echo "$out" | field rank)" = 0 ] || die "ZeRO-1 --json lacks ranks/zero/rank: $out"
[ "$(echo "$out" | field shard_elements)" = 150003712 ] || die "shard_elements: $out"
[ "$(echo "$out" | field total_bytes_zero_0)" = 24000000000 ] || die "total_bytes_zero_0: $out"
[ "$(echo "$out" | field total_bytes_zero_1)" = 7200059392 ] || die "total_bytes_zero_1: $out"
# the text: per rank, and the comparison with --zero 0; the last rank's shard
# is 1.2e9 - 7 S = 149974016, and the shards sum to the whole table
out=$("$ampc" memory --params 1.2e9 --ranks 8 --zero 1) || die "memory --ranks 8 --zero 1 (text) exited $?"
echo "$out" | head -n 1 | grep -q 'per rank: rank 0 of 8 (the largest shard), ZeRO-1$' || die "header: $out"
echo "$out" | grep -q '^role  *bytes/rank ' || die "table header not per rank: $out"
echo "$out" | grep -q '^master  *600014848 ' || die "master line: $out"
echo "$out" | grep -q '^ZeRO-1 over 8 ranks: 6\.71 GiB (7\.20 GB) per rank instead of 22\.35 GiB (24\.00 GB) with --zero 0 ' ||
  die "no ZeRO-1 comparison line: $out"
last=$(echo "$out" | sed -n 's/.* \([0-9]*\) on the last)\.$/\1/p')
[ "$last" = 149974016 ] || die "last rank's shard '$last': $out"
[ $((7 * 150003712 + ${last:-0})) = 1200000000 ] || die "shards do not tile 1.2e9"
# three ranks, the last shorter: 10000 parameters, S = 4096 ceil(10000 /
# 12288) = 4096; shards 4096, 4096, 1808; rank 0: master 16384, moments 32768
out=$("$ampc" memory --params 10000 --ranks 3 --zero 1 --json) || die "memory --ranks 3 exited $?"
[ "$(echo "$out" | roles)" = '"weights":20000,"master":16384,"grads":20000,"moments":32768,"compensation":0,"grad_stage":16384' ] ||
  die "ZeRO-1 3 ranks roles: $out"
"$ampc" memory --params 10000 --ranks 3 --zero 1 | grep -q '4096 of 10000 elements on rank 0, 1808 on the last)\.$' ||
  die "3 ranks: the last shard is not 1808"
# 32-true: only the moments shard (FP32 weights are their own master):
# 4.8e9 + 4.8e9 + 8 S + the shard's staging 4 S = 11400044544
out=$("$ampc" memory --params 1.2e9 --precision 32-true --ranks 8 --zero 1 --json)
[ "$(echo "$out" | field total_bytes)" = 11400044544 ] || die "32-true ZeRO-1: $out"
# bf16-true with Kahan updates: BF16 moments 4 S, BF16 compensation 2 S
out=$("$ampc" memory --params 1.2e9 --precision bf16-true --weight-update kahan --ranks 8 --zero 1 --json)
echo "$out" | grep -q '"moments":600014848,"compensation":300007424' || die "bf16-true kahan ZeRO-1: $out"
# --zero 0 over 8 ranks: every rank holds everything (19.2e9 + 4.8e9), and the line
# names what --zero 1 would hold
out=$("$ampc" memory --params 1.2e9 --ranks 8 --json)
[ "$(echo "$out" | field total_bytes)" = 24000000000 ] && [ "$(echo "$out" | field zero)" = 0 ] ||
  die "--ranks 8 without ZeRO: $out"
"$ampc" memory --params 1.2e9 --ranks 8 --zero 0 |
  grep -q '^Data parallelism over 8 ranks without ZeRO: every rank holds 22\.35 GiB (24\.00 GB); with --zero 1 6\.71 GiB (7\.20 GB) per rank\.$' ||
  die "--zero 0 line"
# one rank under ZeRO-1 (also --zero 1 without --ranks) is the plain account,
# with a warning on stderr
plain=$("$ampc" memory --params 1.2e9 --json | roles)
for args in "--ranks 1 --zero 1" "--zero 1"; do
  # shellcheck disable=SC2086
  out=$("$ampc" memory --params 1.2e9 $args --json 2>"$tmp/err") || die "memory $args exited $?"
  [ "$(echo "$out" | roles)" = "$plain" ] || die "memory $args differs from the plain account: $out"
  grep -q 'warning: --zero 1 over 1 rank partitions nothing' "$tmp/err" || die "memory $args: no warning"
done
# no flags: no per-rank words, no ranks in the JSON (the output as before)
"$ampc" memory --params 1.2e9 | grep -Eq 'rank|ZeRO' && die "plain memory mentions ranks"
"$ampc" memory --params 1.2e9 --json | grep -q '"ranks"' && die "plain memory --json has ranks"
# a model: the parameter roles shard over its padded table, activations stay:
# mm-tiny at batch 8 over 2 ranks, E = the whole master / 4 elements,
# S = 4096 ceil(E / 8192), rank 0's master 4 min(S, E)
w=$("$ampc" memory --model mm-tiny --batch 8 --json) || die "memory --model exited $?"
z=$("$ampc" memory --model mm-tiny --batch 8 --ranks 2 --zero 1 --json) || die "memory --model --zero 1 exited $?"
num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
mw=$(echo "$w" | num master)
E=$((${mw:-0} / 4))
S=$(((E + 8191) / 8192 * 4096))
[ "$S" -gt "$E" ] && S=$E
[ "$(echo "$z" | num master)" = $((4 * S)) ] || die "mm-tiny ZeRO-1 master: E $E, S $S: $z"
[ "$(echo "$z" | num moments)" = $((8 * S)) ] || die "mm-tiny ZeRO-1 moments: $z"
[ "$(echo "$z" | num weights)" = "$(echo "$w" | num weights)" ] || die "mm-tiny ZeRO-1 weights: $z"
[ "$(echo "$z" | num activations)" = "$(echo "$w" | num activations)" ] || die "mm-tiny ZeRO-1 activations: $z"
[ "$(echo "$z" | field shard_elements)" = "$S" ] || die "mm-tiny shard_elements: $z"
"$ampc" memory --model mm-tiny --batch 8 --ranks 2 --zero 1 | grep -q '^ZeRO-1 over 2 ranks: .* MiB per rank instead of .* MiB with --zero 0' ||
  die "mm-tiny ZeRO-1 line"

# bad values: exit 2, the message naming the flag
for args in "--ranks 0" "--ranks -1" "--ranks x" "--ranks 1048577" "--ranks 2.5"; do
  # shellcheck disable=SC2086
  expect 2 memory --params 1e9 $args
  grep -q -- '--ranks' "$tmp/err" || die "'$args': the message does not name --ranks: $(cat "$tmp/err")"
done
for args in "--zero 2" "--zero -1" "--zero yes" "--zero 01"; do
  # shellcheck disable=SC2086
  expect 2 memory --params 1e9 --ranks 4 $args
  grep -q -- '--zero' "$tmp/err" || die "'$args': the message does not name --zero: $(cat "$tmp/err")"
done
expect 2 plan --budget 1G --ranks 2 # the planner does not take ranks
"$ampc" memory --help | grep -q -- '--zero 0|1' || die "memory --help lacks --zero"
"$ampc" memory --help | grep -q -- '--ranks N' || die "memory --help lacks --ranks"
exit $fail
