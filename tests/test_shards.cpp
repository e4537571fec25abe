// Token shards: both formats read back, windows and their targets, disjoint ranks, cursor
// resume, and clear errors on corrupt files.
#include <cstring>
#include <fstream>
#include <set>

#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/io/file_util.h"
#include "tests/testing.h"
#include "tests/generated_docs.h"

using namespace genesis::data;
namespace fs = std::filesystem;

namespace {

std::vector<uint32_t> iota_tokens(size_t n, uint32_t modulo) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i % modulo);
  return t;
}

void write_llmc_shard(const fs::path& path, const std::vector<uint16_t>& tokens, int32_t magic = 20240520) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const genesis::Error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<int64_t> row(const genesis::Tensor& t, int64_t b) {
  const int64_t T = t.shape()[1];
  const int64_t* p = t.data<int64_t>() + b * T;
  return {p, p + T};
}

}  // namespace

TEST_CASE("token shards round-trip in the genesis format (u16 and u32) and read llm.c's", "[cpu][shards]") {
  genesis::testing::TempDir dir;
  auto small = iota_tokens(1000, 50257);
  write_token_shard(dir / "u16.bin", small, 50257);
  TokenShard s16(dir / "u16.bin");
  REQUIRE(s16.format() == ShardFormat::genesis);
  REQUIRE(s16.token_bytes() == 2);
  REQUIRE(s16.size() == 1000);
  REQUIRE(s16.vocab_size() == 50257);
  REQUIRE(s16[999] == 999);

  std::vector<uint32_t> big = {0, 70000, 151642, 5};
  write_token_shard(dir / "u32.bin", big, 151936);
  TokenShard s32(dir / "u32.bin");
  REQUIRE(s32.token_bytes() == 4);
  std::vector<int64_t> out(4);
  s32.read(0, 4, out.data());
  REQUIRE(out == std::vector<int64_t>{0, 70000, 151642, 5});
  REQUIRE_THROWS_AS(s32.read(2, 3, out.data()), genesis::IndexError);
  REQUIRE_THROWS_AS(write_token_shard(dir / "x.bin", {1, 70000}, 50257), genesis::ValueError);

  write_llmc_shard(dir / "llmc.bin", {50256, 1, 2, 65535});
  TokenShard llmc(dir / "llmc.bin");
  REQUIRE(llmc.format() == ShardFormat::llmc);
  REQUIRE(llmc.size() == 4);
  REQUIRE(llmc[0] == 50256);
  REQUIRE(llmc[3] == 65535);
}

TEST_CASE("corrupt token shards are refused with the reason and the file", "[cpu][shards]") {
  genesis::testing::TempDir dir;
  using Catch::Matchers::Contains;
  write_token_shard(dir / "ok.bin", iota_tokens(100, 1000), 1000);
  std::string bytes = genesis::io::read_file(dir / "ok.bin");

  // A directory given as a shard is refused by name (not "No such device" from mmap).
  fs::create_directories(dir / "dir.bin");
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "dir.bin"); }), Contains("dir.bin") && Contains("a directory"));
  std::ofstream(dir / "truncated.bin", std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "truncated.bin"); }),
               Contains("truncated.bin") && Contains("truncated") && Contains("100 tokens"));
  std::ofstream(dir / "long.bin", std::ios::binary) << bytes << "xx";
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "long.bin"); }), Contains("long.bin") && Contains("2 bytes beyond"));
  // Found by tests/fuzz: a count of 2^63 + 100 tokens of 2 bytes wraps to the 200 bytes the file
  // holds; it was taken as a negative size.
  std::string wrapped = bytes;
  const uint64_t huge_count = (uint64_t{1} << 63) + 100;
  std::memcpy(wrapped.data() + 16, &huge_count, sizeof huge_count);
  std::ofstream(dir / "wrapped.bin", std::ios::binary) << wrapped;
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "wrapped.bin"); }),
               Contains("wrapped.bin") && Contains("truncated") && Contains("9223372036854775908 tokens"));
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  std::ofstream(dir / "magic.bin", std::ios::binary) << bad_magic;
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "magic.bin"); }), Contains("magic.bin") && Contains("bad magic"));
  std::ofstream(dir / "empty.bin", std::ios::binary);
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "empty.bin"); }), Contains("bad magic"));
  write_llmc_shard(dir / "llmc_magic.bin", {1, 2}, 20240521);
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "llmc_magic.bin"); }), Contains("bad magic"));
  write_llmc_shard(dir / "llmc_short.bin", {1, 2, 3});
  std::filesystem::resize_file(dir / "llmc_short.bin", 1024 + 4);
  REQUIRE_THAT(message_of([&] { TokenShard s(dir / "llmc_short.bin"); }), Contains("truncated"));
  REQUIRE_THROWS_AS(TokenShard(dir / "absent.bin"), genesis::IoError);

  TokenWindowOptions opt;
  opt.seq_len = 100;
  REQUIRE_THAT(message_of([&] { TokenWindowLoader l({dir / "ok.bin"}, opt); }),
               Contains("ok.bin") && Contains("100 tokens") && Contains("seq_len + 1 = 101"));
  opt.seq_len = 10;
  opt.batch_size = 20;
  REQUIRE_THAT(message_of([&] { TokenWindowLoader l({dir / "ok.bin"}, opt); }),
               Contains("fewer than one global batch"));
  opt.batch_size = 2;
  opt.rank = 2;
  opt.world_size = 2;
  REQUIRE_THROWS_AS(TokenWindowLoader({dir / "ok.bin"}, opt), genesis::ValueError);
}

