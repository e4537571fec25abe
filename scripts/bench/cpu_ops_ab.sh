#!/usr/bin/env bash
# The CPU operator suite against PyTorch on a noisy host: `genesis bench ops` and
# `scripts/bench/torch_ops.py` case by case, the two sides back to back on each case (which goes
# first alternates), over N rounds; then per case each side's median time and the ratio that
# counts: the median over rounds of the paired ratio (PyTorch ms / genesis ms of the two runs
# made back to back, > 1: genesis faster), with the geometric mean and the lowest cases. Paired, case by case, because this shared 2-core VM's
# memory bandwidth changes by up to 1.8x within seconds (mul_scalar 2048^2: 0.37 <-> 0.67 ms on
# both sides): whole suites run one after the other put the two sides of a memory-bound case up
# to a minute apart, and even the ratio of per-side medians mixes fast and slow spells.
# Both sides run the same thread count (THREADS, default: the CPUs this process may use), the
# same cache flush (FLUSH_MIB) and one set of ceilings: left to itself, genesis picks fewer
# threads when the host is busy at start-up, while PyTorch takes every CPU.
#   scripts/bench/cpu_ops_ab.sh [ROUNDS=3] [SUITE=recipes/bench/ops_cpu.toml]
# Needs build/bin/genesis (GENESIS=...) and a python3 with torch (PYTHON=...).
set -euo pipefail
rounds=${1:-3}
suite=${2:-recipes/bench/ops_cpu.toml}
genesis=${GENESIS:-build/bin/genesis}
python=${PYTHON:-python3}
threads=${THREADS:-$(nproc)}
flush_mib=${FLUSH_MIB:-128}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The PyTorch side reads the suite's cases resolved by genesis (inputs, call, cost).
"$genesis" bench ops --suite "$suite" --emit-cases "$out/cases.json" -q
OMP_NUM_THREADS=$threads "$genesis" bench ceilings --device cpu --json "$out/ceilings.json" > /dev/null
# One anchored pattern per case, its regular-expression characters escaped (the same pattern
# serves std::regex and Python's re).
mapfile -t patterns < <("$python" - "$out/cases.json" <<'PY'
import json, re, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    print("^" + re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", c["name"]) + "$")
PY
)
for r in $(seq 1 "$rounds"); do
  for i in "${!patterns[@]}"; do
    run_genesis() {
      OMP_NUM_THREADS=$threads "$genesis" bench ops --device cpu --suite "$suite" --filter "${patterns[$i]}" \
        --flush-mib "$flush_mib" --ceilings "$out/ceilings.json" --json "$out/g.$r.$i.json" -q > /dev/null
    }
    run_torch() {
      "$python" scripts/bench/torch_ops.py "$out/cases.json" --filter "${patterns[$i]}" --device cpu \
        --threads "$threads" --flush-mib "$flush_mib" --ceilings "$out/ceilings.json" \
        --json "$out/t.$r.$i.json" > /dev/null
    }
    if (( (r + i) % 2 )); then run_genesis; run_torch; else run_torch; run_genesis; fi
  done
  echo "round $r of $rounds done" >&2
done
"$python" - "$out" "$rounds" <<'PY'
import glob, json, math, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(side):
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{side}.*.json"))]
    threads = {run.get("cpu_threads") for run in runs}
    if len(threads) != 1:
        sys.exit(f"cpu_ops_ab.sh: {side} runs with different thread counts {sorted(map(str, threads))}")
    times = {}
    for run in runs:
        for c in run["cases"]:
            if c.get("status") == "ok": times.setdefault(c["name"], []).append(c["median_ms"])
    return threads.pop(), times
(gt, g), (tt, t) = load("g"), load("t")
print(f"threads: genesis {gt}, PyTorch {tt}")
rows = []
for name in g:
    if name in t and len(g[name]) == rounds and len(t[name]) == rounds:
        gm, tm = statistics.median(g[name]), statistics.median(t[name])
        each = sorted(tt / gg for gg, tt in zip(g[name], t[name]))
        rows.append((statistics.median(each), name, gm, tm, each[0], each[-1]))
print(f"{'case':40s} {'genesis ms':>10s} {'torch ms':>9s} {'paired':>7s}  (single rounds)")
for ratio, name, gm, tm, lo, hi in sorted(rows):
    print(f"{name[:40]:40s} {gm:10.4f} {tm:9.4f} {ratio:5.2f}x  ({lo:.2f}-{hi:.2f})")
geo = math.exp(sum(math.log(r[0]) for r in rows) / len(rows))
print(f"{len(rows)} cases, {rounds} rounds: geomean {geo:.2f}x, lowest {min(r[0] for r in rows):.2f}x")
PY
