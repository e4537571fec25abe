#include "libgenesis/ops/op_table.h"

#include <array>

namespace genesis {

namespace {
#define GENESIS_OP_INFO(name, family, backward, cuda) OpInfo{#name, family, backward, cuda},
constexpr std::array kOps{GENESIS_OPS(GENESIS_OP_INFO)};
#undef GENESIS_OP_INFO
}  // namespace

std::span<const OpInfo> op_table() { return kOps; }

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& op : kOps)
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace genesis
