// ManagedMemoryPool: puts PyTorch's CUDA tensors in CUDA managed (unified) memory, so that a model runs
// unchanged while the runtime moves its pages. PyTorch's caching allocator keeps working on top: the
// pool only replaces where its segments come from (a MemPool whose allocator calls cudaMallocManaged).
//
//   ASSIGN_OR_RETURN(auto pool, ManagedMemoryPool::Create(/*device=*/0, limits));
//   { ManagedMemoryPool::Scope scope(pool.get());  module.to(torch::kCUDA);  ... }   // managed
//
// Every allocation is checked first (Note [Managed memory limits]): past the cap or past the card's
// free memory without allow_oversubscription, it is refused, with the reason in last_refusal(), and
// PyTorch reports an out-of-memory error. Built only where libtorch has CUDA (runtime/cuda/).
//
// Thread-safety: the counters are atomic and the allocator callbacks may run on any thread; a Scope
// routes the allocations of the thread that holds it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/compute_device.h"

namespace autouvm::runtime::cuda {

struct ManagedMemoryLimits {
  int64_t cap_bytes = 0;                // 0: no cap of our own
  bool allow_oversubscription = false;  // may the total exceed the card's free memory at creation?
};

class ManagedMemoryPool {
 public:
  // Initializes CUDA on `device` if needed. INVALID_ARGUMENT for a bad device.
  static absl::StatusOr<std::unique_ptr<ManagedMemoryPool>> Create(int device, ManagedMemoryLimits limits);
  // AUTOUVM_MAX_MANAGED_BYTES as a cap (0 when unset); INVALID_ARGUMENT naming the variable if malformed.
  static absl::StatusOr<int64_t> CapFromEnvironment();
  ~ManagedMemoryPool();

  class Scope {
   public:
    explicit Scope(ManagedMemoryPool* pool);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ManagedMemoryPool* pool_;
  };

  // Captured work's allocations, in managed memory of this pool's limits and counts, but in a PyTorch
  // pool of the arena's own (Note [Captured steps' allocations], managed_memory.cc). The arena lives no
  // longer than this pool; the work it captured and the tensors made by that work go before it.
  std::unique_ptr<ComputeDevice::CaptureArena> NewCaptureArena();

  int64_t allocated_bytes() const { return allocated_.load(); }
  int64_t peak_bytes() const { return peak_.load(); }
  int64_t free_bytes_at_start() const { return free_at_start_; }
  std::string last_refusal() const;

  struct Impl;

 private:
  friend class ManagedCaptureArena;
  ManagedMemoryPool(int device, ManagedMemoryLimits limits, int64_t free_at_start);
  void* Allocate(size_t bytes);
  void Free(void* ptr, size_t bytes);

  const int device_;
  const ManagedMemoryLimits limits_;
  const int64_t free_at_start_;
  std::atomic<int64_t> allocated_{0};
  std::atomic<int64_t> peak_{0};
  mutable std::mutex refusal_mu_;
  std::string last_refusal_;  // guarded by refusal_mu_
  std::unique_ptr<Impl> impl_;
};

// ComputeDevice::MarkCapturedOutputs on CUDA: while the calling thread captures for an arena of this
// file's, an event recorded on its current stream as a node of the graph; the captured work's Wait()
// waits for that event. Nothing outside a capture.
absl::Status MarkCapturedOutputs();

// True if `ptr` points into CUDA managed memory.
bool IsManagedPointer(const void* ptr);

}  // namespace autouvm::runtime::cuda
