#pragma once
// Internals of Tokenizer shared by the loaders (tokenizer_load.cpp) and the encoder
// (tokenizer.cpp). Not part of the library's interface.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "libgenesis/data/tokenizer.h"

namespace genesis::data::detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

// A compiled PCRE2 pattern (UTF, Unicode properties, invalid UTF-8 tolerated, JIT).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& origin);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Calls emit(begin, end) for every match of the pattern in text[0, size), left to right.
  template <class Emit>
  void for_each_match(std::string_view text, Emit&& emit) const;

 private:
  bool next_match(std::string_view text, size_t from, void* match_data, size_t& begin, size_t& end) const;
  void* code_ = nullptr;  // pcre2_code_8*
  std::string origin_;    // which tokenizer's pattern, for messages
  friend class MatchData;
};

// Per-call PCRE2 match buffers (kept out of Regex so that encoding stays re-entrant).
class MatchData {
 public:
  explicit MatchData(const Regex& regex);
  ~MatchData();
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  void* get() const { return data_; }

 private:
  void* data_;
};

template <class Emit>
void Regex::for_each_match(std::string_view text, Emit&& emit) const {
  MatchData match(*this);
  size_t pos = 0, begin = 0, end = 0;
  while (pos < text.size() && next_match(text, pos, match.get(), begin, end)) {
    emit(begin, end);
    pos = end;
  }
}

struct Merge {
  uint32_t rank;
  TokenId merged;
};

// Merge rules keyed by the pair (left id, right id): open addressing with linear probing in one
// flat array, so that a lookup costs about one cache miss (the BPE inner loop is lookups).
class MergeTable {
 public:
  // Keeps the first rule given for a pair (the lowest rank).
  void insert(TokenId left, TokenId right, Merge merge);
  const Merge* find(TokenId left, TokenId right) const {
    if (slots_.empty()) return nullptr;
    uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(TokenId left, TokenId right) { return (uint64_t{left} << 32) | right; }
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow();

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

struct AddedToken {
  std::string content;
  TokenId id;
};

// The byte-level alphabet of GPT-2: byte b <-> a printable code point (the byte itself for
// visible Latin-1 characters, 256 + n for the others).
std::array<uint32_t, 256> byte_to_code_point();

}  // namespace genesis::data::detail

namespace genesis::data {

struct Tokenizer::Impl {
  std::string source;                      // the file(s) it was loaded from, for messages
  std::vector<std::string> id_to_bytes;    // every id's bytes
  std::vector<bool> id_defined;            // ids without a token (gaps) are not decodable
  detail::StringMap<TokenId> bytes_to_id;  // BPE tokens and added tokens
  std::array<TokenId, 256> byte_ids{};     // the single-byte tokens
  detail::MergeTable merges;
  std::vector<std::unique_ptr<detail::Regex>> splits;  // pre-tokenization, applied in turn
  bool add_prefix_space = false;
  bool ignore_merges = false;  // a word that is itself a token skips the merges (Llama 3)
  std::vector<detail::AddedToken> added;

  // Memoized word -> ids. Encoding takes the lock once a call.
  mutable std::mutex cache_mutex;
  mutable detail::StringMap<std::vector<TokenId>> cache;

  // Builds merges/byte_ids from id_to_bytes and the merge list; checks the byte alphabet.
  void add_merge(std::string_view left, std::string_view right, uint32_t rank, const std::string& where);
  void finish(const std::string& where);

  void encode_text(std::string_view text, std::vector<TokenId>& out) const;
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;
  void bpe(std::string_view word, std::vector<TokenId>& out) const;
};

}  // namespace genesis::data
