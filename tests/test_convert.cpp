// genesis convert / inspect (libgenesis/convert/convert.h, hf_shards.h): the Hugging Face fixtures of
// tests/fixtures (made by transformers 5.17) survive HF -> genesis -> HF bit for bit, dtype casts
// round to nearest even, sharding and tied weights, training-checkpoint reports, and bad input.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "libgenesis/core/half.h"
#include "libgenesis/convert/convert.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path source_root() {
  for (const char* root : {static_cast<const char*>(std::getenv("GENESIS_SOURCE_DIR")), GENESIS_SOURCE_DIR, "."})
    if (root && fs::exists(fs::path(root) / "tests/fixtures/gpt2/model.safetensors")) return root;
  FAIL("tests/fixtures not found (set GENESIS_SOURCE_DIR)");
  return {};
}

fs::path fixture(const std::string& name) {
  return source_root() / "tests/fixtures" / name;
}

json read_json(const fs::path& path) {
  return json::parse(io::read_file(path));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.numel() * a.element_size()) == 0;
}

// True when `bits` (of a 16-bit float decoded by `decode`) is the nearest value to x, ties to even:
// checked against both neighbours of the same sign, independently of the conversion routine.
bool is_round_to_nearest_even(float x, uint16_t bits, float (*decode)(uint16_t)) {
  const double exact = x, chosen = decode(bits);
  const double error = std::abs(chosen - exact);
  for (int step : {-1, 1}) {
    const uint16_t magnitude = bits & 0x7FFF;
    if ((step < 0 && magnitude == 0) || (step > 0 && magnitude >= 0x7F80)) continue;
    const double neighbour = decode(static_cast<uint16_t>(bits + step));
    if (!std::isfinite(neighbour)) continue;
    const double other = std::abs(neighbour - exact);
    if (other < error || (other == error && (bits & 1) != 0)) return false;
  }
  return true;
}

float decode_bf16(uint16_t bits) {
  return genesis::detail::bf16_bits_to_float(bits);
}
float decode_f16(uint16_t bits) {
  return genesis::detail::half_bits_to_float(bits);
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and a data buffer of `data_bytes` zero bytes.
void write_raw_safetensors(const fs::path& path, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  const uint64_t size = header.size();
  std::memcpy(bytes.data(), &size, 8);
  write_bytes(path, bytes + header + std::string(data_bytes, '\0'));
}

// A model directory holding the fixture's config.json (edited by `edit`) and weights.
fs::path edited_model(const TempDir& tmp, const std::string& name, const std::function<void(json&)>& edit) {
  const fs::path dir = tmp / (name + "_edited");
  fs::create_directories(dir);
  json config = read_json(fixture(name) / "config.json");
  edit(config);
  io::write_file_atomic(dir / "config.json", config.dump(2));
  fs::copy_file(fixture(name) / "model.safetensors", dir / "model.safetensors");
  return dir;
}

}  // namespace

TEST_CASE("convert: HF -> genesis -> HF keeps every tensor bit-identical and the config keys", "[cpu][convert]") {
  TempDir tmp("convert");
  for (const std::string name : {"gpt2", "llama", "qwen2", "qwen3"}) {
    INFO(name);
    const fs::path src = fixture(name);
    const io::ConvertResult to_genesis = io::convert_model(src, tmp / (name + "_genesis"), {.to = "genesis"});
    CHECK(to_genesis.from_format == "huggingface");
    CHECK(io::open_model_source(tmp / (name + "_genesis")).format == "genesis-checkpoint");
    const io::ConvertResult to_hf = io::convert_model(tmp / (name + "_genesis"), tmp / (name + "_hf"), {});
    CHECK(to_hf.to == "hf");
    CHECK(io::open_model_source(tmp / (name + "_hf")).format == "huggingface");

    const io::WeightSet original = io::WeightSet::open_directory(src);
    const io::WeightSet round_trip = io::WeightSet::open_directory(tmp / (name + "_hf"));
    CHECK(round_trip.metadata().at("format") == "pt");
    CHECK(original.names() == round_trip.names());
    for (const std::string& tensor : original.names()) {
      INFO(tensor);
      CHECK(same_bytes(original.tensor(tensor), round_trip.tensor(tensor)));
    }
    const json before = read_json(src / "config.json"), after = read_json(tmp / (name + "_hf") / "config.json");
    for (const auto& [key, value] : before.items()) {
      INFO(key);
      REQUIRE(after.contains(key));
      CHECK(after[key] == value);
    }
    CHECK(fs::exists(tmp / (name + "_hf") / "generation_config.json"));
    // The writer lays files out as the reference library does: the whole file is byte-identical.
    CHECK(io::read_file(tmp / (name + "_hf") / "model.safetensors") == io::read_file(src / "model.safetensors"));

    // The result is a model genesis loads, with the original's logits.
    auto a = models::load_hf_model(src), b = models::load_hf_model(tmp / (name + "_hf"));
    const Tensor ids = arange(0, 12, 1, {.dtype = DType::i64}).reshape({1, 12});
    CHECK(same_bytes(a->forward(ids), b->forward(ids)));
  }
}

