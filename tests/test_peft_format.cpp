// PEFT's LoRA adapter format (libgenesis/io/peft.h): write -> read round trips, the files as PEFT
// reads them (adapter_config.json's keys, the safetensors names with PEFT's prefix), the destination
// rules, and a one-line error naming the problem for each adapter genesis cannot take.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "libgenesis/convert/convert.h"
#include "libgenesis/io/peft.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/safetensors.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.numel() * a.element_size()) == 0;
}

// A LoRA pair of rank r for a module mapping `in` features to `out`.
void add_pair(std::vector<NamedTensor>& tensors, const std::string& module, int64_t r, int64_t in, int64_t out,
              DType dtype = DType::f32) {
  tensors.push_back({module + ".lora_A.weight", rand_values({r, in}, dtype)});
  tensors.push_back({module + ".lora_B.weight", rand_values({out, r}, dtype)});
}

// A Llama-style adapter: q_proj (f32) and v_proj (bf16) of two layers, hidden 16, 2 kv heads of 4.
io::PeftAdapter llama_adapter() {
  io::PeftAdapter adapter;
  adapter.options = {.r = 4, .alpha = 8.0, .dropout = 0.05, .targets = {"q_proj", "v_proj"}, .use_rslora = true};
  adapter.base_model = "tiny/llama";
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
    add_pair(adapter.tensors, prefix + "q_proj", 4, 16, 16);
    add_pair(adapter.tensors, prefix + "v_proj", 4, 16, 8, DType::bf16);
  }
  return adapter;
}

json read_json(const fs::path& path) {
  return json::parse(io::read_file(path));
}

void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json config = read_json(dir / io::kPeftConfigFile);
  edit(config);
  io::write_file_atomic(dir / io::kPeftConfigFile, config.dump(2));
}

// Replaces the adapter's weights with `tensors`, stored under exactly these names.
void replace_weights(const fs::path& dir, const io::NamedTensors& tensors) {
  io::save_safetensors(dir / io::kPeftWeightsFile, tensors, {{"format", "pt"}});
}

// A valid adapter written to a fresh directory under `tmp`.
fs::path written(const TempDir& tmp, const std::string& name, const io::PeftAdapter& adapter = llama_adapter()) {
  const fs::path dir = tmp / name;
  io::write_peft_adapter(dir, adapter);
  return dir;
}

// The message of the ErrorT that `action` throws; checks it is one line and names `names` (a file).
template <class ErrorT>
std::string error_of(const std::function<void()>& action, const std::string& names = "") {
  try {
    action();
  } catch (const ErrorT& e) {
    const std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);
    if (!names.empty()) CHECK_THAT(message, Contains(names));
    return message;
  }
  FAIL("no error of the expected type");
  return "";
}

template <class ErrorT>
std::string read_error(const fs::path& dir, const std::string& file) {
  return error_of<ErrorT>([&] { io::read_peft_adapter(dir); }, (dir / file).string());
}

// tests/fixtures/peft/<type>, made by PEFT (scripts/reference/make_peft_fixture.py); empty when missing.
fs::path peft_fixture(const std::string& type) {
  for (const char* root :
       std::initializer_list<const char*>{std::getenv("GENESIS_SOURCE_DIR"), GENESIS_SOURCE_DIR, "."}) {
    const fs::path dir = fs::path(root ? root : "") / "tests/fixtures/peft" / type;
    if (root && fs::exists(dir / "adapter" / io::kPeftConfigFile)) return dir;
  }
  return {};
}

}  // namespace

