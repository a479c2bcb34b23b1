// The engine against itself, on generated tiny models: the KV-cached path (prefill, then batched decode
// steps in slots) must give the logits of a full forward without any cache.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/llama_builder.h"
#include "engine/llama_module.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "tests/testing/max_rel_err.h"
#include "tests/testing/small_model.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::server {
namespace {

using testing::MaxRelErr;

engine::ModelConfig SmallConfig(const std::string& name, const std::string& dtype) {
  return testing::SmallLlamaConfig(name, 2, dtype);
}

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<engine::ModelRunner> Make(const engine::ModelConfig& c, int max_batch) {
    EXPECT_TRUE(engine::WriteLlamaModel(c, 7, dir_.path()).ok());
    auto runner = engine::ModelRunner::Create(dir_.Sub(c.name), c, max_batch);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return runner.ok() ? std::move(*runner) : nullptr;
  }
  testing::TempDir dir_;
};

TEST_F(EngineTest, DecodeWithCacheMatchesFullForward) {
  const engine::ModelConfig c = SmallConfig("m32", "fp32");
  auto runner = Make(c, 4);
  ASSERT_NE(runner, nullptr);
  const std::vector<int32_t> seq = {256, 72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100};
  const size_t prompt = 5;
  auto full = runner->FullForward(seq);
  ASSERT_TRUE(full.ok()) << full.status();
  const size_t V = c.vocab_size;
  ASSERT_EQ(full->size(), seq.size() * V);

  // Prefill the prompt into slot 2, then one decode step per remaining token.
  auto last = runner->Prefill(2, absl::MakeConstSpan(seq.data(), prompt));
  ASSERT_TRUE(last.ok()) << last.status();
  std::vector<float> want(full->begin() + (prompt - 1) * V, full->begin() + prompt * V);
  EXPECT_LT(MaxRelErr(*last, want), 1e-5);
  for (size_t p = prompt; p < seq.size(); ++p) {
    std::vector<float> logits;
    engine::ModelRunner::DecodeRow row{2, seq[p], static_cast<int64_t>(p)};
    ASSERT_TRUE(runner->Decode({&row, 1}, &logits).ok());
    want.assign(full->begin() + p * V, full->begin() + (p + 1) * V);
    EXPECT_LT(MaxRelErr(logits, want), 1e-5) << "position " << p;
  }
}

// As deep as the largest Llama-family models (Llama 2 70B has 80 layers): the module builds, saves,
// loads and decodes as the shallow one does. Before Note [One type for every layer] (engine/llama_module.cc)
// compiling a model of 32 layers took more than 24 GB in libtorch's alias analysis and never got here.
TEST_F(EngineTest, ModelsOfEightyLayersBuildLoadAndDecode) {
  const engine::ModelConfig c = testing::SmallLlamaConfig("deep", 80, "fp32");
  auto runner = Make(c, 1);
  ASSERT_NE(runner, nullptr);
  const std::vector<int32_t> seq = {256, 72, 101, 108, 108, 111};
  auto full = runner->FullForward(seq);
  ASSERT_TRUE(full.ok()) << full.status();
  const size_t V = c.vocab_size;
  ASSERT_EQ(full->size(), seq.size() * V);
  auto last = runner->Prefill(0, absl::MakeConstSpan(seq.data(), seq.size()));
  ASSERT_TRUE(last.ok()) << last.status();
  const std::vector<float> want(full->end() - V, full->end());
  EXPECT_LT(MaxRelErr(*last, want), 1e-5);
  EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float x) { return std::isfinite(x); }));
}

