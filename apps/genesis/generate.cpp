// genesis generate (--model HF_DIR | --checkpoint DIR) (--prompt TEXT | --prompt-ids "ID ...")
//   [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--device D]
//   [--tokenizer PATH] [--ids] [--dtype f32|bf16|fp16]
// Streams the continuation to stdout as it is generated: decoded text (bytes released once
// their UTF-8 characters are complete), or token ids with --ids. Stops at EOS.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/genesis/commands.h"
#include "libgenesis/autograd/autocast.h"
#include "libgenesis/core/error.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/models/sampling.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"

namespace genesis::cli {

namespace {

namespace fs = std::filesystem;

struct GenerateArgs {
  std::string model_dir, checkpoint, tokenizer, prompt, prompt_ids, device = "cpu";
  std::string dtype;  // autocast dtype; "" = the checkpoint recipe's amp.dtype (f32 for --model)
  int64_t max_new_tokens = 64;
  models::SamplingOptions sampling;
  uint64_t seed = 0;
  bool print_ids = false;
  bool quiet = false;  // no closing tokens/s line on stderr
};

// A model ready to generate, with what it was trained with.
struct LoadedModel {
  std::shared_ptr<models::CausalLM> model;
  std::optional<data::Tokenizer> tokenizer;
  std::vector<int64_t> eos_ids;  // from config.json / generation_config.json
  std::optional<DType> autocast;  // the training recipe's amp.dtype (checkpoints)
};

// eos_token_id of a Hugging Face JSON file: a number, a list of numbers, or absent/null.
std::vector<int64_t> eos_ids_of(const fs::path& file) {
  if (!fs::exists(file)) return {};
  const nlohmann::json j = nlohmann::json::parse(io::read_file(file), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) return {};
  const nlohmann::json& eos = j["eos_token_id"];
  std::vector<int64_t> ids;
  if (eos.is_number_integer()) ids.push_back(eos.get<int64_t>());
  if (eos.is_array())
    for (const auto& id : eos)
      if (id.is_number_integer()) ids.push_back(id.get<int64_t>());
  return ids;
}

std::optional<data::Tokenizer> tokenizer_in(const fs::path& dir) {
  if (data::Tokenizer::found_in(dir)) return data::Tokenizer::load(dir);
  return std::nullopt;
}

LoadedModel load_from_hf(const fs::path& dir, Device device) {
  GENESIS_CHECK(fs::exists(dir), UsageError, "--model ", dir.string(), " does not exist");
  LoadedModel m;
  m.model = models::load_hf_model(dir);
  m.model->to(device);
  m.tokenizer = tokenizer_in(dir);
  m.eos_ids = eos_ids_of(dir / "generation_config.json");
  if (m.eos_ids.empty()) m.eos_ids = eos_ids_of(dir / "config.json");
  return m;
}

// A genesis run directory, its checkpoints/ directory, or one checkpoint: the model is rebuilt
// from the checkpoint's recipe.toml and its weights loaded; the recipe's tokenizer comes along.
LoadedModel load_from_checkpoint(const fs::path& path, Device device) {
  GENESIS_CHECK(fs::exists(path), UsageError, "--checkpoint ", path.string(), " does not exist");
  const fs::path dir = io::resolve_checkpoint(fs::exists(path / "checkpoints") ? path / "checkpoints" : path);
  GENESIS_CHECK(fs::exists(dir / "recipe.toml"), UsageError, "--checkpoint ", dir.string(),
                " has no recipe.toml (a genesis checkpoint directory is expected)");
  RecipeSpec spec = parse_recipe(io::read_file(dir / "recipe.toml"), (dir / "recipe.toml").string());
  GENESIS_CHECK(spec.model.is_language_model(), UsageError, "--checkpoint ", dir.string(), " holds a ", spec.model.name,
                " model, not a language model");
  LoadedModel m;
  if (spec.model.init_from.empty()) {
    m.model = std::dynamic_pointer_cast<models::CausalLM>(recipe::build_model(spec, kCPU));
  } else {
    // A fine-tuned run: the architecture is init_from's config.json, the weights the checkpoint's.
    const fs::path config = fs::path(spec.model.init_from) / "config.json";
    GENESIS_CHECK(fs::exists(config), UsageError, "--checkpoint ", dir.string(), " was fine-tuned from ",
                  spec.model.init_from, ", whose config.json is gone (it defines the architecture)");
    m.model = models::causal_lm_from_config(io::read_file(config));
  }
  train::load_checkpoint(dir, *m.model, nullptr);
  m.model->to(device);
  m.autocast = recipe::amp_dtype(spec);
  if (spec.data.name == "tokens" && fs::exists(spec.data.tokenizer))
    m.tokenizer = data::Tokenizer::load(spec.data.tokenizer);
  return m;
}

std::vector<int64_t> parse_prompt_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while ((pos = text.find_first_not_of(" \t\r\n,", pos)) != std::string::npos) {
    size_t end = text.find_first_of(" \t\r\n,", pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    GENESIS_CHECK(word.find_first_not_of("0123456789") == std::string::npos && word.size() <= 18, UsageError,
                  "--prompt-ids: '", word, "' is not a token id (expected non-negative integers separated by spaces)");
    ids.push_back(std::stoll(word));
    pos = end;
  }
  return ids;
}

// The autocast dtype generation runs under: --dtype, else what the checkpoint trained with.
std::optional<DType> generation_autocast(const std::string& flag, const LoadedModel& m, Device device) {
  std::optional<DType> dtype = m.autocast;
  if (flag == "f32") dtype = std::nullopt;
  if (flag == "bf16") dtype = DType::bf16;
  if (flag == "fp16") dtype = DType::f16;
  GENESIS_CHECK(dtype != DType::f16 || !device.is_cpu(), UsageError,
                "--dtype fp16 runs on CUDA only; use --dtype bf16 (or f32) on the CPU");
  return dtype;
}

int run_generate(const GenerateArgs& a) {
  models::check_sampling_options(a.sampling);
  const Device device = recipe::resolve_device(a.device);
  LoadedModel m = a.model_dir.empty() ? load_from_checkpoint(a.checkpoint, device) : load_from_hf(a.model_dir, device);
  AutocastGuard autocast(generation_autocast(a.dtype, m, device));
  if (!a.tokenizer.empty()) m.tokenizer = data::Tokenizer::load(a.tokenizer);
  const bool text_out = !a.print_ids;
  GENESIS_CHECK(!a.prompt.empty() || !a.prompt_ids.empty(), UsageError,
                "give --prompt TEXT or --prompt-ids \"ID ID ...\"");
  GENESIS_CHECK(m.tokenizer || (a.prompt.empty() && !text_out), UsageError, "no tokenizer found for ",
                a.model_dir.empty() ? a.checkpoint : a.model_dir, ": pass --tokenizer PATH",
                a.prompt.empty() ? " or print ids with --ids" : " or give --prompt-ids with --ids");
  std::vector<int64_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_prompt_ids(a.prompt_ids);
  } else {
    for (data::TokenId id : m.tokenizer->encode(a.prompt)) prompt.push_back(id);
  }
  GENESIS_CHECK(!prompt.empty(), UsageError, "the prompt is empty");
  for (int64_t id : prompt)
    GENESIS_CHECK(id < m.model->vocab_size(), UsageError, "prompt token id ", id,
                  " is outside the model's vocabulary [0, ", m.model->vocab_size(), ")");
  GENESIS_CHECK(static_cast<int64_t>(prompt.size()) < m.model->max_positions(), UsageError, "the prompt of ",
                prompt.size(), " tokens does not fit the model's context of ", m.model->max_positions(),
                " positions (shorten it)");
  if (m.eos_ids.empty() && m.tokenizer) {
    if (auto eos = m.tokenizer->token_to_id("<|endoftext|>")) m.eos_ids.push_back(*eos);
  }
  const int64_t room = m.model->max_positions() - static_cast<int64_t>(prompt.size());
  if (a.max_new_tokens > room)
    std::cerr << "genesis: note: generating " << room << " tokens, what the model's context of "
              << m.model->max_positions() << " positions leaves after the prompt\n";

