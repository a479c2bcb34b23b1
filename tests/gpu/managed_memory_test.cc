// GPU host only: a TorchScript Llama model moved to CUDA inside a ManagedMemoryPool scope lives in
// managed memory, computes what it computes on the CPU, and the pool's limits refuse before CUDA is asked.
#include "runtime/cuda/managed_memory.h"

#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "runtime/compute_device.h"
#include "runtime/gpu_spec.h"
#include "runtime/observer.h"
#include "tests/testing/packed_steps.h"
#include "tests/testing/small_model.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::runtime::cuda {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(ManagedMemoryTest, ModelParametersCachesAndOutputsAreManagedAndOutputsMatchTheCpu) {
  auto cap = ManagedMemoryPool::CapFromEnvironment();
  ASSERT_TRUE(cap.ok()) << cap.status();
  auto pool = ManagedMemoryPool::Create(0, {.cap_bytes = *cap > 0 ? std::min<int64_t>(*cap, 512 * kMiB) : 512 * kMiB});
  ASSERT_TRUE(pool.ok()) << pool.status();

  testing::TempDir dir;
  const engine::ModelConfig c = testing::SmallLlamaConfig("managed");
  ASSERT_TRUE(engine::WriteLlamaModel(c, 3, dir.path()).ok());
  torch::NoGradGuard no_grad;
  torch::jit::Module cpu = torch::jit::load(dir.Sub("managed/model.pt"));
  auto tokens = torch::tensor({{256, 10, 20, 30}}, torch::kLong);
  const torch::Tensor expected = cpu.get_method("full")({tokens}).toTensor();

  torch::Tensor got;
  {
    ManagedMemoryPool::Scope scope(pool->get());
    torch::jit::Module gpu = torch::jit::load(dir.Sub("managed/model.pt"));
    gpu.to(torch::kCUDA);
    for (const auto& p : gpu.named_parameters()) EXPECT_TRUE(IsManagedPointer(p.value.data_ptr())) << p.name;
    auto k_cache = torch::zeros({c.n_layers, 2, c.n_kv_heads, c.max_seq, c.head_dim}, torch::kCUDA);
    auto v_cache = torch::zeros_like(k_cache);
    EXPECT_TRUE(IsManagedPointer(k_cache.data_ptr()));
    auto on_gpu = tokens.to(torch::kCUDA);
    auto slots = torch::tensor({int64_t{1}}, torch::kLong).to(torch::kCUDA);
    auto start = torch::tensor({int64_t{0}}, torch::kLong).to(torch::kCUDA);
    torch::Tensor logits = gpu.forward({on_gpu, slots, start, k_cache, v_cache}).toTensor();
    EXPECT_TRUE(IsManagedPointer(logits.data_ptr()));
    got = logits.cpu();
  }
  EXPECT_GT((*pool)->peak_bytes(), 0);
  const double rel = (got - expected).abs().max().item<double>() / expected.abs().max().item<double>();
  EXPECT_LT(rel, 1e-3) << "managed-memory CUDA logits differ from the CPU's";
  // A plain CUDA tensor made outside the scope is not managed: the routing is scoped.
  EXPECT_FALSE(IsManagedPointer(torch::zeros({16}, torch::kCUDA).data_ptr()));
}

// Every tensor an op touches while the model runs in the pool's scope (weights, cache, activations).
struct ManagedCheck : OpSubscriber {
  void OnOp(const OpEvent& e) override {
    for (const TensorAccess& t : e.tensors) {
      ++seen;
      // On the host only the scalars libtorch wraps (`x + 1`), never a model tensor.
      const bool ok = t.on_host ? t.shape.empty() : IsManagedPointer(t.data);
      if (!ok) unmanaged.push_back(std::string(e.kernel) + " " + std::string(t.id));
    }
  }
  int64_t seen = 0;
  std::vector<std::string> unmanaged;
};

