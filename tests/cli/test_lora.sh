#!/usr/bin/env bash
# LoRA end to end on the CPU: a tiny Llama trained a few SFT steps and exported as the base; a
# [lora] run on it writes checkpoints that hold the adapters alone and name the base (directory
# and fingerprint); --resume against a changed base exits 2; `convert --to peft` writes PEFT's
# two files (its names and config), which a run continues with model.adapter; `convert --to hf
# --merge` writes the merged model, which
# generates what the run's checkpoint (base + adapters) generates, and so does the base with the
# PEFT adapter (`--adapter`); `--to hf` without --merge is a usage error. `genesis eval` scores the
# run's checkpoint as it scores the base with the exported adapter (--adapter), and refuses a LoRA
# run whose base is gone or changed (exit 2, as --resume and generate do). Under ZeRO-3 on 2 ranks
# the adapters on a sharded base (plain and NF4) train as in one process.
#   tests/cli/test_lora.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"

requires python3 command -v python3
make_sft_data
sft_recipe base 2 300 1e-2 'dtype = "f32"' >"$work/base.toml"
"$genesis" train "$work/base.toml" --out "$work/base_run" -q >/dev/null 2>"$work/base.err" \
  || { cat "$work/base.err"; fail "base training failed"; }
"$genesis" convert "$work/base_run" "$work/base" --to hf -q >/dev/null || fail "base export failed"

printf '%s\n[lora]\nr = 4\nalpha = 8.0\n' "$(sft_recipe lora 2 30 3e-2 "init_from = \"$work/base\"")" >"$work/lora.toml"
"$genesis" train "$work/lora.toml" --out "$work/lora" --set training.checkpoint_every=10 --set training.keep_last=5 -q \
  >/dev/null 2>"$work/lora.err"
rc=$?
check "genesis train with [lora]" 0 $rc
[ $rc -eq 0 ] || cat "$work/lora.err"

python3 - "$work/lora" "$work/base" <<'PY' && ok "checkpoints hold the 28 adapter tensors only and name the base" \
  || fail "a LoRA checkpoint holds more than its adapters, or does not name its base"
