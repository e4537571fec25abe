#!/usr/bin/env bash
# `[data] name = "text_classification"` end to end (issue 38): a tiny Llama with a two-class head
# trains a few steps on labelled texts made here (JSONL, and the same as CSV), eval reproduces
# the run's accuracy and summary.json holds the confusion matrix with the class names; genesis
# predict gives each line's class and probabilities as JSON (a file and stdin) agreeing with
# eval; generate and convert refuse the checkpoint; bad inputs exit 2 with one line naming
# file:line: a record without its text, an empty text, a label outside the checkpoint's classes,
# too few model.num_classes.
#   tests/cli/test_text_classification.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
export OMP_NUM_THREADS=1

python3 "$src/data/make_sft.py" --out "$work/data" --train 2 --val 1 >/dev/null || fail "make_sft.py failed"
# Two classes told apart by their words: "good" texts and "bad" texts of 2-8 words.
python3 - "$work" <<'PY'
import json, random, sys
rng = random.Random(4)
words = {"good": ["sun", "joy", "calm", "kind", "warm"], "bad": ["rain", "grim", "cold", "loss", "harm"]}
for name, n in (("train", 240), ("test", 60)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as out, open(f"{sys.argv[1]}/{name}.csv", "w") as table:
        table.write("id,message,label\n")
        for i in range(n):
            label = "good" if i % 2 else "bad"
            text = " ".join(rng.choice(words[label]) for _ in range(rng.randint(2, 8)))
            out.write(json.dumps({"text": text, "label": label}) + "\n")
            table.write(f'{i},"{text}",{label}\n')
PY
cat >"$work/recipe.toml" <<TOML
[run]
name = "text"
device = "cpu"
[model]
name = "llama"
vocab_size = 259
hidden_size = 32
intermediate_size = 64
num_hidden_layers = 1
num_attention_heads = 4
max_position_embeddings = 64
num_classes = 2
pooling = "mean"
[data]
name = "text_classification"
path = "$work/train.jsonl"
test_path = "$work/test.jsonl"
tokenizer = "$work/data/bytes"
cache_dir = "$work/cache"
seq_len = 48
[optimizer]
name = "adamw"
lr = 0.003
[training]
steps = 60
batch_size = 16
log_every = 20
TOML
recipe="$work/recipe.toml"
short=()

# 1. Training reaches the separable task; eval of the checkpoint gives the same accuracy.
"$genesis" train "$recipe" --out "$work/run" -q >/dev/null 2>"$work/train.err"; rc=$?
check "train on labelled texts" 0 $rc
[ $rc -eq 0 ] || cat "$work/train.err"
acc=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["eval"]["accuracy"])' "$work/run/summary.json")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' && ok "60 steps: test accuracy $acc >= 0.9" || fail "accuracy '$acc' < 0.9"
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
m = s["confusion_matrix"]
assert m["classes"] == ["bad", "good"], m
assert sum(map(sum, m["counts"])) == 60, m
assert "macro_f1" in s["eval"], s["eval"]
' "$work/run/summary.json" && ok "summary.json: macro_f1 and the confusion matrix by class name" \
  || fail "summary.json: $(cat "$work/run/summary.json")"
grep -q '"genesis text classification encoding"' "$work/run/checkpoints/latest/data.json" \
  && ok "the checkpoint keeps the classes (data.json)" || fail "data.json: $(cat "$work/run/checkpoints/latest/data.json")"
json=$("$genesis" eval --checkpoint "$work/run" 2>/dev/null)
echo "$json" | grep -q "\"accuracy\":$acc" && ok "eval reproduces the final accuracy" || fail "eval printed '$json', expected $acc"
"$genesis" eval --checkpoint "$work/run" 2>&1 >/dev/null | grep -q "tokens read back from the cache" \
  && ok "eval reads the tokens back from the cache" || fail "eval did not read the cached tokens"

# 2. predict: one JSON object a line, agreeing with eval's accuracy on the test texts.
python3 -c 'import json, sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' "$work/test.jsonl" >"$work/lines.txt"
"$genesis" predict --checkpoint "$work/run" "$work/lines.txt" >"$work/predicted.jsonl" 2>"$work/predict.err"
check "predict on lines of text" 0 $?
python3 - "$work/predicted.jsonl" "$work/test.jsonl" "$acc" <<'PY' && ok "predict: a class and probabilities for each line, eval's accuracy" || fail "predict output: $(head -n 2 "$work/predicted.jsonl")"
import json, sys
predicted = [json.loads(l) for l in open(sys.argv[1])]
truth = [json.loads(l)["label"] for l in open(sys.argv[2])]
assert len(predicted) == len(truth) == 60
assert predicted[0]["input"].endswith("lines.txt:1"), predicted[0]
assert abs(sum(predicted[0]["probabilities"].values()) - 1) < 1e-6
correct = sum(p["class"] == t for p, t in zip(predicted, truth))
assert abs(correct / 60 - float(sys.argv[3])) < 1e-9, (correct, sys.argv[3])
PY
out=$(printf 'sun joy calm\n\nrain grim cold loss\n' | "$genesis" predict --checkpoint "$work/run" - 2>/dev/null)
[ "$(echo "$out" | wc -l)" -eq 2 ] && echo "$out" | head -n 1 | grep -q '"input":"stdin:1","class":"good"' \
  && echo "$out" | tail -n 1 | grep -q '"input":"stdin:3","class":"bad"' \
  && ok "predict - reads stdin, a line each, blank lines skipped" || fail "predict from stdin: $out"
