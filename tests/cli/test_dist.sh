#!/usr/bin/env bash
# Data-parallel training on CPU ranks, end to end: `--nproc-per-node 2` (tcp backend) and
# `mpirun -np 2` (mpi backend, when installed) give the losses of one process with the same
# global batch; gradient accumulation x 2 ranks equals 1 rank x 4 micro-steps; a 2-rank resume
# is bit-exact; ZeRO-1 (tcp and mpi) equals DDP with half the optimizer state per rank, its resume
# is bit-exact and its checkpoint resumes in one process too; ZeRO-2 and ZeRO-3 on the tiny GPT
# equal one process step by step and a 2-rank ZeRO-3 checkpoint resumes in one; a partly frozen model trains the same on
# 2 ranks, its frozen layer untouched; the tiny GPT reaches the same bits
# per byte on 2 ranks as on 1; SIGTERM stops every rank at one step with one checkpoint (exit 130); a killed rank ends the run with an
# error naming it, never a hang; bad launcher environments exit 2 with one line.
#   tests/cli/test_dist.sh PATH_TO_GENESIS SOURCE_DIR
#
# Tolerance for "same losses": the runs differ only in the order of f32 sums (a mean over 128
# rows against the mean of two means over 64, a gradient summed over 128 rows against two
# partial sums averaged in f64), ~1e-7 relative per step; 40 AdamW steps are measured to stay
# within 3e-7 of each other, and the check allows 1e-4.
set -u
source "$(dirname "$0")/common.sh" "$@"
recipe="$src/recipes/fashion_mnist_mlp.toml"
export OMP_NUM_THREADS=1  # bit-exact comparisons need a fixed thread count per rank
losses() { grep -o '"loss":[0-9.eE+-]*' "$1" | cut -d: -f2; }
# The largest relative difference between two runs' logged losses (or "count" when they differ in number).
max_rel() {
  paste <(losses "$1") <(losses "$2") | awk 'NF != 2 { bad = 1 } NF == 2 { d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
    END { if (bad || NR == 0) print "count"; else printf "%.3g\n", m }'
}
close_enough() { [ "$1" != count ] && awk -v r="$1" 'BEGIN { exit !(r <= 1e-4) }'; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

requires "dataset-fashion-mnist" test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
common=(--set training.steps=40 --set training.log_every=5 --set training.checkpoint_every=20 --set training.keep_last=5 -q)

# 1. Two tcp ranks of 64 equal one process of 128.
"$genesis" train "$recipe" --out "$work/one" --set training.batch_size=128 "${common[@]}" >/dev/null 2>"$work/one.err" \
  || { cat "$work/one.err"; fail "1-process run failed"; }
out=$("$genesis" train "$recipe" --out "$work/two" --set training.batch_size=64 "${common[@]}" --nproc-per-node 2 2>"$work/two.err")
rc=$?
[ $rc -eq 0 ] || { cat "$work/two.err"; fail "2-rank run exited $rc"; }
[ "$out" = "$work/two/summary.json" ] && ok "2-rank run prints the summary path once" || fail "2-rank stdout: '$out'"
r=$(max_rel "$work/one/metrics.jsonl" "$work/two/metrics.jsonl")
close_enough "$r" && ok "2 tcp ranks x 64 = 1 process x 128: losses within $r (relative)" || fail "2-rank losses differ: $r"
grep -q '"world_size": 2' "$work/two/summary.json" && grep -q '"dist_backend": "tcp"' "$work/two/summary.json" \
  && grep -q '"peak_memory_bytes_per_rank"' "$work/two/summary.json" \
  && ok "summary.json gives world_size, backend and per-rank peak memory" || fail "summary.json lacks the dist fields"
[ ! -e "$work/two/metrics.jsonl.1" ] && [ "$(grep -cE '"step":5[,}]' "$work/two/metrics.jsonl")" = 1 ] \
  && ok "rank 0 alone writes metrics.jsonl" || fail "metrics.jsonl written by several ranks"

# 1b. A partly frozen model (training.freeze): the gradient buckets hold the trained parameters only
# (a frozen one never fires its hook, so a bucket holding it would never start), 2 ranks still
# equal 1 process, and the frozen layer's bytes are those it started with.
frozen=(--set 'training.freeze=["layers.1."]')
"$genesis" train "$recipe" --out "$work/f1" --set training.batch_size=128 "${frozen[@]}" "${common[@]}" >/dev/null \
  2>"$work/f1.err" || { cat "$work/f1.err"; fail "partly frozen 1-process run failed"; }
"$genesis" train "$recipe" --out "$work/f2" --set training.batch_size=64 "${frozen[@]}" "${common[@]}" \
  --nproc-per-node 2 >/dev/null 2>"$work/f2.err" || { cat "$work/f2.err"; fail "partly frozen 2-rank run failed"; }
r=$(max_rel "$work/f1/metrics.jsonl" "$work/f2/metrics.jsonl")
close_enough "$r" && ok "partly frozen: 2 ranks x 64 = 1 process x 128, losses within $r" || fail "partly frozen losses differ: $r"
# The trained parameter counts and the frozen layer's bytes at steps 20 and 40 of the 2-rank run.
python3 - "$work/f2" <<'PY' && ok "partly frozen: summary counts the trained parameters; layers.1 unchanged" \
  || fail "partly frozen: the frozen layer changed or the summary miscounts"
import json, struct, sys
run = sys.argv[1]
def tensor_bytes(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        begin, end = header[name]["data_offsets"]
        f.seek(8 + n + begin)
        return f.read(end - begin)
s = json.load(open(run + "/summary.json"))
assert 0 < s["trainable_parameters"] < s["parameters"], s
for name in ("layers.1.weight", "layers.1.bias"):
    a, b = (tensor_bytes(f"{run}/checkpoints/step_000000{k}/model.safetensors", name) for k in (20, 40))
    assert a == b, name
a, b = (tensor_bytes(f"{run}/checkpoints/step_000000{k}/model.safetensors", "layers.3.weight") for k in (20, 40))
assert a != b
PY

# 2. Gradient accumulation: 2 ranks x 2 micro-batches of 32 = 1 process x 4 micro-batches of 32.
"$genesis" train "$recipe" --out "$work/acc1" --set training.batch_size=32 --set training.grad_accum_steps=4 "${common[@]}" \
  >/dev/null 2>&1 || fail "accumulating 1-process run failed"
"$genesis" train "$recipe" --out "$work/acc2" --set training.batch_size=32 --set training.grad_accum_steps=2 "${common[@]}" \
  --nproc-per-node 2 >/dev/null 2>&1 || fail "accumulating 2-rank run failed"
r=$(max_rel "$work/acc1/metrics.jsonl" "$work/acc2/metrics.jsonl")
close_enough "$r" && ok "2 ranks x 2 micro-steps = 1 process x 4: losses within $r" || fail "accumulation differs: $r"

# 3. A 2-rank resume is bit-exact: continue the step-20 checkpoint of run 1.
mkdir -p "$work/resumed/checkpoints"
cp -r "$work/two/checkpoints/step_00000020" "$work/resumed/checkpoints/"
ln -s step_00000020 "$work/resumed/checkpoints/latest"
cp "$work/two/recipe.toml" "$work/resumed/recipe.toml"
"$genesis" train "$recipe" --out "$work/resumed" --resume --set training.batch_size=64 "${common[@]}" --nproc-per-node 2 \
  >/dev/null 2>"$work/resumed.err" || { cat "$work/resumed.err"; fail "2-rank resume failed"; }
a=$(grep -E '"step":(25|30|35|40)[,}]' "$work/two/metrics.jsonl" | grep -o '"loss":[^,]*')
b=$(grep -E '"step":(25|30|35|40)[,}]' "$work/resumed/metrics.jsonl" | grep -o '"loss":[^,]*')
[ -n "$a" ] && [ "$a" = "$b" ] && ok "2-rank resumed losses at steps 25..40 are bit-identical" || fail "2-rank resume differs: [$a] vs [$b]"
cmp -s "$work/two/checkpoints/step_00000040/model.safetensors" "$work/resumed/checkpoints/step_00000040/model.safetensors" \
  && ok "2-rank resumed final weights are byte-identical" || fail "2-rank resumed weights differ"

# 3b. ZeRO-1 (dist.zero = 1): the same losses as DDP, half the optimizer state per rank; its resume
# is bit-exact, and its checkpoint (the whole state, gathered) resumes in one process too.
"$genesis" train "$recipe" --out "$work/zero" --set training.batch_size=64 --set dist.zero=1 "${common[@]}" \
  --nproc-per-node 2 >/dev/null 2>"$work/zero.err" || { cat "$work/zero.err"; fail "ZeRO-1 run failed"; }
r=$(max_rel "$work/two/metrics.jsonl" "$work/zero/metrics.jsonl")
close_enough "$r" && ok "ZeRO-1 = DDP on 2 ranks: losses within $r" || fail "ZeRO-1 losses differ from DDP: $r"
state_bytes() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["optimizer_state_bytes_per_rank"][0])' "$1"; }
ddp_bytes=$(state_bytes "$work/two/summary.json")
zero_bytes=$(state_bytes "$work/zero/summary.json")
awk -v z="$zero_bytes" -v d="$ddp_bytes" 'BEGIN { exit !(d > 0 && z >= 0.49 * d && z <= 0.51 * d) }' \
  && ok "ZeRO-1 optimizer state per rank: $zero_bytes bytes, DDP $ddp_bytes" \
  || fail "ZeRO-1 optimizer state per rank $zero_bytes is not half of DDP's $ddp_bytes"
mkdir -p "$work/zero_resumed/checkpoints"
cp -r "$work/zero/checkpoints/step_00000020" "$work/zero_resumed/checkpoints/"
ln -s step_00000020 "$work/zero_resumed/checkpoints/latest"
cp "$work/zero/recipe.toml" "$work/zero_resumed/recipe.toml"
"$genesis" train "$recipe" --out "$work/zero_resumed" --resume --set training.batch_size=64 --set dist.zero=1 "${common[@]}" \
  --nproc-per-node 2 >/dev/null 2>"$work/zero_resumed.err" || { cat "$work/zero_resumed.err"; fail "ZeRO-1 resume failed"; }
cmp -s "$work/zero/checkpoints/step_00000040/model.safetensors" "$work/zero_resumed/checkpoints/step_00000040/model.safetensors" \
  && cmp -s "$work/zero/checkpoints/step_00000040/optimizer.safetensors" \
    "$work/zero_resumed/checkpoints/step_00000040/optimizer.safetensors" \
  && ok "ZeRO-1 resumed final weights and optimizer state are byte-identical" || fail "ZeRO-1 resume differs"
mkdir -p "$work/zero_one/checkpoints"
cp -r "$work/zero/checkpoints/step_00000020" "$work/zero_one/checkpoints/"
ln -s step_00000020 "$work/zero_one/checkpoints/latest"
cp "$work/zero/recipe.toml" "$work/zero_one/recipe.toml"
"$genesis" train "$recipe" --out "$work/zero_one" --resume --set training.batch_size=64 --set dist.zero=1 \
  "${common[@]:0:${#common[@]}-1}" >/dev/null 2>"$work/zero_one.err" && grep -q "written by 2 rank(s) and 1 resume it" "$work/zero_one.err" \
  && ok "a 2-rank ZeRO-1 checkpoint resumes in one process, with a note" \
  || { cat "$work/zero_one.err"; fail "ZeRO-1 checkpoint resumed in one process"; }

# 4. mpirun: the mpi backend gives the same losses.
if command -v mpirun >/dev/null 2>&1 && "$genesis" info 2>/dev/null | grep -qi "mpi.*yes\|mpi: on\|with mpi"; then :; fi
if command -v mpirun >/dev/null 2>&1; then
  # Open MPI's session directory under this test's own base: mpiruns of cases CTest runs beside
  # this one race to create the shared /tmp/ompi.HOST.UID otherwise.
  mkdir -p "$work/ompi"
  mpi_env=(env OMPI_MCA_orte_tmpdir_base="$work/ompi")
  [ "$(id -u)" = 0 ] && mpi_env+=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  if "${mpi_env[@]}" mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS "$genesis" train "$recipe" --out "$work/mpi" \
      --set training.batch_size=64 "${common[@]}" >/dev/null 2>"$work/mpi.err"; then
    r=$(max_rel "$work/one/metrics.jsonl" "$work/mpi/metrics.jsonl")
    grep -q '"dist_backend": "mpi"' "$work/mpi/summary.json" || fail "mpirun run did not use the mpi backend"
    close_enough "$r" && ok "mpirun -np 2 (mpi backend) = 1 process x 128: losses within $r" || fail "mpi losses differ: $r"
    cmp -s "$work/two/checkpoints/step_00000040/model.safetensors" "$work/mpi/checkpoints/step_00000040/model.safetensors" \
      && ok "mpi and tcp ranks end with byte-identical weights" || echo "note: mpi and tcp weights differ in the last bits"
    "${mpi_env[@]}" mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS "$genesis" train "$recipe" --out "$work/mpi_zero" \
      --set training.batch_size=64 --set dist.zero=1 "${common[@]}" >/dev/null 2>"$work/mpi_zero.err" \
      || { cat "$work/mpi_zero.err"; fail "mpirun -np 2 with dist.zero = 1 failed"; }
    r=$(max_rel "$work/mpi/metrics.jsonl" "$work/mpi_zero/metrics.jsonl")
    close_enough "$r" && ok "mpi ZeRO-1 = mpi DDP: losses within $r" || fail "mpi ZeRO-1 losses differ: $r"
  else
    cat "$work/mpi.err"
    fail "mpirun -np 2 genesis train failed"
  fi
else
  fail "mpirun is missing: run scripts/setup.sh, which installs openmpi-bin"
fi

# 5. The tiny GPT: 2 ranks of 4 windows reach the bits per byte of 1 process of 8.
cat >"$work/lm.toml" <<TOML
[run]
name = "lm_dist"
seed = 1
[model]
name = "gpt2"
vocab_size = 703
n_positions = 32
n_embd = 32
n_layer = 1
n_head = 2
[data]
name = "tokens"
shards = "$work/shards"
tokenizer = "$src/tests/fixtures/tokenizer_bpe/tokenizer.json"
source = ["$src/README.md", "$src/docs/architecture.md"]
val_fraction = 0.1
seq_len = 16
[optimizer]
name = "adamw"
lr = 3e-3
[training]
steps = 30
batch_size = 8
log_every = 10
eval_every = 0
checkpoint_every = 0
[eval]
split = "val"
batch_size = 8
TOML
"$genesis" train "$work/lm.toml" --out "$work/lm1" -q >/dev/null 2>"$work/lm1.err" || { cat "$work/lm1.err"; fail "LM 1-process run failed"; }
"$genesis" train "$work/lm.toml" --out "$work/lm2" --set training.batch_size=4 -q --nproc-per-node 2 >/dev/null 2>"$work/lm2.err" \
  || { cat "$work/lm2.err"; fail "LM 2-rank run failed"; }
bpb1=$(sed -n 's/.*"bits_per_byte": *\([0-9.eE+-]*\).*/\1/p' "$work/lm1/summary.json" | head -n 1)
bpb2=$(sed -n 's/.*"bits_per_byte": *\([0-9.eE+-]*\).*/\1/p' "$work/lm2/summary.json" | head -n 1)
if [ -n "$bpb1" ] && awk -v a="$bpb1" -v b="$bpb2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * a) }'; then
  ok "tiny GPT: 2 ranks reach $bpb2 bits/byte, 1 process $bpb1"
else
  fail "tiny GPT bits/byte: 1 process '$bpb1', 2 ranks '$bpb2'"
fi
# MFU is per device: the 2-rank run's tokens/s counts both ranks' tokens, over two devices' peak.
python3 - "$work/lm2/summary.json" <<'PY' && ok "2 ranks: MFU = tokens/s x FLOPs per token / (2 x one device's peak)" \
  || fail "2-rank MFU is not per device"
import json, sys
s = json.load(open(sys.argv[1]))
want = s["tokens_per_s"] * s["flops_per_token"] / (2 * s["peak_flops_per_s"])
assert s["world_size"] == 2 and want > 0 and abs(s["mfu"] - want) <= 1e-9 * want, (s["mfu"], want)
PY

# 5b. ZeRO-2 and ZeRO-3 on the tiny GPT: 2 tcp ranks of 4 give the per-step losses of 1 process of 8
# within 1e-5 (ZeRO-3 under full activation checkpointing too), and on mpi ranks as well; with bf16
# parameter gathers, within the rounding's 2e-2. A ZeRO-3
# checkpoint written by 2 ranks of 4 resumes in 1 process of 2 micro-batches of 4 (the same global
# batch) and continues as the 2-rank run did.
close_1e5() { [ "$1" != count ] && awk -v r="$1" 'BEGIN { exit !(r <= 1e-5) }'; }
per_step=(--set training.log_every=1 --set training.checkpoint_every=15 --set training.keep_last=2 -q)
"$genesis" train "$work/lm.toml" --out "$work/lms1" "${per_step[@]}" >/dev/null 2>"$work/lms1.err" \
  || { cat "$work/lms1.err"; fail "LM 1-process per-step run failed"; }
for level in 2 3; do
  extra=()
  [ "$level" = 3 ] && extra=(--set training.activation_checkpointing=full)
  "$genesis" train "$work/lm.toml" --out "$work/lmz$level" --set training.batch_size=4 --set dist.zero=$level \
    "${extra[@]}" "${per_step[@]}" --nproc-per-node 2 >/dev/null 2>"$work/lmz$level.err" \
    || { cat "$work/lmz$level.err"; fail "LM ZeRO-$level 2-rank run failed"; }
  r=$(max_rel "$work/lms1/metrics.jsonl" "$work/lmz$level/metrics.jsonl")
  close_1e5 "$r" && ok "ZeRO-$level, 2 tcp ranks x 4 = 1 process x 8: 30 per-step losses within $r" \
    || fail "ZeRO-$level per-step losses differ from 1 process: $r"
done
# bf16 parameter gathers: the losses move by the weights' rounding (about 3 digits), no more.
"$genesis" train "$work/lm.toml" --out "$work/lmz3bf" --set training.batch_size=4 --set dist.zero=3 \
  --set dist.param_dtype=bf16 "${per_step[@]}" --nproc-per-node 2 >/dev/null 2>"$work/lmz3bf.err" \
  || { cat "$work/lmz3bf.err"; fail "LM ZeRO-3 with bf16 gathers failed"; }
r=$(max_rel "$work/lms1/metrics.jsonl" "$work/lmz3bf/metrics.jsonl")
[ "$r" != count ] && awk -v r="$r" 'BEGIN { exit !(r > 0 && r <= 2e-2) }' \
  && grep -q '"param_dtype": *"bf16"' "$work/lmz3bf/summary.json" \
  && ok "ZeRO-3, bf16 parameter gathers: 30 per-step losses within $r of 1 process (f32)" \
  || fail "ZeRO-3 with bf16 gathers: losses within $r of 1 process, or no param_dtype in summary.json"
mkdir -p "$work/lmz3_one/checkpoints"
cp -r "$work/lmz3/checkpoints/step_00000015" "$work/lmz3_one/checkpoints/"
ln -s step_00000015 "$work/lmz3_one/checkpoints/latest"
cp "$work/lmz3/recipe.toml" "$work/lmz3_one/recipe.toml"
"$genesis" train "$work/lm.toml" --out "$work/lmz3_one" --resume --set dist.zero=3 --set training.batch_size=4 \
  --set training.grad_accum_steps=2 --set training.activation_checkpointing=full "${per_step[@]:0:6}" >/dev/null \
  2>"$work/lmz3_one.err" || { cat "$work/lmz3_one.err"; fail "a 2-rank ZeRO-3 checkpoint did not resume in one process"; }
grep -q "written by 2 rank(s) and 1 resume it with the same global batch of 8" "$work/lmz3_one.err" \
  && ok "the 1-process resume says it keeps the global batch" || { cat "$work/lmz3_one.err"; fail "no global-batch note"; }
after15() { grep -E '"step":(1[6-9]|2[0-9]|30)[,}]' "$1" >"$1.after15"; echo "$1.after15"; }
r=$(max_rel "$(after15 "$work/lmz3/metrics.jsonl")" "$(after15 "$work/lmz3_one/metrics.jsonl")")
[ "$(grep -c '"loss"' "$work/lmz3_one/metrics.jsonl.after15")" -ge 15 ] && close_1e5 "$r" \
  && ok "a 2-rank ZeRO-3 checkpoint resumed in 1 process: steps 16-30 within $r of the 2-rank run" \
  || fail "ZeRO-3 resumed on 1 process differs from the 2-rank run: $r"
if command -v mpirun >/dev/null 2>&1; then
  for level in 2 3; do
    "${mpi_env[@]}" mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS "$genesis" train "$work/lm.toml" \
      --out "$work/lmz${level}_mpi" --set training.batch_size=4 --set dist.zero=$level "${per_step[@]}" >/dev/null \
      2>"$work/lmz${level}_mpi.err" || { cat "$work/lmz${level}_mpi.err"; fail "mpirun -np 2 with dist.zero = $level failed"; }
    r=$(max_rel "$work/lms1/metrics.jsonl" "$work/lmz${level}_mpi/metrics.jsonl")
    close_1e5 "$r" && ok "ZeRO-$level, mpirun -np 2 x 4 = 1 process x 8: losses within $r" \
      || fail "mpi ZeRO-$level losses differ: $r"
  done
fi
expect_recipe_error() {
  "$genesis" train "$recipe" --out "$work/bad_zero" --nproc-per-node 2 "$@" >/dev/null 2>"$work/bad_zero.err"
  local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$work/bad_zero.err")" = 1 ] && [ ! -e "$work/bad_zero" ]
}
expect_recipe_error --set dist.zero=3 && grep -q "dist.zero = 3 shards the decoder blocks" "$work/bad_zero.err" \
  && ok "dist.zero = 3 on a classifier: $(cat "$work/bad_zero.err")" || { cat "$work/bad_zero.err"; fail "zero = 3 on a classifier"; }
