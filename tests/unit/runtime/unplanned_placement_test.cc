// The weights' placement while no plan owns their residency (Note [The budget from load],
// runtime/unplanned_placement.cc), on the simulated backend: what it keeps on the device as a model loads
// and afterwards, and that an iteration with no plan then reads the rest in place without faulting it in.
#include "runtime/unplanned_placement.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/sim/sim_backend.h"

namespace autouvm::runtime {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

class UnplannedPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spec = FindGpuSpec("h200-pcie5");
    ASSERT_TRUE(spec.ok());
    auto sim = sim::SimBackend::Create({.spec = *spec, .allow_oversubscription = true});
    ASSERT_TRUE(sim.ok()) << sim.status();
    sim_ = std::move(*sim);
    // A small model's weights as they come: 8 matrices of 64 MiB with a 64 KiB norm after each.
    for (int i = 0; i < 8; ++i) {
      for (const int64_t bytes : {64 * kMiB, 64 * int64_t{1024}}) {
        auto addr = sim_->AllocateManaged(bytes);
        ASSERT_TRUE(addr.ok());
        weights_.push_back({*addr, bytes});
      }
    }
  }
  int64_t Resident() {
    int64_t sum = 0;
    for (const auto& [addr, bytes] : weights_) sum += *sim_->ResidentBytes(addr, bytes);
    return sum;
  }
  // One iteration with no plan: a kernel reading every weight, in order.
  void ReadAll() {
    for (const auto& [addr, bytes] : weights_) {
      sim_->Launch({.name = "gemv", .ranges = {{.addr = addr, .bytes = bytes}}, .flops = 2.0 * bytes / 2});
    }
    ASSERT_TRUE(sim_->Synchronize().ok());
  }

  std::unique_ptr<sim::SimBackend> sim_;
  std::vector<std::pair<uint64_t, int64_t>> weights_;
};

constexpr int64_t kAll = 8 * 64 * kMiB + 8 * 64 * 1024;

// A model over its budget: each weight of 2 MiB or more goes to the host as it arrives and is read in place,
// so the device never holds more than one of them; an iteration with no plan reads them without a fault.
TEST_F(UnplannedPlacementTest, AModelPlacedAsItLoadsIsNeverMoreThanOneWeightOverItsBudget) {
  const int64_t budget = 200 * kMiB;
  UnplannedPlacement place(sim_.get(), budget);
  for (const auto& [addr, bytes] : weights_) {
    ASSERT_TRUE(sim_->Prefetch(addr, bytes, Location::kDevice, Stream::kCompute).ok());  // its copy in
    ASSERT_TRUE(place.Place(addr, bytes, kAll).ok());
    ASSERT_TRUE(sim_->Synchronize().ok());
    EXPECT_LE(Resident(), 64 * kMiB + 8 * 64 * 1024);
  }
  EXPECT_EQ(place.kept_bytes(), 8 * 64 * 1024);  // the norms, which share VA blocks on CUDA
  EXPECT_EQ(place.in_place_bytes(), 8 * 64 * kMiB);
  EXPECT_EQ(Resident(), place.kept_bytes());

  const UvmCounters before = *sim_->ReadCounters();
  ReadAll();
  const UvmCounters moved = *sim_->ReadCounters() - before;
  EXPECT_EQ(moved.gpu_faults, 0);
  EXPECT_EQ(moved.h2d_total(), 0);
  EXPECT_EQ(moved.remote_bytes, 8 * 64 * kMiB);
  EXPECT_EQ(Resident(), place.kept_bytes());
}

TEST_F(UnplannedPlacementTest, AModelWithinItsBudgetStaysOnTheDevice) {
  UnplannedPlacement place(sim_.get(), kAll);
  for (const auto& [addr, bytes] : weights_) {
    ASSERT_TRUE(sim_->Prefetch(addr, bytes, Location::kDevice, Stream::kCompute).ok());
    ASSERT_TRUE(place.Place(addr, bytes, kAll).ok());
  }
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_EQ(place.kept_bytes(), kAll);
  EXPECT_EQ(place.in_place_bytes(), 0);
  EXPECT_EQ(Resident(), kAll);
}

