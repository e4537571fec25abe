// Data and weight files whose headers or contents contradict themselves or the model are
// refused when they are opened, naming the file (issue 40, round 3).
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "libgenesis/core/error.h"
#include "libgenesis/data/dataset.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/models/classifier.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/train/data_source.h"
#include "libgenesis/train/checkpoint.h"
#include "tests/testing.h"

namespace fs = std::filesystem;

namespace {

// Overwrites the u64 vocab_size of a genesis shard's header (bytes 24..31).
void set_header_vocab(const fs::path& path, uint64_t vocab_size) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(24);
  f.write(reinterpret_cast<const char*>(&vocab_size), sizeof vocab_size);
}

// A gzip'd IDX file: big-endian header, then `payload` (already in the file's byte order).
void write_idx_gz(const fs::path& path, unsigned char type, const std::vector<uint32_t>& shape,
                  const std::vector<unsigned char>& payload) {
  std::vector<unsigned char> bytes{0, 0, type, static_cast<unsigned char>(shape.size())};
  for (uint32_t d : shape)
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<unsigned char>(d >> s));
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::vector<unsigned char> big_endian_floats(const std::vector<float>& values) {
  std::vector<unsigned char> out;
  for (float v : values) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(u >> s));
  }
  return out;
}

}  // namespace

TEST_CASE("token shard header vocab_size is checked against its width and its tokens", "[cpu]") {
  genesis::testing::TempDir dir;
  const fs::path path = dir / "t.bin";
  genesis::data::write_token_shard(path, {1, 2, 500, 3}, 1000);  // u16 tokens
  for (uint64_t impossible : {uint64_t{1}, uint64_t{65537}, ~uint64_t{0}}) {
    set_header_vocab(path, impossible);
    CHECK_THROWS_AS(genesis::data::TokenShard(path), genesis::ValueError);
    CHECK_THROWS_WITH(genesis::data::TokenShard{path},
                      Catch::Contains(path.string()) && Catch::Contains("vocab_size " + std::to_string(impossible)));
  }
  set_header_vocab(path, 0);  // unknown: nothing to check the tokens against
  CHECK(genesis::data::TokenShard(path).checked_max_token() == 500);
  set_header_vocab(path, 100);
  const genesis::data::TokenShard shard(path);
  CHECK_THROWS_WITH(shard.checked_max_token(), Catch::Contains("token id 500") && Catch::Contains("vocab_size 100"));
}

TEST_CASE("token shards of another vocabulary than the model's or each other's are refused", "[cpu]") {
  genesis::testing::TempDir dir;
  genesis::data::write_token_shard(dir / "train.bin", {1, 2, 3}, 1000);
  genesis::data::write_token_shard(dir / "val.bin", {1, 2, 3}, 50257);
  genesis::data::write_token_shard(dir / "same.bin", {3, 2, 1}, 1000);
  // Every id fits the model's 24 entries, but the header says the tokenizer had 1000.
  CHECK_THROWS_AS(genesis::train::check_shard_vocab(dir / "train.bin", 24), genesis::RecipeError);
  CHECK_NOTHROW(genesis::train::check_shard_vocab(dir / "train.bin", 1000));
  CHECK_THROWS_WITH(genesis::train::check_shard_vocabs_match(dir / "train.bin", dir / "val.bin"),
                    Catch::Contains("1000") && Catch::Contains("50257") && Catch::Contains("val.bin"));
  CHECK_NOTHROW(genesis::train::check_shard_vocabs_match(dir / "train.bin", dir / "same.bin"));
}

TEST_CASE("Fashion-MNIST labels and pixels are checked when the files load", "[cpu]") {
  genesis::testing::TempDir dir;
  const fs::path images = dir / "train-images-idx3-ubyte.gz", labels = dir / "train-labels-idx1-ubyte.gz";
  write_idx_gz(images, 0x08, {3, 28, 28}, std::vector<unsigned char>(3 * 28 * 28, 7));
  write_idx_gz(labels, 0x08, {3}, {0, 9, 2});
  CHECK(genesis::data::load_fashion_mnist(dir.path().string(), "train").size() == 3);
  // Label 10 of 10 classes: was `cross_entropy: target value 10 is out of range` mid-training.
  write_idx_gz(labels, 0x08, {3}, {0, 10, 2});
  CHECK_THROWS_WITH(genesis::data::load_fashion_mnist(dir.path().string(), "train"),
                    Catch::Contains(labels.string()) && Catch::Contains("label 10 at index 1"));
  write_idx_gz(labels, 0x0D, {3}, big_endian_floats({0, 1, 2}));
  CHECK_THROWS_WITH(genesis::data::load_fashion_mnist(dir.path().string(), "train"),
                    Catch::Contains(labels.string()) && Catch::Contains("labels are f32"));
  write_idx_gz(labels, 0x08, {3}, {0, 1, 2});
  std::vector<float> pixels(3 * 28 * 28, 0.5f);
  pixels[28 * 28 + 5] = std::nanf("");
  write_idx_gz(images, 0x0D, {3, 28, 28}, big_endian_floats(pixels));
  CHECK_THROWS_WITH(genesis::data::load_fashion_mnist(dir.path().string(), "train"),
                    Catch::Contains(images.string()) && Catch::Contains("pixel 789 (image 1) is nan"));
}

// eval of such a checkpoint printed {"accuracy": 0.1, "loss": null} and generate repeated one
// token forever, both with exit 0.
TEST_CASE("weights holding NaN or inf are refused at load, naming the tensor", "[cpu]") {
  genesis::testing::TempDir dir;
  genesis::models::Mlp saved({.input_shape = {4}, .hidden = {3}, .num_classes = 2});
  const genesis::NamedTensor damaged = saved.named_parameters().front();
  damaged.tensor.data<float>()[1] = std::nanf("");
  genesis::train::TrainerState state;
  state.step = 1;
  state.optimizer_name = "adamw";
  state.scheduler_name = "constant";
  genesis::train::save_checkpoint(dir / "checkpoints", saved, saved.state_dict(), "adamw", {}, state, "", 1);
  genesis::models::Mlp loaded({.input_shape = {4}, .hidden = {3}, .num_classes = 2});
  CHECK_THROWS_WITH(
      genesis::train::load_checkpoint(dir / "checkpoints", loaded, nullptr),
      Catch::Contains("model.safetensors") && Catch::Contains("'" + damaged.name + "' holds nan at element 1"));

  auto lm = genesis::models::causal_lm_from_config(
      R"({"model_type": "gpt2", "vocab_size": 50, "n_positions": 16, "n_embd": 8, "n_layer": 1, "n_head": 2})");
  genesis::models::save_hf_model(*lm, dir / "hf");
  CHECK_NOTHROW(genesis::models::load_hf_model(dir / "hf"));
  const genesis::NamedTensor first = lm->named_parameters().front();
  first.tensor.data<float>()[0] = INFINITY;
  genesis::models::save_hf_model(*lm, dir / "hf");
  CHECK_THROWS_WITH(genesis::models::load_hf_model(dir / "hf"), Catch::Contains("holds inf at element 0"));
}
