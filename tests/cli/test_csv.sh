#!/usr/bin/env bash
# `[data] name = "csv"` end to end (issue 38): a small table from data/make_csv.py trains
# recipes/csv_tiers_mlp.toml for a few steps and eval reproduces its accuracy, with the
# checkpoint's encoding after the training file changed (and so does a resumed run); data.val_fraction splits; bad tables and
# recipes exit 2 with one line naming file:line and column: ragged rows, a non-numeric value in
# a numeric column, a missing label column, an empty file, a validation label the training rows
# lack, and a model.input_shape that is not the encoded width. A regression (data.task) learns
# the spend table and reports r2, mae and rmse. genesis predict gives each row's class (or number)
# as JSON, agreeing with eval.
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

# genesis predict: one JSON object per test row, whose classes score the accuracy eval reports;
# rows without the label column are predicted alike; a file missing a training column exits 2.
"$genesis" predict --checkpoint "$work/run" "$data/test.csv" >"$work/predict.jsonl" 2>"$work/predict.err"
check "predict on the test rows" 0 $?
acc=$("$genesis" eval --checkpoint "$work/run" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["accuracy"])')
python3 - "$work/predict.jsonl" "$acc" <<'PY' && ok "predict: 200 rows, probabilities summing to 1, its classes score eval's accuracy $acc" \
  || fail "predict output: $(head -c 300 "$work/predict.jsonl") $(cat "$work/predict.err")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) == 200 and rows[0]["input"].endswith("test.csv:2"), rows[:1]
assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-9 and r["class"] == max(r["probabilities"], key=r["probabilities"].get) for r in rows)
assert sorted(rows[0]["probabilities"]) == ["bronze", "gold", "platinum", "silver"]
accuracy = sum(r["class"] == r["label"] for r in rows) / len(rows)
assert abs(accuracy - float(sys.argv[2])) < 1e-12, (accuracy, sys.argv[2])
PY
python3 -c '
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="", encoding="utf-8")))
csv.writer(open(sys.argv[2], "w", newline="", encoding="utf-8")).writerows([r[:-1] for r in rows])' "$data/test.csv" "$work/unlabelled.csv"
"$genesis" predict --checkpoint "$work/run/checkpoints" "$work/unlabelled.csv" >"$work/unlabelled.jsonl" 2>&1
python3 - "$work/predict.jsonl" "$work/unlabelled.jsonl" <<'PY' && ok "predict: rows without the label column get the same classes" \
  || fail "predict without labels: $(head -c 300 "$work/unlabelled.jsonl")"
import json, sys
a = [json.loads(line) for line in open(sys.argv[1])]
b = [json.loads(line) for line in open(sys.argv[2])]
assert len(a) == len(b) and all(x["class"] == y["class"] and "label" not in y for x, y in zip(a, b))
PY
python3 -c '
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="", encoding="utf-8")))
csv.writer(open(sys.argv[2], "w", newline="", encoding="utf-8")).writerows([r[:7] + r[8:] for r in rows])' "$data/test.csv" "$work/nocity.csv"
"$genesis" predict --checkpoint "$work/run" "$work/nocity.csv" >/dev/null 2>"$work/err"
[ $? -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "nocity.csv:1: no column 'city'" "$work/err" \
  && ok "predict on a file without a training column: exit 2, '$(cut -c1-90 "$work/err")'" || fail "predict nocity: $(cat "$work/err")"
"$genesis" predict --checkpoint "$work/run" "$work/absent.csv" >/dev/null 2>"$work/err"
[ $? -eq 2 ] && grep -q "absent.csv is not a file" "$work/err" && ok "predict on a missing file: exit 2" || fail "predict absent: $(cat "$work/err")"

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
bad "one class for a classifier" "model.num_classes = 1: a classifier needs 2 or more classes" --set model.num_classes=1

# 3. Regression (data.task = "regression"): recipes/csv_spend_mlp.toml on data/make_csv.py's spend
# table learns (test r2 above 0.8 after 300 steps; the noise leaves about 0.98 reachable), reports
# mae and rmse in the label's units, keeps the label's statistics in the checkpoint, and eval
# reproduces the metrics; a word for a label, and a model of two outputs, exit 2.
python3 "$src/data/make_csv.py" --out "$work" --train 2000 --test 400 --task regression >/dev/null \
  || fail "make_csv.py --task regression failed"
spend="$src/recipes/csv_spend_mlp.toml"
rshort=(--set "data.path=$work/csv_spend/train.csv" --set "data.test_path=$work/csv_spend/test.csv"
        --set training.steps=300 --set training.log_every=100 --set training.batch_size=64 --set scheduler.warmup_steps=10)
"$genesis" train "$spend" --out "$work/spend" "${rshort[@]}" -q >/dev/null 2>"$work/spend.err"; rc=$?
check "train a regression on a CSV" 0 $rc
[ $rc -eq 0 ] || cat "$work/spend.err"
python3 - "$work/spend" <<'PY' && ok "regression: test r2 > 0.8, mae and rmse in the label's units, the label's statistics kept" \
  || fail "regression metrics: $(cat "$work/spend/summary.json")"
import json, sys
run = sys.argv[1]
m = json.load(open(run + "/summary.json"))["eval"]
assert m["r2"] > 0.8 and 0 < m["mae"] < m["rmse"] < 40 and "accuracy" not in m, m
t = json.load(open(run + "/checkpoints/latest/data.json"))["target"]
assert t["name"] == "spend" and 90 < t["mean"] < 110 and t["std"] > 10, t
PY
json=$("$genesis" eval --checkpoint "$work/spend" 2>/dev/null)
r2=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["eval"]["r2"])' "$work/spend/summary.json")
python3 -c 'import json, sys; assert abs(json.loads(sys.argv[1])["r2"] - float(sys.argv[2])) < 1e-12' "$json" "$r2" \
  && ok "eval reproduces the regression's r2 ($r2)" || fail "eval printed '$json', expected r2 $r2"