// A plan held the residency and pinned four weights; before an iteration with no plan they stay while
// they fit beside the KV rows in use, and the rest is read in place; nothing is brought in.
TEST_F(UnplannedPlacementTest, WhatTheLastPlanLeftStaysWhileItFitsBesideTheKvRows) {
  UnplannedPlacement place(sim_.get(), 280 * kMiB);
  for (const auto& [addr, bytes] : weights_) place.Add(addr, bytes);  // loaded on the host
  for (size_t i = 0; i < 8; i += 2) {                                 // the plan's pins: matrices 0, 1, 2 and 3
    ASSERT_TRUE(sim_->Prefetch(weights_[i].first, weights_[i].second, Location::kDevice, Stream::kCopy).ok());
  }
  ASSERT_TRUE(sim_->Synchronize().ok());
  ASSERT_TRUE(place.Apply(0).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_EQ(place.kept_bytes(), 4 * 64 * kMiB + 8 * 64 * 1024);
  EXPECT_EQ(Resident(), 4 * 64 * kMiB);  // the norms were never touched on the simulator
  ASSERT_TRUE(place.Apply(70 * kMiB).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_EQ(place.kept_bytes(), 3 * 64 * kMiB + 8 * 64 * 1024);
  EXPECT_EQ(Resident(), 3 * 64 * kMiB);
  EXPECT_LE(place.kept_bytes() + 70 * kMiB, 280 * kMiB);
  const UvmCounters before = *sim_->ReadCounters();
  ReadAll();
  const UvmCounters moved = *sim_->ReadCounters() - before;
  EXPECT_LE(moved.h2d_total(), 8 * 2 * kMiB) << "only the eight norms fault in";
  EXPECT_EQ(moved.remote_bytes, 5 * 64 * kMiB);
}

// Lift() hands the weights to a plan (here: it pins all eight), and the next Apply() puts them back
// within the budget, read in place past it.
TEST_F(UnplannedPlacementTest, AfterAPlanLetsGoTheWeightsAreBackWithinTheBudget) {
  const int64_t budget = 200 * kMiB;
  UnplannedPlacement place(sim_.get(), budget);
  for (const auto& [addr, bytes] : weights_) place.Add(addr, bytes);
  ASSERT_TRUE(place.Apply(0).ok());
  ASSERT_TRUE(place.Lift().ok());
  EXPECT_FALSE(place.applied());
  for (const auto& [addr, bytes] : weights_) {
    ASSERT_TRUE(sim_->Prefetch(addr, bytes, Location::kDevice, Stream::kCopy).ok());
  }
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_EQ(Resident(), kAll);
  ASSERT_TRUE(place.Apply(0).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_EQ(Resident(), place.kept_bytes());
  EXPECT_EQ(place.kept_bytes(), 3 * 64 * kMiB + 8 * 64 * 1024);
  const UvmCounters before = *sim_->ReadCounters();
  ReadAll();
  EXPECT_EQ((*sim_->ReadCounters() - before).gpu_faults, 0);
  EXPECT_LE(Resident(), budget);
}

// Note [A model asleep] (profiler/model_execution.cc): an idle model shrinks to its sleep floor — the
// first weights on the device up to it, whatever its budget — the rest staged out as host copies (Note
// [Weights asleep as host copies]); put back as ModelExecution::Suspend puts them back, the next Apply()
// keeps what then fits its budget, bringing nothing back (the plan that wakes it does).
TEST_F(UnplannedPlacementTest, AModelAsleepKeepsNoMoreThanItsFloorAndTheNextApplyBringsNothingBack) {
  UnplannedPlacement place(sim_.get(), kAll);
  for (const auto& [addr, bytes] : weights_) {
    ASSERT_TRUE(sim_->Prefetch(addr, bytes, Location::kDevice, Stream::kCompute).ok());
    ASSERT_TRUE(place.Place(addr, bytes, kAll).ok());
  }
  ASSERT_TRUE(sim_->Synchronize().ok());
  ASSERT_EQ(Resident(), kAll);
  ASSERT_TRUE(place.Shrink(130 * kMiB).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_EQ(place.kept_bytes(), 2 * 64 * kMiB + 8 * 64 * 1024);  // matrices 0 and 1, and the norms
  EXPECT_EQ(Resident(), place.kept_bytes());
  EXPECT_EQ(place.in_place_bytes(), 6 * 64 * kMiB);
  for (size_t i = 0; i < weights_.size(); i += 2) {
    EXPECT_EQ(sim_->StagingOf(weights_[i].first),
              i < 4 ? DeviceBackend::Staging::kNone : DeviceBackend::Staging::kDiscarded)
        << i;
  }
  ASSERT_TRUE(place.Shrink(0).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_EQ(Resident(), 8 * 64 * 1024);  // the norms only: they share VA blocks on CUDA
  EXPECT_EQ(sim_->host_copies_filled_bytes(), 8 * 64 * kMiB);
  for (const auto& [addr, bytes] : weights_) {
    if (sim_->StagingOf(addr) != DeviceBackend::Staging::kNone)
      ASSERT_TRUE(sim_->Unstage(addr, bytes, Location::kHost).ok());
  }
  const UvmCounters before = *sim_->ReadCounters();
  ASSERT_TRUE(place.Apply(0).ok());
  ReadAll();
  const UvmCounters moved = *sim_->ReadCounters() - before;
  EXPECT_EQ(moved.h2d_total(), 0);
  EXPECT_EQ(moved.remote_bytes, 8 * 64 * kMiB);
  EXPECT_EQ(Resident(), 8 * 64 * 1024);
}

// Where the backend cannot stage, the weights a sleep moves off the device go to the host, with no advice
// (so a waking plan has none to lift): a kernel that reads one before any Apply() faults it back in, where
// one Apply() advised is read in place.
TEST_F(UnplannedPlacementTest, AModelAsleepMovesItsWeightsToTheHostWithoutAdvice) {
  GpuSpec spec = *FindGpuSpec("h200-pcie5");
  spec.uvm.staged_copy_bytes_per_s = 0;  // CUDA before 13
  auto unstaged = sim::SimBackend::Create({.spec = spec, .allow_oversubscription = true});
  ASSERT_TRUE(unstaged.ok()) << unstaged.status();
  sim_ = std::move(*unstaged);
  weights_.clear();
  for (int i = 0; i < 8; ++i) {
    for (const int64_t bytes : {64 * kMiB, 64 * int64_t{1024}})
      weights_.push_back({*sim_->AllocateManaged(bytes), bytes});
  }
  UnplannedPlacement place(sim_.get(), kAll);
  for (const auto& [addr, bytes] : weights_) {
    ASSERT_TRUE(sim_->Prefetch(addr, bytes, Location::kDevice, Stream::kCompute).ok());
    ASSERT_TRUE(place.Place(addr, bytes, kAll).ok());
  }
  ASSERT_TRUE(place.Shrink(0).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  ASSERT_EQ(Resident(), 8 * 64 * 1024);
  EXPECT_EQ(place.in_place_bytes(), 8 * 64 * kMiB);  // off the device
  EXPECT_EQ(sim_->StagingOf(weights_[2].first), DeviceBackend::Staging::kNone);
  const auto [addr, bytes] = weights_[2];
  UvmCounters before = *sim_->ReadCounters();
  sim_->Launch({.name = "gemv", .ranges = {{.addr = addr, .bytes = bytes}}, .flops = 2.0 * bytes / 2});
  ASSERT_TRUE(sim_->Synchronize().ok());
  UvmCounters moved = *sim_->ReadCounters() - before;
  EXPECT_GT(moved.gpu_faults, 0);
  EXPECT_EQ(moved.remote_bytes, 0);
  EXPECT_EQ(*sim_->ResidentBytes(addr, bytes), bytes);
  // The next Apply() advises them all, and the one faulted in goes back to the host as well.
  ASSERT_TRUE(place.Apply(0).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  before = *sim_->ReadCounters();
  ReadAll();
  moved = *sim_->ReadCounters() - before;
  EXPECT_EQ(moved.gpu_faults, 0);
  EXPECT_EQ(moved.remote_bytes, 8 * 64 * kMiB);
}

TEST_F(UnplannedPlacementTest, WithoutABudgetNothingMoves) {
  UnplannedPlacement place(sim_.get(), 0);
  for (const auto& [addr, bytes] : weights_) {
    ASSERT_TRUE(sim_->Prefetch(addr, bytes, Location::kDevice, Stream::kCompute).ok());
    ASSERT_TRUE(place.Place(addr, bytes, kAll).ok());
  }
  ASSERT_TRUE(place.Apply(0).ok());
  ASSERT_TRUE(sim_->Synchronize().ok());
  EXPECT_FALSE(place.applied());
  EXPECT_EQ(Resident(), kAll);
  EXPECT_EQ(place.in_place_bytes(), 0);
}

}  // namespace
}  // namespace autouvm::runtime
