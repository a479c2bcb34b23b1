// SimBackend: the DeviceBackend of CI and of the CPU default. Tensors are computed for real by libtorch
// on the CPU elsewhere; this backend keeps the state the GPU and its UVM driver would have (UvmModel) and
// charges the time each kernel, fault, prefetch and eviction would take on a GpuSpec, on two stream
// clocks (compute and copy) joined by events.
//
//   ASSIGN_OR_RETURN(auto sim, SimBackend::Create({.spec = *FindGpuSpec("h200-pcie5")}));
//   ASSIGN_OR_RETURN(uint64_t w, sim->AllocateManaged(128 << 20));
//   sim->Launch({.name = "gemv", .ranges = {{w, 128 << 20}}, .flops = 2.0 * 8192 * 8192});
//   double seconds = sim->Elapsed();
//
// Note [The cost model] — what each action costs (the figures are the GpuSpec's, runtime/gpu_spec.cc):
// - A kernel waits for the pages it touches that a prefetch still has in flight, then its faults are
//   serviced (it stalls meanwhile): per batch of up to 256 entries, per entry, per page migrated (its
//   copy at the link rate plus a fixed part), per VA block serviced; evictions it forces copy pages back
//   at the device→host cost or drop them. Then it computes for its roofline time, max(FLOPs / peak,
//   local bytes / HBM + remote bytes / zero-copy bandwidth), plus the launch cost.
// - A prefetch costs its call, plus per block moved to the device a fixed part and the copy at the link
//   rate; pages moved to the host cost the device→host cost per page.
// - Dropping a device copy (read-mostly collapse to the host, eviction of a duplicate) costs the
//   measured drop cost per block; a discard its own (discard_block_s) where the spec has one, which a
//   copy in flight on the other stream loses as well.
// - Bringing a staged range in costs, on its stream, the populate cost per block and the copy at the
//   staged copy rate; its pages count as on the device from then (StageIn).
// Streams do not contend for the link (a fault-driven kernel and a prefetch never overlap in the
// policies measured). Managed allocations are 2 MiB aligned in the simulated address space.
//
// Thread-safety: none; one thread drives a SimBackend.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/device_backend.h"
#include "runtime/sim/uvm_model.h"

namespace autouvm::runtime::sim {

struct SimOptions {
  GpuSpec spec;
  int64_t device_budget_bytes = 0;      // managed memory the device holds; 0: the spec's memory
  bool allow_oversubscription = false;  // may allocations exceed the budget?
  // Note [Coded host copies] (runtime/cuda/cuda_backend_coded.cc), as the simulator models it: 0, staged
  // copies cross plain; else host copies of at least coded_min_bytes cross StageInto's link as this
  // fraction of their bytes, and are then decoded at spec.decode_bytes_per_s (which must be set) on a
  // decode lane of their own beside the copies; a kernel reading one waits for its decode.
  double coded_ratio = 0;
  int64_t coded_min_bytes = int64_t{4} << 20;
};

struct SimKernel {
  std::string name;
  std::vector<GpuRange> ranges;  // what it reads and writes; ranges outside managed memory are device buffers
  double flops = 0;
  bool matrix = false;  // a matrix product: its remote reads run at uvm.remote_matrix_bytes_per_s
};

// What one kernel cost, for reports.
struct KernelTime {
  double start_s = 0;
  double wait_s = 0;   // waiting for prefetches in flight
  double fault_s = 0;  // fault servicing, evictions included
  double compute_s = 0;
  double end_s = 0;
};

class SimBackend final : public DeviceBackend {
 public:
  // Events are held for the last kEventRing recorded (Note [Events in a ring]).
  static constexpr int64_t kEventRing = int64_t{1} << 16;
  static absl::StatusOr<std::unique_ptr<SimBackend>> Create(SimOptions options);

