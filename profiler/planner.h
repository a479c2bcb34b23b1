// Planner: from a recorded iteration, what stays on the device and when the rest is fetched — the Plan
// the executor follows and the residency the profile is classified under.
//
//   std::vector<TensorReuse> reuse = ReuseDistances(trace);
//   runtime::Plan plan = MakePlan(key, trace, reuse, budget_bytes, {.spec = &spec});
//   Classify(trace, spec, PinnedResidency(plan), &profile);
//
// Policies: `stock` plans nothing (the driver alone decides); `autouvm` pins a fixed partition, reads
// in place what it can and streams the rest through a window (Note [Pinned partition]); `paper` is
// AutoUVM as published (MakePaperPlan, Note [The paper's plan]), which knows no budget and leaves
// eviction to the driver.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autouvm/v1/profile.pb.h"
#include "profiler/roofline.h"
#include "runtime/access_trace.h"
#include "runtime/gpu_spec.h"
#include "runtime/plan.h"

namespace autouvm::profiler {

struct PlanOptions {
  // The GPU planned for. Where it can stage weights (uvm.staged_copy_bytes_per_s > 0), streamed weights
  // are staged (Plan.staged), and the planner also makes the plan that streams every unpinned weight
  // instead of reading some in place, keeping whichever the simulator's replay of the step on this spec
  // finds faster (Note [Staged or in place], planner.cc). Null: no staging.
  const runtime::GpuSpec* spec = nullptr;
  // Note [Coded host copies] (runtime/cuda/cuda_backend_coded.cc): staged weights cross the link as this
  // fraction of their bytes and are decoded on the GPU at spec->decode_bytes_per_s (runtime.compress_streamed);
  // 0, or a spec with no decoder rate: plain. A weight the trace has a measured coded size for is charged
  // that instead (Note [Coded sizes in the trace], runtime/access_trace.cc). The simulator's replay, which
  // chooses between plans, charges it (runtime/sim/sim_backend.h).
  double coded_ratio = 0;
};

runtime::Plan MakePlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                       const std::vector<autouvm::v1::TensorReuse>& reuse, int64_t budget_bytes,
                       const PlanOptions& options = {});

// The most activation bytes alive at once in the iteration: what a plan sets aside from its budget
// before placing the persistent tensors.
int64_t PeakActivationBytes(const runtime::AccessTrace& trace, const std::vector<autouvm::v1::TensorReuse>& reuse);

// A steady iteration's time under `plan` on `spec`, as the planner weighs plans: the ops' own time (each
// the most of its host launch, FLOPs and HBM bytes) plus remote reads at the remote rate, which hold
// their op; staged copies run on the copy stream beside that, populated and discarded per block.
// With `coded_ratio` (PlanOptions), a staged plan's copies through its device buffer cross as that
// fraction of their bytes (a weight with a coded size in the trace as that), the last one's decode after them.
double EstimateStepSeconds(const runtime::Plan& plan, const runtime::AccessTrace& trace, const runtime::GpuSpec& spec,
                           double coded_ratio = 0);

// AutoUVM as published, and the steps of its ablation.
struct PaperOptions {
  bool affinity_pinning = true;  // tensors reused within affinity_window_ops: preferred location device
  bool roofline_gate = true;     // prefetch only for the ops the roofline says are link-bound
  int64_t affinity_window_ops = 64;
};

// `stock_classes`: the trace classified with no persistent tensor resident (PinnedResidency of an empty
// plan): which ops are link-bound, and each op's times for the look-ahead.
runtime::Plan MakePaperPlan(const autouvm::v1::ProfileKey& key, const runtime::AccessTrace& trace,
                            const std::vector<autouvm::v1::TensorReuse>& reuse,
                            const autouvm::v1::Profile& stock_classes, const PaperOptions& options = {});

// Resident = pinned (or, in a paper plan, advised to stay) by the plan, or an activation (made on the device by the op
// that produces it).
Residency PinnedResidency(const runtime::Plan& plan);
// An activation ("act:..."): placed anew by the allocator each iteration, so never pinned or streamed;
// the plan leaves room for the most of them alive at once.
bool IsTransient(const std::string& id);

// runtime/plan.h: the most FLOPs per byte at which a tensor's one reader may read it in place.
using runtime::kMaxRemoteFlopsPerByte;

}  // namespace autouvm::profiler
