#pragma once
// Text from inputs (a file name, a field of a corrupt file) made fit for one line of a terminal.
#include <string>

namespace genesis {

// `text` with control characters and bytes that are not UTF-8 written as \n, \t or \xNN; valid
// UTF-8 is kept as it is (defined in printable.cpp).
std::string printable(const std::string& text);

}  // namespace genesis
