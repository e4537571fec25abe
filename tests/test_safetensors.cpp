// safetensors: round trips of every dtype and layout, zero-copy views of the mapping, the exact
// bytes of the writer, files crafted byte by byte, and every way a header can be corrupt.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "libgenesis/io/file_util.h"
#include "libgenesis/io/safetensors.h"
#include "tests/testing.h"

using namespace genesis;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using testing::TempDir;

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

// The file bytes for `header` (written as given, no padding) followed by `data`.
std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The FormatError message for opening `bytes` as a file; fails the test when it opens fine.
std::string open_error(const TempDir& dir, const std::string& bytes) {
  fs::path path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  try {
    io::SafetensorsFile file(path);
  } catch (const FormatError& e) {
    std::string message = e.what();
    CHECK_THAT(message, Contains(path.string()));
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("opening a corrupt file did not throw FormatError");
  return "";
}

std::string entry(const std::string& dtype, const std::string& shape, uint64_t begin, uint64_t end) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(begin) + "," +
         std::to_string(end) + "]}";
}

void require_same(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.dtype() == expected.dtype());
  REQUIRE(actual.shape() == expected.shape());
  if (expected.dtype() == DType::i64) {
    CHECK(actual.to_vector<int64_t>() == expected.to_vector<int64_t>());
  } else {
    CHECK(actual.to_vector<double>() == expected.to_vector<double>());
  }
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype and of 0-d empty and non-contiguous tensors", "[cpu][io]") {
  TempDir dir;
  Tensor base = testing::rand_values({3, 4}, DType::f32, -5, 5);
  io::NamedTensors tensors = {
      {"f32", testing::rand_values({2, 3}, DType::f32, -100, 100)},
      {"f64", testing::rand_values({4}, DType::f64)},
      {"f16", testing::rand_values({3, 2}, DType::f16, -60000, 60000)},
      {"bf16", testing::rand_values({5}, DType::bf16, -1e30, 1e30)},
      {"i32", from_vector<int32_t>({INT32_MIN, -1, 0, INT32_MAX}, {2, 2})},
      {"i64", from_vector<int64_t>({INT64_MIN, (int64_t{1} << 53) + 1, INT64_MAX}, {3})},
      {"bool", tensor({1, 0, 0, 1}).to(DType::boolean)},
      {"scalar", scalar_tensor(2.5, {.dtype = DType::f64})},
      {"empty_rows", zeros({0, 3}, {.dtype = DType::f16})},
      {"empty_cols", empty({2, 0}, {.dtype = DType::i32})},
      {"transposed", base.t()},
      {"strided", base.slice(1, 0, 4, 2)},
      {"expanded", tensor({1, 2, 3}).unsqueeze(0).expand({4, 3})},
      {"offset_view", base.select(0, 2)},
  };
  fs::path path = dir / "all.safetensors";
  io::save_safetensors(path, tensors);
  CHECK(!fs::exists(path.string() + ".tmp"));

  io::SafetensorsFile file(path);
  std::vector<std::string> names = file.names();
  REQUIRE(names.size() == tensors.size());
  CHECK(std::is_sorted(names.begin(), names.end()));
  for (const auto& [name, expected] : tensors) {
    INFO("tensor " << name);
    REQUIRE(file.contains(name));
    Tensor actual = file.tensor(name);
    CHECK(actual.device() == kCPU);
    if (actual.numel() > 0) CHECK(actual.is_contiguous());
    require_same(actual, expected.contiguous());
    const io::TensorInfo& info = file.info(name);
    CHECK(info.dtype == io::safetensors_dtype_name(expected.dtype()));
    CHECK(info.shape == expected.shape());
    CHECK(info.data_end - info.data_begin == static_cast<uint64_t>(expected.numel()) * expected.element_size());
    // The writer orders tensors widest dtype first, so every tensor sits aligned in the file.
    CHECK(info.data_begin % expected.element_size() == 0);
  }
  CHECK(file.metadata().empty());
  CHECK(read_bytes(path).find("__metadata__") == std::string::npos);
  CHECK_THROWS_AS(file.info("missing"), ValueError);
  CHECK_THROWS_AS(file.tensor("missing"), ValueError);

  // load() casts and always owns its memory.
  Tensor as_f64 = file.load("f32", DType::f64);
  CHECK(as_f64.dtype() == DType::f64);
  CHECK(as_f64.to_vector<double>() == tensors[0].second.to_vector<double>());
  Tensor same = file.load("f32", DType::f32);
  CHECK(!same.shares_storage(file.tensor("f32")));
  require_same(same, tensors[0].second);
  CHECK(file.load("bool", DType::f32).to_vector<float>() == std::vector<float>{1, 0, 0, 1});

  // Saving again replaces the file; views of the old file stay valid (the rename left its inode alone).
  Tensor old_view = file.tensor("f32");
  io::save_safetensors(path, {{"only", ones({2})}});
  CHECK(io::SafetensorsFile(path).names() == std::vector<std::string>{"only"});
  require_same(old_view, tensors[0].second);
}