import json, struct, sys
run, base = sys.argv[1:]
for step in ("00000020", "00000030"):
    ck = f"{run}/checkpoints/step_{step}"
    with open(ck + "/model.safetensors", "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    names = [n for n in header if n != "__metadata__"]
    assert len(names) == 2 * 7 * 2, names  # A and B of 7 projections in 2 layers
    assert all(n.endswith((".lora_A.weight", ".lora_B.weight")) for n in names), names
    trainer = json.load(open(ck + "/trainer.json"))
    assert trainer["base"]["dir"] == base and trainer["base"]["fingerprint"], trainer
s = json.load(open(run + "/summary.json"))
# r (in + out) for q, o (32 -> 32), k, v (32 -> 16), gate, up, down (32 <-> 64), in 2 layers
assert s["trainable_parameters"] == 2 * 4 * ((32 + 32) * 2 + (32 + 16) * 2 + (32 + 64) * 3), s
PY

# PEFT's format.
"$genesis" convert "$work/lora" "$work/peft" --to peft -q >"$work/peft.out" 2>"$work/peft.err"
check "convert --to peft" 0 $?
python3 - "$work/peft" "$work/base" <<'PY' && ok "the PEFT adapter has PEFT's names, r, alpha and base" \
  || fail "the PEFT adapter's names or config are wrong"
import json, struct, sys
out, base = sys.argv[1:]
config = json.load(open(out + "/adapter_config.json"))
assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8, config
assert config["base_model_name_or_path"] == base, config
with open(out + "/adapter_model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
names = [n for n in header if n != "__metadata__"]
assert len(names) == 28 and all(n.startswith("base_model.model.model.layers.") for n in names), names
PY

# The merged model generates what base + adapters generate (greedy).
"$genesis" convert "$work/lora" "$work/merged" --to hf -q >/dev/null 2>"$work/nomerge.err"
rc=$?
check "convert --to hf of a LoRA run without --merge" 2 $rc
grep -q -- "--to hf --merge" "$work/nomerge.err" && ok "the error names --to peft and --merge" || fail "$(cat "$work/nomerge.err")"
"$genesis" convert "$work/lora" "$work/merged" --to hf --merge -q >/dev/null 2>"$work/merge.err"
check "convert --to hf --merge" 0 $?
gen() { "$genesis" generate "$@" --prompt "<|im_start|>user\nReverse: cat dog owl<|im_end|>\n<|im_start|>assistant\n" --max-new-tokens 12 --temperature 0 --ids -q 2>/dev/null; }
a=$(gen --checkpoint "$work/lora")
b=$(gen --model "$work/merged")
c=$(gen --model "$work/base")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "merged model = base + adapters: $a" || fail "merged '$b' vs adapters '$a'"
# Greedy ids of a weak model can coincide for base and adapters; sampled with one seed from the
# two distributions, 40 tokens diverge.
sampled() { "$genesis" generate "$@" --prompt "<|im_start|>user\nReverse: cat dog owl<|im_end|>\n" --max-new-tokens 40 \
  --temperature 1 --seed 3 --ids -q 2>/dev/null; }
sampled_lora=$(sampled --checkpoint "$work/lora")
sampled_base=$(sampled --model "$work/base")
[ -n "$sampled_lora" ] && [ "$sampled_lora" != "$sampled_base" ] && ok "the adapters change the base's output" \
  || fail "the adapters changed nothing: '$sampled_base'"

# model.adapter: a run that trains the exported adapter on starts from it (one step at lr 1e-12
# leaves it as it was: the run's checkpoint generates what the LoRA run does).
sed -e "s|^\[lora\]||; s|^r = 4||; s|^alpha = 8.0||" -e "s|^name = \"lora\"|name = \"again\"|" \
  -e "s|^init_from = .*|&\nadapter = \"$work/peft\"|" "$work/lora.toml" >"$work/again.toml"
"$genesis" train "$work/again.toml" --out "$work/again" --set training.steps=1 --set optimizer.lr=1e-12 -q \
  >/dev/null 2>"$work/again.err"
rc=$?
check "genesis train with model.adapter" 0 $rc
[ $rc -eq 0 ] || cat "$work/again.err"
e=$(gen --checkpoint "$work/again")
[ "$a" = "$e" ] && ok "model.adapter starts from the adapter: the same output" || fail "model.adapter run gave '$e', the LoRA run '$a'"
d=$(gen --model "$work/base" --adapter "$work/peft")
[ "$a" = "$d" ] && ok "--model BASE --adapter PEFT_DIR generates as the run does" || fail "--adapter gave '$d', the run '$a'"
"$genesis" generate --model "$work/base" --adapter "$work/data" --prompt x -q >/dev/null 2>"$work/adapter.err"
check "--adapter of a directory without an adapter" 1 $?

# genesis eval: the run's checkpoint, and the base with the exported adapter (--adapter), score
# the same on the validation conversations; --adapter with a LoRA run's checkpoint is a usage error.
# The LoRA run's own recipe lends its data to the evaluation of BASE + adapter, not its [lora].
"$genesis" eval --checkpoint "$work/lora" --set eval.exact_match=4 -q >"$work/eval_run.json" 2>"$work/eval.err"
check "eval --checkpoint of a LoRA run" 0 $?
"$genesis" eval "$work/lora.toml" --checkpoint "$work/base" --adapter "$work/peft" --split val --set eval.exact_match=4 \
  -q >"$work/eval_adapter.json" 2>"$work/eval.err"
check "eval --checkpoint BASE --adapter PEFT_DIR" 0 $?
python3 - "$work/eval_run.json" "$work/eval_adapter.json" <<'PY' && ok "eval --adapter scores as the run's checkpoint does" \
  || fail "eval --adapter and the run's checkpoint disagree: $(cat "$work/eval_run.json" "$work/eval_adapter.json")"
import json, sys
run, adapter = (json.load(open(f)) for f in sys.argv[1:])
assert "exact_match" in run and run["exact_match"] == adapter["exact_match"], (run, adapter)
assert abs(run["loss"] - adapter["loss"]) <= 1e-5 * abs(run["loss"]), (run, adapter)
PY
"$genesis" eval "$work/base.toml" --checkpoint "$work/base" -q >"$work/eval_base.json" 2>/dev/null
python3 -c 'import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); assert a["loss"] != b["loss"]' \
  "$work/eval_base.json" "$work/eval_adapter.json" && ok "without --adapter the base scores otherwise" \
  || fail "the adapter changed nothing in eval"
bad() {  # bad NAME EXPECTED_RC COMMAND...: exit EXPECTED_RC with one line on stderr
  local name=$1 expected=$2
  shift 2
  "$genesis" "$@" </dev/null >/dev/null 2>"$work/err"
  local rc=$?
  if [ $rc -eq "$expected" ] && [ "$(wc -l <"$work/err")" -eq 1 ]; then ok "$name: exit $expected, one line"
  else fail "$name: exit $rc, stderr: $(cat "$work/err")"; fi
}
bad "eval --adapter with a LoRA run's checkpoint" 2 eval --checkpoint "$work/lora" --adapter "$work/peft" -q
grep -q "is a LoRA run, which brings its own adapters" "$work/err" || fail "the error does not say why: $(cat "$work/err")"
bad "eval --adapter of a directory without an adapter" 1 eval "$work/base.toml" --checkpoint "$work/base" \
  --adapter "$work/data" --split val -q
mv "$work/base" "$work/base.away"
bad "eval of a LoRA run whose base is gone" 2 eval --checkpoint "$work/lora" -q
grep -q "which is gone" "$work/err" || fail "the error does not say the base is gone: $(cat "$work/err")"
mv "$work/base.away" "$work/base"

# ZeRO-3 shards the frozen base with the adapters (QLoRA's NF4 codes and scales too): 2 tcp ranks of
# 2 rows give the per-step losses of 1 process of 4 within 1e-5.
losses() { python3 -c 'import json, sys; [print(j["loss"]) for j in map(json.loads, open(sys.argv[1])) if "loss" in j]' "$1"; }
for quant in none nf4; do
  z3=(--set lora.base_quant=$quant --set training.steps=8 --set training.log_every=1 -q)
  "$genesis" train "$work/lora.toml" --out "$work/lora1_$quant" "${z3[@]}" >/dev/null 2>"$work/lora1.err" \
    || { cat "$work/lora1.err"; fail "LoRA ($quant) 1-process run failed"; }
  "$genesis" train "$work/lora.toml" --out "$work/loraz3_$quant" "${z3[@]}" --set training.batch_size=2 \
    --set dist.zero=3 --nproc-per-node 2 >/dev/null 2>"$work/loraz3.err" \
    || { cat "$work/loraz3.err"; fail "LoRA ($quant) ZeRO-3 2-rank run failed"; }
  r=$(paste <(losses "$work/lora1_$quant/metrics.jsonl") <(losses "$work/loraz3_$quant/metrics.jsonl") | awk '
    NF != 2 { bad = 1 } NF == 2 { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (bad || NR != 8) print "count"; else printf "%.3g\n", m }')
  [ "$r" != count ] && awk -v r="$r" 'BEGIN { exit !(r <= 1e-5) }' \
    && ok "LoRA (base_quant = $quant) under ZeRO-3, 2 ranks x 2 = 1 process x 4: 8 losses within $r" \
    || fail "LoRA (base_quant = $quant) under ZeRO-3 differs from 1 process: $r"
done

# A changed base: --resume refuses it (exit 2) and names both fingerprints.
python3 - "$work/base/model.safetensors" <<'PY'
import struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n + 4)
    byte = f.read(1)
    f.seek(8 + n + 4)
    f.write(bytes([byte[0] ^ 0x40]))
PY
"$genesis" train "$work/lora.toml" --out "$work/lora" --resume --set training.steps=9 -q >/dev/null 2>"$work/resume.err"
rc=$?
check "--resume against a changed base" 2 $rc
tail -n 1 "$work/resume.err" | grep -q "was trained on the base $work/base (fingerprint .*) but this run has the base" \
  && ok "one error line naming the base and both fingerprints" || fail "resume error: $(cat "$work/resume.err")"
"$genesis" generate --checkpoint "$work/lora" --prompt "x" --max-new-tokens 2 -q >/dev/null 2>"$work/gen.err"
check "generate --checkpoint with a changed base" 2 $?
bad "eval --checkpoint with a changed base" 2 eval --checkpoint "$work/lora" -q
grep -q "which has changed since" "$work/err" && ok "eval names the changed base" || fail "eval: $(cat "$work/err")"

# The CPU example's chain, two steps each on the small data, from a working directory of its own
# with the data root (${GENESIS_DATA}) holding that data: recipes/sft_repeat_cpu.toml trains the
# base, exported where recipes/lora_reverse_cpu.toml takes it from; the LoRA run trains its
# 155,648 adapter parameters and scores exact match, in training and in genesis eval.
mkdir -p "$work/example"
exe=$(realpath "$genesis") recipes=$(realpath "$src/recipes")
example() {  # example RECIPE: 2 steps in $work/example
  (cd "$work/example" && GENESIS_DATA="$work/data" "$exe" train "$recipes/$1" --set training.steps=2 \
    --set scheduler.warmup_steps=1 --set eval.exact_match=2 --set "data.cache_dir=$work/cache" -q >/dev/null \
    2>"$work/example.err") || cat "$work/example.err"
}
example sft_repeat_cpu.toml && (cd "$work/example" && "$exe" convert runs/sft_repeat_cpu runs/sft_repeat_cpu_hf --to hf -q \
  >/dev/null) && example lora_reverse_cpu.toml
python3 - "$work/example/runs/lora_reverse_cpu" <<'PY' && ok "the CPU LoRA example's recipes chain: base, export, adapters" \
  || fail "the CPU LoRA example (recipes/sft_repeat_cpu.toml, lora_reverse_cpu.toml) did not run through"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["trainable_parameters"] == 155648 and s["final_step"] == 2, s
evals = [json.loads(line)["eval"] for line in open(sys.argv[1] + "/metrics.jsonl") if '"eval"' in line]
assert evals and "exact_match" in evals[-1], evals
PY
# genesis eval of it: its recipe's validation data is data.val_path (no val_fraction).
(cd "$work/example" && "$exe" eval --checkpoint runs/lora_reverse_cpu --set eval.exact_match=2 -q >"$work/example.json" \
  2>"$work/example.err")
check "eval --checkpoint of the example's LoRA run (data.val_path)" 0 $?
grep -q '"exact_match"' "$work/example.json" && ok "it scores exact match" || fail "eval printed $(cat "$work/example.json" "$work/example.err")"

finish "lora_cli"
