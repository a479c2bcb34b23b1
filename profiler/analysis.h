// Analyze: turns a recorded AccessTrace into a Profile and a Plan for a key — the trace itself, each
// tensor's reuse, the plan for the key's policy and device budget, each op's roofline class under the
// residency that plan implies, and the summary — ready for the repository. What the profiling job runs
// on its background thread.
//
//   Analysis a = Analyze(key, trace, spec, clock.Now());
//   RETURN_IF_ERROR(repository.Put(a.profile, runtime::ToProto(a.plan, key).SerializeAsString()));
//
// A pure function; thread-safe.
#pragma once

#include "absl/time/time.h"
#include "autouvm/v1/profile.pb.h"
#include "runtime/access_trace.h"
#include "runtime/gpu_spec.h"
#include "runtime/plan.h"

namespace autouvm::profiler {

struct Analysis {
  autouvm::v1::Profile profile;
  runtime::Plan plan;
};

// The key's device_budget_bytes is the budget planned for.
// `coded_ratio`: PlanOptions::coded_ratio (runtime.compress_streamed).
Analysis Analyze(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace, const runtime::GpuSpec& spec,
                 absl::Time now, double coded_ratio = 0);

}  // namespace autouvm::profiler
