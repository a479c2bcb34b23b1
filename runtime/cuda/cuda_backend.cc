#include "runtime/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cuda/cupti_counters.h"
#include "runtime/cuda/host_copy_coder.h"
#include "runtime/cuda/pinned_host.h"
#if AUTOUVM_CUDA_KERNELS
#include "runtime/cuda/coded_stager.h"
#else
namespace autouvm::runtime::cuda {
struct CodedCopy {};
class CodedStager {};
}  // namespace autouvm::runtime::cuda
#endif

namespace autouvm::runtime::cuda {
namespace {

absl::Status CudaError(cudaError_t e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

#define CUDA_RETURN_IF_ERROR(call, what)    \
  do {                                      \
    cudaError_t autouvm_e_ = (call);        \
    if (autouvm_e_ != cudaSuccess) {        \
      cudaGetLastError(); /* clear it */    \
      return CudaError(autouvm_e_, (what)); \
    }                                       \
  } while (0)

#if CUDART_VERSION >= 13000
cudaMemLocation LocationOf(Location where, int device) {
  cudaMemLocation loc{};
  loc.type = where == Location::kDevice ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  loc.id = where == Location::kDevice ? device : 0;
  return loc;
}
#endif

}  // namespace

struct CudaBackend::Streams {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  bool own_compute = false;
  std::vector<cudaEvent_t> events;  // the ring
  std::vector<cudaEvent_t> timed;   // the timed events' ring, created when first used

  cudaStream_t Of(Stream s) const { return s == Stream::kCompute ? compute : copy; }
};

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(CudaBackendOptions options) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "no usable CUDA device: ", e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none"));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", options.device, ": no such CUDA device (", count, " found)"));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device), "cudaSetDevice");
  CUDA_RETURN_IF_ERROR(cudaFree(nullptr), "creating the CUDA context");
  int concurrent = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, options.device),
                       "cudaDeviceGetAttribute");
  if (!concurrent) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", options.device, " cannot migrate managed memory on demand (no concurrent managed access)"));
  }
  int64_t cap = options.cap_bytes;
  if (cap == kCapFromEnvironment) {
    ASSIGN_OR_RETURN(cap, ManagedBytesCapFromEnvironment());
  }
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  int64_t free_at_start = static_cast<int64_t>(free_bytes);
  if (options.device_free_bytes > 0) free_at_start = std::min(free_at_start, options.device_free_bytes);
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(options), cap, free_at_start));
  Streams& s = *backend->streams_;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking), "creating the copy stream");
  if (backend->options_.compute_stream != nullptr) {
    s.compute = static_cast<cudaStream_t>(backend->options_.compute_stream);
  } else {
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking), "creating a compute stream");
    s.own_compute = true;
  }
  s.events.resize(kEventRing, nullptr);
  for (cudaEvent_t& ev : s.events) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  }
#if AUTOUVM_CUDA_KERNELS
  if (backend->options_.code_host_copies && backend->can_stage_into()) {
    ASSIGN_OR_RETURN(backend->stager_,
                     CodedStager::Create(s.copy, backend->options_.coded_slot_bytes, backend->options_.coded_slots));
    backend->coder_ = std::make_unique<HostCopyCoder>(backend->options_.coder_threads);
  }
#endif
  if (backend->options_.counters) {
    auto counters = CuptiUvmCounters::Start(backend->options_.device);
    if (counters.ok()) {
      backend->counters_ = std::move(counters).value();
    } else {
      backend->counters_error_ = std::string(counters.status().message());
    }
  } else {
    backend->counters_error_ = "counters were not requested";
  }
  return backend;
}

CudaBackend::CudaBackend(CudaBackendOptions options, int64_t cap, int64_t free_at_start)
    : options_(std::move(options)), cap_(cap), free_at_start_(free_at_start), streams_(std::make_unique<Streams>()) {}

