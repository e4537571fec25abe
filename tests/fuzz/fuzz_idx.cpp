// libFuzzer harness: IDX image and label files (data::read_idx), plain or gzip'd: an input
// starting with gzip's magic bytes is named .gz.
#include "libgenesis/data/idx.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const std::filesystem::path path =
      fuzz::write_input(gzip ? "images-idx3-ubyte.gz" : "images-idx3-ubyte", fuzz::as_text(data, size));
  fuzz::expect_clean([&] { (void)data::read_idx(path.string()); });
  return 0;
}
