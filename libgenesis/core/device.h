#pragma once
// Where a tensor lives: the CPU or one CUDA device ("cpu", "cuda", "cuda:1").
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace genesis {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}
  // Parses "cpu", "cuda" or "cuda:N"; throws UsageError otherwise.
  static Device parse(std::string_view s);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

inline constexpr Device kCPU{};
std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace genesis
