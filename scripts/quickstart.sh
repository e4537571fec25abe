#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build genesis, train the
# Fashion-MNIST MLP recipe on the CPU and print its test accuracy.
#   scripts/quickstart.sh [extra genesis train flags, e.g. --set training.epochs=2]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGENESIS_CUDA="${GENESIS_CUDA:-AUTO}" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)" --target genesis_cli

run_dir=runs/quickstart_fashion_mnist_mlp
summary=$("$build_dir/bin/genesis" train recipes/fashion_mnist_mlp.toml --out "$run_dir" --overwrite "$@")
accuracy=$(sed -n 's/.*"accuracy": *\([0-9.eE+-]*\).*/\1/p' "$summary" | head -n 1)
awk -v a="$accuracy" 'BEGIN { printf "fashion_mnist_mlp test accuracy: %.2f%%\n", 100 * a }'
echo "run directory: $run_dir (metrics.jsonl, checkpoints/, summary.json)"
