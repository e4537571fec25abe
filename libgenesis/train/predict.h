#pragma once
// `genesis predict`: a trained model applied to inputs that belong to no dataset split, one
// result per input. A checkpoint of data.name = "csv" takes rows of CSV files with its training
// columns (the label column may be there, and is then reported beside the prediction); one of
// data.name = "image_folder" takes PNG and JPEG files, and folders of them; one of
// data.name = "text_classification" takes texts: each non-empty line of a plain file ("-": the
// standard input), or the records of .jsonl and .csv files (read as its training files were). Inputs are encoded
// with the checkpoint's own statistics (data.json), as `genesis eval` encodes.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace genesis::train {

struct PredictOptions {
  std::string device = "auto";  // overrides the recipe's run.device when not empty
  int64_t batch_size = 1024;    // rows per forward
};

// Loads the checkpoint (a run directory, its checkpoints/, latest or a step directory) and calls
// `emit` with one JSON object per input row, in file and row order:
//   {"input": "FILE:LINE", "class": NAME, "probabilities": {NAME: p, ...}[, "label": NAME]}   a classifier
//   {"input": "FILE:LINE", "prediction": X[, "label": X]}                                      a regression
//   {"input": "FILE", "class": NAME, "probabilities": {NAME: p, ...}}                             an image
//   {"input": "FILE:LINE", "class": NAME, "probabilities": {NAME: p, ...}[, "label": NAME]}   a text
// Throws UsageError for a checkpoint whose data predict does not read, or inputs that are not
// such rows or images (naming the file, and for rows the line and column).
void run_prediction(const std::filesystem::path& checkpoint, const std::vector<std::filesystem::path>& inputs,
                    const PredictOptions& options, const std::function<void(const nlohmann::ordered_json&)>& emit);

}  // namespace genesis::train