TEST_CASE("peft: write -> read keeps names, shapes, values, dtypes and options", "[cpu][peft]") {
  TempDir tmp("peft");
  const io::PeftAdapter adapter = llama_adapter();
  const fs::path dir = written(tmp, "adapter", adapter);
  // Written through a temporary sibling: nothing else is left beside it.
  CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()) == 1);

  const io::PeftAdapter back = io::read_peft_adapter(dir);
  CHECK(back.options == adapter.options);
  CHECK(back.base_model == "tiny/llama");
  CHECK_FALSE(back.fan_in_fan_out);
  CHECK(back.target_modules_regex.empty());
  REQUIRE(back.tensors.size() == adapter.tensors.size());
  for (const NamedTensor& expected : adapter.tensors) {
    INFO(expected.name);
    auto it = std::find_if(back.tensors.begin(), back.tensors.end(),
                           [&](const NamedTensor& t) { return t.name == expected.name; });
    REQUIRE(it != back.tensors.end());
    CHECK(same_bytes(it->tensor, expected.tensor));
  }
  CHECK(std::is_sorted(back.tensors.begin(), back.tensors.end(),
                       [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; }));

  // The files as PEFT reads them.
  const io::SafetensorsFile weights(dir / io::kPeftWeightsFile);
  CHECK(weights.metadata().at("format") == "pt");
  CHECK(weights.names().size() == adapter.tensors.size());
  for (const std::string& name : weights.names())
    CHECK_THAT(name, Catch::Matchers::StartsWith("base_model.model.model.layers."));
  CHECK(weights.contains("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"));
  CHECK(weights.info("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight").dtype == "BF16");
  CHECK(weights.info("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").shape == Shape{4, 16});
  const json config = read_json(dir / io::kPeftConfigFile);
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["task_type"] == "CAUSAL_LM");
  CHECK(config["r"] == 4);
  CHECK(config["lora_alpha"].is_number_integer());
  CHECK(config["lora_alpha"] == 8);
  CHECK(config["lora_dropout"] == 0.05);
  CHECK(config["target_modules"] == json({"q_proj", "v_proj"}));
  CHECK(config["use_rslora"] == true);
  CHECK(config["bias"] == "none");
  CHECK(config["fan_in_fan_out"] == false);
  CHECK(config["base_model_name_or_path"] == "tiny/llama");
  CHECK(config["init_lora_weights"] == true);
  CHECK(config["inference_mode"] == true);
  CHECK(config["use_dora"] == false);
  CHECK(config["rank_pattern"] == json::object());
  CHECK(config["alpha_pattern"] == json::object());
  for (const char* key : {"modules_to_save", "layers_to_transform", "layers_pattern", "revision"}) {
    INFO(key);
    REQUIRE(config.contains(key));
    CHECK(config[key].is_null());
  }
}

TEST_CASE("peft: GPT-2's Conv1D adapters, all-linear, gaussian init, fractional alpha", "[cpu][peft]") {
  TempDir tmp("peft");
  io::PeftAdapter adapter;
  adapter.options = {.r = 2, .alpha = 3.5, .targets = {"all-linear"}, .init = "gaussian"};
  adapter.fan_in_fan_out = true;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string h = "transformer.h." + std::to_string(layer) + ".";
    add_pair(adapter.tensors, h + "attn.c_attn", 2, 8, 24);
    add_pair(adapter.tensors, h + "attn.c_proj", 2, 8, 8);
    add_pair(adapter.tensors, h + "mlp.c_fc", 2, 8, 32);
    add_pair(adapter.tensors, h + "mlp.c_proj", 2, 32, 8);
  }
  const fs::path dir = written(tmp, "gpt2", adapter);
  const json config = read_json(dir / io::kPeftConfigFile);
  // PEFT saves "all-linear" as the names of the layers it adapted.
  CHECK(config["target_modules"] == json({"c_attn", "c_fc", "c_proj"}));
  CHECK(config["fan_in_fan_out"] == true);
  CHECK(config["lora_alpha"] == 3.5);
  CHECK(config["init_lora_weights"] == "gaussian");
  CHECK(config["base_model_name_or_path"].is_null());

  const io::PeftAdapter back = io::read_peft_adapter(dir);
  CHECK(back.fan_in_fan_out);
  CHECK(back.options.targets == std::vector<std::string>{"c_attn", "c_fc", "c_proj"});
  CHECK(back.options.alpha == 3.5);
  CHECK(back.options.init == "gaussian");
  CHECK(back.base_model.empty());
  CHECK(back.tensors.size() == 16);
}