CudaBackend::~CudaBackend() {
  counters_.reset();
  // Destruction errors are deliberately ignored: nothing can be done about them here.
  stager_.reset();  // waits for its decodes
  coder_.reset();   // stops its threads, which may be reading host copies
  for (auto& [addr, bytes] : allocations_) cudaFree(reinterpret_cast<void*>(addr));
  for (auto& [addr, copy] : staged_) FreeHostCopy(addr, copy);
  for (auto& [addr, bytes] : device_buffers_) cudaFree(reinterpret_cast<void*>(addr));
  for (cudaEvent_t ev : streams_->timed) {
    if (ev != nullptr) cudaEventDestroy(ev);
  }
  for (cudaEvent_t ev : streams_->events) {
    if (ev != nullptr) cudaEventDestroy(ev);
  }
  for (CaptureStreams& c : capture_streams_) {
    c.stager.reset();  // waits for its decodes; its copy stream is destroyed next
    if (c.copy != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(c.copy));
    if (c.fork != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(c.fork));
    if (c.join != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(c.join));
  }
  if (streams_->copy != nullptr) cudaStreamDestroy(streams_->copy);
  if (streams_->own_compute && streams_->compute != nullptr) cudaStreamDestroy(streams_->compute);
}

absl::StatusOr<uint64_t> CudaBackend::AllocateManaged(int64_t bytes) {
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  if (cap_ > 0 && allocated_ + bytes > cap_) {
    return absl::ResourceExhaustedError(absl::StrCat("managed allocation of ", bytes, " bytes refused: the total (",
                                                     allocated_ + bytes, ") would pass AUTOUVM_MAX_MANAGED_BYTES (",
                                                     cap_, ")"));
  }
  if (!options_.allow_oversubscription && allocated_ + bytes > free_at_start_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "managed allocation of ", bytes, " bytes refused: the total (", allocated_ + bytes,
        ") would pass the device's free memory (", free_at_start_, "); set memory.allow_oversubscription to allow it"));
  }
  void* ptr = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocManaged(&ptr, static_cast<size_t>(bytes), cudaMemAttachGlobal),
                       absl::StrCat("cudaMallocManaged(", bytes, ")"));
  const auto addr = reinterpret_cast<uint64_t>(ptr);
  allocations_[addr] = bytes;
  allocated_ += bytes;
  return addr;
}

absl::Status CudaBackend::FreeManaged(uint64_t addr) {
  auto it = allocations_.find(addr);
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("0x", absl::Hex(addr), " was not allocated by this backend"));
  }
  // Whatever was staged from it goes with it (its copies describe memory that no longer exists).
  const auto first = staged_.lower_bound(addr), last = staged_.lower_bound(addr + static_cast<uint64_t>(it->second));
  for (auto s = first; s != last; ++s) FreeHostCopy(s->first, s->second);
  staged_.erase(first, last);
  CUDA_RETURN_IF_ERROR(cudaFree(reinterpret_cast<void*>(addr)), "cudaFree");
  allocated_ -= it->second;
  allocations_.erase(it);
  return absl::OkStatus();
}

absl::Status CudaBackend::Prefetch(uint64_t addr, int64_t bytes, Location to, Stream stream) {
  RETURN_IF_ERROR(RefuseInCapture("a prefetch"));
  const void* ptr = reinterpret_cast<const void*>(addr);
#if CUDART_VERSION >= 13000
  CUDA_RETURN_IF_ERROR(
      cudaMemPrefetchAsync(ptr, static_cast<size_t>(bytes), LocationOf(to, options_.device), 0, streams_->Of(stream)),
      "cudaMemPrefetchAsync");
#else
  CUDA_RETURN_IF_ERROR(
      cudaMemPrefetchAsync(ptr, static_cast<size_t>(bytes), to == Location::kDevice ? options_.device : cudaCpuDeviceId,
                           streams_->Of(stream)),
      "cudaMemPrefetchAsync");
#endif
  return absl::OkStatus();
}

absl::Status CudaBackend::Advise(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location) {
  RETURN_IF_ERROR(RefuseInCapture("an advice"));
  cudaMemoryAdvise a = cudaMemAdviseSetReadMostly;
  switch (advice) {
    case Advice::kReadMostly:
      a = set ? cudaMemAdviseSetReadMostly : cudaMemAdviseUnsetReadMostly;
      location = Location::kDevice;  // ignored by CUDA
      break;
    case Advice::kPreferredLocation:
      a = set ? cudaMemAdviseSetPreferredLocation : cudaMemAdviseUnsetPreferredLocation;
      break;
    case Advice::kAccessedBy:
      a = set ? cudaMemAdviseSetAccessedBy : cudaMemAdviseUnsetAccessedBy;
      location = Location::kDevice;  // this backend's device keeps the mapping
      break;
  }
  const void* ptr = reinterpret_cast<const void*>(addr);
#if CUDART_VERSION >= 13000
  CUDA_RETURN_IF_ERROR(cudaMemAdvise(ptr, static_cast<size_t>(bytes), a, LocationOf(location, options_.device)),
                       "cudaMemAdvise");
#else
  CUDA_RETURN_IF_ERROR(cudaMemAdvise(ptr, static_cast<size_t>(bytes), a,
                                     location == Location::kDevice ? options_.device : cudaCpuDeviceId),
                       "cudaMemAdvise");
#endif
  return absl::OkStatus();
}

