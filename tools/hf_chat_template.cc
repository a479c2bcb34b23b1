#include "tools/hf_chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template.h"
#include "tools/json_file.h"

namespace autouvm::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

absl::Status Bad(const std::string& origin, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", key, ": ", what));
}

// A special token's text: a string, or an AddedToken object {"content": "<s>", "lstrip": ..., ...}.
absl::StatusOr<std::string> TokenText(const json& config, const std::string& key, const std::string& origin) {
  if (!config.contains(key) || config[key].is_null()) return std::string();
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return Bad(origin, key, absl::StrCat(v.dump(), " is neither a string nor an object with a \"content\" string"));
}

// tokenizer_config.json's chat_template: a string, or named templates of which "default" (else the first)
// is taken, said in `note`.
absl::StatusOr<std::string> ConfigTemplate(const json& config, const std::string& origin, std::string* note) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::string();
  const json& v = config["chat_template"];
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array() || v.empty()) {
    return Bad(origin, "chat_template", "neither a string nor a list of {\"name\", \"template\"}");
  }
  std::vector<std::string> names;
  int chosen = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("template") ||
        !t["template"].is_string()) {
      return Bad(origin, absl::StrCat("chat_template[", i, "]"),
                 "not an object with \"name\" and \"template\" strings");
    }
    names.push_back(t["name"].get<std::string>());
    if (chosen < 0 && names.back() == "default") chosen = static_cast<int>(i);
  }
  const bool has_default = chosen >= 0;
  if (!has_default) chosen = 0;
  if (names.size() > 1 || !has_default) {
    *note = absl::StrCat("tokenizer_config.json has ", names.size(), " chat templates (", absl::StrJoin(names, ", "),
                         "): took ", has_default ? "\"default\"" : absl::StrCat("the first, \"", names[0], "\""),
                         " (transformers' apply_chat_template takes another one by its chat_template argument)");
  }
  return v[chosen]["template"].get<std::string>();
}

}  // namespace

absl::StatusOr<HfChatTemplate> ReadHfChatTemplate(const std::string& dir) {
  const fs::path root(dir);
  HfChatTemplate out;
  std::error_code ec;
  const std::string config_path = (root / "tokenizer_config.json").string();
  std::string from_config;
  if (fs::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(const json config, ReadJsonObject(config_path));
    ASSIGN_OR_RETURN(out.bos_token, TokenText(config, "bos_token", config_path));
    ASSIGN_OR_RETURN(out.eos_token, TokenText(config, "eos_token", config_path));
    ASSIGN_OR_RETURN(from_config, ConfigTemplate(config, config_path, &out.note));
    if (!from_config.empty()) {
      out.source = from_config;
      out.origin = config_path + ": chat_template";
    }
  }
  // transformers reads chat_template.jinja in place of any template in tokenizer_config.json (newer
  // versions' save_pretrained write the template there).
  const std::string jinja_path = (root / "chat_template.jinja").string();
  if (fs::exists(jinja_path, ec)) {
    ASSIGN_OR_RETURN(std::string text, base::ReadTextFile(jinja_path, "the checkpoint's chat template"));
    if (!from_config.empty() && from_config != text) {
      out.note =
          "chat_template.jinja and tokenizer_config.json's chat_template differ: took chat_template.jinja, "
          "as transformers does";
    }
    out.source = std::move(text);
    out.origin = jinja_path;
  }
  if (!out.source.empty()) {
    if (absl::StatusOr<tokenizer::ChatTemplate> t = tokenizer::ChatTemplate::Parse(out.source); !t.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(out.origin, ": ", t.status().message()));
    }
  }
  return out;
}

}  // namespace autouvm::tools
