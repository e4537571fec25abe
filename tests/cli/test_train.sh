#!/usr/bin/env bash
# End-to-end contract of `genesis train` / `genesis eval` on Fashion-MNIST (CPU):
# a short MLP run reaches >= 80% test accuracy; resuming from a checkpoint reproduces the
# uninterrupted run's losses bit for bit; SIGTERM stops cleanly with a checkpoint (exit
# 130); recipe, run-directory and checkpoint errors exit 2 or 1 with one line on stderr.
#   tests/cli/test_train.sh PATH_TO_GENESIS SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
recipe="$src/recipes/fashion_mnist_mlp.toml"
# Results are bit-identical for a fixed thread count, and the automatic count follows the
# load of the machine (docs/architecture.md, CPU threads): the runs compared here fix it.
export OMP_NUM_THREADS=2

# The data is a dependency like the compiler: without it this test has not run, which is a failure.
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "FAIL: /usr/share/datasets/fashion-mnist is missing: run scripts/setup.sh (it installs dataset-fashion-mnist)"
  exit 1
fi

# 1. A short run learns: >= 80% test accuracy.
summary=$("$genesis" train "$recipe" --out "$work/short" --set training.steps=300 --set training.epochs=1 -q 2>"$work/short.err")
rc=$?
[ $rc -eq 0 ] || { cat "$work/short.err"; fail "short run exited $rc"; }
acc=$(sed -n 's/.*"accuracy": *\([0-9.eE+-]*\).*/\1/p' "$work/short/summary.json" | head -n 1)
if awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }'; then ok "300-step MLP test accuracy $acc >= 0.80"; else fail "accuracy $acc < 0.80"; fi
for f in recipe.toml metrics.jsonl summary.json checkpoints/latest/model.safetensors checkpoints/latest/optimizer.safetensors checkpoints/latest/trainer.json checkpoints/latest/recipe.toml; do
  [ -e "$work/short/$f" ] || fail "run directory lacks $f"
done
[ "$summary" = "$work/short/summary.json" ] || fail "train printed '$summary' instead of the summary path"

# 2. eval prints JSON with the same accuracy, with the given recipe or the checkpoint's own.
json=$("$genesis" eval "$recipe" --checkpoint "$work/short/checkpoints" 2>/dev/null)
echo "$json" | grep -q "\"accuracy\":$acc" && ok "eval reproduces the final accuracy" || fail "eval printed '$json', expected accuracy $acc"
[ "$("$genesis" eval --checkpoint "$work/short" 2>/dev/null)" = "$json" ] && ok "eval without a recipe uses the checkpoint's" \
  || fail "eval without a recipe differs from '$json'"
# One --json convention: recipe show, eval and info print JSON on stdout with --json.
"$genesis" recipe show "$recipe" --set optimizer.lr=0.002 --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["optimizer"]["lr"] == 0.002 and j["model"]["hidden"] == [256, 128] and j["run"]["tensorboard"] is True, j' \
  && "$genesis" info --json | python3 -c 'import json, sys; json.load(sys.stdin)' \
  && [ "$("$genesis" eval --checkpoint "$work/short" --json 2>/dev/null)" = "$json" ] \
  && ok "recipe show, info and eval take --json" || fail "--json convention"
# On a terminal eval draws a progress bar on stderr; -q leaves only the JSON.
if command -v script >/dev/null; then
  script -qc "'$genesis' eval --checkpoint '$work/short'" /dev/null | tr '\r' '\n' >"$work/tty.out"
  grep -q "100% evaluating 10/10" "$work/tty.out" && grep -q "\"accuracy\":$acc" "$work/tty.out" \
    && ok "eval shows its progress on a terminal" || fail "eval on a terminal: $(cat "$work/tty.out")"
  script -qc "'$genesis' eval -q --checkpoint '$work/short'" /dev/null | tr -d '\r' >"$work/tty_q.out"
  [ "$(grep -cv '^$' "$work/tty_q.out")" = 1 ] && grep -q "\"accuracy\":$acc" "$work/tty_q.out" \
    && ok "eval -q prints only the metrics" || fail "eval -q on a terminal: $(cat "$work/tty_q.out")"
