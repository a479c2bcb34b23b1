#include "tools/json_file.h"

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"

namespace autouvm::tools {

absl::StatusOr<nlohmann::json> ReadJsonObject(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, base::ReadTextFile(path, "the file"));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  return j;
}

}  // namespace autouvm::tools
