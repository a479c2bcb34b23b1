// Note [Staged passes captured] (runtime/executor_capture.cc), on the CPU: decode passes that follow a plan
// through the device buffer on the simulated mirror, run by kEmulated step graphs (engine/step_graphs.h),
// whose capture is the observed pass itself and whose replay runs the step again unobserved. Against the
// same model and plan run eagerly, step by step: the logits bit for bit, every pass followed, and the
// executor's counts (what it fetched) the same although replays call nothing of it. The GPU host runs the
// same path as CUDA graphs (bench/step_graphs at factors above 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "engine/step_graphs.h"
#include "profiler/model_session.h"
#include "profiler/profile_repository.h"
#include "profiler/profile_store.h"
#include "runtime/observer.h"
#include "runtime/sim/sim_backend.h"
#include "tests/testing/small_model.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::profiler {
namespace {

// The session's hooks as the runner asks them (the staged capture's key), but for the capture's check,
// which a subclass answers; `asked` counts the checks.
class HeldCheck : public IterationHooks {
 public:
  explicit HeldCheck(const ModelSession* session) : session_(session) {}
  void BeforeIteration(IterationPhase, int, int64_t) override {}
  bool AfterIteration(const absl::Status&) override { return false; }
  uint64_t StagedCaptureKey() const override { return session_->StagedCaptureKey(); }
  mutable int asked = 0;

 protected:
  const ModelSession* const session_;
};

// A check that refuses every graph: as when a captured pass stopped following its plan (its ops differ, a
// call the capture cannot hold).
class RefusingHeld final : public HeldCheck {
 public:
  using HeldCheck::HeldCheck;
  absl::Status StagedCaptureHeld(uint64_t) const override {
    ++asked;
    return absl::FailedPreconditionError("op 7 is aten::is_pinned, the plan expected aten::copy_");
  }
};

// The session's own check, but the mirror's coder finishes a coded copy (a new size for the range at
// `addr`: DeviceBackend::StagingEpoch moves) while each of the first `finishes` captured passes runs, as
// the real one does in the background while its copies are coded.
class FinishingCoder final : public HeldCheck {
 public:
  FinishingCoder(const ModelSession* session, runtime::sim::SimBackend* mirror, uint64_t addr, int finishes)
      : HeldCheck(session), mirror_(mirror), addr_(addr), finishes_(finishes) {}
  absl::Status StagedCaptureHeld(uint64_t key) const override {
    ++asked;
    if (finishes_ > 0) {
      --finishes_;
      mirror_->SetCodedBytes(addr_, 4096 + asked);
    }
    return session_->StagedCaptureHeld(key);
  }

