#include "libgenesis/io/hf_shards.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"

namespace genesis::io {

namespace fs = std::filesystem;
using nlohmann::json;

uint64_t parse_byte_size(std::string_view text) {
  auto fail = [&]() {
    return UsageError(detail::concat("size '", text,
                                     "' is not a byte count (examples: 2GB, 500MB, 1GiB, 4096; units B, KB, MB, GB, "
                                     "TB, KiB, MiB, GiB, TiB)"));
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) throw fail();
  uint64_t count = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + digits, count);
  if (ec != std::errc() || end != text.data() + digits) throw fail();
  std::string unit;
  for (char c : text.substr(digits)) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, uint64_t> kUnits = {{"", 1},
                                                         {"B", 1},
                                                         {"KB", 1000},
                                                         {"MB", 1000'000},
                                                         {"GB", 1000'000'000},
                                                         {"TB", 1000'000'000'000},
                                                         {"KIB", 1ull << 10},
                                                         {"MIB", 1ull << 20},
                                                         {"GIB", 1ull << 30},
                                                         {"TIB", 1ull << 40}};
  auto unit_it = kUnits.find(unit);
  if (unit_it == kUnits.end()) throw fail();
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, unit_it->second, &bytes) || bytes == 0) throw fail();
  return bytes;
}

// --- reading ---------------------------------------------------------------------------------

WeightSet WeightSet::open_file(const fs::path& file) {
  WeightSet set;
  set.files_.push_back(std::make_shared<SafetensorsFile>(file));
  set.paths_.push_back(file);
  for (const std::string& name : set.files_.front()->names()) set.where_.emplace(name, 0);
  return set;
}

WeightSet WeightSet::open_directory(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / kWeightsFile, ec)) return open_file(dir / kWeightsFile);
  const fs::path index_path = dir / kWeightsIndexFile;
  GENESIS_CHECK(fs::is_regular_file(index_path, ec), IoError, "'", dir.string(), "' has no ", kWeightsFile, " and no ",
                kWeightsIndexFile);
  auto fail = [&](const auto&... parts) {
    return FormatError(detail::concat("shard index '", index_path.string(), "': ", parts...));
  };
  const json index = json::parse(read_file(index_path, kMaxConfigFileBytes), nullptr, false);
  if (index.is_discarded() || !index.is_object()) throw fail("not a JSON object");
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    throw fail("missing the \"weight_map\" object (tensor name -> shard file)");
  if (index["weight_map"].empty()) throw fail("the weight_map is empty");

  WeightSet set;
  set.index_path_ = index_path;
  std::map<std::string, size_t> shard_of_file;
  std::map<std::string, std::string> listed;  // tensor -> shard file name
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw fail("weight_map entry '", name, "' must name a shard file, got ", file.dump());
    const std::string shard = file.get<std::string>();
    if (shard.empty() || fs::path(shard).filename() != shard || shard == "." || shard == "..")
      throw fail("shard '", shard, "' of tensor '", name, "' must be a file name inside the directory");
    if (!shard_of_file.count(shard)) {
      const fs::path shard_path = dir / shard;
      if (!fs::is_regular_file(shard_path, ec))
        throw fail("tensor '", name, "' is in shard '", shard, "', which does not exist in '", dir.string(), "'");
      shard_of_file.emplace(shard, set.files_.size());
      set.files_.push_back(std::make_shared<SafetensorsFile>(shard_path));
      set.paths_.push_back(shard_path);
    }
    listed.emplace(name, shard);
  }
  for (const auto& [name, shard] : listed) {
    const size_t file = shard_of_file.at(shard);
    if (!set.files_[file]->contains(name)) throw fail("tensor '", name, "' is not in its shard '", shard, "'");
    set.where_.emplace(name, file);
  }
  for (size_t file = 0; file < set.files_.size(); ++file) {
    for (const std::string& name : set.files_[file]->names()) {
      auto it = listed.find(name);
      if (it == listed.end())
        throw fail("shard '", set.paths_[file].filename().string(), "' holds tensor '", name,
                   "', which the weight_map does not list");
      if (shard_of_file.at(it->second) != file)
        throw fail("tensor '", name, "' is in both '", it->second, "' and '", set.paths_[file].filename().string(),
                   "'");
    }
  }
  return set;
}

std::vector<std::string> WeightSet::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

const TensorInfo& WeightSet::info(const std::string& name) const {
  return files_.at(where_.at(name))->info(name);
}

Tensor WeightSet::tensor(const std::string& name) const {
  auto it = where_.find(name);
  GENESIS_CHECK(it != where_.end(), ValueError, "weights '", paths_.front().parent_path().string(),
                "' have no tensor '", name, "'");
  return files_[it->second]->tensor(name);
}

const fs::path& WeightSet::file_of(const std::string& name) const {
  return paths_.at(where_.at(name));
}

const std::map<std::string, std::string>& WeightSet::metadata() const {
  return files_.front()->metadata();
}

uint64_t WeightSet::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, file] : where_) {
    const TensorInfo& entry = files_[file]->info(name);
    total += entry.data_end - entry.data_begin;
  }
  return total;
}

// --- writing ---------------------------------------------------------------------------------

std::vector<fs::path> save_sharded(const fs::path& dir, const std::vector<std::string>& names,
                                   const std::map<std::string, uint64_t>& byte_sizes, const TensorGetter& get,
                                   uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  GENESIS_CHECK(max_shard_bytes > 0, ValueError, "save_sharded: the shard size limit must be positive");
  std::vector<std::vector<std::string>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const std::string& name : names) {
    const uint64_t bytes = byte_sizes.at(name);
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(name);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  auto write_shard = [&](const fs::path& path, const std::vector<std::string>& shard) {
    NamedTensors tensors;
    for (const std::string& name : shard) tensors.emplace_back(name, get(name));
    save_safetensors(path, tensors, metadata);
  };
  if (shards.size() == 1) {
    write_shard(dir / kWeightsFile, shards.front());
    return {dir / kWeightsFile};
  }
  std::vector<fs::path> written;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char file_name[64];
    std::snprintf(file_name, sizeof(file_name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_shard(dir / file_name, shards[i]);
    written.push_back(dir / file_name);
    for (const std::string& name : shards[i]) weight_map[name] = file_name;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  write_file_atomic(dir / kWeightsIndexFile, index.dump(2) + "\n");
  written.push_back(dir / kWeightsIndexFile);
  return written;
}

}  // namespace genesis::io
