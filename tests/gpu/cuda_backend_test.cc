// The CUDA backend on a real GPU (tests/gpu: the GPU host). Without a device only the error path runs;
// the rest skip, saying so.
#include "runtime/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/gpu/have_device.h"

namespace autouvm::runtime::cuda {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

using autouvm::testing::HaveCudaDevice;

std::unique_ptr<CudaBackend> Backend(int64_t cap = kCapFromEnvironment) {
  auto backend = CudaBackend::Create({.device = 0, .spec = *FindGpuSpec("h200-pcie5"), .cap_bytes = cap});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(backend).value() : nullptr;
}

TEST(CudaBackendTest, WithoutADeviceCreateSaysWhy) {
  if (HaveCudaDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto backend = CudaBackend::Create({.spec = *FindGpuSpec("h200-pcie5")});
  ASSERT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(backend.status().message(), HasSubstr("no usable CUDA device"));
}

TEST(CudaBackendTest, AllocationsPastTheCapAreRefusedBeforeCudaIsAsked) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
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
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
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
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
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

  // Note [Counters without waiting]: without a flush of its own, a reading has what the backend's thread
  // delivered; within a few of its periods, the prefetch's bytes.
  const UvmCounters delivered_before = *gpu->DeliveredCounters();
  ASSERT_TRUE(gpu->Prefetch(*a, bytes, Location::kDevice, Stream::kCopy).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  ASSERT_GT(gpu->counter_lag_s(), 0);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(10 * gpu->counter_lag_s());
  int64_t delivered = 0;
  while ((delivered = (*gpu->DeliveredCounters() - delivered_before).h2d(MigrationCause::kUserPrefetch)) < bytes &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(delivered, bytes);
}

TEST(CudaBackendTest, EndingReadDuplicationWithTheHostPreferredCopiesNothingBack) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
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
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
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

// Note [Host copies outlive staging] on the GPU: a staged range put back on the device or on the host
// keeps its host copy (and its contents), a copy of a range still staged is freed only on request with
// its contents given up, and freeing the managed memory frees the copies of what it held.
TEST(CudaBackendTest, HostCopiesOutliveStagingUntilForgottenOrFreed) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  auto gpu = Backend();
  ASSERT_NE(gpu, nullptr);
  if (!gpu->can_stage()) GTEST_SKIP() << "staging needs CUDA 13";
  const int64_t bytes = 8 * kMiB;
  auto a = gpu->AllocateManaged(bytes);
  ASSERT_TRUE(a.ok()) << a.status();
  auto* host_view = reinterpret_cast<unsigned char*>(*a);
  std::memset(host_view, 7, static_cast<size_t>(bytes));  // written by the CPU: on the host
  auto byte_at = [&](int64_t offset) {
    unsigned char byte = 0;
    EXPECT_EQ(cudaMemcpy(&byte, host_view + offset, 1, cudaMemcpyDefault), cudaSuccess);
    return byte;
  };
  using Staging = DeviceBackend::Staging;
  using WhenStaged = DeviceBackend::WhenStaged;

  ASSERT_TRUE(gpu->StageOut(*a, bytes).ok());
  EXPECT_EQ(gpu->StagingOf(*a), Staging::kDiscarded);
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), bytes);
  // Used once (in, then dropped after its op, as the executor does), then put on the device for good.
  ASSERT_TRUE(gpu->StageIn(*a, bytes, Stream::kCopy).ok());
  gpu->WaitEvent(Stream::kCompute, gpu->RecordEvent(Stream::kCopy));
  ASSERT_TRUE(gpu->Discard(*a, bytes, Stream::kCompute).ok());
  const UvmCounters before_unstage = *gpu->ReadCounters();
  absl::Status to_device = gpu->Unstage(*a, bytes, Location::kDevice);
  ASSERT_TRUE(to_device.ok()) << to_device;
  ASSERT_TRUE(gpu->Synchronize().ok());
  EXPECT_EQ((*gpu->ReadCounters() - before_unstage).d2h_total(), 0);  // nothing went through the host side
  EXPECT_EQ(gpu->StagingOf(*a), Staging::kNone);
  EXPECT_EQ(*gpu->ResidentBytes(*a, bytes), bytes);
  EXPECT_EQ(byte_at(0), 7);
  EXPECT_EQ(byte_at(bytes - 1), 7);
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), bytes);  // kept for the next plan that stages it

  // Staged again from the kept copy, then put back on the host: the CPU reads it in place.
  ASSERT_TRUE(gpu->StageOut(*a, bytes).ok());
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), bytes);  // the same copy, not a second one
  absl::Status to_host = gpu->Unstage(*a, bytes, Location::kHost);
  ASSERT_TRUE(to_host.ok()) << to_host;
  EXPECT_EQ(host_view[12345], 7);
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), bytes);

  // A staged range's copy is its contents: refused, unless given up on purpose.
  ASSERT_TRUE(gpu->StageOut(*a, bytes).ok());
  EXPECT_EQ(gpu->ForgetHostCopies(*a, bytes, WhenStaged::kRefuse).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), bytes);
  ASSERT_TRUE(gpu->ForgetHostCopies(*a, bytes, WhenStaged::kDrop).ok());
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), 0);
  EXPECT_EQ(gpu->StagingOf(*a), Staging::kNone);

  // A kept copy goes with the memory it copies.
  ASSERT_TRUE(gpu->StageOut(*a, bytes).ok());
  ASSERT_TRUE(gpu->Unstage(*a, bytes, Location::kHost).ok());
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), bytes);
  ASSERT_TRUE(gpu->FreeManaged(*a).ok());
  EXPECT_EQ(gpu->HostCopyBytesWithin(*a, bytes), 0);
}

