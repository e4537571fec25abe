#!/usr/bin/env bash
# On the GPU host, in the repository root: 200 bf16 steps of recipes/gpt2_124m.toml in genesis and
# in PyTorch eager from one initialization (transformers' GPT-2, written by
# scripts/reference/torch_lm_curve.py and loaded through model.init_from) on the same windows
# (data.shuffle = false), the logged losses compared (issue bar: within 1%).
#   scripts/gpu/curve_vs_torch.sh BUNDLE.tar.xz        STEPS=200 TOLERANCE=0.01
# Needs gpt2/ and shards/ under $GENESIS_DATA (bundle_env.sh); $OUT receives both curves and the logs.
set -uo pipefail
archive=${1:?bundle archive}
out=${OUT:-/tmp/genesis-curve}; mkdir -p "$out"
source "$(dirname "$0")/bundle_env.sh" "$archive"
steps=${STEPS:-200}
work=$(mktemp -d)
python3 scripts/reference/torch_lm_curve.py init "$work/init" > "$out/init.txt" 2>&1 || { cat "$out/init.txt"; exit 1; }
"$genesis" train recipes/gpt2_124m.toml --set model.init_from="$work/init" --set data.shuffle=false \
  --set training.steps="$steps" --set training.eval_every=100000 --set training.checkpoint_every=100000 \
  --out "$work/run" --overwrite -q > "$out/genesis.txt" 2>&1 || { tail -5 "$out/genesis.txt"; exit 1; }
cp "$work/run/metrics.jsonl" "$out/genesis_metrics.jsonl"
python3 scripts/reference/torch_lm_curve.py train "$work/init" "$GENESIS_DATA/shards/sotu_mobydick_gpt2/train.bin" \
  --steps "$steps" --json "$out/torch_curve.json" > "$out/torch.txt" 2>&1 || { tail -5 "$out/torch.txt"; exit 1; }
python3 scripts/reference/torch_lm_curve.py compare "$out/torch_curve.json" "$out/genesis_metrics.jsonl" \
  --tolerance "${TOLERANCE:-0.01}" | tee "$out/curve_vs_torch.txt"
