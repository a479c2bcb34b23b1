// ReplayTrace: runs the iterations an AccessTrace describes on a SimBackend — every op a kernel over the
// tensors it reads and writes — under a policy, a GpuSpec and a device capacity, and reports what each
// iteration cost and moved. What autouvm-sim prints, and what the profiler will use to cost plans.
//
//   ASSIGN_OR_RETURN(ReplayReport r, ReplayTrace(trace, spec, {.oversubscription = 1.5}));
//
// Memory layout (Note [Replay layout]): tensors are placed as PyTorch's caching allocator would place
// them — named tensors (weights, caches) first, in the order they were named; tensors under 1 MiB packed
// into 2 MiB segments; larger ones in segments of their own rounded to 2 MiB; an activation allocated
// when it is produced and its block freed after its last use in the iteration, for a later tensor of
// the same rounded size to reuse (the next iteration's activations land where this one's did).
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/access_trace.h"
#include "runtime/device_backend.h"
#include "runtime/gpu_spec.h"
#include "runtime/plan.h"
#include "runtime/sim/sim_backend.h"

namespace autouvm::runtime::sim {

struct ReplayOptions {
  // `stock`: no hints, the driver alone. `paper`, `autouvm`: the Executor follows the plan make_plan
  // returns for the capacity the replay runs with (runtime/executor.h; a paper plan leaves eviction to
  // the simulated driver).
  std::string policy = "stock";
  std::function<Plan(int64_t device_bytes)> make_plan;
  // Device capacity for managed memory: footprint / oversubscription, unless device_bytes is set.
  double oversubscription = 1.0;
  int64_t device_bytes = 0;
  int iterations = 3;  // the first starts with everything on the host
  // Staged weights cross coded (SimOptions::coded_ratio; the spec's decode_bytes_per_s must be set): those
  // the trace has coded sizes for as those (Note [Coded sizes in the trace]), the others at this ratio.
  double coded_ratio = 0;
  // Not 0: the driver's eviction is emulated at op boundaries for the persistent tensors under this
  // budget (runtime::DriverEviction, as bench/offload_bench does on the real GPU, whose card is never
  // oversubscribed), on a simulated device with room for everything, instead of the simulated driver
  // evicting page by page. For `stock` and `paper`, to predict what the GPU benchmark measures; ignored
  // for `autouvm`, which evicts by itself.
  int64_t emulated_eviction_budget = 0;
  // For a benchmark that times the policy's transfers (bench/transfer_log.h): given the simulator, the
  // backend the policy (executor, emulated driver) is to call instead — one that forwards to it; and
  // calls before each iteration of the policy's run (0-based) and after it (its work done), while the
  // simulator lives. Any may be empty.
  std::function<DeviceBackend*(DeviceBackend* sim)> through;
  std::function<void(int iteration)> before_iteration;
  std::function<void(int iteration)> after_iteration;
};

struct IterationReport {
  double seconds = 0;
  double fault_seconds = 0;  // kernels stalled on faults and the evictions they forced
  UvmCounters moved;         // counters of this iteration alone
};

struct ReplayReport {
  int64_t footprint_bytes = 0;  // all segments the iteration needs: weights, caches, activations
  int64_t device_bytes = 0;     // the capacity it ran with
  int64_t ops = 0;
  double resident_seconds = 0;    // everything on the device: max(host issue, roofline + launches)
  double link_floor_seconds = 0;  // max(resident, (footprint - capacity) / link): ARCHITECTURE.md
  std::vector<IterationReport> iterations;
  std::vector<double> op_seconds;  // each op's simulated time in the last iteration, stalls included
};

// The kernel op launches on the simulator: what it reads and writes, at where[id] + the use's offset,
// with the fault entries per page its kind of kernel raises (Note [Fault entries per kernel]). Uses of
// tensors `where` does not place are left out (device buffers, outside managed memory).
SimKernel TraceKernel(const OpRecord& op, const std::unordered_map<std::string, uint64_t>& where);

// Policies ReplayTrace knows.
const std::vector<std::string>& ReplayPolicies();

// INVALID_ARGUMENT for an empty trace, an unknown policy, or a capacity or iteration count out of range.
absl::StatusOr<ReplayReport> ReplayTrace(const AccessTrace& trace, const GpuSpec& spec, const ReplayOptions& options);

}  // namespace autouvm::runtime::sim