expect_recipe_error --set dist.zero=4 && ok "dist.zero = 4: $(cat "$work/bad_zero.err")" \
  || { cat "$work/bad_zero.err"; fail "dist.zero = 4 accepted"; }
expect_recipe_error --set dist.param_dtype=bf16 && grep -q "set dist.zero = 3 or leave dist.param_dtype out" \
  "$work/bad_zero.err" && ok "dist.param_dtype = bf16 without ZeRO-3: $(cat "$work/bad_zero.err")" \
  || { cat "$work/bad_zero.err"; fail "dist.param_dtype = bf16 accepted with dist.zero = 0"; }

# 6. SIGTERM to the launcher: every rank stops at the same step, one checkpoint, exit 130.
"$genesis" train "$recipe" --out "$work/sig" --set training.steps=100000 --set training.log_every=1 \
  --set training.checkpoint_every=0 --nproc-per-node 2 >/dev/null 2>"$work/sig.err" &
launcher=$!
pids+=("$launcher")
for _ in $(seq 1 300); do grep -qE '"step":3[,}]' "$work/sig/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$launcher"
wait "$launcher"
rc=$?
stopped=$(grep -o '"step":[0-9]*' "$work/sig/metrics.jsonl" | tail -n 1 | cut -d: -f2)
saved=$(readlink "$work/sig/checkpoints/latest")
if [ $rc -eq 130 ] && [ "$saved" = "$(printf 'step_%08d' "$stopped")" ]; then
  ok "SIGTERM: both ranks stopped after step $stopped, checkpoint $saved, exit 130"
