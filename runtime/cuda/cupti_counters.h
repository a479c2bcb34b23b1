// CuptiUvmCounters: CUPTI's unified-memory counter records (bytes migrated by direction and cause, GPU
// fault groups, CPU faults, thrashing, throttling, remote maps) summed into UvmCounters.
//
//   ASSIGN_OR_RETURN(auto counters, CuptiUvmCounters::Start());   // after the CUDA context exists
//   ... work ...
//   UvmCounters now = counters->Read();                            // flushes CUPTI's buffers first
//
// CUPTI's activity API is process-wide: one instance at a time (Note [One CUPTI subscriber]). Needs only
// the CUDA toolkit (libcupti), not libtorch.
//
// Thread-safety: Read may be called from any thread; CUPTI delivers buffers on its own thread.
#pragma once

#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "runtime/device_backend.h"

namespace autouvm::runtime::cuda {

class CuptiUvmCounters {
 public:
  // FAILED_PRECONDITION if another instance exists; UNAVAILABLE with CUPTI's message if the counters
  // cannot be enabled (no device, no context, a platform without them).
  static absl::StatusOr<std::unique_ptr<CuptiUvmCounters>> Start(int device);
  ~CuptiUvmCounters();

  UvmCounters Read();

  // Called from CUPTI's buffer-completed callback.
  void Add(const UvmCounters& delta);

 private:
  CuptiUvmCounters() = default;
  std::mutex mu_;
  UvmCounters totals_;  // guarded by mu_
};

}  // namespace autouvm::runtime::cuda