TEST_CASE("convert: bf16 and f16 exports round each f32 weight to nearest even", "[cpu][convert]") {
  TempDir tmp("convert");
  const io::WeightSet original = io::WeightSet::open_directory(fixture("llama"));
  for (const auto& [dtype, decode, label] :
       {std::tuple{DType::bf16, &decode_bf16, "bfloat16"}, std::tuple{DType::f16, &decode_f16, "float16"}}) {
    const fs::path out = tmp / std::string(label);
    io::convert_model(fixture("llama"), out, {.to = "hf", .dtype = dtype});
    CHECK(read_json(out / "config.json")["dtype"] == label);
    const io::WeightSet converted = io::WeightSet::open_directory(out);
    int64_t checked = 0;
    for (const std::string& name : original.names()) {
      const Tensor f32 = original.tensor(name).contiguous(), half = converted.tensor(name).contiguous();
      REQUIRE(half.dtype() == dtype);
      REQUIRE(half.shape() == f32.shape());
      const float* x = f32.data<float>();
      const auto* bits = static_cast<const uint16_t*>(half.data_ptr());
      for (int64_t i = 0; i < f32.numel(); ++i, ++checked) {
        if (!is_round_to_nearest_even(x[i], bits[i], decode))
          FAIL(name << "[" << i << "] = " << x[i] << " -> 0x" << std::hex << bits[i]);
      }
    }
    CHECK(checked > 10000);
  }
  // Ties go to the even neighbour (1 + 2^-8 lies halfway between two bf16 values).
  CHECK(genesis::detail::float_to_bf16_bits(1.0f + 1.0f / 256) == 0x3F80);
  CHECK(genesis::detail::float_to_bf16_bits(1.0f + 3.0f / 256) == 0x3F82);
}

TEST_CASE("convert: tiny --max-shard-size writes an index covering every tensor once", "[cpu][convert]") {
  TempDir tmp("convert");
  const fs::path out = tmp / "sharded";
  const io::ConvertResult result =
      io::convert_model(fixture("qwen2"), out, {.to = "hf", .max_shard_bytes = io::parse_byte_size("20KB")});
  CHECK_FALSE(fs::exists(out / "model.safetensors"));
  const json index = read_json(out / "model.safetensors.index.json");
  const io::WeightSet original = io::WeightSet::open_directory(fixture("qwen2"));
  std::set<std::string> listed, shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    CHECK(listed.insert(name).second);
    shards.insert(file.get<std::string>());
  }
  const std::vector<std::string> names = original.names();
  CHECK(listed == std::set<std::string>(names.begin(), names.end()));
  CHECK(shards.size() > 2);
  uint64_t shard_bytes = 0;
  for (const std::string& shard : shards) {
    const io::SafetensorsFile file(out / shard);
    for (const std::string& name : file.names()) shard_bytes += file.info(name).data_end - file.info(name).data_begin;
  }
  CHECK(index["metadata"]["total_size"].get<uint64_t>() == shard_bytes);
  CHECK(shard_bytes == result.bytes);

  CHECK(io::inspect_model(out / "model.safetensors.index.json")["tensor_count"] == names.size());
  const io::WeightSet loaded = io::WeightSet::open_directory(out);
  CHECK(loaded.sharded());
  for (const std::string& name : original.names()) CHECK(same_bytes(original.tensor(name), loaded.tensor(name)));
  auto a = models::load_hf_model(fixture("qwen2")), b = models::load_hf_model(out);
  const Tensor ids = arange(0, 9, 1, {.dtype = DType::i64}).reshape({1, 9});
  CHECK(same_bytes(a->forward(ids), b->forward(ids)));
  // Sharded sources convert back to one file.
  io::convert_model(out, tmp / "merged", {.to = "genesis"});
  CHECK(fs::exists(tmp / "merged" / "model.safetensors"));
}

