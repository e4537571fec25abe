#pragma once
// Token shards: flat files of token ids, memory-mapped for reading, and a loader that cuts
// them into (input, target) windows for language-model training.
//
// genesis format (little-endian): a 32-byte header
//   char magic[8] = "GENTOKEN", u32 version = 1, u32 token_bytes (2 or 4),
//   u64 count (tokens), u64 vocab_size (0 = unknown)
// then `count` tokens of `token_bytes` bytes each. llm.c's format is read too: a header of
// 256 int32 (magic 20240520, version 1, count at [2]) then u16 tokens.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libgenesis/core/tensor.h"
#include "libgenesis/data/tokenizer.h"

namespace genesis::data {

enum class ShardFormat { genesis, llmc };

// Writes `tokens` as a genesis shard (u16 when every id fits the vocabulary below 65536, else
// u32), atomically. Throws ValueError if a token is >= vocab_size (when vocab_size > 0).
void write_token_shard(const std::filesystem::path& path, const std::vector<uint32_t>& tokens, uint64_t vocab_size);

// What a directory of shards was made from, kept beside them in DIR/source.json so that a
// recipe whose sources change can tell that its shards no longer come from them (the shards
// hold only tokens). Fingerprints are file_fingerprint (FNV-1a 64) of the bytes.
struct ShardSources {
  struct File {
    std::string path;
    uint64_t fingerprint = 0;
  };
  std::vector<File> documents;  // in the order they were tokenized
  std::vector<File> tokenizer;  // the files Tokenizer::load reads (tokenizer.json, or encoder.json + vocab.bpe, ...)
  double val_fraction = 0;
  std::string separator;
  // Bytes of each shard as written ("train.bin", "val.bin"): a shard rewritten since, by a crash
  // between two of its files or by hand, no longer matches.
  std::vector<std::pair<std::string, uint64_t>> shard_bytes;
};

inline constexpr const char* kShardSourcesFile = "source.json";

struct TokenizeOptions {
  double val_fraction = 0.1;                // of each document's tokens, its last part
  std::string separator = "<|endoftext|>";  // token that starts every document; "" for none
  // Documents are read in pieces of about this many bytes (data/text_pieces.h; tests set it small).
  size_t piece_bytes = size_t{16} << 20;
  // Called after each document with its path, bytes and tokens (progress for the caller).
  std::function<void(const std::filesystem::path&, size_t, size_t)> on_document;
  // What the shards are made from (describe_shard_sources), written to out_dir/source.json after
  // the shards; without it no source.json is written and one left there is removed.
  std::optional<ShardSources> sources;
};

// The sources of shards about to be made from `documents` with the tokenizer at `tokenizer`
// (a file or a directory, as Tokenizer::load takes it), fingerprinted now: before the documents
// are read, so that one edited meanwhile is found changed by the next comparison.
ShardSources describe_shard_sources(const std::vector<std::filesystem::path>& documents,
                                    const std::filesystem::path& tokenizer, const TokenizeOptions& options);

// The first difference between what the shards in a directory were made from and `wanted`.
struct ShardSourcesChange {
  enum class What { none, documents, tokenizer, val_fraction, separator, shards };
  What what = What::none;
  std::string detail;  // "a.txt differs", "0.1 -> 0.05", "train.bin has 12 bytes, source.json says 40"
};
// Compares dir/source.json with `wanted`; nullopt when the directory has no source.json (shards
// made by hand or by an older genesis: nothing to compare). A source.json that cannot be read,
// or of another format, counts as a change of the shards.
std::optional<ShardSourcesChange> compare_shard_sources(const std::filesystem::path& dir, const ShardSources& wanted);

struct TokenizeSummary {
  std::filesystem::path train_path, val_path;  // val_path is empty when val_fraction is 0
  size_t train_tokens = 0, val_tokens = 0;
  size_t bytes = 0;  // of text read
};

// A source entry as document paths: the file itself, or a directory's *.txt files, sorted
// (data.source and `genesis data tokenize --input` take both).
std::vector<std::filesystem::path> source_documents(const std::filesystem::path& entry);

// Encodes each file as one document ([separator] + its tokens, added tokens' strings taken
// as ordinary text) and writes out_dir/train.bin and, when val_fraction > 0, out_dir/val.bin
// holding the last val_fraction of every document's tokens (else an old val.bin is removed),
// then options.sources as out_dir/source.json. Each file is renamed into place whole, so a
// process reading the old shards keeps reading them. Throws UsageError when the tokenizer lacks
// the separator, ValueError when val_fraction is outside [0, 1).
TokenizeSummary tokenize_to_shards(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& documents,
                                   const std::filesystem::path& out_dir, const TokenizeOptions& options);

// Whether the regular file at `path` starts like a token shard (either magic); nothing else is
// checked (TokenShard does). False for directories, short files and unreadable paths.
bool looks_like_token_shard(const std::filesystem::path& path);

// A read-only, memory-mapped shard of either format. Throws IoError (missing/unreadable) or
// ValueError (bad magic or version, truncated or oversized body), naming the file.
class TokenShard {
 public:
  explicit TokenShard(const std::filesystem::path& path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&&) = delete;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  int64_t size() const { return count_; }
  int token_bytes() const { return token_bytes_; }
  ShardFormat format() const { return format_; }
  uint64_t vocab_size() const { return vocab_size_; }  // 0 when the format does not say
  const std::filesystem::path& path() const { return path_; }
  uint32_t operator[](int64_t i) const;
  // The largest token id in the shard (one pass over the mapped tokens); 0 when it is empty.
  uint32_t max_token() const;
  // max_token(), after checking it against the header's vocab_size (when the header gives one):
  // throws ValueError naming the file when an id lies outside it.
  uint32_t checked_max_token() const;
  // Copies tokens [start, start + n) into out as int64.
  void read(int64_t start, int64_t n, int64_t* out) const;

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  int64_t count_ = 0;
  int token_bytes_ = 2;
  ShardFormat format_ = ShardFormat::genesis;
  uint64_t vocab_size_ = 0;
};

struct TokenWindowOptions {
  int64_t batch_size = 8;  // windows per rank per step
  int64_t seq_len = 256;   // T: each window holds T + 1 tokens
  bool shuffle = true;     // a seeded permutation of the windows per epoch, else shard order
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
};

// Where the loader stands: the step within the epoch that next() returns. Checkpoints keep
// it (to_json) so that a resumed run reads the same windows as an uninterrupted one.
struct TokenWindowCursor {
  int64_t epoch = 0;
  int64_t step = 0;
  std::string to_json() const;
  static TokenWindowCursor from_json(std::string_view json);
  friend bool operator==(const TokenWindowCursor&, const TokenWindowCursor&) = default;
};

struct TokenBatch {
  Tensor inputs;   // i64 [B, T]
  Tensor targets;  // i64 [B, T]: inputs shifted left by one token
  TokenWindowCursor at;
};

// Windows of seq_len + 1 tokens start every seq_len tokens of each shard (no window crosses
// shards). A step's global batch is batch_size * world_size consecutive windows of the
// epoch's order; rank r takes its r-th slice, so ranks never share a window. Windows left
// over at the end of an epoch (fewer than a global batch) are skipped.
class TokenWindowLoader {
 public:
  TokenWindowLoader(const std::vector<std::filesystem::path>& shards, TokenWindowOptions options);

  TokenBatch next();
  int64_t windows() const { return total_windows_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t tokens() const;  // in all shards
  TokenWindowCursor cursor() const { return cursor_; }
  // Throws ValueError when the step lies beyond the epoch.
  void seek(TokenWindowCursor cursor);

 private:
  const std::vector<int64_t>& order_for(int64_t epoch);

  std::vector<TokenShard> shards_;
  std::vector<int64_t> first_window_;  // prefix sums: shard s holds windows [first[s], first[s+1])
  TokenWindowOptions options_;
  int64_t total_windows_ = 0;
  int64_t steps_per_epoch_ = 0;
  TokenWindowCursor cursor_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace genesis::data
