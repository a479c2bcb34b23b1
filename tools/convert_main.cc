// autouvm-convert: imports a Hugging Face Llama-family checkpoint (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM; config.json, safetensors weights, tokenizer.json or tokenizer.model, the chat template) into a
// model repository entry (docs/model-contract.md). See tools/hf_import.h.
#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_join.h"
#include "tools/hf_import.h"

int main(int argc, char** argv) {
  autouvm::tools::HfImportOptions options;
  std::string hf_dir, repo = "models";
  CLI::App app{"Import a Hugging Face Llama-family checkpoint into an autouvmd model repository"};
  app.add_option("--hf", hf_dir,
                 "the checkpoint's directory (config.json, *.safetensors, tokenizer.json or tokenizer.model)")
      ->required();
  app.add_option("--repo", repo, "model repository directory")->capture_default_str();
  app.add_option("--name", options.name, "the model's name (its directory in the repository)")->required();
  app.add_option("--max-seq", options.max_seq, "KV-cache positions (default: max_position_embeddings, at most 4096)");
  app.add_option("--dtype", options.dtype, "fp32, bf16 or fp16 (default: the checkpoint's torch_dtype)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_flag("--byte-tokenizer", options.byte_tokenizer,
               "without a tokenizer.json or tokenizer.model, serve with the byte tokenizer (tests and diagnostics)");
  bool no_chat_template = false;
  app.add_flag("--no-chat-template", no_chat_template,
               "leave the checkpoint's chat template (chat_template.jinja, tokenizer_config.json) out of the entry");
  CLI11_PARSE(app, argc, argv);
  options.chat_template = !no_chat_template;
  auto model = autouvm::tools::ConvertHfModel(hf_dir, repo, options);
  if (!model.ok()) {
    std::cerr << "autouvm-convert: " << model.status().message() << "\n";
    return 1;
  }
  const auto& c = model->config;
  std::cout << "wrote " << repo << "/" << c.name << ": " << model->family << ", " << c.n_layers << " layers, dim "
            << c.dim << ", " << c.n_heads << " heads (" << c.n_kv_heads << " key/value), vocabulary " << c.vocab_size
            << ", " << c.dtype << ", max_seq " << c.max_seq << ", tokenizer " << c.tokenizer
            << (c.chat_template.empty() ? ", no chat template" : ", chat template " + c.chat_template_file)
            << (model->eos_ids.size() > 1 ? ", end-of-sequence ids " + absl::StrJoin(model->eos_ids, ", ") : "")
            << "\n";
  if (!model->tokenizer_note.empty()) std::cerr << "autouvm-convert: note: " << model->tokenizer_note << "\n";
  if (!model->chat_template_note.empty()) {
    std::cerr << "autouvm-convert: note: " << model->chat_template_note << "\n";
  }
  return 0;
}