TEST(ManagedMemoryTest, EveryTensorOfAForwardIsManagedAndOutputsEqualThePlainAllocators) {
  auto pool = ManagedMemoryPool::Create(0, {.cap_bytes = 512 * kMiB});
  ASSERT_TRUE(pool.ok()) << pool.status();
  testing::TempDir dir;
  const engine::ModelConfig c = testing::SmallLlamaConfig("plain");
  ASSERT_TRUE(engine::WriteLlamaModel(c, 5, dir.path()).ok());
  torch::NoGradGuard no_grad;
  auto run = [&](bool managed, ManagedCheck* check) {
    std::optional<ManagedMemoryPool::Scope> scope;
    if (managed) scope.emplace(pool->get());
    torch::jit::Module m = torch::jit::load(dir.Sub("plain/model.pt"));
    m.to(torch::kCUDA);
    auto k_cache = torch::zeros({c.n_layers, 2, c.n_kv_heads, c.max_seq, c.head_dim}, torch::kCUDA);
    auto v_cache = torch::zeros_like(k_cache);
    auto tokens = torch::tensor({{256, 11, 22, 33, 44}}, torch::kLong).to(torch::kCUDA);
    auto slots = torch::tensor({int64_t{1}}, torch::kLong).to(torch::kCUDA);
    auto start = torch::tensor({int64_t{0}}, torch::kLong).to(torch::kCUDA);
    std::unique_ptr<Observer> observer;
    if (check != nullptr) {
      observer = std::move(Observer::Create()).value();
      observer->AddSubscriber(check);
      observer->BeginIteration();
    }
    torch::Tensor logits = m.forward({tokens, slots, start, k_cache, v_cache}).toTensor();
    if (observer != nullptr) observer->EndIteration();
    return logits.cpu();
  };
  const torch::Tensor plain = run(false, nullptr);
  ManagedCheck check;
  const torch::Tensor managed = run(true, &check);
  EXPECT_TRUE(torch::equal(plain, managed)) << "managed memory changed the logits";
  EXPECT_GT(check.seen, 50);
  EXPECT_TRUE(check.unmanaged.empty()) << check.unmanaged.size() << " tensors outside managed memory, first "
                                       << check.unmanaged.front();
}

// The kernel ids of an iteration, as a plan follower sees them.
struct Kernels : OpSubscriber {
  void OnOp(const OpEvent& e) override { ids.emplace_back(e.kernel); }
  std::vector<std::string> ids;
};

// Note [Kernels that depend on size] (runtime/observer.cc) on CUDA: every length of every prefill bucket
// runs the ops the bucket's top length was recorded with, in fp32 and bf16, the model in managed memory.
TEST(ManagedMemoryTest, EveryLengthOfAPrefillBucketRunsTheSameOpsOnTheGpu) {
  auto pool = ManagedMemoryPool::Create(0, {.cap_bytes = 512 * kMiB});
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto observer = Observer::Create();
  ASSERT_TRUE(observer.ok()) << observer.status();
  Observer::MakeExecutionRepeatable();
  for (const std::string dtype : {"fp32", "bf16"}) {
    testing::TempDir dir;
    engine::ModelConfig c = testing::SmallLlamaConfig("buckets", 1, dtype);
    c.max_seq = 2048;
    ASSERT_TRUE(engine::WriteLlamaModel(c, 7, dir.path()).ok());
    torch::NoGradGuard no_grad;
    ManagedMemoryPool::Scope scope(pool->get());
    torch::jit::Module m = torch::jit::load(dir.Sub("buckets/model.pt"));
    m.to(torch::kCUDA);
    const auto options = torch::TensorOptions().dtype((*m.parameters().begin()).scalar_type()).device(torch::kCUDA);
    auto k_cache = torch::zeros({c.n_layers, 1, c.n_kv_heads, c.max_seq, c.head_dim}, options);
    auto v_cache = torch::zeros_like(k_cache);
    auto slots = torch::tensor({int64_t{0}}, torch::kLong).to(torch::kCUDA);
    auto start = torch::tensor({int64_t{0}}, torch::kLong).to(torch::kCUDA);
    auto prefill = [&](int64_t len, IterationMode mode) {
      Kernels k;
      (*observer)->AddSubscriber(&k);
      (*observer)->BeginIteration(mode);
      m.forward({torch::full({1, len}, 65, torch::kLong).to(torch::kCUDA), slots, start, k_cache, v_cache});
      (*observer)->EndIteration();
      (*observer)->RemoveSubscriber(&k);
      return k.ids;
    };
    for (int64_t bucket = 1; bucket <= c.max_seq; bucket *= 2) {
      const std::vector<std::string> profile = prefill(bucket, IterationMode::kRecord);
      ASSERT_FALSE(profile.empty());
      for (int64_t len = bucket / 2 + 1; len < bucket; ++len) {
        const std::vector<std::string> ran = prefill(len, IterationMode::kObserve);
        ASSERT_EQ(ran.size(), profile.size()) << dtype << ": length " << len << " of bucket " << bucket;
        for (size_t i = 0; i < ran.size(); ++i) {
          ASSERT_EQ(ran[i], profile[i]) << dtype << ": op " << i << " at length " << len << " of bucket " << bucket;
        }
      }
    }
  }
}

