#!/usr/bin/env bash
# On the GPU host: a per-kernel GPU time breakdown of genesis training steps under Nsight
# Compute (one pass per kernel, gpu__time_duration only), grouped into kernel families.
#   scripts/gpu/profile_step.sh BUNDLE.tar.xz RECIPE [--set k=v ...]
#   BENCH=1 scripts/gpu/profile_step.sh BUNDLE.tar.xz RECIPE [bench train options ...]: the steps of
#     `genesis bench train` instead (synthetic tokens, no data or init_from needed; --lora R)
# Writes $OUT/profile.csv.gz (raw) and prints the families' shares of GPU time.
set -uo pipefail
archive=${1:?bundle archive}; recipe=${2:?recipe}; shift 2
out=${OUT:-/tmp/genesis-profile}; mkdir -p "$out"
source "$(dirname "$0")/bundle_env.sh" "$archive"
if [ "${BENCH:-0}" = 1 ]; then
  command=("$genesis" bench train "$recipe" --steps 1 --warmup 1 -q "$@")
else
  command=("$genesis" train "$recipe" --set training.steps=2 --set training.eval_every=0
    --set training.checkpoint_every=0 --set scheduler.warmup_steps=0 "$@" --out /tmp/runs/profile --overwrite -q)
fi
ncu --metrics gpu__time_duration.sum --csv --page raw --log-file "$out/profile.csv" "${command[@]}" \
  > /dev/null 2> "$out/profile.err"
echo "ncu rc=$?"
gzip -f "$out/profile.csv"
python3 - "$out/profile.csv.gz" <<'PY' | tee "$out/profile_summary.txt"
import csv, collections, gzip, re, sys
rows = list(csv.reader(gzip.open(sys.argv[1], "rt")))
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]; name_i, time_i = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
fam = collections.Counter(); count = collections.Counter()
for r in rows[head + 2:]:
    if len(r) <= time_i: continue
    try: t = float(r[time_i].replace(",", ""))
    except ValueError: continue
    n = r[name_i]
    key = re.sub(r"[<(].*", "", n)[:60]
    fam[key] += t; count[key] += 1
total = sum(fam.values())
print("time unit:", rows[head + 1][time_i], "(ms figures assume nsecond)")
print(f"total GPU time {total/1e6:.2f} ms over {sum(count.values())} kernels (2 steps, incl. GEMM autotuning)")
for k, t in fam.most_common(28):
    print(f"{100*t/total:5.1f}%  {t/1e6:8.2f} ms  {count[k]:5d}x  {k}")
PY
