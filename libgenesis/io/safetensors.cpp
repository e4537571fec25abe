#include "libgenesis/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <unordered_set>

#include "libgenesis/core/printable.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/json_text.h"

namespace genesis::io {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// The reference library refuses headers above this size.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeSpec {
  std::string_view name;
  uint64_t bits;
  std::optional<DType> genesis;
};

// Every dtype the format defines, in the reference library's order: the writer puts tensors of
// later (wider) dtypes first.
constexpr DTypeSpec kDTypes[] = {
    {"BOOL", 8, DType::boolean},
    {"F4", 4, {}},
    {"F6_E2M3", 6, {}},
    {"F6_E3M2", 6, {}},
    {"U8", 8, {}},
    {"I8", 8, {}},
    {"F8_E5M2", 8, {}},
    {"F8_E4M3", 8, {}},
    {"F8_E8M0", 8, {}},
    {"F8_E4M3FNUZ", 8, {}},
    {"F8_E5M2FNUZ", 8, {}},
    {"I16", 16, {}},
    {"U16", 16, {}},
    {"F16", 16, DType::f16},
    {"BF16", 16, DType::bf16},
    {"I32", 32, DType::i32},
    {"U32", 32, {}},
    {"F32", 32, DType::f32},
    {"C64", 64, {}},
    {"F64", 64, DType::f64},
    {"I64", 64, DType::i64},
    {"U64", 64, {}},
};

const DTypeSpec* find_dtype(std::string_view name) {
  for (const DTypeSpec& spec : kDTypes)
    if (spec.name == name) return &spec;
  return nullptr;
}

int dtype_rank(DType dtype) {
  for (size_t i = 0; i < std::size(kDTypes); ++i)
    if (kDTypes[i].genesis == dtype) return static_cast<int>(i);
  return -1;
}

std::string known_dtype_list() {
  std::string out;
  for (const DTypeSpec& spec : kDTypes) out += (out.empty() ? "" : ", ") + std::string(spec.name);
  return out;
}

std::string offsets_str(uint64_t begin, uint64_t end) {
  return detail::concat("[", begin, ", ", end, "]");
}

template <class... Parts>
FormatError format_error(const fs::path& path, const Parts&... parts) {
  // Control bytes and bytes that are not UTF-8 (possible in names, JSON strings) are escaped.
  return FormatError(printable(detail::concat("safetensors file '", path.string(), "': ", parts...)));
}

// Bit size of `shape` elements of `spec`; nullopt when it overflows 64 bits.
std::optional<uint64_t> bit_size(const Shape& shape, const DTypeSpec& spec) {
  uint64_t bits = spec.bits;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bits, static_cast<uint64_t>(d), &bits)) return std::nullopt;
  return bits;
}

// The JSON parser keeps the last of duplicate keys; the format forbids them, so a SAX pass
// rejects them (and headers of more than kMaxTensors entries) before the header is parsed.
// A plain SAX handler, not a parse callback: nlohmann's callback parser walks the enclosing
// object at the end of each entry, which made a 40,000-tensor header take 13 s.
class HeaderKeyCheck : public json::json_sax_t {
 public:
  static constexpr size_t kMaxTensors = 1'000'000;
  explicit HeaderKeyCheck(const fs::path& path) : path_(path) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool start_object(std::size_t) override {
    objects_.push_back({last_key_, {}});
    return true;
  }
  bool end_object() override {
    objects_.pop_back();
    return true;
  }
  bool key(string_t& key) override {
    last_key_ = key;
    Object& object = objects_.back();
    if (!object.keys.insert(key).second) {
      if (objects_.size() == 1) throw format_error(path_, "duplicate tensor name '", key, "' in the header");
      throw format_error(path_, "duplicate key \"", key, "\" in the entry '", object.owner, "'");
    }
    if (objects_.size() == 1 && object.keys.size() > kMaxTensors)
      throw format_error(path_, "the header lists more than ", kMaxTensors,
                         " tensors (the limit of this reader; split the weights into shards)");
    return true;
  }
  // Invalid JSON: stop here; the parse that follows reports it.
  bool parse_error(std::size_t, const std::string&, const json::exception&) override { return false; }

