// genesis predict --checkpoint RUN INPUT...: one JSON object per input row, image or text on stdout
// (libgenesis/train/predict.h).
#include <iostream>

#include "apps/genesis/commands.h"
#include "libgenesis/core/error.h"
#include "libgenesis/train/predict.h"

namespace genesis::cli {

void add_predict_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "predict", "Predict with a trained classifier or regression: one JSON object per input row, image or text on stdout");
  auto checkpoint = std::make_shared<std::string>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto options = std::make_shared<train::PredictOptions>();
  options->device.clear();
  sub->add_option("INPUT", *inputs,
                  "CSV files with the training columns (data.name = \"csv\"; a label column, when there, is "
                  "reported beside each prediction), or PNG/JPEG files and folders of them (data.name = "
                  "\"image_folder\"), or texts: lines of plain files (- for stdin) and .jsonl/.csv records "
                  "(data.name = \"text_classification\")")
      ->required();
  sub->add_option("--checkpoint", *checkpoint, "Run directory, its checkpoints/, latest, or a checkpoint directory")
      ->required();
  sub->add_option("--device", options->device, "cpu, cuda, cuda:N or auto (overrides run.device)")
      ->check(device_validator());
  sub->add_option("--batch-size", options->batch_size, "Rows per forward (default 1024)")->check(CLI::PositiveNumber);
  register_command(sub, [=] {
    GENESIS_CHECK(std::filesystem::exists(*checkpoint), UsageError, "predict: --checkpoint ", *checkpoint,
                  " does not exist");
    const std::vector<std::filesystem::path> files(inputs->begin(), inputs->end());
    train::run_prediction(*checkpoint, files, *options,
                          [](const nlohmann::ordered_json& result) { std::cout << result.dump() << "\n"; });
    return 0;
  });
}

}  // namespace genesis::cli
