// Profiling jobs: each key recorded once, analysed in the background, stored, found again after a
// restart, profiled again when its stored profile is damaged or it is marked stale.
#include "profiler/profile_jobs.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "profiler/profile_key.h"
#include "runtime/plan_proto.h"
#include "tests/testing/decode_like_trace.h"
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
  base::RealClock clock_;
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

TEST_F(ProfileJobsTest, APlanIsReadToFollowOnlyOnceReadyAndChecked) {
  const auto key = DecodeKey(std::string(64, 'd'), 2, "h200-pcie5", 12 << 20, "autouvm");
  {
    auto jobs = Jobs();
    EXPECT_EQ(jobs->ReadPlan(key).status().code(), absl::StatusCode::kNotFound);  // unprofiled
    ASSERT_TRUE(jobs->ShouldRecord(key));
    EXPECT_EQ(jobs->ReadPlan(key).status().code(), absl::StatusCode::kNotFound);  // recording
    jobs->Submit(key, Trace(), 0);
    jobs->Drain();
    auto plan = jobs->ReadPlan(key);          // recorded here: checked by construction
    ASSERT_TRUE(plan.ok()) << plan.status();  // its stored message names this key (else DATA_LOSS, below)
    EXPECT_EQ(plan->plan.budget_bytes, 12 << 20);
    EXPECT_EQ(plan->trace.ops, Trace().ops);
  }
  // After a restart the stored profile is ready but unchecked, then being checked, then followed.
  auto jobs = Jobs();
  EXPECT_FALSE(jobs->ShouldRecord(key));
  EXPECT_EQ(jobs->ReadPlan(key).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(jobs->ShouldVerify(key));
  jobs->Verify(key, {"aten::mm#0", "aten::mm#1", "aten::mm#2"});
  jobs->Drain();
  EXPECT_TRUE(jobs->ReadPlan(key).ok());
  // A damaged plan makes the key stale rather than be followed.
  ASSERT_TRUE(store_->Write({{Family::kPlans, EncodeKey(key), "garbage"}}).ok());
  EXPECT_EQ(jobs->ReadPlan(key).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(jobs->Status(key).state, ProfileState::kStale);
  EXPECT_TRUE(jobs->ShouldRecord(key));
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

std::vector<ProfileState> States(const ProfileStatus& s) {
  std::vector<ProfileState> out;
  for (const StateChange& c : s.history) out.push_back(c.state);
  return out;
}

TEST_F(ProfileJobsTest, TheHistoryWalksFromUnprofiledToReadyAndThePlanIsStoredBeside) {
  auto jobs = Jobs();
  ASSERT_TRUE(jobs->ShouldRecord(key_));
  jobs->Submit(key_, Trace(), 0);
  jobs->Drain();
  using S = ProfileState;
  EXPECT_EQ(States(jobs->Status(key_)), (std::vector<S>{S::kUnprofiled, S::kRecording, S::kAnalyzing, S::kReady}));
  auto plan = repo_->GetPlan(key_);
  ASSERT_TRUE(plan.ok() && plan->has_value()) << plan.status();
  autouvm::v1::Plan p;
  ASSERT_TRUE(p.ParseFromString(**plan));
  EXPECT_EQ(p.key().SerializeAsString(), key_.SerializeAsString());
}

// The plan is stored under its key and names the key it was made for; a value under one key that was
// made for another (a store written by hand, a bad import) is damage: not followed, the key stale.
TEST_F(ProfileJobsTest, AStoredPlanMadeForAnotherKeyIsNotFollowedAndItsKeyGoesStale) {
  const auto key = DecodeKey(std::string(64, 'e'), 2, "h200-pcie5", 12 << 20, "autouvm");
  const auto other = DecodeKey(std::string(64, 'e'), 4, "h200-pcie5", 12 << 20, "autouvm");
  auto jobs = Jobs();
  ASSERT_TRUE(jobs->ShouldRecord(key));
  jobs->Submit(key, Trace(), 0);
  jobs->Drain();
  ASSERT_TRUE(jobs->ReadPlan(key).ok());
  auto profile = repo_->Get(key);
  ASSERT_TRUE(profile.ok() && profile->has_value()) << profile.status();
  runtime::Plan plan;
  plan.budget_bytes = 12 << 20;
  ASSERT_TRUE(repo_->Put(**profile, runtime::ToProto(plan, other).SerializeAsString()).ok());
  auto read = jobs->ReadPlan(key);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find("the stored plan was made for " + EncodeKey(other)), std::string::npos)
      << read.status();
  EXPECT_EQ(jobs->Status(key).state, ProfileState::kStale);
}

TEST_F(ProfileJobsTest, AProfileFromTheStoreIsVerifiedOnceAndAMismatchMakesItStale) {
  {
    auto jobs = Jobs();
    ASSERT_TRUE(jobs->ShouldRecord(key_));
    jobs->Submit(key_, Trace(), 0);
    jobs->Drain();
    EXPECT_FALSE(jobs->ShouldVerify(key_));  // recorded here: nothing to check
  }
  auto jobs = Jobs();
  EXPECT_FALSE(jobs->ShouldRecord(key_));
  EXPECT_EQ(jobs->Status(key_).reason, "found in the profile store");
  ASSERT_TRUE(jobs->ShouldVerify(key_));
  EXPECT_FALSE(jobs->ShouldVerify(key_));  // once
  jobs->Verify(key_, {"aten::mm#0", "aten::mm#1", "aten::mm#2"});
  jobs->Drain();
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kReady);
  EXPECT_EQ(jobs->Status(key_).reason, "its 3 ops match a served iteration");
  EXPECT_EQ(jobs->identity_mismatches(), 0);

  jobs->Forget(key_);  // as after an import: read from the store again, checked again
  EXPECT_FALSE(jobs->ShouldRecord(key_));
  ASSERT_TRUE(jobs->ShouldVerify(key_));
  jobs->Verify(key_, {"aten::mm#0", "aten::addmm#0", "aten::mm#1", "aten::mm#2"});
  jobs->Drain();
  const ProfileStatus s = jobs->Status(key_);
  EXPECT_EQ(s.state, ProfileState::kStale);
  EXPECT_EQ(s.reason,
            "ops differ from the profile (3 of 4; first: op 1 ran aten::addmm#0, the profile has aten::mm#1)");
  EXPECT_EQ(jobs->identity_mismatches(), 1);
  EXPECT_EQ(jobs->mismatched_ops(), 3);
  EXPECT_TRUE(jobs->ShouldRecord(key_));  // re-profiled at the next iteration
}

// Note [A shape whose ops move]: the first mismatch re-profiles, the second makes the key unstable.
TEST_F(ProfileJobsTest, ASecondMismatchMakesTheKeyUnstableInsteadOfProfilingItForever) {
  auto jobs = Jobs();
  ASSERT_TRUE(jobs->ShouldRecord(key_));
  jobs->Submit(key_, Trace(), 0);
  jobs->Drain();

  EXPECT_TRUE(jobs->ReportMismatch(key_, 3, "3 of 4; first: op 0 ran aten::add#0, the profile has aten::mm#0"));
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kStale);
  EXPECT_EQ(jobs->Status(key_).reason,
            "ops differ from the profile (3 of 4; first: op 0 ran aten::add#0, the profile has aten::mm#0)");
  ASSERT_TRUE(jobs->ShouldRecord(key_));  // profiled again once
  jobs->Submit(key_, Trace(), 0);
  jobs->Drain();
  ASSERT_TRUE(jobs->ReadPlan(key_).ok());

  EXPECT_FALSE(jobs->ReportMismatch(key_, 2, "2 of 3; first: op 1 ran aten::mm#1, the profile has aten::add#0"));
  ProfileStatus s = jobs->Status(key_);
  EXPECT_TRUE(s.unstable);
  EXPECT_EQ(s.mismatches, 2);
  EXPECT_EQ(s.state, ProfileState::kReady);  // its last plan serves on
  EXPECT_EQ(s.reason.rfind("unstable: its ops differed from its profile twice", 0), 0u) << s.reason;
  EXPECT_FALSE(jobs->ShouldRecord(key_));
  EXPECT_FALSE(jobs->ShouldVerify(key_));
  EXPECT_TRUE(jobs->ReadPlan(key_).ok());
  // Every further mismatch is counted; none records again.
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(jobs->ReportMismatch(key_, 1, "1 of 3; first: op 2"));
  EXPECT_FALSE(jobs->ShouldRecord(key_));
  EXPECT_EQ(jobs->identity_mismatches(), 5);
  EXPECT_EQ(jobs->mismatched_ops(), 3 + 2 + 3);
  EXPECT_EQ(jobs->Status(key_).mismatches, 2);

  // An operator's Reprofile gives it its chance again.
  jobs->MarkStale(key_, "re-profile requested over the admin API");
  EXPECT_FALSE(jobs->Status(key_).unstable);
  EXPECT_TRUE(jobs->ShouldRecord(key_));
}

