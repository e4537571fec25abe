#pragma once
// The syntax tree of a parsed Jinja template (jinja.h): what jinja_parse.cpp builds and
// jinja_render.cpp walks. Every node keeps the byte offset of its source text, from which
// error messages give a line and a column.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libgenesis/data/jinja.h"

namespace genesis::data::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<const Expr>;

enum class ExprKind {
  literal,      // literal
  list,         // operands: the elements (also a tuple)
  dict,         // operands: key0, value0, key1, value1, ...
  name,         // name
  attribute,    // operands[0].name
  subscript,    // operands[0][operands[1]]
  slice,        // operands[0][operands[1]:operands[2]:operands[3]], each bound may be null
  call,         // operands[0](args, kwargs)
  filter,       // operands[0] | name(args, kwargs)
  test,         // operands[0] is [not] name(args)
  unary,        // name ("not", "-", "+") applied to operands[0]
  binary,       // operands[0] name operands[1]: arithmetic, comparison, in, not in, ~
  logical_and,  // operands[0] and operands[1]
  logical_or,   // operands[0] or operands[1]
  conditional,  // operands[0] if operands[1] else operands[2] (null: undefined)
};

struct Expr {
  Expr(ExprKind kind, size_t offset, std::string name = {}) : kind(kind), offset(offset), name(std::move(name)) {}
  ExprKind kind;
  size_t offset;
  Value literal;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // `is not`
  int depth = 1;         // of this subtree (at most kMaxNesting: the interpreter recurses on it)
};

struct Stmt;
using Body = std::vector<Stmt>;

enum class StmtKind {
  text,      // text, output as it is
  output,    // {{ expr }}
  if_chain,  // branches: (condition, body) for if and each elif; else_body
  for_loop,  // for targets in expr [if filter]: body [else: else_body]
  set,       // set targets[0] = expr, or set targets[0].targets[1] = expr (a namespace attribute)
  loop_break,
  loop_continue,
};

struct Stmt {
  Stmt(StmtKind kind, size_t offset, std::string text = {}) : kind(kind), offset(offset), text(std::move(text)) {}
  StmtKind kind;
  size_t offset;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  ExprPtr filter;
};

struct Program {
  std::string name;
  std::string source;
  Body body;
};

// "line L, column C" of the byte at `offset` of `source`, and the prefix of every error message:
// "chat template <name>: line L, column C: ".
std::string line_column(std::string_view source, size_t offset);
std::string location(const std::string& name, std::string_view source, size_t offset);

// Whether the interpreter knows a filter / test of this name (checked while parsing, as Jinja does).
bool is_filter(std::string_view name);
bool is_test(std::string_view name);

}  // namespace genesis::data::jinja
