#!/usr/bin/env bash
# Runs on the GPU host, over a bundle made by scripts/gpu/bundle.sh: the CUDA test suite,
# then the CPU suite as a cross-check. Writes logs to $OUT when it is set.
#   scripts/gpu/run_tests.sh BUNDLE_DIR
set -uo pipefail
bundle=${1:?bundle directory}
out=${OUT:-/tmp/genesis-gpu-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
"$bundle/bin/genesis_tests" "[cuda]" -r compact 2>&1 | tee "$out/cuda_tests.log" | tail -40
cuda_rc=${PIPESTATUS[0]}
"$bundle/bin/genesis_tests" "[cpu]" 2>&1 | tail -3 | tee "$out/cpu_tests.log"
cpu_rc=${PIPESTATUS[0]}
echo "cuda suite rc=$cuda_rc, cpu suite rc=$cpu_rc"
[ "$cuda_rc" -eq 0 ] && [ "$cpu_rc" -eq 0 ]
