// Note [Own layer kernels] (engine/llama_module.cc) on the CPU, through the ops' reference kernels
// (engine/layer_ops.h): the layer code that calls autouvm's ops computes what the portable code does, in every
// kind of packed step, and the ops refuse what they cannot take, naming it.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/llama_builder.h"
#include "engine/llama_module.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "tests/testing/max_rel_err.h"
#include "tests/testing/small_model.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::engine {
namespace {

using testing::MaxRelErr;

// A runner of the entry with the layer code AUTOUVM_LAYER_KERNELS names.
std::unique_ptr<ModelRunner> RunnerWith(const char* kernels, const std::string& entry, const ModelConfig& c) {
  setenv("AUTOUVM_LAYER_KERNELS", kernels, 1);
  auto runner = ModelRunner::Create(entry, c, 4, nullptr, {.tokens = 96, .block_tokens = 4});
  unsetenv("AUTOUVM_LAYER_KERNELS");
  EXPECT_TRUE(runner.ok()) << kernels << ": " << runner.status();
  return runner.ok() ? std::move(*runner) : nullptr;
}

TEST(OwnLayerKernelsTest, GiveThePortableLogitsInPrefillMixedAndDecodeSteps) {
  // Grouped queries, one key/value head per query head, and projections with biases (Qwen's).
  for (const auto& [kv_heads, bias] : std::vector<std::pair<int64_t, bool>>{{2, false}, {4, false}, {2, true}}) {
    SCOPED_TRACE(::testing::Message() << kv_heads << " key/value heads" << (bias ? ", biases" : ""));
    testing::TempDir dir;
    ModelConfig c = testing::SmallLlamaConfig(absl::StrCat("own", kv_heads, bias), 2, "fp32");
    c.n_kv_heads = kv_heads;
    c.attention_bias = bias;
    ASSERT_TRUE(WriteLlamaModel(c, 11, dir.path()).ok());
    c.module = "autouvm";  // as model.yaml says: rebuilt at load with the kernels asked for
    ASSERT_TRUE(OwnKernelsAvailable(c, /*cuda=*/false));
    auto own = RunnerWith("own", dir.Sub(c.name), c);
    auto portable = RunnerWith("portable", dir.Sub(c.name), c);
    ASSERT_NE(own, nullptr);
    ASSERT_NE(portable, nullptr);
    // Two prompts in one pass; then their next tokens with a third prompt's first chunk (mixed); then the third's
    // second chunk alone; then decode steps of all three, whose block tables cross blocks of 4.
    const std::vector<int32_t> a = {256, 3, 1, 4, 1, 5, 9}, b = {256, 2, 7}, p = {256, 6, 2, 8, 3, 1, 8, 5, 3, 0};
    const std::vector<int32_t> next = {40, 41, 42};
    using Row = StepRunner::Row;
    std::vector<std::vector<Row>> steps = {
        {{.slot = 0, .tokens = a}, {.slot = 1, .tokens = b}},
        {{.slot = 0, .tokens = {&next[0], 1}, .start_pos = 7, .decode = true},
         {.slot = 1, .tokens = {&next[1], 1}, .start_pos = 3, .decode = true},
         {.slot = 2, .tokens = {p.data(), 6}, .logits = false}},
        {{.slot = 2, .tokens = {p.data() + 6, 4}, .start_pos = 6}},
    };
    for (int64_t k = 0; k < 6; ++k) {
      steps.push_back({{.slot = 0, .tokens = {&next[0], 1}, .start_pos = 8 + k, .decode = true},
                       {.slot = 1, .tokens = {&next[1], 1}, .start_pos = 4 + k, .decode = true},
                       {.slot = 2, .tokens = {&next[2], 1}, .start_pos = 10 + k, .decode = true}});
    }
    for (size_t s = 0; s < steps.size(); ++s) {
      std::vector<float> want, got;
      ASSERT_TRUE(portable->Step(steps[s], &want).ok());
      const absl::Status ran = own->Step(steps[s], &got);
      ASSERT_TRUE(ran.ok()) << "step " << s << ": " << ran;
      ASSERT_EQ(got.size(), want.size()) << "step " << s;
      EXPECT_LT(MaxRelErr(got, want), 1e-5) << "step " << s;
    }
  }
}

TEST(OwnLayerKernelsTest, AnUnknownChoiceOfKernelsFailsTheLoadNamingTheVariable) {
  testing::TempDir dir;
  ModelConfig c = testing::SmallLlamaConfig("asked", 1, "fp32");
  ASSERT_TRUE(WriteLlamaModel(c, 3, dir.path()).ok());
  c.module = "autouvm";
  setenv("AUTOUVM_LAYER_KERNELS", "fastest", 1);
  auto runner = ModelRunner::Create(dir.Sub(c.name), c, 2);
  unsetenv("AUTOUVM_LAYER_KERNELS");
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().message(),
            "AUTOUVM_LAYER_KERNELS: 'fastest' is not one of portable, fused, own, or not available here");
  c.head_dim = 15;  // odd: no rotary halves for rope_store
  EXPECT_FALSE(OwnKernelsAvailable(c, /*cuda=*/false));
}

