// Note [Own layer kernels] on the GPU: each autouvm:: op's CUDA kernel (runtime/cuda/layer_kernels.cu) against its
// CPU reference kernel (engine/layer_ops.cc) on the same random inputs, in bf16 as models run and fp32; and their
// refusals. Skips without a device.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "engine/layer_ops.h"
#include "runtime/cuda/layer_ops.h"
#include "tests/gpu/have_device.h"

namespace autouvm::runtime::cuda {
namespace {

// The op's result for `args` (its first output), or the message it threw.
at::Tensor Call(const std::string& op, std::vector<c10::IValue> args) {
  torch::jit::Stack stack(std::move(args));
  c10::Dispatcher::singleton().findSchemaOrThrow(op.c_str(), "").callBoxed(&stack);
  return stack.at(0).toTensor();
}

// Largest |a - b| over largest |b|, in float.
double RelErr(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor fa = a.to(at::kCPU, at::kFloat), fb = b.to(at::kCPU, at::kFloat);
  return (fa - fb).abs().max().item<double>() / std::max(fb.abs().max().item<double>(), 1e-30);
}

class LayerOpsGpuTest : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (!testing::HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(LayerOpsLinked());
    ASSERT_TRUE(engine::LayerOpsHaveKernels(/*cuda=*/true));
    ASSERT_TRUE(engine::LayerOpsHaveKernels(/*cuda=*/false));
    torch::manual_seed(5);
  }
  at::Tensor Random(std::vector<int64_t> shape) { return torch::randn(shape).to(GetParam()); }
  bool bf16() const { return GetParam() == at::kBFloat16; }
};

TEST_P(LayerOpsGpuTest, RmsNormAndSiluMulMatchTheirReferences) {
  torch::NoGradGuard no_grad;
  const at::Tensor x = Random({5, 4096}), w = Random({4096}), gu = Random({3, 2 * 1376});
  const at::Tensor want = Call("autouvm::rms_norm", {x, w, 1e-5});
  const at::Tensor got = Call("autouvm::rms_norm", {x.cuda(), w.cuda(), 1e-5});
  // The sum of squares is taken in another order: one rounding of the dtype at most.
  EXPECT_LT(RelErr(got, want), bf16() ? 1e-2 : 1e-5);
  EXPECT_LT(RelErr(Call("autouvm::silu_mul", {gu.cuda()}), Call("autouvm::silu_mul", {gu})), bf16() ? 1e-2 : 1e-5);
}

TEST_P(LayerOpsGpuTest, RopeStoreRotatesLikeItsReferenceAndWritesThePoolRowsNamed) {
  torch::NoGradGuard no_grad;
  const int64_t tokens = 6, heads = 8, kv_heads = 2, d = 128;
  const at::Tensor qkv = Random({1, tokens, (heads + 2 * kv_heads) * d});
  const at::Tensor cos = Random({1, tokens, 1, d}), sin = Random({1, tokens, 1, d});
  const at::Tensor rows = torch::tensor({3, 9, 4, 0, 12, 7}, torch::kLong);
  at::Tensor k_cpu = torch::zeros({16, kv_heads, d}).to(GetParam()), v_cpu = k_cpu.clone();
  at::Tensor k_gpu = k_cpu.cuda(), v_gpu = v_cpu.cuda();
  const at::Tensor want =
      Call("autouvm::rope_store", {qkv, cos, sin, k_cpu, v_cpu, rows, int64_t{heads}, int64_t{kv_heads}});
  const at::Tensor got = Call("autouvm::rope_store", {qkv.cuda(), cos.cuda(), sin.cuda(), k_gpu, v_gpu, rows.cuda(),
                                                      int64_t{heads}, int64_t{kv_heads}});
  // Elementwise, each product and the sum rounded as the reference rounds them: bit for bit.
  EXPECT_TRUE(got.cpu().equal(want));
  EXPECT_TRUE(k_gpu.cpu().equal(k_cpu));
  EXPECT_TRUE(v_gpu.cpu().equal(v_cpu));
}

TEST_P(LayerOpsGpuTest, DecodeAttentionOverBlockTablesMatchesItsReference) {
  torch::NoGradGuard no_grad;
  for (const auto& [heads, kv_heads, d, span] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {32, 32, 128, 64}, {32, 8, 128, 300}, {4, 2, 16, 9}, {8, 1, 256, 1030}}) {
    SCOPED_TRACE(::testing::Message() << heads << " heads, " << kv_heads << " kv heads, head_dim " << d << ", span "
                                      << span);
    const int64_t rows = 3, pool_rows = 2048;
    const at::Tensor q = Random({rows, heads, d});
    const at::Tensor k = Random({pool_rows, kv_heads, d}), v = Random({pool_rows, kv_heads, d});
    const at::Tensor table = torch::randint(0, pool_rows, {rows, span}, torch::kLong);
    // Row i sees its first span - 3 i keys; the rest are masked out.
    at::Tensor mask = torch::zeros({rows, 1, 1, span});
    for (int64_t i = 0; i < rows; ++i) mask[i].narrow(-1, span - 3 * i, 3 * i).fill_(-INFINITY);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const at::Tensor want = Call("autouvm::decode_attention", {q, k, v, table, mask, scale});
    const at::Tensor got =
        Call("autouvm::decode_attention", {q.cuda(), k.cuda(), v.cuda(), table.cuda(), mask.cuda(), scale});
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LT(RelErr(got, want), bf16() ? 2e-2 : 1e-5);
  }
}

TEST_P(LayerOpsGpuTest, TheCudaKernelsRefuseWhatTheyCannotTakeNamingIt) {
  auto message = [](const std::string& op, std::vector<c10::IValue> args) -> std::string {
    try {
      Call(op, std::move(args));
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "";
  };
  const at::Tensor x = Random({2, 64}).cuda();
  EXPECT_NE(message("autouvm::rms_norm", {x, Random({64}), 1e-5}).find("autouvm::rms_norm: w is on cpu"),
            std::string::npos);
  const at::Tensor q = Random({2, 4, 512}).cuda(), pool = Random({8, 2, 512}).cuda();
  EXPECT_NE(message("autouvm::decode_attention",
                    {q, pool, pool, torch::zeros({2, 3}, torch::kLong).cuda(), torch::zeros({2, 3}).cuda(), 0.1})
                .find("autouvm::decode_attention: head_dim 512 is over 256"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerOpsGpuTest, ::testing::Values(at::kBFloat16, at::kFloat));

}  // namespace
}  // namespace autouvm::runtime::cuda
