#!/usr/bin/env bash
# On the GPU host, in the repository root: the LoRA training step of genesis against PyTorch +
# PEFT (eager and torch.compile) on the same shape in one call. LoRA r16, alpha 32, on q, k, v,
# o, gate, up, down; the base frozen in bf16; AdamW on the adapters; bf16 autocast; B4 T2048
# (TARGETS.md's setup). genesis: `genesis bench train --lora 16` on recipes/qwen2_0.5b.toml
# reshaped by --set; PyTorch: scripts/bench/torch_train_lm.py --lora 16.
# The bars (issue 33): >= 1.3x PEFT + torch.compile's tokens/s at <= 0.8x its peak memory.
#   scripts/gpu/lora_bench.sh BUNDLE.tar.xz
#   SHAPES="qwen2.5_1.5b llama3_8b"  BATCH=4 SEQ=2048 STEPS=20 (timed; 5 warm-up)  EAGER=1 (also PEFT eager)
#   QUANT=nf4: QLoRA, the base's block linears in NF4 (PyTorch: bitsandbytes' Linear4bit, where installed)
#   CKPT=full: activation checkpointing of every block (PyTorch: gradient_checkpointing_enable)
# $OUT receives lora_bench.txt (the table) and lora_bench.json.
set -uo pipefail
archive=${1:?bundle archive}
final_out=${OUT:-/tmp/genesis-lora-bench}
mkdir -p "$final_out"
out=$(mktemp -d)
source "$(dirname "$0")/bundle_env.sh" "$archive"
batch=${BATCH:-4}
seq=${SEQ:-2048}
steps=${STEPS:-20}
table="$out/lora_bench.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$table"
python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' | tee -a "$table"
echo "LoRA r16 alpha 32 on all linear layers, ${QUANT:-bf16} base, checkpointing ${CKPT:-none}," \
  "batch $batch x $seq, $steps timed steps" | tee -a "$table"
genesis_extra=() torch_extra=()
if [ "${QUANT:-}" = nf4 ]; then
  genesis_extra+=(--base-quant nf4)
  if python3 -c 'import bitsandbytes' 2>/dev/null; then torch_extra+=(--qlora)
  else echo "bitsandbytes is not installed: PyTorch runs with a bf16 base" | tee -a "$table"; fi
fi
if [ -n "${CKPT:-}" ]; then
  genesis_extra+=(--set "training.activation_checkpointing=$CKPT")
  torch_extra+=(--grad-ckpt)
fi

shape_args() {
  case $1 in
    qwen2.5_1.5b) echo "--set model.hidden_size=1536 --set model.intermediate_size=8960 --set model.num_hidden_layers=28
      --set model.num_attention_heads=12 --set model.num_key_value_heads=2" ;;
    llama3_8b) echo "--set model.name=llama --set model.vocab_size=128256 --set model.hidden_size=4096
      --set model.intermediate_size=14336 --set model.num_hidden_layers=32 --set model.num_attention_heads=32
      --set model.num_key_value_heads=8 --set model.rope_theta=500000.0 --set model.rms_norm_eps=1e-5
      --set model.max_position_embeddings=8192 --set model.tie_word_embeddings=false" ;;
  esac
}
for shape in ${SHAPES:-qwen2.5_1.5b llama3_8b}; do
  # shellcheck disable=SC2046
  "$genesis" bench train recipes/qwen2_0.5b.toml $(shape_args "$shape") --set run.name="$shape" \
    --set data.seq_len="$seq" --set training.batch_size="$batch" --set amp.dtype=bf16 --lora 16 \
    "${genesis_extra[@]}" --steps "$steps" --warmup 5 -q --json "$out/genesis_$shape.json" > "$out/genesis_$shape.txt" 2>&1 \
    || echo "genesis $shape: rc=$? $(tail -1 "$out/genesis_$shape.txt")" | tee -a "$table"
  for mode in compile eager; do
    [ "$mode" = eager ] && [ "${EAGER:-1}" != 1 ] && continue
    flag=$([ "$mode" = compile ] && echo --compile)
    PYTHONUNBUFFERED=1 python3 scripts/bench/torch_train_lm.py --model "$shape" --batch "$batch" --seq "$seq" \
      --dtype bf16 --steps "$steps" --warmup 5 $flag --lora 16 "${torch_extra[@]}" --case-name "$shape" --json "$out/torch_${mode}_$shape.json" \
      > "$out/torch_${mode}_$shape.out" 2> "$out/torch_${mode}_$shape.err" \
      || echo "torch $mode $shape: rc=$? $(tail -1 "$out/torch_${mode}_$shape.err")" | tee -a "$table"
  done
done

python3 - "$out" <<'PY' | tee -a "$table"
import json, os, sys
out = sys.argv[1]
results = {f[:-5]: json.load(open(f"{out}/{f}")) for f in sorted(os.listdir(out)) if f.endswith(".json")}
print(f"{'run':34s} {'tokens/s':>10s} {'ms/step':>8s} {'peak GiB':>9s}  tool")
for run, r in results.items():
    c = r["cases"][0]
    print(f"{run:34s} {c['tokens_per_s']:10.0f} {c['median_ms']:8.2f} {c['peak_memory_gib']:9.2f}  {r['tool']}")
ratios = {}
for shape in ("qwen2.5_1.5b", "llama3_8b"):
    g, t = results.get(f"genesis_{shape}"), results.get(f"torch_compile_{shape}")
    if g and t:
        gc, tc = g["cases"][0], t["cases"][0]
        speed, memory = gc["tokens_per_s"] / tc["tokens_per_s"], gc["peak_memory_gib"] / tc["peak_memory_gib"]
        ratios[shape] = {"speed": speed, "memory": memory}
        print(f"{shape}: genesis / PEFT + torch.compile {speed:.3f}x tokens/s (bar >= 1.3x: "
              f"{'met' if speed >= 1.3 else 'NOT met'}), {memory:.3f}x peak memory (bar <= 0.8x: "
              f"{'met' if memory <= 0.8 else 'NOT met'})")
json.dump({"schema": "genesis.lora_bench/1", "results": results, "ratios": ratios},
          open(f"{out}/lora_bench.json", "w"), indent=2)
PY
cp "$table" "$out/lora_bench.json" "$final_out/"
tar -czf "$final_out/lora_bench.tgz" -C "$out" .
