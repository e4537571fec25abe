// A folder of images as a classifier's samples (data.name = "image_folder"; train/data_source.h):
// data/image_folder.h lists and decodes it into memory once at the start, on the OpenMP threads
// with a progress line, so that batches then cost what Fashion-MNIST's do; the samples go
// through the DataLoader (train/sample_source.h). The classes and the per-channel statistics
// come from the training split, or from a checkpoint (data.json), so that evaluation and a
// resumed run encode as training did.
//
// Augmentation ([data.augment], data/image_augment.h) is a transform of each training batch
// between the decoded images and the loader's batches: it acts on the images in [0, 1], so the
// training split stays unnormalized in memory and each batch is normalized after its
// augmentation. The evaluation split is normalized once, as without augmentation.
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/data/image_augment.h"
#include "libgenesis/data/image_folder.h"
#include "libgenesis/train/sample_source.h"

namespace genesis::train {

namespace {

// [C, H, W] of the model's input (the recipe's checks made it three entries with C 1 or 3).
Shape image_shape(const RecipeSpec& spec) {
  Shape shape = classifier_input_shape(spec);
  GENESIS_CHECK(!shape.empty(), RecipeError, "data.name = \"image_folder\" gives images, which model ",
                spec.model.name, " does not take; use model.name = \"cnn\" or \"mlp\"");
  return shape;
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

// What [data.augment] does, for the run's note: "crop padding 2, flip, rotation 10 degrees".
std::string augment_note(const data::AugmentOptions& augment) {
  std::ostringstream out;
  out << std::setprecision(4);
  const char* separator = "";
  auto item = [&](const char* name, auto value, const char* unit) {
    if (value > 0) out << std::exchange(separator, ", ") << name << value << unit;
  };
  item("crop padding ", augment.crop_padding, "");
  if (augment.flip) out << std::exchange(separator, ", ") << "flip";
  item("rotation ", augment.rotation, " degrees");
  item("brightness ", augment.brightness, "");
  item("contrast ", augment.contrast, "");
  return out.str();
}

// The training batches' transform: [data.augment] on the images in [0, 1], then the
// normalization. Empty without augmentation: the training split is then normalized once.
data::BatchTransform augment_batches(const RecipeSpec& spec, const data::ImageEncoding& encoding) {
  if (!spec.data.augment.enabled()) return {};
  return [augment = data::ImageAugment(spec.data.augment, static_cast<uint64_t>(spec.run.seed)), encoding](
             data::Dataset& rows, const std::vector<int64_t>& samples, int64_t epoch) {
    augment.apply(rows.inputs, samples, epoch);
    data::normalize_images(rows, encoding);
  };
}

// The training files and the evaluated ones (eval.split's), with where the latter come from.
struct Splits {
  std::vector<data::ImageFile> train, held_out;
  std::string held_out_from;  // a folder, or "data.val_fraction"
};

Splits choose_splits(const RecipeSpec& spec, const data::ImageFolder& folder) {
  Splits out{.train = folder.train.files, .held_out = {}, .held_out_from = folder.val.dir.string()};
  std::vector<data::ImageFile> val = folder.val.files;
  if (folder.val.dir.empty() && spec.data.val_fraction > 0.0) {
    std::tie(out.train, val) =
        data::split_images(out.train, spec.data.val_fraction, static_cast<uint64_t>(spec.run.seed));
    out.held_out_from = "data.val_fraction";
  }
  if (spec.eval.split == "test") {
    out.held_out = folder.test.files;
    out.held_out_from = folder.test.dir.string();
  } else {
    out.held_out = std::move(val);
  }
  return out;
}

std::string missing_evaluation(const RecipeSpec& spec) {
  const bool test = spec.eval.split == "test";
  return "data.name = \"image_folder\" evaluates eval.split = \"" + spec.eval.split + "\" on a " + spec.eval.split +
         "/ folder beside the train/ one, which " + spec.data.path + " lacks; add them" +
         (test ? ", or set eval.split = \"val\" with" : ", or set") + " data.val_fraction";
}

// The run's first note: what was read, how it is encoded, what was left out.
std::string folder_note(const RecipeSpec& spec, const data::ImageFolder& folder, const Splits& splits,
                        const recipe::RunData& samples, const data::ImageEncoding& encoding, bool trained,
                        const std::vector<std::string>& skipped) {
  const Shape shape = image_shape(spec);
  const auto classes = static_cast<int64_t>(folder.classes.size());
  std::string note = spec.data.path + (trained ? " (encoded with the checkpoint's classes and statistics)" : "") +
                     ": " + count_of(samples.train.size(), "training image") + ", ";
  note += splits.held_out.empty()
              ? std::string("no evaluation set")
              : count_of(samples.eval.size(), spec.eval.split == "test" ? "test image" : "validation image") + " (" +
                    splits.held_out_from + ")";
  note += "; as [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ", " + std::to_string(shape[2]) +
          "], " + statistics_note(encoding) +
          (spec.data.augment.enabled() ? ", training batches augmented (" + augment_note(spec.data.augment) + ")"
                                       : std::string()) +
          "; " + std::to_string(classes) + (classes == 1 ? " class: " : " classes: ") + class_list(folder.classes);
  const int64_t ignored = folder.train.ignored + folder.val.ignored + folder.test.ignored;
  if (ignored > 0) note += "; " + count_of(ignored, "file") + " of other kinds ignored";
  if (!skipped.empty())
    note += "; " + count_of(static_cast<int64_t>(skipped.size()), "unreadable image") +
            " skipped (data.skip_bad), the first: " + skipped.front();
  return note;
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
  GENESIS_CHECK(classifier_outputs(spec) >= classes, RecipeError, "model.num_classes = ", classifier_outputs(spec),
                " is fewer than the ", classes, " class folders of ", folder.train.dir.string(),
                "; set model.num_classes = ", classes);

  const Splits splits = choose_splits(spec, folder);
  auto progress = [&](int64_t done, int64_t total) { log.progress("decoding images", done, total); };
  data::DecodedImages train = data::decode_images(splits.train, shape, d.skip_bad, progress);
  data::DecodedImages held_out = data::decode_images(splits.held_out, shape, d.skip_bad, progress);
  GENESIS_CHECK(train.samples.size() > 0, UsageError, folder.train.dir.string(),
                ": none of the training images could be read (", train.skipped.size(), " skipped)");
  choose_statistics(d, train.samples, trained, encoding);
  recipe::RunData samples{.train = std::move(train.samples), .eval = std::move(held_out.samples)};
  data::BatchTransform augment = augment_batches(spec, encoding);
  if (!augment) data::normalize_images(samples.train, encoding);
  data::normalize_images(samples.eval, encoding);

  std::vector<std::string> skipped = std::move(train.skipped);
  skipped.insert(skipped.end(), held_out.skipped.begin(), held_out.skipped.end());
  log.note(folder_note(spec, folder, splits, samples, encoding, trained, skipped));
  SampleSourceNotes notes;
  notes.missing_evaluation = splits.held_out.empty() ? missing_evaluation(spec) : "";
  notes.encoding = data::image_encoding_json(encoding);
  notes.classes = encoding.classes;
  return open_samples(std::move(samples), spec, device, share, std::move(notes), std::move(augment));
}

}  // namespace genesis::train
