// Data: IDX reading (plain and gzip), Fashion-MNIST, permutations, the loader's shuffle,
// prefetch and cursor.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <chrono>
#include <fstream>
#include <set>

#include "libgenesis/data/dataset.h"
#include "libgenesis/data/idx.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/data/permutation.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::data;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("genesis_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<unsigned char> idx_bytes(unsigned char type, const std::vector<uint32_t>& shape,
                                     const std::vector<unsigned char>& payload) {
  std::vector<unsigned char> b{0, 0, type, static_cast<unsigned char>(shape.size())};
  for (uint32_t d : shape) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
  }
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

void write_file(const std::string& path, const std::vector<unsigned char>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
}

Dataset counting_dataset(int64_t n) {
  Dataset ds{arange(0.0, static_cast<double>(n), 1.0).view({n, 1}), arange(n)};
  return ds;
}

}  // namespace

TEST_CASE("IDX files read plain and gzip'd, corrupt files are named", "[cpu][data]") {
  std::string plain = temp_path("img.idx"), gz = temp_path("img.idx.gz"), labels = temp_path("lab.idx.gz");
  std::vector<unsigned char> pixels{0, 1, 2, 3, 4, 5, 250, 255, 9, 10, 11, 12};
  write_file(plain, idx_bytes(0x08, {3, 2, 2}, pixels), false);
  write_file(gz, idx_bytes(0x08, {3, 2, 2}, pixels), true);
  write_file(labels, idx_bytes(0x08, {3}, {7, 0, 9}), true);
  for (const std::string& p : {plain, gz}) {
    Tensor t = read_idx(p);
    CHECK(t.shape() == Shape{3, 2, 2});
    CHECK(t.dtype() == DType::f32);
    CHECK(t.to_vector<float>()[7] == 255.0f);
  }
  Tensor l = read_idx(labels);
  CHECK(l.dtype() == DType::i64);
  CHECK(l.to_vector<int64_t>() == std::vector<int64_t>{7, 0, 9});
  std::string truncated = temp_path("bad.idx");
  write_file(truncated, idx_bytes(0x08, {3, 2, 2}, {1, 2, 3}), false);
  CHECK_THROWS_WITH(read_idx(truncated), Catch::Contains("expected 12 data bytes"));
  std::string garbage = temp_path("garbage.idx");
  write_file(garbage, {1, 2, 3, 4, 5}, false);
  CHECK_THROWS_WITH(read_idx(garbage), Catch::Contains("not an IDX file"));
  CHECK_THROWS_WITH(read_idx(temp_path("missing.idx")), Catch::Contains("not found"));
  for (const std::string& p : {plain, gz, labels, truncated, garbage}) std::filesystem::remove(p);
}

