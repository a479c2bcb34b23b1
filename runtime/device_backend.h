// DeviceBackend: everything the executor and the profiler ask of a GPU with unified memory, behind one
// interface with two implementations — runtime/cuda/ (real CUDA UVM) and runtime/sim/ (the simulated
// driver). Nothing above runtime/ sees CUDA.
//
//   ASSIGN_OR_RETURN(uint64_t w, backend->AllocateManaged(bytes));
//   RETURN_IF_ERROR(backend->Advise(w, bytes, Advice::kReadMostly, true));
//   RETURN_IF_ERROR(backend->Prefetch(w, bytes, Location::kDevice, Stream::kCopy));
//   EventId ready = backend->RecordEvent(Stream::kCopy);
//   backend->WaitEvent(Stream::kCompute, ready);   // the compute stream waits for the copy
//
// Addresses are plain integers: on CUDA they are device pointers (tensors' data_ptr), on the simulator
// addresses in its own address space that nothing may dereference.
//
// Thread-safety: implementations say; both shipped ones are driven by one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/gpu_spec.h"

namespace autouvm::runtime {

enum class Location { kHost, kDevice };

// The two streams the runtime uses: the one the model computes on, and a side stream for copies.
enum class Stream { kCompute, kCopy };

enum class Advice {
  kPreferredLocation,  // `location` is where the pages should live (cudaMemAdviseSetPreferredLocation)
  kAccessedBy,         // the device keeps a mapping to the pages wherever they are (zero-copy when they
                       // are on the host and preferred there)
  kReadMostly,         // reads duplicate pages instead of migrating them; a write collapses the copies
};

// Why bytes crossed the link (CUPTI's CUpti_ActivityUnifiedMemoryMigrationCause), and kStaged: copies
// of staged tensors into their managed range or a device buffer (DeviceBackend::StageIn, StageInto),
// which are not migrations (CUPTI does not see them; the backend counts them).
enum class MigrationCause { kUserPrefetch = 0, kFault, kDriverPrefetch, kEviction, kOther, kStaged };
inline constexpr int kMigrationCauses = 6;
std::string_view MigrationCauseName(MigrationCause cause);

// Unified-memory counters since the backend was created. On CUDA they come from CUPTI's unified-memory
// counter records; on the simulator from its driver model.
struct UvmCounters {
  int64_t gpu_fault_groups = 0;                       // batches of GPU page faults the driver serviced
  int64_t gpu_faults = 0;                             // GPU page faults (fault-buffer entries) in those batches
  int64_t cpu_faults = 0;                             // CPU page faults on managed memory
  std::array<int64_t, kMigrationCauses> h2d_bytes{};  // host→device bytes, by MigrationCause
  std::array<int64_t, kMigrationCauses> d2h_bytes{};  // device→host bytes, by MigrationCause
  int64_t dropped_bytes = 0;  // device copies dropped without a copy back (read-duplicated, discarded)
  int64_t evictions = 0;      // evictions by the driver (sim: 2 MiB chunks; CUDA: eviction migrations)
  int64_t thrashing = 0;      // thrashing events (sim: pages faulted back in after an eviction)
  int64_t throttling = 0;     // throttling events (CUDA only)
  int64_t remote_bytes = 0;   // bytes the device reached in place over the link (sim: read; CUDA: mapped)
  // Note [Coded host copies]: staged copies that crossed the link exponent-coded (their coded bytes are
  // in h2d_bytes[kStaged]), the bf16 bytes they decoded into, and the decoder's time.
  int64_t coded_bytes = 0;
  int64_t decoded_bytes = 0;
  int64_t decode_ns = 0;

  int64_t h2d(MigrationCause c) const { return h2d_bytes[static_cast<int>(c)]; }
  int64_t d2h(MigrationCause c) const { return d2h_bytes[static_cast<int>(c)]; }
  int64_t h2d_total() const;
  int64_t d2h_total() const;
};
UvmCounters operator-(const UvmCounters& a, const UvmCounters& b);
UvmCounters& operator+=(UvmCounters& a, const UvmCounters& b);

// AUTOUVM_MAX_MANAGED_BYTES, the cap on managed memory a process may allocate (0 when unset);
// INVALID_ARGUMENT naming the variable if it is malformed.
absl::StatusOr<int64_t> ManagedBytesCapFromEnvironment();

// Whether [addr, addr + bytes) lies within one of `allocations` (base → bytes): what CUDA asks of a
// prefetch (one managed allocation) and the backends of a copy into a device buffer.
bool WithinOne(const std::map<uint64_t, int64_t>& allocations, uint64_t addr, int64_t bytes);

using EventId = int64_t;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual std::string_view kind() const = 0;  // "cuda" or "sim": the `backend` label of the metrics
  virtual const GpuSpec& spec() const = 0;

