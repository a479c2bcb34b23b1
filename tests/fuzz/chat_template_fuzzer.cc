// libFuzzer target: chat templates (tokenizer/chat_template.h). The input is parsed as a template and, when
// it parses, rendered against a small fixed conversation with small limits. Whatever it is, parsing and
// rendering return (no crash, no undefined behaviour, no unbounded time or memory); an error names the
// template's line; rendering is deterministic.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "tokenizer/chat_template.h"

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
bool NamesALine(const absl::Status& status) { return absl::StartsWith(status.message(), "chat template line "); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi é"},
                 {"role": "assistant", "content": "Hello", "tool_calls": [{"function": {"name": "f",
                   "arguments": {"x": [1, 2.5, null, true]}}}]},
                 {"role": "tool", "content": "42"}, {"role": "user", "content": "Why?"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  autouvm::tokenizer::RenderLimits limits;
  limits.max_output_bytes = 64 << 10;
  limits.max_steps = 20'000;
  limits.max_work_bytes = 4 << 20;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = autouvm::tokenizer::ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    Check(parsed.status().code() == absl::StatusCode::kInvalidArgument && NamesALine(parsed.status()));
    return 0;
  }
  auto first = parsed->Render(context, limits);
  auto second = parsed->Render(context, limits);
  Check(first.ok() == second.ok());
  if (first.ok()) {
    Check(*first == *second && first->size() <= limits.max_output_bytes);
  } else {
    Check(NamesALine(first.status()) && first.status() == second.status());
  }
  return 0;
}
