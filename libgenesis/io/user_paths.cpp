#include "libgenesis/io/user_paths.h"

#include <cstdlib>

#include "libgenesis/core/error.h"

namespace fs = std::filesystem;

namespace genesis::io {

namespace {

const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

fs::path cache_root(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* dir = environment("GENESIS_CACHE_DIR")) return dir;
  if (const char* xdg = environment("XDG_CACHE_HOME")) return fs::path(xdg) / "genesis";
  const char* home = environment("HOME");
  GENESIS_CHECK(home != nullptr, UsageError,
                "no cache directory: data.cache_dir is not set and neither are GENESIS_CACHE_DIR, XDG_CACHE_HOME "
                "or HOME; set one of them");
  return fs::path(home) / ".cache" / "genesis";
}

fs::path data_root() {
  if (const char* dir = environment("GENESIS_DATA")) return dir;
  return cache_root() / "data";
}

std::string expand_path(const std::string& value) {
  std::string out;
  size_t i = 0;
  if (value == "~" || value.rfind("~/", 0) == 0) {
    const char* home = environment("HOME");
    GENESIS_CHECK(home != nullptr, ValueError, value, ": ~ stands for $HOME, which is not set");
    out = home;
    i = 1;
  }
  while (i < value.size()) {
    const size_t dollar = value.find("${", i);
    if (dollar == std::string::npos) {
      out.append(value, i, std::string::npos);
      break;
    }
    out.append(value, i, dollar - i);
    const size_t close = value.find('}', dollar + 2);
    GENESIS_CHECK(close != std::string::npos, ValueError, value, ": ${ without its closing }");
    const std::string name = value.substr(dollar + 2, close - dollar - 2);
    GENESIS_CHECK(!name.empty(), ValueError, value, ": ${} names no variable");
    if (const char* set = environment(name.c_str()))
      out += set;
    else if (name == "GENESIS_DATA")
      out += data_root().string();
    else if (name == "GENESIS_CACHE_DIR")
      out += cache_root().string();
    else
      GENESIS_THROW(ValueError, value, ": the environment variable ", name, " is not set");
    i = close + 1;
  }
  return out;
}

}  // namespace genesis::io
