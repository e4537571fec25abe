#!/usr/bin/env bash
# `genesis convert` / `genesis inspect` end to end (CPU): a transformers-made fixture converts
# HF -> genesis -> HF with the same tensors, a checkpoint of a short MLP training run is
# inspected and exported, and bad input exits 2 with one line on stderr, leaving DST untouched.
#   tests/cli/test_convert.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
fixture="$src/tests/fixtures/llama"
if ! command -v python3 >/dev/null; then
  echo "FAIL: python3 (which reads the JSON reports) is not installed: run scripts/setup.sh"
  exit 1
fi
expect_rc() {  # expect_rc NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then ok "$1 (exit $3)"; else fail "$1: exit $3, expected $2"; fi
}
json_get() {  # json_get FILE PYTHON_EXPRESSION_ON_j
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

# 1. HF -> genesis -> HF keeps every tensor (name, dtype, shape, bytes) and the weights' bytes.
"$genesis" convert "$fixture" "$work/g" >"$work/files.txt" 2>"$work/err"; expect_rc "convert HF -> genesis" 0 $?
grep -q "$work/g/model.safetensors" "$work/files.txt" || fail "convert did not list the files it wrote"
"$genesis" convert "$work/g" "$work/hf" --to hf >/dev/null 2>"$work/err"; expect_rc "convert genesis -> HF" 0 $?
"$genesis" convert "$work/g" "$work/hf_q" --to hf -q >/dev/null 2>"$work/err"; expect_rc "convert -q" 0 $?
[ -s "$work/err" ] && fail "convert -q wrote to stderr: $(cat "$work/err")"
"$genesis" inspect "$fixture" --json >"$work/a.json"; expect_rc "inspect --json on the fixture" 0 $?
"$genesis" inspect "$work/hf" --json >"$work/b.json"; expect_rc "inspect --json on the round trip" 0 $?
[ "$(json_get "$work/a.json" 'j["format"], j["architecture"]')" = "huggingface llama" ] \
  && ok "inspect reports huggingface llama" || fail "inspect: $(json_get "$work/a.json" 'j["format"], j["architecture"]')"
[ "$(json_get "$work/b.json" '[(t["name"], t["dtype"], t["shape"], t["bytes"]) for t in j["tensors"]]')" = \
  "$(json_get "$work/a.json" '[(t["name"], t["dtype"], t["shape"], t["bytes"]) for t in j["tensors"]]')" ] \
  && ok "round trip lists the same tensors" || fail "round trip tensors differ"
python3 - "$fixture/model.safetensors" "$work/hf/model.safetensors" <<'PY' && ok "round trip tensors are bit-identical" || fail "round-trip bytes differ"
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in header.items()}
sys.exit(0 if tensors(sys.argv[1]) == tensors(sys.argv[2]) else 1)
PY
"$genesis" inspect "$work/hf" | grep -q "model.layers.0.self_attn.q_proj.weight" && ok "inspect prints a tensor table" \
  || fail "inspect text lacks the tensor table"

# 2. bf16 export with shards.
"$genesis" convert "$fixture" "$work/bf16" --to hf --dtype bf16 --max-shard-size 20KB >/dev/null 2>&1; expect_rc "bf16 sharded export" 0 $?
[ "$(json_get "$work/bf16/config.json" 'j["dtype"]')" = "bfloat16" ] && ok "config dtype bfloat16" || fail "config dtype"
[ "$(json_get "$work/bf16/model.safetensors.index.json" 'len(j["weight_map"])')" = \
  "$(json_get "$work/a.json" 'j["tensor_count"]')" ] && ok "the index lists every tensor" || fail "index incomplete"

