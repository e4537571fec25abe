// Recipes: loading typed values and defaults, includes, --set overrides, every error kind with
// its location, the resolved TOML round trip, and docs/recipes.md against the schema.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "libgenesis/recipe/build.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/recipe/schema.h"
#include "tests/generated_docs.h"
#include "tests/testing.h"

using namespace genesis;

namespace {

const std::string kRecipes = testing::source_path("tests/data/recipes") + "/";

// The smallest valid recipe; tests append or override what they exercise.
const std::string kMinimal = R"([run]
name = "t"
[model]
name = "mlp"
[optimizer]
name = "sgd"
lr = 0.1
[training]
epochs = 1
)";

// The message of the RecipeError that `f` throws (fails the test when it throws nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const RecipeError& e) {
    return e.what();
  }
  FAIL("expected a RecipeError");
  return "";
}

std::string text_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse_recipe(text, "inline.toml", overrides); });
}

std::string set_error(const std::vector<std::string>& overrides) {
  return text_error(kMinimal, overrides);
}

const models::MlpConfig& mlp_config(const RecipeSpec& r) {
  return std::get<models::MlpConfig>(r.model.config);
}

// Whether `key` is a key of the recipe's model (false for the [model] keys of other models).
bool has_key(const recipe::KeySpec& key, RecipeSpec r) {
  return std::visit([](auto* field) { return field != nullptr; }, key.field(r));
}

}  // namespace

TEST_CASE("recipe: a valid recipe loads typed values and schema defaults", "[cpu][recipe]") {
  RecipeSpec r = load_recipe(kRecipes + "valid.toml");
  CHECK(r.run.name == "fashion-mlp");
  CHECK(r.run.seed == 42);
  CHECK(r.run.device == "cuda:1");
  CHECK(r.run.out_dir == "runs");
  CHECK(r.run.threads == 0);
  CHECK(r.model.name == "mlp");
  CHECK(mlp_config(r).hidden == std::vector<int64_t>{512, 256, 128});
  CHECK(mlp_config(r).input_shape == std::vector<int64_t>{1, 28, 28});
  CHECK(mlp_config(r).num_classes == 10);
  CHECK(mlp_config(r).activation == "gelu");
  CHECK(r.model.dropout == 0.1);
  CHECK(r.data.name == "fashion_mnist");
  CHECK(r.data.path == "/usr/share/datasets/fashion-mnist");
  CHECK(r.data.val_fraction == 0.1);
  CHECK(r.data.normalize);
  CHECK_FALSE(r.data.shuffle);
  CHECK(r.data.prefetch == 2);
  CHECK(r.optimizer.name == "adamw");
  CHECK(r.optimizer.lr == 3e-3);
  CHECK(r.optimizer.weight_decay == 1.0);  // written as the int 1
  CHECK(r.optimizer.momentum == 0.0);
  CHECK_FALSE(r.optimizer.nesterov);
  CHECK(r.optimizer.betas == std::vector<double>{0.9, 0.95});
  CHECK(r.optimizer.eps == 1e-8);
  CHECK_FALSE(r.optimizer.amsgrad);
  CHECK(r.optimizer.no_decay == std::vector<std::string>{"bias"});
  CHECK(r.scheduler.name == "cosine");
  CHECK(r.scheduler.warmup_steps == 100);
  CHECK(r.scheduler.warmup_start_factor == 0.0);
  CHECK(r.scheduler.min_lr_factor == 0.05);
  CHECK(r.scheduler.gamma == 0.1);
  CHECK(r.scheduler.milestones.empty());
  CHECK(r.scheduler.div_factor == 25.0);
  CHECK(r.scheduler.final_div_factor == 1e4);
  CHECK(r.training.epochs == 3);
  CHECK(r.training.steps == 0);
  CHECK_FALSE(r.training.steps_given());
  CHECK(r.training.batch_size == 128);
  CHECK(r.training.grad_accum_steps == 1);
  CHECK(r.training.clip_grad_norm == 1.0);
  CHECK(r.training.clip_grad_value == 0.0);
  CHECK(r.training.log_every == 50);
  CHECK(r.training.eval_every == 0);
  CHECK(r.training.checkpoint_every == 0);
  CHECK(r.training.keep_last == 3);
  CHECK(r.eval.split == "val");
  CHECK(r.eval.batch_size == 0);
  CHECK(recipe::eval_batch_size(r) == 1000);  // a classifier's
  // The same text through parse_recipe gives the same spec.
  std::ifstream in(kRecipes + "valid.toml");
  std::stringstream text;
  text << in.rdbuf();
  CHECK(parse_recipe(text.str(), "valid.toml") == r);
}

