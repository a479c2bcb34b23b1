#include "tokenizer/chat_template_parse.h"

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

namespace autouvm::tokenizer::chat_template {
namespace parse_internal {

namespace {

std::string Describe(const Token& t) {
  switch (t.kind) {
    case Kind::kText:
      return "text";
    case Kind::kPrintBegin:
      return "'{{'";
    case Kind::kPrintEnd:
      return "'}}'";
    case Kind::kBlockBegin:
      return "'{%'";
    case Kind::kBlockEnd:
      return "'%}'";
    case Kind::kString:
      return "a string";
    case Kind::kEnd:
      return "the end of the template";
    default:
      return absl::StrCat("'", t.value, "'");
  }
}

}  // namespace

absl::Status Parser::Unexpected(std::string_view expected) const {
  return LineError(Peek().line, absl::StrCat("expected ", std::string(expected), ", found ", Describe(Peek())));
}

absl::Status Parser::ExpectOp(std::string_view op) {
  if (!IsOp(std::string(op))) return Unexpected(absl::StrCat("'", std::string(op), "'"));
  Next();
  return absl::OkStatus();
}

absl::Status Parser::ExpectBlockEnd() {
  if (Peek().kind != Kind::kBlockEnd) return Unexpected("'%}'");
  Next();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Parser::ExpectName(std::string_view what) {
  if (Peek().kind != Kind::kName) return Unexpected(what);
  return Next().value;
}

absl::StatusOr<Body> Parser::ParseTemplate() {
  std::string end;
  const Token start{Kind::kEnd, "", 1};
  return ParseBody({}, &end, start);
}

absl::StatusOr<Body> Parser::ParseBody(std::initializer_list<std::string_view> ends, std::string* end,
                                       const Token& opener) {
  Nest nest(&block_depth_);
  if (block_depth_ > kMaxBlockDepth) return LineError(opener.line, "blocks nested too deeply");
  Body body;
  while (true) {
    const Token& t = Peek();
    if (t.kind == Kind::kEnd) {
      if (ends.size() == 0) return body;
      return LineError(opener.line,
                       absl::StrCat("'", opener.value, "' is never closed (expected '",
                                    absl::StrJoin(std::vector<std::string>(ends.begin(), ends.end()), "' or '"), "')"));
    }
    if (t.kind == Kind::kText) {
      auto node = std::make_unique<Node>();
      node->kind = Node::Kind::kText;
      node->line = t.line;
      node->text = Next().value;
      body.push_back(std::move(node));
    } else if (t.kind == Kind::kPrintBegin) {
      auto node = std::make_unique<Node>();
      node->kind = Node::Kind::kPrint;
      node->line = Next().line;
      ASSIGN_OR_RETURN(node->expr, ParseExpression());
      if (Peek().kind != Kind::kPrintEnd) return Unexpected("'}}'");
      Next();
      body.push_back(std::move(node));
    } else if (t.kind == Kind::kBlockBegin) {
      if (Peek(1).kind == Kind::kName && std::find(ends.begin(), ends.end(), Peek(1).value) != ends.end()) {
        Next();
        *end = Next().value;
        return body;
      }
      Next();
      ASSIGN_OR_RETURN(NodePtr node, ParseStatement());
      if (node != nullptr) body.push_back(std::move(node));
    } else {
      return Unexpected("text or a tag");
    }
  }
}

absl::StatusOr<NodePtr> Parser::ParseStatement() {
  if (Peek().kind != Kind::kName) return Unexpected("a tag name");
  const Token tag = Next();
  const std::string& name = tag.value;
  if (name == "if") return ParseIf(tag);
  if (name == "for") return ParseFor(tag);
  if (name == "set") return ParseSet(tag);
  if (name == "macro") return ParseMacro(tag);
  auto node = std::make_unique<Node>();
  node->line = tag.line;
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) return LineError(tag.line, absl::StrCat("'", name, "' outside a for loop"));
    node->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
  if (name == "generation") {  // transformers' AssistantTracker: marks the assistant's text, which it leaves as is
    node->kind = Node::Kind::kGroup;
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ASSIGN_OR_RETURN(Body body, ParseBody({"endgeneration"}, &end, tag));
    node->bodies.push_back(std::move(body));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
  static constexpr std::string_view kUnsupported[] = {"call",  "filter", "include", "import", "from",      "extends",
                                                      "block", "with",   "do",      "trans",  "autoescape"};
  if (std::find(std::begin(kUnsupported), std::end(kUnsupported), name) != std::end(kUnsupported))
    return LineError(tag.line, absl::StrCat("the tag '", name, "' is not supported"));
  const bool closing = name.rfind("end", 0) == 0 || name == "else" || name == "elif";
  return LineError(tag.line, absl::StrCat(closing ? "unexpected tag '" : "unknown tag '", name, "'"));
}

absl::StatusOr<NodePtr> Parser::ParseIf(const Token& tag) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kIf;
  node->line = tag.line;
  std::string end = "if";
  while (end == "if" || end == "elif") {
    ASSIGN_OR_RETURN(ExprPtr condition, ParseExpression());
    node->conditions.push_back(std::move(condition));
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end, tag));
    node->bodies.push_back(std::move(body));
  }
  if (end == "else") {
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(Body body, ParseBody({"endif"}, &end, tag));
    node->bodies.push_back(std::move(body));
  }
  RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseFor(const Token& tag) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFor;
  node->line = tag.line;
  do {
    ASSIGN_OR_RETURN(std::string target, ExpectName("a loop variable"));
    node->targets.push_back(std::move(target));
  } while (IsOp(",") && (Next(), true));
  if (!IsName("in")) return Unexpected("'in'");
  Next();
  ASSIGN_OR_RETURN(node->expr, ParseExpression(/*with_condition=*/false));
  if (IsName("if")) {
    Next();
    ASSIGN_OR_RETURN(node->filter, ParseExpression(/*with_condition=*/false));
  }
  if (IsName("recursive")) return LineError(Peek().line, "recursive for loops are not supported");
  RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  {
    Nest loop(&loop_depth_);
    ASSIGN_OR_RETURN(Body body, ParseBody({"else", "endfor"}, &end, tag));
    node->bodies.push_back(std::move(body));
  }
  if (end == "else") {
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(Body body, ParseBody({"endfor"}, &end, tag));
    node->bodies.push_back(std::move(body));
  }
  RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseSet(const Token& tag) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kSet;
  node->line = tag.line;
  ASSIGN_OR_RETURN(std::string first, ExpectName("a variable name"));
  node->targets.push_back(std::move(first));
  if (IsOp(".")) {
    Next();
    ASSIGN_OR_RETURN(node->attr, ExpectName("an attribute name"));
  } else {
    while (IsOp(",")) {
      Next();
      ASSIGN_OR_RETURN(std::string target, ExpectName("a variable name"));
      node->targets.push_back(std::move(target));
    }
  }
  if (Peek().kind == Kind::kBlockEnd && node->targets.size() == 1 && node->attr.empty()) {
    Next();
    node->kind = Node::Kind::kSetBlock;
    std::string end;
    ASSIGN_OR_RETURN(Body body, ParseBody({"endset"}, &end, tag));
    node->bodies.push_back(std::move(body));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
  RETURN_IF_ERROR(ExpectOp("="));
  ASSIGN_OR_RETURN(node->expr, ParseExpression());
  RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseMacro(const Token& tag) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kMacro;
  node->line = tag.line;
  ASSIGN_OR_RETURN(node->text, ExpectName("a macro name"));
  RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    ASSIGN_OR_RETURN(std::string param, ExpectName("a parameter name"));
    if (std::find(node->targets.begin(), node->targets.end(), param) != node->targets.end())
      return LineError(tag.line, absl::StrCat("macro '", node->text, "' has two parameters named '", param, "'"));
    node->targets.push_back(std::move(param));
    ExprPtr fallback;
    if (IsOp("=")) {
      Next();
      ASSIGN_OR_RETURN(fallback, ParseExpression());
    }
    node->defaults.push_back(std::move(fallback));
    if (!IsOp(",")) break;
    Next();
  }
  RETURN_IF_ERROR(ExpectOp(")"));
  RETURN_IF_ERROR(ExpectBlockEnd());
  const int loops = std::exchange(loop_depth_, 0);
  std::string end;
  auto body = ParseBody({"endmacro"}, &end, tag);
  loop_depth_ = loops;
  if (!body.ok()) return body.status();
  node->bodies.push_back(*std::move(body));
  if (IsName(node->text)) Next();
  RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

}  // namespace parse_internal

absl::StatusOr<Program> ParseProgram(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  parse_internal::Parser parser(std::move(tokens));
  ASSIGN_OR_RETURN(Body body, parser.ParseTemplate());
  return Program{std::move(body)};
}

}  // namespace autouvm::tokenizer::chat_template