TEST_CASE("convert: tied weights are written once", "[cpu][convert]") {
  TempDir tmp("convert");
  // GPT-2's head is always tied; a llama with tie_word_embeddings whose checkpoint still carries lm_head.
  io::convert_model(fixture("gpt2"), tmp / "gpt2", {.to = "hf"});
  CHECK_FALSE(io::WeightSet::open_directory(tmp / "gpt2").contains("lm_head.weight"));
  const fs::path tied = edited_model(tmp, "llama", [](json& c) { c["tie_word_embeddings"] = true; });
  REQUIRE(io::WeightSet::open_directory(tied).contains("lm_head.weight"));
  io::convert_model(tied, tmp / "tied_hf", {.to = "hf"});
  const io::WeightSet out = io::WeightSet::open_directory(tmp / "tied_hf");
  CHECK_FALSE(out.contains("lm_head.weight"));
  CHECK(out.contains("model.embed_tokens.weight"));
  CHECK(read_json(tmp / "tied_hf" / "config.json")["tie_word_embeddings"] == true);
}

TEST_CASE("convert: the layout it checks checkpoints against is the models' own", "[cpu][convert]") {
  std::vector<json> configs;
  for (const std::string name : {"gpt2", "llama", "qwen2", "qwen3"})
    configs.push_back(read_json(fixture(name) / "config.json"));
  json variant = configs[1];  // tied llama with biases and an explicit head_dim
  variant["tie_word_embeddings"] = true;
  variant["attention_bias"] = true;
  variant["head_dim"] = 4;
  configs.push_back(variant);
  variant = configs[0];
  variant["n_inner"] = 48;
  configs.push_back(variant);
  for (const json& config : configs) {
    INFO(config.dump());
    const io::LanguageModelLayout layout = io::language_model_layout(config);
    std::map<std::string, Shape> expected, actual(layout.tensors.begin(), layout.tensors.end());
    for (const NamedTensor& t : models::causal_lm_from_config(config.dump())->state_dict())
      expected.emplace(t.name, t.tensor.shape());
    CHECK(actual == expected);
    CHECK(actual.size() == layout.tensors.size());
    auto model = models::causal_lm_from_config(config.dump());
    for (const char* name : {"lm_head.weight", "transformer.h.0.attn.bias", "model.rotary_emb.inv_freq", "x.weight"})
      CHECK(layout.rebuilt(name) == model->ignores_checkpoint_tensor(name));
  }
}

TEST_CASE("convert: tokenizer files travel with the model unless --model-only", "[cpu][convert]") {
  TempDir tmp("convert");
  const fs::path src = edited_model(tmp, "qwen2", [](json&) {});
  fs::copy_file(fixture("tokenizer_bpe") / "tokenizer.json", src / "tokenizer.json");
  io::convert_model(src, tmp / "genesis", {.to = "genesis"});
  CHECK(io::read_file(tmp / "genesis" / "tokenizer.json") == io::read_file(src / "tokenizer.json"));
  io::convert_model(tmp / "genesis", tmp / "hf", {.to = "hf"});
  CHECK(io::read_file(tmp / "hf" / "tokenizer.json") == io::read_file(src / "tokenizer.json"));
  io::convert_model(src, tmp / "bare", {.to = "hf", .model_only = true});
  CHECK_FALSE(fs::exists(tmp / "bare" / "tokenizer.json"));
  CHECK_FALSE(fs::exists(tmp / "bare" / "generation_config.json"));
  // GPT-2's encoder.json / vocab.bpe are Hugging Face's vocab.json / merges.txt.
  const fs::path gpt2 = edited_model(tmp, "gpt2", [](json&) {});
  write_bytes(gpt2 / "encoder.json", R"({"a": 0})");
  write_bytes(gpt2 / "vocab.bpe", "#version: 0.2\na b\n");
  io::convert_model(gpt2, tmp / "gpt2_hf", {.to = "hf"});
  CHECK(io::read_file(tmp / "gpt2_hf" / "vocab.json") == R"({"a": 0})");
  CHECK(io::read_file(tmp / "gpt2_hf" / "merges.txt") == "#version: 0.2\na b\n");
}