fi
# genesis predict takes CSV checkpoints only: a Fashion-MNIST one is a usage error naming why.
"$genesis" predict --checkpoint "$work/short" "$recipe" >/dev/null 2>"$work/predict.err"
[ $? -eq 2 ] && grep -q 'predict reads rows of CSV files' "$work/predict.err" \
  && ok "predict on a Fashion-MNIST checkpoint: exit 2" || fail "predict on fashion_mnist: $(cat "$work/predict.err")"
# The logged loss is the mean of the window's step losses.
"$genesis" train "$recipe" --out "$work/every1" --set training.steps=10 --set training.log_every=1 --set training.eval_every=0 -q >/dev/null 2>&1
"$genesis" train "$recipe" --out "$work/every5" --set training.steps=10 --set training.log_every=5 --set training.eval_every=0 -q >/dev/null 2>&1
python3 - "$work/every1/metrics.jsonl" "$work/every5/metrics.jsonl" <<'PY' && ok "the logged loss is the mean over its window" || fail "window means differ"
import json, sys
every1 = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1])) if "loss" in j}
every5 = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[2])) if "loss" in j}
for end in (5, 10):
    mean = sum(every1[s] for s in range(end - 4, end + 1)) / 5
    assert abs(every5[end] - mean) <= 1e-9 * abs(mean), (end, every5[end], mean)
PY

# checkpoint_every = -1 (benchmarks) writes no checkpoint, not even at the end; a stop signal says so.
"$genesis" train "$recipe" --out "$work/nockpt" --set training.steps=10 --set training.eval_every=0 \
  --set training.checkpoint_every=-1 -q >/dev/null 2>"$work/nockpt.err"
rc=$?
[ $rc -eq 0 ] && [ -f "$work/nockpt/summary.json" ] && [ -z "$(ls -A "$work/nockpt/checkpoints" 2>/dev/null)" ] \
  && ok "training.checkpoint_every = -1 writes no checkpoint" \
  || fail "checkpoint_every = -1: exit $rc, checkpoints: $(ls "$work/nockpt/checkpoints" 2>&1) $(cat "$work/nockpt.err")"
"$genesis" train "$recipe" --out "$work/nockpt_sig" --set training.steps=100000 --set training.epochs=1000 \
  --set training.eval_every=0 --set training.checkpoint_every=-1 --set training.log_every=1 >/dev/null 2>"$work/nockpt_sig.err" &
pid=$!
for _ in $(seq 100); do grep -q '"step"' "$work/nockpt_sig/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 130 ] && grep -q "no checkpoint written (training.checkpoint_every = -1)" "$work/nockpt_sig.err" \
  && [ -z "$(ls -A "$work/nockpt_sig/checkpoints" 2>/dev/null)" ] \
  && ok "a stop signal under checkpoint_every = -1 exits 130 and says no checkpoint was written" \
  || fail "stop under checkpoint_every = -1: exit $rc, $(cat "$work/nockpt_sig.err")"