 private:
  runtime::sim::SimBackend* const mirror_;
  const uint64_t addr_;
  mutable int finishes_;
};

// How many of `graphs` ran as `how`.
int CountOf(const std::vector<PassGraph>& graphs, PassGraph how) {
  return static_cast<int>(std::count(graphs.begin(), graphs.end(), how));
}

struct Model {
  std::unique_ptr<engine::ModelRunner> runner;
  std::unique_ptr<ModelSession> session;
  std::vector<PassGraph> graphs;  // how each pass ran
};

class StagedGraphsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime::Observer::MakeExecutionRepeatable(); }

  void SetUp() override {
    auto store = OpenRocksDbProfileStore(dir_.Sub("profiles"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    repository_ = std::make_unique<ProfileRepository>(store_.get());
    jobs_ = std::make_unique<ProfileJobs>(repository_.get(), spec_, &clock_);
    // Weights of 1-4 MiB each: the simulator's replay, which chooses the plan, stages whole pages.
    config_ = testing::SmallLlamaConfig("staged", 2, "fp32");
    config_.dim = 512;
    config_.n_heads = 8;
    config_.n_kv_heads = 4;
    config_.head_dim = 64;
    config_.ffn_dim = 1024;
    config_.vocab_size = 1024;
    ASSERT_TRUE(engine::WriteLlamaModel(config_, 5, dir_.path()).ok());
  }

  // The model under half its weights' bytes, following plans on the mirror; `graphs`: its decode steps by
  // (emulated) graphs, and its passes through the device buffer captured with their copies.
  Model Load(bool graphs) {
    Model m;
    auto runner = engine::ModelRunner::Create(dir_.Sub(config_.name), config_, 4);
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return m;
    m.runner = std::move(*runner);
    if (graphs) EXPECT_TRUE(m.runner->EnableStepGraphs({.mode = engine::StepGraphMode::kEmulated}).ok());
    const std::vector<runtime::NamedTensor> named = m.runner->NamedTensors();
    int64_t bytes = 0;  // the weights' (the KV pools are placed by the rows in use: a few here)
    for (const runtime::NamedTensor& t : named) {
      if (!t.name.starts_with("kv_cache")) bytes += t.bytes;
    }
    auto execution = ModelExecution::Mirror(spec_, named, {.monitor_every = 0, .capture_passes = graphs});
    EXPECT_TRUE(execution.ok()) << execution.status();
    // Both models share the jobs: the second follows the plan the first had recorded.
    auto session = ModelSession::Create({std::string(64, 's'), spec_.name, bytes / 2, "autouvm"}, jobs_.get(), named,
                                        std::move(*execution));
    EXPECT_TRUE(session.ok()) << session.status();
    if (!session.ok()) return m;
    m.session = std::move(*session);
    ModelSession* s = m.session.get();
    m.runner->set_kv_rows_listener([s](int64_t live, int64_t pool) { s->execution()->SetKvRows(live, pool); });
    m.runner->set_staged_capture(s);
    return m;
  }

  // One decode step of `rows` sequences as the scheduler runs it (engine/scheduler.cc): the hooks around
  // the pass, graphs allowed only where nothing observes it, how it ran told before the pass's end.
  static absl::Status Step(Model& m, int rows, int64_t pos, std::vector<float>* logits) {
    std::vector<engine::ModelRunner::DecodeRow> batch;
    for (int r = 0; r < rows; ++r) batch.push_back({r, 100 + r + static_cast<int32_t>(pos) % 7, pos});
    return Pass(m, IterationPhase::kDecode, rows, 0, [&] { return m.runner->Decode(batch, logits); });
  }
  // One prefill of `rows` prompts of 8 tokens (the `step`th of them) into slots 0.. at position 0, as the
  // scheduler runs it: a packed pass (Note [Packed steps by bucket], engine/step_graph_options.h).
  static absl::Status PrefillStep(Model& m, int rows, int step, std::vector<float>* logits) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<engine::StepRunner::Row> batch;
    for (int r = 0; r < rows; ++r) {
      prompts.emplace_back();
      for (int i = 0; i < 8; ++i) prompts.back().push_back(1 + (step * 31 + r * 7 + i * 3) % 1000);
    }
    for (int r = 0; r < rows; ++r) batch.push_back({.slot = r, .tokens = prompts[static_cast<size_t>(r)]});
    return Pass(m, IterationPhase::kPrefill, rows, 8, [&] { return m.runner->Step(batch, logits); });
  }
  static absl::Status Pass(Model& m, IterationPhase phase, int rows, int64_t prompt_len,
                           const std::function<absl::Status()>& run) {
    absl::Status s;
    for (int attempt = 0;; ++attempt) {
      m.session->BeforeIteration(phase, rows, prompt_len);
      m.runner->set_graphs_allowed(m.session->PassMayBeCaptured());
      s = run();
      m.graphs.push_back(m.runner->last_pass_graph());
      m.session->RanAsGraph(m.runner->last_pass_graph());
      if (!m.session->AfterIteration(s) || attempt > 0) break;
    }
    return s;
  }

  // The eager model, whose shape's first pass is recorded and its plan made before the next, and the
  // graphs' model, which has no pass to record: its first one follows that plan. Each sequence starts at
  // position 0: a row attends to its positions so far, which an earlier step must have written.
  void LoadBoth(Model* eager, Model* graphs) {
    *eager = Load(/*graphs=*/false);
    ASSERT_NE(eager->session, nullptr);
    std::vector<float> logits;
    ASSERT_TRUE(Step(*eager, 2, 0, &logits).ok());
    jobs_->Drain();
    *graphs = Load(/*graphs=*/true);
    ASSERT_NE(graphs->session, nullptr);
  }

  // Steps of 2 rows at positions 0..steps-1 on both models (the eager one's position 0 written again,
  // with the same values): the graphs' logits are the eager ones bit for bit.
  static void StepBoth(Model& eager, Model& graphs, int steps) {
    std::vector<float> logits, expected;
    for (int64_t pos = 0; pos < steps; ++pos) {
      ASSERT_TRUE(Step(eager, 2, pos, &expected).ok());
      ASSERT_TRUE(Step(graphs, 2, pos, &logits).ok());
      ASSERT_EQ(logits.size(), expected.size());
      for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(logits[i], expected[i]) << "step at " << pos << ", " << i;
    }
  }

  testing::TempDir dir_;
  base::RealClock clock_;
  // The H200 with in-place reads made slow: the plans stream the weights through the device buffer rather
  // than read those an op reads once in place (Note [Staged or in place], profiler/planner.cc).
  const runtime::GpuSpec spec_ = [] {
    runtime::GpuSpec s = *runtime::FindGpuSpec("h200-pcie5");
    s.uvm.remote_bytes_per_s = 1e3;
    s.uvm.remote_matrix_bytes_per_s = 1e3;
    return s;
  }();
  std::unique_ptr<ProfileStore> store_;
  std::unique_ptr<ProfileRepository> repository_;
  std::unique_ptr<ProfileJobs> jobs_;
  engine::ModelConfig config_;
};