TEST_F(EngineTest, BatchedDecodeMatchesEachSequenceAlone) {
  const engine::ModelConfig c = SmallConfig("batch", "fp32");
  auto runner = Make(c, 4);
  ASSERT_NE(runner, nullptr);
  const std::vector<std::vector<int32_t>> seqs = {{256, 1, 2, 3, 4, 5}, {256, 9, 8}, {256, 40, 41, 42, 43}};
  const size_t V = c.vocab_size;
  std::vector<engine::ModelRunner::DecodeRow> rows;
  std::vector<std::vector<float>> want;
  for (size_t s = 0; s < seqs.size(); ++s) {
    // Sequences of different lengths in slots 3, 1, 0: the step must respect each slot's position.
    const int32_t slot = std::vector<int32_t>{3, 1, 0}[s];
    const auto& q = seqs[s];
    ASSERT_TRUE(runner->Prefill(slot, absl::MakeConstSpan(q.data(), q.size() - 1)).ok());
    rows.push_back({slot, q.back(), static_cast<int64_t>(q.size()) - 1});
    auto full = runner->FullForward(q);
    ASSERT_TRUE(full.ok());
    want.emplace_back(full->end() - V, full->end());
  }
  std::vector<float> logits;
  ASSERT_TRUE(runner->Decode(rows, &logits).ok());
  ASSERT_EQ(logits.size(), rows.size() * V);
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<float> got(logits.begin() + s * V, logits.begin() + (s + 1) * V);
    EXPECT_LT(MaxRelErr(got, want[s]), 1e-5) << "sequence " << s;
  }
}

