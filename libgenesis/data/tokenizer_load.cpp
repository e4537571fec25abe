// Loading byte-level BPE tokenizers: GPT-2's encoder.json + vocab.bpe, and Hugging Face
// tokenizer.json (model.type "BPE" with a ByteLevel pre-tokenizer).
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "libgenesis/core/error.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/data/tokenizer_impl.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/json_text.h"

namespace genesis::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// GPT-2's pre-tokenization pattern (also what a ByteLevel pre-tokenizer with use_regex uses).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string read_existing(const fs::path& path, const char* what) {
  GENESIS_CHECK(fs::is_regular_file(path), IoError, what, " not found: ", path.string());
  return io::read_file(path, io::kMaxTokenizerFileBytes);
}

json parse_json(const std::string& text, const fs::path& path) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    GENESIS_THROW(ValueError, "malformed JSON in ", path.string(), ": ", io::json_error_text(e));
  }
}

// Token strings are written over GPT-2's byte alphabet (UTF-8 of the mapped code points);
// returns the raw bytes they stand for.
std::string unmap_bytes(std::string_view token, const std::string& where) {
  static const std::vector<int> code_point_to_byte = [] {
    std::vector<int> table(512, -1);
    auto forward = detail::byte_to_code_point();
    for (int b = 0; b < 256; ++b) table[forward[b]] = b;
    return table;
  }();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    auto c = static_cast<unsigned char>(token[i]);
    uint32_t cp = 0;
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : 0;
    if (len == 1) cp = c;
    if (len == 2 && i + 1 < token.size()) cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
    GENESIS_CHECK(len != 0 && cp < code_point_to_byte.size() && code_point_to_byte[cp] >= 0, ValueError, where,
                  ": token '", token, "' is not written in the byte-level alphabet (not a byte-level BPE vocabulary)");
    out += static_cast<char>(code_point_to_byte[cp]);
    i += len;
  }
  return out;
}

// The ids of a file of n tokens (`entries`) lie below 2n + 1024: vocabularies number their
// tokens densely (a few reserved gaps at most). The table of ids is sized by the largest, so a
// corrupt id of 10^8 in a file of 300 tokens must fail here, not allocate gigabytes.
void set_token(Tokenizer::Impl& impl, uint64_t token_id, std::string bytes, const std::string& where,
               size_t entries) {
  const uint64_t limit = 2 * static_cast<uint64_t>(entries) + 1024;
  GENESIS_CHECK(token_id < limit, ValueError, where, ": token id ", token_id, " is out of range for a vocabulary of ",
                entries, " tokens (ids are below ", limit, "); the file is corrupt");
  const auto id = static_cast<TokenId>(token_id);
  if (id >= impl.id_to_bytes.size()) {
    impl.id_to_bytes.resize(id + 1);
    impl.id_defined.resize(id + 1, false);
  }
  impl.id_to_bytes[id] = bytes;
  impl.id_defined[id] = true;
  impl.bytes_to_id.emplace(std::move(bytes), id);
}

// A vocabulary's token -> id entries. Two tokens of one id would make encode() emit that id for
// both, and decode() give back only one of them (an '!' that turns into end-of-text), so the
// file is refused naming both.
void set_vocab(Tokenizer::Impl& impl, const json& vocab, const std::string& where, size_t entries) {
  std::unordered_map<uint64_t, std::string> token_of_id;
  token_of_id.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    GENESIS_CHECK(id.is_number_unsigned(), ValueError, where, ": the id of token '", token, "' is not an integer");
    const auto [first, inserted] = token_of_id.emplace(id.get<uint64_t>(), token);
    GENESIS_CHECK(inserted, ValueError, where, ": tokens '", first->second, "' and '", token, "' both have id ",
                  first->first, "; each id must name one token (the file is corrupt or was edited)");
    set_token(impl, id.get<uint64_t>(), unmap_bytes(token, where), where, entries);
  }
}

}  // namespace

void Tokenizer::Impl::add_merge(std::string_view left, std::string_view right, uint32_t rank,
                                const std::string& where) {
  std::string left_bytes = unmap_bytes(left, where), right_bytes = unmap_bytes(right, where);
  auto l = bytes_to_id.find(left_bytes), r = bytes_to_id.find(right_bytes);
  auto m = bytes_to_id.find(left_bytes + right_bytes);
  GENESIS_CHECK(l != bytes_to_id.end() && r != bytes_to_id.end() && m != bytes_to_id.end(), ValueError, where,
                ": merge '", left, " ", right, "' names a token that is not in the vocabulary");
  // The first (lowest-rank) occurrence of a pair wins.
  merges.insert(l->second, r->second, detail::Merge{rank, m->second});
}

