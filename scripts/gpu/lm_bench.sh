#!/usr/bin/env bash
# On the GPU host, in the repository root: language-model training throughput and peak memory
# of genesis (f32 and each autocast dtype asked for) next to PyTorch eager bf16 autocast of the
# same model (scripts/bench/torch_train_lm.py), in one call; then optional f32-vs-bf16 loss
# curves of gpt2_124m and their plot. Needs a bundle (scripts/gpu/bundle.sh) and the LM data
# (data/cache/gpt2 and data/cache/shards carried with the call).
#   scripts/gpu/lm_bench.sh BUNDLE.tar.xz
#   MODELS="gpt2_124m qwen2_0.5b"  DTYPES="f32 bf16"  STEPS=60 (per run; log every 10)
#   CURVE_STEPS=200 (0 skips the loss curves)  TORCH_COMPILE=1 adds torch.compile runs
# $OUT receives lm_bench.txt (the table), the plot, and lm_bench.tgz (every log and metrics.jsonl).
set -uo pipefail
archive=${1:?bundle archive}
final_out=${OUT:-/tmp/genesis-lm-bench}
mkdir -p "$final_out"
out=$(mktemp -d)
source "$(dirname "$0")/bundle_env.sh" "$archive"
steps=${STEPS:-60}
table="$out/lm_bench.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$table"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$table"

# Median tokens/s over the logged windows after the first (warm-up), and the peak memory.
summarize() {
  python3 - "$1" "$2" <<'PY'
import json, statistics, sys
run, label = sys.argv[1], sys.argv[2]
rates = [j["tokens_per_s"] for j in map(json.loads, open(run + "/metrics.jsonl")) if "tokens_per_s" in j][1:]
s = json.load(open(run + "/summary.json"))
print(f"{label:34s} {statistics.median(rates):>10.0f} tok/s  peak {s['peak_memory_bytes'] / 2**30:6.2f} GiB"
      f"  loss {s['train_loss']:.4f}")
PY
}

for model in ${MODELS:-gpt2_124m qwen2_0.5b}; do
  case $model in
    # PyTorch's GPT-2 at its fastest: the vocabulary padded to 50304 as nanoGPT pads it.
    gpt2_124m) torch_model="gpt2 --vocab 50304"; batch=16 ;;
    qwen2_0.5b) torch_model=qwen2_0.5b; batch=8 ;;
  esac
  for dt in ${DTYPES:-f32 bf16}; do
    run=/tmp/runs/${model}_$dt
    "$genesis" train "recipes/$model.toml" --set amp.dtype="$dt" --set training.steps="$steps" \
      --set training.eval_every=0 --set training.checkpoint_every=0 --set training.log_every=10 \
      --out "$run" --overwrite -q > /dev/null 2> "$out/${model}_$dt.err"
    rc=$?
    if [ $rc -eq 0 ]; then summarize "$run" "genesis $model $dt" | tee -a "$table"
    else echo "genesis $model $dt: rc=$rc $(tail -1 "$out/${model}_$dt.err")" | tee -a "$table"; fi
    cp "$run/metrics.jsonl" "$out/${model}_${dt}_metrics.jsonl" 2>/dev/null
  done
  PYTHONUNBUFFERED=1 python3 scripts/bench/torch_train_lm.py --model $torch_model --batch $batch --seq 1024 \
    --dtype bf16 > "$out/torch_${model}.json" 2> "$out/torch_${model}.err"
  echo "pytorch eager bf16 $model: $(cat "$out/torch_${model}.json") $(tail -1 "$out/torch_${model}.err")" | tee -a "$table"
  if [ "${TORCH_COMPILE:-0}" = "1" ]; then
    PYTHONUNBUFFERED=1 python3 scripts/bench/torch_train_lm.py --model $torch_model --batch $batch --seq 1024 \
      --dtype bf16 --compile > "$out/torch_${model}_compile.json" 2> "$out/torch_${model}_compile.err"
    echo "pytorch compile bf16 $model: $(cat "$out/torch_${model}_compile.json")" | tee -a "$table"
  fi
done

curve=${CURVE_STEPS:-200}
if [ "$curve" -gt 0 ]; then
  for dt in f32 bf16; do
    "$genesis" train recipes/gpt2_124m.toml --set amp.dtype=$dt --set training.steps="$curve" \
      --set training.eval_every=50 --set training.checkpoint_every=0 --set training.log_every=1 \
      --out /tmp/runs/curve_$dt --overwrite -q > /dev/null 2> "$out/curve_$dt.err"
    echo "curve $dt rc=$?" | tee -a "$table"
    cp /tmp/runs/curve_$dt/metrics.jsonl "$out/curve_${dt}_metrics.jsonl"
  done
  python3 - "$out" <<'PY' | tee -a "$table"
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
fig, ax = plt.subplots(figsize=(7, 4))
for dt, style in (("f32", "-"), ("bf16", "--")):
    rows = [json.loads(l) for l in open(f"{out}/curve_{dt}_metrics.jsonl")]
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r and "eval" not in r and "lr" in r]
    evals = [(r["step"], r["eval"]["loss"]) for r in rows if "eval" in r]
    ax.plot(*zip(*train), style, lw=1, label=f"train {dt}")
    if evals:
        ax.plot(*zip(*evals), "o" + style, label=f"val {dt}")
        print(f"curve {dt}: final train loss {train[-1][1]:.4f}, val " + ", ".join(f"{s}:{l:.4f}" for s, l in evals))
ax.set_xlabel("step"); ax.set_ylabel("loss (nats/token)"); ax.set_title("gpt2_124m: f32 vs bf16 autocast")
ax.legend(); ax.grid(alpha=0.3)
fig.tight_layout(); fig.savefig(f"{out}/gpt2_124m_bf16_vs_f32.png", dpi=120)
PY
fi

cp "$table" "$final_out/"
cp "$out"/*.png "$final_out/" 2>/dev/null
tar -czf "$final_out/lm_bench.tgz" -C "$out" .