TEST_CASE("peft: the destination: new, empty, non-empty without and with overwrite, a file", "[cpu][peft]") {
  TempDir tmp("peft");
  const io::PeftAdapter adapter = llama_adapter();
  fs::create_directories(tmp / "empty");
  io::write_peft_adapter(tmp / "empty", adapter);
  CHECK(io::read_peft_adapter(tmp / "empty").tensors.size() == adapter.tensors.size());

  const std::string message =
      error_of<UsageError>([&] { io::write_peft_adapter(tmp / "empty", adapter); }, (tmp / "empty").string());
  CHECK_THAT(message, Contains("not empty") && Contains("--overwrite"));

  io::write_file_atomic(tmp / "empty" / "README.md", "mine\n");
  io::PeftAdapter other = llama_adapter();
  other.options.alpha = 16.0;
  io::write_peft_adapter(tmp / "empty", other, /*overwrite=*/true);
  CHECK(io::read_peft_adapter(tmp / "empty").options.alpha == 16.0);
  CHECK(io::read_file(tmp / "empty" / "README.md") == "mine\n");
  for (const auto& entry : fs::directory_iterator(tmp / "empty"))
    CHECK_THAT(entry.path().filename().string(), !Contains(".tmp"));

  io::write_file_atomic(tmp / "file", "x");
  error_of<UsageError>([&] { io::write_peft_adapter(tmp / "file", adapter, true); }, "not a directory");
}

TEST_CASE("peft: write refuses adapters PEFT could not load", "[cpu][peft]") {
  TempDir tmp("peft");
  auto refused = [&](const std::function<void(io::PeftAdapter&)>& edit, const std::string& expected) {
    io::PeftAdapter adapter = llama_adapter();
    edit(adapter);
    CHECK_THAT(error_of<ValueError>([&] { io::write_peft_adapter(tmp / "out", adapter); }), Contains(expected));
    CHECK_FALSE(fs::exists(tmp / "out"));
  };
  refused([](io::PeftAdapter& a) { a.tensors[0].name = "model.layers.0.self_attn.q_proj.weight"; },
          "is not a LoRA weight");
  refused([](io::PeftAdapter& a) { a.tensors[0].name = "base_model.model." + a.tensors[0].name; }, "PEFT's prefix");
  refused([](io::PeftAdapter& a) { a.tensors.pop_back(); }, "has lora_A but no lora_B");
  refused([](io::PeftAdapter& a) { a.tensors[1].tensor = rand_values({16, 3}); }, "must have the same rank");
  refused([](io::PeftAdapter& a) { a.options.r = 8; }, "r is 8 but module");
  refused([](io::PeftAdapter& a) { a.options.targets = {"q_proj"}; }, "no entry of target_modules");
  refused([](io::PeftAdapter& a) { a.options.dropout = 1.0; }, "dropout");
  refused([](io::PeftAdapter& a) { a.tensors.clear(); }, "no LoRA tensors");
  refused([](io::PeftAdapter& a) { a.tensors[0].tensor = Tensor(); }, "undefined");
}

TEST_CASE("peft: PEFT's in-memory names (lora_A.default.weight) are read as genesis names", "[cpu][peft]") {
  TempDir tmp("peft");
  const io::PeftAdapter adapter = llama_adapter();
  const fs::path dir = written(tmp, "adapter", adapter);
  io::NamedTensors renamed;
  for (const NamedTensor& t : adapter.tensors) {
    std::string name = "base_model.model." + t.name;
    name.insert(name.size() - std::string(".weight").size(), ".default");
    renamed.emplace_back(name, t.tensor);
  }
  replace_weights(dir, renamed);
  const io::PeftAdapter back = io::read_peft_adapter(dir);
  REQUIRE(back.tensors.size() == adapter.tensors.size());
  CHECK(back.tensors[0].name == "model.layers.0.self_attn.q_proj.lora_A.weight");
  for (const NamedTensor& t : back.tensors) CHECK_THAT(t.name, !Contains("default"));
}