 private:
  struct Object {
    std::string owner;
    std::unordered_set<std::string> keys;
  };
  const fs::path& path_;
  std::vector<Object> objects_;
  std::string last_key_;
};

// Headers can be large: values quoted in messages are cut short (on a UTF-8 character boundary).
std::string shortened(std::string text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

std::string brief(const json& value) {
  return shortened(value.dump(), 60);
}

bool is_index(const json& v) {
  return v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

TensorInfo parse_entry(const fs::path& path, const std::string& name, const json& entry) {
  auto fail = [&](const auto&... parts) { return format_error(path, "tensor '", name, "': ", parts...); };
  if (!entry.is_object()) throw fail("entry is not a JSON object");
  for (const auto& [key, value] : entry.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets") throw fail("unexpected field \"", key, "\"");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) throw fail("missing field \"", key, "\"");

  TensorInfo info;
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) throw fail("dtype must be a string");
  info.dtype = dtype.get<std::string>();
  const DTypeSpec* spec = find_dtype(info.dtype);
  if (spec == nullptr) throw fail("unknown dtype \"", info.dtype, "\" (known: ", known_dtype_list(), ")");

  const json& shape = entry["shape"];
  if (!shape.is_array() || !std::all_of(shape.begin(), shape.end(), is_index))
    throw fail("shape must be an array of non-negative integers, got ", brief(shape));
  for (const json& d : shape) info.shape.push_back(d.get<int64_t>());

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !is_index(offsets[0]) || !is_index(offsets[1]) ||
      offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>())
    throw fail("data_offsets must be [begin, end] with 0 <= begin <= end, got ", brief(offsets));
  info.data_begin = offsets[0].get<uint64_t>();
  info.data_end = offsets[1].get<uint64_t>();

  std::optional<uint64_t> bits = bit_size(info.shape, *spec);
  if (!bits) throw fail("shape ", shape_str(info.shape), " of ", info.dtype, " is too large: its byte size overflows");
  if (*bits % 8 != 0) throw fail("shape ", shape_str(info.shape), " of ", info.dtype, " does not fill whole bytes");
  if (*bits / 8 != info.data_end - info.data_begin)
    throw fail("shape ", shape_str(info.shape), " of ", info.dtype, " needs ", *bits / 8, " bytes but data_offsets ",
               offsets_str(info.data_begin, info.data_end), " span ", info.data_end - info.data_begin);
  return info;
}

// The format requires the tensors to tile the data buffer exactly: no overlaps, no holes.
void check_layout(const fs::path& path, const std::map<std::string, TensorInfo>& tensors, uint64_t buffer_size) {
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> ranges;
  for (const auto& [name, info] : tensors) {
    if (info.data_end > buffer_size)
      throw format_error(path, "tensor '", name, "': data_offsets ", offsets_str(info.data_begin, info.data_end),
                         " reach past the end of the ", buffer_size, "-byte data buffer");
    ranges.emplace_back(info.data_begin, info.data_end, &name);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [begin, end, name] : ranges) {
    if (begin < covered)
      throw format_error(path, "tensor '", *name, "' (data_offsets ", offsets_str(begin, end), ") overlaps tensor '",
                         *previous, "' (which ends at ", covered, ")");
    if (begin > covered)
      throw format_error(path, "bytes [", covered, ", ", begin, ") before tensor '", *name,
                         "' belong to no tensor (the data buffer must be fully indexed)");
    covered = end;
    previous = name;
  }
  if (covered != buffer_size) {
    std::string last = previous ? "after tensor '" + *previous + "' " : "";
    throw format_error(path, "bytes [", covered, ", ", buffer_size, ") ", last,
                       "belong to no tensor (the data buffer must be fully indexed)");
  }
}

}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  const DTypeSpec* spec = find_dtype(name);
  return spec ? spec->genesis : std::nullopt;
}

