#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds with all cores and runs
# the suite through CTest. Exits non-zero on any failure.
#   BUILD_DIR   build directory (default: build)
#   GENESIS_CUDA, GENESIS_SANITIZE, BUILD_TYPE   forwarded to CMake
#   CI=true     adds -Werror, and runs scripts/fuzz.sh for FUZZ_SECONDS (default 135; 0 = skip)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

build_dir=${BUILD_DIR:-build}
cmake_args=(-S . -B "$build_dir" -G Ninja
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}"
  -DGENESIS_CUDA="${GENESIS_CUDA:-AUTO}"
  -DGENESIS_SANITIZE="${GENESIS_SANITIZE:-OFF}")
if [ "${CI:-}" = "true" ]; then cmake_args+=(-DGENESIS_WERROR=ON); fi

cmake "${cmake_args[@]}"
cmake --build "$build_dir" --parallel "$(nproc)"
(cd "$build_dir" && ctest --output-on-failure --parallel "$(nproc)" --timeout 600)

# CI also runs the fuzz harnesses (tests/fuzz) for FUZZ_SECONDS in all, from their committed
# corpora with a fixed seed; locally: bash scripts/fuzz.sh [SECONDS].
if [ "${CI:-}" = "true" ] && [ "${FUZZ_SECONDS:-135}" -gt 0 ]; then
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-135}"
fi
