#include "libgenesis/data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <bit>

#include "libgenesis/core/error.h"
#include "libgenesis/data/tokenizer_impl.h"

namespace genesis::data {

namespace detail {

std::array<uint32_t, 256> byte_to_code_point() {
  std::array<uint32_t, 256> map{};
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = visible ? b : next_extra++;
  }
  return map;
}

Regex::Regex(const std::string& pattern, const std::string& origin) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    GENESIS_THROW(ValueError, "pre-tokenizer regex of ", origin, " does not compile at offset ", offset, ": ",
                  reinterpret_cast<const char*>(message));
  }
  origin_ = origin;
  // JIT is an optimization only: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

bool Regex::next_match(std::string_view text, size_t from, void* match_data, size_t& begin, size_t& end) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  int rc = pcre2_match(static_cast<const pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                       from, 0, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    GENESIS_THROW(ValueError, "pre-tokenizer regex of ", origin_, " failed at byte ", from, " of the text: ",
                  reinterpret_cast<const char*>(message), " (PCRE2 error ", rc,
                  "; a match limit or malformed input; report the tokenizer and the text)");
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
  begin = ovector[0];
  end = ovector[1];
  if (end == begin) {  // an empty match: step over one byte so that the scan advances
    if (begin >= text.size()) return false;
    end = begin + 1;
  }
  return true;
}

void MergeTable::insert(TokenId left, TokenId right, Merge merge) {
  if (2 * (size_ + 1) > slots_.size()) grow();  // load factor <= 1/2 keeps probes short
  uint64_t key = pack(left, right);
  size_t i = slot_of(key);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == key) return;
  slots_[i] = {key, merge};
  ++size_;
}

void MergeTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  size_t capacity = std::max<size_t>(64, old.size() * 2);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  for (const Slot& slot : old) {
    if (slot.key == kEmpty) continue;
    size_t i = slot_of(slot.key);
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
}

MatchData::MatchData(const Regex& regex)
    : data_(pcre2_match_data_create_from_pattern(static_cast<const pcre2_code*>(regex.code_), nullptr)) {
  GENESIS_CHECK(data_ != nullptr, Error, "out of memory for PCRE2 match data");
}

MatchData::~MatchData() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(data_));
}

}  // namespace detail

namespace {

constexpr size_t kMaxCachedWords = 1 << 20;

// A merge candidate: the pair (left, right) starting at symbol `pos`; lowest rank first, then
// leftmost. It is stale once either symbol has changed.
struct Candidate {
  uint32_t rank;
  int32_t pos;
  TokenId left, right, merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void Tokenizer::Impl::bpe(std::string_view word, std::vector<TokenId>& out) const {
  const int n = static_cast<int>(word.size());
  if (n == 1) {
    out.push_back(byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  // Symbols form a doubly linked list over the word's bytes; merging absorbs the right symbol.
  std::vector<TokenId> id(n);
  std::vector<int32_t> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    id[i] = byte_ids[static_cast<unsigned char>(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<Candidate> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const detail::Merge* merge = merges.find(id[pos], id[next[pos]]);
    if (merge == nullptr) return;
    heap.push_back({merge->rank, pos, id[pos], id[next[pos]], merge->merged});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    Candidate c = heap.back();
    heap.pop_back();
    int32_t right = next[c.pos];
    if (right < 0 || id[c.pos] != c.left || id[right] != c.right) continue;  // stale
    id[c.pos] = c.merged;
    id[right] = TokenId(-1);
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push_pair(prev[c.pos]);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (auto hit = cache.find(word); hit != cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<TokenId> ids;
  auto whole = ignore_merges ? bytes_to_id.find(word) : bytes_to_id.end();
  if (whole != bytes_to_id.end()) {
    ids.push_back(whole->second);
  } else {
    bpe(word, ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache.size() >= kMaxCachedWords) cache.clear();
  cache.emplace(std::string(word), std::move(ids));
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  std::string prefixed;
  if (add_prefix_space && !text.empty() && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  // Each split stage cuts the pieces of the previous one; bytes no match covers (invalid
  // UTF-8, or characters outside the pattern) are pieces of their own, so nothing is lost.
  auto split = [&](auto&& self, std::string_view piece, size_t stage) -> void {
    if (stage == splits.size()) {
      encode_word(piece, out);
      return;
    }
    size_t covered = 0;
    splits[stage]->for_each_match(piece, [&](size_t begin, size_t end) {
      if (begin > covered) self(self, piece.substr(covered, begin - covered), stage + 1);
      self(self, piece.substr(begin, end - begin), stage + 1);
      covered = end;
    });
    if (covered < piece.size()) self(self, piece.substr(covered), stage + 1);
  };
  if (!text.empty()) split(split, text, 0);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode_ordinary(std::string_view text) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3);
  std::lock_guard lock(impl_->cache_mutex);
  impl_->encode_text(text, out);
  return out;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
  const auto& added = impl_->added;
  if (added.empty()) return encode_ordinary(text);
  std::vector<TokenId> out;
  out.reserve(text.size() / 3);
  std::lock_guard lock(impl_->cache_mutex);
  // next_at[k]: where added token k next occurs at or after `pos` (npos: nowhere).
  std::vector<size_t> next_at(added.size());
  for (size_t k = 0; k < added.size(); ++k) next_at[k] = text.find(added[k].content);
  size_t pos = 0;
  for (;;) {
    size_t best = std::string_view::npos;
    for (size_t k = 0; k < added.size(); ++k) {
      if (next_at[k] != std::string_view::npos && next_at[k] < pos) next_at[k] = text.find(added[k].content, pos);
      // Leftmost occurrence; the longest token among those starting there.
      if (next_at[k] == std::string_view::npos) continue;
      if (best == std::string_view::npos || next_at[k] < next_at[best] ||
          (next_at[k] == next_at[best] && added[k].content.size() > added[best].content.size()))
        best = k;
    }
    if (best == std::string_view::npos) break;
    impl_->encode_text(text.substr(pos, next_at[best] - pos), out);
    out.push_back(added[best].id);
    pos = next_at[best] + added[best].content.size();
  }
  impl_->encode_text(text.substr(pos), out);
  return out;
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  GENESIS_CHECK(id < impl_->id_to_bytes.size() && impl_->id_defined[id], IndexError, "token id ", id,
                " is outside the vocabulary of ", impl_->source, " (", impl_->id_to_bytes.size(), " ids)");
  return impl_->id_to_bytes[id];
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (TokenId id : ids) out += token_bytes(id);
  return out;
}

size_t Tokenizer::vocab_size() const {
  return impl_->id_to_bytes.size();
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->bytes_to_id.find(token);
  if (it == impl_->bytes_to_id.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::source() const {
  return impl_->source;
}

size_t Tokenizer::cached_words() const {
  std::lock_guard lock(impl_->cache_mutex);
  return impl_->cache.size();
}

bool Tokenizer::encodes_pieces() const { return !impl_->add_prefix_space; }

}  // namespace genesis::data
