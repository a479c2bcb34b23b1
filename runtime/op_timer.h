// OpTimer: the GPU time of each op of sampled iterations — the runtime monitor's clock. At each op
// boundary of a sampled iteration it records a timed event on the compute stream; op i's time is then
// the GPU time from its mark to the next op's (the iteration's end mark for the last op): from the
// moment the compute stream could start op i until it could start op i + 1, so waits for copies and
// time the GPU spent idle behind the launching thread count to the op they delayed. With Span::kOwn it
// ends at a mark recorded once the op's launch has returned instead (see Span).
//
//   OpTimer timer(backend, /*every=*/16);   // one iteration in 16 is timed
//   observer->AddSubscriber(&timer);
//   timer.BeginIteration(); observer->BeginIteration(IterationMode::kObserve); forward(); observer->EndIteration();
//   ASSIGN_OR_RETURN(std::vector<double> seconds, timer.EndIteration());   // empty if not sampled
//
// Not thread-safe: the iteration's thread drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/access_trace.h"
#include "runtime/device_backend.h"
#include "runtime/observer.h"

namespace autouvm::runtime {

class OpTimer final : public OpSubscriber {
 public:
  // What an op's time spans. kUntilNextOp: from its mark to the next op's, so that the stream's whole
  // time is shared out (the benchmarks' split of a step). kOwn: from its mark to one recorded when its
  // launch has returned (OnOp), so that neither the GPU's idle time while the host prepares the next op
  // nor what other subscribers queue after the op counts to it — the runtime monitor's clock: with
  // kUntilNextOp an op after which the host pauses (the step's last op, before the token goes back)
  // measures the pause, and ops were called link-bound with every tensor on the device (the 7B within
  // its budget on the H200: 10 ops in 4 samples, 528 MiB re-pinned for nothing, timed with kUntilNextOp).
  enum class Span { kUntilNextOp, kOwn };
  // Times the first iteration and then one in `every` (>= 1), but none sooner than `min_interval_seconds`
  // after the last timed one by `now` (seconds; default: a steady clock): a timed iteration runs op by op,
  // eagerly, several times a plain step's time (Note [Monitoring followed iterations], profiler/model_execution.h).
  OpTimer(DeviceBackend* backend, int64_t every, Span span = Span::kUntilNextOp, double min_interval_seconds = 0,
          std::function<double()> now = nullptr);

  void BeginIteration();
  // The next iteration is due, as if `every` had passed since the last timed one (a new plan to check); the
  // interval still holds: if it has not passed, the first iteration after it is timed.
  void TimeNextWhenDue() { since_sampled_ = every_ - 1; }
  // Whether the iteration BeginIteration() started is one of the sampled ones.
  bool timing() const { return timing_; }
  void BeforeOp(int64_t index) override;
  void OnOp(const OpEvent& op) override;
  // Per op index, the seconds measured (0 for an index the iteration did not reach); empty when the
  // iteration was not sampled. Waits for the iteration's work to finish on the GPU.
  absl::StatusOr<std::vector<double>> EndIteration();

  int64_t iterations() const { return iterations_; }
  int64_t sampled() const { return sampled_; }

 private:
  struct Mark {
    int64_t op = 0;
    EventId before = -1;
    EventId after = -1;  // kOwn: recorded at OnOp
  };
  DeviceBackend* const backend_;
  const int64_t every_;
  const Span span_;
  const double min_interval_seconds_;
  const std::function<double()> now_;
  int64_t iterations_ = 0;
  int64_t since_sampled_ = 0;  // iterations begun since the last timed one
  double last_sampled_at_ = 0;
  int64_t sampled_ = 0;
  bool timing_ = false;
  std::vector<Mark> marks_;  // in order
};

// Where an iteration's GPU time went, by what its ops read: ops reading a tensor the plan leaves remote,
// ops waiting for nothing the plan moves (everything else). From one timed iteration and its trace.
struct TimeSplit {
  double total_s = 0;
  double remote_ops_s = 0;        // ops that read at least one remote tensor
  int64_t remote_read_bytes = 0;  // what those ops read of remote tensors
  double other_ops_s = 0;
  // The remote ops' read rate (bytes / seconds), 0 if none ran.
  double remote_bytes_per_second() const { return remote_ops_s > 0 ? remote_read_bytes / remote_ops_s : 0; }
};
TimeSplit SplitTime(const AccessTrace& trace, const std::vector<double>& op_seconds,
                    const std::vector<std::string>& remote_ids);

}  // namespace autouvm::runtime
