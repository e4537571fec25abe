// genesis train RECIPE [--set k=v]... [--out DIR] [--resume] [--overwrite] [--device D] [--seed N]
//               [--nproc-per-node N]
// genesis eval [RECIPE] --checkpoint DIR [--adapter DIR] [--split test|val] [--device D] [--set k=v]...
// genesis recipe show RECIPE [--set k=v]... [--json] [--memory [--world-size N]]
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "apps/genesis/commands.h"
#include "libgenesis/dist/env.h"
#include "libgenesis/dist/launcher.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/memory_estimate.h"
#include "libgenesis/train/trainer.h"

namespace genesis::cli {

namespace {

struct RecipeArgs {
  std::string path;
  std::vector<std::string> sets;
};

void add_recipe_args(CLI::App* sub, RecipeArgs& a) {
  sub->add_option("recipe", a.path, "Recipe file (TOML)")->required()->check(CLI::ExistingFile);
  sub->add_option("--set", a.sets, "Override a recipe key: section.key=value (repeatable)");
}

// The rank's command line for `--nproc-per-node`: this program with the parsed options, less
// that one.
std::vector<std::string> rank_command(const RecipeArgs& a, const std::string& out, const std::string& device,
                                      int64_t seed, bool resume, bool overwrite, bool quiet) {
  std::vector<std::string> argv{"/proc/self/exe", "train", a.path};
  for (const std::string& s : a.sets) argv.insert(argv.end(), {"--set", s});
  if (!out.empty()) argv.insert(argv.end(), {"--out", out});
  if (!device.empty()) argv.insert(argv.end(), {"--device", device});
  if (seed >= 0) argv.insert(argv.end(), {"--seed", std::to_string(seed)});
  if (resume) argv.emplace_back("--resume");
  if (overwrite) argv.emplace_back("--overwrite");
  if (quiet) argv.emplace_back("--quiet");
  return argv;
}

}  // namespace

void add_train_commands(CLI::App& app) {
  {
    CLI::App* sub = app.add_subcommand("train", "Train a model from a recipe");
    auto a = std::make_shared<RecipeArgs>();
    auto out = std::make_shared<std::string>();
    auto device = std::make_shared<std::string>();
    auto seed = std::make_shared<int64_t>(-1);
    auto resume = std::make_shared<bool>(false);
    auto overwrite = std::make_shared<bool>(false);
    auto quiet = std::make_shared<bool>(false);
    auto nproc = std::make_shared<int>(1);
    add_recipe_args(sub, *a);
    sub->add_option("--out", *out, "Run directory (default: <run.out_dir>/<run.name>)");
    sub->add_flag("--resume", *resume, "Continue the run from its latest checkpoint");
    sub->add_flag("--overwrite", *overwrite, "Replace an existing run directory");
    sub->add_option("--device", *device, "cpu, cuda, cuda:N or auto (overrides run.device)")->check(device_validator());
    sub->add_option("--seed", *seed, "Random seed (overrides run.seed)");
    sub->add_flag("-q,--quiet", *quiet, "No per-step lines on stderr");
    sub->add_option("--nproc-per-node", *nproc,
                    "Data parallel: start N ranks on this host (as torchrun does), one per GPU for CUDA")
        ->check(CLI::Range(1, 1024));
    register_command(sub, [=] {
      GENESIS_CHECK(!(*resume && *overwrite), UsageError, "--resume and --overwrite exclude each other");
      auto run_dir = [&](const RecipeSpec& spec) {
        return out->empty() ? train::default_run_dir(spec) : std::filesystem::path(*out);
      };
      if (*nproc > 1) {
        const dist::ProcessEnv env = dist::read_process_env(/*need_rendezvous=*/false);
        GENESIS_CHECK(!env.distributed(), UsageError, "--nproc-per-node starts the ranks itself, but this process is ",
                      env.describe(), "; leave --nproc-per-node out under torchrun, mpirun or srun");
        // Recipe and device errors are reported once, here, rather than by every rank.
        std::vector<std::string> sets = a->sets;
        if (!device->empty()) sets.push_back("run.device=" + *device);
        const RecipeSpec spec = load_recipe(a->path, sets);
        train::check_local_launch(spec, *nproc, run_dir(spec));
        return dist::launch_local(
            {.nproc = *nproc, .command = rank_command(*a, *out, *device, *seed, *resume, *overwrite, *quiet)});
      }
      std::vector<std::string> sets = a->sets;
      if (!device->empty()) sets.push_back("run.device=" + *device);
      if (*seed >= 0) sets.push_back("run.seed=" + std::to_string(*seed));
      RecipeSpec spec = load_recipe(a->path, sets);
      int code = train::run_training(spec, {.run_dir = *out, .resume = *resume, .overwrite = *overwrite, .quiet = *quiet});
      if (code == 0 && dist::read_process_env(false).rank == 0)
        std::cout << (run_dir(spec) / "summary.json").string() << "\n";
      return code;
    });
  }
  {
    CLI::App* sub = app.add_subcommand("eval", "Evaluate a checkpoint; prints a JSON object of metrics");
    auto a = std::make_shared<RecipeArgs>();
    auto checkpoint = std::make_shared<std::string>();
    auto split = std::make_shared<std::string>();
    auto device = std::make_shared<std::string>();
    auto adapter = std::make_shared<std::string>();
    sub->add_option("recipe", a->path,
                    "Recipe file (TOML); default: the checkpoint's own recipe.toml (where the data is, how to "
                    "evaluate: the model always comes from the checkpoint)")
        ->check(CLI::ExistingFile);
    sub->add_option("--set", a->sets, "Override a recipe key: section.key=value (repeatable)");
    sub->add_option("--checkpoint", *checkpoint,
                    "Checkpoint directory, run directory, its checkpoints/, latest, or a Hugging Face model "
                    "directory (config.json + model.safetensors; the recipe then gives the data)")
        ->required();
    sub->add_option("--adapter", *adapter,
                    "A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) applied to the "
                    "checkpoint's model");
    sub->add_option("--split", *split, "Evaluation split (default: eval.split)")->check(CLI::IsMember({"test", "val"}));
    sub->add_option("--device", *device, "cpu, cuda, cuda:N or auto (overrides run.device)")->check(device_validator());
    sub->add_flag("--json")->description("The metrics as one JSON object on stdout (what eval always prints)");
    auto quiet = std::make_shared<bool>(false);
    sub->add_flag("-q,--quiet", *quiet, "No progress lines on stderr");
    register_command(sub, [=] {
      GENESIS_CHECK(std::filesystem::exists(*checkpoint), UsageError, "eval: --checkpoint ", *checkpoint,
                    " does not exist");
      std::vector<std::string> sets = a->sets;
      if (!device->empty()) sets.push_back("run.device=" + *device);
      const std::filesystem::path recipe =
          a->path.empty() ? io::resolve_checkpoint(*checkpoint) / "recipe.toml" : std::filesystem::path(a->path);
      GENESIS_CHECK(std::filesystem::is_regular_file(recipe), UsageError, "eval: ", *checkpoint,
                    " has no recipe.toml; give the recipe it was trained with (for a Hugging Face directory, "
                    "a recipe whose [data] names the token shards to evaluate on)");
      RecipeSpec spec = load_recipe(recipe, sets);
      std::map<std::string, double> metrics = train::run_evaluation(spec, *checkpoint, *split, *quiet, *adapter);
      nlohmann::json out(metrics);
      out["split"] = split->empty() ? spec.eval.split : *split;
      std::cout << out.dump() << "\n";
      return 0;
    });
  }
  {
    CLI::App* recipe = app.add_subcommand("recipe", "Recipe tools");
    recipe->require_subcommand(1);
    CLI::App* show = recipe->add_subcommand("show", "Print the resolved recipe (includes, overrides, defaults)");
    auto a = std::make_shared<RecipeArgs>();
    auto as_json = std::make_shared<bool>(false);
    add_recipe_args(show, *a);
    auto memory = std::make_shared<bool>(false);
    auto world_size = std::make_shared<int64_t>(1);
    show->add_flag("--json", *as_json,
                   "Print it as JSON ({section: {key: value}}) instead of TOML; with --memory, the estimate");
    show->add_flag("--memory", *memory,
                   "Print the estimated memory per rank instead (parameters, gradients, optimizer state, "
                   "activations of each activation checkpointing mode) on run.device; nothing is allocated");
    show->add_option("--world-size", *world_size,
                     "--memory: the ranks of data parallelism (dist.zero shards over them)")
        ->default_val(1)
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    register_command(show, [=] {
      const RecipeSpec spec = load_recipe(a->path, a->sets);
      if (*memory) {
        const train::MemoryEstimate estimate = train::estimate_memory(
            spec, {.world_size = *world_size, .device = recipe::resolve_device(spec.run.device)});
        if (*as_json) std::cout << train::memory_json(estimate).dump(2) << "\n";
        else std::cout << train::memory_table(estimate);
        return 0;
      }
      if (*as_json) std::cout << recipe_json(spec).dump(2) << "\n";
      else std::cout << spec.to_toml();
      return 0;
    });
  }
}

}  // namespace genesis::cli
