// Metadata files read whole have a size limit (libgenesis/io/file_util.h): one past it is
// refused by name before anything is read (issue 40, round 3: a 2 GB sparse tokenizer.json took
// 7.3 s and 2.2 GB of memory before "malformed JSON"; 5 GB ended in std::bad_alloc). The files
// are sparse: no disk and no memory behind their size.
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "libgenesis/data/tokenizer.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/hf.h"
#include "tests/testing.h"

using namespace genesis;
using Catch::Matchers::Contains;

namespace {

// A file at `path` that claims `bytes` bytes and holds almost none (a hole after "{").
void sparse_file(const std::filesystem::path& path, size_t bytes) {
  std::ofstream(path) << "{";
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(bytes)) == 0);
}

// `load` refuses the file at `path` at once, naming it and the limit.
template <typename Load>
void check_refused(const std::filesystem::path& path, size_t limit, Load load) {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(load(), Contains(path.string()) && Contains("more than the " + std::to_string(limit)));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}

}  // namespace

TEST_CASE("limits: tokenizer files past their size limit are refused by name", "[cpu][io][tokenizer]") {
  testing::TempDir dir;
  const size_t over = io::kMaxTokenizerFileBytes + 1;
  sparse_file(dir / "tokenizer.json", over);
  check_refused(dir / "tokenizer.json", io::kMaxTokenizerFileBytes,
                [&] { data::Tokenizer::from_hf_json(dir / "tokenizer.json"); });
  sparse_file(dir / "encoder.json", size_t{5} << 30);  // the 5 GB case that ended in bad_alloc
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\n";
  check_refused(dir / "encoder.json", io::kMaxTokenizerFileBytes,
                [&] { data::Tokenizer::from_gpt2_files(dir / "encoder.json", dir / "vocab.bpe"); });
}

TEST_CASE("limits: a config.json past its size limit is refused by name", "[cpu][io][models]") {
  testing::TempDir dir;
  sparse_file(dir / "config.json", size_t{2} << 30);
  check_refused(dir / "config.json", io::kMaxConfigFileBytes, [&] { models::load_hf_model(dir.path()); });
}
