#pragma once
// A folder of images as classifier samples, laid out as torchvision's ImageFolder: one subfolder
// per class (root/<class>/*.png|*.jpg|*.jpeg, nested folders included), the classes in sorted
// order of their folder names. With split folders (root/train/<class>/..., and root/val/,
// root/test/ when present) each split is such a folder over the training split's classes. Files
// of other kinds are ignored and counted; names starting with '.' are skipped. Images are decoded
// into memory once (in parallel), converted to the model's [C, H, W] (image_decode.h's to_input)
// and normalized per channel.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "libgenesis/data/dataset.h"

namespace genesis::data {

struct ImageFile {
  std::filesystem::path path;
  int64_t label = 0;
};

struct ImageSplit {
  std::filesystem::path dir;
  std::vector<ImageFile> files;  // class by class, each class's files in os.walk's sorted order
  int64_t ignored = 0;           // files that are not images
};

struct ImageFolder {
  std::filesystem::path root;
  std::vector<std::string> classes;
  bool split_folders = false;   // root/train/ holds the training split
  ImageSplit train, val, test;  // val and test: dir empty when the folder has none
};

// Lists the folder. `classes`, when given (a checkpoint's), replace the training split's folder
// names, which must be among them. Throws UsageError naming the folder: a missing root, no class
// folders, a class folder without images, a split's class the training split lacks.
ImageFolder scan_image_folder(const std::filesystem::path& root, const std::vector<std::string>& classes = {});

// Holds out `fraction` of each class's files (a seeded draw, the same for the same seed):
// {train, val}, each in the input's order.
std::pair<std::vector<ImageFile>, std::vector<ImageFile>> split_images(const std::vector<ImageFile>& files,
                                                                       double fraction, uint64_t seed);

struct DecodedImages {
  Dataset samples;                   // inputs [N, C, H, W] f32 in [0, 1], targets [N] i64
  std::vector<std::string> skipped;  // "file: what is wrong", with skip_bad
};

// Decodes the files into [C, H, W] each (shape), in parallel on the OpenMP threads; `progress`
// (called from the calling thread) sees the files done. A file that does not decode throws
// UsageError naming it, or with skip_bad is left out and listed.
DecodedImages decode_images(const std::vector<ImageFile>& files, const std::vector<int64_t>& shape, bool skip_bad,
                            const std::function<void(int64_t done, int64_t total)>& progress = {});

// What the training split fixes and every split is encoded with (checkpoints keep it).
struct ImageEncoding {
  std::vector<std::string> classes;
  std::vector<double> mean, std;  // per channel; empty: not normalized
};

// Per-channel mean and population standard deviation of the inputs [N, C, H, W].
void fit_image_statistics(const Dataset& samples, ImageEncoding& encoding);
// (x - mean[c]) / std[c] in place, when the encoding has statistics.
void normalize_images(Dataset& samples, const ImageEncoding& encoding);
// The encoding as JSON text (data.json) and back: ValueError naming `file` for other text.
std::string image_encoding_json(const ImageEncoding& encoding);
ImageEncoding parse_image_encoding(std::string_view text, const std::string& file);

}  // namespace genesis::data
