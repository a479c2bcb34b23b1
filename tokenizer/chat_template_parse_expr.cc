// The expressions of chat_template_parse.h's Parser, with Jinja's precedence (loosest first): x if c else y,
// or, and, not, comparisons and in, + -, ~, * / // %, **, unary - +, then postfix . [] () and | filters
// and "is" tests.
#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template_builtins.h"
#include "tokenizer/chat_template_lex.h"
#include "tokenizer/chat_template_parse.h"

namespace autouvm::tokenizer::chat_template {
namespace parse_internal {

absl::StatusOr<ExprPtr> Parser::Finish(ExprPtr e) {
  int depth = 0;
  for (const ExprPtr& child : e->operands)
    if (child != nullptr) depth = std::max(depth, child->depth);
  for (const ExprPtr& child : e->args) depth = std::max(depth, child->depth);
  e->depth = depth + 1;
  if (e->depth > kMaxExprDepth) return LineError(e->line, "expression nested too deeply");
  return e;
}

absl::StatusOr<ExprPtr> Parser::Make(Expr::Kind kind, int line, std::string name, std::vector<ExprPtr> operands) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(name);
  e->operands = std::move(operands);
  return Finish(std::move(e));
}

namespace {

std::vector<ExprPtr> Operands(ExprPtr a, ExprPtr b = nullptr, ExprPtr c = nullptr, ExprPtr d = nullptr) {
  std::vector<ExprPtr> out;
  out.push_back(std::move(a));
  if (b != nullptr || c != nullptr || d != nullptr) out.push_back(std::move(b));
  if (c != nullptr || d != nullptr) out.push_back(std::move(c));
  if (d != nullptr) out.push_back(std::move(d));
  return out;
}

}  // namespace

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condition) {
  Nest nest(&expr_depth_);
  if (expr_depth_ > kMaxExprDepth) return LineError(Peek().line, "expression nested too deeply");
  ASSIGN_OR_RETURN(ExprPtr node, ParseOr());
  if (!with_condition || !IsName("if")) return node;
  const int line = Next().line;
  ASSIGN_OR_RETURN(ExprPtr condition, ParseOr());
  ExprPtr otherwise;
  if (IsName("else")) {
    Next();
    ASSIGN_OR_RETURN(otherwise, ParseExpression());
  }
  std::vector<ExprPtr> operands;
  operands.push_back(std::move(condition));
  operands.push_back(std::move(node));
  operands.push_back(std::move(otherwise));
  return Make(Expr::Kind::kIf, line, "", std::move(operands));
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  ASSIGN_OR_RETURN(ExprPtr node, ParseAnd());
  while (IsName("or")) {
    const int line = Next().line;
    ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    ASSIGN_OR_RETURN(node, Make(Expr::Kind::kBinary, line, "or", Operands(std::move(node), std::move(right))));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  ASSIGN_OR_RETURN(ExprPtr node, ParseNot());
  while (IsName("and")) {
    const int line = Next().line;
    ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    ASSIGN_OR_RETURN(node, Make(Expr::Kind::kBinary, line, "and", Operands(std::move(node), std::move(right))));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  Nest nest(&expr_depth_);
  if (expr_depth_ > kMaxExprDepth) return LineError(Peek().line, "expression nested too deeply");
  const int line = Next().line;
  ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  return Make(Expr::Kind::kUnary, line, "not", Operands(std::move(operand)));
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  ASSIGN_OR_RETURN(ExprPtr node, ParseBinaryLevel(0));
  while (true) {
    std::string op;
    if (Peek().kind == Kind::kOp && (Peek().value == "==" || Peek().value == "!=" || Peek().value == "<" ||
                                     Peek().value == ">" || Peek().value == "<=" || Peek().value == ">=")) {
      op = Peek().value;
    } else if (IsName("in")) {
      op = "in";
    } else if (IsName("not") && IsName("in", 1)) {
      Next();
      op = "not in";
    } else {
      return node;
    }
    const int line = Next().line;
    ASSIGN_OR_RETURN(ExprPtr right, ParseBinaryLevel(0));
    ASSIGN_OR_RETURN(node, Make(Expr::Kind::kBinary, line, op, Operands(std::move(node), std::move(right))));
  }
}

// Jinja's math1 (+ -), concat (~), math2 (* / // %) and pow (**), each left-associative.
absl::StatusOr<ExprPtr> Parser::ParseBinaryLevel(int level) {
  static const std::vector<std::vector<std::string_view>> kLevels = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  auto operand = [&]() { return level + 1 < 4 ? ParseBinaryLevel(level + 1) : ParseUnary(true); };
  ASSIGN_OR_RETURN(ExprPtr node, operand());
  while (Peek().kind == Kind::kOp &&
         std::find(kLevels[level].begin(), kLevels[level].end(), Peek().value) != kLevels[level].end()) {
    const Token op = Next();
    ASSIGN_OR_RETURN(ExprPtr right, operand());
    ASSIGN_OR_RETURN(node, Make(Expr::Kind::kBinary, op.line, op.value, Operands(std::move(node), std::move(right))));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    Nest nest(&expr_depth_);
    if (expr_depth_ > kMaxExprDepth) return LineError(Peek().line, "expression nested too deeply");
    const Token op = Next();
    ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    ASSIGN_OR_RETURN(node, Make(Expr::Kind::kUnary, op.line, op.value, Operands(std::move(operand))));
  } else {
    ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) return ParseFilters(std::move(node));
  return node;
}

namespace {

absl::StatusOr<ExprPtr> Literal(Json value, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = Expr::Kind::kLiteral;
  e->line = line;
  e->literal = std::move(value);
  return e;
}

}  // namespace

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Peek();
  const int line = t.line;
  switch (t.kind) {
    case Kind::kName: {
      const std::string name = Next().value;
      if (name == "true" || name == "True") return Literal(true, line);
      if (name == "false" || name == "False") return Literal(false, line);
      if (name == "none" || name == "None") return Literal(nullptr, line);
      return Make(Expr::Kind::kName, line, name, {});
    }
    case Kind::kString: {
      std::string s = Next().value;
      while (Peek().kind == Kind::kString) s += Next().value;  // "a" "b" is "ab"
      return Literal(std::move(s), line);
    }
    case Kind::kInt: {
      const std::string& digits = Next().value;
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      if (ec != std::errc() || end != digits.data() + digits.size())
        return LineError(line, "integer literal too large");
      return Literal(v, line);
    }
    case Kind::kFloat: {
      const std::string& text = Next().value;
      double v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size()) return LineError(line, "float literal out of range");
      return Literal(v, line);
    }
    case Kind::kOp:
      if (t.value == "(") {
        Next();
        if (IsOp(")")) return Next(), Make(Expr::Kind::kList, line, "", {});
        ASSIGN_OR_RETURN(ExprPtr inner, ParseExpression());
        if (IsOp(")")) return Next(), std::move(inner);
        if (!IsOp(",")) return Unexpected("')'");
        Next();
        ASSIGN_OR_RETURN(ExprPtr tuple, ParseSequence(Expr::Kind::kList, ")", line));  // a tuple: a list here
        tuple->operands.insert(tuple->operands.begin(), std::move(inner));
        return Finish(std::move(tuple));
      }
      if (t.value == "[") return Next(), ParseSequence(Expr::Kind::kList, "]", line);
      if (t.value == "{") return Next(), ParseSequence(Expr::Kind::kDict, "}", line);
      [[fallthrough]];
    default:
      return Unexpected("an expression");
  }
}

