#pragma once
// Error types thrown by libgenesis. Every message names the operation and the
// offending shapes/dtypes/devices; the CLI maps UsageError/RecipeError to exit code 2
// and everything else to exit code 1.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace genesis {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error { public: using Error::Error; };
class DTypeError : public Error { public: using Error::Error; };
class DeviceError : public Error { public: using Error::Error; };
class IndexError : public Error { public: using Error::Error; };
class ValueError : public Error { public: using Error::Error; };
class NotImplementedError : public Error { public: using Error::Error; };
class AutogradError : public Error { public: using Error::Error; };
// A collective between the ranks of a distributed run failed: a rank died, closed its connection
// or did not answer within the timeout (exit code 1).
class DistError : public Error { public: using Error::Error; };
// Errors in what the user typed (flags, recipe keys): exit code 2.
class UsageError : public Error { public: using Error::Error; };

// Shapes (std::vector<int64_t>) print as "[2, 3]" in messages (defined in shape.cpp). Declared
// here so that concat() finds it wherever it is instantiated: ADL alone looks only in std.
std::ostream& operator<<(std::ostream& os, const std::vector<int64_t>& shape);

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace genesis

// GENESIS_CHECK(cond, ErrorType, message parts...): throws ErrorType with the parts
// streamed together when cond is false.
#define GENESIS_CHECK(cond, ErrorType, ...)                               \
  do {                                                                    \
    if (!(cond)) [[unlikely]]                                             \
      throw ::genesis::ErrorType(::genesis::detail::concat(__VA_ARGS__)); \
  } while (0)

#define GENESIS_THROW(ErrorType, ...) throw ::genesis::ErrorType(::genesis::detail::concat(__VA_ARGS__))
