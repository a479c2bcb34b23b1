// Executor: follows a profiler Plan at the op boundaries of an iteration, through a DeviceBackend —
// pinned tensors kept on the device, streamed ones prefetched on the copy stream ahead of the op that
// needs them (the compute stream waits on their events) and evicted after their last use before their
// next fetch, on the compute stream (Note [Evictions on the compute stream]). Weights are marked
// read-mostly, so evicting one drops the device copy without a copy back.
//
//   Executor ex(backend, plan, trace, ranges);       // ranges: where each tensor the plan names lives
//   RETURN_IF_ERROR(ex.Prepare());                    // once: advice, pinned tensors in
//   for each op i: RETURN_IF_ERROR(ex.BeforeOp(i)); launch op i; RETURN_IF_ERROR(ex.AfterOp(i));
//
// Tensors without a range (activations, which the allocator places anew) are left to the driver.
// Not thread-safe: one iteration's thread drives it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "autouvm/v1/profile.pb.h"
#include "runtime/access_trace.h"
#include "runtime/device_backend.h"

namespace autouvm::runtime {

struct TensorRange {
  uint64_t addr = 0;
  int64_t bytes = 0;
};

class Executor {
 public:
  Executor(DeviceBackend* backend, const autouvm::v1::Plan& plan, const AccessTrace& trace,
           std::unordered_map<std::string, TensorRange> ranges);

  absl::Status Prepare();
  absl::Status BeforeOp(int64_t index);
  absl::Status AfterOp(int64_t index);

  int64_t prefetched_bytes() const { return prefetched_bytes_; }
  int64_t evicted_bytes() const { return evicted_bytes_; }

 private:
  struct Fetch {
    std::vector<const TensorRange*> ranges;
    EventId done = 0;
    bool issued = false;
  };
  absl::Status Issue(Fetch& f);

  DeviceBackend* const backend_;
  const int64_t ops_;
  std::unordered_map<std::string, TensorRange> ranges_;
  std::vector<std::string> pinned_;
  std::vector<Fetch> fetches_;
  std::vector<std::vector<size_t>> issue_at_;                 // per op: fetches to issue when it starts
  std::vector<std::vector<size_t>> needed_by_;                // per op: fetches it must wait for
  std::vector<std::vector<const TensorRange*>> evict_after_;  // per op: streamed tensors done with
  int64_t prefetched_bytes_ = 0;
  int64_t evicted_bytes_ = 0;
};

}  // namespace autouvm::runtime
