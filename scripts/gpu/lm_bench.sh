#!/usr/bin/env bash
# On the GPU host, in the repository root: the training step of the language-model recipes,
# genesis (`genesis bench train`, each autocast dtype asked for) next to PyTorch eager and
# torch.compile bf16 of the same model (scripts/bench/torch_train_lm.py), all in one call, with
# `genesis bench compare` ratios; a short `genesis train` run of each confirms the trainer's
# own throughput; then optional f32-vs-bf16 loss curves of gpt2_124m and their plot. Needs a
# bundle (scripts/gpu/bundle.sh) and the LM data (gpt2/ and shards/ under $GENESIS_DATA;
# bundle_env.sh).
#   scripts/gpu/lm_bench.sh BUNDLE.tar.xz
#   MODELS="gpt2_124m qwen2_0.5b"  DTYPES="bf16"  STEPS=30 (timed steps; 5 warm-up)
#   CURVE_STEPS=200 (0 skips the loss curves)  TORCH_COMPILE=0 skips the torch.compile runs
#   TRAIN_STEPS=60 (the genesis train confirmation run; 0 skips it)
# $OUT receives lm_bench.txt (the table), the plot, and lm_bench.tgz (every log and JSON).
set -uo pipefail
archive=${1:?bundle archive}
final_out=${OUT:-/tmp/genesis-lm-bench}
mkdir -p "$final_out"
out=$(mktemp -d)
source "$(dirname "$0")/bundle_env.sh" "$archive"
steps=${STEPS:-30}
table="$out/lm_bench.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$table"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$table"

# One line per result file: tokens/s, ms per step and its phases, MFU, peak memory.
row() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["cases"][0]
p = c.get("phases", {})
print(f"{r['tool'][:44]:44s} {c['tokens_per_s']:>9.0f} tok/s {c['median_ms']:7.2f} ms "
      f"(fwd {p.get('forward_ms', 0):6.2f} bwd {p.get('backward_ms', 0):6.2f} opt {p.get('optimizer_ms', 0):5.2f})"
      f"  MFU {100 * c.get('mfu', 0):4.1f}%  peak {c['peak_memory_gib']:6.2f} GiB")
PY
}

for model in ${MODELS:-gpt2_124m qwen2_0.5b}; do
  case $model in
    # PyTorch's GPT-2 at its fastest: the vocabulary padded to 50304 as nanoGPT pads it.
    gpt2_124m) torch_model="gpt2 --vocab 50304"; batch=16 ;;
    qwen2_0.5b) torch_model=qwen2_0.5b; batch=8 ;;
  esac
  echo "== $model" | tee -a "$table"
  for dt in ${DTYPES:-bf16}; do
    "$genesis" bench train "recipes/$model.toml" --set amp.dtype="$dt" --steps "$steps" --warmup 5 \
      --json "$out/genesis_${model}_$dt.json" > "$out/genesis_${model}_$dt.txt" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then row "$out/genesis_${model}_$dt.json" | tee -a "$table"
    else echo "genesis bench train $model $dt: rc=$rc $(tail -1 "$out/genesis_${model}_$dt.txt")" | tee -a "$table"; fi
  done
  modes="eager"; [ "${TORCH_COMPILE:-1}" = "1" ] && modes="eager compile"
  for mode in $modes; do
    flag=""; [ "$mode" = compile ] && flag="--compile"
    PYTHONUNBUFFERED=1 python3 scripts/bench/torch_train_lm.py --model $torch_model --batch $batch --seq 1024 \
      --dtype bf16 --steps "$steps" $flag --case-name "$model" --json "$out/torch_${model}_$mode.json" \
      > "$out/torch_${model}_$mode.out" 2> "$out/torch_${model}_$mode.err"
    rc=$?
    if [ $rc -eq 0 ]; then row "$out/torch_${model}_$mode.json" | tee -a "$table"
    else echo "pytorch $mode $model: rc=$rc $(tail -1 "$out/torch_${model}_$mode.err")" | tee -a "$table"; fi
    [ -f "$out/genesis_${model}_bf16.json" ] && [ -f "$out/torch_${model}_$mode.json" ] &&
      "$genesis" bench compare "$out/genesis_${model}_bf16.json" "$out/torch_${model}_$mode.json" | tail -1 |
      sed "s/^/  vs pytorch $mode: /" | tee -a "$table"
  done
  train_steps=${TRAIN_STEPS:-60}
  if [ "$train_steps" -gt 0 ]; then
    run=/tmp/runs/${model}_bf16
    "$genesis" train "recipes/$model.toml" --set amp.dtype=bf16 --set training.steps="$train_steps" \
      --set training.eval_every=0 --set training.checkpoint_every=0 --set training.log_every=10 \
      --set scheduler.warmup_steps=10 --out "$run" --overwrite -q > /dev/null 2> "$out/train_${model}.err"
    python3 - "$run" "$model" <<'PY' | tee -a "$table"
import json, statistics, sys
run, model = sys.argv[1], sys.argv[2]
rates = [j["tokens_per_s"] for j in map(json.loads, open(run + "/metrics.jsonl")) if "tokens_per_s" in j][1:]
s = json.load(open(run + "/summary.json"))
print(f"  genesis train {model} bf16: {statistics.median(rates):.0f} tok/s (median of logged windows), "
      f"peak {s['peak_memory_bytes'] / 2**30:.2f} GiB")
PY
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
