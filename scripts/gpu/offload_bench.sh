#!/usr/bin/env bash
# On the GPU host, in the repository root: a full fine-tune step of the Llama-3-8B shape (f32
# weights, bf16 autocast, AdamW) with the optimizer state on the device and with
# dist.offload_optimizer (state and update on the host), through `genesis bench train`; prints
# tokens/s, the step's phases, the device's peak and the process's peak host memory of each.
#   scripts/gpu/offload_bench.sh BUNDLE.tar.xz
#   BATCH=4 SEQ=2048 CKPT=full STEPS=3 WARMUP=1  MODES="offload device" (which runs, in order)
#   SHAPE=llama3_8b (default) or qwen2.5_0.5b
# $OUT receives offload_bench.txt and one JSON per run.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh" "${1:?bundle archive}"
out=${OUT:-/tmp/genesis-offload-bench}
mkdir -p "$out"
batch=${BATCH:-4} seq=${SEQ:-2048} ckpt=${CKPT:-full}
case ${SHAPE:-llama3_8b} in
  llama3_8b) shape=(--set model.name=llama --set model.vocab_size=128256 --set model.hidden_size=4096
      --set model.intermediate_size=14336 --set model.num_hidden_layers=32 --set model.num_attention_heads=32
      --set model.num_key_value_heads=8 --set model.rope_theta=500000.0 --set model.rms_norm_eps=1e-5
      --set model.max_position_embeddings=8192 --set model.tie_word_embeddings=false) ;;
  qwen2.5_0.5b) shape=() ;;  # recipes/qwen2_0.5b.toml's own
  *) echo "offload_bench: unknown SHAPE ${SHAPE}" >&2; exit 2 ;;
esac
table="$out/offload_bench.txt"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "host: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 2^20}' /proc/meminfo)"
  echo "${SHAPE:-llama3_8b}, full fine-tune, AdamW, bf16 autocast, batch $batch x $seq, checkpointing $ckpt"
} | tee "$table"
for mode in ${MODES:-offload device}; do
  offload=$([ "$mode" = offload ] && echo true || echo false)
  # /usr/bin/time -v gives the process's peak resident host memory, where installed.
  timer=()
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -v -o "$out/$mode.time")
  "${timer[@]}" "$genesis" bench train recipes/qwen2_0.5b.toml "${shape[@]}" --set run.name="$mode" \
    --set data.seq_len="$seq" --set training.batch_size="$batch" --set amp.dtype=bf16 \
    --set training.activation_checkpointing="$ckpt" --set dist.offload_optimizer="$offload" \
    --steps "${STEPS:-3}" --warmup "${WARMUP:-1}" -q --json "$out/$mode.json" >"$out/$mode.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "$mode: rc=$rc $(tail -n 2 "$out/$mode.txt")" | tee -a "$table"
    continue
  fi
  python3 - "$out/$mode.json" "$mode" "$out/$mode.time" <<'PY' | tee -a "$table"
import json, os, re, sys
case = json.load(open(sys.argv[1]))["cases"][0]
host = ""
if os.path.exists(sys.argv[3]):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[3]).read())
    host = f", host peak {int(m.group(1)) / 2**20:.1f} GiB" if m else ""
phases = ", ".join(f"{k[:-3]} {v:.0f}" for k, v in case["phases"].items())
print(f"{sys.argv[2]:>8}: {case['tokens_per_s']:,.0f} tok/s, {case['median_ms']:.0f} ms/step ({phases} ms), "
      f"device peak {case['peak_memory_gib']:.2f} GiB{host}")
PY
done