absl::Status CudaBackend::Discard(uint64_t addr, int64_t bytes, Stream stream) {
  RETURN_IF_ERROR(RefuseInCapture("a discard"));
#if CUDART_VERSION >= 13000
  // Note [Discard needs a created stream]: cudaMemDiscardBatchAsync refuses the legacy default stream
  // (cudaErrorInvalidValue); both of this backend's streams are created ones unless the caller passed
  // the legacy stream as compute stream, in which case the copy stream does the discard.
  cudaStream_t s = streams_->Of(stream);
  if (s == nullptr) s = streams_->copy;
  void* ptr = reinterpret_cast<void*>(addr);
  size_t size = static_cast<size_t>(bytes);
  CUDA_RETURN_IF_ERROR(cudaMemDiscardBatchAsync(&ptr, &size, 1, 0, s), "cudaMemDiscardBatchAsync");
  return absl::OkStatus();
#else
  (void)addr, (void)bytes, (void)stream;
  return absl::UnimplementedError("discarding managed memory needs CUDA 13");
#endif
}

// Note [Residency on CUDA]: CUDA has no per-page residency query; the last prefetch location of the
// range (cudaMemRangeAttributeLastPrefetchLocation) is the best it offers. The executor keeps its own
// account of what it made resident and uses this only as a check.
absl::StatusOr<int64_t> CudaBackend::ResidentBytes(uint64_t addr, int64_t bytes) {
  int location = cudaInvalidDeviceId;
  CUDA_RETURN_IF_ERROR(cudaMemRangeGetAttribute(&location, sizeof(location), cudaMemRangeAttributeLastPrefetchLocation,
                                                reinterpret_cast<const void*>(addr), static_cast<size_t>(bytes)),
                       "cudaMemRangeGetAttribute");
  return location == options_.device ? bytes : 0;
}

EventId CudaBackend::RecordEvent(Stream stream) {
  const EventId id = next_event_++;
  // Checked by its absence of consequence: an event that fails to record completes at once, so a
  // stream waiting on it does not wait — the same as the sim backend's unknown events.
  cudaEventRecord(streams_->events[static_cast<size_t>(id % kEventRing)],
                  static_cast<cudaStream_t>(stream == Stream::kCopy ? CopyTail() : StreamOf(stream)));
  return id;
}

void CudaBackend::WaitEvent(Stream stream, EventId event) {
  if (event < 0 || event >= next_event_ || event < next_event_ - kEventRing) return;
  // Recorded before the calling thread's capture: done before a replay starts (Note [Staged passes captured]).
  if (const Capture* c = Capturing(); c != nullptr && event < c->first) return;
  cudaStreamWaitEvent(static_cast<cudaStream_t>(StreamOf(stream)),
                      streams_->events[static_cast<size_t>(event % kEventRing)], 0);  // see above
}

EventId CudaBackend::RecordTimedEvent(Stream stream) {
  if (streams_->timed.empty()) streams_->timed.resize(kTimedEventRing, nullptr);
  if (Capturing() != nullptr) return -1;  // a graph's marks time nothing: ElapsedSeconds says NOT_FOUND
  const EventId id = next_timed_event_++;
  cudaEvent_t& ev = streams_->timed[static_cast<size_t>(id % kTimedEventRing)];
  // A failure here surfaces in ElapsedSeconds (an event never recorded has no time).
  if (ev == nullptr) cudaEventCreate(&ev);
  cudaEventRecord(ev, stream == Stream::kCopy ? static_cast<cudaStream_t>(CopyTail()) : streams_->Of(stream));
  return id;
}

absl::StatusOr<double> CudaBackend::ElapsedSeconds(EventId from, EventId to) {
  for (EventId e : {from, to}) {
    if (e < 0 || e >= next_timed_event_ || e < next_timed_event_ - kTimedEventRing) {
      return absl::NotFoundError(absl::StrCat("no timed event ", e, " (", next_timed_event_, " recorded, the last ",
                                              kTimedEventRing, " held)"));
    }
  }
  cudaEvent_t a = streams_->timed[static_cast<size_t>(from % kTimedEventRing)];
  cudaEvent_t b = streams_->timed[static_cast<size_t>(to % kTimedEventRing)];
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b), "waiting for a timed event");
  float ms = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms / 1e3;
}

