// API keys for the HTTP API (server.api_key_file): the keys a file holds, and the constant-time check
// of the key a request presents.
//
//   ASSIGN_OR_RETURN(std::vector<std::string> keys, ReadApiKeyFile(path));
//   if (!ApiKeyAccepted(keys, request.get_header_value("Authorization"))) ... 401 ...
//
// Pure functions; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autouvm::http {

// One key per line; blank lines and lines starting with '#' are skipped, spaces around a key are
// not part of it. FAILED_PRECONDITION naming the file when it cannot be read, holds no key, or holds
// a key with a space or a control character in it.
absl::StatusOr<std::vector<std::string>> ReadApiKeyFile(const std::string& path);

// Whether `authorization` (the header's value) is "Bearer <key>" for one of `keys`. Every key is
// compared, each in time independent of where it differs (their SHA-256 digests are compared with
// CRYPTO_memcmp), so the time taken tells nothing of the keys.
bool ApiKeyAccepted(const std::vector<std::string>& keys, absl::string_view authorization);

}  // namespace autouvm::http
