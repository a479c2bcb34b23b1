// Whole-file reads and atomic writes for the CLI: the admin token file, profile bundles.
//
// Errors are absl::Status whose message names the path and the reason (`cannot read x: No such file or
// directory`). Thread-safety: plain functions; concurrent writes to the same path race on its .tmp file.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace autouvm::cli {

// The file's bytes. NOT_FOUND if it does not exist; FAILED_PRECONDITION if it cannot be opened or read
// (permissions, a directory).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Writes `bytes` to `path`.tmp, flushes it to disk and renames it over `path`, so a reader sees the old
// file or the whole new one. On failure the .tmp file is removed and `path` is untouched.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes);

}  // namespace autouvm::cli
