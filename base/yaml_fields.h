// Strict typed reads from a YAML mapping, for config files and model.yaml.
//
//   YamlFields f(node, "server");            // "server" is the key path used in messages
//   f.Int("port", &port, 0, 65535);
//   f.String("address", &address);
//   RETURN_IF_ERROR(f.Finish());              // first error, or an unknown key, named by its path
//
// Every read is optional: an absent key leaves the target as it was (the default). Not thread-safe;
// one instance per mapping being read.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace autouvm::base {

class YamlFields {
 public:
  // `node` must be a map or null (null reads as empty); `path` is its dotted key path ("" for the root).
  YamlFields(const YAML::Node& node, std::string path);

  void String(const std::string& key, std::string* out);
  void Int(const std::string& key, int64_t* out, int64_t min, int64_t max);
  void Double(const std::string& key, double* out, double min, double max);
  void Bool(const std::string& key, bool* out);
  void StringList(const std::string& key, std::vector<std::string>* out);
  void IntList(const std::string& key, std::vector<int64_t>* out, int64_t min, int64_t max);
  // A duration written as "30s", "500ms", "2m" or a bare number of seconds.
  void DurationMs(const std::string& key, int64_t* out_ms, int64_t min_ms, int64_t max_ms);
  // Returns the sub-mapping (null if absent); marks the key as known.
  YAML::Node Map(const std::string& key);

  std::string PathOf(const std::string& key) const;
  // OK, or the first error; also reports keys that were never read as unknown.
  absl::Status Finish();

 private:
  YAML::Node Take(const std::string& key);  // null node if absent
  void Fail(const std::string& key, const std::string& what);

  YAML::Node node_;
  std::string path_;
  std::set<std::string> known_;
  absl::Status status_;
};

// Parses a YAML document; a syntax error is INVALID_ARGUMENT "<origin>: not valid YAML: ...", and a key
// given twice in one mapping "<origin>: <path.to.key>: given twice ..." (Note [Duplicate keys]).
absl::StatusOr<YAML::Node> ParseYamlDocument(const std::string& text, const std::string& origin);

// Parses "30s", "250ms", "2m" or "1h" into milliseconds; a number without a unit is refused (it was
// read as seconds, which "drain_timeout: 30" did not say), but for 0.
absl::Status ParseDurationMs(const std::string& text, int64_t* out_ms);

}  // namespace autouvm::base