TEST_CASE("safetensors metadata round trip", "[cpu][io]") {
  TempDir dir;
  std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                 {"quote\"and\\slash", "line\nbreak\ttab"},
                                                 {"empty", ""},
                                                 {"unicode", "gr\xC3\xBC\xC3\x9F"},
                                                 {"control", std::string("a\x01z")}};
  fs::path path = dir / "meta.safetensors";
  io::save_safetensors(path, {{"w", ones({2, 2})}}, metadata);
  io::SafetensorsFile file(path);
  CHECK(file.metadata() == metadata);
  require_same(file.tensor("w"), ones({2, 2}));

  // Metadata alone, without tensors.
  io::save_safetensors(path, {}, {{"step", "12"}});
  io::SafetensorsFile only_metadata(path);
  CHECK(only_metadata.names().empty());
  CHECK(only_metadata.metadata().at("step") == "12");
}

TEST_CASE("safetensors views alias the mapping and outlive the file object", "[cpu][io]") {
  TempDir dir;
  fs::path path = dir / "view.safetensors";
  Tensor data = arange(0, 12, 1, {.dtype = DType::f32}).reshape({3, 4});
  io::save_safetensors(path, {{"x", data}, {"y", ones({5}, {.dtype = DType::f64})}});

  Tensor view_a, view_b, loaded;
  {
    io::SafetensorsFile file(path);
    view_a = file.tensor("x");
    view_b = file.tensor("x");
    loaded = file.load("x", DType::f32);
    // Two views of the same bytes: same address, no copy.
    CHECK(view_a.data_ptr() == view_b.data_ptr());
    CHECK(view_a.data_ptr() != loaded.data_ptr());
    CHECK(reinterpret_cast<uintptr_t>(view_a.data_ptr()) % alignof(float) == 0);
    CHECK(view_a.storage()->nbytes() == 12 * sizeof(float));
  }
  // The SafetensorsFile is gone; the views keep the mapping alive.
  require_same(view_a, data);
  {
    NoGradGuard guard;
    view_a.select(0, 1).fill_(-7.0);
  }
  // The write shows through the other view of the same bytes, but not in the owned copy ...
  CHECK(view_b.select(0, 1).to_vector<float>() == std::vector<float>{-7, -7, -7, -7});
  require_same(loaded, data);
  // ... and never reaches the file: the mapping is copy-on-write.
  require_same(io::SafetensorsFile(path).tensor("x"), data);
  view_a = Tensor();
  require_same(view_b.select(0, 0), data.select(0, 0));
}

