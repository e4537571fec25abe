#!/usr/bin/env bash
# `genesis generate` against the transformers fixtures (CPU): greedy generation from each
# tests/fixtures/<model>/ directory with --prompt-ids equals transformers' greedy `generate`
# (reference.safetensors: prompt_ids, generated_ids); sampling is reproducible per seed;
# bad input exits 2 (or 1) with one line on stderr.
#   tests/cli/test_lm_generate.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
fixtures="$src/tests/fixtures"

requires "node (it reads the fixtures' reference.safetensors)" command -v node
# ids NAME FILE: the i64 tensor NAME of a safetensors file, space-separated.
ids() {
  node -e '
    const b = require("fs").readFileSync(process.argv[1]);
    const n = Number(b.readBigUInt64LE(0));
    const t = JSON.parse(b.subarray(8, 8 + n).toString())[process.argv[2]];
    if (!t || t.dtype !== "I64") throw new Error("no I64 tensor " + process.argv[2]);
    const out = [];
    for (let i = 8 + n + t.data_offsets[0]; i < 8 + n + t.data_offsets[1]; i += 8) out.push(b.readBigInt64LE(i));
    console.log(out.join(" "));' "$2" "$1"
}

# 1. Greedy generation equals transformers' for every fixture model.
for model in gpt2 llama qwen2 qwen3; do
  dir="$fixtures/$model"
  [ -f "$dir/reference.safetensors" ] || { fail "$model: no fixture at $dir"; continue; }
  prompt=$(ids prompt_ids "$dir/reference.safetensors")
  expected=$(ids generated_ids "$dir/reference.safetensors")
  count=$(echo "$expected" | wc -w)
  got=$("$genesis" generate --model "$dir" --prompt-ids "$prompt" --max-new-tokens "$count" --temperature 0 --ids 2>"$work/err")
  rc=$?
  if [ $rc -eq 0 ] && [ "$got" = "$expected" ]; then ok "$model: greedy ids equal transformers' ($count tokens)"
  else cat "$work/err"; fail "$model: rc $rc, got [$got] expected [$expected]"; fi
done

# 2. Sampling: the same seed repeats, another seed differs (96-token vocabulary, 24 draws).
llama="$fixtures/llama"
if [ -d "$llama" ]; then
  sample() { "$genesis" generate --model "$llama" --prompt-ids "1 2 3" --max-new-tokens 24 --temperature 1.5 --top-k 50 --top-p 0.95 --seed "$1" --ids 2>/dev/null; }
  a=$(sample 7); b=$(sample 7); c=$(sample 8)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "sampling with seed 7 repeats" || fail "seed 7 gave [$a] then [$b]"
  [ "$a" != "$c" ] && ok "seed 8 samples differently" || fail "seeds 7 and 8 both gave [$a]"
  [ "$(echo "$a" | wc -w)" = 24 ] && ok "24 tokens sampled (no EOS in the fixture)" || fail "expected 24 ids, got [$a]"

  # 3. Bad input: one line on stderr, exit 2.
  bad() {  # bad NAME EXPECTED_RC ARGS...
    local name=$1 want=$2
    shift 2
    "$genesis" generate "$@" >/dev/null 2>"$work/err"
    local rc=$?
    local lines
    lines=$(wc -l <"$work/err")
    if [ $rc -eq "$want" ] && [ "$lines" -eq 1 ]; then ok "$name: exit $rc, one line"
    else fail "$name: exit $rc (want $want), stderr: $(cat "$work/err")"; fi
  }
  long=$(seq 1 70 | tr '\n' ' ')
  bad "prompt longer than the context" 2 --model "$llama" --prompt-ids "$long" --ids
  bad "id outside the vocabulary" 2 --model "$llama" --prompt-ids "5 96" --ids
  bad "malformed id" 2 --model "$llama" --prompt-ids "5 x7" --ids
  bad "text prompt without a tokenizer" 2 --model "$llama" --prompt "hello"
  bad "no model" 2 --prompt-ids "1 2"
  bad "missing model directory (a usage error, as everywhere)" 2 --model "$work/nope" --prompt-ids "1 2" --ids
  "$genesis" generate --model "$llama" --prompt-ids "1 2" --top-p 1.5 --ids >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] && ok "top-p out of range: exit 2" || fail "top-p 1.5 exited $rc"
fi

finish "lm generate"
