// Image augmentation ([data.augment], issue 38): each transform against its hand formula (the
// flip an exact mirror, the crop a shift with zeros, 90 degrees a transpose flipped, brightness
// and contrast as ColorJitter's blends), draws that depend on (seed, epoch, sample) alone, the
// DataLoader's transform repeated exactly after a seek, and the recipe's keys and errors.
#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "libgenesis/data/image_augment.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/recipe/recipe.h"
#include "tests/testing.h"

using namespace genesis;
using Catch::Matchers::Contains;

namespace {

// channels x height x width values k / size, k = 0, 1, ...: every pixel different, all in [0, 1).
std::vector<float> ramp(int64_t channels, int64_t height, int64_t width) {
  std::vector<float> out(static_cast<size_t>(channels * height * width));
  for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<float>(k) / static_cast<float>(out.size());
  return out;
}

std::vector<float> augmented(const data::AugmentDraw& draw, std::vector<float> image, int64_t channels, int64_t height,
                             int64_t width) {
  data::augment_image(draw, image.data(), channels, height, width);
  return image;
}

float at(const std::vector<float>& image, int64_t height, int64_t width, int64_t c, int64_t y, int64_t x) {
  return image[static_cast<size_t>((c * height + y) * width + x)];
}

}  // namespace

TEST_CASE("image augment: a flip mirrors each row exactly", "[cpu][augment]") {
  const int64_t channels = 2, height = 3, width = 5;
  const std::vector<float> in = ramp(channels, height, width);
  const std::vector<float> out = augmented({.flip = true}, in, channels, height, width);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x)
        CHECK(at(out, height, width, c, y, x) == at(in, height, width, c, y, width - 1 - x));
  CHECK(augmented({.flip = true}, out, channels, height, width) == in);
}

TEST_CASE("image augment: a crop of the padded image is the image shifted, zeros outside", "[cpu][augment]") {
  const int64_t channels = 1, height = 4, width = 5;
  const std::vector<float> in = ramp(channels, height, width);
  // Padding 2, the crop's corner at (row 0, column 3) of the padded image: a shift of (-2, +1).
  const std::vector<float> out = augmented({.shift_x = 1, .shift_y = -2}, in, channels, height, width);
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const bool inside = y - 2 >= 0 && x + 1 < width;
      CHECK(at(out, height, width, 0, y, x) == (inside ? at(in, height, width, 0, y - 2, x + 1) : 0.0f));
    }
  // The crop comes first, then the flip mirrors the cropped window.
  const std::vector<float> both = augmented({.shift_x = 1, .shift_y = -2, .flip = true}, in, channels, height, width);
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      CHECK(at(both, height, width, 0, y, x) == at(out, height, width, 0, y, width - 1 - x));

  // Padding P draws every shift in [-P, P], and no other.
  const data::ImageAugment augment({.crop_padding = 2}, 11);
  std::set<int64_t> shifts;
  for (int64_t sample = 0; sample < 200; ++sample) {
    const data::AugmentDraw draw = augment.draw(sample, 0);
    shifts.insert(draw.shift_x);
    shifts.insert(draw.shift_y);
    CHECK((!draw.flip && draw.angle == 0 && draw.brightness == 1 && draw.contrast == 1));
  }
  CHECK(shifts == std::set<int64_t>{-2, -1, 0, 1, 2});
}

TEST_CASE("image augment: rotation by 90 degrees is the transpose flipped, 0 degrees the identity", "[cpu][augment]") {
  const int64_t channels = 3, size = 6;
  const std::vector<float> in = ramp(channels, size, size);
  CHECK(augmented({.angle = 0}, in, channels, size, size) == in);
  const std::vector<float> left = augmented({.angle = 90}, in, channels, size, size);
  const std::vector<float> right = augmented({.angle = -90}, in, channels, size, size);
  const std::vector<float> half = augmented({.angle = 180}, in, channels, size, size);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x) {
        // Counter-clockwise: numpy's rot90, flipud(transpose); the top-right corner moves to the top left.
        CHECK(std::abs(at(left, size, size, c, y, x) - at(in, size, size, c, x, size - 1 - y)) < 1e-5f);
        CHECK(std::abs(at(right, size, size, c, y, x) - at(in, size, size, c, size - 1 - x, y)) < 1e-5f);
        CHECK(std::abs(at(half, size, size, c, y, x) - at(in, size, size, c, size - 1 - y, size - 1 - x)) < 1e-5f);
      }
  // Bilinear with zeros outside: a white image keeps its centre and loses its corners.
  const std::vector<float> white(static_cast<size_t>(size * size), 1.0f);
  const std::vector<float> turned = augmented({.angle = 30}, white, 1, size, size);
  CHECK(std::abs(at(turned, size, size, 0, 2, 2) - 1.0f) < 1e-6f);
  CHECK(at(turned, size, size, 0, 0, 0) < 0.5f);
  // 45 degrees of a 3x3 image: the corner (0, 0) samples column 1 at row 1 - sqrt(2), between the
  // outside (zero) and pixel (0, 1), which weighs 2 - sqrt(2).
  std::vector<float> nine(9, 0.0f);
  nine[1] = 1.0f;  // row 0, column 1
  const std::vector<float> diagonal = augmented({.angle = 45}, nine, 1, 3, 3);
  CHECK(std::abs(diagonal[0] - static_cast<float>(2 - std::sqrt(2.0))) < 1e-6f);
}

