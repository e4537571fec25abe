#!/usr/bin/env bash
# The CPU operator suite against PyTorch on a noisy host: N rounds of `genesis bench ops` and
# `scripts/bench/torch_ops.py` over the same suite, alternating which side runs first, then per
# case the median of each side's medians and their ratio (PyTorch ms / genesis ms, > 1: genesis
# faster), the geometric mean and the lowest cases. One round is what `genesis bench compare`
# shows; on a shared 2-core VM single rounds of memory-bound cases swing 0.6-1.3x.
#   scripts/bench/cpu_ops_ab.sh [ROUNDS=5] [SUITE=recipes/bench/ops_cpu.toml]
# Needs build/bin/genesis (GENESIS=...) and a python3 with torch (PYTHON=...).
set -euo pipefail
rounds=${1:-5}
suite=${2:-recipes/bench/ops_cpu.toml}
genesis=${GENESIS:-build/bin/genesis}
python=${PYTHON:-python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The PyTorch side reads the suite's cases resolved by genesis (inputs, call, cost).
"$genesis" bench ops --suite "$suite" --emit-cases "$out/cases.json" -q
for r in $(seq 1 "$rounds"); do
  run_genesis() { "$genesis" bench ops --device cpu --suite "$suite" --json "$out/g$r.json" -q > /dev/null; }
  run_torch() { "$python" scripts/bench/torch_ops.py "$out/cases.json" --device cpu --json "$out/t$r.json" > /dev/null; }
  if (( r % 2 )); then run_genesis; run_torch; else run_torch; run_genesis; fi
  echo "round $r of $rounds done" >&2
done
"$python" - "$out" "$rounds" <<'PY'
import json, math, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(prefix):
    runs = [json.load(open(f"{out}/{prefix}{r}.json"))["cases"] for r in range(1, rounds + 1)]
    times = {}
    for cases in runs:
        for c in cases:
            if c.get("status") == "ok": times.setdefault(c["name"], []).append(c["median_ms"])
    return times
g, t = load("g"), load("t")
rows = []
for name in g:
    if name in t and len(g[name]) == rounds and len(t[name]) == rounds:
        gm, tm = statistics.median(g[name]), statistics.median(t[name])
        each = sorted(tt / gg for gg, tt in zip(g[name], t[name]))
        rows.append((tm / gm, name, gm, tm, each[0], each[-1]))
print(f"{'case':40s} {'genesis ms':>10s} {'torch ms':>9s} {'ratio':>6s}  (single rounds)")
for ratio, name, gm, tm, lo, hi in sorted(rows):
    print(f"{name[:40]:40s} {gm:10.4f} {tm:9.4f} {ratio:5.2f}x  ({lo:.2f}-{hi:.2f})")
geo = math.exp(sum(math.log(r[0]) for r in rows) / len(rows))
print(f"{len(rows)} cases, {rounds} rounds: geomean {geo:.2f}x, lowest {min(r[0] for r in rows):.2f}x")
PY
