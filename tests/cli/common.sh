# What the CLI tests share; each sources it after `set -u`, with its own arguments:
#   source "$(dirname "$0")/common.sh" "$@"
# genesis: argument 1, the executable; src: argument 2, the source directory (empty when the
# test takes none); work: a scratch directory, removed at exit unless KEEP is set (a test that
# sets its own EXIT trap removes it there); fail / ok: one line per check, failures counted;
# check NAME EXPECTED_RC ACTUAL_RC: an exit code; finish NAME: the summary line, and exit 0 only
# when nothing failed; requires WHAT COMMAND...: what scripts/setup.sh installs is a precondition,
# so its absence fails the test at once; finish_skipped NAME WHY: the end of a test whose part
# could not run for a reason outside the machine (exit 77, which CTest reports as not run);
# bad NAME PATTERN SETTINGS...: a bad run's exit 2 and one line;
# wait_for_stop_handling PID: until the process handles SIGTERM;
# losses_match ONE TWO STEPS: two runs' logged training losses, STEPS each, within 1e-5.
genesis=${1:?path to the genesis executable}
src=${2:-}
work=$(mktemp -d)
# pids: background processes a test starts, killed at exit (a failed check must not leave one running).
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
check() {
  if [ "$2" != "$3" ]; then fail "$1: exit code $3, expected $2"; else ok "$1"; fi
}
requires() {
  local what=$1
  shift
  "$@" >/dev/null 2>&1 || { echo "FAIL: $what is missing: run scripts/setup.sh, which installs it"; exit 1; }
}
# wait_for_stop_handling PID: waits (up to 30 s) until the process blocks or catches SIGTERM, so
# that a signal sent next tests its handling rather than the start-up before it (which takes
# over a second on a loaded host).
wait_for_stop_handling() {
  local i field mask
  for i in $(seq 1 300); do
    for field in SigBlk SigCgt; do
      mask=$(sed -n "s/^$field:[[:space:]]*//p" "/proc/$1/status" 2>/dev/null)
      [ -n "$mask" ] && (((16#$mask >> 14) & 1)) && return 0
    done
    sleep 0.1
  done
  return 1
}
finish_skipped() {
  [ "$failures" -eq 0 ] || finish "$1"
  echo "skipped: $2"
  exit 77
}
finish() {
  if [ "$failures" -eq 0 ]; then
    echo "$1: all checks passed"
    exit 0
  fi
  echo "$1: $failures check(s) failed"
  exit 1
}
# bad NAME PATTERN SETTINGS...: `genesis train "$recipe" "${short[@]}" SETTINGS` (the caller's
# recipe and short run) exits 2 with one line on stderr matching PATTERN.
bad() {
  local name=$1 pattern=$2
  shift 2
  "$genesis" train "$recipe" --out "$work/bad" --overwrite "${short[@]}" "$@" -q >/dev/null 2>"$work/err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q -- "$pattern" "$work/err"; then
    ok "$name: exit 2, '$(cut -c1-110 "$work/err")'"
  else
    fail "$name: rc $rc, expected 2 and one line matching '$pattern': $(cat "$work/err")"
  fi
}
# losses_match ONE TWO STEPS: the run directories ONE and TWO logged STEPS training losses each,
# equal within 1e-5 relative (a run on several ranks against one process of the same global
# batch); exits non-zero, printing both lists, otherwise.
losses_match() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def losses(run):
    return [j["loss"] for j in map(json.loads, open(run + "/metrics.jsonl")) if "loss" in j and "step" in j]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == int(sys.argv[3]) and max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5, (a, b)
PY
}
# make_sft_data: data/make_sft.py's word-reversal conversations (200 train, 20 val) and byte
# tokenizer, in $work/data.
make_sft_data() {
  python3 "$src/data/make_sft.py" --out "$work/data" --train 200 --val 20 >/dev/null || fail "make_sft.py failed"
}
# sft_recipe NAME LAYERS STEPS LR [MODEL_KEYS]: on stdout, the recipe of a tiny Llama (hidden 32,
# LAYERS blocks) fine-tuned STEPS steps at LR on make_sft_data's conversations, on the CPU, 10% of
# them for validation. MODEL_KEYS are more [model] lines; with model.init_from among them the
# tokenizer is the model's, else $work/data/bytes.
sft_recipe() {
  local tokenizer="tokenizer = \"$work/data/bytes\""
  case "${5:-}" in *init_from*) tokenizer="" ;; esac
  cat <<EOF
[run]
name = "$1"
seed = 0
device = "cpu"
threads = 1

[model]
name = "llama"
vocab_size = 259
hidden_size = 32
intermediate_size = 64
num_hidden_layers = $2
num_attention_heads = 2
num_key_value_heads = 1
max_position_embeddings = 128
tie_word_embeddings = true
${5:-}

[data]
name = "sft"
path = "$work/data/sft_reverse/train.jsonl"
val_fraction = 0.1
$tokenizer
chat_template = "$work/data/bytes/tokenizer_config.json"
cache_dir = "$work/cache"
pack = true
seq_len = 128

[optimizer]
name = "adamw"
lr = $4

[training]
steps = $3
batch_size = 4
log_every = 1

[eval]
split = "val"
EOF
}
