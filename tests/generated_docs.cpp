#include "tests/generated_docs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "tests/testing.h"

namespace genesis::testing {

std::string source_path(const std::string& relative) {
  for (const char* dir : std::initializer_list<const char*>{std::getenv("GENESIS_SOURCE_DIR"), GENESIS_SOURCE_DIR, "."})
    if (dir && std::filesystem::exists(std::filesystem::path(dir) / relative)) return std::string(dir) + "/" + relative;
  return std::string(GENESIS_SOURCE_DIR) + "/" + relative;
}

void require_generated_doc(const std::string& relative, const std::string& expected) {
  const std::string path = source_path(relative);
  std::ifstream in(path);
  std::stringstream actual;
  actual << in.rdbuf();
  if (actual.str() == expected) return;
  const std::string name = "genesis_" + std::filesystem::path(relative).filename().string();
  const auto fresh = std::filesystem::temp_directory_path() / name;
  std::ofstream(fresh) << expected;
  FAIL(relative << " is stale; regenerate it with: cp " << fresh.string() << " " << path);
}

}  // namespace genesis::testing
