#!/usr/bin/env bash
# Every Catch2 case carries [cpu] or [cuda] (or is hidden, [.]): CTest registers the cases by
# those two tags only, so an untagged case would never run there.
#   tests/check_case_tags.sh PATH_TO_GENESIS_TESTS
set -u
untagged=$("$1" '~[cpu]~[cuda]~[.]' --list-test-names-only | grep .)
if [ -n "$untagged" ]; then
  echo "FAIL: cases without a [cpu] or [cuda] tag (CTest never runs them): $untagged"
  exit 1
fi
echo "ok: every case is tagged [cpu] or [cuda]"
