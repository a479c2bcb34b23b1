// The executor on the real GPU (GPU host only): a Llama-shaped model in managed memory decodes the same
// greedy tokens with the executor off (`stock`), `paper` and `autouvm` under budgets of 100%, 66%, 57% and
// 50% of its bytes; the policy's resident account, sampled after every op, never exceeds the budget;
// under autouvm nothing reaches the device by a fault or the driver's own prefetching (CUPTI), so the
// account is the whole of what is resident; managed memory stays within AUTOUVM_MAX_MANAGED_BYTES and
// the card's free memory.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>

#include "bench/decode_harness.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/managed_memory.h"

namespace autouvm::bench {
namespace {

constexpr int64_t kBatch = 4, kPromptLen = 8, kSteps = 6;

// The largest resident account seen after any op.
class ResidencySampler final : public runtime::OpSubscriber {
 public:
  explicit ResidencySampler(const BudgetPolicy* policy) : policy_(policy) {}
  void OnOp(const runtime::OpEvent&) override {
    max_ = std::max(max_, policy_->resident_bytes());
    ++samples_;
  }
  int64_t max() const { return max_; }
  int64_t samples() const { return samples_; }

 private:
  const BudgetPolicy* policy_;
  int64_t max_ = 0, samples_ = 0;
};

TEST(ExecutorGpuTest, TokensMatchAndResidencyStaysWithinTheBudgetUnderEveryPolicy) {
  const auto cap = runtime::cuda::ManagedMemoryPool::CapFromEnvironment();
  ASSERT_TRUE(cap.ok()) << cap.status();
  ASSERT_GT(*cap, 0) << "set AUTOUVM_MAX_MANAGED_BYTES (source .gpu/env.sh)";
  auto pool = runtime::cuda::ManagedMemoryPool::Create(0, {.cap_bytes = *cap});
  ASSERT_TRUE(pool.ok()) << pool.status();
  c10::cuda::CUDAStream compute = c10::cuda::getStreamFromPool(/*isHighPriority=*/true);
  c10::cuda::CUDAStreamGuard stream_guard(compute);
  auto backend = runtime::cuda::CudaBackend::Create(
      {.spec = *runtime::FindGpuSpec("h200-pcie5"), .compute_stream = compute.stream()});
  ASSERT_TRUE(backend.ok()) << backend.status();
  runtime::DeviceBackend* gpu = backend->get();
  auto observer = runtime::Observer::Create();
  ASSERT_TRUE(observer.ok()) << observer.status();
  runtime::Observer::MakeExecutionRepeatable();
  torch::NoGradGuard no_grad;
  runtime::cuda::ManagedMemoryPool::Scope scope(pool->get());

  auto config = LlamaConfig("small", /*seed=*/5, kPromptLen + kSteps + 4);
  ASSERT_TRUE(config.ok()) << config.status();
  auto loaded = LoadDecodeModel(*config, kBatch, observer->get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  DecodeModel& m = *loaded;
  const std::vector<int64_t> first = Prefill(m, kBatch, kPromptLen);
  (*observer)->BeginIteration();
  DecodeStep(m, first, kPromptLen);
  const runtime::AccessTrace trace = (*observer)->EndIteration();
  ASSERT_FALSE(trace.ops.empty());

  auto decode = [&] {
    std::vector<std::vector<int64_t>> out;
    std::vector<int64_t> tok = first;
    for (int64_t s = 0; s < kSteps; ++s) out.push_back(tok = DecodeStep(m, tok, kPromptLen + s));
    return out;
  };
  const auto reference = decode();  // everything resident where the model put it

  for (const std::string policy : {"stock", "paper", "autouvm"}) {
    for (const double fraction : {1.0, 0.66, 0.57, 0.50}) {
      SCOPED_TRACE(policy + " at " + std::to_string(fraction));
      const auto budget = static_cast<int64_t>(static_cast<double>(m.named_bytes) * fraction);
      ASSERT_TRUE(MoveAllToHost(gpu, m).ok());
      auto run = BudgetPolicy::Create(policy, gpu, trace, m, budget, kBatch);
      ASSERT_TRUE(run.ok()) << run.status();
      ResidencySampler sampler(run->get());
      if ((*run)->subscriber() != nullptr) (*observer)->AddSubscriber((*run)->subscriber());
      (*observer)->AddSubscriber(&sampler);
      auto counters_before = gpu->ReadCounters();
      std::vector<std::vector<int64_t>> tokens;
      std::vector<int64_t> tok = first;
      for (int64_t s = 0; s < kSteps; ++s) {
        if (s == 1) counters_before = gpu->ReadCounters();  // after the cold step
        (*observer)->BeginIteration(runtime::IterationMode::kObserve);
        tokens.push_back(tok = DecodeStep(m, tok, kPromptLen + s));
        (*observer)->EndIteration();
        const absl::Status followed = (*run)->EndIteration();
        EXPECT_TRUE(followed.ok()) << "step " << s << ": " << followed;
      }
      ASSERT_TRUE(gpu->Synchronize().ok());
      (*observer)->RemoveSubscriber(&sampler);
      if ((*run)->subscriber() != nullptr) (*observer)->RemoveSubscriber((*run)->subscriber());

      EXPECT_EQ(tokens, reference);
      EXPECT_GE(sampler.samples(), kSteps * static_cast<int64_t>(trace.ops.size()));
      EXPECT_LE(sampler.max(), budget);
      EXPECT_LE((*run)->peak_resident_bytes(), budget);
      if (policy == "autouvm") {
        EXPECT_GT((*run)->peak_resident_bytes(), 0);  // it did place something
        auto after = gpu->ReadCounters();
        ASSERT_TRUE(after.ok() && counters_before.ok());
        const runtime::UvmCounters moved = *after - *counters_before;
        EXPECT_EQ(moved.h2d(runtime::MigrationCause::kFault) + moved.h2d(runtime::MigrationCause::kDriverPrefetch), 0);
        EXPECT_EQ(moved.gpu_fault_groups, 0);
      }
      if (policy != "autouvm" && fraction < 1.0) EXPECT_GT((*run)->peak_resident_bytes(), 0);  // eviction emulated
    }
  }
  EXPECT_LE((*pool)->peak_bytes(), *cap);
  EXPECT_LE((*pool)->peak_bytes(), (*pool)->free_bytes_at_start());
}

}  // namespace
}  // namespace autouvm::bench