TEST_CASE("recipe: includes merge key by key, later files win, the including file wins", "[cpu][recipe]") {
  RecipeSpec r = load_recipe(kRecipes + "child.toml");
  CHECK(r.run.name == "child");        // child over base
  CHECK(r.run.seed == 7);              // base, untouched by the others
  CHECK(r.optimizer.name == "adam");   // parts/adam.toml over base.toml
  CHECK(r.optimizer.lr == 0.003);      // child over both
  CHECK(r.optimizer.momentum == 0.9);  // base: [optimizer] is merged, not replaced
  CHECK(r.data.val_fraction == 0.2);   // parts/../shared.toml: relative to the including file
  CHECK(r.eval.split == "val");
  CHECK(mlp_config(r).hidden == std::vector<int64_t>{64});
  CHECK(r.training.steps == 500);
  CHECK(r.training.epochs == 2);
  CHECK(r.training.steps_given());
  CHECK(r.training.batch_size == 32);
}

TEST_CASE("recipe: include errors name the file and the include entry", "[cpu][recipe]") {
  std::string cycle = error_of([] { load_recipe(kRecipes + "cycle_a.toml"); });
  CHECK(cycle == kRecipes + "cycle_b.toml:1:12: include cycle: " + kRecipes + "cycle_a.toml -> " + kRecipes +
                     "cycle_b.toml -> " + kRecipes + "cycle_a.toml");
  // A mistake inside an included file points into that file.
  CHECK(error_of([] { load_recipe(kRecipes + "bad_include.toml"); }) ==
        kRecipes + "typo.toml:2:1: unknown key 'momentun' in [optimizer]; did you mean 'momentum'?");
  CHECK(error_of([] { load_recipe(kRecipes + "missing_include.toml"); }) ==
        kRecipes + "missing_include.toml:1:25: cannot read included recipe '" + kRecipes + "no_such_recipe.toml'");
  CHECK(error_of([] { load_recipe(kRecipes + "absent.toml"); }) ==
        "cannot read recipe file '" + kRecipes + "absent.toml'");
  CHECK(text_error("include = \"base.toml\"\n") ==
        "inline.toml:1:11: include expects a list of file names, got string \"base.toml\"");
  CHECK(text_error("include = [3]\n") == "inline.toml:1:12: include expects file names, got int 3");
  // Devices, FIFOs and directories are refused by name, without reading or blocking on them.
  CHECK_THAT(text_error("include = [\"/dev/zero\"]\n"),
             Catch::Contains("cannot read included recipe '/dev/zero'") && Catch::Contains("not a regular file"));
  genesis::testing::TempDir dir;
  REQUIRE(::mkfifo((dir / "fifo.toml").c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { load_recipe(dir / "fifo.toml"); }), Catch::Contains("a FIFO"));
  CHECK_THAT(error_of([&] { load_recipe(dir.path()); }), Catch::Contains("a directory"));
}

TEST_CASE("recipe: --set overrides are read as the key's type", "[cpu][recipe]") {
  RecipeSpec r =
      parse_recipe(kMinimal, "inline.toml",
                   {"optimizer.lr=3e-3", "optimizer.weight_decay=1", "training.batch_size=256", "data.shuffle=false",
                    "model.hidden=[1,2]", "optimizer.betas=[0.8, 0.9]", "optimizer.no_decay=[bias, ln_f]",
                    "run.out_dir=/tmp/my runs", "run.name=x", "run.name=y"});
  CHECK(r.optimizer.lr == 3e-3);
  CHECK(r.optimizer.weight_decay == 1.0);
  CHECK(r.training.batch_size == 256);
  CHECK_FALSE(r.data.shuffle);
  CHECK(mlp_config(r).hidden == std::vector<int64_t>{1, 2});
  CHECK(r.optimizer.betas == std::vector<double>{0.8, 0.9});
  CHECK(r.optimizer.no_decay == std::vector<std::string>{"bias", "ln_f"});
  CHECK(r.run.out_dir == "/tmp/my runs");  // strings are taken as typed
  CHECK(r.run.name == "y");                // the later override wins
  CHECK(parse_recipe(kMinimal, "inline.toml", {"optimizer.no_decay=[\"a\", \"b\"]"}).optimizer.no_decay ==
        std::vector<std::string>{"a", "b"});
  CHECK(parse_recipe(kMinimal, "inline.toml", {"optimizer.no_decay=[bias, \"ln\"]"}).optimizer.no_decay ==
        std::vector<std::string>{"bias", "ln"});
  CHECK(mlp_config(parse_recipe(kMinimal, "inline.toml", {"model.hidden=[]"})).hidden.empty());

  CHECK(set_error({"optimizer.lrr=1"}) ==
        "--set optimizer.lrr=1: unknown key 'lrr' in [optimizer]; did you mean 'lr'?");
  CHECK(set_error({"optimiser.lr=1"}) ==
        "--set optimiser.lr=1: unknown section [optimiser]; did you mean [optimizer]?");
  // A key that lives in another section is named there (issue 15).
  CHECK(set_error({"training.warmup=5"}) ==
        "--set training.warmup=5: unknown key 'warmup' in [training]; did you mean scheduler.warmup_steps?");
  CHECK(set_error({"optimizer.lr=fast"}) == "--set optimizer.lr=fast: optimizer.lr expects a float, got 'fast'");
  CHECK(set_error({"training.batch_size=2.5"}) ==
        "--set training.batch_size=2.5: training.batch_size expects an int, got float 2.5");
  CHECK(set_error({"data.shuffle=yes"}) == "--set data.shuffle=yes: data.shuffle expects a bool, got 'yes'");
  CHECK(set_error({"model.hidden=[1,x]"}) ==
        "--set model.hidden=[1,x]: model.hidden expects a list of int, got '[1,x]'");
  CHECK(set_error({"optimizer.lr=-1"}) == "--set optimizer.lr=-1: optimizer.lr must be > 0, got -1.0");
  CHECK(set_error({"optimizer.lr=1", "optimizer.lr=1\nseed = 2"}) ==
        "--set optimizer.lr=1\nseed = 2: optimizer.lr expects a float, got '1\nseed = 2'");
  CHECK(set_error({"lr=1"}) == "--set lr=1: expected section.key=value");
  CHECK(set_error({"optimizer.lr"}) == "--set optimizer.lr: expected section.key=value");
}

