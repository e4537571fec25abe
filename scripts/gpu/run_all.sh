#!/usr/bin/env bash
# On the GPU host, in the repository root: unpacks a bundle made by scripts/gpu/bundle.sh,
# runs the CUDA test suite (and compute-sanitizer memcheck over it), and times the
# Fashion-MNIST recipes against the PyTorch reference on the CPU at 2 threads each,
# side by side on disjoint cores. $OUT receives summary.txt and results.tgz (every log).
#   scripts/gpu/run_all.sh BUNDLE.tar.xz FASHION_MNIST_DIR
#   MEMCHECK=1 adds compute-sanitizer memcheck over the CUDA suite, less the tests that
#   provoke out-of-memory and invalid-API errors on purpose ([oom], [api-error]).
set -uo pipefail
archive=${1:?bundle archive}
data=${2:?Fashion-MNIST directory}
final_out=${OUT:-/tmp/genesis-gpu-out}
mkdir -p "$final_out"
out=$(mktemp -d)
b=$(mktemp -d)
tar -xJf "$archive" -C "$b"
export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GENESIS_SOURCE_DIR=$PWD
ncores=$(nproc)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; lscpu | grep "Model name";
  python3 -c 'import torch; print("torch", torch.__version__)'; } | tee "$out/host.txt"
"$b/bin/genesis" info > "$out/info.json"

# CPU comparison on cores 0-1 (genesis) and 2-3 (PyTorch), in the background.
(
  for r in mlp cnn; do
    /usr/bin/time -f "%e" -o "$out/genesis_${r}_wall.txt" taskset -c 0,1 "$b/bin/genesis" train "recipes/fashion_mnist_$r.toml" \
      --set data.path="$data" --set run.threads=2 --out "/tmp/runs/$r" --overwrite -q > /dev/null 2> "$out/genesis_${r}.err"
    cp "/tmp/runs/$r/summary.json" "$out/genesis_${r}_summary.json"
    cp "/tmp/runs/$r/metrics.jsonl" "$out/genesis_${r}_metrics.jsonl"
  done
) &
cpu_genesis=$!
(PYTHONUNBUFFERED=1 taskset -c 2,3 python3 scripts/reference/torch_fashion_mnist.py --data "$data" --threads 2 > "$out/torch_fashion_mnist.jsonl" 2> "$out/torch.err") &
cpu_torch=$!

# CUDA tests on the remaining cores.
taskset -c 4-$((ncores - 1)) "$b/bin/genesis_tests" "[cuda]" -r compact > "$out/cuda_tests.log" 2>&1
echo "cuda tests rc=$?" | tee -a "$out/summary.txt"
tail -3 "$out/cuda_tests.log"
if [ "${MEMCHECK:-0}" = "1" ] && command -v compute-sanitizer >/dev/null; then
  taskset -c 4-$((ncores - 1)) compute-sanitizer --tool memcheck --print-limit 20 "$b/bin/genesis_tests" "[cuda]~[oom]~[api-error]" > "$out/memcheck.log" 2>&1
  echo "memcheck rc=$?" | tee -a "$out/summary.txt"
  grep -E "ERROR SUMMARY|passed|failed" "$out/memcheck.log" | tail -3
fi
"$b/bin/genesis_tests" "[cpu]" > "$out/cpu_tests.log" 2>&1
echo "cpu tests on the GPU host rc=$?" | tee -a "$out/summary.txt"
tail -2 "$out/cpu_tests.log"

wait $cpu_genesis $cpu_torch
for r in mlp cnn; do
  echo "genesis $r: wall $(cat "$out/genesis_${r}_wall.txt" 2>/dev/null) s, $(tr -d '\n ' < "$out/genesis_${r}_summary.json" 2>/dev/null | grep -o '"eval":{[^}]*}')"
done | tee -a "$out/summary.txt"
cat "$out/torch_fashion_mnist.jsonl" | tee -a "$out/summary.txt"
cp "$out/summary.txt" "$final_out/summary.txt"
tar -czf "$final_out/results.tgz" -C "$out" .