TEST_CASE("sequential windows: inputs and targets shifted by one, across shards", "[cpu][shards]") {
  genesis::testing::TempDir dir;
  write_token_shard(dir / "a.bin", iota_tokens(41, 1000), 1000);  // 10 windows of 4 + 1
  std::vector<uint32_t> second(13);
  for (size_t i = 0; i < second.size(); ++i) second[i] = static_cast<uint32_t>(500 + i);
  write_token_shard(dir / "b.bin", second, 1000);  // 3 windows
  TokenWindowOptions opt;
  opt.batch_size = 2;
  opt.seq_len = 4;
  opt.shuffle = false;
  TokenWindowLoader loader({dir / "a.bin", dir / "b.bin"}, opt);
  REQUIRE(loader.windows() == 13);
  REQUIRE(loader.steps_per_epoch() == 6);
  REQUIRE(loader.tokens() == 54);
  TokenBatch first = loader.next();
  REQUIRE(first.inputs.shape() == genesis::Shape{2, 4});
  REQUIRE(first.inputs.dtype() == genesis::DType::i64);
  REQUIRE(row(first.inputs, 0) == std::vector<int64_t>{0, 1, 2, 3});
  REQUIRE(row(first.targets, 0) == std::vector<int64_t>{1, 2, 3, 4});
  REQUIRE(row(first.inputs, 1) == std::vector<int64_t>{4, 5, 6, 7});
  for (int i = 0; i < 4; ++i) loader.next();
  TokenBatch last = loader.next();  // windows 10, 11: the second shard
  REQUIRE(row(last.inputs, 0) == std::vector<int64_t>{500, 501, 502, 503});
  REQUIRE(row(last.targets, 1) == std::vector<int64_t>{505, 506, 507, 508});
  REQUIRE(loader.cursor() == TokenWindowCursor{1, 0});  // window 12 is left over
  REQUIRE(row(loader.next().inputs, 0) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("ranks read disjoint windows, a shuffled epoch covers each window once", "[cpu][shards]") {
  genesis::testing::TempDir dir;
  write_token_shard(dir / "t.bin", iota_tokens(8 * 50 + 1, 100000), 100000);  // 50 windows of 8 + 1
  TokenWindowOptions opt;
  opt.batch_size = 3;
  opt.seq_len = 8;
  opt.seed = 7;
  opt.world_size = 4;
  std::multiset<int64_t> starts;
  std::vector<int64_t> rank0_epoch0, rank0_epoch1;
  for (int rank = 0; rank < 4; ++rank) {
    opt.rank = rank;
    TokenWindowLoader loader({dir / "t.bin"}, opt);
    REQUIRE(loader.steps_per_epoch() == 4);  // 50 windows / (3 x 4)
    for (int step = 0; step < 4; ++step) {
      TokenBatch batch = loader.next();
      for (int64_t b = 0; b < 3; ++b) {
        int64_t start = row(batch.inputs, b)[0];
        REQUIRE(start % 8 == 0);
        starts.insert(start);
        if (rank == 0) rank0_epoch0.push_back(start);
      }
    }
    if (rank == 0)
      for (int step = 0; step < 4; ++step) rank0_epoch1.push_back(row(loader.next().inputs, 0)[0]);
  }
  REQUIRE(starts.size() == 48);
  REQUIRE(std::set<int64_t>(starts.begin(), starts.end()).size() == 48);  // no window twice
  REQUIRE(rank0_epoch0 != std::vector<int64_t>(rank0_epoch0.size(), 0));
  REQUIRE(rank0_epoch1 != std::vector<int64_t>{rank0_epoch0[0], rank0_epoch0[3], rank0_epoch0[6], rank0_epoch0[9]});
}

TEST_CASE("a saved cursor resumes the same windows", "[cpu][shards]") {
  genesis::testing::TempDir dir;
  write_token_shard(dir / "t.bin", iota_tokens(1000, 1000), 1000);
  TokenWindowOptions opt;
  opt.batch_size = 4;
  opt.seq_len = 16;
  opt.seed = 3;
  TokenWindowLoader uninterrupted({dir / "t.bin"}, opt);
  for (int i = 0; i < 17; ++i) uninterrupted.next();  // crosses an epoch boundary (15 steps)
  std::string saved = uninterrupted.cursor().to_json();
  REQUIRE(saved == R"({"epoch":1,"step":2})");

  TokenWindowLoader resumed({dir / "t.bin"}, opt);
  resumed.seek(TokenWindowCursor::from_json(saved));
  for (int i = 0; i < 20; ++i) {
    TokenBatch a = uninterrupted.next(), b = resumed.next();
    REQUIRE(a.at == b.at);
    for (int64_t r = 0; r < 4; ++r) REQUIRE(row(a.inputs, r) == row(b.inputs, r));
  }
  REQUIRE_THROWS_AS(resumed.seek({0, 15}), genesis::ValueError);
  REQUIRE_THROWS_AS(TokenWindowCursor::from_json("{\"epoch\": 1}"), genesis::ValueError);
}

// A stop request (SIGINT/SIGTERM under genesis train) between documents ends the tokenization
// with Interrupted before anything is written.
TEST_CASE("tokenize_to_shards stops on a stop request and writes nothing", "[cpu][shards]") {
  genesis::testing::TempDir dir;
  Tokenizer tok = Tokenizer::load(fs::path(genesis::testing::source_path("tests/fixtures/tokenizer_bpe/tokenizer.json")));
  std::ofstream(dir / "a.txt") << "Call me Ishmael.";
  std::ofstream(dir / "b.txt") << "Some years ago.";
  TokenizeOptions opt;
  opt.on_document = [](const fs::path&, size_t, size_t) { genesis::request_interrupt(); };
  CHECK_THROWS_AS(tokenize_to_shards(tok, {dir / "a.txt", dir / "b.txt"}, dir / "out", opt), genesis::Interrupted);
  genesis::clear_interrupt();
  CHECK(!fs::exists(dir / "out" / "train.bin"));
}

TEST_CASE("tokenize_to_shards: documents start with the separator, each one's tail goes to val", "[cpu][shards]") {
  genesis::testing::TempDir dir;
  Tokenizer tok = Tokenizer::load(fs::path(genesis::testing::source_path("tests/fixtures/tokenizer_bpe/tokenizer.json")));
  std::ofstream(dir / "a.txt") << "Call me Ishmael. Some years ago, never mind how long precisely.";
  std::ofstream(dir / "b.txt") << "<|im_end|> is text here";
  std::vector<fs::path> docs = {dir / "a.txt", dir / "b.txt"};
  TokenizeOptions opt;
  opt.val_fraction = 0.25;
  size_t seen = 0;
  opt.on_document = [&](const fs::path&, size_t, size_t) { ++seen; };
  TokenizeSummary s = tokenize_to_shards(tok, docs, dir / "out", opt);
  REQUIRE(seen == 2);
  auto a = tok.encode_ordinary("Call me Ishmael. Some years ago, never mind how long precisely.");
  auto b = tok.encode_ordinary("<|im_end|> is text here");
  REQUIRE(s.train_tokens + s.val_tokens == a.size() + b.size() + 2);
  TokenShard train(s.train_path), val(s.val_path);
  REQUIRE(train.size() == static_cast<int64_t>(s.train_tokens));
  REQUIRE(val.size() == static_cast<int64_t>(s.val_tokens));
  REQUIRE(train[0] == 0);  // <|endoftext|>
  REQUIRE(train[1] == a[0]);
  REQUIRE(val[val.size() - 1] == b.back());
  REQUIRE(val.size() >= 2);

  opt.separator = "<|nope|>";
  REQUIRE_THROWS_AS(tokenize_to_shards(tok, docs, dir / "out2", opt), genesis::UsageError);
  opt.separator = "";
  opt.val_fraction = 0;
  TokenizeSummary no_val = tokenize_to_shards(tok, docs, dir / "out3", opt);
  REQUIRE(no_val.val_path.empty());
  REQUIRE(no_val.train_tokens == a.size() + b.size());
  opt.val_fraction = 1.0;
  REQUIRE_THROWS_AS(tokenize_to_shards(tok, docs, dir / "out4", opt), genesis::ValueError);
}