// The items of a list or dict (key: value) up to `close`; a trailing comma is allowed.
absl::StatusOr<ExprPtr> Parser::ParseSequence(Expr::Kind kind, std::string_view close, int line) {
  Nest nest(&expr_depth_);
  if (expr_depth_ > kMaxExprDepth) return LineError(line, "expression nested too deeply");
  std::vector<ExprPtr> items;
  while (!IsOp(close)) {
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    items.push_back(std::move(item));
    if (kind == Expr::Kind::kDict) {
      RETURN_IF_ERROR(ExpectOp(":"));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      items.push_back(std::move(value));
    }
    if (!IsOp(",")) break;
    Next();
  }
  RETURN_IF_ERROR(ExpectOp(close));
  return Make(kind, line, "", std::move(items));
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    const int line = Peek().line;
    if (IsOp(".")) {
      Next();
      if (Peek().kind == Kind::kInt) {
        ASSIGN_OR_RETURN(ExprPtr index, ParsePrimary());
        ASSIGN_OR_RETURN(node, Make(Expr::Kind::kIndex, line, "", Operands(std::move(node), std::move(index))));
      } else {
        ASSIGN_OR_RETURN(std::string attr, ExpectName("an attribute name"));
        ASSIGN_OR_RETURN(node, Make(Expr::Kind::kAttr, line, std::move(attr), Operands(std::move(node))));
      }
    } else if (IsOp("[")) {
      Next();
      ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
    } else if (IsOp("(")) {
      ASSIGN_OR_RETURN(node, Make(Expr::Kind::kCall, line, "", Operands(std::move(node))));
      RETURN_IF_ERROR(ParseArgs(node.get()));
      ASSIGN_OR_RETURN(node, Finish(std::move(node)));
    } else {
      return node;
    }
  }
}

