#include "runtime/cuda/managed_memory.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/device_backend.h"

namespace autouvm::runtime::cuda {

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
                                                       pool_->impl_->pool->id(), [](cudaStream_t) { return true; });
}

ManagedMemoryPool::Scope::~Scope() {
  c10::cuda::CUDACachingAllocator::endAllocateToPool(static_cast<c10::DeviceIndex>(pool_->device_),
                                                     pool_->impl_->pool->id());
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
