#pragma once
// What an SFT recipe (data.name = "sft") fine-tunes with, resolved from the recipe: the
// tokenizer (data.tokenizer, or model.init_from's), the chat template (data.chat_template, or
// init_from's tokenizer_config.json), the token that ends an example, and the prepared
// examples (data/sft_prepare.h) under the cache directory. The SFT data source, `genesis data
// preview` and `genesis chat` share it.
#include <filesystem>
#include <memory>
#include <string>

#include "libgenesis/data/chat_template.h"
#include "libgenesis/data/sft_prepare.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/run_log.h"

namespace genesis::train {

// How a model talks: its tokenizer, chat template (null when it has none) and end token.
struct ChatFormat {
  std::filesystem::path tokenizer_dir;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::ChatTemplate> chat;
  std::string template_text;  // the template's source (for the prepared data's key)
  std::string eos;            // the chat template's eos_token, else <|endoftext|>
};

// The recipe's chat format. Throws UsageError naming the key when a file is missing or the
// tokenizer has no end token.
ChatFormat chat_format(const RecipeSpec& spec);

struct SftData {
  ChatFormat format;
  data::SftPrepared prepared;
};

// Prepares the recipe's records (or finds them prepared), its stages and a progress bar to `log`.
SftData prepare_sft_data(const RecipeSpec& spec, RunLog& log);

}  // namespace genesis::train