"$genesis" predict --checkpoint "$work/run" "$work/test.jsonl" 2>/dev/null | head -n 1 | grep -q '"label":' \
  && ok "predict on JSONL records echoes their label" || fail "predict on records: no label"

# The checkpoint is self-contained (its tokenizer beside data.json); the language-model commands
# refuse it with a line saying what it is.
[ -f "$work/run/checkpoints/latest/tokenizer.json" ] && ok "the checkpoint keeps its tokenizer" \
  || fail "no tokenizer.json in $(ls "$work/run/checkpoints/latest")"
"$genesis" generate --checkpoint "$work/run" --prompt "sun" >/dev/null 2>"$work/err"; rc=$?
[ $rc -eq 2 ] && grep -q "holds a text classifier" "$work/err" && ok "generate refuses a text classifier" \
  || fail "generate on a text classifier: rc $rc, $(cat "$work/err")"
"$genesis" convert "$work/run" "$work/hf" --to hf >/dev/null 2>"$work/err"; rc=$?
[ $rc -eq 2 ] && grep -q "is a text classifier" "$work/err" && ok "convert refuses a text classifier" \
  || fail "convert of a text classifier: rc $rc, $(cat "$work/err")"

# 3. The same texts as CSV (data.text and data.label name the columns) train as well.
"$genesis" train "$recipe" --out "$work/run_csv" -q --set "data.path=$work/train.csv" --set "data.test_path=$work/test.csv" \
  --set data.text=message --set training.steps=30 >/dev/null 2>"$work/csv.err"
check "train on a CSV of texts" 0 $?
[ -s "$work/run_csv/summary.json" ] && ok "CSV run wrote summary.json" || { fail "CSV run"; cat "$work/csv.err"; }

# 4. From a pretrained genesis language model: a few steps on the texts as tokens, exported with
# convert --to hf, then LoRA adapters and the head on it (init_from); eval and predict of the LoRA
# checkpoint (adapters and head alone) agree.
python3 -c 'import json, sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' "$work/train.jsonl" >"$work/texts.txt"
cat >"$work/lm.toml" <<TOML
include = ["$recipe"]
[run]
name = "lm"
[data]
name = "tokens"
shards = "$work/shards"
source = ["$work/texts.txt"]
val_fraction = 0.1
seq_len = 32
[training]
steps = 10
batch_size = 8
[eval]
split = "val"
TOML
"$genesis" train "$work/lm.toml" --out "$work/lm" -q >/dev/null 2>"$work/lm.err" \
  && "$genesis" convert "$work/lm" "$work/lm_hf" --to hf >/dev/null 2>>"$work/lm.err"
check "a language model on the texts, exported" 0 $?
"$genesis" train "$recipe" --out "$work/lora" -q --set "model.init_from=$work/lm_hf" --set lora.r=4 --set training.steps=40 \
  >/dev/null 2>"$work/lora.err"
check "LoRA and the head on the exported model" 0 $?
lora_acc=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["eval"]["accuracy"])' "$work/lora/summary.json" 2>/dev/null)
"$genesis" eval --checkpoint "$work/lora" 2>/dev/null | grep -q "\"accuracy\":$lora_acc" \
  && ok "eval of the LoRA checkpoint reproduces its accuracy $lora_acc" || { fail "LoRA eval"; cat "$work/lora.err"; }
"$genesis" predict --checkpoint "$work/lora" "$work/lines.txt" 2>/dev/null | head -n 1 | grep -q '"class":' \
  && ok "predict with the LoRA checkpoint" || fail "predict with the LoRA checkpoint"

# 4. Bad input: one line naming file:line, exit 2.
short=(--set training.steps=1)
printf '{"text": "sun joy", "label": "good"}\n{"label": "bad"}\n' >"$work/no_text.jsonl"
bad "a record without its text" "no_text.jsonl:2: the record has no string field \"text\"" --set "data.path=$work/no_text.jsonl"
printf '{"text": "", "label": "good"}\n' >"$work/empty.jsonl"
bad "an empty text" "empty.jsonl:1: the field \"text\" is empty" --set "data.path=$work/empty.jsonl"
printf '{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n{"text": "c", "label": "z"}\n' >"$work/three.jsonl"
bad "too few classes for the head" "model.num_classes = 2 is fewer than the 3 classes" --set "data.path=$work/three.jsonl"
printf '{"text": "sun", "label": "good"}\n{"text": "mud", "label": "meh"}\n' >"$work/test.jsonl"
"$genesis" eval --checkpoint "$work/run" -q >/dev/null 2>"$work/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "test.jsonl:2: the label 'meh' is not one of the checkpoint's classes" "$work/err" \
  && ok "a label outside the checkpoint's classes: exit 2, '$(cut -c1-110 "$work/err")'" || fail "eval with an unknown label: rc $rc, $(cat "$work/err")"

finish test_text_classification
