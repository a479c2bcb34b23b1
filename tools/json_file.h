// Reading a JSON file that must hold one object (config.json, generation_config.json, the safetensors
// index), for autouvm-convert.
//
//   ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonObject(dir + "/config.json"));
//
// Thread-safety: a pure function of the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace autouvm::tools {

// NOT_FOUND naming the path if it cannot be read; INVALID_ARGUMENT "<path>: not a JSON object".
absl::StatusOr<nlohmann::json> ReadJsonObject(const std::string& path);

}  // namespace autouvm::tools
