// ModelSession, one model's AutoUVM loop, around the real engine's forward passes on the CPU: a shape's
// first iteration is recorded, analysed in the background and stored; its next iterations follow the
// plan on the simulated mirror; another shape is recorded on its own; and two models, each with its own
// session, follow their plans on two threads at once (no model runs without its plan while another is
// observed: Note [One global callback], runtime/observer.cc).
#include "profiler/model_session.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "profiler/profile_key.h"
#include "profiler/profile_repository.h"
#include "profiler/profile_store.h"
#include "runtime/sim/sim_backend.h"
#include "tests/testing/small_model.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::profiler {
namespace {

struct Model {
  std::unique_ptr<engine::ModelRunner> runner;
  std::unique_ptr<ModelSession> session;
};

class ModelSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime::Observer::MakeExecutionRepeatable(); }

  void SetUp() override {
    auto store = OpenRocksDbProfileStore(dir_.Sub("profiles"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    repository_ = std::make_unique<ProfileRepository>(store_.get());
    jobs_ = std::make_unique<ProfileJobs>(repository_.get(), spec_, &clock_);
  }

  // A small model (weights from `seed`) with its session, following plans on the mirror under half of
  // its named bytes.
  Model Load(const std::string& name, uint64_t seed) {
    Model m;
    const engine::ModelConfig c = testing::SmallLlamaConfig(name);
    EXPECT_TRUE(engine::WriteLlamaModel(c, seed, dir_.path()).ok());
    auto runner = engine::ModelRunner::Create(dir_.Sub(name), c, 4);
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return m;
    m.runner = std::move(*runner);
    const std::vector<runtime::NamedTensor> named = m.runner->NamedTensors();
    int64_t bytes = 0;
    for (const runtime::NamedTensor& t : named) bytes += t.bytes;
    auto execution = ModelExecution::Mirror(spec_, named, {});
    EXPECT_TRUE(execution.ok()) << execution.status();
    auto session = ModelSession::Create({std::string(64, name[0]), spec_.name, bytes / 2, "autouvm"}, jobs_.get(),
                                        named, std::move(*execution));
    EXPECT_TRUE(session.ok()) << session.status();
    if (session.ok()) m.session = std::move(*session);
    return m;
  }

  // One decode step of `rows` sequences as the scheduler runs it: the hooks around the pass, and the
  // pass once more if the session asks.
  static absl::Status Step(Model& m, int rows, int64_t pos) {
    std::vector<engine::ModelRunner::DecodeRow> batch;
    for (int r = 0; r < rows; ++r) batch.push_back({r, 256, pos});
    std::vector<float> logits;
    absl::Status s;
    for (int attempt = 0;; ++attempt) {
      m.session->BeforeIteration(IterationPhase::kDecode, rows, 0);
      s = m.runner->Decode(batch, &logits);
      if (!m.session->AfterIteration(s) || attempt > 0) break;
    }
    return s;
  }

  // Note [Coded sizes in the trace]: `count` fp32 weights of [rows, cols] (N(0, scale²)) on a mirror whose
  // staged copies cross coded at 0.7, planned at 0.7 by jobs of its own, under `budget_weights` weights'
  // bytes; its session's digest is 64 `digest`s.
  struct CodedModel {
    std::vector<at::Tensor> w;
    std::vector<runtime::NamedTensor> named;
    int64_t bytes = 0;  // of one weight
    std::unique_ptr<ProfileJobs> jobs;
    std::unique_ptr<ModelSession> session;
    runtime::sim::SimBackend* mirror = nullptr;
  };
  CodedModel LoadCoded(char digest, int count, int64_t rows, int64_t cols, double scale, int64_t budget_weights) {
    CodedModel m;
    for (int i = 0; i < count; ++i) {
      m.w.push_back(at::randn({rows, cols}) * scale);
      m.named.push_back({"w" + std::to_string(i), reinterpret_cast<uint64_t>(m.w.back().data_ptr()),
                         static_cast<int64_t>(m.w.back().nbytes())});
    }
    m.bytes = m.named[0].bytes;
    auto execution = ModelExecution::Mirror(spec_, m.named, {.mirror_coded_ratio = 0.7});
    EXPECT_TRUE(execution.ok()) << execution.status();
    if (!execution.ok()) return m;
    m.jobs = std::make_unique<ProfileJobs>(repository_.get(), spec_, &clock_, /*coded_ratio=*/0.7);
    auto created = ModelSession::Create({std::string(64, digest), spec_.name, budget_weights * m.bytes, "autouvm"},
                                        m.jobs.get(), m.named, std::move(*execution));
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return m;
    m.session = std::move(*created);
    m.mirror = dynamic_cast<runtime::sim::SimBackend*>(m.session->execution()->backend());
    EXPECT_NE(m.mirror, nullptr);
    return m;
  }

  testing::TempDir dir_;
  base::RealClock clock_;
  const runtime::GpuSpec spec_ = *runtime::FindGpuSpec("h200-pcie5");
  std::unique_ptr<ProfileStore> store_;
  std::unique_ptr<ProfileRepository> repository_;
  std::unique_ptr<ProfileJobs> jobs_;
};

TEST_F(ModelSessionTest, AShapeIsRecordedOnceThenFollowsItsPlanAndANewShapeFollowsTheNearestWhileRecorded) {
  Model m = Load("alpha", 3);
  ASSERT_NE(m.session, nullptr);
  const autouvm::v1::ProfileKey one = m.session->Key(IterationPhase::kDecode, 1, 0);
  const autouvm::v1::ProfileKey two = m.session->Key(IterationPhase::kDecode, 2, 0);
  EXPECT_EQ(EncodeKey(one), EncodeKey(DecodeKey(std::string(64, 'a'), 1, spec_.name,
                                                m.session->identity().device_budget_bytes, "autouvm")));

  ASSERT_TRUE(Step(m, 1, 1).ok());  // recorded: the model's first shape has no plan to follow
  EXPECT_EQ(m.session->execution()->stats().followed_iterations, 0);
  EXPECT_EQ(m.session->stats().none, 1);
  jobs_->Drain();
  EXPECT_EQ(jobs_->Status(one).state, ProfileState::kReady);
  for (int64_t pos = 2; pos < 6; ++pos) ASSERT_TRUE(Step(m, 1, pos).ok());
  ExecutionStats s = m.session->execution()->stats();
  EXPECT_EQ(s.followed_iterations, 4);
  EXPECT_EQ(s.abandoned_iterations, 0);
  EXPECT_EQ(s.following, EncodeKey(one));
  EXPECT_GT(s.prefetched_bytes, 0);  // half the named bytes: the plan fetches on the mirror
  EXPECT_EQ(m.session->stats().own, 4);

  // Batch 2 is another shape: recorded while it follows batch 1's plan to its last op (Note [Planned
  // from the nearest profile]); then it follows its own, a plan switch.
  EXPECT_EQ(jobs_->Status(two).state, ProfileState::kUnprofiled);
  ASSERT_TRUE(Step(m, 2, 6).ok());
  s = m.session->execution()->stats();
  EXPECT_EQ(s.followed_iterations, 5) << s.last_error;
  EXPECT_EQ(s.abandoned_iterations, 0) << s.last_error;
  EXPECT_EQ(s.following, EncodeKey(one));
  EXPECT_EQ(m.session->stats().nearest, 1);
  jobs_->Drain();
  EXPECT_EQ(jobs_->Status(two).state, ProfileState::kReady);
  ASSERT_TRUE(Step(m, 2, 7).ok());
  s = m.session->execution()->stats();
  EXPECT_EQ(s.followed_iterations, 6);
  EXPECT_EQ(s.following, EncodeKey(two));
  EXPECT_EQ(s.plan_switches, 2);
  // Batch 3 is in batch 2's bucket (b4: powers of two), recorded while it follows batch 2's plan.
  const autouvm::v1::ProfileKey four = m.session->Key(IterationPhase::kDecode, 3, 0);
  EXPECT_EQ(four.batch(), 4);
  ASSERT_TRUE(Step(m, 3, 8).ok());
  EXPECT_EQ(m.session->execution()->stats().following, EncodeKey(two));
  EXPECT_EQ(m.session->execution()->stats().abandoned_iterations, 0);
  EXPECT_EQ(m.session->stats().nearest, 2);
  EXPECT_EQ(m.session->stats().none, 1);
}

// Note [Planned from the nearest profile]: re-profiling cannot loop, whatever the ops do. A model of
// plain aten ops over two named weights: b1 always runs the same ops; b2's move every other iteration
// (an op in front shifts them all); b4's moved ones are what it runs from the start, so the plan it
// borrows (b1's) stops at its first op. Every iteration but the model's first follows a plan.
// Note [Captured steps] (engine/step_graphs.cc): a graph launches its ops without the observer seeing
// them, so a pass may run as one only when nothing observes it — not while it is recorded, nor when it
// follows a plan on the mirror (which launches every op's kernel on the simulator) — and may when the
// session follows no plan and records nothing.
TEST_F(ModelSessionTest, OnlyAPassNothingObservesMayBeCaptured) {
  Model m = Load("gamma", 5);
  ASSERT_NE(m.session, nullptr);
  auto may_capture = [](Model& model, int64_t pos) {
    std::vector<engine::ModelRunner::DecodeRow> batch = {{0, 256, pos}};
    std::vector<float> logits;
    model.session->BeforeIteration(IterationPhase::kDecode, 1, 0);
    const bool may = model.session->PassMayBeCaptured();
    EXPECT_TRUE(model.runner->Decode(batch, &logits).ok());
    EXPECT_FALSE(model.session->AfterIteration(absl::OkStatus()));
    return may;
  };
  EXPECT_FALSE(may_capture(m, 1));  // recorded
  jobs_->Drain();
  EXPECT_FALSE(may_capture(m, 2));  // followed on the mirror
  EXPECT_EQ(m.session->execution()->stats().followed_iterations, 1);

  // Without an execution nothing follows plans: once recorded, the shape's passes run unobserved.
  const engine::ModelConfig c = testing::SmallLlamaConfig("delta");
  ASSERT_TRUE(engine::WriteLlamaModel(c, 6, dir_.path()).ok());
  auto runner = engine::ModelRunner::Create(dir_.Sub("delta"), c, 4);
  ASSERT_TRUE(runner.ok()) << runner.status();
  Model bare;
  bare.runner = std::move(*runner);
  auto session =
      ModelSession::Create({std::string(64, 'd'), spec_.name, 0, "autouvm"}, jobs_.get(), bare.runner->NamedTensors());
  ASSERT_TRUE(session.ok()) << session.status();
  bare.session = std::move(*session);
  EXPECT_FALSE(may_capture(bare, 1));  // recorded
  jobs_->Drain();
  EXPECT_TRUE(may_capture(bare, 2));
  EXPECT_TRUE(may_capture(bare, 3));
}

TEST_F(ModelSessionTest, AShapeWhoseOpsMoveIsRecordedTwiceAtMostAndEveryIterationButTheFirstFollowsAPlan) {
  const at::Tensor w1 = at::randn({128, 128}), w2 = at::randn({128, 128});
  const std::vector<runtime::NamedTensor> named = {
      {"w1", reinterpret_cast<uint64_t>(w1.data_ptr()), static_cast<int64_t>(w1.nbytes())},
      {"w2", reinterpret_cast<uint64_t>(w2.data_ptr()), static_cast<int64_t>(w2.nbytes())}};
  auto execution = ModelExecution::Mirror(spec_, named, {});
  ASSERT_TRUE(execution.ok()) << execution.status();
  auto created = ModelSession::Create({std::string(64, 'm'), spec_.name, static_cast<int64_t>(w1.nbytes()), "autouvm"},
                                      jobs_.get(), named, std::move(*execution));
  ASSERT_TRUE(created.ok()) << created.status();
  ModelSession& session = **created;
  // One iteration as the scheduler runs it (once more if the session asks), then its analysis.
  auto iterate = [&](int batch, bool moved) {
    for (int attempt = 0;; ++attempt) {
      session.BeforeIteration(IterationPhase::kDecode, batch, 0);
      at::Tensor x = at::ones({batch, 128});
      if (moved) x = x * 2;
      const at::Tensor y = at::mm(at::relu(at::mm(x, w1)), w2);
      EXPECT_EQ(y.size(0), batch);
      if (!session.AfterIteration(absl::OkStatus()) || attempt > 0) break;
    }
    jobs_->Drain();
  };
  auto recordings = [&](int batch) {
    int n = 0;
    for (const StateChange& c : jobs_->Status(session.Key(IterationPhase::kDecode, batch, 0)).history) {
      n += c.state == ProfileState::kRecording;
    }
    return n;
  };
  iterate(1, false);
  constexpr int kIterations = 40;
  for (int i = 0; i < kIterations; ++i) iterate(2, /*moved=*/i % 2 == 1);
  for (int i = 0; i < 10; ++i) iterate(4, /*moved=*/true);

  EXPECT_EQ(recordings(1), 1);
  // Recorded on first sight and after its first mismatch; unstable after its second, and kept its plan.
  EXPECT_EQ(recordings(2), 2);
  const ProfileStatus b2 = jobs_->Status(session.Key(IterationPhase::kDecode, 2, 0));
  EXPECT_TRUE(b2.unstable) << b2.reason;
  EXPECT_EQ(b2.state, ProfileState::kReady) << b2.reason;
  // Every moved iteration of b2 is counted; b4's stop in a borrowed plan is not its own profile's fault.
  EXPECT_EQ(jobs_->identity_mismatches(), kIterations / 2);
  EXPECT_EQ(recordings(4), 1);
  const ProfileStatus b4 = jobs_->Status(session.Key(IterationPhase::kDecode, 4, 0));
  EXPECT_EQ(b4.state, ProfileState::kReady) << b4.reason;
  EXPECT_FALSE(b4.unstable);
  const SessionStats st = session.stats();
  EXPECT_EQ(st.none, 1);  // b1's first: the model had no plan yet
  EXPECT_EQ(st.own + st.nearest + st.none, 1 + kIterations + 10);
  // b2's two recordings and b4's first followed b1's plan.
  EXPECT_EQ(st.nearest, 3);
}

// Note [Coded sizes in the trace]: a shape recorded after the model's first plan staged its weights carries
// the sizes the backend has for them (what each crosses the link as), stored with its trace; the first
// shape, recorded before anything was staged, carries none.
TEST_F(ModelSessionTest, AShapeRecordedAfterWeightsWereStagedCarriesTheirCodedSizes) {
  // 4 MiB weights: coded on the mirror as on CUDA.
  CodedModel m = LoadCoded('c', 4, 1024, 1024, 1.0, /*budget_weights=*/3);
  ASSERT_NE(m.mirror, nullptr);
  ModelSession& session = *m.session;
  ProfileJobs& jobs = *m.jobs;
  auto iterate = [&](int batch) {
    for (int attempt = 0;; ++attempt) {
      session.BeforeIteration(IterationPhase::kPrefill, batch, 256);
      at::Tensor x = at::ones({batch * 256, 1024});
      for (const at::Tensor& t : m.w) x = at::relu(at::mm(x, t));
      if (!session.AfterIteration(absl::OkStatus()) || attempt > 0) break;
    }
    jobs.Drain();
  };
  iterate(1);  // recorded with nothing staged
  auto first = jobs.ReadPlan(session.Key(IterationPhase::kPrefill, 1, 256));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->trace.coded_bytes.empty());
  ASSERT_TRUE(first->plan.staged) << "prefill products cannot read their weights in place";
  std::set<std::string> streamed;
  for (const runtime::Prefetch& f : first->plan.prefetches) streamed.insert(f.tensors.begin(), f.tensors.end());
  ASSERT_FALSE(streamed.empty());
  // One weight the real coder would have found tighter than the planned ratio.
  const std::string tight = *streamed.begin();
  m.mirror->SetCodedBytes(session.execution()->range(tight)->addr, m.bytes / 3);
  for (int i = 0; i < 2; ++i) iterate(1);  // followed: its streamed weights staged
  ASSERT_GT(session.execution()->stats().followed_iterations, 0) << session.execution()->stats().last_error;
  iterate(2);  // another shape, recorded now
  auto second = jobs.ReadPlan(session.Key(IterationPhase::kPrefill, 2, 256));
  ASSERT_TRUE(second.ok()) << second.status();
  std::set<std::string> carried;
  for (const auto& [id, n] : second->trace.coded_bytes) {
    carried.insert(id);
    EXPECT_EQ(n, id == tight ? m.bytes / 3 : static_cast<int64_t>(0.7 * static_cast<double>(m.bytes))) << id;
  }
  EXPECT_EQ(carried, streamed);
}

