#include "libgenesis/io/json_text.h"

namespace genesis::io {

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (const size_t tag_end = what.find("] "); what.starts_with("[json.") && tag_end != std::string::npos)
    what.erase(0, tag_end + 2);
  return what;
}

}  // namespace genesis::io
