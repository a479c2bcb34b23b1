// ModelSession, one model's AutoUVM loop, around the real engine's forward passes on the CPU: a shape's
// first iteration is recorded, analysed in the background and stored; its next iterations follow the
// plan on the simulated mirror; another shape is recorded on its own; and two models, each with its own
// session, follow their plans on two threads at once (no model runs without its plan while another is
// observed: Note [One global callback], runtime/observer.cc).
#include "profiler/model_session.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/clock.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "profiler/profile_key.h"
#include "profiler/profile_repository.h"
#include "profiler/profile_store.h"
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
    auto runner = engine::ModelRunner::Create(dir_.Sub(name), c, 2);
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

  testing::TempDir dir_;
  base::RealClock clock_;
  const runtime::GpuSpec spec_ = *runtime::FindGpuSpec("h200-pcie5");
  std::unique_ptr<ProfileStore> store_;
  std::unique_ptr<ProfileRepository> repository_;
  std::unique_ptr<ProfileJobs> jobs_;
};

TEST_F(ModelSessionTest, AShapeIsRecordedOnceThenFollowsItsPlanAndANewShapeIsRecordedOnItsOwn) {
  Model m = Load("alpha", 3);
  ASSERT_NE(m.session, nullptr);
  const autouvm::v1::ProfileKey one = m.session->Key(IterationPhase::kDecode, 1, 0);
  const autouvm::v1::ProfileKey two = m.session->Key(IterationPhase::kDecode, 2, 0);
  EXPECT_EQ(EncodeKey(one), EncodeKey(DecodeKey(std::string(64, 'a'), 1, spec_.name,
                                                m.session->identity().device_budget_bytes, "autouvm")));

  ASSERT_TRUE(Step(m, 1, 1).ok());  // recorded: no plan to follow yet
  EXPECT_EQ(m.session->execution()->stats().followed_iterations, 0);
  jobs_->Drain();
  EXPECT_EQ(jobs_->Status(one).state, ProfileState::kReady);
  for (int64_t pos = 2; pos < 6; ++pos) ASSERT_TRUE(Step(m, 1, pos).ok());
  ExecutionStats s = m.session->execution()->stats();
  EXPECT_EQ(s.followed_iterations, 4);
  EXPECT_EQ(s.abandoned_iterations, 0);
  EXPECT_EQ(s.following, EncodeKey(one));
  EXPECT_GT(s.prefetched_bytes, 0);  // half the named bytes: the plan fetches on the mirror

  // Batch 2 is another shape: recorded (its iteration follows nothing), then followed, a plan switch.
  EXPECT_EQ(jobs_->Status(two).state, ProfileState::kUnprofiled);
  ASSERT_TRUE(Step(m, 2, 6).ok());
  EXPECT_EQ(m.session->execution()->stats().followed_iterations, 4);
  jobs_->Drain();
  EXPECT_EQ(jobs_->Status(two).state, ProfileState::kReady);
  ASSERT_TRUE(Step(m, 2, 7).ok());
  s = m.session->execution()->stats();
  EXPECT_EQ(s.followed_iterations, 5);
  EXPECT_EQ(s.following, EncodeKey(two));
  EXPECT_EQ(s.plan_switches, 2);
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