TEST_CASE("safetensors writer produces the exact bytes of the format", "[cpu][io]") {
  TempDir dir;
  fs::path path = dir / "exact.safetensors";

  // Tensors go widest dtype first (I64, F32, BOOL), then by name; "__metadata__" leads; compact
  // JSON of 197 bytes padded with 3 spaces to 200.
  io::save_safetensors(path,
                       {{"flag", tensor({1, 0, 1}).to(DType::boolean)},
                        {"a", tensor({1.0, -2.0})},
                        {"b", scalar_tensor(7, {.dtype = DType::i64})}},
                       {{"format", "pt"}});
  std::string header = R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                       R"("flag":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]}})";
  REQUIRE(header.size() == 197);
  std::string expected = std::string("\xC8\0\0\0\0\0\0\0", 8) + header + "   " +
                         std::string("\x07\0\0\0\0\0\0\0", 8) +      // b = 7 (i64)
                         std::string("\0\0\x80\x3F\0\0\0\xC0", 8) +  // a = 1.0f, -2.0f
                         std::string("\x01\x00\x01", 3);             // flag
  CHECK(read_bytes(path) == expected);

  // The reference library's own serialization example: a header of exactly 64 bytes, no padding.
  io::save_safetensors(path, {{"attn.0", arange(0, 6, 1, {.dtype = DType::f32}).reshape({1, 2, 3})}});
  std::string attn_header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  std::string attn_data;
  for (float f : {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f}) attn_data.append(reinterpret_cast<const char*>(&f), 4);
  CHECK(read_bytes(path) == file_bytes(attn_header, attn_data));

  // No tensors, no metadata: "{}" padded to 8 bytes.
  io::save_safetensors(path, {});
  CHECK(read_bytes(path) == file_bytes("{}      ", ""));
}

TEST_CASE("safetensors reads files crafted byte by byte", "[cpu][io]") {
  TempDir dir;
  fs::path path = dir / "crafted.safetensors";
  // Unusual but valid: fields in another order, whitespace, tensors listed out of offset order,
  // a dtype genesis cannot hold, and a header padded to 8 bytes.
  std::string header =
      R"({ "h": {"data_offsets": [8, 12], "shape": [2], "dtype": "F16"},)"
      R"( "__metadata__": {"who": "hand"}, "u": {"shape": [2, 2], "dtype": "U8", "data_offsets": [12, 16]},)"
      R"( "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [4, 8]},)"
      R"( "i": {"dtype": "I32", "shape": [], "data_offsets": [0, 4]} })";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data = std::string("\xFE\xFF\xFF\xFF", 4) +  // i = -2
                     std::string("\x80\x3F\x00\x3F", 4) +  // b = bf16 1.0, 0.5
                     std::string("\x00\x3C\x00\xC0", 4) +  // h = f16 1.0, -2.0
                     std::string("\x01\x02\x03\x04", 4);   // u
  write_bytes(path, file_bytes(header, data));

  io::SafetensorsFile file(path);
  CHECK(file.names() == std::vector<std::string>{"b", "h", "i", "u"});
  CHECK(file.metadata() == std::map<std::string, std::string>{{"who", "hand"}});
  CHECK(file.tensor("i").dtype() == DType::i32);
  CHECK(file.tensor("i").dim() == 0);
  CHECK(file.tensor("i").item() == -2.0);
  CHECK(file.tensor("b").shape() == Shape{1, 2});
  CHECK(file.tensor("b").to_vector<float>() == std::vector<float>{1.0f, 0.5f});
  CHECK(file.tensor("h").dtype() == DType::f16);
  CHECK(file.tensor("h").to_vector<float>() == std::vector<float>{1.0f, -2.0f});
  const io::TensorInfo& u = file.info("u");
  CHECK(u.dtype == "U8");
  CHECK(u.shape == Shape{2, 2});
  CHECK(u.data_begin == 12);
  CHECK(u.data_end == 16);
  CHECK_THROWS_AS(file.tensor("u"), DTypeError);
  CHECK_THROWS_WITH(file.load("u", DType::f32), Contains("unsupported dtype U8 for tensor 'u'"));
  CHECK(!io::dtype_from_safetensors("U8").has_value());
  CHECK(io::dtype_from_safetensors("BF16") == DType::bf16);

  // A header whose length is not a multiple of 8 leaves the data misaligned: still read right.
  std::string unaligned = R"({"x":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  REQUIRE(unaligned.size() % 8 != 0);
  double values[2] = {3.25, -1e300};
  write_bytes(path, file_bytes(unaligned, std::string(reinterpret_cast<const char*>(values), 16)));
  CHECK(io::SafetensorsFile(path).tensor("x").to_vector<double>() == std::vector<double>{3.25, -1e300});

  // Sub-byte and complex dtypes are known: listed, not loaded.
  std::string exotic = R"({"f4":{"dtype":"F4","shape":[4],"data_offsets":[0,2]},)"
                       R"("c":{"dtype":"C64","shape":[1],"data_offsets":[2,10]}})";
  write_bytes(path, file_bytes(exotic, std::string(10, '\0')));
  io::SafetensorsFile exotic_file(path);
  CHECK(exotic_file.info("f4").data_end == 2);
  CHECK_THROWS_AS(exotic_file.tensor("c"), DTypeError);
}

