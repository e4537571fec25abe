#!/usr/bin/env bash
# One process per directory: while a `genesis train` runs, another train, --resume, --overwrite
# or `--nproc-per-node 2` train of its run directory exits 2 at once, with one line naming the
# holder's pid, and the holder's metrics.jsonl, checkpoints and summary.json end byte for byte as
# those of the same run trained alone. Two trains started together: one runs as if alone, the
# other is refused. After a SIGKILL of the holder the next run starts without cleanup. Two
# `genesis data tokenize` of one --out: the second exits 2 and the first's shards are intact.
#   tests/cli/test_run_lock.sh PATH_TO_GENESIS SOURCE_DIR
#
# The holders are paused (SIGSTOP) while the others try: a stopped process keeps its lock, and the
# pause makes each attempt land inside the holder's run however long the attempts take.
set -u
source "$(dirname "$0")/common.sh" "$@"
recipe="$src/recipes/fashion_mnist_mlp.toml"
export OMP_NUM_THREADS=1  # the holder's files are compared byte for byte with a run alone

requires "dataset-fashion-mnist" test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
# The holder: long enough to outlive the attempts against it. The others: another seed and
# learning rate, so that any line or weight of theirs in the holder's directory would show.
run_a=(--seed 1 --set optimizer.lr=1e-3)
run_b=(--seed 2 --set optimizer.lr=3e-3)
common=(--set training.steps=300 --set training.epochs=1 --set training.batch_size=32 --set training.log_every=20
        --set training.checkpoint_every=50 --set training.keep_last=3 --set training.eval_every=0 -q)

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# A genesis process takes 0.5 s to 2 s to start on a loaded host (its libraries): "at once" is
# under a second more than `genesis --version` takes here.
t0=$(now_ms)
"$genesis" --version >/dev/null
at_once_ms=$(($(now_ms) - t0 + 1000))

# What a run leaves that does not depend on the clock: metrics without timings, the summary
# without timings and memory, every checkpoint file.
fingerprint() {
  sed -E 's/"(elapsed_s|samples_per_s)":[^,}]*//g' "$1/metrics.jsonl"
  sed -E 's/"(wall_s|train_s|samples_per_s|peak_memory_bytes)":[^,}]*//g' "$1/summary.json"
  (cd "$1/checkpoints" && readlink latest && find . -type f | sort | xargs md5sum)
}
# same_as_alone NAME DIR ALONE_PRINT: DIR's files are those of the run alone.
same_as_alone() {
  fingerprint "$2" >"$2.print"
  if cmp -s "$2.print" "$3"; then
    ok "$1: metrics, summary and checkpoints as the same run alone"
  else
    fail "$1: metrics, summary or checkpoints differ from the same run alone"
    diff "$2.print" "$3" | head -5
  fi
}
# train DIR RUN_ARGS... in the background; sets $pid.
start_train() {
  local dir=$1
  shift
  "$genesis" train "$recipe" --out "$dir" "${common[@]}" "$@" >/dev/null 2>>"$dir.err" &
  pid=$!
  pids+=("$pid")
}
# Until the holder's first checkpoint is in place (so that --resume has one to take).
wait_for_checkpoint() {
  for ((t = 0; t < 600; ++t)); do
    [ -e "$1/checkpoints/latest" ] && return 0
    sleep 0.02
  done
  return 1
}
# refused NAME DIR HOLDER_PID COMMAND...: exits 2 within a second, one line naming the holder.
refused() {
  local name=$1 dir=$2 holder=$3
  shift 3
  local t0 rc ms bound
  # The start of a process under the load of this moment (other tests beside this one): the
  # refusal may take one such start twice over plus a second, never less than at_once_ms.
  t0=$(now_ms)
  "$genesis" --version >/dev/null
  bound=$((2 * ($(now_ms) - t0) + 1000))
  [ "$bound" -ge "$at_once_ms" ] || bound=$at_once_ms
  t0=$(now_ms)
  "$@" >/dev/null 2>"$work/refused.err"
  rc=$?
  ms=$(($(now_ms) - t0))
  local expected="genesis: error: $dir is in use by process $holder (started "
  if [ "$rc" != 2 ]; then
    fail "$name: exit code $rc, expected 2 ($(head -c 300 "$work/refused.err"))"
  elif [ "$(wc -l <"$work/refused.err")" != 1 ] || ! grep -qF "$expected" "$work/refused.err"; then
    fail "$name: stderr is not one line naming process $holder: $(head -c 300 "$work/refused.err")"
  elif [ "$ms" -ge "$bound" ]; then
    fail "$name: refused after $ms ms, expected under $bound"
  else
    return 0
  fi
  return 1
}

"$genesis" train "$recipe" --out "$work/alone_a" "${common[@]}" "${run_a[@]}" >/dev/null 2>"$work/alone_a.err" \
  || { cat "$work/alone_a.err"; fail "the run alone failed"; exit 1; }
fingerprint "$work/alone_a" >"$work/alone_a.print"

# 1. Two trains started together on one --out: one runs as if alone, the other is refused while
# it runs (both start at once on a loaded host, so no time bound here; section 2 has one).
start_train "$work/together" "${run_a[@]}"
pid_a=$pid
start_train "$work/together" "${run_b[@]}"
pid_b=$pid
for ((t = 0; t < 6000; ++t)); do  # until one of them ends
  kill -0 "$pid_a" 2>/dev/null && kill -0 "$pid_b" 2>/dev/null || break
  sleep 0.01