// After "[": an index, or a slice start:stop:step (each part may be left out).
absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node, int line) {
  ExprPtr parts[3];
  if (!IsOp(":")) {
    ASSIGN_OR_RETURN(parts[0], ParseExpression());
    if (IsOp("]")) {
      Next();
      return Make(Expr::Kind::kIndex, line, "", Operands(std::move(node), std::move(parts[0])));
    }
  }
  RETURN_IF_ERROR(ExpectOp(":"));
  if (!IsOp("]") && !IsOp(":")) {
    ASSIGN_OR_RETURN(parts[1], ParseExpression());
  }
  if (IsOp(":")) {
    Next();
    if (!IsOp("]")) {
      ASSIGN_OR_RETURN(parts[2], ParseExpression());
    }
  }
  RETURN_IF_ERROR(ExpectOp("]"));
  std::vector<ExprPtr> operands;
  operands.push_back(std::move(node));
  for (ExprPtr& part : parts) operands.push_back(std::move(part));
  return Make(Expr::Kind::kSlice, line, "", std::move(operands));
}

absl::StatusOr<ExprPtr> Parser::ParseFilters(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Next();
      const int line = Peek().line;
      ASSIGN_OR_RETURN(std::string name, ExpectName("a filter name"));
      if (!IsFilter(name)) return LineError(line, absl::StrCat("unknown filter '", name, "'"));
      ASSIGN_OR_RETURN(node, Make(Expr::Kind::kFilter, line, std::move(name), Operands(std::move(node))));
      if (IsOp("(")) RETURN_IF_ERROR(ParseArgs(node.get()));
      ASSIGN_OR_RETURN(node, Finish(std::move(node)));
    } else if (IsName("is")) {
      Next();
      const bool negated = IsName("not") && (Next(), true);
      const int line = Peek().line;
      ASSIGN_OR_RETURN(std::string name, ExpectName("a test name"));
      if (!IsTest(name)) return LineError(line, absl::StrCat("unknown test '", name, "'"));
      ASSIGN_OR_RETURN(node, Make(Expr::Kind::kTest, line, std::move(name), Operands(std::move(node))));
      node->negated = negated;
      const Kind k = Peek().kind;
      if (IsOp("(")) {
        RETURN_IF_ERROR(ParseArgs(node.get()));
      } else if ((k == Kind::kName || k == Kind::kString || k == Kind::kInt || k == Kind::kFloat || IsOp("[") ||
                  IsOp("{")) &&
                 !IsName("else") && !IsName("or") && !IsName("and")) {  // "x is divisibleby 3", as Jinja reads it
        if (IsName("is")) return LineError(Peek().line, "tests cannot be chained with 'is'");
        ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        node->args.push_back(std::move(arg));
      }
      ASSIGN_OR_RETURN(node, Finish(std::move(node)));
    } else if (IsOp("(")) {
      const int line = Peek().line;
      ASSIGN_OR_RETURN(node, Make(Expr::Kind::kCall, line, "", Operands(std::move(node))));
      RETURN_IF_ERROR(ParseArgs(node.get()));
      ASSIGN_OR_RETURN(node, Finish(std::move(node)));
    } else {
      return node;
    }
  }
}

// "(" args ")": positional arguments, then name=value ones.
absl::Status Parser::ParseArgs(Expr* call) {
  Nest nest(&expr_depth_);
  if (expr_depth_ > kMaxExprDepth) return LineError(Peek().line, "expression nested too deeply");
  RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (Peek().kind == Kind::kName && IsOp("=", 1)) {
      std::string keyword = Next().value;
      Next();
      if (std::find(call->keywords.begin(), call->keywords.end(), keyword) != call->keywords.end())
        return LineError(Peek().line, absl::StrCat("keyword argument '", keyword, "' repeated"));
      call->keywords.push_back(std::move(keyword));
    } else if (!call->keywords.empty()) {
      return LineError(Peek().line, "positional argument after keyword argument");
    }
    ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
    call->args.push_back(std::move(arg));
    if (!IsOp(",")) break;
    Next();
  }
  return ExpectOp(")");
}

}  // namespace parse_internal
}  // namespace autouvm::tokenizer::chat_template