// Prompts of different lengths in one pass (Note [Packed steps], engine/llama_module.cc: the prompt
// group is laid out padded to the longest) give each row's last logits as its full forward does, and the
// decode step after it reads only what each row's own prompt wrote.
TEST_F(EngineTest, PromptsPrefilledTogetherMatchTheirFullForwardAndDecodeOnFromThere) {
  const engine::ModelConfig c = SmallConfig("m32", "fp32");
  auto runner = Make(c, 4);
  ASSERT_NE(runner, nullptr);
  const std::vector<std::vector<int32_t>> seqs = {{256, 1, 2, 3, 4, 5, 6}, {256, 9, 8}, {256, 40, 41, 42, 43}};
  const std::vector<int32_t> slots = {2, 0, 3};
  const size_t V = c.vocab_size;
  std::vector<engine::StepRunner::PrefillRow> prompts;
  std::vector<engine::ModelRunner::DecodeRow> rows;
  std::vector<std::vector<float>> want_prefill, want_decode;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto& q = seqs[s];
    const size_t prompt = q.size() - 1;  // the last token is decoded after the prefill
    prompts.push_back({slots[s], absl::MakeConstSpan(q.data(), prompt), 0});
    rows.push_back({slots[s], q.back(), static_cast<int64_t>(prompt)});
    auto full = runner->FullForward(q);
    ASSERT_TRUE(full.ok()) << full.status();
    want_prefill.emplace_back(full->begin() + (prompt - 1) * V, full->begin() + prompt * V);
    want_decode.emplace_back(full->end() - V, full->end());
  }
  std::vector<float> logits;
  ASSERT_TRUE(runner->Prefill(prompts, &logits).ok());
  ASSERT_EQ(logits.size(), seqs.size() * V);
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<float> got(logits.begin() + s * V, logits.begin() + (s + 1) * V);
    EXPECT_LT(MaxRelErr(got, want_prefill[s]), 1e-5) << "prompt " << s;
  }
  ASSERT_TRUE(runner->Decode(rows, &logits).ok());
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<float> got(logits.begin() + s * V, logits.begin() + (s + 1) * V);
    EXPECT_LT(MaxRelErr(got, want_decode[s]), 1e-5) << "sequence " << s;
  }
  // Rows the pass cannot hold are refused, naming the row.
  const std::vector<int32_t> one = {256, 7};
  const std::vector<int32_t> too_long(static_cast<size_t>(c.max_seq), 7);
  EXPECT_EQ(runner->Prefill({{1, one, 0}, {1, one, 0}}, &logits).message(), "row 1: slot 1 given twice");
  EXPECT_EQ(runner->Prefill({{1, one, 0}, {2, {}, 0}}, &logits).message(), "row 1: no tokens");
  EXPECT_EQ(runner->Prefill({{1, one, 0}, {9, one, 0}}, &logits).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(runner->Prefill({{1, one, 1}, {2, too_long, 0}}, &logits).ok()) << "a row that fills max_seq fits";
  const auto beyond = runner->Prefill({{1, one, 0}, {2, too_long, 1}}, &logits);
  EXPECT_EQ(beyond.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(beyond.message(), absl::StrCat("row 1: positions 1..", c.max_seq, " beyond max_seq ", c.max_seq));
  const std::vector<engine::StepRunner::Row> two_tokens = {{.slot = 1, .tokens = one, .decode = true}};
  EXPECT_EQ(runner->Step(two_tokens, &logits).message(), "row 0: a decode row of 2 tokens");
}

// A mixed step — decode rows and prompt chunks in one packed pass, a prompt's inner chunk giving no
// logits — computes what each sequence computes alone (fp32, relative error below 1e-5).
TEST_F(EngineTest, AMixedStepOfDecodeRowsAndPromptChunksMatchesEachSequenceAlone) {
  const engine::ModelConfig c = SmallConfig("mixed", "fp32");
  auto runner = Make(c, 4);
  ASSERT_NE(runner, nullptr);
  const size_t V = c.vocab_size;
  const std::vector<int32_t> a = {256, 1, 2, 3, 4, 5, 6, 7};        // prefilled to 5, then decoded
  const std::vector<int32_t> b = {256, 9, 8, 7, 6, 5, 4, 3, 2, 1};  // chunks of 3 and 7
  const std::vector<int32_t> d = {256, 40, 41, 42};                 // whole in the first step, then decoded
  std::vector<std::vector<float>> full;
  for (const auto* q : {&a, &b, &d}) {
    auto f = runner->FullForward(*q);
    ASSERT_TRUE(f.ok()) << f.status();
    full.push_back(*f);
  }
  auto at = [&](int seq, size_t pos) {
    return std::vector<float>(full[seq].begin() + pos * V, full[seq].begin() + (pos + 1) * V);
  };
  auto row_of = [&](const std::vector<float>& logits, size_t i) {
    return std::vector<float>(logits.begin() + i * V, logits.begin() + (i + 1) * V);
  };
  ASSERT_TRUE(runner->Prefill(3, absl::MakeConstSpan(a.data(), 5)).ok());
  using Row = engine::StepRunner::Row;
  std::vector<float> logits;
  const std::vector<Row> first = {{.slot = 3, .tokens = {&a[5], 1}, .start_pos = 5, .decode = true},
                                  {.slot = 1, .tokens = {b.data(), 3}, .start_pos = 0, .logits = false},
                                  {.slot = 0, .tokens = d, .start_pos = 0}};
  ASSERT_TRUE(runner->Step(first, &logits).ok());
  ASSERT_EQ(logits.size(), 2 * V) << "the inner chunk gives no logits";
  EXPECT_LT(MaxRelErr(row_of(logits, 0), at(0, 5)), 1e-5);
  EXPECT_LT(MaxRelErr(row_of(logits, 1), at(2, d.size() - 1)), 1e-5);
  // Rows in any order: prompt chunk first, decode rows after.
  const std::vector<int32_t> d_next = {50};
  const std::vector<Row> second = {{.slot = 1, .tokens = {b.data() + 3, 7}, .start_pos = 3},
                                   {.slot = 3, .tokens = {&a[6], 1}, .start_pos = 6, .decode = true},
                                   {.slot = 0, .tokens = d_next, .start_pos = 4, .decode = true}};
  ASSERT_TRUE(runner->Step(second, &logits).ok());
  ASSERT_EQ(logits.size(), 3 * V);
  EXPECT_LT(MaxRelErr(row_of(logits, 0), at(1, b.size() - 1)), 1e-5) << "b's last chunk";
  EXPECT_LT(MaxRelErr(row_of(logits, 1), at(0, 6)), 1e-5) << "a's decode row";
  std::vector<int32_t> d_then = d;
  d_then.push_back(50);
  auto f = runner->FullForward(d_then);
  ASSERT_TRUE(f.ok());
  EXPECT_LT(MaxRelErr(row_of(logits, 2), std::vector<float>(f->end() - V, f->end())), 1e-5) << "d's decode row";
}

TEST_F(EngineTest, ReusedSlotIgnoresStaleCache) {
  const engine::ModelConfig c = SmallConfig("reuse", "fp32");
  auto runner = Make(c, 1);
  ASSERT_NE(runner, nullptr);
  const std::vector<int32_t> long_seq = {256, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(runner->Prefill(0, long_seq).ok());
  const std::vector<int32_t> short_seq = {256, 100, 101};
  auto cached = runner->Prefill(0, short_seq);
  auto full = runner->FullForward(short_seq);
  ASSERT_TRUE(cached.ok() && full.ok());
  std::vector<float> want(full->end() - c.vocab_size, full->end());
  EXPECT_LT(MaxRelErr(*cached, want), 1e-5);
}

TEST_F(EngineTest, GreedyDecodingIsDeterministic) {
  const engine::ModelConfig c = SmallConfig("greedy", "fp32");
  auto runner = Make(c, 1);
  ASSERT_NE(runner, nullptr);
  auto run = [&]() {
    std::vector<int32_t> seq = {256, 65, 66};
    engine::Sampler sampler(engine::SamplingConfig{.temperature = 0});
    auto logits = runner->Prefill(0, seq);
    EXPECT_TRUE(logits.ok());
    std::vector<float> l = *logits;
    for (int i = 0; i < 20; ++i) {
      const int32_t t = sampler.Sample(absl::MakeSpan(l), seq, /*prompt_len=*/3);
      seq.push_back(t);
      engine::ModelRunner::DecodeRow row{0, t, static_cast<int64_t>(seq.size()) - 1};
      EXPECT_TRUE(runner->Decode({&row, 1}, &l).ok());
    }
    return seq;
  };
  const auto a = run();
  EXPECT_EQ(a, run());
  // A random model that always repeats one token would make this test weak; it does not.
  EXPECT_GT(std::set<int32_t>(a.begin() + 3, a.end()).size(), 1u);
}

TEST_F(EngineTest, LowPrecisionModelsRun) {
  for (const std::string dtype : {"bf16", "fp16"}) {
    const engine::ModelConfig c = SmallConfig("m" + dtype, dtype);
    auto runner = Make(c, 2);
    ASSERT_NE(runner, nullptr) << dtype;
    const std::vector<int32_t> seq = {256, 70, 71, 72};
    auto cached = runner->Prefill(1, seq);
    auto full = runner->FullForward(seq);
    ASSERT_TRUE(cached.ok() && full.ok()) << dtype;
    std::vector<float> want(full->end() - c.vocab_size, full->end());
    EXPECT_LT(MaxRelErr(*cached, want), 2e-2) << dtype;
  }
}

TEST_F(EngineTest, GeneratedWeightsAreSmallOnDiskAndTheSameForTheSameSeed) {
  engine::ModelConfig c = SmallConfig("gen", "bf16");
  c.generated_weights_seed = 5;
  auto a = Make(c, 1);
  ASSERT_NE(a, nullptr);
  // A placeholder per parameter on disk, the full parameters once loaded.
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(dir_.Sub("gen/model.pt")));
  EXPECT_LT(file_bytes, a->parameter_bytes() / 4) << "model.pt holds weights";
  ASSERT_TRUE(engine::LoadModelConfig(dir_.Sub("gen/model.yaml")).ok());
  EXPECT_EQ(engine::LoadModelConfig(dir_.Sub("gen/model.yaml"))->generated_weights_seed, 5);
  const std::vector<int32_t> seq = {256, 70, 71, 72};
  auto la = a->Prefill(0, seq);
  auto b = engine::ModelRunner::Create(dir_.Sub("gen"), c, 1);
  ASSERT_TRUE(la.ok() && b.ok());
  auto lb = (*b)->Prefill(0, seq);
  ASSERT_TRUE(lb.ok());
  EXPECT_EQ(*la, *lb);
  // The cached path still agrees with the full forward: real weights, not broadcast placeholders.
  auto full = a->FullForward(seq);
  ASSERT_TRUE(full.ok());
  EXPECT_LT(MaxRelErr(*la, std::vector<float>(full->end() - c.vocab_size, full->end())), 2e-2);
  EXPECT_GT(*std::max_element(la->begin(), la->end()) - *std::min_element(la->begin(), la->end()), 0.1f);
  c.generated_weights_seed = 6;
  auto other = engine::ModelRunner::Create(dir_.Sub("gen"), c, 1);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*(*other)->Prefill(0, seq), *la);
}

