#pragma once
// Image files as pixels, and pixels as a model's input: PNG through libspng, JPEG through
// libjpeg-turbo's TurboJPEG API. Decoded images keep what the file holds, one gray channel or
// three colour channels (alpha is dropped: a classifier's input has no transparency); to_input
// then converts the channels, resizes and scales to what the model takes.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace genesis::data {

struct Image {
  int64_t channels = 0;  // 1 (gray) or 3 (RGB)
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;  // height * width * channels, row by row, channels interleaved
};

// The image kinds by file name: ".png", ".jpg", ".jpeg" (any case). Others are not images here.
bool is_image_file(const std::filesystem::path& path);

// Bounds on what is decoded: the pixels a header may claim (checked before they are allocated)
// and the bytes of a file (checked before it is read, after its signature).
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;
constexpr uintmax_t kMaxImageFileBytes = uintmax_t{1} << 30;

// Decodes the bytes of a PNG or JPEG (told apart by their signature, not the name). Throws
// ValueError saying what the decoder found wrong (a truncated file, a bad checksum, not an
// image, more than max_pixels); the caller names the file.
Image decode_image(std::span<const uint8_t> bytes, int64_t max_pixels = kMaxImagePixels);
// Reads and decodes a file; the ValueError names it. A file without a PNG's or a JPEG's
// signature is refused from its first bytes, one above kMaxImageFileBytes from its size.
Image read_image(const std::filesystem::path& path);

// The image as `channels` x `height` x `width` floats in [0, 1] at `out` (channel-major, the
// layout of a CNN's input): RGB to gray by the ITU-R BT.601 weights (0.299, 0.587, 0.114), gray
// to RGB by repeating the channel, then a bilinear resize with half-pixel centres (OpenCV's
// INTER_LINEAR, PyTorch's interpolate(align_corners=False) without antialiasing) of the whole
// image, no crop: an image already of that size comes out unchanged.
void to_input(const Image& image, int64_t channels, int64_t height, int64_t width, float* out);

}  // namespace genesis::data
