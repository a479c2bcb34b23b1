// The CUDA backend on a real GPU (tests/gpu: the GPU host). Without a device only the error path runs;
// the rest skip, saying so.
#include "runtime/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace autouvm::runtime::cuda {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

bool HaveDevice() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return ok;
}

std::unique_ptr<CudaBackend> Backend(int64_t cap = kCapFromEnvironment) {
  auto backend = CudaBackend::Create({.device = 0, .spec = *FindGpuSpec("h200-pcie5"), .cap_bytes = cap});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(backend).value() : nullptr;
}

TEST(CudaBackendTest, WithoutADeviceCreateSaysWhy) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto backend = CudaBackend::Create({.spec = *FindGpuSpec("h200-pcie5")});
  ASSERT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(backend.status().message(), HasSubstr("no usable CUDA device"));
}

TEST(CudaBackendTest, AllocationsPastTheCapAreRefusedBeforeCudaIsAsked) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto gpu = Backend(/*cap=*/64 * kMiB);
  ASSERT_NE(gpu, nullptr);
  auto first = gpu->AllocateManaged(48 * kMiB);
  ASSERT_TRUE(first.ok()) << first.status();
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(*first)), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeManaged);
  auto refused = gpu->AllocateManaged(32 * kMiB);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("AUTOUVM_MAX_MANAGED_BYTES"));
  EXPECT_EQ(gpu->allocated_bytes(), 48 * kMiB);
  EXPECT_TRUE(gpu->FreeManaged(*first).ok());
  EXPECT_EQ(gpu->FreeManaged(*first).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaBackendTest, WithoutOversubscriptionAllocationsPastFreeMemoryAreRefused) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (bool oversubscribe : {false, true}) {
    // The free memory is taken as 64 MiB so that the refusal is tested without nearing the card's.
    auto gpu = CudaBackend::Create({.spec = *FindGpuSpec("h200-pcie5"),
                                    .cap_bytes = 0,
                                    .allow_oversubscription = oversubscribe,
                                    .counters = false,
                                    .device_free_bytes = 64 * kMiB});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ((*gpu)->free_bytes_at_start(), 64 * kMiB);
    auto a = (*gpu)->AllocateManaged(80 * kMiB);
    if (oversubscribe) {
      EXPECT_TRUE(a.ok()) << a.status();
    } else {
      ASSERT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_THAT(a.status().message(), HasSubstr("memory.allow_oversubscription"));
      EXPECT_EQ((*gpu)->allocated_bytes(), 0);
    }
    EXPECT_EQ((*gpu)->ReadCounters().status().code(), absl::StatusCode::kUnavailable);  // not requested
  }
}

TEST(CudaBackendTest, TheCountersSeeExactlyTheBytesAPrefetchMoves) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto gpu = Backend();
  ASSERT_NE(gpu, nullptr);
  auto before = gpu->ReadCounters();
  ASSERT_TRUE(before.ok()) << before.status();
  const int64_t bytes = 256 * kMiB;
  auto a = gpu->AllocateManaged(bytes);
  ASSERT_TRUE(a.ok()) << a.status();
  std::memset(reinterpret_cast<void*>(*a), 1, static_cast<size_t>(bytes));  // written by the CPU: on the host
  const UvmCounters start = *gpu->ReadCounters();
  ASSERT_TRUE(gpu->Prefetch(*a, bytes, Location::kDevice, Stream::kCopy).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  UvmCounters moved = *gpu->ReadCounters() - start;
  EXPECT_EQ(moved.h2d(MigrationCause::kUserPrefetch), bytes);
  EXPECT_EQ(*gpu->ResidentBytes(*a, bytes), bytes);

  const UvmCounters mid = *gpu->ReadCounters();
  ASSERT_TRUE(gpu->Prefetch(*a, bytes, Location::kHost, Stream::kCopy).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  moved = *gpu->ReadCounters() - mid;
  EXPECT_EQ(moved.d2h(MigrationCause::kUserPrefetch), bytes);
  EXPECT_EQ(*gpu->ResidentBytes(*a, bytes), 0);
}

TEST(CudaBackendTest, EndingReadDuplicationWithTheHostPreferredCopiesNothingBack) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto gpu = Backend();
  ASSERT_NE(gpu, nullptr);
  const int64_t bytes = 128 * kMiB;
  auto a = gpu->AllocateManaged(bytes);
  ASSERT_TRUE(a.ok()) << a.status();
  std::memset(reinterpret_cast<void*>(*a), 2, static_cast<size_t>(bytes));  // on the host
  const UvmCounters before_rm = *gpu->ReadCounters();
  ASSERT_TRUE(gpu->Advise(*a, bytes, Advice::kReadMostly, true, Location::kDevice).ok());
  ASSERT_TRUE(gpu->Prefetch(*a, bytes, Location::kDevice, Stream::kCopy).ok());  // a read-only copy
  ASSERT_TRUE(gpu->Synchronize().ok());
  const UvmCounters start = *gpu->ReadCounters();
  ASSERT_TRUE(gpu->Advise(*a, bytes, Advice::kPreferredLocation, true, Location::kHost).ok());
  ASSERT_TRUE(gpu->Advise(*a, bytes, Advice::kReadMostly, false, Location::kDevice).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  const UvmCounters after = *gpu->ReadCounters() - start;
  EXPECT_EQ((start - before_rm).h2d(MigrationCause::kUserPrefetch), bytes);  // the duplicate was made
  EXPECT_EQ(after.d2h_total(), 0);
  // The data is still there, read from the host copy.
  unsigned char byte = 0;
  ASSERT_EQ(cudaMemcpy(&byte, reinterpret_cast<void*>(*a + 12345), 1, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(byte, 2);
}

TEST(CudaBackendTest, DiscardAndEventsWork) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto gpu = Backend();
  ASSERT_NE(gpu, nullptr);
  const int64_t bytes = 64 * kMiB;
  auto a = gpu->AllocateManaged(bytes);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(gpu->Prefetch(*a, bytes, Location::kDevice, Stream::kCopy).ok());
  const EventId ready = gpu->RecordEvent(Stream::kCopy);
  gpu->WaitEvent(Stream::kCompute, ready);
  absl::Status discarded = gpu->Discard(*a, bytes, Stream::kCompute);
  EXPECT_TRUE(discarded.ok()) << discarded;
  EXPECT_TRUE(gpu->Synchronize().ok());
  // A discarded range needs no copy back: prefetching it to the host moves at most what was rewritten.
  const UvmCounters start = *gpu->ReadCounters();
  ASSERT_TRUE(gpu->Prefetch(*a, bytes, Location::kHost, Stream::kCopy).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  EXPECT_LT((*gpu->ReadCounters() - start).d2h_total(), bytes);
}

}  // namespace
}  // namespace autouvm::runtime::cuda
