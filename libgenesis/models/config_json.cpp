#include "libgenesis/models/config_json.h"

#include "libgenesis/core/error.h"

namespace genesis::models::detail {

nlohmann::json parse_config_object(std::string_view text, std::string_view what) {
  nlohmann::json config = nlohmann::json::parse(text, nullptr, false);
  GENESIS_CHECK(!config.is_discarded(), UsageError, what, ": not valid JSON");
  GENESIS_CHECK(config.is_object(), UsageError, what, ": expected a JSON object");
  return config;
}

bool ConfigReader::has(const char* key) const {
  return config_.contains(key) && !config_.at(key).is_null();
}

int64_t ConfigReader::integer(const char* key, std::optional<int64_t> fallback) const {
  if (!has(key)) {
    GENESIS_CHECK(fallback.has_value(), UsageError, type_, " config: missing key '", key, "'");
    return *fallback;
  }
  const nlohmann::json& value = config_.at(key);
  GENESIS_CHECK(value.is_number_integer(), UsageError, type_, " config: '", key, "' must be an integer, got ",
                value.dump());
  return value.get<int64_t>();
}

int64_t ConfigReader::size(const char* key, std::optional<int64_t> fallback) const {
  const int64_t value = integer(key, fallback);
  GENESIS_CHECK(value > 0, UsageError, type_, " config: '", key, "' must be positive, got ", value);
  GENESIS_CHECK(value <= kMaxConfigSize, UsageError, type_, " config: '", key, "' = ", value,
                " is beyond any model genesis builds (at most ", kMaxConfigSize, ")");
  return value;
}

double ConfigReader::number(const char* key, std::optional<double> fallback) const {
  if (!has(key)) {
    GENESIS_CHECK(fallback.has_value(), UsageError, type_, " config: missing key '", key, "'");
    return *fallback;
  }
  const nlohmann::json& value = config_.at(key);
  GENESIS_CHECK(value.is_number(), UsageError, type_, " config: '", key, "' must be a number, got ", value.dump());
  return value.get<double>();
}

bool ConfigReader::boolean(const char* key, std::optional<bool> fallback) const {
  if (!has(key)) {
    GENESIS_CHECK(fallback.has_value(), UsageError, type_, " config: missing key '", key, "'");
    return *fallback;
  }
  const nlohmann::json& value = config_.at(key);
  GENESIS_CHECK(value.is_boolean(), UsageError, type_, " config: '", key, "' must be true or false, got ",
                value.dump());
  return value.get<bool>();
}

std::string ConfigReader::string(const char* key, std::optional<std::string> fallback) const {
  if (!has(key)) {
    GENESIS_CHECK(fallback.has_value(), UsageError, type_, " config: missing key '", key, "'");
    return *fallback;
  }
  const nlohmann::json& value = config_.at(key);
  GENESIS_CHECK(value.is_string(), UsageError, type_, " config: '", key, "' must be a string, got ", value.dump());
  return value.get<std::string>();
}

}  // namespace genesis::models::detail
