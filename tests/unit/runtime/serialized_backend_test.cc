// SerializedBackend: several threads driving one backend (the simulator, which is not thread-safe by
// itself) through it, as the models' sessions drive the daemon's CUDA backend (runtime/serialized_backend.h).
#include "runtime/serialized_backend.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "runtime/sim/sim_backend.h"

namespace autouvm::runtime {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int kThreads = 4;

std::unique_ptr<DeviceBackend> Sim() {
  auto sim = sim::SimBackend::Create({.spec = *FindGpuSpec("h200-pcie5"), .device_budget_bytes = 4096 * kMiB});
  EXPECT_TRUE(sim.ok()) << sim.status();
  return std::move(*sim);
}

// One model's worth of calls: its own ranges, moved back and forth, touched and freed.
absl::Status Work(DeviceBackend* b) {
  std::vector<uint64_t> mine;
  for (int r = 0; r < 8; ++r) {
    absl::StatusOr<uint64_t> addr = b->AllocateManaged(kMiB);
    if (!addr.ok()) return addr.status();
    mine.push_back(*addr);
  }
  for (int round = 0; round < 20; ++round) {
    for (uint64_t a : mine) {
      const Location to = round % 2 == 0 ? Location::kDevice : Location::kHost;
      if (absl::Status s = b->Prefetch(a, kMiB, to, Stream::kCopy); !s.ok()) return s;
    }
    b->RecordEvent(Stream::kCopy);
  }
  if (absl::Status s = b->Synchronize(); !s.ok()) return s;
  for (uint64_t a : mine) {
    if (absl::Status s = b->FreeManaged(a); !s.ok()) return s;
  }
  return absl::OkStatus();
}

TEST(SerializedBackendTest, ThreadsAtOnceMoveWhatTheSameCallsOneAfterAnotherMove) {
  std::unique_ptr<DeviceBackend> alone = Sim();
  for (int t = 0; t < kThreads; ++t) ASSERT_TRUE(Work(alone.get()).ok());
  const absl::StatusOr<UvmCounters> expected = alone->ReadCounters();
  ASSERT_TRUE(expected.ok());
  ASSERT_GT(expected->h2d_total() + expected->d2h_total(), 0);

  SerializedBackend shared(Sim());
  EXPECT_EQ(shared.kind(), "sim");
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { results[t] = Work(&shared); });
  for (std::thread& th : threads) th.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  const absl::StatusOr<UvmCounters> got = shared.ReadCounters();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->h2d_total(), expected->h2d_total());
  EXPECT_EQ(got->d2h_total(), expected->d2h_total());
}

}  // namespace
}  // namespace autouvm::runtime
