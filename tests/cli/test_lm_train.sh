#!/usr/bin/env bash
# Language-model training end to end (CPU, seconds): a tiny GPT-2 on token shards that the
# run prepares itself from text; eval.loss / perplexity / bits_per_byte in summary.json and
# `genesis eval` (bits per byte checked against the decoded bytes of the evaluated tokens);
# tokens/s and MFU reported; resuming reproduces the uninterrupted losses bit for bit (dropout's
# masks included);
# activation checkpointing (full, selective) trains the same bits;
# `genesis generate --checkpoint` continues text; data and recipe errors exit 2 with one line;
# shards made from sources that changed since are prepared again; every recipe in recipes/
# resolves with `genesis recipe show`.
#   tests/cli/test_lm_train.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
num() { sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" "$1" | head -n 1; }

cat >"$work/lm.toml" <<TOML
[run]
name = "lm_test"
seed = 1
threads = 2

[model]
name = "gpt2"
vocab_size = 703
n_positions = 32
n_embd = 32
n_layer = 1
n_head = 2
dropout = 0.1  # attention, residual and embedding dropout: resume must repeat the masks

[data]
name = "tokens"
shards = "$work/shards"
tokenizer = "$src/tests/fixtures/tokenizer_bpe/tokenizer.json"
source = ["$src/README.md", "$src/docs/architecture.md", "$src/docs/recipes.md"]
val_fraction = 0.1
seq_len = 16

[optimizer]
name = "adamw"
lr = 3e-3

[scheduler]
name = "cosine"
warmup_steps = 5

[training]
steps = 40
batch_size = 4
log_every = 5
eval_every = 20
checkpoint_every = 20
keep_last = 5

[eval]
split = "val"
batch_size = 8
TOML

# 1. The first run tokenizes the sources, trains, evaluates on val.bin.
"$genesis" train "$work/lm.toml" --out "$work/full" >/dev/null 2>"$work/full.err"
rc=$?
[ $rc -eq 0 ] || { cat "$work/full.err"; fail "training exited $rc"; }
grep -q "tokenizing 3 documents" "$work/full.err" && grep -q "preparing data: wrote" "$work/full.err" &&
  ok "shards prepared on first use" || fail "no data preparation lines: $(head -3 "$work/full.err")"
# Off a terminal, the documents' progress is a line every 10 s at most, not one per document.
[ "$(grep -c "tokenizing [0-9]*/3" "$work/full.err")" -le 1 ] && ok "no line per document" ||
  fail "a progress line per document: $(grep "tokenizing" "$work/full.err")"
[ -f "$work/shards/train.bin" ] && [ -f "$work/shards/val.bin" ] || fail "shards were not written"
grep -q "tok/s | MFU" "$work/full.err" && ok "step lines report tokens/s and MFU" || fail "step lines lack tok/s and MFU"
summary="$work/full/summary.json"
for key in bits_per_byte perplexity loss tokens_per_s mfu flops_per_token; do
  [ -n "$(num "$summary" $key)" ] || fail "summary.json lacks $key"
done
loss=$(num "$summary" loss); ppl=$(num "$summary" perplexity); bpb=$(num "$summary" bits_per_byte)
tokens=$(num "$summary" tokens); bytes=$(num "$summary" bytes)
awk -v l="$loss" -v p="$ppl" 'BEGIN { exit !(l > 0 && l < 6.6 && (p - exp(l)) ^ 2 < 1e-6 * p * p) }' \
  && ok "eval loss $loss (< ln 703), perplexity = exp(loss)" || fail "loss $loss perplexity $ppl"
awk -v l="$loss" -v b="$bpb" -v t="$tokens" -v n="$bytes" 'BEGIN { e = l * t / (n * log(2)); exit !((b - e) ^ 2 < 1e-12 * e * e) }' \
  && ok "bits_per_byte = loss * tokens / (bytes * ln 2) = $bpb" || fail "bits_per_byte $bpb inconsistent"

# bytes: the UTF-8 bytes the evaluated targets decode to (tokens 1..windows*16 of val.bin).
if command -v node >/dev/null; then
  node -e '
    const b = require("fs").readFileSync(process.argv[1]);
    const width = b.readUInt32LE(12), count = Number(b.readBigUInt64LE(16)), seq = 16;
    const windows = Math.floor((count - 1) / seq), ids = [];
    for (let i = 1; i <= windows * seq; ++i) ids.push(width === 2 ? b.readUInt16LE(32 + 2 * i) : b.readUInt32LE(32 + 4 * i));
    console.log(ids.join(" "));' "$work/shards/val.bin" >"$work/targets.ids"
  decoded=$("$genesis" data decode --tokenizer "$src/tests/fixtures/tokenizer_bpe/tokenizer.json" <"$work/targets.ids" | wc -c)
  [ "$decoded" = "${bytes%.0}" ] && ok "bytes ($decoded) are the decoded bytes of the evaluated tokens" \
    || fail "summary bytes $bytes, decoded targets $decoded"
fi

# 2. genesis eval on the final checkpoint reproduces the summary.
json=$("$genesis" eval "$work/lm.toml" --checkpoint "$work/full/checkpoints" 2>/dev/null)
echo "$json" | grep -q "\"bits_per_byte\":$bpb" && ok "genesis eval reproduces bits_per_byte" || fail "eval printed '$json', expected $bpb"
# ... and so does the run exported as a Hugging Face directory, the recipe giving the data.
"$genesis" convert "$work/full" "$work/hf" --to hf >/dev/null 2>"$work/err" || fail "convert --to hf: $(cat "$work/err")"
json=$("$genesis" eval "$work/lm.toml" --checkpoint "$work/hf" 2>"$work/err")
echo "$json" | grep -q "\"bits_per_byte\":$bpb" && ok "genesis eval of the Hugging Face export reproduces bits_per_byte" \
  || fail "eval of the HF export printed '$json' ($(cat "$work/err")), expected $bpb"
"$genesis" eval --checkpoint "$work/hf" >/dev/null 2>"$work/err"; rc=$?
[ $rc -eq 2 ] && grep -q "Hugging Face" "$work/err" && ok "eval of a Hugging Face directory without a recipe: exit 2" \
  || fail "eval HF without recipe: exit $rc, '$(cat "$work/err")'"
"$genesis" eval "$src/recipes/fashion_mnist_mlp.toml" --checkpoint "$work/hf" >/dev/null 2>"$work/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'data.name = "tokens"' "$work/err" && ok "eval of a Hugging Face directory on images: exit 2" \
  || fail "eval HF with an image recipe: exit $rc, '$(cat "$work/err")'"

# 3. Resume from the step-20 checkpoint: bit-identical losses and weights.
mkdir -p "$work/resumed/checkpoints"
cp -r "$work/full/checkpoints/step_00000020" "$work/resumed/checkpoints/"
ln -s step_00000020 "$work/resumed/checkpoints/latest"
cp "$work/full/recipe.toml" "$work/resumed/recipe.toml"
"$genesis" train "$work/lm.toml" --out "$work/resumed" --resume -q >/dev/null 2>"$work/resume.err" || { cat "$work/resume.err"; fail "resume failed"; }
grep -q '"epoch": *[0-9]' "$work/full/checkpoints/step_00000020/trainer.json" || fail "trainer.json holds no data cursor"
steps_losses() { grep -v '"eval"' "$1" | sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' | awk '$1 > 20'; }
a=$(steps_losses "$work/full/metrics.jsonl"); b=$(steps_losses "$work/resumed/metrics.jsonl")
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "resumed LM losses at steps 25..40 are bit-identical"; else fail "resume differs: full [$a] resumed [$b]"; fi
cmp -s "$work/full/checkpoints/step_00000040/model.safetensors" "$work/resumed/checkpoints/step_00000040/model.safetensors" \
  && ok "final LM weights are byte-identical" || fail "final LM weights differ after resume"

# 3b. Activation checkpointing recomputes the block in the backward: the same losses and weights.
all_losses() { grep -v '"eval"' "$1" | sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p'; }
for mode in full selective; do
  "$genesis" train "$work/lm.toml" --out "$work/ckpt_$mode" -q --set training.activation_checkpointing=$mode \
    >/dev/null 2>"$work/err" || fail "activation_checkpointing = $mode: $(cat "$work/err")"
  a=$(all_losses "$work/full/metrics.jsonl"); b=$(all_losses "$work/ckpt_$mode/metrics.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] && cmp -s "$work/full/checkpoints/step_00000040/model.safetensors" \
    "$work/ckpt_$mode/checkpoints/step_00000040/model.safetensors" \
    && ok "activation_checkpointing = $mode: losses and final weights bit-identical" \
    || fail "activation_checkpointing = $mode differs: none [$a] $mode [$b]"
done

# 4. generate from the run: text streams, --ids gives ids in the vocabulary.
text=$("$genesis" generate --checkpoint "$work/full" --prompt "The recipe" --max-new-tokens 12 --seed 3 2>"$work/gen.err")
rc=$?
[ $rc -eq 0 ] && [ -n "$text" ] && ok "generate --checkpoint prints text" || { cat "$work/gen.err"; fail "generate rc $rc"; }
ids=$("$genesis" generate --checkpoint "$work/full/checkpoints/latest" --prompt "The recipe" --max-new-tokens 12 --temperature 0 --ids 2>/dev/null)
[ "$(echo "$ids" | wc -w)" -ge 1 ] && ok "generate --ids prints ids: $ids" || fail "generate --ids printed '$ids'"

# 5. Bad data and recipes: exit 2, one line.
bad() {  # bad NAME ARGS...
  local name=$1
  shift
  "$genesis" "$@" >/dev/null 2>"$work/err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ]; then ok "$name: exit 2, one line"
  else fail "$name: exit $rc, stderr: $(cat "$work/err")"; fi
}
bad "missing source without fetch" train "$work/lm.toml" --out "$work/bad1" --set data.shards="$work/none" --set data.source='["'"$work"'/missing.txt"]'
grep -q "missing.txt does not exist" "$work/err" && grep -q "genesis data tokenize --tokenizer" "$work/err" && ok "the error names the missing file and the command to run" || fail "no command in: $(cat "$work/err")"
bad "shards without sources" train "$work/lm.toml" --out "$work/bad2" --set data.shards="$work/none" --set 'data.source=[]'
bad "seq_len beyond n_positions" train "$work/lm.toml" --out "$work/bad3" --set data.seq_len=64
bad "language model on fashion_mnist" train "$work/lm.toml" --out "$work/bad4" --set data.name=fashion_mnist
bad "tokens evaluated on test" train "$work/lm.toml" --out "$work/bad5" --set eval.split=test
bad "unknown checkpointing mode" train "$work/lm.toml" --out "$work/bad9" --set training.activation_checkpointing=some
bad "unknown fetch target" train "$work/lm.toml" --out "$work/bad6" --set 'data.fetch=["wikipedia"]'
# Shards holding ids past the model's vocabulary: refused at start-up, naming the shard and the id.
bad "token ids past the vocabulary" train "$work/lm.toml" --out "$work/bad8" --set model.vocab_size=300
grep -q "train.bin holds token id" "$work/err" && ok "the error names the shard and the id" || fail "vocab message: $(cat "$work/err")"

# Shards without val.bin: evaluation asked for is an error before training; otherwise a warning.
cp -r "$work/shards" "$work/noval" && rm "$work/noval/val.bin"
bad "eval_every without val.bin" train "$work/lm.toml" --out "$work/bad7" --set data.shards="$work/noval"
grep -q "val.bin" "$work/err" && ok "the error names val.bin" || fail "no val.bin in: $(cat "$work/err")"
"$genesis" train "$work/lm.toml" --out "$work/noval_run" --set data.shards="$work/noval" --set training.eval_every=0 \
  --set training.steps=8 >/dev/null 2>"$work/err"
[ $? -eq 0 ] && grep -q "no val.bin" "$work/err" && ok "no val.bin and no eval_every: a warning" \
  || fail "no val.bin warning: $(cat "$work/err")"

# 6. Shards remember what they were made from (source.json): `data tokenize` writes it, a run
# naming the same sources uses the shards untouched, an edited source prepares them again.
cp "$src/README.md" "$work/doc.txt"
"$genesis" data tokenize -q --tokenizer "$src/tests/fixtures/tokenizer_bpe/tokenizer.json" --input "$work/doc.txt" \
  --out "$work/own" --val-fraction 0.1 >"$work/own.json" 2>"$work/err" || fail "data tokenize: $(cat "$work/err")"
[ -f "$work/own/source.json" ] && ok "data tokenize writes source.json" || fail "data tokenize wrote no source.json"
made=$(stat -c %y "$work/own/train.bin")
own=(--set data.shards="$work/own" --set 'data.source=["'"$work"'/doc.txt"]' --set training.steps=6 --set training.eval_every=0)
"$genesis" train "$work/lm.toml" --out "$work/own1" "${own[@]}" >/dev/null 2>"$work/own1.err"
rc=$?
[ $rc -eq 0 ] && ! grep -q "preparing" "$work/own1.err" && [ "$(stat -c %y "$work/own/train.bin")" = "$made" ] \
  && ok "unchanged sources: the shards are used untouched" || fail "unchanged sources: exit $rc, $(cat "$work/own1.err")"
echo "A line added after the shards were made." >>"$work/doc.txt"
"$genesis" train "$work/lm.toml" --out "$work/own2" "${own[@]}" >/dev/null 2>"$work/own2.err"
rc=$?
before=$(num "$work/own.json" tokens)
after=$(sed -n 's/.*wrote .*train.bin (\([0-9]*\) tokens).*/\1/p' "$work/own2.err")
[ $rc -eq 0 ] && grep -qF "data.source changed since $work/own was made ($work/doc.txt differs): preparing the shards again" \
  "$work/own2.err" && [ -n "$after" ] && [ "$after" != "$before" ] \
  && ok "an edited source: the shards are prepared again ($before -> $after training tokens)" \
  || fail "edited source: exit $rc, tokens $before -> $after, $(cat "$work/own2.err")"

# 7. Every shipped recipe resolves.
for recipe in "$src"/recipes/*.toml; do
  "$genesis" recipe show "$recipe" >/dev/null 2>"$work/err" && ok "recipe show $(basename "$recipe")" \
    || fail "recipe show $(basename "$recipe"): $(cat "$work/err")"
done

finish "lm train"
