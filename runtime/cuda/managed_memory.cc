#include "runtime/cuda/managed_memory.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/device_backend.h"

namespace autouvm::runtime::cuda {
namespace {

// Note [Captured steps' allocations]: PyTorch sends an allocation to the first pool whose filter takes
// it, of those begun (beginAllocateToPool) and not ended, for every thread. The process's one Scope is
// begun first and for good (Note [One managed scope], compute_device.cc), so while a thread captures,
// its filter declines that thread's allocations: they go to the capture arena's pool, begun for the
// captured stream. What a captured step allocates and frees stays in that pool, never handed to a tensor
// made outside a capture, so a replay writes only memory that is the graph's own. And a capture is made
// on a stream of the arena's own, not on the compute stream the models share: other threads go on
// launching there (another model's weights generated at load, a plan's waits before its pass), and in a
// capture of that stream their work would go into this graph instead of running.
thread_local bool t_capturing = false;
// The capture's outputs event (MarkCapturedOutputs), taken by the captured work; null if none was marked.
thread_local cudaEvent_t t_outputs = nullptr;

std::string CudaError(const char* what, cudaError_t e) {
  return absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

class ManagedCapturedWork final : public ComputeDevice::CapturedWork {
 public:
  ManagedCapturedWork(cudaGraphExec_t exec, cudaEvent_t outputs) : exec_(exec), outputs_(outputs) {}
  ~ManagedCapturedWork() override {
    (void)cudaGraphExecDestroy(exec_);                          // deliberately unchecked: nothing to do
    if (outputs_ != nullptr) (void)cudaEventDestroy(outputs_);  // deliberately unchecked: nothing to do
  }

  absl::Status Replay() override {
    const cudaError_t e = cudaGraphLaunch(exec_, c10::cuda::getCurrentCUDAStream().stream());
    if (e != cudaSuccess) return absl::InternalError(CudaError("cudaGraphLaunch", e));  // checked
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    // The marked outputs' event is the graph's own node: the launch just made records it.
    const cudaError_t e = outputs_ != nullptr ? cudaEventSynchronize(outputs_)
                                              : cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream().stream());
    if (e != cudaSuccess) return absl::InternalError(CudaError("waiting for a replay", e));  // checked
    return absl::OkStatus();
  }

 private:
  const cudaGraphExec_t exec_;
  const cudaEvent_t outputs_;
};

}  // namespace

// A developer's look at a capture's nodes and edges: with AUTOUVM_GRAPH_DOT=PATH set, the first 16 graphs
// the process captures are written to PATH.<pid>.<n>.dot (CUDA's Graphviz form; docs/development.md).
void DebugDot(cudaGraph_t graph) {
  static std::atomic<int> written{0};
  const char* path = std::getenv("AUTOUVM_GRAPH_DOT");
  if (path == nullptr || *path == '\0') return;
  const int n = written.fetch_add(1);
  if (n >= 16) return;
  const std::string file = absl::StrCat(path, ".", getpid(), ".", n, ".dot");
  (void)cudaGraphDebugDotPrint(graph, file.c_str(), 0);  // deliberately unchecked: a debugging aid
}

class ManagedCaptureArena final : public ComputeDevice::CaptureArena {
 public:
  explicit ManagedCaptureArena(ManagedMemoryPool* owner) : owner_(owner) {
    allocator_ = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
        [this](size_t bytes, int, cudaStream_t) {
          void* ptr = owner_->Allocate(bytes);
          if (ptr != nullptr) bytes_.fetch_add(static_cast<int64_t>(bytes));
          return ptr;
        },
        [this](void* ptr, size_t bytes, int, cudaStream_t) {
          owner_->Free(ptr, bytes);
          bytes_.fetch_sub(static_cast<int64_t>(bytes));
        });
    pool_ = std::make_unique<at::cuda::MemPool>(allocator_);
    // The stream captures are made on (Note [Captured steps' allocations]).
    int least = 0, greatest = 0;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess ||  // checked: no stream, no capture
        cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest) != cudaSuccess) {
      stream_ = nullptr;
      (void)cudaGetLastError();  // reported by Capture
    }
  }
  ~ManagedCaptureArena() override {
    pool_.reset();                                             // its blocks were last used on stream_
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);  // deliberately unchecked: nothing to do
  }

  absl::StatusOr<std::unique_ptr<ComputeDevice::CapturedWork>> Capture(
      const std::function<absl::Status()>& body) override {
    if (stream_ == nullptr) return absl::UnavailableError("no CUDA stream could be made to capture on");
    const c10::DeviceIndex device = c10::cuda::current_device();
    const cudaStream_t stream = stream_;
    c10::cuda::CUDACachingAllocator::beginAllocateToPool(device, pool_->id(),
                                                         [stream](cudaStream_t s) { return s == stream; });
    t_capturing = true;
    t_outputs = nullptr;
    absl::Status status;
    cudaGraphExec_t exec = nullptr;
    {
      // The body launches on the arena's stream while it captures (the guard puts the caller's back);
      // the graph replays on the caller's.
      c10::cuda::CUDAStreamGuard on_capture_stream(c10::cuda::getStreamFromExternal(stream, device));
      // Relaxed: other threads (other models' copies, the allocator's managed segments) go on as usual.
      if (const cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed); e != cudaSuccess) {
        status = absl::InternalError(CudaError("cudaStreamBeginCapture", e));  // checked
      } else {
        try {
          status = body();
        } catch (const std::exception& e) {
          status = absl::InternalError(absl::StrCat("capturing: ", e.what()));
        }
        cudaGraph_t graph = nullptr;
        const cudaError_t ended = cudaStreamEndCapture(stream, &graph);  // checked below
        if (status.ok() && ended != cudaSuccess) {
          status = absl::InternalError(CudaError("cudaStreamEndCapture", ended));
        }
        if (status.ok()) {
          DebugDot(graph);
          if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) {
            status = absl::InternalError(CudaError("cudaGraphInstantiate", e));  // checked
            exec = nullptr;
          }
        }
        if (graph != nullptr) (void)cudaGraphDestroy(graph);  // deliberately unchecked: the exec is what runs
      }
    }
    t_capturing = false;
    const cudaEvent_t outputs = t_outputs;
    t_outputs = nullptr;
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool_->id());
    // A capture that failed leaves its (non-sticky) error behind: the caller reports it from `status`.
    if (!status.ok()) {
      (void)cudaGetLastError();
      if (outputs != nullptr) (void)cudaEventDestroy(outputs);  // deliberately unchecked: nothing to do
      return status;
    }
    return std::make_unique<ManagedCapturedWork>(exec, outputs);
  }

  int64_t bytes() const override { return bytes_.load(); }

 private:
  ManagedMemoryPool* const owner_;
  std::atomic<int64_t> bytes_{0};
  std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> allocator_;
  std::unique_ptr<at::cuda::MemPool> pool_;
  cudaStream_t stream_ = nullptr;  // owned
};

