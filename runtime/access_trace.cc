#include "runtime/access_trace.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace autouvm::runtime {
namespace {

std::string Ids(const std::vector<TensorUse>& uses) {
  std::string out;
  for (const auto& u : uses) absl::StrAppend(&out, out.empty() ? "" : ",", u.id);
  return out;
}

std::string Describe(const OpRecord& op) {
  return absl::StrCat(op.kernel, " reads [", Ids(op.reads), "] writes [", Ids(op.writes), "]");
}

}  // namespace

bool IsWeightId(const std::string& id) {
  return absl::StartsWith(id, "param:") && !absl::StartsWith(id, "param:kv_cache");
}

std::vector<std::string> CompareTraces(const AccessTrace& expected, const AccessTrace& actual, size_t limit) {
  std::vector<std::string> out;
  const size_t n = std::max(expected.ops.size(), actual.ops.size());
  for (size_t i = 0; i < n && out.size() < limit; ++i) {
    if (i >= expected.ops.size()) {
      out.push_back(absl::StrCat("op ", i, ": unexpected ", Describe(actual.ops[i])));
    } else if (i >= actual.ops.size()) {
      out.push_back(absl::StrCat("op ", i, ": missing ", Describe(expected.ops[i])));
    } else if (!(expected.ops[i] == actual.ops[i])) {
      out.push_back(
          absl::StrCat("op ", i, ": expected ", Describe(expected.ops[i]), ", got ", Describe(actual.ops[i])));
    }
  }
  if (expected.ops.size() != actual.ops.size() && out.size() < limit) {
    out.push_back(absl::StrCat("expected ", expected.ops.size(), " ops, got ", actual.ops.size()));
  }
  return out;
}

}  // namespace autouvm::runtime
