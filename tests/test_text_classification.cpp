// Text classification: labelled texts from JSONL and CSV (classes, truncation, padding, the
// token cache, errors by file and line), the sequence classifier's pooling against a hand
// computation on a tiny model (padding changes nothing), and training that reaches a separable
// task's every example, fully and with LoRA (the head trained beside the adapters).

#include <functional>

#include "libgenesis/data/labelled_text.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/models/sequence_classifier.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/loss.h"
#include "libgenesis/ops/reduce.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/data_source.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kTinyLlama = R"({"model_type": "llama", "vocab_size": 259, "hidden_size": 16, "intermediate_size": 24,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64})";

// A recipe for a tiny Llama with a two-class head on `dir`/train.jsonl (and test.jsonl).
std::string recipe_text(const TempDir& dir, const std::string& extra = "") {
  return R"(
[run]
name = "text-test"
device = "cpu"
[model]
name = "llama"
init_from = ")" +
         (dir / "model").string() + R"("
num_classes = 2
[data]
name = "text_classification"
path = ")" +
         (dir / "train.jsonl").string() + R"("
test_path = ")" +
         (dir / "test.jsonl").string() + R"("
cache_dir = ")" +
         (dir / "cache").string() + R"("
seq_len = 12
[optimizer]
name = "adamw"
lr = 0.01
[training]
steps = 1
batch_size = 8
)" + extra;
}

// A model directory (config.json, random weights, the byte tokenizer) and a separable task: texts
// of 'a's are "yes", of 'b's "no", of different lengths.
void write_task(const TempDir& dir) {
  manual_seed(3);
  auto lm = models::causal_lm_from_config(kTinyLlama);
  models::save_hf_model(*lm, dir / "model");
  write_byte_tokenizer(dir / "model");
  std::string train, test;
  for (int i = 0; i < 24; ++i) {
    const bool yes = i % 2 == 0;
    const std::string text = std::string(static_cast<size_t>(2 + i % 7), yes ? 'a' : 'b') + " " + std::to_string(i);
    (i < 16 ? train : test) += R"({"text": ")" + text + R"(", "label": ")" + (yes ? "yes" : "no") + "\"}\n";
  }
  write_text_file(dir / "train.jsonl", train);
  write_text_file(dir / "test.jsonl", test);
}

}  // namespace

TEST_CASE("labelled texts: JSONL and CSV records, integer labels, lines, errors by file and line",
          "[cpu][text_classification]") {
  TempDir tmp;
  write_text_file(tmp / "a.jsonl",
                  "{\"text\": \"hello\", \"label\": \"spam\"}\n\n{\"body\": \"x\", \"y\": 3, \"text\": \"t\", "
                  "\"label\": 3}\n");
  const data::LabelledTexts a = data::read_labelled_texts(tmp / "a.jsonl", {});
  REQUIRE(a.size() == 2);
  CHECK(a.texts == std::vector<std::string>{"hello", "t"});
  CHECK(a.labels == std::vector<std::string>{"spam", "3"});
  CHECK(a.lines == std::vector<int64_t>{1, 3});
  CHECK_THAT(usage_error([&] { data::read_labelled_texts(tmp / "a.jsonl", {.text = "body", .label = "y"}); }),
             Contains("a.jsonl:1") && Contains("no string field \"body\""));
  write_text_file(tmp / "b.csv", "id,message,class\n1,\"hi, there\",ham\n2,\"two\nlines\",spam\n");
  const data::LabelledTexts c = data::read_labelled_texts(tmp / "b.csv", {.text = "message", .label = "class"});
  CHECK(c.texts == std::vector<std::string>{"hi, there", "two\nlines"});
  CHECK(c.labels == std::vector<std::string>{"ham", "spam"});
  CHECK(c.where(1) == (tmp / "b.csv").string() + ":3");

  write_text_file(tmp / "missing.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"label\": \"x\"}\n");
  CHECK_THAT(usage_error([&] { data::read_labelled_texts(tmp / "missing.jsonl", {}); }),
             Contains("missing.jsonl:2") && Contains("no string field \"text\""));
  write_text_file(tmp / "empty.jsonl", "{\"text\": \"\", \"label\": \"x\"}\n");
  CHECK_THAT(usage_error([&] { data::read_labelled_texts(tmp / "empty.jsonl", {}); }),
             Contains("empty.jsonl:1") && Contains("is empty"));
  write_text_file(tmp / "nolabel.jsonl", "{\"text\": \"a\"}\n");
  CHECK_THAT(usage_error([&] { data::read_labelled_texts(tmp / "nolabel.jsonl", {}); }),
             Contains("nolabel.jsonl:1") && Contains("no field \"label\""));
  CHECK(data::read_labelled_texts(tmp / "nolabel.jsonl", {.label_optional = true}).labels ==
        std::vector<std::string>{""});
  write_text_file(tmp / "bad.jsonl", "{\"text\": \"a\", \"label\": 1.5}\nnot json\n");
  CHECK_THAT(usage_error([&] { data::read_labelled_texts(tmp / "bad.jsonl", {}); }), Contains("bad.jsonl:1"));
  write_text_file(tmp / "bad.csv", "text,label\n,ham\n");
  CHECK_THAT(usage_error([&] { data::read_labelled_texts(tmp / "bad.csv", {}); }), Contains("bad.csv:2: the column 'text' is empty"));
}