// Note [Plans made again with the coded sizes] (profile_jobs.cc): once the backend has coded every weight
// its plan streams, a shape recorded before (with no sizes) is planned again with them; a plan that
// differs replaces the one followed at the next pass, and the shape is not planned again after that.
TEST_F(ModelSessionTest, AShapesPlanIsMadeAgainOnceItsStreamedWeightsAreCodedAndTheNewOneFollowed) {
  // 16 weights of 8 MiB under 10 of them: at 0.7 the decode step stages what it does not pin
  // (PlannerTest.TheWeightsMeasuredCodedSizesChooseBetweenStagingAndReadingInPlace).
  CodedModel m = LoadCoded('g', 16, 2048, 1024, 0.02, /*budget_weights=*/10);
  ASSERT_NE(m.mirror, nullptr);
  ModelSession& session = *m.session;
  ProfileJobs& jobs = *m.jobs;
  const autouvm::v1::ProfileKey key = session.Key(IterationPhase::kDecode, 1, 0);
  auto iterate = [&]() {
    for (int attempt = 0;; ++attempt) {
      session.BeforeIteration(IterationPhase::kDecode, 1, 0);
      const at::Tensor x = at::ones({1, 2048});
      for (const at::Tensor& t : m.w) EXPECT_EQ(at::mm(x, t).size(1), 1024);
      if (!session.AfterIteration(absl::OkStatus()) || attempt > 0) break;
    }
    jobs.Drain();
  };
  iterate();  // recorded, planned at the ratio
  auto first = jobs.ReadPlan(key);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->plan.staged) << "at 0.7 its unpinned weights stream coded";
  // The real coder would find that none of them shrinks.
  for (const runtime::NamedTensor& t : m.named) {
    m.mirror->SetCodedBytes(session.execution()->range("param:" + t.name)->addr, m.bytes + 4096);
  }
  iterate();  // followed: its weights staged and coded; their sizes handed over, the plan made again
  EXPECT_EQ(jobs.plans_made_again(), 1);
  EXPECT_EQ(jobs.PlanGeneration(key), 1);
  auto second = jobs.ReadPlan(key);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->plan.staged) << "crossing plain, they are read in place";
  EXPECT_FALSE(second->trace.coded_bytes.empty());
  const int64_t switches = session.execution()->stats().plan_switches;
  for (int i = 0; i < 20; ++i) iterate();
  const ExecutionStats s = session.execution()->stats();
  EXPECT_EQ(s.plan_switches, switches + 1) << "the plan made again, once";
  EXPECT_EQ(s.abandoned_iterations, 0) << s.last_error;
  EXPECT_EQ(jobs.plans_made_again(), 1) << "planned again once";
}