# 3. Resume equals uninterrupted: continue from the step-20 checkpoint of a 40-step run.
common=(--set training.steps=40 --set training.log_every=5 --set training.checkpoint_every=20 --set training.keep_last=5 --set model.dropout=0.1 -q)
"$genesis" train "$recipe" --out "$work/full" "${common[@]}" >/dev/null 2>&1 || fail "40-step run failed"
mkdir -p "$work/resumed/checkpoints"
cp -r "$work/full/checkpoints/step_00000020" "$work/resumed/checkpoints/"
ln -s step_00000020 "$work/resumed/checkpoints/latest"
cp "$work/full/recipe.toml" "$work/resumed/recipe.toml"
"$genesis" train "$recipe" --out "$work/resumed" --resume "${common[@]}" >/dev/null 2>"$work/resume.err" || { cat "$work/resume.err"; fail "resume failed"; }
steps_losses() { grep '"loss"' "$1" | grep -v '"eval"' | sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' | awk '$1 > 20'; }
a=$(steps_losses "$work/full/metrics.jsonl"); b=$(steps_losses "$work/resumed/metrics.jsonl")
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "resumed losses at steps 25..40 are bit-identical"; else fail "resume differs: full [$a] resumed [$b]"; fi
cmp -s "$work/full/checkpoints/step_00000040/model.safetensors" "$work/resumed/checkpoints/step_00000040/model.safetensors" \
  && ok "final weights are byte-identical" || fail "final weights differ after resume"

# 3b. Resuming after a crash (latest checkpoint older than the last logged step) logs each step once.
cp -r "$work/full" "$work/crashed"
rm -rf "$work/crashed/checkpoints/step_00000040" "$work/crashed/checkpoints/latest" "$work/crashed/summary.json"
ln -s step_00000020 "$work/crashed/checkpoints/latest"
"$genesis" train "$recipe" --out "$work/crashed" --resume "${common[@]}" >/dev/null 2>&1 || fail "resume after crash failed"
dups=$(grep -v '"eval"' "$work/crashed/metrics.jsonl" | grep -o '"step":[0-9]*' | sort | uniq -d)
[ -z "$dups" ] && ok "resume after a crash logs every step once" || fail "steps logged twice after resume: $dups"
[ "$(steps_losses "$work/crashed/metrics.jsonl")" = "$a" ] && ok "crash-resumed losses match" || fail "crash-resumed losses differ"

# 3b. A damaged latest checkpoint (issue 14 item 12): --resume warns and continues from the newest
# one that reads, ending where the uninterrupted run ended.
mkdir -p "$work/damaged/checkpoints"
cp -r "$work/full/checkpoints/step_00000020" "$work/full/checkpoints/step_00000040" "$work/damaged/checkpoints/"
ln -s step_00000040 "$work/damaged/checkpoints/latest"
cp "$work/full/recipe.toml" "$work/damaged/recipe.toml"
grep -E '"step":(5|10|15|20|25|30|35|40)[,}]' "$work/full/metrics.jsonl" >"$work/damaged/metrics.jsonl"
sed -i 's/"step": 40/"step": "forty"/' "$work/damaged/checkpoints/step_00000040/trainer.json"
"$genesis" train "$recipe" --out "$work/damaged" --resume "${common[@]}" >/dev/null 2>"$work/damaged.err"
rc=$?
[ $rc -eq 0 ] && grep -q "cannot be read.*field 'step'.*resumed from step_00000020" "$work/damaged.err" \
  && [ "$(steps_losses "$work/damaged/metrics.jsonl")" = "$a" ] \
  && cmp -s "$work/full/checkpoints/step_00000040/model.safetensors" "$work/damaged/checkpoints/step_00000040/model.safetensors" \
  && ok "a damaged latest checkpoint: resumed from the one before, same losses and final weights" \
  || fail "damaged latest checkpoint: exit $rc, $(cat "$work/damaged.err")"

# 3c. A `latest` pointer that is missing, a symlink loop or pointing outside the run (issue 40):
# --resume warns and continues from the newest step directory, with the uninterrupted run's result.
for pointer in missing loop root; do
  dir="$work/pointer_$pointer"
  mkdir -p "$dir/checkpoints"
  cp -r "$work/full/checkpoints/step_00000020" "$dir/checkpoints/"
  cp "$work/full/recipe.toml" "$dir/recipe.toml"
  grep -E '"step":(5|10|15|20)[,}]' "$work/full/metrics.jsonl" >"$dir/metrics.jsonl"
  case $pointer in
    loop) ln -s latest "$dir/checkpoints/latest" ;;
    root) ln -s / "$dir/checkpoints/latest" ;;
  esac
  "$genesis" train "$recipe" --out "$dir" --resume "${common[@]}" >/dev/null 2>"$dir.err"
  rc=$?
  [ $rc -eq 0 ] && grep -q "^warning: .*resumed from step_00000020, the newest one that can" "$dir.err" \
    && ! grep -q "filesystem error" "$dir.err" \
    && cmp -s "$work/full/checkpoints/step_00000040/model.safetensors" "$dir/checkpoints/step_00000040/model.safetensors" \
    && ok "latest $pointer: resumed from the newest step with a warning, same final weights" \
    || fail "latest $pointer: exit $rc, $(cat "$dir.err")"
done

