// genesis chat (--checkpoint RUN | --model HF_DIR) [--system TEXT] [--chat-template FILE]
//   [--single-turn] [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//   [--device D] [--dtype f32|bf16|fp16]
// A multi-turn conversation through the model's chat template: each user turn renders the
// conversation with the generation prompt, the model answers until its end token, and the
// answer joins the conversation. On a terminal: a "> " prompt on stderr, /reset and /exit.
// With stdin not a terminal: one message per input line, one reply per output line (line
// breaks and backslashes in a reply written as \n and \\), so scripts can pipe prompts in.
#include "libgenesis/data/chat.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/genesis/commands.h"
#include "apps/genesis/lm_session.h"
#include "libgenesis/autograd/autocast.h"
#include "libgenesis/core/error.h"
#include "libgenesis/models/sampling.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/sft_data.h"

namespace genesis::cli {

namespace {

namespace fs = std::filesystem;

struct ChatArgs {
  ModelArgs model;
  std::string system, chat_template;
  bool single_turn = false;
};

// The model's chat format. A checkpoint talks as its recipe fine-tuned it (train::chat_format);
// a Hugging Face directory is read as a recipe that fine-tunes from it would read it
// (model.init_from: its tokenizer and tokenizer_config.json). --chat-template replaces the
// template either way.
train::ChatFormat chat_format_of(const ChatArgs& a, const LoadedModel& m) {
  const std::string where = m.recipe ? "--checkpoint " + a.model.checkpoint : "--model " + a.model.model_dir;
  RecipeSpec spec;
  if (m.recipe) {
    spec = *m.recipe;
    // The checkpoint's copies of the tokenizer files first: the recipe's paths are relative to
    // where training ran.
    const fs::path& dir = m.checkpoint_dir;
    if (data::Tokenizer::found_in(dir)) spec.data.tokenizer = dir.string();
    if ((spec.data.chat_template.empty() || !fs::exists(spec.data.chat_template)) &&
        fs::exists(dir / "tokenizer_config.json"))
      spec.data.chat_template = (dir / "tokenizer_config.json").string();
  } else {
    GENESIS_CHECK(data::Tokenizer::found_in(a.model.model_dir), UsageError, where,
                  " has no tokenizer (tokenizer.json, or encoder.json + vocab.bpe); copy the model's tokenizer there");
    spec.model.init_from = a.model.model_dir;
    spec.data.tokenizer = recipe::default_tokenizer();
  }
  if (!a.chat_template.empty()) {
    GENESIS_CHECK(fs::is_regular_file(a.chat_template), UsageError, "--chat-template ", a.chat_template,
                  " is not a file (a tokenizer_config.json or a Jinja template is expected)");
    spec.data.chat_template = a.chat_template;
  }
  train::ChatFormat format;
  try {
    format = train::chat_format(spec);
  } catch (const UsageError& e) {
    throw UsageError(where + ": " + e.what());  // the recipe keys it names are the checkpoint's
  }
  GENESIS_CHECK(format.chat, UsageError, where,
                " has no chat template; pass --chat-template FILE (a tokenizer_config.json with a chat_template, "
                "or a Jinja file)");
  return format;
}

// A reply's text as one line: backslashes and line breaks escaped as C writes them.
std::string one_line(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '\\' || c == '\n' || c == '\r') {
      out += '\\';
      out += c == '\n' ? 'n' : c == '\r' ? 'r' : '\\';
    } else {
      out += c;
    }
  }
  return out;
}

