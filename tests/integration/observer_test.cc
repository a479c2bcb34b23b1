// The Observer on a generated Llama model: leaf attribution, names, repeatability across iterations and
// processes, and mismatch reports for a changed model.
#include "runtime/observer.h"

#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "runtime/trace_proto.h"
#include "tests/testing/small_model.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::runtime {
namespace {

engine::ModelConfig SmallConfig(const std::string& name, int64_t layers) {
  return testing::SmallLlamaConfig(name, layers);
}

class ObserverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { Observer::MakeExecutionRepeatable(); }

  void SetUp() override {
    auto obs = Observer::Create();
    ASSERT_TRUE(obs.ok()) << obs.status();
    observer_ = std::move(*obs);
  }

  std::unique_ptr<engine::ModelRunner> Load(const engine::ModelConfig& c, int64_t kv_block_tokens = 16,
                                            int max_batch = 2) {
    EXPECT_TRUE(engine::WriteLlamaModel(c, 11, dir_.path()).ok());
    auto runner =
        engine::ModelRunner::Create(dir_.Sub(c.name), c, max_batch, nullptr, {.block_tokens = kv_block_tokens});
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return nullptr;
    (*runner)->NameTensors(observer_.get());
    return std::move(*runner);
  }

  AccessTrace DecodeStep(engine::ModelRunner* runner, int32_t token, int64_t pos) {
    std::vector<float> logits;
    engine::ModelRunner::DecodeRow row{1, token, pos};
    observer_->BeginIteration();
    EXPECT_TRUE(runner->Decode({&row, 1}, &logits).ok());
    return observer_->EndIteration();
  }

  testing::TempDir dir_;
  std::unique_ptr<Observer> observer_;
};

// Note [One global callback]: one observer per model, each model's iterations on its own thread, at once.
// Each observer sees its own model's ops only, named by its own names, and counts what it saw alone.
TEST_F(ObserverTest, ObserversOfTwoModelsOnTwoThreadsEachSeeTheirOwnIterations) {
  auto a = Load(SmallConfig("obs-a", 1));
  auto b = Load(SmallConfig("obs-b", 3));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto second = Observer::Create();
  ASSERT_TRUE(second.ok()) << second.status();
  b->NameTensors(second->get());
  auto steps = [](engine::ModelRunner* runner, Observer* obs, int n, std::vector<AccessTrace>* out) {
    std::vector<float> logits;
    for (int i = 0; i < n; ++i) {
      engine::ModelRunner::DecodeRow row{0, 5 + i, i};
      obs->BeginIteration(i % 2 == 0 ? IterationMode::kRecord : IterationMode::kObserve);
      EXPECT_TRUE(runner->Decode({&row, 1}, &logits).ok());
      out->push_back(obs->EndIteration());
    }
  };
  std::vector<AccessTrace> ta, tb;
  std::thread ra([&] { steps(a.get(), observer_.get(), 6, &ta); });
  std::thread rb([&] { steps(b.get(), second->get(), 6, &tb); });
  ra.join();
  rb.join();
  // Alone, one step of each: what the traces above must equal.
  std::vector<AccessTrace> alone_a, alone_b;
  steps(a.get(), observer_.get(), 1, &alone_a);
  steps(b.get(), second->get(), 1, &alone_b);
  ASSERT_FALSE(alone_a[0].ops.empty());
  EXPECT_GT(alone_b[0].ops.size(), alone_a[0].ops.size());  // three layers against one
  EXPECT_GT(alone_b[0].named.size(), alone_a[0].named.size());
  for (size_t i = 0; i < ta.size(); i += 2) {  // the recorded steps
    EXPECT_EQ(ta[i].ops.size(), alone_a[0].ops.size()) << "step " << i;
    EXPECT_EQ(ta[i].named.size(), alone_a[0].named.size()) << "step " << i;
    EXPECT_EQ(tb[i].ops.size(), alone_b[0].ops.size()) << "step " << i;
    EXPECT_EQ(tb[i].named.size(), alone_b[0].named.size()) << "step " << i;
  }
}