TEST_F(ModelSessionTest, TwoModelsFollowTheirPlansOnTwoThreadsAtOnce) {
  Model a = Load("alpha", 3), b = Load("bravo", 4);
  ASSERT_NE(a.session, nullptr);
  ASSERT_NE(b.session, nullptr);
  // Each shape recorded and analysed first.
  ASSERT_TRUE(Step(a, 1, 1).ok());
  ASSERT_TRUE(Step(b, 1, 1).ok());
  jobs_->Drain();
  constexpr int kSteps = 40;
  auto run = [](Model* m, absl::Status* out) {
    for (int64_t pos = 2; pos < 2 + kSteps && out->ok(); ++pos) *out = Step(*m, 1, pos);
  };
  absl::Status sa, sb;
  std::thread ta(run, &a, &sa), tb(run, &b, &sb);
  ta.join();
  tb.join();
  ASSERT_TRUE(sa.ok()) << sa;
  ASSERT_TRUE(sb.ok()) << sb;
  for (Model* m : {&a, &b}) {
    const ExecutionStats s = m->session->execution()->stats();
    EXPECT_EQ(s.followed_iterations, kSteps) << m->runner->config().name << ": " << s.last_error;
    EXPECT_EQ(s.abandoned_iterations, 0) << m->runner->config().name << ": " << s.last_error;
  }
}

}  // namespace
}  // namespace autouvm::profiler
