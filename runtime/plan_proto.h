// Plan <-> its protobuf form (autouvm.v1.Plan, proto/autouvm/v1/profile.proto): what the profile store
// keeps and the Admin API returns. The message carries the ProfileKey it was made for; the Plan does
// not (its owner knows the key).
// Pure functions; safe from any thread.
#pragma once

#include "absl/status/statusor.h"
#include "autouvm/v1/profile.pb.h"
#include "runtime/plan.h"

namespace autouvm::runtime {

autouvm::v1::Plan ToProto(const Plan& plan, const autouvm::v1::ProfileKey& key);
// INVALID_ARGUMENT naming the field for a message no planner makes: negative bytes or op indices, an
// empty tensor id, a fetch of nothing, a device buffer without staging.
absl::StatusOr<Plan> FromProto(const autouvm::v1::Plan& proto);

}  // namespace autouvm::runtime
