#pragma once
// The op-case files' shared part (libgenesis/ops/op_cases_*.cpp): each file appends the cases
// of one family of the op table; op_cases.cpp assembles the registry from them.
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/ops/op_cases.h"

namespace genesis::cases {

void append_view_cases(std::vector<OpCase>& cases);         // views, copies, factories, random
void append_elementwise_cases(std::vector<OpCase>& cases);  // unary, binary, compare, select
void append_reduce_cases(std::vector<OpCase>& cases);       // reductions
void append_nn_cases(std::vector<OpCase>& cases);           // linalg, nn, losses, conv, transformer
void append_index_cases(std::vector<OpCase>& cases);        // shape and indexing

// Every shape of the call as a normal input that is differentiable.
std::vector<CaseInput> data_inputs(const OpArgs& args);
// Reading every input once and writing the broadcast output once (twice that with backward).
OpCost binary_cost(const OpArgs& args, bool backward, double es);
// A reduction over `axes` (empty = all) of shapes[0].
OpCost reduction_cost(const OpArgs& args, bool backward, double es, const Axes& axes);
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Suite-argument checks ("" when fine, else why not): args.dim names an axis of shapes[0];
// every axis of args.axes does.
std::string check_dim(const OpArgs& args);
std::string check_axes(const OpArgs& args);
// A forward of one input through a unary op.
CaseForward unary(Tensor (*fn)(const Tensor&));
CaseForward binary(Tensor (*fn)(const Tensor&, const Tensor&));

}  // namespace genesis::cases