absl::Status CudaBackend::Synchronize() {
  RETURN_IF_ERROR(RefuseInCapture("a synchronization"));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(streams_->copy), "synchronizing the copy stream");
#if AUTOUVM_CUDA_KERNELS
  if (stager_ != nullptr) RETURN_IF_ERROR(stager_->Synchronize());
#endif
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(streams_->compute), "synchronizing the compute stream");
  return absl::OkStatus();
}

absl::StatusOr<UvmCounters> CudaBackend::ReadCounters() { return Counters(/*flush=*/true); }

absl::StatusOr<UvmCounters> CudaBackend::DeliveredCounters() { return Counters(/*flush=*/false); }

double CudaBackend::counter_lag_s() const { return CuptiUvmCounters::kFlushPeriodS; }

absl::StatusOr<UvmCounters> CudaBackend::Counters(bool flush) {
  if (counters_ == nullptr) return absl::UnavailableError(counters_error_);
  UvmCounters c = counters_->Read(flush);
  c.h2d_bytes[static_cast<int>(MigrationCause::kStaged)] += staged_in_bytes_;
  c.coded_bytes = coded_bytes_;
  c.decoded_bytes = decoded_bytes_;
#if AUTOUVM_CUDA_KERNELS
  if (stager_ != nullptr) c.decode_ns = stager_->decode_ns();
#endif
  return c;
}

bool CudaBackend::can_stage() const { return CUDART_VERSION >= 13000; }

// Note [Staging on CUDA]: measured by bench/offload_bench's staged probe on the H200 (1 GiB): a discard
// takes 3.3-3.7 ms of its stream and moves nothing back; a prefetch of the discarded range to the
// device populates it in 1.2 ms with no migration; the pinned copy into it then runs at 50-51 GB/s on a
// copy engine and the contents read back right. Copied into discarded pages without the populating
// prefetch, the copy faults page by page (0.6 GB/s).
absl::Status CudaBackend::StageOut(uint64_t addr, int64_t bytes) {
  if (!can_stage()) return DeviceBackend::StageOut(addr, bytes);
  return CopyToHost(addr, bytes, Staging::kDiscarded);
}

absl::Status CudaBackend::KeepHostCopy(uint64_t addr, int64_t bytes) {
  if (!can_stage_into()) return DeviceBackend::KeepHostCopy(addr, bytes);
  return CopyToHost(addr, bytes, Staging::kKept);
}

DeviceBackend::Staging CudaBackend::StagingOf(uint64_t addr) const {
  auto it = staged_.find(addr);
  return it == staged_.end() ? Staging::kNone : it->second.staging;
}

absl::Status CudaBackend::CopyToHost(uint64_t addr, int64_t bytes, Staging staging) {
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("staging ", bytes, " bytes"));
  auto it = staged_.find(addr);
  if (it != staged_.end() && it->second.staging != Staging::kNone) {
    return absl::FailedPreconditionError(absl::StrCat("0x", absl::Hex(addr), " is staged already"));
  }
  if (it != staged_.end() && it->second.bytes != bytes) {  // a copy of another range that began here
    FreeHostCopy(it->first, it->second);
    staged_.erase(it);
    it = staged_.end();
  }
  const bool fresh = it == staged_.end();
  PinnedHost host = fresh ? PinnedHost{} : PinnedHost{it->second.host, it->second.mapped};
  if (fresh) {
    ASSIGN_OR_RETURN(host, AllocatePinnedHost(bytes));
  }
  auto fail = [&](absl::Status s) {
    if (fresh) FreePinnedHost(host.ptr, host.mapped);
    return s;
  };
  if (fresh) {
    // Note [Host copies' memory]: CPU threads where the range is on the host and is dropped next.
    int last = cudaInvalidDeviceId;
    const bool on_host =
        staging == Staging::kDiscarded &&
        cudaMemRangeGetAttribute(&last, sizeof(last), cudaMemRangeAttributeLastPrefetchLocation,
                                 reinterpret_cast<const void*>(addr), static_cast<size_t>(bytes)) == cudaSuccess &&
        last == cudaCpuDeviceId;
    cudaGetLastError();
    if (on_host) {
      ParallelCopy(host.ptr, reinterpret_cast<const void*>(addr), static_cast<size_t>(bytes));
    } else if (cudaError_t e =
                   cudaMemcpy(host.ptr, reinterpret_cast<void*>(addr), static_cast<size_t>(bytes), cudaMemcpyDefault);
               e != cudaSuccess) {
      return fail(
          absl::InternalError(absl::StrCat("cudaMemcpy into a staged tensor's host copy: ", cudaGetErrorString(e))));
    }
  }
  if (staging == Staging::kDiscarded) {
    if (absl::Status s = Discard(addr, bytes, Stream::kCopy); !s.ok()) return fail(s);
    if (cudaError_t e = cudaStreamSynchronize(streams_->copy); e != cudaSuccess) {
      return fail(absl::InternalError(absl::StrCat("discarding a staged range: ", cudaGetErrorString(e))));
    }
  }
  if (fresh) {
    StagedCopy& copy = staged_[addr];
    copy = {host.ptr, host.mapped, bytes, staging};
    if (coder_ != nullptr && bytes >= options_.coded_min_bytes && bytes % 2 == 0) {
      coder_->Add(addr, host.ptr, bytes);
      copy.coding = StagedCopy::Coding::kPending;
    }
  } else {
    it->second.staging = staging;
  }
  return absl::OkStatus();
}

