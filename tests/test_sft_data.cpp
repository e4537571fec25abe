// Supervised fine-tuning data: JSONL records (formats, gzip, errors by file and line, skipping),
// labels from the chat template's assistant spans, the prepared cache and its key, and the
// packed rows: per-document losses and the validation loss equal to unpacked ones.
#include <zlib.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "libgenesis/data/sft_prepare.h"
#include "libgenesis/data/sft_records.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/data_source.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::data;
using namespace genesis::testing;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

void write_gz(const fs::path& path, const std::string& text) {
  gzFile gz = gzopen(path.c_str(), "wb");
  REQUIRE(gz != nullptr);
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
}

std::string conversation(const std::string& user, const std::string& answer) {
  return nlohmann::json{{"messages",
                         {{{"role", "system"}, {"content", "Be brief."}},
                          {{"role", "user"}, {"content", user}},
                          {{"role", "assistant"}, {"content", answer}}}}}
             .dump() +
         "\n";
}

std::vector<SftRecord> read_all(const std::vector<fs::path>& files, SftFormat format = SftFormat::automatic,
                                bool skip_bad = false) {
  SftReader reader(files, format, skip_bad);
  std::vector<SftRecord> out;
  while (auto r = reader.next()) out.push_back(*r);
  return out;
}

std::string error_of(const std::vector<fs::path>& files) {
  try {
    read_all(files);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("sft records: the three formats, gzip, directories, blank lines", "[cpu][sft]") {
  TempDir tmp;
  write_text_file(tmp.path() / "chats/a.jsonl", conversation("2+2?", "4") + "\n" + conversation("3+3?", "6"));
  write_gz(tmp.path() / "chats/b.jsonl.gz", conversation("1+1?", "2"));
  write_text_file(tmp.path() / "chats/notes.txt", "not a record file");
  const std::vector<fs::path> files = sft_files({(tmp.path() / "chats").string()});
  REQUIRE(files.size() == 2);
  const std::vector<SftRecord> records = read_all(files);
  REQUIRE(records.size() == 3);
  CHECK(records[0].format == SftFormat::messages);
  CHECK(records[0].messages.size() == 3);
  CHECK(records[2].messages[2] == ChatMessage{"assistant", "2"});
  CHECK(records[1].where == (tmp.path() / "chats/a.jsonl").string() + ":3");

  write_text_file(tmp.path() / "pc.jsonl", R"({"prompt": "Q: hi", "completion": " A: hello"})" "\n");
  write_text_file(tmp.path() / "text.jsonl", R"({"text": "plain words"})" "\n");
  const auto pc = read_all({tmp.path() / "pc.jsonl"}), text = read_all({tmp.path() / "text.jsonl"});
  CHECK(pc.at(0).format == SftFormat::prompt_completion);
  CHECK(pc.at(0).completion == " A: hello");
  CHECK(text.at(0).text == "plain words");
}

TEST_CASE("sft records: a bad record is an error naming file and line, or skipped and counted", "[cpu][sft]") {
  TempDir tmp;
  const fs::path f = tmp.path() / "bad.jsonl";
  auto line2 = [&](const std::string& bad) {
    write_text_file(f, conversation("a", "b") + bad + "\n");
    return error_of({f});
  };
  CHECK_THAT(line2("{not json"), Contains("bad.jsonl:2: not a JSON record"));
  CHECK_THAT(line2(R"({"messages": []})"), Contains(":2: \"messages\" is an empty conversation"));
  CHECK_THAT(line2(R"({"messages": [{"role": "robot", "content": "x"}]})"),
             Contains(":2: turn 0 has the role \"robot\"") && Contains("system, user and assistant"));
  CHECK_THAT(line2(R"({"messages": [{"role": "user", "content": 5}]})"),
             Contains(":2: turn 0 \"content\" is number 5, not a string"));
  CHECK_THAT(line2(R"({"messages": [{"role": "user", "content": "only a question"}]})"),
             Contains("no assistant turn"));
  CHECK_THAT(line2(R"({"text": "a text record in a messages file"})"), Contains(":2: the record has no \"messages\""));
  CHECK_THAT(line2(R"([1, 2])"), Contains("a JSON object, not array"));
  CHECK_THAT(line2(R"({"question": "x"})"), Contains("data.skip_bad"));
  // A long bad value is cut in the message, control characters escaped.
  const std::string noisy = line2(R"({"messages": [{"role": ")" + std::string(500, 'x') + R"(\u0001", "content": "c"}]})");
  CHECK(noisy.size() < 400);
  CHECK(noisy.find('\x01') == std::string::npos);
  // The first record's format decides: a text file gets no conversation guessed from its keys.
  write_text_file(tmp.path() / "none.jsonl", R"({"question": "x", "answer": "y"})" "\n");
  CHECK_THAT(error_of({tmp.path() / "none.jsonl"}), Contains("none of the formats") && Contains("question"));

  write_text_file(f, conversation("a", "b") + "{oops\n" + R"({"messages": []})" + "\n" + conversation("c", "d"));
  SftReader reader({f}, SftFormat::automatic, /*skip_bad=*/true);
  int good = 0;
  while (reader.next()) ++good;
  CHECK(good == 2);
  CHECK(reader.skipped() == 2);
  CHECK_THAT(reader.first_skipped(), Contains("bad.jsonl:2"));

  CHECK_THAT(error_of({tmp.path() / "missing.jsonl"}), Contains("missing.jsonl"));
  CHECK_THROWS_WITH(sft_files({(tmp.path() / "nowhere").string()}), Contains("nowhere does not exist"));
  write_text_file(tmp.path() / "data.csv", "a,b\n");
  CHECK_THROWS_WITH(sft_files({(tmp.path() / "data.csv").string()}), Contains("not a .jsonl"));
  // A truncated gzip file is an error, not a silent end of the data.
  write_gz(tmp.path() / "cut.jsonl.gz", conversation("q", "a") + conversation("q2", "a2"));
  const auto size = fs::file_size(tmp.path() / "cut.jsonl.gz");
  fs::resize_file(tmp.path() / "cut.jsonl.gz", size - 12);
  CHECK_THAT(error_of({tmp.path() / "cut.jsonl.gz"}), Contains("cut.jsonl.gz"));
}

TEST_CASE("sft labels: the assistant turns and their end-of-turn tokens train, nothing else", "[cpu][sft]") {
  TempDir tmp;
  write_byte_tokenizer(tmp.path());
  const Tokenizer tokenizer = Tokenizer::load(tmp.path());
  const ChatTemplate chat = ChatTemplate::from_tokenizer_config(tmp.path() / "tokenizer_config.json");
  SftRecord r;
  r.format = SftFormat::messages;
  r.messages = {{"system", "S"}, {"user", "Q1"}, {"assistant", "A1"}, {"user", "Q2"}, {"assistant", "A2!"}};
  auto trained_text = [&](TrainOn on) {
    const SftExample e = SftEncoder(tokenizer, &chat, "<|im_end|>", on).encode(r);
    REQUIRE(e.ids.size() == e.labels.size());
    std::string text;
    for (size_t i = 0; i < e.ids.size(); ++i) {
      if (e.labels[i] == -100) continue;
      CHECK(e.labels[i] == e.ids[i]);
      text += tokenizer.decode({static_cast<TokenId>(e.ids[i])});
    }
    return text;
  };
  CHECK(trained_text(TrainOn::assistant) == "A1<|im_end|>\nA2!<|im_end|>\n");
  CHECK(trained_text(TrainOn::completion) == "A2!<|im_end|>\n");
  CHECK(trained_text(TrainOn::all) == chat.render(r.messages, false));
  // <|im_start|> is one token, as the tokenizer's added tokens say.
  const SftExample e = SftEncoder(tokenizer, &chat, "<|im_end|>", TrainOn::assistant).encode(r);
  CHECK(e.ids.front() == 256);

  SftRecord pc;
  pc.format = SftFormat::prompt_completion;
  pc.prompt = "2+3=";
  pc.completion = "5";
  const SftExample p = SftEncoder(tokenizer, &chat, "<|im_end|>", TrainOn::assistant).encode(pc);
  REQUIRE(p.ids.size() == 6);
  CHECK(p.labels == std::vector<int32_t>{-100, -100, -100, -100, '5', 257});
}

TEST_CASE("sft prepare: prepared once, reused, prepared again when a source or the template changes", "[cpu][sft]") {
  TempDir tmp;
  write_byte_tokenizer(tmp.path() / "model");
  const Tokenizer tokenizer = Tokenizer::load(tmp.path() / "model");
  const ChatTemplate chat = ChatTemplate::from_tokenizer_config(tmp.path() / "model/tokenizer_config.json");
  const SftEncoder encoder(tokenizer, &chat, "<|im_end|>", TrainOn::assistant);
  std::string records;
  for (int i = 0; i < 10; ++i) {
    const std::string n = std::to_string(i);
    records += conversation(std::string("q").append(n), std::string("answer ").append(n));
  }
  write_text_file(tmp.path() / "train.jsonl", records);
  SftPrepareOptions o;
  o.train_files = {tmp.path() / "train.jsonl"};
  o.val_fraction = 0.2;
  o.cache_dir = tmp.path() / "cache";
  o.template_text = kChatmlTemplate;
  const SftPrepared first = prepare_sft(encoder, o);
  CHECK_FALSE(first.reused);
  CHECK(first.train.examples() == 8);
  CHECK(first.val.examples() == 2);
  const SftPrepared again = prepare_sft(encoder, o);
  CHECK(again.reused);
  CHECK(again.dir == first.dir);
  // The same examples come back.
  CHECK(again.train.ids.numel() == first.train.ids.numel());

  write_text_file(tmp.path() / "train.jsonl", records + conversation("one more", "record"));
  const SftPrepared changed = prepare_sft(encoder, o);
  CHECK_FALSE(changed.reused);
  CHECK(changed.dir != first.dir);
  o.template_text += " ";
  CHECK(prepare_sft(encoder, o).dir != changed.dir);
  // No temporary directory is left behind.
  for (const auto& e : fs::directory_iterator(tmp.path() / "cache/sft"))
    CHECK_FALSE(e.path().filename().string().starts_with(".tmp"));
}

namespace {

const char* kTinyLlama = R"({"model_type": "llama", "vocab_size": 259, "hidden_size": 16, "intermediate_size": 24,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64})";
const char* kTinyGpt2 = R"({"model_type": "gpt2", "vocab_size": 259, "n_positions": 64, "n_embd": 24, "n_layer": 2,
  "n_head": 3, "activation_function": "gelu_new", "n_inner": null})";

// The summed loss of a row's targets, with every target outside [begin, end) ignored.
double loss_of_span(models::CausalLM& lm, const Tensor& ids, const Tensor& targets, const Tensor& doc_start,
                    int64_t begin, int64_t end) {
  Tensor kept = full(targets.shape(), -100.0, {.dtype = DType::i64});
  for (int64_t t = begin; t < end; ++t) kept.data<int64_t>()[t] = targets.data<int64_t>()[t];
  return lm.loss(ids, kept, Reduction::sum, doc_start).item();
}

}  // namespace

