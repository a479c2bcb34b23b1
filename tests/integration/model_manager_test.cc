// server/model_manager.h and model chat templates: every model's template is parsed once at load and
// reaches requests through ReadyTarget — inline in model.yaml (the embedded default model's), from a
// chat_template_file, none — with the bos and eos texts it sees; a template that does not parse fails
// that model alone, naming the model, the file and the template's line, and the others serve.
#include "server/model_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/clock.h"
#include "engine/llama_builder.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::server {
namespace {

using ::testing::HasSubstr;

engine::ModelConfig Small(const std::string& name) {
  engine::ModelConfig c = engine::DefaultTinyModelConfig(name);
  c.dim = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 16;
  c.ffn_dim = 32;
  c.max_seq = 32;
  return c;
}

const nlohmann::ordered_json kChat = {{"messages", {{{"role", "user"}, {"content", "Hi ✓"}}}},
                                      {"add_generation_prompt", true}};

TEST(ModelManagerTest, ChatTemplatesAreParsedAtLoadAndReachRequests) {
  testing::TempDir repo;
  ServerConfig config;
  config.model_repository = repo.path();
  config.generate_default_model = "tiny-llama";
  config.profiling = false;

  // From a file beside model.yaml, with the texts the template sees.
  engine::ModelConfig filed = Small("filed");
  filed.chat_template =
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}{{ eos_token }}";
  filed.chat_template_file = "chat_template.jinja";
  filed.bos_token = "<s>";
  filed.eos_token = "</s>";
  ASSERT_TRUE(engine::WriteLlamaModel(filed, 1, repo.path()).ok());
  engine::ModelConfig none = Small("none");
  none.chat_template.clear();
  ASSERT_TRUE(engine::WriteLlamaModel(none, 1, repo.path()).ok());
  // A template that does not parse, on its third line.
  engine::ModelConfig broken = Small("broken");
  broken.chat_template = "{% for m in messages %}\n{{ m.content }}\n{% endfor %}{% if x %}";
  ASSERT_TRUE(engine::WriteLlamaModel(broken, 1, repo.path()).ok());

  base::RealClock clock;
  ModelManager manager(config, &clock);
  ASSERT_TRUE(manager.LoadAll().ok());

  auto tiny = manager.ReadyTarget("tiny-llama");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  ASSERT_NE(tiny->chat_template, nullptr);
  auto prompt = tiny->chat_template->Render(kChat);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, "<|im_start|>user\nHi ✓<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tiny->bos_token, "");  // the byte tokenizer's bos has no text

  auto from_file = manager.ReadyTarget("filed");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  ASSERT_NE(from_file->chat_template, nullptr);
  EXPECT_EQ(from_file->bos_token, "<s>");
  EXPECT_EQ(from_file->eos_token, "</s>");
  nlohmann::ordered_json context = kChat;
  context["bos_token"] = from_file->bos_token;
  context["eos_token"] = from_file->eos_token;
  prompt = from_file->chat_template->Render(context);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, "<s>[user] Hi ✓</s>");

  auto without = manager.ReadyTarget("none");
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->chat_template, nullptr);

  const absl::Status failed = manager.ReadyTarget("broken").status();
  EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.message(), HasSubstr("model 'broken' failed to load"));
  EXPECT_THAT(failed.message(), HasSubstr("broken/model.yaml: chat_template: chat template line 3"));
  manager.Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace autouvm::server
