#!/usr/bin/env bash
# `genesis data preview` and `genesis chat` on a tiny SFT run (CPU): data/make_sft.py's
# word-reversal conversations and byte tokenizer, a 1-layer Llama trained a few steps. The
# preview's labels are -100 exactly outside each assistant answer (its text + "<|im_end|>\n",
# decoded by bytes: ids below 256 are bytes); without a terminal the answer is inside [[ ]].
# Chat reads one message per line and answers one line each, greedily (so the same message
# gets the same answer), and drops the oldest turns when the conversation outgrows the
# context. Activation checkpointing of the packed rows trains the same bits. Bad input exits 2
# with one line on stderr.
#   tests/cli/test_sft_cli.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"

requires python3 command -v python3
make_sft_data
sft_recipe sft_tiny 1 3 3e-3 >"$work/sft.toml"

"$genesis" train "$work/sft.toml" --out "$work/run" -q >"$work/train.out" 2>"$work/train.err"
rc=$?
check "genesis train (3 steps)" 0 $rc
[ $rc -eq 0 ] || cat "$work/train.err"

# Activation checkpointing on packed rows (document boundaries through the recomputation): the
# same losses and weights as without.
for mode in full selective; do
  "$genesis" train "$work/sft.toml" --out "$work/run_$mode" -q --set training.activation_checkpointing=$mode \
    >/dev/null 2>"$work/err" || fail "activation_checkpointing = $mode: $(cat "$work/err")"
  losses() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1/metrics.jsonl"; }
  [ -n "$(losses "$work/run")" ] && [ "$(losses "$work/run")" = "$(losses "$work/run_$mode")" ] \
    && cmp -s "$work/run/checkpoints/step_00000003/model.safetensors" "$work/run_$mode/checkpoints/step_00000003/model.safetensors" \
    && ok "packed SFT rows, activation_checkpointing = $mode: losses and weights bit-identical" \
    || fail "activation_checkpointing = $mode: losses [$(losses "$work/run" | tr '\n' ' ')] vs [$(losses "$work/run_$mode" | tr '\n' ' ')]"
done

# 1. --json: one object per example; labels -100 exactly outside the assistant's answer.
"$genesis" data preview "$work/sft.toml" -n 4 --json >"$work/preview.jsonl" 2>"$work/err"
check "data preview --json" 0 $?
python3 - "$work/preview.jsonl" "$work/data/sft_reverse/train.jsonl" "$work/answer" <<'EOF' && ok "preview --json: 4 examples, labels mark exactly each answer + <|im_end|>\n" || fail "preview --json: see above"
import json, sys
special = {256: "<|im_start|>", 257: "<|im_end|>", 258: "<|endoftext|>"}
def text(ids):
    return b"".join(bytes([i]) if i < 256 else special[i].encode() for i in ids).decode()
def chatml(messages):
    return "".join("<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n" for m in messages)
answers = {}  # a record's ChatML rendering -> its answer (data.val_fraction moves some records to val)
for line in open(sys.argv[2]):
    messages = json.loads(line)["messages"]
    answers[chatml(messages)] = messages[-1]["content"]
examples = [json.loads(line) for line in open(sys.argv[1])]
assert len(examples) == 4, len(examples)
for e in examples:
    ids, labels = e["ids"], e["labels"]
    assert set(e) == {"index", "ids", "labels", "text", "tokens", "trained"}, e.keys()
    assert len(ids) == len(labels) == e["tokens"], (len(ids), len(labels), e["tokens"])
    assert e["text"] == text(ids), "text is not the ids' bytes"
    assert e["text"] in answers, "not a record's ChatML rendering: " + e["text"]
    answer = answers[e["text"]]
    trained = [i for i, label in enumerate(labels) if label != -100]
    assert e["trained"] == len(trained) > 0, e["trained"]
    assert all(labels[i] == ids[i] for i in trained), "a trained label differs from its id"
    assert trained == list(range(trained[0], len(ids))), "the trained tokens are not the example's last span"
    assert text(ids[trained[0]:]) == answer + "<|im_end|>\n", text(ids[trained[0]:])
open(sys.argv[3], "w").write(answers[examples[0]["text"]])
EOF

# 2. Off a terminal the answer is inside [[ ]], then a count line per example and the split's totals.
"$genesis" data preview "$work/sft.toml" -n 2 -q >"$work/preview.txt" 2>"$work/err"
check "data preview (text)" 0 $?
answer=$(cat "$work/answer")
grep -qxF "<|im_start|>assistant" "$work/preview.txt" && grep -A1 -xF "[[$answer<|im_end|>" "$work/preview.txt" | grep -qx ']]' \
  && ok "the first answer is marked: [[$answer<|im_end|>\\n]]" || fail "no [[$answer<|im_end|> line in: $(cat "$work/preview.txt")"
