// Note [Captured steps] (engine/step_graphs.cc), on the CPU: the runner's graph path — buckets, the static
// inputs, padding rows and spans, the capture after a bucket's first step, the address check — with
// kEmulated, whose "replay" runs the captured step again eagerly on the static inputs. The logits of
// every decode step must be those of a runner without graphs, bit for bit (both pad the step to its
// bucket: Note [Decode steps by bucket], engine/step_graph_options.h), and the counters must say which
// steps a graph ran. tests/gpu/managed_memory_test.cc runs the same path as CUDA graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "tests/testing/small_model.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::engine {
namespace {

// Logits that are not the same float.
int64_t Differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i] ? 1 : 0;
  return n;
}

int64_t PowerOfTwo(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

class StepGraphsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::SmallLlamaConfig("graphs", 2, "fp32");
    config_.max_seq = 256;
    ASSERT_TRUE(WriteLlamaModel(config_, 7, dir_.path()).ok());
  }
  std::unique_ptr<ModelRunner> Make(StepGraphMode mode, int graph_max_batch = 8) {
    auto runner = ModelRunner::Create(dir_.Sub(config_.name), config_, kMaxBatch);
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return nullptr;
    EXPECT_TRUE((*runner)->EnableStepGraphs({.mode = mode, .max_batch = graph_max_batch}).ok());
    return std::move(*runner);
  }
  // The same prompts prefilled into slots 0..4 of `r` (lengths 3, 9, 20, 70 and 130: spans of every bucket).
  static void Prefill(ModelRunner* r, std::vector<int64_t>* lengths) {
    lengths->clear();
    for (int32_t slot = 0; slot < 5; ++slot) {
      const int len = std::vector<int>{3, 9, 20, 70, 130}[slot];
      std::vector<int32_t> prompt(len);
      for (int i = 0; i < len; ++i) prompt[i] = (slot * 37 + i * 11) % 250 + 1;
      ASSERT_TRUE(r->Prefill(slot, prompt).ok());
      lengths->push_back(len);
    }
  }
  static constexpr int kMaxBatch = 8;
  ModelConfig config_;
  testing::TempDir dir_;
};

TEST_F(StepGraphsTest, DecodeStepsRunByTheirBucketsGraphGiveTheEagerLogits) {
  auto eager = Make(StepGraphMode::kOff);
  auto graphs = Make(StepGraphMode::kEmulated);
  ASSERT_NE(eager, nullptr);
  ASSERT_NE(graphs, nullptr);
  std::vector<int64_t> len, len2;
  Prefill(eager.get(), &len);
  Prefill(graphs.get(), &len2);
  const StepGraphStats after_prefill = graphs->step_graph_stats();
  EXPECT_EQ(after_prefill.eager_steps, 5);  // prompts run eagerly
  EXPECT_EQ(after_prefill.captures, 0);
  std::set<std::pair<int64_t, int64_t>> buckets;
  const int kSteps = 24;
  int32_t token = 17;
  for (int step = 0; step < kSteps; ++step) {
    // 1..5 rows, a different set each step, their sequences growing.
    const int rows = step % 5 + 1;
    std::vector<ModelRunner::DecodeRow> decode;
    int64_t span = 0;
    for (int i = 0; i < rows; ++i) {
      const int32_t slot = (step + 2 * i) % 5;
      if (std::any_of(decode.begin(), decode.end(), [slot](const auto& r) { return r.slot == slot; })) continue;
      decode.push_back({slot, token, len[slot]});
      span = std::max(span, len[slot] + 1);
    }
    std::vector<float> want, got;
    ASSERT_TRUE(eager->Decode(decode, &want).ok());
    ASSERT_TRUE(graphs->Decode(decode, &got).ok());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(Differing(got, want), 0) << "step " << step;
    for (size_t r = 0; r < decode.size(); ++r) {
      const size_t V = static_cast<size_t>(config_.vocab_size);
      auto argmax = [V, r](const std::vector<float>& l) {
        return std::max_element(l.begin() + r * V, l.begin() + (r + 1) * V) - (l.begin() + r * V);
      };
      EXPECT_EQ(argmax(got), argmax(want)) << "step " << step << ", row " << r;
      ++len[decode[r].slot];
    }
    token = static_cast<int32_t>((token * 7 + 3) % 250 + 1);
    buckets.insert({std::min<int64_t>(PowerOfTwo(static_cast<int64_t>(decode.size())), kMaxBatch),
                    std::min<int64_t>(std::max<int64_t>(kMinDecodeSpan, PowerOfTwo(span)), config_.max_seq)});
  }
  const StepGraphStats s = graphs->step_graph_stats();
  EXPECT_EQ(s.captures, static_cast<int64_t>(buckets.size()));
  std::set<int64_t> spans;
  for (const auto& b : buckets) spans.insert(b.second);
  EXPECT_EQ(spans, (std::set<int64_t>{64, 128, 256}));
  EXPECT_EQ(s.graphs, s.captures);
  EXPECT_EQ(s.replays, kSteps - s.captures);
  EXPECT_GT(s.replays, kSteps / 2);
  EXPECT_EQ(s.capture_failures, 0);
  EXPECT_EQ(s.recaptures, 0);
  EXPECT_EQ(s.eager_steps, 5);
  EXPECT_EQ(eager->step_graph_stats().replays, 0);
}