std::string_view safetensors_dtype_name(DType dtype) {
  return kDTypes[dtype_rank(dtype)].name;
}

// --- writing ---------------------------------------------------------------------------------

void save_safetensors(const fs::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  std::set<std::string_view> names;
  for (const auto& entry : tensors) {
    const auto& [name, tensor] = entry;
    GENESIS_CHECK(tensor.defined(), ValueError, "save_safetensors '", path.string(), "': tensor '", name,
                  "' is undefined");
    GENESIS_CHECK(name != kMetadataKey, ValueError, "save_safetensors '", path.string(),
                  "': a tensor may not be named __metadata__");
    GENESIS_CHECK(names.insert(name).second, ValueError, "save_safetensors '", path.string(),
                  "': duplicate tensor name '", name, "'");
    order.push_back(&entry);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    int rank_a = dtype_rank(a->second.dtype()), rank_b = dtype_rank(b->second.dtype());
    return rank_a != rank_b ? rank_a > rank_b : a->first < b->first;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const auto* entry : order) {
    const Tensor& t = entry->second;
    uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[entry->first] = {{"dtype", safetensors_dtype_name(t.dtype())},
                            {"shape", t.shape()},
                            {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const json::exception& e) {
    GENESIS_THROW(ValueError, "save_safetensors '", path.string(), "': tensor names and metadata must be valid UTF-8 (",
                  io::json_error_text(e), ")");
  }
  // Padding to 8 bytes keeps the data buffer (and so every tensor) aligned in the file.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  AtomicFile file(path);
  uint64_t header_size = header_text.size();
  file.write(&header_size, sizeof(header_size));
  file.write(header_text.data(), header_text.size());
  for (const auto* entry : order) {
    const Tensor& t = entry->second;
    if (t.numel() == 0) continue;
    // One tensor at a time on the host, so saving device tensors needs little host memory.
    Tensor host = t.detach().to(kCPU).contiguous();
    file.write(host.data_ptr(), static_cast<size_t>(host.numel()) * host.element_size());
  }
  file.commit();
}

// --- reading ---------------------------------------------------------------------------------

struct SafetensorsFile::Mapping {
  void* address = nullptr;
  size_t size = 0;
  Mapping(void* a, size_t s) : address(a), size(s) {}
  ~Mapping() { ::munmap(address, size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io_error("cannot open safetensors file", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_io_error("cannot stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    GENESIS_THROW(IoError, "safetensors file '", path.string(), "' is not a regular file");
  }
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw format_error(path, "file is ", file_size, " bytes, too short for the 8-byte header length (truncated?)");
  }
  // Private and writable: tensors that view the file may be modified in memory (copy-on-write)
  // without the writes ever reaching the file.
  void* address = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (address == MAP_FAILED) throw_io_error("cannot map", path, map_errno);
  mapping_ = std::make_shared<const Mapping>(address, file_size);
  const char* bytes = static_cast<const char*>(address);

  uint64_t header_size;
  std::memcpy(&header_size, bytes, sizeof(header_size));
  if (header_size > kMaxHeaderBytes)
    throw format_error(path, "header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  if (header_size > file_size - 8)
    throw format_error(path, "header length ", header_size, " exceeds the ", file_size - 8,
                       " bytes that follow it (truncated?)");
  const char* header_begin = bytes + 8;
  const char* header_end = header_begin + header_size;
  if (header_size == 0 || *header_begin != '{') throw format_error(path, "header does not start with '{'");

  json header;
  try {
    HeaderKeyCheck check(path);
    json::sax_parse(header_begin, header_end, &check);
    header = json::parse(header_begin, header_end);
  } catch (const json::exception& e) {
    throw format_error(path, "header is not valid JSON: ", shortened(io::json_error_text(e), 240));
  }
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) throw format_error(path, "__metadata__ must be an object of strings");
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string())
          throw format_error(path, "__metadata__ value of \"", meta_key, "\" must be a string, got ",
                             brief(meta_value));
        metadata_.emplace(meta_key, meta_value.get<std::string>());
      }
    } else {
      tensors_.emplace(key, parse_entry(path, key, value));
    }
  }
  data_ = header_end;
  check_layout(path, tensors_, file_size - 8 - header_size);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  GENESIS_CHECK(it != tensors_.end(), ValueError, "safetensors file '", path_.string(), "' has no tensor '", name,
                "' (it holds ", tensors_.size(), " tensors)");
  return it->second;
}