else
  cat "$work/sig.err"
  fail "SIGTERM: exit $rc, last logged step '$stopped', checkpoint '$saved'"
fi

# 7. A rank killed mid-run (torchrun-style environment, no launcher to clean up): the other exits
# non-zero within seconds naming it, with one error line.
for victim in 1 0; do
  survivor=$((1 - victim))
  port=$(free_port)
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$genesis" train "$recipe" --out "$work/killed$victim" --set training.steps=100000 --set training.log_every=1 \
      --set dist.timeout_s=30 -q >/dev/null 2>"$work/killed${victim}_$rank.err" &
    pids+=($!)
    eval "pid$rank=$!"
  done
  for _ in $(seq 1 300); do grep -qE '"step":2[,}]' "$work/killed$victim/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
  start=$(date +%s)
  eval "kill -9 \$pid$victim"
  eval "wait \$pid$survivor"
  rc=$?
  took=$(($(date +%s) - start))
  err="$work/killed${victim}_$survivor.err"
  if [ $rc -ne 0 ] && [ $took -lt 20 ] && grep -qE "rank $victim closed its connection|connection to rank $victim broke" "$err" &&
    [ "$(grep -c 'genesis: error:' "$err")" = 1 ]; then
    ok "a killed rank $victim ends rank $survivor in ${took}s with exit $rc: $(tail -n 1 "$err")"
  else
    cat "$err"
    fail "killed rank $victim: rank $survivor exit $rc after ${took}s"
  fi
