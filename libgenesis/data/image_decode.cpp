#include "libgenesis/data/image_decode.h"

#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>

#include "libgenesis/core/error.h"

namespace genesis::data {

namespace {

constexpr std::array<uint8_t, 8> kPngSignature{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr std::array<uint8_t, 3> kJpegSignature{0xff, 0xd8, 0xff};

template <size_t N>
bool starts_with(std::span<const uint8_t> bytes, const std::array<uint8_t, N>& signature) {
  return bytes.size() >= N && std::equal(signature.begin(), signature.end(), bytes.begin());
}

// A header's size is checked before the pixels are allocated: a corrupt one that claims
// 100000 x 100000 pixels would otherwise take 40 GB (touched, so not left to overcommit).
void check_size(const char* kind, int64_t width, int64_t height, int64_t max_pixels) {
  GENESIS_CHECK(width * height <= max_pixels, ValueError, kind, " of ", width, " x ", height, " pixels, more than the ",
                max_pixels, " an image folder decodes (a corrupt header, or an image to shrink first)");
}

struct SpngFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

void check_spng(int status, const char* what) {
  GENESIS_CHECK(status == 0, ValueError, "PNG ", what, ": ", spng_strerror(status));
}

// Every PNG kind (palette, 1 to 16 bits, with or without alpha) decodes to RGBA8; gray kinds
// keep one of the equal channels.
Image decode_png(std::span<const uint8_t> bytes, int64_t max_pixels) {
  std::unique_ptr<spng_ctx, SpngFree> ctx(spng_ctx_new(0));
  GENESIS_CHECK(ctx != nullptr, ValueError, "PNG: out of memory for a decoder");
  check_spng(spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size()), "buffer");
  spng_ihdr header{};
  check_spng(spng_get_ihdr(ctx.get(), &header), "header");
  check_size("PNG", header.width, header.height, max_pixels);
  size_t size = 0;
  check_spng(spng_decoded_image_size(ctx.get(), SPNG_FMT_RGBA8, &size), "size");
  std::vector<uint8_t> rgba(size);
  check_spng(spng_decode_image(ctx.get(), rgba.data(), rgba.size(), SPNG_FMT_RGBA8, 0), "data");
  const bool gray =
      header.color_type == SPNG_COLOR_TYPE_GRAYSCALE || header.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
  Image image{.channels = gray ? 1 : 3, .height = header.height, .width = header.width, .pixels = {}};
  const size_t pixels = static_cast<size_t>(image.height * image.width);
  image.pixels.resize(pixels * static_cast<size_t>(image.channels));
  for (size_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < image.channels; ++c) image.pixels[p * image.channels + c] = rgba[p * 4 + c];
  return image;
}

struct TurboJpegFree {
  void operator()(void* handle) const { tjDestroy(handle); }
};

// Gray JPEGs decode to one channel, the others to RGB. A warning (a truncated file, bad data
// that libjpeg would paper over with gray) stops the decode: the image is not what was saved.
Image decode_jpeg(std::span<const uint8_t> bytes, int64_t max_pixels) {
  std::unique_ptr<void, TurboJpegFree> handle(tjInitDecompress());
  GENESIS_CHECK(handle != nullptr, ValueError, "JPEG: ", tjGetErrorStr2(nullptr));
  auto* data = const_cast<uint8_t*>(bytes.data());  // TurboJPEG 2.1 takes no const, reads only
  const auto size = static_cast<unsigned long>(bytes.size());
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  GENESIS_CHECK(tjDecompressHeader3(handle.get(), data, size, &width, &height, &subsampling, &colorspace) == 0,
                ValueError, "JPEG header: ", tjGetErrorStr2(handle.get()));
  check_size("JPEG", width, height, max_pixels);
  const bool gray = colorspace == TJCS_GRAY;
  Image image{.channels = gray ? 1 : 3, .height = height, .width = width, .pixels = {}};
  image.pixels.resize(static_cast<size_t>(image.height * image.width * image.channels));
  GENESIS_CHECK(tjDecompress2(handle.get(), data, size, image.pixels.data(), width, 0, height,
                              gray ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) == 0,
                ValueError, "JPEG data: ", tjGetErrorStr2(handle.get()));
  return image;
}

// Channel c of pixel (y, x) as the model's channel count wants it, in [0, 1].
float channel_value(const Image& image, int64_t y, int64_t x, int64_t c, int64_t channels) {
  const uint8_t* p = image.pixels.data() + (y * image.width + x) * image.channels;
  if (image.channels == channels) return p[c] / 255.0f;
  if (image.channels == 1) return p[0] / 255.0f;
  return (0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2]) / 255.0f;
}

// Where destination index i samples the source (half-pixel centres): the two neighbours and
// the weight of the second, clamped at the edges.
struct Tap {
  int64_t low, high;
  float weight;
};

std::vector<Tap> taps(int64_t source, int64_t destination) {
  std::vector<Tap> out(static_cast<size_t>(destination));
  const double scale = static_cast<double>(source) / static_cast<double>(destination);
  for (int64_t i = 0; i < destination; ++i) {
    const double at = std::clamp((static_cast<double>(i) + 0.5) * scale - 0.5, 0.0, static_cast<double>(source - 1));
    const auto low = static_cast<int64_t>(std::floor(at));
    out[static_cast<size_t>(i)] = {low, std::min(low + 1, source - 1),
                                   static_cast<float>(at - static_cast<double>(low))};
  }
  return out;
}

// Why `bytes` (the whole file, or its start) is no image this decodes; empty when it has a PNG's
// or a JPEG's signature.
std::string not_an_image(std::span<const uint8_t> bytes) {
  if (starts_with(bytes, kPngSignature) || starts_with(bytes, kJpegSignature)) return "";
  return bytes.empty() ? "the file is empty" : "neither a PNG nor a JPEG (no signature of either)";
}

}  // namespace

