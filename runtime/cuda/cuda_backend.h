// CudaBackend: the DeviceBackend on a real GPU — cudaMallocManaged, cudaMemPrefetchAsync, cudaMemAdvise
// and cudaMemDiscardBatchAsync on two streams (compute and copy), and CUPTI's unified-memory counters.
// Needs only the CUDA toolkit, so it is compiled wherever the toolkit is installed (CI included) and
// run on the GPU host (tests/gpu).
//
//   ASSIGN_OR_RETURN(auto gpu, CudaBackend::Create({.device = 0, .spec = *FindGpuSpec("h200-pcie5")}));
//   ASSIGN_OR_RETURN(uint64_t a, gpu->AllocateManaged(bytes));   // refused past the cap or free memory
//
// Limits (Note [Managed memory limits], runtime/cuda/managed_memory.h): an allocation is refused,
// before CUDA is asked, past `cap_bytes` (AUTOUVM_MAX_MANAGED_BYTES by default) or, unless
// allow_oversubscription, past the device memory that was free when the backend was created.
//
// Thread-safety: one thread drives a CudaBackend (as the executor does); ReadCounters from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/device_backend.h"

namespace autouvm::runtime::cuda {

class CuptiUvmCounters;
class CodedStager;
class HostCopyCoder;
struct CodedCopy;

// AUTOUVM_MAX_MANAGED_BYTES as the default cap: see CudaBackendOptions::cap_bytes.
inline constexpr int64_t kCapFromEnvironment = -1;

struct CudaBackendOptions {
  int device = 0;
  GpuSpec spec;
  int64_t cap_bytes = kCapFromEnvironment;  // 0: none of our own
  bool allow_oversubscription = false;
  void* compute_stream = nullptr;  // a cudaStream_t to compute on (e.g. PyTorch's); null: one of our own
  bool counters = true;            // collect CUPTI unified-memory counters
  int64_t device_free_bytes = 0;   // 0: the device's free memory now (cudaMemGetInfo); tests give less
  // Note [Coded host copies]: host copies of at least coded_min_bytes are exponent-coded by
  // coder_threads threads, and StageInto sends their coded bytes over the link and decodes them on the
  // device, through coded_slots landing slots of coded_slot_bytes (device memory, device_bytes()).
  // Ignored where the build has no CUDA kernels (coding() says whether it is on).
  bool code_host_copies = false;
  int64_t coded_min_bytes = int64_t{4} << 20;
  int64_t coded_slot_bytes = int64_t{16} << 20;
  int coded_slots = 4;
  int coder_threads = 4;
};

class CudaBackend final : public DeviceBackend {
 public:
  // UNAVAILABLE when there is no usable CUDA device (the message says what CUDA answered);
  // FAILED_PRECONDITION when the device cannot migrate managed memory on demand.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(CudaBackendOptions options);
  ~CudaBackend() override;

