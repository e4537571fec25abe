// libFuzzer harness: PNG and JPEG decoding (data::decode_image, data::read_image) and the
// conversion of a decoded image to a model's input (data::to_input). Bad bytes must end in a
// genesis::Error; a decoded image must be 1 or 3 channels with exactly height x width x channels
// pixels, read the same from the file as from memory, and convert to floats in [0, 1] at any
// size, gray or RGB. Headers may claim at most 2^20 pixels here (the library's bound is 2^28),
// so that one input cannot spend the harness's time and memory on a huge zeroed buffer.
#include <cmath>
#include <span>
#include <vector>

#include "libgenesis/data/image_decode.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 20;

void check_input(const data::Image& image, int64_t channels, int64_t height, int64_t width) {
  std::vector<float> out(static_cast<size_t>(channels * height * width), -1.0f);
  data::to_input(image, channels, height, width, out.data());
  for (const float v : out)
    if (!(v >= 0.0f && v <= 1.0f)) fuzz::finding("to_input wrote a value outside [0, 1]", std::to_string(v));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  fuzz::expect_clean([&] {
    const data::Image image = data::decode_image(bytes, kMaxPixels);
    if (image.channels != 1 && image.channels != 3)
      fuzz::finding("a decoded image has neither 1 nor 3 channels", std::to_string(image.channels));
    if (image.height < 1 || image.width < 1 ||
        image.pixels.size() != static_cast<size_t>(image.height * image.width * image.channels))
      fuzz::finding("a decoded image's pixels do not match its size", std::to_string(image.pixels.size()));
    // The file path reads what memory decodes.
    const data::Image again = data::read_image(fuzz::write_input("image", fuzz::as_text(data, size)));
    if (again.pixels != image.pixels || again.height != image.height || again.width != image.width)
      fuzz::finding("read_image decodes the file otherwise than decode_image its bytes", "");
    check_input(image, 1, 7, 5);
    check_input(image, 3, 4, 9);
    check_input(image, image.channels, image.height, image.width);
  });
  return 0;
}