// Note [Host copies' memory]: a copy is filled by CPU threads from a range last prefetched to the host,
// by cudaMemcpy from one on the device; either way it holds every byte (a size that is no multiple of
// a page or of the copy threads' share), and staging the range in again, or putting it back on the
// host, brings them all back.
TEST(CudaBackendTest, HostCopiesHoldEveryByteWhereverTheRangeWas) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  auto gpu = Backend();
  ASSERT_NE(gpu, nullptr);
  if (!gpu->can_stage()) GTEST_SKIP() << "staging needs CUDA 13";
  const int64_t bytes = 96 * kMiB + 12345;  // six copy threads on the host path
  std::vector<unsigned char> pattern(static_cast<size_t>(bytes));
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>((i * 7 + i / 4096) % 251);
  for (const Location was : {Location::kHost, Location::kDevice}) {
    SCOPED_TRACE(was == Location::kHost ? "on the host" : "on the device");
    auto a = gpu->AllocateManaged(bytes);
    ASSERT_TRUE(a.ok()) << a.status();
    std::memcpy(reinterpret_cast<void*>(*a), pattern.data(), pattern.size());
    ASSERT_TRUE(gpu->Prefetch(*a, bytes, was, Stream::kCopy).ok());
    ASSERT_TRUE(gpu->Synchronize().ok());
    absl::Status out = gpu->StageOut(*a, bytes);
    ASSERT_TRUE(out.ok()) << out;
    ASSERT_TRUE(gpu->StageIn(*a, bytes, Stream::kCopy).ok());
    ASSERT_TRUE(gpu->Synchronize().ok());
    std::vector<unsigned char> back(pattern.size(), 0);
    ASSERT_EQ(cudaMemcpy(back.data(), reinterpret_cast<void*>(*a), back.size(), cudaMemcpyDefault), cudaSuccess);
    auto first_difference = [&] {
      return std::mismatch(back.begin(), back.end(), pattern.begin()).first - back.begin();
    };
    EXPECT_TRUE(back == pattern) << "staged in: first difference at byte " << first_difference();
    // Put back on the host (by CPU threads), where the CPU reads it in place.
    absl::Status to_host = gpu->Unstage(*a, bytes, Location::kHost);
    ASSERT_TRUE(to_host.ok()) << to_host;
    std::memcpy(back.data(), reinterpret_cast<const void*>(*a), back.size());
    EXPECT_TRUE(back == pattern) << "put back: first difference at byte " << first_difference();
    ASSERT_TRUE(gpu->FreeManaged(*a).ok());
  }
}

}  // namespace
}  // namespace autouvm::runtime::cuda
