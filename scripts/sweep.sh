#!/usr/bin/env bash
# Runs a recipe once per value of one key and tabulates each run's summary.json.
#   scripts/sweep.sh RECIPE KEY VALUE... [-- extra genesis train flags]
#   scripts/sweep.sh recipes/fashion_mnist_mlp.toml optimizer.lr 3e-4 1e-3 3e-3 -- --set training.epochs=2
# Environment: GENESIS (default build/bin/genesis), SWEEP_DIR (default runs/sweep-<key>),
# FORMAT=md|tsv (default md). The table goes to stdout; training logs to stderr.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 RECIPE KEY VALUE... [-- genesis train flags]" >&2; exit 2; }
recipe=$1 key=$2
shift 2
values=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do values+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
genesis=${GENESIS:-build/bin/genesis}
sweep_dir=${SWEEP_DIR:-runs/sweep-${key//./_}}
format=${FORMAT:-md}
[ -x "$genesis" ] || { echo "sweep: $genesis not found (build first: scripts/test.sh or scripts/quickstart.sh)" >&2; exit 2; }

field() {  # field FILE NAME: first numeric value of "NAME": in a JSON file
  sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" "$1" | head -n 1
}

rows=()
for v in "${values[@]}"; do
  out="$sweep_dir/${key//./_}=$v"
  echo "sweep: $key=$v -> $out" >&2
  if "$genesis" train "$recipe" --set "$key=$v" --out "$out" --overwrite "$@" >/dev/null; then
    s="$out/summary.json"
    rows+=("$v	$(field "$s" accuracy)	$(field "$s" loss)	$(field "$s" train_loss)	$(field "$s" wall_s)")
  else
    rows+=("$v	failed	-	-	-")
  fi
done

if [ "$format" = "tsv" ]; then
  printf '%s\taccuracy\teval_loss\ttrain_loss\twall_s\n' "$key"
  printf '%s\n' "${rows[@]}"
else
  printf '| %s | accuracy | eval loss | train loss | wall s |\n|---|---|---|---|---|\n' "$key"
  for r in "${rows[@]}"; do printf '| %s |\n' "${r//	/ | }"; done
fi
