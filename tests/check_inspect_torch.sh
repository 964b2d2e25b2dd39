#!/bin/sh
# tests/check_inspect_torch.sh AMPC TEST_MM_PARITY SRC: the PyTorch round trip
# of `ampc inspect` (tests/reference/inspect_roundtrip.py says what
# is checked). Needs Debian's python3-torch (/usr/bin/python3); without it the
# test is skipped (exit 77) with the reason.
set -u
ampc=$1
parity=$2
src=$3
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "SKIP: $py cannot import torch (apt-get install python3-torch)"
  exit 77
fi
dir=$(mktemp -d /tmp/ampc_inspect_torch.XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$parity" --dump "$dir" >/dev/null || exit 1
"$py" "$src/tests/reference/inspect_roundtrip.py" "$ampc" "$dir"
