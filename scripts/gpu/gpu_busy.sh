#!/usr/bin/env bash
# On the GPU host: how much of a training step the GPU spends idle, waiting for the host or
# between kernels. Nsight Compute times every kernel of `genesis bench train` (warm-up 3, then
# 1 or 2 timed steps): the difference of the two runs is exactly one step's kernels, whose
# summed durations are the GPU's busy time; `genesis bench train` without the profiler gives
# the step's time. Their difference is the host's exposed share (issue: capture the step as a
# CUDA graph when it is above 5%). GEMM autotuning is off in all three runs (GENESIS_GEMM_AUTOTUNE=0),
# so they launch the same kernels.
#   scripts/gpu/gpu_busy.sh BUNDLE.tar.xz RECIPE [--set k=v ...]
# Prints the result and the kernel families' split of the step; $OUT/gpu_busy_<recipe>.txt keeps it.
set -uo pipefail
archive=${1:?bundle archive}; recipe=${2:?recipe}; shift 2
final_out=${OUT:-/tmp/genesis-gpu-busy}; mkdir -p "$final_out"
out=$(mktemp -d)  # the profiles (large); $OUT gets the summary
trap 'rm -rf "$out"' EXIT
# The heuristic's GEMM algorithms, not timed ones: every run launches the same kernels.
export GENESIS_GEMM_AUTOTUNE=0
source "$(dirname "$0")/bundle_env.sh" "$archive"
name=$(basename "$recipe" .toml)
for s in 1 2; do
  ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --page raw \
    --log-file "$out/ncu_${name}_$s.csv" "$genesis" bench train "$recipe" --steps $s --warmup 3 -q "$@" \
    > /dev/null 2> "$out/ncu_${name}_$s.err" || { echo "ncu failed: $(tail -n 2 "$out/ncu_${name}_$s.err")"; exit 1; }
done
"$genesis" bench train "$recipe" --steps 30 --warmup 5 -q --json "$out/bench_$name.json" "$@" > /dev/null 2> "$out/bench.err" ||
  { echo "bench train failed: $(tail -n 2 "$out/bench.err")"; exit 1; }
python3 - "$out" "$name" <<'PY' | tee "$final_out/gpu_busy_$name.txt"
import collections, csv, json, re, sys
out, name = sys.argv[1], sys.argv[2]
def kernels(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    n, c = rows[head].index("Kernel Name"), rows[head].index("gpu__time_duration.sum")
    to_ms = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}[rows[head + 1][c]]
    found = []
    for r in rows[head + 2:]:
        try: found.append((r[n], float(r[c].replace(",", "")) * to_ms))
        except (ValueError, IndexError): pass
    return found
one, two = kernels(f"{out}/ncu_{name}_1.csv"), kernels(f"{out}/ncu_{name}_2.csv")
# The second timed step's kernels: the runs launch the same sequence up to there.
assert [k for k, _ in one] == [k for k, _ in two[:len(one)]], "the two profiled runs launched different kernels"
step = two[len(one):]
busy = sum(t for _, t in step)
case = json.load(open(f"{out}/bench_{name}.json"))["cases"][0]
ms = case["median_ms"]
print(f"{name}: GPU busy {busy:.2f} ms over {len(step)} kernels a step; step {ms:.2f} ms (median of 30); "
      f"idle {ms - busy:.2f} ms = {100 * (ms - busy) / ms:.1f}% of the step")
families = collections.Counter()
for k, t in step: families[re.sub(r"[<(].*", "", k)[:60]] += t
for k, t in families.most_common(12): print(f"  {t:7.3f} ms  {100 * t / busy:5.1f}%  {k}")
PY
