// tools/hf_import.h: Hugging Face checkpoints written by the test (config.json + safetensors, as
// save_pretrained lays them out) from a reference module's weights convert into an entry whose model
// computes exactly what the reference does — Llama, Mistral, Qwen2 (biases, tied embeddings), sharded,
// bf16 — and what cannot be converted faithfully is refused, named, leaving nothing behind.
#include "tools/hf_import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/llama_module.h"
#include "engine/torch_dtype.h"
#include "tests/testing/bpe_fixture.h"
#include "tests/testing/safetensors_writer.h"
#include "tests/testing/temp_dir.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::tools {
namespace {

namespace fs = std::filesystem;
using engine::ModelConfig;
using ::testing::HasSubstr;
using testing::TempDir;

struct Family {
  std::string architecture, model_type;
  bool bias = false, tied = false;
};

ModelConfig SmallConfig(const std::string& dtype, bool bias) {
  ModelConfig c;
  c.name = "reference";
  c.vocab_size = 300;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 96;
  c.max_seq = 64;
  c.rope_theta = 10000;
  c.norm_eps = 1e-6;
  c.dtype = dtype;
  c.bos_id = 1;
  c.eos_id = 2;
  c.tokenizer = "byte";
  c.attention_bias = bias;
  return c;
}

// A reference module with seeded random weights, kept by parameter name (the LM head the embedding
// when tied).
struct Reference {
  ModelConfig config;
  std::map<std::string, torch::Tensor> params;
  torch::jit::Module module;
};

Reference MakeReference(const ModelConfig& c, bool tied, uint64_t seed) {
  Reference r{c, {}, torch::jit::Module("empty")};
  torch::manual_seed(seed);
  const c10::ScalarType dtype = engine::TorchDtype(c.dtype);
  auto param = [&](const std::string& name, const std::vector<int64_t>& shape) -> absl::StatusOr<torch::Tensor> {
    torch::Tensor t = (shape.size() == 1 ? 1.0 + 0.1 * torch::randn(shape) : 0.2 * torch::randn(shape)).to(dtype);
    if (name == "lm_head" && tied) t = r.params.at("tok_embeddings").clone();
    r.params[name] = t;
    return t;
  };
  auto m = engine::BuildLlamaModule(c, param);
  EXPECT_TRUE(m.ok()) << m.status();
  r.module = *m;
  return r;
}

nlohmann::json HfConfig(const Reference& r, const Family& f) {
  return testing::HfConfigJson(r.config, f.architecture, f.model_type, f.tied);
}

// The reference's weights under their checkpoint names; `shards` > 1 splits them across files with an
// index, as save_pretrained does for large models.
void WriteCheckpoint(const std::string& dir, const Reference& r, const Family& f, int shards = 1) {
  std::ofstream(dir + "/config.json") << HfConfig(r, f).dump(2);
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> files(shards);
  size_t k = 0;
  for (const auto& [name, t] : r.params) {
    if (name == "lm_head" && f.tied) continue;
    files[k++ % shards].push_back({testing::HfCheckpointName(name), t});
  }
  if (shards == 1) {
    testing::WriteSafetensors(dir + "/model.safetensors", files[0]);
    return;
  }
  nlohmann::json map = nlohmann::json::object();
  for (int s = 0; s < shards; ++s) {
    const std::string file =
        "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    testing::WriteSafetensors(dir + "/" + file, files[s]);
    for (const auto& [name, t] : files[s]) map[name] = file;
  }
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
}

torch::Tensor Logits(torch::jit::Module& m) {
  const torch::Tensor tokens = torch::tensor({{1, 17, 250, 3, 99, 42, 7, 299}}, torch::kLong);
  return m.get_method("full")({tokens}).toTensor();
}

void ExpectConvertsExactly(const Reference& r, const Family& f, int shards) {
  SCOPED_TRACE(f.architecture + " " + r.config.dtype + " shards " + std::to_string(shards));
  TempDir hf, repo;
  WriteCheckpoint(hf.path(), r, f, shards);
  auto model = ReadHfConfig(hf.path(), {.name = "converted", .byte_tokenizer = true});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->config.attention_bias, f.bias);
  EXPECT_EQ(model->tied_embeddings, f.tied);
  ASSERT_TRUE(ConvertHfModel(hf.path(), repo.path(), {.name = "converted", .byte_tokenizer = true}).ok());
  auto yaml = engine::LoadModelConfig(repo.Sub("converted/model.yaml"));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_EQ(yaml->dim, r.config.dim);
  EXPECT_EQ(yaml->n_kv_heads, r.config.n_kv_heads);
  EXPECT_EQ(yaml->ffn_dim, r.config.ffn_dim);
  EXPECT_EQ(yaml->dtype, r.config.dtype);
  EXPECT_EQ(yaml->attention_bias, f.bias);
  EXPECT_EQ(yaml->eos_id, 2);
  torch::jit::Module converted = torch::jit::load(repo.Sub("converted/model.pt"));
  torch::jit::Module reference = r.module;
  const torch::Tensor want = Logits(reference), got = Logits(converted);
  EXPECT_TRUE(torch::equal(want, got)) << "max difference " << (want - got).abs().max().item<float>();
}

