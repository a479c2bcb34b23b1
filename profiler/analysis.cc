#include "profiler/analysis.h"

#include "profiler/planner.h"
#include "profiler/reuse.h"
#include "profiler/roofline.h"
#include "runtime/trace_proto.h"

namespace autouvm::profiler {

Analysis Analyze(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace, const runtime::GpuSpec& spec,
                 absl::Time now, double coded_ratio) {
  Analysis a;
  autouvm::v1::Profile& p = a.profile;
  *p.mutable_key() = key;
  *p.mutable_trace() = runtime::ToProto(trace);
  std::vector<autouvm::v1::TensorReuse> reuse = ReuseDistances(trace);
  if (key.policy() == "paper") {
    autouvm::v1::Profile stock;
    Classify(trace, spec, PinnedResidency(runtime::Plan()), &stock);
    a.plan = MakePaperPlan(key, trace, reuse, stock);
  } else {
    a.plan = MakePlan(key, trace, reuse, key.device_budget_bytes(), {.spec = &spec, .coded_ratio = coded_ratio});
  }
  Classify(trace, spec, PinnedResidency(a.plan), &p);
  for (autouvm::v1::TensorReuse& r : reuse) *p.add_tensors() = std::move(r);
  p.set_created_unix_ms(absl::ToUnixMillis(now));
  return a;
}

}  // namespace autouvm::profiler
