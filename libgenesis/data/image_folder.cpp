#include "libgenesis/data/image_folder.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/data/image_decode.h"
#include "libgenesis/ops/factory.h"

namespace genesis::data {

namespace fs = std::filesystem;

namespace {

bool hidden(const fs::path& path) {
  return path.filename().string().starts_with(".");
}

// A directory's entries, sorted by name (byte order, as Python's sorted() gives torchvision).
std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (!hidden(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> class_folders(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::path& p : sorted_entries(dir))
    if (fs::is_directory(p)) out.push_back(p.filename().string());
  return out;
}

// A class folder's files, nested folders included, in the order torchvision's os.walk gives:
// folder by folder in sorted order, each one's files sorted by name. Hidden names are skipped,
// and so is what is below a hidden folder; links to folders are not followed (no cycles).
std::vector<fs::path> class_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (hidden(it->path()))
      it.disable_recursion_pending();
    else if (!it->is_directory())
      out.push_back(it->path());
  }
  const auto key = [](const fs::path& p) { return std::pair(p.parent_path().string(), p.filename().string()); };
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) { return key(a) < key(b); });
  return out;
}

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 20; ++i) out += (i ? ", " : "") + names[i];
  return names.size() > 20 ? out + ", ..." : out;
}

ImageSplit list_split(const fs::path& dir, const std::vector<std::string>& classes) {
  ImageSplit split{.dir = dir, .files = {}, .ignored = 0};
  const std::vector<std::string> folders = class_folders(dir);
  GENESIS_CHECK(!folders.empty(), UsageError, dir.string(),
                ": no class folders; an image folder holds one folder of images per class (", dir.string(),
                "/<class>/*.png)");
  for (const std::string& name : folders) {
    const auto at = std::find(classes.begin(), classes.end(), name);
    GENESIS_CHECK(at != classes.end(), UsageError, (dir / name).string(), ": class '", name,
                  "' is not among the training classes (", listed(classes), ")");
    const auto label = static_cast<int64_t>(at - classes.begin());
    const size_t before = split.files.size();
    for (const fs::path& p : class_files(dir / name)) {
      if (is_image_file(p))
        split.files.push_back({p, label});
      else
        ++split.ignored;
    }
    GENESIS_CHECK(split.files.size() > before, UsageError, (dir / name).string(),
                  ": no .png, .jpg or .jpeg files in the class folder; add images or remove the folder");
  }
  return split;
}

}  // namespace

ImageFolder scan_image_folder(const fs::path& root, const std::vector<std::string>& classes) {
  GENESIS_CHECK(fs::is_directory(root), UsageError, root.string(),
                ": no such directory (data.path: a folder of class folders, or of train/, val/, test/ ones)");
  ImageFolder folder{.root = root,
                     .classes = classes,
                     .split_folders = fs::is_directory(root / "train"),
                     .train = {},
                     .val = {},
                     .test = {}};
  const fs::path train = folder.split_folders ? root / "train" : root;
  if (folder.classes.empty()) folder.classes = class_folders(train);
  folder.train = list_split(train, folder.classes);
  if (!folder.split_folders) return folder;
  if (fs::is_directory(root / "val")) folder.val = list_split(root / "val", folder.classes);
  if (fs::is_directory(root / "test")) folder.test = list_split(root / "test", folder.classes);
  return folder;
}

std::pair<std::vector<ImageFile>, std::vector<ImageFile>> split_images(const std::vector<ImageFile>& files,
                                                                       double fraction, uint64_t seed) {
  std::vector<ImageFile> train, val;
  std::vector<bool> held_out(files.size(), false);
  // Class by class, so that each keeps its share: indices of one class's files, then a draw.
  for (size_t begin = 0; begin < files.size();) {
    size_t end = begin;
    while (end < files.size() && files[end].label == files[begin].label) ++end;
    const auto label = static_cast<uint64_t>(files[begin].label);
    const auto [kept, drawn] = validation_rows(static_cast<int64_t>(end - begin), fraction, seed + label);
    for (const int64_t i : drawn) held_out[begin + static_cast<size_t>(i)] = true;
    begin = end;
  }
  for (size_t i = 0; i < files.size(); ++i) (held_out[i] ? val : train).push_back(files[i]);
  return {train, val};
}

