#pragma once
// Error types thrown by libgenesis. Every message names the operation and the
// offending shapes/dtypes/devices; the CLI maps UsageError/RecipeError to exit code 2
// and everything else to exit code 1.
#include <sstream>
#include <stdexcept>
#include <string>

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
// Errors in what the user typed (flags, recipe keys): exit code 2.
class UsageError : public Error { public: using Error::Error; };

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