void Tokenizer::Impl::finish(const std::string& where) {
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    GENESIS_CHECK(it != bytes_to_id.end(), ValueError, where, ": the vocabulary has no token for byte ", b,
                  " (not a byte-level BPE vocabulary)");
    byte_ids[b] = it->second;
  }
  cache.reserve(1 << 16);  // a book's distinct words without rehashing
  source = where;
}

Tokenizer Tokenizer::from_gpt2_files_unchecked(const fs::path& encoder_json, const fs::path& vocab_bpe) {
  auto impl = std::make_unique<Impl>();
  json vocab = parse_json(read_existing(encoder_json, "GPT-2 encoder.json"), encoder_json);
  GENESIS_CHECK(vocab.is_object(), ValueError, encoder_json.string(), ": expected a JSON object token -> id");
  std::string where = encoder_json.string();
  const size_t entries = vocab.size();
  set_vocab(*impl, vocab, where, entries);
  std::string merges = read_existing(vocab_bpe, "GPT-2 vocab.bpe");
  uint32_t rank = 0;
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges.size();) {
    size_t end = merges.find('\n', pos);
    if (end == std::string::npos) end = merges.size();
    std::string_view line(merges.data() + pos, end - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);  // CRLF files (saved on Windows)
    pos = end + 1;
    ++line_no;
    if (line.empty() || line.starts_with("#version")) continue;
    size_t space = line.find(' ');
    GENESIS_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos, ValueError,
                  vocab_bpe.string(), ":", line_no, ": expected 'left right', got '", line, "'");
    impl->add_merge(line.substr(0, space), line.substr(space + 1), rank++,
                    vocab_bpe.string() + ":" + std::to_string(line_no));
  }
  impl->splits.push_back(std::make_unique<detail::Regex>(kGpt2Pattern, "GPT-2"));
  impl->finish(encoder_json.parent_path().string() + " (GPT-2 encoder.json + vocab.bpe)");
  // GPT-2 separates documents with <|endoftext|>; as in Hugging Face's GPT-2 tokenizer it is
  // a special token that encode() matches in text.
  if (auto eot = impl->bytes_to_id.find(std::string_view("<|endoftext|>")); eot != impl->bytes_to_id.end())
    impl->added.push_back({eot->first, eot->second});
  return Tokenizer(std::move(impl));
}

namespace {

// `object`'s field `key`; `path` names the object in the file ("model", "added_tokens[3]").
const json& member(const json& object, const char* key, const std::string& where, const std::string& path = "") {
  GENESIS_CHECK(object.is_object(), ValueError, where, ": ", path.empty() ? "the file" : path, " must be an object, got ",
                object.type_name());
  auto it = object.find(key);
  GENESIS_CHECK(it != object.end(), ValueError, where, ": missing key '", path.empty() ? "" : path + ".", key, "'");
  return *it;
}

// The string at JSON path `path`, or a ValueError naming the path and what is there instead.
std::string string_at(const json& value, const std::string& path, const std::string& where) {
  GENESIS_CHECK(value.is_string(), ValueError, where, ": ", path, " must be a string, got ", value.type_name());
  return value.get<std::string>();
}

// `object[key]` as a string when present and not null, else `fallback`.
std::string optional_string(const json& object, const char* key, const std::string& fallback, const std::string& path,
                            const std::string& where) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : string_at(*it, path + "." + key, where);
}

bool flag(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

// Adds the pre-tokenizer `p`'s regex stages; returns whether it includes a ByteLevel step.
bool add_pre_tokenizer(Tokenizer::Impl& impl, const json& p, const std::string& where, const std::string& path) {
  std::string type = string_at(member(p, "type", where, path), path + ".type", where);
  if (type == "Sequence") {
    bool byte_level = false;
    const json& steps = member(p, "pretokenizers", where, path);
    GENESIS_CHECK(steps.is_array(), ValueError, where, ": ", path, ".pretokenizers must be an array, got ",
                  steps.type_name());
    for (size_t i = 0; i < steps.size(); ++i)
      byte_level |= add_pre_tokenizer(impl, steps[i], where, path + ".pretokenizers[" + std::to_string(i) + "]");
    return byte_level;
  }
  if (type == "ByteLevel") {
    impl.add_prefix_space = flag(p, "add_prefix_space");
    if (!p.contains("use_regex") || flag(p, "use_regex"))
      impl.splits.push_back(std::make_unique<detail::Regex>(kGpt2Pattern, where + " ByteLevel"));
    return true;
  }
  if (type == "Split") {
    const json& pattern = member(p, "pattern", where, path);
    std::string behavior = optional_string(p, "behavior", "Isolated", path, where);
    GENESIS_CHECK(behavior == "Isolated" && !flag(p, "invert"), ValueError, where,
                  ": Split pre-tokenizer with behavior '", behavior,
                  "' or invert is not supported (genesis supports Isolated, not inverted)");
    std::string regex;
    if (pattern.is_object() && pattern.contains("Regex")) {
      regex = string_at(pattern["Regex"], path + ".pattern.Regex", where);
    } else {
      // A literal String pattern: quote it for PCRE2.
      regex = "\\Q" + string_at(member(pattern, "String", where, path + ".pattern"), path + ".pattern.String", where) +
              "\\E";
    }
    impl.splits.push_back(std::make_unique<detail::Regex>(regex, where + " Split"));
    return false;
  }
  GENESIS_THROW(ValueError, where, ": pre-tokenizer type '", type,
                "' is not supported (genesis supports ByteLevel, Split and Sequence of them)");
}

}  // namespace

