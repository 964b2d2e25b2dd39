#!/bin/sh
# tests/check_readme.sh: CI must run the README's test command verbatim.
# Finds the quick-start test command in README.md (the line after the marker
# comment "<!-- test-command -->" inside the code block) and checks that
# .ci/run contains exactly that line.
set -eu
root=${1:-.}
cmd=$(awk '/<!-- test-command -->/{f=1; next} f && /^```/{next} f && NF{print; exit}' "$root/README.md")
if [ -z "$cmd" ]; then
  echo "README.md: no line after '<!-- test-command -->'" >&2
  exit 1
fi
if ! grep -qxF "$cmd" "$root/.ci/run"; then
  echo ".ci/run does not run the README test command verbatim:" >&2
  echo "  $cmd" >&2
  exit 1
fi
echo "ok: .ci/run runs: $cmd"