TEST_F(ProfileJobsTest, AKeyMarkedStaleWhileAnalysedRecordsAgain) {
  auto jobs = Jobs();
  ASSERT_TRUE(jobs->ShouldRecord(key_));
  jobs->Submit(key_, Trace(), 0);
  jobs->MarkStale(key_, "reprofile requested");
  jobs->Drain();
  EXPECT_EQ(jobs->Status(key_).state, ProfileState::kStale);
  EXPECT_TRUE(jobs->ShouldRecord(key_));
}

// Note [Planned from the nearest profile]: a key with no plan of its own borrows the nearest checked
// one of its model, phase, GPU, budget and policy — closest buckets on a log scale, the larger at a tie.
TEST_F(ProfileJobsTest, TheNearestPlannedKeyIsOfTheSamePhaseAndIdentityClosestOnALogScale) {
  auto jobs = Jobs();
  const std::string d(64, 'n');
  const int64_t budget = 12 << 20;
  auto ready = [&](const autouvm::v1::ProfileKey& k) {
    ASSERT_TRUE(jobs->ShouldRecord(k));
    jobs->Submit(k, Trace(), 0);
  };
  for (int b : {1, 4, 16}) ready(DecodeKey(d, b, "h200-pcie5", budget, "autouvm"));
  ready(PrefillKey(d, 2, 64, "h200-pcie5", budget, "autouvm"));
  ready(DecodeKey(d, 2, "h200-pcie5", budget * 2, "autouvm"));                 // another budget
  ready(DecodeKey(std::string(64, 'o'), 2, "h200-pcie5", budget, "autouvm"));  // another model
  const auto recording = DecodeKey(d, 64, "h200-pcie5", budget, "autouvm");
  ASSERT_TRUE(jobs->ShouldRecord(recording));  // not ready: lends nothing
  jobs->Drain();
  auto nearest = [&](int batch, std::set<std::string> excluded = {}) {
    auto k = jobs->NearestPlanned(DecodeKey(d, batch, "h200-pcie5", budget, "autouvm"), excluded);
    return k.has_value() ? k->batch() : -1;
  };
  EXPECT_EQ(nearest(2), 4);    // b1 and b4 are as near (1 on the log scale): the larger
  EXPECT_EQ(nearest(8), 16);   // b4 and b16 likewise
  EXPECT_EQ(nearest(32), 16);  // b64 is still recording
  EXPECT_EQ(nearest(4), 16);   // never itself: b1 and b16 are both 2 away, the larger
  EXPECT_EQ(nearest(2, {EncodeKey(DecodeKey(d, 4, "h200-pcie5", budget, "autouvm"))}), 1);
  // A prefill key is borrowed only by prefill keys.
  auto prefill = jobs->NearestPlanned(PrefillKey(d, 1, 100, "h200-pcie5", budget, "autouvm"), {});
  ASSERT_TRUE(prefill.has_value());
  EXPECT_EQ(prefill->phase(), autouvm::v1::PHASE_PREFILL);
  EXPECT_FALSE(jobs->NearestPlanned(MixedKey(d, 4, 16, "h200-pcie5", budget, "autouvm"), {}).has_value());
  // Another policy has nothing to borrow.
  EXPECT_FALSE(jobs->NearestPlanned(DecodeKey(d, 2, "h200-pcie5", budget, "paper"), {}).has_value());
}