TEST(HfImportTest, EachFamilyConvertsToExactlyTheModelItsCheckpointHolds) {
  const std::vector<Family> families = {{"LlamaForCausalLM", "llama"},
                                        {"MistralForCausalLM", "mistral"},
                                        {"Qwen2ForCausalLM", "qwen2", /*bias=*/true, /*tied=*/true}};
  for (const Family& f : families) {
    ExpectConvertsExactly(MakeReference(SmallConfig("fp32", f.bias), f.tied, 7), f, 1);
  }
}

TEST(HfImportTest, ShardedBf16CheckpointsConvertExactly) {
  const Family qwen{"Qwen2ForCausalLM", "qwen2", true, false};
  ExpectConvertsExactly(MakeReference(SmallConfig("bf16", true), false, 8), qwen, 3);
  ExpectConvertsExactly(MakeReference(SmallConfig("bf16", false), false, 9), {"LlamaForCausalLM", "llama"}, 2);
}

// Anything the module would compute differently from the checkpoint's model is refused, named, and
// the repository is left as it was.
TEST(HfImportTest, WhatCannotBeConvertedFaithfullyIsRefusedNamed) {
  const Family llama{"LlamaForCausalLM", "llama"};
  const Reference r = MakeReference(SmallConfig("fp32", false), false, 3);
  struct Case {
    std::string what;
    std::function<void(const std::string& dir)> spoil;
    std::string says;
    bool byte_tokenizer = true;
  };
  auto edit_config = [&](std::function<void(nlohmann::json&)> change) {
    return [&r, &llama, change](const std::string& dir) {
      nlohmann::json j = HfConfig(r, llama);
      change(j);
      std::ofstream(dir + "/config.json") << j.dump();
    };
  };
  auto edit_tensors = [&](std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)> change) {
    return [&r, change](const std::string& dir) {
      std::vector<std::pair<std::string, torch::Tensor>> t;
      for (const auto& [name, v] : r.params) t.push_back({testing::HfCheckpointName(name), v});
      change(t);
      testing::WriteSafetensors(dir + "/model.safetensors", t);
    };
  };
  const std::vector<Case> cases = {
      {"a tensor missing", edit_tensors([](auto& t) {
         std::erase_if(t, [](const auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; });
       }),
       "the checkpoint has no model.layers.1.mlp.up_proj.weight"},
      {"a tensor of another shape", edit_tensors([](auto& t) {
         for (auto& [n, v] : t) {
           if (n == "model.layers.0.self_attn.k_proj.weight") v = torch::zeros({48, 64});
         }
       }),
       "model.layers.0.self_attn.k_proj.weight has shape [48, 64], config.json's dimensions give [32, 64]"},
      {"a tensor with no place", edit_tensors([](auto& t) {
         t.push_back({"model.layers.0.mlp.up_proj.bias", torch::zeros({96})});
       }),
       "has no place for: model.layers.0.mlp.up_proj.bias"},
      {"a quantized tensor", edit_tensors([](auto& t) {
         for (auto& [n, v] : t) {
           if (n == "model.norm.weight") v = torch::zeros({64}, torch::kLong);
         }
       }),
       "model.norm.weight: dtype I64"},
      {"another architecture", edit_config([](auto& j) { j["architectures"] = {"GPT2LMHeadModel"}; }),
       "architectures: \"GPT2LMHeadModel\" is not a Llama-family model"},
      {"yarn", edit_config([](auto& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
       }),
       "rope_scaling: type \"yarn\" is not supported"},
      {"gelu", edit_config([](auto& j) { j["hidden_act"] = "gelu"; }), "hidden_act: \"gelu\": only silu"},
      {"a biased output projection", edit_config([](auto& j) { j["attention_bias"] = true; }),
       "attention_bias: a bias on the output projection is not supported"},
      {"a short sliding window", edit_config([](auto& j) {
         j["architectures"] = {"MistralForCausalLM"};
         j["sliding_window"] = 16;
       }),
       "sliding_window: 16 positions, less than max_seq 64"},
      {"a mistyped key", edit_config([](auto& j) { j["num_hidden_layers"] = "two"; }),
       "num_hidden_layers: \"two\" is not an integer"},
      {"a missing key", edit_config([](auto& j) { j.erase("intermediate_size"); }), "intermediate_size: missing"},
      {"dimensions the contract refuses", edit_config([](auto& j) { j["num_key_value_heads"] = 3; }),
       "gives a model the contract refuses: n_kv_heads"},
      {"no tokenizer", [](const std::string&) {}, "no tokenizer.json or tokenizer.model", /*byte_tokenizer=*/false},
      {"a tokenizer.json that is no tokenizer",
       [](const std::string& dir) { std::ofstream(dir + "/tokenizer.json") << "{}"; }, "tokenizer.json: model: missing",
       /*byte_tokenizer=*/false},
      {"a tokenizer.json past the vocabulary",
       [](const std::string& dir) { std::ofstream(dir + "/tokenizer.json") << testing::TokenizerJson().dump(); },
       "tokenizer.json: ids up to 302, past config.json's vocab_size 300", /*byte_tokenizer=*/false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir hf, repo;
    WriteCheckpoint(hf.path(), r, llama);
    c.spoil(hf.path());
    const absl::Status s =
        ConvertHfModel(hf.path(), repo.path(), {.name = "m", .byte_tokenizer = c.byte_tokenizer}).status();
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.says));
    EXPECT_FALSE(fs::exists(repo.Sub("m"))) << "a refused conversion left an entry";
  }
  // An entry of that name is never overwritten.
  TempDir hf, repo;
  WriteCheckpoint(hf.path(), r, llama);
  fs::create_directories(repo.Sub("m"));
  const absl::Status s = ConvertHfModel(hf.path(), repo.path(), {.name = "m", .byte_tokenizer = true}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(fs::is_empty(repo.Sub("m")));
}

