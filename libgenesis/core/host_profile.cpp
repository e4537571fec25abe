#include "libgenesis/core/host_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace genesis::host_profile {

namespace {

struct Entry {
  int64_t calls = 0, ns = 0;
};

struct Table {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
  ~Table() {
    if (entries.empty()) return;  // profiling off, or nothing recorded
    std::vector<std::pair<std::string, Entry>> rows(entries.begin(), entries.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
    std::fprintf(stderr, "host profile (GENESIS_HOST_PROFILE): total ms, calls, us per call\n");
    for (const auto& [name, e] : rows)
      std::fprintf(stderr, "%10.2f %8lld %9.2f  %s\n", static_cast<double>(e.ns) / 1e6, static_cast<long long>(e.calls),
                   static_cast<double>(e.ns) / 1e3 / static_cast<double>(e.calls), name.c_str());
  }
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("GENESIS_HOST_PROFILE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

void add(std::string_view kind, std::string_view name, int64_t ns) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  Entry& e = t.entries[std::string(kind) + " " + std::string(name)];
  ++e.calls;
  e.ns += ns;
}

void reset() {
  if (!enabled()) return;
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.entries.clear();
}

}  // namespace genesis::host_profile