TEST_F(ObserverTest, DecodeStepReadsNamedWeightsAndWritesTheCacheInPlace) {
  const auto c = SmallConfig("obs", 2);
  auto runner = Load(c);
  ASSERT_NE(runner, nullptr);
  ASSERT_TRUE(runner->Prefill(1, std::vector<int32_t>{256, 1, 2}).ok());
  const AccessTrace trace = DecodeStep(runner.get(), 3, 3);
  ASSERT_FALSE(trace.ops.empty());

  std::set<std::string> ops, read_ids, written_ids;
  for (const auto& op : trace.ops) {
    ops.insert(op.op);
    for (const auto& r : op.reads) read_ids.insert(r.id);
    for (const auto& w : op.writes) written_ids.insert(w.id);
  }
  // Composite ops are attributed to their leaves; views are not ops that move data.
  EXPECT_FALSE(ops.count("aten::matmul"));
  EXPECT_FALSE(ops.count("aten::t"));
  for (const std::string w : {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "attn_norm", "mlp_norm"}) {
    for (int l = 0; l < 2; ++l) {
      EXPECT_TRUE(read_ids.count("param:layer" + std::to_string(l) + "." + w)) << "layer" << l << "." << w;
    }
  }
  EXPECT_TRUE(read_ids.count("param:tok_embeddings"));
  EXPECT_TRUE(read_ids.count("param:lm_head"));
  for (int l = 0; l < 2; ++l) {  // each layer's KV pool (Note [Block KV cache], engine/kv_blocks.cc)
    for (const char* kv : {"k", "v"}) {
      const std::string id = absl::StrCat("param:kv_cache.layer", l, ".", kv);
      EXPECT_TRUE(written_ids.count(id)) << id;
      EXPECT_TRUE(read_ids.count(id)) << id;
    }
  }

  // The query projection of layer 0: a [1, 64] × [64, 64] product, 2·1·64·64 FLOPs, reading the whole weight.
  bool found = false;
  for (const auto& op : trace.ops) {
    for (const auto& r : op.reads) {
      if (r.id == "param:layer0.wq" && (op.op == "aten::mm" || op.op == "aten::bmm" || op.op == "aten::addmm")) {
        found = true;
        EXPECT_EQ(op.flops, 2.0 * 1 * 64 * 64) << op.kernel;
        EXPECT_EQ(r.bytes, 64 * 64 * 4);
        EXPECT_EQ(r.run, 64 * 4);  // read as W.t(): its contiguous runs are W's rows
      }
    }
  }
  EXPECT_TRUE(found);
}

// One decode profile serves every position: each step runs the same ops on the same tensors, reads the
// same bytes of every weight, and reads the KV pools only up to their live rows (Note [Packed steps],
// engine/llama_module.cc), so later steps read more of them: here blocks of one position, so one more
// row per step.
TEST_F(ObserverTest, EveryDecodeStepRunsTheSameOpsOnTheSameTensorsAndReadsOnlyLivePositions) {
  auto runner = Load(SmallConfig("repeat", 2), /*kv_block_tokens=*/1);
  ASSERT_NE(runner, nullptr);
  ASSERT_TRUE(runner->Prefill(1, std::vector<int32_t>{256, 7}).ok());
  auto kv_read = [](const AccessTrace& t) {
    int64_t bytes = 0;
    for (const OpRecord& op : t.ops) {
      for (const TensorUse& r : op.reads) {
        bytes += r.id.starts_with("param:kv_cache.layer") && r.id.ends_with(".k") ? r.bytes : 0;
      }
    }
    return bytes;
  };
  const AccessTrace first = DecodeStep(runner.get(), 8, 2);
  int64_t last_kv = kv_read(first);
  EXPECT_GT(last_kv, 0);
  for (int64_t pos = 3; pos < 6; ++pos) {
    const AccessTrace next = DecodeStep(runner.get(), 9, pos);
    ASSERT_EQ(next.ops.size(), first.ops.size()) << "position " << pos;
    for (size_t i = 0; i < first.ops.size(); ++i) {
      const OpRecord &a = first.ops[i], &b = next.ops[i];
      ASSERT_EQ(a.kernel, b.kernel) << "op " << i << " at position " << pos;
      ASSERT_EQ(a.reads.size(), b.reads.size()) << a.kernel;
      ASSERT_EQ(a.writes.size(), b.writes.size()) << a.kernel;
      for (size_t r = 0; r < a.reads.size(); ++r) {
        EXPECT_EQ(a.reads[r].id, b.reads[r].id) << a.kernel;
        if (a.reads[r].id.starts_with("param:layer")) EXPECT_EQ(a.reads[r].bytes, b.reads[r].bytes) << a.kernel;
      }
      for (size_t w = 0; w < a.writes.size(); ++w) EXPECT_EQ(a.writes[w].id, b.writes[w].id) << a.kernel;
    }
    // One more position's keys than the step before (2 heads x head_dim 16 x 4 bytes), in each of 2
    // layers, read by the two ops that reach a layer's key pool: the write into its live rows and the
    // gather from them.
    const int64_t kv = kv_read(next);
    EXPECT_EQ(kv - last_kv, 2 * 2 * (2 * 16 * 4)) << "position " << pos;
    last_kv = kv;
  }
}

