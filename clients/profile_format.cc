// Text output for profile summaries; see profile_format.h.
#include "clients/profile_format.h"

#include <iostream>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "clients/status_names.h"
#include "clients/text_output.h"

namespace autouvm::cli {

using autouvm::v1::ProfileSummary;

std::string PhaseName(autouvm::v1::Phase phase) {
  return absl::AsciiStrToLower(EnumShortName(autouvm::v1::Phase_Name(phase), "PHASE_", static_cast<int>(phase)));
}

std::string ProfileStateName(autouvm::v1::ProfileState state) {
  return EnumShortName(autouvm::v1::ProfileState_Name(state), "PROFILE_STATE_", static_cast<int>(state));
}

std::string ProfileOneLine(const ProfileSummary& summary) {
  const auto& key = summary.profile_key();
  std::string line = absl::StrCat(PhaseName(key.phase()), " b", key.batch());
  if (key.phase() != autouvm::v1::PHASE_DECODE) absl::StrAppend(&line, " p", key.prompt_bucket());
  absl::StrAppend(&line, " ", ProfileStateName(summary.state()));
  return line;
}

void PrintProfileTable(const google::protobuf::RepeatedPtrField<ProfileSummary>& profiles) {
  std::vector<std::vector<std::string>> rows = {{"MODEL", "PHASE", "BATCH", "PROMPT", "GPU", "POLICY", "STATE", "OPS",
                                                 "LINK_BOUND", "BYTES/ITER", "PINNED", "KEY"}};
  for (const ProfileSummary& p : profiles) {
    const auto& key = p.profile_key();
    auto stored = [&p](std::string value) { return p.stored() ? value : "-"; };
    rows.push_back({p.model(), PhaseName(key.phase()), absl::StrCat(key.batch()),
                    key.phase() == autouvm::v1::PHASE_DECODE ? "-" : absl::StrCat(key.prompt_bucket()),
                    key.gpu().empty() ? "-" : key.gpu(), key.policy().empty() ? "-" : key.policy(),
                    ProfileStateName(p.state()), stored(absl::StrCat(p.ops())),
                    stored(absl::StrCat(p.link_bound_ops())), stored(HumanBytes(p.bytes_per_iteration())),
                    stored(HumanBytes(p.pinned_bytes())), p.key()});
  }
  PrintTable(rows);
}

void PrintProfileSummary(const ProfileSummary& summary) {
  auto line = [](std::string_view key, const auto& value) { std::cout << key << ": " << value << "\n"; };
  const auto& key = summary.profile_key();
  line("model", summary.model());
  line("key", summary.key());
  line("phase", PhaseName(key.phase()));
  line("batch", key.batch());
  line("prompt_bucket", key.prompt_bucket());
  line("gpu", key.gpu());
  line("device_budget_bytes", key.device_budget_bytes());
  line("policy", key.policy());
  line("model_digest", key.model_digest());
  line("schema_version", key.schema_version());
  line("state", ProfileStateName(summary.state()));
  if (!summary.reason().empty()) line("reason", summary.reason());
  line("stored", summary.stored() ? "true" : "false");
  if (summary.stored()) {
    line("ops", summary.ops());
    line("link_bound_ops", summary.link_bound_ops());
    line("hbm_bound_ops", summary.hbm_bound_ops());
    line("compute_bound_ops", summary.compute_bound_ops());
    line("bytes_per_iteration", summary.bytes_per_iteration());
    line("pinned_bytes", summary.pinned_bytes());
    line("streamed_bytes", summary.streamed_bytes());
    line("remote_bytes", summary.remote_bytes());
    line("iteration_seconds", summary.iteration_seconds());
    line("top20_share", summary.top20_share());
    line("created", IsoTime(summary.created_unix_ms()));
    line("profiling_seconds", summary.profiling_seconds());
  }
  for (const auto& change : summary.history()) {
    std::string text = absl::StrCat(ProfileStateName(change.state()), " ", IsoTime(change.unix_ms()));
    if (!change.reason().empty()) absl::StrAppend(&text, " ", change.reason());
    line("history", text);
  }
  std::cout.flush();
}

}  // namespace autouvm::cli