TEST_F(StagedGraphsTest, PassesThroughTheDeviceBufferAreCapturedOnceTheyRepeatAndReplayedWithTheEagerLogitsAndCounts) {
  Model eager, graphs;
  ASSERT_NO_FATAL_FAILURE(LoadBoth(&eager, &graphs));
  const int kSteps = 12;
  ASSERT_NO_FATAL_FAILURE(StepBoth(eager, graphs, kSteps));
  const ExecutionStats e = eager.session->execution()->stats(), g = graphs.session->execution()->stats();
  ASSERT_TRUE(g.following == e.following && !g.following.empty()) << g.following << " / " << e.following;
  EXPECT_GT(g.staged_bytes, 0);  // the plan streams, through the device buffer
  EXPECT_EQ(g.followed_iterations, kSteps) << g.last_error;
  EXPECT_EQ(g.abandoned_iterations, 0) << g.last_error;
  EXPECT_EQ(e.followed_iterations, kSteps);  // and its first pass, recorded
  // Every pass fetched what the eager one did, replays included.
  EXPECT_EQ(g.prefetched_bytes, e.prefetched_bytes);
  EXPECT_GT(g.prefetched_bytes, 0);

  // The first passes run eagerly until one starts where the last one started and ended (the first issues
  // nothing ahead, the second starts from what the first did); that one is captured, the rest replay.
  int captured = 0, replayed = 0, first_captured = -1;
  for (size_t i = 0; i < graphs.graphs.size(); ++i) {
    if (graphs.graphs[i] == PassGraph::kCaptured) {
      ++captured;
      if (first_captured < 0) first_captured = static_cast<int>(i);
    }
    if (graphs.graphs[i] == PassGraph::kReplayed) ++replayed;
    EXPECT_NE(graphs.graphs[i], PassGraph::kCaptureFailed) << "pass " << i;
  }
  EXPECT_EQ(captured, 1);
  EXPECT_EQ(replayed, kSteps - 1 - first_captured);
  EXPECT_GE(first_captured, 1);
  EXPECT_LE(first_captured, 3);
  const engine::StepGraphStats stats = graphs.runner->step_graph_stats();
  EXPECT_EQ(stats.staged_captures, 1);
  EXPECT_EQ(stats.staged_replays, replayed);
  EXPECT_EQ(stats.capture_failures, 0) << stats.last_error;
}

