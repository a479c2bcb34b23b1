// OpenComputeDevice where libtorch has CUDA (runtime/compute_device.h): the CPU, or CUDA device 0 with
// every PyTorch allocation of the process in managed memory and one compute stream the models' threads
// share, which the CudaBackend orders its prefetches and evictions against.
#include "runtime/compute_device.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <exception>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cuda/cuda_backend.h"
#if AUTOUVM_LAYER_OPS
#include "runtime/cuda/layer_ops.h"
#endif
#include "runtime/cuda/managed_memory.h"
#include "runtime/serialized_backend.h"

namespace autouvm::runtime {
namespace {

class StreamScope final : public ComputeDevice::ThreadScope {
 public:
  explicit StreamScope(c10::cuda::CUDAStream stream) : guard_(stream) {}

 private:
  c10::cuda::CUDAStreamGuard guard_;
};

// Note [Staged passes captured] (runtime/executor_capture.cc): every capture on the device lets the backend
// capture what the capturing thread asks of it, and every replay is ordered after the work queued on the
// backend's two streams and before their next work, as the captured calls would have been.
class BackendCapturedWork final : public ComputeDevice::CapturedWork {
 public:
  BackendCapturedWork(std::unique_ptr<ComputeDevice::CapturedWork> work, DeviceBackend* backend)
      : work_(std::move(work)), backend_(backend) {}
  absl::Status Replay() override {
    backend_->WaitEvent(Stream::kCompute, backend_->RecordEvent(Stream::kCopy));
    RETURN_IF_ERROR(work_->Replay());
    backend_->WaitEvent(Stream::kCopy, backend_->RecordEvent(Stream::kCompute));
    return absl::OkStatus();
  }
  absl::Status Wait() override { return work_->Wait(); }

 private:
  const std::unique_ptr<ComputeDevice::CapturedWork> work_;
  DeviceBackend* const backend_;
};

class BackendCaptureArena final : public ComputeDevice::CaptureArena {
 public:
  BackendCaptureArena(std::unique_ptr<ComputeDevice::CaptureArena> arena, DeviceBackend* backend)
      : arena_(std::move(arena)), backend_(backend) {}
  absl::StatusOr<std::unique_ptr<ComputeDevice::CapturedWork>> Capture(
      const std::function<absl::Status()>& body) override {
    auto work = arena_->Capture([&]() -> absl::Status {
      // Inside the arena's capture: the current stream is the one captured.
      RETURN_IF_ERROR(backend_->BeginCapture(c10::cuda::getCurrentCUDAStream().stream()));
      absl::Status s;
      try {
        s = body();
      } catch (...) {
        backend_->EndCapture();
        throw;
      }
      backend_->EndCapture();
      return s;
    });
    if (!work.ok()) return work.status();
    return std::make_unique<BackendCapturedWork>(std::move(*work), backend_);
  }
  int64_t bytes() const override { return arena_->bytes(); }

 private:
  const std::unique_ptr<ComputeDevice::CaptureArena> arena_;
  DeviceBackend* const backend_;
};

class CudaDevice final : public ComputeDevice {
 public:
  CudaDevice(std::unique_ptr<cuda::ManagedMemoryPool> pool, c10::cuda::CUDAStream stream)
      : pool_(std::move(pool)),
        scope_(std::make_unique<cuda::ManagedMemoryPool::Scope>(pool_.get())),
        stream_(stream) {}
  ~CudaDevice() override {
    // The model's tensors are gone by now (the daemon destroys its models first); the scope ends before
    // the pool does.
    backend_.reset();
    scope_.reset();
  }

  std::string_view kind() const override { return "cuda"; }
  DeviceBackend* backend() override { return backend_.get(); }
  int64_t managed_bytes() const override { return pool_->allocated_bytes(); }
  std::unique_ptr<ThreadScope> Enter() override { return std::make_unique<StreamScope>(stream_); }
  absl::Status WaitForStream() override {
    try {
      c10::cuda::getCurrentCUDAStream().synchronize();
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("waiting for the compute stream: ", e.what()));
    }
    return absl::OkStatus();
  }
  absl::Status MarkCapturedOutputs() override { return cuda::MarkCapturedOutputs(); }
  absl::StatusOr<std::unique_ptr<CaptureArena>> NewCaptureArena() override {
    return std::make_unique<BackendCaptureArena>(pool_->NewCaptureArena(), backend_.get());
  }

  // The CUDA backend, behind one lock: each model's session drives it from the model's own thread
  // (runtime/serialized_backend.h).
  std::unique_ptr<SerializedBackend> backend_;

 private:
  std::unique_ptr<cuda::ManagedMemoryPool> pool_;
  // Note [One managed scope]: PyTorch routes a device's allocations to a pool for every thread while a
  // begin/endAllocateToPool pair is open, so one scope held for the process's life puts every model's
  // weights, caches and activations in managed memory, from whichever thread allocates them.
  std::unique_ptr<cuda::ManagedMemoryPool::Scope> scope_;
  c10::cuda::CUDAStream stream_;
};

}  // namespace

std::vector<std::string> ComputeBackends() { return {"cpu", "cuda"}; }

absl::StatusOr<std::unique_ptr<ComputeDevice>> OpenComputeDevice(const ComputeDeviceOptions& options) {
  if (options.backend == "cpu") return NewCpuDevice();
  if (options.backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("runtime.backend: '", options.backend, "' is not one of cpu, cuda"));
  }
#if AUTOUVM_LAYER_OPS
  cuda::LayerOpsLinked();  // Note [Own layer kernels] (engine/llama_module.cc): its ops are registered
#endif
  ASSIGN_OR_RETURN(const int64_t cap, cuda::ManagedMemoryPool::CapFromEnvironment());
  ASSIGN_OR_RETURN(auto pool, cuda::ManagedMemoryPool::Create(
                                  0, {.cap_bytes = cap, .allow_oversubscription = options.allow_oversubscription}));
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true);
  auto device = std::make_unique<CudaDevice>(std::move(pool), stream);
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> backend,
                   cuda::CudaBackend::Create({.spec = options.spec,
                                              .cap_bytes = cap,
                                              .allow_oversubscription = options.allow_oversubscription,
                                              .compute_stream = stream.stream(),
                                              .code_host_copies = options.compress_streamed}));
  device->backend_ = std::make_unique<SerializedBackend>(std::move(backend));
  return device;
}

}  // namespace autouvm::runtime
