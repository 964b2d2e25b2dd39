#!/bin/sh
# bench/alloc/run.sh [BUILD] [MODEL PRESET BATCH]: tests/alloc_count (the
# allocations of ampc's own code during training steps) with each call site
# resolved to its function and source line.
set -eu
b=${1:-build}
shift 2>/dev/null || true
"$b/tests/alloc_count" "$@" | while read -r a rest; do
  case "$a" in
  0x*) printf '  %s  %s\n' "$(addr2line -f -i -e "$b/tests/alloc_count" "$a" | paste -sd ' ' | sed 's|/[^ ]*/src/|src/|g')" "$rest" ;;
  *) echo "$a $rest" ;;
  esac
done
