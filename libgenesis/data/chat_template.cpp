// Chat templates from tokenizer_config.json, rendered with transformers' variables, and the
// assistant spans of a rendered conversation.
#include "libgenesis/data/chat_template.h"

#include <ctime>
#include <optional>
#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/json_text.h"

namespace genesis::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A special token of tokenizer_config.json: a string, an AddedToken {"content": ...}, or absent.
std::string special_token(const json& config, const char* key, const fs::path& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  GENESIS_THROW(ValueError, path.string(), ": ", key, " must be a string or an object with a string \"content\"");
}

std::string chat_template_text(const json& config, const fs::path& path) {
  const auto it = config.find("chat_template");
  GENESIS_CHECK(it != config.end() && !it->is_null(), ValueError, path.string(), " has no chat_template");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const json& named : *it)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
    GENESIS_THROW(ValueError, path.string(), ": chat_template is a list of named templates without a \"default\" one");
  }
  GENESIS_THROW(ValueError, path.string(), ": chat_template must be a string or a list of {\"name\", \"template\"}");
}

jinja::Value raise_exception(const jinja::Args& args) {
  throw jinja::EvalError(args.positional.empty() ? "raise_exception() called" : args.positional[0].str());
}

jinja::Value strftime_now(const jinja::Args& args) {
  if (args.positional.empty() || !args.positional[0].is_string())
    throw jinja::EvalError("strftime_now expects a format string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[256];
  const size_t n = std::strftime(buffer, sizeof(buffer), args.positional[0].as_string().c_str(), &local);
  return std::string(buffer, n);
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view source, std::string name, std::string bos_token,
                                 std::string eos_token) {
  ChatTemplate t;
  t.template_ = jinja::Template::parse(source, std::move(name));
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  return t;
}

ChatTemplate ChatTemplate::from_tokenizer_config(const fs::path& path) {
  const std::string text = io::read_file(path, io::kMaxTokenizerFileBytes);
  json config;
  try {
    config = json::parse(text);
  } catch (const json::parse_error& e) {
    GENESIS_THROW(ValueError, "malformed JSON in ", path.string(), ": ", io::json_error_text(e));
  }
  GENESIS_CHECK(config.is_object(), ValueError, path.string(), ": expected a JSON object (a tokenizer_config.json)");
  return parse(chat_template_text(config, path), path.string(), special_token(config, "bos_token", path),
               special_token(config, "eos_token", path));
}

std::string ChatTemplate::render(const Conversation& messages, bool add_generation_prompt,
                                 const std::map<std::string, std::string>& extra) const {
  jinja::List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) list.emplace_back(jinja::Dict{{"role", m.role}, {"content", m.content}});
  std::map<std::string, jinja::Value> variables;
  for (const auto& [key, value] : extra) variables[key] = value;
  variables["messages"] = std::move(list);
  variables["bos_token"] = bos_token_;
  variables["eos_token"] = eos_token_;
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["raise_exception"] = jinja::Function{"raise_exception", raise_exception};
  variables["strftime_now"] = jinja::Function{"strftime_now", strftime_now};
  return template_.render(variables);
}

namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

// The spans of a template that rewrites earlier turns (Mistral's moves the system prompt into the
// last user turn), for which prefixes do not work: each assistant content is rendered between
// two markers, whose places give the content's bytes once they are taken out. The span then
// runs on over the template's eos_token when it follows the content (after spaces): the turn's
// end token. nullopt when the template does not copy the content verbatim (it trims or
// rewrites it), so that the markers' text differs from the real rendering.
std::optional<Spans> marked_spans(const ChatTemplate& chat_template, const Conversation& messages,
                                  const std::map<std::string, std::string>& extra, const std::string& full) {
  // Control characters no chat text holds, numbered per turn.
  auto marker = [](char kind, size_t turn) { return "\x1egenesis-" + std::string(1, kind) + std::to_string(turn) + "\x1f"; };
  Conversation marked = messages;
  for (size_t i = 0; i < marked.size(); ++i)
    if (marked[i].role == "assistant") marked[i].content = marker('<', i) + marked[i].content + marker('>', i);
  std::string text;
  try {
    text = chat_template.render(marked, false, extra);
  } catch (const ValueError&) {
    return std::nullopt;
  }
  Spans spans;
  std::string stripped;
  size_t at = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    const std::string open = marker('<', i), close = marker('>', i);
    const size_t begin = text.find(open, at), end = begin == std::string::npos ? begin : text.find(close, begin);
    if (end == std::string::npos) return std::nullopt;
    stripped += text.substr(at, begin - at);
    const size_t content = stripped.size();
    stripped += text.substr(begin + open.size(), end - begin - open.size());
    spans.emplace_back(content, stripped.size());
    at = end + close.size();
  }
  stripped += text.substr(at);
  if (stripped != full) return std::nullopt;
  const std::string& eos = chat_template.eos_token();
  for (auto& [begin, end] : spans) {
    size_t next = end;
    while (next < full.size() && full[next] == ' ') ++next;
    if (!eos.empty() && full.compare(next, eos.size(), eos) == 0) end = next + eos.size();
  }
  return spans;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> assistant_spans(const ChatTemplate& chat_template, const Conversation& messages,
                                                       const std::map<std::string, std::string>& extra) {
  const std::string full = chat_template.render(messages, false, extra);
  // Prefix rendering failed for `turn`: the markers' spans when they work, else this error.
  auto not_incremental = [&](size_t turn, size_t count) {
    if (std::optional<Spans> spans = marked_spans(chat_template, messages, extra, full)) return *spans;
    GENESIS_THROW(ValueError, "chat template ", chat_template.name(),
                  " does not render conversations incrementally: the first ", count,
                  " messages do not render as a prefix of the whole conversation, and it does not copy the assistant's "
                  "content verbatim either, so the assistant turn at message ",
                  turn, " has no span of its own");
  };
  auto render_prefix = [&](size_t count, bool add_generation_prompt, size_t turn) {
    try {
      return chat_template.render(Conversation(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(count)),
                                  add_generation_prompt, extra);
    } catch (const ValueError& e) {
      GENESIS_THROW(ValueError, "assistant spans of message ", turn, ": rendering the first ", count,
                    " messages failed: ", e.what());
    }
  };
  const std::string& eos = chat_template.eos_token();
  Spans spans;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    const std::string prompt = render_prefix(i, true, i);
    if (!full.starts_with(prompt)) return not_incremental(i, i);
    std::string through = render_prefix(i + 1, false, i);
    if (!full.starts_with(through) && !eos.empty() && through.ends_with(eos))
      through.resize(through.size() - eos.size());  // a conversation's closing eos_token (Phi-3)
    if (!full.starts_with(through) || through.size() < prompt.size()) return not_incremental(i, i + 1);
    spans.emplace_back(prompt.size(), through.size());
  }
  return spans;
}

}  // namespace genesis::data
