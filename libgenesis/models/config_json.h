#pragma once
// Reading Hugging Face config.json objects (internal to libgenesis/models): typed keys with
// defaults, and errors that name the model type and the key.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace genesis::models::detail {

// Parses JSON text; UsageError naming `what` when it is not a JSON object.
nlohmann::json parse_config_object(std::string_view text, std::string_view what);

// The largest size a config key may give (layers, widths, vocabulary, positions): 2^24, far
// above any released model's, far below what would overflow the products of sizes.
inline constexpr int64_t kMaxConfigSize = int64_t{1} << 24;

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, std::string model_type) : config_(config), type_(std::move(model_type)) {}
  // True when the key is present and not null.
  bool has(const char* key) const;
  // The key's value, or `fallback` when absent or null; UsageError when absent without a
  // fallback, or of the wrong type.
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  double number(const char* key, std::optional<double> fallback = std::nullopt) const;
  bool boolean(const char* key, std::optional<bool> fallback = std::nullopt) const;
  std::string string(const char* key, std::optional<std::string> fallback = std::nullopt) const;
  // A positive integer key, at most kMaxConfigSize.
  int64_t size(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  const nlohmann::json& json() const { return config_; }
  const std::string& model_type() const { return type_; }

 private:
  const nlohmann::json& config_;
  std::string type_;
};

}  // namespace genesis::models::detail
