#pragma once
// Thread-local switch for graph recording. Backward formulas run with it off.

namespace genesis {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Disables graph recording for its lifetime (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace genesis
