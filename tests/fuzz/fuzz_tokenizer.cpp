// libFuzzer harness: tokenizer files and the encoder. The first byte picks the format: even, a
// Hugging Face tokenizer.json (the rest of the input); odd, GPT-2's encoder.json and vocab.bpe
// (the rest split at its first NUL byte). A tokenizer that loads encodes a fixed text (words,
// digits, whitespace runs, UTF-8, an added-token string), decodes the ids and every id below 300.
#include "libgenesis/data/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  const bool gpt2 = data[0] % 2 == 1;
  fuzz::expect_clean([&] {
    auto load = [&] {
      if (!gpt2) return data::Tokenizer::from_hf_json(fuzz::write_input("tokenizer.json", rest));
      const size_t nul = rest.find('\0');
      const std::string_view encoder = rest.substr(0, nul);
      const std::string_view merges = nul == std::string_view::npos ? std::string_view{} : rest.substr(nul + 1);
      return data::Tokenizer::from_gpt2_files(fuzz::write_input("encoder.json", encoder),
                                             fuzz::write_input("vocab.bpe", merges));
    };
    const data::Tokenizer tokenizer = load();
    const std::string text = "Call me Ishmael. It's 2026:  tabs\tand\r\nnew lines, \xc3\xbc\xc3\xb1\xc3\xaf "
                             "\xf0\x9f\x99\x82 <|endoftext|> ok";
    const std::vector<data::TokenId> ids = tokenizer.encode(text);
    for (data::TokenId id : ids)
      if (id >= tokenizer.vocab_size()) fuzz::finding("encode gave an id past the vocabulary", std::to_string(id));
    (void)tokenizer.decode(ids);
    (void)tokenizer.encode_ordinary(text);
    for (data::TokenId id = 0; id < std::min<size_t>(tokenizer.vocab_size(), 300); ++id) (void)tokenizer.token_bytes(id);
  });
  return 0;
}
