#include "tokenizer/chat_template.h"

#include <utility>

#include "base/status_macros.h"
#include "tokenizer/chat_template_ast.h"
#include "tokenizer/chat_template_parse.h"
#include "tokenizer/chat_template_render.h"

namespace autouvm::tokenizer {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(chat_template::Program program, chat_template::ParseProgram(source));
  return ChatTemplate(std::make_shared<const chat_template::Program>(std::move(program)));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 const RenderLimits& limits) const {
  return chat_template::RenderProgram(*program_, context, limits);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context, const RenderLimits& limits) const {
  // nlohmann::json keeps object keys sorted; the same document in the order it has.
  return Render(nlohmann::ordered_json::parse(context.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)),
                limits);
}

}  // namespace autouvm::tokenizer
