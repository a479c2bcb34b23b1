#include "base/yaml_fields.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace autouvm::base {
namespace {

// A key that is missing, or present with no value (`key:` or `key: ~`), keeps its default.
bool Absent(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

}  // namespace

YamlFields::YamlFields(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat(path_.empty() ? "document" : path_, ": expected a mapping of keys to values"));
  }
}

std::string YamlFields::PathOf(const std::string& key) const {
  return path_.empty() ? key : absl::StrCat(path_, ".", key);
}

void YamlFields::Fail(const std::string& key, const std::string& what) {
  if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(PathOf(key), ": ", what));
}

YAML::Node YamlFields::Take(const std::string& key) {
  known_.insert(key);
  if (!status_.ok() || !node_ || !node_.IsMap()) return YAML::Node();
  // Const lookup: yaml-cpp's non-const operator[] would insert the key into the document.
  const YAML::Node& map = node_;
  YAML::Node child = map[key];
  if (!child || child.IsNull()) return YAML::Node();
  return child;
}

void YamlFields::String(const std::string& key, std::string* out) {
  YAML::Node n = Take(key);
  if (Absent(n)) return;
  if (!n.IsScalar()) return Fail(key, "expected a string");
  *out = n.Scalar();
}

void YamlFields::Int(const std::string& key, int64_t* out, int64_t min, int64_t max) {
  YAML::Node n = Take(key);
  if (Absent(n)) return;
  int64_t v = 0;
  if (!n.IsScalar() || !absl::SimpleAtoi(n.Scalar(), &v)) return Fail(key, "expected an integer");
  if (v < min || v > max) {
    return Fail(key, absl::StrCat("value ", v, " is outside [", min, ", ", max, "]"));
  }
  *out = v;
}

void YamlFields::Double(const std::string& key, double* out, double min, double max) {
  YAML::Node n = Take(key);
  if (Absent(n)) return;
  double v = 0;
  if (!n.IsScalar() || !absl::SimpleAtod(n.Scalar(), &v) || !std::isfinite(v)) {
    return Fail(key, "expected a number");
  }
  if (v < min || v > max) {
    return Fail(key, absl::StrCat("value ", v, " is outside [", min, ", ", max, "]"));
  }
  *out = v;
}

void YamlFields::Bool(const std::string& key, bool* out) {
  YAML::Node n = Take(key);
  if (Absent(n)) return;
  const std::string& s = n.IsScalar() ? n.Scalar() : std::string();
  if (s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    Fail(key, "expected true or false");
  }
}

void YamlFields::StringList(const std::string& key, std::vector<std::string>* out) {
  YAML::Node n = Take(key);
  if (Absent(n)) return;
  if (!n.IsSequence()) return Fail(key, "expected a list of strings");
  out->clear();
  for (const auto& item : n) {
    if (!item.IsScalar()) return Fail(key, "expected a list of strings");
    out->push_back(item.Scalar());
  }
}

void YamlFields::IntList(const std::string& key, std::vector<int64_t>* out, int64_t min, int64_t max) {
  YAML::Node n = Take(key);
  if (Absent(n)) return;
  if (!n.IsSequence()) return Fail(key, "expected a list of integers");
  std::vector<int64_t> values;
  for (const auto& item : n) {
    int64_t v = 0;
    if (!item.IsScalar() || !absl::SimpleAtoi(item.Scalar(), &v)) return Fail(key, "expected a list of integers");
    if (v < min || v > max) return Fail(key, absl::StrCat("value ", v, " is outside [", min, ", ", max, "]"));
    values.push_back(v);
  }
  *out = std::move(values);
}

void YamlFields::DurationMs(const std::string& key, int64_t* out_ms, int64_t min_ms, int64_t max_ms) {
  YAML::Node n = Take(key);
  if (Absent(n)) return;
  int64_t ms = 0;
  if (!n.IsScalar()) return Fail(key, "expected a duration such as 30s, 500ms or 2m");
  if (absl::Status s = ParseDurationMs(n.Scalar(), &ms); !s.ok()) {
    return Fail(key, absl::StrCat(s.message(), ": expected a duration such as 30s, 500ms or 2m"));
  }
  if (ms < min_ms || ms > max_ms) {
    return Fail(key, absl::StrCat("duration ", ms, "ms is outside [", min_ms, "ms, ", max_ms, "ms]"));
  }
  *out_ms = ms;
}

YAML::Node YamlFields::Map(const std::string& key) {
  YAML::Node n = Take(key);
  if (!Absent(n) && !n.IsMap()) {
    Fail(key, "expected a mapping of keys to values");
    return YAML::Node();
  }
  return n;
}

absl::Status YamlFields::Finish() {
  if (!status_.ok()) return status_;
  if (node_ && node_.IsMap()) {
    for (const auto& kv : node_) {
      // YAML allows any node as a key ("? [a, b]"); ours are names (found by tests/fuzz/config_fuzzer).
      if (!kv.first.IsScalar()) {
        return absl::InvalidArgumentError(absl::StrCat(PathOf("?"), ": a key that is not a plain name"));
      }
      const std::string key = kv.first.Scalar();
      if (!known_.count(key)) return absl::InvalidArgumentError(absl::StrCat(PathOf(key), ": unknown key"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Note [Duplicate keys]: YAML says a mapping's keys are unique, but yaml-cpp keeps both entries of a
// key given twice and a lookup finds the first, so the second one (usually the edit meant to take
// effect) was ignored without a word. Every mapping of a document is checked once, as it is parsed.
std::string FirstDuplicateKey(const YAML::Node& node, const std::string& path, int depth) {
  if (depth > 64) return "";  // deeper than any file of ours; yaml-cpp has parsed it already
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      std::string dup = FirstDuplicateKey(node[i], absl::StrCat(path, "[", i, "]"), depth + 1);
      if (!dup.empty()) return dup;
    }
    return "";
  }
  if (!node.IsMap()) return "";
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;  // refused by YamlFields::Finish, naming it
    const std::string key = kv.first.Scalar();
    const std::string at = path.empty() ? key : absl::StrCat(path, ".", key);
    if (!seen.insert(key).second) return at;
    std::string dup = FirstDuplicateKey(kv.second, at, depth + 1);
    if (!dup.empty()) return dup;
  }
  return "";
}

}  // namespace

absl::StatusOr<YAML::Node> ParseYamlDocument(const std::string& text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": not valid YAML: ", e.what()));
  }
  if (std::string dup = FirstDuplicateKey(root, "", 0); !dup.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": ", dup, ": given twice (a key may appear once in its mapping)"));
  }
  return root;
}

absl::Status ParseDurationMs(const std::string& text, int64_t* out_ms) {
  absl::string_view s = text;
  double scale = 0;  // no unit: only 0 means the same in every unit
  if (absl::ConsumeSuffix(&s, "ms")) {
    scale = 1.0;
  } else if (absl::ConsumeSuffix(&s, "s")) {
    scale = 1000.0;
  } else if (absl::ConsumeSuffix(&s, "m")) {
    scale = 60000.0;
  } else if (absl::ConsumeSuffix(&s, "h")) {
    scale = 3600000.0;
  }
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat("not a duration: '", text, "'"));
  }
  if (scale == 0 && v != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no unit (ms, s, m or h)"));
  }
  *out_ms = static_cast<int64_t>(std::llround(v * scale));
  return absl::OkStatus();
}

}  // namespace autouvm::base