TEST_CASE("recipe: parse errors carry file:line:col", "[cpu][recipe]") {
  std::string e = text_error("[run]\nname = \"t\"\nseed = = 3\n");
  CHECK(e.starts_with("inline.toml:3:"));
  e = text_error("[run]\nname = \"unterminated\n");
  CHECK(e.starts_with("inline.toml:2:"));
  e = text_error("[run]\nname = \"a\"\nname = \"b\"\n");
  CHECK(e.starts_with("inline.toml:3:"));
}

TEST_CASE("recipe: unknown sections and keys, with did-you-mean and location", "[cpu][recipe]") {
  CHECK(text_error(kMinimal + "[optimiser]\nlr = 1\n") ==
        "inline.toml:10:2: unknown section [optimiser]; did you mean [optimizer]?");
  CHECK(
      text_error(kMinimal + "[wandb]\nproject = \"x\"\n") ==
      "inline.toml:10:2: unknown section [wandb]; sections are run, model, data, data.augment, optimizer, scheduler, "
      "training, lora, eval, amp, dist");
  CHECK(text_error("lr = 1\n" + kMinimal) ==
        "inline.toml:1:1: key 'lr' is outside any section; it belongs to [optimizer]");
  CHECK(text_error("rum = 1\n" + kMinimal) == "inline.toml:1:1: key 'rum' is outside any section; did you mean [run]?");
  CHECK(text_error("zzz = 1\n" + kMinimal) ==
        "inline.toml:1:1: key 'zzz' is outside any section; sections are run, model, data, data.augment, optimizer, "
        "scheduler, training, lora, eval, amp, dist");
  CHECK(text_error("[steps]\n" + kMinimal) ==
        "inline.toml:1:2: unknown section [steps]; 'steps' is a key of [training]");
  CHECK(text_error("[optimizer]\nname = \"sgd\"\n  lrr = 0.1\n") ==
        "inline.toml:3:3: unknown key 'lrr' in [optimizer]; did you mean 'lr'?");
  CHECK(text_error("[training]\nbtach_size = 8\n") ==
        "inline.toml:2:1: unknown key 'btach_size' in [training]; did you mean 'batch_size'?");
  CHECK(text_error("[optimizer]\nsteps = 8\n") ==
        "inline.toml:2:1: unknown key 'steps' in [optimizer]; 'steps' belongs to [training]");
  CHECK(text_error("[eval]\nfrobnicate = 8\n") ==
        "inline.toml:2:1: unknown key 'frobnicate' in [eval]; valid keys: split, batch_size, exact_match");
  // Dotted keys and sub-tables are keys of the section too.
  CHECK(text_error("optimizer.lrr = 1\n") == "inline.toml:1:11: unknown key 'lrr' in [optimizer]; did you mean 'lr'?");
  CHECK(text_error("[optimizer.adam]\nlr = 1\n") ==
        "inline.toml:1:12: unknown key 'adam' in [optimizer]; valid keys: name, lr, weight_decay, momentum, dampening, "
        "nesterov, betas, eps, amsgrad, no_decay");
  CHECK(text_error(kMinimal + "include = [\"base.toml\"]\n") ==
        "inline.toml:10:1: unknown key 'include' in [training]; include goes at the top of the file, before the first "
        "[section]");
  // The first mistake in file order is reported.
  CHECK(text_error("[training]\nzzz = 1\n[eval]\naaa = 1\n").starts_with("inline.toml:2:1: unknown key 'zzz'"));
}

