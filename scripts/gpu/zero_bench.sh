#!/usr/bin/env bash
# On the GPU host, in the repository root: one decoder-LM training recipe under DDP and ZeRO-1/2/3
# (and ZeRO-3 with selective checkpointing) through `genesis train --nproc-per-node N`; prints
# tokens/s per GPU and the peak memory per rank of each, and the losses against DDP's.
# The model is a Llama of the shape given (defaults: hidden 1024, 8 layers) on the repository's
# own docs tokenized with the test fixture's BPE, so nothing is downloaded.
#   scripts/gpu/zero_bench.sh BUNDLE.tar.xz [NPROC]
#   HIDDEN=1024 LAYERS=8 INTER=2816 HEADS=16 KV=HEADS VOCAB=703 SEQ=512 BATCH=8 STEPS=40 (per-GPU batch)
#   LEVELS="0 1 2 3 3sel" (which runs; 3sel: ZeRO-3 with selective checkpointing; 3bf: ZeRO-3
#   with bf16 parameter gathers, dist.param_dtype)
#   SHAPE=llama3_8b: Llama-3-8B's dimensions, B2 T2048 per GPU, LEVELS="3sel", and PyTorch FSDP2 +
#   torch.compile of the same shape in the same call (scripts/bench/torch_fsdp.py; TORCH_AC=full
#   or none), as issue 34's multi-GPU bar compares them
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh" "${1:?bundle archive}"
nproc=${2:-1}
if [ "${SHAPE:-}" = llama3_8b ]; then
  HIDDEN=4096 LAYERS=32 INTER=14336 HEADS=32 KV=8 VOCAB=128256 SEQ=${SEQ:-2048} BATCH=${BATCH:-2}
  LEVELS=${LEVELS:-3sel} STEPS=${STEPS:-20}
fi
out=${OUT:-/tmp/genesis-zero-out}
mkdir -p "$out"
work=$(mktemp -d)
cat >"$work/zero.toml" <<TOML
[run]
name = "zero_bench"
seed = 1
device = "cuda"
[model]
name = "llama"
vocab_size = ${VOCAB:-703}
hidden_size = ${HIDDEN:-1024}
intermediate_size = ${INTER:-2816}
num_hidden_layers = ${LAYERS:-8}
num_attention_heads = ${HEADS:-16}
num_key_value_heads = ${KV:-${HEADS:-16}}
max_position_embeddings = ${SEQ:-512}
$(docs_token_data "$work/shards" ${SEQ:-512})
[optimizer]
name = "adamw"
lr = 3e-4
[training]
steps = ${STEPS:-40}
batch_size = ${BATCH:-8}
log_every = 1
eval_every = 0
checkpoint_every = -1
[eval]
split = "val"
[amp]
dtype = "bf16"
TOML
run() {
  local name=$1
  shift
  if ! "$genesis" train "$work/zero.toml" --out "$work/$name" --nproc-per-node "$nproc" -q "$@" >/dev/null \
    2>"$out/$name.err"; then
    echo "$name: failed: $(tail -n 1 "$out/$name.err")"
    # A run that trained and then failed (no checkpoint is written: checkpoint_every = -1, as the
    # 8B shape's is 96 GB; but the final evaluation, say): its per-step rates are in metrics.jsonl
    # (global tokens/s; the first two steps left out).
    [ -f "$work/$name/metrics.jsonl" ] && cp "$work/$name/metrics.jsonl" "$out/$name.metrics.jsonl" \
      && python3 - "$out/$name.metrics.jsonl" "$name" "$nproc" <<'PY'
import json, statistics, sys
rates = [j["tokens_per_s"] for j in map(json.loads, open(sys.argv[1])) if "tokens_per_s" in j][2:]
if rates:
    print(f"{sys.argv[2]:>10}: {statistics.median(rates) / int(sys.argv[3]):>9.0f} tok/s per GPU "
          f"(median of {len(rates)} logged steps, from metrics.jsonl; no peak: the run did not finish)")
PY
    return
  fi
  cp "$work/$name/summary.json" "$out/$name.summary.json"
  cp "$work/$name/metrics.jsonl" "$out/$name.metrics.jsonl"
  python3 - "$work/$name/summary.json" "$name" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
peak = max(s.get("peak_memory_bytes_per_rank", [s["peak_memory_bytes"]])) / 2**30
print(f"{sys.argv[2]:>10}: {s['tokens_per_s'] / s['world_size']:>9.0f} tok/s per GPU, peak {peak:.2f} GiB per rank")
PY
}
echo "zero_bench: $nproc GPU(s), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
for level in ${LEVELS:-0 1 2 3 3sel}; do
  case $level in
    0) run ddp --set dist.zero=0 ;;
    3sel) run zero3sel --set dist.zero=3 --set training.activation_checkpointing=selective ;;
    3bf) run zero3bf --set dist.zero=3 --set dist.param_dtype=bf16 ;;
    *) run "zero$level" --set dist.zero="$level" ;;
  esac
done
if [ "${SHAPE:-}" = llama3_8b ]; then
  torchrun --standalone --nproc-per-node "$nproc" scripts/bench/torch_fsdp.py --model llama3_8b --batch "$BATCH" \
    --seq "$SEQ" --compile --ac "${TORCH_AC:-full}" 2>"$out/fsdp.err" | tee "$out/fsdp.json" \
    || { echo "FSDP2: failed"; tail -n 5 "$out/fsdp.err"; }
fi
python3 - "$out" <<'PY'
import json, sys
def losses(name):
    lines = (json.loads(l) for l in open(f"{sys.argv[1]}/{name}.metrics.jsonl"))
    return [j["loss"] for j in lines if "loss" in j and "step" in j]
try:
    base = losses("ddp")
except OSError:
    sys.exit(0)  # no DDP run to compare with
for name in ("zero1", "zero2", "zero3", "zero3sel", "zero3bf"):
    try:
        other = losses(name)
    except OSError:
        continue
    d = max(abs(a - b) / abs(b) for a, b in zip(other, base))
    print(f"{name}: {len(other)} losses, max relative difference from DDP {d:.2e}")
PY
