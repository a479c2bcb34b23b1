// The chat-template lexer: template source to tokens (chat_template_ast.h), with Jinja's whitespace
// rules as transformers sets them (Note [Whitespace control] in chat_template_lex.cc). Pure, thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/chat_template_ast.h"

namespace autouvm::tokenizer::chat_template {

// The tokens of `source`, ending in a kEnd token; INVALID_ARGUMENT "chat template line N: ..." for an
// unterminated tag, comment or string, or a character no token starts with.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace autouvm::tokenizer::chat_template
