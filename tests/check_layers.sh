#!/bin/sh
# tests/check_layers.sh SRC_DIR OBJECT...: the arrows of DESIGN.md section 1
# point down. Two checks:
#  1. includes: no file of src/ and no public header (include/ampc/*.h, each
#     the header of one layer) includes a header (include/ampc/*.h or
#     src/<layer>/*.h) of a layer above its own;
#  2. symbols: no object of the library calls a function or reads a variable
#     defined in a layer above its own (nm over the library's objects), which
#     also catches calls through a declaration placed in a lower header.
# Layers, bottom up (index = height). status.h, version.h, internal.h and
# src/core/status.c are the shared base (the error channel), below everything.
# Allowed exceptions are listed in EXCEPTIONS with the reason; each must still
# occur (a stale exception fails too), so the list shrinks as the code does.
set -u
src=$1
shift
# the library's objects (.../src/<layer>/<file>.o), one per line (CTest hands
# $<TARGET_OBJECTS:ampc> over as one ;-separated argument)
objs=$(for o in "$@"; do echo "$o" | tr ';' '\n'; done | grep '/src/.*\.o$' | sort)
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }

# DESIGN.md 1's order. backend (src/backend/: the op table, the registry, the
# CPU and CUDA backends) sits above the layers it runs (nn, amp, optim) and
# below everything that runs through it (model, train, report, tools); its
# folders cpu/ and cuda/ are the backend layer too.
layers="numeric kernels core nn amp optim backend data model io diag report quant train dist"
height() { # layer name -> index; base -> -1; unknown -> 99
  i=0
  for l in $layers; do
    [ "$l" = "$1" ] && { echo $i; return; }
    i=$((i + 1))
  done
  case "$1" in base) echo -1 ;; *) echo 99 ;; esac
}
# public header -> layer
hdr_layer() {
  case "$1" in
  status.h | version.h) echo base ;;
  dtype.h | tally.h) echo numeric ;;
  gemm.h) echo kernels ;;
  params.h) echo core ;;
  nn.h) echo nn ;;
  amp.h) echo amp ;;
  optim.h) echo optim ;;
  backend.h) echo backend ;;
  model.h) echo model ;;
  data.h | shards.h) echo data ;;
  io.h) echo io ;;
  diag.h) echo diag ;;
  report.h | plot.h) echo report ;;
  quant.h) echo quant ;;
  engine.h | train.h) echo train ;;
  dist.h) echo dist ;;
  ampc.h) echo top ;;
  *) echo unknown ;;
  esac
}
# "FROM_LAYER -> TO_LAYER: reason" lines; FROM/TO as the checks print them
EXCEPTIONS='
'

# arrow FROM TO MESSAGE: an edge from layer FROM to TO; upward ones fail unless
# an exception names them
found=""
arrow() {
  [ "$(height "$2")" -gt "$(height "$1")" ] || return 0
  if echo "$EXCEPTIONS" | grep -q "^$1 -> $2:"; then
    found="$found|$1 -> $2"
  else
    die "$3"
  fi
}

# ---- 1. includes --------------------------------------------------------------------
for f in $(cd "$src" && find src include/ampc -name '*.[ch]' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' | sort); do
  case "$f" in
  include/ampc/*) l=$(hdr_layer "${f#include/ampc/}") ;;
  *) l=$(echo "$f" | cut -d/ -f2) ;;
  esac
  case "$f" in src/internal.h | src/core/status.c) l=base ;; include/ampc/ampc.h) continue ;; esac
  for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$src/$f"); do
    case "$inc" in
    ampc/*) to=$(hdr_layer "${inc#ampc/}") ;;
    internal.h) to=base ;;
    */*) to=${inc%%/*} ;;
    *) to=$l ;;
    esac
    [ "$to" = top ] && { die "$f includes the umbrella header $inc"; continue; }
    arrow "$l" "$to" "$f ($l) includes $inc ($to), a layer above it"
  done
done

# ---- 2. symbols -----------------------------------------------------------------------
# defined symbols -> layer of the object that defines them
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for o in $objs; do
  rel=${o##*/src/}
  l=${rel%%/*}
  case "$rel" in core/status.c.o) l=base ;; data/embed.S.o) l=data ;; esac
  nm -g --defined-only "$o" 2>/dev/null | awk -v l="$l" 'NF == 3 { print $3, l }' >>"$defs"
done
nobj=$(echo "$objs" | grep -c .)
[ "$nobj" -gt 20 ] || die "given only $nobj library objects"
for o in $objs; do
  rel=${o##*/src/}
  l=${rel%%/*}
  case "$rel" in core/status.c.o) l=base ;; esac
  for sym in $(nm -u "$o" 2>/dev/null | awk '{ print $2 }' | grep '^ampc_'); do
    to=$(awk -v s="$sym" '$1 == s { print $2; exit }' "$defs")
    [ -n "$to" ] || continue
    arrow "$l" "$to" "src/$rel ($l) uses $sym, defined in $to, a layer above it"
  done
done

# every exception must still be needed
echo "$EXCEPTIONS" | sed -n 's/^\([a-z]* -> [a-z]*\):.*/\1/p' | while read -r key; do
  case "$found" in *"|$key"*) ;; *) echo "FAIL: stale exception '$key' (no longer occurs)" >&2; exit 1 ;; esac
done || fail=1

[ $fail = 0 ] && echo "check_layers: ok ($(echo "$EXCEPTIONS" | grep -c ' -> ') documented exceptions)"
exit $fail