TEST_CASE("recipe: wrong types name the expected type and the location", "[cpu][recipe]") {
  CHECK(text_error("[optimizer]\nlr = \"fast\"\n") ==
        "inline.toml:2:6: optimizer.lr expects a float, got string \"fast\"");
  CHECK(text_error("[training]\nbatch_size = 32.0\n") ==
        "inline.toml:2:14: training.batch_size expects an int, got float 32.0");
  CHECK(text_error("[data]\nshuffle = 1\n") == "inline.toml:2:11: data.shuffle expects a bool, got int 1");
  CHECK(text_error("[run]\nname = 5\n") == "inline.toml:2:8: run.name expects a string, got int 5");
  CHECK(text_error("[model]\nhidden = 64\n") == "inline.toml:2:10: model.hidden expects a list of int, got int 64");
  CHECK(text_error("[model]\nhidden = [64, 3.5]\n") ==
        "inline.toml:2:15: model.hidden[1] expects an int, got float 3.5");
  CHECK(text_error("[optimizer]\nbetas = [0.9, \"x\"]\n") ==
        "inline.toml:2:15: optimizer.betas[1] expects a float, got string \"x\"");
  CHECK(text_error("[optimizer]\nno_decay = [\"bias\", 1]\n") ==
        "inline.toml:2:21: optimizer.no_decay[1] expects a string, got int 1");
  CHECK(text_error("run = 3\n") == "inline.toml:1:1: [run] must be a table, got int 3");
  CHECK(text_error("[[run]]\nname = \"x\"\n") == "inline.toml:1:3: [run] must be a table, got a list");
  // Ints are accepted as floats, in lists too.
  RecipeSpec r = parse_recipe(kMinimal, "inline.toml", {"optimizer.betas=[0, 0]"});
  CHECK(r.optimizer.betas == std::vector<double>{0.0, 0.0});
}

TEST_CASE("recipe: values out of range name the valid values and the location", "[cpu][recipe]") {
  // kMinimal with `line` set in [section]: it replaces the line of the same key, or follows the header.
  auto with = [](const std::string& section, const std::string& line) {
    std::vector<std::string> lines;
    std::stringstream in(kMinimal);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    auto header = std::find(lines.begin(), lines.end(), "[" + section + "]");
    REQUIRE(header != lines.end());
    auto key = line.substr(0, line.find(' ') + 1);
    auto end = std::find_if(header + 1, lines.end(), [](const std::string& l) { return l.starts_with("["); });
    auto same = std::find_if(header + 1, end, [&](const std::string& l) { return l.starts_with(key); });
    if (same != end)
      *same = line;
    else
      lines.insert(header + 1, line);
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    return text_error(text);
  };
  CHECK(with("optimizer", "lr = -0.1") == "inline.toml:7:6: optimizer.lr must be > 0, got -0.1");
  CHECK(with("optimizer", "lr = 0") == "inline.toml:7:6: optimizer.lr must be > 0, got 0.0");
  CHECK(with("training", "batch_size = 0") == "inline.toml:9:14: training.batch_size must be >= 1, got 0");
  CHECK(with("optimizer", "name = \"adan\"") ==
        "inline.toml:6:8: optimizer.name must be one of: sgd, adam, adamw, lion; got \"adan\" (did you mean \"adam\"?)");
  CHECK(with("optimizer", "name = \"rmsprop\"") ==
        "inline.toml:6:8: optimizer.name must be one of: sgd, adam, adamw, lion; got \"rmsprop\"");
  CHECK(with("model", "dropout = 1.0") == "inline.toml:4:11: model.dropout must be in [0, 1), got 1.0");
  CHECK(with("optimizer", "betas = [0.9]") == "inline.toml:6:9: optimizer.betas must have 2 entries, got 1");
  CHECK(with("optimizer", "betas = [0.9, 1.5]") == "inline.toml:6:9: optimizer.betas[1] must be in [0, 1), got 1.5");
  CHECK(with("model", "hidden = [64, 0]") == "inline.toml:4:10: model.hidden[1] must be >= 1, got 0");
  CHECK(with("run", "threads = 1000") == "inline.toml:2:11: run.threads must be in [0, 256], got 1000");
  CHECK(with("optimizer", "eps = nan") == "inline.toml:6:7: optimizer.eps must be a finite number");
  CHECK(with("run", "device = \"gpu\"") ==
        "inline.toml:2:10: run.device must be \"cpu\", \"cuda\", \"cuda:N\" or \"auto\", got \"gpu\"");
  CHECK(with("run", "device = \"cuda:\"").starts_with("inline.toml:2:10: run.device must be"));
  CHECK(text_error("[run]\nname = \"a/b\"\n") == "inline.toml:2:8: run.name must not contain '/' or '\\', got \"a/b\"");
  CHECK(with("optimizer", "no_decay = [\"\"]") ==
        "inline.toml:6:12: optimizer.no_decay must not contain empty strings, got [\"\"]");
  for (const char* device : {"cpu", "cuda", "cuda:0", "cuda:12", "auto"})
    CHECK(parse_recipe(kMinimal, "inline.toml", {std::string("run.device=") + device}).run.device == device);
}

