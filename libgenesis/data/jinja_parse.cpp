// Parsing Jinja templates: a lexer that splits the source into text and the tokens of its tags
// (applying whitespace control, trim_blocks and lstrip_blocks as it goes), and a
// recursive-descent parser from those tokens to the syntax tree of jinja_ast.h.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <iterator>

#include "libgenesis/core/error.h"
#include "libgenesis/data/jinja_ast.h"

namespace genesis::data::jinja {

std::string line_column(std::string_view source, size_t offset) {
  const std::string_view before = source.substr(0, std::min(offset, source.size()));
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  return detail::concat("line ", line, ", column ", before.size() - line_start + 1);
}

std::string location(const std::string& name, std::string_view source, size_t offset) {
  return "chat template " + name + ": " + line_column(source, offset) + ": ";
}

namespace {

enum class Tok { text, expr_open, expr_close, stmt_open, stmt_close, name, string, number, op, end };

struct Token {
  Tok kind;
  std::string text;  // the text, a name, an operator, a string's value, a number's spelling
  size_t offset;
};

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}
bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : src_(source), name_(name) {}

  std::vector<Token> run() {
    // Jinja's lstrip_blocks strips a block tag's indentation only at the start of a line: the
    // template's start, after a newline in the text, or after a tag whose match ended one.
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t open = src_.find('{', pos_);
      while (open != std::string_view::npos &&
             (open + 1 >= src_.size() || std::string_view("{%#").find(src_[open + 1]) == std::string_view::npos))
        open = src_.find('{', open + 1);
      std::string text(src_.substr(pos_, open == std::string_view::npos ? std::string_view::npos : open - pos_));
      const size_t text_offset = pos_;
      if (open == std::string_view::npos) {
        emit_text(std::move(text), text_offset);
        break;
      }
      const char kind = src_[open + 1];
      pos_ = open + 2;
      if (pos_ < src_.size() && src_[pos_] == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
        ++pos_;
      } else if (pos_ < src_.size() && src_[pos_] == '+') {
        ++pos_;
      } else if (kind != '{') {
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        const bool blank = std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_start), text.end(), is_space);
        if ((line_start > 0 || line_starting) && blank) text.resize(line_start);
      }
      emit_text(std::move(text), text_offset);
      if (kind == '#') {
        skip_comment(open);
      } else {
        tokens_.push_back({kind == '{' ? Tok::expr_open : Tok::stmt_open, "", open});
        lex_tag(kind == '{' ? '}' : '%', open);
      }
      line_starting = close_tag(kind != '{');
    }
    tokens_.push_back({Tok::end, "", src_.size()});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    GENESIS_THROW(ValueError, location(name_, src_, offset), what);
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({Tok::text, std::move(text), offset});
  }

  // After a tag's closing delimiter: "-" strips all whitespace that follows; trim_blocks drops
  // one newline after a block or comment tag. Returns whether a newline was consumed.
  bool close_tag(bool is_block) {
    if (strip_after_) {
      strip_after_ = false;
      bool newline = false;
      while (pos_ < src_.size() && is_space(src_[pos_])) newline = src_[pos_++] == '\n';
      return newline;
    }
    if (is_block && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      return true;
    }
    return false;
  }

  void skip_comment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string_view::npos) fail(open, "unclosed comment: expected '#}'");
    strip_after_ = close > pos_ && src_[close - 1] == '-';
    pos_ = close + 2;
  }

  // The tokens of a {{ ... }} or {% ... %} tag, up to and including its closing delimiter.
  void lex_tag(char closer, size_t open) {
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size())
        fail(open, closer == '}' ? "unclosed '{{': expected '}}'" : "unclosed '{%': expected '%}'");
      const size_t start = pos_;
      const std::string_view rest = src_.substr(pos_);
      const bool dash = rest[0] == '-' && rest.size() >= 3 && rest[1] == closer && rest[2] == '}';
      if (dash || (rest[0] == closer && rest.size() >= 2 && rest[1] == '}')) {
        strip_after_ = dash;
        pos_ += dash ? 3 : 2;
        tokens_.push_back({closer == '}' ? Tok::expr_close : Tok::stmt_close, "", start});
        return;
      }
      const char c = rest[0];
      if (is_name_start(c)) {
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        tokens_.push_back({Tok::name, std::string(src_.substr(start, pos_ - start)), start});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(start);
      } else if (c == '\'' || c == '"') {
        tokens_.push_back({Tok::string, lex_string(c, start), start});
      } else {
        static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
        const auto two = std::find(std::begin(kTwoChar), std::end(kTwoChar), rest.substr(0, 2));
        if (two != std::end(kTwoChar)) {
          pos_ += 2;
        } else if (std::string_view("+-*/%~<>=()[]{}.,:|").find(c) != std::string_view::npos) {
          pos_ += 1;
        } else {
          fail(start, detail::concat("unexpected character '", c, "'"));
        }
        tokens_.push_back({Tok::op, std::string(src_.substr(start, pos_ - start)), start});
      }
    }
  }

  void lex_number(size_t start) {
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      digits();
    }
    tokens_.push_back({Tok::number, std::string(src_.substr(start, pos_ - start)), start});
  }

  // A quoted string with Python's escapes (\n \t \r \\ \' \" \xHH \uHHHH ...); an unknown
  // escape stays as it is written, backslash included, as in Python.
  std::string lex_string(char quote, size_t start) {
    std::string value;
    ++pos_;
    for (;;) {
      if (pos_ >= src_.size()) fail(start, "unterminated string");
      const char c = src_[pos_++];
      if (c == quote) return value;
      if (c != '\\' || pos_ >= src_.size()) {
        value += c;
        continue;
      }
      const char e = src_[pos_++];
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '0':
          value += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
          value += e;
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const std::string hex(src_.substr(pos_, n));
          if (hex.size() != n || !std::all_of(hex.begin(), hex.end(),
                                              [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
            fail(pos_ - 2, detail::concat("invalid \\", e, " escape in a string"));
          const unsigned long code_point = std::stoul(hex, nullptr, 16);
          if (code_point > 0x10FFFF) fail(pos_ - 2, "a \\U escape past U+10FFFF in a string");
          append_utf8(value, static_cast<uint32_t>(code_point));
          pos_ += n;
          break;
        }
        default:
          value += '\\';
          value += e;
      }
    }
  }

  std::string_view src_;
  const std::string& name_;
  size_t pos_ = 0;
  bool strip_after_ = false;
  std::vector<Token> tokens_;
};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const Program& program) : toks_(std::move(tokens)), program_(program) {}

  Body parse_template() { return parse_body({}, 0); }

 private:
  // Counts the parser's recursion (blocks in blocks, parentheses, `not not`, `- -`): past
  // kMaxNesting a template is refused rather than overflowing the stack.
  class Nested {
   public:
    Nested(Parser& parser, size_t offset) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting)
        parser_.fail(offset, detail::concat("nesting deeper than ", kMaxNesting, " levels (the template's limit)"));
    }
    ~Nested() { --parser_.nesting_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& parser_;
  };

  // Sets e's depth from its children; an expression deeper than kMaxNesting (a chain of
  // thousands of `+` or filters) is refused: rendering and freeing it recurse on its depth.
  ExprPtr finish(std::unique_ptr<Expr> e) const {
    auto deeper = [&](const ExprPtr& child) {
      if (child != nullptr) e->depth = std::max(e->depth, child->depth + 1);
    };
    for (const ExprPtr& child : e->operands) deeper(child);
    for (const ExprPtr& child : e->args) deeper(child);
    for (const auto& kwarg : e->kwargs) deeper(kwarg.second);
    if (e->depth > kMaxNesting)
      fail(e->offset,
           detail::concat("an expression nested deeper than ", kMaxNesting, " levels (the template's limit)"));
    return e;
  }

  // ---- token helpers
  const Token& peek(size_t ahead = 0) const { return toks_[std::min(p_ + ahead, toks_.size() - 1)]; }
  bool at_op(std::string_view op) const { return peek().kind == Tok::op && peek().text == op; }
  bool at_name(std::string_view name) const { return peek().kind == Tok::name && peek().text == name; }
  const Token& next() { return toks_[std::min(p_++, toks_.size() - 1)]; }
  bool accept_op(std::string_view op) { return at_op(op) ? (++p_, true) : false; }
  bool accept_name(std::string_view name) { return at_name(name) ? (++p_, true) : false; }

  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    GENESIS_THROW(ValueError, location(program_.name, program_.source, offset), what);
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::expr_close:
        return "'}}'";
      case Tok::stmt_close:
        return "'%}'";
      case Tok::end:
        return "the end of the template";
      case Tok::string:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail(peek().offset, detail::concat("expected '", op, "', found ", describe(peek())));
  }
  std::string expect_name(std::string_view what) {
    if (peek().kind != Tok::name) fail(peek().offset, detail::concat("expected ", what, ", found ", describe(peek())));
    return next().text;
  }
  void expect_close(Tok close) {
    if (peek().kind != close)
      fail(peek().offset,
           detail::concat("expected ", close == Tok::stmt_close ? "'%}'" : "'}}'", ", found ", describe(peek())));
    ++p_;
  }

  // ---- statements
  // Statements until a {% tag %} whose keyword is one of `stop` (left unconsumed; the parser is
  // then at that keyword). `opened_at`: the block's opening tag, named when it is never closed.
  Body parse_body(std::initializer_list<std::string_view> stop, size_t opened_at) {
    const Nested nested(*this, opened_at);
    if (stop.size() > 0) open_blocks_.emplace_back(*(stop.end() - 1), opened_at);
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.kind == Tok::end) {
        if (stop.size() == 0) return body;
        const std::string_view end = *(stop.end() - 1);
        fail(opened_at, detail::concat("'", end.substr(3), "' block is never closed: expected {% ", end, " %}"));
      }
      if (t.kind == Tok::text) {
        body.emplace_back(StmtKind::text, t.offset, t.text);
        ++p_;
      } else if (t.kind == Tok::expr_open) {
        ++p_;
        body.emplace_back(StmtKind::output, t.offset).expr = parse_expression();
        expect_close(Tok::expr_close);
      } else {  // stmt_open
        const Token& keyword = peek(1);
        if (keyword.kind == Tok::name && std::find(stop.begin(), stop.end(), keyword.text) != stop.end()) {
          ++p_;
          if (stop.size() > 0) open_blocks_.pop_back();
          return body;
        }
        ++p_;
        parse_statement(body, t.offset);
      }
    }
  }

  void parse_statement(Body& body, size_t tag) {
    const Token& keyword = peek();
    const std::string word = expect_name("a statement keyword");
    if (word == "if") {
      body.push_back(parse_if(tag));
    } else if (word == "for") {
      body.push_back(parse_for(tag));
    } else if (word == "set") {
      body.push_back(parse_set(tag));
    } else if (word == "break" || word == "continue") {
      if (loop_depth_ == 0) fail(keyword.offset, "'" + word + "' outside a for loop");
      expect_close(Tok::stmt_close);
      body.emplace_back(word == "break" ? StmtKind::loop_break : StmtKind::loop_continue, tag);
    } else if (word == "generation") {
      // transformers' {% generation %} marks assistant text for its masks; it renders its body.
      expect_close(Tok::stmt_close);
      Body inner = parse_body({"endgeneration"}, tag);
      expect_name("endgeneration");
      expect_close(Tok::stmt_close);
      std::move(inner.begin(), inner.end(), std::back_inserter(body));
    } else if (word == "macro" || word == "call" || word == "filter" || word == "raw" || word == "block" ||
               word == "include" || word == "import" || word == "extends" || word == "with") {
      fail(keyword.offset, "'" + word + "' statements are not supported");
    } else if (word.starts_with("end") || word == "elif" || word == "else") {
      if (open_blocks_.empty()) fail(keyword.offset, "unexpected '" + word + "'");
      const auto [end, opened_at] = open_blocks_.back();
      fail(keyword.offset,
           detail::concat("unexpected '", word, "': the innermost open block is '", end.substr(3), "' at ",
                          line_column(program_.source, opened_at), " (expected {% ", end, " %})"));
    } else {
      fail(keyword.offset, "unknown statement '" + word + "'");
    }
  }

  Stmt parse_if(size_t tag) {
    Stmt stmt(StmtKind::if_chain, tag);
    ExprPtr condition = parse_expression();
    for (;;) {
      expect_close(Tok::stmt_close);
      Body branch = parse_body({"elif", "else", "endif"}, tag);
      stmt.branches.emplace_back(std::move(condition), std::move(branch));
      const std::string word = next().text;
      if (word == "elif") {
        condition = parse_expression();
      } else if (word == "else") {
        expect_close(Tok::stmt_close);
        stmt.else_body = parse_body({"endif"}, tag);
        ++p_;
        break;
      } else {
        break;
      }
    }
    expect_close(Tok::stmt_close);
    return stmt;
  }

  Stmt parse_for(size_t tag) {
    Stmt stmt(StmtKind::for_loop, tag);
    do {
      stmt.targets.push_back(expect_name("a loop variable"));
    } while (accept_op(","));
    if (!accept_name("in")) fail(peek().offset, "expected 'in' after the loop variables, found " + describe(peek()));
    stmt.expr = parse_or();  // an `if` after the iterable filters it: not a conditional expression
    if (accept_name("if")) stmt.filter = parse_expression();
    if (at_name("recursive")) fail(peek().offset, "recursive loops are not supported");
    expect_close(Tok::stmt_close);
    ++loop_depth_;
    stmt.body = parse_body({"else", "endfor"}, tag);
    --loop_depth_;
    if (next().text == "else") {
      expect_close(Tok::stmt_close);
      stmt.else_body = parse_body({"endfor"}, tag);
      ++p_;
    }
    expect_close(Tok::stmt_close);
    return stmt;
  }

  Stmt parse_set(size_t tag) {
    Stmt stmt(StmtKind::set, tag);
    stmt.targets.push_back(expect_name("a variable name"));
    if (accept_op(".")) stmt.targets.push_back(expect_name("an attribute name"));
    if (at_op(",")) fail(peek().offset, "unpacking assignments are not supported");
    if (peek().kind == Tok::stmt_close)
      fail(peek().offset, "block assignments ({% set x %}...{% endset %}) are not supported");
    expect_op("=");
    stmt.expr = parse_expression();
    expect_close(Tok::stmt_close);
    return stmt;
  }

  // ---- expressions, lowest precedence first
  ExprPtr node(ExprKind kind, size_t offset, std::string name = {}, std::vector<ExprPtr> operands = {}) const {
    auto e = std::make_unique<Expr>(kind, offset, std::move(name));
    e->operands = std::move(operands);
    return finish(std::move(e));
  }
  static std::vector<ExprPtr> pair(ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    v.push_back(std::move(b));
    return v;
  }

  ExprPtr parse_expression() {
    const Nested nested(*this, peek().offset);
    ExprPtr value = parse_or();
    while (at_name("if")) {
      const size_t offset = next().offset;
      ExprPtr condition = parse_or();
      ExprPtr otherwise = accept_name("else") ? parse_expression() : nullptr;
      std::vector<ExprPtr> parts = pair(std::move(value), std::move(condition));
      parts.push_back(std::move(otherwise));
      value = node(ExprKind::conditional, offset, "", std::move(parts));
    }
    return value;
  }

  ExprPtr parse_or() { return parse_logical(true); }

  // `a or b` (is_or) over `a and b` over `not a`.
  ExprPtr parse_logical(bool is_or) {
    const char* word = is_or ? "or" : "and";
    auto operand = [&] { return is_or ? parse_logical(false) : parse_not(); };
    ExprPtr left = operand();
    while (at_name(word)) {
      const size_t offset = next().offset;
      ExprPtr right = operand();
      left = node(is_or ? ExprKind::logical_or : ExprKind::logical_and, offset, word,
                  pair(std::move(left), std::move(right)));
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const Nested nested(*this, peek().offset);
      const size_t offset = next().offset;
      std::vector<ExprPtr> operand;
      operand.push_back(parse_not());
      return node(ExprKind::unary, offset, "not", std::move(operand));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_binary(0);
    for (;;) {
      const Token& t = peek();
      std::string op;
      if (t.kind == Tok::op &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        ++p_;
      } else if (at_name("in")) {
        op = "in";
        ++p_;
      } else if (at_name("not") && peek(1).kind == Tok::name && peek(1).text == "in") {
        op = "not in";
        p_ += 2;
      } else {
        return left;
      }
      left = node(ExprKind::binary, t.offset, op, pair(std::move(left), parse_binary(0)));
    }
  }

  // Binary operators by precedence level, as Jinja orders them: + -, then ~, then * / // %, then **.
  ExprPtr parse_binary(size_t level) {
    static const std::vector<std::vector<std::string_view>> kLevels = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == kLevels.size()) return parse_unary();
    ExprPtr left = parse_binary(level + 1);
    for (;;) {
      const Token& t = peek();
      const auto& ops = kLevels[level];
      if (t.kind != Tok::op || std::find(ops.begin(), ops.end(), t.text) == ops.end()) return left;
      ++p_;
      left = node(ExprKind::binary, t.offset, t.text, pair(std::move(left), parse_binary(level + 1)));
    }
  }

  ExprPtr parse_unary() {
    if (at_op("-") || at_op("+")) {
      const Nested nested(*this, peek().offset);
      const Token& t = next();
      std::vector<ExprPtr> operand;
      operand.push_back(parse_unary());
      return node(ExprKind::unary, t.offset, t.text, std::move(operand));
    }
    return parse_filters_and_tests(parse_postfix(parse_primary()));
  }

  ExprPtr parse_filters_and_tests(ExprPtr value) {
    for (;;) {
      if (accept_op("|")) {
        const Token& t = peek();
        const std::string name = expect_name("a filter name");
        if (!is_filter(name)) fail(t.offset, "unknown filter '" + name + "'");
        std::vector<ExprPtr> operand;
        operand.push_back(std::move(value));
        auto e = std::make_unique<Expr>(ExprKind::filter, t.offset, name);
        e->operands = std::move(operand);
        if (accept_op("(")) parse_arguments(*e);
        value = finish(std::move(e));
      } else if (at_name("is")) {
        ++p_;
        const bool negated = accept_name("not");
        const Token& t = peek();
        const std::string name = expect_name("a test name");
        if (!is_test(name)) fail(t.offset, "unknown test '" + name + "'");
        auto e = std::make_unique<Expr>(ExprKind::test, t.offset, name);
        e->negated = negated;
        e->operands.push_back(std::move(value));
        if (accept_op("(")) {
          parse_arguments(*e);
        } else if (starts_test_argument()) {
          e->args.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`, `is sameas none`
        }
        value = finish(std::move(e));
      } else {
        return value;
      }
    }
  }

  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.kind == Tok::string || t.kind == Tok::number) return true;
    static constexpr std::string_view kKeywords[] = {"and", "or", "not", "if", "else", "in", "is"};
    return t.kind == Tok::name && std::find(std::begin(kKeywords), std::end(kKeywords), t.text) == std::end(kKeywords);
  }

  // After '(': positional and keyword arguments up to ')'.
  void parse_arguments(Expr& call) {
    while (!accept_op(")")) {
      if (!call.args.empty() || !call.kwargs.empty()) expect_op(",");
      if (accept_op(")")) return;  // a trailing comma
      if (peek().kind == Tok::name && peek(1).kind == Tok::op && peek(1).text == "=") {
        std::string key = next().text;
        ++p_;
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail(peek().offset, "a positional argument after a keyword argument");
        call.args.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_postfix(ExprPtr value) {
    for (;;) {
      const Token& t = peek();
      if (accept_op(".")) {
        std::vector<ExprPtr> object;
        object.push_back(std::move(value));
        if (peek().kind == Tok::number) {  // list.0, as Jinja allows
          auto index = std::make_unique<Expr>(ExprKind::literal, peek().offset);
          index->literal = integer_literal(next());
          object.push_back(std::move(index));
          value = node(ExprKind::subscript, t.offset, "", std::move(object));
        } else {
          value = node(ExprKind::attribute, t.offset, expect_name("an attribute name"), std::move(object));
        }
      } else if (accept_op("[")) {
        value = parse_subscript(std::move(value), t.offset);
      } else if (accept_op("(")) {
        auto call = std::make_unique<Expr>(ExprKind::call, t.offset);
        call->operands.push_back(std::move(value));
        parse_arguments(*call);
        value = finish(std::move(call));
      } else {
        return value;
      }
    }
  }

  // After '[': an index, or a slice with optional start, stop and step.
  ExprPtr parse_subscript(ExprPtr object, size_t offset) {
    std::vector<ExprPtr> parts;
    parts.push_back(std::move(object));
    auto bound = [&]() -> ExprPtr { return at_op(":") || at_op("]") ? nullptr : parse_expression(); };
    parts.push_back(bound());
    if (accept_op("]")) {
      if (parts[1] == nullptr) fail(offset, "empty subscript");
      return node(ExprKind::subscript, offset, "", std::move(parts));
    }
    expect_op(":");
    parts.push_back(bound());
    parts.push_back(accept_op(":") ? bound() : nullptr);
    expect_op("]");
    return node(ExprKind::slice, offset, "", std::move(parts));
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    auto literal = [&](Value v) {
      auto e = std::make_unique<Expr>(ExprKind::literal, t.offset);
      e->literal = std::move(v);
      return ExprPtr(std::move(e));
    };
    switch (t.kind) {
      case Tok::string: {
        std::string s = t.text;
        while (peek().kind == Tok::string) s += next().text;  // adjacent literals concatenate
        return literal(std::move(s));
      }
      case Tok::number: {
        std::string digits = t.text;
        std::erase(digits, '_');
        if (digits.find_first_of(".eE") == std::string::npos) return literal(integer_literal(t));
        char* end = nullptr;
        const double d = std::strtod(digits.c_str(), &end);  // 1e999 is inf, as in Python
        if (end == digits.c_str()) fail(t.offset, "invalid number literal " + t.text);
        return literal(d);
      }
      case Tok::name:
        if (t.text == "true" || t.text == "True") return literal(true);
        if (t.text == "false" || t.text == "False") return literal(false);
        if (t.text == "none" || t.text == "None") return literal(nullptr);
        return node(ExprKind::name, t.offset, t.text);
      case Tok::op:
        if (t.text == "(") return parse_parenthesized(t.offset);
        if (t.text == "[") return parse_sequence(ExprKind::list, "]", t.offset);
        if (t.text == "{") return parse_sequence(ExprKind::dict, "}", t.offset);
        break;
      default:
        break;
    }
    fail(t.offset, "expected an expression, found " + describe(t));
  }

  // An integer literal's value (digits, with '_' separators; a trailing fraction or exponent of
  // `list.1.5` is not part of it).
  Value integer_literal(const Token& t) const {
    std::string digits = t.text.substr(0, t.text.find_first_of(".eE"));
    std::erase(digits, '_');
    int64_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error == std::errc::result_out_of_range) fail(t.offset, "integer literal " + digits + " is out of range");
    if (error != std::errc() || end != digits.data() + digits.size())
      fail(t.offset, "invalid integer literal " + t.text);
    return value;
  }

  // After '(': a parenthesized expression, or a tuple (a list here).
  ExprPtr parse_parenthesized(size_t offset) {
    if (accept_op(")")) return node(ExprKind::list, offset);
    ExprPtr first = parse_expression();
    if (accept_op(")")) return first;
    std::vector<ExprPtr> items;
    items.push_back(std::move(first));
    while (accept_op(",") && !at_op(")")) items.push_back(parse_expression());
    expect_op(")");
    return node(ExprKind::list, offset, "", std::move(items));
  }

  // After '[' or '{': list elements or dict entries up to `close`.
  ExprPtr parse_sequence(ExprKind kind, std::string_view close, size_t offset) {
    std::vector<ExprPtr> items;
    while (!accept_op(close)) {
      if (!items.empty()) {
        expect_op(",");
        if (accept_op(close)) break;
      }
      items.push_back(parse_expression());
      if (kind == ExprKind::dict) {
        expect_op(":");
        items.push_back(parse_expression());
      }
    }
    return node(kind, offset, "", std::move(items));
  }

  std::vector<Token> toks_;
  size_t p_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
  std::vector<std::pair<std::string_view, size_t>> open_blocks_;  // the end keyword and opening tag of each open block
  const Program& program_;
};

}  // namespace

Template Template::parse(std::string_view source, std::string name) {
  auto program = std::make_shared<Program>();
  program->name = std::move(name);
  program->source = std::string(source);
  Parser parser(Lexer(program->source, program->name).run(), *program);
  program->body = parser.parse_template();
  Template t;
  t.program_ = std::move(program);
  return t;
}

const std::string& Template::name() const {
  return program_->name;
}

}  // namespace genesis::data::jinja
