// Text output for autouvm.v1.ProfileSummary, shared by `profiles`, `reprofile` and `status`.
//
// Usage: PrintProfileTable(response.profiles()) for a listing; PrintProfileSummary(summary) for `key:
// value` lines (docs/cli.md lists them). Phases print as the CLI takes them ("prefill", "decode"); states
// without their prefix ("READY"). Thread-safety: the Print functions write std::cout (call from one
// thread); the rest are pure functions.
#pragma once

#include <string>

#include "autouvm/v1/admin.pb.h"

namespace autouvm::cli {

// "prefill", "decode", "unspecified", or the number of a value this build does not know.
std::string PhaseName(autouvm::v1::Phase phase);
// "READY", "STALE", ...
std::string ProfileStateName(autouvm::v1::ProfileState state);

// "decode b4 READY", "prefill b1 p128 RECORDING": the shape and state in one field.
std::string ProfileOneLine(const autouvm::v1::ProfileSummary& summary);

// A table with a header row: MODEL PHASE BATCH PROMPT GPU POLICY STATE OPS LINK_BOUND BYTES/ITER PINNED
// KEY. Values that come from a stored profile are "-" for a key with none stored.
void PrintProfileTable(const google::protobuf::RepeatedPtrField<autouvm::v1::ProfileSummary>& profiles);

// One `key: value` line per field, then one `history: <state> <iso time> <reason>` line per change.
void PrintProfileSummary(const autouvm::v1::ProfileSummary& summary);

}  // namespace autouvm::cli
