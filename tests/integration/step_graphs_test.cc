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
#include "tests/testing/max_rel_err.h"
#include "tests/testing/packed_steps.h"
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
  std::unique_ptr<ModelRunner> Make(StepGraphMode mode, int graph_max_batch = 8, int graph_max_tokens = 512) {
    auto runner = ModelRunner::Create(dir_.Sub(config_.name), config_, kMaxBatch);
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return nullptr;
    EXPECT_TRUE(
        (*runner)->EnableStepGraphs({.mode = mode, .max_batch = graph_max_batch, .max_tokens = graph_max_tokens}).ok());
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
  // A runner that steps eagerly over the buckets' shapes, as on a GPU (emulated graphs never allowed: every
  // step as the observed pass of Note [Staged passes captured], with no key, eagerly), and one with emulated
  // graphs, the same prompts prefilled into both (`len`).
  void MakeBoth(std::unique_ptr<ModelRunner>* eager, std::unique_ptr<ModelRunner>* graphs, std::vector<int64_t>* len) {
    *eager = Make(StepGraphMode::kEmulated);
    *graphs = Make(StepGraphMode::kEmulated);
    ASSERT_NE(*eager, nullptr);
    ASSERT_NE(*graphs, nullptr);
    (*eager)->set_graphs_allowed(false);
    std::vector<int64_t> again;
    Prefill(eager->get(), len);
    Prefill(graphs->get(), &again);
  }
  static constexpr int kMaxBatch = 8;
  ModelConfig config_;
  testing::TempDir dir_;
};

TEST_F(StepGraphsTest, DecodeStepsRunByTheirBucketsGraphGiveTheEagerLogits) {
  std::unique_ptr<ModelRunner> eager, graphs;
  std::vector<int64_t> len;
  ASSERT_NO_FATAL_FAILURE(MakeBoth(&eager, &graphs, &len));
  // The prompts' packed steps (Note [Packed steps by bucket], step_graph_options.h): 3 and 9 tokens share a
  // bucket, captured at its second step; the other three ran eagerly, each the first of its bucket.
  const StepGraphStats after_prefill = graphs->step_graph_stats();
  EXPECT_EQ(after_prefill.eager_steps, 4);
  EXPECT_EQ(after_prefill.captures, 1);
  EXPECT_EQ(after_prefill.packed_captures, 1);
  EXPECT_EQ(after_prefill.replays, 0);
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
  EXPECT_EQ(s.captures - s.packed_captures, static_cast<int64_t>(buckets.size()));
  EXPECT_EQ(s.packed_captures, 1);
  std::set<int64_t> spans;
  for (const auto& b : buckets) spans.insert(b.second);
  EXPECT_EQ(spans, (std::set<int64_t>{64, 128, 256}));
  EXPECT_EQ(s.graphs, s.captures);
  EXPECT_EQ(s.replays, kSteps - (s.captures - s.packed_captures));
  EXPECT_EQ(s.packed_replays, 0);
  EXPECT_GT(s.replays, kSteps / 2);
  EXPECT_EQ(s.capture_failures, 0);
  EXPECT_EQ(s.recaptures, 0);
  EXPECT_EQ(s.eager_steps, 4);
  EXPECT_EQ(eager->step_graph_stats().replays, 0);
}

TEST_F(StepGraphsTest, StepsNotAllowedOrWiderThanTheGraphsRunEagerly) {
  auto graphs = Make(StepGraphMode::kEmulated, /*graph_max_batch=*/2, /*graph_max_tokens=*/16);
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
  const int64_t captures_before = s.captures, replays_before = s.replays, eager_before = s.eager_steps;

  graphs->set_graphs_allowed(false);  // the session observes this pass
  const std::vector<ModelRunner::DecodeRow> observed = {{0, 7, len[0] + 2}};
  ASSERT_TRUE(graphs->Decode(observed, &logits).ok());
  EXPECT_EQ(graphs->last_step_form(), "decode: eager, observed");
  graphs->set_graphs_allowed(true);
  const std::vector<ModelRunner::DecodeRow> three = {{1, 5, len[1]}, {2, 5, len[2]}, {3, 5, len[3]}};
  ASSERT_TRUE(graphs->Decode(three, &logits).ok());  // wider than cuda_graph_max_batch 2
  EXPECT_EQ(graphs->last_step_form(), "decode: eager, too wide");
  // A packed step of one decode row and a 2-token prompt (16 prompt tokens, its bucket's padding): the first
  // of its bucket runs eagerly, the second is captured, the third replayed.
  const int32_t chunk[2] = {9, 10};
  const char* forms[] = {"packed: eager, the first of its bucket", "packed: eager, then captured", "packed: replayed"};
  for (int i = 0; i < 3; ++i) {
    const std::vector<StepRunner::Row> mixed = {
        {.slot = 4, .tokens = {&chunk[0], 1}, .start_pos = len[4] + i, .decode = true},
        {.slot = 5 + i, .tokens = chunk, .start_pos = 0}};
    ASSERT_TRUE(graphs->Step(mixed, &logits).ok());
    EXPECT_EQ(graphs->last_step_form(), forms[i]);
    EXPECT_EQ(logits.size(), 2 * static_cast<size_t>(config_.vocab_size));
  }
  // 20 prompt tokens pad to 32: more than cuda_graph_max_tokens 16.
  const std::vector<int32_t> twenty(20, 11);
  const std::vector<StepRunner::Row> long_chunk = {{.slot = 5, .tokens = twenty, .start_pos = 2}};
  ASSERT_TRUE(graphs->Step(long_chunk, &logits).ok());
  EXPECT_EQ(graphs->last_step_form(), "packed: eager, too many tokens");
  graphs->set_graphs_allowed(false);
  const std::vector<StepRunner::Row> observed_chunk = {{.slot = 6, .tokens = chunk, .start_pos = 2}};
  ASSERT_TRUE(graphs->Step(observed_chunk, &logits).ok());
  EXPECT_EQ(graphs->last_step_form(), "packed: eager, observed");
  s = graphs->step_graph_stats();
  EXPECT_EQ(s.eager_steps, eager_before + 5);
  EXPECT_EQ(s.captures, captures_before + 1);
  EXPECT_EQ(s.replays, replays_before + 1);
  EXPECT_EQ(s.packed_replays, 1);
}

