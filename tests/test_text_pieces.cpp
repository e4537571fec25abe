// Documents read in pieces (data/text_pieces.h): the pieces' encodings concatenated equal the
// whole text's for the pre-tokenizers of GPT-2, Llama 3 and Qwen2, on prose, code and byte soup,
// at piece sizes down to one byte; token shards made piece by piece equal those made whole; the
// cut rule, the refusal of an endless line, and a tokenizer that adds a prefix space.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "libgenesis/data/shards.h"
#include "libgenesis/data/text_pieces.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/io/file_util.h"
#include "tests/generated_docs.h"
#include "tests/testing.h"

using namespace genesis;
using data::TextPieces;
using data::TokenId;
using data::Tokenizer;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = fs::path(testing::source_path("tests/fixtures/tokenizer_bpe/tokenizer.json"));

// The fixture tokenizer (Qwen2's pattern) with another pre-tokenizer.
Tokenizer with_pre_tokenizer(const fs::path& dir, const std::string& name, const nlohmann::json& pre) {
  nlohmann::json t = nlohmann::json::parse(io::read_file(kFixture));
  t["pre_tokenizer"] = pre;
  const fs::path path = dir / (name + ".json");
  io::write_file_atomic(path, t.dump());
  return Tokenizer::load(path);
}

nlohmann::json split_then_bytes(const std::string& regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

// Prose and docs of the repository, then byte soup: words, digits, punctuation, runs of spaces,
// tabs, line breaks (LF, CRLF, blank lines), accents, CJK, emoji and invalid UTF-8, at random.
std::string corpus() {
  std::string text = io::read_file(testing::source_path("README.md")) +
                     io::read_file(testing::source_path("docs/architecture.md")).substr(0, 20000);
  const std::vector<std::string> atoms = {"word", "Word", "x", "12345", "7", "3.14", "'s", "'ll", "don't", " ", "  ",
                                          "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\n  x", "!", "?!", "...",
                                          "(", ")", "{", "}", "#", "-", "_", "\xc3\xa9", "\xe6\xbc\xa2\xe5\xad\x97",
                                          "\xf0\x9f\x99\x82", "\xff", "\xc3", "\x80", "<|endoftext|>", "\x7f"};
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) text += atoms[rng() % atoms.size()];
  return text;
}

std::vector<TokenId> by_pieces(const Tokenizer& tok, const fs::path& file, size_t piece_bytes, size_t* count) {
  TextPieces pieces(file, piece_bytes);
  std::string piece, joined;
  std::vector<TokenId> ids;
  *count = 0;
  while (pieces.next(piece)) {
    ++*count;
    joined += piece;
    const std::vector<TokenId> more = tok.encode_ordinary(piece);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  CHECK(pieces.bytes_read() == joined.size());
  CHECK(joined == io::read_file(file));  // nothing lost, nothing repeated
  return ids;
}

}  // namespace

TEST_CASE("text pieces encode to the whole text's ids (GPT-2, Llama 3, Qwen2 pre-tokenizers)", "[cpu][tokenizer]") {
  testing::TempDir dir;
  const std::string text = corpus();
  io::write_file_atomic(dir / "corpus.txt", text);
  const std::vector<std::pair<std::string, Tokenizer>> tokenizers = [&] {
    std::vector<std::pair<std::string, Tokenizer>> t;
    t.emplace_back("qwen2", Tokenizer::load(kFixture));
    t.emplace_back("llama3", with_pre_tokenizer(dir.path(), "llama3",
                                                split_then_bytes("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                                 "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                                                 "\\s+(?!\\S)|\\s+")));
    t.emplace_back("gpt2", with_pre_tokenizer(dir.path(), "gpt2",
                                              {{"type", "ByteLevel"},
                                               {"add_prefix_space", false},
                                               {"trim_offsets", true},
                                               {"use_regex", true}}));
    return t;
  }();
  for (const auto& [name, tok] : tokenizers) {
    INFO(name);
    CHECK(tok.encodes_pieces());
    const std::vector<TokenId> whole = tok.encode_ordinary(text);
    for (size_t piece_bytes : {size_t{1}, size_t{7}, size_t{100}, size_t{4096}}) {
      INFO("piece bytes " << piece_bytes);
      size_t count = 0;
      CHECK(by_pieces(tok, dir / "corpus.txt", piece_bytes, &count) == whole);
      CHECK(count > text.size() / (piece_bytes + 4096));  // it did cut
    }
  }
  // A prefix space goes before the text, not before each piece: such a tokenizer reads whole.
  const Tokenizer prefixed =
      with_pre_tokenizer(dir.path(), "prefixed",
                         {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}});
  CHECK(!prefixed.encodes_pieces());
}

