#!/usr/bin/env bash
# On a GPU host with two or more GPUs, in the repository root: supervised fine-tuning and LoRA
# under data parallel over NCCL, checked in one call. The task is recipes/sft_reverse_cpu.toml's
# (data/make_sft.py makes its conversations and byte tokenizer here), run on CUDA in f32:
#   - a base: the recipe trained for BASE_STEPS on one GPU, exported with `genesis convert --to hf`;
#   - from that base (model.init_from), full SFT and LoRA (r 8 on every linear layer), each on
#     1 GPU x 16 rows and on 2 GPUs x 8 rows: the per-step losses of the two must agree (the step
#     divides by the targets all ranks count, so unequal assistant lengths per rank still give
#     the one-GPU gradient), and the LoRA run's frozen base gets no gradient collective;
#   - QLoRA (lora.base_quant = "nf4") on 2 GPUs against QLoRA on 1;
#   - PEFT reads genesis's adapter: the LoRA run exported with `genesis convert --to peft` and
#     `--to hf --merge`; PEFT's PeftModel on the base gives the merged model's logits (f32), and its
#     greedy continuation is `genesis generate --adapter`'s.
#   scripts/gpu/finetune_dist.sh BUNDLE.tar.xz
#   STEPS=60  BASE_STEPS=300
# $OUT receives finetune_dist.txt (the report) and finetune_dist.tgz (logs, metrics, summaries).
set -uo pipefail
archive=${1:?bundle archive}
final_out=${OUT:-/tmp/genesis-finetune-dist}
mkdir -p "$final_out"
out=$(mktemp -d)
source "$(dirname "$0")/bundle_env.sh" "$archive"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
steps=${STEPS:-60}
report="$final_out/finetune_dist.txt"
recipe=recipes/sft_reverse_cpu.toml
finish() { tar -C "$out" -czf "$final_out/finetune_dist.tgz" --exclude='*.safetensors' . 2>/dev/null; }
trap finish EXIT
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "git $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%F)"
} | tee "$report"

bash data/fetch.sh sft > "$out/fetch.log" 2>&1 || { echo "data/fetch.sh sft failed" | tee -a "$report"; exit 1; }
# run NAME GPUS(CUDA_VISIBLE_DEVICES) [genesis train arguments...]
run() {
  local name=$1 visible=$2
  shift 2
  local t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$visible timeout 300 "$genesis" train "$recipe" --out "$out/$name" --overwrite \
    --set run.device=cuda --set training.log_every=1 --set training.eval_every=0 --set training.checkpoint_every=0 \
    -q "$@" > /dev/null 2> "$out/$name.err"
  local rc=$?
  echo "run $name: rc=$rc, $((SECONDS - t0)) s$( [ $rc -ne 0 ] && echo "; $(tail -n 2 "$out/$name.err" | tr '\n' ' ')")" | tee -a "$report"
}

run base 0 --set training.steps="${BASE_STEPS:-300}"
"$genesis" convert "$out/base" "$out/base_hf" --to hf > "$out/convert.log" 2>&1 ||
  { echo "convert to hf failed: $(tail -n 1 "$out/convert.log")" | tee -a "$report"; exit 1; }

tune=(--set model.init_from="$out/base_hf" --set training.steps="$steps" --set scheduler.warmup_steps=5
  --set optimizer.lr=5e-4)
lora=(--set lora.r=8 --set lora.alpha=16.0 --set optimizer.lr=2e-3)
run sft_one16 0 "${tune[@]}" --set training.batch_size=16
run sft_ddp2 0,1 "${tune[@]}" --set training.batch_size=8 --nproc-per-node 2
run lora_one16 0 "${tune[@]}" "${lora[@]}" --set training.batch_size=16
run lora_ddp2 0,1 "${tune[@]}" "${lora[@]}" --set training.batch_size=8 --nproc-per-node 2
run qlora_one16 0 "${tune[@]}" "${lora[@]}" --set lora.base_quant=nf4 --set training.batch_size=16
run qlora_ddp2 0,1 "${tune[@]}" "${lora[@]}" --set lora.base_quant=nf4 --set training.batch_size=8 --nproc-per-node 2

"$genesis" convert "$out/lora_one16" "$out/adapter" --to peft > "$out/convert_peft.log" 2>&1 &&
  "$genesis" convert "$out/lora_one16" "$out/merged" --to hf --merge > "$out/convert_merge.log" 2>&1 ||
  echo "convert of the LoRA run failed: $(tail -n 1 "$out"/convert_*.log)" | tee -a "$report"
prompt="1 2 3 4 5 6 7 8 9 10 11 12"
CUDA_VISIBLE_DEVICES=0 "$genesis" generate --model "$out/base_hf" --adapter "$out/adapter" --prompt-ids "$prompt" \
  --temperature 0 --max-new-tokens 24 --ids --dtype f32 --device cuda -q > "$out/genesis_ids.txt" 2> "$out/generate.err"
CUDA_VISIBLE_DEVICES=0 python3 - "$out" "$prompt" <<'PY' 2>&1 | tail -n 4 | tee -a "$report"
import sys, torch, transformers, peft
out, prompt = sys.argv[1], [int(t) for t in sys.argv[2].split()]
torch.backends.cuda.matmul.allow_tf32 = False
base = transformers.AutoModelForCausalLM.from_pretrained(f"{out}/base_hf", torch_dtype=torch.float32).cuda().eval()
model = peft.PeftModel.from_pretrained(base, f"{out}/adapter").eval()
merged = transformers.AutoModelForCausalLM.from_pretrained(f"{out}/merged", torch_dtype=torch.float32).cuda().eval()
ids = torch.randint(3, 259, (2, 64), generator=torch.Generator().manual_seed(0)).cuda()
with torch.no_grad():
    a, b = model(ids).logits, merged(ids).logits
    with model.disable_adapter():
        plain = model(ids).logits
    greedy = model.generate(torch.tensor([prompt]).cuda(), max_new_tokens=24, do_sample=False)[0, len(prompt):]
ours = [int(t) for t in open(f"{out}/genesis_ids.txt").read().split()]
print(f"peft: PEFT on genesis's adapter vs genesis's merged model: max |logit difference| {(a - b).abs().max().item():.2e} "
      f"(the adapter moves the logits by {(a - plain).abs().max().item():.2e})")
print(f"peft: greedy continuation of PEFT {'equals' if greedy.tolist()[:len(ours)] == ours else 'DIFFERS from'} "
      f"genesis generate --adapter's ({len(ours)} tokens)")
PY

python3 - "$out" <<'PY' | tee -a "$report"
import json, os, sys
out = sys.argv[1]

def losses(name):
    path = os.path.join(out, name, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    rows = [json.loads(l) for l in open(path)]
    return {m["step"]: m["loss"] for m in rows if "loss" in m and "step" in m}

def summary(name):
    path = os.path.join(out, name, "summary.json")
    return json.load(open(path)) if os.path.exists(path) else {}

for kind in ("sft", "lora", "qlora"):
    a, b = losses(f"{kind}_ddp2"), losses(f"{kind}_one16")
    common = sorted(set(a) & set(b))
    if not common:
        print(f"{kind}: missing losses")
        continue
    worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in common)
    s1, s2 = summary(f"{kind}_one16"), summary(f"{kind}_ddp2")
    print(f"{kind}: 2 GPUs x 8 vs 1 GPU x 16: max relative loss difference {worst:.2e} over {len(common)} steps; "
          f"loss {b[common[0]]:.4f} -> {b[common[-1]]:.4f}; trainable parameters "
          f"{s1.get('trainable_parameters')} / {s2.get('trainable_parameters')}")
PY
