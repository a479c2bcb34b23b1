// CuptiUvmCounters: CUPTI's unified-memory counter records (bytes migrated by direction and cause, GPU
// fault groups, CPU faults, thrashing, throttling, remote maps) summed into UvmCounters.
//
//   ASSIGN_OR_RETURN(auto counters, CuptiUvmCounters::Start());   // after the CUDA context exists
//   ... work ...
//   UvmCounters now = counters->Read();                            // flushes CUPTI's buffers first
//   UvmCounters delivered = counters->Read(/*flush=*/false);       // as of the last flush
//
// Note [Counters without waiting]: a forced flush (cuptiActivityFlushAll) took 10-20 ms on the H100 and
// the H200, and one at each end of a counter window, with a window closed at every plan switch, cost a
// request ~5 of them on the scheduler's thread (a 7B's prefill and first two decode passes 13-25 ms
// longer each at factor 1.0, bench/results/2026-12-06-counter-flush-h100.md). So a thread of the
// instance's own flushes every kFlushPeriodS, and Read(false) gives what it has delivered: callers per
// pass see the device's counters at most that late, and wait for nothing.
//
// CUPTI's activity API is process-wide: one instance at a time (Note [One CUPTI subscriber]). Needs only
// the CUDA toolkit (libcupti), not libtorch.
//
// Thread-safety: Read may be called from any thread; CUPTI delivers buffers on its own thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "runtime/device_backend.h"

namespace autouvm::runtime::cuda {

class CuptiUvmCounters {
 public:
  // FAILED_PRECONDITION if another instance exists; UNAVAILABLE with CUPTI's message if the counters
  // cannot be enabled (no device, no context, a platform without them).
  static absl::StatusOr<std::unique_ptr<CuptiUvmCounters>> Start(int device);
  ~CuptiUvmCounters();

  static constexpr double kFlushPeriodS = 0.2;
  // flush: waits for CUPTI's buffered records first; else as of the last flush (kFlushPeriodS at most).
  UvmCounters Read(bool flush = true);

  // Called from CUPTI's buffer-completed callback.
  void Add(const UvmCounters& delta);

 private:
  CuptiUvmCounters() = default;
  void FlushEveryPeriod();  // the flusher's loop, until stopping_
  std::mutex mu_;
  UvmCounters totals_;  // guarded by mu_
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by stop_mu_
  std::thread flusher_;
};

}  // namespace autouvm::runtime::cuda
