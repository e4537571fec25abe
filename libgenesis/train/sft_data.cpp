#include "libgenesis/train/sft_data.h"

#include <glob.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/user_paths.h"
#include "libgenesis/recipe/build.h"

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

// data.path / data.val_path: a file, a directory or a glob pattern.
std::vector<fs::path> record_files(const std::string& entry, const char* key) {
  if (entry.find_first_of("*?[") == std::string::npos) return data::sft_files({entry});
  glob_t found{};
  const int rc = ::glob(entry.c_str(), 0, nullptr, &found);
  std::vector<std::string> paths(found.gl_pathv, found.gl_pathv + (rc == 0 ? found.gl_pathc : 0));
  globfree(&found);
  GENESIS_CHECK(!paths.empty(), UsageError, "data.", key, ": the pattern ", entry, " matches no file");
  return data::sft_files(paths);
}

// data.chat_template: a tokenizer_config.json or a Jinja file; else init_from's
// tokenizer_config.json when it has a template. Null when there is none.
std::unique_ptr<data::ChatTemplate> chat_template(const RecipeSpec& spec, std::string& text) {
  fs::path config;
  if (!spec.data.chat_template.empty()) {
    const fs::path p = spec.data.chat_template;
    GENESIS_CHECK(fs::is_regular_file(p), UsageError, "data.chat_template: ", p.string(), " is not a file");
    if (p.extension() == ".json") {
      config = p;
    } else {
      text = io::read_file(p, io::kMaxConfigFileBytes);
      return std::make_unique<data::ChatTemplate>(data::ChatTemplate::parse(text, p.string()));
    }
  } else if (!spec.model.init_from.empty() && fs::exists(fs::path(spec.model.init_from) / "tokenizer_config.json")) {
    config = fs::path(spec.model.init_from) / "tokenizer_config.json";
    const auto json = nlohmann::json::parse(io::read_file(config, io::kMaxTokenizerFileBytes), nullptr, false);
    if (!json.is_object() || !json.contains("chat_template")) return nullptr;
  } else {
    return nullptr;
  }
  text = io::read_file(config, io::kMaxTokenizerFileBytes);
  return std::make_unique<data::ChatTemplate>(data::ChatTemplate::from_tokenizer_config(config));
}

}  // namespace

fs::path tokenizer_path(const RecipeSpec& spec) {
  const bool default_tokenizer = spec.data.tokenizer == recipe::default_tokenizer();
  if (default_tokenizer && !spec.model.init_from.empty() && data::Tokenizer::found_in(spec.model.init_from))
    return spec.model.init_from;
  GENESIS_CHECK(fs::exists(spec.data.tokenizer), UsageError, "data.tokenizer: ", spec.data.tokenizer,
                " does not exist", spec.model.init_from.empty() ? "" : " (and model.init_from holds no tokenizer)",
                "; set data.tokenizer to a tokenizer.json or a directory holding one");
  return spec.data.tokenizer;
}

std::string tokenizer_key(const fs::path& dir) {
  const fs::path file = !fs::is_directory(dir)                  ? dir
                        : fs::exists(dir / "tokenizer.json") ? dir / "tokenizer.json"
                                                              : dir / "encoder.json";
  return std::to_string(data::file_fingerprint(file));
}

ChatFormat chat_format(const RecipeSpec& spec) {
  ChatFormat f;
  f.tokenizer_dir = tokenizer_path(spec);
  f.tokenizer = std::make_unique<data::Tokenizer>(data::Tokenizer::load(f.tokenizer_dir));
  f.chat = chat_template(spec, f.template_text);
  f.eos = f.chat ? f.chat->eos_token() : std::string();
  if (f.eos.empty() && f.tokenizer->token_to_id("<|endoftext|>")) f.eos = "<|endoftext|>";
  GENESIS_CHECK(!f.eos.empty() && f.tokenizer->token_to_id(f.eos), UsageError, "data: the tokenizer ",
                f.tokenizer_dir.string(), " has no end-of-sequence token", f.eos.empty() ? "" : " '" + f.eos + "'",
                " (tokenizer_config.json's eos_token) to end each example with");
  return f;
}

SftData prepare_sft_data(const RecipeSpec& spec, RunLog& log) {
  // data.fetch brings what the recipe names and does not find (the example recipes' data).
  const RecipeSpec::Data& d = spec.data;
  auto missing = [&] {
    bool any = !fs::exists(d.path) && d.path.find_first_of("*?[") == std::string::npos;
    for (const std::string* p : {&d.val_path, &d.chat_template}) any |= !p->empty() && !fs::exists(*p);
    return any || (d.tokenizer != recipe::default_tokenizer() && !fs::exists(d.tokenizer));
  };
  recipe::fetch_missing_data(spec, missing, [&log](const std::string& line) { log.note(line); });
  SftData out{chat_format(spec), {}};
  const ChatFormat& f = out.format;
  const data::SftEncoder encoder(*f.tokenizer, f.chat.get(), f.eos, *data::parse_train_on(spec.data.train_on));
  data::SftPrepareOptions o;
  o.train_files = record_files(spec.data.path, "path");
  if (!spec.data.val_path.empty()) o.val_files = record_files(spec.data.val_path, "val_path");
  o.val_fraction = spec.data.val_fraction;
  o.format = *data::parse_sft_format(spec.data.format);
  o.skip_bad = spec.data.skip_bad;
  o.cache_dir = io::cache_root(spec.data.cache_dir);
  o.tokenizer_key = tokenizer_key(f.tokenizer_dir);
  o.template_text = f.template_text;
  o.eos_token = f.eos;
  o.train_on_name = spec.data.train_on;
  o.progress = [&log](uint64_t done, uint64_t total) {
    log.progress("preparing SFT data (KiB)", static_cast<int64_t>(done >> 10), static_cast<int64_t>(total >> 10));
  };
  out.prepared = data::prepare_sft(encoder, o);
  log.clear_progress();
  const data::SftPrepared& p = out.prepared;
  log.note(std::string(p.reused ? "SFT data: reusing " : "SFT data: prepared ") + p.dir.string() + " (" +
           std::to_string(p.train.examples()) + " training, " + std::to_string(p.val.examples()) +
           " validation examples)");
  if (p.skipped > 0) log.note("warning: " + std::to_string(p.skipped) + " bad records skipped (data.skip_bad)");
  return out;
}

}  // namespace genesis::train
