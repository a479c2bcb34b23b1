// The chat-template parser: tokens (chat_template_lex.h) to the tree of chat_template_ast.h, with Jinja's
// operator precedence. Filters and tests are checked against those the renderer has
// (chat_template_builtins.h), as Jinja checks them when it compiles. Pure, thread-safe.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/chat_template_ast.h"

namespace autouvm::tokenizer::chat_template {

// INVALID_ARGUMENT "chat template line N: ..." naming what is wrong: an unknown or unclosed tag, a bad
// expression, an unknown filter or test, nesting past Note [Nesting limits] (below).
absl::StatusOr<Program> ParseProgram(std::string_view source);

// Internal to chat_template_parse.cc (statements) and chat_template_parse_expr.cc (expressions).
namespace parse_internal {

// Note [Nesting limits]: the parser and the renderer recurse along the tree, and so does the tree's
// destructor; a template of "((((..." or "x|f|f|f..." must not overflow the stack. An expression's tree
// may be kMaxExprDepth deep and blocks may nest kMaxBlockDepth deep; the renderer caps its own recursion
// (macros calling macros) apart (chat_template_render.cc).
constexpr int kMaxExprDepth = 100;
constexpr int kMaxBlockDepth = 40;

using Kind = Token::Kind;

// One parse of one template's tokens.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  absl::StatusOr<Body> ParseTemplate();

 private:
  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& Next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kOp && Peek(ahead).value == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kName && Peek(ahead).value == name;
  }
  // INVALID_ARGUMENT "chat template line N: expected <expected>, found <the next token>".
  absl::Status Unexpected(std::string_view expected) const;
  absl::Status ExpectOp(std::string_view op);
  absl::Status ExpectBlockEnd();
  absl::StatusOr<std::string> ExpectName(std::string_view what);

  // Statements. ParseBody stops before the name of an end tag in `ends` (after its "{%"), which it
  // stores in *end; `opener` names the block for the error when the template ends first.
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> ends, std::string* end, const Token& opener);
  absl::StatusOr<NodePtr> ParseStatement();
  absl::StatusOr<NodePtr> ParseIf(const Token& tag);
  absl::StatusOr<NodePtr> ParseFor(const Token& tag);
  absl::StatusOr<NodePtr> ParseSet(const Token& tag);
  absl::StatusOr<NodePtr> ParseMacro(const Token& tag);

  // Expressions, loosest first.
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condition = true);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseBinaryLevel(int level);
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseSequence(Expr::Kind kind, std::string_view close, int line);
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node, int line);
  absl::StatusOr<ExprPtr> ParseFilters(ExprPtr node);
  absl::Status ParseArgs(Expr* call);

  absl::StatusOr<ExprPtr> Make(Expr::Kind kind, int line, std::string name, std::vector<ExprPtr> operands);
  absl::StatusOr<ExprPtr> Finish(ExprPtr e);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int expr_depth_ = 0;   // recursion of ParseExpression and the unary operators
  int block_depth_ = 0;  // blocks open
  int loop_depth_ = 0;   // for loops open (in the macro being parsed)
};

// Counts a level of recursion for as long as it lives.
class Nest {
 public:
  explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
  ~Nest() { --*depth_; }
  Nest(const Nest&) = delete;
  Nest& operator=(const Nest&) = delete;

 private:
  int* depth_;
};

}  // namespace parse_internal

}  // namespace autouvm::tokenizer::chat_template
