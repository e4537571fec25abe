#!/usr/bin/env bash
# On a GPU host with two or more GPUs, in the repository root: data-parallel training of
# recipes/gpt2_124m.toml (bf16, B16 T1024 per GPU) through `genesis train --nproc-per-node N`,
# checked and timed in one call:
#   - per-step losses of 2 ranks x 16 against 1 GPU x 32, and of ZeRO-1 against DDP;
#   - tokens/s on 1, 2 and (with more GPUs) all GPUs; `--nproc-per-node 1` (the nccl path with
#     one rank) against a plain run; the compute stream's wait on NCCL with and without bucket
#     overlap (dist.bucket_mb = 0); optimizer state and peak memory per rank;
#   - a 2-rank resume from a mid-run checkpoint against the uninterrupted run (bit-exact);
#   - a rank killed mid-run (torchrun-style environment, no launcher): the other exits non-zero
#     within dist.timeout_s naming it;
#   - PyTorch side by side: scripts/bench/torch_ddp.py (DDP + torch.compile + bf16) under torchrun
#     on the same GPU counts.
# Needs a bundle (scripts/gpu/bundle.sh) and the LM data under $GENESIS_DATA (gpt2/ and shards/; bundle_env.sh).
#   scripts/gpu/dist_bench.sh BUNDLE.tar.xz
#   STEPS=60 (steps per run)  TORCH=0 skips PyTorch  WIDE=N world size of the widest run (default: all GPUs)
#   CHANNELS="8 4" also runs 2 ranks with NCCL_MAX_NCHANNELS of each value
#   PARTS="train resume fault torch" (the default) picks the sections to run
#   FAULT_ROUNDS=N kills each rank N times (a hang can be a race)
# $OUT receives dist_bench.txt (the report) and dist_bench.tgz (every log, metrics and summary).
set -uo pipefail
archive=${1:?bundle archive}
final_out=${OUT:-/tmp/genesis-dist-bench}
mkdir -p "$final_out"
out=$(mktemp -d)
source "$(dirname "$0")/bundle_env.sh" "$archive"
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpus=$(nvidia-smi -L | wc -l)
wide=${WIDE:-$gpus}
steps=${STEPS:-60}
report="$final_out/dist_bench.txt"  # written as it goes: a call cut short still returns it
recipe=recipes/gpt2_124m.toml
finish() {
  tar -C "$out" -czf "$final_out/dist_bench.tgz" --exclude='*.safetensors' . 2>/dev/null
}
trap finish EXIT
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -n $((gpus + 1))
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  echo "git $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%F)"
} | tee "$report"

common=(--set amp.dtype=bf16 --set training.steps="$steps" --set training.log_every=10 --set training.eval_every=0
  --set training.checkpoint_every=0 --set scheduler.warmup_steps=10 -q)
# run NAME GPUS(CUDA_VISIBLE_DEVICES) [genesis train arguments...]
run() {
  local name=$1 visible=$2
  shift 2
  local t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$visible timeout 300 "$genesis" train "$recipe" --out "$out/$name" --overwrite "${common[@]}" "$@" \
    > /dev/null 2> "$out/$name.err"
  local rc=$?
  echo "run $name: rc=$rc, $((SECONDS - t0)) s$( [ $rc -ne 0 ] && echo "; $(tail -n 2 "$out/$name.err" | tr '\n' ' ')")" | tee -a "$report"
}
devices() { seq -s, 0 $(($1 - 1)); }

parts=" ${PARTS:-train resume fault torch} "
want() { [[ $parts == *" $1 "* ]]; }

if want train; then
echo "== genesis runs ($steps steps each)" | tee -a "$report"
run one32 0 --set training.batch_size=32
run one16 0 --set training.batch_size=16
run nproc1 0 --set training.batch_size=16 --nproc-per-node 1
run ddp2 "$(devices 2)" --set training.batch_size=16 --nproc-per-node 2 \
  --set training.checkpoint_every=$((steps / 2)) --set training.keep_last=3
run zero2 "$(devices 2)" --set training.batch_size=16 --nproc-per-node 2 --set dist.zero=1
run flat2 "$(devices 2)" --set training.batch_size=16 --nproc-per-node 2 --set dist.bucket_mb=0
# Gradients on the wire in bf16 (half the bytes: less of the SMs and memory the backward shares).
run ddp2bf16 "$(devices 2)" --set training.batch_size=16 --nproc-per-node 2 --set dist.reduce_dtype=bf16
run zero2bf16 "$(devices 2)" --set training.batch_size=16 --nproc-per-node 2 --set dist.zero=1 --set dist.reduce_dtype=bf16
# NCCL's kernels share the SMs with the backward they overlap: fewer channels, less contention.
for ch in ${CHANNELS:-}; do
  NCCL_MAX_NCHANNELS=$ch run "nccl_ch$ch" "$(devices 2)" --set training.batch_size=16 --nproc-per-node 2
