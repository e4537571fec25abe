#pragma once
// Byte-level BPE tokenizers (GPT-2, Qwen2, Llama 3): loaded from GPT-2's encoder.json +
// vocab.bpe or from a Hugging Face tokenizer.json. Tokens are byte strings over the 256-byte
// alphabet, so encode/decode round-trips any byte string exactly, invalid UTF-8 included
// (a ByteLevel pre-tokenizer with add_prefix_space adds its space, as Hugging Face's does).
//
// Encoding: added (special) tokens are matched first; the text between them is split by the
// pre-tokenization regex (PCRE2, Unicode classes, JIT) into words; each word is BPE-merged
// (rank hash map, linked symbols, a min-heap of candidate merges) and memoized. Bytes the
// regex cannot match (invalid UTF-8) form words of their own. Normalizers are not applied:
// a tokenizer.json with the NFC normalizer (Qwen2) is accepted and assumes NFC input, which
// nearly all text already is.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace genesis::data {

using TokenId = uint32_t;

class Tokenizer {
 public:
  // `path`: a directory holding tokenizer.json, encoder.json + vocab.bpe or vocab.json +
  // merges.txt, or a tokenizer.json file. Throws IoError (missing/unreadable file) or ValueError (not a
  // byte-level BPE tokenizer, malformed JSON), naming the file.
  static Tokenizer load(const std::filesystem::path& path);
  // Whether `dir` holds a tokenizer load() reads: tokenizer.json, GPT-2's encoder.json +
  // vocab.bpe, or the same files under Hugging Face's names vocab.json + merges.txt (what
  // `genesis convert --to hf` writes for a GPT-2 tokenizer).
  static bool found_in(const std::filesystem::path& dir);
  // GPT-2's vocabulary (encoder.json / vocab.json) and merges (vocab.bpe / merges.txt) as a
  // Hugging Face tokenizer.json: a byte-level BPE with GPT-2's pre-tokenizer, <|endoftext|> as
  // a special added token where the vocabulary has it. What `genesis convert --to hf` writes
  // beside them, so that tokenizers' fast tokenizer (AutoTokenizer) loads the export too.
  static std::string gpt2_as_hf_json(const std::filesystem::path& vocab_json, const std::filesystem::path& merges);
  static Tokenizer from_gpt2_files(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe);
  static Tokenizer from_hf_json(const std::filesystem::path& tokenizer_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Added tokens appearing in `text` become their ids; everything else is BPE-encoded.
  std::vector<TokenId> encode(std::string_view text) const;
  // Encodes all of `text` as ordinary text: added tokens' strings are not matched.
  std::vector<TokenId> encode_ordinary(std::string_view text) const;
  // The bytes of the tokens concatenated. Throws IndexError naming an id outside the vocabulary.
  std::string decode(const std::vector<TokenId>& ids) const;
  // One token's bytes.
  const std::string& token_bytes(TokenId id) const;

  // Ids span [0, vocab_size()), added tokens included.
  size_t vocab_size() const;
  // The id of a token given as its bytes (an added token's content, or a BPE token's bytes).
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // "gpt2" or "tokenizer.json": where the tokenizer came from, for messages.
  const std::string& source() const;
  // Words memoized so far (the merge cache), for statistics.
  size_t cached_words() const;
  // Whether text cut into data::TextPieces encodes piece by piece to the whole text's ids: true
  // unless the pre-tokenizer puts a space before the text (add_prefix_space).
  bool encodes_pieces() const;

  struct Impl;  // defined in tokenizer_impl.h, shared by the loaders and the encoder

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer from_gpt2_files_unchecked(const std::filesystem::path& encoder_json,
                                             const std::filesystem::path& vocab_bpe);
  static Tokenizer from_hf_json_unchecked(const std::filesystem::path& tokenizer_json);
  std::unique_ptr<Impl> impl_;
};

}  // namespace genesis::data