// Note [Packed steps by bucket] (engine/step_graph_options.h): packed steps of every kind — decode rows with
// prompt chunks, prompts alone, several prompts of different lengths, inner chunks that want no logits, rows
// in any order — run by their bucket's graph from its second step on, and give the logits of a runner
// without graphs bit for bit (both pad the step to its bucket).
TEST_F(StepGraphsTest, PackedStepsRunByTheirBucketsGraphGiveTheEagerLogits) {
  std::unique_ptr<ModelRunner> eager, graphs;
  std::vector<int64_t> len;
  ASSERT_NO_FATAL_FAILURE(MakeBoth(&eager, &graphs, &len));
  const StepGraphStats before = graphs->step_graph_stats();
  testing::PackedSteps run = testing::PrefilledBuckets(len, kMaxBatch, config_.max_seq);
  const testing::PackedSteps prefilled = run;
  const int kSteps = 48;
  testing::RunPackedSteps(eager.get(), graphs.get(), len, kSteps, kMaxBatch, config_.max_seq, config_.vocab_size, &run);
  const StepGraphStats s = graphs->step_graph_stats();
  EXPECT_EQ(s.packed_captures - before.packed_captures, run.Captures() - prefilled.Captures());
  EXPECT_EQ(s.packed_replays - before.packed_replays, run.Replays() - prefilled.Replays());
  EXPECT_EQ(s.replays - before.replays, run.Replays() - prefilled.Replays());
  EXPECT_EQ(s.eager_steps - before.eager_steps,
            static_cast<int64_t>(run.buckets.size()) - static_cast<int64_t>(prefilled.buckets.size()));
  EXPECT_GE(run.Replays() - prefilled.Replays(), kSteps / 3) << run.buckets.size() << " buckets";
  EXPECT_EQ(s.capture_failures, 0) << s.last_error;
}

// On the CPU without graphs a packed step runs unpadded (Note [Packed steps by bucket]); padded to its bucket
// it computes the same (fp32, relative error below 1e-5): prompts alone, then a mixed step.
TEST_F(StepGraphsTest, APaddedPackedStepComputesWhatTheUnpaddedOneDoes) {
  auto plain = Make(StepGraphMode::kOff);
  auto padded = Make(StepGraphMode::kEmulated);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(padded, nullptr);
  std::vector<int64_t> len, again;
  Prefill(plain.get(), &len);
  Prefill(padded.get(), &again);
  EXPECT_EQ(plain->last_step_form(), "packed");
  EXPECT_EQ(padded->last_step_form(), "packed: eager, the first of its bucket");
  const std::vector<int32_t> chunk = {5, 6, 7, 8, 9, 10, 11};
  const int32_t next[2] = {21, 22};
  const std::vector<StepRunner::Row> mixed = {
      {.slot = 5, .tokens = chunk, .start_pos = 0},
      {.slot = 1, .tokens = {&next[0], 1}, .start_pos = len[1], .decode = true},
      {.slot = 6, .tokens = {chunk.data(), 3}, .start_pos = 0, .logits = false},
      {.slot = 4, .tokens = {&next[1], 1}, .start_pos = len[4], .decode = true}};
  std::vector<float> want, got;
  ASSERT_TRUE(plain->Step(mixed, &want).ok());
  ASSERT_TRUE(padded->Step(mixed, &got).ok());
  ASSERT_EQ(want.size(), 3 * static_cast<size_t>(config_.vocab_size));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(testing::MaxRelErr(got, want), 1e-5);
}

TEST_F(StepGraphsTest, AGraphWhoseWeightMovedIsCapturedAgain) {
  std::unique_ptr<ModelRunner> eager, graphs;
  std::vector<int64_t> len;
  ASSERT_NO_FATAL_FAILURE(MakeBoth(&eager, &graphs, &len));
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
  EXPECT_EQ(s.captures - s.packed_captures, 2);
  EXPECT_EQ(s.replays, 1);
  step(6);
  EXPECT_EQ(graphs->step_graph_stats().replays, 2);
  ASSERT_TRUE(binding->Unbind(addr).ok());
  step(7);  // and again, back on its own storage
  s = graphs->step_graph_stats();
  EXPECT_EQ(s.recaptures, 2);
  EXPECT_EQ(s.captures - s.packed_captures, 3);
  EXPECT_EQ(s.graphs - s.packed_captures, 1);  // the prompts' packed bucket's graph beside it
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