TEST_F(ObserverTest, TracesRoundTripThroughProtobuf) {
  auto runner = Load(SmallConfig("proto", 1));
  ASSERT_NE(runner, nullptr);
  ASSERT_TRUE(runner->Prefill(1, std::vector<int32_t>{256, 7}).ok());
  AccessTrace trace = DecodeStep(runner.get(), 8, 2);
  ASSERT_FALSE(trace.named.empty());
  trace.coded_bytes[trace.named.front().id] = 12345;  // Note [Coded sizes in the trace]
  std::string bytes;
  ASSERT_TRUE(ToProto(trace).SerializeToString(&bytes));
  autouvm::v1::AccessTrace parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  const AccessTrace back = FromProto(parsed);
  EXPECT_EQ(CompareTraces(trace, back), std::vector<std::string>());
  EXPECT_EQ(back.ops.size(), trace.ops.size());
  EXPECT_EQ(back.coded_bytes, trace.coded_bytes);
}

TEST_F(ObserverTest, AChangedModelIsReportedAsMismatches) {
  auto two = Load(SmallConfig("two", 2));
  auto three = Load(SmallConfig("three", 3));
  ASSERT_NE(two, nullptr);
  ASSERT_NE(three, nullptr);
  ASSERT_TRUE(two->Prefill(1, std::vector<int32_t>{256}).ok());
  ASSERT_TRUE(three->Prefill(1, std::vector<int32_t>{256}).ok());
  const AccessTrace a = DecodeStep(two.get(), 5, 1);
  const AccessTrace b = DecodeStep(three.get(), 5, 1);
  const auto diff = CompareTraces(a, b);
  ASSERT_FALSE(diff.empty());
  EXPECT_NE(diff.front().find("op "), std::string::npos) << diff.front();
}

// Keeps what the observer hands out, copying the views it is given.
struct Collector : OpSubscriber {
  struct Seen {
    int64_t index;
    std::string kernel;
    std::vector<std::string> ids, dtypes;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<bool> writes;
    std::vector<const void*> data;
  };
  void BeforeOp(int64_t index) override { order.push_back({'b', index}); }
  void OnOp(const OpEvent& e) override {
    order.push_back({'a', e.index});
    Seen s{e.index, std::string(e.kernel), {}, {}, {}, {}, {}};
    for (const TensorAccess& t : e.tensors) {
      s.ids.emplace_back(t.id);
      s.dtypes.emplace_back(t.dtype);
      s.shapes.push_back(t.shape);
      s.writes.push_back(t.write);
      s.data.push_back(t.data);
    }
    seen.push_back(std::move(s));
  }
  std::vector<Seen> seen;
  std::vector<std::pair<char, int64_t>> order;  // 'b': BeforeOp, 'a': OnOp, with the index
};