TEST_F(EngineTest, RejectsAFileThatIsNotAModel) {
  const engine::ModelConfig c = SmallConfig("broken", "fp32");
  std::filesystem::create_directories(dir_.Sub("broken"));
  { std::ofstream(dir_.Sub("broken/model.pt")) << "not a zip archive"; }
  auto runner = engine::ModelRunner::Create(dir_.Sub("broken"), c, 1);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(runner.status().message().find("model.pt"), std::string::npos) << runner.status();
}

// An entry written before packed steps (a module with forward and full, no step) is refused, saying what
// to do.
// Entries of the [B, T] contract (no `step`) and of the packed steps before the block KV cache (a `step`
// of slots into a max_batch x max_seq cache) are refused alike.
TEST_F(EngineTest, RejectsAnEntryWrittenForTheEarlierContractSayingToWriteItAgain) {
  const std::vector<std::string> earlier_steps = {"", R"JIT(
def step(self, tokens, positions, slots, nd: int, d_slots, d_span: int, p_slots, p_index, p_flat, p_span: int,
         logit_ix, k_cache, v_cache):
    return self.inner.full(tokens.unsqueeze(0))[0]
)JIT"};
  for (const std::string& step : earlier_steps) {
    const engine::ModelConfig c = SmallConfig("earlier", "fp32");
    ASSERT_TRUE(engine::WriteLlamaModel(c, 1, dir_.path()).ok());
    const std::string pt = dir_.Sub("earlier/model.pt");
    torch::jit::Module outer("Earlier");
    outer.register_attribute("training", c10::BoolType::get(), false);
    outer.register_module("inner", torch::jit::load(pt));
    outer.define(absl::StrCat(R"JIT(
def forward(self, tokens, slots, start_pos, k_cache, v_cache):
    return self.inner.forward(tokens, slots, start_pos, k_cache, v_cache)

def full(self, tokens):
    return self.inner.full(tokens)
)JIT",
                              step));
    outer.save(pt);
    auto runner = engine::ModelRunner::Create(dir_.Sub("earlier"), c, 1);
    ASSERT_FALSE(runner.ok()) << (step.empty() ? "no step" : "a step of slots");
    EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(runner.status().message(),
              absl::StrCat(pt,
                           ": has no `step` method of the block KV cache's packed form (docs/model-contract.md): it "
                           "was written for an earlier model contract; write the entry again with autouvm-mkmodel or "
                           "autouvm-convert"));
  }
}