Tokenizer Tokenizer::from_hf_json_unchecked(const fs::path& tokenizer_json) {
  std::string where = tokenizer_json.string();
  json root = parse_json(read_existing(tokenizer_json, "tokenizer.json"), tokenizer_json);
  GENESIS_CHECK(root.is_object(), ValueError, where, ": expected a JSON object");
  const json& model = member(root, "model", where);
  GENESIS_CHECK(model.is_object(), ValueError, where, ": model must be an object, got ", model.type_name());
  // Files from early versions of tokenizers name no model type; a merge list means BPE there.
  std::string type = optional_string(model, "type", model.contains("merges") ? "BPE" : "", "model", where);
  GENESIS_CHECK(type == "BPE", ValueError, where, ": model type is '", type,
                "', genesis reads only byte-level BPE tokenizers (model.type \"BPE\")");
  GENESIS_CHECK(!flag(model, "byte_fallback"), ValueError, where,
                ": byte_fallback BPE (SentencePiece style) is not supported; genesis reads byte-level BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    GENESIS_CHECK(optional_string(model, key, "", "model", where).empty(), ValueError, where, ": model.", key,
                  " is not supported");
  if (auto n = root.find("normalizer"); n != root.end() && !n->is_null()) {
    std::string normalizer = string_at(member(*n, "type", where, "normalizer"), "normalizer.type", where);
    GENESIS_CHECK(normalizer == "NFC", ValueError, where, ": normalizer '", normalizer,
                  "' is not supported (none, or NFC, whose input genesis takes as already NFC)");
  }

  auto impl = std::make_unique<Impl>();
  impl->ignore_merges = flag(model, "ignore_merges");
  const json& vocab = member(model, "vocab", where, "model");
  GENESIS_CHECK(vocab.is_object(), ValueError, where, ": model.vocab is not an object token -> id");
  const auto added_tokens = root.find("added_tokens");
  const size_t entries = vocab.size() + (added_tokens != root.end() ? added_tokens->size() : 0);
  set_vocab(*impl, vocab, where, entries);
  const json& merges = member(model, "merges", where, "model");
  GENESIS_CHECK(merges.is_array(), ValueError, where, ": model.merges must be an array, got ", merges.type_name());
  uint32_t rank = 0;
  for (const auto& merge : merges) {
    if (merge.is_array() && merge.size() == 2) {
      const std::string at = "model.merges[" + std::to_string(rank) + "]";
      impl->add_merge(string_at(merge[0], at + "[0]", where), string_at(merge[1], at + "[1]", where), rank++, where);
      continue;
    }
    GENESIS_CHECK(merge.is_string(), ValueError, where, ": merge ", rank,
                  " is neither \"left right\" nor [left, right]");
    std::string line = merge.get<std::string>();
    size_t space = line.find(' ');
    GENESIS_CHECK(space != std::string::npos, ValueError, where, ": merge '", line, "' has no space");
    impl->add_merge(std::string_view(line).substr(0, space), std::string_view(line).substr(space + 1), rank++, where);
  }

  bool byte_level = false;
  if (auto p = root.find("pre_tokenizer"); p != root.end() && !p->is_null())
    byte_level = add_pre_tokenizer(*impl, *p, where, "pre_tokenizer");
  GENESIS_CHECK(byte_level, ValueError, where,
                ": the pre-tokenizer has no ByteLevel step; genesis reads only byte-level BPE tokenizers");

  if (added_tokens != root.end()) {
    GENESIS_CHECK(added_tokens->is_array(), ValueError, where, ": added_tokens must be an array, got ",
                  added_tokens->type_name());
    for (size_t i = 0; i < added_tokens->size(); ++i) {
      const json& token = (*added_tokens)[i];
      const std::string at = "added_tokens[" + std::to_string(i) + "]";
      std::string content = string_at(member(token, "content", where, at), at + ".content", where);
      GENESIS_CHECK(!content.empty(), ValueError, where, ": an added token has empty content");
      GENESIS_CHECK(!flag(token, "single_word") && !flag(token, "lstrip") && !flag(token, "rstrip"), ValueError, where,
                    ": added token '", content, "' uses single_word/lstrip/rstrip, which genesis does not support");
      const json& id_field = member(token, "id", where, at);
      GENESIS_CHECK(id_field.is_number_unsigned(), ValueError, where, ": ", at,
                    ".id must be a non-negative integer, got ", id_field.type_name());
      const auto id = id_field.get<uint64_t>();
      set_token(*impl, id, content, where, entries);
      impl->added.push_back({content, static_cast<TokenId>(id)});
    }
  }
  impl->finish(where);
  return Tokenizer(std::move(impl));
}