TEST_F(ObserverTest, SubscribersSeeEachRecordedOpWithItsTensors) {
  auto runner = Load(SmallConfig("subs", 1));
  ASSERT_NE(runner, nullptr);
  ASSERT_TRUE(runner->Prefill(1, std::vector<int32_t>{256, 7}).ok());
  Collector collector;
  observer_->AddSubscriber(&collector);
  const AccessTrace trace = DecodeStep(runner.get(), 8, 2);
  observer_->RemoveSubscriber(&collector);
  ASSERT_EQ(collector.seen.size(), trace.ops.size());
  EXPECT_EQ(observer_->ops_counted(), static_cast<int64_t>(trace.ops.size()));
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    const OpRecord& op = trace.ops[i];
    const Collector::Seen& s = collector.seen[i];
    EXPECT_EQ(s.index, op.index);
    EXPECT_EQ(s.kernel, op.kernel);
    ASSERT_EQ(s.ids.size(), op.reads.size() + op.writes.size()) << op.kernel;
    for (size_t r = 0; r < op.reads.size(); ++r) {
      EXPECT_EQ(s.ids[r], op.reads[r].id);
      EXPECT_FALSE(s.writes[r]);
    }
    for (size_t w = 0; w < op.writes.size(); ++w) {
      EXPECT_EQ(s.ids[op.reads.size() + w], op.writes[w].id);
      EXPECT_TRUE(s.writes[op.reads.size() + w]);
    }
  }
  // The query projection reads the [64, 64] fp32 weight.
  bool found = false;
  for (const auto& s : collector.seen) {
    for (size_t k = 0; k < s.ids.size(); ++k) {
      if (s.ids[k] != "param:layer0.wq") continue;
      found = true;
      EXPECT_EQ(s.dtypes[k], "Float");
      EXPECT_EQ(s.shapes[k], (std::vector<int64_t>{64, 64}));
      EXPECT_NE(s.data[k], nullptr);
    }
  }
  EXPECT_TRUE(found);
  // A recorded op is announced before it runs as in an observed iteration, so that a plan can be
  // followed while the iteration is recorded (Note [Planned from the nearest profile]).
  ASSERT_EQ(collector.order.size(), 2 * trace.ops.size());
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    EXPECT_EQ(collector.order[2 * i], (std::pair<char, int64_t>{'b', static_cast<int64_t>(i)}));
    EXPECT_EQ(collector.order[2 * i + 1], (std::pair<char, int64_t>{'a', static_cast<int64_t>(i)}));
  }
  // Removed: the next iteration is not delivered to it.
  const size_t delivered = collector.seen.size();
  DecodeStep(runner.get(), 9, 3);
  EXPECT_EQ(collector.seen.size(), delivered);
}

// A weight a plan streams through a device buffer is bound to it for its ops (runtime/tensor_binding.h):
// its storage's data pointer is the buffer's then. An iteration recorded meanwhile (Note [Planned from
// the nearest profile]) still names it by its parameter, not as an input of the iteration.
TEST_F(ObserverTest, ARecordedIterationNamesAWeightBoundToABuffer) {
  auto runner = Load(SmallConfig("bound", 1));
  ASSERT_NE(runner, nullptr);
  ASSERT_TRUE(runner->Prefill(1, std::vector<int32_t>{256, 7}).ok());
  auto ids_of = [](const AccessTrace& t) {
    std::vector<std::string> ids;
    for (const OpRecord& op : t.ops) {
      for (const TensorUse& u : op.reads) ids.push_back(u.id);
    }
    return ids;
  };
  const std::vector<std::string> plain = ids_of(DecodeStep(runner.get(), 8, 2));
  std::unique_ptr<TensorBinding> binding = runner->NewTensorBinding();
  ASSERT_NE(binding, nullptr);
  const NamedTensor* wq = nullptr;
  const std::vector<NamedTensor> named = runner->NamedTensors();
  for (const NamedTensor& t : named) {
    if (t.name == "layer0.wq") wq = &t;
  }
  ASSERT_NE(wq, nullptr);
  // The "device buffer": a copy of the weight elsewhere, so the step computes the same.
  std::vector<char> buffer(static_cast<size_t>(wq->bytes));
  std::memcpy(buffer.data(), reinterpret_cast<const void*>(wq->addr), buffer.size());
  const uint64_t at = reinterpret_cast<uint64_t>(buffer.data());
  ASSERT_TRUE(binding->Bind(wq->addr, at).ok());
  EXPECT_EQ(binding->BoundFrom(at), wq->addr);
  const std::vector<std::string> unresolved = ids_of(DecodeStep(runner.get(), 8, 2));
  observer_->ResolveBoundStorage(binding.get());
  const std::vector<std::string> resolved = ids_of(DecodeStep(runner.get(), 8, 2));
  ASSERT_TRUE(binding->Unbind(wq->addr).ok());
  EXPECT_EQ(binding->BoundFrom(at), 0u);
  observer_->ResolveBoundStorage(nullptr);
  EXPECT_EQ(resolved, plain);
  // Without the binding's answer the bound weight is an unknown input: what the test tells apart.
  EXPECT_NE(unresolved, plain);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "param:layer0.wq"), 1);
  EXPECT_EQ(std::count(unresolved.begin(), unresolved.end(), "param:layer0.wq"), 0);
}

