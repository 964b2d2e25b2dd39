#!/bin/sh
# tests/check_robust.sh AMPC SRCDIR: bad input costs nothing (docs/ROBUSTNESS.md).
# Every case of the table that goes through the command line: damaged
# checkpoints and dataset files, PNGs and JSON during `ampc data emoji`, bad or
# contradictory flags, an unwritable log, a full disk while saving. Each must
# exit 1 (runtime) or 2 (usage) -- never a signal -- with a message naming the
# file or flag, and leave every existing file byte-identical and no temporary
# file behind.
set -u
ampc=$1
src=$2
tmp=$(mktemp -d)
mnt=""
cleanup() {
  [ -n "$mnt" ] && umount "$mnt" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }

# expect WANT NEEDLE CMD...: CMD exits WANT and its stderr contains NEEDLE
expect() {
  want=$1 needle=$2
  shift 2
  "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  [ "$rc" = "$want" ] || die "'$*' exited $rc, expected $want: $(head -c 400 "$tmp/err")"
  [ -z "$needle" ] || grep -qF -- "$needle" "$tmp/err" || die "'$*': message lacks '$needle': $(head -c 400 "$tmp/err")"
}
# le64 N: N as 8 little-endian bytes (N < 65536)
le64() { printf "$(printf '\\%03o\\%03o' $(($1 % 256)) $(($1 / 256)))\\0\\0\\0\\0\\0\\0"; }
# st FILE JSON DATABYTES: a safetensors file with this header and zero data
st() {
  { le64 ${#2}; printf '%s' "$2"; head -c "$3" /dev/zero; } >"$1"
}

# ---- checkpoints ---------------------------------------------------------------
mlp="--model mlp --steps 8 --quiet"
"$ampc" train $mlp --stop-at 4 --save "$tmp/good.st" >/dev/null 2>&1 || die "making a checkpoint"
size=$(wc -c <"$tmp/good.st")
ck() { # ck NAME NEEDLE: --resume NAME is refused, the checkpoint, --save and --log untouched
  cp "$tmp/$1" "$tmp/$1.copy"
  printf 'old log\n' >"$tmp/log.jsonl"
  cp "$tmp/good.st" "$tmp/out.st"
  expect 1 "$2" "$ampc" train $mlp --resume "$tmp/$1" --save "$tmp/out.st" --log "$tmp/log.jsonl"
  grep -qF "$tmp/$1" "$tmp/err" || die "resume $1: message does not name the file"
  cmp -s "$tmp/$1" "$tmp/$1.copy" || die "resume $1 changed the checkpoint"
  cmp -s "$tmp/good.st" "$tmp/out.st" || die "resume $1 changed the --save file"
  [ "$(cat "$tmp/log.jsonl")" = "old log" ] || die "resume $1 changed the log"
  ls "$tmp" | grep -q '\.tmp\.' && die "resume $1 left a temporary file"
}
head -c 5 "$tmp/good.st" >"$tmp/cut5.st"
ck cut5.st "too short for the 8-byte header length"
head -c 100 "$tmp/good.st" >"$tmp/cut100.st"
ck cut100.st "header length"
head -c $((size - 1)) "$tmp/good.st" >"$tmp/cut1.st"
ck cut1.st "go past the end of the data region"
: >"$tmp/empty.st"
ck empty.st "file is 0 bytes"
tail -c 5000 "$src/data/emoji.ampcds" >"$tmp/random.st" # compressed data: random-looking bytes
ck random.st "random.st"
{ printf '\377\377\377\0\0\0\0\0'; tail -c +9 "$tmp/good.st"; } >"$tmp/hlen.st"
ck hlen.st "header length 16777215 is larger than the"
st "$tmp/huge.st" '{"fc1.weight":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}}' 8
ck huge.st "go past the end of the data region"
st "$tmp/overlap.st" '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}' 12
ck overlap.st "overlap tensor"
st "$tmp/past.st" '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 4
ck past.st "go past the end of the data region"
st "$tmp/dtype.st" '{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}' 8
ck dtype.st "dtype 'F64' is not supported"
st "$tmp/notours.st" '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' 4
ck notours.st "tensor 'fc1.weight' is missing"
"$ampc" train $mlp --hidden 32 --save "$tmp/h32.st" >/dev/null 2>&1 || die "hidden-32 run"
ck h32.st "tensor 'fc1.weight' has shape [32, 16], the model's is [64, 16]"
"$ampc" train $mlp --optimizer sgd --save "$tmp/sgd.st" >/dev/null 2>&1 || die "sgd run"
ck sgd.st "tensor 'optimizer.exp_avg.fc1.weight' is missing"
# `ampc eval` refuses the same files before it builds a model
for f in cut5 cut100 random hlen huge overlap; do
  expect 1 "$tmp/$f.st" "$ampc" eval --checkpoint "$tmp/$f.st"
done

# ---- dataset files ---------------------------------------------------------------
ds="$src/data/emoji.ampcds"
data() { # data NAME NEEDLE: `data info` and `train --data` refuse it, naming it
  expect 1 "$2" "$ampc" data info "$tmp/$1"
  grep -qF "$tmp/$1" "$tmp/err" || die "data info $1: message does not name the file"
  expect 1 "$2" "$ampc" train --data "$tmp/$1" --steps 1 --batch 4 --quiet
  grep -qF "$tmp/$1" "$tmp/err" || die "train --data $1: message does not name the file"
}
head -c 20 "$ds" >"$tmp/short.ampcds"
data short.ampcds "too short for a dataset header"
head -c 100000 "$ds" >"$tmp/cut.ampcds"
data cut.ampcds "compressed bytes but only"
{ printf 'XMPCDS01'; tail -c +9 "$ds"; } >"$tmp/magic.ampcds"
data magic.ampcds "not an ampc dataset"
{ head -c 8 "$ds"; printf '\003\0\0\0'; tail -c +13 "$ds"; } >"$tmp/version.ampcds"
data version.ampcds "dataset version 3, this build reads versions 1 and 2"

# ---- `ampc data emoji`: PNGs and JSON ------------------------------------------------
png="$src/fuzz/corpus/png"
# pkgs GOOGLE_PNG TWITTER_PNG [GOOGLE_JSON [EMOJIBASE_JSON]]: the three .tgz files in $tmp/pk
pkgs() {
  rm -rf "$tmp/pk" && mkdir -p "$tmp/pk/g/package/img/google/64" \
    "$tmp/pk/t/package/img/twitter/64" "$tmp/pk/b/package/en"
  cp "$1" "$tmp/pk/g/package/img/google/64/a.png"
  cp "$2" "$tmp/pk/t/package/img/twitter/64/a.png"
  g='[{"unified":"1F600","image":"a.png","has_img_google":true},'
  g=$g'{"unified":"1F431","image":"a.png","has_img_google":true}]'
  [ $# -ge 3 ] && g=$3
  printf '%s' "$g" >"$tmp/pk/g/package/emoji.json"
  printf '[{"unified":"1F600","has_img_twitter":true},{"unified":"1F431","has_img_twitter":true}]' \
    >"$tmp/pk/t/package/emoji.json"
  b='[{"hexcode":"1F600","label":"grinning face","group":0,"tags":["smile"]},'
  b=$b'{"hexcode":"1F431","label":"cat face","group":3,"tags":["cat","pet"]}]'
  [ $# -ge 4 ] && b=$4
  printf '%s' "$b" >"$tmp/pk/b/package/en/data.json"
  tar -czf "$tmp/pk/emoji-datasource-google-16.0.0.tgz" -C "$tmp/pk/g" package
  tar -czf "$tmp/pk/emoji-datasource-twitter-16.0.0.tgz" -C "$tmp/pk/t" package
  tar -czf "$tmp/pk/emojibase-data-17.0.0.tgz" -C "$tmp/pk/b" package
}
mkdir "$tmp/td"
emoji() { TMPDIR="$tmp/td" "$ampc" data emoji --from "$tmp/pk" --styles google,twitter --out "$tmp/emoji.ampcds"; }
# the default styles need openmoji's package too
pkgs "$png/rgb16.png" "$png/ga.png"
expect 1 "openmoji-17.0.0.tgz: cannot read" env TMPDIR="$tmp/td" "$ampc" data emoji --from "$tmp/pk" --out "$tmp/x.ampcds"
expect 2 "--styles: unknown style 'noto'" "$ampc" data emoji --from "$tmp/pk" --styles google,noto --out "$tmp/x.ampcds"
expect 2 "--styles: 'google' is listed twice" "$ampc" data emoji --from "$tmp/pk" --styles google,google --out "$tmp/x.ampcds"
expect 2 "--hold-out: 'apple' is not one of --styles" "$ampc" data emoji --from "$tmp/pk" --styles google,twitter --hold-out apple --out "$tmp/x.ampcds"
# openmoji: SVGs rendered with rsvg-convert (Debian's librsvg2-bin)
if command -v rsvg-convert >/dev/null 2>&1; then
  # three emoji (1F431 is held out for zero-shot: two training concepts)
  g3='[{"unified":"1F600","image":"a.png","has_img_google":true},'
  g3=$g3'{"unified":"1F697","image":"a.png","has_img_google":true},'
  g3=$g3'{"unified":"1F431","image":"a.png","has_img_google":true}]'
  b3='[{"hexcode":"1F600","label":"grinning face","group":0,"tags":["smile"]},'
  b3=$b3'{"hexcode":"1F697","label":"automobile","group":5,"tags":["car"]},'
  b3=$b3'{"hexcode":"1F431","label":"cat face","group":3,"tags":["cat","pet"]}]'
  pkgs "$png/rgb16.png" "$png/ga.png" "$g3" "$b3"
  printf '[{"unified":"1F600","has_img_twitter":true},{"unified":"1F697","has_img_twitter":true},{"unified":"1F431","has_img_twitter":true}]' \
    >"$tmp/pk/t/package/emoji.json"
  tar -czf "$tmp/pk/emoji-datasource-twitter-16.0.0.tgz" -C "$tmp/pk/t" package
  mkdir -p "$tmp/pk/o/package/color/svg"
  for h in 1F600 1F697 1F431; do
    printf '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 72 72"><circle cx="36" cy="36" r="30" fill="#0000ff"/></svg>' \
      >"$tmp/pk/o/package/color/svg/$h.svg"
  done
  tar -czf "$tmp/pk/openmoji-17.0.0.tgz" -C "$tmp/pk/o" package
  expect 0 "" env TMPDIR="$tmp/td" "$ampc" data emoji --from "$tmp/pk" --out "$tmp/three.ampcds"
  "$ampc" data info "$tmp/three.ampcds" >"$tmp/info3" 2>&1 || die "the three-style dataset does not load"
  grep -q "styles      google (train), openmoji (train), twitter (held out: new_style)" "$tmp/info3" ||
    die "three-style dataset: $(cat "$tmp/info3")"
  "$ampc" train --data "$tmp/three.ampcds" --batch 2 --steps 2 --no-eval --quiet --augment-shift 2 \
    --itm-negatives sampled >/dev/null 2>"$tmp/err3" || die "training on three styles: $(cat "$tmp/err3")"
  expect 2 "--hold-out-style: the data has no style 'apple' (its styles: google, openmoji, twitter)" \
    "$ampc" train --data "$tmp/three.ampcds" --batch 2 --steps 1 --hold-out-style apple
  expect 2 "batch 3 is larger than the number of training concepts (2)" \
    "$ampc" train --data "$tmp/three.ampcds" --batch 3 --steps 1 --no-eval
  # the recipe is checked on resume; eval takes the held-out style from the checkpoint
  "$ampc" train --data "$tmp/three.ampcds" --batch 2 --steps 3 --stop-at 1 --no-eval --quiet \
    --hold-out-style google --save "$tmp/r3.st" >/dev/null 2>&1 || die "three styles: stop-at run failed"
  expect 1 "cannot resume: $tmp/r3.st was trained with held_out=google;shift=2;itm=random, this run has held_out=twitter" \
    "$ampc" train --data "$tmp/three.ampcds" --batch 2 --steps 3 --no-eval --resume "$tmp/r3.st"
  "$ampc" eval --checkpoint "$tmp/r3.st" --data "$tmp/three.ampcds" --json >"$tmp/ev3" 2>&1 ||
    die "eval of the three-style checkpoint: $(cat "$tmp/ev3")"
  grep -q '"held_out_style":"google"' "$tmp/ev3" || die "eval did not hold out the checkpoint's style: $(cat "$tmp/ev3")"
  # one style: nothing held out; the run evaluates what there is (here one
  # held-out concept in one style: nothing, refused before training)
  expect 0 "" env TMPDIR="$tmp/td" "$ampc" data emoji --from "$tmp/pk" --styles google --out "$tmp/one.ampcds"
  expect 2 "has neither a held-out style (new_style split) nor held-out concepts" \
    "$ampc" train --data "$tmp/one.ampcds" --batch 2 --steps 2
  "$ampc" train --data "$tmp/one.ampcds" --batch 2 --steps 2 --no-eval --quiet >/dev/null 2>&1 ||
    die "one-style data without evaluation failed"
  expect 2 "--styles: an empty item" "$ampc" data emoji --from "$tmp/pk" --styles google, --out "$tmp/x.ampcds"
  printf '<svg' >"$tmp/pk/o/package/color/svg/1F600.svg" # a broken SVG
  tar -czf "$tmp/pk/openmoji-17.0.0.tgz" -C "$tmp/pk/o" package
  expect 1 "1F600.svg: rsvg-convert failed" env TMPDIR="$tmp/td" "$ampc" data emoji --from "$tmp/pk" --out "$tmp/three.ampcds"
  rm -f "$tmp/pk/openmoji-17.0.0.tgz"
  pkgs "$png/rgb16.png" "$png/ga.png"
else
  echo "check_robust: skipping the openmoji cases: rsvg-convert is not installed (apt-get install librsvg2-bin)"
fi
# unusual modes are fine: 16-bit RGB and gray+alpha
expect 0 "" emoji
"$ampc" data info "$tmp/emoji.ampcds" >/dev/null 2>&1 || die "the prepared dataset does not load"
cp "$tmp/emoji.ampcds" "$tmp/emoji.copy"
after_emoji() { # nothing replaced, nothing left behind
  cmp -s "$tmp/emoji.ampcds" "$tmp/emoji.copy" || die "$1: the previous dataset was changed"
  [ -z "$(ls "$tmp/td")" ] || die "$1: temporary files left in TMPDIR"
  ls "$tmp" | grep -q 'emoji.ampcds.tmp' && die "$1: a temporary dataset file was left"
}
head -c 300 "$png/rgba.png" >"$tmp/corrupt.png"
pkgs "$png/gray.png" "$tmp/corrupt.png"
expect 1 "img/twitter/64/a.png: corrupt PNG" emoji
after_emoji "corrupt PNG"
pkgs "$png/small32.png" "$png/gray.png"
expect 1 "img/google/64/a.png: image is 32x32" emoji
after_emoji "32x32 PNG"
pkgs "$png/text.bin" "$png/gray.png"
expect 1 "img/google/64/a.png: not a PNG file" emoji
after_emoji "not a PNG"
pkgs "$png/gray.png" "$png/gray.png" '[{"unified":"1F600","image":"a.png",'
expect 1 "emoji.json: not a JSON array" emoji
after_emoji "truncated JSON"
pkgs "$png/gray.png" "$png/gray.png" '[{"unified":"1F600","image":"../a.png","has_img_google":true}]'
expect 1 "lacks \"unified\" or a plain \"image\" name" emoji
after_emoji "image path with a slash"
g1='[{"unified":"1F600","image":"a.png","has_img_google":true}]'
pkgs "$png/gray.png" "$png/gray.png" "$g1" '[{"label":"grinning face","group":0}]'
expect 1 "en/data.json: entry 0 has no usable \"hexcode\"" emoji
after_emoji "emojibase entry without a hexcode"
pkgs "$png/gray.png" "$png/gray.png" "$g1" '[{"hexcode":"1F600","label":"x","group":99}]'
expect 1 "en/data.json: 1F600 has unknown group 99" emoji
after_emoji "unknown group"
pkgs "$png/gray.png" "$png/gray.png" "$g1" '[{"hexcode":"1F600","group":0}]'
expect 1 "en/data.json: 1F600 has no \"label\"" emoji
after_emoji "no label"
pkgs "$png/gray.png" "$png/gray.png" "$g1" '{"hexcode":"1F600"}'
expect 1 "en/data.json: not a JSON array" emoji
after_emoji "emojibase not an array"

# ---- flags: unknown, out of range, contradictory (exit 2, naming the flag) ---------
flag() { w=$1; shift; expect 2 "$w" "$ampc" train --model mlp --steps 2 --quiet "$@"; }
flag "--precision: unknown precision '8-mixed'" --precision 8-mixed
flag "--loss-scale: expected none, dynamic, per-branch, per-loss or a positive finite number, got '-3'" --loss-scale -3
flag "--steps: expected an integer in [1, 1000000000], got '0'" --steps 0
flag "--batch 5000 is larger than the training set (4096 samples)" --batch 5000
flag "--lr -1: must be a positive finite number" --lr -1
flag "unknown option --frobnicate" --frobnicate 1
flag "--batch 8 is not a multiple of --micro-batches 3" --batch 8 --micro-batches 3
flag "--max-scale 1 is below --min-scale 10" --min-scale 10 --max-scale 1
flag "--warmup 500 is longer than the run (--steps 100)" --steps 100 --warmup 500
flag "Nesterov needs momentum > 0" --optimizer sgd --nesterov --momentum 0
flag "--log must not name the checkpoint file" --log "$tmp/x.st" --save "$tmp/x.st"
flag "--threads: expected an integer in [1, 1024], got '0'" --threads 0
flag "--save-every: expected an integer in [0, 1000000000], got '-1'" --save-every -1
flag "unknown option --frobnicate" --frobnicate
flag "--steps needs a value" --steps
flag "--lr: '1e300' is out of the float range" --lr 1e300
ln -s dangling.st "$tmp/dlink"
flag "--log must not name the checkpoint file" --log "$tmp/dlink" --save "$tmp/dangling.st"
[ -e "$tmp/dangling.st" ] && die "--log through a dangling link to --save: a file was written"
flag "--lr: '1e-50' is out of the float range" --lr 1e-50
flag "--init-scale: '1e300' is out of the float range" --init-scale 1e300
expect 2 "--data fashion-mnist: an image-only set" "$ampc" eval --checkpoint "$tmp/good.st" --data fashion-mnist
mkdir -p "$tmp/logdir"
expect 1 "$tmp/logdir: is a directory, not a metrics log" "$ampc" diagnose "$tmp/logdir"
# an input is never an output, however its path is spelt
cp "$tmp/good.st" "$tmp/in.st"
expect 2 "--log must not name the checkpoint file ($tmp/./in.st)" \
  "$ampc" train $mlp --resume "$tmp/in.st" --log "$tmp/./in.st"
cmp -s "$tmp/good.st" "$tmp/in.st" || die "--log ./in.st changed the checkpoint it resumes"
cp "$tmp/good.st" "$tmp/set.ampcds"
expect 2 "--save $tmp/./set.ampcds names the --data file" \
  "$ampc" train --data "$tmp/set.ampcds" --save "$tmp/./set.ampcds" --steps 1 --quiet
expect 2 "--log $tmp/set.ampcds names the --data file" \
  "$ampc" train --data "$tmp/./set.ampcds" --log "$tmp/set.ampcds" --steps 1 --quiet
cmp -s "$tmp/good.st" "$tmp/set.ampcds" || die "--save/--log over --data changed the dataset"
expect 2 "--plot $tmp/./in.st names the input file" "$ampc" inspect "$tmp/in.st" --plot "$tmp/./in.st"
cmp -s "$tmp/good.st" "$tmp/in.st" || die "inspect --plot over its input changed it"
# a --precision list: every run's flags checked before the first one trains
rm -f "$tmp"/l.*.jsonl
flag "(in the run of --precision 16-mixed)" --precision bf16-true,16-mixed \
  --weight-update stochastic --master-weights off --log "$tmp/l.jsonl"
[ -e "$tmp/l.bf16-true.jsonl" ] && die "a --precision list trained before checking its last run"
flag "--precision: 32-true is listed twice" --precision 32-true,32-true
flag "--precision: bad list '32-true,'" --precision 32-true,
mkdir -p "$tmp/adir"
flag "--log $tmp/adir: not a file path" --precision 32-true,16-mixed --log "$tmp/adir"
ls "$tmp" | grep -q '^adir\.' && die "a list's --log DIR was tagged into a file"
flag "--precision: at most 8 presets" --precision a,b,c,d,e,f,g,h,i
expect 2 "batch 100000 is larger than the training split (3458 samples)" \
  "$ampc" train --batch 100000 --steps 1 --quiet

# ---- a log that cannot be written -------------------------------------------------
expect 1 "cannot write log file /dev/full" "$ampc" train $mlp --log /dev/full
expect 2 "--log $tmp: not a file path" "$ampc" train $mlp --log "$tmp"
expect 2 "--recompute: expected on or off, got 'maybe'" "$ampc" train --recompute maybe --steps 1

# ---- a full disk while saving: the previous checkpoint stays intact ---------------
# Reference: the checkpoint a run leaves at step 4 (runs are deterministic).
"$ampc" train $mlp --stop-at 4 --save "$tmp/ref4.st" >/dev/null 2>&1 || die "reference run"
mkdir "$tmp/small"
if mount -t tmpfs -o size=100k tmpfs "$tmp/small" 2>/dev/null; then
  mnt="$tmp/small"
  # one checkpoint (68 KiB) fits, a second one beside it (the temporary file) does not
  expect 1 "No space left on device (file left unchanged)" \
    "$ampc" train $mlp --save "$tmp/small/ck.st" --save-every 4
  cmp -s "$tmp/small/ck.st" "$tmp/ref4.st" || die "ENOSPC: the step-4 checkpoint was not kept intact"
  [ "$(ls "$tmp/small")" = "ck.st" ] || die "ENOSPC: left behind: $(ls "$tmp/small")"
  # `ampc data emoji --out` on a full disk keeps the previous dataset
  rm -f "$tmp/small/ck.st"
  cp "$tmp/emoji.copy" "$tmp/small/emoji.ampcds"
  cat /dev/zero >"$tmp/small/fill" 2>/dev/null
  pkgs "$png/rgb16.png" "$png/ga.png"
  expect 1 "No space left on device (the file it replaces is left unchanged)" \
    env TMPDIR="$tmp/td" "$ampc" data emoji --from "$tmp/pk" --styles google,twitter --out "$tmp/small/emoji.ampcds"
  cmp -s "$tmp/small/emoji.ampcds" "$tmp/emoji.copy" || die "ENOSPC: the previous dataset changed"
  [ "$(ls "$tmp/small" | tr '\n' ' ')" = "emoji.ampcds fill " ] ||
    die "ENOSPC: left behind: $(ls "$tmp/small")"
  umount "$tmp/small" && mnt=""
else
  echo "check_robust: cannot mount a tmpfs; the full disk is a file-size limit instead"
  cp "$tmp/ref4.st" "$tmp/small/ck.st"
  # RLIMIT_FSIZE with SIGXFSZ ignored: writes past 32 KiB fail with EFBIG
  (trap '' XFSZ; ulimit -f 64; exec "$ampc" train $mlp --save "$tmp/small/ck.st") \
    >/dev/null 2>"$tmp/err"
  [ $? = 1 ] || die "EFBIG: expected exit 1"
  grep -qF "File too large (file left unchanged)" "$tmp/err" || die "EFBIG: $(cat "$tmp/err")"
  cmp -s "$tmp/small/ck.st" "$tmp/ref4.st" || die "EFBIG: the old checkpoint was changed"
  [ "$(ls "$tmp/small")" = "ck.st" ] || die "EFBIG: left behind: $(ls "$tmp/small")"
fi

[ $fail = 0 ] && echo "check_robust: ok"
exit $fail
