#!/usr/bin/env bash
# Mixed precision end to end on the CPU: a tiny GPT-2 trained 300 steps under bf16 autocast
# reaches the f32 run's validation bits per byte within 2% (the runs prepare their own token
# shards from the repository's text); `genesis eval` and `genesis generate` run under the
# recipe's autocast; the Fashion-MNIST MLP trains with --set amp.dtype=bf16; bad [amp]
# settings exit 2 with one line before any run directory exists.
#   tests/cli/test_amp_train.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
export OMP_NUM_THREADS=2  # same thread count for both runs (CPU reductions split by threads)

cat >"$work/lm.toml" <<TOML
[run]
name = "amp_test"
seed = 3

[model]
name = "gpt2"
vocab_size = 703
n_positions = 32
n_embd = 48
n_layer = 2
n_head = 2

[data]
name = "tokens"
shards = "$work/shards"
tokenizer = "$src/tests/fixtures/tokenizer_bpe/tokenizer.json"
source = ["$src/README.md", "$src/docs/architecture.md", "$src/docs/recipes.md", "$src/docs/ops.md"]
val_fraction = 0.1
seq_len = 32

[optimizer]
name = "adamw"
lr = 1e-3  # at 3e-3 this tiny model's final loss swings by 5% between seeds in f32 alone

[scheduler]
name = "cosine"
warmup_steps = 20

[training]
steps = 300
batch_size = 8
log_every = 50
eval_every = 0

[eval]
split = "val"
batch_size = 16
TOML

bpb() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["eval"]["bits_per_byte"])' "$1"; }
for dt in f32 bf16; do
  if "$genesis" train "$work/lm.toml" --set amp.dtype=$dt --out "$work/$dt" -q >/dev/null 2>"$work/$dt.err"; then
    ok "trains 300 steps with amp.dtype=$dt ($(bpb "$work/$dt/summary.json") bits/byte)"
  else
    fail "amp.dtype=$dt run: $(tail -1 "$work/$dt.err")"
  fi
done
if [ -f "$work/f32/summary.json" ] && [ -f "$work/bf16/summary.json" ]; then
  python3 - "$work/f32/summary.json" "$work/bf16/summary.json" <<'PY' && ok "bf16 bits/byte within 2% of f32" || fail "bf16 bits/byte not within 2% of f32"
import json, sys
f32, bf16 = (json.load(open(p))["eval"]["bits_per_byte"] for p in sys.argv[1:3])
print(f"f32 {f32:.5f}  bf16 {bf16:.5f}  ratio {bf16 / f32:.5f}")
sys.exit(0 if abs(bf16 / f32 - 1) <= 0.02 else 1)
PY
  grep -q 'dtype = "bf16"' "$work/bf16/checkpoints/latest/recipe.toml" && ok "the checkpoint's recipe keeps [amp]" \
    || fail "the checkpoint's recipe lacks amp.dtype"
  eval_bpb=$("$genesis" eval "$work/lm.toml" --set amp.dtype=bf16 --checkpoint "$work/bf16/checkpoints" --split val 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["bits_per_byte"])')
  [ "$eval_bpb" = "$(bpb "$work/bf16/summary.json")" ] && ok "eval under the recipe's autocast reproduces the run's bits/byte" \
    || fail "eval bits/byte $eval_bpb differs from the run's $(bpb "$work/bf16/summary.json")"
  for dt in "" bf16 f32; do
    out=$("$genesis" generate --checkpoint "$work/bf16" --prompt "The" --max-new-tokens 8 --temperature 0 --ids ${dt:+--dtype $dt} 2>"$work/gen.err")
    [ -n "$out" ] && ok "generate ${dt:-(recipe dtype)}: $out" || fail "generate ${dt:-(recipe dtype)}: $(tail -1 "$work/gen.err")"
  done
fi

if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if "$genesis" train "$src/recipes/fashion_mnist_mlp.toml" --set amp.dtype=bf16 --set training.steps=200 \
      --set training.epochs=1 --out "$work/mlp" -q >/dev/null 2>"$work/mlp.err"; then
    acc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["eval"]["accuracy"])' "$work/mlp/summary.json")
    python3 -c "import sys; sys.exit(0 if $acc > 0.75 else 1)" && ok "Fashion-MNIST MLP with bf16: accuracy $acc" \
      || fail "Fashion-MNIST MLP with bf16: accuracy $acc"
  else
    fail "Fashion-MNIST MLP with bf16: $(tail -1 "$work/mlp.err")"
  fi
fi

# Bad [amp] settings: exit 2, one line naming the key, no run directory.
expect_usage() {
  local what=$1 needle=$2; shift 2
  "$@" >/dev/null 2>"$work/err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "$needle" "$work/err" && [ ! -e "$work/bad" ]; then
    ok "$what"
  else
    fail "$what: rc=$rc, $(cat "$work/err")"
  fi
}
expect_usage "amp.dtype = fp8" "amp.dtype" "$genesis" train "$work/lm.toml" --set amp.dtype=fp8 --out "$work/bad"
expect_usage "loss_scale with bf16" "loss_scale" "$genesis" train "$work/lm.toml" --set amp.dtype=bf16 --set amp.loss_scale=1024 --out "$work/bad"
expect_usage "negative init_scale" "init_scale" "$genesis" train "$work/lm.toml" --set amp.dtype=fp16 --set amp.init_scale=-1 --out "$work/bad"
expect_usage "fp16 on the CPU" "fp16" "$genesis" train "$work/lm.toml" --set amp.dtype=fp16 --out "$work/bad"

finish "amp train"