TEST_CASE("safetensors rejects corrupt files with FormatError naming the problem", "[cpu][io]") {
  TempDir dir;
  std::string f32x2(8, '\0');
  auto one = [&](const std::string& tensor_entry, const std::string& data) {
    return file_bytes("{\"t\":" + tensor_entry + "}", data);
  };

  SECTION("truncated before the header length") {
    CHECK_THAT(open_error(dir, "\x10\0\0"), Contains("too short"));
  }
  SECTION("truncated inside the header") {
    std::string valid = one(entry("F32", "[2]", 0, 8), f32x2);
    CHECK_THAT(open_error(dir, valid.substr(0, 20)), Contains("truncated"));
  }
  SECTION("truncated inside the data") {
    std::string valid = one(entry("F32", "[2]", 0, 8), f32x2);
    CHECK_THAT(open_error(dir, valid.substr(0, valid.size() - 3)),
               Contains("tensor 't'") && Contains("past the end of the 5-byte data buffer"));
  }
  SECTION("header longer than the limit") {
    CHECK_THAT(open_error(dir, le64(200'000'000) + "{}"), Contains("exceeds the limit of 100000000 bytes"));
  }
  SECTION("a BOOL element that is neither 0 nor 1 (found by tests/fuzz: undefined behaviour when read)") {
    const fs::path path = dir / "bool.safetensors";
    write_bytes(path, one(entry("BOOL", "[3]", 0, 3), std::string("\x01\x00\x80", 3)));
    io::SafetensorsFile file(path);
    CHECK_THROWS_AS(file.tensor("t"), FormatError);
    CHECK_THROWS_WITH(file.tensor("t"), Contains("BOOL tensor 't'") && Contains("byte 128 at element 2"));
  }
  SECTION("invalid JSON") {
    CHECK_THAT(open_error(dir, file_bytes("{\"t\": {", "")), Contains("not valid JSON"));
  }
  SECTION("header that is not an object") {
    CHECK_THAT(open_error(dir, file_bytes("[1, 2]  ", "")), Contains("'{'"));
  }
  SECTION("invalid UTF-8") {
    CHECK_THAT(open_error(dir, file_bytes("{\"__metadata__\":{\"k\":\"\xFF\"}}", "")), Contains("not valid JSON"));
  }
  SECTION("unknown dtype") {
    CHECK_THAT(open_error(dir, one(entry("F23", "[2]", 0, 8), f32x2)),
               Contains("tensor 't'") && Contains("unknown dtype \"F23\"") && Contains("BOOL") && Contains("BF16"));
  }
  SECTION("shape that does not match the byte range") {
    CHECK_THAT(open_error(dir, one(entry("F32", "[3]", 0, 8), f32x2)),
               Contains("tensor 't'") && Contains("needs 12 bytes but data_offsets [0, 8] span 8"));
  }
  SECTION("shape whose byte size overflows") {
    CHECK_THAT(open_error(dir, one(entry("F64", "[4294967296,4294967296,16]", 0, 8), f32x2)), Contains("too large"));
  }
  SECTION("sub-byte dtype that leaves a partial byte") {
    CHECK_THAT(open_error(dir, one(entry("F4", "[3]", 0, 2), std::string(2, '\0'))),
               Contains("does not fill whole bytes"));
  }
  SECTION("control characters in names are escaped") {
    std::string header = "{\"a\\nb\":" + entry("F32", "[1]", 0, 8) + "}";
    CHECK_THAT(open_error(dir, file_bytes(header, f32x2)), Contains("tensor 'a\\nb'"));
    header = "{\"a\\u0001\\u00e9\":" + entry("F32", "[1]", 0, 8) + "}";  // U+0001 escaped, é kept
    CHECK_THAT(open_error(dir, file_bytes(header, f32x2)), Contains("tensor 'a\\x01\u00e9'"));
  }
  SECTION("offsets past the data buffer") {
    CHECK_THAT(open_error(dir, one(entry("F32", "[4]", 0, 16), f32x2)), Contains("past the end"));
  }
  SECTION("overlapping tensors") {
    std::string header = "{\"a\":" + entry("F32", "[2]", 0, 8) + ",\"b\":" + entry("F32", "[2]", 4, 12) + "}";
    CHECK_THAT(open_error(dir, file_bytes(header, std::string(12, '\0'))),
               Contains("tensor 'b'") && Contains("overlaps tensor 'a'"));
  }
  SECTION("a hole between tensors") {
    std::string header = "{\"a\":" + entry("F32", "[1]", 0, 4) + ",\"b\":" + entry("F32", "[1]", 8, 12) + "}";
    CHECK_THAT(open_error(dir, file_bytes(header, std::string(12, '\0'))),
               Contains("bytes [4, 8) before tensor 'b' belong to no tensor"));
  }
  SECTION("bytes after the last tensor") {
    CHECK_THAT(open_error(dir, one(entry("F32", "[1]", 0, 4), f32x2)),
               Contains("bytes [4, 8) after tensor 't' belong to no tensor"));
  }
  SECTION("data but no tensors") {
    CHECK_THAT(open_error(dir, file_bytes("{}", "xy")), Contains("bytes [0, 2)"));
  }
  SECTION("duplicate tensor names") {
    std::string header = "{\"a\":" + entry("F32", "[1]", 0, 4) + ",\"a\":" + entry("F32", "[1]", 4, 8) + "}";
    CHECK_THAT(open_error(dir, file_bytes(header, f32x2)), Contains("duplicate tensor name 'a'"));
  }
  SECTION("duplicate field in an entry") {
    std::string header = R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    CHECK_THAT(open_error(dir, file_bytes(header, f32x2)), Contains("duplicate key \"dtype\" in the entry 't'"));
  }
  SECTION("malformed entries") {
    CHECK_THAT(open_error(dir, one("[1]", f32x2)), Contains("not a JSON object"));
    CHECK_THAT(open_error(dir, one(R"({"dtype":"F32","shape":[2]})", f32x2)),
               Contains("missing field \"data_offsets\""));
    CHECK_THAT(open_error(dir, one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})", f32x2)),
               Contains("unexpected field \"x\""));
    CHECK_THAT(open_error(dir, one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})", f32x2)),
               Contains("dtype must be a string"));
    CHECK_THAT(open_error(dir, one(entry("F32", "[-2]", 0, 8), f32x2)), Contains("non-negative integers"));
    CHECK_THAT(open_error(dir, one(entry("F32", "[2.0]", 0, 8), f32x2)), Contains("non-negative integers"));
    // Long values are cut short in messages.
    std::string long_shape = "[\"";
    long_shape.append(200, 'x').append("\"]");
    std::string message = open_error(dir, one(entry("F32", long_shape, 0, 8), f32x2));
    CHECK_THAT(message, Contains("got [\"xxxx") && Contains("x..."));
    CHECK(message.size() < 250);
    std::string huge_number = "[";
    huge_number.append(500, '1').append("]");
    CHECK(open_error(dir, one(entry("F32", huge_number, 0, 8), f32x2)).size() < 400);
    CHECK_THAT(open_error(dir, one(entry("F32", "[2]", 8, 0), f32x2)), Contains("begin <= end"));
    CHECK_THAT(open_error(dir, one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", f32x2)),
               Contains("data_offsets must be [begin, end]"));
  }
  SECTION("metadata that is not a map of strings") {
    CHECK_THAT(open_error(dir, file_bytes(R"({"__metadata__":{"k":1}})", "")), Contains("must be a string"));
    CHECK_THAT(open_error(dir, file_bytes(R"({"__metadata__":[]})", "")), Contains("object of strings"));
  }
  SECTION("a missing file is an IoError") {
    CHECK_THROWS_AS(io::SafetensorsFile(dir / "nope"), IoError);
  }
}

