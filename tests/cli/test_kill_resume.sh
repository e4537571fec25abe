#!/usr/bin/env bash
# Fault test: a short MLP run is killed with SIGKILL 20 times (half at a random moment from
# its start, so during data loading, training or a checkpoint write; half just after a new
# checkpoint appears, so often inside the next write or the pruning of an old one), resumed
# with --resume after each kill, and finished. Its final weights and its logged losses must
# equal an uninterrupted run's byte for byte, and no temporary directory may be left behind.
#   tests/cli/test_kill_resume.sh PATH_TO_GENESIS SOURCE_DIR [KILLS]
set -u
source "$(dirname "$0")/common.sh" "$@"
kills=${3:-20}
recipe="$src/recipes/fashion_mnist_mlp.toml"
export OMP_NUM_THREADS=1  # bit-identical results need a fixed thread count

requires "dataset-fashion-mnist" test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
sets=(--set training.steps=1500 --set training.epochs=1 --set training.checkpoint_every=3 --set training.keep_last=2
      --set training.log_every=5 --set training.eval_every=0)

"$genesis" train "$recipe" --out "$work/whole" "${sets[@]}" -q >/dev/null 2>"$work/whole.err" \
  || { cat "$work/whole.err"; fail "the uninterrupted run failed"; exit 1; }

latest() { readlink "$work/cut/checkpoints/latest" 2>/dev/null || echo none; }
RANDOM=7  # the same kill schedule on every run of the test
killed=0
for ((i = 1; i <= kills; ++i)); do
  before=$(latest)
  resume=()
  [ -d "$work/cut" ] && resume=(--resume)
  "$genesis" train "$recipe" --out "$work/cut" "${sets[@]}" "${resume[@]}" >/dev/null 2>>"$work/cut.err" &
  pid=$!
  if ((i % 2)); then
    sleep "$((RANDOM % 1500 / 1000)).$(printf '%03d' $((RANDOM % 1000)))"
  else
    # Until a new checkpoint is in place (or the run ends), then a few milliseconds more.
    for ((t = 0; t < 400; ++t)); do
      [ "$(latest)" != "$before" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.01
    done
    sleep "0.0$((RANDOM % 10))"
  fi
  if kill -9 "$pid" 2>/dev/null; then killed=$((killed + 1)); fi
  wait "$pid" 2>/dev/null
done
"$genesis" train "$recipe" --out "$work/cut" "${sets[@]}" --resume -q >/dev/null 2>>"$work/cut.err" \
  || { tail -5 "$work/cut.err"; fail "the final resume failed"; }
echo "info: $(grep -c "left by an interrupted checkpoint write" "$work/cut.err") kill(s) landed inside a checkpoint write"
[ "$killed" -ge $((kills / 2)) ] && ok "$killed of $kills attempts were killed mid-run (resumed after each)" \
  || fail "only $killed of $kills attempts were still running when killed: the run is too short for this test"

cmp -s "$work/whole/checkpoints/latest/model.safetensors" "$work/cut/checkpoints/latest/model.safetensors" \
  && ok "final weights are byte-identical to the uninterrupted run's" || fail "final weights differ"
losses() { grep -v '"eval"' "$1" | sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' | sort -n; }
[ "$(losses "$work/whole/metrics.jsonl")" = "$(losses "$work/cut/metrics.jsonl")" ] \
  && ok "logged losses equal the uninterrupted run's" || fail "logged losses differ"
[ "$(losses "$work/cut/metrics.jsonl" | wc -l)" = 300 ] && ok "metrics.jsonl holds each logged step once" \
  || fail "metrics.jsonl holds $(losses "$work/cut/metrics.jsonl" | wc -l) logged steps, expected 300"
leftovers=$(find "$work/cut" -name '*.tmp*' -o -name '*.deleting*' | head -3)
[ -z "$leftovers" ] && ok "no temporary directories left" || fail "left behind: $leftovers"
[ "$(ls "$work/cut/checkpoints" | grep -c '^step_')" = 2 ] && ok "keep_last = 2 checkpoints kept" \
  || fail "checkpoints: $(ls "$work/cut/checkpoints" | tr '\n' ' ')"

finish kill-resume
