#!/usr/bin/env bash
# Packs what the GPU host needs to run binaries built here into one compressed archive:
# the executables plus the non-system shared libraries they load (OpenBLAS, OpenMP,
# toml++, ...). The GPU host has CUDA 13 itself, so CUDA libraries are not copied.
#   scripts/gpu/bundle.sh BUILD_DIR OUT_ARCHIVE.tar.xz
#   BINARIES=genesis scripts/gpu/bundle.sh ...   only those executables (a smaller archive, for
#                                                runs that carry data beside it)
set -euo pipefail
build=${1:?build directory}
archive=${2:?output archive (.tar.xz)}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
if [ -n "${BINARIES:-}" ]; then
  for name in $BINARIES; do cp "$build/bin/$name" "$stage/bin/"; done
else
  cp "$build"/bin/* "$stage/bin/"
fi
for exe in "$stage"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) continue ;;
      libcuda.so*|libcudart*|libcublas*|libnccl*|libnvrtc*|libcudnn*) continue ;;
    esac
    cp -L -n "$lib" "$stage/lib/"
  done
done
# A CTest file over the [cuda] cases, so the GPU host can run `ctest -L cuda` in the bundle.
# (Catch2 v2 exits with the number of cases listed.)
cases=""
if [ -x "$stage/bin/genesis_tests" ]; then
  cases=$(LD_LIBRARY_PATH="$stage/lib:${LD_LIBRARY_PATH:-}" "$stage/bin/genesis_tests" --list-test-names-only "[cuda]" || true)
fi
echo "$cases" | python3 -c '
import re, sys
cmake = lambda s: s.replace("\\", "\\\\").replace("\"", "\\\"")
for name in filter(None, (line.rstrip("\n") for line in sys.stdin)):
    spec = re.sub(r"([\\,\[\]*])", r"\\\1", name)  # Catch2 test-spec metacharacters
    print(f"add_test(\"{cmake(name)}\" bin/genesis_tests \"{cmake(spec)}\")")
    print(f"set_tests_properties(\"{cmake(name)}\" PROPERTIES LABELS cuda)")
' > "$stage/CTestTestfile.cmake"
mkdir -p "$(dirname "$archive")"
tar -C "$stage" -cJf "$archive" bin lib CTestTestfile.cmake
du -h "$archive"
