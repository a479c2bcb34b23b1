// The chat-template renderer: walks a parsed template (chat_template_ast.h) against a context and writes
// the text, within RenderLimits. Each call is independent; a Program may be rendered from several threads
// at once.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_ast.h"

namespace autouvm::tokenizer::chat_template {

// INVALID_ARGUMENT "chat template line N: ..." for an error of the template or its input (including
// raise_exception's message); RESOURCE_EXHAUSTED "chat template line N: ..." when a limit is passed.
absl::StatusOr<std::string> RenderProgram(const Program& program, const Json& context, const RenderLimits& limits);

}  // namespace autouvm::tokenizer::chat_template
