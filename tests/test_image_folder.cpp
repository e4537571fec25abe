// Image folders (issue 38): PNG and JPEG decoding against known pixels (PNGs written here by hand
// with zlib, JPEGs with TurboJPEG), gray/RGB conversion, the bilinear resize, the folder's class
// order and splits, per-channel statistics, each bad input with the file it names, and the
// source's augmentation of training batches only.
#include <turbojpeg.h>
#include <zlib.h>

#include <fstream>

#include "libgenesis/core/error.h"
#include "libgenesis/data/image_decode.h"
#include "libgenesis/data/image_folder.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/data_source.h"
#include "tests/testing.h"

namespace fs = std::filesystem;
using namespace genesis;
using Catch::Matchers::Contains;
using Bytes = std::vector<uint8_t>;

namespace {

void put_u32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(Bytes& out, const char* kind, const Bytes& payload) {
  put_u32(out, static_cast<uint32_t>(payload.size()));
  Bytes body(kind, kind + 4);
  body.insert(body.end(), payload.begin(), payload.end());
  out.insert(out.end(), body.begin(), body.end());
  put_u32(out, static_cast<uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size()))));
}

// An 8-bit PNG of `channels` 1 (gray), 3 (RGB) or 4 (RGBA) interleaved, rows unfiltered.
Bytes png(int64_t width, int64_t height, int64_t channels, const Bytes& pixels) {
  Bytes rows;
  for (int64_t y = 0; y < height; ++y) {
    rows.push_back(0);
    rows.insert(rows.end(), pixels.begin() + y * width * channels, pixels.begin() + (y + 1) * width * channels);
  }
  uLongf size = compressBound(static_cast<uLong>(rows.size()));
  Bytes deflated(size);
  REQUIRE(compress(deflated.data(), &size, rows.data(), static_cast<uLong>(rows.size())) == Z_OK);
  deflated.resize(size);
  Bytes header;
  put_u32(header, static_cast<uint32_t>(width));
  put_u32(header, static_cast<uint32_t>(height));
  const uint8_t color = channels == 1 ? 0 : channels == 3 ? 2 : 6;
  header.insert(header.end(), {8, color, 0, 0, 0});
  Bytes out{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_chunk(out, "IHDR", header);
  put_chunk(out, "IDAT", deflated);
  put_chunk(out, "IEND", {});
  return out;
}

// A JPEG at quality 100 without chroma subsampling: flat colours come back within rounding.
Bytes jpeg(int width, int height, int channels, const Bytes& pixels) {
  tjhandle handle = tjInitCompress();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int status = tjCompress2(handle, pixels.data(), width, 0, height, channels == 1 ? TJPF_GRAY : TJPF_RGB, &buffer,
                                 &size, channels == 1 ? TJSAMP_GRAY : TJSAMP_444, 100, 0);
  Bytes out(buffer, buffer + size);
  tjFree(buffer);
  tjDestroy(handle);
  REQUIRE(status == 0);
  return out;
}

fs::path write_bytes(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

Bytes gray_pixels(uint8_t value, int64_t count) {
  return Bytes(static_cast<size_t>(count), value);
}

std::vector<float> input_of(const data::Image& image, int64_t channels, int64_t height, int64_t width) {
  std::vector<float> out(static_cast<size_t>(channels * height * width));
  data::to_input(image, channels, height, width, out.data());
  return out;
}

// root/<class>/<name>.png for each (class, name), 2x2 gray of the given value.
void write_folder(const fs::path& root, const std::vector<std::pair<std::string, std::string>>& files,
                  uint8_t value = 100) {
  for (const auto& [klass, name] : files)
    write_bytes(root / klass / (name + ".png"), png(2, 2, 1, gray_pixels(value, 4)));
}

std::vector<std::string> names(const std::vector<data::ImageFile>& files) {
  std::vector<std::string> out;
  for (const data::ImageFile& f : files)
    out.push_back(f.path.parent_path().filename().string() + "/" + f.path.filename().string());
  return out;
}

}  // namespace

TEST_CASE("image decode: PNG gray, RGB and RGBA give their pixels, alpha dropped", "[cpu][image_folder]") {
  const Bytes gray{0, 1, 2, 127, 128, 255};
  data::Image image = data::decode_image(png(3, 2, 1, gray));
  CHECK(image.channels == 1);
  CHECK(image.height == 2);
  CHECK(image.width == 3);
  CHECK(image.pixels == gray);

  const Bytes rgb{10, 20, 30, 40, 50, 60};
  image = data::decode_image(png(2, 1, 3, rgb));
  CHECK(image.channels == 3);
  CHECK(image.pixels == rgb);

  image = data::decode_image(png(2, 1, 4, {10, 20, 30, 0, 40, 50, 60, 255}));
  CHECK(image.channels == 3);
  CHECK(image.pixels == rgb);
}

TEST_CASE("image decode: JPEG gray and RGB within rounding", "[cpu][image_folder]") {
  data::Image image = data::decode_image(jpeg(8, 8, 1, gray_pixels(77, 64)));
  CHECK(image.channels == 1);
  CHECK(image.width == 8);
  for (const uint8_t p : image.pixels) CHECK(std::abs(p - 77) <= 1);

  Bytes rgb;
  for (int i = 0; i < 64; ++i) rgb.insert(rgb.end(), {200, 40, 90});
  image = data::decode_image(jpeg(8, 8, 3, rgb));
  CHECK(image.channels == 3);
  for (size_t i = 0; i < rgb.size(); ++i) CHECK(std::abs(image.pixels[i] - rgb[i]) <= 2);
}

TEST_CASE("image input: RGB to gray by the BT.601 weights, gray repeated to RGB, scaled to [0, 1]",
          "[cpu][image_folder]") {
  const data::Image rgb{.channels = 3, .height = 1, .width = 2, .pixels = {255, 0, 0, 10, 20, 30}};
  const std::vector<float> gray = input_of(rgb, 1, 1, 2);
  CHECK(gray[0] == Approx(0.299f));
  CHECK(gray[1] == Approx((0.299 * 10 + 0.587 * 20 + 0.114 * 30) / 255.0));
  // Channel-major: all of R, then G, then B.
  CHECK(input_of(rgb, 3, 1, 2) == std::vector<float>{1.0f, 10 / 255.0f, 0.0f, 20 / 255.0f, 0.0f, 30 / 255.0f});
  const data::Image one{.channels = 1, .height = 1, .width = 1, .pixels = {51}};
  CHECK(input_of(one, 3, 1, 1) == std::vector<float>{0.2f, 0.2f, 0.2f});
}

TEST_CASE("image input: bilinear resize with half-pixel centres, the same size unchanged", "[cpu][image_folder]") {
  // One row of two pixels, 0 and 255, widened to 4: edges clamp, the middle interpolates.
  const data::Image row{.channels = 1, .height = 1, .width = 2, .pixels = {0, 255}};
  const std::vector<float> wide = input_of(row, 1, 1, 4);
  CHECK(wide[0] == 0.0f);
  CHECK(wide[1] == Approx(0.25f));
  CHECK(wide[2] == Approx(0.75f));
  CHECK(wide[3] == 1.0f);
  // Four pixels to two: each output is the mean of a pair.
  const data::Image four{.channels = 1, .height = 1, .width = 4, .pixels = {0, 102, 204, 255}};
  const std::vector<float> narrow = input_of(four, 1, 1, 2);
  CHECK(narrow[0] == Approx(51 / 255.0f));
  CHECK(narrow[1] == Approx(229.5f / 255.0f));
  // Vertically too: 2 rows to 3.
  const data::Image column{.channels = 1, .height = 2, .width = 1, .pixels = {0, 255}};
  const std::vector<float> tall = input_of(column, 1, 3, 1);
  CHECK(tall[0] == Approx(0.0f).margin(1e-6));
  CHECK(tall[1] == Approx(0.5f));
  CHECK(tall[2] == Approx(1.0f));
  const data::Image same{.channels = 1, .height = 2, .width = 3, .pixels = {1, 2, 3, 4, 5, 6}};
  const std::vector<float> kept = input_of(same, 1, 2, 3);
  for (size_t i = 0; i < kept.size(); ++i) CHECK(kept[i] == same.pixels[i] / 255.0f);
}

TEST_CASE("image folder: classes are the sorted folder names, files in os.walk order, other kinds ignored",
          "[cpu][image_folder]") {
  testing::TempDir tmp;
  write_folder(tmp / "root", {{"zebra", "b"}, {"zebra", "a"}, {"Apple", "x"}, {"mango", "1"}});
  write_bytes(tmp / "root" / "mango" / "2.JPG", jpeg(8, 8, 1, gray_pixels(5, 64)));
  write_bytes(tmp / "root" / "mango" / "notes.txt", {'h', 'i'});
  write_bytes(tmp / "root" / "mango" / ".hidden.png", {});
  write_bytes(tmp / "root" / "mango" / ".cache" / "x.png", {});
  write_folder(tmp / "root" / "mango", {{"deeper", "0"}});  // nested: after the folder's own files
  write_bytes(tmp / "root" / "README", {'h', 'i'});         // a file beside the class folders
  const data::ImageFolder folder = data::scan_image_folder(tmp / "root");
  CHECK(folder.classes == std::vector<std::string>{"Apple", "mango", "zebra"});  // byte order: capitals first
  CHECK_FALSE(folder.split_folders);
  CHECK(names(folder.train.files) == std::vector<std::string>{"Apple/x.png", "mango/1.png", "mango/2.JPG",
                                                              "deeper/0.png", "zebra/a.png", "zebra/b.png"});
  std::vector<int64_t> labels;
  for (const data::ImageFile& f : folder.train.files) labels.push_back(f.label);
  CHECK(labels == std::vector<int64_t>{0, 1, 1, 1, 2, 2});
  CHECK(folder.train.ignored == 1);
  CHECK(folder.test.files.empty());

  // Decoded to [1, 4, 4]: a 2x2 image of 100 grows to 4x4 of 100 / 255.
  const data::DecodedImages decoded = data::decode_images(folder.train.files, {1, 4, 4}, false);
  CHECK(decoded.samples.inputs.shape() == Shape{6, 1, 4, 4});
  CHECK(decoded.samples.inputs.data<float>()[0] == 100 / 255.0f);
  CHECK(decoded.samples.targets.data<int64_t>()[5] == 2);
}

TEST_CASE("image folder: train, val and test folders over the training classes", "[cpu][image_folder]") {
  testing::TempDir tmp;
  write_folder(tmp / "root" / "train", {{"cat", "1"}, {"dog", "1"}, {"owl", "1"}});
  write_folder(tmp / "root" / "test", {{"dog", "9"}, {"owl", "9"}});  // a class may be absent
  data::ImageFolder folder = data::scan_image_folder(tmp / "root");
  CHECK(folder.split_folders);
  CHECK(folder.classes == std::vector<std::string>{"cat", "dog", "owl"});
  CHECK(folder.val.dir.empty());
  REQUIRE(folder.test.files.size() == 2);
  CHECK(folder.test.files[0].label == 1);
  // A checkpoint's classes replace the folder names: labels follow its order.
  folder = data::scan_image_folder(tmp / "root", {"owl", "dog", "cat", "bat"});
  CHECK(folder.train.files[0].label == 2);
  CHECK(folder.test.files[1].label == 0);
  write_folder(tmp / "root" / "val", {{"fox", "1"}});
  CHECK_THROWS_WITH(data::scan_image_folder(tmp / "root"),
                    Contains("val/fox: class 'fox' is not among the training classes (cat, dog, owl)"));
}

TEST_CASE("image folder: data.val_fraction holds out each class's share, seeded", "[cpu][image_folder]") {
  std::vector<data::ImageFile> files;
  for (int64_t label = 0; label < 3; ++label)
    for (int i = 0; i < 10; ++i) files.push_back({std::to_string(label) + "_" + std::to_string(i), label});
  const auto [train, val] = data::split_images(files, 0.2, 7);
  CHECK(train.size() == 24);
  REQUIRE(val.size() == 6);
  for (int64_t label = 0; label < 3; ++label)
    CHECK(std::count_if(val.begin(), val.end(), [&](const data::ImageFile& f) { return f.label == label; }) == 2);
  const auto again = data::split_images(files, 0.2, 7);
  CHECK(names(again.second) == names(val));
  CHECK(names(data::split_images(files, 0.2, 8).second) != names(val));
}

TEST_CASE("image folder: per-channel statistics, normalization and the encoding's JSON", "[cpu][image_folder]") {
  data::Dataset samples{empty({2, 2, 1, 2}, {.dtype = DType::f32}), empty({2}, {.dtype = DType::i64})};
  // Channel 0 holds 0, 1, 0, 1 (mean 0.5, std 0.5); channel 1 holds 0.25 everywhere (std 1: constant).
  const std::vector<float> values{0, 1, 0.25f, 0.25f, 0, 1, 0.25f, 0.25f};
  std::copy(values.begin(), values.end(), samples.inputs.data<float>());
  data::ImageEncoding encoding{.classes = {"a", "b"}, .mean = {}, .std = {}};
  data::fit_image_statistics(samples, encoding);
  CHECK(encoding.mean[0] == Approx(0.5));
  CHECK(encoding.std[0] == Approx(0.5));
  CHECK(encoding.mean[1] == Approx(0.25));
  CHECK(encoding.std[1] == 1.0);
  data::normalize_images(samples, encoding);
  CHECK(samples.inputs.data<float>()[0] == Approx(-1.0f));
  CHECK(samples.inputs.data<float>()[1] == Approx(1.0f));
  CHECK(samples.inputs.data<float>()[2] == Approx(0.0f).margin(1e-6));
  encoding.mean[0] = 0.1 + 0.2;  // not a short decimal: every bit must survive
  const data::ImageEncoding back = data::parse_image_encoding(data::image_encoding_json(encoding), "data.json");
  CHECK(back.classes == encoding.classes);
  CHECK(back.mean == encoding.mean);
  CHECK(back.std == encoding.std);
  CHECK_THROWS_WITH(data::parse_image_encoding("{\"format\": \"genesis csv encoding\"}", "x/data.json"),
                    Contains("x/data.json: not an image folder encoding"));
}

TEST_CASE("image folder: bad input names the folder or file", "[cpu][image_folder]") {
  testing::TempDir tmp;
  CHECK_THROWS_AS(data::scan_image_folder(tmp / "nowhere"), UsageError);
  CHECK_THROWS_WITH(data::scan_image_folder(tmp / "nowhere"), Contains("nowhere: no such directory"));
  fs::create_directories(tmp / "flat");
  write_bytes(tmp / "flat" / "a.png", png(1, 1, 1, {0}));
  CHECK_THROWS_WITH(data::scan_image_folder(tmp / "flat"), Contains("flat: no class folders"));
  write_folder(tmp / "root", {{"cat", "1"}});
  fs::create_directories(tmp / "root" / "dog");
  write_bytes(tmp / "root" / "dog" / "a.gif", {'G', 'I', 'F'});
  CHECK_THROWS_WITH(data::scan_image_folder(tmp / "root"),
                    Contains("root/dog: no .png, .jpg or .jpeg files in the class folder"));

  // Truncated and corrupt files: an error naming the file, or skipped with data.skip_bad.
  const Bytes good = png(2, 2, 1, gray_pixels(9, 4));
  Bytes crc = good;
  crc[40] ^= 0xff;  // inside the IDAT chunk: its checksum no longer matches
  const Bytes cut_jpeg = [] {
    Bytes j = jpeg(16, 16, 3, Bytes(16 * 16 * 3, 120));
    j.resize(j.size() / 2);
    return j;
  }();
  const std::vector<data::ImageFile> files{
      {write_bytes(tmp / "bad" / "c" / "ok.png", good), 0},
      {write_bytes(tmp / "bad" / "c" / "cut.png", Bytes(good.begin(), good.begin() + 45)), 0},
      {write_bytes(tmp / "bad" / "c" / "crc.png", crc), 0},
      {write_bytes(tmp / "bad" / "c" / "cut.jpg", cut_jpeg), 0},
      {write_bytes(tmp / "bad" / "c" / "text.png", {'h', 'e', 'l', 'l', 'o'}), 0}};
  for (size_t i = 1; i < files.size(); ++i) {
    const std::vector<data::ImageFile> one{files[0], files[i]};
    CHECK_THROWS_AS(data::decode_images(one, {1, 2, 2}, false), UsageError);
    CHECK_THROWS_WITH(data::decode_images(one, {1, 2, 2}, false),
                      Contains(files[i].path.string() + ": ") && Contains("set data.skip_bad = true"));
  }
  // A header that claims more pixels than any image here is refused before they are allocated.
  Bytes huge = png(1, 1, 1, {0});
  huge[17] = huge[21] = 0x01;  // IHDR's width and height (bytes 16-23) become 2^16 + 1 each
  const uint32_t checksum = static_cast<uint32_t>(crc32(0, huge.data() + 12, 17));  // "IHDR" and its 13 bytes
  for (int i = 0; i < 4; ++i) huge[29 + i] = static_cast<uint8_t>(checksum >> (24 - 8 * i));
  CHECK_THROWS_WITH(data::decode_image(huge), Contains("PNG of 65537 x 65537 pixels, more than the 268435456"));
  CHECK_THROWS_WITH(data::decode_image(png(3, 2, 1, gray_pixels(1, 6)), 5), Contains("PNG of 3 x 2 pixels, more than the 5"));
  // A large file of another kind is refused from its first bytes: nothing past them is read.
  {
    const fs::path sparse = tmp / "bad" / "c" / "sparse.png";
    std::ofstream(sparse, std::ios::binary) << "not an image";
    fs::resize_file(sparse, uintmax_t{1} << 40);  // a terabyte of holes
    CHECK_THROWS_WITH(data::read_image(sparse), Contains("sparse.png: neither a PNG nor a JPEG"));
    write_bytes(sparse, good);
    fs::resize_file(sparse, data::kMaxImageFileBytes + 1);
    CHECK_THROWS_WITH(data::read_image(sparse), Contains("sparse.png: 1073741825 bytes, more than the 1073741824"));
    fs::remove(sparse);
  }
  const data::DecodedImages decoded = data::decode_images(files, {1, 2, 2}, true);
  CHECK(decoded.samples.size() == 1);
  CHECK(decoded.skipped.size() == 4);
  CHECK_THAT(decoded.skipped[0], Contains("cut.png: PNG"));
  CHECK_THAT(decoded.skipped[3], Contains("text.png: neither a PNG nor a JPEG"));
}

// [data.augment] changes the training batches only: evaluation reads the test images as a run
// without augmentation does, and the batches keep their samples (the same targets).
TEST_CASE("image folder: [data.augment] changes training batches, never the evaluation",
          "[cpu][image_folder][augment]") {
  testing::TempDir tmp;
  for (const std::string split : {"train", "test"})
    for (int i = 0; i < 12; ++i) {
      Bytes pixels(64);
      for (size_t k = 0; k < pixels.size(); ++k)
        pixels[k] = static_cast<uint8_t>((k * 37 + static_cast<size_t>(i) * 11) % 256);
      write_bytes(tmp / split / (i % 2 ? "b" : "a") / (std::to_string(i) + ".png"), png(8, 8, 1, pixels));
    }
  const std::string recipe =
      "[run]\nname = \"t\"\nseed = 5\n[model]\nname = \"mlp\"\ninput_shape = [1, 8, 8]\n"
      "hidden = [4]\nnum_classes = 2\n[data]\nname = \"image_folder\"\npath = \"" +
      tmp.path().string() +
      "\"\nprefetch = 0\n[optimizer]\nname = \"sgd\"\nlr = 0.1\n[training]\nsteps = 1\n"
      "batch_size = 4\n[eval]\nsplit = \"test\"\n";
  const RecipeSpec plain = parse_recipe(recipe, "t.toml");
  const RecipeSpec augmented = parse_recipe(recipe, "t.toml",
                                            {"data.augment.crop_padding=2", "data.augment.flip=true",
                                             "data.augment.rotation=20", "data.augment.contrast=0.5"});
  train::RunLog log("", true);
  const std::unique_ptr<train::DataSource> a = train::open_data_source(plain, kCPU, log);
  const std::unique_ptr<train::DataSource> b = train::open_data_source(augmented, kCPU, log);
  const std::shared_ptr<nn::Module> model = recipe::build_model(plain, kCPU);
  CHECK(a->evaluate(*model) == b->evaluate(*model));
  for (int step = 0; step < 4; ++step) {
    const data::Batch x = a->next(), y = b->next();
    CHECK(std::equal(x.targets.data<int64_t>(), x.targets.data<int64_t>() + 4, y.targets.data<int64_t>()));
    CHECK(!std::equal(x.inputs.data<float>(), x.inputs.data<float>() + 4 * 64, y.inputs.data<float>()));
  }
}
