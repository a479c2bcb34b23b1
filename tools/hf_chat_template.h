// The chat template of a Hugging Face checkpoint, for autouvm-convert (tools/hf_import.h): the Jinja
// source transformers' apply_chat_template renders, and the bos and eos texts it sees.
//
//   ASSIGN_OR_RETURN(HfChatTemplate t, ReadHfChatTemplate(hf_dir));
//   if (!t.source.empty()) ...   // t.note says which of several templates was taken, if there was a choice
//
// Where transformers finds them: chat_template.jinja in the checkpoint's folder (newer transformers save it
// there; it takes the place of a template in tokenizer_config.json), else tokenizer_config.json's
// "chat_template" — a string, or a list of {"name", "template"} of which "default" is taken, else the first.
// bos_token and eos_token come from tokenizer_config.json: a string or an AddedToken object {"content": ...}.
// The template is checked to parse (tokenizer/chat_template.h).
//
// Thread-safety: a pure function of the files it reads.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace autouvm::tools {

struct HfChatTemplate {
  std::string source;     // "" when the checkpoint has none
  std::string origin;     // the file it came from (for messages), or ""
  std::string bos_token;  // "" when tokenizer_config.json names none
  std::string eos_token;
  std::string note;  // which template was taken where there was a choice, or ""
};

// INVALID_ARGUMENT naming the file and key for a value of the wrong kind, or a template that does not
// parse (the message names its line).
absl::StatusOr<HfChatTemplate> ReadHfChatTemplate(const std::string& dir);

}  // namespace autouvm::tools