# 4. SIGTERM: finish the step, checkpoint, exit 130; --resume continues.
"$genesis" train "$recipe" --out "$work/sig" --set training.steps=100000 --set training.log_every=1000 -q >/dev/null 2>"$work/sig.err" &
pid=$!
for _ in $(seq 1 100); do [ -s "$work/sig/metrics.jsonl" ] || [ -d "$work/sig/checkpoints" ] && break; sleep 0.1; done
sleep 1
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 130 ] && ok "SIGTERM exits 130" || fail "SIGTERM exit code $rc"
if [ -f "$work/sig/checkpoints/latest/trainer.json" ]; then
  stopped=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$work/sig/checkpoints/latest/trainer.json")
  "$genesis" train "$recipe" --out "$work/sig" --resume --set training.steps=$((stopped + 3)) -q >/dev/null 2>&1 \
    && ok "resumed after SIGTERM at step $stopped" || fail "resume after SIGTERM failed"
else
  fail "no checkpoint after SIGTERM"
fi

# 4c. --resume with more steps under a cosine schedule: the schedule is fitted to the new total,
# and one note says where that takes the learning rate (from its floor back up).
"$genesis" train "$recipe" --out "$work/cos" --set training.steps=20 -q >/dev/null 2>&1 || fail "20-step run failed"
"$genesis" train "$recipe" --out "$work/cos" --resume --set training.steps=40 >/dev/null 2>"$work/cos.err"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c "schedule is" "$work/cos.err")" = 1 ] && grep -qx "note: training.steps 20 -> 40: the cosine \
schedule is stretched to the new total, so the learning rate rises from 6.2e-06 to 5.0e-04 at step 21" "$work/cos.err" \
  && ok "--resume with more steps under cosine: one note with the learning rate before and after" \
  || fail "--resume 20 -> 40 steps: exit $rc, $(cat "$work/cos.err")"
"$genesis" train "$recipe" --out "$work/const" --set training.steps=10 --set scheduler.name=constant -q >/dev/null 2>&1
"$genesis" train "$recipe" --out "$work/const" --resume --set training.steps=20 --set scheduler.name=constant \
  >/dev/null 2>"$work/const.err"
rc=$?
[ $rc -eq 0 ] && grep -q "resumed" "$work/const.err" && ! grep -q "schedule is" "$work/const.err" \
  && ok "no schedule note where the schedule ignores the total" || fail "constant schedule resume: exit $rc, $(cat "$work/const.err")"

# 4b. SIGTERM inside a long gradient accumulation (a step of 100000 micro-batches never ends):
# the stop is taken between micro-batches, the step dropped, exit 130 with a checkpoint.
"$genesis" train "$recipe" --out "$work/accum" --set training.steps=2 --set training.batch_size=8 \
  --set training.grad_accum_steps=100000 >/dev/null 2>"$work/accum.err" &