TEST_CASE("recipe: required keys and rules across keys", "[cpu][recipe]") {
  CHECK(text_error("[training]\nepochs = 1\n") ==
        "inline.toml: missing required keys run.name, model.name, optimizer.name, optimizer.lr");
  std::string no_length = kMinimal.substr(0, kMinimal.find("[training]"));
  CHECK(text_error(no_length) == "inline.toml: training needs steps or epochs (steps wins when both are given)");
  CHECK(text_error(kMinimal, {"optimizer.nesterov=true"}) ==
        "--set optimizer.nesterov=true: optimizer.nesterov needs momentum > 0 and dampening = 0");
  CHECK(text_error(kMinimal + "[scheduler]\nname = \"multistep\"\n") ==
        "inline.toml:11:1: scheduler multistep needs milestones (a list of steps)");
  CHECK(text_error(kMinimal + "[scheduler]\nname = \"multistep\"\nmilestones = [10, 10]\n") ==
        "inline.toml:12:1: scheduler.milestones must be strictly increasing");
  CHECK(text_error(kMinimal + "[scheduler]\nname = \"onecycle\"\nwarmup_steps = 5\n") ==
        "inline.toml:12:1: scheduler onecycle warms up by itself (pct_start); set warmup_steps = 0");
  CHECK(text_error(kMinimal, {"training.steps=10", "scheduler.warmup_steps=10"}) ==
        "--set scheduler.warmup_steps=10: scheduler.warmup_steps (10) must be smaller than training.steps (10)");
  CHECK(text_error(kMinimal + "[eval]\nsplit = \"val\"\n") ==
        "inline.toml:11:1: eval.split = \"val\" needs data.val_fraction > 0");
  CHECK(text_error(kMinimal, {"model.name=cnn", "model.input_shape=[784]"}) ==
        "--set model.input_shape=[784]: model cnn needs input_shape = [channels, height, width], got 1 entries");
  CHECK(text_error(kMinimal, {"model.name=cnn", "model.channels=[]"}) ==
        "--set model.channels=[]: model cnn needs at least one entry in channels");
  CHECK_THAT(text_error(kMinimal, {"model.name=gpt2", "dist.zero=3", "dist.bucket_mb=10"}),
             Catch::StartsWith("--set dist.bucket_mb=10: dist.bucket_mb sizes gradient buckets, and dist.zero = 3") &&
                 Catch::EndsWith("leave dist.bucket_mb out"));
  CHECK(parse_recipe(kMinimal, "inline.toml", {"dist.zero=2", "dist.bucket_mb=10"}).dist.bucket_mb == 10);
  // The same keys are fine where the rules do not apply.
  RecipeSpec r = parse_recipe(kMinimal, "inline.toml",
                              {"model.input_shape=[784]", "optimizer.momentum=0.9", "optimizer.nesterov=true",
                               "scheduler.name=multistep", "scheduler.milestones=[10, 20]"});
  CHECK(mlp_config(r).input_shape == std::vector<int64_t>{784});
  CHECK(r.optimizer.nesterov);
  CHECK(r.scheduler.milestones == std::vector<int64_t>{10, 20});
}