done
# ... and a rank killed while the other waits in ZeRO-3's parameter gathers (the tiny GPT).
port=$(free_port)
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$genesis" train "$work/lm.toml" --out "$work/killed_z3" --set training.steps=100000 --set training.log_every=1 \
    --set training.batch_size=4 --set dist.zero=3 --set dist.timeout_s=30 -q >/dev/null 2>"$work/killed_z3_$rank.err" &
  pids+=($!)
  eval "pid$rank=$!"
done
for _ in $(seq 1 300); do grep -qE '"step":2[,}]' "$work/killed_z3/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
start=$(date +%s)
kill -9 "$pid1"
wait "$pid0"
rc=$?
took=$(($(date +%s) - start))
if [ $rc -ne 0 ] && [ $took -lt 20 ] && grep -qE "rank 1 closed its connection|connection to rank 1 broke" "$work/killed_z3_0.err" &&
  [ "$(grep -c 'genesis: error:' "$work/killed_z3_0.err")" = 1 ]; then
  ok "ZeRO-3: a killed rank 1 ends rank 0 in ${took}s with exit $rc: $(tail -n 1 "$work/killed_z3_0.err")"
else
  cat "$work/killed_z3_0.err"
  fail "ZeRO-3, killed rank 1: rank 0 exit $rc after ${took}s"
