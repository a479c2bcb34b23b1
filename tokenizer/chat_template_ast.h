// The parsed form of a chat template (tokenizer/chat_template.h): the lexer's tokens
// (chat_template_lex.h) and the tree the parser (chat_template_parse.h) makes of them, which the renderer
// (chat_template_render.h) walks. Internal to autouvm_tokenizer. Immutable once parsed.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace autouvm::tokenizer::chat_template {

using Json = nlohmann::ordered_json;

// INVALID_ARGUMENT "chat template line <line>: <what>" (chat_template_lex.cc).
absl::Status LineError(int line, std::string_view what);

struct Token {
  enum class Kind {
    kText,        // text between tags, whitespace control applied
    kPrintBegin,  // {{
    kPrintEnd,    // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // value: the decoded string
    kInt,     // value: the digits (underscores removed)
    kFloat,   // value: the literal (underscores removed)
    kOp,      // value: the operator, e.g. "//" or "("
    kEnd,     // end of the template
  };
  Kind kind;
  std::string value;
  int line = 0;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // operands: the items
    kDict,     // operands: key, value, key, value, ...
    kAttr,     // operands[0].name
    kIndex,    // operands[0][operands[1]]
    kSlice,    // operands[0][operands[1]:operands[2]:operands[3]], each of the three may be null
    kCall,     // operands[0](args)
    kFilter,   // operands[0] | name(args)
    kTest,     // operands[0] is [not] name(args)
    kUnary,    // name: "-", "+" or "not"; operands[0]
    kBinary,   // name: the operator ("+", "~", "and", "in", "not in", "==", ...); operands[0], operands[1]
    kIf,       // operands[1] if operands[0] else operands[2] (which may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int depth = 1;  // of this tree, for Note [Nesting limits] in chat_template_parse.h
  std::string name;
  Json literal;
  std::vector<ExprPtr> operands;
  // Calls, filters and tests: positional arguments, then keyword ones (their names in `keywords`).
  std::vector<ExprPtr> args;
  std::vector<std::string> keywords;
  bool negated = false;  // kTest: "is not"
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kPrint,     // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; a last body without a condition is the else
    kFor,       // for targets in expr [if filter]: bodies[0]; else: bodies[1]
    kSet,       // set targets = expr, or set targets[0].attr = expr
    kSetBlock,  // set targets[0]: bodies[0] rendered
    kMacro,     // macro name(targets = defaults): bodies[0]
    kBreak,
    kContinue,
    kGroup,  // bodies[0] as is (e.g. transformers' {% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;  // kText; kMacro: its name
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;  // kFor/kSet: the names assigned; kMacro: the parameters
  std::string attr;                  // kSet: the attribute of a namespace assigned
  std::vector<ExprPtr> conditions;   // kIf
  std::vector<ExprPtr> defaults;     // kMacro: one per parameter, null where it has none
  std::vector<Body> bodies;
};

struct Program {
  Body body;
};

}  // namespace autouvm::tokenizer::chat_template