TEST_F(ObserverTest, AnObservedIterationNumbersTheSameOpsAsARecordedOne) {
  auto runner = Load(SmallConfig("observe", 2));
  ASSERT_NE(runner, nullptr);
  ASSERT_TRUE(runner->Prefill(1, std::vector<int32_t>{256, 7}).ok());
  const AccessTrace recorded = DecodeStep(runner.get(), 8, 2);
  Collector collector;
  observer_->AddSubscriber(&collector);
  std::vector<float> logits;
  engine::ModelRunner::DecodeRow row{1, 9, 3};
  observer_->BeginIteration(IterationMode::kObserve);
  ASSERT_TRUE(runner->Decode({&row, 1}, &logits).ok());
  const AccessTrace observed = observer_->EndIteration();
  observer_->RemoveSubscriber(&collector);
  EXPECT_TRUE(observed.ops.empty());
  ASSERT_EQ(collector.seen.size(), recorded.ops.size());
  for (size_t i = 0; i < recorded.ops.size(); ++i) {
    EXPECT_EQ(collector.seen[i].kernel, recorded.ops[i].kernel) << "op " << i;
    EXPECT_TRUE(collector.seen[i].ids.empty());
  }
  // Each op is announced exactly once, before it runs and after the previous one finished.
  ASSERT_EQ(collector.order.size(), 2 * recorded.ops.size());
  for (size_t i = 0; i < recorded.ops.size(); ++i) {
    EXPECT_EQ(collector.order[2 * i], (std::pair<char, int64_t>{'b', static_cast<int64_t>(i)}));
    EXPECT_EQ(collector.order[2 * i + 1], (std::pair<char, int64_t>{'a', static_cast<int64_t>(i)}));
  }
  // Outside an iteration nothing is counted or delivered.
  ASSERT_TRUE(runner->Decode({&row, 1}, &logits).ok());
  EXPECT_EQ(collector.seen.size(), recorded.ops.size());
}

// Note [Kernels that depend on size] (runtime/observer.cc): a prefill bucket holds every length in
// (bucket / 2, bucket]; one profile serves them all only if they run the same ops. A small model with
// the default tiny model's max_seq (512: what the mask's size, T x 512, depends on), every length of
// every bucket, recorded at the bucket's top length (as a profile is made) and observed at each of the
// others (as a plan is followed).
TEST_F(ObserverTest, EveryLengthOfAPrefillBucketRunsTheSameOps) {
  engine::ModelConfig c = SmallConfig("buckets", 1);
  c.max_seq = engine::DefaultTinyModelConfig("tiny").max_seq;
  auto runner = Load(c);
  ASSERT_NE(runner, nullptr);
  auto kernels_of = [](const std::vector<OpRecord>& ops) {
    std::vector<std::string> out;
    for (const OpRecord& op : ops) out.push_back(op.kernel);
    return out;
  };
  int buckets = 0;
  for (int64_t bucket = 1; bucket <= c.max_seq; bucket *= 2) {
    std::vector<int32_t> prompt(static_cast<size_t>(bucket), 65);
    observer_->BeginIteration();
    ASSERT_TRUE(runner->Prefill(0, prompt).ok());
    const std::vector<std::string> profile = kernels_of(observer_->EndIteration().ops);
    ASSERT_FALSE(profile.empty());
    for (int64_t len = bucket / 2 + 1; len < bucket; ++len) {
      Collector collector;
      observer_->AddSubscriber(&collector);
      observer_->BeginIteration(IterationMode::kObserve);
      ASSERT_TRUE(runner->Prefill(0, std::vector<int32_t>(static_cast<size_t>(len), 65)).ok());
      observer_->EndIteration();
      observer_->RemoveSubscriber(&collector);
      std::vector<std::string> ran;
      for (const Collector::Seen& s : collector.seen) ran.push_back(s.kernel);
      ASSERT_EQ(ran.size(), profile.size()) << "length " << len << " of bucket " << bucket;
      for (size_t i = 0; i < ran.size(); ++i) {
        ASSERT_EQ(ran[i], profile[i]) << "op " << i << " at length " << len << " of bucket " << bucket;
      }
    }
    ++buckets;
  }
  EXPECT_EQ(buckets, 10);  // 1, 2, 4, ..., 512
}

