#include "libgenesis/core/device.h"

#include <charconv>
#include <ostream>

#include "libgenesis/core/error.h"

namespace genesis {

Device Device::parse(std::string_view s) {
  if (s == "cpu") return kCPU;
  if (s == "cuda") return Device(DeviceType::cuda, 0);
  if (s.starts_with("cuda:")) {
    std::string_view num = s.substr(5);
    int index = -1;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && ptr == num.data() + num.size() && index >= 0) return Device(DeviceType::cuda, index);
  }
  GENESIS_THROW(UsageError, "unknown device '", s, "': expected cpu, cuda or cuda:N");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace genesis