namespace {

struct Nonfinite {
  int64_t index = -1;  // -1: every element is finite
  double value = 0.0;
};

template <typename T>
Nonfinite first_nonfinite(const Tensor& t) {
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const auto value = static_cast<double>(p[i]);
    if (!std::isfinite(value)) return {i, value};
  }
  return {};
}

}  // namespace

void require_finite(const Tensor& tensor, const std::string& name, const std::filesystem::path& file) {
  const Tensor t = tensor.contiguous();
  Nonfinite bad;
  switch (t.dtype()) {
    case DType::f32: bad = first_nonfinite<float>(t); break;
    case DType::f64: bad = first_nonfinite<double>(t); break;
    case DType::f16: bad = first_nonfinite<float16>(t); break;
    case DType::bf16: bad = first_nonfinite<bfloat16>(t); break;
    default: return;
  }
  if (bad.index < 0) return;
  GENESIS_THROW(ValueError, file.string(), ": tensor '", name, "' holds ", bad.value, " at element ", bad.index,
                " of ", t.numel(), "; the weights are damaged (saved by a run that diverged, or "
                "corrupted): load other weights");
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& entry = info(name);
  std::optional<DType> dtype = dtype_from_safetensors(entry.dtype);
  GENESIS_CHECK(dtype.has_value(), DTypeError, "safetensors file '", path_.string(), "': unsupported dtype ",
                entry.dtype, " for tensor '", name, "' (genesis reads F32, F64, F16, BF16, I32, I64 and BOOL)");
  GENESIS_CHECK(static_cast<int64_t>(entry.shape.size()) <= kMaxTensorDims, ShapeError, "safetensors file '",
                path_.string(), "': tensor '", name, "' has ", entry.shape.size(), " dimensions; genesis supports ",
                kMaxTensorDims);
  char* begin = const_cast<char*>(data_) + entry.data_begin;
  size_t nbytes = entry.data_end - entry.data_begin;
  if (*dtype == DType::boolean) {
    // A bool holding another byte than 0 or 1 is undefined behaviour wherever it is read.
    const auto* bytes = reinterpret_cast<const unsigned char*>(begin);
    const auto* bad = std::find_if(bytes, bytes + nbytes, [](unsigned char b) { return b > 1; });
    GENESIS_CHECK(bad == bytes + nbytes, FormatError, "safetensors file '", path_.string(), "': BOOL tensor '", name,
                  "' holds the byte ", int{*bad}, " at element ", bad - bytes, " (BOOL elements are 0 or 1)");
  }
  if (reinterpret_cast<uintptr_t>(begin) % dtype_size(*dtype) != 0) {
    Tensor copy = empty(entry.shape, {.dtype = *dtype});
    std::memcpy(copy.data_ptr(), begin, nbytes);
    return copy;
  }
  auto storage = std::make_shared<Storage>(begin, nbytes, kCPU, [mapping = mapping_](void*) {});
  return Tensor(
      std::make_shared<TensorImpl>(std::move(storage), entry.shape, contiguous_strides(entry.shape), 0, *dtype));
}

Tensor SafetensorsFile::load(const std::string& name, DType dtype, Device device) const {
  Tensor view = tensor(name);
  Tensor out = view.to(device).to(dtype);
  return out.shares_storage(view) ? out.clone() : out;
}

}  // namespace genesis::io
