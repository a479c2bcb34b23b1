// ComputeDevice: where the daemon's models compute — the CPU, or a CUDA GPU whose PyTorch allocations go
// to managed memory (runtime/cuda/managed_memory.h) and whose unified memory the executor drives through
// a DeviceBackend (runtime/cuda/cuda_backend.h). The daemon opens one per process, from runtime.backend.
//
//   ASSIGN_OR_RETURN(auto device, OpenComputeDevice({.backend = "cuda", .spec = spec}));
//   auto on = device->Enter();   // on a model's thread, around its iterations
//
// The implementation is chosen by the build: runtime/compute_device_cpu.cc where libtorch has no CUDA,
// runtime/cuda/compute_device.cc where it has (no #ifdef outside runtime/cuda/).
//
// Thread-safety: Enter may be called from any thread; backend() is the process's one backend, which the
// models' threads share, call by call (runtime/serialized_backend.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/device_backend.h"
#include "runtime/gpu_spec.h"

namespace autouvm::runtime {

class ComputeDevice {
 public:
  virtual ~ComputeDevice() = default;
  virtual std::string_view kind() const = 0;  // "cpu" or "cuda"
  // The unified memory the executor drives; null on the CPU (where the daemon mirrors it on a SimBackend).
  virtual DeviceBackend* backend() = 0;
  // Managed bytes the process has allocated (0 on the CPU).
  virtual int64_t managed_bytes() const = 0;

  // While the returned scope lives, the calling thread computes on the device's compute stream (the one
  // backend() orders its work against). Null on the CPU.
  class ThreadScope {
   public:
    virtual ~ThreadScope() = default;
  };
  virtual std::unique_ptr<ThreadScope> Enter() = 0;
  // Waits for the work the calling thread has queued on its current stream (inside Enter()): its copies
  // into pinned host memory may then be read. Nothing to wait for on the CPU.
  virtual absl::Status WaitForStream() { return absl::OkStatus(); }
  // Inside a capture's body (CaptureArena::Capture): the work launched so far on the current stream is
  // what the captured work's Wait() waits for; what follows it (a staged pass's copies issued ahead for
  // the next pass, Note [Staged passes captured], runtime/executor_capture.cc) goes on after Wait()
  // returns. Outside a capture, and on the CPU, nothing.
  virtual absl::Status MarkCapturedOutputs() { return absl::OkStatus(); }

  // Note [Captured steps] (engine/step_graphs.cc): work captured once as a CUDA graph and launched again
  // with one call. Its allocations come from an arena of its own, which holds them while the arena lives,
  // so that no other tensor is ever placed where a replay writes.
  class CapturedWork {
   public:
    virtual ~CapturedWork() = default;
    // Launches the captured work again on the compute stream (inside Enter()).
    virtual absl::Status Replay() = 0;
    // Waits for the last replay to finish (its outputs in host memory may then be read), or for the part
    // of it its capture marked (ComputeDevice::MarkCapturedOutputs).
    virtual absl::Status Wait() { return absl::OkStatus(); }
  };
  class CaptureArena {
   public:
    virtual ~CaptureArena() = default;
    // Captures what `body` launches from the calling thread (inside Enter()): while it runs, that
    // thread's current stream is one of the arena's own, so other threads' work on the compute stream
    // stays out of the graph. Nothing of it runs. An error from `body` or from CUDA (something it
    // launched cannot be captured) leaves nothing captured and the streams as they were. What the
    // thread asks of backend() meanwhile is captured too (DeviceBackend::BeginCapture: the executor's
    // copies into its device buffer, Note [Staged passes captured]); a replay starts after the work
    // queued on the backend's streams before it, and their next work waits for it.
    virtual absl::StatusOr<std::unique_ptr<CapturedWork>> Capture(const std::function<absl::Status()>& body) = 0;
    virtual int64_t bytes() const = 0;  // managed memory the arena holds for its captured work
  };
  // UNIMPLEMENTED where nothing can be captured (the CPU). The arena lives no longer than the device.
  virtual absl::StatusOr<std::unique_ptr<CaptureArena>> NewCaptureArena() {
    return absl::UnimplementedError(absl::StrCat("the ", std::string(kind()), " device captures no graphs"));
  }
};

struct ComputeDeviceOptions {
  std::string backend = "cpu";  // runtime.backend
  GpuSpec spec;                 // runtime.gpu: what the backend reports its spec to be
  // May the process's managed memory exceed the card's free memory (AUTOUVM_MAX_MANAGED_BYTES caps it
  // either way)?
  bool allow_oversubscription = false;
  // Staged weights cross the link exponent-coded (runtime.compress_streamed; CUDA only).
  bool compress_streamed = false;
};

// The CPU (runtime/compute_device.cc): no backend, no managed memory, no stream.
std::unique_ptr<ComputeDevice> NewCpuDevice();

// INVALID_ARGUMENT naming runtime.backend for a backend this build does not have; UNAVAILABLE when
// CUDA finds no usable device.
absl::StatusOr<std::unique_ptr<ComputeDevice>> OpenComputeDevice(const ComputeDeviceOptions& options);
// The backends this build can open: "cpu", and "cuda" where libtorch has CUDA.
std::vector<std::string> ComputeBackends();

}  // namespace autouvm::runtime
