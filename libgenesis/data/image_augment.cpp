#include "libgenesis/data/image_augment.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/common/philox.h"
#include "libgenesis/core/error.h"

namespace genesis::data {

namespace {

// Keeps the augmentation's draws apart from the epoch permutations', which use the run's seed as
// the Philox key too.
constexpr uint64_t kAugmentKey = 0x61'7567'6d65'6e74ull;  // "augment"

// u uniform in [0, 2^32) as a double in [lo, hi).
double uniform(uint32_t u, double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(u) * (1.0 / 4294967296.0));
}

// ColorJitter's range of a factor: [max(0, 1 - x), 1 + x].
double jitter(uint32_t u, double x) {
  return x > 0 ? uniform(u, std::max(0.0, 1.0 - x), 1.0 + x) : 1.0;
}

// Crop and flip as one integer remap of each plane: bound by memory, one read and one write per pixel.
void shift_and_flip(const AugmentDraw& draw, float* image, int64_t channels, int64_t height, int64_t width,
                    std::vector<float>& scratch) {
  for (int64_t c = 0; c < channels; ++c) {
    const float* in = image + c * height * width;
    float* out = scratch.data() + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      const int64_t sy = y + draw.shift_y;
      for (int64_t x = 0; x < width; ++x) {
        const int64_t sx = (draw.flip ? width - 1 - x : x) + draw.shift_x;
        const bool inside = sy >= 0 && sy < height && sx >= 0 && sx < width;
        out[y * width + x] = inside ? in[sy * width + sx] : 0.0f;
      }
    }
  }
  std::copy(scratch.begin(), scratch.end(), image);
}

// Output pixel (x, y) samples the input at the point that rotating by the angle brings onto it,
// bilinearly (four reads a pixel), neighbours outside the image counting as zeros.
void rotate(double degrees, float* image, int64_t channels, int64_t height, int64_t width,
            std::vector<float>& scratch) {
  const double radians = degrees * std::numbers::pi / 180.0;
  const double cos_a = std::cos(radians), sin_a = std::sin(radians);
  const double cx = 0.5 * static_cast<double>(width - 1), cy = 0.5 * static_cast<double>(height - 1);
  auto at = [&](const float* plane, int64_t y, int64_t x) {
    return y >= 0 && y < height && x >= 0 && x < width ? static_cast<double>(plane[y * width + x]) : 0.0;
  };
  for (int64_t c = 0; c < channels; ++c) {
    const float* in = image + c * height * width;
    float* out = scratch.data() + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      const double dy = static_cast<double>(y) - cy;
      for (int64_t x = 0; x < width; ++x) {
        const double dx = static_cast<double>(x) - cx;
        // Counter-clockwise on screen (y pointing down): the inverse map rotates the other way.
        const double sx = cx + dx * cos_a - dy * sin_a, sy = cy + dx * sin_a + dy * cos_a;
        const double fx0 = std::floor(sx), fy0 = std::floor(sy);
        const double wx = sx - fx0, wy = sy - fy0;
        const auto x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
        const double value = (1 - wy) * ((1 - wx) * at(in, y0, x0) + wx * at(in, y0, x0 + 1)) +
                             wy * ((1 - wx) * at(in, y0 + 1, x0) + wx * at(in, y0 + 1, x0 + 1));
        out[y * width + x] = static_cast<float>(value);
      }
    }
  }
  std::copy(scratch.begin(), scratch.end(), image);
}

// The image's mean gray: its mean for one channel, the BT.601 gray's for three.
double mean_gray(const float* image, int64_t channels, int64_t plane) {
  static constexpr double kWeights[3] = {0.299, 0.587, 0.114};
  double sum = 0;
  for (int64_t c = 0; c < channels; ++c) {
    double channel_sum = 0;
    for (int64_t k = 0; k < plane; ++k) channel_sum += image[c * plane + k];
    sum += (channels == 3 ? kWeights[c] : 1.0) * channel_sum;
  }
  return sum / static_cast<double>(plane);
}

float clamp_unit(double x) {
  return static_cast<float>(std::clamp(x, 0.0, 1.0));
}

}  // namespace

void augment_image(const AugmentDraw& draw, float* image, int64_t channels, int64_t height, int64_t width) {
  const int64_t plane = height * width, size = channels * plane;
  std::vector<float> scratch;
  if (draw.shift_x != 0 || draw.shift_y != 0 || draw.flip || draw.angle != 0) scratch.resize(static_cast<size_t>(size));
  if (draw.shift_x != 0 || draw.shift_y != 0 || draw.flip)
    shift_and_flip(draw, image, channels, height, width, scratch);
  if (draw.angle != 0) rotate(draw.angle, image, channels, height, width, scratch);
  if (draw.brightness != 1)
    for (int64_t k = 0; k < size; ++k) image[k] = clamp_unit(draw.brightness * image[k]);
  if (draw.contrast != 1) {
    const double blend = (1 - draw.contrast) * mean_gray(image, channels, plane);
    for (int64_t k = 0; k < size; ++k) image[k] = clamp_unit(draw.contrast * image[k] + blend);
  }
}

ImageAugment::ImageAugment(const AugmentOptions& options, uint64_t seed) : options_(options), key_(seed ^ kAugmentKey) {
  GENESIS_CHECK(options.crop_padding >= 0 && options.rotation >= 0 && options.brightness >= 0 && options.contrast >= 0,
                ValueError, "image augmentation: crop_padding, rotation, brightness and contrast must be >= 0");
}

AugmentDraw ImageAugment::draw(int64_t sample, int64_t epoch) const {
  // Two Philox blocks of four draws each, at counter (sample, 2 epoch + block): every draw is
  // made whether or not its transform is on, so that turning one on leaves the others' alone.
  const auto counter = static_cast<uint64_t>(sample), stream = 2 * static_cast<uint64_t>(epoch);
  const kernels::Philox4 a = kernels::philox4x32_10(counter, stream, key_);
  const kernels::Philox4 b = kernels::philox4x32_10(counter, stream + 1, key_);
  const int64_t padding = options_.crop_padding;
  // An offset in [0, 2 padding] of the crop in the padded image, less the padding.
  auto shift = [padding](uint32_t u) {
    return static_cast<int64_t>((static_cast<uint64_t>(u) * static_cast<uint64_t>(2 * padding + 1)) >> 32) - padding;
  };
  return {.shift_x = shift(a.v[0]),
          .shift_y = shift(a.v[1]),
          .flip = options_.flip && (a.v[2] >> 31) != 0,
          .angle = options_.rotation > 0 ? uniform(a.v[3], -options_.rotation, options_.rotation) : 0.0,
          .brightness = jitter(b.v[0], options_.brightness),
          .contrast = jitter(b.v[1], options_.contrast)};
}

void ImageAugment::apply(Tensor& images, std::span<const int64_t> samples, int64_t epoch) const {
  GENESIS_CHECK(images.dim() == 4 && images.dtype() == DType::f32 && images.is_contiguous() &&
                    images.size(0) == static_cast<int64_t>(samples.size()),
                ValueError, "image augmentation: expected f32 images [N, C, H, W] for ", samples.size(), " samples");
  if (!options_.enabled()) return;
  const int64_t n = images.size(0), channels = images.size(1), height = images.size(2), width = images.size(3);
  const int64_t size = channels * height * width;
  float* data = images.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    augment_image(draw(samples[static_cast<size_t>(i)], epoch), data + i * size, channels, height, width);
}

}  // namespace genesis::data