TEST_CASE("IDX: a gzip bomb is refused from its header, trailing data is refused", "[cpu][data]") {
  // Issue 14 item 11: a small .gz whose header announces gigabytes is refused before anything
  // is inflated; one with a plausible header but far more data stops right after the payload.
  const std::string bomb = temp_path("bomb.idx.gz"), extra = temp_path("extra.idx.gz");
  write_file(bomb, idx_bytes(0x08, {60000, 1000, 1000}, std::vector<unsigned char>(4096, 0)), true);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(read_idx(bomb), Catch::Contains("more than 1024 MiB") && Catch::Contains("bomb.idx.gz"));
  // Found by tests/fuzz: a zero size hid the product of the others (0 x 2^32-ish x 2^32-ish
  // overflowed int64 when the empty tensor's strides were computed).
  const std::string zero = temp_path("zero.idx");
  write_file(zero, idx_bytes(0x08, {0, 3304849922u, 4160985028u}, {}), false);
  CHECK_THROWS_WITH(read_idx(zero), Catch::Contains("more than 1024 MiB") && Catch::Contains("zero.idx"));
  std::vector<unsigned char> payload(3 * 2 * 2 + (size_t{64} << 20), 7);  // 64 MiB past the 12 bytes announced
  write_file(extra, idx_bytes(0x08, {3, 2, 2}, payload), true);
  CHECK_THROWS_WITH(read_idx(extra), Catch::Contains("expected 12 data bytes") && Catch::Contains("found more"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
  for (const std::string& p : {bomb, extra}) std::filesystem::remove(p);
}

TEST_CASE("Fashion-MNIST from the Debian package", "[cpu][data]") {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    WARN("skipped: dataset-fashion-mnist is not installed");
    return;
  }
  Dataset test = load_fashion_mnist(kFashionMnistDir, "test");
  CHECK(test.inputs.shape() == Shape{10000, 1, 28, 28});
  CHECK(test.targets.shape() == Shape{10000});
  auto labels = test.targets.to_vector<int64_t>();
  std::vector<int> counts(10, 0);
  for (int64_t l : labels) counts[static_cast<size_t>(l)]++;
  for (int c : counts) CHECK(c == 1000);  // the test split is balanced
  Normalization n = compute_normalization(test);
  CHECK(n.mean == Approx(0.2868).margin(0.002));
  CHECK(n.std == Approx(0.3524).margin(0.002));
  CHECK_THROWS_WITH(load_fashion_mnist("/nonexistent", "test"), Catch::Contains("dataset-fashion-mnist"));
  CHECK_THROWS_AS(load_fashion_mnist(kFashionMnistDir, "validation"), UsageError);
}

TEST_CASE("permutations are seeded, complete and differ by stream", "[cpu][data]") {
  std::vector<int64_t> a = permutation(1000, 42, 1), b = permutation(1000, 42, 1), c = permutation(1000, 42, 2);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(std::set<int64_t>(a.begin(), a.end()).size() == 1000);
  CHECK(permutation(1, 0, 0) == std::vector<int64_t>{0});
  CHECK(permutation(0, 0, 0).empty());
}

TEST_CASE("validation split is disjoint and seeded", "[cpu][data]") {
  Dataset ds = counting_dataset(100);
  auto [train, val] = split_validation(ds, 0.2, 7);
  CHECK(train.size() == 80);
  CHECK(val.size() == 20);
  std::set<int64_t> seen;
  for (int64_t v : train.targets.to_vector<int64_t>()) seen.insert(v);
  for (int64_t v : val.targets.to_vector<int64_t>()) CHECK(seen.insert(v).second);
  CHECK(seen.size() == 100);
  // inputs travel with their targets
  CHECK(val.inputs.to_vector<float>()[3] == static_cast<float>(val.targets.to_vector<int64_t>()[3]));
  CHECK_THROWS_AS(split_validation(ds, 1.0, 0), UsageError);
}

TEST_CASE("loader: every example once per epoch, reshuffled, prefetch and cursor agree", "[cpu][data]") {
  for (int prefetch : {0, 3}) {
    DataLoader loader(counting_dataset(10), {.batch_size = 4, .shuffle = true, .seed = 5, .prefetch = prefetch});
    CHECK(loader.batches_per_epoch() == 3);
    std::vector<int64_t> epoch0, epoch1;
    for (int i = 0; i < 3; ++i) {
      Batch b = loader.next();
      CHECK(b.epoch == 0);
      for (int64_t v : b.targets.to_vector<int64_t>()) epoch0.push_back(v);
    }
    CHECK(loader.cursor() == LoaderCursor{1, 0});
    for (int i = 0; i < 3; ++i)
      for (int64_t v : loader.next().targets.to_vector<int64_t>()) epoch1.push_back(v);
    CHECK(std::set<int64_t>(epoch0.begin(), epoch0.end()).size() == 10);
    CHECK(epoch0 != epoch1);
    // Seeking reproduces the same batches.
    loader.seek({1, 1});
    Batch again = loader.next();
    CHECK(again.epoch == 1);
    CHECK(again.targets.to_vector<int64_t>() == std::vector<int64_t>(epoch1.begin() + 4, epoch1.begin() + 8));
  }
  DataLoader ordered(counting_dataset(5), {.batch_size = 2, .shuffle = false, .drop_last = true, .prefetch = 1});
  CHECK(ordered.batches_per_epoch() == 2);
  CHECK(ordered.next().targets.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(ordered.next().targets.to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  CHECK(ordered.next().targets.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK_THROWS_AS(ordered.seek({0, 2}), ValueError);
  CHECK_THROWS_AS(DataLoader(counting_dataset(3), {.batch_size = 0}), UsageError);
}
