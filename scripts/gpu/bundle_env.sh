# Sourced by the GPU-host scripts: unpacks the bundle archive $1 (scripts/gpu/bundle.sh) into a
# fresh directory $b, puts its libraries on LD_LIBRARY_PATH and sets $genesis to its CLI.
b=$(mktemp -d)
tar -xJf "${1:?bundle archive}" -C "$b"
export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
genesis="$b/bin/genesis"