[ "$(grep -c '^example [0-9]*: [0-9]* tokens, [0-9]* trained$' "$work/preview.txt")" = 2 ] \
  && ok "two count lines" || fail "count lines: $(grep '^example' "$work/preview.txt")"
grep -Eq '^train: [0-9]+ examples, [0-9]+ tokens, [0-9]+ trained' "$work/preview.txt" && ok "the split's totals" || fail "no totals: $(tail -1 "$work/preview.txt")"
[ ! -s "$work/err" ] && ok "-q: nothing on stderr" || fail "-q printed: $(cat "$work/err")"
"$genesis" data preview "$work/sft.toml" --split val -n 1 --json 2>/dev/null | grep -q '"index":0' \
  && ok "--split val" || fail "--split val printed no example 0"

# 3. Chat off a terminal: one line per message; greedy, so the same message gets the same answer.
printf 'Reverse: red fox ran\nReverse: sun moon star\n' \
  | "$genesis" chat --checkpoint "$work/run" --single-turn --max-new-tokens 12 >"$work/chat.out" 2>"$work/err"
check "chat --single-turn" 0 $?
[ "$(wc -l <"$work/chat.out")" = 2 ] && ok "two messages, two reply lines" || fail "replies: $(cat "$work/chat.out")"
printf 'Reverse: red fox ran\nReverse: red fox ran\n' \
  | "$genesis" chat --checkpoint "$work/run" --single-turn --max-new-tokens 12 >"$work/same.out" 2>/dev/null
[ "$(wc -l <"$work/same.out")" = 2 ] && [ "$(sed -n 1p "$work/same.out")" = "$(sed -n 2p "$work/same.out")" ] \
  && [ "$(sed -n 1p "$work/same.out")" = "$(sed -n 1p "$work/chat.out")" ] \
  && ok "greedy: the same message, the same reply" || fail "replies to one message differ: $(cat "$work/same.out")"
# Multi-turn: a second 48-token turn does not fit 128 positions with 16 to generate.
long="Reverse: red blue green gold gray pink black"
printf '%s\n%s\n' "$long" "$long" \
  | "$genesis" chat --checkpoint "$work/run" --system "You reverse the order of words." --max-new-tokens 16 \
    >"$work/multi.out" 2>"$work/err"
check "chat (multi-turn)" 0 $?
[ "$(wc -l <"$work/multi.out")" = 2 ] && ok "multi-turn: two reply lines" || fail "multi-turn replies: $(cat "$work/multi.out")"
grep -q "dropped its oldest 1 turn" "$work/err" && ok "the oldest turn is dropped, with a note" \
  || fail "no note about dropped turns: $(cat "$work/err")"

# The run as a Hugging Face directory (convert copies the tokenizer and its chat template)
# answers as the checkpoint does; --chat-template replaces the template.
"$genesis" convert "$work/run" "$work/hf" --to hf -q >/dev/null 2>&1 || fail "convert --to hf failed"
printf 'Reverse: red fox ran\n' | "$genesis" chat --model "$work/hf" --max-new-tokens 12 >"$work/hf.out" 2>"$work/err"
check "chat --model" 0 $?
[ "$(cat "$work/hf.out")" = "$(sed -n 1p "$work/chat.out")" ] && ok "chat --model answers as the checkpoint does" \
  || fail "chat --model: [$(cat "$work/hf.out")], the checkpoint: [$(sed -n 1p "$work/chat.out")]"
echo '{% for m in messages %}{{ m.content }}{% endfor %}' >"$work/plain.jinja"
out=$(echo "red fox" | "$genesis" chat --model "$work/hf" --chat-template "$work/plain.jinja" --max-new-tokens 4 2>"$work/err")
check "chat --chat-template FILE.jinja" 0 $?
[ "$(echo "$out" | wc -l)" = 1 ] && ok "--chat-template: one reply line" || fail "--chat-template replies: $out"

# 4. Bad input: one line on stderr, exit 2.
bad() {  # bad NAME COMMAND...
  local name=$1
  shift
  "$genesis" "$@" </dev/null >/dev/null 2>"$work/err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ]; then ok "$name: exit 2, one line"
  else fail "$name: exit $rc, stderr: $(cat "$work/err")"; fi
}
bad "preview of a recipe that is not SFT" data preview "$src/recipes/mobydick_gpt_tiny.toml"
bad "chat with a missing checkpoint" chat --checkpoint "$work/nowhere"
bad "chat with no model" chat
bad "chat with a missing --chat-template" chat --checkpoint "$work/run" --chat-template "$work/nowhere.jinja"
bad "chat with a model that has no tokenizer" chat --model "$src/tests/fixtures/llama"

finish "sft cli"
