#include "tests/testing.h"

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::testing {

Tensor rand_leaf(const Shape& shape, double lo, double hi) {
  Tensor t = uniform_like(empty(shape, {.dtype = DType::f64}), lo, hi);
  t.requires_grad_(true);
  return t;
}

Tensor rand_values(const Shape& shape, DType dtype, double lo, double hi) {
  if (is_floating(dtype)) return uniform_like(empty(shape, {.dtype = dtype}), lo, hi);
  return uniform_like(empty(shape, {.dtype = DType::f64}), lo, hi).to(dtype);
}

void gradcheck(const Fn& f, const TensorList& inputs, GradcheckOptions options) {
  for (const Tensor& in : inputs) {  // integer inputs (indices) and masks pass through
    REQUIRE((in.dtype() == DType::f64 || !in.requires_grad()));
    REQUIRE(in.is_leaf());
    REQUIRE(in.is_contiguous());
  }
  Tensor y0 = f(inputs);
  REQUIRE(y0.dtype() == DType::f64);
  Tensor w = uniform_like(y0.detach(), 0.5, 1.5);
  auto objective = [&]() {
    NoGradGuard no_grad;
    return sum(mul(f(inputs), w)).item();
  };
  for (Tensor in : inputs)
    if (in.requires_grad()) in.set_grad(Tensor());
  Tensor loss = sum(mul(y0, w));
  loss.backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& in = inputs[k];
    if (!in.requires_grad()) continue;
    Tensor analytic = in.grad();
    std::vector<double> ana = analytic.defined() ? analytic.to_vector<double>() : std::vector<double>(in.numel(), 0.0);
    auto* data = in.data<double>();
    for (int64_t i = 0; i < in.numel(); ++i) {
      double orig = data[i];
      data[i] = orig + options.eps;
      double plus = objective();
      data[i] = orig - options.eps;
      double minus = objective();
      data[i] = orig;
      double numeric = (plus - minus) / (2 * options.eps);
      double a = ana[static_cast<size_t>(i)];
      INFO("input " << k << " (shape " << shape_str(in.shape()) << "), element " << i << ": analytic " << a
                    << ", numeric " << numeric);
      REQUIRE(std::fabs(a - numeric) <= options.atol + options.rtol * std::fabs(numeric));
    }
  }
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (std::isnan(va[i]) != std::isnan(vb[i])) return false;
      continue;
    }
    if (std::isinf(vb[i]) && va[i] == vb[i]) continue;
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  }
  return true;
}

void require_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  INFO("actual shape " << shape_str(actual.shape()) << ", expected shape " << shape_str(expected.shape()));
  REQUIRE(actual.shape() == expected.shape());
  auto va = actual.to_vector<double>(), vb = expected.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    bool ok;
    if (std::isnan(va[i]) || std::isnan(vb[i])) ok = std::isnan(va[i]) && std::isnan(vb[i]);
    else if (std::isinf(vb[i])) ok = va[i] == vb[i];
    else ok = std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]);
    if (!ok) {
      INFO("element " << i << ": actual " << va[i] << ", expected " << vb[i] << " (rtol " << rtol << ", atol " << atol
                      << ")");
      REQUIRE(ok);
    }
  }
}

std::set<std::string>& gradcheck_registry() {
  static std::set<std::string> names;
  return names;
}

std::set<std::string>& cuda_parity_registry() {
  static std::set<std::string> names;
  return names;
}

bool register_name(std::set<std::string>& registry, const char* name) {
  registry.insert(name);
  return true;
}

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/" + prefix + "_XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

bool cuda_ready() {
#if GENESIS_WITH_CUDA
  if (cuda::is_available()) return true;
  WARN("skipped: no CUDA device on this machine");
  return false;
#else
  WARN("skipped: genesis was built without the CUDA backend");
  return false;
#endif
}

namespace {

// Byte-level alphabet (ids 0..255 the bytes, GPT-2's byte-to-unicode names), no merges, and
// ChatML's special tokens: every byte is a token, so spans map to tokens exactly.
std::string byte_char(int b) {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to 256 + n.
  static const std::vector<std::string> table = [] {
    std::vector<int> printable;
    for (int c = '!'; c <= '~'; ++c) printable.push_back(c);
    for (int c = 0xA1; c <= 0xAC; ++c) printable.push_back(c);
    for (int c = 0xAE; c <= 0xFF; ++c) printable.push_back(c);
    std::vector<int> code(256, -1);
    for (int c : printable) code[static_cast<size_t>(c)] = c;
    int extra = 0;
    for (int c = 0; c < 256; ++c)
      if (code[static_cast<size_t>(c)] < 0) code[static_cast<size_t>(c)] = 256 + extra++;
    std::vector<std::string> out;
    for (int c = 0; c < 256; ++c) {
      const int u = code[static_cast<size_t>(c)];
      std::string s;
      if (u < 0x80) s += static_cast<char>(u);
      else {
        s += static_cast<char>(0xC0 | (u >> 6));
        s += static_cast<char>(0x80 | (u & 0x3F));
      }
      out.push_back(s);
    }
    return out;
  }();
  return table[static_cast<size_t>(b)];
}

}  // namespace

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

const char* const kChatmlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

void write_byte_tokenizer(const std::filesystem::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const nlohmann::json tokenizer{
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 256}, {"content", "<|im_start|>"}, {"special", true}},
        {{"id", 257}, {"content", "<|im_end|>"}, {"special", true}},
        {{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  write_text_file(dir / "tokenizer.json", tokenizer.dump());
  write_text_file(dir / "tokenizer_config.json",
                  nlohmann::json{{"chat_template", kChatmlTemplate}, {"eos_token", "<|im_end|>"}, {"bos_token", nullptr}}
                      .dump());
}

}  // namespace genesis::testing
