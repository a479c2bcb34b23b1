// Roofline classification of an access trace: each op's time against three roofs for a GpuSpec —
// compute (FLOPs / peak), HBM (bytes it reads and writes / HBM bandwidth) and link (bytes of it that are
// not resident / link bandwidth) — under a residency (what the plan keeps on the device). The op is
// bound by the largest; the classification and a summary are part of the stored profile.
//
//   autouvm::v1::Profile p;
//   Classify(trace, spec, [&](const std::string& id) { return pinned.count(id) > 0; }, &p);
//
// A pure function; thread-safe.
#pragma once

#include <functional>
#include <string>

#include "autouvm/v1/profile.pb.h"
#include "runtime/access_trace.h"
#include "runtime/gpu_spec.h"

namespace autouvm::profiler {

// Whether the tensor with this id is on the device when the op runs.
using Residency = std::function<bool(const std::string& id)>;

// Fills profile->ops (one per trace op), the bound counts, iteration_seconds (the sum over ops of the
// largest roof plus the kernel launch), top20_share, bytes_per_iteration and resident_bytes. A tensor
// counts once per op; an op's link time counts each non-resident tensor it touches in full (the bytes
// the view reaches), as the first touch in the iteration brings it over.
void Classify(const runtime::AccessTrace& trace, const runtime::GpuSpec& spec, const Residency& resident,
              autouvm::v1::Profile* profile);

}  // namespace autouvm::profiler
