#!/usr/bin/env bash
# Packs what the GPU host needs to run binaries built here: the executables plus the
# non-system shared libraries they load (OpenBLAS, OpenMP, toml++, ...). The GPU host
# has CUDA 13 itself, so CUDA libraries are not copied.
#   scripts/gpu/bundle.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?build directory}
out=${2:?output directory}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build"/bin/* "$out/bin/"
for exe in "$out"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) continue ;;
      libcuda.so*|libcudart*|libcublas*|libnccl*|libnvrtc*|libcudnn*) continue ;;
    esac
    cp -L -n "$lib" "$out/lib/" 2>/dev/null || true
  done
done
du -sh "$out"