// generation_config.json's ids win over config.json's; every end-of-sequence id is kept; the
// sentencepiece model is carried over byte for byte.
TEST(HfImportTest, GenerationConfigAndTokenizerAreCarriedOver) {
  const Family llama{"LlamaForCausalLM", "llama"};
  Reference r = MakeReference(SmallConfig("fp32", false), false, 4);
  TempDir hf, repo;
  WriteCheckpoint(hf.path(), r, llama);
  std::ofstream(hf.Sub("generation_config.json")) << R"({"bos_token_id": 5, "eos_token_id": [6, 9]})";
  std::ofstream(hf.Sub("tokenizer.model"), std::ios::binary) << std::string("sentencepiece\0bytes", 19);
  auto m = ReadHfConfig(hf.path(), {.name = "m"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.bos_id, 5);
  EXPECT_EQ(m->config.eos_id, 6);
  EXPECT_EQ(m->eos_ids, (std::vector<int64_t>{6, 9}));
  EXPECT_EQ(m->config.tokenizer, "sentencepiece");
  ASSERT_TRUE(ConvertHfModel(hf.path(), repo.path(), {.name = "m"}).ok());
  std::ifstream copied(repo.Sub("m/tokenizer.model"), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(copied), {}), std::string("sentencepiece\0bytes", 19));
}