TEST_CASE("peft: target_modules as a regular expression, \"all-linear\" or null", "[cpu][peft]") {
  TempDir tmp("peft");
  const fs::path dir = written(tmp, "adapter");
  edit_config(dir, [](json& c) { c["target_modules"] = ".*layers\\.[01]\\.self_attn\\.(q|v)_proj"; });
  const io::PeftAdapter regex = io::read_peft_adapter(dir);
  CHECK(regex.target_modules_regex == ".*layers\\.[01]\\.self_attn\\.(q|v)_proj");
  // The modules the expression selected, by full name.
  CHECK(regex.options.targets ==
        std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                 "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"});
  // Written back as the same string.
  io::write_peft_adapter(tmp / "again", regex);
  CHECK(read_json(tmp / "again" / io::kPeftConfigFile)["target_modules"] == regex.target_modules_regex);

  edit_config(dir, [](json& c) { c["target_modules"] = "all-linear"; });
  CHECK(io::read_peft_adapter(dir).options.targets == std::vector<std::string>{"all-linear"});
  edit_config(dir, [](json& c) { c["target_modules"] = nullptr; });
  CHECK(io::read_peft_adapter(dir).options.targets == std::vector<std::string>{"q_proj", "v_proj"});
  // Keys PEFT fills with its defaults when absent.
  edit_config(dir, [](json& c) { c = json{{"peft_type", "LORA"}, {"r", 4}}; });
  const io::PeftAdapter minimal = io::read_peft_adapter(dir);
  CHECK(minimal.options.alpha == 8.0);
  CHECK(minimal.options.dropout == 0.0);
  CHECK_FALSE(minimal.options.use_rslora);
}

TEST_CASE("peft: read_peft_config reads the config alone, as read_peft_adapter does", "[cpu][peft]") {
  TempDir tmp("peft");
  const fs::path dir = written(tmp, "adapter");
  const io::PeftAdapter whole = io::read_peft_adapter(dir);
  std::set<std::string> modules;
  for (const NamedTensor& t : whole.tensors) modules.insert(t.name.substr(0, t.name.rfind(".lora_")));
  fs::remove(dir / io::kPeftWeightsFile);  // the config is all it reads
  const io::PeftAdapter config = io::read_peft_config(dir, modules);
  CHECK(config.tensors.empty());
  CHECK(config.options.r == whole.options.r);
  CHECK(config.options.alpha == whole.options.alpha);
  CHECK(config.options.targets == whole.options.targets);
  CHECK(config.base_model == whole.base_model);
  // Targets that need the adapted modules: a regular expression gives their full names.
  edit_config(dir, [](json& c) { c["target_modules"] = ".*_proj"; });
  CHECK(io::read_peft_config(dir, {"model.layers.0.self_attn.q_proj"}).options.targets ==
        std::vector<std::string>{"model.layers.0.self_attn.q_proj"});
  // A target list must match every adapted module.
  edit_config(dir, [](json& c) { c["target_modules"] = json::array({"q_proj"}); });
  CHECK_THAT(error_of<FormatError>([&] { io::read_peft_config(dir, {"model.layers.0.mlp.up_proj"}); }),
             Contains("'model.layers.0.mlp.up_proj' has adapter weights but no entry of target_modules"));
  CHECK_THAT(error_of<IoError>([&] { io::read_peft_config(tmp / "none", {}); }),
             Contains("has no adapter_config.json"));
}

