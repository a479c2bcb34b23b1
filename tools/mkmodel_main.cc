// autouvm-mkmodel: writes a Llama-architecture TorchScript model with seeded random weights as a model
// repository entry (<repo>/<name>/model.pt + model.yaml, with a ChatML-style chat template,
// engine::kDefaultChatTemplate, unless --no-chat-template). See docs/model-contract.md.
#include <CLI/CLI.hpp>
#include <iostream>

#include "engine/llama_builder.h"

int main(int argc, char** argv) {
  using autouvm::engine::ModelConfig;
  ModelConfig c = autouvm::engine::DefaultTinyModelConfig("tiny-llama");
  std::string repo = "models";
  uint64_t seed = 0;
  CLI::App app{"Write a Llama-architecture TorchScript model with random weights into a model repository"};
  app.add_option("--repo", repo, "model repository directory")->capture_default_str();
  app.add_option("--name", c.name, "model name (the entry's directory)")->capture_default_str();
  app.add_option("--vocab-size", c.vocab_size)->capture_default_str();
  app.add_option("--dim", c.dim, "hidden size")->capture_default_str();
  app.add_option("--layers", c.n_layers)->capture_default_str();
  app.add_option("--heads", c.n_heads)->capture_default_str();
  app.add_option("--kv-heads", c.n_kv_heads, "key/value heads (grouped-query attention)")->capture_default_str();
  app.add_option("--ffn-dim", c.ffn_dim, "SwiGLU hidden size")->capture_default_str();
  app.add_option("--max-seq", c.max_seq, "maximum sequence length (KV cache positions)")->capture_default_str();
  app.add_option("--rope-theta", c.rope_theta)->capture_default_str();
  app.add_option("--norm-eps", c.norm_eps)->capture_default_str();
  app.add_option("--dtype", c.dtype)->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  app.add_option("--bos-id", c.bos_id, "-1 for none")->capture_default_str();
  app.add_option("--eos-id", c.eos_id, "-1 for none")->capture_default_str();
  app.add_option("--tokenizer", c.tokenizer)->check(CLI::IsMember({"byte", "sentencepiece"}))->capture_default_str();
  app.add_flag("--attention-bias", c.attention_bias, "biases on the query, key and value projections (as Qwen2)");
  app.add_option("--seed", seed, "weight initialisation seed")->capture_default_str();
  bool no_chat_template = false;
  app.add_flag("--no-chat-template", no_chat_template,
               "write no chat template (default: a ChatML-style one, <|im_start|>role ... <|im_end|>)");
  bool at_load = false;
  app.add_flag("--generate-weights-at-load", at_load,
               "write placeholders; the weights are generated from --seed (>= 1) when the model loads");
  CLI11_PARSE(app, argc, argv);
  if (c.n_heads > 0) c.head_dim = c.dim / c.n_heads;
  if (no_chat_template) c.chat_template.clear();
  if (at_load) {
    if (seed == 0) {
      std::cerr << "autouvm-mkmodel: --generate-weights-at-load needs a --seed of at least 1\n";
      return 1;
    }
    c.generated_weights_seed = static_cast<int64_t>(seed);
  }
  if (auto s = autouvm::engine::WriteLlamaModel(c, seed, repo); !s.ok()) {
    std::cerr << "autouvm-mkmodel: " << s.message() << "\n";
    return 1;
  }
  std::cout << "wrote " << repo << "/" << c.name << "/model.pt and model.yaml\n";
  return 0;
}
