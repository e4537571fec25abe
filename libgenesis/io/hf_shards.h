#pragma once
// Hugging Face weight sets: one model.safetensors, or shards listed by model.safetensors.index.json
//   {"metadata": {"total_size": BYTES}, "weight_map": {"tensor name": "model-00001-of-00003.safetensors", ...}}
// Reading validates the index against the shards (missing files, tensors absent from their shard or
// present in two, shard tensors the index does not list); writing splits tensors into shards of at
// most a given size, the way transformers' save_pretrained does.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libgenesis/io/safetensors.h"

namespace genesis::io {

inline constexpr const char* kWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";

// "2GB" -> 2'000'000'000, "500MiB" -> 524'288'000, "4096" -> 4096 (units B, KB, MB, GB, TB in powers
// of 1000 and KiB, MiB, GiB, TiB in powers of 1024, as transformers reads them). UsageError otherwise.
uint64_t parse_byte_size(std::string_view text);

// The tensors of one safetensors file or of a sharded set; every header is validated on open
// and no tensor data is read until tensor() is called.
class WeightSet {
 public:
  // `dir`'s model.safetensors, else the shards of its model.safetensors.index.json. IoError when
  // there is neither; FormatError for a malformed or inconsistent index.
  static WeightSet open_directory(const std::filesystem::path& dir);
  // One safetensors file.
  static WeightSet open_file(const std::filesystem::path& file);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // A CPU tensor viewing the mapped bytes (see SafetensorsFile::tensor).
  Tensor tensor(const std::string& name) const;
  const std::filesystem::path& file_of(const std::string& name) const;
  // The safetensors files, in shard order; the index file when sharded.
  const std::vector<std::filesystem::path>& files() const { return paths_; }
  const std::filesystem::path& index_path() const { return index_path_; }
  bool sharded() const { return !index_path_.empty(); }
  // The __metadata__ of the first file.
  const std::map<std::string, std::string>& metadata() const;
  uint64_t total_bytes() const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::filesystem::path> paths_;
  std::filesystem::path index_path_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// Writes `names` (in this order; each fetched through `get` only when its shard is written, so at
// most one shard is held in memory) into `dir`: model.safetensors when everything fits in
// `max_shard_bytes`, else model-0000K-of-0000N.safetensors shards filled in order (a tensor larger
// than the limit gets a shard of its own) plus model.safetensors.index.json. `dir` must exist.
// Returns the files written.
using TensorGetter = std::function<Tensor(const std::string& name)>;
std::vector<std::filesystem::path> save_sharded(const std::filesystem::path& dir, const std::vector<std::string>& names,
                                                const std::map<std::string, uint64_t>& byte_sizes,
                                                const TensorGetter& get, uint64_t max_shard_bytes,
                                                const std::map<std::string, std::string>& metadata);

}  // namespace genesis::io
