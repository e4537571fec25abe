#!/usr/bin/env bash
# Runs a recipe once per value of one key and tabulates each run's summary.json.
#   scripts/sweep.sh RECIPE KEY VALUE... [-- extra genesis train flags]
#   scripts/sweep.sh recipes/fashion_mnist_mlp.toml optimizer.lr 3e-4 1e-3 3e-3 -- --set training.epochs=2
# Environment: GENESIS (default: genesis on PATH, else build/bin/genesis), SWEEP_DIR (default runs/sweep-<key>),
# FORMAT=md|tsv (default md). The table goes to stdout; training logs to stderr. The table's
# metric fits the model: accuracy for classifiers, bits per byte for language models. Existing
# run directories are kept (that value's row says so) unless `-- --overwrite` is passed; the
# curves of the sweep: genesis report SWEEP_DIR/*/.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 RECIPE KEY VALUE... [-- genesis train flags]" >&2; exit 2; }
recipe=$1 key=$2
shift 2
values=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do values+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
genesis=${GENESIS:-$(command -v genesis || echo build/bin/genesis)}
sweep_dir=${SWEEP_DIR:-runs/sweep-${key//./_}}
format=${FORMAT:-md}
[ -x "$genesis" ] || { echo "sweep: no genesis on PATH and $genesis not found (build first: scripts/test.sh or scripts/quickstart.sh, or set GENESIS)" >&2; exit 2; }

field() {  # field FILE NAME: first numeric value of "NAME": in a JSON file, to 4 significant digits
  local v
  v=$(sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" "$1" | head -n 1)
  if [ -n "$v" ]; then printf '%.4g' "$v"; else printf -- '-'; fi
}

rows=()
metric=accuracy
for v in "${values[@]}"; do
  out="$sweep_dir/${key//./_}=$v"
  echo "sweep: $key=$v -> $out" >&2
  if "$genesis" train "$recipe" --set "$key=$v" --out "$out" "$@" >/dev/null; then
    s="$out/summary.json"
    grep -q '"bits_per_byte"' "$s" && metric=bits_per_byte
    rows+=("$v	$s")
  else
    rows+=("$v	")
  fi
done

header=("$key" "$metric" "eval loss" "train loss" "wall s")
line() {  # the row of one value: its summary's figures, or why it has none
  local v=$1 s=$2
  if [ -z "$s" ]; then printf '%s\tfailed (see above; an existing directory needs -- --overwrite)\t-\t-\t-' "$v"; return; fi
  printf '%s\t%s\t%s\t%s\t%s' "$v" "$(field "$s" "$metric")" "$(field "$s" loss)" "$(field "$s" train_loss)" "$(field "$s" wall_s)"
}
if [ "$format" = "tsv" ]; then
  (IFS=$'\t'; echo "${header[*]}")
  for r in "${rows[@]}"; do line "${r%%	*}" "${r#*	}"; echo; done
else
  printf '| %s | %s | %s | %s | %s |\n|---|---|---|---|---|\n' "${header[@]}"
  for r in "${rows[@]}"; do l=$(line "${r%%	*}" "${r#*	}"); printf '| %s |\n' "${l//	/ | }"; done
fi
echo "sweep: curves of every run: $genesis report $sweep_dir/*/ --out $sweep_dir/report.html" >&2