fi
# ... and under the launcher, which stops the other rank and names the dead one.
"$genesis" train "$recipe" --out "$work/killed2" --set training.steps=100000 --set training.log_every=1 -q \
  --nproc-per-node 2 >/dev/null 2>"$work/killed2.err" &
launcher=$!
pids+=("$launcher")
for _ in $(seq 1 300); do grep -qE '"step":2[,}]' "$work/killed2/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
child=$(pgrep -P "$launcher" | tail -n 1)
kill -9 "$child"
wait "$launcher"
rc=$?
[ $rc -ne 0 ] && grep -q "rank 1 was killed by signal 9" "$work/killed2.err" \
  && ok "launcher: a killed rank ends the run, exit $rc" || { cat "$work/killed2.err"; fail "launcher with a killed rank: exit $rc"; }

# 8. Bad environments: one line, exit 2, before any run directory.
expect_usage() {
  local what=$1 pattern=$2
  shift 2
  "$@" >/dev/null 2>"$work/usage.err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$work/usage.err")" -eq 1 ] && grep -q -- "$pattern" "$work/usage.err"; then
    ok "$what: exit 2, $(cat "$work/usage.err")"
  else
    fail "$what: exit $rc, stderr: $(cat "$work/usage.err")"
  fi
}
expect_usage "WORLD_SIZE=0" "WORLD_SIZE=0" env RANK=0 WORLD_SIZE=0 "$genesis" train "$recipe" --out "$work/bad1"
expect_usage "RANK >= WORLD_SIZE" "RANK=2 is not below WORLD_SIZE=2" env RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=29999 "$genesis" train "$recipe" --out "$work/bad2"
expect_usage "no MASTER_ADDR" "MASTER_ADDR is not set" env RANK=0 WORLD_SIZE=2 "$genesis" train "$recipe" --out "$work/bad3"
expect_usage "unreachable rank 0" "could not reach rank 0" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT="$(free_port)" "$genesis" train "$recipe" --out "$work/bad4" --set dist.timeout_s=1
expect_usage "--nproc-per-node under a launcher" "leave --nproc-per-node out" env RANK=0 WORLD_SIZE=2 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 "$genesis" train "$recipe" --nproc-per-node 2 --out "$work/bad5"
expect_usage "nccl on the CPU" 'dist.backend = "nccl"' "$genesis" train "$recipe" --nproc-per-node 2 --out "$work/bad6" \
  --set dist.backend=nccl
for d in bad1 bad2 bad3 bad4 bad5; do [ -e "$work/$d" ] && fail "$d: a run directory was created"; done

finish dist
