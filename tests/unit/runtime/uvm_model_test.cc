// The simulated UVM driver state: faults, fault batches, the density prefetcher, eviction order and
// copy-back, read duplication, user prefetches and remote mapping.
#include "runtime/sim/uvm_model.h"

#include <gtest/gtest.h>

namespace autouvm::runtime::sim {
namespace {

constexpr int64_t kPage = 64 << 10;
constexpr int64_t kBlock = 2 << 20;

UvmModel Model(int64_t capacity_blocks) { return UvmModel({.device_capacity_bytes = capacity_blocks * kBlock}); }

TEST(UvmModelTest, AFaultMigratesThePageAlone) {
  UvmModel m = Model(8);
  m.Allocate(0, 2 * kBlock);
  m.GpuAccess(0, kPage, /*write=*/false);
  EXPECT_EQ(m.counters().gpu_faults, 1);
  EXPECT_EQ(m.counters().gpu_fault_groups, 1);
  EXPECT_EQ(m.counters().h2d(MigrationCause::kFault), kPage);
  EXPECT_EQ(m.counters().h2d(MigrationCause::kDriverPrefetch), 0);
  EXPECT_TRUE(m.OnDevice(0));
  EXPECT_FALSE(m.OnDevice(kPage));
  m.GpuAccess(0, kPage, false);  // resident now: no fault
  EXPECT_EQ(m.counters().gpu_faults, 1);
}

TEST(UvmModelTest, TheDensityPrefetcherCompletesABlockPastHalfButNotAtHalf) {
  UvmModel m = Model(8);
  m.Allocate(0, 2 * kBlock);
  m.GpuAccess(0, 16 * kPage, false);  // exactly half of the block: not more than 51%
  EXPECT_EQ(m.counters().h2d(MigrationCause::kDriverPrefetch), 0);
  EXPECT_FALSE(m.OnDevice(16 * kPage));
  m.GpuAccess(16 * kPage, kPage, false);  // 17 of 32: the whole block comes over
  EXPECT_EQ(m.counters().gpu_faults, 17);
  EXPECT_EQ(m.counters().h2d(MigrationCause::kDriverPrefetch), 15 * kPage);
  EXPECT_TRUE(m.OnDevice(31 * kPage));
  EXPECT_FALSE(m.OnDevice(kBlock));  // never across the block
}

TEST(UvmModelTest, ASmallerRegionIsCompletedWhenItIsDenseEnough) {
  UvmModel m = Model(8);
  m.Allocate(0, kBlock);
  m.GpuAccess(0, 2 * kPage, false);      // pages 0, 1
  m.GpuAccess(4 * kPage, kPage, false);  // page 4: region [0, 8) has 3 of 8; [4, 8) 1 of 4; [4, 6) 1 of 2
  EXPECT_EQ(m.counters().h2d(MigrationCause::kDriverPrefetch), 0);
  // Page 2: [0, 8) holds 4 of 8 (not more than 51%), [0, 4) holds 3 of 4, so page 3 comes too. The region
  // is chosen once, from what is resident or faulted before it: no second round with page 3 counted.
  m.GpuAccess(2 * kPage, kPage, false);
  EXPECT_TRUE(m.OnDevice(3 * kPage));
  EXPECT_FALSE(m.OnDevice(5 * kPage));
  EXPECT_EQ(m.counters().h2d(MigrationCause::kDriverPrefetch), kPage);
}

TEST(UvmModelTest, FaultsAreServicedInBatchesOf256) {
  UvmModel m = Model(64);
  m.Allocate(0, 16 * kBlock);          // 512 pages
  m.GpuAccess(0, 16 * kBlock, false);  // every page faults
  EXPECT_EQ(m.counters().gpu_faults, 512);
  EXPECT_EQ(m.counters().gpu_fault_groups, 2);
}

TEST(UvmModelTest, EvictionTakesTheOldestAllocatedChunkNotTheLeastRecentlyUsed) {
  UvmModel m = Model(2);
  m.Allocate(0, 3 * kBlock);               // blocks A, B, C
  m.GpuAccess(0, kBlock, false);           // A
  m.GpuAccess(kBlock, kBlock, false);      // B
  m.GpuAccess(0, kBlock, false);           // A again: used most recently, still the oldest chunk
  m.GpuAccess(2 * kBlock, kBlock, false);  // C needs room
  EXPECT_EQ(m.counters().evictions, 1);
  EXPECT_FALSE(m.OnDevice(0));
  EXPECT_TRUE(m.OnDevice(kBlock));
  EXPECT_TRUE(m.OnDevice(2 * kBlock));
  EXPECT_EQ(m.device_bytes(), 2 * kBlock);
}

TEST(UvmModelTest, EvictionCopiesBackMigratedPagesAndDropsReadDuplicates) {
  UvmModel m = Model(1);
  m.Allocate(0, 3 * kBlock);
  m.GpuAccess(0, kBlock, false);  // migrated: the host copy is gone
  m.GpuAccess(kBlock, kBlock, false);
  EXPECT_EQ(m.counters().d2h(MigrationCause::kEviction), kBlock);
  EXPECT_EQ(m.counters().dropped_bytes, 0);

  m.SetReadMostly(2 * kBlock, kBlock, true);
  m.GpuAccess(2 * kBlock, kBlock, false);  // evicts B (copied back); C is read-duplicated
  m.GpuAccess(0, kBlock, false);           // evicts C: dropped, no copy
  EXPECT_EQ(m.counters().d2h(MigrationCause::kEviction), 2 * kBlock);
  EXPECT_EQ(m.counters().dropped_bytes, kBlock);
}

TEST(UvmModelTest, AWriteEndsReadDuplication) {
  UvmModel m = Model(1);
  m.Allocate(0, 2 * kBlock);
  m.SetReadMostly(0, kBlock, true);
  m.GpuAccess(0, kBlock, /*write=*/true);
  m.GpuAccess(kBlock, kBlock, false);  // evicts A, whose pages were written on the GPU
  EXPECT_EQ(m.counters().d2h(MigrationCause::kEviction), kBlock);
  EXPECT_EQ(m.counters().dropped_bytes, 0);
}

TEST(UvmModelTest, UserPrefetchesMoveDataWithoutFaults) {
  UvmModel m = Model(4);
  m.Allocate(0, kBlock);
  m.Prefetch(0, kBlock, Location::kDevice);
  EXPECT_EQ(m.counters().h2d(MigrationCause::kUserPrefetch), kBlock);
  m.GpuAccess(0, kBlock, /*write=*/true);
  EXPECT_EQ(m.counters().gpu_faults, 0);
  m.Prefetch(0, kBlock, Location::kHost);
  EXPECT_EQ(m.counters().d2h(MigrationCause::kUserPrefetch), kBlock);
  EXPECT_FALSE(m.OnDevice(0));
  EXPECT_EQ(m.device_bytes(), 0);
}

TEST(UvmModelTest, RemoteRangesAreReadInPlace) {
  UvmModel m = Model(4);
  m.Allocate(0, kBlock);
  m.SetRemote(0, kBlock, true);
  m.GpuAccess(0, kBlock, false);
  EXPECT_EQ(m.counters().remote_bytes, kBlock);
  EXPECT_EQ(m.counters().gpu_faults, 0);
  EXPECT_FALSE(m.OnDevice(0));
}

TEST(UvmModelTest, FreeingReleasesDeviceMemory) {
  UvmModel m = Model(1);
  m.Allocate(0, kBlock);
  m.Allocate(kBlock, kBlock);
  m.GpuAccess(0, kBlock, false);
  m.Free(0);
  EXPECT_EQ(m.device_bytes(), 0);
  m.GpuAccess(kBlock, kBlock, false);  // no eviction needed: the freed chunk is gone
  EXPECT_EQ(m.counters().evictions, 0);
}

TEST(UvmModelTest, AKernelRaisesItsEntriesPerPageAndPagesItLostToItsOwnEvictionsFaultAgain) {
  UvmModel m = Model(1);
  m.Allocate(0, 2 * kBlock);
  m.Kernel({{0, kBlock, false, 16.0}});  // 32 pages, 16 entries each: two batches
  EXPECT_EQ(m.counters().gpu_faults, 512);
  EXPECT_EQ(m.counters().gpu_fault_groups, 2);
  // Touches B (a full batch: 32 pages x 8 entries), then A again: B's batch evicts A, which faults back.
  m.Kernel({{kBlock, kBlock, false, 8.0}, {0, kBlock, false, 1.0}});
  EXPECT_EQ(m.counters().evictions, 2);
  EXPECT_EQ(m.counters().thrashing, 32);  // A's pages, back after their eviction
  EXPECT_TRUE(m.OnDevice(0));
}

TEST(UvmModelTest, DroppingDeviceCopiesNeverCopiesBack) {
  UvmModel m = Model(4);
  m.Allocate(0, 2 * kBlock);
  m.SetReadMostly(0, kBlock, true);
  m.GpuAccess(0, kBlock, false);                         // duplicated
  m.GpuAccess(kBlock, kBlock, true);                     // migrated and written
  m.DropDeviceCopies(0, 2 * kBlock, /*discard=*/false);  // only the duplicates go
  EXPECT_EQ(m.ResidentBytes(0, 2 * kBlock), kBlock);
  m.DropDeviceCopies(0, 2 * kBlock, /*discard=*/true);
  EXPECT_EQ(m.ResidentBytes(0, 2 * kBlock), 0);
  EXPECT_EQ(m.counters().dropped_bytes, 2 * kBlock);
  EXPECT_EQ(m.counters().d2h_total(), 0);
}

TEST(UvmModelTest, EndingReadDuplicationKeepsOneCopyWhereAsked) {
  UvmModel m = Model(1);
  m.Allocate(0, 2 * kBlock);
  m.SetReadMostly(0, 2 * kBlock, true);
  m.GpuAccess(0, kBlock, false);
  m.SetReadMostly(0, kBlock, false, Location::kDevice);  // the device keeps the only copy
  m.GpuAccess(kBlock, kBlock, false);                    // evicting A now copies it back
  EXPECT_EQ(m.counters().d2h(MigrationCause::kEviction), kBlock);
  m.SetReadMostly(kBlock, kBlock, false, Location::kHost);  // B's device copy dropped at once
  EXPECT_EQ(m.ResidentBytes(kBlock, kBlock), 0);
  EXPECT_EQ(m.counters().dropped_bytes, kBlock);
}

// As on the H200 (offload_bench's drop probe): a prefetch to the host leaves a read duplicate's device
// copy where it is, and moves a migrated page back.
TEST(UvmModelTest, APrefetchToTheHostKeepsAReadDuplicateOnTheDevice) {
  UvmModel m = Model(4);
  m.Allocate(0, 2 * kBlock);
  m.SetReadMostly(0, kBlock, true);
  m.GpuAccess(0, 2 * kBlock, false);  // the first block duplicated, the second migrated
  m.Prefetch(0, 2 * kBlock, Location::kHost);
  EXPECT_EQ(m.ResidentBytes(0, kBlock), kBlock);
  EXPECT_EQ(m.ResidentBytes(kBlock, kBlock), 0);
  EXPECT_EQ(m.counters().d2h(MigrationCause::kUserPrefetch), kBlock);
  EXPECT_EQ(m.counters().dropped_bytes, 0);
}

}  // namespace
}  // namespace autouvm::runtime::sim