TEST(ManagedMemoryTest, AnAllocationPastTheCapIsRefusedBeforeCudaIsAsked) {
  auto pool = ManagedMemoryPool::Create(0, {.cap_bytes = 4 * kMiB});
  ASSERT_TRUE(pool.ok()) << pool.status();
  {
    ManagedMemoryPool::Scope scope(pool->get());
    EXPECT_THROW(torch::empty({16 * kMiB}, torch::kCUDA), c10::Error);
  }
  EXPECT_EQ((*pool)->allocated_bytes(), 0);
  EXPECT_NE((*pool)->last_refusal().find("AUTOUVM_MAX_MANAGED_BYTES"), std::string::npos) << (*pool)->last_refusal();
}

TEST(ManagedMemoryTest, ABadDeviceIsAnError) {
  auto pool = ManagedMemoryPool::Create(64, {});
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ManagedMemoryTest, TheEnvironmentCapIsParsed) {
  setenv("AUTOUVM_MAX_MANAGED_BYTES", "12345", 1);
  EXPECT_EQ(ManagedMemoryPool::CapFromEnvironment().value_or(-1), 12345);
  setenv("AUTOUVM_MAX_MANAGED_BYTES", "lots", 1);
  auto bad = ManagedMemoryPool::CapFromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("AUTOUVM_MAX_MANAGED_BYTES"), std::string::npos);
}

}  // namespace
}  // namespace autouvm::runtime::cuda

