// libFuzzer harness: token shard headers and bodies (data::TokenShard, genesis and llm.c
// formats): a shard that opens is scanned (max_token) and read end to end.
#include <vector>

#include "libgenesis/data/shards.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = fuzz::write_input("train.bin", fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const data::TokenShard shard(path);
    const uint32_t largest = shard.max_token();
    std::vector<int64_t> tokens(static_cast<size_t>(shard.size()));
    shard.read(0, shard.size(), tokens.data());
    for (int64_t t : tokens)
      if (t < 0 || t > largest) fuzz::finding("a token outside [0, max_token()]", std::to_string(t));
  });
  return 0;
}