// Prompt groups of one row and of several run the same ops, so a prefill (or mixed pass) of many prompts
// can follow the plan of one with a single prompt: with grouped-query attention and with one key/value head
// per query head (Llama-2-7B's), where the queries' transposed view of a single row was a view aten::matmul
// could fold and that of several rows was copied inside it (Note [Packed steps], engine/llama_module.cc). Padded
// to their buckets (Note [Packed steps by bucket], engine/step_graph_options.h: on a GPU, or with graphs on, as
// here, observed), three prompts have a padding row, and the logits of the rows they want are picked out of
// those of every row without an op of their own.
TEST_F(ObserverTest, APromptGroupOfOneRowAndOfTwoRunTheSameOps) {
  for (const auto& [kv_heads, padded] : std::vector<std::pair<int64_t, bool>>{{2, false}, {4, false}, {2, true}}) {
    engine::ModelConfig c = SmallConfig(absl::StrCat("rows", kv_heads, padded ? "p" : ""), 1);
    c.n_kv_heads = kv_heads;
    auto runner = Load(c, 16, 4);
    ASSERT_NE(runner, nullptr);
    if (padded) {
      ASSERT_TRUE(runner->EnableStepGraphs({.mode = engine::StepGraphMode::kEmulated}).ok());
      runner->set_graphs_allowed(false);
    }
    const std::vector<int32_t> prompt(8, 65);
    std::vector<std::vector<std::string>> kernels;
    for (int rows = 1; rows <= 3; ++rows) {
      std::vector<engine::StepRunner::Row> step;
      for (int32_t slot = 0; slot < rows; ++slot) step.push_back({.slot = slot, .tokens = prompt});
      std::vector<float> logits;
      observer_->BeginIteration();
      ASSERT_TRUE(runner->Step(step, &logits).ok());
      kernels.emplace_back();
      for (const OpRecord& op : observer_->EndIteration().ops) kernels.back().push_back(op.kernel);
      for (int32_t slot = 0; slot < rows; ++slot) runner->Release(slot);
    }
    ASSERT_FALSE(kernels[0].empty());
    for (size_t r = 1; r < kernels.size(); ++r) {
      SCOPED_TRACE(absl::StrCat(r + 1, " rows, ", kv_heads, " key/value heads", padded ? ", padded" : ""));
      for (size_t i = 0; i < std::min(kernels[0].size(), kernels[r].size()); ++i) {
        ASSERT_EQ(kernels[r][i], kernels[0][i]) << "op " << i;
      }
      EXPECT_EQ(kernels[r].size(), kernels[0].size());
    }
    if (padded) EXPECT_EQ(std::string(runner->last_step_form()), "packed: eager, observed");
  }
}

// Runs `source`'s forward on `inputs` under the observer and returns its trace.
AccessTrace TraceScript(Observer* observer, const std::string& source, std::vector<c10::IValue> inputs) {
  torch::jit::Module m("M");
  m.define(source);
  observer->BeginIteration();
  m.forward(std::move(inputs));
  return observer->EndIteration();
}

