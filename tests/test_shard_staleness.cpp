// Token shards a recipe prepares from data.source keep what they were made from (source.json):
// a changed source, tokenizer or val_fraction prepares them again, unchanged ones are reused
// untouched, and shards without a source.json are used as they are.
#include <fstream>
#include <string>
#include <vector>

#include "libgenesis/data/shards.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/recipe/recipe.h"
#include "tests/testing.h"
#include "tests/generated_docs.h"

using namespace genesis;
namespace fs = std::filesystem;

namespace {

const fs::path kTokenizer = fs::path(genesis::testing::source_path("tests/fixtures/tokenizer_bpe/tokenizer.json"));

RecipeSpec token_recipe(const testing::TempDir& dir, const std::vector<std::string>& overrides = {}) {
  const std::string toml = R"([run]
name = "staleness"
[model]
name = "gpt2"
vocab_size = 703
n_positions = 16
n_embd = 8
n_layer = 1
n_head = 2
[data]
name = "tokens"
shards = ")" + (dir / "shards").string() + R"("
tokenizer = ")" + (dir / "tokenizer.json").string() + R"("
source = [")" + (dir / "a.txt").string() + R"(", ")" + (dir / "b.txt").string() + R"("]
val_fraction = 0.1
seq_len = 8
[optimizer]
name = "sgd"
lr = 0.1
[training]
steps = 1
[eval]
split = "val"
)";
  return parse_recipe(toml, "staleness.toml", overrides);
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// prepare_token_data's notes, one string each.
struct Prepared {
  recipe::TokenData data;
  std::vector<std::string> notes;
  bool tokenized() const {
    for (const std::string& n : notes)
      if (n.find("tokenizing") != std::string::npos) return true;
    return false;
  }
};

Prepared prepare(const RecipeSpec& spec) {
  Prepared p;
  p.data = recipe::prepare_token_data(spec, [&](const std::string& line) { p.notes.push_back(line); });
  return p;
}

int64_t tokens(const fs::path& shard) { return data::TokenShard(shard).size(); }

struct Fixture {
  testing::TempDir dir{"shard_staleness"};
  Fixture() {
    fs::copy_file(kTokenizer, dir / "tokenizer.json");
    write(dir / "a.txt", "Call me Ishmael. Some years ago, never mind how long precisely, having little money.");
    write(dir / "b.txt", "It is a way I have of driving off the spleen and regulating the circulation.");
  }
};

}  // namespace

TEST_CASE("token shards: source.json is written, unchanged sources reuse the shards untouched", "[cpu][shards]") {
  Fixture f;
  const RecipeSpec spec = token_recipe(f.dir);
  const Prepared first = prepare(spec);
  REQUIRE(first.tokenized());
  REQUIRE(fs::exists(f.dir / "shards" / data::kShardSourcesFile));
  const auto written = fs::last_write_time(first.data.train);

  const Prepared again = prepare(spec);
  CHECK(again.notes.empty());
  CHECK(fs::last_write_time(again.data.train) == written);
  CHECK(again.data.val == f.dir / "shards" / "val.bin");
}

TEST_CASE("token shards: a changed source is prepared again, a reader of the old shards unaffected", "[cpu][shards]") {
  Fixture f;
  const RecipeSpec spec = token_recipe(f.dir);
  const Prepared first = prepare(spec);
  const int64_t before = tokens(first.data.train);
  const data::TokenShard reader(first.data.train);  // a run training on the old shards meanwhile
  const uint32_t last_token = reader[reader.size() - 1];

  write(f.dir / "a.txt", "Call me Ishmael.");
  const Prepared after = prepare(spec);
  REQUIRE(after.tokenized());
  CHECK(after.notes.front() == "data.source changed since " + (f.dir / "shards").string() + " was made (" +
                                   (f.dir / "a.txt").string() + " differs): preparing the shards again");
  CHECK(tokens(after.data.train) < before);
  // The old file was replaced by a rename: its mapping still holds the old tokens.
  CHECK(reader.size() == before);
  CHECK(reader[reader.size() - 1] == last_token);

  // Prepared again, the sources match once more.
  CHECK(prepare(spec).notes.empty());
}

