#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON, then the data buffer. The JSON maps each tensor name to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// (byte offsets into the data buffer, C order, little endian), plus an optional
// "__metadata__" object of string values. Every byte of the buffer belongs to exactly one tensor.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/core/tensor.h"

namespace genesis {

// A file that breaks its format; the message names the file and, where there is one, the tensor.
class FormatError : public Error {
 public:
  using Error::Error;
};

}  // namespace genesis

namespace genesis::io {

// One tensor's entry in a header.
struct TensorInfo {
  std::string dtype;  // as the file spells it: "F32", "BF16", "U8", ...
  Shape shape;
  uint64_t data_begin = 0;  // byte range [data_begin, data_end) of the data buffer
  uint64_t data_end = 0;
};

// The genesis dtype stored as `name` ("F32" -> f32); nullopt for names the format knows but
// genesis has no type for (U8, I16, F8_E4M3, ...) and for unknown names.
std::optional<DType> dtype_from_safetensors(std::string_view name);
// The format's name for a genesis dtype (f32 -> "F32").
std::string_view safetensors_dtype_name(DType dtype);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (any device and strides; copied to the CPU one at a time) and `metadata`
// to `path`: the bytes go to `<path>.tmp`, are fsynced, then renamed over `path`. The layout
// matches the reference writer: tensors ordered by dtype width (widest first, which keeps every
// tensor aligned to its element size) then by name, packed without gaps; compact JSON padded
// with spaces to a multiple of 8 bytes; "__metadata__" first and left out when empty.
// Throws ValueError for undefined or duplicate tensors, a tensor named "__metadata__", or names
// and metadata that are not UTF-8; IoError when the file cannot be written.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Throws ValueError naming `file`, the tensor and the first bad element when `tensor` (a CPU
// tensor, as SafetensorsFile::tensor returns) is floating-point and holds an inf or NaN: a model
// with such weights evaluates to NaN or generates one token forever without any error.
void require_finite(const Tensor& tensor, const std::string& name, const std::filesystem::path& file);

// A memory-mapped safetensors file whose header was fully validated on open (throws FormatError
// for a truncated file, an oversized or malformed header, an unknown dtype, a shape that does not
// match its byte range, offsets outside the buffer, overlapping tensors, unindexed bytes, and
// duplicate names). Copies share the mapping. The file must not be truncated or rewritten in place
// while mapped; replacing it by rename, as save_safetensors does, is safe.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor viewing the mapped bytes (no copy); it keeps the mapping alive after this object
  // is gone. The mapping is copy-on-write: writes to the tensor never reach the file. A tensor whose
  // bytes are misaligned for its dtype (possible only in files from other writers) is copied.
  // Throws DTypeError for dtypes genesis has no type for.
  Tensor tensor(const std::string& name) const;
  // An owned copy of the tensor cast to `dtype` on `device`.
  Tensor load(const std::string& name, DType dtype, Device device = kCPU) const;

 private:
  struct Mapping;
  std::filesystem::path path_;
  std::shared_ptr<const Mapping> mapping_;
  const char* data_ = nullptr;  // start of the data buffer inside the mapping
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace genesis::io
