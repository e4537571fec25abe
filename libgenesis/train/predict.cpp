// `genesis predict` (train/predict.h): CSV rows through a classifier or regression checkpoint,
// image files through an image classifier's, texts through a text classifier's.
#include "libgenesis/train/predict.h"

#include <algorithm>
#include <cstdlib>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/data/csv_table.h"
#include "libgenesis/data/image_decode.h"
#include "libgenesis/data/image_folder.h"
#include "libgenesis/data/labelled_text.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"
#include "libgenesis/train/run_dir.h"
#include "libgenesis/models/sequence_classifier.h"
#include "libgenesis/train/sample_source.h"
#include "libgenesis/train/sft_data.h"

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

// How the checkpoint read its rows: its columns, which are categories, and whether to impute.
data::CsvOptions reading_options(const RecipeSpec& spec, const data::CsvEncoding& encoding) {
  data::CsvOptions options{.label = spec.data.label,
                           .impute = spec.data.impute == "mean",
                           .regression = encoding.target.has_value(),
                           .label_optional = true};
  for (const data::CsvFeature& f : encoding.features) {
    options.features.push_back(f.name);
    if (f.categorical) options.categorical.push_back(f.name);
  }
  return options;
}

// Each class's probability from a classifier's outputs (one row of softmax).
nlohmann::ordered_json class_probabilities(const std::vector<std::string>& classes, const double* row) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (size_t c = 0; c < classes.size(); ++c) out[classes[c]] = row[c];
  return out;
}

// The results of `table`'s rows from the model's outputs [N, classes or 1] (on the host).
void emit_rows(const data::CsvTable& table, const data::CsvEncoding& encoding, int64_t first, const Tensor& outputs,
               const std::function<void(const nlohmann::ordered_json&)>& emit) {
  const Tensor values = encoding.target ? outputs.to(DType::f64) : softmax(outputs.to(DType::f64), 1);
  const double* v = values.data<double>();
  const int64_t width = values.size(1);
  for (int64_t i = 0; i < values.size(0); ++i) {
    const auto r = static_cast<size_t>(first + i);
    nlohmann::ordered_json out{{"input", table.path.string() + ":" + std::to_string(table.lines[r])}};
    const double* row = v + i * width;
    if (const std::optional<data::CsvTarget>& t = encoding.target) {
      out["prediction"] = row[0] * t->std + t->mean;
    } else {
      const auto best = static_cast<size_t>(std::max_element(row, row + encoding.classes.size()) - row);
      out["class"] = encoding.classes[best];
      out["probabilities"] = class_probabilities(encoding.classes, row);
    }
    if (const int32_t code = table.labels.rows[r]; code != data::CsvCodes::kMissing) {
      // A regression's label as the number it is, where it is one.
      const std::string& text = table.labels.values[static_cast<size_t>(code)];
      char* end = nullptr;
      const double number = std::strtod(text.c_str(), &end);
      if (encoding.target && end == text.c_str() + text.size()) out["label"] = number;
      else out["label"] = text;
    }
    emit(out);
  }
}

// The rows of CSV files, batch by batch.
void predict_csv(nn::Module& model, const RecipeSpec& spec, const std::string& encoding_text, const fs::path& json,
                 const std::vector<fs::path>& inputs, const PredictOptions& options, Device device,
                 const std::function<void(const nlohmann::ordered_json&)>& emit) {
  const data::CsvEncoding encoding = data::parse_csv_encoding(encoding_text, json.string());
  const data::CsvOptions reading = reading_options(spec, encoding);
  for (const fs::path& input : inputs) {
    GENESIS_CHECK(fs::is_regular_file(input), UsageError, "predict: ", input.string(), " is not a file");
    const data::CsvTable table = data::read_csv_table(input, reading);
    const std::vector<int64_t> all = data::all_csv_rows(table);
    for (int64_t first = 0; first < table.rows(); first += options.batch_size) {
      const int64_t n = std::min(options.batch_size, table.rows() - first);
      const std::vector<int64_t> rows(all.begin() + first, all.begin() + first + n);
      const Tensor outputs = model(data::encode_csv_inputs(table, rows, encoding).to(device)).to(kCPU);
      emit_rows(table, encoding, first, outputs, emit);
    }
  }
}

// Image files, and the images under folders (sorted, nested folders included), batch by batch.
void predict_images(nn::Module& model, const RecipeSpec& spec, const std::string& encoding_text, const fs::path& json,
                    const std::vector<fs::path>& inputs, const PredictOptions& options, Device device,
                    const std::function<void(const nlohmann::ordered_json&)>& emit) {
  const data::ImageEncoding encoding = data::parse_image_encoding(encoding_text, json.string());
  std::vector<data::ImageFile> files;
  for (const fs::path& input : inputs) {
    if (fs::is_regular_file(input)) {
      files.push_back({.path = input, .label = 0});
      continue;
    }
    GENESIS_CHECK(fs::is_directory(input), UsageError, "predict: ", input.string(), " is neither a file nor a folder");
    std::vector<fs::path> found;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(input))
      if (e.is_regular_file() && data::is_image_file(e.path())) found.push_back(e.path());
    GENESIS_CHECK(!found.empty(), UsageError, "predict: the folder ", input.string(), " holds no .png, .jpg or .jpeg file");
    std::sort(found.begin(), found.end());
    for (fs::path& path : found) files.push_back({.path = std::move(path), .label = 0});
  }
  const Shape shape = classifier_input_shape(spec);
  for (size_t first = 0; first < files.size(); first += static_cast<size_t>(options.batch_size)) {
    const size_t n = std::min(static_cast<size_t>(options.batch_size), files.size() - first);
    const std::vector<data::ImageFile> batch(files.begin() + static_cast<std::ptrdiff_t>(first),
                                             files.begin() + static_cast<std::ptrdiff_t>(first + n));
    data::DecodedImages decoded = data::decode_images(batch, shape, /*skip_bad=*/true);
    GENESIS_CHECK(decoded.skipped.empty(), UsageError, "predict: ", decoded.skipped.front(),
                  "; replace or remove the file");
    data::Dataset& images = decoded.samples;
    data::normalize_images(images, encoding);
    const Tensor probabilities = softmax(model(images.inputs.to(device)).to(kCPU).to(DType::f64), 1);
    const double* p = probabilities.data<double>();
    for (size_t i = 0; i < n; ++i) {
      const double* row = p + static_cast<int64_t>(i) * probabilities.size(1);
      const auto best = static_cast<size_t>(std::max_element(row, row + encoding.classes.size()) - row);
      emit(nlohmann::ordered_json{{"input", batch[i].path.string()},
                                  {"class", encoding.classes[best]},
                                  {"probabilities", class_probabilities(encoding.classes, row)}});
    }
  }
}

