# What the CLI tests share; each sources it after `set -u`, with its own arguments:
#   source "$(dirname "$0")/common.sh" "$@"
# genesis: argument 1, the executable; src: argument 2, the source directory (empty when the
# test takes none); work: a scratch directory, removed at exit unless KEEP is set (a test that
# sets its own EXIT trap removes it there); fail / ok: one line per check, failures counted;
# check NAME EXPECTED_RC ACTUAL_RC: an exit code; finish NAME: the summary line, and exit 0 only
# when nothing failed.
genesis=${1:?path to the genesis executable}
src=${2:-}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
check() {
  if [ "$2" != "$3" ]; then fail "$1: exit code $3, expected $2"; else ok "$1"; fi
}
finish() {
  if [ "$failures" -eq 0 ]; then
    echo "$1: all checks passed"
    exit 0
  fi
  echo "$1: $failures check(s) failed"
  exit 1
}