TEST_CASE("text pieces: cut after a line break before text, whole files, and an endless line refused", "[cpu][tokenizer]") {
  testing::TempDir dir;
  io::write_file_atomic(dir / "a.txt", "ab\ncd\n ef\n\ngh\nij");
  TextPieces pieces(dir / "a.txt", 1);
  std::vector<std::string> got;
  for (std::string p; pieces.next(p);) got.push_back(p);
  // Only at a line break alone between visible characters: "\n ef" and "\n\ngh" stay joined.
  CHECK(got == std::vector<std::string>{"ab\n", "cd\n ef\n\ngh\n", "ij"});
  TextPieces whole(dir / "a.txt", SIZE_MAX);
  std::string all;
  CHECK(whole.next(all));
  CHECK(all == "ab\ncd\n ef\n\ngh\nij");
  CHECK(!whole.next(all));
  io::write_file_atomic(dir / "empty.txt", "");
  TextPieces empty(dir / "empty.txt");
  CHECK(!empty.next(all));

  io::write_file_atomic(dir / "line.txt", std::string(5000, 'x') + "\ny");
  TextPieces endless(dir / "line.txt", 10, 1000);
  CHECK_THROWS_WITH(endless.next(all), Catch::Contains("line.txt") && Catch::Contains("without a line break"));
  CHECK_THROWS_WITH(TextPieces(dir.path()), Catch::Contains("is a directory"));
}

TEST_CASE("tokenize_to_shards in small pieces writes the shards it writes whole", "[cpu][shards]") {
  testing::TempDir dir;
  const Tokenizer tok = Tokenizer::load(kFixture);
  io::write_file_atomic(dir / "a.txt", corpus());
  io::write_file_atomic(dir / "b.txt", "Call me Ishmael.\nSome years ago.\n");
  for (double val_fraction : {0.0, 0.1}) {
    INFO("val_fraction " << val_fraction);
    data::TokenizeOptions whole, pieces;
    whole.val_fraction = pieces.val_fraction = val_fraction;
    pieces.piece_bytes = 64;
    const data::TokenizeSummary a = data::tokenize_to_shards(tok, {dir / "a.txt", dir / "b.txt"}, dir / "whole", whole);
    const data::TokenizeSummary b = data::tokenize_to_shards(tok, {dir / "a.txt", dir / "b.txt"}, dir / "pieces", pieces);
    CHECK(a.train_tokens == b.train_tokens);
    CHECK(a.val_tokens == b.val_tokens);
    CHECK(a.bytes == b.bytes);
    CHECK(io::read_file(dir / "whole/train.bin") == io::read_file(dir / "pieces/train.bin"));
    if (val_fraction > 0) CHECK(io::read_file(dir / "whole/val.bin") == io::read_file(dir / "pieces/val.bin"));
    // The whole-text ids, the separator first, the last tenth of each document in val.
    const std::vector<TokenId> ids = tok.encode_ordinary(io::read_file(dir / "a.txt"));
    CHECK(a.train_tokens + a.val_tokens == ids.size() + 1 + tok.encode_ordinary(io::read_file(dir / "b.txt")).size() + 1);
  }
}