TEST_CASE("peft: each adapter genesis cannot take is a one-line error naming the problem and the file", "[cpu][peft]") {
  TempDir tmp("peft");
  const std::string config = io::kPeftConfigFile, weights = io::kPeftWeightsFile;

  SECTION("missing files") {
    fs::create_directories(tmp / "none");
    CHECK_THAT(error_of<IoError>([&] { io::read_peft_adapter(tmp / "none"); }, (tmp / "none").string()),
               Contains("has no adapter_config.json"));
    const fs::path dir = written(tmp, "no_weights");
    fs::remove(dir / weights);
    CHECK_THAT(error_of<IoError>([&] { io::read_peft_adapter(dir); }), Contains("has no adapter_model.safetensors"));
    io::write_file_atomic(dir / "adapter_model.bin", "pickle");
    CHECK_THAT(error_of<IoError>([&] { io::read_peft_adapter(dir); }), Contains("adapter_model.bin"));
    CHECK_THAT(error_of<IoError>([&] { io::read_peft_adapter(tmp / "missing"); }), Contains("not a directory"));
  }

  SECTION("the config") {
    const fs::path dir = written(tmp, "adapter");
    auto with = [&](const std::function<void(json&)>& edit) {
      io::write_peft_adapter(dir, llama_adapter(), /*overwrite=*/true);
      edit_config(dir, edit);
    };
    with([](json& c) { c["peft_type"] = "IA3"; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config), Contains("PEFT IA3 adapter") && Contains("LoRA"));
    with([](json& c) { c.erase("peft_type"); });
    CHECK_THAT(read_error<FormatError>(dir, config), Contains("no peft_type"));
    with([](json& c) { c["use_dora"] = true; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config), Contains("DoRA") && Contains("not supported yet"));
    with([](json& c) { c["rank_pattern"] = {{"q_proj", 8}}; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config), Contains("rank_pattern") && Contains("not supported yet"));
    with([](json& c) { c["alpha_pattern"] = {{"v_proj", 32}}; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config),
               Contains("alpha_pattern") && Contains("not supported yet"));
    with([](json& c) { c["bias"] = "lora_only"; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config), Contains("bias \"lora_only\""));
    with([](json& c) { c["modules_to_save"] = {"lm_head"}; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config), Contains("modules_to_save [\"lm_head\"]"));
    with([](json& c) { c["layers_to_transform"] = {0}; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config), Contains("layers_to_transform"));
    with([](json& c) { c["init_lora_weights"] = "pissa_niter_4"; });
    CHECK_THAT(read_error<NotImplementedError>(dir, config), Contains("pissa_niter_4"));
    with([](json& c) { c["r"] = 8; });
    CHECK_THAT(read_error<FormatError>(dir, config), Contains("r is 8 but module") && Contains("rank 4"));
    with([](json& c) { c["r"] = "4"; });
    CHECK_THAT(read_error<FormatError>(dir, config), Contains("r is \"4\", not an integer"));
    with([](json& c) { c["target_modules"] = {"q_proj"}; });
    CHECK_THAT(read_error<FormatError>(dir, config), Contains("v_proj' has adapter weights but no entry"));
    with([](json& c) { c["target_modules"] = json::array(); });
    CHECK_THAT(read_error<FormatError>(dir, config), Contains("target_modules is []"));
    io::write_file_atomic(dir / config, "{\"peft_type\": ");
    CHECK_THAT(read_error<FormatError>(dir, config), Contains("invalid JSON"));
  }

  SECTION("the tensors") {
    const fs::path dir = written(tmp, "adapter");
    const Tensor a = rand_values({4, 16}), b = rand_values({16, 4});
    const std::string m = "base_model.model.model.layers.0.self_attn.q_proj";
    auto weights_with = [&](const io::NamedTensors& tensors) {
      io::write_peft_adapter(dir, llama_adapter(), /*overwrite=*/true);
      edit_config(dir, [](json& c) { c["target_modules"] = {"q_proj"}; });
      replace_weights(dir, tensors);
    };
    weights_with({{m + ".lora_A.weight", a}, {m + ".lora_B.weight", b}});
    CHECK(io::read_peft_adapter(dir).tensors.size() == 2);

    weights_with({{m + ".lora_A.weight", a}, {m + ".lora_B.weight", b}, {"base_model.model.lm_head.weight", b}});
    CHECK_THAT(read_error<FormatError>(dir, weights),
               Contains("'base_model.model.lm_head.weight' is not a LoRA weight"));
    weights_with({{m + ".lora_A.weight", a}, {m + ".lora_B.weight", b}, {m + ".lora_magnitude_vector", b}});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("lora_magnitude_vector' is not a LoRA weight"));
    weights_with({{"model.layers.0.self_attn.q_proj.lora_A.weight", a}, {m + ".lora_B.weight", b}});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("is not a LoRA weight (PEFT names them base_model"));
    weights_with({{m + ".lora_A.weight", a}});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("has lora_A but no lora_B weight"));
    weights_with({{m + ".lora_A.weight", a}, {m + ".lora_B.weight", rand_values({16, 2})}});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("lora_A is [4, 16] and lora_B [16, 2]"));
    weights_with({{m + ".lora_A.weight", a}, {m + ".lora_B.weight", b}, {m + ".lora_A.default.weight", a}});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("appears twice"));
    weights_with({{m + ".lora_A.weight", a}, {m + ".lora_B.weight", rand_values({16, 4}, DType::i64, 0, 3)}});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("is I64"));
    weights_with({{m + ".lora_A.weight", rand_values({4}, DType::f32)}, {m + ".lora_B.weight", b}});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("floating-point matrix"));
    weights_with({});
    CHECK_THAT(read_error<FormatError>(dir, weights), Contains("no LoRA tensors"));
  }
}