TEST_CASE("recipe: the [amp] section, its defaults, loss_scale's two forms and its errors", "[cpu][recipe]") {
  RecipeSpec r = parse_recipe(kMinimal, "inline.toml");
  CHECK(r.amp == RecipeSpec::Amp{.dtype = "f32",
                                 .loss_scale = "",
                                 .init_scale = 65536.0,
                                 .growth_factor = 2.0,
                                 .backoff_factor = 0.5,
                                 .growth_interval = 2000,
                                 .keep_f32 = {}});
  CHECK(r.to_toml().find("\n[amp]\ndtype = \"f32\"\n# loss_scale is not set\ninit_scale = 65536.0\n") !=
        std::string::npos);
  CHECK(parse_recipe(kMinimal, "inline.toml", {"amp.dtype=bf16"}).amp.dtype == "bf16");
  RecipeSpec fp16 = parse_recipe(kMinimal + "[amp]\ndtype = \"fp16\"\nkeep_f32 = [\"lm_head\", \"norm\"]\n",
                                 "inline.toml", {"amp.growth_interval=100"});
  CHECK(fp16.amp.dtype == "fp16");
  CHECK(fp16.amp.loss_scale.empty());  // dynamic
  CHECK(fp16.amp.growth_interval == 100);
  CHECK(fp16.amp.keep_f32 == std::vector<std::string>{"lm_head", "norm"});
  // loss_scale: "dynamic" or a number, written either way; a number reads back as itself.
  const std::string fp16_recipe = kMinimal + "[amp]\ndtype = \"fp16\"\n";
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"\"dynamic\"", "dynamic"}, {"1024", "1024.0"}, {"128.0", "128.0"}, {"\"6.5e4\"", "65000.0"}}) {
    INFO(text);
    RecipeSpec s = parse_recipe(fp16_recipe + "loss_scale = " + text + "\n", "inline.toml");
    CHECK(s.amp.loss_scale == expected);
    CHECK(parse_recipe(s.to_toml(), "resolved.toml") == s);
  }
  RecipeSpec set = parse_recipe(fp16_recipe, "inline.toml", {"amp.loss_scale=1024"});
  CHECK(set.amp.loss_scale == "1024.0");
  CHECK(set.to_toml().find("\nloss_scale = 1024.0\n") != std::string::npos);
  CHECK(parse_recipe(fp16_recipe, "inline.toml", {"amp.loss_scale=dynamic"}).amp.loss_scale == "dynamic");

  CHECK(text_error(kMinimal + "[amp]\ndtype = \"fp8\"\n") ==
        "inline.toml:11:9: amp.dtype must be one of: f32, bf16, fp16; got \"fp8\"");
  CHECK(set_error({"amp.dtype=fp8"}) == "--set amp.dtype=fp8: amp.dtype must be one of: f32, bf16, fp16; got \"fp8\"");
  CHECK(text_error(kMinimal + "[amp]\ndtype = \"bf16\"\nloss_scale = \"dynamic\"\n") ==
        "inline.toml:12:1: amp.loss_scale (valid: \"dynamic\" or a number > 0) is for amp.dtype = \"fp16\" only; "
        "amp.dtype is \"bf16\", which needs no loss scaling: remove amp.loss_scale");
  CHECK(set_error({"amp.loss_scale=512"})
            .starts_with("--set amp.loss_scale=512: amp.loss_scale (valid: \"dynamic\" or a number > 0) is for "
                         "amp.dtype = \"fp16\" only"));
  CHECK(text_error(fp16_recipe + "loss_scale = -1\n") ==
        "inline.toml:12:14: amp.loss_scale must be \"dynamic\" or a number > 0, got \"-1.0\"");
  CHECK(text_error(fp16_recipe + "loss_scale = \"auto\"\n") ==
        "inline.toml:12:14: amp.loss_scale must be \"dynamic\" or a number > 0, got \"auto\"");
  CHECK(text_error(fp16_recipe + "loss_scale = true\n") ==
        "inline.toml:12:14: amp.loss_scale expects a string or a number, got bool true");
  CHECK(set_error({"amp.dtype=fp16", "amp.loss_scale=0"}) ==
        "--set amp.loss_scale=0: amp.loss_scale must be \"dynamic\" or a number > 0, got \"0.0\"");
  CHECK(set_error({"amp.growth_factor=1"}) == "--set amp.growth_factor=1: amp.growth_factor must be > 1, got 1.0");
  CHECK(set_error({"amp.backoff_factor=1"}) ==
        "--set amp.backoff_factor=1: amp.backoff_factor must be in (0, 1), got 1.0");
  CHECK(set_error({"amp.init_scale=0"}) == "--set amp.init_scale=0: amp.init_scale must be > 0, got 0.0");
  CHECK(set_error({"amp.growth_interval=0"}) ==
        "--set amp.growth_interval=0: amp.growth_interval must be >= 1, got 0");
  CHECK(set_error({"amp.keep_f32=[lm_head, \"\"]"}) ==
        "--set amp.keep_f32=[lm_head, \"\"]: amp.keep_f32 must not contain empty strings, got [\"lm_head\", \"\"]");
}

TEST_CASE("recipe: steps wins over epochs when both are given", "[cpu][recipe]") {
  RecipeSpec epochs_only = parse_recipe(kMinimal, "inline.toml");
  CHECK_FALSE(epochs_only.training.steps_given());
  CHECK(epochs_only.training.epochs == 1);
  RecipeSpec both = parse_recipe(kMinimal, "inline.toml", {"training.steps=1000"});
  CHECK(both.training.steps_given());
  CHECK(both.training.steps == 1000);
  CHECK(both.training.epochs == 1);  // kept, but steps decides the run length
  std::string steps_only = kMinimal;
  steps_only.replace(steps_only.find("epochs = 1"), 10, "steps = 20");
  RecipeSpec s = parse_recipe(steps_only, "inline.toml");
  CHECK(s.training.steps_given());
  CHECK(s.training.epochs == 0);
  CHECK(text_error(kMinimal, {"training.epochs=0"}) == "--set training.epochs=0: training.epochs must be >= 1, got 0");
}

TEST_CASE("recipe: to_toml writes every key and reads back to the same spec", "[cpu][recipe]") {
  RecipeSpec r = load_recipe(kRecipes + "valid.toml",
                             {"run.out_dir=C:\\runs \"quoted\"\ttab", "optimizer.eps=1e-12", "scheduler.gamma=0.3",
                              "optimizer.lr=0.1", "scheduler.div_factor=25", "optimizer.no_decay=[bias, \"ln\"]"});
  std::string text = r.to_toml();
  CHECK(text == r.to_toml());
  CHECK(text.find("[run]\nname = \"fashion-mlp\"\nseed = 42\n") != std::string::npos);
  CHECK(text.find("div_factor = 25.0\n") != std::string::npos);
  CHECK(text.find("eps = 1e-12\n") != std::string::npos);
  CHECK(text.find("# steps is not set\nepochs = 3\n") != std::string::npos);
  CHECK(text.find("path = \"/usr/share/datasets/fashion-mnist\"\n") != std::string::npos);
  for (const auto& key : recipe::recipe_schema()) {
    const std::string name = key.key;
    INFO(key.full_name());
    const bool written = text.find("\n" + name + " = ") != std::string::npos ||
                         text.find("\n# " + name + " is not set") != std::string::npos;
    CHECK(written == has_key(key, r));  // the [model] keys of other models are left out
  }
  RecipeSpec back = parse_recipe(text, "resolved.toml");
  CHECK(back == r);
  CHECK(back.run.out_dir == "C:\\runs \"quoted\"\ttab");
  CHECK(back.to_toml() == text);
  RecipeSpec child = load_recipe(kRecipes + "child.toml");
  CHECK(parse_recipe(child.to_toml(), "resolved.toml") == child);
  RecipeSpec awkward =
      parse_recipe(kMinimal, "inline.toml", {"optimizer.lr=0.30000000000000004", "run.seed=9007199254740993"});
  CHECK(parse_recipe(awkward.to_toml(), "resolved.toml") == awkward);
}