TEST_CASE("sft rows: a packed row gives each document the loss and gradients it has alone", "[cpu][sft]") {
  for (const char* config : {kTinyLlama, kTinyGpt2}) {
    manual_seed(11);
    auto lm = models::causal_lm_from_config(config);
    const std::vector<int64_t> lengths{5, 2, 9, 3};
    int64_t total = 0;
    for (int64_t n : lengths) total += n;
    const int64_t width = total + 4;  // padding at the end, a document of its own
    const Tensor ids = randint(0, 259, {1, width});
    Tensor targets = full({1, width}, -100.0, {.dtype = DType::i64});
    Tensor starts = zeros({1, width}, {.dtype = DType::i32});
    int64_t at = 0;
    for (int64_t n : lengths) {
      for (int64_t i = 0; i < n; ++i) {
        starts.data<int32_t>()[at + i] = static_cast<int32_t>(at);
        if (i + 1 < n) targets.data<int64_t>()[at + i] = ids.data<int64_t>()[at + i + 1];
      }
      at += n;
    }
    for (int64_t i = at; i < width; ++i) starts.data<int32_t>()[i] = static_cast<int32_t>(at);
    at = 0;
    for (int64_t n : lengths) {
      const Tensor alone_ids = ids.narrow(1, at, n).contiguous(), alone_targets = targets.narrow(1, at, n).contiguous();
      const double alone = lm->loss(alone_ids, alone_targets, Reduction::sum).item();
      const double packed = loss_of_span(*lm, ids, targets, starts, at, at + n);
      INFO(lm->model_type() << ": the document at " << at << " of " << n << " tokens");
      CHECK(packed == Approx(alone).epsilon(1e-5));
      at += n;
    }
    // Gradients: the packed row's summed loss against the documents' summed losses alone.
    auto grads = [&](const std::function<Tensor()>& loss) {
      for (Tensor p : lm->parameters()) p.set_grad(Tensor());
      loss().backward();
      std::vector<Tensor> out;
      for (const Tensor& p : lm->parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : zeros_like(p));
      return out;
    };
    const std::vector<Tensor> packed = grads([&] { return lm->loss(ids, targets, Reduction::sum, starts); });
    const std::vector<Tensor> alone = grads([&] {
      Tensor sum_of_documents;
      int64_t begin = 0;
      for (int64_t n : lengths) {
        Tensor l = lm->loss(ids.narrow(1, begin, n).contiguous(), targets.narrow(1, begin, n).contiguous(),
                            Reduction::sum);
        sum_of_documents = sum_of_documents.defined() ? add(sum_of_documents, l) : l;
        begin += n;
      }
      return sum_of_documents;
    });
    for (size_t i = 0; i < packed.size(); ++i) require_close(packed[i], alone[i], 1e-4, 1e-6);
  }
}

