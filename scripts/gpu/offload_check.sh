#!/usr/bin/env bash
# On the GPU host, in the repository root: `genesis train` with dist.offload_optimizer against the
# same run with the state on the device, and a run resumed from its checkpoint with offload turned
# on against the uninterrupted offloaded one. A small Llama on the repository's docs, tokenized with the test fixture's
# BPE (nothing downloaded), bf16 autocast and gradient clipping. Every per-step loss must be equal
# (the host update rounds as the device's does), and the offloaded state must survive the
# checkpoint. Prints one line per check and exits 1 on a mismatch.
#   scripts/gpu/offload_check.sh BUNDLE.tar.xz      (OUT: where the runs' summaries go)
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh" "${1:?bundle archive}"
out=${OUT:-/tmp/genesis-offload-check}
mkdir -p "$out"
work=$(mktemp -d)
cat >"$work/offload.toml" <<TOML
[run]
name = "offload_check"
seed = 3
device = "cuda"
[model]
name = "llama"
vocab_size = 703
hidden_size = 256
intermediate_size = 688
num_hidden_layers = 4
num_attention_heads = 4
num_key_value_heads = 2
max_position_embeddings = 256
$(docs_token_data "$work/shards" 256)
[optimizer]
name = "adamw"
lr = 1e-3
weight_decay = 0.1
[training]
steps = 30
batch_size = 8
clip_grad_norm = 0.5
log_every = 1
eval_every = 0
checkpoint_every = 10
[eval]
split = "val"
[amp]
dtype = "bf16"
TOML
failed=0
train() {
  local name=$1
  shift
  "$genesis" train "$work/offload.toml" --out "$work/$name" -q "$@" >"$out/$name.log" 2>&1 \
    || { echo "FAIL: $name: rc=$? $(tail -n 2 "$out/$name.log")"; failed=1; }
  cp "$work/$name/summary.json" "$out/$name.summary.json" 2>/dev/null
}
# Losses of steps first..last of a run's metrics.
losses() {
  python3 -c '
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
print(" ".join(repr(r["loss"]) for r in rows if int(sys.argv[2]) <= r["step"] <= int(sys.argv[3])))
' "$work/$1/metrics.jsonl" "$2" "$3"
}
compare() {
  if [ "$2" = "$3" ] && [ -n "$2" ]; then echo "ok: $1 ($(wc -w <<<"$2") losses equal)"
  else echo "FAIL: $1"; echo "  $2"; echo "  $3"; failed=1; fi
}
train device --set dist.offload_optimizer=false
train offload --set dist.offload_optimizer=true
compare "offloaded update = device update, steps 1-30" "$(losses device 1 30)" "$(losses offload 1 30)"
python3 - "$out/offload.summary.json" "$out/device.summary.json" <<'PY' || failed=1
import json, sys
s, d = (json.load(open(p)) for p in sys.argv[1:3])
assert s["optimizer_offloaded"] is True and s["optimizer_state_bytes"] > 0, s
assert d["optimizer_offloaded"] is False, d
mib = lambda r: r["peak_memory_bytes"] / 2**20
print(f"ok: summary says offloaded; device peak {mib(s):.1f} MiB offloaded, {mib(d):.1f} MiB with the state on the device")
PY
# Steps 1-20 with the state on the device, then resumed with it offloaded (the checkpoint's state
# loaded into host memory).
train resumed --set dist.offload_optimizer=false --set training.steps=20
train resumed --set dist.offload_optimizer=true --resume
compare "run resumed at step 20 with offload turned on = uninterrupted offloaded run, steps 21-30" \
  "$(losses offload 21 30)" "$(losses resumed 21 30)"
exit $failed