std::unique_ptr<ComputeDevice::CaptureArena> ManagedMemoryPool::NewCaptureArena() {
  return std::make_unique<ManagedCaptureArena>(this);
}

struct ManagedMemoryPool::Impl {
  std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> allocator;
  std::unique_ptr<at::cuda::MemPool> pool;
};

ManagedMemoryPool::ManagedMemoryPool(int device, ManagedMemoryLimits limits, int64_t free_at_start)
    : device_(device), limits_(limits), free_at_start_(free_at_start) {}

ManagedMemoryPool::~ManagedMemoryPool() = default;

absl::StatusOr<int64_t> ManagedMemoryPool::CapFromEnvironment() { return ManagedBytesCapFromEnvironment(); }

absl::StatusOr<std::unique_ptr<ManagedMemoryPool>> ManagedMemoryPool::Create(int device, ManagedMemoryLimits limits) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {  // checked
    return absl::InvalidArgumentError(absl::StrCat("device ", device, ": no such CUDA device (", count, " found)"));
  }
  // A MemPool can be made only once PyTorch has initialized CUDA and its caching allocator ("Invalid
  // device argument" otherwise): one small tensor on the device does both.
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  (void)at::empty({1}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {  // checked
    return absl::UnavailableError(absl::StrCat("device ", device, ": cudaMemGetInfo failed"));
  }
  std::unique_ptr<ManagedMemoryPool> pool(new ManagedMemoryPool(device, limits, static_cast<int64_t>(free_bytes)));
  ManagedMemoryPool* self = pool.get();
  pool->impl_ = std::make_unique<Impl>();
  pool->impl_->allocator = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
      [self](size_t bytes, int, cudaStream_t) { return self->Allocate(bytes); },
      [self](void* ptr, size_t bytes, int, cudaStream_t) { self->Free(ptr, bytes); });
  pool->impl_->pool = std::make_unique<at::cuda::MemPool>(pool->impl_->allocator);
  return pool;
}