TEST_F(ObserverTest, ConvolutionsCountTwoFlopsPerWeightElementAndOutput) {
  torch::NoGradGuard no_grad;
  const AccessTrace t = TraceScript(observer_.get(), "def forward(self, x, w):\n  return torch.conv2d(x, w)\n",
                                    {torch::randn({1, 3, 8, 8}), torch::randn({4, 3, 3, 3})});
  double conv = -1;
  for (const auto& op : t.ops) {
    if (op.op.find("conv") != std::string::npos) conv = op.flops;
  }
  EXPECT_EQ(conv, 2.0 * (4 * 6 * 6) * (3 * 3 * 3));  // output [1, 4, 6, 6], 27 weights per output
}

// An out= overload writes the output it is given, an input: its outputs alias its inputs like a view's,
// but it moves data and is counted, in both modes (CUDA's index_select of many rows runs as
// aten::gather.out; a recorded prefill once dropped it and an observed one did not).
TEST_F(ObserverTest, AnOutOverloadIsCountedInRecordedAndObservedIterations) {
  torch::NoGradGuard no_grad;
  torch::jit::Module m("M");
  m.define("def forward(self, x, i, out):\n  return torch.index_select(x, 0, i, out=out)\n");
  const std::vector<c10::IValue> inputs{torch::randn({8, 4}), torch::tensor({int64_t{1}, int64_t{5}}),
                                        torch::empty({2, 4})};
  observer_->BeginIteration();
  m.forward(inputs);
  const AccessTrace recorded = observer_->EndIteration();
  ASSERT_EQ(recorded.ops.size(), 1u);
  EXPECT_EQ(recorded.ops[0].op, "aten::index_select");
  ASSERT_EQ(recorded.ops[0].writes.size(), 1u);
  EXPECT_EQ(recorded.ops[0].writes[0].id, "input:2");  // in place, into `out`
  Collector collector;
  observer_->AddSubscriber(&collector);
  observer_->BeginIteration(IterationMode::kObserve);
  m.forward(inputs);
  observer_->EndIteration();
  observer_->RemoveSubscriber(&collector);
  ASSERT_EQ(collector.seen.size(), 1u);
  EXPECT_EQ(collector.seen[0].kernel, recorded.ops[0].kernel);
}

// Note [Kernels that depend on size]: CUDA's index_select of many rows runs as a child aten::gather. The
// script here stands in for it (one form or the other by a flag, as CUDA picks by the number of rows):
// both forms are numbered alike, recorded or observed, and the table's use is the rows read.
TEST_F(ObserverTest, AGatherIsNamedAsTheIndexSelectItStandsFor) {
  torch::NoGradGuard no_grad;
  torch::jit::Module m("M");
  m.define(
      "def forward(self, x, i, many: bool):\n"
      "  if many:\n"
      "    return torch.gather(x, 0, i.unsqueeze(1).expand(i.size(0), x.size(1)))\n"
      "  return torch.index_select(x, 0, i)\n");
  const at::Tensor table = torch::randn({64, 4}), rows = torch::tensor({int64_t{3}, int64_t{9}, int64_t{60}});
  for (const bool many : {false, true}) {
    observer_->BeginIteration();
    const at::Tensor out = m.forward({table, rows, many}).toTensor();
    const AccessTrace recorded = observer_->EndIteration();
    EXPECT_TRUE(torch::equal(out, table.index_select(0, rows)));
    ASSERT_EQ(recorded.ops.size(), 1u) << "many " << many;
    EXPECT_EQ(recorded.ops[0].op, "aten::index_select");
    EXPECT_EQ(recorded.ops[0].kernel, "aten::index_select#0");
    ASSERT_FALSE(recorded.ops[0].reads.empty());
    EXPECT_EQ(recorded.ops[0].reads[0].id, "input:0");
    EXPECT_EQ(recorded.ops[0].reads[0].bytes, 3 * 4 * 4);  // three rows of four floats
    Collector collector;
    observer_->AddSubscriber(&collector);
    observer_->BeginIteration(IterationMode::kObserve);
    m.forward({table, rows, !many});
    observer_->EndIteration();
    observer_->RemoveSubscriber(&collector);
    ASSERT_EQ(collector.seen.size(), 1u);
    EXPECT_EQ(collector.seen[0].kernel, "aten::index_select#0") << "observed with many " << !many;
  }
}

