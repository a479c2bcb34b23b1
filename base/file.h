// Reading files whole: config files, model.yaml, tokenizer files, token files.
//
//   ASSIGN_OR_RETURN(std::string text, base::ReadTextFile(path, "the config file"));
//
// Thread-safe (no shared state).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace autouvm::base {

// The whole file as text; NOT_FOUND "<path>: cannot open <what>" when it cannot be read.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, const std::string& what);

}  // namespace autouvm::base
