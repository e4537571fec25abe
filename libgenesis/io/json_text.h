#pragma once
// JSON errors in genesis's words: nlohmann's description of what is wrong, without its
// "[json.exception.parse_error.101] " tag, for messages that name the file and the field.
#include <string>

#include <nlohmann/json.hpp>

namespace genesis::io {

// e.what() without the leading "[json.exception.<kind>.<id>] " tag.
std::string json_error_text(const nlohmann::json::exception& e);

}  // namespace genesis::io