namespace {

// Runs a loader; a field of the wrong type (a number where a string belongs, ...) becomes a
// ValueError naming the file, with nlohmann's description without its "[json.exception...]" tag.
template <class Load>
auto with_json_errors(const fs::path& file, Load&& load) -> decltype(load()) {
  try {
    return load();
  } catch (const nlohmann::json::exception& e) {
    GENESIS_THROW(ValueError, "tokenizer ", file.string(), ": a field has an unexpected type or value (",
                  io::json_error_text(e),
                  "); expected a Hugging Face tokenizer.json or GPT-2's encoder.json + vocab.bpe");
  }
}

}  // namespace

std::string Tokenizer::gpt2_as_hf_json(const fs::path& vocab_json, const fs::path& merges_file) {
  return with_json_errors(vocab_json, [&] {
    const json vocab = parse_json(read_existing(vocab_json, "GPT-2 vocabulary"), vocab_json);
    GENESIS_CHECK(vocab.is_object(), ValueError, vocab_json.string(), ": expected a JSON object token -> id");
    json merges = json::array();
    const std::string text = read_existing(merges_file, "GPT-2 merges");
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      if (line.ends_with('\r')) line.remove_suffix(1);
      pos = end + 1;
      if (!line.empty() && !line.starts_with("#version")) merges.push_back(std::string(line));
    }
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                             {"use_regex", true}};
    json added = json::array();
    if (auto eos = vocab.find("<|endoftext|>"); eos != vocab.end())
      added.push_back({{"id", *eos}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", true}, {"special", true}});
    const json out = {{"version", "1.0"},
                      {"truncation", nullptr},
                      {"padding", nullptr},
                      {"added_tokens", added},
                      {"normalizer", nullptr},
                      {"pre_tokenizer", byte_level},
                      {"post_processor", byte_level},
                      {"decoder", byte_level},
                      {"model",
                       {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", nullptr},
                        {"continuing_subword_prefix", ""},
                        {"end_of_word_suffix", ""},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        {"vocab", vocab},
                        {"merges", merges}}}};
    return out.dump(2);
  });
}

Tokenizer Tokenizer::from_gpt2_files(const fs::path& encoder_json, const fs::path& vocab_bpe) {
  return with_json_errors(encoder_json, [&] { return from_gpt2_files_unchecked(encoder_json, vocab_bpe); });
}

Tokenizer Tokenizer::from_hf_json(const fs::path& tokenizer_json) {
  return with_json_errors(tokenizer_json, [&] { return from_hf_json_unchecked(tokenizer_json); });
}

bool Tokenizer::found_in(const fs::path& dir) {
  return fs::exists(dir / "tokenizer.json") || (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) ||
         (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"));
}

Tokenizer Tokenizer::load(const fs::path& path) {
  if (fs::is_directory(path)) {
    if (fs::exists(path / "tokenizer.json")) return from_hf_json(path / "tokenizer.json");
    if (fs::exists(path / "encoder.json") && fs::exists(path / "vocab.bpe"))
      return from_gpt2_files(path / "encoder.json", path / "vocab.bpe");
    GENESIS_CHECK(fs::exists(path / "vocab.json") && fs::exists(path / "merges.txt"), IoError, "tokenizer directory ",
                  path.string(), " holds neither tokenizer.json, encoder.json + vocab.bpe nor vocab.json + merges.txt");
    return from_gpt2_files(path / "vocab.json", path / "merges.txt");
  }
  GENESIS_CHECK(fs::exists(path), IoError, "tokenizer not found: ", path.string(),
                " (a tokenizer.json file or a directory with tokenizer.json or encoder.json + vocab.bpe)");
  return from_hf_json(path);
}

}  // namespace genesis::data
