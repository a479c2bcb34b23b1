// SerializedBackend: a DeviceBackend that several threads may drive at once — every call goes to the
// backend it wraps under one lock. The daemon's CUDA backend is the process's one (CUPTI allows one
// subscriber), and each model's session drives it from the model's own scheduler thread, so models
// that follow their plans at once (profiler/model_session.h) take turns call by call.
//
//   auto shared = std::make_unique<SerializedBackend>(std::move(cuda_backend));
//
// Note [Calls that wait]: Synchronize and ElapsedSeconds hold the lock while they wait for the GPU, so
// another model's calls wait for them too; the runtime monitor times one iteration in 64 and the
// executor synchronizes only at plan switches.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/device_backend.h"

namespace autouvm::runtime {

class SerializedBackend final : public DeviceBackend {
 public:
  explicit SerializedBackend(std::unique_ptr<DeviceBackend> backend) : backend_(std::move(backend)) {}

  DeviceBackend* wrapped() const { return backend_.get(); }

  std::string_view kind() const override { return backend_->kind(); }  // immutable
  const GpuSpec& spec() const override { return backend_->spec(); }    // immutable
  absl::StatusOr<uint64_t> AllocateManaged(int64_t bytes) override;
  absl::Status FreeManaged(uint64_t addr) override;
  absl::Status Prefetch(uint64_t addr, int64_t bytes, Location to, Stream stream) override;
  absl::Status Advise(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location) override;
  absl::Status Discard(uint64_t addr, int64_t bytes, Stream stream) override;
  bool can_stage() const override { return backend_->can_stage(); }  // immutable
  absl::Status StageOut(uint64_t addr, int64_t bytes) override;
  absl::Status StageIn(uint64_t addr, int64_t bytes, Stream stream) override;
  absl::Status Unstage(uint64_t addr, int64_t bytes, Location to) override;
  absl::Status ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged) override;
  int64_t HostCopyBytesWithin(uint64_t addr, int64_t bytes) const override;
  bool can_stage_into() const override { return backend_->can_stage_into(); }                      // immutable
  bool stage_into_needs_binding() const override { return backend_->stage_into_needs_binding(); }  // immutable
  absl::StatusOr<uint64_t> AllocateDevice(int64_t bytes) override;
  absl::Status FreeDevice(uint64_t addr) override;
  absl::Status StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, Stream stream) override;
  absl::Status EndStageInto(uint64_t addr, int64_t bytes) override;
  absl::Status KeepHostCopy(uint64_t addr, int64_t bytes) override;
  Staging StagingOf(uint64_t addr) const override;
  std::optional<int64_t> CodedBytes(uint64_t addr) override;
  absl::StatusOr<int64_t> ResidentBytes(uint64_t addr, int64_t bytes) override;
  EventId RecordEvent(Stream stream) override;
  void WaitEvent(Stream stream, EventId event) override;
  absl::Status Synchronize() override;
  EventId RecordTimedEvent(Stream stream) override;
  absl::StatusOr<double> ElapsedSeconds(EventId from, EventId to) override;
  absl::StatusOr<UvmCounters> ReadCounters() override;
  absl::StatusOr<UvmCounters> DeliveredCounters() override;
  double counter_lag_s() const override { return backend_->counter_lag_s(); }  // immutable
  absl::Status BeginCapture(void* stream) override;
  void EndCapture() override;
  StagingTally StagingSoFar() override;
  void CountReplayedStaging(const StagingTally& pass) override;
  uint64_t StagingEpoch() override;

 private:
  const std::unique_ptr<DeviceBackend> backend_;
  mutable absl::Mutex mu_;  // held for every call into backend_ but the immutable accessors
};

}  // namespace autouvm::runtime
