// Profiling jobs: each key recorded once, analysed in the background, stored, found again after a
// restart, profiled again when its stored profile is damaged or it is marked stale.
#include "profiler/profile_jobs.h"

#include <gtest/gtest.h>

#include "profiler/profile_key.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::profiler {
namespace {

runtime::AccessTrace Trace() {
  runtime::AccessTrace t;
  for (int i = 0; i < 3; ++i) {
    runtime::OpRecord op;
    op.index = i;
    op.op = "aten::mm";
    op.kernel = "aten::mm#" + std::to_string(i);
    op.reads = {{"param:w" + std::to_string(i), 8 << 20, 0, 8 << 20}};
    op.flops = 1e6;
    t.ops.push_back(op);
  }
  return t;
}

class ProfileJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenRocksDbProfileStore(dir_.Sub("profiles"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
    repo_ = std::make_unique<ProfileRepository>(store_.get());
  }
  std::unique_ptr<ProfileJobs> Jobs() {
    return std::make_unique<ProfileJobs>(repo_.get(), *runtime::FindGpuSpec("h200-pcie5"), &clock_);
  }

  testing::TempDir dir_;
  runtime::RealClock clock_;
  std::unique_ptr<ProfileStore> store_;
  std::unique_ptr<ProfileRepository> repo_;
  const autouvm::v1::ProfileKey key_ = DecodeKey(std::string(64, 'd'), 2, "h200-pcie5", 0, "stock");
};

TEST_F(ProfileJobsTest, AKeyIsRecordedOnceAnalysedInTheBackgroundAndStored) {
  auto jobs = Jobs();
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kUnprofiled);
  ASSERT_TRUE(jobs->ShouldRecord(key_));
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kRecording);
  EXPECT_FALSE(jobs->ShouldRecord(key_));  // another request of the same key while it records
  jobs->Submit(key_, Trace(), 0.001);
  jobs->Drain();
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kReady);
  EXPECT_FALSE(jobs->ShouldRecord(key_));
  auto stored = repo_->Get(key_);
  ASSERT_TRUE(stored.ok() && stored->has_value()) << stored.status();
  EXPECT_EQ((*stored)->trace().ops_size(), 3);
  EXPECT_EQ((*stored)->link_bound_ops(), 3);  // stock residency: every weight crosses the link
  EXPECT_GE((*stored)->profiling_seconds(), 0.001);
  EXPECT_EQ(jobs->All().size(), 1u);
}

TEST_F(ProfileJobsTest, ARestartFindsTheProfileReady) {
  {
    auto jobs = Jobs();
    ASSERT_TRUE(jobs->ShouldRecord(key_));
    jobs->Submit(key_, Trace(), 0);
  }  // the destructor finishes the submitted analysis
  auto jobs = Jobs();
  EXPECT_FALSE(jobs->ShouldRecord(key_));
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kReady);
}

TEST_F(ProfileJobsTest, ADamagedStoredProfileIsProfiledAgain) {
  {
    auto jobs = Jobs();
    ASSERT_TRUE(jobs->ShouldRecord(key_));
    jobs->Submit(key_, Trace(), 0);
  }
  ASSERT_TRUE(store_->Write({{Family::kProfiles, EncodeKey(key_), "not a profile"}}).ok());
  auto jobs = Jobs();
  EXPECT_TRUE(jobs->ShouldRecord(key_));
  EXPECT_EQ(repo_->corrupt_reads(), 1);
  jobs->Submit(key_, Trace(), 0);
  jobs->Drain();
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kReady);
  EXPECT_TRUE(repo_->Get(key_).ok());
}

TEST_F(ProfileJobsTest, FailuresAndStalenessAreVisibleWithTheirReasons) {
  auto jobs = Jobs();
  ASSERT_TRUE(jobs->ShouldRecord(key_));
  jobs->Fail(key_, "the iteration threw");
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kFailed);
  EXPECT_EQ(jobs->Status(key_).reason, "the iteration threw");
  EXPECT_FALSE(jobs->ShouldRecord(key_));  // a failed key serves without hints until asked again
  jobs->MarkStale(key_, "reprofile requested");
  EXPECT_EQ(ProfileStateName(jobs->Status(key_).state), "stale");
  EXPECT_TRUE(jobs->ShouldRecord(key_));
}

}  // namespace
}  // namespace autouvm::profiler
