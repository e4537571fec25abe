#pragma once
// Where genesis keeps what it makes for a user outside any run directory, and how a recipe's
// paths are read. Nothing here depends on the working directory:
//   cache root  data.cache_dir, else $GENESIS_CACHE_DIR, else $XDG_CACHE_HOME/genesis, else
//               ~/.cache/genesis (prepared SFT data lives under it);
//   data root   $GENESIS_DATA, else <cache root>/data: what data/fetch.sh brings (datasets, the
//               GPT-2 vocabulary) and the token shards made from them.
// A recipe's path keys may name either with ${GENESIS_DATA} / ${GENESIS_CACHE_DIR}, any other
// environment variable as ${NAME}, and the home directory as a leading ~/; everything else in a
// path is taken as written, a relative path from the working directory.
#include <filesystem>
#include <string>

namespace genesis::io {

// `configured` when it is not empty, else the environment's choice (above). UsageError when
// nothing names one (no HOME either).
std::filesystem::path cache_root(const std::string& configured = "");
std::filesystem::path data_root();

// `value` with ${NAME} replaced by the environment variable NAME (GENESIS_DATA and
// GENESIS_CACHE_DIR fall back to the roots above when unset) and a leading "~/" by $HOME.
// ValueError naming the variable when one is unset or the ${ is not closed. A '$' not followed by
// '{' is kept as it is.
std::string expand_path(const std::string& value);

}  // namespace genesis::io