# 3. A checkpoint of a short MLP training run.
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  "$genesis" train "$src/recipes/fashion_mnist_mlp.toml" --out "$work/run" --set training.steps=5 --set training.epochs=1 \
    --set training.log_every=5 -q >/dev/null 2>"$work/train.err" || { cat "$work/train.err"; fail "training run failed"; }
  "$genesis" inspect "$work/run" --json >"$work/run.json"; expect_rc "inspect --json on a run directory" 0 $?
  [ "$(json_get "$work/run.json" 'j["format"], j["architecture"], j["training"]["step"], j["training"]["optimizer"]["kind"]')" = \
    "genesis-run mlp 5 adamw" ] && ok "run report: format, architecture, step, optimizer" \
    || fail "run report: $(json_get "$work/run.json" 'j["format"], j["architecture"], j.get("training")')"
  [ "$(json_get "$work/run.json" 'sorted(j["training"]["optimizer"]["slots"])')" = "['exp_avg', 'exp_avg_sq', 'step']" ] \
    && ok "optimizer slots" || fail "optimizer slots: $(json_get "$work/run.json" 'j["training"]["optimizer"]')"
  "$genesis" convert "$work/run" "$work/mlp" >/dev/null 2>&1; expect_rc "convert the run's checkpoint" 0 $?
  [ "$(json_get "$work/mlp/config.json" 'j["genesis_classifier"], j["hidden"]')" = "mlp [256, 128]" ] \
    && ok "classifier export config" || fail "classifier export config"
  # An export has no other side to default to (issue 15, bug 7): exit 2, one line, nothing written.
  "$genesis" convert "$work/mlp" "$work/mlp_again" 2>"$work/err"; expect_rc "convert of an export without --to" 2 $?
  [ "$(wc -l <"$work/err")" = 1 ] && grep -q "already a classifier export" "$work/err" && [ ! -e "$work/mlp_again" ] \
    && ok "an export without --to is refused by name" || fail "export without --to: $(cat "$work/err")"
  "$genesis" convert "$work/mlp" "$work/mlp_bf16" --to hf --dtype bf16 >/dev/null 2>&1; expect_rc "an export re-cast with --to hf" 0 $?
else
  fail "dataset-fashion-mnist is missing (the training-checkpoint part): run scripts/setup.sh, which installs it"
fi

# 4. DST exists: exit 2, one line on stderr, DST untouched.
mkdir "$work/taken" && echo mine >"$work/taken/keep.txt"
"$genesis" convert "$fixture" "$work/taken" 2>"$work/err"; expect_rc "existing DST" 2 $?
[ "$(wc -l <"$work/err")" = 1 ] && grep -q -- "--overwrite" "$work/err" && ok "one-line error naming --overwrite" \
  || fail "stderr: $(cat "$work/err")"
[ "$(ls "$work/taken")" = keep.txt ] && [ "$(cat "$work/taken/keep.txt")" = mine ] && ok "DST untouched" || fail "DST was modified"
"$genesis" convert "$fixture" "$work/taken" --overwrite >/dev/null 2>&1; expect_rc "--overwrite replaces DST" 0 $?
[ -f "$work/taken/model.safetensors" ] && [ ! -e "$work/taken/keep.txt" ] && ok "DST replaced" || fail "DST not replaced"

# 5. Unsupported model_type lists the supported ones; unknown formats say what was looked for.
mkdir "$work/bert"
sed 's/"model_type": "llama"/"model_type": "bert"/' "$fixture/config.json" >"$work/bert/config.json"
cp "$fixture/model.safetensors" "$work/bert/"
"$genesis" convert "$work/bert" "$work/bert_out" 2>"$work/err"; expect_rc "unsupported model_type" 2 $?
grep -q "gpt2, llama, qwen2, qwen3" "$work/err" && ok "lists the supported model types" || fail "stderr: $(cat "$work/err")"
[ ! -e "$work/bert_out" ] && ok "nothing written for a failed conversion" || fail "a failed conversion left $work/bert_out"
mkdir "$work/junk" && echo hi >"$work/junk/notes.txt"
"$genesis" inspect "$work/junk" 2>"$work/err"; expect_rc "unknown format" 2 $?
grep -q "looked for" "$work/err" && ok "names what was looked for" || fail "stderr: $(cat "$work/err")"
"$genesis" convert "$fixture" "$work/x" --max-shard-size 2XB 2>/dev/null; expect_rc "bad --max-shard-size" 2 $?
ls "$work" | grep -q '\.tmp-' && fail "temporary directories left behind" || ok "no temporary directories left"

finish convert