TEST_CASE("labelled texts: tokens cut to seq_len, right-padded, cached", "[cpu][text_classification]") {
  TempDir tmp;
  write_byte_tokenizer(tmp / "tok");
  const data::Tokenizer tokenizer = data::Tokenizer::load(tmp / "tok");
  write_text_file(tmp / "t.jsonl", "{\"text\": \"abcdefgh\", \"label\": 0}\n{\"text\": \"xy\", \"label\": 1}\n");
  const data::LabelledTexts texts = data::read_labelled_texts(tmp / "t.jsonl", {});
  const data::TextTokenOptions options{
      .seq_len = 5, .cache_dir = tmp / "cache", .tokenizer_key = "k", .text_field = "text"};
  bool reused = true;
  const Tensor rows = data::tokenize_texts(tokenizer, texts, options, -1, &reused);
  CHECK_FALSE(reused);
  REQUIRE(rows.shape() == Shape{2, 5});
  const std::vector<int32_t> expected{'a', 'b', 'c', 'd', 'e', 'x', 'y', -1, -1, -1};
  CHECK(std::vector<int32_t>(rows.data<int32_t>(), rows.data<int32_t>() + 10) == expected);
  const Tensor again = data::tokenize_texts(tokenizer, texts, options, -1, &reused);
  CHECK(reused);
  CHECK(std::vector<int32_t>(again.data<int32_t>(), again.data<int32_t>() + 10) == expected);
  // Another seq_len is another key.
  data::TextTokenOptions longer = options;
  longer.seq_len = 6;
  CHECK(data::tokenize_texts(tokenizer, texts, longer, -1, &reused).size(1) == 6);
  CHECK_FALSE(reused);
}

TEST_CASE("text classification source: sorted classes, splits, data.json, a label outside a checkpoint's classes",
          "[cpu][text_classification]") {
  TempDir tmp;
  write_task(tmp);
  const RecipeSpec spec = parse_recipe(recipe_text(tmp), "text.toml");
  train::RunLog log("", true);
  auto source = train::open_data_source(spec, Device(), log);
  CHECK(data::parse_text_encoding(source->encoding(), "data.json") == std::vector<std::string>{"no", "yes"});
  CHECK(source->tokenizer() == tmp / "model");
  const data::Batch batch = source->next();
  CHECK(batch.inputs.shape() == Shape{8, 12});
  CHECK(batch.inputs.dtype() == DType::i32);
  REQUIRE(source->has_evaluation());
  manual_seed(1);
  auto model = recipe::build_model(spec, Device());
  source->check_model(*model);
  const auto metrics = source->evaluate(*model);
  CHECK(metrics.count("macro_f1") == 1);
  REQUIRE(source->confusion().has_value());
  CHECK(source->confusion()->classes == std::vector<std::string>{"no", "yes"});

  // A checkpoint's classes label the data; a label they lack is named by file and line.
  write_text_file(tmp / "test.jsonl",
                  "{\"text\": \"aaa\", \"label\": \"yes\"}\n{\"text\": \"ccc\", \"label\": \"maybe\"}\n");
  CHECK_THAT(usage_error([&] {
               train::open_data_source(spec, Device(), log, {}, data::text_encoding_json({"no", "yes"}));
             }),
             Contains("test.jsonl:2") && Contains("'maybe' is not one of the checkpoint's classes (no, yes)"));
  CHECK_THROWS_AS(parse_recipe(recipe_text(tmp), "text.toml", {"model.num_classes=1"}), RecipeError);
  CHECK_THROWS_AS(parse_recipe(recipe_text(tmp), "text.toml", {"model.name=mlp"}), RecipeError);
}