// Texts: the lines of plain files ("-": standard input), or the records of .jsonl and .csv files
// with the checkpoint's text field (a label, when there, is echoed), batch by batch.
void predict_texts(nn::Module& model, const RecipeSpec& spec, const std::string& encoding_text, const fs::path& json,
                   const std::vector<fs::path>& inputs, const PredictOptions& options, Device device,
                   const std::function<void(const nlohmann::ordered_json&)>& emit) {
  const std::vector<std::string> classes = data::parse_text_encoding(encoding_text, json.string());
  // The checkpoint keeps the tokenizer it was trained with.
  const fs::path dir = json.parent_path();
  const data::Tokenizer tokenizer = data::Tokenizer::load(data::Tokenizer::found_in(dir) ? dir : tokenizer_path(spec));
  const data::TextFields fields{
      .text = spec.data.text, .label = spec.data.label.empty() ? "label" : spec.data.label, .label_optional = true};
  for (const fs::path& input : inputs) {
    const bool records = input.extension() == ".jsonl" || input.extension() == ".csv";
    const data::LabelledTexts texts = records ? data::read_labelled_texts(input, fields) : data::read_text_lines(input);
    const Tensor ids = data::tokenize_texts(tokenizer, texts, {.seq_len = spec.data.seq_len}, models::SequenceClassifier::kPad);
    for (int64_t first = 0; first < texts.size(); first += options.batch_size) {
      const int64_t n = std::min(options.batch_size, texts.size() - first);
      const Tensor probabilities =
          softmax(model(ids.narrow(0, first, n).to(device)).to(kCPU).to(DType::f64), 1).contiguous();
      for (int64_t i = 0; i < n; ++i) {
        const double* row = probabilities.data<double>() + i * probabilities.size(1);
        const auto best = static_cast<size_t>(std::max_element(row, row + classes.size()) - row);
        nlohmann::ordered_json out{{"input", texts.where(first + i)},
                                   {"class", classes[best]},
                                   {"probabilities", class_probabilities(classes, row)}};
        if (const std::string& label = texts.labels[static_cast<size_t>(first + i)]; !label.empty()) out["label"] = label;
        emit(out);
      }
    }
  }
}

}  // namespace

void run_prediction(const fs::path& checkpoint, const std::vector<fs::path>& inputs, const PredictOptions& options,
                    const std::function<void(const nlohmann::ordered_json&)>& emit) {
  GENESIS_CHECK(options.batch_size > 0, UsageError, "predict: the batch size must be positive");
  const fs::path dir = io::resolve_checkpoint(checkpoint);
  std::optional<RecipeSpec> trained = checkpoint_recipe(dir);
  GENESIS_CHECK(trained.has_value(), UsageError, "predict: ", checkpoint.string(),
                " has no readable recipe.toml; give a checkpoint that genesis train wrote");
  RecipeSpec spec = *trained;
  const bool csv = spec.data.name == "csv", images = spec.data.name == "image_folder";
  GENESIS_CHECK(csv || images || spec.classifies_text(), UsageError, "predict: ", checkpoint.string(),
                " was trained on data.name = \"", spec.data.name,
                "\"; predict reads rows of CSV files (data.name = \"csv\"), image files (data.name = "
                "\"image_folder\") and texts (data.name = \"text_classification\")");
  if (const std::optional<BaseModelRef> base = checkpoint_base(dir)) require_base_unchanged(*base, dir);
  const std::string encoding_text = checkpoint_data_encoding(dir);
  GENESIS_CHECK(!encoding_text.empty(), UsageError, "predict: ", checkpoint.string(),
                " has no data.json (the encoding of its inputs); it predates such checkpoints: train it again");
  if (!options.device.empty()) spec.run.device = options.device;
  const Device device = recipe::resolve_device(spec.run.device);
  configure_threads(spec.run.threads, {.measure_load = device.is_cpu()});
  std::shared_ptr<nn::Module> model = recipe::build_model(spec, device);
  load_checkpoint(dir, *model, nullptr);
  model->eval();
  NoGradGuard no_grad;
  const auto predict = csv ? predict_csv : images ? predict_images : predict_texts;
  predict(*model, spec, encoding_text, dir / "data.json", inputs, options, device, emit);
}

}  // namespace genesis::train