# predict: the predictions, in the label's units, give eval's r2.
"$genesis" predict --checkpoint "$work/spend" "$work/csv_spend/test.csv" >"$work/spend.jsonl" 2>"$work/err"
python3 - "$work/spend.jsonl" "$r2" <<'PY' && ok "predict: a regression's predictions in the label's units give eval's r2" \
  || fail "regression predict: $(head -c 300 "$work/spend.jsonl") $(cat "$work/err")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
y = [r["label"] for r in rows]
mean = sum(y) / len(y)
r2 = 1 - sum((r["prediction"] - r["label"]) ** 2 for r in rows) / sum((v - mean) ** 2 for v in y)
assert len(rows) == 400 and abs(r2 - float(sys.argv[2])) < 1e-5, (len(rows), r2, sys.argv[2])
PY
# On 2 ranks of 32 rows the regression takes the steps of 1 process of 64 (within 1e-5) and its
# evaluation, summed over the ranks, gives the same r2.
ranks=(--set training.steps=40 --set training.log_every=1 --set run.threads=1 -q)
"$genesis" train "$spend" --out "$work/spend1" "${rshort[@]}" "${ranks[@]}" >/dev/null 2>&1 \
  && "$genesis" train "$spend" --out "$work/spend2" "${rshort[@]}" "${ranks[@]}" --set training.batch_size=32 \
    --nproc-per-node 2 >/dev/null 2>"$work/spend2.err"
losses_match "$work/spend1" "$work/spend2" 40 && python3 - "$work/spend1" "$work/spend2" <<'PY' \
  && ok "regression on 2 ranks x 32 = 1 process x 64: losses within 1e-5, the same r2" \
  || fail "regression over 2 ranks: $(cat "$work/spend2.err")"
import json, sys
e1, e2 = (json.load(open(run + "/summary.json"))["eval"] for run in sys.argv[1:])
assert abs(e1["r2"] - e2["r2"]) < 1e-6, (e1, e2)
PY
{ head -n 2 "$work/csv_spend/train.csv"; echo "40,50000,10,2,0,north,pro,Dover,lots"; } >"$work/worded.csv"
"$genesis" train "$spend" --out "$work/bad_spend" "${rshort[@]}" --set "data.path=$work/worded.csv" -q >/dev/null 2>"$work/err"
[ $? -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "worded.csv:3: label 'lots' is not a finite number" "$work/err" \
  && ok "a word for a regression label: exit 2, '$(cut -c1-100 "$work/err")'" || fail "worded label: $(cat "$work/err")"
"$genesis" train "$spend" --out "$work/bad_spend" "${rshort[@]}" --set model.num_classes=2 -q >/dev/null 2>"$work/err"
[ $? -eq 2 ] && grep -q "a regression (data.task = \"regression\") predicts one number" "$work/err" \
  && ok "a regression model of 2 outputs: exit 2" || fail "num_classes = 2 for a regression: $(cat "$work/err")"
"$genesis" train "$src/recipes/fashion_mnist_mlp.toml" --out "$work/bad_spend" --set data.task=regression -q >/dev/null 2>"$work/err"
[ $? -eq 2 ] && grep -q 'it needs data.name = "csv"' "$work/err" \
  && ok "data.task = regression on Fashion-MNIST: exit 2" || fail "regression on fashion_mnist: $(cat "$work/err")"

finish "csv"