TEST_CASE("token shards: a changed tokenizer, val_fraction or source list is prepared again", "[cpu][shards]") {
  Fixture f;
  prepare(token_recipe(f.dir));
  const std::string shards = (f.dir / "shards").string();

  // Each step changes one thing from the step before.
  std::vector<std::string> overrides{"data.val_fraction=0.2"};
  const Prepared val = prepare(token_recipe(f.dir, overrides));
  REQUIRE(val.tokenized());
  CHECK(val.notes.front() == "data.val_fraction changed since " + shards +
                                 " was made (0.1 -> 0.2): preparing the shards again");

  overrides.push_back("data.source=[\"" + (f.dir / "a.txt").string() + "\"]");
  const Prepared one_source = prepare(token_recipe(f.dir, overrides));
  REQUIRE(one_source.tokenized());
  const std::string gone = (f.dir / "b.txt").string() + " is no longer a source";
  CHECK(one_source.notes.front().find(gone) != std::string::npos);

  // Another byte in the tokenizer's file (whitespace: the same tokenizer, but nothing proves it).
  std::ofstream(f.dir / "tokenizer.json", std::ios::app) << "\n";
  const Prepared tokenizer = prepare(token_recipe(f.dir, overrides));
  REQUIRE(tokenizer.tokenized());
  CHECK(tokenizer.notes.front() == "data.tokenizer changed since " + shards + " was made (" +
                                       (f.dir / "tokenizer.json").string() + " differs): preparing the shards again");
  CHECK(prepare(token_recipe(f.dir, overrides)).notes.empty());
}

TEST_CASE("token shards: without source.json they are used as they are, rewritten ones are made again",
          "[cpu][shards]") {
  Fixture f;
  const RecipeSpec spec = token_recipe(f.dir);
  const Prepared first = prepare(spec);
  const int64_t before = tokens(first.data.train);
  const auto written = fs::last_write_time(first.data.train);

  // Shards made by hand or by an older genesis: nothing says what from, so nothing is compared.
  fs::remove(f.dir / "shards" / data::kShardSourcesFile);
  write(f.dir / "a.txt", "Call me Ishmael.");
  const Prepared as_is = prepare(spec);
  CHECK(as_is.notes.empty());
  CHECK(fs::last_write_time(as_is.data.train) == written);
  CHECK(tokens(as_is.data.train) == before);

  // Shards rewritten after their source.json (a preparation killed between its files): made again.
  fs::remove(f.dir / "shards" / "train.bin");
  REQUIRE(prepare(spec).tokenized());  // with a source.json again
  data::write_token_shard(f.dir / "shards" / "train.bin", {1, 2, 3}, 703);
  const Prepared repaired = prepare(spec);
  REQUIRE(repaired.tokenized());
  CHECK(repaired.notes.front().starts_with((f.dir / "shards").string() + " no longer matches its source.json (train.bin has"));

  // A recipe without data.source has nothing to compare either.
  fs::remove(f.dir / "a.txt");
  CHECK(prepare(token_recipe(f.dir, {"data.source=[]"})).notes.empty());
}

TEST_CASE("tokenize_to_shards: no val.bin or source.json of earlier shards is left beside new ones", "[cpu][shards]") {
  Fixture f;
  prepare(token_recipe(f.dir));
  const fs::path shards = f.dir / "shards";
  REQUIRE(fs::exists(shards / "val.bin"));
  // `genesis data tokenize --val-fraction 0` without sources described (as an older caller would):
  // the old val.bin would be read as these shards' validation tokens, the old source.json as theirs.
  data::TokenizeOptions options;
  options.val_fraction = 0;
  data::tokenize_to_shards(data::Tokenizer::load(kTokenizer), {f.dir / "a.txt"}, shards, options);
  CHECK(!fs::exists(shards / "val.bin"));
  CHECK(!fs::exists(shards / data::kShardSourcesFile));
}