TEST_CASE("peft: the adapters PEFT saved (tests/fixtures/peft) fit their base models and are written back the same",
          "[cpu][peft]") {
  TempDir tmp("peft");
  for (const std::string type : {"llama", "qwen2", "gpt2"}) {
    INFO(type);
    const fs::path dir = peft_fixture(type);
    if (dir.empty()) {
      WARN("skipped: tests/fixtures/peft/" << type
                                           << " does not exist yet (python3 scripts/reference/make_peft_fixture.py)");
      continue;
    }
    const bool gpt2 = type == "gpt2";
    const io::PeftAdapter adapter = io::read_peft_adapter(dir / "adapter");
    CHECK(adapter.options.r == 4);
    CHECK(adapter.options.alpha == 8.0);
    CHECK(adapter.options.dropout == 0.0);
    CHECK_FALSE(adapter.options.use_rslora);
    std::vector<std::string> targets = adapter.options.targets;  // PEFT writes them from a set
    std::sort(targets.begin(), targets.end());
    CHECK(targets == (gpt2 ? std::vector<std::string>{"c_attn", "c_fc", "c_proj"}
                           : std::vector<std::string>{"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj",
                                                      "v_proj"}));
    CHECK(adapter.fan_in_fan_out == gpt2);
    CHECK(adapter.base_model == "tests/fixtures/peft/" + type + "/base");
    CHECK(adapter.tensors.size() == (gpt2 ? 16u : 28u));

    // Each adapter sits beside a base weight [out, in] (GPT-2's Conv1D: [in, out]) as A [r, in], B [out, r].
    const io::LanguageModelLayout layout = io::language_model_layout(read_json(dir / "base/config.json"));
    const std::map<std::string, Shape> base(layout.tensors.begin(), layout.tensors.end());
    for (const NamedTensor& t : adapter.tensors) {
      INFO(t.name);
      const bool is_a = t.name.ends_with(".lora_A.weight");
      const std::string module = t.name.substr(0, t.name.size() - std::string(".lora_A.weight").size());
      REQUIRE(base.count(module + ".weight") == 1);
      const Shape& w = base.at(module + ".weight");
      const int64_t out = gpt2 ? w[1] : w[0], in = gpt2 ? w[0] : w[1];
      CHECK(t.tensor.shape() == (is_a ? Shape{4, in} : Shape{out, 4}));
    }

    // Written back by genesis: the weights byte for byte, and every key genesis writes as PEFT wrote it.
    io::write_peft_adapter(tmp / type, adapter);
    CHECK(io::read_file(tmp / type / io::kPeftWeightsFile) == io::read_file(dir / "adapter" / io::kPeftWeightsFile));
    const json ours = read_json(tmp / type / io::kPeftConfigFile);
    const json theirs = read_json(dir / "adapter" / io::kPeftConfigFile);
    for (const auto& [key, value] : ours.items()) {
      INFO(key);
      REQUIRE(theirs.contains(key));
      CHECK(theirs[key] == value);
    }
  }
}
