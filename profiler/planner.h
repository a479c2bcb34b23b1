// Planner: from a recorded iteration, what stays on the device and when the rest is fetched — the Plan
// the executor follows and the residency the profile is classified under.
//
//   std::vector<TensorReuse> reuse = ReuseDistances(trace);
//   autouvm::v1::Plan plan = MakePlan(key, trace, reuse, budget_bytes);
//   Classify(trace, spec, PinnedResidency(plan), &profile);
//
// Policies: `stock` plans nothing (the driver alone decides); `autouvm` pins a fixed partition and
// streams the rest through a window (Note [Pinned partition]); `paper` gets the same plan, which the
// executor (issue 5) follows with the paper's rules.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autouvm/v1/profile.pb.h"
#include "profiler/roofline.h"
#include "runtime/access_trace.h"

namespace autouvm::profiler {

autouvm::v1::Plan MakePlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                           const std::vector<autouvm::v1::TensorReuse>& reuse, int64_t budget_bytes);

// Resident = pinned by the plan, or an activation (made on the device by the op that produces it).
Residency PinnedResidency(const autouvm::v1::Plan& plan);
// An activation ("act:..."): placed anew by the allocator each iteration, so never pinned or streamed;
// the plan leaves room for the most of them alive at once.
bool IsTransient(const std::string& id);

// The most FLOPs per byte of a tensor at which its one reader may read it in place from host memory:
// at bf16, a product with up to 32 rows reads each weight tile once (Note [Remote tensors]).
inline constexpr double kMaxRemoteFlopsPerByte = 32.0;

}  // namespace autouvm::profiler