// Note [Staged graphs read the whole pools] (engine/step_graphs.cc): the sequences growing past two KV
// blocks (16 positions each) raise the rows in use twice; the graph captured before serves on, with the
// eager logits, where one keyed on the rows in use was captured again at each.
TEST_F(StagedGraphsTest, ACapturedPassServesOnWhileTheKvRowsInUseGrow) {
  Model eager, graphs;
  ASSERT_NO_FATAL_FAILURE(LoadBoth(&eager, &graphs));
  ASSERT_EQ(graphs.runner->kv_block_tokens(), 16);
  std::vector<int64_t> live;  // the rows in use, as the runner tells the executor before each step
  ModelSession* session = graphs.session.get();
  graphs.runner->set_kv_rows_listener([session, &live](int64_t rows, int64_t pool) {
    live.push_back(rows);
    session->execution()->SetKvRows(rows, pool);
  });
  const int kSteps = 40;
  ASSERT_NO_FATAL_FAILURE(StepBoth(eager, graphs, kSteps));
  ASSERT_FALSE(live.empty());
  EXPECT_LT(live.front(), live.back());  // the rows in use grew while the graph served
  int captured = 0, replayed = 0;
  for (size_t i = 0; i < graphs.graphs.size(); ++i) {
    EXPECT_NE(graphs.graphs[i], PassGraph::kCaptureFailed) << "pass " << i;
    if (graphs.graphs[i] == PassGraph::kCaptured) ++captured;
    if (graphs.graphs[i] == PassGraph::kReplayed) ++replayed;
  }
  EXPECT_EQ(captured, 1);
  EXPECT_GE(replayed, kSteps - 4);
  const ExecutionStats g = graphs.session->execution()->stats();
  EXPECT_EQ(g.followed_iterations, kSteps) << g.last_error;
  EXPECT_EQ(graphs.runner->step_graph_stats().recaptures, 0);
}

// A capture whose pass did not hold (StagedCaptureHeld) is not kept: the pass runs again eagerly, with the
// eager logits, and the bucket is captured again where its passes repeat, kStagedCaptureTries times in
// all; then its passes stay eager. Each failure is counted, with its reason.
TEST_F(StagedGraphsTest, ACapturedPassThatDidNotFollowItsPlanIsDroppedAndItsBucketRunsEagerlyAfterAFewTries) {
  Model eager, graphs;
  ASSERT_NO_FATAL_FAILURE(LoadBoth(&eager, &graphs));
  RefusingHeld refusing(graphs.session.get());
  graphs.runner->set_staged_capture(&refusing);
  const int kSteps = 24;
  const int kTries = engine::StepGraphs::kStagedCaptureTries;
  ASSERT_NO_FATAL_FAILURE(StepBoth(eager, graphs, kSteps));
  int failed = 0, last_failed = -1;
  for (size_t i = 0; i < graphs.graphs.size(); ++i) {
    EXPECT_NE(graphs.graphs[i], PassGraph::kCaptured) << "pass " << i;
    EXPECT_NE(graphs.graphs[i], PassGraph::kReplayed) << "pass " << i;
    if (graphs.graphs[i] == PassGraph::kCaptureFailed) {
      ++failed;
      last_failed = static_cast<int>(i);
    }
  }
  EXPECT_EQ(failed, kTries);
  EXPECT_EQ(refusing.asked, kTries);
  EXPECT_LT(last_failed, kSteps - 4);  // the last steps were not even tried
  // Each refused pass ran again (the scheduler's second attempt, which follows no plan: ModelSession's
  // run again) and every other step followed the plan.
  EXPECT_EQ(graphs.graphs.size(), static_cast<size_t>(kSteps + kTries));
  const ExecutionStats g = graphs.session->execution()->stats();
  EXPECT_EQ(g.abandoned_iterations, kTries);
  EXPECT_EQ(g.followed_iterations, kSteps - kTries);
  const engine::StepGraphStats stats = graphs.runner->step_graph_stats();
  EXPECT_EQ(stats.staged_captures, 0);
  EXPECT_EQ(stats.staged_replays, 0);
  EXPECT_EQ(stats.capture_failures, kTries);
  // The run again ran eagerly too: no graph of the bucket's resident step was captured for it.
  EXPECT_EQ(stats.captures, 0);
  EXPECT_EQ(stats.replays, 0);
  EXPECT_NE(stats.last_error.find("cannot be replayed: op 7 is aten::is_pinned"), std::string::npos)
      << stats.last_error;
}