bool is_image_file(const std::filesystem::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

Image decode_image(std::span<const uint8_t> bytes, int64_t max_pixels) {
  if (starts_with(bytes, kPngSignature)) return decode_png(bytes, max_pixels);
  if (starts_with(bytes, kJpegSignature)) return decode_jpeg(bytes, max_pixels);
  GENESIS_THROW(ValueError, not_an_image(bytes));
}

Image read_image(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  GENESIS_CHECK(in.good(), ValueError, path.string(), ": cannot open the file");
  // The signature first: a large file of another kind is refused before it is read.
  std::vector<uint8_t> bytes(kPngSignature.size());
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  if (const std::string problem = not_an_image(bytes); !problem.empty())
    GENESIS_THROW(ValueError, path.string(), ": ", problem);
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  GENESIS_CHECK(error || size <= kMaxImageFileBytes, ValueError, path.string(), ": ", size,
                " bytes, more than the ", kMaxImageFileBytes, " an image file may hold here");
  bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  try {
    return decode_image(bytes);
  } catch (const ValueError& e) {
    GENESIS_THROW(ValueError, path.string(), ": ", e.what());
  }
}

void to_input(const Image& image, int64_t channels, int64_t height, int64_t width, float* out) {
  const std::vector<Tap> rows = taps(image.height, height), columns = taps(image.width, width);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < height; ++y) {
      const Tap& r = rows[static_cast<size_t>(y)];
      for (int64_t x = 0; x < width; ++x) {
        const Tap& k = columns[static_cast<size_t>(x)];
        const float top = channel_value(image, r.low, k.low, c, channels) * (1.0f - k.weight) +
                          channel_value(image, r.low, k.high, c, channels) * k.weight;
        const float bottom = channel_value(image, r.high, k.low, c, channels) * (1.0f - k.weight) +
                             channel_value(image, r.high, k.high, c, channels) * k.weight;
        *out++ = top * (1.0f - r.weight) + bottom * r.weight;
      }
    }
}

}  // namespace genesis::data