DecodedImages decode_images(const std::vector<ImageFile>& files, const std::vector<int64_t>& shape, bool skip_bad,
                            const std::function<void(int64_t, int64_t)>& progress) {
  GENESIS_CHECK(shape.size() == 3, ValueError, "decode_images: the shape is [C, H, W], got ", shape.size(), " entries");
  const auto n = static_cast<int64_t>(files.size());
  const int64_t per_image = shape[0] * shape[1] * shape[2];
  Tensor inputs = empty({n, shape[0], shape[1], shape[2]}, {.dtype = DType::f32});
  std::vector<std::string> errors(files.size());
  std::atomic<int64_t> done{0};
  float* out = inputs.data<float>();
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) {
    try {
      to_input(read_image(files[static_cast<size_t>(i)].path), shape[0], shape[1], shape[2], out + i * per_image);
    } catch (const std::exception& e) {  // nothing may leave an OpenMP region
      errors[static_cast<size_t>(i)] = e.what();
    }
    const int64_t finished = ++done;
    if (progress && omp_get_thread_num() == 0) progress(finished, n);
  }
  if (progress) progress(n, n);
  DecodedImages decoded;
  std::vector<int64_t> good;
  for (int64_t i = 0; i < n; ++i) {
    const std::string& error = errors[static_cast<size_t>(i)];
    if (error.empty()) {
      good.push_back(i);
      continue;
    }
    GENESIS_CHECK(skip_bad, UsageError, error, "; replace or remove the file, or set data.skip_bad = true");
    decoded.skipped.push_back(error);
  }
  Tensor targets = empty({n}, {.dtype = DType::i64});
  for (int64_t i = 0; i < n; ++i) targets.data<int64_t>()[i] = files[static_cast<size_t>(i)].label;
  decoded.samples = {inputs, targets};
  if (static_cast<int64_t>(good.size()) < n) decoded.samples = take(decoded.samples, good);
  return decoded;
}

void fit_image_statistics(const Dataset& samples, ImageEncoding& encoding) {
  const int64_t channels = samples.inputs.size(1), plane = samples.inputs.size(2) * samples.inputs.size(3);
  std::vector<double> sum(static_cast<size_t>(channels)), squares(static_cast<size_t>(channels));
  const float* p = samples.inputs.data<float>();
  for (int64_t i = 0; i < samples.size(); ++i)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t k = 0; k < plane; ++k, ++p) {
        sum[static_cast<size_t>(c)] += *p;
        squares[static_cast<size_t>(c)] += static_cast<double>(*p) * *p;
      }
  const auto count = static_cast<double>(samples.size() * plane);
  encoding.mean.assign(static_cast<size_t>(channels), 0.0);
  encoding.std.assign(static_cast<size_t>(channels), 1.0);
  for (size_t c = 0; c < sum.size(); ++c) {
    const double mean = sum[c] / count, variance = squares[c] / count - mean * mean;
    encoding.mean[c] = mean;
    // A constant channel keeps a divisor of 1: its inputs become zeros, not NaN.
    encoding.std[c] = variance > 1e-12 ? std::sqrt(variance) : 1.0;
  }
}

void normalize_images(Dataset& samples, const ImageEncoding& encoding) {
  if (encoding.mean.empty() || samples.size() == 0) return;
  const int64_t channels = samples.inputs.size(1), plane = samples.inputs.size(2) * samples.inputs.size(3);
  GENESIS_CHECK(
      static_cast<int64_t>(encoding.mean.size()) == channels && static_cast<int64_t>(encoding.std.size()) == channels,
      UsageError, "the normalization has ", encoding.mean.size(), " means and ", encoding.std.size(),
      " standard deviations for images of ", channels, " channels");
  float* p = samples.inputs.data<float>();
  for (int64_t i = 0; i < samples.size(); ++i)
    for (size_t c = 0; c < encoding.mean.size(); ++c) {
      const auto mean = static_cast<float>(encoding.mean[c]), inverse = static_cast<float>(1.0 / encoding.std[c]);
      for (int64_t k = 0; k < plane; ++k, ++p) *p = (*p - mean) * inverse;
    }
}

std::string image_encoding_json(const ImageEncoding& encoding) {
  const nlohmann::json j{{"format", "genesis image folder encoding"},
                         {"classes", encoding.classes},
                         {"mean", encoding.mean},
                         {"std", encoding.std}};
  return j.dump(2) + "\n";
}

ImageEncoding parse_image_encoding(std::string_view text, const std::string& file) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto all = [&](const char* key, auto is) {
    return j.contains(key) && j[key].is_array() && std::all_of(j[key].begin(), j[key].end(), is);
  };
  GENESIS_CHECK(j.is_object() && j.contains("format") && j["format"] == "genesis image folder encoding" &&
                    all("classes", [](const nlohmann::json& v) { return v.is_string(); }) &&
                    all("mean", [](const nlohmann::json& v) { return v.is_number(); }) &&
                    all("std", [](const nlohmann::json& v) { return v.is_number() && v.get<double>() > 0.0; }) &&
                    j["mean"].size() == j["std"].size(),
                ValueError, file,
                ": not an image folder encoding written by genesis (format, classes, mean and std per channel)");
  return {.classes = j["classes"].get<std::vector<std::string>>(),
          .mean = j["mean"].get<std::vector<double>>(),
          .std = j["std"].get<std::vector<double>>()};
}

}  // namespace genesis::data
