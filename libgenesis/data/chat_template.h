#pragma once
// Chat templates: a conversation rendered to text as transformers' apply_chat_template(messages,
// tokenize=False, add_generation_prompt=...) does, by the template a model ships in its
// tokenizer_config.json (interpreted by data/jinja.h), and the byte spans of that text that
// belong to assistant turns (what supervised fine-tuning trains on).
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libgenesis/data/chat.h"
#include "libgenesis/data/jinja.h"

namespace genesis::data {

class ChatTemplate {
 public:
  // Parses the template text. Throws ValueError "chat template <name>: line L, column C: <what>"
  // for syntax it cannot read. bos_token / eos_token are the values the template sees.
  static ChatTemplate parse(std::string_view source, std::string name, std::string bos_token = "",
                            std::string eos_token = "");
  // From a Hugging Face tokenizer_config.json: its "chat_template" (a string, or a list of
  // {"name", "template"} of which "default" is taken) and its bos_token / eos_token (a string or
  // an AddedToken {"content": ...}; absent or null: ""). The template is named by the file's
  // path. Throws IoError (unreadable) or ValueError (malformed, no chat_template) naming the file.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& path);

  // The template's variables: messages (a list of {"role", "content"}), bos_token, eos_token,
  // add_generation_prompt, raise_exception(message) (a ValueError with the template's message),
  // strftime_now(format) (the current local time), and `extra` as strings: e.g. "date_string",
  // which Llama 3 templates print in place of today's date when it is defined.
  std::string render(const Conversation& messages, bool add_generation_prompt,
                     const std::map<std::string, std::string>& extra = {}) const;

  const std::string& name() const { return template_.name(); }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  jinja::Template template_;
  std::string bos_token_;
  std::string eos_token_;
};

// The byte spans [begin, end) of render(messages, false) that belong to assistant turns, one per
// assistant message, found by rendering prefixes of the conversation (no tokenizer involved):
// for assistant message i, begin = size of render(messages[:i], add_generation_prompt=true)
// (the prompt that asks for it, so the span starts at its content), end = size of
// render(messages[:i+1], false). Each prefix rendering must be a prefix of the full rendering;
// a template that rewrites earlier turns (Mistral's puts the system prompt into the last user
// turn) is refused with a ValueError naming the turn. One exception: a template that closes a
// conversation with eos_token (Phi-3's, without a generation prompt) gives
// render(messages[:i+1]) = (a prefix of the full rendering) + eos_token; the turn ends before
// that eos_token. The prefix before an assistant turn usually ends with a user turn, which every
// template accepts; an error a template raises on a prefix is rethrown naming the turn.
std::vector<std::pair<size_t, size_t>> assistant_spans(const ChatTemplate& chat_template, const Conversation& messages,
                                                       const std::map<std::string, std::string>& extra = {});

}  // namespace genesis::data