// A conversion's result is allocated by a bookkeeping op and filled by aten::copy_: an activation that
// copy_ writes, not an input it reads (Note [Fresh destinations]).
TEST_F(ObserverTest, AConversionsResultIsAnActivationOfTheCopyThatFillsIt) {
  torch::NoGradGuard no_grad;
  const AccessTrace t = TraceScript(observer_.get(), "def forward(self, x, y):\n  return torch.mm(x.double(), y)\n",
                                    {torch::randn({64, 64}), torch::randn({64, 64}, torch::kFloat64)});
  std::string ops;
  for (const auto& op : t.ops) {
    ops += op.kernel + " reads";
    for (const auto& u : op.reads) ops += " " + u.id;
    ops += " writes";
    for (const auto& u : op.writes) ops += " " + u.id;
    ops += "; ";
  }
  ASSERT_EQ(t.ops.size(), 2u) << ops;
  EXPECT_EQ(t.ops[0].op, "aten::copy_") << ops;
  ASSERT_EQ(t.ops[0].reads.size(), 1u);
  EXPECT_EQ(t.ops[0].reads[0].id, "input:0");  // x
  ASSERT_EQ(t.ops[0].writes.size(), 1u);
  EXPECT_EQ(t.ops[0].writes[0].id, "act:aten::copy_@0.0");
  ASSERT_FALSE(t.ops[1].reads.empty());
  EXPECT_EQ(t.ops[1].reads[0].id, "act:aten::copy_@0.0") << ops;
  EXPECT_EQ(t.ops[1].op, "aten::mm") << ops;
  ASSERT_EQ(t.ops[1].reads.size(), 2u) << ops;
  EXPECT_EQ(t.ops[1].reads[1].id, "input:1") << ops;  // y: the only other thing the iteration read
}

TEST_F(ObserverTest, AttentionCountsBothProducts) {
  torch::NoGradGuard no_grad;
  // Called through the dispatcher, boxed, with the schema's defaults: its signature differs by version.
  auto op = c10::Dispatcher::singleton().findSchema({"aten::scaled_dot_product_attention", ""});
  if (!op.has_value()) GTEST_SKIP() << "this libtorch has no fused attention";
  torch::jit::Stack stack{torch::randn({1, 2, 4, 8}), torch::randn({1, 2, 6, 8}), torch::randn({1, 2, 6, 8})};
  const auto& args = op->schema().arguments();
  for (size_t i = stack.size(); i < args.size(); ++i) {
    ASSERT_TRUE(args[i].default_value().has_value()) << args[i].name();
    stack.push_back(*args[i].default_value());
  }
  observer_->BeginIteration();
  op->callBoxed(&stack);
  const AccessTrace t = observer_->EndIteration();
  double total = 0;
  for (const auto& o : t.ops) total += o.flops;
  // Fused or decomposed into batched products, QKᵀ and PV are 2·B·H·L·S·(E + Ev) FLOPs at least.
  EXPECT_GE(total, 2.0 * 1 * 2 * 4 * 6 * (8 + 8));
}

TEST(ObserverAcrossProcesses, TwoProcessesRecordTheSameIds) {
  testing::TempDir dir;
  ASSERT_TRUE(engine::WriteLlamaModel(SmallConfig("xproc", 2), 4, dir.path()).ok());
  std::string out1, err1, out2, err2;
  ASSERT_EQ(testing::RunCommand({TRACE_DUMP_PATH, dir.Sub("xproc"), "0"}, &out1, &err1), 0) << err1;
  ASSERT_EQ(testing::RunCommand({TRACE_DUMP_PATH, dir.Sub("xproc"), "100000"}, &out2, &err2), 0) << err2;
  EXPECT_GT(std::count(out1.begin(), out1.end(), '\n'), 20);
  EXPECT_EQ(out1, out2);
  // The two runs put their buffers at different addresses (heap padding plus address randomization).
  EXPECT_NE(err1.substr(0, err1.find(' ')), err2.substr(0, err2.find(' '))) << err1 << err2;
}

}  // namespace
}  // namespace autouvm::runtime
