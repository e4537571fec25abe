#include "libgenesis/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"

namespace genesis::data {

namespace {

// An IDX payload larger than this is refused from its header alone (Fashion-MNIST's largest file
// holds 47 MB): a small gzip file that inflates to gigabytes is never inflated.
constexpr size_t kMaxIdxBytes = size_t{1} << 30;

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// A gzip'd or plain file read in pieces (gzread reads uncompressed files transparently).
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    GENESIS_CHECK(std::filesystem::exists(path), ValueError, "data file not found: ", path);
    file_ = gzopen(path.c_str(), "rb");
    GENESIS_CHECK(file_ != nullptr, ValueError, "cannot open ", path);
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data.
  size_t read(unsigned char* out, size_t n) {
    size_t got = 0;
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<size_t>(n - got, size_t{1} << 30));
      const int r = gzread(file_, out + got, chunk);
      if (r < 0) {
        int err = 0;
        const char* msg = gzerror(file_, &err);
        GENESIS_THROW(ValueError, "corrupt or truncated gzip data in ", path_, ": ", msg);
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

}  // namespace

Tensor read_idx(const std::string& path) {
  GzReader in(path);
  unsigned char head[4 + 4 * 4] = {};
  GENESIS_CHECK(in.read(head, 4) == 4 && head[0] == 0 && head[1] == 0, ValueError, path,
                ": not an IDX file (bad magic number)");
  const unsigned char type = head[2];
  const size_t ndim = head[3];
  GENESIS_CHECK(ndim >= 1 && ndim <= 4, ValueError, path, ": unsupported IDX rank ", ndim);
  GENESIS_CHECK(in.read(head + 4, 4 * ndim) == 4 * ndim, ValueError, path, ": truncated IDX header");
  const size_t elem = type == 0x08 || type == 0x09 ? 1 : type == 0x0C || type == 0x0D ? 4 : 0;
  GENESIS_CHECK(elem != 0, ValueError, path, ": unsupported IDX element type 0x", std::hex, int{type});
  Shape shape;
  size_t bytes = elem;
  size_t bound = elem;  // the same product with zero sizes taken as 1: a 0 must not hide huge others
  for (size_t d = 0; d < ndim; ++d) {
    shape.push_back(be32(&head[4 + 4 * d]));
    const auto size = static_cast<size_t>(shape.back());
    GENESIS_CHECK(bound <= kMaxIdxBytes / std::max<size_t>(size, 1), ValueError, path, ": its header announces shape ",
                  shape, "..., more than ", kMaxIdxBytes >> 20, " MiB of data; not an IDX dataset genesis reads");
    bound *= std::max<size_t>(size, 1);
    bytes *= size;
  }
  const auto count = static_cast<size_t>(numel_of(shape));
  // Read in pieces, growing the buffer as data comes: a header announcing a large payload in a
  // short file costs what the file holds, not what the header claims.
  std::vector<unsigned char> payload;
  size_t got = 0;
  while (got < bytes) {
    const size_t piece = std::min(bytes - got, size_t{16} << 20);
    payload.resize(got + piece);
    const size_t n = in.read(payload.data() + got, piece);
    got += n;
    if (n < piece) break;
  }
  unsigned char extra = 0;
  GENESIS_CHECK(got == bytes && in.read(&extra, 1) == 0, ValueError, path, ": expected ", bytes,
                " data bytes for shape ", shape, ", found ", got == bytes ? "more" : std::to_string(got));
  const unsigned char* data = payload.data();
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
