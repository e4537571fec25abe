#pragma once
// FNV-1a, 64 bits: a fast, stable (not cryptographic) hash for cache keys and fingerprints of
// files and strings.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace genesis::io {

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Length-prefixed, so that consecutive strings hash without ambiguity ("ab" + "c" != "a" + "bc").
inline uint64_t fnv1a(uint64_t h, const std::string& s) {
  const uint64_t size = s.size();
  return fnv1a(fnv1a(h, &size, sizeof size), s.data(), s.size());
}

// 16 lowercase hex digits.
inline std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace genesis::io
