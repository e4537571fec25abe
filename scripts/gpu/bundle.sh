#!/usr/bin/env bash
# Packs what the GPU host needs to run binaries built here into one compressed archive:
# the executables plus the non-system shared libraries they load (OpenBLAS, OpenMP,
# toml++, ...). The GPU host has CUDA 13 itself, so CUDA libraries are not copied.
#   scripts/gpu/bundle.sh BUILD_DIR OUT_ARCHIVE.tar.xz
set -euo pipefail
build=${1:?build directory}
archive=${2:?output archive (.tar.xz)}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build"/bin/* "$stage/bin/"
for exe in "$stage"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) continue ;;
      libcuda.so*|libcudart*|libcublas*|libnccl*|libnvrtc*|libcudnn*) continue ;;
    esac
    cp -L -n "$lib" "$stage/lib/"
  done
done
mkdir -p "$(dirname "$archive")"
tar -C "$stage" -cJf "$archive" bin lib
du -h "$archive"
