// GPU host only: a TorchScript Llama model moved to CUDA inside a ManagedMemoryPool scope lives in
// managed memory, computes what it computes on the CPU, and the pool's limits refuse before CUDA is asked.
#include "runtime/cuda/managed_memory.h"

#include <gtest/gtest.h>
#include <torch/script.h>

#include <optional>

#include "runtime/observer.h"
#include "server/llama_builder.h"
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
  const server::ModelConfig c = testing::SmallLlamaConfig("managed");
  ASSERT_TRUE(server::WriteLlamaModel(c, 3, dir.path()).ok());
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
  const server::ModelConfig c = testing::SmallLlamaConfig("plain");
  ASSERT_TRUE(server::WriteLlamaModel(c, 5, dir.path()).ok());
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
