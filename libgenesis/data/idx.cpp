#include "libgenesis/data/idx.h"

#include <zlib.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"

namespace genesis::data {

namespace {

// gzread also reads uncompressed files transparently.
std::vector<unsigned char> read_all(const std::string& path) {
  GENESIS_CHECK(std::filesystem::exists(path), ValueError, "data file not found: ", path);
  gzFile f = gzopen(path.c_str(), "rb");
  GENESIS_CHECK(f != nullptr, ValueError, "cannot open ", path);
  std::vector<unsigned char> out;
  unsigned char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string error = err != Z_OK && err != Z_STREAM_END ? msg : "";
  gzclose(f);
  GENESIS_CHECK(n == 0 && error.empty(), ValueError, "corrupt or truncated gzip data in ", path, ": ", error);
  return out;
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Tensor read_idx(const std::string& path) {
  std::vector<unsigned char> bytes = read_all(path);
  GENESIS_CHECK(bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0, ValueError, path,
                ": not an IDX file (bad magic number)");
  unsigned char type = bytes[2];
  size_t ndim = bytes[3];
  GENESIS_CHECK(ndim >= 1 && ndim <= 4, ValueError, path, ": unsupported IDX rank ", ndim);
  GENESIS_CHECK(bytes.size() >= 4 + 4 * ndim, ValueError, path, ": truncated IDX header");
  Shape shape;
  for (size_t d = 0; d < ndim; ++d) shape.push_back(be32(&bytes[4 + 4 * d]));
  size_t header = 4 + 4 * ndim;
  auto count = static_cast<size_t>(numel_of(shape));
  size_t elem = type == 0x08 || type == 0x09 ? 1 : type == 0x0C || type == 0x0D ? 4 : 0;
  GENESIS_CHECK(elem != 0, ValueError, path, ": unsupported IDX element type 0x", std::hex, int{type});
  GENESIS_CHECK(bytes.size() == header + count * elem, ValueError, path, ": expected ", count * elem,
                " data bytes for shape ", shape, ", found ", bytes.size() - header);
  const unsigned char* data = bytes.data() + header;
  if (type == 0x08 || type == 0x09) {
    bool labels = ndim == 1;
    Tensor out = empty(shape, {.dtype = labels ? DType::i64 : DType::f32});
    for (size_t i = 0; i < count; ++i) {
      int v = type == 0x08 ? int{data[i]} : int{static_cast<signed char>(data[i])};
      if (labels) out.data<int64_t>()[i] = v;
      else out.data<float>()[i] = static_cast<float>(v);
    }
    return out;
  }
  Tensor out = empty(shape, {.dtype = type == 0x0C ? DType::i32 : DType::f32});
  auto* dst = static_cast<uint32_t*>(out.data_ptr());
  for (size_t i = 0; i < count; ++i) dst[i] = be32(data + 4 * i);
  return out;
}

}  // namespace genesis::data
