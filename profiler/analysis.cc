#include "profiler/analysis.h"

#include "profiler/reuse.h"
#include "runtime/trace_proto.h"

namespace autouvm::profiler {

autouvm::v1::Profile Analyze(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                             const runtime::GpuSpec& spec, const Residency& resident, absl::Time now) {
  autouvm::v1::Profile p;
  *p.mutable_key() = key;
  *p.mutable_trace() = runtime::ToProto(trace);
  Classify(trace, spec, resident, &p);
  for (autouvm::v1::TensorReuse& r : ReuseDistances(trace)) *p.add_tensors() = std::move(r);
  p.set_created_unix_ms(absl::ToUnixMillis(now));
  return p;
}

}  // namespace autouvm::profiler
