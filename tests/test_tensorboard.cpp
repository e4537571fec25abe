// TensorBoard event files: the TFRecord framing and Event protocol buffers read back by a
// decoder written here from the format's description (not from the writer), CRC-32C against
// its published check value, and a training run's curves against its metrics.jsonl.
#include <bit>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/tensorboard.h"
#include "libgenesis/train/trainer.h"
#include "tests/testing.h"
#include "tests/generated_docs.h"

using namespace genesis;
namespace fs = std::filesystem;

namespace {

struct Point {
  std::string tag;
  float value;
  int64_t step;
};

struct Reader {
  std::string_view data;
  size_t pos = 0;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(pos < data.size());
      const auto b = static_cast<unsigned char>(data[pos++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
  }
  template <class T>
  T fixed() {
    REQUIRE(pos + sizeof(T) <= data.size());
    T v;
    std::memcpy(&v, data.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const size_t n = varint();
    REQUIRE(pos + n <= data.size());
    std::string_view out = data.substr(pos, n);
    pos += n;
    return out;
  }
  bool done() const { return pos == data.size(); }
};

// Every record of an event file: the file version and the scalar points.
std::vector<Point> read_events(const fs::path& path, std::string& version) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string file = buffer.str();
  std::vector<Point> points;
  size_t pos = 0;
  while (pos < file.size()) {
    REQUIRE(pos + 12 <= file.size());
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, file.data() + pos, 8);
    std::memcpy(&length_crc, file.data() + pos + 8, 4);
    CHECK(length_crc == train::masked_crc32c(std::string_view(file.data() + pos, 8)));
    REQUIRE(pos + 12 + length + 4 <= file.size());
    const std::string_view event(file.data() + pos + 12, length);
    std::memcpy(&data_crc, file.data() + pos + 12 + length, 4);
    CHECK(data_crc == train::masked_crc32c(event));
    pos += 12 + length + 4;
    Reader r{event};
    int64_t step = 0;
    std::vector<std::pair<std::string, float>> values;
    while (!r.done()) {
      const uint64_t key = r.varint();
      switch (key) {
        case (1 << 3) | 1: CHECK(r.fixed<double>() > 1.7e9); break;  // wall_time, seconds since 1970
        case (2 << 3) | 0: step = static_cast<int64_t>(r.varint()); break;
        case (3 << 3) | 2: version = std::string(r.bytes()); break;
        case (5 << 3) | 2: {  // Summary
          Reader summary{r.bytes()};
          while (!summary.done()) {
            REQUIRE(summary.varint() == ((1 << 3) | 2));  // Summary.value
            Reader value{summary.bytes()};
            std::string tag;
            float v = 0;
            while (!value.done()) {
              const uint64_t k = value.varint();
              if (k == ((1 << 3) | 2)) tag = std::string(value.bytes());
              else if (k == ((2 << 3) | 5)) v = value.fixed<float>();
              else FAIL("unexpected Summary.Value field " << k);
            }
            values.push_back({tag, v});
          }
          break;
        }
        default: FAIL("unexpected Event field key " << key);
      }
    }
    for (const auto& [tag, v] : values) points.push_back({tag, v, step});
  }
  return points;
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C and event records read back field by field", "[cpu][tensorboard]") {
  CHECK(train::crc32c("123456789") == 0xE3069283u);  // the published check value of CRC-32C
  CHECK(train::crc32c("") == 0u);
  testing::TempDir dir;
  fs::path file;
  {
    train::TensorBoardWriter writer(dir.path());
    file = writer.path();
    writer.scalar("train/loss", 2.5, 10);
    writer.scalar("train/lr", 3e-4, 10);
    writer.scalar("eval/accuracy", 0.875, 300);  // a step past one varint byte
  }
  CHECK(file.filename().string().starts_with("events.out.tfevents."));
  std::string version;
  const std::vector<Point> points = read_events(file, version);
  CHECK(version == "brain.Event:2");
  REQUIRE(points.size() == 3);
  CHECK(points[0].tag == "train/loss");
  CHECK(points[0].value == 2.5f);
  CHECK(points[0].step == 10);
  CHECK(points[1].value == 3e-4f);
  CHECK(points[2].tag == "eval/accuracy");
  CHECK(points[2].step == 300);
}

TEST_CASE("tensorboard: a training run's curves are its metrics.jsonl's", "[cpu][tensorboard]") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("skipped: dataset-fashion-mnist is not installed");
    return;
  }
  testing::TempDir dir;
  const RecipeSpec spec = load_recipe(fs::path(genesis::testing::source_path("recipes/fashion_mnist_mlp.toml")),
                                      {"training.steps=30", "training.log_every=10", "training.eval_every=15",
                                       "run.threads=1"});
  REQUIRE(train::run_training(spec, {.run_dir = dir / "run", .quiet = true}) == 0);
  std::vector<fs::path> events;
  for (const auto& e : fs::directory_iterator(dir / "run"))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) events.push_back(e.path());
  REQUIRE(events.size() == 1);
  std::string version;
  std::map<std::string, std::map<int64_t, float>> curves;
  for (const Point& p : read_events(events[0], version)) curves[p.tag][p.step] = p.value;
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    const int64_t step = j["step"].get<int64_t>();
    if (j.contains("eval")) {
      CHECK(curves["eval/accuracy"].at(step) == static_cast<float>(j["eval"]["accuracy"].get<double>()));
    } else {
      CHECK(curves["train/loss"].at(step) == static_cast<float>(j["loss"].get<double>()));
      CHECK(curves["train/lr"].at(step) == static_cast<float>(j["lr"].get<double>()));
      CHECK(curves["train/grad_norm"].at(step) == static_cast<float>(j["grad_norm"].get<double>()));
    }
  }
  CHECK(lines == 3 + 2);  // steps 10, 20, 30; evaluations at 15 and 30 (the final one)
  CHECK(curves["train/loss"].size() == 3);
}