  // Managed memory, on the host until something touches it. Refused (RESOURCE_EXHAUSTED, saying why)
  // past the AUTOUVM_MAX_MANAGED_BYTES cap or, without oversubscription, past the device's free memory.
  virtual absl::StatusOr<uint64_t> AllocateManaged(int64_t bytes) = 0;
  virtual absl::Status FreeManaged(uint64_t addr) = 0;

  // Moves [addr, addr + bytes) to `to`, in order on `stream`.
  virtual absl::Status Prefetch(uint64_t addr, int64_t bytes, Location to, Stream stream) = 0;
  // Sets (`set`) or clears an advice. `location` matters for kPreferredLocation only.
  virtual absl::Status Advise(uint64_t addr, int64_t bytes, Advice advice, bool set,
                              Location location = Location::kDevice) = 0;
  // The contents of the range are no longer needed: device copies are dropped without a copy back.
  virtual absl::Status Discard(uint64_t addr, int64_t bytes, Stream stream) = 0;

  // Note [Staged streaming]: a streamed weight can live outside managed memory between its uses.
  // StageOut copies the range's contents to a host copy the backend keeps (pinned, on CUDA) and discards
  // the managed pages; StageIn, in order on `stream`, populates the range on the device (nothing
  // migrates: the pages hold nothing) and copies the host copy in with a copy engine; Discard drops it
  // again for free; Unstage puts the contents back in the managed range, on the host, and frees the copy.
  // The copy runs on a copy engine beside compute (on the H200 50.7 GB/s alone, 39-40 pipelined with
  // the populates and discards), where a remote read takes the op's own time and a migrated read-mostly
  // copy cannot be dropped cheaply (bench/results/2026-11-30-staged-ttft-h200.md).
  // Ranges are staged whole: StageIn and Unstage take the addr and bytes StageOut was given.
  // UNIMPLEMENTED where the backend cannot (CUDA before 13).
  //
  // Note [Host copies outlive staging]: staging is for weights, whose contents do not change while
  // their model is loaded, so Unstage keeps the host copy (as a copy of the range, no longer staged)
  // and a later StageOut or KeepHostCopy of the same range reuses it instead of allocating and filling
  // another: the daemon switches plans twice per request, and a fresh copy of a 7B's streamed part
  // took seconds on the H200 (cudaHostAlloc and a copy out, tensor by tensor). Unstage puts the
  // contents back in the managed range on the host, or with `to` kDevice on the device: populated and
  // copied in from the host copy at the link's rate (a plan that pins the weight next), instead of a
  // synchronous copy on the host (1-2 GB/s on the H200) and a migration back; work queued on either stream after
  // the call sees the contents. ForgetHostCopies frees the copies kept for ranges in [addr, addr +
  // bytes) — the owner of the memory calls it before freeing it or writing it; a range still staged
  // there is refused (FAILED_PRECONDITION, freeing nothing: its copy is its contents) or, with kDrop,
  // stops being staged with its contents lost (memory about to be freed: nothing is put back).
  virtual bool can_stage() const { return false; }
  virtual absl::Status StageOut(uint64_t addr, int64_t bytes);
  virtual absl::Status StageIn(uint64_t addr, int64_t bytes, Stream stream);
  virtual absl::Status Unstage(uint64_t addr, int64_t bytes, Location to);
  enum class WhenStaged { kRefuse, kDrop };
  virtual absl::Status ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged);
  // Bytes of the host copies held (staged, kept, or kept for reuse) for ranges that start in [addr,
  // addr + bytes), their coded copies' pinned memory included (Note [Coded host copies]).
  virtual int64_t HostCopyBytesWithin(uint64_t addr, int64_t bytes) const { return 0; }

  // Note [Streaming through a device buffer]: a staged range's host copy can also be copied into plain
  // device memory (AllocateDevice: cudaMalloc on CUDA) that the model's tensor is pointed at for its ops
  // (runtime/tensor_binding.h) — no populate and no discard per use, and a pinned copy into device
  // memory runs at the link's full rate (55.5 GB/s on the H200 against 50.7 into a populated managed
  // range). StageInto copies in order on `stream`; EndStageInto says the range's contents left the
  // device buffer (nothing to do on CUDA: the buffer is the caller's; the simulator, whose kernels read
  // the managed range, drops the pages that stood for it). On CUDA the model reads the buffer only if
  // its tensor is bound to it (stage_into_needs_binding).
  virtual bool can_stage_into() const { return false; }
  virtual bool stage_into_needs_binding() const { return true; }
  virtual absl::StatusOr<uint64_t> AllocateDevice(int64_t bytes);
  virtual absl::Status FreeDevice(uint64_t addr);
  virtual absl::Status StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, Stream stream);
  virtual absl::Status EndStageInto(uint64_t addr, int64_t bytes);
  // A host copy for StageInto of a range that shares pages with other tensors, which a discard would
  // reach: the managed range is left as it is (the caller moves it to the host), and Unstage only frees
  // the copy. StageIn cannot be used on it.
  virtual absl::Status KeepHostCopy(uint64_t addr, int64_t bytes);
  // What holds the range that starts at `addr`: nothing of the above, StageOut (its managed range
  // discarded) or KeepHostCopy. A plan that follows another adopts what that one staged (Executor).
  enum class Staging { kNone, kDiscarded, kKept };
  virtual Staging StagingOf(uint64_t addr) const { return Staging::kNone; }
  // Note [Coded sizes in the trace] (access_trace.cc): the bytes the host copy of the range at `addr`
  // moves over the link when StageInto sends it: its coded size, or its own bytes where the code does not
  // shrink it. nullopt where that is not known: no host copy, staged copies crossing plain, or its coding
  // not done yet.
  virtual std::optional<int64_t> CodedBytes(uint64_t addr) { return std::nullopt; }

  // Bytes of the range resident on the device. Exact on the simulator; CUDA exposes no per-page
  // residency, so there it is the whole range if it was last prefetched to the device, else 0
  // (Note [Residency on CUDA], runtime/cuda/cuda_backend.cc).
  virtual absl::StatusOr<int64_t> ResidentBytes(uint64_t addr, int64_t bytes) = 0;

  virtual EventId RecordEvent(Stream stream) = 0;
  virtual void WaitEvent(Stream stream, EventId event) = 0;
  virtual absl::Status Synchronize() = 0;

  // Timed events (the runtime monitor's clock): a mark on `stream`, and the GPU time between two marks,
  // waiting for `to` to complete. Their ids are their own, not EventIds to wait on. NOT_FOUND when a
  // mark is unknown or no longer held (implementations hold the last few thousand).
  virtual EventId RecordTimedEvent(Stream stream) = 0;
  virtual absl::StatusOr<double> ElapsedSeconds(EventId from, EventId to) = 0;

  // Counters as of the last completed work (Synchronize first for exact figures). On CUDA this waits for
  // CUPTI's buffered records (a forced flush: 10-20 ms on the H100 and H200): not for every pass.
  virtual absl::StatusOr<UvmCounters> ReadCounters() = 0;
  // Counters as far as their records have been delivered, without waiting for any: what a caller reads
  // per pass (Note [Counters per model], profiler/model_execution.cc). A backend that buffers its records
  // delivers them at least every counter_lag_s() seconds; the others give ReadCounters().
  virtual absl::StatusOr<UvmCounters> DeliveredCounters() { return ReadCounters(); }
  virtual double counter_lag_s() const { return 0; }

  // Note [Staged passes captured] (runtime/executor_capture.cc): while the calling thread captures a CUDA
  // graph on `stream` (a cudaStream_t in capture), its calls here go into the graph: kCompute is that
  // stream, kCopy a copy stream of the capture's own that joins the graph at EndCapture(), a wait on an
  // event recorded before BeginCapture is left out (a replay is launched after both streams' work), and
  // what a graph cannot hold (a prefetch, an advice, a discard) is refused; a coded copy lands in slots of the
  // capture's own (Note [Coded copies captured], runtime/cuda/cuda_backend_capture.cc). Other threads keep the usual
  // streams. UNIMPLEMENTED on a backend that captures nothing.
  virtual absl::Status BeginCapture(void* /*stream*/) {
    return absl::UnimplementedError("this backend captures no graphs");
  }
  virtual void EndCapture() {}
  // What StageInto has moved so far: the bytes over the link, of them the coded ones, and the bytes
  // decoded from those (Note [Coded host copies], runtime/cuda/cuda_backend_coded.cc).
  struct StagingTally {
    int64_t link = 0;
    int64_t coded = 0;
    int64_t decoded = 0;
  };
  virtual StagingTally StagingSoFar() { return {}; }
  // A captured pass was replayed: its copies moved `pass` (what its capture's StageInto calls moved),
  // counted as StageInto counts them.
  virtual void CountReplayedStaging(const StagingTally& /*pass*/) {}
  // Changes whenever a host copy may cross in another form from its next StageInto on (its coded form
  // finished in the background): a captured pass keyed on it is captured again (Note [Coded copies
  // captured], runtime/cuda/cuda_backend_capture.cc).
  virtual uint64_t StagingEpoch() { return 0; }
};

}  // namespace autouvm::runtime