// The coder finishing a coded copy while a pass is captured moves the plan's state under it (its key has
// the backend's StagingEpoch): the capture is not kept, the pass runs again, and the bucket is captured
// again where its passes repeat, however often that happened (the coder finishes each copy once), with
// the eager logits throughout.
TEST_F(StagedGraphsTest, ACodedCopyFinishedDuringACaptureDropsItAndTheBucketIsCapturedAgain) {
  Model eager, graphs;
  ASSERT_NO_FATAL_FAILURE(LoadBoth(&eager, &graphs));
  auto* mirror = dynamic_cast<runtime::sim::SimBackend*>(graphs.session->execution()->backend());
  ASSERT_NE(mirror, nullptr);
  const runtime::TensorRange* range = nullptr;  // the first weight's
  for (const runtime::NamedTensor& t : graphs.runner->NamedTensors()) {
    if (range == nullptr && !t.name.starts_with("kv_cache"))
      range = graphs.session->execution()->range("param:" + t.name);
  }
  ASSERT_NE(range, nullptr);
  const int kFinishes = engine::StepGraphs::kStagedCaptureTries + 1;
  FinishingCoder coder(graphs.session.get(), mirror, range->addr, kFinishes);
  graphs.runner->set_staged_capture(&coder);
  ASSERT_NO_FATAL_FAILURE(StepBoth(eager, graphs, 32));
  const int replayed = CountOf(graphs.graphs, PassGraph::kReplayed);
  EXPECT_EQ(CountOf(graphs.graphs, PassGraph::kCaptureFailed), kFinishes);
  EXPECT_EQ(CountOf(graphs.graphs, PassGraph::kCaptured), 1);
  EXPECT_GE(replayed, 4);
  EXPECT_EQ(coder.asked, kFinishes + 1);
  const engine::StepGraphStats stats = graphs.runner->step_graph_stats();
  EXPECT_EQ(stats.capture_failures, kFinishes);
  EXPECT_EQ(stats.staged_captures, 1);
  EXPECT_EQ(stats.staged_replays, replayed);
  EXPECT_NE(stats.last_error.find("a coded host copy was finished during the capture"), std::string::npos)
      << stats.last_error;
}

// Note [Packed steps by bucket] (engine/step_graph_options.h): prefills, packed passes, that follow their plan
// through the device buffer are captured with their copies too, once their plan's state repeats, and replay
// with the eager logits.
TEST_F(StagedGraphsTest, PackedPassesThroughTheDeviceBufferAreCapturedAndReplayedWithTheEagerLogits) {
  // The eager model steps over the packed buckets' shapes too (as on a GPU): graphs on, its passes never
  // captured (no key asked: each runs as an observed pass with no key, eagerly).
  Model eager = Load(/*graphs=*/true), graphs;
  ASSERT_NE(eager.session, nullptr);
  eager.runner->set_staged_capture(nullptr);
  std::vector<float> logits, expected;
  ASSERT_TRUE(PrefillStep(eager, 2, 0, &logits).ok());  // recorded, then planned
  jobs_->Drain();
  graphs = Load(/*graphs=*/true);
  ASSERT_NE(graphs.session, nullptr);
  const int kSteps = 8;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(PrefillStep(eager, 2, step, &expected).ok());
    ASSERT_TRUE(PrefillStep(graphs, 2, step, &logits).ok());
    ASSERT_EQ(logits.size(), expected.size());
    for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(logits[i], expected[i]) << "step " << step << ", " << i;
  }
  const ExecutionStats g = graphs.session->execution()->stats();
  EXPECT_GT(g.staged_bytes, 0);
  EXPECT_EQ(g.followed_iterations, kSteps) << g.last_error;
  EXPECT_EQ(g.abandoned_iterations, 0) << g.last_error;
  // Every pass fetched what the eager one did, replays included (the eager model's recorded pass fetched
  // nothing ahead).
  EXPECT_EQ(g.prefetched_bytes, eager.session->execution()->stats().prefetched_bytes);
  EXPECT_GT(g.prefetched_bytes, 0);
  const int captured = CountOf(graphs.graphs, PassGraph::kCaptured);
  const int replayed = CountOf(graphs.graphs, PassGraph::kReplayed);
  EXPECT_EQ(captured, 1);
  EXPECT_EQ(CountOf(graphs.graphs, PassGraph::kCaptureFailed), 0);
  EXPECT_GE(replayed, kSteps - 4);
  const engine::StepGraphStats stats = graphs.runner->step_graph_stats();
  EXPECT_EQ(stats.staged_captures, 1);
  EXPECT_EQ(stats.packed_captures, 1);
  EXPECT_EQ(stats.staged_replays, replayed);
  EXPECT_EQ(stats.packed_replays, replayed);
  EXPECT_EQ(stats.capture_failures, 0) << stats.last_error;
  EXPECT_EQ(std::string(graphs.runner->last_step_form()), "packed: staged, replayed");
  EXPECT_EQ(eager.runner->step_graph_stats().captures, 0);
}

}  // namespace
}  // namespace autouvm::profiler
