#!/bin/sh
# bench/alloc/run.sh [BUILD] [MODEL PRESET BATCH]: bench/alloc/alloc_count with
# each allocation site resolved to its function and source line.
set -eu
b=${1:-build}
shift 2>/dev/null || true
"$b/bench/alloc_count" "$@" | while read -r a rest; do
  case "$a" in
  0x*) printf '  %s  %s\n' "$(addr2line -f -i -e "$b/bench/alloc_count" "$a" | paste -sd ' ' | sed 's|/[^ ]*/src/|src/|g')" "$rest" ;;
  *) echo "$a $rest" ;;
  esac
done