  models::TokenSampler sampler(a.sampling, a.seed);
  models::Utf8Stream utf8;
  bool first = true;
  auto emit = [&](int64_t token) {
    if (text_out) {
      if (token >= static_cast<int64_t>(m.tokenizer->vocab_size())) return;  // model rows beyond the tokenizer
      const std::string bytes = utf8.push(m.tokenizer->token_bytes(static_cast<data::TokenId>(token)));
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    } else {
      std::fprintf(stdout, first ? "%lld" : " %lld", static_cast<long long>(token));
    }
    first = false;
    std::fflush(stdout);
  };
  int64_t generated = 0;
  const auto start = std::chrono::steady_clock::now();
  models::generate(*m.model, prompt, a.max_new_tokens, sampler, m.eos_ids, [&](int64_t token) {
    ++generated;
    emit(token);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string rest = utf8.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!a.quiet)
    std::fprintf(stderr, "genesis: generated %lld tokens in %.2f s, %.1f tokens/s (the %zu-token prompt's prefill included)\n",
                 static_cast<long long>(generated), seconds, seconds > 0 ? static_cast<double>(generated) / seconds : 0.0,
                 prompt.size());
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand(
      "generate", "Continue a prompt with a language model, streaming the text (or ids) to stdout; stops at EOS");
  auto* model = sub->add_option("--model", a->model_dir, "Hugging Face model directory (config.json + safetensors)");
  auto* checkpoint = sub->add_option("--checkpoint", a->checkpoint,
                                     "genesis run directory, its checkpoints/, or one checkpoint of a language model");
  model->excludes(checkpoint);
  auto* text = sub->add_option("--prompt", a->prompt, "Prompt text (encoded with the model's tokenizer)");
  auto* ids = sub->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids: \"ID ID ...\"");
  text->excludes(ids);
  sub->add_flag("-q,--quiet", a->quiet, "No closing line (tokens/s) on stderr");
  sub->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer to use instead of the model's (tokenizer.json or a directory)");
  sub->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature", a->sampling.temperature, "Softmax temperature; 0 = greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", a->sampling.top_k, "Sample among the K most probable tokens; 0 = all")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", a->sampling.top_p, "Sample among the most probable tokens of this mass; 1 = all")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", a->seed, "Seed of the sampler")->capture_default_str();
  sub->add_option("--device", a->device, "cpu, cuda, cuda:N or auto")->capture_default_str()->check(device_validator());
  sub->add_flag("--ids", a->print_ids, "Print the new token ids instead of text");
  sub->add_option("--dtype", a->dtype,
                  "Autocast dtype: f32, bf16 or fp16 (CUDA); default: the checkpoint recipe's amp.dtype, f32 for --model")
      ->check(CLI::IsMember({"f32", "bf16", "fp16"}));
  register_command(sub, [a, model, checkpoint] {
    GENESIS_CHECK(!model->empty() || !checkpoint->empty(), UsageError, "give --model HF_DIR or --checkpoint DIR");
    return run_generate(*a);
  });
}

}  // namespace genesis::cli