TEST_CASE("sft source: packed and unpacked rows give the same validation loss", "[cpu][sft]") {
  TempDir tmp;
  write_byte_tokenizer(tmp.path() / "model");
  std::string records;
  for (int i = 0; i < 40; ++i)
    records += conversation("what is " + std::to_string(i) + " + " + std::to_string(i * 7 % 13) + "?",
                            std::string(static_cast<size_t>(1 + i % 9), 'x') + std::to_string(i + i * 7 % 13));
  write_text_file(tmp.path() / "train.jsonl", records);
  const std::string recipe = R"(
[run]
name = "sft-test"
device = "cpu"
[model]
name = "llama"
vocab_size = 259
hidden_size = 16
intermediate_size = 24
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 2
max_position_embeddings = 128
[data]
name = "sft"
path = ")" + (tmp.path() / "train.jsonl").string() + R"("
tokenizer = ")" + (tmp.path() / "model/tokenizer.json").string() + R"("
chat_template = ")" + (tmp.path() / "model/tokenizer_config.json").string() + R"("
cache_dir = ")" + (tmp.path() / "cache").string() + R"("
seq_len = 128
val_fraction = 0.25
[optimizer]
name = "adamw"
lr = 0.001
[training]
steps = 1
batch_size = 2
[eval]
split = "val"
batch_size = 3
)";
  auto evaluate = [&](bool pack) {
    const RecipeSpec spec = parse_recipe(recipe, "sft.toml", {std::string("data.pack=") + (pack ? "true" : "false")});
    train::RunLog log("", true);
    auto source = train::open_data_source(spec, Device(), log);
    manual_seed(5);
    auto model = recipe::build_model(spec, Device());
    source->check_model(*model);
    REQUIRE(source->has_evaluation());
    // A training batch counts what it trains.
    const data::Batch b = source->next();
    int64_t counted = 0;
    for (int64_t i = 0; i < b.targets.numel(); ++i) counted += b.targets.data<int64_t>()[i] != -100;
    CHECK(b.counted_targets() == counted);
    CHECK(b.doc_start.defined() == pack);
    return source->evaluate(*model);
  };
  const auto packed = evaluate(true), unpacked = evaluate(false);
  CHECK(packed.at("tokens") == unpacked.at("tokens"));
  CHECK(packed.at("tokens") > 0);
  CHECK(packed.at("loss") == Approx(unpacked.at("loss")).epsilon(1e-5));
}