TEST(OwnLayerKernelsTest, TheOpsRefuseWhatTheyCannotTakeNamingIt) {
  torch::NoGradGuard no_grad;
  auto call = [](const std::string& op, std::vector<c10::IValue> args) -> std::string {
    const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op.c_str(), "");
    try {
      torch::jit::Stack stack(std::move(args));
      handle.callBoxed(&stack);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "";
  };
  const auto f = torch::kFloat;
  EXPECT_NE(call("autouvm::rms_norm", {torch::ones({2, 8}, f), torch::ones({6}, f), 1e-5})
                .find("autouvm::rms_norm: w of [6] for x of [2, 8]"),
            std::string::npos);
  EXPECT_NE(call("autouvm::silu_mul", {torch::ones({2, 7}, f)})
                .find("autouvm::silu_mul: the last dimension of [2, 7] is not even"),
            std::string::npos);
  torch::Tensor pool = torch::zeros({8, 2, 4}, f);
  EXPECT_NE(call("autouvm::rope_store", {torch::ones({1, 3, 30}, f), torch::ones({3, 4}, f), torch::ones({3, 4}, f),
                                         pool, pool, torch::zeros({3}, torch::kLong), int64_t{4}, int64_t{2}})
                .find("autouvm::rope_store: a product of width 30 for 4 + 2 x 2 heads"),
            std::string::npos);
  EXPECT_NE(call("autouvm::decode_attention", {torch::ones({2, 4, 4}, f), pool, pool,
                                               torch::zeros({2, 5}, torch::kLong), torch::zeros({2, 4}, f), 0.5})
                .find("autouvm::decode_attention: mask [2, 4] for 2 rows of span 5"),
            std::string::npos);
  // What is right runs: the keys of a rope_store land in the rows named.
  torch::Tensor k = torch::zeros({8, 2, 4}, f), v = torch::zeros({8, 2, 4}, f);
  torch::Tensor qkv = torch::arange(1, 33, f).view({1, 1, 32});
  const std::string ok = call("autouvm::rope_store", {qkv, torch::ones({1, 4}, f), torch::zeros({1, 4}, f), k, v,
                                                      torch::full({1}, 5, torch::kLong), int64_t{4}, int64_t{2}});
  EXPECT_EQ(ok, "");
  EXPECT_TRUE(k[5].equal(qkv.view({8, 4}).narrow(0, 4, 2)));  // cos 1, sin 0: the keys as they were
  EXPECT_TRUE(v[5].equal(qkv.view({8, 4}).narrow(0, 6, 2)));
  EXPECT_EQ(k.sum().item<float>(), k[5].sum().item<float>()) << "no other row written";
}

}  // namespace
}  // namespace autouvm::engine