TEST_CASE("recipe: [model] fills the config of model.name's family, other models' keys are ignored", "[cpu][recipe]") {
  // The family's own defaults, whatever name the file started with.
  const RecipeSpec cnn = parse_recipe(kMinimal, "inline.toml", {"model.hidden=[5]", "model.name=cnn"});
  REQUIRE(std::holds_alternative<models::CnnConfig>(cnn.model.config));
  CHECK(std::get<models::CnnConfig>(cnn.model.config) ==
        models::CnnConfig{.input_shape = {1, 28, 28}, .channels = {32, 64}, .fc = 128, .num_classes = 10});
  // Keys of other models are checked, then left out of the resolved recipe.
  const RecipeSpec mlp = parse_recipe(kMinimal, "inline.toml", {"model.channels=[8]", "model.n_embd=4"});
  CHECK(mlp_config(mlp) == models::MlpConfig{});
  CHECK(mlp.to_toml().find("channels") == std::string::npos);
  CHECK(mlp.to_toml().find("n_embd") == std::string::npos);
  CHECK(parse_recipe(mlp.to_toml(), "resolved.toml") == mlp);
  CHECK(set_error({"model.n_embd=0"}) == "--set model.n_embd=0: model.n_embd must be >= 1, got 0");
  const std::vector<RecipeChange> changes = recipe_changes(mlp, cnn);
  REQUIRE(changes.size() >= 2);
  CHECK((changes[0].key == "model.name" && changes[0].before == "\"mlp\"" && changes[0].after == "\"cnn\""));
  CHECK((changes[1].key == "model.hidden" && changes[1].after == "(not a key of this model)"));

  // A language model's unset keys hold 0, whatever the config type's default.
  const RecipeSpec qwen2 =
      parse_recipe(kMinimal, "inline.toml",
                   {"model.name=qwen2", "model.vocab_size=16", "model.hidden_size=8", "model.intermediate_size=12",
                    "model.num_hidden_layers=1", "model.num_attention_heads=2"});
  const auto& decoder = std::get<models::DecoderConfig>(qwen2.model.config);
  CHECK(decoder.model_type == "qwen2");
  CHECK(decoder.hidden_size == 8);
  CHECK(decoder.max_position_embeddings == 0);
  CHECK(decoder.rope_theta == 0.0);
  CHECK(qwen2.to_toml().find("\n# max_position_embeddings is not set\n") != std::string::npos);
  CHECK(recipe_json(qwen2)["model"]["head_dim"].is_null());
  CHECK_FALSE(recipe_json(qwen2)["model"].contains("hidden"));
  CHECK(parse_recipe(qwen2.to_toml(), "resolved.toml") == qwen2);
}

TEST_CASE("recipe: the schema is consistent with itself", "[cpu][recipe]") {
  using namespace recipe;
  std::set<std::string> names;
  for (const KeySpec& key : recipe_schema()) {
    INFO(key.full_name());
    CHECK(names.insert(key.full_name()).second);
    CHECK(std::string(key.doc).size() > 0);
    CHECK(std::any_of(recipe_sections().begin(), recipe_sections().end(),
                      [&](const SectionSpec& s) { return std::string_view(s.name) == key.section; }));
    if (!key.choices.empty()) CHECK(key.type() == ValueType::String);
    if (key.presence == Presence::Optional) {  // its zero value (0, "") must mean "not set"
      CHECK((key.type() == ValueType::Int || key.type() == ValueType::String));
      if (key.type() == ValueType::Int) CHECK((key.min && key.min->value >= 1));
      if (key.type() == ValueType::String) CHECK(constraint_violation(key, std::string()) != "");
    }
    if (key.number_as_text) CHECK(key.type() == ValueType::String);
    if (key.presence == Presence::Defaulted) {
      CHECK(key.fallback.index() == static_cast<size_t>(key.type()));
      CHECK(constraint_violation(key, key.fallback) == "");
    }
  }
  for (const RecipeRule& rule : recipe_rules()) {
    CHECK(!rule.anchors.empty());
    for (const char* anchor : rule.anchors) CHECK(names.count(anchor) == 1);
  }
}

TEST_CASE("recipe: docs/recipes.md matches the recipe schema", "[cpu][recipe]") {
  testing::require_generated_doc("docs/recipes.md", recipe_reference_markdown());
}