// Llama 2 and Mistral checkpoints ship both files: tokenizer.json is served, as transformers loads it (its
// leading spaces and special tokens are what the model saw); a tokenizer.json that cannot be served
// leaves tokenizer.model, with a note of why.
TEST(HfImportTest, TokenizerJsonIsPreferredToTokenizerModel) {
  const Family llama{"LlamaForCausalLM", "llama"};
  Reference r = MakeReference(SmallConfig("fp32", false), false, 4);
  TempDir hf, repo;
  WriteCheckpoint(hf.path(), r, llama);
  std::ofstream(hf.Sub("tokenizer.model"), std::ios::binary) << std::string("sentencepiece\0bytes", 19);
  std::ofstream(hf.Sub("tokenizer.json")) << testing::SentencePieceStyleJson("llama2").dump();
  auto m = ConvertHfModel(hf.path(), repo.path(), {.name = "m"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.tokenizer, "bpe");
  EXPECT_EQ(m->config.bos_id, testing::kSpBos);
  EXPECT_EQ(m->tokenizer_note, "");
  auto yaml = engine::LoadModelConfig(repo.Sub("m/model.yaml"));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  auto tokenizer = tokenizer::CreateTokenizer(engine::TokenizerSpecOf(*yaml), repo.Sub("m"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(*(*tokenizer)->Encode("hello</s>"), (std::vector<int32_t>{testing::kSpMetaHello, testing::kSpEos}));

  nlohmann::json unigram = testing::SentencePieceStyleJson("llama2");
  unigram["model"]["type"] = "Unigram";
  std::ofstream(hf.Sub("tokenizer.json")) << unigram.dump();
  auto fallback = ReadHfConfig(hf.path(), {.name = "m2"});
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->config.tokenizer, "sentencepiece");
  EXPECT_THAT(fallback->tokenizer_note, HasSubstr("model.type: \"Unigram\": only BPE"));
  std::filesystem::remove(hf.Sub("tokenizer.model"));
  EXPECT_THAT(std::string(ReadHfConfig(hf.path(), {.name = "m3"}).status().message()),
              HasSubstr("tokenizer.json: model.type"));
}

// The rotary embedding as transformers 5 writes it (rope_parameters) and as earlier versions did
// (rope_theta, rope_scaling).
TEST(HfImportTest, RopeParametersOfEitherVersionAreRead) {
  const Family llama{"LlamaForCausalLM", "llama"};
  const Reference r = MakeReference(SmallConfig("fp32", false), false, 5);
  TempDir hf;
  WriteCheckpoint(hf.path(), r, llama);
  auto write = [&](std::function<void(nlohmann::json&)> change) {
    nlohmann::json j = HfConfig(r, llama);
    j.erase("rope_theta");
    change(j);
    std::ofstream(hf.Sub("config.json")) << j.dump();
  };
  write([](nlohmann::json& j) {
    j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                            {"factor", 8.0},           {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  });
  auto m = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_DOUBLE_EQ(m->config.rope_theta, 500000.0);
  EXPECT_EQ(m->config.rope_scaling, "llama3");
  EXPECT_DOUBLE_EQ(m->config.rope_scaling_factor, 8.0);
  EXPECT_EQ(m->config.rope_original_max_seq, 32);
  write([](nlohmann::json& j) { j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}}; });
  m = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_DOUBLE_EQ(m->config.rope_theta, 1e6);
  EXPECT_EQ(m->config.rope_scaling, "none");
  write([](nlohmann::json& j) {
    j["rope_theta"] = 250000.0;
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  });
  m = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_DOUBLE_EQ(m->config.rope_theta, 250000.0);
  EXPECT_EQ(m->config.rope_scaling, "linear");
  EXPECT_DOUBLE_EQ(m->config.rope_scaling_factor, 2.0);
  write([](nlohmann::json& j) { j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}}; });
  EXPECT_THAT(std::string(ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true}).status().message()),
              HasSubstr("rope_parameters: type \"yarn\" is not supported"));
}

