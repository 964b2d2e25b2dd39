# tests/cli_lib.sh: what the CLI test scripts share. Sourced (`. cli_lib.sh`)
# by a script called as `sh check_X.sh AMPC ...`: sets ampc (the binary), tmp
# (a scratch directory removed on exit) and fail (the exit status), and
# defines die (record a failure), field (a top-level number of a one-line JSON
# object on stdin) and expect (a command's exit code, with a message).
set -u
ampc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }
field() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }
# expect WANT ARGS...: `ampc ARGS` exits WANT and prints a message on stderr
expect() {
  want=$1; shift
  "$ampc" "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  [ "$rc" = "$want" ] || die "'$*' exited $rc, expected $want"
  [ -s "$tmp/err" ] || die "'$*' printed no message"
}