done
if ! kill -0 "$pid_a" 2>/dev/null; then winner=b loser=$pid_a holder=$pid_b; else winner=a loser=$pid_b holder=$pid_a; fi
wait "$loser"
rc=$?
refused_first=$(kill -0 "$holder" 2>/dev/null && echo yes)
wait "$holder"
rc_holder=$?
check "together: the refused run" 2 "$rc"
check "together: the run that got the directory" 0 "$rc_holder"
grep -qF "is in use by process $holder (started " "$work/together.err" && [ -n "$refused_first" ] \
  && ok "together: the refused one named process $holder, and ended while it ran" \
  || fail "together: no refusal naming process $holder while it ran: $(head -c 300 "$work/together.err")"
if [ "$winner" = b ]; then
  "$genesis" train "$recipe" --out "$work/alone_b" "${common[@]}" "${run_b[@]}" >/dev/null 2>&1
  fingerprint "$work/alone_b" >"$work/alone_$winner.print"
fi
same_as_alone "together: the run" "$work/together" "$work/alone_$winner.print"

# 2. Against a running holder: 20 attempts, by turns train, --resume, --overwrite and a
# data-parallel train; the holder's files must end as the run alone's.
dir="$work/held"
start_train "$dir" "${run_a[@]}"
holder=$pid
wait_for_checkpoint "$dir" || fail "the holder wrote no checkpoint"
kill -STOP "$holder"
modes=("" --resume --overwrite "--nproc-per-node 2")
refusals=0
for ((i = 0; i < 20; ++i)); do
  mode=${modes[i % 4]}
  # shellcheck disable=SC2086  # the mode is zero, one or two words
  refused "attempt $i (${mode:-train})" "$dir" "$holder" \
    "$genesis" train "$recipe" --out "$dir" "${common[@]}" "${run_b[@]}" $mode && refusals=$((refusals + 1))
done
kill -CONT "$holder"
[ "$refusals" = 20 ] && ok "20 of 20 attempts (train, --resume, --overwrite, --nproc-per-node 2) refused at once" \
  || fail "$refusals of 20 attempts refused as expected"
wait "$holder"
check "the holder" 0 $?
same_as_alone "the holder" "$dir" "$work/alone_a.print"

# 3. A holder killed with SIGKILL leaves no stale lock: the next run needs no cleanup.
dir="$work/killed"
start_train "$dir" "${run_a[@]}"
wait_for_checkpoint "$dir" || fail "the run to kill wrote no checkpoint"
kill -9 "$pid"
wait "$pid" 2>/dev/null
[ -e "$dir/.genesis.lock" ] && ok "the killed run left its lock file" || fail "the killed run left no lock file"
"$genesis" train "$recipe" --out "$dir" "${common[@]}" "${run_a[@]}" --resume >/dev/null 2>"$work/killed.err"
check "--resume after a SIGKILL of the holder" 0 $?
cmp -s "$dir/checkpoints/latest/model.safetensors" "$work/alone_a/checkpoints/latest/model.safetensors" \
  && ok "the resumed run ends with the weights of the run alone" || fail "the resumed run's weights differ"

# 4. Two preparations of one token-shard directory: the second is refused, the first's shards
# are those of a preparation alone.
fixture="$src/tests/fixtures/tokenizer_bpe/tokenizer.json"
# 6 MB: long enough to be caught and paused inside its run.
awk 'BEGIN { for (r = 0; r < 100000; ++r) printf "line %d: the quick brown fox %d jumps over the lazy dog\n", r, r * 7919 % 10007 }' \
  >"$work/doc.txt"
tokenize=("$genesis" data tokenize --tokenizer "$fixture" --input "$work/doc.txt" -q)
"${tokenize[@]}" --out "$work/shards_alone" >/dev/null 2>&1 || fail "tokenize alone failed"
"${tokenize[@]}" --out "$work/shards" >/dev/null 2>"$work/shards.err" &
pid=$!
pids+=("$pid")
for ((t = 0; t < 500; ++t)); do
  grep -qs "\"pid\":$pid" "$work/shards/.genesis.lock" && break
  sleep 0.01
done
kill -STOP "$pid"
ps -o stat= -p "$pid" | grep -q T || fail "the first tokenize ended before it was paused: give it more text"
refused "tokenize --overwrite of a directory being tokenized" "$work/shards" "$pid" \
  "${tokenize[@]}" --out "$work/shards" --overwrite --val-fraction 0.5 && ok "a second tokenize of one --out is refused at once"
kill -CONT "$pid"
wait "$pid"
check "the first tokenize" 0 $?
cmp -s "$work/shards/train.bin" "$work/shards_alone/train.bin" && cmp -s "$work/shards/val.bin" "$work/shards_alone/val.bin" \
  && ok "its shards are those of a tokenize alone" || fail "its shards differ from a tokenize alone's"

# 5. What reads a run directory is not disturbed by the lock file.
"$genesis" eval --checkpoint "$work/held" -q >/dev/null 2>"$work/eval.err"
check "eval --checkpoint of a run directory with its lock file" 0 $?
"$genesis" report "$work/held" "$work/together" --out "$work/report.html" >/dev/null 2>"$work/report.err"
check "report of run directories with their lock files" 0 $?
"$genesis" inspect "$work/held" >/dev/null 2>"$work/inspect.err"
check "inspect of a run directory with its lock file" 0 $?

finish run-lock
