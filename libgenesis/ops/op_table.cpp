#include "libgenesis/ops/op_table.h"

namespace genesis {

std::string_view autocast_policy_name(AutocastPolicy policy) {
  switch (policy) {
    case AutocastPolicy::none: return "none";
    case AutocastPolicy::lower: return "lower";
    case AutocastPolicy::f32: return "f32";
    case AutocastPolicy::f32_math: return "f32_math";
    case AutocastPolicy::low_out: return "low_out";
    case AutocastPolicy::promote: return "promote";
    case AutocastPolicy::promote_math: return "promote_math";
  }
  return "?";
}

std::span<const OpInfo> op_table() { return kOpTable; }

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& op : kOpTable)
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace genesis