TEST_CASE("image augment: brightness and contrast follow ColorJitter's blends, clamped to [0, 1]", "[cpu][augment]") {
  const std::vector<float> gray = {0.0f, 0.2f, 0.5f, 0.9f};
  const std::vector<float> bright = augmented({.brightness = 1.5}, gray, 1, 2, 2);
  for (size_t k = 0; k < gray.size(); ++k) CHECK(bright[k] == Approx(std::min(1.0, 1.5 * gray[k])));
  const double mean = (0.0 + 0.2 + 0.5 + 0.9) / 4;
  const std::vector<float> flat = augmented({.contrast = 0.5}, gray, 1, 2, 2);
  for (size_t k = 0; k < gray.size(); ++k) CHECK(flat[k] == Approx(0.5 * gray[k] + 0.5 * mean));
  const std::vector<float> sharp = augmented({.contrast = 2.0}, gray, 1, 2, 2);
  for (size_t k = 0; k < gray.size(); ++k) CHECK(sharp[k] == Approx(std::clamp(2.0 * gray[k] - mean, 0.0, 1.0)).margin(1e-6));
  // Brightness first, then contrast about the brightened image's mean.
  const std::vector<float> both = augmented({.brightness = 0.5, .contrast = 3.0}, gray, 1, 2, 2);
  for (size_t k = 0; k < gray.size(); ++k)
    CHECK(both[k] == Approx(std::clamp(3.0 * 0.5 * gray[k] - 2.0 * 0.5 * mean, 0.0, 1.0)).margin(1e-6));
  // RGB: the mean of the BT.601 gray, one blend for every channel.
  const std::vector<float> rgb = {0.1f, 0.3f, 0.6f, 0.2f, 0.4f, 0.8f};  // [3, 1, 2]
  const double gray_mean = (0.299 * (0.1 + 0.3) + 0.587 * (0.6 + 0.2) + 0.114 * (0.4 + 0.8)) / 2;
  const std::vector<float> jittered = augmented({.contrast = 0.25}, rgb, 3, 1, 2);
  for (size_t k = 0; k < rgb.size(); ++k) CHECK(jittered[k] == Approx(0.25 * rgb[k] + 0.75 * gray_mean));
}

TEST_CASE("image augment: draws depend on the seed, the epoch and the sample only", "[cpu][augment]") {
  const data::AugmentOptions options{
      .crop_padding = 3, .flip = true, .rotation = 15, .brightness = 0.4, .contrast = 0.2};
  const data::ImageAugment augment(options, 42), same(options, 42), other_seed(options, 43);
  CHECK(augment.draw(7, 2) == same.draw(7, 2));
  CHECK(augment.draw(7, 2) != augment.draw(7, 3));
  CHECK(augment.draw(7, 2) != augment.draw(8, 2));
  CHECK(augment.draw(7, 2) != other_seed.draw(7, 2));
  int flips = 0;
  for (int64_t sample = 0; sample < 1000; ++sample) {
    const data::AugmentDraw d = augment.draw(sample, 5);
    flips += d.flip;
    CHECK((d.angle >= -15 && d.angle <= 15 && d.brightness >= 0.6 && d.brightness <= 1.4 && d.contrast >= 0.8 &&
           d.contrast <= 1.2));
  }
  CHECK((flips > 400 && flips < 600));
  // Turning a transform on leaves the others' draws as they were.
  const data::ImageAugment flip_only({.flip = true}, 42);
  CHECK(flip_only.draw(7, 2).flip == augment.draw(7, 2).flip);

  // A batch's images are augmented by their samples' draws, whatever their place in the batch.
  const int64_t channels = 1, height = 5, width = 5, size = channels * height * width;
  Tensor batch = empty({2, channels, height, width}, {.dtype = DType::f32});
  const std::vector<float> image = ramp(channels, height, width);
  for (int64_t i = 0; i < 2; ++i) std::copy(image.begin(), image.end(), batch.data<float>() + i * size);
  Tensor swapped = batch.clone();
  augment.apply(batch, std::vector<int64_t>{3, 9}, 1);
  augment.apply(swapped, std::vector<int64_t>{9, 3}, 1);
  const float* a = batch.data<float>();
  const float* b = swapped.data<float>();
  CHECK(std::vector<float>(a, a + size) == std::vector<float>(b + size, b + 2 * size));
  CHECK(std::vector<float>(a, a + size) == augmented(augment.draw(3, 1), image, channels, height, width));
  CHECK(std::vector<float>(a, a + size) != std::vector<float>(a + size, a + 2 * size));

  // Nothing on: the images are left as they are.
  Tensor untouched = swapped.clone();
  data::ImageAugment({}, 42).apply(untouched, std::vector<int64_t>{9, 3}, 1);
  CHECK(std::equal(b, b + 2 * size, untouched.data<float>()));
}

