#!/usr/bin/env bash
# On the GPU host, in the repository root: the packed supervised fine-tuning step against a
# plain pretraining step of the same shape, and against torch.compile with FlexAttention
# document masking on the same packing, all in one call. recipes/qwen2_0.5b.toml (bf16
# autocast, fused AdamW) at seq 2048:
#   genesis plain          genesis bench train
#   genesis packed         genesis bench train --packed MIN:MAX (doc_start, positions restart)
#   torch.compile plain    scripts/bench/torch_train_lm.py --compile (transformers, sdpa)
#   torch.compile packed   ... --packed MIN:MAX (transformers' flex_attention under a BlockMask of a
#                          causal same-document mask_mod, built inside every timed step)
# The bars (issue): genesis packed >= 0.95x genesis plain, and >= 1.1x torch.compile packed.
# Needs a bundle (scripts/gpu/bundle.sh); no data (the tokens are synthetic).
#   scripts/gpu/sft_bench.sh BUNDLE.tar.xz
#   BATCH=4 SEQ=2048 PACKED=64:2048 STEPS=30 (timed steps; 5 warm-up)
#   MASK_OUTSIDE=1 also times torch.compile packed with its block masks built before the timed
#     steps (0 skips);  FLEX_DIRECT=1 also times flex_attention called directly with its native
#     GQA instead of transformers' K/V-repeating call (0 skips)
# $OUT receives sft_bench.txt (the table), sft_bench.json (every result and the ratios) and
# sft_bench.tgz (every log and result file).
set -uo pipefail
archive=${1:?bundle archive}
final_out=${OUT:-/tmp/genesis-sft-bench}
mkdir -p "$final_out"
out=$(mktemp -d)
source "$(dirname "$0")/bundle_env.sh" "$archive"
batch=${BATCH:-4}
seq=${SEQ:-2048}
packed=${PACKED:-64:2048}
steps=${STEPS:-30}
table="$out/sft_bench.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$table"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$table"
echo "qwen2_0.5b bf16, batch $batch x $seq, packed documents of $packed tokens, $steps timed steps" | tee -a "$table"

# genesis: NAME [ARGS...] -> $out/NAME.json, its log beside it.
genesis_run() {
  local name=$1
  shift
  "$genesis" bench train recipes/qwen2_0.5b.toml --set data.seq_len="$seq" --set training.batch_size="$batch" \
    --set amp.dtype=bf16 --steps "$steps" --warmup 5 -q "$@" --json "$out/$name.json" > "$out/$name.txt" 2>&1 \
    || echo "$name: rc=$? $(tail -1 "$out/$name.txt")" | tee -a "$table"
}
# torch.compile: NAME [ARGS...] -> $out/NAME.json, stdout and stderr beside it.
torch_run() {
  local name=$1
  shift
  PYTHONUNBUFFERED=1 python3 scripts/bench/torch_train_lm.py --model qwen2_0.5b --batch "$batch" --seq "$seq" \
    --dtype bf16 --steps "$steps" --warmup 5 --compile --case-name qwen2_0.5b "$@" --json "$out/$name.json" \
    > "$out/$name.out" 2> "$out/$name.err" || echo "$name: rc=$? $(tail -1 "$out/$name.err")" | tee -a "$table"
}

genesis_run genesis_plain
genesis_run genesis_packed --packed "$packed"
torch_run torch_compile_plain
torch_run torch_compile_packed --packed "$packed"
[ "${MASK_OUTSIDE:-1}" = 1 ] && torch_run torch_compile_packed_mask_outside --packed "$packed" --mask-outside
[ "${FLEX_DIRECT:-1}" = 1 ] && torch_run torch_compile_packed_flex_direct --packed "$packed" --flex direct

python3 - "$out" <<'PY' | tee -a "$table"
import json, os, sys
out = sys.argv[1]
runs = ["genesis_plain", "genesis_packed", "torch_compile_plain", "torch_compile_packed",
        "torch_compile_packed_mask_outside", "torch_compile_packed_flex_direct"]
results = {}
for run in runs:
    path = f"{out}/{run}.json"
    if os.path.exists(path):
        results[run] = json.load(open(path))
print(f"{'run':34s} {'tokens/s':>10s} {'ms/step':>8s} {'peak GiB':>9s} {'docs/row':>8s}  tool")
for run, r in results.items():
    c = r["cases"][0]
    docs = (c.get("packing") or {}).get("mean_docs_per_row", 1.0)
    extra = "" if not c.get("graphs_compiled_while_timed") else f"  ({c['graphs_compiled_while_timed']} recompiles while timed!)"
    print(f"{run:34s} {c['tokens_per_s']:10.0f} {c['median_ms']:8.2f} {c['peak_memory_gib']:9.2f} {docs:8.2f}  "
          f"{r['tool']}{extra}")
rate = lambda run: results[run]["cases"][0]["tokens_per_s"] if run in results else None
ratios = {}
for label, a, b, bar in (("genesis packed / genesis plain", "genesis_packed", "genesis_plain", 0.95),
                         ("genesis packed / torch.compile packed", "genesis_packed", "torch_compile_packed", 1.1),
                         ("genesis packed / torch.compile packed, mask untimed", "genesis_packed",
                          "torch_compile_packed_mask_outside", None),
                         ("genesis plain / torch.compile plain", "genesis_plain", "torch_compile_plain", None),
                         ("torch.compile packed / torch.compile plain", "torch_compile_packed",
                          "torch_compile_plain", None)):
    if rate(a) and rate(b):
        ratios[label] = rate(a) / rate(b)
        verdict = "" if bar is None else ("  (bar >= %.2fx: %s)" % (bar, "met" if ratios[label] >= bar else "NOT met"))
        print(f"{label:52s} {ratios[label]:.3f}x{verdict}")
json.dump({"schema": "genesis.sft_bench/1", "results": results, "ratios": ratios},
          open(f"{out}/sft_bench.json", "w"), indent=2)
PY

cp "$table" "$out/sft_bench.json" "$final_out/"
tar -czf "$final_out/sft_bench.tgz" -C "$out" .
