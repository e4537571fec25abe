// genesis data preview RECIPE [--set k=v]... [-n N] [--json] [--split train|val] [-q]
// The first examples of an SFT recipe as training sees them: prepared (or read back from the
// cache training uses), decoded, the tokens that take the loss marked. On a terminal the trained
// spans are green and the rest dim; otherwise the trained spans are wrapped in [[ ]].
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "apps/genesis/commands.h"
#include "libgenesis/core/error.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/run_log.h"
#include "libgenesis/train/sft_data.h"

namespace genesis::cli {

namespace {

constexpr int32_t kNotTrained = -100;

struct PreviewArgs {
  std::string recipe;
  std::vector<std::string> sets;
  int64_t count = 3;
  bool json = false;
  std::string split = "train";
  bool quiet = false;
};

// One prepared example: views into the split's memory-mapped ids and labels.
struct ExampleView {
  std::span<const int32_t> ids, labels;
  int64_t trained() const {
    int64_t n = 0;
    for (const int32_t label : labels) n += label != kNotTrained;
    return n;
  }
};

ExampleView example_at(const data::SftSplit& split, int64_t index) {
  const auto begin = static_cast<size_t>(split.begin(index));
  const auto length = static_cast<size_t>(split.length(index));
  return {{split.ids.data<int32_t>() + begin, length}, {split.labels.data<int32_t>() + begin, length}};
}

std::string decode(const data::Tokenizer& tokenizer, std::span<const int32_t> ids) {
  std::string text;
  for (const int32_t id : ids) text += tokenizer.token_bytes(static_cast<data::TokenId>(id));
  return text;
}

// How trained and untrained runs of text are told apart.
struct Marks {
  const char *trained_open, *trained_close, *other_open, *other_close;
};
constexpr Marks kTerminalMarks{"\x1b[32m", "\x1b[0m", "\x1b[2m", "\x1b[0m"};  // green, dim
constexpr Marks kPlainMarks{"[[", "]]", "", ""};

// The example's text with each run of trained tokens (and of untrained ones) inside its marks.
std::string marked_text(const data::Tokenizer& tokenizer, const ExampleView& e, const Marks& marks) {
  std::string text;
  for (size_t i = 0; i < e.ids.size(); ++i) {
    const bool trained = e.labels[i] != kNotTrained;
    const bool starts_run = i == 0 || trained != (e.labels[i - 1] != kNotTrained);
    if (starts_run && i > 0) text += trained ? marks.other_close : marks.trained_close;
    if (starts_run) text += trained ? marks.trained_open : marks.other_open;
    text += tokenizer.token_bytes(static_cast<data::TokenId>(e.ids[i]));
  }
  if (!e.ids.empty()) text += e.labels.back() != kNotTrained ? marks.trained_close : marks.other_close;
  return text;
}

void print_json(const data::Tokenizer& tokenizer, const ExampleView& e, int64_t index) {
  const nlohmann::ordered_json line{{"index", index},         {"ids", e.ids},
                                    {"labels", e.labels},     {"text", decode(tokenizer, e.ids)},
                                    {"tokens", e.ids.size()}, {"trained", e.trained()}};
  // A token may end inside a UTF-8 character; the JSON shows such bytes as U+FFFD.
  std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

void print_marked(const data::Tokenizer& tokenizer, const ExampleView& e, int64_t index, bool terminal) {
  std::string text = marked_text(tokenizer, e, terminal ? kTerminalMarks : kPlainMarks);
  if (text.empty() || text.back() != '\n') text += '\n';
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("example %lld: %zu tokens, %lld trained\n\n", static_cast<long long>(index), e.ids.size(),
              static_cast<long long>(e.trained()));
}

// The split's totals: what fraction of its tokens take the loss.
void print_summary(const data::SftSplit& split, const std::string& name) {
  const int64_t tokens = split.ids.numel();
  int64_t trained = 0;
  const int32_t* labels = split.labels.data<int32_t>();
  for (int64_t i = 0; i < tokens; ++i) trained += labels[i] != kNotTrained;
  std::printf("%s: %lld examples, %lld tokens, %lld trained (%.1f%%)\n", name.c_str(),
              static_cast<long long>(split.examples()), static_cast<long long>(tokens), static_cast<long long>(trained),
              tokens > 0 ? 100.0 * static_cast<double>(trained) / tokens : 0.0);
}

int run_preview(const PreviewArgs& a) {
  const RecipeSpec spec = load_recipe(a.recipe, a.sets);
  GENESIS_CHECK(spec.data.name == "sft", UsageError, "data preview: ", a.recipe, " has data.name = \"", spec.data.name,
                "\"; preview shows SFT recipes (data.name = \"sft\")");
  train::RunLog log("", a.quiet);
  const train::SftData sft = train::prepare_sft_data(spec, log);
  const data::SftSplit& split = a.split == "val" ? sft.prepared.val : sft.prepared.train;
  GENESIS_CHECK(split.examples() > 0, UsageError, "data preview: ", a.recipe,
                " has no validation examples; set data.val_path or data.val_fraction");
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  const data::Tokenizer& tokenizer = *sft.format.tokenizer;
  for (int64_t i = 0; i < std::min(a.count, split.examples()); ++i) {
    if (a.json) {
      print_json(tokenizer, example_at(split, i), i);
    } else {
      print_marked(tokenizer, example_at(split, i), i, terminal);
    }
  }
  if (!a.json) print_summary(split, a.split);
  return 0;
}

}  // namespace

void add_data_preview_command(CLI::App* data_cmd) {
  auto a = std::make_shared<PreviewArgs>();
  CLI::App* sub = data_cmd->add_subcommand(
      "preview", "Show an SFT recipe's first examples as they will be trained, the trained tokens marked");
  sub->add_option("recipe", a->recipe, "Recipe file (TOML) with data.name = \"sft\"")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--set", a->sets, "Override a recipe key: section.key=value (repeatable)");
  sub->add_option("-n", a->count, "Examples to show")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_flag("--json", a->json,
                "One JSON object per example: index, ids, labels (-100 = not trained), text, tokens, trained");
  sub->add_option("--split", a->split, "Split to show")->capture_default_str()->check(CLI::IsMember({"train", "val"}));
  sub->add_flag("-q,--quiet", a->quiet, "No preparation lines on stderr");
  register_command(sub, [a] { return run_preview(*a); });
}

}  // namespace genesis::cli