TEST_CASE("convert: configs without transformers 5 keys get both rope forms and architectures", "[cpu][convert]") {
  TempDir tmp("convert");
  const json config = io::hf_config_for({{"model_type", "qwen2"},
                                         {"vocab_size", 96},
                                         {"hidden_size", 32},
                                         {"intermediate_size", 64},
                                         {"num_hidden_layers", 2},
                                         {"num_attention_heads", 4},
                                         {"rope_theta", 1e6}},
                                        DType::bf16);
  CHECK(config["architectures"] == json::array({"Qwen2ForCausalLM"}));
  CHECK(config["rope_theta"] == 1e6);
  CHECK(config["rope_parameters"] == json({{"rope_theta", 1e6}, {"rope_type", "default"}}));
  CHECK(config["num_key_value_heads"] == 4);
  CHECK_FALSE(config.contains("head_dim"));  // implied by hidden_size / num_attention_heads
  CHECK(config["dtype"] == "bfloat16");
  CHECK(io::hf_config_for({{"model_type", "gpt2"}, {"vocab_size", 8}, {"n_embd", 8}, {"n_layer", 1}, {"n_head", 2}},
                          std::nullopt)["architectures"] == json::array({"GPT2LMHeadModel"}));
}

TEST_CASE("inspect: Hugging Face directories and single files, headers only", "[cpu][convert]") {
  const json report = io::inspect_model(fixture("gpt2"));
  CHECK(report["format"] == "huggingface");
  CHECK(report["architecture"] == "gpt2");
  CHECK(report["config"]["n_embd"] == 32);
  CHECK(report["tensor_count"] == 28);
  int64_t parameters = 0;
  for (const json& t : report["tensors"]) {
    CHECK(t["bytes"].get<int64_t>() == t["parameters"].get<int64_t>() * 4);
    parameters += t["parameters"].get<int64_t>();
  }
  CHECK(report["total_parameters"] == parameters);
  CHECK_FALSE(report.contains("training"));
  const json file = io::inspect_model(fixture("gpt2") / "model.safetensors");
  CHECK(file["format"] == "safetensors");
  CHECK(file["architecture"].is_null());
  CHECK(file["total_parameters"] == parameters);
  const std::string text = io::format_inspect_report(report);
  const size_t row = text.find("  transformer.wte.weight ");
  REQUIRE(row != std::string::npos);
  const std::string line = text.substr(row, text.find('\n', row) - row);
  CHECK(line.find(" F32 ") != std::string::npos);
  CHECK(line.find(" [96, 32] ") != std::string::npos);
  CHECK(line.find(" 12,288") != std::string::npos);
}