// Regression (issue 14): fK.toml including fK+1.toml twice, 24 deep, re-read every file once per
// path through the chain (2^24 reads). Each file is now read once; a diamond applies its
// values once; and the number of files is bounded.
TEST_CASE("recipe: include diamonds are read once and the file count is bounded", "[cpu][recipe]") {
  testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / (name + ".toml")) << text; };
  auto numbered = [](char prefix, int k) {
    std::ostringstream out;
    out << prefix << k;
    return out.str();
  };
  // "include = [\"NAME.toml\", ...]" (streams: GCC 12's -Wrestrict misfires on "literal" +
  // std::string temporaries).
  auto includes = [](std::initializer_list<std::string> names) {
    std::ostringstream out;
    out << "include = [";
    for (const std::string& name : names) out << (&name == names.begin() ? "" : ", ") << '"' << name << ".toml\"";
    out << "]\n";
    return out.str();
  };
  constexpr int kDepth = 24;
  for (int k = 0; k < kDepth; ++k) {
    const std::string next = numbered('f', k + 1);
    write(numbered('f', k), includes({next, next}));
  }
  write(numbered('f', kDepth), kMinimal);
  CHECK(load_recipe(dir / "f0.toml").run.name == "t");

  // A diamond: left and right both include base; left's value stands although base is reached
  // again through right.
  write("base", kMinimal + "[eval]\nbatch_size = 7\n");
  write("left", includes({"base"}) + "[eval]\nbatch_size = 11\n");
  write("right", includes({"base"}));
  write("top", includes({"left", "right"}));
  CHECK(load_recipe(dir / "top.toml").eval.batch_size == 11);

  for (int k = 0; k < 300; ++k) write(numbered('c', k), includes({numbered('c', k + 1)}));
  write("c300", kMinimal);
  CHECK_THAT(error_of([&] { load_recipe(dir / "c0.toml"); }), Catch::Matchers::Contains("more than 256 recipe files"));
}

TEST_CASE("recipe: path keys expand ${GENESIS_DATA}, ${NAME} and ~/, from any working directory", "[cpu][recipe]") {
  const testing::ScopedEnv home("HOME", "/home/someone");
  const testing::ScopedEnv no_data("GENESIS_DATA", nullptr);
  const testing::ScopedEnv no_cache("GENESIS_CACHE_DIR", nullptr);
  const testing::ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  const std::string lm = R"([run]
name = "t"
[model]
name = "gpt2"
vocab_size = 50
n_embd = 8
n_layer = 1
n_head = 2
[optimizer]
name = "adamw"
lr = 0.1
[training]
steps = 1
[data]
name = "tokens"
source = ["${GENESIS_DATA}/mobydick.txt", "~/texts", "plain/relative.txt"]
shards = "${MY_SHARDS}/x"
val_fraction = 0.1
[eval]
split = "val"
)";
  SECTION("the data root's chain of defaults, and the default tokenizer") {
    const testing::ScopedEnv shards("MY_SHARDS", "/srv/shards");
    RecipeSpec r = parse_recipe(lm, "inline.toml");
    CHECK(r.data.source == std::vector<std::string>{"/home/someone/.cache/genesis/data/mobydick.txt",
                                                    "/home/someone/texts", "plain/relative.txt"});
    CHECK(r.data.shards == "/srv/shards/x");
    CHECK(r.data.tokenizer == "/home/someone/.cache/genesis/data/gpt2");  // the default, expanded
    CHECK(r.run.out_dir == "runs");
    {
      const testing::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
      CHECK(parse_recipe(lm, "inline.toml").data.tokenizer == "/xdg/genesis/data/gpt2");
      const testing::ScopedEnv cache("GENESIS_CACHE_DIR", "/c");
      CHECK(parse_recipe(lm, "inline.toml").data.tokenizer == "/c/data/gpt2");
      const testing::ScopedEnv data("GENESIS_DATA", "/d");
      CHECK(parse_recipe(lm, "inline.toml").data.tokenizer == "/d/gpt2");
    }
    // The resolved recipe holds the expanded paths, and reads back to the same spec.
    CHECK(parse_recipe(r.to_toml(), "resolved.toml") == r);
    // --set values expand too; a '$' without '{' is a character of the name.
    r = parse_recipe(lm, "inline.toml", {"data.tokenizer=${GENESIS_DATA}/bytes", "model.init_from=~/models/$x"});
    CHECK(r.data.tokenizer == "/home/someone/.cache/genesis/data/bytes");
    CHECK(r.model.init_from == "/home/someone/models/$x");
  }
  SECTION("an unset variable or an unclosed ${ is an error naming the key and where it was set") {
    std::string e = text_error(lm);
    CHECK(e.find("inline.toml:17:") == 0);
    CHECK(e.find("data.shards") != std::string::npos);
    CHECK(e.find("MY_SHARDS is not set") != std::string::npos);
    e = text_error(kMinimal, {"run.out_dir=${OUT"});
    CHECK(e.find("--set run.out_dir") != std::string::npos);
    CHECK(e.find("without its closing }") != std::string::npos);
  }
}