// Note [Plans made again with the coded sizes]: a ready key's plan is made again from its stored trace with
// its weights' coded sizes; where that plans otherwise, the stored plan is replaced and the key's
// generation goes up. The same sizes again, or a key that is not ready, change nothing.
TEST_F(ProfileJobsTest, APlanIsMadeAgainWithTheWeightsCodedSizesAndReplacedWhereItDiffers) {
  const runtime::GpuSpec spec = *runtime::FindGpuSpec("h200-pcie5");
  ProfileJobs jobs(repo_.get(), spec, &clock_, /*coded_ratio=*/0.7);
  EXPECT_EQ(jobs.coded_ratio(), 0.7);
  // A decode step over 1 GiB of weights under 700 MiB: planned at the ratio, the plan streams its unpinned
  // weights coded through the device buffer (PlannerTest.TheWeightsMeasuredCodedSizesChoose...).
  const runtime::AccessTrace trace = testing::DecodeLikeTrace(16, 64, 1);
  const auto key = DecodeKey(std::string(64, 'c'), 1, spec.name, 700 << 20, "autouvm");
  jobs.PlanAgain(key, {{"param:w0", 1}});  // not profiled: nothing to do
  jobs.Drain();
  EXPECT_EQ(jobs.PlanGeneration(key), 0);
  ASSERT_TRUE(jobs.ShouldRecord(key));
  jobs.Submit(key, trace, 0.001);
  jobs.Drain();
  EXPECT_FALSE(jobs.ShouldVerify(key)) << "recorded here: checked";
  auto first = jobs.ReadPlan(key);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->plan.staged) << "staged at 0.7";
  // Measured: none of them shrinks. Crossing plain, reading the weights in place plans faster.
  std::map<std::string, int64_t> plain;
  for (const runtime::TensorUse& t : trace.named) plain[t.id] = t.bytes + 4096;
  jobs.PlanAgain(key, plain);
  jobs.Drain();
  EXPECT_EQ(jobs.PlanGeneration(key), 1);
  EXPECT_EQ(jobs.plans_made_again(), 1);
  EXPECT_EQ(jobs.Status(key).state, ProfileState::kReady);
  auto second = jobs.ReadPlan(key);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->trace.coded_bytes, plain);
  EXPECT_FALSE(second->plan.staged);
  EXPECT_FALSE(second->plan.remote.empty());
  jobs.PlanAgain(key, plain);  // the trace has these already
  jobs.Drain();
  EXPECT_EQ(jobs.PlanGeneration(key), 1);
  // A restart reads the plan made again, sizes and all.
  ProfileJobs restarted(repo_.get(), spec, &clock_, 0.7);
  EXPECT_FALSE(restarted.ShouldRecord(key));
  EXPECT_EQ(restarted.Status(key).state, ProfileState::kReady);
}

}  // namespace
}  // namespace autouvm::profiler