absl::StatusOr<CudaBackend::StagedCopy*> CudaBackend::FindStaged(uint64_t addr, int64_t bytes) {
  auto it = staged_.find(addr);
  if (it == staged_.end() || it->second.bytes != bytes || it->second.staging == Staging::kNone) {
    return absl::FailedPreconditionError(absl::StrCat("no staged range of ", bytes, " bytes at 0x", absl::Hex(addr)));
  }
  return &it->second;
}

absl::Status CudaBackend::StageIn(uint64_t addr, int64_t bytes, Stream stream) {
  RETURN_IF_ERROR(RefuseInCapture("a copy into managed memory"));
  ASSIGN_OR_RETURN(StagedCopy * copy, FindStaged(addr, bytes));
  if (copy->staging != Staging::kDiscarded) {  // KeepHostCopy's: into device buffers only
    return absl::FailedPreconditionError(absl::StrCat("no staged range of ", bytes, " bytes at 0x", absl::Hex(addr)));
  }
  RETURN_IF_ERROR(Prefetch(addr, bytes, Location::kDevice, stream));  // populates: nothing to migrate
  cudaStream_t s = streams_->Of(stream);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(reinterpret_cast<void*>(addr), copy->host, static_cast<size_t>(bytes), cudaMemcpyDefault, s),
      "cudaMemcpyAsync (a staged tensor)");
  staged_in_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status CudaBackend::Unstage(uint64_t addr, int64_t bytes, Location to) {
  ASSIGN_OR_RETURN(StagedCopy * copy, FindStaged(addr, bytes));
  if (copy->staging == Staging::kKept) {  // the managed range still holds the contents
    copy->staging = Staging::kNone;
    return to == Location::kDevice ? Prefetch(addr, bytes, Location::kDevice, Stream::kCopy) : absl::OkStatus();
  }
  if (to == Location::kDevice) {
    // StageIn after what either stream has queued (an op may still read the range, a discard may be
    // pending); then the compute stream waits for it.
    WaitEvent(Stream::kCopy, RecordEvent(Stream::kCompute));
    RETURN_IF_ERROR(StageIn(addr, bytes, Stream::kCopy));
    WaitEvent(Stream::kCompute, RecordEvent(Stream::kCopy));
    copy->staging = Staging::kNone;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Synchronize());
  // Dropped wherever it is, placed on the host with nothing to migrate, then written there by CPU
  // threads: 15.8 GB/s with eight, against 4.2 GB/s by cudaMemcpy (bench/offload_bench's host-copy
  // probe, 1 GiB, 2026-11-30).
  RETURN_IF_ERROR(Discard(addr, bytes, Stream::kCopy));
  RETURN_IF_ERROR(Prefetch(addr, bytes, Location::kHost, Stream::kCopy));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(streams_->copy), "cudaStreamSynchronize");
  ParallelCopy(reinterpret_cast<void*>(addr), copy->host, static_cast<size_t>(bytes));
  copy->staging = Staging::kNone;
  return absl::OkStatus();
}

