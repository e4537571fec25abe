#!/usr/bin/env bash
# `[data] name = "csv"` end to end (issue 38): a small table from data/make_csv.py trains
# recipes/csv_tiers_mlp.toml for a few steps and eval reproduces its accuracy, with the
# checkpoint's encoding after the training file changed (and so does a resumed run); data.val_fraction splits; bad tables and
# recipes exit 2 with one line naming file:line and column: ragged rows, a non-numeric value in
# a numeric column, a missing label column, an empty file, a validation label the training rows
# lack, and a model.input_shape that is not the encoded width.
#   tests/cli/test_csv.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
recipe="$src/recipes/csv_tiers_mlp.toml"
export OMP_NUM_THREADS=1

python3 "$src/data/make_csv.py" --out "$work" --train 600 --test 200 >/dev/null || fail "make_csv.py failed"
data="$work/csv_tiers"
short=(--set "data.path=$data/train.csv" --set "data.test_path=$data/test.csv" --set training.steps=40
       --set training.log_every=10 --set training.checkpoint_every=0 --set training.batch_size=32)

# 1. A few steps train and evaluate; eval of the checkpoint gives the same accuracy.
"$genesis" train "$recipe" --out "$work/run" "${short[@]}" -q >/dev/null 2>"$work/train.err"; rc=$?
check "train on a CSV" 0 $rc
[ $rc -eq 0 ] || cat "$work/train.err"
acc=$(sed -n 's/.*"accuracy": *\([0-9.eE+-]*\).*/\1/p' "$work/run/summary.json" | head -n 1)
awk -v a="$acc" 'BEGIN { exit !(a > 0.4) }' && ok "40 steps: test accuracy $acc > 0.4 (4 classes)" || fail "accuracy '$acc' <= 0.4"
json=$("$genesis" eval --checkpoint "$work/run" 2>/dev/null)
echo "$json" | grep -q "\"accuracy\":$acc" && ok "eval reproduces the final accuracy" || fail "eval printed '$json', expected $acc"
# The checkpoint keeps the encoding (data.json): eval after the training file changed encodes
# the test rows as training did (other statistics would change the accuracy).
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["classes"] == ["bronze", "gold", "platinum", "silver"], j' \
  "$work/run/checkpoints/latest/data.json" && ok "the checkpoint keeps the encoding and the class names" \
  || fail "checkpoint data.json: $(cat "$work/run/checkpoints/latest/data.json")"
for i in $(seq 1 300); do echo "90,900000,120,40,9000,west,pro,\"Dover, DE\",gold"; done >>"$data/train.csv"
json=$("$genesis" eval --checkpoint "$work/run" 2>/dev/null)
echo "$json" | grep -q "\"accuracy\":$acc" && ok "eval after the training file changed: the checkpoint's statistics" \
  || fail "eval after the training file changed printed '$json', expected $acc"
# So does a resumed run: its checkpoints carry the first run's statistics, not the grown file's.
cp "$work/run/checkpoints/latest/data.json" "$work/data_before.json"
"$genesis" train "$recipe" --out "$work/run" --resume "${short[@]}" --set training.steps=60 -q >/dev/null \
  2>"$work/resume.err" || fail "resume after the training file changed: $(cat "$work/resume.err")"
cmp -s "$work/data_before.json" "$work/run/checkpoints/latest/data.json" \
  && ok "a resumed run encodes with its checkpoint's statistics" || fail "the resumed run's data.json changed"
python3 "$src/data/make_csv.py" --out "$work" --train 600 --test 200 >/dev/null

# A seeded share of the training rows as the validation set.
"$genesis" train "$recipe" --out "$work/val" "${short[@]}" --set data.val_fraction=0.25 --set eval.split=val \
  >/dev/null 2>"$work/val.err"; rc=$?
[ $rc -eq 0 ] && grep -q "450 training rows, 150 validation rows (data.val_fraction)" "$work/val.err" \
  && grep -q '"eval_split": "val"' "$work/val/summary.json" && ok "data.val_fraction = 0.25: 450 training and 150 validation rows" \
  || fail "val_fraction: rc $rc, $(cat "$work/val.err")"

# 2. Bad input: exit 2, one line on stderr naming what, where and what to do.
head -n 3 "$data/train.csv" >"$work/ragged.csv" && echo "1,2,3" >>"$work/ragged.csv"
bad "ragged row" "ragged.csv:4: 3 fields, but the header has 9 columns" --set "data.path=$work/ragged.csv"
{ head -n 2 "$data/train.csv"; echo "forty,50000,10,2,0,north,pro,Dover,gold"; } >"$work/text.csv"
bad "a word in a numeric column" "text.csv:3: column 'age' holds 'forty', which is not a finite number" \
  --set "data.path=$work/text.csv"
bad "no label column" "train.csv:1: no column 'grade' (data.label)" --set data.label=grade
: >"$work/empty.csv"
bad "an empty file" "empty.csv: the file is empty" --set "data.path=$work/empty.csv"
{ head -n 1 "$data/test.csv"; echo "40,50000,10,2,0,north,pro,Dover,diamond"; } >"$work/val.csv"
bad "a validation label the training rows lack" "val.csv:2: label 'diamond' is not among the training data's classes" \
  --set "data.val_path=$work/val.csv" --set eval.split=val
bad "a missing value without data.impute" "column '.*' is empty; fill the value, or set data.impute" --set data.impute=none
bad "model.input_shape of another width" "set model.input_shape = \[19\]" --set "model.input_shape=[20]"

finish "csv"