pid=$!
sleep 3
kill -TERM $pid
for _ in $(seq 1 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then
  kill -KILL $pid
  fail "SIGTERM during gradient accumulation: still running 10 s later"
else
  wait $pid
  rc=$?
  [ $rc -eq 130 ] && grep -q "between micro-batches" "$work/accum.err" && [ -f "$work/accum/checkpoints/latest/trainer.json" ] \
    && ok "SIGTERM between micro-batches exits 130 with a checkpoint" \
    || fail "SIGTERM during accumulation: rc=$rc $(tail -1 "$work/accum.err")"
fi

# 5. A sweep tabulates one row per value.
table=$(GENESIS="$genesis" SWEEP_DIR="$work/sweep" bash "$src/scripts/sweep.sh" "$recipe" optimizer.lr 1e-3 2e-3 -- --set training.steps=5 -q 2>/dev/null)
if [ "$(echo "$table" | grep -c '^| [12]e-3 | 0\.')" = 2 ]; then ok "sweep table has a row per value"; else fail "sweep table: $table"; fi
grep -q '"peak_memory_bytes": [1-9]' "$work/short/summary.json" && ok "summary reports peak memory" || fail "summary has no peak memory"
# A classifier's summary holds its confusion matrix over the named classes, agreeing with its
# accuracy, and macro-F1 beside it; genesis report draws a table by class from it.
python3 - "$work/short/summary.json" <<'PY' && ok "summary: the confusion matrix by class name, agreeing with accuracy; macro_f1" \
  || fail "summary's confusion matrix: $(head -c 400 "$work/short/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
m, e = s["confusion_matrix"], s["eval"]
assert m["classes"][0] == "T-shirt/top" and m["classes"][9] == "Ankle boot" and m["split"] == "test", m["classes"]
counts = m["counts"]
assert sum(map(sum, counts)) == 10000 and abs(sum(counts[i][i] for i in range(10)) / 10000 - e["accuracy"]) < 1e-12
f1 = [2 * counts[c][c] / (sum(counts[c]) + sum(r[c] for r in counts)) for c in range(10)]
assert abs(sum(f1) / 10 - e["macro_f1"]) < 1e-12, (f1, e)
PY
"$genesis" report "$work/short" --out "$work/short_report/index.html" >/dev/null 2>&1 \
  && grep -q "<h2>By class: " "$work/short_report/index.html" && grep -q "<td>Ankle boot</td><td>1000</td>" "$work/short_report/index.html" \
  && ok "report: a table by class, with names and support" || fail "report has no table by class"
# genesis report over the sweep's runs: an HTML page and four SVG files that parse and render,
# the swept key in the table of differing keys.
"$genesis" report "$work/sweep"/*/ --out "$work/report/index.html" >"$work/report.out" 2>"$work/report.err"
rc=$?
svgs=$(grep -c '\.svg$' "$work/report.out")
if [ $rc -eq 0 ] && [ "$svgs" = 4 ] && grep -q "<td>optimizer.lr</td>" "$work/report/index.html" \
    && python3 -c 'import sys, xml.etree.ElementTree as E; [E.parse(f) for f in sys.argv[1:]]' $(grep '\.svg$' "$work/report.out"); then
  ok "report: index.html and 4 SVG files, the swept optimizer.lr listed"
else
  fail "report: exit $rc, $(cat "$work/report.err" "$work/report.out")"
fi
if command -v rsvg-convert >/dev/null 2>&1; then
  rsvg-convert "$work/report/index_loss.svg" -o "$work/loss.png" && [ "$(wc -c <"$work/loss.png")" -gt 2000 ] \
    && ok "report: the loss chart renders" || fail "report: rsvg-convert could not render the loss chart"
fi
expect_report=$("$genesis" report "$work/nonexistent" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && echo "$expect_report" | grep -q "has no metrics.jsonl" && ok "report of a non-run directory exits 2" \
  || fail "report of a non-run directory: exit $rc, $expect_report"

# 6. Bad input: exit codes and one-line messages.
expect() {  # expect NAME CODE PATTERN -- command...
  local name=$1 code=$2 pattern=$3
  shift 4
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne "$code" ]; then fail "$name: exit $rc, expected $code ($(head -c 300 "$work/err"))"; return; fi
  if ! grep -q -- "$pattern" "$work/err"; then fail "$name: stderr lacks '$pattern': $(cat "$work/err")"; return; fi
  [ "$(wc -l <"$work/err")" -le 1 ] || { fail "$name: more than one line on stderr"; return; }
  ok "$name"
}
printf '[run\nname = "x"\n' >"$work/malformed.toml"
printf '[run]\nname = "x"\n[model]\nname = "mlp"\n[optimizer]\nname = "adamw"\nlr = 1e-3\nmomentun = 0.9\n[training]\nsteps = 1\n' >"$work/unknown.toml"
printf '[run]\nname = "x"\n[model]\nname = "mlp"\n[optimizer]\nname = "adamw"\nlr = "fast"\n[training]\nsteps = 1\n' >"$work/type.toml"
printf '[run]\nname = "x"\n[model]\nname = "mlp"\n[optimizer]\nname = "adamw"\nlr = -1.0\n[training]\nsteps = 1\n' >"$work/negative.toml"
printf '[run]\nname = "x"\n[model]\nname = "mlp"\n[optimizer]\nname = "adamax"\nlr = 1e-3\n[training]\nsteps = 1\n' >"$work/optname.toml"
expect "malformed TOML" 2 "malformed.toml:" -- "$genesis" train "$work/malformed.toml" --out "$work/e1"
expect "unknown key with did-you-mean" 2 "momentum" -- "$genesis" train "$work/unknown.toml" --out "$work/e2"
expect "wrong type" 2 "type.toml:7" -- "$genesis" train "$work/type.toml" --out "$work/e3"
expect "negative learning rate" 2 "negative.toml:7" -- "$genesis" train "$work/negative.toml" --out "$work/e4"
expect "unknown optimizer lists valid ones" 2 "adamw" -- "$genesis" train "$work/optname.toml" --out "$work/e5"
expect "unknown scheduler" 2 "cosine" -- "$genesis" train "$recipe" --set scheduler.name=cosin --out "$work/e6"
expect "missing data file names path and package" 1 "dataset-fashion-mnist" -- "$genesis" train "$recipe" --set data.path=/nonexistent --out "$work/e7"
expect "batch larger than the training set" 2 "exceeds the 60000 samples" -- "$genesis" train "$recipe" --set training.batch_size=100000 --out "$work/e10"
expect "--resume without checkpoint" 2 "no checkpoint" -- "$genesis" train "$recipe" --resume --out "$work/e8"
# A model that cannot take the data's samples: one line naming both keys, before any run directory.
expect "input_shape other than the samples'" 2 \
  'model.input_shape \[1, 32, 32\] does not match the data.s samples \[1, 28, 28\] (data.name = "fashion_mnist"); set model.input_shape = \[1, 28, 28\]' \
  -- "$genesis" train "$recipe" --set 'model.input_shape=[1, 32, 32]' --out "$work/e12"
expect "a cnn's input_shape other than the samples'" 2 "model.input_shape \[3, 28, 28\] does not match" \
  -- "$genesis" train "$recipe" --set model.name=cnn --set 'model.input_shape=[3, 28, 28]' --out "$work/e13"
expect "fewer classes than the labels'" 2 "model.num_classes = 5 is fewer than the data's 10 classes" \
  -- "$genesis" train "$recipe" --set model.num_classes=5 --out "$work/e14"
[ ! -e "$work/e12" ] && [ ! -e "$work/e13" ] && [ ! -e "$work/e14" ] && ok "no run directory for a model that does not fit the data" \
  || fail "a run directory was made for a model that does not fit the data"
# A run killed inside its first checkpoint write leaves recipe.toml and a stale temporary
# (checkpoints/step_N.tmp-PID of a dead process): --resume removes it and starts from step 0.
mkdir -p "$work/e11/checkpoints/step_00000003.tmp-3999999"
cp "$recipe" "$work/e11/recipe.toml"
if "$genesis" train "$recipe" --out "$work/e11" --resume --set training.steps=3 >/dev/null 2>"$work/e11.err" &&
  grep -q "has no checkpoint yet; starting from step 0" "$work/e11.err" && [ -e "$work/e11/checkpoints/latest" ] &&
  [ ! -e "$work/e11/checkpoints/step_00000003.tmp-3999999" ]; then
  ok "--resume after a kill inside the first checkpoint write starts from step 0"
else
  fail "--resume after a kill inside the first checkpoint write: $(cat "$work/e11.err")"
fi
# A failed start (e7: data missing) leaves recipe.toml and metrics.jsonl but no checkpoint: the
# retry reuses the directory, and --resume there starts from step 0 with a note.
if "$genesis" train "$recipe" --out "$work/e7" --set training.steps=3 -q >/dev/null 2>"$work/retry.err"; then
  ok "a failed start does not block the retry"
else
  fail "retry after a failed start: $(cat "$work/retry.err")"
fi
"$genesis" train "$recipe" --set data.path=/nonexistent --out "$work/e9" -q >/dev/null 2>&1
if "$genesis" train "$recipe" --out "$work/e9" --resume --set training.steps=3 >/dev/null 2>"$work/resume0.err" &&
    grep -q "starting from step 0" "$work/resume0.err"; then
  ok "--resume after a failed start starts from step 0 with a note"
else
  fail "--resume after a failed start: $(cat "$work/resume0.err")"
fi
# Non-finite training (lr 1e6 diverges within a few steps): stop ends with exit 1 naming the
# step and keeps the last finite checkpoint; skip trains on and counts the skipped steps.
"$genesis" train "$recipe" --out "$work/nan" --set optimizer.lr=1e6 --set training.steps=60 \
  --set training.checkpoint_every=2 --set training.log_every=20 -q >/dev/null 2>"$work/nan.err"
rc=$?
# The last checkpoint (every 2 steps) before the step the error names, whichever step that is.
bad=$(sed -n 's/.*step \([0-9]*\) had a non-finite.*/\1/p' "$work/nan.err" | head -n 1)
kept=$(printf 'step_%08d' $(( ${bad:-1} > 1 ? (bad - 1) / 2 * 2 : 0 )))
if [ $rc -eq 1 ] && [ -n "$bad" ] && [ "$(readlink "$work/nan/checkpoints/latest")" = "$kept" ]; then
  ok "non-finite loss stops with exit 1 and keeps the last finite checkpoint"
else
  fail "non-finite stop: rc=$rc latest=$(readlink "$work/nan/checkpoints/latest") $(cat "$work/nan.err")"
fi
"$genesis" train "$recipe" --out "$work/nanskip" --set optimizer.lr=1e6 --set training.steps=30 \
  --set training.on_nonfinite=skip -q >/dev/null 2>&1
skipped=$(sed -n 's/.*"nonfinite_steps": *\([0-9]*\).*/\1/p' "$work/nanskip/summary.json" | head -n 1)
[ -n "$skipped" ] && [ "$skipped" -gt 0 ] && ok "on_nonfinite = skip counts $skipped skipped steps" \
  || fail "on_nonfinite = skip: nonfinite_steps '$skipped'"
"$genesis" train "$recipe" --out "$work/nanskip" --resume --set training.steps=32 --set training.on_nonfinite=skip \
  --set run.threads=1 2>&1 >/dev/null | grep -q "warning: resuming with 1 CPU threads" \
  && ok "resuming with another thread count warns" || fail "no warning when resuming with another thread count"
before=$(ls -l "$work/short" | md5sum)
expect "existing run directory refused" 2 "already exists" -- "$genesis" train "$recipe" --out "$work/short"
[ "$(ls -l "$work/short" | md5sum)" = "$before" ] && ok "refused run directory untouched" || fail "refused run directory was modified"
# eval takes the model and the preprocessing from the checkpoint's own recipe (issue 15, bug 3).
json2=$("$genesis" eval "$recipe" --set model.activation=gelu --set data.normalize=false --checkpoint "$work/short" 2>"$work/evalwarn.err")
[ "$json2" = "$json" ] && grep -q 'eval ignores model.activation = "gelu": the checkpoint was trained with "relu"' "$work/evalwarn.err" \
  && grep -q "eval ignores data.normalize = false" "$work/evalwarn.err" \
  && ok "eval keeps the checkpoint's model and preprocessing, and says which keys it ignored" \
  || fail "eval with other model/data keys printed '$json2' (expected '$json'): $(cat "$work/evalwarn.err")"
mkdir -p "$work/norecipe" && cp "$work/short/checkpoints/latest/"{model.safetensors,trainer.json} "$work/norecipe/"
expect "checkpoint of another model" 1 "does not fit the model" -- "$genesis" eval "$recipe" --set model.hidden=[64] --checkpoint "$work/norecipe"
# --resume against the checkpoint's recipe (issue 15, bug 2): keys that define the run are refused
# and nothing is written; a finished run with nothing left to do is left as it was.
before=$(cd "$work/short" && md5sum summary.json metrics.jsonl && ls -lR)
expect "--resume with another model" 2 "model.hidden \[256, 128\] -> \[64\]" -- "$genesis" train "$recipe" --out "$work/short" \
  --resume --set training.steps=300 --set training.epochs=1 --set model.hidden=[64] --set training.batch_size=64
"$genesis" train "$recipe" --out "$work/short" --resume --set training.steps=300 --set training.epochs=1 \
  --set optimizer.lr=0.1 >/dev/null 2>"$work/finished.err"
rc=$?
[ $rc -eq 0 ] && grep -q "warning: --resume with changed settings: optimizer.lr 0.001 -> 0.1" "$work/finished.err" \
  && grep -q "nothing to do" "$work/finished.err" && ok "--resume of a finished run with a new lr warns and does nothing" \
  || fail "--resume of a finished run: exit $rc, $(cat "$work/finished.err")"
[ "$(cd "$work/short" && md5sum summary.json metrics.jsonl && ls -lR)" = "$before" ] \
  && ok "refused and finished resumes leave the run directory untouched" || fail "a refused or finished resume modified the run"
cp -r "$work/short/checkpoints/latest/." "$work/corrupt"
head -c 1000 "$work/short/checkpoints/latest/model.safetensors" >"$work/corrupt/model.safetensors"
expect "truncated model.safetensors" 1 "model.safetensors" -- "$genesis" eval "$recipe" --checkpoint "$work/corrupt"

finish train
