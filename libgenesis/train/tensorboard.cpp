#include "libgenesis/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"

namespace genesis::train {

namespace {

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli polynomial
    table[i] = c;
  }
  return table;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Protocol-buffer encoding of the fields used here (wire types: 0 varint, 1 fixed64, 2 bytes,
// 5 fixed32), little-endian as protobuf defines it.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field << 3 | wire_type)); }
template <class T>
void put_fixed(std::string& out, T value) {
  const auto bits = std::bit_cast<std::array<char, sizeof(T)>>(value);  // x86-64 is little-endian, as protobuf
  out.append(bits.data(), bits.size());
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event(double wall_time, int64_t step) {
  std::string out;
  put_key(out, 1, 1);
  put_fixed(out, wall_time);
  put_key(out, 2, 0);
  put_varint(out, static_cast<uint64_t>(step));
  return out;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(unix_seconds())) + "." + host + "." +
                 std::to_string(getpid()) + ".genesis");
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) io::throw_io_error("cannot create the TensorBoard event file", path_, errno);
  std::string first = event(unix_seconds(), 0);
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::scalar(std::string_view tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string value_message;
  put_bytes(value_message, 1, tag);
  put_key(value_message, 2, 5);
  put_fixed(value_message, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, value_message);
  std::string e = event(unix_seconds(), step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::flush() { std::fflush(file_); }

void TensorBoardWriter::write_record(const std::string& e) {
  std::string length;
  put_fixed(length, static_cast<uint64_t>(e.size()));
  std::string record = length;
  put_fixed(record, masked_crc32c(length));
  record += e;
  put_fixed(record, masked_crc32c(e));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    io::throw_io_error("cannot write the TensorBoard event file", path_, errno);
}

}  // namespace genesis::train
