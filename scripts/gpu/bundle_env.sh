# Sourced by the GPU-host scripts: unpacks the bundle archive $1 (scripts/gpu/bundle.sh) into a
# fresh directory $b, puts its libraries on LD_LIBRARY_PATH and sets $genesis to its CLI.
b=$(mktemp -d)
tar -xJf "${1:?bundle archive}" -C "$b"
export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
genesis="$b/bin/genesis"
# The recipes' ${GENESIS_DATA}: on the GPU host, the data fetched here travels with the tree as
# data/cache (a carried path), unless GENESIS_DATA says otherwise.
export GENESIS_DATA="${GENESIS_DATA:-$PWD/data/cache}"

# The [data] section of the GPU scripts' small language-model recipes: the repository's own docs,
# tokenized with the test fixture's BPE (vocabulary 703) into shards under $1, windows of $2 tokens.
# Nothing is downloaded.
docs_token_data() {
  cat <<TOML
[data]
name = "tokens"
shards = "$1"
tokenizer = "$PWD/tests/fixtures/tokenizer_bpe/tokenizer.json"
source = [$(printf '"%s", ' "$PWD"/docs/*.md)"$PWD/README.md"]
val_fraction = 0.05
seq_len = $2
TOML
}