// Note [Managed memory limits]: the GPU host is shared, and asking the driver for more managed memory
// than the card has free can hang the card, not just the process (shared/gpu/NOTES.md). So the pool
// refuses before calling CUDA: past AUTOUVM_MAX_MANAGED_BYTES (or the configured cap), and past the
// card's free memory at creation unless oversubscription is allowed.
void* ManagedMemoryPool::Allocate(size_t bytes) {
  const int64_t want = static_cast<int64_t>(bytes);
  int64_t now = allocated_.load();
  std::string refusal;
  do {
    if (limits_.cap_bytes > 0 && now + want > limits_.cap_bytes) {
      refusal = absl::StrCat("allocating ", want, " bytes of managed memory would pass the cap of ", limits_.cap_bytes,
                             " bytes (AUTOUVM_MAX_MANAGED_BYTES); ", now, " are allocated");
      break;
    }
    if (!limits_.allow_oversubscription && now + want > free_at_start_) {
      refusal = absl::StrCat("allocating ", want, " bytes of managed memory would exceed the ", free_at_start_,
                             " bytes free on the device; set memory.allow_oversubscription to allow it");
      break;
    }
  } while (!allocated_.compare_exchange_weak(now, now + want));
  if (!refusal.empty()) {
    std::lock_guard<std::mutex> lock(refusal_mu_);
    last_refusal_ = std::move(refusal);
    return nullptr;
  }
  void* ptr = nullptr;
  if (cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal) != cudaSuccess) {  // checked: refused like a limit
    allocated_.fetch_sub(want);
    (void)cudaGetLastError();  // deliberately cleared: the failure is reported through last_refusal()
    std::lock_guard<std::mutex> lock(refusal_mu_);
    last_refusal_ = absl::StrCat("cudaMallocManaged(", want, ") failed");
    return nullptr;
  }
  int64_t peak = peak_.load();
  while (now + want > peak && !peak_.compare_exchange_weak(peak, now + want)) {
  }
  return ptr;
}

void ManagedMemoryPool::Free(void* ptr, size_t bytes) {
  (void)cudaFree(ptr);  // deliberately unchecked: nothing to do about a failing free at this point
  allocated_.fetch_sub(static_cast<int64_t>(bytes));
}

std::string ManagedMemoryPool::last_refusal() const {
  std::lock_guard<std::mutex> lock(refusal_mu_);
  return last_refusal_;
}

ManagedMemoryPool::Scope::Scope(ManagedMemoryPool* pool) : pool_(pool) {
  c10::cuda::CUDACachingAllocator::beginAllocateToPool(static_cast<c10::DeviceIndex>(pool_->device_),
                                                       pool_->impl_->pool->id(),
                                                       [](cudaStream_t) { return !t_capturing; });
}

ManagedMemoryPool::Scope::~Scope() {
  c10::cuda::CUDACachingAllocator::endAllocateToPool(static_cast<c10::DeviceIndex>(pool_->device_),
                                                     pool_->impl_->pool->id());
}

absl::Status MarkCapturedOutputs() {
  if (!t_capturing) return absl::OkStatus();
  if (t_outputs == nullptr) {
    if (const cudaError_t e = cudaEventCreateWithFlags(&t_outputs, cudaEventDisableTiming); e != cudaSuccess) {
      t_outputs = nullptr;
      return absl::InternalError(CudaError("cudaEventCreateWithFlags", e));  // checked
    }
  }
  // External: a node of the graph that records the event for the host to wait on, not an edge of it.
  const cudaError_t e =
      cudaEventRecordWithFlags(t_outputs, c10::cuda::getCurrentCUDAStream().stream(), cudaEventRecordExternal);
  if (e != cudaSuccess) return absl::InternalError(CudaError("recording a capture's outputs event", e));  // checked
  return absl::OkStatus();
}

bool IsManagedPointer(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {  // checked: not ours
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeManaged;
}

}  // namespace autouvm::runtime::cuda
