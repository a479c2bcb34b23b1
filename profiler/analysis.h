// Analyze: turns a recorded AccessTrace into a Profile for a key — the trace itself, each op's roofline
// class under a residency, the summary, and each tensor's reuse — ready for the repository. What the
// profiling job runs on its background thread.
//
//   autouvm::v1::Profile p = Analyze(key, trace, spec, residency, clock.Now());
//
// A pure function; thread-safe.
#pragma once

#include "absl/time/time.h"
#include "autouvm/v1/profile.pb.h"
#include "profiler/roofline.h"
#include "runtime/access_trace.h"
#include "runtime/gpu_spec.h"

namespace autouvm::profiler {

autouvm::v1::Profile Analyze(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                             const runtime::GpuSpec& spec, const Residency& resident, absl::Time now);

}  // namespace autouvm::profiler
