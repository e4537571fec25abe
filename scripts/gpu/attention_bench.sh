#!/usr/bin/env bash
# On the GPU host: flash attention against PyTorch's scaled_dot_product_attention (bf16), timed
# side by side (`genesis bench ops` and scripts/bench/torch_ops.py over the suite's attention
# cases), then one Nsight Compute pass over genesis's flash kernels and PyTorch's at the GPT-2
# shape (B16 H12 T1024 D64, causal, forward and backward): time, occupancy, pipe use, stalls.
#   scripts/gpu/attention_bench.sh BUNDLE.tar.xz      NCU=0 skips the profile
# $OUT receives attention_bench.txt (the report) and the raw ncu text.
set -uo pipefail
archive=${1:?bundle archive}
out=${OUT:-/tmp/genesis-attention}; mkdir -p "$out"
source "$(dirname "$0")/bundle_env.sh" "$archive"
report="$out/attention_bench.txt"
filter=${FILTER:-attention}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__)'
  echo "git $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%F)"
} | tee "$report"
"$genesis" bench ops --device cuda --dtype bf16 --filter "$filter" --json "$out/genesis.json" -q > "$out/genesis.txt" 2>&1
"$genesis" bench ops --dtype bf16 --filter "$filter" --emit-cases "$out/cases.json" -q
python3 scripts/bench/torch_ops.py "$out/cases.json" --device cuda --dtype bf16 --json "$out/torch.json" > "$out/torch.txt" 2>&1
"$genesis" bench compare "$out/genesis.json" "$out/torch.json" 2>&1 | tee -a "$report"
[ "${NCU:-1}" = 1 ] || exit 0
case="attention causal B16 H12 T1024 D64 fwd\\+bwd"
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis)
ncu "${sections[@]}" --kernel-name regex:flash_ --launch-skip 8 --launch-count 4 \
  "$genesis" bench ops --device cuda --dtype bf16 --filter "$case" --reps 3 -q > "$out/ncu_genesis.txt" 2>&1
echo "ncu genesis rc=$?" | tee -a "$report"
ncu --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size \
  --kernel-name regex:'flash|fmha|attn|sdpa|cudnn' --launch-skip 6 --launch-count 6 \
  python3 scripts/bench/torch_ops.py "$out/cases.json" --device cuda --dtype bf16 --filter "$case" --reps 3 \
  > "$out/ncu_torch.txt" 2>&1
echo "ncu torch rc=$?" | tee -a "$report"
grep -E '^  [a-z_]+.*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Shared Memory Configuration Size|Dynamic Shared|L1/TEX Hit|Executed Ipc A|stall|Stall' \
  "$out/ncu_genesis.txt" | cut -c1-160 | tee -a "$report"
grep -E '^  [A-Za-z_].*\(|gpu__time|warps_active|hmma|registers|grid_size|block_size' "$out/ncu_torch.txt" | cut -c1-160 | tee -a "$report"