namespace autouvm::runtime {
namespace {

// Each recorded op's kernel id and, for a failure's message, its tensors' shapes.
struct ShapedKernels : OpSubscriber {
  void OnOp(const OpEvent& e) override {
    ids.emplace_back(e.kernel);
    std::vector<std::string> shapes;
    for (const TensorAccess& t : e.tensors) {
      shapes.push_back(absl::StrCat(t.write ? "w" : "r", "[", absl::StrJoin(t.shape, ","), "]"));
    }
    detail.push_back(absl::StrCat(std::string(e.kernel), " ", absl::StrJoin(shapes, " ")));
  }
  std::vector<std::string> ids, detail;
};

// Note [Kernels that depend on size] on CUDA, through the daemon's runner: a packed step runs the same ops
// whatever number of decode rows and of prompt rows it has, as long as it has the same groups — what lets
// a batch bucket follow its neighbour's plan (Note [Planned from the nearest profile]).
TEST(ManagedMemoryTest, PackedStepsOfOneRowAndOfSeveralRunTheSameOpsOnTheGpu) {
  auto spec = FindGpuSpec("h200-pcie5");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto device = OpenComputeDevice({.backend = "cuda", .spec = *spec});
  if (!device.ok()) GTEST_SKIP() << device.status();
  auto observer = Observer::Create();
  ASSERT_TRUE(observer.ok()) << observer.status();
  Observer::MakeExecutionRepeatable();
  // Grouped-query attention, and one key/value head per query head (Llama-2-7B's); the module as saved
  // and rebuilt with this libtorch's layer kernels (Note [Layer kernels], engine/llama_module.cc).
  for (const auto& [kv_heads, module] :
       std::vector<std::pair<int64_t, std::string>>{{2, ""}, {4, ""}, {2, "autouvm"}, {4, "autouvm"}}) {
    SCOPED_TRACE(absl::StrCat("module: \"", module, "\""));
    testing::TempDir dir;
    engine::ModelConfig c = testing::SmallLlamaConfig(absl::StrCat("rows", kv_heads), 1, "bf16");
    c.n_kv_heads = kv_heads;
    c.module = module;
    ASSERT_TRUE(engine::WriteLlamaModel(c, 7, dir.path()).ok());
    auto runner = engine::ModelRunner::Create(dir.Sub(c.name), c, 8, device->get());
    ASSERT_TRUE(runner.ok()) << runner.status();
    (*runner)->NameTensors(observer->get());
    auto on = (*device)->Enter();
    const std::vector<int32_t> prompt(16, 65), one(1, 66);
    // A step of `decode` decode rows then `prompts` prompt rows, recorded.
    auto step = [&](int decode, int prompts) {
      std::vector<engine::StepRunner::Row> rows;
      for (int32_t slot = 0; slot < decode + prompts; ++slot) {
        if (slot < decode) {
          rows.push_back({.slot = slot, .tokens = one, .start_pos = 0, .decode = true});
        } else {
          rows.push_back({.slot = slot, .tokens = prompt});
        }
      }
      ShapedKernels k;
      (*observer)->AddSubscriber(&k);
      (*observer)->BeginIteration();
      std::vector<float> logits;
      const absl::Status ran = (*runner)->Step(rows, &logits);
      (*observer)->EndIteration();
      (*observer)->RemoveSubscriber(&k);
      EXPECT_TRUE(ran.ok()) << ran;
      for (int32_t slot = 0; slot < decode + prompts; ++slot) (*runner)->Release(slot);
      return k;
    };
    struct Case {
      int decode, prompts;
    };
    for (const auto& [base, others] : std::vector<std::pair<Case, std::vector<Case>>>{
             {{1, 0}, {{2, 0}, {7, 0}}}, {{0, 1}, {{0, 2}, {0, 5}}}, {{1, 1}, {{3, 1}, {1, 3}, {3, 3}}}}) {
      const ShapedKernels want = step(base.decode, base.prompts);
      ASSERT_FALSE(want.ids.empty());
      for (const Case& other : others) {
        const ShapedKernels got = step(other.decode, other.prompts);
        const std::string what = absl::StrCat(kv_heads, " key/value heads: ", other.decode, " decode + ", other.prompts,
                                              " prompt rows against ", base.decode, " + ", base.prompts);
        size_t i = 0;
        while (i < want.ids.size() && i < got.ids.size() && want.ids[i] == got.ids[i]) ++i;
        if (i < want.ids.size() || i < got.ids.size()) {
          std::string context;
          for (size_t j = i >= 2 ? i - 2 : 0; j < i + 3; ++j) {
            absl::StrAppend(&context, "\n  op ", j, ": ", j < got.detail.size() ? got.detail[j] : "-", "   |   ",
                            j < want.detail.size() ? want.detail[j] : "-");
          }
          ADD_FAILURE() << what << ": first differing op " << i << " (ran | expected)" << context;
        }
      }
    }
  }
}

// Note [Captured steps] (engine/step_graphs.cc) as CUDA graphs: decode steps of 1-5 rows over growing
// sequences of every span bucket, each bucket captured on its first step and replayed after, give the
// logits of a runner without graphs bit for bit (bf16; both pad a step to its bucket: Note [Decode steps
// by bucket], engine/step_graph_options.h), so the same greedy tokens, and the graphs' activations are in
// managed memory of their own arena. Then packed steps of every kind (Note [Packed steps by bucket]), each
// bucket captured on its second step.
TEST(ManagedMemoryTest, DecodeStepsRunAsCudaGraphsGiveTheEagerLogits) {
  auto spec = FindGpuSpec("h200-pcie5");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto device = OpenComputeDevice({.backend = "cuda", .spec = *spec});
  if (!device.ok()) GTEST_SKIP() << device.status();
  // As saved, with this libtorch's layer kernels, and with autouvm's own (Note [Own layer kernels]).
  for (const auto& [module, kernels] :
       std::vector<std::pair<std::string, std::string>>{{"", ""}, {"autouvm", ""}, {"autouvm", "own"}}) {
    SCOPED_TRACE(absl::StrCat("module: \"", module, "\", kernels: \"", kernels, "\""));
    testing::TempDir dir;
    engine::ModelConfig c = testing::SmallLlamaConfig("graphs", 2, "bf16");
    c.max_seq = 256;
    c.module = module;
    ASSERT_TRUE(engine::WriteLlamaModel(c, 7, dir.path()).ok());
    if (!kernels.empty()) setenv("AUTOUVM_LAYER_KERNELS", kernels.c_str(), 1);
    auto eager = engine::ModelRunner::Create(dir.Sub(c.name), c, 8, device->get());
    auto graphs = engine::ModelRunner::Create(dir.Sub(c.name), c, 8, device->get());
    unsetenv("AUTOUVM_LAYER_KERNELS");
    ASSERT_TRUE(eager.ok()) << eager.status();
    ASSERT_TRUE(graphs.ok()) << graphs.status();
    ASSERT_TRUE((*graphs)->EnableStepGraphs({.mode = engine::StepGraphMode::kDevice}).ok());
    std::vector<int64_t> len;
    for (int32_t slot = 0; slot < 5; ++slot) {
      const int n = std::vector<int>{3, 9, 20, 70, 130}[slot];
      std::vector<int32_t> prompt(n);
      for (int i = 0; i < n; ++i) prompt[i] = (slot * 37 + i * 11) % 250 + 1;
      ASSERT_TRUE((*eager)->Prefill(slot, prompt).ok());
      ASSERT_TRUE((*graphs)->Prefill(slot, prompt).ok());
      len.push_back(n);
    }
    const int kSteps = 40;
    const size_t V = static_cast<size_t>(c.vocab_size);
    std::vector<int32_t> next(5, 17);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<engine::ModelRunner::DecodeRow> rows;
      for (int i = 0; i < step % 5 + 1; ++i) {
        const int32_t slot = (step + 2 * i) % 5;
        bool taken = false;
        for (const auto& r : rows) taken = taken || r.slot == slot;
        if (!taken) rows.push_back({slot, next[slot], len[slot]});
      }
      std::vector<float> want, got;
      ASSERT_TRUE((*eager)->Decode(rows, &want).ok());
      ASSERT_TRUE((*graphs)->Decode(rows, &got).ok());
      ASSERT_EQ(got.size(), want.size());
      int64_t differing = 0;
      for (size_t i = 0; i < got.size(); ++i) differing += got[i] != want[i] ? 1 : 0;
      EXPECT_EQ(differing, 0) << "step " << step << ": logits differing bits from the eager step's";
      for (size_t r = 0; r < rows.size(); ++r) {
        const auto w = std::max_element(want.begin() + r * V, want.begin() + (r + 1) * V) - (want.begin() + r * V);
        const auto g = std::max_element(got.begin() + r * V, got.begin() + (r + 1) * V) - (got.begin() + r * V);
        EXPECT_EQ(g, w) << "step " << step << ", row " << r;
        next[rows[r].slot] = static_cast<int32_t>(w);
        ++len[rows[r].slot];
      }
    }
    const engine::StepGraphStats s = (*graphs)->step_graph_stats();
    EXPECT_EQ(s.capture_failures, 0) << s.last_error;
    EXPECT_GT(s.captures - s.packed_captures, 3);
    EXPECT_EQ(s.packed_captures, 1);  // the prompts of 3 and 9 tokens share a bucket (Note [Packed steps by bucket])
    EXPECT_EQ(s.replays - s.packed_replays, kSteps - (s.captures - s.packed_captures));
    EXPECT_GT(s.bytes, 0);
    EXPECT_GT(s.capture_seconds, 0);

    // Packed steps (prefills and mixed steps) as CUDA graphs, from each bucket's second step, give the eager
    // logits bit for bit too.
    testing::PackedSteps run = testing::PrefilledBuckets({3, 9, 20, 70, 130}, 8, c.max_seq);
    EXPECT_EQ(run.Captures(), s.packed_captures);
    const int kPacked = 48;
    testing::RunPackedSteps(eager->get(), graphs->get(), len, kPacked, 8, c.max_seq, c.vocab_size, &run);
    const engine::StepGraphStats after = (*graphs)->step_graph_stats();
    EXPECT_EQ(after.capture_failures, 0) << after.last_error;
    EXPECT_EQ(after.packed_captures, run.Captures());
    EXPECT_EQ(after.packed_replays, run.Replays());
    EXPECT_GE(run.Replays(), kPacked / 3);
  }
}

// ComputeDevice::MarkCapturedOutputs: a captured work's Wait() returns once the work launched before the
// mark has run (a staged pass's logits on the host), and each replay records the mark again: the outputs
// read after each Wait() are that replay's. The work after the mark still runs, before the stream's next.
TEST(ManagedMemoryTest, WaitingForAReplayWaitsForTheWorkBeforeItsMark) {
  auto spec = FindGpuSpec("h200-pcie5");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto device = OpenComputeDevice({.backend = "cuda", .spec = *spec});
  if (!device.ok()) GTEST_SKIP() << device.status();
  auto on = (*device)->Enter();
  auto arena = (*device)->NewCaptureArena();
  ASSERT_TRUE(arena.ok()) << arena.status();
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor input = at::zeros({1024}, f32.device(at::kCUDA));
  at::Tensor host = at::empty({1024}, f32.pinned_memory(true));
  at::Tensor big = at::ones({2048, 2048}, f32.device(at::kCUDA));
  at::Tensor after;  // written by the work past the mark
  auto work = (*arena)->Capture([&]() -> absl::Status {
    host.copy_(input * 2 + 1, /*non_blocking=*/true);
    RETURN_IF_ERROR((*device)->MarkCapturedOutputs());
    at::Tensor x = big;
    for (int i = 0; i < 8; ++i) x = at::mm(x, big) / 2048.0;
    after = x.sum();
    return absl::OkStatus();
  });
  ASSERT_TRUE(work.ok()) << work.status();
  for (int replay = 0; replay < 3; ++replay) {
    input.fill_(static_cast<float>(replay));
    ASSERT_TRUE((*work)->Replay().ok());
    ASSERT_TRUE((*work)->Wait().ok());
    const float* h = host.data_ptr<float>();
    for (int i = 0; i < 1024; ++i) ASSERT_EQ(h[i], 2.0f * replay + 1) << "replay " << replay << ", element " << i;
    // The rest of the graph: every product of ones over 2048, summed.
    EXPECT_EQ(after.item<float>(), 2048.0f * 2048.0f) << "replay " << replay;
  }
  // Outside a capture the mark does nothing.
  EXPECT_TRUE((*device)->MarkCapturedOutputs().ok());
}

}  // namespace
}  // namespace autouvm::runtime
