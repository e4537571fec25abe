#!/usr/bin/env bash
# Proves the README's promise: on a fresh Debian 12 machine, `scripts/test.sh` and then
# `scripts/quickstart.sh` work as written. Makes a clean bookworm root with mmdebstrap, copies
# this working tree into it (tracked and untracked files, nothing git ignores: no build tree,
# nothing fetched), and runs the two commands inside it. Nothing of the host is used but its
# kernel, its network settings (resolv.conf, hosts, proxy variables) and, read-only,
# /usr/local/cuda, as the machine image ships it.
#   scripts/ci/fresh_debian.sh [options] [-- COMMAND...]
#     --no-cuda       leave /usr/local/cuda out of the root (the build then has no CUDA backend)
#     --keep DIR      make the root at DIR and keep it afterwards (default: a temporary one, removed)
#     --timeout MIN   stop the commands inside the root after MIN minutes (default 80)
#     COMMAND         what to run inside, from the tree's root (default: the README's two commands)
#   Environment: GENESIS_DEBIAN_MIRROR (default: mmdebstrap's, deb.debian.org); CI, BUILD_DIR,
#   GENESIS_CUDA, FUZZ_SECONDS and the proxy variables are passed into the root.
# Needs root (or sudo) and mmdebstrap (installed through apt when missing). Exit codes: the
# command's own, 2 usage, 3 when the root cannot be made (no root, no package registry).
# The mounts are undone and a temporary root removed on every exit, Ctrl-C included.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "fresh_debian: $1" >&2; exit "${2:-3}"; }

with_cuda=1 keep= minutes=80 command=()
while [ $# -gt 0 ]; do
  case $1 in
    --no-cuda) with_cuda= ;;
    --keep) [ $# -ge 2 ] || die "--keep needs a directory" 2; keep=$2; shift ;;
    --timeout) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--timeout needs a whole number of minutes" 2; minutes=$2; shift ;;
    --) shift; command=("$@"); break ;;
    -h | --help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" 2 ;;
  esac
  shift
done
[ ${#command[@]} -gt 0 ] || command=(bash -c 'scripts/test.sh && scripts/quickstart.sh')

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null ||
    die "making a Debian root needs root: run as root or with password-less sudo"
  again=(--timeout "$minutes")
  [ -n "$with_cuda" ] || again+=(--no-cuda)
  [ -z "$keep" ] || again+=(--keep "$keep")
  exec sudo -n --preserve-env=CI,BUILD_DIR,GENESIS_CUDA,FUZZ_SECONDS,GENESIS_DEBIAN_MIRROR,http_proxy,https_proxy,no_proxy \
    bash "${BASH_SOURCE[0]}" "${again[@]}" -- "${command[@]}"
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "fresh_debian: installing mmdebstrap" >&2
  export DEBIAN_FRONTEND=noninteractive
  { timeout 300 apt-get update -qq && timeout 600 apt-get install -y -qq --no-install-recommends mmdebstrap; } >/dev/null ||
    die "mmdebstrap is not installed and apt-get could not install it (no package registry?)"
fi

if [ -n "$keep" ]; then
  [ ! -e "$keep" ] || [ -z "$(ls -A "$keep")" ] || die "--keep $keep: the directory exists and is not empty" 2
  mkdir -p "$keep"
  root=$(cd "$keep" && pwd)
else
  root=$(mktemp -d "${TMPDIR:-/tmp}/genesis-fresh-debian.XXXXXX")
fi

# mounts_under: every mount point inside the root, deepest first (commands run inside the root
# may have mounted more).
mounts_under() { findmnt -rn -o TARGET | awk -v r="$root/" 'index($0, r) == 1' | sort -r; }
cleanup() {
  local status=$? target
  trap - EXIT INT TERM
  if [ -n "${inside:-}" ]; then  # stopped early: end the commands inside before unmounting
    kill -TERM "$inside" 2>/dev/null || true
    wait "$inside" 2>/dev/null || true
  fi
  # Lazily where a process inside still holds one, so that rm never reaches through a mount
  # into the host's /dev or CUDA toolkit.
  for _ in 1 2 3; do
    for target in $(mounts_under); do umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true; done
  done
  if [ -n "$(mounts_under)" ]; then
    echo "fresh_debian: could not unmount $(mounts_under | tr '\n' ' ')(the root is left at $root)" >&2
  elif [ -z "$keep" ]; then
    rm -rf --one-file-system "$root"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mirror=()
[ -z "${GENESIS_DEBIAN_MIRROR:-}" ] || mirror=("$GENESIS_DEBIAN_MIRROR")
echo "fresh_debian: making a bookworm root in $root" >&2
start=$SECONDS
log=$(mktemp)
if ! timeout 900 mmdebstrap --quiet --variant=apt bookworm "$root" "${mirror[@]}" </dev/null >"$log" 2>&1; then
  tail -n 5 "$log" >&2
  rm -f "$log"
  die "mmdebstrap could not make the root (no package registry? see the lines above)"
fi
rm -f "$log"
echo "fresh_debian: root made in $((SECONDS - start)) s" >&2

# bind DIR [ro]: the host's DIR at the same place inside the root.
bind() {
  mkdir -p "$root$1"
  mount --bind "$1" "$root$1"
  [ "${2:-}" != ro ] || mount -o remount,bind,ro "$root$1"
}
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
bind /dev
[ ! -d /dev/pts ] || bind /dev/pts  # script(1) in the CLI tests opens a terminal
[ ! -d /dev/shm ] || bind /dev/shm  # MPI's shared-memory transport
if [ -n "$with_cuda" ]; then
  if [ -d /usr/local/cuda ]; then
    bind "$(readlink -f /usr/local/cuda)" ro
    [ -L /usr/local/cuda ] && ln -sfn "$(readlink -f /usr/local/cuda)" "$root/usr/local/cuda"
  else
    echo "fresh_debian: no /usr/local/cuda on this host: building without it" >&2
  fi
fi
cp /etc/resolv.conf /etc/hosts "$root/etc/"

# The tree: what git tracks or would track, as it is in the working tree.
mkdir -p "$root/genesis"
(cd "$src" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf -) | tar -xf - -C "$root/genesis"

env_inside=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb)
for v in CI BUILD_DIR GENESIS_CUDA FUZZ_SECONDS http_proxy https_proxy no_proxy; do
  [ -z "${!v:-}" ] || env_inside+=("$v=${!v}")
done
echo "fresh_debian: running in the root: ${command[*]}" >&2
# In the background, so that a signal to this script runs its trap at once rather than after the
# build; timeout leads its own process group and passes SIGTERM on to all of it.
timeout -k 30 "$((minutes * 60))" \
  chroot "$root" /usr/bin/env -i "${env_inside[@]}" sh -c 'cd /genesis && exec "$@"' sh "${command[@]}" </dev/null &
inside=$!
status=0
wait "$inside" || status=$?
inside=
[ "$status" -ne 124 ] || echo "fresh_debian: stopped after $minutes minutes" >&2
echo "fresh_debian: finished with exit code $status after $((SECONDS - start)) s" >&2
exit "$status"
