// genesis generate (--model HF_DIR | --checkpoint DIR) (--prompt TEXT | --prompt-ids "ID ...")
//   [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--device D]
//   [--tokenizer PATH] [--ids] [--dtype f32|bf16|fp16]
// Streams the continuation to stdout as it is generated: decoded text (bytes released once
// their UTF-8 characters are complete), or token ids with --ids. Stops at EOS.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "apps/genesis/commands.h"
#include "apps/genesis/lm_session.h"
#include "libgenesis/autograd/autocast.h"
#include "libgenesis/core/error.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/models/sampling.h"

namespace genesis::cli {

namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string tokenizer, prompt, prompt_ids;
  bool print_ids = false;
  bool quiet = false;  // no closing tokens/s line on stderr
};

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

int run_generate(const GenerateArgs& a) {
  check_model_args(a.model);
  LoadedModel m = load_model(a.model);
  AutocastGuard autocast(generation_autocast(a.model, m));
  if (!a.tokenizer.empty()) m.tokenizer = data::Tokenizer::load(a.tokenizer);
  const bool text_out = !a.print_ids;
  GENESIS_CHECK(!a.prompt.empty() || !a.prompt_ids.empty(), UsageError,
                "give --prompt TEXT or --prompt-ids \"ID ID ...\"");
  GENESIS_CHECK(m.tokenizer || (a.prompt.empty() && !text_out), UsageError, "no tokenizer found for ",
                a.model.model_dir.empty() ? a.model.checkpoint : a.model.model_dir, ": pass --tokenizer PATH",
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
  if (a.model.max_new_tokens > room)
    std::cerr << "genesis: note: generating " << room << " tokens, what the model's context of "
              << m.model->max_positions() << " positions leaves after the prompt\n";

  models::TokenSampler sampler(a.model.sampling, a.model.seed);
  std::optional<TokenTextStream> text;
  if (text_out) text.emplace(*m.tokenizer);
  bool first = true;
  auto emit = [&](int64_t token) {
    if (text) {
      const std::string bytes = text->push(token);
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    } else {
      std::fprintf(stdout, first ? "%lld" : " %lld", static_cast<long long>(token));
    }
    first = false;
    std::fflush(stdout);
  };
  int64_t generated = 0;
  const auto start = std::chrono::steady_clock::now();
  models::generate(*m.model, prompt, a.model.max_new_tokens, sampler, m.eos_ids, [&](int64_t token) {
    ++generated;
    emit(token);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string rest = text ? text->finish() : std::string();
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
  add_model_options(sub, a->model);
  auto* text = sub->add_option("--prompt", a->prompt, "Prompt text (encoded with the model's tokenizer)");
  auto* ids = sub->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids: \"ID ID ...\"");
  text->excludes(ids);
  sub->add_flag("-q,--quiet", a->quiet, "No closing line (tokens/s) on stderr");
  sub->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer to use instead of the model's (tokenizer.json or a directory)");
  sub->add_flag("--ids", a->print_ids, "Print the new token ids instead of text");
  register_command(sub, [a] { return run_generate(*a); });
}

}  // namespace genesis::cli
