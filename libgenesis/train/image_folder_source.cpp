// A folder of images as a classifier's samples (data.name = "image_folder"; train/data_source.h):
// data/image_folder.h lists and decodes it into memory once at the start, on the OpenMP threads
// with a progress line, so that batches then cost what Fashion-MNIST's do; the samples go
// through the DataLoader (train/sample_source.h). The classes and the per-channel statistics
// come from the training split, or from a checkpoint (data.json), so that evaluation and a
// resumed run encode as training did.
//
// Augmentation ([data.augment], random crops and flips per batch) is a later stage: it would sit
// between the decoded images and the loader's batches, as a transform of each batch.
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/data/image_folder.h"
#include "libgenesis/train/sample_source.h"

namespace genesis::train {

namespace {

// [C, H, W] of the model's input (the recipe's checks made it three entries with C 1 or 3).
Shape image_shape(const RecipeSpec& spec) {
  if (const auto* cnn = std::get_if<models::CnnConfig>(&spec.model.config)) return cnn->input_shape;
  if (const auto* mlp = std::get_if<models::MlpConfig>(&spec.model.config)) return mlp->input_shape;
  GENESIS_THROW(RecipeError, "data.name = \"image_folder\" gives images, which model ", spec.model.name,
                " does not take; use model.name = \"cnn\" or \"mlp\"");
}

int64_t model_classes(const RecipeSpec& spec) {
  if (const auto* cnn = std::get_if<models::CnnConfig>(&spec.model.config)) return cnn->num_classes;
  return std::get<models::MlpConfig>(spec.model.config).num_classes;
}

// The statistics every split is normalized with: the checkpoint's, the recipe's, or the
// training split's (data.normalize), in that order.
void choose_statistics(const RecipeSpec::Data& d, const data::Dataset& train, bool trained,
                       data::ImageEncoding& encoding) {
  if (trained) return;
  if (!d.mean.empty()) {
    encoding.mean = d.mean;
    encoding.std = d.std;
  } else if (d.normalize) {
    data::fit_image_statistics(train, encoding);
  }
}

std::string statistics_note(const data::ImageEncoding& encoding) {
  if (encoding.mean.empty()) return "not normalized";
  std::ostringstream out;
  out << std::setprecision(4) << "normalized with mean [";
  for (size_t c = 0; c < encoding.mean.size(); ++c) out << (c ? ", " : "") << encoding.mean[c];
  out << "], std [";
  for (size_t c = 0; c < encoding.std.size(); ++c) out << (c ? ", " : "") << encoding.std[c];
  out << "]";
  return out.str();
}

}  // namespace

std::unique_ptr<DataSource> open_image_folder_source(const RecipeSpec& spec, Device device, RunLog& log,
                                                     const EvalShare& share, const std::string& trained_encoding) {
  const RecipeSpec::Data& d = spec.data;
  const Shape shape = image_shape(spec);
  const bool trained = !trained_encoding.empty();
  data::ImageEncoding encoding =
      trained ? data::parse_image_encoding(trained_encoding, "the checkpoint's data.json") : data::ImageEncoding{};
  const data::ImageFolder folder = data::scan_image_folder(d.path, encoding.classes);
  encoding.classes = folder.classes;
  const auto classes = static_cast<int64_t>(folder.classes.size());
  GENESIS_CHECK(model_classes(spec) >= classes, RecipeError, "model.num_classes = ", model_classes(spec),
                " is fewer than the ", classes, " class folders of ", folder.train.dir.string(),
                "; set model.num_classes = ", classes);

  std::vector<data::ImageFile> train = folder.train.files, val = folder.val.files;
  std::string val_from = folder.val.dir.string();
  if (folder.val.dir.empty() && d.val_fraction > 0.0) {
    std::tie(train, val) = data::split_images(train, d.val_fraction, static_cast<uint64_t>(spec.run.seed));
    val_from = "data.val_fraction";
  }
  const bool test = spec.eval.split == "test";
  const std::vector<data::ImageFile>& held_out = test ? folder.test.files : val;
  SampleSourceNotes notes;
  if (held_out.empty())
    notes.missing_evaluation = "data.name = \"image_folder\" evaluates eval.split = \"" + spec.eval.split + "\" on a " +
                               spec.eval.split + "/ folder beside the train/ one, which " + d.path +
                               " lacks; add them" + (test ? ", or set eval.split = \"val\" with" : ", or set") +
                               " data.val_fraction";

  auto progress = [&](int64_t done, int64_t total) { log.progress("decoding images", done, total); };
  data::DecodedImages train_images = data::decode_images(train, shape, d.skip_bad, progress);
  data::DecodedImages eval_images = data::decode_images(held_out, shape, d.skip_bad, progress);
  GENESIS_CHECK(train_images.samples.size() > 0, UsageError, folder.train.dir.string(),
                ": none of the training images could be read (", train_images.skipped.size(), " skipped)");
  choose_statistics(d, train_images.samples, trained, encoding);
  recipe::RunData samples{.train = std::move(train_images.samples), .eval = std::move(eval_images.samples)};
  data::normalize_images(samples.train, encoding);
  data::normalize_images(samples.eval, encoding);

  const int64_t skipped = static_cast<int64_t>(train_images.skipped.size() + eval_images.skipped.size());
  const int64_t ignored = folder.train.ignored + folder.val.ignored + folder.test.ignored;
  std::string note = d.path + (trained ? " (encoded with the checkpoint's classes and statistics)" : "") + ": " +
                     count_of(samples.train.size(), "training image") + ", ";
  note += held_out.empty() ? std::string("no evaluation set")
                           : count_of(samples.eval.size(), test ? "test image" : "validation image") + " (" +
                                 (test ? folder.test.dir.string() : val_from) + ")";
  note += "; as [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ", " + std::to_string(shape[2]) +
          "], " + statistics_note(encoding) + "; " + std::to_string(classes) +
          (classes == 1 ? " class: " : " classes: ") + class_list(folder.classes);
  if (ignored > 0) note += "; " + count_of(ignored, "file") + " of other kinds ignored";
  if (skipped > 0)
    note += "; " + count_of(skipped, "unreadable image") + " skipped (data.skip_bad), the first: " +
            (train_images.skipped.empty() ? eval_images.skipped : train_images.skipped).front();
  log.note(note);
  notes.encoding = data::image_encoding_json(encoding);
  return open_samples(std::move(samples), spec, device, share, std::move(notes));
}

}  // namespace genesis::train