TEST_CASE("sequence classifier: last and mean pooling equal a hand computation, padding changes nothing",
          "[cpu][text_classification]") {
  for (const models::Pooling pooling : {models::Pooling::last, models::Pooling::mean}) {
    manual_seed(7);
    auto lm = models::causal_lm_from_config(kTinyLlama);
    models::SequenceClassifier classifier(lm, 3, pooling);
    classifier.eval();
    const Tensor score = classifier.named_parameters().back().tensor;
    CHECK(classifier.named_parameters().back().name == "score.weight");
    CHECK(score.shape() == Shape{3, 16});
    const std::vector<int32_t> a{5, 9, 200, 17}, b{33, 1};
    // Each row alone, by hand: the backbone's hidden states, pooled, times the head.
    auto by_hand = [&](const std::vector<int32_t>& row) {
      const auto n = static_cast<int64_t>(row.size());
      const Tensor hidden = lm->hidden_states(from_vector(row, {1, n}), nullptr).reshape({n, 16});
      const Tensor pooled = pooling == models::Pooling::last ? hidden.narrow(0, n - 1, 1) : mean(hidden, {0}, true);
      return linear(pooled, score);
    };
    const Tensor batch =
        classifier.forward(from_vector(std::vector<int32_t>{5, 9, 200, 17, -1, -1, 33, 1, -1, -1, -1, -1}, {2, 6}));
    REQUIRE(batch.shape() == Shape{2, 3});
    require_close(batch.narrow(0, 0, 1), by_hand(a), 1e-4, 1e-6);
    require_close(batch.narrow(0, 1, 1), by_hand(b), 1e-4, 1e-6);
    // The same row padded more (or alone, not padded) gives the same logits.
    const Tensor alone = classifier.forward(from_vector(b, {1, 2}));
    const Tensor padded =
        classifier.forward(from_vector(std::vector<int32_t>{33, 1, -1, -1, -1, -1, -1, -1, -1}, {1, 9}));
    require_close(alone, batch.narrow(0, 1, 1), 1e-5, 1e-6);
    require_close(padded, alone, 1e-5, 1e-6);
  }
  manual_seed(7);
  models::SequenceClassifier classifier(models::causal_lm_from_config(kTinyLlama), 2, models::Pooling::last);
  CHECK_THROWS_AS(classifier.forward(from_vector(std::vector<int32_t>{-1, 4}, {1, 2})), ValueError);
  CHECK_THROWS_AS(classifier.forward(from_vector(std::vector<int32_t>{-1, -1}, {1, 2})), ValueError);
}

TEST_CASE(
    "text classification: gradients reach the head and the backbone, training separates the task, LoRA "
    "trains the adapters and the head",
    "[cpu][text_classification]") {
  TempDir tmp;
  write_task(tmp);
  for (const bool lora : {false, true}) {
    const RecipeSpec spec = parse_recipe(recipe_text(tmp, lora ? "[lora]\nr = 4\nalpha = 8\n" : ""), "text.toml");
    train::RunLog log("", true);
    auto source = train::open_data_source(spec, Device(), log);
    manual_seed(2);
    auto model = recipe::build_model(spec, Device());
    std::vector<std::string> trained;
    for (const NamedTensor& p : model->named_parameters(nn::Params::trainable)) trained.push_back(p.name);
    CHECK(std::find(trained.begin(), trained.end(), "score.weight") != trained.end());
    CHECK(std::find(trained.begin(), trained.end(), "lm_head.weight") == trained.end());
    if (lora) {
      for (const std::string& name : trained)
        CHECK((name == "score.weight" || name.find("lora_") != std::string::npos));
    } else {
      CHECK(std::find(trained.begin(), trained.end(), "model.embed_tokens.weight") != trained.end());
    }
    auto optimizer = recipe::build_optimizer(spec, *model);
    for (int step = 0; step < 40; ++step) {
      const data::Batch batch = source->next();
      const Tensor loss = cross_entropy((*model)(batch.inputs), batch.targets);
      loss.backward();
      if (step == 0)
        for (const NamedTensor& p : model->named_parameters(nn::Params::trainable)) {
          INFO(p.name);
          CHECK(p.tensor.grad().defined());
        }
      optimizer->step();
      optimizer->zero_grad();
    }
    const auto metrics = source->evaluate(*model);
    INFO((lora ? "lora" : "full"));
    CHECK(metrics.at("accuracy") == 1.0);
    CHECK(metrics.at("macro_f1") == 1.0);
  }
}