// Note [Block KV cache]: a pool of 12 blocks of 4 positions (48, where 4 slots x max_seq would be far
// more) serves sequences that take blocks as they grow and give them back when they end; a sequence
// prefilled into blocks another one gave back decodes to its full forward's logits.
// Note [Layer kernels] (engine/llama_module.cc): an entry autouvm wrote says so in model.yaml and runs
// rebuilt with this build's layer code — the same logits as the code it was saved with (bit for bit where
// that is the portable code again, libtorch 1.13; within fp32 rounding for the fused kernels of 2.x).
// A module of the user's around autouvm's that claims to be autouvm's is refused, saying why.
TEST_F(EngineTest, AnEntryAutouvmWroteRunsWithThisBuildsLayerCodeAndTheSameLogits) {
  const engine::ModelConfig c = SmallConfig("rebuilt", "fp32");
  ASSERT_TRUE(engine::WriteLlamaModel(c, 7, dir_.path()).ok());
  auto yaml = engine::LoadModelConfig(dir_.Sub("rebuilt/model.yaml"));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_EQ(yaml->module, "autouvm");
  engine::ModelConfig as_saved = *yaml;
  as_saved.module.clear();
  auto saved = engine::ModelRunner::Create(dir_.Sub("rebuilt"), as_saved, 2);
  auto rebuilt = engine::ModelRunner::Create(dir_.Sub("rebuilt"), *yaml, 2);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  const std::vector<int32_t> seq = {256, 72, 101, 108, 108, 111, 32, 119};
  auto a = (*saved)->Prefill(0, absl::MakeConstSpan(seq.data(), 5));
  auto b = (*rebuilt)->Prefill(0, absl::MakeConstSpan(seq.data(), 5));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::vector<float>> got_saved = {*a}, got_rebuilt = {*b};
  for (size_t p = 5; p < seq.size(); ++p) {
    engine::ModelRunner::DecodeRow row{0, seq[p], static_cast<int64_t>(p)};
    got_saved.emplace_back();
    got_rebuilt.emplace_back();
    ASSERT_TRUE((*saved)->Decode({&row, 1}, &got_saved.back()).ok());
    ASSERT_TRUE((*rebuilt)->Decode({&row, 1}, &got_rebuilt.back()).ok());
  }
  // The joined projections' products sum in another order than the separate ones' may (Note [Joined
  // projections]): the same logits to fp32's rounding, not bit for bit.
  for (size_t k = 0; k < got_saved.size(); ++k) {
    EXPECT_LT(MaxRelErr(got_rebuilt[k], got_saved[k]), 1e-5) << "step " << k;
  }
  // One query-key-value and one gate-up matrix per layer, holding the same bytes as the separate ones did.
  std::map<std::string, int64_t> saved_names, rebuilt_names;
  for (const auto& t : (*saved)->NamedTensors()) saved_names[t.name] = t.bytes;
  for (const auto& t : (*rebuilt)->NamedTensors()) rebuilt_names[t.name] = t.bytes;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string layer = absl::StrCat("layer", l, ".");
    EXPECT_EQ(rebuilt_names.count(layer + "wq"), 0u);
    EXPECT_EQ(rebuilt_names.count(layer + "w_up"), 0u);
    EXPECT_EQ(rebuilt_names[layer + "wqkv"],
              saved_names[layer + "wq"] + saved_names[layer + "wk"] + saved_names[layer + "wv"]);
    EXPECT_EQ(rebuilt_names[layer + "w_gate_up"], saved_names[layer + "w_gate"] + saved_names[layer + "w_up"]);
  }
  EXPECT_EQ((*rebuilt)->parameter_bytes(), (*saved)->parameter_bytes());

  const std::string pt = dir_.Sub("rebuilt/model.pt");
  torch::jit::Module outer("Around");
  outer.register_attribute("training", c10::BoolType::get(), false);
  outer.register_module("inner", torch::jit::load(pt));
  outer.define(R"JIT(
def step(self, tokens, positions, kv_rows, d_rows, p_index, p_flat, p_rows, logit_ix, live: int,
         k_caches: List[Tensor], v_caches: List[Tensor]):
    return self.inner.step(tokens, positions, kv_rows, d_rows, p_index, p_flat, p_rows, logit_ix, live, k_caches,
                           v_caches)
)JIT");
  outer.save(pt);
  auto around = engine::ModelRunner::Create(dir_.Sub("rebuilt"), *yaml, 2);
  ASSERT_FALSE(around.ok());
  EXPECT_EQ(around.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(around.status().message(),
            absl::StrCat(pt, ": model.yaml says module: autouvm, but its weights do not make autouvm's Llama module: ",
                         "tok_embeddings: not in model.pt"));
  EXPECT_TRUE(engine::ModelRunner::Create(dir_.Sub("rebuilt"), as_saved, 2).ok()) << "as the user's module";
}