TEST_F(StepGraphsTest, StepsNotAllowedWiderThanTheGraphsOrMixedRunEagerly) {
  auto graphs = Make(StepGraphMode::kEmulated, /*graph_max_batch=*/2);
  ASSERT_NE(graphs, nullptr);
  std::vector<int64_t> len;
  Prefill(graphs.get(), &len);
  std::vector<float> logits;
  const std::vector<ModelRunner::DecodeRow> one = {{0, 5, len[0]}};
  ASSERT_TRUE(graphs->Decode(one, &logits).ok());  // captured
  EXPECT_EQ(graphs->last_step_form(), "decode: eager, then captured");
  const std::vector<ModelRunner::DecodeRow> one_more = {{0, 6, len[0] + 1}};
  ASSERT_TRUE(graphs->Decode(one_more, &logits).ok());  // replayed
  EXPECT_EQ(graphs->last_step_form(), "decode: replayed");
  StepGraphStats s = graphs->step_graph_stats();
  ASSERT_EQ(s.captures, 1);
  ASSERT_EQ(s.replays, 1);
  const int64_t eager_before = s.eager_steps;

  graphs->set_graphs_allowed(false);  // the session observes this pass
  const std::vector<ModelRunner::DecodeRow> observed = {{0, 7, len[0] + 2}};
  ASSERT_TRUE(graphs->Decode(observed, &logits).ok());
  EXPECT_EQ(graphs->last_step_form(), "decode: eager, observed");
  graphs->set_graphs_allowed(true);
  const std::vector<ModelRunner::DecodeRow> three = {{1, 5, len[1]}, {2, 5, len[2]}, {3, 5, len[3]}};
  ASSERT_TRUE(graphs->Decode(three, &logits).ok());  // wider than cuda_graph_max_batch 2
  EXPECT_EQ(graphs->last_step_form(), "decode: eager, too wide");
  const int32_t chunk[2] = {9, 10};
  const std::vector<StepRunner::Row> mixed = {
      {.slot = 4, .tokens = {&chunk[0], 1}, .start_pos = len[4], .decode = true},
      {.slot = 5, .tokens = chunk, .start_pos = 0}};
  ASSERT_TRUE(graphs->Step(mixed, &logits).ok());
  EXPECT_EQ(graphs->last_step_form(), "packed");
  s = graphs->step_graph_stats();
  EXPECT_EQ(s.eager_steps, eager_before + 3);
  EXPECT_EQ(s.captures, 1);
  EXPECT_EQ(s.replays, 1);
}

TEST_F(StepGraphsTest, AGraphWhoseWeightMovedIsCapturedAgain) {
  auto eager = Make(StepGraphMode::kOff);
  auto graphs = Make(StepGraphMode::kEmulated);
  ASSERT_NE(graphs, nullptr);
  std::vector<int64_t> len, len2;
  Prefill(eager.get(), &len);
  Prefill(graphs.get(), &len2);
  auto step = [&](int32_t token) {
    const std::vector<ModelRunner::DecodeRow> rows = {{1, token, len[1]}};
    std::vector<float> want, got;
    EXPECT_TRUE(eager->Decode(rows, &want).ok());
    EXPECT_TRUE(graphs->Decode(rows, &got).ok());
    EXPECT_EQ(Differing(got, want), 0);
    ++len[1];
  };
  step(3);
  step(4);
  ASSERT_EQ(graphs->step_graph_stats().replays, 1);
  // A binding points layer0.wq at a copy of it elsewhere, as a streaming plan does op by op.
  uint64_t addr = 0;
  int64_t bytes = 0;
  for (const auto& t : graphs->NamedTensors()) {
    if (t.name == "layer0.wq") addr = t.addr, bytes = t.bytes;
  }
  ASSERT_NE(addr, 0u);
  std::vector<float> copy(static_cast<size_t>(bytes) / sizeof(float));
  std::memcpy(copy.data(), reinterpret_cast<const void*>(addr), static_cast<size_t>(bytes));
  auto binding = graphs->NewTensorBinding();
  ASSERT_TRUE(binding->Bind(addr, reinterpret_cast<uint64_t>(copy.data())).ok());
  step(5);  // captured again, over the copy
  EXPECT_EQ(graphs->last_step_form(), "decode: eager, captured again");
  StepGraphStats s = graphs->step_graph_stats();
  EXPECT_EQ(s.recaptures, 1);
  EXPECT_EQ(s.captures, 2);
  EXPECT_EQ(s.replays, 1);
  step(6);
  EXPECT_EQ(graphs->step_graph_stats().replays, 2);
  ASSERT_TRUE(binding->Unbind(addr).ok());
  step(7);  // and again, back on its own storage
  s = graphs->step_graph_stats();
  EXPECT_EQ(s.recaptures, 2);
  EXPECT_EQ(s.captures, 3);
  EXPECT_EQ(s.graphs, 1);
}

TEST_F(StepGraphsTest, TheCpuCapturesNothing) {
  auto runner = ModelRunner::Create(dir_.Sub(config_.name), config_, kMaxBatch);
  ASSERT_TRUE(runner.ok());
  const absl::Status s = (*runner)->EnableStepGraphs({.mode = StepGraphMode::kDevice});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("CPU captures no graphs"), std::string::npos) << s;
  EXPECT_EQ((*runner)->EnableStepGraphs({.mode = StepGraphMode::kEmulated, .max_batch = 0}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace autouvm::engine