done
if [ "$wide" -gt 2 ]; then
  run "ddp$wide" "$(devices "$wide")" --set training.batch_size=16 --nproc-per-node "$wide"
  run "zero$wide" "$(devices "$wide")" --set training.batch_size=16 --nproc-per-node "$wide" --set dist.zero=1
  run "ddp${wide}bf16" "$(devices "$wide")" --set training.batch_size=16 --nproc-per-node "$wide" --set dist.reduce_dtype=bf16
fi
# The one-GPU baseline again: the machine's drift over the section.
run one16again 0 --set training.batch_size=16
fi

# Resume a 2-rank run from its mid-run checkpoint. GEMM autotuning picks cuBLASLt algorithms by
# timing, which NCCL's concurrent kernels perturb, so two runs may round differently: bit-exact
# resume needs the heuristic's deterministic choice (GENESIS_GEMM_AUTOTUNE=0) in both runs.
half=$(printf 'step_%08d' $((steps / 2)))
if want resume; then
GENESIS_GEMM_AUTOTUNE=0 run exact2 "$(devices 2)" --set training.batch_size=16 --nproc-per-node 2 \
  --set training.checkpoint_every=$((steps / 2)) --set training.keep_last=3
if [ -d "$out/exact2/checkpoints/$half" ]; then
  mkdir -p "$out/resumed/checkpoints"
  cp -r "$out/exact2/checkpoints/$half" "$out/resumed/checkpoints/"
  ln -s "$half" "$out/resumed/checkpoints/latest"
  cp "$out/exact2/recipe.toml" "$out/resumed/"
  CUDA_VISIBLE_DEVICES=0,1 GENESIS_GEMM_AUTOTUNE=0 timeout 300 "$genesis" train "$recipe" --out "$out/resumed" --resume \
    "${common[@]}" --set training.batch_size=16 --set training.checkpoint_every=$((steps / 2)) \
    --set training.keep_last=3 --nproc-per-node 2 > /dev/null 2> "$out/resumed.err"
  echo "run resumed: rc=$?" | tee -a "$report"
fi
fi

# A rank killed mid-run, no launcher to clean up: rank 0 must notice and exit non-zero within
# dist.timeout_s, naming it. Rank 0 logs every step, so it is usually blocked in a CUDA call behind
# an NCCL collective that can never finish: the nccl watchdog has to end it.
if want fault; then
round=0
for victim in $(for _ in $(seq 1 "${FAULT_ROUNDS:-1}"); do echo 1 0; done); do
  survivor=$((1 - victim))
  round=$((round + 1))
  dir="$out/killed$round"  # a fresh directory each round: its metrics say when to kill
  port=$((29500 + RANDOM % 1000))
  for rank in 0 1; do
    CUDA_VISIBLE_DEVICES=0,1 RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port "$genesis" train "$recipe" --out "$dir" \
      --set amp.dtype=bf16 --set training.steps=3000 --set training.log_every=1 --set training.eval_every=0 \
      --set training.checkpoint_every=0 --set dist.timeout_s=30 -q > /dev/null 2> "${dir}_rank$rank.err" &
    eval "pid$rank=$!"
  done
  for _ in $(seq 1 600); do grep -qE '"step":20[,}]' "$dir/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
  t0=$(date +%s.%N)
  eval "kill -9 \$pid$victim"
  eval "alive=\$pid$survivor"
  for _ in $(seq 1 600); do kill -0 "$alive" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$alive" 2>/dev/null; then
    # Where it hangs: every thread's stack (cuda-gdb attaches to a running process).
    timeout 90 cuda-gdb -batch -p "$alive" -ex "thread apply all bt" > "${dir}_stuck.txt" 2>&1
    grep -E '^(Thread|#[0-9])' "${dir}_stuck.txt" | cut -c1-200 | head -n 80 | tee -a "$report"
    kill -9 "$alive" 2>/dev/null
    echo "fault: rank $survivor still running 60 s after rank $victim was killed" | tee -a "$report"
  fi
  wait "$alive"
  rc=$?
  wait 2>/dev/null
  took=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  echo "fault: rank $victim killed after step 20; rank $survivor exit $rc after ${took} s: $(tail -n 1 "${dir}_rank$survivor.err")" | tee -a "$report"
done
fi

if want torch && [ "${TORCH:-1}" = 1 ]; then
  echo "== PyTorch DDP + torch.compile (scripts/bench/torch_ddp.py, 30 steps)" | tee -a "$report"
  for n in 1 2 $([ "$wide" -gt 2 ] && echo "$wide"); do
    CUDA_VISIBLE_DEVICES=$(devices "$n") PYTHONUNBUFFERED=1 timeout 300 python3 -m torch.distributed.run \
      --standalone --nproc-per-node "$n" scripts/bench/torch_ddp.py --model gpt2 --vocab 50304 --batch 16 --compile \
      > "$out/torch_ddp$n.json" 2> "$out/torch_ddp$n.err"
    echo "torch $n GPU(s): rc=$? $(tail -n 1 "$out/torch_ddp$n.json")" | tee -a "$report"
  done
  # torch.compile splits a DDP model's graph at the bucket boundaries (optimize_ddp); without it.
  CUDA_VISIBLE_DEVICES=0,1 PYTHONUNBUFFERED=1 timeout 300 python3 -m torch.distributed.run --standalone \
    --nproc-per-node 2 scripts/bench/torch_ddp.py --model gpt2 --vocab 50304 --batch 16 --compile --no-optimize-ddp \
    > "$out/torch_ddp2_whole.json" 2> "$out/torch_ddp2_whole.err"
  echo "torch 2 GPUs, optimize_ddp off: rc=$? $(tail -n 1 "$out/torch_ddp2_whole.json")" | tee -a "$report"
