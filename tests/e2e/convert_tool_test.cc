// End-to-end: autouvm-convert (the binary) turns a Hugging Face checkpoint into an entry the real
// daemon serves. The checkpoint holds the weights of an entry autouvm-mkmodel's builder wrote (with
// biases, as Qwen2), under Hugging Face's names; the converted model must generate exactly the tokens
// the original does; with a byte-level BPE tokenizer.json beside it, the entry tokenizes prompts with
// it, and its chat template goes into the entry. A checkpoint that cannot be converted is refused by the
// binary, named, and leaves the repository as it was.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/llama_builder.h"
#include "tests/e2e/daemon_process.h"
#include "tests/testing/bpe_fixture.h"
#include "tests/testing/safetensors_writer.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {
namespace {

namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckResponse;

// `entry`'s parameters as a Qwen2 checkpoint in `dir` (config.json + model.safetensors); `skip` is left out.
void ExportAsQwen2(const engine::ModelConfig& c, const std::string& entry, const std::string& dir,
                   const std::string& skip = "") {
  torch::jit::Module m = torch::jit::load(entry + "/model.pt");
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : m.named_parameters()) {
    const std::string name = HfCheckpointName(p.name);
    if (name != skip) tensors.push_back({name, p.value});
  }
  WriteSafetensors(dir + "/model.safetensors", tensors);
  // As transformers 5 writes it: the rotary embedding under rope_parameters.
  nlohmann::json config = HfConfigJson(c, "Qwen2ForCausalLM", "qwen2", /*tied=*/false);
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  std::ofstream(dir + "/config.json") << config.dump(2);
}

TEST(ConvertToolE2E, AConvertedCheckpointGeneratesWhatTheOriginalDoes) {
  DaemonProcess d({.generate_default_model = false});
  engine::ModelConfig c = engine::DefaultTinyModelConfig("original");
  c.attention_bias = true;
  ASSERT_TRUE(engine::WriteLlamaModel(c, /*seed=*/11, d.repository()).ok());
  TempDir hf;
  ExportAsQwen2(c, d.repository() + "/original", hf.path());

  std::string out, err;
  ASSERT_EQ(RunCommand({AUTOUVM_CONVERT_PATH, "--hf", hf.path(), "--repo", d.repository(), "--name", "converted",
                        "--byte-tokenizer"},
                       &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("wrote " + d.repository() + "/converted: qwen2, 4 layers, dim 256"), std::string::npos) << out;

  // Refused: a tensor missing; nothing is written.
  TempDir broken;
  ExportAsQwen2(c, d.repository() + "/original", broken.path(), "model.layers.2.self_attn.v_proj.bias");
  EXPECT_EQ(RunCommand({AUTOUVM_CONVERT_PATH, "--hf", broken.path(), "--repo", d.repository(), "--name", "broken",
                        "--byte-tokenizer"},
                       &out, &err),
            1);
  EXPECT_NE(err.find("the checkpoint has no model.layers.2.self_attn.v_proj.bias"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(d.repository() + "/broken"));

  // With a byte-level BPE tokenizer.json beside it: served with that tokenizer (its template's bos); and
  // tokenizer_config.json's chat templates, of which "default" goes into the entry, said in a note.
  std::ofstream(hf.Sub("tokenizer.json")) << TokenizerJson().dump();
  const nlohmann::json templates = {
      {{"name", "default"}, {"template", "{% for m in messages %}{{ m.content + eos_token }}{% endfor %}"}},
      {{"name", "tool_use"}, {"template", "{{ tools|tojson }}"}}};
  std::ofstream(hf.Sub("tokenizer_config.json"))
      << nlohmann::json{{"eos_token", {{"content", "<|eot_id|>"}}}, {"chat_template", templates}}.dump();
  ASSERT_EQ(RunCommand({AUTOUVM_CONVERT_PATH, "--hf", hf.path(), "--repo", d.repository(), "--name", "converted-bpe"},
                       &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("tokenizer bpe, chat template chat_template.jinja"), std::string::npos) << out;
  EXPECT_NE(err.find("note: tokenizer_config.json has 2 chat templates (default, tool_use): took \"default\""),
            std::string::npos)
      << err;
  EXPECT_TRUE(fs::exists(d.repository() + "/converted-bpe/chat_template.jinja"));

  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  for (const std::string prompt : {"Hello, converted world", "x"}) {
    autouvm::v1::GenerateResponse original, converted;
    ASSERT_TRUE(CallGenerate(d, GreedyRequest("original", prompt, 24), &original).ok());
    ASSERT_TRUE(CallGenerate(d, GreedyRequest("converted", prompt, 24), &converted).ok()) << d.Log();
    ASSERT_EQ(original.token_ids_size(), 24);
    EXPECT_EQ(std::vector<int32_t>(converted.token_ids().begin(), converted.token_ids().end()),
              std::vector<int32_t>(original.token_ids().begin(), original.token_ids().end()))
        << prompt;
  }
  // "hello<|eot_id|>" is <|begin_of_text|>, "hello", <|eot_id|> to that tokenizer; generated ids decode
  // through it too.
  autouvm::v1::GenerateResponse bpe;
  ASSERT_TRUE(CallGenerate(d, GreedyRequest("converted-bpe", "hello<|eot_id|>", 8), &bpe).ok()) << d.Log();
  EXPECT_EQ(bpe.usage().prompt_tokens(), 3u);
  EXPECT_EQ(bpe.token_ids_size(), 8);
}

}  // namespace
}  // namespace autouvm::testing