  std::string_view kind() const override { return "sim"; }
  const GpuSpec& spec() const override { return options_.spec; }
  absl::StatusOr<uint64_t> AllocateManaged(int64_t bytes) override;
  absl::Status FreeManaged(uint64_t addr) override;
  absl::Status Prefetch(uint64_t addr, int64_t bytes, Location to, Stream stream) override;
  absl::Status Advise(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location) override;
  absl::Status Discard(uint64_t addr, int64_t bytes, Stream stream) override;
  absl::StatusOr<int64_t> ResidentBytes(uint64_t addr, int64_t bytes) override;
  EventId RecordEvent(Stream stream) override;
  void WaitEvent(Stream stream, EventId event) override;
  absl::Status Synchronize() override;
  EventId RecordTimedEvent(Stream stream) override { return RecordEvent(stream); }
  absl::StatusOr<double> ElapsedSeconds(EventId from, EventId to) override;
  absl::StatusOr<UvmCounters> ReadCounters() override;
  // The same figures (the simulator delivers at once), not counted in exact_counter_reads().
  absl::StatusOr<UvmCounters> DeliveredCounters() override;
  // ReadCounters calls: each one a forced CUPTI flush on CUDA (Note [Counters without waiting]).
  int64_t exact_counter_reads() const { return exact_counter_reads_; }
  // Synchronize() calls so far: the host waited for both streams (on CUDA, for every model's work).
  int64_t synchronizations() const { return synchronizations_; }
  // Staging (Note [Staged streaming] in device_backend.h) where the spec has a staged copy rate.
  bool can_stage() const override { return options_.spec.uvm.staged_copy_bytes_per_s > 0; }
  absl::Status StageOut(uint64_t addr, int64_t bytes) override;
  absl::Status StageIn(uint64_t addr, int64_t bytes, Stream stream) override;
  // Unstage with `to` kDevice is a StageIn on the copy stream after what both streams have queued (the
  // compute stream's kernels wait for it); host copies kept for reuse are counted, not timed.
  absl::Status Unstage(uint64_t addr, int64_t bytes, Location to) override;
  absl::Status ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged) override;
  int64_t HostCopyBytesWithin(uint64_t addr, int64_t bytes) const override;
  // Bytes StageOut and KeepHostCopy have copied to the host (not reusing a copy kept for reuse).
  int64_t host_copies_filled_bytes() const { return host_copies_filled_bytes_; }
  // Bytes Unstage put back into managed memory on the host (on CUDA a synchronous copy, ~2 GB/s).
  int64_t put_back_bytes() const { return put_back_bytes_; }
  // Device buffers (Note [Streaming through a device buffer]): addresses of their own that take no room
  // in the UVM model; StageInto puts the staged range's pages on the device for the kernels that read
  // it (they stand for the buffer the real model would be bound to) after a copy at the link's rate,
  // with nothing to populate, and EndStageInto drops them at no cost.
  bool can_stage_into() const override { return can_stage(); }
  bool stage_into_needs_binding() const override { return false; }
  absl::StatusOr<uint64_t> AllocateDevice(int64_t bytes) override;
  absl::Status FreeDevice(uint64_t addr) override;
  absl::Status StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, Stream stream) override;
  absl::Status EndStageInto(uint64_t addr, int64_t bytes) override;
  absl::Status KeepHostCopy(uint64_t addr, int64_t bytes) override;
  Staging StagingOf(uint64_t addr) const override {
    return staged_.count(addr) ? Staging::kDiscarded : kept_.count(addr) ? Staging::kKept : Staging::kNone;
  }
  // With a coded ratio: a host copy of at least coded_min_bytes crosses as SetCodedBytes said, else as
  // coded_ratio of its bytes; below that size, its bytes.
  std::optional<int64_t> CodedBytes(uint64_t addr) override;
  // What the range at `addr` codes to, as the real coder measured it (a trace's coded_bytes, replayed):
  // its host copy then crosses as that many bytes, or plain, not decoded, where that is not fewer than its
  // own. Only with a coded ratio (SimOptions::coded_ratio).
  // A changed size changes StagingEpoch, as a copy the real coder finishes does.
  void SetCodedBytes(uint64_t addr, int64_t coded) {
    auto [it, added] = measured_coded_.try_emplace(addr, coded);
    if (added || it->second != coded) ++staging_epoch_;
    it->second = coded;
  }
  StagingTally StagingSoFar() override { return {staged_in_bytes_, coded_bytes_, decoded_bytes_}; }
  void CountReplayedStaging(const StagingTally& pass) override {
    staged_in_bytes_ += pass.link;
    coded_bytes_ += pass.coded;
    decoded_bytes_ += pass.decoded;
  }
  uint64_t StagingEpoch() override { return staging_epoch_; }

  // Runs a kernel on `stream` and advances that stream's clock. `host_s`: host time spent issuing it
  // (the framework's per-op cost); the kernel cannot start before the host has issued it, and the host
  // runs ahead of the GPU otherwise.
  KernelTime Launch(const SimKernel& kernel, Stream stream = Stream::kCompute, double host_s = 0);
  // An explicit copy between pinned host memory and a device buffer (cudaMemcpyAsync), at the link rate.
  void Copy(int64_t bytes, Stream stream);

  double Now(Stream stream) const { return clock_[Index(stream)]; }
  double Elapsed() const;  // the latest of the stream clocks and the host's
  int64_t device_budget_bytes() const { return budget_; }
  int64_t allocated_bytes() const { return allocated_; }
  int64_t device_bytes() const { return model_.device_bytes(); }

 private:
  explicit SimBackend(SimOptions options);
  static int Index(Stream s) { return s == Stream::kCompute ? 0 : 1; }
  // INVALID_ARGUMENT unless [addr, addr + bytes) lies in one managed allocation (as CUDA requires of a
  // prefetch); `what` names the call in the message.
  absl::Status WithinOneAllocation(std::string_view what, uint64_t addr, int64_t bytes) const;
  // Applies `change` to the model and returns the seconds the driver spends on what it did.
  template <typename Change>
  double Charge(Change change, bool prefetch_to_device);
  void UpdateRemote(uint64_t addr, int64_t bytes);
  int64_t HostCopyBytes(uint64_t addr) const;  // of a staged or kept range; -1 for none
  // A host copy for StageOut or KeepHostCopy: one kept for reuse if there is one, else counted as filled.
  void ReuseOrFillHostCopy(uint64_t addr, int64_t bytes);
  void ApplyAdvice(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location);

  struct BlockAdvice {
    bool preferred_host = false;
    bool accessed_by = false;
  };

  SimOptions options_;
  int64_t budget_ = 0;
  UvmModel model_;
  uint64_t next_addr_;
  std::map<uint64_t, int64_t> allocations_;  // base → bytes
  int64_t allocated_ = 0;
  std::array<double, 2> clock_{0, 0};
  double host_clock_ = 0;  // when the host has issued everything so far
  // Note [Events in a ring]: when each event completes, for the last kEventRing events recorded (an older
  // one counts as long complete, as on CudaBackend). Unbounded, the list grew by every op boundary of
  // every followed iteration: the daemon's CPU mirror gained 2.7 KiB per request under load_e2e_test's
  // load (36 MiB in 5 minutes).
  std::vector<double> events_ = std::vector<double>(kEventRing, 0.0);
  EventId next_event_ = 0;
  std::unordered_map<uint64_t, double> ready_at_;  // block base → when a prefetch delivers it
  std::unordered_map<uint64_t, BlockAdvice> advice_;
  std::map<uint64_t, int64_t> staged_;    // addr → bytes of each staged range
  std::map<uint64_t, int64_t> kept_;      // addr → bytes of each range with a host copy kept (KeepHostCopy)
  std::map<uint64_t, int64_t> reusable_;  // addr → bytes of each host copy kept after Unstage
  int64_t host_copies_filled_bytes_ = 0;
  int64_t put_back_bytes_ = 0;
  int64_t staged_in_bytes_ = 0;  // bytes StageIn copied (MigrationCause::kStaged)
  int64_t exact_counter_reads_ = 0;
  int64_t synchronizations_ = 0;
  uint64_t staging_epoch_ = 0;                            // SetCodedBytes' changes
  int64_t coded_bytes_ = 0, decoded_bytes_ = 0;           // Note [Coded host copies]
  std::unordered_map<uint64_t, int64_t> measured_coded_;  // SetCodedBytes
  double decode_s_ = 0;
  double decode_clock_ = 0;                     // the decode lane
  std::map<uint64_t, int64_t> device_buffers_;  // AllocateDevice: address → bytes
  uint64_t next_device_addr_ = uint64_t{1} << 62;
};

}  // namespace autouvm::runtime::sim