TEST_F(EngineTest, SequencesInAPoolOfBlocksTakeAndGiveBackBlocksAndMatchTheirFullForward) {
  const engine::ModelConfig c = SmallConfig("blocks", "fp32");
  ASSERT_TRUE(engine::WriteLlamaModel(c, 7, dir_.path()).ok());
  auto made = engine::ModelRunner::Create(dir_.Sub(c.name), c, 4, nullptr, {.tokens = 48, .block_tokens = 4});
  ASSERT_TRUE(made.ok()) << made.status();
  engine::ModelRunner& runner = **made;
  EXPECT_EQ(runner.kv_blocks(), 12);
  EXPECT_EQ(runner.kv_block_tokens(), 4);
  EXPECT_EQ(runner.kv_blocks_in_use(), 0) << "the load's probe gave its block back";
  const int64_t per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4;  // fp32 keys and values
  EXPECT_EQ(runner.kv_cache_bytes(), 13 * 4 * per_token) << "the pool and its null block";
  const size_t V = c.vocab_size;
  const std::vector<int32_t> a = {256, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8};  // 20: 5 blocks
  const std::vector<int32_t> b = {256, 2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 2, 3, 5, 3, 6, 0, 2};
  ASSERT_TRUE(runner.Prefill(0, a).ok());
  ASSERT_TRUE(runner.Prefill(1, absl::MakeConstSpan(b.data(), 20)).ok());
  EXPECT_EQ(runner.kv_blocks_in_use(), 10);
  // b needs a sixth block for its next 4 tokens and a third sequence 2 more: 13 > 12.
  const std::vector<int32_t> c_prompt = {256, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<engine::StepRunner::Row> too_many = {{.slot = 1, .tokens = {b.data() + 20, 4}, .start_pos = 20},
                                                         {.slot = 2, .tokens = c_prompt, .start_pos = 0}};
  std::vector<float> logits;
  const absl::Status full_pool = runner.Step(too_many, &logits);
  EXPECT_EQ(full_pool.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full_pool.message(),
            "the KV cache has 2 free blocks of 4 positions, the step needs 3 more (12 in the pool)");
  EXPECT_EQ(runner.kv_blocks_in_use(), 10) << "a refused step takes nothing";
  runner.Release(0);  // a ends: its 5 blocks go back
  EXPECT_EQ(runner.kv_blocks_in_use(), 5);
  ASSERT_TRUE(runner.Step(too_many, &logits).ok());
  EXPECT_EQ(runner.kv_blocks_in_use(), 8);
  auto full_b = runner.FullForward(b);
  auto full_c = runner.FullForward(c_prompt);
  ASSERT_TRUE(full_b.ok() && full_c.ok());
  ASSERT_EQ(logits.size(), 2 * V);
  EXPECT_LT(MaxRelErr(std::vector<float>(logits.begin(), logits.begin() + V),
                      std::vector<float>(full_b->end() - V, full_b->end())),
            1e-5);
  EXPECT_LT(MaxRelErr(std::vector<float>(logits.begin() + V, logits.end()),
                      std::vector<float>(full_c->end() - V, full_c->end())),
            1e-5)
      << "c, in blocks a gave back";
  // Decoding on across a block boundary: c's position 8 opens its third block.
  std::vector<int32_t> c_then = c_prompt;
  c_then.push_back(42);
  ASSERT_TRUE(runner.Decode({{2, 42, 8}}, &logits).ok());
  auto full_c_then = runner.FullForward(c_then);
  ASSERT_TRUE(full_c_then.ok());
  EXPECT_LT(MaxRelErr(logits, std::vector<float>(full_c_then->end() - V, full_c_then->end())), 1e-5);
  EXPECT_EQ(runner.kv_blocks_in_use(), 9);
  runner.Release(1);
  runner.Release(2);
  EXPECT_EQ(runner.kv_blocks_in_use(), 0);
}

TEST_F(EngineTest, RejectsAModelWhoseVocabDisagreesWithModelYaml) {
  engine::ModelConfig c = SmallConfig("vocab", "fp32");
  ASSERT_TRUE(engine::WriteLlamaModel(c, 1, dir_.path()).ok());
  c.vocab_size = 400;
  auto runner = engine::ModelRunner::Create(dir_.Sub("vocab"), c, 1);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(runner.status().message().find("vocab_size"), std::string::npos) << runner.status();
}

}  // namespace
}  // namespace autouvm::server
