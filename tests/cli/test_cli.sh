#!/usr/bin/env bash
# CLI contract: results on stdout, one-line errors on stderr, exit codes 0 / 1 / 2.
#   tests/cli/test_cli.sh PATH_TO_GENESIS
set -u
source "$(dirname "$0")/common.sh" "$@"

out=$("$genesis" ops --list 2>/dev/null); check "ops --list" 0 $?
echo "$out" | grep -q "^matmul " || { echo "FAIL: ops --list does not list matmul"; failures=$((failures + 1)); }
echo "$out" | tail -1 | grep -q "ops:" || { echo "FAIL: ops --list has no summary line"; failures=$((failures + 1)); }

json=$("$genesis" ops --json 2>/dev/null); check "ops --json" 0 $?
command -v python3 >/dev/null || fail "python3 is not installed (scripts/setup.sh installs it); it reads ops --json"
# gradcheck comes from the op-case registry, not from the backward column: a differentiable op
# whose case gives it no differentiable input shows false here.
echo "$json" | python3 -c '
import json, sys
t = json.load(sys.stdin)
assert len(t) > 90, len(t)
for o in t:
    assert set(o) == {"name", "family", "backward", "gradcheck", "autocast"}, o
    assert o["gradcheck"] == o["backward"], o["name"] + ": gradcheck " + str(o["gradcheck"]) + ", backward " + str(o["backward"])
' || fail "ops --json is not the expected table, or a differentiable op is not gradient-checked by its op case"

"$genesis" >/dev/null 2>&1; check "no subcommand is a usage error" 2 $?
"$genesis" frobnicate >/dev/null 2>&1; check "unknown subcommand is a usage error" 2 $?
"$genesis" ops --bogus-flag >/dev/null 2>&1; check "unknown flag is a usage error" 2 $?
"$genesis" --help >/dev/null 2>&1; check "--help" 0 $?
"$genesis" completion fish >/dev/null 2>&1; check "completion of an unknown shell is a usage error" 2 $?
"$genesis" chat --help >/dev/null 2>&1; check "chat --help" 0 $?
"$genesis" data preview --help >/dev/null 2>&1; check "data preview --help" 0 $?
"$genesis" data preview >/dev/null 2>&1; check "data preview without a recipe is a usage error" 2 $?
"$genesis" chat --model a --checkpoint b >/dev/null 2>&1; check "chat --model and --checkpoint together is a usage error" 2 $?
err=$("$genesis" trian x.toml 2>&1); check "a mistyped command is a usage error" 2 $?
echo "$err" | grep -q "did you mean 'train'" || { echo "FAIL: no suggestion for 'trian': $err"; failures=$((failures + 1)); }
# A parse error of CLI11 reads as every error: one line, what came from the command line escaped.
err=$("$genesis" train $'\x1b[31mred\x07' 2>&1); check "a recipe path that does not exist is a usage error" 2 $?
if [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && [[ "$err" == "genesis: error: "*'\x1b[31mred\x07'*"genesis train --help"* ]] \
  && ! printf '%s' "$err" | grep -q $'\x1b'; then
  ok "a parse error is one escaped line naming the command's --help"
else
  fail "parse error: $(printf '%q' "$err")"
fi
err=$("$genesis" eval --checkpoint nowhere --device gpu 2>&1); check "--device gpu is a usage error" 2 $?
echo "$err" | grep -q -- "--device: 'gpu' is not a device" || { echo "FAIL: --device gpu: $err"; failures=$((failures + 1)); }

# Shell completion, generated from the CLI and the recipe schema: subcommands, nested ones,
# flags and --set keys complete in bash.
completed=$(bash -c 'source <("$1" completion bash) || exit 1
  complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _genesis; echo "${COMPREPLY[*]}"; }
  complete_words genesis tr; complete_words genesis data to; complete_words genesis train r.toml --set optimizer.l
  complete_words genesis train r.toml --nproc; complete_words genesis ch; complete_words genesis data pr
  complete_words genesis chat --sing' _ "$genesis")
[ "$completed" = "$(printf 'train\ntokenize\noptimizer.lr=\n--nproc-per-node\nchat\npreview\n--single-turn')" ] \
  || { echo "FAIL: bash completion gave: $completed"; failures=$((failures + 1)); }
"$genesis" completion zsh | head -1 | grep -q bashcompinit || { echo "FAIL: zsh completion lacks bashcompinit"; failures=$((failures + 1)); }

finish cli