TEST_CASE("safetensors writer rejects bad input and leaves no partial file", "[cpu][io]") {
  TempDir dir;
  fs::path path = dir / "w.safetensors";
  io::save_safetensors(path, {{"keep", ones({3})}});
  std::string before = read_bytes(path);

  CHECK_THROWS_AS(io::save_safetensors(path, {{"a", ones({1})}, {"a", zeros({1})}}), ValueError);
  CHECK_THROWS_AS(io::save_safetensors(path, {{"__metadata__", ones({1})}}), ValueError);
  CHECK_THROWS_AS(io::save_safetensors(path, {{"undefined", Tensor()}}), ValueError);
  CHECK_THROWS_AS(io::save_safetensors(path, {{"bad\xFFname", ones({1})}}), ValueError);
  CHECK_THROWS_AS(io::save_safetensors(path, {}, {{"k", "\xC3"}}), ValueError);
  CHECK(read_bytes(path) == before);
  CHECK(!fs::exists(path.string() + ".tmp"));

  CHECK_THROWS_AS(io::save_safetensors(dir / "no_such_dir" / "x.safetensors", {{"a", ones({1})}}), IoError);
  CHECK_THROWS_WITH(io::save_safetensors(dir / "no_such_dir" / "x.safetensors", {{"a", ones({1})}}),
                    Contains("no_such_dir"));
}

