#pragma once
// Host time per op and per backward node, for finding where the host spends a training step
// (GENESIS_HOST_PROFILE=1: a table on stderr at exit, sorted by total time). Ops are timed
// from their prologue to their return, outermost only (an op's inner ops count toward it);
// backward nodes around their formula. Off (one branch per op) unless the variable is set.
#include <chrono>
#include <string_view>

namespace genesis::host_profile {

bool enabled();
// Adds one call of `name` that took `ns` nanoseconds of host time.
void add(std::string_view kind, std::string_view name, int64_t ns);
// Forgets what was recorded so far (after warm-up steps).
void reset();

// Times the enclosing scope as one call of `name` when profiling is on.
class Scope {
 public:
  Scope(std::string_view kind, std::string_view name)
      : kind_(kind), name_(name), start_(enabled() ? std::chrono::steady_clock::now().time_since_epoch().count() : 0) {}
  ~Scope() {
    if (start_ != 0) add(kind_, name_, std::chrono::steady_clock::now().time_since_epoch().count() - start_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string_view kind_, name_;
  int64_t start_;
};

}  // namespace genesis::host_profile