TEST_CASE("image augment: the loader's transform gives the same batches after a seek, with or without prefetch",
          "[cpu][augment]") {
  const int64_t n = 20, height = 4, width = 4, size = height * width;
  data::Dataset dataset{.inputs = empty({n, 1, height, width}, {.dtype = DType::f32}),
                        .targets = empty({n}, {.dtype = DType::i64})};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < size; ++k) dataset.inputs.data<float>()[i * size + k] = static_cast<float>((i + k) % 7) / 7;
    dataset.targets.data<int64_t>()[i] = i % 2;
  }
  const data::ImageAugment augment({.crop_padding = 1, .flip = true, .rotation = 10}, 3);
  auto loader = [&](int prefetch) {
    return std::make_unique<data::DataLoader>(
        dataset,
        data::LoaderOptions{.batch_size = 6,
                            .seed = 3,
                            .prefetch = prefetch,
                            .prefetch_threads = 1,  // a CPU run's: the transform alone on its thread
                            .transform = [&augment](data::Dataset& rows, const std::vector<int64_t>& samples,
                                                    int64_t epoch) { augment.apply(rows.inputs, samples, epoch); }});
  };
  auto bytes = [](const data::Batch& b) {
    const float* p = b.inputs.data<float>();
    return std::vector<float>(p, p + b.inputs.numel());
  };
  auto plain = std::make_unique<data::DataLoader>(dataset, data::LoaderOptions{.batch_size = 6, .seed = 3});
  auto straight = loader(0), ahead = loader(2);
  std::vector<std::vector<float>> seen;
  for (int step = 0; step < 8; ++step) {  // two epochs of 4 batches
    const data::Batch b = straight->next();
    CHECK(bytes(b) == bytes(ahead->next()));
    CHECK(bytes(b) != bytes(plain->next()));
    seen.push_back(bytes(b));
  }
  ahead->seek({.epoch = 1, .batch = 1});
  for (int step = 5; step < 8; ++step) CHECK(bytes(ahead->next()) == seen[static_cast<size_t>(step)]);
}

TEST_CASE("recipe: [data.augment] keys, --set, and their errors", "[cpu][recipe][augment]") {
  const std::string base =
      "[run]\nname = \"t\"\n[model]\nname = \"cnn\"\ninput_shape = [1, 28, 28]\n[optimizer]\nname = \"sgd\"\n"
      "lr = 0.1\n[training]\nsteps = 1\n[data]\nname = \"image_folder\"\npath = \"images\"\n";
  const RecipeSpec spec =
      parse_recipe(base + "[data.augment]\ncrop_padding = 2\nflip = true\nrotation = 10\n", "t.toml");
  CHECK(spec.data.augment == data::AugmentOptions{.crop_padding = 2, .flip = true, .rotation = 10});
  CHECK(parse_recipe(spec.to_toml(), "resolved.toml") == spec);
  CHECK(spec.to_toml().find("\n[data.augment]\ncrop_padding = 2\nflip = true\n") != std::string::npos);
  CHECK(recipe_json(spec)["data"]["augment"]["crop_padding"] == 2);
  // A dotted key under [data] is the same table; --set reaches into it.
  CHECK(parse_recipe(base + "augment.flip = true\n", "t.toml").data.augment == data::AugmentOptions{.flip = true});
  CHECK(parse_recipe(base, "t.toml", {"data.augment.brightness=0.25", "data.augment.contrast=0.5"}).data.augment ==
        data::AugmentOptions{.brightness = 0.25, .contrast = 0.5});
  CHECK(parse_recipe(base, "t.toml").data.augment == data::AugmentOptions{});

  auto error = [&](const std::string& extra, const std::vector<std::string>& overrides = {}) {
    try {
      parse_recipe(base + extra, "t.toml", overrides);
    } catch (const RecipeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error("[data.augment]\nrotation = -5\n"), Contains("t.toml:") && Contains("data.augment.rotation"));
  CHECK_THAT(error("[data.augment]\ncrop_padding = -1\n"), Contains("data.augment.crop_padding"));
  CHECK_THAT(error("", {"data.augment.brightness=-0.1"}), Contains("data.augment.brightness"));
  CHECK_THAT(error("[data.augment]\nflips = true\n"),
             Contains("unknown key 'flips' in [data.augment]") && Contains("did you mean 'flip'"));
  CHECK_THAT(error("[data.augmnt]\nflip = true\n"), Contains("did you mean 'augment'"));
  CHECK_THAT(error("", {"data.augment=true"}), Contains("[data.augment] is a section"));
  CHECK_THAT(error("", {"data.name=fashion_mnist", "data.augment.flip=true"}),
             Contains("[data.augment] augments the images of data.name = \"image_folder\""));
  CHECK(error("", {"data.name=fashion_mnist", "data.augment.flip=false"}) == "no error");
}
