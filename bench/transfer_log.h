// TransferLog: offload_bench's --transfer-times. A DeviceBackend that forwards every call to another and,
// while armed, brackets each transfer it is asked for (a prefetch either way, a discard, a copy into a
// staged range or a device buffer) with timed events on the call's stream and the host's time in the
// call, so that a step's transfers can be laid out afterwards: how long each direction kept its stream
// busy, at what rate, how much of the device-to-host traffic ran while a host-to-device copy was under
// way on the other stream, and how long the host was held issuing them.
//
//   TransferLog log(gpu);
//   policy = BudgetPolicy::Create(name, &log, ...);   // the policy's calls go through the log
//   log.Arm();  step();  cudaDeviceSynchronize();
//   ASSIGN_OR_RETURN(TransferSummary s, log.Summarize());   // disarms, clears
//
// Works over either backend (the simulator's timed events are its clocks). Not thread-safe: one thread
// drives it, as it does the backend beneath.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/device_backend.h"

namespace autouvm::bench {

// Which way a transfer's bytes went: prefetches and staged copies move them, discards drop them.
enum class Direction { kToDevice, kToHost, kNeither };

// One kind of transfer in a step.
struct TransferKind {
  std::string name;  // "to device (copy)", "to host (compute)", ...
  Direction direction = Direction::kNeither;
  int64_t calls = 0;
  int64_t bytes = 0;
  double busy_s = 0;     // the union of its calls' intervals on their stream
  double host_s = 0;     // the host's time inside those calls
  double largest_s = 0;  // its longest call
  double rate() const { return busy_s > 0 ? bytes / busy_s : 0; }
};

struct TransferSummary {
  double span_s = 0;  // from Arm()'s mark on the compute stream to the last event of the step
  std::vector<TransferKind> kinds;
  // Time both a transfer to the host (either stream) and one to the device (either stream) were under way.
  double both_directions_s = 0;
  // Bytes moved in `direction` per second of their streams' busy time (0 if none were).
  double rate(Direction direction) const;
};

class TransferLog final : public runtime::DeviceBackend {
 public:
  explicit TransferLog(runtime::DeviceBackend* inner) : inner_(inner) {}

  // Starts logging, with a mark on the compute stream that the step's times are taken from.
  void Arm();
  // Lays out what was logged since Arm() (the work must have completed: Synchronize first) and stops.
  absl::StatusOr<TransferSummary> Summarize();

  std::string_view kind() const override { return inner_->kind(); }
  const runtime::GpuSpec& spec() const override { return inner_->spec(); }
  absl::StatusOr<uint64_t> AllocateManaged(int64_t bytes) override { return inner_->AllocateManaged(bytes); }
  absl::Status FreeManaged(uint64_t addr) override { return inner_->FreeManaged(addr); }
  absl::Status Prefetch(uint64_t addr, int64_t bytes, runtime::Location to, runtime::Stream stream) override;
  absl::Status Advise(uint64_t addr, int64_t bytes, runtime::Advice advice, bool set,
                      runtime::Location location) override {
    return inner_->Advise(addr, bytes, advice, set, location);
  }
  absl::Status Discard(uint64_t addr, int64_t bytes, runtime::Stream stream) override;
  bool can_stage() const override { return inner_->can_stage(); }
  absl::Status StageOut(uint64_t addr, int64_t bytes) override { return inner_->StageOut(addr, bytes); }
  absl::Status StageIn(uint64_t addr, int64_t bytes, runtime::Stream stream) override;
  absl::Status Unstage(uint64_t addr, int64_t bytes, runtime::Location to) override {
    return inner_->Unstage(addr, bytes, to);
  }
  absl::Status ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged) override {
    return inner_->ForgetHostCopies(addr, bytes, staged);
  }
  int64_t HostCopyBytesWithin(uint64_t addr, int64_t bytes) const override {
    return inner_->HostCopyBytesWithin(addr, bytes);
  }
  bool can_stage_into() const override { return inner_->can_stage_into(); }
  bool stage_into_needs_binding() const override { return inner_->stage_into_needs_binding(); }
  absl::StatusOr<uint64_t> AllocateDevice(int64_t bytes) override { return inner_->AllocateDevice(bytes); }
  absl::Status FreeDevice(uint64_t addr) override { return inner_->FreeDevice(addr); }
  absl::Status StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, runtime::Stream stream) override;
  absl::Status EndStageInto(uint64_t addr, int64_t bytes) override { return inner_->EndStageInto(addr, bytes); }
  absl::Status KeepHostCopy(uint64_t addr, int64_t bytes) override { return inner_->KeepHostCopy(addr, bytes); }
  Staging StagingOf(uint64_t addr) const override { return inner_->StagingOf(addr); }
  absl::StatusOr<int64_t> ResidentBytes(uint64_t addr, int64_t bytes) override {
    return inner_->ResidentBytes(addr, bytes);
  }
  runtime::EventId RecordEvent(runtime::Stream stream) override { return inner_->RecordEvent(stream); }
  void WaitEvent(runtime::Stream stream, runtime::EventId event) override { inner_->WaitEvent(stream, event); }
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  runtime::EventId RecordTimedEvent(runtime::Stream stream) override { return inner_->RecordTimedEvent(stream); }
  absl::StatusOr<double> ElapsedSeconds(runtime::EventId from, runtime::EventId to) override {
    return inner_->ElapsedSeconds(from, to);
  }
  absl::StatusOr<runtime::UvmCounters> ReadCounters() override { return inner_->ReadCounters(); }

 private:
  enum class What { kToDevice, kToHost, kDiscard, kStageIn };
  struct Call {
    What what;
    runtime::Stream stream;
    int64_t bytes;
    runtime::EventId before, after;
    double host_s;
  };
  template <typename Transfer>
  absl::Status Log(What what, runtime::Stream stream, int64_t bytes, Transfer transfer);

  runtime::DeviceBackend* const inner_;
  bool armed_ = false;
  runtime::EventId start_ = -1;
  std::vector<Call> calls_;
};

// The summary as a Markdown table, one row per kind, for `what` (a policy and its step). `host_times`:
// whether the host's time in the calls means anything (not over the simulator, whose calls take the
// time of its own arithmetic).
std::string FormatTransfers(const std::string& what, const TransferSummary& s, bool host_times = true);

// One row per steady step (times[k + 1] with transfers[k]): its time, its transfers' rates and overlap,
// and `simulate`(the step's device-to-host rate), the simulator's step at that rate, beside it.
std::string FormatStepsAtTheirRate(const std::string& policy, const std::vector<double>& times,
                                   const std::vector<TransferSummary>& transfers,
                                   const std::function<double(double to_host_bytes_per_s)>& simulate);

}  // namespace autouvm::bench
