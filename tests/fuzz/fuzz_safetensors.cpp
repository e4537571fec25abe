// libFuzzer harness: safetensors files (io::SafetensorsFile): the header is validated on open;
// every tensor it lists, when small, is then read and converted to f64.
#include "libgenesis/io/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = fuzz::write_input("model.safetensors", fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const io::SafetensorsFile file(path);
    for (const std::string& name : file.names()) {
      const io::TensorInfo& info = file.info(name);
      if (info.data_end - info.data_begin > (uint64_t{1} << 20)) continue;
      fuzz::expect_clean([&] {  // an unsupported dtype throws here, and the next tensor is read
        const Tensor t = file.tensor(name);
        (void)t.to(DType::f64);
      });
    }
  });
  return 0;
}