// Writes a reply's text to stdout as it comes. In line mode every reply is one line, so the
// n-th output line answers the n-th input line.
class ReplyWriter {
 public:
  explicit ReplyWriter(bool line_mode) : line_mode_(line_mode) {}
  void write(const std::string& text) const {
    const std::string out = line_mode_ ? one_line(text) : text;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  void end() const {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

 private:
  bool line_mode_;
};

class ChatSession {
 public:
  ChatSession(const ChatArgs& args, LoadedModel& model, train::ChatFormat format)
      : args_(args), model_(model), format_(std::move(format)), sampler_(args.model.sampling, args.model.seed) {
    stop_ids_ = model_.eos_ids;
    stop_ids_.push_back(*format_.tokenizer->token_to_id(format_.eos));  // chat_format checked it exists
    reset();
  }

  void reset() {
    conversation_.clear();
    if (!args_.system.empty()) conversation_.push_back({"system", args_.system});
  }

  // Answers `message`, streaming the reply to `out`; the reply joins the conversation.
  void respond(const std::string& message, const ReplyWriter& out) {
    conversation_.push_back({"user", message});
    const std::vector<int64_t> prompt = fitted_prompt();
    if (prompt.empty()) {
      std::cerr << "genesis: note: the message does not fit the model's context of " << model_.model->max_positions()
                << " positions; it was dropped (send a shorter one)\n";
      conversation_.pop_back();
      out.end();
      return;
    }
    TokenTextStream text(*format_.tokenizer);
    std::string reply;
    models::generate(*model_.model, prompt, args_.model.max_new_tokens, sampler_, stop_ids_, [&](int64_t token) {
      if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) return;
      const std::string piece = text.push(token);
      reply += piece;
      out.write(piece);
    });
    const std::string rest = text.finish();
    reply += rest;
    out.write(rest);
    out.end();
    conversation_.push_back({"assistant", reply});
  }

 private:
  std::vector<int64_t> encoded_prompt() const {
    std::vector<int64_t> ids;
    for (const data::TokenId id : format_.tokenizer->encode(format_.chat->render(conversation_, true))) {
      GENESIS_CHECK(id < model_.model->vocab_size(), UsageError, "the tokenizer ", format_.tokenizer_dir.string(),
                    " gives token id ", id, ", outside the model's vocabulary of ", model_.model->vocab_size(),
                    "; pass the model's own tokenizer");
      ids.push_back(id);
    }
    return ids;
  }

  // The rendered conversation as token ids, leaving room for max_new_tokens: the oldest turns
  // (after the system prompt) are dropped while it does not. Empty when even the last message
  // alone fills the context.
  std::vector<int64_t> fitted_prompt() {
    const int64_t context = model_.model->max_positions();
    std::vector<int64_t> ids = encoded_prompt();
    int64_t dropped = 0;
    while (static_cast<int64_t>(ids.size()) + args_.model.max_new_tokens > context && drop_oldest_turn()) {
      ids = encoded_prompt();
      ++dropped;
    }
    if (dropped > 0)
      std::cerr << "genesis: note: the conversation outgrew the model's context of " << context
                << " positions; dropped its oldest " << dropped << " turn(s)\n";
    if (static_cast<int64_t>(ids.size()) >= context) return {};
    return ids;
  }

  // Removes the first user message after the system prompt and the replies that follow it.
  // False when the last user message is all that is left.
  bool drop_oldest_turn() {
    auto first = std::find_if(conversation_.begin(), conversation_.end(),
                              [](const data::ChatMessage& m) { return m.role != "system"; });
    if (first == conversation_.end()) return false;
    auto next =
        std::find_if(first + 1, conversation_.end(), [](const data::ChatMessage& m) { return m.role == "user"; });
    if (next == conversation_.end()) return false;
    conversation_.erase(first, next);
    return true;
  }

  const ChatArgs& args_;
  LoadedModel& model_;
  train::ChatFormat format_;
  models::TokenSampler sampler_;
  std::vector<int64_t> stop_ids_;
  data::Conversation conversation_;
};

// One user message per line until EOF (or /exit on a terminal).
int run_chat(const ChatArgs& a) {
  check_model_args(a.model);
  LoadedModel m = load_model(a.model);
  AutocastGuard autocast(generation_autocast(a.model, m));
  ChatSession session(a, m, chat_format_of(a, m));
  const bool terminal = isatty(STDIN_FILENO) != 0;
  const ReplyWriter out(!terminal);
  if (terminal) std::cerr << "genesis chat: /reset clears the conversation, /exit or Ctrl-D ends it\n";
  std::string line;
  while (true) {
    if (terminal) std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) {
      if (terminal) std::cerr << "\n";  // Ctrl-D leaves the cursor after the prompt
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (terminal && line == "/exit") break;
    if (terminal && line == "/reset") {
      session.reset();
      continue;
    }
    if (terminal && line.empty()) continue;
    if (a.single_turn) session.reset();
    session.respond(line, out);
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  a->model.sampling.temperature = 0;  // greedy unless asked: the same prompts give the same replies
  a->model.max_new_tokens = 256;
  CLI::App* sub = app.add_subcommand(
      "chat", "Talk with a language model through its chat template (stdin not a terminal: one message per line)");
  add_model_options(sub, a->model);
  sub->add_option("--system", a->system, "System prompt that opens the conversation");
  sub->add_option("--chat-template", a->chat_template,
                  "Chat template to use instead of the model's: a tokenizer_config.json or a Jinja file");
  sub->add_flag("--single-turn", a->single_turn, "Answer each message as a fresh conversation");
  register_command(sub, [a] { return run_chat(*a); });
}

}  // namespace genesis::cli
