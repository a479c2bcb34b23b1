// Chat templates: the Jinja2 source a Hugging Face checkpoint carries in tokenizer_config.json
// ("chat_template"), rendered the way transformers' apply_chat_template renders it.
//
//   ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Parse(config["chat_template"].get<std::string>()));
//   ASSIGN_OR_RETURN(std::string prompt, t.Render({{"messages", messages}, {"add_generation_prompt", true},
//                                                  {"bos_token", "<s>"}, {"eos_token", "</s>"}}));
//
// The subset of Jinja that chat templates use (Note [Chat template subset] in chat_template_render.cc lists
// it), with transformers' environment: trim_blocks and lstrip_blocks on, a single trailing newline of the
// source dropped, loop controls (break/continue), raise_exception(msg) and a tojson that is Python's
// json.dumps(ensure_ascii=False). Errors are INVALID_ARGUMENT "chat template line N: ..." naming the line of
// the template; a render that passes one of its RenderLimits fails with RESOURCE_EXHAUSTED, naming the line
// too. A ChatTemplate is immutable after Parse and may be copied (cheaply) and rendered from several
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace autouvm::tokenizer {

namespace chat_template {
struct Program;
}  // namespace chat_template

// What one render may use; templates come with model files, which are input like any other.
struct RenderLimits {
  size_t max_output_bytes = size_t{1} << 20;  // the rendered text (and each string made on the way)
  int64_t max_steps = 1'000'000;              // loop iterations and macro calls, together
  int max_macro_depth = 32;                   // macros calling macros
  size_t max_work_bytes = size_t{64} << 20;   // all strings and lists made on the way, summed
};

class ChatTemplate {
 public:
  // INVALID_ARGUMENT "chat template line N: <what is wrong>" for a template that is not well formed.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  // `context` is an object whose keys are the template's variables: "messages", "add_generation_prompt",
  // "bos_token", "tools", ... Objects keep their order in nlohmann::ordered_json, which matters to tojson
  // (a tool's schema is printed in the order the client sent it); a nlohmann::json context has its keys
  // sorted, as nlohmann::json keeps them.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& context, const RenderLimits& limits = {}) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const chat_template::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const chat_template::Program> program_;
};

}  // namespace autouvm::tokenizer