TEST_CASE("safetensors round trip of a larger tensor set", "[cpu][io]") {
  TempDir dir;
  io::NamedTensors tensors;
  for (int i = 0; i < 20; ++i) {
    DType dtype = i % 3 == 0 ? DType::bf16 : (i % 3 == 1 ? DType::f32 : DType::i64);
    Tensor t = dtype == DType::i64 ? randint(-1000, 1000, {i + 1, 7}) : testing::rand_values({37, i + 1}, dtype);
    tensors.emplace_back("layer." + std::to_string(i) + ".weight", t);
  }
  fs::path path = dir / "model.safetensors";
  io::save_safetensors(path, tensors);
  io::SafetensorsFile file(path);
  for (const auto& [name, expected] : tensors) {
    INFO(name);
    require_same(file.tensor(name), expected);
  }
}

// Regression (issue 14): the duplicate-key check ran inside nlohmann's callback parser, which
// walks the enclosing object at the end of every entry, so headers of 40,000 tensors took 13 s
// and 100,000 over 200 s. 100,000 one-element tensors must open (now in well under a second).
TEST_CASE("safetensors opens a header of 100000 tensors", "[cpu][io]") {
  TempDir dir;
  constexpr int kTensors = 100'000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const fs::path path = dir / "many.safetensors";
  write_bytes(path, file_bytes(header, std::string(kTensors, '\x07')));
  io::SafetensorsFile file(path);
  CHECK(file.names().size() == kTensors);
  CHECK(file.info("t99999").data_begin == kTensors - 1);
}