TEST_CASE("inspect and convert: a training checkpoint of the MLP recipe", "[cpu][convert]") {
  TempDir tmp("convert");
  const RecipeSpec spec =
      load_recipe(source_root() / "recipes/fashion_mnist_mlp.toml", {"model.hidden=[16]", "training.steps=3"});
  auto model = recipe::build_model(spec, kCPU);
  auto optimizer = recipe::build_optimizer(spec, *model);
  sum(model->forward(randn({2, 1, 28, 28}))).backward();
  optimizer->step();
  train::TrainerState state;
  state.step = 3;
  state.optimizer_steps = optimizer->step_count();
  state.optimizer_name = "adamw";
  state.scheduler_name = "cosine";
  const fs::path run = tmp / "run";
  train::save_checkpoint(run / "checkpoints", *model, *optimizer, state, spec.to_toml(), 2);
  io::write_file_atomic(run / "recipe.toml", spec.to_toml());

  const json report = io::inspect_model(run);
  CHECK(report["format"] == "genesis-run");
  CHECK(report["architecture"] == "mlp");
  CHECK(report["config"]["hidden"] == json::array({16}));
  CHECK(report["total_parameters"] == 784 * 16 + 16 + 16 * 10 + 10);
  const json& training = report["training"];
  CHECK(training["step"] == 3);
  CHECK(training["optimizer"]["kind"] == "adamw");
  CHECK(training["optimizer"]["slots"]["exp_avg"] == 4);
  CHECK(training["optimizer"]["slots"]["exp_avg_sq"] == 4);
  CHECK(training["scheduler"]["name"] == "cosine");
  CHECK(training["scheduler"]["total_steps"] == 3);
  CHECK(io::inspect_model(run / "checkpoints")["format"] == "genesis-checkpoint");

  // To "hf": plain safetensors + a small config; to genesis: weights + recipe, no optimizer state.
  io::convert_model(run, tmp / "plain", {.dtype = DType::bf16});
  const json config = read_json(tmp / "plain" / "config.json");
  CHECK(config["genesis_classifier"] == "mlp");
  CHECK(config["dtype"] == "bf16");
  CHECK(io::inspect_model(tmp / "plain")["format"] == "classifier-export");
  io::convert_model(run, tmp / "model_only", {.to = "genesis"});
  CHECK_FALSE(fs::exists(tmp / "model_only" / "optimizer.safetensors"));
  const json model_only = io::inspect_model(tmp / "model_only");
  CHECK(model_only["format"] == "genesis-checkpoint");
  CHECK_FALSE(model_only.contains("training"));
  const io::WeightSet weights = io::WeightSet::open_directory(tmp / "model_only");
  std::vector<NamedTensor> tensors;
  for (const std::string& name : weights.names()) tensors.push_back({name, weights.tensor(name)});
  auto reloaded = recipe::build_model(spec, kCPU);
  reloaded->load_state_dict(tensors);  // strict: every parameter, no other name
  for (const NamedTensor& p : model->state_dict()) CHECK(same_bytes(p.tensor, weights.tensor(p.name)));
}

