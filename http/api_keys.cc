#include "http/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"

namespace autouvm::http {
namespace {

std::array<unsigned char, SHA256_DIGEST_LENGTH> Digest(absl::string_view s) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d;
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadApiKeyFile(const std::string& path) {
  auto text = base::ReadTextFile(path, "the API key file");
  if (!text.ok()) return absl::FailedPreconditionError(absl::StrCat("server.api_key_file: ", text.status().message()));
  std::vector<std::string> keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    for (char c : line) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
        return absl::FailedPreconditionError(absl::StrCat("server.api_key_file: ", path, " line ", line_number,
                                                          ": a key may not hold spaces or control characters"));
      }
    }
    keys.emplace_back(line);
  }
  if (keys.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("server.api_key_file: ", path, " holds no key"));
  }
  return keys;
}

bool ApiKeyAccepted(const std::vector<std::string>& keys, absl::string_view authorization) {
  constexpr absl::string_view kBearer = "Bearer ";
  if (authorization.size() < kBearer.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
    return false;
  }
  const auto presented = Digest(absl::StripAsciiWhitespace(authorization.substr(kBearer.size())));
  bool accepted = false;
  for (const std::string& key : keys) {
    const auto expected = Digest(key);
    accepted |= CRYPTO_memcmp(presented.data(), expected.data(), expected.size()) == 0;
  }
  return accepted;
}

}  // namespace autouvm::http
