#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, the library under ASan + UBSan) and runs
# each for its share of SECONDS, starting from its committed corpus (tests/fuzz/corpus/NAME,
# read only) plus fresh mutations. Exit 1 on any finding: a crash, a sanitizer report, a leak,
# an input slower than 10 s, more than 2 GiB of memory, or an exception that is not a
# genesis::Error (tests/fuzz/fuzz_common.h). The failing input is kept under
# BUILD/findings/NAME/ and the line to replay it is printed.
#   scripts/fuzz.sh [SECONDS] [NAME...]     (default: 135 s in all, every harness)
#   FUZZ_BUILD_DIR   build directory (default: build-fuzz)
#   FUZZ_SEED        libFuzzer's -seed (default 1, so that CI runs repeat; 0 = random)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-135}
shift || true
all=(safetensors recipe config tokenizer shard idx trainer_json chat_template sft_records csv image)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
for name in "${names[@]}"; do
  [ -f "tests/fuzz/fuzz_$name.cpp" ] || { echo "fuzz: no harness '$name' (harnesses: ${all[*]})" >&2; exit 2; }
done
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is not installed; scripts/setup.sh installs clang and libclang-rt-dev" >&2
  exit 2
fi

build=${FUZZ_BUILD_DIR:-build-fuzz}
# -O1 keeps the harnesses fast while the sanitizers see every access; NDEBUG is left off so
# that the library's asserts are checked too.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DGENESIS_FUZZ=ON -DGENESIS_BUILD_TESTS=OFF \
  -DGENESIS_CUDA=OFF -DGENESIS_MPI=OFF -DGENESIS_DNNL=OFF \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1" -DCMAKE_C_FLAGS_RELEASE="-O1" >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target $(printf 'fuzz_%s ' "${names[@]}")

per=$((seconds / ${#names[@]}))
[ "$per" -ge 1 ] || per=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for name in "${names[@]}"; do
  dict=tests/fuzz/json.dict
  case $name in recipe) dict=tests/fuzz/toml.dict ;; chat_template) dict=tests/fuzz/jinja.dict ;; shard | idx | image) dict= ;; esac
  mkdir -p "$work/$name" "$build/findings/$name"
  # The first corpus directory (empty, scratch) receives new inputs; the committed one is read.
  args=(-max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -seed="${FUZZ_SEED:-1}" -print_final_stats=1
        -artifact_prefix="$build/findings/$name/")
  [ -n "$dict" ] && args+=(-dict="$dict")
  echo "fuzz: $name for ${per}s"
  if ! "$build/tests/fuzz/fuzz_$name" "${args[@]}" "$work/$name" "tests/fuzz/corpus/$name" >"$work/$name.log" 2>&1; then
    tail -40 "$work/$name.log"
    echo "fuzz: $name FAILED; replay: $build/tests/fuzz/fuzz_$name $build/findings/$name/<file>" >&2
    failed+=("$name")
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/$name.log" | tr '\n' ' '
    echo
  fi
done
# Size ladders: a valid input of N, 4N and 16N units (tests/fuzz/ladder.py) per reader whose
# cost could grow faster than its input. Linear cost makes the 16N run ~4x the 4N run, a
# quadratic one 16x; more than 8x fails (the fastest of three runs of each).
ms_of() {  # ms_of NAME FILE: the harness's best time of three on one input
  for _ in 1 2 3; do
    "$build/tests/fuzz/fuzz_$1" "$2" 2>&1 | sed -n 's/^Executed .* in \([0-9]*\) ms$/\1/p'
  done | sort -n | head -1
}
for ladder in safetensors:2500 tokenizer:5000 trainer_json:20000 csv:1000; do
  name=${ladder%%:*} n=${ladder#*:}
  [[ " ${names[*]} " == *" $name "* ]] || continue
  times=()
  for k in 1 4 16; do
    python3 tests/fuzz/ladder.py "$name" $((n * k)) "$work/ladder.in"
    times+=("$(ms_of "$name" "$work/ladder.in")")
  done
  echo "fuzz: $name size ladder $n/$((4 * n))/$((16 * n)): ${times[*]} ms"
  if [ ${#times[@]} -ne 3 ] || [ -z "${times[1]}" ] || [ -z "${times[2]}" ]; then
    echo "fuzz: $name failed on its size ladder (run: python3 tests/fuzz/ladder.py $name N FILE)" >&2
    failed+=("$name-ladder")
  elif [ "${times[2]}" -gt $((8 * ${times[1]} + 20)) ]; then
    echo "fuzz: $name grows faster than its input (${times[1]} ms at $((4 * n)), ${times[2]} ms at $((16 * n)))" >&2
    failed+=("$name-ladder")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#names[@]} harnesses, ${per}s each, no findings"