// The entry's dtype is the checkpoint's: transformers writes it as "dtype" since 4.56 and as
// "torch_dtype" before (the hf_verify run on the GPU host found transformers 5 checkpoints converted to
// fp32, twice their size, when only "torch_dtype" was read).
TEST(HfImportTest, TheCheckpointsDtypeIsReadUnderEitherName) {
  const Family llama{"LlamaForCausalLM", "llama"};
  const Reference r = MakeReference(SmallConfig("fp32", false), false, 5);
  TempDir hf;
  WriteCheckpoint(hf.path(), r, llama);
  auto dtype_of = [&](const nlohmann::json& keys) -> std::string {
    nlohmann::json j = HfConfig(r, llama);
    j.update(keys);
    std::ofstream(hf.Sub("config.json")) << j.dump();
    auto m = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true});
    return m.ok() ? m->config.dtype : std::string(m.status().message());
  };
  EXPECT_EQ(dtype_of({{"dtype", "bfloat16"}}), "bf16");
  EXPECT_EQ(dtype_of({{"torch_dtype", "float16"}}), "fp16");
  EXPECT_EQ(dtype_of({{"dtype", "bfloat16"}, {"torch_dtype", "float32"}}), "bf16");
  EXPECT_EQ(dtype_of(nlohmann::json::object()), "fp32");
  EXPECT_THAT(dtype_of({{"dtype", "int8"}}), HasSubstr("dtype: \"int8\": give the dtype to convert to"));
}

// A byte-level BPE tokenizer.json (Llama 3, Qwen2) is checked, carried over and served by; its template
// decides the bos; every end-of-sequence id of generation_config.json stops generation.
TEST(HfImportTest, ATokenizerJsonIsCheckedAndCarriedOver) {
  const Family llama{"LlamaForCausalLM", "llama"};
  ModelConfig c = SmallConfig("fp32", false);
  c.vocab_size = 320;
  const Reference r = MakeReference(c, false, 6);
  TempDir hf, repo;
  WriteCheckpoint(hf.path(), r, llama);
  std::ofstream(hf.Sub("tokenizer.json")) << testing::TokenizerJson().dump();
  std::ofstream(hf.Sub("generation_config.json")) << R"({"bos_token_id": 1, "eos_token_id": [301, 2]})";
  ASSERT_TRUE(ConvertHfModel(hf.path(), repo.path(), {.name = "m"}).ok());
  auto yaml = engine::LoadModelConfig(repo.Sub("m/model.yaml"));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_EQ(yaml->tokenizer, "bpe");
  EXPECT_EQ(yaml->bos_id, testing::kBegin);  // the template's, not generation_config's
  EXPECT_EQ(yaml->eos_id, 301);
  EXPECT_EQ(yaml->extra_eos_ids, (std::vector<int64_t>{2}));
  auto tokenizer = tokenizer::CreateTokenizer(engine::TokenizerSpecOf(*yaml), repo.Sub("m"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->kind(), "bpe");
  EXPECT_EQ(*(*tokenizer)->Encode("hello<|eot_id|>"), (std::vector<int32_t>{testing::kHello, testing::kEot}));
}

// Llama 3.1's rotary scaling, against its definition computed here in double precision.
TEST(HfImportTest, Llama3RopeScalingFollowsItsDefinition) {
  ModelConfig c = SmallConfig("fp32", false);
  c.head_dim = 64;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.rope_theta = 500000;
  c.rope_scaling = "llama3";
  c.rope_scaling_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_seq = 8192;
  const auto [cos, sin] = engine::RopeTables(c);
  ASSERT_EQ(cos.sizes().vec(), (std::vector<int64_t>{c.max_seq, 32}));
  int scaled = 0, kept = 0, blended = 0;
  for (int64_t i = 0; i < 32; ++i) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * i / 64);
    const double wavelen = 2 * M_PI / f, low = 8192.0 / 1, high = 8192.0 / 4;
    double g = f;
    if (wavelen > low) {
      g = f / 8, ++scaled;
    } else if (wavelen >= high) {
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      g = (1 - smooth) * f / 8 + smooth * f, ++blended;
    } else {
      ++kept;
    }
    for (const int64_t pos : {1, 17, 63}) {
      EXPECT_NEAR(cos[pos][i].item<double>(), std::cos(pos * g), 2e-5) << i << " " << pos;
      EXPECT_NEAR(sin[pos][i].item<double>(), std::sin(pos * g), 2e-5) << i << " " << pos;
    }
  }
  EXPECT_GT(scaled, 0);  // the three regimes all occur at these parameters
  EXPECT_GT(kept, 0);
  EXPECT_GT(blended, 0);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The chat template travels into the entry as chat_template.jinja, byte for byte, from