fi

python3 - "$out" "$steps" <<'PY' | tee -a "$report"
import glob, json, os, re, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])

def metrics(name):
    path = os.path.join(out, name, "metrics.jsonl")
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []

def losses(name):
    return {m["step"]: m["loss"] for m in metrics(name) if "loss" in m and "step" in m}

def rate(name):  # median tokens/s of the logged windows after the first
    r = [m["tokens_per_s"] for m in metrics(name) if "tokens_per_s" in m][1:]
    return statistics.median(r) if r else 0.0

def summary(name):
    path = os.path.join(out, name, "summary.json")
    return json.load(open(path)) if os.path.exists(path) else {}

def max_rel(a, b):
    la, lb = losses(a), losses(b)
    common = sorted(set(la) & set(lb))
    if not common:
        return None
    return max(abs(la[s] - lb[s]) / abs(lb[s]) for s in common), len(common)

print("== losses (relative difference at the logged steps)")
for a, b, what in [("ddp2", "one32", "2 GPUs x 16 vs 1 GPU x 32"), ("zero2", "ddp2", "ZeRO-1 vs DDP, 2 GPUs"),
                   ("flat2", "ddp2", "one bucket vs 25 MB buckets"), ("ddp2bf16", "ddp2", "bf16 vs f32 gradients on the wire"),
                   ("zero2bf16", "ddp2bf16", "ZeRO-1 vs DDP, bf16 on the wire")]:
    r = max_rel(a, b)
    print(f"  {what}: " + (f"max {r[0]:.2e} over {r[1]} steps" if r else "missing"))
la, lb = losses("exact2"), losses("resumed")
after = sorted(s for s in lb if s > steps // 2)
same = bool(after) and all(la.get(s) == lb[s] for s in after)
print(f"  2-GPU resume (GENESIS_GEMM_AUTOTUNE=0) from step {steps // 2}: losses at {after} " + ("bit-identical" if same else f"differ: {[(la.get(s), lb[s]) for s in after]}"))
fa = os.path.join(out, "exact2", "checkpoints", f"step_{steps:08d}", "model.safetensors")
fb = os.path.join(out, "resumed", "checkpoints", f"step_{steps:08d}", "model.safetensors")
if os.path.exists(fa) and os.path.exists(fb):
    print("  final weights " + ("byte-identical" if open(fa, "rb").read() == open(fb, "rb").read() else "differ"))

print("== throughput (median tokens/s of the logged windows), memory, NCCL wait")
base = rate("one16")
wide = sorted(n for n in os.listdir(out)
              if os.path.isdir(os.path.join(out, n)) and (m := re.fullmatch(r"(ddp|zero)(\d+)(bf16)?", n)) and int(m[2]) > 2)
runs = (["one16", "one16again", "nproc1", "ddp2", "zero2", "flat2", "ddp2bf16", "zero2bf16"]
        + [os.path.basename(p) for p in sorted(glob.glob(os.path.join(out, "nccl*")))] + wide)
for name in runs:
    s = summary(name)
    if not s:
        print(f"  {name}: no summary")
        continue
    world = s.get("world_size", 1)
    r = rate(name)
    line = f"  {name:7s} {world} GPU(s): {r:10.0f} tok/s ({r / world:8.0f} per GPU, {r / base if base else 0:5.2f}x one GPU)"
    if "comm_wait_share" in s:
        line += f", NCCL wait {100 * s['comm_wait_share']:.2f}% of the run"
    if "optimizer_state_bytes_per_rank" in s:
        line += f", optimizer state/rank {s['optimizer_state_bytes_per_rank'][0] / 2**20:.0f} MiB"
    else:
        line += f", optimizer state {s.get('optimizer_state_bytes', 0) / 2**20:.0f} MiB"
    peaks = s.get("peak_memory_bytes_per_rank", [s.get("peak_memory_bytes", 0)])
    line += f", peak/rank {max(peaks) / 2**30:.2f} GiB"
    print(line)
for n in ("1", "2", "2_whole", "4", "8"):
    path = os.path.join(out, f"torch_ddp{n}.json")
    try:
        j = json.loads(open(path).read().strip().splitlines()[-1])
        print(f"  {j['framework']}, {j['world_size']} GPU(s): {j['tokens_per_s']:10.0f} tok/s ({j['tokens_per_s_per_gpu']:8.0f} per GPU), "
              f"peak {j['peak_memory_gib']:.2f} GiB")
    except Exception:
        pass
PY
