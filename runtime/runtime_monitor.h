// RuntimeMonitor: checks the GPU time of each op of sampled iterations (OpTimer) against what the profile
// expects of it under its plan, and says which ops changed class. An op the plan leaves compute- or
// HBM-bound that takes `tolerance` times its roofline time or more now waits on the link — eviction
// pressure moved (another model, the driver) and a tensor the plan pins is no longer on the device: the
// monitor names the pinned tensors it reads, for the executor to bring back (Executor::Repin). An op
// planned link-bound that runs `tolerance` times faster than its link time found its tensors resident —
// unless it reads a tensor the executor streams, whose copy ahead of the op is the plan working (through
// a device buffer, copies run as far ahead as the buffer allows: the H200 runs showed 6-104 such ops
// per 7B or 13B step, bench/results/2026-11-30-device-buffer-h200.md).
// Both are counted; a model whose ops keep changing class is re-profiled by its owner.
//
//   RuntimeMonitor monitor(trace, profile, plan);
//   ASSIGN_OR_RETURN(std::vector<double> seconds, timer.EndIteration());
//   for (const Reclassified& r : monitor.Observe(seconds)) RETURN_IF_ERROR(executor.Repin(r.missing));
//
// Ops shorter than `min_seconds` in both measurement and expectation are not judged: their time is the
// launch and the host's dispatch, not their roof. An op is called link-bound only if it reads pinned
// named tensors and its time could have been spent moving at least half of them over the link: on the
// H200 the GPU time of the first ops of a step — small copies and fills the host issues while the GPU
// waits for it — was 80–240 µs against a planned few µs, and without these two conditions the monitor
// called 5–28 of 1691 ops of a healthy 7B decode step link-bound (bench/results/2026-11-29-offload-h200.md).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autouvm/v1/profile.pb.h"
#include "runtime/access_trace.h"
#include "runtime/gpu_spec.h"
#include "runtime/plan.h"

namespace autouvm::runtime {

struct Reclassified {
  int64_t op = 0;
  autouvm::v1::Bound planned = autouvm::v1::BOUND_UNSPECIFIED;
  autouvm::v1::Bound measured = autouvm::v1::BOUND_UNSPECIFIED;
  double expected_seconds = 0;  // the planned roofline time
  double measured_seconds = 0;
  std::vector<std::string> missing;  // pinned tensors the op reads (now link-bound ops only)
};

class RuntimeMonitor {
 public:
  struct Options {
    double tolerance = 3.0;
    double min_seconds = 50e-6;
  };
  // `profile`: the op classes under `plan` (profiler::Analyze's pair).
  RuntimeMonitor(const AccessTrace& trace, const autouvm::v1::Profile& profile, const Plan& plan, const GpuSpec& spec,
                 Options options);

  // One timed iteration (seconds per op index; shorter vectors judge the ops they cover).
  std::vector<Reclassified> Observe(const std::vector<double>& op_seconds);

  int64_t samples() const { return samples_; }
  int64_t reclassified() const { return reclassified_; }  // ops, summed over samples

 private:
  struct Expected {
    autouvm::v1::Bound bound = autouvm::v1::BOUND_UNSPECIFIED;
    double seconds = 0;        // max of the three roofs
    double local_seconds = 0;  // max(compute, HBM): the op with everything resident
    bool hbm_bound_locally = false;
    std::vector<std::string> pinned_reads;  // named tensors the plan pins
    double pinned_link_seconds = 0;         // their bytes over the link
    bool streamed_reads = false;            // it reads a tensor the executor fetches ahead of it
  };
  const Options options_;
  std::vector<Expected> ops_;
  int64_t samples_ = 0;
  int64_t reclassified_ = 0;
};

}  // namespace autouvm::runtime