// tokenizer_config.json (a string, or named templates: "default", else the first, said in a note) or from
// chat_template.jinja, which transformers reads in its place; bos and eos texts as strings or AddedTokens.
TEST(HfImportTest, TheChatTemplateIsCarriedOver) {
  const Family llama{"LlamaForCausalLM", "llama"};
  Reference r = MakeReference(SmallConfig("fp32", false), false, 4);
  TempDir hf, repo;
  WriteCheckpoint(hf.path(), r, llama);
  const std::string tools = "{% for m in messages %}[{{ m.role }}]{% endfor %}";
  const std::string chat = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}\n";
  nlohmann::json tokenizer_config = {
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}}},
      {"eos_token", "</s>"},
      {"chat_template", {{{"name", "tool_use"}, {"template", tools}}, {{"name", "default"}, {"template", chat}}}}};
  std::ofstream(hf.Sub("tokenizer_config.json")) << tokenizer_config.dump();
  auto m = ConvertHfModel(hf.path(), repo.path(), {.name = "m", .byte_tokenizer = true});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->chat_template_note, HasSubstr("2 chat templates (tool_use, default): took \"default\""));
  EXPECT_EQ(ReadAll(repo.Sub("m/chat_template.jinja")), chat);
  EXPECT_THAT(ReadAll(repo.Sub("m/model.yaml")), HasSubstr("chat_template_file: chat_template.jinja"));
  auto yaml = engine::LoadModelConfig(repo.Sub("m/model.yaml"));
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_EQ(yaml->chat_template, chat);
  EXPECT_EQ(yaml->bos_token, "<s>");
  EXPECT_EQ(yaml->eos_token, "</s>");

  // Named templates without a "default": the first.
  tokenizer_config["chat_template"] = {{{"name", "tool_use"}, {"template", tools}},
                                       {{"name", "rag"}, {"template", chat}}};
  std::ofstream(hf.Sub("tokenizer_config.json")) << tokenizer_config.dump();
  m = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.chat_template, tools);
  EXPECT_THAT(m->chat_template_note, HasSubstr("took the first, \"tool_use\""));

  // chat_template.jinja comes first, as transformers reads it.
  const std::string jinja = "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{%- endfor %}";
  std::ofstream(hf.Sub("chat_template.jinja"), std::ios::binary) << jinja;
  m = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.chat_template, jinja);
  EXPECT_EQ(m->config.chat_template_file, "chat_template.jinja");
  EXPECT_THAT(m->chat_template_note, HasSubstr("took chat_template.jinja"));
  // ... and can be left out.
  m = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true, .chat_template = false});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.chat_template, "");
  EXPECT_EQ(m->config.chat_template_file, "");
}

TEST(HfImportTest, AChatTemplateThatCannotBeServedIsRefusedNamed) {
  const Family llama{"LlamaForCausalLM", "llama"};
  Reference r = MakeReference(SmallConfig("fp32", false), false, 4);
  TempDir hf, repo;
  WriteCheckpoint(hf.path(), r, llama);
  std::ofstream(hf.Sub("tokenizer_config.json"))
      << R"({"chat_template": "line 1\n{% for m in messages %}\n{{ m.content }"})";
  const absl::Status s = ConvertHfModel(hf.path(), repo.path(), {.name = "m", .byte_tokenizer = true}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tokenizer_config.json: chat_template: chat template line 3"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--no-chat-template"));
  EXPECT_FALSE(fs::exists(repo.Sub("m")));
  for (const char* bad : {R"({"bos_token": 1})", R"({"eos_token": {"text": "</s>"}})", R"({"chat_template": 7})",
                          R"({"chat_template": [{"name": "default"}]})"}) {
    SCOPED_TRACE(bad);
    std::ofstream(hf.Sub("tokenizer_config.json")) << bad;
    const absl::Status b = ReadHfConfig(hf.path(), {.name = "m", .byte_tokenizer = true}).status();
    EXPECT_EQ(b.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(b.message()), HasSubstr("tokenizer_config.json: "));
  }
}

}  // namespace
}  // namespace autouvm::tools