  std::string_view kind() const override { return "cuda"; }
  const GpuSpec& spec() const override { return options_.spec; }
  absl::StatusOr<uint64_t> AllocateManaged(int64_t bytes) override;
  absl::Status FreeManaged(uint64_t addr) override;
  absl::Status Prefetch(uint64_t addr, int64_t bytes, Location to, Stream stream) override;
  absl::Status Advise(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location) override;
  absl::Status Discard(uint64_t addr, int64_t bytes, Stream stream) override;
  absl::StatusOr<int64_t> ResidentBytes(uint64_t addr, int64_t bytes) override;
  // An EventId stays valid for the next kEventRing events recorded.
  EventId RecordEvent(Stream stream) override;
  void WaitEvent(Stream stream, EventId event) override;
  absl::Status Synchronize() override;
  // A timed event stays valid for the next kTimedEventRing timed events recorded.
  EventId RecordTimedEvent(Stream stream) override;
  absl::StatusOr<double> ElapsedSeconds(EventId from, EventId to) override;
  absl::StatusOr<UvmCounters> ReadCounters() override;
  // Without a flush (CuptiUvmCounters' own thread flushes every kFlushPeriodS).
  absl::StatusOr<UvmCounters> DeliveredCounters() override;
  // Note [Staged passes captured] (runtime/executor_capture.cc; cuda_backend_capture.cc).
  absl::Status BeginCapture(void* stream) override;
  void EndCapture() override;
  StagingTally StagingSoFar() override { return {staged_in_bytes_, coded_bytes_, decoded_bytes_}; }
  void CountReplayedStaging(const StagingTally& pass) override {
    staged_in_bytes_ += pass.link;
    coded_bytes_ += pass.coded;
    decoded_bytes_ += pass.decoded;
  }
  // The coder's finished jobs (Note [Coded copies captured]).
  uint64_t StagingEpoch() override;
  double counter_lag_s() const override;
  // Staging (Note [Staged streaming] in device_backend.h): host copies in pinned memory, one per range;
  // needs CUDA 13 (cudaMemDiscardBatchAsync). The range may be any managed memory, the backend's or not.
  bool can_stage() const override;
  absl::Status StageOut(uint64_t addr, int64_t bytes) override;
  absl::Status StageIn(uint64_t addr, int64_t bytes, Stream stream) override;
  absl::Status Unstage(uint64_t addr, int64_t bytes, Location to) override;
  absl::Status ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged) override;
  int64_t HostCopyBytesWithin(uint64_t addr, int64_t bytes) const override;
  // Staged ranges copied into cudaMalloc'd buffers (Note [Streaming through a device buffer]).
  bool can_stage_into() const override { return can_stage(); }
  absl::StatusOr<uint64_t> AllocateDevice(int64_t bytes) override;
  absl::Status FreeDevice(uint64_t addr) override;
  absl::Status StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, Stream stream) override;
  absl::Status EndStageInto(uint64_t addr, int64_t bytes) override;
  absl::Status KeepHostCopy(uint64_t addr, int64_t bytes) override;
  Staging StagingOf(uint64_t addr) const override;
  std::optional<int64_t> CodedBytes(uint64_t addr) override;

  // Whether staged copies cross the link coded (Note [Coded host copies]).
  bool coding() const { return stager_ != nullptr; }
  // Device memory the backend holds for itself: the coded copies' landing slots, the eager ones and
  // those of the threads' graphs (Note [Coded copies captured]).
  int64_t device_bytes() const;
  // Blocks until every host copy made so far has its coded form (or is known not to shrink): benchmarks
  // and tests, which want coded staging from the first step.
  void WaitForCodedCopies();

  static constexpr int kEventRing = 4096;
  static constexpr int kTimedEventRing = 8192;  // an iteration's op boundaries
  int64_t allocated_bytes() const { return allocated_; }
  int64_t free_bytes_at_start() const { return free_at_start_; }

  struct Streams;

 private:
  CudaBackend(CudaBackendOptions options, int64_t cap, int64_t free_at_start);
  absl::StatusOr<UvmCounters> Counters(bool flush);  // ReadCounters (flush) or DeliveredCounters

  CudaBackendOptions options_;
  int64_t cap_ = 0;
  int64_t free_at_start_ = 0;
  int64_t allocated_ = 0;
  std::map<uint64_t, int64_t> allocations_;
  std::unique_ptr<Streams> streams_;
  EventId next_event_ = 0;
  EventId next_timed_event_ = 0;
  struct StagedCopy {
    void* host = nullptr;  // pinned (Note [Host copies' memory])
    size_t mapped = 0;     // the mapping's length: bytes rounded up to huge pages
    int64_t bytes = 0;
    // kDiscarded: StageOut's; kKept: KeepHostCopy's (the managed range left as it was); kNone: unstaged,
    // kept for reuse (Note [Host copies outlive staging]).
    Staging staging = Staging::kNone;
    // Note [Coded host copies]: kPending while a coder thread encodes it; kCoded once the coded copy
    // is adopted (StageInto sends it); kNone: staged plain.
    enum class Coding { kNone, kPending, kCoded } coding = Coding::kNone;
    bool does_not_shrink = false;  // the coder found it would not shrink (it stays kNone)
    void* coded_host = nullptr;    // pinned
    size_t coded_mapped = 0;
    std::shared_ptr<CodedCopy> coded;
  };
  // Frees a host copy and its coded form (a coder thread's job included).
  void FreeHostCopy(uint64_t addr, StagedCopy& copy);
  // Adopts the coder's result for a kPending copy, if it is done.
  void AdoptCoded(uint64_t addr, StagedCopy& copy);
  // The stream on which an event covers all the copy side's work (copies and decodes).
  void* CopyTail();
  // A thread capturing a graph through this backend (BeginCapture): its capture stream, the copy stream
  // of its own that joins the graph, and the first event recorded in the capture.
  struct Capture {
    std::thread::id thread;
    void* compute = nullptr;
    void* copy = nullptr;
    EventId first = 0;
    CodedStager* stager = nullptr;  // its coded copies' (CaptureStager), once it has one
  };
  const Capture* Capturing() const;     // the calling thread's, null when it captures nothing
  void* StreamOf(Stream stream) const;  // a cudaStream_t: the calling thread's capture's, else the backend's
  // FAILED_PRECONDITION naming `what` while the calling thread captures (a graph cannot hold it).
  absl::Status RefuseInCapture(const char* what) const;
  std::vector<Capture> captures_;
  // Per thread that has captured: its copy stream and the events that fork it from the capture stream and
  // join it back (cudaStream_t, cudaEvent_t), kept for its next capture, destroyed with the backend.
  struct CaptureStreams {
    std::thread::id thread;
    void* copy = nullptr;
    void* fork = nullptr;
    void* join = nullptr;
    // Coded copies captured (Note [Coded copies captured]): landing slots of the thread's graphs, made
    // at its first captured coded copy.
    std::shared_ptr<CodedStager> stager;
  };
  // The calling thread's capture stager, made on first use.
  absl::StatusOr<CodedStager*> CaptureStager();
  std::vector<CaptureStreams> capture_streams_;
  absl::Status CopyToHost(uint64_t addr, int64_t bytes, Staging staging);
  // The host copy of the range StageOut or KeepHostCopy was given; FAILED_PRECONDITION for any other.
  absl::StatusOr<StagedCopy*> FindStaged(uint64_t addr, int64_t bytes);
  std::map<uint64_t, StagedCopy> staged_;       // by managed address: staged or kept for reuse
  std::map<uint64_t, int64_t> device_buffers_;  // AllocateDevice: address → bytes
  int64_t staged_in_bytes_ = 0;                 // over the link (coded bytes where coded)
  int64_t coded_bytes_ = 0, decoded_bytes_ = 0;
  std::unique_ptr<HostCopyCoder> coder_;
  int64_t plain_fallbacks_ = 0;  // coded copies that could not be kept (AdoptCoded), each staged plain
  std::unique_ptr<CodedStager> stager_;
  std::unique_ptr<CuptiUvmCounters> counters_;
  std::string counters_error_;  // why there are no counters, when there are none
};

}  // namespace autouvm::runtime::cuda
