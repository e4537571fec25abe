#!/usr/bin/env bash
# On the GPU host, in the repository root: unpacks a bundle made by scripts/gpu/bundle.sh and
# runs, in one call:
#   tests    the [cuda] test suite (ctest -L cuda) (+ compute-sanitizer memcheck with MEMCHECK=1) and the [cpu] suite
#   fashion  the Fashion-MNIST recipes against the PyTorch reference on the CPU, 2 threads each,
#            side by side on disjoint cores (only when FASHION_MNIST_DIR is given)
#   bench    genesis bench ceilings, ops (f32 and bf16), alloc; scripts/bench/torch_ops.py for
#            the same suite and scenarios; genesis bench compare of each pair
# $OUT receives summary.txt and results.tgz (every log and JSON file).
#   scripts/gpu/run_all.sh BUNDLE.tar.xz [FASHION_MNIST_DIR]
#   STEPS="tests bench" (default: tests bench, plus fashion when a data directory is given)
#   BENCH_FILTER=REGEX  limits the ops suite (genesis and PyTorch alike); BENCH_DTYPES="f32 bf16";
#   BENCH_SUITE=FILE (default recipes/bench/ops.toml); BENCH_DEVICE=cuda (cpu tries the script here);
#   BENCH_FLUSH_MODE=read (default) or write: how both sides flush the cache between repetitions
#   MEMCHECK=1 adds compute-sanitizer memcheck over the CUDA suite, less the tests that
#   provoke out-of-memory and invalid-API errors on purpose ([oom], [api-error]).
set -uo pipefail
archive=${1:?bundle archive}
data=${2:-}
steps=${STEPS:-"tests bench${data:+ fashion}"}
final_out=${OUT:-/tmp/genesis-gpu-out}
mkdir -p "$final_out"
out=$(mktemp -d)
source "$(dirname "$0")/bundle_env.sh" "$archive"
export GENESIS_SOURCE_DIR=$PWD
ncores=$(nproc)
has() { [[ " $steps " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$out/summary.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; lscpu | grep "Model name";
  python3 -c 'import torch; print("torch", torch.__version__)'; } | tee "$out/host.txt"
"$genesis" info > "$out/info.json"
note "steps: $steps"

# CPU comparison on cores 0-1 (genesis) and 2-3 (PyTorch), in the background.
if has fashion && [ -z "$data" ]; then
  note "fashion: skipped (no FASHION_MNIST_DIR argument)"; steps=${steps//fashion/}
fi
if has fashion; then
  (
    for r in mlp cnn; do
      /usr/bin/time -f "%e" -o "$out/genesis_${r}_wall.txt" taskset -c 0,1 "$genesis" train "recipes/fashion_mnist_$r.toml" \
        --set data.path="$data" --set run.threads=2 --out "/tmp/runs/$r" --overwrite -q > /dev/null 2> "$out/genesis_${r}.err"
      cp "/tmp/runs/$r/summary.json" "$out/genesis_${r}_summary.json"
      cp "/tmp/runs/$r/metrics.jsonl" "$out/genesis_${r}_metrics.jsonl"
    done
  ) &
  cpu_genesis=$!
  (PYTHONUNBUFFERED=1 taskset -c 2,3 python3 scripts/reference/torch_fashion_mnist.py --data "$data" --threads 2 > "$out/torch_fashion_mnist.jsonl" 2> "$out/torch.err") &
  cpu_torch=$!
fi

# CUDA tests on the remaining cores; PyTorch's autocast results first, for the op-by-op
# autocast parity test (tests/test_cuda_autocast_torch.cpp).
if has tests; then
  python3 scripts/reference/torch_autocast_ops.py "$out/torch_autocast_ops.safetensors" > "$out/torch_autocast_ops.log" 2>&1 &&
    export GENESIS_TORCH_AUTOCAST_REFERENCE="$out/torch_autocast_ops.safetensors"
  note "torch autocast reference rc=$? $(tail -1 "$out/torch_autocast_ops.log")"
  # One process per case through the bundle's CTest file where ctest exists, else one run.
  if command -v ctest > /dev/null && [ -f "$b/CTestTestfile.cmake" ]; then
    (cd "$b" && taskset -c 4-$((ncores - 1)) ctest -L cuda --output-on-failure) > "$out/cuda_tests.log" 2>&1
    note "ctest -L cuda rc=$?"
  else
    taskset -c 4-$((ncores - 1)) "$b/bin/genesis_tests" "[cuda]" -r compact > "$out/cuda_tests.log" 2>&1
    note "cuda tests rc=$?"
  fi
  tail -3 "$out/cuda_tests.log"
  if [ "${MEMCHECK:-0}" = "1" ] && command -v compute-sanitizer >/dev/null; then
    taskset -c 4-$((ncores - 1)) compute-sanitizer --tool memcheck --print-limit 20 "$b/bin/genesis_tests" "[cuda]~[oom]~[api-error]" > "$out/memcheck.log" 2>&1
    note "memcheck rc=$?"
    grep -E "ERROR SUMMARY|passed|failed" "$out/memcheck.log" | tail -3
  fi
  taskset -c 4-$((ncores - 1)) "$b/bin/genesis_tests" "[cpu]" > "$out/cpu_tests.log" 2>&1
  note "cpu tests on the GPU host rc=$?"
  tail -2 "$out/cpu_tests.log"
fi

if has fashion; then
  wait $cpu_genesis $cpu_torch
  for r in mlp cnn; do
    note "genesis $r: wall $(cat "$out/genesis_${r}_wall.txt" 2>/dev/null) s, $(tr -d '\n ' < "$out/genesis_${r}_summary.json" 2>/dev/null | grep -o '"eval":{[^}]*}')"
  done
  tee -a "$out/summary.txt" < "$out/torch_fashion_mnist.jsonl"
fi

# Benchmarks, with nothing else running. PyTorch uses genesis's measured ceilings so that both
# sides' "% of ceiling" share one denominator.
if has bench; then
  filter=(); [ -n "${BENCH_FILTER:-}" ] && filter=(--filter "$BENCH_FILTER")
  dev=${BENCH_DEVICE:-cuda}
  suite=${BENCH_SUITE:-recipes/bench/ops.toml}
  "$genesis" bench ceilings --device "$dev" --json "$out/ceilings.json" > "$out/ceilings.txt" 2>&1
  note "bench ceilings rc=$?"; tee -a "$out/summary.txt" < "$out/ceilings.txt"
  for dt in ${BENCH_DTYPES:-f32 bf16}; do
    "$genesis" bench ops --device "$dev" --suite "$suite" --dtype "$dt" --ceilings "$out/ceilings.json" "${filter[@]}" --flush-mode "${BENCH_FLUSH_MODE:-read}" \
      --json "$out/genesis_$dt.json" > "$out/genesis_$dt.txt" 2> "$out/genesis_$dt.err"
    note "genesis bench ops $dt rc=$?: $(tail -1 "$out/genesis_$dt.txt") $(tail -2 "$out/genesis_$dt.err")"
    "$genesis" bench ops --suite "$suite" --dtype "$dt" "${filter[@]}" --emit-cases "$out/cases_$dt.json" -q
    python3 scripts/bench/torch_ops.py "$out/cases_$dt.json" --device "$dev" --dtype "$dt" --ceilings "$out/ceilings.json" \
      --flush-mode "${BENCH_FLUSH_MODE:-read}" \
      "${filter[@]}" --json "$out/torch_$dt.json" > "$out/torch_$dt.txt" 2> "$out/torch_$dt.err"
    note "torch ops $dt rc=$?: $(tail -1 "$out/torch_$dt.txt") $(tail -2 "$out/torch_$dt.err")"
    "$genesis" bench compare "$out/genesis_$dt.json" "$out/torch_$dt.json" > "$out/compare_$dt.txt" 2>&1
    note "compare $dt (B/A = torch ms / genesis ms): $(tail -1 "$out/compare_$dt.txt")"
  done
  "$genesis" bench alloc --device "$dev" --json "$out/genesis_alloc.json" > "$out/genesis_alloc.txt" 2>&1
  note "genesis bench alloc rc=$?"; tee -a "$out/summary.txt" < "$out/genesis_alloc.txt"
  python3 scripts/bench/torch_ops.py --alloc --device "$dev" --json "$out/torch_alloc.json" > "$out/torch_alloc.txt" 2>&1
  note "torch alloc rc=$?"; tee -a "$out/summary.txt" < "$out/torch_alloc.txt"
  "$genesis" bench compare "$out/genesis_alloc.json" "$out/torch_alloc.json" > "$out/compare_alloc.txt" 2>&1
  note "compare alloc: $(tail -1 "$out/compare_alloc.txt")"
fi

cp "$out/summary.txt" "$final_out/summary.txt"
tar -czf "$final_out/results.tgz" -C "$out" .
