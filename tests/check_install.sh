#!/bin/sh
# tests/check_install.sh BUILD_DIR SOURCE_DIR: `cmake --install` into a
# temporary prefix, then build and run a small C program against the installed
# library using only pkg-config, as another project would.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name ampc.pc | head -n 1)
[ -n "$pc" ] || { echo "no ampc.pc installed" >&2; exit 1; }
[ -x "$tmp/prefix/bin/ampc" ] || { echo "CLI not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer" "$src/tests/install_consumer.c" \
  $(pkg-config --cflags --libs ampc)
"$tmp/consumer"
"$tmp/prefix/bin/ampc" --version