TEST_CASE("convert and inspect: bad input is a clear error and leaves nothing behind", "[cpu][convert]") {
  TempDir tmp("convert");
  SECTION("a directory of no known format says what was looked for") {
    fs::create_directories(tmp / "junk");
    write_bytes(tmp / "junk" / "notes.txt", "hello");
    CHECK_THROWS_WITH(io::inspect_model(tmp / "junk"), Catch::Contains("looked for") && Catch::Contains("config.json"));
    CHECK_THROWS_AS(io::convert_model(tmp / "junk", tmp / "out", {}), UsageError);
  }
  SECTION("an unsupported model_type lists the supported ones") {
    const fs::path bert = edited_model(tmp, "llama", [](json& c) { c["model_type"] = "bert"; });
    CHECK_THROWS_WITH(io::convert_model(bert, tmp / "out", {}),
                      Catch::Contains("bert") && Catch::Contains("gpt2, llama, qwen2, qwen3"));
    CHECK_THROWS_AS(io::convert_model(bert, tmp / "out", {}), UsageError);
  }
  SECTION("a shard index naming a missing file") {
    io::convert_model(fixture("qwen3"), tmp / "sharded", {.to = "hf", .max_shard_bytes = 30000});
    fs::remove(tmp / "sharded" / "model-00002-of-00005.safetensors");
    CHECK_THROWS_WITH(io::inspect_model(tmp / "sharded"),
                      Catch::Contains("model-00002-of-00005.safetensors") && Catch::Contains("does not exist"));
    CHECK_THROWS_AS(io::convert_model(tmp / "sharded", tmp / "out", {}), FormatError);
  }
  SECTION("a shard holding a tensor the index does not list") {
    io::convert_model(fixture("qwen3"), tmp / "sharded", {.to = "hf", .max_shard_bytes = 30000});
    json index = read_json(tmp / "sharded" / "model.safetensors.index.json");
    index["weight_map"].erase("model.norm.weight");
    io::write_file_atomic(tmp / "sharded" / "model.safetensors.index.json", index.dump());
    CHECK_THROWS_WITH(io::inspect_model(tmp / "sharded"), Catch::Contains("does not list"));
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00005.safetensors";
    io::write_file_atomic(tmp / "sharded" / "model.safetensors.index.json", index.dump());
    const io::SafetensorsFile first(tmp / "sharded" / "model-00001-of-00005.safetensors");
    if (!first.contains("model.norm.weight"))
      CHECK_THROWS_WITH(io::inspect_model(tmp / "sharded"), Catch::Contains("is not in its shard"));
  }
  SECTION("safetensors headers: too large, overlapping, past the end, unknown dtype") {
    const fs::path file = tmp / "bad.safetensors";
    std::string huge(8, '\0');
    const uint64_t size = 200'000'000;
    std::memcpy(huge.data(), &size, 8);
    write_bytes(file, huge + "{}");
    CHECK_THROWS_WITH(io::inspect_model(file), Catch::Contains("exceeds the limit"));
    write_raw_safetensors(file,
                          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          12);
    CHECK_THROWS_WITH(io::inspect_model(file), Catch::Contains("overlaps"));
    write_raw_safetensors(file, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    CHECK_THROWS_WITH(io::inspect_model(file), Catch::Contains("past the end"));
    write_raw_safetensors(file, R"({"a":{"dtype":"F12","shape":[4],"data_offsets":[0,16]}})", 16);
    CHECK_THROWS_WITH(io::inspect_model(file), Catch::Contains("unknown dtype \"F12\""));
    // The same checks guard model directories.
    fs::create_directories(tmp / "model");
    fs::copy_file(fixture("llama") / "config.json", tmp / "model" / "config.json");
    fs::copy_file(file, tmp / "model" / "model.safetensors");
    CHECK_THROWS_AS(io::convert_model(tmp / "model", tmp / "out", {}), FormatError);
  }
  SECTION("a checkpoint whose recipe names no model convert knows is inspected but not converted") {
    fs::create_directories(tmp / "ckpt");
    io::save_safetensors(tmp / "ckpt" / "model.safetensors", {{"w", ones({2, 3})}}, {{"format", "genesis"}});
    io::write_file_atomic(tmp / "ckpt" / "trainer.json", R"({"step": 4, "optimizer": "sgd"})");
    io::write_file_atomic(tmp / "ckpt" / "recipe.toml", "[model]\nname = \"transformer\"\n");
    const json report = io::inspect_model(tmp / "ckpt");
    CHECK(report["format"] == "genesis-checkpoint");
    CHECK(report["architecture"].is_null());
    CHECK(report["training"]["step"] == 4);
    CHECK(report["total_parameters"] == 6);
    CHECK_THROWS_WITH(io::convert_model(tmp / "ckpt", tmp / "out", {}), Catch::Contains("config.json"));
  }
  SECTION("weights that do not fit the config") {
    const fs::path wide = edited_model(tmp, "qwen2", [](json& c) { c["hidden_size"] = 48; });
    CHECK_THROWS_WITH(io::convert_model(wide, tmp / "out", {}), Catch::Contains("mis-shaped"));
  }
  SECTION("an existing destination is refused and left untouched unless --overwrite") {
    fs::create_directories(tmp / "out");
    write_bytes(tmp / "out" / "keep.txt", "mine");
    CHECK_THROWS_WITH(io::convert_model(fixture("gpt2"), tmp / "out", {}), Catch::Contains("--overwrite"));
    CHECK_THROWS_AS(io::convert_model(fixture("gpt2"), tmp / "out", {}), UsageError);
    CHECK(io::read_file(tmp / "out" / "keep.txt") == "mine");
    io::convert_model(fixture("gpt2"), tmp / "out", {.overwrite = true});
    CHECK_FALSE(fs::exists(tmp / "out" / "keep.txt"));
    CHECK(fs::exists(tmp / "out" / "model.safetensors"));
    CHECK_THROWS_AS(io::convert_model(tmp / "out", tmp / "out", {.overwrite = true}), UsageError);
  }
  SECTION("byte sizes") {
    CHECK(io::parse_byte_size("2GB") == 2'000'000'000);
    CHECK(io::parse_byte_size("1GiB") == 1ull << 30);
    CHECK(io::parse_byte_size("500mb") == 500'000'000);
    CHECK(io::parse_byte_size("4096") == 4096);
    for (const char* bad : {"", "GB", "2XB", "0", "-1GB", "1.5GB"})
      CHECK_THROWS_AS(io::parse_byte_size(bad), UsageError);
  }
  // Failed conversions leave neither the destination nor a temporary directory beside it.
  for (const auto& entry : fs::directory_iterator(tmp.path())) {
    const std::string name = entry.path().filename().string();
    CHECK(name.find(".tmp-") == std::string::npos);
    CHECK((name != "out" || fs::exists(entry.path() / "keep.txt") || fs::exists(entry.path() / "model.safetensors")));
  }
}