absl::Status CudaBackend::ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged) {
  const auto first = staged_.lower_bound(addr), last = staged_.lower_bound(addr + static_cast<uint64_t>(bytes));
  for (auto it = first; it != last && staged == WhenStaged::kRefuse; ++it) {
    if (it->second.staging != Staging::kNone) {
      return absl::FailedPreconditionError(
          absl::StrCat("the range at 0x", absl::Hex(it->first), " is still staged: its host copy is its contents"));
    }
  }
  for (auto it = first; it != last; ++it) FreeHostCopy(it->first, it->second);
  staged_.erase(first, last);
  return absl::OkStatus();
}

int64_t CudaBackend::HostCopyBytesWithin(uint64_t addr, int64_t bytes) const {
  int64_t sum = 0;
  for (auto it = staged_.lower_bound(addr); it != staged_.end() && it->first < addr + static_cast<uint64_t>(bytes);
       ++it) {
    sum += it->second.bytes + static_cast<int64_t>(it->second.coded_mapped);  // its coded copy's pinned pages too
  }
  return sum;
}

// Note [Device buffers on CUDA]: plain cudaMalloc memory, outside the managed pool and outside
// PyTorch's caching allocator: the executor sizes it from its plan's window, within the budget.
absl::StatusOr<uint64_t> CudaBackend::AllocateDevice(int64_t bytes) {
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("a device buffer of ", bytes, " bytes"));
  void* ptr = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, static_cast<size_t>(bytes)),
                       absl::StrCat("cudaMalloc of ", bytes, " bytes (a device buffer for staged tensors)"));
  device_buffers_[reinterpret_cast<uint64_t>(ptr)] = bytes;
  return reinterpret_cast<uint64_t>(ptr);
}

absl::Status CudaBackend::FreeDevice(uint64_t addr) {
  auto it = device_buffers_.find(addr);
  if (it == device_buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("no device buffer at 0x", absl::Hex(addr)));
  }
  device_buffers_.erase(it);
  CUDA_RETURN_IF_ERROR(cudaFree(reinterpret_cast<void*>(addr)), "cudaFree (a device buffer)");
  return absl::OkStatus();
}

absl::Status CudaBackend::StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, Stream stream) {
  ASSIGN_OR_RETURN(StagedCopy * copy, FindStaged(addr, bytes));
  if (!WithinOne(device_buffers_, device_addr, bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes, " bytes at 0x", absl::Hex(device_addr), " do not lie in one device buffer"));
  }
  // Not while capturing: a coded form that cannot be kept is freed (cudaFreeHost, which a global-mode
  // capture refuses), and the copy's form goes with the epoch of the pass's key (Note [Coded copies
  // captured]); the next eager pass adopts it.
  if (Capturing() == nullptr) AdoptCoded(addr, *copy);
#if AUTOUVM_CUDA_KERNELS
  if (copy->coding == StagedCopy::Coding::kCoded && stream == Stream::kCopy &&
      reinterpret_cast<uintptr_t>(device_addr) % 16 == 0) {
    CodedStager* stager = stager_.get();
    if (Capturing() != nullptr) {
      ASSIGN_OR_RETURN(stager, CaptureStager());  // Note [Coded copies captured]
    }
    RETURN_IF_ERROR(stager->Stage(*copy->coded, reinterpret_cast<uint16_t*>(device_addr)));
    staged_in_bytes_ += copy->coded->link_bytes;
    coded_bytes_ += copy->coded->link_bytes;
    decoded_bytes_ += bytes;
    return absl::OkStatus();
  }
#endif
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(reinterpret_cast<void*>(device_addr), copy->host, static_cast<size_t>(bytes),
                                       cudaMemcpyHostToDevice, static_cast<cudaStream_t>(StreamOf(stream))),
                       "cudaMemcpyAsync (a staged tensor into a device buffer)");
  staged_in_bytes_ += bytes;
  return absl::OkStatus();
}

void* CudaBackend::StreamOf(Stream stream) const {
  if (const Capture* c = Capturing(); c != nullptr) return stream == Stream::kCompute ? c->compute : c->copy;
  return streams_->Of(stream);
}

void* CudaBackend::CopyTail() {
  if (const Capture* c = Capturing(); c != nullptr) {
#if AUTOUVM_CUDA_KERNELS
    if (c->stager != nullptr) return c->stager->Tail();
#endif
    return c->copy;
  }
#if AUTOUVM_CUDA_KERNELS
  if (stager_ != nullptr) return stager_->Tail();
#endif
  return streams_->copy;
}

absl::Status CudaBackend::EndStageInto(uint64_t addr, int64_t bytes) {
  return FindStaged(addr, bytes).status();  // the buffer is the caller's to reuse
}

}  // namespace autouvm::runtime::cuda
